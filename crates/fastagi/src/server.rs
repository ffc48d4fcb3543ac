//! The listener: accepts Asterisk's connections, applies the limits, reads the header, routes,
//! runs the handler and ends the session cleanly; on shutdown, stops accepting and drains.

use crate::ServerConfig;
use crate::conn::Conn;
use crate::error::AgiError;
use crate::metrics::Metrics;
use crate::router::Router;
use crate::session::{Request, Session, SessionParts};
use agi::{Header, HeaderLimits, HeaderReader};
use futures_util::FutureExt;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

/// Connections being turned away at once (each writes `failure` and waits briefly for Asterisk
/// to close). Past this, a refused connection is simply closed.
const MAX_REFUSING: usize = 256;

struct Shared {
    config: ServerConfig,
    router: Router,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
}

/// A server bound to its address, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// What a run did, for the log at exit.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunSummary {
    pub sessions: u64,
    /// Sessions cut because they outlasted `drain_timeout_ms`.
    pub cut_at_shutdown: usize,
}

impl Server {
    /// Binds the listening socket. Fails with the address in the message when it is taken.
    pub async fn bind(
        config: ServerConfig,
        mut router: Router,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Server> {
        config.validate().map_err(std::io::Error::other)?;
        let listener = TcpListener::bind(config.listen).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", config.listen))
        })?;
        for entry in router.entries_mut() {
            let label = crate::metrics::RouteLabel {
                route: entry.pattern.to_string(),
            };
            entry.metrics = Some(metrics.session_duration.get_or_create(&label).clone());
        }
        metrics.sessions_max.set(config.max_sessions as i64);
        let shared = Arc::new(Shared {
            config,
            router,
            metrics,
            next_id: AtomicU64::new(1),
        });
        Ok(Server { listener, shared })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` completes, then stops accepting and lets sessions in progress
    /// finish for up to `drain_timeout_ms`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> RunSummary {
        let Server { listener, shared } = self;
        let limit = Arc::new(Semaphore::new(shared.config.max_sessions));
        let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
        let mut sessions = JoinSet::new();
        let mut summary = RunSummary::default();
        tokio::pin!(shutdown);
        info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
              routes = ?shared.router.patterns(), "FastAGI server listening");
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of file descriptors and the like: back off instead of spinning.
                            warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    if !shared.config.allows(peer.ip()) {
                        warn!(%peer, "connection refused: address not in fastagi.allowed_networks");
                        shared.metrics.refused("network");
                        refuse(stream, &refusing, &shared);
                        continue;
                    }
                    let Ok(permit) = limit.clone().try_acquire_owned() else {
                        warn!(%peer, max_sessions = shared.config.max_sessions,
                              "connection refused: fastagi.max_sessions reached");
                        shared.metrics.refused("max_sessions");
                        refuse(stream, &refusing, &shared);
                        continue;
                    };
                    summary.sessions += 1;
                    let shared = shared.clone();
                    sessions.spawn(async move {
                        serve_connection(stream, peer, &shared).await;
                        drop(permit);
                    });
                }
            }
        }
        drop(listener);
        let in_flight = sessions.len();
        if in_flight > 0 {
            info!(
                sessions = in_flight,
                drain_timeout_ms = shared.config.drain_timeout_ms,
                "stopped accepting; waiting for sessions in progress"
            );
        }
        let drain = async { while sessions.join_next().await.is_some() {} };
        let drain_limit = Duration::from_millis(shared.config.drain_timeout_ms);
        if tokio::time::timeout(drain_limit, drain).await.is_err() {
            summary.cut_at_shutdown = sessions.len();
            warn!(
                sessions = sessions.len(),
                "drain timeout passed; cutting sessions in progress"
            );
            sessions.shutdown().await;
        }
        summary
    }
}

/// Turns a connection away so that Asterisk sees AGISTATUS=FAILURE at once.
fn refuse(stream: TcpStream, refusing: &Arc<Semaphore>, shared: &Arc<Shared>) {
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        return;
    };
    let linger = Duration::from_millis(shared.config.close_linger_ms.min(1_000));
    let conn = Conn::new(stream, shared.config.max_line_bytes);
    tokio::spawn(async move {
        conn.close(true, linger).await;
        drop(permit);
    });
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, shared: &Shared) {
    let config = &shared.config;
    let metrics = &shared.metrics;
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let linger = Duration::from_millis(config.close_linger_ms);
    metrics.sessions_started.inc();
    metrics.sessions_active.inc();
    let started = Instant::now();
    let mut conn = Conn::new(stream, config.max_line_bytes);
    let limits = HeaderLimits {
        max_line_bytes: config.max_line_bytes,
        max_variables: config.max_header_variables,
    };
    let header_limit = Duration::from_millis(config.header_timeout_ms);
    let header = match tokio::time::timeout(header_limit, read_header(&mut conn, limits)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) => {
            // A port probe (monitoring, a load balancer): connected and closed, said nothing.
            debug!(session = id, %peer, "connection closed before any header");
            metrics.failed("closed_before_header");
            finish(conn, false, linger, metrics).await;
            return;
        }
        Ok(Err(e)) => {
            warn!(session = id, %peer, error = %e, "bad session header; ending with failure");
            metrics.failed("header");
            finish(conn, true, linger, metrics).await;
            return;
        }
        Err(_) => {
            warn!(session = id, %peer, header_timeout_ms = config.header_timeout_ms,
                  "no complete header in time; dropping the connection");
            metrics.failed("header_timeout");
            finish(conn, true, linger, metrics).await;
            return;
        }
    };
    let route = header.route();
    let Some(found) = shared.router.find(&route.path) else {
        warn!(session = id, %peer, route = %route.path, request = header.request(),
              channel = header.channel(), "no such route; ending with failure");
        metrics.failed("unknown_route");
        finish(conn, true, linger, metrics).await;
        return;
    };
    let entry = found.entry.clone();
    let request = Request {
        route,
        captures: found.captures,
    };
    debug!(session = id, route = %entry.pattern, channel = header.channel(), "session start");
    let parts = SessionParts {
        id,
        peer,
        command_timeout: config.command_timeout(),
        hangup_probe: Duration::from_millis(config.hangup_probe_ms),
        max_line_bytes: config.max_line_bytes,
        metrics: shared.metrics.clone(),
    };
    let mut session = Session::new(conn, header, request, parts);
    let outcome = AssertUnwindSafe(entry.handler.call_boxed(&mut session))
        .catch_unwind()
        .await;
    let failure = match outcome {
        Ok(Ok(())) => false,
        Ok(Err(e)) if e.is_hangup() => {
            debug!(session = id, route = %entry.pattern, reason = %e, "session ended by hangup");
            false
        }
        Ok(Err(e)) => {
            warn!(session = id, route = %entry.pattern, channel = session.header().channel(),
                  error = %e, "handler failed; ending with failure");
            metrics.failed(e.kind());
            !matches!(e, AgiError::Disconnected | AgiError::Io(_))
        }
        Err(_) => {
            error!(session = id, route = %entry.pattern, channel = session.header().channel(),
                   "handler panicked; ending with failure");
            metrics.failed("panic");
            true
        }
    };
    if let Some(h) = &entry.metrics {
        h.observe(started.elapsed().as_secs_f64());
    }
    finish(session.into_conn(), failure, linger, metrics).await;
}

async fn finish(conn: Conn, failure: bool, linger: Duration, metrics: &Metrics) {
    conn.close(failure, linger).await;
    metrics.sessions_active.dec();
}

/// Reads the session header; `None` when the client closed without sending a byte.
async fn read_header(conn: &mut Conn, limits: HeaderLimits) -> Result<Option<Header>, AgiError> {
    let mut reader = HeaderReader::new(limits);
    loop {
        let Some(line) = conn.read_line().await? else {
            if reader.lines() == 0 {
                return Ok(None);
            }
            return Err(agi::HeaderError::Truncated.into());
        };
        if let Some(header) = reader.push_line(line)? {
            return Ok(Some(header));
        }
    }
}
