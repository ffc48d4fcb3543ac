//! Upgrades on real SQLite files: a file from a newer Tandem is refused untouched, a file of
//! another kind is refused, and an upgrade killed midway (SIGKILL of a real process holding the
//! transaction) or failing midway leaves the old version readable, then completes.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use fileformat::{FormatError, KV_STORE, Migration, Outcome, SENSOR_LIST, check, upgrade};
use rusqlite::Connection;

fn v1(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS kv_namespaces (name TEXT PRIMARY KEY);
         CREATE TABLE IF NOT EXISTS item (k INTEGER PRIMARY KEY, v TEXT NOT NULL);",
    )
}

/// Version 2 rewrites every row and adds a column: enough work that a kill lands inside it.
fn v2(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch(
        "ALTER TABLE item ADD COLUMN w TEXT NOT NULL DEFAULT '';
         UPDATE item SET w = v || '!', v = upper(v);
         INSERT INTO item (v, w) SELECT 'new' || k, '' FROM item;",
    )
}

/// Version 2 that stops halfway: the rows are rewritten, then a statement fails.
fn v2_failing(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch("ALTER TABLE item ADD COLUMN w TEXT NOT NULL DEFAULT '';")?;
    c.execute_batch("UPDATE item SET v = upper(v);")?;
    c.execute_batch("INSERT INTO no_such_table VALUES (1);")
}

/// Version 2 that says it is halfway, then waits to be killed.
fn v2_stalling(c: &Connection) -> rusqlite::Result<()> {
    v2(c)?;
    println!("MIGRATING");
    std::thread::sleep(std::time::Duration::from_secs(60));
    Ok(())
}

const V1: &[Migration] = &[Migration {
    version: 1,
    name: "items",
    apply: v1,
}];
const V2: &[Migration] = &[
    V1[0],
    Migration {
        version: 2,
        name: "items get w",
        apply: v2,
    },
];

fn open(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    c
}

/// A file at version 1 holding `rows` items.
fn file_at_v1(path: &Path, rows: usize) {
    let c = open(path);
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    assert_eq!(
        upgrade(&c, path, &KV_STORE, V1).unwrap(),
        Outcome::Upgraded { from: 0, to: 1 }
    );
    let tx = c.unchecked_transaction().unwrap();
    for i in 0..rows {
        tx.execute("INSERT INTO item (v) VALUES (?1)", [format!("row{i}")])
            .unwrap();
    }
    tx.commit().unwrap();
}

fn version(c: &Connection) -> i64 {
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

fn rows(c: &Connection) -> Vec<String> {
    let mut st = c.prepare("SELECT v FROM item ORDER BY k").unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn columns(c: &Connection) -> Vec<String> {
    let mut st = c
        .prepare("SELECT name FROM pragma_table_info('item')")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// The child half of `a_killed_upgrade_leaves_the_old_version`: runs only when given a file.
#[test]
fn child_upgrades_until_killed() {
    let Some(path) = std::env::var_os("FILEFORMAT_CHILD_DB") else {
        return;
    };
    let path = Path::new(&path);
    let c = open(path);
    // A small page cache: the step's changes spill into the WAL before the kill, uncommitted.
    c.pragma_update(None, "cache_size", 10).unwrap();
    let stalling = [
        V1[0],
        Migration {
            version: 2,
            name: "items get w",
            apply: v2_stalling,
        },
    ];
    upgrade(&c, path, &KV_STORE, &stalling).unwrap();
    panic!("the upgrade should have been killed");
}

#[test]
fn a_killed_upgrade_leaves_the_old_version_and_the_next_open_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    file_at_v1(&path, 5_000);
    let before = rows(&open(&path));

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_upgrades_until_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FILEFORMAT_CHILD_DB", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "the child ended before it was killed"
        );
        if line.trim_end().ends_with("MIGRATING") {
            break;
        }
    }
    // The child holds the write transaction, its changes written to the WAL but not committed.
    let wal = std::fs::metadata(dir.path().join("kv.sqlite3-wal")).unwrap();
    assert!(
        wal.len() > 0,
        "the migration wrote to the WAL before the kill"
    );
    // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());

    let c = open(&path);
    let found = check(&c, &path, &KV_STORE, 2).unwrap();
    assert_eq!((found.version, found.stamped), (1, true));
    assert_eq!(rows(&c), before, "the rows are as they were");
    assert_eq!(columns(&c), ["k", "v"], "version 2's column is not there");
    drop(c);

    let c = open(&path);
    assert_eq!(
        upgrade(&c, &path, &KV_STORE, V2).unwrap(),
        Outcome::Upgraded { from: 1, to: 2 }
    );
    assert_eq!(version(&c), 2);
    assert_eq!(rows(&c).len(), 2 * before.len());
    assert_eq!(rows(&c)[0], "ROW0");
    assert_eq!(upgrade(&c, &path, &KV_STORE, V2).unwrap(), Outcome::Current);
}

#[test]
fn a_failing_upgrade_rolls_back_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    file_at_v1(&path, 100);
    let c = open(&path);
    let failing = [
        V1[0],
        Migration {
            version: 2,
            name: "items get w",
            apply: v2_failing,
        },
    ];
    let e = upgrade(&c, &path, &KV_STORE, &failing).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("migration 2 (items get w)")
            && msg.contains("from format version 1 to 2")
            && msg.contains("rolled back")
            && msg.contains("no such table"),
        "{msg}"
    );
    assert!(c.is_autocommit());
    assert_eq!(version(&c), 1);
    assert_eq!(rows(&c)[0], "row0");
    assert_eq!(columns(&c), ["k", "v"]);
    assert_eq!(
        upgrade(&c, &path, &KV_STORE, V2).unwrap(),
        Outcome::Upgraded { from: 1, to: 2 }
    );
}

#[test]
fn a_file_from_a_newer_tandem_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    file_at_v1(&path, 3);
    open(&path)
        .execute_batch("PRAGMA user_version = 7; PRAGMA journal_mode = DELETE;")
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();

    let c = open(&path);
    let e = upgrade(&c, &path, &KV_STORE, V2).unwrap_err();
    assert_eq!(
        e,
        FormatError::TooNew {
            path: path.clone(),
            kind: "key-value store",
            found: 7,
            known: 2
        }
    );
    let msg = e.to_string();
    for part in [
        path.to_str().unwrap(),
        "key-value store",
        "format version 7",
        "up to 2",
        "Run the newer Tandem",
        "restore the backup",
        "Rolling back",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    drop(c);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "not a byte changed");
    assert!(!dir.path().join("kv.sqlite3-wal").exists());
}

#[test]
fn a_file_of_another_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Stamped as a sensor list.
    let path = dir.path().join("sensors.sqlite3");
    let c = open(&path);
    let sensor = [Migration {
        version: 1,
        name: "sensors",
        apply: |c| c.execute_batch("CREATE TABLE sensor (name TEXT PRIMARY KEY)"),
    }];
    upgrade(&c, &path, &SENSOR_LIST, &sensor).unwrap();
    let e = upgrade(&c, &path, &KV_STORE, V1).unwrap_err().to_string();
    assert!(
        e.contains("is not a key-value store: it is a collector's sensor list"),
        "{e}"
    );

    // From before versions: known by its tables.
    let path = dir.path().join("cdr.sqlite3");
    let c = open(&path);
    c.execute_batch("CREATE TABLE cdr (id INTEGER PRIMARY KEY)")
        .unwrap();
    let e = upgrade(&c, &path, &KV_STORE, V1).unwrap_err().to_string();
    assert!(e.contains("it is a CDR database (tables cdr)"), "{e}");

    // Another program's.
    let path = dir.path().join("other.sqlite3");
    let c = open(&path);
    c.execute_batch("CREATE TABLE t (x); PRAGMA application_id = 42;")
        .unwrap();
    let e = upgrade(&c, &path, &KV_STORE, V1).unwrap_err().to_string();
    assert!(e.contains("application_id is 0x0000002a"), "{e}");
}

#[test]
fn a_file_from_before_versions_is_stamped_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    let c = open(&path);
    v1(&c).unwrap();
    c.execute("INSERT INTO item (v) VALUES ('old')", [])
        .unwrap();
    let found = check(&c, &path, &KV_STORE, 1).unwrap();
    assert_eq!((found.version, found.stamped), (0, false));
    assert_eq!(
        upgrade(&c, &path, &KV_STORE, V1).unwrap(),
        Outcome::Upgraded { from: 0, to: 1 }
    );
    assert_eq!(rows(&c), ["old"]);
    let app: i32 = c
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(&app.to_be_bytes(), b"TDKV");
    assert_eq!(version(&c), 1);
}

#[test]
fn a_read_only_reader_reads_an_older_file_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    file_at_v1(&path, 2);
    let c = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    assert_eq!(
        upgrade(&c, &path, &KV_STORE, V2).unwrap(),
        Outcome::ReadOnly(1)
    );
    assert_eq!(rows(&c).len(), 2);
}
