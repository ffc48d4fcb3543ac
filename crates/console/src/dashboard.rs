//! The dashboard: which series each panel draws, and how a time range becomes charts.
//!
//! A panel names its series by metric and labels, not by full name, so that routes, cores,
//! interfaces and mounts appear as they are sampled. Counters are drawn as rates between
//! consecutive buckets' last values (divided by the time between those samples, so the open
//! bucket's rate is right too); a histogram's `_sum` over its `_count` gives the mean per bucket.

use crate::chart::{Chart, ChartPoint, ChartSeries, Unit};
use history::{History, HistoryError, Point};

/// Points a chart asks the history for per series: the level chosen draws the range in about
/// this many (at most half as many again: a day of 1-minute buckets).
pub const CHART_POINTS_MAX: usize = 1000;
/// Most series drawn on one chart (the ones with the highest values are kept).
pub const CHART_SERIES_MAX: usize = 8;

/// The relative ranges of the time picker.
pub const RANGES: [(&str, i64); 7] = [
    ("15m", 900),
    ("1h", 3600),
    ("6h", 21600),
    ("24h", 86400),
    ("7d", 604800),
    ("30d", 2592000),
    ("1y", 31536000),
];

/// How a chart turns a series' buckets into points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// The bucket's own min, max and average.
    Gauge,
    /// A counter's increase per second (or per minute, as the unit says).
    Rate,
    /// `<metric>_sum` over `<metric>_count` per bucket: a histogram's mean.
    Mean,
    /// A quantile (0 to 1) of a latency series' sketch per bucket.
    Quantile(f64),
}

/// Which series a chart draws: a metric, label values every series must have, and the label
/// whose value names a series in the legend (`None`: the metric's own legend text).
#[derive(Debug, Clone, Copy)]
pub struct Select {
    pub metric: &'static str,
    pub labels: &'static [(&'static str, &'static str)],
    pub legend_label: Option<&'static str>,
    pub legend: &'static str,
}

const fn one(metric: &'static str, legend: &'static str) -> Select {
    Select {
        metric,
        labels: &[],
        legend_label: None,
        legend,
    }
}

const fn by(metric: &'static str, label: &'static str, legend: &'static str) -> Select {
    Select {
        metric,
        labels: &[],
        legend_label: Some(label),
        legend,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ChartDef {
    pub id: &'static str,
    pub title: &'static str,
    pub unit: Unit,
    pub kind: Kind,
    pub select: &'static [Select],
}

#[derive(Debug, Clone, Copy)]
pub struct PanelDef {
    pub id: &'static str,
    pub title: &'static str,
    /// Where the figures come from, said under the panel's title.
    pub source: &'static str,
    pub charts: &'static [ChartDef],
}

/// The dashboard's panels, in page order.
pub const PANELS: &[PanelDef] = &[
    PanelDef {
        id: "host",
        title: "Host",
        source: "/proc and statvfs on this machine, sampled by Tandem at every history interval",
        charts: &[
            ChartDef {
                id: "cpu",
                title: "CPU busy",
                unit: Unit::Percent,
                kind: Kind::Gauge,
                select: &[by("host_cpu_busy_pct", "cpu", "")],
            },
            ChartDef {
                id: "load",
                title: "Load average",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[
                    one("host_load1", "1 min"),
                    one("host_load5", "5 min"),
                    one("host_load15", "15 min"),
                ],
            },
            ChartDef {
                id: "memory",
                title: "Memory",
                unit: Unit::Bytes,
                kind: Kind::Gauge,
                select: &[
                    one("host_memory_total_bytes", "total"),
                    one("host_memory_available_bytes", "available"),
                    one("host_swap_used_bytes", "swap used"),
                    one("tandem_process_rss_bytes", "Tandem's RSS"),
                ],
            },
            ChartDef {
                id: "disk",
                title: "Disk used",
                unit: Unit::Bytes,
                kind: Kind::Gauge,
                select: &[by("host_fs_used_bytes", "mount", "")],
            },
            ChartDef {
                id: "diskio",
                title: "Disk I/O (read, written)",
                unit: Unit::BytesPerSecond,
                kind: Kind::Gauge,
                select: &[
                    by("host_disk_read_bytes_per_second", "device", "read "),
                    by("host_disk_written_bytes_per_second", "device", "written "),
                ],
            },
            ChartDef {
                id: "net",
                title: "Network (received, sent)",
                unit: Unit::BytesPerSecond,
                kind: Kind::Gauge,
                select: &[
                    by("host_net_rx_bytes_per_second", "interface", "rx "),
                    by("host_net_tx_bytes_per_second", "interface", "tx "),
                ],
            },
            ChartDef {
                id: "tandem-cpu",
                title: "Tandem's CPU",
                unit: Unit::Percent,
                kind: Kind::Gauge,
                select: &[one("tandem_process_cpu_pct", "tandem")],
            },
        ],
    },
    PanelDef {
        id: "calls",
        title: "Calls",
        source: "the call monitor ([capture] in tandem serve): tandem_capture_calls*",
        charts: &[
            ChartDef {
                id: "calls-active",
                title: "Calls now",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[one("tandem_capture_calls_active", "calls")],
            },
            ChartDef {
                id: "calls-rate",
                title: "Calls per minute",
                unit: Unit::PerMinute,
                kind: Kind::Rate,
                select: &[one("tandem_capture_calls_total", "new calls")],
            },
        ],
    },
    PanelDef {
        id: "agi",
        title: "AGI",
        source: "the FastAGI server: tandem_agi_* by route",
        charts: &[
            ChartDef {
                id: "agi-active",
                title: "Sessions now",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[one("tandem_agi_sessions_active", "sessions")],
            },
            ChartDef {
                id: "agi-rate",
                title: "Sessions per second by route",
                unit: Unit::PerSecond,
                kind: Kind::Rate,
                select: &[Select {
                    metric: "tandem_agi_sessions_ended_total",
                    labels: &[("outcome", "success")],
                    legend_label: Some("route"),
                    legend: "",
                }],
            },
            ChartDef {
                id: "agi-failures",
                title: "Failed sessions per second by route",
                unit: Unit::PerSecond,
                kind: Kind::Rate,
                select: &[Select {
                    metric: "tandem_agi_sessions_ended_total",
                    labels: &[("outcome", "failure")],
                    legend_label: Some("route"),
                    legend: "",
                }],
            },
            ChartDef {
                id: "agi-duration",
                title: "Mean session time by route",
                unit: Unit::Seconds,
                kind: Kind::Mean,
                select: &[by("tandem_agi_session_duration_seconds", "route", "")],
            },
            ChartDef {
                id: "agi-p99",
                title: "p99 session time by route",
                unit: Unit::Seconds,
                kind: Kind::Quantile(0.99),
                select: &[by("tandem_agi_session_duration_seconds", "route", "")],
            },
        ],
    },
    PanelDef {
        id: "registrar",
        title: "Registrar",
        source: "Tandem's SIP registrar: tandem_registrar_* (the Devices page lists each phone)",
        charts: &[
            ChartDef {
                id: "registrar-registers",
                title: "REGISTERs answered per minute",
                unit: Unit::PerMinute,
                kind: Kind::Rate,
                select: &[
                    Select {
                        metric: "tandem_registrar_requests_total",
                        labels: &[("method", "REGISTER"), ("code", "200")],
                        legend_label: None,
                        legend: "200 registered",
                    },
                    Select {
                        metric: "tandem_registrar_requests_total",
                        labels: &[("method", "REGISTER"), ("code", "401")],
                        legend_label: None,
                        legend: "401 challenged",
                    },
                    Select {
                        metric: "tandem_registrar_requests_total",
                        labels: &[("method", "REGISTER"), ("code", "403")],
                        legend_label: None,
                        legend: "403 forbidden",
                    },
                ],
            },
            ChartDef {
                id: "registrar-bindings",
                title: "Bindings",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[
                    one("tandem_registrar_bindings", "bindings"),
                    one("tandem_registrar_aors", "addresses of record"),
                ],
            },
            ChartDef {
                id: "registrar-auth-failures",
                title: "Refused credentials per minute by reason",
                unit: Unit::PerMinute,
                kind: Kind::Rate,
                select: &[by("tandem_registrar_auth_failures_total", "reason", "")],
            },
            ChartDef {
                id: "registrar-expired",
                title: "Bindings lapsed per minute",
                unit: Unit::PerMinute,
                kind: Kind::Rate,
                select: &[one("tandem_registrar_expired_total", "lapsed")],
            },
            ChartDef {
                id: "registrar-commit",
                title: "Binding commit time, mean",
                unit: Unit::Seconds,
                kind: Kind::Mean,
                select: &[one("tandem_registrar_commit_seconds", "mean")],
            },
            ChartDef {
                id: "registrar-commit-p99",
                title: "Binding commit time p99",
                unit: Unit::Seconds,
                kind: Kind::Quantile(0.99),
                select: &[one("tandem_registrar_commit_seconds", "p99")],
            },
        ],
    },
    PanelDef {
        id: "store",
        title: "Store",
        source: "the key-value store's own counters (tandem_kv_*)",
        charts: &[
            ChartDef {
                id: "kv-commits",
                title: "Writes committed per second",
                unit: Unit::PerSecond,
                kind: Kind::Rate,
                select: &[one("tandem_kv_committed_ops_total", "writes")],
            },
            ChartDef {
                id: "kv-queue",
                title: "Writes waiting for the disk",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[one("tandem_kv_queue_ops", "queued")],
            },
            ChartDef {
                id: "kv-keys",
                title: "Keys",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[one("tandem_kv_keys", "keys")],
            },
        ],
    },
    PanelDef {
        id: "capture",
        title: "Capture",
        source: "the call monitor's capture: tandem_capture_packets, kernel drops, buffer overruns",
        charts: &[
            ChartDef {
                id: "packets",
                title: "Packets per second",
                unit: Unit::PerSecond,
                kind: Kind::Rate,
                select: &[
                    one("tandem_capture_packets_total", "all"),
                    one("tandem_capture_rtp_packets_total", "RTP"),
                    one("tandem_capture_sip_messages_total", "SIP"),
                ],
            },
            ChartDef {
                id: "drops",
                title: "Drops per second",
                unit: Unit::PerSecond,
                kind: Kind::Rate,
                select: &[
                    one("tandem_capture_kernel_drops_total", "kernel"),
                    one("tandem_capture_buffer_overruns_total", "buffer"),
                    one("tandem_capture_archive_dropped_total", "archive"),
                ],
            },
        ],
    },
    PanelDef {
        id: "cdr",
        title: "CDR writer",
        source: "the call monitor's CDR writer: tandem_capture_cdr_*",
        charts: &[
            ChartDef {
                id: "cdr-backlog",
                title: "Backlog",
                unit: Unit::Plain,
                kind: Kind::Gauge,
                select: &[
                    one("tandem_capture_cdr_queue_records", "queued"),
                    one("tandem_capture_cdr_journal_records", "in the journal"),
                ],
            },
            ChartDef {
                id: "cdr-written",
                title: "CDRs stored per second",
                unit: Unit::PerSecond,
                kind: Kind::Rate,
                select: &[one("tandem_capture_cdr_written_records_total", "stored")],
            },
        ],
    },
];

/// A series name split into its metric and labels: `m{a="1",b="2"}`.
pub fn split_name(name: &str) -> (&str, Vec<(&str, String)>) {
    let Some((metric, rest)) = name.split_once('{') else {
        return (name, Vec::new());
    };
    let mut labels = Vec::new();
    let mut rest = rest.strip_suffix('}').unwrap_or(rest);
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.push((key.trim_start_matches(','), value));
        rest = &after[end..];
    }
    (metric, labels)
}

/// The series of `names` a selection takes, with their legend text; `metric` is the
/// selection's own, or its `_sum` series for a mean.
pub fn matching(select: &Select, metric_name: &str, names: &[String]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|name| {
            let (metric, labels) = split_name(name);
            if metric != metric_name {
                return None;
            }
            let has = |k: &str, v: &str| labels.iter().any(|(lk, lv)| *lk == k && lv == v);
            if !select.labels.iter().all(|(k, v)| has(k, v)) {
                return None;
            }
            let legend = match select.legend_label {
                Some(l) => {
                    let value = labels.iter().find(|(k, _)| *k == l)?.1.clone();
                    format!("{}{value}", select.legend)
                }
                None => select.legend.to_owned(),
            };
            Some((name.clone(), legend))
        })
        .collect()
}

fn gauge_points(points: &[Point]) -> Vec<ChartPoint> {
    points
        .iter()
        .map(|p| ChartPoint {
            t_s: p.t_s,
            min: p.min,
            max: p.max,
            avg: p.avg,
        })
        .collect()
}

/// A counter's rate per second between consecutive buckets; a reset (a lower value) counts
/// from zero.
pub fn rate_points(points: &[Point], per_s: f64) -> Vec<ChartPoint> {
    points
        .windows(2)
        .filter_map(|w| {
            let dt = (w[1].last_s - w[0].last_s) as f64;
            if dt <= 0.0 {
                return None;
            }
            let dv = if w[1].last >= w[0].last {
                w[1].last - w[0].last
            } else {
                w[1].last
            };
            let r = dv / dt * per_s;
            Some(ChartPoint {
                t_s: w[1].t_s,
                min: r,
                max: r,
                avg: r,
            })
        })
        .collect()
}

/// A histogram's mean per bucket: the increase of its sum over the increase of its count.
fn mean_points(sum: &[Point], count: &[Point]) -> Vec<ChartPoint> {
    let count: std::collections::HashMap<i64, &Point> = count.iter().map(|p| (p.t_s, p)).collect();
    sum.windows(2)
        .filter_map(|w| {
            let (c0, c1) = (count.get(&w[0].t_s)?, count.get(&w[1].t_s)?);
            let dc = c1.last - c0.last;
            if dc <= 0.0 {
                return None;
            }
            let m = (w[1].last - w[0].last) / dc;
            Some(ChartPoint {
                t_s: w[1].t_s,
                min: m,
                max: m,
                avg: m,
            })
        })
        .collect()
}

/// Builds one chart of `[from_s, to_s)` from the history.
pub fn chart(
    history: &mut History,
    names: &[String],
    def: &ChartDef,
    from_s: i64,
    to_s: i64,
    now_s: i64,
) -> Result<Chart, HistoryError> {
    let level = history.level_for(from_s, to_s, CHART_POINTS_MAX);
    let width_s = history.config().levels[level].width_s;
    // A rate needs the bucket before the range.
    let read_from = match def.kind {
        Kind::Gauge | Kind::Quantile(_) => from_s,
        Kind::Rate | Kind::Mean => from_s - i64::from(width_s),
    };
    let per_s = if def.unit == Unit::PerMinute {
        60.0
    } else {
        1.0
    };
    let mut series = Vec::new();
    for select in def.select {
        // A mean reads the _sum series and its _count partner beside it.
        let metric = match def.kind {
            Kind::Mean => format!("{}_sum", select.metric),
            Kind::Gauge | Kind::Rate | Kind::Quantile(_) => select.metric.to_owned(),
        };
        for (name, label) in matching(select, &metric, names) {
            let points = match def.kind {
                Kind::Gauge => gauge_points(&history.points(&name, level, read_from, to_s)?),
                Kind::Rate => rate_points(&history.points(&name, level, read_from, to_s)?, per_s),
                Kind::Mean => {
                    let sum = history.points(&name, level, read_from, to_s)?;
                    let count_name = name.replacen("_sum", "_count", 1);
                    let count = history.points(&count_name, level, read_from, to_s)?;
                    mean_points(&sum, &count)
                }
                // Buckets that saw no latency draw nothing (a gap, not a zero).
                Kind::Quantile(q) => history
                    .sketches(&name, level, read_from, to_s)?
                    .into_iter()
                    .filter_map(|(t_s, k)| {
                        k.quantile(q).map(|v| ChartPoint {
                            t_s,
                            min: v,
                            max: v,
                            avg: v,
                        })
                    })
                    .collect(),
            };
            series.push(ChartSeries {
                label: if label.is_empty() {
                    name.clone()
                } else {
                    label
                },
                name,
                points,
            });
        }
    }
    // The busiest series first, then at most CHART_SERIES_MAX of them.
    if series.len() > CHART_SERIES_MAX {
        let top = |s: &ChartSeries| s.points.iter().map(|p| p.avg).fold(0.0, f64::max);
        series.sort_by(|a, b| top(b).total_cmp(&top(a)));
        series.truncate(CHART_SERIES_MAX);
    }
    Ok(Chart {
        id: def.id.to_owned(),
        title: def.title.to_owned(),
        unit: def.unit,
        from_s,
        to_s,
        width_s,
        now_s,
        series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_names_split_into_metric_and_labels() {
        let (m, l) =
            split_name(r#"tandem_agi_sessions_ended_total{route="db/get",outcome="success"}"#);
        assert_eq!(m, "tandem_agi_sessions_ended_total");
        assert_eq!(
            l,
            vec![
                ("route", "db/get".to_owned()),
                ("outcome", "success".to_owned())
            ]
        );
        let (_, l) = split_name(r#"x{a="q\"uote"}"#);
        assert_eq!(l, vec![("a", "q\"uote".to_owned())]);
        assert_eq!(split_name("host_load1"), ("host_load1", vec![]));
    }

    #[test]
    fn a_selection_keeps_its_labels_and_names_the_legend() {
        let names = vec![
            r#"tandem_agi_sessions_ended_total{route="a",outcome="success"}"#.to_owned(),
            r#"tandem_agi_sessions_ended_total{route="a",outcome="failure"}"#.to_owned(),
            r#"tandem_agi_sessions_ended_total{route="b",outcome="success"}"#.to_owned(),
        ];
        let def = &PANELS.iter().find(|p| p.id == "agi").unwrap().charts[1];
        let got: Vec<String> = matching(&def.select[0], def.select[0].metric, &names)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(got, ["a", "b"]);
    }

    #[test]
    fn a_counter_becomes_a_rate_and_survives_a_reset() {
        let p = |t_s, last| Point {
            t_s,
            count: 1,
            min: last,
            max: last,
            avg: last,
            last,
            last_s: t_s + 5,
        };
        let r = rate_points(&[p(0, 100.0), p(10, 150.0), p(20, 30.0)], 1.0);
        assert_eq!(r.iter().map(|c| c.avg).collect::<Vec<_>>(), [5.0, 3.0]);
    }
}
