//! Synthetic captures with known ground truth: N concurrent G.711 calls (SIP over UDP, RTP both
//! ways) with configurable loss, jitter, reordering and duplicates. Used by the tests at small
//! sizes and by `tandem bench capture` at large ones.
//!
//! Answered calls can carry more than voice ([`CallKind`], cycled through
//! [`SynthConfig::kinds`]): a re-INVITE to T.38 and a fax ([`fax`]), a keypad digit as RFC 4733
//! events inside the voice, SRTP (`RTP/SAVP` with an SDES key), a video stream, or a hold that
//! resumes on new ports. Each has its ground truth in [`SynthCall`].
//!
//! The generator is event driven: a heap holds each call's next 20 ms tick and the packets in
//! flight, so memory grows with the number of concurrent calls, not with the capture's length,
//! and packets come out in non-decreasing time order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::pcap::PcapWriter;

pub mod b2bua;
pub mod fax;
pub mod scenario;

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

    /// An Ethernet frame with fixed addresses, `ethertype` and `payload`.
    pub fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(14 + payload.len());
        v.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&ethertype.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// The ethertype of an IP packet (IPv4 or IPv6 by its first byte).
    pub fn ethertype_of(ip: &[u8]) -> u16 {
        if ip.first().is_some_and(|b| b >> 4 == 6) {
            0x86dd
        } else {
            0x0800
        }
    }

    /// A raw IP packet carrying a TCP segment: a 20-byte header with ACK and PSH set besides
    /// `flags`, acknowledgement number 1, window 65535.
    pub fn ip_tcp(
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        flags: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut tcp = Vec::with_capacity(20 + payload.len());
        tcp.extend_from_slice(&src.port().to_be_bytes());
        tcp.extend_from_slice(&dst.port().to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&1u32.to_be_bytes());
        tcp.extend_from_slice(&[0x50, 0x18 | flags, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        ipv4(src.ip(), dst.ip(), 6, &tcp)
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

    /// `n` PCMA packets (160 bytes of silence each) of `ssrc` from `src` to `dst`, every
    /// 20 ms from `t_ns`, numbered from `seq` with timestamps in step; returns the time after
    /// the last.
    pub fn pcma_run(
        &mut self,
        t_ns: i64,
        (src, dst): (SocketAddr, SocketAddr),
        ssrc: u32,
        seq: u16,
        n: u16,
    ) -> i64 {
        let mut rtp = Vec::with_capacity(172);
        for i in 0..n {
            rtp.clear();
            let s = seq.wrapping_add(i);
            let ts = 160 * u32::from(s);
            packet::write_rtp(&mut rtp, 8, false, s, ts, ssrc, 160, 0xd5);
            self.udp(t_ns + i64::from(i) * 20_000_000, src, dst, &rtp);
        }
        t_ns + i64::from(n) * 20_000_000
    }

    /// A whole Ethernet frame at `t_ns`, as another capture holds it.
    pub fn frame(&mut self, t_ns: i64, frame: &[u8]) {
        self.w
            .write_packet(t_ns, frame)
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
    /// What answered calls carry, in turn: call `i` is `kinds[i % len]`.
    pub kinds: Vec<CallKind>,
}

/// What an answered synthetic call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// G.711 both ways.
    Voice,
    /// Voice, then a re-INVITE moves the same ports to T.38 and a one-page fax runs.
    Fax,
    /// Voice with a keypad digit from the caller as RFC 4733 events (its end sent three times).
    Dtmf,
    /// Voice offered and answered as `RTP/SAVP` with an SDES `a=crypto` key.
    Srtp,
    /// Voice and an H.264 video stream both ways.
    Video,
    /// Voice; halfway, a re-INVITE moves both sides to new ports.
    HoldResume,
}

impl CallKind {
    pub const ALL: [CallKind; 6] = [
        CallKind::Voice,
        CallKind::Fax,
        CallKind::Dtmf,
        CallKind::Srtp,
        CallKind::Video,
        CallKind::HoldResume,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Voice => "voice",
            CallKind::Fax => "fax",
            CallKind::Dtmf => "dtmf",
            CallKind::Srtp => "srtp",
            CallKind::Video => "video",
            CallKind::HoldResume => "hold-resume",
        }
    }

    fn reinvites(self) -> bool {
        matches!(self, CallKind::Fax | CallKind::HoldResume)
    }
}

impl std::str::FromStr for CallKind {
    type Err = String;
    fn from_str(s: &str) -> Result<CallKind, String> {
        CallKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = CallKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown call kind {s:?} (one of {})", names.join(", "))
            })
    }
}

/// The SDES key of call `i`'s SRTP offer: 40 base64 characters, unique per call, so that a test
/// can look for it in everything written.
pub fn sdes_key(i: usize) -> String {
    format!("TandemSynthKey{i:026}")
}

/// The fax every [`CallKind::Fax`] call sends: one page, completed.
fn fax_plan() -> fax::FaxPlan {
    fax::FaxPlan {
        pages: 1,
        page_packets: 10,
        // Both directions cross into sequence numbers whose first byte reads as RTP version 2.
        seq0: [0x7ffa, 0xbffa],
        ..fax::FaxPlan::default()
    }
}

/// Ticks of a [`CallKind::Dtmf`] digit: six growing packets, then the end twice more.
const DIGIT_TICKS: u32 = 8;
const DIGIT_PACKETS_GROWING: u32 = 6;
const EVENTS_PT: u8 = 101;
const VIDEO_PT: u8 = 96;

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
            kinds: vec![CallKind::Voice],
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
    pub video: bool,
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
    pub kind: CallKind,
    /// Audio both ways; then video both ways, or the audio after a move to new ports.
    pub streams: Vec<SynthStream>,
    /// The fax of a [`CallKind::Fax`] call.
    pub fax: Option<fax::FaxTruth>,
    /// Keypad digits sent, in order.
    pub digits: String,
}

impl SynthCall {
    pub fn answered(&self) -> bool {
        matches!(self.outcome, SynthOutcome::Answered { .. })
    }

    pub fn encrypted(&self) -> bool {
        self.kind == CallKind::Srtp
    }

    pub fn video(&self) -> bool {
        self.kind == CallKind::Video && self.answered()
    }
}

/// Ground truth of a generated capture.
#[derive(Debug, Clone, Default)]
pub struct GroundTruth {
    pub calls: Vec<SynthCall>,
    pub packets: u64,
    pub rtp_packets: u64,
    pub sip_messages: u64,
    pub udptl_packets: u64,
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
    /// An RTP packet of stream `stream` (0, 1: audio; 2, 3: video or audio on new ports) arrives.
    Rtp { call: u32, stream: u8, n: u32 },
    /// Packet `idx` of a fax call's T.38 session.
    Udptl { call: u32, idx: u32 },
}

/// Call `i`'s address in a network of its side: `10.1.0.0/16` up for callers, `172.16.0.0/16`
/// up for callees (a /16 per 65,536 calls).
fn call_ip((first, second): (u8, u8), i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        first,
        second + (i >> 16) as u8,
        (i >> 8) as u8,
        i as u8,
    ))
}

fn caller_ip(i: usize) -> IpAddr {
    call_ip((10, 1), i)
}

fn callee_ip(i: usize) -> IpAddr {
    call_ip((172, 16), i)
}

fn rtp_port(i: usize) -> u16 {
    10_000 + 2 * (i % 20_000) as u16
}

/// Where a [`CallKind::HoldResume`] call's audio moves.
fn moved_port(port: u16) -> u16 {
    port + 1000
}

/// The SIP messages of a call in order: (from caller?, text).
fn sip_script(
    cfg: &SynthConfig,
    i: usize,
    outcome: SynthOutcome,
    kind: CallKind,
) -> Vec<(bool, String)> {
    let a = caller_ip(i);
    let b = callee_ip(i);
    let call_id = format!("synth-{i}@tandem.test");
    let caller = format!("1{i:06}");
    let called = format!("2{i:06}");
    let pt = cfg.payload_type;
    let codec = if pt == 0 { "PCMU" } else { "PCMA" };
    // The SDP of one side: `leg` 0 for the call's start, 1 after its re-INVITE.
    let sdp = |ip: IpAddr, port: u16, leg: u8| {
        let head = format!(
            "v=0\r\no=- {i} {} IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n",
            leg + 1
        );
        let audio = |port: u16, proto: &str| {
            format!(
                "m=audio {port} {proto} {pt} {EVENTS_PT}\r\na=rtpmap:{pt} {codec}/8000\r\na=rtpmap:{EVENTS_PT} telephone-event/8000\r\na=ptime:{}\r\na=sendrecv\r\n",
                cfg.ptime_ms
            )
        };
        let media = match (kind, leg) {
            (CallKind::Srtp, _) => format!(
                "{}a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{}\r\n",
                audio(port, "RTP/SAVP"),
                sdes_key(i)
            ),
            (CallKind::Video, _) => format!(
                "{}m=video {} RTP/AVP {VIDEO_PT}\r\na=rtpmap:{VIDEO_PT} H264/90000\r\n",
                audio(port, "RTP/AVP"),
                port + 2
            ),
            (CallKind::Fax, 1) => {
                format!(
                    "m=image {port} udptl t38\r\na=T38FaxVersion:0\r\na=T38FaxRateManagement:transferredTCF\r\n"
                )
            }
            (CallKind::HoldResume, 1) => audio(moved_port(port), "RTP/AVP"),
            _ => audio(port, "RTP/AVP"),
        };
        format!("{head}{media}")
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
        &sdp(a, rtp_port(i), 0),
    );
    let resp = |code: &str, cseq: &str, tag: bool, body: &str| {
        head(&format!("SIP/2.0 {code}"), a, cseq, tag, "", body)
    };
    // The ACK of a final answer that is not 2xx (same transaction, so CSeq 1).
    let ack = || {
        head(
            &format!("ACK sip:{called}@{b} SIP/2.0"),
            a,
            "1 ACK",
            true,
            "",
            "",
        )
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
                resp("200 OK", "1 INVITE", true, &sdp(b, rtp_port(i), 0)),
            ));
            let ack = |cseq: &str| {
                head(
                    &format!("ACK sip:{called}@{b}:5060 SIP/2.0"),
                    a,
                    cseq,
                    true,
                    "",
                    "",
                )
            };
            s.push((true, ack("1 ACK")));
            if kind.reinvites() {
                s.push((
                    true,
                    head(
                        &format!("INVITE sip:{called}@{b}:5060 SIP/2.0"),
                        a,
                        "2 INVITE",
                        true,
                        &format!("Contact: <sip:{caller}@{a}:5060>\r\n"),
                        &sdp(a, rtp_port(i), 1),
                    ),
                ));
                s.push((
                    false,
                    resp("200 OK", "2 INVITE", true, &sdp(b, rtp_port(i), 1)),
                ));
                s.push((true, ack("2 ACK")));
            }
            if caller_hangs_up {
                let cseq = if kind.reinvites() { "3 BYE" } else { "2 BYE" };
                s.push((
                    true,
                    head(
                        &format!("BYE sip:{called}@{b}:5060 SIP/2.0"),
                        a,
                        cseq,
                        true,
                        "",
                        "",
                    ),
                ));
                s.push((false, resp("200 OK", cseq, true, "")));
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
            s.push((true, ack()));
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
            s.push((true, ack()));
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

/// The keypad digit of a [`CallKind::Dtmf`] call: its RFC 4733 event number (0-9).
fn digit_event(i: usize) -> u8 {
    (i % 10) as u8
}

/// The timing of a call's media, shared by all its calls.
struct Timing {
    ptime_ns: i64,
    /// Voice ticks of a call that keeps its audio to the end.
    ticks: u32,
    /// The tick where a hold/resume moves ports and where a fax stops the voice.
    half: u32,
    /// The first tick of a digit; `None` when the call is too short for one.
    digit_at: Option<u32>,
    samples: u32,
}

impl Timing {
    /// The ticks that stream `stream` of a `kind` call sends in: first, and one past the last.
    fn range(&self, kind: CallKind, stream: u8) -> (u32, u32) {
        match (kind, stream) {
            (CallKind::Fax, _) => (0, self.half),
            (CallKind::HoldResume, 0 | 1) => (0, self.half),
            (CallKind::HoldResume, _) => (self.half, self.ticks),
            _ => (0, self.ticks),
        }
    }

    fn in_digit(&self, kind: CallKind, stream: u8, n: u32) -> bool {
        kind == CallKind::Dtmf
            && stream == 0
            && self
                .digit_at
                .is_some_and(|d| (d..d + DIGIT_TICKS).contains(&n))
    }
}

/// Generates the capture into `out` (Ethernet, microsecond pcap) and returns its ground truth.
pub fn generate<W: io::Write>(cfg: &SynthConfig, out: W) -> io::Result<GroundTruth> {
    assert!(!cfg.kinds.is_empty(), "SynthConfig::kinds is empty");
    let mut w = PcapWriter::new(io::BufWriter::with_capacity(1 << 20, out), 1, false)?;
    let mut truth = GroundTruth::default();
    let mut rng = Rng(cfg.seed.max(1));
    let ticks = (cfg.call_duration_ms / cfg.ptime_ms as u64).max(2) as u32;
    let half = ticks / 2;
    let timing = Timing {
        ptime_ns: cfg.ptime_ms as i64 * 1_000_000,
        ticks,
        half,
        // Clear of the stream's first packet and of its last two.
        digit_at: (half >= 2 && half + DIGIT_TICKS + 2 < ticks).then_some(half),
        samples: cfg.ptime_ms * 8,
    };
    let ptime_ns = timing.ptime_ns;
    let (fax_packets, fax_truth) = fax::fax_session(&fax_plan());
    let fax_ns = fax_packets.last().map_or(0, |p| p.at_ns);
    // Scripts are built when a call starts and dropped when it ends.
    let mut scripts: Vec<Option<Vec<(bool, String)>>> = vec![None; cfg.calls];
    let mut heap: BinaryHeap<Reverse<(i64, Ev)>> = BinaryHeap::new();
    for i in 0..cfg.calls {
        let outcome = outcome_of(cfg, i);
        let kind = cfg.kinds[i % cfg.kinds.len()];
        let answered = matches!(outcome, SynthOutcome::Answered { .. });
        let streams = if answered && matches!(kind, CallKind::Video | CallKind::HoldResume) {
            4
        } else {
            2
        };
        let digit = answered && cfg.rtp && kind == CallKind::Dtmf && timing.digit_at.is_some();
        truth.calls.push(SynthCall {
            call_id: format!("synth-{i}@tandem.test"),
            caller: format!("1{i:06}"),
            called: format!("2{i:06}"),
            outcome,
            kind,
            streams: vec![SynthStream::default(); streams],
            fax: (answered && cfg.rtp && kind == CallKind::Fax).then(|| fax_truth.clone()),
            digits: if digit {
                digit_event(i).to_string()
            } else {
                String::new()
            },
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
    let mut rtp = Vec::with_capacity(512);
    while let Some(Reverse((t, ev))) = heap.pop() {
        match ev {
            Ev::Sip { call, step } => {
                let i = call as usize;
                let (outcome, kind) = (truth.calls[i].outcome, truth.calls[i].kind);
                let script = scripts[i].get_or_insert_with(|| sip_script(cfg, i, outcome, kind));
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
                let reinvites = kind.reinvites();
                const MS: i64 = 1_000_000;
                // After the ACK (step 4) of an answered call the media runs; a re-INVITE
                // (steps 5-7) comes halfway, or once a fax call's voice is over; then the BYE.
                let gap_ns = match (answered, next) {
                    (_, 1) => 2 * MS,
                    (_, 2) => 30 * MS,
                    (true, 3) => 1_000 * MS,
                    (true, 4) => 10 * MS,
                    (true, 5) => {
                        if cfg.rtp {
                            heap.push(Reverse((t + 5 * MS, Ev::Tick { call, n: 0 })));
                        }
                        match kind {
                            // The move is acknowledged 20 ms before the first tick on new ports.
                            CallKind::HoldResume => (half as i64 * ptime_ns - 45 * MS).max(MS),
                            CallKind::Fax => half as i64 * ptime_ns + 25 * MS,
                            _ => ticks as i64 * ptime_ns + 40 * MS,
                        }
                    }
                    (true, 6) if reinvites => 20 * MS,
                    (true, 7) if reinvites => 10 * MS,
                    (true, 8) if reinvites => match kind {
                        CallKind::Fax => {
                            if cfg.rtp && !fax_packets.is_empty() {
                                let at = t + 20 * MS + fax_packets[0].at_ns;
                                heap.push(Reverse((at, Ev::Udptl { call, idx: 0 })));
                            }
                            fax_ns + 80 * MS
                        }
                        _ => (ticks - half) as i64 * ptime_ns + 60 * MS,
                    },
                    (false, 3) => 500 * MS,
                    _ => 5 * MS,
                };
                heap.push(Reverse((t + gap_ns, Ev::Sip { call, step: next })));
            }
            Ev::Tick { call, n } => {
                let kind = truth.calls[call as usize].kind;
                let video = kind == CallKind::Video;
                for stream in 0..if video { 4 } else { 2 } {
                    // Hold/resume: the ports in use at this tick.
                    let stream = if kind == CallKind::HoldResume && n >= half {
                        stream + 2
                    } else {
                        stream
                    };
                    let (first, end) = timing.range(kind, stream);
                    if !(first..end).contains(&n) {
                        continue;
                    }
                    let s = &mut truth.calls[call as usize].streams[stream as usize];
                    s.sent += 1;
                    // The first and the last two packets are never disturbed, so that tshark's
                    // first/last sequence numbers equal the sent ones; nor are a digit's.
                    let calm = n == first || n + 2 >= end || timing.in_digit(kind, stream, n);
                    if !calm && rng.chance(cfg.loss_pct) {
                        s.dropped += 1;
                        continue;
                    }
                    let mut delay = (rng.unit() * cfg.jitter_ms * 1e6) as i64;
                    if !calm && rng.chance(cfg.reorder_pct) {
                        s.reordered += 1;
                        delay += ptime_ns + 1_000_000;
                    }
                    heap.push(Reverse((t + delay, Ev::Rtp { call, stream, n })));
                    if !calm && rng.chance(cfg.duplicate_pct) {
                        s.duplicated += 1;
                        heap.push(Reverse((t + delay + 100_000, Ev::Rtp { call, stream, n })));
                    }
                }
                let (_, end) = timing.range(kind, 0);
                if n + 1 < end.max(timing.range(kind, 2).1) {
                    heap.push(Reverse((t + ptime_ns, Ev::Tick { call, n: n + 1 })));
                }
            }
            Ev::Rtp { call, stream, n } => {
                let i = call as usize;
                let kind = truth.calls[i].kind;
                let video = kind == CallKind::Video && stream >= 2;
                let port = match (kind, stream) {
                    (CallKind::Video, 2 | 3) => rtp_port(i) + 2,
                    (CallKind::HoldResume, 2 | 3) => moved_port(rtp_port(i)),
                    _ => rtp_port(i),
                };
                let a = SocketAddr::new(caller_ip(i), port);
                let b = SocketAddr::new(callee_ip(i), port);
                let dir = stream % 2;
                let (src, dst) = if dir == 0 { (a, b) } else { (b, a) };
                let ssrc = (call.wrapping_mul(2_654_435_761))
                    ^ if dir == 0 { 0x1111_1111 } else { 0x2222_2222 }
                    ^ if video { 0x0f0f_0000 } else { 0 };
                let seq0 = (call.wrapping_mul(7919) as u16)
                    .wrapping_add(u16::from(dir) * 1000)
                    .wrapping_add(if video { 20_000 } else { 0 });
                let ts0 = call.wrapping_mul(104_729);
                let s = &mut truth.calls[i].streams[stream as usize];
                s.src = Some(src);
                s.dst = Some(dst);
                s.ssrc = ssrc;
                s.video = video;
                let seq = seq0.wrapping_add(n as u16);
                rtp.clear();
                if video {
                    // 90 kHz clock; one small frame per tick.
                    let ts = ts0.wrapping_add(n * 90 * cfg.ptime_ms);
                    packet::write_rtp(&mut rtp, VIDEO_PT, true, seq, ts, ssrc, 300, 0x00);
                } else if timing.in_digit(kind, stream, n) {
                    let start = timing.digit_at.unwrap_or(0);
                    let k = n - start;
                    let ts = ts0.wrapping_add(start * timing.samples);
                    packet::write_rtp(&mut rtp, EVENTS_PT, k == 0, seq, ts, ssrc, 0, 0);
                    let end = k + 1 >= DIGIT_PACKETS_GROWING;
                    let duration = (timing.samples * (k + 1).min(DIGIT_PACKETS_GROWING)) as u16;
                    rtp.extend_from_slice(&[digit_event(i), if end { 0x80 | 10 } else { 10 }]);
                    rtp.extend_from_slice(&duration.to_be_bytes());
                } else {
                    packet::write_rtp(
                        &mut rtp,
                        cfg.payload_type,
                        n == 0,
                        seq,
                        ts0.wrapping_add(n * timing.samples),
                        ssrc,
                        timing.samples as usize,
                        if cfg.payload_type == 0 { 0xff } else { 0xd5 },
                    );
                }
                frame.clear();
                packet::write_ethernet_udp(&mut frame, src, dst, &rtp);
                w.write_packet(t, &frame)?;
                truth.packets += 1;
                truth.rtp_packets += 1;
            }
            Ev::Udptl { call, idx } => {
                let i = call as usize;
                let p = &fax_packets[idx as usize];
                let a = SocketAddr::new(caller_ip(i), rtp_port(i));
                let b = SocketAddr::new(callee_ip(i), rtp_port(i));
                let (src, dst) = if p.from_caller { (a, b) } else { (b, a) };
                frame.clear();
                packet::write_ethernet_udp(&mut frame, src, dst, &p.udptl);
                w.write_packet(t, &frame)?;
                truth.packets += 1;
                truth.udptl_packets += 1;
                if let Some(next) = fax_packets.get(idx as usize + 1) {
                    let at = t - p.at_ns + next.at_ns;
                    heap.push(Reverse((at, Ev::Udptl { call, idx: idx + 1 })));
                }
            }
        }
    }
    let mut inner = w.into_inner();
    io::Write::flush(&mut inner)?;
    Ok(truth)
}
