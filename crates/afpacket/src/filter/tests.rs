//! The compiler's verdicts on hand-built frames, through the user-space interpreter.

use super::*;
use crate::bpf::Packet;
use crate::frames::{FrameSpec, L4};

fn verdict(expr: &str, spec: &FrameSpec) -> bool {
    let f = Filter::compile(expr).unwrap_or_else(|e| panic!("{e}"));
    let bytes = spec.build();
    f.matches(Packet {
        data: &bytes,
        vlan_tci: spec.kernel_tag,
    })
}

fn udp4(sport: u16, dport: u16) -> FrameSpec {
    FrameSpec::v4(L4::Udp { sport, dport })
}

fn tcp4(sport: u16, dport: u16) -> FrameSpec {
    FrameSpec::v4(L4::Tcp { sport, dport })
}

#[test]
fn transports_and_families() {
    assert!(verdict("udp", &udp4(1000, 2000)));
    assert!(!verdict("tcp", &udp4(1000, 2000)));
    assert!(verdict("ip", &udp4(1, 2)));
    assert!(!verdict("ip6", &udp4(1, 2)));
    let v6 = FrameSpec::v6(L4::Udp {
        sport: 5060,
        dport: 5060,
    });
    assert!(verdict("ip6 and udp port 5060", &v6));
    assert!(!verdict("ip", &v6));
    assert!(verdict("ip proto 17", &udp4(1, 2)));
    assert!(verdict("proto udp", &v6));
    assert!(!verdict("ip proto 6", &udp4(1, 2)));
}

#[test]
fn ports_directions_and_ranges() {
    let f = tcp4(40000, 5061);
    assert!(verdict("tcp port 5061", &f));
    assert!(verdict("port 5061", &f));
    assert!(!verdict("udp port 5061", &f));
    assert!(verdict("dst port 5061", &f));
    assert!(!verdict("src port 5061", &f));
    assert!(verdict("src port 40000 and dst port 5061", &f));
    assert!(verdict("portrange 5060-5061", &f));
    assert!(!verdict("portrange 5000-5060", &f));
    assert!(verdict("src or dst port 40000", &f));
    assert!(!verdict("src and dst port 40000", &f));
    assert!(verdict("src and dst port 7", &tcp4(7, 7)));
    // An IPv4 header with options moves the ports.
    let mut opts = udp4(5060, 9);
    opts.ipv4_options = 8;
    assert!(verdict("udp src port 5060", &opts));
}

#[test]
fn hosts_and_nets() {
    let f = udp4(1, 2); // 192.0.2.1 -> 198.51.100.2
    assert!(verdict("host 192.0.2.1", &f));
    assert!(verdict("src host 192.0.2.1", &f));
    assert!(!verdict("dst host 192.0.2.1", &f));
    assert!(verdict("dst net 198.51.100.0/24", &f));
    assert!(!verdict("net 10.0.0.0/8", &f));
    assert!(!verdict("ip6 host ::1", &f));
    let v6 = FrameSpec::v6(L4::Udp { sport: 1, dport: 2 }); // 2001:db8::1 -> 2001:db8::2
    assert!(verdict("host 2001:db8::2", &v6));
    assert!(verdict("src net 2001:db8::/32", &v6));
    assert!(!verdict("dst host 2001:db8::1", &v6));
}

#[test]
fn fragments_without_a_udp_header_pass_the_default_filter() {
    let mut later = udp4(0, 0);
    later.fragment_offset = 185; // a later fragment: no UDP header, protocol still 17
    assert!(verdict(DEFAULT_FILTER, &later));
    assert!(verdict("udp", &later));
    // Ports are not in a later fragment: a port filter must not look there.
    assert!(!verdict("udp port 0", &later));
    let mut first = udp4(5060, 5060);
    first.more_fragments = true;
    assert!(verdict("udp port 5060", &first));
    let mut v6frag = FrameSpec::v6(L4::Udp {
        sport: 5060,
        dport: 5060,
    });
    v6frag.ipv6_fragment = Some(0);
    assert!(verdict("udp port 5060", &v6frag));
    assert!(verdict(DEFAULT_FILTER, &v6frag));
    v6frag.ipv6_fragment = Some(100);
    assert!(!verdict("udp port 5060", &v6frag));
    assert!(verdict(DEFAULT_FILTER, &v6frag));
}

#[test]
fn default_filter_keeps_sip_and_rtp_and_drops_the_rest() {
    assert!(verdict(DEFAULT_FILTER, &udp4(30000, 40000)));
    assert!(verdict(DEFAULT_FILTER, &tcp4(50000, 5060)));
    assert!(verdict(DEFAULT_FILTER, &tcp4(5061, 50000)));
    assert!(!verdict(DEFAULT_FILTER, &tcp4(50000, 443)));
    assert!(!verdict(DEFAULT_FILTER, &FrameSpec::v4(L4::Icmp)));
    assert!(!verdict(DEFAULT_FILTER, &FrameSpec::arp()));
    assert!(verdict(DEFAULT_FILTER, &FrameSpec::v4(L4::Proto(4))));
    // GRE (ERSPAN port mirrors), SCTP, and SIP over WebSocket on Asterisk's and FreeSWITCH's
    // ports: all decoded by the monitor.
    assert!(verdict(DEFAULT_FILTER, &FrameSpec::v4(L4::Proto(47))));
    assert!(verdict(DEFAULT_FILTER, &FrameSpec::v6(L4::Proto(47))));
    assert!(verdict(DEFAULT_FILTER, &FrameSpec::v4(L4::Proto(132))));
    assert!(verdict(DEFAULT_FILTER, &tcp4(50000, 8088)));
    assert!(verdict(DEFAULT_FILTER, &tcp4(5066, 50000)));
    let mut tagged_gre = FrameSpec::v4(L4::Proto(47));
    tagged_gre.inline_tags = vec![100];
    assert!(verdict(DEFAULT_FILTER, &tagged_gre));
    let mut tagged = udp4(1, 2);
    tagged.inline_tags = vec![100];
    assert!(verdict(DEFAULT_FILTER, &tagged));
    let mut held = tcp4(1, 5060);
    held.kernel_tag = Some(100);
    assert!(verdict(DEFAULT_FILTER, &held));
    held.l4 = L4::Tcp {
        sport: 1,
        dport: 80,
    };
    assert!(!verdict(DEFAULT_FILTER, &held));
}

#[test]
fn vlan_inline_and_held_by_the_kernel() {
    for kernel in [false, true] {
        let mut f = udp4(1, 2);
        if kernel {
            f.kernel_tag = Some(0x2000 | 42); // priority bits set: the ID is the low 12
        } else {
            f.inline_tags = vec![0x2000 | 42];
        }
        assert!(verdict("vlan", &f), "kernel={kernel}");
        assert!(verdict("vlan 42", &f));
        assert!(!verdict("vlan 43", &f));
        assert!(verdict("vlan and udp", &f));
        assert!(verdict("vlan 42 and ip and udp", &f));
        assert!(!verdict("vlan and tcp", &f));
        // Without `vlan`, primitives match untagged frames only.
        assert!(!verdict("udp", &f));
        assert!(verdict("not udp", &f));
        assert!(verdict("udp or vlan", &f));
    }
    let plain = udp4(1, 2);
    assert!(!verdict("vlan", &plain));
    assert!(verdict("not vlan", &plain));
    // Two tags: the outer one held by the kernel, the inner one inline (QinQ).
    let mut qinq = udp4(1, 2);
    qinq.kernel_tag = Some(10);
    qinq.inline_tags = vec![20];
    assert!(verdict("vlan 10 and vlan 20 and udp", &qinq));
    assert!(!verdict("vlan 10 and udp", &qinq));
    let mut both_inline = udp4(1, 2);
    both_inline.inline_tags = vec![10, 20];
    assert!(verdict("vlan 10 and vlan 20 and udp", &both_inline));
    // The shift ends at the parenthesis.
    assert!(!verdict("(vlan) and udp", &both_inline));
}

#[test]
fn operators_and_precedence() {
    let f = udp4(5060, 5060);
    assert!(verdict("not tcp and udp", &f));
    assert!(verdict("tcp or udp and port 5060", &f));
    assert!(!verdict("(tcp or udp) and port 5061", &f));
    assert!(verdict("!tcp && (udp || tcp)", &f));
    assert!(verdict("", &f));
    assert!(verdict("  ", &FrameSpec::arp()));
}

#[test]
fn parse_errors_say_where_and_what() {
    let cases = [
        ("udp or", 6, "expression ends"),
        ("port 5060 or 5061", 13, "repeat the qualifier"),
        ("(udp", 0, "never closed"),
        ("udp)", 3, "without a matching"),
        ("port 70000", 5, "0 to 65535"),
        ("portrange 9-3", 10, "A <= B"),
        ("host example.com", 5, "host names are not resolved"),
        ("ip host ::1", 8, "family"),
        ("bogus", 0, "unknown primitive `bogus`"),
        ("src udp", 4, "expected `port`"),
        ("udp & tcp", 4, "not an operator"),
        ("net 10.0.0.1/8", 4, "beyond the prefix"),
        ("vlan 5000", 5, "0 to 4095"),
    ];
    for (expr, offset, text) in cases {
        let e = Filter::compile(expr).unwrap_err();
        assert_eq!(e.offset, offset, "{expr}: {e}");
        assert!(e.to_string().contains(text), "{expr}: {e}");
        assert!(e.to_string().contains(expr), "{e}");
    }
}

#[test]
fn limits_bound_the_work() {
    let deep = format!("{}udp{}", "(".repeat(40), ")".repeat(40));
    assert!(
        Filter::compile(&deep)
            .unwrap_err()
            .message
            .contains("deeper")
    );
    let many = vec!["udp"; 70].join(" or ");
    assert!(
        Filter::compile(&many)
            .unwrap_err()
            .message
            .contains("primitives")
    );
    let vlans = ["vlan"; 5].join(" and ");
    assert!(
        Filter::compile(&vlans)
            .unwrap_err()
            .message
            .contains("vlan")
    );
    let long = "u".repeat(MAX_FILTER_BYTES + 1);
    assert!(
        Filter::compile(&long)
            .unwrap_err()
            .message
            .contains("longer")
    );
    // Programs longer than 255 instructions need wide jumps; they still validate and work.
    let big = (0..20)
        .map(|p| format!("port {}", 1000 + p))
        .collect::<Vec<_>>()
        .join(" or ");
    let f = Filter::compile(&big).unwrap();
    assert!(f.program().len() > 256, "{}", f.program().len());
    bpf::validate(f.program()).unwrap();
    assert!(verdict(&big, &udp4(1019, 3)));
    assert!(!verdict(&big, &udp4(1020, 3)));
}

#[test]
fn the_default_filter_is_a_small_program() {
    let f = Filter::compile(DEFAULT_FILTER).unwrap();
    assert!(f.program().len() < 1024, "{}", f.program().len());
}
