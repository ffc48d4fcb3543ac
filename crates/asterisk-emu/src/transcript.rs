//! Transcripts of FastAGI sessions recorded against a real Asterisk (`shared/vectors/agi`), read
//! so that tests can replay what Asterisk did and the emulator can be set up to do the same.
//!
//! A transcript's `NAME.txt` has one protocol line per text line: `>>> ` before bytes from
//! Asterisk, `<<< ` before bytes from the server, `### ` before an annotation. Times come from
//! `NAME.events.jsonl` when it exists (every chunk with its offset in seconds), else from the
//! annotations `### t=1.046s ...` that precede a line.

use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// Who wrote a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Asterisk,
    Server,
    /// Not a line: the server half-closed its side here (`### ... shutdown(SHUT_WR)`).
    ServerShutdown,
}

/// One protocol line after the header, without its newline, and when it was seen (seconds
/// from the start of the recording) if the transcript says.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub side: Side,
    pub text: String,
    pub at_s: Option<f64>,
}

/// What a transcript shows about a hangup during a command.
#[derive(Debug, Clone, PartialEq)]
pub struct HangupFacts {
    /// The command (1-based, in the server's order) the hangup cut: its reply was `result=-1`.
    pub during: usize,
    /// The command's line, as the server sent it.
    pub command: String,
    /// How long after the `-1` Asterisk wrote `HANGUP` while the server stayed silent. `None`
    /// when the server sent its next command first, so the line came with that reply.
    pub silent_delay: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct Transcript {
    pub name: String,
    /// The lines after the header, in the order they crossed the wire.
    pub lines: Vec<Line>,
}

#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {problem}")]
    Format {
        path: String,
        line: usize,
        problem: String,
    },
}

#[derive(Deserialize)]
struct Event {
    t: f64,
    kind: String,
    #[serde(default)]
    data: String,
}

impl Transcript {
    /// Reads `dir/NAME.txt` (and `dir/NAME.events.jsonl` for times, when it is there).
    pub fn load(dir: &Path, name: &str) -> Result<Transcript, TranscriptError> {
        let path = dir.join(format!("{name}.txt"));
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| TranscriptError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut lines = Vec::new();
        let mut in_header = true;
        let mut next_at: Option<f64> = None;
        for (i, raw) in text.lines().enumerate() {
            if let Some(note) = raw.strip_prefix("### ") {
                if let Some(t) = annotation_time(note) {
                    next_at = Some(t);
                }
                if !in_header && note.contains("shutdown(SHUT_WR)") {
                    lines.push(Line {
                        side: Side::ServerShutdown,
                        text: String::new(),
                        at_s: None,
                    });
                }
                continue;
            }
            let (side, body) = if let Some(b) = raw.strip_prefix(">>> ") {
                (Side::Asterisk, b)
            } else if let Some(b) = raw.strip_prefix("<<< ") {
                (Side::Server, b)
            } else if raw == ">>>" {
                (Side::Asterisk, "")
            } else {
                return Err(TranscriptError::Format {
                    path: shown,
                    line: i + 1,
                    problem: format!("neither >>>, <<< nor ###: {raw:?}"),
                });
            };
            if in_header {
                // The header ends with Asterisk's empty line.
                if side == Side::Asterisk && body.is_empty() {
                    in_header = false;
                }
                next_at = None;
                continue;
            }
            lines.push(Line {
                side,
                text: body.to_string(),
                at_s: next_at.take(),
            });
        }
        let events = dir.join(format!("{name}.events.jsonl"));
        if events.exists() {
            apply_event_times(&events, &mut lines)?;
        }
        Ok(Transcript {
            name: name.to_string(),
            lines,
        })
    }

    /// The server's commands, in order.
    pub fn commands(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|l| l.side == Side::Server)
            .map(|l| l.text.as_str())
            .collect()
    }

    /// Each command with what Asterisk wrote after it until the next command, every line with
    /// its `\n`: the shape of [`crate::Outcome::exchanges`].
    pub fn exchanges(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for l in &self.lines {
            match (l.side, out.last_mut()) {
                (Side::Server, _) => out.push((l.text.clone(), String::new())),
                (Side::Asterisk, Some((_, reply))) => {
                    reply.push_str(&l.text);
                    reply.push('\n');
                }
                (Side::Asterisk, None) | (Side::ServerShutdown, _) => {}
            }
        }
        out
    }

    /// The first command answered `result=-1` that a `HANGUP` line followed, and when it came.
    pub fn hangup(&self) -> Option<HangupFacts> {
        let mut commands = 0;
        let mut last_command: Option<&str> = None;
        // The cut command: its number, its line, and when its -1 came.
        let mut cut: Option<(usize, String, Option<f64>)> = None;
        let mut server_spoke_after_cut = false;
        for l in &self.lines {
            match l.side {
                Side::Server => {
                    commands += 1;
                    last_command = Some(&l.text);
                    server_spoke_after_cut |= cut.is_some();
                }
                Side::Asterisk if cut.is_none() && l.text.starts_with("200 result=-1") => {
                    cut = Some((commands, last_command?.to_string(), l.at_s));
                }
                Side::Asterisk if l.text == "HANGUP" => {
                    let (during, command, minus_one_at) = cut?;
                    let silent_delay = match (server_spoke_after_cut, minus_one_at, l.at_s) {
                        (false, Some(a), Some(b)) if b >= a => Some(Duration::from_secs_f64(b - a)),
                        _ => None,
                    };
                    return Some(HangupFacts {
                        during,
                        command,
                        silent_delay,
                    });
                }
                Side::Asterisk | Side::ServerShutdown => {}
            }
        }
        None
    }
}

/// `t=1.046s (545 ms after the -1)` gives 1.046.
fn annotation_time(note: &str) -> Option<f64> {
    let rest = note.strip_prefix("t=")?;
    let end = rest.find('s')?;
    rest[..end].parse().ok()
}

/// Gives each line the time of the chunk that carried it: the n-th line from a side in the
/// events is the n-th line from that side in the text, header lines included.
fn apply_event_times(path: &Path, lines: &mut [Line]) -> Result<(), TranscriptError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TranscriptError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut timed: [Vec<(String, f64)>; 2] = [Vec::new(), Vec::new()];
    for (i, raw) in text.lines().enumerate() {
        let e: Event = serde_json::from_str(raw).map_err(|e| TranscriptError::Format {
            path: shown.clone(),
            line: i + 1,
            problem: e.to_string(),
        })?;
        let side = match e.kind.as_str() {
            "in" => 0,
            "out" => 1,
            _ => continue,
        };
        for l in e.data.split_inclusive('\n') {
            timed[side].push((l.trim_end_matches('\n').to_string(), e.t));
        }
    }
    // Asterisk's lines begin with the header; skip to the empty line that ends it.
    let header = timed[0]
        .iter()
        .position(|(l, _)| l.is_empty())
        .map_or(0, |i| i + 1);
    let mut from = [timed[0][header..].iter(), timed[1].iter()];
    for line in lines.iter_mut().filter(|l| l.side != Side::ServerShutdown) {
        let side = usize::from(line.side == Side::Server);
        if let Some((text, t)) = from[side].next()
            && *text == line.text
        {
            line.at_s = Some(*t);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(format!("{name}.txt")), text).unwrap();
    }

    #[test]
    fn a_late_hangup_line_and_its_delay() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "late",
            "### header\n>>> agi_network: yes\n>>> \n<<< ANSWER\n### t=0.000s\n>>> 200 result=0\n\
             <<< WAIT FOR DIGIT 5000\n### t=0.501s (hung up)\n>>> 200 result=-1\n\
             ### t=1.046s (545 ms after the -1)\n>>> HANGUP\n",
        );
        let t = Transcript::load(dir.path(), "late").unwrap();
        assert_eq!(t.commands(), ["ANSWER", "WAIT FOR DIGIT 5000"]);
        let h = t.hangup().unwrap();
        assert_eq!((h.during, h.command.as_str()), (2, "WAIT FOR DIGIT 5000"));
        let ms = h.silent_delay.unwrap().as_millis();
        assert!((544..=546).contains(&ms), "{ms}");
        assert_eq!(
            t.exchanges()[1],
            (
                "WAIT FOR DIGIT 5000".into(),
                "200 result=-1\nHANGUP\n".into()
            )
        );
    }

    #[test]
    fn a_hangup_line_brought_by_the_next_command_has_no_silent_delay() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "next",
            ">>> agi_network: yes\n>>> \n<<< WAIT FOR DIGIT 5000\n>>> 200 result=-1\n\
             <<< CHANNEL STATUS\n>>> HANGUP\n>>> 511 Command Not Permitted on a dead channel or intercept routine\n",
        );
        let t = Transcript::load(dir.path(), "next").unwrap();
        let h = t.hangup().unwrap();
        assert_eq!((h.during, h.silent_delay), (1, None));
    }

    #[test]
    fn a_line_of_unknown_kind_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "bad", ">>> \nhello\n");
        let e = Transcript::load(dir.path(), "bad").unwrap_err().to_string();
        assert!(e.contains("bad.txt: line 2"), "{e}");
    }
}
