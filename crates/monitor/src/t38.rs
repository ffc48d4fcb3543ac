//! T.38 fax over UDPTL (ITU-T T.38, annex on UDPTL): a flow the SDP announced as
//! `m=image … udptl t38`, counted by its packets and their UDPTL sequence numbers.
//!
//! A UDPTL packet starts with a 16-bit sequence number, then the primary IFP packet (an ASN.1
//! PER open type: a length determinant and the IFP) and the error-recovery part. This module
//! reads the sequence number, the IFP's type of message ([`ifp_type`]: a T.30 indicator such as
//! CED or the V.21 preamble, or the modulation of T.30 data) and the error recovery
//! ([`Recovery`]), as tshark's T.38 dissector names them. The T.30 control frames (HDLC at 300
//! bit/s over V.21) are put back together per flow ([`T38Flow::add_v21`]), and a call's frames in
//! both directions give its pages and its result ([`FaxSummary`]). Once the SDP of a dialog moves
//! a port to UDPTL, its packets are T.38 and never RTP, even when their first byte looks like an
//! RTP header.
//!
//! The IFP's data fields are read as T.38 version 0 encodes them (the ASN.1 before its 2003
//! corrigendum: the field type in three bits after the presence bit), which is what tshark
//! decodes by default and what T38FaxVersion 0, the common case, sends.

use std::net::SocketAddr;

/// Shortest packet counted as UDPTL: sequence number, a length determinant and one IFP byte.
pub const MIN_UDPTL_BYTES: usize = 4;

/// Sequence numbers remembered behind the highest, to tell a duplicate from a late packet.
const WINDOW: u32 = 64;

/// The sequence number of a UDPTL packet, or `None` if it is too short to be one.
pub fn udptl_seq(payload: &[u8]) -> Option<u16> {
    if payload.len() < MIN_UDPTL_BYTES {
        return None;
    }
    Some(u16::from_be_bytes([payload[0], payload[1]]))
}

/// The type of an IFP packet: a T.30 indicator (a tone or a training), or T.30 data in a
/// modulation. The numbers are T.38's ASN.1 enumerations, extensions included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IfpType {
    Indicator(u8),
    Data(u8),
}

const INDICATORS: [&str; 23] = [
    "no-signal",
    "cng",
    "ced",
    "v21-preamble",
    "v27-2400-training",
    "v27-4800-training",
    "v29-7200-training",
    "v29-9600-training",
    "v17-7200-short-training",
    "v17-7200-long-training",
    "v17-9600-short-training",
    "v17-9600-long-training",
    "v17-12000-short-training",
    "v17-12000-long-training",
    "v17-14400-short-training",
    "v17-14400-long-training",
    "v8-ansam",
    "v8-signal",
    "v34-cntl-channel-1200",
    "v34-pri-channel",
    "v34-CC-retrain",
    "v33-12000-training",
    "v33-14400-training",
];

const DATA: [&str; 15] = [
    "v21",
    "v27-2400",
    "v27-4800",
    "v29-7200",
    "v29-9600",
    "v17-7200",
    "v17-9600",
    "v17-12000",
    "v17-14400",
    "v8",
    "v34-pri-rate",
    "v34-CC-1200",
    "v34-pri-ch",
    "v33-12000",
    "v33-14400",
];

impl IfpType {
    /// T.38's name for it (`ced`, `v21-preamble`, `v17-14400`...), or `indicator-N`/`data-N`.
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            IfpType::Indicator(n) => INDICATORS
                .get(usize::from(n))
                .map(|s| (*s).into())
                .unwrap_or_else(|| format!("indicator-{n}").into()),
            IfpType::Data(n) => DATA
                .get(usize::from(n))
                .map(|s| (*s).into())
                .unwrap_or_else(|| format!("data-{n}").into()),
        }
    }
}

/// The type of message of a UDPTL packet's primary IFP. `None` when the packet is too short or
/// its length determinant does not fit.
///
/// PER, aligned, as T.38 encodes it: after the sequence number, one length byte (or two, with
/// the top bit set); then the IFP's first byte: bit 7 says a data field follows, bit 6 picks
/// indicator (0) or data (1), bit 5 is the enumeration's extension bit; without it, bits 4-1
/// are the value; with it, bit 4 is 0 and the next six bits (3-0 and the next byte's 7-6) count
/// from the first extension value (16 for indicators, 9 for data).
pub fn ifp_type(udptl: &[u8]) -> Option<IfpType> {
    ifp_type_in(udptl, udptl.len())
}

/// [`ifp_type`] from the first bytes of a packet of `total_len` bytes.
fn ifp_type_in(udptl: &[u8], total_len: usize) -> Option<IfpType> {
    let (at, _) = ifp_span(udptl, total_len)?;
    let ifp = udptl.get(at..)?;
    let b = *ifp.first()?;
    let data = b & 0x40 != 0;
    let value = if b & 0x20 == 0 {
        (b >> 1) & 0x0f
    } else {
        if b & 0x10 != 0 {
            return None; // not a "normally small" number: never sent
        }
        let next = ifp.get(1).copied().unwrap_or(0);
        let index = ((b & 0x0f) << 2) | (next >> 6);
        index + if data { 9 } else { 16 }
    };
    Some(if data {
        IfpType::Data(value)
    } else {
        IfpType::Indicator(value)
    })
}

/// How a UDPTL packet guards against loss: its error-recovery field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// No secondary packets (or the field is missing).
    #[default]
    None,
    /// Copies of earlier IFPs ride along (`secondary-ifp-packets`, at least one).
    Redundancy,
    /// Forward error correction (`fec-info`).
    Fec,
}

/// What the analysis keeps of one UDPTL packet: small, owned, sent from the front to a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdptlPacket {
    pub seq: u16,
    pub bytes: u32,
    pub ifp: Option<IfpType>,
    pub recovery: Recovery,
    /// The primary IFP's data fields (from their count on) when it carries V.21 data, the T.30
    /// control frames; `None` for tones, trainings and page data.
    pub v21: Option<Box<[u8]>>,
}

impl UdptlPacket {
    /// Reads a UDPTL datagram; `None` when it is too short to be one.
    pub fn parse(payload: &[u8]) -> Option<UdptlPacket> {
        let seq = udptl_seq(payload)?;
        let mut p = UdptlPacket {
            seq,
            bytes: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            ifp: ifp_type(payload),
            recovery: Recovery::None,
            v21: None,
        };
        let Some((at, len)) = primary_ifp(payload) else {
            return Some(p);
        };
        let ifp = &payload[at..at + len];
        if p.ifp == Some(IfpType::Data(0)) && ifp[0] & 0x80 != 0 && ifp.len() > 1 {
            p.v21 = Some(ifp[1..].into());
        }
        p.recovery = match payload.get(at + len..) {
            Some([r, ..]) if r & 0x80 != 0 => Recovery::Fec,
            Some([_, n, ..]) if *n > 0 => Recovery::Redundancy,
            _ => Recovery::None,
        };
        Some(p)
    }

    /// From the first bytes kept by the front when the datagram itself is gone (a reassembled
    /// fragment): sequence number, length and type only.
    pub fn from_head(head: &UdptlHead) -> UdptlPacket {
        UdptlPacket {
            seq: head.seq(),
            bytes: u32::try_from(head.len()).unwrap_or(u32::MAX),
            ifp: head.ifp_type(),
            recovery: Recovery::None,
            v21: None,
        }
    }
}

/// Where the primary IFP lies: (start, length), within `udptl`.
fn primary_ifp(udptl: &[u8]) -> Option<(usize, usize)> {
    ifp_span(udptl, udptl.len())
}

/// Where the primary IFP of a packet of `total_len` bytes lies, from its length determinant in
/// `udptl` (the packet or its first bytes): one byte, or two with the top bit set. `None` when
/// the IFP is empty or runs past the packet.
fn ifp_span(udptl: &[u8], total_len: usize) -> Option<(usize, usize)> {
    let first = *udptl.get(2)?;
    let (at, len) = if first & 0x80 == 0 {
        (3, usize::from(first))
    } else {
        (
            4,
            usize::from(first & 0x3f) << 8 | usize::from(*udptl.get(3)?),
        )
    };
    (len > 0 && at + len <= total_len).then_some((at, len))
}

/// The type of an IFP data field (T.38's `field-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    HdlcData,
    HdlcSigEnd,
    HdlcFcsOk,
    HdlcFcsBad,
    HdlcFcsOkSigEnd,
    HdlcFcsBadSigEnd,
    T4NonEcmData,
    T4NonEcmSigEnd,
}

/// The data fields of an IFP, from their count on (as [`UdptlPacket::v21`] holds them): each
/// field's type and its bytes (empty when it has none). Stops at the first field that does not
/// fit.
pub fn data_fields(fields: &[u8]) -> impl Iterator<Item = (FieldType, &[u8])> {
    let count = fields.first().copied().unwrap_or(0);
    let mut at = 1usize;
    (0..count).map_while(move |_| {
        let b = *fields.get(at)?;
        let kind = match (b >> 4) & 0x07 {
            0 => FieldType::HdlcData,
            1 => FieldType::HdlcSigEnd,
            2 => FieldType::HdlcFcsOk,
            3 => FieldType::HdlcFcsBad,
            4 => FieldType::HdlcFcsOkSigEnd,
            5 => FieldType::HdlcFcsBadSigEnd,
            6 => FieldType::T4NonEcmData,
            _ => FieldType::T4NonEcmSigEnd,
        };
        at += 1;
        if b & 0x80 == 0 {
            return Some((kind, &fields[at..at]));
        }
        // The data's length less one, in two bytes (a constrained 1..65535 length).
        let hi = *fields.get(at)?;
        let lo = *fields.get(at + 1)?;
        let len = (usize::from(hi) << 8 | usize::from(lo)) + 1;
        let data = fields.get(at + 2..at + 2 + len)?;
        at += 2 + len;
        Some((kind, data))
    })
}

/// What the front keeps of a datagram that may be UDPTL: its first bytes and its length, a
/// copy small enough to take of every RTP-looking packet before the SDP says which it is.
#[derive(Debug, Clone, Copy)]
pub struct UdptlHead {
    head: [u8; 8],
    len: usize,
}

impl UdptlHead {
    pub fn new(payload: &[u8]) -> Option<UdptlHead> {
        if payload.len() < MIN_UDPTL_BYTES {
            return None;
        }
        let mut head = [0u8; 8];
        let n = payload.len().min(8);
        head[..n].copy_from_slice(&payload[..n]);
        Some(UdptlHead {
            head,
            len: payload.len(),
        })
    }

    pub fn seq(&self) -> u16 {
        u16::from_be_bytes([self.head[0], self.head[1]])
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn ifp_type(&self) -> Option<IfpType> {
        ifp_type_in(&self.head[..self.len.min(8)], self.len)
    }
}

/// At most this many distinct IFP types are remembered per flow.
pub const TYPES_MAX: usize = 32;

/// At most this many T.30 control frames are kept per flow (a fax of a hundred pages sends
/// about three per page).
pub const T30_FRAMES_MAX: usize = 512;

/// Longest T.30 frame put back together: address, control, FCF and a FIF of up to 252 bytes
/// (T.30 limits a frame to 256 octets before its FCS). Longer ones are dropped.
pub const HDLC_BYTES_MAX: usize = 256;

/// One T.30 control frame, whole and with a good FCS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct T30Frame {
    pub ts_ns: i64,
    /// The facsimile control field without its X bit, as tshark reports `t30.FacsimileControl`.
    pub fcf: u8,
    /// The first byte of the information field (a PPS's post-message command), 0 if none.
    pub fif0: u8,
}

/// T.30 facsimile control fields (X bit cleared).
pub mod fcf {
    pub const DIS: u8 = 0x01;
    pub const DCS: u8 = 0x41;
    pub const CFR: u8 = 0x21;
    pub const FTT: u8 = 0x22;
    pub const EOM: u8 = 0x71;
    pub const MPS: u8 = 0x72;
    pub const EOP: u8 = 0x74;
    pub const PRI_EOM: u8 = 0x79;
    pub const PRI_MPS: u8 = 0x7a;
    pub const PRI_EOP: u8 = 0x7c;
    pub const MCF: u8 = 0x31;
    pub const RTP: u8 = 0x33;
    pub const RTN: u8 = 0x32;
    pub const PIP: u8 = 0x35;
    pub const PIN: u8 = 0x34;
    pub const PPS: u8 = 0x7d;
    pub const DCN: u8 = 0x5f;

    /// [`name`], or `fcf-0xNN` for a field not named here.
    pub fn label(f: u8) -> std::borrow::Cow<'static, str> {
        name(f).map_or_else(|| format!("fcf-{f:#04x}").into(), Into::into)
    }

    /// T.30's short name of a control field (`DIS`, `MCF`...), or `None` if unknown here.
    pub fn name(f: u8) -> Option<&'static str> {
        Some(match f {
            DIS => "DIS",
            0x02 => "CSI",
            0x04 => "NSF",
            DCS => "DCS",
            0x42 => "TSI",
            0x44 => "NSS",
            CFR => "CFR",
            FTT => "FTT",
            EOM => "EOM",
            MPS => "MPS",
            EOP => "EOP",
            PRI_EOM => "PRI-EOM",
            PRI_MPS => "PRI-MPS",
            PRI_EOP => "PRI-EOP",
            MCF => "MCF",
            RTP => "RTP",
            RTN => "RTN",
            PIP => "PIP",
            PIN => "PIN",
            PPS => "PPS",
            0x76 => "RR",
            0x37 => "RNR",
            0x3d => "PPR",
            0x48 => "CTC",
            0x23 => "CTR",
            0x73 => "EOR",
            0x38 => "ERR",
            0x58 => "CRP",
            DCN => "DCN",
            _ => return None,
        })
    }
}

/// One direction of T.38 between two addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct T38Flow {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub first_ns: i64,
    pub last_ns: i64,
    pub packets: u64,
    pub bytes: u64,
    /// Sequence numbers never seen between the first and the highest (late arrivals are taken
    /// back out).
    pub lost: u64,
    pub duplicates: u64,
    /// Packets older than the highest seen when they came.
    pub out_of_order: u64,
    /// The IFP types seen, in order of first appearance (at most [`TYPES_MAX`]).
    pub types: Vec<IfpType>,
    /// Packets carrying copies of earlier IFPs (redundancy), and packets carrying FEC.
    pub redundant: u64,
    pub fec: u64,
    /// T.30 control frames in the order they completed (at most [`T30_FRAMES_MAX`]).
    pub t30: Vec<T30Frame>,
    /// The T.30 frame being put back together from HDLC data fields; `None` after one grew past
    /// [`HDLC_BYTES_MAX`], until its end.
    hdlc: Option<Vec<u8>>,
    /// First and highest sequence numbers, extended past 16-bit wraps.
    pub first_seq: u16,
    highest: u32,
    /// Bit `i`: `highest - i` was seen.
    seen: u64,
}

impl T38Flow {
    /// A flow from its first packet.
    pub fn new(src: SocketAddr, dst: SocketAddr, ts_ns: i64, p: &UdptlPacket) -> T38Flow {
        let mut f = T38Flow::first(src, dst, ts_ns, p.seq, p.bytes as usize);
        f.note(ts_ns, p);
        f
    }

    /// Counts a later packet of the flow, and reads it unless it is a duplicate.
    pub fn take(&mut self, ts_ns: i64, p: &UdptlPacket) {
        if self.add(ts_ns, p.seq, p.bytes as usize) {
            self.note(ts_ns, p);
        }
    }

    /// What a packet says beyond its sequence number.
    fn note(&mut self, ts_ns: i64, p: &UdptlPacket) {
        if let Some(t) = p.ifp {
            self.saw(t);
        }
        self.recovered_by(p.recovery);
        if let Some(fields) = &p.v21 {
            self.add_v21(ts_ns, fields);
        }
    }

    fn first(src: SocketAddr, dst: SocketAddr, ts_ns: i64, seq: u16, bytes: usize) -> T38Flow {
        T38Flow {
            src,
            dst,
            first_ns: ts_ns,
            last_ns: ts_ns,
            packets: 1,
            bytes: bytes as u64,
            lost: 0,
            duplicates: 0,
            out_of_order: 0,
            types: Vec::new(),
            redundant: 0,
            fec: 0,
            t30: Vec::new(),
            hdlc: Some(Vec::new()),
            first_seq: seq,
            highest: u32::from(seq),
            seen: 1,
        }
    }

    /// Notes an IFP's type of message (once per type).
    pub fn saw(&mut self, t: IfpType) {
        if !self.types.contains(&t) && self.types.len() < TYPES_MAX {
            self.types.push(t);
        }
    }

    /// Counts a packet's error recovery.
    pub fn recovered_by(&mut self, r: Recovery) {
        match r {
            Recovery::None => {}
            Recovery::Redundancy => self.redundant += 1,
            Recovery::Fec => self.fec += 1,
        }
    }

    /// Takes the data fields of a V.21 IFP ([`UdptlPacket::v21`]): HDLC data is gathered until
    /// a field ends the frame; a frame ending with a good FCS that carries T.30's address is
    /// kept as a [`T30Frame`]. A bad FCS, or a signal ending without one, drops the frame.
    pub fn add_v21(&mut self, ts_ns: i64, fields: &[u8]) {
        for (kind, data) in data_fields(fields) {
            if let Some(buf) = &mut self.hdlc
                && !data.is_empty()
                && matches!(
                    kind,
                    FieldType::HdlcData | FieldType::HdlcFcsOk | FieldType::HdlcFcsOkSigEnd
                )
            {
                if buf.len() + data.len() > HDLC_BYTES_MAX {
                    self.hdlc = None;
                } else {
                    buf.extend_from_slice(data);
                }
            }
            match kind {
                FieldType::HdlcData | FieldType::T4NonEcmData | FieldType::T4NonEcmSigEnd => {}
                FieldType::HdlcFcsOk | FieldType::HdlcFcsOkSigEnd => {
                    let frame = self.hdlc.replace(Vec::new()).unwrap_or_default();
                    if let [0xff, _, f, ref rest @ ..] = frame[..]
                        && self.t30.len() < T30_FRAMES_MAX
                    {
                        self.t30.push(T30Frame {
                            ts_ns,
                            fcf: f & 0x7f,
                            fif0: rest.first().copied().unwrap_or(0),
                        });
                    }
                }
                FieldType::HdlcSigEnd | FieldType::HdlcFcsBad | FieldType::HdlcFcsBadSigEnd => {
                    self.hdlc = Some(Vec::new());
                }
            }
        }
    }

    /// The highest sequence number seen.
    pub fn highest_seq(&self) -> u16 {
        self.highest as u16
    }

    /// Counts a packet by its sequence number; `false` when it is a duplicate.
    pub fn add(&mut self, ts_ns: i64, seq: u16, bytes: usize) -> bool {
        self.packets += 1;
        self.bytes += bytes as u64;
        self.last_ns = self.last_ns.max(ts_ns);
        // The extended number nearest the highest: a step of under half the space either way.
        let delta = seq.wrapping_sub(self.highest as u16) as i16 as i64;
        let ext = (i64::from(self.highest) + delta).max(0) as u32;
        if ext > self.highest {
            let step = ext - self.highest;
            self.lost += u64::from(step - 1);
            self.seen = if step >= WINDOW {
                1
            } else {
                (self.seen << step) | 1
            };
            self.highest = ext;
            return true;
        }
        let behind = self.highest - ext;
        if behind < WINDOW && self.seen & (1 << behind) != 0 {
            self.duplicates += 1;
            return false;
        }
        self.out_of_order += 1;
        if behind < WINDOW {
            self.seen |= 1 << behind;
            self.lost = self.lost.saturating_sub(1);
        }
        true
    }

    pub fn duration_ns(&self) -> i64 {
        self.last_ns - self.first_ns
    }
}

/// How a fax call ended, from its T.30 control frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaxResult {
    /// The receiver confirmed the last page (MCF or RTP after EOP).
    Completed,
    /// T.30 ran but the document was never confirmed complete.
    Interrupted,
}

impl FaxResult {
    pub fn as_str(self) -> &'static str {
        match self {
            FaxResult::Completed => "completed",
            FaxResult::Interrupted => "interrupted",
        }
    }
}

/// A fax call as a whole, from its T.38 flows in both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaxSummary {
    /// The first UDPTL packet.
    pub start_ns: i64,
    /// The fastest page modulation seen (`v17-14400`, `v29-9600`...), if pages were sent.
    pub modulation: Option<IfpType>,
    /// Pages the receiver confirmed: an MCF or RTP answering a post-message command (MPS, EOM,
    /// EOP, their PRI- forms, or a PPS carrying one). `None` without T.30 control frames.
    pub pages: Option<u32>,
    /// `None` without T.30 control frames (HDLC not seen: the capture began late, or a
    /// version of T.38 not read here).
    pub result: Option<FaxResult>,
}

/// Bit rate of a T.38 data modulation that carries pages; 0 for V.21, V.8 and control channels.
fn page_rate(data: u8) -> u32 {
    match data {
        1 => 2400,
        2 => 4800,
        3 | 5 => 7200,
        4 | 6 => 9600,
        7 | 13 => 12_000,
        8 | 14 => 14_400,
        10 | 12 => 33_600,
        _ => 0,
    }
}

impl FaxSummary {
    /// The summary of a call's T.38 flows; `None` without any.
    pub fn of<'a>(flows: impl IntoIterator<Item = &'a T38Flow> + Clone) -> Option<FaxSummary> {
        let start_ns = flows.clone().into_iter().map(|f| f.first_ns).min()?;
        let modulation = flows
            .clone()
            .into_iter()
            .flat_map(|f| f.types.iter().copied())
            .filter_map(|t| match t {
                IfpType::Data(d) if page_rate(d) > 0 => Some((page_rate(d), t)),
                _ => None,
            })
            .max()
            .map(|(_, t)| t);
        let mut frames: Vec<T30Frame> = flows
            .into_iter()
            .flat_map(|f| f.t30.iter().copied())
            .collect();
        if frames.is_empty() {
            return Some(FaxSummary {
                start_ns,
                modulation,
                pages: None,
                result: None,
            });
        }
        // Both directions in time order: a command, then its answer.
        frames.sort_by_key(|f| f.ts_ns);
        let (mut pages, mut done) = (0u32, false);
        // The post-message command waiting for its answer: whether it ended the document.
        let mut pending: Option<bool> = None;
        for f in &frames {
            let post = |c: u8| match c {
                fcf::MPS | fcf::EOM | fcf::PRI_MPS | fcf::PRI_EOM => Some(false),
                fcf::EOP | fcf::PRI_EOP => Some(true),
                _ => None,
            };
            match f.fcf {
                fcf::PPS => pending = post(f.fif0 & 0x7f),
                fcf::MCF | fcf::RTP | fcf::PIP => {
                    if let Some(last) = pending.take() {
                        pages += 1;
                        done |= last;
                    }
                }
                fcf::RTN | fcf::PIN => pending = None,
                c => {
                    if let Some(p) = post(c) {
                        pending = Some(p);
                    }
                }
            }
        }
        Some(FaxSummary {
            start_ns,
            modulation,
            pages: Some(pages),
            result: Some(if done {
                FaxResult::Completed
            } else {
                FaxResult::Interrupted
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(seqs: &[u16]) -> T38Flow {
        let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:5000".parse().unwrap();
        let mut f = T38Flow::first(a, b, 0, seqs[0], 10);
        for (i, s) in seqs.iter().enumerate().skip(1) {
            f.add(i as i64, *s, 10);
        }
        f
    }

    #[test]
    fn gaps_duplicates_and_late_packets_are_told_apart() {
        let f = flow(&[1, 2, 3, 5, 6]);
        assert_eq!(
            (f.packets, f.lost, f.duplicates, f.out_of_order),
            (5, 1, 0, 0)
        );
        let f = flow(&[1, 2, 2, 3]);
        assert_eq!((f.lost, f.duplicates), (0, 1));
        // 4 arrives after 5: late, not lost.
        let f = flow(&[1, 2, 3, 5, 4, 6]);
        assert_eq!((f.lost, f.duplicates, f.out_of_order), (0, 0, 1));
    }

    #[test]
    fn the_sequence_number_wraps() {
        let f = flow(&[65_534, 65_535, 0, 1]);
        assert_eq!((f.lost, f.highest_seq()), (0, 1));
    }

    #[test]
    fn ifp_types_read_as_tshark_names_them() {
        let udptl = |ifp: &[u8]| {
            let mut p = vec![0, 7, ifp.len() as u8];
            p.extend_from_slice(ifp);
            p.push(0);
            p
        };
        // Values and names from tshark 4.0's T.38 dissector on the same bytes.
        let cases: [(&[u8], IfpType, &str); 7] = [
            (&[0x04], IfpType::Indicator(2), "ced"),
            (&[0x06], IfpType::Indicator(3), "v21-preamble"),
            (&[0x1e], IfpType::Indicator(15), "v17-14400-long-training"),
            (&[0x20, 0x00], IfpType::Indicator(16), "v8-ansam"),
            (&[0xc0, 0x01], IfpType::Data(0), "v21"),
            (&[0x50], IfpType::Data(8), "v17-14400"),
            (&[0x60, 0x00], IfpType::Data(9), "v8"),
        ];
        for (ifp, t, name) in cases {
            assert_eq!(ifp_type(&udptl(ifp)), Some(t), "{ifp:02x?}");
            assert_eq!(t.name(), name);
        }
        assert_eq!(ifp_type(&[0, 1, 5, 0x04]), None, "length past the end");
    }

    /// A V.21 IFP carrying `fields`: (type number, data) pairs.
    fn v21_ifp(fields: &[(u8, &[u8])]) -> Vec<u8> {
        let mut ifp = vec![0xc0, fields.len() as u8];
        for (kind, data) in fields {
            if data.is_empty() {
                ifp.push(kind << 4);
            } else {
                ifp.push(0x80 | kind << 4);
                ifp.extend_from_slice(&((data.len() - 1) as u16).to_be_bytes());
                ifp.extend_from_slice(data);
            }
        }
        ifp
    }

    fn udptl_packet(seq: u16, ifp: &[u8], recovery: &[u8]) -> UdptlPacket {
        let mut p = seq.to_be_bytes().to_vec();
        p.push(ifp.len() as u8);
        p.extend_from_slice(ifp);
        p.extend_from_slice(recovery);
        UdptlPacket::parse(&p).unwrap()
    }

    #[test]
    fn error_recovery_is_read_as_tshark_reads_it() {
        // tshark 4.0: error_recovery 0 with 1 secondary packet; 1 (fec-info); 0 with none.
        assert_eq!(
            udptl_packet(1, &[0x06], &[0x00, 0x01, 0x01, 0x06]).recovery,
            Recovery::Redundancy
        );
        assert_eq!(
            udptl_packet(1, &[0x06], &[0x80, 0x01, 0x03, 0x01, 0x02, 0x01, 0x02]).recovery,
            Recovery::Fec
        );
        assert_eq!(
            udptl_packet(1, &[0x06], &[0x00, 0x00]).recovery,
            Recovery::None
        );
        assert_eq!(udptl_packet(1, &[0x06], &[]).recovery, Recovery::None);
    }

    #[test]
    fn t30_frames_are_put_back_together_from_hdlc_fields() {
        let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:5000".parse().unwrap();
        let p = udptl_packet(0, &[0x06], &[0, 0]);
        let mut f = T38Flow::new(a, b, 0, &p);
        // DIS in two fragments, then its good FCS in a packet of its own.
        let parts: [&[(u8, &[u8])]; 3] = [
            &[(0, &[0xff, 0xc8])],
            &[(0, &[0x01, 0x00, 0x50])],
            &[(2, &[])],
        ];
        for (i, fields) in parts.iter().enumerate() {
            f.take(
                i as i64 + 1,
                &udptl_packet(i as u16 + 1, &v21_ifp(fields), &[0, 0]),
            );
        }
        // A repeated packet is not read twice; a bad FCS drops its frame.
        f.take(4, &udptl_packet(3, &v21_ifp(&[(2, &[])]), &[0, 0]));
        f.take(
            5,
            &udptl_packet(4, &v21_ifp(&[(0, &[0xff, 0xc8, 0xc1]), (3, &[])]), &[]),
        );
        // DCS and its good FCS in one IFP, the X bit set.
        f.take(
            6,
            &udptl_packet(5, &v21_ifp(&[(0, &[0xff, 0xc8, 0xc1]), (4, &[])]), &[]),
        );
        let got: Vec<(i64, u8)> = f.t30.iter().map(|t| (t.ts_ns, t.fcf)).collect();
        assert_eq!(got, [(3, fcf::DIS), (6, fcf::DCS)]);
        assert_eq!(f.duplicates, 1);
        // A frame longer than T.30 allows is dropped, not grown without bound.
        let long = vec![0x55u8; 200];
        f.take(
            7,
            &udptl_packet(6, &v21_ifp(&[(0, &[0xff, 0xc8, 0x02])]), &[]),
        );
        f.take(8, &udptl_packet(7, &v21_ifp(&[(0, &long)]), &[]));
        f.take(9, &udptl_packet(8, &v21_ifp(&[(0, &long), (2, &[])]), &[]));
        assert_eq!(f.t30.len(), 2);
    }

    fn session(frames: &[(u8, u8)]) -> T38Flow {
        let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let p = udptl_packet(0, &[0x50], &[]);
        let mut f = T38Flow::new(a, a, 0, &p);
        f.t30 = frames
            .iter()
            .enumerate()
            .map(|(i, &(fcf, fif0))| T30Frame {
                ts_ns: i as i64,
                fcf,
                fif0,
            })
            .collect();
        f
    }

    #[test]
    fn pages_are_the_confirmed_post_message_commands() {
        use fcf::*;
        // Two pages, the second the last: completed.
        let f = session(&[
            (DIS, 0),
            (DCS, 0),
            (CFR, 0),
            (MPS, 0),
            (MCF, 0),
            (EOP, 0),
            (MCF, 0),
            (DCN, 0),
        ]);
        let s = FaxSummary::of([&f]).unwrap();
        assert_eq!((s.pages, s.result), (Some(2), Some(FaxResult::Completed)));
        assert_eq!(s.modulation.map(|m| m.name()), Some("v17-14400".into()));
        // A page retrained negative is not counted; the call ends before EOP is answered.
        let f = session(&[
            (DCS, 0),
            (MPS, 0),
            (RTN, 0),
            (MPS, 0),
            (MCF, 0),
            (EOP, 0),
            (DCN, 0),
        ]);
        let s = FaxSummary::of([&f]).unwrap();
        assert_eq!((s.pages, s.result), (Some(1), Some(FaxResult::Interrupted)));
        // Error correction mode: a PPS-NULL is a block, not a page; PPS-EOP ends the document.
        let f = session(&[
            (PPS, 0x00),
            (MCF, 0),
            (PPS, 0xf2),
            (MCF, 0),
            (PPS, 0xf4),
            (MCF, 0),
        ]);
        let s = FaxSummary::of([&f]).unwrap();
        assert_eq!((s.pages, s.result), (Some(2), Some(FaxResult::Completed)));
        // No control frames: nothing can be said of pages or result.
        let s = FaxSummary::of([&session(&[])]).unwrap();
        assert_eq!((s.pages, s.result), (None, None));
    }

    #[test]
    fn a_packet_too_short_is_not_udptl() {
        assert_eq!(udptl_seq(&[0, 1, 2]), None);
        assert_eq!(udptl_seq(&[0x12, 0x34, 1, 0]), Some(0x1234));
    }
}
