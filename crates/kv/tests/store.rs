//! The store against real SQLite files: operations, reopening, namespaces, large values,
//! concurrency, backups.

use kv::{Durability, KvError, Options, Store, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn opts() -> Options {
    Options::default()
}

#[test]
fn put_get_del_exists_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open_dir(dir.path(), opts()).unwrap();
        assert_eq!(s.get("sip", "1001").unwrap(), None);
        s.put("sip", "1001", "sip:1001@192.0.2.1").unwrap();
        s.put("sip", "1002", "two words / with slashes").unwrap();
        s.put("", "emptyfamily", "e").unwrap();
        s.put("fam", "", "emptykey").unwrap();
        assert_eq!(s.get("sip", "1001").unwrap().unwrap(), "sip:1001@192.0.2.1");
        assert!(s.exists("sip", "1002"));
        assert!(s.del("sip", "1001").unwrap());
        assert!(!s.del("sip", "1001").unwrap());
        assert!(!s.exists("sip", "1001"));
        s.put("sip", "1003", "x").unwrap();
        s.put("sip", "1003", "y").unwrap();
    }
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(s.get("sip", "1001").unwrap(), None);
    assert_eq!(
        s.get("sip", "1002").unwrap().unwrap(),
        "two words / with slashes"
    );
    assert_eq!(s.get("sip", "1003").unwrap().unwrap(), "y");
    assert_eq!(s.get_path("//emptyfamily").unwrap().unwrap(), "e");
    assert_eq!(s.get_path("/fam/").unwrap().unwrap(), "emptykey");
}

#[test]
fn compare_and_set() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    assert!(s.compare_and_set("f", "k", None, Some("1".into())).unwrap());
    assert!(!s.compare_and_set("f", "k", None, Some("2".into())).unwrap());
    assert!(
        !s.compare_and_set("f", "k", Some(b"0"), Some("2".into()))
            .unwrap()
    );
    assert!(
        s.compare_and_set("f", "k", Some(b"1"), Some("2".into()))
            .unwrap()
    );
    assert_eq!(s.get("f", "k").unwrap().unwrap(), "2");
    assert!(s.compare_and_set("f", "k", Some(b"2"), None).unwrap());
    assert!(!s.exists("f", "k"));
    // On a large value, which lives on disk.
    let big = "z".repeat(10_000);
    s.put("f", "big", big.as_str()).unwrap();
    assert!(
        s.compare_and_set("f", "big", Some(big.as_bytes()), Some("small".into()))
            .unwrap()
    );
    assert_eq!(s.get("f", "big").unwrap().unwrap(), "small");
}

#[test]
fn cas_counter_under_contention() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    s.put("c", "n", "0").unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    loop {
                        let cur = s.get("c", "n").unwrap().unwrap();
                        let n: u64 = cur.as_str().unwrap().parse().unwrap();
                        let next = Value::from((n + 1).to_string());
                        if s.compare_and_set_with(
                            "c",
                            "n",
                            Some(cur.as_bytes()),
                            Some(next),
                            Durability::Async,
                        )
                        .unwrap()
                        .is_some()
                        {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.get("c", "n").unwrap().unwrap(), "400");
}

#[test]
fn namespaces_are_separate_tables() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open_dir(dir.path(), opts()).unwrap();
        let a = s.namespace("billing").unwrap();
        a.put("rates", "uk", "0.01").unwrap();
        s.put("rates", "uk", "astdb").unwrap();
        assert_eq!(a.get("rates", "uk").unwrap().unwrap(), "0.01");
        assert!(matches!(
            s.namespace("Bad-Name"),
            Err(KvError::InvalidNamespace { .. })
        ));
    }
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(s.namespaces(), vec!["astdb", "billing"]);
    let a = s.namespace("billing").unwrap();
    assert_eq!(a.get("rates", "uk").unwrap().unwrap(), "0.01");
    assert_eq!(s.get("rates", "uk").unwrap().unwrap(), "astdb");
    let out = std::process::Command::new("sqlite3")
        .arg(dir.path().join(kv::FILE_NAME))
        .arg("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        .output()
        .expect("sqlite3 CLI (Debian package sqlite3)");
    let tables = String::from_utf8(out.stdout).unwrap();
    assert!(tables.contains("kv_billing\n"), "{tables}");
    assert!(tables.contains("kv_astdb\n"), "{tables}");
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        value_bytes_max: 100,
        key_bytes_max: 50,
        ..opts()
    };
    let s = Store::open_dir(dir.path(), o).unwrap();
    let e = s.put("f", "k", "x".repeat(101)).unwrap_err();
    assert!(e.to_string().contains("value_bytes_max"), "{e}");
    let e = s.put("f", &"k".repeat(60), "x").unwrap_err();
    assert!(e.to_string().contains("key_bytes_max"), "{e}");
    let e = s.put("f", "a\0b", "x").unwrap_err();
    assert!(e.to_string().contains("NUL"), "{e}");
}

#[test]
fn second_writer_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _s = Store::open_dir(dir.path(), opts()).unwrap();
    let e = Store::open_dir(dir.path(), opts()).unwrap_err();
    assert!(matches!(e, KvError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("in use"), "{e}");
    // Read-only access works while the writer holds the store.
    _s.put("a", "b", "c").unwrap();
    let ro = kv::ReadOnlyStore::open(dir.path().join(kv::FILE_NAME)).unwrap();
    assert_eq!(ro.get("a", "b").unwrap().unwrap(), "c");
}

#[test]
fn async_writes_are_visible_at_once_and_durable_after_close() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Store::open_dir(
            dir.path(),
            Options {
                durability: Durability::Async,
                ..opts()
            },
        )
        .unwrap();
        for i in 0..1000 {
            s.put("a", &i.to_string(), "v").unwrap();
            assert!(s.exists("a", &i.to_string()));
        }
        s.flush().unwrap();
        for i in 1000..2000 {
            s.put("a", &i.to_string(), "v").unwrap();
        }
    }
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(s.tree(Some("a"), None).unwrap().len(), 2000);
}

#[test]
fn large_values_stay_on_disk_until_read_and_the_cache_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let big = |i: usize| format!("{i:05}-{}", "L".repeat(8000));
    {
        let s = Store::open_dir(dir.path(), opts()).unwrap();
        for i in 0..50 {
            s.put("big", &i.to_string(), big(i)).unwrap();
        }
        s.put("small", "a", "tiny").unwrap();
    }
    let o = Options {
        cache_bytes_max: 40_000,
        ..opts()
    };
    let s = Store::open_dir(dir.path(), o).unwrap();
    let st = s.stats();
    assert_eq!(st.keys, 51);
    // The sampling figures count the same keys without reading a value.
    let quick = s.quick_stats();
    assert_eq!((quick.keys, quick.commits), (st.keys, st.commits));
    assert_eq!(quick.large_value_bytes, 0, "sizes are left to stats()");
    assert_eq!(st.large_values, 50);
    assert_eq!(st.large_value_bytes, 50 * 8006);
    assert_eq!(
        st.resident_value_bytes, 4,
        "only the small value is in memory: {st:?}"
    );
    assert_eq!(st.cache_bytes, 0);
    for i in 0..50 {
        assert_eq!(
            s.get("big", &i.to_string()).unwrap().unwrap(),
            big(i).as_str()
        );
        assert!(s.stats().cache_bytes <= 40_000);
    }
    assert!(s.stats().cache_bytes > 0);
    // Overwrite a large value with a small one and back, then reopen.
    s.put("big", "3", "now small").unwrap();
    s.put("small", "a", big(99)).unwrap();
    let tree = s.tree(Some("big"), None).unwrap();
    assert_eq!(tree.len(), 50);
    drop(s);
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    assert_eq!(s.get("big", "3").unwrap().unwrap(), "now small");
    assert_eq!(s.get("small", "a").unwrap().unwrap(), big(99).as_str());
    assert_eq!(s.stats().large_values, 50);
}

#[test]
fn concurrent_writers_and_deltrees_match_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..6 {
        let s = s.clone();
        handles.push(std::thread::spawn(move || {
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ t;
            for i in 0..600u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let fam = format!("f{}", x % 4);
                let key = format!("k{}/{}", x % 7, x % 13);
                let d = if i % 2 == 0 {
                    Durability::Sync
                } else {
                    Durability::Async
                };
                match x % 23 {
                    0 => {
                        s.deltree_with(Some(&fam), Some(&format!("k{}", x % 7)), d)
                            .unwrap()
                            .1
                            .wait()
                            .unwrap();
                    }
                    1 => {
                        s.del_with(&fam, &key, d).unwrap().1.wait().unwrap();
                    }
                    2 => {
                        let v = "B".repeat(5000 + (x % 100) as usize);
                        s.put_with(&fam, &key, v, d).unwrap().wait().unwrap();
                    }
                    _ => {
                        s.put_with(&fam, &key, format!("v{i}"), d)
                            .unwrap()
                            .wait()
                            .unwrap();
                    }
                }
            }
        }));
    }
    {
        let s = s.clone();
        let stop = stop.clone();
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = s.tree(Some("f1"), None).unwrap();
                let _ = s.get("f2", "k1/1").unwrap();
            }
        }));
    }
    let n = handles.len();
    for h in handles.drain(..n - 1) {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    handles.pop().unwrap().join().unwrap();
    let before = s.tree(None, None).unwrap();
    drop(s);
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    let after = s.tree(None, None).unwrap();
    assert_eq!(before, after);
    assert!(!after.is_empty());
}

#[test]
fn backup_while_writes_continue() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_dir(dir.path(), opts()).unwrap();
    for i in 0..2000 {
        s.put_with("pre", &i.to_string(), "v", Durability::Async)
            .unwrap()
            .wait()
            .unwrap();
    }
    s.flush().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (first, first_done) = std::sync::mpsc::channel();
    let writer = {
        let s = s.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                s.put("during", &i.to_string(), "w").unwrap();
                if i == 0 {
                    let _ = first.send(());
                }
                i += 1;
            }
            i
        })
    };
    // The backup starts once writes are going on (on a loaded machine the writer thread may
    // not have run at all before a quick backup ends).
    first_done.recv().unwrap();
    let dest = dir.path().join("backup.sqlite3");
    s.backup(&dest).unwrap();
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 0);
    let e = s.backup(&dest).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    let out = std::process::Command::new("sqlite3")
        .arg(&dest)
        .arg("PRAGMA integrity_check; SELECT count(*) FROM kv_astdb WHERE key LIKE '/pre/%';")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "ok\n2000\n");
    drop(s);
    // The backup opens as a store.
    let b = Store::open(&dest, opts()).unwrap();
    assert_eq!(b.tree(Some("pre"), None).unwrap().len(), 2000);
}
