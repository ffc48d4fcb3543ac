//! [`Alert`]: what the engine says when a rule's condition for one key starts or stops holding.
//!
//! This is the contract every consumer reads: the `--json` line (`"kind":"alert"`), the
//! webhook's body (`version` 1), the row stored in the CDR database and the console's page.
//! Fields are only ever added.

use serde::{Deserialize, Serialize};

/// The webhook body's and the JSON line's format version.
pub const ALERT_FORMAT_VERSION: u32 = 1;

/// Where an alert stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertState {
    /// The condition holds for this key.
    Firing,
    /// The condition has been false for a whole window since it last held.
    Resolved,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// How loudly a rule speaks (`severity` in a rule; Alertmanager's label of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    #[default]
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// The figures that fired (or resolved) an alert: what was measured over the window, against
/// what the rule allows.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Figures {
    /// The measured value the threshold is compared with: a count, a percentage, a MOS, a
    /// metric's value.
    pub value: f64,
    /// The rule's threshold for `value`.
    pub threshold: f64,
    /// `value`'s unit: `calls`, `%`, `MOS`, `ms`, `registrations`, or a metric's name.
    pub unit: String,
    /// Events in the window that matched the rule's condition.
    pub matched: u64,
    /// Events in the window within the rule's scope (the denominator of a percentage).
    pub total: u64,
    /// The rule's window, in seconds.
    pub window_s: u64,
}

/// One transition of one (rule, key): it started firing, it fired again after `repeat_s`, or
/// it resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// The rule's name.
    pub rule: String,
    /// The rule's kind (`fraud.destination`, `sip.response`...).
    pub rule_kind: String,
    pub severity: Severity,
    /// What the rule groups by (`caller`, `source_ip`...; `none` for one key).
    pub group_by: String,
    /// The group-by value this alert is about (`203.0.113.9`, `2001`; empty for `none`).
    pub key: String,
    pub state: AlertState,
    /// When this transition happened, µs since the epoch, in the events' own time (a capture
    /// read from a file raises alerts at the time its packets carry).
    pub at_us: i64,
    /// When this alert started firing.
    pub since_us: i64,
    /// A repeat of a firing alert after the rule's `repeat_s` (not a new alert).
    #[serde(default)]
    pub repeat: bool,
    pub figures: Figures,
    /// The uids of up to `calls_per_alert_max` calls or registrations behind it, oldest first
    /// (CDR uids, as the console's `/calls/{uid}` takes them).
    pub calls: Vec<String>,
    /// One line for a person: what happened, to whom, how much.
    pub summary: String,
    /// The names of the actions the rule notifies.
    pub actions: Vec<String>,
}

impl Alert {
    /// The identity of the alert across its transitions: rule and key.
    pub fn fingerprint(&self) -> String {
        format!("{}\u{1f}{}", self.rule, self.key)
    }

    /// The `--json` line and the webhook's body: the alert with `"kind":"alert"`, the format
    /// version, and its times as RFC 3339 text (`at`, `since`) beside the µs.
    pub fn json_line(&self) -> String {
        self.json_value().to_string()
    }

    /// [`Alert::json_line`] as a value.
    pub fn json_value(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("kind".into(), "alert".into());
            o.insert("version".into(), ALERT_FORMAT_VERSION.into());
            o.insert("at".into(), utc::format_us(self.at_us).into());
            o.insert("since".into(), utc::format_us(self.since_us).into());
        }
        v
    }
}

impl Alert {
    /// The row the CDR database keeps of this transition, as decided by `node` (a sensor's or
    /// the collector's name).
    pub fn to_row(&self, node: &str) -> cdr::alerts::AlertRow {
        cdr::alerts::AlertRow {
            id: 0,
            fingerprint: self.fingerprint(),
            rule: self.rule.clone(),
            rule_kind: self.rule_kind.clone(),
            severity: self.severity.as_str().to_string(),
            group_by: self.group_by.clone(),
            key: self.key.clone(),
            state: self.state.as_str().to_string(),
            since_us: self.since_us,
            at_us: self.at_us,
            resolved_us: (self.state == AlertState::Resolved).then_some(self.at_us),
            notified_us: self.at_us,
            figures_json: serde_json::to_string(&self.figures).unwrap_or_default(),
            calls: self.calls.clone(),
            summary: self.summary.clone(),
            node: node.to_string(),
            acked_by: None,
            acked_us: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_carries_kind_and_version() {
        let a = Alert {
            rule: "premium".into(),
            rule_kind: "fraud.destination".into(),
            severity: Severity::Critical,
            group_by: "caller".into(),
            key: "2001".into(),
            state: AlertState::Firing,
            at_us: 1,
            since_us: 1,
            repeat: false,
            figures: Figures::default(),
            calls: vec!["s|c|1".into()],
            summary: String::new(),
            actions: vec![],
        };
        let v: serde_json::Value = serde_json::from_str(&a.json_line()).unwrap();
        assert_eq!(v["kind"], "alert");
        assert_eq!(v["state"], "firing");
        assert_eq!(v["version"], 1);
        assert_eq!(v["at"], "1970-01-01T00:00:00.000001Z");
        assert_eq!(v["calls"][0], "s|c|1");
    }
}
