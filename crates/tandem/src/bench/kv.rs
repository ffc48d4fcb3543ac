//! `tandem bench kv`: the key-value store under a registration-like workload, against an astdb
//! replica and SQLite with one transaction per write, with and without a disk hog.
//!
//! Every latency is measured open-loop: each thread issues its operations on a fixed schedule
//! and times each from its scheduled start, so a stall is charged to every operation that was
//! due during it (a closed loop would charge only the one that met it).

use super::report::{self, BenchReport, Percentiles, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kv::{Durability, Options, Store};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::fs::File;
use std::io::{IsTerminal, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Directory on the filesystem to measure (a temporary directory is made inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seconds each phase runs (six latency phases and two fsync phases).
    #[arg(long, default_value_t = 5)]
    phase_secs: u64,
    /// Bindings (registrations) in the store.
    #[arg(long, default_value_t = 10_000)]
    bindings: usize,
    /// Durable (sync) binding rewrites per second, spread over --sync-writers threads.
    #[arg(long, default_value_t = 2_000)]
    sync_rate: u64,
    /// Threads issuing sync rewrites. Each has its own schedule, and an operation due while
    /// its thread still waits for the previous one starts late (and is charged for it), so
    /// there are enough threads for each to have one operation in flight most of the time,
    /// like independent registrations.
    #[arg(long, default_value_t = 256)]
    sync_writers: usize,
    /// Async binding rewrites per second (one thread).
    #[arg(long, default_value_t = 2_000)]
    async_rate: u64,
    /// Lookups per second (two threads).
    #[arg(long, default_value_t = 10_000)]
    get_rate: u64,
    /// Concurrent writers in the group-commit throughput phase.
    #[arg(long, default_value_t = 1_000)]
    throughput_writers: usize,
    /// Make the disk hog write with O_DIRECT (no page cache: the disk is as busy, the CPU
    /// much less), to separate waiting for the disk from waiting for a CPU.
    #[arg(long)]
    hog_direct: bool,
    /// Run the lookup and async-put load threads (the callers, not the store's own threads)
    /// with real-time priority (SCHED_FIFO, needs root or CAP_SYS_NICE), so that on a busy
    /// machine their figures show the store rather than waiting for a CPU. The astdb replica's
    /// readers get the same priority.
    #[arg(long)]
    realtime_readers: bool,
    /// The store's `wal_restart_bytes`, in MiB (default: the store's default).
    #[arg(long)]
    wal_restart_mib: Option<u64>,
    /// The store's `checkpoint_interval_ms` (default: the store's default).
    #[arg(long)]
    checkpoint_interval_ms: Option<u64>,
    /// Seconds of each throughput run (three runs; the median is reported).
    #[arg(long, default_value_t = 1)]
    throughput_secs: u64,
}

#[derive(Serialize)]
struct PhaseRow {
    system: &'static str,
    disk_hog: bool,
    op: &'static str,
    #[serde(flatten)]
    p: Percentiles,
}

#[derive(Serialize, Default)]
struct Goals {
    sync_put_p99_within_2_5x_fsync_p99: bool,
    sync_put_p99_within_2_5x_fsync_p99_disk_hog: bool,
    get_p99_at_most_1us: bool,
    get_p99_at_most_1us_disk_hog: bool,
    async_put_p99_at_most_20us: bool,
    async_put_p99_at_most_20us_disk_hog: bool,
    sync_puts_per_sec_at_least_100k: bool,
}

#[derive(Serialize, Default)]
struct KvReport {
    dir: String,
    phase_secs: u64,
    bindings: usize,
    sync_rate: u64,
    sync_writers: usize,
    async_rate: u64,
    get_rate: u64,
    fsync_p99_us: f64,
    fsync_p99_us_disk_hog: f64,
    sync_put_p99_us: f64,
    sync_put_p99_us_disk_hog: f64,
    async_put_p99_us: f64,
    async_put_p99_us_disk_hog: f64,
    /// Async put time from its actual start (without the load generator's own lateness).
    async_put_service_p99_us: f64,
    async_put_service_p99_us_disk_hog: f64,
    get_p99_us: f64,
    get_p99_us_disk_hog: f64,
    /// Lookup time from its actual start (without the load generator's own lateness).
    get_service_p99_us: f64,
    get_service_p99_us_disk_hog: f64,
    /// Durable puts per second by `throughput_writers` tokio tasks awaiting their commits.
    sync_puts_per_sec: f64,
    /// The same by `throughput_writers` OS threads blocking on their commits.
    sync_puts_per_sec_threads: f64,
    throughput_writers: usize,
    per_write_tx_puts_per_sec: f64,
    astdb_put_p99_us: f64,
    astdb_put_p99_us_disk_hog: f64,
    astdb_get_p99_us: f64,
    astdb_get_p99_us_disk_hog: f64,
    per_write_tx_put_p99_us: f64,
    per_write_tx_put_p99_us_disk_hog: f64,
    sync_put_to_fsync_p99_ratio: f64,
    sync_put_to_fsync_p99_ratio_disk_hog: f64,
    astdb_put_to_sync_put_p99_ratio: f64,
    astdb_put_to_sync_put_p99_ratio_disk_hog: f64,
    astdb_get_to_get_p99_ratio_disk_hog: f64,
    disk_hog_mib_per_sec: f64,
    disk_hog_direct: bool,
    /// Whether lookups and async puts were issued from SCHED_FIFO threads.
    realtime_readers: bool,
    goals: Goals,
    phases: Vec<PhaseRow>,
}

impl BenchReport for KvReport {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "tandem bench kv: {} bindings; {} sync puts/s over {} writers, {} async puts/s, \
             {} gets/s; open loop, {} s per phase; dir {}",
            self.bindings,
            self.sync_rate,
            self.sync_writers,
            self.async_rate,
            self.get_rate,
            self.phase_secs,
            self.dir
        )?;
        writeln!(out)?;
        let mut t = Table::new([
            "system", "disk hog", "op", "count", "p50 us", "p99 us", "p999 us", "max us",
        ]);
        for r in &self.phases {
            t.row([
                r.system.to_string(),
                if r.disk_hog { "yes" } else { "no" }.to_string(),
                r.op.to_string(),
                r.p.count.to_string(),
                format!("{:.1}", r.p.p50_us),
                format!("{:.1}", r.p.p99_us),
                format!("{:.1}", r.p.p999_us),
                format!("{:.1}", r.p.max_us),
            ]);
        }
        t.write(out)?;
        writeln!(out)?;
        let g = &self.goals;
        let mark = |b: bool| if b { "met" } else { "NOT met" };
        writeln!(
            out,
            "sync put p99 / fsync p99: {:.2} (quiet), {:.2} (disk hog); goal <= 2.5: {}, {}",
            self.sync_put_to_fsync_p99_ratio,
            self.sync_put_to_fsync_p99_ratio_disk_hog,
            mark(g.sync_put_p99_within_2_5x_fsync_p99),
            mark(g.sync_put_p99_within_2_5x_fsync_p99_disk_hog)
        )?;
        writeln!(
            out,
            "get p99: {:.2} us, {:.2} us with disk hog (service time {:.2}, {:.2}); goal <= 1 us: {}, {}",
            self.get_p99_us,
            self.get_p99_us_disk_hog,
            self.get_service_p99_us,
            self.get_service_p99_us_disk_hog,
            mark(g.get_p99_at_most_1us),
            mark(g.get_p99_at_most_1us_disk_hog)
        )?;
        writeln!(
            out,
            "async put p99: {:.2} us, {:.2} us with disk hog (service time {:.2}, {:.2}); \
             goal <= 20 us: {}, {}",
            self.async_put_p99_us,
            self.async_put_p99_us_disk_hog,
            self.async_put_service_p99_us,
            self.async_put_service_p99_us_disk_hog,
            mark(g.async_put_p99_at_most_20us),
            mark(g.async_put_p99_at_most_20us_disk_hog)
        )?;
        writeln!(
            out,
            "group commit: {:.0} sync puts/s with {} writer tasks, {:.0}/s with as many threads \
             (SQLite per-write transactions: {:.0}/s); goal >= 100,000: {}",
            self.sync_puts_per_sec,
            self.throughput_writers,
            self.sync_puts_per_sec_threads,
            self.per_write_tx_puts_per_sec,
            mark(g.sync_puts_per_sec_at_least_100k)
        )?;
        writeln!(
            out,
            "astdb replica put p99 / Tandem sync put p99: {:.1} (quiet), {:.1} (disk hog); \
             astdb get p99 / Tandem get p99 with disk hog: {:.0}",
            self.astdb_put_to_sync_put_p99_ratio,
            self.astdb_put_to_sync_put_p99_ratio_disk_hog,
            self.astdb_get_to_get_p99_ratio_disk_hog
        )?;
        writeln!(
            out,
            "disk hog wrote {:.0} MiB/s{}",
            self.disk_hog_mib_per_sec,
            if self.disk_hog_direct {
                " (O_DIRECT)"
            } else {
                " (buffered)"
            }
        )
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
fn realtime_priority() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid parameter.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Waits until `at`: sleeps until shortly before, then spins.
fn wait_until(at: Instant) {
    const SPIN: Duration = Duration::from_micros(20);
    let now = Instant::now();
    if at > now + SPIN {
        std::thread::sleep(at - now - SPIN);
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

struct Samples {
    /// From the scheduled start (open loop).
    open_ns: Vec<u64>,
    /// From the actual start (service time).
    service_ns: Vec<u64>,
}

/// Runs `threads` threads issuing `rate` operations per second in total for `dur`; each thread
/// calls `op(thread, i)` on its schedule.
fn open_loop<F>(threads: usize, rate: u64, dur: Duration, realtime: bool, op: F) -> Samples
where
    F: Fn(usize, u64) + Sync,
{
    let threads = threads.max(1);
    let per_thread = (rate as f64 / threads as f64).max(0.001);
    let interval = Duration::from_secs_f64(1.0 / per_thread);
    let start = Instant::now() + Duration::from_millis(20);
    let end = start + dur;
    // A system that stalls far past the end is not waited for forever.
    let give_up = end + Duration::from_secs(10);
    let op = &op;
    let results: Vec<(Vec<u64>, Vec<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    precise_timers();
                    if realtime {
                        realtime_priority();
                    }
                    let offset = interval.mul_f64(t as f64 / threads as f64);
                    let cap = (dur.as_secs_f64() * per_thread) as usize + 2;
                    let mut open = Vec::with_capacity(cap);
                    let mut service = Vec::with_capacity(cap);
                    let mut i = 0u64;
                    loop {
                        let sched = start + offset + interval.mul_f64(i as f64);
                        if sched >= end || Instant::now() > give_up {
                            break;
                        }
                        wait_until(sched);
                        let began = Instant::now();
                        op(t, i);
                        let done = Instant::now();
                        open.push((done - sched).as_nanos() as u64);
                        service.push((done - began).as_nanos() as u64);
                        i += 1;
                    }
                    (open, service)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut out = Samples {
        open_ns: Vec::new(),
        service_ns: Vec::new(),
    };
    for (o, s) in results {
        out.open_ns.extend(o);
        out.service_ns.extend(s);
    }
    out
}

/// Closed-loop fsync latency of the filesystem: overwrite 4 KiB in place in a preallocated
/// file, then fdatasync — the cheapest durable write the filesystem offers, so the store's
/// goal relative to it is the strict one.
fn fsync_latency(dir: &Path, dur: Duration) -> anyhow::Result<Vec<u64>> {
    use std::os::unix::fs::FileExt;
    const FILE_BYTES: u64 = 4 << 20;
    let path = dir.join("fsync-probe.bin");
    let f = File::create(&path)?;
    let buf = vec![0x5au8; 4096];
    let mut off = 0;
    while off < FILE_BYTES {
        f.write_all_at(&buf, off)?;
        off += buf.len() as u64;
    }
    f.sync_all()?;
    let mut out = Vec::new();
    let end = Instant::now() + dur;
    off = 0;
    while Instant::now() < end {
        let t = Instant::now();
        f.write_all_at(&buf, off)?;
        f.sync_data()?;
        out.push(t.elapsed().as_nanos() as u64);
        off = (off + buf.len() as u64) % FILE_BYTES;
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(out)
}

/// A thread writing and fsyncing a large file on the same filesystem, like a backup.
struct DiskHog {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    started: Instant,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl DiskHog {
    const CHUNK_BYTES: usize = 8 << 20;
    const FILE_BYTES_MAX: u64 = 256 << 20;

    fn start(dir: &Path, direct: bool) -> anyhow::Result<DiskHog> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join("disk-hog.bin");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let handle = {
            let stop = stop.clone();
            let written = written.clone();
            std::thread::Builder::new()
                .name("disk-hog".into())
                .spawn(move || {
                    // O_DIRECT needs a buffer aligned to the block size.
                    let raw = vec![0xa5u8; Self::CHUNK_BYTES + 4096];
                    let skew = raw.as_ptr().align_offset(4096);
                    let buf = &raw[skew..skew + Self::CHUNK_BYTES];
                    let mut len = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if f.write_all(buf).and_then(|()| f.sync_data()).is_err() {
                            break;
                        }
                        len += buf.len() as u64;
                        written.fetch_add(buf.len() as u64, Ordering::Relaxed);
                        if len >= Self::FILE_BYTES_MAX {
                            let _ = f.set_len(0);
                            let _ = f.rewind();
                            len = 0;
                        }
                    }
                    drop(f);
                    let _ = std::fs::remove_file(&path);
                })?
        };
        // Let it reach a steady state.
        std::thread::sleep(Duration::from_millis(500));
        Ok(DiskHog {
            stop,
            written,
            started: Instant::now(),
            handle: Some(handle),
        })
    }

    fn stop(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.written.load(Ordering::Relaxed) as f64
            / (1 << 20) as f64
            / self.started.elapsed().as_secs_f64()
    }
}

fn binding_key(i: u64, bindings: usize) -> String {
    format!("{}", 1000 + i % bindings as u64)
}

fn binding_value(ext: &str, n: u64) -> String {
    format!(
        "sip:{ext}@192.0.2.{}:5060;transport=udp;expires=3600;rev={n}",
        n % 250 + 1
    )
}

struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Asterisk's astdb as main/db.c runs it: one connection under one lock, rollback journal,
/// synchronous=FULL, writes made inside an open transaction that a background thread commits
/// at most once a second, holding the lock during the commit.
struct AstdbReplica {
    state: Mutex<ReplicaState>,
    cond: Condvar,
}

struct ReplicaState {
    conn: Connection,
    dosync: bool,
    exit: bool,
}

impl AstdbReplica {
    fn open(path: &Path) -> anyhow::Result<Arc<AstdbReplica>> {
        let conn = Connection::open(path)?;
        conn.execute_batch("PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;")?;
        conn.execute_batch(kv::ASTDB_CREATE_SQL)?;
        Ok(Arc::new(AstdbReplica {
            state: Mutex::new(ReplicaState {
                conn,
                dosync: false,
                exit: false,
            }),
            cond: Condvar::new(),
        }))
    }

    fn sync_thread(self: Arc<Self>) {
        let mut st = self.state.lock().unwrap();
        let _ = st.conn.execute_batch("BEGIN TRANSACTION");
        loop {
            while !st.dosync {
                st = self.cond.wait(st).unwrap();
            }
            st.dosync = false;
            if st.conn.execute_batch("COMMIT").is_err() {
                let _ = st.conn.execute_batch("ROLLBACK");
            }
            if st.exit {
                break;
            }
            let _ = st.conn.execute_batch("BEGIN TRANSACTION");
            drop(st);
            std::thread::sleep(Duration::from_secs(1));
            st = self.state.lock().unwrap();
        }
    }

    fn put(&self, key: &str, value: &str) {
        let mut st = self.state.lock().unwrap();
        st.conn
            .prepare_cached("INSERT OR REPLACE INTO astdb (key, value) VALUES (?, ?)")
            .and_then(|mut s| s.execute(params![key, value]))
            .expect("astdb replica put");
        st.dosync = true;
        self.cond.notify_one();
    }

    fn get(&self, key: &str) -> Option<String> {
        let st = self.state.lock().unwrap();
        st.conn
            .prepare_cached("SELECT value FROM astdb WHERE key=?")
            .and_then(|mut s| s.query_row(params![key], |r| r.get(0)).optional())
            .expect("astdb replica get")
    }

    fn stop(&self) {
        let mut st = self.state.lock().unwrap();
        st.exit = true;
        st.dosync = true;
        self.cond.notify_one();
    }
}

/// SQLite (WAL, synchronous=FULL) with one transaction and one fsync per write.
struct PerWriteTx {
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
}

impl PerWriteTx {
    fn open(path: &Path, readers: usize) -> anyhow::Result<PerWriteTx> {
        let conn = Connection::open(path)?;
        let _: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.execute_batch(
            "PRAGMA synchronous=FULL; \
             CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY NOT NULL, value TEXT) WITHOUT ROWID;",
        )?;
        let readers = (0..readers)
            .map(|_| Connection::open(path).map(Mutex::new))
            .collect::<rusqlite::Result<_>>()?;
        Ok(PerWriteTx {
            writer: Mutex::new(conn),
            readers,
        })
    }

    fn put(&self, key: &str, value: &str) {
        let c = self.writer.lock().unwrap();
        c.prepare_cached("INSERT OR REPLACE INTO kv (key, value) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![key, value]))
            .expect("per-write transaction put");
    }

    fn get(&self, reader: usize, key: &str) -> Option<String> {
        let c = self.readers[reader % self.readers.len()].lock().unwrap();
        c.prepare_cached("SELECT value FROM kv WHERE key = ?1")
            .and_then(|mut s| s.query_row(params![key], |r| r.get(0)).optional())
            .expect("per-write transaction get")
    }
}

struct Ctx<'a> {
    args: &'a Args,
    report: &'a mut KvReport,
    pb: &'a ProgressBar,
}

impl Ctx<'_> {
    fn record(
        &mut self,
        system: &'static str,
        hog: bool,
        op: &'static str,
        mut ns: Vec<u64>,
    ) -> f64 {
        let p = Percentiles::from_nanos(&mut ns);
        self.report.phases.push(PhaseRow {
            system,
            disk_hog: hog,
            op,
            p,
        });
        p.p99_us
    }

    fn step(&self, msg: String) {
        self.pb.set_message(msg);
        self.pb.inc(1);
    }
}

fn phase_tandem(cx: &mut Ctx, store: &Store, hog: bool) {
    let a = cx.args;
    let dur = Duration::from_secs(a.phase_secs);
    let bindings = a.bindings;
    let sync_writers = a.sync_writers;
    let (sync, (asyn, gets)) = std::thread::scope(|s| {
        let w = s.spawn(|| {
            open_loop(sync_writers, a.sync_rate, dur, false, |t, i| {
                let mut r = Rng::new((t as u64) << 32 | i);
                let ext = binding_key(r.next(), bindings);
                store
                    .put_with("registrar", &ext, binding_value(&ext, i), Durability::Sync)
                    .and_then(|c| c.wait())
                    .expect("sync put");
            })
        });
        let x = s.spawn(|| {
            open_loop(1, a.async_rate, dur, a.realtime_readers, |t, i| {
                let mut r = Rng::new(0xa5a5 ^ ((t as u64) << 32 | i));
                let ext = binding_key(r.next(), bindings);
                let c = store
                    .put_with("presence", &ext, binding_value(&ext, i), Durability::Async)
                    .expect("async put");
                debug_assert!(c.is_done());
            })
        });
        let g = open_loop(2, a.get_rate, dur, a.realtime_readers, |t, i| {
            let mut r = Rng::new(0x5a5a ^ ((t as u64) << 32 | i));
            let ext = binding_key(r.next(), bindings);
            let v = store.get("registrar", &ext).expect("get");
            std::hint::black_box(v);
        });
        (w.join().unwrap(), (x.join().unwrap(), g))
    });
    let sp = cx.record("tandem", hog, "sync put", sync.open_ns);
    let ap = cx.record("tandem", hog, "async put", asyn.open_ns);
    let aps = cx.record("tandem", hog, "async put (service)", asyn.service_ns);
    let gp = cx.record("tandem", hog, "get", gets.open_ns);
    let gs = cx.record("tandem", hog, "get (service)", gets.service_ns);
    let r = &mut cx.report;
    if hog {
        r.sync_put_p99_us_disk_hog = sp;
        r.async_put_p99_us_disk_hog = ap;
        r.async_put_service_p99_us_disk_hog = aps;
        r.get_p99_us_disk_hog = gp;
        r.get_service_p99_us_disk_hog = gs;
    } else {
        r.sync_put_p99_us = sp;
        r.async_put_p99_us = ap;
        r.async_put_service_p99_us = aps;
        r.get_p99_us = gp;
        r.get_service_p99_us = gs;
    }
}

/// The registration workload against a baseline store: writers rewriting bindings at the sync
/// rate while two readers look them up, both open loop. Returns the puts' and gets' samples.
fn baseline_load(
    cx: &Ctx,
    put: impl Fn(&str, &str) + Sync,
    get: impl Fn(usize, &str) + Sync,
) -> (Samples, Samples) {
    let a = cx.args;
    let dur = Duration::from_secs(a.phase_secs);
    let bindings = a.bindings;
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            open_loop(a.sync_writers, a.sync_rate, dur, false, |t, i| {
                let mut r = Rng::new((t as u64) << 32 | i);
                let ext = binding_key(r.next(), bindings);
                put(&format!("/registrar/{ext}"), &binding_value(&ext, i));
            })
        });
        let g = open_loop(2, a.get_rate, dur, a.realtime_readers, |t, i| {
            let mut r = Rng::new(0x5a5a ^ ((t as u64) << 32 | i));
            let ext = binding_key(r.next(), bindings);
            get(t, &format!("/registrar/{ext}"));
        });
        (w.join().unwrap(), g)
    })
}

fn phase_astdb(cx: &mut Ctx, db: &AstdbReplica, hog: bool) {
    let (puts, gets) = baseline_load(
        cx,
        |k, v| db.put(k, v),
        |_, k| {
            std::hint::black_box(db.get(k));
        },
    );
    let pp = cx.record("astdb replica", hog, "put", puts.open_ns);
    let gp = cx.record("astdb replica", hog, "get", gets.open_ns);
    if hog {
        cx.report.astdb_put_p99_us_disk_hog = pp;
        cx.report.astdb_get_p99_us_disk_hog = gp;
    } else {
        cx.report.astdb_put_p99_us = pp;
        cx.report.astdb_get_p99_us = gp;
    }
}

fn phase_per_write(cx: &mut Ctx, db: &PerWriteTx, hog: bool) {
    let (puts, gets) = baseline_load(
        cx,
        |k, v| db.put(k, v),
        |t, k| {
            std::hint::black_box(db.get(t, k));
        },
    );
    let pp = cx.record("sqlite per-write tx", hog, "sync put", puts.open_ns);
    cx.record("sqlite per-write tx", hog, "get", gets.open_ns);
    if hog {
        cx.report.per_write_tx_put_p99_us_disk_hog = pp;
    } else {
        cx.report.per_write_tx_put_p99_us = pp;
    }
}

/// Closed-loop throughput of `writers` threads each doing durable puts for `dur`.
fn throughput(writers: usize, dur: Duration, put: impl Fn(usize, u64) + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let barrier = Barrier::new(writers + 1);
    let elapsed = std::thread::scope(|s| {
        for t in 0..writers {
            let (stop, total, barrier, put) = (&stop, &total, &barrier, &put);
            std::thread::Builder::new()
                .stack_size(128 << 10)
                .spawn_scoped(s, move || {
                    barrier.wait();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        put(t, n);
                        n += 1;
                    }
                    total.fetch_add(n, Ordering::Relaxed);
                })
                .expect("spawn a writer thread");
        }
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        start.elapsed()
    });
    total.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}

/// Closed-loop throughput of `writers` tokio tasks each doing durable puts for `dur`, awaiting
/// each commit (as FastAGI handlers do), on a runtime with one worker per core.
fn throughput_tasks(store: &Store, writers: usize, dur: Duration) -> anyhow::Result<f64> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .enable_time()
        .build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let elapsed = rt.block_on(async {
        let mut tasks = Vec::with_capacity(writers);
        for t in 0..writers {
            let (store, stop, total) = (store.clone(), stop.clone(), total.clone());
            tasks.push(tokio::spawn(async move {
                let key = t.to_string();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    store
                        .put_with("throughput", &key, n.to_string(), Durability::Sync)
                        .expect("sync put")
                        .await
                        .expect("sync put commit");
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
            }));
        }
        let start = Instant::now();
        tokio::time::sleep(dur).await;
        stop.store(true, Ordering::Relaxed);
        let elapsed = start.elapsed();
        for t in tasks {
            let _ = t.await;
        }
        elapsed
    });
    Ok(total.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let base = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    let tmp = tempfile::Builder::new()
        .prefix("tandem-bench-kv-")
        .tempdir_in(&base)
        .map_err(|e| anyhow::anyhow!("cannot make a directory in {}: {e}", base.display()))?;
    let dir = tmp.path();
    let steps = 13;
    let pb = if args.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb
    };
    let mut report = KvReport {
        dir: base.display().to_string(),
        phase_secs: args.phase_secs,
        bindings: args.bindings,
        sync_rate: args.sync_rate,
        sync_writers: args.sync_writers,
        async_rate: args.async_rate,
        get_rate: args.get_rate,
        throughput_writers: args.throughput_writers,
        disk_hog_direct: args.hog_direct,
        realtime_readers: args.realtime_readers && {
            // Probe once whether the priority is permitted.
            std::thread::spawn(realtime_priority)
                .join()
                .unwrap_or(false)
        },
        ..KvReport::default()
    };
    let mut cx = Ctx {
        args: &args,
        report: &mut report,
        pb: &pb,
    };
    let fsync_dur = Duration::from_secs(args.phase_secs.max(1));

    // Set up the three systems with the same bindings.
    cx.step("loading bindings".into());
    let mut options = Options::default();
    if let Some(m) = args.wal_restart_mib {
        options.wal_restart_bytes = m << 20;
    }
    if let Some(ms) = args.checkpoint_interval_ms {
        options.checkpoint_interval_ms = ms;
    }
    let store = Store::open_dir(dir.join("tandem"), options)?;
    let astdb = AstdbReplica::open(&dir.join("astdb.sqlite3"))?;
    let per_write = PerWriteTx::open(&dir.join("per-write.sqlite3"), 2)?;
    {
        let st = astdb.state.lock().unwrap();
        st.conn.execute_batch("BEGIN")?;
        per_write.writer.lock().unwrap().execute_batch("BEGIN")?;
        for i in 0..args.bindings as u64 {
            let ext = binding_key(i, args.bindings);
            let v = binding_value(&ext, i);
            store
                .put_with("registrar", &ext, v.as_str(), Durability::Async)?
                .wait()?;
            st.conn.execute(
                "INSERT OR REPLACE INTO astdb (key, value) VALUES (?1, ?2)",
                params![format!("/registrar/{ext}"), v],
            )?;
            per_write.writer.lock().unwrap().execute(
                "INSERT OR REPLACE INTO kv (key, value) VALUES (?1, ?2)",
                params![format!("/registrar/{ext}"), v],
            )?;
        }
        st.conn.execute_batch("COMMIT")?;
        per_write.writer.lock().unwrap().execute_batch("COMMIT")?;
        store.flush()?;
    }
    let sync_thread = {
        let a = astdb.clone();
        std::thread::spawn(move || a.sync_thread())
    };

    for hog_on in [false, true] {
        let hog = if hog_on {
            cx.step("starting the disk hog".into());
            Some(DiskHog::start(dir, args.hog_direct)?)
        } else {
            None
        };
        let tag = if hog_on { " (disk hog)" } else { "" };
        cx.step(format!("fsync latency{tag}"));
        let f = fsync_latency(dir, fsync_dur)?;
        let fp = cx.record("filesystem", hog_on, "fsync 4 KiB overwrite", f);
        cx.step(format!("tandem{tag}"));
        phase_tandem(&mut cx, &store, hog_on);
        cx.step(format!("astdb replica{tag}"));
        phase_astdb(&mut cx, &astdb, hog_on);
        cx.step(format!("sqlite per-write transactions{tag}"));
        phase_per_write(&mut cx, &per_write, hog_on);
        if let Some(h) = hog {
            cx.report.disk_hog_mib_per_sec = h.stop();
            cx.report.fsync_p99_us_disk_hog = fp;
        } else {
            cx.report.fsync_p99_us = fp;
        }
    }
    astdb.stop();
    let _ = sync_thread.join();

    cx.step(format!(
        "group commit, {} writer tasks",
        args.throughput_writers
    ));
    let tp_dur = Duration::from_secs(args.throughput_secs.max(1));
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(throughput_tasks(&store, args.throughput_writers, tp_dur)?);
    }
    cx.report.sync_puts_per_sec = report::median(&runs);
    cx.step(format!(
        "group commit, {} writer threads",
        args.throughput_writers
    ));
    let runs: Vec<f64> = (0..3)
        .map(|_| {
            throughput(args.throughput_writers, tp_dur, |t, n| {
                store
                    .put_with(
                        "throughput",
                        &t.to_string(),
                        n.to_string(),
                        Durability::Sync,
                    )
                    .and_then(|c| c.wait())
                    .expect("sync put");
            })
        })
        .collect();
    cx.report.sync_puts_per_sec_threads = report::median(&runs);
    cx.step("sqlite per-write transactions throughput".into());
    let runs: Vec<f64> = (0..3)
        .map(|_| {
            throughput(args.throughput_writers, tp_dur, |t, n| {
                per_write.put(&format!("/throughput/{t}"), &n.to_string())
            })
        })
        .collect();
    cx.report.per_write_tx_puts_per_sec = report::median(&runs);
    pb.finish_and_clear();
    drop(store);

    let r = &mut report;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    r.sync_put_to_fsync_p99_ratio = ratio(r.sync_put_p99_us, r.fsync_p99_us);
    r.sync_put_to_fsync_p99_ratio_disk_hog =
        ratio(r.sync_put_p99_us_disk_hog, r.fsync_p99_us_disk_hog);
    r.astdb_put_to_sync_put_p99_ratio = ratio(r.astdb_put_p99_us, r.sync_put_p99_us);
    r.astdb_put_to_sync_put_p99_ratio_disk_hog =
        ratio(r.astdb_put_p99_us_disk_hog, r.sync_put_p99_us_disk_hog);
    r.astdb_get_to_get_p99_ratio_disk_hog =
        ratio(r.astdb_get_p99_us_disk_hog, r.get_p99_us_disk_hog);
    r.goals = Goals {
        sync_put_p99_within_2_5x_fsync_p99: r.sync_put_to_fsync_p99_ratio <= 2.5,
        sync_put_p99_within_2_5x_fsync_p99_disk_hog: r.sync_put_to_fsync_p99_ratio_disk_hog <= 2.5,
        get_p99_at_most_1us: r.get_p99_us <= 1.0,
        get_p99_at_most_1us_disk_hog: r.get_p99_us_disk_hog <= 1.0,
        async_put_p99_at_most_20us: r.async_put_p99_us <= 20.0,
        async_put_p99_at_most_20us_disk_hog: r.async_put_p99_us_disk_hog <= 20.0,
        sync_puts_per_sec_at_least_100k: r.sync_puts_per_sec >= 100_000.0,
    };
    report::emit(&report, args.json)
}
