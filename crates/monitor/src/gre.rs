//! GRE (RFC 2784, with RFC 2890's key and sequence number) and the port mirrors carried in it:
//! ERSPAN types I, II and III, which Cisco and Arista switches send to a remote analyser.
//!
//! What a GRE packet carries: IPv4 or IPv6 (protocols 0x0800, 0x86DD), an Ethernet frame
//! (transparent Ethernet bridging, 0x6558), or a mirrored frame (ERSPAN): protocol 0x88BE is
//! type II when the GRE header has a sequence number (an 8-byte ERSPAN header follows) and type
//! I when it has none (the frame follows GRE directly); protocol 0x22EB is type III (a 12-byte
//! header, an 8-byte platform sub-header when its O bit is set, then an Ethernet frame or, by
//! its frame type, an IP packet). WCCP redirection (0x883E, a web cache's) carries IP too. Anything else — GRE version 1 (PPTP), source routing, other
//! protocols, ERSPAN versions or frame types not listed here — is reported as [`Undecoded`],
//! for the decoder to count. Parsing is stateless and reads only the header lengths the flags
//! give, each checked against what was captured.

/// GRE protocol types understood here.
pub mod proto {
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
    /// Transparent Ethernet bridging (an Ethernet frame follows).
    pub const TEB: u16 = 0x6558;
    /// ERSPAN type I (no sequence number in GRE) and type II (with one).
    pub const ERSPAN_I_II: u16 = 0x88be;
    pub const ERSPAN_III: u16 = 0x22eb;
    /// WCCP redirection: IP after a 4-byte redirect header (version 2) or directly (version 1).
    pub const WCCP: u16 = 0x883e;
}

const GRE_CHECKSUM: u8 = 0x80;
const GRE_ROUTING: u8 = 0x40;
const GRE_KEY: u8 = 0x20;
const GRE_SEQUENCE: u8 = 0x10;

/// ERSPAN type II header length.
const ERSPAN_II_BYTES: usize = 8;
/// ERSPAN type III header length, before its optional platform sub-header.
const ERSPAN_III_BYTES: usize = 12;
const ERSPAN_III_PLATFORM_BYTES: usize = 8;

/// What a GRE packet holds, as far as a call monitor cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// An IPv4 or IPv6 packet.
    Ip(&'a [u8]),
    /// An Ethernet frame (bridged or mirrored).
    Ethernet(&'a [u8]),
    /// A packet this decoder does not follow, and why.
    Undecoded(Undecoded),
}

/// Why a tunnel's contents were not followed: each is counted by the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecoded {
    /// GRE version 1 (PPTP's enhanced GRE) or a version above it.
    GreVersion,
    /// RFC 1701 source routing.
    GreRouting,
    /// A GRE protocol type other than IP, Ethernet and ERSPAN (MPLS, PPP, WCCP, ...).
    GreProtocol,
    /// An ERSPAN header whose version does not match its GRE protocol type.
    ErspanVersion,
    /// An ERSPAN type III frame type other than Ethernet and IP.
    ErspanFrameType,
}

/// Why a GRE packet is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    Gre,
    Erspan,
}

impl Malformed {
    pub fn what(self) -> &'static str {
        match self {
            Malformed::Gre => "GRE",
            Malformed::Erspan => "ERSPAN",
        }
    }
}

/// Reads a GRE header and what follows it (`data` starts at the GRE header).
pub fn decapsulate(data: &[u8]) -> Result<Payload<'_>, Malformed> {
    if data.len() < 4 {
        return Err(Malformed::Gre);
    }
    let flags = data[0];
    let version = data[1] & 0x07;
    let protocol = u16::from_be_bytes([data[2], data[3]]);
    if version != 0 {
        return Ok(Payload::Undecoded(Undecoded::GreVersion));
    }
    if flags & GRE_ROUTING != 0 {
        return Ok(Payload::Undecoded(Undecoded::GreRouting));
    }
    let mut len = 4;
    for (bit, bytes) in [(GRE_CHECKSUM, 4), (GRE_KEY, 4), (GRE_SEQUENCE, 4)] {
        if flags & bit != 0 {
            len += bytes;
        }
    }
    let Some(rest) = data.get(len..) else {
        return Err(Malformed::Gre);
    };
    Ok(match protocol {
        proto::IPV4 | proto::IPV6 => Payload::Ip(rest),
        proto::TEB => Payload::Ethernet(rest),
        // Type I has no ERSPAN header: GRE without a sequence number says so.
        proto::ERSPAN_I_II if flags & GRE_SEQUENCE == 0 => Payload::Ethernet(rest),
        proto::ERSPAN_I_II => erspan_ii(rest)?,
        proto::ERSPAN_III => erspan_iii(rest)?,
        // Version 1 has no redirect header: the IPv4 packet starts at once.
        proto::WCCP if rest.first().is_some_and(|b| b >> 4 == 4) => Payload::Ip(rest),
        proto::WCCP => Payload::Ip(rest.get(4..).ok_or(Malformed::Gre)?),
        _ => Payload::Undecoded(Undecoded::GreProtocol),
    })
}

fn erspan_version(header: &[u8]) -> u8 {
    header[0] >> 4
}

fn erspan_ii(data: &[u8]) -> Result<Payload<'_>, Malformed> {
    if data.len() < ERSPAN_II_BYTES {
        return Err(Malformed::Erspan);
    }
    if erspan_version(data) != 1 {
        return Ok(Payload::Undecoded(Undecoded::ErspanVersion));
    }
    Ok(Payload::Ethernet(&data[ERSPAN_II_BYTES..]))
}

fn erspan_iii(data: &[u8]) -> Result<Payload<'_>, Malformed> {
    if data.len() < ERSPAN_III_BYTES {
        return Err(Malformed::Erspan);
    }
    if erspan_version(data) != 2 {
        return Ok(Payload::Undecoded(Undecoded::ErspanVersion));
    }
    // Last 16 bits of the header: P (1), FT (5), Hw ID (6), D (1), Gra (2), O (1).
    let tail = u16::from_be_bytes([data[10], data[11]]);
    let frame_type = (tail >> 10) & 0x1f;
    let platform = tail & 1 != 0;
    let len = ERSPAN_III_BYTES
        + if platform {
            ERSPAN_III_PLATFORM_BYTES
        } else {
            0
        };
    let Some(rest) = data.get(len..) else {
        return Err(Malformed::Erspan);
    };
    Ok(match frame_type {
        0 => Payload::Ethernet(rest),
        2 => Payload::Ip(rest),
        _ => Payload::Undecoded(Undecoded::ErspanFrameType),
    })
}

/// Frame builders for tests, fuzz seeds and synthetic captures.
pub mod build {
    use super::proto;

    /// A GRE header with the optional fields the arguments ask for, then `payload`.
    pub fn gre(protocol: u16, key: Option<u32>, seq: Option<u32>, payload: &[u8]) -> Vec<u8> {
        let mut flags = 0u8;
        if key.is_some() {
            flags |= super::GRE_KEY;
        }
        if seq.is_some() {
            flags |= super::GRE_SEQUENCE;
        }
        let mut v = vec![flags, 0];
        v.extend_from_slice(&protocol.to_be_bytes());
        for field in [key, seq].into_iter().flatten() {
            v.extend_from_slice(&field.to_be_bytes());
        }
        v.extend_from_slice(payload);
        v
    }

    /// ERSPAN type I: GRE without a sequence number, then the mirrored frame.
    pub fn erspan_i(frame: &[u8]) -> Vec<u8> {
        gre(proto::ERSPAN_I_II, None, None, frame)
    }

    /// ERSPAN type II (session `session`, VLAN 0) with GRE sequence number `seq`.
    pub fn erspan_ii(seq: u32, session: u16, frame: &[u8]) -> Vec<u8> {
        let mut h = vec![0x10, 0x00];
        h.extend_from_slice(&(session & 0x3ff).to_be_bytes());
        h.extend_from_slice(&[0, 0, 0, 0]);
        h.extend_from_slice(frame);
        gre(proto::ERSPAN_I_II, None, Some(seq), &h)
    }

    /// ERSPAN type III carrying an Ethernet frame, with the 8-byte platform sub-header when
    /// `platform` is given.
    pub fn erspan_iii(
        seq: u32,
        session: u16,
        timestamp: u32,
        platform: Option<[u8; 8]>,
        frame: &[u8],
    ) -> Vec<u8> {
        let mut h = vec![0x20, 0x00];
        h.extend_from_slice(&(session & 0x3ff).to_be_bytes());
        h.extend_from_slice(&timestamp.to_be_bytes());
        // SGT 0; frame type 0 (Ethernet), hardware ID 1, granularity 3 (IEEE 1588), O bit.
        let tail: u16 = (1 << 4) | (3 << 1) | u16::from(platform.is_some());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&tail.to_be_bytes());
        if let Some(p) = platform {
            h.extend_from_slice(&p);
        }
        h.extend_from_slice(frame);
        gre(proto::ERSPAN_III, None, Some(seq), &h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: &[u8] = b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00inner";

    #[test]
    fn every_kind_reaches_its_payload() {
        assert_eq!(
            decapsulate(&build::gre(proto::IPV4, Some(7), Some(1), b"ip")),
            Ok(Payload::Ip(b"ip"))
        );
        assert_eq!(
            decapsulate(&build::gre(proto::TEB, None, None, FRAME)),
            Ok(Payload::Ethernet(FRAME))
        );
        assert_eq!(
            decapsulate(&build::gre(
                proto::WCCP,
                None,
                None,
                b"\x00\x00\x00\x01\x45ip"
            )),
            Ok(Payload::Ip(b"\x45ip"))
        );
        assert_eq!(
            decapsulate(&build::erspan_i(FRAME)),
            Ok(Payload::Ethernet(FRAME))
        );
        assert_eq!(
            decapsulate(&build::erspan_ii(9, 3, FRAME)),
            Ok(Payload::Ethernet(FRAME))
        );
        for platform in [None, Some([1; 8])] {
            assert_eq!(
                decapsulate(&build::erspan_iii(9, 3, 77, platform, FRAME)),
                Ok(Payload::Ethernet(FRAME))
            );
        }
    }

    #[test]
    fn what_is_not_followed_says_why() {
        let mut pptp = build::gre(0x880b, Some(1), None, b"ppp");
        pptp[1] |= 1;
        assert_eq!(
            decapsulate(&pptp),
            Ok(Payload::Undecoded(Undecoded::GreVersion))
        );
        assert_eq!(
            decapsulate(&build::gre(0x8847, None, None, b"mpls")),
            Ok(Payload::Undecoded(Undecoded::GreProtocol))
        );
        let mut v3_in_ii = build::erspan_ii(1, 1, FRAME);
        v3_in_ii[8] = 0x20;
        assert_eq!(
            decapsulate(&v3_in_ii),
            Ok(Payload::Undecoded(Undecoded::ErspanVersion))
        );
        let mut odd_type = build::erspan_iii(1, 1, 1, None, FRAME);
        odd_type[8 + 10] |= 0x7c;
        assert_eq!(
            decapsulate(&odd_type),
            Ok(Payload::Undecoded(Undecoded::ErspanFrameType))
        );
        // Every header cut short is malformed, never a panic.
        let whole = build::erspan_iii(1, 1, 1, Some([0; 8]), b"");
        for n in 0..whole.len() {
            assert!(decapsulate(&whole[..n]).is_err(), "{n} bytes");
        }
    }
}
