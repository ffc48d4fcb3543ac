//! `tandem bench ...`: every benchmark prints a table for a person, or one JSON object with
//! `--json`, and compares against a baseline or peer measured in the same run.

pub mod kv;
pub mod report;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// The key-value store against an astdb replica and SQLite per-write transactions.
    Kv(kv::Args),
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Kv(args) => kv::run(args),
    }
}
