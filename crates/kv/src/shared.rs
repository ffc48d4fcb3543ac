//! What the store's handles, its writer thread and its checkpointer share: the options, the
//! write queue, the namespaces' indexes, the large-value cache, the counters and the read
//! connections. The writer reaches the store only through this, never through `store`.

use crate::error::KvError;
use crate::index::{LargeCache, NsIndex};
use crate::queue::{Durability, Queue};
use parking_lot::{Condvar, Mutex, RwLock};
use rusqlite::Connection;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Tuning and limits. Every bound has a default; units are in the names.
#[derive(Debug, Clone)]
pub struct Options {
    /// How writes are acknowledged unless a call says otherwise. Default `Sync`.
    pub durability: Durability,
    /// The longest an async write waits before the writer starts committing it. Default 10 ms.
    /// Async writes never wake the writer (that would cost each a system call); it looks for
    /// them this often, also when idle.
    pub flush_interval_ms: u64,
    /// Values up to this size are kept in memory from open; larger ones stay on disk and are
    /// read (and cached) on request. Default 4096 bytes.
    pub inline_value_bytes_max: usize,
    /// Memory for large values read from disk or just written. Default 16 MiB.
    pub cache_bytes_max: usize,
    /// Operations waiting for the writer; a writer past this waits for room. Default 65,536.
    pub queue_ops_max: usize,
    /// Bytes (keys and values) waiting for the writer. Default 64 MiB.
    pub queue_bytes_max: usize,
    /// Operations committed in one transaction at most. Default 16,384.
    pub batch_ops_max: usize,
    /// Longest key path (`/family/key`). Default 1024 bytes.
    pub key_bytes_max: usize,
    /// Largest value. Default 1 MiB.
    pub value_bytes_max: usize,
    /// SQLite connections for reading large values, backups and exports. Default 2.
    pub read_connections: usize,
    /// How often the background checkpointer copies the WAL into the main file when nothing
    /// asks it sooner (the writer asks when the WAL nears `wal_restart_bytes`, so under load it
    /// runs once per WAL cycle). Default 10,000 ms.
    pub checkpoint_interval_ms: u64,
    /// Longest WAL: it restarts from its beginning before this. At a quarter the writer asks
    /// the background checkpointer to copy the WAL into the main file; from half, once that is
    /// done, the writer checkpoints the few commits left (writes wait for that short checkpoint)
    /// and the next transaction rewrites the WAL from the start; at the full length it does so
    /// whatever it costs. So the WAL file keeps its size and commits overwrite it in place,
    /// which keeps each commit's fsync cheap (no size change to journal); the store gives the WAL
    /// file this length (plus an eighth) at open, so that even the first cycle overwrites.
    /// Default 16 MiB.
    pub wal_restart_bytes: u64,
    /// Give the WAL file its full length at open (writing `wal_restart_bytes` plus an eighth of
    /// zeros, once per open). Right for a long-running store; a one-off command that makes a
    /// few commits (`tandem db put`) turns it off, as the zeros would cost it more than its
    /// commits. Default true.
    pub wal_preallocate: bool,
    /// Lock shards of the in-memory index per namespace. Default 64.
    pub shards: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            flush_interval_ms: 10,
            inline_value_bytes_max: 4096,
            cache_bytes_max: 16 << 20,
            queue_ops_max: 65_536,
            queue_bytes_max: 64 << 20,
            batch_ops_max: 16_384,
            key_bytes_max: 1024,
            value_bytes_max: 1 << 20,
            read_connections: 2,
            checkpoint_interval_ms: 10_000,
            wal_restart_bytes: 16 << 20,
            wal_preallocate: true,
            shards: 64,
        }
    }
}

/// Counts and sizes, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys in memory (committed and pending), all namespaces.
    pub keys: u64,
    /// Bytes of values held in memory outside the large-value cache.
    pub resident_value_bytes: u64,
    /// Committed values that live only on disk (over `inline_value_bytes_max`).
    pub large_values: u64,
    /// Their total size in bytes.
    pub large_value_bytes: u64,
    /// Bytes in the large-value cache, at most `cache_bytes_max`.
    pub cache_bytes: u64,
    pub cache_bytes_max: u64,
    /// Operations waiting for the writer, at most `queue_ops_max`.
    pub queue_ops: u64,
    pub queue_ops_max: u64,
    /// Transactions committed, operations in them, and the largest batch.
    pub commits: u64,
    pub committed_ops: u64,
    pub largest_batch_ops: u64,
    /// Failed commits.
    pub write_errors: u64,
}

impl Stats {
    /// The figures [`crate::Store::quick_stats`] fills, as `(series, value)` for a metrics
    /// history, named as Prometheus would (`tandem_kv_*`, counters ending in `_total`).
    pub fn samples(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("tandem_kv_keys", self.keys as f64),
            (
                "tandem_kv_resident_value_bytes",
                self.resident_value_bytes as f64,
            ),
            ("tandem_kv_large_value_bytes", self.large_value_bytes as f64),
            ("tandem_kv_cache_bytes", self.cache_bytes as f64),
            ("tandem_kv_queue_ops", self.queue_ops as f64),
            ("tandem_kv_commits_total", self.commits as f64),
            ("tandem_kv_committed_ops_total", self.committed_ops as f64),
            ("tandem_kv_write_errors_total", self.write_errors as f64),
        ]
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub committed_ops: AtomicU64,
    pub largest_batch_ops: AtomicU64,
    pub write_errors: AtomicU64,
}

pub(crate) struct Shared {
    pub path: PathBuf,
    pub options: Options,
    pub queue: Queue,
    pub namespaces: RwLock<HashMap<String, Arc<NsIndex>>>,
    pub cache: LargeCache,
    pub stats: Counters,
    pub last_error: Mutex<Option<KvError>>,
    pub ckpt: CheckpointSignal,
    pub readers: Vec<Mutex<Connection>>,
    pub next_reader: AtomicUsize,
    pub next_ns_id: AtomicUsize,
}

impl Shared {
    pub fn closed_error(&self, reason: &str) -> KvError {
        KvError::Closed {
            path: self.path.clone(),
            reason: reason.to_string(),
        }
    }

    pub fn reader(&self) -> parking_lot::MutexGuard<'_, Connection> {
        let n = self.readers.len();
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Some(c) = self.readers[(start + i) % n].try_lock() {
                return c;
            }
        }
        self.readers[start % n].lock()
    }
}

/// How the writer asks the background checkpointer to run now, and learns that it has.
#[derive(Default)]
pub(crate) struct CheckpointSignal {
    state: Mutex<CheckpointState>,
    cv: Condvar,
    /// Checkpoints completed by the background checkpointer.
    pub generation: AtomicU64,
}

#[derive(Default)]
struct CheckpointState {
    stop: bool,
    kick: bool,
}

impl CheckpointSignal {
    pub fn kick(&self) {
        self.state.lock().kick = true;
        self.cv.notify_one();
    }

    /// Waits until the writer kicks, the store stops, or `interval` passes. False once stopped.
    pub fn wait_turn(&self, interval: Duration) -> bool {
        let mut st = self.state.lock();
        if !st.stop && !st.kick {
            self.cv.wait_for(&mut st, interval);
        }
        if st.stop {
            return false;
        }
        st.kick = false;
        true
    }

    pub fn stop(&self) {
        self.state.lock().stop = true;
        self.cv.notify_one();
    }
}
