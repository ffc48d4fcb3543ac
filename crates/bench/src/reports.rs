//! `tandem bench report`: a 30-day report per group over millions of CDRs, drawn from the
//! rollups the CDR store keeps, against the same figures computed by a `GROUP BY` over the
//! `cdr` table in the same run (`cdr::report_bench`: what each side computes, and the check
//! that both agree). The calls are `cdr::seed`'s, bulk-loaded with their rollups computed by
//! the store's own code. SQLite.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use crate::report::{BenchReport, Table};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Synthetic CDRs seeded.
    #[arg(long, default_value_t = 10_000_000)]
    pub cdrs: u64,
    /// Days they span, up to the last midnight (UTC); the report covers them all.
    #[arg(long, default_value_t = 30)]
    pub days: i64,
    /// Reports drawn per group (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub reads: usize,
    /// Keep the seeded database here (and reuse it when it is there) instead of a temporary
    /// directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct ReportsBench {
    pub cdrs: u64,
    pub days: i64,
    /// Seconds to bulk-load the calls with their rollups (absent when reused).
    pub load_with_rollups_s: Option<f64>,
    pub groups: Vec<cdr::report_bench::GroupTiming>,
}

impl BenchReport for ReportsBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{} CDRs over {} days (SQLite){}",
            self.cdrs,
            self.days,
            self.load_with_rollups_s
                .map(|s| format!(", loaded with rollups in {s:.0} s"))
                .unwrap_or_default()
        )?;
        let mut t = Table::new([
            "group",
            "calls",
            "report p50 ms",
            "report max ms",
            "GROUP BY ms",
            "ratio",
        ]);
        for g in &self.groups {
            t.row([
                g.group.clone(),
                g.calls.to_string(),
                format!("{:.2}", g.report_ms_median),
                format!("{:.2}", g.report_ms_max),
                format!("{:.0}", g.group_by_ms),
                format!("{:.0}", g.ratio),
            ]);
        }
        t.write(out)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.cdrs > 0 && args.days > 0 && args.reads > 0,
        "--cdrs, --days and --reads must be at least 1"
    );
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("cdr.sqlite3");
    let day_us = 86_400_000_000i64;
    let to_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_micros() as i64
        / day_us
        * day_us;
    let from_us = to_us - args.days * day_us;
    let mut load = None;
    if !path.exists() {
        eprintln!("seeding {} CDRs with their rollups", args.cdrs);
        let t = Instant::now();
        let records = cdr::seed::synthetic_calls(args.cdrs, from_us, to_us, 7);
        cdr::seed::bulk_load_sqlite_grouped(&path, records, &cdr::report_bench::bench_groups())?;
        load = Some(t.elapsed().as_secs_f64());
    }
    let groups = cdr::report_bench::sqlite(&path, from_us, to_us, args.reads)?;
    crate::report::emit(
        &ReportsBench {
            cdrs: args.cdrs,
            days: args.days,
            load_with_rollups_s: load,
            groups,
        },
        args.json,
    )
}
