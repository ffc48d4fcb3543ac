//! `tandem bench exports`: a search of `--calls` calls downloaded whole from the console as CSV
//! (`GET /api/calls?…&format=csv`, streamed) against the same rows read through the JSON API a
//! page at a time (`limit=500`, following `next`), in one run on the same seeded SQLite
//! database: rows per second as the client receives them, and the server's peak memory (its
//! `VmHWM`, from a `tandem serve` started afresh for each, so that each peak is that download's
//! alone) beside its memory before the download.
//!
//! The client decodes the chunked body itself and counts rows as they arrive, holding one
//! chunk; the JSON client parses each page. Both run on this machine beside the server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::browser::{ConsoleServer, add_user, login_cookie};
use crate::report::{BenchReport, Table};

const USER: &str = "admin";
const PASSWORD: &str = "bench-exports-password";
const DAY_US: i64 = 86_400_000_000;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Calls seeded (with their two RTP streams each) and exported.
    #[arg(long, default_value_t = 1_000_000)]
    pub calls: u64,
    /// Days the calls are spread over, ending now.
    #[arg(long, default_value_t = 30)]
    pub days: i64,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Default, Clone)]
pub struct Download {
    pub how: String,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub rows_per_s: f64,
    /// The server's resident memory before the download, and its peak (VmHWM) after it.
    pub server_rss_before_mib: f64,
    pub server_peak_rss_mib: f64,
    /// HTTP requests made.
    pub requests: u64,
}

#[derive(Serialize, Default)]
pub struct ExportsBench {
    pub calls: u64,
    pub days: i64,
    pub seed_s: f64,
    pub db_mib: f64,
    pub downloads: Vec<Download>,
    /// CSV rows per second over the JSON API's.
    pub csv_over_json_rows_per_s: f64,
}

impl BenchReport for ExportsBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "A search of {} calls over {} days (SQLite, {:.0} MiB, seeded in {:.0} s), downloaded whole over loopback HTTP",
            self.calls, self.days, self.db_mib, self.seed_s
        )?;
        let mut t = Table::new([
            "download",
            "rows",
            "MiB",
            "seconds",
            "rows/s",
            "requests",
            "server RSS before MiB",
            "server peak RSS MiB",
        ]);
        for d in &self.downloads {
            t.row([
                d.how.clone(),
                d.rows.to_string(),
                format!("{:.0}", d.bytes as f64 / 1048576.0),
                format!("{:.1}", d.seconds),
                format!("{:.0}", d.rows_per_s),
                d.requests.to_string(),
                format!("{:.1}", d.server_rss_before_mib),
                format!("{:.1}", d.server_peak_rss_mib),
            ]);
        }
        t.write(out)?;
        writeln!(
            out,
            "CSV streams {:.2}x the rows per second of the JSON pages",
            self.csv_over_json_rows_per_s
        )
    }
}

/// A `/proc/PID/status` figure in MiB (`VmRSS`, `VmHWM`).
fn status_mib(pid: u32, key: &str) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .with_context(|| format!("no {key} in /proc/{pid}/status"))?;
    Ok(kib / 1024.0)
}

/// One GET with the session cookie; the open reader after the response's head, and the head.
fn get(
    addr: SocketAddr,
    path: &str,
    cookie: &str,
) -> anyhow::Result<(BufReader<TcpStream>, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = BufReader::with_capacity(256 << 10, s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        anyhow::ensure!(
            r.read_line(&mut line)? > 0,
            "{path}: the connection closed in the head"
        );
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    Ok((r, head))
}

/// Reads a chunked body to its end, handing each chunk to `each`; its bytes.
fn chunked(r: &mut BufReader<TcpStream>, mut each: impl FnMut(&[u8])) -> anyhow::Result<u64> {
    let mut total = 0;
    let mut buf = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size)?;
        let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .with_context(|| format!("a chunk size {size:?}"))?;
        if n == 0 {
            return Ok(total);
        }
        buf.resize(n + 2, 0);
        r.read_exact(&mut buf)?;
        each(&buf[..n]);
        total += n as u64;
    }
}

fn csv_download(addr: SocketAddr, query: &str, cookie: &str) -> anyhow::Result<(u64, u64)> {
    let (mut r, head) = get(addr, &format!("/api/calls?{query}&format=csv"), cookie)?;
    anyhow::ensure!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "the CSV came sized, not streamed: {head}"
    );
    let mut lines = 0u64;
    let bytes = chunked(&mut r, |c| {
        lines += c.iter().filter(|&&b| b == b'\n').count() as u64;
    })?;
    Ok((lines.saturating_sub(1), bytes))
}

fn json_pages(addr: SocketAddr, query: &str, cookie: &str) -> anyhow::Result<(u64, u64, u64)> {
    let (mut rows, mut bytes, mut requests) = (0u64, 0u64, 0u64);
    let mut after = String::new();
    loop {
        let (mut r, _) = get(
            addr,
            &format!("/api/calls?{query}&limit=500{after}"),
            cookie,
        )?;
        let mut body = Vec::new();
        r.read_to_end(&mut body)?;
        requests += 1;
        bytes += body.len() as u64;
        let page: serde_json::Value = serde_json::from_slice(&body)?;
        rows += page["calls"].as_array().map_or(0, |c| c.len() as u64);
        match page["next"].as_str() {
            Some(n) => after = format!("&after={n}"),
            None => return Ok((rows, bytes, requests)),
        }
    }
}

fn measure(exe: &Path, data: &Path, how: &str, query: &str) -> anyhow::Result<Download> {
    let server = ConsoleServer::start(exe, data, &[])?;
    let cookie = login_cookie(server.web, USER, PASSWORD)?;
    let pid = server.pid();
    let before = status_mib(pid, "VmRSS:")?;
    let t = Instant::now();
    let (rows, bytes, requests) = match how {
        "CSV (streamed)" => {
            let (rows, bytes) = csv_download(server.web, query, &cookie)?;
            (rows, bytes, 1)
        }
        _ => json_pages(server.web, query, &cookie)?,
    };
    let seconds = t.elapsed().as_secs_f64();
    Ok(Download {
        how: how.to_string(),
        rows,
        bytes,
        seconds,
        rows_per_s: rows as f64 / seconds,
        server_rss_before_mib: before,
        server_peak_rss_mib: status_mib(pid, "VmHWM:")?,
        requests,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.calls > 0 && args.days > 0,
        "--calls and --days must be at least 1"
    );
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let db = data.join("cdr.sqlite3");
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_micros() as i64;
    let from_us = now_us - args.days * DAY_US;
    eprintln!("seeding {} calls", args.calls);
    let t = Instant::now();
    let loaded = cdr::seed::bulk_load_sqlite(
        &db,
        cdr::seed::synthetic_calls(args.calls, from_us, now_us, 33),
    )?;
    let seed_s = t.elapsed().as_secs_f64();
    let exe = std::env::current_exe()?;
    add_user(&exe, &data, USER, "admin", PASSWORD)?;
    let query = format!(
        "from={}&to={}",
        utc::format_us(from_us - 1_000_000),
        utc::format_us(now_us + 60_000_000)
    )
    .replace(':', "%3A");
    let mut downloads = Vec::new();
    for how in ["CSV (streamed)", "JSON pages of 500"] {
        eprintln!("downloading: {how}");
        let d = measure(&exe, &data, how, &query)?;
        anyhow::ensure!(
            d.rows == loaded.calls,
            "{how}: {} rows of {} calls",
            d.rows,
            loaded.calls
        );
        downloads.push(d);
    }
    let report = ExportsBench {
        calls: loaded.calls,
        days: args.days,
        seed_s,
        db_mib: std::fs::metadata(&db)?.len() as f64 / 1048576.0,
        csv_over_json_rows_per_s: downloads[0].rows_per_s / downloads[1].rows_per_s,
        downloads,
    };
    crate::report::emit(&report, args.json)
}
