//! A re-INVITE that offers T.38 on the ports the audio uses. Media changes when the answer
//! accepts the offer: refused (488), the audio goes on as audio and the call is no fax; accepted,
//! the ports carry T.38 from then on. Either way, a datagram that continues an audio stream
//! (RTP version 2, its SSRC, its next sequence numbers) is RTP: audio still in flight while the
//! offer is out, or after the answer, is counted in its stream, not as T.38.

mod common;

use std::path::Path;

use common::calls::*;
use monitor::synth::PcapBuilder;
use monitor::synth::fax::{FaxPlan, FaxTruth, fax_session};
use monitor::{Analysis, Monitor, MonitorConfig};

const MS: i64 = 1_000_000;
const START_NS: i64 = 1_700_000_000_000_000_000;
/// Audio packets each way before the re-INVITE.
const BEFORE: u16 = 50;

fn analyse(path: &Path, workers: usize) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).unwrap();
    m.finish()
}

/// (packets, lost) of the call's streams, the caller's first.
fn streams(a: &Analysis) -> Vec<(u64, i64)> {
    let mut s: Vec<_> = a.calls[0]
        .streams
        .iter()
        .map(|s| {
            (
                s.stream.key.ssrc,
                s.stream.packets,
                s.stream.wireshark.lost(),
            )
        })
        .collect();
    s.sort();
    s.into_iter().map(|(_, p, l)| (p, l)).collect()
}

/// Audio, a re-INVITE offering T.38 on the audio's ports, six audio packets each way while the
/// offer is out, 488, the audio going on (same SSRCs, sequence unbroken), BYE. Returns the
/// time of the offer.
fn write_refused(path: &Path) -> i64 {
    let mut b = PcapBuilder::create(path).unwrap();
    let t = answered_call(&mut b, START_NS, &audio_sdp(true), &audio_sdp(false), 1);
    let t = audio(&mut b, t, 0..BEFORE, &[0, 1]);
    let offer_ns = t + 10 * MS;
    invite(&mut b, offer_ns, &fax_sdp(true), 2);
    let t = audio(&mut b, t, BEFORE..BEFORE + 6, &[0, 1]);
    let t = answer(&mut b, t + 5 * MS, "488 Not Acceptable Here", 2, None);
    let t = audio(&mut b, t, BEFORE + 6..BEFORE + 56, &[0, 1]);
    bye(&mut b, t + 100 * MS, 3);
    b.finish().unwrap();
    offer_ns
}

#[test]
fn a_refused_t38_offer_leaves_the_audio_whole_and_the_call_no_fax() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refused.pcap");
    write_refused(&path);
    for workers in [1, 2] {
        let a = analyse(&path, workers);
        assert_eq!(a.calls.len(), 1);
        let call = &a.calls[0];
        let what = format!("{workers} worker(s)");
        assert_eq!(streams(&a), [(106, 0), (106, 0)], "{what}");
        assert!(
            call.t38.is_empty() && a.t38.is_empty(),
            "{what}: {:?}",
            call.t38
        );
        assert_eq!(a.counters.udptl_packets, 0, "{what}");
        assert_eq!(a.counters.rtp_packets, 212, "{what}");
        assert!(a.streams.is_empty(), "{what}: no stray stream");
        assert!(!call.is_fax(), "{what}");
        assert!(call.dialog.t38_offered(), "{what}");
        assert_eq!(call.dialog.reinvites, 1);
    }
}

/// tshark takes the offered port for T.38 from the offer on and never gives it back: it decodes
/// every later packet to it as malformed T.38. So its stream to the caller stops at the offer,
/// while its stream to the callee (whose port nobody offered to move) is whole: that one equals
/// ours, and on the capture cut at the offer both do.
#[test]
fn tshark_agrees_on_the_audio_it_does_not_take_for_t38() {
    if !common::have_tshark() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refused.pcap");
    let offer_ns = write_refused(&path);
    let theirs = common::tshark_rtp_streams(&path, &[]);
    let to = |s: &str| theirs.iter().find(|t| t.dst == s).unwrap().packets;
    assert_eq!(
        (to(A_MEDIA), to(B_MEDIA)),
        (u64::from(BEFORE), 106),
        "tshark: {theirs:?}"
    );
    let a = analyse(&path, 1);
    let ours: Vec<_> = a
        .all_streams()
        .filter(|s| s.stream.key.dst == addr(B_MEDIA))
        .collect();
    let whole: Vec<_> = theirs
        .iter()
        .filter(|t| t.dst == B_MEDIA)
        .cloned()
        .collect();
    common::assert_streams_match("refused.pcap, to the callee", &ours, &whole);
    // The same capture cut at the offer: both streams are tshark's, figure by figure.
    let cut = dir.path().join("before-offer.pcap");
    let mut r = monitor::pcap::CaptureReader::open(&path).unwrap();
    let mut w = PcapBuilder::create(&cut).unwrap();
    while let Some(p) = r.next_packet().unwrap() {
        if p.ts_ns < offer_ns {
            w.frame(p.ts_ns, p.data);
        }
    }
    w.finish().unwrap();
    let theirs = common::tshark_rtp_streams(&cut, &[]);
    let a = analyse(&cut, 1);
    let ours: Vec<_> = a.all_streams().collect();
    common::assert_streams_match("refused.pcap before the offer", &ours, &theirs);
}

/// Accepted: three audio packets each way while the offer is out and two more of the caller's
/// after the 200 (still in flight), then the fax on the same ports.
fn write_accepted(path: &Path) -> FaxTruth {
    let (a_media, b_media) = (addr(A_MEDIA), addr(B_MEDIA));
    let mut b = PcapBuilder::create(path).unwrap();
    let t = answered_call(&mut b, START_NS, &audio_sdp(true), &audio_sdp(false), 1);
    let t = audio(&mut b, t, 0..BEFORE, &[0, 1]);
    invite(&mut b, t + 10 * MS, &fax_sdp(true), 2);
    let t = audio(&mut b, t, BEFORE..BEFORE + 3, &[0, 1]);
    let ok_ns = t + 5 * MS;
    answer(&mut b, ok_ns, "200 OK", 2, Some(&fax_sdp(false)));
    let t = audio(&mut b, ok_ns - 8 * MS, BEFORE + 3..BEFORE + 5, &[0]);
    let plan = FaxPlan {
        seq0: [0x7ff0, 0xbff0],
        ..FaxPlan::default()
    };
    let (packets, truth) = fax_session(&plan);
    let t = fax(&mut b, t + 20 * MS, &packets, (a_media, b_media));
    bye(&mut b, t + 100 * MS, 3);
    b.finish().unwrap();
    truth
}

#[test]
fn an_accepted_offer_moves_the_ports_to_t38_and_audio_in_flight_stays_audio() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("accepted.pcap");
    let truth = write_accepted(&path);
    for workers in [1, 2] {
        let a = analyse(&path, workers);
        let what = format!("{workers} worker(s)");
        let call = &a.calls[0];
        assert_eq!(streams(&a), [(55, 0), (53, 0)], "{what}");
        assert!(call.is_fax() && call.dialog.t38_offered(), "{what}");
        assert_eq!(call.t38.len(), 2, "{what}");
        for f in &call.t38 {
            let d = usize::from(f.flow.src != addr(A_MEDIA));
            assert_eq!(
                (f.flow.packets, f.flow.lost, f.flow.first_seq),
                (truth.packets[d], 0, [0x7ff0, 0xbff0][d]),
                "{what}: T.38 from {}",
                f.flow.src
            );
        }
        let fax = call.fax().unwrap();
        assert_eq!(
            (fax.pages, fax.result),
            (Some(truth.pages), Some(truth.result))
        );
        assert_eq!(a.counters.rtp_packets, 108, "{what}");
        assert!(a.streams.is_empty() && a.t38.is_empty(), "{what}");
    }
}

/// T.38 offered on ports of its own (as Asterisk offers it): refused, nothing changes; accepted,
/// the fax runs there and the audio streams keep the audio.
#[test]
fn t38_on_new_ports_refused_or_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let image = |ip: &str, port: u16| sdp(ip, &format!("m=image {port} udptl t38"));
    let (a_fax, b_fax) = (addr("10.0.0.1:4100"), addr("10.0.0.2:5100"));
    let plan = FaxPlan::default();
    let (packets, truth) = fax_session(&plan);
    for accepted in [false, true] {
        let path = dir.path().join(format!("new-ports-{accepted}.pcap"));
        let mut b = PcapBuilder::create(&path).unwrap();
        let t = answered_call(&mut b, START_NS, &audio_sdp(true), &audio_sdp(false), 1);
        let t = audio(&mut b, t, 0..BEFORE, &[0, 1]);
        invite(&mut b, t + 10 * MS, &image("10.0.0.1", 4100), 2);
        let (status, body) = if accepted {
            ("200 OK", Some(image("10.0.0.2", 5100)))
        } else {
            ("488 Not Acceptable Here", None)
        };
        let mut t = answer(&mut b, t + 30 * MS, status, 2, body.as_deref());
        if accepted {
            t = fax(&mut b, t + 20 * MS, &packets, (a_fax, b_fax));
        } else {
            t = audio(&mut b, t, BEFORE..2 * BEFORE, &[0, 1]);
        }
        bye(&mut b, t + 100 * MS, 3);
        b.finish().unwrap();
        for workers in [1, 2] {
            let a = analyse(&path, workers);
            let what = format!("accepted {accepted}, {workers} worker(s)");
            let call = &a.calls[0];
            let audio_packets = if accepted { BEFORE } else { 2 * BEFORE };
            let audio_packets = u64::from(audio_packets);
            assert_eq!(streams(&a), [(audio_packets, 0); 2], "{what}");
            assert!(call.dialog.t38_offered(), "{what}");
            assert_eq!(call.is_fax(), accepted, "{what}");
            let flows: Vec<u64> = call.t38.iter().map(|f| f.flow.packets).collect();
            let want = if accepted {
                truth.packets.to_vec()
            } else {
                vec![]
            };
            assert_eq!(flows, want, "{what}");
            assert!(a.streams.is_empty() && a.t38.is_empty(), "{what}");
        }
    }
}
