//! The pool with real threads: counting, ordering, growth and shrink, panics, shutdown.
//! No test asserts a duration; waits poll a condition with a generous deadline.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::{Duration, Instant};
use taskpool::{
    ConfigError, PushError, Selection, ShutdownError, ShutdownMode, Taskpool, TaskpoolConfig,
};

/// Polls `cond` until it holds; fails the test after a deadline far above any expected wait.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn quiet_panics() {
    // Panics in these tests are expected; keep the default hook from flooding the output.
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<&str>().copied().unwrap_or("");
            if !msg.starts_with("expected test panic") {
                default(info);
            }
        }));
    });
}

#[test]
fn no_task_lost_or_run_twice() {
    for selection in [Selection::LeastFull, Selection::RoundRobin] {
        let pool = Taskpool::new(TaskpoolConfig {
            selection,
            ..TaskpoolConfig::fixed(4)
        })
        .unwrap();
        const PRODUCERS: usize = 4;
        const PER_PRODUCER: usize = 20_000;
        let runs: Arc<Vec<AtomicU8>> = Arc::new(
            (0..PRODUCERS * PER_PRODUCER)
                .map(|_| AtomicU8::new(0))
                .collect(),
        );
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let pool = pool.clone();
                let runs = Arc::clone(&runs);
                std::thread::spawn(move || {
                    for i in 0..PER_PRODUCER {
                        let id = p * PER_PRODUCER + i;
                        let runs = Arc::clone(&runs);
                        pool.push(move || {
                            runs[id].fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
        let wrong: Vec<usize> = (0..runs.len())
            .filter(|&i| runs[i].load(Ordering::Relaxed) != 1)
            .collect();
        assert!(
            wrong.is_empty(),
            "{selection:?}: tasks not run exactly once: {:?}",
            &wrong[..wrong.len().min(10)]
        );
        assert_eq!(stats.executed, (PRODUCERS * PER_PRODUCER) as u64);
        assert_eq!(stats.cancelled, 0);
    }
}

#[test]
fn tasks_pushed_from_tasks_are_counted() {
    // Chains of tasks that push their successor, like a self-re-pushing task.
    let pool = Taskpool::new(TaskpoolConfig::fixed(3)).unwrap();
    let total = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    fn link(pool: Taskpool, total: Arc<AtomicU64>, left: u32, done: mpsc::Sender<()>) {
        total.fetch_add(1, Ordering::Relaxed);
        if left == 0 {
            done.send(()).unwrap();
        } else {
            let p = pool.clone();
            pool.push(move || link(p, total, left - 1, done)).unwrap();
        }
    }
    for _ in 0..50 {
        let (p, t, d) = (pool.clone(), Arc::clone(&total), done_tx.clone());
        pool.push(move || link(p, t, 999, d)).unwrap();
    }
    for _ in 0..50 {
        done_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    assert_eq!(total.load(Ordering::Relaxed), 50_000);
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(stats.executed, 50_000);
}

#[test]
fn serializer_order_under_concurrency() {
    // Many serializers, many producers. Per (producer, serializer) the sequence numbers must arrive
    // in push order, and no two tasks of a serializer may overlap.
    const SERIALIZERS: usize = 64;
    const PRODUCERS: usize = 4;
    const PER_PAIR: u64 = 500;
    let pool = Taskpool::new(TaskpoolConfig {
        serializer_batch: 4,
        ..TaskpoolConfig::fixed(4)
    })
    .unwrap();
    struct Lane {
        busy: AtomicBool,
        next: Mutex<[u64; PRODUCERS]>,
        ran: AtomicU64,
    }
    let lanes: Arc<Vec<Lane>> = Arc::new(
        (0..SERIALIZERS)
            .map(|_| Lane {
                busy: AtomicBool::new(false),
                next: Mutex::new([0; PRODUCERS]),
                ran: AtomicU64::new(0),
            })
            .collect(),
    );
    let serializers: Arc<Vec<_>> = Arc::new((0..SERIALIZERS).map(|_| pool.serializer()).collect());
    let violations = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(PRODUCERS));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (lanes, serializers, violations, start) = (
                Arc::clone(&lanes),
                Arc::clone(&serializers),
                Arc::clone(&violations),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                for seq in 0..PER_PAIR {
                    for s in 0..SERIALIZERS {
                        let (lanes, violations) = (Arc::clone(&lanes), Arc::clone(&violations));
                        serializers[(s + p) % SERIALIZERS]
                            .push(move || {
                                let lane = &lanes[(s + p) % SERIALIZERS];
                                if lane.busy.swap(true, Ordering::Acquire) {
                                    violations.fetch_add(1, Ordering::Relaxed);
                                }
                                {
                                    let mut next = lane.next.lock().unwrap();
                                    if next[p] != seq {
                                        violations.fetch_add(1, Ordering::Relaxed);
                                    }
                                    next[p] = seq + 1;
                                }
                                lane.ran.fetch_add(1, Ordering::Relaxed);
                                lane.busy.store(false, Ordering::Release);
                            })
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(
        violations.load(Ordering::Relaxed),
        0,
        "order or exclusion violated"
    );
    for lane in lanes.iter() {
        assert_eq!(
            lane.ran.load(Ordering::Relaxed),
            PRODUCERS as u64 * PER_PAIR
        );
        assert_eq!(*lane.next.lock().unwrap(), [PER_PAIR; PRODUCERS]);
    }
}

#[test]
fn growth_and_shrink_are_observed() {
    let pool = Taskpool::new(TaskpoolConfig {
        min_executors: 1,
        initial_executors: 1,
        max_executors: 4,
        growth_threshold: 4,
        growth_increment: 1,
        idle_timeout_ms: 20,
        ..TaskpoolConfig::default()
    })
    .unwrap();
    assert_eq!(pool.executors(), 1);
    // Block every executor that starts a task, so queues fill and pushes grow the pool.
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..64 {
        let (gate, ran) = (Arc::clone(&gate), Arc::clone(&ran));
        pool.push(move || {
            let (open, cv) = &*gate;
            let mut open = open.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            ran.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    }
    assert_eq!(
        pool.executors(),
        4,
        "pushes past growth_threshold grow to max_executors"
    );
    assert_eq!(pool.stats().grown, 3);
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    wait_until("all blocked tasks ran", || {
        ran.load(Ordering::Relaxed) == 64
    });
    wait_until("idle executors retire down to min_executors", || {
        pool.executors() == 1
    });
    let stats = pool.stats();
    assert_eq!(stats.shrunk, 3);
    assert_eq!(stats.queue_lengths.len(), 1);
    // The pool still works after shrinking, and grows again.
    let again = Arc::new(AtomicUsize::new(0));
    for _ in 0..100 {
        let again = Arc::clone(&again);
        pool.push(move || {
            again.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    }
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(again.load(Ordering::Relaxed), 100);
    assert_eq!(stats.executed, 164);
}

#[test]
fn panicking_task_does_not_kill_the_pool() {
    quiet_panics();
    let pool = Taskpool::new(TaskpoolConfig::fixed(2)).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..200 {
        let ran = Arc::clone(&ran);
        pool.push(move || {
            if i % 10 == 0 {
                panic!("expected test panic {i}");
            }
            ran.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    }
    // A serializer keeps its order across a panicking task.
    let lane = pool.serializer();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..20 {
        let order = Arc::clone(&order);
        lane.push(move || {
            if i == 5 {
                panic!("expected test panic in serializer");
            }
            order.lock().unwrap().push(i);
        })
        .unwrap();
    }
    wait_until("every task ran", || pool.stats().executed == 220);
    assert_eq!(pool.executors(), 2, "executors survive panics");
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(stats.panicked, 21);
    assert_eq!(ran.load(Ordering::Relaxed), 180);
    let expected: Vec<i32> = (0..20).filter(|&i| i != 5).collect();
    assert_eq!(*order.lock().unwrap(), expected);
}

#[test]
fn shutdown_drain_runs_tasks_in_flight() {
    let pool = Taskpool::new(TaskpoolConfig::fixed(2)).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let lane = pool.serializer();
    for i in 0..10_000 {
        let ran = Arc::clone(&ran);
        let task = move || {
            ran.fetch_add(1, Ordering::Relaxed);
        };
        if i % 2 == 0 {
            pool.push(task).unwrap();
        } else {
            lane.push(task).unwrap();
        }
    }
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 10_000);
    assert_eq!(stats.executed, 10_000);
    assert_eq!(stats.cancelled, 0);
    assert_eq!(pool.push(|| {}), Err(PushError::ShutDown));
    assert_eq!(lane.push(|| {}), Err(PushError::ShutDown));
    // A second call returns at once with the same figures.
    assert_eq!(pool.shutdown(ShutdownMode::Drain).unwrap().executed, 10_000);
}

#[test]
fn shutdown_cancel_drops_queued_tasks() {
    let pool = Taskpool::new(TaskpoolConfig::fixed(1)).unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let release = Arc::new(Barrier::new(2));
    {
        let release = Arc::clone(&release);
        pool.push(move || {
            started_tx.send(()).unwrap();
            release.wait();
        })
        .unwrap();
    }
    started_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    // The only executor is busy: everything below stays queued.
    let ran = Arc::new(AtomicUsize::new(0));
    let lane = pool.serializer();
    for i in 0..1_000 {
        let ran = Arc::clone(&ran);
        let task = move || {
            ran.fetch_add(1, Ordering::Relaxed);
        };
        if i % 2 == 0 {
            pool.push(task).unwrap();
        } else {
            lane.push(task).unwrap();
        }
    }
    let shutdown = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.shutdown(ShutdownMode::Cancel).unwrap())
    };
    // Probe pushes until shutdown refuses them; those accepted before count as queued tasks.
    let mut accepted = 0u64;
    wait_until("pushes are refused", || match pool.push(|| {}) {
        Ok(()) => {
            accepted += 1;
            false
        }
        Err(e) => e == PushError::ShutDown,
    });
    release.wait();
    let stats = shutdown.join().unwrap();
    let pushed = 1_001 + accepted;
    assert_eq!(
        stats.executed + stats.cancelled,
        pushed,
        "every task ran or was cancelled"
    );
    assert_eq!(stats.executed, 1 + ran.load(Ordering::Relaxed) as u64);
    assert_eq!(
        stats.executed, 1,
        "the executor was busy until shutdown: nothing else ran"
    );
}

#[test]
fn shutdown_from_a_task_is_refused() {
    let pool = Taskpool::new(TaskpoolConfig::fixed(1)).unwrap();
    let (tx, rx) = mpsc::channel();
    let p = pool.clone();
    pool.push(move || tx.send(p.shutdown(ShutdownMode::Drain)).unwrap())
        .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)).unwrap(),
        Err(ShutdownError::FromExecutor)
    );
    pool.shutdown(ShutdownMode::Drain).unwrap();
}

#[test]
fn full_queues_refuse_pushes() {
    let pool = Taskpool::new(TaskpoolConfig {
        queue_max: 8,
        serializer_queue_max: 3,
        ..TaskpoolConfig::fixed(1)
    })
    .unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let release = Arc::new(Barrier::new(2));
    {
        let release = Arc::clone(&release);
        pool.push(move || {
            started_tx.send(()).unwrap();
            release.wait();
        })
        .unwrap();
    }
    started_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    for _ in 0..8 {
        pool.push(|| {}).unwrap();
    }
    assert_eq!(pool.push(|| {}), Err(PushError::Full { queue_max: 8 }));
    let lane = pool.serializer();
    for _ in 0..3 {
        lane.push(|| {}).unwrap();
    }
    assert_eq!(
        lane.push(|| {}),
        Err(PushError::SerializerFull {
            serializer_queue_max: 3
        })
    );
    assert_eq!(lane.pending(), 3);
    release.wait();
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(stats.executed, 1 + 8 + 3);
}

#[test]
fn round_robin_spreads_pushes() {
    let pool = Taskpool::new(TaskpoolConfig {
        selection: Selection::RoundRobin,
        ..TaskpoolConfig::fixed(3)
    })
    .unwrap();
    let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let (tx, rx) = mpsc::channel();
    let release = Arc::new(Barrier::new(4));
    // Three tasks pushed in a row from one thread land on three executors: each blocks until all
    // three run, which only works if they are on different executors.
    for _ in 0..3 {
        let (threads, tx, release) = (Arc::clone(&threads), tx.clone(), Arc::clone(&release));
        pool.push(move || {
            threads.lock().unwrap().insert(std::thread::current().id());
            tx.send(()).unwrap();
            release.wait();
        })
        .unwrap();
    }
    for _ in 0..3 {
        rx.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    assert_eq!(threads.lock().unwrap().len(), 3);
    release.wait();
    pool.shutdown(ShutdownMode::Drain).unwrap();
}

#[test]
fn invalid_configs_are_refused() {
    let bad = |c: TaskpoolConfig| Taskpool::new(c).unwrap_err();
    assert!(matches!(
        bad(TaskpoolConfig::fixed(0)),
        ConfigError::Executors { .. }
    ));
    assert!(matches!(
        bad(TaskpoolConfig {
            min_executors: 3,
            initial_executors: 2,
            ..TaskpoolConfig::default()
        }),
        ConfigError::Executors { .. }
    ));
    assert!(matches!(
        bad(TaskpoolConfig {
            serializer_batch: 0,
            ..TaskpoolConfig::default()
        }),
        ConfigError::Zero {
            field: "serializer_batch"
        }
    ));
}

#[test]
fn dropping_the_last_handle_drains() {
    let ran = Arc::new(AtomicUsize::new(0));
    {
        let pool = Taskpool::new(TaskpoolConfig::fixed(2)).unwrap();
        for _ in 0..1_000 {
            let ran = Arc::clone(&ran);
            pool.push(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
    }
    wait_until("tasks accepted before the drop ran", || {
        ran.load(Ordering::Relaxed) == 1_000
    });
}

#[test]
fn a_busy_serializer_yields_its_executor() {
    // One executor. While it is held by a gate task, queue 10 000 tasks on a serializer and then
    // one plain task. The serializer runs `serializer_batch` tasks, goes to the back of the
    // queue, and the plain task runs long before the serializer is done.
    let pool = Taskpool::new(TaskpoolConfig {
        serializer_batch: 16,
        ..TaskpoolConfig::fixed(1)
    })
    .unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    let release = Arc::new(Barrier::new(2));
    {
        let release = Arc::clone(&release);
        pool.push(move || {
            started_tx.send(()).unwrap();
            release.wait();
        })
        .unwrap();
    }
    started_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let lane = pool.serializer();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..10_000 {
        let ran = Arc::clone(&ran);
        lane.push(move || {
            ran.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    }
    let seen_by_plain = Arc::new(AtomicUsize::new(usize::MAX));
    {
        let (ran, seen) = (Arc::clone(&ran), Arc::clone(&seen_by_plain));
        pool.push(move || seen.store(ran.load(Ordering::Relaxed), Ordering::Relaxed))
            .unwrap();
    }
    release.wait();
    pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 10_000);
    assert_eq!(seen_by_plain.load(Ordering::Relaxed), 16);
}

#[test]
fn serializers_woken_by_one_task_spread_over_executors() {
    // One task wakes 100 idle serializers and then waits for half of them to have run. Only the
    // last one it woke is kept to run next on its own executor; the others are pushed by the
    // selection policy (least-full), which sends most of them to the three other executors. Were
    // they all kept on the waker's executor, none could run while it waits.
    let pool = Taskpool::new(TaskpoolConfig::fixed(4)).unwrap();
    let lanes: Vec<_> = (0..100).map(|_| pool.serializer()).collect();
    let ran = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    {
        let ran = Arc::clone(&ran);
        pool.push(move || {
            for lane in &lanes {
                let ran = Arc::clone(&ran);
                lane.push(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                })
                .unwrap();
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while ran.load(Ordering::Relaxed) < 50 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            done_tx.send(ran.load(Ordering::Relaxed)).unwrap();
        })
        .unwrap();
    }
    let seen = done_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(
        seen >= 50,
        "only {seen} of the woken serializers ran elsewhere"
    );
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 100);
    assert_eq!(stats.executed, 101);
}
