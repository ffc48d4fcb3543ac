//! Ethernet frames built field by field, for testing filters on the interpreter and through the
//! kernel (fragments, IPv4 options, IPv6 fragment headers, inline and kernel-held VLAN tags).
//!
//! Addresses: IPv4 192.0.2.1 → 198.51.100.2, IPv6 2001:db8::1 → 2001:db8::2.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const SRC_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const DST_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
pub const SRC_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
pub const DST_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Udp {
        sport: u16,
        dport: u16,
    },
    Tcp {
        sport: u16,
        dport: u16,
    },
    Icmp,
    /// Another IP protocol number, with no header of its own.
    Proto(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    V4,
    V6,
    Arp,
}

#[derive(Debug, Clone)]
pub struct FrameSpec {
    pub network: Network,
    pub l4: L4,
    /// 802.1Q tags (TCIs) in the frame, outermost first.
    pub inline_tags: Vec<u16>,
    /// A tag the kernel took out of the frame (not in the bytes).
    pub kernel_tag: Option<u16>,
    /// Bytes of IPv4 options (a multiple of 4, at most 40).
    pub ipv4_options: usize,
    /// IPv4 fragment offset in 8-byte units; above 0 the frame carries no transport header.
    pub fragment_offset: u16,
    pub more_fragments: bool,
    /// An IPv6 fragment header with this offset (8-byte units); above 0, no transport header.
    pub ipv6_fragment: Option<u16>,
    pub payload_bytes: usize,
}

impl FrameSpec {
    fn new(network: Network, l4: L4) -> FrameSpec {
        FrameSpec {
            network,
            l4,
            inline_tags: Vec::new(),
            kernel_tag: None,
            ipv4_options: 0,
            fragment_offset: 0,
            more_fragments: false,
            ipv6_fragment: None,
            payload_bytes: 16,
        }
    }
    pub fn v4(l4: L4) -> FrameSpec {
        FrameSpec::new(Network::V4, l4)
    }
    pub fn v6(l4: L4) -> FrameSpec {
        FrameSpec::new(Network::V6, l4)
    }
    pub fn arp() -> FrameSpec {
        FrameSpec::new(Network::Arp, L4::Icmp)
    }

    fn transport(&self, with_header: bool) -> (u8, Vec<u8>) {
        let mut t = Vec::new();
        let proto = match self.l4 {
            L4::Udp { sport, dport } => {
                if with_header {
                    t.extend_from_slice(&sport.to_be_bytes());
                    t.extend_from_slice(&dport.to_be_bytes());
                    t.extend_from_slice(&((8 + self.payload_bytes) as u16).to_be_bytes());
                    t.extend_from_slice(&[0, 0]);
                }
                17
            }
            L4::Tcp { sport, dport } => {
                if with_header {
                    t.extend_from_slice(&sport.to_be_bytes());
                    t.extend_from_slice(&dport.to_be_bytes());
                    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff]);
                    t.extend_from_slice(&[0, 0, 0, 0]);
                }
                6
            }
            L4::Icmp => {
                if with_header {
                    t.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
                }
                if self.network == Network::V6 { 58 } else { 1 }
            }
            L4::Proto(p) => p,
        };
        t.resize(t.len() + self.payload_bytes, 0xab);
        (proto, t)
    }

    /// The frame's bytes, from the Ethernet header on.
    pub fn build(&self) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        for tci in &self.inline_tags {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&tci.to_be_bytes());
        }
        match self.network {
            Network::Arp => {
                f.extend_from_slice(&[0x08, 0x06]);
                f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
                f.resize(f.len() + 20, 0);
            }
            Network::V4 => {
                f.extend_from_slice(&[0x08, 0x00]);
                let (proto, t) = self.transport(self.fragment_offset == 0);
                let ihl = 20 + self.ipv4_options;
                let total = (ihl + t.len()) as u16;
                let mut flags = self.fragment_offset & 0x1fff;
                if self.more_fragments {
                    flags |= 0x2000;
                }
                let mut h = vec![0x40 | (ihl / 4) as u8, 0];
                h.extend_from_slice(&total.to_be_bytes());
                h.extend_from_slice(&[0x12, 0x34]);
                h.extend_from_slice(&flags.to_be_bytes());
                h.extend_from_slice(&[64, proto, 0, 0]);
                h.extend_from_slice(&SRC_V4.octets());
                h.extend_from_slice(&DST_V4.octets());
                h.resize(ihl, 1); // NOP options
                let sum = checksum(&h);
                h[10..12].copy_from_slice(&sum.to_be_bytes());
                f.extend_from_slice(&h);
                f.extend_from_slice(&t);
            }
            Network::V6 => {
                f.extend_from_slice(&[0x86, 0xdd]);
                let (proto, t) = self.transport(self.ipv6_fragment.is_none_or(|o| o == 0));
                let mut ext = Vec::new();
                let next = match self.ipv6_fragment {
                    Some(off) => {
                        ext.extend_from_slice(&[proto, 0]);
                        ext.extend_from_slice(&((off << 3) | 1).to_be_bytes());
                        ext.extend_from_slice(&[0, 0, 0x56, 0x78]);
                        44
                    }
                    None => proto,
                };
                f.extend_from_slice(&[0x60, 0, 0, 0]);
                f.extend_from_slice(&((ext.len() + t.len()) as u16).to_be_bytes());
                f.extend_from_slice(&[next, 64]);
                f.extend_from_slice(&SRC_V6.octets());
                f.extend_from_slice(&DST_V6.octets());
                f.extend_from_slice(&ext);
                f.extend_from_slice(&t);
            }
        }
        f
    }
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
