//! RTP receiver statistics per stream, RTCP report parsing, and the stream's MOS.
//!
//! Two views are kept per stream:
//! - the Wireshark view ([`WiresharkStats`]): packet count, lost, min/mean/max delta, min/mean/max
//!   jitter computed exactly as Wireshark's RTP analysis does (its `rtppacket_analyse`), so that
//!   figures equal `tshark -z rtp,streams` on the same capture. Its conventions, which differ from
//!   RFC 3550 in places, are listed in the type's documentation.
//! - the RFC 3550 view ([`SequenceStats`]): extended sequence numbers (appendix A.1), duplicates,
//!   out-of-order packets and loss bursts, which feed the E-model's burst ratio.

use std::net::SocketAddr;

/// Parsed fixed RTP header (RFC 3550 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    pub marker: bool,
    pub payload_type: u8,
    pub seq: u16,
    pub timestamp: u32,
    pub ssrc: u32,
    /// Bytes after the header, CSRCs, extension and padding.
    pub payload_len: u16,
    /// Where the payload starts, after the CSRCs and the extension.
    pub payload_off: u16,
}

impl RtpHeader {
    /// The first four payload bytes of the packet `b` this header was parsed from: an RFC 4733
    /// event is all in them. `None` when the payload is shorter.
    pub fn event_bytes(&self, b: &[u8]) -> Option<[u8; 4]> {
        if self.payload_len < 4 {
            return None;
        }
        let at = usize::from(self.payload_off);
        b.get(at..at + 4)?.try_into().ok()
    }
}

impl RtpHeader {
    /// Parses an RTP header; `None` when this cannot be RTP version 2 or is RTCP (payload types
    /// 72-76 with the marker bit, i.e. RTCP packet types 200-204, per RFC 5761 4).
    pub fn parse(b: &[u8]) -> Option<RtpHeader> {
        if b.len() < 12 || b[0] >> 6 != 2 {
            return None;
        }
        let pt = b[1] & 0x7f;
        if (72..=76).contains(&pt) {
            return None;
        }
        let cc = (b[0] & 0x0f) as usize;
        let mut off = 12 + 4 * cc;
        if b.len() < off {
            return None;
        }
        if b[0] & 0x10 != 0 {
            if b.len() < off + 4 {
                return None;
            }
            off += 4 + 4 * u16::from_be_bytes([b[off + 2], b[off + 3]]) as usize;
            if b.len() < off {
                return None;
            }
        }
        let mut end = b.len();
        if b[0] & 0x20 != 0 {
            let pad = b[b.len() - 1] as usize;
            if pad == 0 || off + pad > end {
                return None;
            }
            end -= pad;
        }
        Some(RtpHeader {
            marker: b[1] & 0x80 != 0,
            payload_type: pt,
            seq: u16::from_be_bytes([b[2], b[3]]),
            timestamp: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            ssrc: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            payload_len: (end - off) as u16,
            payload_off: off as u16,
        })
    }
}

/// Clock rate Wireshark's RTP analysis uses for a static payload type (0 = unknown, no jitter).
pub fn static_clock_rate(pt: u8) -> u32 {
    match pt {
        0..=5 | 7..=9 | 12 | 13 | 15 | 18 | 19 => 8000,
        6 => 16000,
        10 | 11 => 44100,
        16 => 11025,
        17 => 22050,
        14 | 25 | 26 | 28 | 31..=34 => 90000,
        _ => 0,
    }
}

/// Short codec name as tshark prints it in `-z rtp,streams` (Wireshark's short names of the
/// RFC 3551 static payload types, 1 and 2 included: RFC 1890 assigned them). Unassigned and
/// dynamic types have no name here: the number is printed instead (tshark prints `Unassigned`
/// and `RTPType-N`, which tell less).
pub fn payload_name(pt: u8) -> &'static str {
    match pt {
        0 => "g711U",
        1 => "fs-1016",
        2 => "g721",
        3 => "GSM",
        4 => "g723",
        5 => "DVI4 8k",
        6 => "DVI4 16k",
        7 => "Exp. from Xerox PARC",
        8 => "g711A",
        9 => "g722",
        10 => "16-bit audio, stereo",
        11 => "16-bit audio, monaural",
        12 => "Qualcomm",
        13 => "CN",
        14 => "MPEG-I/II Audio",
        15 => "g728",
        16 => "DVI4 11k",
        17 => "DVI4 22k",
        18 => "g729",
        19 => "CN(old)",
        25 => "CellB",
        26 => "JPEG",
        28 => "NV",
        31 => "h261",
        32 => "MPEG-I/II Video",
        33 => "MPEG-II streams",
        34 => "h263",
        _ => "",
    }
}

/// The dynamic payload type tshark decodes as RFC 4733 events when no SDP names it (its
/// `rtpevent.event_payload_type_value` preference), printing it `rtpevent`.
const RTPEVENT_DEFAULT_PT: u8 = 101;

const PT_CN: u8 = 13;
const PT_CN_OLD: u8 = 19;

/// Wireshark-compatible stream statistics, with Wireshark's conventions:
/// - times are milliseconds since the first packet of the capture (`f64`), as tshark's
///   relative frame times;
/// - "lost" is expected minus received where expected runs from the first to the *last
///   arrived* sequence number (plus counted wraps), so duplicates make it negative and a late
///   packet arriving last shrinks it;
/// - a packet is "in time" when its RTP timestamp lies within half the timestamp range after the
///   stream's *first* timestamp (a late packet still counts as in time); only in-time packets
///   update the delta, the jitter and the reference arrival time, and the expected arrival is
///   `last arrival + (timestamp - last timestamp) / clock`, so a reordered packet shows as a
///   short delta and a jump in jitter;
/// - deltas and jitter skip "irregular" packets: the first one, those with the marker bit, comfort
///   noise (payload 13 or 19) and the packet after comfort noise, and packets not in time;
/// - the mean delta and mean jitter divide by the number of packets before this one, regular or
///   not (Wireshark's running mean uses `total_nr`);
/// - jitter is RFC 3550 A.8 computed in milliseconds: `J = (15 J + |D|) / 16`, with the payload's
///   clock rate divided by 1000 in integer arithmetic (44100 Hz counts as 44 per ms);
/// - a clock rate of 0 (dynamic payload without SDP, telephone-event) gives no jitter.
#[derive(Debug, Clone, Copy)]
pub struct WiresharkStats {
    first: bool,
    start_seq: u16,
    stop_seq: u16,
    seq_num: u16,
    under: bool,
    cycles: u32,
    first_timestamp: u32,
    last_nominal_ms: f64,
    time_ms: f64,
    pt: u8,
    reg_pt: u8,
    pub total_nr: u32,
    pub delta_ms: f64,
    pub jitter_ms: f64,
    pub min_delta_ms: f64,
    pub max_delta_ms: f64,
    pub mean_delta_ms: f64,
    pub min_jitter_ms: f64,
    pub max_jitter_ms: f64,
    pub mean_jitter_ms: f64,
    /// Packets whose sequence number was not the expected next one.
    pub sequence_errors: u32,
}

impl Default for WiresharkStats {
    fn default() -> Self {
        WiresharkStats {
            first: true,
            start_seq: 0,
            stop_seq: 0,
            seq_num: 0,
            under: false,
            cycles: 0,
            first_timestamp: 0,
            last_nominal_ms: 0.0,
            time_ms: 0.0,
            pt: 0,
            reg_pt: 0,
            total_nr: 0,
            delta_ms: 0.0,
            jitter_ms: 0.0,
            min_delta_ms: -1.0,
            max_delta_ms: 0.0,
            mean_delta_ms: 0.0,
            min_jitter_ms: -1.0,
            max_jitter_ms: 0.0,
            mean_jitter_ms: 0.0,
            sequence_errors: 0,
        }
    }
}

impl WiresharkStats {
    /// Adds one packet that arrived `now_ms` after the capture's first packet; `clock_rate` is
    /// the payload's RTP clock in Hz (0 when unknown).
    pub fn add(&mut self, now_ms: f64, h: &RtpHeader, clock_rate: u32) {
        let seq = h.seq;
        if self.first {
            self.first = false;
            self.start_seq = seq;
            self.stop_seq = seq;
            self.seq_num = seq;
            self.first_timestamp = h.timestamp;
            self.time_ms = now_ms;
            self.pt = h.payload_type;
            self.reg_pt = h.payload_type;
            self.total_nr = 1;
            return;
        }
        // "In time" means within half the timestamp range after the stream's first timestamp.
        let from_first = h.timestamp.wrapping_sub(self.first_timestamp);
        let in_time = from_first < 0x8000_0000;
        // Sequence wraps, counted the way Wireshark does.
        // (Wireshark also counts a wrap when the start was 0 and 65535 -> 0 is seen.)
        if (seq < self.start_seq || (seq == 0 && self.stop_seq == 65535)) && in_time && !self.under
        {
            self.cycles += 1;
            self.under = true;
        } else if seq > self.start_seq && in_time && self.under {
            self.under = false;
        }
        let next = self.seq_num.wrapping_add(1);
        if in_time && (next == seq || (self.seq_num == 65535 && seq == 0)) {
            self.seq_num = seq;
        } else if in_time
            && ((self.seq_num as i32 + 1) < seq as i32 || self.seq_num as i32 - seq as i32 > 0xFF00)
        {
            // Integer (not 16-bit) arithmetic, as in Wireshark: seq_num + 1 may be 65536.
            self.seq_num = seq;
            self.sequence_errors += 1;
        } else if (self.seq_num as i32 + 1) > seq as i32 {
            self.sequence_errors += 1;
        }
        let is_cn = h.payload_type == PT_CN || h.payload_type == PT_CN_OLD;
        let follows_cn = self.pt == PT_CN || self.pt == PT_CN_OLD;
        self.pt = h.payload_type;

        let mut current_jitter = 0.0;
        if in_time {
            if clock_rate != 0 {
                let nominal_ms = from_first as f64 / (clock_rate / 1000) as f64;
                let expected = self.time_ms + (nominal_ms - self.last_nominal_ms);
                let diff = (now_ms - expected).abs();
                current_jitter = (15.0 * self.jitter_ms + diff) / 16.0;
                self.delta_ms = now_ms - self.time_ms;
                self.jitter_ms = current_jitter;
                self.last_nominal_ms = nominal_ms;
            } else {
                self.delta_ms = now_ms - self.time_ms;
            }
        }
        let regular = !h.marker && !is_cn && in_time && !follows_cn;
        if regular {
            if self.delta_ms > self.max_delta_ms {
                self.max_delta_ms = self.delta_ms;
            }
            if self.min_delta_ms == -1.0 || self.delta_ms < self.min_delta_ms {
                self.min_delta_ms = self.delta_ms;
            }
            let n = self.total_nr as f64;
            self.mean_delta_ms = (self.mean_delta_ms * (n - 1.0) + self.delta_ms) / n;
            if clock_rate != 0 {
                if self.jitter_ms > self.max_jitter_ms {
                    self.max_jitter_ms = self.jitter_ms;
                }
                self.mean_jitter_ms = (self.mean_jitter_ms * (n - 1.0) + current_jitter) / n;
                if self.min_jitter_ms == -1.0 || self.jitter_ms < self.min_jitter_ms {
                    self.min_jitter_ms = self.jitter_ms;
                }
            }
        }
        if !is_cn {
            self.reg_pt = self.pt;
        }
        if in_time {
            self.time_ms = now_ms;
        }
        self.stop_seq = seq;
        self.total_nr += 1;
    }

    /// Expected packets: from the first to the last arrived sequence number, with wraps.
    pub fn expected(&self) -> i64 {
        if self.first {
            return 0;
        }
        self.stop_seq as i64 + self.cycles as i64 * 65536 - self.start_seq as i64 + 1
    }

    /// Expected minus received (negative with duplicates), as tshark prints it.
    pub fn lost(&self) -> i64 {
        self.expected() - self.total_nr as i64
    }
}

/// RFC 3550 appendix A.1 sequence tracking, plus duplicates, reordering and loss bursts.
#[derive(Debug, Clone, Copy, Default)]
pub struct SequenceStats {
    started: bool,
    base_seq: u64,
    /// Highest extended sequence number seen.
    max_ext: u64,
    /// Bit i set: extended sequence number `max_ext - i` was received (i < 128).
    window: u128,
    pub received: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Gaps in the sequence (a burst of one or more lost packets each).
    pub loss_bursts: u64,
    /// Packets missing in gaps when they were seen (late arrivals do not reduce it).
    pub gap_packets: u64,
}

/// Jumps larger than this are treated as a restart of the sequence (RFC 3550 A.1 MAX_DROPOUT).
const MAX_DROPOUT: u64 = 3000;

impl SequenceStats {
    pub fn add(&mut self, seq: u16) {
        if !self.started {
            self.started = true;
            self.base_seq = (1u64 << 16) | seq as u64;
            self.max_ext = self.base_seq;
            self.window = 1;
            self.received = 1;
            return;
        }
        // Place seq in the cycle closest to max_ext.
        let max16 = self.max_ext as u16;
        let forward = seq.wrapping_sub(max16) as u64;
        let ext = if forward < 0x8000 {
            self.max_ext + forward
        } else {
            self.max_ext - (max16.wrapping_sub(seq) as u64)
        };
        self.received += 1;
        if ext > self.max_ext {
            let step = ext - self.max_ext;
            if step > MAX_DROPOUT {
                // A restart: begin again from here.
                self.max_ext = ext;
                self.window = 1;
                return;
            }
            if step > 1 {
                self.loss_bursts += 1;
                self.gap_packets += step - 1;
            }
            self.window = if step >= 128 { 0 } else { self.window << step };
            self.window |= 1;
            self.max_ext = ext;
        } else {
            let back = self.max_ext - ext;
            if back < 128 && self.window & (1u128 << back) != 0 {
                self.duplicates += 1;
                self.received -= 1;
            } else {
                self.out_of_order += 1;
                if back < 128 {
                    self.window |= 1u128 << back;
                }
            }
        }
    }

    /// Packets expected from the first to the highest sequence number (A.1).
    pub fn expected(&self) -> u64 {
        if !self.started {
            0
        } else {
            self.max_ext - self.base_seq + 1
        }
    }

    /// Lost packets per A.1: expected minus received (duplicates not counted as received).
    pub fn lost(&self) -> i64 {
        self.expected() as i64 - self.received as i64
    }
}

/// One report block of an RTCP SR or RR (RFC 3550 6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBlock {
    /// The SSRC of the RTCP packet's sender (the receiver of the reported stream).
    pub reporter_ssrc: u32,
    /// The SSRC the block is about.
    pub ssrc: u32,
    pub fraction_lost: u8,
    pub cumulative_lost: i32,
    pub highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
}

/// Most report blocks read from one compound RTCP packet.
pub const MAX_REPORT_BLOCKS: usize = 31;

/// True when `b` starts like an RTCP packet (version 2, packet type 200-204).
pub fn looks_like_rtcp(b: &[u8]) -> bool {
    b.len() >= 8 && b[0] >> 6 == 2 && (200..=204).contains(&b[1])
}

/// The report blocks of a compound RTCP packet; malformed trailing parts are ignored.
pub fn rtcp_report_blocks(mut b: &[u8], out: &mut Vec<ReportBlock>) {
    while b.len() >= 8 && b[0] >> 6 == 2 && out.len() < MAX_REPORT_BLOCKS {
        let count = (b[0] & 0x1f) as usize;
        let pt = b[1];
        let len = (u16::from_be_bytes([b[2], b[3]]) as usize + 1) * 4;
        // A packet shorter than its own header and sender SSRC ends the compound packet.
        if len > b.len() || len < 8 {
            return;
        }
        let pkt = &b[..len];
        let reporter = u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]);
        let blocks_at = match pt {
            200 => 28,
            201 => 8,
            _ => usize::MAX,
        };
        if blocks_at != usize::MAX {
            for i in 0..count {
                let o = blocks_at + 24 * i;
                if o + 24 > pkt.len() || out.len() == MAX_REPORT_BLOCKS {
                    break;
                }
                let r = &pkt[o..o + 24];
                let cum = ((r[5] as i32) << 16) | ((r[6] as i32) << 8) | r[7] as i32;
                let cum = if cum & 0x80_0000 != 0 {
                    cum - 0x100_0000
                } else {
                    cum
                };
                out.push(ReportBlock {
                    reporter_ssrc: reporter,
                    ssrc: u32::from_be_bytes([r[0], r[1], r[2], r[3]]),
                    fraction_lost: r[4],
                    cumulative_lost: cum,
                    highest_seq: u32::from_be_bytes([r[8], r[9], r[10], r[11]]),
                    jitter: u32::from_be_bytes([r[12], r[13], r[14], r[15]]),
                });
            }
        }
        b = &b[len..];
    }
}

/// What the far end reported about a stream in RTCP receiver reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RtcpView {
    pub reports: u32,
    pub fraction_lost_pct: f64,
    pub cumulative_lost: i64,
    pub jitter_ms: f64,
    pub max_jitter_ms: f64,
}

/// Identity of a stream: addresses, ports and SSRC (as tshark keys its streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ssrc: u32,
}

/// The streams a report block about `ssrc` in an RTCP packet from `src` to `dst` may report
/// on, in the order to try them: the stream flowing back along the packet's path on the RTP
/// ports one below (RFC 3550's convention), then on the same ports (rtcp-mux, RFC 5761). An
/// SSRC alone is not unique (a relay may reuse one in two calls); only when neither stream
/// exists (RTCP on ports an `a=rtcp` line moved) should the SSRC alone decide.
pub fn rtcp_reported_streams(src: SocketAddr, dst: SocketAddr, ssrc: u32) -> [StreamKey; 2] {
    let below = |a: SocketAddr| SocketAddr::new(a.ip(), a.port().wrapping_sub(1));
    [
        StreamKey {
            src: below(dst),
            dst: below(src),
            ssrc,
        },
        StreamKey {
            src: dst,
            dst: src,
            ssrc,
        },
    ]
}

/// The kind of media an SDP `m=` line announced for a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Media {
    Audio,
    Video,
    /// No SDP announced the stream (found by its RTP header alone), or another kind.
    #[default]
    Unknown,
}

impl Media {
    /// From an `m=` line's media type.
    pub fn from_sdp(kind: &str) -> Media {
        if kind.eq_ignore_ascii_case("audio") {
            Media::Audio
        } else if kind.eq_ignore_ascii_case("video") {
            Media::Video
        } else {
            Media::Unknown
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Media::Audio => "audio",
            Media::Video => "video",
            Media::Unknown => "unknown",
        }
    }
}

/// Whether an `m=` line's transport protocol is SRTP (RFC 3711, 5124, 5764).
pub fn is_srtp_proto(proto: &str) -> bool {
    let p = proto.to_ascii_uppercase();
    p.ends_with("/SAVP") || p.ends_with("/SAVPF")
}

/// One RTP stream's state.
#[derive(Debug, Clone)]
pub struct RtpStream {
    pub key: StreamKey,
    /// What the SDP said the stream carries (`Unknown` without SDP).
    pub media: Media,
    /// The SDP put it under SRTP (`RTP/SAVP`, `RTP/SAVPF`, `UDP/TLS/RTP/SAVPF`): the payload
    /// is encrypted, the RTP header (and so every figure here) is in clear.
    pub encrypted: bool,
    pub first_ns: i64,
    pub last_ns: i64,
    pub packets: u64,
    pub bytes: u64,
    /// Payload types seen, in order of first appearance (at most 8 kept).
    pub payload_types: Vec<u8>,
    pub wireshark: WiresharkStats,
    pub sequence: SequenceStats,
    pub rtcp: Option<RtcpView>,
    /// True when an SDP announced one of its endpoints before its first packet.
    pub signalled: bool,
    /// The clock rate used (last non-zero).
    pub clock_rate: u32,
    /// RFC 4733 telephone events (keypad digits) carried in this stream, in order.
    pub dtmf: Vec<DtmfEvent>,
    /// The payload type the SDP named `telephone-event`, once one of its packets came.
    pub events_pt: Option<u8>,
    /// Names the call's SDP gave this stream's dynamic payload types (set when the call closes).
    pub codec_names: Vec<(u8, Box<str>)>,
}

impl RtpStream {
    pub fn new(key: StreamKey, ts_ns: i64, signalled: bool) -> RtpStream {
        RtpStream {
            key,
            media: Media::Unknown,
            encrypted: false,
            first_ns: ts_ns,
            last_ns: ts_ns,
            packets: 0,
            bytes: 0,
            payload_types: Vec::new(),
            wireshark: WiresharkStats::default(),
            sequence: SequenceStats::default(),
            rtcp: None,
            signalled,
            clock_rate: 0,
            dtmf: Vec::new(),
            events_pt: None,
            codec_names: Vec::new(),
        }
    }

    pub fn add(&mut self, ts_ns: i64, now_ms: f64, h: &RtpHeader, clock_rate: u32) {
        self.last_ns = ts_ns;
        self.packets += 1;
        self.bytes += h.payload_len as u64;
        if !self.payload_types.contains(&h.payload_type) && self.payload_types.len() < 8 {
            self.payload_types.push(h.payload_type);
        }
        if clock_rate != 0 {
            self.clock_rate = clock_rate;
        }
        self.wireshark.add(now_ms, h, clock_rate);
        self.sequence.add(h.seq);
    }

    pub fn add_rtcp(&mut self, block: &ReportBlock) {
        let v = self.rtcp.get_or_insert_with(RtcpView::default);
        v.reports += 1;
        v.fraction_lost_pct = block.fraction_lost as f64 * 100.0 / 256.0;
        v.cumulative_lost = block.cumulative_lost as i64;
        if self.clock_rate != 0 {
            v.jitter_ms = block.jitter as f64 * 1000.0 / self.clock_rate as f64;
            v.max_jitter_ms = v.max_jitter_ms.max(v.jitter_ms);
        }
    }

    /// tshark's payload column: names of the payload types seen, comma separated, in the order
    /// of their numbers (as tshark lists them, whatever order they came in).
    pub fn payload_names(&self) -> String {
        let mut s = String::new();
        let mut types = self.payload_types.clone();
        types.sort_unstable();
        for pt in types {
            if !s.is_empty() {
                s.push_str(", ");
            }
            let name = if self.events_pt == Some(pt) {
                "telephone-event"
            } else if let Some((_, n)) = self.codec_names.iter().find(|(p, _)| *p == pt) {
                n
            } else if pt == RTPEVENT_DEFAULT_PT {
                "rtpevent"
            } else {
                payload_name(pt)
            };
            if name.is_empty() {
                s.push_str(&pt.to_string());
            } else {
                s.push_str(name);
            }
        }
        s
    }

    /// Comfort noise (payload type 13, or the older 19) came in this stream.
    pub fn has_comfort_noise(&self) -> bool {
        self.payload_types
            .iter()
            .any(|&p| p == PT_CN || p == PT_CN_OLD)
    }

    /// The main payload type: the first one that is not comfort noise.
    pub fn main_payload_type(&self) -> Option<u8> {
        self.payload_types
            .iter()
            .copied()
            .find(|&p| p != PT_CN && p != PT_CN_OLD)
            .or(self.payload_types.first().copied())
    }

    /// MOS of this stream with the E-model (see [`crate::mos`]).
    pub fn mos(&self) -> Option<f64> {
        // The E-model scores speech: a video stream has no MOS.
        if self.media == Media::Video {
            return None;
        }
        let codec = crate::mos::Codec::from_payload_type(self.main_payload_type()?)?;
        let expected = self.sequence.expected().max(1) as f64;
        let lost = self.sequence.lost().max(0) as f64;
        let loss_pct = 100.0 * lost / expected;
        let burst_r = crate::mos::burst_ratio(
            self.sequence.received,
            self.sequence.loss_bursts,
            self.sequence.gap_packets,
        );
        Some(crate::mos::mos(
            codec,
            loss_pct,
            burst_r,
            self.wireshark.mean_jitter_ms,
        ))
    }
}

/// At most this many telephone events are kept per stream (an IVR dialogue has dozens).
pub const DTMF_EVENTS_MAX: usize = 256;

/// One RFC 4733 telephone event (a keypad digit, or flash): every packet of an event carries
/// the same RTP timestamp, a growing duration, and the end bit on its last packets (sent three
/// times). The event is counted once, with its final duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtmfEvent {
    /// 0-9, 10 `*`, 11 `#`, 12-15 `A`-`D`, 16 flash (RFC 4733 3.2).
    pub event: u8,
    /// Capture time of its first packet, ns since the epoch.
    pub start_ns: i64,
    /// Its RTP timestamp.
    pub timestamp: u32,
    /// The longest duration seen, in timestamp units (1/8 ms at 8 kHz).
    pub duration: u16,
    /// Power level, in -dBm0 (0 loudest).
    pub volume: u8,
    /// The end bit was seen.
    pub ended: bool,
}

impl DtmfEvent {
    /// The key: `0`-`9`, `*`, `#`, `A`-`D`, or `flash`, else the event number.
    pub fn digit(&self) -> std::borrow::Cow<'static, str> {
        const KEYS: &[u8; 16] = b"0123456789*#ABCD";
        match self.event {
            e @ 0..=15 => (KEYS[usize::from(e)] as char).to_string().into(),
            16 => "flash".into(),
            e => format!("event-{e}").into(),
        }
    }

    /// The duration in milliseconds at `clock_rate` (8,000 when unknown).
    pub fn duration_ms(&self, clock_rate: u32) -> f64 {
        let rate = if clock_rate == 0 { 8000 } else { clock_rate };
        f64::from(self.duration) * 1000.0 / f64::from(rate)
    }
}

impl RtpStream {
    /// Adds one telephone-event packet: its RTP timestamp and first four payload bytes.
    pub fn add_event(&mut self, ts_ns: i64, pt: u8, timestamp: u32, bytes: [u8; 4]) {
        self.events_pt = Some(pt);
        let h_timestamp = timestamp;
        let [event, flags, d0, d1] = bytes;
        let duration = u16::from_be_bytes([d0, d1]);
        let ended = flags & 0x80 != 0;
        if let Some(last) = self.dtmf.last_mut()
            && last.timestamp == h_timestamp
        {
            // The same event: a longer duration, or its end (retransmitted ends change nothing).
            last.duration = last.duration.max(duration);
            last.ended |= ended;
            return;
        }
        if self.dtmf.len() < DTMF_EVENTS_MAX {
            self.dtmf.push(DtmfEvent {
                event,
                start_ns: ts_ns,
                timestamp: h_timestamp,
                duration,
                volume: flags & 0x3f,
                ended,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(seq: u16, ts: u32, pt: u8, marker: bool) -> RtpHeader {
        RtpHeader {
            marker,
            payload_type: pt,
            seq,
            timestamp: ts,
            ssrc: 1,
            payload_len: 160,
            payload_off: 12,
        }
    }

    #[test]
    fn perfect_stream_has_no_jitter_and_20ms_deltas() {
        let mut s = WiresharkStats::default();
        for i in 0..100u16 {
            s.add(
                i as f64 * 20.0,
                &hdr(65500u16.wrapping_add(i), i as u32 * 160, 8, i == 0),
                8000,
            );
        }
        assert_eq!(s.total_nr, 100);
        assert_eq!(s.lost(), 0);
        assert_eq!((s.min_delta_ms, s.max_delta_ms), (20.0, 20.0));
        assert!((s.mean_delta_ms - 20.0).abs() < 1e-9);
        assert_eq!(s.max_jitter_ms, 0.0);
    }

    #[test]
    fn loss_duplicates_and_reordering() {
        let mut w = WiresharkStats::default();
        let mut q = SequenceStats::default();
        for seq in [1u16, 2, 4, 3, 5, 5, 6, 9, 10] {
            w.add(
                seq as f64 * 20.0,
                &hdr(seq, seq as u32 * 160, 0, false),
                8000,
            );
            q.add(seq);
        }
        assert_eq!(w.lost(), 10 - 9);
        assert_eq!((q.duplicates, q.out_of_order, q.lost()), (1, 1, 2));
        assert_eq!((q.loss_bursts, q.gap_packets), (2, 3));
    }

    #[test]
    fn parses_rtp_and_rtcp() {
        let mut b = Vec::new();
        crate::synth::packet::write_rtp(&mut b, 8, true, 7, 160, 0xABCD, 160, 0xd5);
        let h = RtpHeader::parse(&b).unwrap();
        assert_eq!(
            (
                h.marker,
                h.payload_type,
                h.seq,
                h.timestamp,
                h.ssrc,
                h.payload_len
            ),
            (true, 8, 7, 160, 0xABCD, 160)
        );
        // RR with one block
        let mut rr = vec![0x81, 201, 0, 7, 0, 0, 0, 9];
        rr.extend_from_slice(&0xABCDu32.to_be_bytes());
        rr.extend_from_slice(&[64, 0xff, 0xff, 0xfe]);
        rr.extend_from_slice(&100u32.to_be_bytes());
        rr.extend_from_slice(&80u32.to_be_bytes());
        rr.extend_from_slice(&[0; 8]);
        assert!(looks_like_rtcp(&rr));
        assert!(RtpHeader::parse(&rr).is_none());
        let mut out = Vec::new();
        rtcp_report_blocks(&rr, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (
                out[0].reporter_ssrc,
                out[0].ssrc,
                out[0].fraction_lost,
                out[0].cumulative_lost,
                out[0].jitter
            ),
            (9, 0xABCD, 64, -2, 80)
        );
        // Found by fuzzing: a length field of 0 (4 bytes) followed by more data.
        let mut out = Vec::new();
        rtcp_report_blocks(&[0x81, 201, 0, 0, 0x81, 201, 0, 0, 1, 2], &mut out);
        assert!(out.is_empty());
    }
}
