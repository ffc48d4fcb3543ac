//! What every benchmark shares: the output contract (table or one JSON object) and the
//! statistics used to summarise samples (percentiles, medians of runs).

use serde::Serialize;
use std::io::Write;

/// A benchmark's result. `Serialize` gives the `--json` object; `print_table` the human view.
pub trait BenchReport: Serialize {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()>;
}

/// Prints `report` as one JSON object on one line (`json`) or as its table.
pub fn emit<R: BenchReport>(report: &R, json: bool) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
    } else {
        report.print_table(&mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// A plain text table: a header row and aligned columns. Numbers are right-aligned.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let row: Vec<String> = cells.into_iter().map(Into::into).collect();
        assert_eq!(
            row.len(),
            self.header.len(),
            "table row width must match its header"
        );
        self.rows.push(row);
        self
    }

    pub fn write(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |out: &mut dyn Write, cells: &[String]| -> std::io::Result<()> {
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let numeric = i > 0 && cell.chars().next().is_some_and(|c| c.is_ascii_digit());
                if i > 0 {
                    write!(out, "  ")?;
                }
                if numeric {
                    write!(out, "{cell:>w$}")?;
                } else {
                    write!(out, "{cell:<w$}")?;
                }
            }
            writeln!(out)
        };
        line(out, &self.header)?;
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        writeln!(out, "{}", "-".repeat(total))?;
        for row in &self.rows {
            line(out, row)?;
        }
        Ok(())
    }
}

/// A progress bar on stderr for the person watching a benchmark: hidden under `--json`
/// (`quiet`) and when stderr is not a terminal, so that it never mixes into captured output.
pub fn progress_bar(
    quiet: bool,
    len: u64,
    template: &str,
) -> anyhow::Result<indicatif::ProgressBar> {
    use indicatif::{ProgressBar, ProgressStyle};
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return Ok(ProgressBar::hidden());
    }
    let bar = ProgressBar::new(len);
    bar.set_style(ProgressStyle::with_template(template)?);
    Ok(bar)
}

/// Latency percentiles of a set of samples, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    /// Summarises samples given in nanoseconds. Sorts `samples_ns` in place.
    pub fn from_nanos(samples_ns: &mut [u64]) -> Self {
        if samples_ns.is_empty() {
            return Percentiles::default();
        }
        samples_ns.sort_unstable();
        let at = |q: f64| -> f64 {
            // Nearest-rank percentile: the smallest sample with at least q of the samples at or
            // below it. No interpolation, so every figure is a latency that really happened.
            let rank = ((q * samples_ns.len() as f64).ceil() as usize).clamp(1, samples_ns.len());
            samples_ns[rank - 1] as f64 / 1_000.0
        };
        Percentiles {
            count: samples_ns.len(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: samples_ns[samples_ns.len() - 1] as f64 / 1_000.0,
        }
    }
}

/// The median of several runs' figures (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    assert!(!values.is_empty(), "median of no runs");
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let p = Percentiles::from_nanos(&mut s);
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50_us, 500.0);
        assert_eq!(p.p99_us, 990.0);
        assert_eq!(p.p999_us, 999.0);
        assert_eq!(p.max_us, 1000.0);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
