//! `tandem bench taskpool`: Asterisk's taskpool efficiency tests, reproduced, run side by side on
//! Tandem's taskpool, a replica of Asterisk's old threadpool, and tokio's multi-thread runtime.
//!
//! - push: `tasks` tasks (200), each pushing itself again when it runs, on `executors` (5)
//!   executors; counted over `seconds`.
//! - serializer push: `pairs` (200) pairs of serializers, one task per pair passed back and forth
//!   (each run pushes the next one onto the other serializer of the pair).
//!
//! tokio has no serializer. Its closest equivalent for "one key's work in order, one at a time"
//! is a task per key fed by a channel, so the serializer row for tokio is pairs of tasks passing
//! a message back and forth over mpsc channels (reported as `tokio_channel_pair`). The channels
//! are unbounded in type but hold at most one message: each pair has one message in flight.
//!
//! Every task carries its own count and records it once at the end, so the measured work is the
//! executor, not a shared counter.

mod threadpool;

use super::report::{self, BenchReport, Table, median};
use clap::Args as ClapArgs;
use serde::Serialize;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use taskpool::{Serializer, ShutdownMode, Taskpool, TaskpoolConfig};
use threadpool::{ThreadPool, TpSerializer};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Measured interval per variant and run, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Runs per variant; the report gives the median.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Executors (worker threads) of every pool.
    #[arg(long, default_value_t = 5)]
    executors: usize,
    /// Self-pushing tasks in the push test.
    #[arg(long, default_value_t = 200)]
    tasks: usize,
    /// Serializer pairs in the serializer test.
    #[arg(long, default_value_t = 200)]
    pairs: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// How long the chains of tasks may take to notice the stop signal before a variant counts as
/// stalled (instead of hanging the benchmark).
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// What the tasks of one measurement share. Leaked for the measurement's lifetime so a task can
/// carry a plain `&'static` reference from run to run (no reference count touched per task).
struct Shared<P> {
    pool: P,
    stop: AtomicBool,
    done: Mutex<(u64, usize)>,
    all_done: Condvar,
}

impl<P> Shared<P> {
    fn leak(pool: P, chains: usize) -> &'static Shared<P> {
        Box::leak(Box::new(Shared {
            pool,
            stop: AtomicBool::new(false),
            done: Mutex::new((0, chains)),
            all_done: Condvar::new(),
        }))
    }

    /// A chain of tasks ended with `count` runs.
    fn finish(&self, count: u64) {
        let mut done = self.done.lock().expect("done lock");
        done.0 += count;
        done.1 -= 1;
        if done.1 == 0 {
            self.all_done.notify_all();
        }
    }

    /// Lets the tasks run for `seconds`, stops them, waits for every chain to end. Returns the
    /// runs counted per second of the interval.
    fn measure(&self, started: Instant, seconds: f64) -> anyhow::Result<f64> {
        std::thread::sleep(Duration::from_secs_f64(seconds).saturating_sub(started.elapsed()));
        // Relaxed: a task that sees the flag late runs once or twice more, which the count
        // includes; the interval is the one measured here.
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = started.elapsed().as_secs_f64();
        let deadline = Instant::now() + STALL_LIMIT;
        let mut done = self.done.lock().expect("done lock");
        while done.1 > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            anyhow::ensure!(
                !left.is_zero(),
                "{} of the task chains did not finish within {} s of the stop signal: the \
                 variant stalled",
                done.1,
                STALL_LIMIT.as_secs()
            );
            done = self.all_done.wait_timeout(done, left).expect("done wait").0;
        }
        Ok(done.0 as f64 / elapsed)
    }
}

fn taskpool_push(args: &Args) -> anyhow::Result<f64> {
    let pool = Taskpool::new(TaskpoolConfig::fixed(args.executors))?;
    let sh = Shared::leak(pool, args.tasks);
    fn step(sh: &'static Shared<Taskpool>, count: u64) {
        if sh.stop.load(Ordering::Relaxed) || sh.pool.push(move || step(sh, count + 1)).is_err() {
            sh.finish(count);
        }
    }
    let started = Instant::now();
    for _ in 0..args.tasks {
        sh.pool.push(move || step(sh, 0))?;
    }
    let rate = sh.measure(started, args.seconds)?;
    sh.pool.shutdown(ShutdownMode::Drain)?;
    Ok(rate)
}

fn taskpool_serializer(args: &Args) -> anyhow::Result<f64> {
    let pool = Taskpool::new(TaskpoolConfig::fixed(args.executors))?;
    let pairs: Vec<[Serializer; 2]> = (0..args.pairs)
        .map(|_| [pool.serializer(), pool.serializer()])
        .collect();
    let sh = Shared::leak((pool, pairs), args.pairs);
    fn step(
        sh: &'static Shared<(Taskpool, Vec<[Serializer; 2]>)>,
        pair: usize,
        side: usize,
        count: u64,
    ) {
        if sh.stop.load(Ordering::Relaxed) {
            sh.finish(count);
            return;
        }
        let next = 1 - side;
        if sh.pool.1[pair][next]
            .push(move || step(sh, pair, next, count + 1))
            .is_err()
        {
            sh.finish(count);
        }
    }
    let started = Instant::now();
    for pair in 0..args.pairs {
        sh.pool.1[pair][0].push(move || step(sh, pair, 0, 0))?;
    }
    let rate = sh.measure(started, args.seconds)?;
    sh.pool.0.shutdown(ShutdownMode::Drain)?;
    Ok(rate)
}

fn threadpool_push(args: &Args) -> anyhow::Result<f64> {
    let sh = Shared::leak(ThreadPool::new(args.executors), args.tasks);
    fn step(sh: &'static Shared<ThreadPool>, count: u64) {
        if sh.stop.load(Ordering::Relaxed) {
            sh.finish(count);
        } else {
            sh.pool.push(move || step(sh, count + 1));
        }
    }
    let started = Instant::now();
    for _ in 0..args.tasks {
        sh.pool.push(move || step(sh, 0));
    }
    let rate = sh.measure(started, args.seconds)?;
    sh.pool.stop_and_join();
    Ok(rate)
}

fn threadpool_serializer(args: &Args) -> anyhow::Result<f64> {
    let pool = ThreadPool::new(args.executors);
    let pairs: Vec<[TpSerializer; 2]> = (0..args.pairs)
        .map(|_| [pool.serializer(), pool.serializer()])
        .collect();
    let sh = Shared::leak((pool, pairs), args.pairs);
    type Sh = Shared<(ThreadPool, Vec<[TpSerializer; 2]>)>;
    fn step(sh: &'static Sh, pair: usize, side: usize, count: u64) {
        if sh.stop.load(Ordering::Relaxed) {
            sh.finish(count);
            return;
        }
        let next = 1 - side;
        sh.pool.1[pair][next].push(move || step(sh, pair, next, count + 1));
    }
    let started = Instant::now();
    for pair in 0..args.pairs {
        sh.pool.1[pair][0].push(move || step(sh, pair, 0, 0));
    }
    let rate = sh.measure(started, args.seconds)?;
    sh.pool.0.stop_and_join();
    Ok(rate)
}

fn tokio_runtime(args: &Args) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.executors)
        .build()?)
}

fn tokio_push(args: &Args) -> anyhow::Result<f64> {
    let rt = tokio_runtime(args)?;
    let sh = Shared::leak((), args.tasks);
    fn step(sh: &'static Shared<()>, count: u64) {
        if sh.stop.load(Ordering::Relaxed) {
            sh.finish(count);
        } else {
            tokio::spawn(async move { step(sh, count + 1) });
        }
    }
    let started = Instant::now();
    for _ in 0..args.tasks {
        rt.spawn(async move { step(sh, 0) });
    }
    let rate = sh.measure(started, args.seconds)?;
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(rate)
}

fn tokio_channel_pair(args: &Args) -> anyhow::Result<f64> {
    use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
    let rt = tokio_runtime(args)?;
    // Each side of a pair counts the messages it handled; both sides finish, so two chains per
    // pair.
    let sh = Shared::leak((), 2 * args.pairs);
    async fn side(
        sh: &'static Shared<()>,
        mut rx: UnboundedReceiver<u64>,
        tx: UnboundedSender<u64>,
    ) {
        let mut count = 0u64;
        while let Some(n) = rx.recv().await {
            if sh.stop.load(Ordering::Relaxed) {
                break;
            }
            count += 1;
            if tx.send(n + 1).is_err() {
                break;
            }
        }
        sh.finish(count);
    }
    let started = Instant::now();
    for _ in 0..args.pairs {
        let (tx_a, rx_a) = unbounded_channel();
        let (tx_b, rx_b) = unbounded_channel();
        tx_a.send(0)?;
        rt.spawn(side(sh, rx_a, tx_b));
        rt.spawn(side(sh, rx_b, tx_a));
    }
    let rate = sh.measure(started, args.seconds)?;
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(rate)
}

#[derive(Serialize)]
struct Report {
    seconds: f64,
    runs: usize,
    executors: usize,
    tasks: usize,
    pairs: usize,
    taskpool_push_per_sec: f64,
    threadpool_push_per_sec: f64,
    tokio_push_per_sec: f64,
    taskpool_serializer_per_sec: f64,
    threadpool_serializer_per_sec: f64,
    tokio_channel_pair_per_sec: f64,
    /// taskpool push ÷ threadpool push.
    push_vs_threadpool: f64,
    /// taskpool push ÷ tokio spawn.
    push_vs_tokio: f64,
    /// taskpool serializer ÷ threadpool serializer.
    serializer_vs_threadpool: f64,
    /// 1 − serializer ÷ plain, per design.
    taskpool_serializer_penalty: f64,
    threadpool_serializer_penalty: f64,
    /// Every run's figure, per variant, in the order measured.
    samples: Samples,
}

#[derive(Serialize, Default)]
struct Samples {
    taskpool_push: Vec<f64>,
    threadpool_push: Vec<f64>,
    tokio_push: Vec<f64>,
    taskpool_serializer: Vec<f64>,
    threadpool_serializer: Vec<f64>,
    tokio_channel_pair: Vec<f64>,
}

fn millions(v: f64) -> String {
    format!("{:.3}", v / 1e6)
}

impl BenchReport for Report {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "taskpool efficiency: {} executors, {} self-pushing tasks, {} serializer pairs, \
             {} s per variant, median of {} runs",
            self.executors, self.tasks, self.pairs, self.seconds, self.runs
        )?;
        let mut t = Table::new(["variant", "push Mtasks/s", "serializer Mtasks/s", "penalty"]);
        t.row([
            "taskpool".to_string(),
            millions(self.taskpool_push_per_sec),
            millions(self.taskpool_serializer_per_sec),
            format!("{:.1}%", self.taskpool_serializer_penalty * 100.0),
        ]);
        t.row([
            "threadpool (Asterisk design)".to_string(),
            millions(self.threadpool_push_per_sec),
            millions(self.threadpool_serializer_per_sec),
            format!("{:.1}%", self.threadpool_serializer_penalty * 100.0),
        ]);
        t.row([
            "tokio spawn / channel pair".to_string(),
            millions(self.tokio_push_per_sec),
            millions(self.tokio_channel_pair_per_sec),
            "-".to_string(),
        ]);
        t.write(out)?;
        writeln!(out)?;
        writeln!(
            out,
            "taskpool push: {:.2}x threadpool, {:.2}x tokio spawn; serializer: {:.2}x threadpool",
            self.push_vs_threadpool, self.push_vs_tokio, self.serializer_vs_threadpool
        )?;
        writeln!(
            out,
            "tokio has no serializer: its row is pairs of tasks passing a message over mpsc channels."
        )
    }
}

type Variant = (&'static str, fn(&Args) -> anyhow::Result<f64>);

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.seconds > 0.0, "--seconds must be above 0");
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    anyhow::ensure!(args.executors > 0, "--executors must be at least 1");
    anyhow::ensure!(
        args.tasks > 0 && args.pairs > 0,
        "--tasks and --pairs must be at least 1"
    );
    let variants: [Variant; 6] = [
        ("taskpool push", taskpool_push),
        ("threadpool push", threadpool_push),
        ("tokio spawn", tokio_push),
        ("taskpool serializer", taskpool_serializer),
        ("threadpool serializer", threadpool_serializer),
        ("tokio channel pair", tokio_channel_pair),
    ];
    let bar = crate::report::progress_bar(
        args.json,
        (variants.len() * args.runs) as u64,
        "{bar:30} {pos}/{len} {msg} (eta {eta})",
    )?;
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    let mut samples: [Vec<f64>; 6] = Default::default();
    // Runs are interleaved (every variant once per round) so a change in machine load affects
    // every variant alike.
    for run in 0..args.runs {
        for (i, (name, f)) in variants.iter().enumerate() {
            bar.set_message(format!("run {} {name}", run + 1));
            samples[i].push(f(&args)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let m: Vec<f64> = samples.iter().map(|s| median(s)).collect();
    let [tp_push, th_push, tk_push, tp_ser, th_ser, tk_pair] = samples;
    let report = Report {
        seconds: args.seconds,
        runs: args.runs,
        executors: args.executors,
        tasks: args.tasks,
        pairs: args.pairs,
        taskpool_push_per_sec: m[0],
        threadpool_push_per_sec: m[1],
        tokio_push_per_sec: m[2],
        taskpool_serializer_per_sec: m[3],
        threadpool_serializer_per_sec: m[4],
        tokio_channel_pair_per_sec: m[5],
        push_vs_threadpool: m[0] / m[1],
        push_vs_tokio: m[0] / m[2],
        serializer_vs_threadpool: m[3] / m[4],
        taskpool_serializer_penalty: 1.0 - m[3] / m[0],
        threadpool_serializer_penalty: 1.0 - m[4] / m[1],
        samples: Samples {
            taskpool_push: tp_push,
            threadpool_push: th_push,
            tokio_push: tk_push,
            taskpool_serializer: tp_ser,
            threadpool_serializer: th_ser,
            tokio_channel_pair: tk_pair,
        },
    };
    report::emit(&report, args.json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Args {
        Args {
            seconds: 0.05,
            runs: 1,
            executors: 2,
            tasks: 8,
            pairs: 8,
            json: true,
        }
    }

    #[test]
    fn every_variant_runs_and_counts() {
        let args = tiny();
        for (name, f) in [
            (
                "taskpool push",
                taskpool_push as fn(&Args) -> anyhow::Result<f64>,
            ),
            ("threadpool push", threadpool_push),
            ("tokio spawn", tokio_push),
            ("taskpool serializer", taskpool_serializer),
            ("threadpool serializer", threadpool_serializer),
            ("tokio channel pair", tokio_channel_pair),
        ] {
            let rate = f(&args).unwrap();
            assert!(rate > 0.0, "{name} counted nothing");
        }
    }

    #[test]
    fn replica_serializer_keeps_order() {
        let pool = ThreadPool::new(3);
        let lane = pool.serializer();
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        for i in 0..1_000 {
            let seen = std::sync::Arc::clone(&seen);
            lane.push(move || seen.lock().unwrap().push(i));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.lock().unwrap().len() < 1_000 {
            assert!(Instant::now() < deadline, "replica serializer stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
        pool.stop_and_join();
        assert_eq!(*seen.lock().unwrap(), (0..1_000).collect::<Vec<_>>());
    }
}
