//! Tandem's programs against libpcap's: for each expression, `tcpdump -dd` compiles libpcap's
//! program, and both run through the interpreter on the same frames (hand-built ones and, when
//! `../shared/captures` is present, every Ethernet frame of the shared captures). The verdicts
//! must agree. Skips, saying so, when tcpdump (Debian package `tcpdump`) is not installed.

use std::path::Path;
use std::process::Command;

use afpacket::bpf::{self, Packet};
use afpacket::filter::Filter;
use afpacket::frames::{FrameSpec, L4};

const EXPRESSIONS: &[&str] = &[
    "udp",
    "tcp",
    "ip",
    "ip6",
    "udp or tcp port 5060 or tcp port 5061",
    "port 5060",
    "src port 5060",
    "dst port 5060",
    "udp portrange 10000-20000",
    "tcp dst portrange 5060-5061",
    "host 192.0.2.1",
    "src host 192.0.2.1",
    "dst host 198.51.100.2",
    "host 2001:db8::2",
    "net 192.168.0.0/16",
    "not udp",
    "udp and not port 5060",
    "(tcp or udp) and (port 5060 or port 5061)",
    "ip proto 4",
    "ip6 proto 17",
    "vlan",
    "vlan 100",
    "vlan and udp",
    "vlan and tcp port 5060",
];

/// Ethernet frames to judge: hand-built ones plus the shared captures' Ethernet frames.
fn frames() -> Vec<Vec<u8>> {
    let mut specs = Vec::new();
    for l4 in [
        L4::Udp {
            sport: 5060,
            dport: 40000,
        },
        L4::Udp {
            sport: 15000,
            dport: 15002,
        },
        L4::Tcp {
            sport: 40000,
            dport: 5061,
        },
        L4::Tcp {
            sport: 80,
            dport: 40000,
        },
        L4::Icmp,
        L4::Proto(4),
    ] {
        specs.push(FrameSpec::v4(l4));
        specs.push(FrameSpec::v6(l4));
        let mut opts = FrameSpec::v4(l4);
        opts.ipv4_options = 12;
        specs.push(opts);
        let mut later = FrameSpec::v4(l4);
        later.fragment_offset = 100;
        specs.push(later);
        let mut first = FrameSpec::v4(l4);
        first.more_fragments = true;
        specs.push(first);
        for tags in [vec![100], vec![200], vec![100, 7]] {
            let mut t = FrameSpec::v4(l4);
            t.inline_tags = tags;
            specs.push(t);
        }
    }
    specs.push(FrameSpec::arp());
    let mut frames: Vec<Vec<u8>> = specs.iter().map(FrameSpec::build).collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            for e in entries.flatten() {
                frames.extend(ethernet_frames(&e.path()));
            }
        }
        Err(_) => eprintln!("{} is absent: hand-built frames only", dir.display()),
    }
    frames
}

/// The frames of a classic little-endian Ethernet pcap (others are skipped).
fn ethernet_frames(path: &Path) -> Vec<Vec<u8>> {
    let Ok(d) = std::fs::read(path) else {
        return Vec::new();
    };
    if d.len() < 24 || d[..4] != [0xd4, 0xc3, 0xb2, 0xa1] || d[20..24] != [1, 0, 0, 0] {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut p = 24;
    while p + 16 <= d.len() {
        let cap = u32::from_le_bytes(d[p + 8..p + 12].try_into().unwrap()) as usize;
        let Some(f) = d.get(p + 16..p + 16 + cap) else {
            break;
        };
        out.push(f.to_vec());
        p += 16 + cap;
    }
    out
}

/// Where the documented subset differs from libpcap on purpose: `host` and `net` match IP
/// only (libpcap also matches the addresses of ARP and RARP packets).
fn known_difference(expr: &str, frame: &[u8]) -> bool {
    let arp =
        frame.len() >= 14 && matches!(u16::from_be_bytes([frame[12], frame[13]]), 0x0806 | 0x8035);
    arp && (expr.contains("host") || expr.contains("net"))
}

fn tcpdump_program(expr: &str, ethernet_pcap: &Path) -> Vec<bpf::Insn> {
    let out = Command::new("tcpdump")
        .arg("-r")
        .arg(ethernet_pcap)
        .arg("-dd")
        .arg(expr)
        .output()
        .expect("running tcpdump");
    assert!(
        out.status.success(),
        "tcpdump -dd {expr:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prog = bpf::parse_c_array(&String::from_utf8_lossy(&out.stdout)).unwrap();
    bpf::validate(&prog).unwrap();
    prog
}

#[test]
fn verdicts_equal_libpcaps() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        test_env::skip("tcpdump is not installed (Debian package tcpdump)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("ethernet.pcap");
    // An empty Ethernet capture: tcpdump compiles for its link type and reads nothing.
    let mut header = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(&262_144u32.to_le_bytes());
    header.extend_from_slice(&1u32.to_le_bytes());
    std::fs::write(&pcap, header).unwrap();
    let frames = frames();
    let mut judged = 0;
    let mut mismatches = Vec::new();
    for expr in EXPRESSIONS {
        let ours = Filter::compile(expr).unwrap();
        let theirs = tcpdump_program(expr, &pcap);
        for (i, f) in frames.iter().enumerate() {
            let pkt = Packet {
                data: f,
                vlan_tci: None,
            };
            let want = bpf::run(&theirs, pkt) != 0;
            if ours.matches(pkt) != want && !known_difference(expr, f) {
                mismatches.push(format!(
                    "{expr:?} on frame {i} ({} bytes): libpcap says {want}",
                    f.len()
                ));
            }
            judged += 1;
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {judged} verdicts differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    eprintln!("{judged} verdicts equal libpcap's");
}
