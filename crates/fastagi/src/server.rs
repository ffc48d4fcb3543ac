//! The listener: accepts Asterisk's connections, applies the limits, reads the header, routes,
//! runs the handler and ends the session cleanly; on shutdown, stops accepting and drains.

use crate::ServerConfig;
use crate::config::SessionLimit;
use crate::conn::Conn;
use crate::error::AgiError;
use crate::metrics::{Metrics, SessionOutcome};
use crate::router::Router;
use crate::session::{Request, Session, SessionParts};
use agi::{Header, HeaderLimits, HeaderReader};
use futures_util::FutureExt;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

/// Connections being turned away at once (each writes `failure` and waits briefly for Asterisk
/// to close). Past this, a refused connection is simply closed.
const MAX_REFUSING: usize = 256;

struct Shared {
    config: ServerConfig,
    session_limit: SessionLimit,
    router: Router,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
    /// The session limit, shared by every worker.
    limit: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
}

/// A server bound to its address, ready to run. It holds one listening socket per worker, all on
/// the same address (`SO_REUSEPORT`), so the kernel spreads connections over the workers.
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    shared: Arc<Shared>,
}

/// What a run did, for the log at exit.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunSummary {
    pub sessions: u64,
    /// Sessions cut because they outlasted `drain_timeout_ms`.
    pub cut_at_shutdown: usize,
}

impl RunSummary {
    fn add(&mut self, other: RunSummary) {
        self.sessions += other.sessions;
        self.cut_at_shutdown += other.cut_at_shutdown;
    }
}

/// Tells a running server to stop accepting and drain. Cloneable across threads and runtimes.
pub type Shutdown = watch::Receiver<bool>;

/// A shutdown signal and its trigger: `send(true)` stops the server.
pub fn shutdown_channel() -> (watch::Sender<bool>, Shutdown) {
    watch::channel(false)
}

impl Server {
    /// Binds the listening sockets (one per worker). Fails with the address in the message when
    /// it is taken, and with the field's name when a setting cannot work.
    pub fn bind(
        config: ServerConfig,
        mut router: Router,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Server> {
        config.validate().map_err(std::io::Error::other)?;
        let taken = |e| crate::runtime::listen_error(config.listen, e);
        let first = crate::runtime::reuseport_listener(config.listen).map_err(taken)?;
        // With port 0 the kernel picks a port; the other workers join that one.
        let addr = first.local_addr()?;
        let mut listeners = vec![first];
        for _ in 1..crate::runtime::worker_count(config.workers) {
            listeners.push(crate::runtime::reuseport_listener(addr).map_err(taken)?);
        }
        for listener in &listeners {
            keep_alive(listener, &config)?;
        }
        let patterns = router.patterns();
        if let Some(unknown) = config.routes.keys().find(|r| !patterns.contains(r)) {
            return Err(std::io::Error::other(format!(
                "fastagi.routes.{unknown:?}: no such route; the routes are {}",
                patterns.join(", ")
            )));
        }
        crate::runtime::refuse_shared_port(addr, &listeners).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", config.listen))
        })?;
        for entry in router.entries_mut() {
            entry.metrics = Some(metrics.for_route(entry.pattern.as_ref()));
            entry.timeouts = config.timeouts_for(entry.pattern.as_ref());
        }
        let session_limit = config.session_limit();
        metrics.sessions_max.set(session_limit.max_sessions as i64);
        let shared = Arc::new(Shared {
            limit: Arc::new(Semaphore::new(session_limit.max_sessions)),
            session_limit,
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
            config,
            router,
            metrics,
            next_id: AtomicU64::new(1),
        });
        Ok(Server { listeners, shared })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0]
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Workers (listening sockets) this server runs.
    pub fn workers(&self) -> usize {
        self.listeners.len()
    }

    /// Serves on the current tokio runtime until `shutdown` says so, then stops accepting and
    /// lets sessions in progress finish for up to `drain_timeout_ms`.
    pub async fn run(self, shutdown: Shutdown) -> RunSummary {
        self.log_start();
        let mut loops = JoinSet::new();
        for listener in self.listeners {
            let shared = self.shared.clone();
            let shutdown = shutdown.clone();
            loops.spawn(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => accept_loop(l, shared, shutdown).await,
                    Err(e) => {
                        error!(error = %e, "cannot register the listening socket");
                        RunSummary::default()
                    }
                }
            });
        }
        let mut summary = RunSummary::default();
        while let Some(r) = loops.join_next().await {
            summary.add(r.expect("accept loop panicked"));
        }
        summary
    }

    /// Serves with one thread per worker, each with its own single-threaded runtime, until
    /// `shutdown` says so; blocks until every worker has drained. This is how `tandem serve`
    /// runs: a session lives on one thread, so nothing is stolen or woken across threads.
    pub fn run_on_threads(self, shutdown: Shutdown) -> std::io::Result<RunSummary> {
        self.log_start();
        let mut threads = Vec::with_capacity(self.listeners.len());
        for (i, listener) in self.listeners.into_iter().enumerate() {
            let shared = self.shared.clone();
            let shutdown = shutdown.clone();
            let thread = std::thread::Builder::new()
                .name(format!("fastagi-{i}"))
                .spawn(move || -> std::io::Result<RunSummary> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    rt.block_on(async move {
                        let listener = TcpListener::from_std(listener)?;
                        Ok(accept_loop(listener, shared, shutdown).await)
                    })
                })?;
            threads.push(thread);
        }
        let mut summary = RunSummary::default();
        for t in threads {
            summary.add(
                t.join()
                    .map_err(|_| std::io::Error::other("a FastAGI worker panicked"))??,
            );
        }
        Ok(summary)
    }

    fn log_start(&self) {
        let limit = self.shared.session_limit;
        info!(listen = %self.local_addr(), workers = self.listeners.len(),
              max_sessions = limit.max_sessions,
              max_sessions_from = %limit.fd_limit.map_or("fastagi.max_sessions".to_string(),
                  |n| format!("file-descriptor limit {n}")),
              routes = ?self.shared.router.patterns(), "FastAGI server listening");
        if let Some(ms) = self.shared.config.obsolete_hangup_probe_ms {
            warn!(
                hangup_probe_ms = ms,
                "fastagi.hangup_probe_ms is no longer used: after a -1, \
                  Tandem asks Asterisk (CHANNEL STATUS) instead of waiting; remove the line \
                  (hangup_probe_timeout_ms caps the wait for that reply)"
            );
        }
    }
}

/// Completes when the shutdown signal says stop, or when its sender is gone.
async fn stopped(shutdown: &mut Shutdown) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// One worker: accepts until shutdown, then drains its own sessions.
async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: Shutdown,
) -> RunSummary {
    let mut sessions = JoinSet::new();
    let mut summary = RunSummary::default();
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut shutdown) => break,
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
                    refuse(stream, &shared);
                    continue;
                }
                let Ok(permit) = shared.limit.clone().try_acquire_owned() else {
                    warn!(%peer, max_sessions = shared.session_limit.max_sessions,
                          "connection refused: fastagi.max_sessions reached");
                    shared.metrics.refused("max_sessions");
                    refuse(stream, &shared);
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
    if !sessions.is_empty() {
        info!(
            sessions = sessions.len(),
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

/// Turns a connection away so that Asterisk sees AGISTATUS=FAILURE at once.
fn refuse(stream: TcpStream, shared: &Arc<Shared>) {
    let Ok(permit) = shared.refusing.clone().try_acquire_owned() else {
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
    let read = read_header(&mut conn, limits, config.max_header_bytes);
    let header = match tokio::time::timeout(header_limit, read).await {
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
        let missing = header.missing_route_lines().join(", ");
        warn!(session = id, %peer, route = %route.path, request = header.request(),
              channel = header.channel(), missing_header_lines = %missing,
              "no such route; ending with failure");
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
        timeouts: entry.timeouts,
        hangup_probe_timeout: Duration::from_millis(config.hangup_probe_timeout_ms),
        max_line_bytes: config.max_line_bytes,
        metrics: shared.metrics.clone(),
    };
    let mut session = Session::new(conn, header, request, parts);
    let outcome = AssertUnwindSafe(entry.handler.call_boxed(&mut session))
        .catch_unwind()
        .await;
    let (ended, failure) = match outcome {
        Ok(Ok(())) if session.hung_up() => (SessionOutcome::Hangup, false),
        Ok(Ok(())) => (SessionOutcome::Success, false),
        Ok(Err(e)) if e.is_hangup() => {
            // The commonest end of a call in an IVR: not a failure, and not worth a warning.
            debug!(session = id, route = %entry.pattern, channel = session.header().channel(),
                   during = session.hangup_during().unwrap_or("-"), reason = %e,
                   "caller hung up");
            (SessionOutcome::Hangup, false)
        }
        Ok(Err(e)) => {
            warn!(session = id, route = %entry.pattern, channel = session.header().channel(),
                  error = %e, "handler failed; ending with failure");
            metrics.failed(e.kind());
            (
                SessionOutcome::Failure,
                !matches!(e, AgiError::Disconnected | AgiError::Io(_)),
            )
        }
        Err(_) => {
            error!(session = id, route = %entry.pattern, channel = session.header().channel(),
                   "handler panicked; ending with failure");
            metrics.failed("panic");
            (SessionOutcome::Failure, true)
        }
    };
    if let Some(m) = &entry.metrics {
        m.duration.observe(started.elapsed().as_secs_f64());
        m.ended(ended);
    }
    finish(session.into_conn(), failure, linger, metrics).await;
}

/// Sets TCP keepalive and the matching `TCP_USER_TIMEOUT` on a listening socket. Linux copies
/// both into every connection accepted from it, so no accepted socket needs a call of its own.
fn keep_alive(listener: &std::net::TcpListener, config: &ServerConfig) -> std::io::Result<()> {
    let (Some(keepalive), Some(give_up)) = (config.keepalive(), config.keepalive_give_up()) else {
        return Ok(());
    };
    let socket = socket2::SockRef::from(listener);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(give_up))
}

async fn finish(conn: Conn, failure: bool, linger: Duration, metrics: &Metrics) {
    conn.close(failure, linger).await;
    metrics.sessions_active.dec();
}

/// Reads the session header, at most `max_bytes` of it; `None` when the client closed without
/// sending a byte.
async fn read_header(
    conn: &mut Conn,
    limits: HeaderLimits,
    max_bytes: usize,
) -> Result<Option<Header>, AgiError> {
    let mut reader = HeaderReader::new(limits);
    let mut bytes = 0;
    loop {
        let Some(line) = conn.read_line().await? else {
            if reader.lines() == 0 {
                return Ok(None);
            }
            return Err(agi::HeaderError::Truncated.into());
        };
        bytes += line.len();
        if bytes > max_bytes {
            return Err(AgiError::HeaderTooLong { max: max_bytes });
        }
        if let Some(header) = reader.push_line(line)? {
            return Ok(Some(header));
        }
    }
}
