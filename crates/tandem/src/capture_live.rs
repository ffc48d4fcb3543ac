//! `tandem capture --interface IF`: calls from a live interface.
//!
//! ```text
//! kernel ring (TPACKET_V3, per capture thread) ──▶ capture thread(s) ──batches──▶ FrameBuffer
//!                                                                               (bounded, bytes)
//!                                               analysis thread (the caller) ◀──┘
//!                                               Monitor::packet, output and CDRs as for --read
//! ```
//!
//! A capture thread does nothing but move frames from its kernel ring into the bounded
//! [`FrameBuffer`], a block at a time, so that it keeps up with bursts the analysis cannot
//! absorb at once. When the ring is full the kernel drops and counts (`kernel_drops`); when the
//! buffer is full the capture thread drops and counts (`buffer_overruns`). Loss is never
//! silent: [`LiveStats`] holds every counter, for the status line and metrics, and is printed
//! at exit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use afpacket::filter::{DEFAULT_FILTER, Filter};
use afpacket::{Capture, CaptureConfig, Fanout, RingConfig};
use anyhow::Context;
use monitor::{Analysis, Monitor};

/// Frames of live interfaces are Ethernet (LINKTYPE_ETHERNET).
const LINKTYPE_ETHERNET: u32 = 1;
/// A batch is handed to the analysis thread when it holds this many bytes, or at the end of
/// each kernel block.
pub const BATCH_BYTES_MAX: usize = 1 << 20;
/// How long a capture or analysis thread waits before looking at the stop flag again.
const POLL_MS: i32 = 100;

#[derive(clap::Args, Debug, Clone)]
pub struct LiveArgs {
    /// Capture live from this network interface (AF_PACKET with a TPACKET_V3 ring; needs root
    /// or CAP_NET_RAW). Runs until SIGTERM or ctrl-c (or --max-packets / --duration-s);
    /// finished calls are printed and stored every second.
    #[arg(long, value_name = "IF", conflicts_with_all = ["read", "hep_listen"])]
    pub interface: Option<String>,
    /// Kernel ring per capture thread, in MiB (256 KiB blocks handed over every 10 ms at least).
    #[arg(long, value_name = "MIB", default_value_t = 64, requires = "interface")]
    pub ring_mib: usize,
    /// pcap-filter expression (a documented subset: udp, tcp, ip, ip6, [src|dst] port,
    /// portrange, host, net, proto, vlan, and/or/not, parentheses). "" captures everything.
    #[arg(long, value_name = "EXPR", default_value = DEFAULT_FILTER, requires = "interface")]
    pub filter: String,
    /// Also receive frames addressed to other hosts (a mirror or SPAN port).
    #[arg(long, requires = "interface")]
    pub promiscuous: bool,
    /// Capture threads sharing the interface by flow hash (PACKET_FANOUT); each has its ring.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "interface")]
    pub capture_threads: usize,
    /// The bounded buffer between the capture threads and the analysis, in MiB of frames.
    #[arg(long, value_name = "MIB", default_value_t = 64, requires = "interface")]
    pub buffer_mib: usize,
    /// Stop after analysing this many frames (for tests and trials).
    #[arg(long, value_name = "N", requires = "interface")]
    pub max_packets: Option<u64>,
    /// Stop after this many seconds (for tests and trials).
    #[arg(long, value_name = "SECONDS", requires = "interface")]
    pub duration_s: Option<u64>,
}

/// The live capture's counters, updated by the capture threads as they go. Read with
/// [`LiveStats::snapshot`] from any thread.
#[derive(Debug, Default)]
pub struct LiveStats {
    /// Frames that passed the filter in the kernel (including those it dropped).
    pub kernel_packets: AtomicU64,
    /// Frames the kernel dropped because the ring was full.
    pub kernel_drops: AtomicU64,
    /// Times a ring was full and frozen.
    pub kernel_freezes: AtomicU64,
    /// Frame bytes in the buffer now, and its bound.
    pub buffer_bytes_used: AtomicU64,
    pub buffer_bytes_max: AtomicU64,
    /// Most frame bytes the buffer held at once.
    pub buffer_bytes_peak: AtomicU64,
    /// Frames dropped because the buffer was full.
    pub buffer_overruns: AtomicU64,
    /// Frames moved into the buffer.
    pub packets_captured: AtomicU64,
    /// Frames the analysis took out of the buffer.
    pub packets_analysed: AtomicU64,
}

/// A copy of [`LiveStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LiveStatsSnapshot {
    pub kernel_packets: u64,
    pub kernel_drops: u64,
    pub kernel_freezes: u64,
    pub buffer_bytes_used: u64,
    pub buffer_bytes_max: u64,
    pub buffer_bytes_peak: u64,
    pub buffer_overruns: u64,
    pub packets_captured: u64,
    pub packets_analysed: u64,
}

/// Kernel drops and buffer use on the status line and in the metrics.
impl crate::capture_status::StatusSource for Arc<LiveStats> {
    fn sample(&self, s: &mut crate::capture_status::Sample) {
        let l = self.snapshot();
        s.capture = Some(crate::capture_status::CaptureFigures {
            kernel_drops: l.kernel_drops,
            buffer_used_pct: if l.buffer_bytes_max == 0 {
                0.0
            } else {
                l.buffer_bytes_used as f64 * 100.0 / l.buffer_bytes_max as f64
            },
            buffer_overruns: l.buffer_overruns,
        });
    }
}

impl LiveStats {
    pub fn snapshot(&self) -> LiveStatsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LiveStatsSnapshot {
            kernel_packets: r(&self.kernel_packets),
            kernel_drops: r(&self.kernel_drops),
            kernel_freezes: r(&self.kernel_freezes),
            buffer_bytes_used: r(&self.buffer_bytes_used),
            buffer_bytes_max: r(&self.buffer_bytes_max),
            buffer_bytes_peak: r(&self.buffer_bytes_peak),
            buffer_overruns: r(&self.buffer_overruns),
            packets_captured: r(&self.packets_captured),
            packets_analysed: r(&self.packets_analysed),
        }
    }
}

impl std::fmt::Display for LiveStatsSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames captured, {} analysed; kernel: {} passed the filter, {} dropped (ring full), {} freezes; buffer: {} overruns, peak {} of {} bytes",
            self.packets_captured,
            self.packets_analysed,
            self.kernel_packets,
            self.kernel_drops,
            self.kernel_freezes,
            self.buffer_overruns,
            self.buffer_bytes_peak,
            self.buffer_bytes_max,
        )
    }
}

/// Frames moved out of the ring together: their bytes back to back, and per frame its
/// reception time, offset and length.
#[derive(Debug, Default)]
pub struct Batch {
    bytes: Vec<u8>,
    frames: Vec<(i64, u32, u32)>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.frames.len()
    }
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
    /// (reception time in ns, the frame as it was on the wire).
    pub fn frames(&self) -> impl Iterator<Item = (i64, &[u8])> {
        self.frames
            .iter()
            .map(|&(ts, at, len)| (ts, &self.bytes[at as usize..(at + len) as usize]))
    }
    fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
    }
    fn append(&mut self, other: &Batch) {
        let base = self.bytes.len() as u32;
        self.bytes.extend_from_slice(&other.bytes);
        self.frames.extend(
            other
                .frames
                .iter()
                .map(|&(ts, at, len)| (ts, base + at, len)),
        );
    }
}

/// The bounded buffer between the capture threads and the analysis. Its bound is on frame
/// bytes queued (`bytes_max`): a capture thread reserves a frame's bytes before copying it and
/// drops the frame (an overrun) when they do not fit. Small batches are merged into the last
/// queued one, so the number of batches, and the memory they hold, stays within about twice
/// `bytes_max` plus one batch per capture thread.
pub struct FrameBuffer {
    queue: Mutex<Queue>,
    ready: Condvar,
    stats: Arc<LiveStats>,
    bytes_max: u64,
}

struct Queue {
    full: VecDeque<Batch>,
    empty: Vec<Batch>,
    /// Capture threads still running; when 0 and `full` is empty, nothing more will come.
    producers: usize,
}

impl FrameBuffer {
    pub fn new(bytes_max: u64, producers: usize, stats: Arc<LiveStats>) -> FrameBuffer {
        stats.buffer_bytes_max.store(bytes_max, Ordering::Relaxed);
        FrameBuffer {
            queue: Mutex::new(Queue {
                full: VecDeque::new(),
                empty: Vec::new(),
                producers,
            }),
            ready: Condvar::new(),
            stats,
            bytes_max,
        }
    }

    /// Reserves room for `n` bytes of frame; false (and an overrun counted) when full.
    fn reserve(&self, n: usize) -> bool {
        let n = n as u64;
        let used = self.stats.buffer_bytes_used.fetch_add(n, Ordering::Relaxed) + n;
        if used > self.bytes_max {
            self.stats.buffer_bytes_used.fetch_sub(n, Ordering::Relaxed);
            self.stats.buffer_overruns.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.stats
            .buffer_bytes_peak
            .fetch_max(used, Ordering::Relaxed);
        true
    }

    fn empty_batch(&self) -> Batch {
        self.queue
            .lock()
            .expect("buffer lock")
            .empty
            .pop()
            .unwrap_or_default()
    }

    /// Queues a filled batch and hands back an empty one.
    fn push(&self, mut batch: Batch) -> Batch {
        let frames = batch.len() as u64;
        let mut q = self.queue.lock().expect("buffer lock");
        match q.full.back_mut() {
            Some(last) if last.bytes.len() + batch.bytes.len() <= BATCH_BYTES_MAX => {
                last.append(&batch);
                batch.clear();
            }
            _ => {
                q.full.push_back(batch);
                batch = q.empty.pop().unwrap_or_default();
            }
        }
        drop(q);
        self.stats
            .packets_captured
            .fetch_add(frames, Ordering::Relaxed);
        self.ready.notify_one();
        batch
    }

    fn producer_done(&self) {
        self.queue.lock().expect("buffer lock").producers -= 1;
        self.ready.notify_all();
    }

    /// The next batch, waiting up to `timeout`. `Err(())` once every capture thread has ended
    /// and the buffer is empty.
    pub fn pop(&self, timeout: Duration) -> Result<Option<Batch>, ()> {
        let mut q = self.queue.lock().expect("buffer lock");
        if q.full.is_empty() && q.producers > 0 {
            q = self.ready.wait_timeout(q, timeout).expect("buffer lock").0;
        }
        match q.full.pop_front() {
            Some(b) => Ok(Some(b)),
            None if q.producers == 0 => Err(()),
            None => Ok(None),
        }
    }

    /// Gives back an analysed batch: its bytes leave the buffer's count.
    pub fn recycle(&self, mut batch: Batch) {
        self.stats
            .buffer_bytes_used
            .fetch_sub(batch.bytes.len() as u64, Ordering::Relaxed);
        self.stats
            .packets_analysed
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        batch.clear();
        // A batch that grew past the batch size (one large frame) is not kept.
        if batch.bytes.capacity() <= 2 * BATCH_BYTES_MAX {
            self.queue.lock().expect("buffer lock").empty.push(batch);
        }
    }
}

/// What a live capture is set up with (from the command line, or by the benchmark).
#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub interface: String,
    pub ring: RingConfig,
    pub filter: Option<Filter>,
    pub promiscuous: bool,
    pub capture_threads: usize,
    pub buffer_bytes_max: u64,
}

impl LiveOptions {
    pub fn from_args(a: &LiveArgs, interface: &str) -> anyhow::Result<LiveOptions> {
        anyhow::ensure!(
            (1..=64).contains(&a.capture_threads),
            "--capture-threads must be between 1 and 64, not {}",
            a.capture_threads
        );
        anyhow::ensure!(
            (1..=1 << 20).contains(&a.buffer_mib),
            "--buffer-mib must be between 1 and 1048576"
        );
        let filter = if a.filter.trim().is_empty() {
            None
        } else {
            Some(Filter::compile(&a.filter)?)
        };
        Ok(LiveOptions {
            interface: interface.to_string(),
            ring: RingConfig::with_mib(a.ring_mib),
            filter,
            promiscuous: a.promiscuous,
            capture_threads: a.capture_threads,
            buffer_bytes_max: (a.buffer_mib as u64) << 20,
        })
    }

    /// Opens one ring per capture thread (in the calling thread's network namespace), all in
    /// one fanout group when there are several.
    pub fn open(&self) -> anyhow::Result<Vec<Capture>> {
        let fanout = (self.capture_threads > 1).then(|| Fanout {
            group_id: (std::process::id() & 0xffff) as u16,
        });
        let cfg = CaptureConfig {
            ring: self.ring,
            promiscuous: self.promiscuous,
            fanout,
            filter: self.filter.clone(),
        };
        (0..self.capture_threads)
            .map(|_| Capture::open(&self.interface, &cfg).map_err(anyhow::Error::from))
            .collect()
    }
}

/// Capture threads running into a [`FrameBuffer`].
pub struct LiveCapture {
    pub buffer: Arc<FrameBuffer>,
    pub stats: Arc<LiveStats>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl LiveCapture {
    /// Starts one thread per ring.
    pub fn start(captures: Vec<Capture>, buffer_bytes_max: u64) -> LiveCapture {
        let stats = Arc::new(LiveStats::default());
        let buffer = Arc::new(FrameBuffer::new(
            buffer_bytes_max,
            captures.len(),
            stats.clone(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = captures
            .into_iter()
            .enumerate()
            .map(|(i, cap)| {
                let (buffer, stats, stop) = (buffer.clone(), stats.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("capture-{i}"))
                    .spawn(move || {
                        let r = capture_loop(cap, &buffer, &stats, &stop);
                        buffer.producer_done();
                        r
                    })
                    .expect("spawning a capture thread")
            })
            .collect();
        LiveCapture {
            buffer,
            stats,
            stop,
            threads,
        }
    }

    /// Asks the capture threads to take what the kernel holds and end; the buffer then
    /// drains (`FrameBuffer::pop` returns `Err` once it is empty).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for the capture threads; the first error one of them met.
    pub fn join(self) -> anyhow::Result<()> {
        self.request_stop();
        let mut first = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a capture thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// One capture thread: blocks from the ring into batches, batches into the buffer, the
/// kernel's counters into `stats`. On stop it waits two block timeouts for the kernel to
/// hand over its last partly filled block, takes every block there is, and ends.
fn capture_loop(
    mut cap: Capture,
    buffer: &FrameBuffer,
    stats: &LiveStats,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut batch = buffer.empty_batch();
    let mut last = afpacket::KernelStats::default();
    let mut last_stats_at = Instant::now();
    let mut draining_until: Option<Instant> = None;
    let mut update = |cap: &mut Capture| -> anyhow::Result<()> {
        let now = cap.stats()?;
        stats
            .kernel_packets
            .fetch_add(now.packets - last.packets, Ordering::Relaxed);
        stats
            .kernel_drops
            .fetch_add(now.drops - last.drops, Ordering::Relaxed);
        stats
            .kernel_freezes
            .fetch_add(now.freezes - last.freezes, Ordering::Relaxed);
        last = now;
        Ok(())
    };
    loop {
        let wait = match draining_until {
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                left.as_millis() as i32 + 1
            }
            None => POLL_MS,
        };
        if let Some(block) = cap.next_block(wait)? {
            for f in block.frames() {
                let n = f.len_with_tag();
                if !buffer.reserve(n) {
                    continue;
                }
                let at = batch.bytes.len() as u32;
                f.write_with_tag(&mut batch.bytes);
                batch.frames.push((f.ts_ns, at, n as u32));
                if batch.bytes.len() >= BATCH_BYTES_MAX {
                    batch = buffer.push(batch);
                }
            }
            drop(block);
            if !batch.is_empty() {
                batch = buffer.push(batch);
            }
        }
        if last_stats_at.elapsed() >= Duration::from_millis(250) {
            update(&mut cap)?;
            last_stats_at = Instant::now();
        }
        if draining_until.is_none() && stop.load(Ordering::Relaxed) {
            let timeout = Duration::from_millis(2 * u64::from(cap.block_timeout_ms()) + 20);
            draining_until = Some(Instant::now() + timeout);
        }
    }
    update(&mut cap)?;
    if cap.malformed_blocks() > 0 {
        tracing::warn!(
            interface = cap.interface(),
            blocks = cap.malformed_blocks(),
            "ring blocks with offsets outside the block were cut short"
        );
    }
    Ok(())
}

/// Runs the live capture for `tandem capture --interface`: analyses frames on this thread
/// until a signal, `--max-packets` or `--duration-s`, flushing finished records every second
/// through `flush` (the same output and CDR path as `--read`).
pub fn live_source(
    args: &LiveArgs,
    mon: &mut Monitor,
    packets: &mut u64,
    status: &crate::capture_status::StatusBoard,
    mut flush: impl FnMut(Analysis) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let interface = args.interface.as_deref().expect("--interface given");
    let opts = LiveOptions::from_args(args, interface)?;
    let captures = opts
        .open()
        .with_context(|| format!("cannot capture on {interface}"))?;
    let live = LiveCapture::start(captures, opts.buffer_bytes_max);
    status.add(live.stats.clone());
    eprintln!(
        "capturing on {interface}: {} thread(s), ring {} MiB each, buffer {} MiB, filter {:?}",
        opts.capture_threads,
        opts.ring.ring_bytes() >> 20,
        opts.buffer_bytes_max >> 20,
        args.filter
    );
    let deadline = args
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut last_flush = Instant::now();
    let mut stopping = false;
    loop {
        let limit_reached = args.max_packets.is_some_and(|m| *packets >= m);
        if !stopping
            && (crate::capture::stop_requested()
                || limit_reached
                || deadline.is_some_and(|d| Instant::now() >= d))
        {
            live.request_stop();
            stopping = true;
        }
        match live.buffer.pop(Duration::from_millis(POLL_MS as u64)) {
            Ok(Some(batch)) => {
                for (ts, frame) in batch.frames() {
                    if args.max_packets.is_some_and(|m| *packets >= m) {
                        break;
                    }
                    mon.packet(ts, LINKTYPE_ETHERNET, frame);
                    *packets += 1;
                }
                live.buffer.recycle(batch);
            }
            Ok(None) => {}
            Err(()) => break,
        }
        if last_flush.elapsed() >= Duration::from_secs(1) {
            flush(mon.take_finished())?;
            last_flush = Instant::now();
        }
    }
    let stats = live.stats.clone();
    let result = live.join();
    eprintln!("live capture on {interface}: {}", stats.snapshot());
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_of(frames: &[&[u8]]) -> Batch {
        let mut b = Batch::default();
        for f in frames {
            let at = b.bytes.len() as u32;
            b.bytes.extend_from_slice(f);
            b.frames.push((7, at, f.len() as u32));
        }
        b
    }

    #[test]
    fn a_full_buffer_drops_and_counts_instead_of_growing() {
        let stats = Arc::new(LiveStats::default());
        let buf = FrameBuffer::new(100, 1, stats.clone());
        assert!(buf.reserve(60));
        assert!(buf.reserve(40));
        assert!(!buf.reserve(1));
        let s = stats.snapshot();
        assert_eq!(
            (s.buffer_bytes_used, s.buffer_overruns, s.buffer_bytes_peak),
            (100, 1, 100)
        );
        // Once analysed, the bytes leave the count and room comes back.
        let back = buf.push(batch_of(&[&[0; 60], &[0; 40]]));
        assert!(back.is_empty());
        let b = buf.pop(Duration::ZERO).unwrap().unwrap();
        assert_eq!(b.len(), 2);
        buf.recycle(b);
        assert!(buf.reserve(100));
        assert_eq!(stats.snapshot().packets_analysed, 2);
    }

    #[test]
    fn small_batches_merge_in_order_and_the_end_is_seen() {
        let stats = Arc::new(LiveStats::default());
        let buf = FrameBuffer::new(1 << 20, 1, stats);
        buf.push(batch_of(&[b"one"]));
        buf.push(batch_of(&[b"two", b"three"]));
        buf.producer_done();
        let b = buf.pop(Duration::ZERO).unwrap().unwrap();
        let got: Vec<&[u8]> = b.frames().map(|(_, f)| f).collect();
        assert_eq!(got, [&b"one"[..], b"two", b"three"]);
        assert!(buf.pop(Duration::ZERO).is_err());
    }
}
