//! Replies from Asterisk, one line at a time.
//!
//! The forms, as Asterisk 22 writes them:
//! - `200 result=<n>[ (<data>)][ endpos=<n>]`: a command's result. The data is raw: Asterisk
//!   does not escape parentheses, so `200 result=1 (a)b(c)` carries `a)b(c`.
//! - `100 result=0 Trying...`: GOSUB's provisional answer, before `200 result=0 Gosub complete`.
//! - `510 Invalid or unknown command`.
//! - `511 Command Not Permitted on a dead channel or intercept routine`.
//! - `520 Invalid command syntax.  Proper usage not available.`, or the multi-line
//!   `520-Invalid command syntax.  Proper usage follows:`, usage lines, `520 End of proper usage.`
//! - `HANGUP`: unsolicited, when the channel hangs up and again when the session ends. It can
//!   arrive at any point, also between a command and its reply.

use crate::header::strip_eol;

/// A `200` (or `100`) reply's parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// The text after `result=`, kept as sent: GET DATA's `0123` must keep its leading zero.
    pub result: String,
    /// The text inside the parentheses, if any.
    pub data: Option<String>,
    /// `endpos=<n>` of the media commands, if any.
    pub endpos: Option<i64>,
    /// Free text after the result, such as `Trying...` or `Gosub complete`.
    pub note: Option<String>,
}

/// The outcome of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `200`.
    Success(Reply),
    /// `510`: Asterisk does not know the command.
    InvalidCommand,
    /// `511`: the channel is dead (or in an intercept routine) and the command needs it alive.
    DeadChannel,
    /// `520`: wrong syntax. `usage` holds the usage text of the multi-line form.
    Usage { usage: Option<String> },
    /// Any other status code, kept whole.
    Other { code: u16, text: String },
}

/// What one or more lines amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The final answer to the command in flight.
    Response(Response),
    /// GOSUB's `100 result=0 Trying...`; the final response follows.
    Trying(Reply),
    /// The unsolicited `HANGUP` line.
    Hangup,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("reply line is not AGI: {line:?}")]
    Malformed { line: String },
    #[error("520 usage text is over {max} bytes (max_usage_bytes)")]
    UsageTooLong { max: usize },
}

/// Reads replies line by line. Keeps state only for the multi-line `520` usage text.
#[derive(Debug)]
pub struct ReplyParser {
    usage: Option<String>,
    max_usage_bytes: usize,
}

impl Default for ReplyParser {
    fn default() -> Self {
        // Asterisk's longest usage texts are a few KiB.
        ReplyParser::new(64 * 1024)
    }
}

impl ReplyParser {
    pub fn new(max_usage_bytes: usize) -> Self {
        ReplyParser {
            usage: None,
            max_usage_bytes,
        }
    }

    /// True while a multi-line `520` is being read.
    pub fn in_usage(&self) -> bool {
        self.usage.is_some()
    }

    /// Feeds one line (a trailing `\n` or `\r\n` is ignored). `Ok(None)` means the line was part
    /// of a multi-line usage text that has not ended yet.
    pub fn push_line(&mut self, line: &[u8]) -> Result<Option<Event>, ReplyError> {
        let line = strip_eol(line);
        if let Some(usage) = self.usage.as_mut() {
            // Inside `520-`, every line up to the closing `520 ` is usage text: Asterisk writes
            // it from the command's own thread, so nothing else can interleave.
            if line.starts_with(b"520 ") {
                let usage = self.usage.take();
                return Ok(Some(Event::Response(Response::Usage { usage })));
            }
            if usage.len() + line.len() + 1 > self.max_usage_bytes {
                self.usage = None;
                return Err(ReplyError::UsageTooLong {
                    max: self.max_usage_bytes,
                });
            }
            if !usage.is_empty() {
                usage.push('\n');
            }
            usage.push_str(&String::from_utf8_lossy(line));
            return Ok(None);
        }
        let text = crate::line_text(line);
        let malformed = || ReplyError::Malformed {
            line: text.to_string(),
        };
        if text == "HANGUP" {
            return Ok(Some(Event::Hangup));
        }
        let code = text
            .get(..3)
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(malformed)?;
        let sep = text.as_bytes().get(3).copied();
        if !matches!(sep, None | Some(b' ') | Some(b'-')) || text.as_bytes()[0] == b'+' {
            return Err(malformed());
        }
        let rest = text.get(4..).unwrap_or("");
        let event = match (code, sep) {
            (520, Some(b'-')) => {
                self.usage = Some(String::new());
                return Ok(None);
            }
            (_, Some(b'-')) => return Err(malformed()),
            (200, _) => {
                Event::Response(Response::Success(parse_result(rest).ok_or_else(malformed)?))
            }
            (100, _) => Event::Trying(parse_result(rest).ok_or_else(malformed)?),
            (510, _) => Event::Response(Response::InvalidCommand),
            (511, _) => Event::Response(Response::DeadChannel),
            (520, _) => Event::Response(Response::Usage { usage: None }),
            _ => Event::Response(Response::Other {
                code,
                text: rest.to_string(),
            }),
        };
        Ok(Some(event))
    }
}

/// Parses `result=<n>[ (<data>)][ endpos=<n>][ note]`.
fn parse_result(rest: &str) -> Option<Reply> {
    let rest = rest.strip_prefix("result=")?;
    let (result, mut tail) = rest.split_once(' ').unwrap_or((rest, ""));
    let mut reply = Reply {
        result: result.to_string(),
        ..Reply::default()
    };
    // `endpos=<n>` is the last word when present.
    let (before, last) = tail.rsplit_once(' ').unwrap_or(("", tail));
    if let Some(pos) = last.strip_prefix("endpos=")
        && let Ok(pos) = pos.parse::<i64>()
    {
        reply.endpos = Some(pos);
        tail = before.trim_end_matches(' ');
    }
    if let Some(inner) = tail.strip_prefix('(') {
        // The data runs to the last `)`: Asterisk does not escape parentheses inside it.
        match inner.rfind(')') {
            Some(close) => {
                reply.data = Some(inner[..close].to_string());
                tail = inner[close + 1..].trim_start_matches(' ');
            }
            None => {
                reply.data = Some(inner.to_string());
                tail = "";
            }
        }
    }
    if !tail.is_empty() {
        reply.note = Some(tail.to_string());
    }
    Some(reply)
}

/// `CHANNEL STATUS` results (Asterisk's `ast_channel_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelStatus {
    /// 0: down and available.
    DownAvailable,
    /// 1: down but reserved.
    DownReserved,
    /// 2: off hook.
    OffHook,
    /// 3: digits have been dialled.
    DigitsDialed,
    /// 4: ringing.
    Ringing,
    /// 5: the far end is ringing.
    RemoteRinging,
    /// 6: up.
    Up,
    /// 7: busy.
    Busy,
    /// -1: no such channel.
    NoSuchChannel,
}

/// `GET DATA`'s digits and whether the timeout ended the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetDataResult {
    pub digits: String,
    pub timed_out: bool,
}

impl Reply {
    /// The result as a number, when it is one.
    pub fn result_int(&self) -> Option<i64> {
        self.result.parse().ok()
    }

    /// For WAIT FOR DIGIT, STREAM FILE, GET OPTION, SAY *: the digit pressed (the result is its
    /// ASCII code), `None` for 0 (no digit) or a failure (-1).
    pub fn digit(&self) -> Option<char> {
        match self.result_int()? {
            n @ 1..=127 => Some(char::from(n as u8)),
            _ => None,
        }
    }

    /// For GET VARIABLE, GET FULL VARIABLE and DATABASE GET: the value when set (`result=1`).
    pub fn variable(&self) -> Option<&str> {
        (self.result == "1").then(|| self.data.as_deref().unwrap_or(""))
    }

    /// [`Reply::variable`], taking the value out instead of copying it.
    pub fn into_variable(self) -> Option<String> {
        (self.result == "1").then(|| self.data.unwrap_or_default())
    }

    /// For CHANNEL STATUS.
    pub fn channel_status(&self) -> Option<ChannelStatus> {
        use ChannelStatus::*;
        Some(match self.result_int()? {
            0 => DownAvailable,
            1 => DownReserved,
            2 => OffHook,
            3 => DigitsDialed,
            4 => Ringing,
            5 => RemoteRinging,
            6 => Up,
            7 => Busy,
            -1 => NoSuchChannel,
            _ => return None,
        })
    }

    /// For GET DATA: `result=<digits>` with ` (timeout)` when the timeout ended the input.
    /// `None` when the command failed (`result=-1`, e.g. a missing prompt or a hangup).
    pub fn get_data(&self) -> Option<GetDataResult> {
        if self.result.starts_with('-') {
            return None;
        }
        Some(GetDataResult {
            digits: self.result.clone(),
            timed_out: self.data.as_deref() == Some("timeout"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Event {
        ReplyParser::default()
            .push_line(line.as_bytes())
            .unwrap()
            .unwrap()
    }

    fn ok(line: &str) -> Reply {
        match one(line) {
            Event::Response(Response::Success(r)) => r,
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    #[test]
    fn result_data_endpos() {
        assert_eq!(ok("200 result=0\n").result, "0");
        let r = ok("200 result=1 (a)b(c)");
        assert_eq!(r.data.as_deref(), Some("a)b(c"));
        let r = ok("200 result=-1 endpos=0");
        assert_eq!(
            (r.result_int(), r.endpos, r.data),
            (Some(-1), Some(0), None)
        );
        let r = ok("200 result=1 () endpos=1234");
        assert_eq!((r.data.as_deref(), r.endpos), (Some(""), Some(1234)));
        let r = ok("200 result=0 Gosub complete");
        assert_eq!(r.note.as_deref(), Some("Gosub complete"));
        assert_eq!(ok("200 result=1 ()").variable(), Some(""));
        assert_eq!(ok("200 result=0").variable(), None);
        assert_eq!(ok("200 result=-1 (hangup)").data.as_deref(), Some("hangup"));
    }

    #[test]
    fn typed_results() {
        assert_eq!(ok("200 result=35").digit(), Some('#'));
        assert_eq!(ok("200 result=0").digit(), None);
        assert_eq!(ok("200 result=6").channel_status(), Some(ChannelStatus::Up));
        assert_eq!(
            ok("200 result=-1").channel_status(),
            Some(ChannelStatus::NoSuchChannel)
        );
        let d = ok("200 result=0123 (timeout)").get_data().unwrap();
        assert_eq!((d.digits.as_str(), d.timed_out), ("0123", true));
        assert_eq!(ok("200 result=-1").get_data(), None);
    }

    #[test]
    fn status_codes_and_hangup() {
        assert_eq!(one("HANGUP"), Event::Hangup);
        assert_eq!(
            one("510 Invalid or unknown command"),
            Event::Response(Response::InvalidCommand)
        );
        assert_eq!(
            one("511 Command Not Permitted on a dead channel or intercept routine"),
            Event::Response(Response::DeadChannel)
        );
        assert_eq!(
            one("520 Invalid command syntax.  Proper usage not available."),
            Event::Response(Response::Usage { usage: None })
        );
        let t = match one("100 result=0 Trying...") {
            Event::Trying(r) => r,
            e => panic!("{e:?}"),
        };
        assert_eq!(t.note.as_deref(), Some("Trying..."));
    }

    #[test]
    fn multi_line_usage_is_drained_whole() {
        let mut p = ReplyParser::default();
        assert_eq!(
            p.push_line(b"520-Invalid command syntax.  Proper usage follows:\n"),
            Ok(None)
        );
        assert!(p.in_usage());
        assert_eq!(
            p.push_line(b"Returns <literal>0</literal> if not set.\n"),
            Ok(None)
        );
        assert_eq!(p.push_line(b"200 result=1 (testvariable)\n"), Ok(None));
        let e = p.push_line(b"520 End of proper usage.\n").unwrap().unwrap();
        assert_eq!(
            e,
            Event::Response(Response::Usage {
                usage: Some(
                    "Returns <literal>0</literal> if not set.\n200 result=1 (testvariable)".into()
                )
            })
        );
        assert!(!p.in_usage());
    }

    #[test]
    fn usage_is_bounded_and_garbage_is_an_error() {
        let mut p = ReplyParser::new(10);
        p.push_line(b"520-x").unwrap();
        assert_eq!(
            p.push_line(b"0123456789ab"),
            Err(ReplyError::UsageTooLong { max: 10 })
        );
        for bad in [
            "",
            "20",
            "hello",
            "2000 result=1",
            "200 noresult",
            "+20 result=1",
            "300-x",
        ] {
            assert!(
                ReplyParser::default().push_line(bad.as_bytes()).is_err(),
                "{bad:?}"
            );
        }
    }
}
