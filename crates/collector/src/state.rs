//! What the collector knows of each sensor (connected, last seen, clock skew, lag, records,
//! the journal figures the sensor reports) and its own counters, as `tandem_collector_*`
//! metrics encoded at each scrape.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One sensor as the collector sees it (the console's and `/metrics`' view).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SensorStatus {
    pub name: String,
    pub connected: bool,
    /// The address of its session (the last one when disconnected).
    pub peer: String,
    /// When the collector last heard from it, µs since the epoch (the collector's clock).
    pub last_seen_us: i64,
    /// Its clock minus the collector's, at its last Hello or Heartbeat, in ms.
    pub clock_skew_ms: i64,
    /// Age of its oldest batch received but not yet committed, ms (0 when none waits).
    pub lag_ms: u64,
    pub records_received: u64,
    pub records_stored: u64,
    /// As the sensor last reported them (Heartbeat).
    pub journal_records: u64,
    pub spilled: u64,
    pub replayed: u64,
    pub dropped: u64,
    pub sessions: u64,
    /// What it said it runs, in its last Hello (e.g. "tandem 0.1.0").
    pub software: String,
}

/// Why a session was refused, as the `reason` label of `tandem_collector_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    UnknownSensor,
    BadToken,
    PlainTcp,
    Version,
    Certificate,
    TooManySessions,
    TooManySensors,
    Handshake,
    Protocol,
}

impl Refusal {
    pub const ALL: [Refusal; 9] = [
        Refusal::UnknownSensor,
        Refusal::BadToken,
        Refusal::PlainTcp,
        Refusal::Version,
        Refusal::Certificate,
        Refusal::TooManySessions,
        Refusal::TooManySensors,
        Refusal::Handshake,
        Refusal::Protocol,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::UnknownSensor => "unknown_sensor",
            Refusal::BadToken => "bad_token",
            Refusal::PlainTcp => "plain_tcp",
            Refusal::Version => "version",
            Refusal::Certificate => "certificate",
            Refusal::TooManySessions => "too_many_sessions",
            Refusal::TooManySensors => "too_many_sensors",
            Refusal::Handshake => "handshake",
            Refusal::Protocol => "protocol",
        }
    }
}

/// The collector's own counters.
#[derive(Default)]
pub(crate) struct Counters {
    pub sessions_accepted: AtomicU64,
    pub refused: [AtomicU64; 9],
    pub records_received: AtomicU64,
    pub records_stored: AtomicU64,
    pub transactions: AtomicU64,
    pub db_errors: AtomicU64,
    /// Upkeeps of the CDR tables (retention, days ahead) that finished.
    pub upkeeps: AtomicU64,
    pub nacked_batches: AtomicU64,
    pub pcap_ok: AtomicU64,
    pub pcap_failed: AtomicU64,
    pub pcap_offline: AtomicU64,
}

impl Counters {
    pub fn refused(&self, r: Refusal) {
        self.refused[r as usize].fetch_add(1, Relaxed);
    }
}

/// The figures of a scrape that the state itself does not hold.
pub(crate) struct Gauges {
    pub sessions: u64,
    pub sessions_max: u64,
    pub queue_batches: u64,
    pub queue_batches_max: u64,
    pub db_up: u64,
    pub sensors_max: u64,
}

/// Encodes `tandem_collector_*` at each scrape.
pub(crate) struct Metrics {
    pub shared: Arc<crate::Shared>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("collector metrics")
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

/// One family with a `sensor` label, a series per sensor.
fn per_sensor<T: Copy>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    sensors: &[SensorStatus],
    counter_kind: bool,
    v: impl Fn(&SensorStatus) -> T,
) -> std::fmt::Result
where
    i64: TryFrom<T>,
    u64: TryFrom<T>,
{
    if counter_kind {
        let mut m = e.encode_descriptor(
            name,
            help,
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for s in sensors {
            let c = ConstCounter::new(u64::try_from(v(s)).unwrap_or(0));
            c.encode(m.encode_family(&[("sensor", s.name.as_str())])?)?;
        }
    } else {
        let mut m = e.encode_descriptor(
            name,
            help,
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for s in sensors {
            let g = ConstGauge::new(i64::try_from(v(s)).unwrap_or(i64::MAX));
            g.encode(m.encode_family(&[("sensor", s.name.as_str())])?)?;
        }
    }
    Ok(())
}

impl Collector for Metrics {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let sh = &self.shared;
        let c = &sh.counters;
        let g = sh.gauges();
        gauge(
            &mut e,
            "sessions",
            "Sensor sessions open",
            g.sessions as i64,
        )?;
        gauge(
            &mut e,
            "sessions_max",
            "Bound of sensor sessions",
            g.sessions_max as i64,
        )?;
        counter(
            &mut e,
            "sessions_accepted",
            "Sensor sessions accepted (authenticated)",
            c.sessions_accepted.load(Relaxed),
        )?;
        {
            let mut m = e.encode_descriptor(
                "refused",
                "Connections refused, by reason",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for r in Refusal::ALL {
                let v = ConstCounter::new(c.refused[r as usize].load(Relaxed));
                v.encode(m.encode_family(&[("reason", r.label())])?)?;
            }
        }
        counter(
            &mut e,
            "records_received",
            "CDR records received from sensors",
            c.records_received.load(Relaxed),
        )?;
        counter(
            &mut e,
            "records_stored",
            "CDR records committed to PostgreSQL and acknowledged",
            c.records_stored.load(Relaxed),
        )?;
        counter(
            &mut e,
            "transactions",
            "PostgreSQL transactions that stored records",
            c.transactions.load(Relaxed),
        )?;
        counter(
            &mut e,
            "db_errors",
            "Failed PostgreSQL connections or transactions",
            c.db_errors.load(Relaxed),
        )?;
        counter(
            &mut e,
            "upkeeps",
            "Upkeeps of the CDR tables on the collector's timer (old days dropped, days ahead created) that finished",
            c.upkeeps.load(Relaxed),
        )?;
        counter(
            &mut e,
            "nacked_batches",
            "Batches answered with Nack (not stored; the sensor sends them again)",
            c.nacked_batches.load(Relaxed),
        )?;
        gauge(
            &mut e,
            "db_up",
            "Whether every writer's PostgreSQL connection is up",
            g.db_up as i64,
        )?;
        gauge(
            &mut e,
            "queue_batches",
            "Batches queued for PostgreSQL",
            g.queue_batches as i64,
        )?;
        gauge(
            &mut e,
            "queue_batches_max",
            "Bound of the batches queued for PostgreSQL",
            g.queue_batches_max as i64,
        )?;
        gauge(
            &mut e,
            "sensors_max",
            "Bound of sensors tracked",
            g.sensors_max as i64,
        )?;
        {
            let mut m = e.encode_descriptor(
                "pcap_requests",
                "Pcap requests to sensors, by result",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (label, v) in [
                ("ok", &c.pcap_ok),
                ("failed", &c.pcap_failed),
                ("offline", &c.pcap_offline),
            ] {
                ConstCounter::new(v.load(Relaxed))
                    .encode(m.encode_family(&[("result", label)])?)?;
            }
        }
        let sensors = sh.sensor_statuses();
        gauge(
            &mut e,
            "sensors",
            "Sensors tracked since the start",
            sensors.len() as i64,
        )?;
        per_sensor(
            &mut e,
            "sensor_connected",
            "Whether the sensor has a session",
            &sensors,
            false,
            |s| u64::from(s.connected),
        )?;
        per_sensor(
            &mut e,
            "sensor_last_seen_seconds",
            "When the collector last heard from the sensor, seconds since the epoch",
            &sensors,
            false,
            |s| s.last_seen_us / 1_000_000,
        )?;
        per_sensor(
            &mut e,
            "sensor_clock_skew_ms",
            "The sensor's clock minus the collector's, ms",
            &sensors,
            false,
            |s| s.clock_skew_ms,
        )?;
        per_sensor(
            &mut e,
            "sensor_lag_ms",
            "Age of the sensor's oldest batch not yet committed, ms",
            &sensors,
            false,
            |s| s.lag_ms,
        )?;
        per_sensor(
            &mut e,
            "sensor_records_received",
            "Records received from the sensor",
            &sensors,
            true,
            |s| s.records_received,
        )?;
        per_sensor(
            &mut e,
            "sensor_records_stored",
            "Records of the sensor committed and acknowledged",
            &sensors,
            true,
            |s| s.records_stored,
        )?;
        per_sensor(
            &mut e,
            "sensor_journal_records",
            "Records in the sensor's journal, as it reports",
            &sensors,
            false,
            |s| s.journal_records,
        )?;
        per_sensor(
            &mut e,
            "sensor_spilled_records",
            "Records the sensor's capture journaled itself, as it reports",
            &sensors,
            false,
            |s| s.spilled,
        )?;
        per_sensor(
            &mut e,
            "sensor_replayed_records",
            "Records the sensor delivered from its journal, as it reports",
            &sensors,
            false,
            |s| s.replayed,
        )?;
        per_sensor(
            &mut e,
            "sensor_dropped_records",
            "Records the sensor lost, as it reports",
            &sensors,
            false,
            |s| s.dropped,
        )?;
        Ok(())
    }
}

/// The per-sensor table, bounded by `sensors_max`.
#[derive(Default)]
pub(crate) struct SensorTable {
    pub map: Mutex<HashMap<String, SensorStatus>>,
}

impl SensorTable {
    /// Runs `f` on `name`'s entry, creating it if there is room; false when the table is full.
    pub fn update(&self, name: &str, max: usize, f: impl FnOnce(&mut SensorStatus)) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(name) {
            if map.len() >= max {
                return false;
            }
            map.insert(
                name.to_string(),
                SensorStatus {
                    name: name.to_string(),
                    ..SensorStatus::default()
                },
            );
        }
        f(map.get_mut(name).expect("entry present"));
        true
    }

    pub fn get(&self, name: &str) -> Option<SensorStatus> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}
