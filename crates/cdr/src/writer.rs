//! [`CdrWriter`]: stores CDRs on a thread of its own, so that capture never waits for the
//! database.
//!
//! ```text
//! capture ──submit──▶ bounded queue ──▶ cdr-writer thread ──batch──▶ CdrStore (SQLite, PostgreSQL)
//!    │ queue full                            │ store failed, or journal not empty
//!    └──────────── append + fsync ──────────▶ journal file ──replay, in order──▶ CdrStore
//! ```
//!
//! - The queue holds at most `queue_records_max` records ([`DEFAULT_QUEUE_RECORDS_MAX`]). The
//!   thread takes a batch when `batch_records_max` are waiting or the oldest has waited
//!   `batch_delay_ms`, and inserts it in one transaction.
//! - When the store fails (database down, connection lost, disk error, a read-only file) the
//!   batch is appended to the journal and fsynced; the store is dropped and opened again after
//!   a backoff (`reconnect_min_ms`, doubling up to `reconnect_max_ms`). While the journal holds
//!   records, new batches go behind them, and once the store is back the journal is replayed
//!   in order and truncated.
//! - [`CdrWriter::submit`] never waits for the database: if the queue is full (the database is
//!   slow or hangs) the caller appends the record to the journal itself (one write and one
//!   fsync, a few milliseconds at worst).
//! - A record is dropped only when the journal cannot take it: it is full
//!   (`journal_bytes_max`), the disk fails, or one record serializes to more than
//!   [`crate::journal::ENTRY_BYTES_MAX`]. Drops are counted (`dropped_records`) and logged.
//! - Every record gets its stable identity when submitted (`uid`: sensor, Call-ID and start
//!   time; see [`CdrRecord`]), and storing it again updates the stored row: a replay that
//!   repeats records a crash left in the journal after they were stored, or the same capture
//!   read twice, adds nothing.
//! - A journal left by an earlier run is replayed once the store is reachable.
//! - [`CdrWriter::close`] stores or journals everything queued, makes one last attempt to
//!   reach the store and replay the journal, and returns the final counters. If the thread is
//!   still busy after `close_timeout_ms` (a database that hangs in the middle of an insert),
//!   the caller journals the batches the thread has handed to the store and not seen stored
//!   (one, or two for a collector's link, which sends the next batch while the collector
//!   commits one) and what is still queued, in that order, and leaves the thread behind. A
//!   process that exits then loses nothing; if the thread still stores those batches, the
//!   next replay finds them stored and stores them once (by uid).
//! - A store that takes several batches at once ([`CdrStore::batches_in_flight_max`]) gets
//!   the next batch before the last one is settled, when the queue already holds a whole
//!   batch; the batches settle in order, a failed one and those after it are journaled in
//!   order, and nothing stays in flight while the queue waits for records.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::journal::{Journal, JournalError};
use crate::{CdrError, CdrRecord, CdrStore};

/// Records queued at most. At 100 calls per second that is 100 s of calls; a record (a call and
/// two streams) takes about 2 KiB, so the queue stays under about 20 MiB.
pub const DEFAULT_QUEUE_RECORDS_MAX: usize = 10_000;
/// Records per transaction.
pub const DEFAULT_BATCH_RECORDS_MAX: usize = 500;
/// Longest a record waits in the queue for its batch to fill.
pub const DEFAULT_BATCH_DELAY_MS: u64 = 200;
/// Journal size limit: 4 GiB, about 2.7 million calls (a call with its streams takes about
/// 1.6 KB), so that a sensor at 1,000 calls/s rides out 45 minutes without its collector or
/// database. The journal takes disk only while the store is away.
pub const DEFAULT_JOURNAL_BYTES_MAX: u64 = 4 << 30;
/// First wait before the store is opened again after a failure; it doubles on each failure.
pub const DEFAULT_RECONNECT_MIN_MS: u64 = 250;
/// Longest wait between attempts to open the store.
pub const DEFAULT_RECONNECT_MAX_MS: u64 = 10_000;
/// How long [`CdrWriter::close`] waits for the thread before journaling the queue itself.
pub const DEFAULT_CLOSE_TIMEOUT_MS: u64 = 30_000;

/// How a [`CdrWriter`] queues, batches and journals.
#[derive(Debug, Clone, PartialEq)]
pub struct CdrWriterConfig {
    pub queue_records_max: usize,
    pub batch_records_max: usize,
    pub batch_delay_ms: u64,
    /// The journal file (its directory is created if missing).
    pub journal_path: PathBuf,
    pub journal_bytes_max: u64,
    pub reconnect_min_ms: u64,
    pub reconnect_max_ms: u64,
    pub close_timeout_ms: u64,
    /// The sensor's name, the first part of every record's identity
    /// ([`CdrRecord::identity`]). Default [`DEFAULT_SENSOR`].
    pub sensor: String,
}

/// The sensor name of a capture that was not given one.
pub const DEFAULT_SENSOR: &str = "local";

impl CdrWriterConfig {
    /// The defaults, with the journal at `journal_path`.
    pub fn new(journal_path: impl Into<PathBuf>) -> CdrWriterConfig {
        CdrWriterConfig {
            queue_records_max: DEFAULT_QUEUE_RECORDS_MAX,
            batch_records_max: DEFAULT_BATCH_RECORDS_MAX,
            batch_delay_ms: DEFAULT_BATCH_DELAY_MS,
            journal_path: journal_path.into(),
            journal_bytes_max: DEFAULT_JOURNAL_BYTES_MAX,
            reconnect_min_ms: DEFAULT_RECONNECT_MIN_MS,
            reconnect_max_ms: DEFAULT_RECONNECT_MAX_MS,
            close_timeout_ms: DEFAULT_CLOSE_TIMEOUT_MS,
            sensor: DEFAULT_SENSOR.to_string(),
        }
    }
}

/// Opens the store; called again after each failure. Runs on the writer's thread.
pub type StoreOpener = Box<dyn FnMut() -> Result<Box<dyn CdrStore>, CdrError> + Send>;

/// The writer's counters. Records are a call with its streams, or one lone stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CdrWriterStats {
    /// Records in the queue now, and its bound.
    pub queue_records: usize,
    pub queue_records_max: usize,
    /// Records stored in the database, directly or replayed from the journal.
    pub written_records: u64,
    /// Transactions that stored them.
    pub batches: u64,
    /// Records appended to the journal (and fsynced).
    pub journaled_records: u64,
    /// Of those, appended by the submitting thread because the queue was full.
    pub spilled_records: u64,
    /// Records stored from the journal.
    pub replayed_records: u64,
    /// Records in the journal now, waiting for the database.
    pub journal_records: u64,
    /// Bytes of the journal's entries now, and its bound.
    pub journal_bytes: u64,
    pub journal_bytes_max: u64,
    /// Failed attempts to open the store or to insert a batch.
    pub store_errors: u64,
    /// Records lost: the journal was full or failed.
    pub dropped_records: u64,
    /// Whether the store is open and its last operation succeeded.
    pub store_up: bool,
}

/// What became of a submitted record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// In the queue, for the writer's thread.
    Queued,
    /// The queue was full: appended to the journal by the caller.
    Journaled,
    /// The queue was full and the journal could not take it: lost, and counted.
    Dropped,
}

#[derive(Default)]
struct Counters {
    queue_records: AtomicUsize,
    written: AtomicU64,
    batches: AtomicU64,
    journaled: AtomicU64,
    spilled: AtomicU64,
    replayed: AtomicU64,
    journal_records: AtomicU64,
    journal_bytes: AtomicU64,
    store_errors: AtomicU64,
    dropped: AtomicU64,
    store_up: AtomicBool,
}

struct Queue {
    /// Each record with the time it was queued, for `batch_delay_ms`.
    records: VecDeque<(Instant, CdrRecord)>,
    closing: bool,
    /// Set by the thread as it ends (or unwinds).
    finished: bool,
}

struct Shared {
    cfg: CdrWriterConfig,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Never locked while `queue` is held.
    journal: Mutex<Journal>,
    /// The batches the thread has handed to the store and not yet seen stored, oldest first:
    /// a close that times out journals them with the queue, so that a process that exits
    /// then loses nothing (the thread left behind may still store them: stored twice, they
    /// are stored once, by uid). Never locked while `journal` is.
    handed: Mutex<VecDeque<Arc<Vec<CdrRecord>>>>,
    counters: Counters,
}

/// CDRs written on a thread of its own; see the module documentation.
pub struct CdrWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A view of a [`CdrWriter`]'s counters that other threads keep (status line, metrics).
#[derive(Clone)]
pub struct CdrWriterWatch(Arc<Shared>);

impl CdrWriterWatch {
    pub fn stats(&self) -> CdrWriterStats {
        self.0.stats()
    }
}

impl CdrWriter {
    /// Opens the journal (replaying what an earlier run left once the store is reachable) and
    /// starts the `cdr-writer` thread, which opens the store with `open`. A store that cannot
    /// be opened is not an error here: records are journaled until it can.
    pub fn start(
        cfg: CdrWriterConfig,
        open: impl FnMut() -> Result<Box<dyn CdrStore>, CdrError> + Send + 'static,
    ) -> Result<CdrWriter, JournalError> {
        if let Some(dir) = cfg.journal_path.parent()
            && !dir.as_os_str().is_empty()
        {
            filemode::create_dir_all(dir, &filemode::Access::Private).map_err(|source| {
                JournalError::Io {
                    path: dir.display().to_string(),
                    source,
                }
            })?;
        }
        let (journal, opened) = Journal::open(&cfg.journal_path, cfg.journal_bytes_max)?;
        if opened.records > 0 {
            tracing::info!(
                journal = %cfg.journal_path.display(),
                records = opened.records,
                bytes = opened.bytes,
                "the CDR journal holds records from an earlier run; they are stored once the database is reachable"
            );
        }
        let counters = Counters::default();
        counters.journal_records.store(opened.records, Relaxed);
        counters.journal_bytes.store(opened.bytes, Relaxed);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                records: VecDeque::new(),
                closing: false,
                finished: false,
            }),
            wake: Condvar::new(),
            journal: Mutex::new(journal),
            handed: Mutex::new(VecDeque::new()),
            counters,
            cfg,
        });
        let thread_shared = shared.clone();
        let open: StoreOpener = Box::new(open);
        let thread = std::thread::Builder::new()
            .name("cdr-writer".into())
            .spawn(move || {
                let _finished = Finished(thread_shared.clone());
                WriterThread::new(thread_shared, open).run()
            })
            .map_err(|source| JournalError::Io {
                path: "cdr-writer thread".into(),
                source,
            })?;
        Ok(CdrWriter {
            shared,
            thread: Some(thread),
        })
    }

    /// Hands a record over without waiting for the database. A record without a uid gets its
    /// identity, and a call without a group its group, under `sensor`
    /// ([`CdrRecord::fill_identity`]), and a call or registration without a sensor gets `sensor`.
    pub fn submit(&self, mut record: CdrRecord) -> Submitted {
        let s = &self.shared;
        record.fill_identity(&s.cfg.sensor);
        // The sensor that saw it, stored with it (the distributed mode tells sensors apart).
        if let Some(c) = record.call.as_mut()
            && c.sensor.is_empty()
        {
            c.sensor.clone_from(&s.cfg.sensor);
        }
        if let Some(r) = record.registration.as_mut()
            && r.sensor.is_empty()
        {
            r.sensor.clone_from(&s.cfg.sensor);
        }
        {
            let mut q = s.lock_queue();
            if q.records.len() < s.cfg.queue_records_max {
                q.records.push_back((Instant::now(), record));
                let n = q.records.len();
                s.counters.queue_records.store(n, Relaxed);
                // Wake the thread to start the batch delay, or because a batch is full.
                if n == 1 || n == s.cfg.batch_records_max {
                    s.wake.notify_one();
                }
                return Submitted::Queued;
            }
        }
        // The writer is behind (the database is slow or hangs): keep the record safe from here.
        if s.journal_append(std::slice::from_ref(&record), true) {
            Submitted::Journaled
        } else {
            Submitted::Dropped
        }
    }

    pub fn stats(&self) -> CdrWriterStats {
        self.shared.stats()
    }

    pub fn watch(&self) -> CdrWriterWatch {
        CdrWriterWatch(self.shared.clone())
    }

    /// Stores or journals everything queued, tries the store once more for the journal, stops
    /// the thread and returns the final counters.
    pub fn close(mut self) -> CdrWriterStats {
        self.stop();
        self.shared.stats()
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let s = &self.shared;
        let deadline = Instant::now() + Duration::from_millis(s.cfg.close_timeout_ms);
        let mut q = s.lock_queue();
        q.closing = true;
        s.wake.notify_all();
        while !q.finished {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            q = s
                .wake
                .wait_timeout(q, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if q.finished {
            drop(q);
            if thread.join().is_err() {
                tracing::error!("the CDR writer thread panicked; queued records may be lost");
            }
            return;
        }
        // The thread is stuck (a database that does not answer): keep what it holds and the
        // queue safe from here, in their order.
        let left: Vec<CdrRecord> = q.records.drain(..).map(|(_, r)| r).collect();
        s.counters.queue_records.store(0, Relaxed);
        drop(q);
        let handed: Vec<Arc<Vec<CdrRecord>>> = s.lock_handed().drain(..).collect();
        tracing::warn!(
            close_timeout_ms = s.cfg.close_timeout_ms,
            storing = handed.iter().map(|b| b.len()).sum::<usize>(),
            queued = left.len(),
            "the CDR database did not finish in time; the CDRs being stored and those queued go to the journal"
        );
        for batch in handed {
            s.journal_append(&batch, true);
        }
        if !left.is_empty() {
            s.journal_append(&left, true);
        }
    }
}

impl Drop for CdrWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_handed(&self) -> MutexGuard<'_, VecDeque<Arc<Vec<CdrRecord>>>> {
        self.handed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> CdrWriterStats {
        let c = &self.counters;
        CdrWriterStats {
            queue_records: c.queue_records.load(Relaxed),
            queue_records_max: self.cfg.queue_records_max,
            written_records: c.written.load(Relaxed),
            batches: c.batches.load(Relaxed),
            journaled_records: c.journaled.load(Relaxed),
            spilled_records: c.spilled.load(Relaxed),
            replayed_records: c.replayed.load(Relaxed),
            journal_records: c.journal_records.load(Relaxed),
            journal_bytes: c.journal_bytes.load(Relaxed),
            journal_bytes_max: self.cfg.journal_bytes_max,
            store_errors: c.store_errors.load(Relaxed),
            dropped_records: c.dropped.load(Relaxed),
            store_up: c.store_up.load(Relaxed),
        }
    }

    fn mirror_journal(&self, j: &Journal) {
        self.counters
            .journal_records
            .store(j.pending_records(), Relaxed);
        self.counters.journal_bytes.store(j.bytes(), Relaxed);
    }

    /// Appends to the journal; false if the records were dropped.
    fn journal_append(&self, records: &[CdrRecord], spilled: bool) -> bool {
        let mut j = self.lock_journal();
        let result = j.append(records);
        self.mirror_journal(&j);
        drop(j);
        let n = records.len() as u64;
        match result {
            Ok(a) => {
                self.counters.journaled.fetch_add(a.records, Relaxed);
                if spilled {
                    self.counters.spilled.fetch_add(a.records, Relaxed);
                }
                if a.too_large > 0 {
                    self.dropped(
                        a.too_large,
                        &format!("record over {} bytes", crate::journal::ENTRY_BYTES_MAX),
                    );
                }
                a.too_large == 0
            }
            Err(e) => {
                self.dropped(n, &e.to_string());
                false
            }
        }
    }

    fn dropped(&self, n: u64, why: &str) {
        let before = self.counters.dropped.fetch_add(n, Relaxed);
        // Log the first drop and then each time the count passes a power of two, not once
        // per record.
        if before == 0 || (before + n).ilog2() > before.ilog2() {
            tracing::error!(
                dropped_records = before + n,
                reason = why,
                "CDRs dropped: the database cannot take them and the journal cannot keep them"
            );
        }
    }
}

/// Tells [`CdrWriter::close`] that the thread has ended, also when it unwinds.
struct Finished(Arc<Shared>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.lock_queue().finished = true;
        self.0.wake.notify_all();
    }
}

/// The `cdr-writer` thread's state.
struct WriterThread {
    shared: Arc<Shared>,
    open: StoreOpener,
    store: Option<Box<dyn CdrStore>>,
    backoff: Duration,
    retry_at: Instant,
    /// Failures in a row, for logging the first and then fewer.
    failures: u64,
    tried_at_close: bool,
    /// Batches sent to a store that takes more than one at a time
    /// ([`CdrStore::batches_in_flight_max`]) and not yet settled, oldest first: journaled, in
    /// this order, if they turn out not to be stored.
    in_flight: VecDeque<Arc<Vec<CdrRecord>>>,
}

impl WriterThread {
    fn new(shared: Arc<Shared>, open: StoreOpener) -> WriterThread {
        let backoff = Duration::from_millis(shared.cfg.reconnect_min_ms);
        WriterThread {
            shared,
            open,
            store: None,
            backoff,
            retry_at: Instant::now(),
            failures: 0,
            tried_at_close: false,
            in_flight: VecDeque::new(),
        }
    }

    fn run(mut self) {
        self.connect();
        loop {
            // A batch in flight is settled before the thread waits for more records: records
            // never sit unacknowledged while the queue is quiet.
            if !self.in_flight.is_empty()
                && self.shared.lock_queue().records.len() < self.shared.cfg.batch_records_max
            {
                self.settle(0);
            }
            // A journal left by an earlier run, or records journaled while the store was down.
            if self.store.is_some() && self.journal_pending() {
                self.replay();
            }
            let journal_waiting = self.journal_pending();
            let retry = (self.store.is_none() && journal_waiting).then_some(self.retry_at);
            let (batch, closing) = self.take_batch(retry);
            let wanted = !batch.is_empty() || self.journal_pending();
            if self.store.is_none() && wanted {
                if closing && !self.tried_at_close {
                    self.tried_at_close = true;
                    self.connect();
                } else if Instant::now() >= self.retry_at {
                    self.connect();
                }
            }
            if self.store.is_some() && self.journal_pending() {
                self.replay();
            }
            if !batch.is_empty() {
                self.write(batch);
            }
            if closing && self.shared.lock_queue().records.is_empty() {
                self.settle(0);
                // Records journaled by this last pass go in now if the store is up.
                if self.store.is_some() && self.journal_pending() {
                    self.replay();
                }
                return;
            }
        }
    }

    fn journal_pending(&self) -> bool {
        self.shared.counters.journal_records.load(Relaxed) > 0
    }

    /// Waits for a batch: `batch_records_max` records, the oldest waiting `batch_delay_ms`,
    /// closing, or `retry_at`.
    fn take_batch(&self, retry_at: Option<Instant>) -> (Vec<CdrRecord>, bool) {
        let cfg = &self.shared.cfg;
        let delay = Duration::from_millis(cfg.batch_delay_ms);
        let mut q = self.shared.lock_queue();
        loop {
            let now = Instant::now();
            if q.closing || q.records.len() >= cfg.batch_records_max {
                break;
            }
            let mut deadline = retry_at;
            if let Some((queued, _)) = q.records.front() {
                let due = *queued + delay;
                deadline = Some(deadline.map_or(due, |d| d.min(due)));
            }
            let timeout = match deadline {
                Some(d) if d <= now => break,
                Some(d) => d - now,
                None => Duration::from_secs(1),
            };
            q = self
                .shared
                .wake
                .wait_timeout(q, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let n = q.records.len().min(cfg.batch_records_max);
        let batch = q.records.drain(..n).map(|(_, r)| r).collect();
        self.shared
            .counters
            .queue_records
            .store(q.records.len(), Relaxed);
        (batch, q.closing)
    }

    fn connect(&mut self) {
        match (self.open)() {
            Ok(store) => {
                if self.failures > 0 {
                    tracing::info!(
                        failures = self.failures,
                        "the CDR store (database or collector) is reachable again"
                    );
                }
                self.store = Some(store);
                self.shared.counters.store_up.store(true, Relaxed);
                self.backoff = Duration::from_millis(self.shared.cfg.reconnect_min_ms);
                self.failures = 0;
            }
            Err(e) => self.failed(&e),
        }
    }

    /// The store failed: drop it, journal from now on, and open it again after the backoff.
    fn failed(&mut self, e: &CdrError) {
        self.store = None;
        let c = &self.shared.counters;
        c.store_up.store(false, Relaxed);
        c.store_errors.fetch_add(1, Relaxed);
        self.failures += 1;
        if self.failures.is_power_of_two() {
            tracing::warn!(
                error = %e,
                failures = self.failures,
                retry_in_ms = self.backoff.as_millis() as u64,
                "CDR database unavailable: CDRs go to the journal until it is back"
            );
        }
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(
            self.shared
                .cfg
                .reconnect_max_ms
                .max(self.shared.cfg.reconnect_min_ms),
        ));
    }

    /// Stores a batch, or journals it: behind records already in the journal (their order is
    /// kept), or because the store failed.
    fn write(&mut self, batch: Vec<CdrRecord>) {
        if !self.journal_pending()
            && let Some(store) = self.store.as_mut()
        {
            let depth = store.batches_in_flight_max().max(1);
            let batch = Arc::new(batch);
            self.shared.lock_handed().push_back(batch.clone());
            match store.send_records(&batch) {
                // A database stored it already (its `settle_oldest` says so at once); a
                // collector's link gets the next batch before this one settles.
                Ok(()) => {
                    self.in_flight.push_back(batch);
                    self.settle(depth - 1);
                    return;
                }
                Err(e) => {
                    // Those before it are not known to be stored either: they go first.
                    self.failed(&e);
                    self.journal_in_flight();
                    self.shared.journal_append(&batch, false);
                    return;
                }
            }
        }
        // Behind the journal's records: what is in flight settles first (or is journaled
        // first when its store fails).
        self.settle(0);
        self.shared.journal_append(&batch, false);
    }

    fn stored(&self, records: usize) {
        let c = &self.shared.counters;
        c.written.fetch_add(records as u64, Relaxed);
        c.batches.fetch_add(1, Relaxed);
    }

    /// Settles the oldest batches in flight until at most `keep` are left; on a failure the
    /// store is dropped and every batch still in flight is journaled, in order.
    fn settle(&mut self, keep: usize) {
        while self.in_flight.len() > keep {
            let Some(store) = self.store.as_mut() else {
                self.journal_in_flight();
                return;
            };
            match store.settle_oldest() {
                Ok(()) => {
                    let batch = self.in_flight.pop_front().expect("a batch in flight");
                    // Empty when a close that timed out journaled them already.
                    self.shared.lock_handed().pop_front();
                    self.stored(batch.len());
                }
                Err(e) => {
                    self.failed(&e);
                    self.journal_in_flight();
                    return;
                }
            }
        }
    }

    /// The batches in flight to the journal, oldest first (their store failed).
    fn journal_in_flight(&mut self) {
        self.shared.lock_handed().clear();
        while let Some(batch) = self.in_flight.pop_front() {
            self.shared.journal_append(&batch, false);
        }
    }

    /// Stores the journal's records in order, batch by batch, consuming each once committed;
    /// the file is truncated when nothing is left. With a store that takes several batches at
    /// once, the next batch is read and sent while the store settles the one before (each is
    /// consumed only once settled, in order). Stops at the first store failure: the records
    /// of the batches not settled stay in the journal (if a commit went through before the
    /// failure was seen, their uids make the next replay skip them).
    fn replay(&mut self) {
        // What is in flight was sent before the journal's records were written: it settles
        // (or joins the journal) first.
        self.settle(0);
        let Some(mut store) = self.store.take() else {
            return;
        };
        let shared = self.shared.clone();
        let c = &shared.counters;
        let depth = store.batches_in_flight_max().max(1);
        // Read and not consumed, oldest first, with whether it was sent (a batch of only
        // undecodable entries is not).
        let mut reading: VecDeque<(crate::journal::JournalBatch, bool)> = VecDeque::new();
        loop {
            while reading.len() < depth {
                let batch = {
                    let mut j = shared.lock_journal();
                    let b = match reading.back() {
                        Some((last, _)) => j.read_batch_after(last, shared.cfg.batch_records_max),
                        None => j.read_batch(shared.cfg.batch_records_max),
                    };
                    shared.mirror_journal(&j);
                    b
                };
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot read the CDR journal; replay stopped");
                        break;
                    }
                };
                if batch.entries == 0 {
                    break;
                }
                let sent = !batch.records.is_empty();
                if sent && let Err(e) = store.send_records(&batch.records) {
                    self.failed(&e);
                    return;
                }
                reading.push_back((batch, sent));
            }
            let Some((batch, sent)) = reading.pop_front() else {
                break;
            };
            if sent && let Err(e) = store.settle_oldest() {
                self.failed(&e);
                return;
            }
            let consumed = {
                let mut j = shared.lock_journal();
                let r = j.consume(&batch);
                shared.mirror_journal(&j);
                r
            };
            let n = batch.records.len() as u64;
            c.replayed.fetch_add(n, Relaxed);
            c.written.fetch_add(n, Relaxed);
            c.batches.fetch_add(1, Relaxed);
            if batch.undecodable > 0 {
                shared.dropped(batch.undecodable, "journal entry is not a CDR record");
            }
            if let Err(e) = consumed {
                tracing::error!(error = %e, "cannot truncate the CDR journal; its records may be stored again (and skipped by uid)");
                // Those sent after it settle (or not) with the store; they stay in the
                // journal either way.
                while let Some((_, sent)) = reading.pop_front() {
                    if sent && let Err(e) = store.settle_oldest() {
                        self.failed(&e);
                        return;
                    }
                }
                break;
            }
        }
        self.store = Some(store);
    }
}
