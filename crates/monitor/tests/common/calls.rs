//! One call between 10.0.0.1 (the caller, media on port 4000) and 10.0.0.2 (the callee, media
//! on port 5000), written message by message: for tests that need a call's exact packets.

use std::net::SocketAddr;
use std::ops::Range;

use monitor::synth::PcapBuilder;
use monitor::synth::fax::FaxPacket;
use monitor::synth::packet::write_rtp;

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub const URI: &str = "sip:200@10.0.0.2";
pub const CALL_ID: &str = "fax-1@tandem.test";
/// The caller's and the callee's media addresses.
pub const A_MEDIA: &str = "10.0.0.1:4000";
pub const B_MEDIA: &str = "10.0.0.2:5000";
/// The SSRCs of the caller's and the callee's audio.
pub const A_SSRC: u32 = 0x1000;
pub const B_SSRC: u32 = 0x1001;
const MS: i64 = 1_000_000;

pub fn sdp(ip: &str, media: &str) -> String {
    format!("v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n{media}\r\n")
}

/// The caller's (`a`) or the callee's SDP with one stream on its media port: `m=` line's
/// media, port, and the rest.
fn side_sdp(a: bool, media: &str, rest: &str) -> String {
    let (ip, port) = if a {
        ("10.0.0.1", 4000)
    } else {
        ("10.0.0.2", 5000)
    };
    sdp(ip, &format!("m={media} {port} {rest}"))
}

/// PCMA on the side's media port: `a` the caller, else the callee.
pub fn audio_sdp(a: bool) -> String {
    side_sdp(a, "audio", "RTP/AVP 8\r\na=rtpmap:8 PCMA/8000")
}

/// T.38 over UDPTL on the side's media port (the same as its audio).
pub fn fax_sdp(a: bool) -> String {
    side_sdp(a, "image", "udptl t38\r\na=T38FaxVersion:0")
}

pub fn sip(start: &str, cseq: &str, body: Option<&str>) -> String {
    let mut m = format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{}\r\n\
         From: <sip:100@10.0.0.1>;tag=a\r\nTo: <sip:200@10.0.0.2>{}\r\n\
         Call-ID: {CALL_ID}\r\nCSeq: {cseq}\r\nContact: <sip:100@10.0.0.1>\r\n",
        cseq.replace(' ', ""),
        if start.starts_with("INVITE") && cseq.starts_with("1 ") {
            ""
        } else {
            ";tag=b"
        }
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

fn sip_addrs() -> (SocketAddr, SocketAddr) {
    (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"))
}

/// The caller's INVITE (a re-INVITE after the first) with `offer`, at `t`.
pub fn invite(b: &mut PcapBuilder, t: i64, offer: &str, cseq: u32) {
    let (a_sip, b_sip) = sip_addrs();
    let invite = sip(
        &format!("INVITE {URI} SIP/2.0"),
        &format!("{cseq} INVITE"),
        Some(offer),
    );
    b.udp(t, a_sip, b_sip, invite.as_bytes());
}

/// The callee's final response `status` to INVITE `cseq` at `t`, then the caller's ACK 10 ms
/// later; returns the time of the ACK.
pub fn answer(b: &mut PcapBuilder, t: i64, status: &str, cseq: u32, body: Option<&str>) -> i64 {
    let (a_sip, b_sip) = sip_addrs();
    let response = sip(
        &format!("SIP/2.0 {status}"),
        &format!("{cseq} INVITE"),
        body,
    );
    b.udp(t, b_sip, a_sip, response.as_bytes());
    let ack = sip(&format!("ACK {URI} SIP/2.0"), &format!("{cseq} ACK"), None);
    b.udp(t + 10 * MS, a_sip, b_sip, ack.as_bytes());
    t + 10 * MS
}

/// INVITE with `offer`, 200 OK with `answer`, ACK, from `t`; returns the time after them.
pub fn answered_call(b: &mut PcapBuilder, t: i64, offer: &str, answer_sdp: &str, cseq: u32) -> i64 {
    invite(b, t, offer, cseq);
    answer(b, t + 20 * MS, "200 OK", cseq, Some(answer_sdp))
}

/// BYE at `t`.
pub fn bye(b: &mut PcapBuilder, t: i64, cseq: u32) {
    let (a_sip, b_sip) = sip_addrs();
    let bye = sip(&format!("BYE {URI} SIP/2.0"), &format!("{cseq} BYE"), None);
    b.udp(t, a_sip, b_sip, bye.as_bytes());
    let ok = sip("SIP/2.0 200 OK", &format!("{cseq} BYE"), None);
    b.udp(t + 10 * MS, b_sip, a_sip, ok.as_bytes());
}

/// PCMA both ways every 20 ms from `t` + 20 ms, the packets numbered `seqs` (sequence numbers
/// from 100 up, timestamps in step); `directions` picks the caller's (0), the callee's (1) or
/// both. Returns the time of the last tick.
pub fn audio(b: &mut PcapBuilder, mut t: i64, seqs: Range<u16>, directions: &[usize]) -> i64 {
    let (a, z) = (addr(A_MEDIA), addr(B_MEDIA));
    let mut rtp = Vec::new();
    for n in seqs {
        t += 20 * MS;
        for &dir in directions {
            let (src, dst, ssrc) = if dir == 0 {
                (a, z, A_SSRC)
            } else {
                (z, a, B_SSRC)
            };
            rtp.clear();
            write_rtp(
                &mut rtp,
                8,
                n == 0,
                100 + n,
                160 * u32::from(n),
                ssrc,
                160,
                0xd5,
            );
            b.udp(t + dir as i64 * MS, src, dst, &rtp);
        }
    }
    t
}

/// A fax session's UDPTL packets from `t` between the caller's address `a` and the callee's
/// `z`; returns the time of the last.
pub fn fax(
    b: &mut PcapBuilder,
    t: i64,
    packets: &[FaxPacket],
    (a, z): (SocketAddr, SocketAddr),
) -> i64 {
    for p in packets {
        let (src, dst) = if p.from_caller { (a, z) } else { (z, a) };
        b.udp(t + p.at_ns, src, dst, &p.udptl);
    }
    t + packets.last().map_or(0, |p| p.at_ns)
}
