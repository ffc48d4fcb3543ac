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
