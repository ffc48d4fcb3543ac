//! The HEP part of `tandem bench collector`: HEP packets per second, per core, that Tandem's
//! `--hep-listen` turns into calls and CDRs stored in PostgreSQL, over UDP and TCP on loopback,
//! against heplify-server (Homer's collector) storing the same HEP stream into the same
//! PostgreSQL, in the same run.
//!
//! One synthetic capture of concurrent G.711 calls (`monitor::synth`, stamped with the time of
//! the run so that heplify-server's time-partitioned tables take its rows) is encoded as HEP v3
//! once, in memory. Every run sends the same bytes with the same sender, to one receiver at a
//! time: as fast as it goes [`crate::hep_load::send`] (`sendmmsg` in batches of 64 over UDP,
//! 256 KiB writes over TCP), at a fixed rate [`send_paced`] (UDP, [`PACED_BATCH`] datagrams
//! per call at most):
//!
//! - **Tandem**: a [`sensor::Sensor`] with `Source::Hep` writing its CDRs to PostgreSQL
//!   (`cdr::PgStore`, database `tandem_cdr`, one sensor name per run). What it took in is what
//!   its analysis took from its buffer (`HepStatsSnapshot::packets_analysed`). Its CPU is that
//!   of its own threads (`hep-udp`, `hep-tcp`, `sensor`, `cdr-writer`), from /proc, up to the
//!   moment the threads end, so that the last CDRs' writing is counted.
//! - **heplify-server**: its own process, configured by the file in
//!   [`PeerFacts::config`] (homer7 schema in databases `homer_data` and `homer_config`,
//!   created beforehand because it creates them only as the user `postgres`). Its CPU is its
//!   process's (/proc/PID/stat, all its threads), up to the moment its SIP rows are stored.
//!   What it took in is its own counter, `heplify_packets_total` on its Prometheus endpoint (its
//!   default `PromAddr` is on; the only count it exposes); what the kernel dropped in front of
//!   it is its socket's `drops` in /proc/net/udp.
//! - **The bound**: the same sender to a receiver that only reads ([`crate::hep_load::floor`]).
//!
//! As fast as the sender goes, the figures are packets/s per core (packets taken in per CPU
//! second) and the loss. Then, over UDP, a ladder of fixed offered rates (doubling from
//! [`LADDER_START_PPS`], [`LADDER_STEP_S`] seconds each, calls of the same length so the mix
//! of SIP and RTP is the same, sent a few datagrams at a time as agents send them) finds the
//! highest rate each takes in with under 1% loss: a rate is taken in when the median loss of
//! its runs is under 1%.
//!
//! Never: reports a figure it did not measure in this run. A figure bounded by the sender (a
//! rate Tandem takes in without loss, past which the sender cannot go) is marked as a lower
//! bound.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::hep_load::{FloorKind, FloorRun, HepLoad, Sent, Transport};
use crate::report::{Table, median, progress_bar};

/// Default of [`HepPartOptions::calls`]: concurrent synthetic G.711 calls (about 100 HEP
/// packets per second each, 1,007 packets per call of 10 s).
pub const DEFAULT_CALLS: usize = 1_000;
/// Default of [`HepPartOptions::duration_s`]: media seconds per call.
pub const DEFAULT_DURATION_S: u64 = 10;
/// The first offered rate of the UDP ladder, packets/s; each step doubles it.
pub const LADDER_START_PPS: u64 = 12_500;
/// Seconds of traffic per step of the ladder: long enough that neither receiver's buffers
/// (heplify-server's 40,000-packet channel, Tandem's socket and frame buffers) hide a rate it
/// cannot sustain for most of the step.
pub const LADDER_STEP_S: f64 = 5.0;
/// Doubling steps of the ladder at most (12,500 to 1,600,000 packets/s); it ends sooner past
/// 80% of the sender's own rate (then one step as fast as the sender goes), or once Tandem
/// loses 1% or more.
pub const LADDER_STEPS_MAX: usize = 8;
/// The loss under which a rate counts as taken in, percent.
pub const LOSS_GOAL_PCT: f64 = 1.0;
/// Goal: HEP packets per second per core of Tandem.
pub const GOAL_PACKETS_PER_S_PER_CORE: f64 = 500_000.0;
/// Goal: Tandem's packets/s (under 1% loss) over heplify-server's.
pub const GOAL_RATE_RATIO: f64 = 10.0;
/// Goal: Tandem's CPU per packet over heplify-server's, at most.
pub const GOAL_CPU_RATIO: f64 = 0.2;
/// How long heplify-server may take to create its tables and connect (seconds): it creates
/// three days of partitions of every table at start, tens of seconds with fsync on.
const PEER_READY_TIMEOUT: Duration = Duration::from_secs(300);
/// No more packets taken in for this long: the rest was lost (and is counted as lost).
const QUIET: Duration = Duration::from_secs(1);
/// heplify-server's `DBTimer` (its default, seconds): it stores a partial batch of rows at
/// least this often. Its rows are waited for this long and a second more.
const PEER_DB_TIMER_S: u64 = 4;
/// How often heplify-server's counter is read while it takes a run in.
const PEER_SCRAPE: Duration = Duration::from_millis(50);
/// Time given to the postmaster to reap a backend that ended, before its CPU is read.
const BACKEND_REAPED: Duration = Duration::from_millis(300);
/// How long heplify-server's CPU is sampled at rest after it starts.
const PEER_IDLE_SAMPLE: Duration = Duration::from_secs(3);
/// Lines of heplify-server's log shown when it fails.
const PEER_LOG_TAIL_LINES: usize = 20;
/// The threads of a sensor whose CPU is Tandem's.
const SENSOR_THREADS: [&str; 5] = [
    "hep-udp",
    "hep-tcp",
    "sensor",
    "cdr-writer",
    "capture-status",
];

/// Options of the HEP part, filled from `tandem bench collector`'s flags.
#[derive(Debug, Clone)]
pub struct HepPartOptions {
    /// Concurrent synthetic G.711 calls ([`DEFAULT_CALLS`]).
    pub calls: usize,
    /// Media seconds per call ([`DEFAULT_DURATION_S`]).
    pub duration_s: u64,
    /// Runs per configuration; medians reported.
    pub runs: usize,
    /// UDP and/or TCP.
    pub transports: Vec<Transport>,
    /// The peer's binary; `None`: the peer is skipped and the report says so (and how to
    /// build it).
    pub heplify_server: Option<PathBuf>,
    /// No progress bars (for `--json`).
    pub quiet: bool,
}

impl Default for HepPartOptions {
    fn default() -> Self {
        HepPartOptions {
            calls: DEFAULT_CALLS,
            duration_s: DEFAULT_DURATION_S,
            runs: 3,
            transports: vec![Transport::Udp, Transport::Tcp],
            heplify_server: None,
            quiet: false,
        }
    }
}

/// What the HEP part measured.
#[derive(Debug, Clone, Serialize)]
pub struct HepPartReport {
    pub load: LoadFacts,
    /// `SHOW server_version` of the PostgreSQL both stored into (fsync on).
    pub postgres: String,
    pub runs: usize,
    /// As fast as the sender goes, per transport.
    pub transports: Vec<TransportResult>,
    /// Fixed offered rates over UDP (absent without UDP).
    pub ladder: Option<Ladder>,
    pub socket_buffer: SocketBufferFacts,
    pub peer: PeerFacts,
    pub goals: Vec<Goal>,
}

/// The HEP stream every run sends.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFacts {
    pub calls: usize,
    pub duration_s: u64,
    pub packets: u64,
    pub sip_packets: u64,
    pub rtp_packets: u64,
    pub bytes: u64,
}

/// One transport as fast as the sender goes: medians of the runs, and the runs.
#[derive(Debug, Clone, Serialize)]
pub struct TransportResult {
    pub transport: Transport,
    pub tandem: Medians,
    pub tandem_runs: Vec<TandemRun>,
    /// The bare receiver's packets/s per core and packets/s (medians).
    pub bound_packets_per_s_per_core: f64,
    pub bound_packets_per_s: f64,
    pub bound_runs: Vec<FloorRun>,
    pub peer: Option<Medians>,
    pub peer_runs: Vec<PeerRun>,
    /// Tandem over heplify-server: packets/s (wall), packets/s per core, CPU per packet.
    pub packets_per_s_ratio: Option<f64>,
    pub per_core_ratio: Option<f64>,
    pub cpu_per_packet_ratio: Option<f64>,
}

/// The medians of one receiver's runs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Medians {
    /// Packets taken in per CPU second of the receiver.
    pub packets_per_s_per_core: f64,
    /// Packets taken in per second, from the first sent to the last taken in.
    pub packets_per_s: f64,
    pub cpu_us_per_packet: f64,
    /// Sent but not taken in, percent.
    pub loss_pct: f64,
    /// PostgreSQL's CPU over the run (clock ticks of 10 ms, the server's processes and the
    /// backends it reaped), µs per packet taken in.
    pub postgres_cpu_us_per_packet: f64,
}

/// One run of Tandem's HEP ingest.
#[derive(Debug, Clone, Serialize)]
pub struct TandemRun {
    pub sent: Sent,
    /// HEP packets analysed.
    pub packets: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub cpu_s_by_thread: Vec<(String, f64)>,
    pub packets_per_s: f64,
    pub packets_per_s_per_core: f64,
    pub cpu_us_per_packet: f64,
    pub loss_pct: f64,
    /// Datagrams the kernel dropped at Tandem's socket (`SO_MEMINFO`).
    pub socket_drops: u64,
    /// Packets dropped because the buffer before the analysis was full.
    pub buffer_overruns: u64,
    /// Its highest fill over the run, bytes, of `buffer_bytes_max`.
    pub buffer_bytes_peak: u64,
    pub buffer_bytes_max: u64,
    /// `Udp: RcvbufErrors` of /proc/net/snmp over the run (system-wide).
    pub snmp_rcvbuf_errors: u64,
    pub calls: u64,
    /// CDRs the writer stored, and the call rows PostgreSQL holds for this run.
    pub cdrs_written: u64,
    pub cdr_rows: u64,
    pub cdr_store_errors: u64,
    pub postgres_cpu_s: f64,
}

/// One run of heplify-server.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRun {
    pub sent: Sent,
    /// Packets it counted (`heplify_packets_total`, every type).
    pub packets: u64,
    /// Datagrams the kernel dropped at its socket (/proc/net/udp `drops`).
    pub socket_drops: u64,
    pub snmp_rcvbuf_errors: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub packets_per_s: f64,
    pub packets_per_s_per_core: f64,
    pub cpu_us_per_packet: f64,
    pub loss_pct: f64,
    /// SIP packets sent, and the SIP rows it stored (hep_proto_1_*).
    pub sip_sent: u64,
    pub sip_rows: u64,
    pub postgres_cpu_s: f64,
}

/// The UDP ladder of offered rates.
#[derive(Debug, Clone, Serialize)]
pub struct Ladder {
    pub step_s: f64,
    pub steps: Vec<LadderStep>,
    /// The highest offered rate taken in with under 1% loss (median of the runs), packets/s.
    pub tandem_max_pps: Option<f64>,
    /// True when Tandem took in the highest rate the sender reached: its figure is a lower
    /// bound, set by the sender.
    pub tandem_bounded_by_sender: bool,
    pub peer_max_pps: Option<f64>,
    /// `tandem_max_pps / peer_max_pps`; a lower bound when `tandem_bounded_by_sender`.
    pub ratio: Option<f64>,
}

/// One offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct LadderStep {
    /// `None`: as fast as the sender goes.
    pub offered_pps: Option<u64>,
    pub calls: usize,
    pub packets: u64,
    /// What the sender reached (median), packets/s.
    pub sent_pps: f64,
    pub tandem: StepFigures,
    pub peer: Option<StepFigures>,
}

/// One receiver at one offered rate: medians of the runs.
#[derive(Debug, Clone, Serialize)]
pub struct StepFigures {
    pub loss_pct: f64,
    pub cpu_us_per_packet: f64,
    pub loss_runs: Vec<f64>,
}

/// What Tandem does about its socket buffer, and what the peer does, as read in this run.
#[derive(Debug, Clone, Serialize)]
pub struct SocketBufferFacts {
    /// `SO_RCVBUF` Tandem asks for (`HepSettings::socket_buffer_bytes`, default
    /// `sensor::hep::HEP_SOCKET_BUFFER_BYTES`), bytes; with `SO_RCVBUFFORCE` when privileged.
    pub tandem_asked_bytes: u64,
    /// What the kernel granted (half of what it reports: its bookkeeping is counted in).
    pub tandem_granted_bytes: u64,
    /// True when the grant is past `net.core.rmem_max` (`SO_RCVBUFFORCE` worked).
    pub tandem_forced: bool,
    /// The buffer between the receive threads and the analysis, bytes
    /// (`sensor::hep::HEP_BUFFER_BYTES_MAX`), and its highest fill in any run.
    pub tandem_frame_buffer_bytes: u64,
    pub tandem_frame_buffer_peak_bytes: u64,
    pub rmem_default: Option<u64>,
    pub rmem_max: Option<u64>,
    /// heplify-server's socket buffer as `ss` reports it (`rb`), bytes: it sets none, so it
    /// gets `net.core.rmem_default`.
    pub peer_buffer_bytes: Option<u64>,
    /// Where Tandem counts what it loses.
    pub tandem_counts_drops: &'static str,
}

/// The peer: how it ran, or why it did not.
#[derive(Debug, Clone, Serialize)]
pub struct PeerFacts {
    pub binary: Option<PathBuf>,
    /// `heplify-server -version`.
    pub version: Option<String>,
    /// The configuration file it ran with.
    pub config: Option<String>,
    /// Its CPU at rest, percent of a core, over a few seconds after it started.
    pub idle_cpu_pct: Option<f64>,
    /// Why it was skipped, and how to build it.
    pub skipped: Option<String>,
}

/// One goal of the issue, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    pub goal: String,
    pub target: String,
    pub measured: Option<f64>,
    /// `None` when it could not be measured in this run (the peer skipped).
    pub met: Option<bool>,
    pub note: String,
}

/// How to build the peer, for a report without it.
const PEER_BUILD_HINT: &str = "heplify-server was not given (--heplify-server PATH): build it from \
     github.com/sipcapture/heplify-server with `apt-get install libluajit-5.1-dev` and \
     `go build -o heplify-server cmd/heplify-server/*.go` (see BENCHMARKS.md)";

/// Runs the HEP part: PostgreSQL, the load, Tandem, the bound and the peer, as fast as the
/// sender goes and over the UDP ladder.
pub fn run(opts: &HepPartOptions) -> anyhow::Result<HepPartReport> {
    anyhow::ensure!(opts.runs >= 1, "at least one run");
    anyhow::ensure!(
        opts.calls >= 1 && opts.duration_s >= 1,
        "at least one call of 1 s"
    );
    anyhow::ensure!(!opts.transports.is_empty(), "no HEP transport given");
    let work = tempfile::Builder::new().prefix("bench-hep-").tempdir()?;
    let pg = pg_scratch::PgServer::start(&pg_scratch::Options {
        parent: Some(work.path().to_path_buf()),
        fsync: true,
        shared_buffers_mib: Some(1024),
        settings: vec![("max_wal_size".into(), "4GB".into())],
    })
    .context("starting PostgreSQL (Debian's postgresql package)")?;
    let mut db = Db::new(&pg)?;
    let load = load_now(opts.calls, opts.duration_s, work.path())?;
    let sip_packets = load.sip_packets;
    let facts = LoadFacts {
        calls: opts.calls,
        duration_s: opts.duration_s,
        packets: load.packets.len() as u64,
        sip_packets,
        rtp_packets: load.packets.len() as u64 - sip_packets,
        bytes: load.bytes.len() as u64,
    };
    let mut peer = match &opts.heplify_server {
        Some(bin) => Some(Heplify::start(bin, &pg, work.path())?),
        None => None,
    };
    let with_udp = opts.transports.contains(&Transport::Udp);
    let per_run = 2 + usize::from(peer.is_some());
    // The ladder's length is an estimate: where it ends depends on what it finds.
    let ladder_steps = 7;
    let bar = progress_bar(
        opts.quiet,
        (opts.transports.len() * opts.runs * per_run
            + usize::from(with_udp) * ladder_steps * opts.runs * (per_run - 1)) as u64,
        "HEP {bar:30} {pos}/{len} {msg}",
    )?;
    let mut transports = Vec::new();
    let mut frame_buffer_peak = 0;
    let mut granted = 0;
    for &transport in &opts.transports {
        let (mut t_runs, mut f_runs, mut p_runs) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..opts.runs {
            bar.set_message(format!("{transport:?} bound, run {}", run + 1));
            f_runs.push(crate::hep_load::floor(
                &load,
                transport,
                FloorKind::Bare,
                0,
            )?);
            bar.inc(1);
            bar.set_message(format!("{transport:?} Tandem, run {}", run + 1));
            let t = tandem_ingest(&load, transport, 0, &mut db)?;
            frame_buffer_peak = frame_buffer_peak.max(t.0.buffer_bytes_peak);
            granted = t.1;
            t_runs.push(t.0);
            bar.inc(1);
            if let Some(p) = peer.as_mut() {
                bar.set_message(format!("{transport:?} heplify-server, run {}", run + 1));
                p_runs.push(p.ingest(&load, transport, 0, sip_packets, &db)?);
                bar.inc(1);
            }
        }
        let tandem = tandem_medians(&t_runs);
        let peer_m = (!p_runs.is_empty()).then(|| peer_medians(&p_runs));
        transports.push(TransportResult {
            transport,
            tandem,
            bound_packets_per_s_per_core: median(
                &f_runs
                    .iter()
                    .map(|f| f.received_per_s_per_core)
                    .collect::<Vec<_>>(),
            ),
            bound_packets_per_s: median(
                &f_runs.iter().map(|f| f.received_per_s).collect::<Vec<_>>(),
            ),
            bound_runs: f_runs,
            packets_per_s_ratio: peer_m.map(|p| tandem.packets_per_s / p.packets_per_s.max(1e-9)),
            per_core_ratio: peer_m
                .map(|p| tandem.packets_per_s_per_core / p.packets_per_s_per_core.max(1e-9)),
            cpu_per_packet_ratio: peer_m
                .map(|p| tandem.cpu_us_per_packet / p.cpu_us_per_packet.max(1e-9)),
            peer: peer_m,
            tandem_runs: t_runs,
            peer_runs: p_runs,
        });
    }
    let ladder = if with_udp {
        let sender_pps = transports
            .iter()
            .find(|t| t.transport == Transport::Udp)
            .map(|t| {
                median(
                    &t.tandem_runs
                        .iter()
                        .map(|r| r.sent.packets_per_s)
                        .collect::<Vec<_>>(),
                )
            })
            .unwrap_or(f64::MAX);
        Some(ladder(
            opts,
            sender_pps,
            &mut db,
            peer.as_mut(),
            work.path(),
            &bar,
        )?)
    } else {
        None
    };
    bar.finish_and_clear();
    let peer_facts = match &peer {
        Some(p) => PeerFacts {
            binary: opts.heplify_server.clone(),
            version: Some(p.version.clone()),
            config: Some(p.config.clone()),
            idle_cpu_pct: Some(p.idle_cpu_pct),
            skipped: None,
        },
        None => PeerFacts {
            binary: None,
            version: None,
            config: None,
            idle_cpu_pct: None,
            skipped: Some(PEER_BUILD_HINT.into()),
        },
    };
    let sysctl = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let rmem_max = sysctl("rmem_max");
    let socket_buffer = SocketBufferFacts {
        tandem_asked_bytes: sensor::hep::HEP_SOCKET_BUFFER_BYTES as u64,
        tandem_granted_bytes: granted / 2,
        tandem_forced: rmem_max.is_some_and(|m| granted / 2 > m),
        tandem_frame_buffer_bytes: sensor::hep::HEP_BUFFER_BYTES_MAX,
        tandem_frame_buffer_peak_bytes: frame_buffer_peak,
        rmem_default: sysctl("rmem_default"),
        rmem_max,
        peer_buffer_bytes: peer.as_ref().and_then(|p| ss_receive_buffer(p.udp.port())),
        tandem_counts_drops: "the kernel's drops at its UDP socket (SO_MEMINFO) as \
             tandem_capture_hep_socket_drops, the frame buffer's overruns as \
             tandem_capture_hep_buffer_overruns, both on the status line; TCP is not read while \
             that buffer is full, so TCP's flow control slows the sender instead",
    };
    let goals = goals(&transports, ladder.as_ref());
    let postgres = db.version.clone();
    drop(peer);
    drop(db);
    drop(pg);
    Ok(HepPartReport {
        load: facts,
        postgres,
        runs: opts.runs,
        transports,
        ladder,
        socket_buffer,
        peer: peer_facts,
        goals,
    })
}

/// The goals of the issue, from what was measured.
fn goals(transports: &[TransportResult], ladder: Option<&Ladder>) -> Vec<Goal> {
    let mut out = Vec::new();
    for t in transports {
        let name = format!("{:?}", t.transport).to_uppercase();
        out.push(Goal {
            goal: format!("{name}: Tandem packets/s per core"),
            target: format!("≥ {GOAL_PACKETS_PER_S_PER_CORE:.0}"),
            measured: Some(t.tandem.packets_per_s_per_core),
            met: Some(t.tandem.packets_per_s_per_core >= GOAL_PACKETS_PER_S_PER_CORE),
            note: format!("as fast as the sender goes, loss {:.2}%", t.tandem.loss_pct),
        });
        if let (Some(p), Some(r)) = (t.peer, t.cpu_per_packet_ratio) {
            out.push(Goal {
                goal: format!("{name}: CPU per packet, Tandem / heplify-server"),
                target: format!("≤ {GOAL_CPU_RATIO}"),
                measured: Some(r),
                met: Some(r <= GOAL_CPU_RATIO),
                note: format!(
                    "{:.2} µs against {:.2} µs, as fast as the sender goes (loss {:.2}% and \
                     {:.2}%: a receiver that drops packets does not pay for them)",
                    t.tandem.cpu_us_per_packet, p.cpu_us_per_packet, t.tandem.loss_pct, p.loss_pct
                ),
            });
        }
        if t.transport == Transport::Tcp
            && let (Some(p), Some(r)) = (t.peer, t.packets_per_s_ratio)
        {
            // TCP loses nothing (flow control), so the rate each reaches is its rate under 1%.
            out.push(Goal {
                goal: "TCP: packets/s under 1% loss, Tandem / heplify-server".into(),
                target: format!("≥ {GOAL_RATE_RATIO}"),
                measured: Some(r),
                met: Some(r >= GOAL_RATE_RATIO && t.tandem.loss_pct < LOSS_GOAL_PCT),
                note: format!(
                    "{:.0} against {:.0} packets/s, loss {:.2}% and {:.2}%; per core {:.0} \
                     against {:.0} ({:.1}×)",
                    t.tandem.packets_per_s,
                    p.packets_per_s,
                    t.tandem.loss_pct,
                    p.loss_pct,
                    t.tandem.packets_per_s_per_core,
                    p.packets_per_s_per_core,
                    t.per_core_ratio.unwrap_or(0.0)
                ),
            });
        }
    }
    if let Some(l) = ladder {
        // CPU per packet where both take in everything: the peer's highest rate under 1%.
        let matched = l
            .steps
            .iter()
            .filter_map(|s| Some((s, s.peer.as_ref()?)))
            .filter(|(s, p)| p.loss_pct < LOSS_GOAL_PCT && s.tandem.loss_pct < LOSS_GOAL_PCT)
            .max_by(|a, b| a.0.sent_pps.total_cmp(&b.0.sent_pps));
        if let Some((s, p)) = matched {
            let r = s.tandem.cpu_us_per_packet / p.cpu_us_per_packet.max(1e-9);
            out.push(Goal {
                goal: "UDP: CPU per packet, Tandem / heplify-server, both under 1% loss".into(),
                target: format!("≤ {GOAL_CPU_RATIO}"),
                measured: Some(r),
                met: Some(r <= GOAL_CPU_RATIO),
                note: format!(
                    "{:.2} µs against {:.2} µs at {:.0} packets/s, heplify-server's highest rate \
                     under 1% loss",
                    s.tandem.cpu_us_per_packet, p.cpu_us_per_packet, s.sent_pps
                ),
            });
        }
        let (measured, met, note) = match (l.ratio, l.tandem_max_pps, l.peer_max_pps) {
            (Some(r), Some(t), Some(p)) => (
                Some(r),
                // A lower bound that reaches the goal meets it; one below it decides nothing:
                // Tandem took in all the sender could send.
                (r >= GOAL_RATE_RATIO || !l.tandem_bounded_by_sender)
                    .then_some(r >= GOAL_RATE_RATIO),
                format!(
                    "highest offered rate under 1% loss: {t:.0} against {p:.0} packets/s{}",
                    if l.tandem_bounded_by_sender {
                        "; Tandem's is the sender's limit, so the ratio is a lower bound"
                    } else {
                        ""
                    }
                ),
            ),
            (None, Some(t), None) if l.steps.iter().any(|s| s.peer.is_some()) => (
                None,
                None,
                format!("heplify-server lost 1% or more at every rate; Tandem took {t:.0}"),
            ),
            _ => (None, None, "heplify-server not run".into()),
        };
        out.push(Goal {
            goal: "UDP: packets/s under 1% loss, Tandem / heplify-server".into(),
            target: format!("≥ {GOAL_RATE_RATIO}"),
            measured,
            met,
            note,
        });
    }
    out
}

/// The UDP ladder: the same kind of load at doubling offered rates, Tandem then the peer at
/// each; between the peer's last rate under 1% loss and its first over, three more rates a
/// quarter apart; last, as fast as the sender goes. The peer stops after its second doubling
/// step over 1%; the ladder ends when Tandem loses 1% or more, or past the sender's own rate.
fn ladder(
    opts: &HepPartOptions,
    sender_pps: f64,
    db: &mut Db,
    mut peer: Option<&mut Heplify>,
    dir: &Path,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Ladder> {
    let mut steps = Vec::new();
    let mut peer_active = peer.is_some();
    let mut peer_lossy_steps = 0;
    let mut refined = false;
    for k in 0..LADDER_STEPS_MAX {
        let offered = LADDER_START_PPS << k;
        // The paced sender reaches a little less than it does unpaced: past this, the
        // unpaced step says more.
        let last = k + 1 == LADDER_STEPS_MAX || offered as f64 > 0.8 * sender_pps;
        let step = ladder_step(
            opts,
            Some(offered),
            sender_pps,
            db,
            peer.as_deref_mut().filter(|_| peer_active),
            dir,
            bar,
        )?;
        let peer_lost = step
            .peer
            .as_ref()
            .is_some_and(|p| p.loss_pct >= LOSS_GOAL_PCT);
        let tandem_lost = step.tandem.loss_pct >= LOSS_GOAL_PCT;
        steps.push(step);
        if peer_lost {
            if !refined && k > 0 {
                refined = true;
                let good = offered / 2;
                for quarters in [5, 6, 7] {
                    steps.push(ladder_step(
                        opts,
                        Some(good * quarters / 4),
                        sender_pps,
                        db,
                        peer.as_deref_mut(),
                        dir,
                        bar,
                    )?);
                }
            }
            peer_lossy_steps += 1;
            peer_active = peer_lossy_steps < 2;
        }
        if tandem_lost {
            break;
        }
        if last {
            steps.push(ladder_step(
                opts,
                None,
                sender_pps,
                db,
                peer.as_deref_mut().filter(|_| peer_active),
                dir,
                bar,
            )?);
            break;
        }
    }
    steps.sort_by_key(|s| s.offered_pps.unwrap_or(u64::MAX));
    let best = |loss: &dyn Fn(&LadderStep) -> Option<f64>| -> Option<f64> {
        steps
            .iter()
            .filter(|s| loss(s).is_some_and(|l| l < LOSS_GOAL_PCT))
            .map(|s| s.sent_pps)
            .reduce(f64::max)
    };
    let tandem_max = best(&|s| Some(s.tandem.loss_pct));
    let peer_max = best(&|s| s.peer.as_ref().map(|p| p.loss_pct));
    let tandem_bounded_by_sender = steps
        .last()
        .is_some_and(|s| s.offered_pps.is_none() && s.tandem.loss_pct < LOSS_GOAL_PCT);
    Ok(Ladder {
        step_s: LADDER_STEP_S,
        tandem_max_pps: tandem_max,
        tandem_bounded_by_sender,
        peer_max_pps: peer_max,
        ratio: tandem_max.zip(peer_max).map(|(t, p)| t / p),
        steps,
    })
}

/// One rate of the ladder (`None`: as fast as the sender goes), all runs: a load of
/// [`LADDER_STEP_S`] seconds at that rate, Tandem then the peer.
fn ladder_step(
    opts: &HepPartOptions,
    offered: Option<u64>,
    sender_pps: f64,
    db: &mut Db,
    mut peer: Option<&mut Heplify>,
    dir: &Path,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<LadderStep> {
    // Packets of one call: 50 RTP packets/s each way, and its few SIP messages.
    let per_call = 100 * opts.duration_s + 7;
    let rate = offered.map_or(sender_pps, |o| o as f64);
    let calls = ((rate * LADDER_STEP_S) / per_call as f64).ceil().max(1.0) as usize;
    let load = load_now(calls, opts.duration_s, dir)?;
    let sip = load.sip_packets;
    let name = offered.map_or("max".to_string(), |o| format!("{o}/s"));
    let (mut sent, mut t_loss, mut t_cpu, mut p_loss, mut p_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let rate_pps = offered.unwrap_or(0);
    for run in 0..opts.runs {
        bar.set_message(format!("UDP ladder {name} Tandem, run {}", run + 1));
        let (t, _) = tandem_ingest(&load, Transport::Udp, rate_pps, db)?;
        sent.push(t.sent.packets_per_s);
        t_loss.push(t.loss_pct);
        t_cpu.push(t.cpu_us_per_packet);
        bar.inc(1);
        if let Some(p) = peer.as_deref_mut() {
            bar.set_message(format!("UDP ladder {name} heplify-server, run {}", run + 1));
            let r = p.ingest(&load, Transport::Udp, rate_pps, sip, db)?;
            p_loss.push(r.loss_pct);
            p_cpu.push(r.cpu_us_per_packet);
            bar.inc(1);
        }
    }
    let figures = |loss: Vec<f64>, cpu: &[f64]| StepFigures {
        loss_pct: median(&loss),
        cpu_us_per_packet: median(cpu),
        loss_runs: loss,
    };
    Ok(LadderStep {
        offered_pps: offered,
        calls,
        packets: load.packets.len() as u64,
        sent_pps: median(&sent),
        tandem: figures(t_loss, &t_cpu),
        peer: (!p_loss.is_empty()).then(|| figures(p_loss, &p_cpu)),
    })
}

/// Sends `load` to `to`: as fast as the sender goes with [`crate::hep_load::send`] when
/// `rate_pps` is 0 (and always over TCP), else at that offered rate with [`send_paced`].
fn send_load(
    load: &HepLoad,
    to: SocketAddr,
    transport: Transport,
    rate_pps: u64,
) -> anyhow::Result<Sent> {
    if rate_pps == 0 || transport == Transport::Tcp {
        return crate::hep_load::send(load, to, transport, 0, &AtomicBool::new(false));
    }
    send_paced(load, to, rate_pps)
}

/// Datagrams per `sendmmsg` at a fixed offered rate: a HEP agent sends each packet as it
/// captures it, so bursts are kept to a few datagrams, not the 64 of the unpaced sender that
/// a plain socket buffer of 208 KiB would feel more than real traffic.
const PACED_BATCH: usize = 8;

/// Sends every datagram of `load` over UDP at `rate_pps`: each one when its time comes
/// (packet `i` at `i / rate_pps` s), at most [`PACED_BATCH`] per system call.
fn send_paced(load: &HepLoad, to: SocketAddr, rate_pps: u64) -> anyhow::Result<Sent> {
    let cpu0 = procstat::thread_cpu_seconds().unwrap_or(0.0);
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.connect(to)?;
    let total = load.packets.len();
    let rate = rate_pps as f64;
    let started = Instant::now();
    let mut sent = Sent::default();
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(PACED_BATCH);
    let mut headers: Vec<libc::mmsghdr> = Vec::with_capacity(PACED_BATCH);
    let mut next = 0;
    while next < total {
        let due = ((started.elapsed().as_secs_f64() * rate) as usize + 1).min(total);
        if due <= next {
            let at = Duration::from_secs_f64(next as f64 / rate);
            if let Some(wait) = at.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
            continue;
        }
        let end = due.min(next + PACED_BATCH);
        next += crate::hep_load::send_datagrams(
            &socket,
            load,
            next..end,
            &mut iov,
            &mut headers,
            &mut sent,
        )?;
    }
    sent.wall_s = started.elapsed().as_secs_f64();
    sent.cpu_s = procstat::thread_cpu_seconds().unwrap_or(0.0) - cpu0;
    sent.packets_per_s = sent.packets as f64 / sent.wall_s.max(1e-9);
    Ok(sent)
}

fn tandem_medians(runs: &[TandemRun]) -> Medians {
    let m = |f: &dyn Fn(&TandemRun) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    Medians {
        packets_per_s_per_core: m(&|r| r.packets_per_s_per_core),
        packets_per_s: m(&|r| r.packets_per_s),
        cpu_us_per_packet: m(&|r| r.cpu_us_per_packet),
        loss_pct: m(&|r| r.loss_pct),
        postgres_cpu_us_per_packet: m(&|r| r.postgres_cpu_s * 1e6 / r.packets.max(1) as f64),
    }
}

fn peer_medians(runs: &[PeerRun]) -> Medians {
    let m = |f: &dyn Fn(&PeerRun) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    Medians {
        packets_per_s_per_core: m(&|r| r.packets_per_s_per_core),
        packets_per_s: m(&|r| r.packets_per_s),
        cpu_us_per_packet: m(&|r| r.cpu_us_per_packet),
        loss_pct: m(&|r| r.loss_pct),
        postgres_cpu_us_per_packet: m(&|r| r.postgres_cpu_s * 1e6 / r.packets.max(1) as f64),
    }
}

/// The synthetic HEP load, its calls starting now: heplify-server stores rows only in the
/// partitions it created at start (yesterday to tomorrow).
fn load_now(calls: usize, duration_s: u64, dir: &Path) -> anyhow::Result<HepLoad> {
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as i64;
    HepLoad::synthesise(calls, duration_s, now_ns, dir)
}

/// The PostgreSQL both store into: Tandem's CDRs in `tandem_cdr` (one sensor name per run, so
/// runs never collide), heplify-server's rows in `homer_data`; and the server's CPU.
struct Db {
    tandem: String,
    runs: usize,
    postmaster: u32,
    version: String,
}

impl Db {
    fn new(pg: &pg_scratch::PgServer) -> anyhow::Result<Db> {
        let base = pg.conninfo();
        let mut admin = postgres::Client::connect(&base, postgres::NoTls)
            .context("connecting to the scratch PostgreSQL")?;
        let version: String = admin.query_one("SHOW server_version", &[])?.get(0);
        admin.batch_execute("CREATE DATABASE tandem_cdr")?;
        let pid_file = pg.data_dir().join("postmaster.pid");
        let postmaster = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            .with_context(|| format!("reading {}", pid_file.display()))?;
        Ok(Db {
            tandem: base.replace("dbname=postgres", "dbname=tandem_cdr"),
            runs: 0,
            postmaster,
            version,
        })
    }

    /// CPU seconds of the whole server: the postmaster with the backends it has reaped
    /// (cutime, cstime), and the processes it runs now.
    fn cpu_s(&self) -> f64 {
        let stat = |pid: &str| -> Option<(u64, u32)> {
            let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest: Vec<&str> = line[line.rfind(')')? + 1..].split_whitespace().collect();
            // After the name: state, ppid, ..., utime, stime, cutime, cstime (fields 14-17).
            let ticks = rest
                .get(11..15)?
                .iter()
                .filter_map(|v| v.parse::<u64>().ok())
                .sum();
            Some((ticks, rest.get(1)?.parse().ok()?))
        };
        let mut ticks = stat(&self.postmaster.to_string()).map_or(0, |s| s.0);
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.bytes().all(|b| b.is_ascii_digit())
                && let Some((t, parent)) = stat(&name)
                && parent == self.postmaster
            {
                ticks += t;
            }
        }
        ticks as f64 / procstat::ticks_per_second() as f64
    }
}

/// Per-thread CPU of a sensor, read from /proc/self/task to the nanosecond (schedstat), kept
/// as the highest value seen of each thread, so that a thread's work up to its last reading
/// before it ends is counted.
struct SensorCpu {
    base: HashMap<u32, u64>,
    seen: HashMap<u32, (String, u64)>,
}

impl SensorCpu {
    fn read() -> Vec<(u32, String, u64)> {
        let mut out = Vec::new();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return out;
        };
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let path = task.path();
            let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
                continue;
            };
            let comm = comm.trim_end();
            if !SENSOR_THREADS.contains(&comm) {
                continue;
            }
            let ns = std::fs::read_to_string(path.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
            if let Some(ns) = ns {
                out.push((tid, comm.to_string(), ns));
            }
        }
        out
    }

    fn start() -> SensorCpu {
        SensorCpu {
            base: Self::read().into_iter().map(|(t, _, ns)| (t, ns)).collect(),
            seen: HashMap::new(),
        }
    }

    fn sample(&mut self) {
        for (tid, name, ns) in Self::read() {
            let e = self.seen.entry(tid).or_insert((name, 0));
            e.1 = e.1.max(ns);
        }
    }

    fn by_thread(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = SENSOR_THREADS
            .iter()
            .map(|n| (n.to_string(), 0.0))
            .collect();
        for (tid, (name, ns)) in &self.seen {
            let used = ns.saturating_sub(self.base.get(tid).copied().unwrap_or(0));
            if let Some(e) = out.iter_mut().find(|(n, _)| n == name) {
                e.1 += used as f64 * 1e-9;
            }
        }
        out.retain(|(_, s)| *s > 0.0);
        out
    }
}

/// One run of Tandem: a sensor on HEP with its CDRs in PostgreSQL, fed `load` at `rate_pps`
/// (0: as fast as the sender goes). Also the socket buffer as the kernel reported it.
fn tandem_ingest(
    load: &HepLoad,
    transport: Transport,
    rate_pps: u64,
    db: &mut Db,
) -> anyhow::Result<(TandemRun, u64)> {
    db.runs += 1;
    let sensor_id = format!("hep-run-{}", db.runs);
    let tmp = tempfile::tempdir()?;
    let mut config = sensor::SensorConfig::new(sensor::Source::Hep {
        listen: "127.0.0.1:0".parse()?,
        max_packets: None,
    });
    let mut cdr = sensor::CdrConfig::sqlite(tmp.path().join("cdr.sqlite3"));
    cdr.postgres = Some(db.tandem.clone());
    cdr.sensor_id = sensor_id.clone();
    config.cdr = Some(cdr);
    config.status.interval_s = 0;
    config.monitor.max_calls = config.monitor.max_calls.max(2 * load.calls);
    let handle = sensor::Sensor::start(config, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let to = handle.hep_addr().context("the sensor's HEP address")?;
    // The CDR writer connects and creates its schema on its thread: wait for it, so that
    // the run measures ingest rather than a first connection.
    let up = Instant::now();
    while !handle.status().cdr.is_some_and(|c| c.store_up) {
        anyhow::ensure!(
            up.elapsed() < Duration::from_secs(60),
            "Tandem's CDR writer did not connect to PostgreSQL in 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let snmp0 = crate::hep_load::snmp_udp_rcvbuf_errors();
    let pg0 = db.cpu_s();
    let mut cpu = SensorCpu::start();
    let started = Instant::now();
    let sent = send_load(load, to, transport, rate_pps)?;
    // Done when everything sent is analysed, or nothing more came for QUIET (the rest was
    // lost, and is counted).
    let mut last = (u64::MAX, Instant::now());
    let mut done_at = Instant::now();
    loop {
        cpu.sample();
        let analysed = handle.status().hep.map_or(0, |h| h.packets_analysed);
        if analysed != last.0 {
            last = (analysed, Instant::now());
            done_at = last.1;
        }
        if analysed >= sent.packets || last.1.elapsed() > QUIET {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall_s = (done_at - started).as_secs_f64();
    let status = handle.status();
    handle.stop();
    // Joined on another thread while this one keeps reading the threads' CPU until they end.
    let joiner = std::thread::spawn(move || handle.join());
    while !joiner.is_finished() {
        cpu.sample();
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = joiner
        .join()
        .map_err(|_| anyhow::anyhow!("the sensor panicked"))?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // The writer's backend has ended with the sensor; its CPU joins the postmaster's once
    // the postmaster has reaped it.
    std::thread::sleep(BACKEND_REAPED);
    let postgres_cpu_s = db.cpu_s() - pg0;
    let hep = report.hep.context("the HEP listener's counters")?;
    let snmp = match (snmp0, crate::hep_load::snmp_udp_rcvbuf_errors()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let cpu_s_by_thread = cpu.by_thread();
    let cpu_s: f64 = cpu_s_by_thread.iter().map(|(_, c)| c).sum();
    let analysed = status.hep.map_or(0, |h| h.packets_analysed);
    let mut client = postgres::Client::connect(&db.tandem, postgres::NoTls)?;
    let cdr_rows: i64 = client
        .query_one("SELECT count(*) FROM cdr WHERE sensor = $1", &[&sensor_id])?
        .get(0);
    let cdr = report.cdr.unwrap_or_default();
    Ok((
        TandemRun {
            sent,
            packets: analysed,
            wall_s,
            cpu_s,
            cpu_s_by_thread,
            packets_per_s: analysed as f64 / wall_s.max(1e-9),
            packets_per_s_per_core: analysed as f64 / cpu_s.max(1e-9),
            cpu_us_per_packet: cpu_s * 1e6 / analysed.max(1) as f64,
            loss_pct: loss_pct(sent.packets, analysed),
            socket_drops: hep.socket_drops,
            buffer_overruns: hep.buffer_overruns,
            buffer_bytes_peak: hep.buffer_bytes_peak,
            buffer_bytes_max: hep.buffer_bytes_max,
            snmp_rcvbuf_errors: snmp,
            calls: report.totals.calls,
            cdrs_written: cdr.written_records,
            cdr_rows: cdr_rows as u64,
            cdr_store_errors: cdr.store_errors,
            postgres_cpu_s,
        },
        hep.socket_buffer_bytes,
    ))
}

fn loss_pct(sent: u64, taken: u64) -> f64 {
    100.0 * sent.saturating_sub(taken) as f64 / sent.max(1) as f64
}

/// A port free on loopback now (UDP or TCP), for the peer's configuration.
fn free_port(udp: bool) -> anyhow::Result<u16> {
    Ok(if udp {
        UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port()
    } else {
        TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()
    })
}

/// heplify-server, running: its process, addresses and its database.
struct Heplify {
    child: Child,
    pid: u32,
    dir: tempfile::TempDir,
    udp: SocketAddr,
    tcp: SocketAddr,
    prom: SocketAddr,
    data: String,
    version: String,
    config: String,
    idle_cpu_pct: f64,
}

impl Heplify {
    /// Creates its databases, writes its configuration and starts it; returns once it has
    /// created its tables and connected for its rows.
    fn start(bin: &Path, pg: &pg_scratch::PgServer, parent: &Path) -> anyhow::Result<Heplify> {
        let version = Command::new(bin)
            .arg("-version")
            .output()
            .with_context(|| format!("running {} -version", bin.display()))?;
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("VERSION: "))
            .map(|v| v.trim().to_string())
            .with_context(|| format!("{} -version did not say its version", bin.display()))?;
        let mut admin = postgres::Client::connect(&pg.conninfo(), postgres::NoTls)?;
        // One statement each: several in one string run in one transaction, which CREATE
        // DATABASE refuses.
        admin.batch_execute("CREATE DATABASE homer_data")?;
        admin.batch_execute("CREATE DATABASE homer_config")?;
        let dir = tempfile::Builder::new()
            .prefix("heplify-server-")
            .tempdir_in(parent)?;
        let udp: SocketAddr = format!("127.0.0.1:{}", free_port(true)?).parse()?;
        let tcp: SocketAddr = format!("127.0.0.1:{}", free_port(false)?).parse()?;
        let prom: SocketAddr = format!("127.0.0.1:{}", free_port(false)?).parse()?;
        // Its defaults (config/config.go) but for the addresses, PostgreSQL with the homer7
        // schema, and its log on stderr for the error a failure shows.
        let config = format!(
            "HEPAddr = \"{udp}\"\n\
             HEPTCPAddr = \"{tcp}\"\n\
             HEPTLSAddr = \"\"\n\
             HEPWSAddr = \"\"\n\
             PromAddr = \"{prom}\"\n\
             DBShema = \"homer7\"\n\
             DBDriver = \"postgres\"\n\
             DBAddr = \"127.0.0.1:{}\"\n\
             DBUser = \"tandem\"\n\
             DBPass = \"\"\n\
             DBDataTable = \"homer_data\"\n\
             DBConfTable = \"homer_config\"\n\
             DBBulk = 400\n\
             DBTimer = {PEER_DB_TIMER_S}\n\
             DBBuffer = 400000\n\
             DBWorker = 8\n\
             DBRotate = true\n\
             DBDropDays = 14\n\
             LogLvl = \"info\"\n\
             LogStd = true\n",
            pg.port
        );
        let config_path = dir.path().join("heplify-server.toml");
        std::fs::write(&config_path, &config)?;
        let log = std::fs::File::create(dir.path().join("stderr.log"))?;
        let child = Command::new(bin)
            .arg("-config")
            .arg(&config_path)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut peer = Heplify {
            pid: child.id(),
            child,
            dir,
            udp,
            tcp,
            prom,
            data: pg
                .conninfo()
                .replace("dbname=postgres", "dbname=homer_data"),
            version,
            config,
            idle_cpu_pct: 0.0,
        };
        let started = Instant::now();
        loop {
            peer.check_alive()?;
            let log =
                std::fs::read_to_string(peer.dir.path().join("stderr.log")).unwrap_or_default();
            if log.contains("postgres connection established") && peer.counted().is_ok() {
                break;
            }
            if started.elapsed() > PEER_READY_TIMEOUT {
                bail!(
                    "heplify-server did not connect to PostgreSQL in {} s; its log ends:\n{}",
                    PEER_READY_TIMEOUT.as_secs(),
                    peer.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its CPU at rest, for the reader of its figures: a run also counts the seconds spent
        // waiting for its last rows.
        let (cpu0, t0) = (peer.cpu_s(), Instant::now());
        std::thread::sleep(PEER_IDLE_SAMPLE);
        peer.idle_cpu_pct = 100.0 * (peer.cpu_s() - cpu0) / t0.elapsed().as_secs_f64();
        Ok(peer)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(PEER_LOG_TAIL_LINES)..].join("\n")
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "heplify-server exited ({status}); its log ends:\n{}",
                self.log_tail()
            );
        }
        Ok(())
    }

    /// `heplify_packets_total`, every label, from its Prometheus endpoint.
    fn counted(&self) -> anyhow::Result<u64> {
        let mut s = TcpStream::connect_timeout(&self.prom, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", self.prom)?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        anyhow::ensure!(
            body.starts_with("HTTP/1.") && body.contains(" 200 "),
            "heplify-server's metrics: {}",
            body.lines().next().unwrap_or("no answer")
        );
        let mut total = 0.0;
        for line in body.lines() {
            if line.starts_with("heplify_packets_total{")
                && let Some(v) = line.rsplit(' ').next()
            {
                total += v.parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(total as u64)
    }

    /// SIP rows it stored (`hep_proto_1_*`, every partition).
    fn sip_rows(&self, client: &mut postgres::Client) -> anyhow::Result<u64> {
        let n: i64 = client
            .query_one(
                "SELECT (SELECT count(*) FROM hep_proto_1_call) \
                 + (SELECT count(*) FROM hep_proto_1_registration) \
                 + (SELECT count(*) FROM hep_proto_1_default)",
                &[],
            )?
            .get(0);
        Ok(n as u64)
    }

    fn cpu_s(&self) -> f64 {
        procstat::process_cpu_seconds(self.pid).unwrap_or(0.0)
    }

    /// One run: `load` at `rate_pps` (0: as fast as the sender goes), until it has counted
    /// everything sent (or nothing more for [`QUIET`]) and stored the SIP rows it will store.
    fn ingest(
        &mut self,
        load: &HepLoad,
        transport: Transport,
        rate_pps: u64,
        sip_sent: u64,
        db: &Db,
    ) -> anyhow::Result<PeerRun> {
        self.check_alive()?;
        let mut client = postgres::Client::connect(&self.data, postgres::NoTls)?;
        let counted0 = self.counted()?;
        let rows0 = self.sip_rows(&mut client)?;
        let drops0 = udp_socket_drops(self.udp.port()).unwrap_or(0);
        let snmp0 = crate::hep_load::snmp_udp_rcvbuf_errors();
        let pg0 = db.cpu_s();
        let cpu0 = self.cpu_s();
        let to = match transport {
            Transport::Udp => self.udp,
            Transport::Tcp => self.tcp,
        };
        let started = Instant::now();
        let sent = send_load(load, to, transport, rate_pps)?;
        // Scraped every PEER_SCRAPE: each scrape is work for it too, and its wall time is
        // known to that much.
        let mut last = (u64::MAX, Instant::now());
        let mut done_at = last.1;
        loop {
            let c = self.counted()?.saturating_sub(counted0);
            if c != last.0 {
                last = (c, Instant::now());
                done_at = last.1;
            }
            if c >= sent.packets || last.1.elapsed() > QUIET {
                break;
            }
            self.check_alive()?;
            std::thread::sleep(PEER_SCRAPE);
        }
        let packets = last.0;
        let wall_s = (done_at - started).as_secs_f64();
        // Its rows: a batch is stored when full, the rest every DBTimer seconds.
        let mut rows = (u64::MAX, Instant::now());
        loop {
            let r = self.sip_rows(&mut client)?.saturating_sub(rows0);
            if r != rows.0 {
                rows = (r, Instant::now());
            }
            if r >= sip_sent || rows.1.elapsed() > Duration::from_secs(PEER_DB_TIMER_S + 1) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let cpu_s = self.cpu_s() - cpu0;
        let postgres_cpu_s = db.cpu_s() - pg0;
        let drops = udp_socket_drops(self.udp.port()).unwrap_or(0);
        let snmp = match (snmp0, crate::hep_load::snmp_udp_rcvbuf_errors()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        Ok(PeerRun {
            sent,
            packets,
            socket_drops: drops.saturating_sub(drops0),
            snmp_rcvbuf_errors: snmp,
            wall_s,
            cpu_s,
            packets_per_s: packets as f64 / wall_s.max(1e-9),
            packets_per_s_per_core: packets as f64 / cpu_s.max(1e-9),
            cpu_us_per_packet: cpu_s * 1e6 / packets.max(1) as f64,
            loss_pct: loss_pct(sent.packets, packets),
            sip_sent,
            sip_rows: rows.0,
            postgres_cpu_s,
        })
    }
}

impl Drop for Heplify {
    fn drop(&mut self) {
        // SIGTERM first (it closes its listeners and channels), then SIGKILL.
        // SAFETY: kill on the pid of a child this value started and has not reaped.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's drops at the IPv4 UDP socket bound to `port` (/proc/net/udp, last column).
fn udp_socket_drops(port: u16) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/udp").ok()?;
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local = fields.get(1)?;
        let p = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        (p == port).then(|| fields.last()?.parse().ok())?
    })
}

/// The receive buffer of the UDP socket bound to `port`, as `ss` reports it (`rb`).
fn ss_receive_buffer(port: u16) -> Option<u64> {
    let out = Command::new("ss")
        .args(["-uamnH", &format!("sport = :{port}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find(",rb")? + 3;
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Prints the report's tables on stdout.
pub fn print_table(r: &HepPartReport) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let _ = write_table(r, &mut out);
}

fn write_table(r: &HepPartReport, out: &mut dyn Write) -> std::io::Result<()> {
    let l = &r.load;
    writeln!(
        out,
        "HEP ingest: {} concurrent G.711 calls of {} s = {} HEP packets ({} SIP, {} RTP), \
         stored into PostgreSQL {} (fsync on); medians of {} runs",
        l.calls, l.duration_s, l.packets, l.sip_packets, l.rtp_packets, r.postgres, r.runs
    )?;
    let peer_name = r
        .peer
        .version
        .clone()
        .unwrap_or_else(|| "heplify-server".into());
    let opt = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".into(),
    };
    for t in &r.transports {
        writeln!(
            out,
            "\n{} as fast as the sender goes",
            format!("{:?}", t.transport).to_uppercase()
        )?;
        let mut table = Table::new([
            "figure",
            "tandem",
            "bare receiver",
            peer_name.as_str(),
            "tandem / peer",
        ]);
        let p = t.peer.as_ref();
        table.row([
            "packets/s per core (CPU)".to_string(),
            format!("{:.0}", t.tandem.packets_per_s_per_core),
            format!("{:.0}", t.bound_packets_per_s_per_core),
            opt(p.map(|p| p.packets_per_s_per_core), 0),
            opt(t.per_core_ratio, 1),
        ]);
        table.row([
            "packets/s (wall)".to_string(),
            format!("{:.0}", t.tandem.packets_per_s),
            format!("{:.0}", t.bound_packets_per_s),
            opt(p.map(|p| p.packets_per_s), 0),
            opt(t.packets_per_s_ratio, 1),
        ]);
        table.row([
            "CPU µs per packet".to_string(),
            format!("{:.2}", t.tandem.cpu_us_per_packet),
            "-".into(),
            opt(p.map(|p| p.cpu_us_per_packet), 2),
            opt(t.cpu_per_packet_ratio, 3),
        ]);
        table.row([
            "loss %".to_string(),
            format!("{:.2}", t.tandem.loss_pct),
            "-".into(),
            opt(p.map(|p| p.loss_pct), 2),
            "-".into(),
        ]);
        let med = |v: Vec<f64>| (!v.is_empty()).then(|| median(&v));
        table.row([
            "socket drops (kernel)".to_string(),
            format!(
                "{:.0}",
                median(
                    &t.tandem_runs
                        .iter()
                        .map(|r| r.socket_drops as f64)
                        .collect::<Vec<_>>()
                )
            ),
            "-".into(),
            opt(
                med(t.peer_runs.iter().map(|r| r.socket_drops as f64).collect()),
                0,
            ),
            "-".into(),
        ]);
        table.row([
            "PostgreSQL CPU µs per packet".to_string(),
            format!("{:.3}", t.tandem.postgres_cpu_us_per_packet),
            "-".into(),
            opt(p.map(|p| p.postgres_cpu_us_per_packet), 3),
            "-".into(),
        ]);
        let last = t.tandem_runs.last();
        table.row([
            "stored (last run)".to_string(),
            last.map_or("-".into(), |r| {
                format!("{} CDRs of {} calls", r.cdr_rows, r.calls)
            }),
            "-".into(),
            t.peer_runs.last().map_or("-".into(), |r| {
                format!("{} SIP rows of {} sent", r.sip_rows, r.sip_sent)
            }),
            "-".into(),
        ]);
        table.write(out)?;
    }
    if let Some(ladder) = &r.ladder {
        writeln!(
            out,
            "\nUDP at fixed offered rates ({} s each): loss and CPU per packet",
            ladder.step_s
        )?;
        let mut table = Table::new([
            "offered pkt/s",
            "sent pkt/s",
            "tandem loss %",
            "peer loss %",
            "tandem CPU µs/pkt",
            "peer CPU µs/pkt",
        ]);
        for s in &ladder.steps {
            table.row([
                s.offered_pps
                    .map_or("max (unpaced)".to_string(), |o| o.to_string()),
                format!("{:.0}", s.sent_pps),
                format!("{:.2}", s.tandem.loss_pct),
                opt(s.peer.as_ref().map(|p| p.loss_pct), 2),
                format!("{:.2}", s.tandem.cpu_us_per_packet),
                opt(s.peer.as_ref().map(|p| p.cpu_us_per_packet), 2),
            ]);
        }
        table.write(out)?;
        writeln!(
            out,
            "highest rate under {LOSS_GOAL_PCT}% loss: tandem {}{}, peer {}",
            opt(ladder.tandem_max_pps, 0),
            if ladder.tandem_bounded_by_sender {
                " (the sender's limit: a lower bound)"
            } else {
                ""
            },
            opt(ladder.peer_max_pps, 0)
        )?;
    }
    let b = &r.socket_buffer;
    writeln!(
        out,
        "\nSocket buffer: Tandem asks {} bytes (SO_RCVBUFFORCE, else SO_RCVBUF), granted {}{}; \
         net.core.rmem_default {}, rmem_max {}; {} sets none: {} bytes. Tandem's frame buffer \
         after the socket: {} bytes, peak {}. Drops counted: {}.",
        b.tandem_asked_bytes,
        b.tandem_granted_bytes,
        if b.tandem_forced {
            " (past rmem_max)"
        } else {
            ""
        },
        b.rmem_default.map_or("-".into(), |v| v.to_string()),
        b.rmem_max.map_or("-".into(), |v| v.to_string()),
        peer_name,
        b.peer_buffer_bytes.map_or("-".into(), |v| v.to_string()),
        b.tandem_frame_buffer_bytes,
        b.tandem_frame_buffer_peak_bytes,
        b.tandem_counts_drops
    )?;
    if let (Some(v), Some(idle)) = (&r.peer.version, r.peer.idle_cpu_pct) {
        writeln!(
            out,
            "\nPeer: {v}, {} at rest: {idle:.1}% of a core (in its runs' CPU too: a run waits up to \
             {} s for its last rows).",
            r.peer
                .binary
                .as_ref()
                .map_or("-".into(), |b| b.display().to_string()),
            PEER_DB_TIMER_S + 1
        )?;
    }
    if let Some(why) = &r.peer.skipped {
        writeln!(out, "\nPeer skipped: {why}")?;
    }
    writeln!(out, "\nGoals")?;
    let mut table = Table::new(["goal", "target", "measured", "met", "note"]);
    for g in &r.goals {
        table.row([
            g.goal.clone(),
            g.target.clone(),
            opt(
                g.measured,
                if g.measured.is_some_and(|m| m >= 100.0) {
                    0
                } else {
                    2
                },
            ),
            match g.met {
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
                None => "-".into(),
            },
            g.note.clone(),
        ]);
    }
    table.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_read_for_the_bound_port() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(udp_socket_drops(s.local_addr().unwrap().port()), Some(0));
    }

    #[test]
    fn the_load_is_stamped_now_and_its_sip_counted() {
        let dir = tempfile::tempdir().unwrap();
        let load = load_now(3, 1, dir.path()).unwrap();
        let sip = load.sip_packets;
        assert!(sip >= 3 * 5, "{sip} SIP packets");
        assert!(load.packets.len() as u64 > sip);
        let (at, len) = load.packets[0];
        let p = hep::decode(&load.bytes[at..at + len], &hep::DecodeLimits::default()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32;
        assert!(p.ts_sec.abs_diff(now) < 60, "{} against {now}", p.ts_sec);
    }
}
