//! A CDR database and its journal hold every call's numbers and addresses: their owner's alone
//! from the first byte whatever the umask, narrowed when an older release left them 0644, or
//! shared with one group when the writer is told so. Readers never change a mode.

use cdr::{Journal, SqliteStore};
use filemode::Access;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

fn set(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

fn with_companions(db: &Path) -> Vec<PathBuf> {
    let [wal, shm, _] = filemode::sqlite_companions(db);
    vec![db.to_path_buf(), wal, shm]
}

#[test]
fn the_database_and_journal_are_private_and_old_ones_are_narrowed() {
    // SAFETY: umask only swaps the process's mask; the file's other test sets the same.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let store = SqliteStore::open_with(&db, &Access::Private).unwrap();
    for p in with_companions(&db) {
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    drop(store);
    let journal = dir.path().join("cdr.journal");
    drop(Journal::open(&journal, 1 << 20).unwrap());
    assert_eq!(mode(&journal), 0o600);

    // An older release's files, a WAL left by a crash among them.
    let [wal, ..] = filemode::sqlite_companions(&db);
    std::fs::write(&wal, b"").unwrap();
    for p in [&db, &wal, &journal] {
        set(p, 0o644);
    }
    // A reader leaves the mode to the writer.
    drop(SqliteStore::open(&db).unwrap());
    assert_eq!(mode(&db), 0o644);
    let store = SqliteStore::open_with(&db, &Access::Private).unwrap();
    for p in with_companions(&db) {
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    drop(store);
    drop(Journal::open(&journal, 1 << 20).unwrap());
    assert_eq!(mode(&journal), 0o600);

    // A reader that creates the database makes it private too.
    let fresh = dir.path().join("fresh.sqlite3");
    let reader = SqliteStore::open(&fresh).unwrap();
    for p in with_companions(&fresh) {
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    drop(reader);
}

#[test]
fn a_writer_told_a_group_shares_the_database_with_it_alone() {
    // SAFETY: as above.
    unsafe { libc::umask(0o022) };
    // SAFETY: getegid has no preconditions.
    let gid = unsafe { libc::getegid() };
    let group = Access::group(&gid.to_string()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let store = SqliteStore::open_with(&db, &group).unwrap();
    for p in with_companions(&db) {
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o640, gid));
    }
    drop(store);
    // The group setting removed: the next writer takes the group's reading away.
    drop(SqliteStore::open_with(&db, &Access::Private).unwrap());
    assert_eq!(mode(&db), 0o600);
}
