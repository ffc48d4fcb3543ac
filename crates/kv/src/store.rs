//! [`Store`] and [`Namespace`]: opening, the operations, statistics.

use crate::error::{KvError, Result, io_hint, open_error, read_error};
use crate::format::{FORMAT_VERSION, MIGRATIONS};
use crate::index::{LargeCache, MainEntry, NsIndex, Pending, Slot, Visible};
use crate::path::{
    DEFAULT_NAMESPACE, check_key, check_namespace, lock_path, tree_prefix, with_key_path,
};
use crate::queue::{Commit, Durability, Op, Queue, TryPush};
use crate::shared::{CheckpointSignal, Counters, Options, Shared, Stats};
use crate::value::{Value, column_bytes};
use parking_lot::{Mutex, RwLock};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// The store's file name inside a data directory.
pub const FILE_NAME: &str = "kv.sqlite3";

struct Inner {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    _lock: File,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.ckpt.stop();
        if let Some(h) = self.checkpointer.lock().take() {
            let _ = h.join();
        }
        // Close the read connections first, so that the writer's connection is the last one
        // and SQLite removes the WAL and shared-memory files with it.
        for r in &self.shared.readers {
            if let Ok(mem) = Connection::open_in_memory() {
                *r.lock() = mem;
            }
        }
        self.shared.queue.close("the store was closed");
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }
}

/// A durable astdb-compatible key-value store. Cloning gives another handle to the same store;
/// the writer stops (after committing everything queued) when the last handle is dropped.
///
/// `Store` dereferences to its default namespace ([`DEFAULT_NAMESPACE`], the astdb families).
#[derive(Clone)]
pub struct Store {
    default: Namespace,
}

/// One namespace: its own table on disk and its own in-memory index. All operations are here.
#[derive(Clone)]
pub struct Namespace {
    inner: Arc<Inner>,
    ns: Arc<NsIndex>,
}

impl std::ops::Deref for Store {
    type Target = Namespace;
    fn deref(&self) -> &Namespace {
        &self.default
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.shared.path)
            .finish()
    }
}

/// How long a held lock file is retried before the store counts as in use elsewhere.
const LOCK_RETRY_MS: u64 = 250;

impl Store {
    /// Opens (creating if needed) the store `FILE_NAME` in `dir`, creating `dir` too.
    pub fn open_dir(dir: impl AsRef<Path>, options: Options) -> Result<Store> {
        let dir = dir.as_ref();
        filemode::create_dir_all(dir, &filemode::Access::Private).map_err(|e| KvError::Open {
            path: dir.to_path_buf(),
            reason: format!("cannot create the directory: {e}"),
            hint: io_hint(&e),
        })?;
        Store::open(dir.join(FILE_NAME), options)
    }

    /// Opens (creating if needed) the store in the SQLite file `path`, loads every small value
    /// into memory and starts the writer. Only one process may have a store open for writing:
    /// a second gets [`KvError::Locked`].
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let lock_file_path = lock_path(&path);
        // Every file of the store is its owner's alone: it holds the registrar's HA1s and its
        // nonce secret. An older release's 0644 files are narrowed here.
        let private = filemode::Access::Private;
        let lock = filemode::open_rw(&lock_file_path, &private).map_err(|e| KvError::Open {
            path: path.clone(),
            reason: e.to_string(),
            hint: io_hint(&e),
        })?;
        // A child process being started by another thread holds a copy of the descriptor (and
        // so the lock) between its fork and its exec: a held lock is retried for a moment.
        let deadline = std::time::Instant::now() + Duration::from_millis(LOCK_RETRY_MS);
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if std::time::Instant::now() >= deadline {
                        return Err(KvError::Locked {
                            path,
                            lock: lock_file_path,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(KvError::Open {
                        path,
                        reason: format!("cannot lock {}: {e}", lock_file_path.display()),
                        hint: io_hint(&e),
                    });
                }
            }
        }

        // Created before SQLite opens it, so that the WAL and shared-memory files SQLite
        // creates beside it get its mode.
        filemode::prepare_sqlite(&path, &private).map_err(|e| KvError::Open {
            path: path.clone(),
            reason: e.to_string(),
            hint: io_hint(&e),
        })?;
        let oe = |e: rusqlite::Error| open_error(&path, &e);
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(oe)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(oe)?;
        // A file from a newer Tandem, or of another kind, is refused before anything is
        // written to it (WAL mode below writes its header).
        fileformat::check(&conn, &path, &fileformat::KV_STORE, FORMAT_VERSION)?;
        // 1 KiB pages (for a new file; an existing one keeps its own): a commit of a few small
        // values appends a quarter of the WAL bytes that 4 KiB pages would, so the WAL restarts
        // (and the writer checkpoints) a quarter as often. Must precede WAL mode.
        conn.execute_batch("PRAGMA page_size=1024").map_err(oe)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(oe)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(KvError::Open {
                path,
                reason: format!("SQLite refused WAL mode (journal mode is {mode})"),
                hint: "put the store on a local filesystem that supports shared memory",
            });
        }
        conn.execute_batch(
            "PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint=0; \
             PRAGMA foreign_keys=OFF; PRAGMA cache_size=-16384;",
        )
        .map_err(oe)?;
        conn.set_prepared_statement_cache_capacity(256);

        // The file's format: an older one upgraded in one transaction, all or nothing.
        fileformat::upgrade(&conn, &path, &fileformat::KV_STORE, MIGRATIONS)?;
        // Namespaces.
        conn.execute_batch("BEGIN IMMEDIATE").map_err(oe)?;
        let names: Vec<String> = {
            let mut st = conn
                .prepare("SELECT name FROM kv_namespaces ORDER BY name")
                .map_err(oe)?;
            st.query_map([], |r| r.get(0))
                .map_err(oe)?
                .collect::<rusqlite::Result<_>>()
                .map_err(oe)?
        };
        let mut namespaces = HashMap::new();
        for (id, name) in names.iter().enumerate() {
            check_namespace(name).map_err(|e| KvError::Open {
                path: path.clone(),
                reason: format!("the file lists a bad namespace: {e}"),
                hint: "the file is damaged or is not a Tandem store: restore it from a backup",
            })?;
            let ns = NsIndex::new(id, name, options.shards);
            conn.execute(&ns.sql.sweep_orphans, []).map_err(oe)?;
            load(&conn, &ns, &path)?;
            namespaces.insert(name.clone(), Arc::new(ns));
        }
        conn.execute_batch("COMMIT").map_err(oe)?;
        // No other connection has the file open for writing (the lock file), and SQLite ignores
        // what lies past the WAL's last frame: see `wal_file`.
        let mut wal_path = path.clone().into_os_string();
        wal_path.push("-wal");
        // Frames carry 24-byte headers, and a restart a reader holds off comes late: an eighth
        // more than `wal_restart_bytes` covers both.
        let wal_bytes = options.wal_restart_bytes + options.wal_restart_bytes / 8;
        if !options.wal_preallocate {
            // Commits append to the WAL until it restarts: fine for a few of them.
        } else if let Err(e) = crate::wal_file::extend_wal(Path::new(&wal_path), wal_bytes) {
            tracing::warn!(
                path = %path.display(), error = %e,
                "cannot give the WAL its full length; commits append to it until it restarts"
            );
        }

        let mut readers = Vec::new();
        for _ in 0..options.read_connections.max(1) {
            readers.push(Mutex::new(open_reader(&path)?));
        }
        let checkpoint_conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(oe)?;
        checkpoint_conn
            .busy_timeout(Duration::from_millis(100))
            .map_err(oe)?;

        let shared = Arc::new(Shared {
            path: path.clone(),
            queue: Queue::new(
                options.queue_ops_max,
                options.queue_bytes_max,
                options.batch_ops_max,
                Duration::from_millis(options.flush_interval_ms),
            ),
            cache: LargeCache::new(options.cache_bytes_max),
            stats: Counters::default(),
            last_error: Mutex::new(None),
            ckpt: CheckpointSignal::default(),
            readers,
            next_reader: AtomicUsize::new(0),
            next_ns_id: AtomicUsize::new(names.len()),
            namespaces: RwLock::new(namespaces),
            options,
        });
        let spawn_err = |e: std::io::Error| KvError::Open {
            path: path.clone(),
            reason: format!("cannot start a thread: {e}"),
            hint: "the system is out of threads or memory",
        };
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("kv-writer".into())
                .spawn(move || crate::writer::run(shared, conn))
                .map_err(spawn_err)?
        };
        let checkpointer = {
            let shared = shared.clone();
            let interval = Duration::from_millis(shared.options.checkpoint_interval_ms.max(1));
            let path = path.clone();
            std::thread::Builder::new()
                .name("kv-checkpoint".into())
                .spawn(move || checkpoint_loop(checkpoint_conn, &path, interval, &shared.ckpt))
                .map_err(spawn_err)?
        };
        let default = shared.namespaces.read()[DEFAULT_NAMESPACE].clone();
        let inner = Arc::new(Inner {
            shared,
            writer: Mutex::new(Some(writer)),
            checkpointer: Mutex::new(Some(checkpointer)),
            _lock: lock,
        });
        Ok(Store {
            default: Namespace { inner, ns: default },
        })
    }

    /// The namespace `name` (`[a-z][a-z0-9_]{0,62}`), created (durably) on first use.
    pub fn namespace(&self, name: &str) -> Result<Namespace> {
        check_namespace(name)?;
        let shared = &self.inner.shared;
        if let Some(ns) = shared.namespaces.read().get(name) {
            return Ok(Namespace {
                inner: self.inner.clone(),
                ns: ns.clone(),
            });
        }
        let res = shared.queue.reserve(64, |r| shared.closed_error(r))?;
        let mut map = shared.namespaces.write();
        if let Some(ns) = map.get(name) {
            return Ok(Namespace {
                inner: self.inner.clone(),
                ns: ns.clone(),
            });
        }
        let id = shared.next_ns_id.fetch_add(1, Ordering::Relaxed);
        let ns = Arc::new(NsIndex::new(id, name, shared.options.shards));
        map.insert(name.to_string(), ns.clone());
        let (_, commit) = res.push(&ns, Op::CreateNamespace, Durability::Sync);
        drop(map);
        commit.wait()?;
        Ok(Namespace {
            inner: self.inner.clone(),
            ns,
        })
    }

    /// Names of all namespaces.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .shared
            .namespaces
            .read()
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.inner.shared.path
    }

    /// Blocks until every write queued so far (sync or async) is on disk. Fails if a commit
    /// failed meanwhile (an async write's failure has no caller to go to otherwise).
    pub fn flush(&self) -> Result<()> {
        let shared = &self.inner.shared;
        let errors_before = shared.stats.write_errors.load(Ordering::Acquire);
        let res = shared.queue.reserve(0, |r| shared.closed_error(r))?;
        let (_, commit) = res.push(&self.ns, Op::Barrier, Durability::Sync);
        commit.wait()?;
        if shared.stats.write_errors.load(Ordering::Acquire) > errors_before
            && let Some(e) = shared.last_error.lock().clone()
        {
            return Err(e);
        }
        Ok(())
    }

    /// The figures a metrics history samples, without walking the values: the key count is the
    /// committed keys plus the pending writes (a pending write to an existing key counts twice
    /// until it commits), and the byte sizes are left at zero. O(shards), where [`Store::stats`]
    /// is O(keys): cheap enough for every sampling tick of a large store.
    pub fn quick_stats(&self) -> Stats {
        let mut s = Stats::default();
        self.each_shard(|shard| s.keys += (shard.main.len() + shard.overlay.len()) as u64);
        self.add_counters(&mut s);
        s
    }

    /// Calls `f` with every shard of every namespace, one read lock at a time.
    fn each_shard(&self, mut f: impl FnMut(&crate::index::Shard)) {
        let namespaces: Vec<Arc<NsIndex>> = self
            .inner
            .shared
            .namespaces
            .read()
            .values()
            .cloned()
            .collect();
        for ns in namespaces {
            for i in 0..ns.shard_count() {
                f(&ns.shard_at(i));
            }
        }
    }

    /// The cache, the queue and the writer's counters into `s`.
    fn add_counters(&self, s: &mut Stats) {
        let shared = &self.inner.shared;
        s.cache_bytes = shared.cache.bytes() as u64;
        s.cache_bytes_max = shared.cache.bytes_max as u64;
        s.queue_ops = shared.queue.len() as u64;
        s.queue_ops_max = shared.queue.ops_max as u64;
        s.commits = shared.stats.commits.load(Ordering::Relaxed);
        s.committed_ops = shared.stats.committed_ops.load(Ordering::Relaxed);
        s.largest_batch_ops = shared.stats.largest_batch_ops.load(Ordering::Relaxed);
        s.write_errors = shared.stats.write_errors.load(Ordering::Relaxed);
    }

    /// Counts and sizes, summed over namespaces.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        self.each_shard(|shard| {
            s.keys += shard.main.len() as u64;
            for e in shard.main.values() {
                match &e.slot {
                    Slot::Small(v) => s.resident_value_bytes += v.len() as u64,
                    Slot::Large { len } => {
                        s.large_values += 1;
                        s.large_value_bytes += len;
                    }
                }
            }
            for (k, p) in &shard.overlay {
                if !shard.main.contains_key(k) {
                    s.keys += 1;
                }
                if let Some(v) = &p.value {
                    s.resident_value_bytes += v.len() as u64;
                }
            }
        });
        self.add_counters(&mut s);
        s
    }

    /// The last commit error, if any commit failed since open.
    pub fn last_error(&self) -> Option<String> {
        self.inner
            .shared
            .last_error
            .lock()
            .as_ref()
            .map(ToString::to_string)
    }

    /// Copies the whole store to `dest` (which must not exist) with SQLite's online backup,
    /// while writes go on. The copy holds everything committed when it started (writes queued
    /// before the call are flushed first). It is written to a temporary name, fsynced, then
    /// renamed.
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<()> {
        self.flush()?;
        let shared = &self.inner.shared;
        let conn = shared.reader();
        crate::astdb::backup_from(&conn, &shared.path, dest.as_ref())
    }

    /// Writes the astdb namespace to `dest` (which must not exist) as an Asterisk
    /// astdb.sqlite3, readable by its owner only (0600). Returns the number of entries.
    pub fn export_astdb(&self, dest: impl AsRef<Path>) -> Result<usize> {
        self.export_astdb_with(dest, &filemode::Access::Private)
    }

    /// [`Self::export_astdb`], readable as `access` says (0640 with a group, for Asterisk's
    /// user).
    pub fn export_astdb_with(
        &self,
        dest: impl AsRef<Path>,
        access: &filemode::Access,
    ) -> Result<usize> {
        self.flush()?;
        let shared = &self.inner.shared;
        let conn = shared.reader();
        crate::astdb::export_from(&conn, &shared.path, &self.ns.sql, dest.as_ref(), access)
    }

    /// Adds every entry of the Asterisk astdb.sqlite3 `src` to the astdb namespace (replacing
    /// keys that exist), durably. Returns the number imported. Rows with a NULL value (which
    /// Asterisk cannot read either) are skipped.
    pub fn import_astdb(&self, src: impl AsRef<Path>) -> Result<usize> {
        let rows = crate::astdb::read_astdb(src.as_ref())?;
        let n = rows.len();
        for (key, value) in rows {
            let _async_commit = self.put_path_with(key, value, Durability::Async)?;
        }
        self.flush()?;
        Ok(n)
    }
}

fn open_reader(path: &Path) -> Result<Connection> {
    let c = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| open_error(path, &e))?;
    c.busy_timeout(Duration::from_secs(5))
        .map_err(|e| open_error(path, &e))?;
    Ok(c)
}

fn load(conn: &Connection, ns: &NsIndex, path: &Path) -> Result<()> {
    let oe = |e: rusqlite::Error| open_error(path, &e);
    let mut st = conn.prepare(&ns.sql.load).map_err(oe)?;
    let mut rows = st.query([]).map_err(oe)?;
    while let Some(row) = rows.next().map_err(oe)? {
        let key = match row.get_ref(0).map_err(oe)? {
            rusqlite::types::ValueRef::Text(b) => std::str::from_utf8(b).ok().map(Arc::<str>::from),
            _ => None,
        };
        let Some(key) = key else {
            return Err(KvError::Open {
                path: path.to_path_buf(),
                reason: format!("table {} holds a key that is not UTF-8 text", ns.sql.main),
                hint: "the file is damaged or is not a Tandem store: restore it from a backup",
            });
        };
        let size: i64 = row.get(2).map_err(oe)?;
        let slot = match column_bytes(row.get_ref(1).map_err(oe)?) {
            Some(b) => Slot::Small(Value::from(b)),
            None => Slot::Large {
                len: size.max(0) as u64,
            },
        };
        let mut shard = ns.write(&key);
        shard.main.insert(key, MainEntry { slot, seq: 0 });
    }
    Ok(())
}

/// The background checkpointer: copies the WAL into the main file every `interval`, or at once
/// when the writer asks (the WAL is nearly due for a restart), so that the writer's own
/// checkpoint before a restart has only the last few commits left to copy.
fn checkpoint_loop(conn: Connection, path: &Path, interval: Duration, sig: &CheckpointSignal) {
    while sig.wait_turn(interval) {
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!(path = %path.display(), error = %e, "passive checkpoint failed");
        }
        sig.generation.fetch_add(1, Ordering::AcqRel);
    }
}

enum Decision {
    Go,
    Mismatch,
    NeedLarge(u64),
}

impl Namespace {
    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// This namespace's name.
    pub fn name(&self) -> &str {
        &self.ns.name
    }

    /// The value of `/family/key`, from memory (large values from the cache or the disk).
    /// A small value costs one hash, one read lock and a reference-count increment: no
    /// allocation and no copy of the value.
    pub fn get(&self, family: &str, key: &str) -> Result<Option<Value>> {
        with_key_path(family, key, |path| self.get_path(path))
    }

    /// The value at a full key path such as `/family/key`.
    pub fn get_path(&self, path: &str) -> Result<Option<Value>> {
        match self.visible(path) {
            Visible::Absent => Ok(None),
            Visible::Value(v) => Ok(Some(v)),
            Visible::Large { seq } => self.load_large(path, seq),
        }
    }

    /// What a reader sees at `path` now (holding the shard lock only for the lookup).
    fn visible(&self, path: &str) -> Visible {
        let k = self.ns.hashed(path);
        let shard = self.ns.read_hashed(&k);
        self.ns.visible_hashed(&shard, &k)
    }

    /// The value of `/family/key` if it can be had without touching the disk: `None` when it is
    /// a large value neither cached nor pending, which only [`Namespace::get`] (which may read
    /// the file) returns. For async code that must not block on IO.
    pub fn try_get(&self, family: &str, key: &str) -> Option<Option<Value>> {
        with_key_path(family, key, |path| match self.visible(path) {
            Visible::Absent => Some(None),
            Visible::Value(v) => Some(Some(v)),
            Visible::Large { seq } => {
                let key: Arc<str> = Arc::from(path);
                self.shared().cache.get(self.ns.id, &key, seq).map(Some)
            }
        })
    }

    fn load_large(&self, path: &str, seq: u64) -> Result<Option<Value>> {
        let shared = self.shared();
        let key: Arc<str> = Arc::from(path);
        if let Some(v) = shared.cache.get(self.ns.id, &key, seq) {
            return Ok(Some(v));
        }
        let v = {
            let conn = shared.reader();
            let mut st = conn
                .prepare_cached(&self.ns.sql.get_large)
                .map_err(|e| read_error(&shared.path, &e))?;
            st.query_row(params![path], |r| Ok(column_bytes(r.get_ref(0)?)))
                .optional()
                .map_err(|e| read_error(&shared.path, &e))?
                .flatten()
                .map(Value::from)
        };
        if let Some(v) = &v {
            let shard = self.ns.read(path);
            if matches!(self.ns.visible(&shard, path), Visible::Large { seq: s } if s == seq) {
                drop(shard);
                shared.cache.insert(self.ns.id, key, seq, v.clone());
            }
        }
        Ok(v)
    }

    /// Whether `/family/key` exists.
    pub fn exists(&self, family: &str, key: &str) -> bool {
        with_key_path(family, key, |path| {
            !matches!(self.visible(path), Visible::Absent)
        })
    }

    /// Sets `/family/key` to `value` with the store's durability.
    pub fn put(&self, family: &str, key: &str, value: impl Into<Value>) -> Result<()> {
        self.put_with(family, key, value, self.shared().options.durability)?
            .wait()
    }

    /// Sets `/family/key` to `value`; the returned [`Commit`] is done when `durability` is met.
    /// Readers see the new value as soon as this returns.
    pub fn put_with(
        &self,
        family: &str,
        key: &str,
        value: impl Into<Value>,
        durability: Durability,
    ) -> Result<Commit> {
        let value = value.into();
        with_key_path(family, key, |path| {
            let (_, commit) = self.submit(path, Some(value), durability, None)?;
            Ok(commit.unwrap_or_else(Commit::ready))
        })
    }

    /// `put_with` for a full key path such as `/family/key`.
    pub fn put_path_with(
        &self,
        path: String,
        value: Value,
        durability: Durability,
    ) -> Result<Commit> {
        let (_, commit) = self.submit(&path, Some(value), durability, None)?;
        Ok(commit.unwrap_or_else(Commit::ready))
    }

    /// Deletes `/family/key`; returns whether it existed.
    pub fn del(&self, family: &str, key: &str) -> Result<bool> {
        let (existed, commit) = self.del_with(family, key, self.shared().options.durability)?;
        commit.wait()?;
        Ok(existed)
    }

    /// Deletes `/family/key`; returns whether it existed and the commit to wait on.
    pub fn del_with(
        &self,
        family: &str,
        key: &str,
        durability: Durability,
    ) -> Result<(bool, Commit)> {
        let (existed, commit) = with_key_path(family, key, |path| {
            self.submit(path, None, durability, None)
        })?;
        Ok((existed, commit.unwrap_or_else(Commit::ready)))
    }

    /// Sets `/family/key` to `new` (or deletes it for `None`) only if its value is `expected`
    /// (`None`: absent). Returns whether it did.
    pub fn compare_and_set(
        &self,
        family: &str,
        key: &str,
        expected: Option<&[u8]>,
        new: Option<Value>,
    ) -> Result<bool> {
        match self.compare_and_set_with(
            family,
            key,
            expected,
            new,
            self.shared().options.durability,
        )? {
            Some(c) => c.wait().map(|()| true),
            None => Ok(false),
        }
    }

    /// `compare_and_set` with a chosen durability: `None` if the value did not match.
    pub fn compare_and_set_with(
        &self,
        family: &str,
        key: &str,
        expected: Option<&[u8]>,
        new: Option<Value>,
        durability: Durability,
    ) -> Result<Option<Commit>> {
        let (_, commit) = with_key_path(family, key, |path| {
            self.submit(path, new, durability, Some(expected))
        })?;
        Ok(commit)
    }

    /// The common write path. Returns whether the key existed before, and the commit (`None`
    /// when a compare-and-set did not match). It allocates the key once and hashes it once.
    fn submit(
        &self,
        path: &str,
        value: Option<Value>,
        durability: Durability,
        expected: Option<Option<&[u8]>>,
    ) -> Result<(bool, Option<Commit>)> {
        let shared = self.shared();
        check_key(path, shared.options.key_bytes_max)?;
        if let Some(v) = &value
            && v.len() > shared.options.value_bytes_max
        {
            return Err(KvError::ValueTooLarge {
                key: path.to_string(),
                len: v.len(),
                max: shared.options.value_bytes_max,
            });
        }
        let bytes = path.len() + value.as_ref().map_or(0, Value::len) + 64;
        let key: Arc<str> = Arc::from(path);
        let hashed = self.ns.hashed(path);
        let inline_max = shared.options.inline_value_bytes_max;
        let mut known_large: Option<(u64, Option<Value>)> = None;
        loop {
            let mut shard = self.ns.write_hashed(&hashed);
            let vis = self.ns.visible_hashed(&shard, &hashed);
            let existed = !matches!(vis, Visible::Absent);
            if let Some(expected) = expected {
                let decision = match &vis {
                    Visible::Absent => {
                        if expected.is_none() {
                            Decision::Go
                        } else {
                            Decision::Mismatch
                        }
                    }
                    Visible::Value(v) => {
                        if expected == Some(v.as_bytes()) {
                            Decision::Go
                        } else {
                            Decision::Mismatch
                        }
                    }
                    Visible::Large { seq } => match &known_large {
                        Some((s, v)) if s == seq => {
                            if expected == v.as_ref().map(Value::as_bytes) {
                                Decision::Go
                            } else {
                                Decision::Mismatch
                            }
                        }
                        _ => Decision::NeedLarge(*seq),
                    },
                };
                match decision {
                    Decision::Go => {}
                    Decision::Mismatch => return Ok((existed, None)),
                    Decision::NeedLarge(seq) => {
                        // Read the large value without holding the shard lock, then retry.
                        drop(shard);
                        known_large = Some((seq, self.load_large(&key, seq)?));
                        continue;
                    }
                }
            } else if value.is_none() && !existed {
                return Ok((false, Some(Commit::ready())));
            }
            let prev_large = match &vis {
                Visible::Large { .. } => true,
                Visible::Value(v) => v.len() > inline_max,
                Visible::Absent => false,
            };
            let op = Op::Set {
                key: key.clone(),
                value: value.clone(),
                prev_large,
            };
            // Pushing under the shard lock keeps the queue's order, for this key, the order in
            // which readers saw the writes.
            match shared.queue.try_push(&self.ns, op, durability, bytes) {
                TryPush::Pushed(seq, commit) => {
                    shard.overlay_insert(&hashed, key, Pending { seq, value });
                    return Ok((existed, Some(commit)));
                }
                TryPush::Closed(reason) => return Err(shared.closed_error(&reason)),
                TryPush::Full => {
                    drop(shard);
                    shared
                        .queue
                        .wait_for_room(bytes, |r| shared.closed_error(r))?;
                }
            }
        }
    }

    /// Deletes the key tree of `family` and `keytree` by whole path segments (`/a/b` takes
    /// `/a/b` and `/a/b/...`, never `/a/bc`); no family (or an empty one) deletes everything in
    /// the namespace, as astdb does. Returns how many keys it deleted.
    pub fn deltree(&self, family: Option<&str>, keytree: Option<&str>) -> Result<usize> {
        let (n, commit) = self.deltree_with(family, keytree, self.shared().options.durability)?;
        commit.wait()?;
        Ok(n)
    }

    /// `deltree` with a chosen durability.
    pub fn deltree_with(
        &self,
        family: Option<&str>,
        keytree: Option<&str>,
        durability: Durability,
    ) -> Result<(usize, Commit)> {
        let shared = self.shared();
        let prefix = tree_prefix(family, keytree);
        if let Some(p) = &prefix {
            check_key(p, shared.options.key_bytes_max)?;
        }
        let res = shared
            .queue
            .reserve(prefix.as_ref().map_or(0, String::len) + 64, |r| {
                shared.closed_error(r)
            })?;
        let shards = self.ns.write_all();
        let mut count = 0;
        for shard in &shards {
            let overlay_only = shard
                .overlay
                .keys()
                .filter(|k| !shard.main.contains_key(k.as_ref()));
            for key in shard.main.keys().chain(overlay_only) {
                if crate::path::covers(prefix.as_deref(), key)
                    && !matches!(self.ns.visible(shard, key), Visible::Absent)
                {
                    count += 1;
                }
            }
        }
        if count == 0 {
            return Ok((0, Commit::ready()));
        }
        let prefix: Option<Arc<str>> = prefix.map(Arc::from);
        let (seq, commit) = res.push(
            &self.ns,
            Op::Tree {
                prefix: prefix.clone(),
            },
            durability,
        );
        self.ns.add_pending_tree(prefix, seq);
        drop(shards);
        Ok((count, commit))
    }

    /// The entries of a key tree (see [`Namespace::deltree`] for which keys), in key order.
    /// Each value is one that was current during the call; the listing is not a snapshot
    /// across concurrent writes.
    pub fn tree(
        &self,
        family: Option<&str>,
        keytree: Option<&str>,
    ) -> Result<Vec<(String, Value)>> {
        let prefix = tree_prefix(family, keytree);
        let items = self.ns.collect_tree(prefix.as_deref());
        let mut out = Vec::with_capacity(items.len());
        for (k, v) in items {
            match v {
                Visible::Absent => {}
                Visible::Value(v) => out.push((k.to_string(), v)),
                Visible::Large { seq } => {
                    if let Some(v) = self.load_large(&k, seq)? {
                        out.push((k.to_string(), v));
                    }
                }
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}
