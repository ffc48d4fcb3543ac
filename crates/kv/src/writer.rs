//! The one writer thread: takes batches from the queue, writes each as one transaction with one
//! fsync (group commit), then publishes the result to the in-memory view and to the callers.

use crate::error::{KvError, write_error};
use crate::index::{MainEntry, Slot};
use crate::queue::{Op, Queued};
use crate::store::Shared;
use crate::value::Text;
use rusqlite::{Connection, params};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub(crate) fn run(shared: Arc<Shared>, mut conn: Connection) {
    let flush = Duration::from_millis(shared.options.flush_interval_ms);
    let batch_max = shared.options.batch_ops_max.max(1);
    while let Some(batch) = shared.queue.take_batch(flush, batch_max) {
        let result = commit(&mut conn, &batch, shared.options.inline_value_bytes_max);
        match result {
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
                publish(&shared, batch);
            }
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                let err = write_error(&shared.path, &e);
                shared.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %err, ops = batch.len(), "key-value store commit failed");
                *shared.last_error.lock() = Some(err.to_string());
                revert(&shared, batch, err);
            }
        }
        maybe_truncate_wal(&shared, &conn);
    }
    // Closed and drained: fold the WAL into the main file so that other tools see one file.
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(path = %shared.path.display(), error = %e, "final checkpoint failed");
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

/// The checkpointer thread keeps the WAL short; if writes never pause long enough for it to
/// catch up, the writer folds the WAL itself once it passes `wal_bytes_max`.
fn maybe_truncate_wal(shared: &Shared, conn: &Connection) {
    let wal = shared.wal_path();
    let Ok(meta) = std::fs::metadata(&wal) else {
        return;
    };
    if meta.len() <= shared.options.wal_bytes_max {
        return;
    }
    tracing::warn!(
        path = %wal.display(),
        bytes = meta.len(),
        "write-ahead log over wal_bytes_max; checkpointing in the writer (writes wait)"
    );
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(path = %wal.display(), error = %e, "checkpoint failed");
    }
}
