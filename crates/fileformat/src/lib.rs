//! The kind and format version of every file Tandem writes, so that a newer Tandem upgrades a
//! file in place, all or nothing, and an older one refuses a file it would misread.
//!
//! # SQLite files
//! Each SQLite file of Tandem carries two numbers in its 100-byte header:
//! - `PRAGMA application_id` (bytes 68..72) names the kind of file ([`Kind`]: the key-value
//!   store, the CDR database, the console's accounts, the metrics history, the collector's
//!   sensor list), four ASCII letters such as `TDKV`. A CDR database given where a store is
//!   expected is refused, never given a store's tables.
//! - `PRAGMA user_version` (bytes 60..64) is its format version: the last migration applied.
//!
//! Opening one takes two calls:
//! 1. [`check`], before anything else is read or written (before WAL mode is even set): a file
//!    of another kind, or of a version newer than this build knows, is refused with a
//!    [`FormatError`] that names the file, the kind, both versions and what to do.
//! 2. [`upgrade`] (or [`begin`], the owner's steps, [`commit`]): in one `BEGIN IMMEDIATE`
//!    transaction, each migration from the file's version to this build's, then the new
//!    `user_version` and `application_id`. SQLite commits all of it or none of it: a crash, a
//!    kill or a full disk midway leaves the file in its old version, and the next open starts
//!    the upgrade again. A file already at this build's version takes no lock and writes
//!    nothing.
//!
//! A file from before versions existed (its tables present, `user_version` 0) is format 1,
//! what those releases wrote: migration 1 of each kind brings any earlier table to this
//! release (each statement applies again to what it finds) and stamps the file. A new file runs
//! the same migration 1.
//!
//! Files with a header of their own (the CDR journal's magic and version byte) refuse a newer
//! version with the same [`FormatError::TooNew`].
//!
//! # Never
//! Writes to a file it refuses; migrates backwards; skips a version; upgrades a file through a
//! read-only connection (such a reader reads an older file as it is, and says so in the log).
//!
//! Start at [`KINDS`], then [`check`] and [`upgrade`]; `tests/upgrade.rs` kills a real process
//! in the middle of an upgrade.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, ErrorCode, MAIN_DB};

/// A kind of SQLite file Tandem writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// What an operator calls it, in messages: `key-value store`.
    pub name: &'static str,
    /// Its `PRAGMA application_id`: four ASCII letters, big-endian, as a hex dump of the file
    /// shows them at offset 68.
    pub application_id: i32,
    /// A table every file of this kind has had since the first release: an unstamped file that
    /// holds tables, none of them this one, is another program's (or another kind's from before
    /// versions).
    pub table: &'static str,
}

const fn tag(letters: &[u8; 4]) -> i32 {
    i32::from_be_bytes(*letters)
}

/// `kv.sqlite3` (crate `kv`).
pub const KV_STORE: Kind = Kind {
    name: "key-value store",
    application_id: tag(b"TDKV"),
    table: "kv_namespaces",
};
/// `cdr.sqlite3` (crate `cdr`).
pub const CDR_DATABASE: Kind = Kind {
    name: "CDR database",
    application_id: tag(b"TDCR"),
    table: "cdr",
};
/// `console.sqlite3` (crate `console`).
pub const CONSOLE_ACCOUNTS: Kind = Kind {
    name: "console accounts database",
    application_id: tag(b"TDCN"),
    table: "user",
};
/// `history.sqlite3` (crate `history`).
pub const METRICS_HISTORY: Kind = Kind {
    name: "metrics history",
    application_id: tag(b"TDHS"),
    table: "series",
};
/// `sensors.sqlite3` (crate `collector`).
pub const SENSOR_LIST: Kind = Kind {
    name: "collector's sensor list",
    application_id: tag(b"TDSN"),
    table: "sensor",
};

/// Every kind, so that a file of one kind opened as another is named for what it is.
pub const KINDS: [&Kind; 5] = [
    &KV_STORE,
    &CDR_DATABASE,
    &CONSOLE_ACCOUNTS,
    &METRICS_HISTORY,
    &SENSOR_LIST,
];

/// Where the operator reads how to go back to the release before an upgrade.
const ROLLBACK: &str = "README, \"Rolling back\"";

/// Why a file is not opened. Every message names the file and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A newer Tandem wrote the file. Nothing of it was read beyond its header, nothing written.
    #[error(
        "{path} is a {kind} in format version {found}, and this Tandem reads format versions up \
         to {known}: a newer Tandem wrote it, and this one leaves it untouched rather than \
         misread it. Run the newer Tandem again, or restore the backup taken before the upgrade \
         ({ROLLBACK})"
    )]
    TooNew {
        path: PathBuf,
        kind: &'static str,
        found: i64,
        known: u32,
    },
    /// The file is another kind of Tandem file, or another program's.
    #[error(
        "{path} is not a {kind}: {found}; check the path (each of Tandem's files has its own \
         name in the data directory)"
    )]
    WrongKind {
        path: PathBuf,
        kind: &'static str,
        found: String,
    },
    /// SQLite failed to read the header or to write the upgrade.
    #[error("{path}: {doing} the {kind} failed: {reason}; {hint}")]
    Sqlite {
        path: PathBuf,
        kind: &'static str,
        doing: String,
        reason: String,
        hint: String,
    },
}

impl FormatError {
    fn sqlite(path: &Path, kind: &Kind, doing: impl Into<String>, e: &rusqlite::Error) -> Self {
        let hint = match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => format!(
                "the file is damaged or is not a {}: check the path, or restore it from a backup",
                kind.name
            ),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                "another process holds the file's write lock: retry once it is done".into()
            }
            Some(ErrorCode::DiskFull) => "the filesystem is full: free some space".into(),
            Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
                "check that the file and its directory are writable by this user".into()
            }
            _ => "see the SQLite error".into(),
        };
        FormatError::Sqlite {
            path: path.to_path_buf(),
            kind: kind.name,
            doing: doing.into(),
            reason: describe(e),
            hint,
        }
    }
}

fn describe(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(msg)) => {
            format!("{msg} (SQLite code {})", f.extended_code)
        }
        other => other.to_string(),
    }
}

/// What [`check`] read in a file's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Its format version; 0 for a new file or one from before versions.
    pub version: u32,
    /// Whether its `application_id` is its kind's (false for a new file or one from before
    /// versions).
    pub stamped: bool,
}

/// Reads the kind and version of the file `conn` has open and refuses it when it is another
/// kind or newer than `known`. Reads the header and, for an unstamped file, the names of its
/// tables; writes nothing. Call it before any statement that could write (even `PRAGMA
/// journal_mode=WAL`, which writes the header).
pub fn check(
    conn: &Connection,
    path: &Path,
    kind: &Kind,
    known: u32,
) -> Result<Found, FormatError> {
    let read = |e: rusqlite::Error| FormatError::sqlite(path, kind, "reading the header of", &e);
    let app: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(read)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(read)?;
    let wrong = |found: String| FormatError::WrongKind {
        path: path.to_path_buf(),
        kind: kind.name,
        found,
    };
    if app != kind.application_id {
        if let Some(other) = KINDS.iter().find(|k| k.application_id == app) {
            return Err(wrong(format!("it is a {}", other.name)));
        }
        if app != 0 {
            return Err(wrong(format!(
                "its application_id is {app:#010x}, another program's"
            )));
        }
        let tables = table_names(conn).map_err(read)?;
        if !tables.is_empty() && !tables.iter().any(|t| t == kind.table) {
            let other = KINDS.iter().find(|k| tables.iter().any(|t| t == k.table));
            return Err(wrong(match other {
                Some(other) => format!("it is a {} (tables {})", other.name, tables.join(", ")),
                None => format!(
                    "it holds tables {} and no table `{}`, another program's",
                    tables.join(", "),
                    kind.table
                ),
            }));
        }
    }
    if !(0..=i64::from(known)).contains(&version) {
        return Err(FormatError::TooNew {
            path: path.to_path_buf(),
            kind: kind.name,
            found: version,
            known,
        });
    }
    Ok(Found {
        version: version as u32,
        stamped: app == kind.application_id,
    })
}

fn table_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' \
         ESCAPE '\\' ORDER BY name",
    )?;
    st.query_map([], |r| r.get(0))?.collect()
}

/// What [`begin`] found once it could write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// The file is at this build's version: no transaction is open.
    Current,
    /// A `BEGIN IMMEDIATE` transaction is open; the migrations after this version are to run
    /// in it, then [`commit`].
    From(u32),
    /// The connection cannot write: the file is read at this older version, as it is.
    ReadOnly(u32),
}

/// [`check`], then, unless the file is at `known` already, opens the one `BEGIN IMMEDIATE`
/// transaction of the upgrade and checks again in it (another process may have upgraded the
/// file meanwhile). On [`Pending::From`] the caller runs its migrations and calls [`commit`],
/// or [`rollback`] on failure (closing the connection rolls back too).
pub fn begin(
    conn: &Connection,
    path: &Path,
    kind: &Kind,
    known: u32,
) -> Result<Pending, FormatError> {
    let found = check(conn, path, kind, known)?;
    if found.stamped && found.version == known {
        return Ok(Pending::Current);
    }
    if conn.is_readonly(MAIN_DB).unwrap_or(false) {
        tracing::info!(
            path = %path.display(), kind = kind.name, version = found.version, known,
            "file opened read-only: read in its format version as it is; its writer upgrades it"
        );
        return Ok(Pending::ReadOnly(found.version));
    }
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| FormatError::sqlite(path, kind, "locking for the upgrade of", &e))?;
    match check(conn, path, kind, known) {
        Ok(f) if f.stamped && f.version == known => {
            rollback(conn);
            Ok(Pending::Current)
        }
        Ok(f) => Ok(Pending::From(f.version)),
        Err(e) => {
            rollback(conn);
            Err(e)
        }
    }
}

/// Stamps the file with its kind and version `known` and commits the transaction [`begin`]
/// opened; on failure rolls it back (the file stays in its old version).
pub fn commit(conn: &Connection, path: &Path, kind: &Kind, known: u32) -> Result<(), FormatError> {
    let sql = format!(
        "PRAGMA application_id = {}; PRAGMA user_version = {known}; COMMIT;",
        kind.application_id
    );
    conn.execute_batch(&sql).map_err(|e| {
        rollback(conn);
        FormatError::sqlite(path, kind, "committing the upgrade of", &e)
    })
}

/// Ends the transaction [`begin`] opened without changing the file.
pub fn rollback(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
}

/// One step of a file's format: from `version - 1` to `version`.
#[derive(Clone, Copy)]
pub struct Migration {
    pub version: u32,
    /// What it changes, for the log and errors.
    pub name: &'static str,
    pub apply: fn(&Connection) -> rusqlite::Result<()>,
}

impl std::fmt::Debug for Migration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Migration({} {})", self.version, self.name)
    }
}

/// The highest version of a migration list: the format this build writes.
pub const fn latest(migrations: &[Migration]) -> u32 {
    match migrations.last() {
        Some(m) => m.version,
        None => 0,
    }
}

/// What [`upgrade`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Current,
    /// Upgraded from this version (0: a new file or one from before versions).
    Upgraded {
        from: u32,
        to: u32,
    },
    ReadOnly(u32),
}

/// Brings the file to the last of `migrations` (versions 1, 2, ... in order): [`begin`], each
/// migration after the file's version, [`commit`], all in one transaction.
pub fn upgrade(
    conn: &Connection,
    path: &Path,
    kind: &Kind,
    migrations: &[Migration],
) -> Result<Outcome, FormatError> {
    debug_assert!(
        migrations
            .iter()
            .enumerate()
            .all(|(i, m)| m.version as usize == i + 1),
        "migrations are numbered 1, 2, ... without gaps"
    );
    let known = latest(migrations);
    let from = match begin(conn, path, kind, known)? {
        Pending::Current => return Ok(Outcome::Current),
        Pending::ReadOnly(v) => return Ok(Outcome::ReadOnly(v)),
        Pending::From(v) => v,
    };
    for m in migrations.iter().filter(|m| m.version > from) {
        if let Err(e) = (m.apply)(conn) {
            rollback(conn);
            let doing = format!(
                "migration {} ({}) of the upgrade from format version {from} to {known}, \
                 rolled back (the file is as it was), of",
                m.version, m.name
            );
            return Err(FormatError::sqlite(path, kind, doing, &e));
        }
    }
    commit(conn, path, kind, known)?;
    log_upgraded(path, kind, from, known);
    Ok(Outcome::Upgraded { from, to: known })
}

/// The log line of an upgrade (for owners that run [`begin`] and [`commit`] themselves).
pub fn log_upgraded(path: &Path, kind: &Kind, from: u32, to: u32) {
    if from == 0 {
        tracing::debug!(path = %path.display(), kind = kind.name, version = to, "format version stamped");
    } else {
        tracing::info!(path = %path.display(), kind = kind.name, from, to, "file upgraded in place");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_ids_and_tables() {
        for (i, a) in KINDS.iter().enumerate() {
            for b in &KINDS[i + 1..] {
                assert_ne!(a.application_id, b.application_id);
                assert_ne!(a.table, b.table);
            }
            assert!(
                a.application_id
                    .to_be_bytes()
                    .iter()
                    .all(u8::is_ascii_uppercase)
            );
        }
    }
}
