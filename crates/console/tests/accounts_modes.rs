//! The accounts file holds password and token hashes. `tandem serve` creates it when it starts
//! before the first `tandem user add`: its WAL and shared-memory files, which SQLite creates
//! with the database's mode, must be 0600 like it, whatever the umask; an older release's 0644
//! files are narrowed when they are opened.

use console::Accounts;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn modes(db: &Path) -> Vec<(PathBuf, String)> {
    let [wal, shm, _] = filemode::sqlite_companions(db);
    [db.to_path_buf(), wal, shm]
        .into_iter()
        .map(|p| {
            let m = std::fs::metadata(&p).map_or(0, |m| m.mode() & 0o7777);
            (p, format!("{m:04o}"))
        })
        .collect()
}

#[test]
fn the_accounts_file_and_its_wal_and_shm_are_private_from_the_start() {
    // SAFETY: umask only swaps the process's mask; this binary runs one test.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("console.sqlite3");
    let accounts = Accounts::open(&db).unwrap();
    assert!(accounts.is_empty().unwrap());
    let open = modes(&db);
    assert!(open.iter().all(|(_, m)| m == "0600"), "{open:?}");
    drop(accounts);

    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let [wal, ..] = filemode::sqlite_companions(&db);
    std::fs::write(&wal, b"").unwrap();
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _accounts = Accounts::open(&db).unwrap();
    let reopened = modes(&db);
    assert!(reopened.iter().all(|(_, m)| m == "0600"), "{reopened:?}");
}
