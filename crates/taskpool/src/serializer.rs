//! Serializers: many cheap FIFO lanes that run one task at a time on the pool's executors.
//!
//! A serializer is a queue plus a `scheduled` flag, both under one small mutex. Invariant: when
//! `scheduled` is false the queue is empty and the serializer is in no executor queue; when it is
//! true, exactly one [`Job::Serial`] for it exists (queued on an executor, or running). A push
//! that finds `scheduled` false sets it and queues that job; the executor running the job pops
//! tasks one by one and, on finding the queue empty, clears `scheduled` under the same lock. So
//! tasks of one serializer never run concurrently, and they run in push order. After
//! `serializer_batch` tasks the job goes to the back of its executor's queue, letting other work
//! run first.
//!
//! A serializer woken by a task running on its pool (it was idle, so the new task is its only
//! one) does not go through a queue: the pushing thread sets `scheduled` and hands the serializer
//! and the task, not queued, to its executor's run-next place (`Inner::run_next`). The invariant
//! holds with "queued" read as "queued or in the run-next place"; a task held there is ahead of
//! everything in the queue, and goes back to the front of the queue if the serializer has to
//! leave that place before running.
//!
//! This module and `pool` import each other, on purpose. A serializer is one kind of job of
//! the pool, not a layer above it: the pool's executors run [`SerializerInner::run`] as a
//! [`Job::Serial`], and a serializer schedules itself on the pool's queues. Cutting the circle
//! would mean a trait object between them on every task, a virtual call on the hot path, to buy
//! a split that a reader gains nothing from: read `pool.rs` first, then this file.

use crate::error::PushError;
use crate::pool::{Inner, Job, Task};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

struct State {
    queue: VecDeque<Task>,
    scheduled: bool,
}

pub(crate) struct SerializerInner {
    pool: Arc<Inner>,
    state: Mutex<State>,
}

/// A FIFO lane on a [`Taskpool`](crate::Taskpool): tasks pushed here run in push order, one at a
/// time, on whichever executor the pool picks. Cheap to create (no thread) and to clone (every
/// clone is the same lane). A serializer does not keep its pool running: once the last
/// [`Taskpool`](crate::Taskpool) handle is dropped or `shutdown` is called, pushes fail with
/// [`PushError::ShutDown`].
#[derive(Clone)]
pub struct Serializer {
    inner: Arc<SerializerInner>,
}

impl std::fmt::Debug for Serializer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serializer")
            .field("pending", &self.pending())
            .finish()
    }
}

impl Serializer {
    pub(crate) fn new(pool: Arc<Inner>) -> Serializer {
        Serializer {
            inner: Arc::new(SerializerInner {
                pool,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    scheduled: false,
                }),
            }),
        }
    }

    /// Queues `task` behind this serializer's earlier tasks. Fails when `serializer_queue_max`
    /// tasks are already waiting or the pool is shutting down; the task is then dropped.
    ///
    /// A push that races with `shutdown` may be accepted and then cancelled (counted in
    /// `cancelled`) if the pool stops before the serializer could be scheduled.
    pub fn push<F>(&self, task: F) -> Result<(), PushError>
    where
        F: FnOnce() + Send + 'static,
    {
        let pool = &self.inner.pool;
        if pool.is_closed() {
            return Err(PushError::ShutDown);
        }
        let local = pool.on_own_executor();
        let task: Task = Box::new(task);
        let mut st = self.inner.state.lock();
        let max = pool.config().serializer_queue_max;
        if st.queue.len() >= max {
            drop(st);
            return Err(PushError::SerializerFull {
                serializer_queue_max: max,
            });
        }
        if st.scheduled {
            st.queue.push_back(task);
            return Ok(());
        }
        st.scheduled = true;
        if local {
            // Woken by a task on this pool: it runs next on this executor, task in hand.
            drop(st);
            pool.run_next(Arc::clone(&self.inner), task);
            return Ok(());
        }
        st.queue.push_back(task);
        drop(st);
        if let Err(e) = pool.push_job(Job::Serial(Arc::clone(&self.inner)), false) {
            // Not scheduled means the queue was empty before this push: our task is first.
            // Tasks other threads queued behind it since were accepted; they are cancelled.
            // Tasks are dropped after the lock is released: a task's destructor may push.
            let (ours, rest) = {
                let mut st = self.inner.state.lock();
                st.scheduled = false;
                let ours = st.queue.pop_front();
                (ours, std::mem::take(&mut st.queue))
            };
            drop(ours);
            pool.add_cancelled(rest.len() as u64);
            drop(rest);
            return Err(e);
        }
        Ok(())
    }

    /// Tasks waiting in this serializer (not counting one that is running).
    pub fn pending(&self) -> usize {
        self.inner.state.lock().queue.len()
    }
}

impl SerializerInner {
    /// Runs up to `serializer_batch` tasks on executor `index`, starting with `first` if given
    /// (a task handed over with the serializer, ahead of its queue); returns how many ran.
    pub(crate) fn run(self: Arc<Self>, pool: &Inner, index: usize, first: Option<Task>) -> u64 {
        let batch = pool.config().serializer_batch;
        let mut ran = 0u64;
        if let Some(task) = first {
            pool.run_task(task);
            ran += 1;
        }
        while ran < batch as u64 {
            let task = {
                let mut st = self.state.lock();
                match st.queue.pop_front() {
                    Some(task) => task,
                    None => {
                        st.scheduled = false;
                        return ran;
                    }
                }
            };
            if pool.is_cancelling() {
                drop(task);
                pool.add_cancelled(1);
                self.cancel_all();
                return ran;
            }
            pool.run_task(task);
            ran += 1;
        }
        {
            let mut st = self.state.lock();
            if st.queue.is_empty() {
                st.scheduled = false;
                return ran;
            }
        }
        pool.requeue_local(index, Job::Serial(self));
        ran
    }

    /// Returns a task taken out ahead of the queue to the front of the queue (the serializer
    /// stays scheduled).
    pub(crate) fn put_back(&self, task: Task) {
        self.state.lock().queue.push_front(task);
    }

    /// Drops every waiting task (counted as cancelled) and unschedules the serializer.
    pub(crate) fn cancel_all(&self) {
        let rest = {
            let mut st = self.state.lock();
            st.scheduled = false;
            std::mem::take(&mut st.queue)
        };
        self.pool.add_cancelled(rest.len() as u64);
    }
}
