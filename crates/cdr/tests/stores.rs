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
        // What the store writes for a call stored without a sensor, and reads back.
        sensor: "local".into(),
        ..CdrCall::default()
    }
}

/// A call whose packets were archived, with where they are (an SRTP call that offered T.38).
fn archived_call(id: &str) -> CdrCall {
    CdrCall {
        encrypted: true,
        t38_offered: true,
        sip_tar: Some("/var/lib/tandem/archive/2026-11-21/08/09/sip.tar".into()),
        sip_member: Some(format!("{id}.pcap.zst")),
        sip_offset: Some(512),
        sip_len: Some(1234),
        sip_compression: Some("zstd".into()),
        rtp_tar: Some("/var/lib/tandem/archive/2026-11-21/08/09/rtp.tar".into()),
        rtp_member: Some(format!("{id}.pcap")),
        rtp_offset: Some(5_000_000_000),
        rtp_len: Some(99_000),
        rtp_compression: Some("none".into()),
        ..call(id, 4_000, 200, Some(4.1))
    }
}

/// The `cdr` table as it was before the archive columns, with one row; `ID` is the key's type.
const OLD_CDR_TABLE: &str = "
CREATE TABLE cdr (
    id ID PRIMARY KEY, call_id TEXT NOT NULL, caller TEXT NOT NULL, called TEXT NOT NULL,
    caller_addr TEXT NOT NULL, callee_addr TEXT NOT NULL, start_us BIGINT NOT NULL,
    ringing_us BIGINT, answer_us BIGINT, end_us BIGINT, state TEXT NOT NULL, last_response INTEGER,
    last_reason TEXT NOT NULL, hangup_by TEXT, q850_cause INTEGER, sip_messages BIGINT NOT NULL,
    reinvites BIGINT NOT NULL, mos_min DOUBLE PRECISION
);
INSERT INTO cdr (call_id, caller, called, caller_addr, callee_addr, start_us, state, last_reason,
    sip_messages, reinvites) VALUES ('old', '1001', '1002', 'a', 'b', 1, 'ended', 'OK', 7, 0);
CREATE TABLE cdr_t38 (
    id ID PRIMARY KEY, cdr_id BIGINT, src TEXT NOT NULL, dst TEXT NOT NULL,
    start_us BIGINT NOT NULL, end_us BIGINT NOT NULL, packets BIGINT NOT NULL,
    bytes BIGINT NOT NULL, lost BIGINT NOT NULL, duplicates BIGINT NOT NULL,
    out_of_order BIGINT NOT NULL, types TEXT NOT NULL, uid TEXT
);
INSERT INTO cdr_t38 (cdr_id, src, dst, start_us, end_us, packets, bytes, lost, duplicates,
    out_of_order, types) VALUES (1, 'a', 'b', 1, 2, 3, 4, 0, 0, 0, 'cng');
CREATE TABLE cdr_rtp (
    id ID PRIMARY KEY, cdr_id BIGINT, call_id TEXT, src TEXT NOT NULL, dst TEXT NOT NULL,
    ssrc BIGINT NOT NULL, payload TEXT NOT NULL, start_us BIGINT NOT NULL,
    end_us BIGINT NOT NULL, packets BIGINT NOT NULL, lost BIGINT NOT NULL,
    duplicates BIGINT NOT NULL, out_of_order BIGINT NOT NULL,
    min_delta_ms DOUBLE PRECISION NOT NULL, mean_delta_ms DOUBLE PRECISION NOT NULL,
    max_delta_ms DOUBLE PRECISION NOT NULL, mean_jitter_ms DOUBLE PRECISION NOT NULL,
    max_jitter_ms DOUBLE PRECISION NOT NULL, mos DOUBLE PRECISION, rtcp_reports BIGINT NOT NULL,
    rtcp_fraction_lost_pct DOUBLE PRECISION, rtcp_jitter_ms DOUBLE PRECISION
);
INSERT INTO cdr_rtp (src, dst, ssrc, payload, start_us, end_us, packets, lost, duplicates,
    out_of_order, min_delta_ms, mean_delta_ms, max_delta_ms, mean_jitter_ms, max_jitter_ms,
    rtcp_reports) VALUES ('10.0.0.9:4000', '10.0.0.8:4000', 9, 'g711U', 5, 6, 7, 0, 0, 0,
    20, 20, 20, 0, 0, 0);
";

/// A database from before the later columns: opening adds them, old rows read as not
/// archived, without digits or fax, and new rows keep what they hold (calls, and streams
/// without a call).
fn check_upgraded(st: &mut dyn CdrStore) {
    let (old, _) = st.show("old").unwrap().unwrap();
    assert_eq!(
        (old.sip_messages, old.sip_tar, old.rtp_offset),
        (7, None, None)
    );
    assert_eq!((old.dtmf.as_str(), old.fax_pages), ("", None));
    assert_eq!((old.encrypted, old.t38_offered), (false, false));
    let t38 = st.t38("old").unwrap();
    assert_eq!(
        (
            t38.len(),
            t38[0].types.as_str(),
            t38[0].redundant,
            t38[0].t30.as_str()
        ),
        (1, "cng", 0, "")
    );
    let new = archived_call("new");
    st.insert(std::slice::from_ref(&new), &[]).unwrap();
    assert_eq!(st.show("new").unwrap().unwrap().0, new);
    // An old stream without a call reads as not archived; a new one keeps where it is.
    let old = st.lone_streams(&Default::default()).unwrap().streams;
    assert_eq!((old.len(), old[0].stream.ssrc), (1, 9));
    assert!(!old[0].stream.archived());
    let mut lone = cdr::CdrRecord::lone_stream(CdrStream {
        rtp_tar: Some("/var/lib/tandem/archive/2026-11-21/08/09/rtp.tar".into()),
        rtp_member: Some("rtp_10.0.0.1:4000_10.0.0.2:4000_deadbeef.pcap".into()),
        rtp_offset: Some(1536),
        rtp_len: Some(8_000),
        rtp_compression: Some("none".into()),
        ..stream(None)
    });
    lone.uid = lone.identity("local");
    st.insert_records(std::slice::from_ref(&lone)).unwrap();
    let found = st.lone_stream_by_uid(&format!("{}/0", lone.uid)).unwrap();
    assert_eq!(found.unwrap().stream, lone.streams[0]);
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
        ..CdrStream::default()
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
    // The archive location round-trips, in `show` and in `list`.
    let d = archived_call("d");
    st.insert(std::slice::from_ref(&d), &[]).unwrap();
    assert_eq!(st.show("d").unwrap().unwrap().0, d);
    let f = CdrFilter {
        since_us: Some(4_000),
        ..Default::default()
    };
    assert_eq!(st.list(&f).unwrap(), vec![d.clone()]);
    // The console reads a call by its uid: its flags too.
    let mut rec = cdr::CdrRecord::call(
        CdrCall {
            call_id: "e".into(),
            ..d
        },
        Vec::new(),
    );
    rec.fill_identity("local");
    assert_eq!(rec.uid, "local|e|4000");
    st.insert_records(std::slice::from_ref(&rec)).unwrap();
    let (summary, _, _) = st.call_by_uid(&rec.uid).unwrap().unwrap();
    assert_eq!(summary.call, rec.call.unwrap());
    // Text that COPY's text form would have to escape (tab, newline, backslash, `\.`), quotes
    // and non-ASCII go in and come back as they were, and so does the smallest float.
    let mut odd = call("odd\t\\N\n", 5_000, 200, Some(f64::MIN_POSITIVE));
    odd.caller = "\"Zoë\" <sip:1001@example.com>\r\n".into();
    odd.last_reason = "\\.".into();
    st.insert(std::slice::from_ref(&odd), &[]).unwrap();
    assert_eq!(st.show("odd\t\\N\n").unwrap().unwrap().0, odd);
}

/// A NUL character is valid UTF-8, and a SIP header off the wire can carry one (`Call-ID:
/// a\0b`); PostgreSQL's text refuses it. Such a call is stored (its NUL as U+FFFD), and so is
/// the rest of its batch; sent again, the batch stores nothing twice: it never blocks the
/// journal behind it.
fn a_nul_in_a_header_is_stored(st: &mut dyn CdrStore, nul_kept: bool) {
    let mut nul = call("nul\0@x", 6_000, 200, None);
    nul.caller = "10\u{0}01".into();
    let ok = call("beside-nul", 6_001, 200, None);
    let batch: Vec<cdr::CdrRecord> = [nul, ok.clone()]
        .into_iter()
        .map(|c| {
            let streams = vec![stream(Some(c.call_id.as_str()))];
            let mut r = cdr::CdrRecord::call(c, streams);
            r.uid = r.identity("edge");
            r
        })
        .collect();
    st.insert_records(&batch).unwrap();
    st.insert_records(&batch).unwrap();
    let (c, _) = st.show("beside-nul").unwrap().unwrap();
    assert_eq!((c.caller, c.start_us), (ok.caller, ok.start_us));
    let stored_id = if nul_kept { "nul\0@x" } else { "nul\u{FFFD}@x" };
    // Its stream is still linked to it after the batch came again (an upsert).
    let (c, streams) = st.show(stored_id).unwrap().unwrap();
    assert_eq!(
        c.caller,
        if nul_kept {
            "10\u{0}01"
        } else {
            "10\u{FFFD}01"
        }
    );
    assert_eq!(streams.len(), 1, "{streams:?}");
    let f = CdrFilter {
        since_us: Some(6_000),
        until_us: Some(6_002),
        ..Default::default()
    };
    assert_eq!(st.list(&f).unwrap().len(), 2, "each call once");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let noise: String = (0..5_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x % 90) as u8)
        })
        .collect();
    // A Call-ID of 5,000 bytes (a SIP header may hold 64 KiB): over what PostgreSQL's B-tree
    // takes in one entry. It is stored, bounded and marked, once however often it comes.
    let long = call(&noise, 7_000, 200, None);
    let streams = vec![stream(Some(noise.as_str()))];
    let mut r = cdr::CdrRecord::call(long, streams);
    r.uid = r.identity("edge");
    st.insert_records(std::slice::from_ref(&r)).unwrap();
    st.insert_records(std::slice::from_ref(&r)).unwrap();
    let f = CdrFilter {
        since_us: Some(7_000),
        until_us: Some(7_001),
        ..Default::default()
    };
    let rows = st.list(&f).unwrap();
    assert_eq!(rows.len(), 1, "once");
    if nul_kept {
        assert_eq!(rows[0].call_id, noise, "SQLite keeps it whole");
    } else {
        let id = &rows[0].call_id;
        assert!(id.len() <= 1_024 && id.starts_with(&noise[..900]), "{id}");
        assert_eq!(st.show(id).unwrap().unwrap().1.len(), 1, "with its stream");
    }
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
    assert_eq!(st.list(&CdrFilter::default()).unwrap().len(), 6);
    a_nul_in_a_header_is_stored(&mut st, true);
    let out = Command::new("sqlite3")
        .arg(&path)
        .arg("SELECT COUNT(*) FROM cdr_rtp WHERE cdr_id IS NULL")
        .output();
    if let Ok(out) = out {
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    }
}

#[test]
fn sqlite_database_from_before_the_archive_columns_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&OLD_CDR_TABLE.replace("ID", "INTEGER"))
        .unwrap();
    let mut st = SqliteStore::open(&path).unwrap();
    check_upgraded(&mut st);
    drop(st);
    // Opening again finds every column and adds nothing.
    let mut st = SqliteStore::open(&path).unwrap();
    assert_eq!(st.list(&CdrFilter::default()).unwrap().len(), 2);
}

#[test]
fn postgres_store_on_a_throwaway_server() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        let conninfo = server.layout_database("stores", layout);
        let mut st = PgStore::connect(&conninfo).unwrap();
        assert_eq!(st.layout(), layout, "a plain connect adopts the layout");
        exercise(&mut st);
        drop(st);
        // Connecting again finds the schema and rows in place.
        let mut st = PgStore::connect(&conninfo).unwrap();
        assert_eq!(
            st.list(&CdrFilter::default()).unwrap().len(),
            6,
            "{layout:?}"
        );
        a_nul_in_a_header_is_stored(&mut st, false);
    }
    // A database from before the archive columns (and before schema versions) is upgraded
    // when connected to.
    let conninfo = server.database("old");
    let mut client = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
    client
        .batch_execute(&OLD_CDR_TABLE.replace("ID", "BIGSERIAL"))
        .unwrap();
    drop(client);
    let mut st = PgStore::connect(&conninfo).unwrap();
    check_upgraded(&mut st);
    drop(st);
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
