//! The PostgreSQL backend: the same tables as SQLite and the same search ([`crate::search`]),
//! in one of two layouts ([`PgLayout`]):
//!
//! - **plain** ([`PG_SCHEMA`], [`PG_INDEXES`]): one table each, as SQLite has them; what a
//!   single Tandem creates by default.
//! - **partitioned** ([`crate::pg_partition`]): each table partitioned by day on its call's
//!   start, retention by dropping whole days ([`PgStore::drop_days_before`],
//!   [`PgOptions::retention_days`]); what the collector uses.
//!
//! A database keeps the layout it was created with: [`PgStore::connect`] adopts it, so a
//! reader (the console) needs no option. The schema is versioned: connecting applies the
//! migrations it lacks ([`crate::migrate`]), which also upgrade a database of an earlier
//! release in place.
//!
//! Writes ([`CdrStore::insert_records`]) go a batch at a time, one transaction per batch, as
//! a few set-based statements over arrays (`unnest`), whatever the batch's size
//! (`pg_insert.rs`); in the partitioned layout the days a batch needs are created first
//! (a late record for an old day gets its day), and once per UTC day the store creates the
//! days ahead and applies the retention ([`PgStore::maintain`]).

use std::collections::BTreeSet;

use postgres::types::{ToSql, Type};
use postgres::{Client, GenericClient, NoTls};

use crate::pg_insert::{self, Mode, Outcome, Statements};
use crate::pg_partition::{
    self, Day, DroppedDays, PARTITION_DAYS_AHEAD, RETENTION_DAYS_PER_CALL_MAX,
};
use crate::plan::{Arg, Dialect, Exec, Sql, Ty, Val, Walked};
use crate::query::Cursor;
use crate::registration::{self, RegistrationPage, RegistrationQuery};
use crate::search::{self, CallPage, CallQuery, CallSummary, CallTotals};
use crate::{CALL_COLUMNS, CdrCall, CdrError, CdrFilter, CdrRecord, CdrStore, CdrStream, CdrT38};

/// The columns of `cdr` after its id, shared by both layouts' schemas (the partitioned one in
/// `pg_partition.rs` adds its key after them).
macro_rules! pg_cdr_columns {
    () => {
        "
    call_id        TEXT    NOT NULL,
    caller         TEXT    NOT NULL,
    called         TEXT    NOT NULL,
    caller_addr    TEXT    NOT NULL,
    callee_addr    TEXT    NOT NULL,
    start_us       BIGINT  NOT NULL,
    ringing_us     BIGINT,
    answer_us      BIGINT,
    end_us         BIGINT,
    state          TEXT    NOT NULL,
    last_response  INTEGER,
    last_reason    TEXT    NOT NULL,
    hangup_by      TEXT,
    q850_cause     INTEGER,
    sip_messages   BIGINT  NOT NULL,
    reinvites      BIGINT  NOT NULL,
    mos_min        DOUBLE PRECISION,
    sip_tar        TEXT,
    sip_member     TEXT,
    sip_offset     BIGINT,
    sip_len        BIGINT,
    sip_compression TEXT,
    rtp_tar        TEXT,
    rtp_member     TEXT,
    rtp_offset     BIGINT,
    rtp_len        BIGINT,
    rtp_compression TEXT,
    dtmf           TEXT,
    fax_pages      BIGINT,
    fax_result     TEXT,
    uid            TEXT,
    sensor         TEXT,
    caller_rev     TEXT,
    called_rev     TEXT,
    caller_ip      BYTEA,
    callee_ip      BYTEA,
    duration_ms    BIGINT,
    codecs         TEXT,
    loss_max_pct   DOUBLE PRECISION,
    jitter_max_ms  DOUBLE PRECISION"
    };
}
pub(crate) use pg_cdr_columns;

/// The columns of `cdr_rtp` from `src` on, shared by both layouts' schemas.
macro_rules! pg_rtp_columns {
    () => {
        "
    src                     TEXT    NOT NULL,
    dst                     TEXT    NOT NULL,
    ssrc                    BIGINT  NOT NULL,
    payload                 TEXT    NOT NULL,
    start_us                BIGINT  NOT NULL,
    end_us                  BIGINT  NOT NULL,
    packets                 BIGINT  NOT NULL,
    lost                    BIGINT  NOT NULL,
    duplicates              BIGINT  NOT NULL,
    out_of_order            BIGINT  NOT NULL,
    min_delta_ms            DOUBLE PRECISION NOT NULL,
    mean_delta_ms           DOUBLE PRECISION NOT NULL,
    max_delta_ms            DOUBLE PRECISION NOT NULL,
    mean_jitter_ms          DOUBLE PRECISION NOT NULL,
    max_jitter_ms           DOUBLE PRECISION NOT NULL,
    mos                     DOUBLE PRECISION,
    rtcp_reports            BIGINT  NOT NULL,
    rtcp_fraction_lost_pct  DOUBLE PRECISION,
    rtcp_jitter_ms          DOUBLE PRECISION,
    uid                     TEXT"
    };
}
pub(crate) use pg_rtp_columns;

/// The PostgreSQL schema, tables only: the SQLite one with PostgreSQL's types. Indexes:
/// [`PG_INDEXES`].
pub const PG_SCHEMA: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS cdr (
    id             BIGSERIAL PRIMARY KEY,",
    pg_cdr_columns!(),
    "
);
CREATE TABLE IF NOT EXISTS cdr_rtp (
    id                      BIGSERIAL PRIMARY KEY,
    cdr_id                  BIGINT REFERENCES cdr(id),
    call_id                 TEXT,",
    pg_rtp_columns!(),
    "
);
CREATE TABLE IF NOT EXISTS cdr_t38 (
    id            BIGSERIAL PRIMARY KEY,
    cdr_id        BIGINT  REFERENCES cdr(id),
    src           TEXT    NOT NULL,
    dst           TEXT    NOT NULL,
    start_us      BIGINT  NOT NULL,
    end_us        BIGINT  NOT NULL,
    packets       BIGINT  NOT NULL,
    bytes         BIGINT  NOT NULL,
    lost          BIGINT  NOT NULL,
    duplicates    BIGINT  NOT NULL,
    out_of_order  BIGINT  NOT NULL,
    types         TEXT    NOT NULL,
    redundant     BIGINT,
    fec           BIGINT,
    t30           TEXT,
    uid           TEXT
);
CREATE TABLE IF NOT EXISTS registration (
    id            BIGSERIAL PRIMARY KEY,
    uid           TEXT,
    call_id       TEXT    NOT NULL,
    username      TEXT    NOT NULL,
    domain        TEXT    NOT NULL,
    contact       TEXT    NOT NULL,
    user_agent    TEXT    NOT NULL,
    src           TEXT    NOT NULL,
    dst           TEXT    NOT NULL,
    first_us      BIGINT  NOT NULL,
    last_us       BIGINT  NOT NULL,
    requests      BIGINT  NOT NULL,
    last_code     BIGINT,
    result        TEXT    NOT NULL,
    expires_s     BIGINT,
    sensor        TEXT    NOT NULL,
    src_ip        BYTEA,
    dst_ip        BYTEA
);
"
);

/// The PostgreSQL indexes, by name (why each: [`crate::search`]). Text is `COLLATE "C"` so
/// that a prefix is a byte range whatever the database's collation, and `id` ends each time
/// index so that equal times come out in keyset order.
pub const PG_INDEXES: [(&str, &str); 17] = [
    ("cdr_start_id", "cdr (start_us, id)"),
    ("cdr_call_id", "cdr (call_id)"),
    ("cdr_uid", "UNIQUE cdr (uid)"),
    (
        "cdr_caller_start",
        "cdr (caller COLLATE \"C\", start_us, id)",
    ),
    (
        "cdr_called_start",
        "cdr (called COLLATE \"C\", start_us, id)",
    ),
    (
        "cdr_caller_rev_start",
        "cdr (caller_rev COLLATE \"C\", start_us, id)",
    ),
    (
        "cdr_called_rev_start",
        "cdr (called_rev COLLATE \"C\", start_us, id)",
    ),
    ("cdr_caller_ip_start", "cdr (caller_ip, start_us, id)"),
    ("cdr_callee_ip_start", "cdr (callee_ip, start_us, id)"),
    ("cdr_rtp_cdr", "cdr_rtp (cdr_id)"),
    ("cdr_rtp_call_id", "cdr_rtp (call_id)"),
    ("cdr_rtp_uid", "UNIQUE cdr_rtp (uid)"),
    ("cdr_t38_cdr", "cdr_t38 (cdr_id)"),
    ("cdr_t38_uid", "UNIQUE cdr_t38 (uid)"),
    ("registration_last", "registration (last_us, id)"),
    (
        "registration_user",
        "registration (username COLLATE \"C\", last_us, id)",
    ),
    ("registration_uid", "UNIQUE registration (uid)"),
];

/// Indexes of earlier releases that [`PG_INDEXES`] replace.
pub const PG_RETIRED_INDEXES: [&str; 3] = ["cdr_start", "cdr_caller", "cdr_called"];

/// Run before [`PG_SCHEMA`]: adds the `uid` column to tables created before it existed.
pub const PG_UPGRADE: &str = "
ALTER TABLE IF EXISTS cdr ADD COLUMN IF NOT EXISTS uid TEXT;
ALTER TABLE IF EXISTS cdr_rtp ADD COLUMN IF NOT EXISTS uid TEXT;
ALTER TABLE IF EXISTS cdr_t38 ADD COLUMN IF NOT EXISTS uid TEXT;
ALTER TABLE IF EXISTS registration ADD COLUMN IF NOT EXISTS uid TEXT;
";

/// How the CDR tables are laid out in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgLayout {
    /// One table each ([`PG_SCHEMA`]).
    Plain,
    /// Each table partitioned by UTC day ([`crate::pg_partition`]).
    Partitioned,
}

/// How [`PgStore::connect_with`] sets up and keeps the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// The layout a database without CDR tables gets (default plain). A database keeps the
    /// layout it has, with one refusal: asking for partitions of a plain database that holds
    /// rows fails and names the explicit step ([`crate::migrate::partition_existing`]).
    pub layout: PgLayout,
    /// Partitioned: days created ahead, after today ([`PARTITION_DAYS_AHEAD`]).
    pub days_ahead: u32,
    /// Partitioned: whole UTC days kept before today; older days are dropped at connect and
    /// at each maintenance, at most [`RETENTION_DAYS_PER_CALL_MAX`] at a time. `None` (the
    /// default) keeps every day.
    pub retention_days: Option<u32>,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            layout: PgLayout::Plain,
            days_ahead: PARTITION_DAYS_AHEAD,
            retention_days: None,
        }
    }
}

impl PgOptions {
    /// The collector's: day partitions, every day kept.
    pub fn partitioned() -> PgOptions {
        PgOptions {
            layout: PgLayout::Partitioned,
            ..PgOptions::default()
        }
    }
}

/// What one [`PgStore::maintain`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Maintained {
    /// Days whose partitions were created.
    pub created: Vec<Day>,
    /// Days dropped by the retention.
    pub dropped: DroppedDays,
}

/// A byte count or offset as PostgreSQL stores it (BIGINT).
pub(crate) fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// CDRs in a PostgreSQL database.
pub struct PgStore {
    /// The connection string without its password, for errors.
    name: String,
    client: Client,
    layout: PgLayout,
    options: PgOptions,
    /// Partitioned: the days known to have their four partitions.
    days: BTreeSet<Day>,
    /// The UTC day of the last maintenance that finished.
    maintained: Option<Day>,
    /// The insert's statements, prepared at the first insert.
    statements: Option<Statements>,
    /// Batches still to write as upserts: records stored before came lately (see
    /// `pg_insert`); [`UPSERT_BATCHES_AFTER_CONFLICT`] after the last one met.
    upserting: u32,
    /// The groups whose report rollups this store keeps as it stores calls (`all` always).
    groups: std::sync::Arc<groups::Groups>,
}

/// Batches written as upserts after one met a record stored before, before trying plain
/// inserts again (a replay repeats many batches; a lone stream or a registration stored
/// again is not counted when the upsert meets it, so the count does not stop at the first
/// batch that updated no call).
pub const UPSERT_BATCHES_AFTER_CONFLICT: u32 = 16;

/// The connection string without its password.
pub(crate) fn redact(conninfo: &str) -> String {
    conninfo
        .split_whitespace()
        .map(|kv| {
            if kv.to_ascii_lowercase().starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A PostgreSQL error of the database `target`.
pub(crate) fn pg_error(target: &str, source: postgres::Error) -> CdrError {
    CdrError::Postgres {
        target: target.to_string(),
        source,
    }
}

fn call_from_row(r: &postgres::Row, o: usize) -> CdrCall {
    CdrCall {
        call_id: r.get(o),
        caller: r.get(o + 1),
        called: r.get(o + 2),
        caller_addr: r.get(o + 3),
        callee_addr: r.get(o + 4),
        start_us: r.get(o + 5),
        ringing_us: r.get(o + 6),
        answer_us: r.get(o + 7),
        end_us: r.get(o + 8),
        state: r.get(o + 9),
        last_response: r.get::<_, Option<i32>>(o + 10).map(|v| v as u16),
        last_reason: r.get(o + 11),
        hangup_by: r.get(o + 12),
        q850_cause: r.get::<_, Option<i32>>(o + 13).map(|v| v as u16),
        sip_messages: r.get::<_, i64>(o + 14) as u32,
        reinvites: r.get::<_, i64>(o + 15) as u32,
        mos_min: r.get(o + 16),
        sip_tar: r.get(o + 17),
        sip_member: r.get(o + 18),
        sip_offset: r.get::<_, Option<i64>>(o + 19).map(|v| v.max(0) as u64),
        sip_len: r.get::<_, Option<i64>>(o + 20).map(|v| v.max(0) as u64),
        sip_compression: r.get(o + 21),
        rtp_tar: r.get(o + 22),
        rtp_member: r.get(o + 23),
        rtp_offset: r.get::<_, Option<i64>>(o + 24).map(|v| v.max(0) as u64),
        rtp_len: r.get::<_, Option<i64>>(o + 25).map(|v| v.max(0) as u64),
        rtp_compression: r.get(o + 26),
        dtmf: r.get::<_, Option<String>>(o + 27).unwrap_or_default(),
        fax_pages: r
            .get::<_, Option<i64>>(o + 28)
            .map(|v| v.clamp(0, i64::from(u32::MAX)) as u32),
        fax_result: r.get(o + 29),
        encrypted: r.get::<_, Option<bool>>(o + 30).unwrap_or_default(),
        t38_offered: r.get::<_, Option<bool>>(o + 31).unwrap_or_default(),
        sensor: r.get::<_, Option<String>>(o + 32).unwrap_or_default(),
    }
}

/// The condition that picks one call's stream or T.38 rows: `cdr_id = $1`, and in the
/// partitioned layout `call_start_us = $2` too, which reads one partition; with its
/// parameters.
fn of_call<'a>(
    layout: PgLayout,
    id: &'a i64,
    start_us: &'a i64,
) -> (&'static str, Vec<&'a (dyn ToSql + Sync)>) {
    match layout {
        PgLayout::Plain => ("cdr_id = $1", vec![id]),
        PgLayout::Partitioned => ("cdr_id = $1 AND call_start_us = $2", vec![id, start_us]),
    }
}

impl PgStore {
    /// The groups whose report rollups this store keeps from now on, besides `all`.
    pub fn set_groups(&mut self, groups: std::sync::Arc<groups::Groups>) {
        self.groups = groups;
    }

    /// Connects with a libpq-style connection string (`host=... port=... user=... dbname=...`)
    /// and applies the schema migrations the database lacks ([`crate::migrate`]): a new
    /// database gets the plain tables, an existing one keeps its layout (a database from an
    /// earlier release is upgraded in place, its search columns filled from its rows, once).
    pub fn connect(conninfo: &str) -> Result<PgStore, CdrError> {
        PgStore::connect_with(conninfo, &PgOptions::default())
    }

    /// [`PgStore::connect`] with options: the layout of a new database, and for the
    /// partitioned layout the days created ahead and the retention, which are applied now.
    pub fn connect_with(conninfo: &str, options: &PgOptions) -> Result<PgStore, CdrError> {
        let name = redact(conninfo);
        let wrap = |source| pg_error(&name, source);
        let mut client = Client::connect(conninfo, NoTls).map_err(wrap)?;
        // JIT compiling pays off for long analytic queries, not for these: it would add tens
        // of milliseconds to a totals query whose estimated cost crosses jit_above_cost.
        client.batch_execute("SET jit = off").map_err(wrap)?;
        // The schema's IF [NOT] EXISTS steps answer NOTICEs ("relation ... does not exist,
        // skipping") that would reach the log as if something were wrong.
        client
            .batch_execute("SET client_min_messages = warning")
            .map_err(wrap)?;
        let applied = crate::migrate::apply(
            &mut client,
            &name,
            options.layout,
            crate::migrate::MIGRATIONS,
        )?;
        let mut store = PgStore {
            name,
            client,
            layout: applied.layout,
            options: options.clone(),
            days: BTreeSet::new(),
            maintained: None,
            statements: None,
            upserting: 0,
            groups: Default::default(),
        };
        if store.layout == PgLayout::Partitioned {
            store.reload_days()?;
            // Not a reason to refuse the connection: a reader may lack the right to create
            // tables, a drop may not get its locks; inserts create the days they need, and the
            // first insert of the day tries the maintenance again.
            let today = Day::today();
            match store.maintain(today) {
                Ok(m) if !m.dropped.more => store.maintained = Some(today),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "CDR partition maintenance failed at connect"),
            }
        }
        Ok(store)
    }

    /// The layout of this database's tables.
    pub fn layout(&self) -> PgLayout {
        self.layout
    }

    fn partitioned_only(&self, what: &str) -> Result<(), CdrError> {
        match self.layout {
            PgLayout::Partitioned => Ok(()),
            PgLayout::Plain => Err(CdrError::Schema {
                target: self.name.clone(),
                problem: format!(
                    "{what} needs tables partitioned by day, and these are plain; connect with \
                     the partitioned layout (PgOptions::partitioned) to a new database, or move \
                     this one with cdr::migrate::partition_existing"
                ),
            }),
        }
    }

    fn reload_days(&mut self) -> Result<(), CdrError> {
        self.days = pg_partition::complete_days(&mut self.client).map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The days with partitions, oldest first (partitioned layout; empty for plain tables).
    pub fn partition_days(&mut self) -> Result<Vec<Day>, CdrError> {
        if self.layout == PgLayout::Plain {
            return Ok(Vec::new());
        }
        self.reload_days()?;
        Ok(self.days.iter().copied().collect())
    }

    /// Creates the partitions of `days` that are missing, in one transaction; the days that
    /// lacked any. Inserting creates the days its records need by itself; this is for days
    /// ahead.
    pub fn create_days(
        &mut self,
        days: impl IntoIterator<Item = Day>,
    ) -> Result<Vec<Day>, CdrError> {
        self.partitioned_only("creating day partitions")?;
        let days: BTreeSet<Day> = days.into_iter().collect();
        let wrap = |source| pg_error(&self.name, source);
        let mut tx = self.client.transaction().map_err(wrap)?;
        let created = pg_partition::create_days_in(&mut tx, &days).map_err(wrap)?;
        tx.commit().map_err(wrap)?;
        self.days.extend(days);
        Ok(created)
    }

    /// Retention: detaches and drops the partitions of every table for the days before `day`,
    /// oldest first, at most [`RETENTION_DAYS_PER_CALL_MAX`] days in this call (one
    /// transaction; `more` says whether older days are left for the next call). Call rows are
    /// never deleted one by one. In the same transaction, the alerts resolved and the silences
    /// ended before `day` are deleted ([`crate::alerts`]: a few rows a day, a plain table).
    /// Waits at most [`pg_partition::RETENTION_LOCK_TIMEOUT_MS`] for the tables' locks, and on
    /// failure drops nothing.
    pub fn drop_days_before(&mut self, day: Day) -> Result<DroppedDays, CdrError> {
        self.partitioned_only("dropping days")?;
        let name = self.name.clone();
        let wrap = |source| pg_error(&name, source);
        let mut tx = self.client.transaction().map_err(wrap)?;
        let dropped =
            pg_partition::drop_days_in(&mut tx, day, RETENTION_DAYS_PER_CALL_MAX).map_err(wrap)?;
        if let Some(cut_us) = day.start_us() {
            for sql in [
                crate::alerts::PG_ALERT_RETENTION,
                crate::alerts::PG_SILENCE_RETENTION,
            ] {
                tx.execute(sql, &[&cut_us]).map_err(wrap)?;
            }
        }
        tx.commit().map_err(wrap)?;
        for d in &dropped.days {
            self.days.remove(d);
        }
        if !dropped.days.is_empty() {
            tracing::info!(target = %self.name, days = ?dropped.days.iter().map(Day::to_string).collect::<Vec<_>>(), more = dropped.more, "CDR days dropped by retention");
        }
        Ok(dropped)
    }

    /// The daily upkeep of the partitioned layout, as of `today`: creates today and the
    /// [`PgOptions::days_ahead`] days after it, and with [`PgOptions::retention_days`] drops
    /// the days before `today - retention_days` (at most [`RETENTION_DAYS_PER_CALL_MAX`]). The
    /// store runs it at connect and at its first insert of each UTC day; a collector may call
    /// it on a timer as well. Nothing to do for plain tables.
    pub fn maintain(&mut self, today: Day) -> Result<Maintained, CdrError> {
        let mut out = Maintained::default();
        if self.layout == PgLayout::Plain {
            return Ok(out);
        }
        let ahead: Vec<Day> = (0..=i64::from(self.options.days_ahead))
            .map(|n| today.plus(n))
            .filter(|d| !self.days.contains(d))
            .collect();
        if !ahead.is_empty() {
            out.created = self.create_days(ahead)?;
        }
        if let Some(keep) = self.options.retention_days {
            out.dropped = self.drop_days_before(today.plus(-i64::from(keep)))?;
        }
        Ok(out)
    }

    /// Partitioned: the once-a-day maintenance, then the partitions of every day `records`
    /// need. A maintenance that fails (its drop could not get the tables' locks) is logged and
    /// tried again at the next batch; the insert goes on.
    fn prepare_days(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        let today = Day::today();
        if self.maintained != Some(today) {
            match self.maintain(today) {
                // Retention days left over: the next batch drops the next ones.
                Ok(m) if m.dropped.more => {}
                Ok(_) => self.maintained = Some(today),
                Err(e) => {
                    tracing::warn!(error = %e, "CDR partition maintenance failed; it is tried again with the next batch")
                }
            }
        }
        let mut need = BTreeSet::new();
        for r in records {
            pg_partition::record_days(r, &mut need);
        }
        need.retain(|d| !self.days.contains(d));
        if !need.is_empty() {
            let created = self.create_days(need)?;
            let late: Vec<String> = created
                .iter()
                .filter(|d| **d < today)
                .map(Day::to_string)
                .collect();
            if !late.is_empty() {
                tracing::info!(target = %self.name, days = ?late, "CDR partitions created for late records");
            }
        }
        Ok(())
    }

    fn err(&self, source: postgres::Error) -> CdrError {
        pg_error(&self.name, source)
    }

    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The connection string without its password.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// One batch through the prepared statements, in one transaction: as new records, or as
    /// an upsert while records stored before come (a batch of new records that meets one is
    /// rolled back and written again as an upsert; after [`UPSERT_BATCHES_AFTER_CONFLICT`]
    /// upserts that updated no call, batches go as new records again).
    fn insert_batch(&mut self, records: &[CdrRecord]) -> Result<(), postgres::Error> {
        if self.upserting == 0 {
            match self.insert_mode(Mode::New, records) {
                Err(e) if pg_insert::stored_before(&e) => {}
                r => return r.map(|_| ()),
            }
            self.upserting = UPSERT_BATCHES_AFTER_CONFLICT;
        }
        let out = self.insert_mode(Mode::Upsert, records)?;
        self.upserting = match out.updated {
            0 => self.upserting - 1,
            _ => UPSERT_BATCHES_AFTER_CONFLICT,
        };
        Ok(())
    }

    fn insert_mode(
        &mut self,
        mode: Mode,
        records: &[CdrRecord],
    ) -> Result<Outcome, postgres::Error> {
        if self.statements.is_none() {
            self.statements = Some(Statements::prepare(&mut self.client, self.layout)?);
        }
        let PgStore {
            client,
            statements: Some(st),
            layout,
            groups,
            ..
        } = self
        else {
            unreachable!("prepared above")
        };
        let mut tx = client.transaction()?;
        let out = pg_insert::insert(&mut tx, st, *layout, mode, records, groups)?;
        tx.commit()?;
        Ok(out)
    }
}

/// The parameters of a statement as the `postgres` crate takes them.
pub(crate) fn pg_params(args: &[Arg]) -> Vec<Box<dyn ToSql + Sync>> {
    args.iter()
        .map(|a| -> Box<dyn ToSql + Sync> {
            match a {
                Arg::Int(v) => Box::new(*v),
                Arg::Real(v) => Box::new(*v),
                Arg::Text(v) => Box::new(v.clone()),
                Arg::Blob(v) => Box::new(v.clone()),
                Arg::Null(Ty::Int) => Box::new(None::<i64>),
                Arg::Null(Ty::Real) => Box::new(None::<f64>),
                Arg::Null(Ty::Text) => Box::new(None::<String>),
                Arg::Null(Ty::Blob) => Box::new(None::<Vec<u8>>),
            }
        })
        .collect()
}

/// One column of a row, whatever its type among those our tables use.
fn pg_val(r: &postgres::Row, i: usize) -> Result<Val, postgres::Error> {
    let ty = r.columns()[i].type_().clone();
    Ok(match ty {
        Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map_or(Val::Null, Val::Int),
        Type::INT4 => r
            .try_get::<_, Option<i32>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into())),
        Type::INT2 => r
            .try_get::<_, Option<i16>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into())),
        Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map_or(Val::Null, Val::Real),
        Type::FLOAT4 => r
            .try_get::<_, Option<f32>>(i)?
            .map_or(Val::Null, |v| Val::Real(v.into())),
        Type::BOOL => r
            .try_get::<_, Option<bool>>(i)?
            .map_or(Val::Null, |v| Val::Int(v.into())),
        Type::BYTEA => r
            .try_get::<_, Option<Vec<u8>>>(i)?
            .map_or(Val::Null, Val::Blob),
        _ => r
            .try_get::<_, Option<String>>(i)?
            .map_or(Val::Null, Val::Text),
    })
}

/// The search's statements on a connection or a transaction ([`Exec`]).
pub(crate) struct PgExec<'a, C: GenericClient> {
    client: &'a mut C,
    target: &'a str,
    layout: PgLayout,
}

impl<'a, C: GenericClient> PgExec<'a, C> {
    pub(crate) fn new(client: &'a mut C, target: &'a str, layout: PgLayout) -> PgExec<'a, C> {
        PgExec {
            client,
            target,
            layout,
        }
    }
}

impl<C: GenericClient> Exec for PgExec<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn partitioned(&self) -> bool {
        self.layout == PgLayout::Partitioned
    }

    fn rows(&mut self, sql: &Sql) -> Result<Vec<Vec<Val>>, CdrError> {
        let params = pg_params(&sql.args);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        let target = self.target;
        let rows = self
            .client
            .query(&sql.text, &refs)
            .map_err(|e| pg_error(target, e))?;
        rows.iter()
            .map(|r| (0..r.len()).map(|i| pg_val(r, i)).collect())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pg_error(target, e))
    }

    /// One UPDATE joined to the rows as arrays (`unnest`): a round trip per chunk, not per row.
    fn update_derived(&mut self, rows: &[(i64, search::Derived)]) -> Result<(), CdrError> {
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let col = |f: &dyn Fn(&search::Derived) -> String| -> Vec<String> {
            rows.iter().map(|r| f(&r.1)).collect()
        };
        let sensor = col(&|d| d.sensor.clone());
        let caller_rev = col(&|d| d.caller_rev.clone());
        let called_rev = col(&|d| d.called_rev.clone());
        let caller_ip: Vec<Option<Vec<u8>>> = rows.iter().map(|r| r.1.caller_ip.clone()).collect();
        let callee_ip: Vec<Option<Vec<u8>>> = rows.iter().map(|r| r.1.callee_ip.clone()).collect();
        let duration: Vec<Option<i64>> = rows.iter().map(|r| r.1.duration_ms).collect();
        let codecs: Vec<Option<String>> = rows.iter().map(|r| r.1.codecs.clone()).collect();
        let loss: Vec<Option<f64>> = rows.iter().map(|r| r.1.loss_max_pct).collect();
        let jitter: Vec<Option<f64>> = rows.iter().map(|r| r.1.jitter_max_ms).collect();
        let target = self.target;
        self.client
            .execute(
                "UPDATE cdr SET sensor = v.sensor, caller_rev = v.caller_rev, \
                 called_rev = v.called_rev, caller_ip = v.caller_ip, callee_ip = v.callee_ip, \
                 duration_ms = v.duration_ms, codecs = v.codecs, loss_max_pct = v.loss_max_pct, \
                 jitter_max_ms = v.jitter_max_ms \
                 FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bytea[], \
                 $6::bytea[], $7::bigint[], $8::text[], $9::float8[], $10::float8[]) \
                 AS v(id, sensor, caller_rev, called_rev, caller_ip, callee_ip, duration_ms, \
                 codecs, loss_max_pct, jitter_max_ms) WHERE cdr.id = v.id",
                &[
                    &ids,
                    &sensor,
                    &caller_rev,
                    &called_rev,
                    &caller_ip,
                    &callee_ip,
                    &duration,
                    &codecs,
                    &loss,
                    &jitter,
                ],
            )
            .map(|_| ())
            .map_err(|e| pg_error(target, e))
    }

    /// The statement (see [`crate::plan::walk_sql`]) stops by itself; its rows are the matches
    /// and, when the budget ran out, the last row read (`rn` = budget).
    fn walk(&mut self, sql: &Sql, _want: usize, budget: usize) -> Result<Walked, CdrError> {
        let mut w = Walked::default();
        for r in self.rows(sql)? {
            let mut c = crate::plan::Cols::new(r);
            let key = Cursor {
                time_us: c.i64()?,
                id: c.i64()?,
            };
            if c.i64()? == 1 {
                w.keys.push(key);
            }
            if c.i64()? == budget as i64 {
                w.boundary = Some(key);
            }
        }
        Ok(w)
    }
}

impl Exec for PgStore {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn partitioned(&self) -> bool {
        self.layout == PgLayout::Partitioned
    }

    fn rows(&mut self, sql: &Sql) -> Result<Vec<Vec<Val>>, CdrError> {
        PgExec::new(&mut self.client, &self.name, self.layout).rows(sql)
    }

    fn update_derived(&mut self, rows: &[(i64, search::Derived)]) -> Result<(), CdrError> {
        PgExec::new(&mut self.client, &self.name, self.layout).update_derived(rows)
    }

    fn walk(&mut self, sql: &Sql, want: usize, budget: usize) -> Result<Walked, CdrError> {
        PgExec::new(&mut self.client, &self.name, self.layout).walk(sql, want, budget)
    }
}

/// Whether an insert failed for want of a partition (one dropped by another connection since
/// this one listed them): PostgreSQL's `no partition of relation ... found for row`.
fn no_partition(e: &postgres::Error) -> bool {
    e.code() == Some(&postgres::error::SqlState::CHECK_VIOLATION)
        && e.as_db_error()
            .is_some_and(|d| d.message().starts_with("no partition of relation"))
}

impl CdrStore for PgStore {
    /// The batch in one transaction ([`crate::pg_insert`]); in the partitioned layout the days
    /// it needs are created first, and a batch refused for want of a partition (another
    /// connection dropped a day this one knew) is tried once more with the days listed again.
    fn insert_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.layout == PgLayout::Partitioned {
            self.prepare_days(records)?;
        }
        match self.insert_batch(records) {
            Err(e) if self.layout == PgLayout::Partitioned && no_partition(&e) => {
                self.reload_days()?;
                self.prepare_days(records)?;
                self.insert_batch(records).map_err(|e| self.err(e))
            }
            r => r.map_err(|e| self.err(e)),
        }
    }

    fn t38(&mut self, call_id: &str) -> Result<Vec<CdrT38>, CdrError> {
        let call = self
            .client
            .query_opt(
                "SELECT id, start_us FROM cdr WHERE call_id = $1 ORDER BY id DESC LIMIT 1",
                &[&call_id],
            )
            .map_err(|e| self.err(e))?;
        let Some(call) = call else {
            return Ok(Vec::new());
        };
        let (id, start): (i64, i64) = (call.get(0), call.get(1));
        let (cond, params) = of_call(self.layout, &id, &start);
        let sql = format!(
            "SELECT {} FROM cdr_t38 WHERE {cond} ORDER BY start_us, id",
            crate::T38_COLUMNS
        );
        let rows = self.client.query(&sql, &params).map_err(|e| self.err(e))?;
        let n = |v: i64| v.max(0) as u64;
        Ok(rows
            .iter()
            .map(|r| CdrT38 {
                src: r.get(0),
                dst: r.get(1),
                start_us: r.get(2),
                end_us: r.get(3),
                packets: n(r.get(4)),
                bytes: n(r.get(5)),
                lost: n(r.get(6)),
                duplicates: n(r.get(7)),
                out_of_order: n(r.get(8)),
                types: r.get(9),
                redundant: r.get::<_, Option<i64>>(10).unwrap_or(0).max(0) as u64,
                fec: r.get::<_, Option<i64>>(11).unwrap_or(0).max(0) as u64,
                t30: r.get::<_, Option<String>>(12).unwrap_or_default(),
            })
            .collect())
    }

    fn list(&mut self, f: &CdrFilter) -> Result<Vec<CdrCall>, CdrError> {
        let mut sql = format!("SELECT {CALL_COLUMNS} FROM cdr WHERE TRUE");
        let mut args: Vec<Box<dyn ToSql + Sync>> = Vec::new();
        if let Some(v) = f.since_us {
            args.push(Box::new(v));
            sql += &format!(" AND start_us >= ${}", args.len());
        }
        if let Some(v) = f.until_us {
            args.push(Box::new(v));
            sql += &format!(" AND start_us < ${}", args.len());
        }
        if let Some(n) = &f.number {
            args.push(Box::new(format!("%{n}%")));
            sql += &format!(" AND (caller LIKE ${0} OR called LIKE ${0})", args.len());
        }
        if let Some(v) = f.last_response {
            args.push(Box::new(v as i32));
            sql += &format!(" AND last_response = ${}", args.len());
        }
        if let Some(v) = f.mos_below {
            args.push(Box::new(v));
            sql += &format!(" AND mos_min < ${}", args.len());
        }
        args.push(Box::new(if f.limit == 0 {
            i64::MAX
        } else {
            f.limit as i64
        }));
        sql += &format!(" ORDER BY start_us DESC, id DESC LIMIT ${}", args.len());
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|b| b.as_ref()).collect();
        let rows = self.client.query(&sql, &params).map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| call_from_row(r, 0)).collect())
    }

    fn show(&mut self, call_id: &str) -> Result<Option<(CdrCall, Vec<CdrStream>)>, CdrError> {
        let row = self
            .client
            .query_opt(
                &format!(
                    "SELECT id, {CALL_COLUMNS} FROM cdr WHERE call_id = $1 ORDER BY id DESC LIMIT 1"
                ),
                &[&call_id],
            )
            .map_err(|e| self.err(e))?;
        let Some(row) = row else { return Ok(None) };
        let id: i64 = row.get(0);
        let call = call_from_row(&row, 1);
        let (cond, params) = of_call(self.layout, &id, &call.start_us);
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT call_id, src, dst, ssrc, payload, start_us, end_us, packets, lost, \
                     duplicates, out_of_order, min_delta_ms, mean_delta_ms, max_delta_ms, \
                     mean_jitter_ms, max_jitter_ms, mos, rtcp_reports, rtcp_fraction_lost_pct, \
                     rtcp_jitter_ms FROM cdr_rtp WHERE {cond} ORDER BY id"
                ),
                &params,
            )
            .map_err(|e| self.err(e))?;
        let streams = rows
            .iter()
            .map(|r| CdrStream {
                call_id: r.get(0),
                src: r.get(1),
                dst: r.get(2),
                ssrc: r.get::<_, i64>(3) as u32,
                payload: r.get(4),
                start_us: r.get(5),
                end_us: r.get(6),
                packets: r.get::<_, i64>(7) as u64,
                lost: r.get(8),
                duplicates: r.get::<_, i64>(9) as u64,
                out_of_order: r.get::<_, i64>(10) as u64,
                min_delta_ms: r.get(11),
                mean_delta_ms: r.get(12),
                max_delta_ms: r.get(13),
                mean_jitter_ms: r.get(14),
                max_jitter_ms: r.get(15),
                mos: r.get(16),
                rtcp_reports: r.get::<_, i64>(17) as u32,
                rtcp_fraction_lost_pct: r.get(18),
                rtcp_jitter_ms: r.get(19),
                // A call's streams are in their call's member.
                ..CdrStream::default()
            })
            .collect();
        Ok(Some((call, streams)))
    }

    fn search(&mut self, q: &CallQuery) -> Result<CallPage, CdrError> {
        search::search(self, q)
    }

    fn totals(&mut self, q: &CallQuery) -> Result<CallTotals, CdrError> {
        search::totals(self, q)
    }

    fn call_by_uid(
        &mut self,
        uid: &str,
    ) -> Result<Option<(CallSummary, Vec<CdrStream>, Vec<CdrT38>)>, CdrError> {
        search::call_by_uid(self, uid)
    }

    fn registrations(&mut self, q: &RegistrationQuery) -> Result<RegistrationPage, CdrError> {
        registration::registrations(self, q)
    }
    fn lone_streams(
        &mut self,
        q: &crate::lone::StreamQuery,
    ) -> Result<crate::lone::LoneStreamPage, CdrError> {
        crate::lone::lone_streams(self, q)
    }

    fn lone_stream_by_uid(
        &mut self,
        uid: &str,
    ) -> Result<Option<crate::lone::LoneStream>, CdrError> {
        crate::lone::lone_stream_by_uid(self, uid)
    }

    fn alert_store(&mut self) -> Option<&mut dyn crate::AlertStore> {
        Some(self)
    }

    fn replay_source(&mut self) -> Option<&mut dyn crate::replay::ReplaySource> {
        Some(self)
    }

    fn report(&mut self, q: &crate::ReportQuery) -> Result<crate::Report, CdrError> {
        let range = q.range()?;
        let hours = crate::rollup::pg_read(&mut self.client, &q.group, range.0, range.1)
            .map_err(|e| self.err(e))?;
        Ok(crate::report::assemble(q, range, hours))
    }

    fn report_groups(&mut self) -> Result<Vec<String>, CdrError> {
        crate::rollup::pg_groups(&mut self.client).map_err(|e| self.err(e))
    }
}
