//! `tandem bench registrar`: REGISTER/s that Tandem's registrar sustains with durable
//! bindings, against Kamailio with bindings in memory and written through to SQLite, each
//! with and without MD5 digest authentication; the wire latency at a fixed rate, Tandem's
//! memory per 100,000 AORs, and its REGISTER latency under a disk hog against fsync's.
//!
//! The load is SIPp (`sipp.rs`) on a ladder of rising rates, each step a fresh set of SIPp
//! processes, until more than `--max-fail-percent` of the registrations fail or time out; the
//! highest rate served below it is the contestant's. Latency is read on the wire (`wire.rs`).
//! Each contestant starts fresh (its own directory) for each ladder; contestants take turns
//! run by run, and the figures are medians over the runs. Everything listens on loopback.

mod kamailio;
mod report;
mod server;
mod sipp;
mod table;
mod wire;

use self::report::{Contestant, Hog, RegistrarReport, Step};
use self::server::{Kind, Server};
use crate::report::Percentiles;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Runs; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// AORs the ladder registers (users 1000 upward), refreshed in turn.
    #[arg(long, default_value_t = 10_000)]
    aors: u64,
    /// The ladder's REGISTER rates per second, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "500,1000,2000,4000,8000,10000,12000,16000,20000,25000"
    )]
    rates: Vec<u32>,
    /// Seconds of each ladder step.
    #[arg(long, default_value_t = 3.0)]
    step_secs: f64,
    /// The rate whose wire latency is reported (added to the ladder if missing).
    #[arg(long, default_value_t = 10_000)]
    latency_rate: u32,
    /// A rate is sustained while fewer than this share of registrations fail or time out.
    #[arg(long, default_value_t = 1.0)]
    max_fail_percent: f64,
    /// The most one SIPp process is asked to send per second; a higher rate is split over
    /// several processes.
    #[arg(long, default_value_t = 10_000)]
    sipp_rate_per_process: u32,
    /// Kamailio's UDP worker processes, bindings in memory.
    #[arg(long, default_value_t = 4)]
    kamailio_children: u32,
    /// Kamailio's UDP worker processes, bindings written through to SQLite. db_sqlite sets
    /// no busy timeout, so a worker that finds another's write in progress fails its own
    /// ("database is locked") and answers 500: one worker is its best configuration.
    #[arg(long, default_value_t = 1)]
    kamailio_sqlite_children: u32,
    /// Contestants (tandem, kamailio-memory, kamailio-sqlite-wal); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// AORs registered for the memory figure (0: skip it).
    #[arg(long, default_value_t = 100_000)]
    memory_aors: u64,
    /// REGISTER/s while registering them.
    #[arg(long, default_value_t = 5_000)]
    memory_rate: u32,
    /// REGISTER/s against Tandem in the disk-hog phases.
    #[arg(long, default_value_t = 2_000)]
    hog_rate: u32,
    /// Seconds of each disk-hog measurement (fsync probe, then REGISTER load; 0: skip).
    #[arg(long, default_value_t = 5.0)]
    hog_secs: f64,
    /// Directory on the filesystem to use (a temporary directory is made inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// What every phase needs: the arguments and the run's scenario files.
struct Ctx<'a> {
    args: &'a Args,
    root: &'a Path,
    scenario_plain: PathBuf,
    scenario_auth: PathBuf,
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.runs >= 1 && args.step_secs > 0.0 && args.aors >= 1,
        "--runs, --step-secs and --aors must be positive"
    );
    anyhow::ensure!(
        args.sipp_rate_per_process >= 1,
        "--sipp-rate-per-process must be positive"
    );
    if !args.rates.contains(&args.latency_rate) {
        args.rates.push(args.latency_rate);
    }
    args.rates.sort_unstable();
    args.rates.dedup();
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| args.only.is_empty() || args.only.iter().any(|o| o == k.name()))
        .collect();
    anyhow::ensure!(!kinds.is_empty(), "--only names no contestant");
    let load_average_start = report::load_average();
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::Builder::new()
        .prefix("tandem-bench-registrar-")
        .tempdir_in(&base)?;
    let cx = Ctx {
        args: &args,
        root: tmp.path(),
        scenario_plain: tmp.path().join("register.xml"),
        scenario_auth: tmp.path().join("register-auth.xml"),
    };
    std::fs::write(&cx.scenario_plain, sipp::scenario(false))?;
    std::fs::write(&cx.scenario_auth, sipp::scenario(true))?;

    let subjects: Vec<(Kind, bool)> = kinds
        .iter()
        .flat_map(|&k| [(k, false), (k, true)])
        .collect();
    let per_run = subjects.len() + 2;
    let bar = crate::report::progress_bar(
        args.json,
        (per_run * args.runs) as u64,
        "{bar:30} {pos}/{len}  {msg}",
    )?;
    let mut ladders: Vec<Vec<Vec<Step>>> = vec![Vec::new(); subjects.len()];
    let mut errors = vec![0usize; subjects.len()];
    let mut memory = Vec::new();
    let mut hogs = Vec::new();
    for run in 0..args.runs {
        // Rotate the order so that no contestant always runs first or last.
        for k in 0..subjects.len() {
            let i = (k + run) % subjects.len();
            let (kind, auth) = subjects[i];
            bar.set_message(format!(
                "run {}: {}{}",
                run + 1,
                kind.name(),
                if auth { ", auth" } else { "" }
            ));
            let (steps, errs) = ladder(&cx, kind, auth)?;
            ladders[i].push(steps);
            errors[i] += errs;
            bar.inc(1);
        }
        if kinds.contains(&Kind::Tandem) && args.memory_aors > 0 {
            bar.set_message(format!("run {}: tandem memory", run + 1));
            memory.push(memory_per_100k(&cx)?);
        }
        bar.inc(1);
        if kinds.contains(&Kind::Tandem) && args.hog_secs > 0.0 {
            bar.set_message(format!("run {}: tandem under a disk hog", run + 1));
            hogs.push(hog(&cx)?);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();

    let contestants: Vec<Contestant> = subjects
        .iter()
        .zip(ladders)
        .zip(errors)
        .map(|((&(kind, auth), runs), errs)| {
            Contestant::from_runs(kind, auth, runs, args.latency_rate, errs)
        })
        .collect();
    let report = RegistrarReport::new(&args, contestants, memory, hogs, load_average_start);
    crate::report::emit(&report, args.json)
}

/// A server started fresh for one phase, in a directory of its own.
struct Fresh {
    // Declared first, so dropped first: the server stops before its directory goes.
    server: Server,
    port: u16,
    dir: tempfile::TempDir,
}

impl Fresh {
    fn start(cx: &Ctx<'_>, kind: Kind, auth: bool) -> anyhow::Result<Fresh> {
        let a = cx.args;
        let dir = tempfile::tempdir_in(cx.root)?;
        let port = server::free_sip_port()?;
        let users = (1000..1000 + a.aors).map(|u| (u.to_string(), sipp::password(u)));
        let children = match kind {
            Kind::Kamailio(kamailio::Usrloc::WriteThrough) => a.kamailio_sqlite_children,
            _ => a.kamailio_children,
        };
        let server = server::start(kind, dir.path(), port, auth, children, users)?;
        Ok(Fresh { server, port, dir })
    }

    /// One load step: `calls` registrations at `rate` per second from the users
    /// `first..first + count`, timed on the wire.
    fn step(
        &self,
        cx: &Ctx<'_>,
        auth: bool,
        rate: u32,
        calls: u64,
        users: std::ops::Range<u64>,
    ) -> anyhow::Result<Step> {
        let a = cx.args;
        let dir = self.dir.path();
        let processes = rate.div_ceil(a.sipp_rate_per_process) as usize;
        let files = sipp::users_files(dir, "load", users, processes)?;
        let tap = wire::Tap::start(self.port)?;
        let cpu_before = self.server.cpu_seconds();
        let started = std::time::Instant::now();
        let counters = sipp::run(&sipp::Load {
            scenario: if auth {
                &cx.scenario_auth
            } else {
                &cx.scenario_plain
            },
            users: &files,
            server_port: self.port,
            rate_per_sec: rate,
            calls,
            dir,
        })?;
        let wall_secs = started.elapsed().as_secs_f64();
        let server_cpu = self.server.cpu_seconds() - cpu_before;
        let mut wire = tap.stop()?;
        Ok(Step::new(
            rate,
            counters,
            &mut wire,
            server_cpu,
            wall_secs,
            a.max_fail_percent,
        ))
    }
}

/// One contestant's ladder on a fresh server: steps up to the first that is not sustained in
/// two tries.
/// Returns the steps and the error lines the server logged.
fn ladder(cx: &Ctx<'_>, kind: Kind, auth: bool) -> anyhow::Result<(Vec<Step>, usize)> {
    let a = cx.args;
    let fresh = Fresh::start(cx, kind, auth)?;
    let mut steps = Vec::new();
    for &rate in &a.rates {
        let calls = (f64::from(rate) * a.step_secs).round() as u64;
        let users = 1000..1000 + a.aors;
        let mut s = fresh.step(cx, auth, rate, calls, users.clone())?;
        if !s.sustained {
            // Once more: on a machine shared with other work, one stall of a few seconds
            // fails a step by itself. The better try counts.
            let again = fresh.step(cx, auth, rate, calls, users)?;
            if again.sustained || again.served_per_sec > s.served_per_sec {
                s = again;
            }
            s.tries = 2;
        }
        let go_on = s.sustained;
        steps.push(s);
        if !go_on {
            break;
        }
    }
    Ok((steps, fresh.server.error_lines()))
}

/// Tandem's resident memory before and after registering `--memory-aors` new AORs, scaled to
/// 100,000. Returns bytes.
fn memory_per_100k(cx: &Ctx<'_>) -> anyhow::Result<f64> {
    let a = cx.args;
    let fresh = Fresh::start(cx, Kind::Tandem, false)?;
    // The same load on one AOR first, so that what any load costs (buffers, the allocator's
    // per-thread arenas, the runtime's workers) is in `before` and only the AORs in the growth.
    let warmup_calls = u64::from(a.memory_rate) * 2;
    fresh.step(cx, false, a.memory_rate, warmup_calls, 1000..1001)?;
    std::thread::sleep(Duration::from_secs(1));
    let rss = || {
        procstat::process_rss_bytes(fresh.server.pid())
            .ok_or_else(|| anyhow::anyhow!("cannot read tandem's resident memory"))
    };
    let before = rss()?;
    // Users apart from the ladder's, every one a new AOR.
    let first = 1000 + a.aors;
    let load = fresh.step(
        cx,
        false,
        a.memory_rate,
        a.memory_aors,
        first..first + a.memory_aors,
    )?;
    anyhow::ensure!(
        load.registrations_ok > 0,
        "no registration succeeded in the memory phase"
    );
    // Let anything the server does after answering (batched writes, compaction) settle.
    std::thread::sleep(Duration::from_secs(1));
    let after = rss()?;
    Ok((after as f64 - before as f64) * 100_000.0 / load.registrations_ok as f64)
}

/// Tandem at `--hog-rate` REGISTER/s, quiet and then beside the disk hog of `bench kv`, each
/// time after an fsync probe on the same filesystem: REGISTER p99 against fsync p99.
fn hog(cx: &Ctx<'_>) -> anyhow::Result<Hog> {
    let a = cx.args;
    let fresh = Fresh::start(cx, Kind::Tandem, false)?;
    let dir = fresh.dir.path();
    let dur = Duration::from_secs_f64(a.hog_secs);
    let calls = (f64::from(a.hog_rate) * a.hog_secs).round() as u64;
    let phase = |with_hog: bool| -> anyhow::Result<(Percentiles, Step, f64)> {
        let disk_hog = if with_hog {
            Some(crate::kv::DiskHog::start(dir, false)?)
        } else {
            None
        };
        let fsync = Percentiles::from_nanos(&mut crate::kv::fsync_latency(dir, dur)?);
        let load = fresh.step(cx, false, a.hog_rate, calls, 1000..1000 + a.aors)?;
        let mib_per_sec = disk_hog.map_or(0.0, |h| h.stop());
        Ok((fsync, load, mib_per_sec))
    };
    let quiet = phase(false)?;
    let loud = phase(true)?;
    Ok(Hog::new(a.hog_rate, quiet, loud))
}
