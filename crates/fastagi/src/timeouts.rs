//! How long a command's reply may take.
//!
//! Asterisk runs an AGI command on the channel's own thread and answers when it is done, so a
//! reply takes as long as the command does. Some commands wait on nothing but Asterisk itself:
//! variables, the astdb, the channel's status and settings, a log line, and `EXEC` of `Set`,
//! `MSet`, `NoOp`, `Verbose` or `Log`. Asterisk answers them in microseconds (a dialplan function
//! inside `GET FULL VARIABLE` that queries a database may take seconds), so a reply that has
//! not come after `immediate_command_timeout_ms` means a peer that is gone or not Asterisk,
//! and the session ends. Every other command waits on the caller, media or an application: a
//! prompt plays for seconds, `WAIT FOR DIGIT -1` waits until a key, `EXEC Dial` and `GOSUB`
//! last as long as the call; only `command_timeout_ms`, off by default and settable per route,
//! bounds those.

use crate::error::AgiError;
use std::time::Duration;

/// Commands Asterisk answers without waiting on the caller, media or an application, by their
/// words (res_agi.c matches them without regard to case).
const IMMEDIATE: [&[&str]; 19] = [
    &["GET", "VARIABLE"],
    &["GET", "FULL", "VARIABLE"],
    &["SET", "VARIABLE"],
    &["DATABASE", "GET"],
    &["DATABASE", "PUT"],
    &["DATABASE", "DEL"],
    &["DATABASE", "DELTREE"],
    &["CHANNEL", "STATUS"],
    &["SET", "CALLERID"],
    &["SET", "CONTEXT"],
    &["SET", "EXTENSION"],
    &["SET", "PRIORITY"],
    &["SET", "AUTOHANGUP"],
    &["SET", "MUSIC"],
    &["VERBOSE"],
    &["NOOP"],
    &["HANGUP"],
    &["ASYNCAGI", "BREAK"],
    &["TDD", "MODE"],
];

/// Applications that return at once when run through `EXEC`.
const IMMEDIATE_APPLICATIONS: [&str; 5] = ["Set", "MSet", "NoOp", "Verbose", "Log"];

/// Whether Asterisk answers the command `line` (as sent, with or without its newline) without
/// waiting on the caller, media or an application.
pub fn answered_at_once(line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let mut words = line.split_ascii_whitespace();
    let Some(first) = words.next() else {
        return false;
    };
    if first.eq_ignore_ascii_case("EXEC") {
        let application = words.next().unwrap_or("").trim_matches('"');
        return IMMEDIATE_APPLICATIONS
            .iter()
            .any(|a| a.eq_ignore_ascii_case(application));
    }
    let second = words.next();
    let third = words.next();
    IMMEDIATE.iter().any(|name| {
        let mut given = [Some(first), second, third].into_iter();
        name.iter().all(|w| {
            given
                .next()
                .flatten()
                .is_some_and(|g| g.eq_ignore_ascii_case(w))
        })
    })
}

/// The limits on one route's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommandTimeouts {
    /// Every command (`command_timeout_ms`); `None`: none.
    pub every: Option<Duration>,
    /// Commands Asterisk answers at once (`immediate_command_timeout_ms`); `None`: none.
    pub immediate: Option<Duration>,
}

impl CommandTimeouts {
    /// From milliseconds, 0 meaning none.
    pub fn from_ms(every_ms: u64, immediate_ms: u64) -> CommandTimeouts {
        let limit = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        CommandTimeouts {
            every: limit(every_ms),
            immediate: limit(immediate_ms),
        }
    }

    /// The limit on the reply to `line`, and the setting it comes from.
    pub fn for_command(&self, line: &[u8]) -> Option<(Duration, &'static str)> {
        let every = self.every.map(|d| (d, "command_timeout_ms"));
        let immediate = self
            .immediate
            .filter(|_| answered_at_once(line))
            .map(|d| (d, "immediate_command_timeout_ms"));
        match (every, immediate) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Runs `read`, a command's reply, within `limit` (from [`CommandTimeouts::for_command`]);
/// `command` names it in the error.
pub(crate) async fn within<T>(
    limit: Option<(Duration, &'static str)>,
    command: impl FnOnce() -> String,
    read: impl std::future::Future<Output = Result<T, AgiError>>,
) -> Result<T, AgiError> {
    match limit {
        None => read.await,
        Some((limit, setting)) => {
            tokio::time::timeout(limit, read)
                .await
                .map_err(|_| AgiError::Timeout {
                    command: command(),
                    timeout_ms: limit.as_millis() as u64,
                    setting,
                })?
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_answered_at_once_and_the_others() {
        for line in [
            "GET VARIABLE CHANNEL\n",
            "get full variable ${CALLERID(num)}",
            "SET VARIABLE X 1",
            "DATABASE PUT fam key value",
            "DATABASE DELTREE fam",
            "CHANNEL STATUS",
            "VERBOSE \"hello\" 3",
            "NOOP",
            "EXEC MSet a=1,b=2",
            "EXEC \"Set\" X=1",
            "exec noop",
        ] {
            assert!(answered_at_once(line.as_bytes()), "{line}");
        }
        for line in [
            "EXEC Dial PJSIP/100,30",
            "EXEC",
            "STREAM FILE hello-world \"\"",
            "WAIT FOR DIGIT -1",
            "GET DATA prompt 3000 4",
            "GOSUB sub s 1",
            "RECORD FILE x wav # -1",
            "ANSWER",
            "GET OPTION x 12",
            "SAY DIGITS 123 \"\"",
            "DATABASE",
            "GET",
            "",
            "GETVARIABLE X",
        ] {
            assert!(!answered_at_once(line.as_bytes()), "{line}");
        }
        // Not UTF-8: not known to be quick, so no shorter limit.
        assert!(!answered_at_once(b"GET VARIABLE \xff"));
    }

    #[test]
    fn the_shorter_limit_applies() {
        let t = CommandTimeouts::from_ms(5_000, 1_000);
        let ms = |line: &str| {
            t.for_command(line.as_bytes())
                .map(|(d, s)| (d.as_millis(), s))
        };
        assert_eq!(ms("NOOP"), Some((1_000, "immediate_command_timeout_ms")));
        assert_eq!(ms("EXEC Dial x"), Some((5_000, "command_timeout_ms")));
        let t = CommandTimeouts::from_ms(500, 1_000);
        assert_eq!(
            t.for_command(b"NOOP").map(|(_, s)| s),
            Some("command_timeout_ms")
        );
        let off = CommandTimeouts::from_ms(0, 0);
        assert_eq!(off.for_command(b"NOOP"), None);
        let only_immediate = CommandTimeouts::from_ms(0, 30_000);
        assert_eq!(only_immediate.for_command(b"EXEC Dial x"), None);
    }
}
