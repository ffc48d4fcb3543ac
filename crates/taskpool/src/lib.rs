//! `taskpool`: an executor for short tasks, with a queue per executor and serializers.
//!
//! # Model
//! A [`Taskpool`] is a set of executors; each executor is one OS thread with its own queue. A
//! task is assigned to one executor when it is pushed, by the pool's [`Selection`] policy
//! (least-full or round-robin), and runs there. An executor takes its whole queue in one lock
//! and runs it as a batch, so a busy executor pays one lock per batch, and a push to an executor
//! that is awake costs one uncontended lock and no system call (only a sleeping executor is
//! woken).
//!
//! The pool grows on push: when a push leaves the chosen executor with `growth_threshold` or more
//! queued tasks, `growth_increment` executors are started, up to `max_executors`. It shrinks in
//! the background: the newest executor, idle for `idle_timeout_ms`, retires while the pool has
//! more than `min_executors`.
//!
//! A [`Serializer`] is a FIFO lane on the pool: its tasks run in push order, one at a time, on
//! whatever executor the pool picks. Serializers cost a small allocation each and no thread, so a
//! program can keep one per call, per connection or per key. A serializer runs at most
//! `serializer_batch` tasks in a row and then yields its executor to other queued work.
//!
//! A serializer woken by a task running on the pool (one serializer handing work to another) runs
//! next on that same executor, its first task in hand, without going through an executor queue.
//! Only the last serializer a task wakes gets that place; the others go through the selection
//! policy, and so does the next one after `serializer_batch` such hand-offs in a row, so chains of
//! serializers spread over the executors and cannot hold one forever. The serializer so woken
//! starts when the waking task returns: one more reason tasks must be short.
//!
//! A task that panics is caught: the panic is counted (`TaskpoolStats::panicked`) and logged
//! through `tracing`, and the executor goes on with the next task. (The standard panic hook still
//! prints the panic message to stderr unless the program replaces it.)
//!
//! [`Taskpool::shutdown`] stops the pool, draining (running) or cancelling (dropping) tasks not
//! yet run, and waits for the executor threads.
//!
//! # Bounds
//! Every queue is bounded: an executor queue holds at most `queue_max` tasks (push fails with
//! [`PushError::Full`] when all are full), a serializer at most `serializer_queue_max`
//! ([`PushError::SerializerFull`]). The one exception is a serializer's own scheduling node:
//! each serializer has at most one in the pool at any time, so those are bounded by the number of
//! serializers alive, and refusing them would strand tasks already accepted.
//!
//! # API
//! - [`TaskpoolConfig`]: every limit, with units and defaults; [`TaskpoolConfig::fixed`] for a
//!   pool of constant size.
//! - [`Taskpool::new`], [`Taskpool::push`], [`Taskpool::serializer`], [`Taskpool::shutdown`].
//! - [`Serializer::push`], [`Serializer::pending`].
//! - Metrics: [`Taskpool::executors`], [`Taskpool::stats`] ([`TaskpoolStats`]: executors, queue
//!   length per executor, executed, panicked, cancelled, grown, shrunk).
//! - Errors: [`ConfigError`], [`PushError`], [`ShutdownError`].
//!
//! ```
//! use taskpool::{ShutdownMode, Taskpool, TaskpoolConfig};
//! use std::sync::{Arc, Mutex};
//!
//! let pool = Taskpool::new(TaskpoolConfig::fixed(2)).unwrap();
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let lane = pool.serializer();
//! for i in 0..10 {
//!     let seen = Arc::clone(&seen);
//!     lane.push(move || seen.lock().unwrap().push(i)).unwrap();
//! }
//! pool.shutdown(ShutdownMode::Drain).unwrap();
//! assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<_>>());
//! ```
//!
//! # Where to read
//! `pool.rs` (executors, selection, growth, shrink, shutdown; its header states the locking and
//! memory-ordering rules), then `serializer.rs` (the hand-off between a serializer and the pool).

mod config;
mod error;
mod pool;
mod serializer;

pub use config::{Selection, TaskpoolConfig};
pub use error::{ConfigError, PushError, ShutdownError};
pub use pool::{ShutdownMode, Taskpool, TaskpoolStats};
pub use serializer::Serializer;
