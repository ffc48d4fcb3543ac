//! `tandem bench capture`: synthesises captures of concurrent G.711 calls with known ground
//! truth, measures the monitor's RTP analysis rate on one and on two shards, the memory per
//! concurrent SIP-only call, and tshark's `-z rtp,streams` on the same file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use monitor::pcap::CaptureReader;
use monitor::synth::{CallKind, GroundTruth, SynthConfig, generate};
use monitor::{Monitor, MonitorConfig};
use serde::Serialize;

use super::report::{self, BenchReport, Percentiles, Table};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Concurrent G.711 calls in the RTP capture.
    #[arg(long, default_value_t = 10_000)]
    pub calls: usize,
    /// Media seconds per call (both directions, 20 ms packets).
    #[arg(long, default_value_t = 3)]
    pub duration_s: u64,
    /// Concurrent SIP-only calls held for the memory figure.
    #[arg(long, default_value_t = 100_000)]
    pub sip_calls: usize,
    /// Timed runs per figure; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Also time tshark on the same file (skipped when tshark is not installed).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub tshark: bool,
    /// Where the synthetic captures are written (removed afterwards unless --keep).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the synthetic captures (rtp.pcap, sip.pcap) in --dir.
    #[arg(long)]
    pub keep: bool,
    /// What the calls carry, in turn (comma-separated): voice, fax (a re-INVITE to T.38),
    /// dtmf (RFC 4733 digits in the voice), srtp, video, hold-resume (new ports halfway).
    #[arg(long, value_delimiter = ',', default_value = "voice")]
    pub kinds: Vec<CallKind>,
}

#[derive(Serialize)]
struct CaptureBench {
    calls: usize,
    rtp_packets: u64,
    capture_bytes: u64,
    runs: usize,
    /// Median wall seconds to analyse the RTP capture on one thread (read, decode, analyse).
    tandem_seconds: f64,
    /// Median CPU seconds that thread ran (the machine is shared: wall time includes waiting).
    tandem_cpu_seconds: f64,
    /// RTP packets per CPU second of the one thread doing all the work.
    rtp_packets_per_sec_per_core: f64,
    /// RTP packets per wall second on one thread.
    rtp_packets_per_sec_wall: f64,
    /// The one-shard runs' durations (µs): how steady the figure is.
    one_shard_runs: Percentiles,
    /// Median wall seconds with two worker threads (plus the reading thread).
    two_core_seconds: f64,
    two_core_speedup: f64,
    /// CPU seconds of all threads in the two-worker runs (reader + workers): the parallel mode's
    /// total work, comparable with `tandem_cpu_seconds`.
    two_core_cpu_seconds: f64,
    /// CPU seconds of the reading thread alone in those runs.
    two_core_reader_cpu_seconds: f64,
    /// The speedup two idle cores would give for that work (an estimate from CPU times, not a
    /// measurement): `tandem_cpu_seconds / max(reader CPU, all threads' CPU / 2)`.
    two_core_speedup_cpu_bound: f64,
    tshark_seconds: Option<f64>,
    /// tshark_seconds / tandem_seconds.
    tshark_ratio: Option<f64>,
    sip_only_concurrent_calls: usize,
    /// Heap bytes in use per SIP-only call held (glibc's allocator statistics).
    bytes_per_sip_call: f64,
    /// RSS growth per SIP-only call held: the same from the kernel's side, which reads low when
    /// the heap reuses memory an earlier phase freed.
    rss_bytes_per_sip_call: f64,
    /// SIP-only calls (INVITE, 100, 180, 200, ACK, BYE, 200) analysed per CPU second.
    sip_calls_per_sec_per_core: f64,
    peak_rss_bytes: u64,
    streams_found: usize,
    streams_expected: usize,
    /// The call kinds in the RTP capture.
    kinds: String,
    /// Calls whose streams, packet counts, digits, fax, encryption and video flags all equal the
    /// generator's ground truth (out of `calls`).
    calls_matching_truth: usize,
}

impl BenchReport for CaptureBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut t = Table::new(["figure", "value"]);
        let f = |v: f64| format!("{v:.3}");
        t.row([
            "calls (concurrent, G.711)".to_string(),
            self.calls.to_string(),
        ]);
        t.row(["RTP packets".to_string(), self.rtp_packets.to_string()]);
        t.row(["capture bytes".to_string(), self.capture_bytes.to_string()]);
        t.row([
            "tandem seconds (1 thread, wall)".to_string(),
            f(self.tandem_seconds),
        ]);
        t.row([
            "tandem CPU seconds (1 thread)".to_string(),
            f(self.tandem_cpu_seconds),
        ]);
        t.row([
            "RTP packets/s per core (CPU)".to_string(),
            format!("{:.0}", self.rtp_packets_per_sec_per_core),
        ]);
        t.row([
            "RTP packets/s (wall, 1 thread)".to_string(),
            format!("{:.0}", self.rtp_packets_per_sec_wall),
        ]);
        t.row([
            "seconds with 2 workers (wall)".to_string(),
            f(self.two_core_seconds),
        ]);
        t.row(["2-core speedup".to_string(), f(self.two_core_speedup)]);
        t.row([
            "CPU seconds with 2 workers".to_string(),
            f(self.two_core_cpu_seconds),
        ]);
        t.row([
            "2-core speedup bound by CPU work".to_string(),
            f(self.two_core_speedup_cpu_bound),
        ]);
        t.row([
            "tshark seconds".to_string(),
            self.tshark_seconds.map(f).unwrap_or_else(|| "-".into()),
        ]);
        t.row([
            "tshark / tandem".to_string(),
            self.tshark_ratio
                .map(|r| format!("{r:.1}"))
                .unwrap_or_else(|| "-".into()),
        ]);
        t.row([
            "SIP-only concurrent calls".to_string(),
            self.sip_only_concurrent_calls.to_string(),
        ]);
        t.row([
            "SIP-only calls/s per core".to_string(),
            format!("{:.0}", self.sip_calls_per_sec_per_core),
        ]);
        t.row([
            "heap bytes per SIP call".to_string(),
            format!("{:.0}", self.bytes_per_sip_call),
        ]);
        t.row([
            "RSS bytes per SIP call".to_string(),
            format!("{:.0}", self.rss_bytes_per_sip_call),
        ]);
        t.row([
            "peak RSS bytes".to_string(),
            self.peak_rss_bytes.to_string(),
        ]);
        t.row([
            "streams found / expected".to_string(),
            format!("{} / {}", self.streams_found, self.streams_expected),
        ]);
        t.row(["call kinds".to_string(), self.kinds.clone()]);
        t.row([
            "calls matching ground truth".to_string(),
            format!("{} / {}", self.calls_matching_truth, self.calls),
        ]);
        t.write(out)
    }
}

/// Resident set size now, bytes (Linux /proc).
fn rss_bytes() -> u64 {
    procstat::rss_bytes().unwrap_or(0)
}

/// Bytes the allocator has handed out and not had back (glibc's `mallinfo2`: in-use chunks in
/// every arena plus mmapped blocks). Unlike RSS it does not depend on what earlier phases
/// freed, so the growth over a phase is that phase's memory.
///
/// `mallinfo2` arrived in glibc 2.33, and the packaged binary must start on glibc 2.17 (SNG7):
/// it is looked up when called, and `mallinfo` (whose `int` fields wrap past 2 GiB) stands in
/// where it is missing.
#[cfg(target_env = "gnu")]
pub(crate) fn heap_bytes() -> u64 {
    type Mallinfo2 = unsafe extern "C" fn() -> libc::mallinfo2;
    static MALLINFO2: std::sync::OnceLock<Option<Mallinfo2>> = std::sync::OnceLock::new();
    let mallinfo2 = MALLINFO2.get_or_init(|| {
        // SAFETY: a NUL-terminated name looked up in the objects already loaded.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
        // SAFETY: when glibc has the symbol, it is mallinfo2 with this signature.
        (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, Mallinfo2>(f) })
    });
    match mallinfo2 {
        Some(f) => {
            // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
            let m = unsafe { f() };
            (m.uordblks + m.hblkhd) as u64
        }
        None => {
            // SAFETY: as above; the fields are `int`, read as the unsigned counts they are.
            #[allow(deprecated)]
            let m = unsafe { libc::mallinfo() };
            (m.uordblks as u32 as u64) + (m.hblkhd as u32 as u64)
        }
    }
}

#[cfg(not(target_env = "gnu"))]
pub(crate) fn heap_bytes() -> u64 {
    rss_bytes()
}

fn thread_cpu_seconds() -> f64 {
    procstat::thread_cpu_seconds().unwrap_or(f64::NAN)
}

fn process_cpu_seconds() -> f64 {
    procstat::process_cpu_seconds(std::process::id()).unwrap_or(f64::NAN)
}

/// Analyses `path`: (wall seconds, CPU seconds of this thread, streams found).
/// How many of the generated calls the analysis found as they were sent: every stream with its
/// packet count, the digits, the fax's pages and result, the encryption and video flags.
fn calls_matching_truth(a: &monitor::Analysis, truth: &GroundTruth) -> usize {
    let by_id: std::collections::HashMap<&str, &monitor::CallRecord> =
        a.calls.iter().map(|c| (&*c.dialog.call_id, c)).collect();
    truth
        .calls
        .iter()
        .filter(|t| {
            let Some(c) = by_id.get(t.call_id.as_str()) else {
                return false;
            };
            let streams_match = c.streams.len() == t.streams.len()
                && t.streams.iter().all(|ts| {
                    c.streams.iter().any(|s| {
                        Some(s.stream.key.src) == ts.src
                            && s.stream.key.ssrc == ts.ssrc
                            && s.stream.packets == ts.sent - ts.dropped + ts.duplicated
                            && (s.stream.media == monitor::rtp::Media::Video) == ts.video
                    })
                });
            let fax_matches = match (&t.fax, c.fax()) {
                (None, None) => true,
                (Some(f), Some(g)) => g.pages == Some(f.pages) && g.result == Some(f.result),
                _ => false,
            };
            streams_match
                && fax_matches
                && c.digits() == t.digits
                && c.streams
                    .iter()
                    .all(|s| s.stream.encrypted == t.encrypted())
        })
        .count()
}

fn time_analysis(path: &Path, shards: usize) -> anyhow::Result<(f64, f64, usize)> {
    let cpu = thread_cpu_seconds();
    let started = Instant::now();
    let mut m = Monitor::new(MonitorConfig::default(), shards);
    m.read_file(path, |_| {})?;
    let a = m.finish();
    let wall = started.elapsed().as_secs_f64();
    Ok((wall, thread_cpu_seconds() - cpu, a.all_streams().count()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.runs == 0 || args.calls == 0 {
        bail!("--runs and --calls must be at least 1");
    }
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tandem-bench-capture-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&args, &dir);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report::emit(&result?, args.json)
}

fn measure(args: &Args, dir: &Path) -> anyhow::Result<CaptureBench> {
    // 1. RTP capture: every call starts within the first second and all overlap.
    let rtp_path = dir.join("rtp.pcap");
    let cfg = SynthConfig {
        calls: args.calls,
        call_interval_us: (1_000_000 / args.calls as u64).max(1),
        call_duration_ms: args.duration_s * 1000,
        failures: false,
        loss_pct: 0.5,
        duplicate_pct: 0.1,
        reorder_pct: 0.1,
        jitter_ms: 3.0,
        kinds: args.kinds.clone(),
        ..SynthConfig::default()
    };
    let truth = generate(&cfg, std::fs::File::create(&rtp_path)?)?;
    let capture_bytes = std::fs::metadata(&rtp_path)?.len();
    let streams_expected = truth.calls.iter().map(|c| c.streams.len()).sum();
    // Check the analysis against the ground truth (this also warms the page cache), then time.
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    m.read_file(&rtp_path, |_| {})?;
    let analysis = m.finish();
    let streams_found = analysis.all_streams().count();
    let calls_matching_truth = calls_matching_truth(&analysis, &truth);
    drop(analysis);
    // The ground truth holds a few allocations per call: freed before the timed runs, so that
    // they analyse on the heap they would have without it.
    let rtp_packets = truth.rtp_packets;
    drop(truth);
    let mut one = Vec::new();
    let mut one_cpu = Vec::new();
    let mut two = Vec::new();
    let mut two_cpu = Vec::new();
    let mut two_reader_cpu = Vec::new();
    for _ in 0..args.runs {
        let (wall, cpu, _) = time_analysis(&rtp_path, 1)?;
        one.push(wall);
        one_cpu.push(cpu);
        let cpu = process_cpu_seconds();
        let (wall, reader_cpu, _) = time_analysis(&rtp_path, 2)?;
        two.push(wall);
        two_cpu.push(process_cpu_seconds() - cpu);
        two_reader_cpu.push(reader_cpu);
    }
    let tandem_seconds = report::median(&one);
    let tandem_cpu_seconds = report::median(&one_cpu);
    let two_core_cpu_seconds = report::median(&two_cpu);
    let two_core_reader_cpu_seconds = report::median(&two_reader_cpu);
    let mut run_ns: Vec<u64> = one.iter().map(|s| (s * 1e9) as u64).collect();
    let one_shard_runs = Percentiles::from_nanos(&mut run_ns);
    let two_core_seconds = report::median(&two);
    let tshark_seconds = if args.tshark && Command::new("tshark").arg("-v").output().is_ok() {
        let started = Instant::now();
        let out = Command::new("tshark")
            .args([
                "-n",
                "-q",
                "-o",
                "rtp.heuristic_rtp:TRUE",
                "-z",
                "rtp,streams",
                "-r",
            ])
            .arg(&rtp_path)
            .output()
            .context("running tshark")?;
        if !out.status.success() {
            bail!("tshark failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };

    // 2. SIP-only capture: every call set up within the first second, BYEs a minute later.
    let sip_path = dir.join("sip.pcap");
    let sip_cfg = SynthConfig {
        calls: args.sip_calls,
        call_interval_us: (1_000_000 / args.sip_calls.max(1) as u64).max(1),
        call_duration_ms: 60_000,
        rtp: false,
        failures: false,
        ..SynthConfig::default()
    };
    generate(&sip_cfg, std::fs::File::create(&sip_path)?)?;
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    let (before, heap_before) = (rss_bytes(), heap_bytes());
    let mut r = CaptureReader::open(&sip_path)?;
    let held_until = sip_cfg.start_ns + 30_000_000_000;
    let mut held = 0;
    while let Some(p) = r.next_packet()? {
        if p.ts_ns > held_until {
            // Every call is set up and none has ended: measure here.
            held = m.active_calls();
            break;
        }
        let (ts, lt) = (p.ts_ns, p.link_type);
        m.packet(ts, lt, p.data);
    }
    let (after, heap_after) = (rss_bytes(), heap_bytes());
    drop(m);
    // Whole SIP-only capture on one thread: calls set up and torn down per CPU second.
    let mut sip_cpu = Vec::new();
    for _ in 0..args.runs {
        sip_cpu.push(time_analysis(&sip_path, 1)?.1);
    }
    let sip_calls_per_sec_per_core = args.sip_calls as f64 / report::median(&sip_cpu);
    let per_call = |grew: u64| {
        if held > 0 {
            grew as f64 / held as f64
        } else {
            0.0
        }
    };
    let bytes_per_sip_call = per_call(heap_after.saturating_sub(heap_before));
    let rss_bytes_per_sip_call = per_call(after.saturating_sub(before));
    Ok(CaptureBench {
        calls: args.calls,
        rtp_packets,
        capture_bytes,
        runs: args.runs,
        tandem_seconds,
        tandem_cpu_seconds,
        rtp_packets_per_sec_per_core: rtp_packets as f64 / tandem_cpu_seconds,
        rtp_packets_per_sec_wall: rtp_packets as f64 / tandem_seconds,
        one_shard_runs,
        two_core_seconds,
        two_core_speedup: tandem_seconds / two_core_seconds,
        two_core_cpu_seconds,
        two_core_reader_cpu_seconds,
        two_core_speedup_cpu_bound: tandem_cpu_seconds
            / two_core_reader_cpu_seconds.max(two_core_cpu_seconds / 2.0),
        tshark_seconds,
        tshark_ratio: tshark_seconds.map(|t| t / tandem_seconds),
        sip_only_concurrent_calls: held,
        bytes_per_sip_call,
        rss_bytes_per_sip_call,
        sip_calls_per_sec_per_core,
        peak_rss_bytes: procstat::peak_rss_bytes().unwrap_or(0),
        streams_found,
        streams_expected,
        kinds: args
            .kinds
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(","),
        calls_matching_truth,
    })
}
