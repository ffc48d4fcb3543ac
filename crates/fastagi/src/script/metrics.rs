//! Metrics per script: sessions, start latency, run time, exits, signals, timeouts, refusals,
//! processes waiting prewarmed. Labelled by the script's path (bounded by the files an operator
//! puts in the directory; refusals are labelled by reason only, never by the path asked for).

use crate::metrics::ReasonLabel;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
}

/// One script's handles, resolved once per session.
pub(super) struct PerScript {
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
        };
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
        m
    }

    /// Metrics that go nowhere, for runners built without a registry (tests, benchmarks).
    pub fn unregistered() -> ScriptMetrics {
        ScriptMetrics::new(&mut Registry::default())
    }

    pub(super) fn for_script(&self, script: &str) -> PerScript {
        let l = ScriptLabel {
            script: script.to_string(),
        };
        PerScript {
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

    pub(super) fn exit(&self, script: &str, code: i32) {
        let l = ExitLabel {
            script: script.to_string(),
            code: code.to_string(),
        };
        self.exits.get_or_create(&l).inc();
    }

    pub(super) fn signal(&self, script: &str, signal: i32) {
        let l = SignalLabel {
            script: script.to_string(),
            signal: signal.to_string(),
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
            .get_or_create(&ExitLabel {
                script: script.into(),
                code: code.to_string(),
            })
            .get()
    }

    /// Runs of `script` killed at their limit so far.
    pub fn timeout_count(&self, script: &str) -> u64 {
        self.timeouts
            .get_or_create(&ScriptLabel {
                script: script.into(),
            })
            .get()
    }
}
