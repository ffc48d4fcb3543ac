//! The one writer thread: takes batches from the queue, writes each as one transaction with one
//! fsync (group commit), then publishes the result to the in-memory view and to the callers.

use crate::error::{KvError, write_error};
use crate::index::{MainEntry, Slot};
use crate::queue::{Op, Queued};
use crate::shared::Shared;
use crate::value::Text;
use rusqlite::{Connection, params};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

/// Batches up to this many operations are published by the writer itself when it can.
const INLINE_PUBLISH_OPS_MAX: usize = 32;

pub(crate) fn run(shared: Arc<Shared>, mut conn: Connection) {
    let wal = WalWatch::new(&shared, &mut conn);
    // Publishing a batch (updating the in-memory view, waking its callers) runs on a second
    // thread, in batch order, so that the writer starts the next transaction at once.
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<Queued>, Option<KvError>)>(2);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let publisher = {
        let shared = shared.clone();
        let in_flight = in_flight.clone();
        std::thread::Builder::new()
            .name("kv-publish".into())
            .spawn(move || {
                for (batch, err) in rx {
                    finish(&shared, batch, err);
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                }
            })
    };
    let (tx, publisher) = match publisher {
        Ok(h) => (Some(tx), Some(h)),
        Err(e) => {
            tracing::warn!(error = %e, "no publisher thread; the writer publishes itself");
            (None, None)
        }
    };
    while let Some(batch) = shared.queue.take_batch() {
        let started = std::time::Instant::now();
        let oldest = batch.first().map(|q| q.at);
        let result = commit(&mut conn, &batch, shared.options.inline_value_bytes_max);
        let took = started.elapsed();
        if took > Duration::from_millis(20) {
            tracing::debug!(
                ops = batch.len(),
                commit_ms = took.as_millis() as u64,
                queued_ms = oldest.map_or(0, |t| (started - t).as_millis() as u64),
                "slow commit"
            );
        }
        let err = match result {
            Ok(()) => {
                shared.stats.commits.fetch_add(1, Ordering::Relaxed);
                shared
                    .stats
                    .committed_ops
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                shared
                    .stats
                    .largest_batch_ops
                    .fetch_max(batch.len() as u64, Ordering::Relaxed);
                None
            }
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                let err = write_error(&shared.path, &e);
                shared.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %err, ops = batch.len(), "key-value store commit failed");
                *shared.last_error.lock() = Some(err.clone());
                Some(err)
            }
        };
        // A small batch is published here when the publisher is idle (so batches still finish
        // in order): its callers wake one thread hop sooner.
        let inline =
            batch.len() <= INLINE_PUBLISH_OPS_MAX && in_flight.load(Ordering::Acquire) == 0;
        match &tx {
            Some(tx) if !inline => {
                in_flight.fetch_add(1, Ordering::AcqRel);
                if let Err(std::sync::mpsc::SendError((batch, err))) = tx.send((batch, err)) {
                    in_flight.fetch_sub(1, Ordering::AcqRel);
                    finish(&shared, batch, err);
                }
            }
            _ => finish(&shared, batch, err),
        }
        wal.after_commit(&shared, &conn);
    }
    drop(tx);
    if let Some(h) = publisher {
        let _ = h.join();
    }
    // Closed and drained: fold the WAL into the main file so that other tools see one file.
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(path = %shared.path.display(), error = %e, "final checkpoint failed");
    }
}

fn finish(shared: &Shared, batch: Vec<Queued>, err: Option<KvError>) {
    match err {
        None => publish(shared, batch),
        Some(e) => revert(shared, batch, e),
    }
}

fn commit(conn: &mut Connection, batch: &[Queued], inline_max: usize) -> rusqlite::Result<()> {
    if batch.iter().all(|q| matches!(q.op, Op::Barrier)) {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    for q in batch {
        let sql = &q.ns.sql;
        match &q.op {
            Op::Set {
                key,
                value: Some(v),
                prev_large,
            } => {
                if v.len() > inline_max {
                    conn.prepare_cached(&sql.put_large_main)?
                        .execute(params![key.as_ref(), v.len() as i64])?;
                    conn.prepare_cached(&sql.put_large_data)?
                        .execute(params![key.as_ref(), Text(v.as_bytes())])?;
                } else {
                    conn.prepare_cached(&sql.put_small)?.execute(params![
                        key.as_ref(),
                        Text(v.as_bytes()),
                        v.len() as i64
                    ])?;
                    if *prev_large {
                        conn.prepare_cached(&sql.del_large)?
                            .execute(params![key.as_ref()])?;
                    }
                }
            }
            Op::Set {
                key,
                value: None,
                prev_large,
            } => {
                conn.prepare_cached(&sql.del_main)?
                    .execute(params![key.as_ref()])?;
                if *prev_large {
                    conn.prepare_cached(&sql.del_large)?
                        .execute(params![key.as_ref()])?;
                }
            }
            Op::Tree { prefix: Some(p) } => {
                conn.prepare_cached(&sql.tree_main)?
                    .execute(params![p.as_ref()])?;
                conn.prepare_cached(&sql.tree_large)?
                    .execute(params![p.as_ref()])?;
            }
            Op::Tree { prefix: None } => {
                conn.prepare_cached(&sql.clear_main)?.execute([])?;
                conn.prepare_cached(&sql.clear_large)?.execute([])?;
            }
            Op::CreateNamespace => {
                conn.execute_batch(&sql.create)?;
                conn.prepare_cached("INSERT OR IGNORE INTO kv_namespaces (name) VALUES (?1)")?
                    .execute(params![q.ns.name])?;
            }
            Op::Barrier => {}
        }
    }
    conn.execute_batch("COMMIT")
}

/// After a successful commit: move each write from the overlay into the committed view, in
/// order, then wake its caller.
fn publish(shared: &Shared, batch: Vec<Queued>) {
    let inline_max = shared.options.inline_value_bytes_max;
    for q in batch {
        let ns = &q.ns;
        match q.op {
            Op::Set { key, value, .. } => {
                let mut shard = ns.write(&key);
                if shard.overlay.get(&key).is_some_and(|p| p.seq == q.seq) {
                    shard.overlay.remove(&key);
                }
                match value {
                    Some(v) if v.len() > inline_max => {
                        shard.main.insert(
                            key.clone(),
                            MainEntry {
                                slot: Slot::Large {
                                    len: v.len() as u64,
                                },
                                seq: q.seq,
                            },
                        );
                        drop(shard);
                        shared.cache.insert(ns.id, key, q.seq, v);
                    }
                    Some(v) => {
                        let was_large = matches!(
                            shard.main.insert(
                                key.clone(),
                                MainEntry {
                                    slot: Slot::Small(v),
                                    seq: q.seq,
                                },
                            ),
                            Some(MainEntry {
                                slot: Slot::Large { .. },
                                ..
                            })
                        );
                        drop(shard);
                        if was_large {
                            shared.cache.remove(ns.id, &key);
                        }
                    }
                    None => {
                        let old = shard.main.remove(&key);
                        drop(shard);
                        if matches!(
                            old,
                            Some(MainEntry {
                                slot: Slot::Large { .. },
                                ..
                            })
                        ) {
                            shared.cache.remove(ns.id, &key);
                        }
                    }
                }
            }
            Op::Tree { prefix } => {
                let mut shards = ns.write_all();
                for s in shards.iter_mut() {
                    s.main
                        .retain(|k, _| !crate::path::covers(prefix.as_deref(), k));
                }
                ns.remove_pending_tree(q.seq);
                drop(shards);
                shared.cache.remove_tree(ns.id, prefix.as_deref());
            }
            Op::CreateNamespace | Op::Barrier => {}
        }
        if let Some(done) = q.done {
            done.complete(Ok(()));
        }
    }
}

/// After a failed commit: withdraw each write from the overlay (the disk, and `main`, keep the
/// state before it), then report the error to its caller.
fn revert(shared: &Shared, batch: Vec<Queued>, err: KvError) {
    for q in batch {
        match &q.op {
            Op::Set { key, .. } => {
                let mut shard = q.ns.write(key);
                if shard.overlay.get(key).is_some_and(|p| p.seq == q.seq) {
                    shard.overlay.remove(key);
                }
            }
            Op::Tree { .. } => {
                let shards = q.ns.write_all();
                q.ns.remove_pending_tree(q.seq);
                drop(shards);
            }
            Op::CreateNamespace => {
                shared.namespaces.write().remove(&q.ns.name);
            }
            Op::Barrier => {}
        }
        if let Some(done) = q.done {
            done.complete(Err(err.clone()));
        }
    }
}

/// Watches the WAL's length (SQLite reports it after each commit) and restarts the WAL once it
/// passes `wal_restart_bytes` (see `Options::wal_restart_bytes`).
struct WalWatch {
    pages: Arc<AtomicI64>,
    restart_pages: i64,
    /// The background checkpointer's generation when the writer asked it to run this cycle.
    kicked_at: Cell<Option<u64>>,
    last_pages: Cell<i64>,
    last_attempt: Cell<i64>,
}

impl WalWatch {
    fn new(shared: &Shared, conn: &mut Connection) -> WalWatch {
        let pages = Arc::new(AtomicI64::new(0));
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap_or(4096)
            .max(512);
        let p = pages.clone();
        if let Err(e) = conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, n: i32| {
            p.store(i64::from(n), Ordering::Relaxed);
            Ok(())
        })) {
            tracing::warn!(error = %e, "cannot watch the WAL length; it is checkpointed in the background only");
        }
        WalWatch {
            pages,
            restart_pages: (shared.options.wal_restart_bytes as i64 / page_size).max(64),
            kicked_at: Cell::new(None),
            last_pages: Cell::new(0),
            last_attempt: Cell::new(0),
        }
    }

    fn after_commit(&self, shared: &Shared, conn: &Connection) {
        let pages = self.pages.load(Ordering::Relaxed);
        if pages < self.last_pages.get() {
            // The WAL restarted: a new cycle.
            self.kicked_at.set(None);
            self.last_attempt.set(0);
        }
        self.last_pages.set(pages);
        if self.kicked_at.get().is_none() && pages >= self.restart_pages / 4 {
            self.kicked_at
                .set(Some(shared.ckpt.generation.load(Ordering::Acquire)));
            shared.ckpt.kick();
        }
        if pages < self.restart_pages / 2 {
            return;
        }
        let background_done = self
            .kicked_at
            .get()
            .is_some_and(|g| shared.ckpt.generation.load(Ordering::Acquire) > g);
        // Past half the length, restart as soon as the background copy is done (little is left
        // to copy here); at the full length, restart whatever it costs, because a WAL that grows
        // past its file's size makes every commit's fsync journal the new size. Retry only after
        // more growth if a reader kept a restart from happening.
        if !background_done && pages < self.restart_pages {
            return;
        }
        if self.last_attempt.get() > 0 && pages < self.last_attempt.get() + self.restart_pages / 8 {
            return;
        }
        self.last_attempt.set(pages);
        let t = std::time::Instant::now();
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        }) {
            Ok((log, done)) => tracing::debug!(
                path = %shared.path.display(),
                log, done, ms = t.elapsed().as_millis() as u64,
                "writer checkpoint to restart the WAL"
            ),
            Err(e) => {
                tracing::warn!(path = %shared.path.display(), error = %e, "checkpoint failed")
            }
        }
    }
}
