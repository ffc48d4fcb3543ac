//! The store file's format version (crate `fileformat`): `PRAGMA application_id` `TDKV` and
//! `PRAGMA user_version`, the last of [`MIGRATIONS`]. [`crate::Store::open`] refuses a newer
//! file before it writes anything and upgrades an older one in one transaction;
//! [`crate::ReadOnlyStore`] refuses a newer file and reads an older one as it is.
//!
//! A change of the file's tables is a new entry at the end of [`MIGRATIONS`], never an edit of
//! an applied one.

use rusqlite::{Connection, params};

use crate::index::NsSql;
use crate::path::DEFAULT_NAMESPACE;

/// The migrations of the store file, in order.
pub const MIGRATIONS: &[fileformat::Migration] = &[fileformat::Migration {
    version: 1,
    name: "namespaces and the default namespace's table",
    apply: namespaces,
}];

/// The format version this build writes and the highest it reads.
pub const FORMAT_VERSION: u32 = fileformat::latest(MIGRATIONS);

/// Version 1: what every release before versions created (each statement applies again to a
/// file that has it).
fn namespaces(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS kv_namespaces (name TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;",
    )?;
    conn.execute_batch(&NsSql::new(DEFAULT_NAMESPACE).create)?;
    conn.execute(
        "INSERT OR IGNORE INTO kv_namespaces (name) VALUES (?1)",
        params![DEFAULT_NAMESPACE],
    )?;
    Ok(())
}
