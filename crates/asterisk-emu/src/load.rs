//! Many sessions at once: the load generator of `tandem bench agi`.

use crate::session::{AgiStatus, Plan, run};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the load is played against.
#[derive(Debug, Clone)]
pub enum Target {
    /// A FastAGI server.
    FastAgi(SocketAddr),
    /// A script forked per session, as classic AGI does.
    Classic(std::path::PathBuf),
}

#[derive(Debug, Clone)]
pub struct Load {
    pub target: Target,
    pub plan: Plan,
    /// Sessions in flight at once.
    pub concurrency: usize,
    /// Stop after this long...
    pub duration: Duration,
    /// ...or after this many sessions, whichever comes first.
    pub max_sessions: Option<u64>,
    /// Open loop: start sessions at this steady rate, whatever the server's pace, and time each
    /// from its scheduled start (a closed loop would hide a stall behind the one session that
    /// met it). `concurrency` then caps the sessions in flight; a start over the cap is an error.
    pub rate_per_sec: Option<f64>,
    /// Sessions whose commands were not this many count as errors (the handler under test runs a
    /// fixed script). `None` accepts any count.
    pub expect_commands: Option<usize>,
}

#[derive(Debug, Default, Clone)]
pub struct LoadReport {
    pub sessions: u64,
    pub errors: u64,
    /// The first few error descriptions, for the report.
    pub error_samples: Vec<String>,
    /// Each successful session's duration, connect to close, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    pub elapsed: Duration,
}

const ERROR_SAMPLES_MAX: usize = 5;

/// One session against the load's target: `None` if it succeeded, else what went wrong.
async fn one_session(load: &Load, n: u64) -> Option<String> {
    let outcome = match &load.target {
        Target::FastAgi(addr) => run(*addr, &load.plan, n).await,
        Target::Classic(script) => crate::classic::run_classic(script, &load.plan, n).await,
    };
    match outcome {
        Ok(o) => {
            let wrong_count = load.expect_commands.is_some_and(|c| c != o.commands);
            if o.status == AgiStatus::Success && o.violations.is_empty() && !wrong_count {
                None
            } else {
                Some(format!(
                    "status {:?}, {} commands, violations {:?}",
                    o.status, o.commands, o.violations
                ))
            }
        }
        Err(e) => Some(e.to_string()),
    }
}

fn note_error(r: &mut LoadReport, problem: String) {
    r.errors += 1;
    if r.error_samples.len() < ERROR_SAMPLES_MAX {
        r.error_samples.push(problem);
    }
}

/// Runs `load` on the current tokio runtime.
pub async fn run_load(load: Load) -> LoadReport {
    if let Some(rate) = load.rate_per_sec {
        return run_open_loop(load, rate).await;
    }
    let seq = Arc::new(AtomicU64::new(1));
    let started = Instant::now();
    let deadline = started + load.duration;
    let load = Arc::new(load);
    let mut workers = Vec::with_capacity(load.concurrency);
    for _ in 0..load.concurrency {
        let load = load.clone();
        let seq = seq.clone();
        workers.push(tokio::spawn(async move {
            let mut r = LoadReport::default();
            loop {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                if Instant::now() >= deadline || load.max_sessions.is_some_and(|m| n > m) {
                    break;
                }
                let started = Instant::now();
                let problem = one_session(&load, n).await;
                r.sessions += 1;
                match problem {
                    None => r.latencies_ns.push(started.elapsed().as_nanos() as u64),
                    Some(p) => note_error(&mut r, p),
                }
            }
            r
        }));
    }
    let mut total = LoadReport::default();
    for w in workers {
        let r = w.await.expect("load worker panicked");
        total.sessions += r.sessions;
        total.errors += r.errors;
        total.latencies_ns.extend(r.latencies_ns);
        for s in r.error_samples {
            if total.error_samples.len() < ERROR_SAMPLES_MAX {
                total.error_samples.push(s);
            }
        }
    }
    total.elapsed = started.elapsed();
    total
}

async fn run_open_loop(load: Load, rate: f64) -> LoadReport {
    assert!(rate > 0.0, "an open loop needs a positive rate");
    let started = tokio::time::Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let load = Arc::new(load);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(load.concurrency));
    let mut sessions = tokio::task::JoinSet::new();
    let mut report = LoadReport::default();
    let mut n: u64 = 0;
    loop {
        let scheduled = started + interval.mul_f64(n as f64);
        if scheduled >= started + load.duration || load.max_sessions.is_some_and(|m| n >= m) {
            break;
        }
        tokio::time::sleep_until(scheduled).await;
        n += 1;
        report.sessions += 1;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            note_error(
                &mut report,
                format!("over {} sessions in flight", load.concurrency),
            );
            continue;
        };
        let load = load.clone();
        sessions.spawn(async move {
            let problem = one_session(&load, n).await;
            drop(permit);
            (problem, scheduled.elapsed())
        });
        while let Some(done) = sessions.try_join_next() {
            collect(&mut report, done);
        }
    }
    while let Some(done) = sessions.join_next().await {
        collect(&mut report, done);
    }
    report.elapsed = started.elapsed();
    report
}

fn collect(
    report: &mut LoadReport,
    done: Result<(Option<String>, Duration), tokio::task::JoinError>,
) {
    match done {
        Ok((None, latency)) => report.latencies_ns.push(latency.as_nanos() as u64),
        Ok((Some(p), _)) => note_error(report, p),
        Err(e) => note_error(report, format!("session task failed: {e}")),
    }
}
