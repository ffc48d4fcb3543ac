//! A pcap-filter subset compiled to classic BPF, for frames with an Ethernet header.
//!
//! Tandem has no libpcap, so operators' usual filter expressions are compiled here. The subset:
//!
//! | primitive | matches |
//! |---|---|
//! | `ip`, `ip6` | IPv4, IPv6 |
//! | `udp`, `tcp` | that transport over IPv4 or IPv6 (every fragment: the protocol field is in each) |
//! | `ip proto N`, `ip6 proto N`, `proto N` | IP protocol N (`udp`/`tcp` accepted as N) |
//! | `[udp\|tcp] [src\|dst] port N` | UDP or TCP port N (first fragments only: later ones carry no ports) |
//! | `[udp\|tcp] [src\|dst] portrange A-B` | a port from A to B inclusive |
//! | `[ip\|ip6] [src\|dst] host ADDR` | an IPv4 or IPv6 address (no name resolution) |
//! | `[src\|dst] net ADDR/LEN` | an address prefix |
//! | `vlan [ID]` | an 802.1Q/802.1ad tag (with that ID); see below |
//!
//! Combine with `and`/`&&`, `or`/`||`, `not`/`!` and parentheses; `not` binds tightest, then
//! `and`, then `or`. `src or dst` and `src and dst` are direction qualifiers, as in pcap-filter.
//! Unlike pcap-filter, a qualifier is never implied: `port 5060 or 5061` is an error (write
//! `port 5060 or port 5061`).
//!
//! `vlan`: the primitives after a `vlan` in the same `and` chain look behind the tag (so
//! `vlan and udp` is UDP in a tagged frame, `vlan 100 and vlan and udp` in a double-tagged one);
//! the shift ends at the chain's end or closing parenthesis, never crossing an `or`. A
//! primitive that no `vlan` precedes matches untagged frames only. Tags taken out by the
//! kernel and tags inline in the frame are both handled.
//!
//! `host` and `net` match IPv4 and IPv6 packets only (libpcap also matches ARP and RARP).
//!
//! IPv6: `udp`, `tcp`, `proto` and ports look at the first next-header field and behind one
//! fragment header, as libpcap does; other extension headers are not walked.

mod compile;
mod parse;

pub use compile::ACCEPT_BYTES;
pub use parse::{MAX_DEPTH, MAX_FILTER_BYTES, MAX_PRIMITIVES, MAX_VLANS};

use crate::bpf::{self, Insn};

/// The filter `tandem capture --interface` uses unless told otherwise: every UDP packet (RTP
/// ports are negotiated per call, so no port list would do) and every fragment of one, SIP over
/// TCP on its two ports, SIP over WebSocket on the usual ports of Asterisk (8088) and
/// FreeSWITCH (5066), SCTP, IP-in-IP and IPv6-in-IP tunnels and GRE (with the ERSPAN mirrors
/// it carries), all of which the monitor decodes, and the same behind one VLAN tag.
pub const DEFAULT_FILTER: &str = "udp or tcp port 5060 or tcp port 5061 \
    or tcp port 5066 or tcp port 8088 or ip proto 132 or ip6 proto 132 \
    or ip proto 4 or ip proto 41 or ip6 proto 4 or ip6 proto 41 or ip proto 47 or ip6 proto 47 \
    or (vlan and (udp or tcp port 5060 or tcp port 5061 or ip proto 47 or ip proto 132))";

/// A filter expression that is not in the supported subset, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter {expr:?}: at byte {offset}: {message}")]
pub struct FilterError {
    /// The expression (cut to 200 bytes).
    pub expr: String,
    pub offset: usize,
    pub message: String,
}

impl FilterError {
    fn at(text: &str, offset: usize, message: String) -> FilterError {
        let mut end = text.len().min(200);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        FilterError {
            expr: text[..end].to_string(),
            offset,
            message,
        }
    }

    fn too_large(insns: usize) -> FilterError {
        FilterError {
            expr: String::new(),
            offset: 0,
            message: format!(
                "compiles to {insns} instructions; the kernel accepts at most {}",
                bpf::MAX_INSNS
            ),
        }
    }
}

/// A compiled filter: a classic BPF program for frames that start with an Ethernet header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    expr: String,
    program: Vec<Insn>,
}

impl Filter {
    /// Compiles `expr`. The empty expression accepts every frame.
    pub fn compile(expr: &str) -> Result<Filter, FilterError> {
        let program = match parse::parse(expr)? {
            None => vec![Insn::stmt(bpf::RET | bpf::K, ACCEPT_BYTES)],
            Some(e) => compile::compile(&e).map_err(|mut err| {
                err.expr = FilterError::at(expr, 0, String::new()).expr;
                err
            })?,
        };
        debug_assert_eq!(bpf::validate(&program), Ok(()));
        Ok(Filter {
            expr: expr.to_string(),
            program,
        })
    }

    /// The expression it was compiled from.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn program(&self) -> &[Insn] {
        &self.program
    }

    /// The verdict for one frame, as the kernel would give it.
    pub fn matches(&self, packet: bpf::Packet<'_>) -> bool {
        bpf::run(&self.program, packet) != 0
    }
}

#[cfg(test)]
mod tests;
