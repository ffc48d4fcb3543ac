//! The `tandem_registrar_*` metrics.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub method: &'static str,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabel, Counter>,
    pub auth_failures: Family<ReasonLabel, Counter>,
    pub dropped: Family<ReasonLabel, Counter>,
    pub retransmissions: Counter,
    pub bindings: Gauge,
    pub aors: Gauge,
    pub transactions: Gauge,
    pub commit_seconds: Histogram,
    pub expired: Counter,
    pub connections: Gauge,
    pub connections_unregistered: Gauge,
    pub connections_closed: Family<ReasonLabel, Counter>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            requests: Family::default(),
            auth_failures: Family::default(),
            dropped: Family::default(),
            retransmissions: Counter::default(),
            bindings: Gauge::default(),
            aors: Gauge::default(),
            transactions: Gauge::default(),
            // 50 µs to about 3.3 s.
            commit_seconds: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.0, 17),
            ),
            expired: Counter::default(),
            connections: Gauge::default(),
            connections_unregistered: Gauge::default(),
            connections_closed: Family::default(),
        }
    }

    pub fn register(&self, r: &mut Registry) {
        r.register(
            "tandem_registrar_requests",
            "SIP requests answered, by method and response code",
            self.requests.clone(),
        );
        r.register(
            "tandem_registrar_auth_failures",
            "Failed digest attempts, by reason",
            self.auth_failures.clone(),
        );
        r.register(
            "tandem_registrar_dropped",
            "Packets dropped unanswered, by reason",
            self.dropped.clone(),
        );
        r.register(
            "tandem_registrar_retransmissions",
            "Retransmitted requests absorbed or answered from the transaction table",
            self.retransmissions.clone(),
        );
        r.register(
            "tandem_registrar_bindings",
            "Live contact bindings",
            self.bindings.clone(),
        );
        r.register(
            "tandem_registrar_aors",
            "Addresses of record in memory",
            self.aors.clone(),
        );
        r.register(
            "tandem_registrar_transactions",
            "Server transactions held (for retransmissions)",
            self.transactions.clone(),
        );
        r.register(
            "tandem_registrar_commit_seconds",
            "Time from a binding change to its durable commit",
            self.commit_seconds.clone(),
        );
        r.register(
            "tandem_registrar_expired",
            "Bindings removed because they lapsed",
            self.expired.clone(),
        );
        r.register(
            "tandem_registrar_connections",
            "TCP and TLS connections open",
            self.connections.clone(),
        );
        r.register(
            "tandem_registrar_connections_unregistered",
            "Open connections on which no REGISTER was answered 200 (the ones evicted first)",
            self.connections_unregistered.clone(),
        );
        r.register(
            "tandem_registrar_connections_closed",
            "Connections refused or closed by the server, by reason: address_limit and \
             total_limit (refused when accepted), evicted (to admit another at the total \
             limit), unregistered_idle, idle, tls_handshake, unframeable",
            self.connections_closed.clone(),
        );
    }

    pub fn answered(&self, method: &str, code: u16) {
        // Method names from the wire are bounded to the known set, so labels stay few; the
        // label borrows a constant, so counting a request allocates nothing.
        const KNOWN: [&str; 14] = [
            "REGISTER",
            "OPTIONS",
            "INVITE",
            "ACK",
            "CANCEL",
            "BYE",
            "SUBSCRIBE",
            "NOTIFY",
            "PUBLISH",
            "INFO",
            "MESSAGE",
            "UPDATE",
            "PRACK",
            "REFER",
        ];
        let method = KNOWN.into_iter().find(|m| *m == method).unwrap_or("other");
        self.requests
            .get_or_create(&RequestLabel { method, code })
            .inc();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
