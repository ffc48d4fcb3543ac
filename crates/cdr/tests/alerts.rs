//! Alerts and silences in the CDR database ([`cdr::alerts`]) and the replay of stored records
//! ([`cdr::replay`]), on a SQLite file and on a throwaway PostgreSQL server in both layouts.

mod common;

use common::{PgServer, set_read_only};

use cdr::alerts::{ALERTS_PAGE_DEFAULT, ALERTS_PAGE_MAX};
use cdr::replay::{self, REPLAY_BATCH_ROWS};
use cdr::{
    AlertQuery, AlertRow, AlertStore, CdrError, CdrRecord, CdrStore, Day, PgLayout, PgStore,
    SilenceRow, SqliteStore, migrate,
};

/// A firing alert of `rule` for `key` since `since_us`.
fn firing(rule: &str, key: &str, since_us: i64) -> AlertRow {
    AlertRow {
        fingerprint: format!("{rule}|{key}"),
        rule: rule.into(),
        rule_kind: "sip.response".into(),
        severity: "warning".into(),
        group_by: "destination_ip".into(),
        key: key.into(),
        state: "firing".into(),
        since_us,
        at_us: since_us,
        notified_us: since_us,
        figures_json: r#"{"value":34.0,"threshold":30.0,"unit":"%"}"#.into(),
        calls: vec![format!("site-a|{since_us}@pbx|{since_us}")],
        summary: format!("{rule}: {key} answered 503 to 34 % of calls"),
        node: "site-a".into(),
        ..AlertRow::default()
    }
}

fn page(st: &mut dyn AlertStore, q: &AlertQuery) -> Vec<i64> {
    st.list_alerts(q).unwrap().iter().map(|a| a.id).collect()
}

/// An episode's life: fired, acknowledged, fired again, resolved, a late write, a new episode.
fn one_episode_keeps_one_row_and_its_ack(st: &mut dyn AlertStore) {
    let first = firing("trunk-503", "192.0.2.10", 1_000_000);
    let id = st.record_alert(&first).unwrap();
    assert!(id > 0);
    assert_eq!(st.firing_count().unwrap(), 1);
    assert!(st.ack_alert(id, "alice", 1_500_000).unwrap());
    assert!(
        !st.ack_alert(id, "bob", 1_600_000).unwrap(),
        "the first ack stays"
    );
    assert!(
        !st.ack_alert(id + 1_000, "bob", 1_600_000).unwrap(),
        "no such alert"
    );
    // A repeat: more calls, new figures, notified again; the engine knows nothing of the ack.
    let repeat = AlertRow {
        notified_us: 2_000_000,
        figures_json: r#"{"value":40.0}"#.into(),
        calls: vec!["a".into(), "b".into()],
        ..first.clone()
    };
    assert_eq!(st.record_alert(&repeat).unwrap(), id);
    let resolved = AlertRow {
        state: "resolved".into(),
        at_us: 3_000_000,
        resolved_us: Some(3_000_000),
        notified_us: 3_000_000,
        summary: "resolved".into(),
        ..repeat.clone()
    };
    assert_eq!(st.record_alert(&resolved).unwrap(), id);
    // A writer late with the earlier transition changes nothing.
    assert_eq!(st.record_alert(&repeat).unwrap(), id);
    let stored = st.alert(id).unwrap().unwrap();
    assert_eq!(
        stored,
        AlertRow {
            id,
            acked_by: Some("alice".into()),
            acked_us: Some(1_500_000),
            ..resolved.clone()
        }
    );
    assert_eq!(st.firing_count().unwrap(), 0);
    // The same rule and key firing later is a new episode, a new row.
    let again = st
        .record_alert(&firing("trunk-503", "192.0.2.10", 9_000_000))
        .unwrap();
    assert_ne!(again, id);
    assert_eq!(st.firing_count().unwrap(), 1);
    assert_eq!(st.alert(again).unwrap().unwrap().acked_by, None);
    assert_eq!(st.alert(-5).unwrap(), None);
}

/// Filters, and pages by keyset that add up to the whole list.
fn lists_filter_and_page(st: &mut dyn AlertStore) {
    // Rows with equal `since_us` too, so that the keyset's id decides.
    let hostile = "'; DROP TABLE alert; --";
    for i in 0..12i64 {
        let rule = if i % 3 == 0 { "scanner" } else { "toll-fraud" };
        let key = if i == 7 {
            hostile.to_string()
        } else {
            format!("10.1.0.{i}")
        };
        let mut a = firing(rule, &key, 20_000_000 + (i / 2) * 1_000_000);
        if i % 4 == 0 {
            a.state = "resolved".into();
            a.resolved_us = Some(a.since_us + 1);
            a.at_us = a.since_us + 1;
        }
        st.record_alert(&a).unwrap();
    }
    let all = st
        .list_alerts(&AlertQuery {
            from_us: Some(20_000_000),
            ..AlertQuery::default()
        })
        .unwrap();
    assert_eq!(all.len(), 12);
    let keys: Vec<(i64, i64)> = all.iter().map(|a| (a.since_us, a.id)).collect();
    let mut sorted = keys.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(keys, sorted, "newest first by since_us, then id");
    // Pages of 5 by keyset make up the list.
    let mut paged: Vec<i64> = Vec::new();
    let mut after = None;
    loop {
        let p = page(
            st,
            &AlertQuery {
                from_us: Some(20_000_000),
                after_id: after,
                limit: 5,
                ..AlertQuery::default()
            },
        );
        assert!(p.len() <= 5);
        after = p.last().copied();
        paged.extend(&p);
        if p.len() < 5 {
            break;
        }
    }
    assert_eq!(paged, all.iter().map(|a| a.id).collect::<Vec<_>>());
    let want = |f: &dyn Fn(&AlertRow) -> bool| -> Vec<i64> {
        all.iter().filter(|a| f(a)).map(|a| a.id).collect()
    };
    let q = AlertQuery {
        from_us: Some(20_000_000),
        state: Some("firing".into()),
        ..AlertQuery::default()
    };
    assert_eq!(page(st, &q), want(&|a| a.state == "firing"));
    let q = AlertQuery {
        rule: Some("scanner".into()),
        ..AlertQuery::default()
    };
    assert_eq!(page(st, &q), want(&|a| a.rule == "scanner"));
    let q = AlertQuery {
        key: Some(hostile.into()),
        ..AlertQuery::default()
    };
    assert_eq!(page(st, &q), want(&|a| a.key == hostile));
    let q = AlertQuery {
        from_us: Some(22_000_000),
        to_us: Some(24_000_000),
        ..AlertQuery::default()
    };
    assert_eq!(
        page(st, &q),
        want(&|a| (22_000_000..24_000_000).contains(&a.since_us))
    );
    // A cursor whose row is gone (retention) pages on below its id.
    let q = AlertQuery {
        from_us: Some(20_000_000),
        after_id: Some(i64::MAX),
        ..AlertQuery::default()
    };
    assert_eq!(page(st, &q).len(), 12);
}

/// Silences: active at a time, all newest first, ended early, refused when malformed.
fn silences_start_and_end(st: &mut dyn AlertStore) {
    let s = |rule: &str, key: &str, starts_us, ends_us| SilenceRow {
        rule: rule.into(),
        key: key.into(),
        starts_us,
        ends_us,
        created_by: "alice".into(),
        comment: "maintenance on 'trunk' \"B\"".into(),
        created_us: 50,
        ..SilenceRow::default()
    };
    let a = st.add_silence(&s("*", "10.1.*", 100, 200)).unwrap();
    let b = st.add_silence(&s("trunk-503", "*", 150, 300)).unwrap();
    let c = st
        .add_silence(&s("scanner", "203.0.113.9", 400, 500))
        .unwrap();
    let ids = |v: Vec<SilenceRow>| v.iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(st.silences(None).unwrap()), [c, b, a]);
    assert_eq!(ids(st.silences(Some(160)).unwrap()), [b, a]);
    assert_eq!(
        ids(st.silences(Some(200)).unwrap()),
        [b],
        "ends_us excluded"
    );
    let stored = st.silences(Some(450)).unwrap();
    assert_eq!(
        stored,
        [SilenceRow {
            id: c,
            ..s("scanner", "203.0.113.9", 400, 500)
        }]
    );
    assert!(stored[0].mutes("scanner", "203.0.113.9", 450));
    assert!(st.end_silence(a, 120).unwrap());
    assert!(!st.end_silence(a, 130).unwrap(), "ended already");
    assert!(!st.end_silence(c + 1_000, 130).unwrap(), "no such silence");
    assert_eq!(ids(st.silences(Some(160)).unwrap()), [b]);
    assert_eq!(
        st.silences(None)
            .unwrap()
            .iter()
            .find(|x| x.id == a)
            .unwrap()
            .ends_us,
        120
    );
    let e = st.add_silence(&s("*", "*", 300, 300)).unwrap_err();
    assert!(matches!(e, CdrError::Invalid { .. }), "{e:?}");
    let e = st.add_silence(&s("", "*", 1, 2)).unwrap_err();
    assert!(matches!(e, CdrError::Invalid { .. }), "{e:?}");
}

fn exercise(st: &mut dyn AlertStore) {
    one_episode_keeps_one_row_and_its_ack(st);
    lists_filter_and_page(st);
    silences_start_and_end(st);
}

/// A database without the alert tables reads as holding none.
fn reads_empty(st: &mut dyn AlertStore) {
    assert_eq!(st.list_alerts(&AlertQuery::default()).unwrap(), []);
    assert_eq!(st.alert(1).unwrap(), None);
    assert_eq!(st.firing_count().unwrap(), 0);
    assert_eq!(st.silences(None).unwrap(), []);
    assert_eq!(st.silences(Some(1)).unwrap(), []);
}

/// Calls (two streams each, one stored without a uid) and registrations interleaved in time,
/// some outside the range read; the replay yields those inside, in start order, as stored.
fn replays_calls_and_registrations_in_order(
    st: &mut (impl CdrStore + replay::ReplaySource),
) -> usize {
    let base = 1_795_000_000_000_000i64; // 2026-11-18
    let mut records = Vec::new();
    for i in 0..40i64 {
        let start_us = base + i * 1_000_000;
        if i % 3 == 0 {
            let mut r = common::registration(i as u64, start_us);
            r.registration.as_mut().unwrap().sensor = "site-b".into();
            r.uid = r.identity("site-b");
            records.push(r);
        }
        let mut r = common::call("site-a", i as u64, start_us, 2);
        if i == 5 {
            r.uid.clear();
        }
        records.push(r);
    }
    st.insert_records(&records).unwrap();
    let (from, to) = (base + 3_000_000, base + 37_000_000);
    let mut want: Vec<CdrRecord> = records
        .iter()
        .filter(|r| {
            let t = r
                .call
                .as_ref()
                .map_or_else(|| r.registration.as_ref().unwrap().first_us, |c| c.start_us);
            (from..to).contains(&t)
        })
        .cloned()
        .collect();
    // Calls before registrations of the same time.
    want.sort_by_key(|r| {
        r.call.as_ref().map_or_else(
            || (r.registration.as_ref().unwrap().first_us, 1),
            |c| (c.start_us, 0),
        )
    });
    assert_eq!(want.len(), 34 + 12);
    let got: Vec<CdrRecord> = replay::records_between_batched(st, from, to, 7)
        .collect::<Result<_, _>>()
        .unwrap();
    let uncalled = got
        .iter()
        .position(|r| r.uid.starts_with('#'))
        .expect("the call stored without a uid");
    let mut got_named = got.clone();
    got_named[uncalled].uid.clear();
    assert_eq!(
        got_named, want,
        "in order, with streams, uids and sensors as stored"
    );
    let one_batch: Vec<CdrRecord> = replay::records_between(st, from, to)
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(want.len() < REPLAY_BATCH_ROWS);
    assert_eq!(one_batch, got);
    // Through the store as the binary holds it.
    let dyn_store: &mut dyn CdrStore = st;
    let src = dyn_store.replay_source().unwrap();
    assert_eq!(replay::records_between(src, to, to).count(), 0);
    let first: Vec<_> = replay::records_between_batched(src, from, from + 1, 1)
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        first,
        want[..2],
        "a call, then a registration of the same time"
    );
    records
        .iter()
        .filter(|r| r.call.is_some() || r.registration.is_some())
        .count()
}

#[test]
fn sqlite_keeps_alerts_and_silences() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = SqliteStore::open(&dir.path().join("cdr.sqlite3")).unwrap();
    exercise(&mut st);
    // Through the store as the console holds it; a limit is capped, 0 is the default.
    let dyn_store: &mut dyn CdrStore = &mut st;
    let alerts = dyn_store.alert_store().unwrap();
    for i in 0..ALERTS_PAGE_MAX as i64 {
        alerts
            .record_alert(&firing("many", &i.to_string(), i))
            .unwrap();
    }
    let q = |limit| AlertQuery {
        limit,
        ..AlertQuery::default()
    };
    assert_eq!(
        alerts.list_alerts(&q(100_000)).unwrap().len(),
        ALERTS_PAGE_MAX
    );
    assert_eq!(
        alerts.list_alerts(&q(0)).unwrap().len(),
        ALERTS_PAGE_DEFAULT
    );
}

#[test]
fn sqlite_replays_stored_records_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut st = SqliteStore::open(&dir.path().join("cdr.sqlite3")).unwrap();
    assert_eq!(replays_calls_and_registrations_in_order(&mut st), 54);
}

#[test]
fn an_older_sqlite_database_reads_no_alerts_until_a_writer_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    drop(SqliteStore::open(&path).unwrap());
    // As an earlier release left it: no alert tables, no index of registrations by start, no
    // format version.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE alert; DROP TABLE alert_silence; DROP INDEX registration_first; \
             PRAGMA application_id = 0; PRAGMA user_version = 0;",
        )
        .unwrap();
    if set_read_only(&path, true) {
        // A reader that may not write it (the console of a newer release beside an older
        // capture) opens it and finds no alerts.
        let mut st = SqliteStore::open(&path);
        set_read_only(&path, false);
        reads_empty(st.as_mut().unwrap());
        assert_eq!(
            replay::records_between(st.as_mut().unwrap(), 0, i64::MAX).count(),
            0
        );
    } else {
        test_env::skip(&format!("cannot make {} read-only here", path.display()));
    }
    let mut st = SqliteStore::open(&path).unwrap();
    reads_empty(&mut st);
    exercise(&mut st);
}

/// Every PostgreSQL check on one throwaway server: both layouts, the migration on an earlier
/// release's database, a database without the tables, and the collector's retention.
#[test]
fn postgres_keeps_alerts_in_both_layouts() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let tables = "SELECT count(*) FROM pg_tables WHERE tablename IN ('alert', 'alert_silence')";
    for layout in common::LAYOUTS {
        let conninfo = server.layout_database("alerts", layout);
        let mut st = PgStore::connect(&conninfo).unwrap();
        exercise(&mut st);
        let replayed = replays_calls_and_registrations_in_order(&mut st);

        // As the release before alerts left it (version 4), with its calls and registrations.
        let mut pg = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
        pg.batch_execute(
            "DROP TABLE alert, alert_silence; DROP INDEX registration_first; \
             DELETE FROM schema_migrations WHERE version = 5",
        )
        .unwrap();
        // A reader connected meanwhile finds no tables, and reads no alerts.
        reads_empty(&mut st);
        let applied = migrate::apply(&mut pg, "v4", layout, migrate::MIGRATIONS).unwrap();
        assert_eq!((applied.versions, applied.layout), (vec![5], layout));
        assert_eq!(count(&mut pg, tables), 2);
        let first = "SELECT count(*) FROM pg_indexes WHERE indexname = 'registration_first' \
                     AND tablename = 'registration'";
        assert_eq!(count(&mut pg, first), 1, "{layout:?}");
        let again = migrate::apply(&mut pg, "v4", layout, migrate::MIGRATIONS).unwrap();
        assert_eq!(again.versions, Vec::<i64>::new());
        let mut st = PgStore::connect(&conninfo).unwrap();
        assert_eq!(st.layout(), layout);
        reads_empty(&mut st);
        exercise(&mut st);
        let after: Vec<CdrRecord> = replay::records_between(&mut st, 0, i64::MAX)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(after.len(), replayed, "{layout:?}");
    }
    // Retention: alerts resolved and silences ended before the cut go with the days; firing
    // alerts, later ones and running silences stay.
    let conninfo = server.layout_database("retention", PgLayout::Partitioned);
    let mut st = PgStore::connect(&conninfo).unwrap();
    let cut = Day::from_ymd(2026, 11, 10);
    let day_us = cut.start_us().unwrap();
    let old_resolved = AlertRow {
        state: "resolved".into(),
        resolved_us: Some(day_us - 1),
        at_us: day_us - 1,
        ..firing("r", "old", day_us - 10)
    };
    let new_resolved = AlertRow {
        resolved_us: Some(day_us + 1),
        at_us: day_us + 1,
        ..firing("r", "new", day_us - 10)
    };
    let old_resolved_id = st.record_alert(&old_resolved).unwrap();
    let new_resolved = st
        .record_alert(&AlertRow {
            state: "resolved".into(),
            ..new_resolved
        })
        .unwrap();
    let still_firing = st
        .record_alert(&firing("r", "firing", day_us - 10))
        .unwrap();
    let silence = |ends_us| SilenceRow {
        rule: "*".into(),
        key: "*".into(),
        starts_us: 0,
        ends_us,
        ..SilenceRow::default()
    };
    let ended = st.add_silence(&silence(day_us - 1)).unwrap();
    let running = st.add_silence(&silence(day_us + 1)).unwrap();
    st.drop_days_before(cut).unwrap();
    assert_eq!(st.alert(old_resolved_id).unwrap(), None);
    assert!(st.alert(new_resolved).unwrap().is_some());
    assert!(st.alert(still_firing).unwrap().is_some());
    let left: Vec<i64> = st.silences(None).unwrap().iter().map(|s| s.id).collect();
    assert_eq!(left, [running]);
    assert_ne!(ended, running);
}

fn count(pg: &mut postgres::Client, sql: &str) -> i64 {
    pg.query_one(sql, &[]).unwrap().get(0)
}
