//! The archive sink (`tandem capture --archive DIR`): every packet the monitor attributes to a
//! call is stored with the call, in per-minute tar files (`DIR/YYYY-MM-DD/HH/MM/sip.tar` and `rtp.tar`, see the
//! `archive` crate), and each call's CDR says where. A stream without a call (RTP no SDP
//! announced) is stored the same way as a member of its own in `rtp.tar`
//! (`rtp_SRC_DST_SSRC.pcap`, its RTP and the RTCP on it), and its CDR row says where.
//!
//! The flow: [`monitor`] builds the [`Monitor`] with one [`ArchiveTap`] per shard, so every
//! source that feeds `Monitor::packet` (capture files, HEP, live interfaces) is archived the
//! same way. A tap copies each attributed frame into a batch and hands full batches (and, about
//! once a second of capture time, whatever it has) to the archive thread over a bounded queue
//! with `try_send`: when the queue is full the batch's packets are dropped and counted, never
//! waited for. Calls' ends are never dropped: they stay with the tap until a batch carrying them
//! is accepted. The archive thread owns the [`Archive`], closes a call once every shard has
//! passed the capture time of its end (a call's SIP and media can be on different shards), and
//! sends back where the call's members are; [`CaptureArchive::release`] holds a closed call's
//! record until then, so its CDR row carries the location. A stream without a call is one
//! shard's, which reports its end after all of it: it is written at its end, and its record
//! held the same way. One whose SDP comes after its first packets becomes its call's, and
//! what was kept of it moves into the call's member (`writer.rs`).
//!
//! What is not archived: media that arrives after its call closed (counted as late), packets
//! past the archive's limits, and a call's packets whose link type differs from its first
//! packet's. Each loss is counted, and the calls (and streams) behind it are named
//! (`losses.rs`).
//! Retention runs on the capture's clock (the newest packet time): replaying a file prunes as
//! live capture at that time would. Calls are aged by the shards' progress instead, which
//! never moves back, so that files read out of time order keep every call (`writer.rs`).

mod losses;
mod writer;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use archive::{
    Archive, ArchiveConfig, CallArchive, Compression, MemberRecord, Retention, StoreMode,
};
use cdr::{CdrCall, CdrStream};
use monitor::{
    Analysis, CallRecord, CallTap, Monitor, MonitorConfig, StreamId, StreamRecord, TapFrame,
    TapKind,
};

use crate::SensorError;
use crate::config::ArchiveSettings;
use losses::{Loss, LossNames};
use writer::Writer;

/// Batches waiting for the archive thread. With [`BATCH_BYTES_MAX`] this bounds the queue to
/// about 16 MiB of frames (a batch may exceed its byte bound by one frame).
pub const QUEUE_BATCHES_MAX: usize = 64;
/// A tap hands its batch over once it holds this many packets...
pub const BATCH_PACKETS_MAX: usize = 1024;
/// ...or this many bytes of frames.
pub const BATCH_BYTES_MAX: usize = 256 * 1024;
/// A partial batch is handed over at most this often (wall time), on the monitor's progress.
const HANDOVER_INTERVAL: Duration = Duration::from_millis(100);
/// Call-IDs of recently closed calls remembered, so that media arriving after its call closed
/// is counted as late instead of starting a call that never ends.
const RECENT_ENDS_MAX: usize = 65_536;
/// How often (the shards' progress in capture time) the archive thread applies retention and
/// forgets orphaned calls.
const HOUSEKEEPING_EVERY_NS: i64 = 60_000_000_000;

/// Counters of the archive pipeline, shared by the taps, the archive thread and the status line.
#[derive(Debug, Default)]
pub struct ArchiveGauges {
    queue_batches: AtomicU64,
    queue_bytes: AtomicU64,
    packets_written: AtomicU64,
    bytes_written: AtomicU64,
    files_created: AtomicU64,
    members_written: AtomicU64,
    calls_archived: AtomicU64,
    streams_archived: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_bytes_queue_full: AtomicU64,
    dropped_at_limits: AtomicU64,
    /// Packets the archive dropped at its per-call and total buffer limits.
    dropped_in_buffers: AtomicU64,
    packets_late: AtomicU64,
    calls_orphaned: AtomicU64,
    errors: AtomicU64,
    minutes_pruned: AtomicU64,
    /// The calls behind the losses counted here.
    names: LossNames,
}

/// A snapshot of [`ArchiveGauges`], for a status line or metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArchiveStatus {
    /// Batches waiting for the archive thread (at most [`QUEUE_BATCHES_MAX`]).
    pub archive_queue: u64,
    /// Bytes of frames in those batches.
    pub archive_queue_bytes: u64,
    /// Packets written into tar members.
    pub packets_written: u64,
    /// Bytes written to tar files (headers, data, padding, trailers).
    pub bytes_written: u64,
    /// Tar files created.
    pub files_created: u64,
    /// Members (one per call and kind) appended.
    pub members_written: u64,
    /// Calls whose members were written.
    pub calls_archived: u64,
    /// Streams without a call whose members were written.
    pub streams_archived: u64,
    /// Packets dropped because the queue was full.
    pub dropped: u64,
    /// Bytes of those packets.
    pub dropped_bytes: u64,
    /// Packets dropped at the archive's buffer limits, or for a link type other than their
    /// call's.
    pub dropped_at_limits: u64,
    /// Media packets that arrived after their call was closed.
    pub late: u64,
    /// Calls never closed by the monitor (their packets were attributed to a call it had
    /// already closed), forgotten unwritten.
    pub orphaned: u64,
    /// Write errors (each is logged).
    pub errors: u64,
    /// Minute directories deleted by retention.
    pub minutes_pruned: u64,
}

/// The archive's queue on the status line and in the metrics.
impl crate::status::StatusSource for Arc<ArchiveGauges> {
    fn sample(&self, s: &mut crate::status::Sample) {
        let st = self.status();
        s.archive = Some(crate::status::QueueFigures {
            depth: st.archive_queue,
            bound: QUEUE_BATCHES_MAX as u64,
            dropped: st.dropped,
        });
    }
}

impl ArchiveGauges {
    /// The current values.
    pub fn status(&self) -> ArchiveStatus {
        ArchiveStatus {
            archive_queue: self.queue_batches.load(Relaxed),
            archive_queue_bytes: self.queue_bytes.load(Relaxed),
            packets_written: self.packets_written.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            files_created: self.files_created.load(Relaxed),
            members_written: self.members_written.load(Relaxed),
            calls_archived: self.calls_archived.load(Relaxed),
            streams_archived: self.streams_archived.load(Relaxed),
            dropped: self.dropped_queue_full.load(Relaxed),
            dropped_bytes: self.dropped_bytes_queue_full.load(Relaxed),
            dropped_at_limits: self.dropped_at_limits.load(Relaxed)
                + self.dropped_in_buffers.load(Relaxed),
            late: self.packets_late.load(Relaxed),
            orphaned: self.calls_orphaned.load(Relaxed),
            errors: self.errors.load(Relaxed),
            minutes_pruned: self.minutes_pruned.load(Relaxed),
        }
    }
}

/// Whose packets an archive entry holds: a call's (by Call-ID), or a stream's without a call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Owner {
    Call(Arc<str>),
    Stream(StreamId),
}

impl Owner {
    /// How a loss names it: the Call-ID, or the stream's addresses and SSRC.
    fn name(&self) -> Arc<str> {
        match self {
            Owner::Call(c) => c.clone(),
            Owner::Stream(s) => Arc::from(stream_name(s)),
        }
    }
}

/// A stream without a call as people read it: `stream 10.0.0.1:4000>10.0.0.2:5000 0x0000ABCD`.
fn stream_name(s: &StreamId) -> String {
    format!("stream {}>{} 0x{:08X}", s.key.src, s.key.dst, s.key.ssrc)
}

/// A stream without a call's member name (without `.pcap`; `archive::safe_stem` confines it):
/// `rtp_SRC_DST_SSRC`, the SSRC in hex.
fn stream_stem(s: &StreamId) -> String {
    format!("rtp_{}_{}_{:08x}", s.key.src, s.key.dst, s.key.ssrc)
}

/// One frame attributed to a call or a stream, its bytes in the batch's buffer.
struct Item {
    owner: Owner,
    sip: bool,
    /// RTP: where its header starts in the kept bytes; RTCP and reassembled RTP: the kept
    /// length (everything is kept).
    rtp_offset: usize,
    ts_ns: i64,
    link_type: u32,
    start: usize,
    len: usize,
    orig_len: u32,
}

/// A call the monitor closed.
struct End {
    call: Arc<str>,
    invite_ns: i64,
    now_ns: i64,
}

/// A stream without a call that became `call`'s, after the batch's first `at` items.
struct Join {
    at: usize,
    stream: StreamId,
    call: Arc<str>,
}

/// What one shard's tap hands to the archive thread.
struct Batch {
    source: usize,
    data: Vec<u8>,
    items: Vec<Item>,
    ends: Vec<End>,
    joins: Vec<Join>,
    /// Streams without a call that ended (after every item of theirs): identity, kept.
    stream_ends: Vec<(StreamId, bool)>,
    /// The shard has seen every frame before this capture time.
    watermark_ns: i64,
}

impl Batch {
    fn new(source: usize, watermark_ns: i64) -> Batch {
        Batch {
            source,
            data: Vec::new(),
            items: Vec::new(),
            ends: Vec::new(),
            joins: Vec::new(),
            stream_ends: Vec::new(),
            watermark_ns,
        }
    }
}

/// A shard's tap: copies the frames attributed to calls into batches for the archive thread.
pub struct ArchiveTap {
    tx: SyncSender<Batch>,
    batch: Batch,
    store: StoreMode,
    gauges: Arc<ArchiveGauges>,
    /// Wait for room in the queue instead of dropping (capture files: nothing is lost by
    /// waiting). Live sources never wait.
    wait_when_full: bool,
    /// With several shards, the others' ends wait for this one's progress, so progress is
    /// handed over even without packets.
    shards: usize,
    last_handover: Instant,
}

impl ArchiveTap {
    /// Hands the batch over without waiting; when the queue is full its packets are dropped
    /// and counted, and its ends and joins stay for the next batch. `wait` (only when the
    /// capture has ended) waits for room instead.
    fn hand_over(&mut self, wait: bool) {
        let wait = wait || self.wait_when_full;
        self.last_handover = Instant::now();
        let fresh = Batch::new(self.batch.source, self.batch.watermark_ns);
        let batch = std::mem::replace(&mut self.batch, fresh);
        let bytes = batch.data.len() as u64;
        self.gauges.queue_batches.fetch_add(1, Relaxed);
        self.gauges.queue_bytes.fetch_add(bytes, Relaxed);
        let refused = if wait {
            self.tx.send(batch).err().map(|e| e.0)
        } else {
            match self.tx.try_send(batch) {
                Ok(()) => None,
                Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) => Some(b),
            }
        };
        if let Some(b) = refused {
            self.gauges.queue_batches.fetch_sub(1, Relaxed);
            self.gauges.queue_bytes.fetch_sub(bytes, Relaxed);
            self.gauges
                .dropped_queue_full
                .fetch_add(b.items.len() as u64, Relaxed);
            self.gauges
                .dropped_bytes_queue_full
                .fetch_add(bytes, Relaxed);
            for item in &b.items {
                if self.gauges.names.full(Loss::QueueFull) {
                    break;
                }
                self.gauges.names.add(Loss::QueueFull, &item.owner.name());
            }
            self.batch.ends = b.ends;
            self.batch.stream_ends = b.stream_ends;
            // Their items are gone: they come first in the next batch.
            self.batch.joins = b.joins;
            for j in &mut self.batch.joins {
                j.at = 0;
            }
        }
    }

    /// Copies a frame of `owner`'s into the batch.
    fn push(&mut self, owner: Owner, kind: TapKind, frame: &TapFrame<'_>) {
        let data = frame.data;
        let (sip, keep, rtp_offset) = match kind {
            TapKind::Sip => (true, data.len(), 0),
            _ if self.store == StoreMode::SipOnly => return,
            TapKind::Rtp {
                rtp_offset: Some(at),
            } if self.store == StoreMode::SipAndRtpHeaders && at <= data.len() => {
                // Cut here already, so that the queue carries no audio it would drop.
                let keep = at + archive::pcap::rtp_header_len(&data[at..]);
                (false, keep, at)
            }
            TapKind::Rtp {
                rtp_offset: Some(at),
            } => (false, data.len(), at.min(data.len())),
            // RTCP and T.38 are kept whole: no audio in them, and a fax is evidence.
            TapKind::Rtp { rtp_offset: None } | TapKind::Rtcp | TapKind::Udptl => {
                (false, data.len(), data.len())
            }
        };
        let b = &mut self.batch;
        let start = b.data.len();
        b.data.extend_from_slice(&data[..keep]);
        if sip {
            // SDES keys and MIKEY never reach the disk in clear (same length, so the frame
            // stays whole).
            sip::secrets::redact_keys(&mut b.data[start..]);
        }
        b.items.push(Item {
            owner,
            sip,
            rtp_offset,
            ts_ns: frame.ts_ns,
            link_type: frame.link_type,
            start,
            len: keep,
            orig_len: u32::try_from(data.len()).unwrap_or(u32::MAX),
        });
        if b.items.len() >= BATCH_PACKETS_MAX || b.data.len() >= BATCH_BYTES_MAX {
            self.hand_over(false);
        }
    }
}

impl CallTap for ArchiveTap {
    fn packet(&mut self, call_id: &Arc<str>, kind: TapKind, frame: &TapFrame<'_>) {
        self.push(Owner::Call(call_id.clone()), kind, frame);
    }

    fn stream_packet(&mut self, stream: &StreamId, kind: TapKind, frame: &TapFrame<'_>) {
        self.push(Owner::Stream(*stream), kind, frame);
    }

    fn stream_joined(&mut self, stream: &StreamId, call_id: &Arc<str>) {
        let at = self.batch.items.len();
        self.batch.joins.push(Join {
            at,
            stream: *stream,
            call: call_id.clone(),
        });
    }

    fn stream_ended(&mut self, stream: &StreamId, _now_ns: i64, kept: bool) {
        self.batch.stream_ends.push((*stream, kept));
    }

    fn call_ended(&mut self, call_id: &Arc<str>, invite_ns: i64, now_ns: i64) {
        self.batch.ends.push(End {
            call: call_id.clone(),
            invite_ns,
            now_ns,
        });
    }

    fn progress(&mut self, ts_ns: i64) {
        self.batch.watermark_ns = self.batch.watermark_ns.max(ts_ns);
        if ts_ns == i64::MAX {
            // The capture has ended: hand everything over, waiting for room.
            self.hand_over(true);
            return;
        }
        // Progress comes once a second of capture time, which a file replays in a burst:
        // partial batches go at most every HANDOVER_INTERVAL of wall time, so that the queue
        // is not flooded with nearly empty ones.
        let b = &self.batch;
        let something = !b.items.is_empty()
            || !b.ends.is_empty()
            || !b.joins.is_empty()
            || !b.stream_ends.is_empty();
        if (something || self.shards > 1) && self.last_handover.elapsed() >= HANDOVER_INTERVAL {
            self.hand_over(false);
        }
    }
}

/// What a result is about: a call (Call-ID, first INVITE), or a stream without a call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Call(Arc<str>, i64),
    Stream(StreamId),
}

/// Where a closed call's (or stream's) packets went, sent back by the archive thread.
struct Archived {
    key: Key,
    result: Result<CallArchive, String>,
}

/// The capture's side of the archive: the thread, its results, and the closed calls waiting
/// for them.
pub struct CaptureArchive {
    dir: PathBuf,
    gauges: Arc<ArchiveGauges>,
    thread: Option<JoinHandle<()>>,
    results: Receiver<Archived>,
    /// Results not yet matched to a released call or stream.
    done: HashMap<Key, Result<CallArchive, String>>,
    /// Closed calls whose archive result has not come back yet. Bounded by the calls whose
    /// ends are queued or being written.
    held: Vec<CallRecord>,
    /// The same for streams without a call.
    held_streams: Vec<StreamRecord>,
    /// Locations of the calls and streams released by the last [`CaptureArchive::release`],
    /// for [`CaptureArchive::fill`] and [`CaptureArchive::fill_stream`].
    released: HashMap<Key, CallArchive>,
}

fn key_of(c: &CallRecord) -> Key {
    Key::Call(Arc::from(&*c.dialog.call_id), c.dialog.invite_ns)
}

/// A stream's key, when it is one without a call (whose packets are archived on their own).
fn stream_key(s: &StreamRecord) -> Option<Key> {
    s.call_id.is_none().then_some(Key::Stream(StreamId {
        key: s.stream.key,
        first_ns: s.stream.first_ns,
    }))
}

/// The monitor every capture source feeds, with the archive behind it when one is configured.
/// `from_files`: the packets come from capture files, so the taps wait for room in the queue
/// rather than drop (a file loses nothing by waiting); live sources never wait.
pub(crate) fn monitor(
    cfg: MonitorConfig,
    shards: usize,
    settings: Option<&ArchiveSettings>,
    access: &filemode::Access,
    from_files: bool,
) -> Result<(Monitor, Option<CaptureArchive>), SensorError> {
    let Some(settings) = settings else {
        return Ok((Monitor::new(cfg, shards), None));
    };
    // CDRs record tar paths: absolute, so that they can be read from any directory.
    let dir = &std::path::absolute(&settings.dir).map_err(|source| SensorError::CreateDir {
        path: settings.dir.display().to_string(),
        source,
    })?;
    let config = ArchiveConfig {
        store: settings.store,
        max_call_bytes: settings.max_call_bytes,
        access: access.clone(),
        ..ArchiveConfig::new(dir)
    };
    let retention = Retention {
        max_age_sec: settings.max_age_sec,
        max_total_bytes: settings.max_total_bytes,
    };
    // A call the monitor still tracks has had a packet within its longest idle timeout; an
    // archived call idle for longer was never going to be closed.
    let orphan_after_ns = (cfg.answered_idle_timeout_ms.max(cfg.call_idle_timeout_ms)
        + cfg.call_linger_ms) as i64
        * 1_000_000
        + HOUSEKEEPING_EVERY_NS;
    let archive = Archive::new(config.clone()).map_err(|source| SensorError::Archive {
        dir: dir.display().to_string(),
        source,
    })?;
    let gauges = Arc::new(ArchiveGauges::default());
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(QUEUE_BATCHES_MAX);
    let (results_tx, results) = std::sync::mpsc::channel();
    let shards = shards.clamp(1, 256);
    let mut writer = Writer::new(
        archive,
        shards,
        results_tx,
        retention,
        orphan_after_ns,
        gauges.clone(),
    );
    let thread = std::thread::Builder::new()
        .name("archive".into())
        .spawn(move || writer.run(rx))
        .map_err(|source| SensorError::Thread {
            thread: "archive",
            source,
        })?;
    let store = config.store;
    let mon = Monitor::with_tap(cfg, shards, |i| {
        Box::new(ArchiveTap {
            tx: tx.clone(),
            batch: Batch::new(i, i64::MIN),
            store,
            gauges: gauges.clone(),
            wait_when_full: from_files,
            shards,
            last_handover: Instant::now(),
        })
    });
    Ok((
        mon,
        Some(CaptureArchive {
            dir: dir.clone(),
            gauges,
            thread: Some(thread),
            results,
            done: HashMap::new(),
            held: Vec::new(),
            held_streams: Vec::new(),
            released: HashMap::new(),
        }),
    ))
}

impl CaptureArchive {
    /// The shared counters (for a status line).
    pub fn gauges(&self) -> Arc<ArchiveGauges> {
        self.gauges.clone()
    }

    /// Returns `part` with the calls and streams without a call whose archive location is
    /// known (from this part or held from earlier ones); the others are held for a later call.
    /// `finished`: the monitor has finished (its taps are gone), so this waits for the archive
    /// thread to write everything and releases every call and stream.
    pub fn release(&mut self, mut part: Analysis, finished: bool) -> Analysis {
        self.released.clear();
        let mut thread_gone = false;
        if finished && let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the archive thread panicked; calls are stored without archive");
            }
            thread_gone = true;
        }
        loop {
            match self.results.try_recv() {
                Ok(a) => {
                    self.done.insert(a.key, a.result);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    thread_gone = true;
                    break;
                }
            }
        }
        let mut waiting = std::mem::take(&mut self.held);
        waiting.append(&mut part.calls);
        for c in waiting {
            match self.settle(Some(key_of(&c)), thread_gone) {
                Some(true) => part.calls.push(c),
                Some(false) => self.held.push(c),
                None => unreachable!("a call has a key"),
            }
        }
        let mut waiting = std::mem::take(&mut self.held_streams);
        waiting.append(&mut part.streams);
        for s in waiting {
            match self.settle(stream_key(&s), thread_gone) {
                // A call's stream that outlived its record: its packets are the call's.
                None | Some(true) => part.streams.push(s),
                Some(false) => self.held_streams.push(s),
            }
        }
        part
    }

    /// Whether a record of `key` can go (its result is in, or will never come), keeping where
    /// its packets are for `fill`; `None` without a key.
    fn settle(&mut self, key: Option<Key>, thread_gone: bool) -> Option<bool> {
        let key = key?;
        let Some(result) = self.done.remove(&key) else {
            return Some(thread_gone);
        };
        match result {
            Ok(a) => {
                self.released.insert(key, a);
            }
            Err(e) => {
                let what = match &key {
                    Key::Call(c, _) => c.to_string(),
                    Key::Stream(s) => stream_name(s),
                };
                tracing::warn!(%what, error = %e, "packets could not be archived");
            }
        }
        Some(true)
    }

    /// Whether closed calls or streams are held, waiting for the archive thread to write them.
    pub fn holding(&self) -> bool {
        !self.held.is_empty() || !self.held_streams.is_empty()
    }

    /// Writes where `c`'s packets are into its CDR row (for a call returned by the last
    /// [`CaptureArchive::release`]).
    pub fn fill(&self, c: &CallRecord, row: &mut CdrCall) {
        let Some(a) = self.released.get(&key_of(c)) else {
            return;
        };
        if let Some(m) = &a.sip {
            (
                row.sip_tar,
                row.sip_member,
                row.sip_offset,
                row.sip_len,
                row.sip_compression,
            ) = columns(m);
        }
        if let Some(m) = &a.rtp {
            (
                row.rtp_tar,
                row.rtp_member,
                row.rtp_offset,
                row.rtp_len,
                row.rtp_compression,
            ) = columns(m);
        }
    }

    /// Writes where `s`'s packets are into its CDR row, when it is a stream without a call
    /// returned by the last [`CaptureArchive::release`].
    pub fn fill_stream(&self, s: &StreamRecord, row: &mut CdrStream) {
        let Some(a) = stream_key(s).and_then(|k| self.released.get(&k)) else {
            return;
        };
        if let Some(m) = &a.rtp {
            (
                row.rtp_tar,
                row.rtp_member,
                row.rtp_offset,
                row.rtp_len,
                row.rtp_compression,
            ) = columns(m);
        }
    }

    /// One line for the end of the run, and a second naming the calls not archived whole,
    /// if any.
    pub fn summary(&self) -> String {
        let s = self.gauges().status();
        let names = self.gauges.names.line();
        let n = crate::table::plural;
        let line = format!(
            "archive {}: {}, {} without a call, {}, {} written, {} created; dropped {} (queue full), {} at limits, {} late; {}, {} pruned, {}",
            self.dir.display(),
            n(s.calls_archived, "call"),
            n(s.streams_archived, "stream"),
            n(s.packets_written, "packet"),
            n(s.bytes_written, "byte"),
            n(s.files_created, "tar file"),
            n(s.dropped, "packet"),
            s.dropped_at_limits,
            s.late,
            n(s.orphaned, "orphaned call"),
            n(s.minutes_pruned, "minute"),
            n(s.errors, "error"),
        );
        match names {
            Some(n) => format!("{line}\n{n}"),
            None => line,
        }
    }
}

/// A member's archive columns: tar file, member name, data offset and length, compression.
type Columns = (
    Option<String>,
    Option<String>,
    Option<u64>,
    Option<u64>,
    Option<String>,
);

fn columns(m: &MemberRecord) -> Columns {
    (
        Some(m.tar_path.display().to_string()),
        Some(m.member_name.clone()),
        Some(m.data_offset),
        Some(m.data_len),
        Some(compression_name(m.compression).to_string()),
    )
}

/// The CDR's name for a member's compression.
pub fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Zstd => "zstd",
    }
}
