//! How `tandem bench kv` issues its operations: open loop, each operation on a fixed schedule
//! and timed from its scheduled start, so that any stall (of the store or of the issuing
//! thread) is charged to every operation that was due during it.
//!
//! Two kinds of issuer:
//! - [`open_loop`]: `threads` threads, each sleeping until shortly before its next start. A
//!   sleeping thread needs the kernel to wake it on time; on a busy or virtual machine that
//!   wake-up is late by tens of microseconds to milliseconds, and the lateness is charged to
//!   the operation (it is what a caller of the store would see too).
//! - [`spin_issuer`]: one thread issuing two streams on their merged schedule and spinning
//!   between starts (it never sleeps), optionally pinned to a CPU of its own with the rest of
//!   the process on the other CPUs ([`Affinity`]). This removes the wake-up and most of the CPU
//!   contention from the figure, leaving the store's own latency plus whatever else the kernel
//!   runs on that CPU.
//!
//! Every issuer also records each operation's service time (from its actual start) and its
//! start lateness (actual start minus scheduled start), so a table can show how much of an
//! open-loop figure is the issuing thread waiting for a CPU.

use std::time::{Duration, Instant};

/// Per-operation samples of one stream, in nanoseconds.
#[derive(Default)]
pub struct Samples {
    /// From the scheduled start to the end (open loop): what goals are judged on.
    pub open_ns: Vec<u64>,
    /// From the actual start to the end (service time).
    pub service_ns: Vec<u64>,
    /// From the scheduled start to the actual start (the issuer's own lateness).
    pub late_ns: Vec<u64>,
}

impl Samples {
    fn with_capacity(n: usize) -> Self {
        Samples {
            open_ns: Vec::with_capacity(n),
            service_ns: Vec::with_capacity(n),
            late_ns: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, sched: Instant, began: Instant, done: Instant) {
        self.open_ns.push((done - sched).as_nanos() as u64);
        self.service_ns.push((done - began).as_nanos() as u64);
        self.late_ns.push((began - sched).as_nanos() as u64);
    }

    fn extend(&mut self, other: Samples) {
        self.open_ns.extend(other.open_ns);
        self.service_ns.extend(other.service_ns);
        self.late_ns.extend(other.late_ns);
    }
}

/// Lowers this thread's timer slack to 1 ns so that sleeps end when asked.
fn precise_timers() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Gives this thread SCHED_FIFO priority 10 if permitted; returns whether it did.
pub fn realtime_priority() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid parameter.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Waits until `at`: sleeps until shortly before, then spins.
pub fn sleep_until(at: Instant) {
    const SPIN: Duration = Duration::from_micros(20);
    let now = Instant::now();
    if at > now + SPIN {
        std::thread::sleep(at - now - SPIN);
    }
    spin_until(at);
}

fn spin_until(at: Instant) {
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

/// The first start of every issuer of a phase: a moment from now, so that all threads exist.
fn first_start() -> Instant {
    Instant::now() + Duration::from_millis(20)
}

/// Runs `threads` sleeping threads issuing `rate` operations per second in total for `dur`;
/// each thread calls `op(thread, i)` on its schedule.
pub fn open_loop<F>(threads: usize, rate: u64, dur: Duration, realtime: bool, op: F) -> Samples
where
    F: Fn(usize, u64) + Sync,
{
    let threads = threads.max(1);
    let per_thread = (rate as f64 / threads as f64).max(0.001);
    let interval = Duration::from_secs_f64(1.0 / per_thread);
    let start = first_start();
    let end = start + dur;
    // A system that stalls far past the end is not waited for forever.
    let give_up = end + Duration::from_secs(10);
    let op = &op;
    let results: Vec<Samples> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    precise_timers();
                    if realtime {
                        realtime_priority();
                    }
                    let offset = interval.mul_f64(t as f64 / threads as f64);
                    let cap = (dur.as_secs_f64() * per_thread) as usize + 2;
                    let mut out = Samples::with_capacity(cap);
                    let mut i = 0u64;
                    loop {
                        let sched = start + offset + interval.mul_f64(i as f64);
                        if sched >= end || Instant::now() > give_up {
                            break;
                        }
                        sleep_until(sched);
                        let began = Instant::now();
                        op(t, i);
                        out.push(sched, began, Instant::now());
                        i += 1;
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut out = Samples::default();
    for r in results {
        out.extend(r);
    }
    out
}

/// One stream of a [`spin_issuer`]: `rate` operations per second, each `op(i)`.
pub struct Stream<'a> {
    pub rate: u64,
    pub op: &'a mut dyn FnMut(u64),
}

/// Issues the streams from the calling thread on their merged schedule for `dur`, spinning
/// between starts. An operation due while another runs starts late and is charged for it.
/// With `cpu`, the thread first pins itself there (see [`Affinity`]).
pub fn spin_issuer(
    dur: Duration,
    realtime: bool,
    cpu: Option<usize>,
    streams: &mut [Stream<'_>],
) -> Vec<Samples> {
    if let Some(c) = cpu {
        // Checked by `Affinity::split`; a refusal leaves the thread unpinned, which the
        // figures would then show.
        let _ = set_thread_cpus(0, &[c]);
    }
    if realtime {
        realtime_priority();
    }
    let start = first_start();
    let end = start + dur;
    let give_up = end + Duration::from_secs(10);
    let n = streams.len();
    let intervals: Vec<Duration> = streams
        .iter()
        .map(|s| Duration::from_secs_f64(1.0 / (s.rate as f64).max(0.001)))
        .collect();
    // Streams start staggered across the first interval of the fastest, so that their
    // schedules do not coincide by construction.
    let offsets: Vec<Duration> = (0..n)
        .map(|k| intervals.iter().min().copied().unwrap_or_default() * k as u32 / n as u32)
        .collect();
    let mut next = vec![0u64; n];
    let mut out: Vec<Samples> = intervals
        .iter()
        .map(|iv| Samples::with_capacity((dur.as_secs_f64() / iv.as_secs_f64()) as usize + 2))
        .collect();
    loop {
        let due = (0..n)
            .map(|k| (start + offsets[k] + intervals[k].mul_f64(next[k] as f64), k))
            .min();
        let Some((sched, k)) = due else { break };
        if sched >= end || Instant::now() > give_up {
            break;
        }
        spin_until(sched);
        let began = Instant::now();
        (streams[k].op)(next[k]);
        out[k].push(sched, began, Instant::now());
        next[k] += 1;
    }
    out
}

/// Sets the CPUs thread `tid` (0: the calling thread) may run on.
fn set_thread_cpus(tid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write only inside it, for CPU numbers
    // below CPU_SETSIZE (checked); sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPUs this process may run on.
fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: as in `set_thread_cpus`; sched_getaffinity writes into the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// A split of the process's CPUs for `--pin-issuer`: the last allowed CPU for the issuer of
/// lookups and async puts, the others for everything else (the store's writer, publisher and
/// checkpointer, the sync writers, the disk hog). Other processes are not moved.
pub struct Affinity {
    all: Vec<usize>,
    pub issuer: usize,
    rest: Vec<usize>,
}

impl Affinity {
    pub fn split() -> anyhow::Result<Affinity> {
        let all = allowed_cpus()?;
        let Some((&issuer, rest)) = all.split_last() else {
            anyhow::bail!("--pin-issuer: the process may run on no CPU");
        };
        if rest.is_empty() {
            anyhow::bail!(
                "--pin-issuer needs at least 2 CPUs; this process may use only CPU {issuer}"
            );
        }
        Ok(Affinity {
            rest: rest.to_vec(),
            all: all.clone(),
            issuer,
        })
    }

    /// Moves every thread of this process (threads started later inherit from their starter)
    /// off the issuer's CPU.
    pub fn pin_rest(&self) -> anyhow::Result<()> {
        set_all_threads(&self.rest)
    }

    /// Lets every thread of this process run anywhere again.
    pub fn unpin(&self) -> anyhow::Result<()> {
        set_all_threads(&self.all)
    }
}

fn set_all_threads(cpus: &[usize]) -> anyhow::Result<()> {
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        match set_thread_cpus(tid, cpus) {
            Ok(()) => {}
            // The thread ended meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => anyhow::bail!("cannot set the CPUs of thread {tid} to {cpus:?}: {e}"),
        }
    }
    Ok(())
}
