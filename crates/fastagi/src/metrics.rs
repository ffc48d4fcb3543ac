//! The server's Prometheus metrics. Handles are resolved once (per route at start-up), so a
//! session only touches atomics and its route's histogram.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub route: String,
    /// What Asterisk's AGISTATUS says for the session: `success`, `hangup` or `failure`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabel {
    pub answer: String,
}

/// How a session ended for Tandem. Close to AGISTATUS, but not the same: Asterisk keeps
/// FAILURE for a session in which any command failed on a live channel (a missing sound file),
/// even when the handler went on and the caller later hung up; here that session is a hangup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOutcome {
    /// The handler finished on a live channel.
    Success,
    /// The channel hung up during the session: an ordinary end of a call, not a failure.
    Hangup,
    /// The handler failed or panicked; the session ended with `failure`.
    Failure,
}

impl SessionOutcome {
    pub fn label(self) -> &'static str {
        match self {
            SessionOutcome::Success => "success",
            SessionOutcome::Hangup => "hangup",
            SessionOutcome::Failure => "failure",
        }
    }
}

/// One route's handles, resolved when the server binds.
#[derive(Clone, Debug)]
pub(crate) struct RouteMetrics {
    pub duration: Histogram,
    pub success: Counter,
    pub hangup: Counter,
    pub failure: Counter,
}

impl RouteMetrics {
    pub fn ended(&self, outcome: SessionOutcome) {
        match outcome {
            SessionOutcome::Success => &self.success,
            SessionOutcome::Hangup => &self.hangup,
            SessionOutcome::Failure => &self.failure,
        }
        .inc();
    }
}

/// The reasons `sessions_failed` counts: the server's own, and each `AgiError::kind` a handler
/// can end with.
pub const FAILURE_REASONS: [&str; 17] = [
    "closed_before_header",
    "header",
    "header_timeout",
    "unknown_route",
    "panic",
    "dead_channel",
    "invalid_command",
    "usage",
    "failed",
    "no_such_application",
    "disconnected",
    "timeout",
    "line_too_long",
    "protocol",
    "encode",
    "io",
    "handler",
];

pub struct Metrics {
    pub sessions_started: Counter,
    pub sessions_active: Gauge,
    pub sessions_max: Gauge,
    pub sessions_failed: Family<ReasonLabel, Counter>,
    pub session_duration: Family<RouteLabel, Histogram>,
    pub sessions_ended: Family<OutcomeLabel, Counter>,
    pub commands_sent: Counter,
    pub hangups: Counter,
    pub hangup_probes: Family<AnswerLabel, Counter>,
    pub refused: Family<ReasonLabel, Counter>,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            sessions_started: Counter::default(),
            sessions_active: Gauge::default(),
            sessions_max: Gauge::default(),
            sessions_failed: Family::default(),
            session_duration: Family::new_with_constructor(|| {
                // 1 ms .. ~65 s: a routing lookup to a long IVR.
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.001, 2.0, 17,
                ))
            }),
            sessions_ended: Family::default(),
            commands_sent: Counter::default(),
            hangups: Counter::default(),
            hangup_probes: Family::default(),
            refused: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("tandem_agi");
        r.register(
            "sessions_started",
            "FastAGI sessions accepted",
            m.sessions_started.clone(),
        );
        r.register(
            "sessions_active",
            "FastAGI sessions in progress",
            m.sessions_active.clone(),
        );
        r.register(
            "sessions_max",
            "Limit on sessions in progress",
            m.sessions_max.clone(),
        );
        r.register(
            "sessions_failed",
            "Sessions that ended with failure, by reason",
            m.sessions_failed.clone(),
        );
        r.register(
            "session_duration_seconds",
            "Session duration from header to close, by route",
            m.session_duration.clone(),
        );
        r.register(
            "sessions_ended",
            "Sessions ended, by route and outcome: success (the handler finished), hangup (the \
             channel hung up), failure (the handler failed or panicked)",
            m.sessions_ended.clone(),
        );
        r.register(
            "commands_sent",
            "AGI commands sent to Asterisk",
            m.commands_sent.clone(),
        );
        r.register(
            "hangups",
            "Sessions whose channel hung up",
            m.hangups.clone(),
        );
        r.register(
            "hangup_probes",
            "CHANNEL STATUS sent after a -1 to tell a hangup from a failure, by what it found \
             (dead, live, gone, timeout)",
            m.hangup_probes.clone(),
        );
        r.register(
            "connections_refused",
            "Connections refused before a session started, by reason",
            m.refused.clone(),
        );
        // Every known label starts at 0, so that a series reads 0 rather than being missing.
        for reason in FAILURE_REASONS {
            let _ = m.sessions_failed.get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            });
        }
        for answer in ["dead", "live", "gone", "timeout"] {
            let _ = m.hangup_probes.get_or_create(&AnswerLabel {
                answer: answer.to_string(),
            });
        }
        for reason in ["network", "max_sessions"] {
            let _ = m.refused.get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            });
        }
        m
    }

    /// Metrics that go nowhere, for servers built without a registry (tests, benchmarks).
    pub fn unregistered() -> Metrics {
        Metrics::new(&mut Registry::default())
    }

    /// Sessions that failed for `reason` so far.
    pub fn failed_count(&self, reason: &str) -> u64 {
        self.sessions_failed
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .get()
    }

    /// Sessions of `route` that ended with `outcome` so far.
    pub fn ended_count(&self, route: &str, outcome: SessionOutcome) -> u64 {
        self.sessions_ended
            .get_or_create(&OutcomeLabel {
                route: route.to_string(),
                outcome: outcome.label().to_string(),
            })
            .get()
    }

    /// Hangup probes that found `answer` (`dead`, `live`, `gone`, `timeout`) so far.
    pub fn probe_count(&self, answer: &str) -> u64 {
        self.hangup_probes
            .get_or_create(&AnswerLabel {
                answer: answer.to_string(),
            })
            .get()
    }

    pub(crate) fn probe_answered(&self, answer: &str) {
        self.hangup_probes
            .get_or_create(&AnswerLabel {
                answer: answer.to_string(),
            })
            .inc();
    }

    /// The handles of one route, created once so that a session touches only atomics.
    pub(crate) fn for_route(&self, route: &str) -> RouteMetrics {
        let ended = |outcome: SessionOutcome| {
            self.sessions_ended
                .get_or_create(&OutcomeLabel {
                    route: route.to_string(),
                    outcome: outcome.label().to_string(),
                })
                .clone()
        };
        RouteMetrics {
            duration: self
                .session_duration
                .get_or_create(&RouteLabel {
                    route: route.to_string(),
                })
                .clone(),
            success: ended(SessionOutcome::Success),
            hangup: ended(SessionOutcome::Hangup),
            failure: ended(SessionOutcome::Failure),
        }
    }

    /// Connections refused for `reason` so far.
    pub fn refused_count(&self, reason: &str) -> u64 {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .get()
    }

    pub(crate) fn failed(&self, reason: &str) {
        self.sessions_failed
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    pub(crate) fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }
}
