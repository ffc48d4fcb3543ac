//! The day-partitioned layout of the PostgreSQL CDR tables ([`crate::PgLayout::Partitioned`]),
//! the collector's: each table is declaratively partitioned by `RANGE` on its call's start
//! time, one partition per UTC day, so that retention drops whole days and never deletes
//! rows.
//!
//! | table | partition key | conflict key (upsert) | primary key |
//! |---|---|---|---|
//! | `cdr` | `start_us` | `(uid, start_us)` | `(start_us, id)`, also the time index |
//! | `cdr_rtp` | `call_start_us`: its call's start, or its own without a call | `(uid, call_start_us)` | none |
//! | `cdr_t38` | `call_start_us`, the same | `(uid, call_start_us)` | none |
//! | `registration` | `first_us`, the chain's first message | `(uid, first_us)` | `(id, first_us)` |
//!
//! A unique constraint on a partitioned table must hold its partition key, hence the conflict
//! keys. A record's uid already holds its start (`sensor|Call-ID|start_us`,
//! [`crate::CdrRecord::identity`]), and a stream's row takes its call's start, so each key
//! still names one record of one sensor: a replay finds the row it stored before, in the same
//! partition, and updates it. Streams live in their call's day, so dropping a day drops its
//! streams with it, and a call's streams are found through the partition key
//! (`cdr_id = $1 AND call_start_us = $2` reads one partition).
//!
//! **Foreign keys**: none in this layout (the plain layout keeps `cdr_rtp.cdr_id REFERENCES
//! cdr(id)`). A key into a partitioned table would cost every stream insert a locked lookup in
//! `cdr`, and a day's `cdr` partition could no longer be detached before its streams' were
//! checked. Integrity is kept by the only writer instead: [`crate::CdrStore::insert_records`]
//! writes a call and its streams in one transaction, the streams carrying the id the call's row
//! got (`cdr_id`) and its start (`call_start_us`), and replaces the streams of a call it
//! updates in the same transaction; retention drops a day's partitions of all four tables in
//! one transaction. Readers go from a call to its streams, never the other way.
//!
//! **Creating days**: today and the next [`PARTITION_DAYS_AHEAD`] days at connect and at each
//! maintenance ([`crate::PgStore::maintain`], which an inserting store also runs once per UTC
//! day), and any other day when a record for it arrives: a sensor that replays a week-old
//! journal gets its old days created, and nothing is lost. There is no `DEFAULT` partition:
//! rows in it could only leave by `DELETE`, every later day would have to scan it (under lock)
//! before it could be attached, and a search would read it whatever its time range. Times
//! outside the years 1 to 9999 go to two edge partitions (`_p_early`, `_p_late`). A day is
//! created as a plain table `LIKE` its parent and then attached: `ATTACH PARTITION` takes only
//! a `SHARE UPDATE EXCLUSIVE` lock on the parent, so inserts and searches go on, where
//! `CREATE TABLE ... PARTITION OF` would wait for them and stop them. Partitioned indexes
//! ([`PG_PARTITIONED_INDEXES`]) are built on each new partition by PostgreSQL itself.
//!
//! **Dropping days** ([`crate::PgStore::drop_days_before`]): at most
//! [`RETENTION_DAYS_PER_CALL_MAX`] days per call, oldest first, each one `DETACH PARTITION` and
//! `DROP TABLE` per table, in one transaction that first locks the four parents (`ACCESS
//! EXCLUSIVE`, in the order inserts take them, so that the two never deadlock) and waits at
//! most [`RETENTION_LOCK_TIMEOUT_MS`] for them: writers and readers wait for the drop (a few
//! milliseconds), and a drop that cannot get its locks fails, changing nothing, and is tried
//! again at the next maintenance. `DETACH ... CONCURRENTLY` would not block them, but cannot
//! run in a transaction: a day would go table by table, and an interrupted detach leaves a
//! partition pending.
//!
//! Partition creation and drops of all connections are serialized by an advisory lock
//! ([`PARTITION_LOCK_KEY`]). Partition names are the only text of ours formatted into these
//! statements: `{table}_p{YYYYMMDD}`, from a [`Day`].

use std::collections::{BTreeMap, BTreeSet};

use postgres::GenericClient;

/// Microseconds in a day.
pub const DAY_US: i64 = 86_400_000_000;

/// Days created ahead: today and this many days after it (default 3), at connect and at each
/// maintenance.
pub const PARTITION_DAYS_AHEAD: u32 = 3;

/// Days [`crate::PgStore::drop_days_before`] drops at most in one call (one transaction), so
/// that the parents are locked briefly; the rest go in the next calls.
pub const RETENTION_DAYS_PER_CALL_MAX: usize = 7;

/// How long a drop waits for the parents' locks (a long search or a dump holds them) before
/// it gives up, changing nothing.
pub const RETENTION_LOCK_TIMEOUT_MS: u64 = 5_000;

/// The advisory lock (`pg_advisory_xact_lock`) that serializes partition creation and drops
/// among all connections to a database: "TNDMPART".
pub const PARTITION_LOCK_KEY: i64 = 0x544E_444D_5041_5254;

/// The partitioned tables, in the order inserts and drops lock them, with their partition key.
pub const PARTITIONED_TABLES: [(&str, &str); 4] = [
    ("cdr", "start_us"),
    ("cdr_rtp", "call_start_us"),
    ("cdr_t38", "call_start_us"),
    ("registration", "first_us"),
];

/// The partitioned layout's tables: the columns of [`crate::pg::PG_SCHEMA`], plus
/// `call_start_us` in the stream tables, without foreign keys. Indexes:
/// [`PG_PARTITIONED_INDEXES`].
pub const PG_PARTITIONED_SCHEMA: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS cdr (
    id             BIGSERIAL,",
    crate::pg::pg_cdr_columns!(),
    ",
    PRIMARY KEY (start_us, id)
) PARTITION BY RANGE (start_us);
CREATE TABLE IF NOT EXISTS cdr_rtp (
    id                      BIGSERIAL,
    cdr_id                  BIGINT,
    call_start_us           BIGINT  NOT NULL,
    call_id                 TEXT,",
    crate::pg::pg_rtp_columns!(),
    "
) PARTITION BY RANGE (call_start_us);
CREATE TABLE IF NOT EXISTS cdr_t38 (
    id            BIGSERIAL,
    cdr_id        BIGINT,
    call_start_us BIGINT  NOT NULL,
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
) PARTITION BY RANGE (call_start_us);
CREATE TABLE IF NOT EXISTS registration (
    id            BIGSERIAL,
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
    dst_ip        BYTEA,
    PRIMARY KEY (id, first_us)
) PARTITION BY RANGE (first_us);
"
);

/// The partitioned layout's indexes, created on the parents (and so on every partition, now
/// and later). Those of [`crate::pg::PG_INDEXES`] with these differences: the primary key
/// `(start_us, id)` is `cdr`'s time index; each unique key holds its table's partition key;
/// `cdr_id_no_uid` finds a row stored without a uid by its number (`#<id>`), and holds only
/// those rows; streams have no index on `call_id`, which no reader uses, to spare each stream
/// insert a B-tree update.
pub const PG_PARTITIONED_INDEXES: [(&str, &str); 15] = [
    ("cdr_call_id", "cdr (call_id)"),
    ("cdr_uid", "UNIQUE cdr (uid, start_us)"),
    ("cdr_id_no_uid", "cdr (id) WHERE uid IS NULL"),
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
    ("cdr_rtp_uid", "UNIQUE cdr_rtp (uid, call_start_us)"),
    ("cdr_t38_cdr", "cdr_t38 (cdr_id)"),
    ("cdr_t38_uid", "UNIQUE cdr_t38 (uid, call_start_us)"),
    ("registration_last", "registration (last_us, id)"),
    (
        "registration_user",
        "registration (username COLLATE \"C\", last_us, id)",
    ),
];

/// The registration table's unique key in this layout, created with the others.
pub const PG_PARTITIONED_REG_UID: (&str, &str) =
    ("registration_uid", "UNIQUE registration (uid, first_us)");

/// A UTC day, as days since 1970-01-01: the unit of partitioning and of retention. Days
/// before 0001-01-01 are all [`Day::EARLY`], days after 9999-12-31 all [`Day::LATE`]: one
/// edge partition each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(i64);

impl Day {
    /// 0001-01-01, the first day with a partition of its own.
    pub const FIRST: Day = Day(-719_162);
    /// 9999-12-31, the last day with a partition of its own.
    pub const LAST: Day = Day(2_932_896);
    /// Every time before [`Day::FIRST`].
    pub const EARLY: Day = Day(Day::FIRST.0 - 1);
    /// Every time after [`Day::LAST`].
    pub const LATE: Day = Day(Day::LAST.0 + 1);

    /// The day `days` after 1970-01-01 (before it when negative).
    pub fn from_days(days: i64) -> Day {
        Day(days.clamp(Day::EARLY.0, Day::LATE.0))
    }

    /// The UTC day of a time in µs since the epoch.
    pub fn of_us(us: i64) -> Day {
        Day::from_days(us.div_euclid(DAY_US))
    }

    /// The day of a date.
    pub fn from_ymd(year: i64, month: u32, day: u32) -> Day {
        Day::from_days(utc::days_from_civil(year, month, day))
    }

    /// Today, by the system clock.
    pub fn today() -> Day {
        let us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        Day::of_us(us)
    }

    /// Days since 1970-01-01.
    pub fn days(self) -> i64 {
        self.0
    }

    /// The day `n` days later (earlier when negative).
    pub fn plus(self, n: i64) -> Day {
        Day::from_days(self.0.saturating_add(n))
    }

    /// The first µs of the day, `None` for [`Day::EARLY`] (it has no start).
    pub fn start_us(self) -> Option<i64> {
        (self > Day::EARLY).then(|| self.0 * DAY_US)
    }

    /// The first µs after the day, `None` for [`Day::LATE`] (it has no end).
    pub fn end_us(self) -> Option<i64> {
        (self < Day::LATE).then(|| (self.0 + 1) * DAY_US)
    }

    /// The suffix of its partitions' names: `20261118`, `_early` or `_late`.
    pub fn suffix(self) -> String {
        match self {
            Day::EARLY => "_early".to_string(),
            Day::LATE => "_late".to_string(),
            d => {
                let (y, m, dd) = utc::civil_from_days(d.0);
                format!("{y:04}{m:02}{dd:02}")
            }
        }
    }

    /// The day a partition name's suffix stands for ([`Day::suffix`]).
    pub fn from_suffix(s: &str) -> Option<Day> {
        match s {
            "_early" => return Some(Day::EARLY),
            "_late" => return Some(Day::LATE),
            _ => {}
        }
        if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (y, m, d) = (
            s[..4].parse().ok()?,
            s[4..6].parse().ok()?,
            s[6..].parse().ok()?,
        );
        utc::is_date(y, m, d).then(|| Day::from_ymd(y, m, d))
    }

    /// The partition of `table` for this day: `cdr_p20261118`.
    pub fn partition(self, table: &str) -> String {
        format!("{table}_p{}", self.suffix())
    }
}

impl std::fmt::Display for Day {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Day::EARLY => f.write_str("before 0001-01-01"),
            Day::LATE => f.write_str("after 9999-12-31"),
            d => {
                let (y, m, dd) = utc::civil_from_days(d.0);
                write!(f, "{y:04}-{m:02}-{dd:02}")
            }
        }
    }
}

/// The days with a partition in each table, by day: a bit per table of
/// [`PARTITIONED_TABLES`] (all four set: the day is complete). Partitions not named by us are
/// not listed.
pub(crate) fn partitions(c: &mut impl GenericClient) -> Result<BTreeMap<Day, u8>, postgres::Error> {
    let parents: Vec<&str> = PARTITIONED_TABLES.iter().map(|t| t.0).collect();
    let rows = c.query(
        "SELECT p.relname::text, c.relname::text FROM pg_inherits i \
         JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
         WHERE p.relkind = 'p' AND p.relnamespace = current_schema()::regnamespace \
         AND p.relname = ANY($1::text[])",
        &[&parents],
    )?;
    let mut out: BTreeMap<Day, u8> = BTreeMap::new();
    for r in rows {
        let (parent, child): (String, String) = (r.get(0), r.get(1));
        let Some(bit) = PARTITIONED_TABLES.iter().position(|t| t.0 == parent) else {
            continue;
        };
        let day = child
            .strip_prefix(parent.as_str())
            .and_then(|s| s.strip_prefix("_p"))
            .and_then(Day::from_suffix);
        if let Some(day) = day {
            *out.entry(day).or_default() |= 1 << bit;
        }
    }
    Ok(out)
}

/// Every table's bit in [`partitions`]' map.
const ALL_TABLES: u8 = (1 << PARTITIONED_TABLES.len()) - 1;

/// The days whose four partitions exist.
pub(crate) fn complete_days(c: &mut impl GenericClient) -> Result<BTreeSet<Day>, postgres::Error> {
    Ok(partitions(c)?
        .into_iter()
        .filter(|(_, bits)| *bits == ALL_TABLES)
        .map(|(d, _)| d)
        .collect())
}

/// The bound of a partition in `FOR VALUES FROM (..) TO (..)`.
fn bound(us: Option<i64>, open: &str) -> String {
    us.map_or_else(|| open.to_string(), |v| v.to_string())
}

/// Creates the partitions `days` lack, in every table, inside the caller's transaction (the
/// advisory lock is held until it ends). Returns the days that were not complete before.
pub(crate) fn create_days_in(
    tx: &mut impl GenericClient,
    days: &BTreeSet<Day>,
) -> Result<Vec<Day>, postgres::Error> {
    if days.is_empty() {
        return Ok(Vec::new());
    }
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PARTITION_LOCK_KEY])?;
    let have = partitions(tx)?;
    let mut created = Vec::new();
    let mut sql = String::new();
    for &day in days {
        let bits = have.get(&day).copied().unwrap_or(0);
        if bits == ALL_TABLES {
            continue;
        }
        created.push(day);
        let (from, to) = (
            bound(day.start_us(), "MINVALUE"),
            bound(day.end_us(), "MAXVALUE"),
        );
        for (i, (table, _)) in PARTITIONED_TABLES.iter().enumerate() {
            if bits & (1 << i) != 0 {
                continue;
            }
            let name = day.partition(table);
            sql += &format!(
                "CREATE TABLE IF NOT EXISTS {name} (LIKE {table} INCLUDING DEFAULTS);\
                 ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({from}) TO ({to});"
            );
        }
    }
    if !sql.is_empty() {
        tx.batch_execute(&sql)?;
    }
    Ok(created)
}

/// What [`crate::PgStore::drop_days_before`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DroppedDays {
    /// The days whose partitions were dropped, oldest first.
    pub days: Vec<Day>,
    /// Older days are left to drop (more than [`RETENTION_DAYS_PER_CALL_MAX`] were due).
    pub more: bool,
}

/// Detaches and drops the partitions of at most `max` days before `cut`, oldest first, in
/// one transaction of the caller's.
pub(crate) fn drop_days_in(
    tx: &mut impl GenericClient,
    cut: Day,
    max: usize,
) -> Result<DroppedDays, postgres::Error> {
    // Our own number, formatted: SET takes no parameters.
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{RETENTION_LOCK_TIMEOUT_MS}ms'"
    ))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PARTITION_LOCK_KEY])?;
    let due: Vec<(Day, u8)> = partitions(tx)?
        .into_iter()
        .filter(|(d, _)| *d < cut)
        .collect();
    let mut out = DroppedDays {
        days: Vec::new(),
        more: due.len() > max,
    };
    if due.is_empty() {
        return Ok(out);
    }
    let parents: Vec<String> = PARTITIONED_TABLES
        .iter()
        .map(|t| format!("ONLY {}", t.0))
        .collect();
    let mut sql = format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE;",
        parents.join(", ")
    );
    for &(day, bits) in due.iter().take(max) {
        for (i, (table, _)) in PARTITIONED_TABLES.iter().enumerate() {
            if bits & (1 << i) != 0 {
                let name = day.partition(table);
                sql += &format!("ALTER TABLE {table} DETACH PARTITION {name}; DROP TABLE {name};");
            }
        }
        out.days.push(day);
    }
    tx.batch_execute(&sql)?;
    Ok(out)
}

/// The days a record needs: its call's (or lone stream's) start and its registration's first
/// message.
pub(crate) fn record_days(r: &crate::CdrRecord, out: &mut BTreeSet<Day>) {
    match &r.call {
        Some(c) => {
            out.insert(Day::of_us(c.start_us));
        }
        None => {
            let own = r.streams.iter().map(|s| s.start_us);
            out.extend(own.chain(r.t38.iter().map(|t| t.start_us)).map(Day::of_us));
        }
    }
    if let Some(g) = &r.registration {
        out.insert(Day::of_us(g.first_us));
    }
}

/// The partition key of a record's stream and T.38 rows: its call's start, else the row's own.
pub(crate) fn call_start_us(r: &crate::CdrRecord, own_us: i64) -> i64 {
    r.call.as_ref().map_or(own_us, |c| c.start_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Exec, Sql, Val};
    use crate::plan_check::Recorder;
    use crate::search::{self, CallQuery};
    use crate::{CdrRecord, CdrStore, PgOptions, PgStore};

    /// The day partitions of `table` a plan names (`cdr_p20261125`, not `cdr_rtp_p...`).
    fn days_in_plan(plan: &str, table: &str) -> BTreeSet<Day> {
        let prefix = format!("{table}_p");
        let mut out = BTreeSet::new();
        let mut rest = plan;
        while let Some(at) = rest.find(&prefix) {
            let before = rest[..at].chars().last();
            let tail = &rest[at + prefix.len()..];
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && let Some(day) = tail.get(..8).and_then(Day::from_suffix)
            {
                out.insert(day);
            }
            rest = tail;
        }
        out
    }

    /// The plan of `sql`, sequential scans ruled out (the test's tables are small enough to
    /// be read whole; this shows that an index can serve the statement on each day).
    fn explain(st: &mut PgStore, sql: &Sql) -> String {
        let mut e = sql.clone();
        e.text = format!("EXPLAIN (COSTS OFF) {}", sql.text);
        st.client()
            .batch_execute("SET enable_seqscan = off")
            .unwrap();
        let rows = st.rows(&e);
        st.client().batch_execute("RESET enable_seqscan").unwrap();
        rows.unwrap()
            .into_iter()
            .flatten()
            .filter_map(|v| match v {
                Val::Text(t) => Some(t),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Ten days of calls in day partitions; every statement a search, its totals and a call's
    /// page run, explained: those bounded by time (the walk, the counts and reads of a number's
    /// index in its time order, the rows of a page) name only the days of their range, each
    /// read through an index of its own (a page's rows through its day's primary key); a call
    /// by its uid reads one day of each table. `CDR_PLAN_EXPLAIN=1` prints the plans.
    #[test]
    fn searches_read_only_the_days_of_their_range() {
        let server = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
            Ok(s) => s,
            Err(pg_scratch::PgError::NotInstalled) => {
                test_env::skip("PostgreSQL is not installed");
                return;
            }
            Err(e) => panic!("starting PostgreSQL: {e}"),
        };
        let mut st = PgStore::connect_with(&server.conninfo(), &PgOptions::partitioned()).unwrap();
        let end = Day::from_ymd(2026, 11, 30);
        let records: Vec<CdrRecord> = crate::seed::synthetic_calls(
            30_000,
            end.plus(-10).start_us().unwrap(),
            end.start_us().unwrap(),
            7,
        )
        .collect();
        for chunk in records.chunks(5_000) {
            st.insert_records(chunk).unwrap();
        }
        st.client().batch_execute("VACUUM ANALYZE").unwrap();
        let from = Day::from_ymd(2026, 11, 25);
        let range: BTreeSet<Day> = [from, from.plus(1)].into();
        let window = format!(
            "from={}&to={}",
            from.start_us().unwrap() / 1_000_000,
            from.plus(2).start_us().unwrap() / 1_000_000
        );
        let verbose = std::env::var("CDR_PLAN_EXPLAIN").is_ok();
        for filter in [
            "",
            "&caller=1000",
            "&caller=1000&mos_below=4",
            "&called=%2B4930123456*&response=2xx",
            "&codec=opus",
        ] {
            let q = CallQuery::from_query(&format!("{window}{filter}")).unwrap();
            let mut rec = Recorder {
                inner: &mut st,
                log: Vec::new(),
            };
            let page = search::search(&mut rec, &q).unwrap();
            search::totals(&mut rec, &q).unwrap();
            assert!(!page.calls.is_empty(), "{filter}");
            let log = std::mem::take(&mut rec.log);
            let mut checked = 0;
            for sql in &log {
                let plan = explain(&mut st, sql);
                if verbose {
                    println!("-- {filter}\n{}\n{plan}\n", sql.text);
                }
                // Statements bounded by the range, or by the times of a page's rows.
                if sql.text.contains("start_us >=") || sql.text.contains("start_us IN") {
                    let days = days_in_plan(&plan, "cdr");
                    assert!(
                        !days.is_empty() && days.is_subset(&range),
                        "{filter}: {days:?}\n{plan}"
                    );
                    assert!(!plan.contains("Seq Scan"), "{filter}: {plan}");
                    // A page's rows by id: each through its day's primary key.
                    if sql.text.contains("start_us IN") {
                        assert!(plan.contains("_pkey"), "{filter}: {plan}");
                    }
                    checked += 1;
                }
            }
            assert!(checked >= 2, "{filter}: {log:?}");
        }
        // One call's page: its row, streams and flows, each from its own day.
        let uid = records[12_345].uid.clone();
        let mut rec = Recorder {
            inner: &mut st,
            log: Vec::new(),
        };
        search::call_by_uid(&mut rec, &uid).unwrap().unwrap();
        let log = std::mem::take(&mut rec.log);
        assert_eq!(log.len(), 3, "one statement each, no second try: {log:?}");
        let day = Day::of_us(records[12_345].call.as_ref().unwrap().start_us);
        for (sql, table) in log.iter().zip(["cdr", "cdr_rtp", "cdr_t38"]) {
            let plan = explain(&mut st, sql);
            if verbose {
                println!("-- call_by_uid\n{}\n{plan}\n", sql.text);
            }
            assert_eq!(days_in_plan(&plan, table), [day].into(), "{plan}");
        }
        // The same page through the store.
        assert!(st.call_by_uid(&uid).unwrap().is_some());
    }

    #[test]
    fn days_name_their_partitions() {
        assert_eq!(Day::FIRST, Day::from_ymd(1, 1, 1));
        assert_eq!(Day::LAST, Day::from_ymd(9999, 12, 31));
        let d = Day::of_us(1_795_000_000_000_000);
        assert_eq!(d.to_string(), "2026-11-18");
        assert_eq!(d.partition("cdr_rtp"), "cdr_rtp_p20261118");
        assert_eq!(Day::from_suffix("20261118"), Some(d));
        assert_eq!(Day::from_suffix("20261131"), None);
        assert_eq!(Day::from_suffix("2026111"), None);
        assert_eq!(d.start_us(), Some(1_794_960_000_000_000));
        assert_eq!(d.end_us(), Some(1_794_960_000_000_000 + DAY_US));
        assert_eq!(Day::of_us(-1), Day::from_ymd(1969, 12, 31));
        assert_eq!(Day::of_us(i64::MIN), Day::EARLY);
        assert_eq!(Day::of_us(i64::MAX), Day::LATE);
        assert_eq!(Day::EARLY.partition("cdr"), "cdr_p_early");
        assert_eq!(Day::from_suffix("_late"), Some(Day::LATE));
        assert_eq!((Day::EARLY.start_us(), Day::LATE.end_us()), (None, None));
        assert_eq!(Day::EARLY.end_us(), Day::FIRST.start_us());
        assert_eq!(Day::LATE.plus(5), Day::LATE);
    }
}
