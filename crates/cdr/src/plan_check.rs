//! The search's plans on a seeded database of realistic size, with each statement's EXPLAIN
//! and the time of each typical search. Not run by `cargo test` (it seeds millions of rows):
//!
//! ```text
//! CDR_PLAN_SQLITE=/var/tmp/cdr-3m.sqlite3 CDR_PLAN_ROWS=3000000 \
//!     cargo test -p cdr --release --lib -- --ignored --nocapture plans_on_a_seeded
//! CDR_PLAN_PG='host=127.0.0.1 port=5432 user=tandem dbname=cdr' CDR_PLAN_ROWS=3000000 \
//!     cargo test -p cdr --release --lib -- --ignored --nocapture plans_on_a_seeded
//! ```
//!
//! A database that is empty is seeded first ([`crate::seed`], 30 days of calls ending at
//! 2026-11-30), and the seeding time is printed.

use std::time::Instant;

use crate::plan::{Dialect, Exec, Sql, Val, Walked};
use crate::search::{self, CallQuery};
use crate::{CdrError, CdrStore, PgStore, SqliteStore};

/// Records the statements a search runs, for EXPLAIN.
pub(crate) struct Recorder<'a> {
    pub inner: &'a mut dyn Exec,
    pub log: Vec<Sql>,
}

impl Exec for Recorder<'_> {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }
    fn partitioned(&self) -> bool {
        self.inner.partitioned()
    }
    fn rows(&mut self, sql: &Sql) -> Result<Vec<Vec<Val>>, CdrError> {
        self.log.push(sql.clone());
        self.inner.rows(sql)
    }
    fn walk(&mut self, sql: &Sql, want: usize, budget: usize) -> Result<Walked, CdrError> {
        self.log.push(sql.clone());
        self.inner.walk(sql, want, budget)
    }
    fn update_derived(&mut self, rows: &[(i64, search::Derived)]) -> Result<(), CdrError> {
        self.inner.update_derived(rows)
    }
}

pub(crate) fn explain(x: &mut dyn Exec, sql: &Sql) -> String {
    let mut e = sql.clone();
    e.text = match x.dialect() {
        Dialect::Sqlite => format!("EXPLAIN QUERY PLAN {}", sql.text),
        Dialect::Postgres => format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {}", sql.text),
    };
    match x.rows(&e) {
        Ok(rows) => rows
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .filter_map(|v| match v {
                        Val::Text(t) => Some(t),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n      "),
        Err(e) => format!("EXPLAIN failed: {e}"),
    }
}

const END_US: i64 = 1_795_996_800_000_000; // 2026-11-30T00:00:00Z
const DAY_US: i64 = 86_400_000_000;

fn queries() -> Vec<(&'static str, String)> {
    let t = |us: i64| crate::query::time_text(us);
    let last = |days: i64| format!("from={}&to={}", t(END_US - days * DAY_US), t(END_US));
    vec![
        ("newest 50", String::new()),
        (
            "last hour",
            format!("from={}&to={}", t(END_US - 3_600_000_000), t(END_US)),
        ),
        ("last 24 h", last(1)),
        ("exact caller, 30 d", format!("{}&caller=1000", last(30))),
        (
            "rare exact caller, 30 d",
            format!("{}&caller=1977", last(30)),
        ),
        (
            "dense prefix +49*, 30 d",
            format!("{}&called=%2B49*", last(30)),
        ),
        (
            "prefix +49221*, 30 d",
            format!("{}&called=%2B49221*", last(30)),
        ),
        (
            "sparse prefix +4922155*, 30 d",
            format!("{}&called=%2B4922155*", last(30)),
        ),
        (
            "DID prefix, 30 d",
            format!("{}&called=%2B4940987650*", last(30)),
        ),
        ("suffix *89, 30 d", format!("{}&called=*89", last(30))),
        ("suffix *4711, 30 d", format!("{}&called=*4711", last(30))),
        (
            "list 1000,1001,20*",
            format!("{}&caller=1000,1001,20*", last(30)),
        ),
        ("negated !1*", format!("{}&caller=!1*", last(7))),
        ("MOS < 3.1, 7 d", format!("{}&mos_below=3.1", last(7))),
        ("CIDR /24, 30 d", format!("{}&ip=10.1.3.0/24", last(30))),
        ("CIDR /28, 30 d", format!("{}&ip=10.2.0.16/28", last(30))),
        ("CIDR v6 /48", format!("{}&ip=2001:db8:4::/48", last(30))),
        ("trunk IP", format!("{}&ip=198.51.100.20", last(30))),
        ("response 4xx, 7 d", format!("{}&response=4xx", last(7))),
        ("response 488, 7 d", format!("{}&response=488", last(7))),
        ("codec PCMA", format!("{}&codec=PCMA", last(7))),
        ("codec opus", format!("{}&codec=opus", last(7))),
        (
            "sensor dc-2 + loss > 2",
            format!("{}&sensor=dc-2&loss_above_pct=2", last(30)),
        ),
        ("call id", format!("call_id={}", "{CALL_ID}")),
        ("nothing matches", format!("{}&codec=speex", last(30))),
    ]
}

fn seed_if_empty(
    st: Box<dyn CdrStore>,
    load: &dyn Fn(u64) -> Result<crate::seed::Loaded, CdrError>,
) {
    let mut st = st;
    let page = st.search(&CallQuery::default()).unwrap();
    drop(st);
    if !page.calls.is_empty() {
        return;
    }
    let n: u64 = std::env::var("CDR_PLAN_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let t0 = Instant::now();
    let loaded = load(n).unwrap();
    println!(
        "seeded {loaded:?} in {:.1} s ({:.0} calls/s)",
        t0.elapsed().as_secs_f64(),
        loaded.calls as f64 / t0.elapsed().as_secs_f64()
    );
}

fn check(x: &mut dyn Exec) {
    let some_call = search::search(&mut *x, &CallQuery::default()).unwrap();
    let call_id = some_call.calls[10].call.call_id.clone();
    for (name, raw) in queries() {
        let raw = raw.replace("{CALL_ID}", &call_id.replace('@', "%40"));
        let q = CallQuery::from_query(&raw).unwrap();
        let mut rec = Recorder {
            inner: &mut *x,
            log: Vec::new(),
        };
        let t0 = Instant::now();
        let page = search::search(&mut rec, &q).unwrap();
        let first_ms = t0.elapsed().as_secs_f64() * 1e3;
        let log = std::mem::take(&mut rec.log);
        let mut times = Vec::new();
        for _ in 0..15 {
            let t0 = Instant::now();
            search::search(&mut *x, &q).unwrap();
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let mut totals_ms = Vec::new();
        let mut totals = Default::default();
        for _ in 0..5 {
            let t0 = Instant::now();
            totals = search::totals(&mut *x, &q).unwrap();
            totals_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        totals_ms.sort_by(|a, b| a.total_cmp(b));
        let totals: search::CallTotals = totals;
        println!(
            "\n## {name}: {raw}\n   {} calls, next {:?}, scanned_to {:?}; first {first_ms:.1} ms, \
             median {:.1} ms, max {:.1} ms; totals {} calls in {:.1} ms (max {:.1}){}",
            page.calls.len(),
            page.next,
            page.scanned_to_us,
            times[times.len() / 2],
            times[times.len() - 1],
            totals.calls,
            totals_ms[2],
            totals_ms[4],
            totals.note.map(|n| format!(" ({n})")).unwrap_or_default()
        );
        if std::env::var("CDR_PLAN_EXPLAIN").is_ok() {
            for sql in log {
                println!("   SQL {}\n      {}", sql.text, explain(&mut *x, &sql));
            }
        }
    }
}

#[test]
#[ignore]
fn plans_on_a_seeded_database() {
    if let Ok(path) = std::env::var("CDR_PLAN_SQLITE") {
        let path = std::path::PathBuf::from(path);
        let st = Box::new(SqliteStore::open(&path).unwrap());
        let p = path.clone();
        seed_if_empty(st, &|n| {
            crate::seed::bulk_load_sqlite(
                &p,
                crate::seed::synthetic_calls(n, END_US - 30 * DAY_US, END_US, 1),
            )
        });
        let mut st = SqliteStore::open(&path).unwrap();
        println!("# SQLite {}", path.display());
        check(&mut st);
    }
    if let Ok(conninfo) = std::env::var("CDR_PLAN_PG") {
        let st = Box::new(PgStore::connect(&conninfo).unwrap());
        let c = conninfo.clone();
        seed_if_empty(st, &|n| {
            crate::seed::bulk_load_postgres(
                &c,
                crate::seed::synthetic_calls(n, END_US - 30 * DAY_US, END_US, 1),
            )
        });
        let mut st = PgStore::connect(&conninfo).unwrap();
        println!("# PostgreSQL");
        check(&mut st);
    }
}
