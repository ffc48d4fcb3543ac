//! Helpers shared by the integration tests: where the shared captures are, and running tshark.

#![allow(dead_code)]

pub mod calls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `shared/` beside the repository (or `TANDEM_SHARED_DIR`); None when absent.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TANDEM_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    if dir.join("captures").is_dir() {
        Some(dir)
    } else {
        test_env::skip(&format!(
            "no shared captures at {} (set TANDEM_SHARED_DIR)",
            dir.display()
        ));
        None
    }
}

pub fn have_tshark() -> bool {
    let ok = Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_env::skip("tshark is not installed (CI installs Debian's tshark)");
    }
    ok
}

/// One line of `tshark -z rtp,streams`.
#[derive(Debug, Clone, PartialEq)]
pub struct TsharkStream {
    pub src: String,
    pub dst: String,
    pub ssrc: u32,
    pub payload: String,
    pub packets: u64,
    pub lost: i64,
    pub min_delta_ms: f64,
    pub mean_delta_ms: f64,
    pub max_delta_ms: f64,
    pub min_jitter_ms: f64,
    pub mean_jitter_ms: f64,
    pub max_jitter_ms: f64,
}

/// Runs `tshark -q -z rtp,streams` with heuristic RTP on (streams without signalling count too)
/// and the extra `-d` decode-as rules given.
pub fn tshark_rtp_streams(file: &Path, extra: &[&str]) -> Vec<TsharkStream> {
    let out = Command::new("tshark")
        .args(["-n", "-q", "-o", "rtp.heuristic_rtp:TRUE"])
        .args(extra)
        .args(["-z", "rtp,streams", "-r"])
        .arg(file)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut v = Vec::new();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = t
            .iter()
            .position(|x| x.starts_with('(') && x.ends_with("%)"))
        else {
            continue;
        };
        if t.len() < i + 7 || !t[6].starts_with("0x") {
            continue;
        }
        v.push(TsharkStream {
            src: format!("{}:{}", t[2], t[3]),
            dst: format!("{}:{}", t[4], t[5]),
            ssrc: u32::from_str_radix(&t[6][2..], 16).unwrap(),
            payload: t[7..i - 2].join(" "),
            packets: t[i - 2].parse().unwrap(),
            lost: t[i - 1].parse().unwrap(),
            min_delta_ms: t[i + 1].parse().unwrap(),
            mean_delta_ms: t[i + 2].parse().unwrap(),
            max_delta_ms: t[i + 3].parse().unwrap(),
            min_jitter_ms: t[i + 4].parse().unwrap(),
            mean_jitter_ms: t[i + 5].parse().unwrap(),
            max_jitter_ms: t[i + 6].parse().unwrap(),
        });
    }
    v
}

/// `tshark -z sip,stat`: (messages, requests by method, responses by code).
pub fn tshark_sip_stat(
    file: &Path,
    extra: &[&str],
) -> (u64, BTreeMap<String, u64>, BTreeMap<u16, u64>, u64) {
    let out = Command::new("tshark")
        .args(["-n", "-q"])
        .args(extra)
        .args(["-z", "sip,stat", "-r"])
        .arg(file)
        .output()
        .expect("run tshark");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut messages = 0;
    let mut resent = 0;
    let mut req = BTreeMap::new();
    let mut resp = BTreeMap::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("Number of SIP messages: ") {
            messages = n.trim().parse().unwrap();
        } else if let Some(n) = line.strip_prefix("Number of resent SIP messages: ") {
            resent = n.trim().parse().unwrap();
        } else if let Some((name, count)) = line.rsplit_once(':')
            && let Some(count) = count.trim().strip_suffix(" Packets")
        {
            let count: u64 = count.trim().parse().unwrap();
            let name = name.trim();
            if let Some(rest) = name.strip_prefix("SIP ") {
                let code: u16 = rest.split_whitespace().next().unwrap().parse().unwrap();
                resp.insert(code, count);
            } else {
                req.insert(name.to_string(), count);
            }
        }
    }
    (messages, req, resp, resent)
}

/// One worker and two saw the same: counters, SIP counts, calls.
pub fn assert_workers_agree(name: &str, one: &monitor::Analysis, two: &monitor::Analysis) {
    assert_eq!(
        one.counters, two.counters,
        "{name}: counters with 1 and 2 workers"
    );
    assert_eq!(one.sip, two.sip, "{name}: SIP with 1 and 2 workers");
    assert_eq!(
        one.calls.len(),
        two.calls.len(),
        "{name}: calls with 1 and 2 workers"
    );
}

/// Payload columns agree: the same text, or types without a name that Tandem prints as their
/// numbers where tshark prints `RTPType-N` (dynamic) or, for a stream of one type,
/// `Unassigned` (static).
pub fn same_payload(ours: &str, theirs: &str) -> bool {
    ours == theirs.replace("RTPType-", "") || (ours.parse::<u8>().is_ok() && theirs == "Unassigned")
}

/// Our figures differ from tshark's printed (3-decimal) ones by at most this, in ms.
pub const TOLERANCE_MS: f64 = 0.01;

/// Asserts every tshark stream has an equal stream in `ours` (and no extra ones).
pub fn assert_streams_match(name: &str, ours: &[&monitor::StreamRecord], theirs: &[TsharkStream]) {
    assert_eq!(
        ours.len(),
        theirs.len(),
        "{name}: {} streams here, {} in tshark: {theirs:#?}\nours: {:?}",
        ours.len(),
        theirs.len(),
        ours.iter()
            .map(|s| (s.stream.key, s.stream.packets, s.stream.payload_names()))
            .collect::<Vec<_>>()
    );
    for t in theirs {
        let o = ours
            .iter()
            .find(|s| {
                s.stream.key.src.to_string() == t.src
                    && s.stream.key.dst.to_string() == t.dst
                    && s.stream.key.ssrc == t.ssrc
            })
            .unwrap_or_else(|| panic!("{name}: tshark stream {t:?} not found"));
        let w = &o.stream.wireshark;
        let what = format!("{name} {} -> {} {:#010X}", t.src, t.dst, t.ssrc);
        assert_eq!(o.stream.packets, t.packets, "{what}: packets");
        assert_eq!(w.lost(), t.lost, "{what}: lost");
        assert!(
            same_payload(&o.stream.payload_names(), &t.payload),
            "{what}: payload {} here, {} in tshark",
            o.stream.payload_names(),
            t.payload
        );
        for (label, a, b) in [
            ("min delta", w.min_delta_ms, t.min_delta_ms),
            ("mean delta", w.mean_delta_ms, t.mean_delta_ms),
            ("max delta", w.max_delta_ms, t.max_delta_ms),
            ("min jitter", w.min_jitter_ms, t.min_jitter_ms),
            ("mean jitter", w.mean_jitter_ms, t.mean_jitter_ms),
            ("max jitter", w.max_jitter_ms, t.max_jitter_ms),
        ] {
            assert!(
                (a - b).abs() <= TOLERANCE_MS,
                "{what}: {label} {a} here, {b} in tshark"
            );
        }
    }
}

/// `tshark -T fields` for the packets `filter` shows: one line of `fields` each (an absent field
/// empty). `None`, skipped with a reason, without tshark.
pub fn tshark_fields(file: &Path, filter: &str, fields: &[&str]) -> Option<Vec<Vec<String>>> {
    if !have_tshark() {
        return None;
    }
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"])
        .arg(file)
        .args(["-Y", filter, "-T", "fields", "-E", "separator=\t"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Some(
        text.lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect(),
    )
}
