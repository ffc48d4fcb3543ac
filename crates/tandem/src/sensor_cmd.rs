//! `tandem sensor add|list|del`: the sensors a collector lets in (`collector::sensors`, the file
//! `sensors.sqlite3` in the data directory). Works while `tandem serve` runs: the collector
//! reads the list at each sensor's Hello.

use std::io::Write;

use clap::Subcommand;
use collector::{SensorList, sensors_file};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub(crate) data_dir: crate::DataDir,
    #[command(subcommand)]
    cmd: SensorCommand,
}

#[derive(Subcommand, Debug)]
enum SensorCommand {
    /// Add a sensor and print its token once (only its SHA-256 is kept): put it in a file on
    /// the sensor and give that file to `tandem capture --sensor-token-file`.
    Add { name: String },
    /// List the sensors: name and when each was added.
    List,
    /// Delete a sensor: its next connection is refused.
    Del { name: String },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir.path)?;
    let list = SensorList::open(&sensors_file(&args.data_dir.path))?;
    let mut out = std::io::stdout().lock();
    match args.cmd {
        SensorCommand::Add { name } => {
            let token = list.add(&name)?;
            writeln!(out, "{token}")?;
            eprintln!(
                "sensor {name} added: its token is shown once, keep it now (on the sensor: `tandem capture --collector HOST:PORT --sensor-id {name} --sensor-token-file FILE`)"
            );
        }
        SensorCommand::List => {
            for s in list.list()? {
                writeln!(out, "{}\t{}", s.name, utc::format_s(s.created_s))?;
            }
        }
        SensorCommand::Del { name } => {
            list.delete(&name)?;
            eprintln!("sensor {name} deleted: its next connection is refused");
        }
    }
    Ok(())
}
