//! One FastAGI session played from Asterisk's side over a real socket.

use crate::channel::Channel;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How the emulated Asterisk behaves in one session.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `agi_network_script`: the route with its query (`myscript?x=1`). Empty: no path, and the
    /// line is left out of the header as Asterisk does.
    pub script: String,
    /// The dialplan's arguments (`agi_arg_1..N`).
    pub args: Vec<String>,
    /// The caller hangs up while this command (1-based) runs: a media command answers
    /// `result=-1`, and `HANGUP` follows on the AGI loop's next turn.
    pub hangup_during: Option<usize>,
    /// When the channel hangs up (the caller, or the HANGUP command), Asterisk writes the
    /// `HANGUP` line only on the next turn of its AGI loop: at once when the next command
    /// arrives (before that command's reply, which then follows the dead channel's rules: S16),
    /// or after this long if the server sends nothing. Recorded: 44 ms (S07), 41 ms (S01, after
    /// the HANGUP command), 545 ms (S15), at once with AGIEXITONHANGUP=yes (S09).
    pub hangup_line_delay: Duration,
    /// AGISIGHUP (default yes): send `HANGUP` lines at all.
    pub agi_sighup: bool,
    /// AGIEXITONHANGUP: on hangup send `HANGUP` twice and close.
    pub exit_on_hangup: bool,
    /// Time each command takes before it is answered (a WAIT FOR DIGIT that waits, say).
    pub command_delay: Duration,
    /// Digit the caller presses during the next media command.
    pub digit: Option<char>,
    /// How long the emulator waits for the server's next bytes before giving up. Asterisk has
    /// no such timeout; a load generator and a test must not hang.
    pub idle_timeout: Duration,
    /// Most bytes of one line from the server before it counts as a violation.
    pub max_line_bytes: usize,
    /// Record each command and its reply in the outcome (tests), or only count them (load).
    pub record: bool,
    /// Leave this command (1-based) unanswered and hold the call, as Asterisk does for a long
    /// `Dial` or prompt, until the task running the session is dropped. For measuring what a
    /// session in a long command costs the server.
    pub hold_at: Option<usize>,
    /// Counts the sessions that have reached `hold_at`.
    pub held: Option<Arc<AtomicUsize>>,
    /// The channel the session runs on (variables, astdb, hints, contacts, caller ID); None:
    /// a fresh one. Its name and unique id are the session's own either way.
    pub channel: Option<Arc<Channel>>,
    /// `agi_version` in the header. Asterisk before 20.16, 21.11 and 22.6 reads commands of
    /// at most 2 KiB: set `max_line_bytes` to match.
    pub agi_version: String,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            script: String::new(),
            args: Vec::new(),
            hangup_during: None,
            hangup_line_delay: Duration::from_millis(44),
            agi_sighup: true,
            exit_on_hangup: false,
            command_delay: Duration::ZERO,
            digit: None,
            idle_timeout: Duration::from_secs(30),
            max_line_bytes: 8192,
            record: true,
            hold_at: None,
            held: None,
            channel: None,
            agi_version: "22.10.1".into(),
        }
    }
}

impl Plan {
    pub fn route(script: &str) -> Self {
        Plan {
            script: script.to_string(),
            ..Plan::default()
        }
    }

    /// The channel session `seq` runs on: the plan's, or a fresh one, named for the session.
    pub fn channel_for(&self, seq: u64) -> Channel {
        let (name, uniqueid) = (
            format!("Local/100@tandem-{seq:08x};2"),
            format!("1795239019.{seq}"),
        );
        let mut channel = match &self.channel {
            Some(c) => Channel {
                name,
                uniqueid,
                ..(**c).clone()
            },
            None => Channel::new(&name, &uniqueid),
        };
        channel.digit = self.digit;
        channel
    }
}

/// AGISTATUS as Asterisk would set it at the end of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgiStatus {
    Success,
    /// The server sent `failure`, or a command failed while the channel was up.
    Failure,
    /// The channel hung up during the session.
    Hangup,
}

/// Things a server did that a real Asterisk would punish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Several commands in one write: Asterisk answers the first and the rest wait.
    Pipelined { commands: usize },
    /// A line from the server over `max_line_bytes`.
    LineTooLong { bytes: usize },
    /// The server stopped sending for `idle_timeout` (Asterisk would have waited forever).
    Stalled,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: AgiStatus,
    /// Each command line and the reply it got (when `Plan::record`).
    pub exchanges: Vec<(String, String)>,
    pub commands: usize,
    pub hangup_lines_sent: usize,
    pub violations: Vec<Violation>,
    /// The server wrote `failure`.
    pub failure_line: bool,
    pub duration: Duration,
    /// The channel as the session left it (when `Plan::record`).
    pub channel: Option<Channel>,
}

impl Outcome {
    /// A session that has not happened yet: successful until something says otherwise.
    pub(crate) fn new() -> Outcome {
        Outcome {
            status: AgiStatus::Success,
            exchanges: Vec::new(),
            commands: 0,
            hangup_lines_sent: 0,
            violations: Vec::new(),
            failure_line: false,
            duration: Duration::ZERO,
            channel: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("socket or pipe: {0}")]
    Io(#[from] std::io::Error),
}

/// A line that begins with `failure` (any case): res_agi ends the AGI with AGISTATUS=FAILURE.
/// Compared as bytes, so a multi-byte character near the start cannot split a slice.
pub(crate) fn is_failure_line(line: &str) -> bool {
    line.as_bytes()
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"failure"))
}

/// The AGI loop's first turn after a hangup (res_agi.c `run_agi`, `needhup`): `HANGUP` unless
/// AGISIGHUP=no; with AGIEXITONHANGUP=yes the loop ends there and Asterisk says `HANGUP` once
/// more as it closes. True when the AGI ends.
fn hangup_turn(plan: &Plan, out: &mut Outcome, text: &mut String) -> bool {
    let lines = match (plan.agi_sighup, plan.exit_on_hangup) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    };
    for _ in 0..lines {
        text.push_str("HANGUP\n");
    }
    out.hangup_lines_sent += lines;
    plan.exit_on_hangup
}

/// Builds the header Asterisk 22.10.1 sends, in its order.
pub fn header(plan: &Plan, addr: SocketAddr, channel: &Channel, seq: u64) -> String {
    let mut h = String::with_capacity(640);
    h.push_str("agi_network: yes\n");
    let mut request = format!("agi://{addr}");
    if !plan.script.is_empty() {
        h.push_str(&format!("agi_network_script: {}\n", plan.script));
        request.push('/');
        request.push_str(&plan.script);
    }
    let vars = [
        ("agi_request", request.as_str()),
        ("agi_channel", &channel.name),
        ("agi_language", "en"),
        ("agi_type", "Local"),
        ("agi_uniqueid", &channel.uniqueid),
        ("agi_version", &plan.agi_version),
        ("agi_callerid", &channel.callerid_num),
        ("agi_calleridname", &channel.callerid_name),
        ("agi_callingpres", "0"),
        ("agi_callingani2", "0"),
        ("agi_callington", "0"),
        ("agi_callingtns", "0"),
        ("agi_dnid", "unknown"),
        ("agi_rdnis", "unknown"),
        ("agi_context", &channel.context),
        ("agi_extension", &channel.extension),
        ("agi_priority", &channel.priority),
        ("agi_enhanced", "0.0"),
        ("agi_accountcode", ""),
    ];
    for (n, v) in vars {
        h.push_str(n);
        h.push_str(": ");
        h.push_str(v);
        h.push('\n');
    }
    h.push_str(&format!("agi_threadid: {}\n", 140_400_000_000_000u64 + seq));
    for (i, a) in plan.args.iter().enumerate() {
        h.push_str(&format!("agi_arg_{}: {a}\n", i + 1));
    }
    h.push('\n');
    h
}

/// Connects to `addr` and plays one session by `plan`.
pub async fn run(addr: SocketAddr, plan: &Plan, seq: u64) -> Result<Outcome, EmuError> {
    let started = Instant::now();
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| EmuError::Connect { addr, source })?;
    play(stream, addr, plan, seq, started).await
}

/// [`run`] from the local address `from` (`127.0.0.2` and the like: a PBX, or a flood, on
/// another address of the loopback network).
pub async fn run_from(
    from: std::net::IpAddr,
    addr: SocketAddr,
    plan: &Plan,
    seq: u64,
) -> Result<Outcome, EmuError> {
    let started = Instant::now();
    let connect = async {
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(SocketAddr::new(from, 0))?;
        socket.connect(addr).await
    };
    let stream = connect
        .await
        .map_err(|source| EmuError::Connect { addr, source })?;
    play(stream, addr, plan, seq, started).await
}

async fn play(
    mut stream: TcpStream,
    addr: SocketAddr,
    plan: &Plan,
    seq: u64,
    started: Instant,
) -> Result<Outcome, EmuError> {
    stream.set_nodelay(true)?;
    let mut channel = plan.channel_for(seq);
    let mut out = Outcome::new();
    stream
        .write_all(header(plan, addr, &channel, seq).as_bytes())
        .await?;

    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut hung_up = false;
    let mut command_failed = false;
    // The moment the AGI loop turns again after a hangup and writes `HANGUP`, unless a command
    // arrives first.
    let mut hangup_turn_at: Option<tokio::time::Instant> = None;
    // Lines that arrived with an earlier one in the same read wait, as in Asterisk, until the
    // next read returns something.
    let mut stalled = false;
    'session: loop {
        let idle_until = tokio::time::Instant::now() + plan.idle_timeout;
        let wake = hangup_turn_at.map_or(idle_until, |t| t.min(idle_until));
        let n = match tokio::time::timeout_at(wake, stream.read(&mut chunk)).await {
            Err(_) if hangup_turn_at.is_some_and(|t| t <= wake) => {
                // The server stayed silent: the loop turns on its own and says HANGUP.
                hangup_turn_at = None;
                let mut text = String::new();
                let ends = hangup_turn(plan, &mut out, &mut text);
                stream.write_all(text.as_bytes()).await?;
                if ends {
                    break;
                }
                continue;
            }
            Err(_) => {
                out.violations.push(Violation::Stalled);
                break;
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Ok(r) => r?,
        };
        if n == 0 {
            // The server closed its side: the loop turns (a pending HANGUP goes first), then
            // Asterisk answers the end with HANGUP (unless AGISIGHUP=no) and closes, even when
            // the channel is still up.
            let mut text = String::new();
            let ended = hangup_turn_at.take().is_some() && hangup_turn(plan, &mut out, &mut text);
            if !ended && plan.agi_sighup {
                text.push_str("HANGUP\n");
                out.hangup_lines_sent += 1;
            }
            let _ = stream.write_all(text.as_bytes()).await;
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut lines = Vec::new();
        while let Some(i) = memchr::memchr(b'\n', &buf) {
            lines.push(String::from_utf8_lossy(&buf[..i]).into_owned());
            buf.drain(..=i);
        }
        if buf.len() > plan.max_line_bytes {
            out.violations
                .push(Violation::LineTooLong { bytes: buf.len() });
            break;
        }
        let take = if stalled || lines.len() <= 1 {
            lines.len()
        } else {
            1
        };
        if lines.len() > 1 && !stalled {
            out.violations.push(Violation::Pipelined {
                commands: lines.len(),
            });
            stalled = true;
            buf.splice(
                0..0,
                lines[1..].iter().flat_map(|l| l.bytes().chain([b'\n'])),
            );
        } else {
            stalled = false;
        }
        for line in lines.into_iter().take(take) {
            if is_failure_line(&line) {
                out.failure_line = true;
                out.status = AgiStatus::Failure;
                break 'session;
            }
            let mut reply = String::new();
            if hangup_turn_at.take().is_some() && hangup_turn(plan, &mut out, &mut reply) {
                // AGIEXITONHANGUP=yes: the AGI ends here and the command is never read.
                stream.write_all(reply.as_bytes()).await?;
                break 'session;
            }
            out.commands += 1;
            if plan.hold_at == Some(out.commands) {
                if let Some(held) = &plan.held {
                    held.fetch_add(1, Ordering::Relaxed);
                }
                std::future::pending::<()>().await;
            }
            if !plan.command_delay.is_zero() {
                tokio::time::sleep(plan.command_delay).await;
            }
            if plan.hangup_during == Some(out.commands) && !hung_up {
                hung_up = true;
                hangup_turn_at = Some(tokio::time::Instant::now() + plan.hangup_line_delay);
                match channel.cut_by_hangup(&line) {
                    Some(r) => reply.push_str(&r),
                    None => reply.push_str(&channel.execute(&line).text),
                }
            } else {
                let answer = channel.execute(&line);
                command_failed |= answer.failure && channel.alive;
                if answer.hung_up_now {
                    hung_up = true;
                    hangup_turn_at = Some(tokio::time::Instant::now() + plan.hangup_line_delay);
                }
                reply.push_str(&answer.text);
            }
            stream.write_all(reply.as_bytes()).await?;
            if plan.record {
                out.exchanges.push((line, reply));
            }
        }
    }
    if out.status != AgiStatus::Failure {
        out.status = if hung_up {
            AgiStatus::Hangup
        } else if command_failed {
            AgiStatus::Failure
        } else {
            AgiStatus::Success
        };
    }
    let _ = stream.shutdown().await;
    out.duration = started.elapsed();
    if plan.record {
        out.channel = Some(channel);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::is_failure_line;

    #[test]
    fn failure_lines_and_multibyte_text_near_the_start() {
        assert!(is_failure_line("failure"));
        assert!(is_failure_line("FAILURE: could not run"));
        assert!(!is_failure_line("fail"));
        assert!(
            !is_failure_line("fail€ure"),
            "must not panic on a split character"
        );
        assert!(!is_failure_line("NOOP"));
    }
}
