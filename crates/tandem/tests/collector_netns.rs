//! Distributed monitoring end to end, on network namespaces of this machine: three sensors,
//! each a `tandem capture --interface` on a veth pair where real and synthetic captures are
//! replayed, deliver their CDRs over TLS to a collector (`tandem serve` with `[collector]`) in
//! a fourth namespace, which writes them to a real PostgreSQL. While the traffic runs, the
//! collector is SIGKILLed and started again, PostgreSQL is stopped for 10 s and started again,
//! and one sensor's link to the collector is cut (interface down) and restored. Afterwards:
//!
//! - every record is in PostgreSQL exactly once (one row per uid in `cdr`, `cdr_rtp`,
//!   `cdr_t38` and `registration`, every uid under its sensor's name), and each sensor's rows
//!   are as many as the calls it printed itself (`--json`) and the records it says the
//!   collector acknowledged;
//! - each sensor's rows equal, table by table, those a single-node `tandem capture --read` of
//!   the same files writes to PostgreSQL (a database of its own on the same server, with the
//!   same `--sensor-id`): the same records, every figure that depends on the packets equal,
//!   figures computed from arrival times within live_capture.rs' tolerances (`TOLERANCES`),
//!   times not compared (live, they are the time of the test; only whether a call rang, was
//!   answered or ended is);
//! - `tandem cdr pcap CALL-ID` on the collector (through its `collector.sock`) returns for each
//!   call the same bytes as reading the sensor's archive locally (what `tandem cdr pcap` does on
//!   the sensor), and those packets are that call's: every one is a packet the sensor was sent,
//!   its SIP packets are exactly those of the original traffic that carry its Call-ID, and each
//!   of its RTP streams and T.38 flows is there with the packet count its row gives.
//!
//! And each event is seen to happen while CDRs are produced and delivered: the synthetic
//! traffic (a call ending about every 1.5 s on each sensor) is still being replayed when it
//! starts; the sensors report through their heartbeats (`tandem_collector_sensor_*` on the
//! collector's `/metrics`) that records went through their journals and were replayed
//! after it; the collector reports PostgreSQL down (`db_up` 0) and the batches it refused
//! (`nacked_batches`); during the cut the collector shows that sensor disconnected, and the
//! sensor's log says why its session ended.
//!
//! The layout (names carry this process' ID; all removed on drop, even when the test fails):
//!
//! ```text
//!  tnd-sK-PID (K = 1..3)                                   tnd-c-PID
//!  tandem replay ─▶ cap0 ══ cap1 ◀─ tandem capture ─TLS─▶ up0 10.77.K.2 ══ upK 10.77.K.1 ◀─ tandem serve
//!                                   (archive, journal)                          :9575 collector
//!                                                                                 │ Unix socket
//!  (this machine's namespace) PostgreSQL (pg-scratch) ◀──────────────────────────┘
//!  tandem cdr pcap ─▶ collector.sock (a file: reachable from any namespace)
//! ```
//!
//! Choices, and why:
//! - The collector listens on `0.0.0.0`, reached on addresses that are not loopback, so it
//!   needs TLS (plain TCP is refused off loopback): a CA and a certificate for
//!   `collector.test` are made with rcgen; sensors give `--collector-ca` and
//!   `--collector-server-name collector.test`, and authenticate with their tokens.
//! - PostgreSQL runs in this process' namespace on 127.0.0.1, which the collector's namespace
//!   cannot reach; its Unix socket is a path, and paths are shared by every namespace, so the
//!   collector connects through it (`PgServer::conninfo_unix`). Stopping and starting the server
//!   (`stop_fast`, `start_again`) is then the real outage a collector meets.
//! - A sensor with `--collector` keeps no CDR database of its own (`--cdr-db` only places its
//!   journal, `cdr-collector.journal`): what a sensor saw is what it printed (`--json`, the same
//!   records its CDR writer was handed) and the count it says the collector acknowledged.
//! - Short heartbeats (500 ms) and idle timeouts, so that a cut link is noticed within the few
//!   seconds it is down: with the defaults (heartbeats every 5 s, a session given up after 15 s
//!   of silence by the sensor, 30 s by the collector) a 6 s cut would be absorbed by TCP's
//!   retransmissions and nothing would go through the journal.
//! - The captures are replayed as live_capture.rs does (its gaps, tolerances and paced copies
//!   for captures with long idle gaps); each sensor replays its synthetic capture and, beside
//!   it, its share of the shared captures one after the other. Flows of different files never
//!   share addresses, and a record closed by an idle timeout is the record a flush at the end
//!   gives, so one capture per sensor sees what one `--read` per file sees.
//! - Calls still open when the sensors stop (closed by the stop, as at the end of a file) are
//!   archived and delivered then; to serve those pcaps, each sensor is started again after its
//!   stop with the same command, as a restarted capture service would be. Pcaps of the calls
//!   delivered before are fetched from the sensors that captured them, before they stop.
//!
//! Needs root and `ip` (network namespaces, packet sockets) and Debian's PostgreSQL; without
//! them it says why and skips (and fails under CI=true). Reads every
//! `../shared/captures/*.pcap` when that directory is present, and says so when it is not.

mod common;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use afpacket::netns::VethPair;
use cdr::CdrStore;
use monitor::pcap::{CaptureReader, PcapWriter};
use monitor::synth::{CallKind, SynthConfig, generate};
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");

const SENSORS: usize = 3;
/// The sensor whose link to the collector is cut (1-based).
const CUT_SENSOR: usize = 2;
/// Ports inside the collector's namespace (fresh, so fixed ones are free).
const COLLECTOR_PORT: u16 = 9575;
const METRICS_PORT: u16 = 9573;
const AGI_PORT: u16 = 4573;
/// The name in the collector's certificate.
const SERVER_NAME: &str = "collector.test";

/// Synthetic calls, split among the sensors by call number: each sensor gets a call every
/// `SYNTH_INTERVAL_US * SENSORS` (1.5 s) for 75 s, so that CDRs are produced all along the
/// events (which are over after about 45 s), and its own mix of the call kinds (call `i` is
/// `CallKind::ALL[i % 6]`: voice and SRTP, fax and video, DTMF and hold-resume).
const SYNTH_CALLS: usize = 150;
const SYNTH_INTERVAL_US: u64 = 500_000;
const SYNTH_DURATION_MS: u64 = 4_000;

/// When the first event comes, after the replays start.
const EVENTS_FROM: Duration = Duration::from_secs(12);
/// How long the collector stays dead, PostgreSQL stopped, the link cut.
const COLLECTOR_DOWN: Duration = Duration::from_secs(4);
const DATABASE_DOWN: Duration = Duration::from_secs(10);
const LINK_DOWN: Duration = Duration::from_secs(6);
/// A bound on every wait for an outcome, far beyond what it needs.
const WAIT: Duration = Duration::from_secs(90);

/// As live_capture.rs: gaps up to this are replayed as they are.
const LONG_GAP_MS: u64 = 5_000;
/// For captures that would take over `MAX_REPLAY_S` with `LONG_GAP_MS`: gaps cut to this.
const SHORT_GAP_MS: u64 = 20;
const MAX_REPLAY_S: f64 = 60.0;

/// Largest difference allowed for figures computed from arrival times, in their units;
/// live_capture.rs explains each. The call's columns derived from its streams get their
/// stream's tolerance (`mos_min`, `jitter_max_ms`), and its duration, a difference of two
/// arrival times, twice the largest scheduling delay accepted. As in live_capture.rs they hold
/// while the machine sends and receives frames on time: this test's own processes take about
/// 1% of a core each, but a heavy unrelated load beside it (a network benchmark) once moved a
/// stream's mean jitter by 1.26 ms: the mean jitter's tolerance is twice live_capture.rs'
/// (this test replays three sensors' traffic at once, and runs under CI beside whatever else
/// the machine does). A fault in the pipeline moves these figures by far more.
const TOLERANCES: &[(&str, f64)] = &[
    ("min_delta_ms", 30.0),
    ("mean_delta_ms", 0.5),
    ("max_delta_ms", 25.0),
    ("mean_jitter_ms", 2.0),
    ("max_jitter_ms", 5.0),
    ("mos", 0.1),
    ("mos_min", 0.1),
    ("jitter_max_ms", 5.0),
    ("duration_ms", 50.0),
];

/// A table of the CDR schema as compared: the columns left out (row numbers, the uid, which
/// holds a start time, the archive's places, which only the sensors have), the times (only
/// whether each is set is compared), and how a sensor's rows are selected.
struct Table {
    name: &'static str,
    of_sensor: &'static str,
    ignored: &'static [&'static str],
    times: &'static [&'static str],
}

const ARCHIVE_COLUMNS: [&str; 10] = [
    "sip_tar",
    "sip_member",
    "sip_offset",
    "sip_len",
    "sip_compression",
    "rtp_tar",
    "rtp_member",
    "rtp_offset",
    "rtp_len",
    "rtp_compression",
];

const TABLES: [Table; 4] = [
    Table {
        name: "cdr",
        of_sensor: "t.sensor = $1",
        // A uid, and a call's group (its first leg's uid), hold the start's time: a live
        // capture's, not the file's.
        ignored: &["id", "uid", "call_group"],
        times: &["start_us", "ringing_us", "answer_us", "end_us"],
    },
    Table {
        name: "cdr_rtp",
        of_sensor: "t.uid LIKE $1 || '|%'",
        ignored: &["id", "uid", "cdr_id", "call_start_us"],
        times: &["start_us", "end_us"],
    },
    Table {
        name: "cdr_t38",
        of_sensor: "t.uid LIKE $1 || '|%'",
        ignored: &["id", "uid", "cdr_id", "call_start_us"],
        times: &["start_us", "end_us"],
    },
    Table {
        name: "registration",
        of_sensor: "t.sensor = $1",
        ignored: &["id", "uid"],
        times: &["first_us", "last_us", "registered_us"],
    },
];

// ---------------------------------------------------------------------------------------------
// Network namespaces

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running `ip`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// A network namespace, removed (with its interfaces) on drop.
struct Netns {
    name: String,
}

impl Netns {
    /// A namespace with loopback up and IPv6 off (no autoconfiguration or neighbour discovery
    /// chatter on the capture interfaces).
    fn create(name: String) -> Netns {
        ip(&["netns", "add", &name]).unwrap();
        // From here on, Drop removes it.
        let ns = Netns { name };
        ns.run(|| {
            for p in ["all", "default"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{p}/disable_ipv6"), "1").unwrap();
            }
        });
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS`.
    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all).unwrap();
    }

    /// Runs `f` on a thread that joined the namespace: its sockets are the namespace's.
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: `file` is an open namespace file; setns changes only this thread's
                // network namespace, and the thread ends with the scope.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(
                    r,
                    0,
                    "joining {}: {}",
                    self.name,
                    std::io::Error::last_os_error()
                );
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// `ip netns exec NS PROGRAM`: a child in the namespace (ip execs the program in its
    /// place, so the child's process ID is the program's).
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("removing network namespace {}: {e}", self.name);
        }
    }
}

/// Removes the namespaces of an earlier run of this test whose process is gone (killed
/// before its drops could run).
fn remove_stale_namespaces() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("tnd-")
            .and_then(|rest| rest.split_once('-'))
            .filter(|(role, _)| *role == "c" || role.starts_with('s'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// The four namespaces and their links: sensor K's `cap0`/`cap1` pair for the traffic, and
/// its `up0` (10.77.K.2) linked to the collector namespace's `upK` (10.77.K.1).
struct Network {
    collector: Netns,
    sensors: Vec<Netns>,
}

impl Network {
    fn create() -> Network {
        remove_stale_namespaces();
        let pid = std::process::id();
        let collector = Netns::create(format!("tnd-c-{pid}"));
        let mut sensors = Vec::new();
        for k in 1..=SENSORS {
            let ns = Netns::create(format!("tnd-s{k}-{pid}"));
            ns.ip(&[
                "link", "add", "cap0", "type", "veth", "peer", "name", "cap1",
            ]);
            for dev in ["cap0", "cap1"] {
                ns.ip(&["link", "set", dev, "mtu", "9000", "up"]);
            }
            let far = format!("up{k}");
            ns.ip(&[
                "link",
                "add",
                "up0",
                "type",
                "veth",
                "peer",
                "name",
                &far,
                "netns",
                &collector.name,
            ]);
            ns.ip(&["addr", "add", &format!("10.77.{k}.2/24"), "dev", "up0"]);
            ns.ip(&["link", "set", "up0", "up"]);
            collector.ip(&["addr", "add", &format!("10.77.{k}.1/24"), "dev", &far]);
            collector.ip(&["link", "set", &far, "up"]);
            sensors.push(ns);
        }
        Network { collector, sensors }
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A child killed (SIGKILL) and reaped on drop.
struct Proc(Option<Child>);

impl Proc {
    fn pid(&self) -> libc::pid_t {
        self.0.as_ref().expect("running").id() as libc::pid_t
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's process ID, which it keeps until we reap it.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().unwrap())
    }

    /// Waits for the exit, up to `WAIT`.
    fn wait(&mut self, what: &str) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.exited() {
                self.0 = None;
                return s;
            }
            assert!(Instant::now() < deadline, "{what} did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn log_file(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The last `n` lines of a log, for a failure's message.
fn tail(path: &Path, n: usize) -> String {
    let text = read(path);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Prints the tails of the logs if the test fails.
struct LogsOnFailure(Vec<PathBuf>);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.0 {
                eprintln!("---- {} (last lines)\n{}", p.display(), tail(p, 60));
            }
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------------
// The collector

/// `tandem serve` with a collector (and /metrics) in the collector's namespace.
struct Collector<'a> {
    ns: &'a Netns,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    proc: Proc,
}

impl<'a> Collector<'a> {
    fn start(ns: &'a Netns, dir: &Path, postgres: &str, cert: &Path, key: &Path) -> Self {
        let data = dir.join("collector");
        let config = dir.join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[fastagi]\nlisten = \"127.0.0.1:{AGI_PORT}\"\n\
                 [metrics]\nlisten = \"127.0.0.1:{METRICS_PORT}\"\n\
                 [web]\nenabled = false\n\
                 [history]\nenabled = false\n\
                 [kv]\ndata_dir = {data:?}\n\
                 [collector]\nlisten = \"0.0.0.0:{COLLECTOR_PORT}\"\npostgres = {postgres:?}\n\
                 tls_cert = {cert:?}\ntls_key = {key:?}\n\
                 heartbeat_interval_ms = 500\nidle_timeout_ms = 3000\n\
                 reconnect_min_ms = 100\nreconnect_max_ms = 1000\n"
            ),
        )
        .unwrap();
        let mut c = Collector {
            ns,
            config,
            data,
            log: dir.join("serve.log"),
            proc: Proc(None),
        };
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        let child = self
            .ns
            .command(EXE)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env_remove("TANDEM_DATA_DIR")
            .env("TANDEM_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file(&self.log))
            .spawn()
            .unwrap();
        self.proc = Proc(Some(child));
        let deadline = Instant::now() + WAIT;
        while self.try_metrics().is_none() {
            if let Some(status) = self.proc.exited() {
                panic!("tandem serve exited ({status}):\n{}", tail(&self.log, 40));
            }
            assert!(Instant::now() < deadline, "serve did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_metrics(&self) -> Option<String> {
        self.ns.run(|| {
            let addr = SocketAddr::from(([127, 0, 0, 1], METRICS_PORT));
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .ok()?;
            let mut body = String::new();
            s.read_to_string(&mut body).ok()?;
            body.contains("tandem_collector_").then_some(body)
        })
    }

    fn metrics(&self) -> Metrics {
        Metrics(
            self.try_metrics()
                .unwrap_or_else(|| panic!("no /metrics:\n{}", tail(&self.log, 40))),
        )
    }

    fn socket(&self) -> PathBuf {
        self.data.join("collector.sock")
    }
}

/// One scrape of the collector's `/metrics`.
struct Metrics(String);

impl Metrics {
    /// The value of one series; `None` when absent.
    fn get(&self, series: &str) -> Option<f64> {
        self.0.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    fn sensor(&self, metric: &str, k: usize) -> f64 {
        self.get(&format!(
            "tandem_collector_sensor_{metric}{{sensor=\"s{k}\"}}"
        ))
        .unwrap_or(0.0)
    }
}

/// Every sensor connected with an empty journal, and each in `more` replayed more records
/// from its journal than `before` says: the event it went through is behind it. Returns the
/// replayed counts.
fn wait_recovered(c: &Collector, before: &[f64], more: &[usize], what: &str) -> Vec<f64> {
    let deadline = Instant::now() + WAIT;
    loop {
        let m = c.metrics();
        let replayed: Vec<f64> = (1..=SENSORS)
            .map(|k| m.sensor("replayed_records", k))
            .collect();
        let done = (1..=SENSORS).all(|k| {
            m.sensor("connected", k) == 1.0
                && m.sensor("journal_records", k) == 0.0
                && (!more.contains(&k) || replayed[k - 1] > before[k - 1])
        });
        if done {
            return replayed;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the sensors did not recover (replayed before: {before:?}):\n{}",
            m.0.lines()
                .filter(|l| l.starts_with("tandem_collector_sensor_")
                    || l.starts_with("tandem_collector_db"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------------------------
// Certificates

/// A CA (`ca.pem`) and the collector's certificate for `SERVER_NAME`, signed by it.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tandem netns test CA");
    let ca_cert = params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "collector");
    let cert = params.signed_by(&key, &issuer).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("collector.pem"),
        dir.join("collector.key"),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

// ---------------------------------------------------------------------------------------------
// Traffic

/// One capture a sensor is sent: the file replayed, the gaps it is replayed with, and the file
/// `--read` must give the same records for (a copy stamped as replayed when gaps are cut).
struct Input {
    replayed: PathBuf,
    reference: PathBuf,
    gap_ms: u64,
}

/// A shared capture as live_capture.rs replays it: as it is, or with idle gaps cut (and
/// compared with a copy stamped so) when it would take too long or has gaps over 5 s.
fn shared_input(path: &Path, tmp: &Path) -> (Input, f64) {
    let long = common::replay_seconds(path, LONG_GAP_MS) > MAX_REPLAY_S
        || common::replay_seconds(path, u64::MAX / 2_000_000)
            > common::replay_seconds(path, LONG_GAP_MS);
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    if long {
        let copy = tmp.join(format!("paced-{name}"));
        common::paced_copy(path, SHORT_GAP_MS, &copy);
        eprintln!("{name}: idle gaps cut to {SHORT_GAP_MS} ms; compared with a copy stamped so");
        let secs = common::replay_seconds(path, SHORT_GAP_MS);
        let input = Input {
            replayed: path.to_path_buf(),
            reference: copy,
            gap_ms: SHORT_GAP_MS,
        };
        (input, secs)
    } else {
        let input = Input {
            replayed: path.to_path_buf(),
            reference: path.to_path_buf(),
            gap_ms: LONG_GAP_MS,
        };
        (input, common::replay_seconds(path, LONG_GAP_MS))
    }
}

/// The call number of a synthetic frame (Ethernet, IPv4): callers are 10.1.0.0/16 up,
/// callees 172.16.0.0/16 up, one address per call.
fn synthetic_call(frame: &[u8]) -> usize {
    for ip in [&frame[26..30], &frame[30..34]] {
        if (ip[0], ip[1]) == (10, 1) || (ip[0], ip[1]) == (172, 16) {
            return (usize::from(ip[2]) << 8) | usize::from(ip[3]);
        }
    }
    panic!("a synthetic frame outside the synthetic networks");
}

/// One synthetic capture, every kind of call with loss, duplicates, reordering and jitter,
/// split by call number among the sensors: each gets calls of its own (Call-IDs and
/// addresses), all along the run.
fn synthetic_inputs(tmp: &Path) -> Vec<Input> {
    let all = tmp.join("synthetic.pcap");
    let cfg = SynthConfig {
        calls: SYNTH_CALLS,
        call_interval_us: SYNTH_INTERVAL_US,
        call_duration_ms: SYNTH_DURATION_MS,
        loss_pct: 1.0,
        duplicate_pct: 0.5,
        reorder_pct: 0.5,
        jitter_ms: 2.0,
        seed: 7,
        kinds: CallKind::ALL.to_vec(),
        ..SynthConfig::default()
    };
    generate(&cfg, File::create(&all).unwrap()).unwrap();
    let paths: Vec<PathBuf> = (1..=SENSORS)
        .map(|k| tmp.join(format!("synthetic-s{k}.pcap")))
        .collect();
    let mut writers: Vec<_> = paths
        .iter()
        .map(|p| {
            PcapWriter::new(std::io::BufWriter::new(File::create(p).unwrap()), 1, true).unwrap()
        })
        .collect();
    let mut r = CaptureReader::open(&all).unwrap();
    while let Some(p) = r.next_packet().unwrap() {
        let k = synthetic_call(p.data) % SENSORS;
        writers[k].write_packet(p.ts_ns, p.data).unwrap();
    }
    for w in writers {
        w.into_inner().flush().unwrap();
    }
    paths
        .into_iter()
        .map(|p| Input {
            replayed: p.clone(),
            reference: p,
            gap_ms: LONG_GAP_MS,
        })
        .collect()
}

/// The IP packet of a frame, cut to the length its header gives (Ethernet pads short
/// frames); `None` for what is not IP.
fn ip_packet(link_type: u32, data: &[u8]) -> Option<&[u8]> {
    let ip = match link_type {
        1 => {
            let mut at = 12;
            while at + 2 <= data.len() && matches!(&data[at..at + 2], [0x81, 0x00] | [0x88, 0xa8]) {
                at += 4;
            }
            match data.get(at..at + 2)? {
                [0x08, 0x00] | [0x86, 0xdd] => &data[at + 2..],
                _ => return None,
            }
        }
        101 => data,
        other => panic!("link type {other} not expected here"),
    };
    let len = match ip.first()? >> 4 {
        4 => usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])),
        6 => 40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?])),
        _ => return None,
    };
    Some(&ip[..len.min(ip.len())])
}

/// The UDP addresses of an IP packet (IPv4, or IPv6 without extension headers).
fn udp_addrs(ip: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    let (src, dst, udp): (std::net::IpAddr, std::net::IpAddr, &[u8]) = match ip[0] >> 4 {
        4 if ip.len() >= 20 && ip[9] == 17 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let s: [u8; 4] = ip[12..16].try_into().ok()?;
            let d: [u8; 4] = ip[16..20].try_into().ok()?;
            (s.into(), d.into(), ip.get(ihl..)?)
        }
        6 if ip.len() >= 40 && ip[6] == 17 => {
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (s.into(), d.into(), &ip[40..])
        }
        _ => return None,
    };
    let port = |at: usize| Some(u16::from_be_bytes([*udp.get(at)?, *udp.get(at + 1)?]));
    Some((
        SocketAddr::new(src, port(0)?),
        SocketAddr::new(dst, port(2)?),
    ))
}

/// The Call-IDs a SIP packet carries (`Call-ID:` or the compact `i:` header), each once;
/// none for a packet without `SIP/2.0` (media whose bytes happen to hold "\ni:").
fn call_ids(ip: &[u8]) -> HashSet<String> {
    let mut ids = HashSet::new();
    if !ip.windows(7).any(|w| w == b"SIP/2.0") {
        return ids;
    }
    for line in ip.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("call-id") || name.eq_ignore_ascii_case("i") {
            ids.insert(value.trim().to_string());
        }
    }
    ids
}

/// SIP as the archive keeps it: SDES keys (`inline:KEY`) and MIKEY payloads overwritten with
/// `X`, the length unchanged (the archive's `sip::secrets::redact_keys`, which this crate does
/// not depend on).
fn redact_keys(msg: &mut [u8]) {
    let markers: [&[u8]; 2] = [b"inline:", b"key-mgmt:mikey "];
    let key_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    let mut i = 0;
    while i < msg.len() {
        let Some(m) = markers.iter().find(|m| {
            msg.get(i..i + m.len())
                .is_some_and(|w| w.eq_ignore_ascii_case(m))
        }) else {
            i += 1;
            continue;
        };
        let mut end = i + m.len();
        while end < msg.len() && key_byte(msg[end]) {
            msg[end] = b'X';
            end += 1;
        }
        i = end.max(i + 1);
    }
}

/// What one sensor was sent, as the default filter keeps it: its IP packets (SIP with its
/// keys redacted, as archived), how many carry each Call-ID, and the frame count.
#[derive(Default)]
struct Sent {
    packets: HashSet<Vec<u8>>,
    by_call_id: HashMap<String, usize>,
    frames: u64,
}

impl Sent {
    fn add(&mut self, path: &Path) {
        let filter = afpacket::filter::Filter::compile(afpacket::filter::DEFAULT_FILTER).unwrap();
        let mut r = CaptureReader::open(path).unwrap();
        while let Some(p) = r.next_packet().unwrap() {
            // As the replayer sends it: Ethernet, the IP packet unchanged.
            let mut frame = Vec::new();
            match p.link_type {
                1 => frame.extend_from_slice(p.data),
                101 => {
                    let ethertype: &[u8] = if p.data[0] >> 4 == 6 {
                        &[0x86, 0xdd]
                    } else {
                        &[8, 0]
                    };
                    frame.extend_from_slice(&[0; 12]);
                    frame.extend_from_slice(ethertype);
                    frame.extend_from_slice(p.data);
                }
                other => panic!("{}: link type {other} not expected here", path.display()),
            }
            let pkt = afpacket::bpf::Packet {
                data: &frame,
                vlan_tci: None,
            };
            if !filter.matches(pkt) {
                continue;
            }
            self.frames += 1;
            if let Some(ip) = ip_packet(1, &frame) {
                let ids = call_ids(ip);
                for id in &ids {
                    *self.by_call_id.entry(id.clone()).or_default() += 1;
                }
                let mut ip = ip.to_vec();
                if !ids.is_empty() {
                    redact_keys(&mut ip);
                }
                self.packets.insert(ip);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sensors

/// One sensor: its namespace, files and what it was sent.
struct Sensor<'a> {
    k: usize,
    ns: &'a Netns,
    dir: PathBuf,
    token: PathBuf,
    inputs: Vec<Input>,
    sent: Sent,
}

impl Sensor<'_> {
    fn name(&self) -> String {
        format!("s{}", self.k)
    }

    fn stdout(&self, run: u32) -> PathBuf {
        self.dir.join(format!("capture-{run}.jsonl"))
    }

    fn stderr(&self, run: u32) -> PathBuf {
        self.dir.join(format!("capture-{run}.log"))
    }

    /// `tandem capture --interface cap1` delivering to the collector, archiving every call;
    /// returns once it captures and the collector has its session.
    fn start(&self, run: u32, ca: &Path, collector: &Collector) -> Proc {
        let dir = &self.dir;
        let child = self
            .ns
            .command(EXE)
            .args(["capture", "--interface", "cap1", "--json"])
            .args(["--status-interval-s", "0", "--archive-store", "full"])
            .arg("--archive")
            .arg(dir.join("archive"))
            .arg("--cdr-db")
            .arg(dir.join("cdr.sqlite3"))
            .args([
                "--collector",
                &format!("10.77.{}.1:{COLLECTOR_PORT}", self.k),
            ])
            .args(["--sensor-id", &self.name()])
            .arg("--sensor-token-file")
            .arg(&self.token)
            .arg("--collector-ca")
            .arg(ca)
            .args(["--collector-server-name", SERVER_NAME])
            .env_remove("TANDEM_CDR_DB")
            .env("TANDEM_LOG", "info")
            .stdin(Stdio::null())
            .stdout(File::create(self.stdout(run)).unwrap())
            .stderr(File::create(self.stderr(run)).unwrap())
            .spawn()
            .unwrap();
        let mut p = Proc(Some(child));
        let deadline = Instant::now() + WAIT;
        while !read(&self.stderr(run)).contains("capturing on cap1") {
            if let Some(s) = p.exited() {
                panic!("{} exited ({s}): {}", self.name(), read(&self.stderr(run)));
            }
            assert!(Instant::now() < deadline, "{} did not start", self.name());
            std::thread::sleep(Duration::from_millis(20));
        }
        while collector.metrics().sensor("connected", self.k) != 1.0 {
            assert!(
                Instant::now() < deadline,
                "{} did not connect: {}",
                self.name(),
                read(&self.stderr(run))
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    /// Replays one input on `cap0`, as live_capture.rs does.
    fn replay(&self, input: &Input) {
        let out = self
            .ns
            .command(EXE)
            .args(["replay", "--json", "--realtime", "--interface", "cap0"])
            .args(["--max-gap-ms", &input.gap_ms.to_string(), "--read"])
            .arg(&input.replayed)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let sent: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(sent["failed"], 0, "{sent}");
        assert_eq!(sent["skipped"], 0, "{sent}");
    }

    /// Stops the capture as an operator does (SIGTERM) and checks how it ended: every frame
    /// captured and analysed, every CDR acknowledged by the collector. Returns the count
    /// acknowledged.
    fn stop(&self, run: u32, mut p: Proc, frames: u64) -> u64 {
        p.signal(libc::SIGTERM);
        let status = p.wait(&self.name());
        let log = read(&self.stderr(run));
        assert!(status.success(), "{} failed: {log}", self.name());
        let stats = log
            .lines()
            .find(|l| l.starts_with("live capture on"))
            .unwrap_or_else(|| panic!("no counters at exit: {log}"));
        assert!(
            stats.contains(&format!(": {frames} frames captured, {frames} analysed"))
                && stats.contains(" 0 dropped")
                && stats.contains(" 0 overruns"),
            "{}: {frames} frames pass the filter; {stats}",
            self.name()
        );
        assert!(
            !log.contains("waiting in the journal"),
            "{} left CDRs undelivered: {log}",
            self.name()
        );
        let line = log
            .lines()
            .find_map(|l| l.strip_prefix("CDRs: "))
            .unwrap_or_else(|| panic!("no CDR line: {log}"));
        assert!(line.contains("acknowledged by the collector"), "{line}");
        line.split(' ').next().unwrap().parse().unwrap()
    }

    /// The calls the sensor printed (`--json`) in run `run`.
    fn printed_calls(&self, run: u32) -> usize {
        read(&self.stdout(run))
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .filter(|v| v["kind"] == "call")
            .count()
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: rows, and their comparison

/// The rows of `table` of sensor `sensor`, each as a JSON object.
fn rows(client: &mut postgres::Client, table: &Table, sensor: &str) -> Vec<Value> {
    let sql = format!(
        "SELECT row_to_json(t)::text FROM {} t WHERE {}",
        table.name, table.of_sensor
    );
    client
        .query(&sql, &[&sensor])
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap())
        .collect()
}

/// A row split into the part compared exactly (as text, for sorting) and the figures
/// compared within tolerance.
fn split(table: &Table, v: &Value) -> (String, Vec<(String, f64)>) {
    let mut exact = v.clone();
    let obj = exact.as_object_mut().unwrap();
    for k in table.ignored.iter().chain(ARCHIVE_COLUMNS.iter()) {
        obj.remove(*k);
    }
    for t in table.times {
        let set = obj.get(*t).is_some_and(|v| !v.is_null());
        obj.insert(t.to_string(), Value::Bool(set));
    }
    let mut approx = Vec::new();
    for (k, _) in TOLERANCES {
        if let Some(x) = obj.remove(*k) {
            approx.push((k.to_string(), x.as_f64().unwrap_or(f64::NAN)));
        }
    }
    (exact.to_string(), approx)
}

/// The collector's rows of a sensor equal the single-node capture's: the same records, the
/// packet-derived figures equal, the arrival-time ones within tolerance.
fn compare(what: &str, table: &Table, expected: &[Value], got: &[Value]) {
    let mut e: Vec<_> = expected.iter().map(|v| split(table, v)).collect();
    let mut g: Vec<_> = got.iter().map(|v| split(table, v)).collect();
    e.sort_by(|a, b| a.0.cmp(&b.0));
    g.sort_by(|a, b| a.0.cmp(&b.0));
    let ex: Vec<&String> = e.iter().map(|r| &r.0).collect();
    let gx: Vec<&String> = g.iter().map(|r| &r.0).collect();
    if gx != ex {
        let missing: Vec<_> = ex.iter().filter(|x| !gx.contains(x)).collect();
        let extra: Vec<_> = gx.iter().filter(|x| !ex.contains(x)).collect();
        panic!(
            "{what}: the collector's rows differ from a single-node capture's ({} and {} rows)\n\
             only in the single-node capture: {missing:#?}\nonly at the collector: {extra:#?}",
            ex.len(),
            gx.len()
        );
    }
    let mut worst: Vec<(String, f64)> = Vec::new();
    for (a, b) in e.iter().zip(&g) {
        for ((k, x), (_, y)) in a.1.iter().zip(&b.1) {
            let d = if x.is_nan() && y.is_nan() {
                0.0
            } else {
                (x - y).abs()
            };
            let tol = TOLERANCES.iter().find(|t| t.0 == k).unwrap().1;
            assert!(
                d <= tol,
                "{what}: {k} {x} single-node, {y} at the collector (tolerance {tol}): {}",
                a.0
            );
            match worst.iter_mut().find(|w| w.0 == *k) {
                Some(w) => w.1 = w.1.max(d),
                None => worst.push((k.clone(), d)),
            }
        }
    }
    eprintln!(
        "{what}: {} rows equal{}{}",
        e.len(),
        if worst.is_empty() {
            ""
        } else {
            "; largest timing differences: "
        },
        worst
            .iter()
            .map(|(k, d)| format!("{k} {d:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Every row of the collector's database is there once: one row per uid in each table, and
/// every uid under the sensor's name.
fn assert_once(client: &mut postgres::Client) {
    for table in &TABLES {
        let twice: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM (SELECT uid FROM {} GROUP BY uid HAVING count(*) > 1) d",
                    table.name
                ),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(twice, 0, "{}: uids stored more than once", table.name);
        let without: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {} WHERE uid IS NULL", table.name),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(without, 0, "{}: rows without a uid", table.name);
    }
    for table in ["cdr", "registration"] {
        let foreign: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE uid NOT LIKE sensor || '|%'"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(foreign, 0, "{table}: a uid not under its sensor's name");
    }
}

// ---------------------------------------------------------------------------------------------
// Pcaps

/// A call as stored at the collector: its flows (RTP streams and T.38, by source and
/// destination) with their packet counts.
struct StoredCall {
    sensor: usize,
    call_id: String,
    flows: HashMap<(SocketAddr, SocketAddr), u64>,
}

/// The collector's calls with their flows: stream `i` of call `uid` is `uid/i` in `cdr_rtp`,
/// its T.38 flow `i` `uid/t38/i` in `cdr_t38` (a fax moves the call's audio ports to T.38,
/// so a stream and a T.38 flow can share their addresses).
fn stored_calls(client: &mut postgres::Client) -> Vec<StoredCall> {
    let mut flows: HashMap<String, HashMap<(SocketAddr, SocketAddr), u64>> = HashMap::new();
    for (sql, sep) in [
        ("SELECT uid, src, dst, packets FROM cdr_rtp", "/"),
        ("SELECT uid, src, dst, packets FROM cdr_t38", "/t38/"),
    ] {
        for r in client.query(sql, &[]).unwrap() {
            let uid: String = r.get(0);
            // A lone stream's uid has no `/i`, and names no call.
            let Some((call, _)) = uid.rsplit_once(sep) else {
                continue;
            };
            let addr = |s: String| s.parse::<SocketAddr>().unwrap();
            let key = (addr(r.get(1)), addr(r.get(2)));
            *flows
                .entry(call.to_string())
                .or_default()
                .entry(key)
                .or_default() += r.get::<_, i64>(3) as u64;
        }
    }
    let mut ids = HashSet::new();
    client
        .query(
            "SELECT uid, sensor, call_id, sip_tar FROM cdr ORDER BY sensor, start_us",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let uid: String = r.get(0);
            let sensor: String = r.get(1);
            let call_id: String = r.get(2);
            let tar: Option<String> = r.get(3);
            assert!(tar.is_some(), "call {call_id} of {sensor} has no archive");
            // `tandem cdr pcap` names a call by its Call-ID: the traffic must not repeat one.
            assert!(
                ids.insert(call_id.clone()),
                "two calls with Call-ID {call_id}"
            );
            StoredCall {
                sensor: sensor.trim_start_matches('s').parse().unwrap(),
                flows: flows.remove(&uid).unwrap_or_default(),
                call_id,
            }
        })
        .collect()
}

/// `tandem cdr pcap` on the collector returns the call's pcap: the bytes the sensor's own
/// archive gives, made of packets the sensor was sent, with every SIP packet of the call's
/// Call-ID and every packet of its RTP streams and T.38 flows.
fn check_pcap(
    call: &StoredCall,
    conninfo: &str,
    store: &mut cdr::PgStore,
    socket: &Path,
    sent: &Sent,
) {
    let id = &call.call_id;
    let out = Command::new(EXE)
        .args(["cdr", "pcap", id, "--cdr-postgres", conninfo])
        .arg("--collector-socket")
        .arg(socket)
        .env_remove("TANDEM_CDR_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "pcap of {id}: {}", text(&out.stderr));
    // The sensor's own reading of its archive (`tandem cdr pcap` on the sensor).
    let (row, _) = store.show(id).unwrap().expect("the call");
    let own = sensor::call_pcap::call_pcap(&row).unwrap();
    assert!(
        out.stdout == own,
        "pcap of {id}: differs from the sensor's own"
    );
    let mut r = CaptureReader::from_reader(id.clone(), std::io::Cursor::new(out.stdout)).unwrap();
    let (mut sip, mut packets) = (0, 0);
    let mut per_flow: HashMap<(SocketAddr, SocketAddr), u64> = HashMap::new();
    while let Some(p) = r.next_packet().unwrap() {
        packets += 1;
        let ip = ip_packet(p.link_type, p.data).expect("an IP packet");
        assert!(
            sent.packets.contains(ip),
            "pcap of {id}: packet {packets} was never sent to sensor s{}",
            call.sensor
        );
        let ids = call_ids(ip);
        if !ids.is_empty() {
            assert!(
                ids.len() == 1 && ids.contains(id),
                "pcap of {id}: a SIP packet of {ids:?}"
            );
            sip += 1;
        }
        if let Some(key) = udp_addrs(ip).filter(|k| call.flows.contains_key(k)) {
            *per_flow.entry(key).or_default() += 1;
        }
    }
    assert_eq!(
        sip,
        sent.by_call_id.get(id).copied().unwrap_or(0),
        "pcap of {id}: SIP packets"
    );
    for (key, n) in &call.flows {
        let got = per_flow.get(key).copied().unwrap_or(0);
        assert_eq!(got, *n, "pcap of {id}: flow {} -> {}", key.0, key.1);
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn sensors_on_namespaces_deliver_every_call_once_through_kills_outages_and_cuts() {
    let started = Instant::now();
    if let Some(why) = VethPair::unavailable() {
        test_env::skip(&why);
        return;
    }
    let pg = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return;
        }
        Err(e) => panic!("PostgreSQL: {e}"),
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (ca, cert, key) = certificates(dir);

    // The traffic: a synthetic capture per sensor, and the shared captures shared out, the
    // longest first, each to the sensor with the least replay time so far.
    let mut inputs: Vec<Vec<Input>> = synthetic_inputs(dir).into_iter().map(|i| vec![i]).collect();
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    match std::fs::read_dir(&shared) {
        Ok(entries) => {
            let mut files: Vec<(Input, f64)> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
                .map(|p| shared_input(&p, dir))
                .collect();
            files.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mut load = [0.0f64; SENSORS];
            for (input, secs) in files {
                let k = (0..SENSORS)
                    .min_by(|a, b| load[*a].total_cmp(&load[*b]))
                    .unwrap();
                load[k] += secs;
                inputs[k].push(input);
            }
            eprintln!("shared captures' replay time per sensor: {load:.1?} s");
        }
        Err(_) => eprintln!("{} is absent: synthetic captures only", shared.display()),
    }

    let net = Network::create();
    let data = dir.join("collector");
    let mut sensors = Vec::new();
    for (k, inputs) in (1..=SENSORS).zip(inputs) {
        let added = Command::new(EXE)
            .args(["sensor", "add", &format!("s{k}"), "--data-dir"])
            .arg(&data)
            .env_remove("TANDEM_DATA_DIR")
            .output()
            .unwrap();
        assert!(added.status.success(), "{}", text(&added.stderr));
        let sdir = dir.join(format!("s{k}"));
        std::fs::create_dir_all(&sdir).unwrap();
        let token = sdir.join("token");
        std::fs::write(&token, &added.stdout).unwrap();
        let mut sent = Sent::default();
        for i in &inputs {
            sent.add(&i.replayed);
        }
        sensors.push(Sensor {
            k,
            ns: &net.sensors[k - 1],
            dir: sdir,
            token,
            inputs,
            sent,
        });
    }
    let mut logs = vec![dir.join("serve.log")];
    for s in &sensors {
        logs.extend([s.stderr(1), s.stderr(2)]);
    }
    let _logs = LogsOnFailure(logs);

    let mut collector = Collector::start(&net.collector, dir, &pg.conninfo_unix(), &cert, &key);
    let live: Vec<Proc> = sensors
        .iter()
        .map(|s| s.start(1, &ca, &collector))
        .collect();
    eprintln!(
        "collector and {SENSORS} sensors up after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The traffic, and the events while it runs.
    let synthetic_running = AtomicUsize::new(SENSORS);
    let replay_started = Instant::now();
    let mut nacked = 0.0;
    std::thread::scope(|scope| {
        for s in &sensors {
            let running = &synthetic_running;
            scope.spawn(move || {
                s.replay(&s.inputs[0]);
                running.fetch_sub(1, Ordering::SeqCst);
            });
            scope.spawn(move || {
                for i in &s.inputs[1..] {
                    s.replay(i);
                }
            });
        }
        let during_traffic = |what: &str| {
            assert_eq!(
                synthetic_running.load(Ordering::SeqCst),
                SENSORS,
                "{what} came after the synthetic traffic ended ({:.1} s): make it longer",
                replay_started.elapsed().as_secs_f64()
            );
            eprintln!("{what} at {:.1} s", replay_started.elapsed().as_secs_f64());
        };
        // The first CDRs come a call's length and the monitor's linger (5 s) after the start;
        // the events begin once every sensor's are flowing.
        std::thread::sleep(EVENTS_FROM);
        let replayed = wait_recovered(&collector, &[0.0; SENSORS], &[], "before the events");
        let m = collector.metrics();
        for k in 1..=SENSORS {
            let stored = m.sensor("records_stored_total", k);
            assert!(stored > 0.0, "s{k}: no CDR stored after {EVENTS_FROM:?}");
        }

        // 1. The collector dies (nothing of its shutdown runs) and comes back.
        during_traffic("collector SIGKILLed");
        collector.proc.kill();
        std::thread::sleep(COLLECTOR_DOWN);
        collector.spawn();
        let all: Vec<usize> = (1..=SENSORS).collect();
        let replayed = wait_recovered(&collector, &replayed, &all, "after the collector's restart");
        eprintln!(
            "collector back, journals replayed ({replayed:?}) at {:.1} s",
            replay_started.elapsed().as_secs_f64()
        );

        // 2. PostgreSQL stops for 10 s: the collector refuses batches, the sensors journal.
        during_traffic("PostgreSQL stopped");
        pg.stop_fast().unwrap();
        let until = Instant::now() + DATABASE_DOWN;
        let mut db_down_seen = false;
        while Instant::now() < until {
            db_down_seen |= collector.metrics().get("tandem_collector_db_up") == Some(0.0);
            std::thread::sleep(Duration::from_millis(200));
        }
        pg.start_again().unwrap();
        assert!(db_down_seen, "the collector never said PostgreSQL was down");
        let replayed = wait_recovered(&collector, &replayed, &all, "after PostgreSQL's outage");
        nacked = collector
            .metrics()
            .get("tandem_collector_nacked_batches_total")
            .unwrap_or(0.0);
        eprintln!(
            "PostgreSQL back, {nacked} batches refused meanwhile, journals replayed ({replayed:?}) at {:.1} s",
            replay_started.elapsed().as_secs_f64()
        );

        // 3. One sensor's link goes down and comes back.
        during_traffic(&format!("link of s{CUT_SENSOR} cut"));
        let ns = &net.sensors[CUT_SENSOR - 1];
        ns.ip(&["link", "set", "up0", "down"]);
        let until = Instant::now() + LINK_DOWN;
        let mut offline_seen = false;
        while Instant::now() < until {
            offline_seen |= collector.metrics().sensor("connected", CUT_SENSOR) == 0.0;
            std::thread::sleep(Duration::from_millis(200));
        }
        ns.ip(&["link", "set", "up0", "up"]);
        assert!(offline_seen, "the collector never saw s{CUT_SENSOR} go");
        let replayed = wait_recovered(&collector, &replayed, &[CUT_SENSOR], "after the cut");
        eprintln!(
            "link back, s{CUT_SENSOR}'s journal replayed ({replayed:?}) at {:.1} s",
            replay_started.elapsed().as_secs_f64()
        );
    });
    eprintln!(
        "traffic replayed in {:.1} s",
        replay_started.elapsed().as_secs_f64()
    );
    assert!(
        nacked > 0.0,
        "no batch was refused while PostgreSQL was down"
    );
    wait_recovered(&collector, &[0.0; SENSORS], &[], "after the traffic");

    // Pcaps of the calls delivered so far, from the sensors that captured them.
    let mut client = postgres::Client::connect(&pg.conninfo(), postgres::NoTls).unwrap();
    let conninfo = pg.conninfo();
    let mut store = cdr::PgStore::connect(&conninfo).unwrap();
    let mut fetched = HashSet::new();
    for call in stored_calls(&mut client) {
        let sent = &sensors[call.sensor - 1].sent;
        check_pcap(&call, &conninfo, &mut store, &collector.socket(), sent);
        fetched.insert(call.call_id);
    }
    eprintln!(
        "{} pcaps fetched through the collector while the sensors ran",
        fetched.len()
    );

    // The sensors stop: the calls still open are closed, archived and delivered.
    let mut acknowledged = Vec::new();
    for (s, p) in sensors.iter().zip(live) {
        acknowledged.push(s.stop(1, p, s.sent.frames));
    }
    for s in &sensors {
        let log = read(&s.stderr(1));
        let ended = log.matches("session with the collector ended").count();
        assert!(ended >= 2, "s{}: {ended} sessions ended: {log}", s.k);
        assert!(
            log.contains("the collector could not store the records"),
            "s{}: PostgreSQL's outage not seen: {log}",
            s.k
        );
        if s.k == CUT_SENSOR {
            assert!(
                log.contains("nothing from the collector for"),
                "s{}: the cut not seen: {log}",
                s.k
            );
        }
    }

    // (1) Every record once, as many as each sensor printed and was acknowledged.
    assert_once(&mut client);
    let mut total = 0;
    for (s, ack) in sensors.iter().zip(&acknowledged) {
        let mut n = |sql: &str| -> i64 {
            client
                .query_one(sql, &[&s.name()])
                .unwrap()
                .get::<_, i64>(0)
        };
        let calls = n("SELECT count(*) FROM cdr WHERE sensor = $1");
        let lone = n("SELECT count(*) FROM cdr_rtp WHERE uid LIKE $1 || '|rtp|%'");
        let regs = n("SELECT count(*) FROM registration WHERE sensor = $1");
        assert_eq!(
            calls as usize,
            s.printed_calls(1),
            "s{}: calls stored and calls the sensor printed",
            s.k
        );
        assert_eq!(
            (calls + lone + regs) as u64,
            *ack,
            "s{}: records stored and acknowledged",
            s.k
        );
        total += calls;
    }

    // (2) The same records as a single-node capture of the same files.
    client.batch_execute("CREATE DATABASE single_node").unwrap();
    let single = pg
        .conninfo()
        .replace("dbname=postgres", "dbname=single_node");
    for s in &sensors {
        for input in &s.inputs {
            let out = Command::new(EXE)
                .args(["capture", "--status-interval-s", "0", "--read"])
                .arg(&input.reference)
                .args(["--cdr-postgres", &single, "--sensor-id", &s.name()])
                // Only its journal's place (none is left: the database is up).
                .arg("--cdr-db")
                .arg(dir.join("single-node").join("cdr.sqlite3"))
                .env("TANDEM_LOG", "warn")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
    }
    let mut reference = postgres::Client::connect(&single, postgres::NoTls).unwrap();
    let single_calls: i64 = reference
        .query_one("SELECT count(*) FROM cdr", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        total, single_calls,
        "calls at the collector and single-node"
    );
    for s in &sensors {
        for table in &TABLES {
            let expected = rows(&mut reference, table, &s.name());
            let got = rows(&mut client, table, &s.name());
            compare(&format!("s{} {}", s.k, table.name), table, &expected, &got);
        }
    }

    // (3) The pcaps of the calls closed by the stop, from the sensors started again.
    let again: Vec<Proc> = sensors
        .iter()
        .map(|s| s.start(2, &ca, &collector))
        .collect();
    let mut late = 0;
    for call in stored_calls(&mut client) {
        if !fetched.contains(&call.call_id) {
            let sent = &sensors[call.sensor - 1].sent;
            check_pcap(&call, &conninfo, &mut store, &collector.socket(), sent);
            late += 1;
        }
    }
    for (s, p) in sensors.iter().zip(again) {
        assert_eq!(s.stop(2, p, 0), 0, "s{}: records from nothing", s.k);
    }
    eprintln!(
        "{total} calls stored once and equal to a single-node capture; {} pcaps fetched ({late} after the stop); {:.1} s in all",
        fetched.len() + late,
        started.elapsed().as_secs_f64()
    );
}
