//! Schema migrations of the PostgreSQL CDR database: an ordered list ([`MIGRATIONS`]) applied
//! when a store connects ([`crate::PgStore::connect_with`]), each in a transaction of its own
//! that also records it in `schema_migrations (version, name, applied_at)`.
//!
//! - **Once, in order, by one process.** The whole run holds a session advisory lock
//!   ([`MIGRATION_LOCK_KEY`]): a second process connecting at the same time waits, then finds
//!   the versions recorded and applies nothing.
//! - **All or nothing.** A migration that fails rolls back with its transaction (PostgreSQL's
//!   DDL is transactional), is not recorded, and the error names it
//!   ([`CdrError::Migration`]): the database is as it was before it, and the next connect
//!   tries it again.
//! - **Never backwards.** A database whose recorded versions include one this build does not
//!   know (a newer Tandem migrated it) is refused, so an older build never writes a schema it
//!   does not understand.
//!
//! Version 1 brings the tables to this release in either layout ([`crate::PgLayout`]): a new
//! database gets the layout the connection asks for; a database from an earlier release (no
//! `schema_migrations`, plain tables, perhaps from before the `uid`, archive or search
//! columns) is upgraded in place, the search columns filled from its rows, exactly as
//! connecting did before migrations existed. Later changes of the schema are new entries at
//! the end of [`MIGRATIONS`], never edits of an applied one, and each can apply again to the
//! tables version 1 makes: moving a plain database into partitions ([`partition_existing`])
//! makes version 1's partitioned tables and runs the later migrations on them.
//!
//! **Moving a plain database into day partitions** is not a migration: it rewrites every row
//! and needs twice the space while it runs, so it happens only when asked
//! ([`partition_existing`]), never because a collector connected. The one exception is a plain
//! database that holds no rows at all (the console, say, connected first and created it):
//! with nothing to move, a connection that asks for the partitioned layout converts it.

use postgres::{Client, GenericClient, Transaction};

use crate::pg::{
    PG_INDEXES, PG_RETIRED_INDEXES, PG_SCHEMA, PG_UPGRADE, PgExec, PgLayout, pg_error,
};
use crate::pg_partition::{
    DAY_US, Day, PG_PARTITIONED_INDEXES, PG_PARTITIONED_REG_UID, PG_PARTITIONED_SCHEMA,
};
use crate::{CdrError, LATER_COLUMNS, SEARCH_COLUMNS, T38_LATER_COLUMNS, search};

/// The session advisory lock held while migrations run: "TNDMSCHM".
pub const MIGRATION_LOCK_KEY: i64 = 0x544E_444D_5343_484D;

/// The table that records applied migrations.
pub const SCHEMA_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// What a migration sees: the database's name (for errors) and the layout of its tables
/// (the one they have, or, in a new database, the one asked for).
#[derive(Debug, Clone, Copy)]
pub struct MigrationContext<'a> {
    pub target: &'a str,
    pub layout: PgLayout,
}

/// One step of the schema: applied once, in its own transaction, in the order of `version`.
#[derive(Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub apply: fn(&mut Transaction<'_>, &MigrationContext<'_>) -> Result<(), CdrError>,
}

impl std::fmt::Debug for Migration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Migration({} {})", self.version, self.name)
    }
}

/// The migrations of this release, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "CDR tables, columns and indexes",
        apply: tables,
    },
    Migration {
        version: 2,
        name: "calls say whether they were SRTP and offered T.38",
        apply: call_media_flags,
    },
    Migration {
        version: 3,
        name: "indexes of the streams without a call",
        apply: lone_stream_indexes,
    },
    Migration {
        version: 4,
        name: "streams without a call say where their packets are archived",
        apply: stream_archive_columns,
    },
    Migration {
        version: 5,
        name: "alerts and their silences; registrations by first message",
        apply: alert_tables,
    },
    Migration {
        version: 6,
        name: "calls linked across their legs: call_group, linked_by, link_confidence",
        apply: leg_columns,
    },
    Migration {
        version: 7,
        name: "calls keep their User-Agents, domains, Request-URI user and chosen headers",
        apply: call_fields,
    },
    Migration {
        version: 8,
        name: "registrations say why they fail",
        apply: registration_failure_columns,
    },
    Migration {
        version: 9,
        name: "report rollups per group and hour",
        apply: report_tables,
    },
];

/// Version 6: the columns that link a call's legs ([`crate::LEG_COLUMNS`]) and their index
/// ([`crate::CALL_GROUP_INDEX`]), in either layout (a partitioned parent passes both to its
/// days). Rows stored before keep NULL: each is its own call. Each `IF NOT EXISTS`, so this
/// applies again to version 1's tables.
fn leg_columns(tx: &mut Transaction<'_>, cx: &MigrationContext<'_>) -> Result<(), CdrError> {
    tx.batch_execute(&crate::pg_leg_columns_sql())
        .map_err(|e| pg_error(cx.target, e))
}

/// Version 7: `cdr`'s columns of [`crate::fields`] and their indexes, in either layout (a
/// partitioned parent passes both to its days, and days made later copy them).
fn call_fields(tx: &mut Transaction<'_>, cx: &MigrationContext<'_>) -> Result<(), CdrError> {
    tx.batch_execute(&crate::fields::pg_migrate_sql())
        .map_err(|e| pg_error(cx.target, e))
}

/// The [`LATER_COLUMNS`] that version 1 adds; the others come with the migrations after it.
pub const V1_LATER_COLUMNS: usize = 13;

/// Version 3: the partial indexes of the search of streams stored without a call
/// ([`crate::lone`]), in the context's layout. On a partitioned table they are created on
/// the parent, which builds them on every day it has and on each day attached later.
fn lone_stream_indexes(
    tx: &mut Transaction<'_>,
    cx: &MigrationContext<'_>,
) -> Result<(), CdrError> {
    tx.batch_execute(&lone_index_sql(cx.layout))
        .map_err(|e| pg_error(cx.target, e))
}

/// Version 4: `cdr_rtp`'s archive columns ([`crate::STREAM_LATER_COLUMNS`]: a stream without a
/// call has its packets in a member of its own), in either layout (a partitioned parent passes
/// them to its days, and days made later copy them). Each is added only where it is missing,
/// so this applies again to the tables version 1 makes.
fn stream_archive_columns(
    tx: &mut Transaction<'_>,
    cx: &MigrationContext<'_>,
) -> Result<(), CdrError> {
    let adds: Vec<String> = crate::STREAM_LATER_COLUMNS
        .iter()
        .map(|(name, _, ty)| format!("ADD COLUMN IF NOT EXISTS {name} {ty}"))
        .collect();
    tx.batch_execute(&format!("ALTER TABLE cdr_rtp {}", adds.join(", ")))
        .map_err(|e| pg_error(cx.target, e))
}

/// Version 8: `registration`'s columns of why a chain fails
/// ([`crate::registration::REG_LATER_COLUMNS`]), in either layout (a partitioned parent passes
/// them to its days). `ADD COLUMN IF NOT EXISTS` with no default rewrites no row: the rows
/// stored before keep `failure` NULL and are read by their result.
fn registration_failure_columns(
    tx: &mut Transaction<'_>,
    cx: &MigrationContext<'_>,
) -> Result<(), CdrError> {
    let adds: Vec<String> = crate::registration::REG_LATER_COLUMNS
        .iter()
        .map(|(name, _, ty)| format!("ADD COLUMN IF NOT EXISTS {name} {ty}"))
        .collect();
    tx.batch_execute(&format!("ALTER TABLE registration {}", adds.join(", ")))
        .map_err(|e| pg_error(cx.target, e))
}

/// Version 5: tables `alert` and `alert_silence` ([`crate::alerts`]), plain in either layout
/// (alerts are few; retention deletes them row by row), and the index of registrations by
/// their first message that [`crate::replay`] reads them in (on a partitioned parent, built on
/// every day). Each `IF NOT EXISTS`, so this applies again to version 1's tables.
fn alert_tables(tx: &mut Transaction<'_>, cx: &MigrationContext<'_>) -> Result<(), CdrError> {
    tx.batch_execute(crate::alerts::PG_ALERT_SCHEMA)
        .map_err(|e| pg_error(cx.target, e))
}

/// Version 9: table `report_hour` ([`crate::report`]), plain in either layout (a row per group
/// and hour: a year of one group is 8,760 rows), `IF NOT EXISTS`. Calls stored before it are
/// counted by [`crate::PgStore::rebuild_reports`], an explicit step.
fn report_tables(tx: &mut Transaction<'_>, cx: &MigrationContext<'_>) -> Result<(), CdrError> {
    tx.batch_execute(crate::rollup::PG_TABLE)
        .map_err(|e| pg_error(cx.target, e))
}

/// The lone streams' indexes of a layout.
fn lone_index_sql(layout: PgLayout) -> String {
    let list = match layout {
        PgLayout::Plain => &crate::lone::PG_LONE_INDEXES,
        PgLayout::Partitioned => &crate::lone::PG_PARTITIONED_LONE_INDEXES,
    };
    list.iter()
        .map(|(n, d)| crate::create_index_sql(n, d))
        .collect()
}

/// What [`apply`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The layout of the tables now.
    pub layout: PgLayout,
    /// The versions applied by this call, in order (empty when the database was current).
    pub versions: Vec<i64>,
    /// An empty plain database was converted to the partitioned layout.
    pub converted: bool,
}

/// Version 1: the tables, their later columns and their indexes, in the context's layout.
fn tables(tx: &mut Transaction<'_>, cx: &MigrationContext<'_>) -> Result<(), CdrError> {
    let wrap = |e| pg_error(cx.target, e);
    match cx.layout {
        PgLayout::Plain => plain_tables(tx, cx.target),
        PgLayout::Partitioned => {
            tx.batch_execute(PG_PARTITIONED_SCHEMA).map_err(wrap)?;
            tx.batch_execute(&partitioned_index_sql()).map_err(wrap)
        }
    }
}

/// Version 2: `cdr.encrypted` (an offer or answer was SRTP) and `cdr.t38_offered`, in either
/// layout (a partitioned parent passes the columns to its days, and days made later copy them).
fn call_media_flags(tx: &mut Transaction<'_>, cx: &MigrationContext<'_>) -> Result<(), CdrError> {
    tx.batch_execute(
        "ALTER TABLE cdr ADD COLUMN IF NOT EXISTS encrypted BOOLEAN, \
         ADD COLUMN IF NOT EXISTS t38_offered BOOLEAN",
    )
    .map_err(|e| pg_error(cx.target, e))
}

/// Every index of the partitioned layout, created on the parents.
fn partitioned_index_sql() -> String {
    PG_PARTITIONED_INDEXES
        .iter()
        .chain([&PG_PARTITIONED_REG_UID])
        .map(|(n, d)| crate::create_index_sql(n, d))
        .collect()
}

/// The names of a kind of object of the current schema (`sql` takes one text parameter).
fn names(c: &mut impl GenericClient, sql: &str, arg: &str) -> Result<Vec<String>, postgres::Error> {
    Ok(c.query(sql, &[&arg])?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect())
}

/// The plain tables as this release has them: created, or upgraded from any earlier release
/// (the `uid` column, the later columns, the search columns filled from the rows, the search
/// indexes instead of the retired ones). Only what is missing is touched.
fn plain_tables(tx: &mut Transaction<'_>, target: &str) -> Result<(), CdrError> {
    let wrap = |e| pg_error(target, e);
    tx.batch_execute(PG_UPGRADE).map_err(wrap)?;
    tx.batch_execute(PG_SCHEMA).map_err(wrap)?;
    let column_sql = "SELECT column_name::text FROM information_schema.columns \
                      WHERE table_schema = current_schema() AND table_name = $1";
    let mut fill = false;
    for (table, columns, search) in [
        ("cdr", &LATER_COLUMNS[..V1_LATER_COLUMNS], false),
        ("cdr", &SEARCH_COLUMNS[..], true),
        ("cdr_t38", &T38_LATER_COLUMNS[..], false),
    ] {
        let have = names(tx, column_sql, table).map_err(wrap)?;
        for (col, _, ty) in columns {
            if !have.iter().any(|h| h == col) {
                tx.batch_execute(&format!(
                    "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {col} {ty}"
                ))
                .map_err(wrap)?;
                fill |= search;
            }
        }
    }
    if fill {
        let rows: bool = tx
            .query_one("SELECT EXISTS (SELECT 1 FROM cdr)", &[])
            .map_err(wrap)?
            .get(0);
        if rows {
            let n = search::backfill(&mut PgExec::new(&mut *tx, target, PgLayout::Plain))?;
            tracing::info!(target = %target, rows = n, "CDR search columns added and filled");
        }
    }
    let have = names(
        tx,
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = current_schema() \
         AND tablename = ANY(string_to_array($1, ','))",
        "cdr,cdr_rtp,cdr_t38,registration",
    )
    .map_err(wrap)?;
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
        tx.batch_execute(&sql).map_err(wrap)?;
    }
    Ok(())
}

/// The layout of the `cdr` table in the current schema, `None` when there is none.
pub(crate) fn existing_layout(
    c: &mut impl GenericClient,
) -> Result<Option<PgLayout>, postgres::Error> {
    let row = c.query_opt(
        "SELECT relkind::text FROM pg_class WHERE relname = 'cdr' \
         AND relnamespace = current_schema()::regnamespace",
        &[],
    )?;
    Ok(row.map(|r| {
        if r.get::<_, String>(0) == "p" {
            PgLayout::Partitioned
        } else {
            PgLayout::Plain
        }
    }))
}

/// Runs `body` holding the migration lock, and releases it whatever happened.
fn locked<T>(
    client: &mut Client,
    target: &str,
    body: impl FnOnce(&mut Client) -> Result<T, CdrError>,
) -> Result<T, CdrError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .map_err(|e| pg_error(target, e))?;
    let out = body(client);
    // A connection that broke has lost the lock with it: nothing to release.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY]);
    out
}

/// Brings the database to `migrations` (normally [`MIGRATIONS`]) under the migration lock:
/// creates `schema_migrations`, applies each version not recorded yet, in order, each in its
/// transaction, and, when `want` is [`PgLayout::Partitioned`] and the database has empty
/// plain tables, converts them ([`partition_existing`]'s step, with nothing to move). A plain
/// database with rows stays plain and is refused ([`CdrError::Schema`]) when `want` is
/// partitioned; a partitioned one stays partitioned whatever `want` says.
pub fn apply(
    client: &mut Client,
    target: &str,
    want: PgLayout,
    migrations: &[Migration],
) -> Result<Applied, CdrError> {
    locked(client, target, |client| {
        let mut applied = migrate_locked(client, target, want, migrations)?;
        if want == PgLayout::Partitioned && applied.layout == PgLayout::Plain {
            if has_rows(client).map_err(|e| pg_error(target, e))? {
                return Err(CdrError::Schema {
                    target: target.to_string(),
                    problem: "its CDR tables are plain (not partitioned by day) and hold rows, \
                              and this connection asks for day partitions; moving the rows is \
                              an explicit step: run cdr::migrate::partition_existing on it \
                              (it rewrites every row, in one transaction, and needs the space \
                              of the tables twice), or connect with the plain layout"
                        .to_string(),
                });
            }
            convert(client, target)?;
            tracing::info!(target = %target, "empty plain CDR tables converted to day partitions");
            applied.layout = PgLayout::Partitioned;
            applied.converted = true;
        }
        Ok(applied)
    })
}

/// [`apply`]'s migrations, the lock held.
fn migrate_locked(
    client: &mut Client,
    target: &str,
    want: PgLayout,
    migrations: &[Migration],
) -> Result<Applied, CdrError> {
    let wrap = |e| pg_error(target, e);
    client.batch_execute(SCHEMA_MIGRATIONS).map_err(wrap)?;
    let done: Vec<i64> = client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .map_err(wrap)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if done
        .iter()
        .any(|v| !migrations.iter().any(|m| m.version == *v))
    {
        let known = migrations.iter().map(|m| m.version).max().unwrap_or(0);
        let found = done.iter().copied().max().unwrap_or(0);
        return Err(CdrError::Schema {
            target: target.to_string(),
            problem: format!(
                "its schema is at migration {found} (table schema_migrations), and this Tandem \
                 knows migrations up to {known}: a newer Tandem migrated it, and this one leaves \
                 it untouched rather than misread it. Run the newer Tandem again, or restore the \
                 dump of the database taken before the upgrade (README, \"Rolling back\")"
            ),
        });
    }
    let layout = existing_layout(client).map_err(wrap)?.unwrap_or(want);
    let cx = MigrationContext { target, layout };
    let mut todo: Vec<&Migration> = migrations
        .iter()
        .filter(|m| !done.contains(&m.version))
        .collect();
    todo.sort_by_key(|m| m.version);
    let mut versions = Vec::new();
    for m in todo {
        let failed = |source: CdrError| CdrError::Migration {
            target: target.to_string(),
            version: m.version,
            name: m.name.to_string(),
            source: Box::new(source),
        };
        let mut tx = client
            .transaction()
            .map_err(|e| failed(pg_error(target, e)))?;
        (m.apply)(&mut tx, &cx).map_err(failed)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .map_err(|e| failed(pg_error(target, e)))?;
        tx.commit().map_err(|e| failed(pg_error(target, e)))?;
        tracing::info!(target = %target, version = m.version, name = m.name, "CDR schema migration applied");
        versions.push(m.version);
    }
    // The layout the tables have now: a new database got the one asked for.
    let layout = existing_layout(client).map_err(wrap)?.unwrap_or(layout);
    Ok(Applied {
        layout,
        versions,
        converted: false,
    })
}

/// Whether any of the four tables holds a row.
fn has_rows(c: &mut impl GenericClient) -> Result<bool, postgres::Error> {
    Ok(c.query_one(
        "SELECT EXISTS (SELECT 1 FROM cdr) OR EXISTS (SELECT 1 FROM cdr_rtp) \
         OR EXISTS (SELECT 1 FROM cdr_t38) OR EXISTS (SELECT 1 FROM registration)",
        &[],
    )?
    .get(0))
}

/// What [`partition_existing`] moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partitioned {
    pub calls: u64,
    pub streams: u64,
    pub t38: u64,
    pub registrations: u64,
    /// The days created for them.
    pub days: u64,
    /// The database was partitioned already: nothing was done.
    pub already: bool,
}

/// Moves a plain CDR database into the day-partitioned layout, explicitly: applies the
/// migrations first (so the plain tables are current), then, in one transaction under the
/// migration lock, renames the plain tables aside, creates the partitioned ones and the
/// partitions of every day the rows name, copies every row (ids kept, each stream given its
/// call's start), drops the plain tables, builds the indexes and moves the id sequences past
/// the highest id. Readers and writers wait for it (the tables are locked); it needs the space
/// of the tables twice while it runs; a failure leaves the plain database as it was.
pub fn partition_existing(conninfo: &str) -> Result<Partitioned, CdrError> {
    let target = crate::pg::redact(conninfo);
    let mut client =
        Client::connect(conninfo, postgres::NoTls).map_err(|e| pg_error(&target, e))?;
    client
        .batch_execute("SET client_min_messages = warning")
        .map_err(|e| pg_error(&target, e))?;
    locked(&mut client, &target, |client| {
        let applied = migrate_locked(client, &target, PgLayout::Plain, MIGRATIONS)?;
        if applied.layout == PgLayout::Partitioned {
            return Ok(Partitioned {
                already: true,
                ..Partitioned::default()
            });
        }
        convert(client, &target)
    })
}

/// The plain tables moved into partitions, in one transaction (the migration lock held).
fn convert(client: &mut Client, target: &str) -> Result<Partitioned, CdrError> {
    let wrap = |e| pg_error(target, e);
    let mut tx = client.transaction().map_err(wrap)?;
    tx.batch_execute("LOCK TABLE cdr, cdr_rtp, cdr_t38, registration IN ACCESS EXCLUSIVE MODE")
        .map_err(wrap)?;
    // Aside: the tables, their id sequences and their indexes (index names are per schema,
    // and the new tables take the same ones).
    let mut sql = String::new();
    for t in ["cdr", "cdr_rtp", "cdr_t38", "registration"] {
        let seq: Option<String> = tx
            .query_one("SELECT pg_get_serial_sequence($1, 'id')", &[&t])
            .map_err(wrap)?
            .get(0);
        sql += &format!("ALTER TABLE {t} RENAME TO {t}_plain;");
        if let Some(seq) = seq {
            // A name the catalog gave, already quoted as needed.
            sql += &format!("ALTER SEQUENCE {seq} RENAME TO {t}_plain_id_seq;");
        }
    }
    tx.batch_execute(&sql).map_err(wrap)?;
    tx.batch_execute(
        "DO $$ DECLARE r record; BEGIN \
         FOR r IN SELECT c.relname AS idx FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE i.indrelid IN ('cdr_plain'::regclass, 'cdr_rtp_plain'::regclass, \
         'cdr_t38_plain'::regclass, 'registration_plain'::regclass) LOOP \
         EXECUTE format('ALTER INDEX %I RENAME TO %I', r.idx, left(r.idx, 50) || '_plain'); \
         END LOOP; END $$",
    )
    .map_err(wrap)?;
    tx.batch_execute(PG_PARTITIONED_SCHEMA).map_err(wrap)?;
    // Those are version 1's tables: the migrations after it bring them to this release (each
    // is written to apply again to tables version 1 just made).
    let cx = MigrationContext {
        target,
        layout: PgLayout::Partitioned,
    };
    for m in MIGRATIONS.iter().filter(|m| m.version > 1) {
        (m.apply)(&mut tx, &cx)?;
    }
    // The days of every row: calls by their start, streams and T.38 flows by their call's
    // (their own without one), registrations by their first message.
    let days: std::collections::BTreeSet<Day> = tx
        .query(
            "SELECT DISTINCT floor(t::numeric / $1::bigint)::bigint FROM ( \
             SELECT start_us AS t FROM cdr_plain \
             UNION ALL SELECT r.start_us FROM cdr_rtp_plain r WHERE r.cdr_id IS NULL \
             OR NOT EXISTS (SELECT 1 FROM cdr_plain c WHERE c.id = r.cdr_id) \
             UNION ALL SELECT f.start_us FROM cdr_t38_plain f WHERE f.cdr_id IS NULL \
             OR NOT EXISTS (SELECT 1 FROM cdr_plain c WHERE c.id = f.cdr_id) \
             UNION ALL SELECT first_us FROM registration_plain) a",
            &[&DAY_US],
        )
        .map_err(wrap)?
        .iter()
        .map(|r| Day::from_days(r.get(0)))
        .collect();
    crate::pg_partition::create_days_in(&mut tx, &days).map_err(wrap)?;
    let calls_cols = format!(
        "id, {}, {}, uid",
        crate::CALL_COLUMNS,
        search::DERIVED_COLUMNS
    );
    let stream_cols = crate::STREAM_COLUMNS.replacen("cdr_id, ", "", 1);
    let t38_cols = crate::T38_COLUMNS;
    let reg_cols = format!(
        "id, uid, {}, src_ip, dst_ip",
        crate::registration::REG_COLUMNS
    );
    let prefixed = |cols: &str, p: &str| -> String {
        cols.split(',')
            .map(|c| format!("{p}.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let moved: Vec<u64> = [
        format!("INSERT INTO cdr ({calls_cols}) SELECT {calls_cols} FROM cdr_plain"),
        format!(
            "INSERT INTO cdr_rtp (id, cdr_id, call_start_us, {stream_cols}, uid) \
             SELECT r.id, r.cdr_id, COALESCE(c.start_us, r.start_us), {}, r.uid \
             FROM cdr_rtp_plain r LEFT JOIN cdr_plain c ON c.id = r.cdr_id",
            prefixed(&stream_cols, "r")
        ),
        format!(
            "INSERT INTO cdr_t38 (id, cdr_id, call_start_us, {t38_cols}, uid) \
             SELECT f.id, f.cdr_id, COALESCE(c.start_us, f.start_us), {}, f.uid \
             FROM cdr_t38_plain f LEFT JOIN cdr_plain c ON c.id = f.cdr_id",
            prefixed(t38_cols, "f")
        ),
        format!("INSERT INTO registration ({reg_cols}) SELECT {reg_cols} FROM registration_plain"),
    ]
    .iter()
    .map(|sql| tx.execute(sql.as_str(), &[]))
    .collect::<Result<_, _>>()
    .map_err(wrap)?;
    tx.batch_execute("DROP TABLE cdr_t38_plain, cdr_rtp_plain, cdr_plain, registration_plain")
        .map_err(wrap)?;
    tx.batch_execute(&partitioned_index_sql()).map_err(wrap)?;
    for t in ["cdr", "cdr_rtp", "cdr_t38", "registration"] {
        // Our own table names; the sequence continues past the highest id moved.
        tx.execute(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{t}', 'id'), \
                 COALESCE((SELECT max(id) FROM {t}), 0) + 1, false)"
            ),
            &[],
        )
        .map_err(wrap)?;
    }
    tx.commit().map_err(wrap)?;
    for t in ["cdr", "cdr_rtp", "cdr_t38", "registration"] {
        client
            .batch_execute(&format!("ANALYZE {t}"))
            .map_err(wrap)?;
    }
    let out = Partitioned {
        calls: moved[0],
        streams: moved[1],
        t38: moved[2],
        registrations: moved[3],
        days: days.len() as u64,
        already: false,
    };
    tracing::info!(target = %target, ?out, "plain CDR tables moved into day partitions");
    Ok(out)
}
