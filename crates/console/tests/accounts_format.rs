//! The accounts file's format version: a file from a newer Tandem is refused, naming the file
//! and both versions, and left as it was.

use console::Accounts;
use console::accounts::{AccountError, FORMAT_VERSION};

#[test]
fn accounts_from_a_newer_tandem_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("console.sqlite3");
    drop(Accounts::open(&db).unwrap());
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 4")
        .unwrap();
    let bytes = std::fs::read(&db).unwrap();
    let Err(e) = Accounts::open(&db) else {
        panic!("a newer format was opened")
    };
    assert!(matches!(e, AccountError::Format(_)), "{e:?}");
    let msg = e.to_string();
    let head = format!(
        "{} is a console accounts database in format version 4",
        db.display()
    );
    let known = format!("up to {FORMAT_VERSION}");
    assert!(msg.starts_with(&head) && msg.contains(&known), "{msg}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
}
