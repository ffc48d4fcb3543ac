//! A caller who hangs up mid-command is a hangup, not a failure.
//!
//! A real Asterisk 22 answers `200 result=-1` when the caller's hangup cuts a media command, and
//! writes `HANGUP` only on the next turn of its AGI loop: 44 ms later (S07), 545 ms later (S15),
//! or at once when the server sends another command (S16). The session asks instead of
//! waiting: after such a `-1` it sends `CHANNEL STATUS`, which a dead channel refuses with `511`.
//! These tests play each recorded timing with the emulator, against handlers written as an
//! operator would write them.

mod common;

use agi::Command;
use asterisk_emu::{AgiStatus, Plan};
use common::{start, test_config};
use fastagi::{AgiError, Handler, Router, ServerConfig, Session, SessionOutcome};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const DEAD: &str = "511 Command Not Permitted on a dead channel or intercept routine";

/// What a handler observed, step by step.
#[derive(Default, Clone)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn log(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The recorded server's part, through the session API: ANSWER, WAIT FOR DIGIT (which the
/// hangup cuts), then, ignoring the hangup, a command permitted on a dead channel and a media
/// command. Its commands are S16's, byte for byte, probe included.
struct Ivr(Seen);

impl Handler for Ivr {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        s.answer().await?;
        let digit = s.wait_for_digit(5_000).await;
        self.0.log(format!("wait_for_digit: {digit:?}"));
        self.0.log(format!(
            "hung_up: {}, during: {:?}",
            s.hung_up(),
            s.hangup_during()
        ));
        let channel = s.get_variable("CHANNEL").await;
        self.0
            .log(format!("get_variable: {:?}", channel.map(|c| c.is_some())));
        match s.stream_file("beep", "").await {
            Err(AgiError::DeadChannel { command }) => {
                self.0.log(format!("stream_file: 511 {command}"))
            }
            other => self.0.log(format!("stream_file: {other:?}")),
        }
        Ok(())
    }
}

fn ivr_router(seen: &Seen) -> Router {
    Router::new().route("spy", Ivr(seen.clone())).unwrap()
}

const IVR_SAW: [&str; 4] = [
    "wait_for_digit: Err(Hangup)",
    "hung_up: true, during: Some(\"WAIT FOR DIGIT\")",
    "get_variable: Ok(true)",
    "stream_file: 511 STREAM FILE",
];

#[tokio::test]
async fn a_hangup_during_a_command_is_a_hangup_however_late_asterisk_says_so() {
    let seen = Seen::default();
    let server = start(test_config(), ivr_router(&seen)).await;
    for (seq, (name, during, delay)) in (1..).zip(common::recorded_hangups()) {
        let plan = common::hangup_plan("spy", during, delay);
        let out = asterisk_emu::run(server.addr, &plan, seq).await.unwrap();
        assert_eq!(out.status, AgiStatus::Hangup, "{name}");
        assert!(out.violations.is_empty(), "{name}: {:?}", out.violations);
        assert_eq!(seen.take(), IVR_SAW, "{name}");
    }
    let m = &server.metrics;
    assert_eq!(m.ended_count("spy", SessionOutcome::Hangup), 3);
    assert_eq!(m.ended_count("spy", SessionOutcome::Failure), 0);
    assert_eq!(
        m.failed_count("failed"),
        0,
        "no hangup counted as a failure"
    );
    assert_eq!(m.hangups.get(), 3);
    server.stop().await;
}

#[tokio::test]
async fn s16_replayed_byte_for_byte() {
    // With Asterisk silent until the next command, Tandem's bytes after the -1 are the ones the
    // recorded server sent in S16, and Asterisk's answers are S16's.
    let seen = Seen::default();
    let server = start(test_config(), ivr_router(&seen)).await;
    let plan = common::hangup_plan("spy", 2, None);
    let out = asterisk_emu::run(server.addr, &plan, 1).await.unwrap();
    let exchanges: Vec<(String, String)> = out
        .exchanges
        .iter()
        .map(|(c, r)| {
            (
                c.clone(),
                r.replace("Local/100@tandem-00000001;2", "CHANNEL"),
            )
        })
        .collect();
    let want: Vec<(String, String)> = match common::vectors() {
        Some(dir) => {
            let t = asterisk_emu::Transcript::load(
                &dir,
                "S16_next_command_after_minus_one_brings_hangup",
            )
            .unwrap();
            t.exchanges()
                .into_iter()
                .map(|(c, r)| (c, r.replace("Local/s@r0-00000000;2", "CHANNEL")))
                .collect()
        }
        None => [
            ("ANSWER", "200 result=0\n"),
            ("WAIT FOR DIGIT 5000", "200 result=-1\n"),
            ("CHANNEL STATUS", &format!("HANGUP\n{DEAD}\n")),
            ("GET VARIABLE CHANNEL", "200 result=1 (CHANNEL)\n"),
            ("STREAM FILE beep \"\"", &format!("{DEAD}\n")),
        ]
        .into_iter()
        .map(|(c, r)| (c.to_string(), r.to_string()))
        .collect(),
    };
    assert_eq!(exchanges, want);
    assert_eq!(server.metrics.probe_count("dead"), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_minus_one_on_a_live_channel_stays_a_failure() {
    // A missing sound file answers -1 with the channel up (S13): the probe finds it up.
    struct Missing(Seen);
    impl Handler for Missing {
        async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
            s.answer().await?;
            let r = s.stream_file("nosuchfile", "").await;
            self.0
                .log(format!("stream_file: {r:?}, hung_up: {}", s.hung_up()));
            r.map(drop)
        }
    }
    let seen = Seen::default();
    let router = Router::new()
        .route("missing", Missing(seen.clone()))
        .unwrap();
    let server = start(test_config(), router).await;
    let plan = Plan {
        idle_timeout: Duration::from_secs(10),
        ..Plan::route("missing")
    };
    let out = asterisk_emu::run(server.addr, &plan, 1).await.unwrap();
    assert_eq!(
        seen.take(),
        ["stream_file: Err(Failed { command: \"STREAM FILE\", result: \"-1\" }), hung_up: false"]
    );
    assert_eq!(
        out.exchanges[2],
        ("CHANNEL STATUS".into(), "200 result=6\n".into())
    );
    assert!(out.failure_line, "a real failure still ends with failure");
    let m = &server.metrics;
    assert_eq!(m.probe_count("live"), 1);
    assert_eq!(m.ended_count("missing", SessionOutcome::Failure), 1);
    assert_eq!(m.failed_count("failed"), 1);
    server.stop().await;
}

#[tokio::test]
async fn without_hangup_lines_the_511_tells() {
    // AGISIGHUP=no: Asterisk never writes HANGUP (S08); the probe's 511 is the only word.
    let seen = Seen::default();
    let server = start(test_config(), ivr_router(&seen)).await;
    let plan = Plan {
        agi_sighup: false,
        ..common::hangup_plan("spy", 2, None)
    };
    let out = asterisk_emu::run(server.addr, &plan, 1).await.unwrap();
    assert_eq!(out.status, AgiStatus::Hangup);
    assert_eq!(out.hangup_lines_sent, 0);
    assert_eq!(seen.take(), IVR_SAW);
    assert_eq!(server.metrics.hangups.get(), 1);
    server.stop().await;
}

#[tokio::test]
async fn when_asterisk_closes_on_hangup_the_session_ends_as_a_hangup() {
    // AGIEXITONHANGUP=yes: HANGUP twice right after the -1, and the socket closes (S09).
    let seen = Seen::default();
    let server = start(test_config(), ivr_router(&seen)).await;
    let plan = Plan {
        exit_on_hangup: true,
        ..common::hangup_plan("spy", 2, Some(Duration::ZERO))
    };
    let out = asterisk_emu::run(server.addr, &plan, 1).await.unwrap();
    assert_eq!(out.status, AgiStatus::Hangup);
    assert_eq!(out.hangup_lines_sent, 2);
    // Asterisk closed first: wait for the session to end on Tandem's side.
    let m = &server.metrics;
    for _ in 0..500 {
        if m.ended_count("spy", SessionOutcome::Hangup) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let saw = seen.take();
    assert_eq!(saw[0], "wait_for_digit: Err(Hangup)");
    assert_eq!(saw[2], "get_variable: Err(Disconnected)");
    assert_eq!(server.metrics.ended_count("spy", SessionOutcome::Hangup), 1);
    server.stop().await;
}

#[tokio::test]
async fn the_raw_command_api_tells_a_hangup_too() {
    struct Raw(Seen);
    impl Handler for Raw {
        async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
            let r = s
                .command(&Command::WaitForDigit { timeout_ms: 5_000 })
                .await;
            self.0.log(format!("{r:?}"));
            // A -1 from a command that is permitted on a dead channel is only a result.
            let r = s.command(&Command::exec("NoSuchApp", "")).await;
            self.0.log(format!("{:?}", r.map(|r| r.result)));
            Ok(())
        }
    }
    let seen = Seen::default();
    let router = Router::new().route("raw", Raw(seen.clone())).unwrap();
    let server = start(test_config(), router).await;
    let plan = common::hangup_plan("raw", 1, None);
    asterisk_emu::run(server.addr, &plan, 1).await.unwrap();
    assert_eq!(seen.take(), ["Err(Hangup)", "Ok(\"-2\")"]);
    server.stop().await;
}

/// Plays Asterisk by hand: reads one command line, checks it, writes `answer`.
async fn expect_and_answer(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    command: &str,
    answer: &str,
) {
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut line))
        .await
        .expect("a command in time")
        .unwrap();
    assert_eq!(line, format!("{command}\n"));
    w.write_all(answer.as_bytes()).await.unwrap();
}

#[tokio::test]
async fn a_probe_reply_that_comes_late_is_skipped_not_taken_for_the_next() {
    // An Asterisk too busy to answer CHANNEL STATUS within hangup_probe_timeout_ms: the -1
    // stands as a failure, and the late reply is dropped when it comes, so the next command
    // still gets its own reply.
    struct Patient(Seen);
    impl Handler for Patient {
        async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
            let r = s.wait_for_digit(5_000).await;
            self.0.log(format!("{r:?}"));
            let v = s.get_variable("X").await;
            self.0.log(format!("{v:?}"));
            Ok(())
        }
    }
    let seen = Seen::default();
    let router = Router::new()
        .route("patient", Patient(seen.clone()))
        .unwrap();
    let config = ServerConfig {
        hangup_probe_timeout_ms: 100,
        ..test_config()
    };
    let server = start(config, router).await;
    let mut raw = TcpStream::connect(server.addr).await.unwrap();
    raw.write_all(b"agi_network: yes\nagi_network_script: patient\n\n")
        .await
        .unwrap();
    let (r, mut w) = raw.into_split();
    let mut r = BufReader::new(r);
    expect_and_answer(&mut r, &mut w, "WAIT FOR DIGIT 5000", "200 result=-1\n").await;
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    assert_eq!(line, "CHANNEL STATUS\n");
    // Say nothing until the next command arrives (the probe has given up by then).
    line.clear();
    r.read_line(&mut line).await.unwrap();
    assert_eq!(line, "GET VARIABLE X\n");
    w.write_all(b"200 result=6\n200 result=1 (x)\n")
        .await
        .unwrap();
    drop(w);
    let mut rest = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut rest)).await;
    assert_eq!(
        seen.take(),
        [
            "Err(Failed { command: \"WAIT FOR DIGIT\", result: \"-1\" })",
            "Ok(Some(\"x\"))"
        ]
    );
    assert_eq!(server.metrics.probe_count("timeout"), 1);
    server.stop().await;
}
