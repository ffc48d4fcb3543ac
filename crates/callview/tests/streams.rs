//! Hand-built pcaps whose every packet is known: audio placed by RTP timestamp across the
//! 32-bit wrap, with loss, reordering and a duplicate that differs; comfort noise and events
//! as silence; streams mixed on one timeline with saturation; codecs that cannot be played and
//! packets cut short; RTCP report blocks on the streams they report on.

mod common;

use std::net::SocketAddr;

use callview::{AudioSelect, CallViewError, Limits};
use common::wav_samples;
use monitor::synth::packet::{write_ethernet_udp, write_rtp};

/// A classic pcap (µs, Ethernet) written by hand, so that a record's wire length can exceed
/// what it holds.
struct Pcap {
    bytes: Vec<u8>,
    frame: Vec<u8>,
}

impl Pcap {
    fn new() -> Pcap {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        bytes.extend_from_slice(&2u16.to_le_bytes());
        bytes.extend_from_slice(&4u16.to_le_bytes());
        bytes.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(&65_535u32.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        Pcap {
            bytes,
            frame: Vec::new(),
        }
    }

    /// One UDP datagram at `t_us` µs after an arbitrary epoch, cut to `keep` bytes of frame.
    fn udp_cut(&mut self, t_us: u64, src: &str, dst: &str, payload: &[u8], keep: Option<usize>) {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        self.frame.clear();
        write_ethernet_udp(&mut self.frame, src, dst, payload);
        let t = 1_700_000_000_000_000 + t_us;
        let incl = keep.unwrap_or(self.frame.len()).min(self.frame.len());
        self.bytes
            .extend_from_slice(&((t / 1_000_000) as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&((t % 1_000_000) as u32).to_le_bytes());
        self.bytes.extend_from_slice(&(incl as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&(self.frame.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(&self.frame[..incl]);
    }

    fn udp(&mut self, t_us: u64, src: &str, dst: &str, payload: &[u8]) {
        self.udp_cut(t_us, src, dst, payload, None);
    }

    /// A whole Ethernet frame at `t_us`.
    fn frame(&mut self, t_us: u64, frame: &[u8]) {
        let t = 1_700_000_000_000_000 + t_us;
        for v in [
            t / 1_000_000,
            t % 1_000_000,
            frame.len() as u64,
            frame.len() as u64,
        ] {
            self.bytes.extend_from_slice(&(v as u32).to_le_bytes());
        }
        self.bytes.extend_from_slice(frame);
    }

    /// An RTP packet whose payload is `len` bytes of `fill`.
    #[allow(clippy::too_many_arguments)]
    fn rtp(
        &mut self,
        t_us: u64,
        src: &str,
        dst: &str,
        pt: u8,
        seq: u16,
        ts: u32,
        ssrc: u32,
        len: usize,
        fill: u8,
    ) {
        let mut p = Vec::new();
        write_rtp(&mut p, pt, false, seq, ts, ssrc, len, fill);
        self.udp(t_us, src, dst, &p);
    }
}

const A: &str = "10.0.0.1:4000";
const B: &str = "10.0.0.2:5000";

/// G.711 decoded by the spec's rules, for the checks (µ-law 0x80 is its largest positive step,
/// 0xFF zero; A-law 0xD5 is +8, 0xAA the largest positive step).
const ULAW_0X80: i16 = 32124;
const ALAW_0XD5: i16 = 8;
const ALAW_0XAA: i16 = 32256;

#[test]
fn audio_is_placed_by_timestamp_across_the_wrap() {
    let mut p = Pcap::new();
    let ts0 = u32::MAX - 800;
    // 20 packets of 20 ms; the fill says which packet it is (PCMU code 0x80 + k, the k-th
    // step down from the largest). Packet 5 is lost, 7 and 8 arrive swapped, 10 comes twice,
    // the copy with another fill (the first copy wins).
    let mut order: Vec<u32> = (0..20).filter(|&k| k != 5).collect();
    order.swap(6, 7);
    let mut t = 0;
    for &k in &order {
        t += 20_000;
        let ts = ts0.wrapping_add(k * 160);
        p.rtp(t, A, B, 0, 100 + k as u16, ts, 0x1234, 160, 0x80 + k as u8);
        if k == 10 {
            p.rtp(t + 100, A, B, 0, 110, ts, 0x1234, 160, 0x00);
        }
    }
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    assert_eq!(view.streams.len(), 1);
    let s = &view.streams[0];
    assert_eq!(s.figures.packets, 20);
    assert_eq!(s.figures.duplicates, 1);
    let audio = s.audio.as_ref().unwrap();
    assert_eq!((audio.codec, audio.seconds), ("PCMU", 0.4));
    assert!(!audio.payload_complete, "packet 5 is lost");
    let (_, samples) =
        wav_samples(&callview::wav(&p.bytes, AudioSelect::Stream(0), &Limits::default()).unwrap());
    assert_eq!(samples.len(), 20 * 160);
    for k in 0..20usize {
        let want = if k == 5 {
            0
        } else {
            // µ-law steps down from 0x80: decode 0x80 + k with the spec's rule.
            let v = !(0x80u8 + k as u8);
            let (seg, step) = (i32::from((v >> 4) & 7), i32::from(v & 0x0f));
            let mag = (((2 * step + 33) << seg) - 33) << 2;
            mag as i16
        };
        assert!(
            samples[k * 160..(k + 1) * 160].iter().all(|&v| v == want),
            "packet {k}: {} against {want}",
            samples[k * 160]
        );
    }
    assert_eq!(samples[0], ULAW_0X80);
    // The seconds: 0.4 s of stream in one interval.
    assert_eq!(s.intervals.len(), 1);
    assert_eq!(s.intervals[0].packets, 20);
}

#[test]
fn comfort_noise_and_events_are_silence_that_lasts() {
    let mut p = Pcap::new();
    // PCMA, then two comfort-noise packets (a pause of 100 ms), PCMA again, an RFC 4733 event
    // (without SDP: just another payload type), and comfort noise last.
    let mut ts = 1000u32;
    let mut seq = 1u16;
    let mut t = 0;
    let mut send = |p: &mut Pcap, pt: u8, len: usize, advance: u32| {
        t += 20_000;
        p.rtp(t, A, B, pt, seq, ts, 7, len, 0xd5);
        seq += 1;
        ts += advance;
    };
    for _ in 0..5 {
        send(&mut p, 8, 160, 160);
    }
    send(&mut p, 13, 1, 400);
    send(&mut p, 13, 1, 400);
    for _ in 0..5 {
        send(&mut p, 8, 160, 160);
    }
    send(&mut p, 101, 4, 160);
    send(&mut p, 13, 1, 160);
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    let s = &view.streams[0];
    // Type 101 with no SDP naming it is tshark's default events type, `rtpevent`.
    assert_eq!(s.figures.payload, "g711A, CN, rtpevent");
    let (_, samples) =
        wav_samples(&callview::wav(&p.bytes, AudioSelect::Stream(0), &Limits::default()).unwrap());
    // 5 × 160, 2 × 400 of pause, 5 × 160, the event's 160, then the last comfort noise packet
    // counted as one packet of the stream's size.
    assert_eq!(samples.len(), 800 + 800 + 800 + 160 + 160);
    let heard: Vec<bool> = samples.iter().map(|&v| v == ALAW_0XD5).collect();
    assert!(heard[..800].iter().all(|&h| h));
    assert!(heard[800..1600].iter().all(|&h| !h));
    assert!(heard[1600..2400].iter().all(|&h| h));
    assert!(samples[2400..].iter().all(|&v| v == 0));
    assert_eq!(
        s.audio.as_ref().unwrap().seconds,
        samples.len() as f64 / 8000.0
    );
}

#[test]
fn streams_are_mixed_on_one_timeline_with_saturation() {
    let mut p = Pcap::new();
    // A from 0 s to 0.2 s at the largest A-law step; B from 0.1 s to 0.3 s, the same; C from
    // 1 s, quiet. Where A and B overlap the sum saturates.
    for k in 0..10u32 {
        p.rtp(
            k as u64 * 20_000,
            A,
            B,
            8,
            k as u16,
            5000 + k * 160,
            1,
            160,
            0xaa,
        );
    }
    for k in 0..10u32 {
        p.rtp(
            100_000 + k as u64 * 20_000,
            B,
            A,
            8,
            k as u16,
            90_000 + k * 160,
            2,
            160,
            0xaa,
        );
    }
    for k in 0..10u32 {
        p.rtp(
            1_000_000 + k as u64 * 20_000,
            "10.0.0.3:6000",
            A,
            8,
            k as u16,
            k * 160,
            3,
            160,
            0xd5,
        );
    }
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    assert_eq!(view.streams.len(), 3);
    let wav = callview::wav(&p.bytes, AudioSelect::Mixed, &Limits::default()).unwrap();
    let (_, mixed) = wav_samples(&wav);
    assert_eq!(mixed.len(), 8000 + 1600, "from A's start to C's end");
    assert!(mixed[..800].iter().all(|&v| v == ALAW_0XAA));
    assert!(mixed[800..1600].iter().all(|&v| v == i16::MAX), "saturated");
    assert!(mixed[1600..2400].iter().all(|&v| v == ALAW_0XAA));
    assert!(mixed[2400..8000].iter().all(|&v| v == 0));
    assert!(mixed[8000..].iter().all(|&v| v == ALAW_0XD5));
    // One stream alone is its own length.
    let (_, c) =
        wav_samples(&callview::wav(&p.bytes, AudioSelect::Stream(2), &Limits::default()).unwrap());
    assert_eq!(c.len(), 1600);
    // Longer than allowed: refused, naming the limit.
    let short = Limits {
        audio_seconds_max: 1,
        ..Limits::default()
    };
    let e = callview::wav(&p.bytes, AudioSelect::Mixed, &short).unwrap_err();
    assert!(
        matches!(
            e,
            CallViewError::AudioTooLong {
                seconds: 1,
                max_s: 1
            }
        ),
        "{e}"
    );
}

#[test]
fn what_cannot_be_played_says_why() {
    let mut p = Pcap::new();
    for k in 0..5u32 {
        let t = k as u64 * 20_000;
        p.rtp(t, A, B, 18, k as u16, k * 160, 1, 20, 0x11);
        p.rtp(t, B, A, 96, k as u16, k * 160, 2, 30, 0x11);
        // PCMA whose last two packets were captured short (a snapshot length).
        let mut rtp = Vec::new();
        write_rtp(&mut rtp, 8, false, k as u16, k * 160, 3, 160, 0xd5);
        let keep = (k >= 3).then_some(14 + 20 + 8 + 12 + 40);
        p.udp_cut(t, "10.0.0.3:6000", B, &rtp, keep);
    }
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    let notes: Vec<&str> = view
        .streams
        .iter()
        .map(|s| s.audio_note.as_deref().unwrap())
        .collect();
    assert_eq!(
        notes,
        [
            "G.729: not decodable here",
            "payload type 96: not decodable here",
            "2 of 5 packets were captured without their whole payload (cut at the snapshot length): not decodable here"
        ]
    );
    // The cut packets still count in the figures.
    assert_eq!(view.streams[2].figures.packets, 5);
    for (i, note) in notes.iter().enumerate() {
        let e = callview::wav(&p.bytes, AudioSelect::Stream(i), &Limits::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("stream {i} of the call's pcap cannot be played: {note}")
        );
    }
    let e = callview::wav(&p.bytes, AudioSelect::Mixed, &Limits::default()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("no stream of the call's pcap can be played (stream 0: G.729"),
        "{e}"
    );
    let empty = Pcap::new();
    let e = callview::wav(&empty.bytes, AudioSelect::Mixed, &Limits::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no stream of the call's pcap can be played: it has no RTP stream"
    );
}

/// An RTCP receiver report from `reporter` with one block per (ssrc, fraction, cumulative,
/// highest, jitter).
fn receiver_report(reporter: u32, blocks: &[(u32, u8, i32, u32, u32)]) -> Vec<u8> {
    let words = 1 + 6 * blocks.len();
    let mut b = vec![0x80 | blocks.len() as u8, 201];
    b.extend_from_slice(&(words as u16).to_be_bytes());
    b.extend_from_slice(&reporter.to_be_bytes());
    for &(ssrc, fraction, cumulative, highest, jitter) in blocks {
        b.extend_from_slice(&ssrc.to_be_bytes());
        b.push(fraction);
        b.extend_from_slice(&cumulative.to_be_bytes()[1..]);
        b.extend_from_slice(&highest.to_be_bytes());
        b.extend_from_slice(&jitter.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
    }
    b
}

#[test]
fn rtcp_reports_go_to_the_streams_they_report_on() {
    let mut p = Pcap::new();
    for k in 0..100u32 {
        let t = k as u64 * 20_000;
        p.rtp(t, A, B, 8, k as u16, k * 160, 0xA, 160, 0xd5);
        p.rtp(t + 5_000, B, A, 0, k as u16, k * 160, 0xB, 160, 0xff);
        if k % 40 == 39 {
            // B reports on A's stream (and on an SSRC nobody sends); A on B's.
            p.udp(
                t + 10_000,
                "10.0.0.2:5001",
                "10.0.0.1:4001",
                &receiver_report(0xB, &[(0xA, 64, k as i32, 1000 + k, 80), (0xC, 0, 0, 0, 0)]),
            );
            p.udp(
                t + 11_000,
                "10.0.0.1:4001",
                "10.0.0.2:5001",
                &receiver_report(0xA, &[(0xB, 0, -1, 7, 160)]),
            );
        }
    }
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    assert_eq!(view.streams.len(), 2);
    assert_eq!(view.rtcp_unmatched, 2);
    let (a, b) = (&view.streams[0], &view.streams[1]);
    assert_eq!(a.key.ssrc, 0xA);
    assert_eq!(a.rtcp.len(), 2);
    assert_eq!(a.rtcp.len() as u32, a.figures.rtcp_reports);
    let last = &a.rtcp[1];
    assert_eq!(last.ts_us, 1_700_000_000_000_000 + 79 * 20_000 + 10_000);
    assert_eq!(last.from, "10.0.0.2:5001");
    assert_eq!(last.reporter_ssrc, 0xB);
    assert_eq!(
        (
            last.fraction_lost_pct,
            last.cumulative_lost,
            last.highest_seq
        ),
        (25.0, 79, 1079)
    );
    assert_eq!(last.jitter_ms, Some(10.0));
    assert_eq!(a.figures.rtcp_fraction_lost_pct, Some(25.0));
    assert_eq!(a.figures.rtcp_jitter_ms, Some(10.0));
    assert_eq!(b.rtcp.len(), 2);
    assert_eq!(
        (b.rtcp[0].cumulative_lost, b.rtcp[0].jitter_ms),
        (-1, Some(20.0))
    );
    // Kept to a limit, the rest counted.
    let one = Limits {
        rtcp_reports_max: 1,
        ..Limits::default()
    };
    let view = callview::analyze(&p.bytes, &one).unwrap();
    assert_eq!(
        (view.streams[0].rtcp.len(), view.streams[0].rtcp_left_out),
        (1, 1)
    );
}

#[test]
fn pcapng_and_gzip_read_as_the_monitor_reads_them() {
    // The same frames as a classic pcap, through the monitor's reader (pcapng is written with
    // editcap when it is installed; gzip with flate2's reader on the monitor's side).
    let mut p = Pcap::new();
    for k in 0..60u32 {
        p.rtp(k as u64 * 20_000, A, B, 8, k as u16, k * 160, 9, 160, 0xd5);
    }
    let classic = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.pcap");
    std::fs::write(&path, &p.bytes).unwrap();
    let gz = std::process::Command::new("gzip")
        .arg("-k")
        .arg(&path)
        .status();
    if gz.is_ok_and(|s| s.success()) {
        let bytes = std::fs::read(dir.path().join("in.pcap.gz")).unwrap();
        let view = callview::analyze(&bytes, &Limits::default()).unwrap();
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::to_value(&classic).unwrap()
        );
        let wav = callview::wav(&bytes, AudioSelect::Stream(0), &Limits::default()).unwrap();
        assert_eq!(
            wav,
            callview::wav(&p.bytes, AudioSelect::Stream(0), &Limits::default()).unwrap()
        );
    } else {
        test_env::skip("the gzip part: `gzip` did not run");
    }
    let ng = dir.path().join("in.pcapng");
    match std::process::Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(&path)
        .arg(&ng)
        .status()
    {
        Ok(s) if s.success() => {
            let bytes = std::fs::read(&ng).unwrap();
            let view = callview::analyze(&bytes, &Limits::default()).unwrap();
            assert_eq!(
                serde_json::to_value(&view).unwrap(),
                serde_json::to_value(&classic).unwrap()
            );
        }
        _ => test_env::skip("the pcapng part: editcap (Debian: wireshark-common) is not installed"),
    }
}

#[test]
fn a_second_never_loses_a_negative_number_of_packets() {
    let mut p = Pcap::new();
    // Two seconds of 20 ms packets. Packet 48 comes 70 ms late, in the next second, after
    // packet 49 showed its gap; packet 60 comes twice. Wireshark's running `lost` falls by one
    // at each: counted per second that way, the second second would lose -2 packets.
    let mut sent: Vec<(u64, u16)> = (0..100u16)
        .map(|k| (u64::from(k) * 20_000 + 1_000, k))
        .collect();
    sent[48].0 += 70_000;
    sent.push((60 * 20_000 + 1_500, 60));
    sent.sort();
    for &(t, k) in &sent {
        p.rtp(t, A, B, 8, 1000 + k, u32::from(k) * 160, 0x77, 160, 0xD5);
    }
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    let s = &view.streams[0];
    assert_eq!((s.figures.duplicates, s.figures.out_of_order), (1, 1));
    assert_eq!(
        s.figures.lost, -1,
        "Wireshark's lost counts the copy as received"
    );
    let lost: Vec<i64> = s.intervals.iter().map(|i| i.lost).collect();
    assert_eq!(lost, [1, 0], "the gap when it showed, nothing taken back");
    common::assert_seconds_lost(s, "late and duplicated");
}

/// A SIP message of one dialog from `from` to `to`, without a body.
fn sip_message(start: &str, cseq: &str, from: &str, to: &str) -> Vec<u8> {
    format!(
        "{start}\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-1\r\nFrom: <sip:1001@{from}>;tag=a\r\n\
         To: <sip:1002@{to}>\r\nCall-ID: resend-1@test\r\nCSeq: {cseq}\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

#[test]
fn resent_requests_and_responses_are_marked_as_wireshark_marks_them() {
    let (a, b) = ("10.0.0.1:5060", "10.0.0.2:5060");
    let mut p = Pcap::new();
    let messages = [
        (a, b, "INVITE sip:1002@10.0.0.2 SIP/2.0", "1 INVITE"),
        (a, b, "INVITE sip:1002@10.0.0.2 SIP/2.0", "1 INVITE"),
        (b, a, "SIP/2.0 100 Trying", "1 INVITE"),
        (b, a, "SIP/2.0 200 OK", "1 INVITE"),
        (b, a, "SIP/2.0 200 OK", "1 INVITE"),
        (a, b, "ACK sip:1002@10.0.0.2 SIP/2.0", "1 ACK"),
        (a, b, "ACK sip:1002@10.0.0.2 SIP/2.0", "1 ACK"),
        (b, a, "BYE sip:1001@10.0.0.1 SIP/2.0", "2 BYE"),
        (b, a, "BYE sip:1001@10.0.0.1 SIP/2.0", "2 BYE"),
        (a, b, "SIP/2.0 200 OK", "2 BYE"),
    ];
    for (k, (from, to, start, cseq)) in messages.iter().enumerate() {
        p.udp(
            k as u64 * 500_000,
            from,
            to,
            &sip_message(start, cseq, from, to),
        );
    }
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    let marks: Vec<bool> = view.ladder.iter().map(|e| e.resent).collect();
    assert_eq!(
        marks,
        [
            false, true, false, false, true, false, false, false, true, false
        ],
        "a resent ACK is no retransmission"
    );
    // tshark's reading of the same packets (sip.resend), where it runs.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resend.pcap");
    std::fs::write(&path, &p.bytes).unwrap();
    match std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-Y", "sip", "-T", "fields", "-e", "sip.resend"])
        .output()
    {
        Ok(out) if out.status.success() => {
            let theirs: Vec<bool> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.trim() == "1" || l.trim() == "True")
                .collect();
            assert_eq!(marks, theirs, "tshark's sip.resend");
        }
        _ => test_env::skip("the tshark part: tshark (Debian: tshark) did not run"),
    }
}

#[test]
fn the_ladder_names_the_transport_of_each_message() {
    use monitor::sctp::build as sctp;
    use monitor::synth::packet::{ethernet, ipv4};
    let (a, b) = ("10.0.0.1:5060", "10.0.0.2:5060");
    let mut p = Pcap::new();
    let over_sctp = |tsn: u32, from: &str, to: &str, msg: &[u8]| {
        let (from, to): (SocketAddr, SocketAddr) = (from.parse().unwrap(), to.parse().unwrap());
        let chunks = sctp::message_chunks(tsn, 0, tsn as u16, msg, usize::MAX);
        let packet = sctp::packet(5060, 5060, 0xabcd, &chunks);
        ethernet(0x0800, &ipv4(from.ip(), to.ip(), 132, &packet))
    };
    let invite = sip_message("INVITE sip:1002@10.0.0.2 SIP/2.0", "1 INVITE", a, b);
    p.frame(0, &over_sctp(1, a, b, &invite));
    let ok = sip_message("SIP/2.0 200 OK", "1 INVITE", b, a);
    p.frame(100_000, &over_sctp(1, b, a, &ok));
    let bye = sip_message("BYE sip:1002@10.0.0.2 SIP/2.0", "2 BYE", a, b);
    p.udp(200_000, a, b, &bye);
    let view = callview::analyze(&p.bytes, &Limits::default()).unwrap();
    let transports: Vec<&str> = view.ladder.iter().map(|e| e.transport).collect();
    assert_eq!(transports, ["SCTP", "SCTP", "UDP"]);
}
