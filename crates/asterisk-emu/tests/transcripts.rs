//! The emulator answers as the recorded Asterisk did: the server's side of a transcript is played
//! against it over a real socket, and what it writes back must be what Asterisk wrote, line for
//! line, including when the `HANGUP` line comes after a hangup cut a command (S07, S15, S16).
//!
//! The transcripts live in `../shared/vectors/agi` (CI has them); without them these tests say so
//! and skip.

use asterisk_emu::{AgiStatus, Plan, Side, Transcript};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

fn vectors() -> Option<PathBuf> {
    let dir = asterisk_emu::shared_dir().map(|d| d.join("vectors/agi"));
    match dir {
        Some(d)
            if d.join("S16_next_command_after_minus_one_brings_hangup.txt")
                .exists() =>
        {
            Some(d)
        }
        _ => {
            test_env::skip("no AGI transcripts S07-S16 beside the checkout");
            None
        }
    }
}

/// The channel's name differs from run to run; everything else must match.
fn normalized(reply: &str) -> String {
    let mut out = String::new();
    let mut rest = reply;
    while let Some(i) = rest.find("(Local/") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let end = after.find(')').map_or(after.len(), |e| e + 1);
        out.push_str("(CHANNEL)");
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The emulator's plan for a recorded hangup: the command it cut, and when Asterisk wrote the
/// line with the server silent. When the server spoke first (S16), the line waits for the next
/// command, however long that takes.
fn plan_for(t: &Transcript) -> Plan {
    let h = t.hangup().expect("a hangup during a command");
    Plan {
        hangup_during: Some(h.during),
        hangup_line_delay: h.silent_delay.unwrap_or(Duration::from_secs(3600)),
        idle_timeout: Duration::from_secs(10),
        ..Plan::route("spy")
    }
}

/// Plays the server's side of the transcript against the emulator, line by line: each command
/// is sent, each line Asterisk wrote is read in its turn (5 s at most), a half-close is made
/// where the server made it. Returns the lines the emulator wrote and its AGISTATUS.
async fn replay_server_side(t: &Transcript, plan: Plan) -> (Vec<String>, AgiStatus) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let emulator = tokio::spawn(async move { asterisk_emu::run(addr, &plan, 1).await });
    let (socket, _) = listener.accept().await.unwrap();
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        read.read_line(&mut line).await.unwrap();
        if line == "\n" {
            break; // end of the header
        }
    }
    let mut got = Vec::new();
    for l in &t.lines {
        match l.side {
            Side::Server => write
                .write_all(format!("{}\n", l.text).as_bytes())
                .await
                .unwrap(),
            Side::ServerShutdown => write.shutdown().await.unwrap(),
            Side::Asterisk => {
                line.clear();
                let read_one = read.read_line(&mut line);
                tokio::time::timeout(Duration::from_secs(5), read_one)
                    .await
                    .unwrap_or_else(|_| panic!("{}: no line where {:?} was", t.name, l.text))
                    .unwrap();
                got.push(normalized(line.trim_end_matches('\n')));
            }
        }
    }
    drop(write);
    let outcome = emulator.await.unwrap().unwrap();
    (got, outcome.status)
}

async fn emulator_matches(name: &str) {
    let Some(dir) = vectors() else { return };
    let t = Transcript::load(&dir, name).unwrap();
    let (got, status) = replay_server_side(&t, plan_for(&t)).await;
    let want: Vec<String> = t
        .lines
        .iter()
        .filter(|l| l.side == Side::Asterisk)
        .map(|l| normalized(&l.text))
        .collect();
    assert_eq!(got, want, "{name}");
    assert_eq!(status, AgiStatus::Hangup, "{name}");
}

#[test]
fn recorded_hangup_facts() {
    let Some(dir) = vectors() else { return };
    let facts = |name| Transcript::load(&dir, name).unwrap().hangup().unwrap();
    let s07 = facts("S07_caller_hangup_during_command");
    assert_eq!(
        (s07.during, s07.command.as_str()),
        (2, "WAIT FOR DIGIT 10000")
    );
    assert_eq!(s07.silent_delay.unwrap().as_millis(), 44);
    let s15 = facts("S15_hangup_line_late_after_minus_one");
    assert_eq!(
        (s15.during, s15.command.as_str()),
        (2, "WAIT FOR DIGIT 5000")
    );
    assert_eq!(s15.silent_delay.unwrap().as_millis(), 545);
    let s16 = facts("S16_next_command_after_minus_one_brings_hangup");
    assert_eq!((s16.during, s16.silent_delay), (2, None));
}

#[tokio::test]
async fn s07_hangup_line_after_a_short_silence() {
    emulator_matches("S07_caller_hangup_during_command").await;
}

#[tokio::test]
async fn s15_hangup_line_half_a_second_after_the_minus_one() {
    emulator_matches("S15_hangup_line_late_after_minus_one").await;
}

#[tokio::test]
async fn s16_the_next_command_brings_the_hangup_line_and_a_511() {
    emulator_matches("S16_next_command_after_minus_one_brings_hangup").await;
}
