//! `tandem bench capture-live`: live capture under increasing load. On a veth pair in a network
//! namespace of its own, synthetic calls (G.711 RTP and SIP) are sent at a rising rate while
//! the live capture path of `tandem capture --interface` (capture thread, bounded buffer,
//! analysis by the monitor) takes them on the other end. Each step reports the rate offered,
//! sent and captured, and the counters that say where frames were lost: the kernel's backlog
//! before the socket (`softnet_drops`), the ring (`kernel_drops`) or the buffer
//! (`buffer_overruns`). The sender's own rate is the baseline each step is compared with.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use afpacket::netns::VethPair;
use afpacket::{RingConfig, Sender};
use anyhow::{Context, bail};
use monitor::pcap::CaptureReader;
use monitor::synth::{SynthConfig, generate};
use monitor::{Monitor, MonitorConfig};
use serde::Serialize;

use super::report::{self, BenchReport, Table};
use sensor::live::{LiveCapture, LiveOptions, LiveStatsSnapshot, Popped};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// First rate offered, frames per second; each step doubles it.
    #[arg(long, default_value_t = 10_000.0)]
    pub start_pps: f64,
    /// Highest rate offered.
    #[arg(long, default_value_t = 1_280_000.0)]
    pub max_pps: f64,
    /// Seconds per step.
    #[arg(long, default_value_t = 2.0)]
    pub step_s: f64,
    /// Kernel ring, MiB.
    #[arg(long, default_value_t = 8)]
    pub ring_mib: usize,
    /// Buffer between capture and analysis, MiB.
    #[arg(long, default_value_t = 8)]
    pub buffer_mib: usize,
    /// Concurrent calls in the synthetic traffic (looped).
    #[arg(long, default_value_t = 500)]
    pub calls: usize,
}

#[derive(Serialize, Debug, Clone)]
struct Step {
    offered_pps: f64,
    sent_pps: f64,
    captured_pps: f64,
    sent: u64,
    send_failed: u64,
    captured: u64,
    analysed: u64,
    /// Frames sent and never captured.
    lost: u64,
    softnet_drops: u64,
    kernel_drops: u64,
    kernel_freezes: u64,
    buffer_overruns: u64,
    buffer_bytes_peak: u64,
    /// Where the frames of this step were lost, from the counters; `None` without loss.
    loss_at: Option<&'static str>,
}

#[derive(Serialize)]
struct LiveBench {
    frame_bytes_mean: f64,
    ring_bytes: u64,
    buffer_bytes_max: u64,
    steps: Vec<Step>,
    /// The first rate offered at which frames were lost, and where.
    loss_began_at_pps: Option<f64>,
    loss_began_at: Option<&'static str>,
    /// The highest rate the sender reached (the baseline: capture cannot see more).
    sender_max_pps: f64,
}

impl BenchReport for LiveBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut t = Table::new([
            "offered pps",
            "sent pps",
            "captured pps",
            "lost",
            "softnet drops",
            "kernel drops",
            "freezes",
            "buffer overruns",
            "buffer peak bytes",
            "loss at",
        ]);
        for s in &self.steps {
            t.row([
                format!("{:.0}", s.offered_pps),
                format!("{:.0}", s.sent_pps),
                format!("{:.0}", s.captured_pps),
                s.lost.to_string(),
                s.softnet_drops.to_string(),
                s.kernel_drops.to_string(),
                s.kernel_freezes.to_string(),
                s.buffer_overruns.to_string(),
                s.buffer_bytes_peak.to_string(),
                s.loss_at.unwrap_or("-").to_string(),
            ]);
        }
        t.write(out)?;
        match (self.loss_began_at_pps, self.loss_began_at) {
            (Some(p), Some(at)) => writeln!(out, "loss began at {p:.0} pps offered, in the {at}")?,
            _ => writeln!(
                out,
                "no loss up to {:.0} pps sent (the sender's limit on this machine)",
                self.sender_max_pps
            )?,
        }
        writeln!(
            out,
            "frames of {:.0} bytes on average; ring {} MiB, buffer {} MiB",
            self.frame_bytes_mean,
            self.ring_bytes >> 20,
            self.buffer_bytes_max >> 20
        )
    }
}

/// Dropped frames of every CPU's backlog (`/proc/net/softnet_stat`, second column), for the
/// whole machine: frames the kernel lost before any socket saw them.
fn softnet_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter_map(|h| u64::from_str_radix(h, 16).ok())
                .sum()
        })
        .unwrap_or(0)
}

fn synthetic_frames(calls: usize) -> anyhow::Result<Vec<Vec<u8>>> {
    let cfg = SynthConfig {
        calls,
        call_interval_us: 2_000,
        call_duration_ms: 4_000,
        ..SynthConfig::default()
    };
    let mut pcap = Vec::new();
    generate(&cfg, &mut pcap)?;
    let mut r = CaptureReader::from_reader("synthetic", std::io::Cursor::new(pcap))?;
    let mut frames = Vec::new();
    while let Some(p) = r.next_packet()? {
        frames.push(p.data.to_vec());
    }
    Ok(frames)
}

/// Sends `frames` round-robin at `pps` for `secs`, starting at `*next`; (sent, failed).
fn send_step(
    tx: &Sender,
    frames: &[Vec<u8>],
    next: &mut usize,
    pps: f64,
    secs: f64,
) -> (u64, u64, f64) {
    let total = (pps * secs) as u64;
    let (mut sent, mut failed) = (0, 0);
    let start = Instant::now();
    for i in 0..total {
        let due = Duration::from_secs_f64(i as f64 / pps);
        let now = start.elapsed();
        if due > now + Duration::from_millis(1) {
            std::thread::sleep(due - now);
        }
        match tx.send(&frames[*next]) {
            Ok(()) => sent += 1,
            Err(_) => failed += 1,
        }
        *next = (*next + 1) % frames.len();
    }
    (sent, failed, start.elapsed().as_secs_f64())
}

fn delta(a: &LiveStatsSnapshot, b: &LiveStatsSnapshot) -> LiveStatsSnapshot {
    LiveStatsSnapshot {
        kernel_packets: b.kernel_packets - a.kernel_packets,
        kernel_drops: b.kernel_drops - a.kernel_drops,
        kernel_freezes: b.kernel_freezes - a.kernel_freezes,
        buffer_bytes_used: b.buffer_bytes_used,
        buffer_bytes_max: b.buffer_bytes_max,
        buffer_bytes_peak: b.buffer_bytes_peak,
        buffer_overruns: b.buffer_overruns - a.buffer_overruns,
        packets_captured: b.packets_captured - a.packets_captured,
        packets_analysed: b.packets_analysed - a.packets_analysed,
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(why) = VethPair::unavailable() {
        bail!("bench capture-live {why}: it captures on a veth pair in a network namespace");
    }
    anyhow::ensure!(
        args.start_pps > 0.0 && args.max_pps >= args.start_pps,
        "need 0 < --start-pps <= --max-pps"
    );
    let frames = synthetic_frames(args.calls)?;
    let frame_bytes_mean = frames.iter().map(Vec::len).sum::<usize>() as f64 / frames.len() as f64;
    let pair = VethPair::create().map_err(anyhow::Error::msg)?;
    let opts = LiveOptions {
        interface: pair.b.clone(),
        ring: RingConfig::with_mib(args.ring_mib),
        filter: Some(afpacket::filter::Filter::compile(
            afpacket::filter::DEFAULT_FILTER,
        )?),
        promiscuous: false,
        capture_threads: 1,
        buffer_bytes_max: (args.buffer_mib as u64) << 20,
    };
    let (captures, tx) = pair
        .in_namespace(|| -> anyhow::Result<_> { Ok((opts.open()?, Sender::open(&pair.a)?)) })
        .map_err(anyhow::Error::msg)??;
    let live = LiveCapture::start(captures, opts.buffer_bytes_max);
    // The analysis thread: what `tandem capture --interface` does with each frame.
    let done = Arc::new(AtomicBool::new(false));
    let analysis = {
        let buffer = live.buffer.clone();
        let done = done.clone();
        std::thread::Builder::new()
            .name("analysis".into())
            .spawn(move || {
                let mut mon = Monitor::new(MonitorConfig::default(), 1);
                let mut n = 0u64;
                loop {
                    match buffer.pop(Duration::from_millis(100)) {
                        Popped::Batch(batch) => {
                            for (ts, f) in batch.frames() {
                                mon.packet(ts, 1, f);
                                n += 1;
                                if n.is_multiple_of(1 << 16) {
                                    drop(mon.take_finished());
                                }
                            }
                            buffer.recycle(batch);
                        }
                        Popped::Waiting if done.load(Ordering::Relaxed) => break,
                        Popped::Waiting => {}
                        Popped::Ended => break,
                    }
                }
            })
            .context("spawning the analysis thread")?
    };
    let mut steps = Vec::new();
    let mut next = 0usize;
    let mut pps = args.start_pps;
    let mut sender_max_pps: f64 = 0.0;
    while pps <= args.max_pps {
        let before = live.stats.snapshot();
        let soft_before = softnet_drops();
        let (sent, failed, secs) = send_step(&tx, &frames, &mut next, pps, args.step_s);
        // Let the ring hand over its last block, the analysis catch up and the capture thread
        // read the kernel's counters (every 250 ms).
        let mut last = live.stats.snapshot();
        for i in 0..100 {
            std::thread::sleep(Duration::from_millis(50));
            let now = live.stats.snapshot();
            if i >= 6 && now.packets_analysed == last.packets_analysed && now.buffer_bytes_used == 0
            {
                break;
            }
            last = now;
        }
        let d = delta(&before, &live.stats.snapshot());
        let soft = softnet_drops() - soft_before;
        let lost = sent.saturating_sub(d.packets_captured);
        let loss_at = (lost > 0).then_some(if d.kernel_drops > 0 {
            "kernel ring (kernel_drops)"
        } else if d.buffer_overruns > 0 {
            "buffer between capture and analysis (buffer_overruns)"
        } else if soft > 0 {
            "kernel backlog before the socket (softnet_drops)"
        } else {
            "path before the socket (no counter saw it)"
        });
        let sent_pps = sent as f64 / secs;
        sender_max_pps = sender_max_pps.max(sent_pps);
        let step = Step {
            offered_pps: pps,
            sent_pps,
            captured_pps: d.packets_captured as f64 / secs,
            sent,
            send_failed: failed,
            captured: d.packets_captured,
            analysed: d.packets_analysed,
            lost,
            softnet_drops: soft,
            kernel_drops: d.kernel_drops,
            kernel_freezes: d.kernel_freezes,
            buffer_overruns: d.buffer_overruns,
            buffer_bytes_peak: d.buffer_bytes_peak,
            loss_at,
        };
        if !args.json {
            eprintln!(
                "{pps:.0} pps offered: {sent_pps:.0} sent, {:.0} captured, {lost} lost",
                step.captured_pps
            );
        }
        steps.push(step);
        // Stop once frames are lost, or once the sender cannot reach the rate offered.
        if lost > 0 || sent_pps < 0.8 * pps {
            break;
        }
        pps *= 2.0;
    }
    done.store(true, Ordering::Relaxed);
    live.request_stop();
    let _ = analysis.join();
    let stats = live.stats.clone();
    live.join()?;
    drop(pair);
    let first_loss = steps.iter().find(|s| s.lost > 0);
    let report = LiveBench {
        frame_bytes_mean,
        ring_bytes: RingConfig::with_mib(args.ring_mib).ring_bytes() as u64,
        buffer_bytes_max: stats.snapshot().buffer_bytes_max,
        loss_began_at_pps: first_loss.map(|s| s.offered_pps),
        loss_began_at: first_loss.and_then(|s| s.loss_at),
        sender_max_pps,
        steps,
    };
    report::emit(&report, args.json)
}
