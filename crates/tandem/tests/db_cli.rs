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

/// Runs `tandem db ARGS` as the unprivileged user `nobody`, from a copy of the binary that
/// user may execute (the build directory may sit under a home it cannot enter).
fn tandem_as_nobody(bin: &Path, data: &Path, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(bin)
        .arg("db")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("TANDEM_LOG", "warn")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap()
}

#[test]
fn a_user_who_cannot_write_the_directory_reads_the_store_and_leaves_nothing_beside_it() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        test_env::skip("needs root, to run `tandem db` as another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let open = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(dir.path(), 0o755);
    let bin = dir.path().join("tandem");
    std::fs::copy(env!("CARGO_BIN_EXE_tandem"), &bin).unwrap();
    open(&bin, 0o755);
    let data = dir.path().join("data");
    assert!(
        tandem(&data, &["put", "sip", "1001", "contact"])
            .status
            .success()
    );
    // The store's directory and file belong to root; nobody may read, not write.
    open(&data, 0o755);
    open(&data.join("kv.sqlite3"), 0o644);
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let o = tandem_as_nobody(&bin, &data, &["get", "sip", "1001"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), "contact\n");
    let o = tandem_as_nobody(&bin, &data, &["show"]);
    assert!(
        stdout(&o).contains("/sip/1001"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(listing(), before, "a reader left files beside the store");

    // Root reading leaves no root-owned -wal/-shm that would lock the service's user out.
    assert!(tandem(&data, &["get", "sip", "1001"]).status.success());
    assert_eq!(listing(), before);
}

#[test]
fn backup_all_saves_the_store_and_the_consoles_accounts_into_a_new_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert!(tandem(&data, &["put", "sip", "1001", "x"]).status.success());
    // The console's accounts as `tandem user add` leaves them.
    let o = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["user", "add", "admin", "--role", "admin", "--data-dir"])
        .arg(&data)
        .env("TANDEM_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"a-long-password-1\na-long-password-1\n")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let bk = dir.path().join("bk");
    let o = tandem(&data, &["backup", "--all", bk.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout(&o).contains("kv.sqlite3, console.sqlite3"),
        "{}",
        stdout(&o)
    );
    // Each copy is a whole database in its own right, its owner's alone.
    let users = Command::new("sqlite3")
        .arg(bk.join("console.sqlite3"))
        .arg("SELECT name FROM user;")
        .output()
        .expect("the sqlite3 CLI (Debian package sqlite3)");
    assert_eq!(
        String::from_utf8_lossy(&users.stdout),
        "admin\n",
        "{users:?}"
    );
    assert_eq!(stdout(&tandem(&bk, &["get", "sip", "1001"])), "x\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&bk), 0o700);
    assert_eq!(mode(&bk.join("console.sqlite3")), 0o600);
    let note = std::fs::read_to_string(bk.join("backup.txt")).unwrap();
    assert!(note.contains(env!("CARGO_PKG_VERSION")), "{note}");

    // Never into an existing directory, and never an empty backup.
    let o = tandem(&data, &["backup", "--all", bk.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("exists"));
    let o = tandem(
        &dir.path().join("empty"),
        &["backup", "--all", dir.path().join("bk2").to_str().unwrap()],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to back up"));
}

#[test]
fn root_acts_as_the_owner_of_the_data_directory() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        test_env::skip("needs root, to give the data directory to another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    // As a packaged install's /var/lib/tandem: the service's user owns it (nobody, here).
    std::os::unix::fs::chown(&data, Some(65534), Some(65534)).unwrap();
    let o = tandem(&data, &["put", "sip", "1001", "x"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bk = data.join("backup");
    assert!(
        tandem(&data, &["backup", "--all", bk.to_str().unwrap()])
            .status
            .success()
    );
    for entry in walk(&data) {
        let meta = std::fs::metadata(&entry).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (65534, 65534),
            "{} was left to root: the service could not open it",
            entry.display()
        );
    }
}

/// Every file and directory under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
