//! The collector with real parts: TLS (certificates made with rcgen), a throwaway PostgreSQL
//! (`pg-scratch`), sensors' links (`sensor::uplink`) behind real CDR writers with their
//! journals, and a network namespace for a connection from an address that is not loopback.
//! No test asserts a timing: waits are for an outcome, with a generous bound.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cdr::{CdrCall, CdrRecord, CdrStore, CdrStream, CdrWriter, CdrWriterConfig, PgStore};
use collector::{Collector, CollectorHandle, PcapFetchError, SensorList, Settings, sensors_file};
use sensor::uplink::{CollectorLink, Uplink};

/// A throwaway PostgreSQL, or a skip.
fn postgres() -> Option<pg_scratch::PgServer> {
    match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => Some(s),
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            None
        }
        Err(e) => panic!("starting a throwaway PostgreSQL: {e}"),
    }
}

/// A CA, the collector's certificate from it, and client certificates on request.
struct Pki {
    dir: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca: PathBuf,
    server: (PathBuf, PathBuf),
}

impl Pki {
    fn new(dir: &Path, server_names: &[&str]) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tandem test CA");
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).unwrap();
        let issuer = rcgen::Issuer::new(params, ca_key);
        let mut pki = Pki {
            dir: dir.to_path_buf(),
            issuer,
            ca,
            server: (PathBuf::new(), PathBuf::new()),
        };
        pki.server = pki.issue("collector", server_names);
        pki
    }

    /// A certificate with common name `cn` (and these names), signed by the CA.
    fn issue(&self, cn: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{cn}.pem")),
            self.dir.join(format!("{cn}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A collector on a runtime of its own, stopped on drop.
struct Running {
    handle: CollectorHandle,
    addr: SocketAddr,
    registry: Arc<prometheus_client::registry::Registry>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(
        settings: Settings,
        tls: Option<(PathBuf, PathBuf)>,
        data: &Path,
        listener: std::net::TcpListener,
    ) -> Running {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let data = data.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut registry = prometheus_client::registry::Registry::default();
                let c = Collector::with_listener(&settings, tls, &data, listener, &mut registry)
                    .expect("collector starts");
                tx.send((c.handle(), c.local_addr().unwrap(), Arc::new(registry)))
                    .unwrap();
                c.serve(async {
                    let _ = stop_rx.await;
                })
                .await;
            });
        });
        let (handle, addr, registry) = rx.recv().expect("the collector started");
        Running {
            handle,
            addr,
            registry,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    fn metrics(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }

    /// The value of one series of `/metrics`, 0 when absent.
    fn metric(&self, series: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn loopback_listener(addr: &str) -> std::net::TcpListener {
    std::net::TcpListener::bind(addr).unwrap()
}

fn settings(postgres: &str) -> Settings {
    Settings {
        listen: "127.0.0.1:0".into(),
        postgres: postgres.into(),
        heartbeat_interval_ms: 500,
        reconnect_min_ms: 50,
        reconnect_max_ms: 1_000,
        // The calls are of June 2025: the default retention (90 days) would drop them at the
        // next connection.
        retention_days: 0,
        ..Settings::default()
    }
}

/// How a test sensor reaches the collector.
struct SensorSide<'a> {
    name: &'a str,
    token: Option<String>,
    ca: Option<&'a Path>,
    client: Option<(PathBuf, PathBuf)>,
}

fn link(dir: &Path, addr: SocketAddr, s: &SensorSide) -> CollectorLink {
    let host = if s.ca.is_some() {
        format!("localhost:{}", addr.port())
    } else {
        addr.to_string()
    };
    let mut link = CollectorLink::new(&host, s.name);
    if let Some(t) = &s.token {
        let f = dir.join(format!("{}.token", s.name));
        std::fs::write(&f, format!("{t}\n")).unwrap();
        link.token_file = Some(f);
    }
    link.ca_file = s.ca.map(Path::to_path_buf);
    if let Some((c, k)) = &s.client {
        link.client_cert = Some(c.clone());
        link.client_key = Some(k.clone());
    }
    link.connect_timeout_ms = 2_000;
    link.heartbeat_interval_ms = 500;
    link.reconnect_min_ms = 50;
    link.reconnect_max_ms = 1_000;
    link
}

/// A sensor's CDR writer whose store is the link, journaling in `dir`.
fn sensor_writer(dir: &Path, link: CollectorLink) -> (CdrWriter, Arc<Uplink>) {
    let uplink = Arc::new(Uplink::start(link.clone(), None).expect("link starts"));
    let opener = uplink.clone();
    let cfg = CdrWriterConfig {
        sensor: link.sensor.clone(),
        batch_records_max: 200,
        batch_delay_ms: 20,
        reconnect_min_ms: 50,
        reconnect_max_ms: 1_000,
        ..CdrWriterConfig::new(dir.join(format!("{}.journal", link.sensor)))
    };
    let writer = CdrWriter::start(cfg, move || opener.open_store()).expect("writer starts");
    uplink.set_stats(writer.watch());
    (writer, uplink)
}

/// Call `i` of a sensor, with two streams.
fn call(prefix: &str, i: u64) -> CdrRecord {
    let start_us = 1_750_000_000_000_000 + i as i64 * 1_000;
    let stream = |src: &str, dst: &str| CdrStream {
        call_id: Some(format!("{prefix}-{i}@test")),
        src: src.into(),
        dst: dst.into(),
        ssrc: i as u32,
        payload: "PCMA".into(),
        start_us,
        end_us: start_us + 60_000_000,
        packets: 3_000,
        mean_jitter_ms: 0.25 + i as f64 / 7.0,
        mos: Some(4.3),
        ..CdrStream::default()
    };
    CdrRecord::call(
        CdrCall {
            call_id: format!("{prefix}-{i}@test"),
            caller: "1001".into(),
            called: "1002".into(),
            caller_addr: "10.0.0.1:5060".into(),
            callee_addr: "10.0.0.2:5060".into(),
            start_us,
            end_us: Some(start_us + 60_000_000),
            state: "answered".into(),
            last_response: Some(200),
            last_reason: "OK".into(),
            ..CdrCall::default()
        },
        vec![
            stream("10.0.0.1:4000", "10.0.0.2:4002"),
            stream("10.0.0.2:4002", "10.0.0.1:4000"),
        ],
    )
}

/// Waits until the writer has delivered `total` records and holds none; panics with its
/// counters if that does not happen within a bound far beyond what it needs.
fn wait_delivered(w: &CdrWriter, total: u64) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let s = w.stats();
        if s.written_records >= total && s.journal_records == 0 && s.queue_records == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "not delivered: {s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (rows, distinct uids, rows whose uid starts with `sensor|`) of `sensor` in `cdr`, and its
/// stream rows.
fn stored(conninfo: &str, sensor: &str) -> (i64, i64, i64, i64) {
    let mut c = postgres::Client::connect(conninfo, postgres::NoTls).unwrap();
    let r = c
        .query_one(
            "SELECT count(*), count(DISTINCT uid), count(*) FILTER (WHERE uid LIKE $1 || '|%') \
             FROM cdr WHERE sensor = $1",
            &[&sensor],
        )
        .unwrap();
    let streams: i64 = c
        .query_one(
            "SELECT count(*) FROM cdr_rtp WHERE uid LIKE $1 || '|%'",
            &[&sensor],
        )
        .unwrap()
        .get(0);
    (r.get(0), r.get(1), r.get(2), streams)
}

fn add_sensor(data: &Path, name: &str) -> String {
    SensorList::open(&sensors_file(data))
        .unwrap()
        .add(name)
        .unwrap()
}

/// Three sensors, two with tokens and one with a client certificate, deliver over TLS to one
/// collector: every CDR once, under its own sensor's name, also one that claims another's uid.
#[test]
fn several_sensors_over_tls_store_every_cdr_once_under_their_own_name() {
    let Some(pg) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("collector");
    std::fs::create_dir_all(&data).unwrap();
    let pki = Pki::new(dir.path(), &["localhost"]);
    let mut s = settings(&pg.conninfo());
    s.client_ca = pki.ca.display().to_string();
    let running = Running::start(
        s,
        Some(pki.server.clone()),
        &data,
        loopback_listener("127.0.0.1:0"),
    );
    let token_a = add_sensor(&data, "site-a");
    let token_b = add_sensor(&data, "site-b");
    add_sensor(&data, "site-c");
    let sides = [
        SensorSide {
            name: "site-a",
            token: Some(token_a),
            ca: Some(&pki.ca),
            client: None,
        },
        SensorSide {
            name: "site-b",
            token: Some(token_b),
            ca: Some(&pki.ca),
            client: None,
        },
        SensorSide {
            name: "site-c",
            token: None,
            ca: Some(&pki.ca),
            client: Some(pki.issue("site-c", &[])),
        },
    ];
    let n = 1_500u64;
    std::thread::scope(|scope| {
        for side in &sides {
            let (dir, running, pg) = (dir.path(), &running, &pg);
            scope.spawn(move || {
                let (writer, uplink) = sensor_writer(dir, link(dir, running.addr, side));
                for i in 0..n {
                    writer.submit(call(side.name, i));
                }
                if side.name == "site-a" {
                    // A record that claims to be another sensor's.
                    let mut forged = call("forged", 0);
                    forged.uid = "site-b|forged-0@test|1".into();
                    forged.call.as_mut().unwrap().sensor = "site-b".into();
                    writer.submit(forged);
                }
                let total = n + u64::from(side.name == "site-a");
                wait_delivered(&writer, total);
                let stats = writer.close();
                assert_eq!(stats.dropped_records, 0);
                assert_eq!(uplink.summary().acknowledged_records, total);
                let (rows, uids, own, streams) = stored(&pg.conninfo(), side.name);
                assert_eq!(
                    (rows, uids, own),
                    (total as i64, total as i64, total as i64)
                );
                assert_eq!(streams, 2 * total as i64, "each call's two streams, once");
            });
        }
    });
    // The forged record is site-a's: its uid was put under site-a's name.
    let mut c = postgres::Client::connect(&pg.conninfo(), postgres::NoTls).unwrap();
    let row = c
        .query_one(
            "SELECT sensor, uid FROM cdr WHERE call_id = 'forged-0@test'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "site-a");
    assert_eq!(row.get::<_, String>(1), "site-a|site-b|forged-0@test|1");
    let sensors = running.handle.sensors();
    assert_eq!(sensors.len(), 3);
    for s in &sensors {
        assert!(s.records_stored >= n, "{s:?}");
        assert_eq!(s.records_received, s.records_stored, "{s:?}");
    }
    assert_eq!(
        running.metric("tandem_collector_sessions_accepted_total"),
        3,
        "{}",
        running.metrics()
    );
    assert!(
        running
            .metrics()
            .contains("tandem_collector_sensor_records_stored_total{sensor=\"site-c\"} 1500")
    );
}

/// PostgreSQL stopped for 10 s, then the collector stopped and started again, while a sensor
/// keeps delivering: every CDR is stored once.
#[test]
fn a_database_outage_and_a_collector_restart_lose_nothing() {
    let Some(pg) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("collector");
    std::fs::create_dir_all(&data).unwrap();
    let token = add_sensor(&data, "edge");
    let running = Running::start(
        settings(&pg.conninfo()),
        None,
        &data,
        loopback_listener("127.0.0.1:0"),
    );
    let addr = running.addr;
    let side = SensorSide {
        name: "edge",
        token: Some(token),
        ca: None,
        client: None,
    };
    let (writer, _uplink) = sensor_writer(dir.path(), link(dir.path(), addr, &side));
    let done = AtomicBool::new(false);
    let submitted = std::thread::scope(|scope| {
        let feeder = scope.spawn(|| {
            let mut i = 0u64;
            let mut round = 0u64;
            while !done.load(Ordering::Relaxed) {
                // Now and then a burst of several batches, which the link pipelines (the
                // next batch sent before the last is acknowledged): the outages meet batches
                // in flight too.
                let n = if round.is_multiple_of(25) { 1_000 } else { 20 };
                for _ in 0..n {
                    writer.submit(call("edge", i));
                    i += 1;
                }
                round += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            i
        });
        std::thread::sleep(Duration::from_secs(2));
        pg.stop_fast().unwrap();
        std::thread::sleep(Duration::from_secs(10));
        pg.start_again().unwrap();
        std::thread::sleep(Duration::from_secs(2));
        // The collector goes away and comes back on the same address.
        drop(running);
        std::thread::sleep(Duration::from_secs(1));
        let again = Running::start(
            settings(&pg.conninfo()),
            None,
            &data,
            loopback_listener(&addr.to_string()),
        );
        std::thread::sleep(Duration::from_secs(2));
        done.store(true, Ordering::Relaxed);
        let n = feeder.join().unwrap();
        wait_delivered(&writer, n);
        assert!(again.metric("tandem_collector_records_stored_total") > 0);
        n
    });
    let stats = writer.close();
    assert_eq!(stats.dropped_records, 0, "{stats:?}");
    assert!(
        stats.journaled_records > 0 && stats.replayed_records > 0,
        "the outage went through the journal: {stats:?}"
    );
    let (rows, uids, own, streams) = stored(&pg.conninfo(), "edge");
    assert_eq!(
        (rows, uids, own),
        (submitted as i64, submitted as i64, submitted as i64)
    );
    assert_eq!(streams, 2 * submitted as i64);
}

/// The reason a link's store gives when the collector refuses it.
fn refused(dir: &Path, addr: SocketAddr, side: &SensorSide) -> String {
    let uplink = Arc::new(Uplink::start(link(dir, addr, side), None).unwrap());
    match uplink.open_store() {
        Ok(_) => panic!("{} was let in", side.name),
        Err(e) => e.to_string(),
    }
}

/// A wrong token, an unknown sensor, a certificate for another name and plain TCP from an
/// address that is not loopback are refused, each with its reason, and counted.
#[test]
fn wrong_token_unknown_sensor_and_plain_tcp_from_afar_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("collector");
    std::fs::create_dir_all(&data).unwrap();
    let pki = Pki::new(dir.path(), &["localhost"]);
    add_sensor(&data, "known");
    // No record is sent: the database is never reached.
    let mut s = settings("host=127.0.0.1 port=1 user=nobody");
    s.client_ca = pki.ca.display().to_string();
    let running = Running::start(
        s,
        Some(pki.server.clone()),
        &data,
        loopback_listener("127.0.0.1:0"),
    );
    let e = refused(
        dir.path(),
        running.addr,
        &SensorSide {
            name: "known",
            token: Some("0".repeat(64)),
            ca: Some(&pki.ca),
            client: None,
        },
    );
    assert!(e.contains("wrong token for sensor \"known\""), "{e}");
    let e = refused(
        dir.path(),
        running.addr,
        &SensorSide {
            name: "stranger",
            token: Some("0".repeat(64)),
            ca: Some(&pki.ca),
            client: None,
        },
    );
    assert!(
        e.contains("unknown sensor \"stranger\"") && e.contains("tandem sensor add stranger"),
        "{e}"
    );
    let e = refused(
        dir.path(),
        running.addr,
        &SensorSide {
            name: "known",
            token: Some("0".repeat(64)),
            ca: Some(&pki.ca),
            client: Some(pki.issue("intruder", &[])),
        },
    );
    assert!(e.contains("certificate is for \"intruder\""), "{e}");
    // Each refusal counted under its reason. A refused link tries again after its backoff
    // (and `open_store` may ask for one more attempt), so a reason may count more than once.
    for reason in ["bad_token", "unknown_sensor", "certificate"] {
        let n = running.metric(&format!(
            "tandem_collector_refused_total{{reason=\"{reason}\"}}"
        ));
        assert!(n >= 1, "{reason}: {}", running.metrics());
    }

    // Plain TCP from an address of this machine that is not loopback: in a network namespace
    // of our own, the collector listens on a veth address and a client connects to it.
    if let Some(why) = afpacket::netns::VethPair::unavailable() {
        test_env::skip(&format!("plain TCP from afar: {why}"));
        return;
    }
    let pair = afpacket::netns::VethPair::create().expect("namespace");
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(["-n", &pair.namespace])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["addr", "add", "10.77.0.1/24", "dev", &pair.a]);
    ip(&["addr", "add", "10.77.0.2/24", "dev", &pair.b]);
    let listener = pair
        .in_namespace(|| std::net::TcpListener::bind("10.77.0.1:0"))
        .unwrap()
        .unwrap();
    let far = Running::start(
        settings("host=127.0.0.1 port=1 user=nobody"),
        Some(pki.server.clone()),
        &data.join("far"),
        listener,
    );
    let addr = far.addr;
    let answer = pair
        .in_namespace(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr)?;
            let mut hello = Vec::new();
            uplink::encode(
                &uplink::Message::Hello(uplink::Hello {
                    version: uplink::PROTOCOL_VERSION,
                    sensor: "known".into(),
                    token: "0".repeat(64),
                    clock_us: 0,
                    software: String::new(),
                    record_formats: Vec::new(),
                }),
                &mut hello,
            );
            s.write_all(&hello)?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf)?;
            std::io::Result::Ok((s.local_addr()?, buf))
        })
        .unwrap()
        .unwrap();
    let (from, bytes) = answer;
    assert!(!from.ip().is_loopback(), "{from}");
    let (msg, _) = uplink::decode_frame(&bytes, &uplink::Limits::default())
        .unwrap()
        .expect("a whole frame");
    let uplink::Message::Refused(r) = msg else {
        panic!("{msg:?}")
    };
    assert!(r.reason.contains("loopback only"), "{}", r.reason);
    assert_eq!(
        far.metric("tandem_collector_refused_total{reason=\"plain_tcp\"}"),
        1
    );
}

/// A synthetic capture with archived calls, read by a sensor that delivers to the collector;
/// the collector then fetches each call's pcap over the sensor's session: the same bytes as
/// the sensor's own `tandem cdr pcap`. A path outside the archive is refused, and a sensor that
/// went away is said to be offline.
#[test]
fn a_remote_pcap_is_the_sensors_own_and_an_offline_sensor_is_said_so() {
    let Some(pg) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("collector");
    std::fs::create_dir_all(&data).unwrap();
    let token = add_sensor(&data, "branch");
    let running = Running::start(
        settings(&pg.conninfo()),
        None,
        &data,
        loopback_listener("127.0.0.1:0"),
    );
    let pcap = dir.path().join("calls.pcap");
    let cfg = monitor::synth::SynthConfig {
        calls: 6,
        call_interval_us: 300_000,
        call_duration_ms: 2_000,
        failures: false,
        ..monitor::synth::SynthConfig::default()
    };
    monitor::synth::generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let archive = dir.path().join("archive");
    let side = SensorSide {
        name: "branch",
        token: Some(token),
        ca: None,
        client: None,
    };
    let link = link(dir.path(), running.addr, &side);
    let mut config = sensor::SensorConfig::new(sensor::Source::Files(vec![pcap]));
    config.archive = Some(sensor::ArchiveSettings {
        dir: archive.clone(),
        store: sensor::StoreMode::FullRtp,
        max_age_sec: None,
        max_total_bytes: None,
        max_call_bytes: sensor::ARCHIVE_CALL_MAX_BYTES,
    });
    let mut cdr = sensor::CdrConfig::sqlite(dir.path().join("sensor").join("cdr.sqlite3"));
    cdr.sensor_id = "branch".into();
    cdr.collector = Some(link.clone());
    config.cdr = Some(cdr);
    config.status.interval_s = 0;
    let report = sensor::Sensor::start(config, None).unwrap().join().unwrap();
    let delivered = report.uplink.expect("a link").acknowledged_records;
    assert_eq!(delivered, report.cdr.unwrap().written_records);
    assert!(report.totals.calls >= 6);

    // The sensor is back, serving its archive (a live capture would be).
    let uplink = Arc::new(Uplink::start(link, Some(&archive)).unwrap());
    uplink.open_store().expect("connected");
    let mut store = PgStore::connect(&pg.conninfo()).unwrap();
    let mut client = postgres::Client::connect(&pg.conninfo(), postgres::NoTls).unwrap();
    let ids: Vec<String> = client
        .query(
            "SELECT call_id FROM cdr WHERE sensor = 'branch' AND sip_tar IS NOT NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ids.len() >= 6, "{ids:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for id in &ids {
        let (c, _) = store.show(id).unwrap().unwrap();
        assert_eq!(c.sensor, "branch");
        let own = sensor::call_pcap::call_pcap(&c).unwrap();
        let fetched = rt
            .block_on(running.handle.fetch_pcap("branch", (&c).into()))
            .unwrap();
        assert!(fetched == own, "call {id}: the fetched pcap differs");
    }
    // A collector cannot make the sensor read files outside its archive.
    let (c, _) = store.show(&ids[0]).unwrap().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(c.sip_tar.as_ref().unwrap(), elsewhere.join("sip.tar")).unwrap();
    for (tar, expected) in [
        (
            "/etc/passwd".to_string(),
            "not a tar file of this sensor's archive",
        ),
        (
            elsewhere.join("sip.tar").display().to_string(),
            "outside this sensor's archive",
        ),
        (
            format!("{}/../elsewhere/sip.tar", archive.display()),
            "outside this sensor's archive",
        ),
    ] {
        let mut forged = collector::PcapCall::from(&c);
        forged.sip_tar = Some(tar);
        let e = rt
            .block_on(running.handle.fetch_pcap("branch", forged))
            .unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }
    // The sensor goes away: its pcaps cannot be had, and the error says why.
    drop(uplink);
    let deadline = Instant::now() + Duration::from_secs(60);
    let e = loop {
        match rt.block_on(running.handle.fetch_pcap("branch", (&c).into())) {
            Err(e @ PcapFetchError::Offline { .. }) => break e,
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "the sensor still looks connected"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let text = e.to_string();
    assert!(
        text.contains("sensor \"branch\" is offline") && text.contains("once it reconnects"),
        "{text}"
    );
    assert!(running.metric("tandem_collector_pcap_requests_total{result=\"offline\"}") >= 1);
}

/// A collector whose sensors are all quiet still applies its retention: at start (and every
/// `maintenance_interval_s`) its upkeep drops the old days whole, more than one call's worth,
/// and keeps the recent ones and their rows.
#[test]
fn an_idle_collector_drops_the_days_past_its_retention() {
    let Some(pg) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let today = cdr::Day::today();
    let old: Vec<cdr::Day> = (0..20).map(|n| today.plus(-100 - n)).collect();
    let mut recent = call("recent", 1);
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    recent.call.as_mut().unwrap().start_us = now_us - 120_000_000;
    recent.call.as_mut().unwrap().end_us = Some(now_us - 60_000_000);
    for s in &mut recent.streams {
        s.start_us = now_us - 120_000_000;
        s.end_us = now_us - 60_000_000;
    }
    {
        // A database as a collector without retention left it: twenty old days and a call
        // of today.
        let mut st = PgStore::connect_with(&pg.conninfo(), &cdr::PgOptions::partitioned()).unwrap();
        st.create_days(old.iter().copied()).unwrap();
        st.insert_records(&[recent]).unwrap();
        assert!(st.partition_days().unwrap().contains(&old[19]));
    }

    let running = Running::start(
        Settings {
            retention_days: 30,
            ..settings(&pg.conninfo())
        },
        None,
        dir.path(),
        loopback_listener("127.0.0.1:0"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while running.metric("tandem_collector_upkeeps_total") == 0 {
        assert!(
            Instant::now() < deadline,
            "no upkeep: {}",
            running.metrics()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut st = PgStore::connect_with(&pg.conninfo(), &cdr::PgOptions::partitioned()).unwrap();
    let days = st.partition_days().unwrap();
    assert!(
        days.iter().all(|d| *d >= today.plus(-30)),
        "days past the retention left: {days:?}"
    );
    assert!(
        days.contains(&today) && days.contains(&today.plus(3)),
        "{days:?}"
    );
    let mut c = postgres::Client::connect(&pg.conninfo(), postgres::NoTls).unwrap();
    let rows: i64 = c
        .query_one(
            "SELECT count(*) FROM cdr WHERE call_id = 'recent-1@test'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "today's call is kept");
}

/// A sensor of an older release offers no compact form: the collector's `Welcome` names none,
/// the sensor's JSON records are stored and acknowledged; one of this release is offered its
/// own compact form back.
#[test]
fn a_sensor_without_the_compact_form_is_answered_in_json_and_stored() {
    use std::io::{Read, Write};
    use uplink::{Hello, Limits, Message, RecordFormat, Records};

    let Some(pg) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let token = add_sensor(dir.path(), "elder");
    let running = Running::start(
        settings(&pg.conninfo()),
        None,
        dir.path(),
        loopback_listener("127.0.0.1:0"),
    );
    let read = |s: &mut std::net::TcpStream| -> Message {
        let mut header = [0u8; uplink::HEADER_BYTES];
        s.read_exact(&mut header).unwrap();
        let len = uplink::payload_len(header, &Limits::default()).unwrap();
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).unwrap();
        uplink::decode_payload(&payload, &Limits::default()).unwrap()
    };
    let hello = |formats: Vec<String>| {
        let mut buf = Vec::new();
        uplink::encode(
            &Message::Hello(Hello {
                version: uplink::PROTOCOL_VERSION,
                sensor: "elder".into(),
                token: token.clone(),
                clock_us: 0,
                software: "tandem 0.0.9".into(),
                record_formats: formats,
            }),
            &mut buf,
        );
        buf
    };

    let mut s = std::net::TcpStream::connect(running.addr).unwrap();
    s.write_all(&hello(Vec::new())).unwrap();
    let Message::Welcome(w) = read(&mut s) else {
        panic!("no welcome")
    };
    assert_eq!(
        w.record_format, "",
        "JSON for a sensor that offers nothing else"
    );
    let mut frame = Vec::new();
    uplink::encode(
        &Message::Records(Records {
            first_seq: 1,
            records: (0..3).map(|i| call("elder", i)).collect(),
            format: RecordFormat::Json,
        }),
        &mut frame,
    );
    s.write_all(&frame).unwrap();
    loop {
        match read(&mut s) {
            Message::Ack { upto_seq: 3 } => break,
            Message::Ack { .. } => continue,
            other => panic!("not an ack: {other:?}"),
        }
    }
    assert_eq!(stored(&pg.conninfo(), "elder"), (3, 3, 3, 6));
    drop(s);

    let mut s = std::net::TcpStream::connect(running.addr).unwrap();
    s.write_all(&hello(vec![
        "postcard-0-0000000000000000".into(),
        uplink::compact_format().into(),
    ]))
    .unwrap();
    let Message::Welcome(w) = read(&mut s) else {
        panic!("no welcome")
    };
    assert_eq!(w.record_format, uplink::compact_format());
}

/// A collector whose frame limits are tighter than a sensor's defaults says them in its
/// `Welcome`, and the sensor cuts its batches to fit: every record is stored, none journaled
/// (a frame over the limits would end the session, and again at every attempt).
#[test]
fn a_sensor_sends_frames_within_the_collectors_limits() {
    let Some(pg) = postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("collector");
    std::fs::create_dir_all(&data).unwrap();
    let token = add_sensor(&data, "tight");
    let running = Running::start(
        Settings {
            frame_bytes_max: 64 << 10,
            batch_records_max: 50,
            ..settings(&pg.conninfo())
        },
        None,
        &data,
        loopback_listener("127.0.0.1:0"),
    );
    let side = SensorSide {
        name: "tight",
        token: Some(token),
        ca: None,
        client: None,
    };
    let (writer, _uplink) = sensor_writer(dir.path(), link(dir.path(), running.addr, &side));
    for i in 0..1_000 {
        writer.submit(call("tight", i));
    }
    wait_delivered(&writer, 1_000);
    let stats = writer.close();
    assert_eq!(
        (stats.journaled_records, stats.dropped_records),
        (0, 0),
        "{stats:?}"
    );
    assert_eq!(
        stored(&pg.conninfo(), "tight"),
        (1_000, 1_000, 1_000, 2_000)
    );
    assert_eq!(
        running.metric("tandem_collector_sessions_accepted_total"),
        1
    );
}
