//! The history file's format version: a file from a newer Tandem is refused, naming the file
//! and both versions, and left as it was.

use history::{History, HistoryConfig, HistoryError};

#[test]
fn a_history_from_a_newer_tandem_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.sqlite3");
    drop(History::open(&db, HistoryConfig::default()).unwrap());
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 4")
        .unwrap();
    let bytes = std::fs::read(&db).unwrap();
    let Err(e) = History::open(&db, HistoryConfig::default()) else {
        panic!("a newer format was opened")
    };
    assert!(matches!(e, HistoryError::Format(_)), "{e:?}");
    let msg = e.to_string();
    let head = format!("{} is a metrics history in format version 4", db.display());
    let known = format!("up to {}", history::FORMAT_VERSION);
    assert!(msg.starts_with(&head) && msg.contains(&known), "{msg}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
}
