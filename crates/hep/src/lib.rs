//! HEP v3 (also called EEP, the Extensible Encapsulation Protocol): the format in which Kamailio's
//! `siptrace`, OpenSIPS' `proto_hep`, FreeSWITCH, Asterisk's `res_hep`, heplify and captagent send
//! copies of the packets they see to a collector (by default on UDP or TCP port 9060).
//!
//! **No IO**: this crate turns bytes into a [`HepPacket`] and back; the caller owns the socket.
//!
//! Never: panics on input, reads past the buffer, allocates while decoding (a decoded packet
//! borrows its payload, authentication key and correlation id from the input), or accepts a
//! payload larger than [`DecodeLimits::max_payload_bytes`].
//!
//! Start reading at:
//! - [`decode`]: one packet from `&[u8]`, checked against [`DecodeLimits`], with a [`DecodeError`]
//!   that names the byte offset and what was wrong.
//! - [`HepPacket::encode`]: the inverse, appending the packet's bytes to a `Vec<u8>`.
//! - [`HepPacket::to_udp_datagram`]: the captured message rebuilt as a raw IP/UDP packet, for
//!   code written for captured packets.
//! - [`Deframer`]: packets cut out of a TCP stream, in a buffer of fixed size.
//! - [`auth_key_matches`]: a received authentication key (chunk 14) checked against the
//!   expected one in constant time.
//! - [`chunk`]: the generic chunk type numbers; [`ProtocolType`]: what the payload is.
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use hep::{DecodeLimits, HepPacket, Payload, ProtocolType};
//!
//! let sent = HepPacket {
//!     ip_protocol: 17,
//!     src_ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
//!     dst_ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)),
//!     src_port: 5060,
//!     dst_port: 5060,
//!     ts_sec: 1_795_248_540,
//!     ts_usec: 0,
//!     protocol_type: ProtocolType::SIP,
//!     capture_id: 2001,
//!     keep_alive_timer: None,
//!     auth_key: None,
//!     payload: Payload::Raw(b"OPTIONS sip:ping@192.0.2.2 SIP/2.0\r\n\r\n"),
//!     correlation_id: None,
//! };
//! let bytes = sent.to_bytes()?;
//! assert_eq!(&bytes[..4], b"HEP3");
//! let received = hep::decode(&bytes, &DecodeLimits::default())?;
//! assert_eq!(received, sent);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Wire format
//!
//! A packet is `HEP3`, a big-endian u16 total length (of the whole packet, these 6 bytes
//! included), then chunks until the end. A chunk is a u16 vendor id (0 for the generic chunks
//! defined by the specification), a u16 chunk type, a u16 length that includes the 6-byte chunk
//! header, then the value. Integers are big-endian.
//!
//! The decoder requires, once each: IP family (1), IP protocol (2), source and destination
//! address (3 and 4 for IPv4, 5 and 6 for IPv6, matching the family), source and destination port
//! (7, 8), timestamp seconds and microseconds (9, 10), protocol type (11), capture agent id (12),
//! and exactly one payload, captured (15) or compressed (16). Keep-alive timer (13),
//! authentication key (14) and correlation id (17) are optional. Chunks of other vendors, and
//! generic chunks this crate does not interpret (VLAN, MOS, MAC addresses, ...), are skipped
//! after their framing is checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod stream;

pub use stream::{Deframer, STREAM_BUFFER_BYTES_MIN};

/// The 4 bytes every HEP v3 packet starts with.
pub const MAGIC: &[u8; 4] = b"HEP3";

/// Bytes before the first chunk: `HEP3` and the u16 total length.
pub const PACKET_HEADER_BYTES: usize = 6;

/// Bytes of a chunk header: vendor id, chunk type, chunk length (each u16).
pub const CHUNK_HEADER_BYTES: usize = 6;

/// The largest packet the u16 total length can describe.
pub const MAX_PACKET_BYTES: usize = u16::MAX as usize;

/// Default for [`DecodeLimits::max_payload_bytes`]: 32 KiB. A SIP message over UDP is at most
/// 65,507 bytes in theory but a few kilobytes in practice; anything above this is far more
/// likely to be garbage or an attack than a call.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 32 * 1024;

/// IP family value for IPv4 (`AF_INET`).
pub const FAMILY_IPV4: u8 = 2;
/// IP family value for IPv6 (`AF_INET6` on Linux, which HEP senders use).
pub const FAMILY_IPV6: u8 = 10;

/// Generic chunk types (vendor id 0) of the HEP v3 specification.
pub mod chunk {
    /// u8: IP family, [`FAMILY_IPV4`](crate::FAMILY_IPV4) or [`FAMILY_IPV6`](crate::FAMILY_IPV6).
    pub const IP_FAMILY: u16 = 1;
    /// u8: IP protocol number (17 UDP, 6 TCP, 132 SCTP).
    pub const IP_PROTOCOL: u16 = 2;
    /// 4 bytes: IPv4 source address.
    pub const IPV4_SRC: u16 = 3;
    /// 4 bytes: IPv4 destination address.
    pub const IPV4_DST: u16 = 4;
    /// 16 bytes: IPv6 source address.
    pub const IPV6_SRC: u16 = 5;
    /// 16 bytes: IPv6 destination address.
    pub const IPV6_DST: u16 = 6;
    /// u16: source port.
    pub const SRC_PORT: u16 = 7;
    /// u16: destination port.
    pub const DST_PORT: u16 = 8;
    /// u32: capture time, seconds since the Unix epoch.
    pub const TIMESTAMP_SEC: u16 = 9;
    /// u32: microseconds added to the seconds.
    pub const TIMESTAMP_USEC: u16 = 10;
    /// u8: what the payload is, see [`ProtocolType`](crate::ProtocolType).
    pub const PROTOCOL_TYPE: u16 = 11;
    /// u32: capture agent id.
    pub const CAPTURE_ID: u16 = 12;
    /// u16: keep-alive timer.
    pub const KEEP_ALIVE_TIMER: u16 = 13;
    /// bytes: authentication key.
    pub const AUTH_KEY: u16 = 14;
    /// bytes: the captured packet's payload (for SIP, the SIP message).
    pub const PAYLOAD: u16 = 15;
    /// bytes: the captured payload, compressed.
    pub const COMPRESSED_PAYLOAD: u16 = 16;
    /// bytes: internal correlation id (for RTCP and logs, usually the Call-ID).
    pub const CORRELATION_ID: u16 = 17;
}

/// What the payload carries (generic chunk 11). A newtype rather than an enum: senders use values
/// this crate does not name, and they must round-trip unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProtocolType(pub u8);

impl ProtocolType {
    /// A SIP message.
    pub const SIP: Self = Self(1);
    /// XMPP.
    pub const XMPP: Self = Self(2);
    /// SDP.
    pub const SDP: Self = Self(3);
    /// An RTP packet.
    pub const RTP: Self = Self(4);
    /// An RTCP packet (or, from some senders, an RTCP report as JSON).
    pub const RTCP: Self = Self(5);
    /// MGCP.
    pub const MGCP: Self = Self(6);
    /// A log line correlated with a call.
    pub const LOG: Self = Self(100);
}

/// Limits the decoder enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest accepted payload (chunk 15 or 16), in bytes. Default
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`].
    pub max_payload_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

/// The captured payload: as captured, or compressed by the sender (chunk 16; the specification
/// leaves the algorithm to the sender, in practice zlib/gzip). This crate does not decompress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Chunk 15.
    Raw(&'a [u8]),
    /// Chunk 16.
    Compressed(&'a [u8]),
}

impl<'a> Payload<'a> {
    /// The payload's bytes, whichever chunk carried them.
    pub fn bytes(&self) -> &'a [u8] {
        match *self {
            Payload::Raw(b) | Payload::Compressed(b) => b,
        }
    }
}

/// One HEP v3 packet, borrowing its variable-length values from the decoded buffer (or from the
/// caller, when encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HepPacket<'a> {
    /// IP protocol number of the captured packet (17 UDP, 6 TCP, 132 SCTP).
    pub ip_protocol: u8,
    /// Source address; its version gives the IP family chunk.
    pub src_ip: IpAddr,
    /// Destination address; same version as `src_ip`.
    pub dst_ip: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Capture time, seconds since the Unix epoch.
    pub ts_sec: u32,
    /// Microseconds added to `ts_sec`.
    pub ts_usec: u32,
    /// What the payload is.
    pub protocol_type: ProtocolType,
    /// Capture agent id.
    pub capture_id: u32,
    /// Keep-alive timer (chunk 13), if sent.
    pub keep_alive_timer: Option<u16>,
    /// Authentication key (chunk 14), if sent.
    pub auth_key: Option<&'a [u8]>,
    /// The captured payload.
    pub payload: Payload<'a>,
    /// Internal correlation id (chunk 17), if sent.
    pub correlation_id: Option<&'a [u8]>,
}

/// Why bytes are not a valid HEP v3 packet. Offsets count from the packet's first byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the 6-byte packet header.
    #[error("HEP packet of {len} bytes is shorter than the 6-byte header")]
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// The packet does not start with `HEP3` (HEP v1 and v2 are not supported).
    #[error("offset 0: expected \"HEP3\", found {found:02x?} (HEP v1/v2 are not supported)")]
    BadMagic {
        /// The first 4 bytes.
        found: [u8; 4],
    },
    /// The total length field disagrees with the number of bytes given.
    #[error("offset 4: total length field says {declared} bytes but the packet has {actual}")]
    LengthMismatch {
        /// The value of the total length field.
        declared: usize,
        /// Bytes given.
        actual: usize,
    },
    /// Fewer than 6 bytes left where a chunk header should start.
    #[error("offset {offset}: truncated chunk header ({remaining} bytes left, a header needs 6)")]
    TruncatedChunkHeader {
        /// Where the chunk starts.
        offset: usize,
        /// Bytes left in the packet.
        remaining: usize,
    },
    /// A chunk length below its own 6-byte header.
    #[error(
        "offset {offset}: chunk (vendor {vendor}, type {chunk_type}) has length {length}, \
         less than its 6-byte header"
    )]
    ChunkTooShort {
        /// Where the chunk starts.
        offset: usize,
        /// Vendor id.
        vendor: u16,
        /// Chunk type.
        chunk_type: u16,
        /// The chunk length field.
        length: usize,
    },
    /// A chunk that runs past the end of the packet.
    #[error(
        "offset {offset}: chunk (vendor {vendor}, type {chunk_type}) of length {length} runs past \
         the end of the packet ({remaining} bytes left)"
    )]
    ChunkPastEnd {
        /// Where the chunk starts.
        offset: usize,
        /// Vendor id.
        vendor: u16,
        /// Chunk type.
        chunk_type: u16,
        /// The chunk length field.
        length: usize,
        /// Bytes left in the packet from `offset`.
        remaining: usize,
    },
    /// A fixed-size generic chunk whose value has the wrong size.
    #[error(
        "offset {offset}: chunk type {chunk_type} has a {found}-byte value, expected {expected}"
    )]
    BadValueLength {
        /// Where the chunk starts.
        offset: usize,
        /// Chunk type.
        chunk_type: u16,
        /// Value bytes found (chunk length minus 6).
        found: usize,
        /// Value bytes the type requires.
        expected: usize,
    },
    /// A generic chunk that this crate interprets appeared twice.
    #[error("offset {offset}: chunk type {chunk_type} appears a second time")]
    Duplicate {
        /// Where the second occurrence starts.
        offset: usize,
        /// Chunk type.
        chunk_type: u16,
    },
    /// Both a captured (15) and a compressed (16) payload.
    #[error("offset {offset}: a second payload chunk (both types 15 and 16 are present)")]
    TwoPayloads {
        /// Where the second payload chunk starts.
        offset: usize,
    },
    /// A required chunk is absent.
    #[error("required chunk type {chunk_type} ({name}) is missing")]
    Missing {
        /// Chunk type.
        chunk_type: u16,
        /// What it carries.
        name: &'static str,
    },
    /// A payload larger than [`DecodeLimits::max_payload_bytes`].
    #[error("offset {offset}: payload of {len} bytes exceeds max_payload_bytes ({max})")]
    PayloadTooLarge {
        /// Where the payload chunk starts.
        offset: usize,
        /// Payload bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An IP family other than 2 (IPv4) or 10 (IPv6).
    #[error("offset {offset}: IP family {family} is neither 2 (IPv4) nor 10 (IPv6)")]
    UnknownFamily {
        /// Where the family chunk starts.
        offset: usize,
        /// The value.
        family: u8,
    },
    /// Address chunks of the other IP version than the family chunk says.
    #[error(
        "offset {offset}: chunk type {chunk_type} is an address of the wrong IP version for family {family}"
    )]
    FamilyMismatch {
        /// Where the address chunk starts.
        offset: usize,
        /// Chunk type.
        chunk_type: u16,
        /// The family chunk's value.
        family: u8,
    },
}

/// Why a [`HepPacket`] cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// Source and destination are of different IP versions.
    #[error("source {src} and destination {dst} are of different IP versions")]
    MixedFamilies {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
    },
    /// The packet would exceed 65,535 bytes, the most the u16 length fields can describe.
    #[error("encoded packet would be {bytes} bytes; HEP v3 allows at most 65535")]
    TooLarge {
        /// Bytes the packet would need.
        bytes: usize,
    },
}

/// Decodes one HEP v3 packet. `buf` must hold exactly one packet (one UDP datagram, or one frame
/// cut from a TCP stream with [`frame_len`]).
pub fn decode<'a>(buf: &'a [u8], limits: &DecodeLimits) -> Result<HepPacket<'a>, DecodeError> {
    if buf.len() < PACKET_HEADER_BYTES {
        return Err(DecodeError::TooShort { len: buf.len() });
    }
    if &buf[..4] != MAGIC {
        return Err(DecodeError::BadMagic {
            found: [buf[0], buf[1], buf[2], buf[3]],
        });
    }
    let declared = usize::from(be16(&buf[4..6]));
    if declared != buf.len() {
        return Err(DecodeError::LengthMismatch {
            declared,
            actual: buf.len(),
        });
    }

    let mut seen = Seen::default();
    let mut offset = PACKET_HEADER_BYTES;
    while offset < buf.len() {
        let remaining = buf.len() - offset;
        if remaining < CHUNK_HEADER_BYTES {
            return Err(DecodeError::TruncatedChunkHeader { offset, remaining });
        }
        let vendor = be16(&buf[offset..]);
        let chunk_type = be16(&buf[offset + 2..]);
        let length = usize::from(be16(&buf[offset + 4..]));
        if length < CHUNK_HEADER_BYTES {
            return Err(DecodeError::ChunkTooShort {
                offset,
                vendor,
                chunk_type,
                length,
            });
        }
        if length > remaining {
            return Err(DecodeError::ChunkPastEnd {
                offset,
                vendor,
                chunk_type,
                length,
                remaining,
            });
        }
        let value = &buf[offset + CHUNK_HEADER_BYTES..offset + length];
        if vendor == 0 {
            seen.take(offset, chunk_type, value, limits)?;
        }
        offset += length;
    }
    seen.finish()
}

/// For a stream transport (TCP): how many bytes the packet at the start of `buf` occupies, once
/// its 6-byte header is in `buf`. `Ok(None)` means fewer than 6 bytes are buffered yet (and
/// those that are match the start of `HEP3`); bytes that cannot start a packet are an error at
/// once, so a stream of garbage is refused after its first byte.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    if buf.len() < PACKET_HEADER_BYTES {
        let n = buf.len().min(4);
        if buf[..n] != MAGIC[..n] {
            let mut found = [0u8; 4];
            found[..n].copy_from_slice(&buf[..n]);
            return Err(DecodeError::BadMagic { found });
        }
        return Ok(None);
    }
    if &buf[..4] != MAGIC {
        return Err(DecodeError::BadMagic {
            found: [buf[0], buf[1], buf[2], buf[3]],
        });
    }
    let declared = usize::from(be16(&buf[4..6]));
    if declared < PACKET_HEADER_BYTES {
        return Err(DecodeError::LengthMismatch {
            declared,
            actual: PACKET_HEADER_BYTES,
        });
    }
    Ok(Some(declared))
}

/// True when `received` (a packet's authentication key chunk, `None` when it has none) is
/// `expected`. The time taken depends only on the lengths, never on where the bytes differ, so
/// a sender cannot find the key a byte at a time by timing refusals. An empty `expected` matches
/// nothing: a listener that checks keys has a key.
pub fn auth_key_matches(expected: &[u8], received: Option<&[u8]>) -> bool {
    let Some(received) = received else {
        return false;
    };
    // Every byte of the expected key is compared whatever the received length; the lengths
    // are folded into the same accumulator.
    let mut diff = u64::from(expected.len() != received.len()) | u64::from(expected.is_empty());
    for (i, e) in expected.iter().enumerate() {
        let r = received.get(i).copied().unwrap_or(!*e);
        diff |= u64::from(std::hint::black_box(e ^ r));
    }
    std::hint::black_box(diff) == 0
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Decoder state: each interpreted chunk's value and where it was.
#[derive(Default)]
struct Seen<'a> {
    family: Option<(usize, u8)>,
    ip_protocol: Option<u8>,
    v4_src: Option<(usize, Ipv4Addr)>,
    v4_dst: Option<(usize, Ipv4Addr)>,
    v6_src: Option<(usize, Ipv6Addr)>,
    v6_dst: Option<(usize, Ipv6Addr)>,
    src_port: Option<u16>,
    dst_port: Option<u16>,
    ts_sec: Option<u32>,
    ts_usec: Option<u32>,
    protocol_type: Option<u8>,
    capture_id: Option<u32>,
    keep_alive_timer: Option<u16>,
    auth_key: Option<&'a [u8]>,
    payload: Option<Payload<'a>>,
    correlation_id: Option<&'a [u8]>,
}

/// Stores `value` in `slot`, refusing a second occurrence.
fn once<T>(
    slot: &mut Option<T>,
    value: T,
    offset: usize,
    chunk_type: u16,
) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DecodeError::Duplicate { offset, chunk_type });
    }
    *slot = Some(value);
    Ok(())
}

/// The value of a fixed-size chunk, or the error naming its size.
fn fixed<const N: usize>(
    value: &[u8],
    offset: usize,
    chunk_type: u16,
) -> Result<[u8; N], DecodeError> {
    value.try_into().map_err(|_| DecodeError::BadValueLength {
        offset,
        chunk_type,
        found: value.len(),
        expected: N,
    })
}

impl<'a> Seen<'a> {
    fn take(
        &mut self,
        offset: usize,
        chunk_type: u16,
        value: &'a [u8],
        limits: &DecodeLimits,
    ) -> Result<(), DecodeError> {
        use chunk::*;
        match chunk_type {
            IP_FAMILY => {
                let [family] = fixed::<1>(value, offset, chunk_type)?;
                if family != FAMILY_IPV4 && family != FAMILY_IPV6 {
                    return Err(DecodeError::UnknownFamily { offset, family });
                }
                once(&mut self.family, (offset, family), offset, chunk_type)
            }
            IP_PROTOCOL => {
                let [p] = fixed::<1>(value, offset, chunk_type)?;
                once(&mut self.ip_protocol, p, offset, chunk_type)
            }
            IPV4_SRC => {
                let a = Ipv4Addr::from(fixed::<4>(value, offset, chunk_type)?);
                once(&mut self.v4_src, (offset, a), offset, chunk_type)
            }
            IPV4_DST => {
                let a = Ipv4Addr::from(fixed::<4>(value, offset, chunk_type)?);
                once(&mut self.v4_dst, (offset, a), offset, chunk_type)
            }
            IPV6_SRC => {
                let a = Ipv6Addr::from(fixed::<16>(value, offset, chunk_type)?);
                once(&mut self.v6_src, (offset, a), offset, chunk_type)
            }
            IPV6_DST => {
                let a = Ipv6Addr::from(fixed::<16>(value, offset, chunk_type)?);
                once(&mut self.v6_dst, (offset, a), offset, chunk_type)
            }
            SRC_PORT => {
                let v = u16::from_be_bytes(fixed::<2>(value, offset, chunk_type)?);
                once(&mut self.src_port, v, offset, chunk_type)
            }
            DST_PORT => {
                let v = u16::from_be_bytes(fixed::<2>(value, offset, chunk_type)?);
                once(&mut self.dst_port, v, offset, chunk_type)
            }
            TIMESTAMP_SEC => {
                let v = be32(&fixed::<4>(value, offset, chunk_type)?);
                once(&mut self.ts_sec, v, offset, chunk_type)
            }
            TIMESTAMP_USEC => {
                let v = be32(&fixed::<4>(value, offset, chunk_type)?);
                once(&mut self.ts_usec, v, offset, chunk_type)
            }
            PROTOCOL_TYPE => {
                let [p] = fixed::<1>(value, offset, chunk_type)?;
                once(&mut self.protocol_type, p, offset, chunk_type)
            }
            CAPTURE_ID => {
                let v = be32(&fixed::<4>(value, offset, chunk_type)?);
                once(&mut self.capture_id, v, offset, chunk_type)
            }
            KEEP_ALIVE_TIMER => {
                let v = u16::from_be_bytes(fixed::<2>(value, offset, chunk_type)?);
                once(&mut self.keep_alive_timer, v, offset, chunk_type)
            }
            AUTH_KEY => once(&mut self.auth_key, value, offset, chunk_type),
            CORRELATION_ID => once(&mut self.correlation_id, value, offset, chunk_type),
            PAYLOAD | COMPRESSED_PAYLOAD => {
                let p = if chunk_type == PAYLOAD {
                    Payload::Raw(value)
                } else {
                    Payload::Compressed(value)
                };
                match self.payload {
                    Some(Payload::Raw(_)) if chunk_type == PAYLOAD => {
                        return Err(DecodeError::Duplicate { offset, chunk_type });
                    }
                    Some(Payload::Compressed(_)) if chunk_type == COMPRESSED_PAYLOAD => {
                        return Err(DecodeError::Duplicate { offset, chunk_type });
                    }
                    Some(_) => return Err(DecodeError::TwoPayloads { offset }),
                    None => {}
                }
                if value.len() > limits.max_payload_bytes {
                    return Err(DecodeError::PayloadTooLarge {
                        offset,
                        len: value.len(),
                        max: limits.max_payload_bytes,
                    });
                }
                self.payload = Some(p);
                Ok(())
            }
            // Generic chunks this crate does not interpret (VLAN, MOS, MAC, ...): framing checked,
            // value skipped.
            _ => Ok(()),
        }
    }

    fn finish(self) -> Result<HepPacket<'a>, DecodeError> {
        fn need<T>(v: Option<T>, chunk_type: u16, name: &'static str) -> Result<T, DecodeError> {
            v.ok_or(DecodeError::Missing { chunk_type, name })
        }
        let (_, family) = need(self.family, chunk::IP_FAMILY, "IP family")?;
        let (src_ip, dst_ip) = if family == FAMILY_IPV4 {
            for (chunk_type, at) in [
                (chunk::IPV6_SRC, self.v6_src.map(|v| v.0)),
                (chunk::IPV6_DST, self.v6_dst.map(|v| v.0)),
            ] {
                if let Some(offset) = at {
                    return Err(DecodeError::FamilyMismatch {
                        offset,
                        chunk_type,
                        family,
                    });
                }
            }
            let (_, s) = need(self.v4_src, chunk::IPV4_SRC, "IPv4 source address")?;
            let (_, d) = need(self.v4_dst, chunk::IPV4_DST, "IPv4 destination address")?;
            (IpAddr::V4(s), IpAddr::V4(d))
        } else {
            for (chunk_type, at) in [
                (chunk::IPV4_SRC, self.v4_src.map(|v| v.0)),
                (chunk::IPV4_DST, self.v4_dst.map(|v| v.0)),
            ] {
                if let Some(offset) = at {
                    return Err(DecodeError::FamilyMismatch {
                        offset,
                        chunk_type,
                        family,
                    });
                }
            }
            let (_, s) = need(self.v6_src, chunk::IPV6_SRC, "IPv6 source address")?;
            let (_, d) = need(self.v6_dst, chunk::IPV6_DST, "IPv6 destination address")?;
            (IpAddr::V6(s), IpAddr::V6(d))
        };
        Ok(HepPacket {
            ip_protocol: need(self.ip_protocol, chunk::IP_PROTOCOL, "IP protocol")?,
            src_ip,
            dst_ip,
            src_port: need(self.src_port, chunk::SRC_PORT, "source port")?,
            dst_port: need(self.dst_port, chunk::DST_PORT, "destination port")?,
            ts_sec: need(self.ts_sec, chunk::TIMESTAMP_SEC, "timestamp seconds")?,
            ts_usec: need(
                self.ts_usec,
                chunk::TIMESTAMP_USEC,
                "timestamp microseconds",
            )?,
            protocol_type: ProtocolType(need(
                self.protocol_type,
                chunk::PROTOCOL_TYPE,
                "protocol type",
            )?),
            capture_id: need(self.capture_id, chunk::CAPTURE_ID, "capture agent id")?,
            keep_alive_timer: self.keep_alive_timer,
            auth_key: self.auth_key,
            payload: need(self.payload, chunk::PAYLOAD, "captured payload (15 or 16)")?,
            correlation_id: self.correlation_id,
        })
    }
}

impl HepPacket<'_> {
    /// Bytes [`encode`](Self::encode) will append.
    pub fn encoded_len(&self) -> usize {
        let addr = match self.src_ip {
            IpAddr::V4(_) => 4,
            IpAddr::V6(_) => 16,
        };
        let h = CHUNK_HEADER_BYTES;
        PACKET_HEADER_BYTES
            + (h + 1) * 3 // family, protocol, protocol type
            + (h + addr) * 2
            + (h + 2) * 2 // ports
            + (h + 4) * 3 // seconds, microseconds, capture id
            + self.keep_alive_timer.map_or(0, |_| h + 2)
            + self.auth_key.map_or(0, |k| h + k.len())
            + h
            + self.payload.bytes().len()
            + self.correlation_id.map_or(0, |c| h + c.len())
    }

    /// Appends the packet to `out`. Chunks go in type order (1 to 17), all with vendor id 0; a
    /// packet decoded from such bytes encodes back to the same bytes. On error nothing is
    /// appended.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let family = match (self.src_ip, self.dst_ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => FAMILY_IPV4,
            (IpAddr::V6(_), IpAddr::V6(_)) => FAMILY_IPV6,
            (src, dst) => return Err(EncodeError::MixedFamilies { src, dst }),
        };
        let total = self.encoded_len();
        // Every variable chunk is shorter than the whole packet, so checking the total also
        // bounds each chunk length.
        if total > MAX_PACKET_BYTES {
            return Err(EncodeError::TooLarge { bytes: total });
        }
        out.reserve(total);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(total as u16).to_be_bytes());
        put(out, chunk::IP_FAMILY, &[family]);
        put(out, chunk::IP_PROTOCOL, &[self.ip_protocol]);
        match (self.src_ip, self.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                put(out, chunk::IPV4_SRC, &s.octets());
                put(out, chunk::IPV4_DST, &d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                put(out, chunk::IPV6_SRC, &s.octets());
                put(out, chunk::IPV6_DST, &d.octets());
            }
            _ => unreachable!("families checked above"),
        }
        put(out, chunk::SRC_PORT, &self.src_port.to_be_bytes());
        put(out, chunk::DST_PORT, &self.dst_port.to_be_bytes());
        put(out, chunk::TIMESTAMP_SEC, &self.ts_sec.to_be_bytes());
        put(out, chunk::TIMESTAMP_USEC, &self.ts_usec.to_be_bytes());
        put(out, chunk::PROTOCOL_TYPE, &[self.protocol_type.0]);
        put(out, chunk::CAPTURE_ID, &self.capture_id.to_be_bytes());
        if let Some(t) = self.keep_alive_timer {
            put(out, chunk::KEEP_ALIVE_TIMER, &t.to_be_bytes());
        }
        if let Some(k) = self.auth_key {
            put(out, chunk::AUTH_KEY, k);
        }
        match self.payload {
            Payload::Raw(p) => put(out, chunk::PAYLOAD, p),
            Payload::Compressed(p) => put(out, chunk::COMPRESSED_PAYLOAD, p),
        }
        if let Some(c) = self.correlation_id {
            put(out, chunk::CORRELATION_ID, c);
        }
        Ok(())
    }

    /// The packet as a new `Vec<u8>`.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        self.encode(&mut out)?;
        Ok(out)
    }
}

/// Why a packet cannot be rebuilt as an IP datagram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// Source and destination are of different IP versions.
    #[error("source {src} and destination {dst} are of different IP versions")]
    MixedFamilies {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
    },
    /// The payload does not fit in one UDP datagram.
    #[error("payload of {bytes} bytes does not fit in one UDP datagram")]
    TooLarge {
        /// Payload bytes.
        bytes: usize,
    },
}

impl HepPacket<'_> {
    /// Rebuilds the captured message as a raw IPv4 or IPv6 packet carrying UDP (pcap link type
    /// 101, `LINKTYPE_RAW`), so that code written for captured packets (decoders, the archive)
    /// can take HEP input. The payload is one whole message, as a UDP datagram carries, whatever
    /// transport the sender saw (`ip_protocol` keeps that); header checksums are computed.
    /// A compressed payload is wrapped as it is.
    pub fn to_udp_datagram(&self, out: &mut Vec<u8>) -> Result<(), DatagramError> {
        let payload = self.payload.bytes();
        let udp_len = 8 + payload.len();
        match (self.src_ip, self.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = 20 + udp_len;
                if total > usize::from(u16::MAX) {
                    return Err(DatagramError::TooLarge {
                        bytes: payload.len(),
                    });
                }
                let start = out.len();
                out.extend_from_slice(&[0x45, 0]);
                out.extend_from_slice(&(total as u16).to_be_bytes());
                out.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]); // id, DF, TTL 64, UDP
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                let sum = !fold(sum16(&out[start..start + 20], 0));
                out[start + 10..start + 12].copy_from_slice(&sum.to_be_bytes());
                let mut pseudo = sum16(&s.octets(), 0);
                pseudo = sum16(&d.octets(), pseudo);
                pseudo += 17 + udp_len as u32;
                self.put_udp(out, payload, pseudo);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                if udp_len > usize::from(u16::MAX) {
                    return Err(DatagramError::TooLarge {
                        bytes: payload.len(),
                    });
                }
                out.extend_from_slice(&[0x60, 0, 0, 0]);
                out.extend_from_slice(&(udp_len as u16).to_be_bytes());
                out.extend_from_slice(&[17, 64]); // next header UDP, hop limit 64
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                let mut pseudo = sum16(&s.octets(), 0);
                pseudo = sum16(&d.octets(), pseudo);
                pseudo += 17 + udp_len as u32;
                self.put_udp(out, payload, pseudo);
            }
            (src, dst) => return Err(DatagramError::MixedFamilies { src, dst }),
        }
        Ok(())
    }

    fn put_udp(&self, out: &mut Vec<u8>, payload: &[u8], pseudo_sum: u32) {
        let start = out.len();
        out.extend_from_slice(&self.src_port.to_be_bytes());
        out.extend_from_slice(&self.dst_port.to_be_bytes());
        out.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(payload);
        let mut sum = !fold(sum16(&out[start..], pseudo_sum));
        if sum == 0 {
            sum = 0xffff; // zero means "no checksum" in UDP
        }
        out[start + 6..start + 8].copy_from_slice(&sum.to_be_bytes());
    }
}

/// Adds `bytes` as big-endian 16-bit words (odd length padded with a zero byte) to `acc`, a
/// one's-complement sum. `bytes` starts on a word of the checksummed data.
///
/// Read as native-endian 32-bit words rather than one 16-bit word at a time: a
/// one's-complement sum does not depend on byte order (RFC 1071, 2.(B)), so the native sum,
/// folded to 16 bits and swapped into network order, is the same sum in a quarter of the
/// steps (which the compiler also vectorises; 64-bit words with their carries measured
/// slower, the carries making one chain). Every rebuilt HEP packet's payload goes through
/// here once.
fn sum16(bytes: &[u8], acc: u32) -> u32 {
    let mut native = 0u64;
    let mut words = bytes.chunks_exact(4);
    for w in &mut words {
        native += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    // The last 1 to 3 bytes, zero-padded after them: the padding RFC 768 asks for.
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    native += u64::from(u32::from_ne_bytes(tail));
    while native > 0xffff {
        native = (native & 0xffff) + (native >> 16);
    }
    // Folding a sum of a nonzero word never gives 0, as the word-at-a-time sum never does, so
    // `fold(acc + this)` is what the word-at-a-time sum folds to.
    acc + u32::from(u16::from_be(native as u16))
}

/// Folds a 32-bit one's-complement sum to 16 bits.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Appends one generic chunk. The caller has checked that the whole packet fits in a u16.
fn put(out: &mut Vec<u8>, chunk_type: u16, value: &[u8]) {
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&chunk_type.to_be_bytes());
    out.extend_from_slice(&((CHUNK_HEADER_BYTES + value.len()) as u16).to_be_bytes());
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's definition, one big-endian word at a time.
    fn sum16_by_word(bytes: &[u8], acc: u32) -> u32 {
        let mut acc = u64::from(acc);
        let mut words = bytes.chunks_exact(2);
        for w in &mut words {
            acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = words.remainder() {
            acc += u64::from(*last) << 8;
        }
        while acc > u64::from(u32::MAX) {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u32
    }

    #[test]
    fn the_native_sum_folds_to_the_word_by_word_sum() {
        // Every length to a few words past the 4-byte step, bytes from a simple generator,
        // and the edge values: all zeroes, all ones, sums that fold to 0xffff.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        };
        for len in 0..300 {
            let random: Vec<u8> = (0..len).map(|_| next()).collect();
            for bytes in [random, vec![0; len], vec![0xff; len], vec![0x80; len]] {
                for acc in [0, 1, 0xffff, 0x1_2345] {
                    assert_eq!(
                        fold(sum16(&bytes, acc)),
                        fold(sum16_by_word(&bytes, acc)),
                        "{bytes:?} from {acc:#x}"
                    );
                }
            }
        }
        let ones = [0xff, 0xff, 0xff, 0xff];
        assert_eq!(fold(sum16(&ones, 0)), 0xffff);
    }
}
