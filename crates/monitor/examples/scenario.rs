//! Writes one alert scenario to a pcap and prints its ground truth's summary, to tune rules
//! against it: `cargo run -p monitor --example scenario -- toll-fraud /tmp/fraud.pcap
//! [--calls N] [--seed S]`.

use std::path::PathBuf;
use std::time::Instant;

use monitor::synth::scenario::{Scenario, ScenarioOptions, write};

fn main() -> Result<(), String> {
    let usage = "usage: scenario NAME FILE [--calls N] [--seed S] (NAME: toll-fraud, scanner, \
                 trunk-503, one-way-audio, clean)";
    let mut args = std::env::args().skip(1);
    let scenario: Scenario = args.next().ok_or(usage)?.parse()?;
    let path = PathBuf::from(args.next().ok_or(usage)?);
    let mut opts = ScenarioOptions::default();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(usage)?;
        let n: u64 = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
        match flag.as_str() {
            "--calls" => opts.clean_calls = n as usize,
            "--seed" => opts.seed = n,
            _ => return Err(usage.into()),
        }
    }
    let started = Instant::now();
    let truth = write(scenario, &path, &opts).map_err(|e| format!("{}: {e}", path.display()))?;
    let elapsed = started.elapsed();
    println!(
        "{}: {} in {:.2} s: {} calls ({} background), {} REGISTER chains ({} failed), {} OPTIONS; \
         {} packets: {} SIP, {} RTP",
        scenario.as_str(),
        path.display(),
        elapsed.as_secs_f64(),
        truth.calls.len(),
        truth.calls.iter().filter(|c| c.background).count(),
        truth.registrations.len(),
        truth.registrations.iter().filter(|r| r.failed()).count(),
        truth.options,
        truth.counts.packets,
        truth.counts.sip_messages,
        truth.counts.rtp_packets,
    );
    if let Some(f) = &truth.toll_fraud {
        println!(
            "toll fraud: extension {} at {} ({}), {} calls at {:02}:xx UTC, peak {} at once",
            f.extension,
            f.phone,
            f.user_agent,
            f.calls.len(),
            f.hour_utc,
            f.peak_concurrent
        );
        for c in &f.calls {
            println!("  {} {}", c.number, c.call_id);
        }
    }
    if let Some(s) = &truth.scanner {
        println!(
            "scanner: {} ({}), users {}..{}, {} failed chains, {} OPTIONS",
            s.source,
            s.user_agents.join(", "),
            s.users.first().map_or("", |u| u),
            s.users.last().map_or("", |u| u),
            s.failed_chains,
            s.options_probes
        );
    }
    if let Some(t) = &truth.trunk {
        println!(
            "trunk {} from {}: {} of {} calls answered 503 ({:.1} %)",
            t.trunk,
            t.pbx,
            t.failed_call_ids.len(),
            t.calls,
            t.share_pct
        );
    }
    for o in &truth.one_way {
        println!(
            "one-way: {} silent {:?}{}",
            o.call_id,
            o.silent,
            o.stopped_before_bye_ns
                .map_or(" (no RTP)".to_string(), |ns| format!(
                    " (stopped {:.2} s before the BYE)",
                    ns as f64 / 1e9
                ))
        );
    }
    Ok(())
}
