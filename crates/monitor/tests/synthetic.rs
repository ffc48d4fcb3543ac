//! Synthetic captures with known ground truth: calls, outcomes and per-stream counts against
//! the generator's record, stream figures against tshark, one shard against two, and damaged
//! files.

mod common;

use std::path::Path;

use monitor::dialog::{CallState, Party};
use monitor::rtp::Media;
use monitor::synth::{CallKind, GroundTruth, SynthConfig, SynthOutcome, generate};
use monitor::{Analysis, Monitor, MonitorConfig};

fn lossy() -> SynthConfig {
    SynthConfig {
        calls: 30,
        call_interval_us: 40_000,
        call_duration_ms: 3_000,
        loss_pct: 3.0,
        duplicate_pct: 1.0,
        reorder_pct: 1.5,
        jitter_ms: 4.0,
        seed: 7,
        ..SynthConfig::default()
    }
}

fn write(dir: &Path, name: &str, cfg: &SynthConfig) -> (std::path::PathBuf, GroundTruth) {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).unwrap();
    let truth = generate(cfg, f).unwrap();
    (path, truth)
}

fn analyse(path: &Path, shards: usize) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), shards);
    m.read_file(path, |_| {}).unwrap();
    m.finish()
}

#[test]
fn calls_and_streams_equal_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (path, truth) = write(dir.path(), "lossy.pcap", &lossy());
    let a = analyse(&path, 1);
    assert_eq!(a.calls.len(), truth.calls.len());
    assert_eq!(a.sip.messages, truth.sip_messages);
    assert_eq!(a.counters.rtp_packets, truth.rtp_packets);
    assert_eq!(a.counters.packets, truth.packets);
    assert!(a.streams.is_empty(), "every stream belongs to a call");
    for t in &truth.calls {
        let c = a
            .calls
            .iter()
            .find(|c| *c.dialog.call_id == *t.call_id)
            .unwrap_or_else(|| panic!("call {} missing", t.call_id));
        let d = &c.dialog;
        assert_eq!(
            (&*d.caller, &*d.called),
            (t.caller.as_str(), t.called.as_str())
        );
        match t.outcome {
            SynthOutcome::Answered { caller_hangs_up } => {
                assert_eq!(d.state, CallState::Ended, "{}", t.call_id);
                assert_eq!(d.last_code, 200);
                let by = if caller_hangs_up {
                    Party::Caller
                } else {
                    Party::Callee
                };
                assert_eq!(d.hangup_by, Some(by), "{}", t.call_id);
                if !caller_hangs_up {
                    assert_eq!(d.q850_cause, Some(16));
                }
                assert_eq!(c.streams.len(), 2);
                for ts in &t.streams {
                    let s = c
                        .streams
                        .iter()
                        .find(|s| Some(s.stream.key.src) == ts.src && s.stream.key.ssrc == ts.ssrc)
                        .expect("stream present");
                    let st = &s.stream;
                    assert_eq!(
                        st.packets,
                        ts.sent - ts.dropped + ts.duplicated,
                        "{}",
                        t.call_id
                    );
                    assert_eq!(
                        st.wireshark.lost(),
                        ts.dropped as i64 - ts.duplicated as i64
                    );
                    assert_eq!(st.sequence.duplicates, ts.duplicated);
                    assert_eq!(st.sequence.lost(), ts.dropped as i64);
                    assert!(st.sequence.out_of_order <= ts.reordered);
                    let mos = st.mos().unwrap();
                    assert!((1.0..=4.5).contains(&mos));
                }
            }
            SynthOutcome::Busy => {
                assert_eq!((d.state, d.last_code), (CallState::Failed, 486));
                assert!(c.streams.is_empty());
            }
            SynthOutcome::Cancelled => {
                assert_eq!((d.state, d.last_code), (CallState::Cancelled, 487));
                assert_eq!(d.hangup_by, Some(Party::Caller));
            }
        }
    }
    // Loss lowers MOS: a clean run scores higher than this lossy one.
    let (clean_path, _) = write(
        dir.path(),
        "clean.pcap",
        &SynthConfig {
            calls: 3,
            ..SynthConfig::default()
        },
    );
    let clean = analyse(&clean_path, 1);
    let best_lossy = a
        .all_streams()
        .filter_map(|s| s.stream.mos())
        .fold(0.0, f64::max);
    let worst_clean = clean
        .all_streams()
        .filter_map(|s| s.stream.mos())
        .fold(5.0, f64::min);
    assert!(worst_clean > best_lossy, "{worst_clean} vs {best_lossy}");
}

#[test]
fn synthetic_streams_equal_tshark() {
    if !common::have_tshark() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 12,
        ..lossy()
    };
    let (path, _) = write(dir.path(), "lossy.pcap", &cfg);
    let a = analyse(&path, 1);
    let ours: Vec<_> = a.all_streams().collect();
    let theirs = common::tshark_rtp_streams(&path, &[]);
    common::assert_streams_match("synthetic", &ours, &theirs);
    let (messages, requests, responses, resent) = common::tshark_sip_stat(&path, &[]);
    assert_eq!(a.sip.messages, messages);
    assert_eq!(a.sip.requests, requests);
    assert_eq!(a.sip.responses, responses);
    assert_eq!(a.sip.resent, resent);
}

#[test]
fn two_shards_equal_one() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write(dir.path(), "lossy.pcap", &lossy());
    let one = analyse(&path, 1);
    let two = analyse(&path, 2);
    assert_eq!(one.calls.len(), two.calls.len());
    for (a, b) in one.calls.iter().zip(&two.calls) {
        assert_eq!(a.dialog.call_id, b.dialog.call_id);
        assert_eq!(
            (a.dialog.state, a.dialog.last_code, a.dialog.end_ns),
            (b.dialog.state, b.dialog.last_code, b.dialog.end_ns)
        );
        assert_eq!(a.streams.len(), b.streams.len());
        for (x, y) in a.streams.iter().zip(&b.streams) {
            assert_eq!(x.stream.key, y.stream.key);
            assert_eq!(x.stream.packets, y.stream.packets);
            assert_eq!(x.stream.wireshark.lost(), y.stream.wireshark.lost());
            assert_eq!(
                x.stream.wireshark.mean_jitter_ms,
                y.stream.wireshark.mean_jitter_ms
            );
        }
    }
    assert_eq!(one.sip, two.sip);
    assert_eq!(one.counters, two.counters);
    assert_eq!(one.streams.len(), two.streams.len());
}

#[test]
fn gzip_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 5,
        ..lossy()
    };
    let (path, _) = write(dir.path(), "x.pcap", &cfg);
    let gz_path = dir.path().join("x.pcap.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz_path).unwrap(),
        flate2::Compression::fast(),
    );
    std::io::copy(&mut std::fs::File::open(&path).unwrap(), &mut enc).unwrap();
    enc.finish().unwrap();
    let a = analyse(&path, 1);
    let b = analyse(&gz_path, 1);
    assert_eq!(a.counters, b.counters);
    assert_eq!(a.calls.len(), b.calls.len());
}

#[test]
fn truncated_capture_names_file_and_offset_and_keeps_earlier_calls() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 20,
        call_interval_us: 400_000,
        ..lossy()
    };
    let (path, truth) = write(dir.path(), "cut.pcap", &cfg);
    let bytes = std::fs::read(&path).unwrap();
    // Cut in the middle of a packet about two thirds in.
    let cut = bytes.len() * 2 / 3;
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    let err = m.read_file(&path, |_| {}).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("cut.pcap") && text.contains("at byte"),
        "{text}"
    );
    assert!(err.offset > 0 && err.offset < cut as u64);
    assert!(text.contains("truncated"), "{text}");
    let a = m.finish();
    assert!(!a.calls.is_empty() && a.calls.len() <= truth.calls.len());
    assert!(
        a.calls.iter().any(|c| c.dialog.state == CallState::Ended),
        "calls before the cut are complete"
    );

    // Garbage in the middle: a record claiming an impossible length.
    let (path, _) = write(
        dir.path(),
        "bad.pcap",
        &SynthConfig {
            calls: 2,
            ..lossy()
        },
    );
    let mut bytes = std::fs::read(&path).unwrap();
    let at = 24 + 16 + u32::from_le_bytes(bytes[32..36].try_into().unwrap()) as usize; // second record
    bytes[at + 8..at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    let err = m.read_file(&path, |_| {}).unwrap_err();
    assert_eq!(err.offset, at as u64);
    assert!(err.to_string().contains("bad.pcap: at byte"));
    assert_eq!(m.finish().counters.packets, 1);
}

#[test]
fn closed_records_can_be_drained_while_reading() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        calls: 20,
        call_interval_us: 2_000_000,
        ..lossy()
    };
    let (path, truth) = write(dir.path(), "long.pcap", &cfg);
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    let mut r = monitor::pcap::CaptureReader::open(&path).unwrap();
    let mut drained = 0;
    let mut peak_active = 0;
    let mut n = 0u64;
    while let Some(p) = r.next_packet().unwrap() {
        let (ts, lt) = (p.ts_ns, p.link_type);
        m.packet(ts, lt, p.data);
        n += 1;
        if n.is_multiple_of(500) {
            let part = m.take_finished();
            drained += part.calls.len();
            for c in &part.calls {
                if matches!(
                    truth
                        .calls
                        .iter()
                        .find(|t| *t.call_id == *c.dialog.call_id)
                        .unwrap()
                        .outcome,
                    SynthOutcome::Answered { .. }
                ) {
                    assert_eq!(c.streams.len(), 2, "a drained call carries its streams");
                }
            }
        }
        peak_active = peak_active.max(m.active_calls());
    }
    let rest = m.finish();
    assert!(drained > 0, "calls closed while reading");
    assert_eq!(drained + rest.calls.len(), truth.calls.len());
    assert!(
        peak_active < truth.calls.len(),
        "calls do not pile up: peak {peak_active}"
    );
}

/// The same capture as pcapng (converted by Wireshark's editcap) reads the same.
#[test]
fn pcapng_from_editcap_reads_the_same() {
    if std::process::Command::new("editcap")
        .arg("-h")
        .output()
        .is_err()
    {
        test_env::skip("editcap is not installed (it comes with tshark)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write(
        dir.path(),
        "x.pcap",
        &SynthConfig {
            calls: 6,
            ..lossy()
        },
    );
    let ng = dir.path().join("x.pcapng");
    let st = std::process::Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(&path)
        .arg(&ng)
        .status()
        .unwrap();
    assert!(st.success());
    let head = std::fs::read(&ng).unwrap();
    assert_eq!(
        &head[..4],
        &[0x0a, 0x0d, 0x0d, 0x0a],
        "editcap wrote pcapng"
    );
    let a = analyse(&path, 1);
    let b = analyse(&ng, 1);
    assert_eq!(a.counters, b.counters);
    assert_eq!(a.calls.len(), b.calls.len());
    for (x, y) in a.all_streams().zip(b.all_streams()) {
        assert_eq!(x.stream.key, y.stream.key);
        assert_eq!(
            x.stream.wireshark.mean_jitter_ms,
            y.stream.wireshark.mean_jitter_ms
        );
    }
}

/// Every kind of call at once: fax after a re-INVITE, a digit in the voice, SRTP, video and a
/// move to new ports, with loss, duplicates and reordering. What the monitor finds equals what
/// the generator sent, on one shard and on two.
fn every_kind() -> SynthConfig {
    SynthConfig {
        calls: 24,
        call_interval_us: 30_000,
        call_duration_ms: 2_000,
        loss_pct: 1.0,
        duplicate_pct: 0.5,
        reorder_pct: 0.5,
        jitter_ms: 2.0,
        seed: 11,
        kinds: CallKind::ALL.to_vec(),
        ..SynthConfig::default()
    }
}

#[test]
fn every_kind_of_call_matches_its_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (path, truth) = write(dir.path(), "kinds.pcap", &every_kind());
    for shards in [1, 2] {
        let a = analyse(&path, shards);
        assert_eq!(a.calls.len(), truth.calls.len());
        assert_eq!(
            a.counters.rtp_packets, truth.rtp_packets,
            "{shards} shard(s)"
        );
        assert_eq!(a.counters.udptl_packets, truth.udptl_packets);
        assert!(a.streams.is_empty(), "every stream belongs to a call");
        assert!(a.t38.is_empty(), "every T.38 flow belongs to a call");
        for t in &truth.calls {
            let c = a
                .calls
                .iter()
                .find(|c| *c.dialog.call_id == *t.call_id)
                .unwrap();
            let what = format!("{} ({})", t.call_id, t.kind.as_str());
            if !t.answered() {
                continue;
            }
            assert_eq!(c.streams.len(), t.streams.len(), "{what}: streams");
            for ts in &t.streams {
                let s = c
                    .streams
                    .iter()
                    .find(|s| Some(s.stream.key.src) == ts.src && s.stream.key.ssrc == ts.ssrc)
                    .unwrap_or_else(|| panic!("{what}: stream {ts:?} missing"));
                assert_eq!(
                    s.stream.packets,
                    ts.sent - ts.dropped + ts.duplicated,
                    "{what}: packets"
                );
                assert_eq!(s.stream.sequence.lost(), ts.dropped as i64, "{what}");
                let video = s.stream.media == Media::Video;
                assert_eq!(video, ts.video, "{what}: media");
                assert_eq!(
                    s.stream.mos().is_none(),
                    video,
                    "{what}: MOS for audio only"
                );
                assert_eq!(s.stream.encrypted, t.encrypted(), "{what}: encrypted");
            }
            assert_eq!(c.digits(), t.digits, "{what}: digits");
            assert_eq!(c.is_fax(), t.fax.is_some(), "{what}: fax");
            if let Some(f) = &t.fax {
                let got = c.fax().unwrap();
                assert_eq!(got.pages, Some(f.pages), "{what}");
                assert_eq!(got.result, Some(f.result), "{what}");
                assert_eq!(got.modulation, Some(f.modulation), "{what}");
                let packets: u64 = c.t38.iter().map(|r| r.flow.packets).sum();
                assert_eq!(
                    packets,
                    f.packets[0] + f.packets[1],
                    "{what}: UDPTL packets"
                );
            }
            let reinvites = u16::from(matches!(t.kind, CallKind::Fax | CallKind::HoldResume));
            assert_eq!(c.dialog.reinvites, reinvites, "{what}");
        }
    }
}

#[test]
fn every_kind_of_call_has_tshark_s_rtp_figures() {
    if !common::have_tshark() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write(dir.path(), "kinds.pcap", &every_kind());
    let theirs = common::tshark_rtp_streams(&path, &[]);
    let a = analyse(&path, 1);
    let ours: Vec<&monitor::StreamRecord> = a.all_streams().collect();
    common::assert_streams_match("kinds.pcap", &ours, &theirs);
}
