//! The remote sensors of `serve`'s collector: the dashboard's Sensors panel and
//! `GET /api/sensors`.
//!
//! The console does not know the collector: `serve` hands it a [`SensorsFeed`], a function
//! that returns the collector's per-sensor state as the plain [`SensorState`] rows defined
//! here (as `CallsConfig::remote_pcap` hands it the collector's pcap fetch). Without a
//! collector there is no feed, no panel, and `/api/sensors` answers 404.
//!
//! The panel is drawn on the server like the rest of the dashboard, so the page's own refresh
//! (`?refresh=`) refreshes it, and a page without JavaScript still shows it (times in UTC).

use std::sync::Arc;

use serde::Serialize;

/// Most rows the panel draws; `/api/sensors` has every sensor (the collector bounds them by
/// its `sensors_max`).
pub const PANEL_ROWS_MAX: usize = 200;

/// One sensor as the collector sees it: every sensor seen since `serve` started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SensorState {
    /// Its name, as `tandem sensor add NAME` registered it.
    pub name: String,
    /// Whether it has a session now.
    pub connected: bool,
    /// The address of its session (the last one when disconnected).
    pub peer: String,
    /// When the collector last heard from it, µs since the epoch (the collector's clock).
    pub last_seen_us: i64,
    /// Its clock minus the collector's, at its last Hello or Heartbeat, in ms.
    pub clock_skew_ms: i64,
    /// Age of its oldest batch received but not yet committed, ms (0 when none waits).
    pub lag_ms: u64,
    /// Records received from it, and committed and acknowledged (delivered).
    pub records_received: u64,
    pub records_stored: u64,
    /// As it last reported them: records waiting in its journal, journaled by its capture
    /// because its queue was full (spilled), delivered from its journal (replayed), lost.
    pub journal_records: u64,
    pub spilled: u64,
    pub replayed: u64,
    pub dropped: u64,
    /// Sessions it opened since `serve` started.
    pub sessions: u64,
    /// Its software as its Hello said (`tandem 0.1.0`); `None` when the collector does not
    /// keep it.
    pub software: Option<String>,
}

/// Reads the collector's sensors now. Called on an async thread: it must not wait for a disk
/// or a database (the collector's table is in memory).
pub type SensorsFeed = Arc<dyn Fn() -> Vec<SensorState> + Send + Sync>;

/// What the console needs to show the collector's sensors.
#[derive(Clone)]
pub struct SensorsConfig {
    pub feed: SensorsFeed,
    /// A clock further off than this is shown as a warning (the collector's
    /// `clock_skew_warn_ms`, which warns in its log at the same bound).
    pub clock_skew_warn_ms: u64,
}

/// `GET /api/sensors`: the state now, the warning bound, and every sensor in name order.
#[derive(Debug, Clone, Serialize)]
pub struct SensorsAnswer {
    /// The collector's clock when this was read, µs since the epoch.
    pub now_us: i64,
    pub clock_skew_warn_ms: u64,
    pub sensors: Vec<SensorState>,
}

impl SensorsConfig {
    /// Every sensor now, in name order.
    pub fn read(&self, now_us: i64) -> SensorsAnswer {
        let mut sensors = (self.feed)();
        sensors.sort_by(|a, b| a.name.cmp(&b.name));
        SensorsAnswer {
            now_us,
            clock_skew_warn_ms: self.clock_skew_warn_ms,
            sensors,
        }
    }
}

/// The time now, µs since the epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in ms as a person reads it: `0 ms`, `850 ms`, `2.4 s`, `3 min 5 s`.
pub fn duration_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..10_000 => {
            let s = format!("{:.1}", ms as f64 / 1000.0);
            format!("{} s", s.strip_suffix(".0").unwrap_or(&s))
        }
        10_000..60_000 => format!("{} s", ms / 1000),
        _ => {
            let s = ms / 1000;
            match s {
                ..3600 => format!("{} min {} s", s / 60, s % 60),
                _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
            }
        }
    }
}

/// A clock skew with its sign: `+12 ms`, `−2.4 s` (0 has none).
pub fn skew(ms: i64) -> String {
    let sign = match ms {
        0 => "",
        1.. => "+",
        _ => "\u{2212}",
    };
    format!("{sign}{}", duration_ms(ms.unsigned_abs()))
}

/// How long ago `then_us` was at `now_us`: `just now`, `4 s ago`, `12 min ago`, `3 h ago`,
/// `2 d ago`; a time ahead of now (the clocks of two machines) is `just now`.
pub fn ago(now_us: i64, then_us: i64) -> String {
    if then_us <= 0 {
        return "never".to_owned();
    }
    let s = (now_us - then_us).max(0) / 1_000_000;
    match s {
        0 => "just now".to_owned(),
        1..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86400 => format!("{} h ago", s / 3600),
        _ => format!("{} d ago", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_a_person_says_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(12_345_678), "12,345,678");
        assert_eq!(duration_ms(0), "0 ms");
        assert_eq!(duration_ms(850), "850 ms");
        assert_eq!(duration_ms(2_400), "2.4 s");
        assert_eq!(duration_ms(2_000), "2 s");
        assert_eq!(duration_ms(42_000), "42 s");
        assert_eq!(duration_ms(185_000), "3 min 5 s");
        assert_eq!(duration_ms(7_260_000), "2 h 1 min");
        assert_eq!(skew(0), "0 ms");
        assert_eq!(skew(12), "+12 ms");
        assert_eq!(skew(-2_400), "\u{2212}2.4 s");
        let now = 1_800_000_000_000_000;
        assert_eq!(ago(now, now + 3_000_000), "just now");
        assert_eq!(ago(now, now - 400_000), "just now");
        assert_eq!(ago(now, now - 4_000_000), "4 s ago");
        assert_eq!(ago(now, now - 754_000_000), "12 min ago");
        assert_eq!(ago(now, now - 3 * 3_600_000_000), "3 h ago");
        assert_eq!(ago(now, now - 2 * 86_400_000_000), "2 d ago");
        assert_eq!(ago(now, 0), "never");
    }

    #[test]
    fn the_answer_lists_every_sensor_in_name_order() {
        let feed: SensorsFeed = Arc::new(|| {
            ["site-b", "site-a"]
                .iter()
                .map(|n| SensorState {
                    name: n.to_string(),
                    ..SensorState::default()
                })
                .collect()
        });
        let cfg = SensorsConfig {
            feed,
            clock_skew_warn_ms: 2_000,
        };
        let a = cfg.read(7);
        let names: Vec<_> = a.sensors.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["site-a", "site-b"]);
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["now_us"], 7);
        assert_eq!(json["clock_skew_warn_ms"], 2_000);
        assert_eq!(json["sensors"][0]["software"], serde_json::Value::Null);
        assert_eq!(json["sensors"][0]["records_stored"], 0);
    }
}
