//! Live capture end to end, with real processes on a real veth pair: `tandem replay` sends a
//! capture file onto one end, `tandem capture --interface` captures on the other end, and the
//! calls and RTP figures must be those `tandem capture --read` gives for the same file.
//!
//! Each capture gets its own network namespace (removed even when the test fails). Needs root
//! and `ip` (iproute2); without them the test says why and skips. Reads every
//! `../shared/captures/*.pcap` when that directory is present (and says so when it is not),
//! plus a synthetic capture with loss, duplicates, reordering and jitter.
//!
//! What must be equal: the same records (calls, RTP streams, registrations), and in each every
//! figure that depends on the packets and their order: SIP fields, packet counts, loss,
//! duplicates, sequence errors, RTCP-reported figures. What may differ within a tolerance:
//! figures computed from arrival times (deltas, jitter, MOS), because the live capture stamps
//! frames when they arrive, and the replayer sends each frame when the machine wakes it at
//! its original time, late by the scheduler's latency (see `TOLERANCES`). Timestamps of calls
//! are not compared: live, they are the time of the test.
//!
//! Captures with long idle gaps (`aaa.pcap` spans 26 minutes, `sip_ipv6_udp.pcap` years) are
//! replayed with gaps cut to `SHORT_GAP_MS`; the monitor's timeouts then see a different
//! capture, so these are compared with `--read` of a copy stamped as they were replayed.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use afpacket::netns::VethPair;
use monitor::pcap::CaptureReader;
use monitor::synth::{SynthConfig, generate};
use serde_json::Value;

/// Gaps up to this are replayed as they are.
const LONG_GAP_MS: u64 = 5_000;
/// For captures that would take over `MAX_REPLAY_S` with `LONG_GAP_MS`: gaps cut to this.
const SHORT_GAP_MS: u64 = 20;
const MAX_REPLAY_S: f64 = 60.0;

/// Largest difference allowed for figures computed from arrival times, in their units (ms,
/// or MOS points). The replayer (at real-time priority) sends each frame at its original time,
/// late by however long the machine took to wake it: well under a millisecond on a quiet
/// machine, a few milliseconds on this shared two-core one. One late frame moves that frame's delta (max delta) by its
/// lateness and the jitter estimate by 1/16 of it; the means move by lateness/packets.
/// The extremes of the deltas are set by the single worst wake-up: a frame sent late by d
/// raises its delta by d and lowers the next one's by d. When a frame is late by a whole
/// packet interval, it leaves together with the next one and the minimum delta falls to
/// about 0 (seen on `g711a-rtp-only.pcap` on a loaded machine: 25.1 ms in the file, 0.003 ms
/// live), so the minimum's tolerance is one packet interval (30 ms) and the maximum's the
/// largest scheduling delay accepted (25 ms).
const TOLERANCES: &[(&str, f64)] = &[
    ("min_delta_ms", 30.0),
    ("mean_delta_ms", 0.5),
    ("max_delta_ms", 25.0),
    ("min_jitter_ms", 1.0),
    ("mean_jitter_ms", 1.0),
    ("max_jitter_ms", 5.0),
    ("mos", 0.1),
];

/// Fields not compared at all: wall-clock times, and the identities that hold one (a call's
/// `uid` and its group's, the first leg's uid).
const TIMES: &[&str] = &["start", "end", "ringing", "answer", "uid", "call_group"];

fn tandem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tandem"))
}

/// Kills the capture process if the test ends early; dropped before the namespace.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn read_file(path: &Path) -> Vec<Value> {
    let out = Command::new(tandem())
        .args(["capture", "--json", "--no-store", "--read"])
        .arg(path)
        .env("TANDEM_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(&out.stdout)
}

/// Replays `path` on a fresh veth pair and returns what the live capture printed.
fn capture_live(path: &Path, max_gap_ms: u64) -> Vec<Value> {
    let pair = VethPair::create().expect("namespace with a veth pair");
    let child = pair
        .command(tandem())
        .args(["capture", "--json", "--no-store", "--duration-s", "300"])
        .args(["--interface", &pair.b])
        .env("TANDEM_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    // Wait until the capture runs before sending anything.
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("capturing on") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "capture ended before starting"
        );
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let replay = pair
        .command(tandem())
        .args(["replay", "--json", "--realtime", "--interface", &pair.a])
        .args(["--max-gap-ms", &max_gap_ms.to_string(), "--read"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let sent: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(sent["failed"], 0, "{sent}");
    assert_eq!(sent["skipped"], 0, "{sent}");
    // The frames are in the ring within one block timeout; then stop as an operator would.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the child's own process ID (`ip netns exec` runs tandem in its place).
    unsafe {
        libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM);
    }
    let mut stdout = Vec::new();
    std::io::Read::read_to_end(child.0.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let status = child.0.wait().unwrap();
    let log = rest.join().unwrap();
    assert!(status.success(), "live capture failed: {log}");
    // Every frame the default filter keeps was captured and analysed: no loss anywhere.
    let stats = log
        .lines()
        .find(|l| l.starts_with("live capture on"))
        .unwrap_or_else(|| panic!("no counters at exit: {log}"));
    let n = frames_kept_by_default_filter(path);
    assert!(
        stats.contains(&format!(": {n} frames captured, {n} analysed"))
            && stats.contains(" 0 dropped")
            && stats.contains(" 0 overruns"),
        "{} frames sent, {n} pass the filter; {stats}",
        sent["sent"]
    );
    drop(child);
    drop(pair);
    json_lines(&stdout)
}

/// How many of the file's frames, sent as Ethernet, the default filter keeps (by the
/// user-space interpreter, whose verdicts `afpacket`'s tests check against the kernel's).
fn frames_kept_by_default_filter(path: &Path) -> u64 {
    let filter = afpacket::filter::Filter::compile(afpacket::filter::DEFAULT_FILTER).unwrap();
    let mut r = CaptureReader::open(path).unwrap();
    let mut kept = 0;
    while let Some(p) = r.next_packet().unwrap() {
        let mut frame = Vec::new();
        match p.link_type {
            1 => frame.extend_from_slice(p.data),
            101 => {
                let ethertype: &[u8] = if p.data[0] >> 4 == 6 {
                    &[0x86, 0xdd]
                } else {
                    &[8, 0]
                };
                frame.extend_from_slice(&[0; 12]);
                frame.extend_from_slice(ethertype);
                frame.extend_from_slice(p.data);
            }
            other => panic!("{}: link type {other} not expected here", path.display()),
        }
        let pkt = afpacket::bpf::Packet {
            data: &frame,
            vlan_tci: None,
        };
        kept += u64::from(filter.matches(pkt));
    }
    kept
}

/// A record split into the part compared exactly (as text, for sorting) and the figures
/// compared within tolerance.
fn split(v: &Value) -> (String, Vec<(String, f64)>) {
    let mut exact = v.clone();
    let obj = exact.as_object_mut().unwrap();
    for t in TIMES {
        obj.remove(*t);
    }
    let mut approx = Vec::new();
    for (k, _) in TOLERANCES {
        if let Some(x) = obj.remove(*k) {
            approx.push((k.to_string(), x.as_f64().unwrap_or(f64::NAN)));
        }
    }
    (exact.to_string(), approx)
}

fn compare(name: &str, expected: &[Value], got: &[Value]) {
    let mut e: Vec<_> = expected.iter().map(split).collect();
    let mut g: Vec<_> = got.iter().map(split).collect();
    e.sort_by(|a, b| a.0.cmp(&b.0));
    g.sort_by(|a, b| a.0.cmp(&b.0));
    let ex: Vec<&String> = e.iter().map(|r| &r.0).collect();
    let gx: Vec<&String> = g.iter().map(|r| &r.0).collect();
    assert_eq!(gx, ex, "{name}: live records differ from --read");
    let mut worst: Vec<(String, f64)> = Vec::new();
    for (a, b) in e.iter().zip(&g) {
        for ((k, x), (_, y)) in a.1.iter().zip(&b.1) {
            let d = if x.is_nan() && y.is_nan() {
                0.0
            } else {
                (x - y).abs()
            };
            let tol = TOLERANCES.iter().find(|t| t.0 == k).unwrap().1;
            assert!(
                d <= tol,
                "{name}: {k} {x} from the file, {y} live (tolerance {tol}): {}",
                a.0
            );
            match worst.iter_mut().find(|w| w.0 == *k) {
                Some(w) => w.1 = w.1.max(d),
                None => worst.push((k.clone(), d)),
            }
        }
    }
    eprintln!(
        "{name}: {} records equal; largest timing differences: {}",
        e.len(),
        worst
            .iter()
            .map(|(k, d)| format!("{k} {d:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn check(path: &Path, tmp: &Path) {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let long = common::replay_seconds(path, LONG_GAP_MS) > MAX_REPLAY_S
        || common::replay_seconds(path, u64::MAX / 2_000_000)
            > common::replay_seconds(path, LONG_GAP_MS);
    let (gap, reference) = if long {
        let copy = tmp.join(format!("paced-{name}"));
        common::paced_copy(path, SHORT_GAP_MS, &copy);
        eprintln!("{name}: idle gaps cut to {SHORT_GAP_MS} ms; compared with a copy stamped so");
        (SHORT_GAP_MS, copy)
    } else {
        (LONG_GAP_MS, path.to_path_buf())
    };
    let expected = read_file(&reference);
    assert!(
        !expected.is_empty() || name.contains("fragmented"),
        "{name}: nothing found"
    );
    let got = capture_live(path, gap);
    compare(&name, &expected, &got);
}

#[test]
fn live_capture_equals_reading_the_file() {
    if let Some(why) = VethPair::unavailable() {
        test_env::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let synthetic = tmp.path().join("synthetic.pcap");
    let cfg = SynthConfig {
        calls: 20,
        call_interval_us: 100_000,
        call_duration_ms: 3_000,
        loss_pct: 1.0,
        duplicate_pct: 0.5,
        reorder_pct: 0.5,
        jitter_ms: 2.0,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&synthetic).unwrap()).unwrap();
    let mut files = vec![synthetic];
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    match std::fs::read_dir(&shared) {
        Ok(entries) => {
            let mut v: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
                .collect();
            // Longest first, so that the short ones fill the other lane meanwhile.
            v.sort_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
            files.extend(v);
        }
        Err(_) => eprintln!("{} is absent: synthetic capture only", shared.display()),
    }
    // One namespace per capture, two captures at a time (the longest file with the others
    // beside it): more at once loads the machine enough to delay frames past the tolerances.
    let queue = std::sync::Mutex::new(files.iter().collect::<Vec<_>>());
    let failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some(f) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check(f, tmp.path())
                    }));
                    if let Err(e) = r {
                        let msg = e
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        failed
                            .lock()
                            .unwrap()
                            .push(format!("{}: {msg}", f.display()));
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Calls that end, and then silence on the link: with no other packet, their CDRs are stored,
/// with where their packets are archived, and the status line says no call is active, a few
/// seconds after their end (the linger, then within a second), not at the next packet.
#[test]
fn calls_that_end_are_stored_while_the_link_stays_quiet() {
    if let Some(why) = VethPair::unavailable() {
        test_env::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pcap = tmp.path().join("two-calls.pcap");
    let cfg = SynthConfig {
        calls: 2,
        call_interval_us: 500_000,
        call_duration_ms: 1_000,
        failures: false,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let (db, archive) = (tmp.path().join("cdr.sqlite3"), tmp.path().join("archive"));
    let pair = VethPair::create().expect("namespace with a veth pair");
    let child = pair
        .command(tandem())
        .args(["capture", "--duration-s", "300", "--status-interval-s", "1"])
        .args(["--interface", &pair.b, "--cdr-db"])
        .arg(&db)
        .arg("--archive")
        .arg(&archive)
        .env("TANDEM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    let err = common::Lines::read(child.0.stderr.take().unwrap());
    let minute = Duration::from_secs(60);
    assert!(
        err.wait_for(0, minute, |l| l.starts_with("capturing on"))
            .is_some(),
        "the capture did not start: {}",
        err.text()
    );
    let replay = pair
        .command(tandem())
        .args(["replay", "--json", "--interface", &pair.a, "--read"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let sent: Value = serde_json::from_slice(&replay.stdout).unwrap();
    // While the calls linger (5 s after their BYE), the status line counts them.
    let from = err.len();
    assert!(
        err.wait_for(from, minute, |l| common::calls_active(l) == Some(2))
            .is_some(),
        "no status line with the two calls active: {}",
        err.text()
    );
    // Nothing more is sent. A generous bound on "it happens at all": the time is printed.
    // Live, capture time is the wall clock: for the record, how long after its linger ended
    // each CDR was first seen (the database polled every 50 ms).
    let now_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    let mut first_seen = std::collections::BTreeMap::new();
    let deadline = std::time::Instant::now() + minute;
    while first_seen.len() < 2 && std::time::Instant::now() < deadline {
        for c in common::stored_calls(&db) {
            let due_us = c["end_us"].as_i64().unwrap() + 5_000_000;
            first_seen
                .entry(c["call_id"].as_str().unwrap().to_string())
                .or_insert_with(|| now_us() - due_us);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (call, late_us) in &first_seen {
        eprintln!(
            "{call}: stored {:.2} s after its linger ended",
            *late_us as f64 / 1e6
        );
    }
    for c in common::stored_then_none_active(&err, &db, 2, minute) {
        assert!(c["rtp_tar"].is_string(), "{c}");
    }
    // SAFETY: kill(2) on the child's own process ID (`ip netns exec` runs tandem in its place).
    unsafe {
        libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM);
    }
    assert!(child.0.wait().unwrap().success(), "{}", err.text());
    // The capture saw the replayed frames and nothing else: no other packet moved time on.
    let n = sent["sent"].as_u64().unwrap();
    let summary = err
        .wait_for(0, minute, |l| l.starts_with("live capture on"))
        .map(|_| err.text())
        .unwrap_or_default();
    assert!(
        summary.contains(&format!(": {n} frames captured, {n} analysed")),
        "{n} frames sent: {summary}"
    );
    drop(child);
    drop(pair);
}
