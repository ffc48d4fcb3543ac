//! `tandem db ...` as a child process, the way scripts and operators use it.

use std::path::Path;
use std::process::{Command, Output};

fn tandem(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("db")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("TANDEM_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn put_get_show_del_deltree() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = tandem(d, &["put", "sip", "1001", "sip:1001@192.0.2.1 / x"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.join("kv.sqlite3").exists());
    let o = tandem(d, &["get", "sip", "1001"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o), "sip:1001@192.0.2.1 / x\n");
    let o = tandem(d, &["get", "sip", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    assert!(
        tandem(d, &["put", "sip", "10011", "sibling"])
            .status
            .success()
    );
    assert!(
        tandem(d, &["put", "sip", "1001/sub", "below"])
            .status
            .success()
    );
    assert!(
        tandem(d, &["put", "cw", "1001", "ENABLED"])
            .status
            .success()
    );
    let o = tandem(d, &["show", "sip"]);
    assert_eq!(
        stdout(&o),
        format!(
            "{:<50}: {:<25}\n{:<50}: {:<25}\n{:<50}: {:<25}\n3 results found.\n",
            "/sip/1001",
            "sip:1001@192.0.2.1 / x",
            "/sip/1001/sub",
            "below",
            "/sip/10011",
            "sibling"
        )
    );
    let o = tandem(d, &["deltree", "sip", "1001"]);
    assert_eq!(stdout(&o), "2 database entries removed.\n");
    let o = tandem(d, &["show"]);
    assert!(stdout(&o).contains("/sip/10011"));
    assert!(stdout(&o).contains("/cw/1001"));
    assert!(stdout(&o).ends_with("2 results found.\n"));
    let o = tandem(d, &["del", "cw", "1001"]);
    assert!(o.status.success());
    let o = tandem(d, &["del", "cw", "1001"]);
    assert_eq!(o.status.code(), Some(1));
    // Deleting what is not there: del and deltree agree (exit 1, the message on stderr).
    let o = tandem(d, &["deltree", "nofamily"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Database entries do not exist."));
}

#[test]
fn import_export_backup() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let src = dir.path().join("astdb.sqlite3");
    let ok = Command::new("sqlite3")
        .arg(&src)
        .arg(format!(
            "{}; INSERT INTO astdb VALUES('/CW/1001','ENABLED'); \
             INSERT INTO astdb VALUES('/AMPUSER/1001/cidname','Alice Smith');",
            kv::ASTDB_CREATE_SQL
        ))
        .status()
        .expect("the sqlite3 CLI (Debian package sqlite3)");
    assert!(ok.success());
    let o = tandem(&d, &["import-astdb", src.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stdout(&tandem(&d, &["get", "AMPUSER", "1001/cidname"])),
        "Alice Smith\n"
    );
    let out = dir.path().join("out.sqlite3");
    let o = tandem(&d, &["export-astdb", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dump = Command::new("sqlite3")
        .arg(&out)
        .arg("SELECT key || '=' || value FROM astdb ORDER BY key;")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(dump.stdout).unwrap(),
        "/AMPUSER/1001/cidname=Alice Smith\n/CW/1001=ENABLED\n"
    );
    let o = tandem(&d, &["export-astdb", out.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    let bk = dir.path().join("backup.sqlite3");
    assert!(
        tandem(&d, &["backup", bk.to_str().unwrap()])
            .status
            .success()
    );
    let o = tandem(
        &d,
        &["import-astdb", dir.path().join("missing").to_str().unwrap()],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing"));
}
