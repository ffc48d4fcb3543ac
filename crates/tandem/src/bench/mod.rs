//! `tandem bench ...`: every benchmark prints a table for a person, or one JSON object with
//! `--json`, and compares against a baseline or peer measured in the same run.

pub mod capture;
pub mod report;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Call monitor: RTP analysis rate per core, 2-core speedup, memory per SIP-only call, tshark on the same capture.
    Capture(capture::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Capture(args) => capture::run(args),
    }
}
