//! The pool's configuration: every limit with its unit and its default.

use crate::error::ConfigError;
use std::time::Duration;

/// How `push` picks the executor that will run a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Selection {
    /// The executor with the fewest queued and running tasks; ties go to the first one found
    /// scanning from a position that rotates per pushing thread, so ties spread out.
    #[default]
    LeastFull,
    /// Each pushing thread cycles through the live executors in turn (the cycle position is kept
    /// per thread, so pushers never contend on a shared counter).
    RoundRobin,
}

/// Configuration of a [`Taskpool`](crate::Taskpool). Build one with `TaskpoolConfig::default()`
/// and change the fields you need; [`Taskpool::new`](crate::Taskpool::new) validates it.
#[derive(Debug, Clone)]
pub struct TaskpoolConfig {
    /// Names the executor threads (`{name}-{index}`) and the pool in logs. Default `taskpool`.
    pub name: String,
    /// The pool never shrinks below this many executors. At least 1. Default 1.
    pub min_executors: usize,
    /// Executors started by `new`. Between `min_executors` and `max_executors`. Default 2.
    pub initial_executors: usize,
    /// The pool never grows above this many executors (each is one OS thread). Default 16.
    pub max_executors: usize,
    /// How `push` picks an executor. Default [`Selection::LeastFull`].
    pub selection: Selection,
    /// A push that leaves the chosen executor with at least this many queued tasks grows the pool
    /// by `growth_increment` executors (up to `max_executors`). Default 64 tasks.
    pub growth_threshold: usize,
    /// Executors added per growth step. At least 1. Default 1.
    pub growth_increment: usize,
    /// An executor idle this long retires if it is the newest one and the pool has more than
    /// `min_executors`. `0` disables shrinking. Default 30 000 ms.
    pub idle_timeout_ms: u64,
    /// The most tasks one executor's queue holds; a push when every live executor's queue is full
    /// fails with [`PushError::Full`](crate::PushError::Full). Default 65 536 tasks.
    pub queue_max: usize,
    /// The most tasks one serializer holds (queued, not yet running); a push beyond it fails with
    /// [`PushError::SerializerFull`](crate::PushError::SerializerFull). Default 10 000 tasks.
    pub serializer_queue_max: usize,
    /// A serializer runs at most this many tasks in a row before it yields its executor to other
    /// work (it is queued again behind what is already waiting). At least 1. Default 32 tasks.
    pub serializer_batch: usize,
}

impl Default for TaskpoolConfig {
    fn default() -> Self {
        TaskpoolConfig {
            name: "taskpool".to_string(),
            min_executors: 1,
            initial_executors: 2,
            max_executors: 16,
            selection: Selection::LeastFull,
            growth_threshold: 64,
            growth_increment: 1,
            idle_timeout_ms: 30_000,
            queue_max: 65_536,
            serializer_queue_max: 10_000,
            serializer_batch: 32,
        }
    }
}

impl TaskpoolConfig {
    /// A fixed-size pool: `executors` threads from start to shutdown, no growth, no shrink.
    pub fn fixed(executors: usize) -> Self {
        TaskpoolConfig {
            min_executors: executors,
            initial_executors: executors,
            max_executors: executors,
            idle_timeout_ms: 0,
            ..TaskpoolConfig::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let (min, initial, max) = (
            self.min_executors,
            self.initial_executors,
            self.max_executors,
        );
        if min == 0 || min > initial || initial > max {
            return Err(ConfigError::Executors { min, initial, max });
        }
        for (field, value) in [
            ("growth_threshold", self.growth_threshold),
            ("growth_increment", self.growth_increment),
            ("queue_max", self.queue_max),
            ("serializer_queue_max", self.serializer_queue_max),
            ("serializer_batch", self.serializer_batch),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        Ok(())
    }

    pub(crate) fn idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_ms > 0).then(|| Duration::from_millis(self.idle_timeout_ms))
    }
}
