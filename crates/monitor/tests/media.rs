//! Media beyond one voice stream, as the SDP announces it.
//!
//! A fax call: audio first, then a re-INVITE moves the same ports to T.38 (UDPTL). The audio
//! streams count only the audio, as tshark's do; the UDPTL packets are T.38 flows of the call,
//! never RTP, even when their first byte looks like an RTP header. A video call: its video
//! stream is marked and kept out of MOS.

mod common;

use common::calls::*;
use std::net::SocketAddr;
use std::path::Path;

use monitor::rtp::Media;
use monitor::synth::PcapBuilder;
use monitor::synth::fax::{FaxPlan, FaxTruth, fax_session};
use monitor::synth::packet::write_rtp;
use monitor::t38::{FaxResult, IfpType};
use monitor::{Monitor, MonitorConfig};

const AUDIO_PACKETS: u16 = 50;
/// Sequence numbers of the two UDPTL directions: both cross into values whose first byte
/// reads as RTP version 2 (0x80-0xBF), so a monitor that ignores the SDP takes them for RTP.
const FAX_SEQ: [u16; 2] = [0x7ff0, 0xbff0];

/// The fax: two pages, completed, each packet carrying the one before as redundancy.
fn fax_plan() -> FaxPlan {
    FaxPlan {
        seq0: FAX_SEQ,
        ..FaxPlan::default()
    }
}

/// The fax call: audio, a re-INVITE to T.38 on the same ports, the T.30 session, BYE.
fn write_fax_call(path: &Path) -> FaxTruth {
    let (a_media, b_media) = (addr(A_MEDIA), addr(B_MEDIA));
    let mut b = PcapBuilder::create(path).unwrap();
    let t = answered_call(
        &mut b,
        1_700_000_000_000_000_000,
        &audio_sdp(true),
        &audio_sdp(false),
        1,
    );
    let t = audio(&mut b, t, 0..AUDIO_PACKETS, &[0, 1]);
    let t = answered_call(&mut b, t + 100_000_000, &fax_sdp(true), &fax_sdp(false), 2);
    let (packets, truth) = fax_session(&fax_plan());
    let t = fax(&mut b, t, &packets, (a_media, b_media));
    bye(&mut b, t + 100_000_000, 3);
    b.finish().unwrap();
    truth
}

fn analyse(path: &Path, workers: usize) -> monitor::Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).unwrap();
    m.finish()
}

#[test]
fn a_reinvite_to_t38_ends_the_audio_and_the_udptl_packets_are_a_fax_not_rtp() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fax.pcap");
    let truth = write_fax_call(&path);
    for workers in [1, 2] {
        let a = analyse(&path, workers);
        assert_eq!(a.calls.len(), 1, "{workers} worker(s)");
        let call = &a.calls[0];
        assert!(call.is_fax());
        assert_eq!(call.dialog.reinvites, 1);
        // The audio streams hold the audio only.
        let packets: Vec<u64> = call.streams.iter().map(|s| s.stream.packets).collect();
        assert_eq!(packets, [50, 50], "{workers} worker(s)");
        assert!(a.streams.is_empty(), "no stray RTP stream: {:?}", a.streams);
        // Two T.38 flows, one per direction, each whole, with the T.30 frames sent.
        assert_eq!(call.t38.len(), 2);
        for f in &call.t38 {
            let d = usize::from(f.flow.src.port() != 4000);
            assert_eq!(
                (f.flow.packets, f.flow.lost, f.flow.duplicates),
                (truth.packets[d], 0, 0)
            );
            let frames: Vec<u8> = f.flow.t30.iter().map(|t| t.fcf).collect();
            assert_eq!(frames, truth.frames[d]);
            assert_eq!(f.flow.redundant, truth.packets[d] - 1, "all but the first");
        }
        let fax = call.fax().unwrap();
        assert_eq!(fax.pages, Some(truth.pages));
        assert_eq!(fax.result, Some(FaxResult::Completed));
        assert_eq!(fax.modulation, Some(truth.modulation));
        assert_eq!(fax.start_ns, call.t38[0].flow.first_ns);
        assert_eq!(
            a.counters.udptl_packets,
            truth.packets[0] + truth.packets[1]
        );
        assert_eq!(a.counters.rtp_packets, 2 * u64::from(AUDIO_PACKETS));
    }
}

#[test]
fn tshark_counts_the_same_audio_packets() {
    if !common::have_tshark() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fax.pcap");
    write_fax_call(&path);
    let theirs = common::tshark_rtp_streams(&path, &[]);
    let mut counts: Vec<u64> = theirs.iter().map(|s| s.packets).collect();
    counts.sort();
    assert_eq!(counts, [50, 50], "tshark's streams: {theirs:?}");
    let a = analyse(&path, 1);
    let ours: Vec<&monitor::StreamRecord> = a.all_streams().collect();
    common::assert_streams_match("fax.pcap", &ours, &theirs);
    // The T.38 flows as tshark decodes them: packets, first and last sequence numbers, and the
    // IFP types, per source port.
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args([
            "-Y",
            "t38",
            "-T",
            "fields",
            "-e",
            "udp.srcport",
            "-e",
            "t38.seq_number",
        ])
        .args(["-e", "t38.t30_indicator", "-e", "t38.t30_data"])
        .args([
            "-e",
            "t30.FacsimileControl",
            "-e",
            "t38.secondary_ifp_packets",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for f in &a.calls[0].t38 {
        let port = f.flow.src.port().to_string();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split('\t').collect::<Vec<_>>())
            .filter(|r| r[0] == port)
            .collect();
        assert_eq!(
            rows.len() as u64,
            f.flow.packets,
            "tshark's T.38 packets from {port}"
        );
        assert_eq!(rows[0][1], f.flow.first_seq.to_string());
        assert_eq!(rows[rows.len() - 1][1], f.flow.highest_seq().to_string());
        // The IFP types in order of first appearance; tshark gives the enumerations' numbers.
        let mut types = Vec::new();
        for r in &rows {
            // A packet's own IFP comes first; its secondary copies follow.
            let first = |f: &str| f.split(',').next().unwrap_or("").to_owned();
            let t = match (first(r[2]).as_str(), first(r[3]).as_str()) {
                ("", "") => continue,
                ("", d) => IfpType::Data(d.parse().unwrap()),
                (i, _) => IfpType::Indicator(i.parse().unwrap()),
            };
            if !types.contains(&t) {
                types.push(t);
            }
        }
        assert_eq!(f.flow.types, types, "IFP types from {port}");
        // The T.30 control frames tshark puts back together, in order.
        let frames: Vec<u8> = rows
            .iter()
            .filter(|r| !r[4].is_empty())
            .map(|r| r[4].parse().unwrap())
            .collect();
        let ours: Vec<u8> = f.flow.t30.iter().map(|t| t.fcf).collect();
        assert_eq!(ours, frames, "T.30 frames from {port}");
        // Redundancy: tshark's count of secondary IFP packets per packet.
        let redundant = rows
            .iter()
            .filter(|r| !r[5].is_empty() && r[5] != "0")
            .count();
        assert_eq!(
            f.flow.redundant, redundant as u64,
            "redundant packets from {port}"
        );
    }
}

#[test]
fn a_video_stream_is_marked_and_has_no_mos() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("video.pcap");
    let offer = sdp(
        "10.0.0.1",
        "m=audio 4000 RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\nm=video 4002 RTP/AVP 96\r\na=rtpmap:96 H264/90000",
    );
    let answer = sdp(
        "10.0.0.2",
        "m=audio 5000 RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\nm=video 5002 RTP/AVP 96\r\na=rtpmap:96 H264/90000",
    );
    let mut b = PcapBuilder::create(&path).unwrap();
    let mut t = answered_call(&mut b, 1_700_000_000_000_000_000, &offer, &answer, 1);
    let mut rtp = Vec::new();
    for n in 0..30u16 {
        t += 20_000_000;
        rtp.clear();
        write_rtp(&mut rtp, 8, n == 0, n, 160 * u32::from(n), 0xa0, 160, 0xd5);
        b.udp(t, addr("10.0.0.1:4000"), addr("10.0.0.2:5000"), &rtp);
        rtp.clear();
        write_rtp(
            &mut rtp,
            96,
            n == 0,
            n,
            3000 * u32::from(n),
            0xb0,
            900,
            0x11,
        );
        b.udp(t, addr("10.0.0.1:4002"), addr("10.0.0.2:5002"), &rtp);
    }
    bye(&mut b, t + 50_000_000, 2);
    b.finish().unwrap();
    let a = analyse(&path, 1);
    let call = &a.calls[0];
    let by_media = |m: Media| call.streams.iter().find(|s| s.stream.media == m).unwrap();
    assert!(by_media(Media::Audio).stream.mos().is_some());
    let video = by_media(Media::Video);
    assert_eq!((video.stream.packets, video.stream.mos()), (30, None));
    assert!(!call.is_fax() && call.streams.iter().all(|s| !s.stream.encrypted));
}

/// One RFC 4733 event of `ticks` packets every 20 ms at `t`: durations grow by 160, the end
/// packet is sent three times (as RFC 4733 2.5.1.4 asks).
fn dtmf_event(
    b: &mut PcapBuilder,
    t: i64,
    (src, dst): (SocketAddr, SocketAddr),
    (event, ts, seq): (u8, u32, u16),
    ticks: u16,
) -> u16 {
    let mut seq = seq;
    let mut rtp = Vec::new();
    for n in 1..=ticks + 2 {
        let end = n >= ticks;
        let duration = 160 * n.min(ticks);
        rtp.clear();
        write_rtp(&mut rtp, 101, n == 1, seq, ts, 0xd7, 0, 0);
        rtp.extend_from_slice(&[event, if end { 0x80 | 10 } else { 10 }]);
        rtp.extend_from_slice(&duration.to_be_bytes());
        b.udp(t + i64::from(n) * 20_000_000, src, dst, &rtp);
        seq = seq.wrapping_add(1);
    }
    seq
}

/// An SDP offering PCMA with telephone events on 101.
fn audio_with_events(ip: &str, port: u16) -> String {
    sdp(
        ip,
        &format!(
            "m=audio {port} RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000"
        ),
    )
}

fn write_dtmf_call(path: &Path) {
    let m = audio_with_events;
    let mut b = PcapBuilder::create(path).unwrap();
    let t = answered_call(
        &mut b,
        1_700_000_000_000_000_000,
        &m("10.0.0.1", 4000),
        &m("10.0.0.2", 5000),
        1,
    );
    let flow = (addr("10.0.0.1:4000"), addr("10.0.0.2:5000"));
    // Digits 1, 2, # (event 11): 5, 4 and 6 packets long, plus the two end retransmissions.
    let mut seq = 1;
    for (i, (event, ticks)) in [(1u8, 5u16), (2, 4), (11, 6)].into_iter().enumerate() {
        let start = t + i as i64 * 500_000_000;
        seq = dtmf_event(
            &mut b,
            start,
            flow,
            (event, 8000 * (i as u32 + 1), seq),
            ticks,
        );
    }
    bye(&mut b, t + 2_000_000_000, 2);
    b.finish().unwrap();
}

#[test]
fn keypad_digits_are_events_counted_once_as_tshark_decodes_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dtmf.pcap");
    write_dtmf_call(&path);
    let a = analyse(&path, 1);
    let events: Vec<_> = a
        .all_streams()
        .flat_map(|s| s.stream.dtmf.clone())
        .collect();
    let ours: Vec<(String, u16, bool)> = events
        .iter()
        .map(|e| (e.digit().into_owned(), e.duration, e.ended))
        .collect();
    assert_eq!(
        ours,
        [
            ("1".to_string(), 800, true),
            ("2".to_string(), 640, true),
            ("#".to_string(), 960, true)
        ]
    );
    assert!(events.iter().all(|e| e.volume == 10));
    if !common::have_tshark() {
        return;
    }
    // tshark's rtpevent decode, packet by packet: the last (event, duration) of each timestamp,
    // and the capture time of its first packet (the event's start).
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args(["-Y", "rtpevent", "-T", "fields", "-e", "rtp.timestamp"])
        .args(["-e", "rtpevent.event_id", "-e", "rtpevent.duration"])
        .args(["-e", "rtpevent.end_of_event", "-e", "frame.time_epoch"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let epoch_ns = |s: &str| -> i64 {
        let (secs, frac) = s.split_once('.').unwrap_or((s, "0"));
        let frac = format!("{frac:0<9}");
        secs.parse::<i64>().unwrap() * 1_000_000_000 + frac[..9].parse::<i64>().unwrap()
    };
    let mut theirs: Vec<(String, u16, u16, bool, i64)> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (ts, ev, dur) = (
            f[0].to_string(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
        );
        let end = f[3] == "1" || f[3] == "True";
        match theirs.last_mut() {
            Some(last) if last.0 == ts => {
                last.2 = last.2.max(dur);
                last.3 |= end;
            }
            _ => theirs.push((ts, ev, dur, end, epoch_ns(f[4]))),
        }
    }
    let theirs: Vec<(u16, u16, bool, i64)> = theirs.iter().map(|t| (t.1, t.2, t.3, t.4)).collect();
    let ours: Vec<(u16, u16, bool, i64)> = events
        .iter()
        .map(|e| (u16::from(e.event), e.duration, e.ended, e.start_ns))
        .collect();
    assert_eq!(ours, theirs, "tshark: {text}");
}

/// Voice with a digit in the middle, as phones send it: the same SSRC and sequence, the event's
/// packets in place of voice (its timestamp fixed at its start, the end sent three times), then
/// voice again with its clock moved on. Jitter, deltas and loss must be tshark's, wherever tshark
/// leaves the event's packets out.
fn write_voice_with_digit(path: &Path) {
    let m = audio_with_events;
    let mut b = PcapBuilder::create(path).unwrap();
    let t0 = answered_call(
        &mut b,
        1_700_000_000_000_000_000,
        &m("10.0.0.1", 4000),
        &m("10.0.0.2", 5000),
        1,
    );
    let (src, dst) = (addr("10.0.0.1:4000"), addr("10.0.0.2:5000"));
    let mut rtp = Vec::new();
    let (mut seq, mut tick) = (1000u16, 0u32);
    // A little arrival jitter so that the figures are not all zero.
    let wobble = |n: u32| i64::from(n % 3) * 700_000;
    let voice = |b: &mut PcapBuilder, rtp: &mut Vec<u8>, seq: u16, tick: u32, marker: bool| {
        rtp.clear();
        write_rtp(rtp, 8, marker, seq, tick * 160, 0x5151, 160, 0xd5);
        b.udp(
            t0 + i64::from(tick) * 20_000_000 + wobble(tick),
            src,
            dst,
            rtp,
        );
    };
    for _ in 0..40 {
        voice(&mut b, &mut rtp, seq, tick, tick == 0);
        seq += 1;
        tick += 1;
    }
    // The digit 5: six 20 ms packets, then its end twice more.
    let event_ts = tick * 160;
    for n in 1..=8u32 {
        let end = n >= 6;
        rtp.clear();
        write_rtp(&mut rtp, 101, n == 1, seq, event_ts, 0x5151, 0, 0);
        rtp.extend_from_slice(&[5, if end { 0x80 | 10 } else { 10 }]);
        rtp.extend_from_slice(&((160 * n.min(6)) as u16).to_be_bytes());
        b.udp(
            t0 + i64::from(tick + n - 1) * 20_000_000 + wobble(n),
            src,
            dst,
            &rtp,
        );
        seq += 1;
    }
    tick += 8;
    for _ in 0..40 {
        voice(&mut b, &mut rtp, seq, tick, false);
        seq += 1;
        tick += 1;
    }
    bye(&mut b, t0 + i64::from(tick) * 20_000_000 + 100_000_000, 2);
    b.finish().unwrap();
}

#[test]
fn a_digit_inside_voice_leaves_jitter_and_delta_as_tshark_computes_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("voice-dtmf.pcap");
    write_voice_with_digit(&path);
    let a = analyse(&path, 1);
    let call = &a.calls[0];
    let digits: Vec<String> = call.dtmf().iter().map(|d| d.digit.to_string()).collect();
    assert_eq!(digits, ["5"]);
    assert_eq!(call.digits(), "5");
    if !common::have_tshark() {
        return;
    }
    let theirs = common::tshark_rtp_streams(&path, &[]);
    let ours: Vec<&monitor::StreamRecord> = a.all_streams().collect();
    common::assert_streams_match("voice-dtmf.pcap", &ours, &theirs);
}

/// Digits in SIP INFO: `application/dtmf-relay` (sent twice: a retransmission) and
/// `application/dtmf`, from either side.
#[test]
fn digits_sent_in_sip_info_are_the_call_s_digits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("info.pcap");
    let audio = |ip: &str, port: u16| {
        sdp(
            ip,
            &format!("m=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000"),
        )
    };
    let mut b = PcapBuilder::create(&path).unwrap();
    let t = answered_call(
        &mut b,
        1_700_000_000_000_000_000,
        &audio("10.0.0.1", 4000),
        &audio("10.0.0.2", 5000),
        1,
    );
    let (a_sip, b_sip) = (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"));
    let info = |cseq: u32, ct: &str, body: &str| {
        sip(
            &format!("INFO {URI} SIP/2.0"),
            &format!("{cseq} INFO"),
            None,
        )
        .replace(
            "Content-Length: 0\r\n\r\n",
            &format!(
                "Content-Type: {ct}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let relay = info(2, "application/dtmf-relay", "Signal=7\r\nDuration=250\r\n");
    b.udp(t + 100_000_000, a_sip, b_sip, relay.as_bytes());
    b.udp(t + 600_000_000, a_sip, b_sip, relay.as_bytes());
    let plain = info(3, "application/dtmf", "#");
    b.udp(t + 900_000_000, b_sip, a_sip, plain.as_bytes());
    bye(&mut b, t + 2_000_000_000, 4);
    b.finish().unwrap();
    let a = analyse(&path, 1);
    let call = &a.calls[0];
    let got: Vec<(String, Option<f64>, &str, String)> = call
        .dtmf()
        .iter()
        .map(|d| {
            (
                d.digit.to_string(),
                d.duration_ms,
                d.via.as_str(),
                d.src.to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("7".into(), Some(250.0), "sip-info", "10.0.0.1:5060".into()),
            ("#".into(), None, "sip-info", "10.0.0.2:5060".into()),
        ]
    );
    assert_eq!(call.digits(), "7#");
}

/// A call whose offer or answer is SRTP (`RTP/SAVP`, `RTP/SAVPF`, `UDP/TLS/RTP/SAVPF`) is
/// encrypted from its SDP alone, with none of its RTP captured; `RTP/AVP` both ways is not.
#[test]
fn an_srtp_offer_or_answer_makes_the_call_encrypted_without_its_media() {
    let dir = tempfile::tempdir().unwrap();
    let side = |ip: &str, port: u16, proto: &str| {
        sdp(
            ip,
            &format!("m=audio {port} {proto} 8\r\na=rtpmap:8 PCMA/8000"),
        )
    };
    for (offer, answer, encrypted) in [
        ("UDP/TLS/RTP/SAVPF", "UDP/TLS/RTP/SAVPF", true),
        ("RTP/AVP", "RTP/SAVP", true),
        ("RTP/SAVPF", "RTP/AVP", true),
        ("RTP/AVP", "RTP/AVP", false),
    ] {
        let path = dir.path().join("srtp.pcap");
        let mut b = PcapBuilder::create(&path).unwrap();
        let t = answered_call(
            &mut b,
            1_700_000_000_000_000_000,
            &side("10.0.0.1", 4000, offer),
            &side("10.0.0.2", 5000, answer),
            1,
        );
        bye(&mut b, t + 1_000_000_000, 2);
        b.finish().unwrap();
        let a = analyse(&path, 1);
        let call = &a.calls[0];
        assert!(call.streams.is_empty());
        assert_eq!(call.is_encrypted(), encrypted, "{offer} / {answer}");
    }
}

/// Fragmented datagrams go to every worker; the packet is counted by the worker that owns its
/// flow, once, and only if it is RTP: large RTP datagrams (video) split by IP, and an NFS reply
/// on well-known ports whose first byte happens to read as RTP version 2 (which no monitor takes
/// for RTP without signalling). One worker and three count the same.
#[test]
fn fragmented_datagrams_are_counted_once_whatever_the_workers() {
    use monitor::synth::packet::{ethernet, fragmented_udp};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fragments.pcap");
    let mut b = PcapBuilder::create(&path).unwrap();
    let t0 = 1_700_000_000_000_000_000i64;
    let mut id = 1;
    for n in 0..20u16 {
        let t = t0 + i64::from(n) * 20_000_000;
        let mut rtp = Vec::new();
        write_rtp(
            &mut rtp,
            96,
            false,
            1000 + n,
            3000 * u32::from(n),
            0x5eed,
            2400,
            7,
        );
        for flow in 0..4u16 {
            let src = addr(&format!("10.0.0.1:{}", 40_000 + 2 * flow));
            let dst = addr(&format!("10.0.0.2:{}", 50_000 + 2 * flow));
            for f in fragmented_udp(src, dst, &rtp, 1200, id) {
                b.frame(t, &ethernet(0x0800, &f));
            }
            id += 1;
        }
        // NFS over UDP: port 2049 answering 789.
        let nfs = [0x80u8; 2400];
        for f in fragmented_udp(addr("10.0.0.3:2049"), addr("10.0.0.4:789"), &nfs, 1200, id) {
            b.frame(t + 1_000_000, &ethernet(0x0800, &f));
        }
        id += 1;
    }
    b.finish().unwrap();
    let counts = |workers: usize| {
        let mut m = Monitor::new(MonitorConfig::default(), workers);
        m.read_file(&path, |_| {}).unwrap();
        let a = m.finish();
        let streams: Vec<u64> = a.all_streams().map(|s| s.stream.packets).collect();
        (
            a.counters.rtp_packets,
            a.counters.fragments_reassembled,
            streams,
        )
    };
    assert_eq!(counts(1), (80, 100, vec![20; 4]));
    for workers in [2, 3] {
        assert_eq!(counts(workers), counts(1), "{workers} workers");
    }
}
