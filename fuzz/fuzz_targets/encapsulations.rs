//! GRE and ERSPAN, VXLAN, SIP over SCTP and SIP over WebSocket. The first byte picks what the
//! rest is: a GRE packet read alone; a frame wrapped in a valid GRE/ERSPAN/VXLAN envelope (so that the inner
//! frame's bytes are fuzzed, not the magic numbers) and fed to the decoder and the monitor,
//! checking that the stateless peek agrees with the full decode; SCTP packets; TCP segments of
//! a stream that starts with a WebSocket handshake; or WebSocket frames read directly.
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use monitor::decode::{Decoder, Transport, link, peek_udp};
use monitor::gre::build as gre;
use monitor::sctp::{SctpLimits, SipSctp};
use monitor::synth::packet::{ethernet, ipv4, ipv4_udp};
use monitor::tcp::{SipTcp, TcpLimits};
use monitor::websocket::{WsCounters, WsStream};
use monitor::{Monitor, MonitorConfig};

/// Small limits, so that the bounds are reached.
const MAX_MESSAGE_BYTES: usize = 2048;

fn a() -> SocketAddr {
    "10.0.0.1:5060".parse().unwrap()
}

fn b() -> SocketAddr {
    "10.0.0.2:8088".parse().unwrap()
}

/// Pieces of `data`, each `[u16 length][bytes]`.
fn pieces(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if data.len() < 2 {
            return None;
        }
        let len = (u16::from_le_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
        let p = &data[2..2 + len];
        data = &data[2 + len..];
        Some(p)
    })
}

fn wrapped(kind: u8, inner: &[u8]) -> Vec<u8> {
    if kind % 7 == 6 {
        let mut v = vec![0x08, 0, 0, 0, 0, 0, 1, 0];
        v.extend_from_slice(inner);
        let (src, dst) = ("192.0.2.1:50000".parse().unwrap(), "192.0.2.2:4789".parse().unwrap());
        return ethernet(0x0800, &ipv4_udp(src, dst, &v));
    }
    let g = match kind % 7 {
        0 => gre::gre(0x0800, Some(1), None, inner),
        1 => gre::gre(0x6558, None, Some(2), inner),
        2 => gre::erspan_i(inner),
        3 => gre::erspan_ii(7, 1, inner),
        4 => gre::erspan_iii(7, 1, 9, None, inner),
        _ => gre::erspan_iii(7, 1, 9, Some([0; 8]), inner),
    };
    ethernet(
        0x0800,
        &ipv4(
            "192.0.2.1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
            47,
            &g,
        ),
    )
}

fn tunnels(selector: u8, data: &[u8]) {
    let mut mon = Monitor::new(MonitorConfig::default(), 1 + usize::from(selector & 1));
    let mut ts = 1_000_000_000i64;
    for (i, inner) in pieces(data).enumerate() {
        let frame = wrapped(selector.wrapping_add(i as u8) >> 1, inner);
        // The stateless peek and the full decode agree on every plain UDP datagram.
        if let Some((src, dst, payload)) = peek_udp(link::ETHERNET, &frame) {
            let mut dec = Decoder::default();
            let d = dec.decode(ts, link::ETHERNET, &frame).ok().flatten();
            let d = d.expect("peek_udp found a datagram the decoder does not");
            assert_eq!((d.src, d.dst, d.payload), (src, dst, payload));
            assert_eq!(d.transport, Transport::Udp);
        }
        mon.packet(ts, link::ETHERNET, &frame);
        ts += 300_000_000;
    }
    mon.finish();
}

fn sctp(data: &[u8]) {
    let mut s = SipSctp::new(SctpLimits {
        max_associations: 4,
        max_message_bytes: MAX_MESSAGE_BYTES,
        max_fragments: 8,
        max_partial_per_association: 2,
        idle_timeout_ms: 1000,
    });
    let mut ts = 0i64;
    for p in pieces(data) {
        let (src, dst) = if p.first().is_some_and(|b| b & 1 == 0) {
            (a(), b())
        } else {
            (b(), a())
        };
        s.packet(ts, src, dst, p, |m| {
            assert!(m.len() <= MAX_MESSAGE_BYTES.max(65_535));
            assert!(sip::looks_like_sip(m));
        });
        ts += 200_000_000;
    }
}

fn websocket_over_tcp(data: &[u8]) {
    let limits = TcpLimits {
        max_streams: 4,
        max_buffer_bytes: MAX_MESSAGE_BYTES,
        max_pending_segments: 4,
        idle_timeout_ms: 1000,
    };
    let mut t = SipTcp::new(limits);
    let handshake = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: sip\r\n\r\n";
    t.segment(0, a(), b(), 0, 0x02, handshake, |_| {});
    let mut seq = handshake.len() as u32 + 1;
    for p in pieces(data) {
        // The first byte of each piece moves the sequence number: gaps, overlaps, reordering.
        let jump = p.first().map_or(0, |&b| i32::from(b as i8));
        let at = seq.wrapping_add_signed(jump);
        let body = p.get(1..).unwrap_or_default();
        t.segment(1, a(), b(), at, 0, body, |m| assert!(sip::looks_like_sip(m)));
        seq = at.wrapping_add(body.len() as u32);
    }
}

fn websocket_frames(data: &[u8]) {
    let mut s = WsStream::default();
    let mut c = WsCounters::default();
    let _ = s.frames(data, MAX_MESSAGE_BYTES, &mut c, &mut |m| {
        assert!(m.len() <= MAX_MESSAGE_BYTES);
    });
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 5 {
        0 => {
            let _ = monitor::gre::decapsulate(rest);
        }
        1 => tunnels(selector / 5, rest),
        2 => sctp(rest),
        3 => websocket_over_tcp(rest),
        _ => websocket_frames(rest),
    }
});
