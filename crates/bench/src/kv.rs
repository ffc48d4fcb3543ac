//! `tandem bench kv`: the key-value store under a registration-like workload, against an astdb
//! replica and SQLite with one transaction per write, with and without a disk hog.
//!
//! Every latency is measured open-loop: each thread issues its operations on a fixed schedule
//! and times each from its scheduled start, so a stall is charged to every operation that was
//! due during it (a closed loop would charge only the one that met it). Lookups and async puts
//! also report their service time (from the actual start) and their start lateness (how late
//! the issuing thread got to run), labelled as such; the goals are judged on the open-loop
//! figures. Keys and values are made before the phases, so no timed operation includes the
//! benchmark formatting its arguments. How operations are issued, and the `--pin-issuer`
//! phases (a spinning issuer on a CPU of its own), are in `load.rs`.
//!
//! The filesystem is measured two ways in each condition: the fsync probe (closed loop, one
//! 4 KiB overwrite and fdatasync after another: the reference of the sync put goal) and the
//! group-commit floor (the same writes, open loop at the sync put rate, each covering every
//! write due before it began: the best any store syncing on this filesystem could do).

mod load;

use super::report::{self, BenchReport, Percentiles, Table};
use indicatif::ProgressBar;
use kv::{Durability, Options, Store};
use load::{Affinity, Samples, Stream, open_loop, realtime_priority, spin_issuer};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::fs::File;
use std::io::{Seek, Write};
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
    /// Seconds each phase runs (six latency phases, two fsync probes and two group-commit
    /// floors).
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
    /// Make the disk hog overwrite its file in place when it reaches 256 MiB instead of cutting
    /// it to nothing and growing it again. Cutting frees the blocks, which on a filesystem
    /// mounted with `discard` makes the device discard them while every other write waits;
    /// this separates the hog's bandwidth from those stalls.
    #[arg(long)]
    hog_overwrite: bool,
    /// Run the lookup and async-put load threads (the callers, not the store's own threads;
    /// not with --pin-issuer) with real-time priority (SCHED_FIFO, needs root or CAP_SYS_NICE), so that on a busy
    /// machine their figures show the store rather than waiting for a CPU. The astdb replica's
    /// readers get the same priority.
    #[arg(long)]
    realtime_readers: bool,
    /// Also run each Tandem phase with the lookups and async puts issued by one thread that
    /// spins between its scheduled starts (never sleeps) on a CPU of its own (the last one this
    /// process may use), every other thread of the benchmark (the store's, the sync writers',
    /// the disk hog's) on the other CPUs. Other processes are not moved. The unpinned phases
    /// run as well and keep their JSON keys; the pinned ones are added as `pinned_issuer`.
    #[arg(long)]
    pin_issuer: bool,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    get_p99_at_most_1us_pinned_issuer: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    get_p99_at_most_1us_pinned_issuer_disk_hog: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    async_put_p99_at_most_20us_pinned_issuer: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    async_put_p99_at_most_20us_pinned_issuer_disk_hog: Option<bool>,
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
    /// How late the issuing threads started lookups and async puts (p99): the part of an
    /// open-loop figure spent waiting for a CPU before the call.
    get_start_late_p99_us: f64,
    get_start_late_p99_us_disk_hog: f64,
    async_put_start_late_p99_us: f64,
    async_put_start_late_p99_us_disk_hog: f64,
    /// With `--pin-issuer`: the Tandem phases again with a spinning issuer on its own CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pinned_issuer: Option<PinnedFigures>,
    /// Share of the run's wall time in which at least one runnable thread of the machine
    /// waited for a CPU (`/proc/pressure/cpu` "some"): how noisy the run was.
    cpu_pressure_some_pct: f64,
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
    /// The group-commit floor (`fsync_group_floor`) at the sync put rate, p99: what no store
    /// syncing on this filesystem could beat, in the same conditions.
    fsync_floor_p99_us: f64,
    fsync_floor_p99_us_disk_hog: f64,
    sync_put_to_fsync_floor_p99_ratio: f64,
    sync_put_to_fsync_floor_p99_ratio_disk_hog: f64,
    astdb_put_to_sync_put_p99_ratio: f64,
    astdb_put_to_sync_put_p99_ratio_disk_hog: f64,
    astdb_get_to_get_p99_ratio_disk_hog: f64,
    disk_hog_mib_per_sec: f64,
    disk_hog_direct: bool,
    /// Whether the hog overwrote its file in place rather than cutting it (`--hog-overwrite`).
    disk_hog_overwrite: bool,
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
            "sync put p99 / group-commit floor p99 (fsync open loop at the sync put rate): {:.2} \
             (quiet), {:.2} (disk hog); floor p99 {:.0} us, {:.0} us",
            self.sync_put_to_fsync_floor_p99_ratio,
            self.sync_put_to_fsync_floor_p99_ratio_disk_hog,
            self.fsync_floor_p99_us,
            self.fsync_floor_p99_us_disk_hog
        )?;
        writeln!(
            out,
            "get p99 from scheduled start: {:.2} us, {:.2} us with disk hog (service {:.2}, {:.2}; \
             issuer started late by {:.2}, {:.2}); goal <= 1 us: {}, {}",
            self.get_p99_us,
            self.get_p99_us_disk_hog,
            self.get_service_p99_us,
            self.get_service_p99_us_disk_hog,
            self.get_start_late_p99_us,
            self.get_start_late_p99_us_disk_hog,
            mark(g.get_p99_at_most_1us),
            mark(g.get_p99_at_most_1us_disk_hog)
        )?;
        writeln!(
            out,
            "async put p99 from scheduled start: {:.2} us, {:.2} us with disk hog (service {:.2}, \
             {:.2}; issuer started late by {:.2}, {:.2}); goal <= 20 us: {}, {}",
            self.async_put_p99_us,
            self.async_put_p99_us_disk_hog,
            self.async_put_service_p99_us,
            self.async_put_service_p99_us_disk_hog,
            self.async_put_start_late_p99_us,
            self.async_put_start_late_p99_us_disk_hog,
            mark(g.async_put_p99_at_most_20us),
            mark(g.async_put_p99_at_most_20us_disk_hog)
        )?;
        if let Some(p) = &self.pinned_issuer {
            let opt = |b: Option<bool>| mark(b.unwrap_or(false));
            writeln!(
                out,
                "with a spinning issuer pinned to CPU {} (rest of the benchmark on the other CPUs): \
                 get p99 {:.2} us, {:.2} us with disk hog; goal <= 1 us: {}, {}; async put p99 \
                 {:.2} us, {:.2} us; goal <= 20 us: {}, {}; sync put p99 {:.0} us, {:.0} us",
                p.issuer_cpu,
                p.quiet.get_p99_us,
                p.disk_hog.get_p99_us,
                opt(g.get_p99_at_most_1us_pinned_issuer),
                opt(g.get_p99_at_most_1us_pinned_issuer_disk_hog),
                p.quiet.async_put_p99_us,
                p.disk_hog.async_put_p99_us,
                opt(g.async_put_p99_at_most_20us_pinned_issuer),
                opt(g.async_put_p99_at_most_20us_pinned_issuer_disk_hog),
                p.quiet.sync_put_p99_us,
                p.disk_hog.sync_put_p99_us,
            )?;
        }
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
            "CPU pressure during the run: {:.0} % of the time a runnable thread waited for a CPU",
            self.cpu_pressure_some_pct
        )?;
        writeln!(
            out,
            "disk hog wrote {:.0} MiB/s{}{}",
            self.disk_hog_mib_per_sec,
            if self.disk_hog_direct {
                " (O_DIRECT)"
            } else {
                " (buffered)"
            },
            if self.disk_hog_overwrite {
                ", overwriting its file in place"
            } else {
                ", cutting its file to nothing every 256 MiB"
            }
        )
    }
}

/// The kernel's count of microseconds during which at least one runnable thread waited for a
/// CPU (`/proc/pressure/cpu`, "some"), if the kernel reports it.
fn cpu_pressure_some_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))
        .and_then(|t| t.parse().ok())
}

/// Closed-loop fsync latency of the filesystem: overwrite 4 KiB in place in a preallocated
/// file, then fdatasync — the cheapest durable write the filesystem offers, so the store's
/// goal relative to it is the strict one.
pub(crate) fn fsync_latency(dir: &Path, dur: Duration) -> anyhow::Result<Vec<u64>> {
    let mut probe = SyncProbe::create(&dir.join("fsync-probe.bin"))?;
    let mut out = Vec::new();
    let end = Instant::now() + dur;
    while Instant::now() < end {
        let t = Instant::now();
        probe.write_sync()?;
        out.push(t.elapsed().as_nanos() as u64);
    }
    probe.remove()?;
    Ok(out)
}

/// The group-commit floor: the sync put latency that any store making writes durable by
/// fdatasync on this filesystem would give at `rate` writes per second. Writes arrive on a
/// fixed schedule; one thread overwrites 4 KiB and fdatasyncs it, which makes durable every
/// write that had arrived before that overwrite began (a perfect group commit: no CPU of its
/// own, one sync in flight, as on a single log). Each write is timed from its scheduled arrival
/// to the end of the fdatasync that covered it. The closed-loop probe above meets each stall of
/// the disk once; this, like the store's open-loop sync puts, charges a stall to every write
/// due during it, so under a disk hog whose stalls are long and rare the two differ most.
fn fsync_group_floor(dir: &Path, dur: Duration, rate: u64) -> anyhow::Result<Vec<u64>> {
    let mut probe = SyncProbe::create(&dir.join("fsync-floor.bin"))?;
    let interval_ns = 1e9 / rate.max(1) as f64;
    let due_ns = |i: u64| (i as f64 * interval_ns) as u64;
    let start = Instant::now();
    let mut out = Vec::new();
    // Writes `covered..` are not yet durable; write `i` is due at `start + due_ns(i)`.
    let mut covered = 0u64;
    while start.elapsed() < dur {
        let begun_ns = start.elapsed().as_nanos() as u64;
        // Writes due at or before now: all of them ride on this sync.
        let arrived = (begun_ns as f64 / interval_ns) as u64 + 1;
        if arrived <= covered {
            load::sleep_until(start + Duration::from_nanos(due_ns(covered)));
            continue;
        }
        probe.write_sync()?;
        let done_ns = start.elapsed().as_nanos() as u64;
        out.extend((covered..arrived).map(|i| done_ns - due_ns(i)));
        covered = arrived;
    }
    probe.remove()?;
    Ok(out)
}

/// A file of `FILE_BYTES`, written and synced once, in which each probe write overwrites the
/// next 4 KiB in place and fdatasyncs it: the cheapest durable write the filesystem offers (no
/// size change, no new block).
struct SyncProbe {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
    offset_bytes: u64,
}

impl SyncProbe {
    const FILE_BYTES: u64 = 4 << 20;
    const WRITE_BYTES: usize = 4096;

    fn create(path: &Path) -> anyhow::Result<SyncProbe> {
        use std::os::unix::fs::FileExt;
        let file = File::create(path)?;
        let buf = vec![0x5au8; Self::WRITE_BYTES];
        let mut off = 0;
        while off < Self::FILE_BYTES {
            file.write_all_at(&buf, off)?;
            off += buf.len() as u64;
        }
        file.sync_all()?;
        Ok(SyncProbe {
            file,
            path: path.to_path_buf(),
            buf,
            offset_bytes: 0,
        })
    }

    fn write_sync(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(&self.buf, self.offset_bytes)?;
        self.file.sync_data()?;
        self.offset_bytes = (self.offset_bytes + self.buf.len() as u64) % Self::FILE_BYTES;
        Ok(())
    }

    fn remove(self) -> std::io::Result<()> {
        drop(self.file);
        std::fs::remove_file(&self.path)
    }
}

/// A thread writing and fsyncing a large file on the same filesystem, like a backup.
pub(crate) struct DiskHog {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    started: Instant,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl DiskHog {
    const CHUNK_BYTES: usize = 8 << 20;
    const FILE_BYTES_MAX: u64 = 256 << 20;

    pub(crate) fn start(dir: &Path, direct: bool) -> anyhow::Result<DiskHog> {
        Self::start_with(dir, direct, false)
    }

    /// `overwrite`: at `FILE_BYTES_MAX` the hog goes back to the start of its file and writes
    /// over it, instead of cutting the file to nothing and growing it again. A cut frees the
    /// file's blocks, and on a filesystem mounted with `discard` that sends the device a discard
    /// of all of them; on a virtual disk every other write and cache flush then waits until
    /// the discard is done (tens of milliseconds, several times a second at the hog's rate).
    /// Overwriting keeps the hog's bandwidth without those stalls.
    fn start_with(dir: &Path, direct: bool, overwrite: bool) -> anyhow::Result<DiskHog> {
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
                            if !overwrite {
                                let _ = f.set_len(0);
                            }
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

    pub(crate) fn stop(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.written.load(Ordering::Relaxed) as f64
            / (1 << 20) as f64
            / self.started.elapsed().as_secs_f64()
    }
}

/// The bindings' keys and values, made before any phase so that a timed operation does not
/// include the benchmark formatting its arguments.
struct Workload {
    /// Extension numbers: the keys in the `registrar` family.
    keys: Vec<String>,
    /// The same as astdb paths (`/registrar/<ext>`), for the baseline stores.
    paths: Vec<String>,
    /// Two contact values per binding (a rewrite alternates between them, so each changes
    /// the stored value).
    values: Vec<String>,
}

impl Workload {
    fn new(bindings: usize) -> Workload {
        let keys: Vec<String> = (0..bindings.max(1))
            .map(|i| (1000 + i).to_string())
            .collect();
        let paths = keys.iter().map(|k| format!("/registrar/{k}")).collect();
        let values = keys
            .iter()
            .enumerate()
            .flat_map(|(i, ext)| {
                (0..2).map(move |rev| {
                    format!(
                        "sip:{ext}@192.0.2.{}:5060;transport=udp;expires=3600;rev={rev}",
                        i % 250 + 1
                    )
                })
            })
            .collect();
        Workload {
            keys,
            paths,
            values,
        }
    }

    fn index(&self, random: u64) -> usize {
        (random % self.keys.len() as u64) as usize
    }

    /// The binding picked by `random`, and its value for the `n`th operation.
    fn binding(&self, random: u64, n: u64) -> (&str, &str) {
        let i = self.index(random);
        (&self.keys[i], &self.values[2 * i + (n % 2) as usize])
    }

    /// The same as an astdb path.
    fn path(&self, random: u64, n: u64) -> (&str, &str) {
        let i = self.index(random);
        (&self.paths[i], &self.values[2 * i + (n % 2) as usize])
    }
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
    work: &'a Workload,
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

/// How a Tandem phase issues its lookups and async puts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Issuers {
    /// Two lookup threads and one async-put thread, each sleeping until shortly before its
    /// next start, free to run on any CPU.
    Sleeping,
    /// One thread issuing both on their merged schedule, spinning (never sleeping), alone on
    /// the last CPU; every other thread of the process on the other CPUs.
    Pinned,
}

/// The open-loop figures of one Tandem phase.
struct TandemPhase {
    sync: Samples,
    asyn: Samples,
    gets: Samples,
}

fn phase_tandem(cx: &mut Ctx, store: &Store, hog: bool, issuers: Issuers) -> anyhow::Result<()> {
    let a = cx.args;
    let w = cx.work;
    let dur = Duration::from_secs(a.phase_secs);
    let affinity = match issuers {
        Issuers::Sleeping => None,
        Issuers::Pinned => {
            let aff = Affinity::split()?;
            aff.pin_rest()?;
            Some(aff)
        }
    };
    let sync_put = |t: usize, i: u64| {
        let mut r = Rng::new((t as u64) << 32 | i);
        let (key, value) = w.binding(r.next(), i);
        store
            .put_with("registrar", key, value, Durability::Sync)
            .and_then(|c| c.wait())
            .expect("sync put");
    };
    let async_put = |t: usize, i: u64| {
        let mut r = Rng::new(0xa5a5 ^ ((t as u64) << 32 | i));
        let (key, value) = w.binding(r.next(), i);
        let c = store
            .put_with("presence", key, value, Durability::Async)
            .expect("async put");
        debug_assert!(c.is_done());
    };
    let get = |t: usize, i: u64| {
        let mut r = Rng::new(0x5a5a ^ ((t as u64) << 32 | i));
        let (key, _) = w.binding(r.next(), i);
        let v = store.get("registrar", key).expect("get");
        std::hint::black_box(v);
    };
    let phase = std::thread::scope(|s| {
        let writers = s.spawn(|| open_loop(a.sync_writers, a.sync_rate, dur, false, sync_put));
        let (asyn, gets) = match &affinity {
            None => {
                let x = s.spawn(|| open_loop(1, a.async_rate, dur, a.realtime_readers, async_put));
                let g = open_loop(2, a.get_rate, dur, a.realtime_readers, get);
                (x.join().unwrap(), g)
            }
            Some(aff) => {
                let cpu = aff.issuer;
                let issuer = s.spawn(move || {
                    let mut get_op = |i| get(0, i);
                    let mut put_op = |i| async_put(0, i);
                    let mut streams = [
                        Stream {
                            rate: a.get_rate,
                            op: &mut get_op,
                        },
                        Stream {
                            rate: a.async_rate,
                            op: &mut put_op,
                        },
                    ];
                    spin_issuer(dur, a.realtime_readers, Some(cpu), &mut streams)
                });
                let mut out = issuer.join().unwrap().into_iter();
                let gets = out.next().unwrap_or_default();
                (out.next().unwrap_or_default(), gets)
            }
        };
        TandemPhase {
            sync: writers.join().unwrap(),
            asyn,
            gets,
        }
    });
    if let Some(aff) = &affinity {
        aff.unpin()?;
    }
    let system = match issuers {
        Issuers::Sleeping => "tandem",
        Issuers::Pinned => "tandem, pinned issuer",
    };
    let TandemPhase { sync, asyn, gets } = phase;
    let f = PhaseFigures {
        sync_put_p99_us: cx.record(system, hog, "sync put", sync.open_ns),
        async_put_p99_us: cx.record(system, hog, "async put", asyn.open_ns),
        async_put_service_p99_us: cx.record(system, hog, "async put (service)", asyn.service_ns),
        async_put_start_late_p99_us: cx.record(
            system,
            hog,
            "async put (start lateness)",
            asyn.late_ns,
        ),
        get_p99_us: cx.record(system, hog, "get", gets.open_ns),
        get_service_p99_us: cx.record(system, hog, "get (service)", gets.service_ns),
        get_start_late_p99_us: cx.record(system, hog, "get (start lateness)", gets.late_ns),
    };
    if let Some(aff) = &affinity {
        cx.report.pinned_issuer.get_or_insert_default().issuer_cpu = aff.issuer;
    }
    let r = &mut cx.report;
    match (issuers, hog) {
        (Issuers::Sleeping, false) => {
            r.sync_put_p99_us = f.sync_put_p99_us;
            r.async_put_p99_us = f.async_put_p99_us;
            r.async_put_service_p99_us = f.async_put_service_p99_us;
            r.async_put_start_late_p99_us = f.async_put_start_late_p99_us;
            r.get_p99_us = f.get_p99_us;
            r.get_service_p99_us = f.get_service_p99_us;
            r.get_start_late_p99_us = f.get_start_late_p99_us;
        }
        (Issuers::Sleeping, true) => {
            r.sync_put_p99_us_disk_hog = f.sync_put_p99_us;
            r.async_put_p99_us_disk_hog = f.async_put_p99_us;
            r.async_put_service_p99_us_disk_hog = f.async_put_service_p99_us;
            r.async_put_start_late_p99_us_disk_hog = f.async_put_start_late_p99_us;
            r.get_p99_us_disk_hog = f.get_p99_us;
            r.get_service_p99_us_disk_hog = f.get_service_p99_us;
            r.get_start_late_p99_us_disk_hog = f.get_start_late_p99_us;
        }
        (Issuers::Pinned, false) => r.pinned_issuer.get_or_insert_default().quiet = f,
        (Issuers::Pinned, true) => r.pinned_issuer.get_or_insert_default().disk_hog = f,
    }
    Ok(())
}

/// The p99 figures of one Tandem phase, in microseconds.
#[derive(Serialize, Default)]
struct PhaseFigures {
    sync_put_p99_us: f64,
    async_put_p99_us: f64,
    async_put_service_p99_us: f64,
    async_put_start_late_p99_us: f64,
    get_p99_us: f64,
    get_service_p99_us: f64,
    get_start_late_p99_us: f64,
}

/// The phases run with `--pin-issuer` (in addition to the unpinned ones).
#[derive(Serialize, Default)]
struct PinnedFigures {
    /// The CPU the issuer had to itself (within this process).
    issuer_cpu: usize,
    quiet: PhaseFigures,
    disk_hog: PhaseFigures,
}

/// The registration workload against a baseline store: writers rewriting bindings at the sync
/// rate while two readers look them up, both open loop. Returns the puts' and gets' samples.
fn baseline_load(
    cx: &Ctx,
    put: impl Fn(&str, &str) + Sync,
    get: impl Fn(usize, &str) + Sync,
) -> (Samples, Samples) {
    let a = cx.args;
    let w = cx.work;
    let dur = Duration::from_secs(a.phase_secs);
    std::thread::scope(|s| {
        let writers = s.spawn(|| {
            open_loop(a.sync_writers, a.sync_rate, dur, false, |t, i| {
                let mut r = Rng::new((t as u64) << 32 | i);
                let (path, value) = w.path(r.next(), i);
                put(path, value);
            })
        });
        let g = open_loop(2, a.get_rate, dur, a.realtime_readers, |t, i| {
            let mut r = Rng::new(0x5a5a ^ ((t as u64) << 32 | i));
            get(t, w.path(r.next(), i).0);
        });
        (writers.join().unwrap(), g)
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
    let steps = if args.pin_issuer { 17 } else { 15 };
    let pb = crate::report::progress_bar(
        args.json,
        steps,
        "{elapsed:>4} [{bar:30}] {pos}/{len} {msg}",
    )?;
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
        disk_hog_overwrite: args.hog_overwrite,
        realtime_readers: args.realtime_readers && {
            // Probe once whether the priority is permitted.
            std::thread::spawn(realtime_priority)
                .join()
                .unwrap_or(false)
        },
        ..KvReport::default()
    };
    // Split the CPUs now, so that a machine that cannot be split fails before any phase runs.
    if args.pin_issuer {
        if args.realtime_readers {
            anyhow::bail!(
                "--pin-issuer and --realtime-readers cannot be combined: the pinned issuer never \
                 sleeps, and the kernel throttles a real-time thread that never sleeps (for tens \
                 of milliseconds each second, sched_rt_runtime_us), which would stall it"
            );
        }
        Affinity::split()?;
    }
    let pressure_before = cpu_pressure_some_us();
    let run_started = Instant::now();
    let work = Workload::new(args.bindings);
    let mut cx = Ctx {
        args: &args,
        work: &work,
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
        for i in 0..work.keys.len() {
            let (ext, path, v) = (&work.keys[i], &work.paths[i], &work.values[2 * i]);
            store
                .put_with("registrar", ext, v.as_str(), Durability::Async)?
                .wait()?;
            st.conn.execute(
                "INSERT OR REPLACE INTO astdb (key, value) VALUES (?1, ?2)",
                params![path, v],
            )?;
            per_write.writer.lock().unwrap().execute(
                "INSERT OR REPLACE INTO kv (key, value) VALUES (?1, ?2)",
                params![path, v],
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
            Some(DiskHog::start_with(
                dir,
                args.hog_direct,
                args.hog_overwrite,
            )?)
        } else {
            None
        };
        let tag = if hog_on { " (disk hog)" } else { "" };
        cx.step(format!("fsync latency{tag}"));
        let f = fsync_latency(dir, fsync_dur)?;
        let fp = cx.record("filesystem", hog_on, "fsync 4 KiB overwrite", f);
        cx.step(format!("group-commit floor{tag}"));
        let f = fsync_group_floor(dir, fsync_dur, args.sync_rate)?;
        let floor = cx.record(
            "filesystem",
            hog_on,
            "fsync group-commit floor (open loop)",
            f,
        );
        cx.step(format!("tandem{tag}"));
        phase_tandem(&mut cx, &store, hog_on, Issuers::Sleeping)?;
        if args.pin_issuer {
            cx.step(format!("tandem, pinned issuer{tag}"));
            phase_tandem(&mut cx, &store, hog_on, Issuers::Pinned)?;
        }
        cx.step(format!("astdb replica{tag}"));
        phase_astdb(&mut cx, &astdb, hog_on);
        cx.step(format!("sqlite per-write transactions{tag}"));
        phase_per_write(&mut cx, &per_write, hog_on);
        if let Some(h) = hog {
            cx.report.disk_hog_mib_per_sec = h.stop();
            cx.report.fsync_p99_us_disk_hog = fp;
            cx.report.fsync_floor_p99_us_disk_hog = floor;
        } else {
            cx.report.fsync_p99_us = fp;
            cx.report.fsync_floor_p99_us = floor;
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
    if let (Some(before), Some(after)) = (pressure_before, cpu_pressure_some_us()) {
        report.cpu_pressure_some_pct =
            (after - before) as f64 / run_started.elapsed().as_micros() as f64 * 100.0;
    }

    let r = &mut report;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    r.sync_put_to_fsync_p99_ratio = ratio(r.sync_put_p99_us, r.fsync_p99_us);
    r.sync_put_to_fsync_p99_ratio_disk_hog =
        ratio(r.sync_put_p99_us_disk_hog, r.fsync_p99_us_disk_hog);
    r.sync_put_to_fsync_floor_p99_ratio = ratio(r.sync_put_p99_us, r.fsync_floor_p99_us);
    r.sync_put_to_fsync_floor_p99_ratio_disk_hog =
        ratio(r.sync_put_p99_us_disk_hog, r.fsync_floor_p99_us_disk_hog);
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
        get_p99_at_most_1us_pinned_issuer: r
            .pinned_issuer
            .as_ref()
            .map(|p| p.quiet.get_p99_us <= 1.0),
        get_p99_at_most_1us_pinned_issuer_disk_hog: r
            .pinned_issuer
            .as_ref()
            .map(|p| p.disk_hog.get_p99_us <= 1.0),
        async_put_p99_at_most_20us_pinned_issuer: r
            .pinned_issuer
            .as_ref()
            .map(|p| p.quiet.async_put_p99_us <= 20.0),
        async_put_p99_at_most_20us_pinned_issuer_disk_hog: r
            .pinned_issuer
            .as_ref()
            .map(|p| p.disk_hog.async_put_p99_us <= 20.0),
    };
    report::emit(&report, args.json)
}
