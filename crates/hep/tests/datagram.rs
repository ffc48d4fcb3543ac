//! HEP payloads rebuilt as raw IP/UDP packets, written to a pcap (link type 101) and read back by
//! tshark with checksum validation on. Skips with a message if tshark is not installed.

use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::process::Command;

use hep::{DatagramError, DecodeLimits, HepPacket, Payload, ProtocolType, decode};

fn pcap_raw(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65_535, 101] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for (i, p) in packets.iter().enumerate() {
        for v in [1_700_000_000 + i as u32, 0, p.len() as u32, p.len() as u32] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(p);
    }
    f
}

#[test]
fn datagrams_open_in_tshark_with_good_checksums() {
    let fixture = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/kamailio-5.6.3-siptrace-options.hep"),
    )
    .unwrap();
    let v4 = decode(&fixture, &DecodeLimits::default()).unwrap();
    let sip6 = b"BYE sip:bob@[2001:db8::2] SIP/2.0\r\nCall-ID: v6-call@host\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n";
    let v6 = HepPacket {
        ip_protocol: 17,
        src_ip: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        dst_ip: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
        src_port: 5062,
        dst_port: 5060,
        ts_sec: 1,
        ts_usec: 2,
        protocol_type: ProtocolType::SIP,
        capture_id: 1,
        keep_alive_timer: None,
        auth_key: None,
        payload: Payload::Raw(sip6),
        correlation_id: None,
    };
    let mut odd = v6;
    odd.payload = Payload::Raw(&sip6[..sip6.len() - 1]); // odd length exercises checksum padding
    let mut packets = Vec::new();
    for p in [&v4, &v6, &odd] {
        let mut d = Vec::new();
        p.to_udp_datagram(&mut d).unwrap();
        packets.push(d);
    }
    let mut mixed = v6;
    mixed.dst_ip = v4.dst_ip;
    assert!(matches!(
        mixed.to_udp_datagram(&mut Vec::new()),
        Err(DatagramError::MixedFamilies { .. })
    ));

    let ok = Command::new("sh")
        .arg("-c")
        .arg("command -v tshark")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_env::skip("the tshark part: `tshark` is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("hep.pcap");
    std::fs::write(&file, pcap_raw(&packets)).unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-T",
            "fields",
        ])
        .args([
            "-e",
            "ip.src",
            "-e",
            "ipv6.src",
            "-e",
            "udp.srcport",
            "-e",
            "udp.dstport",
        ])
        .args([
            "-e",
            "ip.checksum.status",
            "-e",
            "udp.checksum.status",
            "-e",
            "sip.Call-ID",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            "127.0.0.1\t\t58945\t35060\t1\t1\thep-test-1@127.0.0.1",
            "\t2001:db8::1\t5062\t5060\t\t1\tv6-call@host",
            "\t2001:db8::1\t5062\t5060\t\t1\tv6-call@host",
        ]
    );
}
