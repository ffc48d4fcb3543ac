//! `tandem bench console`: the web console as a person meets it, on a year of history.
//!
//! A data directory gets `--days` of history (every level filled over what it retains) for the
//! series the dashboard draws: host CPU per core, load, memory, disks, network, AGI routes,
//! store, capture and CDR writer. A `tandem serve` (this binary) serves it with its console, and
//! records live figures on top, so the open bucket is "now".
//!
//! Measured in the same run:
//! - the server time of the whole dashboard page (every chart's data read and drawn) for a
//!   24 h and a 1 y range, over HTTP on loopback: p50 and p99 of `--reads` requests each;
//! - the full page load in headless Chromium (Navigation Timing `loadEventEnd`), `--loads`
//!   loads per range, median and worst;
//! - with `--screenshots DIR`, a PNG of the login page and of the dashboard at each range.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use history::{History, HistoryConfig};
use serde::Serialize;

use crate::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use crate::report::{self, BenchReport, Percentiles, Table};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Days of history seeded before the server starts.
    #[arg(long, default_value_t = 400)]
    pub days: i64,
    /// Dashboard requests timed per range.
    #[arg(long, default_value_t = 50)]
    pub reads: usize,
    /// Page loads in Chromium per range.
    #[arg(long, default_value_t = 5)]
    pub loads: usize,
    /// Write PNG screenshots of each page here (created if missing).
    #[arg(long, value_name = "DIR")]
    pub screenshots: Option<PathBuf>,
    /// Keep what is seeded here instead of in a temporary directory: `data/` (the history),
    /// `calls/` (the CDR databases, archives and screenshots data).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Which half: the dashboard on a year of history, the calls pages on millions of CDRs,
    /// or both.
    #[arg(long, value_enum, default_value = "all")]
    pub part: Part,
    /// Synthetic CDRs (each with two RTP streams) seeded into each CDR backend.
    #[arg(long, default_value_t = 10_000_000)]
    pub cdrs: u64,
    /// Times the calls pages' searches are measured (each --reads requests); the median run is
    /// reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Days the seeded CDRs span, up to now.
    #[arg(long, default_value_t = 30)]
    pub cdr_days: i64,
    /// CDR backends measured, in order: sqlite, postgres (a throwaway server of Debian's
    /// package, started for the run).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    pub backends: Vec<String>,
}

/// The halves of `tandem bench console`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    All,
    Dashboard,
    Calls,
}

const USER: &str = "admin";
const PASSWORD: &str = "bench-console-password";
const DAY_S: i64 = 86_400;

/// The dashboard's series with a plausible shape each: `(name, kind)`.
fn seeded_series() -> Vec<(String, Shape)> {
    let mut s: Vec<(String, Shape)> = Vec::new();
    let mut add = |n: &str, shape| s.push((n.to_owned(), shape));
    add("host_cpu_busy_pct{cpu=\"cpu\"}", Shape::Wave(35.0, 20.0));
    add("host_cpu_busy_pct{cpu=\"cpu0\"}", Shape::Wave(40.0, 25.0));
    add("host_cpu_busy_pct{cpu=\"cpu1\"}", Shape::Wave(30.0, 18.0));
    add("host_load1", Shape::Wave(0.9, 0.6));
    add("host_load5", Shape::Wave(0.8, 0.4));
    add("host_load15", Shape::Wave(0.7, 0.3));
    add("host_memory_total_bytes", Shape::Flat(24.0 * GIB));
    add(
        "host_memory_available_bytes",
        Shape::Wave(17.0 * GIB, 2.0 * GIB),
    );
    add("host_swap_used_bytes", Shape::Flat(0.0));
    add(
        "tandem_process_rss_bytes",
        Shape::Wave(60.0 * MIB, 10.0 * MIB),
    );
    add("tandem_process_cpu_pct", Shape::Wave(12.0, 9.0));
    add(
        "host_fs_used_bytes{mount=\"/\"}",
        Shape::Growth(40.0 * GIB, 0.02 * GIB),
    );
    add(
        "host_fs_used_bytes{mount=\"/var\"}",
        Shape::Growth(12.0 * GIB, 0.05 * GIB),
    );
    add(
        "host_disk_read_bytes_per_second{device=\"vda\"}",
        Shape::Wave(200_000.0, 150_000.0),
    );
    add(
        "host_disk_written_bytes_per_second{device=\"vda\"}",
        Shape::Wave(900_000.0, 600_000.0),
    );
    add(
        "host_net_rx_bytes_per_second{interface=\"eth0\"}",
        Shape::Wave(2.5e6, 2.0e6),
    );
    add(
        "host_net_tx_bytes_per_second{interface=\"eth0\"}",
        Shape::Wave(2.3e6, 1.9e6),
    );
    add("tandem_capture_calls_active", Shape::Wave(120.0, 100.0));
    add("tandem_capture_calls_total", Shape::Counter(0.6));
    add("tandem_agi_sessions_active", Shape::Wave(30.0, 25.0));
    for (route, rate) in [
        ("dialparties", 0.5),
        ("db/get", 2.0),
        ("cidlookup.php", 0.3),
    ] {
        add(
            &format!("tandem_agi_sessions_ended_total{{route=\"{route}\",outcome=\"success\"}}"),
            Shape::Counter(rate),
        );
        add(
            &format!("tandem_agi_sessions_ended_total{{route=\"{route}\",outcome=\"failure\"}}"),
            Shape::Counter(rate / 200.0),
        );
        add(
            &format!("tandem_agi_session_duration_seconds_count{{route=\"{route}\"}}"),
            Shape::Counter(rate),
        );
        add(
            &format!("tandem_agi_session_duration_seconds_sum{{route=\"{route}\"}}"),
            Shape::Counter(rate * 0.004),
        );
    }
    add("tandem_kv_keys", Shape::Growth(25_000.0, 40.0));
    add("tandem_kv_queue_ops", Shape::Wave(2.0, 2.0));
    add("tandem_kv_committed_ops_total", Shape::Counter(8.0));
    add("tandem_capture_packets_total", Shape::Counter(12_000.0));
    add("tandem_capture_rtp_packets_total", Shape::Counter(11_800.0));
    add("tandem_capture_sip_messages_total", Shape::Counter(40.0));
    add("tandem_capture_kernel_drops_total", Shape::Counter(0.01));
    add("tandem_capture_buffer_overruns_total", Shape::Counter(0.0));
    add("tandem_capture_cdr_queue_records", Shape::Wave(3.0, 3.0));
    add("tandem_capture_cdr_journal_records", Shape::Flat(0.0));
    add(
        "tandem_capture_cdr_written_records_total",
        Shape::Counter(0.6),
    );
    s
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Clone, Copy)]
enum Shape {
    Flat(f64),
    /// A daily wave around a mean, busier on weekdays.
    Wave(f64, f64),
    /// A start and a rise per day.
    Growth(f64, f64),
    /// A counter rising at a mean rate per second that follows the day.
    Counter(f64),
}

impl Shape {
    fn at(self, t: i64, start: i64) -> f64 {
        let day = (t.rem_euclid(DAY_S)) as f64 / DAY_S as f64;
        // Busy from 8:00 to 18:00: a smooth bump peaking mid-afternoon.
        let busy = (std::f64::consts::PI * ((day - 0.3) / 0.5).clamp(0.0, 1.0)).sin();
        let weekday = if (t / DAY_S + 4).rem_euclid(7) >= 5 {
            0.4
        } else {
            1.0
        };
        match self {
            Shape::Flat(v) => v,
            Shape::Wave(mean, amp) => (mean - amp * 0.5 + amp * busy * weekday).max(0.0),
            Shape::Growth(v0, per_day) => v0 + per_day * (t - start) as f64 / DAY_S as f64,
            // Rising at `rate` give or take a half over the day: never falling, as a counter.
            Shape::Counter(rate) => {
                let w = std::f64::consts::TAU / DAY_S as f64;
                rate * ((t - start) as f64 - 0.5 * (w * t as f64).sin() / w)
            }
        }
    }
}

#[derive(Serialize, Default)]
struct RangeFigures {
    range: String,
    /// Server time of the whole dashboard page over loopback HTTP.
    page_ms: Percentiles,
    /// Navigation Timing in Chromium: responseEnd and loadEventEnd, ms.
    load_event_end_ms_median: f64,
    load_event_end_ms_max: f64,
    response_end_ms_median: f64,
    bytes: usize,
}

#[derive(Serialize)]
struct ConsoleBench {
    /// The dashboard half (`--part dashboard` or `all`); its fields at the top level.
    #[serde(flatten)]
    dashboard: Option<DashboardBench>,
    /// The calls pages on millions of CDRs (`--part calls` or `all`).
    calls: Option<crate::console_calls::CallsBench>,
}

#[derive(Serialize)]
struct DashboardBench {
    days: i64,
    series: usize,
    rows_seeded: u64,
    ranges: Vec<RangeFigures>,
    /// p99 server time of the dashboard page's data and drawing (goal: at most 50 ms).
    dashboard_p99_ms_24h: f64,
    dashboard_p99_ms_1y: f64,
    /// Worst full page load in Chromium over every range (goal: at most 500 ms).
    page_load_ms_max: f64,
    screenshots: Vec<String>,
}

impl BenchReport for ConsoleBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if let Some(d) = &self.dashboard {
            d.print_table(out)?;
        }
        if let Some(calls) = &self.calls {
            writeln!(out)?;
            calls.print_table(out)?;
        }
        Ok(())
    }
}

impl DashboardBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "Console on {} days of history, {} series ({} rows); dashboard page = every panel's data read and drawn",
            self.days, self.series, self.rows_seeded
        )?;
        let mut t = Table::new([
            "range",
            "server p50 ms",
            "server p99 ms",
            "page bytes",
            "load median ms",
            "load worst ms",
        ]);
        for r in &self.ranges {
            t.row([
                r.range.clone(),
                format!("{:.1}", r.page_ms.p50_us / 1e3),
                format!("{:.1}", r.page_ms.p99_us / 1e3),
                r.bytes.to_string(),
                format!("{:.0}", r.load_event_end_ms_median),
                format!("{:.0}", r.load_event_end_ms_max),
            ]);
        }
        t.write(out)?;
        writeln!(
            out,
            "goals: p99 at most 50 ms (24h {:.1}, 1y {:.1}); page load at most 500 ms (worst {:.0})",
            self.dashboard_p99_ms_24h, self.dashboard_p99_ms_1y, self.page_load_ms_max
        )?;
        for s in &self.screenshots {
            writeln!(out, "screenshot: {s}")?;
        }
        Ok(())
    }
}

fn seed(data_dir: &Path, days: i64, quiet: bool) -> anyhow::Result<(usize, u64)> {
    std::fs::create_dir_all(data_dir)?;
    let path = data_dir.join("history.sqlite3");
    anyhow::ensure!(
        !path.exists(),
        "{} exists: give an empty --dir",
        path.display()
    );
    // The levels of `tandem serve`'s default [history].
    let cfg = HistoryConfig::with_retention(10, 48, 30, 730)?;
    let mut h = History::open(&path, cfg)?;
    let series = seeded_series();
    let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let start = now - days * DAY_S;
    let end = history::bucket_start(now, 86_400 / 24) - 3_600;
    let value = move |i: usize, t: i64| series[i].1.at(t, start);
    let bar = report::progress_bar(quiet, 0, "{bar:30} {pos}/{len} seeding history")?;
    let rows = crate::rollup::seed(&mut h, &names, end, days, &value, &bar)?;
    bar.finish_and_clear();
    // Session times of the last six hours, a minute apart, into the routes' latency sketches:
    // most sessions take a few ms, one in fifty waits on a slow database.
    let routes = ["dialparties", "db/get", "cidlookup.php"];
    let latency_names: Vec<String> = routes
        .iter()
        .map(|r| format!("tandem_agi_session_duration_seconds{{route=\"{r}\"}}"))
        .collect();
    let mut t = end - 6 * 3600;
    while t < end {
        let slow = 0.05 + 0.04 * ((t / 600) % 5) as f64;
        let observed: Vec<Vec<(f64, u64)>> = (0..routes.len())
            .map(|i| vec![(0.002 + 0.001 * i as f64, 98), (slow, 2)])
            .collect();
        let latencies: Vec<(&str, &[(f64, u64)])> = latency_names
            .iter()
            .zip(&observed)
            .map(|(n, o)| (n.as_str(), o.as_slice()))
            .collect();
        h.record_tick(t, &[], &latencies)?;
        t += 60;
    }
    Ok((names.len(), rows))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.days >= 1 && args.reads >= 1 && args.loads >= 1,
        "--days, --reads and --loads: at least 1"
    );
    let tmp;
    let work = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_owned()
        }
    };
    let dashboard = match args.part {
        Part::All | Part::Dashboard => Some(dashboard(&args, &work.join("data"))?),
        Part::Calls => None,
    };
    let calls = match args.part {
        Part::All | Part::Calls => {
            let calls_args = crate::console_calls::CallsArgs {
                cdrs: args.cdrs,
                cdr_days: args.cdr_days,
                reads: args.reads,
                runs: args.runs,
                backends: args.backends.clone(),
                screenshots: args.screenshots.clone(),
                quiet: args.json,
            };
            let dir = work.join("calls");
            std::fs::create_dir_all(&dir)?;
            Some(crate::console_calls::run(&calls_args, &dir)?)
        }
        Part::Dashboard => None,
    };
    report::emit(&ConsoleBench { dashboard, calls }, args.json)
}

/// The dashboard half: a year of history in `data_dir`, its page timed over HTTP and loaded
/// in Chromium.
fn dashboard(args: &Args, data_dir: &Path) -> anyhow::Result<DashboardBench> {
    let quiet = args.json;
    let (series, rows_seeded) = seed(data_dir, args.days, quiet)?;
    let exe = std::env::current_exe()?;
    add_user(&exe, data_dir, USER, "admin", PASSWORD)?;
    let server = ConsoleServer::start(&exe, data_dir, &[])?;
    let cookie = login_cookie(server.web, USER, PASSWORD)?;
    let ranges = ["1h", "24h", "7d", "30d", "1y"];
    let mut figures = Vec::new();
    let bar = report::progress_bar(
        quiet,
        (ranges.len() * args.reads) as u64,
        "{bar:30} {pos}/{len} dashboard requests",
    )?;
    for range in ranges {
        let path = format!("/dashboard?range={range}");
        // One untimed request warms the SQLite page cache, as a dashboard in use is.
        http(server.web, "GET", &path, &[("Cookie", &cookie)], "")?;
        let mut ns = Vec::with_capacity(args.reads);
        let mut bytes = 0;
        for _ in 0..args.reads {
            let started = Instant::now();
            let (status, _, body) = http(server.web, "GET", &path, &[("Cookie", &cookie)], "")?;
            ns.push(started.elapsed().as_nanos() as u64);
            anyhow::ensure!(status == 200, "{path}: HTTP {status}");
            bytes = body.len();
            bar.inc(1);
        }
        figures.push(RangeFigures {
            range: range.to_owned(),
            page_ms: Percentiles::from_nanos(&mut ns),
            bytes,
            ..RangeFigures::default()
        });
    }
    bar.finish_and_clear();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let screenshots = runtime.block_on(browse(
        &server,
        &ranges,
        args.loads,
        args.screenshots.as_deref(),
        &mut figures,
    ))?;
    let p99 = |r: &str| {
        figures
            .iter()
            .find(|f| f.range == r)
            .map_or(f64::NAN, |f| f.page_ms.p99_us / 1e3)
    };
    Ok(DashboardBench {
        days: args.days,
        series,
        rows_seeded,
        dashboard_p99_ms_24h: p99("24h"),
        dashboard_p99_ms_1y: p99("1y"),
        page_load_ms_max: figures
            .iter()
            .map(|f| f.load_event_end_ms_max)
            .fold(0.0, f64::max),
        ranges: figures,
        screenshots,
    })
}

/// Loads each range in Chromium `loads` times (Navigation Timing), and takes the screenshots.
async fn browse(
    server: &ConsoleServer,
    ranges: &[&str],
    loads: usize,
    screenshots: Option<&Path>,
    figures: &mut [RangeFigures],
) -> anyhow::Result<Vec<String>> {
    let mut shots = Vec::new();
    if let Some(dir) = screenshots {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let b = Browser::launch(1400, 2400).await?;
    let base = server.base();
    let mut shoot = async |name: &str, b: &Browser| -> anyhow::Result<()> {
        if let Some(dir) = screenshots {
            let path = dir.join(format!("{name}.png"));
            b.screenshot(&path).await?;
            shots.push(path.display().to_string());
        }
        Ok(())
    };
    b.client.goto(&format!("{base}login")).await?;
    shoot("login", &b).await?;
    let url = b.login(&base, USER, PASSWORD).await?;
    anyhow::ensure!(
        url.ends_with("/dashboard"),
        "login in Chromium ended on {url}"
    );
    for (range, f) in ranges.iter().zip(figures.iter_mut()) {
        let mut load = Vec::new();
        let mut response = Vec::new();
        for _ in 0..loads {
            b.client
                .goto(&format!("{base}dashboard?range={range}"))
                .await?;
            let (resp, end) = b.load_timing_ms().await?;
            response.push(resp);
            load.push(end);
        }
        f.load_event_end_ms_median = report::median(&load);
        f.load_event_end_ms_max = load.iter().copied().fold(0.0, f64::max);
        f.response_end_ms_median = report::median(&response);
        shoot(&format!("dashboard-{range}"), &b).await?;
    }
    b.close().await;
    Ok(shots)
}
