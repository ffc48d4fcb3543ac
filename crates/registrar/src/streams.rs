//! SIP over TCP and TLS: who may hold a connection, and for how long.
//!
//! A connection costs a descriptor and a few KiB, and anyone who can reach the port can open
//! one, so connections are admitted against limits, checked when they are accepted (a refused
//! one is reset at once, never left waiting in the kernel's queue, which would stall every
//! connection behind it):
//!
//! - at most `connections_per_address_max` from one address (an IPv6 /64 counts as one, since
//!   one host is given a whole /64): one source cannot take the table;
//! - at most `connections_max` in all. When that is reached, the oldest connection on which no
//!   REGISTER has been answered 200 is closed to make room, so that sources flooding from many
//!   addresses evict each other, not the phones that registered; only when every connection is
//!   registered is the new one refused;
//! - a connection on which no REGISTER was answered 200 is closed after
//!   `unregistered_idle_timeout_ms` without a complete message; a registered one after
//!   `idle_timeout_ms` (CRLF keep-alives count for it). Bytes that never make a message (a
//!   request dribbled out byte by byte) do not count as activity.
//!
//! Every refusal and close is counted in `tandem_registrar_connections_closed_total{reason}`.

use crate::Error;
use crate::metrics::{Metrics, ReasonLabel};
use crate::server::{Job, Registrar, ReplyTo, Transport};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

/// Largest message read on a stream (header section plus body).
pub const STREAM_MESSAGE_BYTES_MAX: usize = sip::MAX_HEADER_BYTES + 16 * 1024;
/// Responses queued per connection before new ones are dropped.
const STREAM_REPLIES_MAX: usize = 256;
/// Bytes asked of a read: small, since most connections sit idle with this much reserved.
const READ_CHUNK_BYTES: usize = 4096;
/// A TLS handshake must be done within this (and within the unregistered idle timeout).
const TLS_HANDSHAKE_MS: u64 = 10_000;

/// Limits of the stream transports (TCP and TLS together); see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Connections open at once.
    pub connections_max: usize,
    /// Connections open at once from one address (an IPv6 /64 is one address).
    pub connections_per_address_max: usize,
    /// How long a registered connection stays open without a message.
    pub idle_timeout_ms: u64,
    /// How long a connection on which no REGISTER was answered 200 stays open without a
    /// complete message.
    pub unregistered_idle_timeout_ms: u64,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            connections_max: 4096,
            connections_per_address_max: 256,
            idle_timeout_ms: 600_000,
            unregistered_idle_timeout_ms: 30_000,
        }
    }
}

impl StreamLimits {
    /// Whether the limits can work; an error names the key.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |s: &str| Err(Error::Config(s.into()));
        if self.connections_max == 0 || self.connections_per_address_max == 0 {
            return bad("connections_max and connections_per_address_max must be at least 1");
        }
        if self.idle_timeout_ms < 1000 || self.unregistered_idle_timeout_ms < 1000 {
            return bad("idle_timeout_ms and unregistered_idle_timeout_ms must be at least 1000");
        }
        Ok(())
    }

    /// These limits within a process allowed `fds` descriptors: at most a quarter of them for
    /// SIP connections, leaving the rest to FastAGI sessions, the store and the capture.
    /// Returns the limits and whether `connections_max` was lowered.
    pub fn within_descriptors(self, fds: u64) -> (StreamLimits, bool) {
        let most = usize::try_from(fds / 4).unwrap_or(usize::MAX).max(1);
        if self.connections_max <= most {
            return (self, false);
        }
        let limits = StreamLimits {
            connections_max: most,
            connections_per_address_max: self.connections_per_address_max.min(most),
            ..self
        };
        (limits, true)
    }
}

/// Which connections count together against the per-address limit: an IPv4 address (an
/// IPv4-mapped IPv6 one too), or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(u32),
    V6Prefix(u64),
}

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(a) => Source::V4(a.into()),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.into()),
                None => Source::V6Prefix((u128::from(a) >> 64) as u64),
            },
        }
    }
}

/// One admitted connection, as the table and the registrar see it.
pub struct Flow {
    id: u64,
    source: Source,
    registered: AtomicBool,
    /// Set (under the table's lock) when the table closed this connection to make room.
    evicted: AtomicBool,
    close: Notify,
    table: Arc<Connections>,
}

impl Flow {
    pub fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// A REGISTER on this connection was answered 200: it is a phone's now, kept for the long
    /// idle timeout and never evicted.
    pub fn mark_registered(&self) {
        if self.registered.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut t = self.table.state.lock();
        t.unregistered.remove(&self.id);
        self.table.publish(&t);
    }
}

#[derive(Default)]
struct Table {
    open: usize,
    per_source: HashMap<Source, usize>,
    /// Connections not (yet) registered, oldest first: the ones evicted at the total limit.
    unregistered: BTreeMap<u64, Arc<Flow>>,
    next_id: u64,
}

impl Table {
    fn release(&mut self, flow: &Flow) {
        self.open -= 1;
        if let Some(n) = self.per_source.get_mut(&flow.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&flow.source);
            }
        }
        self.unregistered.remove(&flow.id);
    }
}

/// Why a connection was closed by the server (the `reason` label).
const ADDRESS_LIMIT: &str = "address_limit";
const TOTAL_LIMIT: &str = "total_limit";
const EVICTED: &str = "evicted";
const UNREGISTERED_IDLE: &str = "unregistered_idle";
const IDLE: &str = "idle";
const TLS_HANDSHAKE: &str = "tls_handshake";
const UNFRAMEABLE: &str = "unframeable";

/// The table of open connections and its limits, shared by the TCP and TLS listeners.
pub struct Connections {
    state: Mutex<Table>,
    limits: StreamLimits,
    metrics: Metrics,
}

/// A connection's place in the table, given back when dropped.
struct Slot(Arc<Flow>);

impl Drop for Slot {
    fn drop(&mut self) {
        let table = &self.0.table;
        let mut t = table.state.lock();
        if !self.0.evicted.load(Ordering::Acquire) {
            t.release(&self.0);
        }
        table.publish(&t);
    }
}

impl Connections {
    pub fn new(limits: StreamLimits, metrics: Metrics) -> Arc<Connections> {
        Arc::new(Connections {
            state: Mutex::new(Table::default()),
            limits,
            metrics,
        })
    }

    fn closed(&self, reason: &'static str) {
        self.metrics
            .connections_closed
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    fn publish(&self, t: &Table) {
        self.metrics.connections.set(t.open as i64);
        self.metrics
            .connections_unregistered
            .set(t.unregistered.len() as i64);
    }

    /// Admits a connection from `ip`, evicting the oldest unregistered one when the table is
    /// full; `Err` names the limit that refused it.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, &'static str> {
        let source = Source::of(ip);
        let mut t = self.state.lock();
        if t.per_source.get(&source).copied().unwrap_or(0)
            >= self.limits.connections_per_address_max
        {
            return Err(ADDRESS_LIMIT);
        }
        while t.open >= self.limits.connections_max {
            let Some((_, oldest)) = t.unregistered.pop_first() else {
                return Err(TOTAL_LIMIT);
            };
            if oldest.is_registered() {
                continue; // registered since: it stays
            }
            t.release(&oldest);
            oldest.evicted.store(true, Ordering::Release);
            oldest.close.notify_one();
            self.closed(EVICTED);
        }
        t.next_id += 1;
        let flow = Arc::new(Flow {
            id: t.next_id,
            source,
            registered: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
            table: self.clone(),
        });
        t.open += 1;
        *t.per_source.entry(source).or_default() += 1;
        t.unregistered.insert(flow.id, flow.clone());
        self.publish(&t);
        Ok(Slot(flow))
    }
}

/// Accepts connections on `listener` (TLS when `tls` is given) until the task is dropped.
pub(crate) async fn accept_loop(
    registrar: Arc<Registrar>,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    table: Arc<Connections>,
) {
    let mut warned: Option<Instant> = None;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(v) => v,
            Err(e) => {
                // Out of descriptors, mostly: the connection waits in the kernel's queue.
                if warned.is_none_or(|w| w.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "SIP TCP accept failed");
                    warned = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match table.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(reason) => {
                // A reset, not a close: nothing is held for the peer, not even TIME_WAIT.
                table.closed(reason);
                let _ = stream.set_zero_linger();
                drop(stream);
                tracing::debug!(%peer, reason, "SIP connection refused");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let registrar = registrar.clone();
        let tls = tls.clone();
        let table = table.clone();
        tokio::spawn(async move {
            let flow = slot.0.clone();
            let limits = table.limits;
            let reason = match tls {
                None => connection(registrar, stream, peer, Transport::Tcp, &flow, limits).await,
                Some(acceptor) => {
                    let ms = TLS_HANDSHAKE_MS.min(limits.unregistered_idle_timeout_ms);
                    let handshake = acceptor.accept(stream);
                    tokio::select! {
                        r = tokio::time::timeout(Duration::from_millis(ms), handshake) => match r {
                            Ok(Ok(s)) => {
                                connection(registrar, s, peer, Transport::Tls, &flow, limits).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "SIP TLS handshake failed");
                                None
                            }
                            Err(_) => Some(TLS_HANDSHAKE),
                        },
                        _ = flow.close.notified() => None,
                    }
                }
            };
            if let Some(reason) = reason {
                table.closed(reason);
            }
            drop(slot);
        });
    }
}

/// One stream connection: reads messages, dispatches them, writes responses in a second task.
/// Returns why the server closed it, when it did (an eviction is counted where it happens).
async fn connection<S>(
    registrar: Arc<Registrar>,
    stream: S,
    peer: SocketAddr,
    transport: Transport,
    flow: &Arc<Flow>,
    limits: StreamLimits,
) -> Option<&'static str>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(STREAM_REPLIES_MAX);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = rx.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut buf: Vec<u8> = Vec::new();
    let mut last_message = tokio::time::Instant::now();
    let reason = 'read: loop {
        // Every complete message in the buffer first.
        loop {
            match sip::message_len(&buf) {
                Ok(Some(len)) if len > STREAM_MESSAGE_BYTES_MAX => {
                    tracing::debug!(%peer, bytes = len, "SIP message over the stream limit; closing");
                    break 'read Some(UNFRAMEABLE);
                }
                Ok(Some(len)) => {
                    let msg: Vec<u8> = buf.drain(..len).collect();
                    let start = msg
                        .iter()
                        .position(|&b| b != b'\r' && b != b'\n')
                        .unwrap_or(msg.len());
                    if start == msg.len() {
                        // RFC 5626 keep-alive: a double CRLF ping gets a single CRLF pong. It
                        // keeps a registered connection open, not an unregistered one.
                        if msg.len() >= 4 {
                            let _ = tx.try_send(b"\r\n".to_vec());
                        }
                        if flow.is_registered() {
                            last_message = tokio::time::Instant::now();
                        }
                        continue;
                    }
                    last_message = tokio::time::Instant::now();
                    let reply = ReplyTo::Stream(tx.clone(), flow.clone());
                    registrar.dispatch(Job::new(msg, peer, transport, reply));
                }
                Ok(None) if buf.len() > STREAM_MESSAGE_BYTES_MAX => {
                    tracing::debug!(%peer, "SIP message over the stream limit; closing");
                    break 'read Some(UNFRAMEABLE);
                }
                Ok(None) => break,
                Err(e) => {
                    // Framing is lost: nothing after this can be read reliably.
                    tracing::debug!(%peer, error = %e, "unframeable SIP on a stream; closing");
                    break 'read Some(UNFRAMEABLE);
                }
            }
        }
        if buf.is_empty() && buf.capacity() > 4 * READ_CHUNK_BYTES {
            buf = Vec::new(); // an idle connection keeps little
        }
        buf.reserve(READ_CHUNK_BYTES);
        let (timeout_ms, reason) = if flow.is_registered() {
            (limits.idle_timeout_ms, IDLE)
        } else {
            (limits.unregistered_idle_timeout_ms, UNREGISTERED_IDLE)
        };
        let deadline = last_message + Duration::from_millis(timeout_ms);
        tokio::select! {
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => break None,
                Ok(_) => {}
            },
            _ = tokio::time::sleep_until(deadline) => {
                // A REGISTER answered since the wait began moves the deadline: look again.
                if !flow.is_registered() || reason == IDLE {
                    break Some(reason);
                }
            }
            _ = flow.close.notified() => break None,
        }
    };
    drop(tx);
    // Responses still being computed hold their own sender; the writer ends after the last.
    // An evicted or timed-out connection does not wait for a peer that does not read.
    if reason.is_some() || flow.evicted.load(Ordering::Acquire) {
        writer.abort();
    } else {
        let _ = writer.await;
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(total: usize, per_address: usize) -> Arc<Connections> {
        let limits = StreamLimits {
            connections_max: total,
            connections_per_address_max: per_address,
            ..StreamLimits::default()
        };
        Connections::new(limits, Metrics::new())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_is_held_to_its_share() {
        let t = table(10, 2);
        let a = [t.admit(ip("192.0.2.1")), t.admit(ip("192.0.2.1"))];
        assert!(a.iter().all(Result::is_ok));
        assert_eq!(t.admit(ip("192.0.2.1")).err(), Some(ADDRESS_LIMIT));
        // An IPv6 /64 is one address; an IPv4-mapped address is its IPv4 one.
        let b = [t.admit(ip("2001:db8::1")), t.admit(ip("2001:db8::2"))];
        assert!(b.iter().all(Result::is_ok));
        assert_eq!(t.admit(ip("2001:db8::ffff:1")).err(), Some(ADDRESS_LIMIT));
        assert!(t.admit(ip("2001:db8:0:1::1")).is_ok());
        assert_eq!(t.admit(ip("::ffff:192.0.2.1")).err(), Some(ADDRESS_LIMIT));
        drop(a);
        assert!(t.admit(ip("192.0.2.1")).is_ok(), "released with its slots");
    }

    #[test]
    fn at_the_total_the_oldest_unregistered_goes_and_registered_ones_stay() {
        let t = table(3, 3);
        let first = t.admit(ip("192.0.2.1")).unwrap();
        let second = t.admit(ip("192.0.2.2")).unwrap();
        let third = t.admit(ip("192.0.2.3")).unwrap();
        first.0.mark_registered();
        let fourth = t.admit(ip("192.0.2.4")).unwrap();
        // The first registered, so the second (the oldest unregistered) made room.
        assert!(second.0.evicted.load(Ordering::Acquire));
        assert!(!first.0.evicted.load(Ordering::Acquire));
        drop(second); // its task ends: nothing is released twice
        assert_eq!(t.state.lock().open, 3);
        third.0.mark_registered();
        fourth.0.mark_registered();
        assert_eq!(t.admit(ip("192.0.2.5")).err(), Some(TOTAL_LIMIT));
        drop(first);
        assert!(t.admit(ip("192.0.2.5")).is_ok());
    }

    #[test]
    fn limits_fit_the_descriptors() {
        let l = StreamLimits::default();
        assert_eq!(l.within_descriptors(1_048_576), (l, false));
        let (fit, lowered) = l.within_descriptors(1024);
        assert!(lowered);
        assert_eq!(
            (fit.connections_max, fit.connections_per_address_max),
            (256, 256)
        );
        assert!(
            StreamLimits {
                connections_max: 0,
                ..l
            }
            .check()
            .is_err()
        );
    }
}
