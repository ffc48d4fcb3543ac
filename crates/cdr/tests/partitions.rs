//! PostgreSQL's day-partitioned layout, the migrations and the batch upsert, against a real
//! throwaway server (skipped with a reason where PostgreSQL is not installed):
//!
//! - days created ahead at connect, and on demand for a late record (a sensor's week-old
//!   journal replayed), and at the edges of time;
//! - every partition with every index of its parent;
//! - retention: whole days dropped, only those, a bounded number per call, by the option too;
//! - a batch stored once however often it comes (again, with new figures, from two
//!   connections at once, with repeats inside it), in both layouts;
//! - migrations recorded once, applied once by two processes at once, a failing one rolled
//!   back and named, a newer schema refused;
//! - a plain database: converted when empty, refused with its rows until moved explicitly
//!   (`cdr::migrate::partition_existing`), and everything found again after the move.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use cdr::migrate::{self, Migration};
use cdr::pg_partition::{PARTITIONED_TABLES, RETENTION_DAYS_PER_CALL_MAX};
use cdr::search::CallQuery;
use cdr::{
    CdrCall, CdrError, CdrRecord, CdrStore, CdrStream, CdrT38, CdrWriter, CdrWriterConfig, Day,
    PgLayout, PgOptions, PgStore,
};
use common::{PgServer, call, registration};

const DAY_US: i64 = 86_400_000_000;

fn client(conninfo: &str) -> postgres::Client {
    postgres::Client::connect(conninfo, postgres::NoTls).unwrap()
}

fn count(pg: &mut postgres::Client, sql: &str) -> i64 {
    pg.query_one(sql, &[]).unwrap().get(0)
}

/// Whether a table of that name exists.
fn exists(pg: &mut postgres::Client, name: &str) -> bool {
    pg.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .unwrap()
        .get(0)
}

fn partitioned(days_ahead: u32, retention_days: Option<u32>) -> PgOptions {
    PgOptions {
        layout: PgLayout::Partitioned,
        days_ahead,
        retention_days,
    }
}

#[test]
fn days_are_made_ahead_and_a_week_old_journal_gets_its_days() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let conninfo = server.database("ahead");
    let today = Day::today();
    let mut st = PgStore::connect_with(&conninfo, &partitioned(2, None)).unwrap();
    assert_eq!(st.layout(), PgLayout::Partitioned);
    assert_eq!(
        st.partition_days().unwrap(),
        [today, today.plus(1), today.plus(2)]
    );
    let mut pg = client(&conninfo);
    for (table, _) in PARTITIONED_TABLES {
        for d in 0..3 {
            assert!(exists(&mut pg, &today.plus(d).partition(table)), "{table}");
        }
    }
    // A sensor offline for a week replays its journal: calls of 8 and 9 days ago.
    let old: Vec<CdrRecord> = (0..40)
        .map(|i| {
            let day = today.plus(-8 - (i % 2) as i64);
            call(
                "site-b",
                i,
                day.start_us().unwrap() + 3_600_000_000 + i as i64,
                2,
            )
        })
        .chain([registration(1, today.plus(-9).start_us().unwrap() + 5)])
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("cdr.journal");
    let (mut j, _) = cdr::Journal::open(&journal, 1 << 24).unwrap();
    j.append(&old).unwrap();
    drop(j);
    let target = conninfo.clone();
    let writer = CdrWriter::start(CdrWriterConfig::new(&journal), move || {
        Ok(Box::new(PgStore::connect(&target)?) as Box<dyn CdrStore>)
    })
    .unwrap();
    let stats = writer.close();
    assert_eq!(
        (stats.replayed_records, stats.dropped_records),
        (41, 0),
        "{stats:?}"
    );
    let days = st.partition_days().unwrap();
    assert!(days.contains(&today.plus(-8)) && days.contains(&today.plus(-9)));
    for d in [-8, -9] {
        let day = today.plus(d);
        assert_eq!(
            count(
                &mut pg,
                &format!("SELECT count(*) FROM {}", day.partition("cdr"))
            ),
            20
        );
        assert_eq!(
            count(
                &mut pg,
                &format!("SELECT count(*) FROM {}", day.partition("cdr_rtp"))
            ),
            40,
            "the streams are in their call's day"
        );
    }
    // They are found like any other.
    let q = CallQuery {
        from_us: today.plus(-9).start_us(),
        to_us: today.plus(-7).start_us(),
        limit: 100,
        ..CallQuery::default()
    };
    assert_eq!(st.search(&q).unwrap().calls.len(), 40);
    let (found, streams, _) = st.call_by_uid(&old[3].uid).unwrap().expect("by its uid");
    assert_eq!(
        (found.call.call_id.as_str(), streams.len()),
        ("call-3@partitions.test", 2)
    );
    // Times beyond the years 1 to 9999 have their edge partitions.
    let edges = [
        call("x", 100, i64::MIN / 2, 1),
        call("x", 101, i64::MAX / 2, 1),
    ];
    st.insert_records(&edges).unwrap();
    assert!(exists(&mut pg, "cdr_p_early") && exists(&mut pg, "cdr_rtp_p_late"));
    let (c, s) = st.show("call-101@partitions.test").unwrap().unwrap();
    assert_eq!((c.start_us, s.len()), (i64::MAX / 2, 1));
}

#[test]
fn every_partition_has_every_index_of_its_table() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let conninfo = server.database("indexes");
    let mut st = PgStore::connect_with(&conninfo, &partitioned(1, None)).unwrap();
    st.insert_records(&[call("a", 1, 1_000, 1), registration(2, 5_000)])
        .unwrap();
    let mut pg = client(&conninfo);
    for (table, _) in PARTITIONED_TABLES {
        let parents: Vec<String> = pg
            .query(
                "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                 WHERE i.indrelid = $1::text::regclass",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(parents.len() >= 2, "{table}: {parents:?}");
        let partitions: Vec<String> = pg
            .query(
                "SELECT inhrelid::regclass::text FROM pg_inherits \
                 WHERE inhparent = $1::text::regclass",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(partitions.len(), 3, "{table}: today, tomorrow, 1970-01-01");
        for index in &parents {
            // Each partitioned index has one attached index on every partition.
            let attached = count(
                &mut pg,
                &format!("SELECT count(*) FROM pg_inherits WHERE inhparent = '{index}'::regclass"),
            );
            assert_eq!(attached as usize, partitions.len(), "{table}: {index}");
        }
    }
}

#[test]
fn retention_drops_whole_days_and_only_those() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let conninfo = server.database("retention");
    let today = Day::today();
    let mut st = PgStore::connect_with(&conninfo, &partitioned(0, None)).unwrap();
    // Ten days of calls (three a day, two streams each, a T.38 flow on one) and registrations.
    let mut records = Vec::new();
    for d in 0..10 {
        let start = today.plus(-d).start_us().unwrap();
        for i in 0..3 {
            let mut r = call("a", (d * 10 + i) as u64, start + i * 1_000_000, 2);
            if i == 0 {
                r.t38.push(CdrT38 {
                    start_us: start,
                    types: "cng".into(),
                    ..CdrT38::default()
                });
            }
            records.push(r);
        }
        records.push(registration(d as u64, start + 7));
    }
    st.insert_records(&records).unwrap();
    let mut pg = client(&conninfo);
    assert_eq!(count(&mut pg, "SELECT count(*) FROM cdr"), 30);
    // Keep the last five days: the five before go, each whole, in every table.
    let dropped = st.drop_days_before(today.plus(-4)).unwrap();
    let gone: Vec<Day> = (5..10).rev().map(|d| today.plus(-d)).collect();
    assert_eq!((dropped.days.clone(), dropped.more), (gone.clone(), false));
    for day in &gone {
        for (table, _) in PARTITIONED_TABLES {
            assert!(!exists(&mut pg, &day.partition(table)), "{day} {table}");
        }
    }
    assert_eq!(count(&mut pg, "SELECT count(*) FROM cdr"), 15);
    assert_eq!(count(&mut pg, "SELECT count(*) FROM cdr_rtp"), 30);
    assert_eq!(count(&mut pg, "SELECT count(*) FROM cdr_t38"), 5);
    assert_eq!(count(&mut pg, "SELECT count(*) FROM registration"), 5);
    let oldest: i64 = pg
        .query_one("SELECT min(start_us) FROM cdr", &[])
        .unwrap()
        .get(0);
    assert_eq!(Day::of_us(oldest), today.plus(-4));
    // Nothing due: nothing dropped.
    assert_eq!(st.drop_days_before(today.plus(-4)).unwrap().days, []);
    // More days due than one call drops: the oldest first, the rest in the next call.
    st.create_days((20..30).map(|d| today.plus(-d))).unwrap();
    let first = st.drop_days_before(today.plus(-4)).unwrap();
    assert_eq!(first.days.len(), RETENTION_DAYS_PER_CALL_MAX);
    assert!(first.more && first.days[0] == today.plus(-29));
    let second = st.drop_days_before(today.plus(-4)).unwrap();
    assert_eq!((second.days.len(), second.more), (3, false));
    drop(st);
    // The option does it at connect: two days kept before today.
    let mut st = PgStore::connect_with(&conninfo, &partitioned(0, Some(2))).unwrap();
    assert_eq!(st.partition_days().unwrap()[0], today.plus(-2));
    assert_eq!(count(&mut pg, "SELECT count(*) FROM cdr"), 9);
    // Plain tables have no days to drop, and say so.
    let plain = server.database("retention_plain");
    let mut st = PgStore::connect(&plain).unwrap();
    let e = st.drop_days_before(today).unwrap_err().to_string();
    assert!(
        e.contains("partitioned") && e.contains("partition_existing"),
        "{e}"
    );
}

/// (calls, distinct call uids, streams, distinct stream uids, registrations) stored.
fn stored(pg: &mut postgres::Client) -> [i64; 5] {
    let r = pg
        .query_one(
            "SELECT (SELECT count(*) FROM cdr), (SELECT count(DISTINCT uid) FROM cdr), \
             (SELECT count(*) FROM cdr_rtp), (SELECT count(DISTINCT uid) FROM cdr_rtp), \
             (SELECT count(*) FROM registration)",
            &[],
        )
        .unwrap();
    [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)]
}

#[test]
fn a_batch_is_stored_once_however_often_it_comes() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let now_us = Day::today().start_us().unwrap() + 3_600_000_000;
    let mut batch: Vec<CdrRecord> = (0..1_500)
        .map(|i| {
            call(
                "site-c",
                i,
                now_us - (i as i64) * 120_000_000,
                (i % 3) as usize,
            )
        })
        .collect();
    batch.extend((0..50).map(|i| registration(i, now_us - i as i64 * 1_000)));
    let mut lone = CdrRecord::lone_stream(batch[1].streams[0].clone());
    lone.uid = lone.identity("site-c");
    batch.push(lone);
    let calls = 1_500i64;
    let streams = batch.iter().map(|r| r.streams.len() as i64).sum::<i64>();
    let want = [calls, calls, streams, streams, 50];
    for layout in common::LAYOUTS {
        let conninfo = server.layout_database("once", layout);
        let mut pg = client(&conninfo);
        let mut st = PgStore::connect(&conninfo).unwrap();
        // Repeats inside the batch: the last of each uid is stored.
        let mut twice = batch.clone();
        twice.extend_from_slice(&batch[..100]);
        st.insert_records(&twice).unwrap();
        assert_eq!(stored(&mut pg), want, "{layout:?}");
        let ids = count(&mut pg, "SELECT sum(id)::bigint FROM cdr");
        // The same batch again (a journal replayed after a lost acknowledgement).
        st.insert_records(&batch).unwrap();
        assert_eq!(stored(&mut pg), want, "{layout:?}: replayed");
        assert_eq!(
            count(&mut pg, "SELECT sum(id)::bigint FROM cdr"),
            ids,
            "rows kept"
        );
        // Again with new figures: updated in place, the streams of the last record only.
        let mut again = batch.clone();
        again[4].call.as_mut().unwrap().last_reason = "stored again".into();
        again[5].streams.pop();
        st.insert_records(&again[..10]).unwrap();
        let (c, s) = st.show("call-4@partitions.test").unwrap().unwrap();
        assert_eq!((c.last_reason.as_str(), s.len()), ("stored again", 1));
        assert_eq!(
            st.show("call-5@partitions.test").unwrap().unwrap().1.len(),
            1
        );
        assert_eq!(
            stored(&mut pg),
            [calls, calls, streams - 1, streams - 1, 50],
            "{layout:?}"
        );
        // New records after the replays go in as new again.
        let more: Vec<CdrRecord> = (2_000..2_040)
            .map(|i| call("site-c", i, now_us + i as i64, 2))
            .collect();
        for chunk in more.chunks(2) {
            st.insert_records(chunk).unwrap();
        }
        assert_eq!(stored(&mut pg)[0], calls + 40);
        // Two connections storing the same new batch at the same moment: once.
        let fresh: Vec<CdrRecord> = (3_000..3_600)
            .map(|i| call("site-d", i, now_us + i as i64 * 1_000, 2))
            .collect();
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (conninfo, fresh, start) = (conninfo.clone(), fresh.clone(), start.clone());
                std::thread::spawn(move || {
                    let mut st = PgStore::connect(&conninfo).unwrap();
                    start.wait();
                    st.insert_records(&fresh).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = stored(&mut pg);
        assert_eq!((s[0], s[1]), (calls + 640, calls + 640), "{layout:?}");
        let uids: HashSet<String> = pg
            .query("SELECT uid FROM cdr_rtp WHERE uid LIKE 'site-d|%'", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(uids.len(), 1_200, "{layout:?}: every stream once");
    }
}

/// The version of a migration after this release's.
const NEXT: i64 = migrate::MIGRATIONS[migrate::MIGRATIONS.len() - 1].version + 1;

/// The migrations of this release and then `extra`.
fn with(extra: &[Migration]) -> Vec<Migration> {
    migrate::MIGRATIONS.iter().chain(extra).copied().collect()
}

/// This release's migrations, as `schema_migrations` records them.
fn all_versions() -> Vec<(i64, String)> {
    migrate::MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_string()))
        .collect()
}

fn versions(pg: &mut postgres::Client) -> Vec<(i64, String)> {
    pg.query(
        "SELECT version, name FROM schema_migrations WHERE applied_at IS NOT NULL ORDER BY version",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn migrations_are_applied_once_even_by_two_processes_at_once() {
    let Some(server) = PgServer::start() else {
        return;
    };
    // Two stores connecting to a new database at the same moment, in each layout.
    for layout in common::LAYOUTS {
        let conninfo = server.database(&format!("race_{layout:?}").to_lowercase());
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (conninfo, start) = (conninfo.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    PgStore::connect_with(&conninfo, &common::options(layout))
                        .unwrap()
                        .layout()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), layout);
        }
        let mut pg = client(&conninfo);
        let release = all_versions();
        assert_eq!(versions(&mut pg), release);
        // Connecting again applies nothing.
        drop(PgStore::connect(&conninfo).unwrap());
        assert_eq!(versions(&mut pg), release);
    }
    // A slow migration that cannot run twice (its table exists the second time), applied by
    // two processes at once: one applies it, the other waits and finds it done.
    const SLOW: Migration = Migration {
        version: NEXT,
        name: "slow, and refused the second time",
        apply: |tx, _| {
            tx.batch_execute("SELECT pg_sleep(0.5); CREATE TABLE only_once (x int)")
                .map_err(|e| CdrError::Data {
                    problem: e.to_string(),
                })
        },
    };
    let conninfo = server.database("slow");
    let start = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (conninfo, start) = (conninfo.clone(), start.clone());
            std::thread::spawn(move || {
                let mut c = client(&conninfo);
                start.wait();
                migrate::apply(&mut c, "slow", PgLayout::Plain, &with(&[SLOW])).unwrap()
            })
        })
        .collect();
    let mut applied: Vec<Vec<i64>> = threads
        .into_iter()
        .map(|t| t.join().unwrap().versions)
        .collect();
    applied.sort();
    let all: Vec<i64> = migrate::MIGRATIONS
        .iter()
        .map(|m| m.version)
        .chain([NEXT])
        .collect();
    assert_eq!(applied, [vec![], all]);
    assert_eq!(
        versions(&mut client(&conninfo)).len(),
        migrate::MIGRATIONS.len() + 1
    );
}

/// A database of the first schema version, in either layout, gets the calls' SRTP and T.38
/// flags from version 2 when this release connects, and stores them.
#[test]
fn a_version_1_database_gets_the_call_flags() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        let conninfo = server.database(&format!("version1_{layout:?}").to_lowercase());
        let mut pg = client(&conninfo);
        migrate::apply(&mut pg, "version 1", layout, &migrate::MIGRATIONS[..1]).unwrap();
        let flags = "SELECT count(*) FROM information_schema.columns \
                     WHERE table_name = 'cdr' AND column_name IN ('encrypted', 't38_offered')";
        assert_eq!(count(&mut pg, flags), 0, "{layout:?}");
        let mut st = PgStore::connect(&conninfo).unwrap();
        assert_eq!(st.layout(), layout);
        assert_eq!(count(&mut pg, flags), 2, "{layout:?}");
        let mut rec = call("site-a", 1, 1_795_000_000_000_000, 1);
        let c = rec.call.as_mut().unwrap();
        (c.encrypted, c.t38_offered) = (true, true);
        st.insert_records(std::slice::from_ref(&rec)).unwrap();
        let (summary, _, _) = st.call_by_uid(&rec.uid).unwrap().unwrap();
        assert_eq!(
            (summary.call.encrypted, summary.call.t38_offered),
            (true, true),
            "{layout:?}"
        );
    }
}

/// Version 4, in either layout: a database of version 3 gets `cdr_rtp`'s archive columns when
/// this release connects; tables version 1 made take version 4 before 2 and 3 (each migration
/// applies again to version 1's tables, as moving into partitions does); a stream without a
/// call then keeps where its packets are.
#[test]
fn a_version_3_database_gets_the_streams_archive_columns() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let columns = "SELECT count(*) FROM information_schema.columns WHERE table_name = 'cdr_rtp' \
                   AND column_name IN ('rtp_tar', 'rtp_member', 'rtp_offset', 'rtp_len', \
                   'rtp_compression')";
    for layout in common::LAYOUTS {
        for (name, first) in [
            ("version3", &migrate::MIGRATIONS[..3]),
            ("version1", &migrate::MIGRATIONS[..1]),
        ] {
            let conninfo = server.database(&format!("{name}_{layout:?}").to_lowercase());
            let mut pg = client(&conninfo);
            migrate::apply(&mut pg, name, layout, first).unwrap();
            assert_eq!(count(&mut pg, columns), 0, "{name} {layout:?}");
            if name == "version1" {
                let v4 = [migrate::MIGRATIONS[0], migrate::MIGRATIONS[3]];
                assert_eq!(
                    migrate::apply(&mut pg, name, layout, &v4).unwrap().versions,
                    [4]
                );
                assert_eq!(count(&mut pg, columns), 5, "{name} {layout:?}");
            }
            let mut st = PgStore::connect(&conninfo).unwrap();
            assert_eq!(st.layout(), layout);
            assert_eq!(versions(&mut pg), all_versions(), "{name} {layout:?}");
            assert_eq!(count(&mut pg, columns), 5, "{name} {layout:?}");
            let mut lone = CdrRecord::lone_stream(CdrStream {
                src: "10.1.0.5:4000".into(),
                dst: "192.168.10.5:4000".into(),
                ssrc: 7,
                start_us: 1_795_000_000_000_000,
                rtp_tar: Some("/archive/2026-11-18/20/13/rtp.tar".into()),
                rtp_member: Some("rtp.pcap".into()),
                rtp_offset: Some(1536),
                rtp_len: Some(4096),
                rtp_compression: Some("none".into()),
                ..CdrStream::default()
            });
            lone.uid = lone.identity("site-a");
            st.insert_records(std::slice::from_ref(&lone)).unwrap();
            let found = st.lone_stream_by_uid(&format!("{}/0", lone.uid)).unwrap();
            assert_eq!(found.unwrap().stream, lone.streams[0], "{name} {layout:?}");
        }
    }
}

#[test]
fn a_failing_migration_changes_nothing_and_is_named() {
    let Some(server) = PgServer::start() else {
        return;
    };
    const BROKEN: Migration = Migration {
        version: NEXT,
        name: "broken on purpose",
        apply: |tx, cx| {
            tx.batch_execute(
                "ALTER TABLE cdr ADD COLUMN half_done TEXT; CREATE TABLE half_made (x int); \
                 SELECT 1 / 0",
            )
            .map_err(|source| CdrError::Postgres {
                target: cx.target.to_string(),
                source,
            })
        },
    };
    let conninfo = server.database("broken");
    let mut c = client(&conninfo);
    let e = migrate::apply(
        &mut c,
        "the test database",
        PgLayout::Plain,
        &with(&[BROKEN]),
    )
    .unwrap_err();
    let CdrError::Migration { version, name, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!((*version, name.as_str()), (NEXT, "broken on purpose"));
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "schema migration {NEXT} (broken on purpose) failed and was rolled back"
        )) && text.contains("the test database"),
        "{text}"
    );
    // The cause is in the chain: PostgreSQL's own words.
    let mut chain = Vec::new();
    let mut source: Option<&dyn std::error::Error> = Some(&e);
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    assert!(
        chain.iter().any(|s| s.contains("division by zero")),
        "{chain:?}"
    );
    // The release's went in before it; nothing of the broken one did.
    let mut pg = client(&conninfo);
    assert_eq!(versions(&mut pg).len(), migrate::MIGRATIONS.len());
    assert!(!exists(&mut pg, "half_made"));
    assert_eq!(
        count(
            &mut pg,
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'half_done'"
        ),
        0
    );
    // The store still connects and works (the broken migration is not in its list).
    let mut st = PgStore::connect(&conninfo).unwrap();
    st.insert_records(&[call("a", 1, 1_000, 1)]).unwrap();
    // A schema that a newer release migrated is refused, naming the version.
    pg.batch_execute(
        "INSERT INTO schema_migrations (version, name) VALUES (99, 'from the future')",
    )
    .unwrap();
    let Err(e) = PgStore::connect(&conninfo) else {
        panic!("a schema of a newer release was accepted")
    };
    let msg = e.to_string();
    let known = format!("up to {}", NEXT - 1);
    for part in [
        "at migration 99",
        &known,
        "Run the newer Tandem",
        "Rolling back",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    let CdrError::Schema { target, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(
        msg.starts_with(&format!("CDR database {target}: ")),
        "{msg}"
    );
}

#[test]
fn a_plain_database_moves_into_partitions_only_when_told() {
    let Some(server) = PgServer::start() else {
        return;
    };
    // Empty plain tables (the console connected first): converted, nothing to move.
    let conninfo = server.database("empty_plain");
    drop(PgStore::connect(&conninfo).unwrap());
    let st = PgStore::connect_with(&conninfo, &PgOptions::partitioned()).unwrap();
    assert_eq!(st.layout(), PgLayout::Partitioned);
    drop(st);
    assert_eq!(
        PgStore::connect(&conninfo).unwrap().layout(),
        PgLayout::Partitioned
    );

    // Plain tables with rows: refused, untouched, until moved.
    let conninfo = server.database("full_plain");
    let mut st = PgStore::connect(&conninfo).unwrap();
    let t0 = 1_795_000_000_000_000;
    let mut records: Vec<CdrRecord> = (0..30)
        .map(|i| call("site-e", i, t0 + i as i64 * DAY_US / 10, 2))
        .collect();
    records[0].t38.push(CdrT38 {
        src: "10.1.0.5:4000".into(),
        start_us: t0 + 1,
        types: "cng,v21".into(),
        ..CdrT38::default()
    });
    records.push(registration(1, t0 + 5));
    let mut lone = CdrRecord::lone_stream(records[2].streams[0].clone());
    lone.streams[0].rtp_tar = Some("/archive/2026-11-18/20/13/rtp.tar".into());
    lone.streams[0].rtp_offset = Some(1536);
    lone.uid = lone.identity("site-e");
    records.push(lone.clone());
    st.insert_records(&records).unwrap();
    // A call stored without a uid (by `insert`), found by its number.
    let bare = CdrCall {
        call_id: "bare@partitions.test".into(),
        caller: "4711".into(),
        start_us: t0 + 2 * DAY_US,
        state: "ended".into(),
        ..CdrCall::default()
    };
    st.insert(std::slice::from_ref(&bare), &[]).unwrap();
    let q = CallQuery {
        limit: 500,
        ..CallQuery::default()
    };
    let before = st.search(&q).unwrap();
    drop(st);
    let Err(e) = PgStore::connect_with(&conninfo, &PgOptions::partitioned()) else {
        panic!("plain tables with rows were partitioned on connect")
    };
    let text = e.to_string();
    assert!(
        text.contains("partition_existing") && text.contains("hold rows"),
        "{text}"
    );
    let mut pg = client(&conninfo);
    assert_eq!(count(&mut pg, "SELECT count(*) FROM cdr"), 31, "untouched");
    let moved = migrate::partition_existing(&conninfo).unwrap();
    assert_eq!(
        (moved.calls, moved.streams, moved.t38, moved.registrations),
        (31, 61, 1, 1)
    );
    assert_eq!(moved.days, 4);
    assert!(migrate::partition_existing(&conninfo).unwrap().already);
    let mut st = PgStore::connect(&conninfo).unwrap();
    assert_eq!(st.layout(), PgLayout::Partitioned);
    // The same calls, ids and handles; streams found through their call.
    let after = st.search(&q).unwrap();
    assert_eq!(after, before);
    let (_, streams, t38) = st.call_by_uid(&records[0].uid).unwrap().unwrap();
    assert_eq!((streams.len(), t38.len()), (2, 1));
    let bare_uid = &after
        .calls
        .iter()
        .find(|c| c.call.call_id == "bare@partitions.test")
        .unwrap()
        .uid;
    assert!(bare_uid.starts_with('#'));
    assert!(st.call_by_uid(bare_uid).unwrap().is_some());
    // A stream without a call keeps where its packets are.
    let moved_lone = st.lone_stream_by_uid(&format!("{}/0", lone.uid)).unwrap();
    assert_eq!(moved_lone.unwrap().stream, lone.streams[0]);
    assert_eq!(
        st.t38(&records[0].call.as_ref().unwrap().call_id)
            .unwrap()
            .len(),
        1
    );
    // Ids go on past the moved ones.
    let max_before = after.calls.iter().map(|c| c.id).max().unwrap();
    st.insert_records(&[call("site-e", 999, t0, 1)]).unwrap();
    let id: i64 = pg
        .query_one(
            "SELECT id FROM cdr WHERE call_id = 'call-999@partitions.test'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(id > max_before);
    // Stored again after the move: still once.
    st.insert_records(&records).unwrap();
    assert_eq!(stored(&mut pg), [32, 31, 62, 62, 1]);
}
