//! The web console's first user: without one nobody can sign in. The accounts file
//! (`console.sqlite3` in the data directory) is opened read-only; when no `-wal` file is beside
//! it (no Tandem has it open) it is opened immutable, so that not even SQLite's `-shm` is
//! created: a root-owned `-shm` in the data directory is the very mistake `files` looks for.

use crate::Finding;
use rusqlite::OpenFlags;
use std::path::Path;

const GROUP: &str = "console";

/// The accounts file of a data directory (as the console names it).
pub fn accounts_file(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("console.sqlite3")
}

/// How many console users the accounts file holds.
pub fn count_users(file: &Path) -> Result<u64, String> {
    let wal = file.with_file_name(format!(
        "{}-wal",
        file.file_name().unwrap_or_default().to_string_lossy()
    ));
    let immutable = if wal.exists() { "" } else { "&immutable=1" };
    let uri = format!("file:{}?mode=ro{immutable}", file.display());
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
    let db = rusqlite::Connection::open_with_flags(&uri, flags).map_err(|e| e.to_string())?;
    db.query_row("SELECT count(*) FROM user", [], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
        .map_err(|e| e.to_string())
}

/// A finding on the console's users. `add_user` is the command that adds the first one, as
/// the operator should run it (as the service's user, with the data directory).
pub fn check_first_user(data_dir: &Path, add_user: &str) -> Finding {
    let file = accounts_file(data_dir);
    let check = "first user";
    if !file.exists() {
        return Finding::warn(
            GROUP,
            check,
            format!("no console user yet ({} does not exist)", file.display()),
            add_user,
        );
    }
    match count_users(&file) {
        Ok(0) => Finding::warn(
            GROUP,
            check,
            format!("no console user yet in {}", file.display()),
            add_user,
        ),
        Ok(n) => Finding::ok(
            GROUP,
            check,
            format!(
                "{n} user{} in {}",
                if n == 1 { "" } else { "s" },
                file.display()
            ),
        ),
        Err(e) => Finding::warn(
            GROUP,
            check,
            format!("cannot read {}: {e}", file.display()),
            "run tandem doctor as root, or as the service's user",
        ),
    }
}
