//! The console's listener: plain HTTP on loopback, or TLS (rustls) from a configured
//! certificate and key, served by `http_listen` with `[web]`'s limits and names: connections
//! per address and in all (a flood from a few addresses yields to every other), deadlines for
//! the handshake, the headers and the body, sizes, and the `Host` allowlist.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;

use crate::{ConsoleError, WebConfig};

/// A TLS acceptor from PEM files: the certificate chain (leaf first) and its private key.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, ConsoleError> {
    let mut config = tls_pem::server_config(cert, key).map_err(ConsoleError::Tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// `[web]`'s limits on connections and requests.
pub(crate) fn limits(cfg: &WebConfig) -> http_listen::Limits {
    http_listen::Limits {
        connections_max: cfg.connections_max,
        connections_per_address_max: cfg.connections_per_address_max,
        header_timeout_ms: cfg.header_timeout_ms,
        body_timeout_ms: cfg.body_timeout_ms,
        header_bytes_max: cfg.header_bytes_max,
        body_bytes_max: cfg.body_bytes_max,
    }
}

/// The names the console answers to: its address, `localhost` on loopback, `[web] hosts`.
pub(crate) fn hosts(cfg: &WebConfig) -> Result<http_listen::Hosts, ConsoleError> {
    Ok(http_listen::Hosts::new(&cfg.hosts, "[web] hosts")?)
}
