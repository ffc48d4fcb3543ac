//! The live source: calls from a network interface.
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

use afpacket::filter::Filter;
use afpacket::{Capture, CaptureConfig, Fanout, RingConfig};

use crate::SensorError;
use crate::config::LiveConfig;
use crate::feed::{Feed, FlushClock, StopSignal};

/// Frames of live interfaces are Ethernet (LINKTYPE_ETHERNET).
const LINKTYPE_ETHERNET: u32 = 1;
/// A batch is handed to the analysis thread when it holds this many bytes, or at the end of
/// each kernel block.
pub const BATCH_BYTES_MAX: usize = 1 << 20;
/// How long a capture or analysis thread waits before looking at the stop flag again.
const POLL_MS: i32 = 100;

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
impl crate::status::StatusSource for Arc<LiveStats> {
    fn sample(&self, s: &mut crate::status::Sample) {
        let l = self.snapshot();
        s.capture = Some(crate::status::CaptureFigures {
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
    /// HEP correlation ids (chunk 17) of SIP frames, by the frame's index: what links a
    /// dialog to its call (`[legs]`). At most [`CORRELATION_BYTES_MAX`] bytes each.
    correlations: Vec<(u32, Box<[u8]>)>,
}

/// Bytes of a HEP correlation id kept: one more than the linker reads, so that a longer one
/// still reads as too long.
pub const CORRELATION_BYTES_MAX: usize = legs::config::MAX_VALUE_BYTES + 1;

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
    /// Each frame with its HEP correlation id, if it came with one.
    pub fn frames_correlated(&self) -> impl Iterator<Item = (i64, &[u8], Option<&[u8]>)> {
        let mut ids = self.correlations.iter().peekable();
        self.frames().enumerate().map(move |(i, (ts, frame))| {
            let id = ids
                .next_if(|(at, _)| *at as usize == i)
                .map(|(_, c)| &c[..]);
            (ts, frame, id)
        })
    }
    fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
        self.correlations.clear();
    }
    /// Gives the frame appended last this correlation id (cut to [`CORRELATION_BYTES_MAX`]).
    pub(crate) fn correlate_last(&mut self, id: &[u8]) {
        if let Some(last) = self.frames.len().checked_sub(1) {
            let id = &id[..id.len().min(CORRELATION_BYTES_MAX)];
            self.correlations.push((last as u32, id.into()));
        }
    }
    /// Appends one frame that `write` puts at the end of the batch's bytes (the HEP source
    /// rebuilds each packet straight into the batch).
    pub(crate) fn push_with(&mut self, ts_ns: i64, write: impl FnOnce(&mut Vec<u8>)) {
        let at = self.bytes.len();
        write(&mut self.bytes);
        self.frames
            .push((ts_ns, at as u32, (self.bytes.len() - at) as u32));
    }
    /// Bytes of the frames in the batch.
    pub(crate) fn bytes_len(&self) -> usize {
        self.bytes.len()
    }
    fn append(&mut self, other: &Batch) {
        let first = self.frames.len() as u32;
        self.correlations.extend(
            other
                .correlations
                .iter()
                .map(|(i, c)| (first + i, c.clone())),
        );
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

/// What [`FrameBuffer::pop`] found.
#[derive(Debug)]
pub enum Popped {
    Batch(Batch),
    /// Nothing arrived in time; more may come.
    Waiting,
    /// Every capture thread has ended and the buffer is empty.
    Ended,
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
    pub(crate) fn reserve(&self, n: usize) -> bool {
        if self.try_reserve(n) {
            return true;
        }
        self.stats.buffer_overruns.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Reserves room for `n` bytes if there is that much; false otherwise, nothing counted (a
    /// receive thread asking for more than one frame's room at a time).
    pub(crate) fn try_reserve(&self, n: usize) -> bool {
        let n = n as u64;
        let used = self.stats.buffer_bytes_used.fetch_add(n, Ordering::Relaxed) + n;
        if used > self.bytes_max {
            self.stats.buffer_bytes_used.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        self.stats
            .buffer_bytes_peak
            .fetch_max(used, Ordering::Relaxed);
        true
    }

    pub(crate) fn empty_batch(&self) -> Batch {
        self.queue
            .lock()
            .expect("buffer lock")
            .empty
            .pop()
            .unwrap_or_default()
    }

    /// Queues a filled batch and hands back an empty one.
    pub(crate) fn push(&self, mut batch: Batch) -> Batch {
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

    pub(crate) fn producer_done(&self) {
        self.queue.lock().expect("buffer lock").producers -= 1;
        self.ready.notify_all();
    }

    /// The next batch, waiting up to `timeout`.
    pub fn pop(&self, timeout: Duration) -> Popped {
        let mut q = self.queue.lock().expect("buffer lock");
        if q.full.is_empty() && q.producers > 0 {
            q = self.ready.wait_timeout(q, timeout).expect("buffer lock").0;
        }
        match q.full.pop_front() {
            Some(b) => Popped::Batch(b),
            None if q.producers == 0 => Popped::Ended,
            None => Popped::Waiting,
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
    /// Checks `c` and compiles its filter.
    pub fn from_config(c: &LiveConfig) -> Result<LiveOptions, SensorError> {
        if !(1..=64).contains(&c.capture_threads) {
            return Err(SensorError::Config(format!(
                "--capture-threads must be between 1 and 64, not {}",
                c.capture_threads
            )));
        }
        if !(1..=1 << 20).contains(&c.buffer_mib) {
            return Err(SensorError::Config(
                "--buffer-mib must be between 1 and 1048576".into(),
            ));
        }
        let filter = if c.filter.trim().is_empty() {
            None
        } else {
            Some(Filter::compile(&c.filter)?)
        };
        Ok(LiveOptions {
            interface: c.interface.clone(),
            ring: RingConfig::with_mib(c.ring_mib),
            filter,
            promiscuous: c.promiscuous,
            capture_threads: c.capture_threads,
            buffer_bytes_max: (c.buffer_mib as u64) << 20,
        })
    }

    /// Opens one ring per capture thread (in the calling thread's network namespace), all in
    /// one fanout group when there are several.
    pub fn open(&self) -> Result<Vec<Capture>, afpacket::Error> {
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
            .map(|_| Capture::open(&self.interface, &cfg))
            .collect()
    }
}

/// Capture threads running into a [`FrameBuffer`].
pub struct LiveCapture {
    pub buffer: Arc<FrameBuffer>,
    pub stats: Arc<LiveStats>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), afpacket::Error>>>,
    interface: String,
}

impl LiveCapture {
    /// Starts one thread per ring.
    pub fn start(captures: Vec<Capture>, buffer_bytes_max: u64) -> LiveCapture {
        let interface = captures
            .first()
            .map(|c| c.interface().to_string())
            .unwrap_or_default();
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
            interface,
        }
    }

    /// Asks the capture threads to take what the kernel holds and end; the buffer then
    /// drains (`FrameBuffer::pop` returns `Err` once it is empty).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for the capture threads; the first error one of them met.
    pub fn join(self) -> Result<(), SensorError> {
        self.request_stop();
        let mut first = Ok(());
        for t in self.threads {
            let r = match t.join() {
                Ok(r) => r.map_err(|source| SensorError::CaptureThread {
                    interface: self.interface.clone(),
                    source,
                }),
                Err(_) => Err(SensorError::Panicked),
            };
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
) -> Result<(), afpacket::Error> {
    let mut batch = buffer.empty_batch();
    let mut last = afpacket::KernelStats::default();
    let mut last_stats_at = Instant::now();
    let mut draining_until: Option<Instant> = None;
    let mut update = |cap: &mut Capture| -> Result<(), afpacket::Error> {
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

/// Analyses frames on the sensor's thread until stopped, `max_packets` or `duration_s`,
/// handing finished records to the sinks every second (the same path as capture files).
pub(crate) fn analyse(
    live: LiveCapture,
    config: &LiveConfig,
    sink: &mut Feed<'_>,
    packets: &mut u64,
    stop: &StopSignal,
) -> Result<(), SensorError> {
    let deadline = config
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut clock = FlushClock::new();
    let mut stopping = false;
    loop {
        let limit_reached = config.max_packets.is_some_and(|m| *packets >= m);
        if !stopping
            && (stop.is_stopped() || limit_reached || deadline.is_some_and(|d| Instant::now() >= d))
        {
            live.request_stop();
            stopping = true;
        }
        // Quiet: the buffer had nothing for the analysis, so capture time may follow the
        // wall clock.
        let quiet = match live.buffer.pop(Duration::from_millis(POLL_MS as u64)) {
            Popped::Batch(batch) => {
                for (ts, frame) in batch.frames() {
                    if config.max_packets.is_some_and(|m| *packets >= m) {
                        break;
                    }
                    sink.packet(ts, LINKTYPE_ETHERNET, frame);
                    *packets += 1;
                }
                live.buffer.recycle(batch);
                sink.batch_analysed();
                false
            }
            Popped::Waiting => true,
            Popped::Ended => break,
        };
        if (clock.due() || (quiet && sink.holding()))
            && let Err(e) = sink.flush_finished(quiet && !stopping)
        {
            let _ = live.join();
            return Err(e);
        }
    }
    live.join()
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
        let Popped::Batch(b) = buf.pop(Duration::ZERO) else {
            panic!("a batch")
        };
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
        let Popped::Batch(b) = buf.pop(Duration::ZERO) else {
            panic!("a batch")
        };
        let got: Vec<&[u8]> = b.frames().map(|(_, f)| f).collect();
        assert_eq!(got, [&b"one"[..], b"two", b"three"]);
        assert!(matches!(buf.pop(Duration::ZERO), Popped::Ended));
    }
}
