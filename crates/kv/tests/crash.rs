//! Crash safety and storage failures, with real child processes.
//!
//! The child is this test binary run again with `KV_TEST_CHILD` set: the `child` test then does
//! the work and prints `ACK n` after each acknowledged write.

use kv::{Options, Store};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CHILD_ENV: &str = "KV_TEST_CHILD";

fn value_for(iter: u64, i: u64) -> String {
    if i % 7 == 3 {
        format!("{iter}-{i}-{}", "L".repeat(6000))
    } else {
        format!("{iter}-{i}-value with spaces / and slashes")
    }
}

/// The child side. Does nothing in a normal test run.
#[test]
fn child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let mode = parts.next().unwrap();
    let iter: u64 = parts.next().unwrap().parse().unwrap();
    let dir = parts.next().unwrap();
    if let Ok(uid) = std::env::var("KV_TEST_CHILD_UID") {
        let uid: u32 = uid.parse().unwrap();
        // SAFETY: plain libc calls with constant arguments, before any other thread exists
        // that depends on the process' identity.
        unsafe {
            assert_eq!(libc::setgid(uid), 0);
            assert_eq!(libc::setuid(uid), 0);
        }
    }
    let store = match Store::open_dir(dir, Options::default()) {
        Ok(s) => s,
        Err(e) => {
            println!("OPENERR {e}");
            return;
        }
    };
    match mode {
        "puts" => {
            for i in 0.. {
                store
                    .put("crash", &format!("{iter}-{i}"), value_for(iter, i))
                    .unwrap();
                println!("ACK {i}");
            }
        }
        "full" => {
            let mut failures = 0;
            for i in 0..10_000u64 {
                match store.put("full", &i.to_string(), "F".repeat(16_000)) {
                    Ok(()) => println!("ACK {i}"),
                    Err(e) => {
                        println!("ERR {i} {e}");
                        println!("VISIBLE {}", store.exists("full", &i.to_string()));
                        failures += 1;
                        if failures == 3 {
                            // An async write's failure surfaces at the next flush.
                            let accepted = store
                                .put_with(
                                    "full",
                                    "async",
                                    "A".repeat(16_000),
                                    kv::Durability::Async,
                                )
                                .is_ok();
                            println!(
                                "ASYNC accepted={accepted} flush_failed={}",
                                store.flush().is_err()
                            );
                            break;
                        }
                    }
                }
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn_child(spec: &str, fsize_limit: Option<u64>, uid: Option<u32>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(uid) = uid {
        cmd.env("KV_TEST_CHILD_UID", uid.to_string());
    }
    if let Some(limit) = fsize_limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe libc calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Writes past the limit then fail with EFBIG instead of killing the process.
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    cmd.spawn().unwrap()
}

fn integrity(path: &Path) -> String {
    let out = Command::new("sqlite3")
        .arg(path)
        .arg("PRAGMA integrity_check;")
        .output()
        .expect("the sqlite3 CLI (Debian package sqlite3) must be installed");
    String::from_utf8(out.stdout).unwrap()
}

/// The text after `marker` in a line of the child's output (libtest may print before it).
fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_write() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let mut acked_total = 0u64;
    for iter in 0..50u64 {
        let mut child = spawn_child(&format!("puts:{iter}:{}", dir.path().display()), None, None);
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acked: Option<u64> = None;
            let mut other = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = after(&line, "ACK ") {
                    acked = Some(n.parse().unwrap());
                } else if line.contains("OPENERR") {
                    other.push(line);
                }
            }
            (acked, other)
        });
        std::thread::sleep(Duration::from_millis(rng.next() % 250));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (acked, other) = reader.join().unwrap();
        assert!(other.is_empty(), "child failed: {other:?} (seed {seed})");
        let store = Store::open_dir(dir.path(), Options::default()).unwrap();
        if let Some(last) = acked {
            for i in 0..=last {
                let got = store.get("crash", &format!("{iter}-{i}")).unwrap();
                assert_eq!(
                    got.as_ref().map(|v| v.to_string()),
                    Some(value_for(iter, i)),
                    "iteration {iter}: acknowledged write {i} lost (seed {seed})"
                );
            }
            acked_total += last + 1;
        }
        drop(store);
        if iter % 10 == 9 {
            assert_eq!(integrity(&dir.path().join(kv::FILE_NAME)), "ok\n");
        }
    }
    assert!(acked_total > 0, "no child acknowledged anything");
    eprintln!("{acked_total} acknowledged writes checked");
    assert_eq!(integrity(&dir.path().join(kv::FILE_NAME)), "ok\n");
}

#[test]
fn disk_full_gives_a_clear_error_and_loses_nothing_acknowledged() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A 2 MiB file size limit in the child: SQLite's writes past it fail (EFBIG), as on a full
    // disk.
    let mut child = spawn_child(
        &format!("full:0:{}", dir.path().display()),
        Some(2 << 20),
        None,
    );
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut acked = Vec::new();
    let mut errors = Vec::new();
    let mut visible = Vec::new();
    let mut out_async = Vec::new();
    for line in out.lines() {
        let line = line.unwrap();
        if line.contains("ASYNC ") {
            out_async.push(line.clone());
        }
        if let Some(n) = after(&line, "ACK ") {
            acked.push(n.parse::<u64>().unwrap());
        } else if let Some(e) = after(&line, "ERR ") {
            errors.push(e.to_string());
        } else if let Some(v) = after(&line, "VISIBLE ") {
            visible.push(v.to_string());
        } else if line.contains("OPENERR") {
            panic!("child could not open: {line}");
        }
    }
    assert!(child.wait().unwrap().success());
    assert!(!acked.is_empty(), "nothing was written before the limit");
    assert_eq!(errors.len(), 3, "{errors:?}");
    eprintln!("the error a full disk gives: {}", errors[0]);
    let path = dir.path().join(kv::FILE_NAME);
    for e in &errors {
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("safe on disk"), "{e}");
        assert!(e.contains("free space") || e.contains("full"), "{e}");
    }
    assert!(
        out_async
            .iter()
            .any(|l| l.contains("accepted=true flush_failed=true")),
        "{out_async:?}"
    );
    // A write that failed is not shown to readers.
    assert!(visible.iter().all(|v| v == "false"), "{visible:?}");
    // Without the limit, every acknowledged write is there.
    let store = Store::open_dir(dir.path(), Options::default()).unwrap();
    for i in &acked {
        assert!(
            store.exists("full", &i.to_string()),
            "acknowledged write {i} lost"
        );
    }
    drop(store);
    assert_eq!(integrity(&path), "ok\n");
}

#[test]
fn read_only_directory_gives_a_clear_error_and_keeps_the_data() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    {
        let s = Store::open_dir(&data, Options::default()).unwrap();
        s.put("keep", "me", "safe").unwrap();
    }
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(&data).unwrap() {
        let p = entry.unwrap().path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root ignores permissions: the child then drops to the unprivileged user `nobody`.
    // SAFETY: geteuid has no preconditions.
    let uid = (unsafe { libc::geteuid() } == 0).then_some(65534);
    let child = spawn_child(&format!("puts:0:{}", data.display()), None, uid);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let line = stdout
        .lines()
        .find(|l| l.contains("OPENERR"))
        .unwrap_or_else(|| panic!("the child opened a read-only store: {stdout}"));
    assert!(line.contains(&data.display().to_string()), "{line}");
    assert!(line.contains("writable"), "{line}");
    assert!(!stdout.contains("ACK"), "{stdout}");
    for entry in std::fs::read_dir(&data).unwrap() {
        let p = entry.unwrap().path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let s = Store::open_dir(&data, Options::default()).unwrap();
    assert_eq!(s.get("keep", "me").unwrap().unwrap(), "safe");
}
