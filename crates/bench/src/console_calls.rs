//! The calls half of `tandem bench console`: the calls pages on millions of CDRs, in SQLite and
//! in PostgreSQL, measured in one run.
//!
//! For each backend:
//! - `--cdrs` synthetic calls (with their two RTP streams) over the last `--cdr-days`, and a
//!   REGISTER chain per hundred calls, are bulk-loaded (`cdr::seed`), then the database's size
//!   is read;
//! - a `tandem serve` reads them, and eight typical searches (`GET /api/calls`) are timed over
//!   loopback HTTP, `--reads` each after one untimed: the last hour, a number prefix over 30
//!   days, a suffix, MOS < 3.1 over 7 days, a /24, a Call-ID, 4xx over a day, a rare codec over
//!   7 days (the values are taken from the newest calls, so each search finds something); the
//!   header's totals of the same filters are timed beside them;
//! - a one-hour G.711 call, captured from a synthetic pcap into the same database and archive by
//!   `tandem capture`, is opened: the call page's data (`GET /api/calls/{uid}`) cold (its pcap read
//!   from the archive) and warm (`--reads`, the pcap cached, the view computed again each time),
//!   and its WAV decoded (`GET …/audio/0.wav`, seconds of audio per second).
//!
//! With `--screenshots DIR`: the calls, call, live and registrations pages at 1366×768 (the live
//! page from a capture fed a synthetic pcap as HEP in real time).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use crate::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use crate::report::{self, Percentiles, Table};

const USER: &str = "admin";
const PASSWORD: &str = "bench-console-password";
const DAY_US: i64 = 86_400_000_000;
/// One REGISTER chain seeded per this many calls.
const CALLS_PER_REGISTRATION: u64 = 100;
/// The one-hour call.
const LONG_CALL_MS: u64 = 3_600_000;
/// Shared buffers of the benchmark's PostgreSQL: a quarter of this machine's 24 GiB would be
/// usual; 2 GiB is what a modest server gives its database.
const PG_SHARED_BUFFERS_MIB: u64 = 2048;

/// What the calls half measures.
#[derive(Debug, Clone)]
pub struct CallsArgs {
    pub cdrs: u64,
    pub cdr_days: i64,
    pub reads: usize,
    /// Times every search is measured (`reads` requests each); the median run is reported.
    pub runs: usize,
    pub backends: Vec<String>,
    pub screenshots: Option<PathBuf>,
    pub quiet: bool,
}

#[derive(Serialize, Default, Clone)]
pub struct SearchFigures {
    pub name: String,
    pub query: String,
    /// Rows of the first page (at most 50).
    pub rows: usize,
    pub server_ms: Percentiles,
    /// The header's totals of the same filter.
    pub totals_ms: Percentiles,
    pub totals_note: Option<String>,
    /// Each run's p99, for the spread.
    pub search_p99_ms_runs: Vec<f64>,
    pub totals_p99_ms_runs: Vec<f64>,
}

#[derive(Serialize, Default, Clone)]
pub struct BackendFigures {
    pub backend: String,
    pub calls: u64,
    pub streams: u64,
    pub registrations: u64,
    pub seed_s: f64,
    pub db_bytes: u64,
    pub db_bytes_per_million_cdrs: f64,
    pub searches: Vec<SearchFigures>,
    /// The worst search's p99 (goal: at most 100 ms).
    pub search_p99_ms_max: f64,
    /// The one-hour call's page data: first request with its archive out of the page cache,
    /// then warm (the pcap cached, the view computed again each time).
    pub call_page_cold_ms: f64,
    /// The floor of the cold request: the call's tar files (this capture's only ones) read from
    /// the disk, out of the page cache again, and nothing else.
    pub archive_bytes: u64,
    pub archive_read_ms: f64,
    pub call_page_ms: Percentiles,
    pub call_page_bytes: usize,
    /// WAV of one direction of the hour: time, and seconds of audio per second of it.
    pub wav_ms: f64,
    pub wav_x_realtime: f64,
    pub wav_bytes: usize,
}

#[derive(Serialize, Default)]
pub struct CallsBench {
    pub cdrs: u64,
    pub cdr_days: i64,
    pub reads: usize,
    pub runs: usize,
    pub backends: Vec<BackendFigures>,
    pub screenshots: Vec<String>,
}

impl CallsBench {
    pub fn print_table(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "Calls pages on {} CDRs over {} days; {} reads per search over loopback HTTP, median of {} runs",
            self.cdrs, self.cdr_days, self.reads, self.runs
        )?;
        for b in &self.backends {
            writeln!(
                out,
                "\n{}: seeded in {:.0} s; {:.0} MiB, {:.0} MiB per million CDRs",
                b.backend,
                b.seed_s,
                b.db_bytes as f64 / 1048576.0,
                b.db_bytes_per_million_cdrs / 1048576.0
            )?;
            let mut t = Table::new([
                "search",
                "rows",
                "p50 ms",
                "p99 ms",
                "totals p50 ms",
                "totals p99 ms",
            ]);
            for s in &b.searches {
                t.row([
                    s.name.clone(),
                    s.rows.to_string(),
                    format!("{:.1}", s.server_ms.p50_us / 1e3),
                    format!("{:.1}", s.server_ms.p99_us / 1e3),
                    format!("{:.1}", s.totals_ms.p50_us / 1e3),
                    format!("{:.1}", s.totals_ms.p99_us / 1e3),
                ]);
            }
            t.write(out)?;
            writeln!(
                out,
                "goal: every search's p99 at most 100 ms (worst {:.1} ms)",
                b.search_p99_ms_max
            )?;
            writeln!(
                out,
                "one-hour G.711 call: page data {:.0} ms cold (reading its {:.0} MB of archive alone: {:.0} ms), p50 {:.0} ms, p99 {:.0} ms warm (goal: at most 300 ms); WAV {:.0} ms = {:.0}× real time (goal: at least 50×)",
                b.call_page_cold_ms,
                b.archive_bytes as f64 / 1e6,
                b.archive_read_ms,
                b.call_page_ms.p50_us / 1e3,
                b.call_page_ms.p99_us / 1e3,
                b.wav_ms,
                b.wav_x_realtime
            )?;
        }
        for s in &self.screenshots {
            writeln!(out, "screenshot: {s}")?;
        }
        Ok(())
    }
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn rfc(us: i64) -> String {
    utc::format_s(us.div_euclid(1_000_000))
}

/// Percent-encodes a query value.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A GET with the session cookie: (status, body), and the time it took.
fn get(server: &ConsoleServer, cookie: &str, path: &str) -> anyhow::Result<(u16, String, u64)> {
    let started = Instant::now();
    let (status, _, body) = http(server.web, "GET", path, &[("Cookie", cookie)], "")?;
    Ok((status, body, started.elapsed().as_nanos() as u64))
}

/// A GET whose answer is binary (audio): (status, body bytes, nanoseconds to the last byte).
fn get_bytes(
    server: &ConsoleServer,
    cookie: &str,
    path: &str,
) -> anyhow::Result<(u16, Vec<u8>, u64)> {
    use std::io::{Read, Write};
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(server.web)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n",
        server.web
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let ns = started.elapsed().as_nanos() as u64;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status line")?;
    Ok((status, raw[end + 4..].to_vec(), ns))
}

fn get_json(server: &ConsoleServer, cookie: &str, path: &str) -> anyhow::Result<serde_json::Value> {
    let (status, body, _) = get(server, cookie, path)?;
    anyhow::ensure!(status == 200, "{path}: HTTP {status}: {body}");
    serde_json::from_str(&body).with_context(|| format!("{path}: not JSON"))
}

/// The eight searches, with values taken from `sample` (one of the newest calls).
fn searches(now: i64, sample: &serde_json::Value) -> Vec<(&'static str, String)> {
    let s = |k: &str| sample[k].as_str().unwrap_or("").to_owned();
    let caller = s("caller");
    let called = s("called");
    let prefix: String = caller.chars().take(caller.len().min(5)).collect();
    let suffix: String = called
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let addr = s("caller_addr");
    let ip = addr
        .rsplit_once(':')
        .map(|(ip, _)| ip.trim_matches(['[', ']']).to_owned())
        .unwrap_or(addr);
    let cidr = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => {
            let o = v4.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
        _ => format!("{ip}/64"),
    };
    let range = |days: i64| {
        format!(
            "from={}&to={}",
            rfc(now - days * DAY_US),
            rfc(now + 60_000_000)
        )
    };
    vec![
        (
            "last hour",
            format!(
                "from={}&to={}",
                rfc(now - 3_600_000_000),
                rfc(now + 60_000_000)
            ),
        ),
        (
            "caller prefix, 30 days",
            format!("{}&caller={}*", range(30), enc(&prefix)),
        ),
        (
            "called suffix, 30 days",
            format!("{}&called=*{}", range(30), enc(&suffix)),
        ),
        ("MOS < 3.1, 7 days", format!("{}&mos_below=3.1", range(7))),
        ("CIDR, 30 days", format!("{}&ip={}", range(30), enc(&cidr))),
        (
            "Call-ID, 30 days",
            format!("{}&call_id={}", range(30), enc(&s("call_id"))),
        ),
        ("4xx, 24 h", format!("{}&response=4xx", range(1))),
        ("codec G.729, 7 days", format!("{}&codec=G729", range(7))),
    ]
}

/// Where the CDRs of one backend live.
enum Db {
    Sqlite(PathBuf),
    Postgres(pg_scratch::PgServer),
}

impl Db {
    fn name(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// The `[capture]` lines that point `tandem serve` (and `tandem capture`) at it.
    fn capture_args(&self) -> Vec<String> {
        match self {
            Db::Sqlite(p) => vec!["--cdr-db".into(), p.display().to_string()],
            Db::Postgres(pg) => vec!["--cdr-postgres".into(), pg.conninfo()],
        }
    }

    fn config(&self) -> String {
        match self {
            Db::Sqlite(p) => format!("[capture]\ncdr_db = {:?}\n", p.display().to_string()),
            Db::Postgres(pg) => format!("[capture]\ncdr_postgres = {:?}\n", pg.conninfo()),
        }
    }

    fn bytes(&self) -> anyhow::Result<u64> {
        match self {
            Db::Sqlite(p) => {
                let mut total = 0;
                for suffix in ["", "-wal"] {
                    let mut f = p.clone().into_os_string();
                    f.push(suffix);
                    total += std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
                }
                Ok(total)
            }
            Db::Postgres(pg) => {
                let mut c = postgres_client(&pg.conninfo())?;
                let row = c.query_one("SELECT pg_database_size(current_database())", &[])?;
                Ok(row.get::<_, i64>(0).max(0) as u64)
            }
        }
    }
}

fn postgres_client(conninfo: &str) -> anyhow::Result<postgres::Client> {
    postgres::Client::connect(conninfo, postgres::NoTls)
        .with_context(|| format!("connecting to {conninfo}"))
}

/// Seeds `db` with the calls and registrations, with a progress bar.
fn seed(db: &Db, args: &CallsArgs, now: i64) -> anyhow::Result<(cdr::seed::Loaded, f64)> {
    let from = now - args.cdr_days * DAY_US;
    let regs = args.cdrs / CALLS_PER_REGISTRATION;
    let bar = report::progress_bar(
        args.quiet,
        args.cdrs + regs,
        &format!("{{bar:30}} {{pos}}/{{len}} CDRs into {}", db.name()),
    )?;
    let records = cdr::seed::synthetic_calls(args.cdrs, from, now, 7)
        .chain(cdr::seed::synthetic_registrations(regs, from, now, 7))
        .inspect(|_| bar.inc(1));
    let started = Instant::now();
    let loaded = match db {
        Db::Sqlite(p) => cdr::seed::bulk_load_sqlite(p, records)?,
        Db::Postgres(pg) => cdr::seed::bulk_load_postgres(&pg.conninfo(), records)?,
    };
    bar.finish_and_clear();
    Ok((loaded, started.elapsed().as_secs_f64()))
}

/// A synthetic one-hour G.711 call (with a little loss and jitter), two hours ago.
fn long_call_pcap(dir: &Path, now: i64) -> anyhow::Result<PathBuf> {
    let path = dir.join("one-hour-call.pcap");
    if path.exists() {
        return Ok(path);
    }
    let cfg = monitor::synth::SynthConfig {
        calls: 1,
        call_duration_ms: LONG_CALL_MS,
        loss_pct: 0.5,
        jitter_ms: 3.0,
        failures: false,
        seed: 3,
        start_ns: (now - 2 * 3_600_000_000) * 1000,
        ..monitor::synth::SynthConfig::default()
    };
    let file = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    monitor::synth::generate(&cfg, file)?;
    Ok(path)
}

/// `tandem capture` of the pcap into `db`, with every packet archived under `archive`.
fn capture_into(db: &Db, pcap: &Path, archive: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(&exe)
        .arg("capture")
        .arg("--read")
        .arg(pcap)
        .arg("--archive")
        .arg(archive)
        .args(["--archive-store", "full", "--status-interval-s", "0"])
        .args(db.capture_args())
        .output()
        .context("running tandem capture")?;
    anyhow::ensure!(
        out.status.success(),
        "tandem capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Every file under `dir` (the archive's tar files).
fn archive_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Drops the files' pages from the page cache (`POSIX_FADV_DONTNEED` after `fsync`), so the
/// next read comes from the disk.
fn evict(files: &[PathBuf]) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    for f in files {
        let file = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
        file.sync_all()?;
        // SAFETY: a valid descriptor of a file we hold open; the advice only drops clean pages.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        anyhow::ensure!(rc == 0, "posix_fadvise({}): error {rc}", f.display());
    }
    Ok(())
}

/// Times `reads` requests of `path` after one untimed.
fn timed(
    server: &ConsoleServer,
    cookie: &str,
    path: &str,
    reads: usize,
) -> anyhow::Result<(Percentiles, String)> {
    let (status, body, _) = get(server, cookie, path)?;
    anyhow::ensure!(status == 200, "{path}: HTTP {status}: {body}");
    let mut ns = Vec::with_capacity(reads);
    for _ in 0..reads {
        let (status, _, t) = get(server, cookie, path)?;
        anyhow::ensure!(status == 200, "{path}: HTTP {status}");
        ns.push(t);
    }
    Ok((Percentiles::from_nanos(&mut ns), body))
}

fn measure_backend(
    db: &Db,
    work: &Path,
    args: &CallsArgs,
    now: i64,
) -> anyhow::Result<BackendFigures> {
    let (loaded, seed_s) = seed(db, args, now)?;
    let db_bytes = db.bytes()?;
    // The one-hour call goes in by the same path as every captured call.
    let archive = work.join(format!("archive-{}", db.name()));
    capture_into(db, &long_call_pcap(work, now)?, &archive)?;

    let data = work.join(format!("serve-{}", db.name()));
    std::fs::create_dir_all(&data)?;
    let config = data.join("tandem.toml");
    std::fs::write(&config, db.config())?;
    let exe = std::env::current_exe()?;
    add_user(&exe, &data, USER, "admin", PASSWORD)?;
    let config_s = config.display().to_string();
    let server = ConsoleServer::start(&exe, &data, &["--config", &config_s])?;
    let cookie = login_cookie(server.web, USER, PASSWORD)?;

    let newest = get_json(
        &server,
        &cookie,
        &format!(
            "/api/calls?from={}&limit=1&response=200",
            rfc(now - 3_600_000_000)
        ),
    )?;
    let sample = newest["calls"]
        .get(0)
        .cloned()
        .context("no answered call in the last hour of the seeded CDRs")?;
    let list = searches(now, &sample);
    let bar = report::progress_bar(
        args.quiet,
        (args.runs * list.len() * 2 * (args.reads + 1)) as u64,
        &format!("{{bar:30}} {{pos}}/{{len}} searches on {}", db.name()),
    )?;
    // Each run times every search in turn; a search's figures are those of its median run
    // (by p99), with every run's p99 beside them.
    let mut runs: Vec<Vec<(Percentiles, Percentiles)>> = vec![Vec::new(); list.len()];
    let mut firsts: Vec<(usize, Option<String>)> = vec![(0, None); list.len()];
    for _ in 0..args.runs {
        for (i, (_, query)) in list.iter().enumerate() {
            let (server_ms, body) =
                timed(&server, &cookie, &format!("/api/calls?{query}"), args.reads)?;
            bar.inc(args.reads as u64 + 1);
            let page: serde_json::Value = serde_json::from_str(&body)?;
            let (totals_ms, totals) = timed(
                &server,
                &cookie,
                &format!("/api/calls/totals?{query}"),
                args.reads,
            )?;
            bar.inc(args.reads as u64 + 1);
            let totals: serde_json::Value = serde_json::from_str(&totals)?;
            firsts[i] = (
                page["calls"].as_array().map_or(0, Vec::len),
                totals["note"].as_str().map(str::to_owned),
            );
            runs[i].push((server_ms, totals_ms));
        }
    }
    bar.finish_and_clear();
    let mut figures = Vec::new();
    for (((name, query), mut r), (rows, note)) in list.into_iter().zip(runs).zip(firsts) {
        let search_p99_ms_runs: Vec<f64> = r.iter().map(|(s, _)| s.p99_us / 1e3).collect();
        let totals_p99_ms_runs: Vec<f64> = r.iter().map(|(_, t)| t.p99_us / 1e3).collect();
        r.sort_by(|a, b| a.0.p99_us.total_cmp(&b.0.p99_us));
        let server_ms = r[r.len() / 2].0;
        r.sort_by(|a, b| a.1.p99_us.total_cmp(&b.1.p99_us));
        let totals_ms = r[r.len() / 2].1;
        figures.push(SearchFigures {
            name: name.to_owned(),
            query,
            rows,
            server_ms,
            totals_ms,
            totals_note: note,
            search_p99_ms_runs,
            totals_p99_ms_runs,
        });
    }

    // The hour: found by its Call-ID, opened cold, then warm.
    let found = get_json(
        &server,
        &cookie,
        &format!(
            "/api/calls?from={}&call_id={}",
            rfc(now - 3 * 3_600_000_000),
            enc("synth-0@tandem.test")
        ),
    )?;
    let uid = found["calls"][0]["uid"]
        .as_str()
        .context("the one-hour call is not in the CDRs")?
        .to_owned();
    let call_path = format!("/api/calls/{}", enc(&uid));
    // Cold: the call's archive out of the page cache, as for a call nobody has looked at since
    // it was written; its floor is reading those same files from the disk, nothing else.
    let tars = archive_files(&archive)?;
    evict(&tars)?;
    let (status, body, cold_ns) = get(&server, &cookie, &call_path)?;
    anyhow::ensure!(status == 200, "{call_path}: HTTP {status}: {body}");
    evict(&tars)?;
    let started = Instant::now();
    let mut archive_bytes = 0u64;
    for t in &tars {
        archive_bytes += std::fs::read(t)
            .with_context(|| format!("reading {}", t.display()))?
            .len() as u64;
    }
    let archive_read_ms = started.elapsed().as_secs_f64() * 1e3;
    let (call_page_ms, body) = timed(&server, &cookie, &call_path, args.reads.min(20))?;
    let wav_path = format!("{call_path}/audio/0.wav");
    let (status, wav, wav_ns) = get_bytes(&server, &cookie, &wav_path)?;
    anyhow::ensure!(status == 200, "{wav_path}: HTTP {status}");
    let wav_s = wav_ns as f64 / 1e9;
    let search_p99_ms_max = figures
        .iter()
        .map(|f| f.server_ms.p99_us / 1e3)
        .fold(0.0, f64::max);
    Ok(BackendFigures {
        backend: db.name().to_owned(),
        calls: loaded.calls,
        streams: loaded.streams,
        registrations: loaded.registrations,
        seed_s,
        db_bytes,
        db_bytes_per_million_cdrs: db_bytes as f64 / (loaded.calls.max(1) as f64 / 1e6),
        searches: figures,
        search_p99_ms_max,
        call_page_cold_ms: cold_ns as f64 / 1e6,
        archive_bytes,
        archive_read_ms,
        call_page_ms,
        call_page_bytes: body.len(),
        wav_ms: wav_s * 1e3,
        wav_x_realtime: (LONG_CALL_MS as f64 / 1e3) / wav_s.max(1e-9),
        wav_bytes: wav.len(),
    })
}

/// Runs the calls half; `work` holds the databases and archives.
pub fn run(args: &CallsArgs, work: &Path) -> anyhow::Result<CallsBench> {
    anyhow::ensure!(args.cdrs >= 1000, "--cdrs: at least 1000");
    anyhow::ensure!(args.runs >= 1, "--runs: at least 1");
    anyhow::ensure!(
        args.cdr_days >= 7,
        "--cdr-days: at least 7 (the searches span up to 30)"
    );
    let now = now_us();
    let mut out = CallsBench {
        cdrs: args.cdrs,
        cdr_days: args.cdr_days,
        reads: args.reads,
        runs: args.runs,
        ..CallsBench::default()
    };
    for backend in &args.backends {
        let db = match backend.as_str() {
            "sqlite" => Db::Sqlite(work.join("cdr-bench.sqlite3")),
            "postgres" => Db::Postgres(pg_scratch::PgServer::start(&pg_scratch::Options {
                parent: Some(work.to_owned()),
                // A production server's durability, and buffers a modest server gives.
                fsync: true,
                shared_buffers_mib: Some(PG_SHARED_BUFFERS_MIB),
                settings: vec![("max_wal_size".into(), "4GB".into())],
            })?),
            other => anyhow::bail!("--backends: {other:?} is neither sqlite nor postgres"),
        };
        out.backends.push(measure_backend(&db, work, args, now)?);
    }
    if let Some(dir) = &args.screenshots {
        out.screenshots = screenshots(work, dir, now)?;
    }
    Ok(out)
}

/// The four pages at 1366×768: calls and call on a small capture, registrations, and the live
/// page while a synthetic capture plays to the server as HEP.
fn screenshots(work: &Path, dir: &Path, now: i64) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let data = work.join("screenshots");
    std::fs::create_dir_all(&data)?;
    // A capture of calls with loss and jitter, every packet archived.
    let pcap = data.join("calls.pcap");
    let cfg = monitor::synth::SynthConfig {
        calls: 40,
        call_interval_us: 30_000_000,
        call_duration_ms: 95_000,
        loss_pct: 1.5,
        jitter_ms: 6.0,
        seed: 11,
        start_ns: (now - 3 * 3_600_000_000) * 1000,
        kinds: vec![
            monitor::synth::CallKind::Voice,
            monitor::synth::CallKind::Dtmf,
        ],
        ..monitor::synth::SynthConfig::default()
    };
    monitor::synth::generate(&cfg, std::io::BufWriter::new(std::fs::File::create(&pcap)?))?;
    let db_path = data.join("cdr.sqlite3");
    let regs = cdr::seed::synthetic_registrations(60, now - 3 * 3_600_000_000, now, 5);
    cdr::seed::bulk_load_sqlite(&db_path, regs)?;
    capture_into(&Db::Sqlite(db_path.clone()), &pcap, &data.join("archive"))?;
    // The live page's calls: long ones, starting a second apart, played as HEP.
    let live_pcap = data.join("live.pcap");
    let live = monitor::synth::SynthConfig {
        calls: 12,
        call_interval_us: 700_000,
        call_duration_ms: 120_000,
        loss_pct: 0.8,
        jitter_ms: 4.0,
        failures: false,
        seed: 12,
        start_ns: now * 1000,
        ..monitor::synth::SynthConfig::default()
    };
    monitor::synth::generate(
        &live,
        std::io::BufWriter::new(std::fs::File::create(&live_pcap)?),
    )?;
    let hep_port = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let config = data.join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nhep_listen = \"127.0.0.1:{hep_port}\"\ncdr_db = {:?}\nstatus_interval_s = 0\n",
            db_path.display().to_string()
        ),
    )?;
    let exe = std::env::current_exe()?;
    add_user(&exe, &data, USER, "admin", PASSWORD)?;
    let config_s = config.display().to_string();
    let server = ConsoleServer::start(&exe, &data, &["--config", &config_s])?;
    let (stop, replay) = crate::hep_replay::replay_in_background(
        &live_pcap,
        std::net::SocketAddr::from(([127, 0, 0, 1], hep_port)),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let shots = runtime.block_on(async {
        let b = Browser::launch(1366, 768).await?;
        let base = server.base();
        b.login(&base, USER, PASSWORD).await?;
        let mut shots = Vec::new();
        let from = rfc(now - 4 * 3_600_000_000);
        let to = rfc(now + 60_000_000);
        let shot =
            async |b: &Browser, url: String, ready: &str, name: &str| -> anyhow::Result<String> {
                b.client.goto(&url).await?;
                wait_for(b, ready).await?;
                let path = dir.join(format!("{name}.png"));
                b.screenshot(&path).await?;
                Ok(path.display().to_string())
            };
        shots.push(
            shot(
                &b,
                format!("{base}calls?from={from}&to={to}"),
                "#calls tbody tr",
                "calls",
            )
            .await?,
        );
        b.click(fantoccini::Locator::Css("#calls tbody tr:nth-child(3) a"))
            .await?;
        wait_for(&b, "#call-page[data-ready='1']").await?;
        let path = dir.join("call.png");
        b.screenshot(&path).await?;
        shots.push(path.display().to_string());
        // The ladder and the charts further down the same page.
        b.client
            .execute(
                "document.getElementById('ladder-panel').scrollIntoView();",
                vec![],
            )
            .await?;
        let path = dir.join("call-ladder.png");
        b.screenshot(&path).await?;
        shots.push(path.display().to_string());
        b.client
            .execute(
                "document.getElementById('stream-charts').scrollIntoView();",
                vec![],
            )
            .await?;
        let path = dir.join("call-charts.png");
        b.screenshot(&path).await?;
        shots.push(path.display().to_string());
        shots.push(
            shot(
                &b,
                format!("{base}registrations?from={from}&to={to}"),
                "#registrations tbody tr",
                "registrations",
            )
            .await?,
        );
        // Give the live calls a few seconds of media first.
        tokio::time::sleep(std::time::Duration::from_secs(8)).await;
        shots.push(shot(&b, format!("{base}live"), "#live tbody tr", "live").await?);
        b.close().await;
        anyhow::Ok(shots)
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = replay.join();
    shots
}

/// Waits (up to 30 s) until `selector` finds an element on the page.
async fn wait_for(b: &Browser, selector: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if !b
            .client
            .find_all(fantoccini::Locator::Css(selector))
            .await?
            .is_empty()
        {
            // One more moment for charts drawn after the data.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{selector} did not appear within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
