//! The FastAGI server over real loopback sockets, driven by the Asterisk emulator.

use agi::Command;
use asterisk_emu::{AgiStatus, Plan, Violation};
use fastagi::{AgiError, Handler, Router, ServerConfig, Session, SessionOutcome, builtin};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

use common::{start, test_config};

fn plan(script: &str) -> Plan {
    Plan {
        idle_timeout: Duration::from_secs(10),
        ..Plan::route(script)
    }
}

/// Connects like Asterisk with a minimal header asking for `route`, for tests that then play
/// Asterisk's side by hand.
async fn raw_session(addr: SocketAddr, route: &str) -> TcpStream {
    let mut raw = TcpStream::connect(addr).await.unwrap();
    let header = format!("agi_network: yes\nagi_network_script: {route}\n\n");
    raw.write_all(header.as_bytes()).await.unwrap();
    raw
}

/// Reads until the server closes, for at most `limit`.
async fn read_to_end(stream: &mut TcpStream, limit: Duration) -> String {
    let mut all = Vec::new();
    let _ = tokio::time::timeout(limit, stream.read_to_end(&mut all)).await;
    String::from_utf8_lossy(&all).into_owned()
}

#[tokio::test]
async fn a_native_handler_runs_a_ten_command_session() {
    let server = start(test_config(), builtin::routes()).await;
    let out = asterisk_emu::run(server.addr, &plan("bench"), 1)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    let sent: Vec<&str> = out.exchanges.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(sent, builtin::BENCH_COMMANDS);
    assert_eq!(
        out.exchanges[1].1, "200 result=1 (2000)\n",
        "caller id from the header"
    );
    assert_eq!(
        out.hangup_lines_sent, 1,
        "the HANGUP Asterisk sends when the server closes"
    );
    assert_eq!(server.metrics.commands_sent.get(), 10);
    server.stop().await;
}

#[tokio::test]
async fn health_and_example_routes() {
    let server = start(test_config(), builtin::routes()).await;
    let out = asterisk_emu::run(server.addr, &plan("health"), 1)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    assert_eq!(out.exchanges[0].0, "SET VARIABLE TANDEM_STATUS OK");

    let p = Plan {
        digit: Some('5'),
        args: vec!["beep".into()],
        ..plan("example")
    };
    let out = asterisk_emu::run(server.addr, &p, 2).await.unwrap();
    assert_eq!(out.status, AgiStatus::Success, "{:?}", out.exchanges);
    let last = &out.exchanges.last().unwrap().0;
    assert_eq!(last, "SET VARIABLE TANDEM_DIGIT 5");
    server.stop().await;
}

/// What the test handler observed, step by step.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

struct HangupAware(Arc<Seen>);

impl Handler for HangupAware {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let log = |e: String| self.0.0.lock().unwrap().push(e);
        s.answer().await?;
        match s.wait_for_digit(10_000).await {
            Err(AgiError::Hangup) => log("wait_for_digit: hangup".into()),
            other => log(format!("wait_for_digit: {other:?}")),
        }
        log(format!("hung_up: {}", s.hung_up()));
        // Still permitted on a dead channel:
        log(format!(
            "channel: {:?}",
            s.get_variable("CHANNEL").await.map(|v| v.is_some())
        ));
        // Not permitted:
        match s.answer().await {
            Err(AgiError::DeadChannel { command }) => log(format!("answer: 511 {command}")),
            other => log(format!("answer: {other:?}")),
        }
        s.command(&Command::Noop).await.map(drop)
    }
}

#[tokio::test]
async fn hangup_mid_command_is_a_typed_error_and_dead_channel_commands_still_work() {
    let seen = Arc::new(Seen::default());
    let router = Router::new()
        .route("callerhangup", HangupAware(seen.clone()))
        .unwrap();
    let server = start(test_config(), router).await;
    let p = Plan {
        hangup_during: Some(2),
        // As in S16: Asterisk writes HANGUP only when the next command arrives.
        hangup_line_delay: Duration::from_secs(3600),
        ..plan("callerhangup")
    };
    let out = asterisk_emu::run(server.addr, &p, 1).await.unwrap();
    assert_eq!(out.status, AgiStatus::Hangup);
    assert_eq!(out.exchanges[1].1, "200 result=-1\n");
    assert_eq!(
        out.exchanges[2],
        (
            "CHANNEL STATUS".to_string(),
            "HANGUP\n511 Command Not Permitted on a dead channel or intercept routine\n"
                .to_string()
        ),
        "the probe that tells the hangup from a failure"
    );
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            "wait_for_digit: hangup",
            "hung_up: true",
            "channel: Ok(true)",
            "answer: 511 ANSWER",
        ]
    );
    assert_eq!(out.commands, 6);
    assert_eq!(
        out.hangup_lines_sent, 2,
        "one at hangup, one when the session ended"
    );
    assert_eq!(server.metrics.hangups.get(), 1);
    assert_eq!(
        server
            .metrics
            .ended_count("callerhangup", SessionOutcome::Hangup),
        1
    );
    assert_eq!(server.metrics.failed_count("failed"), 0);
    server.stop().await;
}

#[tokio::test]
async fn hangup_line_before_a_reply_is_consumed() {
    // Asterisk may send HANGUP between a command and its reply; the reply still pairs with it.
    let seen = Arc::new(Seen::default());
    struct TwoVars(Arc<Seen>);
    impl Handler for TwoVars {
        async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
            let a = s.get_variable("A").await?;
            let hung = s.hung_up();
            let b = s.get_variable("B").await?;
            self.0
                .0
                .lock()
                .unwrap()
                .push(format!("{a:?} {hung} {b:?} {}", s.hung_up()));
            Ok(())
        }
    }
    let router = Router::new().route("r", TwoVars(seen.clone())).unwrap();
    let server = start(test_config(), router).await;
    let mut raw = raw_session(server.addr, "r").await;
    let mut buf = [0u8; 256];
    let n = raw.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"GET VARIABLE A\n");
    raw.write_all(b"HANGUP\n200 result=1 (x)\n").await.unwrap();
    let n = raw.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"GET VARIABLE B\n");
    raw.write_all(b"200 result=0\n").await.unwrap();
    let rest = read_to_end(&mut raw, Duration::from_secs(5)).await;
    assert_eq!(rest, "", "a clean close, no failure line");
    assert_eq!(*seen.0.lock().unwrap(), ["Some(\"x\") true None true"]);
    server.stop().await;
}

#[tokio::test]
async fn unknown_route_ends_with_failure_and_is_counted() {
    let server = start(test_config(), builtin::routes()).await;
    let out = asterisk_emu::run(server.addr, &plan("no/such/route?x=1"), 1)
        .await
        .unwrap();
    assert!(out.failure_line);
    assert_eq!(out.status, AgiStatus::Failure);
    assert_eq!(out.commands, 0);
    // A request without any path is an unknown route too.
    let out = asterisk_emu::run(server.addr, &plan(""), 2).await.unwrap();
    assert_eq!(out.status, AgiStatus::Failure);
    assert_eq!(server.metrics.failed_count("unknown_route"), 2);
    server.stop().await;
}

#[tokio::test]
async fn a_header_without_agi_network_script_is_routed_by_agi_request() {
    // Some FastAGI clients (and older gateways) send agi_request alone.
    let server = start(test_config(), builtin::routes()).await;
    let mut raw = TcpStream::connect(server.addr).await.unwrap();
    raw.write_all(b"agi_network: yes\nagi_request: agi://127.0.0.1:4573/health?x=1\n\n")
        .await
        .unwrap();
    let mut line = vec![0u8; 64];
    let n = raw.read(&mut line).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&line[..n]),
        "SET VARIABLE TANDEM_STATUS OK\n"
    );
    drop(raw);
    assert_eq!(server.metrics.failed_count("unknown_route"), 0);
    server.stop().await;
}

#[tokio::test]
async fn oversize_header_line_and_too_many_variables_are_refused() {
    let config = ServerConfig {
        max_line_bytes: 512,
        max_header_variables: 30,
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;

    let mut raw = TcpStream::connect(server.addr).await.unwrap();
    let long = format!("agi_network: yes\nagi_request: {}\n\n", "x".repeat(4096));
    raw.write_all(long.as_bytes()).await.unwrap();
    assert_eq!(
        read_to_end(&mut raw, Duration::from_secs(5)).await,
        "failure\n"
    );

    let mut raw = TcpStream::connect(server.addr).await.unwrap();
    let many: String = (1..=40).map(|i| format!("agi_arg_{i}: a\n")).collect();
    raw.write_all(format!("agi_network: yes\n{many}\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(
        read_to_end(&mut raw, Duration::from_secs(5)).await,
        "failure\n"
    );

    // Too many arguments from the emulator, the same way.
    let p = Plan {
        args: vec!["a".into(); 40],
        ..plan("bench")
    };
    let out = asterisk_emu::run(server.addr, &p, 3).await.unwrap();
    assert_eq!(out.status, AgiStatus::Failure);
    assert_eq!(server.metrics.failed_count("header"), 3);
    server.stop().await;
}

#[tokio::test]
async fn oversize_reply_line_ends_the_session() {
    let config = ServerConfig {
        max_line_bytes: 512,
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;
    let mut raw = raw_session(server.addr, "bench").await;
    let mut buf = [0u8; 256];
    let n = raw.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"GET VARIABLE CHANNEL\n");
    let huge = format!("200 result=1 ({})\n", "v".repeat(2048));
    raw.write_all(huge.as_bytes()).await.unwrap();
    assert_eq!(
        read_to_end(&mut raw, Duration::from_secs(5)).await,
        "failure\n"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_silent_client_is_dropped_after_the_header_timeout() {
    let config = ServerConfig {
        header_timeout_ms: 200,
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;
    let mut raw = TcpStream::connect(server.addr).await.unwrap();
    // Half a header, then nothing.
    raw.write_all(b"agi_network: yes\n").await.unwrap();
    let got = read_to_end(&mut raw, Duration::from_secs(10)).await;
    assert_eq!(got, "failure\n");
    assert_eq!(server.metrics.failed_count("header_timeout"), 1);
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.metrics.sessions_active.get() != 0 {
        assert!(
            Instant::now() < deadline,
            "the dropped session is still counted as active"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
}

/// Holds its session until told to finish.
struct Hold(Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>);

impl Handler for Hold {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        s.command(&Command::Noop).await?;
        self.0.notify_one();
        self.1.notified().await;
        s.set_variable("HELD", "done").await
    }
}

/// A router whose `hold` route keeps its session until `release` is notified; `started` is
/// notified once the session is in progress.
fn hold_router() -> (Router, Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>) {
    let (started, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let router = Router::new()
        .route("hold", Hold(started.clone(), release.clone()))
        .unwrap();
    (router, started, release)
}

#[tokio::test]
async fn over_the_session_limit_the_next_connection_is_refused_at_once() {
    let (router, started, release) = hold_router();
    let config = ServerConfig {
        max_sessions: 1,
        ..test_config()
    };
    let server = start(config, router).await;
    let addr = server.addr;
    let first = tokio::spawn(async move { asterisk_emu::run(addr, &plan("hold"), 1).await });
    started.notified().await;

    // The first session is in progress; the second gets `failure` without waiting for it.
    let out = asterisk_emu::run(addr, &plan("hold"), 2).await.unwrap();
    assert!(out.failure_line);
    assert_eq!(out.commands, 0);
    assert!(
        !first.is_finished(),
        "refused while the first session was still held"
    );

    release.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status, AgiStatus::Success);
    assert_eq!(server.metrics.refused_count("max_sessions"), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_client_outside_the_allowed_networks_is_refused() {
    let config = ServerConfig {
        allowed_networks: vec!["192.0.2.0/24".parse().unwrap()],
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;
    let out = asterisk_emu::run(server.addr, &plan("bench"), 1)
        .await
        .unwrap();
    assert!(out.failure_line);
    assert_eq!(out.commands, 0);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_stops_accepting_and_drains_sessions_in_progress() {
    let (router, started, release) = hold_router();
    let server = start(test_config(), router).await;
    let addr = server.addr;
    let in_flight = tokio::spawn(async move { asterisk_emu::run(addr, &plan("hold"), 1).await });
    started.notified().await;

    let stopping = tokio::spawn(server.stop());
    // Once the listener is closed, new connections are refused by the kernel.
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "listener still open after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !in_flight.is_finished(),
        "the session in progress was not cut"
    );
    release.notify_one();
    let out = in_flight.await.unwrap().unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    assert_eq!(out.exchanges.last().unwrap().0, "SET VARIABLE HELD done");
    let summary = stopping.await.unwrap();
    assert_eq!((summary.sessions, summary.cut_at_shutdown), (1, 0));
}

#[tokio::test]
async fn drain_timeout_cuts_sessions_that_outlast_it() {
    let (started, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let router = Router::new()
        .route("hold", Hold(started.clone(), release))
        .unwrap();
    let server = start(
        ServerConfig {
            drain_timeout_ms: 100,
            ..test_config()
        },
        router,
    )
    .await;
    let addr = server.addr;
    let in_flight = tokio::spawn(async move { asterisk_emu::run(addr, &plan("hold"), 1).await });
    started.notified().await;
    let summary = server.stop().await;
    assert_eq!(summary.cut_at_shutdown, 1);
    in_flight.await.unwrap().unwrap();
}

struct Panics;
impl Handler for Panics {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        s.command(&Command::Noop).await?;
        panic!("a bug in a handler");
    }
}

#[tokio::test]
async fn a_panicking_handler_ends_its_session_with_failure_and_the_server_goes_on() {
    let router = Router::new()
        .route("panics", Panics)
        .unwrap()
        .route("bench", builtin::Bench)
        .unwrap();
    let server = start(test_config(), router).await;
    let out = asterisk_emu::run(server.addr, &plan("panics"), 1)
        .await
        .unwrap();
    assert!(out.failure_line);
    assert_eq!(out.commands, 1);
    let out = asterisk_emu::run(server.addr, &plan("bench"), 2)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    server.stop().await;
}

struct Raw(Arc<Seen>);
impl Handler for Raw {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let mut log = Vec::new();
        let gosub = Command::Gosub {
            context: "sub".into(),
            extension: "s".into(),
            priority: "1".into(),
            args: None,
        };
        log.push(format!("{:?}", s.command(&gosub).await.map(|r| r.note)));
        log.push(format!(
            "{:?}",
            s.command(&Command::Raw("FOOBAR".into()))
                .await
                .map_err(|e| e.kind())
        ));
        log.push(format!(
            "{:?}",
            s.command(&Command::Raw("GET VARIABLE".into()))
                .await
                .map_err(|e| e.kind())
        ));
        log.push(format!(
            "{:?}",
            s.exec("NoSuchApp", "").await.map_err(|e| e.kind())
        ));
        log.push(format!(
            "{:?}",
            s.stream_file("nosuchfile", "").await.map_err(|e| e.kind())
        ));
        log.push(format!("{:?}", s.database_put("fam", "key", "v 1").await));
        log.push(format!("{:?}", s.database_get("fam", "key").await));
        log.push(format!(
            "{:?} {:?} {:?}",
            s.route_path(),
            s.param("lang"),
            s.arg(2)
        ));
        self.0.0.lock().unwrap().extend(log);
        Ok(())
    }
}

#[tokio::test]
async fn gosub_unknown_commands_usage_and_failures_are_typed() {
    let seen = Arc::new(Seen::default());
    let router = Router::new().route("raw", Raw(seen.clone())).unwrap();
    let server = start(test_config(), router).await;
    let p = Plan {
        args: vec!["a".into(), "".into()],
        ..plan("raw?lang=fr")
    };
    let out = asterisk_emu::run(server.addr, &p, 1).await.unwrap();
    assert!(out.violations.is_empty());
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            "Ok(Some(\"Gosub complete\"))",
            "Err(\"invalid_command\")",
            "Err(\"usage\")",
            "Err(\"no_such_application\")",
            "Err(\"failed\")",
            "Ok(())",
            "Ok(Some(\"v 1\"))",
            "\"raw\" Some(\"fr\") Some(\"\")",
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_configured_command_timeout_ends_a_session_whose_reply_never_comes() {
    let config = ServerConfig {
        command_timeout_ms: 100,
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;
    let mut raw = raw_session(server.addr, "health").await;
    let got = read_to_end(&mut raw, Duration::from_secs(10)).await;
    assert_eq!(got, "SET VARIABLE TANDEM_STATUS OK\nfailure\n");
    server.stop().await;
}

#[tokio::test]
async fn an_unanswered_immediate_command_ends_the_session_and_a_media_command_may_wait() {
    let config = ServerConfig {
        immediate_command_timeout_ms: 200,
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;
    // `health` starts with SET VARIABLE: Asterisk answers it at once, or it is not there.
    let mut raw = raw_session(server.addr, "health").await;
    let got = read_to_end(&mut raw, Duration::from_secs(10)).await;
    assert_eq!(got, "SET VARIABLE TANDEM_STATUS OK\nfailure\n");
    assert_eq!(server.metrics.failed_count("timeout"), 1);
    // `example` starts with ANSWER, which waits on the channel: no limit but the route's.
    let mut raw = raw_session(server.addr, "example").await;
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"ANSWER\n");
    let waited = tokio::time::timeout(Duration::from_millis(600), raw.read(&mut buf)).await;
    assert!(waited.is_err(), "ANSWER is still waited for: {waited:?}");
    // The caller goes: the session ends at once, rather than holding the stop to its grace.
    drop(raw);
    server.stop().await;
}

#[tokio::test]
async fn a_route_s_own_timeout_bounds_its_long_commands() {
    let mut config = test_config();
    config.routes.insert(
        "example".into(),
        fastagi::RouteSettings {
            command_timeout_ms: Some(200),
            immediate_command_timeout_ms: None,
        },
    );
    let server = start(config, builtin::routes()).await;
    let mut raw = raw_session(server.addr, "example").await;
    let got = read_to_end(&mut raw, Duration::from_secs(10)).await;
    assert_eq!(got, "ANSWER\nfailure\n");
    // A route the router does not have is a mistake in the file, said at start.
    let mut config = test_config();
    config.routes.insert("exmaple".into(), Default::default());
    let err = fastagi::Server::bind(
        config,
        builtin::routes(),
        Arc::new(fastagi::Metrics::unregistered()),
    )
    .err()
    .expect("an unknown route is refused");
    assert!(
        err.to_string()
            .contains("fastagi.routes.\"exmaple\": no such route")
            && err.to_string().contains("example"),
        "{err}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_header_over_max_header_bytes_is_refused() {
    let config = ServerConfig {
        max_header_bytes: 4_096,
        ..test_config()
    };
    let server = start(config, builtin::routes()).await;
    // Lines within max_line_bytes and variables within their count, bytes over.
    let p = Plan {
        args: vec!["a".repeat(1_000); 5],
        ..plan("bench")
    };
    let out = asterisk_emu::run(server.addr, &p, 1).await.unwrap();
    assert_eq!(out.status, AgiStatus::Failure);
    assert!(out.failure_line);
    assert_eq!(server.metrics.failed_count("header"), 1);
    let p = Plan {
        args: vec!["a".repeat(1_000); 2],
        ..plan("bench")
    };
    let out = asterisk_emu::run(server.addr, &p, 2).await.unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    server.stop().await;
}

#[tokio::test]
async fn the_emulator_catches_a_server_that_pipelines() {
    // A careless server: writes three commands at once, then waits for three replies.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).await;
        s.write_all(b"NOOP\nGET VARIABLE CHANNEL\nSET VARIABLE P 1\n")
            .await
            .unwrap();
        let _ = s.read(&mut buf).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let p = Plan {
        idle_timeout: Duration::from_millis(300),
        ..plan("pipelined")
    };
    let out = asterisk_emu::run(addr, &p, 1).await.unwrap();
    assert_eq!(
        out.commands, 1,
        "only the first command is answered, as in S12"
    );
    assert_eq!(
        out.violations,
        [Violation::Pipelined { commands: 3 }, Violation::Stalled]
    );
}

#[test]
fn a_port_another_listener_shares_through_so_reuseport_is_refused() {
    // Another server's socket, bound the way Tandem's workers bind theirs: the kernel would let
    // a second server join it and split the sessions.
    let other = fastagi::runtime::reuseport_listener("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = other.local_addr().unwrap();
    let config = ServerConfig {
        listen: addr,
        ..test_config()
    };
    let err = fastagi::Server::bind(
        config,
        builtin::routes(),
        Arc::new(fastagi::Metrics::unregistered()),
    )
    .err()
    .expect("the shared port is refused");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    let text = err.to_string();
    assert!(
        text.contains(&format!("cannot listen on {addr}"))
            && text.contains("already listening")
            && text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    // A plain bind is refused by the kernel itself; the message names who holds the port.
    let err = fastagi::runtime::check_listen_free(addr).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("by pid {}", std::process::id())),
        "{err}"
    );
}
