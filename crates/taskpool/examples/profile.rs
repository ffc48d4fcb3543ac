//! One workload of `tandem bench taskpool`, alone, for profiling (`perf record`):
//! `cargo run --release -p taskpool --example profile -- push|serializer [seconds]`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use taskpool::{Serializer, ShutdownMode, Taskpool, TaskpoolConfig};

struct Shared {
    pool: Taskpool,
    pairs: Vec<[Serializer; 2]>,
    stop: AtomicBool,
    total: AtomicU64,
    chains: AtomicU64,
}

fn push_step(sh: &'static Shared, count: u64) {
    if sh.stop.load(Ordering::Relaxed) || sh.pool.push(move || push_step(sh, count + 1)).is_err() {
        sh.total.fetch_add(count, Ordering::Relaxed);
        sh.chains.fetch_sub(1, Ordering::Release);
    }
}

fn pair_step(sh: &'static Shared, pair: usize, side: usize, count: u64) {
    let next = 1 - side;
    if sh.stop.load(Ordering::Relaxed)
        || sh.pairs[pair][next]
            .push(move || pair_step(sh, pair, next, count + 1))
            .is_err()
    {
        sh.total.fetch_add(count, Ordering::Relaxed);
        sh.chains.fetch_sub(1, Ordering::Release);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let workload = args.next().unwrap_or_else(|| "push".to_string());
    let seconds: f64 = args.next().map_or(5.0, |s| s.parse().expect("seconds"));
    let pool = Taskpool::new(TaskpoolConfig::fixed(5)).expect("pool");
    let pairs = (0..200)
        .map(|_| [pool.serializer(), pool.serializer()])
        .collect();
    let sh: &'static Shared = Box::leak(Box::new(Shared {
        pool,
        pairs,
        stop: AtomicBool::new(false),
        total: AtomicU64::new(0),
        chains: AtomicU64::new(200),
    }));
    let started = Instant::now();
    for i in 0..200 {
        match workload.as_str() {
            "push" => sh.pool.push(move || push_step(sh, 0)).expect("push"),
            "serializer" => sh.pairs[i][0]
                .push(move || pair_step(sh, i, 0, 0))
                .expect("push"),
            other => panic!("unknown workload {other}; use push or serializer"),
        }
    }
    std::thread::sleep(Duration::from_secs_f64(seconds));
    sh.stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    while sh.chains.load(Ordering::Acquire) > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "{workload}: {:.3} M tasks/s",
        sh.total.load(Ordering::Relaxed) as f64 / elapsed / 1e6
    );
    sh.pool.shutdown(ShutdownMode::Drain).expect("shutdown");
}
