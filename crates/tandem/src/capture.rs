//! `tandem capture --read FILE...`: analyses capture files into calls, RTP streams and CDRs.
//! `tandem capture --hep-listen ADDR`: the same from HEP v3 packets that Kamailio, OpenSIPS,
//! FreeSWITCH, Asterisk's res_hep or heplify send over UDP.
//! `tandem capture --interface IF`: the same from a live interface (`capture_live.rs`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use ::cdr::{CdrCall, CdrStore, CdrStream, SqliteStore, format_time_us};
use anyhow::Context;
use monitor::pcap::CaptureReader;
use monitor::{Analysis, CallRecord, Monitor, MonitorConfig, StreamRecord};
use serde_json::json;

/// Closed records are printed and stored every this many packets.
const FLUSH_EVERY_PACKETS: u64 = 1 << 20;
/// Inputs at least this large get a progress bar (when stderr is a terminal).
const PROGRESS_MIN_BYTES: u64 = 16 * 1024 * 1024;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Capture files (pcap or pcapng, optionally gzip-compressed), read in the order given.
    #[arg(long = "read", short = 'r', num_args = 1.., required_unless_present_any = ["hep_listen", "interface"])]
    pub read: Vec<PathBuf>,
    /// Receive HEP v3 over UDP on this address (the HEP port is 9060; keep it on loopback or a
    /// trusted network: HEP carries no authentication). Runs until SIGTERM or ctrl-c; finished
    /// calls are printed and stored every second.
    #[arg(long, value_name = "ADDR", conflicts_with = "read")]
    pub hep_listen: Option<std::net::SocketAddr>,
    /// With --hep-listen: stop after this many datagrams (for tests and trials).
    #[arg(long, value_name = "N", requires = "hep_listen")]
    pub hep_max_packets: Option<u64>,
    /// One JSON object per line on stdout: each call (`"kind":"call"`), each RTP stream
    /// (`"kind":"rtp_stream"`) and each REGISTER chain (`"kind":"registration"`).
    #[arg(long)]
    pub json: bool,
    /// SQLite file the CDRs are written to.
    #[arg(long, default_value = "tandem-data/cdr.sqlite3", env = "TANDEM_CDR_DB")]
    pub cdr_db: PathBuf,
    /// Write CDRs to PostgreSQL instead (libpq-style `host=... port=... user=... dbname=...`).
    #[arg(long, env = "TANDEM_CDR_POSTGRES")]
    pub cdr_postgres: Option<String>,
    /// Do not write CDRs.
    #[arg(long)]
    pub no_store: bool,
    /// Call shards (threads) behind the decoding thread; 1 runs everything on one thread.
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Set by `tandem serve`, which handles SIGTERM itself and stops the capture with
    /// [`request_stop`].
    #[arg(skip)]
    pub signals_handled_elsewhere: bool,
    /// Most calls tracked at once.
    #[arg(long, default_value_t = MonitorConfig::default().max_calls)]
    pub max_calls: usize,
    #[command(flatten)]
    pub cdr_writer: crate::capture_cdr::CdrWriterArgs,
    #[command(flatten)]
    pub status: crate::capture_status::StatusArgs,
    #[command(flatten)]
    pub archive: crate::capture_archive::ArchiveArgs,
    #[command(flatten)]
    pub live: crate::capture_live::LiveArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = MonitorConfig {
        max_calls: args.max_calls,
        ..MonitorConfig::default()
    };
    // Every source feeds this monitor; with --archive its taps archive each call's packets
    // (waiting for the archive only when reading files: live sources never wait).
    let from_files = !args.read.is_empty();
    let (mut mon, mut archive) =
        crate::capture_archive::monitor(cfg, args.shards, &args.archive, from_files)?;
    let total: u64 = args
        .read
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = (total >= PROGRESS_MIN_BYTES && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
            )
            .expect("progress template"),
        );
        b
    });
    let started = Instant::now();
    // CDRs are stored on a thread of their own: capture never waits for the database.
    let cdr = (!args.no_store)
        .then(|| {
            crate::capture_cdr::CdrSink::start(
                &args.cdr_db,
                args.cdr_postgres.as_deref(),
                &args.cdr_writer,
            )
        })
        .transpose()?;
    let status = crate::capture_status::CaptureStatus::start(
        &args.status,
        mon.live(),
        cdr.as_ref().map(|c| c.watch()),
    )?;
    if let Some(a) = &archive {
        status.board.add(a.gauges());
    }
    let mut totals = Totals::default();
    // Records closed so far are printed and stored as the capture goes, so memory stays
    // bounded by the calls in progress, not by the length of the capture.
    // `finished`: the monitor is done; wait for the archive to write everything.
    let mut flush = |part: Analysis, totals: &mut Totals, finished: bool| -> anyhow::Result<()> {
        // Calls whose archive location is not known yet are held back for a later flush.
        let part = match archive.as_mut() {
            Some(a) => a.release(part, finished),
            None => part,
        };
        totals.add(&part);
        if args.json {
            print_json(&part)?;
        }
        if let Some(c) = &cdr {
            c.submit(&part, archive.as_ref());
        }
        Ok(())
    };
    let mut packets = 0u64;
    let mut read_error = None;
    if args.read.is_empty() && !args.signals_handled_elsewhere {
        stop_on_signals();
    }
    match args.hep_listen {
        _ if args.live.interface.is_some() => {
            crate::capture_live::live_source(
                &args.live,
                &mut mon,
                &mut packets,
                &status.board,
                |part| flush(part, &mut totals, false),
            )?;
        }
        Some(addr) => {
            hep_source(addr, args.hep_max_packets, &mut mon, &mut packets, |part| {
                flush(part, &mut totals, false)
            })?;
        }
        None => {
            read_error = read_files(&args.read, &mut mon, &mut packets, bar.as_ref(), |part| {
                flush(part, &mut totals, false)
            })?;
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let last = mon.finish();
    let counters = last.counters;
    let sip_messages = last.sip.messages;
    flush(last, &mut totals, true)?;
    drop(status);
    if let Some(c) = cdr {
        c.close();
    }
    let elapsed = started.elapsed();
    let analysis = Summary {
        totals,
        counters,
        sip_messages,
    };
    print_summary(&analysis, packets, elapsed.as_secs_f64(), args.json)?;
    if let Some(a) = &archive {
        eprintln!("{}", a.summary());
    }
    if let Some(e) = read_error {
        return Err(anyhow::Error::new(e)
            .context("capture stopped early; the calls above were decoded before the error"));
    }
    Ok(())
}

/// Feeds the files' packets to the monitor, flushing closed records as it goes. A read error
/// ends the reading and is returned, so that everything decoded before it is still reported.
fn read_files(
    paths: &[PathBuf],
    mon: &mut Monitor,
    packets: &mut u64,
    bar: Option<&indicatif::ProgressBar>,
    mut flush: impl FnMut(Analysis) -> anyhow::Result<()>,
) -> anyhow::Result<Option<monitor::pcap::CaptureError>> {
    let mut done_bytes = 0u64;
    for path in paths {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let mut reader = match CaptureReader::open(path) {
            Ok(r) => r,
            Err(e) => return Ok(Some(e)),
        };
        loop {
            match reader.next_packet() {
                Ok(Some(p)) => {
                    let (ts, lt) = (p.ts_ns, p.link_type);
                    mon.packet(ts, lt, p.data);
                    *packets += 1;
                    if packets.is_multiple_of(FLUSH_EVERY_PACKETS) {
                        if let Some(b) = bar {
                            b.set_position(done_bytes + reader.offset().min(size));
                        }
                        flush(mon.take_finished())?;
                    }
                }
                Ok(None) => break,
                // Keep every call decoded so far: the caller reports after the output.
                Err(e) => return Ok(Some(e)),
            }
        }
        done_bytes += size;
    }
    Ok(None)
}

/// Set by SIGTERM or SIGINT (or [`request_stop`]) while a HEP or live source runs.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn stop_on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Makes SIGTERM and SIGINT stop the running source (its calls are then reported and stored).
/// `tandem serve` keeps its own handlers and calls [`request_stop`] instead.
fn stop_on_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            stop_on_signal as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGINT,
            stop_on_signal as *const () as libc::sighandler_t,
        );
    }
}

/// Stops a running HEP or live source as SIGTERM does.
pub fn request_stop() {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// True once a stop was asked for.
pub fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Receives HEP v3 datagrams on `addr` and analyses the packets they carry, as raw IP.
/// Datagrams that are not valid HEP are counted and skipped, never fatal.
fn hep_source(
    addr: std::net::SocketAddr,
    max_packets: Option<u64>,
    mon: &mut Monitor,
    packets: &mut u64,
    mut flush: impl FnMut(Analysis) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    /// Link type of the packets rebuilt from HEP: raw IP.
    const LINKTYPE_RAW: u32 = 101;
    let socket = std::net::UdpSocket::bind(addr)
        .with_context(|| format!("cannot listen for HEP on {addr}"))?;
    // Wake up at least once a second to flush finished calls and look at the stop flag.
    socket.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
    eprintln!("listening for HEP v3 on udp://{}", socket.local_addr()?);
    let limits = hep::DecodeLimits::default();
    let mut buf = vec![0u8; 65_536];
    let mut datagram = Vec::with_capacity(2048);
    let (mut invalid, mut last_flush) = (0u64, Instant::now());
    while !stop_requested() && max_packets.is_none_or(|m| *packets + invalid < m) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => match hep::decode(&buf[..n], &limits) {
                Ok(p) => {
                    datagram.clear();
                    if p.to_udp_datagram(&mut datagram).is_ok() {
                        let ts_ns =
                            i64::from(p.ts_sec) * 1_000_000_000 + i64::from(p.ts_usec) * 1_000;
                        mon.packet(ts_ns, LINKTYPE_RAW, &datagram);
                        *packets += 1;
                    } else {
                        invalid += 1;
                    }
                }
                Err(e) => {
                    invalid += 1;
                    if invalid.is_power_of_two() {
                        tracing::warn!(%from, error = %e, invalid, "datagram is not HEP v3; skipped");
                    }
                }
            },
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e).context("receiving HEP"),
        }
        if last_flush.elapsed() >= std::time::Duration::from_secs(1) {
            flush(mon.take_finished())?;
            last_flush = Instant::now();
        }
    }
    if invalid > 0 {
        eprintln!("{invalid} datagrams were not HEP v3 and were skipped");
    }
    Ok(())
}

fn us(ns: i64) -> i64 {
    ns.div_euclid(1000)
}

fn opt_time(ns: Option<i64>) -> serde_json::Value {
    ns.map(|n| json!(format_time_us(us(n))))
        .unwrap_or(serde_json::Value::Null)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn stream_json(s: &StreamRecord) -> serde_json::Value {
    let st = &s.stream;
    let w = &st.wireshark;
    json!({
        "kind": "rtp_stream",
        "call_id": s.call_id.as_deref(),
        "src": st.key.src.to_string(),
        "dst": st.key.dst.to_string(),
        "ssrc": format!("0x{:08X}", st.key.ssrc),
        "payload": st.payload_names(),
        "payload_types": st.payload_types,
        "start": format_time_us(us(st.first_ns)),
        "end": format_time_us(us(st.last_ns)),
        "packets": st.packets,
        "lost": w.lost(),
        "duplicates": st.sequence.duplicates,
        "out_of_order": st.sequence.out_of_order,
        "min_delta_ms": round3(w.min_delta_ms),
        "mean_delta_ms": round3(w.mean_delta_ms),
        "max_delta_ms": round3(w.max_delta_ms),
        "min_jitter_ms": round3(w.min_jitter_ms),
        "mean_jitter_ms": round3(w.mean_jitter_ms),
        "max_jitter_ms": round3(w.max_jitter_ms),
        "mos": st.mos().map(|m| (m * 100.0).round() / 100.0),
        "rtcp": st.rtcp.map(|r| json!({
            "reports": r.reports,
            "fraction_lost_pct": round3(r.fraction_lost_pct),
            "cumulative_lost": r.cumulative_lost,
            "jitter_ms": round3(r.jitter_ms),
        })),
    })
}

fn call_json(c: &CallRecord) -> serde_json::Value {
    let d = &c.dialog;
    json!({
        "kind": "call",
        "call_id": &*d.call_id,
        "caller": &*d.caller,
        "called": &*d.called,
        "caller_addr": d.caller_addr.to_string(),
        "callee_addr": d.callee_addr.to_string(),
        "start": format_time_us(us(d.invite_ns)),
        "ringing": opt_time(d.ringing_ns),
        "answer": opt_time(d.answer_ns),
        "end": opt_time(d.end_ns),
        "state": d.state.as_str(),
        "last_response": (d.last_code != 0).then_some(d.last_code),
        "last_reason": &*d.last_reason,
        "hangup_by": d.hangup_by.map(|p| p.as_str()),
        "q850_cause": d.q850_cause,
        "sip_messages": d.sip_messages,
        "reinvites": d.reinvites,
        "streams": c.streams.iter().map(|s| json!({
            "src": s.stream.key.src.to_string(),
            "dst": s.stream.key.dst.to_string(),
            "ssrc": format!("0x{:08X}", s.stream.key.ssrc),
        })).collect::<Vec<_>>(),
    })
}

fn print_json(a: &Analysis) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for c in &a.calls {
        serde_json::to_writer(&mut out, &call_json(c))?;
        writeln!(out)?;
        for s in &c.streams {
            serde_json::to_writer(&mut out, &stream_json(s))?;
            writeln!(out)?;
        }
    }
    for s in &a.streams {
        serde_json::to_writer(&mut out, &stream_json(s))?;
        writeln!(out)?;
    }
    for r in &a.registrations {
        let v = json!({
            "kind": "registration",
            "call_id": &*r.call_id,
            "user": &*r.user,
            "src": r.src.to_string(),
            "dst": r.dst.to_string(),
            "start": format_time_us(us(r.first_ns)),
            "end": format_time_us(us(r.last_ns)),
            "requests": r.requests,
            "last_response": (r.last_code != 0).then_some(r.last_code),
            "outcome": r.outcome(),
        });
        serde_json::to_writer(&mut out, &v)?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// The CDR row of a call.
pub fn cdr_call(c: &CallRecord) -> CdrCall {
    let d = &c.dialog;
    CdrCall {
        call_id: d.call_id.to_string(),
        caller: d.caller.to_string(),
        called: d.called.to_string(),
        caller_addr: d.caller_addr.to_string(),
        callee_addr: d.callee_addr.to_string(),
        start_us: us(d.invite_ns),
        ringing_us: d.ringing_ns.map(us),
        answer_us: d.answer_ns.map(us),
        end_us: d.end_ns.map(us),
        state: d.state.as_str().to_string(),
        last_response: (d.last_code != 0).then_some(d.last_code),
        last_reason: d.last_reason.to_string(),
        hangup_by: d.hangup_by.map(|p| p.as_str().to_string()),
        q850_cause: d.q850_cause,
        sip_messages: d.sip_messages,
        reinvites: d.reinvites as u32,
        mos_min: c
            .streams
            .iter()
            .filter_map(|s| s.stream.mos())
            .min_by(|a, b| a.total_cmp(b)),
        ..CdrCall::default()
    }
}

/// The CDR row of a stream.
pub fn cdr_stream(s: &StreamRecord) -> CdrStream {
    let st = &s.stream;
    let w = &st.wireshark;
    CdrStream {
        call_id: s.call_id.as_deref().map(str::to_string),
        src: st.key.src.to_string(),
        dst: st.key.dst.to_string(),
        ssrc: st.key.ssrc,
        payload: st.payload_names(),
        start_us: us(st.first_ns),
        end_us: us(st.last_ns),
        packets: st.packets,
        lost: w.lost(),
        duplicates: st.sequence.duplicates,
        out_of_order: st.sequence.out_of_order,
        min_delta_ms: w.min_delta_ms,
        mean_delta_ms: w.mean_delta_ms,
        max_delta_ms: w.max_delta_ms,
        mean_jitter_ms: w.mean_jitter_ms,
        max_jitter_ms: w.max_jitter_ms,
        mos: st.mos(),
        rtcp_reports: st.rtcp.map(|r| r.reports).unwrap_or(0),
        rtcp_fraction_lost_pct: st.rtcp.map(|r| r.fraction_lost_pct),
        rtcp_jitter_ms: st.rtcp.map(|r| r.jitter_ms),
    }
}

/// The CDR store: PostgreSQL when a connection string is given, else the SQLite file (its
/// directory is created).
pub fn open_store(
    path: &std::path::Path,
    postgres: Option<&str>,
) -> anyhow::Result<Box<dyn CdrStore>> {
    if let Some(conninfo) = postgres {
        return Ok(Box::new(::cdr::PgStore::connect(conninfo)?));
    }
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(Box::new(SqliteStore::open(path)?))
}

/// What was printed and stored, for the summary.
#[derive(Default)]
struct Totals {
    calls: u64,
    answered: u64,
    streams: u64,
    registrations: u64,
}

impl Totals {
    fn add(&mut self, a: &Analysis) {
        self.calls += a.calls.len() as u64;
        self.answered += a
            .calls
            .iter()
            .filter(|c| c.dialog.answer_ns.is_some())
            .count() as u64;
        self.streams += a.all_streams().count() as u64;
        self.registrations += a.registrations.len() as u64;
    }
}

struct Summary {
    totals: Totals,
    counters: monitor::analyzer::Counters,
    sip_messages: u64,
}

fn print_summary(s: &Summary, packets: u64, secs: f64, to_stderr: bool) -> std::io::Result<()> {
    let mut out: Box<dyn Write> = if to_stderr {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let c = &s.counters;
    let t = &s.totals;
    writeln!(
        out,
        "{packets} packets in {secs:.3} s ({:.0} packets/s): {} calls ({} answered), {} RTP streams, {} registrations, {} SIP messages, {} RTP packets, {} RTCP packets, {} malformed packets",
        packets as f64 / secs.max(1e-9),
        t.calls,
        t.answered,
        t.streams,
        t.registrations,
        s.sip_messages,
        c.rtp_packets,
        c.rtcp_packets,
        c.malformed,
    )?;
    if c.calls_dropped + c.streams_dropped + c.registrations_dropped > 0 {
        writeln!(
            out,
            "dropped at limits: {} calls, {} streams, {} registrations",
            c.calls_dropped, c.streams_dropped, c.registrations_dropped
        )?;
    }
    Ok(())
}
