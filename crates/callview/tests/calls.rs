//! Synthetic calls (the monitor's generator: loss, jitter, duplicates, reordering, RFC 4733
//! digits, hold/resume, video, SRTP) captured with an archive, each call's pcap read back as
//! `tandem cdr pcap` writes it, and seen whole: the streams' figures equal `--json`'s and the
//! CDR's, the seconds add up to the streams, the ladder holds every SIP message in order, the
//! audio lasts as long as the stream; a headers-only archive says why there is no audio; a
//! truncated pcap gives what was read.

mod common;

use std::path::Path;

use callview::{AudioSelect, CallView, CallViewError, Limits, StreamView};
use cdr::CdrStream;
use common::{ArchivedCall, archived_calls, round3, wav_samples};
use monitor::rtp::RtpHeader;
use monitor::synth::{CallKind, SynthConfig, generate};
use sensor::StoreMode;
use serde_json::Value;

/// Writes a synthetic capture to `dir/in.pcap` and returns its path.
fn synthetic(dir: &Path, cfg: &SynthConfig) -> std::path::PathBuf {
    let path = dir.join("in.pcap");
    let file = std::fs::File::create(&path).unwrap();
    generate(cfg, file).unwrap();
    path
}

/// Ten calls of every kind, with every disturbance the generator has; calls 8 and 9 fail
/// (cancelled, busy).
fn lively() -> SynthConfig {
    SynthConfig {
        calls: 10,
        call_interval_us: 400_000,
        call_duration_ms: 7_000,
        loss_pct: 2.0,
        duplicate_pct: 1.0,
        reorder_pct: 1.0,
        jitter_ms: 15.0,
        kinds: vec![
            CallKind::Voice,
            CallKind::Dtmf,
            CallKind::HoldResume,
            CallKind::Video,
            CallKind::Srtp,
            CallKind::Fax,
        ],
        seed: 7,
        ..SynthConfig::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

fn close_opt(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// The view's figures against the CDR row: the same record, so the same numbers (the floats
/// to the last few bits: the capture's times count from its own first packet).
fn assert_same_row(v: &CdrStream, row: &CdrStream, what: &str) {
    assert_eq!(
        (
            &v.call_id, &v.src, &v.dst, v.ssrc, &v.payload, v.start_us, v.end_us
        ),
        (
            &row.call_id,
            &row.src,
            &row.dst,
            row.ssrc,
            &row.payload,
            row.start_us,
            row.end_us
        ),
        "{what}"
    );
    assert_eq!(
        (
            v.packets,
            v.lost,
            v.duplicates,
            v.out_of_order,
            v.rtcp_reports
        ),
        (
            row.packets,
            row.lost,
            row.duplicates,
            row.out_of_order,
            row.rtcp_reports
        ),
        "{what}"
    );
    for (name, a, b) in [
        ("min_delta_ms", v.min_delta_ms, row.min_delta_ms),
        ("mean_delta_ms", v.mean_delta_ms, row.mean_delta_ms),
        ("max_delta_ms", v.max_delta_ms, row.max_delta_ms),
        ("mean_jitter_ms", v.mean_jitter_ms, row.mean_jitter_ms),
        ("max_jitter_ms", v.max_jitter_ms, row.max_jitter_ms),
    ] {
        assert!(close(a, b), "{what}: {name} {a} against the CDR's {b}");
    }
    assert!(close_opt(v.mos, row.mos), "{what}: mos");
    assert!(close_opt(
        v.rtcp_fraction_lost_pct,
        row.rtcp_fraction_lost_pct
    ));
    assert!(close_opt(v.rtcp_jitter_ms, row.rtcp_jitter_ms));
}

/// The view's figures against the `--json` line of the same stream.
fn assert_same_json(v: &CdrStream, j: &Value, what: &str) {
    assert_eq!(j["src"], v.src.as_str(), "{what}");
    assert_eq!(j["dst"], v.dst.as_str(), "{what}");
    assert_eq!(j["ssrc"], format!("0x{:08X}", v.ssrc), "{what}");
    assert_eq!(j["payload"], v.payload.as_str(), "{what}");
    assert_eq!(j["packets"], v.packets, "{what}");
    assert_eq!(j["lost"], v.lost, "{what}");
    assert_eq!(j["duplicates"], v.duplicates, "{what}");
    assert_eq!(j["out_of_order"], v.out_of_order, "{what}");
    for (name, ours) in [
        ("min_delta_ms", v.min_delta_ms),
        ("mean_delta_ms", v.mean_delta_ms),
        ("max_delta_ms", v.max_delta_ms),
        ("mean_jitter_ms", v.mean_jitter_ms),
        ("max_jitter_ms", v.max_jitter_ms),
    ] {
        assert_eq!(j[name].as_f64(), Some(round3(ours)), "{what}: {name}");
    }
    assert_eq!(
        j["mos"].as_f64(),
        v.mos.map(|m| (m * 100.0).round() / 100.0),
        "{what}: mos"
    );
    match &j["rtcp"] {
        Value::Null => assert_eq!(v.rtcp_reports, 0, "{what}"),
        r => assert_eq!(r["reports"], v.rtcp_reports, "{what}"),
    }
}

/// Seconds add up to the stream and cover it from its first packet to its last.
fn assert_intervals(s: &StreamView, what: &str) {
    let f = &s.figures;
    assert_eq!(s.intervals_left_out, 0, "{what}");
    let packets: u64 = s.intervals.iter().map(|i| i.packets).sum();
    assert_eq!(packets, f.packets, "{what}: packets over the seconds");
    common::assert_seconds_lost(s, what);
    let seconds = ((f.end_us - f.start_us) / 1_000_000 + 1) as usize;
    assert_eq!(
        s.intervals.len(),
        seconds,
        "{what}: one interval per second"
    );
    for (k, i) in s.intervals.iter().enumerate() {
        assert_eq!(i.t_s, k as f64, "{what}");
        assert!(i.max_jitter_ms >= i.jitter_ms, "{what}: {i:?}");
        assert!((0.0..=100.0).contains(&i.loss_pct), "{what}: {i:?}");
        if let Some(m) = i.mos {
            assert!((1.0..=4.5).contains(&m), "{what}: {i:?}");
        }
    }
    // The highest jitter of any second is the stream's highest (Wireshark's maximum skips a
    // few irregular packets, so it can only be lower).
    let max = s
        .intervals
        .iter()
        .map(|i| i.max_jitter_ms)
        .fold(0.0, f64::max);
    assert!(
        max + 1e-9 >= f.max_jitter_ms,
        "{what}: {max} < {}",
        f.max_jitter_ms
    );
}

/// The RTP timestamps of a stream in a pcap, read on their own: (lowest, highest), and the
/// number of distinct G.711 packets (by sequence number) with a payload.
fn timestamps(pcap: &[u8], s: &StreamView) -> (u32, u32, usize) {
    let mut r = monitor::pcap::CaptureReader::from_reader("t", std::io::Cursor::new(pcap.to_vec()))
        .unwrap();
    let (mut lo, mut hi) = (u32::MAX, 0u32);
    let mut seqs = std::collections::HashSet::new();
    while let Some(p) = r.next_packet().unwrap() {
        let Some((src, dst, payload)) = monitor::decode::peek_udp(p.link_type, p.data) else {
            continue;
        };
        let Some(h) = RtpHeader::parse(payload) else {
            continue;
        };
        if src.to_string() != s.key.src || dst.to_string() != s.key.dst || h.ssrc != s.key.ssrc {
            continue;
        }
        lo = lo.min(h.timestamp);
        hi = hi.max(h.timestamp);
        if matches!(h.payload_type, 0 | 8) && h.payload_len > 0 {
            seqs.insert(h.seq);
        }
    }
    (lo, hi, seqs.len())
}

/// Checks one call's view against its capture.
fn check_call(call: &ArchivedCall, view: &CallView) {
    let id = &call.call_id;
    assert_eq!(view.read_error, None, "{id}");
    // Every SIP message of the call, in order, between its two hosts.
    assert_eq!(view.ladder.len() as u64, call.sip_messages, "{id}: ladder");
    assert_eq!(view.ladder_left_out, 0);
    assert!(view.ladder.iter().all(|e| e.call_id == *id), "{id}");
    assert!(
        view.ladder
            .windows(2)
            .all(|w| w[0].frame < w[1].frame && w[0].ts_us <= w[1].ts_us)
    );
    assert_eq!(view.ladder[0].method.as_deref(), Some("INVITE"), "{id}");
    assert!(
        view.ladder[0].sdp.is_some(),
        "{id}: the INVITE's SDP marker"
    );
    assert_eq!(view.hosts.len(), 2, "{id}: {:?}", view.hosts);
    // The streams: the capture's, with the same figures.
    assert_eq!(view.streams.len(), call.json_streams.len(), "{id}: streams");
    assert_eq!(view.streams_left_out, 0);
    for (k, s) in view.streams.iter().enumerate() {
        let what = format!("{id} stream {k} ({} → {})", s.key.src, s.key.dst);
        assert_eq!(
            (
                s.figures.src.as_str(),
                s.figures.dst.as_str(),
                s.figures.ssrc
            ),
            (s.key.src.as_str(), s.key.dst.as_str(), s.key.ssrc)
        );
        let j = call
            .json_streams
            .iter()
            .find(|j| {
                j["src"] == s.key.src.as_str()
                    && j["dst"] == s.key.dst.as_str()
                    && j["ssrc"] == format!("0x{:08X}", s.key.ssrc)
            })
            .unwrap_or_else(|| panic!("{what}: not in --json"));
        assert_same_json(&s.figures, j, &what);
        let row = call
            .cdr_streams
            .iter()
            .find(|r| r.src == s.key.src && r.dst == s.key.dst && r.ssrc == s.key.ssrc)
            .unwrap_or_else(|| panic!("{what}: not in the CDR"));
        assert_same_row(&s.figures, row, &what);
        assert_intervals(s, &what);
    }
}

/// Checks the audio of every stream of a call captured with whole RTP packets.
fn check_audio(call: &ArchivedCall, view: &CallView, kind: CallKind) {
    let id = &call.call_id;
    let limits = Limits::default();
    for (k, s) in view.streams.iter().enumerate() {
        let what = format!("{id} stream {k} ({})", s.figures.payload);
        let video = s.figures.payload.contains("H264") || s.figures.payload.starts_with("96");
        match (kind, video) {
            (CallKind::Srtp, _) => {
                assert_eq!(s.audio, None, "{what}");
                assert!(s.audio_note.as_deref().unwrap().contains("SRTP"), "{what}");
                let e = callview::wav(&call.pcap, AudioSelect::Stream(k), &limits).unwrap_err();
                assert!(matches!(e, CallViewError::NotDecodable { .. }), "{e}");
                continue;
            }
            (_, true) => {
                assert_eq!(s.audio, None, "{what}");
                assert!(s.audio_note.as_deref().unwrap().contains("video"), "{what}");
                continue;
            }
            _ => {}
        }
        let audio = s
            .audio
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: {:?}", s.audio_note));
        assert_eq!(audio.codec, "PCMA");
        // Wireshark's lost counts a duplicate as received; the RFC 3550 view does not.
        let missing = s.figures.lost + s.figures.duplicates as i64;
        assert_eq!(audio.payload_complete, missing <= 0, "{what}");
        let wav = callview::wav(&call.pcap, AudioSelect::Stream(k), &limits).unwrap();
        let (rate, samples) = wav_samples(&wav);
        assert_eq!(rate, 8000);
        // The stream's duration: last timestamp − first timestamp + one packet's samples.
        let (lo, hi, g711_packets) = timestamps(&call.pcap, s);
        let expected = (hi - lo) as usize + 160;
        assert_eq!(samples.len(), expected, "{what}: WAV length");
        assert_eq!(audio.seconds, expected as f64 / 8000.0, "{what}");
        // The generator fills PCMA payloads with 0xD5 (+8 once decoded): each packet that
        // arrived, counted once, is 160 such samples; lost packets, digits and gaps are silence.
        assert!(samples.iter().all(|&v| v == 0 || v == 8), "{what}");
        let heard = samples.iter().filter(|&&v| v == 8).count();
        assert_eq!(heard, 160 * g711_packets, "{what}: samples heard");
    }
    // Every stream mixed: from the first stream's start to the last one's end (in capture
    // time, give or take the jitter), both directions heard at once.
    if kind != CallKind::Srtp {
        let wav = callview::wav(&call.pcap, AudioSelect::Mixed, &limits).unwrap();
        let (_, mixed) = wav_samples(&wav);
        let playable = || view.streams.iter().filter(|s| s.audio.is_some());
        let longest = playable()
            .map(|s| (s.audio.as_ref().unwrap().seconds * 8000.0) as usize)
            .max()
            .unwrap();
        let start_us = playable().map(|s| s.figures.start_us).min().unwrap();
        let end_us = playable().map(|s| s.figures.end_us).max().unwrap();
        let span = ((end_us - start_us) * 8 / 1000) as usize;
        assert!(
            mixed.len() >= longest,
            "{id}: mixed {} < {longest}",
            mixed.len()
        );
        // The generator's jitter (15 ms) moves the first and last packets: 2 × 120 samples.
        assert!(
            mixed.len().abs_diff(span + 160) <= 240,
            "{id}: mixed {} for a span of {span}",
            mixed.len()
        );
        assert!(mixed.contains(&16), "{id}: both directions at once");
    } else {
        let e = callview::wav(&call.pcap, AudioSelect::Mixed, &limits).unwrap_err();
        assert!(e.to_string().contains("SRTP"), "{e}");
    }
}

#[test]
fn synthetic_calls_are_seen_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = lively();
    let input = synthetic(dir.path(), &cfg);
    let calls = archived_calls(&input, StoreMode::FullRtp, dir.path());
    assert_eq!(calls.len(), cfg.calls);
    let tshark = common::have_tshark("cross-checking the ladder with tshark");
    for (i, call) in calls.iter().enumerate() {
        let view = callview::analyze(&call.pcap, &Limits::default()).unwrap();
        check_call(call, &view);
        let n: usize = call.call_id["synth-".len()..]
            .split('@')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let kind = cfg.kinds[n % cfg.kinds.len()];
        if n % 10 >= 8 {
            // Cancelled and busy calls have no media.
            assert!(view.streams.is_empty(), "{}", call.call_id);
        } else {
            let expect = match kind {
                CallKind::Video | CallKind::HoldResume => 4,
                CallKind::Fax => 2,
                _ => 2,
            };
            assert_eq!(view.streams.len(), expect, "{}", call.call_id);
            check_audio(call, &view, kind);
        }
        if tshark {
            let path = dir.path().join(format!("call{i}.pcap"));
            std::fs::write(&path, &call.pcap).unwrap();
            let frames: Vec<u64> = view.ladder.iter().map(|e| e.frame).collect();
            assert_eq!(frames, common::tshark_sip_frames(&path), "{}", call.call_id);
        }
    }
}

#[test]
fn a_digit_is_silence_and_counted_as_its_stream() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 1,
        call_duration_ms: 3_000,
        kinds: vec![CallKind::Dtmf],
        payload_type: 0,
        ..SynthConfig::default()
    };
    let calls = archived_calls(&synthetic(dir.path(), &cfg), StoreMode::FullRtp, dir.path());
    let view = callview::analyze(&calls[0].pcap, &Limits::default()).unwrap();
    check_call(&calls[0], &view);
    let s = &view.streams[0];
    assert!(
        s.figures.payload.contains("telephone-event"),
        "{}",
        s.figures.payload
    );
    let audio = s.audio.as_ref().unwrap();
    assert_eq!(audio.codec, "PCMU");
    let wav = callview::wav(&calls[0].pcap, AudioSelect::Stream(0), &Limits::default()).unwrap();
    let (_, samples) = wav_samples(&wav);
    // 150 ticks of 20 ms; 8 of them carry the digit: silence, not the PCMU fill (0xFF is 0).
    assert_eq!(samples.len(), 150 * 160);
    assert!(samples.iter().all(|&v| v == 0));
}

#[test]
fn a_headers_only_archive_keeps_the_figures_but_not_the_audio() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 3,
        loss_pct: 1.0,
        jitter_ms: 5.0,
        call_duration_ms: 4_000,
        ..SynthConfig::default()
    };
    let input = synthetic(dir.path(), &cfg);
    let calls = archived_calls(&input, StoreMode::SipAndRtpHeaders, dir.path());
    assert_eq!(calls.len(), 3);
    for call in &calls {
        let view = callview::analyze(&call.pcap, &Limits::default()).unwrap();
        check_call(call, &view);
        assert_eq!(view.streams.len(), 2);
        for (k, s) in view.streams.iter().enumerate() {
            assert_eq!(s.audio, None);
            let note = s.audio_note.as_deref().unwrap();
            assert!(
                note.starts_with("payload not archived")
                    && note.contains("--archive-store headers")
                    && note.contains("--archive-store full"),
                "{note}"
            );
            let e =
                callview::wav(&call.pcap, AudioSelect::Stream(k), &Limits::default()).unwrap_err();
            assert!(e.to_string().contains("payload not archived"), "{e}");
        }
        let e = callview::wav(&call.pcap, AudioSelect::Mixed, &Limits::default()).unwrap_err();
        assert!(matches!(e, CallViewError::NothingToPlay { .. }), "{e}");
        assert!(
            e.to_string().contains("stream 1: payload not archived"),
            "{e}"
        );
    }
}

#[test]
fn a_truncated_pcap_shows_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 1,
        call_duration_ms: 4_000,
        ..SynthConfig::default()
    };
    let calls = archived_calls(&synthetic(dir.path(), &cfg), StoreMode::FullRtp, dir.path());
    let pcap = &calls[0].pcap;
    let whole = callview::analyze(pcap, &Limits::default()).unwrap();
    // Cut inside the data of the record that holds the pcap's middle byte.
    let mut record = 24;
    loop {
        let incl = u32::from_le_bytes(pcap[record + 8..record + 12].try_into().unwrap()) as usize;
        if record + 16 + incl > pcap.len() / 2 {
            break;
        }
        record += 16 + incl;
    }
    let cut = record + 20;
    let part = callview::analyze(&pcap[..cut], &Limits::default()).unwrap();
    let err = part.read_error.as_deref().unwrap();
    assert!(
        err.starts_with("the call's pcap: at byte ")
            && err.ends_with("file ends inside a packet (truncated capture)"),
        "{err}"
    );
    let at: usize = err["the call's pcap: at byte ".len()..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(at, record, "the record cut short");
    // The SIP before the cut, and the streams as far as they went.
    assert!(!part.ladder.is_empty() && part.ladder.len() < whole.ladder.len());
    assert_eq!(part.ladder[..], whole.ladder[..part.ladder.len()]);
    assert_eq!(part.streams.len(), 2);
    for (p, w) in part.streams.iter().zip(&whole.streams) {
        assert!(p.figures.packets > 0 && p.figures.packets < w.figures.packets);
        let packets: u64 = p.intervals.iter().map(|i| i.packets).sum();
        assert_eq!(packets, p.figures.packets);
        assert!(p.audio.is_some());
    }
    // Its audio plays as far as it goes.
    let wav = callview::wav(&pcap[..cut], AudioSelect::Mixed, &Limits::default()).unwrap();
    assert!(wav.len() > 44);
    // A record that claims more than any packet: read up to it.
    let mut damaged = pcap.clone();
    let second_record = 24 + 16 + u32::from_le_bytes(pcap[32..36].try_into().unwrap()) as usize;
    damaged[second_record + 8..second_record + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let view = callview::analyze(&damaged, &Limits::default()).unwrap();
    assert_eq!(view.frames, 1);
    assert_eq!(view.ladder.len(), 1);
    assert_eq!(
        view.read_error.as_deref(),
        Some(
            format!(
                "the call's pcap: at byte {second_record}: packet record claims 4294967295 captured bytes, more than the 262144-byte maximum"
            )
            .as_str()
        )
    );
    // Bytes that are no capture at all, or nothing.
    for bad in [&b"hello, this is not a pcap"[..], &[], &pcap[..10]] {
        let e = callview::analyze(bad, &Limits::default()).unwrap_err();
        assert!(
            e.to_string().starts_with("the call's pcap: at byte 0: "),
            "{e}"
        );
        assert!(matches!(e, CallViewError::Pcap(_)));
        assert!(callview::wav(bad, AudioSelect::Mixed, &Limits::default()).is_err());
    }
}

#[test]
fn limits_bound_the_view_and_count_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 1,
        call_duration_ms: 5_000,
        kinds: vec![CallKind::HoldResume],
        ..SynthConfig::default()
    };
    let calls = archived_calls(&synthetic(dir.path(), &cfg), StoreMode::FullRtp, dir.path());
    let pcap = &calls[0].pcap;
    let whole = callview::analyze(pcap, &Limits::default()).unwrap();
    assert_eq!(whole.streams.len(), 4);
    let limits = Limits {
        sip_messages_max: 3,
        sip_text_bytes_max: 100,
        streams_max: 2,
        intervals_max: 2,
        rtcp_reports_max: 0,
        audio_seconds_max: 1,
    };
    let view = callview::analyze(pcap, &limits).unwrap();
    assert_eq!(view.ladder.len(), 3);
    assert_eq!(view.ladder_left_out, whole.ladder.len() as u64 - 3);
    assert_eq!(view.ladder[..], {
        let mut first = whole.ladder[..3].to_vec();
        for e in &mut first {
            e.text_cut_bytes += e.text.len() - 100;
            e.text.truncate(100);
        }
        first
    });
    assert_eq!(view.streams.len(), 2);
    assert_eq!(view.streams_left_out, 2);
    for (s, w) in view.streams.iter().zip(&whole.streams) {
        assert_eq!(s.figures, w.figures);
        assert_eq!(s.intervals[..], w.intervals[..2]);
        assert_eq!(s.intervals_left_out, w.intervals.len() as u64 - 2);
        // 2.5 s of audio each, more than the second allowed.
        assert_eq!(s.audio, None);
        assert!(
            s.audio_note
                .as_deref()
                .unwrap()
                .contains("audio_seconds_max")
        );
    }
    let e = callview::wav(pcap, AudioSelect::Stream(0), &limits).unwrap_err();
    assert!(matches!(e, CallViewError::AudioTooLong { .. }), "{e}");
    assert!(e.to_string().contains("Limits::audio_seconds_max"), "{e}");
    let e = callview::wav(pcap, AudioSelect::Stream(2), &limits).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the call's pcap has no stream 2: it has 2 (numbered from 0)"
    );
}
