//! Prometheus metrics and a health check over HTTP: `GET /metrics` encodes a registry in the
//! OpenMetrics text format at each scrape, `GET /health` answers `OK`. `tandem serve` and a
//! running capture each serve their own registry this way, through `http_listen` (connections
//! per address and in all, header and body deadlines, and a `Host` allowlist: the listen
//! address, `localhost` on loopback, `[metrics] hosts`; any other name gets 421).
//!
//! Never: holds state of its own (everything comes from the registry at each scrape), or binds
//! an address the caller did not give (keep it on loopback: there is no authentication).

pub use http_listen::Hosts;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;

const PROMETHEUS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics endpoint could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics server: {0}")]
    Serve(#[from] std::io::Error),
    #[error(transparent)]
    Hosts(#[from] http_listen::HostsError),
}

/// Binds the metrics address now, so that a taken port is reported at start.
pub async fn bind(listen: SocketAddr) -> Result<tokio::net::TcpListener, HttpError> {
    tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| HttpError::Bind {
            addr: listen,
            // An address in use names what holds it.
            source: procstat::name_holder(listen, procstat::Proto::Tcp, e),
        })
}

/// Serves `/metrics` and `/health` until `shutdown` completes, answering to the listen address
/// (and `localhost` on loopback) only: `tandem capture --metrics-listen`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    serve_for(listener, registry, Hosts::own_addresses(), shutdown).await
}

/// The names `/metrics` answers to: its address, `localhost` on loopback, and `configured`
/// (`[metrics] hosts`: `name` or `name:port`, the names a Prometheus scrapes it by).
pub fn hosts(configured: &[String]) -> Result<Hosts, HttpError> {
    Ok(Hosts::new(configured, "[metrics] hosts")?)
}

/// Serves `/metrics` and `/health`, answering to `hosts`, until `shutdown` completes; within
/// [`http_listen::Limits::METRICS`] (connections per address and in all, header and body
/// deadlines), as every Tandem HTTP server is.
pub async fn serve_for(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    hosts: Hosts,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    let mut body = String::new();
                    match prometheus_client::encoding::text::encode(&mut body, &registry) {
                        Ok(()) => ([(CONTENT_TYPE, PROMETHEUS_TEXT)], body).into_response(),
                        Err(e) => (
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            format!("encoding metrics failed: {e}"),
                        )
                            .into_response(),
                    }
                }
            }),
        )
        .route("/health", get(|| async { "OK\n" }));
    let limits = http_listen::Limits::METRICS;
    http_listen::serve(listener, app, None, limits, hosts, "metrics", shutdown).await;
    Ok(())
}

/// Longest series name kept by [`samples`] (name and labels as the text format writes them).
pub const SAMPLE_NAME_BYTES_MAX: usize = 256;

/// The registry in the text format, as `/metrics` would serve it now (empty if it cannot be
/// encoded). A history samples it once per tick and reads both [`samples`] and [`histograms`]
/// from the one text.
pub fn exposition(registry: &Registry) -> String {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
        text.clear();
    }
    text
}

/// Every figure of a text exposition, as `(series, value)`: the series is the metric's name
/// with its labels as the text format writes them (`tandem_agi_sessions_total{route="db/get"}`).
/// Histogram buckets are left out (their `_sum` and `_count` are kept, and [`histograms`] reads
/// the buckets), as are values that are not finite.
pub fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            // The value follows the last space outside the labels.
            let labels_end = l.rfind('}').map_or(0, |i| i + 1);
            let (series, value) = l[labels_end..]
                .find(' ')
                .map(|i| (&l[..labels_end + i], &l[labels_end + i + 1..]))?;
            let value: f64 = value.split(' ').next()?.parse().ok()?;
            let name = series.split('{').next()?;
            let keep = value.is_finite()
                && !name.ends_with("_bucket")
                && !name.ends_with("_created")
                && series.len() <= SAMPLE_NAME_BYTES_MAX;
            keep.then(|| (series.to_owned(), value))
        })
        .collect()
}

/// Every histogram of a text exposition as its cumulative buckets: per series (the histogram's
/// name with its labels but `le`, as [`samples`] writes names), `(upper bound, cumulative
/// count)` in the order of the bounds, `+Inf` last.
pub fn histograms(text: &str) -> Vec<(String, Vec<(f64, u64)>)> {
    let mut out: Vec<(String, Vec<(f64, u64)>)> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, rest)) = line.split_once('{') else {
            continue;
        };
        let Some(name) = series.strip_suffix("_bucket") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Some(count) = value.split(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let mut le = None;
        let kept: Vec<&str> = labels
            .split(',')
            .filter(|kv| match kv.strip_prefix("le=\"") {
                Some(v) => {
                    le = v.trim_end_matches('"').parse::<f64>().ok();
                    false
                }
                None => !kv.is_empty(),
            })
            .collect();
        let Some(le) = le else { continue };
        let key = if kept.is_empty() {
            name.to_owned()
        } else {
            format!("{name}{{{}}}", kept.join(","))
        };
        if key.len() > SAMPLE_NAME_BYTES_MAX || !count.is_finite() || count < 0.0 {
            continue;
        }
        match out.last_mut() {
            Some((k, buckets)) if *k == key => buckets.push((le, count as u64)),
            _ => out.push((key, vec![(le, count as u64)])),
        }
    }
    out
}

/// Turns successive readings of cumulative histograms into the latencies observed between
/// them: `(representative value, count)` per bucket that grew, the value being the geometric
/// middle of the bucket's bounds (half its upper bound for the first, its lower bound for
/// `+Inf`). A histogram whose counts went down (the process restarted) counts from zero.
#[derive(Debug, Default)]
pub struct HistogramDeltas {
    previous: std::collections::HashMap<String, Vec<(f64, u64)>>,
}

impl HistogramDeltas {
    /// Most histogram series remembered (a bound against label explosions).
    pub const SERIES_MAX: usize = 4096;

    pub fn observe(
        &mut self,
        now: Vec<(String, Vec<(f64, u64)>)>,
    ) -> Vec<(String, Vec<(f64, u64)>)> {
        let mut out = Vec::new();
        for (name, buckets) in now {
            let before = self.previous.get(&name);
            let restarted = before.is_some_and(|b| {
                b.len() != buckets.len() || b.iter().zip(&buckets).any(|(p, n)| n.1 < p.1)
            });
            // Counts per bucket (the text format's are cumulative), now and at the last reading.
            let per_bucket = |c: &[(f64, u64)]| -> Vec<u64> {
                c.iter()
                    .enumerate()
                    .map(|(j, &(_, n))| n.saturating_sub(if j == 0 { 0 } else { c[j - 1].1 }))
                    .collect()
            };
            let now_n = per_bucket(&buckets);
            let before_n = match before {
                Some(b) if !restarted => per_bucket(b),
                _ => vec![0; buckets.len()],
            };
            let mut observed = Vec::new();
            let mut below = 0.0;
            for (i, &(le, _)) in buckets.iter().enumerate() {
                let grew = now_n[i].saturating_sub(before_n[i]);
                if grew > 0 {
                    let value = if le.is_infinite() {
                        below
                    } else if below > 0.0 {
                        (below * le).sqrt()
                    } else {
                        le / 2.0
                    };
                    observed.push((value, grew));
                }
                if le.is_finite() {
                    below = le;
                }
            }
            if !observed.is_empty() {
                out.push((name.clone(), observed));
            }
            if self.previous.len() < Self::SERIES_MAX || self.previous.contains_key(&name) {
                self.previous.insert(name, buckets);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;

    #[test]
    fn histograms_become_the_latencies_observed_between_readings() {
        let mut registry = Registry::default();
        let latency = Family::<Vec<(String, String)>, Histogram>::new_with_constructor(|| {
            Histogram::new([0.01, 0.1, 1.0])
        });
        registry.register("tandem_latency_seconds", "Latency", latency.clone());
        let route = vec![("route".to_owned(), "db/get".to_owned())];
        latency.get_or_create(&route).observe(0.05);
        let mut deltas = HistogramDeltas::default();
        let first = deltas.observe(histograms(&exposition(&registry)));
        let name = "tandem_latency_seconds{route=\"db/get\"}".to_owned();
        // 0.05 lies in (0.01, 0.1]: drawn at their geometric middle.
        assert_eq!(
            first,
            vec![(name.clone(), vec![((0.01f64 * 0.1).sqrt(), 1)])]
        );
        assert_eq!(
            deltas.observe(histograms(&exposition(&registry))),
            vec![],
            "nothing new"
        );
        for v in [0.005, 0.5, 0.5, 7.0] {
            latency.get_or_create(&route).observe(v);
        }
        assert_eq!(
            deltas.observe(histograms(&exposition(&registry))),
            vec![(name, vec![(0.005, 1), (0.1f64.sqrt(), 2), (1.0, 1)])]
        );
    }

    #[test]
    fn samples_are_the_figures_of_metrics_without_histogram_buckets() {
        let mut registry = Registry::default();
        let sessions = Family::<Vec<(String, String)>, Counter>::default();
        registry.register("tandem_sessions", "Sessions", sessions.clone());
        sessions
            .get_or_create(&vec![("route".into(), "db/get".into())])
            .inc_by(3);
        let active = Gauge::<i64>::default();
        registry.register("tandem_active", "Active", active.clone());
        active.set(7);
        let latency = Histogram::new([0.1, 1.0]);
        registry.register("tandem_latency_seconds", "Latency", latency.clone());
        latency.observe(0.5);
        let mut got = samples(&exposition(&registry));
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            [
                ("tandem_active".to_string(), 7.0),
                ("tandem_latency_seconds_count".to_string(), 1.0),
                ("tandem_latency_seconds_sum".to_string(), 0.5),
                ("tandem_sessions_total{route=\"db/get\"}".to_string(), 3.0),
            ]
        );
    }

    #[test]
    fn odd_lines_are_left_out() {
        let text = "x 1\ny{a=\"b c\"} 2 1700000000\nz NaN\nw +Inf\nbroken\n# HELP x y\n";
        assert_eq!(
            samples(text),
            [("x".to_string(), 1.0), ("y{a=\"b c\"}".to_string(), 2.0)]
        );
    }
}
