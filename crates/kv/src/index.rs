//! The in-memory view of one namespace.
//!
//! Each key hashes to one of `shards` shards, each behind its own reader-writer lock, held only
//! for map operations (never across IO). A key is hashed once per operation: the same hash
//! (foldhash, seeded at random per namespace) picks the shard and finds the key in the shard's
//! maps, so a lookup costs one short hash, one uncontended read lock and a reference-count
//! increment, and allocates nothing. A shard has two maps:
//! - `main`: what is committed on disk. Small values are here; large values only as their length.
//! - `overlay`: writes queued but not yet committed (the newest per key), so that readers see
//!   their own and others' writes at once. The writer moves an entry from `overlay` to `main`
//!   after its commit, or drops it if the commit failed (then `main`, the disk, shows through).
//!
//! Tree deletions not yet committed are kept in `pending_trees`; they hide every `main` entry
//! they cover (everything in `main` is older than anything queued) and every overlay entry
//! older than themselves. Adding or removing one takes every shard's write lock, so a reader
//! holding one shard lock sees a stable list.

use crate::path::covers;
use crate::value::Value;
use hashbrown::DefaultHashBuilder;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) enum Slot {
    Small(Value),
    Large { len: u64 },
}

pub(crate) struct MainEntry {
    pub slot: Slot,
    pub seq: u64,
}

pub(crate) struct Pending {
    pub seq: u64,
    pub value: Option<Value>,
}

/// A map of one shard; its hasher is the namespace's, so a key's hash is computed once.
pub(crate) type KeyMap<V> = hashbrown::HashMap<Arc<str>, V, DefaultHashBuilder>;

pub(crate) struct Shard {
    pub main: KeyMap<MainEntry>,
    pub overlay: KeyMap<Pending>,
}

impl Shard {
    fn new(hasher: &DefaultHashBuilder) -> Self {
        Shard {
            main: KeyMap::with_hasher(hasher.clone()),
            overlay: KeyMap::with_hasher(hasher.clone()),
        }
    }

    /// The pending write of a hashed key, if any.
    pub fn overlay_get(&self, k: &Hashed<'_>) -> Option<&Pending> {
        self.overlay
            .raw_entry()
            .from_key_hashed_nocheck(k.hash, k.key)
            .map(|(_, p)| p)
    }

    /// The committed entry of a hashed key, if any.
    pub fn main_get(&self, k: &Hashed<'_>) -> Option<&MainEntry> {
        self.main
            .raw_entry()
            .from_key_hashed_nocheck(k.hash, k.key)
            .map(|(_, e)| e)
    }

    /// Records `key`'s newest pending write (`k` is the same key, hashed).
    pub fn overlay_insert(&mut self, k: &Hashed<'_>, key: Arc<str>, pending: Pending) {
        match self
            .overlay
            .raw_entry_mut()
            .from_key_hashed_nocheck(k.hash, k.key)
        {
            hashbrown::hash_map::RawEntryMut::Occupied(mut o) => {
                o.insert(pending);
            }
            hashbrown::hash_map::RawEntryMut::Vacant(v) => {
                v.insert_hashed_nocheck(k.hash, key, pending);
            }
        }
    }
}

/// A key with its hash under its namespace's hasher.
pub(crate) struct Hashed<'a> {
    pub key: &'a str,
    hash: u64,
}

/// What a reader sees for one key.
pub(crate) enum Visible {
    Absent,
    Value(Value),
    /// Committed and only on disk; `seq` identifies the version for the cache.
    Large {
        seq: u64,
    },
}

pub(crate) struct NsIndex {
    pub id: usize,
    pub name: String,
    pub sql: NsSql,
    shards: Box<[RwLock<Shard>]>,
    hasher: DefaultHashBuilder,
    pending_trees: RwLock<Vec<(Option<Arc<str>>, u64)>>,
    pending_trees_n: AtomicUsize,
}

/// The SQL of one namespace, built once (table names cannot be bound as parameters).
pub(crate) struct NsSql {
    pub main: String,
    pub create: String,
    pub load: String,
    pub put_small: String,
    pub put_large_main: String,
    pub put_large_data: String,
    pub del_main: String,
    pub del_large: String,
    pub tree_main: String,
    pub tree_large: String,
    pub clear_main: String,
    pub clear_large: String,
    pub get_large: String,
    pub get_any: String,
    pub list_all: String,
    pub list_tree: String,
    pub sweep_orphans: String,
}

impl NsSql {
    pub fn new(name: &str) -> Self {
        let main = format!("kv_{name}");
        let large = format!("kv_{name}_large");
        // Tree ranges: keys under P are exactly those >= P || '/' and < P || '0' ('0' follows '/'
        // in byte order), so the primary key index serves them.
        let range = "key = ?1 OR (key >= ?1 || '/' AND key < ?1 || '0')";
        let select = format!(
            "SELECT m.key, coalesce(m.value, l.value) FROM \"{main}\" m \
             LEFT JOIN \"{large}\" l ON m.value IS NULL AND l.key = m.key"
        );
        NsSql {
            create: format!(
                "CREATE TABLE IF NOT EXISTS \"{main}\" (key TEXT PRIMARY KEY NOT NULL, value TEXT, \
                 size INTEGER NOT NULL) WITHOUT ROWID;\n\
                 CREATE TABLE IF NOT EXISTS \"{large}\" (key TEXT PRIMARY KEY NOT NULL, \
                 value TEXT NOT NULL);"
            ),
            load: format!("SELECT key, value, size FROM \"{main}\""),
            put_small: format!(
                "INSERT INTO \"{main}\" (key, value, size) VALUES (?1, ?2, ?3) ON CONFLICT(key) \
                 DO UPDATE SET value = excluded.value, size = excluded.size"
            ),
            put_large_main: format!(
                "INSERT INTO \"{main}\" (key, value, size) VALUES (?1, NULL, ?2) ON CONFLICT(key) \
                 DO UPDATE SET value = NULL, size = excluded.size"
            ),
            put_large_data: format!(
                "INSERT INTO \"{large}\" (key, value) VALUES (?1, ?2) ON CONFLICT(key) \
                 DO UPDATE SET value = excluded.value"
            ),
            del_main: format!("DELETE FROM \"{main}\" WHERE key = ?1"),
            del_large: format!("DELETE FROM \"{large}\" WHERE key = ?1"),
            tree_main: format!("DELETE FROM \"{main}\" WHERE {range}"),
            tree_large: format!("DELETE FROM \"{large}\" WHERE {range}"),
            clear_main: format!("DELETE FROM \"{main}\""),
            clear_large: format!("DELETE FROM \"{large}\""),
            get_large: format!("SELECT value FROM \"{large}\" WHERE key = ?1"),
            get_any: format!("{select} WHERE m.key = ?1"),
            list_all: format!("{select} ORDER BY m.key"),
            list_tree: format!(
                "{select} WHERE m.key = ?1 OR (m.key >= ?1 || '/' AND m.key < ?1 || '0') \
                 ORDER BY m.key"
            ),
            sweep_orphans: format!(
                "DELETE FROM \"{large}\" WHERE key NOT IN \
                 (SELECT key FROM \"{main}\" WHERE value IS NULL)"
            ),
            main,
        }
    }
}

impl NsIndex {
    pub fn new(id: usize, name: &str, shards: usize) -> Self {
        let shards = shards.clamp(1, 4096);
        let hasher = DefaultHashBuilder::default();
        NsIndex {
            id,
            name: name.to_string(),
            sql: NsSql::new(name),
            shards: (0..shards)
                .map(|_| RwLock::new(Shard::new(&hasher)))
                .collect(),
            hasher,
            pending_trees: RwLock::new(Vec::new()),
            pending_trees_n: AtomicUsize::new(0),
        }
    }

    /// `key` with its hash, for the `_hashed` methods.
    pub fn hashed<'a>(&self, key: &'a str) -> Hashed<'a> {
        Hashed {
            key,
            hash: self.hasher.hash_one(key),
        }
    }

    /// The shard of a hash. It takes bits 32 to 47, which the shard's own map uses neither for
    /// its bucket index (low bits) nor for its tag (top 7 bits), so that the keys of one shard
    /// still spread over all of its buckets.
    fn shard_of(&self, hash: u64) -> usize {
        ((hash >> 32) & 0xffff) as usize % self.shards.len()
    }

    pub fn read(&self, key: &str) -> RwLockReadGuard<'_, Shard> {
        self.read_hashed(&self.hashed(key))
    }

    pub fn read_hashed(&self, k: &Hashed<'_>) -> RwLockReadGuard<'_, Shard> {
        self.shards[self.shard_of(k.hash)].read()
    }

    pub fn write(&self, key: &str) -> RwLockWriteGuard<'_, Shard> {
        self.write_hashed(&self.hashed(key))
    }

    pub fn write_hashed(&self, k: &Hashed<'_>) -> RwLockWriteGuard<'_, Shard> {
        self.shards[self.shard_of(k.hash)].write()
    }

    pub fn write_all(&self) -> Vec<RwLockWriteGuard<'_, Shard>> {
        self.shards.iter().map(|s| s.write()).collect()
    }

    /// The newest pending tree deletion covering `key` (0 if none). Call with a shard lock held.
    fn tree_seq(&self, key: &str) -> u64 {
        if self.pending_trees_n.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.pending_trees
            .read()
            .iter()
            .filter(|(p, _)| covers(p.as_deref(), key))
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(0)
    }

    /// What a reader sees for `key`, given its shard.
    pub fn visible(&self, shard: &Shard, key: &str) -> Visible {
        self.visible_hashed(shard, &self.hashed(key))
    }

    /// What a reader sees for a hashed key, given its shard.
    pub fn visible_hashed(&self, shard: &Shard, k: &Hashed<'_>) -> Visible {
        let tree = self.tree_seq(k.key);
        if let Some(p) = shard.overlay_get(k)
            && p.seq > tree
        {
            return match &p.value {
                Some(v) => Visible::Value(v.clone()),
                None => Visible::Absent,
            };
        }
        if tree > 0 {
            return Visible::Absent;
        }
        match shard.main_get(k) {
            None => Visible::Absent,
            Some(MainEntry {
                slot: Slot::Small(v),
                ..
            }) => Visible::Value(v.clone()),
            Some(MainEntry {
                slot: Slot::Large { .. },
                seq,
            }) => Visible::Large { seq: *seq },
        }
    }

    /// Records a pending tree deletion. Call with every shard's write lock held.
    pub fn add_pending_tree(&self, prefix: Option<Arc<str>>, seq: u64) {
        self.pending_trees.write().push((prefix, seq));
        self.pending_trees_n.fetch_add(1, Ordering::Release);
    }

    /// Removes a pending tree deletion. Call with every shard's write lock held.
    pub fn remove_pending_tree(&self, seq: u64) {
        let mut t = self.pending_trees.write();
        let before = t.len();
        t.retain(|(_, s)| *s != seq);
        let removed = before - t.len();
        self.pending_trees_n.fetch_sub(removed, Ordering::Release);
    }

    /// Keys visible under `prefix` with what a reader sees, unsorted. Takes each shard's read
    /// lock in turn (not a snapshot across shards).
    pub fn collect_tree(&self, prefix: Option<&str>) -> Vec<(Arc<str>, Visible)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.read();
            let overlay_only = shard
                .overlay
                .keys()
                .filter(|k| !shard.main.contains_key(k.as_ref()));
            for key in shard.main.keys().chain(overlay_only) {
                if !covers(prefix, key) {
                    continue;
                }
                let v = self.visible(&shard, key);
                if !matches!(v, Visible::Absent) {
                    out.push((key.clone(), v));
                }
            }
        }
        out
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn shard_at(&self, i: usize) -> RwLockReadGuard<'_, Shard> {
        self.shards[i].read()
    }
}

/// A bounded cache of large values read from disk (or just written), shared by all namespaces.
/// Least recently used entries leave first once `cache_bytes_max` is exceeded.
pub(crate) struct LargeCache {
    inner: Mutex<CacheInner>,
    pub bytes_max: usize,
}

struct CacheInner {
    map: HashMap<(usize, Arc<str>), (u64, Value, u64)>,
    order: BTreeMap<u64, (usize, Arc<str>)>,
    bytes: usize,
    tick: u64,
}

impl LargeCache {
    pub fn new(bytes_max: usize) -> Self {
        LargeCache {
            inner: Mutex::new(CacheInner {
                map: HashMap::new(),
                order: BTreeMap::new(),
                bytes: 0,
                tick: 0,
            }),
            bytes_max,
        }
    }

    pub fn get(&self, ns: usize, key: &Arc<str>, seq: u64) -> Option<Value> {
        let mut c = self.inner.lock();
        c.tick += 1;
        let tick = c.tick;
        let k = (ns, key.clone());
        let (old_tick, v) = match c.map.get_mut(&k) {
            Some((s, v, t)) if *s == seq => {
                let old = *t;
                *t = tick;
                (old, v.clone())
            }
            _ => return None,
        };
        c.order.remove(&old_tick);
        c.order.insert(tick, k);
        Some(v)
    }

    pub fn insert(&self, ns: usize, key: Arc<str>, seq: u64, value: Value) {
        if value.len() > self.bytes_max {
            return;
        }
        let mut c = self.inner.lock();
        c.tick += 1;
        let tick = c.tick;
        let k = (ns, key);
        if let Some((_, old, t)) = c.map.remove(&k) {
            c.bytes -= old.len();
            c.order.remove(&t);
        }
        c.bytes += value.len();
        c.map.insert(k.clone(), (seq, value, tick));
        c.order.insert(tick, k);
        while c.bytes > self.bytes_max {
            let Some((_, victim)) = c.order.pop_first() else {
                break;
            };
            if let Some((_, v, _)) = c.map.remove(&victim) {
                c.bytes -= v.len();
            }
        }
    }

    pub fn remove(&self, ns: usize, key: &Arc<str>) {
        let mut c = self.inner.lock();
        if let Some((_, v, t)) = c.map.remove(&(ns, key.clone())) {
            c.bytes -= v.len();
            c.order.remove(&t);
        }
    }

    pub fn remove_tree(&self, ns: usize, prefix: Option<&str>) {
        let mut c = self.inner.lock();
        let victims: Vec<(usize, Arc<str>)> = c
            .map
            .keys()
            .filter(|(n, k)| *n == ns && covers(prefix, k))
            .cloned()
            .collect();
        for k in victims {
            if let Some((_, v, t)) = c.map.remove(&k) {
                c.bytes -= v.len();
                c.order.remove(&t);
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}
