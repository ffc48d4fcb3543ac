//! The CDR database's and the journal's format versions on real files: a newer Tandem's file is
//! refused untouched, a database from before versions is stamped with its rows kept, a store
//! file given as the CDR database is refused.

mod common;

use std::path::Path;

use cdr::journal::{FORMAT_VERSION, Journal, MAGIC};
use cdr::{CdrError, CdrStore, JournalError, SqliteStore};
use common::call;
use rusqlite::Connection;

fn header_i32(path: &Path, offset: usize) -> i32 {
    let bytes = std::fs::read(path).unwrap();
    i32::from_be_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fn calls(path: &Path) -> usize {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM cdr", [], |r| r.get::<_, i64>(0))
        .unwrap() as usize
}

#[test]
fn a_cdr_database_from_a_newer_tandem_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(&header_i32(&path, 68).to_be_bytes(), b"TDCR");
    assert_eq!(header_i32(&path, 60), cdr::SQLITE_FORMAT_VERSION as i32);
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "PRAGMA user_version = {}; PRAGMA journal_mode = DELETE;",
            cdr::SQLITE_FORMAT_VERSION + 1
        ))
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let Err(e) = SqliteStore::open(&path) else {
        panic!("a newer format was opened")
    };
    let CdrError::Format(fileformat::FormatError::TooNew { found, known, .. }) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (*found, *known),
        (
            i64::from(cdr::SQLITE_FORMAT_VERSION) + 1,
            cdr::SQLITE_FORMAT_VERSION
        )
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "{} is a CDR database in format version {found}",
            path.display()
        )) && msg.contains("Run the newer Tandem again")
            && msg.contains("Rolling back"),
        "{msg}"
    );
    assert!(SqliteStore::open_with(&path, &filemode::Access::Private).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "not a byte changed");
    assert!(!dir.path().join("cdr.sqlite3-wal").exists());
}

#[test]
fn a_cdr_database_from_before_versions_is_stamped_with_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let mut st = SqliteStore::open(&path).unwrap();
    st.insert_records(&[call("a", 1, 1_000, 1), call("b", 2, 2_000, 0)])
        .unwrap();
    drop(st);
    // What an earlier release left: no stamp, and no search columns yet.
    let c = Connection::open(&path).unwrap();
    c.execute_batch(
        "PRAGMA application_id = 0; PRAGMA user_version = 0;
         DROP INDEX cdr_caller_rev_start; ALTER TABLE cdr DROP COLUMN caller_rev;",
    )
    .unwrap();
    drop(c);
    let st = SqliteStore::open(&path).unwrap();
    drop(st);
    assert_eq!(header_i32(&path, 60), cdr::SQLITE_FORMAT_VERSION as i32);
    assert_eq!(&header_i32(&path, 68).to_be_bytes(), b"TDCR");
    assert_eq!(calls(&path), 2);
    let filled: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM cdr WHERE caller_rev IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(filled, 2, "the search column was added and filled");
}

/// Format version 1's registrations (no failure columns) upgraded to 4: the columns are added,
/// the rows stored before read their failure off their result, and new rows keep theirs.
#[test]
fn registrations_of_format_version_1_gain_their_failure_columns() {
    use cdr::registration::RegistrationQuery;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let mut st = SqliteStore::open(&path).unwrap();
    let mut old = common::registration(1, 1_000_000);
    let reg = old.registration.as_mut().unwrap();
    (reg.result, reg.last_code) = ("failed".into(), Some(403));
    st.insert_records(&[old]).unwrap();
    drop(st);
    let c = Connection::open(&path).unwrap();
    let mut drop_columns = String::from("PRAGMA user_version = 1;");
    for (name, _, _) in cdr::registration::REG_LATER_COLUMNS {
        drop_columns += &format!("ALTER TABLE registration DROP COLUMN {name};");
    }
    c.execute_batch(&drop_columns).unwrap();
    drop(c);
    let mut st = SqliteStore::open(&path).unwrap();
    let mut new = common::registration(2, 2_000_000);
    let reg = new.registration.as_mut().unwrap();
    (reg.result, reg.last_code, reg.challenges) = ("challenged".into(), Some(401), 3);
    reg.failure = "wrong-password".into();
    reg.failure_reason = "401 Unauthorized: credentials refused 2 times".into();
    reg.registered_us = Some(1_500_000);
    st.insert_records(&[new]).unwrap();
    let page = st.registrations(&RegistrationQuery::default()).unwrap();
    let got: Vec<_> = page
        .registrations
        .iter()
        .map(|r| {
            let r = &r.registration;
            (
                r.challenges,
                r.failure.as_str(),
                r.failure_reason.as_str(),
                r.registered_us,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                3,
                "wrong-password",
                "401 Unauthorized: credentials refused 2 times",
                Some(1_500_000)
            ),
            (0, "rejected", "", None),
        ]
    );
    drop(st);
    assert_eq!(header_i32(&path, 60), cdr::SQLITE_FORMAT_VERSION as i32);
}

#[test]
fn a_cdr_database_of_version_1_gets_the_call_fields_and_keeps_its_rows() {
    use cdr::search::CallQuery;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let mut st = SqliteStore::open(&path).unwrap();
    st.insert_records(&[call("a", 1, 1_000, 1)]).unwrap();
    drop(st);
    // What version 1 left: none of the fields' columns or indexes.
    let c = Connection::open(&path).unwrap();
    let mut sql = String::from("PRAGMA user_version = 1;");
    for (name, _) in cdr::fields::SQLITE_FIELD_INDEXES {
        sql += &format!("DROP INDEX {name};");
    }
    for (name, _, _) in cdr::fields::FIELD_COLUMNS {
        sql += &format!("ALTER TABLE cdr DROP COLUMN {name};");
    }
    c.execute_batch(&sql).unwrap();
    drop(c);
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(header_i32(&path, 60), cdr::SQLITE_FORMAT_VERSION as i32);
    let mut st = SqliteStore::open(&path).unwrap();
    let mut b = call("b", 2, 2_000, 0);
    let c = b.call.as_mut().unwrap();
    c.from_domain = "pbx.example.com".into();
    c.headers.insert("x-account".into(), "77".into());
    st.insert_records(&[b]).unwrap();
    let found = |st: &mut SqliteStore, q: &str| -> Vec<String> {
        let page = st.search(&CallQuery::from_query(q).unwrap()).unwrap();
        page.calls.into_iter().map(|c| c.call.call_id).collect()
    };
    assert_eq!(found(&mut st, "").len(), 2, "the old row is still there");
    assert_eq!(
        found(&mut st, "from_domain=pbx.example.com"),
        ["call-2@partitions.test"]
    );
    assert_eq!(
        found(&mut st, "header=x-account:77"),
        ["call-2@partitions.test"]
    );
    // The old row reads with none of the fields.
    let page = st.search(&CallQuery::from_query("").unwrap()).unwrap();
    let old = &page.calls[1].call;
    assert_eq!(old.call_id, "call-1@partitions.test");
    assert!(old.from_domain.is_empty() && old.caller_ua.is_empty() && old.headers.is_empty());
}

#[test]
fn a_store_file_given_as_the_cdr_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    let c = Connection::open(&path).unwrap();
    fileformat::upgrade(&c, &path, &fileformat::KV_STORE, kv_like()).unwrap();
    drop(c);
    let Err(e) = SqliteStore::open(&path) else {
        panic!("a store was opened as a CDR database")
    };
    assert!(
        e.to_string()
            .contains("is not a CDR database: it is a key-value store"),
        "{e}"
    );
}

fn kv_like() -> &'static [fileformat::Migration] {
    &[fileformat::Migration {
        version: 1,
        name: "namespaces",
        apply: |c| c.execute_batch("CREATE TABLE kv_namespaces (name TEXT PRIMARY KEY)"),
    }]
}

#[test]
fn a_journal_from_a_newer_tandem_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.journal");
    let (mut j, _) = Journal::open(&path, 1 << 20).unwrap();
    j.append(&[call("a", 1, 1_000, 0)]).unwrap();
    drop(j);
    assert_eq!(&std::fs::read(&path).unwrap()[..8], MAGIC);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[7] = b'2';
    std::fs::write(&path, &bytes).unwrap();
    for e in [
        Journal::open(&path, 1 << 20).err().unwrap(),
        Journal::inspect(&path).err().unwrap(),
    ] {
        let JournalError::Format(fileformat::FormatError::TooNew {
            found: 2, known, ..
        }) = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(*known, FORMAT_VERSION);
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "{} is a CDR journal in format version 2",
                path.display()
            )) && msg.contains("up to 1"),
            "{msg}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "not a byte changed");
    // This release's journal (version 1) reads as before.
    bytes[7] = b'1';
    std::fs::write(&path, &bytes).unwrap();
    let (_, opened) = Journal::open(&path, 1 << 20).unwrap();
    assert_eq!(opened.records, 1);
}
