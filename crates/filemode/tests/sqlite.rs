//! What `prepare_sqlite` relies on, checked on the SQLite Tandem links (rusqlite's bundled
//! build): the unix VFS gives a database's `-wal`, `-shm` and `-journal` files the main file's
//! permission bits, whatever the umask. One test in its own process, since it sets the umask.

use filemode::{Access, Group, prepare_sqlite, sqlite_companions};
use rusqlite::Connection;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn sqlite_gives_its_wal_shm_and_journal_the_databases_mode_whatever_the_umask() {
    // SAFETY: getegid has no preconditions.
    let own = Access::Group(Group {
        name: "own".into(),
        gid: unsafe { libc::getegid() },
    });
    for (umask, access, want) in [
        (0o077, &own, 0o640),
        (0o000, &Access::Private, 0o600),
        (0o022, &Access::Private, 0o600),
    ] {
        // SAFETY: umask only swaps the process's mask; this binary runs one test.
        unsafe { libc::umask(umask) };
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("wal.sqlite3");
        prepare_sqlite(&db, access).unwrap();
        let conn = Connection::open(&db).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        let [wal, shm, _] = sqlite_companions(&db);
        for p in [&db, &wal, &shm] {
            assert_eq!(mode(p), want, "umask {umask:04o}: {}", p.display());
        }
        drop(conn);

        let rollback = dir.path().join("rollback.sqlite3");
        prepare_sqlite(&rollback, access).unwrap();
        let conn = Connection::open(&rollback).unwrap();
        conn.execute_batch("CREATE TABLE t (x); BEGIN; INSERT INTO t VALUES (1);")
            .unwrap();
        let [_, _, journal] = sqlite_companions(&rollback);
        assert_eq!(
            mode(&journal),
            want,
            "umask {umask:04o}: the rollback journal"
        );
        conn.execute_batch("COMMIT").unwrap();
    }
}
