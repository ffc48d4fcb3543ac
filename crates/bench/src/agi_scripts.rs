//! `tandem bench agi --scripts`: legacy AGI scripts three ways, in one run. A sh and a Python
//! script of three commands each are (1) forked per call by the emulator itself, speaking classic
//! AGI over pipes as Asterisk does (the baseline: a bare fork+exec of the same script); (2) run by
//! Tandem per call through FastAGI; (3) taken prewarmed from Tandem's pool.
//!
//! Two phases. Throughput: `concurrency` sessions back to back against (1) and (2), for Tandem's
//! overhead over the bare fork. Latency: an open loop at `--rate` calls/s against (2) and (3),
//! for what prewarming saves a caller. (At full load prewarming cannot help: the pool refills no
//! faster than the CPU starts interpreters. It moves the start-up off the call's path.)

use super::agi::{
    AgiArgs, RunShape, ServerFigures, Subject, free_port, load_plan, measure, spawn_serve,
    write_script, write_serve_config,
};
use super::report::{BenchReport, Table};
use asterisk_emu::Target;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;

const SH: &str = r#"#!/bin/sh
while IFS= read -r l; do [ -z "$l" ] && break; done
echo 'GET VARIABLE CHANNEL'; read -r r
echo 'SET VARIABLE ROUTED 1'; read -r r
echo 'VERBOSE "routed" 3'; read -r r
"#;

// The standard modules a typical Python AGI library imports; a real script pays for them at every
// start, and so does this one.
const PY: &str = r#"#!/usr/bin/python3
import json, logging, os, re, signal, socket, sys, traceback
for line in sys.stdin:
    if line == '\n':
        break
for c in ('GET VARIABLE CHANNEL', 'SET VARIABLE ROUTED 1', 'VERBOSE "routed" 3'):
    sys.stdout.write(c + '\n')
    sys.stdout.flush()
    sys.stdin.readline()
"#;

#[derive(Debug, Serialize)]
pub struct ScriptsReport {
    pub concurrency: usize,
    pub rate_per_sec: f64,
    pub seconds: f64,
    pub runs: usize,
    /// Closed loop: classic and Tandem, back to back.
    pub throughput: BTreeMap<String, ServerFigures>,
    /// Open loop at `rate_per_sec`: Tandem spawning per call and Tandem prewarmed.
    pub latency: BTreeMap<String, ServerFigures>,
    /// 1 − Tandem's sessions/s ÷ the classic fork's, per language (goal ≤ 0.10).
    pub sh_overhead: f64,
    pub py_overhead: f64,
    /// Tandem's p50 ÷ the classic fork's p50 − 1 at the open loop's rate, per language.
    pub sh_latency_overhead: f64,
    pub py_latency_overhead: f64,
    /// Spawn-per-call p99 ÷ prewarmed p99 through Tandem, per language (goal ≥ 5 for Python).
    pub sh_prewarm_p99_gain: f64,
    pub py_prewarm_p99_gain: f64,
}

impl BenchReport for ScriptsReport {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "Legacy AGI scripts of 3 commands, {} runs of {} s each (medians)\n",
            self.runs, self.seconds
        )?;
        let table = |out: &mut dyn Write,
                     title: &str,
                     set: &BTreeMap<String, ServerFigures>,
                     hows: [&str; 2]|
         -> std::io::Result<()> {
            writeln!(out, "{title}")?;
            let mut t = Table::new(["script", "how", "sessions/s", "p50 ms", "p99 ms", "errors"]);
            for lang in ["sh", "py"] {
                for how in hows {
                    if let Some(f) = set.get(&format!("{lang} {how}")) {
                        t.row([
                            lang.to_string(),
                            how.to_string(),
                            format!("{:.1}", f.sessions_per_sec),
                            format!("{:.2}", f.p50_ms),
                            format!("{:.2}", f.p99_ms),
                            f.errors.to_string(),
                        ]);
                    }
                }
            }
            t.write(out)?;
            writeln!(out)
        };
        table(
            out,
            &format!("Throughput: {} sessions back to back", self.concurrency),
            &self.throughput,
            ["classic", "tandem"],
        )?;
        table(
            out,
            &format!("Latency: {} calls/s, open loop", self.rate_per_sec),
            &self.latency,
            ["tandem", "prewarmed"],
        )?;
        writeln!(
            out,
            "Tandem's overhead over a classic fork (sessions/s): sh {:.1}%, Python {:.1}%",
            self.sh_overhead * 100.0,
            self.py_overhead * 100.0
        )?;
        writeln!(
            out,
            "p99 spawn-per-call ÷ prewarmed: sh {:.1}x, Python {:.1}x",
            self.sh_prewarm_p99_gain, self.py_prewarm_p99_gain
        )?;
        for (name, f) in self.throughput.iter().chain(&self.latency) {
            for e in &f.error_samples {
                writeln!(out, "error ({name}): {e}")?;
            }
        }
        Ok(())
    }
}

pub fn run(args: &AgiArgs) -> anyhow::Result<()> {
    super::agi::check_args(args)?;
    let concurrency = args.concurrency.unwrap_or(4);
    let dir = tempfile::Builder::new()
        .prefix("tandem-bench-scripts")
        .tempdir()?;
    let root = dir.path().canonicalize()?;
    for (name, body) in [
        ("bench.sh", SH),
        ("bench.py", PY),
        ("warm/bench.sh", SH),
        ("warm/bench.py", PY),
    ] {
        write_script(&root.join(name), body)?;
    }
    // Enough prewarmed processes for every session in flight, and a few to spare while the
    // warmer replaces the ones taken.
    let prewarm = concurrency * 2 + 2;
    let port = free_port()?;
    let config = write_serve_config(
        &root,
        port,
        "",
        &format!(
            "[scripts]\ndir = {root:?}\n\n\
             [[scripts.route]]\npath = \"warm/bench.sh\"\nprewarm = {prewarm}\n\n\
             [[scripts.route]]\npath = \"warm/bench.py\"\nprewarm = {prewarm}\n"
        ),
    )?;
    let expect = Some(3);
    let tandem = spawn_serve("sh tandem", &config, port, &load_plan("bench.sh"), expect)?;
    let addr = tandem.target.clone();
    let with = |name: &str, target: Target, route: &str, rate: Option<f64>| Subject {
        name: name.to_string(),
        target,
        plan: load_plan(route),
        expect_commands: expect,
        rate_per_sec: rate,
        pid: None,
        child: None,
    };
    let shape = RunShape::of(args, concurrency);
    let throughput = measure(
        &[
            with(
                "sh classic",
                Target::Classic(root.join("bench.sh")),
                "bench.sh",
                None,
            ),
            with("sh tandem", addr.clone(), "bench.sh", None),
            with(
                "py classic",
                Target::Classic(root.join("bench.py")),
                "bench.py",
                None,
            ),
            with("py tandem", addr.clone(), "bench.py", None),
        ],
        &shape,
    )?;
    let rate = Some(args.rate);
    // In flight at once in the open loop: generous, so that a slow start shows as latency.
    let latency = measure(
        &[
            with(
                "sh classic",
                Target::Classic(root.join("bench.sh")),
                "bench.sh",
                rate,
            ),
            with("sh tandem", addr.clone(), "bench.sh", rate),
            with("sh prewarmed", addr.clone(), "warm/bench.sh", rate),
            with(
                "py classic",
                Target::Classic(root.join("bench.py")),
                "bench.py",
                rate,
            ),
            with("py tandem", addr.clone(), "bench.py", rate),
            with("py prewarmed", addr, "warm/bench.py", rate),
        ],
        &RunShape {
            concurrency: 64,
            ..shape
        },
    )?;
    drop(tandem);
    let tp = |n: &str| throughput.get(n).expect("measured");
    let lat = |n: &str| latency.get(n).expect("measured");
    let report = ScriptsReport {
        concurrency,
        rate_per_sec: args.rate,
        seconds: args.seconds,
        runs: args.runs,
        sh_overhead: 1.0 - tp("sh tandem").sessions_per_sec / tp("sh classic").sessions_per_sec,
        py_overhead: 1.0 - tp("py tandem").sessions_per_sec / tp("py classic").sessions_per_sec,
        sh_latency_overhead: lat("sh tandem").p50_ms / lat("sh classic").p50_ms - 1.0,
        py_latency_overhead: lat("py tandem").p50_ms / lat("py classic").p50_ms - 1.0,
        sh_prewarm_p99_gain: lat("sh tandem").p99_ms / lat("sh prewarmed").p99_ms,
        py_prewarm_p99_gain: lat("py tandem").p99_ms / lat("py prewarmed").p99_ms,
        throughput,
        latency,
    };
    super::report::emit(&report, args.json)
}
