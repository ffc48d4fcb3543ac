//! The `health.*` and `sip.malformed` kinds: rules on metric samples.
//!
//! A counter (a name ending in `_total`, or one of the capture's drop counters) is judged by
//! its increase over the rule's window, counted across resets; a gauge by its last value.

use crate::Figures;
use crate::engine::Memo;
use crate::event::Sample;
use crate::rule::{Kind, Rule, Threshold};

/// The capture's drop counters, summed by `health.capture_drops`.
pub const DROP_METRICS: [&str; 3] = [
    "tandem_capture_kernel_drops_total",
    "tandem_capture_buffer_overruns_total",
    "tandem_capture_archive_dropped_total",
];
pub const MALFORMED_METRIC: &str = "tandem_capture_sip_malformed_total";
pub const PACKETS_METRIC: &str = "tandem_capture_packets_total";
pub const SENSOR_LAST_SEEN_METRIC: &str = "tandem_collector_sensor_last_seen_seconds";
pub const JOURNAL_METRICS: [&str; 2] = [
    "tandem_capture_cdr_journal_records",
    "tandem_collector_sensor_journal_records",
];
pub const AGI_ENDED_METRIC: &str = "tandem_agi_sessions_ended_total";
pub const COMMIT_SUM_METRIC: &str = "tandem_registrar_commit_seconds_sum";
pub const COMMIT_COUNT_METRIC: &str = "tandem_registrar_commit_seconds_count";

/// A sample a rule reads: the key it counts under and the series' name within the key.
pub(crate) struct Reading {
    pub key: String,
    series: String,
}

fn label<'a>(s: &'a Sample, name: &str) -> Option<&'a str> {
    s.labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn sensor_key(s: &Sample) -> String {
    label(s, "sensor").unwrap_or("local").to_string()
}

/// Whether `rule` reads sample `s`, and under which key.
pub(crate) fn read(rule: &Rule, s: &Sample) -> Option<Reading> {
    let m = s.metric.as_str();
    let r = |key: String, series: &str| {
        Some(Reading {
            key,
            series: series.to_string(),
        })
    };
    match &rule.kind {
        Kind::Malformed if m == MALFORMED_METRIC => r(sensor_key(s), m),
        Kind::SensorSilent { .. } if m == SENSOR_LAST_SEEN_METRIC || m == PACKETS_METRIC => {
            r(sensor_key(s), m)
        }
        Kind::CaptureDrops if DROP_METRICS.contains(&m) => r(sensor_key(s), m),
        Kind::CdrJournal if JOURNAL_METRICS.contains(&m) => r(sensor_key(s), m),
        Kind::FastagiFailures if m == AGI_ENDED_METRIC => {
            r(label(s, "route")?.to_string(), label(s, "result")?)
        }
        Kind::StoreCommit { .. } if m == COMMIT_SUM_METRIC || m == COMMIT_COUNT_METRIC => {
            r(String::new(), m)
        }
        Kind::Metric { metric, labels, .. }
            if m == metric && labels.iter().all(|(k, v)| label(s, k) == Some(v.as_str())) =>
        {
            let key = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            r(key, m)
        }
        _ => None,
    }
}

/// Records the sample and judges the key.
pub(crate) fn judge(
    rule: &Rule,
    memo: &mut Memo,
    s: &Sample,
    reading: &Reading,
    now: i64,
    max: usize,
) -> (bool, Figures) {
    if !matches!(memo, Memo::Series(_)) {
        *memo = Memo::Series(Vec::new());
    }
    let Memo::Series(all) = memo else {
        unreachable!()
    };
    let i = match all.iter().position(|(n, _)| **n == *reading.series) {
        Some(i) => i,
        None if all.len() < 16 => {
            all.push((reading.series.as_str().into(), Vec::new()));
            all.len() - 1
        }
        None => return (false, Figures::default()),
    };
    let samples = &mut all[i].1;
    if samples.len() >= max {
        samples.remove(0);
    }
    samples.push((s.at_us, s.value));
    let window_s = (rule.window_us / 1_000_000) as u64;
    let span = match rule.kind {
        Kind::SensorSilent { silent_s } => silent_s as i64 * 1_000_000,
        _ => rule.window_us,
    };
    // Keep one sample from before the span as the base of an increase.
    let from = now - span;
    let first_inside = samples
        .iter()
        .position(|&(t, _)| t >= from)
        .unwrap_or(samples.len());
    if first_inside > 1 {
        samples.drain(..first_inside - 1);
    }
    let inc = |name: &str| -> f64 {
        all.iter()
            .find(|(n, _)| **n == *name)
            .map_or(0.0, |(_, v)| increase(v))
    };
    let total_inc: f64 = all.iter().map(|(_, v)| increase(v)).sum();
    let count_threshold = match rule.threshold {
        Threshold::Count(n) => n as f64,
        Threshold::Percent { .. } => 1.0,
    };
    let fig = |value: f64, threshold: f64, unit: &str| Figures {
        value,
        threshold,
        unit: unit.to_string(),
        matched: value.max(0.0) as u64,
        total: total_inc.max(0.0) as u64,
        window_s,
    };
    match &rule.kind {
        Kind::Malformed | Kind::CaptureDrops => {
            let v = total_inc;
            (
                v >= count_threshold,
                fig(
                    v,
                    count_threshold,
                    if matches!(rule.kind, Kind::Malformed) {
                        "messages"
                    } else {
                        "packets"
                    },
                ),
            )
        }
        Kind::SensorSilent { silent_s } => {
            let silent_s = *silent_s as f64;
            if reading.series == SENSOR_LAST_SEEN_METRIC {
                let v = s.at_us as f64 / 1e6 - s.value;
                (v > silent_s, fig(v, silent_s, "s silent"))
            } else {
                let v = all[i].1.as_slice();
                let covered = v.first().is_some_and(|&(t, _)| t <= from);
                let quiet = covered && increase(v) == 0.0;
                let since = if quiet {
                    (now - v[0].0) as f64 / 1e6
                } else {
                    0.0
                };
                (quiet, fig(since, silent_s, "s silent"))
            }
        }
        Kind::CdrJournal => (
            s.value >= count_threshold,
            fig(s.value, count_threshold, "records"),
        ),
        Kind::FastagiFailures => {
            let failed = inc("failure");
            match rule.threshold {
                Threshold::Percent { pct, min_calls } => {
                    let share = if total_inc > 0.0 {
                        100.0 * failed / total_inc
                    } else {
                        0.0
                    };
                    let mut f = fig(share, pct, "%");
                    f.matched = failed as u64;
                    (
                        total_inc >= min_calls as f64 && failed > 0.0 && share >= pct,
                        f,
                    )
                }
                Threshold::Count(n) => (failed >= n as f64, fig(failed, n as f64, "sessions")),
            }
        }
        Kind::StoreCommit { ms } => {
            let n = inc(COMMIT_COUNT_METRIC);
            let mean_ms = if n > 0.0 {
                1000.0 * inc(COMMIT_SUM_METRIC) / n
            } else {
                0.0
            };
            let mut f = fig(mean_ms, *ms, "ms");
            f.matched = n as u64;
            (n > 0.0 && mean_ms > *ms, f)
        }
        Kind::Metric {
            metric,
            above,
            below,
            ..
        } => {
            let v = if metric.ends_with("_total") {
                increase(&all[i].1)
            } else {
                s.value
            };
            let fires = above.is_some_and(|a| v > a) || below.is_some_and(|b| v < b);
            (fires, fig(v, above.or(*below).unwrap_or(0.0), metric))
        }
        _ => (false, Figures::default()),
    }
}

/// A counter's increase over its samples, across resets (a value that falls restarted).
fn increase(v: &[(i64, f64)]) -> f64 {
    v.windows(2)
        .map(|p| {
            if p[1].1 >= p[0].1 {
                p[1].1 - p[0].1
            } else {
                p[1].1
            }
        })
        .sum()
}
