//! The registrar benchmark's table: contestants, each one's steps, memory, the disk hog, goals.

use super::report::RegistrarReport;
use crate::report::{BenchReport, Table};
use std::io::Write;

impl BenchReport for RegistrarReport {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "SIP registrar: REGISTER over UDP on loopback from SIPp, {} AORs, ladder {:?}/s, \
             {} s steps, sustained while < {}% fail; {} runs (medians). {} cores shared by \
             SIPp, the server and the capture; load average {} before, {} after.\n",
            self.aors,
            self.rates_per_sec,
            self.step_secs,
            self.max_fail_percent,
            self.runs,
            self.cores,
            self.load_average_start
                .map_or("-".into(), |l| format!("{l:.2}")),
            self.load_average_end
                .map_or("-".into(), |l| format!("{l:.2}")),
        )?;
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        let lr = self.latency_rate_per_sec;
        let mut t = Table::new([
            "server".to_string(),
            "auth".into(),
            "sustained/s".into(),
            format!("p50 ms @{lr}/s"),
            format!("p99 ms @{lr}/s"),
            "CPU µs/reg".into(),
            "log errors".into(),
            "stopped by".into(),
        ]);
        for c in &self.contestants {
            t.row([
                c.description.to_string(),
                if c.auth { "MD5" } else { "none" }.into(),
                format!("{:.0}", c.sustained_per_sec),
                ms(c.p50_ms_at_latency_rate),
                ms(c.p99_ms_at_latency_rate),
                c.cpu_us_per_register
                    .map_or("-".into(), |v| format!("{v:.1}")),
                c.server_error_lines.to_string(),
                c.stopped_by.clone(),
            ]);
        }
        t.write(out)?;
        for c in &self.contestants {
            writeln!(
                out,
                "\n{}, auth {}: the median run's steps (runs: {:?}/s)",
                c.description,
                if c.auth { "MD5" } else { "none" },
                c.runs_sustained_per_sec
                    .iter()
                    .map(|r| r.round() as u64)
                    .collect::<Vec<_>>()
            )?;
            let mut t = Table::new([
                "asked/s",
                "served/s",
                "failed %",
                "timed out",
                "retrans",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "server CPU %",
                "SIPp CPU %",
                "SIPp procs",
                "drops",
                "tries",
            ]);
            for s in &c.steps {
                t.row([
                    s.asked_per_sec.to_string(),
                    format!("{:.0}", s.served_per_sec),
                    format!("{:.2}", s.fail_percent),
                    s.timed_out.to_string(),
                    s.retransmissions.to_string(),
                    format!("{:.2}", s.p50_ms),
                    format!("{:.2}", s.p99_ms),
                    format!("{:.2}", s.p999_ms),
                    format!("{:.0}", s.server_cpu_percent),
                    format!("{:.0}", s.sipp_cpu_percent),
                    s.sipp_processes.to_string(),
                    s.wire_drops.to_string(),
                    s.tries.to_string(),
                ]);
            }
            t.write(out)?;
        }
        if let Some(m) = self.tandem_rss_bytes_per_100k_aors {
            writeln!(
                out,
                "\nTandem resident memory per 100,000 AORs: {:.1} MiB (after {} AORs; runs {:?} MiB)",
                m / f64::from(1 << 20),
                self.memory_aors,
                self.runs_rss_bytes_per_100k_aors
                    .iter()
                    .map(|b| (b / f64::from(1 << 20) * 10.0).round() / 10.0)
                    .collect::<Vec<_>>()
            )?;
        }
        if let Some(h) = &self.hog {
            writeln!(
                out,
                "\nTandem at {}/s beside a disk hog ({:.0} MiB/s): REGISTER p50 {:.2} ms, p99 {:.2} ms; \
                 fsync p99 {:.2} ms; ratio {:.2} ({:.2} quiet: REGISTER p99 {:.2} ms, fsync p99 {:.2} ms); \
                 {:.2}% failed",
                h.rate_per_sec,
                h.hog_mib_per_sec,
                h.register_p50_ms,
                h.register_p99_ms,
                h.fsync_p99_ms,
                h.register_to_fsync_p99_ratio,
                h.register_p99_ms_quiet / h.fsync_p99_ms_quiet,
                h.register_p99_ms_quiet,
                h.fsync_p99_ms_quiet,
                h.register_fail_percent
            )?;
        }
        let mark = |g: Option<bool>| match g {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        let g = &self.goals;
        writeln!(out, "\ngoals:")?;
        writeln!(
            out,
            "  Tandem's durable rate >= Kamailio db_mode=0's: {} ({} vs {})",
            mark(g.tandem_rate_at_least_kamailio_memory),
            ms(self.tandem_registers_per_sec),
            ms(self.kamailio_memory_registers_per_sec)
        )?;
        writeln!(
            out,
            "  wire p99 <= 2 ms at {lr}/s: {} ({} ms; this filesystem's fsync p99, quiet: {} ms)",
            mark(g.tandem_wire_p99_at_most_2ms),
            ms(self.tandem_wire_p99_ms_at_latency_rate),
            ms(self.hog.as_ref().map(|h| h.fsync_p99_ms_quiet))
        )?;
        writeln!(
            out,
            "  REGISTER p99 / fsync p99 <= 3 beside the disk hog: {} ({})",
            mark(g.hog_ratio_at_most_3),
            ms(self.hog.as_ref().map(|h| h.register_to_fsync_p99_ratio))
        )
    }
}
