//! Sensors and a collector as a user runs them: `tandem sensor add`, `tandem serve` with a
//! `[collector]` on a throwaway PostgreSQL, `tandem capture --read ... --collector`, the collector
//! SIGKILLed and started again, and `tandem cdr pcap` on the collector fetching a call's pcap
//! (and a stream's without a call, by its uid) from the sensor that archived it. No timing is asserted.

mod common;
use common::free_port;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");

/// `tandem serve` with only a collector (and /metrics), killed on drop.
struct Serve {
    child: Option<Child>,
    dir: PathBuf,
    config: PathBuf,
    http: SocketAddr,
}

impl Serve {
    fn new(dir: &Path, postgres: &str) -> (Serve, SocketAddr) {
        let (agi, http, sensors) = (free_port(), free_port(), free_port());
        let data = dir.join("collector");
        let config = dir.join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[fastagi]\nlisten = \"127.0.0.1:{agi}\"\n\
                 [metrics]\nlisten = \"127.0.0.1:{http}\"\n\
                 [web]\nenabled = false\n\
                 [history]\nenabled = false\n\
                 [kv]\ndata_dir = {data:?}\n\
                 [collector]\nlisten = \"127.0.0.1:{sensors}\"\npostgres = {postgres:?}\n\
                 heartbeat_interval_ms = 500\n\
                 # The captures are of 2025: kept whatever their age.\n\
                 retention_days = 0\n"
            ),
        )
        .unwrap();
        let mut s = Serve {
            child: None,
            dir: dir.to_path_buf(),
            config,
            http: SocketAddr::from(([127, 0, 0, 1], http)),
        };
        s.spawn();
        (s, SocketAddr::from(([127, 0, 0, 1], sensors)))
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("serve.log"))
            .unwrap();
        let child = Command::new(EXE)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env_remove("TANDEM_DATA_DIR")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(self.http).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("tandem serve exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "serve did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: nothing of the shutdown path runs.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.http).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.http
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("collector").join("collector.sock")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env_remove("TANDEM_DATA_DIR")
        .env_remove("TANDEM_CDR_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn synthetic(dir: &Path, name: &str, seed: u64, start_s: i64) -> PathBuf {
    let path = dir.join(name);
    let cfg = monitor::synth::SynthConfig {
        calls: 8,
        call_interval_us: 200_000,
        call_duration_ms: 1_000,
        failures: false,
        seed,
        start_ns: start_s * 1_000_000_000,
        ..monitor::synth::SynthConfig::default()
    };
    monitor::synth::generate(&cfg, std::fs::File::create(&path).unwrap()).unwrap();
    path
}

#[test]
fn sensors_deliver_through_a_collector_killed_and_restarted_and_serve_their_pcaps() {
    let pg = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return;
        }
        Err(e) => panic!("PostgreSQL: {e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let conninfo = pg.conninfo();
    let data = dir.path().join("collector");
    let added = run(&[
        "sensor",
        "add",
        "site-1",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let token_file = dir.path().join("site-1.token");
    std::fs::write(&token_file, &added.stdout).unwrap();
    let listed = run(&["sensor", "list", "--data-dir", data.to_str().unwrap()]);
    assert!(text(&listed.stdout).starts_with("site-1\t"));

    let (mut serve, addr) = Serve::new(dir.path(), &conninfo);
    let sensor_dir = dir.path().join("site-1");
    let archive = sensor_dir.join("archive");
    let db = sensor_dir.join("cdr.sqlite3");
    let collector = addr.to_string();
    let capture = |file: &Path| {
        run(&[
            "capture",
            "--read",
            file.to_str().unwrap(),
            "--archive",
            archive.to_str().unwrap(),
            "--archive-store",
            "full",
            "--cdr-db",
            db.to_str().unwrap(),
            "--collector",
            &collector,
            "--sensor-id",
            "site-1",
            "--sensor-token-file",
            token_file.to_str().unwrap(),
        ])
    };
    let first = synthetic(dir.path(), "first.pcap", 1, 1_750_000_000);
    let second = synthetic(dir.path(), "second.pcap", 2, 1_750_003_600);
    let out = capture(&first);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("acknowledged by the collector"),
        "{}",
        text(&out.stdout)
    );

    // The collector dies; a capture meanwhile keeps its CDRs in its journal and says so.
    serve.kill();
    let out = capture(&second);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("waiting in the journal") && err.contains("cdr-collector.journal"),
        "{err}"
    );

    // Back again: the next run delivers the journal first (and the first file again, which
    // changes nothing: stored by uid).
    serve.spawn();
    let out = capture(&first);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("waiting in the journal"));
    let mut client = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT uid), count(*) FILTER (WHERE uid LIKE 'site-1|%') \
             FROM cdr WHERE sensor = 'site-1'",
            &[],
        )
        .unwrap();
    let counts: (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(counts, (16, 16, 16), "each call of both files, once");
    // RTP that no SIP announced: a stream without a call, archived on its own.
    let lone = dir.path().join("lone.pcap");
    let mut b = monitor::synth::PcapBuilder::create(&lone).unwrap();
    let flow = (
        "10.9.9.9:30000".parse().unwrap(),
        "10.9.9.8:30002".parse().unwrap(),
    );
    b.pcma_run(1_750_007_200_000_000_000, flow, 0xAB, 0, 150);
    b.finish().unwrap();
    let out = capture(&lone);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A sensor that stays up (HEP source), serving the same archive.
    let mut live = Command::new(EXE)
        .args([
            "capture",
            "--hep-listen",
            "127.0.0.1:0",
            "--archive",
            archive.to_str().unwrap(),
            "--cdr-db",
            db.to_str().unwrap(),
            "--collector",
            &collector,
            "--sensor-id",
            "site-1",
            "--sensor-token-file",
            token_file.to_str().unwrap(),
            "--status-interval-s",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !serve
        .metrics()
        .contains("tandem_collector_sensor_connected{sensor=\"site-1\"} 1")
    {
        assert!(Instant::now() < deadline, "the sensor did not connect");
        std::thread::sleep(Duration::from_millis(50));
    }
    let call_id: String = client
        .query_one(
            "SELECT call_id FROM cdr WHERE sensor = 'site-1' AND rtp_tar IS NOT NULL \
             ORDER BY start_us DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    let socket = serve.socket();
    let pcap = |socket: &Path| {
        run(&[
            "cdr",
            "pcap",
            &call_id,
            "--cdr-postgres",
            &conninfo,
            "--collector-socket",
            socket.to_str().unwrap(),
        ])
    };
    let remote = pcap(&socket);
    assert!(remote.status.success(), "{}", text(&remote.stderr));
    // The sensor's own `tandem cdr pcap` (no collector socket here: its archive files).
    let own = pcap(&dir.path().join("no-collector.sock"));
    assert!(own.status.success(), "{}", text(&own.stderr));
    assert!(own.stdout.len() > 24, "a pcap with packets");
    assert!(remote.stdout == own.stdout, "the fetched pcap differs");
    // The same for the stream without a call, asked for by its uid.
    let uid: String = client
        .query_one(
            "SELECT uid FROM cdr_rtp WHERE cdr_id IS NULL AND rtp_tar IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        uid.starts_with("site-1|rtp|10.9.9.9:30000|10.9.9.8:30002|171|"),
        "{uid}"
    );
    let stream_pcap = |socket: &Path| {
        run(&[
            "cdr",
            "pcap",
            &uid,
            "--cdr-postgres",
            &conninfo,
            "--collector-socket",
            socket.to_str().unwrap(),
        ])
    };
    let remote = stream_pcap(&socket);
    assert!(remote.status.success(), "{}", text(&remote.stderr));
    let own = stream_pcap(&dir.path().join("no-collector.sock"));
    assert!(own.status.success(), "{}", text(&own.stderr));
    assert_eq!(
        own.stdout.len(),
        24 + 150 * (16 + 42 + 172),
        "its 150 packets"
    );
    assert!(
        remote.stdout == own.stdout,
        "the fetched pcap of the stream differs"
    );

    // The sensor stops: the collector says it is offline.
    unsafe {
        libc::kill(live.id() as i32, libc::SIGTERM);
    }
    let _ = live.wait();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = pcap(&socket);
        let err = text(&out.stderr);
        if !out.status.success() && err.contains("offline") {
            assert!(err.contains("sensor \"site-1\" is offline"), "{err}");
            break;
        }
        assert!(Instant::now() < deadline, "still fetched: {err}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
