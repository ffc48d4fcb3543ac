//! `tandem bench alerts`: what the alert rules cost, measured in one run.
//!
//! - CPU per call: a clean synthetic day (the scenario synthesiser's) is analysed by the
//!   monitor, as `tandem bench capture` does, and its records (INVITEs, closed calls,
//!   REGISTER chains) then go through the sensor's alert tap with no rules (the conversion to
//!   CDR rows alone), the 20 example rules, and 200 rules (the example set ten times). The
//!   share is the tap's CPU per call over the analysis's.
//! - Memory per tracked key: one rule grouped by caller, fed calls from N distinct callers;
//!   the allocator's growth over N, and the events per second at that size.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use monitor::synth::scenario::{self, Scenario, ScenarioOptions};
use monitor::{Monitor, MonitorConfig};
use serde::Serialize;

use crate::report::{BenchReport, Table, median};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Calls of the clean synthetic day the rules are run over.
    #[arg(long, default_value_t = 10_000)]
    pub calls: usize,
    /// Distinct keys for the memory figure.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: usize,
    /// Runs of each CPU measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Calls of each kind for the latency to a webhook (0: skip it).
    #[arg(long, default_value_t = 200)]
    pub latency_calls: usize,
    /// The example rule set (default: alerts.example.toml in the working directory).
    #[arg(long, default_value = "alerts.example.toml")]
    pub rules: PathBuf,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct RuleCost {
    rules: usize,
    cpu_us_per_call: f64,
    share_of_capture_pct: f64,
    share_of_bench_capture_pct: f64,
    alerts: usize,
}

#[derive(Serialize)]
struct Report {
    calls: usize,
    registrations: usize,
    capture_cpu_us_per_call: f64,
    /// The monitor's CPU per call on `tandem bench capture`'s default calls (10,000 concurrent
    /// G.711 calls, 3 s of media, loss, jitter, reordering), measured in the same run.
    bench_capture_cpu_us_per_call: f64,
    /// Making the CDR rows the rules read (the CDR writer's, paid once when CDRs are stored).
    conversion_cpu_us_per_call: f64,
    with_rules: Vec<RuleCost>,
    keys: usize,
    bytes_per_key: f64,
    events_per_s_at_keys: f64,
    engine_keys: u64,
    latency: Option<crate::alerts_latency::Latency>,
}

impl BenchReport for Report {
    fn print_table(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "alert rules over a clean day of {} calls and {} registrations; the monitor's analysis costs {:.2} µs CPU per call there, {:.2} µs on `bench capture`'s calls",
            self.calls,
            self.registrations,
            self.capture_cpu_us_per_call,
            self.bench_capture_cpu_us_per_call
        )?;
        let mut t = Table::new([
            "rules",
            "µs CPU per call",
            "share (clean day)",
            "share (bench capture)",
            "alerts",
        ]);
        let pct = |us: f64, of: f64| format!("{:.1} %", 100.0 * us / of);
        t.row([
            "CDR rows (the writer's)".to_string(),
            format!("{:.2}", self.conversion_cpu_us_per_call),
            pct(
                self.conversion_cpu_us_per_call,
                self.capture_cpu_us_per_call,
            ),
            pct(
                self.conversion_cpu_us_per_call,
                self.bench_capture_cpu_us_per_call,
            ),
            "0".into(),
        ]);
        for r in &self.with_rules {
            t.row([
                r.rules.to_string(),
                format!("{:.2}", r.cpu_us_per_call),
                format!("{:.1} %", r.share_of_capture_pct),
                format!("{:.1} %", r.share_of_bench_capture_pct),
                r.alerts.to_string(),
            ]);
        }
        t.write(out)?;
        writeln!(
            out,
            "\n{} distinct keys of one rule: {:.0} bytes per key, {:.0} events/s at that size ({} keys held)",
            self.keys, self.bytes_per_key, self.events_per_s_at_keys, self.engine_keys
        )?;
        if let Some(l) = &self.latency {
            writeln!(
                out,
                "\nto a webhook on loopback, {} calls each ({} not received):",
                l.calls, l.missing
            )?;
            let mut t = Table::new(["decided at", "p50 ms", "p99 ms", "max ms"]);
            let ms = |us: f64| format!("{:.1}", us / 1000.0);
            t.row([
                "the INVITE (fraud.destination)".to_string(),
                ms(l.at_invite.p50_us),
                ms(l.at_invite.p99_us),
                ms(l.at_invite.max_us),
            ]);
            t.row([
                format!(
                    "the call's end (sip.response 503; {} ms linger)",
                    l.call_linger_ms
                ),
                ms(l.at_end.p50_us),
                ms(l.at_end.p99_us),
                ms(l.at_end.max_us),
            ]);
            t.write(out)?;
        }
        Ok(())
    }
}

/// This thread's CPU time, to the nanosecond (`/proc`'s figure moves in 10 ms ticks, too
/// coarse for the rules' few milliseconds over a day of calls).
fn cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec on the stack.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn rules_times(cfg: &alerts::AlertsConfig, times: usize) -> alerts::AlertsConfig {
    let mut out = cfg.clone();
    out.rule.clear();
    for i in 0..times {
        for r in &cfg.rule {
            let mut r = r.clone();
            if i > 0 {
                r.name = format!("{}-{i}", r.name);
            }
            out.rule.push(r);
        }
    }
    out
}

/// The tap's CPU seconds over `part` with `cfg`'s rules, and the alerts it raised.
fn tap_cpu(part: &monitor::Analysis, cfg: &alerts::AlertsConfig) -> anyhow::Result<(f64, usize)> {
    let set = alerts::RuleSet::new(cfg).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let engine = alerts::Engine::new(set, Arc::new(alerts::lookup::Basic));
    let mut tap = sensor::SensorAlerts {
        engine: Arc::new(Mutex::new(engine)),
        sensor: "bench".into(),
        output: None,
    };
    // The rows are the CDR writer's (made once for both when CDRs are stored): timed apart.
    let mut rows = sensor::CdrRows::rows(part);
    tap.name_rows(&mut rows);
    let cpu = cpu_s();
    let fired = tap.on_rows(&part.started, &rows, 0);
    Ok((cpu_s() - cpu, fired.len()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.runs > 0 && args.calls > 0,
        "--runs and --calls must be at least 1"
    );
    let text = std::fs::read_to_string(&args.rules)
        .with_context(|| format!("reading {} (give --rules)", args.rules.display()))?;
    let example = alerts::RulesFile::parse(&args.rules, &text)?;
    let dir = tempfile::tempdir()?;
    let pcap = dir.path().join("clean.pcap");
    eprintln!("writing a clean day of {} calls", args.calls);
    scenario::write(
        Scenario::Clean,
        &pcap,
        &ScenarioOptions {
            clean_calls: args.calls,
            ..ScenarioOptions::default()
        },
    )?;

    let mut capture = Vec::new();
    let mut part = monitor::Analysis::default();
    for _ in 0..args.runs {
        let cpu = cpu_s();
        let mut m = Monitor::new(
            MonitorConfig {
                report_starts: true,
                ..MonitorConfig::default()
            },
            1,
        );
        m.read_file(&pcap, |_| {})?;
        part = m.finish();
        capture.push(cpu_s() - cpu);
    }
    // `tandem bench capture`'s default calls, analysed the same way.
    eprintln!("writing bench capture's 10,000 calls");
    let synth = dir.path().join("bench-capture.pcap");
    monitor::synth::generate(
        &monitor::synth::SynthConfig {
            calls: 10_000,
            call_interval_us: 100,
            call_duration_ms: 3_000,
            failures: false,
            loss_pct: 0.5,
            duplicate_pct: 0.1,
            reorder_pct: 0.1,
            jitter_ms: 3.0,
            ..monitor::synth::SynthConfig::default()
        },
        std::fs::File::create(&synth)?,
    )?;
    let mut bench_capture = Vec::new();
    let mut bench_calls = 1;
    for _ in 0..args.runs {
        let cpu = cpu_s();
        let mut m = Monitor::new(MonitorConfig::default(), 1);
        m.read_file(&synth, |_| {})?;
        let a = m.finish();
        bench_capture.push(cpu_s() - cpu);
        bench_calls = a.calls.len().max(1);
    }
    let bench_capture_us = 1e6 * median(&bench_capture) / bench_calls as f64;
    let calls = part.calls.len().max(1);
    let per_call = |s: f64| 1e6 * s / calls as f64;
    let capture_us = per_call(median(&capture));
    let conversion: Vec<f64> = (0..args.runs)
        .map(|_| {
            let cpu = cpu_s();
            let rows = sensor::CdrRows::rows(&part);
            let spent = cpu_s() - cpu;
            drop(rows);
            spent
        })
        .collect();
    let mut with_rules = Vec::new();
    for times in [1, 10] {
        let cfg = rules_times(&example, times);
        let mut cpu = Vec::new();
        let mut fired = 0;
        for _ in 0..args.runs {
            let (c, n) = tap_cpu(&part, &cfg)?;
            cpu.push(c);
            fired = n;
        }
        let us = per_call(median(&cpu));
        with_rules.push(RuleCost {
            rules: cfg.rule.len(),
            cpu_us_per_call: us,
            share_of_capture_pct: 100.0 * us / capture_us,
            share_of_bench_capture_pct: 100.0 * us / bench_capture_us,
            alerts: fired,
        });
    }

    // Memory per key: one rule by caller that never fires.
    eprintln!("tracking {} distinct keys", args.keys);
    let cfg = alerts::RulesFile::parse(
        "bench".as_ref(),
        &format!(
            "[alerts]\nkeys_per_rule_max = {}\n[[alerts.rule]]\nname = \"per-caller\"\nkind = \"fraud.calls\"\ngroup_by = \"caller\"\nthreshold = 1000000\nwindow_s = 86400\n",
            args.keys.max(1)
        ),
    )?;
    let set = alerts::RuleSet::new(&cfg).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let before = crate::capture::heap_bytes();
    let mut engine = alerts::Engine::new(set, Arc::new(alerts::lookup::Basic));
    let mut out = Vec::new();
    let t0 = 1_772_409_600_000_000i64;
    let started = Instant::now();
    for i in 0..args.keys {
        let s = alerts::CallStart {
            uid: String::new(),
            call: cdr::CdrCall {
                call_id: format!("c{i}"),
                caller: format!("{}", 100_000_000 + i),
                called: "1000".into(),
                caller_addr: "192.0.2.1:5060".into(),
                callee_addr: "192.0.2.2:5060".into(),
                start_us: t0 + i as i64,
                ..cdr::CdrCall::default()
            },
            user_agent: None,
        };
        engine.observe(alerts::Event::CallStart(&s), &mut out);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let grown = crate::capture::heap_bytes().saturating_sub(before);
    let engine_keys = engine.stats().keys;
    drop(engine);
    let latency = if args.latency_calls > 0 {
        eprintln!(
            "timing {} calls of each kind to a webhook",
            args.latency_calls
        );
        Some(crate::alerts_latency::measure(args.latency_calls)?)
    } else {
        None
    };
    let report = Report {
        calls: part.calls.len(),
        registrations: part.registrations.len(),
        capture_cpu_us_per_call: capture_us,
        bench_capture_cpu_us_per_call: bench_capture_us,
        conversion_cpu_us_per_call: per_call(median(&conversion)),
        with_rules,
        keys: args.keys,
        bytes_per_key: grown as f64 / args.keys.max(1) as f64,
        events_per_s_at_keys: args.keys as f64 / elapsed,
        engine_keys,
        latency,
    };
    crate::report::emit(&report, args.json)
}
