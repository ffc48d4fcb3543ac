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

pub(crate) type RouteMetrics = Histogram;

pub struct Metrics {
    pub sessions_started: Counter,
    pub sessions_active: Gauge,
    pub sessions_max: Gauge,
    pub sessions_failed: Family<ReasonLabel, Counter>,
    pub session_duration: Family<RouteLabel, Histogram>,
    pub commands_sent: Counter,
    pub hangups: Counter,
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
            commands_sent: Counter::default(),
            hangups: Counter::default(),
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
            "connections_refused",
            "Connections refused before a session started, by reason",
            m.refused.clone(),
        );
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
