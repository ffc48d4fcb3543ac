//! The console's listener: plain HTTP on loopback, or TLS (rustls) from a configured
//! certificate and key. Every connection has a bounded handshake and header time, and the
//! number of connections is bounded; a stop signal ends accepting, then waits a little for
//! requests in flight.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::ConsoleError;

/// Time for a TLS handshake, and for a request's headers.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long requests in flight may finish once the console stops.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A TLS acceptor from PEM files: the certificate chain (leaf first) and its private key.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ConsoleError> {
    let mut config = tls_pem::server_config(cert, key).map_err(ConsoleError::Tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    connections_max: usize,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ConsoleError> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(connections_max.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            () = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors, a reset before accept: wait a little, go on.
                    tracing::warn!(error = %e, "console: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => connection(stream, peer, app, watcher).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "console: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "console: TLS handshake timed out"),
                    }
                }
                None => connection(tcp, peer, app, watcher).await,
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("console: requests still in flight after the drain time; cut");
    }
    Ok(())
}

async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    app: Router,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt;
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            app.clone().oneshot(req.map(axum::body::Body::new))
        });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %e, "console: connection ended with an error");
    }
}
