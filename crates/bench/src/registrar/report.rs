//! The registrar benchmark's figures: a step of the ladder, a contestant's medians over its
//! runs, the memory and disk-hog figures, the goals, and the table.

use super::server::Kind;
use super::sipp::Counters;
use super::wire::Wire;
use crate::report::{Percentiles, median};
use serde::Serialize;

/// A step is sustained when fewer than the allowed share fail and the server answered at
/// least this share of the rate asked (below it, the load was not carried, whoever's fault).
const SERVED_SHARE_MIN: f64 = 0.8;

/// One step of a ladder.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub asked_per_sec: u32,
    /// Registrations answered with 2xx per second, on the wire.
    pub served_per_sec: f64,
    pub registrations: u64,
    pub registrations_ok: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub fail_percent: f64,
    pub retransmissions: u64,
    /// REGISTER to 2xx on the wire.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub server_cpu_percent: f64,
    pub server_cpu_us_per_register: f64,
    pub sipp_cpu_percent: f64,
    pub sipp_processes: usize,
    pub sipp_call_rate_per_sec: f64,
    pub wire_drops: u64,
    pub sustained: bool,
    /// 2 when the first try was not sustained and the step ran again (the better try is kept).
    pub tries: u32,
}

impl Step {
    pub(super) fn new(
        asked_per_sec: u32,
        c: Counters,
        wire: &mut Wire,
        server_cpu_secs: f64,
        wall_secs: f64,
        max_fail_percent: f64,
    ) -> Step {
        let p = Percentiles::from_nanos(&mut wire.ok_latencies_ns);
        let fail_percent = if c.calls == 0 {
            100.0
        } else {
            c.failed as f64 * 100.0 / c.calls as f64
        };
        let served_per_sec = wire.ok_per_sec();
        Step {
            asked_per_sec,
            served_per_sec,
            registrations: c.calls,
            registrations_ok: c.successful,
            failed: c.failed,
            timed_out: c.timed_out,
            fail_percent,
            retransmissions: c.retransmissions,
            p50_ms: p.p50_us / 1000.0,
            p99_ms: p.p99_us / 1000.0,
            p999_ms: p.p999_us / 1000.0,
            server_cpu_percent: server_cpu_secs * 100.0 / wall_secs,
            server_cpu_us_per_register: server_cpu_secs * 1e6 / c.successful.max(1) as f64,
            sipp_cpu_percent: c.sipp_cpu_percent,
            sipp_processes: c.processes,
            sipp_call_rate_per_sec: c.sipp_call_rate_per_sec,
            wire_drops: wire.drops,
            sustained: fail_percent < max_fail_percent
                && served_per_sec >= SERVED_SHARE_MIN * f64::from(asked_per_sec),
            tries: 1,
        }
    }
}

/// One contestant (server, with or without authentication): medians over the runs.
#[derive(Debug, Serialize)]
pub struct Contestant {
    pub name: &'static str,
    pub description: &'static str,
    pub auth: bool,
    /// The highest rate served on a sustained step (registrations/s).
    pub sustained_per_sec: f64,
    pub runs_sustained_per_sec: Vec<f64>,
    pub p50_ms_at_latency_rate: Option<f64>,
    pub p99_ms_at_latency_rate: Option<f64>,
    /// Server CPU per registration at the highest sustained step, microseconds.
    pub cpu_us_per_register: Option<f64>,
    /// Why the median run's ladder ended.
    pub stopped_by: String,
    /// Error lines in the server's log over all runs (Kamailio logs a failed database write).
    pub server_error_lines: usize,
    /// The steps of the median run.
    pub steps: Vec<Step>,
}

impl Contestant {
    pub(super) fn from_runs(
        kind: Kind,
        auth: bool,
        runs: Vec<Vec<Step>>,
        latency_rate: u32,
        server_error_lines: usize,
    ) -> Contestant {
        let top = |steps: &[Step]| {
            steps
                .iter()
                .filter(|s| s.sustained)
                .max_by(|a, b| a.served_per_sec.total_cmp(&b.served_per_sec))
                .cloned()
        };
        let rates: Vec<f64> = runs
            .iter()
            .map(|r| top(r).map_or(0.0, |s| s.served_per_sec))
            .collect();
        let at = |f: fn(&Step) -> f64| {
            median_of(
                runs.iter()
                    .map(|r| r.iter().find(|s| s.asked_per_sec == latency_rate).map(f)),
            )
        };
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| rates[a].total_cmp(&rates[b]));
        let steps = runs[order[order.len() / 2]].clone();
        Contestant {
            name: kind.name(),
            description: kind.describe(),
            auth,
            sustained_per_sec: median(&rates),
            p50_ms_at_latency_rate: at(|s| s.p50_ms),
            p99_ms_at_latency_rate: at(|s| s.p99_ms),
            cpu_us_per_register: median_of(
                runs.iter()
                    .map(|r| top(r).map(|s| s.server_cpu_us_per_register)),
            ),
            stopped_by: stopped_by(&steps),
            server_error_lines,
            runs_sustained_per_sec: rates,
            steps,
        }
    }
}

fn stopped_by(steps: &[Step]) -> String {
    match steps.last() {
        None => "no step ran".into(),
        Some(s) if s.sustained => "the top of the ladder".into(),
        Some(s) if s.served_per_sec >= SERVED_SHARE_MIN * f64::from(s.asked_per_sec) => format!(
            "{:.1}% failed at {}/s ({} timed out)",
            s.fail_percent, s.asked_per_sec, s.timed_out
        ),
        Some(s) => format!(
            "served {:.0}/s of {}/s asked (SIPp {:.0}% CPU, server {:.0}%)",
            s.served_per_sec, s.asked_per_sec, s.sipp_cpu_percent, s.server_cpu_percent
        ),
    }
}

/// The 1-minute load average.
pub(super) fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    procstat::host::parse_loadavg(&text).map(|l| l[0])
}

/// Medians of the runs' values that exist.
pub(super) fn median_of(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.into_iter().flatten().collect();
    (!v.is_empty()).then(|| median(&v))
}

/// Tandem at a fixed rate after an fsync probe, quiet and beside the disk hog (one run).
#[derive(Debug, Clone, Serialize)]
pub struct Hog {
    pub rate_per_sec: u32,
    pub fsync_p99_ms_quiet: f64,
    pub register_p99_ms_quiet: f64,
    pub fsync_p99_ms: f64,
    pub register_p50_ms: f64,
    pub register_p99_ms: f64,
    pub register_to_fsync_p99_ratio: f64,
    pub register_fail_percent: f64,
    pub hog_mib_per_sec: f64,
}

impl Hog {
    pub(super) fn new(
        rate_per_sec: u32,
        (quiet_fsync, quiet, _): (Percentiles, Step, f64),
        (fsync, load, hog_mib_per_sec): (Percentiles, Step, f64),
    ) -> Hog {
        let fsync_p99_ms = fsync.p99_us / 1000.0;
        Hog {
            rate_per_sec,
            fsync_p99_ms_quiet: quiet_fsync.p99_us / 1000.0,
            register_p99_ms_quiet: quiet.p99_ms,
            fsync_p99_ms,
            register_p50_ms: load.p50_ms,
            register_p99_ms: load.p99_ms,
            register_to_fsync_p99_ratio: load.p99_ms / fsync_p99_ms,
            register_fail_percent: load.fail_percent,
            hog_mib_per_sec,
        }
    }

    /// Every figure the median of the runs' (the ratio too, not a ratio of medians).
    fn median(runs: &[Hog]) -> Option<Hog> {
        let first = runs.first()?;
        let m = |f: fn(&Hog) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        Some(Hog {
            rate_per_sec: first.rate_per_sec,
            fsync_p99_ms_quiet: m(|h| h.fsync_p99_ms_quiet),
            register_p99_ms_quiet: m(|h| h.register_p99_ms_quiet),
            fsync_p99_ms: m(|h| h.fsync_p99_ms),
            register_p50_ms: m(|h| h.register_p50_ms),
            register_p99_ms: m(|h| h.register_p99_ms),
            register_to_fsync_p99_ratio: m(|h| h.register_to_fsync_p99_ratio),
            register_fail_percent: m(|h| h.register_fail_percent),
            hog_mib_per_sec: m(|h| h.hog_mib_per_sec),
        })
    }
}

/// The goals; `None` where the run did not measure what a goal needs.
#[derive(Debug, Serialize)]
pub struct Goals {
    /// Tandem's durable rate ≥ Kamailio's memory-only rate (both without authentication).
    pub tandem_rate_at_least_kamailio_memory: Option<bool>,
    /// Tandem's wire p99 at the latency rate ≤ 2 ms (without authentication).
    pub tandem_wire_p99_at_most_2ms: Option<bool>,
    /// REGISTER p99 / fsync p99 under the disk hog ≤ 3.
    pub hog_ratio_at_most_3: Option<bool>,
}

impl Goals {
    fn judge(contestants: &[Contestant], hog: Option<&Hog>) -> Goals {
        let plain = |name: &str| contestants.iter().find(|c| c.name == name && !c.auth);
        let rate = |name: &str| plain(name).map(|c| c.sustained_per_sec);
        Goals {
            tandem_rate_at_least_kamailio_memory: rate("tandem")
                .zip(rate("kamailio-memory"))
                .map(|(t, k)| t >= k),
            tandem_wire_p99_at_most_2ms: plain("tandem")
                .and_then(|t| t.p99_ms_at_latency_rate)
                .map(|p| p <= 2.0),
            hog_ratio_at_most_3: hog.map(|h| h.register_to_fsync_p99_ratio <= 3.0),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct RegistrarReport {
    pub runs: usize,
    pub aors: u64,
    pub step_secs: f64,
    pub rates_per_sec: Vec<u32>,
    pub latency_rate_per_sec: u32,
    pub max_fail_percent: f64,
    pub kamailio_children: u32,
    pub kamailio_sqlite_children: u32,
    pub cores: usize,
    /// The machine's 1-minute load average before and after the benchmark (other work on
    /// the machine shows here).
    pub load_average_start: Option<f64>,
    pub load_average_end: Option<f64>,
    // Tandem's headline figures, flat, as other tools read them.
    pub tandem_registers_per_sec: Option<f64>,
    pub tandem_auth_registers_per_sec: Option<f64>,
    pub kamailio_memory_registers_per_sec: Option<f64>,
    pub tandem_wire_p99_ms_at_latency_rate: Option<f64>,
    /// Resident memory per 100,000 AORs, bytes (median of the runs).
    pub tandem_rss_bytes_per_100k_aors: Option<f64>,
    pub memory_aors: u64,
    pub runs_rss_bytes_per_100k_aors: Vec<f64>,
    pub hog: Option<Hog>,
    pub goals: Goals,
    pub contestants: Vec<Contestant>,
}

impl RegistrarReport {
    pub(super) fn new(
        args: &super::Args,
        contestants: Vec<Contestant>,
        memory: Vec<f64>,
        hogs: Vec<Hog>,
        load_average_start: Option<f64>,
    ) -> RegistrarReport {
        let hog = Hog::median(&hogs);
        let goals = Goals::judge(&contestants, hog.as_ref());
        let find = |name: &str, auth: bool| {
            contestants
                .iter()
                .find(|c| c.name == name && c.auth == auth)
        };
        RegistrarReport {
            runs: args.runs,
            aors: args.aors,
            step_secs: args.step_secs,
            rates_per_sec: args.rates.clone(),
            latency_rate_per_sec: args.latency_rate,
            max_fail_percent: args.max_fail_percent,
            kamailio_children: args.kamailio_children,
            kamailio_sqlite_children: args.kamailio_sqlite_children,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_average_start,
            load_average_end: load_average(),
            tandem_registers_per_sec: find("tandem", false).map(|c| c.sustained_per_sec),
            tandem_auth_registers_per_sec: find("tandem", true).map(|c| c.sustained_per_sec),
            kamailio_memory_registers_per_sec: find("kamailio-memory", false)
                .map(|c| c.sustained_per_sec),
            tandem_wire_p99_ms_at_latency_rate: find("tandem", false)
                .and_then(|c| c.p99_ms_at_latency_rate),
            tandem_rss_bytes_per_100k_aors: (!memory.is_empty()).then(|| median(&memory)),
            memory_aors: args.memory_aors,
            runs_rss_bytes_per_100k_aors: memory,
            hog,
            goals,
            contestants,
        }
    }
}
