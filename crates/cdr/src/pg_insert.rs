//! The PostgreSQL batch insert ([`crate::CdrStore::insert_records`]): a batch of any size in one
//! transaction and a fixed number of round trips:
//!
//! 1. `nextval` of `cdr`'s sequence once per call of the batch (one statement): each call's
//!    row id is chosen before it is written, in the batch's order.
//! 2. Per table (calls, streams, T.38 flows, registrations), one statement for every row of
//!    the batch: a binary `COPY` when the records are new, an `INSERT ... SELECT
//!    unnest($1::bigint[]), unnest($2::text[]), ... ON CONFLICT ...` when they may have been
//!    stored before. Both send every value in PostgreSQL's binary form: no text to parse, no
//!    temporary table to write and read back. `COPY` also lets PostgreSQL write many rows of a
//!    partition at once (one WAL record per page rather than per row); measured with `tandem
//!    bench collector`, it took the server's CPU per CDR from 34 to 31 µs, the same as a text
//!    `COPY` of pre-rendered rows.
//!
//! Exactly once: a record is known by its `uid` (with its partition key in the partitioned
//! layout), and storing it again updates its rows in place and replaces its streams. Two
//! ways, chosen per batch ([`Mode`]):
//!
//! - **New** (the normal case, records never seen): `COPY`. The unique keys would
//!   refuse a record stored before (`unique_violation`): the transaction then rolls back and
//!   the batch goes again as an upsert. PostgreSQL's `ON CONFLICT DO UPDATE` costs each row a
//!   speculative insertion (a lock and one more WAL record); measured on the partitioned
//!   tables, plain inserts take a fifth less of the server's CPU per CDR (35 µs against 43
//!   µs, synthetic calls with 1.5 streams each), about what a plain `COPY` of the same rows
//!   takes.
//! - **Upsert** (after a batch was refused, until a batch finds nothing stored before: a
//!   journal replayed, the same capture read twice): the calls as `INSERT ... ON CONFLICT
//!   (uid[, start_us]) DO UPDATE ... RETURNING id, uid` — a call stored before keeps its row
//!   and its id, which tells it apart (`RETURNING xmax` cannot on a partitioned table); the
//!   streams and T.38 flows of those calls deleted (by `cdr_id` and, partitioned,
//!   `call_start_us`); then streams, flows and registrations upserted the same way.
//!
//! Text goes in as PostgreSQL can keep it ([`storable`]): a NUL character as U+FFFD, and an
//! indexed value over [`INDEXED_TEXT_BYTES_MAX`] bytes as its start, `~` and a hash of the
//! whole. Either, refused, would fail its batch at every retry and hold every CDR behind it;
//! both can come off the wire in a SIP header. SQLite keeps both as they are.
//!
//! Within a batch the last record of each uid is stored (as storing them one after the other
//! would leave it), so one statement never holds a key twice, which an upsert refuses (`ON
//! CONFLICT DO UPDATE command cannot affect row a second time`). Rows go in the order of
//! (start, uid), a total order of the conflict keys: two transactions that write the same
//! records take their locks in the same order and never deadlock, and the time-ordered
//! indexes grow at their right edge. Ids follow the batch's order, so calls of equal start
//! keep the order in which they came.

use std::borrow::Cow;
use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, Statement, Transaction};

use crate::pg::{PgLayout, opt_i64};
use crate::pg_partition::call_start_us;
use crate::search::{self, StreamFigures};
use crate::{CdrRecord, rollup};

/// A column's type: its array is `$n::{sql}[]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    I8,
    I4,
    F8,
    Text,
    Bytes,
    Bool,
}

impl Ty {
    fn sql(self) -> &'static str {
        match self {
            Ty::I8 => "bigint",
            Ty::I4 => "int4",
            Ty::F8 => "float8",
            Ty::Text => "text",
            Ty::Bytes => "bytea",
            Ty::Bool => "bool",
        }
    }
}

use Ty::{Bool, Bytes, F8, I4, I8, Text};

/// `cdr`'s columns as inserted: `id`, [`crate::CALL_COLUMNS`],
/// [`search::DERIVED_COLUMNS`], `uid`.
const CALL: [(&str, Ty); 43] = [
    ("id", I8),
    ("call_id", Text),
    ("caller", Text),
    ("called", Text),
    ("caller_addr", Text),
    ("callee_addr", Text),
    ("start_us", I8),
    ("ringing_us", I8),
    ("answer_us", I8),
    ("end_us", I8),
    ("state", Text),
    ("last_response", I4),
    ("last_reason", Text),
    ("hangup_by", Text),
    ("q850_cause", I4),
    ("sip_messages", I8),
    ("reinvites", I8),
    ("mos_min", F8),
    ("sip_tar", Text),
    ("sip_member", Text),
    ("sip_offset", I8),
    ("sip_len", I8),
    ("sip_compression", Text),
    ("rtp_tar", Text),
    ("rtp_member", Text),
    ("rtp_offset", I8),
    ("rtp_len", I8),
    ("rtp_compression", Text),
    ("dtmf", Text),
    ("fax_pages", I8),
    ("fax_result", Text),
    ("encrypted", Bool),
    ("t38_offered", Bool),
    ("sensor", Text),
    ("caller_rev", Text),
    ("called_rev", Text),
    ("caller_ip", Bytes),
    ("callee_ip", Bytes),
    ("duration_ms", I8),
    ("codecs", Text),
    ("loss_max_pct", F8),
    ("jitter_max_ms", F8),
    ("uid", Text),
];

/// `cdr_rtp`'s: [`crate::STREAM_COLUMNS`] with `call_start_us` after `cdr_id` (partitioned
/// layout only), then `uid`.
const STREAM: [(&str, Ty); 28] = [
    ("cdr_id", I8),
    ("call_start_us", I8),
    ("call_id", Text),
    ("src", Text),
    ("dst", Text),
    ("ssrc", I8),
    ("payload", Text),
    ("start_us", I8),
    ("end_us", I8),
    ("packets", I8),
    ("lost", I8),
    ("duplicates", I8),
    ("out_of_order", I8),
    ("min_delta_ms", F8),
    ("mean_delta_ms", F8),
    ("max_delta_ms", F8),
    ("mean_jitter_ms", F8),
    ("max_jitter_ms", F8),
    ("mos", F8),
    ("rtcp_reports", I8),
    ("rtcp_fraction_lost_pct", F8),
    ("rtcp_jitter_ms", F8),
    ("rtp_tar", Text),
    ("rtp_member", Text),
    ("rtp_offset", I8),
    ("rtp_len", I8),
    ("rtp_compression", Text),
    ("uid", Text),
];

/// `cdr_t38`'s: `cdr_id`, `call_start_us` (partitioned), [`crate::T38_COLUMNS`], `uid`.
const T38: [(&str, Ty); 16] = [
    ("cdr_id", I8),
    ("call_start_us", I8),
    ("src", Text),
    ("dst", Text),
    ("start_us", I8),
    ("end_us", I8),
    ("packets", I8),
    ("bytes", I8),
    ("lost", I8),
    ("duplicates", I8),
    ("out_of_order", I8),
    ("types", Text),
    ("redundant", I8),
    ("fec", I8),
    ("t30", Text),
    ("uid", Text),
];

/// `registration`'s: `uid`, [`crate::registration::REG_COLUMNS`], `src_ip`, `dst_ip`.
const REG: [(&str, Ty); 17] = [
    ("uid", Text),
    ("call_id", Text),
    ("username", Text),
    ("domain", Text),
    ("contact", Text),
    ("user_agent", Text),
    ("src", Text),
    ("dst", Text),
    ("first_us", I8),
    ("last_us", I8),
    ("requests", I8),
    ("last_code", I8),
    ("result", Text),
    ("expires_s", I8),
    ("sensor", Text),
    ("src_ip", Bytes),
    ("dst_ip", Bytes),
];

/// A table's columns in a layout: `call_start_us` only in the partitioned one.
fn columns(cols: &[(&'static str, Ty)], layout: PgLayout) -> Vec<(&'static str, Ty)> {
    cols.iter()
        .copied()
        .filter(|(n, _)| layout == PgLayout::Partitioned || *n != "call_start_us")
        .collect()
}

/// `INSERT INTO {table} (cols) SELECT unnest($1::t[]), unnest($2::t[]), ...`.
fn insert_sql(table: &str, cols: &[(&str, Ty)]) -> String {
    let names: Vec<&str> = cols.iter().map(|c| c.0).collect();
    let arrays: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| format!("unnest(${}::{}[])", i + 1, ty.sql()))
        .collect();
    format!(
        "INSERT INTO {table} ({}) SELECT {}",
        names.join(", "),
        arrays.join(", ")
    )
}

/// `a = excluded.a, ...` for every column but the conflict's and `keep`'s.
fn update_set(cols: &[(&str, Ty)], conflict: &[&str], keep: &[&str]) -> String {
    cols.iter()
        .map(|c| c.0)
        .filter(|n| !conflict.contains(n) && !keep.contains(n))
        .map(|n| format!("{n} = excluded.{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a batch is written (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Plain inserts: a record stored before makes the batch fail (`unique_violation`).
    New,
    /// Upserts: records stored before are updated, their streams replaced.
    Upsert,
}

/// What a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Calls that were stored before and were updated in place.
    pub updated: usize,
}

/// One table's statements: the plain insert (a binary `COPY`) and the upsert.
struct Pair {
    copy: String,
    upsert: Statement,
}

impl Pair {
    fn prepare(
        c: &mut Client,
        table: &str,
        cols: &[(&str, Ty)],
        conflict: &[&str],
        keep: &[&str],
        returning: &str,
    ) -> Result<Pair, postgres::Error> {
        Ok(Pair {
            copy: copy_sql(table, cols),
            upsert: c.prepare(&format!(
                "{} ON CONFLICT ({}) DO UPDATE SET {}{returning}",
                insert_sql(table, cols),
                conflict.join(", "),
                update_set(cols, conflict, keep)
            ))?,
        })
    }

    /// Writes `rows`: copied when new, upserted otherwise.
    fn write(
        &self,
        tx: &mut Transaction<'_>,
        mode: Mode,
        rows: &mut Rows<'_>,
    ) -> Result<(), postgres::Error> {
        match mode {
            Mode::New => copy_in(tx, &self.copy, rows),
            Mode::Upsert => tx.execute(&self.upsert, &rows.params()).map(drop),
        }
    }
}

/// The insert's statements, prepared once per connection.
pub(crate) struct Statements {
    /// `cdr`'s id sequence, as `nextval` takes it.
    seq: String,
    ids: Statement,
    call: Pair,
    del_rtp: Statement,
    del_t38: Statement,
    rtp: Pair,
    t38: Pair,
    reg: Pair,
}

impl Statements {
    pub(crate) fn prepare(c: &mut Client, layout: PgLayout) -> Result<Statements, postgres::Error> {
        let part = layout == PgLayout::Partitioned;
        let key = |k: &'static str| -> Vec<&'static str> {
            if part { vec!["uid", k] } else { vec!["uid"] }
        };
        let of_calls = if part {
            "cdr_id = ANY($1::bigint[]) AND call_start_us = ANY($2::bigint[])"
        } else {
            "cdr_id = ANY($1::bigint[])"
        };
        let seq: String = c
            .query_one("SELECT pg_get_serial_sequence('cdr', 'id')", &[])?
            .get(0);
        Ok(Statements {
            seq,
            ids: c
                .prepare("SELECT nextval($1::text::regclass) FROM generate_series(1, $2::int)")?,
            call: Pair::prepare(
                c,
                "cdr",
                &CALL,
                &key("start_us"),
                &["id"],
                " RETURNING id, uid",
            )?,
            del_rtp: c.prepare(&format!("DELETE FROM cdr_rtp WHERE {of_calls}"))?,
            del_t38: c.prepare(&format!("DELETE FROM cdr_t38 WHERE {of_calls}"))?,
            rtp: Pair::prepare(
                c,
                "cdr_rtp",
                &columns(&STREAM, layout),
                &key("call_start_us"),
                &[],
                "",
            )?,
            t38: Pair::prepare(
                c,
                "cdr_t38",
                &columns(&T38, layout),
                &key("call_start_us"),
                &[],
                "",
            )?,
            reg: Pair::prepare(c, "registration", &REG, &key("first_us"), &[], "")?,
        })
    }
}

/// One column's values.
enum Column<'a> {
    I8(Vec<Option<i64>>),
    I4(Vec<Option<i32>>),
    F8(Vec<Option<f64>>),
    Text(Vec<Option<Cow<'a, str>>>),
    Bytes(Vec<Option<Vec<u8>>>),
    Bool(Vec<Option<bool>>),
}

/// The rows of one statement, filled a row at a time in the columns' order: for
/// [`Mode::New`] straight into a binary `COPY` stream, for [`Mode::Upsert`] column by column
/// (each column an array parameter).
struct Rows<'a> {
    types: Vec<Ty>,
    /// Whether each column is indexed text ([`storable`]).
    indexed: Vec<bool>,
    /// Upsert: the values of each column.
    cols: Vec<Column<'a>>,
    /// New: the `COPY ... (FORMAT binary)` stream so far: a header, then each row as its field
    /// count and each field as its length (-1 for NULL) and its value in the type's binary
    /// send form (big-endian integers and IEEE floats, text as its UTF-8, bytea as is).
    copy: Option<Vec<u8>>,
    at: usize,
    n: usize,
}

impl<'a> Rows<'a> {
    fn new(types: &[(&str, Ty)], mode: Mode) -> Rows<'a> {
        let (cols, copy) = match mode {
            Mode::New => (Vec::new(), Some(COPY_HEADER.to_vec())),
            Mode::Upsert => (
                types
                    .iter()
                    .map(|(_, t)| match t {
                        I8 => Column::I8(Vec::new()),
                        I4 => Column::I4(Vec::new()),
                        F8 => Column::F8(Vec::new()),
                        Text => Column::Text(Vec::new()),
                        Bytes => Column::Bytes(Vec::new()),
                        Bool => Column::Bool(Vec::new()),
                    })
                    .collect(),
                None,
            ),
        };
        Rows {
            types: types.iter().map(|(_, t)| *t).collect(),
            indexed: types
                .iter()
                .map(|(n, t)| *t == Text && INDEXED_TEXT.contains(n))
                .collect(),
            cols,
            copy,
            at: 0,
            n: 0,
        }
    }

    /// The next column, which must be of type `ty`: in the COPY stream (with the row's field
    /// count before its first field) or as a column to push to.
    fn next(&mut self, ty: Ty) -> Result<&mut Vec<u8>, &mut Column<'a>> {
        assert_eq!(self.types[self.at], ty, "column {} of the row", self.at);
        self.at += 1;
        match &mut self.copy {
            Some(out) => {
                if self.at == 1 {
                    let fields = i16::try_from(self.types.len()).expect("under 32768 columns");
                    out.extend_from_slice(&fields.to_be_bytes());
                }
                Ok(out)
            }
            None => Err(&mut self.cols[self.at - 1]),
        }
    }

    /// A field of the COPY stream.
    fn field(out: &mut Vec<u8>, v: Option<&[u8]>) {
        match v {
            Some(b) => {
                let len = i32::try_from(b.len()).expect("a field under 2 GiB");
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(b);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }

    fn i8(&mut self, v: Option<i64>) {
        match self.next(I8) {
            Ok(out) => Self::field(out, v.map(i64::to_be_bytes).as_ref().map(|b| &b[..])),
            Err(Column::I8(c)) => c.push(v),
            Err(_) => unreachable!("a bigint column"),
        }
    }

    fn int(&mut self, v: i64) {
        self.i8(Some(v));
    }

    fn u64(&mut self, v: u64) {
        self.i8(Some(i64::try_from(v).unwrap_or(i64::MAX)));
    }

    fn i4(&mut self, v: Option<i32>) {
        match self.next(I4) {
            Ok(out) => Self::field(out, v.map(i32::to_be_bytes).as_ref().map(|b| &b[..])),
            Err(Column::I4(c)) => c.push(v),
            Err(_) => unreachable!("an int4 column"),
        }
    }

    fn f8(&mut self, v: Option<f64>) {
        match self.next(F8) {
            Ok(out) => Self::field(
                out,
                v.map(|f| f.to_bits().to_be_bytes())
                    .as_ref()
                    .map(|b| &b[..]),
            ),
            Err(Column::F8(c)) => c.push(v),
            Err(_) => unreachable!("a float8 column"),
        }
    }

    fn text(&mut self, v: Option<Cow<'a, str>>) {
        let indexed = self.indexed[self.at];
        let v = v.map(|t| storable(t, indexed));
        match self.next(Text) {
            Ok(out) => Self::field(out, v.as_deref().map(str::as_bytes)),
            Err(Column::Text(c)) => c.push(v),
            Err(_) => unreachable!("a text column"),
        }
    }

    fn str(&mut self, v: &'a str) {
        self.text(Some(Cow::Borrowed(v)));
    }

    fn opt_str(&mut self, v: Option<&'a str>) {
        self.text(v.map(Cow::Borrowed));
    }

    fn owned(&mut self, v: Option<String>) {
        self.text(v.map(Cow::Owned));
    }

    fn bytes(&mut self, v: Option<Vec<u8>>) {
        match self.next(Bytes) {
            Ok(out) => Self::field(out, v.as_deref()),
            Err(Column::Bytes(c)) => c.push(v),
            Err(_) => unreachable!("a bytea column"),
        }
    }

    /// A boolean: one byte, 1 or 0, in the COPY stream.
    fn bool(&mut self, v: bool) {
        match self.next(Bool) {
            Ok(out) => Self::field(out, Some(&[u8::from(v)])),
            Err(Column::Bool(c)) => c.push(Some(v)),
            Err(_) => unreachable!("a bool column"),
        }
    }

    fn end_row(&mut self) {
        assert_eq!(self.at, self.types.len(), "every column of the row");
        self.at = 0;
        self.n += 1;
    }

    /// The whole `COPY` stream, its trailer added (Mode::New).
    fn copy_stream(&mut self) -> Vec<u8> {
        let mut out = self
            .copy
            .take()
            .expect("a COPY stream: rows made for Mode::New");
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.cols
            .iter()
            .map(|c| -> &(dyn ToSql + Sync) {
                match c {
                    Column::I8(v) => v,
                    Column::I4(v) => v,
                    Column::F8(v) => v,
                    Column::Text(v) => v,
                    Column::Bytes(v) => v,
                    Column::Bool(v) => v,
                }
            })
            .collect()
    }
}

/// Text as PostgreSQL can store it: its `text` cannot hold a NUL character (0x00 is refused
/// as "invalid byte sequence"), which is valid UTF-8 and so can come off the wire in a SIP
/// header (a Call-ID, a number). Refused, it would fail its whole batch again at every retry,
/// and every CDR behind it in the journal would wait for good; each NUL is stored as U+FFFD,
/// the replacement character, the same way each time (so a record's uid still matches itself).
fn without_nul(text: Cow<'_, str>) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        text
    }
}

/// Bytes of an indexed text value at most ([`INDEXED_TEXT`]). A B-tree entry over 2,704 bytes
/// is refused (a third of a page) and would fail its batch at every retry like a NUL; a SIP
/// header off the wire may be 64 KiB long. No real Call-ID, number, user or uid comes near.
pub(crate) const INDEXED_TEXT_BYTES_MAX: usize = 1_024;

/// The text columns that are in an index, in some table of some layout: bounded to
/// [`INDEXED_TEXT_BYTES_MAX`].
const INDEXED_TEXT: [&str; 7] = [
    "call_id",
    "uid",
    "caller",
    "called",
    "caller_rev",
    "called_rev",
    "username",
];

/// `text` as stored in a column: without NUL, and for an indexed column longer than
/// [`INDEXED_TEXT_BYTES_MAX`] its first 1,000 bytes or so (cut at a character) followed by `~`
/// and the FNV-1a hash of the whole in hex, so that two long values differing past the cut stay
/// apart and the same value is stored the same way each time (a uid still matches itself).
fn storable(text: Cow<'_, str>, indexed: bool) -> Cow<'_, str> {
    let text = without_nul(text);
    if !indexed || text.len() <= INDEXED_TEXT_BYTES_MAX {
        return text;
    }
    let mut cut = INDEXED_TEXT_BYTES_MAX - 1 - 16 - 4;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let bounded = format!("{}~{hash:016x}", &text[..cut]);
    debug_assert!(bounded.len() <= INDEXED_TEXT_BYTES_MAX);
    Cow::Owned(bounded)
}

/// `COPY ... (FORMAT binary)`'s header: the signature, no flags, no extension.
const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// `COPY {table} (cols) FROM STDIN (FORMAT binary)`.
fn copy_sql(table: &str, cols: &[(&str, Ty)]) -> String {
    let names: Vec<&str> = cols.iter().map(|c| c.0).collect();
    format!(
        "COPY {table} ({}) FROM STDIN (FORMAT binary)",
        names.join(", ")
    )
}

/// Writes `rows` into `table` by binary `COPY`: what a batch of new records takes (see the
/// module's documentation).
fn copy_in(
    tx: &mut Transaction<'_>,
    sql: &str,
    rows: &mut Rows<'_>,
) -> Result<(), postgres::Error> {
    use std::io::Write;
    let mut w = tx.copy_in(sql)?;
    if let Err(e) = w.write_all(&rows.copy_stream()) {
        // The writer's error is the connection's, wrapped: give it back as it came.
        if let Some(pg) = e
            .into_inner()
            .and_then(|inner| inner.downcast::<postgres::Error>().ok())
        {
            return Err(*pg);
        }
    }
    w.finish()?;
    Ok(())
}

/// The time a record's rows are ordered by: its call's start (or its first stream's, or its
/// registration's first message), the partition key of its main row.
fn lock_time(r: &CdrRecord) -> i64 {
    match (&r.call, r.streams.first(), r.t38.first(), &r.registration) {
        (Some(c), ..) => c.start_us,
        (None, Some(s), ..) => s.start_us,
        (None, None, Some(f), _) => f.start_us,
        (None, None, None, Some(g)) => g.first_us,
        (None, None, None, None) => 0,
    }
}

/// Whether a batch failed because `Mode::New` met a record stored before.
pub(crate) fn stored_before(e: &postgres::Error) -> bool {
    e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION)
}

/// Stores `records` in the caller's transaction (see the module's documentation).
pub(crate) fn insert(
    tx: &mut Transaction<'_>,
    st: &Statements,
    layout: PgLayout,
    mode: Mode,
    records: &[CdrRecord],
    groups: &groups::Groups,
) -> Result<Outcome, postgres::Error> {
    let mut out = Outcome::default();
    let part = layout == PgLayout::Partitioned;
    // The last record of each uid, as stored (see `storable`: the uid the upsert returns);
    // records without one are all stored.
    let mut last: HashMap<Cow<'_, str>, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(records.len(), foldhash::fast::RandomState::default());
    for (i, r) in records.iter().enumerate() {
        if !r.uid.is_empty() {
            last.insert(storable(Cow::Borrowed(r.uid.as_str()), true), i);
        }
    }
    let mut order: Vec<usize> = (0..records.len())
        .filter(|i| {
            let uid = records[*i].uid.as_str();
            uid.is_empty() || last.get(&storable(Cow::Borrowed(uid), true)) == Some(i)
        })
        .collect();
    let calls = order.iter().filter(|&&i| records[i].call.is_some()).count();
    let mut id_of: Vec<Option<i64>> = vec![None; records.len()];
    if calls > 0 {
        let n = i32::try_from(calls).unwrap_or(i32::MAX);
        let mut ids: Vec<i64> = tx
            .query(&st.ids, &[&st.seq, &n])?
            .iter()
            .map(|r| r.get(0))
            .collect();
        ids.sort_unstable();
        let mut ids = ids.into_iter();
        for &i in &order {
            if records[i].call.is_some() {
                id_of[i] = ids.next();
            }
        }
    }
    order.sort_by_cached_key(|&i| {
        let r = &records[i];
        (r.uid.is_empty(), lock_time(r), r.uid.as_str())
    });

    // The report rollups' changes ([`crate::rollup`]): in upsert mode, the calls stored before
    // are taken away as stored, read under the exclusive report lock; every call is added as
    // it comes now.
    let mut changes = rollup::Rollup::default();
    if calls > 0 {
        let lock = match mode {
            Mode::New => "SELECT pg_advisory_xact_lock_shared($1)",
            Mode::Upsert => "SELECT pg_advisory_xact_lock($1)",
        };
        tx.execute(lock, &[&rollup::PG_REPORT_LOCK_KEY])?;
        if mode == Mode::Upsert {
            let (mut uids, mut starts) = (Vec::new(), Vec::new());
            for &i in &order {
                if let (Some(c), Some(uid)) = (&records[i].call, records[i].call_uid()) {
                    uids.push(storable(Cow::Borrowed(uid), true).into_owned());
                    starts.push(c.start_us);
                }
            }
            let stored = rollup::pg_stored(tx, part, &uids, &starts)?;
            for f in stored.values() {
                changes.call(groups, &f.facts(), -1);
            }
        }
        for &i in &order {
            if let Some(c) = &records[i].call {
                let facts = rollup::CallFacts::of_record(c, &records[i].streams);
                changes.call(groups, &facts, 1);
            }
        }
    }

    if calls > 0 {
        let mut w = Rows::new(&CALL, mode);
        for &i in &order {
            let rec = &records[i];
            let Some(c) = &rec.call else { continue };
            let d = search::derive(c, rec.streams.iter().map(StreamFigures::from));
            w.i8(id_of[i]);
            w.str(&c.call_id);
            w.str(&c.caller);
            w.str(&c.called);
            w.str(&c.caller_addr);
            w.str(&c.callee_addr);
            w.int(c.start_us);
            w.i8(c.ringing_us);
            w.i8(c.answer_us);
            w.i8(c.end_us);
            w.str(&c.state);
            w.i4(c.last_response.map(i32::from));
            w.str(&c.last_reason);
            w.opt_str(c.hangup_by.as_deref());
            w.i4(c.q850_cause.map(i32::from));
            w.int(i64::from(c.sip_messages));
            w.int(i64::from(c.reinvites));
            w.f8(c.mos_min);
            w.opt_str(c.sip_tar.as_deref());
            w.opt_str(c.sip_member.as_deref());
            w.i8(opt_i64(c.sip_offset));
            w.i8(opt_i64(c.sip_len));
            w.opt_str(c.sip_compression.as_deref());
            w.opt_str(c.rtp_tar.as_deref());
            w.opt_str(c.rtp_member.as_deref());
            w.i8(opt_i64(c.rtp_offset));
            w.i8(opt_i64(c.rtp_len));
            w.opt_str(c.rtp_compression.as_deref());
            w.str(&c.dtmf);
            w.i8(c.fax_pages.map(i64::from));
            w.opt_str(c.fax_result.as_deref());
            w.bool(c.encrypted);
            w.bool(c.t38_offered);
            w.owned(Some(d.sensor));
            w.owned(Some(d.caller_rev));
            w.owned(Some(d.called_rev));
            w.bytes(d.caller_ip);
            w.bytes(d.callee_ip);
            w.i8(d.duration_ms);
            w.owned(d.codecs);
            w.f8(d.loss_max_pct);
            w.f8(d.jitter_max_ms);
            w.opt_str(rec.call_uid());
            w.end_row();
        }
        if mode == Mode::New {
            copy_in(tx, &st.call.copy, &mut w)?;
        }
        let rows = match mode {
            Mode::New => Vec::new(),
            Mode::Upsert => tx.query(&st.call.upsert, &w.params())?,
        };
        let (mut again_ids, mut again_starts) = (Vec::new(), Vec::new());
        for row in rows {
            let id: i64 = row.get(0);
            let Some(&i) = row.get::<_, Option<&str>>(1).and_then(|u| last.get(u)) else {
                continue;
            };
            if id_of[i] != Some(id) {
                // Stored before: that row was updated in place and keeps its id.
                id_of[i] = Some(id);
                again_ids.push(id);
                again_starts.push(records[i].call.as_ref().map_or(0, |c| c.start_us));
            }
        }
        out.updated = again_ids.len();
        if !again_ids.is_empty() {
            for del in [&st.del_rtp, &st.del_t38] {
                if part {
                    tx.execute(del, &[&again_ids, &again_starts])?;
                } else {
                    tx.execute(del, &[&again_ids])?;
                }
            }
        }
    }

    let mut rtp = Rows::new(&columns(&STREAM, layout), mode);
    let mut t38 = Rows::new(&columns(&T38, layout), mode);
    let mut reg = Rows::new(&REG, mode);
    for &i in &order {
        let rec = &records[i];
        for (k, s) in rec.streams.iter().enumerate() {
            rtp.i8(id_of[i]);
            if part {
                rtp.int(call_start_us(rec, s.start_us));
            }
            rtp.opt_str(s.call_id.as_deref());
            rtp.str(&s.src);
            rtp.str(&s.dst);
            rtp.int(i64::from(s.ssrc));
            rtp.str(&s.payload);
            rtp.int(s.start_us);
            rtp.int(s.end_us);
            rtp.u64(s.packets);
            rtp.int(s.lost);
            rtp.u64(s.duplicates);
            rtp.u64(s.out_of_order);
            rtp.f8(Some(s.min_delta_ms));
            rtp.f8(Some(s.mean_delta_ms));
            rtp.f8(Some(s.max_delta_ms));
            rtp.f8(Some(s.mean_jitter_ms));
            rtp.f8(Some(s.max_jitter_ms));
            rtp.f8(s.mos);
            rtp.int(i64::from(s.rtcp_reports));
            rtp.f8(s.rtcp_fraction_lost_pct);
            rtp.f8(s.rtcp_jitter_ms);
            rtp.opt_str(s.rtp_tar.as_deref());
            rtp.opt_str(s.rtp_member.as_deref());
            rtp.i8(opt_i64(s.rtp_offset));
            rtp.i8(opt_i64(s.rtp_len));
            rtp.opt_str(s.rtp_compression.as_deref());
            rtp.owned(rec.stream_uid(k));
            rtp.end_row();
        }
        for (k, f) in rec.t38.iter().enumerate() {
            t38.i8(id_of[i]);
            if part {
                t38.int(call_start_us(rec, f.start_us));
            }
            t38.str(&f.src);
            t38.str(&f.dst);
            t38.int(f.start_us);
            t38.int(f.end_us);
            for v in [f.packets, f.bytes, f.lost, f.duplicates, f.out_of_order] {
                t38.u64(v);
            }
            t38.str(&f.types);
            t38.u64(f.redundant);
            t38.u64(f.fec);
            t38.str(&f.t30);
            t38.owned(rec.t38_uid(k));
            t38.end_row();
        }
        if let Some(g) = &rec.registration {
            let ip = |a: &str| crate::query::ip_bytes(a).map(|b| b.to_vec());
            reg.opt_str(rec.call_uid());
            for t in [
                &g.call_id,
                &g.user,
                &g.domain,
                &g.contact,
                &g.user_agent,
                &g.src,
                &g.dst,
            ] {
                reg.str(t);
            }
            reg.int(g.first_us);
            reg.int(g.last_us);
            reg.int(i64::from(g.requests));
            reg.i8(g.last_code.map(i64::from));
            reg.str(&g.result);
            reg.i8(g.expires_s.map(i64::from));
            reg.str(search::sensor_or_default(&g.sensor));
            reg.bytes(ip(&g.src));
            reg.bytes(ip(&g.dst));
            reg.end_row();
        }
    }
    for (rows, pair) in [
        (&mut rtp, &st.rtp),
        (&mut t38, &st.t38),
        (&mut reg, &st.reg),
    ] {
        if rows.n > 0 {
            pair.write(tx, mode, rows)?;
        }
    }
    rollup::pg_apply(tx, changes)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cols: &[(&str, Ty)]) -> String {
        cols.iter().map(|c| c.0).collect::<Vec<_>>().join(", ")
    }

    fn squeeze(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn indexed_text_is_bounded_the_same_way_each_time_and_keeps_long_values_apart() {
        for name in INDEXED_TEXT {
            assert!(
                [&CALL[..], &STREAM[..], &T38[..], &REG[..]]
                    .iter()
                    .any(|cols| cols.iter().any(|(n, t)| *n == name && *t == Text)),
                "{name} is a text column"
            );
        }
        let short = "a84b4c76e66710@pc33.example.com";
        assert_eq!(storable(Cow::Borrowed(short), true), short);
        // Multi-byte characters around the cut, and two values equal up to their last byte.
        let a = "é".repeat(2_000) + "a";
        let b = "é".repeat(2_000) + "b";
        let (sa, sb) = (
            storable(Cow::Borrowed(&a), true),
            storable(Cow::Borrowed(&b), true),
        );
        assert!(sa.len() <= INDEXED_TEXT_BYTES_MAX && sb.len() <= INDEXED_TEXT_BYTES_MAX);
        assert!(sa.starts_with("éé") && sa.contains('~'));
        assert_ne!(sa, sb);
        assert_eq!(sa, storable(Cow::Borrowed(&a), true), "the same each time");
        // Not indexed: kept whole, NUL aside.
        assert_eq!(storable(Cow::Borrowed(&a), false), a);
        assert_eq!(storable(Cow::Borrowed("1\u{0}2"), false), "1\u{FFFD}2");
    }

    #[test]
    fn the_columns_are_the_tables_own() {
        assert_eq!(
            names(&CALL),
            squeeze(&format!(
                "id, {}, {}, uid",
                crate::CALL_COLUMNS,
                search::DERIVED_COLUMNS
            ))
        );
        assert_eq!(
            names(&columns(&STREAM, PgLayout::Plain)),
            squeeze(&format!("{}, uid", crate::STREAM_COLUMNS))
        );
        assert_eq!(
            names(&columns(&T38, PgLayout::Plain)),
            squeeze(&format!("cdr_id, {}, uid", crate::T38_COLUMNS))
        );
        assert_eq!(
            names(&REG),
            squeeze(&format!(
                "uid, {}, src_ip, dst_ip",
                crate::registration::REG_COLUMNS
            ))
        );
        assert!(insert_sql("cdr", &CALL).ends_with("unnest($43::text[])"));
        let set = update_set(&CALL, &["uid", "start_us"], &["id"]);
        assert!(set.starts_with("call_id = excluded.call_id, caller = excluded.caller"));
        assert!(!set.contains("id = excluded.id,") && !set.contains("start_us = excluded"));
    }
}
