//! The Alerts page's own rules: what a silence may say, which alerts a silence covers, and the
//! header badge's count, read at most once per [`BADGE_TTL`] whatever the number of pages
//! opened.
//!
//! Never: decides whether an alert fires or is notified (the engine and its actions do; the
//! console stores acknowledgements and silences, which they read).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long the header badge's count is reused.
pub const BADGE_TTL: Duration = Duration::from_secs(5);
/// How long a page waits for the count before it is drawn without a badge (a database that
/// does not answer slows no page down for more than this, once per [`BADGE_TTL`]).
pub const BADGE_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest rule name a silence or a search names.
pub const RULE_BYTES_MAX: usize = 128;
/// Longest key (or key prefix) a silence or a search names.
pub const KEY_BYTES_MAX: usize = 256;
/// Longest comment on a silence.
pub const COMMENT_BYTES_MAX: usize = 1_000;
/// Longest silence: 90 days.
pub const SILENCE_S_MAX: i64 = 90 * 86_400;
/// Shortest silence: a minute.
pub const SILENCE_S_MIN: i64 = 60;
/// Alerts one page of `/api/alerts` holds at most.
pub const PAGE_MAX: usize = cdr::alerts::ALERTS_PAGE_MAX;
/// Alerts a page holds when the query says nothing.
pub const PAGE_DEFAULT: usize = 100;
/// Characters of a refused value an error shows back.
const SHOWN_CHARS_MAX: usize = 80;

/// A value as an error shows it: quoted, at most [`SHOWN_CHARS_MAX`] characters.
fn shown(v: &str) -> String {
    match v.char_indices().nth(SHOWN_CHARS_MAX) {
        Some((at, _)) => format!("{:?}...", &v[..at]),
        None => format!("{v:?}"),
    }
}

/// `/api/alerts`'s query (`state`, `rule`, `key`, `from`, `to`, `after`, `limit`), each
/// parameter bounded; an unknown one is refused by name.
pub fn alert_query(raw: &str) -> Result<cdr::AlertQuery, String> {
    let mut q = cdr::AlertQuery {
        limit: PAGE_DEFAULT,
        ..cdr::AlertQuery::default()
    };
    for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        let time = |what: &str| {
            utc::parse_us(v).ok_or_else(|| {
                format!(
                    "{what}={}: RFC 3339 in UTC (2026-11-25T14:30:00Z) or seconds since the epoch",
                    shown(v)
                )
            })
        };
        match &*k {
            "state" => match v {
                "firing" | "resolved" => q.state = Some(v.to_owned()),
                _ => return Err(format!("state={}: firing or resolved", shown(v))),
            },
            "rule" => {
                check_rule_name(v, "rule").map_err(|e| e.to_string())?;
                q.rule = Some(v.to_owned());
            }
            "key" => {
                check_key(v, "key").map_err(|e| e.to_string())?;
                q.key = Some(v.to_owned());
            }
            "from" => q.from_us = Some(time("from")?),
            "to" => q.to_us = Some(time("to")?),
            "after" => {
                let id = v.parse::<i64>().ok().filter(|id| *id > 0);
                q.after_id = Some(id.ok_or_else(|| {
                    format!(
                        "after={}: the next of the page before (an alert id)",
                        shown(v)
                    )
                })?);
            }
            "limit" => {
                let n = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=PAGE_MAX).contains(n));
                q.limit = n.ok_or_else(|| format!("limit={}: 1 to {PAGE_MAX}", shown(v)))?;
            }
            other => {
                return Err(format!(
                    "unknown parameter {}: state, rule, key, from, to, after, limit",
                    shown(other)
                ));
            }
        }
    }
    Ok(q)
}

/// The firing alerts the header shows: how many, and how many nobody acknowledged yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct BadgeCounts {
    pub firing: u64,
    pub unacked: u64,
}

/// The last count read, and when; one reader at a time (a burst of pages waits for it rather
/// than each asking the database).
#[derive(Default)]
pub struct BadgeCache {
    last: tokio::sync::Mutex<Option<(Instant, Option<BadgeCounts>)>>,
}

impl BadgeCache {
    /// The count, read through `read` when the last one is older than [`BADGE_TTL`]; `None`
    /// (no badge) when there is nothing to count (no CDR database) or the read takes longer
    /// than [`BADGE_READ_TIMEOUT`].
    pub async fn get<F>(&self, read: impl FnOnce() -> F) -> Option<BadgeCounts>
    where
        F: std::future::Future<Output = Option<BadgeCounts>>,
    {
        let mut last = self.last.lock().await;
        if let Some((at, counts)) = *last
            && at.elapsed() < BADGE_TTL
        {
            return counts;
        }
        let counts = tokio::time::timeout(BADGE_READ_TIMEOUT, read())
            .await
            .unwrap_or(None);
        *last = Some((Instant::now(), counts));
        counts
    }

    /// Forgets the count, after a change made here (an acknowledgement): the next page reads it.
    pub async fn forget(&self) {
        *self.last.lock().await = None;
    }
}

/// A silence as a person asks for it (`POST /api/silences`, JSON).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SilenceForm {
    /// A rule's name, or `*` for every rule.
    pub rule: String,
    /// The key: exact, `prefix*`, or `*` for every key.
    pub key: String,
    /// How long, in seconds from now...
    pub duration_s: Option<i64>,
    /// ...or until when (RFC 3339 UTC, or seconds since the epoch).
    pub ends: Option<String>,
    #[serde(default)]
    pub comment: String,
}

/// A silence checked and ready to store: µs since the epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct SilenceSpec {
    pub rule: String,
    pub key: String,
    pub starts_us: i64,
    pub ends_us: i64,
    pub comment: String,
}

/// What is wrong with a field of a form: the field's name and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: &'static str,
    pub problem: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

fn field(field: &'static str, problem: impl Into<String>) -> FieldError {
    FieldError {
        field,
        problem: problem.into(),
    }
}

/// A rule's name as rules are named (letters, digits, `-`, `_`, `.`), or `*`.
pub fn check_rule_name(name: &str, what: &'static str) -> Result<(), FieldError> {
    if name.is_empty() || name.len() > RULE_BYTES_MAX {
        return Err(field(
            what,
            format!("1 to {RULE_BYTES_MAX} bytes: a rule's name, or * for every rule"),
        ));
    }
    let ok = name == "*"
        || name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !ok {
        return Err(field(
            what,
            format!(
                "{}: a rule's name has letters, digits, -, _ and . only (or is *)",
                shown(name)
            ),
        ));
    }
    Ok(())
}

/// A group key as alerts carry it: printable text (an address, a number, a user).
pub fn check_key(key: &str, what: &'static str) -> Result<(), FieldError> {
    if key.len() > KEY_BYTES_MAX {
        return Err(field(what, format!("at most {KEY_BYTES_MAX} bytes")));
    }
    if key.chars().any(char::is_control) {
        return Err(field(what, "no control characters"));
    }
    Ok(())
}

impl SilenceForm {
    /// The silence this form asks for at `now_us`, or the first field that is wrong.
    pub fn check(&self, now_us: i64) -> Result<SilenceSpec, FieldError> {
        let rule = self.rule.trim();
        check_rule_name(rule, "rule")?;
        let key = self.key.trim();
        if key.is_empty() {
            return Err(field(
                "key",
                "an exact key, a prefix ending in *, or * for every key",
            ));
        }
        check_key(key, "key")?;
        if key[..key.len() - 1].contains('*') {
            return Err(field(
                "key",
                format!(
                    "{}: * only at the end (a prefix) or alone (every key)",
                    shown(key)
                ),
            ));
        }
        let ends_us = match (self.duration_s, self.ends.as_deref().map(str::trim)) {
            (Some(_), Some(e)) if !e.is_empty() => {
                return Err(field("ends", "give duration_s or ends, not both"));
            }
            (Some(d), _) => {
                if !(SILENCE_S_MIN..=SILENCE_S_MAX).contains(&d) {
                    return Err(field(
                        "duration_s",
                        format!(
                            "{d}: from {SILENCE_S_MIN} s to {} days",
                            SILENCE_S_MAX / 86_400
                        ),
                    ));
                }
                now_us + d * 1_000_000
            }
            (None, Some(e)) if !e.is_empty() => {
                let at = utc::parse_us(e).ok_or_else(|| {
                    field(
                        "ends",
                        format!(
                            "{}: RFC 3339 in UTC (2026-11-25T14:30:00Z) or seconds since the epoch",
                            shown(e)
                        ),
                    )
                })?;
                let s = (at - now_us) / 1_000_000;
                if !(SILENCE_S_MIN..=SILENCE_S_MAX).contains(&s) {
                    return Err(field(
                        "ends",
                        format!(
                            "{}: from a minute to {} days from now",
                            shown(e),
                            SILENCE_S_MAX / 86_400
                        ),
                    ));
                }
                at
            }
            _ => return Err(field("duration_s", "say how long: duration_s or ends")),
        };
        let comment = self.comment.trim();
        if comment.len() > COMMENT_BYTES_MAX {
            return Err(field(
                "comment",
                format!("at most {COMMENT_BYTES_MAX} bytes"),
            ));
        }
        if comment.chars().any(|c| c.is_control() && c != '\n') {
            return Err(field("comment", "no control characters but new lines"));
        }
        Ok(SilenceSpec {
            rule: rule.to_owned(),
            key: key.to_owned(),
            starts_us: now_us,
            ends_us,
            comment: comment.to_owned(),
        })
    }
}

/// Whether a silence of `rule` and `key` (as [`SilenceForm`] takes them) covers an alert of
/// `alert_rule` about `alert_key`.
pub fn silence_covers(rule: &str, key: &str, alert_rule: &str, alert_key: &str) -> bool {
    let rule_ok = rule == "*" || rule == alert_rule;
    let key_ok = match key.strip_suffix('*') {
        Some(prefix) => alert_key.starts_with(prefix),
        None => key == alert_key,
    };
    rule_ok && key_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000;

    fn form(rule: &str, key: &str, duration_s: Option<i64>, ends: Option<&str>) -> SilenceForm {
        SilenceForm {
            rule: rule.into(),
            key: key.into(),
            duration_s,
            ends: ends.map(str::to_owned),
            comment: "maintenance".into(),
        }
    }

    #[test]
    fn a_silence_is_checked_field_by_field() {
        let s = form("trunk-503", "10.0.0.*", Some(3600), None)
            .check(NOW)
            .unwrap();
        assert_eq!(s.ends_us, NOW + 3_600_000_000);
        assert_eq!((s.rule.as_str(), s.key.as_str()), ("trunk-503", "10.0.0.*"));
        let s = form("*", "*", None, Some("2027-02-01T00:00:00Z"))
            .check(NOW)
            .unwrap();
        assert_eq!(s.ends_us, utc::parse_us("2027-02-01T00:00:00Z").unwrap());

        let err = |f: SilenceForm| f.check(NOW).unwrap_err().field;
        assert_eq!(err(form("", "*", Some(3600), None)), "rule");
        assert_eq!(err(form("a b", "*", Some(3600), None)), "rule");
        assert_eq!(err(form("r", "", Some(3600), None)), "key");
        assert_eq!(err(form("r", "1*2", Some(3600), None)), "key");
        assert_eq!(err(form("r", "a\u{7}", Some(3600), None)), "key");
        assert_eq!(err(form("r", "*", None, None)), "duration_s");
        assert_eq!(err(form("r", "*", Some(5), None)), "duration_s");
        assert_eq!(
            err(form("r", "*", Some(SILENCE_S_MAX + 1), None)),
            "duration_s"
        );
        assert_eq!(err(form("r", "*", None, Some("tomorrow"))), "ends");
        assert_eq!(err(form("r", "*", None, Some("2020-01-01T00:00Z"))), "ends");
        assert_eq!(
            err(form("r", "*", Some(60), Some("2027-01-01T00:00Z"))),
            "ends"
        );
        let mut long = form("r", "*", Some(60), None);
        long.comment = "x".repeat(COMMENT_BYTES_MAX + 1);
        assert_eq!(err(long), "comment");
    }

    #[test]
    fn a_silence_covers_its_rule_and_keys() {
        assert!(silence_covers("*", "*", "any", "thing"));
        assert!(silence_covers("scan", "203.0.113.*", "scan", "203.0.113.9"));
        assert!(!silence_covers(
            "scan",
            "203.0.113.*",
            "scan",
            "198.51.100.1"
        ));
        assert!(!silence_covers(
            "scan",
            "203.0.113.9",
            "premium",
            "203.0.113.9"
        ));
        assert!(silence_covers("scan", "203.0.113.9", "scan", "203.0.113.9"));
        assert!(!silence_covers(
            "scan",
            "203.0.113.9",
            "scan",
            "203.0.113.90"
        ));
    }

    #[test]
    fn the_alerts_query_is_bounded_and_names_what_is_wrong() {
        let q = alert_query(
            "state=firing&rule=premium&key=2001&from=2026-11-01T00:00Z&after=42&limit=10",
        )
        .unwrap();
        assert_eq!(q.state.as_deref(), Some("firing"));
        assert_eq!(
            (q.rule.as_deref(), q.key.as_deref()),
            (Some("premium"), Some("2001"))
        );
        assert_eq!((q.after_id, q.limit), (Some(42), 10));
        assert_eq!(q.from_us, utc::parse_us("2026-11-01T00:00Z"));
        assert_eq!(alert_query("").unwrap().limit, PAGE_DEFAULT);
        for (raw, says) in [
            ("state=open", "state=\"open\": firing or resolved"),
            ("rule=a%20b", "rule: \"a b\""),
            ("limit=0", "limit=\"0\": 1 to 500"),
            ("limit=100000", "limit="),
            ("after=x", "after="),
            ("from=yesterday", "from=\"yesterday\""),
            ("colour=red", "unknown parameter \"colour\""),
        ] {
            let e = alert_query(raw).unwrap_err();
            assert!(e.starts_with(says), "{raw}: {e}");
        }
        let long = format!("state={}", "x".repeat(10_000));
        assert!(
            alert_query(&long).unwrap_err().len() < 200,
            "a refused value is cut"
        );
    }

    #[tokio::test]
    async fn the_badge_is_read_once_within_its_ttl() {
        let cache = BadgeCache::default();
        let reads = std::sync::atomic::AtomicUsize::new(0);
        let read = || async {
            reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(BadgeCounts {
                firing: 3,
                unacked: 1,
            })
        };
        assert_eq!(cache.get(read).await.unwrap().firing, 3);
        assert_eq!(cache.get(read).await.unwrap().unacked, 1);
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
        cache.forget().await;
        cache.get(read).await;
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
