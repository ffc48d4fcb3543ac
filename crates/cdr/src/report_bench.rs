//! What `tandem bench report` measures: a 30-day report per group drawn from the rollups,
//! against the same figures computed by a `GROUP BY` over the `cdr` table in the same run.
//!
//! The calls are [`crate::seed`]'s, bulk-loaded with their rollups computed by the store's own
//! code ([`crate::seed::bulk_load_sqlite_grouped`]) for [`bench_groups`]. For each group the
//! report (`period=day` over the seeded days) is read `reads` times through
//! [`crate::CdrStore::report`]; the `GROUP BY` computes, per day, the figures a plain SQL
//! aggregate can (calls, answered, ended by the user, talk time, calls with MOS and under 3.6
//! and 3.1, calls that rang) — not the percentiles, the one-way calls or the peak, which cost
//! it more — and its results are checked equal to the report's. So the ratio understates what
//! the rollups save.

use std::path::Path;
use std::time::Instant;

use crate::report::{PeriodKind, ReportQuery};
use crate::{CdrError, CdrStore, SqliteStore};

/// The groups the benchmark reports on (the seed's carriers and sites), besides `all`.
pub fn bench_groups() -> groups::Groups {
    let g = |name: &str, addresses: &[&str], numbers: &[&str]| groups::GroupConfig {
        name: name.into(),
        addresses: addresses.iter().map(|s| s.to_string()).collect(),
        numbers: numbers.iter().map(|s| s.to_string()).collect(),
    };
    groups::Groups::new(&[
        g("carrier-a", &["203.0.113.10/31"], &[]),
        g("carrier-b", &["198.51.100.20", "2001:db8:ffff::/48"], &[]),
        g("berlin", &["192.168.10.0/24"], &["+4930123456"]),
        g("amsterdam", &["2001:db8:4::/48"], &["+3120555010"]),
    ])
    .expect("fixed groups are valid")
}

/// One group's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupTiming {
    pub group: String,
    /// Calls in the report's range.
    pub calls: u64,
    /// Drawing the report from the rollups: median and slowest of the reads, ms.
    pub report_ms_median: f64,
    pub report_ms_max: f64,
    /// The `GROUP BY` over the calls, ms (one run).
    pub group_by_ms: f64,
    /// `group_by_ms / report_ms_median`.
    pub ratio: f64,
}

/// Times each group's report against its `GROUP BY` on an SQLite file already seeded with
/// its rollups, over `[from_us, to_us)`; checks that both give the same figures.
pub fn sqlite(
    path: &Path,
    from_us: i64,
    to_us: i64,
    reads: usize,
) -> Result<Vec<GroupTiming>, CdrError> {
    let mut store = SqliteStore::open(path)?;
    let groups = bench_groups();
    let mut out = Vec::new();
    let names: Vec<String> = std::iter::once(groups::ALL.to_string())
        .chain(groups.groups().iter().map(|g| g.name.clone()))
        .collect();
    for name in names {
        let q = ReportQuery {
            group: name.clone(),
            period: PeriodKind::Day,
            from_us,
            to_us,
        };
        let mut times = Vec::with_capacity(reads.max(1));
        let mut report = None;
        for _ in 0..reads.max(1) {
            let t = Instant::now();
            report = Some(store.report(&q)?);
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let report = report.expect("read at least once");
        times.sort_by(f64::total_cmp);
        let (from, to) = q.range()?;
        let t = Instant::now();
        let rows = group_by(&mut store, &groups, &name, from, to)?;
        let group_by_ms = t.elapsed().as_secs_f64() * 1e3;
        for (day, counts) in rows {
            let row = report
                .rows
                .iter()
                .find(|r| r.start_us == day)
                .ok_or_else(|| CdrError::Data {
                    problem: format!("{name}: the GROUP BY has day {day}, the report not"),
                })?;
            let mine = [
                row.calls as i64,
                row.answered as i64,
                row.mos_calls as i64,
                row.pdd_calls as i64,
            ];
            if mine != [counts[0], counts[1], counts[2], counts[3]] {
                return Err(CdrError::Data {
                    problem: format!(
                        "{name} {}: the report says {mine:?}, the GROUP BY {counts:?}",
                        row.label
                    ),
                });
            }
        }
        let median = times[times.len() / 2];
        out.push(GroupTiming {
            group: name,
            calls: report.total.calls,
            report_ms_median: median,
            report_ms_max: times[times.len() - 1],
            group_by_ms,
            ratio: group_by_ms / median,
        });
    }
    Ok(out)
}

/// Per day of `[from, to)`: calls, answered, with MOS, that rang; ended by the user, talk
/// time and calls, MOS under 3.6 and 3.1 (computed, not compared).
fn group_by(
    store: &mut SqliteStore,
    groups: &groups::Groups,
    name: &str,
    from: i64,
    to: i64,
) -> Result<Vec<(i64, [i64; 9])>, CdrError> {
    let (filter, args) = group_filter(groups, name);
    let sql = format!(
        "SELECT start_us / 86400000000 * 86400000000 AS day, COUNT(*), \
           SUM(answer_us IS NOT NULL), SUM(mos_min IS NOT NULL), \
           SUM(ringing_us IS NOT NULL AND ringing_us >= start_us), \
           SUM(answer_us IS NULL AND (last_response IN (486, 487, 600, 603) \
               OR state = 'cancelled' OR (ringing_us IS NOT NULL AND last_response IN (480, 408)))), \
           SUM(CASE WHEN answer_us IS NOT NULL AND end_us IS NOT NULL \
               THEN (end_us - answer_us) / 1000 ELSE 0 END), \
           SUM(answer_us IS NOT NULL AND end_us IS NOT NULL), \
           SUM(mos_min < 3.6), SUM(mos_min < 3.1) \
         FROM cdr WHERE start_us >= ?1 AND start_us < ?2 AND {filter} GROUP BY day ORDER BY day"
    );
    let conn = store.conn();
    let r = (|| {
        let mut st = conn.prepare(&sql)?;
        let mut params: Vec<rusqlite::types::Value> = vec![from.into(), to.into()];
        params.extend(args);
        let rows = st.query_map(rusqlite::params_from_iter(params), |r| {
            let mut c = [0i64; 9];
            for (i, v) in c.iter_mut().enumerate() {
                *v = r.get::<_, Option<i64>>(i + 1)?.unwrap_or(0);
            }
            Ok((r.get(0)?, c))
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })();
    r.map_err(|source| CdrError::Sqlite {
        path: "report bench".into(),
        source,
    })
}

/// The SQL that picks a group's calls from the search columns (the IP ranges and number
/// prefixes), its values as parameters `?3...`.
fn group_filter(groups: &groups::Groups, name: &str) -> (String, Vec<rusqlite::types::Value>) {
    let Some(g) = groups.get(name) else {
        return ("1=1".into(), Vec::new());
    };
    let mut parts = Vec::new();
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    for net in &g.addresses {
        let (lo, hi) = net.range();
        args.push(lo.to_vec().into());
        args.push(hi.to_vec().into());
        let (a, b) = (args.len() + 1, args.len() + 2);
        parts.push(format!(
            "caller_ip BETWEEN ?{a} AND ?{b} OR callee_ip BETWEEN ?{a} AND ?{b}"
        ));
    }
    for p in &g.numbers {
        args.push(p.clone().into());
        args.push((p.len() as i64).into());
        let (a, n) = (args.len() + 1, args.len() + 2);
        parts.push(format!(
            "substr(caller, 1, ?{n}) = ?{a} OR substr(called, 1, ?{n}) = ?{a}"
        ));
    }
    (format!("({})", parts.join(" OR ")), args)
}
