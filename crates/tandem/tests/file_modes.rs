//! No other local user reads Tandem's files. A data directory an operator made world-readable
//! (0755, as `mkdir` under the usual umask makes it) is filled as in production: captures
//! imported with `tandem capture` (CDRs and a full archive), a console user, a registrar user,
//! then a real `tandem serve` that registers a phone over SIP (SIPp, digest MD5), signs a user
//! in, stores a call it hears over HEP into the same CDR database and archive, and samples its
//! history. Every file under the data directory, SQLite's `-wal` and `-shm` files included, is
//! then checked twice (while `serve` runs and after it stopped): its mode gives nothing to the
//! group or to others, and `nobody` (through `setpriv`) cannot read a byte of it.
//!
//! With `--group` (`[capture] group`), the CDR database and the archive are that group's to
//! read, and nothing else is.
//!
//! Everything runs under umask 000, the worst an operator's service manager could hand over.
//! Needs root (to become `nobody`) and SIPp; skips with a reason otherwise (fails under CI).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
/// `nobody` and `nogroup` on Debian.
const NOBODY: &str = "65534";

/// Whether this test can run here: root (to become `nobody`), `setpriv` and SIPp.
fn runnable() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        test_env::skip("not root: cannot read files as `nobody` through setpriv");
        return false;
    }
    for (tool, package) in [("setpriv", "util-linux"), ("sipp", "sip-tester")] {
        let found = Command::new(tool)
            .arg(if tool == "sipp" { "-v" } else { "--version" })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            test_env::skip(&format!(
                "`{tool}` is not installed (Debian package `{package}`)"
            ));
            return false;
        }
    }
    true
}

/// Runs `tandem ARGS`, with `stdin` on its standard input; it must succeed.
fn tandem(args: &[&str], stdin: &str) {
    use std::io::Write;
    let mut child = Command::new(EXE)
        .args(args)
        .env("TANDEM_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{stdin}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tandem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Twelve synthetic G.711 calls (audio, DTMF), written to `dir`.
fn synthetic_pcap(dir: &Path) -> PathBuf {
    let path = dir.join("synthetic.pcap");
    let cfg = monitor::synth::SynthConfig {
        calls: 12,
        call_interval_us: 400_000,
        call_duration_ms: 2_000,
        seed: 30,
        kinds: vec![
            monitor::synth::CallKind::Voice,
            monitor::synth::CallKind::Dtmf,
        ],
        ..monitor::synth::SynthConfig::default()
    };
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    monitor::synth::generate(&cfg, file).unwrap();
    path
}

/// Every regular file below `root` (symbolic links are not followed).
fn files_below(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// What `nobody` reads of `file`: `Ok(bytes)` when it could open it, else the error it got.
fn read_as_nobody(file: &Path) -> Result<usize, String> {
    read_as(NOBODY, NOBODY, file)
}

/// What the user `uid`, with no group but `gid`, reads of `file`.
fn read_as(uid: &str, gid: &str, file: &Path) -> Result<usize, String> {
    let out = Command::new("setpriv")
        .args(["--reuid", uid, "--regid", gid, "--clear-groups", "--"])
        .args(["head", "-c", "1"])
        .arg(file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(out.stdout.len())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Every file below `data` is its owner's alone, and `nobody` reads none of them; `expected`
/// names files (relative to `data`) that must be among them, so that the check covers them.
fn assert_private(data: &Path, expected: &[&str], when: &str) {
    let files = files_below(data);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.strip_prefix(data).unwrap().display().to_string())
        .collect();
    for name in expected {
        assert!(
            names.iter().any(|n| n == name),
            "{when}: no {name} in the data directory: {names:?}"
        );
    }
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("archive/") && n.ends_with(".tar")),
        "{when}: no archive tar: {names:?}"
    );
    let mut readable = Vec::new();
    for (file, name) in files.iter().zip(&names) {
        let mode = std::fs::metadata(file).unwrap().mode() & 0o7777;
        match read_as_nobody(file) {
            Ok(n) => readable.push(format!("{name} ({mode:04o}, nobody read {n} byte)")),
            Err(e) if mode & 0o077 != 0 => readable.push(format!("{name} ({mode:04o}): {e}")),
            Err(e) => assert!(e.contains("Permission denied"), "{name}: {e}"),
        }
    }
    assert!(
        readable.is_empty(),
        "{when}: {} of {} files are open to other users:\n{}",
        readable.len(),
        files.len(),
        readable.join("\n")
    );
    eprintln!("{when}: none of {} files readable by nobody", files.len());
}

/// A temporary directory holding `data`, both 0755 as an operator's `mkdir` makes them, with
/// the process's umask 000 (this test's children inherit it: the widest an operator could
/// give); `None` when the test cannot run here.
fn open_data_dir() -> Option<(tempfile::TempDir, PathBuf)> {
    if !runnable() {
        return None;
    }
    // SAFETY: umask only swaps the process's mask; every test of this file sets the same.
    unsafe { libc::umask(0) };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for d in [dir.path(), &data] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Some((dir, data))
}

/// The `tandem serve` under test; killed and reaped if the test fails before it stops.
struct Serve(Option<Child>);

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn no_other_user_reads_the_data_directory_after_serve() {
    let Some((dir, data)) = open_data_dir() else {
        return;
    };
    let data_arg = data.to_str().unwrap();
    let cdr_db = data.join("cdr.sqlite3");
    let archive = data.join("archive");

    // Captures imported: CDRs and every packet, audio included.
    let mut inputs = vec![synthetic_pcap(dir.path())];
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/captures/rtp_rtcp_sip_ipv4_udp.pcap");
    if shared.is_file() {
        inputs.push(shared);
    } else {
        test_env::skip("the shared captures are missing; importing a synthetic one only");
    }
    let mut args = vec!["capture", "--read"];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--archive", archive.to_str().unwrap()]);
    args.extend([
        "--archive-store",
        "full",
        "--cdr-db",
        cdr_db.to_str().unwrap(),
    ]);
    tandem(&args, "");
    let imported = common::stored_calls(&cdr_db).len();
    assert!(imported >= 12, "{imported} calls imported");

    // Users, before serve opens anything.
    tandem(
        &[
            "user",
            "add",
            "admin",
            "--role",
            "admin",
            "--password-stdin",
            "--data-dir",
            data_arg,
        ],
        PASSWORD,
    );
    tandem(
        &[
            "sip",
            "--data-dir",
            data_arg,
            "user",
            "add",
            "1001",
            "--password-stdin",
        ],
        "s3cret-md5",
    );

    let (sip, web, hep) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"127.0.0.1:0\"\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n\
             [history]\ninterval_s = 1\n\
             [web]\nlisten = \"127.0.0.1:{web}\"\n\
             [kv]\ndata_dir = {data:?}\n\
             [registrar]\nlisten = \"127.0.0.1:{sip}\"\n\
             [capture]\nhep_listen = \"127.0.0.1:{hep}\"\narchive_dir = {archive:?}\n\
             archive_store = \"full\"\nstatus_interval_s = 0\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let mut serve = Serve(Some(
        Command::new(EXE)
            .args(["serve", "--config", config.to_str().unwrap()])
            .env("TANDEM_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    ));
    let server_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let web_addr = std::net::SocketAddr::from(([127, 0, 0, 1], web));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(web_addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "serve did not listen: {}",
            server_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A phone registers (a binding in the store beside the HA1s)...
    let sipp_dir = dir.path().join("sipp");
    std::fs::create_dir(&sipp_dir).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sipp/auth_md5.xml"),
        sipp_dir.join("auth_md5.xml"),
    )
    .unwrap();
    let status = Command::new("sipp")
        .arg(format!("127.0.0.1:{sip}"))
        .args(["-sf", "auth_md5.xml", "-i", "127.0.0.1"])
        .args(["-p", &common::free_port().to_string()])
        .args(["-m", "1", "-nostdin", "-timeout", "20s", "-timeout_error"])
        .args(["-s", "1001", "-au", "1001", "-ap", "s3cret-md5"])
        .current_dir(&sipp_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "SIPp's REGISTER failed: {}", server_log());
    // ... a user signs in (a session in the console's database) ...
    bench::browser::login_cookie(web_addr, "admin", PASSWORD).unwrap();
    // ... and a call heard over HEP is stored and archived.
    common::send_udp(hep, &common::one_call_as_hep("modes@tandem.test"));
    let stored = common::wait_for_stored_calls(&cdr_db, imported + 1, Duration::from_secs(30));
    assert_eq!(stored.len(), imported + 1, "{}", server_log());
    // Two history samples at least.
    std::thread::sleep(Duration::from_secs(2));

    let expected = [
        "kv.sqlite3",
        "kv.sqlite3-wal",
        "kv.sqlite3-shm",
        "console.sqlite3",
        "console.sqlite3-wal",
        "cdr.sqlite3",
        "cdr.sqlite3-wal",
        "history.sqlite3",
        "history.sqlite3-wal",
    ];
    assert_private(&data, &expected, "while serve runs");

    let mut child = serve.0.take().unwrap();
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let exited = child.wait().unwrap();
    assert!(exited.success(), "serve: {exited}: {}", server_log());
    assert_private(&data, &expected[..1], "after serve stopped");
}

#[test]
fn a_group_reads_the_cdrs_and_the_archive_and_nothing_else() {
    let Some((dir, data)) = open_data_dir() else {
        return;
    };
    let (cdr_db, archive) = (data.join("cdr.sqlite3"), data.join("archive"));
    let pcap = synthetic_pcap(dir.path());
    tandem(
        &[
            "capture",
            "--read",
            pcap.to_str().unwrap(),
            "--archive",
            archive.to_str().unwrap(),
            "--archive-store",
            "full",
            "--cdr-db",
            cdr_db.to_str().unwrap(),
            "--group",
            NOBODY,
        ],
        "",
    );
    let gid: u32 = NOBODY.parse().unwrap();
    let files = files_below(&data);
    let tars = files.iter().filter(|f| f.starts_with(&archive)).count();
    assert!(tars >= 2, "{files:?}");
    for file in &files {
        let meta = std::fs::metadata(file).unwrap();
        let (mode, name) = (meta.mode() & 0o7777, file.display());
        if file.starts_with(&archive) || file == &cdr_db {
            assert_eq!((mode, meta.gid()), (0o640, gid), "{name}: {mode:04o}");
            assert_eq!(
                read_as(NOBODY, NOBODY, file),
                Ok(1),
                "{name}: the group reads it"
            );
            // One who is not in the group reads nothing.
            assert!(
                read_as(NOBODY, "65533", file).is_err(),
                "{name}: {mode:04o}"
            );
        } else {
            // The CDR journal (and SQLite's files once closed) stay the owner's.
            assert_eq!(mode & 0o077, 0, "{name}: {mode:04o}");
            assert!(read_as_nobody(file).is_err(), "{name}");
        }
    }
    let mut dirs = vec![archive.clone()];
    while let Some(d) = dirs.pop() {
        let meta = std::fs::metadata(&d).unwrap();
        assert_eq!(
            (meta.mode() & 0o7777, meta.gid()),
            (0o2750, gid),
            "{}",
            d.display()
        );
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            }
        }
    }

    // A group this process may not give is refused before anything is written.
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            NOBODY,
            "--regid",
            NOBODY,
            "--clear-groups",
            "--",
            EXE,
        ])
        .args([
            "capture",
            "--read",
            pcap.to_str().unwrap(),
            "--cdr-db",
            "/dev/null/x",
        ])
        .args(["--group", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--group 0") && stderr.contains("not a member"),
        "{stderr}"
    );
}

#[test]
fn an_astdb_export_is_its_owners_or_its_groups() {
    let Some((dir, data)) = open_data_dir() else {
        return;
    };
    let data_arg = data.to_str().unwrap();
    tandem(
        &["db", "--data-dir", data_arg, "put", "CW", "1001", "ENABLED"],
        "",
    );
    let private = dir.path().join("private.sqlite3");
    tandem(
        &[
            "db",
            "--data-dir",
            data_arg,
            "export-astdb",
            private.to_str().unwrap(),
        ],
        "",
    );
    let meta = std::fs::metadata(&private).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert!(read_as_nobody(&private).is_err());

    let shared = dir.path().join("shared.sqlite3");
    let export = ["db", "--data-dir", data_arg, "export-astdb"];
    let mut args = export.to_vec();
    args.extend([shared.to_str().unwrap(), "--group", NOBODY]);
    tandem(&args, "");
    let meta = std::fs::metadata(&shared).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o640, 65534));
    assert_eq!(read_as(NOBODY, NOBODY, &shared), Ok(1));
    assert!(read_as(NOBODY, "65533", &shared).is_err());
}

#[test]
fn a_legacy_script_gets_the_umask_tandem_was_started_with() {
    let Some((dir, data)) = open_data_dir() else {
        return;
    };
    let agi_bin = dir.path().join("agi-bin");
    std::fs::create_dir(&agi_bin).unwrap();
    let script = agi_bin.join("umask.agi");
    std::fs::write(
        &script,
        "#!/bin/sh\nwhile read -r line && [ -n \"$line\" ]; do :; done\n\
         echo \"SET VARIABLE UMASK $(umask)\"\nread -r reply\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (agi, metrics) = (common::free_port(), common::free_port());
    let log = dir.path().join("serve.log");
    let _serve = Serve(Some(
        Command::new(EXE)
            .args(["serve", "--agi-listen", &format!("127.0.0.1:{agi}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .args([
                "--web-listen",
                &format!("127.0.0.1:{}", common::free_port()),
            ])
            .args(["--agi-script-dir", agi_bin.to_str().unwrap()])
            .args(["--data-dir", data.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", metrics)).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let plan = asterisk_emu::Plan {
        idle_timeout: Duration::from_secs(10),
        ..asterisk_emu::Plan::route("umask.agi")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], agi));
    let out = rt.block_on(asterisk_emu::run(addr, &plan, 1)).unwrap();
    let vars = &out.channel.as_ref().unwrap().variables;
    // This test's umask (000), not Tandem's own (077).
    assert_eq!(
        vars["UMASK"],
        "0000",
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
