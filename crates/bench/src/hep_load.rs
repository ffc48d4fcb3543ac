//! The HEP load of `tandem bench collector --part hep` (`collector_hep`, which measures Tandem
//! and heplify-server on it), and the machine's bound beside them:
//!
//! - [`HepLoad`]: a synthetic capture of concurrent G.711 calls (`monitor::synth`) encoded as
//!   HEP v3 once, in memory, as a thin sensor's `--hep-send` encodes it.
//! - [`send`]: a sender thread as fast as it goes (`sendmmsg` in batches of 64 for UDP, 256 KiB
//!   writes for TCP), or paced over UDP (`send_datagrams`: one `sendmmsg` batch).
//! - [`floor`]: the same sender to a bare receiver that reads (`recvmmsg` / `read`) and
//!   discards: what this machine's loopback and sender carry at all, and the receiving CPU a
//!   socket costs before any HEP is decoded. Losses the kernel counts are read from
//!   `Udp: RcvbufErrors` (/proc/net/snmp).
//!
//! Never: reports a figure it did not measure in that run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use monitor::decode::peek_udp;
use monitor::pcap::CaptureReader;
use monitor::synth::{SynthConfig, generate};
use serde::Serialize;

/// UDP or TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Udp,
    Tcp,
}

/// The HEP packets of a synthetic capture, encoded back to back.
pub struct HepLoad {
    pub bytes: Vec<u8>,
    /// (offset, length) of each packet in `bytes`.
    pub packets: Vec<(usize, usize)>,
    pub calls: usize,
    /// Of `packets`, those carrying SIP (the rest carry RTP).
    pub sip_packets: u64,
}

impl HepLoad {
    /// Synthesises `calls` concurrent calls of `duration_s`, the first starting at `start_ns`
    /// (ns since the epoch), into `dir`, and encodes every UDP datagram as HEP v3 (capture id
    /// 2001, no key) as a thin sensor's `--hep-send` does, stamped with its capture time.
    pub fn synthesise(
        calls: usize,
        duration_s: u64,
        start_ns: i64,
        dir: &Path,
    ) -> anyhow::Result<HepLoad> {
        let pcap = dir.join("hep-load.pcap");
        let cfg = SynthConfig {
            calls,
            call_interval_us: 1_000,
            call_duration_ms: duration_s * 1_000,
            failures: false,
            start_ns,
            ..SynthConfig::default()
        };
        let file = std::fs::File::create(&pcap).with_context(|| pcap.display().to_string())?;
        generate(&cfg, std::io::BufWriter::new(file))?;
        let mut reader = CaptureReader::open(&pcap).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut load = HepLoad {
            bytes: Vec::new(),
            packets: Vec::new(),
            calls,
            sip_packets: 0,
        };
        while let Some(p) = reader.next_packet().map_err(|e| anyhow::anyhow!("{e}"))? {
            let Some((src, dst, payload)) = peek_udp(p.link_type, p.data) else {
                continue;
            };
            let us = p.ts_ns / 1_000;
            let at = load.bytes.len();
            let is_sip = sip::looks_like_sip(payload);
            load.sip_packets += u64::from(is_sip);
            hep::HepPacket {
                ip_protocol: 17,
                src_ip: src.ip(),
                dst_ip: dst.ip(),
                src_port: src.port(),
                dst_port: dst.port(),
                ts_sec: (us / 1_000_000) as u32,
                ts_usec: (us % 1_000_000) as u32,
                protocol_type: if is_sip {
                    hep::ProtocolType::SIP
                } else {
                    hep::ProtocolType::RTP
                },
                capture_id: 2001,
                keep_alive_timer: None,
                auth_key: None,
                payload: hep::Payload::Raw(payload),
                correlation_id: None,
            }
            .encode(&mut load.bytes)?;
            load.packets.push((at, load.bytes.len() - at));
        }
        drop(reader);
        let _ = std::fs::remove_file(&pcap);
        Ok(load)
    }
}

/// What the sender did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sent {
    pub packets: u64,
    pub bytes: u64,
    pub wall_s: f64,
    /// CPU seconds of the sending thread (its system time is most of loopback's work).
    pub cpu_s: f64,
    pub packets_per_s: f64,
}

/// The receivers the bound is measured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloorKind {
    /// UDP: the kernel's default receive buffer and one `recv` per datagram, as a plain
    /// collector reads (heplify-server's loop is of this kind).
    PlainSocket,
    /// UDP: the receive buffer Tandem asks for and `recvmmsg` in batches of 64; TCP: reads of
    /// 1 MiB cut into packets by `hep::Deframer`. Nothing is decoded: the cost of the socket.
    Bare,
}

/// The machine's bound: the same sender to a receiver that only reads.
#[derive(Debug, Clone, Serialize)]
pub struct FloorRun {
    pub transport: Transport,
    pub kind: FloorKind,
    pub sent: Sent,
    pub received: u64,
    pub receiver_cpu_s: f64,
    pub received_per_s: f64,
    /// Packets received per CPU second of the bare receiver.
    pub received_per_s_per_core: f64,
    pub snmp_rcvbuf_errors: u64,
}

/// `Udp: RcvbufErrors` of /proc/net/snmp (system-wide), when readable.
pub fn snmp_udp_rcvbuf_errors() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
    let names = udp.next()?;
    let values = udp.next()?;
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// Sends every packet of `load` to `to` over `transport`, as fast as it goes (UDP: at most
/// `rate_pps` when not 0); stops early when `stop` is set.
pub fn send(
    load: &HepLoad,
    to: SocketAddr,
    transport: Transport,
    rate_pps: u64,
    stop: &AtomicBool,
) -> anyhow::Result<Sent> {
    let cpu0 = procstat::thread_cpu_seconds().unwrap_or(0.0);
    let started = Instant::now();
    let mut sent = Sent::default();
    match transport {
        Transport::Udp => {
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            socket.connect(to)?;
            const BATCH: usize = 64;
            let mut iov: Vec<libc::iovec> = Vec::with_capacity(BATCH);
            let mut headers: Vec<libc::mmsghdr> = Vec::with_capacity(BATCH);
            let mut next = 0;
            while next < load.packets.len() && !stop.load(Ordering::Relaxed) {
                if rate_pps > 0 {
                    let due = Duration::from_secs_f64(next as f64 / rate_pps as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                let end = (next + BATCH).min(load.packets.len());
                next +=
                    send_datagrams(&socket, load, next..end, &mut iov, &mut headers, &mut sent)?;
            }
        }
        Transport::Tcp => {
            let mut stream = TcpStream::connect(to)?;
            stream.set_nodelay(true)?;
            const WRITE: usize = 256 * 1024;
            let mut at = 0;
            while at < load.bytes.len() && !stop.load(Ordering::Relaxed) {
                let end = (at + WRITE).min(load.bytes.len());
                stream.write_all(&load.bytes[at..end])?;
                at = end;
            }
            sent.bytes = at as u64;
            sent.packets = if at == load.bytes.len() {
                load.packets.len() as u64
            } else {
                load.packets.partition_point(|&(o, l)| o + l <= at) as u64
            };
            stream.shutdown(std::net::Shutdown::Write)?;
        }
    }
    sent.wall_s = started.elapsed().as_secs_f64();
    sent.cpu_s = procstat::thread_cpu_seconds().unwrap_or(0.0) - cpu0;
    sent.packets_per_s = sent.packets as f64 / sent.wall_s.max(1e-9);
    Ok(sent)
}

/// The same sender to a receiver that reads and discards: the machine's bound.
pub fn floor(
    load: &HepLoad,
    transport: Transport,
    kind: FloorKind,
    udp_rate_pps: u64,
) -> anyhow::Result<FloorRun> {
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let snmp0 = snmp_udp_rcvbuf_errors();
    let (to, receiver) = match transport {
        Transport::Udp => {
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            let to = socket.local_addr()?;
            socket.set_read_timeout(Some(Duration::from_millis(100)))?;
            if kind == FloorKind::Bare {
                force_receive_buffer(&socket, sensor::hep::HEP_SOCKET_BUFFER_BYTES);
            }
            let (received, done) = (received.clone(), done.clone());
            let t = std::thread::spawn(move || {
                let cpu0 = procstat::thread_cpu_seconds().unwrap_or(0.0);
                match kind {
                    FloorKind::PlainSocket => {
                        let mut buf = vec![0u8; 65_536];
                        while !done.load(Ordering::Relaxed) {
                            if socket.recv(&mut buf).is_ok() {
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    FloorKind::Bare => {
                        let mut bufs = MultiRecv::new();
                        while !done.load(Ordering::Relaxed) {
                            let n = bufs.recv(&socket);
                            received.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                }
                procstat::thread_cpu_seconds().unwrap_or(0.0) - cpu0
            });
            (to, t)
        }
        Transport::Tcp => {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let to = listener.local_addr()?;
            let received = received.clone();
            let t = std::thread::spawn(move || {
                let cpu0 = procstat::thread_cpu_seconds().unwrap_or(0.0);
                let Ok((mut s, _)) = listener.accept() else {
                    return 0.0;
                };
                let mut frames = hep::Deframer::new(1 << 20);
                loop {
                    match s.read(frames.spare()) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            frames.filled(n);
                            // Framing only: cut packets, decode nothing.
                            while let Ok(Some(_)) = frames.next_frame() {
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                procstat::thread_cpu_seconds().unwrap_or(0.0) - cpu0
            });
            (to, t)
        }
    };
    let stop = AtomicBool::new(false);
    let sent = send(load, to, transport, udp_rate_pps, &stop)?;
    let mut last = (0u64, Instant::now());
    while received.load(Ordering::Relaxed) < sent.packets {
        let r = received.load(Ordering::Relaxed);
        if r != last.0 {
            last = (r, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(1) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    done.store(true, Ordering::Relaxed);
    let receiver_cpu_s = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))?;
    let got = received.load(Ordering::Relaxed);
    let snmp = match (snmp0, snmp_udp_rcvbuf_errors()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    Ok(FloorRun {
        transport,
        kind,
        sent,
        received: got,
        receiver_cpu_s,
        received_per_s: got as f64 / sent.wall_s.max(1e-9),
        received_per_s_per_core: got as f64 / receiver_cpu_s.max(1e-9),
        snmp_rcvbuf_errors: snmp,
    })
}

/// Asks for `bytes` of receive buffer past `net.core.rmem_max` (root), as Tandem does.
fn force_receive_buffer(socket: &UdpSocket, bytes: usize) {
    let v = bytes as libc::c_int;
    // SAFETY: `v` outlives the call and the length is its size.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// `recvmmsg` of up to 64 datagrams, waiting for the first (the socket's read timeout).
struct MultiRecv {
    data: Vec<u8>,
    iov: Vec<libc::iovec>,
    headers: Vec<libc::mmsghdr>,
}

impl MultiRecv {
    const N: usize = 64;
    const SLOT: usize = 2048;

    fn new() -> MultiRecv {
        let mut m = MultiRecv {
            data: vec![0; Self::N * Self::SLOT],
            iov: Vec::with_capacity(Self::N),
            headers: Vec::with_capacity(Self::N),
        };
        for i in 0..Self::N {
            m.iov.push(libc::iovec {
                iov_base: m.data[i * Self::SLOT..].as_mut_ptr().cast(),
                iov_len: Self::SLOT,
            });
        }
        for i in 0..Self::N {
            // SAFETY: mmsghdr is plain data; all zeroes is valid, filled in here.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut m.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            m.headers.push(h);
        }
        m
    }

    fn recv(&mut self, socket: &UdpSocket) -> usize {
        // SAFETY: the headers point at iovecs into `data`, owned by `self` and alive for the
        // call.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                Self::N as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        n.max(0) as usize
    }
}

/// Sends `load.packets[range]` on the connected UDP `socket` in one `sendmmsg` (`iov` and
/// `headers` are the caller's, reused from call to call) and counts what went in `sent`; the
/// number of datagrams sent, 0 when the kernel had no room just now (ENOBUFS, EAGAIN, a
/// refused port, a signal), to be tried again.
pub(crate) fn send_datagrams(
    socket: &UdpSocket,
    load: &HepLoad,
    range: std::ops::Range<usize>,
    iov: &mut Vec<libc::iovec>,
    headers: &mut Vec<libc::mmsghdr>,
    sent: &mut Sent,
) -> anyhow::Result<usize> {
    iov.clear();
    headers.clear();
    for &(at, len) in &load.packets[range.clone()] {
        iov.push(libc::iovec {
            iov_base: load.bytes[at..].as_ptr() as *mut libc::c_void,
            iov_len: len,
        });
    }
    for v in iov.iter_mut() {
        // SAFETY: mmsghdr is plain data; all zeroes is valid, filled in here.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
        headers.push(h);
    }
    // SAFETY: the headers point at iovecs into `load.bytes`, alive for the call; the socket is
    // connected, so no address is needed.
    let n = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            headers.as_mut_ptr(),
            headers.len() as libc::c_uint,
            0,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOBUFS | libc::EAGAIN | libc::ECONNREFUSED | libc::EINTR)
        ) {
            return Ok(0);
        }
        return Err(e).context("sending HEP over UDP");
    }
    let n = n as usize;
    sent.bytes += load.packets[range.start..range.start + n]
        .iter()
        .map(|&(_, len)| len as u64)
        .sum::<u64>();
    sent.packets += n as u64;
    Ok(n)
}
