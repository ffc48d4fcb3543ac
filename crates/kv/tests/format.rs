//! The store file's format version on real files: a store from a newer Tandem is refused
//! untouched by both ways of opening it; a store from before versions is stamped with its
//! values kept; an upgrade killed midway (SIGKILL of a real child process inside the upgrade's
//! transaction) leaves the store readable in its old version with every value.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use kv::{KvError, Options, ReadOnlyStore, Store};
use rusqlite::Connection;

const CHILD_ENV: &str = "KV_FORMAT_CHILD";

fn filled_store(dir: &Path, n: usize) -> std::path::PathBuf {
    let store = Store::open_dir(dir, Options::default()).unwrap();
    for i in 0..n {
        store
            .put("sip", &i.to_string(), format!("sip:{i}@192.0.2.1"))
            .unwrap();
    }
    store.path().to_path_buf()
}

fn header_i32(path: &Path, offset: usize) -> i32 {
    let bytes = std::fs::read(path).unwrap();
    i32::from_be_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

#[test]
fn a_new_store_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let path = filled_store(dir.path(), 1);
    assert_eq!(&header_i32(&path, 68).to_be_bytes(), b"TDKV");
    assert_eq!(header_i32(&path, 60), kv::FORMAT_VERSION as i32);
}

#[test]
fn a_store_from_a_newer_tandem_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = filled_store(dir.path(), 3);
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 5")
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let expect = |e: KvError| {
        let KvError::Format(fileformat::FormatError::TooNew { found, known, .. }) = &e else {
            panic!("{e:?}")
        };
        assert_eq!((*found, *known), (5, kv::FORMAT_VERSION));
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "{} is a key-value store in format version 5",
                path.display()
            )) && msg.contains("Rolling back"),
            "{msg}"
        );
    };
    expect(Store::open(&path, Options::default()).err().unwrap());
    expect(ReadOnlyStore::open(&path).err().unwrap());
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_store_from_before_versions_is_stamped_and_keeps_its_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = filled_store(dir.path(), 50);
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA application_id = 0; PRAGMA user_version = 0;")
        .unwrap();
    // A reader reads it as it is, and writes nothing.
    let ro = ReadOnlyStore::open(&path).unwrap();
    assert_eq!(ro.get("sip", "7").unwrap().unwrap(), "sip:7@192.0.2.1");
    drop(ro);
    assert_eq!(header_i32(&path, 60), 0);
    let store = Store::open(&path, Options::default()).unwrap();
    assert_eq!(store.tree(Some("sip"), None).unwrap().len(), 50);
    drop(store);
    assert_eq!(header_i32(&path, 60), 1);
    assert_eq!(&header_i32(&path, 68).to_be_bytes(), b"TDKV");
}

/// A later format's step: rewrites every value, then waits to be killed.
fn rewrite_and_stall(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch("UPDATE kv_astdb SET value = upper(value);")?;
    println!("MIGRATING");
    std::thread::sleep(std::time::Duration::from_secs(60));
    Ok(())
}

/// The child half of the next test: runs only when given a store.
#[test]
fn child_upgrades_until_killed() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let path = Path::new(&path);
    let conn = Connection::open(path).unwrap();
    // A small page cache: the step's changes spill into the WAL before the kill, uncommitted.
    conn.pragma_update(None, "cache_size", 10).unwrap();
    let next = [
        kv::MIGRATIONS[0],
        fileformat::Migration {
            version: 2,
            name: "values in capitals",
            apply: rewrite_and_stall,
        },
    ];
    fileformat::upgrade(&conn, path, &fileformat::KV_STORE, &next).unwrap();
    panic!("the upgrade should have been killed");
}

#[test]
fn a_killed_upgrade_leaves_the_store_readable_in_its_old_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = filled_store(dir.path(), 2_000);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_upgrades_until_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.trim_end().ends_with("MIGRATING") {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "the child ended early"
        );
    }
    // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    assert!(!child.wait().unwrap().success());

    assert_eq!(header_i32(&path, 60), 1);
    let store = Store::open(&path, Options::default()).unwrap();
    let all = store.tree(Some("sip"), None).unwrap();
    assert_eq!(all.len(), 2_000);
    assert!(all.iter().all(|(_, v)| v.as_bytes().starts_with(b"sip:")));
}
