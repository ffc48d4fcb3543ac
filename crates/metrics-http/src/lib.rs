//! Prometheus metrics and a health check over HTTP: `GET /metrics` encodes a registry in the
//! OpenMetrics text format at each scrape, `GET /health` answers `OK`. `tandem serve` and a
//! running capture each serve their own registry this way.
//!
//! Never: holds state of its own (everything comes from the registry at each scrape), or binds
//! an address the caller did not give (keep it on loopback: there is no authentication).

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
}

/// Binds the metrics address now, so that a taken port is reported at start.
pub async fn bind(listen: SocketAddr) -> Result<tokio::net::TcpListener, HttpError> {
    tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| HttpError::Bind {
            addr: listen,
            source,
        })
}

/// Serves `/metrics` and `/health` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
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
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// Longest series name kept by [`samples`] (name and labels as the text format writes them).
pub const SAMPLE_NAME_BYTES_MAX: usize = 256;

/// Every figure `/metrics` would show now, as `(series, value)`: the series is the metric's name
/// with its labels as the text format writes them (`tandem_agi_sessions_total{route="db/get"}`).
/// Histogram buckets are left out (their `_sum` and `_count` are kept), as are values that are
/// not finite: what a history of figures needs, not a full exposition.
pub fn samples(registry: &Registry) -> Vec<(String, f64)> {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
        return Vec::new();
    }
    parse_samples(&text)
}

/// The sample lines of a text exposition (see [`samples`]).
pub fn parse_samples(text: &str) -> Vec<(String, f64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;

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
        let mut got = samples(&registry);
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
            parse_samples(text),
            [("x".to_string(), 1.0), ("y{a=\"b c\"}".to_string(), 2.0)]
        );
    }
}
