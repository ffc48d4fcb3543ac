//! The status of a running sensor: a line logged every `interval_s` seconds (`tandem capture
//! --status-interval-s`) and the same figures as Prometheus metrics on `metrics_listen`.
//!
//! Each part of the capture registers a [`StatusSource`] on the [`StatusBoard`] and fills its
//! own fields of a [`Sample`]: the monitor (calls, packets), the CDR writer (queue, journal), the
//! archive writer (its queue), the live capture ring (kernel drops, buffer use). A field whose
//! part is absent stays `None` and is left out of the line and the metrics, never shown as a
//! made-up zero. The board itself adds CPU time per thread and resident memory from
//! `/proc/self` (the `procstat` crate); the threads Tandem starts are named so that the line says
//! which is busy.
//!
//! A line reads:
//!
//! ```text
//! calls 12 active, 3456 total, 1.5/s | packets/s 1240 (SIP 40, RTP 1200) | kernel drops 0 (+0) |
//! buffer 3% | CDR queue 0/10000, journal 0, dropped 0 | archive queue 2/4096 |
//! CPU tandem 12%, monitor-worker-0 30%, cdr-writer 1% | RSS 45.2 MiB
//! ```

pub mod metrics;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cdr::{CdrWriterStats, CdrWriterWatch};
use monitor::LiveCounters;
pub use procstat::ThreadCpu;

/// Calls, from the monitor.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallFigures {
    pub active: u64,
    /// Calls seen since the start.
    pub total: u64,
}

/// Packet counts since the start, from the monitor.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PacketFigures {
    pub total: u64,
    pub sip: u64,
    pub rtp: u64,
}

/// The live capture ring (`--interface`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CaptureFigures {
    /// Packets the kernel dropped because the ring was full, since the start.
    pub kernel_drops: u64,
    /// Share of the bounded buffer between the capture threads and the analysis in use now,
    /// 0 to 100.
    pub buffer_used_pct: f64,
    /// Frames dropped because that buffer was full, since the start.
    pub buffer_overruns: u64,
}

/// A bounded queue (the archive writer's).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueFigures {
    pub depth: u64,
    pub bound: u64,
    /// Items dropped since the start because the queue was full.
    pub dropped: u64,
}

/// Every figure at one moment; counts are totals since the start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub calls: Option<CallFigures>,
    pub packets: Option<PacketFigures>,
    pub capture: Option<CaptureFigures>,
    pub cdr: Option<CdrWriterStats>,
    pub archive: Option<QueueFigures>,
    pub threads: Vec<ThreadCpu>,
    /// Clock ticks per second of `ThreadCpu::cpu_ticks`.
    pub ticks_per_s: u64,
    pub rss_bytes: Option<u64>,
    /// HEP in (`--hep-listen`).
    pub hep: Option<crate::hep::HepStatsSnapshot>,
    /// HEP out (`--hep-send`).
    pub hep_send: Option<crate::hep_send::HepSendSnapshot>,
}

/// A part of the capture that reports figures. `sample` is called from the status thread and
/// from HTTP requests for `/metrics`: it must only read counters, never wait.
pub trait StatusSource: Send + Sync {
    fn sample(&self, s: &mut Sample);
}

impl StatusSource for Arc<LiveCounters> {
    fn sample(&self, s: &mut Sample) {
        let l = self.snapshot();
        s.calls = Some(CallFigures {
            active: l.calls_active,
            total: l.calls_started,
        });
        s.packets = Some(PacketFigures {
            total: l.packets,
            sip: l.sip_messages,
            rtp: l.rtp_packets,
        });
    }
}

impl StatusSource for CdrWriterWatch {
    fn sample(&self, s: &mut Sample) {
        s.cdr = Some(self.stats());
    }
}

/// The sources of one capture run. Cloning shares them.
#[derive(Clone, Default)]
pub struct StatusBoard {
    sources: Arc<Mutex<Vec<Box<dyn StatusSource>>>>,
}

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusBoard")
    }
}

impl StatusBoard {
    /// Registers a part's figures.
    pub fn add(&self, source: impl StatusSource + 'static) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(source));
    }

    /// Every source's figures, with threads and memory from /proc.
    pub fn sample(&self) -> Sample {
        let mut s = Sample {
            threads: procstat::threads(),
            ticks_per_s: procstat::ticks_per_second(),
            rss_bytes: procstat::rss_bytes(),
            ..Sample::default()
        };
        for source in self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            source.sample(&mut s);
        }
        s
    }
}

/// Per-thread CPU use over an interval, threads of the same name added up (`name×N`), in
/// name order.
pub fn thread_cpu_pct(prev: &Sample, now: &Sample, secs: f64) -> Vec<(String, f64)> {
    let mut by_name: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
    let ticks = now.ticks_per_s.max(1) as f64 * secs.max(1e-9);
    for t in &now.threads {
        let before = prev
            .threads
            .iter()
            .find(|p| p.tid == t.tid && p.name == t.name)
            .map_or(0, |p| p.cpu_ticks);
        let e = by_name.entry(&t.name).or_default();
        e.0 += t.cpu_ticks.saturating_sub(before) as f64 * 100.0 / ticks;
        e.1 += 1;
    }
    by_name
        .into_iter()
        .map(|(name, (pct, n))| {
            let label = if n > 1 {
                format!("{name}×{n}")
            } else {
                name.to_string()
            };
            (label, pct)
        })
        .collect()
}

fn rate(now: u64, prev: u64, secs: f64) -> f64 {
    now.saturating_sub(prev) as f64 / secs.max(1e-9)
}

/// A rate or percentage with a precision that suits its size.
fn num(v: f64) -> String {
    if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The status line for the `secs` seconds between two samples. Parts absent from `now` are
/// left out.
pub fn format_line(prev: &Sample, now: &Sample, secs: f64) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(c) = now.calls {
        let before = prev.calls.map_or(0, |p| p.total);
        parts.push(format!(
            "calls {} active, {} total, {}/s",
            c.active,
            c.total,
            num(rate(c.total, before, secs))
        ));
    }
    if let Some(p) = now.packets {
        let before = prev.packets.unwrap_or_default();
        parts.push(format!(
            "packets/s {} (SIP {}, RTP {})",
            num(rate(p.total, before.total, secs)),
            num(rate(p.sip, before.sip, secs)),
            num(rate(p.rtp, before.rtp, secs))
        ));
    }
    if let Some(c) = now.capture {
        let before = prev.capture.map_or(0, |p| p.kernel_drops);
        parts.push(format!(
            "kernel drops {} (+{})",
            c.kernel_drops,
            c.kernel_drops.saturating_sub(before)
        ));
        let mut b = format!("buffer {}%", num(c.buffer_used_pct));
        if c.buffer_overruns > 0 {
            b += &format!(", overruns {}", c.buffer_overruns);
        }
        parts.push(b);
    }
    if let Some(c) = &now.cdr {
        let mut s = format!(
            "CDR queue {}/{}, journal {}, dropped {}",
            c.queue_records, c.queue_records_max, c.journal_records, c.dropped_records
        );
        if !c.store_up {
            s += ", database down";
        }
        parts.push(s);
    }
    if let Some(a) = now.archive {
        let mut s = format!("archive queue {}/{}", a.depth, a.bound);
        if a.dropped > 0 {
            s += &format!(", dropped {}", a.dropped);
        }
        parts.push(s);
    }
    if let Some(h) = &now.hep {
        parts.push(crate::hep::status_part(prev.hep.as_ref(), h, secs));
    }
    if let Some(h) = &now.hep_send {
        parts.push(crate::hep_send::status_part(
            prev.hep_send.as_ref(),
            h,
            secs,
        ));
    }
    let cpu = thread_cpu_pct(prev, now, secs);
    if !cpu.is_empty() {
        let list: Vec<String> = cpu
            .iter()
            .map(|(name, pct)| format!("{name} {}%", num(*pct)))
            .collect();
        parts.push(format!("CPU {}", list.join(", ")));
    }
    if let Some(rss) = now.rss_bytes {
        parts.push(format!("RSS {}", mib(rss)));
    }
    parts.join(" | ")
}

/// The thread that logs the status line; stopped when dropped.
pub struct StatusLine {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatusLine {
    /// Logs a line every `interval` (info level, target `tandem::status`) until dropped.
    pub fn start(board: StatusBoard, interval: Duration) -> std::io::Result<StatusLine> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("capture-status".into())
            .spawn(move || {
                let (lock, cond) = &*thread_stop;
                let mut prev = board.sample();
                let mut prev_at = Instant::now();
                let mut next = prev_at + interval;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let now = Instant::now();
                    if *stopped {
                        return;
                    }
                    if now < next {
                        stopped = cond
                            .wait_timeout(stopped, next - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                        continue;
                    }
                    drop(stopped);
                    let sample = board.sample();
                    let at = Instant::now();
                    let line = format_line(&prev, &sample, (at - prev_at).as_secs_f64());
                    tracing::info!(target: "tandem::status", "{line}");
                    (prev, prev_at) = (sample, at);
                    next += interval;
                    stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                }
            })?;
        Ok(StatusLine {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        let (lock, cond) = &*self.stop;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cond.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The status line and metrics server of one capture run; both stop when it is dropped.
pub struct CaptureStatus {
    /// Parts started after the status (the archive writer, the live capture ring) register
    /// their sources here; a part that never does is left out of the line and the metrics.
    pub board: StatusBoard,
    _line: Option<StatusLine>,
    _metrics: Option<metrics::MetricsServer>,
}

impl CaptureStatus {
    /// Starts what `args` asks for, with the monitor's counters and, when CDRs are stored, the
    /// writer's. Other parts add theirs with `board.add`.
    pub fn start(
        config: &crate::config::StatusConfig,
        monitor: Arc<LiveCounters>,
        cdr: Option<CdrWriterWatch>,
    ) -> Result<CaptureStatus, crate::SensorError> {
        let board = StatusBoard::default();
        board.add(monitor);
        if let Some(w) = cdr {
            board.add(w);
        }
        let line = (config.interval_s > 0)
            .then(|| StatusLine::start(board.clone(), Duration::from_secs(config.interval_s)))
            .transpose()
            .map_err(|source| crate::SensorError::Thread {
                thread: "capture-status",
                source,
            })?;
        let metrics = config
            .metrics_listen
            .map(|addr| metrics::MetricsServer::start(addr, board.clone()))
            .transpose()?;
        Ok(CaptureStatus {
            board,
            _line: line,
            _metrics: metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32, name: &str, cpu_ticks: u64) -> ThreadCpu {
        ThreadCpu {
            tid,
            name: name.into(),
            cpu_ticks,
        }
    }

    /// Ten seconds of a capture with every part present.
    fn ten_seconds() -> (Sample, Sample) {
        let prev = Sample {
            calls: Some(CallFigures {
                active: 10,
                total: 3441,
            }),
            packets: Some(PacketFigures {
                total: 100_000,
                sip: 4_000,
                rtp: 96_000,
            }),
            capture: Some(CaptureFigures {
                kernel_drops: 5,
                buffer_used_pct: 1.0,
                buffer_overruns: 0,
            }),
            cdr: Some(CdrWriterStats::default()),
            archive: Some(QueueFigures::default()),
            threads: vec![
                thread(100, "tandem", 1_000),
                thread(101, "monitor-worker-0", 2_000),
                thread(102, "monitor-worker-1", 2_000),
                thread(103, "cdr-writer", 10),
            ],
            ticks_per_s: 100,
            rss_bytes: Some(40 << 20),
            hep: None,
            hep_send: None,
        };
        let now = Sample {
            calls: Some(CallFigures {
                active: 12,
                total: 3456,
            }),
            packets: Some(PacketFigures {
                total: 112_400,
                sip: 4_400,
                rtp: 108_000,
            }),
            capture: Some(CaptureFigures {
                kernel_drops: 7,
                buffer_used_pct: 3.2,
                buffer_overruns: 0,
            }),
            cdr: Some(CdrWriterStats {
                queue_records: 3,
                queue_records_max: 10_000,
                journal_records: 120,
                dropped_records: 0,
                store_up: false,
                ..CdrWriterStats::default()
            }),
            archive: Some(QueueFigures {
                depth: 2,
                bound: 4096,
                dropped: 0,
            }),
            threads: vec![
                thread(100, "tandem", 1_120),
                thread(101, "monitor-worker-0", 2_300),
                thread(102, "monitor-worker-1", 2_250),
                thread(103, "cdr-writer", 15),
                // Started during the interval: all its time is new.
                thread(104, "tokio-runtime-w", 2),
                thread(105, "tokio-runtime-w", 1),
            ],
            ticks_per_s: 100,
            rss_bytes: Some((45 << 20) + (1 << 19)),
            hep: None,
            hep_send: None,
        };
        (prev, now)
    }

    #[test]
    fn the_status_line_of_a_capture_with_every_part() {
        let (prev, now) = ten_seconds();
        assert_eq!(
            format_line(&prev, &now, 10.0),
            "calls 12 active, 3456 total, 1.5/s \
             | packets/s 1240 (SIP 40, RTP 1200) \
             | kernel drops 7 (+2) \
             | buffer 3.2% \
             | CDR queue 3/10000, journal 120, dropped 0, database down \
             | archive queue 2/4096 \
             | CPU cdr-writer 0.5%, monitor-worker-0 30%, monitor-worker-1 25%, tandem 12%, tokio-runtime-w×2 0.3% \
             | RSS 45.5 MiB"
        );
    }

    #[test]
    fn parts_that_are_absent_are_left_out_not_shown_as_zero() {
        // A --read run without CDR storage: no capture ring, no CDR writer, no archive.
        let (mut prev, mut now) = ten_seconds();
        for s in [&mut prev, &mut now] {
            s.capture = None;
            s.cdr = None;
            s.archive = None;
            s.threads.clear();
            s.rss_bytes = None;
        }
        assert_eq!(
            format_line(&prev, &now, 10.0),
            "calls 12 active, 3456 total, 1.5/s | packets/s 1240 (SIP 40, RTP 1200)"
        );
    }
}
