//! The floor `tandem bench collector` measures the collector's whole path against:
//!
//! - [`copy_floor`]: the rows of records into the CDR tables by plain `COPY` (text format)
//!   from a minimal client, in batches and transactions of a given size: no upsert, no id from
//!   the server (each batch numbers its calls from a range of its own), nothing but the rows.
//!   What the database can take at all; the collector's goal is 70% of it.
//! - [`prepare`]: the schema and the partitions the records need, created beforehand, outside
//!   the measurements (a collector creates its days ahead too).
//!
//! The batches go to the writers in turn (a writer takes the next batch when it has committed
//! its last); connections are opened before the clock starts, and the time runs from the
//! first batch to the last commit.

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use crate::pg::{PgLayout, PgOptions, PgStore, pg_error, redact};
use crate::pg_partition::{self, Day};
use crate::seed::{Chunk, Loaded, copy_statements};
use crate::{CdrError, CdrRecord};

/// Records per batch when the caller has no reason to choose: the collector's batches are
/// 500 to 5,000 records.
pub const BATCH_RECORDS_DEFAULT: usize = 5_000;

/// Creates the schema (in `options`' layout, if the database has none) and the partitions of
/// every day `records` name, so that neither measurement pays for them.
pub fn prepare(
    conninfo: &str,
    records: &[CdrRecord],
    options: &PgOptions,
) -> Result<PgLayout, CdrError> {
    let mut store = PgStore::connect_with(conninfo, options)?;
    if store.layout() == PgLayout::Partitioned {
        let mut days = std::collections::BTreeSet::<Day>::new();
        for r in records {
            pg_partition::record_days(r, &mut days);
        }
        store.create_days(days)?;
    }
    Ok(store.layout())
}

/// Runs `batches` on `writers` threads, each with the state `open` gives it (opened before the
/// clock starts), `run` taking the next batch until none is left; the time from the start to
/// the last batch's end.
fn parallel<S>(
    writers: usize,
    batches: &[&[CdrRecord]],
    open: impl Fn() -> Result<S, CdrError> + Sync,
    run: impl Fn(&mut S, usize, &[CdrRecord]) -> Result<(), CdrError> + Sync,
) -> Result<Duration, CdrError> {
    let writers = writers.max(1);
    let next = AtomicUsize::new(0);
    let start = Barrier::new(writers + 1);
    let failed: Mutex<Option<CdrError>> = Mutex::new(None);
    let t0 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|_| {
                scope.spawn(|| {
                    let state = open();
                    start.wait();
                    let mut state = match state {
                        Ok(s) => s,
                        Err(e) => {
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            return;
                        }
                    };
                    loop {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        let Some(batch) = batches.get(b) else { return };
                        if let Err(e) = run(&mut state, b, batch) {
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            // The others stop at their next batch.
                            next.store(batches.len(), Ordering::Relaxed);
                            return;
                        }
                    }
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for h in handles {
            let _ = h.join();
        }
        t0
    });
    let elapsed = t0.elapsed();
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(elapsed),
    }
}

/// The floor: the rows of `records` by `COPY` into the tables as they are (their layout's
/// columns), in batches of `batch_records`, one transaction per batch, from `writers`
/// connections; the time it took. Call ids are numbered past the sequence's value at the
/// start, each batch in a range of its own, and the sequence is moved past them at the end.
/// The records must be new to the database (their uids are not stored yet).
pub fn copy_floor(
    conninfo: &str,
    records: &[CdrRecord],
    writers: usize,
    batch_records: usize,
) -> Result<Duration, CdrError> {
    let target = redact(conninfo);
    let wrap = |e| pg_error(&target, e);
    let batch_records = batch_records.max(1);
    let mut admin = Client::connect(conninfo, NoTls).map_err(wrap)?;
    let layout = match crate::migrate::existing_layout(&mut admin).map_err(wrap)? {
        Some(l) => l,
        None => {
            return Err(CdrError::Schema {
                target: target.clone(),
                problem: "has no CDR tables to copy into; connect a PgStore to it first"
                    .to_string(),
            });
        }
    };
    let base: i64 = admin
        .query_one("SELECT nextval(pg_get_serial_sequence('cdr', 'id'))", &[])
        .map_err(wrap)?
        .get(0);
    let copies = copy_statements(layout);
    let batches: Vec<&[CdrRecord]> = records.chunks(batch_records).collect();
    let elapsed = parallel(
        writers,
        &batches,
        || Client::connect(conninfo, NoTls).map_err(wrap),
        |client, b, batch| {
            let mut next_id = base + (b * batch_records) as i64;
            let mut chunk = Chunk::new(layout);
            let mut loaded = Loaded::default();
            for r in batch {
                chunk.add(r, &mut next_id, &mut loaded);
            }
            let mut tx = client.transaction().map_err(wrap)?;
            for (sql, data) in copies.iter().zip(chunk.tables()) {
                if data.is_empty() {
                    continue;
                }
                let mut w = tx.copy_in(sql.as_str()).map_err(wrap)?;
                w.write_all(data).map_err(|e| CdrError::Data {
                    problem: format!("sending COPY data to {target}: {e}"),
                })?;
                w.finish().map_err(wrap)?;
            }
            tx.commit().map_err(wrap)
        },
    )?;
    admin
        .execute(
            "SELECT setval(pg_get_serial_sequence('cdr', 'id'), $1::bigint)",
            &[&(base + records.len() as i64)],
        )
        .map_err(wrap)?;
    Ok(elapsed)
}
