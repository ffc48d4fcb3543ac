//! The real captures of `../shared/captures` (see its README): read whole, every SIP message is
//! on the ladder in tshark's frames, every stream has the figures the monitor gives the whole
//! file, its seconds add up and its RTCP reports are on it; and each call, archived and read
//! back as `tandem cdr pcap` writes it, has the streams `--json` printed for it.

mod common;

use std::path::Path;

use callview::{AudioSelect, Limits};
use monitor::{Monitor, MonitorConfig};
use sensor::StoreMode;

fn captures() -> Vec<std::path::PathBuf> {
    let Some(dir) = common::shared_captures() else {
        return Vec::new();
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    files
}

/// The figures `tandem capture --read FILE` gives every stream of the file.
fn monitor_rows(path: &Path) -> Vec<cdr::CdrStream> {
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    m.read_file(path, |_| {}).unwrap();
    let a = m.finish();
    let mut rows: Vec<_> = a.all_streams().map(sensor::records::cdr_stream).collect();
    rows.sort_by(|a, b| {
        (a.start_us, &a.src, &a.dst, a.ssrc).cmp(&(b.start_us, &b.src, &b.dst, b.ssrc))
    });
    rows
}

#[test]
fn real_captures_read_whole() {
    let files = captures();
    let tshark = !files.is_empty() && common::have_tshark("the ladders of the real captures");
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy();
        let bytes = std::fs::read(path).unwrap();
        let view = callview::analyze(&bytes, &Limits::default()).unwrap();
        assert_eq!(view.read_error, None, "{name}");
        assert_eq!(view.ladder_left_out, 0, "{name}");
        if tshark {
            let frames: Vec<u64> = view.ladder.iter().map(|e| e.frame).collect();
            assert_eq!(
                frames,
                common::tshark_sip_frames(path),
                "{name}: SIP frames"
            );
        }
        // Hosts: every sender and receiver of the ladder, once, in order of appearance.
        let mut hosts: Vec<&str> = Vec::new();
        for e in &view.ladder {
            for h in [&e.src, &e.dst] {
                if !hosts.contains(&h.as_str()) {
                    hosts.push(h);
                }
            }
        }
        assert_eq!(view.hosts, hosts, "{name}");
        let mut ours: Vec<_> = view.streams.iter().map(|s| s.figures.clone()).collect();
        ours.sort_by(|a, b| {
            (a.start_us, &a.src, &a.dst, a.ssrc).cmp(&(b.start_us, &b.src, &b.dst, b.ssrc))
        });
        assert_eq!(ours, monitor_rows(path), "{name}: figures");
        for (k, s) in view.streams.iter().enumerate() {
            let what = format!("{name} stream {k}");
            let packets: u64 = s.intervals.iter().map(|i| i.packets).sum();
            assert_eq!(packets, s.figures.packets, "{what}");
            common::assert_seconds_lost(s, &what);
            assert_eq!(
                s.rtcp.len() as u32,
                s.figures.rtcp_reports,
                "{what}: RTCP reports"
            );
            if let Some(last) = s.rtcp.last() {
                assert_eq!(
                    Some(last.fraction_lost_pct),
                    s.figures.rtcp_fraction_lost_pct,
                    "{what}"
                );
                assert_eq!(last.jitter_ms, s.figures.rtcp_jitter_ms, "{what}");
            }
            // Every stream of these captures is G.711 A-law: it plays, as long as it says.
            let audio = s
                .audio
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: {:?}", s.audio_note));
            let wav = callview::wav(&bytes, AudioSelect::Stream(k), &Limits::default()).unwrap();
            let (_, samples) = common::wav_samples(&wav);
            assert_eq!(samples.len() as f64 / 8000.0, audio.seconds, "{what}");
            assert!(samples.iter().any(|&v| v != 0), "{what}: silent");
        }
    }
}

#[test]
fn real_calls_archived_and_read_back() {
    let files = captures();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy();
        let dir = tempfile::tempdir().unwrap();
        let calls = common::archived_calls(path, StoreMode::FullRtp, dir.path());
        for call in &calls {
            let what = format!("{name}: call {}", call.call_id);
            let view = callview::analyze(&call.pcap, &Limits::default()).unwrap();
            assert_eq!(view.read_error, None, "{what}");
            assert_eq!(
                view.ladder.len() as u64,
                call.sip_messages,
                "{what}: ladder"
            );
            assert!(
                view.ladder.iter().all(|e| e.call_id == call.call_id),
                "{what}"
            );
            assert_eq!(view.streams.len(), call.json_streams.len(), "{what}");
            for s in &view.streams {
                let j = call
                    .json_streams
                    .iter()
                    .find(|j| {
                        j["src"] == s.key.src.as_str()
                            && j["dst"] == s.key.dst.as_str()
                            && j["ssrc"] == format!("0x{:08X}", s.key.ssrc)
                    })
                    .unwrap_or_else(|| panic!("{what}: {:?} not in --json", s.key));
                assert_eq!(j["packets"], s.figures.packets, "{what}");
                assert_eq!(j["lost"], s.figures.lost, "{what}");
                assert_eq!(j["duplicates"], s.figures.duplicates, "{what}");
                for key in [
                    "mean_jitter_ms",
                    "max_jitter_ms",
                    "max_delta_ms",
                    "mean_delta_ms",
                ] {
                    let ours = match key {
                        "mean_jitter_ms" => s.figures.mean_jitter_ms,
                        "max_jitter_ms" => s.figures.max_jitter_ms,
                        "max_delta_ms" => s.figures.max_delta_ms,
                        _ => s.figures.mean_delta_ms,
                    };
                    assert_eq!(j[key].as_f64(), Some(common::round3(ours)), "{what}: {key}");
                }
                // RTCP: the monitor gives a report block to the stream on the RTCP packet's
                // path (`monitor::rtp::rtcp_reported_streams`), else to the latest stream of its
                // SSRC. In rtp_rtcp_sip_ipv4_udp.pcap a relay (200.57.7.196) forwards two calls'
                // audio with the same SSRCs, and 200.57.7.204's reports name SSRC 0xD2BD4E3E,
                // which flows on neither of their paths (the stream .196 sends it is
                // 0x58F33DEA): they fall back to the SSRC, whose latest stream is another one in
                // the whole capture than in the call's own pcap. Every report on its path
                // agrees; tshark cannot tell either (it matches by SSRC too).
                let reports = j["rtcp"]["reports"].as_u64().unwrap_or(0);
                let shared_ssrc = name == "rtp_rtcp_sip_ipv4_udp.pcap" && s.key.ssrc == 0xD2BD_4E3E;
                if !shared_ssrc {
                    assert_eq!(u64::from(s.figures.rtcp_reports), reports, "{what}: RTCP");
                }
                assert_eq!(
                    s.rtcp.len() as u64,
                    u64::from(s.figures.rtcp_reports),
                    "{what}: RTCP points"
                );
                let row = call
                    .cdr_streams
                    .iter()
                    .find(|r| r.src == s.key.src && r.dst == s.key.dst && r.ssrc == s.key.ssrc)
                    .unwrap_or_else(|| panic!("{what}: not in the CDR"));
                assert_eq!(
                    (row.packets, row.lost),
                    (s.figures.packets, s.figures.lost),
                    "{what}"
                );
            }
        }
    }
}
