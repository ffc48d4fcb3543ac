//! The bounded queue between callers and the writer thread, and the completion a sync caller
//! waits on.
//!
//! Ordering: a caller pushes its operation (and gets its sequence number) while holding the shard
//! lock of its key, if the queue has room; otherwise it lets go of the lock, waits for room and
//! tries again (tree deletions reserve room first, then take every shard lock). So for any one
//! key the order of the queue is the order in which the in-memory view changed.

use crate::error::{KvError, Result};
use crate::index::NsIndex;
use crate::value::Value;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Acknowledged once the batch holding the write is committed and fsynced.
    #[default]
    Sync,
    /// Acknowledged at once; the writer starts committing it within `flush_interval_ms`.
    /// A crash (of the process or the machine) can lose writes acknowledged during the last
    /// `flush_interval_ms` plus the duration of one commit.
    Async,
}

pub(crate) enum Op {
    /// `value: None` is a delete. `prev_large`: the value it replaces lives in the large table.
    Set {
        key: Arc<str>,
        value: Option<Value>,
        prev_large: bool,
    },
    /// Delete a key tree; `None` deletes everything in the namespace.
    Tree { prefix: Option<Arc<str>> },
    /// Create the tables of a namespace.
    CreateNamespace,
    /// Completes once everything queued before it is on disk.
    Barrier,
}

pub(crate) struct Queued {
    pub seq: u64,
    pub ns: Arc<NsIndex>,
    pub op: Op,
    pub done: Option<Arc<Completion>>,
    pub bytes: usize,
    pub at: Instant,
}

/// The pending result of one write: wait for it with [`Commit::wait`], or `.await` it.
///
/// For an async write it is ready at once. Dropping it does not cancel the write.
#[must_use = "a Commit only says the write is durable once waited for"]
pub struct Commit {
    inner: Option<Arc<Completion>>,
}

impl Commit {
    pub(crate) fn ready() -> Self {
        Commit { inner: None }
    }

    /// Blocks until the write is on disk (or failed).
    pub fn wait(self) -> Result<()> {
        match self.inner {
            None => Ok(()),
            Some(c) => {
                let mut st = c.state.lock();
                loop {
                    if let Some(r) = st.result.take() {
                        return r;
                    }
                    c.cv.wait(&mut st);
                }
            }
        }
    }

    /// Whether the outcome is known (waiting would not block).
    pub fn is_done(&self) -> bool {
        match &self.inner {
            None => true,
            Some(c) => c.state.lock().result.is_some(),
        }
    }
}

impl Future for Commit {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        match &this.inner {
            None => Poll::Ready(Ok(())),
            Some(c) => {
                let mut st = c.state.lock();
                if let Some(r) = st.result.take() {
                    drop(st);
                    this.inner = None;
                    Poll::Ready(r)
                } else {
                    st.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }
    }
}

pub(crate) struct Completion {
    state: Mutex<CompletionState>,
    cv: Condvar,
}

struct CompletionState {
    result: Option<Result<()>>,
    waker: Option<Waker>,
}

impl Completion {
    fn new() -> Arc<Self> {
        Arc::new(Completion {
            state: Mutex::new(CompletionState {
                result: None,
                waker: None,
            }),
            cv: Condvar::new(),
        })
    }

    pub fn complete(&self, r: Result<()>) {
        let waker = {
            let mut st = self.state.lock();
            st.result = Some(r);
            st.waker.take()
        };
        self.cv.notify_one();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

struct State {
    ops: VecDeque<Queued>,
    bytes: usize,
    reserved_ops: usize,
    reserved_bytes: usize,
    next_seq: u64,
    /// Queued operations whose caller waits (sync writes, barriers): commit without delay.
    urgent: usize,
    closed: Option<String>,
}

pub(crate) struct Queue {
    state: Mutex<State>,
    to_writer: Condvar,
    room: Condvar,
    pub ops_max: usize,
    pub bytes_max: usize,
    batch_ops_max: usize,
    flush_interval: Duration,
}

/// Room reserved in the queue for one operation; released if not used.
pub(crate) struct Reservation<'a> {
    queue: &'a Queue,
    bytes: usize,
    used: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.used {
            let mut st = self.queue.state.lock();
            st.reserved_ops -= 1;
            st.reserved_bytes -= self.bytes;
            drop(st);
            self.queue.room.notify_one();
        }
    }
}

impl Reservation<'_> {
    /// Queues the operation; returns its sequence number and the commit to wait on.
    pub fn push(mut self, ns: &Arc<NsIndex>, op: Op, durability: Durability) -> (u64, Commit) {
        let mut st = self.queue.state.lock();
        st.reserved_ops -= 1;
        st.reserved_bytes -= self.bytes;
        self.used = true;
        self.queue.push_locked(st, ns, op, durability, self.bytes)
    }
}

/// The outcome of [`Queue::try_push`].
pub(crate) enum TryPush {
    Pushed(u64, Commit),
    Full,
    Closed(String),
}

impl Queue {
    pub fn new(
        ops_max: usize,
        bytes_max: usize,
        batch_ops_max: usize,
        flush_interval: Duration,
    ) -> Self {
        Queue {
            state: Mutex::new(State {
                ops: VecDeque::new(),
                bytes: 0,
                reserved_ops: 0,
                reserved_bytes: 0,
                next_seq: 1,
                urgent: 0,
                closed: None,
            }),
            to_writer: Condvar::new(),
            room: Condvar::new(),
            ops_max: ops_max.max(1),
            bytes_max: bytes_max.max(1),
            batch_ops_max: batch_ops_max.max(1),
            flush_interval,
        }
    }

    fn has_room(&self, st: &State, bytes: usize) -> bool {
        let ops = st.ops.len() + st.reserved_ops;
        let used = st.bytes + st.reserved_bytes;
        // An operation larger than the whole byte budget still passes when the queue is empty.
        ops < self.ops_max && (used + bytes <= self.bytes_max || used == 0)
    }

    fn push_locked(
        &self,
        mut st: parking_lot::MutexGuard<'_, State>,
        ns: &Arc<NsIndex>,
        op: Op,
        durability: Durability,
        bytes: usize,
    ) -> (u64, Commit) {
        let waits = durability == Durability::Sync || matches!(op, Op::Barrier);
        let done = waits.then(Completion::new);
        let seq = st.next_seq;
        st.next_seq += 1;
        st.bytes += bytes;
        if waits {
            st.urgent += 1;
        }
        st.ops.push_back(Queued {
            seq,
            ns: ns.clone(),
            op,
            done: done.clone(),
            bytes,
            at: Instant::now(),
        });
        // Only a caller that waits, or a full batch, wakes the writer: an async write never
        // pays for waking a thread (the writer looks for async writes every flush interval;
        // with no interval, it is woken at once).
        let wake = waits || st.ops.len() == self.batch_ops_max || self.flush_interval.is_zero();
        drop(st);
        if wake {
            self.to_writer.notify_one();
        }
        (
            seq,
            match done {
                Some(c) => Commit { inner: Some(c) },
                None => Commit::ready(),
            },
        )
    }

    /// Queues the operation if there is room (one lock acquisition; the caller holds the shard
    /// lock of its key, so it must not wait here).
    pub fn try_push(
        &self,
        ns: &Arc<NsIndex>,
        op: Op,
        durability: Durability,
        bytes: usize,
    ) -> TryPush {
        let st = self.state.lock();
        if let Some(reason) = &st.closed {
            return TryPush::Closed(reason.clone());
        }
        if !self.has_room(&st, bytes) {
            return TryPush::Full;
        }
        let (seq, commit) = self.push_locked(st, ns, op, durability, bytes);
        TryPush::Pushed(seq, commit)
    }

    /// Waits until an operation of `bytes` would fit (holding no other lock).
    pub fn wait_for_room(&self, bytes: usize, closed_err: impl Fn(&str) -> KvError) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(reason) = &st.closed {
                return Err(closed_err(reason));
            }
            if self.has_room(&st, bytes) {
                return Ok(());
            }
            self.room.wait(&mut st);
        }
    }

    /// Waits for room for one operation of `bytes` (bounded by `queue_ops_max` and
    /// `queue_bytes_max`). Fails if the store is closed.
    pub fn reserve(
        &self,
        bytes: usize,
        closed_err: impl Fn(&str) -> KvError,
    ) -> Result<Reservation<'_>> {
        let mut st = self.state.lock();
        loop {
            if let Some(reason) = &st.closed {
                return Err(closed_err(reason));
            }
            if self.has_room(&st, bytes) {
                break;
            }
            self.room.wait(&mut st);
        }
        st.reserved_ops += 1;
        st.reserved_bytes += bytes;
        Ok(Reservation {
            queue: self,
            bytes,
            used: false,
        })
    }

    /// The writer's side: waits for a batch. Returns at once when a caller waits (sync write or
    /// barrier), otherwise when the oldest async write is `flush_interval` old or the batch is
    /// full. `None` once closed and drained. With nothing queued it looks again every
    /// `flush_interval`, as async writes do not wake it.
    pub fn take_batch(&self) -> Option<Vec<Queued>> {
        let (batch_ops_max, flush_interval) = (self.batch_ops_max, self.flush_interval);
        let mut st = self.state.lock();
        loop {
            if st.ops.is_empty() {
                if st.closed.is_some() {
                    return None;
                }
                if flush_interval.is_zero() {
                    self.to_writer.wait(&mut st);
                } else {
                    self.to_writer.wait_for(&mut st, flush_interval);
                }
                continue;
            }
            if st.urgent > 0 || st.closed.is_some() || st.ops.len() >= batch_ops_max {
                break;
            }
            let deadline = st.ops[0].at + flush_interval;
            if Instant::now() >= deadline {
                break;
            }
            self.to_writer.wait_until(&mut st, deadline);
        }
        let n = st.ops.len().min(batch_ops_max);
        let batch: Vec<Queued> = st.ops.drain(..n).collect();
        for q in &batch {
            st.bytes -= q.bytes;
            if q.done.is_some() {
                st.urgent -= 1;
            }
        }
        drop(st);
        self.room.notify_all();
        Some(batch)
    }

    /// Refuses new operations; the writer drains what is queued, then stops.
    pub fn close(&self, reason: &str) {
        let mut st = self.state.lock();
        if st.closed.is_none() {
            st.closed = Some(reason.to_string());
        }
        drop(st);
        self.to_writer.notify_all();
        self.room.notify_all();
    }

    pub fn len(&self) -> usize {
        self.state.lock().ops.len()
    }
}
