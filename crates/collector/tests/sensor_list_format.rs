//! The sensor list's format version: a list from a newer Tandem is refused, naming the file
//! and both versions, and left as it was.

use collector::sensors::{SensorList, SensorListError};

#[test]
fn a_sensor_list_from_a_newer_tandem_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sensors.sqlite3");
    SensorList::open(&db).unwrap().add("site-a").unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 4")
        .unwrap();
    let bytes = std::fs::read(&db).unwrap();
    let Err(e) = SensorList::open(&db) else {
        panic!("a newer format was opened")
    };
    assert!(matches!(e, SensorListError::Format(_)), "{e:?}");
    let msg = e.to_string();
    let head = format!(
        "{} is a collector's sensor list in format version 4",
        db.display()
    );
    assert!(msg.starts_with(&head) && msg.contains("up to 1"), "{msg}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
}
