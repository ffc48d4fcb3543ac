//! The store's files hold the registrar's HA1s and nonce secret: readable by their owner alone
//! from their first byte, whatever the umask, and narrowed at open when an older release left
//! them 0644.

use kv::{Options, Store};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

fn files(dir: &Path) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                mode(&e.path()),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_file_of_a_store_is_its_owners_alone_and_old_ones_are_narrowed() {
    // SAFETY: umask only swaps the process's mask; the other tests here create nothing
    // whose mode they check.
    unsafe { libc::umask(0o022) };
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    let store = Store::open_dir(&dir, Options::default()).unwrap();
    store.put("registrar", "secret", "s3cret").unwrap();
    let open = files(&dir);
    let names: Vec<&str> = open.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "kv.sqlite3",
            "kv.sqlite3-shm",
            "kv.sqlite3-wal",
            "kv.sqlite3.lock"
        ]
    );
    assert!(open.iter().all(|(_, m)| *m == 0o600), "{open:?}");
    assert_eq!(mode(&dir), 0o700);
    let backup = root.path().join("backup.sqlite3");
    store.backup(&backup).unwrap();
    let export = root.path().join("astdb.sqlite3");
    store.export_astdb(&export).unwrap();
    assert_eq!((mode(&backup), mode(&export)), (0o600, 0o600));
    drop(store);

    // An older release's files: 0644, the WAL left by a crash included.
    for (name, _) in &open {
        let p = dir.join(name);
        if p.exists() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    std::fs::write(dir.join("kv.sqlite3-wal"), b"").unwrap();
    std::fs::set_permissions(
        dir.join("kv.sqlite3-wal"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let store = Store::open_dir(&dir, Options::default()).unwrap();
    assert_eq!(store.get("registrar", "secret").unwrap().unwrap(), "s3cret");
    let reopened = files(&dir);
    assert!(reopened.iter().all(|(_, m)| *m == 0o600), "{reopened:?}");
}
