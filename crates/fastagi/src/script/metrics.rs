//! Metrics per script: sessions, start latency, run time, exits, signals, timeouts, refusals,
//! processes waiting prewarmed. Labelled by the script's file (its canonical path in the
//! directory, never the path as the caller spelt it), and only for the first
//! `scripts.metrics_max_scripts` files run: later ones count under `script="other"`, so that
//! neither the caller's dialplan nor a directory of thousands of files can grow `/metrics`
//! without bound. Refusals are labelled by reason only, never by the path asked for.

use crate::metrics::ReasonLabel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Mutex;

/// The label of the scripts past `metrics_max_scripts`, and of exit codes and signals past
/// their own bound.
pub const OTHER: &str = "other";
/// Default of `scripts.metrics_max_scripts`.
pub const METRICS_MAX_SCRIPTS: usize = 64;
/// Exit codes and signals with series of their own, per script on average: a script exits with
/// 0, 1 and perhaps a few codes of its own; the rest count under `code="other"`.
const CODES_PER_SCRIPT: usize = 8;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScriptLabel {
    pub script: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExitLabel {
    pub script: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabel {
    pub script: String,
    pub signal: String,
}

pub struct ScriptMetrics {
    sessions: Family<ScriptLabel, Counter>,
    spawn_seconds: Family<ScriptLabel, Histogram>,
    run_seconds: Family<ScriptLabel, Histogram>,
    exits: Family<ExitLabel, Counter>,
    signals: Family<SignalLabel, Counter>,
    timeouts: Family<ScriptLabel, Counter>,
    prewarmed: Family<ScriptLabel, Gauge>,
    refused: Family<ReasonLabel, Counter>,
    /// Script processes serving a session now, against `scripts.max_running`.
    pub running: Gauge,
    pub running_max: Gauge,
    /// Scripts with series of their own, against `named_max`.
    named: Gauge,
    named_max: Gauge,
    scripts: Labels,
    codes: Labels,
}

/// A bounded set of label values: the first `max` seen get series of their own, the rest are
/// told to use [`OTHER`].
struct Labels(Mutex<(usize, HashSet<String>)>);

impl Labels {
    fn new(max: usize) -> Labels {
        Labels(Mutex::new((max, HashSet::new())))
    }

    /// `value` if it has, or may now have, series of its own; else `None`.
    fn admit(&self, value: &str) -> Option<usize> {
        let mut guard = self.0.lock().expect("labels lock");
        let (max, known) = &mut *guard;
        if known.contains(value) {
            return Some(known.len());
        }
        if known.len() >= *max {
            return None;
        }
        known.insert(value.to_owned());
        Some(known.len())
    }

    fn set_max(&self, max: usize) {
        self.0.lock().expect("labels lock").0 = max;
    }
}

/// One script's handles, resolved once per session.
pub(super) struct PerScript {
    /// The `script` label its series carry: its file, or [`OTHER`].
    pub label: String,
    pub sessions: Counter,
    pub spawn_seconds: Histogram,
    pub run_seconds: Histogram,
    pub timeouts: Counter,
    pub prewarmed: Gauge,
}

impl ScriptMetrics {
    pub fn new(registry: &mut Registry) -> ScriptMetrics {
        let m = ScriptMetrics {
            sessions: Family::default(),
            // 100 µs (prewarmed) .. ~3 s (a slow interpreter on a loaded machine).
            spawn_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 16))
            }),
            run_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            }),
            exits: Family::default(),
            signals: Family::default(),
            timeouts: Family::default(),
            prewarmed: Family::default(),
            refused: Family::default(),
            running: Gauge::default(),
            running_max: Gauge::default(),
            named: Gauge::default(),
            named_max: Gauge::default(),
            scripts: Labels::new(METRICS_MAX_SCRIPTS),
            codes: Labels::new(METRICS_MAX_SCRIPTS * CODES_PER_SCRIPT),
        };
        m.named_max.set(METRICS_MAX_SCRIPTS as i64);
        let r = registry.sub_registry_with_prefix("tandem_agi_script");
        r.register(
            "sessions",
            "Sessions served by a script",
            m.sessions.clone(),
        );
        r.register(
            "spawn_seconds",
            "Time to have the script's process ready",
            m.spawn_seconds.clone(),
        );
        r.register(
            "run_seconds",
            "Script run time, start to exit",
            m.run_seconds.clone(),
        );
        r.register(
            "exits",
            "Scripts that exited, by exit code",
            m.exits.clone(),
        );
        r.register(
            "signals",
            "Scripts ended by a signal, by signal",
            m.signals.clone(),
        );
        r.register(
            "timeouts",
            "Scripts killed at their max_run_ms",
            m.timeouts.clone(),
        );
        r.register(
            "prewarmed",
            "Processes started and waiting for a call",
            m.prewarmed.clone(),
        );
        r.register(
            "refused",
            "Script requests refused, by reason",
            m.refused.clone(),
        );
        r.register(
            "running",
            "Script processes serving a session now",
            m.running.clone(),
        );
        r.register(
            "running_max",
            "Limit on script processes serving sessions (scripts.max_running)",
            m.running_max.clone(),
        );
        r.register(
            "named",
            "Scripts with series of their own; past named_max, scripts count under \
             script=\"other\"",
            m.named.clone(),
        );
        r.register(
            "named_max",
            "Scripts that may have series of their own (scripts.metrics_max_scripts)",
            m.named_max.clone(),
        );
        m
    }

    /// Sets how many scripts may have series of their own (`scripts.metrics_max_scripts`).
    pub fn limit_scripts(&self, max: usize) {
        self.scripts.set_max(max);
        self.codes.set_max(max.saturating_mul(CODES_PER_SCRIPT));
        self.named_max.set(max as i64);
    }

    /// The `script` label for `file` (a [`super::ScriptPath::file`]): the file itself while
    /// there is room, else [`OTHER`].
    pub fn label_for(&self, file: &str) -> String {
        match self.scripts.admit(file) {
            Some(n) => {
                self.named.set(n as i64);
                file.to_owned()
            }
            None => OTHER.to_owned(),
        }
    }

    /// Metrics that go nowhere, for runners built without a registry (tests, benchmarks).
    pub fn unregistered() -> ScriptMetrics {
        ScriptMetrics::new(&mut Registry::default())
    }

    /// The handles of `file`'s series (or of `other`'s).
    pub(super) fn for_script(&self, file: &str) -> PerScript {
        let label = self.label_for(file);
        let l = ScriptLabel {
            script: label.clone(),
        };
        PerScript {
            label,
            sessions: self.sessions.get_or_create(&l).clone(),
            spawn_seconds: self.spawn_seconds.get_or_create(&l).clone(),
            run_seconds: self.run_seconds.get_or_create(&l).clone(),
            timeouts: self.timeouts.get_or_create(&l).clone(),
            prewarmed: self.prewarmed.get_or_create(&l).clone(),
        }
    }

    pub(super) fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// `code` as a label of `label`'s series, or [`OTHER`] past the bound on codes.
    fn code_label(&self, label: &str, kind: &str, code: i32) -> String {
        let code = code.to_string();
        match self.codes.admit(&format!("{label}\0{kind}{code}")) {
            Some(_) => code,
            None => OTHER.to_owned(),
        }
    }

    /// `label` is a [`PerScript::label`].
    pub(super) fn exit(&self, label: &str, code: i32) {
        let l = ExitLabel {
            script: label.to_string(),
            code: self.code_label(label, "exit", code),
        };
        self.exits.get_or_create(&l).inc();
    }

    /// `label` is a [`PerScript::label`].
    pub(super) fn signal(&self, label: &str, signal: i32) {
        let l = SignalLabel {
            script: label.to_string(),
            signal: self.code_label(label, "signal", signal),
        };
        self.signals.get_or_create(&l).inc();
    }

    /// Requests refused for `reason` so far.
    pub fn refused_count(&self, reason: &str) -> u64 {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .get()
    }

    /// Runs of `script` that exited with `code` so far.
    pub fn exit_count(&self, script: &str, code: i32) -> u64 {
        self.exits
            .get(&ExitLabel {
                script: script.into(),
                code: code.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// Runs of `script` killed at their limit so far.
    pub fn timeout_count(&self, script: &str) -> u64 {
        self.timeouts
            .get(&ScriptLabel {
                script: script.into(),
            })
            .map_or(0, |c| c.get())
    }

    /// Sessions served by `script` (a file, or `other`) so far.
    pub fn session_count(&self, script: &str) -> u64 {
        self.sessions
            .get(&ScriptLabel {
                script: script.into(),
            })
            .map_or(0, |c| c.get())
    }
}
