//! Alerts kept in the CDR database: one row per firing episode of a rule and key ([`AlertRow`],
//! table `alert`), and the silences that mute them ([`SilenceRow`], table `alert_silence`),
//! on both backends through one trait ([`AlertStore`]).
//!
//! - **One row per episode.** An episode is a (fingerprint, `since_us`) pair, a UNIQUE key: the
//!   first notification inserts it, a repeat or the resolution updates that row in place
//!   (state, last transition, resolution, notification time, figures, calls, summary), and a
//!   row is never moved back to an older transition. An acknowledgement is the console's, not
//!   the engine's: storing the alert again never clears it.
//! - **Cheap to read.** The console's header asks for the firing count on every page: an index
//!   on `state` answers it. The history pages newest first by (`since_us`, `id`), by keyset
//!   (`after_id`), at most [`ALERTS_PAGE_MAX`] rows a page.
//! - **Older databases.** SQLite files get the tables when a writer opens them; PostgreSQL
//!   databases by migration 5 ([`crate::migrate`]). A reader of a database that has neither
//!   (an older release made it, and this reader may not write it) reads no alerts and no
//!   silences rather than failing.
//! - **Retention.** The collector's retention ([`crate::PgStore::drop_days_before`]) deletes
//!   the alerts resolved and the silences ended before its cut, row by row: this table holds a
//!   few rows a day, so a `DELETE` is cheap where whole days are dropped for calls.
//!
//! Never: pastes user text (a user name, a comment, a rule or key from a query) into SQL (every
//! value is a parameter); reads without a bound.
//!
//! This module knows nothing of rules or of the engine (the `alerts` crate depends on this
//! one): the rows are plain strings and numbers, the figures a JSON text the engine wrote.

use crate::plan::{Arg, Cols, Exec, Sql, Ty};
use crate::{CdrError, PgStore, SqliteStore};

/// Rows of [`AlertStore::list_alerts`] at most (a larger `limit` is cut to it).
pub const ALERTS_PAGE_MAX: usize = 500;
/// Rows of [`AlertStore::list_alerts`] when the query's `limit` is 0.
pub const ALERTS_PAGE_DEFAULT: usize = 50;
/// Silences [`AlertStore::silences`] returns at most, newest first.
pub const SILENCES_MAX: usize = 500;
/// Call uids stored with an alert at most (the engine keeps `calls_per_alert_max`, 100 by
/// default; the first ones are kept).
pub const ALERT_CALLS_STORED_MAX: usize = 1_000;
/// Bytes of a silence's comment, rule or key at most, and of an acknowledging user's name.
pub const ALERT_TEXT_BYTES_MAX: usize = 1_024;

/// An alert episode as stored: the engine's alert with the row's id, who decided it and who
/// acknowledged it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AlertRow {
    /// The row's id; 0 for a row not stored yet.
    pub id: i64,
    /// The alert's identity: its rule and key (`alerts::Alert::fingerprint`).
    pub fingerprint: String,
    pub rule: String,
    pub rule_kind: String,
    pub severity: String,
    pub group_by: String,
    /// The group-by value (`none`'s single key included).
    pub key: String,
    /// `firing` or `resolved`.
    pub state: String,
    /// When the episode began to fire, µs since the epoch.
    pub since_us: i64,
    /// The last transition (fired, fired again, resolved).
    pub at_us: i64,
    pub resolved_us: Option<i64>,
    /// When it was last notified.
    pub notified_us: i64,
    /// The figures that fired it, as the engine wrote them (a JSON object).
    pub figures_json: String,
    /// The uids of the calls or registrations behind it, at most [`ALERT_CALLS_STORED_MAX`].
    pub calls: Vec<String>,
    pub summary: String,
    /// The capture, sensor or collector that decided it.
    pub node: String,
    pub acked_by: Option<String>,
    pub acked_us: Option<i64>,
}

/// Which alerts [`AlertStore::list_alerts`] returns; empty fields filter nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlertQuery {
    /// `firing` or `resolved`.
    pub state: Option<String>,
    /// A rule's exact name.
    pub rule: Option<String>,
    /// A key's exact value.
    pub key: Option<String>,
    /// Episodes that began at or after this time (`since_us`).
    pub from_us: Option<i64>,
    /// Episodes that began before this time.
    pub to_us: Option<i64>,
    /// The page after this alert (the last id of the page before).
    pub after_id: Option<i64>,
    /// Rows at most: 0 is [`ALERTS_PAGE_DEFAULT`], above [`ALERTS_PAGE_MAX`] is cut to it.
    pub limit: usize,
}

/// A silence: the alerts of `rule` and `key` are not notified between `starts_us` and
/// `ends_us` (they are still decided and stored).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SilenceRow {
    /// The row's id; 0 for a silence not stored yet.
    pub id: i64,
    /// A rule's exact name, or `*` for every rule.
    pub rule: String,
    /// A key's exact value, a prefix ending in `*` (`10.1.*`), or `*` for every key.
    pub key: String,
    pub starts_us: i64,
    pub ends_us: i64,
    pub created_by: String,
    pub comment: String,
    pub created_us: i64,
}

impl SilenceRow {
    /// Whether it mutes the alerts of `rule` and `key` at `at_us`.
    pub fn mutes(&self, rule: &str, key: &str, at_us: i64) -> bool {
        let key_matches = match self.key.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => self.key == key,
        };
        (self.rule == "*" || self.rule == rule)
            && key_matches
            && self.starts_us <= at_us
            && at_us < self.ends_us
    }

    /// Why the store refuses it, if it does.
    fn problem(&self) -> Option<String> {
        for (name, v) in [
            ("rule", &self.rule),
            ("key", &self.key),
            ("created_by", &self.created_by),
            ("comment", &self.comment),
        ] {
            if v.len() > ALERT_TEXT_BYTES_MAX {
                return Some(format!(
                    "a silence's {name} has {} bytes, over {ALERT_TEXT_BYTES_MAX}",
                    v.len()
                ));
            }
        }
        if self.rule.is_empty() || self.key.is_empty() {
            return Some(
                "a silence names a rule (or `*`) and a key (exact, a prefix ending in `*`, or `*`)"
                    .to_string(),
            );
        }
        (self.ends_us <= self.starts_us).then(|| {
            format!(
                "a silence must end after it starts (starts_us {}, ends_us {})",
                self.starts_us, self.ends_us
            )
        })
    }
}

/// Alerts and silences in a CDR database. Implemented by [`SqliteStore`] and [`PgStore`];
/// a `dyn CdrStore` gives its own through [`crate::CdrStore::alert_store`].
pub trait AlertStore {
    /// Stores an alert's transition: a new episode (fingerprint, `since_us`) is inserted, a
    /// known one updated in place (state, `at_us`, `resolved_us`, `notified_us`, figures,
    /// calls, summary) unless the stored row is of a later transition; an acknowledgement is
    /// kept. The row's id.
    fn record_alert(&mut self, row: &AlertRow) -> Result<i64, CdrError>;
    /// The alerts `q` matches, newest first by (`since_us`, `id`).
    fn list_alerts(&mut self, q: &AlertQuery) -> Result<Vec<AlertRow>, CdrError>;
    /// One alert by its id.
    fn alert(&mut self, id: i64) -> Result<Option<AlertRow>, CdrError>;
    /// The alerts firing now (an index on `state` counts them).
    fn firing_count(&mut self) -> Result<u64, CdrError>;
    /// Acknowledges an alert: true when it was acknowledged now, false when there is no such
    /// alert or it was acknowledged before (the first acknowledgement stays).
    fn ack_alert(&mut self, id: i64, user: &str, at_us: i64) -> Result<bool, CdrError>;
    /// Stores a silence (its `id` is ignored); its id. Refused ([`CdrError::Invalid`]) without
    /// a rule or key, with text over [`ALERT_TEXT_BYTES_MAX`] or an end before its start.
    fn add_silence(&mut self, s: &SilenceRow) -> Result<i64, CdrError>;
    /// The silences active at a time (`starts_us <= t < ends_us`), or with `None` every one;
    /// newest first, at most [`SILENCES_MAX`].
    fn silences(&mut self, active_at_us: Option<i64>) -> Result<Vec<SilenceRow>, CdrError>;
    /// Ends a silence at `at_us`: true when it was still running then (or had not begun).
    fn end_silence(&mut self, id: i64, at_us: i64) -> Result<bool, CdrError>;
}

/// The tables in a dialect: the type of a row's id, and of an integer.
macro_rules! alert_tables {
    ($id:literal, $int:literal) => {
        concat!(
            "
CREATE TABLE IF NOT EXISTS alert (
    id            ",
            $id,
            ",
    fingerprint   TEXT    NOT NULL,
    rule          TEXT    NOT NULL,
    rule_kind     TEXT    NOT NULL,
    severity      TEXT    NOT NULL,
    group_by      TEXT    NOT NULL,
    group_key     TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    since_us      ",
            $int,
            " NOT NULL,
    at_us         ",
            $int,
            " NOT NULL,
    resolved_us   ",
            $int,
            ",
    notified_us   ",
            $int,
            " NOT NULL,
    figures       TEXT    NOT NULL,
    calls         TEXT    NOT NULL,
    summary       TEXT    NOT NULL,
    node          TEXT    NOT NULL,
    acked_by      TEXT,
    acked_us      ",
            $int,
            "
);
CREATE TABLE IF NOT EXISTS alert_silence (
    id            ",
            $id,
            ",
    rule          TEXT    NOT NULL,
    group_key     TEXT    NOT NULL,
    starts_us     ",
            $int,
            " NOT NULL,
    ends_us       ",
            $int,
            " NOT NULL,
    created_by    TEXT    NOT NULL,
    comment       TEXT    NOT NULL,
    created_us    ",
            $int,
            " NOT NULL
);
"
        )
    };
}

/// The SQLite tables and indexes, created by a writer's open ([`SqliteStore::open`]) when
/// missing (every SQLite index ends with the rowid). `registration_first` serves
/// [`crate::replay`] (registrations by first message). The key column is `group_key`.
pub const SQLITE_ALERT_SCHEMA: &str = concat!(
    alert_tables!("INTEGER PRIMARY KEY", "INTEGER"),
    "CREATE UNIQUE INDEX IF NOT EXISTS alert_episode ON alert(fingerprint, since_us);
CREATE INDEX IF NOT EXISTS alert_since ON alert(since_us);
CREATE INDEX IF NOT EXISTS alert_state_since ON alert(state, since_us);
CREATE INDEX IF NOT EXISTS alert_rule_since ON alert(rule, since_us);
CREATE INDEX IF NOT EXISTS alert_silence_ends ON alert_silence(ends_us);
CREATE INDEX IF NOT EXISTS registration_first ON registration(first_us);
"
);

/// The PostgreSQL tables and indexes (migration 5), plain tables in either layout: alerts are
/// few, and their retention deletes rows. Each `IF NOT EXISTS`, so the migration applies again
/// to tables a plain database moved into partitions already has.
pub const PG_ALERT_SCHEMA: &str = concat!(
    alert_tables!("BIGSERIAL PRIMARY KEY", "BIGINT"),
    "CREATE UNIQUE INDEX IF NOT EXISTS alert_episode ON alert (fingerprint, since_us);
CREATE INDEX IF NOT EXISTS alert_since ON alert (since_us, id);
CREATE INDEX IF NOT EXISTS alert_state_since ON alert (state, since_us, id);
CREATE INDEX IF NOT EXISTS alert_rule_since ON alert (rule, since_us, id);
CREATE INDEX IF NOT EXISTS alert_silence_ends ON alert_silence (ends_us);
CREATE INDEX IF NOT EXISTS registration_first ON registration (first_us, id);
"
);

/// The index of registrations by their first message ([`crate::replay`] reads them in that
/// order), as PostgreSQL has it (SQLite's ends with the rowid by itself). Created with the
/// alert tables; a bulk load drops and builds it again with the others.
pub(crate) const REGISTRATION_FIRST: (&str, &str) =
    ("registration_first", "registration (first_us, id)");

/// The columns of an alert row after `id`, in [`AlertRow`]'s order.
const ALERT_COLUMNS: &str = "fingerprint, rule, rule_kind, severity, group_by, group_key, state, \
     since_us, at_us, resolved_us, notified_us, figures, calls, summary, node, acked_by, acked_us";

/// What a transition updates in a stored episode (never the acknowledgement).
const ALERT_UPDATED: &str = "state, at_us, resolved_us, notified_us, figures, calls, summary";

/// The columns of a silence row after `id`.
const SILENCE_COLUMNS: &str =
    "rule, group_key, starts_us, ends_us, created_by, comment, created_us";

/// Whether an error says the table read is missing: a database of an older release.
pub(crate) fn missing_table(e: &CdrError) -> bool {
    match e {
        CdrError::Sqlite {
            source: rusqlite::Error::SqliteFailure(_, Some(msg)),
            ..
        } => msg.starts_with("no such table"),
        CdrError::Postgres { source, .. } => {
            source.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE)
        }
        _ => false,
    }
}

/// A read of a table an older database lacks: nothing there.
fn or_empty<T: Default>(r: Result<T, CdrError>) -> Result<T, CdrError> {
    match r {
        Err(e) if missing_table(&e) => Ok(T::default()),
        r => r,
    }
}

fn opt_int(v: Option<i64>) -> Arg {
    v.map_or(Arg::Null(Ty::Int), Arg::Int)
}

fn opt_text(v: Option<&str>) -> Arg {
    v.map_or(Arg::Null(Ty::Text), |t| Arg::Text(t.to_string()))
}

/// The values of [`ALERT_COLUMNS`].
fn alert_args(r: &AlertRow) -> Result<Vec<Arg>, CdrError> {
    let calls = &r.calls[..r.calls.len().min(ALERT_CALLS_STORED_MAX)];
    let calls = serde_json::to_string(calls).map_err(|e| CdrError::Invalid {
        problem: format!("an alert's calls: {e}"),
    })?;
    let t = |s: &str| Arg::Text(s.to_string());
    Ok(vec![
        t(&r.fingerprint),
        t(&r.rule),
        t(&r.rule_kind),
        t(&r.severity),
        t(&r.group_by),
        t(&r.key),
        t(&r.state),
        Arg::Int(r.since_us),
        Arg::Int(r.at_us),
        opt_int(r.resolved_us),
        Arg::Int(r.notified_us),
        t(&r.figures_json),
        Arg::Text(calls),
        t(&r.summary),
        t(&r.node),
        opt_text(r.acked_by.as_deref()),
        opt_int(r.acked_us),
    ])
}

fn alert_from(row: Vec<crate::plan::Val>) -> Result<AlertRow, CdrError> {
    let mut c = Cols::new(row);
    let id = c.i64()?;
    let mut a = AlertRow {
        id,
        fingerprint: c.text()?,
        rule: c.text()?,
        rule_kind: c.text()?,
        severity: c.text()?,
        group_by: c.text()?,
        key: c.text()?,
        state: c.text()?,
        since_us: c.i64()?,
        at_us: c.i64()?,
        resolved_us: c.opt_i64()?,
        notified_us: c.i64()?,
        figures_json: c.text()?,
        ..AlertRow::default()
    };
    let calls = c.text()?;
    a.calls = serde_json::from_str(&calls).map_err(|e| CdrError::Data {
        problem: format!("alert {id}'s calls are not a JSON list of uids: {e}"),
    })?;
    a.summary = c.text()?;
    a.node = c.text()?;
    a.acked_by = c.opt_text()?;
    a.acked_us = c.opt_i64()?;
    Ok(a)
}

fn silence_from(row: Vec<crate::plan::Val>) -> Result<SilenceRow, CdrError> {
    let mut c = Cols::new(row);
    Ok(SilenceRow {
        id: c.i64()?,
        rule: c.text()?,
        key: c.text()?,
        starts_us: c.i64()?,
        ends_us: c.i64()?,
        created_by: c.text()?,
        comment: c.text()?,
        created_us: c.i64()?,
    })
}

/// The placeholders of `args`, in order.
fn placeholders_of(s: &mut Sql, args: Vec<Arg>) -> String {
    args.into_iter()
        .map(|a| s.arg(a))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first column of the first row, as an id.
fn first_id(x: &mut dyn Exec, s: &Sql) -> Result<Option<i64>, CdrError> {
    match x.rows(s)?.into_iter().next() {
        Some(r) => Ok(Some(Cols::new(r).i64()?)),
        None => Ok(None),
    }
}

fn record(x: &mut dyn Exec, row: &AlertRow) -> Result<i64, CdrError> {
    let mut s = Sql::new(x.dialect());
    let values = placeholders_of(&mut s, alert_args(row)?);
    let set: Vec<String> = ALERT_UPDATED
        .split(", ")
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    // A transition older than the stored one (a late writer) changes nothing.
    s.text = format!(
        "INSERT INTO alert ({ALERT_COLUMNS}) VALUES ({values}) \
         ON CONFLICT (fingerprint, since_us) DO UPDATE SET {} \
         WHERE excluded.at_us >= alert.at_us RETURNING id",
        set.join(", ")
    );
    if let Some(id) = first_id(x, &s)? {
        return Ok(id);
    }
    let mut s = Sql::new(x.dialect());
    let (f, t) = (
        s.arg(Arg::Text(row.fingerprint.clone())),
        s.int(row.since_us),
    );
    s.text = format!("SELECT id FROM alert WHERE fingerprint = {f} AND since_us = {t}");
    first_id(x, &s)?.ok_or_else(|| CdrError::Data {
        problem: format!(
            "alert {} since {} was neither stored nor found",
            row.fingerprint, row.since_us
        ),
    })
}

fn list(x: &mut dyn Exec, q: &AlertQuery) -> Result<Vec<AlertRow>, CdrError> {
    let limit = match q.limit {
        0 => ALERTS_PAGE_DEFAULT,
        n => n.min(ALERTS_PAGE_MAX),
    };
    let mut s = Sql::new(x.dialect());
    let mut conds = Vec::new();
    for (col, v) in [
        ("state", &q.state),
        ("rule", &q.rule),
        ("group_key", &q.key),
    ] {
        if let Some(v) = v {
            conds.push(format!("{col} = {}", s.arg(Arg::Text(v.clone()))));
        }
    }
    if let Some(v) = q.from_us {
        conds.push(format!("since_us >= {}", s.int(v)));
    }
    if let Some(v) = q.to_us {
        conds.push(format!("since_us < {}", s.int(v)));
    }
    if let Some(after) = q.after_id {
        // Keyset: below the row `after` names, in (since_us, id) order.
        let mut a = Sql::new(x.dialect());
        let id = a.int(after);
        a.text = format!("SELECT since_us FROM alert WHERE id = {id}");
        match first_id(x, &a)? {
            Some(since) => {
                let (t, i) = (s.int(since), s.int(after));
                conds.push(format!("(since_us < {t} OR (since_us = {t} AND id < {i}))"));
            }
            // Gone (retention): the ids below it, which are older.
            None => conds.push(format!("id < {}", s.int(after))),
        }
    }
    let filter = if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    };
    let n = s.int(limit as i64);
    s.text = format!(
        "SELECT id, {ALERT_COLUMNS} FROM alert{filter} ORDER BY since_us DESC, id DESC LIMIT {n}"
    );
    x.rows(&s)?.into_iter().map(alert_from).collect()
}

fn one(x: &mut dyn Exec, id: i64) -> Result<Option<AlertRow>, CdrError> {
    let mut s = Sql::new(x.dialect());
    let i = s.int(id);
    s.text = format!("SELECT id, {ALERT_COLUMNS} FROM alert WHERE id = {i}");
    x.rows(&s)?.into_iter().next().map(alert_from).transpose()
}

fn firing(x: &mut dyn Exec) -> Result<u64, CdrError> {
    let mut s = Sql::new(x.dialect());
    let f = s.arg(Arg::Text("firing".to_string()));
    s.text = format!("SELECT count(*) FROM alert WHERE state = {f}");
    match x.rows(&s)?.into_iter().next() {
        Some(r) => Cols::new(r).u64(),
        None => Ok(0),
    }
}

fn ack(x: &mut dyn Exec, id: i64, user: &str, at_us: i64) -> Result<bool, CdrError> {
    if user.len() > ALERT_TEXT_BYTES_MAX {
        return Err(CdrError::Invalid {
            problem: format!(
                "a user name of {} bytes acknowledges alert {id}; at most {ALERT_TEXT_BYTES_MAX}",
                user.len()
            ),
        });
    }
    let mut s = Sql::new(x.dialect());
    let (u, t, i) = (s.arg(Arg::Text(user.to_string())), s.int(at_us), s.int(id));
    s.text = format!(
        "UPDATE alert SET acked_by = {u}, acked_us = {t} \
         WHERE id = {i} AND acked_by IS NULL RETURNING id"
    );
    Ok(first_id(x, &s)?.is_some())
}

fn add_silence(x: &mut dyn Exec, r: &SilenceRow) -> Result<i64, CdrError> {
    if let Some(problem) = r.problem() {
        return Err(CdrError::Invalid { problem });
    }
    let mut s = Sql::new(x.dialect());
    let t = |v: &str| Arg::Text(v.to_string());
    let values = placeholders_of(
        &mut s,
        vec![
            t(&r.rule),
            t(&r.key),
            Arg::Int(r.starts_us),
            Arg::Int(r.ends_us),
            t(&r.created_by),
            t(&r.comment),
            Arg::Int(r.created_us),
        ],
    );
    s.text =
        format!("INSERT INTO alert_silence ({SILENCE_COLUMNS}) VALUES ({values}) RETURNING id");
    first_id(x, &s)?.ok_or_else(|| CdrError::Data {
        problem: "a silence was inserted without an id".to_string(),
    })
}

fn silences(x: &mut dyn Exec, active_at_us: Option<i64>) -> Result<Vec<SilenceRow>, CdrError> {
    let mut s = Sql::new(x.dialect());
    let filter = match active_at_us {
        Some(at) => {
            let t = s.int(at);
            format!(" WHERE ends_us > {t} AND starts_us <= {t}")
        }
        None => String::new(),
    };
    let n = s.int(SILENCES_MAX as i64);
    s.text = format!(
        "SELECT id, {SILENCE_COLUMNS} FROM alert_silence{filter} ORDER BY id DESC LIMIT {n}"
    );
    x.rows(&s)?.into_iter().map(silence_from).collect()
}

fn end_silence(x: &mut dyn Exec, id: i64, at_us: i64) -> Result<bool, CdrError> {
    let mut s = Sql::new(x.dialect());
    let (t, i) = (s.int(at_us), s.int(id));
    s.text = format!(
        "UPDATE alert_silence SET ends_us = {t} WHERE id = {i} AND ends_us > {t} RETURNING id"
    );
    Ok(first_id(x, &s)?.is_some())
}

/// The statements that delete the alerts resolved, and the silences ended, before `cut_us`
/// (the collector's retention), with their parameter.
pub(crate) const PG_ALERT_RETENTION: &str =
    "DELETE FROM alert WHERE state = 'resolved' AND resolved_us < $1";
pub(crate) const PG_SILENCE_RETENTION: &str = "DELETE FROM alert_silence WHERE ends_us < $1";

/// Both backends' [`AlertStore`] through their [`Exec`].
macro_rules! alert_store_via_exec {
    ($t:ty) => {
        impl AlertStore for $t {
            fn record_alert(&mut self, row: &AlertRow) -> Result<i64, CdrError> {
                record(self, row)
            }
            fn list_alerts(&mut self, q: &AlertQuery) -> Result<Vec<AlertRow>, CdrError> {
                or_empty(list(self, q))
            }
            fn alert(&mut self, id: i64) -> Result<Option<AlertRow>, CdrError> {
                or_empty(one(self, id))
            }
            fn firing_count(&mut self) -> Result<u64, CdrError> {
                or_empty(firing(self))
            }
            fn ack_alert(&mut self, id: i64, user: &str, at_us: i64) -> Result<bool, CdrError> {
                ack(self, id, user, at_us)
            }
            fn add_silence(&mut self, s: &SilenceRow) -> Result<i64, CdrError> {
                add_silence(self, s)
            }
            fn silences(&mut self, active_at_us: Option<i64>) -> Result<Vec<SilenceRow>, CdrError> {
                or_empty(silences(self, active_at_us))
            }
            fn end_silence(&mut self, id: i64, at_us: i64) -> Result<bool, CdrError> {
                end_silence(self, id, at_us)
            }
        }
    };
}

alert_store_via_exec!(SqliteStore);
alert_store_via_exec!(PgStore);

/// Creates the SQLite tables where they are missing; a file this process may not write (a
/// reader of an older release's database) is left as it is, and reads as holding none.
pub(crate) fn create_sqlite(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    match conn.execute_batch(SQLITE_ALERT_SCHEMA) {
        Err(rusqlite::Error::SqliteFailure(e, _))
            if matches!(
                e.code,
                rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
            ) =>
        {
            tracing::debug!("CDR database read-only: its alert tables are not created");
            Ok(())
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_mutes_its_rule_and_keys_while_it_runs() {
        let s = SilenceRow {
            rule: "scanner".into(),
            key: "10.1.*".into(),
            starts_us: 100,
            ends_us: 200,
            ..SilenceRow::default()
        };
        assert!(s.mutes("scanner", "10.1.2.3", 100));
        assert!(!s.mutes("scanner", "10.1.2.3", 200), "ends_us is excluded");
        assert!(!s.mutes("scanner", "10.2.0.1", 150));
        assert!(!s.mutes("trunk-503", "10.1.2.3", 150));
        let every = SilenceRow {
            rule: "*".into(),
            key: "*".into(),
            ..s.clone()
        };
        assert!(every.mutes("trunk-503", "", 150));
        let exact = SilenceRow {
            key: "1001".into(),
            ..s
        };
        assert!(exact.mutes("scanner", "1001", 150) && !exact.mutes("scanner", "10011", 150));
    }

    #[test]
    fn a_silence_without_a_rule_or_ending_before_it_starts_is_refused() {
        let ok = SilenceRow {
            rule: "*".into(),
            key: "*".into(),
            starts_us: 1,
            ends_us: 2,
            ..SilenceRow::default()
        };
        assert_eq!(ok.problem(), None);
        let backwards = SilenceRow {
            ends_us: 1,
            ..ok.clone()
        };
        assert!(
            backwards
                .problem()
                .unwrap()
                .contains("must end after it starts (starts_us 1, ends_us 1)")
        );
        let no_rule = SilenceRow {
            rule: String::new(),
            ..ok.clone()
        };
        assert!(no_rule.problem().is_some());
        let long = SilenceRow {
            comment: "x".repeat(ALERT_TEXT_BYTES_MAX + 1),
            ..ok
        };
        assert!(long.problem().unwrap().contains("comment"));
    }
}
