//! The measurement behind `tandem bench report`, built alone (`cargo run --release -p cdr
//! --example report_bench -- CDRS DAYS READS DIR`): seeds DIR/cdr.sqlite3 with CDRS synthetic
//! calls over the last DAYS days and their rollups (once; a file already there is reused), then
//! prints each group's report time against its `GROUP BY` as one JSON object.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let cdrs: u64 = arg(0, "1000000").parse()?;
    let days: i64 = arg(1, "30").parse()?;
    let reads: usize = arg(2, "20").parse()?;
    let dir = std::path::PathBuf::from(arg(3, "report-bench"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("cdr.sqlite3");
    let day_us = 86_400_000_000i64;
    // Whole days, so that the report's range and the seeded calls are the same.
    let to_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_micros() as i64
        / day_us
        * day_us;
    let from_us = to_us - days * day_us;
    let mut load_s = None;
    if !path.exists() {
        let t = Instant::now();
        let records = cdr::seed::synthetic_calls(cdrs, from_us, to_us, 7);
        cdr::seed::bulk_load_sqlite_grouped(&path, records, &cdr::report_bench::bench_groups())?;
        load_s = Some(t.elapsed().as_secs_f64());
    }
    let groups = cdr::report_bench::sqlite(&path, from_us, to_us, reads)?;
    let out = serde_json::json!({
        "backend": "sqlite",
        "cdrs": cdrs,
        "days": days,
        "reads": reads,
        "load_with_rollups_s": load_s,
        "groups": groups,
    });
    println!("{out}");
    Ok(())
}
