//! Calls in the wrappers real captures bring: GRE (IP and transparent Ethernet bridging),
//! ERSPAN types I, II and III from switch port mirrors, VXLAN from cloud traffic mirrors, SIP over SCTP (RFC 4168) and SIP over
//! WebSocket (RFC 7118); and RTP of every static payload type. Each capture is built here, read
//! by Tandem with one and two workers, and compared with tshark's `-z rtp,streams` and
//! `-z sip,stat`.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use monitor::gre::build as gre;
use monitor::sctp::build as sctp;
use monitor::synth::PcapBuilder;
use monitor::synth::packet::{ethernet, ethertype_of, ip_tcp, ipv4, ipv4_udp, write_rtp};
use monitor::websocket::build as ws;
use monitor::{Analysis, CallTap, Monitor, MonitorConfig, TapFrame, TapKind};

const CALLER_SIP: &str = "10.1.0.1:5060";
const CALLEE_SIP: &str = "10.1.0.2:5060";
const CALLER_RTP: &str = "10.1.0.1:40000";
const CALLEE_RTP: &str = "10.1.0.2:50000";
const RTP_PACKETS: u16 = 60;
const MS: i64 = 1_000_000;
const T0: i64 = 1_700_000_000_000_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// How the SIP of a call travels.
#[derive(Clone, Copy, PartialEq)]
enum Signalling {
    Udp,
    Sctp,
    WebSocket,
}

impl Signalling {
    /// The transport as a Via header names it.
    fn name(self) -> &'static str {
        match self {
            Signalling::Udp => "UDP",
            Signalling::Sctp => "SCTP",
            Signalling::WebSocket => "WS",
        }
    }
}

/// One SIP message or RTP packet of a call, before it is wrapped.
enum Item {
    Sip {
        from_caller: bool,
        text: String,
    },
    Rtp {
        src: SocketAddr,
        dst: SocketAddr,
        payload: Vec<u8>,
    },
}

fn sdp(ip: &str, port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0 101\r\n\
         a=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
    )
}

fn sip(start: &str, cseq: &str, to_tag: bool, transport: &str, body: Option<&str>) -> String {
    let mut m = format!(
        "{start}\r\nVia: SIP/2.0/{transport} 10.1.0.1:5060;branch=z9hG4bK-{}\r\n\
         From: \"Alice\" <sip:1001@pbx.test>;tag=alice\r\nTo: <sip:1002@pbx.test>{}\r\n\
         Call-ID: encap-call@pbx.test\r\nCSeq: {cseq}\r\nContact: <sip:1001@10.1.0.1:5060>\r\n\
         User-Agent: tandem-test\r\n",
        cseq.replace(' ', "-"),
        if to_tag { ";tag=bob" } else { "" }
    );
    match body {
        Some(b) => m.push_str(&format!(
            "Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )),
        None => m.push_str("Content-Length: 0\r\n\r\n"),
    }
    m
}

/// A whole call: INVITE, 100, 180, 200 with SDP, ACK, PCMU both ways (one packet lost and a
/// few late ones), BYE and its 200; each item with its time.
fn call(transport: &str) -> Vec<(i64, Item)> {
    let uri = "sip:1002@pbx.test";
    let mut v = Vec::new();
    let mut t = T0;
    let say = |v: &mut Vec<(i64, Item)>, t: &mut i64, from_caller, text: String| {
        v.push((*t, Item::Sip { from_caller, text }));
        *t += 15 * MS;
    };
    let offer = sdp("10.1.0.1", 40000);
    let answer = sdp("10.1.0.2", 50000);
    say(
        &mut v,
        &mut t,
        true,
        sip(
            &format!("INVITE {uri} SIP/2.0"),
            "1 INVITE",
            false,
            transport,
            Some(&offer),
        ),
    );
    say(
        &mut v,
        &mut t,
        false,
        sip("SIP/2.0 100 Trying", "1 INVITE", false, transport, None),
    );
    say(
        &mut v,
        &mut t,
        false,
        sip("SIP/2.0 180 Ringing", "1 INVITE", true, transport, None),
    );
    say(
        &mut v,
        &mut t,
        false,
        sip("SIP/2.0 200 OK", "1 INVITE", true, transport, Some(&answer)),
    );
    say(
        &mut v,
        &mut t,
        true,
        sip(
            &format!("ACK {uri} SIP/2.0"),
            "1 ACK",
            true,
            transport,
            None,
        ),
    );
    for (src, dst, ssrc) in [
        (CALLER_RTP, CALLEE_RTP, 0x1111_0001u32),
        (CALLEE_RTP, CALLER_RTP, 0x2222_0002),
    ] {
        for i in 0..RTP_PACKETS {
            if i == 17 && ssrc == 0x1111_0001 {
                continue; // lost
            }
            // Arrival jitter: every fifth packet comes 3 ms late.
            let late = if i % 5 == 4 { 3 * MS } else { 0 };
            let mut p = Vec::new();
            write_rtp(
                &mut p,
                0,
                i == 0,
                1000 + i,
                8000 + 160 * u32::from(i),
                ssrc,
                160,
                0xff,
            );
            v.push((
                t + i64::from(i) * 20 * MS + late,
                Item::Rtp {
                    src: addr(src),
                    dst: addr(dst),
                    payload: p,
                },
            ));
        }
    }
    t += i64::from(RTP_PACKETS) * 20 * MS + 40 * MS;
    say(
        &mut v,
        &mut t,
        true,
        sip(
            &format!("BYE {uri} SIP/2.0"),
            "2 BYE",
            true,
            transport,
            None,
        ),
    );
    say(
        &mut v,
        &mut t,
        false,
        sip("SIP/2.0 200 OK", "2 BYE", true, transport, None),
    );
    v.sort_by_key(|(t, _)| *t);
    v
}

/// How an IP packet is wrapped into the Ethernet frame that is captured.
#[derive(Clone, Copy, Debug)]
enum Wrap {
    Plain,
    /// GRE carrying the IP packet, with a key, over IPv4.
    GreIp,
    /// GRE over IPv6 carrying IPv4.
    GreOverIpv6,
    /// GRE transparent Ethernet bridging.
    GreEthernet,
    ErspanI,
    ErspanII,
    ErspanIII,
    /// Type III with the optional platform sub-header.
    ErspanIIIPlatform,
    /// VXLAN on UDP port 4789, as cloud traffic mirrors send.
    Vxlan,
}

fn outer_v4(gre_packet: &[u8]) -> Vec<u8> {
    let ip = ipv4(
        "192.0.2.10".parse().unwrap(),
        "192.0.2.20".parse().unwrap(),
        47,
        gre_packet,
    );
    ethernet(0x0800, &ip)
}

fn wrap(how: Wrap, seq: u32, ip: &[u8]) -> Vec<u8> {
    // The mirrored frame carries a VLAN tag, as a trunk port's would.
    let mirrored = {
        let mut f = ethernet(0x8100, &[0x00, 0x64]);
        f.extend_from_slice(&ethertype_of(ip).to_be_bytes());
        f.extend_from_slice(ip);
        f
    };
    match how {
        Wrap::Plain => ethernet(ethertype_of(ip), ip),
        Wrap::GreIp => outer_v4(&gre::gre(0x0800, Some(42), None, ip)),
        Wrap::GreOverIpv6 => {
            let outer = ipv4(
                "2001:db8::10".parse().unwrap(),
                "2001:db8::20".parse().unwrap(),
                47,
                &gre::gre(0x0800, None, Some(seq), ip),
            );
            ethernet(0x86dd, &outer)
        }
        Wrap::GreEthernet => outer_v4(&gre::gre(0x6558, Some(7), None, &mirrored)),
        Wrap::ErspanI => outer_v4(&gre::erspan_i(&mirrored)),
        Wrap::ErspanII => outer_v4(&gre::erspan_ii(seq, 100, &mirrored)),
        Wrap::ErspanIII => outer_v4(&gre::erspan_iii(seq, 100, seq * 7, None, &mirrored)),
        Wrap::ErspanIIIPlatform => outer_v4(&gre::erspan_iii(
            seq,
            100,
            seq * 7,
            Some([0x0c, 0, 0, 1, 0, 0, 0, 9]),
            &mirrored,
        )),
        Wrap::Vxlan => {
            let mut v = vec![0x08, 0, 0, 0, 0, 0x12, 0x34, 0];
            v.extend_from_slice(&mirrored);
            ethernet(
                0x0800,
                &ipv4_udp(addr("192.0.2.10:51234"), addr("192.0.2.20:4789"), &v),
            )
        }
    }
}

/// Writes the call with its SIP over `signalling` and every frame wrapped by `how`.
fn write_call(path: &Path, signalling: Signalling, how: Wrap) {
    write_call_with(path, signalling, how, true)
}

/// `handshake`: false leaves out the WebSocket handshake (the capture began after it) and
/// sends the INVITE's frames in one segment.
fn write_call_with(path: &Path, signalling: Signalling, how: Wrap, handshake: bool) {
    let transport = signalling.name();
    let mut b = PcapBuilder::create(path).unwrap();
    let mut seq = 0u32;
    let mut put = |b: &mut PcapBuilder, t: i64, ip: &[u8]| {
        seq += 1;
        b.frame(t, &wrap(how, seq, ip));
    };
    let items = call(transport);
    let mut sip_stream = SipStream::new(signalling);
    sip_stream.handshake_done = !handshake;
    sip_stream.mid_stream = !handshake;
    for (t, item) in &items {
        match item {
            Item::Rtp { src, dst, payload } => put(&mut b, *t, &ipv4_udp(*src, *dst, payload)),
            Item::Sip { from_caller, text } => {
                for (dt, ip) in sip_stream.packets(*from_caller, text.as_bytes()) {
                    put(&mut b, *t + dt, &ip);
                }
            }
        }
    }
    b.finish().unwrap();
}

/// Turns SIP messages into IP packets for the call's signalling transport, with the quirks
/// each transport allows: SCTP bundles, fragments and retransmits chunks; WebSocket masks the
/// client's frames, splits messages into continuation frames with a ping between, splits a
/// frame across TCP segments and uses every length encoding.
struct SipStream {
    signalling: Signalling,
    messages: usize,
    /// Held back to be bundled with the next message (SCTP) or sent in one segment (WS).
    held: Option<(bool, Vec<u8>)>,
    tsn: [u32; 2],
    tcp_seq: [u32; 2],
    handshake_done: bool,
    mid_stream: bool,
}

const WS_CLIENT: &str = "10.1.0.1:51000";
const WS_SERVER: &str = "10.1.0.2:8088";

impl SipStream {
    fn new(signalling: Signalling) -> SipStream {
        SipStream {
            signalling,
            messages: 0,
            held: None,
            tsn: [1000, 5000],
            tcp_seq: [100, 900_000],
            handshake_done: false,
            mid_stream: false,
        }
    }

    /// The IP packets that carry `msg`, each with a time offset.
    fn packets(&mut self, from_caller: bool, msg: &[u8]) -> Vec<(i64, Vec<u8>)> {
        self.messages += 1;
        let (src, dst) = if from_caller {
            (addr(CALLER_SIP), addr(CALLEE_SIP))
        } else {
            (addr(CALLEE_SIP), addr(CALLER_SIP))
        };
        match self.signalling {
            Signalling::Udp => vec![(0, ipv4_udp(src, dst, msg))],
            Signalling::Sctp => self.sctp(from_caller, src, dst, msg),
            Signalling::WebSocket => self.websocket(from_caller, msg),
        }
    }

    fn sctp(
        &mut self,
        from_caller: bool,
        src: SocketAddr,
        dst: SocketAddr,
        msg: &[u8],
    ) -> Vec<(i64, Vec<u8>)> {
        let side = usize::from(!from_caller);
        let tsn = self.tsn[side];
        let chunks = if self.messages == 1 {
            // The INVITE in three fragments.
            sctp::message_chunks(tsn, 0, 0, msg, msg.len() / 3 + 1)
        } else {
            sctp::message_chunks(tsn, 0, self.messages as u16, msg, usize::MAX)
        };
        self.tsn[side] += chunks.len() as u32;
        let packet = |chunks: &[Vec<u8>]| {
            let p = sctp::packet(5060, 5060, 0xabcd, chunks);
            ipv4(src.ip(), dst.ip(), 132, &p)
        };
        match self.messages {
            // Fragments over two packets.
            1 => vec![(0, packet(&chunks[..2])), (1, packet(&chunks[2..]))],
            // 100 Trying is held and bundled with 180 Ringing.
            2 => {
                self.held = Some((from_caller, chunks[0].clone()));
                vec![]
            }
            3 => {
                let (_, first) = self.held.take().unwrap();
                vec![(0, packet(&[first, chunks[0].clone()]))]
            }
            // The 200 OK is sent twice (its TSN again: a retransmission).
            4 => vec![(0, packet(&chunks)), (500 * MS, packet(&chunks))],
            _ => vec![(0, packet(&chunks))],
        }
    }

    fn websocket(&mut self, from_caller: bool, msg: &[u8]) -> Vec<(i64, Vec<u8>)> {
        let mut out = Vec::new();
        if !self.handshake_done {
            self.handshake_done = true;
            let req = b"GET /ws HTTP/1.1\r\nHost: 10.1.0.2:8088\r\nUpgrade: websocket\r\n\
                Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: sip\r\n\r\n";
            let resp = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
                Sec-WebSocket-Protocol: sip\r\n\r\n";
            out.push(self.segment(true, req));
            out.push(self.segment(false, resp));
        }
        // The client masks its frames (RFC 6455 5.3); the server does not.
        let mask = from_caller.then_some([0x37, 0xfa, 0x21, 0x3d]);
        let bytes = match self.messages {
            1 => {
                // INVITE: a text frame and two continuations, a ping between them.
                let (a, rest) = msg.split_at(40);
                let (b, c) = rest.split_at(300);
                let mut v = ws::frame(false, 1, mask, false, a);
                v.extend(ws::frame(true, 9, mask, false, b"keepalive"));
                v.extend(ws::frame(false, 0, mask, false, b));
                v.extend(ws::frame(true, 0, mask, false, c));
                v
            }
            5 => ws::frame(true, 1, mask, true, msg), // ACK with a 64-bit length
            _ => ws::frame(true, 2, mask, false, msg),
        };
        match self.messages {
            // 100 Trying is held and sent in one segment with 180 Ringing.
            2 => {
                self.held = Some((from_caller, bytes));
                return timed(out);
            }
            3 => {
                let (_, mut first) = self.held.take().unwrap();
                first.extend(bytes);
                out.push(self.segment(from_caller, &first));
            }
            // The INVITE's frames cut mid-header across three segments.
            1 if !self.mid_stream => {
                for part in [&bytes[..1], &bytes[1..200], &bytes[200..]] {
                    out.push(self.segment(from_caller, part));
                }
            }
            _ => out.push(self.segment(from_caller, &bytes)),
        }
        timed(out)
    }

    fn segment(&mut self, from_client: bool, data: &[u8]) -> Vec<u8> {
        let (client, server) = (addr(WS_CLIENT), addr(WS_SERVER));
        let side = usize::from(!from_client);
        let seq = self.tcp_seq[side];
        self.tcp_seq[side] = seq.wrapping_add(data.len() as u32);
        if from_client {
            ip_tcp(client, server, seq, 0, data)
        } else {
            ip_tcp(server, client, seq, 0, data)
        }
    }
}

/// Packets sent 0.1 ms apart.
fn timed(packets: Vec<Vec<u8>>) -> Vec<(i64, Vec<u8>)> {
    packets
        .into_iter()
        .enumerate()
        .map(|(i, ip)| (i as i64 * 100_000, ip))
        .collect()
}

fn analyse(path: &Path, workers: usize) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    m.finish()
}

/// Tandem against itself (one and two workers) and against tshark.
fn compare(name: &str, path: &Path, decode_as: &[&str]) -> Analysis {
    let one = analyse(path, 1);
    let two = analyse(path, 2);
    common::assert_workers_agree(name, &one, &two);
    if common::have_tshark() {
        for (workers, a) in [(1, &one), (2, &two)] {
            let theirs = common::tshark_rtp_streams(path, decode_as);
            let ours: Vec<_> = a.all_streams().collect();
            common::assert_streams_match(&format!("{name} ({workers} workers)"), &ours, &theirs);
        }
        let (messages, requests, responses, resent) = common::tshark_sip_stat(path, decode_as);
        assert_eq!(one.sip.messages, messages, "{name}: SIP messages");
        assert_eq!(one.sip.requests, requests, "{name}: requests");
        assert_eq!(one.sip.responses, responses, "{name}: responses");
        assert_eq!(one.sip.resent, resent, "{name}: resent messages");
    }
    one
}

/// The call as it should come out, whatever carried it.
fn assert_the_call(name: &str, a: &Analysis) {
    assert_eq!(a.calls.len(), 1, "{name}: calls");
    let c = &a.calls[0];
    assert_eq!(c.dialog.state.as_str(), "ended", "{name}: state");
    assert_eq!(c.dialog.last_code, 200, "{name}: last code");
    assert_eq!(c.streams.len(), 2, "{name}: streams of the call");
    let mut packets: Vec<u64> = c.streams.iter().map(|s| s.stream.packets).collect();
    packets.sort();
    assert_eq!(
        packets,
        [u64::from(RTP_PACKETS) - 1, u64::from(RTP_PACKETS)],
        "{name}"
    );
    assert_eq!(a.counters.malformed, 0, "{name}: malformed");
}

/// The call with its SIP over `signalling`, wrapped by `how`, compared with tshark and checked:
/// seven SIP messages however they were cut, bundled or sent again.
fn the_call_over(dir: &Path, signalling: Signalling, how: Wrap) -> (String, Analysis) {
    let name = format!("{} {how:?}", signalling.name());
    let path = dir.join("call.pcap");
    write_call(&path, signalling, how);
    let a = compare(&name, &path, &[]);
    assert_the_call(&name, &a);
    assert_eq!(a.sip.messages, 7, "{name}: SIP messages");
    (name, a)
}

const WRAPS: [Wrap; 9] = [
    Wrap::Plain,
    Wrap::GreIp,
    Wrap::GreOverIpv6,
    Wrap::GreEthernet,
    Wrap::ErspanI,
    Wrap::ErspanII,
    Wrap::ErspanIII,
    Wrap::ErspanIIIPlatform,
    Wrap::Vxlan,
];

#[test]
fn a_call_in_gre_erspan_and_vxlan_is_read_as_tshark_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    for how in WRAPS {
        let name = format!("{how:?}");
        let path = dir.path().join(format!("{name}.pcap"));
        write_call(&path, Signalling::Udp, how);
        let a = compare(&name, &path, &[]);
        assert_the_call(&name, &a);
        assert_eq!(a.counters.decode.tunnels_undecoded(), 0, "{name}");
    }
}

#[test]
fn sip_over_sctp_bundled_fragmented_and_retransmitted() {
    let dir = tempfile::tempdir().unwrap();
    for how in [Wrap::Plain, Wrap::ErspanII] {
        let (name, a) = the_call_over(dir.path(), Signalling::Sctp, how);
        let s = a.counters.sip_sctp;
        assert_eq!(
            (
                s.retransmitted_chunks,
                s.messages_dropped,
                s.chunks_malformed
            ),
            (1, 0, 0),
            "{name}"
        );
    }
}

#[test]
fn sip_over_websocket_masked_fragmented_and_split() {
    let dir = tempfile::tempdir().unwrap();
    for how in [Wrap::Plain, Wrap::GreEthernet] {
        let (name, a) = the_call_over(dir.path(), Signalling::WebSocket, how);
        let w = a.counters.sip_tcp.websocket;
        assert_eq!(
            (w.streams, w.control_frames, w.not_sip, w.resyncs),
            (2, 1, 0, 0),
            "{name}"
        );
    }
}

#[test]
fn sip_over_websocket_found_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("ws-cut.pcap");
    write_call_with(&cut, Signalling::WebSocket, Wrap::Plain, false);
    let a = analyse(&cut, 1);
    assert_the_call("mid-stream WebSocket", &a);
    assert_eq!(a.sip.messages, 7);
}

/// The frames a tap heard, with what they were to their call.
type Heard = Arc<Mutex<Vec<(TapKind, Vec<u8>)>>>;

/// Records the frames the tap attributes to calls.
struct Recorder(Heard);

impl CallTap for Recorder {
    fn packet(&mut self, _call_id: &Arc<str>, kind: TapKind, frame: &TapFrame<'_>) {
        self.0.lock().unwrap().push((kind, frame.data.to_vec()));
    }
    fn call_ended(&mut self, _call_id: &Arc<str>, _invite_ns: i64, _now_ns: i64) {}
    fn progress(&mut self, _ts_ns: i64) {}
}

#[test]
fn the_tap_hears_the_encapsulated_frames_of_the_call() {
    let dir = tempfile::tempdir().unwrap();
    // Frames of SIP: each message's over UDP; over SCTP and WebSocket the INVITE's last
    // fragment or segment and one frame for the 100 and 180 sent together (and the 200 sent
    // again over SCTP is a retransmission, no message).
    for (signalling, how, sip_frames) in [
        (Signalling::Udp, Wrap::ErspanIII, 7),
        (Signalling::Sctp, Wrap::GreIp, 6),
        (Signalling::WebSocket, Wrap::ErspanI, 6),
    ] {
        let path = dir.path().join("tap.pcap");
        write_call(&path, signalling, how);
        for workers in [1, 2] {
            let heard = Arc::new(Mutex::new(Vec::new()));
            let h = heard.clone();
            let mut m = Monitor::with_tap(MonitorConfig::default(), workers, move |_| {
                Box::new(Recorder(h.clone()))
            });
            m.read_file(&path, |_| {}).unwrap();
            m.finish();
            let heard = heard.lock().unwrap();
            let sip = heard.iter().filter(|(k, _)| *k == TapKind::Sip).count();
            let rtp: Vec<_> = heard
                .iter()
                .filter_map(|(k, f)| match k {
                    TapKind::Rtp { rtp_offset } => Some((rtp_offset.unwrap(), f)),
                    _ => None,
                })
                .collect();
            assert_eq!(sip, sip_frames, "{how:?} {workers} workers: SIP frames");
            assert_eq!(
                rtp.len(),
                2 * usize::from(RTP_PACKETS) - 1,
                "{how:?}: RTP frames"
            );
            for (at, f) in rtp {
                // The whole original frame, outer Ethernet first, RTP where the offset says.
                assert_eq!(&f[12..14], &[0x08, 0x00]);
                assert_eq!(f[at] >> 6, 2, "{how:?}: RTP header at the offset");
            }
        }
    }
}

#[test]
fn tunnels_not_followed_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("undecoded.pcap");
    let inner = ipv4_udp(
        addr(CALLER_SIP),
        addr(CALLEE_SIP),
        b"OPTIONS sip:a SIP/2.0\r\n\r\n",
    );
    let mut b = PcapBuilder::create(&path).unwrap();
    let mut pptp = gre::gre(0x880b, Some(1), None, b"\xff\x03\x00\x21");
    pptp[1] |= 1;
    b.frame(T0, &outer_v4(&pptp));
    b.frame(T0 + MS, &outer_v4(&gre::gre(0x8847, None, None, &inner)));
    let mut routed = gre::gre(0x0800, None, None, &inner);
    routed[0] |= 0x40;
    b.frame(T0 + 2 * MS, &outer_v4(&routed));
    let mut v9 = gre::erspan_ii(1, 1, &ethernet(0x0800, &inner));
    v9[8] = 0x90;
    b.frame(T0 + 3 * MS, &outer_v4(&v9));
    b.frame(
        T0 + 4 * MS,
        &outer_v4(&gre::gre(0x6558, None, None, &ethernet(0x0806, &[0; 28]))),
    );
    // Tunnels nested past the limit are malformed.
    let mut deep = inner.clone();
    for _ in 0..=monitor::decode::MAX_TUNNEL_DEPTH {
        deep = ipv4(
            "192.0.2.1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
            47,
            &gre::gre(0x0800, None, None, &deep),
        );
    }
    b.frame(T0 + 5 * MS, &ethernet(0x0800, &deep));
    b.finish().unwrap();
    for workers in [1, 2] {
        let a = analyse(&path, workers);
        let d = a.counters.decode;
        assert_eq!(
            (
                d.gre_version,
                d.gre_protocol,
                d.gre_routing,
                d.erspan_unknown,
                d.not_ip
            ),
            (1, 1, 1, 1, 1),
            "{workers} workers"
        );
        assert_eq!(a.counters.malformed, 1);
        assert_eq!(a.sip.messages, 0);
    }
}

/// Every static payload type of RFC 3551 (and 1, 2 of RFC 1890) as tshark names it, with its
/// clock rate giving the same jitter.
#[test]
fn every_static_payload_type_is_named_and_timed_as_tshark_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("payload-types.pcap");
    let mut b = PcapBuilder::create(&path).unwrap();
    let mut t = T0;
    for pt in 0u8..=34 {
        let src = addr(&format!("10.2.0.1:{}", 20000 + 2 * u16::from(pt)));
        let dst = addr(&format!("10.2.0.2:{}", 30000 + 2 * u16::from(pt)));
        for i in 0..30u16 {
            let late = if i % 3 == 2 {
                2 * MS + i64::from(pt) * 10_000
            } else {
                0
            };
            let mut p = Vec::new();
            write_rtp(
                &mut p,
                pt,
                false,
                7 + i,
                3000 + 160 * u32::from(i),
                0x5000 + u32::from(pt),
                80,
                0x55,
            );
            b.udp(t + i64::from(i) * 20 * MS + late, src, dst, &p);
        }
        t += 700 * MS;
    }
    // One stream changing type (G.729, comfort noise, G.711 A-law, a dynamic type): tshark
    // lists the types in the order of their numbers, not of their arrival.
    let (src, dst) = (addr("10.2.0.1:21000"), addr("10.2.0.2:31000"));
    for (i, pt) in [18u8, 18, 13, 8, 8, 96, 8].into_iter().enumerate() {
        let mut p = Vec::new();
        let i = i as u16;
        write_rtp(&mut p, pt, false, i, 160 * u32::from(i), 0x7777, 20, 0x55);
        b.udp(t + i64::from(i) * 20 * MS, src, dst, &p);
    }
    // Keypad events on type 101 with no SDP: tshark's default events type, `rtpevent`.
    let (src, dst) = (addr("10.2.0.1:23456"), addr("10.2.0.2:33456"));
    for i in 0..6u16 {
        let mut p = Vec::new();
        write_rtp(&mut p, 101, i == 0, i, 4000, 0x8888, 0, 0);
        p.extend_from_slice(&[5, if i >= 3 { 0x8a } else { 0x0a }]);
        p.extend_from_slice(&(160 * (i + 1)).to_be_bytes());
        b.udp(t + 500 * MS + i64::from(i) * 20 * MS, src, dst, &p);
    }
    b.finish().unwrap();
    let a = analyse(&path, 1);
    let names: Vec<String> = a.all_streams().map(|s| s.stream.payload_names()).collect();
    assert!(names.contains(&"rtpevent".to_string()), "{names:?}");
    assert!(names.contains(&"h263".to_string()) && names.contains(&"DVI4 16k".to_string()));
    assert!(
        names.contains(&"g711A, CN, g729, 96".to_string()),
        "{names:?}"
    );
    if common::have_tshark() {
        let theirs = common::tshark_rtp_streams(&path, &[]);
        let ours: Vec<_> = a.all_streams().collect();
        common::assert_streams_match("static payload types", &ours, &theirs);
    }
}
