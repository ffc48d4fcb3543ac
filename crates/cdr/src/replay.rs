//! Stored records read back in time order, for a dry run of alert rules (`tandem alerts test`):
//! [`records_between`] yields every call (with its streams and T.38 flows) whose start, and
//! every registration whose first message, lies in `[from_us, to_us)`, merged in start-time
//! order (a call before a registration of the same microsecond), on either backend.
//!
//! Read in bounded batches: each kind by keyset on (start, id) through its time index
//! (`cdr (start_us)`, `registration (first_us)`, the latter from [`crate::alerts`]'s schema),
//! [`REPLAY_BATCH_ROWS`] rows a statement, never OFFSET; a call batch's streams and flows in
//! one statement each (in the partitioned layout bounded to the batch's days). Memory holds at
//! most a batch of each kind, whatever the range.
//!
//! Each record is as stored: its `uid` (`#<id>` for a row stored without one, as the calls and
//! registrations pages name it) and its `sensor`. Streams without a call are not replayed
//! (no rule reads them).

use std::collections::VecDeque;

use crate::plan::{Cols, Exec, Sql};
use crate::registration::{REG_COLUMNS, registration_from};
use crate::search::{STREAM_READ_COLUMNS, call_from, stream_from, t38_from};
use crate::{CALL_COLUMNS, CdrError, CdrRecord, PgStore, SqliteStore, T38_COLUMNS};

/// Rows of one kind read by one statement.
pub const REPLAY_BATCH_ROWS: usize = 1_000;

/// What [`records_between`] reads; implemented by [`SqliteStore`] and [`PgStore`] (and given by
/// a `dyn CdrStore` through [`crate::CdrStore::replay_source`]).
pub trait ReplaySource {
    /// Up to `limit` records of `kind` whose start is in `[after.0, to_us)` and after the
    /// position `after` = (start, id), in (start, id) order.
    fn replay_batch(
        &mut self,
        kind: ReplayKind,
        after: (i64, i64),
        to_us: i64,
        limit: usize,
    ) -> Result<Vec<ReplayRow>, CdrError>;
}

/// A record read back, with its place in the replay's order.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayRow {
    /// The call's start, or the registration's first message.
    pub start_us: i64,
    /// The row's id in its table.
    pub id: i64,
    pub record: CdrRecord,
}

/// The records a replay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReplayKind {
    Call,
    Registration,
}

/// Both backends read through their [`Exec`].
macro_rules! replay_via_exec {
    ($($t:ty),*) => {$(
        impl ReplaySource for $t {
            fn replay_batch(
                &mut self,
                kind: ReplayKind,
                after: (i64, i64),
                to_us: i64,
                limit: usize,
            ) -> Result<Vec<ReplayRow>, CdrError> {
                batch(self, kind, after, to_us, limit)
            }
        }
    )*};
}

replay_via_exec!(SqliteStore, PgStore);

/// Every stored call and registration starting in `[from_us, to_us)`, in start-time order,
/// read [`REPLAY_BATCH_ROWS`] at a time. An error ends the iteration after it is yielded.
pub fn records_between<S: ReplaySource + ?Sized>(
    store: &mut S,
    from_us: i64,
    to_us: i64,
) -> Records<'_, S> {
    records_between_batched(store, from_us, to_us, REPLAY_BATCH_ROWS)
}

/// [`records_between`] with `batch_rows` rows a statement (at least 1).
pub fn records_between_batched<S: ReplaySource + ?Sized>(
    store: &mut S,
    from_us: i64,
    to_us: i64,
    batch_rows: usize,
) -> Records<'_, S> {
    let lane = |kind| Lane {
        kind,
        after: (from_us, i64::MIN),
        rows: VecDeque::new(),
        done: from_us >= to_us,
    };
    Records {
        store,
        to_us,
        batch_rows: batch_rows.max(1),
        lanes: [lane(ReplayKind::Call), lane(ReplayKind::Registration)],
        failed: false,
    }
}

/// One kind's rows read and not yet yielded, and where the next batch starts.
struct Lane {
    kind: ReplayKind,
    after: (i64, i64),
    rows: VecDeque<ReplayRow>,
    /// The last batch was short: nothing more of this kind.
    done: bool,
}

/// The iterator of [`records_between`].
pub struct Records<'a, S: ReplaySource + ?Sized> {
    store: &'a mut S,
    to_us: i64,
    batch_rows: usize,
    lanes: [Lane; 2],
    failed: bool,
}

impl<S: ReplaySource + ?Sized> Iterator for Records<'_, S> {
    type Item = Result<CdrRecord, CdrError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        for lane in &mut self.lanes {
            if lane.rows.is_empty() && !lane.done {
                match self
                    .store
                    .replay_batch(lane.kind, lane.after, self.to_us, self.batch_rows)
                {
                    Ok(rows) => {
                        lane.done = rows.len() < self.batch_rows;
                        if let Some(last) = rows.last() {
                            lane.after = (last.start_us, last.id);
                        }
                        lane.rows.extend(rows);
                    }
                    Err(e) => {
                        self.failed = true;
                        return Some(Err(e));
                    }
                }
            }
        }
        // The earliest head; a call before a registration of the same time.
        let lane = self
            .lanes
            .iter_mut()
            .filter(|l| !l.rows.is_empty())
            .min_by_key(|l| (l.rows[0].start_us, l.kind, l.rows[0].id))?;
        lane.rows.pop_front().map(|r| Ok(r.record))
    }
}

/// One batch of either kind on either backend.
fn batch(
    x: &mut dyn Exec,
    kind: ReplayKind,
    after: (i64, i64),
    to_us: i64,
    limit: usize,
) -> Result<Vec<ReplayRow>, CdrError> {
    let (table, time, cols) = match kind {
        ReplayKind::Call => ("cdr", "start_us", format!("id, uid, {CALL_COLUMNS}")),
        ReplayKind::Registration => (
            "registration",
            "first_us",
            format!("id, uid, {REG_COLUMNS}"),
        ),
    };
    let mut s = Sql::new(x.dialect());
    let (t, id, to, n) = (
        s.int(after.0),
        s.int(after.1),
        s.int(to_us),
        s.int(limit as i64),
    );
    // `time >= t` first, so that both planners range over the time index.
    s.text = format!(
        "SELECT {cols} FROM {table} WHERE {time} >= {t} AND ({time} > {t} OR id > {id}) \
         AND {time} < {to} ORDER BY {time}, id LIMIT {n}"
    );
    let mut out = Vec::new();
    for row in x.rows(&s)? {
        let mut c = Cols::new(row);
        let id = c.i64()?;
        let uid = c.opt_text()?.unwrap_or_else(|| format!("#{id}"));
        let rec = match kind {
            ReplayKind::Call => CdrRecord {
                uid,
                ..CdrRecord::call(call_from(&mut c)?, Vec::new())
            },
            ReplayKind::Registration => CdrRecord {
                uid,
                ..CdrRecord::registration(registration_from(&mut c)?)
            },
        };
        let start_us = match (&rec.call, &rec.registration) {
            (Some(call), _) => call.start_us,
            (_, Some(reg)) => reg.first_us,
            _ => unreachable!("a call or a registration"),
        };
        out.push(ReplayRow {
            start_us,
            id,
            record: rec,
        });
    }
    if kind == ReplayKind::Call {
        attach_media(x, &mut out)?;
    }
    Ok(out)
}

/// The streams and T.38 flows of a batch of calls, one statement each, in stored order.
fn attach_media(x: &mut dyn Exec, calls: &mut [ReplayRow]) -> Result<(), CdrError> {
    let (Some(first), Some(last)) = (calls.first(), calls.last()) else {
        return Ok(());
    };
    let (from, to) = (first.start_us, last.start_us);
    let index: std::collections::HashMap<i64, usize> =
        calls.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    for table in ["cdr_rtp", "cdr_t38"] {
        let mut s = Sql::new(x.dialect());
        let ids: Vec<String> = calls.iter().map(|r| s.int(r.id)).collect();
        // Partitioned: the batch's days only.
        let days = if x.partitioned() {
            let (a, b) = (s.int(from), s.int(to));
            format!(" AND call_start_us BETWEEN {a} AND {b}")
        } else {
            String::new()
        };
        let cols = if table == "cdr_rtp" {
            STREAM_READ_COLUMNS
        } else {
            T38_COLUMNS
        };
        s.text = format!(
            "SELECT cdr_id, {cols} FROM {table} WHERE cdr_id IN ({}){days} ORDER BY cdr_id, id",
            ids.join(", ")
        );
        for row in x.rows(&s)? {
            let mut c = Cols::new(row);
            let Some(&i) = index.get(&c.i64()?) else {
                continue;
            };
            let rec = &mut calls[i].record;
            if table == "cdr_rtp" {
                rec.streams.push(stream_from(&mut c)?);
            } else {
                rec.t38.push(t38_from(&mut c)?);
            }
        }
    }
    Ok(())
}
