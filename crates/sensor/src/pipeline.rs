//! The sensor itself: everything that can fail at start is set up by [`Sensor::start`] on the
//! caller's thread (sinks opened, sockets bound, rings opened), then one `sensor` thread feeds
//! the source's packets to the monitor and hands each batch of closed records to the sinks.
//!
//! ```text
//! source (files | HEP | interface) ──packets──▶ Monitor (+ archive taps) ──closed records──┐
//!                                                                                          ▼
//!        archive (holds a call until its packets are written) → CDR writer → observer (--json)
//! ```
//!
//! Data flows one way; the only thing that flows back is [`SensorHandle::stop`], a flag the
//! source reads.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use monitor::pcap::CaptureReader;
use monitor::{Analysis, Monitor};

use crate::alerts_tap::SensorAlerts;
use crate::archive_tap::CaptureArchive;
use crate::cdr_sink::CdrSink;
use crate::config::{SensorConfig, Source};
use crate::feed::{Feed, RecordSink, StopSignal};
use crate::live::{LiveCapture, LiveOptions, LiveStatsSnapshot};
use crate::status::{CaptureStatus, Sample, StatusBoard};
use crate::{RecordObserver, SensorError};

/// Closed records are handed to the sinks every this many packets of a file.
const FLUSH_EVERY_PACKETS: u64 = 1 << 20;

/// How far a file source has read, for a progress bar.
#[derive(Debug, Default)]
pub struct FileProgress {
    pub bytes_read: AtomicU64,
    pub bytes_total: AtomicU64,
}

/// The source, set up and ready to run.
enum Ready {
    Files(Vec<PathBuf>),
    Hep {
        listener: crate::hep::HepListener,
        max_packets: Option<u64>,
    },
    Live {
        capture: LiveCapture,
        config: crate::config::LiveConfig,
    },
}

/// What a live source was started with, to tell the person who started it.
#[derive(Debug, Clone)]
pub struct LiveDescription {
    pub interface: String,
    pub capture_threads: usize,
    pub ring_mib: u64,
    pub buffer_mib: u64,
    pub filter: String,
}

/// What the records handed to the sinks added up to.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub calls: u64,
    pub answered: u64,
    pub streams: u64,
    pub registrations: u64,
    /// Alerts that fired, repeated or resolved.
    pub alerts: u64,
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

/// What a finished sensor did.
#[derive(Debug)]
pub struct Report {
    /// Packets handed to the monitor.
    pub packets: u64,
    pub elapsed: Duration,
    pub totals: Totals,
    pub counters: monitor::analyzer::Counters,
    pub sip_messages: u64,
    /// A capture file that could not be read to its end; everything before it was reported.
    pub read_error: Option<monitor::pcap::CaptureError>,
    /// HEP datagrams that were not HEP v3 (skipped).
    pub hep_invalid: u64,
    /// The HEP listener's counters at the end (`--hep-listen`).
    pub hep: Option<crate::hep::HepStatsSnapshot>,
    /// What `--hep-send` forwarded and dropped.
    pub hep_send: Option<crate::hep_send::HepSendReport>,
    /// The live capture's counters at the end.
    pub live: Option<(String, LiveStatsSnapshot)>,
    /// The archive's one-line summary.
    pub archive_summary: Option<String>,
    /// Where the CDRs went.
    pub cdr: Option<cdr::CdrWriterStats>,
    /// What the link to the collector did, when CDRs went to one.
    pub uplink: Option<crate::uplink::UplinkSummary>,
}

/// Starts sensors; see [`Sensor::start`].
pub struct Sensor;

/// A running sensor.
pub struct SensorHandle {
    stop: StopSignal,
    board: StatusBoard,
    progress: Arc<FileProgress>,
    hep_addr: Option<std::net::SocketAddr>,
    live: Option<LiveDescription>,
    live_calls: Arc<monitor::LiveCalls>,
    thread: JoinHandle<Result<Report, SensorError>>,
}

impl SensorHandle {
    /// Ends the source; [`SensorHandle::join`] then returns once everything is stored.
    pub fn stop(&self) {
        self.stop.stop();
    }
    /// A signal that stops this sensor, for another thread (a signal handler's).
    pub fn stop_signal(&self) -> StopSignal {
        self.stop.clone()
    }
    /// Adds this sensor's figures (`tandem_capture_*`) to `registry`, read at each scrape.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry
            .sub_registry_with_prefix("tandem_capture")
            .register_collector(Box::new(self.board.clone()));
    }
    /// Every part's figures now (the status line's and the metrics').
    pub fn status(&self) -> Sample {
        self.board.sample()
    }
    /// Bytes of the capture files read so far, and in all.
    pub fn progress(&self) -> (u64, u64) {
        (
            self.progress.bytes_read.load(Ordering::Relaxed),
            self.progress.bytes_total.load(Ordering::Relaxed),
        )
    }
    /// Where HEP is received, when that is the source.
    pub fn hep_addr(&self) -> Option<std::net::SocketAddr> {
        self.hep_addr
    }
    /// The live capture's setup, when that is the source.
    pub fn live(&self) -> Option<&LiveDescription> {
        self.live.as_ref()
    }
    /// The calls in progress, as the monitor last published them (about once a second).
    pub fn live_calls(&self) -> Arc<monitor::LiveCalls> {
        self.live_calls.clone()
    }
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
    /// Waits for the end: the source done (or stopped), every record handed to the sinks,
    /// the archive written, the CDRs stored or journaled.
    pub fn join(self) -> Result<Report, SensorError> {
        self.thread.join().map_err(|_| SensorError::Panicked)?
    }
}

/// What the closed records go to, owned by the sensor's thread.
struct Sinks {
    archive: Option<CaptureArchive>,
    cdr: Option<CdrSink>,
    status: CaptureStatus,
    observer: Option<Box<dyn RecordObserver>>,
    alerts: Option<SensorAlerts>,
    totals: Totals,
}

impl RecordSink for Sinks {
    /// Hands a batch of closed records to the sinks. `finished`: the monitor is done; the
    /// archive writes everything first.
    fn flush(&mut self, part: Analysis, finished: bool) -> Result<(), SensorError> {
        // Calls whose archive location is not known yet are held back for a later flush.
        let part = match self.archive.as_mut() {
            Some(a) => a.release(part, finished),
            None => part,
        };
        self.totals.add(&part);
        // The CDR writer first: an observer that fails (a `--json` reader gone away) ends the
        // sensor, and the records in hand must be stored all the same. The rules see the rows
        // the writer is handed, made once.
        let fired = match (&self.cdr, self.alerts.as_mut()) {
            (Some(c), Some(a)) if !a.idle() => {
                let mut rows = CdrSink::rows(&part, self.archive.as_ref());
                a.name_rows(&mut rows);
                let fired = a.on_rows(&part.started, &rows, part.last_ns);
                c.submit_rows(rows);
                fired
            }
            (cdr, alerts) => {
                if let Some(c) = cdr {
                    c.submit(&part, self.archive.as_ref());
                }
                match alerts {
                    Some(a) => a.on_part(&part, part.last_ns),
                    None => Vec::new(),
                }
            }
        };
        self.totals.alerts += fired.len() as u64;
        if let Some(o) = self.observer.as_mut() {
            o.records(&part).map_err(SensorError::Output)?;
            if !fired.is_empty() {
                o.alerts(&fired).map_err(SensorError::Output)?;
            }
        }
        Ok(())
    }

    fn holding(&self) -> bool {
        self.archive.as_ref().is_some_and(CaptureArchive::holding)
    }
}

impl Sensor {
    /// Sets the sensor up and starts its thread. Every error of the setup (a database that
    /// cannot be created, an address in use, an interface that cannot be captured on) is
    /// returned here; an unreachable CDR database is not one (CDRs wait in the journal).
    /// `observer` sees every batch of closed records before the CDR writer does.
    pub fn start(
        config: SensorConfig,
        observer: Option<Box<dyn RecordObserver>>,
    ) -> Result<SensorHandle, SensorError> {
        Sensor::start_with_alerts(config, observer, None)
    }

    /// [`Sensor::start`], with alert rules decided as records close (`alerts`): call starts
    /// are then handed out by the monitor too.
    pub fn start_with_alerts(
        mut config: SensorConfig,
        observer: Option<Box<dyn RecordObserver>>,
        alerts: Option<SensorAlerts>,
    ) -> Result<SensorHandle, SensorError> {
        config.monitor.report_starts = alerts.is_some();
        // A file that cannot be read at all fails here, before anything is created (a data
        // directory, a journal, an empty database): a failure leaves nothing behind.
        if let Source::Files(paths) = &config.source {
            for path in paths {
                CaptureReader::open(path).map_err(SensorError::Input)?;
            }
        }
        // With worker threads the monitor hands its records out only at its end, which a live
        // source never reaches while it runs: its calls would be stored only when it stops.
        if config.source.is_live() && config.shards > 1 {
            return Err(SensorError::Config(format!(
                "--shards {} works with --read only: a live or HEP capture stores each call as it \
                 ends, which one shard does (with more, no call would be stored before the capture \
                 stops); leave --shards out, and use --capture-threads for more capture threads",
                config.shards
            )));
        }
        // The source next (socket bound, rings opened): a wrong address or interface fails
        // before anything is created too.
        enum Opened<'a> {
            Files(&'a [PathBuf]),
            Hep(crate::hep::HepListener, Option<u64>),
            Live(
                LiveOptions,
                Vec<afpacket::Capture>,
                &'a crate::config::LiveConfig,
            ),
        }
        let opened = match &config.source {
            Source::Files(paths) => Opened::Files(paths),
            Source::Hep {
                listen,
                max_packets,
            } => Opened::Hep(
                crate::hep::HepListener::bind(*listen, &config.hep)?,
                *max_packets,
            ),
            Source::Interface(live) => {
                let opts = LiveOptions::from_config(live)?;
                let captures = opts.open().map_err(|source| SensorError::Live {
                    interface: live.interface.clone(),
                    source,
                })?;
                Opened::Live(opts, captures, live)
            }
        };
        // --hep-send next: its key read, its collector resolved (a TCP one tried).
        let hep_send = crate::hep_send::start(&config)?;
        let live_source = config.source.is_live();
        // Every source feeds this monitor; with an archive its taps archive each call's packets
        // (waiting for the archive only when reading files: live sources never wait).
        let (monitor, archive) = crate::archive_tap::monitor(
            config.monitor.clone(),
            config.shards,
            config.archive.as_ref(),
            &config.files,
            !live_source,
        )?;
        // CDRs are stored on a thread of their own: capture never waits for the database.
        let archive_dir = config.archive.as_ref().map(|a| a.dir.as_path());
        let cdr = config
            .cdr
            .as_ref()
            .map(|c| CdrSink::start(c, archive_dir, &config.files))
            .transpose()?;
        let status = CaptureStatus::start(
            &config.status,
            monitor.live(),
            cdr.as_ref().map(|c| c.watch()),
        )?;
        if let Some(a) = &archive {
            status.board.add(a.gauges());
        }
        let progress = Arc::new(FileProgress::default());
        let (ready, hep_addr, live) = match opened {
            Opened::Hep(listener, max_packets) => {
                let addr = Some(listener.local_addr());
                status.board.add(listener.stats());
                let ready = Ready::Hep {
                    listener,
                    max_packets,
                };
                (ready, addr, None)
            }
            Opened::Live(opts, captures, live) => {
                let capture = LiveCapture::start(captures, opts.buffer_bytes_max);
                status.board.add(capture.stats.clone());
                let description = LiveDescription {
                    interface: live.interface.clone(),
                    capture_threads: opts.capture_threads,
                    ring_mib: (opts.ring.ring_bytes() >> 20) as u64,
                    buffer_mib: opts.buffer_bytes_max >> 20,
                    filter: live.filter.clone(),
                };
                let ready = Ready::Live {
                    capture,
                    config: live.clone(),
                };
                (ready, None, Some(description))
            }
            Opened::Files(paths) => {
                let total = paths
                    .iter()
                    .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
                    .sum();
                progress.bytes_total.store(total, Ordering::Relaxed);
                (Ready::Files(paths.to_vec()), None, None)
            }
        };
        if let Some(f) = &hep_send {
            status.board.add(f.stats());
        }
        let board = status.board.clone();
        let live_calls = monitor.live_calls();
        let sinks = Sinks {
            archive,
            cdr,
            status,
            observer,
            alerts,
            totals: Totals::default(),
        };
        let stop = StopSignal::default();
        let thread = {
            let (stop, progress) = (stop.clone(), progress.clone());
            std::thread::Builder::new()
                .name("sensor".into())
                .spawn(move || run(monitor, sinks, ready, hep_send, &stop, &progress))
                .map_err(|source| SensorError::Thread {
                    thread: "sensor",
                    source,
                })?
        };
        Ok(SensorHandle {
            stop,
            board,
            progress,
            hep_addr,
            live,
            live_calls,
            thread,
        })
    }
}

/// The sensor's thread: the source to its end, then the last records, then the sinks closed.
fn run(
    mut monitor: Monitor,
    mut sinks: Sinks,
    ready: Ready,
    mut hep_send: Option<crate::hep_send::HepForwarder>,
    stop: &StopSignal,
    progress: &FileProgress,
) -> Result<Report, SensorError> {
    let started = Instant::now();
    let mut packets = 0u64;
    let mut read_error = None;
    let mut hep_invalid = 0;
    let mut hep = None;
    let mut live = None;
    let mut feed = Feed::new(&mut monitor, &mut sinks, hep_send.as_mut());
    match ready {
        Ready::Files(paths) => {
            read_error = read_files(&paths, &mut feed, &mut packets, progress)?;
        }
        Ready::Hep {
            listener,
            max_packets,
        } => {
            let stats = listener.stats();
            let result = crate::hep::receive(listener, max_packets, &mut feed, &mut packets, stop);
            hep = Some(stats.snapshot());
            hep_invalid = result?;
        }
        Ready::Live { capture, config } => {
            let stats = capture.stats.clone();
            let result = crate::live::analyse(capture, &config, &mut feed, &mut packets, stop);
            live = Some((config.interface.clone(), stats.snapshot()));
            result?;
        }
    }
    let hep_send = hep_send.map(crate::hep_send::HepForwarder::finish);
    let last = monitor.finish();
    let counters = last.counters;
    let sip_messages = last.sip.messages;
    sinks.flush(last, true)?;
    let Sinks {
        archive,
        cdr,
        status,
        totals,
        ..
    } = sinks;
    drop(status);
    let (cdr, uplink) = match cdr.map(CdrSink::close) {
        Some((stats, link)) => (Some(stats), link),
        None => (None, None),
    };
    Ok(Report {
        packets,
        elapsed: started.elapsed(),
        totals,
        counters,
        sip_messages,
        read_error,
        hep_invalid,
        hep,
        hep_send,
        live,
        archive_summary: archive.as_ref().map(CaptureArchive::summary),
        cdr,
        uplink,
    })
}

/// Feeds the files' packets to the monitor, flushing closed records as it goes. A read error
/// ends the reading and is returned, so that everything decoded before it is still reported.
fn read_files(
    paths: &[PathBuf],
    feed: &mut Feed<'_>,
    packets: &mut u64,
    progress: &FileProgress,
) -> Result<Option<monitor::pcap::CaptureError>, SensorError> {
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
                    feed.packet(ts, lt, p.data);
                    *packets += 1;
                    if packets.is_multiple_of(FLUSH_EVERY_PACKETS) {
                        progress
                            .bytes_read
                            .store(done_bytes + reader.offset().min(size), Ordering::Relaxed);
                        feed.flush_finished(false)?;
                    }
                }
                Ok(None) => break,
                // Keep every call decoded so far: the caller reports after the output.
                Err(e) => return Ok(Some(e)),
            }
        }
        done_bytes += size;
        progress.bytes_read.store(done_bytes, Ordering::Relaxed);
    }
    Ok(None)
}
