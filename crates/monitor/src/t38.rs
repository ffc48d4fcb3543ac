//! T.38 fax over UDPTL (ITU-T T.38, annex on UDPTL): a flow the SDP announced as
//! `m=image … udptl t38`, counted by its packets and their UDPTL sequence numbers.
//!
//! A UDPTL packet starts with a 16-bit sequence number, then the primary IFP packet (an ASN.1
//! PER open type: a length determinant and the IFP) and the error-recovery part. This module
//! reads the sequence number and the IFP's type of message ([`ifp_type`]: a T.30 indicator
//! such as CED or the V.21 preamble, or the modulation of T.30 data), as tshark's T.38
//! dissector names them; pages and the fax's result come later. Once the SDP of a dialog moves
//! a port to UDPTL, its packets are T.38 and never RTP, even when their first byte looks like
//! an RTP header.

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
    let first = *udptl.get(2)?;
    let at: usize = if first & 0x80 == 0 { 3 } else { 4 };
    let len = if first & 0x80 == 0 {
        usize::from(first)
    } else {
        usize::from(first & 0x3f) << 8 | usize::from(*udptl.get(3)?)
    };
    if len == 0 || at.checked_add(len)? > total_len {
        return None;
    }
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
    /// First and highest sequence numbers, extended past 16-bit wraps.
    pub first_seq: u16,
    highest: u32,
    /// Bit `i`: `highest - i` was seen.
    seen: u64,
}

impl T38Flow {
    pub fn new(src: SocketAddr, dst: SocketAddr, ts_ns: i64, seq: u16, bytes: usize) -> T38Flow {
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

    /// The highest sequence number seen.
    pub fn highest_seq(&self) -> u16 {
        self.highest as u16
    }

    pub fn add(&mut self, ts_ns: i64, seq: u16, bytes: usize) {
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
            return;
        }
        let behind = self.highest - ext;
        if behind < WINDOW && self.seen & (1 << behind) != 0 {
            self.duplicates += 1;
            return;
        }
        self.out_of_order += 1;
        if behind < WINDOW {
            self.seen |= 1 << behind;
            self.lost = self.lost.saturating_sub(1);
        }
    }

    pub fn duration_ns(&self) -> i64 {
        self.last_ns - self.first_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(seqs: &[u16]) -> T38Flow {
        let a: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:5000".parse().unwrap();
        let mut f = T38Flow::new(a, b, 0, seqs[0], 10);
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

    #[test]
    fn a_packet_too_short_is_not_udptl() {
        assert_eq!(udptl_seq(&[0, 1, 2]), None);
        assert_eq!(udptl_seq(&[0x12, 0x34, 1, 0]), Some(0x1234));
    }
}
