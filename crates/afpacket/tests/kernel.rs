//! Filters and the ring through the real kernel: frames sent on one end of a veth pair (in a
//! network namespace of their own) are captured on the other end, and the filter keeps exactly
//! the frames the user-space interpreter accepts. Needs root and `ip`; says why and skips
//! otherwise.

use afpacket::bpf::Packet;
use afpacket::filter::{DEFAULT_FILTER, Filter};
use afpacket::frames::{FrameSpec, L4};
use afpacket::netns::VethPair;
use afpacket::{Capture, CaptureConfig, Error, Fanout, RingConfig, Sender};

fn pair() -> Option<VethPair> {
    if let Some(why) = VethPair::unavailable() {
        test_env::skip(&why);
        return None;
    }
    Some(VethPair::create().expect("namespace with a veth pair"))
}

/// A mix of frames: each one's payload starts with its index, so captured frames are known.
fn mix() -> Vec<FrameSpec> {
    let mut v = vec![
        FrameSpec::v4(L4::Udp {
            sport: 40000,
            dport: 40002,
        }),
        FrameSpec::v4(L4::Tcp {
            sport: 33000,
            dport: 5060,
        }),
        FrameSpec::v4(L4::Tcp {
            sport: 33000,
            dport: 80,
        }),
        FrameSpec::v4(L4::Icmp),
        FrameSpec::v6(L4::Udp {
            sport: 5060,
            dport: 5060,
        }),
        FrameSpec::v6(L4::Tcp {
            sport: 5061,
            dport: 40000,
        }),
        FrameSpec::v4(L4::Proto(4)),
        FrameSpec::arp(),
    ];
    let mut frag = FrameSpec::v4(L4::Udp { sport: 0, dport: 0 });
    frag.fragment_offset = 185;
    v.push(frag);
    let mut tagged = FrameSpec::v4(L4::Udp {
        sport: 1000,
        dport: 2000,
    });
    tagged.inline_tags = vec![100];
    v.push(tagged);
    let mut tagged_http = FrameSpec::v4(L4::Tcp {
        sport: 1000,
        dport: 80,
    });
    tagged_http.inline_tags = vec![100];
    v.push(tagged_http);
    v
}

/// Frame `i` of a mix carries `100 * (i + 1)` payload bytes: its length tells it apart.
fn numbered(specs: &[FrameSpec]) -> Vec<FrameSpec> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.clone();
            s.payload_bytes = 100 * (i + 1);
            s
        })
        .collect()
}

fn send_and_capture(pair: &VethPair, expr: &str, specs: &[FrameSpec]) -> Vec<usize> {
    let filter = Filter::compile(expr).unwrap();
    let (mut cap, tx) = pair
        .in_namespace(|| {
            let cfg = CaptureConfig {
                ring: RingConfig {
                    block_bytes: 1 << 16,
                    block_count: 4,
                    block_timeout_ms: 5,
                },
                filter: Some(filter),
                ..CaptureConfig::default()
            };
            (
                Capture::open(&pair.b, &cfg).unwrap(),
                Sender::open(&pair.a).unwrap(),
            )
        })
        .unwrap();
    let frames: Vec<Vec<u8>> = specs.iter().map(FrameSpec::build).collect();
    for f in &frames {
        tx.send(f).unwrap();
    }
    // A marker after the mix (every filter tested keeps it): once it is in, all the rest is.
    let mut marker = FrameSpec::v4(L4::Udp {
        sport: 40001,
        dport: 40001,
    });
    marker.payload_bytes = 5000;
    let marker = marker.build();
    tx.send(&marker).unwrap();
    let mut seen = Vec::new();
    'outer: for _ in 0..200 {
        if let Some(block) = cap.next_block(50).unwrap() {
            for f in block.frames() {
                let mut wire = Vec::new();
                f.write_with_tag(&mut wire);
                if wire == marker {
                    break 'outer;
                }
                let i = frames.iter().position(|x| *x == wire);
                seen.push(
                    i.unwrap_or_else(|| panic!("{expr}: an unknown frame of {} bytes", wire.len())),
                );
            }
        }
    }
    let stats = cap.stats().unwrap();
    assert_eq!(stats.drops, 0);
    seen
}

#[test]
fn the_kernel_gives_the_interpreters_verdicts() {
    let Some(pair) = pair() else { return };
    let specs = numbered(&mix());
    for expr in [
        DEFAULT_FILTER,
        "udp",
        "tcp port 5060 or tcp port 5061 or udp port 40001",
        "not tcp",
        "vlan and udp or udp port 40001",
        "ip6 or udp port 40001",
        "udp and not vlan",
        "host 198.51.100.2 and portrange 40000-40010 or udp port 40001",
    ] {
        let expected: Vec<usize> = specs
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                let f = Filter::compile(expr).unwrap();
                // The kernel takes the tag out of a received frame: give the interpreter the
                // frame the way the kernel's filter sees it.
                let mut bytes = s.build();
                let mut tci = None;
                if let Some(&t) = s.inline_tags.first() {
                    bytes.drain(12..16);
                    tci = Some(t);
                }
                let interp = f.matches(Packet {
                    data: &bytes,
                    vlan_tci: tci,
                });
                let from_file = f.matches(Packet {
                    data: &s.build(),
                    vlan_tci: None,
                });
                assert_eq!(interp, from_file, "{expr}: frame {i}: tag inline vs held");
                interp
            })
            .map(|(i, _)| i)
            .collect();
        let got = send_and_capture(&pair, expr, &specs);
        assert_eq!(got, expected, "filter {expr:?}");
    }
}

#[test]
fn fanout_shares_an_interface_and_counters_count() {
    let Some(pair) = pair() else { return };
    let (mut caps, tx) = pair
        .in_namespace(|| {
            let cfg = CaptureConfig {
                fanout: Some(Fanout { group_id: 4242 }),
                filter: Some(Filter::compile("udp").unwrap()),
                ring: RingConfig {
                    block_bytes: 1 << 16,
                    block_count: 4,
                    block_timeout_ms: 5,
                },
                promiscuous: true,
            };
            let caps: Vec<Capture> = (0..2)
                .map(|_| Capture::open(&pair.b, &cfg).unwrap())
                .collect();
            (caps, Sender::open(&pair.a).unwrap())
        })
        .unwrap();
    // 64 flows, 10 frames each: each flow lands wholly on one socket.
    for n in 0..10 {
        for flow in 0..64u16 {
            let mut s = FrameSpec::v4(L4::Udp {
                sport: 10_000 + flow,
                dport: 20_000,
            });
            s.payload_bytes = 20 + n;
            tx.send(&s.build()).unwrap();
        }
    }
    let mut per_socket = [0usize; 2];
    let mut flows_of = [
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    ];
    for (i, cap) in caps.iter_mut().enumerate() {
        for _ in 0..20 {
            if let Some(block) = cap.next_block(20).unwrap() {
                for f in block.frames() {
                    per_socket[i] += 1;
                    flows_of[i].insert(u16::from_be_bytes([f.data[34], f.data[35]]));
                }
            }
        }
    }
    assert_eq!(per_socket[0] + per_socket[1], 640);
    assert!(flows_of[0].is_disjoint(&flows_of[1]), "a flow was split");
    assert!(per_socket[0] > 0 && per_socket[1] > 0, "{per_socket:?}");
    let total: u64 = caps.iter_mut().map(|c| c.stats().unwrap().packets).sum();
    assert_eq!(total, 640);
}

#[test]
fn errors_name_the_interface() {
    let e = Capture::open("nosuch0", &CaptureConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::NoSuchInterface(_)), "{e}");
    assert!(e.to_string().contains("nosuch0"));
    let Some(pair) = pair() else { return };
    let bad = CaptureConfig {
        ring: RingConfig {
            block_bytes: 1000,
            block_count: 1,
            block_timeout_ms: 1,
        },
        ..CaptureConfig::default()
    };
    let e = pair
        .in_namespace(|| Capture::open(&pair.b, &bad).err().unwrap())
        .unwrap();
    assert!(matches!(e, Error::BadRing { .. }), "{e}");
    let huge = CaptureConfig {
        ring: RingConfig {
            block_bytes: 1 << 22,
            block_count: 1 << 10,
            block_timeout_ms: 1,
        },
        ..CaptureConfig::default()
    };
    let e = pair
        .in_namespace(|| Capture::open(&pair.b, &huge).err().unwrap())
        .unwrap();
    assert!(matches!(e, Error::RingTooLarge { .. }), "{e}");
    assert!(e.to_string().contains(&pair.b), "{e}");
}

#[test]
fn the_loopback_interface_gives_each_packet_once_as_libpcap_does() {
    // The kernel hands a packet sent on `lo` to packet sockets twice: as it leaves and as it
    // arrives. Asterisk and a proxy on one host talk over `lo`; each packet must count once.
    let Some(pair) = pair() else { return };
    let counted = pair
        .in_namespace(|| {
            let cfg = CaptureConfig {
                filter: Some(Filter::compile("udp port 40999").unwrap()),
                ..CaptureConfig::default()
            };
            let mut cap = Capture::open("lo", &cfg).unwrap();
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for i in 0..5u8 {
                socket.send_to(&[i; 20], "127.0.0.1:40999").unwrap();
            }
            let mut frames = 0;
            for _ in 0..20 {
                if let Some(block) = cap.next_block(50).unwrap() {
                    frames += block.frames().inspect(|f| assert!(!f.outgoing)).count();
                }
            }
            (frames, cap.stats().unwrap().packets)
        })
        .unwrap();
    assert_eq!(counted.0, 5, "each datagram once");
    assert_eq!(counted.1, 10, "the kernel passed both copies to the socket");
}
