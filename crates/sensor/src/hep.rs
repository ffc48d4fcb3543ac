//! The HEP source: HEP v3 (Kamailio's siptrace, OpenSIPS, FreeSWITCH, Asterisk's res_hep,
//! heplify, another Tandem's `--hep-send`) over UDP and TCP on one address, rebuilt into the
//! IP packets it carries and fed to the monitor as raw IP.
//!
//! ```text
//! UDP socket (SO_RCVBUF raised, drops from SO_MEMINFO) ──▶ hep-udp thread: recvmmsg ─┐
//! TCP listener ──▶ connections (each cut by hep::Deframer) ──▶ hep-tcp thread: poll ─┤
//!         each packet decoded, its key checked, rebuilt as IP ──batches──▶ FrameBuffer
//!                                            (bounded, bytes) ──▶ sensor thread: Monitor
//! ```
//!
//! The receive threads do nothing but drain the sockets, so that a burst, or a moment the
//! analysis spends handing records to the sinks, lands in the bounded buffer (64 MiB by
//! default) rather than overflowing the kernel's socket buffer, where a collector that reads
//! and analyses on one thread loses packets. What is lost is counted where it is lost: the
//! kernel's drops of the UDP socket (`socket_drops`), the buffer's overruns (UDP only: TCP
//! connections are not read while the buffer is full, so TCP's flow control slows the sender
//! instead), packets refused for their key or their format. A packet that is not HEP v3, or one
//! without the configured authentication key, is counted and skipped, never fatal; a TCP
//! connection that sends bytes that are not HEP is closed (its peer and the reason logged), and
//! the others go on.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::SensorError;
use crate::feed::{Feed, FlushClock, StopSignal};
use crate::live::{BATCH_BYTES_MAX, Batch, FrameBuffer, LiveStats, Popped};

/// Link type of the packets rebuilt from HEP: raw IP.
const LINKTYPE_RAW: u32 = 101;

/// Default of [`HepSettings::tcp_connections_max`]: TCP senders connected at once. Each holds
/// a buffer of [`HEP_TCP_BUFFER_BYTES`]; a connection past the bound is accepted and closed at
/// once (logged and counted), so a sender sees the refusal rather than a hang.
pub const HEP_TCP_CONNECTIONS_MAX: usize = 256;
/// Default of [`HepSettings::tcp_buffer_bytes`]: bytes buffered per TCP connection, two of the
/// largest packets (65,535 bytes) a HEP length can describe.
pub const HEP_TCP_BUFFER_BYTES: usize = 128 * 1024;
/// Default of [`HepSettings::tcp_idle_timeout_s`]: a TCP connection that sends nothing for this
/// long is closed (senders reconnect when they have something to send).
pub const HEP_TCP_IDLE_TIMEOUT_S: u64 = 300;
/// Default of [`HepSettings::socket_buffer_bytes`]: the UDP socket's receive buffer asked of the
/// kernel (`SO_RCVBUFFORCE` when privileged, else `SO_RCVBUF`, which `net.core.rmem_max`
/// caps): some 30,000 datagrams of a few hundred bytes, each counted with the kernel's
/// overhead (about 1 KiB), a sixth of a second at 200,000 packets/s.
pub const HEP_SOCKET_BUFFER_BYTES: usize = 32 << 20;
/// Default of [`HepSettings::buffer_bytes_max`]: rebuilt packets queued between the
/// receive threads and the analysis.
pub const HEP_BUFFER_BYTES_MAX: u64 = 64 << 20;

/// Datagrams taken from the UDP socket per `recvmmsg` call at most. Measured on 2 cores at
/// some 400,000 HEP packets/s (`tandem bench collector --part hep`), 256 rather than 64 took
/// about a fifth less CPU per packet, this thread and the analysis together: fewer wake-ups
/// of this thread leave the analysis' caches warm.
const UDP_BATCH: usize = 256;
/// The largest UDP datagram.
const UDP_DATAGRAM_BYTES_MAX: usize = 65_536;
/// The first bytes of each datagram land in a slot of this size, the slots side by side; a
/// larger datagram's rest goes to a region of its own (the regions take some 16 MB of address
/// space, resident only where large datagrams were written). HEP of RTP is about 300 bytes and
/// of SIP mostly under 1,500, so a batch is read from slots next to each other rather than
/// 64 KiB apart, every one of which would fall in the same cache sets.
const UDP_SLOT_BYTES: usize = 2_048;
/// Distance between slots: one cache line more than a slot, so that the slots' starts spread
/// over the cache's sets instead of sharing two of them.
const UDP_SLOT_STRIDE: usize = UDP_SLOT_BYTES + 64;
/// What one small datagram takes of a socket's receive buffer in the kernel's accounting
/// (its data and the socket buffer's overhead: 1 to 2 KiB), bytes; for [`udp_wait_for`].
const UDP_DATAGRAM_ACCOUNTED_BYTES: usize = 2_048;
/// Most bytes read from one TCP connection before the thread looks at the others.
const TCP_READ_BYTES_PER_TURN: usize = 1 << 20;
/// After a read that emptied the UDP socket, the wait before the next is the time the
/// datagrams of a full read ([`udp_wait_for`]) take to arrive at the rate just seen, at least
/// this...
const UDP_COALESCE_MIN: Duration = Duration::from_micros(100);
/// ...and at most this: well under [`HAND_OVER_AFTER`], so that waiting adds little to the
/// time a packet takes to reach the analysis.
const UDP_COALESCE_MAX: Duration = Duration::from_millis(1);
/// The receive threads and the analysis wake up at least this often, to flush finished calls,
/// close idle connections and look at the stop flag.
const POLL_MS: i32 = 100;
/// Packets wait at most this long in the receive thread's batch before the analysis gets them
/// (a batch is handed over at once when it reaches `BATCH_BYTES_MAX`): fewer, larger batches
/// spare the analysis a wake-up, and a start on cold caches, per handful of packets (at
/// 12,500 to 50,000 packets/s, 2 ms batches cost it some 15% more CPU per packet than 10 ms
/// ones). Nothing in the analysis needs its packets sooner: calls are timed by the packets'
/// own timestamps, and the live figures move once a second.
const HAND_OVER_AFTER: Duration = Duration::from_millis(10);
/// How often the socket's drop counter is read.
const DROPS_EVERY: Duration = Duration::from_millis(250);

/// An authentication key: the bytes themselves, or a file holding them (so the key need not
/// be on a command line). Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub enum AuthKey {
    Key(Vec<u8>),
    /// The file's contents without one trailing line end.
    File(PathBuf),
}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthKey::Key(k) => write!(f, "Key(<{} bytes>)", k.len()),
            AuthKey::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

impl AuthKey {
    /// The key's bytes; an unreadable or empty file, or an empty key, is an error naming it.
    pub fn load(&self) -> Result<Vec<u8>, SensorError> {
        let key = match self {
            AuthKey::Key(k) => k.clone(),
            AuthKey::File(path) => {
                let mut k = std::fs::read(path).map_err(|e| {
                    SensorError::Config(format!(
                        "cannot read the HEP authentication key file {}: {e}",
                        path.display()
                    ))
                })?;
                if k.ends_with(b"\n") {
                    k.pop();
                    if k.ends_with(b"\r") {
                        k.pop();
                    }
                }
                if k.is_empty() {
                    return Err(SensorError::Config(format!(
                        "the HEP authentication key file {} is empty",
                        path.display()
                    )));
                }
                k
            }
        };
        if key.is_empty() {
            return Err(SensorError::Config(
                "the HEP authentication key is empty; give one, or none to accept any".into(),
            ));
        }
        if key.len() > hep::MAX_PACKET_BYTES / 2 {
            return Err(SensorError::Config(format!(
                "the HEP authentication key has {} bytes; at most {} fit in a packet",
                key.len(),
                hep::MAX_PACKET_BYTES / 2
            )));
        }
        Ok(key)
    }
}

/// HEP in (`--hep-listen`) and out (`--hep-send`): the key, the bounds and the sender.
#[derive(Debug, Clone, PartialEq)]
pub struct HepSettings {
    /// With `--hep-listen`: only packets carrying this key (chunk 14) are analysed; the others
    /// are refused and counted. `None`: packets with or without a key are accepted. With
    /// `--hep-send`: the key sent in every packet.
    pub auth_key: Option<AuthKey>,
    /// Receive buffer asked for the UDP socket, bytes.
    pub socket_buffer_bytes: usize,
    pub tcp_connections_max: usize,
    pub tcp_buffer_bytes: usize,
    pub tcp_idle_timeout_s: u64,
    /// Bound of the buffer between the receive threads and the analysis, bytes.
    pub buffer_bytes_max: u64,
    /// Forward the captured packets as HEP (`--hep-send`).
    pub send: Option<crate::hep_send::HepSendConfig>,
}

impl Default for HepSettings {
    fn default() -> Self {
        HepSettings {
            auth_key: None,
            socket_buffer_bytes: HEP_SOCKET_BUFFER_BYTES,
            tcp_connections_max: HEP_TCP_CONNECTIONS_MAX,
            tcp_buffer_bytes: HEP_TCP_BUFFER_BYTES,
            tcp_idle_timeout_s: HEP_TCP_IDLE_TIMEOUT_S,
            buffer_bytes_max: HEP_BUFFER_BYTES_MAX,
            send: None,
        }
    }
}

/// The HEP listener's counters, updated by the receive threads.
#[derive(Debug, Default)]
pub struct HepStats {
    /// HEP packets taken in for the analysis, by transport; a receive thread adds its packets
    /// when it hands a batch over (every 10 ms at most).
    pub udp_packets: AtomicU64,
    pub tcp_packets: AtomicU64,
    /// Packets without the configured key, or with another one.
    pub refused_auth: AtomicU64,
    /// Datagrams or TCP frames that are not valid HEP v3 (or carry a payload over the limit).
    pub refused_invalid: AtomicU64,
    /// Datagrams the kernel dropped because the UDP socket's buffer was full (`SO_MEMINFO`).
    pub socket_drops: AtomicU64,
    /// The UDP socket's receive buffer as the kernel reports it (twice what it granted: its
    /// bookkeeping is counted in it).
    pub socket_buffer_bytes: AtomicU64,
    pub tcp_connections: AtomicU64,
    pub tcp_connections_max: AtomicU64,
    pub tcp_accepted: AtomicU64,
    /// Connections closed at once because `tcp_connections_max` were open.
    pub tcp_refused_limit: AtomicU64,
    /// Connections closed because they sent bytes that are not HEP.
    pub tcp_closed_invalid: AtomicU64,
    pub tcp_closed_idle: AtomicU64,
    /// The buffer between this thread and the analysis (its bytes, bound and overruns).
    pub buffer: Arc<LiveStats>,
}

/// A copy of [`HepStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HepStatsSnapshot {
    pub udp_packets: u64,
    pub tcp_packets: u64,
    pub refused_auth: u64,
    pub refused_invalid: u64,
    pub socket_drops: u64,
    pub socket_buffer_bytes: u64,
    pub tcp_connections: u64,
    pub tcp_connections_max: u64,
    pub tcp_accepted: u64,
    pub tcp_refused_limit: u64,
    pub tcp_closed_invalid: u64,
    pub tcp_closed_idle: u64,
    pub buffer_bytes_used: u64,
    /// The buffer's highest fill since the listener started, bytes.
    pub buffer_bytes_peak: u64,
    pub buffer_bytes_max: u64,
    pub buffer_overruns: u64,
    /// Packets the analysis has taken from the buffer: the packets taken in, less those still
    /// queued.
    pub packets_analysed: u64,
}

impl HepStats {
    pub fn snapshot(&self) -> HepStatsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HepStatsSnapshot {
            udp_packets: r(&self.udp_packets),
            tcp_packets: r(&self.tcp_packets),
            refused_auth: r(&self.refused_auth),
            refused_invalid: r(&self.refused_invalid),
            socket_drops: r(&self.socket_drops),
            socket_buffer_bytes: r(&self.socket_buffer_bytes),
            tcp_connections: r(&self.tcp_connections),
            tcp_connections_max: r(&self.tcp_connections_max),
            tcp_accepted: r(&self.tcp_accepted),
            tcp_refused_limit: r(&self.tcp_refused_limit),
            tcp_closed_invalid: r(&self.tcp_closed_invalid),
            tcp_closed_idle: r(&self.tcp_closed_idle),
            buffer_bytes_used: r(&self.buffer.buffer_bytes_used),
            buffer_bytes_peak: r(&self.buffer.buffer_bytes_peak),
            buffer_bytes_max: r(&self.buffer.buffer_bytes_max),
            buffer_overruns: r(&self.buffer.buffer_overruns),
            packets_analysed: r(&self.buffer.packets_analysed),
        }
    }
}

impl HepStatsSnapshot {
    /// HEP packets taken in for the analysis, UDP and TCP (of which `packets_analysed` have
    /// been analysed).
    pub fn packets(&self) -> u64 {
        self.udp_packets + self.tcp_packets
    }
}

impl std::fmt::Display for HepStatsSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} packets analysed ({} UDP, {} TCP); refused: {} for their authentication key, {} not HEP v3; \
             UDP socket: {} dropped by the kernel (buffer {} bytes); buffer: {} overruns; \
             TCP: {} connections accepted, {} refused at the limit of {}, {} closed for bytes that are not HEP, {} idle",
            self.packets(),
            self.udp_packets,
            self.tcp_packets,
            self.refused_auth,
            self.refused_invalid,
            self.socket_drops,
            self.socket_buffer_bytes,
            self.buffer_overruns,
            self.tcp_accepted,
            self.tcp_refused_limit,
            self.tcp_connections_max,
            self.tcp_closed_invalid,
            self.tcp_closed_idle,
        )
    }
}

/// The listener's figures on the status line and in the metrics.
impl crate::status::StatusSource for Arc<HepStats> {
    fn sample(&self, s: &mut crate::status::Sample) {
        s.hep = Some(self.snapshot());
    }
}

/// The status line's part for HEP in: packets/s, refusals and losses.
pub(crate) fn status_part(
    prev: Option<&HepStatsSnapshot>,
    now: &HepStatsSnapshot,
    secs: f64,
) -> String {
    let before = prev.copied().unwrap_or_default();
    let rate = now.packets().saturating_sub(before.packets()) as f64 / secs.max(1e-9);
    let mut s = format!(
        "HEP in {rate:.0}/s, refused {} auth {} invalid, socket drops {} (+{}), TCP {}/{}",
        now.refused_auth,
        now.refused_invalid,
        now.socket_drops,
        now.socket_drops.saturating_sub(before.socket_drops),
        now.tcp_connections,
        now.tcp_connections_max,
    );
    if now.buffer_overruns > 0 {
        s += &format!(", buffer overruns {}", now.buffer_overruns);
    }
    s
}

/// The `tandem_capture_hep_*` metrics of HEP in.
pub(crate) fn encode_metrics(
    s: &HepStatsSnapshot,
    e: &mut prometheus_client::encoding::DescriptorEncoder,
) -> std::fmt::Result {
    use crate::status::metrics::{counter, counter_family, gauge};
    counter_family(
        e,
        "hep_packets",
        "HEP packets received and analysed, by transport",
        "transport",
        &[("udp", s.udp_packets), ("tcp", s.tcp_packets)],
    )?;
    counter_family(
        e,
        "hep_refused",
        "HEP packets refused: without the configured authentication key or with another (auth), not HEP v3 (invalid)",
        "reason",
        &[("auth", s.refused_auth), ("invalid", s.refused_invalid)],
    )?;
    counter(
        e,
        "hep_socket_drops",
        "UDP datagrams the kernel dropped because the HEP socket's receive buffer was full",
        s.socket_drops,
    )?;
    gauge(
        e,
        "hep_socket_buffer_bytes",
        "The HEP UDP socket's receive buffer as the kernel reports it",
        s.socket_buffer_bytes,
    )?;
    gauge(
        e,
        "hep_buffer_bytes",
        "Bytes of rebuilt packets queued between the HEP receive thread and the analysis",
        s.buffer_bytes_used,
    )?;
    gauge(
        e,
        "hep_buffer_bytes_max",
        "Bound of the HEP buffer",
        s.buffer_bytes_max,
    )?;
    counter(
        e,
        "hep_buffer_overruns",
        "HEP packets dropped because the buffer before the analysis was full",
        s.buffer_overruns,
    )?;
    gauge(
        e,
        "hep_tcp_connections",
        "HEP senders connected over TCP now",
        s.tcp_connections,
    )?;
    gauge(
        e,
        "hep_tcp_connections_max",
        "Bound of HEP TCP connections",
        s.tcp_connections_max,
    )?;
    counter_family(
        e,
        "hep_tcp_closed",
        "HEP TCP connections closed by Tandem: at the connection limit, for bytes that are not HEP, idle",
        "reason",
        &[
            ("limit", s.tcp_refused_limit),
            ("invalid", s.tcp_closed_invalid),
            ("idle", s.tcp_closed_idle),
        ],
    )
}

/// The sockets of `--hep-listen`, bound: UDP and TCP on the same address.
pub(crate) struct HepListener {
    udp: UdpSocket,
    tcp: TcpListener,
    addr: SocketAddr,
    auth_key: Option<Vec<u8>>,
    settings: HepSettings,
    stats: Arc<HepStats>,
}

impl HepListener {
    /// Binds UDP and TCP on `listen` (with port 0, the same port the kernel gives UDP), sizes
    /// the UDP receive buffer and reads the key. Every error names the address or the file.
    pub fn bind(listen: SocketAddr, settings: &HepSettings) -> Result<HepListener, SensorError> {
        if !(1..=65_536).contains(&settings.tcp_connections_max) {
            return Err(SensorError::Config(format!(
                "HEP TCP connections: between 1 and 65536, not {}",
                settings.tcp_connections_max
            )));
        }
        if settings.buffer_bytes_max < BATCH_BYTES_MAX as u64 {
            return Err(SensorError::Config(format!(
                "the HEP buffer must hold at least {BATCH_BYTES_MAX} bytes"
            )));
        }
        let auth_key = settings.auth_key.as_ref().map(AuthKey::load).transpose()?;
        let attempts = if listen.port() == 0 { 32 } else { 1 };
        let mut last = None;
        for _ in 0..attempts {
            let udp = UdpSocket::bind(listen).map_err(|source| SensorError::HepBind {
                addr: listen,
                source,
            })?;
            let addr = udp.local_addr().map_err(|source| SensorError::HepBind {
                addr: listen,
                source,
            })?;
            match TcpListener::bind(addr) {
                Ok(tcp) => {
                    let stats = Arc::new(HepStats::default());
                    stats
                        .tcp_connections_max
                        .store(settings.tcp_connections_max as u64, Ordering::Relaxed);
                    let granted = size_receive_buffer(&udp, settings.socket_buffer_bytes);
                    stats
                        .socket_buffer_bytes
                        .store(granted as u64, Ordering::Relaxed);
                    if granted / 2 < settings.socket_buffer_bytes {
                        tracing::warn!(
                            %addr,
                            asked = settings.socket_buffer_bytes,
                            granted = granted / 2,
                            "the HEP UDP socket's receive buffer is smaller than asked: \
                             raise net.core.rmem_max, or run with CAP_NET_ADMIN"
                        );
                    }
                    // Only the listener: the `hep-tcp` thread polls it. The UDP socket stays
                    // blocking, so that `recvmmsg` waits for the first datagram up to the
                    // socket's read timeout; a non-blocking one returns at once when empty,
                    // and the `hep-udp` thread would spin a core while no HEP arrives.
                    set_nonblocking(tcp.as_raw_fd())
                        .map_err(|source| SensorError::HepBind { addr, source })?;
                    return Ok(HepListener {
                        udp,
                        tcp,
                        addr,
                        auth_key,
                        settings: settings.clone(),
                        stats,
                    });
                }
                Err(e) => {
                    last = Some(SensorError::HepBind {
                        addr,
                        source: std::io::Error::new(e.kind(), format!("its TCP port: {e}")),
                    });
                    if e.kind() != std::io::ErrorKind::AddrInUse {
                        break;
                    }
                }
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// Where HEP is received (UDP and TCP).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> Arc<HepStats> {
        self.stats.clone()
    }
}

fn set_nonblocking(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor this process owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn getsockopt_int(fd: i32, level: i32, name: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` outlive the call and `len` is `v`'s size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// Asks for `bytes` of receive buffer (past `net.core.rmem_max` when privileged); what the
/// kernel granted, as it reports it (twice the grant).
fn size_receive_buffer(socket: &UdpSocket, bytes: usize) -> usize {
    let fd = socket.as_raw_fd();
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for name in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `v` outlives the call and the length is its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
    getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map_or(0, |v| v.max(0) as usize)
}

/// Datagrams the kernel dropped on this socket since it was opened (`SK_MEMINFO_DROPS`).
fn socket_drops(socket: &UdpSocket) -> Option<u64> {
    // The kernel copies as many of its counters as fit; the drops are the last of these.
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` and `len` outlive the call and `len` is `info`'s size in bytes.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let at = libc::SK_MEMINFO_DROPS as usize;
    (r == 0 && len as usize > at * 4).then(|| u64::from(info[at]))
}

/// Receives until stopped or `max_packets` HEP packets (analysed or refused); returns how many
/// were refused as not HEP v3. The sockets are read by the `hep-udp` and `hep-tcp` threads; the
/// caller's thread analyses.
pub(crate) fn receive(
    listener: HepListener,
    max_packets: Option<u64>,
    sink: &mut Feed<'_>,
    packets: &mut u64,
    stop: &StopSignal,
) -> Result<u64, SensorError> {
    let HepListener {
        udp,
        tcp,
        addr,
        auth_key,
        settings,
        stats,
    } = listener;
    let buffer = Arc::new(FrameBuffer::new(
        settings.buffer_bytes_max,
        2,
        stats.buffer.clone(),
    ));
    let shared = Arc::new(Shared {
        buffer: buffer.clone(),
        stats: stats.clone(),
        auth_key,
        limits: hep::DecodeLimits::default(),
        max_packets,
        taken: AtomicU64::new(0),
        settings,
        addr,
    });
    let spawn = |name: &'static str, run: Box<dyn FnOnce() -> Result<(), SensorError> + Send>| {
        let buffer = buffer.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let r = run();
                buffer.producer_done();
                r
            })
            .map_err(|source| SensorError::Thread {
                thread: name,
                source,
            })
    };
    let udp_thread = {
        let (shared, stop) = (shared.clone(), stop.clone());
        spawn(
            "hep-udp",
            Box::new(move || receive_udp(&udp, &shared, &stop)),
        )
    };
    let tcp_thread = {
        let (shared, stop) = (shared.clone(), stop.clone());
        spawn(
            "hep-tcp",
            Box::new(move || TcpReceiver::new(tcp, &shared).run(&stop)),
        )
    };
    let (udp_thread, tcp_thread) = match (udp_thread, tcp_thread) {
        (Ok(u), Ok(t)) => (u, t),
        (Ok(t), Err(e)) | (Err(e), Ok(t)) => {
            stop.stop();
            let _ = t.join();
            return Err(e);
        }
        (Err(e), Err(_)) => return Err(e),
    };
    let mut clock = FlushClock::new();
    let mut flushed = Ok(());
    loop {
        // Quiet: the buffer had nothing for the analysis, so capture time may follow the
        // wall clock.
        let quiet = match buffer.pop(Duration::from_millis(POLL_MS as u64)) {
            Popped::Batch(batch) => {
                for (ts, frame, correlation) in batch.frames_correlated() {
                    sink.packet_correlated(ts, LINKTYPE_RAW, frame, correlation);
                    *packets += 1;
                }
                buffer.recycle(batch);
                sink.batch_analysed();
                false
            }
            Popped::Waiting => true,
            Popped::Ended => break,
        };
        if clock.due() || (quiet && sink.holding()) {
            flushed = sink.flush_finished(quiet && !stop.is_stopped());
            if flushed.is_err() {
                stop.stop();
                break;
            }
        }
    }
    let udp = udp_thread.join().map_err(|_| SensorError::Panicked)?;
    let tcp = tcp_thread.join().map_err(|_| SensorError::Panicked)?;
    flushed?;
    udp?;
    tcp?;
    Ok(stats.refused_invalid.load(Ordering::Relaxed))
}

/// What the two receive threads share.
struct Shared {
    buffer: Arc<FrameBuffer>,
    stats: Arc<HepStats>,
    auth_key: Option<Vec<u8>>,
    limits: hep::DecodeLimits,
    max_packets: Option<u64>,
    /// HEP packets taken (analysed or refused), for `max_packets`.
    taken: AtomicU64,
    settings: HepSettings,
    addr: SocketAddr,
}

impl Shared {
    /// Counts one more packet taken; false past `max_packets` (the packet is then left).
    fn take_one(&self) -> bool {
        match self.max_packets {
            None => true,
            Some(m) => self.taken.fetch_add(1, Ordering::Relaxed) < m,
        }
    }

    fn done(&self) -> bool {
        self.max_packets
            .is_some_and(|m| self.taken.load(Ordering::Relaxed) >= m)
    }

    /// Bytes the buffer before the analysis can still take.
    fn buffer_room(&self) -> usize {
        let b = &self.stats.buffer;
        let used = b.buffer_bytes_used.load(Ordering::Relaxed);
        let max = b.buffer_bytes_max.load(Ordering::Relaxed);
        max.saturating_sub(used) as usize
    }
}

/// Bytes of the buffer a receive thread reserves at a time, and then hands out to its packets
/// itself: the buffer's counters are written by the analysis too, so an atomic update of
/// them per packet moved their cache line between cores at every packet (some 12% of the
/// `hep-tcp` thread's CPU at 4 million packets/s). The buffer may look up to this much fuller
/// than it is per receive thread, which is what its peak then shows too.
const RESERVE_BYTES: usize = 64 * 1024;

/// A receive thread's batch on its way to the analysis.
struct Outbox<'a> {
    buffer: &'a FrameBuffer,
    stats: &'a HepStats,
    /// The counter of packets taken in that this thread adds to: UDP's or TCP's.
    packets_counter: &'a AtomicU64,
    batch: Batch,
    /// When the batch got its first packet.
    since: Option<Instant>,
    /// Bytes reserved in the buffer and not used yet ([`RESERVE_BYTES`]).
    credit: usize,
    /// Packets taken in and not added to `packets_counter` yet (added at each hand-over).
    packets: u64,
}

impl<'a> Outbox<'a> {
    fn new(shared: &'a Shared, packets_counter: &'a AtomicU64) -> Outbox<'a> {
        Outbox {
            buffer: &shared.buffer,
            stats: &shared.stats,
            packets_counter,
            batch: shared.buffer.empty_batch(),
            since: None,
            credit: 0,
            packets: 0,
        }
    }

    /// Room for a packet of `len` bytes: from the credit, or a new reservation of
    /// [`RESERVE_BYTES`] (or of `len` alone when the buffer has less room than that). False
    /// when the buffer is full; the buffer then counts an overrun.
    fn reserve(&mut self, len: usize) -> bool {
        if self.credit >= len {
            self.credit -= len;
            return true;
        }
        let want = RESERVE_BYTES.max(len);
        if self.buffer.try_reserve(want) {
            self.credit += want - len;
            return true;
        }
        // Less room than a reservation: this packet's own bytes may still fit, and only
        // their refusal counts as an overrun.
        self.buffer.reserve(len)
    }

    /// Counts one packet taken in, and hands the batch over when it is full.
    fn after_packet(&mut self) {
        self.packets += 1;
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        if self.batch.bytes_len() >= BATCH_BYTES_MAX {
            self.hand_over();
        }
    }

    /// Hands the batch over once its first packet has waited [`HAND_OVER_AFTER`].
    fn hand_over_if_due(&mut self) {
        if self.since.is_some_and(|t| t.elapsed() >= HAND_OVER_AFTER) {
            self.hand_over();
        }
    }

    /// Queues the batch for the analysis, gives back the credit and adds the packets taken in
    /// to the listener's counter.
    fn hand_over(&mut self) {
        if !self.batch.is_empty() {
            let full = std::mem::take(&mut self.batch);
            self.batch = self.buffer.push(full);
        }
        if self.credit > 0 {
            self.stats
                .buffer
                .buffer_bytes_used
                .fetch_sub(self.credit as u64, Ordering::Relaxed);
            self.credit = 0;
        }
        if self.packets > 0 {
            self.packets_counter
                .fetch_add(self.packets, Ordering::Relaxed);
            self.packets = 0;
        }
        self.since = None;
    }
}

/// Why a packet was not analysed.
enum Refused {
    Invalid(hep::DecodeError),
    /// Decoded, but its payload cannot be rebuilt as one UDP datagram.
    NoDatagram(hep::DatagramError),
    Auth,
    /// The buffer before the analysis was full (counted by the buffer).
    Overrun,
}

/// The `hep-udp` thread: blocking `recvmmsg` in batches. After a read that emptied the socket
/// it waits about as long as a full read ([`udp_wait_for`]) takes to arrive at the rate just
/// seen (between [`UDP_COALESCE_MIN`] and [`UDP_COALESCE_MAX`]): a wake-up, with the caches it
/// and the analysis then find cold, costs more than the datagrams it fetches one or two at a
/// time, so each read then takes dozens to hundreds, at any rate, for at most a millisecond
/// more latency. Stopped, it takes what the socket still holds.
fn receive_udp(socket: &UdpSocket, shared: &Shared, stop: &StopSignal) -> Result<(), SensorError> {
    let mut out = Outbox::new(shared, &shared.stats.udp_packets);
    let mut bufs = UdpBuffers::new();
    let mut timeout = None;
    let mut last_drops_read = Instant::now();
    let mut last_read = Instant::now();
    let wait_for = udp_wait_for(shared.stats.socket_buffer_bytes.load(Ordering::Relaxed));
    let mut stopping = false;
    loop {
        if shared.done() {
            break;
        }
        if !stopping && stop.is_stopped() {
            stopping = true;
        }
        // Blocking, with a short timeout while a batch waits to be handed over.
        let wait = if stopping {
            None
        } else if out.since.is_some() {
            Some(Duration::from_millis(1))
        } else {
            Some(Duration::from_millis(POLL_MS as u64))
        };
        if wait.is_some() && wait != timeout {
            socket
                .set_read_timeout(wait)
                .map_err(SensorError::HepReceive)?;
            timeout = wait;
        }
        let flags = if stopping {
            libc::MSG_DONTWAIT
        } else {
            libc::MSG_WAITFORONE
        };
        let n = match bufs.receive(socket, flags) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            // ECONNREFUSED and the like concern a sender, not this socket.
            Err(e) if e.raw_os_error().is_some_and(|c| c != libc::EBADF) => {
                tracing::debug!(error = %e, "receiving HEP over UDP");
                0
            }
            Err(e) => return Err(SensorError::HepReceive(e)),
        };
        for k in 0..n {
            if !shared.take_one() {
                break;
            }
            let result = take(bufs.datagram(k), shared, &mut out);
            let stats = &shared.stats;
            match result {
                Ok(()) => out.after_packet(),
                Err(Refused::Invalid(e)) => {
                    let invalid = stats.refused_invalid.fetch_add(1, Ordering::Relaxed) + 1;
                    if invalid.is_power_of_two() {
                        let from = bufs.peer(k);
                        tracing::warn!(from = %from, error = %e, invalid, "datagram is not HEP v3; skipped");
                    }
                }
                Err(Refused::NoDatagram(e)) => {
                    stats.refused_invalid.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(from = %bufs.peer(k), error = %e, "HEP packet skipped");
                }
                Err(Refused::Auth) => {
                    let refused = stats.refused_auth.fetch_add(1, Ordering::Relaxed) + 1;
                    if refused.is_power_of_two() {
                        tracing::warn!(
                            from = %bufs.peer(k),
                            refused,
                            "HEP packet without the configured authentication key, or with another; refused"
                        );
                    }
                }
                Err(Refused::Overrun) => {}
            }
        }
        if stopping && n == 0 {
            break;
        }
        if n == 0 {
            out.hand_over();
        } else {
            out.hand_over_if_due();
        }
        if last_drops_read.elapsed() >= DROPS_EVERY {
            read_drops(socket, &shared.stats);
            last_drops_read = Instant::now();
        }
        let now = Instant::now();
        let since_last_read = now - last_read;
        last_read = now;
        if !stopping && n > 0 && n < wait_for {
            // `n` datagrams came in `since_last_read`: the time the rest of a read needs.
            let wait = since_last_read / n as u32 * (wait_for - n) as u32;
            std::thread::sleep(wait.clamp(UDP_COALESCE_MIN, UDP_COALESCE_MAX));
        }
    }
    out.hand_over();
    read_drops(socket, &shared.stats);
    Ok(())
}

/// How many datagrams the `hep-udp` thread waits for between reads, given the socket's
/// buffer as the kernel reports it (twice its grant): a full read ([`UDP_BATCH`]), or fewer
/// if that many would fill more than a quarter of the buffer, so that waiting never brings
/// the socket near its drops; about 25 with the 208 KiB of an unprivileged socket under the
/// usual `net.core.rmem_max`.
fn udp_wait_for(reported_buffer_bytes: u64) -> usize {
    let granted = usize::try_from(reported_buffer_bytes / 2).unwrap_or(usize::MAX);
    (granted / 4 / UDP_DATAGRAM_ACCOUNTED_BYTES).clamp(1, UDP_BATCH)
}

fn read_drops(socket: &UdpSocket, stats: &HepStats) {
    if let Some(d) = socket_drops(socket) {
        stats.socket_drops.store(d, Ordering::Relaxed);
    }
}

/// One TCP sender.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    frames: hep::Deframer,
    last_active: Instant,
    /// Packets refused for their key on this connection (logged at the first).
    refused_auth: u64,
}

/// The `hep-tcp` thread's state: the listener and its connections, read with `poll`.
struct TcpReceiver<'a> {
    listener: TcpListener,
    shared: &'a Shared,
    out: Outbox<'a>,
    connections: Vec<Connection>,
    last_idle_sweep: Instant,
}

impl<'a> TcpReceiver<'a> {
    fn new(listener: TcpListener, shared: &'a Shared) -> Self {
        TcpReceiver {
            listener,
            shared,
            out: Outbox::new(shared, &shared.stats.tcp_packets),
            connections: Vec::new(),
            last_idle_sweep: Instant::now(),
        }
    }

    fn run(&mut self, stop: &StopSignal) -> Result<(), SensorError> {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        while !stop.is_stopped() && !self.shared.done() {
            // TCP senders wait while the analysis is behind: their connections are not read
            // until the buffer has room for what a turn reads, so TCP's flow control slows them
            // instead of Tandem dropping what it has read.
            let tcp_paused = self.shared.buffer_room()
                < TCP_READ_BYTES_PER_TURN + self.shared.settings.tcp_buffer_bytes;
            let polled = if tcp_paused {
                0
            } else {
                self.connections.len()
            };
            fds.clear();
            for fd in std::iter::once(self.listener.as_raw_fd()).chain(
                self.connections[..polled]
                    .iter()
                    .map(|c| c.stream.as_raw_fd()),
            ) {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // With packets waiting in the batch, wake up in time to hand them over; with the
            // connections paused, soon, to see whether there is room again.
            let timeout = if self.out.since.is_some() || tcp_paused {
                1
            } else {
                POLL_MS
            };
            // SAFETY: `fds` is a live array of `fds.len()` pollfd structures.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(SensorError::HepReceive(e));
                }
            }
            if n > 0 {
                // Connections first: accepting adds to them, and `fds` names the ones polled.
                let mut closed = Vec::new();
                for (i, fd) in fds[1..].iter().enumerate() {
                    if fd.revents != 0 && !self.read(i) {
                        closed.push(i);
                    }
                }
                for i in closed.into_iter().rev() {
                    self.connections.swap_remove(i);
                }
                if fds[0].revents != 0 {
                    self.accept();
                }
            }
            if n == 0 {
                self.out.hand_over();
            } else {
                self.out.hand_over_if_due();
            }
            self.sweep_idle();
        }
        // Stopped: what the kernel already holds was sent before the stop and is taken too.
        if !self.shared.done() {
            let mut i = 0;
            while i < self.connections.len() {
                if self.read(i) {
                    i += 1;
                } else {
                    self.connections.swap_remove(i);
                }
            }
        }
        self.out.hand_over();
        Ok(())
    }

    fn sweep_idle(&mut self) {
        if self.last_idle_sweep.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_idle_sweep = Instant::now();
        let idle = Duration::from_secs(self.shared.settings.tcp_idle_timeout_s);
        let stats = &self.shared.stats;
        self.connections.retain(|c| {
            let keep = c.last_active.elapsed() < idle;
            if !keep {
                tracing::info!(peer = %c.peer, idle_s = idle.as_secs(), "HEP TCP connection idle; closed");
                stats.tcp_closed_idle.fetch_add(1, Ordering::Relaxed);
            }
            keep
        });
        stats
            .tcp_connections
            .store(self.connections.len() as u64, Ordering::Relaxed);
    }

    fn accept(&mut self) {
        let stats = &self.shared.stats;
        let max = self.shared.settings.tcp_connections_max;
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if self.connections.len() >= max {
                        stats.tcp_refused_limit.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            %peer,
                            max,
                            "HEP TCP connection refused: the connection limit is reached"
                        );
                        continue; // dropping the stream closes it
                    }
                    if let Err(e) = set_nonblocking(stream.as_raw_fd()) {
                        tracing::warn!(%peer, error = %e, "HEP TCP connection dropped");
                        continue;
                    }
                    stats.tcp_accepted.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(%peer, "HEP sender connected over TCP");
                    self.connections.push(Connection {
                        stream,
                        peer,
                        frames: hep::Deframer::new(self.shared.settings.tcp_buffer_bytes),
                        last_active: Instant::now(),
                        refused_auth: 0,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted: the
                    // listener goes on.
                    tracing::warn!(addr = %self.shared.addr, error = %e, "accepting a HEP TCP connection failed");
                    break;
                }
            }
        }
        stats
            .tcp_connections
            .store(self.connections.len() as u64, Ordering::Relaxed);
    }

    /// Reads what connection `i` has sent and takes its whole packets; false when it is to be
    /// closed (end of stream, an error, or bytes that are not HEP).
    fn read(&mut self, i: usize) -> bool {
        let shared = self.shared;
        let stats = &shared.stats;
        let mut read = 0;
        while read < TCP_READ_BYTES_PER_TURN {
            let conn = &mut self.connections[i];
            let n = match conn.stream.read(conn.frames.spare()) {
                Ok(0) => {
                    tracing::info!(peer = %conn.peer, "HEP sender closed its TCP connection");
                    if conn.frames.buffered() > 0 {
                        tracing::warn!(peer = %conn.peer, bytes = conn.frames.buffered(), "the HEP TCP stream ended inside a packet");
                    }
                    return false;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::info!(peer = %conn.peer, error = %e, "HEP TCP connection failed; closed");
                    return false;
                }
            };
            read += n;
            conn.frames.filled(n);
            conn.last_active = Instant::now();
            let peer = conn.peer;
            loop {
                let conn = &mut self.connections[i];
                let frame = match conn.frames.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        close_invalid(stats, peer, &e);
                        return false;
                    }
                };
                if !shared.take_one() {
                    return true;
                }
                match take(frame, shared, &mut self.out) {
                    Ok(()) => self.out.after_packet(),
                    Err(Refused::Invalid(e)) => {
                        close_invalid(stats, peer, &e);
                        return false;
                    }
                    Err(Refused::NoDatagram(e)) => {
                        stats.refused_invalid.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, error = %e, "HEP packet skipped");
                    }
                    Err(Refused::Auth) => {
                        stats.refused_auth.fetch_add(1, Ordering::Relaxed);
                        let conn = &mut self.connections[i];
                        conn.refused_auth += 1;
                        if conn.refused_auth.is_power_of_two() {
                            tracing::warn!(
                                %peer,
                                refused = conn.refused_auth,
                                "HEP packets over TCP without the configured authentication key, or with another; refused"
                            );
                        }
                    }
                    Err(Refused::Overrun) => {}
                }
            }
        }
        true
    }
}

fn close_invalid(stats: &HepStats, peer: SocketAddr, e: &hep::DecodeError) {
    stats.refused_invalid.fetch_add(1, Ordering::Relaxed);
    stats.tcp_closed_invalid.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(%peer, error = %e, "HEP TCP connection sent bytes that are not HEP v3; closed (the sender must reconnect and start at a packet)");
}

/// Decodes one packet, checks its key and appends the IP packet it carries to the batch.
fn take(bytes: &[u8], shared: &Shared, out: &mut Outbox<'_>) -> Result<(), Refused> {
    let p = hep::decode(bytes, &shared.limits).map_err(Refused::Invalid)?;
    if let Some(key) = shared.auth_key.as_deref()
        && !hep::auth_key_matches(key, p.auth_key)
    {
        return Err(Refused::Auth);
    }
    let payload = p.payload.bytes().len();
    let (ip_header, limit) = if p.src_ip.is_ipv4() {
        (20, usize::from(u16::MAX))
    } else {
        // IPv6's length field counts what follows its 40-byte header.
        (40, usize::from(u16::MAX) + 40)
    };
    let len = ip_header + 8 + payload;
    if len > limit {
        return Err(Refused::NoDatagram(hep::DatagramError::TooLarge {
            bytes: payload,
        }));
    }
    if !out.reserve(len) {
        return Err(Refused::Overrun);
    }
    let ts_ns = i64::from(p.ts_sec) * 1_000_000_000 + i64::from(p.ts_usec) * 1_000;
    let mut rebuilt = Ok(());
    out.batch
        .push_with(ts_ns, |bytes| rebuilt = p.to_udp_datagram(bytes));
    // Only SIP's: the linker reads it from an INVITE.
    if let Some(id) = p
        .correlation_id
        .filter(|_| p.protocol_type == hep::ProtocolType::SIP)
    {
        out.batch.correlate_last(id);
    }
    // The sizes were checked above, so rebuilding cannot fail; were it to, the frame is empty
    // and the monitor counts it as malformed.
    rebuilt.map_err(Refused::NoDatagram)
}

/// The buffers `recvmmsg` fills: per datagram a slot of [`UDP_SLOT_BYTES`] in `slots`, then
/// the rest of [`UDP_DATAGRAM_BYTES_MAX`] in `overflow`, and its sender's address.
struct UdpBuffers {
    slots: Vec<u8>,
    /// Touched only by datagrams longer than a slot (the kernel maps the zeroed pages when
    /// they are first written).
    overflow: Vec<u8>,
    /// A datagram longer than a slot, made whole.
    joined: Vec<u8>,
    iov: Vec<[libc::iovec; 2]>,
    addrs: Vec<libc::sockaddr_storage>,
    headers: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iov` and `headers` point into `slots`, `overflow`, `iov` and
// `addrs`, which the struct owns (on the heap, so they stay put when it moves); nothing else
// holds them.
unsafe impl Send for UdpBuffers {}

/// Bytes of one datagram's region in `UdpBuffers::overflow`.
const UDP_OVERFLOW_BYTES: usize = UDP_DATAGRAM_BYTES_MAX - UDP_SLOT_BYTES;

impl UdpBuffers {
    fn new() -> UdpBuffers {
        let mut b = UdpBuffers {
            slots: vec![0; UDP_BATCH * UDP_SLOT_STRIDE],
            overflow: vec![0; UDP_BATCH * UDP_OVERFLOW_BYTES],
            joined: Vec::new(),
            iov: Vec::with_capacity(UDP_BATCH),
            // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; UDP_BATCH],
            headers: Vec::with_capacity(UDP_BATCH),
        };
        for i in 0..UDP_BATCH {
            b.iov.push([
                libc::iovec {
                    iov_base: b.slots[i * UDP_SLOT_STRIDE..].as_mut_ptr().cast(),
                    iov_len: UDP_SLOT_BYTES,
                },
                libc::iovec {
                    iov_base: b.overflow[i * UDP_OVERFLOW_BYTES..].as_mut_ptr().cast(),
                    iov_len: UDP_OVERFLOW_BYTES,
                },
            ]);
        }
        for i in 0..UDP_BATCH {
            // SAFETY: mmsghdr is plain data; all zeroes is a valid value, filled in below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = b.iov[i].as_mut_ptr();
            h.msg_hdr.msg_iovlen = 2;
            h.msg_hdr.msg_name = (&mut b.addrs[i] as *mut libc::sockaddr_storage).cast();
            b.headers.push(h);
        }
        b
    }

    /// Receives up to [`UDP_BATCH`] datagrams (`flags`: `MSG_WAITFORONE` waits for the first
    /// up to the socket's timeout, `MSG_DONTWAIT` does not wait); how many came.
    fn receive(&mut self, socket: &UdpSocket, flags: libc::c_int) -> std::io::Result<usize> {
        for h in &mut self.headers {
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: `headers` holds UDP_BATCH headers whose iovecs and address buffers point
        // into `slots`, `overflow` and `addrs`, alive and unaliased for the call.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                UDP_BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Datagram `k` of the last [`UdpBuffers::receive`] (cut to the largest datagram if it was
    /// larger); one longer than a slot is joined from its two parts first.
    fn datagram(&mut self, k: usize) -> &[u8] {
        let len = (self.headers[k].msg_len as usize).min(UDP_DATAGRAM_BYTES_MAX);
        let slot = &self.slots[k * UDP_SLOT_STRIDE..];
        if len <= UDP_SLOT_BYTES {
            return &slot[..len];
        }
        self.joined.clear();
        self.joined.extend_from_slice(&slot[..UDP_SLOT_BYTES]);
        let rest = &self.overflow[k * UDP_OVERFLOW_BYTES..];
        self.joined.extend_from_slice(&rest[..len - UDP_SLOT_BYTES]);
        &self.joined
    }

    /// The sender of datagram `k`, for a log line.
    fn peer(&self, k: usize) -> String {
        let a = &self.addrs[k];
        match i32::from(a.ss_family) {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let v4: &libc::sockaddr_in =
                    unsafe { &*(a as *const libc::sockaddr_storage).cast() };
                SocketAddr::from((
                    u32::from_be(v4.sin_addr.s_addr).to_be_bytes(),
                    u16::from_be(v4.sin_port),
                ))
                .to_string()
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let v6: &libc::sockaddr_in6 =
                    unsafe { &*(a as *const libc::sockaddr_storage).cast() };
                SocketAddr::from((v6.sin6_addr.s6_addr, u16::from_be(v6.sin6_port))).to_string()
            }
            _ => "an unknown sender".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_loses_its_line_end_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "s3cret\r\n").unwrap();
        assert_eq!(AuthKey::File(path.clone()).load().unwrap(), b"s3cret");
        std::fs::write(&path, "\n").unwrap();
        let e = AuthKey::File(path.clone()).load().unwrap_err().to_string();
        assert!(e.contains("is empty") && e.contains("key"), "{e}");
        let e = AuthKey::File(dir.path().join("missing"))
            .load()
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read") && e.contains("missing"), "{e}");
        assert!(!format!("{:?}", AuthKey::Key(b"s3cret".to_vec())).contains("s3cret"));
    }

    #[test]
    fn the_wait_between_reads_stays_within_a_quarter_of_the_socket_buffer() {
        // Privileged: the 32 MiB asked for (the kernel reports twice that).
        assert_eq!(udp_wait_for(2 * HEP_SOCKET_BUFFER_BYTES as u64), UDP_BATCH);
        // The usual net.core.rmem_max of an unprivileged socket.
        assert_eq!(udp_wait_for(2 * 212_992), 26);
        assert_eq!(udp_wait_for(0), 1);
    }

    #[test]
    fn datagrams_longer_than_a_slot_come_out_whole() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sizes = [1, UDP_SLOT_BYTES, UDP_SLOT_BYTES + 1, 9_000, 300, 65_507];
        let datagrams: Vec<Vec<u8>> = sizes
            .iter()
            .map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect())
            .collect();
        for d in &datagrams {
            tx.send_to(d, rx.local_addr().unwrap()).unwrap();
        }
        let mut bufs = UdpBuffers::new();
        let mut got = Vec::new();
        while got.len() < datagrams.len() {
            let n = bufs.receive(&rx, libc::MSG_WAITFORONE).unwrap();
            for k in 0..n {
                got.push(bufs.datagram(k).to_vec());
            }
        }
        assert_eq!(got, datagrams);
    }

    #[test]
    fn udp_and_tcp_share_the_port_and_the_buffer_is_sized() {
        let l = HepListener::bind("127.0.0.1:0".parse().unwrap(), &HepSettings::default()).unwrap();
        let addr = l.local_addr();
        assert_ne!(addr.port(), 0);
        assert_eq!(l.tcp.local_addr().unwrap(), addr);
        assert!(l.stats.snapshot().socket_buffer_bytes > 0);
        assert_eq!(socket_drops(&l.udp), Some(0));
        // The UDP socket blocks (with a read timeout), or the idle receive thread would spin;
        // the TCP listener is polled, so it does not.
        let flags = |fd| {
            // SAFETY: fcntl on a descriptor the listener owns; no memory is passed.
            unsafe { libc::fcntl(fd, libc::F_GETFL) }
        };
        assert_eq!(flags(l.udp.as_raw_fd()) & libc::O_NONBLOCK, 0);
        assert_ne!(flags(l.tcp.as_raw_fd()) & libc::O_NONBLOCK, 0);
    }
}
