//! Both backends against real databases: a SQLite file, and a throwaway PostgreSQL server
//! started from Debian's package (initdb + pg_ctl in a temporary directory).

mod common;

use std::process::Command;

use common::PgServer;

use cdr::{CdrCall, CdrFilter, CdrStore, CdrStream, PgStore, SqliteStore};

fn call(id: &str, start_us: i64, code: u16, mos: Option<f64>) -> CdrCall {
    CdrCall {
        call_id: id.into(),
        caller: "1001".into(),
        called: format!("20{code}"),
        caller_addr: "10.0.0.1:5060".into(),
        callee_addr: "10.0.0.2:5060".into(),
        start_us,
        ringing_us: Some(start_us + 10),
        answer_us: None,
        end_us: Some(start_us + 100),
        state: "failed".into(),
        last_response: Some(code),
        last_reason: "x".into(),
        hangup_by: Some("callee".into()),
        q850_cause: Some(17),
        sip_messages: 5,
        reinvites: 0,
        mos_min: mos,
    }
}

fn stream(call_id: Option<&str>) -> CdrStream {
    CdrStream {
        call_id: call_id.map(str::to_string),
        src: "10.0.0.1:4000".into(),
        dst: "10.0.0.2:4000".into(),
        ssrc: 0xDEADBEEF,
        payload: "g711A".into(),
        start_us: 2_000,
        end_us: 3_000,
        packets: 50,
        lost: -1,
        duplicates: 1,
        out_of_order: 0,
        min_delta_ms: 19.0,
        mean_delta_ms: 20.0,
        max_delta_ms: 21.0,
        mean_jitter_ms: 0.5,
        max_jitter_ms: 1.0,
        mos: Some(3.1),
        rtcp_reports: 2,
        rtcp_fraction_lost_pct: Some(1.5),
        rtcp_jitter_ms: None,
    }
}

/// The same checks for every backend.
fn exercise(st: &mut dyn CdrStore) {
    let calls = vec![
        call("a", 1_000, 486, None),
        call("b", 2_000, 200, Some(3.1)),
        call("c", 3_000, 200, Some(4.4)),
    ];
    st.insert(&calls, &[stream(Some("b")), stream(None)])
        .unwrap();
    let all = st.list(&CdrFilter::default()).unwrap();
    assert_eq!(
        all.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
        ["c", "b", "a"]
    );
    let f = CdrFilter {
        since_us: Some(1_500),
        mos_below: Some(4.0),
        ..Default::default()
    };
    assert_eq!(st.list(&f).unwrap(), vec![calls[1].clone()]);
    let f = CdrFilter {
        last_response: Some(486),
        number: Some("486".into()),
        ..Default::default()
    };
    assert_eq!(st.list(&f).unwrap(), vec![calls[0].clone()]);
    let f = CdrFilter {
        until_us: Some(2_500),
        limit: 1,
        ..Default::default()
    };
    assert_eq!(st.list(&f).unwrap(), vec![calls[1].clone()]);
    let (c, s) = st.show("b").unwrap().unwrap();
    assert_eq!(c, calls[1]);
    assert_eq!(s, vec![stream(Some("b"))]);
    assert!(st.show("nope").unwrap().is_none());
}

#[test]
fn sqlite_store_in_a_real_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let mut st = SqliteStore::open(&path).unwrap();
    exercise(&mut st);
    drop(st);
    // Reopening keeps everything (the schema is created only once).
    let mut st = SqliteStore::open(&path).unwrap();
    assert_eq!(st.list(&CdrFilter::default()).unwrap().len(), 3);
    let out = Command::new("sqlite3")
        .arg(&path)
        .arg("SELECT COUNT(*) FROM cdr_rtp WHERE cdr_id IS NULL")
        .output();
    if let Ok(out) = out {
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    }
}

#[test]
fn postgres_store_on_a_throwaway_server() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let conninfo = format!(
        "host=127.0.0.1 port={} user=tandem dbname=postgres",
        server.port
    );
    let mut st = PgStore::connect(&conninfo).unwrap();
    exercise(&mut st);
    drop(st);
    // Connecting again finds the schema and rows in place.
    let mut st = PgStore::connect(&conninfo).unwrap();
    assert_eq!(st.list(&CdrFilter::default()).unwrap().len(), 3);
    // A wrong port names the target without a password.
    let Err(e) =
        PgStore::connect("host=127.0.0.1 port=1 user=tandem password=secret connect_timeout=2")
    else {
        panic!("connected to port 1")
    };
    let text = e.to_string();
    assert!(
        text.contains("port=1") && !text.contains("secret"),
        "{text}"
    );
}
