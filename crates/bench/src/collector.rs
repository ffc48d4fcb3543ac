//! `tandem bench collector`: the distributed monitor's centre on this machine, in one run.
//!
//! - **Ingest** (`--part ingest`): 1, 4 and 16 sensors (`--sensors`) deliver synthetic calls
//!   (`cdr::seed`, about 1.5 RTP streams each, times in the last hour) to a collector over its
//!   real protocol on loopback, each sensor a CDR writer whose store is its uplink (as
//!   `tandem capture --collector` runs it), and the collector writes them to a throwaway
//!   PostgreSQL with fsync on (as in production), day-partitioned. The figure is CDRs
//!   acknowledged (committed) per second, from the first submit to the last acknowledgement.
//! - **The floor**, in the same run and the same PostgreSQL: the same rows (as the collector
//!   stores them: sensor and uid set) by plain `COPY` into the same tables from a minimal
//!   client (`cdr::pg_bench::copy_floor`), as many connections as the collector's writers,
//!   in batches of the collector's transaction size. What the database takes at all; the goal
//!   is ingest ≥ 70% of it. Floor and ingest alternate run by run, each on a fresh database
//!   whose day partitions exist beforehand (a collector creates its days ahead). One
//!   floor run of [`WARM_UP_RECORDS`] before the first measurement is not counted: the
//!   first run after PostgreSQL starts (cold caches, a WAL not yet recycled) was a quarter
//!   slower, which flattered whichever part came first.
//! - **CPU per CDR**: PostgreSQL's (the postmaster and every backend, with those that ended)
//!   and this process's (sensors and collector, or the COPY client), from /proc.
//! - **Replay** (`--part replay`): a sensor's journal holding a backlog (`--backlog`, 1
//!   million CDRs by default: what 1,000 calls/s leave behind in under 17 minutes of outage),
//!   delivered once the collector is reachable; the drain rate against `--arrival-rate`.
//! - **HEP** (`--part hep`): `collector_hep`, with heplify-server as the peer.
//!
//! Everything listens on loopback. Never: reports a figure it did not measure in this run, or
//! counts a CDR as delivered before the collector acknowledged it; every run checks that
//! PostgreSQL holds each CDR once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use cdr::{CdrRecord, CdrWriter, CdrWriterConfig, PgLayout, PgOptions};
use collector::{Collector, SensorList, Settings, sensors_file};
use sensor::uplink::{CollectorLink, Uplink};
use serde::Serialize;

use crate::report::{BenchReport, Table, emit, median, progress_bar};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Runs of each measurement; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Parts to run: ingest (with its COPY floor), replay, hep.
    #[arg(long, value_delimiter = ',', default_value = "ingest,replay,hep")]
    part: Vec<String>,
    /// Sensor counts of the ingest.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    sensors: Vec<usize>,
    /// CDRs per ingest run, split evenly among the sensors.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// CDRs in the sensor's journal for the replay.
    #[arg(long, default_value_t = 1_000_000)]
    backlog: u64,
    /// The arrival rate (calls/s) the replay's drain rate is compared with.
    #[arg(long, default_value_t = 1_000.0)]
    arrival_rate: f64,
    /// The collector's PostgreSQL writer connections (its `writers`); the floor uses as many.
    #[arg(long, default_value_t = Settings::default().writers)]
    writers: usize,
    /// HEP: concurrent synthetic G.711 calls.
    #[arg(long, default_value_t = 1_000)]
    hep_calls: usize,
    /// HEP: media seconds per call.
    #[arg(long, default_value_t = 10)]
    hep_seconds: u64,
    /// HEP: transports (udp, tcp).
    #[arg(long, value_delimiter = ',', default_value = "udp,tcp")]
    hep_transport: Vec<String>,
    /// heplify-server's binary, the HEP peer (built by hand from sipcapture/heplify-server,
    /// see BENCHMARKS.md). Without it the peer is skipped and the report says so.
    #[arg(long, value_name = "PATH")]
    heplify_server: Option<PathBuf>,
    /// Directory for PostgreSQL and the journals (a temporary directory is made inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// One sensor count's ingest against its floor, medians of the runs.
#[derive(Debug, Serialize)]
pub struct IngestRow {
    pub sensors: usize,
    pub records: u64,
    pub ingest_cdrs_per_s: f64,
    pub floor_cdrs_per_s: f64,
    /// Ingest as a share of the floor, percent (goal ≥ 70).
    pub pct_of_floor: f64,
    pub ingest_runs: Vec<f64>,
    pub floor_runs: Vec<f64>,
    /// PostgreSQL's CPU µs per CDR, ingest and floor.
    pub server_cpu_us_per_cdr: [f64; 2],
    /// This process's CPU µs per CDR: sensors and collector, and the COPY client.
    pub client_cpu_us_per_cdr: [f64; 2],
    /// Records that went through a sensor's journal (a batch not acknowledged in time).
    pub journaled: u64,
}

#[derive(Debug, Serialize)]
pub struct ReplayRow {
    pub backlog: u64,
    pub drain_cdrs_per_s: f64,
    pub runs: Vec<f64>,
    pub arrival_cdrs_per_s: f64,
    /// Drain rate over arrival rate (goal ≥ 10).
    pub ratio: f64,
    /// Seconds to write the backlog into the journal (outside the clock).
    pub journal_fill_s: f64,
    pub journal_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct CollectorReport {
    pub bench: &'static str,
    pub cores: usize,
    pub cpu: String,
    pub postgres: String,
    pub runs: usize,
    pub ingest: Vec<IngestRow>,
    pub replay: Option<ReplayRow>,
    pub hep: Option<crate::collector_hep::HepPartReport>,
    /// Goals: ingest ≥ 50,000 CDRs/s, ≥ 70% of the floor; replay ≥ 10× arrival.
    pub goals: Goals,
}

#[derive(Debug, Serialize)]
pub struct Goals {
    pub ingest_cdrs_per_s_min: f64,
    pub ingest_pct_of_floor_min: f64,
    pub replay_ratio_min: f64,
    /// The best floor measured: a goal above it is bounded by this machine's PostgreSQL.
    pub floor_cdrs_per_s_max: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let quiet = args.json;
    let runs = args.runs.max(1);
    let base = match &args.dir {
        Some(d) => tempfile::Builder::new()
            .prefix("bench-collector-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new()
            .prefix("bench-collector-")
            .tempdir()?,
    };
    let wants = |p: &str| args.part.iter().any(|x| x == p);
    for p in &args.part {
        if !["ingest", "replay", "hep"].contains(&p.as_str()) {
            bail!("--part {p}: the parts are ingest, replay and hep");
        }
    }
    let mut pg = None;
    if wants("ingest") || wants("replay") {
        pg = Some(Pg::start(base.path())?);
    }
    let mut ingest = Vec::new();
    if wants("ingest") {
        let pg = pg.as_mut().expect("started above");
        warm_up(pg, &args)?;
        for &n in &args.sensors {
            ingest.push(ingest_part(pg, base.path(), n.max(1), &args, runs, quiet)?);
        }
    }
    let replay = match (wants("replay"), pg.as_mut()) {
        (true, Some(pg)) => Some(replay_part(pg, base.path(), &args, runs, quiet)?),
        _ => None,
    };
    let postgres = pg.as_ref().map_or(String::new(), |p| p.version.clone());
    drop(pg);
    let hep = if wants("hep") {
        let mut transports = Vec::new();
        for t in &args.hep_transport {
            transports.push(match t.as_str() {
                "udp" => crate::hep_load::Transport::Udp,
                "tcp" => crate::hep_load::Transport::Tcp,
                other => bail!("--hep-transport {other}: udp or tcp"),
            });
        }
        Some(crate::collector_hep::run(
            &crate::collector_hep::HepPartOptions {
                calls: args.hep_calls,
                duration_s: args.hep_seconds,
                runs,
                transports,
                heplify_server: args.heplify_server.clone(),
                quiet,
            },
        )?)
    } else {
        None
    };
    let floor_max = ingest
        .iter()
        .map(|r| r.floor_cdrs_per_s)
        .fold(0.0, f64::max);
    let report = CollectorReport {
        bench: "collector",
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu: cpu_model(),
        postgres,
        runs,
        ingest,
        replay,
        hep,
        goals: Goals {
            ingest_cdrs_per_s_min: 50_000.0,
            ingest_pct_of_floor_min: 70.0,
            replay_ratio_min: 10.0,
            floor_cdrs_per_s_max: floor_max,
        },
    };
    emit(&report, args.json)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default()
}

/// The throwaway PostgreSQL every run of the ingest and replay shares, a fresh database per
/// run. fsync on; the buffers and WAL size a CDR server would be given.
struct Pg {
    server: pg_scratch::PgServer,
    postmaster: u32,
    databases: usize,
    version: String,
}

impl Pg {
    fn start(dir: &Path) -> anyhow::Result<Pg> {
        let server = pg_scratch::PgServer::start(&pg_scratch::Options {
            parent: Some(dir.to_path_buf()),
            fsync: true,
            shared_buffers_mib: Some(1024),
            settings: vec![("max_wal_size".into(), "4GB".into())],
        })
        .context("starting PostgreSQL (Debian's postgresql package)")?;
        let pid_file = server.data_dir().join("postmaster.pid");
        let postmaster = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            .with_context(|| format!("reading {}", pid_file.display()))?;
        let mut c = postgres::Client::connect(&server.conninfo(), postgres::NoTls)?;
        let version: String = c.query_one("SHOW server_version", &[])?.get(0);
        Ok(Pg {
            server,
            postmaster,
            databases: 0,
            version,
        })
    }

    /// A new database with the partitioned schema and the days `records` need.
    /// The run before is over (its connections closed): its database is dropped, so that
    /// the runs' data never fills the disk.
    fn fresh(&mut self, records: &[CdrRecord]) -> anyhow::Result<String> {
        let mut admin = postgres::Client::connect(&self.server.conninfo(), postgres::NoTls)?;
        if self.databases > 0 {
            admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS collector_{} WITH (FORCE)",
                self.databases
            ))?;
        }
        self.databases += 1;
        let name = format!("collector_{}", self.databases);
        admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
        let conninfo = self
            .server
            .conninfo()
            .replace("dbname=postgres", &format!("dbname={name}"));
        let layout = cdr::pg_bench::prepare(&conninfo, records, &collector_pg_options())?;
        anyhow::ensure!(layout == PgLayout::Partitioned, "{name} is not partitioned");
        Ok(conninfo)
    }

    /// CPU seconds of the whole server: the postmaster with the backends it reaped, and the
    /// processes it runs now.
    fn cpu_s(&self) -> f64 {
        let stat = |pid: &str| -> Option<(f64, u32)> {
            let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest: Vec<&str> = line[line.rfind(')')? + 1..].split_whitespace().collect();
            // utime, stime, cutime, cstime (fields 14-17), and the parent's pid (field 4).
            let ticks: u64 = rest
                .get(11..15)?
                .iter()
                .filter_map(|v| v.parse::<u64>().ok())
                .sum();
            Some((
                ticks as f64 / procstat::ticks_per_second() as f64,
                rest.get(1)?.parse().ok()?,
            ))
        };
        let mut total = stat(&self.postmaster.to_string()).map_or(0.0, |c| c.0);
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.bytes().all(|b| b.is_ascii_digit())
                && let Some((cpu, parent)) = stat(&name)
                && parent == self.postmaster
            {
                total += cpu;
            }
        }
        total
    }

    /// Checks that `conninfo` holds `calls` calls, each once.
    fn check_once(conninfo: &str, calls: u64) -> anyhow::Result<()> {
        let mut c = postgres::Client::connect(conninfo, postgres::NoTls)?;
        let row = c.query_one("SELECT count(*), count(DISTINCT uid) FROM cdr", &[])?;
        let (rows, uids): (i64, i64) = (row.get(0), row.get(1));
        anyhow::ensure!(
            rows == calls as i64 && uids == calls as i64,
            "PostgreSQL holds {rows} call rows ({uids} distinct uids) where {calls} calls were delivered"
        );
        Ok(())
    }
}

/// The collector's own PostgreSQL options (partitioned, its days ahead), no retention: the
/// runs' calls are recent anyway.
fn collector_pg_options() -> PgOptions {
    PgOptions {
        retention_days: None,
        ..PgOptions::partitioned()
    }
}

/// Synthetic calls of the last hour for `sensor`, as it submits them (no uid: its writer
/// gives it one) and as the collector stores them (the floor's rows).
fn sensor_calls(sensor: &str, n: u64, seed: u64) -> (Vec<CdrRecord>, Vec<CdrRecord>) {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let stored: Vec<CdrRecord> =
        cdr::seed::synthetic_calls(n, now_us - 3_600_000_000, now_us, seed)
            .map(|mut r| {
                if let Some(c) = r.call.as_mut() {
                    c.sensor = sensor.to_string();
                }
                r.uid = r.identity(sensor);
                r
            })
            .collect();
    let submitted = stored
        .iter()
        .cloned()
        .map(|mut r| {
            r.uid.clear();
            if let Some(c) = r.call.as_mut() {
                c.sensor.clear();
            }
            r
        })
        .collect();
    (submitted, stored)
}

/// A collector on loopback in this process, with its sensors' tokens.
struct RunningCollector {
    runtime: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

impl RunningCollector {
    fn start(
        dir: &Path,
        conninfo: &str,
        writers: usize,
        listen: &str,
    ) -> anyhow::Result<RunningCollector> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("collector")
            .enable_all()
            .build()?;
        let settings = Settings {
            listen: listen.to_string(),
            postgres: conninfo.to_string(),
            writers,
            retention_days: 0,
            ..Settings::default()
        };
        let mut registry = prometheus_client::registry::Registry::default();
        let c = runtime.block_on(Collector::bind(&settings, None, dir, &mut registry))?;
        let addr = c.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let served = runtime.spawn(c.serve(async {
            let _ = rx.await;
        }));
        Ok(RunningCollector {
            runtime,
            stop: Some(tx),
            served: Some(served),
            addr,
        })
    }
}

impl Drop for RunningCollector {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.served.take() {
            let _ = self.runtime.block_on(h);
        }
    }
}

/// A sensor: its uplink and its CDR writer (journal in `dir`).
fn sensor(
    dir: &Path,
    data: &Path,
    name: &str,
    addr: std::net::SocketAddr,
    queue_records_max: usize,
    journal_bytes_max: u64,
) -> anyhow::Result<(CdrWriter, Arc<Uplink>)> {
    let token_file = dir.join(format!("{name}.token"));
    if !token_file.exists() {
        let token = SensorList::open(&sensors_file(data))?.add(name)?;
        std::fs::write(&token_file, token)?;
    }
    let mut link = CollectorLink::new(&addr.to_string(), name);
    link.token_file = Some(token_file);
    let uplink = Arc::new(Uplink::start(link, None)?);
    let opener = uplink.clone();
    let cfg = CdrWriterConfig {
        sensor: name.to_string(),
        queue_records_max,
        journal_bytes_max,
        batch_records_max: sensor::uplink::DELIVERY_BATCH_RECORDS_MAX,
        ..CdrWriterConfig::new(dir.join(format!("{name}.journal")))
    };
    let w = CdrWriter::start(cfg, move || opener.open_store())?;
    Ok((w, uplink))
}

/// Records of the uncounted floor run before the first measurement.
pub const WARM_UP_RECORDS: u64 = 50_000;

/// One floor run, not counted, so that the first measured part does not pay for a cold server.
fn warm_up(pg: &mut Pg, args: &Args) -> anyhow::Result<()> {
    let (_, rows) = sensor_calls("warm-up", WARM_UP_RECORDS.min(args.records.max(1)), 0);
    let conninfo = pg.fresh(&rows)?;
    cdr::pg_bench::copy_floor(
        &conninfo,
        &rows,
        args.writers,
        Settings::default().transaction_records_max,
    )?;
    Ok(())
}

fn ingest_part(
    pg: &mut Pg,
    base: &Path,
    sensors: usize,
    args: &Args,
    runs: usize,
    quiet: bool,
) -> anyhow::Result<IngestRow> {
    let per = (args.records / sensors as u64).max(1);
    let total = per * sensors as u64;
    let names: Vec<String> = (0..sensors).map(|i| format!("site-{i:02}")).collect();
    let calls: Vec<(Vec<CdrRecord>, Vec<CdrRecord>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| sensor_calls(n, per, 1 + i as u64))
        .collect();
    let floor_rows: Vec<CdrRecord> = calls.iter().flat_map(|c| c.1.iter().cloned()).collect();
    let bar = progress_bar(
        quiet,
        (2 * runs) as u64,
        &format!("ingest, {sensors:>2} sensor(s) {{bar:30}} {{pos}}/{{len}} {{msg}}"),
    )?;
    let (mut ingests, mut floors) = (Vec::new(), Vec::new());
    let (mut server_cpu, mut client_cpu) = (Vec::new(), Vec::new());
    let mut journaled = 0;
    let me = std::process::id();
    let own_cpu = || procstat::process_cpu_seconds(me).unwrap_or(0.0);
    for run in 0..runs {
        // The floor: the same rows by COPY, as many connections as the collector's writers,
        // in its transactions' size.
        let conninfo = pg.fresh(&floor_rows)?;
        let (s0, c0) = (pg.cpu_s(), own_cpu());
        let took = cdr::pg_bench::copy_floor(
            &conninfo,
            &floor_rows,
            args.writers,
            Settings::default().transaction_records_max,
        )?;
        // The writers' backends have ended; let the postmaster reap them.
        std::thread::sleep(Duration::from_millis(300));
        let (s1, c1) = (pg.cpu_s(), own_cpu());
        Pg::check_once(&conninfo, total)?;
        floors.push(total as f64 / took.as_secs_f64());
        let floor_cpu = (
            (s1 - s0) * 1e6 / total as f64,
            (c1 - c0) * 1e6 / total as f64,
        );
        bar.inc(1);

        // The collector and its sensors, connected before the clock starts.
        let conninfo = pg.fresh(&floor_rows)?;
        let dir = base.join(format!("ingest-{sensors}-{run}"));
        let data = dir.join("collector");
        std::fs::create_dir_all(&data)?;
        let collector = RunningCollector::start(&data, &conninfo, args.writers, "127.0.0.1:0")?;
        let mut fleet = Vec::new();
        for n in &names {
            let (w, up) = sensor(&dir, &data, n, collector.addr, per as usize + 1, 8 << 30)?;
            up.open_store()
                .with_context(|| format!("{n} connecting to the collector"))?;
            fleet.push((w, up));
        }
        // The sensors' records, copied before the clock starts: a capture hands its writer
        // records it owns.
        let batches: Vec<Vec<CdrRecord>> = calls.iter().map(|c| c.0.clone()).collect();
        let (s0, c0) = (pg.cpu_s(), own_cpu());
        let started = Instant::now();
        std::thread::scope(|s| {
            for ((w, _), submitted) in fleet.iter().zip(batches) {
                s.spawn(move || {
                    for r in submitted {
                        w.submit(r);
                    }
                });
            }
        });
        wait_written(&fleet, per, Duration::from_secs(600), &bar)?;
        let took = started.elapsed();
        let (s1, c1) = (pg.cpu_s(), own_cpu());
        for (w, _) in fleet {
            let stats = w.close();
            journaled += stats.journaled_records;
            anyhow::ensure!(
                stats.dropped_records == 0,
                "a sensor dropped CDRs: {stats:?}"
            );
        }
        drop(collector);
        Pg::check_once(&conninfo, total)?;
        ingests.push(total as f64 / took.as_secs_f64());
        server_cpu.push([(s1 - s0) * 1e6 / total as f64, floor_cpu.0]);
        client_cpu.push([(c1 - c0) * 1e6 / total as f64, floor_cpu.1]);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ingest = median(&ingests);
    let floor = median(&floors);
    let med = |v: &[[f64; 2]], k: usize| median(&v.iter().map(|x| x[k]).collect::<Vec<_>>());
    Ok(IngestRow {
        sensors,
        records: total,
        ingest_cdrs_per_s: ingest,
        floor_cdrs_per_s: floor,
        pct_of_floor: 100.0 * ingest / floor,
        ingest_runs: ingests,
        floor_runs: floors,
        server_cpu_us_per_cdr: [med(&server_cpu, 0), med(&server_cpu, 1)],
        client_cpu_us_per_cdr: [med(&client_cpu, 0), med(&client_cpu, 1)],
        journaled,
    })
}

/// Waits until every sensor's writer has stored `per` records (acknowledged by the
/// collector), or fails with their counters after `limit`.
fn wait_written(
    fleet: &[(CdrWriter, Arc<Uplink>)],
    per: u64,
    limit: Duration,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let written: u64 = fleet.iter().map(|(w, _)| w.stats().written_records).sum();
        bar.set_message(format!("{written} acknowledged"));
        if fleet.iter().all(|(w, _)| w.stats().written_records >= per) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let stats: Vec<_> = fleet.iter().map(|(w, _)| w.stats()).collect();
            bail!("the sensors' CDRs were not all acknowledged within {limit:?}: {stats:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn replay_part(
    pg: &mut Pg,
    base: &Path,
    args: &Args,
    runs: usize,
    quiet: bool,
) -> anyhow::Result<ReplayRow> {
    let name = "backlog";
    let n = args.backlog.max(1);
    let (_, stored) = sensor_calls(name, n, 99);
    let bar = progress_bar(
        quiet,
        runs as u64,
        "replay of the backlog {bar:30} {pos}/{len} {msg}",
    )?;
    let (mut rates, mut fill_s, mut journal_bytes) = (Vec::new(), 0.0, 0);
    // A sensor's default bound: the backlog must fit in it.
    let journal_bytes_max = cdr::writer::DEFAULT_JOURNAL_BYTES_MAX;
    for run in 0..runs {
        let dir = base.join(format!("replay-{run}"));
        let data = dir.join("collector");
        std::fs::create_dir_all(&data)?;
        // The backlog: what the sensor's writer journaled while the collector was away, in its
        // own format (records with their uid), outside the clock.
        bar.set_message("writing the journal");
        let t = Instant::now();
        {
            let (mut journal, _) =
                cdr::Journal::open(&dir.join(format!("{name}.journal")), journal_bytes_max)?;
            for chunk in stored.chunks(5_000) {
                journal.append(chunk)?;
            }
            journal_bytes = journal.bytes();
        }
        fill_s = t.elapsed().as_secs_f64();
        let conninfo = pg.fresh(&stored)?;
        let collector = RunningCollector::start(&data, &conninfo, args.writers, "127.0.0.1:0")?;
        bar.set_message("draining");
        let started = Instant::now();
        let (w, up) = sensor(
            &dir,
            &data,
            name,
            collector.addr,
            cdr::writer::DEFAULT_QUEUE_RECORDS_MAX,
            journal_bytes_max,
        )?;
        let fleet = [(w, up)];
        wait_written(&fleet, n, Duration::from_secs(3_600), &bar)?;
        let took = started.elapsed();
        let [(w, _)] = fleet;
        let stats = w.close();
        anyhow::ensure!(
            stats.replayed_records >= n,
            "the backlog was not replayed from the journal: {stats:?}"
        );
        drop(collector);
        Pg::check_once(&conninfo, n)?;
        // The journal (1.6 GB for a million CDRs) goes with its run.
        std::fs::remove_dir_all(&dir)?;
        rates.push(n as f64 / took.as_secs_f64());
        bar.inc(1);
    }
    bar.finish_and_clear();
    let drain = median(&rates);
    Ok(ReplayRow {
        backlog: n,
        drain_cdrs_per_s: drain,
        runs: rates,
        arrival_cdrs_per_s: args.arrival_rate,
        ratio: drain / args.arrival_rate,
        journal_fill_s: fill_s,
        journal_bytes,
    })
}

impl BenchReport for CollectorReport {
    fn print_table(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "Collector: {} cores ({}), PostgreSQL {} (fsync on), medians of {} runs",
            self.cores, self.cpu, self.postgres, self.runs
        )?;
        if !self.ingest.is_empty() {
            writeln!(out)?;
            let mut t = Table::new([
                "sensors",
                "CDRs",
                "ingest CDRs/s",
                "COPY floor CDRs/s",
                "of floor",
                "PG CPU µs/CDR ingest|floor",
                "client CPU µs/CDR ingest|floor",
            ]);
            for r in &self.ingest {
                t.row([
                    r.sensors.to_string(),
                    r.records.to_string(),
                    format!("{:.0}", r.ingest_cdrs_per_s),
                    format!("{:.0}", r.floor_cdrs_per_s),
                    format!("{:.0}%", r.pct_of_floor),
                    format!(
                        "{:.1} | {:.1}",
                        r.server_cpu_us_per_cdr[0], r.server_cpu_us_per_cdr[1]
                    ),
                    format!(
                        "{:.1} | {:.1}",
                        r.client_cpu_us_per_cdr[0], r.client_cpu_us_per_cdr[1]
                    ),
                ]);
            }
            t.write(out)?;
            writeln!(
                out,
                "goals: ingest ≥ {:.0} CDRs/s and ≥ {:.0}% of the floor; the best floor here is {:.0} CDRs/s",
                self.goals.ingest_cdrs_per_s_min,
                self.goals.ingest_pct_of_floor_min,
                self.goals.floor_cdrs_per_s_max
            )?;
        }
        if let Some(r) = &self.replay {
            writeln!(out)?;
            writeln!(
                out,
                "Replay: {} CDRs from a sensor's journal ({:.0} MB) drained at {:.0} CDRs/s (runs {:.0?}): {:.1}× an arrival of {:.0} calls/s (goal ≥ {:.0}×)",
                r.backlog,
                r.journal_bytes as f64 / 1e6,
                r.drain_cdrs_per_s,
                r.runs,
                r.ratio,
                r.arrival_cdrs_per_s,
                self.goals.replay_ratio_min
            )?;
        }
        if let Some(h) = &self.hep {
            writeln!(out)?;
            out.flush()?;
            crate::collector_hep::print_table(h);
        }
        if let Some(h) = &self.hep {
            writeln!(out)?;
            out.flush()?;
            crate::collector_hep::print_table(h);
        }
        Ok(())
    }
}
