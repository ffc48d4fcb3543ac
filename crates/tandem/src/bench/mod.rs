//! `tandem bench ...`: every benchmark prints a table for a person, or one JSON object with
//! `--json`, and compares against a baseline or peer measured in the same run.

// Not every benchmark uses every helper (Percentiles is for latency benchmarks).
#[allow(dead_code)]
pub mod report;
mod taskpool;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Taskpool vs Asterisk's threadpool design vs tokio: self-pushing tasks and serializer pairs.
    Taskpool(taskpool::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Taskpool(args) => taskpool::run(args),
    }
}
