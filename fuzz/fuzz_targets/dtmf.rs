//! Keypad digits: RFC 4733 telephone events read from RTP packets into a stream, and SIP INFO
//! bodies (`application/dtmf-relay`, `application/dtmf`). Never a panic, never more events
//! than the bound, never an event without a packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::rtp::{DTMF_EVENTS_MAX, RtpHeader, RtpStream, StreamKey};

fuzz_target!(|data: &[u8]| {
    for ct in ["application/dtmf-relay", "application/dtmf", "Application/DTMF-Relay;x=1"] {
        if let Some(d) = sip::dtmf::info_digit(ct, data) {
            assert!(d.digit.is_ascii());
        }
    }
    // The input as RTP packets, each after a length byte, all of one stream.
    let key = StreamKey {
        src: "192.0.2.1:4000".parse().unwrap(),
        dst: "192.0.2.2:5000".parse().unwrap(),
        ssrc: 1,
    };
    let mut stream = RtpStream::new(key, 0, true);
    let (mut at, mut packets) = (0usize, 0usize);
    while at < data.len() {
        let len = usize::from(data[at]);
        let Some(packet) = data.get(at + 1..at + 1 + len) else {
            break;
        };
        at += 1 + len;
        let Some(h) = RtpHeader::parse(packet) else {
            continue;
        };
        if let Some(bytes) = h.event_bytes(packet) {
            packets += 1;
            stream.add_event(packets as i64, h.payload_type, h.timestamp, bytes);
        }
    }
    assert!(stream.dtmf.len() <= DTMF_EVENTS_MAX.min(packets));
    for e in &stream.dtmf {
        let _ = e.digit();
        let _ = e.duration_ms(8000);
    }
});
