//! `tandem capture --archive DIR` and `tandem cdr pcap CALL-ID` as a user runs them: every call
//! of real and synthetic captures is read back from the per-minute tars and opened with
//! `tshark`; GNU `tar` lists and extracts every tar; retention removes old minutes; HEP input is
//! archived like files; and `cdr pcap` fails clearly on what can go wrong.
//!
//! The real captures are read from `../shared/captures` beside the checkout; that part says so
//! and is skipped when the directory is absent. Parts that need `tshark`, `tar` or `script` are
//! skipped with a message when the tool is missing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use monitor::synth::{SynthConfig, generate};
use serde_json::Value;

fn tandem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem"));
    c.env("TANDEM_LOG", "warn").env_remove("RUST_BACKTRACE");
    c
}

fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_env::skip(&format!(
            "the {tool} part of this test: `{tool}` is not installed"
        ));
    }
    ok
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `tandem capture --read FILE --archive DIR --cdr-db DB` with extra arguments.
fn capture(pcap: &Path, dir: &Path, db: &Path, extra: &[&str]) {
    capture_files(&[pcap], dir, db, extra);
}

/// `tandem capture --read FILE... --archive DIR --cdr-db DB` with extra arguments; returns its
/// standard error (the archive's summary, and the calls it names).
fn capture_files(pcaps: &[&Path], dir: &Path, db: &Path, extra: &[&str]) -> String {
    let out = ok(
        tandem()
            .args(["capture", "--read"])
            .args(pcaps)
            .arg("--archive")
            .arg(dir)
            .arg("--cdr-db")
            .arg(db)
            .args(extra)
            .output()
            .unwrap(),
        "tandem capture",
    );
    String::from_utf8(out.stderr).unwrap()
}

/// Every stored call, as `tandem cdr list --json` prints it.
fn calls(db: &Path) -> Vec<Value> {
    let out = ok(
        tandem()
            .args(["cdr", "list", "--json", "--limit", "0", "--db"])
            .arg(db)
            .output()
            .unwrap(),
        "tandem cdr list",
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// RTP packets of the call's streams, from `tandem cdr show --json`.
fn stream_packets(db: &Path, call_id: &str) -> u64 {
    let out = ok(
        tandem()
            .args(["cdr", "show", "--json", call_id, "--db"])
            .arg(db)
            .output()
            .unwrap(),
        "tandem cdr show",
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["packets"].as_u64().unwrap())
        .sum()
}

/// `tandem cdr --db DB pcap CALL-ID` with stdout to a pipe.
fn cdr_pcap(db: &Path, call_id: &str) -> Output {
    tandem()
        .args(["cdr", "--db"])
        .arg(db)
        .args(["pcap", call_id])
        .stdout(Stdio::piped())
        .output()
        .unwrap()
}

/// One line per packet matching `filter`: the given fields, tab-separated.
fn tshark(file: &Path, filter: &str, fields: &[&str]) -> Vec<String> {
    tshark_with(file, &[], filter, fields)
}

/// [`tshark`] with preferences (`-o NAME:VALUE` each).
fn tshark_with(file: &Path, prefs: &[&str], filter: &str, fields: &[&str]) -> Vec<String> {
    let mut c = Command::new("tshark");
    c.arg("-r").arg(file);
    for p in prefs {
        c.args(["-o", p]);
    }
    c.args(["-Y", filter, "-T", "fields"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let out = ok(c.output().unwrap(), "tshark");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn sip_frames(file: &Path, call_id: &str) -> Vec<String> {
    tshark(
        file,
        &format!("sip.Call-ID == \"{call_id}\""),
        &["frame.time_epoch", "frame.len", "sip.CSeq"],
    )
}

fn all_tars(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(all_tars(&p));
        } else if p.extension().is_some_and(|x| x == "tar") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// What was checked for one call.
#[derive(Debug, PartialEq, Eq)]
struct CallCheck {
    sip: usize,
    rtp: usize,
}

/// Reads every stored call back with `cdr pcap` and checks it with tshark against the original
/// capture and the CDR; `tar` lists and extracts every tar. Returns per Call-ID what was seen.
fn check_archive(
    original: &Path,
    db: &Path,
    dir: &Path,
    work: &Path,
) -> BTreeMap<String, CallCheck> {
    check_archive_of(&[original], db, dir, work)
}

/// [`check_archive`] of a capture read from several files: each call's frames are in one of
/// them.
fn check_archive_of(
    originals: &[&Path],
    db: &Path,
    dir: &Path,
    work: &Path,
) -> BTreeMap<String, CallCheck> {
    let original = originals
        .iter()
        .map(|o| o.display().to_string())
        .collect::<Vec<_>>()
        .join(" + ");
    let mut seen = BTreeMap::new();
    let mut members: BTreeMap<PathBuf, Vec<(String, u64)>> = BTreeMap::new();
    for c in calls(db) {
        let id = c["call_id"].as_str().unwrap();
        let out = ok(cdr_pcap(db, id), &format!("cdr pcap {id}"));
        let file = work.join("call.pcap");
        std::fs::write(&file, &out.stdout).unwrap();
        // The same SIP frames as the call had: each one of the original's with this Call-ID,
        // as many as the CDR counted (all of them unless the capture has the Call-ID outside
        // the dialog too).
        let archived = sip_frames(&file, id);
        let original_frames: Vec<String> =
            originals.iter().flat_map(|o| sip_frames(o, id)).collect();
        assert_eq!(
            archived.len() as u64,
            c["sip_messages"].as_u64().unwrap(),
            "{original}: {id}: SIP frames archived vs the CDR's count"
        );
        for f in &archived {
            assert!(
                original_frames.contains(f),
                "{id}: {f} is not in the original"
            );
        }
        // The same RTP packets as the call's streams.
        let rtp = tshark(&file, "rtp", &["frame.number"]).len();
        assert_eq!(
            rtp as u64,
            stream_packets(db, id),
            "{original}: {id}: RTP packets archived vs the CDR's streams"
        );
        seen.insert(
            id.to_string(),
            CallCheck {
                sip: archived.len(),
                rtp,
            },
        );
        for kind in ["sip", "rtp"] {
            if let Some(tar) = c[format!("{kind}_tar")].as_str() {
                members.entry(PathBuf::from(tar)).or_default().push((
                    c[format!("{kind}_member")].as_str().unwrap().to_string(),
                    c[format!("{kind}_len")].as_u64().unwrap(),
                ));
            }
        }
    }
    // Each stream without a call: its own member, every frame of it one of the original's,
    // its RTP packets as many as its row counts (the rest is RTCP on it, some of which
    // tshark's heuristic does not take for RTCP).
    let all_frames: Vec<String> = originals
        .iter()
        .flat_map(|o| tshark(o, "frame", &["frame.time_epoch", "frame.len"]))
        .collect();
    for l in lone_streams(db) {
        let Some(tar) = &l.stream.rtp_tar else {
            panic!("{original}: {}: not archived", l.uid)
        };
        let file = work.join("stream.pcap");
        stream_pcap(db, &l.uid, &file);
        let frames = tshark(&file, "frame", &["frame.time_epoch", "frame.len"]);
        for f in &frames {
            assert!(
                all_frames.contains(f),
                "{}: {f} is not in the original",
                l.uid
            );
        }
        let (rtp, _) = ssrc_frames(&file, l.stream.ssrc);
        assert_eq!(
            rtp.len() as u64,
            l.stream.packets,
            "{original}: {}: RTP packets archived vs its row",
            l.uid
        );
        seen.insert(
            l.uid.clone(),
            CallCheck {
                sip: 0,
                rtp: rtp.len(),
            },
        );
        members.entry(PathBuf::from(tar)).or_default().push((
            l.stream.rtp_member.clone().unwrap(),
            l.stream.rtp_len.unwrap(),
        ));
    }
    // Every tar is listed by GNU tar with exactly the members the CDRs point at, and extracts.
    let tars = all_tars(dir);
    assert_eq!(tars, members.keys().cloned().collect::<Vec<_>>());
    if have("tar") {
        for (tar, expected) in &members {
            let out = ok(
                Command::new("tar").arg("-tf").arg(tar).output().unwrap(),
                "tar -tf",
            );
            let mut listed: Vec<String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            let mut names: Vec<String> = expected.iter().map(|(n, _)| n.clone()).collect();
            listed.sort();
            names.sort();
            assert_eq!(listed, names, "{}", tar.display());
            let into = work.join("extracted");
            let _ = std::fs::remove_dir_all(&into);
            std::fs::create_dir_all(&into).unwrap();
            ok(
                Command::new("tar")
                    .arg("-xf")
                    .arg(tar)
                    .arg("-C")
                    .arg(&into)
                    .output()
                    .unwrap(),
                "tar -xf",
            );
            for (name, len) in expected {
                let got = std::fs::metadata(into.join(name)).unwrap().len();
                assert_eq!(got, *len, "{name} extracted from {}", tar.display());
            }
        }
    }
    seen
}

fn shared_captures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if dir.is_dir() {
        Some(dir)
    } else {
        test_env::skip(
            "the real captures are read from ../shared/captures beside the checkout, which is absent",
        );
        None
    }
}

#[test]
fn real_captures_every_call_reads_back_with_the_same_packets() {
    let Some(captures) = shared_captures() else {
        return;
    };
    if !have("tshark") {
        return;
    }
    for name in [
        "rtp_rtcp_sip_ipv4_udp.pcap",
        "sip_ipv4_tcp.pcap",
        "sip_ipv6_udp.pcap",
        "ipip0.pcap",
        "aaa.pcap",
    ] {
        let original = captures.join(name);
        let mut by_shards = Vec::new();
        for shards in ["1", "2"] {
            let work = tempfile::tempdir().unwrap();
            let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
            capture(
                &original,
                &dir,
                &db,
                &["--archive-store", "full", "--shards", shards],
            );
            let seen = check_archive(&original, &db, &dir, work.path());
            assert!(!seen.is_empty(), "{name}: no call archived");
            by_shards.push(seen);
        }
        assert_eq!(
            by_shards[0], by_shards[1],
            "{name}: one shard and two agree"
        );
    }
}

/// Reads `pcaps` in the order given, with one shard and with two, and checks that every call
/// kept its packets: each call read back with its SIP (and its RTP) as in the originals,
/// nothing orphaned or named as lost. Returns what was seen.
fn archived_whatever_the_order(
    pcaps: &[&Path],
    calls_expected: usize,
) -> BTreeMap<String, CallCheck> {
    let mut by_shards = Vec::new();
    for shards in ["1", "2"] {
        let work = tempfile::tempdir().unwrap();
        let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
        let err = capture_files(
            pcaps,
            &dir,
            &db,
            &["--archive-store", "full", "--shards", shards],
        );
        let summary = err
            .lines()
            .find(|l| l.starts_with("archive "))
            .unwrap_or_else(|| panic!("no archive summary: {err}"));
        assert!(
            summary.contains(" 0 late; 0 orphaned calls"),
            "{pcaps:?}, {shards} shard(s): {summary}"
        );
        assert!(!err.contains("not archived whole"), "{err}");
        let stored = calls(&db);
        assert_eq!(stored.len(), calls_expected, "{pcaps:?}");
        for c in &stored {
            assert!(
                c["sip_tar"].is_string(),
                "{pcaps:?}, {shards} shard(s): no SIP archived: {c}"
            );
        }
        by_shards.push(check_archive_of(pcaps, &db, &dir, work.path()));
    }
    assert_eq!(
        by_shards[0], by_shards[1],
        "{pcaps:?}: one shard and two agree"
    );
    by_shards.pop().unwrap()
}

/// A capture read as `--read *.pcap` often reads it: a later file first, then one from months
/// before. Every call keeps its packets, as when each file is read alone.
#[test]
fn real_captures_read_back_in_time_keep_every_call_archived() {
    let Some(captures) = shared_captures() else {
        return;
    };
    if !have("tshark") {
        return;
    }
    // 2005-07-04, then 2005-01-14.
    let (later, earlier) = (
        captures.join("aaa.pcap"),
        captures.join("rtp_rtcp_sip_ipv4_udp.pcap"),
    );
    let alone: BTreeMap<String, CallCheck> = [&later, &earlier]
        .iter()
        .flat_map(|f| archived_whatever_the_order(&[f.as_path()], count_calls(f)))
        .collect();
    // The calls, and the streams without a call beside them (named by their uid).
    let calls = alone.keys().filter(|k| !k.contains("|rtp|")).count();
    let both = archived_whatever_the_order(&[&later, &earlier], calls);
    assert_eq!(both, alone);
    // The SIP of the earlier file's answered call, and its RTP.
    assert!(both["12013223@200.57.7.195"].sip > 0 && both["12013223@200.57.7.195"].rtp > 0);
}

/// Calls `tandem capture --read FILE --no-store` reports for one file.
fn count_calls(pcap: &Path) -> usize {
    let out = ok(
        tandem()
            .args(["capture", "--json", "--no-store", "--read"])
            .arg(pcap)
            .output()
            .unwrap(),
        "tandem capture --json",
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"kind\":\"call\""))
        .count()
}

/// Twelve synthetic calls split at their middle, the first six moved a day back: read later
/// part first, as two files and as one file whose clock steps back; every call keeps its SIP
/// and RTP.
#[test]
fn synthetic_calls_read_back_in_time_keep_every_call_archived() {
    if !have("tshark") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let pcap = work.path().join("calls.pcap");
    minutes_of_calls(&pcap);
    let mut r = monitor::pcap::CaptureReader::open(&pcap).unwrap();
    let mut packets = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        packets.push((p.ts_ns, p.link_type, p.data.to_vec()));
    }
    // Calls start 30 s apart and last about 2 s: call 6 starts 180 s after call 0.
    let split = packets[0].0 + 175_000_000_000;
    let day = 86_400_000_000_000i64;
    let (earlier, later): (Vec<_>, Vec<_>) = packets.into_iter().partition(|p| p.0 < split);
    let earlier: Vec<_> = earlier
        .into_iter()
        .map(|(t, l, d)| (t - day, l, d))
        .collect();
    let write = |name: &str, parts: &[&[(i64, u32, Vec<u8>)]]| {
        let path = work.path().join(name);
        let mut w =
            monitor::pcap::PcapWriter::new(std::fs::File::create(&path).unwrap(), 1, true).unwrap();
        for (ts, _, data) in parts.iter().flat_map(|p| p.iter()) {
            w.write_packet(*ts, data).unwrap();
        }
        path
    };
    let (early_file, late_file) = (
        write("earlier.pcap", &[&earlier]),
        write("later.pcap", &[&later]),
    );
    let stepping_back = write("stepping-back.pcap", &[&later, &earlier]);
    let seen = archived_whatever_the_order(&[&late_file, &early_file], 12);
    // Calls 8 (cancelled) and 9 (busy) have no media.
    assert!(seen.values().all(|c| c.sip > 0), "{seen:?}");
    assert_eq!(seen.values().filter(|c| c.rtp > 0).count(), 10, "{seen:?}");
    assert_eq!(archived_whatever_the_order(&[&stepping_back], 12), seen);
}

/// A call whose packets go over the archive's limit per call is named on stderr, and the
/// packets left out are counted.
#[test]
fn calls_not_archived_whole_are_named() {
    let work = tempfile::tempdir().unwrap();
    let pcap = work.path().join("long.pcap");
    // A minute of G.711 both ways with whole packets: about 1.4 MB of RTP, over 1 MiB.
    let cfg = SynthConfig {
        calls: 1,
        call_duration_ms: 60_000,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    // And 100 s of RTP without SIP: 1.15 MB of it.
    let lone = work.path().join("lone.pcap");
    let mut b = monitor::synth::PcapBuilder::create(&lone).unwrap();
    b.pcma_run(
        1_795_248_540_000_000_000,
        flow("10.9.9.9:30000", "10.9.9.8:30002"),
        0xAB,
        0,
        5000,
    );
    b.finish().unwrap();
    let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
    let err = capture_files(
        &[&pcap, &lone],
        &dir,
        &db,
        &["--archive-store", "full", "--archive-call-max-mib", "1"],
    );
    let summary = err.lines().find(|l| l.starts_with("archive ")).unwrap();
    let at_limits: u64 = summary
        .split(", ")
        .find_map(|p| p.strip_suffix(" at limits"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(at_limits > 0, "{summary}");
    assert!(
        err.contains(
            "calls not archived whole: at limits: synth-0@tandem.test, \
             stream 10.9.9.9:30000>10.9.9.8:30002 0x000000AB"
        ),
        "{err}"
    );
    // What was kept of the stream is still its own, read back as a pcap.
    let streams = lone_streams(&db);
    assert_eq!(streams[0].stream.packets, 5000);
    let out = work.path().join("stream.pcap");
    stream_pcap(&db, &streams[0].uid, &out);
    let kept = std::fs::metadata(&out).unwrap().len();
    assert!(kept > 1_000_000 && kept <= 1 << 20, "{kept} bytes");
}

/// The streams stored without a call, newest first, as the console's Streams page lists them.
fn lone_streams(db: &Path) -> Vec<cdr::lone::LoneStream> {
    use cdr::CdrStore;
    let q = cdr::lone::StreamQuery {
        limit: 500,
        ..Default::default()
    };
    let mut store = cdr::SqliteStore::open(db).unwrap();
    store.lone_streams(&q).unwrap().streams
}

/// `tandem cdr pcap UID` of a stream without a call, written to `out`.
fn stream_pcap(db: &Path, uid: &str, out: &Path) {
    let pcap = ok(cdr_pcap(db, uid), "tandem cdr pcap (a stream's uid)");
    std::fs::write(out, pcap.stdout).unwrap();
}

/// Time, length and RTP sequence of every packet of `ssrc` in `file`, and every RTCP packet
/// reporting on it (tshark's heuristics: no SDP names these ports).
fn ssrc_frames(file: &Path, ssrc: u32) -> (Vec<String>, Vec<String>) {
    let prefs = ["rtp.heuristic_rtp:TRUE", "rtcp.heuristic_rtcp:TRUE"];
    (
        tshark_with(
            file,
            &prefs,
            &format!("rtp.ssrc == {ssrc:#x}"),
            &["frame.time_epoch", "frame.len", "rtp.seq"],
        ),
        tshark_with(
            file,
            &prefs,
            &format!("rtcp.ssrc.identifier == {ssrc:#x}"),
            &["frame.time_epoch", "frame.len"],
        ),
    )
}

/// Real PCMA RTP with no SIP: stored as a stream without a call, with its own member in the
/// minute's `rtp.tar`, and `tandem cdr pcap UID` gives exactly tshark's packets of its SSRC,
/// whole or cut to their RTP headers, with one shard and two.
#[test]
fn real_capture_of_rtp_without_signalling_is_archived_as_its_stream() {
    let Some(captures) = shared_captures() else {
        return;
    };
    if !have("tshark") {
        return;
    }
    let original = captures.join("g711a-rtp-only.pcap");
    let (want, _) = ssrc_frames(&original, 0xDEE0_EE8F);
    assert_eq!(want.len(), 236, "tshark's packets of the SSRC");
    for (store, shards) in [("full", "1"), ("full", "2"), ("headers", "1")] {
        let work = tempfile::tempdir().unwrap();
        let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
        let err = capture_files(
            &[&original],
            &dir,
            &db,
            &["--archive-store", store, "--shards", shards],
        );
        assert!(err.contains("0 calls, 1 stream without a call"), "{err}");
        assert!(calls(&db).is_empty());
        let streams = lone_streams(&db);
        assert_eq!(streams.len(), 1);
        let s = &streams[0];
        assert_eq!(s.stream.ssrc, 0xDEE0_EE8F);
        // `tandem cdr streams` finds it as the console does, with the uid `pcap` takes.
        for (filter, found) in [
            (["--ip", "10.1.6.18", "--port", "2006"], 1),
            (["--ssrc", "0xdee0ee8f", "--limit", "5"], 1),
            (["--ssrc", "3739283087", "--port", "5000"], 1),
            (["--ip", "10.1.6.18", "--port", "2007"], 0),
        ] {
            let out = ok(
                tandem()
                    .args(["cdr", "--db"])
                    .arg(&db)
                    .args(["streams", "--json"])
                    .args(filter)
                    .output()
                    .unwrap(),
                "tandem cdr streams",
            );
            let lines: Vec<Value> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(lines.len(), found, "{filter:?}");
            if found == 1 {
                assert_eq!(lines[0]["uid"], s.uid.as_str(), "{filter:?}");
            }
        }
        assert!(
            s.uid
                .starts_with("local|rtp|10.1.3.143:5000|10.1.6.18:2006|3739283087|")
        );
        let tar = s.stream.rtp_tar.as_deref().expect("its member is named");
        assert!(tar.ends_with("/2002-07-26/06/19/rtp.tar"), "{tar}");
        assert_eq!(all_tars(&dir), [PathBuf::from(tar)], "no SIP tar: no call");
        let out = work.path().join("stream.pcap");
        stream_pcap(&db, &s.uid, &out);
        let (got, _) = ssrc_frames(&out, 0xDEE0_EE8F);
        if store == "full" {
            assert_eq!(
                got, want,
                "{store}, {shards} shards: the stream's packets, whole"
            );
        } else {
            // Cut after the RTP header: the same packets, each 160 bytes of audio shorter.
            assert_eq!(got.len(), want.len(), "{store}");
            let seq = |l: &String| l.split('\t').nth(2).unwrap().to_string();
            assert_eq!(
                got.iter().map(seq).collect::<Vec<_>>(),
                want.iter().map(seq).collect::<Vec<_>>()
            );
        }
        assert_eq!(s.stream.packets, 236);
    }
}

const MS: i64 = 1_000_000;

/// A flow's source and destination.
fn flow(src: &str, dst: &str) -> (std::net::SocketAddr, std::net::SocketAddr) {
    (src.parse().unwrap(), dst.parse().unwrap())
}

/// A SIP message of the call `late-sdp@tandem.test` between 10.0.0.1 and 10.0.0.2.
fn late_sdp_sip(start: &str, cseq: &str, to_tag: bool, body: Option<&str>) -> String {
    let mut m = format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{}\r\n\
         From: <sip:100@10.0.0.1>;tag=a\r\nTo: <sip:200@10.0.0.2>{}\r\n\
         Call-ID: late-sdp@tandem.test\r\nCSeq: {cseq}\r\nContact: <sip:100@10.0.0.1>\r\n",
        cseq.replace(' ', ""),
        if to_tag { ";tag=b" } else { "" }
    );
    match body {
        Some(b) => {
            m += &format!(
                "Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            )
        }
        None => m += "Content-Length: 0\r\n\r\n",
    }
    m
}

/// Two kinds of media without SIP before it, in one capture: a stream no SIP ever announces
/// (with RTCP reports on it, and a second one beside it), and a callee's stream that starts
/// before the INVITE announcing where it goes. The first two are archived as streams of their
/// own (`cdr pcap UID`: exactly tshark's RTP of the SSRC and the RTCP on it); the third is its
/// call's, whose pcap holds all of it; with one, two and three shards.
#[test]
fn media_without_sip_is_archived_as_its_stream_or_its_late_call() {
    if !have("tshark") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let original = work.path().join("media.pcap");
    let mut b = monitor::synth::PcapBuilder::create(&original).unwrap();
    let t0 = 1_795_248_540_000_000_000; // 2026-11-21T08:09:00Z
    let sdp = |ip: &str, port: u16| {
        format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n"
        )
    };
    let (lone, other) = (
        flow("10.9.9.9:30000", "10.9.9.8:30002"),
        flow("10.9.9.7:31000", "10.9.9.6:31002"),
    );
    let (sip_a, sip_b) = (
        "10.0.0.1:5060".parse().unwrap(),
        "10.0.0.2:5060".parse().unwrap(),
    );
    let mut t = t0;
    // The callee's audio first, to the caller's media address the INVITE then announces.
    t = b.pcma_run(t, flow("10.0.0.2:5000", "10.0.0.1:4000"), 0xB0B, 0, 10);
    let invite = late_sdp_sip(
        "INVITE sip:200@10.0.0.2 SIP/2.0",
        "1 INVITE",
        false,
        Some(&sdp("10.0.0.1", 4000)),
    );
    b.udp(t, sip_a, sip_b, invite.as_bytes());
    let ok200 = late_sdp_sip(
        "SIP/2.0 200 OK",
        "1 INVITE",
        true,
        Some(&sdp("10.0.0.2", 5000)),
    );
    b.udp(t + 20 * MS, sip_b, sip_a, ok200.as_bytes());
    let ack = late_sdp_sip("ACK sip:200@10.0.0.2 SIP/2.0", "1 ACK", true, None);
    b.udp(t + 30 * MS, sip_a, sip_b, ack.as_bytes());
    t += 40 * MS;
    for k in 0..3u16 {
        let t1 = b.pcma_run(
            t,
            flow("10.0.0.2:5000", "10.0.0.1:4000"),
            0xB0B,
            10 + 40 * k,
            40,
        );
        b.pcma_run(
            t + MS,
            flow("10.0.0.1:4000", "10.0.0.2:5000"),
            0xA0A,
            40 * k,
            40,
        );
        b.pcma_run(t + 2 * MS, lone, 0xAB, 40 * k, 40);
        b.pcma_run(t + 3 * MS, other, 0xCD, 40 * k, 40);
        t = t1 + 5 * MS;
        let mut rr = vec![0x81, 201, 0, 7];
        rr.extend_from_slice(&0x5EED_u32.to_be_bytes());
        rr.extend_from_slice(&0xABu32.to_be_bytes());
        rr.extend_from_slice(&[0, 0, 0, 0]);
        rr.extend_from_slice(&(40 * u32::from(k) + 39).to_be_bytes());
        rr.extend_from_slice(&[0; 12]);
        b.udp(
            t,
            "10.9.9.8:30003".parse().unwrap(),
            "10.9.9.9:30001".parse().unwrap(),
            &rr,
        );
    }
    let bye = late_sdp_sip("BYE sip:200@10.0.0.2 SIP/2.0", "2 BYE", true, None);
    b.udp(t + 20 * MS, sip_a, sip_b, bye.as_bytes());
    let bye_ok = late_sdp_sip("SIP/2.0 200 OK", "2 BYE", true, None);
    b.udp(t + 30 * MS, sip_b, sip_a, bye_ok.as_bytes());
    b.finish().unwrap();
    let (want_lone, want_rtcp) = ssrc_frames(&original, 0xAB);
    assert_eq!((want_lone.len(), want_rtcp.len()), (120, 3), "tshark");
    let (want_late, _) = ssrc_frames(&original, 0xB0B);
    assert_eq!(want_late.len(), 130);
    for shards in ["1", "2", "3"] {
        let work = tempfile::tempdir().unwrap();
        let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
        let err = capture_files(
            &[&original],
            &dir,
            &db,
            &["--archive-store", "full", "--shards", shards],
        );
        assert!(
            err.contains("1 call, 2 streams without a call"),
            "{shards} shards: {err}"
        );
        assert!(!err.contains("not archived whole"), "{err}");
        let streams = lone_streams(&db);
        let ssrcs: Vec<u32> = streams.iter().map(|s| s.stream.ssrc).collect();
        assert_eq!(
            ssrcs,
            [0xCD, 0xAB],
            "{shards} shards: the late stream is the call's"
        );
        let out = work.path().join("lone.pcap");
        stream_pcap(&db, &streams[1].uid, &out);
        let (got, rtcp) = ssrc_frames(&out, 0xAB);
        assert_eq!(got, want_lone, "{shards} shards: its RTP");
        assert_eq!(rtcp, want_rtcp, "{shards} shards: and the RTCP on it");
        let (none, _) = ssrc_frames(&out, 0xCD);
        assert!(
            none.is_empty(),
            "{shards} shards: nothing of the other stream"
        );
        // The call's pcap holds its late stream whole, the packets before the INVITE too.
        let out = work.path().join("call.pcap");
        let pcap = ok(cdr_pcap(&db, "late-sdp@tandem.test"), "tandem cdr pcap");
        std::fs::write(&out, pcap.stdout).unwrap();
        let (got, _) = ssrc_frames(&out, 0xB0B);
        assert_eq!(
            got, want_late,
            "{shards} shards: the call has its late stream whole"
        );
        assert_eq!(
            stream_packets(&db, "late-sdp@tandem.test"),
            250,
            "{shards} shards"
        );
    }
}

/// Twelve calls, one every 30 s: six minutes of capture time.
fn minutes_of_calls(path: &Path) {
    let cfg = SynthConfig {
        calls: 12,
        call_interval_us: 30_000_000,
        call_duration_ms: 2_000,
        loss_pct: 1.0,
        seed: 5,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(path).unwrap()).unwrap();
}

#[test]
fn synthetic_calls_over_six_minutes_keep_rtp_headers_only() {
    if !have("tshark") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let pcap = work.path().join("calls.pcap");
    minutes_of_calls(&pcap);
    let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
    capture(&pcap, &dir, &db, &[]); // the default: SIP, and RTP headers
    let seen = check_archive(&pcap, &db, &dir, work.path());
    assert_eq!(seen.len(), 12);
    // Every SIP frame of the original is there for each call (none is shared by calls).
    for id in seen.keys() {
        let out = cdr_pcap(&db, id);
        let file = work.path().join("one.pcap");
        std::fs::write(&file, &out.stdout).unwrap();
        assert_eq!(sip_frames(&file, id), sip_frames(&pcap, id), "{id}");
        // RTP is cut after its 12-byte header: 14 + 20 + 8 + 12 bytes of each 214-byte frame.
        for line in tshark(&file, "rtp", &["frame.cap_len", "frame.len"]) {
            assert_eq!(line, "54\t214", "{id}");
        }
    }
    let minutes: Vec<_> = all_tars(&dir)
        .iter()
        .map(|t| t.parent().unwrap().to_path_buf())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(minutes.len() >= 6, "{minutes:?}");
}

#[test]
fn retention_removes_old_minutes_and_their_calls_say_so() {
    let work = tempfile::tempdir().unwrap();
    let pcap = work.path().join("calls.pcap");
    minutes_of_calls(&pcap);
    let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
    capture(&pcap, &dir, &db, &["--archive-max-age-sec", "120"]);
    let all = calls(&db);
    assert_eq!(all.len(), 12);
    let kept: Vec<&Value> = all
        .iter()
        .filter(|c| Path::new(c["sip_tar"].as_str().unwrap()).exists())
        .collect();
    // The capture ends about 5.5 min after its start; minutes that ended over 2 min before
    // that are gone, the newer ones stay.
    assert!(
        (3..=7).contains(&kept.len()),
        "{} of 12 calls kept",
        kept.len()
    );
    let days = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(days, 1, "one day directory left");
    let gone = all
        .iter()
        .find(|c| !Path::new(c["sip_tar"].as_str().unwrap()).exists())
        .unwrap();
    let out = cdr_pcap(&db, gone["call_id"].as_str().unwrap());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is missing (deleted by retention"), "{err}");
    assert!(
        cdr_pcap(&db, kept[0]["call_id"].as_str().unwrap())
            .status
            .success()
    );
    // By total size: the oldest minutes go until the rest fits.
    let (dir2, db2) = (work.path().join("small"), work.path().join("small.sqlite3"));
    capture(&pcap, &dir2, &db2, &["--archive-max-total-bytes", "40000"]);
    let total: u64 = all_tars(&dir2)
        .iter()
        .map(|t| std::fs::metadata(t).unwrap().len())
        .sum();
    assert!(total <= 40_000 && total > 0, "{total} bytes left");
}

#[test]
fn cdr_pcap_errors_say_what_is_wrong() {
    let work = tempfile::tempdir().unwrap();
    let pcap = work.path().join("calls.pcap");
    let cfg = SynthConfig {
        calls: 3,
        failures: false,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
    capture(&pcap, &dir, &db, &[]);
    let stderr = |out: Output| {
        assert!(!out.status.success());
        assert!(out.stdout.is_empty(), "nothing on stdout after an error");
        String::from_utf8(out.stderr).unwrap()
    };
    let err = stderr(cdr_pcap(&db, "nope@nowhere"));
    assert!(
        err.contains("no call with Call-ID \"nope@nowhere\""),
        "{err}"
    );

    // Captured without --archive.
    let plain = work.path().join("plain.sqlite3");
    ok(
        tandem()
            .args(["capture", "--read"])
            .arg(&pcap)
            .arg("--cdr-db")
            .arg(&plain)
            .output()
            .unwrap(),
        "capture",
    );
    let err = stderr(cdr_pcap(&plain, "synth-0@tandem.test"));
    assert!(err.contains("has no archived packets"), "{err}");

    let all = calls(&db);
    let call = |i: usize| {
        all.iter()
            .find(|c| c["call_id"] == format!("synth-{i}@tandem.test"))
            .unwrap()
    };
    // A member header overwritten: the tar no longer says what the CDR says.
    let c0 = call(0);
    let sip_tar = PathBuf::from(c0["sip_tar"].as_str().unwrap());
    let mut bytes = std::fs::read(&sip_tar).unwrap();
    let header = c0["sip_offset"].as_u64().unwrap() as usize - 512;
    bytes[header..header + 8].copy_from_slice(b"garbage!");
    std::fs::write(&sip_tar, &bytes).unwrap();
    let err = stderr(cdr_pcap(&db, "synth-0@tandem.test"));
    assert!(err.contains("is damaged or was rewritten"), "{err}");
    // A tar cut short before the member.
    let c1 = call(1);
    let rtp_tar = PathBuf::from(c1["rtp_tar"].as_str().unwrap());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&rtp_tar)
        .unwrap();
    f.set_len(c1["rtp_offset"].as_u64().unwrap() + 10).unwrap();
    drop(f);
    let err = stderr(cdr_pcap(&db, "synth-1@tandem.test"));
    assert!(err.contains("is damaged: it ends before member"), "{err}");
    // The file gone.
    std::fs::remove_file(&sip_tar).unwrap();
    let err = stderr(cdr_pcap(&db, "synth-2@tandem.test"));
    assert!(err.contains("is missing"), "{err}");

    // Binary is not written to a terminal (`script` gives the command one).
    if have("script") {
        let cmd = format!(
            "{} cdr --db {} pcap synth-2@tandem.test",
            env!("CARGO_BIN_EXE_tandem"),
            db.display()
        );
        let out = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("refusing to write a pcap to a terminal"),
            "{text}"
        );
        assert!(!out.status.success());
    }
}

/// A call sent as HEP v3 is archived like a captured one: the live sources share the wiring.
#[test]
fn hep_input_is_archived_like_a_file() {
    use std::io::{BufRead, BufReader};

    let work = tempfile::tempdir().unwrap();
    let (dir, db) = (work.path().join("archive"), work.path().join("cdr.sqlite3"));
    let port = common::free_udp_port();
    let mut child = tandem()
        .args(["capture", "--hep-listen", &format!("127.0.0.1:{port}")])
        .args(["--hep-max-packets", "6", "--archive"])
        .arg(&dir)
        .arg("--cdr-db")
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("listening for HEP v3"), "{line}");
    let call_id = "hep-archive@192.0.2.10";
    common::send_udp(port, &common::one_call_as_hep(call_id));
    assert!(child.wait().unwrap().success());
    let c = calls(&db);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["sip_compression"], "zstd");
    assert!(
        c[0]["sip_tar"]
            .as_str()
            .unwrap()
            .ends_with("2026-11-21/05/30/sip.tar"),
        "{}",
        c[0]
    );
    let out = ok(cdr_pcap(&db, call_id), "cdr pcap");
    if have("tshark") {
        let file = work.path().join("hep.pcap");
        std::fs::write(&file, &out.stdout).unwrap();
        let cseqs: Vec<String> = tshark(&file, "sip", &["sip.CSeq"]);
        assert_eq!(
            cseqs,
            [
                "1 INVITE", "1 INVITE", "1 INVITE", "1 ACK", "2 BYE", "2 BYE"
            ]
        );
    }
}

/// An SRTP call with an SDES key: INVITE and 200 with `RTP/SAVP` and `a=crypto`, then RTP
/// (encrypted payload, clear header) both ways, then BYE.
fn write_srtp_call(path: &Path, keys: [&str; 2]) {
    use monitor::synth::PcapBuilder;
    use monitor::synth::packet::write_rtp;
    use std::net::SocketAddr;
    let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
    let (a, b) = (at("10.9.0.1:5060"), at("10.9.0.2:5060"));
    let (a_rtp, b_rtp) = (at("10.9.0.1:4000"), at("10.9.0.2:5000"));
    let sdp = |ip: &str, port: u16, key: &str| {
        format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio {port} RTP/SAVP 8\r\na=rtpmap:8 PCMA/8000\r\n\
             a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:{key}|2^20|1:32\r\n"
        )
    };
    let msg = |start: &str, cseq: &str, to_tag: &str, body: &str| {
        format!(
            "{start}\r\nVia: SIP/2.0/UDP 10.9.0.1:5060;branch=z9hG4bK{}\r\n\
             From: <sip:100@10.9.0.1>;tag=a\r\nTo: <sip:200@10.9.0.2>{to_tag}\r\n\
             Call-ID: srtp-1@tandem.test\r\nCSeq: {cseq}\r\n\
             Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
            cseq.replace(' ', ""),
            body.len()
        )
    };
    let mut w = PcapBuilder::create(path).unwrap();
    let mut put =
        |t: i64, src: SocketAddr, dst: SocketAddr, payload: &[u8]| w.udp(t, src, dst, payload);
    let mut t = 1_700_000_000_000_000_000i64;
    let invite = msg(
        "INVITE sip:200@10.9.0.2 SIP/2.0",
        "1 INVITE",
        "",
        &sdp("10.9.0.1", 4000, keys[0]),
    );
    put(t, a, b, invite.as_bytes());
    t += 20_000_000;
    let ok = msg(
        "SIP/2.0 200 OK",
        "1 INVITE",
        ";tag=b",
        &sdp("10.9.0.2", 5000, keys[1]),
    );
    put(t, b, a, ok.as_bytes());
    t += 10_000_000;
    put(
        t,
        a,
        b,
        msg("ACK sip:200@10.9.0.2 SIP/2.0", "1 ACK", ";tag=b", "").as_bytes(),
    );
    let mut rtp = Vec::new();
    for n in 0..40u16 {
        t += 20_000_000;
        for (dir, (src, dst)) in [(a_rtp, b_rtp), (b_rtp, a_rtp)].into_iter().enumerate() {
            rtp.clear();
            write_rtp(
                &mut rtp,
                8,
                n == 0,
                n,
                160 * u32::from(n),
                0x500 + dir as u32,
                170,
                0x3c,
            );
            put(t, src, dst, &rtp);
        }
    }
    t += 50_000_000;
    put(
        t,
        a,
        b,
        msg("BYE sip:200@10.9.0.2 SIP/2.0", "2 BYE", ";tag=b", "").as_bytes(),
    );
    t += 10_000_000;
    put(
        t,
        b,
        a,
        msg("SIP/2.0 200 OK", "2 BYE", ";tag=b", "").as_bytes(),
    );
}

#[test]
fn sdes_keys_appear_nowhere_tandem_writes() {
    let keys = [
        "WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz",
        "QUJjZGVmMTIzNDU2Nzg5QUJDREUwMTIzNDU2Nzg5",
    ];
    let tmp = tempfile::tempdir().unwrap();
    let pcap = tmp.path().join("srtp.pcap");
    write_srtp_call(&pcap, keys);
    let (dir, db) = (tmp.path().join("archive"), tmp.path().join("cdr.sqlite3"));
    let out = ok(
        tandem()
            .env("TANDEM_LOG", "debug")
            .args(["capture", "--json", "--archive-store", "full", "--read"])
            .arg(&pcap)
            .arg("--archive")
            .arg(&dir)
            .arg("--cdr-db")
            .arg(&db)
            .output()
            .unwrap(),
        "tandem capture",
    );
    let json = String::from_utf8(out.stdout).unwrap();
    let log = String::from_utf8(out.stderr).unwrap();
    // The streams are marked encrypted, and their header figures are still there.
    let streams: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["kind"] == "rtp_stream")
        .collect();
    assert_eq!(streams.len(), 2, "{json}");
    for s in &streams {
        assert_eq!(
            (s["encrypted"].as_bool(), s["packets"].as_u64()),
            (Some(true), Some(40))
        );
    }
    let pcap_out = cdr_pcap(&db, "srtp-1@tandem.test");
    assert!(
        pcap_out.status.success(),
        "{}",
        String::from_utf8_lossy(&pcap_out.stderr)
    );
    let archived = pcap_out.stdout;
    assert!(
        archived.windows(7).any(|w| w == b"inline:"),
        "the archived SIP keeps its crypto lines"
    );
    let mut everything: Vec<(String, Vec<u8>)> = vec![
        ("--json output".into(), json.into_bytes()),
        ("log".into(), log.into_bytes()),
        ("CDR database".into(), std::fs::read(&db).unwrap()),
        ("archived call (cdr pcap)".into(), archived),
    ];
    for f in walk(&dir) {
        everything.push((f.display().to_string(), std::fs::read(&f).unwrap()));
    }
    for (what, bytes) in &everything {
        for key in keys {
            // The key's first 12 characters are enough to find any copy of it.
            let probe = &key.as_bytes()[..12];
            assert!(
                !bytes.windows(probe.len()).any(|w| w == probe),
                "an SDES key is in the {what}"
            );
        }
    }
}

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
