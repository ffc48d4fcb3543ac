//! A capture played to a HEP v3 collector at its own pace, as a Kamailio `siptrace` or heplify
//! agent would mirror live traffic: each UDP datagram of the pcap is sent over UDP as one HEP
//! packet, at the moment its place in the capture says, stamped with the time it is sent. So a
//! synthetic capture of long calls becomes calls in progress on a running Tandem (its live page,
//! for the console's screenshots).

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use monitor::decode::peek_udp;
use monitor::pcap::CaptureReader;

/// Capture agent id the replayed packets carry.
pub const CAPTURE_ID: u32 = 4242;

/// What a replay did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Replayed {
    pub packets: u64,
    /// Frames that were not plain UDP (skipped).
    pub skipped: u64,
}

/// Sends `pcap`'s UDP datagrams to `collector` as HEP, paced as captured (shifted so the first
/// goes now), until the capture ends or `stop` is set.
pub fn replay(pcap: &Path, collector: SocketAddr, stop: &AtomicBool) -> anyhow::Result<Replayed> {
    let mut reader = CaptureReader::open(pcap).map_err(|e| anyhow::anyhow!("{e}"))?;
    let socket = UdpSocket::bind(("127.0.0.1", 0)).context("a UDP socket for HEP")?;
    let started = Instant::now();
    let wall0_us = now_us();
    let mut first_ns = None;
    let mut done = Replayed::default();
    while !stop.load(Ordering::Relaxed) {
        let Some(p) = reader.next_packet().map_err(|e| anyhow::anyhow!("{e}"))? else {
            break;
        };
        let Some((src, dst, payload)) = peek_udp(p.link_type, p.data) else {
            done.skipped += 1;
            continue;
        };
        let offset_ns = p.ts_ns - *first_ns.get_or_insert(p.ts_ns);
        let due = Duration::from_nanos(offset_ns.max(0) as u64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        let at_us = wall0_us + offset_ns / 1000;
        let kind = if sip::looks_like_sip(payload) {
            hep::ProtocolType::SIP
        } else {
            hep::ProtocolType::RTP
        };
        let packet = hep_udp(src, dst, kind, payload, at_us)?;
        socket
            .send_to(&packet, collector)
            .with_context(|| format!("sending HEP to {collector}"))?;
        done.packets += 1;
    }
    Ok(done)
}

/// One UDP datagram from `src` to `dst` as a HEP v3 packet of `kind`, captured at `at_us` (µs
/// since the epoch), as an agent with id [`CAPTURE_ID`] sends it.
pub fn hep_udp(
    src: SocketAddr,
    dst: SocketAddr,
    kind: hep::ProtocolType,
    payload: &[u8],
    at_us: i64,
) -> anyhow::Result<Vec<u8>> {
    hep::HepPacket {
        ip_protocol: 17,
        src_ip: src.ip(),
        dst_ip: dst.ip(),
        src_port: src.port(),
        dst_port: dst.port(),
        ts_sec: u32::try_from(at_us.div_euclid(1_000_000)).unwrap_or(0),
        ts_usec: at_us.rem_euclid(1_000_000) as u32,
        protocol_type: kind,
        capture_id: CAPTURE_ID,
        keep_alive_timer: None,
        auth_key: None,
        payload: hep::Payload::Raw(payload),
        correlation_id: None,
    }
    .to_bytes()
    .map_err(|e| anyhow::anyhow!("encoding HEP: {e}"))
}

/// [`replay`] on a thread of its own; setting the returned flag stops it.
pub fn replay_in_background(
    pcap: &Path,
    collector: SocketAddr,
) -> (
    Arc<AtomicBool>,
    std::thread::JoinHandle<anyhow::Result<Replayed>>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, path) = (stop.clone(), pcap.to_owned());
    let thread = std::thread::spawn(move || replay(&path, collector, &flag));
    (stop, thread)
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
