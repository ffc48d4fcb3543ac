//! `tandem bench agi --route dialparties`: FreePBX's ring-group logic, native against the PHP
//! script it replaces, in one run of one Tandem.
//!
//! The script side is a PHP twin of dialparties.agi (Debian's php-cli, run per call by
//! Tandem's script runner): it makes the round trips the real script makes for a ring-all
//! group of idle members with call waiting on (26 variable reads; per member 7 DATABASE GET,
//! 1 PJSIP_DIAL_CONTACTS, 1 DATABASE PUT and 8 VERBOSE; then 7 SET VARIABLE and 12 VERBOSE:
//! 96 for three members, as measured on the script) and decides nothing. Both sides answer
//! the same emulated FreePBX system, for a 3-member and a 20-member group.

use super::agi::{
    AgiArgs, RunShape, ServerFigures, Subject, free_port, load_plan, measure, spawn_serve,
    write_script, write_serve_config,
};
use super::report::{BenchReport, Table};
use asterisk_emu::{Plan, Target, freepbx};
use serde::Serialize;
use std::io::Write;
use std::process::Command;
use std::sync::Arc;

const TWIN: &str = r#"#!/usr/bin/env php
<?php
// The round trips of dialparties.agi for a ring-all group of idle members, call waiting on.
$in = STDIN;
while (($l = fgets($in)) !== false && $l !== "\n") {}
function cmd($c) {
    fwrite(STDOUT, $c . "\n");
    fflush(STDOUT);
    $r = trim((string) fgets(STDIN));
    return preg_match('/\((.*)\)$/', $r, $m) ? $m[1] : '';
}
$names = ['CWINUSEBUSY', 'CWIGNORE', 'CFIGNORE', 'SIGNORE', 'AMPUSER', 'QUEUEWAIT', 'ARG1',
    'ARG2', 'RingGroupMethod', 'RG_CONFIRM', 'RVOL', 'ALERT_INFO', 'SIPADDHEADER', 'FMGRP',
    'NODEST', 'RINGGROUP_INDEX', 'USE_CONFIRMATION', 'ARG3', 'ARG4', 'SCREEN', 'FROM_DID',
    'DIRECTION', 'FROMQ', 'RVOL_MODE', 'RVOL', 'RVOLPARENT'];
$v = [];
foreach ($names as $n) { $v[$n] = cmd("GET VARIABLE $n"); }
$ds = [];
foreach (explode('-', $v['ARG3']) as $m) {
    foreach (['CF', 'DND', 'CW', 'CFB', 'CFU'] as $f) { cmd("DATABASE GET \"$f\" \"$m\""); }
    $dev = cmd("DATABASE GET \"AMPUSER\" \"$m/device\"");
    $dial = cmd("DATABASE GET \"DEVICE\" \"$dev/dial\"");
    $ds[] = cmd('GET VARIABLE PJSIP_DIAL_CONTACTS(' . substr($dial, 6) . ')');
    cmd("DATABASE PUT \"CALLTRACE\" \"$m\" \"2000\"");
    for ($i = 0; $i < 8; $i++) { cmd("VERBOSE \"member $m, step $i\" 3"); }
}
for ($i = 0; $i < 12; $i++) { cmd("VERBOSE \"step $i\" 3"); }
foreach (['__KEEPCID' => 'TRUE', 'DIALSTATUS_CW' => '', 'FILTERED_DIAL' => $v['ARG3'],
    'ds' => implode('&', $ds) . ',20,tr', 'MACRODIALGOTO_PRI' => 'normdial', 'TIMEOUT' => '20',
    'DIALOPTS' => 'tr'] as $n => $x) { cmd("SET VARIABLE $n \"$x\""); }
"#;

#[derive(Debug, Serialize)]
pub struct Sizes {
    pub members: usize,
    pub native: ServerFigures,
    pub php: ServerFigures,
    /// Round trips per call, counted on one recorded call of each.
    pub native_round_trips: usize,
    pub native_reads: usize,
    pub php_round_trips: usize,
    /// Native calls/s ÷ PHP calls/s (goal ≥ 50).
    pub speedup: f64,
    /// Native round trips ÷ PHP round trips (goal ≤ 0.05).
    pub round_trip_ratio: f64,
}

#[derive(Debug, Serialize)]
pub struct DialpartiesReport {
    pub concurrency: usize,
    pub seconds: f64,
    pub runs: usize,
    pub groups: Vec<Sizes>,
}

impl BenchReport for DialpartiesReport {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "dialparties, ring-all group of idle members: {} concurrent, {} runs of {} s (medians)\n",
            self.concurrency, self.runs, self.seconds
        )?;
        let mut t = Table::new([
            "members",
            "how",
            "calls/s",
            "p50 ms",
            "p99 ms",
            "round trips",
            "errors",
        ]);
        for g in &self.groups {
            for (how, f, trips) in [
                ("native", &g.native, g.native_round_trips),
                ("PHP twin", &g.php, g.php_round_trips),
            ] {
                t.row([
                    g.members.to_string(),
                    how.to_string(),
                    format!("{:.0}", f.sessions_per_sec),
                    format!("{:.2}", f.p50_ms),
                    format!("{:.2}", f.p99_ms),
                    trips.to_string(),
                    f.errors.to_string(),
                ]);
            }
        }
        t.write(out)?;
        for g in &self.groups {
            writeln!(
                out,
                "{} members: native {:.0}x the calls/s, {:.3} of the round trips ({} reads before the writes)",
                g.members, g.speedup, g.round_trip_ratio, g.native_reads
            )?;
            if let Some(us) = g.native.cpu_us_per_session {
                // The emulator playing Asterisk shares the machine's CPUs with Tandem.
                writeln!(
                    out,
                    "  native: Tandem's CPU {us:.0} µs per call, {:.0} calls/s per core it could serve",
                    1e6 / us
                )?;
            }
        }
        Ok(())
    }
}

fn group_plan(route: &str, members: usize) -> Plan {
    let exts = freepbx::numbers(members);
    let mut channel = freepbx::extensions(&exts);
    freepbx::ring_group(&mut channel, "ringall", &exts);
    Plan {
        channel: Some(Arc::new(channel)),
        ..load_plan(route)
    }
}

/// One recorded call: (round trips, reads before the first write).
fn count_trips(target: &Target, plan: &Plan) -> anyhow::Result<(usize, usize)> {
    let Target::FastAgi(addr) = target else {
        anyhow::bail!("a FastAGI target");
    };
    let plan = Plan {
        record: true,
        ..plan.clone()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let o = rt.block_on(asterisk_emu::run(*addr, &plan, 1))?;
    let reads = o
        .exchanges
        .iter()
        .take_while(|(l, _)| l.starts_with("GET ") || l.starts_with("DATABASE GET"))
        .count();
    Ok((o.commands, reads))
}

pub fn run(args: &AgiArgs) -> anyhow::Result<()> {
    super::agi::check_args(args)?;
    anyhow::ensure!(
        Command::new("php")
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success()),
        "the PHP side needs php on PATH (Debian: apt-get install php-cli)"
    );
    let concurrency = args.concurrency.unwrap_or(4);
    let dir = tempfile::Builder::new()
        .prefix("tandem-bench-dialparties")
        .tempdir()?;
    let root = dir.path().canonicalize()?;
    write_script(&root.join("dialparties-twin.php"), TWIN)?;
    let port = free_port()?;
    let config = write_serve_config(&root, port, "", &format!("[scripts]\ndir = {root:?}\n"))?;
    let tandem = spawn_serve("tandem", &config, port, &group_plan("dialparties", 3), None)?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(super::agi::wait_until_serving(&tandem))?;
    let addr = tandem.target.clone();
    let shape = RunShape::of(args, concurrency);
    let mut groups = Vec::new();
    for members in [3usize, 20] {
        // Tandem's own CPU per call is known for the native route (it runs in the process);
        // PHP's runs in children and is left out.
        let subject = |name: &str, route: &str, pid: Option<u32>| Subject {
            name: name.to_string(),
            target: addr.clone(),
            plan: group_plan(route, members),
            expect_commands: None,
            rate_per_sec: None,
            pid,
            child: None,
        };
        let (native_round_trips, native_reads) =
            count_trips(&addr, &group_plan("dialparties", members))?;
        let (php_round_trips, _) =
            count_trips(&addr, &group_plan("dialparties-twin.php", members))?;
        let figures = measure(
            &[
                subject("native", "dialparties", tandem.pid),
                subject("php", "dialparties-twin.php", None),
            ],
            &shape,
        )?;
        let native = figures.get("native").expect("measured").clone();
        let php = figures.get("php").expect("measured").clone();
        groups.push(Sizes {
            members,
            speedup: native.sessions_per_sec / php.sessions_per_sec,
            round_trip_ratio: native_round_trips as f64 / php_round_trips as f64,
            native,
            php,
            native_round_trips,
            native_reads,
            php_round_trips,
        });
    }
    drop(tandem);
    let report = DialpartiesReport {
        concurrency,
        seconds: args.seconds,
        runs: args.runs,
        groups,
    };
    super::report::emit(&report, args.json)
}
