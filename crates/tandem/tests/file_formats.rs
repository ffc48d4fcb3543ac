//! Files from a newer Tandem, as an older `tandem` meets them after a rollback: the store, the
//! CDR database and the console's accounts in a format version this build does not know are
//! refused by every command that opens them, with the message naming the file, both versions
//! and what to do, and a non-zero exit; the file is left as it was.

use std::path::Path;
use std::process::{Command, Output};

/// The format version a newer Tandem would have written.
const FUTURE: i32 = 9;

fn tandem(args: &[&str], data: &Path, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env("TANDEM_LOG", "warn")
        .env_remove("TANDEM_DATA_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Sets the file's `PRAGMA user_version` (the 4 bytes at offset 60 of SQLite's header) as a
/// newer Tandem's upgrade would. The file was closed cleanly: nothing of it waits in a WAL.
fn stamp_future(db: &Path) {
    use std::os::unix::fs::FileExt;
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    assert!(
        std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
        "{} holds a WAL",
        db.display()
    );
    let f = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    f.write_all_at(&FUTURE.to_be_bytes(), 60).unwrap();
}

/// The refusal, whole: the file, its kind, both versions, what to do.
fn assert_refused(o: &Output, db: &Path, kind: &str, known: u32) -> Vec<u8> {
    assert!(!o.status.success(), "a file of a newer format was accepted");
    let err = String::from_utf8_lossy(&o.stderr);
    for part in [
        format!("{} is a {kind} in format version {FUTURE}", db.display()),
        format!("reads format versions up to {known}"),
        "Run the newer Tandem again".into(),
        "restore the backup taken before the upgrade".into(),
        "Rolling back".into(),
    ] {
        assert!(err.contains(&part), "{part:?} missing from:\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    std::fs::read(db).unwrap()
}

#[test]
fn a_store_from_a_newer_tandem_is_refused_by_db_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&tandem(&["db", "put", "sip", "1001", "x"], d, ""));
    let db = d.join("kv.sqlite3");
    stamp_future(&db);
    let bytes = std::fs::read(&db).unwrap();
    let known = kv::FORMAT_VERSION;

    // Reading (a read-only open) and writing alike.
    let o = tandem(&["db", "get", "sip", "1001"], d, "");
    assert_eq!(assert_refused(&o, &db, "key-value store", known), bytes);
    assert!(o.stdout.is_empty());
    let o = tandem(&["db", "put", "sip", "1002", "y"], d, "");
    assert_eq!(assert_refused(&o, &db, "key-value store", known), bytes);

    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let agi = free.local_addr().unwrap().to_string();
    drop(free);
    let o = tandem(
        &[
            "serve",
            "--agi-listen",
            &agi,
            "--metrics-listen",
            "127.0.0.1:0",
            "--web-listen",
            "127.0.0.1:0",
        ],
        d,
        "",
    );
    assert_eq!(assert_refused(&o, &db, "key-value store", known), bytes);
}

#[test]
fn a_cdr_database_from_a_newer_tandem_is_refused_by_cdr() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let list = |db: &Path| {
        Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["cdr", "list", "--json", "--db"])
            .arg(db)
            .env("TANDEM_LOG", "warn")
            .output()
            .unwrap()
    };
    drop(cdr::SqliteStore::open(&db).unwrap());
    ok(&list(&db));
    stamp_future(&db);
    let bytes = std::fs::read(&db).unwrap();
    let o = list(&db);
    assert_eq!(
        assert_refused(&o, &db, "CDR database", cdr::SQLITE_FORMAT_VERSION),
        bytes
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn console_accounts_from_a_newer_tandem_are_refused_by_user() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&tandem(
        &["user", "add", "ops", "--role", "admin", "--password-stdin"],
        d,
        "correct horse battery staple\n",
    ));
    let db = d.join("console.sqlite3");
    stamp_future(&db);
    let bytes = std::fs::read(&db).unwrap();
    let o = tandem(&["user", "list"], d, "");
    assert_eq!(
        assert_refused(&o, &db, "console accounts database", 1),
        bytes
    );
}

#[test]
fn a_cdr_database_given_as_the_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    drop(cdr::SqliteStore::open(&d.join("kv.sqlite3")).unwrap());
    let o = tandem(&["db", "put", "sip", "1001", "x"], d, "");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is not a key-value store: it is a CDR database"),
        "{err}"
    );
}

#[test]
fn a_capture_into_a_cdr_database_from_a_newer_tandem_is_refused_at_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("calls.pcap");
    let cfg = monitor::synth::SynthConfig {
        calls: 2,
        ..monitor::synth::SynthConfig::default()
    };
    monitor::synth::generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let db = dir.path().join("cdr.sqlite3");
    drop(cdr::SqliteStore::open(&db).unwrap());
    stamp_future(&db);
    let bytes = std::fs::read(&db).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["capture", "--read"])
        .arg(&pcap)
        .arg("--cdr-db")
        .arg(&db)
        .env("TANDEM_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(
        assert_refused(&o, &db, "CDR database", cdr::SQLITE_FORMAT_VERSION),
        bytes
    );
    assert!(
        !dir.path().join("cdr.journal").exists(),
        "no record was journaled for it"
    );
}
