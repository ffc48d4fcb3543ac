//! Prometheus Alertmanager's v2 API: alerts POSTed to `/api/v2/alerts`, and its silences read
//! from `/api/v2/silences`, so that a silence made there also quiets the rule's other actions.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use alerts::{Alert, AlertState};
use serde::Deserialize;

use crate::DeliveryError;
use crate::http;

/// Call uids sent in the `calls` annotation (Alertmanager's UI is no place for a hundred).
pub const ALERTMANAGER_CALLS_MAX: usize = 10;
/// Silences read from one Alertmanager; those beyond are ignored (and said so in the log).
pub const SILENCES_MAX: usize = 10_000;
/// A regex matcher longer than this is ignored: a silence's pattern is a person's, and this
/// keeps a compiled automaton small.
const MATCHER_PATTERN_BYTES_MAX: usize = 4096;
/// The compiled size one pattern may take (`regex`'s own default is 10 MiB).
const MATCHER_REGEX_BYTES_MAX: usize = 1 << 20;
/// Matchers read per silence; a silence with more is left out.
const MATCHERS_PER_SILENCE_MAX: usize = 64;

#[derive(Debug)]
pub struct Alertmanager {
    pub url: url::Url,
}

impl Alertmanager {
    pub(crate) fn new(url: url::Url) -> Alertmanager {
        Alertmanager { url }
    }

    fn endpoint(&self, path: &str) -> url::Url {
        let mut u = self.url.clone();
        let base = u.path().trim_end_matches('/').to_string();
        u.set_path(&format!("{base}{path}"));
        u.set_query(None);
        u
    }

    pub(crate) async fn send(&self, alert: &Alert) -> Result<(), DeliveryError> {
        let body = serde_json::to_vec(&[posted(alert)]).unwrap_or_default();
        let url = self.endpoint("/api/v2/alerts");
        let resp = http::exchange(
            hyper::Method::POST,
            &url,
            Some("application/json"),
            &[],
            body,
        )
        .await?;
        http::judge(&url, &resp)
    }

    /// The silences in effect now (state `active`).
    pub(crate) async fn active_silences(&self) -> Result<Vec<Silence>, DeliveryError> {
        let url = self.endpoint("/api/v2/silences");
        let resp = http::exchange(hyper::Method::GET, &url, None, &[], Vec::new()).await?;
        http::judge(&url, &resp)?;
        active_silences(&resp.body)
            .map_err(|e| DeliveryError::Transient(format!("{url}: not a list of silences: {e}")))
    }
}

/// The active silences of a `GET /api/v2/silences` answer, ready to match (the first
/// [`SILENCES_MAX`]; a silence with a pattern this side cannot read is left out).
pub fn active_silences(body: &[u8]) -> Result<Vec<Silence>, serde_json::Error> {
    let all: Vec<RawSilence> = serde_json::from_slice(body)?;
    if all.len() > SILENCES_MAX {
        tracing::warn!(
            silences = all.len(),
            "Alertmanager holds more silences than Tandem reads ({SILENCES_MAX}); the rest are ignored"
        );
    }
    Ok(all
        .into_iter()
        .take(SILENCES_MAX)
        .filter(|s| s.status.state == "active")
        .filter_map(Silence::compile)
        .collect())
}

/// The labels an alert carries in Alertmanager (empty values left out, as Alertmanager reads
/// an empty label as an absent one).
pub fn labels(alert: &Alert) -> BTreeMap<&'static str, String> {
    let mut l = BTreeMap::new();
    l.insert("alertname", alert.rule.clone());
    l.insert("severity", alert.severity.as_str().to_string());
    l.insert("key", alert.key.clone());
    l.insert("rule_kind", alert.rule_kind.clone());
    l.insert("group_by", alert.group_by.clone());
    l.insert("instance", hostname());
    l.retain(|_, v| !v.is_empty());
    l
}

/// One element of the array POSTed to `/api/v2/alerts`: a firing alert has no `endsAt`
/// (Alertmanager keeps it until its `resolve_timeout` unless posted again), a resolved one
/// ends when it resolved.
fn posted(alert: &Alert) -> serde_json::Value {
    let calls: Vec<&str> = alert
        .calls
        .iter()
        .take(ALERTMANAGER_CALLS_MAX)
        .map(String::as_str)
        .collect();
    let mut v = serde_json::json!({
        "labels": labels(alert),
        "annotations": {
            "summary": alert.summary,
            "calls": calls.join(" "),
        },
        "startsAt": utc::format_us(alert.since_us),
    });
    if alert.state == AlertState::Resolved {
        v["endsAt"] = utc::format_us(alert.at_us).into();
    }
    v
}

/// This machine's name, for the `instance` label and SMTP's EHLO.
pub(crate) fn hostname() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it
        // (or truncates, which the search for NUL below handles).
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len() - 1);
        match std::str::from_utf8(&buf[..end]) {
            Ok(s) if rc == 0 && !s.is_empty() => s.to_string(),
            _ => "localhost".to_string(),
        }
    })
    .clone()
}

#[derive(Deserialize)]
struct RawSilence {
    #[serde(default)]
    id: String,
    #[serde(default)]
    matchers: Vec<RawMatcher>,
    status: RawStatus,
}

#[derive(Deserialize)]
struct RawStatus {
    state: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMatcher {
    name: String,
    value: String,
    #[serde(default)]
    is_regex: bool,
    #[serde(default = "yes")]
    is_equal: bool,
}

fn yes() -> bool {
    true
}

/// An active silence with its matchers ready to test.
pub struct Silence {
    pub id: String,
    matchers: Vec<Matcher>,
}

struct Matcher {
    name: String,
    test: Test,
    is_equal: bool,
}

enum Test {
    Equal(String),
    Regex(regex::Regex),
}

impl Silence {
    /// `None` for a silence with no matchers or a pattern this side cannot read (it then
    /// silences nothing here; Alertmanager still applies it to its own notifications).
    fn compile(raw: RawSilence) -> Option<Silence> {
        if raw.matchers.is_empty() || raw.matchers.len() > MATCHERS_PER_SILENCE_MAX {
            return None;
        }
        let mut matchers = Vec::with_capacity(raw.matchers.len());
        for m in raw.matchers {
            let test = if m.is_regex {
                if m.value.len() > MATCHER_PATTERN_BYTES_MAX {
                    return None;
                }
                // Alertmanager anchors its patterns at both ends.
                match regex::RegexBuilder::new(&format!("^(?:{})$", m.value))
                    .size_limit(MATCHER_REGEX_BYTES_MAX)
                    .dfa_size_limit(MATCHER_REGEX_BYTES_MAX)
                    .build()
                {
                    Ok(r) => Test::Regex(r),
                    Err(e) => {
                        tracing::warn!(silence = %raw.id, matcher = %m.name, error = %e, "a silence's pattern Tandem cannot read: ignored here");
                        return None;
                    }
                }
            } else {
                Test::Equal(m.value)
            };
            matchers.push(Matcher {
                name: m.name,
                test,
                is_equal: m.is_equal,
            });
        }
        Some(Silence {
            id: raw.id,
            matchers,
        })
    }

    /// Every matcher holds for `labels` (an absent label reads as empty, as in Alertmanager).
    pub fn matches(&self, labels: &BTreeMap<&'static str, String>) -> bool {
        self.matchers.iter().all(|m| {
            let v = labels
                .get(m.name.as_str())
                .map(String::as_str)
                .unwrap_or("");
            let hit = match &m.test {
                Test::Equal(want) => v == want,
                Test::Regex(r) => r.is_match(v),
            };
            hit == m.is_equal
        })
    }
}

/// Silences of one Alertmanager, read at most once per `ttl`; a failed read is remembered
/// as long (as "no silences", so that notifications still go out while Alertmanager is down)
/// and only delays one alert by one timeout.
pub(crate) struct SilenceCache {
    fetched: Option<(Instant, Vec<Silence>)>,
}

impl SilenceCache {
    pub(crate) fn new() -> SilenceCache {
        SilenceCache { fetched: None }
    }

    pub(crate) async fn get(
        &mut self,
        am: &Alertmanager,
        name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> &[Silence] {
        let fresh = self
            .fetched
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < ttl);
        if !fresh {
            let list = match tokio::time::timeout(timeout, am.active_silences()).await {
                Ok(Ok(list)) => list,
                Ok(Err(e)) => {
                    tracing::warn!(action = name, error = %e, "cannot read Alertmanager's silences: the rule's other actions run");
                    Vec::new()
                }
                Err(_) => {
                    tracing::warn!(
                        action = name,
                        timeout_ms = timeout.as_millis() as u64,
                        "Alertmanager's silences did not come in time: the rule's other actions run"
                    );
                    Vec::new()
                }
            };
            self.fetched = Some((Instant::now(), list));
        }
        self.fetched
            .as_ref()
            .map(|(_, l)| l.as_slice())
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silence(json: &str) -> Option<Silence> {
        Silence::compile(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn matchers_are_equal_or_anchored_regex_and_may_be_negated() {
        let labels = BTreeMap::from([
            ("alertname", "premium".to_string()),
            ("key", "2001".to_string()),
            ("severity", "critical".to_string()),
        ]);
        let s = |m: &str| {
            silence(&format!(
                r#"{{"id":"x","status":{{"state":"active"}},"matchers":[{m}]}}"#
            ))
            .unwrap()
        };
        assert!(s(r#"{"name":"alertname","value":"premium","isRegex":false}"#).matches(&labels));
        assert!(!s(r#"{"name":"alertname","value":"prem","isRegex":false}"#).matches(&labels));
        assert!(s(r#"{"name":"key","value":"20.*","isRegex":true}"#).matches(&labels));
        assert!(!s(r#"{"name":"key","value":"0.","isRegex":true}"#).matches(&labels));
        assert!(
            s(r#"{"name":"severity","value":"warning","isRegex":false,"isEqual":false}"#)
                .matches(&labels)
        );
        assert!(
            !s(r#"{"name":"alertname","value":"premium","isRegex":false},{"name":"key","value":"3000","isRegex":false}"#)
                .matches(&labels)
        );
        // An absent label is empty.
        assert!(s(r#"{"name":"instance2","value":"","isRegex":false}"#).matches(&labels));
    }
}
