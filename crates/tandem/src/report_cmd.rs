//! `tandem report`: a group's figures per hour, day or ISO week (`cdr::report`), read from the
//! rollups the CDR database keeps as calls are stored: a table, one JSON object (`--json`) or
//! CSV (`--csv`, the columns of `cdr::ReportRow::COLUMNS`, the total last). `--groups` lists
//! the groups with figures; `--rebuild` counts every stored call again into the groups of
//! `--config` (for groups added after their calls were stored; SQLite). `--send-now` sends the
//! daily report of `--config`'s `[reports]` at once (`crate::reports`).

use std::io::Write;
use std::path::PathBuf;

use ::cdr::report::{PeriodKind, Report, ReportQuery, ReportRow};
use anyhow::Context;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub db: crate::cdr::CdrDatabase,
    /// The group: `all` (every call) or a `[[groups]]` name of tandem.toml.
    #[arg(long, default_value = "all")]
    pub group: String,
    /// One row per `hour`, `day` or `week` (ISO weeks, Monday 00:00 UTC).
    #[arg(long, default_value = "day", value_parser = PeriodKind::parse)]
    pub period: PeriodKind,
    /// The range's start (YYYY-MM-DD[THH:MM[:SS]] UTC, or Unix seconds), widened to its
    /// period's start. Default: 24 hours, 7 days or 8 weeks before --to.
    #[arg(long)]
    pub from: Option<String>,
    /// The range's end (exclusive), widened to its period's end. Default: now.
    #[arg(long)]
    pub to: Option<String>,
    /// The report as one JSON object (rows, total).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// The report as CSV with a header line, the total as the last row.
    #[arg(long)]
    pub csv: bool,
    /// List the groups that have figures, `all` first.
    #[arg(long, conflicts_with_all = ["json", "csv", "rebuild"])]
    pub groups: bool,
    /// Count every stored call again into `all` and the `[[groups]]` of --config, replacing
    /// the figures kept (a scan of every call: for groups added after their calls). SQLite.
    #[arg(long, requires = "config")]
    pub rebuild: bool,
    /// tandem.toml, for its `[[groups]]` (--rebuild), or its `[reports]` (--send-now).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Send `[reports]`' daily email of --config now: each group's last `email_days` days up
    /// to the end of yesterday (UTC), read from the CDR database serve uses with that file.
    #[arg(long, requires = "config", conflicts_with_all = ["json", "csv", "groups", "rebuild"])]
    pub send_now: bool,
    /// With --send-now: to this address instead of `email_to` (repeat for several).
    #[arg(long, value_name = "ADDRESS", requires = "send_now")]
    pub email_to: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.send_now {
        let path = args.config.as_deref().expect("clap requires --config");
        return crate::reports::send_now(path, args.email_to);
    }
    if args.rebuild {
        anyhow::ensure!(
            args.db.cdr_postgres.is_none(),
            "--rebuild: PostgreSQL's figures are rebuilt by the collector's database owner; \
             this command rebuilds an SQLite CDR database"
        );
        let path = args.config.as_deref().expect("clap requires --config");
        let config = crate::config::Config::load(path)?;
        let mut store = ::cdr::SqliteStore::open(&args.db.cdr_db)
            .with_context(|| format!("opening {}", args.db.cdr_db.display()))?;
        store.set_groups(config.groups()?);
        let n = store.rebuild_reports()?;
        println!(
            "{n} calls counted again into all and {} groups",
            config.groups.len()
        );
        return Ok(());
    }
    let mut store = sensor::records::open_store(&args.db.cdr_db, args.db.cdr_postgres.as_deref())?;
    let mut out = std::io::stdout().lock();
    if args.groups {
        for g in store.report_groups()? {
            writeln!(out, "{g}")?;
        }
        return Ok(());
    }
    let time = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<i64>> {
        v.as_deref()
            .map(|t| {
                utc::parse_us(t).with_context(|| {
                    format!("--{flag} {t:?}: give YYYY-MM-DD[THH:MM[:SS]] (UTC) or Unix seconds")
                })
            })
            .transpose()
    };
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let to_us = time("to", &args.to)?.unwrap_or(now_us);
    let back = match args.period {
        PeriodKind::Hour => 24,
        PeriodKind::Day => 7,
        PeriodKind::Week => 8,
    } * args.period.len_us();
    let from_us = time("from", &args.from)?.unwrap_or(to_us - back);
    let q = ReportQuery {
        group: args.group.clone(),
        period: args.period,
        from_us,
        to_us,
    };
    let report = store.report(&q)?;
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else if args.csv {
        write_csv(&mut out, &report)?;
    } else {
        write_table(&mut out, &report)?;
    }
    Ok(())
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

fn write_csv(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    writeln!(out, "{}", ReportRow::COLUMNS.join(","))?;
    for row in r.rows.iter().chain([&r.total]) {
        let fields: Vec<String> = row.fields().iter().map(|f| csv_field(f)).collect();
        writeln!(out, "{}", fields.join(","))?;
    }
    Ok(())
}

fn write_table(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    writeln!(
        out,
        "group {} per {}, {} to {} (UTC)",
        r.group,
        r.period.as_str(),
        utc::format_s(r.from_us.div_euclid(1_000_000)),
        utc::format_s(r.to_us.div_euclid(1_000_000))
    )?;
    let head = [
        "period",
        "calls",
        "answered",
        "ASR%",
        "NER%",
        "ACD s",
        "PDD p50",
        "PDD p95",
        "MOS<3.6%",
        "loss p95%",
        "jit p95",
        "1-way",
        "no RTP",
        "peak",
        "top failures",
    ];
    let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |v| format!("{v:.d$}"));
    let mut lines: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    for row in r.rows.iter().chain([&r.total]) {
        lines.push(vec![
            row.label.clone(),
            row.calls.to_string(),
            row.answered.to_string(),
            f(row.asr_pct, 1),
            f(row.ner_pct, 1),
            f(row.acd_s, 1),
            f(row.pdd_median_ms, 0),
            f(row.pdd_p95_ms, 0),
            f(row.mos_below_3_6_pct, 1),
            f(row.loss_p95_pct, 2),
            f(row.jitter_p95_ms, 1),
            row.one_way.to_string(),
            row.no_rtp.to_string(),
            row.peak_concurrent.to_string(),
            row.failures
                .iter()
                .take(3)
                .map(|c| format!("{}:{}", c.code, c.calls))
                .collect::<Vec<_>>()
                .join(" "),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
        .collect();
    for l in &lines {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 || i == l.len() - 1 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}
