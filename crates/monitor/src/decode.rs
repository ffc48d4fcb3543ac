//! Packet decoding from the link layer to UDP, TCP and SCTP: Ethernet, Linux cooked capture v1
//! and v2, raw IP, BSD loopback; 802.1Q/802.1ad VLAN tags, MPLS label stacks and PPPoE sessions
//! (a mirror of a provider's or a DSL link); IPv4 and IPv6 (extension headers);
//! tunnels — IP-in-IP (IPv4 and IPv6 inside either), GRE carrying IP or Ethernet, the ERSPAN
//! port mirrors ([`crate::gre`]), and VXLAN on UDP port 4789 (cloud traffic mirrors) — nested
//! at most [`MAX_TUNNEL_DEPTH`] deep; IPv4 and IPv6
//! fragment reassembly with a bounded table. What is not followed is counted in
//! [`DecodeCounters`], never silently dropped.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::gre::{self, Undecoded};

/// LINKTYPE_* values understood by [`Decoder`].
pub mod link {
    pub const NULL: u32 = 0;
    pub const ETHERNET: u32 = 1;
    pub const RAW: u32 = 101;
    pub const LINUX_SLL: u32 = 113;
    pub const IPV4: u32 = 228;
    pub const IPV6: u32 = 229;
    pub const LINUX_SLL2: u32 = 276;
    /// DLT_RAW as some systems number it in pcap headers.
    pub const RAW_ALT: u32 = 12;
    pub const LOOP: u32 = 108;
}

/// Nested VLAN tags beyond this are malformed.
pub const MAX_VLAN_TAGS: usize = 4;
/// MPLS label stacks deeper than this are malformed.
pub const MAX_MPLS_LABELS: usize = 8;
/// Tunnels (IP-in-IP, GRE, ERSPAN) nested beyond this are malformed.
pub const MAX_TUNNEL_DEPTH: usize = 4;
/// IPv6 extension headers beyond this are malformed.
pub const MAX_IPV6_EXT_HEADERS: usize = 8;

/// Why a packet could not be decoded. Malformed packets are counted and skipped; they never stop
/// a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} header is truncated")]
    Truncated(&'static str),
    #[error("{0} header is invalid")]
    Invalid(&'static str),
    #[error("link type {0} is not supported")]
    UnsupportedLink(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp {
        seq: u32,
        flags: u8,
    },
    /// An SCTP packet: the payload is its chunks, after the common header ([`crate::sctp`]).
    Sctp,
}

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;

/// A UDP datagram, TCP segment or SCTP packet with its endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub transport: Transport,
    pub payload: &'a [u8],
}

/// Limits of the fragment reassembly table.
#[derive(Debug, Clone, Copy)]
pub struct FragmentLimits {
    /// Datagrams being reassembled at once; the oldest is dropped beyond this.
    pub max_datagrams: usize,
    /// A datagram whose fragments do not all arrive within this time is dropped.
    pub timeout_ms: u64,
    /// Largest reassembled datagram (IPv4 and IPv6 without jumbograms: 65,535).
    pub max_datagram_bytes: usize,
    /// Fragments per datagram beyond this drop the datagram.
    pub max_fragments: usize,
}

impl Default for FragmentLimits {
    fn default() -> Self {
        FragmentLimits {
            max_datagrams: 4096,
            timeout_ms: 30_000,
            max_datagram_bytes: 65_535,
            max_fragments: 64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FragKey {
    src: IpAddr,
    dst: IpAddr,
    id: u32,
    proto: u8,
}

struct FragBuf {
    data: Vec<u8>,
    /// Received byte ranges [start, end).
    ranges: Vec<(usize, usize)>,
    total: Option<usize>,
    first_ns: i64,
}

/// Counters of what the decoder saw. Only frames that are not plain UDP move them, so with
/// several workers (which all decode such frames) the first worker's counters are the whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeCounters {
    pub fragments: u64,
    pub reassembled: u64,
    pub fragments_expired: u64,
    pub fragments_dropped: u64,
    /// Frames (or frames inside a tunnel) carrying neither IPv4 nor IPv6: ARP, LLDP, ...
    pub not_ip: u64,
    /// IP packets carrying neither UDP, TCP nor SCTP, nor a tunnel followed here.
    pub other_transport: u64,
    /// GRE version 1 (PPTP) or above.
    pub gre_version: u64,
    /// GRE with RFC 1701 source routing.
    pub gre_routing: u64,
    /// GRE carrying a protocol other than IP, Ethernet and ERSPAN.
    pub gre_protocol: u64,
    /// ERSPAN headers of an unknown version or frame type.
    pub erspan_unknown: u64,
}

impl DecodeCounters {
    fn undecoded(&mut self, why: Undecoded) {
        match why {
            Undecoded::GreVersion => self.gre_version += 1,
            Undecoded::GreRouting => self.gre_routing += 1,
            Undecoded::GreProtocol => self.gre_protocol += 1,
            Undecoded::ErspanVersion | Undecoded::ErspanFrameType => self.erspan_unknown += 1,
        }
    }

    /// Tunnelled packets not followed, all kinds together.
    pub fn tunnels_undecoded(&self) -> u64 {
        self.gre_version + self.gre_routing + self.gre_protocol + self.erspan_unknown
    }
}

/// Decodes link-layer frames to datagrams, reassembling IP fragments.
pub struct Decoder {
    limits: FragmentLimits,
    frags: HashMap<FragKey, FragBuf>,
    reassembled: Vec<u8>,
    last_sweep_ns: i64,
    pub counters: DecodeCounters,
}

enum Net<'a> {
    Done {
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        payload: &'a [u8],
    },
    Fragment {
        key: FragKey,
        offset: usize,
        more: bool,
        payload: &'a [u8],
    },
    Skip,
    /// An Ethernet frame inside a tunnel that carries no IP.
    NotIp,
    /// A tunnel not followed.
    Undecoded(Undecoded),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Walks an ethertype chain (VLAN tags, then an MPLS label stack or a PPPoE session) to the
/// network layer.
fn by_ethertype(mut ethertype: u16, mut rest: &[u8]) -> Result<Option<&[u8]>, DecodeError> {
    let mut tags = 0;
    while matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) {
        tags += 1;
        if tags > MAX_VLAN_TAGS {
            return Err(DecodeError::Invalid("VLAN"));
        }
        if rest.len() < 4 {
            return Err(DecodeError::Truncated("VLAN"));
        }
        ethertype = be16(rest, 2);
        rest = &rest[4..];
    }
    Ok(match ethertype {
        0x0800 | 0x86dd => Some(rest),
        0x8847 | 0x8848 => mpls(rest)?,
        0x8864 => pppoe_session(rest)?,
        _ => None,
    })
}

/// Below an MPLS label stack (RFC 3032): IP, told by its version nibble as a label switch
/// router would by the label; anything else (an Ethernet pseudowire's control word) is not IP.
fn mpls(mut rest: &[u8]) -> Result<Option<&[u8]>, DecodeError> {
    for _ in 0..MAX_MPLS_LABELS {
        let Some(entry) = rest.get(..4) else {
            return Err(DecodeError::Truncated("MPLS"));
        };
        let bottom = entry[2] & 0x01 != 0;
        rest = &rest[4..];
        if bottom {
            return Ok(matches!(rest.first().map(|b| b >> 4), Some(4 | 6)).then_some(rest));
        }
    }
    Err(DecodeError::Invalid("MPLS"))
}

/// Inside a PPPoE session frame (RFC 2516): the PPP frame's IPv4 or IPv6 (protocol 0x0021 or
/// 0x0057, or their one-byte compressed forms); other PPP protocols (LCP, IPCP) are not IP.
fn pppoe_session(rest: &[u8]) -> Result<Option<&[u8]>, DecodeError> {
    if rest.len() < 8 {
        return Err(DecodeError::Truncated("PPPoE"));
    }
    if rest[0] != 0x11 || rest[1] != 0x00 {
        return Err(DecodeError::Invalid("PPPoE"));
    }
    let ppp = &rest[6..];
    // An odd first byte is a compressed (one-byte) protocol field (RFC 1661 6.5).
    let (protocol, ip) = if ppp[0] & 0x01 != 0 {
        (u16::from(ppp[0]), &ppp[1..])
    } else {
        (be16(ppp, 0), &ppp[2..])
    };
    Ok(matches!(protocol, 0x0021 | 0x0057).then_some(ip))
}

fn parse_ip(data: &[u8], depth: usize) -> Result<Net<'_>, DecodeError> {
    if depth > MAX_TUNNEL_DEPTH {
        return Err(DecodeError::Invalid("tunnel nesting"));
    }
    let Some(&first) = data.first() else {
        return Err(DecodeError::Truncated("IP"));
    };
    match first >> 4 {
        4 => {
            if data.len() < 20 {
                return Err(DecodeError::Truncated("IPv4"));
            }
            let ihl = (first & 0x0f) as usize * 4;
            let total = be16(data, 2) as usize;
            if ihl < 20 || total < ihl {
                return Err(DecodeError::Invalid("IPv4"));
            }
            if data.len() < ihl {
                return Err(DecodeError::Truncated("IPv4"));
            }
            // Ethernet padding follows short packets: trust the total length. A total length
            // larger than what was captured (snapshot length, TSO) keeps what there is.
            let end = total.min(data.len());
            let src = IpAddr::V4(Ipv4Addr::new(data[12], data[13], data[14], data[15]));
            let dst = IpAddr::V4(Ipv4Addr::new(data[16], data[17], data[18], data[19]));
            let proto = data[9];
            let frag = be16(data, 6);
            let more = frag & 0x2000 != 0;
            let offset = (frag & 0x1fff) as usize * 8;
            let payload = &data[ihl..end];
            if more || offset != 0 {
                return Ok(Net::Fragment {
                    key: FragKey {
                        src,
                        dst,
                        id: be16(data, 4) as u32,
                        proto,
                    },
                    offset,
                    more,
                    payload,
                });
            }
            inner(src, dst, proto, payload, depth)
        }
        6 => {
            if data.len() < 40 {
                return Err(DecodeError::Truncated("IPv6"));
            }
            let plen = be16(data, 4) as usize;
            let end = if plen == 0 {
                data.len()
            } else {
                (40 + plen).min(data.len())
            };
            let mut a = [0u8; 16];
            a.copy_from_slice(&data[8..24]);
            let src = IpAddr::V6(Ipv6Addr::from(a));
            a.copy_from_slice(&data[24..40]);
            let dst = IpAddr::V6(Ipv6Addr::from(a));
            ipv6_ext(src, dst, data[6], &data[40..end], depth)
        }
        _ => Err(DecodeError::Invalid("IP version")),
    }
}

/// Walks IPv6 extension headers starting with `next`.
fn ipv6_ext(
    src: IpAddr,
    dst: IpAddr,
    mut next: u8,
    mut rest: &[u8],
    depth: usize,
) -> Result<Net<'_>, DecodeError> {
    for _ in 0..MAX_IPV6_EXT_HEADERS {
        match next {
            0 | 43 | 60 => {
                if rest.len() < 8 {
                    return Err(DecodeError::Truncated("IPv6 extension"));
                }
                let len = (rest[1] as usize + 1) * 8;
                if rest.len() < len {
                    return Err(DecodeError::Truncated("IPv6 extension"));
                }
                next = rest[0];
                rest = &rest[len..];
            }
            51 => {
                if rest.len() < 8 {
                    return Err(DecodeError::Truncated("IPv6 AH"));
                }
                let len = (rest[1] as usize + 2) * 4;
                if rest.len() < len {
                    return Err(DecodeError::Truncated("IPv6 AH"));
                }
                next = rest[0];
                rest = &rest[len..];
            }
            44 => {
                if rest.len() < 8 {
                    return Err(DecodeError::Truncated("IPv6 fragment"));
                }
                let off_m = be16(rest, 2);
                let offset = (off_m & 0xfff8) as usize;
                let more = off_m & 1 != 0;
                let key = FragKey {
                    src,
                    dst,
                    id: be32(rest, 4),
                    proto: rest[0],
                };
                if offset == 0 && !more {
                    // Atomic fragment (RFC 6946): no reassembly needed.
                    next = rest[0];
                    rest = &rest[8..];
                    continue;
                }
                return Ok(Net::Fragment {
                    key,
                    offset,
                    more,
                    payload: &rest[8..],
                });
            }
            59 => return Ok(Net::Skip),
            proto => return inner(src, dst, proto, rest, depth),
        }
    }
    Err(DecodeError::Invalid("IPv6 extension chain"))
}

/// The payload of an IP packet: tunnels recurse, UDP and TCP are returned.
fn inner(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    payload: &[u8],
    depth: usize,
) -> Result<Net<'_>, DecodeError> {
    match proto {
        4 | 41 => parse_ip(payload, depth + 1),
        47 => match gre::decapsulate(payload) {
            Ok(gre::Payload::Ip(ip)) => parse_ip(ip, depth + 1),
            Ok(gre::Payload::Ethernet(frame)) => match ethernet(frame)? {
                Some(ip) => parse_ip(ip, depth + 1),
                None => Ok(Net::NotIp),
            },
            Ok(gre::Payload::Undecoded(why)) => Ok(Net::Undecoded(why)),
            Err(m) => Err(DecodeError::Truncated(m.what())),
        },
        17 if let Some(frame) = vxlan(payload) => match ethernet(frame)? {
            Some(ip) => parse_ip(ip, depth + 1),
            None => Ok(Net::NotIp),
        },
        _ => Ok(Net::Done {
            src,
            dst,
            proto,
            payload,
        }),
    }
}

/// VXLAN's UDP port (RFC 7348), the one cloud traffic mirrors send to.
pub const VXLAN_PORT: u16 = 4789;

/// The Ethernet frame inside a UDP datagram to the VXLAN port whose header has its VNI flag
/// set (and whose frame is long enough to be one); `None` for any other datagram.
fn vxlan(udp: &[u8]) -> Option<&[u8]> {
    const UDP_BYTES: usize = 8;
    const VXLAN_BYTES: usize = 8;
    if udp.len() < UDP_BYTES + VXLAN_BYTES + 14 || be16(udp, 2) != VXLAN_PORT {
        return None;
    }
    let header = &udp[UDP_BYTES..UDP_BYTES + VXLAN_BYTES];
    (header[0] & 0x08 != 0).then(|| &udp[UDP_BYTES + VXLAN_BYTES..])
}

fn transport<'a>(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    payload: &'a [u8],
) -> Result<Option<Datagram<'a>>, DecodeError> {
    match proto {
        17 => {
            if payload.len() < 8 {
                return Err(DecodeError::Truncated("UDP"));
            }
            let len = be16(payload, 4) as usize;
            let end = if len >= 8 {
                len.min(payload.len())
            } else {
                payload.len()
            };
            Ok(Some(Datagram {
                src: SocketAddr::new(src, be16(payload, 0)),
                dst: SocketAddr::new(dst, be16(payload, 2)),
                transport: Transport::Udp,
                payload: &payload[8..end],
            }))
        }
        6 => {
            if payload.len() < 20 {
                return Err(DecodeError::Truncated("TCP"));
            }
            let off = (payload[12] >> 4) as usize * 4;
            if off < 20 {
                return Err(DecodeError::Invalid("TCP"));
            }
            if payload.len() < off {
                return Err(DecodeError::Truncated("TCP"));
            }
            Ok(Some(Datagram {
                src: SocketAddr::new(src, be16(payload, 0)),
                dst: SocketAddr::new(dst, be16(payload, 2)),
                transport: Transport::Tcp {
                    seq: be32(payload, 4),
                    flags: payload[13],
                },
                payload: &payload[off..],
            }))
        }
        132 => {
            if payload.len() < crate::sctp::COMMON_HEADER_BYTES {
                return Err(DecodeError::Truncated("SCTP"));
            }
            Ok(Some(Datagram {
                src: SocketAddr::new(src, be16(payload, 0)),
                dst: SocketAddr::new(dst, be16(payload, 2)),
                transport: Transport::Sctp,
                payload: &payload[crate::sctp::COMMON_HEADER_BYTES..],
            }))
        }
        _ => Ok(None),
    }
}

/// The network-layer bytes of an Ethernet frame (after its VLAN tags), `None` when it carries
/// no IP.
fn ethernet(frame: &[u8]) -> Result<Option<&[u8]>, DecodeError> {
    if frame.len() < 14 {
        return Err(DecodeError::Truncated("Ethernet"));
    }
    by_ethertype(be16(frame, 12), &frame[14..])
}

/// The network-layer bytes of a link-layer frame; `Ok(None)` when it carries neither IPv4 nor
/// IPv6 (ARP, LLC, ...).
fn network_layer(link_type: u32, frame: &[u8]) -> Result<Option<&[u8]>, DecodeError> {
    Ok(match link_type {
        link::ETHERNET => ethernet(frame)?,
        link::LINUX_SLL => {
            if frame.len() < 16 {
                return Err(DecodeError::Truncated("Linux cooked"));
            }
            by_ethertype(be16(frame, 14), &frame[16..])?
        }
        link::LINUX_SLL2 => {
            if frame.len() < 20 {
                return Err(DecodeError::Truncated("Linux cooked v2"));
            }
            by_ethertype(be16(frame, 0), &frame[20..])?
        }
        link::RAW | link::RAW_ALT | link::IPV4 | link::IPV6 => Some(frame),
        link::NULL | link::LOOP => {
            if frame.len() < 4 {
                return Err(DecodeError::Truncated("loopback"));
            }
            Some(&frame[4..])
        }
        other => return Err(DecodeError::UnsupportedLink(other)),
    })
}

/// Without any state: the UDP endpoints and payload of an unfragmented datagram, else `None`
/// (TCP, SCTP, fragments, tunnels that end in none of these, malformed frames). It walks the
/// same tunnels as [`Decoder::decode`] (IP-in-IP, GRE, ERSPAN), so that a tunnelled flow hashes
/// as the same flow bare. Used to route packets to worker threads before they are decoded for
/// real.
pub fn peek_udp(link_type: u32, frame: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    let ip = network_layer(link_type, frame).ok()??;
    match parse_ip(ip, 0).ok()? {
        Net::Done {
            src,
            dst,
            proto: 17,
            payload,
        } => {
            let d = transport(src, dst, 17, payload).ok()??;
            Some((d.src, d.dst, d.payload))
        }
        _ => None,
    }
}

/// The datagram a decoded packet holds, counting what holds none.
fn settle<'a>(
    counters: &mut DecodeCounters,
    net: Net<'a>,
) -> Result<Option<Datagram<'a>>, DecodeError> {
    match net {
        Net::Done {
            src,
            dst,
            proto,
            payload,
        } => {
            let d = transport(src, dst, proto, payload)?;
            if d.is_none() {
                counters.other_transport += 1;
            }
            Ok(d)
        }
        Net::NotIp => {
            counters.not_ip += 1;
            Ok(None)
        }
        Net::Undecoded(why) => {
            counters.undecoded(why);
            Ok(None)
        }
        // Fragments inside a reassembled tunnel payload are not reassembled again.
        Net::Skip | Net::Fragment { .. } => Ok(None),
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(FragmentLimits::default())
    }
}

impl Decoder {
    pub fn new(limits: FragmentLimits) -> Decoder {
        Decoder {
            limits,
            frags: HashMap::new(),
            reassembled: Vec::new(),
            last_sweep_ns: i64::MIN,
            counters: DecodeCounters::default(),
        }
    }

    /// Datagrams currently being reassembled.
    pub fn fragments_pending(&self) -> usize {
        self.frags.len()
    }

    /// Decodes one frame. `Ok(None)`: not UDP/TCP over IP, or a fragment still waiting for the
    /// rest of its datagram.
    pub fn decode<'a>(
        &'a mut self,
        ts_ns: i64,
        link_type: u32,
        frame: &'a [u8],
    ) -> Result<Option<Datagram<'a>>, DecodeError> {
        let ip = network_layer(link_type, frame)?;
        let Some(ip) = ip else {
            self.counters.not_ip += 1;
            return Ok(None);
        };
        let net = parse_ip(ip, 0)?;
        let Net::Fragment {
            key,
            offset,
            more,
            payload,
        } = net
        else {
            return settle(&mut self.counters, net);
        };
        self.counters.fragments += 1;
        if !self.add_fragment(ts_ns, key, offset, more, payload) {
            return Ok(None);
        }
        self.counters.reassembled += 1;
        let whole: &'a [u8] = &self.reassembled;
        // An IPv6 fragment's payload may start with further extension headers.
        let net = if key.src.is_ipv6() {
            ipv6_ext(key.src, key.dst, key.proto, whole, 0)?
        } else {
            inner(key.src, key.dst, key.proto, whole, 0)?
        };
        settle(&mut self.counters, net)
    }

    fn sweep(&mut self, now_ns: i64) {
        let timeout_ns = self.limits.timeout_ms as i64 * 1_000_000;
        let before = self.frags.len();
        self.frags
            .retain(|_, f| now_ns.saturating_sub(f.first_ns) <= timeout_ns);
        self.counters.fragments_expired += (before - self.frags.len()) as u64;
    }

    /// Adds a fragment; true when its datagram is now complete (in `self.reassembled`).
    fn add_fragment(
        &mut self,
        ts_ns: i64,
        key: FragKey,
        offset: usize,
        more: bool,
        payload: &[u8],
    ) -> bool {
        if ts_ns.saturating_sub(self.last_sweep_ns) >= 1_000_000_000 {
            self.last_sweep_ns = ts_ns;
            self.sweep(ts_ns);
        }
        let end = offset + payload.len();
        if end > self.limits.max_datagram_bytes {
            self.counters.fragments_dropped += 1;
            self.frags.remove(&key);
            return false;
        }
        if !self.frags.contains_key(&key)
            && self.frags.len() >= self.limits.max_datagrams
            && let Some(oldest) = self
                .frags
                .iter()
                .min_by_key(|(_, f)| f.first_ns)
                .map(|(k, _)| *k)
        {
            self.frags.remove(&oldest);
            self.counters.fragments_dropped += 1;
        }
        let f = self.frags.entry(key).or_insert_with(|| FragBuf {
            data: Vec::new(),
            ranges: Vec::new(),
            total: None,
            first_ns: ts_ns,
        });
        if f.ranges.len() >= self.limits.max_fragments {
            self.frags.remove(&key);
            self.counters.fragments_dropped += 1;
            return false;
        }
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        f.data[offset..end].copy_from_slice(payload);
        f.ranges.push((offset, end));
        if !more {
            f.total = Some(end);
        }
        let Some(total) = f.total else {
            return false;
        };
        f.ranges.sort_unstable();
        let mut covered = 0;
        for &(s, e) in &f.ranges {
            if s > covered {
                return false;
            }
            covered = covered.max(e);
        }
        if covered < total {
            return false;
        }
        let mut f = self.frags.remove(&key).expect("fragment entry present");
        f.data.truncate(total);
        self.reassembled = f.data;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::packet;

    #[test]
    fn decodes_vlan_ipv4_udp() {
        let src: SocketAddr = "10.0.0.1:5060".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:5062".parse().unwrap();
        let mut frame = packet::ethernet_udp(src, dst, b"hello");
        // insert two VLAN tags
        let tags = [0x88, 0xa8, 0x00, 0x05, 0x81, 0x00, 0x00, 0x07];
        let et = [frame[12], frame[13]];
        frame.splice(12..14, tags.iter().copied().chain(et));
        let mut d = Decoder::default();
        let g = d.decode(0, link::ETHERNET, &frame).unwrap().unwrap();
        assert_eq!((g.src, g.dst, g.payload), (src, dst, &b"hello"[..]));
    }

    #[test]
    fn decodes_mpls_and_pppoe_down_to_ip_and_peeks_the_same() {
        let src: SocketAddr = "10.0.0.1:5060".parse().unwrap();
        let dst: SocketAddr = "[2001:db8::2]:5062".parse().unwrap();
        let v4 = packet::ethernet_udp(src, "10.0.0.2:5062".parse().unwrap(), b"v4");
        let v6 = packet::ethernet_udp("[2001:db8::1]:5060".parse().unwrap(), dst, b"v6");
        let with = |eth: &[u8], ethertype: [u8; 2], shim: &[u8]| {
            let mut f = eth[..12].to_vec();
            f.extend_from_slice(&ethertype);
            f.extend_from_slice(shim);
            f.extend_from_slice(&eth[14..]);
            f
        };
        // Two labels, the second the bottom of the stack.
        let labels = [0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
        let pppoe = |proto: &[u8]| {
            let mut h = vec![0x11, 0x00, 0x12, 0x34, 0x00, 0x00];
            h.extend_from_slice(proto);
            h
        };
        let mut d = Decoder::default();
        for (frame, payload) in [
            (with(&v4, [0x88, 0x47], &labels), &b"v4"[..]),
            (with(&v6, [0x88, 0x47], &labels), b"v6"),
            (with(&v4, [0x88, 0x64], &pppoe(&[0x00, 0x21])), b"v4"),
            (with(&v6, [0x88, 0x64], &pppoe(&[0x00, 0x57])), b"v6"),
            (with(&v4, [0x88, 0x64], &pppoe(&[0x21])), b"v4"),
        ] {
            let g = d.decode(0, link::ETHERNET, &frame).unwrap().unwrap();
            assert_eq!(g.payload, payload);
            let (s, t, p) = peek_udp(link::ETHERNET, &frame).unwrap();
            assert_eq!((s, t, p), (g.src, g.dst, g.payload));
        }
        // LCP inside PPPoE and a pseudowire below MPLS are not IP; a stack that never ends is
        // malformed.
        let lcp = with(&v4, [0x88, 0x64], &pppoe(&[0xc0, 0x21]));
        assert!(d.decode(0, link::ETHERNET, &lcp).unwrap().is_none());
        let pw = with(&v4[..14], [0x88, 0x47], &[0, 1, 1, 0x40, 0, 0, 0, 0]);
        assert!(d.decode(0, link::ETHERNET, &pw).unwrap().is_none());
        let endless = with(&v4, [0x88, 0x47], &[0u8; 4 * (MAX_MPLS_LABELS + 1)]);
        assert_eq!(
            d.decode(0, link::ETHERNET, &endless).err(),
            Some(DecodeError::Invalid("MPLS"))
        );
        assert_eq!(d.counters.not_ip, 2);
    }

    #[test]
    fn decodes_linux_cooked_v1_and_v2_and_loopback() {
        let src: SocketAddr = "[2001:db8::1]:5060".parse().unwrap();
        let dst: SocketAddr = "[2001:db8::2]:5060".parse().unwrap();
        let eth = packet::ethernet_udp(src, dst, b"OPTIONS");
        let ip = &eth[14..];
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x86, 0xdd];
        sll.extend_from_slice(ip);
        let mut sll2 = vec![
            0x86, 0xdd, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(ip);
        let mut null = 30u32.to_le_bytes().to_vec();
        null.extend_from_slice(ip);
        let mut d = Decoder::default();
        for (lt, frame) in [
            (link::LINUX_SLL, &sll),
            (link::LINUX_SLL2, &sll2),
            (link::NULL, &null),
            (link::IPV6, &ip.to_vec()),
        ] {
            let g = d.decode(0, lt, frame).unwrap().unwrap();
            assert_eq!(
                (g.src, g.dst, g.payload),
                (src, dst, &b"OPTIONS"[..]),
                "link type {lt}"
            );
        }
    }

    #[test]
    fn reassembles_ipv4_and_ipv6_fragments_out_of_order() {
        for (s, t) in [
            ("10.0.0.1:1000", "10.0.0.2:2000"),
            ("[2001:db8::1]:1000", "[2001:db8::2]:2000"),
        ] {
            let src: SocketAddr = s.parse().unwrap();
            let dst: SocketAddr = t.parse().unwrap();
            let body: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
            let frames = packet::fragmented_udp(src, dst, &body, 1200, 77);
            assert_eq!(frames.len(), 3);
            let mut d = Decoder::default();
            assert!(d.decode(0, link::RAW, &frames[2]).unwrap().is_none());
            assert!(d.decode(1, link::RAW, &frames[0]).unwrap().is_none());
            let g = d.decode(2, link::RAW, &frames[1]).unwrap().unwrap();
            assert_eq!((g.src, g.dst), (src, dst));
            assert_eq!(g.payload, &body[..]);
            assert_eq!(d.fragments_pending(), 0);
        }
    }

    #[test]
    fn expires_incomplete_fragments() {
        let src: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:2000".parse().unwrap();
        let frames = packet::fragmented_udp(src, dst, &[7u8; 3000], 1200, 5);
        let mut d = Decoder::default();
        assert!(d.decode(0, link::RAW, &frames[0]).unwrap().is_none());
        assert_eq!(d.fragments_pending(), 1);
        let late = 31_000_000_000;
        assert!(d.decode(late, link::RAW, &frames[1]).unwrap().is_none());
        assert_eq!(d.counters.fragments_expired, 1);
    }

    #[test]
    fn decodes_ip_in_ip_and_rejects_truncation() {
        let src: SocketAddr = "192.0.2.1:5060".parse().unwrap();
        let dst: SocketAddr = "192.0.2.2:5060".parse().unwrap();
        let inner = packet::ipv4_udp(src, dst, b"REGISTER");
        let outer = packet::ipv4(
            "198.51.100.1".parse().unwrap(),
            "198.51.100.2".parse().unwrap(),
            4,
            &inner,
        );
        let mut d = Decoder::default();
        let g = d.decode(0, link::RAW, &outer).unwrap().unwrap();
        assert_eq!((g.src, g.payload), (src, &b"REGISTER"[..]));
        assert_eq!(
            d.decode(0, link::RAW, &outer[..30]),
            Err(DecodeError::Truncated("IPv4"))
        );
        assert_eq!(
            d.decode(0, 999, &outer),
            Err(DecodeError::UnsupportedLink(999))
        );
    }
}
