//! Packet decoder and the monitor pipeline behind it: the input is a sequence of frames, each
//! `[link type selector][u16 length][frame bytes]`, fed through `Monitor::packet` (decode,
//! fragments, TCP reassembly, SIP, SDP, RTP, RTCP, dialogs), and also straight to `Decoder`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::decode::{Decoder, link};
use monitor::{Monitor, MonitorConfig};

const LINKS: [u32; 8] = [
    link::ETHERNET,
    link::RAW,
    link::LINUX_SLL,
    link::LINUX_SLL2,
    link::IPV4,
    link::IPV6,
    link::NULL,
    999,
];

fuzz_target!(|data: &[u8]| {
    // Two workers: the reader's routing (peek_udp) and the join of streams to calls run too.
    let mut mon = Monitor::new(MonitorConfig::default(), if data.first().is_some_and(|b| b & 0x80 != 0) { 2 } else { 1 });
    let mut dec = Decoder::default();
    let mut rest = data;
    let mut ts: i64 = 1_000_000_000;
    while rest.len() >= 3 {
        let link_type = LINKS[(rest[0] & 7) as usize];
        // The top bits of the selector advance time, so that timeouts and sweeps run too; all
        // of them set step the clock by a year.
        ts += match rest[0] >> 3 {
            31 => 365 * 86_400_000_000_000,
            n => i64::from(n) * 400_000_000,
        };
        let len = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let frame = &rest[3..3 + len];
        rest = &rest[3 + len..];
        let _ = dec.decode(ts, link_type, frame);
        let _ = monitor::decode::peek_udp(link_type, frame);
        mon.packet(ts, link_type, frame);
    }
    let a = mon.finish();
    for s in a.all_streams() {
        let _ = s.stream.mos();
        let _ = s.stream.wireshark.lost();
    }
});
