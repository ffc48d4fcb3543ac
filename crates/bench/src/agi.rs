//! `tandem bench agi`: FastAGI sessions per second and latency, Tandem against the wire floor
//! and any peer, measured in the same run by the same Asterisk emulator.
//!
//! Every server runs as a child process so that its CPU time (user + system, from /proc) can be
//! divided by the sessions it served. Variants take turns run by run, so a slow patch of the
//! machine hurts them all alike; the figures are medians over the runs.

use super::report::{BenchReport, Percentiles, Table, median};
use asterisk_emu::{Load, Plan, Target, run_load};
use clap::Args;

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct AgiArgs {
    /// Sessions in flight at once (default 64; 4 with --scripts, where each is a process).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Length of each measured run, per server.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Runs per server; the figures are their medians.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Measure this server instead of starting Tandem (no floor is started then).
    #[arg(long, value_name = "ADDR")]
    pub target: Option<SocketAddr>,
    /// With --target: the server's process id, to report its CPU per session.
    #[arg(long, value_name = "PID", requires = "target")]
    pub target_pid: Option<u32>,
    /// The route to ask for. The default, `bench`, runs ten commands.
    #[arg(long, default_value = "bench")]
    pub route: String,
    /// Commands a session must have to count as a success (0: any number).
    #[arg(long, default_value_t = 10)]
    pub expect_commands: usize,
    /// A peer server to measure in the same run: NAME=COMMAND, where COMMAND starts a FastAGI
    /// server on the port written `{port}` that serves the route. Repeatable. Example:
    /// --peer 'panoramisk=python3 bench/peers/panoramisk_agi.py {port}'
    #[arg(long, value_name = "NAME=COMMAND")]
    pub peer: Vec<String>,
    /// Measure legacy AGI scripts instead: a sh and a Python script of three commands, forked
    /// per call by the emulator (classic AGI), run by Tandem per call, and prewarmed by Tandem.
    #[arg(long, conflicts_with_all = ["target", "peer"])]
    pub scripts: bool,
    /// With --scripts: calls per second in the latency phase (an open loop at a rate the
    /// machine can sustain, where prewarming shows; at full load no pool can outrun the CPU).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Warm-up per server before the measured runs, seconds (0: none).
    #[arg(long, default_value_t = 1.0)]
    pub warmup_seconds: f64,
    /// End each run after this many sessions, if it comes before --seconds: with --target and
    /// --warmup-seconds 0, the server serves exactly one readiness session plus runs × N (for
    /// counting its instructions per session under callgrind).
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<u64>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// How the load is played against every subject.
pub(super) struct RunShape {
    pub concurrency: usize,
    pub seconds: f64,
    pub runs: usize,
    pub warmup_seconds: f64,
    pub max_sessions: Option<u64>,
    /// No progress bar (JSON output).
    pub quiet: bool,
}

impl RunShape {
    /// The shape the command line asks for, with `concurrency` sessions in flight.
    pub(super) fn of(args: &AgiArgs, concurrency: usize) -> RunShape {
        RunShape {
            concurrency,
            seconds: args.seconds,
            runs: args.runs,
            warmup_seconds: args.warmup_seconds,
            max_sessions: args.max_sessions,
            quiet: args.json,
        }
    }
}

/// One server's figures, medians over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct ServerFigures {
    pub sessions: u64,
    pub errors: u64,
    pub sessions_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// User + system CPU of the server process per session, in microseconds (None when the
    /// process is not known).
    pub cpu_us_per_session: Option<f64>,
    pub runs_sessions_per_sec: Vec<f64>,
    pub error_samples: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct AgiReport {
    pub concurrency: usize,
    pub seconds: f64,
    pub runs: usize,
    pub route: String,
    // Tandem's (or the target's) figures, flat, as other tools read them.
    pub sessions: u64,
    pub errors: u64,
    pub sessions_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub server_cpu_us_per_session: Option<f64>,
    pub floor_sessions_per_sec: Option<f64>,
    pub floor_cpu_us_per_session: Option<f64>,
    /// Tandem's sessions/s over the floor's.
    pub ratio_to_floor: Option<f64>,
    pub servers: BTreeMap<String, ServerFigures>,
}

impl BenchReport for AgiReport {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "FastAGI sessions of route `{}`: {} concurrent, {} runs of {} s per server (medians)\n",
            self.route, self.concurrency, self.runs, self.seconds
        )?;
        let mut t = Table::new([
            "server",
            "sessions/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "CPU µs/session",
            "errors",
            "sessions",
        ]);
        for (name, f) in &self.servers {
            t.row([
                name.clone(),
                format!("{:.0}", f.sessions_per_sec),
                format!("{:.2}", f.p50_ms),
                format!("{:.2}", f.p99_ms),
                format!("{:.2}", f.p999_ms),
                f.cpu_us_per_session
                    .map_or("-".into(), |c| format!("{c:.1}")),
                f.errors.to_string(),
                f.sessions.to_string(),
            ]);
        }
        t.write(out)?;
        if let Some(r) = self.ratio_to_floor {
            writeln!(
                out,
                "\ntandem / floor: {:.1}% of the wire floor's sessions/s",
                r * 100.0
            )?;
        }
        if let Some(tandem) = self.servers.get("tandem") {
            for (name, f) in self
                .servers
                .iter()
                .filter(|(n, _)| !["tandem", "floor"].contains(&n.as_str()))
            {
                write!(
                    out,
                    "tandem / {name}: {:.1}x the sessions/s",
                    tandem.sessions_per_sec / f.sessions_per_sec
                )?;
                if let (Some(a), Some(b)) = (tandem.cpu_us_per_session, f.cpu_us_per_session) {
                    write!(out, ", {:.1}x less CPU per session", b / a)?;
                }
                writeln!(out)?;
            }
        }
        for (name, f) in &self.servers {
            for e in &f.error_samples {
                writeln!(out, "error ({name}): {e}")?;
            }
        }
        Ok(())
    }
}

/// A server under test: what the load is played against, the session it plays, and, if the
/// server is our child, its process (for its CPU time).
pub(super) struct Subject {
    pub name: String,
    pub target: Target,
    pub plan: Plan,
    pub expect_commands: Option<usize>,
    /// Open loop at this rate instead of `concurrency` sessions back to back.
    pub rate_per_sec: Option<f64>,
    pub pid: Option<u32>,
    pub child: Option<Child>,
}

impl Drop for Subject {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The session every subject plays unless said otherwise: `route`, nothing recorded.
pub(super) fn load_plan(route: &str) -> Plan {
    Plan {
        idle_timeout: Duration::from_secs(10),
        record: false,
        ..Plan::route(route)
    }
}

/// Checks what both `bench agi` and `bench agi --scripts` need.
pub fn check_args(args: &AgiArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.runs >= 1 && args.seconds > 0.0,
        "--runs and --seconds must be positive"
    );
    Ok(())
}

/// `bench agi` against native routes; `--scripts` goes to [`super::agi_scripts::run`] instead,
/// which builds on this module (never the other way round).
pub fn run(args: AgiArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let concurrency = args.concurrency.unwrap_or(64);
    let expect = (args.expect_commands > 0).then_some(args.expect_commands);
    let plan = load_plan(&args.route);
    let mut subjects = Vec::new();
    match args.target {
        Some(addr) => subjects.push(Subject {
            name: "target".into(),
            target: Target::FastAgi(addr),
            plan: plan.clone(),
            expect_commands: expect,
            rate_per_sec: None,
            pid: args.target_pid,
            child: None,
        }),
        None => {
            let exe = std::env::current_exe()?;
            let port = free_port()?;
            let mut cmd = Command::new(&exe);
            let listen = format!("127.0.0.1:{port}");
            cmd.args([
                "serve",
                "--agi-listen",
                &listen,
                "--metrics-listen",
                "127.0.0.1:0",
                "--web-listen",
                "127.0.0.1:0",
            ])
            .env("TANDEM_LOG", "warn");
            subjects.push(spawn("tandem", cmd, port, &plan, expect)?);
            let port = free_port()?;
            let mut cmd = Command::new(&exe);
            cmd.args([
                "bench",
                "agi-floor",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ]);
            subjects.push(spawn("floor", cmd, port, &plan, expect)?);
        }
    }
    for peer in &args.peer {
        let (name, command) = peer
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--peer {peer:?}: expected NAME=COMMAND"))?;
        let port = free_port()?;
        let line = command.replace("{port}", &port.to_string());
        let words: Vec<&str> = line.split_whitespace().collect();
        anyhow::ensure!(!words.is_empty(), "--peer {name}: empty command");
        let mut cmd = Command::new(words[0]);
        cmd.args(&words[1..]);
        subjects.push(spawn(name, cmd, port, &plan, expect)?);
    }
    let shape = RunShape::of(&args, concurrency);
    let servers = measure(&subjects, &shape)?;
    let main = servers
        .get("tandem")
        .or_else(|| servers.get("target"))
        .cloned()
        .expect("a main subject");
    let floor = servers.get("floor").cloned();
    let report = AgiReport {
        concurrency,
        seconds: args.seconds,
        runs: args.runs,
        route: args.route.clone(),
        sessions: main.sessions,
        errors: main.errors,
        sessions_per_sec: main.sessions_per_sec,
        p50_ms: main.p50_ms,
        p99_ms: main.p99_ms,
        p999_ms: main.p999_ms,
        server_cpu_us_per_session: main.cpu_us_per_session,
        floor_sessions_per_sec: floor.as_ref().map(|f| f.sessions_per_sec),
        floor_cpu_us_per_session: floor.as_ref().and_then(|f| f.cpu_us_per_session),
        ratio_to_floor: floor
            .as_ref()
            .map(|f| main.sessions_per_sec / f.sessions_per_sec),
        servers,
    };
    super::report::emit(&report, args.json)
}

/// Plays `concurrency` sessions at once against each subject, `runs` times for `seconds`, the
/// subjects taking turns, after a warm-up each. Figures are medians over the runs.
pub(super) fn measure(
    subjects: &[Subject],
    shape: &RunShape,
) -> anyhow::Result<BTreeMap<String, ServerFigures>> {
    let RunShape {
        concurrency,
        seconds,
        runs,
        warmup_seconds,
        max_sessions,
        quiet,
    } = *shape;
    anyhow::ensure!(concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(
        warmup_seconds >= 0.0,
        "--warmup-seconds must not be negative"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    for s in subjects {
        runtime.block_on(wait_until_serving(s))?;
    }
    let load = |s: &Subject, seconds: f64| Load {
        target: s.target.clone(),
        plan: s.plan.clone(),
        concurrency,
        duration: Duration::from_secs_f64(seconds),
        max_sessions,
        expect_commands: s.expect_commands,
        rate_per_sec: s.rate_per_sec,
    };
    let total = subjects.len() * runs;
    let bar = crate::report::progress_bar(quiet, total as u64, "{bar:30} {pos}/{len} runs  {msg}")?;
    // Warm up every subject (connection paths, allocator, page cache) before measuring.
    for s in subjects.iter().filter(|_| warmup_seconds > 0.0) {
        bar.set_message(format!("warming up {}", s.name));
        runtime.block_on(run_load(load(s, warmup_seconds)));
    }
    let mut per_subject: Vec<Vec<(asterisk_emu::LoadReport, Option<f64>)>> =
        subjects.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        // Rotate the order so no subject always runs first or last.
        for k in 0..subjects.len() {
            let i = (k + run) % subjects.len();
            let s = &subjects[i];
            bar.set_message(format!("run {} of {runs}: {}", run + 1, s.name));
            let cpu_before = s.pid.and_then(procstat::process_cpu_seconds);
            let report = runtime.block_on(run_load(load(s, seconds)));
            let cpu = match (cpu_before, s.pid.and_then(procstat::process_cpu_seconds)) {
                (Some(a), Some(b)) => Some(b - a),
                _ => None,
            };
            per_subject[i].push((report, cpu));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(subjects
        .iter()
        .zip(per_subject)
        .map(|(s, runs)| (s.name.clone(), figures(&runs)))
        .collect())
}

fn figures(runs: &[(asterisk_emu::LoadReport, Option<f64>)]) -> ServerFigures {
    let rates: Vec<f64> = runs
        .iter()
        .map(|(r, _)| r.sessions as f64 / r.elapsed.as_secs_f64())
        .collect();
    let mut pct = Vec::new();
    for (r, _) in runs {
        let mut l = r.latencies_ns.clone();
        pct.push(Percentiles::from_nanos(&mut l));
    }
    let cpu: Vec<f64> = runs
        .iter()
        .filter_map(|(r, c)| {
            c.filter(|_| r.sessions > 0)
                .map(|c| c * 1e6 / r.sessions as f64)
        })
        .collect();
    let ms =
        |f: fn(&Percentiles) -> f64| median(&pct.iter().map(|p| f(p) / 1000.0).collect::<Vec<_>>());
    ServerFigures {
        sessions: runs.iter().map(|(r, _)| r.sessions).sum(),
        errors: runs.iter().map(|(r, _)| r.errors).sum(),
        sessions_per_sec: median(&rates),
        p50_ms: ms(|p| p.p50_us),
        p99_ms: ms(|p| p.p99_us),
        p999_ms: ms(|p| p.p999_us),
        cpu_us_per_session: (!cpu.is_empty()).then(|| median(&cpu)),
        runs_sessions_per_sec: rates,
        error_samples: runs
            .iter()
            .flat_map(|(r, _)| r.error_samples.clone())
            .take(3)
            .collect(),
    }
}

/// A port nobody listens on right now (the kernel's choice).
pub(super) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) fn spawn(
    name: &str,
    mut cmd: Command,
    port: u16,
    plan: &Plan,
    expect_commands: Option<usize>,
) -> anyhow::Result<Subject> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {name} ({cmd:?}): {e}"))?;
    Ok(Subject {
        name: name.to_string(),
        target: Target::FastAgi(SocketAddr::from(([127, 0, 0, 1], port))),
        plan: plan.clone(),
        expect_commands,
        rate_per_sec: None,
        pid: Some(child.id()),
        child: Some(child),
    })
}

/// Writes `DIR/tandem.toml` for a benchmark's `tandem serve`: FastAGI on `port` (with
/// `fastagi_extra` lines), metrics and console on free ports, the data under `DIR/data`, then
/// `extra` tables. Returns the file's path.
pub(super) fn write_serve_config(
    dir: &std::path::Path,
    port: u16,
    fastagi_extra: &str,
    extra: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("tandem.toml");
    std::fs::write(
        &path,
        format!(
            "[fastagi]\nlisten = \"127.0.0.1:{port}\"\n{fastagi_extra}\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n\n[web]\nlisten = \"127.0.0.1:0\"\n\n\
             [kv]\ndata_dir = {:?}\n\n{extra}",
            dir.join("data")
        ),
    )?;
    Ok(path)
}

/// Writes an executable script, creating its directory.
pub(super) fn write_script(path: &std::path::Path, body: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().expect("a script has a directory"))?;
    std::fs::write(path, body)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Starts `tandem serve --config CONFIG` (this executable), logging warnings only, serving
/// FastAGI on `port`.
pub(super) fn spawn_serve(
    name: &str,
    config: &std::path::Path,
    port: u16,
    plan: &Plan,
    expect_commands: Option<usize>,
) -> anyhow::Result<Subject> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("serve")
        .arg("--config")
        .arg(config)
        .env("TANDEM_LOG", "warn");
    spawn(name, cmd, port, plan, expect_commands)
}

/// Waits until the server completes one session. A bare connect-and-close is not enough (and
/// not harmless: it sends panoramisk's header loop into a spin at EOF that starves its event
/// loop), so readiness is one real session.
pub(super) async fn wait_until_serving(s: &Subject) -> anyhow::Result<()> {
    let Target::FastAgi(addr) = &s.target else {
        return Ok(());
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match asterisk_emu::run(*addr, &s.plan, 0).await {
            Ok(o) if o.status == asterisk_emu::AgiStatus::Success && o.violations.is_empty() => {
                return Ok(());
            }
            Ok(o) => anyhow::bail!(
                "{} at {addr} does not serve route {:?}: status {:?}, {} commands, {:?}",
                s.name,
                s.plan.script,
                o.status,
                o.commands,
                o.violations
            ),
            Err(asterisk_emu::EmuError::Connect { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => anyhow::bail!("{} did not start serving on {addr}: {e}", s.name),
        }
    }
}
