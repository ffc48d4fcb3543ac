//! Typed errors of the pool.

use thiserror::Error;

/// A [`TaskpoolConfig`](crate::TaskpoolConfig) that cannot work, or a pool that could not start.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error(
        "taskpool executors: need 1 <= min_executors ({min}) <= initial_executors ({initial}) \
         <= max_executors ({max}); fix the configuration"
    )]
    Executors {
        min: usize,
        initial: usize,
        max: usize,
    },
    #[error("taskpool {field} is 0; it must be at least 1")]
    Zero { field: &'static str },
    #[error("taskpool: could not start executor thread {index}: {source}")]
    Spawn {
        index: usize,
        #[source]
        source: std::io::Error,
    },
}

/// Why a task was not accepted. The task is dropped without running.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// Every live executor's queue holds `queue_max` tasks and the pool cannot grow.
    #[error(
        "taskpool full: every executor queue holds {queue_max} tasks (queue_max); retry later or raise queue_max"
    )]
    Full { queue_max: usize },
    /// The serializer already holds `serializer_queue_max` waiting tasks.
    #[error(
        "serializer full: {serializer_queue_max} tasks waiting (serializer_queue_max); retry later or raise it"
    )]
    SerializerFull { serializer_queue_max: usize },
    /// The pool is shutting down or shut down; it accepts no new tasks.
    #[error("taskpool is shut down; no new tasks are accepted")]
    ShutDown,
}

/// Why `shutdown` could not run.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownError {
    /// `shutdown` waits for every executor to finish, so a task running on the pool cannot call
    /// it (it would wait for itself).
    #[error("taskpool shutdown called from one of its own tasks; call it from outside the pool")]
    FromExecutor,
}
