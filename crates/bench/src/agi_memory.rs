//! `tandem bench agi-memory`: what one FastAGI session costs in memory, the figure behind the
//! default `max_sessions`.
//!
//! A `tandem serve` child is made to hold N sessions at once, in one of two states, and its
//! resident memory is read from /proc before and while it holds them:
//! - **idle**: the header read and routed, the handler waiting on Asterisk's reply to its first
//!   command (the `health` route's first SET VARIABLE left unanswered);
//! - **long command**: the `example` route after six commands, inside STREAM FILE (a prompt, or a
//!   `Dial` through EXEC: Asterisk answers only when it ends).
//!
//! The kernel's side is read alongside: its slab memory (`Slab` in /proc/meminfo: sockets, files,
//! epoll entries) and its TCP buffers (`mem` in /proc/net/sockstat), both for the two ends of each
//! loopback connection and machine-wide, so other activity blurs them a little. Each run starts a
//! fresh server, so no run inherits another's heap.

use super::report::{BenchReport, Table, median};
use asterisk_emu::Plan;
use clap::Args;
use indicatif::ProgressBar;
use serde::Serialize;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// Sessions held at once in each measurement.
    #[arg(long, default_value_t = 4_000)]
    pub sessions: usize,
    /// Runs per state, each on a fresh server; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A state a session is held in: its name, the route, and the command left unanswered.
struct HeldState {
    name: &'static str,
    route: &'static str,
    hold_at: usize,
    what: &'static str,
}

const STATES: [HeldState; 2] = [
    HeldState {
        name: "idle",
        route: "health",
        hold_at: 1,
        what: "header routed, first command unanswered",
    },
    HeldState {
        name: "long command",
        route: "example",
        hold_at: 7,
        what: "six commands done, inside STREAM FILE",
    },
];

/// Connections opened at once; the next batch waits until these are held, so that the
/// listening sockets' backlog never overflows into SYN retries.
const BATCH: usize = 256;

#[derive(Debug, Clone, Serialize)]
pub struct StateFigures {
    pub state: String,
    pub route: String,
    pub held_at_command: usize,
    /// Server RSS growth per session held, bytes (median over runs).
    pub rss_bytes_per_session: f64,
    /// Kernel TCP buffer memory per connection, both ends, bytes (median over runs).
    pub kernel_tcp_bytes_per_connection: f64,
    /// Kernel slab memory per connection, both ends, bytes (median over runs).
    pub kernel_slab_bytes_per_connection: f64,
    /// Server RSS with no session, bytes (median over runs).
    pub rss_baseline_bytes: f64,
    pub runs_rss_bytes_per_session: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct MemoryReport {
    pub sessions: usize,
    pub runs: usize,
    pub states: Vec<StateFigures>,
    /// The soft file-descriptor limit a server started now would run with (the hard limit).
    pub fd_limit: u64,
    /// The `max_sessions` Tandem would choose with that limit.
    pub default_max_sessions: usize,
    /// What that many sessions in a long command would take, bytes.
    pub default_max_sessions_rss_bytes: f64,
}

impl BenchReport for MemoryReport {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "Memory per FastAGI session: {} sessions held at once, {} runs per state on a fresh \
             server (medians)\n",
            self.sessions, self.runs
        )?;
        let mut t = Table::new([
            "state",
            "held at",
            "RSS KiB/session",
            "kernel slab KiB/connection",
            "kernel TCP KiB/connection",
            "server RSS at rest MiB",
        ]);
        for (s, state) in self.states.iter().zip(&STATES) {
            t.row([
                format!("{} ({})", s.state, state.what),
                format!("{} command {}", s.route, s.held_at_command),
                format!("{:.2}", s.rss_bytes_per_session / 1024.0),
                format!("{:.2}", s.kernel_slab_bytes_per_connection / 1024.0),
                format!("{:.2}", s.kernel_tcp_bytes_per_connection / 1024.0),
                format!("{:.1}", s.rss_baseline_bytes / 1048576.0),
            ]);
        }
        t.write(out)?;
        writeln!(
            out,
            "\nfile-descriptor limit {} gives max_sessions = {}; that many sessions in a long \
             command would take {:.0} MiB",
            self.fd_limit,
            self.default_max_sessions,
            self.default_max_sessions_rss_bytes / 1048576.0
        )
    }
}

pub fn run(args: MemoryArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.sessions >= 1 && args.runs >= 1,
        "--sessions and --runs must be positive"
    );
    // This process holds one end of every connection.
    let (_, fd_limit) = fastagi::runtime::raise_fd_limit()?;
    anyhow::ensure!(
        (args.sessions as u64) * 2 + 256 < fd_limit,
        "--sessions {}: the file-descriptor limit {fd_limit} holds both ends of about {} \
         connections; use fewer",
        args.sessions,
        fd_limit.saturating_sub(256) / 2
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let bar = crate::report::progress_bar(
        args.json,
        (args.runs * STATES.len() * args.sessions) as u64,
        "{bar:30} {pos}/{len} sessions held  {msg}",
    )?;
    let mut samples: Vec<Vec<Sample>> = STATES.iter().map(|_| Vec::new()).collect();
    for run in 0..args.runs {
        for (i, state) in STATES.iter().enumerate() {
            bar.set_message(format!("run {} of {}: {}", run + 1, args.runs, state.name));
            samples[i].push(runtime.block_on(measure(state, args.sessions, &bar))?);
        }
    }
    bar.finish_and_clear();
    let states: Vec<StateFigures> = STATES
        .iter()
        .zip(&samples)
        .map(|(state, runs)| {
            let per: Vec<f64> = runs.iter().map(|s| s.rss_per_session).collect();
            StateFigures {
                state: state.name.into(),
                route: state.route.into(),
                held_at_command: state.hold_at,
                rss_bytes_per_session: median(&per),
                kernel_tcp_bytes_per_connection: median(
                    &runs
                        .iter()
                        .map(|s| s.kernel_tcp_per_connection)
                        .collect::<Vec<_>>(),
                ),
                kernel_slab_bytes_per_connection: median(
                    &runs
                        .iter()
                        .map(|s| s.kernel_slab_per_connection)
                        .collect::<Vec<_>>(),
                ),
                rss_baseline_bytes: median(&runs.iter().map(|s| s.baseline).collect::<Vec<_>>()),
                runs_rss_bytes_per_session: per,
            }
        })
        .collect();
    let default_max_sessions = fastagi::runtime::sessions_for_fd_limit(fd_limit);
    let long = states
        .iter()
        .map(|s| s.rss_bytes_per_session)
        .fold(0.0, f64::max);
    let report = MemoryReport {
        sessions: args.sessions,
        runs: args.runs,
        fd_limit,
        default_max_sessions,
        default_max_sessions_rss_bytes: long * default_max_sessions as f64,
        states,
    };
    super::report::emit(&report, args.json)
}

struct Sample {
    baseline: f64,
    rss_per_session: f64,
    kernel_tcp_per_connection: f64,
    kernel_slab_per_connection: f64,
}

/// A `tandem serve` child with a session limit above the sessions to hold.
struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(sessions: usize) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let port = super::agi::free_port()?;
    let config = super::agi::write_serve_config(
        dir.path(),
        port,
        // The idle state holds an unanswered SET VARIABLE, which immediate_command_timeout_ms
        // would end after 30 s: a run holding thousands may take longer.
        &format!(
            "max_sessions = {}\nimmediate_command_timeout_ms = 0\n",
            sessions + 64
        ),
        "",
    )?;
    let child = Command::new(std::env::current_exe()?)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("TANDEM_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    Ok(Server {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    })
}

async fn measure(state: &HeldState, sessions: usize, bar: &ProgressBar) -> anyhow::Result<Sample> {
    let server = start_server(sessions)?;
    let pid = server.child.id();
    wait_until_serving(server.addr).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss = || {
        procstat::process_rss_bytes(pid)
            .ok_or_else(|| anyhow::anyhow!("cannot read the memory of process {pid}"))
    };
    let baseline = rss()? as f64;
    let kernel_before = kernel_tcp_bytes()?;
    let slab_before = slab_bytes()?;
    let held = Arc::new(AtomicUsize::new(0));
    let plan = Plan {
        hold_at: Some(state.hold_at),
        held: Some(held.clone()),
        record: false,
        idle_timeout: Duration::from_secs(60),
        ..Plan::route(state.route)
    };
    let mut tasks = Vec::with_capacity(sessions);
    for batch in (0..sessions).collect::<Vec<_>>().chunks(BATCH) {
        for &n in batch {
            let plan = plan.clone();
            let addr = server.addr;
            tasks.push(tokio::spawn(async move {
                asterisk_emu::run(addr, &plan, n as u64 + 1).await
            }));
        }
        let want = batch.last().map_or(0, |n| n + 1);
        wait_for_held(&held, want, &mut tasks, bar).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let holding = rss()? as f64;
    let kernel_held = kernel_tcp_bytes()?;
    let slab_held = slab_bytes()?;
    for t in &tasks {
        t.abort();
    }
    Ok(Sample {
        baseline,
        rss_per_session: (holding - baseline) / sessions as f64,
        kernel_tcp_per_connection: kernel_held.saturating_sub(kernel_before) as f64
            / sessions as f64,
        kernel_slab_per_connection: (slab_held as f64 - slab_before as f64) / sessions as f64,
    })
}

/// Waits until `want` sessions are held; a session that ended instead is an error.
async fn wait_for_held(
    held: &AtomicUsize,
    want: usize,
    tasks: &mut [tokio::task::JoinHandle<Result<asterisk_emu::Outcome, asterisk_emu::EmuError>>],
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut shown = held.load(Ordering::Relaxed);
    loop {
        let now = held.load(Ordering::Relaxed);
        bar.inc((now - shown) as u64);
        shown = now;
        if now >= want {
            return Ok(());
        }
        if let Some(done) = tasks.iter_mut().find(|t| t.is_finished()) {
            let outcome = done.await?;
            anyhow::bail!("a session ended instead of holding: {outcome:?}");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {now} of {want} sessions held after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn wait_until_serving(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let plan = Plan::route("health");
    loop {
        match asterisk_emu::run(addr, &plan, 0).await {
            Ok(o) if o.status == asterisk_emu::AgiStatus::Success => return Ok(()),
            Ok(o) => anyhow::bail!("tandem at {addr} does not serve `health`: {o:?}"),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => anyhow::bail!("tandem did not start serving on {addr}: {e}"),
        }
    }
}

/// Memory the kernel holds for TCP sockets: `mem` of the `TCP:` line of /proc/net/sockstat,
/// in pages.
fn kernel_tcp_bytes() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/net/sockstat")?;
    let pages = text
        .lines()
        .find_map(|l| l.strip_prefix("TCP: "))
        .and_then(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words
                .windows(2)
                .find(|w| w[0] == "mem")
                .and_then(|w| w[1].parse::<u64>().ok())
        })
        .ok_or_else(|| anyhow::anyhow!("/proc/net/sockstat: no TCP mem figure"))?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    Ok(pages * page)
}

/// The kernel's slab memory: `Slab` of /proc/meminfo, in bytes.
fn slab_bytes() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("Slab:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| anyhow::anyhow!("/proc/meminfo: no Slab figure"))
}
