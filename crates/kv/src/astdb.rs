//! Asterisk interoperation (astdb.sqlite3 import and export), online backup, and read-only
//! access to a store file that another process may be writing.

use crate::error::{KvError, Result, open_error, read_error};
use crate::index::NsSql;
use crate::path::{
    DEFAULT_NAMESPACE, check_key, check_namespace, covers, key_path, lock_path, tree_prefix,
    wal_path,
};
use crate::value::{Text, Value, column_bytes};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The statement Asterisk's main/db.c runs to create its table; the export runs the same text so
/// that the schema stored in the file is identical.
pub const ASTDB_CREATE_SQL: &str =
    "CREATE TABLE IF NOT EXISTS astdb(key VARCHAR(256), value VARCHAR(256), PRIMARY KEY(key))";

fn astdb_err(path: &Path, problem: impl Into<String>) -> KvError {
    KvError::Astdb {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

fn dest_err(path: &Path, problem: impl Into<String>) -> KvError {
    KvError::Destination {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// Reads every `(key, value)` of an Asterisk astdb.sqlite3, checking the keys.
pub(crate) fn read_astdb(src: &Path) -> Result<Vec<(String, Value)>> {
    if !src.is_file() {
        return Err(astdb_err(src, "no such file"));
    }
    let conn = Connection::open_with_flags(
        src,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| astdb_err(src, format!("cannot open: {}", crate::error::describe(&e))))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| astdb_err(src, e.to_string()))?;
    let has_table: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'astdb'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| {
            astdb_err(
                src,
                format!(
                    "not an SQLite database ({}); give the path of Asterisk's astdb.sqlite3",
                    crate::error::describe(&e)
                ),
            )
        })?;
    if has_table.is_none() {
        return Err(astdb_err(
            src,
            "has no table `astdb`; give the path of Asterisk's astdb.sqlite3",
        ));
    }
    let mut st = conn
        .prepare("SELECT key, value FROM astdb ORDER BY key")
        .map_err(|e| astdb_err(src, crate::error::describe(&e)))?;
    let mut rows = st
        .query([])
        .map_err(|e| astdb_err(src, crate::error::describe(&e)))?;
    let mut out = Vec::new();
    let mut n = 0usize;
    while let Some(row) = rows
        .next()
        .map_err(|e| astdb_err(src, crate::error::describe(&e)))?
    {
        n += 1;
        let key_raw = column_bytes(row.get_ref(0).map_err(|e| astdb_err(src, e.to_string()))?);
        let Some(key_raw) = key_raw else {
            return Err(astdb_err(src, format!("row {n} has a NULL key")));
        };
        let key = String::from_utf8(key_raw).map_err(|e| {
            astdb_err(
                src,
                format!(
                    "row {n}: key {:?} is not UTF-8 text",
                    String::from_utf8_lossy(e.as_bytes())
                ),
            )
        })?;
        if !key.starts_with('/') {
            return Err(astdb_err(
                src,
                format!(
                    "row {n}: key {key:?} does not start with '/' (astdb keys are /family/key)"
                ),
            ));
        }
        check_key(&key, usize::MAX).map_err(|e| astdb_err(src, format!("row {n}: {e}")))?;
        let value = column_bytes(row.get_ref(1).map_err(|e| astdb_err(src, e.to_string()))?);
        if let Some(v) = value {
            out.push((key, Value::from(v)));
        }
    }
    Ok(out)
}

/// The temporary file a copy is written to before it is renamed to `dest`, created empty with
/// `access`'s mode so that SQLite's journal beside it gets the same.
fn check_dest(dest: &Path, access: &filemode::Access) -> Result<PathBuf> {
    if dest.exists() {
        return Err(dest_err(
            dest,
            "already exists; remove it first or choose another path",
        ));
    }
    let mut tmp = dest.to_path_buf().into_os_string();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    filemode::prepare_sqlite(&tmp, access)
        .map_err(|e| dest_err(dest, format!("{e}; {}", crate::error::io_hint(&e))))?;
    Ok(tmp)
}

/// fsyncs `tmp`, renames it to `dest` and fsyncs the directory.
fn finish(tmp: &Path, dest: &Path) -> Result<()> {
    let io = |e: std::io::Error| {
        let _ = std::fs::remove_file(tmp);
        dest_err(dest, format!("{e}; {}", crate::error::io_hint(&e)))
    };
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(tmp, dest).map_err(io)?;
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Online backup of the connection's database to `dest` in one step (one read transaction, so
/// concurrent writers neither block it nor restart it). The copy holds every namespace, the
/// registrar's secrets too: its owner's alone.
pub(crate) fn backup_from(conn: &Connection, src: &Path, dest: &Path) -> Result<()> {
    let tmp = check_dest(dest, &filemode::Access::Private)?;
    let result = (|| -> rusqlite::Result<()> {
        let mut to = Connection::open(&tmp)?;
        let backup = rusqlite::backup::Backup::new(conn, &mut to)?;
        loop {
            match backup.step(-1)? {
                rusqlite::backup::StepResult::Done => break,
                rusqlite::backup::StepResult::More => continue,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(dest_err(
            dest,
            format!(
                "backup of {} failed: {}; {}",
                src.display(),
                crate::error::describe(&e),
                crate::error::hint_for(&e)
            ),
        ));
    }
    finish(&tmp, dest)
}

/// Online backup of any of Tandem's SQLite files at `src` (the console's accounts, the metrics
/// history) to `dest`, which must not exist: read-only, in one read transaction, private to its
/// owner, synced and renamed into place as the store's own backup is.
pub fn backup_sqlite_file(src: &Path, dest: &Path) -> Result<()> {
    if !src.is_file() {
        return Err(KvError::Open {
            path: src.to_path_buf(),
            reason: "no such file".into(),
            hint: "nothing to back up: see --data-dir",
        });
    }
    // Never `immutable`: these files have no lock file telling whether a writer (a running
    // `serve`) has them open, and a plain read transaction is consistent either way.
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(src, flags).map_err(|e| open_error(src, &e))?;
    backup_from(&conn, src, dest)
}

/// Writes the astdb namespace as an Asterisk astdb.sqlite3 (rollback journal, Asterisk's exact
/// table definition, rows in key order), readable as `access` says.
pub(crate) fn export_from(
    conn: &Connection,
    src: &Path,
    sql: &NsSql,
    dest: &Path,
    access: &filemode::Access,
) -> Result<usize> {
    let tmp = check_dest(dest, access)?;
    let result = (|| -> std::result::Result<usize, (bool, rusqlite::Error)> {
        let tx = conn.unchecked_transaction().map_err(|e| (true, e))?;
        let mut st = tx.prepare(&sql.list_all).map_err(|e| (true, e))?;
        let mut rows = st.query([]).map_err(|e| (true, e))?;
        let out = Connection::open(&tmp).map_err(|e| (false, e))?;
        out.execute_batch("PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;")
            .map_err(|e| (false, e))?;
        out.execute_batch(ASTDB_CREATE_SQL)
            .map_err(|e| (false, e))?;
        out.execute_batch("BEGIN").map_err(|e| (false, e))?;
        let mut n = 0;
        {
            let mut ins = out
                .prepare("INSERT INTO astdb (key, value) VALUES (?1, ?2)")
                .map_err(|e| (false, e))?;
            while let Some(row) = rows.next().map_err(|e| (true, e))? {
                let key = column_bytes(row.get_ref(0).map_err(|e| (true, e))?).unwrap_or_default();
                let value =
                    column_bytes(row.get_ref(1).map_err(|e| (true, e))?).unwrap_or_default();
                ins.execute(params![Text(&key), Text(&value)])
                    .map_err(|e| (false, e))?;
                n += 1;
            }
        }
        out.execute_batch("COMMIT").map_err(|e| (false, e))?;
        Ok(n)
    })();
    match result {
        Ok(n) => {
            finish(&tmp, dest)?;
            Ok(n)
        }
        Err((reading, e)) => {
            let _ = std::fs::remove_file(&tmp);
            if reading {
                Err(read_error(src, &e))
            } else {
                Err(dest_err(
                    dest,
                    format!(
                        "cannot write the export: {}; {}",
                        crate::error::describe(&e),
                        crate::error::hint_for(&e)
                    ),
                ))
            }
        }
    }
}

/// Read-only access to a store file, straight from SQLite: for commands that run while another
/// process (such as `tandem serve`) has the store open for writing. Sees what is committed.
pub struct ReadOnlyStore {
    path: PathBuf,
    conn: Connection,
    sql: NsSql,
}

/// Opens a store file for reading without writing anything beside it.
///
/// A store no process writes (its lock is free) and with no WAL left over is opened
/// `immutable`: SQLite then takes no locks and creates no `-wal` or `-shm` file, so a user who
/// may read the file but not write its directory can read it, and a reader running as root
/// leaves no root-owned files that would stop the service's own user later. While a writer
/// runs, its `-wal` and `-shm` files exist (owned by it) and a plain read-only open uses them;
/// SQLite reads a WAL database read-only when they exist, even in a directory it cannot write.
/// A WAL left by a crash holds committed writes that an immutable open would miss, so it is
/// read the same plain way.
fn open_read_only(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let wal_left = std::fs::metadata(wal_path(path)).is_ok_and(|m| m.len() > 0);
    if writer_active(path) || wal_left {
        return Connection::open_with_flags(path, flags).map_err(|e| open_error(path, &e));
    }
    let uri = format!("file:{}?immutable=1", uri_path(path));
    Connection::open_with_flags(&uri, flags | OpenFlags::SQLITE_OPEN_URI)
        .map_err(|e| open_error(path, &e))
}

/// Whether a process holds the store's lock (it is open for writing). A lock file that cannot
/// be checked counts as held: the plain open is always safe, only sometimes impossible.
///
/// The lock file is its owner's alone (a user who could open it could also hold the lock and
/// keep the service from starting), so another user reading a store its owner let it read
/// cannot check the lock: for that user, a writer runs while the store's `-shm` file exists
/// (SQLite keeps it while any connection has the database open in WAL mode and removes it at
/// the last close).
fn writer_active(path: &Path) -> bool {
    let lock = match std::fs::File::open(lock_path(path)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let [_, shm, _] = filemode::sqlite_companions(path);
            return shm.exists();
        }
        Err(_) => return true,
    };
    // A shared lock is free exactly when no writer holds the exclusive one; let go at once so
    // that a writer starting now is not kept waiting.
    match lock.try_lock_shared() {
        Ok(()) => {
            let _ = lock.unlock();
            false
        }
        Err(_) => true,
    }
}

/// A path as the path part of an SQLite `file:` URI: `%`, `?` and `#` escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

impl ReadOnlyStore {
    /// Opens the store file `path` read-only. Fails if it does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<ReadOnlyStore> {
        Self::open_namespace(path, DEFAULT_NAMESPACE)
    }

    /// Opens one namespace of the store file `path` read-only.
    pub fn open_namespace(path: impl AsRef<Path>, namespace: &str) -> Result<ReadOnlyStore> {
        check_namespace(namespace)?;
        let path = path.as_ref().to_path_buf();
        if !path.is_file() {
            return Err(KvError::Open {
                path,
                reason: "no such file".into(),
                hint: "nothing was stored yet, or the data directory is wrong (see --data-dir)",
            });
        }
        let conn = open_read_only(&path)?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| open_error(&path, &e))?;
        // A newer Tandem's file is refused rather than misread; an older one is read as it
        // is (its writer upgrades it).
        fileformat::check(
            &conn,
            &path,
            &fileformat::KV_STORE,
            crate::format::FORMAT_VERSION,
        )?;
        let sql = NsSql::new(namespace);
        let exists: Option<String> = conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1",
                params![sql.main],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| open_error(&path, &e))?;
        if exists.is_none() {
            return Err(KvError::Open {
                path,
                reason: format!("no namespace {namespace:?} in this file"),
                hint: "check that the file is a Tandem store and the namespace name",
            });
        }
        Ok(ReadOnlyStore { path, conn, sql })
    }

    /// The value of `/family/key`.
    pub fn get(&self, family: &str, key: &str) -> Result<Option<Value>> {
        let k = key_path(family, key);
        self.conn
            .prepare_cached(&self.sql.get_any)
            .and_then(|mut st| {
                st.query_row(params![k], |r| Ok(column_bytes(r.get_ref(1)?)))
                    .optional()
            })
            .map(|v| v.flatten().map(Value::from))
            .map_err(|e| read_error(&self.path, &e))
    }

    /// The entries of a key tree in key order (see `Namespace::deltree` for which keys).
    pub fn tree(
        &self,
        family: Option<&str>,
        keytree: Option<&str>,
    ) -> Result<Vec<(String, Value)>> {
        let prefix = tree_prefix(family, keytree);
        let re = |e: rusqlite::Error| read_error(&self.path, &e);
        let mut st = match &prefix {
            None => self.conn.prepare_cached(&self.sql.list_all),
            Some(_) => self.conn.prepare_cached(&self.sql.list_tree),
        }
        .map_err(re)?;
        let mut rows = match &prefix {
            None => st.query([]),
            Some(p) => st.query(params![p]),
        }
        .map_err(re)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(re)? {
            let key = column_bytes(row.get_ref(0).map_err(re)?).unwrap_or_default();
            let key = String::from_utf8_lossy(&key).into_owned();
            debug_assert!(covers(prefix.as_deref(), &key));
            if let Some(v) = column_bytes(row.get_ref(1).map_err(re)?) {
                out.push((key, Value::from(v)));
            }
        }
        Ok(out)
    }

    /// Online backup to `dest` (which must not exist).
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<()> {
        backup_from(&self.conn, &self.path, dest.as_ref())
    }

    /// Writes this namespace to `dest` (which must not exist) as an Asterisk astdb.sqlite3,
    /// readable by its owner only (0600).
    pub fn export_astdb(&self, dest: impl AsRef<Path>) -> Result<usize> {
        self.export_astdb_with(dest, &filemode::Access::Private)
    }

    /// [`Self::export_astdb`], readable as `access` says (0640 with a group, for Asterisk's
    /// user).
    pub fn export_astdb_with(
        &self,
        dest: impl AsRef<Path>,
        access: &filemode::Access,
    ) -> Result<usize> {
        export_from(&self.conn, &self.path, &self.sql, dest.as_ref(), access)
    }
}
