//! `tandem bench ...`: every benchmark prints a table for a person, or one JSON object with
//! `--json`, and compares against a baseline or peer measured in the same run.
//!
//! The binary parses [`BenchCommand`] (each benchmark's options are defined beside it) and
//! calls [`run`]. Benchmarks that measure a server start `tandem serve` (and the wire floor,
//! `tandem bench agi-floor`) as child processes of the running executable, so that their CPU
//! time can be read from /proc; peers and replicas (Asterisk's threadpool in
//! `taskpool/threadpool.rs`, an astdb replica in `kv.rs`, panoramisk through `--peer`) run in the
//! same run. `report.rs` holds the output contract and the statistics.
//!
//! Never: reports a figure it did not measure in that run, or asserts a timing (figures go to
//! BENCHMARKS.md, not to tests). Errors are `anyhow` errors, reported to the person running the
//! benchmark as the binary's are.

pub mod agi;
mod agi_dialparties;
mod agi_memory;
mod agi_scripts;
mod alerts;
mod alerts_latency;
mod archive;
pub mod browser;
pub mod capture;
mod capture_live;
mod collector;
pub mod collector_hep;
mod console;
mod console_calls;
pub mod floor;
pub mod hep_load;
pub mod hep_replay;
pub mod kv;
mod registrar;
pub mod report;
mod reports;
pub mod rollup;
mod taskpool;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// FastAGI sessions/s and latency: Tandem's native `bench` route (ten commands) against the
    /// wire floor and any --peer, driven by the Asterisk emulator in the same run.
    Agi(agi::AgiArgs),
    /// Memory per FastAGI session, idle and in a long command: a `tandem serve` holding N
    /// sessions at once; the figure behind the default `max_sessions`.
    AgiMemory(agi_memory::MemoryArgs),
    /// The wire-floor server `bench agi` measures against (started by it; not for direct use).
    #[command(hide = true)]
    AgiFloor(floor::FloorArgs),
    /// Taskpool vs Asterisk's threadpool design vs tokio: self-pushing tasks and serializer pairs.
    Taskpool(taskpool::Args),
    /// The key-value store against an astdb replica and SQLite per-write transactions.
    Kv(kv::Args),
    /// Call monitor: RTP analysis rate per core, 2-core speedup, memory per SIP-only call, tshark on the same capture.
    Capture(capture::Args),
    /// Packet archive: files created and IO operations per minute, tar per minute against one
    /// pcap file per call, for the same concurrent synthetic calls.
    Archive(archive::Args),
    /// Live capture on a veth pair (root): rising packets/s until loss, and which counter shows where it began.
    CaptureLive(capture_live::Args),
    /// Metrics history: rows and time per sampling tick at 1 day, 90 days and 2 years of
    /// history, against a replica that re-averages every tier every minute; dashboard reads.
    Rollup(rollup::Args),
    /// Web console: server time of the dashboard page and its full load in headless Chromium
    /// at ranges from 1 h to 1 y over a seeded year of history; screenshots of each page.
    Console(console::Args),
    /// SIP registrar: REGISTER/s sustained (SIPp ladder) by Tandem with durable bindings
    /// against Kamailio in memory and on SQLite, with and without digest; wire p99, memory
    /// per 100,000 AORs, p99 beside a disk hog against fsync's.
    Registrar(registrar::Args),
    /// Distributed monitoring's centre: CDRs/s from 1, 4 and 16 sensors through a collector
    /// into PostgreSQL against a raw COPY floor of the same rows, and a sensor's journal
    /// backlog drained against the arrival rate.
    Collector(collector::Args),
    /// Alert rules: CPU per call with no rules, the 20 example rules and 200, as a share of
    /// the monitor's analysis of the same calls; memory per tracked key at 1,000,000 keys.
    Alerts(alerts::Args),
    /// Reports: a 30-day report per group over 10,000,000 CDRs from the rollups, against the
    /// same figures by a GROUP BY over the calls (the ratio).
    Report(reports::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Agi(args) if args.scripts => agi_scripts::run(&args),
        BenchCommand::Agi(args) if args.route == "dialparties" && args.target.is_none() => {
            agi_dialparties::run(&args)
        }
        BenchCommand::Agi(args) => agi::run(args),
        BenchCommand::AgiMemory(args) => agi_memory::run(args),
        BenchCommand::AgiFloor(args) => floor::run(args),
        BenchCommand::Taskpool(args) => taskpool::run(args),
        BenchCommand::Kv(args) => kv::run(args),
        BenchCommand::Capture(args) => capture::run(args),
        BenchCommand::Archive(args) => archive::run(args),
        BenchCommand::CaptureLive(args) => capture_live::run(args),
        BenchCommand::Rollup(args) => rollup::run(args),
        BenchCommand::Console(args) => console::run(args),
        BenchCommand::Registrar(args) => registrar::run(args),
        BenchCommand::Collector(args) => collector::run(args),
        BenchCommand::Alerts(args) => alerts::run(args),
        BenchCommand::Report(args) => reports::run(args),
    }
}
