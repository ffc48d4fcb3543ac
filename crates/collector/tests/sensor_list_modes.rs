//! The sensor list holds the sensors' token hashes: its owner's alone (0600, its journal too)
//! from the first byte, whatever the umask; an older release's 0644 file is narrowed at open.

use collector::SensorList;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[test]
fn the_sensor_list_is_private_and_an_old_one_is_narrowed() {
    // SAFETY: umask only swaps the process's mask; this binary runs one test.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sensors.sqlite3");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    let list = SensorList::open(&db).unwrap();
    list.add("s1").unwrap();
    assert_eq!(mode(&db), 0o600);
    drop(list);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let list = SensorList::open(&db).unwrap();
    assert_eq!(mode(&db), 0o600);
    assert_eq!(list.list().unwrap().len(), 1);
}
