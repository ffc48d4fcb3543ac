//! `tandem serve` as an operator runs it: a real process, real sockets, real signals.

use asterisk_emu::{AgiStatus, Plan};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Served {
    child: Child,
    agi: SocketAddr,
    http: SocketAddr,
    /// The server's store; fields drop after `Drop::drop` has stopped the server.
    _data: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends SIGTERM to the server, as systemd does to stop it.
fn sigterm(served: &Served) {
    let pid = served.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn serve(extra: &[&str]) -> Served {
    let (agi, http) = (free_addr(), free_addr());
    // Each server its own key-value store (two may not share one), removed with the server.
    let data = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--agi-listen",
            &agi.to_string(),
            "--metrics-listen",
            &http.to_string(),
            "--web-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env("TANDEM_DATA_DIR", data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let served = Served {
        child,
        agi,
        http,
        _data: data,
    };
    // HTTP is bound after the FastAGI workers, so once it answers one probe of the AGI port
    // is enough (each probe counts as a session closed before its header).
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(http).is_err() {
        assert!(
            Instant::now() < deadline,
            "tandem serve did not start listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    TcpStream::connect(agi).expect("the FastAGI port listens before HTTP");
    served
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: tandem\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

fn emulate(addr: SocketAddr, plan: Plan) -> asterisk_emu::Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(asterisk_emu::run(addr, &plan, 1)).unwrap()
}

#[test]
fn serve_answers_asterisk_and_exports_metrics() {
    let served = serve(&[]);
    let out = emulate(served.agi, Plan::route("bench"));
    assert_eq!(out.status, AgiStatus::Success);
    assert_eq!(out.commands, 10);
    assert!(http_get(served.http, "/health").ends_with("OK\n"));
    let metrics = http_get(served.http, "/metrics");
    // The start-up probe's bare connection is counted apart, not as a failed header; every
    // known reason is there, at 0 until it happens.
    assert!(
        metrics.contains("tandem_agi_sessions_failed_total{reason=\"closed_before_header\"} 1")
    );
    assert!(
        metrics.contains("tandem_agi_sessions_failed_total{reason=\"header\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("tandem_agi_hangup_probes_total{answer=\"live\"} 0"));
    // Sized from the open-file limit, which tandem raises to the hard limit at start.
    let (_, hard) = fastagi::runtime::fd_limits().unwrap();
    let max_sessions = fastagi::runtime::sessions_for_fd_limit(hard);
    for expected in [
        "tandem_agi_commands_sent_total 10".to_string(),
        format!("tandem_agi_sessions_max {max_sessions}"),
        "tandem_agi_session_duration_seconds_count{route=\"bench\"} 1".to_string(),
        "tandem_agi_sessions_ended_total{route=\"bench\",outcome=\"success\"} 1".to_string(),
    ] {
        assert!(metrics.contains(&expected), "{expected} not in:\n{metrics}");
    }
}

#[test]
fn sigterm_stops_accepting_and_drains_the_session_in_progress() {
    let mut served = serve(&[]);
    let addr = served.agi;
    // A slow caller: each command takes 200 ms to answer, nine commands in all.
    let plan = Plan {
        command_delay: Duration::from_millis(200),
        ..Plan::route("example")
    };
    let session = std::thread::spawn(move || emulate(addr, plan));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !http_get(served.http, "/metrics").contains("tandem_agi_sessions_active 1") {
        assert!(Instant::now() < deadline, "the session never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    sigterm(&served);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = session.join().unwrap();
    assert_eq!(
        out.status,
        AgiStatus::Success,
        "the session in progress finished"
    );
    assert_eq!(
        out.exchanges.last().unwrap().0,
        "SET VARIABLE TANDEM_DIGIT \"\""
    );
    let status = served.child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
}

#[test]
fn a_bad_configuration_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tandem.toml");
    std::fs::write(&path, "[fastagi]\nmax_session = 10\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tandem.toml") && err.contains("max_session"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--config", "/nonexistent/tandem.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the configuration file"));
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--agi-listen",
            &addr,
            "--metrics-listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .env("TANDEM_DATA_DIR", data.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[test]
fn a_second_tandem_on_the_same_fastagi_port_refuses_to_start_and_names_the_first() {
    // The workers bind with SO_REUSEPORT, so the kernel alone would let both start and split
    // Asterisk's sessions between them.
    let first = serve(&[]);
    let data = tempfile::tempdir().unwrap();
    let second_data = data.path().join("second");
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--agi-listen",
            &first.agi.to_string(),
            "--metrics-listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .env("TANDEM_DATA_DIR", &second_data)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the second server started");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {}", first.agi))
            && err.contains(&format!("pid {}", first.child.id())),
        "{err}"
    );
    assert!(
        !second_data.exists(),
        "the refused server created its data directory"
    );
    // A user error, not a crash: no backtrace even with RUST_BACKTRACE set.
    assert!(!err.contains("backtrace"), "{err}");
    // The first one still serves.
    let outcome = emulate(first.agi, Plan::route("health"));
    assert_eq!(outcome.status, AgiStatus::Success);
}

/// The log, checked to carry no terminal colour codes: stderr here is a pipe, not a terminal.
fn plain(log: &[u8]) -> String {
    let text = String::from_utf8_lossy(log).into_owned();
    assert!(
        !text.contains('\u{1b}'),
        "a log written to a pipe has no ANSI escape codes:\n{text}"
    );
    text
}

#[test]
fn the_session_limit_is_sized_from_the_raised_open_file_limit_and_logged() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tandem.toml");
    // An older file: hangup_probe_ms is read, ignored and named in a warning.
    std::fs::write(&config, "[fastagi]\nhangup_probe_ms = 20\n").unwrap();
    let agi = free_addr();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.args(["serve", "--config"])
        .arg(&config)
        .args([
            "--agi-listen",
            &agi.to_string(),
            "--metrics-listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .env("TANDEM_DATA_DIR", dir.path())
        .env("TANDEM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // As systemd starts a service: a low soft limit under a higher hard one.
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
            l.rlim_cur = l.rlim_max.min(256);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    // Read the log until the server has started (its last start-up line is the warning about
    // the obsolete option, right after "FastAGI server listening"), or ends; then stop it.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = Vec::new();
    while std::io::BufRead::read_until(&mut stderr, b'\n', &mut log).unwrap() > 0 {
        if String::from_utf8_lossy(&log).contains("hangup_probe_ms is no longer used") {
            break;
        }
    }
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    stderr.read_to_end(&mut log).unwrap();
    child.wait().unwrap();
    let log = plain(&log);
    let (_, hard) = fastagi::runtime::fd_limits().unwrap();
    if hard > 256 {
        assert!(
            log.contains(&format!("before=256 after={hard}")),
            "the raise is logged:\n{log}"
        );
    }
    let sized = fastagi::runtime::sessions_for_fd_limit(hard);
    assert!(
        log.contains(&format!("max_sessions={sized}"))
            && log.contains(&format!("file-descriptor limit {hard}")),
        "the limit and its source are logged:\n{log}"
    );
    assert!(
        log.contains("fastagi.hangup_probe_ms is no longer used"),
        "{log}"
    );
}

#[test]
fn a_log_written_to_a_file_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("tandem.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--agi-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ])
        .env("TANDEM_DATA_DIR", dir.path().join("data"))
        .env("TANDEM_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("FastAGI server listening")
    {
        assert!(Instant::now() < deadline, "tandem serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();
    plain(&std::fs::read(&log_path).unwrap());
}

/// `tandem serve` samples `/metrics` and the host into the history every `interval_s`, and the
/// samples are there after a SIGTERM: the figures the console's charts will draw.
#[test]
fn serve_keeps_a_history_of_its_metrics_and_of_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tandem.toml");
    let history_path = dir.path().join("history.sqlite3");
    std::fs::write(
        &config,
        format!(
            "[history]\ninterval_s = 1\nfile = \"{}\"\n",
            history_path.display()
        ),
    )
    .unwrap();
    let mut served = serve(&["--config", config.to_str().unwrap()]);
    // Sessions whose times go into the route's latency sketch.
    for _ in 0..3 {
        assert_eq!(
            emulate(served.agi, Plan::route("bench")).status,
            AgiStatus::Success
        );
    }
    // Three ticks: the first has no rates yet; the later ones have CPU and network rates.
    std::thread::sleep(Duration::from_millis(3_500));
    sigterm(&served);
    assert!(served.child.wait().unwrap().success());
    let mut h =
        history::History::open(&history_path, history::HistoryConfig::with_interval(1)).unwrap();
    let names = h.series_names().unwrap();
    for wanted in [
        "tandem_agi_sessions_active",
        "host_load1",
        "host_memory_available_bytes",
        "host_cpu_busy_pct{cpu=\"cpu\"}",
        "host_net_rx_bytes_per_second{interface=\"lo\"}",
        "tandem_process_rss_bytes",
        "tandem_process_cpu_pct",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} not in {names:?}"
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let rss = h
        .query("tandem_process_rss_bytes", now - 60, now + 1, 1000)
        .unwrap();
    assert_eq!(rss.level, "raw");
    assert!(
        rss.points.len() >= 2 && rss.points.iter().all(|p| p.last > 1e6),
        "{rss:?}"
    );
    // The route's session times, from its histogram, as a latency sketch: three sessions.
    let sessions = h
        .quantiles(
            "tandem_agi_session_duration_seconds{route=\"bench\"}",
            now - 60,
            now + 1,
            1000,
            &[0.5, 0.99],
        )
        .unwrap();
    assert_eq!(sessions.count, 3, "{sessions:?}");
    assert!(
        sessions
            .whole
            .iter()
            .all(|q| q.is_some_and(|v| v > 0.0 && v < 10.0))
    );
}
