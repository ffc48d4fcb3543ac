//! Many sessions at once: the load generator of `tandem bench agi`.

use crate::session::{AgiStatus, Plan, run};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Load {
    pub addr: SocketAddr,
    pub plan: Plan,
    /// Sessions in flight at once.
    pub concurrency: usize,
    /// Stop after this long...
    pub duration: Duration,
    /// ...or after this many sessions, whichever comes first.
    pub max_sessions: Option<u64>,
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

/// Runs `load` on the current tokio runtime.
pub async fn run_load(load: Load) -> LoadReport {
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
                let problem = match run(load.addr, &load.plan, n).await {
                    Ok(o) => {
                        let wrong_count = load.expect_commands.is_some_and(|c| c != o.commands);
                        if o.status == AgiStatus::Success && o.violations.is_empty() && !wrong_count
                        {
                            r.latencies_ns.push(o.duration.as_nanos() as u64);
                            None
                        } else {
                            Some(format!(
                                "status {:?}, {} commands, violations {:?}",
                                o.status, o.commands, o.violations
                            ))
                        }
                    }
                    Err(e) => Some(e.to_string()),
                };
                r.sessions += 1;
                if let Some(p) = problem {
                    r.errors += 1;
                    if r.error_samples.len() < ERROR_SAMPLES_MAX {
                        r.error_samples.push(p);
                    }
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
