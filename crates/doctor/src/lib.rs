//! `tandem doctor`: the checks of what an operator gets wrong, each a function over plain
//! inputs (an address, a path, a user, a connection string) that returns [`Finding`]s: the
//! check's name, ok / warn / fail, what was found, and the exact fix (the command to run or the
//! line to add). The binary loads the configuration and hands each check its part of it
//! (`crates/tandem/src/doctor.rs`); a [`Report`] prints them grouped, as text or one JSON object.
//!
//! Never: changes anything (no file, mode, owner or setting is written; a port is bound without
//! listening and closed at once; SQLite is opened read-only, and without creating its `-shm`),
//! waits without a bound (every network check has a timeout, and runs on a thread of its own so
//! that a stuck resolver cannot hold the report), or prints a password.
//!
//! Start at [`Report`], then the checks: `ports.rs`, `files.rs` (data directory, scripts),
//! `capture.rs` with `unit.rs` (systemd's grants), `console.rs`, `clock.rs`, `postgres.rs`,
//! `collector.rs`.

pub mod account;
pub mod capture;
pub mod clock;
pub mod collector;
pub mod console;
pub mod files;
pub mod ports;
pub mod postgres;
pub mod unit;

use serde::Serialize;
use std::time::Duration;

/// How a check came out. A warning leaves Tandem able to run; a failure does not (or not as
/// configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The section of the report: `configuration`, `ports`, `files`, `capture`, `console`,
    /// `clock`, `databases`, `collector`.
    pub group: &'static str,
    /// What was checked, e.g. `fastagi 127.0.0.1:4573/tcp`.
    pub check: String,
    pub status: Status,
    /// What was found, in a sentence.
    pub found: String,
    /// What to do: a command to run or a line to add. None when nothing is to be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(group: &'static str, check: impl Into<String>, found: impl Into<String>) -> Finding {
        Finding {
            group,
            check: check.into(),
            status: Status::Ok,
            found: found.into(),
            fix: None,
        }
    }

    pub fn warn(
        group: &'static str,
        check: impl Into<String>,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding::ok(group, check, found).with_fix(Status::Warn, fix)
    }

    pub fn fail(
        group: &'static str,
        check: impl Into<String>,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding::ok(group, check, found).with_fix(Status::Fail, fix)
    }

    fn with_fix(self, status: Status, fix: impl Into<String>) -> Finding {
        Finding {
            status,
            fix: Some(fix.into()),
            ..self
        }
    }
}

/// A fact the report states before its checks (which configuration, which data directory,
/// which user), with why it is that one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fact {
    /// The JSON key.
    pub key: &'static str,
    /// The text label.
    pub label: &'static str,
    pub value: String,
}

/// Every finding of one run, in the order the checks ran.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub facts: Vec<Fact>,
    pub findings: Vec<Finding>,
}

/// Exit statuses: nothing failed (warnings allowed), a check failed, doctor could not run.
pub const EXIT_OK: u8 = 0;
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_CANNOT_RUN: u8 = 2;

impl Report {
    pub fn fact(&mut self, key: &'static str, label: &'static str, value: impl Into<String>) {
        self.facts.push(Fact {
            key,
            label,
            value: value.into(),
        });
    }

    pub fn add(&mut self, finding: Finding) {
        self.findings.push(finding);
    }

    pub fn extend(&mut self, findings: impl IntoIterator<Item = Finding>) {
        self.findings.extend(findings);
    }

    pub fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// 0 when nothing failed, 1 when a check failed.
    pub fn exit_code(&self) -> u8 {
        if self.count(Status::Fail) > 0 {
            EXIT_FAILED
        } else {
            EXIT_OK
        }
    }

    /// The groups in the order their first check ran, each with its findings.
    fn groups(&self) -> Vec<(&'static str, Vec<&Finding>)> {
        let mut groups: Vec<(&'static str, Vec<&Finding>)> = Vec::new();
        for f in &self.findings {
            match groups.iter_mut().find(|(g, _)| *g == f.group) {
                Some((_, list)) => list.push(f),
                None => groups.push((f.group, vec![f])),
            }
        }
        groups
    }

    /// The report for a person: the facts, then one line per check under its group (the fix
    /// on the lines below a warning or failure), then the totals. `color`: ANSI colours for
    /// the statuses (only on a terminal, never under NO_COLOR: the caller decides).
    pub fn to_text(&self, color: bool) -> String {
        let paint = |s: Status| {
            let (word, code) = match s {
                Status::Ok => ("ok", "32"),
                Status::Warn => ("warn", "33"),
                Status::Fail => ("FAIL", "1;31"),
            };
            if color {
                format!("\x1b[{code}m{word:<4}\x1b[0m")
            } else {
                format!("{word:<4}")
            }
        };
        let mut out = String::from("tandem doctor\n");
        let width = self.facts.iter().map(|f| f.label.len()).max().unwrap_or(0);
        for f in &self.facts {
            out.push_str(&format!("  {:<width$}  {}\n", f.label, f.value));
        }
        let check_width = self
            .findings
            .iter()
            .map(|f| f.check.chars().count())
            .max()
            .unwrap_or(0)
            .min(40);
        let indent = " ".repeat(2 + 4 + 2 + check_width + 2);
        for (group, findings) in self.groups() {
            out.push_str(&format!("\n{group}\n"));
            for f in findings {
                out.push_str(&format!(
                    "  {}  {:<check_width$}  {}\n",
                    paint(f.status),
                    f.check,
                    f.found
                ));
                if let Some(fix) = &f.fix {
                    let mut lines = fix.lines();
                    if let Some(first) = lines.next() {
                        out.push_str(&format!("{indent}fix: {first}\n"));
                    }
                    for line in lines {
                        out.push_str(&format!("{indent}     {line}\n"));
                    }
                }
            }
        }
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        out.push_str(&format!(
            "\n{}, {}, {}\n",
            plural(self.count(Status::Ok), "ok", "ok"),
            plural(self.count(Status::Warn), "warning", "warnings"),
            plural(self.count(Status::Fail), "failure", "failures"),
        ));
        out
    }

    /// One JSON object: the facts by key, `checks` (each finding), `summary` and `exit_code`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut facts = serde_json::Map::new();
        for f in &self.facts {
            facts.insert(f.key.to_string(), f.value.clone().into());
        }
        serde_json::json!({
            "facts": facts,
            "checks": self.findings,
            "summary": {
                "ok": self.count(Status::Ok),
                "warn": self.count(Status::Warn),
                "fail": self.count(Status::Fail),
            },
            "exit_code": self.exit_code(),
        })
    }
}

/// Runs `work` on a thread of its own and waits at most `timeout` for it: a check that waits
/// on the network (a resolver, a server that accepts and never answers) cannot hold the report.
/// `None` when it did not finish in time; the thread is left to end on its own.
pub fn within<T: Send + 'static>(
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("doctor-check".into())
        .spawn(move || {
            let _ = tx.send(work());
        });
    match spawned {
        Ok(_) => rx.recv_timeout(timeout).ok(),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_groups_checks_and_puts_fixes_under_them() {
        let mut r = Report::default();
        r.fact("config", "configuration", "defaults");
        r.add(Finding::ok("ports", "fastagi", "free"));
        r.add(Finding::ok("files", "data directory", "fine"));
        r.add(Finding::fail(
            "ports",
            "metrics",
            "taken",
            "stop it\nthen retry",
        ));
        let text = r.to_text(false);
        let ports = text.find("\nports\n").unwrap();
        let files = text.find("\nfiles\n").unwrap();
        assert!(ports < files, "{text}");
        assert!(text[ports..files].contains("FAIL  metrics"), "{text}");
        assert!(text.contains("fix: stop it\n"), "{text}");
        assert!(text.contains("     then retry\n"), "{text}");
        assert!(text.ends_with("2 ok, 0 warnings, 1 failure\n"), "{text}");
        assert!(!text.contains('\x1b'));
        assert!(r.to_text(true).contains("\x1b[1;31mFAIL"));
        assert_eq!(r.exit_code(), EXIT_FAILED);
        let json = r.to_json();
        assert_eq!(json["summary"]["fail"], 1);
        assert_eq!(json["checks"][2]["status"], "fail");
        assert_eq!(json["facts"]["config"], "defaults");
        assert!(json["checks"][0].get("fix").is_none());
    }

    #[test]
    fn warnings_alone_exit_zero() {
        let mut r = Report::default();
        r.add(Finding::warn(
            "clock",
            "clock",
            "unsynchronised",
            "install chrony",
        ));
        assert_eq!(r.exit_code(), EXIT_OK);
    }

    #[test]
    fn a_check_that_does_not_finish_in_time_is_given_up() {
        let slow = within(Duration::from_millis(20), || {
            std::thread::sleep(Duration::from_secs(2));
            1
        });
        assert_eq!(slow, None);
        assert_eq!(within(Duration::from_secs(2), || 7), Some(7));
    }
}
