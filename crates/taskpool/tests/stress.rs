//! Stress of the hand-off between serializers and the pool: a serializer's scheduling flag is
//! set by pushers and cleared by the executor that finds its queue empty, while executors grow
//! and retire underneath. Every round checks that each serializer ran its tasks one at a time,
//! in order, exactly once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use taskpool::{Serializer, ShutdownMode, Taskpool, TaskpoolConfig};

struct Lane {
    serializer: Serializer,
    busy: AtomicBool,
    /// Next expected sequence number per source (index = producer, last = relay).
    next: Mutex<Vec<u64>>,
    ran: AtomicU64,
}

const PRODUCERS: usize = 3;
const LANES: usize = 16;
const PER_PRODUCER: u64 = 10_000;

fn round(config: TaskpoolConfig) {
    let pool = Taskpool::new(config).unwrap();
    let lanes: Arc<Vec<Lane>> = Arc::new(
        (0..LANES)
            .map(|_| Lane {
                serializer: pool.serializer(),
                busy: AtomicBool::new(false),
                next: Mutex::new(vec![0; PRODUCERS + 1]),
                ran: AtomicU64::new(0),
            })
            .collect(),
    );
    let violations = Arc::new(AtomicUsize::new(0));
    // Tasks pushed by other serializers' tasks, per target lane, in the order they were pushed.
    let relay_seq: Arc<Vec<AtomicU64>> = Arc::new((0..LANES).map(|_| AtomicU64::new(0)).collect());

    fn visit(lanes: &[Lane], violations: &AtomicUsize, lane: usize, source: usize, seq: u64) {
        let l = &lanes[lane];
        if l.busy.swap(true, Ordering::Acquire) {
            violations.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut next = l.next.lock().unwrap();
            if next[source] != seq {
                violations.fetch_add(1, Ordering::Relaxed);
            }
            next[source] = seq + 1;
        }
        l.ran.fetch_add(1, Ordering::Relaxed);
        l.busy.store(false, Ordering::Release);
    }

    let start = Arc::new(Barrier::new(PRODUCERS));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (lanes, violations, relay_seq, start) = (
                Arc::clone(&lanes),
                Arc::clone(&violations),
                Arc::clone(&relay_seq),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                // Per lane, how many tasks this producer pushed to it so far: the sequence
                // number the lane must see next from this producer.
                let mut pushed = [0u64; LANES];
                for seq in 0..PER_PRODUCER {
                    let lane = (seq as usize * 7 + p) % LANES;
                    let lane_seq = pushed[lane];
                    pushed[lane] += 1;
                    let (l2, v2, r2) = (
                        Arc::clone(&lanes),
                        Arc::clone(&violations),
                        Arc::clone(&relay_seq),
                    );
                    lanes[lane]
                        .serializer
                        .push(move || {
                            visit(&l2, &v2, lane, p, lane_seq);
                            // Every tenth task hands a task to the next lane from inside the pool.
                            if seq % 10 == 0 {
                                let target = (lane + 1) % LANES;
                                // Only lane - 1 relays to a lane, and one task of it runs at a
                                // time, but the number and the push are still taken together so
                                // the expected order is the push order.
                                let guard = RELAY_LOCK.lock().unwrap();
                                let rseq = r2[target].fetch_add(1, Ordering::Relaxed);
                                let (l3, v3) = (Arc::clone(&l2), Arc::clone(&v2));
                                l2[target]
                                    .serializer
                                    .push(move || visit(&l3, &v3, target, PRODUCERS, rseq))
                                    .unwrap();
                                drop(guard);
                            }
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    // Relays are pushed by running tasks, and a shutting-down pool refuses new pushes, so wait
    // for every task (ten per cent of them relay once) before shutting down.
    let expected = PRODUCERS as u64 * PER_PRODUCER / 10 * 11;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while lanes
        .iter()
        .map(|l| l.ran.load(Ordering::Relaxed))
        .sum::<u64>()
        < expected
    {
        assert!(std::time::Instant::now() < deadline, "tasks still missing");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
    assert_eq!(
        violations.load(Ordering::Relaxed),
        0,
        "order or exclusion violated"
    );
    let relayed: u64 = relay_seq.iter().map(|r| r.load(Ordering::Relaxed)).sum();
    let ran: u64 = lanes.iter().map(|l| l.ran.load(Ordering::Relaxed)).sum();
    assert_eq!(relayed, PRODUCERS as u64 * PER_PRODUCER / 10);
    assert_eq!(ran, PRODUCERS as u64 * PER_PRODUCER + relayed);
    assert_eq!(stats.executed, ran);
    assert_eq!(stats.cancelled, 0);
}

static RELAY_LOCK: Mutex<()> = Mutex::new(());

#[test]
fn serializer_handoff_fixed_pool() {
    for batch in [1, 2, 32].repeat(8) {
        round(TaskpoolConfig {
            serializer_batch: batch,
            ..TaskpoolConfig::fixed(3)
        });
    }
}

#[test]
fn serializer_handoff_while_the_pool_grows_and_shrinks() {
    for _ in 0..25 {
        round(TaskpoolConfig {
            min_executors: 1,
            initial_executors: 1,
            max_executors: 4,
            growth_threshold: 2,
            growth_increment: 1,
            idle_timeout_ms: 1,
            serializer_batch: 1,
            ..TaskpoolConfig::default()
        });
    }
}

/// Shutdown while producers are still pushing to the pool and to serializers: every push that
/// was accepted either ran or was counted as cancelled, in both modes; nothing runs twice.
#[test]
fn shutdown_races_with_pushes() {
    for mode in [ShutdownMode::Drain, ShutdownMode::Cancel].repeat(10) {
        let pool = Taskpool::new(TaskpoolConfig {
            serializer_batch: 2,
            ..TaskpoolConfig::fixed(2)
        })
        .unwrap();
        let ran = Arc::new(AtomicU64::new(0));
        let go = Arc::new(Barrier::new(PRODUCERS + 1));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (pool, ran, go) = (pool.clone(), Arc::clone(&ran), Arc::clone(&go));
                std::thread::spawn(move || {
                    let lanes: Vec<Serializer> = (0..4).map(|_| pool.serializer()).collect();
                    go.wait();
                    let mut accepted = 0u64;
                    for i in 0usize.. {
                        let ran = Arc::clone(&ran);
                        let task = move || {
                            ran.fetch_add(1, Ordering::Relaxed);
                        };
                        let pushed = if (i + p) % 3 == 0 {
                            pool.push(task)
                        } else {
                            lanes[i % lanes.len()].push(task)
                        };
                        match pushed {
                            Ok(()) => accepted += 1,
                            Err(taskpool::PushError::ShutDown) => break,
                            // Producers outrun the executors: bounded queues push back.
                            Err(_) => std::thread::yield_now(),
                        }
                    }
                    accepted
                })
            })
            .collect();
        go.wait();
        // Let the producers get going; no timing is asserted.
        while ran.load(Ordering::Relaxed) < 2_000 {
            std::thread::yield_now();
        }
        let stats = pool.shutdown(mode).unwrap();
        let accepted: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        let ran = ran.load(Ordering::Relaxed);
        assert_eq!(stats.executed, ran, "{mode:?}");
        assert_eq!(
            ran + stats.cancelled,
            accepted,
            "{mode:?}: accepted tasks lost"
        );
    }
}

/// Pairs of serializers passing one task back and forth (the serializer benchmark's shape): each
/// hand-off from a running task goes through the executor's run-next place, and every
/// `serializer_batch` hops through the selection policy. Every hop must run exactly once, in order,
/// never overlapping another task of the same serializer.
#[test]
fn serializer_chains_hand_off_across_executors() {
    const PAIRS: usize = 40;
    const HOPS: u64 = 3_000;
    for batch in [1, 3, 32] {
        let pool = Taskpool::new(TaskpoolConfig {
            serializer_batch: batch,
            ..TaskpoolConfig::fixed(3)
        })
        .unwrap();
        struct Chain {
            lanes: [Serializer; 2],
            busy: [AtomicBool; 2],
            hops: AtomicU64,
        }
        let chains: Arc<Vec<Chain>> = Arc::new(
            (0..PAIRS)
                .map(|_| Chain {
                    lanes: [pool.serializer(), pool.serializer()],
                    busy: [AtomicBool::new(false), AtomicBool::new(false)],
                    hops: AtomicU64::new(0),
                })
                .collect(),
        );
        let violations = Arc::new(AtomicUsize::new(0));
        fn hop(chains: Arc<Vec<Chain>>, v: Arc<AtomicUsize>, pair: usize, side: usize, n: u64) {
            let c = &chains[pair];
            if c.busy[side].swap(true, Ordering::Acquire) {
                v.fetch_add(1, Ordering::Relaxed);
            }
            if c.hops.fetch_add(1, Ordering::Relaxed) != n {
                v.fetch_add(1, Ordering::Relaxed);
            }
            c.busy[side].store(false, Ordering::Release);
            if n + 1 < HOPS {
                let next = 1 - side;
                let (c2, v2) = (Arc::clone(&chains), Arc::clone(&v));
                chains[pair].lanes[next]
                    .push(move || hop(c2, v2, pair, next, n + 1))
                    .unwrap();
            }
        }
        for pair in 0..PAIRS {
            let (c, v) = (Arc::clone(&chains), Arc::clone(&violations));
            chains[pair].lanes[0]
                .push(move || hop(c, v, pair, 0, 0))
                .unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while chains.iter().any(|c| c.hops.load(Ordering::Relaxed) < HOPS) {
            assert!(std::time::Instant::now() < deadline, "chains stalled");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let stats = pool.shutdown(ShutdownMode::Drain).unwrap();
        assert_eq!(violations.load(Ordering::Relaxed), 0, "batch {batch}");
        assert_eq!(stats.executed, PAIRS as u64 * HOPS, "batch {batch}");
        for c in chains.iter() {
            assert_eq!(c.hops.load(Ordering::Relaxed), HOPS);
        }
    }
}
