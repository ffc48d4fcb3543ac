//! `--hep-send`: a thin sensor forwards what it captures as HEP v3 to a collector (another
//! Tandem's `--hep-listen`, heplify-server, Homer), over UDP or TCP, instead of (or as well as)
//! analysing it.
//!
//! ```text
//! source (files | interface) ──frames──▶ HepForwarder (sensor thread): decode to UDP, SIP over
//!   TCP reassembled into messages, each one HEP packet encoded into ──▶ SendQueue (bounded,
//!   bytes) ──▶ hep-send thread ──▶ UDP datagrams | TCP stream (reconnects with backoff)
//! ```
//!
//! Every UDP datagram the sensor sees (SIP, RTP, RTCP, T.38, and anything else on UDP) becomes
//! one HEP packet with the capture's timestamp, `capture_id` and the authentication key; a SIP
//! message carried over TCP becomes one packet with IP protocol 6, as Kamailio sends it.
//! Fragments are reassembled first. A payload over [`hep::DEFAULT_MAX_PAYLOAD_BYTES`] (what a
//! collector with the default limit accepts) is counted and skipped.
//!
//! Files are sent as fast as the collector takes them (the timestamps travel in the packets, so
//! the analysis at the other end does not depend on when they arrive): the reader waits for room
//! in the queue while the link is up, which TCP's flow control turns into the collector's pace.
//! `max_pps` caps the rate, for a UDP collector that would otherwise drop. A live capture never
//! waits: when the queue is full its packets are dropped and counted. While a TCP collector is
//! unreachable the queue holds what it can (32 MiB by default) and the rest is dropped and
//! counted; a partly written chunk is sent again, whole packets only, on the next connection.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use monitor::decode::{Decoder, Transport};
use monitor::sctp::SipSctp;
use monitor::tcp::SipTcp;

use crate::SensorError;

/// Default of [`HepSendConfig::queue_bytes_max`]: encoded packets waiting to be sent.
pub const HEP_SEND_QUEUE_BYTES_MAX: usize = 32 << 20;
/// Default of [`HepSendConfig::capture_id`] (Kamailio's `hep_capture_id` default too).
pub const HEP_SEND_CAPTURE_ID: u32 = 1;
/// Packets are queued in chunks of about this many bytes (one TCP write each).
const CHUNK_BYTES: usize = 64 << 10;
/// The first TCP connection is waited for this long when the sensor starts.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Reconnection backoff: from the first delay, doubling, up to the last.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(10);
/// At the end of a capture, how long what is queued may wait for an unreachable collector.
pub const HEP_SEND_DRAIN_TIMEOUT_S: u64 = 10;
/// A file reader waiting for room looks at the link this often.
const ROOM_WAIT: Duration = Duration::from_millis(100);

/// UDP (the default) or TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HepTransport {
    Udp,
    Tcp,
}

impl HepTransport {
    pub fn as_str(self) -> &'static str {
        match self {
            HepTransport::Udp => "udp",
            HepTransport::Tcp => "tcp",
        }
    }
}

/// Where and how to forward.
#[derive(Debug, Clone, PartialEq)]
pub struct HepSendConfig {
    pub transport: HepTransport,
    /// `HOST:PORT`, resolved when the sensor starts and again at each TCP reconnection.
    pub target: String,
    /// Capture agent id (chunk 12) of every packet.
    pub capture_id: u32,
    /// Also analyse locally (calls, CDRs, archive) as without `--hep-send`.
    pub analyse: bool,
    /// At most this many packets per second; 0: as fast as the collector takes them.
    pub max_pps: u64,
    pub queue_bytes_max: usize,
}

impl HepSendConfig {
    /// `[udp://|tcp://]HOST:PORT` (UDP without a prefix) with the defaults.
    pub fn parse(target: &str) -> Result<HepSendConfig, String> {
        let (transport, rest) = if let Some(r) = target.strip_prefix("udp://") {
            (HepTransport::Udp, r)
        } else if let Some(r) = target.strip_prefix("tcp://") {
            (HepTransport::Tcp, r)
        } else if target.contains("://") {
            return Err(format!(
                "{target:?}: only udp:// and tcp:// are supported (udp without a prefix)"
            ));
        } else {
            (HepTransport::Udp, target)
        };
        match rest.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {}
            _ => {
                return Err(format!(
                    "{target:?} is not [udp://|tcp://]HOST:PORT (for example tcp://collector.example:9060)"
                ));
            }
        }
        Ok(HepSendConfig {
            transport,
            target: rest.to_string(),
            capture_id: HEP_SEND_CAPTURE_ID,
            analyse: false,
            max_pps: 0,
            queue_bytes_max: HEP_SEND_QUEUE_BYTES_MAX,
        })
    }

    /// `tcp://HOST:PORT` or `udp://HOST:PORT`.
    pub fn url(&self) -> String {
        format!("{}://{}", self.transport.as_str(), self.target)
    }
}

/// The forwarder's counters.
#[derive(Debug, Default)]
pub struct HepSendStats {
    pub sent_packets: AtomicU64,
    pub sent_bytes: AtomicU64,
    /// Dropped because the queue was full while the collector was connected (a live source
    /// faster than the collector).
    pub dropped_queue_full: AtomicU64,
    /// Dropped because the queue was full while the TCP collector was unreachable, or left in
    /// it when the capture ended without the collector coming back.
    pub dropped_disconnected: AtomicU64,
    /// Payloads over the HEP payload limit, skipped.
    pub too_large: AtomicU64,
    /// UDP datagrams the system refused to send (a collector that is not listening).
    pub send_errors: AtomicU64,
    pub connects: AtomicU64,
    pub connected: AtomicBool,
    pub queue_bytes: AtomicU64,
    pub queue_bytes_max: AtomicU64,
}

/// A copy of [`HepSendStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HepSendSnapshot {
    pub sent_packets: u64,
    pub sent_bytes: u64,
    pub dropped_queue_full: u64,
    pub dropped_disconnected: u64,
    pub too_large: u64,
    pub send_errors: u64,
    pub connects: u64,
    pub connected: bool,
    pub queue_bytes: u64,
    pub queue_bytes_max: u64,
}

impl HepSendSnapshot {
    /// Packets that did not reach the socket: queue full, collector away, send errors.
    pub fn lost(&self) -> u64 {
        self.dropped_queue_full + self.dropped_disconnected + self.send_errors
    }
}

impl HepSendStats {
    pub fn snapshot(&self) -> HepSendSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HepSendSnapshot {
            sent_packets: r(&self.sent_packets),
            sent_bytes: r(&self.sent_bytes),
            dropped_queue_full: r(&self.dropped_queue_full),
            dropped_disconnected: r(&self.dropped_disconnected),
            too_large: r(&self.too_large),
            send_errors: r(&self.send_errors),
            connects: r(&self.connects),
            connected: self.connected.load(Ordering::Relaxed),
            queue_bytes: r(&self.queue_bytes),
            queue_bytes_max: r(&self.queue_bytes_max),
        }
    }
}

/// What the forwarder did, for the end of a capture.
#[derive(Debug, Clone)]
pub struct HepSendReport {
    pub url: String,
    pub stats: HepSendSnapshot,
}

impl std::fmt::Display for HepSendReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.stats;
        write!(
            f,
            "HEP sent to {}: {} packets ({} bytes); dropped: {} queue full, {} while the collector was unreachable, {} send errors; {} over the payload limit skipped",
            self.url,
            s.sent_packets,
            s.sent_bytes,
            s.dropped_queue_full,
            s.dropped_disconnected,
            s.send_errors,
            s.too_large
        )
    }
}

impl crate::status::StatusSource for Arc<HepSendStats> {
    fn sample(&self, s: &mut crate::status::Sample) {
        s.hep_send = Some(self.snapshot());
    }
}

/// The status line's part for HEP out.
pub(crate) fn status_part(
    prev: Option<&HepSendSnapshot>,
    now: &HepSendSnapshot,
    secs: f64,
) -> String {
    let before = prev.copied().unwrap_or_default();
    let rate = now.sent_packets.saturating_sub(before.sent_packets) as f64 / secs.max(1e-9);
    format!(
        "HEP out {rate:.0}/s{}, queue {}%, dropped {} (+{})",
        if now.connected { "" } else { " (disconnected)" },
        now.queue_bytes * 100 / now.queue_bytes_max.max(1),
        now.lost(),
        now.lost().saturating_sub(before.lost()),
    )
}

/// The `tandem_capture_hep_send_*` metrics.
pub(crate) fn encode_metrics(
    s: &HepSendSnapshot,
    e: &mut prometheus_client::encoding::DescriptorEncoder,
) -> std::fmt::Result {
    use crate::status::metrics::{counter, counter_family, gauge};
    counter(e, "hep_sent", "Packets forwarded as HEP", s.sent_packets)?;
    counter(e, "hep_sent_bytes", "Bytes of HEP forwarded", s.sent_bytes)?;
    counter_family(
        e,
        "hep_send_dropped",
        "Packets not forwarded: queue full while connected, collector unreachable, send refused, payload over the limit",
        "reason",
        &[
            ("queue_full", s.dropped_queue_full),
            ("disconnected", s.dropped_disconnected),
            ("send_error", s.send_errors),
            ("too_large", s.too_large),
        ],
    )?;
    gauge(
        e,
        "hep_send_connected",
        "1 while the HEP collector is connected (always 1 over UDP)",
        u64::from(s.connected),
    )?;
    counter(
        e,
        "hep_send_connects",
        "TCP connections made to the HEP collector",
        s.connects,
    )?;
    gauge(
        e,
        "hep_send_queue_bytes",
        "Bytes of HEP waiting to be sent",
        s.queue_bytes,
    )?;
    gauge(
        e,
        "hep_send_queue_bytes_max",
        "Bound of the HEP send queue",
        s.queue_bytes_max,
    )
}

/// The forwarder a sensor's configuration asks for, started; `None` without `--hep-send`. Its
/// checks come before anything is created: a forwarder of captured packets only (not of HEP
/// received), an archive only when analysing too, a readable key, a collector that resolves.
pub(crate) fn start(config: &crate::SensorConfig) -> Result<Option<HepForwarder>, SensorError> {
    let Some(send) = &config.hep.send else {
        return Ok(None);
    };
    if matches!(config.source, crate::Source::Hep { .. }) {
        return Err(SensorError::Config(
            "--hep-send forwards what --read or --interface captures, not HEP received".into(),
        ));
    }
    if !send.analyse && config.archive.is_some() {
        return Err(SensorError::Config(
            "--archive keeps the packets of analysed calls: add --hep-send-analyse to analyse here as well as forward".into(),
        ));
    }
    let key = config
        .hep
        .auth_key
        .as_ref()
        .map(crate::hep::AuthKey::load)
        .transpose()?;
    HepForwarder::start(send, key, !config.source.is_live()).map(Some)
}

/// Encoded packets back to back (each says its own length).
#[derive(Default)]
struct Chunk {
    bytes: Vec<u8>,
    packets: u64,
}

struct QueueState {
    chunks: VecDeque<Chunk>,
    free: Vec<Chunk>,
    bytes: usize,
    /// The sender thread sleeps until a packet comes.
    sender_waiting: bool,
    closed: bool,
}

/// The bounded queue between the forwarder and the `hep-send` thread.
struct SendQueue {
    state: Mutex<QueueState>,
    /// A packet came, or the queue closed.
    ready: Condvar,
    /// Room was made.
    room: Condvar,
    bytes_max: usize,
}

impl SendQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// On the sensor's thread: turns frames into HEP packets and queues them.
pub(crate) struct HepForwarder {
    decoder: Decoder,
    tcp: SipTcp,
    sctp: SipSctp,
    capture_id: u32,
    auth_key: Option<Vec<u8>>,
    queue: Arc<SendQueue>,
    stats: Arc<HepSendStats>,
    /// A file source waits for room while the link is up; a live one never waits.
    wait_for_room: bool,
    analyse: bool,
    url: String,
    thread: Option<JoinHandle<()>>,
}

impl HepForwarder {
    /// Resolves the collector, opens the socket (for TCP: tries to connect for a few seconds;
    /// an unreachable collector is not an error, it is retried) and starts the `hep-send`
    /// thread.
    pub fn start(
        config: &HepSendConfig,
        auth_key: Option<Vec<u8>>,
        wait_for_room: bool,
    ) -> Result<HepForwarder, SensorError> {
        let url = config.url();
        let addrs = resolve(&config.target).map_err(|e| {
            SensorError::Config(format!(
                "--hep-send {url}: {e}; give the collector as HOST:PORT"
            ))
        })?;
        let stats = Arc::new(HepSendStats::default());
        stats
            .queue_bytes_max
            .store(config.queue_bytes_max as u64, Ordering::Relaxed);
        let link = match config.transport {
            HepTransport::Udp => {
                let bind: SocketAddr = if addrs[0].is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let socket = UdpSocket::bind(bind)
                    .and_then(|s| s.connect(addrs[0]).map(|()| s))
                    .map_err(|e| {
                        SensorError::Config(format!(
                            "--hep-send {url}: cannot open a UDP socket: {e}"
                        ))
                    })?;
                stats.connected.store(true, Ordering::Relaxed);
                Link::Udp(socket)
            }
            HepTransport::Tcp => {
                let stream = connect(&addrs, CONNECT_TIMEOUT);
                match &stream {
                    Ok(_) => {
                        stats.connected.store(true, Ordering::Relaxed);
                        stats.connects.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(collector = %url, "connected to the HEP collector");
                    }
                    Err(e) => tracing::warn!(
                        collector = %url,
                        error = %e,
                        "the HEP collector cannot be reached; packets are queued and it is retried"
                    ),
                }
                Link::Tcp(stream.ok())
            }
        };
        let queue = Arc::new(SendQueue {
            state: Mutex::new(QueueState {
                chunks: VecDeque::new(),
                free: Vec::new(),
                bytes: 0,
                sender_waiting: false,
                closed: false,
            }),
            ready: Condvar::new(),
            room: Condvar::new(),
            bytes_max: config.queue_bytes_max.max(CHUNK_BYTES),
        });
        let mut sender = Sender {
            link,
            target: config.target.clone(),
            url: url.clone(),
            queue: queue.clone(),
            stats: stats.clone(),
            max_pps: config.max_pps,
            paced_until: Instant::now(),
        };
        let thread = std::thread::Builder::new()
            .name("hep-send".into())
            .spawn(move || sender.run())
            .map_err(|source| SensorError::Thread {
                thread: "hep-send",
                source,
            })?;
        Ok(HepForwarder {
            decoder: Decoder::default(),
            tcp: SipTcp::new(monitor::tcp::TcpLimits::default()),
            sctp: SipSctp::new(monitor::sctp::SctpLimits::default()),
            capture_id: config.capture_id,
            auth_key,
            queue,
            stats,
            wait_for_room,
            analyse: config.analyse,
            url,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> Arc<HepSendStats> {
        self.stats.clone()
    }

    /// Whether the frames are analysed here too.
    pub fn analyse(&self) -> bool {
        self.analyse
    }

    /// Forwards what `frame` carries: a UDP datagram, or the SIP messages a TCP segment or an
    /// SCTP packet completes. Anything else (ARP, ICMP, TCP without SIP) is not forwarded.
    pub fn frame(&mut self, ts_ns: i64, link_type: u32, frame: &[u8]) {
        let Ok(Some(d)) = self.decoder.decode(ts_ns, link_type, frame) else {
            return;
        };
        let send = Enqueue {
            queue: &self.queue,
            stats: &self.stats,
            wait_for_room: self.wait_for_room,
            capture_id: self.capture_id,
            auth_key: self.auth_key.as_deref(),
            ts_ns,
        };
        match d.transport {
            Transport::Udp => send.packet(17, d.src, d.dst, d.payload),
            Transport::Tcp { seq, flags } => {
                let (src, dst) = (d.src, d.dst);
                self.tcp
                    .segment(ts_ns, src, dst, seq, flags, d.payload, |message| {
                        send.packet(6, src, dst, message)
                    });
            }
            Transport::Sctp => {
                let (src, dst) = (d.src, d.dst);
                self.sctp.packet(ts_ns, src, dst, d.payload, |message| {
                    send.packet(132, src, dst, message)
                });
            }
        }
    }

    /// Sends what is queued (waiting up to [`HEP_SEND_DRAIN_TIMEOUT_S`] for an unreachable
    /// collector) and ends the thread.
    pub fn finish(mut self) -> HepSendReport {
        {
            let mut q = self.queue.lock();
            q.closed = true;
        }
        self.queue.ready.notify_all();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("the hep-send thread panicked");
        }
        HepSendReport {
            url: self.url.clone(),
            stats: self.stats.snapshot(),
        }
    }
}

impl Drop for HepForwarder {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.queue.lock().closed = true;
            self.queue.ready.notify_all();
            let _ = t.join();
        }
    }
}

/// One frame's worth of queueing.
struct Enqueue<'a> {
    queue: &'a SendQueue,
    stats: &'a HepSendStats,
    wait_for_room: bool,
    capture_id: u32,
    auth_key: Option<&'a [u8]>,
    ts_ns: i64,
}

impl Enqueue<'_> {
    fn packet(&self, ip_protocol: u8, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        if payload.len() > hep::DEFAULT_MAX_PAYLOAD_BYTES {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let us = self.ts_ns.max(0) / 1_000;
        let packet = hep::HepPacket {
            ip_protocol,
            src_ip: src.ip(),
            dst_ip: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
            ts_sec: u32::try_from(us / 1_000_000).unwrap_or(u32::MAX),
            ts_usec: (us % 1_000_000) as u32,
            protocol_type: protocol_type(ip_protocol, payload),
            capture_id: self.capture_id,
            keep_alive_timer: None,
            auth_key: self.auth_key,
            payload: hep::Payload::Raw(payload),
            correlation_id: None,
        };
        let len = packet.encoded_len();
        let q = self.queue;
        let mut state = q.lock();
        while state.bytes + len > q.bytes_max {
            let connected = self.stats.connected.load(Ordering::Relaxed);
            if self.wait_for_room && connected && !state.closed {
                state = q
                    .room
                    .wait_timeout(state, ROOM_WAIT)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            let counter = if connected {
                &self.stats.dropped_queue_full
            } else {
                &self.stats.dropped_disconnected
            };
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let fits = state
            .chunks
            .back()
            .is_some_and(|c| c.bytes.len() + len <= CHUNK_BYTES);
        if !fits {
            let chunk = state.free.pop().unwrap_or_default();
            state.chunks.push_back(chunk);
        }
        let chunk = state.chunks.back_mut().expect("a chunk was pushed");
        if packet.encode(&mut chunk.bytes).is_err() {
            // Mixed address families cannot come out of the decoder, and the size was checked.
            return;
        }
        chunk.packets += 1;
        state.bytes += len;
        self.stats
            .queue_bytes
            .store(state.bytes as u64, Ordering::Relaxed);
        if state.sender_waiting {
            state.sender_waiting = false;
            drop(state);
            q.ready.notify_one();
        }
    }
}

/// What the payload is, for chunk 11: SIP, RTCP, RTP, or 0 (unclassified: T.38, STUN, ...).
fn protocol_type(ip_protocol: u8, payload: &[u8]) -> hep::ProtocolType {
    if ip_protocol == 6 || sip::looks_like_sip(payload) {
        hep::ProtocolType::SIP
    } else if monitor::rtp::looks_like_rtcp(payload) {
        hep::ProtocolType::RTCP
    } else if monitor::rtp::RtpHeader::parse(payload).is_some() {
        hep::ProtocolType::RTP
    } else {
        hep::ProtocolType(0)
    }
}

fn resolve(target: &str) -> std::io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = target.to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the name has no address",
        ));
    }
    Ok(addrs)
}

fn connect(addrs: &[SocketAddr], timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address")))
}

enum Link {
    Udp(UdpSocket),
    Tcp(Option<TcpStream>),
}

/// The `hep-send` thread.
struct Sender {
    link: Link,
    target: String,
    url: String,
    queue: Arc<SendQueue>,
    stats: Arc<HepSendStats>,
    max_pps: u64,
    paced_until: Instant,
}

impl Sender {
    fn run(&mut self) {
        let mut backoff = RECONNECT_MIN;
        let mut next_attempt = Instant::now();
        let mut drain_deadline: Option<Instant> = None;
        loop {
            if let Link::Tcp(None) = self.link {
                let closed = self.queue.lock().closed;
                if closed {
                    let d = *drain_deadline.get_or_insert_with(|| {
                        Instant::now() + Duration::from_secs(HEP_SEND_DRAIN_TIMEOUT_S)
                    });
                    if Instant::now() >= d || self.queue.lock().chunks.is_empty() {
                        self.abandon_queue();
                        return;
                    }
                }
                let now = Instant::now();
                if now < next_attempt {
                    std::thread::sleep((next_attempt - now).min(ROOM_WAIT));
                    continue;
                }
                match resolve(&self.target).and_then(|a| connect(&a, CONNECT_TIMEOUT)) {
                    Ok(s) => {
                        tracing::info!(collector = %self.url, "connected to the HEP collector");
                        self.link = Link::Tcp(Some(s));
                        self.stats.connects.fetch_add(1, Ordering::Relaxed);
                        self.stats.connected.store(true, Ordering::Relaxed);
                        backoff = RECONNECT_MIN;
                    }
                    Err(e) => {
                        tracing::debug!(collector = %self.url, error = %e, retry_ms = backoff.as_millis() as u64, "HEP collector unreachable");
                        next_attempt = Instant::now() + backoff;
                        backoff = (backoff * 2).min(RECONNECT_MAX);
                    }
                }
                continue;
            }
            let Some(mut chunk) = self.take() else {
                return;
            };
            let sent = self.send(&chunk);
            if sent < chunk.bytes.len() {
                // The connection broke inside the chunk: what was not written whole goes back
                // to the front, to be sent first on the next connection.
                let start = whole_packets_before(&chunk.bytes, sent);
                let resent = count_packets(&chunk.bytes[start..]);
                let mut q = self.queue.lock();
                chunk.bytes.drain(..start);
                chunk.packets = resent;
                q.bytes += chunk.bytes.len();
                q.chunks.push_front(chunk);
                self.stats
                    .queue_bytes
                    .store(q.bytes as u64, Ordering::Relaxed);
                next_attempt = Instant::now() + backoff;
                continue;
            }
            self.recycle(chunk);
        }
    }

    /// The next chunk; `None` once the queue is closed and empty.
    fn take(&self) -> Option<Chunk> {
        let q = &self.queue;
        let mut state = q.lock();
        loop {
            if let Some(c) = state.chunks.pop_front() {
                state.bytes -= c.bytes.len();
                self.stats
                    .queue_bytes
                    .store(state.bytes as u64, Ordering::Relaxed);
                drop(state);
                q.room.notify_all();
                return Some(c);
            }
            if state.closed {
                return None;
            }
            state.sender_waiting = true;
            state = q
                .ready
                .wait_timeout(state, ROOM_WAIT)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn recycle(&self, mut chunk: Chunk) {
        chunk.bytes.clear();
        chunk.packets = 0;
        let mut q = self.queue.lock();
        if q.free.len() < 16 {
            q.free.push(chunk);
        }
    }

    /// Waits until the next packet may go, under `max_pps`.
    fn pace(&mut self) {
        if self.max_pps == 0 {
            return;
        }
        let now = Instant::now();
        self.paced_until = self.paced_until.max(now - Duration::from_millis(10))
            + Duration::from_nanos(1_000_000_000 / self.max_pps);
        if self.paced_until > now + Duration::from_millis(1) {
            std::thread::sleep(self.paced_until - now);
        }
    }

    /// Sends a chunk; the bytes written (all of them, except when a TCP connection broke).
    fn send(&mut self, chunk: &Chunk) -> usize {
        let mut at = 0;
        while at < chunk.bytes.len() {
            let len = packet_len(&chunk.bytes[at..]);
            self.pace();
            let packet = &chunk.bytes[at..at + len];
            match &mut self.link {
                Link::Udp(socket) => match socket.send(packet) {
                    Ok(_) => {
                        self.stats.sent_packets.fetch_add(1, Ordering::Relaxed);
                        self.stats
                            .sent_bytes
                            .fetch_add(len as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        let errors = self.stats.send_errors.fetch_add(1, Ordering::Relaxed) + 1;
                        if errors.is_power_of_two() {
                            tracing::warn!(collector = %self.url, error = %e, errors, "HEP datagram not sent");
                        }
                    }
                },
                Link::Tcp(Some(stream)) => {
                    // Without a rate cap, the rest of the chunk in one write.
                    let end = if self.max_pps == 0 {
                        chunk.bytes.len()
                    } else {
                        at + len
                    };
                    let mut off = at;
                    let mut broke = None;
                    while off < end {
                        match stream.write(&chunk.bytes[off..end]) {
                            Ok(0) => {
                                broke = Some(std::io::Error::from(std::io::ErrorKind::WriteZero));
                                break;
                            }
                            Ok(n) => off += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                broke = Some(e);
                                break;
                            }
                        }
                    }
                    let whole = whole_packets_before(&chunk.bytes, off);
                    self.stats
                        .sent_packets
                        .fetch_add(count_packets(&chunk.bytes[at..whole]), Ordering::Relaxed);
                    self.stats
                        .sent_bytes
                        .fetch_add((whole - at) as u64, Ordering::Relaxed);
                    if let Some(e) = broke {
                        tracing::warn!(collector = %self.url, error = %e, "the connection to the HEP collector broke; reconnecting");
                        self.link = Link::Tcp(None);
                        self.stats.connected.store(false, Ordering::Relaxed);
                        return off;
                    }
                    at = end;
                    continue;
                }
                Link::Tcp(None) => return at,
            }
            at += len;
        }
        at
    }

    /// The collector never came back: what is queued is counted as dropped.
    fn abandon_queue(&self) {
        let mut q = self.queue.lock();
        let packets: u64 = q.chunks.iter().map(|c| c.packets).sum();
        q.chunks.clear();
        q.bytes = 0;
        self.stats.queue_bytes.store(0, Ordering::Relaxed);
        if packets > 0 {
            self.stats
                .dropped_disconnected
                .fetch_add(packets, Ordering::Relaxed);
            tracing::warn!(collector = %self.url, packets, "the HEP collector did not come back; queued packets dropped");
        }
    }
}

/// The total length a queued packet's header gives.
fn packet_len(bytes: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([bytes[4], bytes[5]]))
}

fn count_packets(mut bytes: &[u8]) -> u64 {
    let mut n = 0;
    while !bytes.is_empty() {
        bytes = &bytes[packet_len(bytes)..];
        n += 1;
    }
    n
}

/// Where the packet that byte `at` falls in begins.
fn whole_packets_before(bytes: &[u8], at: usize) -> usize {
    let mut start = 0;
    while start < bytes.len() {
        let next = start + packet_len(&bytes[start..]);
        if next > at {
            break;
        }
        start = next;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_their_transport() {
        let c = HepSendConfig::parse("tcp://collector.example:9060").unwrap();
        assert_eq!(
            (c.transport, c.target.as_str()),
            (HepTransport::Tcp, "collector.example:9060")
        );
        let c = HepSendConfig::parse("192.0.2.1:9060").unwrap();
        assert_eq!(c.transport, HepTransport::Udp);
        assert_eq!(c.url(), "udp://192.0.2.1:9060");
        assert_eq!(
            HepSendConfig::parse("udp://[::1]:9060").unwrap().target,
            "[::1]:9060"
        );
        for bad in ["sctp://a:1", "collector", "tcp://:9060", "a:0", "a:http"] {
            let e = HepSendConfig::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn payloads_are_classified_for_the_protocol_type_chunk() {
        let rtp = [0x80, 0, 0, 1, 0, 0, 0, 160, 1, 2, 3, 4, 0xd5];
        let rtcp = [0x81, 200, 0, 6, 1, 2, 3, 4, 0, 0, 0, 0];
        assert_eq!(
            protocol_type(17, b"OPTIONS sip:a SIP/2.0\r\n\r\n"),
            hep::ProtocolType::SIP
        );
        assert_eq!(protocol_type(17, &rtp), hep::ProtocolType::RTP);
        assert_eq!(protocol_type(17, &rtcp), hep::ProtocolType::RTCP);
        assert_eq!(protocol_type(17, b"\x00\x01stun"), hep::ProtocolType(0));
        assert_eq!(protocol_type(6, b"anything"), hep::ProtocolType::SIP);
    }

    #[test]
    fn a_broken_write_resends_from_the_packet_it_cut() {
        let packet = |n: usize| {
            let mut v = b"HEP3".to_vec();
            v.extend_from_slice(&((6 + n) as u16).to_be_bytes());
            v.resize(6 + n, 0);
            v
        };
        let bytes = [packet(10), packet(20), packet(30)].concat();
        assert_eq!(count_packets(&bytes), 3);
        assert_eq!(whole_packets_before(&bytes, 0), 0);
        assert_eq!(whole_packets_before(&bytes, 16), 16);
        assert_eq!(whole_packets_before(&bytes, 20), 16);
        assert_eq!(whole_packets_before(&bytes, bytes.len()), bytes.len());
    }
}
