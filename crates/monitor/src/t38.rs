//! T.38 fax over UDPTL (ITU-T T.38, annex on UDPTL): a flow the SDP announced as
//! `m=image … udptl t38`, counted by its packets and their UDPTL sequence numbers.
//!
//! A UDPTL packet starts with a 16-bit sequence number, then the primary IFP packet (a length
//! determinant and the IFP) and the error-recovery part. This module reads the sequence number
//! only; the IFP decode (indicators, data types, pages) comes later. Once the SDP of a dialog
//! moves a port to UDPTL, its packets are T.38 and never RTP, even when their first byte looks
//! like an RTP header.

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
            first_seq: seq,
            highest: u32::from(seq),
            seen: 1,
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
    fn a_packet_too_short_is_not_udptl() {
        assert_eq!(udptl_seq(&[0, 1, 2]), None);
        assert_eq!(udptl_seq(&[0x12, 0x34, 1, 0]), Some(0x1234));
    }
}
