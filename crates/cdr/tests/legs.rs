//! The legs of one call in the CDR database, on SQLite and both PostgreSQL layouts: each leg's
//! `call_group`, `linked_by` and `link_confidence` stored and read back, the legs of a call
//! read together, `call_group=` and `legs=calls` in the search, and databases from before the
//! columns upgraded (SQLite format 1, PostgreSQL before migration 6).

mod common;

use cdr::search::CallQuery;
use cdr::{CdrCall, CdrRecord, CdrStore, FirstLeg, PgStore, SqliteStore};
use common::PgServer;

const SENSOR: &str = "s1";
const T0: i64 = 1_700_000_000_000_000;

fn leg(call_id: &str, start_us: i64, first: Option<(&str, i64)>) -> CdrRecord {
    let c = CdrCall {
        call_id: call_id.into(),
        caller: "201".into(),
        called: "0301234567".into(),
        caller_addr: "10.0.0.21:5060".into(),
        callee_addr: "10.0.0.2:5060".into(),
        start_us,
        end_us: Some(start_us + 30_000_000),
        state: "ended".into(),
        last_response: Some(200),
        last_reason: "OK".into(),
        first_leg: first.map(|(id, start_us)| FirstLeg {
            call_id: id.into(),
            start_us,
        }),
        linked_by: first.map(|_| "b2bua".into()),
        link_confidence: first.map(|_| 0.77),
        ..CdrCall::default()
    };
    let mut r = CdrRecord::call(c, Vec::new());
    r.fill_identity(SENSOR);
    r
}

/// An A leg, its B leg 40 ms later, a call alone; the group's uid.
fn records() -> (Vec<CdrRecord>, String) {
    let a = leg("a@phone", T0, None);
    let b = leg("b-pbx", T0 + 40_000, Some(("a@phone", T0)));
    let c = leg("c@phone", T0 + 1_000_000, None);
    let group = a.uid.clone();
    assert_eq!(a.call.as_ref().unwrap().call_group, a.uid);
    assert_eq!(b.call.as_ref().unwrap().call_group, group);
    (vec![a, b, c], group)
}

fn search(st: &mut dyn CdrStore, q: &str) -> Vec<(String, String)> {
    let q = CallQuery::from_query(q).unwrap();
    let mut out: Vec<_> = st
        .search(&q)
        .unwrap()
        .calls
        .into_iter()
        // The upgraded database's row from before is not the exercise's.
        .filter(|s| s.call.start_us >= T0)
        .map(|s| (s.call.call_id, s.call.call_group))
        .collect();
    out.sort();
    out
}

fn exercise(st: &mut dyn CdrStore, label: &str) {
    let (recs, group) = records();
    st.insert_records(&recs).unwrap();
    // Stored again (a capture read twice): one row per leg, the links kept.
    st.insert_records(&recs).unwrap();
    let all = search(st, "");
    let c_uid = recs[2].uid.clone();
    assert_eq!(
        all,
        vec![
            ("a@phone".to_string(), group.clone()),
            ("b-pbx".to_string(), group.clone()),
            ("c@phone".to_string(), c_uid.clone()),
        ],
        "{label}"
    );
    let q = format!(
        "call_group={}",
        group.replace('|', "%7C").replace('@', "%40")
    );
    assert_eq!(search(st, &q).len(), 2, "{label}: the legs of the call");
    let calls = search(st, "legs=calls");
    assert_eq!(
        calls.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["a@phone", "c@phone"],
        "{label}: each call once"
    );
    let legs = st.call_legs(&recs[1].uid).unwrap();
    let ids: Vec<&str> = legs.iter().map(|l| l.call.call_id.as_str()).collect();
    assert_eq!(ids, ["a@phone", "b-pbx"], "{label}");
    assert_eq!(legs[0].call.linked_by, None);
    assert_eq!(legs[1].call.linked_by.as_deref(), Some("b2bua"));
    assert_eq!(legs[1].call.link_confidence, Some(0.77));
    assert_eq!(st.call_legs(&group).unwrap().len(), 2, "{label}");
    assert_eq!(st.call_legs(&c_uid).unwrap().len(), 1, "{label}");
    assert!(st.call_legs("s1|nothing|1").unwrap().is_empty());
}

#[test]
fn sqlite_stores_and_reads_the_legs_of_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = SqliteStore::open(&dir.path().join("cdr.sqlite3")).unwrap();
    exercise(&mut st, "sqlite");
}

#[test]
fn sqlite_database_of_format_1_gets_the_leg_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let old = leg("old@phone", T0 - 10_000_000, None);
    {
        let mut st = SqliteStore::open(&path).unwrap();
        st.insert_records(std::slice::from_ref(&old)).unwrap();
    }
    // Back to format 1: the leg columns and their index gone, the row kept.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP INDEX cdr_call_group; ALTER TABLE cdr DROP COLUMN call_group; \
             ALTER TABLE cdr DROP COLUMN linked_by; ALTER TABLE cdr DROP COLUMN link_confidence; \
             PRAGMA user_version = 1;",
        )
        .unwrap();
    let mut st = SqliteStore::open(&path).unwrap();
    // The row from before is its own call, and a search by its uid as a group finds nothing
    // stored under that group but the call itself still reads.
    let legs = st.call_legs(&old.uid).unwrap();
    assert_eq!(legs.len(), 1);
    assert_eq!(legs[0].call.call_group, old.uid);
    assert_eq!(legs[0].call.linked_by, None);
    let page = st
        .search(&CallQuery::from_query("legs=calls").unwrap())
        .unwrap();
    assert_eq!(page.calls.len(), 1);
    exercise(&mut st, "sqlite upgraded");
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, i64::from(cdr::SQLITE_FORMAT_VERSION));
}

#[test]
fn postgres_stores_and_reads_the_legs_of_a_call_in_both_layouts() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        let conninfo = server.layout_database("legs", layout);
        // As a database before migration 6: the columns, their index and the record gone.
        let mut client = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
        client
            .batch_execute(
                "DROP INDEX cdr_call_group; ALTER TABLE cdr DROP COLUMN call_group, \
                 DROP COLUMN linked_by, DROP COLUMN link_confidence; \
                 DELETE FROM schema_migrations WHERE version = 6",
            )
            .unwrap();
        drop(client);
        let mut st = PgStore::connect(&conninfo).unwrap();
        exercise(&mut st, &format!("{layout:?}"));
    }
}
