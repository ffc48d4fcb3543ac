//! One HTTP/1.1 exchange per delivery (hyper's connection API over a TCP or rustls stream):
//! alerts are few, so a connection per request costs nothing and leaves nothing to go stale.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::DeliveryError;

/// The `User-Agent` every request carries.
pub(crate) const USER_AGENT: &str = concat!("tandem/", env!("CARGO_PKG_VERSION"));
/// A response body read beyond this is refused (Alertmanager's silences list is the largest
/// Tandem reads).
pub(crate) const RESPONSE_BYTES_MAX: usize = 4 << 20;

pub(crate) struct Response {
    pub status: u16,
    pub body: Bytes,
}

/// The system's trust anchors (or `SSL_CERT_FILE`'s), read once on the first https request.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, DeliveryError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err("no trusted CA certificates found (install ca-certificates, or set SSL_CERT_FILE)".into());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(DeliveryError::Transient)
}

/// Sends one request to `url` and reads the answer (its body up to `RESPONSE_BYTES_MAX`).
/// Errors name the URL without its path, which may carry a token (Slack's hooks do).
pub(crate) async fn exchange(
    method: hyper::Method,
    url: &url::Url,
    content_type: Option<&str>,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<Response, DeliveryError> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(80);
    let origin = url.origin().ascii_serialization();
    // `[::1]` is a URL's spelling of an IPv6 host; the socket wants it bare.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = tokio::net::TcpStream::connect((bare, port))
        .await
        .map_err(|e| DeliveryError::Transient(format!("{origin}: connect: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        })
        .header(hyper::header::HOST, url.authority())
        .header(hyper::header::USER_AGENT, USER_AGENT);
    if let Some(ct) = content_type {
        req = req.header(hyper::header::CONTENT_TYPE, ct);
    }
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| DeliveryError::Refused(format!("{origin}: request: {e}")))?;
    if url.scheme() == "https" {
        let name = rustls::pki_types::ServerName::try_from(bare.to_string())
            .map_err(|e| DeliveryError::Refused(format!("{origin}: {e}")))?;
        let tls = tokio_rustls::TlsConnector::from(tls_config()?)
            .connect(name, tcp)
            .await
            .map_err(|e| DeliveryError::Transient(format!("{origin}: TLS: {e}")))?;
        over(tls, req, &origin).await
    } else {
        over(tcp, req, &origin).await
    }
}

async fn over<S>(
    io: S,
    req: hyper::Request<Full<Bytes>>,
    origin: &str,
) -> Result<Response, DeliveryError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let transient = |what: &str, e: &dyn std::fmt::Display| {
        DeliveryError::Transient(format!("{origin}: {what}: {e}"))
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| transient("handshake", &e))?;
    // The connection task ends with the exchange (or when this future is dropped on timeout,
    // since the sender goes with it).
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| transient("request", &e))?;
    let status = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), RESPONSE_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| transient("response body", &e))?
        .to_bytes();
    Ok(Response { status, body })
}

/// What a status means for a delivery: 2xx done; 408, 429 and 5xx worth retrying; any other
/// answer (a 4xx, a redirect) will not change by asking again.
pub(crate) fn judge(origin: &url::Url, resp: &Response) -> Result<(), DeliveryError> {
    let status = resp.status;
    let shown = origin.origin().ascii_serialization();
    let excerpt: String = String::from_utf8_lossy(&resp.body[..resp.body.len().min(200)])
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match status {
        200..=299 => Ok(()),
        408 | 429 | 500..=599 => Err(DeliveryError::Transient(format!(
            "{shown} answered {status}: {excerpt}"
        ))),
        _ => Err(DeliveryError::Refused(format!(
            "{shown} answered {status}: {excerpt} (check the action's url and secret)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_delivered_retried_or_refused() {
        let url = url::Url::parse("https://hooks.example.com/services/SECRET-TOKEN").unwrap();
        let judged = |status| {
            judge(
                &url,
                &Response {
                    status,
                    body: Bytes::from_static(b"no\r\nthanks"),
                },
            )
        };
        for ok in [200, 202, 204] {
            assert!(judged(ok).is_ok(), "{ok}");
        }
        for again in [408, 429, 500, 502, 503] {
            assert!(
                matches!(judged(again), Err(DeliveryError::Transient(_))),
                "{again}"
            );
        }
        for refused in [301, 400, 401, 403, 404, 413] {
            match judged(refused) {
                Err(DeliveryError::Refused(e)) => {
                    assert!(!e.contains("SECRET-TOKEN") && !e.contains('\n'), "{e}")
                }
                other => panic!("{refused}: {other:?}"),
            }
        }
    }
}
