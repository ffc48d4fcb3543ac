//! Compatibility with Asterisk's astdb, checked against the sqlite3 CLI running Asterisk's own
//! SQL (main/db.c) on the same data.

use kv::{Options, ReadOnlyStore, Store};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn sqlite3(db: &str, script: &str) -> String {
    let mut child = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sqlite3 CLI (Debian package sqlite3) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Keys and values every case starts from.
const BASE: &[(&str, &str)] = &[
    ("/a", "family itself"),
    ("/a/b", "1"),
    ("/a/bc", "2"),
    ("/a/b/c", "3"),
    ("/a/b/c/d", "4"),
    ("/a/b c/d", "space in key"),
    ("/ab/x", "5"),
    ("/a b/c d", "value / with / slashes"),
    ("/a b/c", "6"),
    ("/b/x", "7"),
    ("//e", "empty family"),
    ("/sip/1001", "sip:1001@192.0.2.1:5060;transport=udp"),
    ("/sip/1001/x", "below"),
    ("/sip/10011", "sibling"),
];

/// (family, keytree) of each tree operation.
const CASES: &[(Option<&str>, Option<&str>)] = &[
    (Some("a"), Some("b")),
    (Some("a"), None),
    (Some("a"), Some("bc")),
    (Some("a"), Some("b c")),
    (Some("a"), Some("b/c")),
    (Some("a b"), None),
    (Some("a b"), Some("c d")),
    (Some("ab"), None),
    (Some("a/b"), None),
    (Some("sip"), Some("1001")),
    (Some("nope"), None),
    (Some(""), None),
    (Some(""), Some("b")),
    (None, None),
];

/// What Asterisk does: (gettree rows, deltree count, rows left), by running db.c's statements.
fn astdb_reference(family: Option<&str>, keytree: Option<&str>) -> (String, String, String) {
    let mut script = String::from(".mode list\n.separator |\n");
    script.push_str(kv::ASTDB_CREATE_SQL);
    script.push_str(";\n");
    for (k, v) in BASE {
        script.push_str(&format!(
            "INSERT OR REPLACE INTO astdb (key, value) VALUES ({}, {});\n",
            quote(k),
            quote(v)
        ));
    }
    // db.c builds the prefix as "/family/keytree" or "/family"; an empty family means all.
    let prefix = kv::tree_prefix(family, keytree);
    script.push_str(".print ==tree\n");
    match &prefix {
        None => script.push_str("SELECT key, value FROM astdb ORDER BY key;\n"),
        Some(p) => script.push_str(&format!(
            "SELECT key, value FROM astdb WHERE key || '/' LIKE {} || '/' || '%' ORDER BY key;\n",
            quote(p)
        )),
    }
    script.push_str(".print ==del\n");
    match &prefix {
        None => script.push_str("DELETE FROM astdb;\n"),
        Some(p) => script.push_str(&format!(
            "DELETE FROM astdb WHERE key || '/' LIKE {} || '/' || '%';\n",
            quote(p)
        )),
    }
    script
        .push_str("SELECT changes();\n.print ==rest\nSELECT key, value FROM astdb ORDER BY key;\n");
    let out = sqlite3(":memory:", &script);
    let (_, rest) = out.split_once("==tree\n").unwrap();
    let (tree, rest) = rest.split_once("==del\n").unwrap();
    let (del, rest) = rest.split_once("==rest\n").unwrap();
    (tree.to_string(), del.trim().to_string(), rest.to_string())
}

fn lines(entries: &[(String, kv::Value)]) -> String {
    entries.iter().map(|(k, v)| format!("{k}|{v}\n")).collect()
}

#[test]
fn tree_semantics_match_astdb() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_dir(dir.path(), Options::default()).unwrap();
    for &(family, keytree) in CASES {
        s.deltree(None, None).unwrap();
        for (k, v) in BASE {
            s.put_path_with(k.to_string(), (*v).into(), kv::Durability::Sync)
                .unwrap()
                .wait()
                .unwrap();
        }
        let (want_tree, want_del, want_rest) = astdb_reference(family, keytree);
        let got_tree = lines(&s.tree(family, keytree).unwrap());
        assert_eq!(got_tree, want_tree, "tree of {family:?} {keytree:?}");
        let got_del = s.deltree(family, keytree).unwrap();
        assert_eq!(
            got_del.to_string(),
            want_del,
            "deltree of {family:?} {keytree:?}"
        );
        let got_rest = lines(&s.tree(None, None).unwrap());
        assert_eq!(
            got_rest, want_rest,
            "left after deltree {family:?} {keytree:?}"
        );
    }
}

fn make_astdb(path: &Path, rows: &[(&str, Option<&str>)]) {
    let mut script = format!("{};\nBEGIN;\n", kv::ASTDB_CREATE_SQL);
    for (k, v) in rows {
        let v = v.map_or("NULL".to_string(), quote);
        script.push_str(&format!(
            "INSERT INTO astdb (key, value) VALUES ({}, {v});\n",
            quote(k)
        ));
    }
    script.push_str("COMMIT;\n");
    sqlite3(path.to_str().unwrap(), &script);
}

#[test]
fn import_an_astdb_made_by_sqlite3() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("astdb.sqlite3");
    let large = "x".repeat(6000);
    make_astdb(
        &src,
        &[
            (
                "/SIP/Registry/1001",
                Some("192.0.2.10:5060:3600:1001:sip:1001@192.0.2.10"),
            ),
            ("/CW/1001", Some("ENABLED")),
            ("/AMPUSER/1001/cidname", Some("Alice Smith")),
            (
                "/AMPUSER/1001/outboundcid",
                Some("\"Alice\" <+441234567890>"),
            ),
            ("/dundi/secret", Some("a/b+c==")),
            ("/big/blob", Some(&large)),
            ("/bad/null", None),
        ],
    );
    // Asterisk's own file has this exact schema.
    assert_eq!(
        sqlite3(src.to_str().unwrap(), ".schema astdb"),
        "CREATE TABLE astdb(key VARCHAR(256), value VARCHAR(256), PRIMARY KEY(key));\n"
    );
    let data = dir.path().join("data");
    {
        let s = Store::open_dir(&data, Options::default()).unwrap();
        assert_eq!(s.import_astdb(&src).unwrap(), 6);
        assert_eq!(
            s.get("AMPUSER", "1001/cidname").unwrap().unwrap(),
            "Alice Smith"
        );
        assert_eq!(s.get("dundi", "secret").unwrap().unwrap(), "a/b+c==");
        assert!(!s.exists("bad", "null"));
    }
    let s = Store::open_dir(&data, Options::default()).unwrap();
    assert_eq!(s.tree(Some("AMPUSER"), Some("1001")).unwrap().len(), 2);
    assert_eq!(s.stats().large_values, 1);
    assert_eq!(s.get("big", "blob").unwrap().unwrap(), large.as_str());
    assert_eq!(
        s.get("SIP", "Registry/1001").unwrap().unwrap(),
        "192.0.2.10:5060:3600:1001:sip:1001@192.0.2.10"
    );

    // Bad input: clear errors naming the file.
    let e = s
        .import_astdb(dir.path().join("missing.sqlite3"))
        .unwrap_err();
    assert!(e.to_string().contains("missing.sqlite3"), "{e}");
    let junk = dir.path().join("junk.sqlite3");
    std::fs::write(&junk, b"this is not a database at all, just text").unwrap();
    let e = s.import_astdb(&junk).unwrap_err();
    assert!(e.to_string().contains("junk.sqlite3"), "{e}");
    let other = dir.path().join("other.sqlite3");
    sqlite3(other.to_str().unwrap(), "CREATE TABLE t(x);");
    let e = s.import_astdb(&other).unwrap_err();
    assert!(e.to_string().contains("no table `astdb`"), "{e}");
}

#[test]
fn export_is_what_asterisk_writes() {
    let dir = tempfile::tempdir().unwrap();
    let large = "y".repeat(7000);
    let rows: Vec<(&str, &str)> = vec![
        ("/AMPUSER/1001/cidname", "Alice Smith"),
        ("/CW/1001", "ENABLED"),
        ("/a b/c d", "value / with / slashes"),
        ("/big/blob", &large),
        ("/sip/1001", "sip:1001@192.0.2.1:5060"),
        ("/unicode/k", "caf\u{e9} \u{2713}"),
    ];
    let s = Store::open_dir(dir.path().join("data"), Options::default()).unwrap();
    // Insert out of order; the export is in key order, like Asterisk's gettree.
    for (k, v) in rows.iter().rev() {
        let (fam, key) = k[1..].split_once('/').unwrap();
        s.put(fam, key, *v).unwrap();
    }
    s.namespace("other")
        .unwrap()
        .put("not", "exported", "x")
        .unwrap();
    let out = dir.path().join("export.sqlite3");
    assert_eq!(s.export_astdb(&out).unwrap(), rows.len());
    let out_s = out.to_str().unwrap();
    assert_eq!(
        sqlite3(out_s, ".schema"),
        "CREATE TABLE astdb(key VARCHAR(256), value VARCHAR(256), PRIMARY KEY(key));\n"
    );
    assert_eq!(sqlite3(out_s, "PRAGMA journal_mode;"), "delete\n");
    assert_eq!(sqlite3(out_s, "PRAGMA integrity_check;"), "ok\n");
    let want: String = rows.iter().map(|(k, v)| format!("{k}|{v}\n")).collect();
    assert_eq!(
        sqlite3(
            out_s,
            ".mode list\n.separator |\nSELECT key, value FROM astdb ORDER BY rowid;"
        ),
        want
    );
    assert_eq!(
        sqlite3(
            out_s,
            "SELECT DISTINCT typeof(key), typeof(value) FROM astdb;"
        ),
        "text|text\n"
    );

    // The same rows written by the sqlite3 CLI with Asterisk's statements give the same file,
    // byte for byte, except the two header fields that record which SQLite library wrote it
    // (offsets 92..100: version-valid-for and the library version number).
    let reference = dir.path().join("reference.sqlite3");
    let owned: Vec<(&str, Option<&str>)> = rows.iter().map(|(k, v)| (*k, Some(*v))).collect();
    make_astdb(&reference, &owned);
    let a = std::fs::read(&out).unwrap();
    let b = std::fs::read(&reference).unwrap();
    assert_eq!(a.len(), b.len(), "file sizes differ");
    let diffs: Vec<usize> = (0..a.len())
        .filter(|&i| a[i] != b[i] && !(92..100).contains(&i))
        .collect();
    assert!(
        diffs.is_empty(),
        "bytes differ at {:?}",
        &diffs[..diffs.len().min(20)]
    );

    // Exporting over an existing file is refused; the read-only path exports the same.
    let e = s.export_astdb(&out).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    let ro = ReadOnlyStore::open(dir.path().join("data").join(kv::FILE_NAME)).unwrap();
    let out2 = dir.path().join("export2.sqlite3");
    assert_eq!(ro.export_astdb(&out2).unwrap(), rows.len());
    assert_eq!(std::fs::read(&out2).unwrap()[100..], a[100..]);
}
