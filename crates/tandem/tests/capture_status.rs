//! A running `tandem capture --hep-listen` reports its status: `/metrics` over real HTTP, and
//! the status line in its log.

mod common;

use common::{free_udp_port, one_call_as_hep, send_udp};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `GET path` over a plain TCP connection; the whole response, headers included.
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The next log line containing `what` (at most a minute: a bound on a broken test).
fn line_with(lines: &mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(what) => return l,
            Ok(_) => {}
            Err(e) => panic!("no log line with {what:?}: {e}"),
        }
    }
}

/// Starts `tandem` with `args`, logging at info level; its log lines arrive on the receiver.
fn spawn_logging(
    args: &[&std::ffi::OsStr],
) -> (
    std::process::Child,
    mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .env("TANDEM_LOG", "info")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for l in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    (child, lines, reader)
}

/// SIGTERM, a clean exit, then the CDRs stored in `db` as `tandem cdr list --json` prints them.
fn stop_and_list_cdrs(
    mut child: std::process::Child,
    reader: std::thread::JoinHandle<()>,
    db: &std::path::Path,
) -> String {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["cdr", "list", "--json", "--cdr-db"])
        .arg(db)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_hep_capture_serves_metrics_and_logs_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let hep_port = free_udp_port();
    let hep = format!("127.0.0.1:{hep_port}");
    let (child, lines, reader) = spawn_logging(&[
        "capture".as_ref(),
        "--hep-listen".as_ref(),
        hep.as_ref(),
        "--metrics-listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--status-interval-s".as_ref(),
        "1".as_ref(),
        "--cdr-db".as_ref(),
        db.as_os_str(),
    ]);

    // "metrics on http://127.0.0.1:PORT/metrics": the port the system chose.
    let l = line_with(&lines, "metrics on http://");
    let at = l.find("http://").unwrap() + "http://".len();
    let metrics: SocketAddr = l[at..].split('/').next().unwrap().parse().unwrap();
    line_with(&lines, "listening for HEP v3");

    send_udp(hep_port, &one_call_as_hep("status-call@192.0.2.10"));
    // The monitor publishes its counters every second in HEP mode: ask until they show.
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        let r = http_get(metrics, "/metrics");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        if r.contains("tandem_capture_packets_total 6\n") {
            break r;
        }
        assert!(Instant::now() < deadline, "packets never counted: {r}");
        std::thread::sleep(Duration::from_millis(100));
    };
    for expected in [
        "tandem_capture_calls_total 1\n",
        "tandem_capture_sip_messages_total 6\n",
        "tandem_capture_rtp_packets_total 0\n",
        "tandem_capture_cdr_queue_records_max 10000\n",
        "tandem_capture_cdr_dropped_records_total 0\n",
        "tandem_capture_cdr_store_up 1\n",
        "tandem_capture_thread_cpu_seconds_total{thread=\"cdr-writer\"}",
        "tandem_capture_thread_cpu_seconds_total{thread=\"capture-metrics\"}",
        "tandem_capture_resident_memory_bytes ",
    ] {
        assert!(body.contains(expected), "no {expected:?} in {body}");
    }
    // No live capture ring and no archive in this run: their figures are absent, not zero.
    assert!(
        !body.contains("kernel_drops") && !body.contains("archive"),
        "{body}"
    );

    let status = line_with(&lines, "active, 1 total");
    for part in [
        "packets/s",
        "CDR queue 0/10000",
        "CPU ",
        "cdr-writer",
        "RSS ",
    ] {
        assert!(status.contains(part), "no {part:?} in {status}");
    }
    assert!(!status.contains("kernel drops"), "{status}");

    let text = stop_and_list_cdrs(child, reader, &db);
    assert!(text.contains("status-call@192.0.2.10"), "{text}");
}

/// `tandem serve` with a `[capture]` section runs the call monitor beside FastAGI: its status
/// line appears in the server's log, and SIGTERM stops both, storing the calls it saw.
#[test]
fn serve_runs_the_configured_capture_and_stores_its_calls_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let hep_port = free_udp_port();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nhep_listen = \"127.0.0.1:{hep_port}\"\ncdr_db = \"{}\"\nstatus_interval_s = 1\n",
            db.display()
        ),
    )
    .unwrap();
    let kv = dir.path().join("kv");
    let (child, lines, reader) = spawn_logging(&[
        "serve".as_ref(),
        "--agi-listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--metrics-listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--web-listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--data-dir".as_ref(),
        kv.as_os_str(),
    ]);
    line_with(&lines, "listening for HEP v3");
    send_udp(hep_port, &one_call_as_hep("status-call@192.0.2.10"));
    line_with(&lines, "active, 1 total");

    let text = stop_and_list_cdrs(child, reader, &db);
    assert!(text.contains("status-call@192.0.2.10"), "{text}");
}
