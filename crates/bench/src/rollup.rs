//! `tandem bench rollup`: what a sampling tick of the metrics history costs as the history
//! grows, against a replica of a dashboard that re-averages all it keeps every minute.
//!
//! Three histories of 1 day, 90 days and 2 years are built for `--series` series (every level
//! filled over what it retains), then rounds of `--ticks` sampling ticks are recorded on each, the
//! three taking turns round by round: rows read and written per tick and time per tick must not
//! grow with the history. In the same run, the replica
//! (FreePBX's dashboard before and after its fix kept every tier's buckets re-averaged from the
//! samples: MINUTES 60 × 1 min, HALFHR 48 × 30 min, HOUR 48 × 1 h, QTRDAY 28 × 6 h, DAY 70 × 1 d)
//! runs its minute's work over 90 days of per-minute samples, and the rows each approach touches
//! per minute are compared. Last, the time to read a dashboard's series for a 24 h and a 1 y
//! range from the 2-year history.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use history::{Bucket, History, HistoryConfig, bucket_start};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::report::{self, BenchReport, Percentiles, Table};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Series in each history (a dashboard's host, call, AGI, store and capture figures).
    #[arg(long, default_value_t = 300)]
    pub series: usize,
    /// Sampling ticks timed on each history per round.
    #[arg(long, default_value_t = 30)]
    pub ticks: usize,
    /// Rounds of ticks per history; the median round's median tick is the figure.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Series the replica runs on; its rows per series are the same for every series, so the
    /// figure for `--series` is scaled from these.
    #[arg(long, default_value_t = 10)]
    pub replica_series: usize,
    /// Series a dashboard page reads.
    #[arg(long, default_value_t = 24)]
    pub dashboard_series: usize,
    /// Dashboard reads timed per range.
    #[arg(long, default_value_t = 100)]
    pub dashboard_reads: usize,
    /// Where the histories are built (a temporary directory by default; removed afterwards).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct Length {
    days: u64,
    rows_stored: u64,
    /// Rows read and written per sampling tick of every series, the mean over the timed ticks
    /// (the open buckets, and the buckets that close on that tick; after the warm-up, which
    /// reads each series' open buckets once).
    rows_read_per_tick: f64,
    rows_written_per_tick: f64,
    /// Every timed tick of every round.
    tick_us: Percentiles,
    /// The median tick of each round, µs.
    round_p50_us: Vec<f64>,
    /// The median of those.
    tick_p50_us: f64,
}

#[derive(Serialize)]
struct RollupBench {
    series: usize,
    levels: Vec<String>,
    lengths: Vec<Length>,
    rows_per_tick_1d: f64,
    rows_per_tick_2y: f64,
    tick_us_1d: f64,
    tick_us_2y: f64,
    /// tick_us_2y / tick_us_1d (goal: at most 1.2).
    tick_ratio_2y_1d: f64,
    /// The replica's rows read and written in one minute's work, for `series` series (measured
    /// on `replica_series` and scaled).
    replica_rows_per_minute_90d: u64,
    replica_series: usize,
    replica_minute_ms_measured: f64,
    /// Tandem's rows in one minute: six 10-second ticks.
    tandem_rows_per_minute_90d: f64,
    /// replica / Tandem (goal: at least 1,000).
    rows_ratio_90d: f64,
    dashboard_series: usize,
    dashboard_p99_ms_24h: f64,
    dashboard_p99_ms_1y: f64,
    dashboard_points_24h: usize,
    dashboard_points_1y: usize,
}

impl BenchReport for RollupBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut t = Table::new([
            "history",
            "rows stored",
            "rows read/tick",
            "rows written/tick",
            "tick p50 µs",
            "tick p99 µs",
        ]);
        for l in &self.lengths {
            t.row([
                format!("{} days", l.days),
                l.rows_stored.to_string(),
                format!("{:.1}", l.rows_read_per_tick),
                format!("{:.1}", l.rows_written_per_tick),
                format!("{:.0}", l.tick_p50_us),
                format!("{:.0}", l.tick_us.p99_us),
            ]);
        }
        t.write(out)?;
        writeln!(out)?;
        let mut t = Table::new(["figure", "value"]);
        t.row(["series".to_string(), self.series.to_string()]);
        t.row(["levels".to_string(), self.levels.join(", ")]);
        t.row([
            "tick time 2 y / 1 d".to_string(),
            format!("{:.2}", self.tick_ratio_2y_1d),
        ]);
        t.row([
            "rows per minute, 90 days: replica".to_string(),
            format!(
                "{} (measured on {} series, {:.0} ms)",
                self.replica_rows_per_minute_90d,
                self.replica_series,
                self.replica_minute_ms_measured
            ),
        ]);
        t.row([
            "rows per minute, 90 days: Tandem".to_string(),
            format!("{:.0}", self.tandem_rows_per_minute_90d),
        ]);
        t.row([
            "replica / Tandem".to_string(),
            format!("{:.0}", self.rows_ratio_90d),
        ]);
        t.row([
            format!(
                "dashboard read, 24 h ({} series), p99 ms",
                self.dashboard_series
            ),
            format!(
                "{:.2} ({} points)",
                self.dashboard_p99_ms_24h, self.dashboard_points_24h
            ),
        ]);
        t.row([
            format!(
                "dashboard read, 1 y ({} series), p99 ms",
                self.dashboard_series
            ),
            format!(
                "{:.2} ({} points)",
                self.dashboard_p99_ms_1y, self.dashboard_points_1y
            ),
        ]);
        t.write(out)
    }
}

const DAY_S: i64 = 86_400;
/// Ticks recorded before the timed ones.
const WARM_TICKS: i64 = 6;
/// Where every history ends: the ticks are timed from here.
const NOW_S: i64 = 1_790_000_000;

fn series_name(i: usize) -> String {
    format!("tandem_bench_series_{i:04}")
}

/// A plausible value for series `i` at `t`: a daily wave, so buckets differ.
fn value(i: usize, t: i64) -> f64 {
    let phase = (t % DAY_S) as f64 / DAY_S as f64 * std::f64::consts::TAU;
    100.0 + i as f64 + 50.0 * phase.sin()
}

fn progress(quiet: bool, len: u64, what: &str) -> anyhow::Result<ProgressBar> {
    let bar = report::progress_bar(quiet, len, "{bar:30} {pos}/{len} {msg}")?;
    bar.set_message(what.to_string());
    Ok(bar)
}

/// Fills every level of a new history with `days` of closed buckets (each level over what it
/// retains), ending just before [`NOW_S`]. Returns the rows stored.
fn build(h: &mut History, series: usize, days: i64, quiet: bool) -> anyhow::Result<u64> {
    let names: Vec<String> = (0..series).map(series_name).collect();
    let bar = progress(quiet, 0, &format!("building {days} days"))?;
    let stored = seed(h, &names, NOW_S, days, &value, &bar)?;
    bar.finish_and_clear();
    Ok(stored)
}

/// Fills every level of `h` with `days` of closed buckets of `names` (each level over what it
/// retains), ending just before `end_s`, each bucket of series `i` at `t` holding ten-second
/// samples of `value(i, t)`. Returns the rows stored; `bar` counts them.
pub fn seed(
    h: &mut History,
    names: &[String],
    end_s: i64,
    days: i64,
    value: &dyn Fn(usize, i64) -> f64,
    bar: &ProgressBar,
) -> anyhow::Result<u64> {
    let levels = h.config().levels.clone();
    let mut plan = Vec::new();
    for (level, l) in levels.iter().enumerate() {
        let keep = l
            .retention_s
            .map_or(days * DAY_S, |r| (r as i64).min(days * DAY_S));
        let w = i64::from(l.width_s);
        let first = bucket_start(end_s - keep, l.width_s);
        let last = bucket_start(end_s, l.width_s) - w;
        plan.push((level, w, first, last));
    }
    let total: i64 =
        plan.iter().map(|(_, w, f, l)| (l - f) / w + 1).sum::<i64>() * names.len() as i64;
    bar.set_length(total as u64);
    let mut rows: Vec<(usize, &str, Bucket)> = Vec::with_capacity(100_000);
    let mut stored = 0u64;
    for &(level, w, first, last) in &plan {
        let samples_per_bucket = (w / 10).max(1) as u64;
        let mut t = first;
        while t <= last {
            for (i, n) in names.iter().enumerate() {
                let v = value(i, t);
                rows.push((
                    level,
                    n,
                    Bucket {
                        start_s: t,
                        count: samples_per_bucket,
                        sum: v * samples_per_bucket as f64,
                        min: v - v.abs() * 0.05,
                        max: v + v.abs() * 0.05,
                        last: v,
                        last_s: t + w - 10,
                    },
                ));
            }
            if rows.len() >= 100_000 {
                h.import(&rows)?;
                stored += rows.len() as u64;
                bar.inc(rows.len() as u64);
                rows.clear();
            }
            t += w;
        }
    }
    h.import(&rows)?;
    stored += rows.len() as u64;
    Ok(stored)
}

/// Records `ticks` sampling ticks of every series from `from_s` on (after a few untimed ones):
/// rows per tick, and the time of each.
fn time_ticks(
    h: &mut History,
    series: usize,
    ticks: usize,
    from_s: i64,
) -> anyhow::Result<(f64, f64, Vec<u64>)> {
    let names: Vec<String> = (0..series).map(series_name).collect();
    let tick = |t: i64| -> Vec<(&str, f64)> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), value(i, t)))
            .collect()
    };
    // The first tick after opening reads each series' open buckets: once per process. The next
    // few bring the pages the ticks write into memory, as a running server has them.
    for k in 0..WARM_TICKS {
        h.record(from_s + 10 * k, &tick(from_s + 10 * k))?;
    }
    let (mut read, mut written) = (0u64, 0u64);
    let mut ns = Vec::with_capacity(ticks);
    for k in WARM_TICKS..WARM_TICKS + ticks as i64 {
        let t = from_s + 10 * k;
        let samples = tick(t);
        let started = Instant::now();
        let rows = h.record(t, &samples)?;
        ns.push(started.elapsed().as_nanos() as u64);
        read += rows.read;
        written += rows.written;
    }
    let per = |n: u64| n as f64 / ticks as f64;
    Ok((per(read), per(written), ns))
}

/// The replica: per-minute samples over 90 days in one SQLite table, and one minute's work of
/// the old dashboard: every tier's retained buckets re-averaged from the samples and written.
/// Returns (rows read and written per series, the minute's wall time in ms).
fn replica(dir: &Path, series: usize) -> anyhow::Result<(u64, f64)> {
    let conn = rusqlite::Connection::open(dir.join("replica.sqlite3"))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE samples (series INTEGER, t INTEGER, v REAL, PRIMARY KEY (series, t)) WITHOUT ROWID;
         CREATE TABLE tiers (series INTEGER, tier TEXT, t INTEGER, v REAL, PRIMARY KEY (series, tier, t)) WITHOUT ROWID;",
    )?;
    let minutes = 90 * 1440;
    {
        let tx = conn.unchecked_transaction()?;
        let mut ins = tx.prepare("INSERT INTO samples VALUES (?1, ?2, ?3)")?;
        for s in 0..series {
            for m in 0..minutes {
                let t = NOW_S - (minutes - m) * 60;
                ins.execute(rusqlite::params![s as i64, t, value(s, t)])?;
            }
        }
        drop(ins);
        tx.commit()?;
    }
    // (tier, bucket seconds, buckets kept)
    let tiers: [(&str, i64, i64); 5] = [
        ("MINUTES", 60, 60),
        ("HALFHR", 1_800, 48),
        ("HOUR", 3_600, 48),
        ("QTRDAY", 21_600, 28),
        ("DAY", 86_400, 70),
    ];
    let started = Instant::now();
    let (mut read, mut written) = (0u64, 0u64);
    let tx = conn.unchecked_transaction()?;
    {
        let mut avg = tx.prepare(
            "SELECT t - t % ?1, AVG(v), COUNT(*) FROM samples WHERE series = ?2 AND t >= ?3 GROUP BY 1",
        )?;
        let mut put = tx.prepare("INSERT OR REPLACE INTO tiers VALUES (?1, ?2, ?3, ?4)")?;
        for s in 0..series as i64 {
            for (tier, w, kept) in tiers {
                let since = NOW_S - w * kept;
                let buckets: Vec<(i64, f64, i64)> = avg
                    .query_map(rusqlite::params![w, s, since], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                for (t, v, n) in buckets {
                    read += n as u64;
                    put.execute(rusqlite::params![s, tier, t, v])?;
                    written += 1;
                }
            }
        }
    }
    tx.commit()?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(((read + written) / series as u64, ms))
}

/// A dashboard read: `series` series over `[now - span, now]`, timed `reads` times.
fn dashboard(
    h: &mut History,
    series: usize,
    span: i64,
    reads: usize,
) -> anyhow::Result<(f64, usize)> {
    let names: Vec<String> = (0..series).map(series_name).collect();
    let now = NOW_S + 3_600;
    let mut ns = Vec::with_capacity(reads);
    let mut points = 0;
    for _ in 0..reads {
        let started = Instant::now();
        points = 0;
        for n in &names {
            points += h.query(n, now - span, now, 1000)?.points.len();
        }
        ns.push(started.elapsed().as_nanos() as u64);
    }
    Ok((Percentiles::from_nanos(&mut ns).p99_us / 1e3, points))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.series > 0 && args.ticks > 0,
        "--series and --ticks must be at least 1"
    );
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let quiet = args.json;
    let cfg = HistoryConfig::default();
    // The three histories are built first, then their rounds of ticks take turns (1 day,
    // 90 days, 2 years, again, ...): a drift of the machine during the run (another tenant, the
    // page cache) then weighs on every length alike instead of on whichever ran last.
    let days_all = [1i64, 90, 730];
    let mut opened = Vec::new();
    for days in days_all {
        let path = dir.join(format!("history-{days}d.sqlite3"));
        let _ = std::fs::remove_file(&path);
        let mut h = History::open(&path, cfg.clone())?;
        let rows_stored = build(&mut h, args.series, days, quiet)?;
        // Timed on a freshly opened history, as after a restart.
        drop(h);
        opened.push((
            days,
            path.clone(),
            History::open(&path, cfg.clone())?,
            rows_stored,
        ));
    }
    let mut per_length: Vec<(f64, f64, Vec<u64>, Vec<f64>)> =
        vec![(0.0, 0.0, Vec::new(), Vec::new()); days_all.len()];
    for round in 0..args.rounds.max(1) as i64 {
        let from = NOW_S + round * 10 * (WARM_TICKS + args.ticks as i64);
        for ((_, _, h, _), acc) in opened.iter_mut().zip(per_length.iter_mut()) {
            let (r, w, mut ns) = time_ticks(h, args.series, args.ticks, from)?;
            (acc.0, acc.1) = (r, w);
            acc.2.extend_from_slice(&ns);
            acc.3.push(Percentiles::from_nanos(&mut ns).p50_us);
        }
    }
    let mut lengths = Vec::new();
    let mut dash = (0.0, 0, 0.0, 0);
    for ((days, path, mut h, rows_stored), (read, written, mut all_ns, round_p50)) in
        opened.into_iter().zip(per_length)
    {
        if days == 730 {
            let n = args.dashboard_series.min(args.series);
            let (p99_24h, pts_24h) = dashboard(&mut h, n, DAY_S, args.dashboard_reads)?;
            let (p99_1y, pts_1y) = dashboard(&mut h, n, 365 * DAY_S, args.dashboard_reads)?;
            dash = (p99_24h, pts_24h, p99_1y, pts_1y);
        }
        lengths.push(Length {
            days: days as u64,
            rows_stored,
            rows_read_per_tick: read,
            rows_written_per_tick: written,
            tick_us: Percentiles::from_nanos(&mut all_ns),
            tick_p50_us: report::median(&round_p50),
            round_p50_us: round_p50,
        });
        drop(h);
        let _ = std::fs::remove_file(&path);
    }
    let bar = progress(quiet, 1, "replica: 90 days of per-minute samples")?;
    let (replica_rows_per_series, replica_ms) = replica(&dir, args.replica_series.max(1))?;
    bar.finish_and_clear();
    let per_tick = |l: &Length| l.rows_read_per_tick + l.rows_written_per_tick;
    let tandem_rows_per_minute_90d = 6.0 * per_tick(&lengths[1]);
    let replica_rows_per_minute_90d = replica_rows_per_series * args.series as u64;
    let r = RollupBench {
        series: args.series,
        levels: cfg.levels.iter().map(|l| l.name.clone()).collect(),
        rows_per_tick_1d: per_tick(&lengths[0]),
        rows_per_tick_2y: per_tick(&lengths[2]),
        tick_us_1d: lengths[0].tick_p50_us,
        tick_us_2y: lengths[2].tick_p50_us,
        tick_ratio_2y_1d: lengths[2].tick_p50_us / lengths[0].tick_p50_us,
        replica_rows_per_minute_90d,
        replica_series: args.replica_series.max(1),
        replica_minute_ms_measured: replica_ms,
        tandem_rows_per_minute_90d,
        rows_ratio_90d: replica_rows_per_minute_90d as f64 / tandem_rows_per_minute_90d.max(1.0),
        dashboard_series: args.dashboard_series.min(args.series),
        dashboard_p99_ms_24h: dash.0,
        dashboard_p99_ms_1y: dash.2,
        dashboard_points_24h: dash.1,
        dashboard_points_1y: dash.3,
        lengths,
    };
    report::emit(&r, args.json)
}
