//! The pool: executors with a queue each, selection at push time, growth on push, idle shrink,
//! shutdown.
//!
//! # Locking
//! Each executor slot has one mutex over its queue and its flags (`live`, `sleeping`, `stop`).
//! Every decision that matters (is this executor alive, is it stopping, must it be woken) is taken
//! under that mutex, so those rules need no memory-ordering argument. Growth, retirement and
//! shutdown also hold the pool's `control` mutex, always taken *before* a slot mutex; pushers take
//! only a slot mutex, and no path takes a slot mutex and then `control`, so there is no lock-order
//! cycle. A serializer's mutex is never held while a slot mutex is taken, nor the reverse.
//!
//! # Atomics
//! - `active` (number of live executors, indices `0..active`) is written only under `control`.
//!   Pushers read it as a hint for which slots to consider; the slot's `live` flag, read under the
//!   slot mutex, is what counts. A pusher that read a stale value either finds the slot not live
//!   and retries, or pushes to a slot that is live (correct either way). Release/Acquire is used
//!   so a pusher that sees the new count also sees the slot set up, but nothing relies on it.
//! - `closed` and `cancel` are one-way flags set under `control` during shutdown. `closed` lets a
//!   push fail early; the authoritative check is `stop`, under the slot mutex. `cancel` lets a
//!   running executor stop before the next task of its batch; reading it late only means one more
//!   task runs, which shutdown by cancel allows.
//! - `queued` and `running` copy queue lengths for `LeastFull` selection and metrics. They are
//!   hints: stale values only make the choice slightly less even. Relaxed.
//! - The counters (`executed`, `panicked`, `cancelled`, `grown`, `shrunk`) are statistics, read
//!   without synchronising anything else. Relaxed.
//!
//! # Thread-locals
//! `CURRENT_POOL`, `CURRENT_SLOT` and `NEXT` belong to one executor thread and are only touched
//! by it, so they need no synchronisation. `NEXT` holds a serializer woken by the job now
//! running, with its first task in hand; the serializer's `scheduled` flag is set, so `NEXT` is
//! its one job (see `serializer.rs`). The executor runs it right after that job, before anything
//! else can run on the thread.

use crate::config::{Selection, TaskpoolConfig};
use crate::error::{ConfigError, PushError, ShutdownError};
use crate::serializer::{Serializer, SerializerInner};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// A unit of work: runs once, on some executor thread.
pub(crate) type Task = Box<dyn FnOnce() + Send + 'static>;

/// What an executor queue holds: a plain task, or a serializer with tasks waiting. A serializer
/// is queued as its own (reference-counted) node, so scheduling one allocates nothing.
pub(crate) enum Job {
    Task(Task),
    Serial(Arc<SerializerInner>),
}

/// What `shutdown` does with tasks that have not run yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Run every task already accepted (including tasks waiting in serializers), then stop.
    Drain,
    /// Drop every task not yet started (counted in `cancelled`); running tasks finish.
    Cancel,
}

/// A snapshot of the pool for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskpoolStats {
    /// Executors alive now.
    pub executors: usize,
    /// Per live executor: tasks queued plus tasks in the batch it is running.
    pub queue_lengths: Vec<usize>,
    /// Tasks run to completion or to a caught panic (serializer tasks count one each).
    pub executed: u64,
    /// Tasks that panicked (caught; the executor went on).
    pub panicked: u64,
    /// Tasks dropped without running by `shutdown(ShutdownMode::Cancel)`.
    pub cancelled: u64,
    /// Executors started by growth (not counting the initial ones).
    pub grown: u64,
    /// Executors retired after `idle_timeout_ms`.
    pub shrunk: u64,
}

struct SlotState {
    queue: VecDeque<Job>,
    /// An executor thread owns this slot and will run what is queued here.
    live: bool,
    /// The executor is waiting on `wake` (or about to): a push must notify it.
    sleeping: bool,
    stop: Option<ShutdownMode>,
}

struct Slot {
    state: Mutex<SlotState>,
    wake: Condvar,
    queued: AtomicUsize,
    running: AtomicUsize,
    executed: AtomicU64,
}

struct Control {
    handles: Vec<JoinHandle<()>>,
    shut: bool,
}

pub(crate) struct Inner {
    config: TaskpoolConfig,
    slots: Box<[CachePadded<Slot>]>,
    active: AtomicUsize,
    closed: AtomicBool,
    cancel: AtomicBool,
    control: Mutex<Control>,
    panicked: AtomicU64,
    cancelled: AtomicU64,
    grown: AtomicU64,
    shrunk: AtomicU64,
}

thread_local! {
    /// On an executor thread: the address of its pool's `Inner` (0 elsewhere).
    static CURRENT_POOL: Cell<usize> = const { Cell::new(0) };
    /// On an executor thread: a serializer made runnable by the job now running, with the task
    /// that woke it, to run right after that job on this executor (see `Inner::run_next`).
    static NEXT: Cell<Option<(Arc<SerializerInner>, Task)>> = const { Cell::new(None) };
    /// On an executor thread: its slot index.
    static CURRENT_SLOT: Cell<usize> = const { Cell::new(0) };
    /// Per pushing thread: the round-robin position and the `LeastFull` scan start.
    static CURSOR: Cell<usize> = const { Cell::new(0) };
}

enum Refused {
    NotLive,
    Full,
    Stopped,
}

impl Inner {
    pub(crate) fn config(&self) -> &TaskpoolConfig {
        &self.config
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn is_cancelling(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    pub(crate) fn add_cancelled(&self, n: u64) {
        if n > 0 {
            self.cancelled.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Queues `job` on an executor chosen by the selection policy. `bounded` is false for a
    /// serializer being scheduled: each serializer has at most one job in the pool, so those jobs
    /// are bounded by the number of serializers rather than by `queue_max`.
    pub(crate) fn push_job(self: &Arc<Self>, job: Job, bounded: bool) -> Result<(), PushError> {
        self.try_push_job(job, bounded).map_err(|(e, _)| e)
    }

    /// `push_job`, giving the job back when it is refused.
    fn try_push_job(self: &Arc<Self>, mut job: Job, bounded: bool) -> Result<(), (PushError, Job)> {
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err((PushError::ShutDown, job));
            }
            let n = self.active.load(Ordering::Acquire);
            let cursor = CURSOR.with(|c| {
                let v = c.get();
                c.set(v.wrapping_add(1));
                v
            });
            let index = match self.config.selection {
                Selection::RoundRobin => cursor % n,
                Selection::LeastFull => self.least_full(n, cursor),
            };
            match self.offer(index, job, bounded) {
                Ok(len) => {
                    if len >= self.config.growth_threshold && n < self.config.max_executors {
                        self.grow(n);
                    }
                    return Ok(());
                }
                Err((Refused::Stopped, j)) => return Err((PushError::ShutDown, j)),
                Err((Refused::NotLive, j)) => job = j,
                Err((Refused::Full, j)) => {
                    job = j;
                    for k in 1..n {
                        match self.offer((index + k) % n, job, bounded) {
                            Ok(_) => return Ok(()),
                            Err((Refused::Stopped, j)) => return Err((PushError::ShutDown, j)),
                            Err((_, j)) => job = j,
                        }
                    }
                    if !(n < self.config.max_executors && self.grow(n)) {
                        let full = PushError::Full {
                            queue_max: self.config.queue_max,
                        };
                        return Err((full, job));
                    }
                }
            }
        }
    }

    fn least_full(&self, n: usize, start: usize) -> usize {
        let mut best = start % n;
        let mut best_len = usize::MAX;
        for k in 0..n {
            let i = (start + k) % n;
            let slot = &self.slots[i];
            let len = slot.queued.load(Ordering::Relaxed) + slot.running.load(Ordering::Relaxed);
            if len < best_len {
                best = i;
                best_len = len;
                if len == 0 {
                    break;
                }
            }
        }
        best
    }

    /// Tries to queue `job` on slot `index`; on success returns the queue length after the push.
    fn offer(&self, index: usize, job: Job, bounded: bool) -> Result<usize, (Refused, Job)> {
        let slot = &self.slots[index];
        let mut st = slot.state.lock();
        if st.stop.is_some() {
            return Err((Refused::Stopped, job));
        }
        if !st.live {
            return Err((Refused::NotLive, job));
        }
        if bounded && st.queue.len() >= self.config.queue_max {
            return Err((Refused::Full, job));
        }
        st.queue.push_back(job);
        let len = st.queue.len();
        slot.queued.store(len, Ordering::Relaxed);
        let wake = std::mem::replace(&mut st.sleeping, false);
        drop(st);
        if wake {
            slot.wake.notify_one();
        }
        Ok(len)
    }

    /// Whether the calling thread is one of this pool's executors.
    pub(crate) fn on_own_executor(self: &Arc<Self>) -> bool {
        CURRENT_POOL.with(Cell::get) == Arc::as_ptr(self) as usize
    }

    /// Called on one of this pool's executors (see `on_own_executor`) for a serializer that was
    /// idle and has just been given `first`, its only task: the serializer runs right after the
    /// current job on this executor, with `first` in hand, so the hand-off touches no executor
    /// queue or lock, skips the serializer's own queue, and wakes nobody. A serializer already
    /// waiting in that place goes back to its own queue (its task in front) and is pushed by the
    /// selection policy, so a task that wakes many serializers spreads them over the executors.
    pub(crate) fn run_next(self: &Arc<Self>, ser: Arc<SerializerInner>, first: Task) {
        if let Some((displaced, task)) = NEXT.with(|n| n.replace(Some((ser, first)))) {
            displaced.put_back(task);
            // A shutting-down pool refuses pushes; then it stays on this executor.
            if let Err((_, job)) = self.try_push_job(Job::Serial(displaced), false) {
                self.requeue_local(CURRENT_SLOT.with(Cell::get), job);
            }
        }
    }

    /// Puts a serializer that used up its batch back at the end of the current executor's queue.
    /// Always accepted: the executor is alive (it is running this code) and, during a draining
    /// shutdown, the serializer's remaining tasks must still run.
    pub(crate) fn requeue_local(&self, index: usize, job: Job) {
        let slot = &self.slots[index];
        let mut st = slot.state.lock();
        st.queue.push_back(job);
        slot.queued.store(st.queue.len(), Ordering::Relaxed);
    }

    /// Starts up to `growth_increment` executors if the pool still has `seen` of them. Returns
    /// whether the pool has more executors than `seen` afterwards.
    fn grow(self: &Arc<Self>, seen: usize) -> bool {
        let mut control = self.control.lock();
        let n = self.active.load(Ordering::Relaxed);
        if control.shut || n != seen {
            return n > seen;
        }
        let target = (n + self.config.growth_increment).min(self.config.max_executors);
        let mut started = 0;
        for index in n..target {
            if let Err(e) = self.start_executor(index, &mut control) {
                tracing::warn!(pool = %self.config.name, error = %e, "taskpool could not grow");
                break;
            }
            self.active.store(index + 1, Ordering::Release);
            started += 1;
        }
        if started > 0 {
            self.grown.fetch_add(started as u64, Ordering::Relaxed);
            tracing::debug!(pool = %self.config.name, executors = n + started, "taskpool grew");
        }
        started > 0
    }

    fn start_executor(
        self: &Arc<Self>,
        index: usize,
        control: &mut Control,
    ) -> Result<(), ConfigError> {
        {
            let mut st = self.slots[index].state.lock();
            st.live = true;
            st.sleeping = false;
        }
        let inner = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{}", self.config.name, index))
            .spawn(move || executor_main(inner, index));
        match spawned {
            Ok(handle) => {
                // Handles of executors that retired are finished; dropping them detaches nothing.
                control.handles.retain(|h| !h.is_finished());
                control.handles.push(handle);
                Ok(())
            }
            Err(source) => {
                self.slots[index].state.lock().live = false;
                Err(ConfigError::Spawn { index, source })
            }
        }
    }

    /// Called by an executor idle for `idle_timeout_ms`: retires it if it is the newest executor,
    /// the pool is above `min_executors`, and nothing was queued on it meanwhile.
    fn try_retire(&self, index: usize) -> bool {
        let control = self.control.lock();
        let n = self.active.load(Ordering::Relaxed);
        if control.shut || n != index + 1 || n <= self.config.min_executors {
            return false;
        }
        let mut st = self.slots[index].state.lock();
        if !st.queue.is_empty() || st.stop.is_some() {
            return false;
        }
        st.live = false;
        self.active.store(index, Ordering::Release);
        self.shrunk.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(pool = %self.config.name, executors = index, "taskpool shrank");
        true
    }

    fn task_panicked(&self, payload: Box<dyn Any + Send>) {
        let total = self.panicked.fetch_add(1, Ordering::Relaxed) + 1;
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(non-string panic payload)");
        tracing::error!(pool = %self.config.name, panic = message, panicked_total = total,
            "taskpool task panicked; the executor continues");
    }

    /// Runs one task, catching a panic so the executor survives it.
    pub(crate) fn run_task(&self, task: Task) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(task)) {
            self.task_panicked(payload);
        }
    }

    fn cancel_job(&self, job: Job) {
        match job {
            Job::Task(task) => {
                drop(task);
                self.add_cancelled(1);
            }
            Job::Serial(ser) => ser.cancel_all(),
        }
    }

    fn begin_shutdown(&self, mode: ShutdownMode) -> Vec<JoinHandle<()>> {
        let mut control = self.control.lock();
        control.shut = true;
        self.closed.store(true, Ordering::Release);
        if mode == ShutdownMode::Cancel {
            self.cancel.store(true, Ordering::Relaxed);
        }
        for slot in self.slots.iter() {
            let mut st = slot.state.lock();
            if st.stop.is_none() || mode == ShutdownMode::Cancel {
                st.stop = Some(mode);
            }
            let wake = std::mem::replace(&mut st.sleeping, false);
            drop(st);
            if wake {
                slot.wake.notify_one();
            }
        }
        std::mem::take(&mut control.handles)
    }

    fn stats(&self) -> TaskpoolStats {
        let executors = self.active.load(Ordering::Acquire);
        TaskpoolStats {
            executors,
            queue_lengths: self.slots[..executors]
                .iter()
                .map(|s| s.queued.load(Ordering::Relaxed) + s.running.load(Ordering::Relaxed))
                .collect(),
            executed: self
                .slots
                .iter()
                .map(|s| s.executed.load(Ordering::Relaxed))
                .sum(),
            panicked: self.panicked.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            grown: self.grown.load(Ordering::Relaxed),
            shrunk: self.shrunk.load(Ordering::Relaxed),
        }
    }
}

fn executor_main(inner: Arc<Inner>, index: usize) {
    CURRENT_POOL.with(|c| c.set(Arc::as_ptr(&inner) as usize));
    CURRENT_SLOT.with(|c| c.set(index));
    let slot = &inner.slots[index];
    let idle_timeout = inner.config.idle_timeout();
    // The batch being run. Swapped with the slot's queue, so both keep their capacity and taking
    // a batch allocates nothing once warm.
    let mut local: VecDeque<Job> = VecDeque::new();
    loop {
        let mut st = slot.state.lock();
        loop {
            if st.stop == Some(ShutdownMode::Cancel) {
                st.live = false;
                let rest = std::mem::take(&mut st.queue);
                slot.queued.store(0, Ordering::Relaxed);
                drop(st);
                for job in rest {
                    inner.cancel_job(job);
                }
                return;
            }
            if !st.queue.is_empty() {
                std::mem::swap(&mut st.queue, &mut local);
                slot.queued.store(0, Ordering::Relaxed);
                slot.running.store(local.len(), Ordering::Relaxed);
                break;
            }
            if st.stop == Some(ShutdownMode::Drain) {
                st.live = false;
                return;
            }
            st.sleeping = true;
            let timed_out = match idle_timeout {
                Some(t) => slot.wake.wait_for(&mut st, t).timed_out(),
                None => {
                    slot.wake.wait(&mut st);
                    false
                }
            };
            st.sleeping = false;
            if timed_out && st.queue.is_empty() && st.stop.is_none() {
                drop(st);
                if inner.try_retire(index) {
                    return;
                }
                st = slot.state.lock();
            }
        }
        drop(st);

        let mut ran = 0u64;
        while let Some(job) = local.pop_front() {
            if inner.is_cancelling() {
                inner.cancel_job(job);
                continue;
            }
            match job {
                Job::Task(task) => {
                    inner.run_task(task);
                    ran += 1;
                }
                Job::Serial(ser) => ran += ser.run(&inner, index, None),
            }
            ran += run_continuations(&inner, index);
        }
        slot.running.store(0, Ordering::Relaxed);
        slot.executed.fetch_add(ran, Ordering::Relaxed);
    }
}

/// Runs the serializers that the job just run made runnable on this executor (`NEXT`), each
/// possibly making another one runnable, up to `serializer_batch` in a row. The one after that
/// is pushed by the selection policy, so a chain of serializers handing work to each other
/// neither holds one executor forever nor starves its queue. Returns how many tasks ran.
fn run_continuations(inner: &Arc<Inner>, index: usize) -> u64 {
    let mut ran = 0;
    let mut streak = 0;
    while let Some((ser, first)) = NEXT.with(Cell::take) {
        if inner.is_cancelling() {
            drop(first);
            inner.add_cancelled(1);
            ser.cancel_all();
            continue;
        }
        if streak == inner.config.serializer_batch {
            ser.put_back(first);
            // A shutting-down pool refuses pushes; then it stays here, at the back of the queue.
            if let Err((_, job)) = inner.try_push_job(Job::Serial(ser), false) {
                inner.requeue_local(index, job);
            }
            break;
        }
        ran += ser.run(inner, index, Some(first));
        streak += 1;
    }
    ran
}

/// Ends the pool when the last [`Taskpool`] handle goes away without an explicit `shutdown`:
/// queued tasks still run (drain), but nobody waits for them.
struct Owner {
    inner: Arc<Inner>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let handles = self.inner.begin_shutdown(ShutdownMode::Drain);
        drop(handles);
    }
}

/// A pool of executors, each a thread with its own queue. Cheap to clone; every clone is the
/// same pool. See the crate documentation for the model.
#[derive(Clone)]
pub struct Taskpool {
    inner: Arc<Inner>,
    _owner: Arc<Owner>,
}

impl std::fmt::Debug for Taskpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taskpool")
            .field("name", &self.inner.config.name)
            .field("executors", &self.inner.active.load(Ordering::Relaxed))
            .finish()
    }
}

impl Taskpool {
    /// Validates `config` and starts `initial_executors` executor threads.
    pub fn new(config: TaskpoolConfig) -> Result<Taskpool, ConfigError> {
        config.validate()?;
        let slots = (0..config.max_executors)
            .map(|_| {
                CachePadded::new(Slot {
                    state: Mutex::new(SlotState {
                        queue: VecDeque::new(),
                        live: false,
                        sleeping: false,
                        stop: None,
                    }),
                    wake: Condvar::new(),
                    queued: AtomicUsize::new(0),
                    running: AtomicUsize::new(0),
                    executed: AtomicU64::new(0),
                })
            })
            .collect();
        let inner = Arc::new(Inner {
            slots,
            active: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            control: Mutex::new(Control {
                handles: Vec::new(),
                shut: false,
            }),
            panicked: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            grown: AtomicU64::new(0),
            shrunk: AtomicU64::new(0),
            config,
        });
        {
            let mut control = inner.control.lock();
            for index in 0..inner.config.initial_executors {
                if let Err(e) = inner.start_executor(index, &mut control) {
                    drop(control);
                    let handles = inner.begin_shutdown(ShutdownMode::Cancel);
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(e);
                }
                inner.active.store(index + 1, Ordering::Release);
            }
        }
        tracing::debug!(pool = %inner.config.name, executors = inner.config.initial_executors,
            "taskpool started");
        let owner = Arc::new(Owner {
            inner: Arc::clone(&inner),
        });
        Ok(Taskpool {
            inner,
            _owner: owner,
        })
    }

    /// Queues `task` on one executor, chosen by the pool's [`Selection`]. May grow the pool (see
    /// `growth_threshold`). Fails if every executor queue is full or the pool is shutting down;
    /// the task is then dropped without running.
    pub fn push<F>(&self, task: F) -> Result<(), PushError>
    where
        F: FnOnce() + Send + 'static,
    {
        self.inner.push_job(Job::Task(Box::new(task)), true)
    }

    /// A new serializer on this pool: its tasks run in push order, one at a time. Creating one
    /// allocates a small node and starts no thread.
    pub fn serializer(&self) -> Serializer {
        Serializer::new(Arc::clone(&self.inner))
    }

    /// Executors alive now.
    pub fn executors(&self) -> usize {
        self.inner.active.load(Ordering::Acquire)
    }

    /// Counters and queue lengths for metrics.
    pub fn stats(&self) -> TaskpoolStats {
        self.inner.stats()
    }

    /// The configuration the pool runs with.
    pub fn config(&self) -> &TaskpoolConfig {
        &self.inner.config
    }

    /// Stops the pool: from now on every push fails with [`PushError::ShutDown`], including
    /// pushes made by tasks that are still running (so a task that re-pushes itself ends); tasks
    /// already accepted run (`Drain`) or are dropped (`Cancel`). Returns when every executor
    /// thread that was running has exited, with the final statistics. Calling it again returns at
    /// once. Fails if called from a task running on this pool.
    ///
    /// Dropping the last `Taskpool` handle without calling `shutdown` starts a draining shutdown
    /// without waiting for it.
    pub fn shutdown(&self, mode: ShutdownMode) -> Result<TaskpoolStats, ShutdownError> {
        if CURRENT_POOL.with(Cell::get) == Arc::as_ptr(&self.inner) as usize {
            return Err(ShutdownError::FromExecutor);
        }
        let handles = self.inner.begin_shutdown(mode);
        for handle in handles {
            if handle.join().is_err() {
                tracing::error!(pool = %self.inner.config.name, "taskpool executor thread panicked");
            }
        }
        Ok(self.inner.stats())
    }
}
