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
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
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

/// Stands in for FreePBX's generated `macro-dial` where the README's override block meets it:
/// the same priorities and labels (the script at priority 6, labelled `dial`, on line 8 as in
/// `extensions_additional.conf`; its result tested at 7; `normdial` at 10), simpler dialling.
const MACRO_DIAL_STAND_IN: &str = r#"[macro-dial]
include => macro-dial-custom
exten => s,1,NoOp(macro-dial as FreePBX 16 and 17 number it)
exten => s,n,NoOp(2)
exten => s,n,NoOp(3)
exten => s,n,NoOp(4)
exten => s,n,NoOp(5)
exten => s,n(dial),AGI(dialparties.agi)
exten => s,n,GotoIf($["${MACRODIALGOTO_PRI}"!=""]?${MACRODIALGOTO_PRI})
exten => s,n,NoOp(nothing to dial: ${DIALSTATUS})
exten => s,n,Return()
exten => s,n(normdial),Dial(${ds})
exten => s,n,Return()
[tandem-test]
exten => rg,1,Set(RingGroupMethod=ringall)
 same => n,Set(__NODEST=600)
 same => n,Gosub(macro-dial,s,1(20,tr,201-202))
 same => n,Hangup()
"#;

/// The sections of the Asterisk 22 recording (`tests/data/asterisk22-freepbx-override.txt`):
/// title → lines.
fn asterisk_recording() -> std::collections::HashMap<String, Vec<String>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/asterisk22-freepbx-override.txt");
    let mut out = std::collections::HashMap::new();
    let mut title = String::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        if let Some(t) = line.strip_prefix("## ") {
            title = t.to_string();
        } else if !line.starts_with('#') && !title.is_empty() {
            out.entry(title.clone())
                .or_insert_with(Vec::new)
                .push(line.to_string());
        }
    }
    out
}

/// What a log shows of the override at work: the macro-dial priorities run from 6 to the one
/// after 7 (where FreePBX's dialplan takes over again), and the lines of 6, 7 and 500 to 502,
/// with the recording's prefix and suffix taken off.
fn override_steps(lines: &[String]) -> (Vec<u32>, Vec<String>) {
    let mut priorities = Vec::new();
    let mut touched = Vec::new();
    for line in lines {
        let line = line.strip_prefix("VERBOSE pbx.c: ").unwrap_or(line);
        let line = line.strip_suffix(" in new stack").unwrap_or(line);
        let Some(p) = line
            .strip_prefix("Executing [s@macro-dial:")
            .and_then(|r| r.split(']').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if p == 6 || !priorities.is_empty() {
            priorities.push(p);
        }
        if [6, 7, 500, 501, 502].contains(&p) {
            touched.push(line.to_string());
        }
        if priorities.len() >= 2 && priorities[priorities.len() - 2] == 7 {
            break;
        }
    }
    (priorities, touched)
}

/// A ring group's call through the README's block over the stand-in, as the recorded one.
fn ring_group_call(
    dialplan: &asterisk_emu::Dialplan,
    mut channel: asterisk_emu::Channel,
    tandem: SocketAddr,
    agi_dir: &std::path::Path,
) -> (asterisk_emu::Call, asterisk_emu::CallEnd) {
    channel.name = "Local/rg@tandem-test-00000000;2".into();
    let mut call = asterisk_emu::Call::new(channel);
    call.agi_hosts.push(asterisk_emu::AgiHost {
        name: "127.0.0.1:4573".into(),
        addr: tandem,
    });
    call.agi_dir = Some(agi_dir.to_path_buf());
    call.agi_idle_timeout = Duration::from_secs(10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = rt
        .block_on(call.run(dialplan, "tandem-test", "rg"))
        .unwrap();
    (call, end)
}

#[test]
fn the_readme_freepbx_override_falls_back_to_the_script_and_otherwise_dials_tandems_decision() {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let block = asterisk_emu::markdown_block(&readme, "exten => s,500(tandem)")
        .expect("the README's FreePBX override block");
    let dialplan = asterisk_emu::Dialplan::load(&[
        ("extensions_override_freepbx.conf", block),
        ("extensions_additional.conf", MACRO_DIAL_STAND_IN),
    ]);
    let recorded = asterisk_recording();
    // Loading: Asterisk 22 refused FreePBX's line 6 and nothing else, for 16 and 17.
    for version in [16, 17] {
        let warnings: Vec<String> = recorded[&format!("FreePBX {version}: dialplan reload")]
            .iter()
            .map(|w| w.split_once(".c: ").unwrap().1.to_string())
            .collect();
        assert_eq!(dialplan.warnings, warnings, "FreePBX {version}");
    }

    // The classic script, a stand-in as in the recording.
    let agi_dir = tempfile::tempdir().unwrap();
    let script = agi_dir.path().join("dialparties.agi");
    std::fs::write(
        &script,
        "#!/bin/sh\nwhile read -r line && [ -n \"$line\" ]; do :; done\n\
         echo 'SET VARIABLE DIALPARTIES_BY classic'\nread -r reply\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let members = ["201".to_string(), "202".to_string()];

    // Tandem stopped (started, then killed: its port refuses): the call runs the classic
    // script, exactly as Asterisk 22 did.
    let stopped = serve(&[]).agi;
    let (call, end) = ring_group_call(
        &dialplan,
        asterisk_emu::freepbx::extensions(&members),
        stopped,
        agi_dir.path(),
    );
    let real = &recorded["FreePBX 17: a ring group (ringall 201-202), Tandem stopped"];
    assert_eq!(
        override_steps(&call.log()),
        override_steps(real),
        "{:#?}",
        call.log()
    );
    assert_eq!(call.channel.variables["DIALPARTIES_BY"], "classic");
    assert_eq!(call.channel.variables["AGISTATUS"], "SUCCESS");
    let real_warnings: Vec<&str> = real
        .iter()
        .filter_map(|l| l.strip_prefix("WARNING res_agi.c: "))
        .collect();
    assert_eq!(call.warnings, real_warnings, "{end:?}");
    assert!(call.dials.is_empty(), "{:?}", call.dials);

    // Tandem serving: its decision is dialled, and the classic script does not run.
    let served = serve(&[]);
    let (call, end) = ring_group_call(
        &dialplan,
        asterisk_emu::freepbx::extensions(&members),
        served.agi,
        agi_dir.path(),
    );
    let real = &recorded["FreePBX 17: the same call, Tandem serving dialparties natively on 127.0.0.1:4573"];
    assert_eq!(
        override_steps(&call.log()),
        override_steps(real),
        "{:#?}",
        call.log()
    );
    assert!(!call.channel.variables.contains_key("DIALPARTIES_BY"));
    let asterisk_emu::CallEnd::Answered { dial } = end else {
        panic!("nothing dialled: {end:?} {:#?}", call.log());
    };
    let contacts = format!(
        "{}&{},20,tr",
        asterisk_emu::freepbx::contact("201"),
        asterisk_emu::freepbx::contact("202")
    );
    assert!(dial.starts_with(&contacts), "{dial}");
    assert!(call.warnings.is_empty(), "{:?}", call.warnings);
}

#[test]
fn a_change_to_the_store_while_serve_runs_says_what_works_meanwhile() {
    let served = serve(&[]);
    let run = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(args)
            .arg("--data-dir")
            .arg(served._data.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            !out.status.success(),
            "{args:?} changed a store serve holds"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["sip", "user", "add", "1001", "--password-stdin"]);
    assert!(
        err.contains("running `tandem serve`")
            && err.contains("`tandem sip user list` and `tandem sip bindings`")
            && !err.contains("export-astdb"),
        "{err}"
    );
    let err = run(&["db", "put", "fam", "key", "value"]);
    assert!(
        err.contains("`tandem db get`, `show`, `export-astdb` and `backup`")
            && !err.contains("tandem sip"),
        "{err}"
    );
}

#[test]
fn a_taken_web_metrics_or_sip_port_names_the_process_holding_it() {
    let me = format!("by pid {}", std::process::id());
    let refused = |args: &[&str]| {
        let data = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .arg("serve")
            .args(args)
            .env("TANDEM_DATA_DIR", data.path().join("data"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}: started on a taken port");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let agi = free_addr().to_string();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let free = free_addr().to_string();

    let web = refused(&[
        "--agi-listen",
        &agi,
        "--metrics-listen",
        &free,
        "--web-listen",
        &addr,
    ]);
    assert!(
        web.contains(&format!("console on {addr}")) && web.contains(&format!("(held: {addr} {me}")),
        "{web}"
    );
    let metrics = refused(&[
        "--agi-listen",
        &agi,
        "--metrics-listen",
        &addr,
        "--web-listen",
        &free,
    ]);
    assert!(
        metrics.contains(&format!("metrics on {addr}"))
            && metrics.contains(&format!("(held: {addr} {me}")),
        "{metrics}"
    );

    // The registrar's UDP port, as Asterisk's own SIP stack would hold it.
    let sip = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let sip_addr = sip.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"{agi}\"\n[metrics]\nlisten = \"{free}\"\n[web]\nenabled = false\n\
             [history]\nenabled = false\n[registrar]\nlisten = \"{sip_addr}\"\n"
        ),
    )
    .unwrap();
    let registrar = refused(&["--config", config.to_str().unwrap()]);
    assert!(
        registrar.contains(&format!("SIP UDP on {sip_addr}"))
            && registrar.contains(&format!("(held: {sip_addr} {me}")),
        "{registrar}"
    );
}

#[test]
fn a_capture_interface_that_does_not_exist_stops_serve_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n[web]\nenabled = false\n\
             [history]\nenabled = false\n[kv]\ndata_dir = {:?}\n[capture]\ninterface = \"tdmnosuch0\"\n",
            free_addr(),
            dir.path().join("data")
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It must stop by itself; a server that runs on without its capture is the failure.
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tandem serve runs on without its capture");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[capture] interface = \"tdmnosuch0\"") && err.contains("no such interface"),
        "{err}"
    );
}
