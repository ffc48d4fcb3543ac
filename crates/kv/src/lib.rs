//! Tandem's durable, astdb-compatible key-value store.
//!
//! Keys are astdb paths, `/family/key` (family and key may themselves contain `/`); values are
//! byte strings (Asterisk stores text). Reads are served from memory and never wait for the disk;
//! writes are made durable by one writer thread that commits everything queued in one SQLite
//! transaction with one fsync (group commit).
//!
//! # Using it
//!
//! ```no_run
//! use kv::{Durability, Options, Store};
//!
//! # fn main() -> kv::Result<()> {
//! let store = Store::open_dir("tandem-data", Options::default())?;
//! store.put("sip", "1001", "sip:1001@192.0.2.10:5060")?; // returns once on disk
//! assert_eq!(store.get("sip", "1001")?.unwrap(), "sip:1001@192.0.2.10:5060");
//! store.put_with("cache", "x", "1", Durability::Async)?; // acknowledged at once
//! for (key, value) in store.tree(Some("sip"), None)? {
//!     println!("{key} : {value}");
//! }
//! store.deltree(Some("sip"), None)?; // whole segments: /sip and /sip/..., never /sipx
//! let billing = store.namespace("billing")?; // a table of its own
//! billing.put("rates", "uk", "0.01")?;
//! # Ok(()) }
//! ```
//!
//! # Operations
//! - [`Namespace::get`], [`Namespace::exists`]: from memory, without allocating (a value is
//!   handed out as a reference-counted [`Value`]). Values over
//!   `inline_value_bytes_max` (4 KiB) are not kept in memory at open; they are read from the
//!   file on request and kept in a cache bounded by `cache_bytes_max`.
//! - [`Namespace::put`], [`Namespace::del`], [`Namespace::deltree`],
//!   [`Namespace::compare_and_set`]: visible to readers at once; acknowledged according to
//!   [`Durability`]. The `_with` variants return a [`Commit`] to wait on (blocking with
//!   [`Commit::wait`] or `.await`), so async code need not block a thread.
//! - [`Namespace::tree`]: a key tree in key order. Tree operations match whole path segments:
//!   `/a/b` covers `/a/b` and `/a/b/c`, never `/a/bc`; no family covers everything.
//! - [`Store::namespace`]: FreePBX-style namespaces, one table each, for Tandem's own modules.
//! - [`Store::import_astdb`], [`Store::export_astdb`]: Asterisk's astdb.sqlite3 format.
//!   [`Store::backup`]: SQLite's online backup while writes go on.
//! - [`ReadOnlyStore`]: reads a store file that another process has open for writing.
//!
//! # Durability
//! - [`Durability::Sync`] (the default): acknowledged once the transaction holding the write is
//!   committed and fsynced (SQLite WAL, `synchronous=FULL`).
//! - [`Durability::Async`]: acknowledged at once; the writer starts committing it within
//!   `flush_interval_ms` (default 10 ms). A crash can lose the async writes acknowledged in the
//!   last `flush_interval_ms` plus the duration of one commit (one fsync of the disk, which a
//!   busy disk can stretch). A clean close commits everything.
//!
//! A failed commit (disk full, read-only file) is reported to each sync caller in it with a
//! [`KvError::Write`] naming the file; the in-memory view drops those writes again, and every
//! write acknowledged before stays on disk.
//!
//! # Format version
//! The file says what it is and which format it holds (`PRAGMA application_id` `TDKV`,
//! `PRAGMA user_version` [`FORMAT_VERSION`]; crate `fileformat`). Opening a file of an older
//! format upgrades it through [`MIGRATIONS`] in one transaction (a crash midway leaves the old
//! format); a file of a newer format, or another kind of file, is refused with
//! [`KvError::Format`] before anything is written to it.
//!
//! # What it never does
//! Readers never take a lock held across IO: the in-memory index is sharded, each shard's lock
//! is held only for map operations, and the writer thread does its IO holding none. Every queue
//! and cache is bounded (`queue_ops_max`, `queue_bytes_max`, `cache_bytes_max`); a writer that
//! finds the queue full waits. One process at a time may open a store for writing (a lock file
//! beside it); others use [`ReadOnlyStore`]. The store's files (the database, its WAL and
//! shared-memory files, the lock, backups and exports) are readable by their owner alone from
//! their first byte: 0600, whatever the umask (the registrar keeps its HA1s and nonce secret
//! here); an older release's wider files are narrowed at open (crate `filemode`).

mod astdb;
mod error;
mod format;
mod index;
mod path;
mod queue;
mod shared;
mod store;
mod value;
mod wal_file;
mod writer;

pub use astdb::{ASTDB_CREATE_SQL, ReadOnlyStore, backup_sqlite_file};
pub use error::{KvError, Result};
pub use format::{FORMAT_VERSION, MIGRATIONS};
pub use path::{DEFAULT_NAMESPACE, covers, key_path, tree_prefix};
pub use queue::{Commit, Durability};
pub use shared::{Options, Stats};
pub use store::{FILE_NAME, Namespace, Store};
pub use value::Value;
