//! Tandem's alert rules, decided in the stream.
//!
//! What it is: rules (`[[alerts.rule]]`, [`config`]) validated into a rule set, and an engine
//! that is shown every event where it is produced — a call starting (the INVITE), a call
//! ending, a REGISTER chain settling, a metric sampled ([`Event`]) — and keeps, per rule and
//! group key, a sliding window of counts. When a rule's condition starts holding for a key it
//! says so with an [`Alert`] (`firing`), again after the rule's repeat interval, and once
//! more (`resolved`) when the condition has been false for a whole window. Time is the
//! events' own: a capture file read today raises the alerts it would have raised live.
//!
//! Never: does IO (notifications are the `alert-actions` crate's, storage the CDR store's),
//! waits, or holds state without a bound (keys per rule, uids per alert).

pub mod alert;
pub mod config;
pub mod e164;
pub mod engine;
pub mod event;
pub mod geo;
pub mod hours;
mod keys;
pub mod lookup;
pub mod rule;
mod samples;
mod summary;
pub mod window;

pub use alert::{ALERT_FORMAT_VERSION, Alert, AlertState, Figures, Severity};
pub use config::{ActionConfig, AlertsConfig, RuleConfig, RulesFile};
pub use engine::{Engine, EngineStats};
pub use event::{CallStart, Event, Sample};
pub use lookup::Lookup;
pub use rule::{Rule, RuleSet};

/// A rule set that cannot be used, with the place and what to do.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RuleError {
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// `rule` is the rule's name (or `#N` when it has none), `key` the offending key.
    #[error("[[alerts.rule]] {rule}: {key}: {problem}")]
    Rule {
        rule: String,
        key: String,
        problem: String,
    },
    #[error("[alerts.action.{action}] {key}: {problem}")]
    Action {
        action: String,
        key: String,
        problem: String,
    },
    #[error("[alerts] {key}: {problem}")]
    Alerts { key: String, problem: String },
}
