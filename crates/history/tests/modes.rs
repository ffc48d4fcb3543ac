//! The metrics history is its owner's alone (0600, its WAL and shared-memory files too) from
//! the first byte, whatever the umask; an older release's 0644 files are narrowed at open.

use history::{History, HistoryConfig};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[test]
fn the_history_files_are_private_and_old_ones_are_narrowed() {
    // SAFETY: umask only swaps the process's mask; this binary runs one test.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite3");
    let [wal, shm, _] = filemode::sqlite_companions(&db);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    let h = History::open(&db, HistoryConfig::default()).unwrap();
    assert_eq!((mode(&db), mode(&wal), mode(&shm)), (0o600, 0o600, 0o600));
    drop(h);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _h = History::open(&db, HistoryConfig::default()).unwrap();
    assert_eq!((mode(&db), mode(&wal), mode(&shm)), (0o600, 0o600, 0o600));
}
