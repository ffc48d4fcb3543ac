//! `tandem`: one binary that runs beside Asterisk/FreePBX.
//!
//! This crate only wires the library crates together: the command line (clap), the configuration
//! file (serde + TOML), logging, and the drivers of the benchmarks. Protocol logic lives in the
//! library crates (see ARCHITECTURE.md).

mod alerts;
mod alerts_cmd;
mod alerts_metrics;
mod capture;
mod cdr;
mod config;
mod data_dir;
mod db;
mod doctor;
mod replay;
mod report_cmd;
mod reports;
mod sensor_cmd;
mod serve;
mod signals;
mod sip;
mod user;

use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

const LOG_HELP: &str = "\
Logging:
  Logs go to stderr; stdout carries only data (tables, --json, db get).
  TANDEM_LOG   a tracing filter, e.g. `info` (the default; `warn` for bench), `debug`, `info,fastagi=debug`
  RUST_LOG     read when TANDEM_LOG is unset
  NO_COLOR     set to any value: no colour even on a terminal (never any when not a terminal)";

/// `--data-dir`, as every command that opens Tandem's files takes it.
#[derive(clap::Args, Debug)]
pub struct DataDir {
    /// Directory of Tandem's data: the store (kv.sqlite3), the console's accounts
    /// (console.sqlite3), the metrics history (history.sqlite3). The default is [kv] data_dir
    /// of /etc/tandem/tandem.toml when that file exists (a packaged install), else tandem-data.
    /// Run as root on a directory of another user's (the service's), the command runs as that
    /// user, so the files stay the service's.
    #[arg(
        long = "data-dir",
        value_name = "DIR",
        default_value_os_t = data_dir::default_path(),
        env = "TANDEM_DATA_DIR",
        global = true
    )]
    pub path: std::path::PathBuf,
}

/// Tandem: a performance companion for Asterisk and FreePBX.
#[derive(Parser, Debug)]
#[command(
    name = "tandem",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = LOG_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run Tandem's services: FastAGI (127.0.0.1:4573), metrics (127.0.0.1:9573) and the web
    /// console (127.0.0.1:9574).
    Serve(serve::ServeArgs),
    /// Measure Tandem against its baselines and peers (a table, or one JSON object with --json).
    #[command(subcommand)]
    Bench(::bench::BenchCommand),
    /// Read and write the key-value store; import and export Asterisk's astdb.sqlite3.
    Db(db::Args),
    /// Analyse capture files, a live interface or HEP: calls, RTP stream quality, CDRs.
    Capture(Box<capture::Args>),
    /// Query the stored call detail records.
    Cdr(self::cdr::Args),
    /// Send the frames of capture files onto an interface (original pace, scaled, or a fixed rate).
    Replay(replay::Args),
    /// Manage the web console's users and API tokens (works while `serve` runs).
    User(user::Args),
    /// The SIP registrar's digest users and its bindings.
    Sip(sip::Args),
    /// The sensors a collector knows: add (prints a token once), list, del (works while
    /// `serve` runs).
    Sensor(sensor_cmd::Args),
    /// Alert rules tried on stored CDRs (`test`), and the alerts kept (`list`).
    Alerts(alerts_cmd::Args),
    /// A group's call figures per hour, day or week (ASR, NER, ACD, PDD, MOS, loss, jitter,
    /// failures, peak calls), from the CDR database's rollups: a table, --json or --csv;
    /// `--send-now` sends `[reports]`' daily email at once.
    Report(report_cmd::Args),
    /// Check what an installation gets wrong (configuration, ports, files, capture rights,
    /// console user, clock, databases, collector), each with its fix; exit 0, 1 (a check
    /// failed) or 2 (could not run).
    Doctor(self::doctor::Args),
}

impl Command {
    /// The data directory of a command that opens Tandem's files in it.
    fn data_dir(&self) -> Option<&std::path::Path> {
        match self {
            Command::Db(a) => Some(&a.data_dir.path),
            Command::User(a) => Some(&a.data_dir.path),
            Command::Sip(a) => Some(&a.data_dir.path),
            Command::Sensor(a) => Some(&a.data_dir.path),
            _ => None,
        }
    }
}

fn main() -> ExitCode {
    // Before any thread or file: whatever Tandem, a library or SQLite creates without an
    // explicit mode (a directory, a temporary file) is its owner's alone. The files that hold
    // secrets and calls get their modes explicitly too (`filemode`), so a umask is never what
    // protects them.
    filemode::set_umask();
    let cli = Cli::parse();
    if let Some(dir) = cli.command.data_dir()
        && let Err(e) = data_dir::act_as_owner(dir)
    {
        let _ = writeln!(std::io::stderr(), "{e:#}");
        return ExitCode::FAILURE;
    }
    // A benchmark's in-process servers (the collector, sensors) would log every session and
    // connection between its progress bars: warnings only, unless asked.
    init_logging(if matches!(cli.command, Command::Bench(_)) {
        "warn"
    } else {
        "info"
    });
    // `db` and `cdr` only print and end: they stop when their reader goes away (`| head`), as
    // `cat` does. Not serve or bench (they write to sockets and children's pipes), and not
    // capture: its CDR writer must store what it has accepted before the process ends, so a
    // closed stdout ends the capture through its error path instead (quietly: see below).
    if matches!(
        cli.command,
        Command::Db(_)
            | Command::Cdr(_)
            | Command::User(_)
            | Command::Sip(_)
            | Command::Sensor(_)
            | Command::Alerts(_)
            | Command::Report(_)
    ) {
        // SAFETY: called before any other thread exists; restores the default disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Bench(cmd) => ::bench::run(cmd),
        Command::Db(args) => db::run(args),
        Command::Capture(args) => capture::run(*args),
        Command::Cdr(args) => self::cdr::run(args),
        Command::Replay(args) => replay::run(args),
        Command::User(args) => user::run(args),
        Command::Sip(args) => sip::run(args),
        Command::Sensor(args) => sensor_cmd::run(args),
        Command::Alerts(args) => alerts_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Doctor(args) => return self::doctor::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`tandem capture --json | head`): nothing to report,
        // and the exit status a shell gives a command ended by SIGPIPE.
        Err(e) if reader_gone(&e) => ExitCode::from(141),
        Err(e) => {
            // Not eprintln!: a closed stderr must not turn an error into a panic.
            let _ = writeln!(std::io::stderr(), "{}", error_report(&e));
            ExitCode::FAILURE
        }
    }
}

/// Whether the error is a write to a pipe whose reader has closed it.
fn reader_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<sensor::SensorError>().is_some_and(|s| {
                matches!(s, sensor::SensorError::Output(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
            })
    })
}

/// A user error (a missing file, a locked store, a bad option) is its message chain and nothing
/// else: never a backtrace, whatever `RUST_BACKTRACE` says, because it is not a crash. A panic
/// is, and still prints its backtrace through the standard hook.
fn error_report(e: &anyhow::Error) -> String {
    let mut out = format!("Error: {e}");
    // A cause that a message above already quotes (an error that prints its source) is said once.
    let mut above = e.to_string();
    let causes: Vec<String> = e
        .chain()
        .skip(1)
        .map(|c| c.to_string())
        .filter(|c| {
            let repeated = above.contains(c.as_str());
            above = c.clone();
            !repeated
        })
        .collect();
    if !causes.is_empty() {
        out.push_str("\n\nCaused by:");
        for (i, cause) in causes.iter().enumerate() {
            out.push_str(&format!("\n    {i}: {cause}"));
        }
    }
    out
}

/// Logs go to stderr so that stdout stays clean for data (`--json`, `db get`).
/// `TANDEM_LOG` (or `RUST_LOG`) takes a tracing filter such as `info,fastagi=debug`.
/// Colour only on a terminal, and never under `NO_COLOR`: a log written to a file, a pipe or
/// journald carries no escape codes.
fn init_logging(default: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let filter = std::env::var("TANDEM_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| default.to_string());
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .init();
}
