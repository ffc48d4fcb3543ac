//! HEP v3 vectors assembled byte by byte from the specification's chunk table (not by the
//! encoder), byte-exact round trips, and every rejection the decoder promises.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hep::{
    DecodeError, DecodeLimits, EncodeError, HepPacket, Payload, ProtocolType, chunk, decode,
    frame_len,
};

const SIP: &[u8] =
    b"OPTIONS sip:100@10.0.0.2 SIP/2.0\r\nCall-ID: abc@host\r\nContent-Length: 0\r\n\r\n";

/// One generic chunk: vendor 0, type, length incl. the 6-byte header, value.
fn chunk_bytes(vendor: u16, chunk_type: u16, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&vendor.to_be_bytes());
    v.extend_from_slice(&chunk_type.to_be_bytes());
    v.extend_from_slice(&((value.len() + 6) as u16).to_be_bytes());
    v.extend_from_slice(value);
    v
}

/// `HEP3`, total length, then the chunks.
fn packet(chunks: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = chunks.concat();
    let mut v = b"HEP3".to_vec();
    v.extend_from_slice(&((body.len() + 6) as u16).to_be_bytes());
    v.extend_from_slice(&body);
    v
}

/// The chunks of a SIP packet over UDP/IPv4, 10.0.0.1:5060 → 10.0.0.2:5060, in type order.
fn v4_chunks() -> Vec<Vec<u8>> {
    vec![
        chunk_bytes(0, 1, &[2]),
        chunk_bytes(0, 2, &[17]),
        chunk_bytes(0, 3, &[10, 0, 0, 1]),
        chunk_bytes(0, 4, &[10, 0, 0, 2]),
        chunk_bytes(0, 7, &[0x13, 0xc4]),
        chunk_bytes(0, 8, &[0x13, 0xc4]),
        chunk_bytes(0, 9, &[0x65, 0x43, 0x21, 0x00]),
        chunk_bytes(0, 10, &[0x00, 0x01, 0xe2, 0x40]),
        chunk_bytes(0, 11, &[1]),
        chunk_bytes(0, 12, &[0x00, 0x00, 0x07, 0xd0]),
        chunk_bytes(0, 15, SIP),
    ]
}

fn v4_packet() -> HepPacket<'static> {
    HepPacket {
        ip_protocol: 17,
        src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        src_port: 5060,
        dst_port: 5060,
        ts_sec: 0x6543_2100,
        ts_usec: 123_456,
        protocol_type: ProtocolType::SIP,
        capture_id: 2000,
        keep_alive_timer: None,
        auth_key: None,
        payload: Payload::Raw(SIP),
        correlation_id: None,
    }
}

fn limits() -> DecodeLimits {
    DecodeLimits::default()
}

#[test]
fn hand_assembled_ipv4_sip_packet_decodes_and_encodes_to_the_same_bytes() {
    let bytes = packet(&v4_chunks());
    // 6 header + 3 one-byte chunks (7 each) + 2 addresses (10) + 2 ports (8) + 3 u32 (10) + payload.
    assert_eq!(bytes.len(), 6 + 21 + 20 + 16 + 30 + 6 + SIP.len());
    assert_eq!(&bytes[..6], &[b'H', b'E', b'P', b'3', 0, bytes.len() as u8]);
    // The first chunk, exactly: vendor 0, type 1, length 7, family 2.
    assert_eq!(&bytes[6..13], &[0, 0, 0, 1, 0, 7, 2]);
    let p = decode(&bytes, &limits()).unwrap();
    assert_eq!(p, v4_packet());
    assert_eq!(p.encoded_len(), bytes.len());
    assert_eq!(p.to_bytes().unwrap(), bytes);
}

#[test]
fn optional_chunks_and_ipv6_round_trip_byte_exact() {
    let src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    let dst = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    let bytes = packet(&[
        chunk_bytes(0, 1, &[10]),
        chunk_bytes(0, 2, &[6]),
        chunk_bytes(0, 5, &src.octets()),
        chunk_bytes(0, 6, &dst.octets()),
        chunk_bytes(0, 7, &[0x13, 0xc5]),
        chunk_bytes(0, 8, &[0x27, 0x10]),
        chunk_bytes(0, 9, &[0, 0, 0, 1]),
        chunk_bytes(0, 10, &[0, 0, 0, 2]),
        chunk_bytes(0, 11, &[5]),
        chunk_bytes(0, 12, &[0xff, 0xff, 0xff, 0xff]),
        chunk_bytes(0, 13, &[0, 30]),
        chunk_bytes(0, 14, b"secret"),
        chunk_bytes(0, 16, &[0x78, 0x9c, 1, 2, 3]),
        chunk_bytes(0, 17, b"abc@host"),
    ]);
    let p = decode(&bytes, &limits()).unwrap();
    assert_eq!(p.src_ip, IpAddr::V6(src));
    assert_eq!(p.dst_ip, IpAddr::V6(dst));
    assert_eq!((p.src_port, p.dst_port), (5061, 10000));
    assert_eq!(p.ip_protocol, 6);
    assert_eq!(p.protocol_type, ProtocolType::RTCP);
    assert_eq!(p.capture_id, u32::MAX);
    assert_eq!(p.keep_alive_timer, Some(30));
    assert_eq!(p.auth_key, Some(&b"secret"[..]));
    assert_eq!(p.payload, Payload::Compressed(&[0x78, 0x9c, 1, 2, 3]));
    assert_eq!(p.correlation_id, Some(&b"abc@host"[..]));
    assert_eq!(p.to_bytes().unwrap(), bytes);
}

#[test]
fn chunk_order_does_not_matter_and_unknown_chunks_are_skipped() {
    let mut chunks = v4_chunks();
    chunks.reverse();
    chunks.insert(3, chunk_bytes(0x0003, 0x0020, b"kamailio vendor chunk"));
    chunks.insert(5, chunk_bytes(0, 18, &[0, 42])); // generic VLAN id: not interpreted
    chunks.push(chunk_bytes(0xbeef, 1, &[])); // a vendor's chunk type 1 is not the family
    let bytes = packet(&chunks);
    let p = decode(&bytes, &limits()).unwrap();
    assert_eq!(p, v4_packet());
    // Re-encoding gives the canonical form: type order, unknown chunks gone.
    assert_eq!(p.to_bytes().unwrap(), packet(&v4_chunks()));
}

#[test]
fn empty_payload_is_a_packet() {
    let mut chunks = v4_chunks();
    *chunks.last_mut().unwrap() = chunk_bytes(0, 15, b"");
    let bytes = packet(&chunks);
    let p = decode(&bytes, &limits()).unwrap();
    assert_eq!(p.payload, Payload::Raw(b""));
    assert_eq!(p.to_bytes().unwrap(), bytes);
}

#[test]
fn header_errors() {
    assert_eq!(
        decode(b"HEP3", &limits()),
        Err(DecodeError::TooShort { len: 4 })
    );
    assert_eq!(
        decode(b"HEP2\x00\x06", &limits()),
        Err(DecodeError::BadMagic { found: *b"HEP2" })
    );
    let mut bytes = packet(&v4_chunks());
    bytes.push(0);
    let actual = bytes.len();
    assert_eq!(
        decode(&bytes, &limits()),
        Err(DecodeError::LengthMismatch {
            declared: actual - 1,
            actual
        })
    );
    // A bare header is framed correctly but carries nothing.
    assert_eq!(
        decode(b"HEP3\x00\x06", &limits()),
        Err(DecodeError::Missing {
            chunk_type: chunk::IP_FAMILY,
            name: "IP family"
        })
    );
}

#[test]
fn chunk_framing_errors_name_the_offset() {
    // A chunk header cut short: 3 bytes left after the last chunk.
    let mut body = v4_chunks().concat();
    body.extend_from_slice(&[0, 0, 1]);
    let bytes = packet(&[body.clone()]);
    assert_eq!(
        decode(&bytes, &limits()),
        Err(DecodeError::TruncatedChunkHeader {
            offset: 6 + body.len() - 3,
            remaining: 3
        })
    );

    // Chunk length 5 (< 6).
    let bytes = packet(&[vec![0, 0, 0, 1, 0, 5, 2]]);
    assert_eq!(
        decode(&bytes, &limits()),
        Err(DecodeError::ChunkTooShort {
            offset: 6,
            vendor: 0,
            chunk_type: 1,
            length: 5
        })
    );

    // Chunk length 0 would loop forever if accepted.
    let bytes = packet(&[vec![0, 0, 0, 1, 0, 0]]);
    assert!(matches!(
        decode(&bytes, &limits()),
        Err(DecodeError::ChunkTooShort { length: 0, .. })
    ));

    // Chunk runs past the end.
    let mut chunks = v4_chunks();
    let last = chunks.last_mut().unwrap();
    let len = u16::from_be_bytes([last[4], last[5]]) + 1;
    last[4..6].copy_from_slice(&len.to_be_bytes());
    let offset = 6 + chunks[..chunks.len() - 1].concat().len();
    let bytes = packet(&chunks);
    assert_eq!(
        decode(&bytes, &limits()),
        Err(DecodeError::ChunkPastEnd {
            offset,
            vendor: 0,
            chunk_type: 15,
            length: usize::from(len),
            remaining: usize::from(len) - 1,
        })
    );
}

#[test]
fn value_errors() {
    // Port chunk with a 3-byte value.
    let mut chunks = v4_chunks();
    chunks[4] = chunk_bytes(0, 7, &[0, 0, 0]);
    let offset = 6 + chunks[..4].concat().len();
    assert_eq!(
        decode(&packet(&chunks), &limits()),
        Err(DecodeError::BadValueLength {
            offset,
            chunk_type: 7,
            found: 3,
            expected: 2
        })
    );

    // Unknown family.
    let mut chunks = v4_chunks();
    chunks[0] = chunk_bytes(0, 1, &[7]);
    assert_eq!(
        decode(&packet(&chunks), &limits()),
        Err(DecodeError::UnknownFamily {
            offset: 6,
            family: 7
        })
    );

    // Family says IPv6 but addresses are IPv4.
    let mut chunks = v4_chunks();
    chunks[0] = chunk_bytes(0, 1, &[10]);
    let offset = 6 + chunks[..2].concat().len();
    assert_eq!(
        decode(&packet(&chunks), &limits()),
        Err(DecodeError::FamilyMismatch {
            offset,
            chunk_type: 3,
            family: 10
        })
    );
}

#[test]
fn duplicates_and_missing_chunks() {
    let mut chunks = v4_chunks();
    chunks.push(chunk_bytes(0, 9, &[0, 0, 0, 0]));
    let offset = 6 + v4_chunks().concat().len();
    assert_eq!(
        decode(&packet(&chunks), &limits()),
        Err(DecodeError::Duplicate {
            offset,
            chunk_type: 9
        })
    );

    let mut chunks = v4_chunks();
    chunks.push(chunk_bytes(0, 15, b"x"));
    assert_eq!(
        decode(&packet(&chunks), &limits()),
        Err(DecodeError::Duplicate {
            offset,
            chunk_type: 15
        })
    );

    let mut chunks = v4_chunks();
    chunks.push(chunk_bytes(0, 16, b"x"));
    assert_eq!(
        decode(&packet(&chunks), &limits()),
        Err(DecodeError::TwoPayloads { offset })
    );

    // Every required chunk, removed in turn.
    for (i, expected) in [
        (1u16, 0usize),
        (2, 1),
        (3, 2),
        (4, 3),
        (7, 4),
        (8, 5),
        (9, 6),
        (10, 7),
        (11, 8),
        (12, 9),
        (15, 10),
    ] {
        let mut chunks = v4_chunks();
        chunks.remove(expected);
        match decode(&packet(&chunks), &limits()) {
            Err(DecodeError::Missing { chunk_type, .. }) => assert_eq!(chunk_type, i),
            other => panic!("without chunk {i}: {other:?}"),
        }
    }
}

#[test]
fn payload_limit() {
    let big = vec![b'x'; 1000];
    let mut chunks = v4_chunks();
    *chunks.last_mut().unwrap() = chunk_bytes(0, 15, &big);
    let bytes = packet(&chunks);
    let offset = 6 + chunks[..chunks.len() - 1].concat().len();
    let tight = DecodeLimits {
        max_payload_bytes: 999,
    };
    assert_eq!(
        decode(&bytes, &tight),
        Err(DecodeError::PayloadTooLarge {
            offset,
            len: 1000,
            max: 999
        })
    );
    assert!(
        decode(
            &bytes,
            &DecodeLimits {
                max_payload_bytes: 1000
            }
        )
        .is_ok()
    );
}

#[test]
fn encoder_errors() {
    let mut p = v4_packet();
    p.dst_ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert!(matches!(
        p.to_bytes(),
        Err(EncodeError::MixedFamilies { .. })
    ));

    let big = vec![0u8; 65_535];
    let mut p = v4_packet();
    p.payload = Payload::Raw(&big);
    let mut out = vec![1, 2, 3];
    assert!(matches!(
        p.encode(&mut out),
        Err(EncodeError::TooLarge { .. })
    ));
    assert_eq!(out, [1, 2, 3], "nothing appended on error");

    // The largest payload that fits still encodes and decodes.
    let fixed = v4_packet().encoded_len() - SIP.len();
    let room = 65_535 - fixed;
    p.payload = Payload::Raw(&big[..room]);
    let bytes = p.to_bytes().unwrap();
    assert_eq!(bytes.len(), 65_535);
    let back = decode(
        &bytes,
        &DecodeLimits {
            max_payload_bytes: 65_535,
        },
    )
    .unwrap();
    assert_eq!(back, p);
}

#[test]
fn stream_framing() {
    let bytes = packet(&v4_chunks());
    assert_eq!(frame_len(&bytes[..3]), Ok(None));
    assert_eq!(frame_len(b""), Ok(None));
    assert_eq!(
        frame_len(b"G"),
        Err(DecodeError::BadMagic {
            found: [b'G', 0, 0, 0]
        })
    );
    assert_eq!(frame_len(&bytes[..6]), Ok(Some(bytes.len())));
    assert_eq!(
        frame_len(b"GET / HTTP/1.1"),
        Err(DecodeError::BadMagic { found: *b"GET " })
    );
    assert!(frame_len(b"HEP3\x00\x02").is_err());
}

/// Every truncation and every single-byte change of a valid packet: decode returns (Ok or Err),
/// never panics, and whatever decodes re-encodes to something that decodes to the same packet.
#[test]
fn every_truncation_and_byte_change_is_handled() {
    let bytes = packet(&v4_chunks());
    for n in 0..bytes.len() {
        let _ = decode(&bytes[..n], &limits());
    }
    let mut ok = 0;
    for i in 0..bytes.len() {
        for v in [0u8, 1, 2, 5, 6, 7, 10, 0x7f, 0x80, 0xff] {
            let mut m = bytes.clone();
            m[i] = v;
            if let Ok(p) = decode(&m, &limits()) {
                ok += 1;
                let again = p.to_bytes().unwrap();
                assert_eq!(decode(&again, &limits()).unwrap(), p);
            }
        }
    }
    assert!(ok > 0);
}
