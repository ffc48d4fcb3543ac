//! `tandem capture`: the sensor (`sensor` crate) run from the command line. `--read FILE...`
//! analyses capture files, `--hep-listen ADDR` HEP v3 from Kamailio, OpenSIPS, FreeSWITCH,
//! Asterisk's res_hep or heplify, `--interface IF` a live interface. This file holds the options,
//! turns them into a [`SensorConfig`], turns SIGTERM and ctrl-c into a stop, and prints.

use anyhow::Context;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sensor::config::{DEFAULT_FILTER, DEFAULT_JOURNAL_BYTES_MAX, DEFAULT_QUEUE_RECORDS_MAX};
use sensor::table::{CallTable, plural};
use sensor::{
    ArchiveSettings, CdrConfig, LiveConfig, Report, Sensor, SensorConfig, SensorHandle, Source,
    StatusConfig, StoreMode,
};

mod hep_args;

/// Inputs at least this large get a progress bar (when stderr is a terminal).
const PROGRESS_MIN_BYTES: u64 = 16 * 1024 * 1024;

/// One source: files, HEP or an interface. Without one, clap's message names all three.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["read", "hep_listen", "interface"])))]
pub struct Args {
    /// Capture files (pcap or pcapng, optionally gzip-compressed), read in the order given.
    #[arg(long = "read", short = 'r', num_args = 1..)]
    pub read: Vec<PathBuf>,
    /// Receive HEP v3 over UDP and TCP on this address (the HEP port is 9060). HEP is not
    /// encrypted: keep it on loopback or a trusted network, and give --hep-auth-key to refuse
    /// senders without the key. Runs until SIGTERM or ctrl-c; finished calls are printed and
    /// stored every second.
    #[arg(long, value_name = "ADDR")]
    pub hep_listen: Option<std::net::SocketAddr>,
    /// With --hep-listen: stop after this many HEP packets (for tests and trials).
    #[arg(long, value_name = "N", requires = "hep_listen")]
    pub hep_max_packets: Option<u64>,
    /// One JSON object per line on stdout: each call (`"kind":"call"`), each RTP stream
    /// (`"kind":"rtp_stream"`) and each REGISTER chain (`"kind":"registration"`).
    #[arg(long)]
    pub json: bool,
    /// Alert rules: a TOML file of `[[alerts.rule]]` tables, as in tandem.toml
    /// (alerts.example.toml is a start). Decided as calls start and end, in the capture's own
    /// time; each alert that fires or resolves is printed (with --json, a `"kind":"alert"`
    /// line).
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// SQLite file the CDRs are written to.
    #[arg(
        long,
        visible_alias = "db",
        default_value = "tandem-data/cdr.sqlite3",
        env = "TANDEM_CDR_DB"
    )]
    pub cdr_db: PathBuf,
    /// Write CDRs to PostgreSQL instead (libpq-style `host=... port=... user=... dbname=...`).
    #[arg(long, env = "TANDEM_CDR_POSTGRES")]
    pub cdr_postgres: Option<String>,
    /// Do not write CDRs.
    #[arg(long)]
    pub no_store: bool,
    /// Let the members of GROUP (a name or a gid; Asterisk's, say) read the CDR database and
    /// the archive: files 0640 and new directories 02750 of that group, where they are
    /// otherwise their owner's alone (0600, 0700). Tandem must belong to GROUP or run as root.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Call shards (threads) behind the decoding thread; 1 runs everything on one thread.
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Most calls tracked at once.
    #[arg(long, default_value_t = sensor::config::MonitorConfig::default().max_calls)]
    pub max_calls: usize,
    #[command(flatten)]
    pub cdr_writer: CdrWriterArgs,
    #[command(flatten)]
    pub status: StatusArgs,
    #[command(flatten)]
    pub archive: ArchiveArgs,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub hep: hep_args::HepArgs,
    #[command(flatten)]
    pub collector: CollectorArgs,
}

/// A sensor that delivers its CDRs to a collector (`tandem serve --collector-listen`).
#[derive(clap::Args, Debug, Clone)]
pub struct CollectorArgs {
    /// Deliver the CDRs to this collector instead of a database here: over TLS (plain TCP
    /// only to a loopback address), acknowledged after the collector's commit; while it cannot
    /// be reached they wait in the journal (`cdr-collector.journal` beside --cdr-db) and are
    /// delivered first, in order, once it is back. The collector also fetches this sensor's
    /// pcaps (from --archive) over the same connection.
    #[arg(long, value_name = "HOST:PORT", requires = "sensor_id", conflicts_with_all = ["cdr_postgres", "no_store"])]
    pub collector: Option<String>,
    /// This sensor's name (`tandem sensor add NAME` on the collector); the first part of every
    /// CDR's uid and its `sensor` column. Default without a collector: `local`.
    #[arg(long, value_name = "NAME")]
    pub sensor_id: Option<String>,
    /// A file whose first line is the token `tandem sensor add` printed.
    #[arg(long, value_name = "FILE", requires = "collector")]
    pub sensor_token_file: Option<PathBuf>,
    /// The CA certificate(s) (PEM) the collector's certificate must chain to; needed unless the
    /// collector is on loopback.
    #[arg(long, value_name = "FILE", requires = "collector")]
    pub collector_ca: Option<PathBuf>,
    /// The name the collector's certificate must carry (default: HOST of --collector).
    #[arg(long, value_name = "NAME", requires = "collector_ca")]
    pub collector_server_name: Option<String>,
    /// A client certificate (PEM) for mutual TLS; its common name is the sensor's name, and no
    /// token is needed.
    #[arg(long, value_name = "FILE", requires_all = ["collector_ca", "sensor_key"])]
    pub sensor_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "sensor_cert")]
    pub sensor_key: Option<PathBuf>,
}

impl CollectorArgs {
    fn link(&self) -> Option<sensor::uplink::CollectorLink> {
        let collector = self.collector.as_ref()?;
        let mut link = sensor::uplink::CollectorLink::new(
            collector,
            self.sensor_id.as_deref().unwrap_or_default(),
        );
        link.token_file = self.sensor_token_file.clone();
        link.ca_file = self.collector_ca.clone();
        link.server_name = self.collector_server_name.clone();
        link.client_cert = self.sensor_cert.clone();
        link.client_key = self.sensor_key.clone();
        Some(link)
    }
}

#[derive(clap::Args, Debug)]
pub struct CdrWriterArgs {
    /// Journal of CDRs the database cannot take yet (down, slow, read-only): replayed in order
    /// when it is back, or by the next run. Default: beside --cdr-db, `cdr.journal`
    /// (`cdr-postgres.journal` with --cdr-postgres).
    #[arg(long, value_name = "FILE")]
    pub cdr_journal: Option<PathBuf>,
    /// Size limit of the journal (4 GiB: about 2.7 million calls); CDRs that do not fit are
    /// dropped, counted and logged.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_JOURNAL_BYTES_MAX)]
    pub cdr_journal_bytes_max: u64,
    /// CDRs queued for the database at most; past it the capture thread journals them itself.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_QUEUE_RECORDS_MAX)]
    pub cdr_queue_records_max: usize,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Log a status line (calls, packets/s, CDR queue, CPU per thread, memory) every this many
    /// seconds while capturing; 0 turns it off. With --read it appears only when the run lasts
    /// longer than that.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub status_interval_s: u64,
    /// Serve the same figures as Prometheus metrics at http://ADDR/metrics while capturing.
    /// Off unless given; keep it on loopback (127.0.0.1:PORT): it has no authentication.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// What the archive keeps, as `--archive-store` spells it.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreArg {
    /// SIP only.
    Sip,
    /// SIP, and RTP cut after its RTP header (sequence, timing, loss; no audio).
    Headers,
    /// SIP and whole RTP packets (audio can be replayed).
    Full,
}

impl From<StoreArg> for StoreMode {
    fn from(a: StoreArg) -> StoreMode {
        match a {
            StoreArg::Sip => StoreMode::SipOnly,
            StoreArg::Headers => StoreMode::SipAndRtpHeaders,
            StoreArg::Full => StoreMode::FullRtp,
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ArchiveArgs {
    /// Store each call's packets (SIP zstd-compressed, RTP and RTCP) in one tar file per minute
    /// of call start under DIR (DIR/YYYY-MM-DD/HH/MM/sip.tar and rtp.tar, UTC), and record in
    /// each CDR where they are (`tandem cdr pcap CALL-ID` reads them back).
    #[arg(long, value_name = "DIR")]
    pub archive: Option<PathBuf>,
    /// What to keep of each call.
    #[arg(long, value_enum, default_value = "headers", requires = "archive")]
    pub archive_store: StoreArg,
    /// Delete minute directories that ended more than this many seconds before the newest
    /// packet.
    #[arg(long, value_name = "SECONDS", requires = "archive")]
    pub archive_max_age_sec: Option<u64>,
    /// Delete the oldest minute directories while the archive holds more than this many bytes.
    #[arg(long, value_name = "BYTES", requires = "archive")]
    pub archive_max_total_bytes: Option<u64>,
    /// Most MiB of one call's SIP, and of its RTP, held until the call ends and archived; later
    /// packets are dropped and counted. The default keeps an hour and a half of a G.711 call
    /// with --archive-store full, five hours with headers.
    #[arg(long, value_name = "MIB", default_value_t = sensor::ARCHIVE_CALL_MAX_BYTES >> 20, requires = "archive")]
    pub archive_call_max_mib: usize,
}

#[derive(clap::Args, Debug, Clone)]
pub struct LiveArgs {
    /// Capture live from this network interface (AF_PACKET with a TPACKET_V3 ring; needs root
    /// or CAP_NET_RAW). Runs until SIGTERM or ctrl-c (or --max-packets / --duration-s);
    /// finished calls are printed and stored every second.
    #[arg(long, value_name = "IF")]
    pub interface: Option<String>,
    /// Kernel ring per capture thread, in MiB (256 KiB blocks handed over every 10 ms at least).
    #[arg(long, value_name = "MIB", default_value_t = 64, requires = "interface")]
    pub ring_mib: usize,
    /// pcap-filter expression (a documented subset: udp, tcp, ip, ip6, [src|dst] port,
    /// portrange, host, net, proto, vlan, and/or/not, parentheses). "" captures everything.
    #[arg(long, value_name = "EXPR", default_value = DEFAULT_FILTER, requires = "interface")]
    pub filter: String,
    /// Also receive frames addressed to other hosts (a mirror or SPAN port).
    #[arg(long, requires = "interface")]
    pub promiscuous: bool,
    /// Capture threads sharing the interface by flow hash (PACKET_FANOUT); each has its ring.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "interface")]
    pub capture_threads: usize,
    /// The bounded buffer between the capture threads and the analysis, in MiB of frames.
    #[arg(long, value_name = "MIB", default_value_t = 64, requires = "interface")]
    pub buffer_mib: usize,
    /// Stop after analysing this many frames (for tests and trials).
    #[arg(long, value_name = "N", requires = "interface")]
    pub max_packets: Option<u64>,
    /// Stop after this many seconds (for tests and trials).
    #[arg(long, value_name = "SECONDS", requires = "interface")]
    pub duration_s: Option<u64>,
}

impl Args {
    /// The sensor these options describe; fails on a `--group` this process cannot give.
    pub fn to_config(&self) -> anyhow::Result<SensorConfig> {
        let source = match (&self.live.interface, self.hep_listen) {
            (Some(interface), _) => {
                let l = &self.live;
                Source::Interface(LiveConfig {
                    interface: interface.clone(),
                    ring_mib: l.ring_mib,
                    filter: l.filter.clone(),
                    promiscuous: l.promiscuous,
                    capture_threads: l.capture_threads,
                    buffer_mib: l.buffer_mib,
                    max_packets: l.max_packets,
                    duration_s: l.duration_s,
                })
            }
            (None, Some(listen)) => Source::Hep {
                listen,
                max_packets: self.hep_max_packets,
            },
            (None, None) => Source::Files(self.read.clone()),
        };
        let mut config = SensorConfig::new(source);
        config.monitor.max_calls = self.max_calls;
        config.shards = self.shards;
        config.cdr = (!self.no_store).then(|| CdrConfig {
            db: self.cdr_db.clone(),
            postgres: self.cdr_postgres.clone(),
            journal: self.cdr_writer.cdr_journal.clone(),
            journal_bytes_max: self.cdr_writer.cdr_journal_bytes_max,
            queue_records_max: self.cdr_writer.cdr_queue_records_max,
            sensor_id: self
                .collector
                .sensor_id
                .clone()
                .unwrap_or_else(|| ::cdr::writer::DEFAULT_SENSOR.to_string()),
            collector: self.collector.link(),
            groups: Default::default(),
        });
        config.archive = self.archive.archive.as_ref().map(|dir| ArchiveSettings {
            dir: dir.clone(),
            store: self.archive.archive_store.into(),
            max_age_sec: self.archive.archive_max_age_sec,
            max_total_bytes: self.archive.archive_max_total_bytes,
            max_call_bytes: self.archive.archive_call_max_mib.saturating_mul(1 << 20),
        });
        config.status = StatusConfig {
            interval_s: self.status.status_interval_s,
            metrics_listen: self.status.metrics_listen,
        };
        self.hep.apply(&mut config);
        if let Some(group) = &self.group {
            config.files = filemode::Access::group(group)
                .with_context(|| format!("--group {group}: choose a group this user is in"))?;
        }
        Ok(config)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args.to_config()?;
    let from_files = !config.source.is_live();
    // JSON lines as records close, or, for a person, tables printed at the end.
    let (table, observer): (_, Box<dyn sensor::RecordObserver>) = if args.json {
        (
            None,
            Box::new(sensor::json::JsonLines::new(std::io::stdout())),
        )
    } else {
        let (table, observer) = CallTable::new(sensor::table::DEFAULT_ROWS_MAX);
        (Some(table), Box::new(observer))
    };
    let mut notifier = None;
    let mut dispatcher = None;
    let alerts = match &args.rules {
        Some(path) => {
            let (cfg, set) = crate::alerts::load_rules(path)?;
            // Actions in the rules file are run too (a live capture that mails its alerts).
            notifier = crate::alerts::notifier(&cfg)?.map(|n| Arc::new(std::sync::Mutex::new(n)));
            let sensor = args
                .collector
                .sensor_id
                .clone()
                .unwrap_or_else(|| cdr::writer::DEFAULT_SENSOR.to_string());
            if !args.no_store && args.collector.collector.is_none() {
                // Kept beside the CDRs, where the console and `tandem alerts list` read them.
                let d = crate::alerts::Dispatch {
                    db: args.cdr_db.clone(),
                    postgres: args.cdr_postgres.clone(),
                    node: sensor.clone(),
                    deliver: notifier.clone().map(crate::alerts::deliver_to),
                    log: false,
                };
                let started = crate::alerts::ServeAlerts::start(&cfg, set, d)?;
                let tap = started.sensor(&sensor);
                dispatcher = Some(started);
                Some(tap)
            } else {
                Some(sensor::SensorAlerts {
                    engine: crate::alerts::engine(&cfg, set)?,
                    sensor,
                    output: notifier.clone().map(|n| {
                        Box::new(crate::alerts::Notify(n)) as Box<dyn sensor::AlertOutput>
                    }),
                })
            }
        }
        None => None,
    };
    let handle = Sensor::start_with_alerts(config, Some(observer), alerts)?;
    if let Some(addr) = handle.hep_addr() {
        eprintln!("{}", hep_args::listening(addr));
    }
    if let Some(l) = handle.live() {
        eprintln!(
            "capturing on {}: {} thread(s), ring {} MiB each, buffer {} MiB, filter {:?}",
            l.interface, l.capture_threads, l.ring_mib, l.buffer_mib, l.filter
        );
    }
    // Files end by themselves; a live or HEP source runs until SIGTERM or ctrl-c, and then its
    // calls in progress are reported and stored.
    let signals = (!from_files)
        .then(|| crate::signals::stop_on_signals(handle.stop_signal()))
        .transpose()?;
    let report = wait(handle);
    if let Some(s) = signals {
        s.close();
    }
    // The alerts are kept, and what the actions have in hand goes out, before the process
    // ends (the actions at most 10 s).
    if let Some(d) = dispatcher {
        d.finish();
    }
    if let Some(n) = notifier.and_then(|n| Arc::try_unwrap(n).ok()) {
        let n = n.into_inner().unwrap_or_else(|p| p.into_inner());
        n.close(std::time::Instant::now() + Duration::from_secs(10));
    }
    let report = report?;
    if report.hep_invalid > 0 {
        eprintln!(
            "{} datagrams were not HEP v3 and were skipped",
            report.hep_invalid
        );
    }
    if let Some((interface, stats)) = &report.live {
        eprintln!("live capture on {interface}: {stats}");
    }
    let forwarded = hep_args::report(&report, from_files);
    if let Some(table) = table {
        let text = table.lock().unwrap_or_else(|p| p.into_inner()).render();
        if !text.is_empty() {
            // A reader gone away (`| head`) is not an error worth a panic.
            let _ = writeln!(std::io::stdout(), "{text}");
        }
    }
    if !args.hep.forward_only() {
        print_summary(&report, args.json)?;
    }
    if let Some(a) = &report.archive_summary {
        eprintln!("{a}");
    }
    // With the summary: on stdout for a person, on stderr beside JSON lines.
    let destination = cdr_destination(&args, &report);
    if args.json {
        eprintln!("{destination}");
    } else {
        let _ = writeln!(std::io::stdout(), "{destination}");
    }
    forwarded?;
    if let Some(e) = report.read_error {
        let calls = report.totals.calls;
        let context = match calls {
            0 => "capture stopped early, before any call was decoded".to_string(),
            _ => format!(
                "capture stopped early; the {} above {} decoded before the error",
                plural(calls, "call"),
                if calls == 1 { "was" } else { "were" }
            ),
        };
        return Err(anyhow::Error::new(e).context(context));
    }
    Ok(())
}

/// Waits for the sensor, with a progress bar for large files when stderr is a terminal.
fn wait(handle: SensorHandle) -> Result<Report, sensor::SensorError> {
    let (_, total) = handle.progress();
    if total < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        return handle.join();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .expect("progress template"),
    );
    while !handle.is_finished() {
        bar.set_position(handle.progress().0);
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
    handle.join()
}

fn print_summary(r: &Report, to_stderr: bool) -> std::io::Result<()> {
    let mut out: Box<dyn Write> = if to_stderr {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let (c, t) = (&r.counters, &r.totals);
    let secs = r.elapsed.as_secs_f64();
    writeln!(
        out,
        "{} in {secs:.3} s ({:.0} packets/s): {} ({} answered), {}, {}, {}, {}, {}, {}",
        plural(r.packets, "packet"),
        r.packets as f64 / secs.max(1e-9),
        plural(t.calls, "call"),
        t.answered,
        plural(t.streams, "RTP stream"),
        plural(t.registrations, "registration"),
        plural(r.sip_messages, "SIP message"),
        plural(c.rtp_packets, "RTP packet"),
        plural(c.rtcp_packets, "RTCP packet"),
        plural(c.malformed, "malformed packet"),
    )?;
    if let Some(line) = not_followed(r) {
        writeln!(out, "{line}")?;
    }
    if c.calls_dropped + c.streams_dropped + c.registrations_dropped > 0 {
        writeln!(
            out,
            "dropped at limits: {} calls, {} streams, {} registrations",
            c.calls_dropped, c.streams_dropped, c.registrations_dropped
        )?;
    }
    Ok(())
}

/// What the decoder saw and did not follow, when there is any: tunnels it does not open, SIP
/// over SCTP or WebSocket dropped at their bounds.
fn not_followed(r: &Report) -> Option<String> {
    let c = &r.counters;
    let (d, s, w) = (&c.decode, &c.sip_sctp, &c.sip_tcp.websocket);
    let parts: Vec<String> = [
        (d.gre_version, "GRE packets of version 1 (PPTP) or above"),
        (d.gre_routing, "GRE packets with source routing"),
        (
            d.gre_protocol,
            "GRE packets of a protocol other than IP, Ethernet and ERSPAN",
        ),
        (
            d.erspan_unknown,
            "ERSPAN packets of an unknown version or frame type",
        ),
        (
            s.messages_dropped,
            "SIP-over-SCTP messages dropped at their bounds or with a fragment missing",
        ),
        (s.idata_chunks, "SCTP I-DATA chunks"),
        (s.chunks_malformed, "malformed SCTP chunks"),
        (
            w.messages_too_large,
            "WebSocket messages over the size limit",
        ),
        (w.resyncs, "WebSocket streams that lost their framing"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{what}: {n}"))
    .collect();
    (!parts.is_empty()).then(|| format!("not followed: {}", parts.join("; ")))
}

/// Where the CDRs went, for the last line of a capture.
fn cdr_destination(args: &Args, r: &Report) -> String {
    if args.hep.forward_only() {
        return "CDRs: none (--hep-send forwards only; --hep-send-analyse analyses here too)"
            .into();
    }
    if args.no_store {
        return "CDRs not stored (--no-store)".to_string();
    }
    if let (Some(link), Some(s)) = (&r.uplink, &r.cdr) {
        let acked = format!(
            "CDRs: {} acknowledged by the collector {}",
            plural(link.acknowledged_records, "record"),
            link.collector
        );
        if s.journal_records == 0 {
            return acked;
        }
        let journal = args
            .cdr_writer
            .cdr_journal
            .clone()
            .unwrap_or_else(|| sensor::collector_journal(&args.cdr_db));
        let why = link.last_error.as_deref().unwrap_or("not acknowledged yet");
        // Said on stderr too: the run ends with CDRs not delivered.
        let line = format!(
            "{acked}; {} waiting in the journal {} ({why}); the next `tandem capture` delivers them first",
            plural(s.journal_records, "record"),
            journal.display()
        );
        if !args.json {
            eprintln!("{line}");
        }
        return line;
    }
    let target = match &args.cdr_postgres {
        Some(_) => "PostgreSQL (--cdr-postgres)".to_string(),
        None => args.cdr_db.display().to_string(),
    };
    match &r.cdr {
        Some(s) if s.journal_records > 0 => format!(
            "CDRs: {} stored in {target}; {} waiting in the journal for the database",
            plural(s.written_records, "record"),
            plural(s.journal_records, "record")
        ),
        Some(s) => format!(
            "CDRs: {} stored in {target}",
            plural(s.written_records, "record")
        ),
        None => format!("CDRs: none stored in {target}"),
    }
}
