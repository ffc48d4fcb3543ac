//! The CDR writer and its journal against real parts: SQLite files, a throwaway PostgreSQL
//! server stopped and started mid-run, a journal with a torn tail, and a writer process killed
//! with SIGKILL whose journal the next run replays.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cdr::journal::{HEADER_BYTES, Journal};
use cdr::{
    CdrCall, CdrRecord, CdrStore, CdrStream, CdrWriter, CdrWriterConfig, CdrWriterStats, PgStore,
    SqliteStore,
};
use common::{PgServer, set_read_only};

fn call(i: u64) -> CdrCall {
    CdrCall {
        call_id: format!("call-{i}@tandem.test"),
        caller: "1001".into(),
        called: "2002".into(),
        caller_addr: "192.0.2.1:5060".into(),
        callee_addr: "192.0.2.2:5060".into(),
        start_us: 1_700_000_000_000_000 + i as i64 * 1_000_000,
        end_us: Some(1_700_000_000_000_000 + i as i64 * 1_000_000 + 30_000_000),
        state: "ended".into(),
        last_response: Some(200),
        last_reason: "OK".into(),
        sip_messages: 7,
        mos_min: Some(4.2),
        // The writer's default sensor, which it gives a call without one.
        sensor: "local".into(),
        ..CdrCall::default()
    }
}

fn stream(call_id: Option<String>, ssrc: u32) -> CdrStream {
    CdrStream {
        call_id,
        src: "192.0.2.1:4000".into(),
        dst: "192.0.2.2:4000".into(),
        ssrc,
        payload: "g711U".into(),
        packets: 1500,
        mean_delta_ms: 20.0,
        mos: Some(4.2),
        ..CdrStream::default()
    }
}

/// Record `i`: a call with two streams, except every tenth, a stream without signalling.
/// `c` as the store reads it back under `uid`: a leg alone is its own call, its group its uid.
fn as_stored(mut c: CdrCall, uid: &str) -> CdrCall {
    if c.call_group.is_empty() {
        c.call_group = uid.to_string();
    }
    c
}

fn record(i: u64) -> CdrRecord {
    if i % 10 == 9 {
        return CdrRecord::lone_stream(stream(None, i as u32));
    }
    let c = call(i);
    let id = Some(c.call_id.clone());
    CdrRecord::call(c, vec![stream(id.clone(), 1), stream(id, 2)])
}

/// Rows records `0..n` make: (calls, streams).
fn rows_of(n: u64) -> (u64, u64) {
    let lone = (0..n).filter(|i| i % 10 == 9).count() as u64;
    (n - lone, 2 * (n - lone) + lone)
}

fn fast_config(journal: &Path) -> CdrWriterConfig {
    CdrWriterConfig {
        batch_records_max: 50,
        batch_delay_ms: 5,
        reconnect_min_ms: 20,
        reconnect_max_ms: 200,
        ..CdrWriterConfig::new(journal)
    }
}

/// Waits (at most a minute: a bound on a broken test, not a timing assertion) until the
/// writer's counters satisfy `done`.
fn wait_for(
    what: &str,
    stats: impl Fn() -> CdrWriterStats,
    done: impl Fn(&CdrWriterStats) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = stats();
        if done(&s) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// (rows, distinct uids) of a table in a SQLite file, read by a connection of its own.
fn sqlite_counts(db: &Path, table: &str) -> (u64, u64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        &format!("SELECT COUNT(*), COUNT(DISTINCT uid) FROM {table}"),
        [],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
    )
    .unwrap()
}

#[test]
fn records_inserted_twice_are_stored_once_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let mut st = SqliteStore::open(&db).unwrap();
    let mut records: Vec<CdrRecord> = (0..20).map(record).collect();
    for (i, r) in records.iter_mut().enumerate() {
        r.uid = format!("run-{i}");
    }
    st.insert_records(&records[..12]).unwrap();
    // A replay after a crash repeats what was stored, then goes on.
    st.insert_records(&records).unwrap();
    let (calls, streams) = rows_of(20);
    assert_eq!(sqlite_counts(&db, "cdr"), (calls, calls));
    assert_eq!(sqlite_counts(&db, "cdr_rtp"), (streams, streams));
    // Streams stay linked to their call.
    let (c, s) = st.show("call-3@tandem.test").unwrap().unwrap();
    assert_eq!((c, s.len()), (as_stored(call(3), &records[3].uid), 2));
    // Stored again with new figures: the same row, updated in place; its streams replaced.
    let mut again = records[3].clone();
    again.call.as_mut().unwrap().last_reason = "stored again".into();
    again.streams[0].packets += 1;
    st.insert_records(&[again.clone()]).unwrap();
    assert_eq!(sqlite_counts(&db, "cdr"), (calls, calls));
    assert_eq!(sqlite_counts(&db, "cdr_rtp"), (streams, streams));
    let (c, s) = st.show("call-3@tandem.test").unwrap().unwrap();
    assert_eq!(c.last_reason, "stored again");
    assert!(s.contains(&again.streams[0]), "{s:?}");
}

/// A fax call: the record of `call(i)` with one T.38 flow each way.
fn fax_record(i: u64) -> CdrRecord {
    let mut c = call(i);
    c.dtmf = "12#".into();
    c.fax_pages = Some(3);
    c.fax_result = Some("completed".into());
    let mut r = CdrRecord::call(c, Vec::new());
    r.uid = format!("local|fax-{i}");
    for (src, dst) in [
        ("192.0.2.1:4000", "192.0.2.2:5000"),
        ("192.0.2.2:5000", "192.0.2.1:4000"),
    ] {
        r.t38.push(cdr::CdrT38 {
            src: src.into(),
            dst: dst.into(),
            start_us: 1_700_000_010_000_000,
            end_us: 1_700_000_070_000_000,
            packets: 1_800,
            bytes: 61_200,
            lost: 2,
            duplicates: 0,
            out_of_order: 1,
            types: "cng,v21-preamble,v21,v17-14400".into(),
            redundant: 1_799,
            fec: 0,
            t30: "DIS,DCS,CFR,MPS,MCF,EOP,MCF,DCN".into(),
        });
    }
    r
}

/// Stores a fax record twice (the second time with new figures) in `st`, and checks what
/// `t38` reads back: the flows once each, updated.
fn fax_flows_are_stored_once_and_updated(st: &mut dyn CdrStore) {
    let mut r = fax_record(5);
    st.insert_records(std::slice::from_ref(&r)).unwrap();
    assert_eq!(st.t38("call-5@tandem.test").unwrap(), r.t38);
    r.t38[0].packets += 1;
    st.insert_records(std::slice::from_ref(&r)).unwrap();
    let back = st.t38("call-5@tandem.test").unwrap();
    assert_eq!(back, r.t38, "stored again: updated, not added");
    assert!(st.t38("call-1@tandem.test").unwrap().is_empty());
    // The call row keeps its digits and the fax's outcome.
    let (c, _) = st.show("call-5@tandem.test").unwrap().unwrap();
    assert_eq!(c, as_stored(r.call.clone().unwrap(), &r.uid));
}

#[test]
fn fax_flows_go_to_cdr_t38_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = SqliteStore::open(&dir.path().join("cdr.sqlite3")).unwrap();
    fax_flows_are_stored_once_and_updated(&mut st);
}

#[test]
fn fax_flows_go_to_cdr_t38_in_postgres() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        let mut st = PgStore::connect(&server.layout_database("fax", layout)).unwrap();
        fax_flows_are_stored_once_and_updated(&mut st);
    }
}

#[test]
fn a_record_s_identity_is_its_sensor_call_id_and_start() {
    let r = record(4);
    let c = r.call.as_ref().unwrap();
    assert_eq!(
        r.identity("site-a"),
        format!("site-a|{}|{}", c.call_id, c.start_us)
    );
    assert_ne!(r.identity("site-a"), r.identity("site-b"));
    let lone = CdrRecord::lone_stream(r.streams[0].clone());
    let s = &lone.streams[0];
    assert_eq!(
        lone.identity("local"),
        format!("local|rtp|{}|{}|{}|{}", s.src, s.dst, s.ssrc, s.start_us)
    );
}

/// The SQLite schema as it was before the `uid` column.
fn schema_without_uid(schema: &str) -> String {
    schema
        .lines()
        .filter(|l| !l.contains("uid"))
        .collect::<Vec<_>>()
        .join("\n")
        // The column before `uid` ended its table.
        .replace(",\n);", "\n);")
}

#[test]
fn a_sqlite_database_from_before_uids_is_upgraded_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(&schema_without_uid(cdr::SCHEMA))
            .unwrap();
        conn.execute_batch(
            "INSERT INTO cdr (call_id, caller, called, caller_addr, callee_addr, start_us, state, \
             last_reason, sip_messages, reinvites) VALUES ('old@x', '1', '2', 'a', 'b', 1, 'ended', '', 3, 0)",
        )
        .unwrap();
    }
    let mut st = SqliteStore::open(&db).unwrap();
    let mut r = record(0);
    r.uid = "new".into();
    st.insert_records(&[r.clone(), r]).unwrap();
    assert_eq!(sqlite_counts(&db, "cdr"), (2, 1), "the old row has no uid");
    assert_eq!(sqlite_counts(&db, "cdr_rtp"), (2, 2));
}

/// A replay may read the next batch before the one before is stored: batches read one after
/// the other cover the journal in order, and consuming them in that order empties it.
#[test]
fn a_journal_is_read_ahead_and_consumed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.journal");
    let records: Vec<CdrRecord> = (0..10).map(record).collect();
    let (mut j, _) = Journal::open(&path, 1 << 20).unwrap();
    j.append(&records).unwrap();
    let first = j.read_batch(4).unwrap();
    let second = j.read_batch_after(&first, 4).unwrap();
    assert_eq!(first.records, records[..4]);
    assert_eq!(second.records, records[4..8]);
    // Nothing is consumed by reading: a replay that stops here sends them all again.
    assert_eq!(j.read_batch(4).unwrap().records, records[..4]);
    j.consume(&first).unwrap();
    j.consume(&second).unwrap();
    assert_eq!(j.pending_records(), 2);
    let last = j.read_batch(4).unwrap();
    assert_eq!(last.records, records[8..]);
    assert_eq!(j.read_batch_after(&last, 4).unwrap().entries, 0);
    j.consume(&last).unwrap();
    assert_eq!((j.pending_records(), j.bytes()), (0, 0), "emptied");
}

#[test]
fn a_journal_with_a_torn_tail_is_read_up_to_the_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.journal");
    let records: Vec<CdrRecord> = (0..3).map(record).collect();
    let entry_ends = {
        let (mut j, opened) = Journal::open(&path, 1 << 20).unwrap();
        assert_eq!(opened.records, 0);
        let mut ends = Vec::new();
        for r in &records {
            j.append(std::slice::from_ref(r)).unwrap();
            ends.push(HEADER_BYTES + j.bytes());
        }
        ends
    };
    let whole = std::fs::read(&path).unwrap();

    // A crash in the middle of the third entry's write: its payload runs past the end.
    std::fs::write(&path, &whole[..whole.len() - 10]).unwrap();
    let (read, damage) = Journal::inspect(&path).unwrap();
    assert_eq!(read, records[..2]);
    let damage = damage.unwrap();
    assert_eq!(damage.offset, entry_ends[1]);
    assert!(
        damage.reason.contains("runs 10 bytes past the end"),
        "{damage:?}"
    );

    // A crash in the middle of a frame header.
    std::fs::write(&path, &whole[..entry_ends[1] as usize + 3]).unwrap();
    let (read, damage) = Journal::inspect(&path).unwrap();
    assert_eq!(read, records[..2]);
    assert!(
        damage
            .unwrap()
            .reason
            .contains("3 bytes where an entry header")
    );

    // A flipped bit in the second entry: reading stops before it.
    let mut flipped = whole.clone();
    flipped[entry_ends[0] as usize + 20] ^= 0x04;
    std::fs::write(&path, &flipped).unwrap();
    let (read, damage) = Journal::inspect(&path).unwrap();
    assert_eq!(read, records[..1]);
    assert!(damage.unwrap().reason.contains("checksum mismatch"));

    // Opening cuts the damage off, so what is appended next can be read back.
    let (mut j, opened) = Journal::open(&path, 1 << 20).unwrap();
    assert_eq!(opened.records, 1);
    assert_eq!(opened.damage.unwrap().offset, entry_ends[0]);
    j.append(&records[2..]).unwrap();
    drop(j);
    let (read, damage) = Journal::inspect(&path).unwrap();
    assert_eq!(
        (read, damage),
        (vec![records[0].clone(), records[2].clone()], None)
    );

    // Something that is not a journal is refused, by name.
    std::fs::write(&path, b"SQLite format 3\0").unwrap();
    let err = Journal::open(&path, 1 << 20).err().unwrap().to_string();
    assert!(
        err.contains("cdr.journal is not a Tandem CDR journal"),
        "{err}"
    );
}

#[test]
fn a_full_journal_counts_drops() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("cdr.journal");
    // No database at all: a directory where the file should be.
    let not_a_db = dir.path().join("db-is-a-directory");
    std::fs::create_dir(&not_a_db).unwrap();
    let cfg = CdrWriterConfig {
        queue_records_max: 4,
        journal_bytes_max: 4096,
        ..fast_config(&journal)
    };
    let writer = CdrWriter::start(cfg, move || {
        Ok(Box::new(SqliteStore::open(&not_a_db)?) as Box<dyn CdrStore>)
    })
    .unwrap();
    for i in 0..100 {
        writer.submit(record(i));
    }
    let s = writer.close();
    assert!(s.store_errors > 0 && !s.store_up, "{s:?}");
    assert!(s.journaled_records > 0 && s.dropped_records > 0, "{s:?}");
    assert_eq!(s.journaled_records + s.dropped_records, 100, "{s:?}");
    assert!(s.journal_bytes <= 4096, "{s:?}");
    let (kept, _) = Journal::inspect(&journal).unwrap();
    assert_eq!(kept.len() as u64, s.journaled_records);
}

#[test]
fn a_read_only_sqlite_file_sends_records_to_the_journal_until_it_is_writable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let journal = dir.path().join("cdr.journal");
    let open = {
        let db = db.clone();
        move || Ok(Box::new(SqliteStore::open(&db)?) as Box<dyn CdrStore>)
    };
    let writer = CdrWriter::start(fast_config(&journal), open.clone()).unwrap();
    for i in 0..100 {
        writer.submit(record(i));
    }
    let first = writer.close();
    assert_eq!((first.written_records, first.journaled_records), (100, 0));

    if !set_read_only(&db, true) {
        test_env::skip(&format!(
            "cannot make {} read-only here (chattr)",
            db.display()
        ));
        return;
    }
    let writer = CdrWriter::start(fast_config(&journal), open).unwrap();
    for i in 100..200 {
        writer.submit(record(i));
    }
    // Records may reach the journal from the submitting side (a full queue) before the writer
    // meets the read-only file: wait for both.
    wait_for(
        "records journaled and the store found read-only",
        || writer.stats(),
        |s| s.journaled_records == 100 && s.store_errors > 0 && !s.store_up,
    );
    assert!(set_read_only(&db, false));
    // The writer opens the file again after its backoff and replays the journal.
    wait_for(
        "the journal replayed",
        || writer.stats(),
        |s| s.replayed_records == 100 && s.journal_records == 0,
    );
    for i in 200..250 {
        writer.submit(record(i));
    }
    let s = writer.close();
    assert_eq!((s.written_records, s.dropped_records), (150, 0), "{s:?}");
    assert_eq!(
        s.journal_bytes, 0,
        "the journal is truncated after the replay"
    );
    let (calls, streams) = rows_of(250);
    assert_eq!(sqlite_counts(&db, "cdr"), (calls, calls));
    assert_eq!(sqlite_counts(&db, "cdr_rtp"), (streams, streams));
}

#[test]
fn postgres_stopped_mid_run_loses_no_cdr_and_stores_none_twice() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        stopped_mid_run(&server, layout);
    }
}

/// A writer storing into `layout`'s database while the server is stopped and started again.
fn stopped_mid_run(server: &PgServer, layout: cdr::PgLayout) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("cdr.journal");
    let conninfo = server.layout_database("stopped", layout);
    let check = conninfo.clone();
    let writer = Arc::new(
        CdrWriter::start(fast_config(&journal), move || {
            Ok(Box::new(PgStore::connect(&conninfo)?) as Box<dyn CdrStore>)
        })
        .unwrap(),
    );
    // A capture that never stops: a record every millisecond until told to stop.
    let submitted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (writer, submitted, stop) = (writer.clone(), submitted.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let i = submitted.load(Ordering::Relaxed);
                writer.submit(record(i));
                submitted.store(i + 1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    wait_for(
        "records stored",
        || writer.stats(),
        |s| s.written_records >= 200,
    );
    server.stop_fast();
    wait_for(
        "records journaled",
        || writer.stats(),
        |s| s.journaled_records >= 200,
    );
    let while_down = writer.stats();
    assert!(while_down.store_errors > 0, "{while_down:?}");
    server.start_again();
    wait_for(
        "the journal replayed",
        || writer.stats(),
        |s| s.replayed_records >= 200,
    );
    let resumed_at = submitted.load(Ordering::Relaxed);
    wait_for(
        "more records stored",
        || writer.stats(),
        |s| s.written_records >= resumed_at + 100,
    );
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let writer = Arc::into_inner(writer).unwrap();
    let s = writer.close();
    let n = submitted.load(Ordering::Relaxed);
    assert_eq!(s.dropped_records, 0, "{s:?}");
    assert_eq!(s.written_records, n, "{s:?}");
    assert!(
        s.journaled_records >= 200 && s.replayed_records == s.journaled_records,
        "{s:?}"
    );
    assert_eq!((s.journal_records, s.journal_bytes), (0, 0), "{s:?}");

    let mut pg = postgres::Client::connect(&check, postgres::NoTls).unwrap();
    let (calls, streams) = rows_of(n);
    for (table, rows) in [("cdr", calls), ("cdr_rtp", streams)] {
        let row = pg
            .query_one(
                &format!("SELECT COUNT(*), COUNT(DISTINCT uid) FROM {table}"),
                &[],
            )
            .unwrap();
        let (count, distinct): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!(
            (count as u64, distinct as u64),
            (rows, rows),
            "{layout:?} {table}"
        );
    }
    // Every call is linked to its two streams.
    let unlinked: i64 = pg
        .query_one(
            "SELECT COUNT(*) FROM cdr c WHERE (SELECT COUNT(*) FROM cdr_rtp r WHERE r.cdr_id = c.id) <> 2",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(unlinked, 0);
}

#[test]
fn a_postgres_database_from_before_uids_is_upgraded_and_inserts_are_idempotent() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let mut pg = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
    pg.batch_execute(&schema_without_uid(cdr::pg::PG_SCHEMA))
        .unwrap();
    let mut st = PgStore::connect(&server.conninfo()).unwrap();
    let mut records: Vec<CdrRecord> = (0..20).map(record).collect();
    for (i, r) in records.iter_mut().enumerate() {
        r.uid = format!("run-{i}");
    }
    st.insert_records(&records[..7]).unwrap();
    st.insert_records(&records).unwrap();
    let (calls, streams) = rows_of(20);
    for (table, rows) in [("cdr", calls), ("cdr_rtp", streams)] {
        let row = pg
            .query_one(
                &format!("SELECT COUNT(*), COUNT(DISTINCT uid) FROM {table}"),
                &[],
            )
            .unwrap();
        let (count, distinct): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!((count as u64, distinct as u64), (rows, rows), "{table}");
    }
    // Stored again with new figures: updated in place, streams replaced.
    let mut again = records[3].clone();
    again.call.as_mut().unwrap().last_reason = "stored again".into();
    st.insert_records(&[again]).unwrap();
    let (c, s) = st.show("call-3@tandem.test").unwrap().unwrap();
    assert_eq!((c.last_reason.as_str(), s.len()), ("stored again", 2));
    let row = pg.query_one("SELECT COUNT(*) FROM cdr", &[]).unwrap();
    assert_eq!(row.get::<_, i64>(0) as u64, calls);
}

/// The child side of the SIGKILL test: journals records (its database cannot be opened) and
/// prints how many are safe on disk, until it is killed. Does nothing in a normal test run.
#[test]
fn journaling_child_process() {
    let Ok(dir) = std::env::var("TANDEM_CDR_JOURNAL_CHILD") else {
        return;
    };
    let dir = Path::new(&dir);
    let not_a_db = dir.join("db-is-a-directory");
    let writer = CdrWriter::start(
        CdrWriterConfig {
            batch_records_max: 7,
            ..fast_config(&dir.join("cdr.journal"))
        },
        move || Ok(Box::new(SqliteStore::open(&not_a_db)?) as Box<dyn CdrStore>),
    )
    .unwrap();
    let mut out = std::io::stdout();
    for i in 0.. {
        writer.submit(record(i));
        writeln!(out, "journaled {}", writer.stats().journaled_records).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn a_journal_left_by_a_killed_process_is_replayed_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("db-is-a-directory")).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "journaling_child_process", "--nocapture"])
        .env("TANDEM_CDR_JOURNAL_CHILD", dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut safe = 0u64;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("journaled ") {
            safe = n.parse().unwrap();
            if safe >= 300 {
                break;
            }
        }
    }
    // SIGKILL, in the middle of its run: no shutdown, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(safe >= 300, "the child stopped early");

    let journal = dir.path().join("cdr.journal");
    let (left, _damage) = Journal::inspect(&journal).unwrap();
    assert!(
        left.len() as u64 >= safe,
        "{} records in the journal, {safe} reported safe",
        left.len()
    );
    let db = dir.path().join("cdr.sqlite3");
    let open = {
        let db = db.clone();
        move || Ok(Box::new(SqliteStore::open(&db)?) as Box<dyn CdrStore>)
    };
    // The next run replays it without being asked, then truncates it.
    let writer = CdrWriter::start(fast_config(&journal), open).unwrap();
    wait_for(
        "the journal replayed",
        || writer.stats(),
        |s| s.journal_records == 0,
    );
    let s = writer.close();
    assert_eq!(s.replayed_records, left.len() as u64, "{s:?}");
    assert_eq!(
        std::fs::metadata(&journal).unwrap().len(),
        HEADER_BYTES,
        "truncated to its header"
    );
    let calls = left.iter().filter(|r| r.call.is_some()).count() as u64;
    assert_eq!(sqlite_counts(&db, "cdr"), (calls, calls));
    let uids: std::collections::HashSet<_> = left.iter().map(|r| r.uid.clone()).collect();
    assert_eq!(uids.len(), left.len(), "every record has its own uid");
}

#[test]
fn a_hung_database_never_blocks_submit_and_close_journals_the_queue() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        hung_database(&server, layout);
    }
}

/// The database hangs in the middle of an insert (the writer is connected; another session
/// then locks the table): at close, the batch the thread is inserting is journaled with the
/// queue, so that nothing is lost if the process exits before the database answers. Stored
/// later as well, it is stored once.
#[test]
fn a_batch_hung_in_its_insert_is_journaled_at_close() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let conninfo = server.layout_database("hung_insert", cdr::PgLayout::Plain);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("cdr.journal");
    let open = conninfo.clone();
    let writer = CdrWriter::start(
        CdrWriterConfig {
            queue_records_max: 1_000,
            batch_records_max: 10,
            close_timeout_ms: 500,
            ..fast_config(&journal)
        },
        move || Ok(Box::new(PgStore::connect(&open)?) as Box<dyn CdrStore>),
    )
    .unwrap();
    writer.submit(record(0));
    wait_for(
        "the first record",
        || writer.stats(),
        |s| s.written_records == 1,
    );

    let mut blocker = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE cdr IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    for i in 1..50 {
        writer.submit(record(i));
    }
    // The thread takes a batch and waits on the lock.
    wait_for("a batch taken", || writer.stats(), |s| s.queue_records < 49);
    let watch = writer.watch();
    let closed = writer.close();
    let (journaled, _) = Journal::inspect(&journal).unwrap();
    let uids: std::collections::HashSet<&str> = journaled.iter().map(|r| r.uid.as_str()).collect();
    assert_eq!(
        uids.len(),
        49,
        "every record not stored is journaled at close: {closed:?}"
    );

    tx.commit().unwrap();
    wait_for(
        "every record stored",
        || watch.stats(),
        |s| s.written_records >= 50 && s.journal_records == 0,
    );
    let row = blocker
        .query_one("SELECT COUNT(*), COUNT(DISTINCT uid) FROM cdr", &[])
        .unwrap();
    let (count, distinct): (i64, i64) = (row.get(0), row.get(1));
    let (calls, _) = rows_of(50);
    assert_eq!((count as u64, distinct as u64), (calls, calls));
}

/// A writer whose `layout` database hangs (a table locked by another session).
fn hung_database(server: &PgServer, layout: cdr::PgLayout) {
    let conninfo = server.layout_database("hung", layout);
    // Another session holds the table: every write (and schema check) waits for it.
    let mut blocker = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE cdr IN ACCESS EXCLUSIVE MODE")
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let writer = CdrWriter::start(
        CdrWriterConfig {
            queue_records_max: 20,
            batch_records_max: 10,
            close_timeout_ms: 500,
            ..fast_config(&dir.path().join("cdr.journal"))
        },
        move || Ok(Box::new(PgStore::connect(&conninfo)?) as Box<dyn CdrStore>),
    )
    .unwrap();
    let outcomes: Vec<cdr::Submitted> = (0..100).map(|i| writer.submit(record(i))).collect();
    assert!(!outcomes.contains(&cdr::Submitted::Dropped));
    assert!(
        outcomes.contains(&cdr::Submitted::Journaled),
        "a full queue spills to the journal"
    );
    let watch = writer.watch();
    let closed = writer.close();
    assert!(closed.spilled_records > 0, "{closed:?}");
    assert_eq!(
        closed.queue_records, 0,
        "the queue was journaled: {closed:?}"
    );

    // The database answers again: the writer's thread, left behind, finishes what it held and
    // replays the journal before it ends.
    tx.commit().unwrap();
    wait_for(
        "every record stored",
        || watch.stats(),
        |s| s.written_records == 100 && s.journal_records == 0,
    );
    drop(watch);
    let (calls, streams) = rows_of(100);
    for (table, rows) in [("cdr", calls), ("cdr_rtp", streams)] {
        let row = blocker
            .query_one(
                &format!("SELECT COUNT(*), COUNT(DISTINCT uid) FROM {table}"),
                &[],
            )
            .unwrap();
        let (count, distinct): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!((count as u64, distinct as u64), (rows, rows), "{table}");
    }
}
