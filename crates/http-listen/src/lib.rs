//! The HTTP/1.1 listener that Tandem's web servers share (the console, `/metrics`): [`serve`]
//! runs an axum `Router` on a bound listener, in plain HTTP or TLS, with the defences a
//! server on a network needs before any route runs.
//!
//! - Connections: at most [`Limits::connections_per_address_max`] per client address and
//!   [`Limits::connections_max`] in all, decided at accept (`admit.rs`): a client over its
//!   address's share is closed at once (plain HTTP gets a 503 first), and when the server is
//!   full a newcomer takes the oldest place of the busiest address, so a flood from a few
//!   addresses never leaves the others waiting.
//! - Time: the TLS handshake and a request's headers within [`Limits::header_timeout_ms`]
//!   (which also bounds an idle kept-alive connection), its body within
//!   [`Limits::body_timeout_ms`] (else 408).
//! - Size: headers within [`Limits::header_bytes_max`] (else 431), a body within
//!   [`Limits::body_bytes_max`] (else 413). A body is read whole before the route runs.
//! - Names: the `Host` (or an absolute-form target's authority) must be one the server answers
//!   to ([`Hosts`]), else 421 with what to configure; an HTTP/1.1 request without one, or with
//!   two, gets 400.
//! - Stop: when the shutdown future completes, accepting ends and requests in flight get
//!   [`DRAIN_TIMEOUT`] to finish.
//!
//! Routes see the client's address as `axum::extract::ConnectInfo<SocketAddr>`: the TCP peer.
//! Headers such as `X-Forwarded-For` are not read here.
//!
//! Never: reads a request without a place for its connection, waits on a client without a
//! deadline (an answer being sent is bounded by the client's address's share instead), or
//! holds more than the limits in memory per connection.
//!
//! Start at [`serve`], then `admit.rs` (who gets a connection) and `hosts.rs` (which names).

mod admit;
mod hosts;

pub use hosts::{HOST_BYTES_MAX, Hosts, HostsError};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, Version, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// How long requests in flight may finish once the server stops.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What one server allows its clients. Every field has its documented default in
/// `tandem.example.toml` (`[web]`) for the console; `/metrics` uses [`Limits::METRICS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub connections_max: usize,
    /// Connections open at once from one client address (an IPv6 client: its /64).
    pub connections_per_address_max: usize,
    /// Time for a TLS handshake, for a request's headers, and for the next request on a
    /// kept-alive connection.
    pub header_timeout_ms: u64,
    /// Time for a request's body, from the end of its headers.
    pub body_timeout_ms: u64,
    /// Bytes of a request's line and headers (at least 8 KiB).
    pub header_bytes_max: usize,
    /// Bytes of a request's body.
    pub body_bytes_max: usize,
}

impl Limits {
    /// The console's defaults.
    pub const CONSOLE: Limits = Limits {
        connections_max: 256,
        connections_per_address_max: 32,
        header_timeout_ms: 10_000,
        body_timeout_ms: 10_000,
        header_bytes_max: 64 << 10,
        body_bytes_max: 64 << 10,
    };
    /// `/metrics` and `/health`: a scraper or two, and GET only.
    pub const METRICS: Limits = Limits {
        connections_max: 64,
        connections_per_address_max: 16,
        header_timeout_ms: 10_000,
        body_timeout_ms: 10_000,
        header_bytes_max: 16 << 10,
        body_bytes_max: 4 << 10,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::CONSOLE
    }
}

/// The least `header_bytes_max` hyper takes.
const HEADER_BYTES_MIN: usize = 8192;

/// Serves `app` on `listener` (TLS with `tls`) within `limits`, answering to `hosts`, until
/// `shutdown` completes; then drains. `name` names the server in logs (`console`, `metrics`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    hosts: Hosts,
    name: &'static str,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let admission = Arc::new(admit::Admission::new(
        limits.connections_max,
        limits.connections_per_address_max,
        name,
    ));
    let shared = Arc::new(Shared {
        app,
        hosts,
        limits,
        default_port: if tls.is_some() { 443 } else { 80 },
    });
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors, a reset before accept: wait a little, go on.
                    tracing::warn!(error = %e, "{name}: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let ticket = match admission.admit(peer.ip()) {
            Ok(t) => t,
            Err(why) => {
                refuse(&tcp, why, tls.is_some());
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (shared, tls, watcher) = (shared.clone(), tls.clone(), graceful.watcher());
        tokio::spawn(async move {
            let mut ticket = ticket;
            tokio::select! {
                () = connection(tcp, peer, tls, shared, watcher) => {}
                _ = &mut ticket.cut => {
                    tracing::debug!(%peer, "{name}: connection cut to make room for another address");
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("{name}: requests still in flight after the drain time; cut");
    }
}

/// What every connection of one server shares.
struct Shared {
    app: Router,
    hosts: Hosts,
    limits: Limits,
    default_port: u16,
}

/// Closes a connection that got no place; over plain HTTP it first says why, if the socket
/// takes the answer at once (never waiting on the client).
fn refuse(tcp: &TcpStream, why: admit::Refused, tls: bool) {
    if tls {
        return;
    }
    let reason = match why {
        admit::Refused::AddressFull => "too many connections from your address",
        admit::Refused::ServerFull => "the server is full",
    };
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Retry-After: 5\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{reason}\n",
        reason.len() + 1
    );
    let _ = tcp.try_write(answer.as_bytes());
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let Ok(local) = tcp.local_addr() else { return };
    let header_timeout = Duration::from_millis(shared.limits.header_timeout_ms.max(1));
    match tls {
        Some(acceptor) => match tokio::time::timeout(header_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => http1(stream, peer, local, shared, watcher).await,
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
        },
        None => http1(tcp, peer, local, shared, watcher).await,
    }
}

async fn http1<S>(
    stream: S,
    peer: SocketAddr,
    local: SocketAddr,
    shared: Arc<Shared>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits;
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let shared = shared.clone();
        async move { Ok::<_, std::convert::Infallible>(request(req, peer, local, &shared).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_timeout_ms.max(1)))
        .max_buf_size(limits.header_bytes_max.max(HEADER_BYTES_MIN))
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// One request: its name checked, its body read whole within the limits, then the routes.
async fn request(
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
    local: SocketAddr,
    shared: &Shared,
) -> Response<Body> {
    use tower::ServiceExt;
    if let Err(refusal) = check_host(&req, local, shared) {
        return *refusal;
    }
    let (mut parts, incoming) = req.into_parts();
    parts.extensions.insert(axum::extract::ConnectInfo(peer));
    let body = match read_body(&parts, incoming, &shared.limits).await {
        Ok(b) => b,
        Err(refusal) => return *refusal,
    };
    let req = Request::from_parts(parts, body);
    match shared.app.clone().oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// The request's authority against the allowlist: 400 without one (HTTP/1.1) or with two
/// `Host` headers, 421 for a name the server does not answer to.
fn check_host(
    req: &Request<hyper::body::Incoming>,
    local: SocketAddr,
    shared: &Shared,
) -> Result<(), Box<Response<Body>>> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let (host, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return Err(plain(
            StatusCode::BAD_REQUEST,
            "400 Bad Request: two Host headers\n",
        ));
    }
    // An absolute-form target's authority is the one that counts (RFC 9112 §3.2.2).
    let authority = match req.uri().authority() {
        Some(a) => a.as_str(),
        None => match host {
            Some(h) => h.to_str().unwrap_or("\u{fffd}"),
            None if req.version() == Version::HTTP_10 => return Ok(()),
            None => {
                return Err(plain(
                    StatusCode::BAD_REQUEST,
                    "400 Bad Request: an HTTP/1.1 request needs a Host header\n",
                ));
            }
        },
    };
    if shared.hosts.allows(authority, local, shared.default_port) {
        return Ok(());
    }
    tracing::debug!(
        authority,
        "request for a name this server does not answer to"
    );
    Err(plain(
        StatusCode::MISDIRECTED_REQUEST,
        &shared.hosts.refusal(authority),
    ))
}

/// The request's body, read whole within the limits: 413 past `body_bytes_max` (at once when
/// `Content-Length` says so), 408 when it does not arrive within `body_timeout_ms`. Either
/// refusal closes the connection, whose remaining bytes are unknown.
async fn read_body(
    parts: &axum::http::request::Parts,
    incoming: hyper::body::Incoming,
    limits: &Limits,
) -> Result<Body, Box<Response<Body>>> {
    use hyper::body::Body as _;
    if incoming.is_end_stream() {
        return Ok(Body::empty());
    }
    let too_large = || {
        let msg = format!(
            "413 Content Too Large: a request's body may hold {} bytes at most\n",
            limits.body_bytes_max
        );
        closing(plain(StatusCode::PAYLOAD_TOO_LARGE, &msg))
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.body_bytes_max as u64) {
        return Err(too_large());
    }
    let wait = Duration::from_millis(limits.body_timeout_ms.max(1));
    let read = http_body_util::BodyExt::collect(http_body_util::Limited::new(
        incoming,
        limits.body_bytes_max,
    ));
    match tokio::time::timeout(wait, read).await {
        Ok(Ok(collected)) => Ok(Body::from(collected.to_bytes())),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => {
            // The client gone, or a malformed chunked body.
            let msg = format!("400 Bad Request: the request's body could not be read: {e}\n");
            Err(closing(plain(StatusCode::BAD_REQUEST, &msg)))
        }
        Err(_) => {
            let msg = format!(
                "408 Request Timeout: the request's body did not arrive within {} ms\n",
                limits.body_timeout_ms
            );
            Err(closing(plain(StatusCode::REQUEST_TIMEOUT, &msg)))
        }
    }
}

/// A short plain-text answer, boxed: it travels as an error, beside a small `Ok`.
fn plain(status: StatusCode, text: &str) -> Box<Response<Body>> {
    let mut resp = Box::new(Response::new(Body::from(text.to_owned())));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn closing(mut resp: Box<Response<Body>>) -> Box<Response<Body>> {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}
