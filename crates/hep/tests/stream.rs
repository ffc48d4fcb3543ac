//! HEP as a TCP sender writes it: encoded packets back to back, read in arbitrary pieces, cut
//! by [`Deframer`] and decoded; and the authentication key check a listener makes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hep::{
    DecodeError, DecodeLimits, Deframer, HepPacket, Payload, ProtocolType, auth_key_matches, decode,
};

fn packet<'a>(i: u32, payload: &'a [u8], key: Option<&'a [u8]>) -> HepPacket<'a> {
    let (src_ip, dst_ip) = if i.is_multiple_of(3) {
        (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
        )
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)),
        )
    };
    HepPacket {
        ip_protocol: 17,
        src_ip,
        dst_ip,
        src_port: 5060,
        dst_port: 40_000 + i as u16,
        ts_sec: 1_795_248_540 + i,
        ts_usec: i * 7,
        protocol_type: ProtocolType::RTP,
        capture_id: 2001,
        keep_alive_timer: None,
        auth_key: key,
        payload: Payload::Raw(payload),
        correlation_id: None,
    }
}

#[test]
fn a_stream_of_packets_read_in_any_pieces_decodes_to_the_same_packets() {
    let payloads: Vec<Vec<u8>> = (0..200u32)
        .map(|i| vec![i as u8; (i as usize * 37) % 1500])
        .collect();
    let sent: Vec<HepPacket<'_>> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| packet(i as u32, p, Some(b"secret")))
        .collect();
    let mut stream = Vec::new();
    for p in &sent {
        p.encode(&mut stream).unwrap();
    }
    for piece in [1usize, 3, 6, 100, 1400, 65_535] {
        let mut d = Deframer::new(0);
        let mut received = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let room = d.spare();
            let n = piece.min(room.len()).min(stream.len() - at);
            room[..n].copy_from_slice(&stream[at..at + n]);
            d.filled(n);
            at += n;
            while let Some(frame) = d.next_frame().unwrap() {
                let p = decode(frame, &DecodeLimits::default()).unwrap();
                received.push(p.to_bytes().unwrap());
            }
        }
        assert_eq!(d.buffered(), 0);
        let expected: Vec<Vec<u8>> = sent.iter().map(|p| p.to_bytes().unwrap()).collect();
        assert_eq!(received, expected, "pieces of {piece} bytes");
    }
}

#[test]
fn bytes_that_are_not_hep_stop_the_stream_where_they_start() {
    let mut stream = packet(1, b"x", None).to_bytes().unwrap();
    stream.extend_from_slice(b"\x16\x03\x01 a TLS hello, not HEP");
    let mut d = Deframer::new(0);
    d.spare()[..stream.len()].copy_from_slice(&stream);
    d.filled(stream.len());
    assert!(d.next_frame().unwrap().is_some());
    assert!(matches!(
        d.next_frame(),
        Err(DecodeError::BadMagic { found }) if found == [0x16, 3, 1, b' ']
    ));
}

#[test]
fn only_the_same_key_matches() {
    assert!(auth_key_matches(b"secret", Some(b"secret")));
    for wrong in [
        &b"secreT"[..],
        b"secre",
        b"secrets",
        b"",
        b"\0\0\0\0\0\0",
        b"Secret",
    ] {
        assert!(!auth_key_matches(b"secret", Some(wrong)), "{wrong:?}");
    }
    assert!(!auth_key_matches(b"secret", None));
    // An empty expected key is never a key anyone holds.
    assert!(!auth_key_matches(b"", Some(b"")));
    assert!(!auth_key_matches(b"", None));
    // Received prefix bytes that equal the complement of the expected ones still differ by
    // length.
    assert!(!auth_key_matches(b"ab", Some(&[!b'a'][..])));
}
