//! The PostgreSQL backend: the same tables as SQLite ([`PG_SCHEMA`]) and the same search
//! ([`crate::search`]), one transaction per batch, prepared statements. Databases created
//! before the `uid` column get it on connect ([`PG_UPGRADE`]), and those from before the
//! search columns get them, filled from their rows, and their indexes ([`PG_INDEXES`]).

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls};

use crate::plan::{Arg, Dialect, Exec, Sql, Ty, Val, Walked};
use crate::query::Cursor;
use crate::registration::{self, RegistrationPage, RegistrationQuery};
use crate::search::{self, CallPage, CallQuery, CallSummary, CallTotals};
use crate::{
    CdrCall, CdrError, CdrFilter, CdrRecord, CdrStore, CdrStream, CdrT38, LATER_COLUMNS,
    SEARCH_COLUMNS, T38_LATER_COLUMNS,
};

/// The PostgreSQL schema, tables only: the SQLite one with PostgreSQL's types. Indexes:
/// [`PG_INDEXES`].
pub const PG_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS cdr (
    id             BIGSERIAL PRIMARY KEY,
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
    jitter_max_ms  DOUBLE PRECISION
);
CREATE TABLE IF NOT EXISTS cdr_rtp (
    id                      BIGSERIAL PRIMARY KEY,
    cdr_id                  BIGINT REFERENCES cdr(id),
    call_id                 TEXT,
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
    uid                     TEXT
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
";

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

use crate::CALL_COLUMNS;

/// A byte count or offset as PostgreSQL stores it (BIGINT).
fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// CDRs in a PostgreSQL database.
pub struct PgStore {
    /// The connection string without its password, for errors.
    name: String,
    client: Client,
}

fn redact(conninfo: &str) -> String {
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
        sensor: r.get::<_, Option<String>>(o + 30).unwrap_or_default(),
    }
}

/// The names of the current schema's objects of a kind (`columns of a table`, `indexes`).
fn names(client: &mut Client, sql: &str, arg: &str) -> Result<Vec<String>, postgres::Error> {
    Ok(client
        .query(sql, &[&arg])?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect())
}

impl PgStore {
    /// Connects with a libpq-style connection string (`host=... port=... user=... dbname=...`)
    /// and creates the schema if needed. A database from an earlier release gets the columns
    /// and indexes it lacks (the search columns filled from its rows, once).
    pub fn connect(conninfo: &str) -> Result<PgStore, CdrError> {
        let name = redact(conninfo);
        let wrap = |source| CdrError::Postgres {
            target: name.clone(),
            source,
        };
        let mut client = Client::connect(conninfo, NoTls).map_err(wrap)?;
        // JIT compiling pays off for long analytic queries, not for these: it would add tens
        // of milliseconds to a totals query whose estimated cost crosses jit_above_cost.
        client.batch_execute("SET jit = off").map_err(wrap)?;
        // The schema's IF [NOT] EXISTS steps answer NOTICEs ("relation ... does not exist,
        // skipping") that would reach the log as if something were wrong.
        client
            .batch_execute("SET client_min_messages = warning")
            .map_err(wrap)?;
        client.batch_execute(PG_UPGRADE).map_err(wrap)?;
        client.batch_execute(PG_SCHEMA).map_err(wrap)?;
        let column_sql = "SELECT column_name::text FROM information_schema.columns \
                          WHERE table_schema = current_schema() AND table_name = $1";
        let mut fill = false;
        for (table, columns, search) in [
            ("cdr", &LATER_COLUMNS[..], false),
            ("cdr", &SEARCH_COLUMNS[..], true),
            ("cdr_t38", &T38_LATER_COLUMNS[..], false),
        ] {
            let have = names(&mut client, column_sql, table).map_err(wrap)?;
            for (col, _, ty) in columns {
                if !have.iter().any(|h| h == col) {
                    client
                        .batch_execute(&format!(
                            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {col} {ty}"
                        ))
                        .map_err(wrap)?;
                    fill |= search;
                }
            }
        }
        if fill {
            fill = client
                .query_one("SELECT EXISTS (SELECT 1 FROM cdr)", &[])
                .map_err(wrap)?
                .get(0);
        }
        let mut store = PgStore { name, client };
        if fill {
            let n = search::backfill(&mut store)?;
            tracing::info!(target = %store.name, rows = n, "CDR search columns added and filled");
        }
        store.ensure_indexes()?;
        Ok(store)
    }

    /// Creates the indexes that are missing and drops the retired ones. Only what is missing
    /// is touched: `CREATE INDEX IF NOT EXISTS` would take a lock on the table at every connect.
    fn ensure_indexes(&mut self) -> Result<(), CdrError> {
        let have = names(
            &mut self.client,
            "SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema() \
             AND tablename = ANY(string_to_array($1, ','))",
            "cdr,cdr_rtp,cdr_t38,registration",
        )
        .map_err(|e| self.err(e))?;
        let mut sql = String::new();
        for r in PG_RETIRED_INDEXES {
            if have.iter().any(|h| h == r) {
                sql += &format!("DROP INDEX IF EXISTS {r};");
            }
        }
        for (n, def) in PG_INDEXES {
            if !have.iter().any(|h| h == n) {
                sql += &crate::create_index_sql(n, def);
            }
        }
        if !sql.is_empty() {
            self.client.batch_execute(&sql).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn err(&self, source: postgres::Error) -> CdrError {
        CdrError::Postgres {
            target: self.name.clone(),
            source,
        }
    }

    pub(crate) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The connection string without its password.
    pub(crate) fn name(&self) -> &str {
        &self.name
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

impl Exec for PgStore {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn rows(&mut self, sql: &Sql) -> Result<Vec<Vec<Val>>, CdrError> {
        let params = pg_params(&sql.args);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        let rows = self
            .client
            .query(&sql.text, &refs)
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| (0..r.len()).map(|i| pg_val(r, i)).collect())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))
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
            .map_err(|e| self.err(e))
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

impl CdrStore for PgStore {
    fn insert_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        let name = self.name.clone();
        let wrap = |source| CdrError::Postgres {
            target: name.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(wrap)?;
        let ins_call = tx
            .prepare(&crate::call_insert_sql(true, true))
            .map_err(wrap)?;
        let del_streams = tx
            .prepare("DELETE FROM cdr_rtp WHERE cdr_id = $1")
            .map_err(wrap)?;
        let del_t38 = tx
            .prepare("DELETE FROM cdr_t38 WHERE cdr_id = $1")
            .map_err(wrap)?;
        let ins_t38 = tx
            .prepare(&format!(
                "INSERT INTO cdr_t38 (cdr_id, {}, uid) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (uid) DO UPDATE SET cdr_id = excluded.cdr_id, {}",
                crate::T38_COLUMNS,
                crate::upsert_set(crate::T38_COLUMNS)
            ))
            .map_err(wrap)?;
        let ins_stream = tx
            .prepare(&format!(
                "INSERT INTO cdr_rtp ({}, uid) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) \
                 ON CONFLICT (uid) DO UPDATE SET {}",
                crate::STREAM_COLUMNS,
                crate::upsert_set(crate::STREAM_COLUMNS)
            ))
            .map_err(wrap)?;
        let ins_reg = tx
            .prepare(&crate::registration_insert_sql(true))
            .map_err(wrap)?;
        for rec in records {
            let mut cdr_id: Option<i64> = None;
            if let Some(c) = &rec.call {
                let d = search::derive(c, rec.streams.iter().map(search::StreamFigures::from));
                let row = tx
                    .query_one(
                        &ins_call,
                        &[
                            &c.call_id,
                            &c.caller,
                            &c.called,
                            &c.caller_addr,
                            &c.callee_addr,
                            &c.start_us,
                            &c.ringing_us,
                            &c.answer_us,
                            &c.end_us,
                            &c.state,
                            &c.last_response.map(i32::from),
                            &c.last_reason,
                            &c.hangup_by,
                            &c.q850_cause.map(i32::from),
                            &(c.sip_messages as i64),
                            &(c.reinvites as i64),
                            &c.mos_min,
                            &c.sip_tar,
                            &c.sip_member,
                            &opt_i64(c.sip_offset),
                            &opt_i64(c.sip_len),
                            &c.sip_compression,
                            &c.rtp_tar,
                            &c.rtp_member,
                            &opt_i64(c.rtp_offset),
                            &opt_i64(c.rtp_len),
                            &c.rtp_compression,
                            &c.dtmf,
                            &c.fax_pages.map(i64::from),
                            &c.fax_result,
                            &d.sensor,
                            &d.caller_rev,
                            &d.called_rev,
                            &d.caller_ip,
                            &d.callee_ip,
                            &d.duration_ms,
                            &d.codecs,
                            &d.loss_max_pct,
                            &d.jitter_max_ms,
                            &rec.call_uid(),
                        ],
                    )
                    .map_err(wrap)?;
                let id: i64 = row.get(0);
                // Stored before (the same call read again): its streams are replaced.
                tx.execute(&del_streams, &[&id]).map_err(wrap)?;
                tx.execute(&del_t38, &[&id]).map_err(wrap)?;
                cdr_id = Some(id);
            }
            for (i, s) in rec.streams.iter().enumerate() {
                tx.execute(
                    &ins_stream,
                    &[
                        &cdr_id,
                        &s.call_id,
                        &s.src,
                        &s.dst,
                        &(s.ssrc as i64),
                        &s.payload,
                        &s.start_us,
                        &s.end_us,
                        &(s.packets as i64),
                        &s.lost,
                        &(s.duplicates as i64),
                        &(s.out_of_order as i64),
                        &s.min_delta_ms,
                        &s.mean_delta_ms,
                        &s.max_delta_ms,
                        &s.mean_jitter_ms,
                        &s.max_jitter_ms,
                        &s.mos,
                        &(s.rtcp_reports as i64),
                        &s.rtcp_fraction_lost_pct,
                        &s.rtcp_jitter_ms,
                        &rec.stream_uid(i),
                    ],
                )
                .map_err(wrap)?;
            }
            for (i, t) in rec.t38.iter().enumerate() {
                let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                tx.execute(
                    &ins_t38,
                    &[
                        &cdr_id,
                        &t.src,
                        &t.dst,
                        &t.start_us,
                        &t.end_us,
                        &n(t.packets),
                        &n(t.bytes),
                        &n(t.lost),
                        &n(t.duplicates),
                        &n(t.out_of_order),
                        &t.types,
                        &n(t.redundant),
                        &n(t.fec),
                        &t.t30,
                        &rec.t38_uid(i),
                    ],
                )
                .map_err(wrap)?;
            }
            if let Some(reg) = &rec.registration {
                let uid = rec
                    .call_uid()
                    .map_or(Arg::Null(Ty::Text), |u| Arg::Text(u.to_string()));
                let args: Vec<Arg> = std::iter::once(uid)
                    .chain(registration::reg_args(reg))
                    .collect();
                let params = pg_params(&args);
                let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
                tx.execute(&ins_reg, &refs).map_err(wrap)?;
            }
        }
        tx.commit().map_err(wrap)
    }

    fn t38(&mut self, call_id: &str) -> Result<Vec<CdrT38>, CdrError> {
        let sql = format!(
            "SELECT {} FROM cdr_t38 WHERE cdr_id = \
             (SELECT id FROM cdr WHERE call_id = $1 ORDER BY id DESC LIMIT 1) ORDER BY start_us, id",
            crate::T38_COLUMNS
        );
        let rows = self
            .client
            .query(&sql, &[&call_id])
            .map_err(|source| CdrError::Postgres {
                target: self.name.clone(),
                source,
            })?;
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
        let rows = self
            .client
            .query(
                "SELECT call_id, src, dst, ssrc, payload, start_us, end_us, packets, lost, duplicates, out_of_order, \
                 min_delta_ms, mean_delta_ms, max_delta_ms, mean_jitter_ms, max_jitter_ms, mos, rtcp_reports, \
                 rtcp_fraction_lost_pct, rtcp_jitter_ms FROM cdr_rtp WHERE cdr_id = $1 ORDER BY id",
                &[&id],
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
}
