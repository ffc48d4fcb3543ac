//! Synthetic captures with known ground truth: N concurrent G.711 calls (SIP over UDP, RTP both
//! ways) with configurable loss, jitter, reordering and duplicates. Used by the tests at small
//! sizes and by `tandem bench capture` at large ones.
//!
//! The generator is event driven: a heap holds each call's next 20 ms tick and the packets in
//! flight, so memory grows with the number of concurrent calls, not with the capture's length,
//! and packets come out in non-decreasing time order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::pcap::PcapWriter;

pub mod fax;

/// Frame builders (no checksums: monitors and tshark do not verify them by default).
pub mod packet {
    use std::net::{IpAddr, SocketAddr};

    /// Appends an IPv4 or IPv6 header (by the addresses' family) and `payload`.
    pub fn write_ip(out: &mut Vec<u8>, src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = (20 + payload.len()) as u16;
                out.extend_from_slice(&[0x45, 0]);
                out.extend_from_slice(&total.to_be_bytes());
                out.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.extend_from_slice(&[0x60, 0, 0, 0]);
                out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
                out.extend_from_slice(&[proto, 64]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
            }
            _ => panic!("write_ip: mixed address families"),
        }
        out.extend_from_slice(payload);
    }

    pub fn ipv4(src: IpAddr, dst: IpAddr, proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(40 + payload.len());
        write_ip(&mut v, src, dst, proto, payload);
        v
    }

    fn udp_header(out: &mut Vec<u8>, src: SocketAddr, dst: SocketAddr, len: usize) {
        out.extend_from_slice(&src.port().to_be_bytes());
        out.extend_from_slice(&dst.port().to_be_bytes());
        out.extend_from_slice(&((8 + len) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }

    /// Appends Ethernet + IP + UDP + payload to `out`.
    pub fn write_ethernet_udp(out: &mut Vec<u8>, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        out.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        out.extend_from_slice(if src.is_ipv4() {
            &[0x08, 0x00]
        } else {
            &[0x86, 0xdd]
        });
        let (ip_len, v4) = if src.is_ipv4() {
            (20, true)
        } else {
            (40, false)
        };
        let start = out.len();
        // Write the IP header with a placeholder payload, then the UDP header and payload.
        write_ip(out, src.ip(), dst.ip(), 17, &[]);
        let total = ip_len + 8 + payload.len();
        if v4 {
            out[start + 2..start + 4].copy_from_slice(&(total as u16).to_be_bytes());
        } else {
            out[start + 4..start + 6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        }
        udp_header(out, src, dst, payload.len());
        out.extend_from_slice(payload);
    }

    pub fn ethernet_udp(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(62 + payload.len());
        write_ethernet_udp(&mut v, src, dst, payload);
        v
    }

    /// A raw IP packet carrying UDP.
    pub fn ipv4_udp(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
        let mut udp = Vec::with_capacity(8 + payload.len());
        udp_header(&mut udp, src, dst, payload.len());
        udp.extend_from_slice(payload);
        ipv4(src.ip(), dst.ip(), 17, &udp)
    }

    /// A UDP datagram split into raw-IP fragments of at most `chunk` payload bytes (rounded
    /// down to a multiple of 8), IPv4 or IPv6 by the addresses' family.
    pub fn fragmented_udp(
        src: SocketAddr,
        dst: SocketAddr,
        body: &[u8],
        chunk: usize,
        id: u32,
    ) -> Vec<Vec<u8>> {
        let mut udp = Vec::with_capacity(8 + body.len());
        udp_header(&mut udp, src, dst, body.len());
        udp.extend_from_slice(body);
        let chunk = chunk / 8 * 8;
        let mut frames = Vec::new();
        for (i, part) in udp.chunks(chunk).enumerate() {
            let offset = i * chunk;
            let more = offset + part.len() < udp.len();
            let mut f = Vec::new();
            match (src.ip(), dst.ip()) {
                (IpAddr::V4(_), IpAddr::V4(_)) => {
                    write_ip(&mut f, src.ip(), dst.ip(), 17, part);
                    f[4..6].copy_from_slice(&(id as u16).to_be_bytes());
                    let fo = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
                    f[6..8].copy_from_slice(&fo.to_be_bytes());
                }
                _ => {
                    let mut ext = vec![17, 0];
                    ext.extend_from_slice(&((offset as u16) | more as u16).to_be_bytes());
                    ext.extend_from_slice(&id.to_be_bytes());
                    ext.extend_from_slice(part);
                    write_ip(&mut f, src.ip(), dst.ip(), 44, &ext);
                }
            }
            frames.push(f);
        }
        frames
    }

    /// A 12-byte RTP header followed by `payload_len` bytes of `fill`.
    #[allow(clippy::too_many_arguments)]
    pub fn write_rtp(
        out: &mut Vec<u8>,
        pt: u8,
        marker: bool,
        seq: u16,
        ts: u32,
        ssrc: u32,
        payload_len: usize,
        fill: u8,
    ) {
        out.push(0x80);
        out.push(pt | if marker { 0x80 } else { 0 });
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&ts.to_be_bytes());
        out.extend_from_slice(&ssrc.to_be_bytes());
        out.resize(out.len() + payload_len, fill);
    }
}

/// A capture written one UDP datagram at a time, for tests that need a call's exact packets
/// (a re-INVITE to T.38, an SDES key) rather than [`generate`]'s many alike.
pub struct PcapBuilder {
    w: PcapWriter<io::BufWriter<std::fs::File>>,
    frame: Vec<u8>,
}

impl PcapBuilder {
    pub fn create(path: &std::path::Path) -> io::Result<PcapBuilder> {
        let file = io::BufWriter::new(std::fs::File::create(path)?);
        Ok(PcapBuilder {
            w: PcapWriter::new(file, 1, false)?,
            frame: Vec::with_capacity(2048),
        })
    }

    /// One Ethernet/IPv4/UDP frame at `t_ns`.
    pub fn udp(&mut self, t_ns: i64, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        self.frame.clear();
        packet::write_ethernet_udp(&mut self.frame, src, dst, payload);
        self.w
            .write_packet(t_ns, &self.frame)
            .expect("writing a test capture");
    }

    /// Flushes the file.
    pub fn finish(self) -> io::Result<()> {
        let mut inner = self.w.into_inner();
        io::Write::flush(&mut inner)
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    pub calls: usize,
    /// Time between call starts; with `call_duration_ms` this sets the concurrency.
    pub call_interval_us: u64,
    /// Media time of an answered call (RTP both ways).
    pub call_duration_ms: u64,
    /// Without RTP: SIP only.
    pub rtp: bool,
    /// 0 (PCMU) or 8 (PCMA).
    pub payload_type: u8,
    pub ptime_ms: u32,
    /// Per packet probabilities, in percent.
    pub loss_pct: f64,
    pub duplicate_pct: f64,
    pub reorder_pct: f64,
    /// Each packet is delayed by a uniform 0..jitter_ms.
    pub jitter_ms: f64,
    /// Every tenth call fails: call 10k+9 gets 486 Busy Here, call 10k+8 is cancelled.
    pub failures: bool,
    pub seed: u64,
    pub start_ns: i64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            calls: 10,
            call_interval_us: 50_000,
            call_duration_ms: 2_000,
            rtp: true,
            payload_type: 8,
            ptime_ms: 20,
            loss_pct: 0.0,
            duplicate_pct: 0.0,
            reorder_pct: 0.0,
            jitter_ms: 0.0,
            failures: true,
            seed: 1,
            start_ns: 1_700_000_000_000_000_000,
        }
    }
}

/// How a synthetic call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthOutcome {
    /// Answered; hung up by the caller (even calls) or the callee (odd calls).
    Answered {
        caller_hangs_up: bool,
    },
    Busy,
    Cancelled,
}

/// Ground truth of one RTP stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SynthStream {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub ssrc: u32,
    pub sent: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

#[derive(Debug, Clone)]
pub struct SynthCall {
    pub call_id: String,
    pub caller: String,
    pub called: String,
    pub outcome: SynthOutcome,
    pub streams: [SynthStream; 2],
}

/// Ground truth of a generated capture.
#[derive(Debug, Clone, Default)]
pub struct GroundTruth {
    pub calls: Vec<SynthCall>,
    pub packets: u64,
    pub rtp_packets: u64,
    pub sip_messages: u64,
}

/// A small deterministic PRNG (xorshift64*), enough for loss and jitter patterns.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn chance(&mut self, pct: f64) -> bool {
        pct > 0.0 && self.unit() * 100.0 < pct
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Send the SIP message number `step` of call `call`.
    Sip { call: u32, step: u8 },
    /// A 20 ms media tick of `call` (both directions send).
    Tick { call: u32, n: u32 },
    /// An RTP packet arrives.
    Rtp { call: u32, dir: u8, n: u32 },
}

fn caller_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10,
        1 + (i >> 16) as u8,
        (i >> 8) as u8,
        i as u8,
    ))
}

fn callee_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        172,
        16 + (i >> 16) as u8,
        (i >> 8) as u8,
        i as u8,
    ))
}

fn rtp_port(i: usize) -> u16 {
    10_000 + 2 * (i % 20_000) as u16
}

/// The SIP messages of a call in order: (from caller?, text).
fn sip_script(cfg: &SynthConfig, i: usize, outcome: SynthOutcome) -> Vec<(bool, String)> {
    let a = caller_ip(i);
    let b = callee_ip(i);
    let call_id = format!("synth-{i}@tandem.test");
    let caller = format!("1{i:06}");
    let called = format!("2{i:06}");
    let pt = cfg.payload_type;
    let codec = if pt == 0 { "PCMU" } else { "PCMA" };
    let sdp = |ip: IpAddr, port: u16| {
        format!(
            "v=0\r\no=- {i} 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP {pt} 101\r\na=rtpmap:{pt} {codec}/8000\r\na=rtpmap:101 telephone-event/8000\r\na=ptime:{}\r\na=sendrecv\r\n",
            cfg.ptime_ms
        )
    };
    let head = |start: &str,
                via_host: IpAddr,
                cseq: &str,
                to_tag: bool,
                extra: &str,
                body: &str| {
        let ct = if body.is_empty() {
            ""
        } else {
            "Content-Type: application/sdp\r\n"
        };
        let caller_uri = format!("<sip:{caller}@{a}>;tag=a{i}");
        let called_uri = if to_tag {
            format!("<sip:{called}@{b}>;tag=b{i}")
        } else {
            format!("<sip:{called}@{b}>")
        };
        // Requests from the callee (its BYE) and their responses have From and To swapped.
        let (from, to) = if via_host == b {
            (called_uri, caller_uri)
        } else {
            (caller_uri, called_uri)
        };
        format!(
            "{start}\r\nVia: SIP/2.0/UDP {via_host}:5060;branch=z9hG4bK{i}x{}\r\nFrom: {from}\r\nTo: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq}\r\nMax-Forwards: 70\r\n{extra}{ct}Content-Length: {}\r\n\r\n{body}",
            cseq.len(),
            body.len()
        )
    };
    let invite = head(
        &format!("INVITE sip:{called}@{b} SIP/2.0"),
        a,
        "1 INVITE",
        false,
        &format!("Contact: <sip:{caller}@{a}:5060>\r\n"),
        &sdp(a, rtp_port(i)),
    );
    let resp = |code: &str, cseq: &str, tag: bool, body: &str| {
        head(&format!("SIP/2.0 {code}"), a, cseq, tag, "", body)
    };
    let mut s = vec![
        (true, invite),
        (false, resp("100 Trying", "1 INVITE", false, "")),
        (false, resp("180 Ringing", "1 INVITE", true, "")),
    ];
    match outcome {
        SynthOutcome::Answered { caller_hangs_up } => {
            s.push((
                false,
                resp("200 OK", "1 INVITE", true, &sdp(b, rtp_port(i))),
            ));
            s.push((
                true,
                head(
                    &format!("ACK sip:{called}@{b}:5060 SIP/2.0"),
                    a,
                    "1 ACK",
                    true,
                    "",
                    "",
                ),
            ));
            if caller_hangs_up {
                s.push((
                    true,
                    head(
                        &format!("BYE sip:{called}@{b}:5060 SIP/2.0"),
                        a,
                        "2 BYE",
                        true,
                        "",
                        "",
                    ),
                ));
                s.push((false, resp("200 OK", "2 BYE", true, "")));
            } else {
                // The callee's BYE travels the other way, From the callee.
                s.push((
                    false,
                    head(
                        &format!("BYE sip:{caller}@{a}:5060 SIP/2.0"),
                        b,
                        "1 BYE",
                        true,
                        "Reason: Q.850;cause=16;text=\"Normal call clearing\"\r\n",
                        "",
                    ),
                ));
                s.push((true, head("SIP/2.0 200 OK", b, "1 BYE", true, "", "")));
            }
        }
        SynthOutcome::Busy => {
            s.push((false, resp("486 Busy Here", "1 INVITE", true, "")));
            s.push((
                true,
                head(
                    &format!("ACK sip:{called}@{b} SIP/2.0"),
                    a,
                    "1 ACK",
                    true,
                    "",
                    "",
                ),
            ));
        }
        SynthOutcome::Cancelled => {
            s.push((
                true,
                head(
                    &format!("CANCEL sip:{called}@{b} SIP/2.0"),
                    a,
                    "1 CANCEL",
                    false,
                    "",
                    "",
                ),
            ));
            s.push((false, resp("200 OK", "1 CANCEL", true, "")));
            s.push((false, resp("487 Request Terminated", "1 INVITE", true, "")));
            s.push((
                true,
                head(
                    &format!("ACK sip:{called}@{b} SIP/2.0"),
                    a,
                    "1 ACK",
                    true,
                    "",
                    "",
                ),
            ));
        }
    }
    s
}

fn outcome_of(cfg: &SynthConfig, i: usize) -> SynthOutcome {
    match i % 10 {
        9 if cfg.failures => SynthOutcome::Busy,
        8 if cfg.failures => SynthOutcome::Cancelled,
        _ => SynthOutcome::Answered {
            caller_hangs_up: i.is_multiple_of(2),
        },
    }
}

/// Generates the capture into `out` (Ethernet, microsecond pcap) and returns its ground truth.
pub fn generate<W: io::Write>(cfg: &SynthConfig, out: W) -> io::Result<GroundTruth> {
    let mut w = PcapWriter::new(io::BufWriter::with_capacity(1 << 20, out), 1, false)?;
    let mut truth = GroundTruth::default();
    let mut rng = Rng(cfg.seed.max(1));
    let ptime_ns = cfg.ptime_ms as i64 * 1_000_000;
    let ticks = (cfg.call_duration_ms / cfg.ptime_ms as u64).max(2) as u32;
    let samples = cfg.ptime_ms * 8;
    // Scripts are built when a call starts and dropped when it ends.
    let mut scripts: Vec<Option<Vec<(bool, String)>>> = vec![None; cfg.calls];
    let mut heap: BinaryHeap<Reverse<(i64, Ev)>> = BinaryHeap::new();
    for i in 0..cfg.calls {
        let outcome = outcome_of(cfg, i);
        truth.calls.push(SynthCall {
            call_id: format!("synth-{i}@tandem.test"),
            caller: format!("1{i:06}"),
            called: format!("2{i:06}"),
            outcome,
            streams: Default::default(),
        });
        let t = cfg.start_ns + i as i64 * cfg.call_interval_us as i64 * 1000;
        heap.push(Reverse((
            t,
            Ev::Sip {
                call: i as u32,
                step: 0,
            },
        )));
    }
    let mut frame = Vec::with_capacity(2048);
    let mut rtp = Vec::with_capacity(256);
    while let Some(Reverse((t, ev))) = heap.pop() {
        match ev {
            Ev::Sip { call, step } => {
                let i = call as usize;
                let outcome = truth.calls[i].outcome;
                let script = scripts[i].get_or_insert_with(|| sip_script(cfg, i, outcome));
                let (from_caller, text) = &script[step as usize];
                let (a, b) = (
                    SocketAddr::new(caller_ip(i), 5060),
                    SocketAddr::new(callee_ip(i), 5060),
                );
                let (src, dst) = if *from_caller { (a, b) } else { (b, a) };
                frame.clear();
                packet::write_ethernet_udp(&mut frame, src, dst, text.as_bytes());
                w.write_packet(t, &frame)?;
                truth.packets += 1;
                truth.sip_messages += 1;
                let next = step + 1;
                let len = script.len() as u8;
                if next == len {
                    scripts[i] = None;
                    continue;
                }
                let answered = matches!(outcome, SynthOutcome::Answered { .. });
                // After the ACK (step 4) of an answered call the media runs, then the BYE.
                let gap_ns = match (answered, next) {
                    (_, 1) => 2_000_000,
                    (_, 2) => 30_000_000,
                    (true, 3) => 1_000_000_000,
                    (true, 4) => 10_000_000,
                    (true, 5) => {
                        if cfg.rtp {
                            heap.push(Reverse((t + 5_000_000, Ev::Tick { call, n: 0 })));
                        }
                        ticks as i64 * ptime_ns + 40_000_000
                    }
                    (false, 3) => 500_000_000,
                    _ => 5_000_000,
                };
                heap.push(Reverse((t + gap_ns, Ev::Sip { call, step: next })));
            }
            Ev::Tick { call, n } => {
                for dir in 0..2u8 {
                    let s = &mut truth.calls[call as usize].streams[dir as usize];
                    s.sent += 1;
                    // The first and the last two packets are never disturbed, so that tshark's
                    // first/last sequence numbers equal the sent ones.
                    let edge = n == 0 || n + 2 >= ticks;
                    if !edge && rng.chance(cfg.loss_pct) {
                        s.dropped += 1;
                        continue;
                    }
                    let mut delay = (rng.unit() * cfg.jitter_ms * 1e6) as i64;
                    if !edge && rng.chance(cfg.reorder_pct) {
                        s.reordered += 1;
                        delay += ptime_ns + 1_000_000;
                    }
                    heap.push(Reverse((t + delay, Ev::Rtp { call, dir, n })));
                    if !edge && rng.chance(cfg.duplicate_pct) {
                        s.duplicated += 1;
                        heap.push(Reverse((t + delay + 100_000, Ev::Rtp { call, dir, n })));
                    }
                }
                if n + 1 < ticks {
                    heap.push(Reverse((t + ptime_ns, Ev::Tick { call, n: n + 1 })));
                }
            }
            Ev::Rtp { call, dir, n } => {
                let i = call as usize;
                let a = SocketAddr::new(caller_ip(i), rtp_port(i));
                let b = SocketAddr::new(callee_ip(i), rtp_port(i));
                let (src, dst) = if dir == 0 { (a, b) } else { (b, a) };
                let ssrc = (call.wrapping_mul(2_654_435_761))
                    ^ if dir == 0 { 0x1111_1111 } else { 0x2222_2222 };
                let seq0 = (call.wrapping_mul(7919) as u16).wrapping_add(dir as u16 * 1000);
                let ts0 = call.wrapping_mul(104_729);
                let s = &mut truth.calls[i].streams[dir as usize];
                s.src = Some(src);
                s.dst = Some(dst);
                s.ssrc = ssrc;
                rtp.clear();
                packet::write_rtp(
                    &mut rtp,
                    cfg.payload_type,
                    n == 0,
                    seq0.wrapping_add(n as u16),
                    ts0.wrapping_add(n * samples),
                    ssrc,
                    samples as usize,
                    if cfg.payload_type == 0 { 0xff } else { 0xd5 },
                );
                frame.clear();
                packet::write_ethernet_udp(&mut frame, src, dst, &rtp);
                w.write_packet(t, &frame)?;
                truth.packets += 1;
                truth.rtp_packets += 1;
            }
        }
    }
    let mut inner = w.into_inner();
    io::Write::flush(&mut inner)?;
    Ok(truth)
}
