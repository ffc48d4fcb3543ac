//! Reports against the calls: every figure of every row of a report (per group, per hour, day
//! and ISO week) equals the same figure computed by SQL straight over the `cdr` and `cdr_rtp`
//! rows of the same period, on SQLite and on PostgreSQL in both layouts, after batches stored
//! again (a journal replayed), records stored again with other figures (the upsert), a record
//! twice in one batch, and the store closed and opened again between batches.
//!
//! Counts and ratios are equal exactly (ratios to 1e-9). Percentiles are read from sketches
//! whose stated precision is 2 % of the value (`cdr::report::SKETCH_RELATIVE_ERROR`): each is
//! checked against the exact nearest-rank percentile that SQL picks, within 2 %.

mod common;

use std::sync::Arc;

use cdr::report::{PeriodKind, ReportQuery, SKETCH_RELATIVE_ERROR};
use cdr::seed::Rng;
use cdr::{CdrCall, CdrRecord, CdrStore, CdrStream, SqliteStore};
use common::PgServer;

const DAY_US: i64 = 86_400_000_000;
/// 2026-11-21T00:00Z, a Saturday: the calls span two ISO weeks.
const FROM_US: i64 = 1_795_219_200_000_000;
const DAYS: i64 = 3;

fn groups() -> Arc<groups::Groups> {
    let configs = vec![
        groups::GroupConfig {
            name: "carrier".into(),
            addresses: vec!["198.51.100.0/24".into(), "2001:db8:c::/48".into()],
            numbers: vec![],
        },
        groups::GroupConfig {
            name: "customer".into(),
            addresses: vec![],
            numbers: vec!["+4930".into(), "77".into()],
        },
    ];
    Arc::new(groups::Groups::new(&configs).unwrap())
}

/// The SQL that picks each group's calls (from the search columns the store fills).
fn group_sql(group: &str, pg: bool) -> String {
    let blob = |b: [u8; 16]| {
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        if pg {
            format!("'\\x{hex}'::bytea")
        } else {
            format!("X'{hex}'")
        }
    };
    match group {
        "all" => "1=1".to_string(),
        "carrier" => {
            let mut parts = Vec::new();
            for net in ["198.51.100.0/24", "2001:db8:c::/48"] {
                let (lo, hi) = groups::Network::parse(net).unwrap().range();
                for col in ["caller_ip", "callee_ip"] {
                    parts.push(format!("{col} BETWEEN {} AND {}", blob(lo), blob(hi)));
                }
            }
            format!("({})", parts.join(" OR "))
        }
        "customer" => {
            let mut parts = Vec::new();
            for p in ["+4930", "77"] {
                for col in ["caller", "called"] {
                    parts.push(format!("substr({col}, 1, {}) = '{p}'", p.len()));
                }
            }
            format!("({})", parts.join(" OR "))
        }
        _ => unreachable!(),
    }
}

fn addr(rng: &mut Rng, port: u16) -> String {
    match rng.below(5) {
        0 => format!("198.51.100.{}:{port}", 1 + rng.below(200)),
        1 => format!("[2001:db8:c::{:x}]:{port}", 1 + rng.below(200)),
        2 => format!("[2001:db8:d::{:x}]:{port}", 1 + rng.below(200)),
        _ => format!("10.0.{}.{}:{port}", rng.below(4), 1 + rng.below(250)),
    }
}

/// A call with every kind of outcome the figures tell apart.
fn synthetic(rng: &mut Rng, n: u64) -> CdrRecord {
    let start = FROM_US + (rng.unit() * (DAYS * DAY_US) as f64) as i64;
    let caller_addr = addr(rng, 5060);
    let callee_addr = addr(rng, 5060);
    let number = |rng: &mut Rng| match rng.below(4) {
        0 => format!("+4930{}", rng.below(1_000_000)),
        1 => format!("77{}", rng.below(1000)),
        _ => format!("{}", 100 + rng.below(900)),
    };
    let caller = number(rng);
    let called = number(rng);
    let rang = rng.chance(0.8);
    let ringing_us = rang.then(|| start + rng.below(8_000_000) as i64 + 1);
    let answered = rng.chance(0.55);
    let answer_us = answered.then(|| ringing_us.unwrap_or(start) + rng.below(20_000_000) as i64);
    // Some calls last hours, one in a few hundred longer than the 24-hour cap, some have no end.
    let end_us = match rng.below(300) {
        0 => Some(start + 30 * 3_600_000_000),
        1..=3 => None,
        4..=20 => Some(answer_us.unwrap_or(start) + rng.below(3 * 3_600_000_000) as i64),
        _ => Some(answer_us.unwrap_or(start) + rng.below(600_000_000) as i64),
    };
    let (state, last_response) = if answered {
        ("ended".to_string(), Some(200))
    } else {
        let codes = [486u16, 487, 600, 603, 480, 408, 404, 503, 500, 403, 488];
        match rng.below(14) {
            0 => ("cancelled".to_string(), Some(487)),
            1 => ("calling".to_string(), None),
            2 => ("early".to_string(), Some(183)),
            i => (
                "failed".to_string(),
                Some(codes[(i as usize - 3) % codes.len()]),
            ),
        }
    };
    let mut streams = Vec::new();
    if answered || rng.chance(0.1) {
        let a = caller_addr.replace(":5060", ":4000");
        let b = callee_addr.replace(":5060", ":5000");
        let (pa, pb) = match rng.below(10) {
            0 => (0, 0),
            1 => (50 + rng.below(500), 0),
            2 => (50 + rng.below(500), u64::MAX),
            _ => (50 + rng.below(5000), 50 + rng.below(5000)),
        };
        let stream = |src: &str, dst: &str, packets: u64, rng: &mut Rng| CdrStream {
            call_id: None,
            src: src.to_string(),
            dst: dst.to_string(),
            ssrc: rng.below(u32::MAX as u64) as u32,
            payload: "PCMA".into(),
            start_us: start,
            end_us: start + 1,
            packets,
            lost: if rng.chance(0.6) {
                0
            } else {
                rng.below(packets / 10 + 2) as i64
            },
            max_jitter_ms: if rng.chance(0.05) {
                0.0
            } else {
                rng.range(0.001, 80.0)
            },
            mos: Some(rng.range(1.0, 4.5)),
            ..CdrStream::default()
        };
        streams.push(stream(&a, &b, pa, rng));
        if pb != u64::MAX {
            streams.push(stream(&b, &a, pb, rng));
        }
    }
    let mos_min = streams
        .iter()
        .filter_map(|s| s.mos)
        .min_by(|a, b| a.total_cmp(b))
        .filter(|_| rng.chance(0.9));
    let call = CdrCall {
        call_id: format!("r{n}@reports.test"),
        caller,
        called,
        caller_addr,
        callee_addr,
        start_us: start,
        ringing_us,
        answer_us,
        end_us,
        state,
        last_response,
        mos_min,
        sensor: "s1".into(),
        ..CdrCall::default()
    };
    let mut r = CdrRecord::call(call, streams);
    r.uid = r.identity("s1");
    r
}

/// The same call stored again with other figures (what a later version of a record brings).
fn changed(r: &CdrRecord, rng: &mut Rng) -> CdrRecord {
    let mut r = r.clone();
    let c = r.call.as_mut().unwrap();
    c.answer_us = match c.answer_us {
        Some(_) => None,
        None => Some(c.start_us + 2_000_000),
    };
    c.state = if c.answer_us.is_some() {
        "ended"
    } else {
        "failed"
    }
    .into();
    c.last_response = Some(if c.answer_us.is_some() { 200 } else { 503 });
    c.caller = "+4930999".into();
    c.end_us = Some(c.start_us + rng.below(7_200_000_000) as i64);
    c.mos_min = Some(rng.range(1.0, 4.5));
    r.streams.truncate(1);
    r
}

/// The records, and the order of batches the store is given (with replays and changes).
struct Script {
    batches: Vec<Vec<CdrRecord>>,
    /// Close and open the store before these batches.
    restart_before: Vec<usize>,
}

fn script() -> Script {
    let mut rng = Rng::new(33);
    let calls: Vec<CdrRecord> = (0..2400).map(|n| synthetic(&mut rng, n)).collect();
    let mut batches: Vec<Vec<CdrRecord>> = calls.chunks(200).map(|c| c.to_vec()).collect();
    // A journal replayed: batches stored again as they were.
    batches.push(calls[200..600].to_vec());
    // Later versions of stored calls (other outcome, number, streams, end).
    let later: Vec<CdrRecord> = calls[..300]
        .iter()
        .step_by(3)
        .map(|r| changed(r, &mut rng))
        .collect();
    batches.push(later.clone());
    // A record twice in one batch: the last one counts.
    let mut twice = vec![calls[1000].clone(), changed(&calls[1000], &mut rng)];
    twice.push(calls[1001].clone());
    batches.push(twice);
    // The same capture read twice, after the later versions: back to the first versions.
    batches.push(calls[..150].to_vec());
    Script {
        batches,
        restart_before: vec![4, 12, 14],
    }
}

/// SQL straight over the tables, one dialect or the other; every value as f64 (NULL: None).
trait Sql {
    fn pg(&self) -> bool;
    fn rows(&mut self, sql: &str) -> Vec<Vec<Option<f64>>>;
}

struct Lite(rusqlite::Connection);
impl Sql for Lite {
    fn pg(&self) -> bool {
        false
    }
    fn rows(&mut self, sql: &str) -> Vec<Vec<Option<f64>>> {
        let mut st = self.0.prepare(sql).unwrap_or_else(|e| panic!("{e}: {sql}"));
        let n = st.column_count();
        st.query_map([], |r| {
            Ok((0..n)
                .map(|i| match r.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Null => None,
                    rusqlite::types::ValueRef::Integer(v) => Some(v as f64),
                    rusqlite::types::ValueRef::Real(v) => Some(v),
                    v => panic!("{v:?}"),
                })
                .collect())
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }
}

struct Pg(postgres::Client);
impl Sql for Pg {
    fn pg(&self) -> bool {
        true
    }
    fn rows(&mut self, sql: &str) -> Vec<Vec<Option<f64>>> {
        let msgs = self
            .0
            .simple_query(sql)
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
        msgs.into_iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => Some(
                    (0..r.len())
                        .map(|i| r.get(i).map(|v| v.parse::<f64>().unwrap()))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }
}

fn one(db: &mut dyn Sql, sql: &str) -> Option<f64> {
    db.rows(sql).first().and_then(|r| r[0])
}

/// The nearest-rank percentile of `expr` over the calls `filter` picks, by SQL.
fn percentile(db: &mut dyn Sql, expr: &str, filter: &str, q: f64) -> Option<f64> {
    let n = one(db, &format!("SELECT COUNT(*) FROM cdr WHERE {filter}")).unwrap() as i64;
    if n == 0 {
        return None;
    }
    let rank = ((q * n as f64).ceil() as i64).clamp(1, n);
    one(
        db,
        &format!(
            "SELECT {expr} FROM cdr WHERE {filter} ORDER BY {expr} LIMIT 1 OFFSET {}",
            rank - 1
        ),
    )
}

fn close(what: &str, got: Option<f64>, want: Option<f64>, tolerance: impl Fn(f64) -> f64) {
    match (got, want) {
        (None, None) => {}
        (Some(g), Some(w)) => assert!(
            (g - w).abs() <= tolerance(w),
            "{what}: the report says {g}, SQL says {w}"
        ),
        _ => panic!("{what}: the report says {got:?}, SQL says {want:?}"),
    }
}

/// Every row of every report of every group against SQL over the calls.
fn check_reports(store: &mut dyn CdrStore, db: &mut dyn Sql, groups: &[&str]) {
    let pg = db.pg();
    let (least, greatest) = if pg {
        ("LEAST", "GREATEST")
    } else {
        ("MIN", "MAX")
    };
    let ip = |x: &str| {
        if pg {
            format!(
                "(CASE WHEN left({x}, 1) = '[' THEN split_part(substr({x}, 2), ']', 1) \
                 ELSE split_part({x}, ':', 1) END)"
            )
        } else {
            format!(
                "(CASE WHEN substr({x}, 1, 1) = '[' THEN substr({x}, 2, instr({x}, ']') - 2) \
                 ELSE substr({x}, 1, instr({x}, ':') - 1) END)"
            )
        }
    };
    let with_rtp = "EXISTS (SELECT 1 FROM cdr_rtp s WHERE s.cdr_id = cdr.id AND s.packets > 0)";
    let back = format!(
        "EXISTS (SELECT 1 FROM cdr_rtp s, cdr_rtp t WHERE s.cdr_id = cdr.id \
         AND t.cdr_id = cdr.id AND s.packets > 0 AND t.packets > 0 AND {} = {})",
        ip("s.src"),
        ip("t.dst")
    );
    let mut checked = 0;
    for &group in groups {
        let g = group_sql(group, pg);
        for period in [PeriodKind::Hour, PeriodKind::Day, PeriodKind::Week] {
            let q = ReportQuery {
                group: group.into(),
                period,
                from_us: FROM_US,
                to_us: FROM_US + DAYS * DAY_US,
            };
            let report = store.report(&q).unwrap();
            let mut rows = report.rows.clone();
            let mut total = report.total.clone();
            total.start_us = report.from_us;
            let total_len = report.to_us - report.from_us;
            rows.push(total);
            for row in &rows {
                let len = if row.label == "total" {
                    total_len
                } else {
                    period.len_us()
                };
                let (a, b) = (row.start_us, row.start_us + len);
                let what = format!("{group} {} {}", period.as_str(), row.label);
                let f = format!("{g} AND start_us >= {a} AND start_us < {b}");
                let count = |db: &mut dyn Sql, cond: &str| {
                    one(
                        db,
                        &format!("SELECT COUNT(*) FROM cdr WHERE {f} AND {cond}"),
                    )
                    .unwrap() as u64
                };
                assert_eq!(row.calls, count(db, "1=1"), "{what} calls");
                assert_eq!(
                    row.answered,
                    count(db, "answer_us IS NOT NULL"),
                    "{what} answered"
                );
                let user = "answer_us IS NULL AND (last_response IN (486, 487, 600, 603) \
                            OR state = 'cancelled' \
                            OR (ringing_us IS NOT NULL AND last_response IN (480, 408)))";
                let ratio = |x: u64, n: u64| (n > 0).then(|| 100.0 * x as f64 / n as f64);
                let answered = row.answered;
                let ner = ratio(answered + count(db, user), row.calls);
                close(&format!("{what} ner"), row.ner_pct, ner, |_| 1e-9);
                close(
                    &format!("{what} asr"),
                    row.asr_pct,
                    ratio(answered, row.calls),
                    |_| 1e-9,
                );
                let acd = one(
                    db,
                    &format!(
                        "SELECT SUM((end_us - answer_us) / 1000) * 1.0 / COUNT(*) / 1000.0 \
                         FROM cdr WHERE {f} AND answer_us IS NOT NULL AND end_us IS NOT NULL"
                    ),
                );
                close(&format!("{what} acd"), row.acd_s, acd, |_| 1e-9);
                let mos = count(db, "mos_min IS NOT NULL");
                assert_eq!(row.mos_calls, mos, "{what} mos_calls");
                close(
                    &format!("{what} mos<3.6"),
                    row.mos_below_3_6_pct,
                    ratio(count(db, "mos_min < 3.6"), mos),
                    |_| 1e-9,
                );
                close(
                    &format!("{what} mos<3.1"),
                    row.mos_below_3_1_pct,
                    ratio(count(db, "mos_min < 3.1"), mos),
                    |_| 1e-9,
                );
                let answered_cond = "answer_us IS NOT NULL";
                assert_eq!(
                    row.no_rtp,
                    count(db, &format!("{answered_cond} AND NOT {with_rtp}")),
                    "{what} no_rtp"
                );
                assert_eq!(
                    row.one_way,
                    count(
                        db,
                        &format!("{answered_cond} AND {with_rtp} AND NOT {back}")
                    ),
                    "{what} one_way"
                );
                // Percentiles: within the sketch's stated precision (2 %), or its floor.
                let within = |floor: f64| move |w: f64| (w * SKETCH_RELATIVE_ERROR).max(floor);
                let pdd = "(ringing_us - start_us) / 1000.0";
                let rang = format!("{f} AND ringing_us IS NOT NULL AND ringing_us >= start_us");
                assert_eq!(
                    row.pdd_calls,
                    count(db, "ringing_us IS NOT NULL AND ringing_us >= start_us")
                );
                for (q, got) in [(0.5, row.pdd_median_ms), (0.95, row.pdd_p95_ms)] {
                    let want = percentile(db, pdd, &rang, q);
                    close(&format!("{what} pdd p{q}"), got, want, within(0.11));
                }
                let rtp = format!("{f} AND loss_max_pct IS NOT NULL");
                assert_eq!(row.rtp_calls, count(db, "loss_max_pct IS NOT NULL"));
                for (q, got) in [(0.5, row.loss_median_pct), (0.95, row.loss_p95_pct)] {
                    let want = percentile(db, "loss_max_pct", &rtp, q);
                    close(&format!("{what} loss p{q}"), got, want, within(0.0011));
                }
                let jit = format!("{f} AND jitter_max_ms IS NOT NULL");
                for (q, got) in [(0.5, row.jitter_median_ms), (0.95, row.jitter_p95_ms)] {
                    let want = percentile(db, "jitter_max_ms", &jit, q);
                    close(&format!("{what} jitter p{q}"), got, want, within(0.011));
                }
                let codes = db.rows(&format!(
                    "SELECT CASE WHEN last_response >= 300 THEN last_response ELSE 0 END AS code, \
                     COUNT(*) AS n FROM cdr WHERE {f} AND answer_us IS NULL \
                     GROUP BY CASE WHEN last_response >= 300 THEN last_response ELSE 0 END \
                     ORDER BY n DESC, code LIMIT 10"
                ));
                let codes: Vec<(u16, u64)> = codes
                    .iter()
                    .map(|r| (r[0].unwrap() as u16, r[1].unwrap() as u64))
                    .collect();
                let got: Vec<(u16, u64)> = row.failures.iter().map(|c| (c.code, c.calls)).collect();
                assert_eq!(got, codes, "{what} failures");
                // The peak: calls in progress per minute of the period (INVITE's minute to
                // the end's, at most 1,440), the highest minute, the first on a tie.
                let (ma, mb) = (a / 60_000_000, b / 60_000_000);
                let peak = db.rows(&format!(
                    "WITH RECURSIVE c(f0, l0) AS (SELECT start_us / 60000000, \
                       {least}({greatest}(COALESCE(end_us, start_us), start_us) / 60000000, \
                               start_us / 60000000 + 1439) FROM cdr WHERE {g} \
                       AND start_us < {b} AND start_us >= {a} - 86400000000), \
                     m(t, l0) AS (SELECT f0, l0 FROM c UNION ALL SELECT t + 1, l0 FROM m WHERE t < l0) \
                     SELECT t, COUNT(*) AS n FROM m WHERE t >= {ma} AND t < {mb} \
                     GROUP BY t ORDER BY n DESC, t LIMIT 1"
                ));
                let (t, n) = peak
                    .first()
                    .map_or((0, 0), |r| (r[0].unwrap() as i64, r[1].unwrap() as u64));
                assert_eq!(row.peak_concurrent, n, "{what} peak");
                if n > 0 {
                    assert_eq!(
                        row.peak_minute_us,
                        Some(t * 60_000_000),
                        "{what} peak minute"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > groups.len() * (72 + 3 + 2), "{checked} rows");
}

fn run(mut open: impl FnMut() -> Box<dyn CdrStore>, db: &mut dyn Sql) {
    let s = script();
    let mut store = open();
    for (i, batch) in s.batches.iter().enumerate() {
        if s.restart_before.contains(&i) {
            drop(store);
            store = open();
        }
        store.insert_records(batch).unwrap();
    }
    check_reports(&mut *store, db, &["all", "carrier", "customer"]);
    // Groups with rollups, `all` first.
    assert_eq!(
        store.report_groups().unwrap(),
        ["all", "carrier", "customer"]
    );
}

#[test]
fn sqlite_reports_equal_sql_over_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let open = || -> Box<dyn CdrStore> {
        let mut st = SqliteStore::open(&path).unwrap();
        st.set_groups(groups());
        Box::new(st)
    };
    let mut db = Lite(rusqlite::Connection::open(&path).unwrap());
    run(open, &mut db);
}

#[test]
fn postgres_reports_equal_sql_over_the_calls() {
    let Some(server) = PgServer::start() else {
        return;
    };
    for layout in common::LAYOUTS {
        let conninfo = server.layout_database("reports", layout);
        let open = || -> Box<dyn CdrStore> {
            let mut st = cdr::PgStore::connect_with(&conninfo, &common::options(layout)).unwrap();
            st.set_groups(groups());
            Box::new(st)
        };
        let mut db = Pg(postgres::Client::connect(&conninfo, postgres::NoTls).unwrap());
        run(open, &mut db);
    }
}

#[test]
fn an_older_sqlite_file_gets_its_calls_counted_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cdr.sqlite3");
    let s = script();
    let mut st = SqliteStore::open(&path).unwrap();
    st.insert_records(&s.batches[0]).unwrap();
    drop(st);
    // What format version 1 left: no rollups.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("DROP TABLE report_hour; PRAGMA user_version = 1;")
        .unwrap();
    drop(c);
    let mut st = SqliteStore::open(&path).unwrap();
    let q = ReportQuery {
        group: "all".into(),
        period: PeriodKind::Week,
        from_us: FROM_US,
        to_us: FROM_US + DAYS * DAY_US,
    };
    assert_eq!(st.report(&q).unwrap().total.calls, 200);
    let mut db = Lite(rusqlite::Connection::open(&path).unwrap());
    check_reports(&mut st, &mut db, &["all"]);
    // Groups configured later count their calls once rebuilt, and only then.
    st.set_groups(groups());
    assert_eq!(st.report_groups().unwrap(), ["all"]);
    assert_eq!(st.rebuild_reports().unwrap(), 200);
    check_reports(&mut st, &mut db, &["all", "carrier", "customer"]);
}
