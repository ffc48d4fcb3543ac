//! A sensor's link to its collector (`tandem capture --collector HOST:PORT`): the CDR writer's
//! store that delivers batches over one session and returns once the collector has committed
//! them, and the answers to the collector's pcap requests on the same session.
//!
//! ```text
//! capture ──submit──▶ CdrWriter (queue, journal, replay in order) ──insert_records──▶ UplinkStore
//!                                                                                       │ frames, wait for Ack
//!                    uplink thread (tokio): session ◀─── TLS (or TCP on loopback) ───▶ collector
//!                                             └── PcapRequest ──▶ call_pcap (confined to --archive) ──▶ PcapReply
//! ```
//!
//! - The `uplink` thread keeps one session up: it connects, says `Hello` (name, token, clock),
//!   and on a failure reconnects after a backoff (`reconnect_min_ms` doubling to
//!   `reconnect_max_ms`), whether or not CDRs are waiting, so that the collector can ask for
//!   pcaps at any time (the session is the sensor's own, outgoing: a sensor behind NAT works).
//! - The `cdr-writer` thread sends a batch ([`UplinkStore`]'s `send_records`: numbered on the
//!   session, encoded, queued for the session's writer) and settles it (`settle_oldest`:
//!   waits for the collector's `Ack`, sent after its database commit, up to
//!   `ack_timeout_ms`). With a whole batch more queued, it sends that one before settling
//!   the first ([`DELIVERY_BATCHES_IN_FLIGHT`]), so that the collector decodes the next batch
//!   while it commits the last.
//!   Anything else (no session, a `Nack`, a lost connection, a timeout) is an error, and the
//!   writer does what it does when a database fails: the batch goes to the journal, and the
//!   journal is replayed in order once the store opens again ([`Uplink::open_store`]: a session
//!   is up). A batch the collector stored but could not acknowledge is sent again and stored
//!   once (the collector upserts by uid).
//! - After a `Nack` (the collector's database is down) the store does not open again for a
//!   while (the same backoff), so that a sensor does not resend batches the collector cannot
//!   take.
//! - Pcap requests: the call's tar files must lie inside this sensor's `--archive` directory
//!   (after resolving links) and be named `sip.tar` or `rtp.tar`; the reply is at most
//!   `pcap_bytes_max`, sent in chunks of [`uplink::PCAP_CHUNK_BYTES_MAX`]; at most
//!   [`PCAP_REQUESTS_MAX`] are read at once (more are answered "busy").
//! - TLS (rustls) whenever a CA file is given; plain TCP only to a loopback address.
//!
//! Never: logs the token, reads a file outside the archive for a collector, blocks the capture
//! (only the writer's thread waits for acks), or holds more than [`DELIVERY_BATCHES_IN_FLIGHT`]
//! batches in flight.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cdr::{CdrError, CdrRecord, CdrStore, CdrWriterWatch};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use uplink::{Message, PcapBody, PcapReply, PcapRequest};

use crate::SensorError;

/// Most pcap requests read at once; more are answered "busy".
pub const PCAP_REQUESTS_MAX: usize = 2;
/// Default bound of one pcap reply: 256 MiB (an hour of G.711 with whole RTP is about 82 MB).
pub const DEFAULT_PCAP_BYTES_MAX: u64 = 256 << 20;
/// Default time to connect, finish TLS and be welcomed.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default wait for a batch's acknowledgement (the collector acknowledges after its commit).
pub const DEFAULT_ACK_TIMEOUT_MS: u64 = 30_000;
/// Default time between heartbeats; a session silent for three of them is given up.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 5_000;
/// Frames waiting to be written on the session at most (a batch is one buffer).
pub const OUTGOING_FRAMES_MAX: usize = 16;
/// Records the CDR writer hands the link at most in one batch (its `batch_records_max` when
/// it delivers to a collector). One batch is in flight at a time, so a larger batch pays the
/// round trip and the collector's commit fewer times: the writer's default (500) left the
/// collector's database idle between batches, at about half its rate.
pub const DELIVERY_BATCH_RECORDS_MAX: usize = 5_000;
/// Batches sent before the oldest is acknowledged, at most: the next batch is on its way and
/// decoded while the collector commits the one before, so a single sensor keeps the
/// collector's writers busy. Each is in the writer's memory until it is settled.
pub const DELIVERY_BATCHES_IN_FLIGHT: usize = 2;
/// Records per `Records` frame sent: a batch goes as several frames back to back, so that the
/// collector decodes and starts writing the first while the others are on the way.
pub const FRAME_RECORDS_SENT: usize = 1_000;

/// How a sensor reaches its collector.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorLink {
    /// `HOST:PORT` of the collector.
    pub collector: String,
    /// This sensor's name as the collector knows it (`tandem sensor add NAME`).
    pub sensor: String,
    /// A file holding the token `tandem sensor add` printed (its first line). Optional with a
    /// client certificate.
    pub token_file: Option<PathBuf>,
    /// The CA certificate(s) the collector's certificate is checked against (PEM). Without it,
    /// plain TCP, allowed only to a loopback address.
    pub ca_file: Option<PathBuf>,
    /// The name the collector's certificate must carry; default: HOST of `collector`.
    pub server_name: Option<String>,
    /// A client certificate and key (PEM) for mutual TLS: its common name is the sensor's name.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub connect_timeout_ms: u64,
    pub ack_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub reconnect_min_ms: u64,
    pub reconnect_max_ms: u64,
    /// Most bytes of one pcap reply.
    pub pcap_bytes_max: u64,
    pub limits: uplink::Limits,
}

impl CollectorLink {
    /// `collector` for sensor `sensor` with the defaults and no TLS or token yet.
    pub fn new(collector: &str, sensor: &str) -> CollectorLink {
        CollectorLink {
            collector: collector.to_string(),
            sensor: sensor.to_string(),
            token_file: None,
            ca_file: None,
            server_name: None,
            client_cert: None,
            client_key: None,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            ack_timeout_ms: DEFAULT_ACK_TIMEOUT_MS,
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            reconnect_min_ms: cdr::writer::DEFAULT_RECONNECT_MIN_MS,
            reconnect_max_ms: cdr::writer::DEFAULT_RECONNECT_MAX_MS,
            pcap_bytes_max: DEFAULT_PCAP_BYTES_MAX,
            limits: uplink::Limits::default(),
        }
    }
}

/// What the link did, for the end of a capture.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UplinkSummary {
    pub collector: String,
    /// Records the collector acknowledged.
    pub acknowledged_records: u64,
    /// Sessions opened.
    pub sessions: u64,
    /// Pcap requests answered (with the pcap or an error).
    pub pcap_requests: u64,
    /// Why the last attempt or session failed, if the link is not up now.
    pub last_error: Option<String>,
    pub connected: bool,
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One session: frames go out through `out`; the reader publishes acks and the end.
struct Session {
    out: mpsc::Sender<Vec<u8>>,
    acked: watch::Receiver<u64>,
    /// Why the session ended, once it has.
    end: Arc<watch::Sender<Option<String>>>,
    ended: watch::Receiver<Option<String>>,
    /// The next record's number (the writer thread is the only sender of records).
    next_seq: AtomicU64,
    /// How this session's records go: compact when the collector chose this release's
    /// compact form in its `Welcome`, JSON otherwise.
    format: uplink::RecordFormat,
    /// What a frame sent on this session may hold: the tighter of the sensor's limits and
    /// those the collector said in its `Welcome`, at most [`FRAME_RECORDS_SENT`] records.
    limits: uplink::Limits,
}

impl Session {
    fn is_alive(&self) -> bool {
        self.ended.borrow().is_none()
    }
}

/// The outcome of the latest connection attempt, numbered.
#[derive(Clone, Default)]
struct Attempt {
    count: u64,
    error: Option<String>,
}

struct Shared {
    link: CollectorLink,
    token: String,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    archive_dir: Option<PathBuf>,
    session: Mutex<Option<Arc<Session>>>,
    attempts: watch::Sender<Attempt>,
    poke: Notify,
    stats: Mutex<Option<CdrWriterWatch>>,
    /// After a `Nack`: no store until then.
    nack_until: Mutex<Option<(Instant, String)>>,
    nack_backoff: Mutex<Duration>,
    pcap_permits: Semaphore,
    acknowledged: AtomicU64,
    sessions: AtomicU64,
    pcap_requests: AtomicU64,
}

/// A running link; [`Uplink::open_store`] is the CDR writer's store opener.
pub struct Uplink {
    runtime: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
}

fn link_err(link: &CollectorLink, problem: impl Into<String>) -> CdrError {
    CdrError::Remote {
        target: link.collector.clone(),
        problem: problem.into(),
    }
}

/// The addresses `HOST:PORT` resolves to.
fn resolve(collector: &str) -> std::io::Result<Vec<SocketAddr>> {
    Ok(collector.to_socket_addrs()?.collect())
}

fn read_pem_file(path: &Path, what: &str) -> Result<Vec<u8>, SensorError> {
    std::fs::read(path)
        .map_err(|e| SensorError::Config(format!("cannot read the {what} {}: {e}", path.display())))
}

fn client_tls(
    link: &CollectorLink,
    ca: &Path,
) -> Result<
    (
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    ),
    SensorError,
> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let bad = |p: &Path, e: String| SensorError::Config(format!("{}: {e}", p.display()));
    let mut roots = rustls::RootCertStore::empty();
    let pem = read_pem_file(ca, "collector's CA certificate (--collector-ca)")?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(ca, e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| bad(ca, format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad(ca, "no certificate in the file".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SensorError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let config = match (&link.client_cert, &link.client_key) {
        (Some(cert), Some(key)) => {
            let pem = read_pem_file(cert, "client certificate (--sensor-cert)")?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(cert, e.to_string()))?;
            let pem = read_pem_file(key, "client key (--sensor-key)")?;
            let key_der =
                PrivateKeyDer::from_pem_slice(&pem).map_err(|e| bad(key, e.to_string()))?;
            builder
                .with_client_auth_cert(certs, key_der)
                .map_err(|e| bad(key, format!("does not match the certificate: {e}")))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(SensorError::Config(
                "--sensor-cert and --sensor-key go together".into(),
            ));
        }
    };
    let host = match &link.server_name {
        Some(n) => n.clone(),
        None => host_of(&link.collector).to_string(),
    };
    let name = ServerName::try_from(host.clone()).map_err(|_| {
        SensorError::Config(format!(
            "{host:?} cannot be a TLS server name (give --collector-server-name)"
        ))
    })?;
    Ok((
        tokio_rustls::TlsConnector::from(Arc::new(config)),
        name.to_owned(),
    ))
}

/// HOST of `HOST:PORT` (`[v6]:port` too).
fn host_of(collector: &str) -> &str {
    let host = collector.rsplit_once(':').map_or(collector, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

impl Uplink {
    /// Reads the token, sets TLS up and starts the `uplink` thread, which connects at once and
    /// keeps a session up. An unreachable collector is not an error here (CDRs are journaled
    /// until it is reachable); a missing file, a bad certificate or plain TCP to an address that
    /// is not loopback are.
    pub fn start(link: CollectorLink, archive_dir: Option<&Path>) -> Result<Uplink, SensorError> {
        if !uplink::valid_sensor_name(&link.sensor) {
            return Err(SensorError::Config(format!(
                "--sensor-id {:?}: a sensor name is 1 to 64 letters, digits, '.', '_' or '-'",
                link.sensor
            )));
        }
        let token = match &link.token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    SensorError::Config(format!(
                        "cannot read the sensor token file {} (--sensor-token-file): {e}",
                        path.display()
                    ))
                })?;
                let token = text.lines().next().unwrap_or("").trim().to_string();
                if token.is_empty() {
                    return Err(SensorError::Config(format!(
                        "the sensor token file {} is empty: put the token `tandem sensor add {}` printed in it",
                        path.display(),
                        link.sensor
                    )));
                }
                token
            }
            None if link.client_cert.is_some() => String::new(),
            None => {
                return Err(SensorError::Config(
                    "--collector needs --sensor-token-file (or --sensor-cert and --sensor-key for mutual TLS)".into(),
                ));
            }
        };
        let tls = match &link.ca_file {
            Some(ca) => Some(client_tls(&link, ca)?),
            None => {
                let addrs = resolve(&link.collector).map_err(|e| {
                    SensorError::Config(format!("--collector {}: {e}", link.collector))
                })?;
                if addrs.is_empty() || !addrs.iter().all(|a| a.ip().is_loopback()) {
                    return Err(SensorError::Config(format!(
                        "--collector {} is not a loopback address: CDRs leave this machine only over TLS; give the collector's CA certificate with --collector-ca",
                        link.collector
                    )));
                }
                if link.client_cert.is_some() {
                    return Err(SensorError::Config(
                        "--sensor-cert needs TLS: give --collector-ca".into(),
                    ));
                }
                None
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("uplink")
            .enable_all()
            .build()
            .map_err(|source| SensorError::Thread {
                thread: "uplink",
                source,
            })?;
        let reconnect_min = Duration::from_millis(link.reconnect_min_ms.max(1));
        let shared = Arc::new(Shared {
            token,
            tls,
            archive_dir: archive_dir.map(Path::to_path_buf),
            session: Mutex::new(None),
            attempts: watch::channel(Attempt::default()).0,
            poke: Notify::new(),
            stats: Mutex::new(None),
            nack_until: Mutex::new(None),
            nack_backoff: Mutex::new(reconnect_min),
            pcap_permits: Semaphore::new(PCAP_REQUESTS_MAX),
            acknowledged: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            pcap_requests: AtomicU64::new(0),
            link,
        });
        runtime.spawn(supervise(shared.clone()));
        Ok(Uplink {
            runtime: Some(runtime),
            shared,
        })
    }

    /// The writer's counters, for the heartbeats.
    pub fn set_stats(&self, watch: CdrWriterWatch) {
        *self.shared.stats.lock().unwrap_or_else(|e| e.into_inner()) = Some(watch);
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as the link")
    }

    /// The CDR writer's store: succeeds once a session is up (asking for an attempt now, and
    /// waiting for it up to the connect timeout), fails with the reason otherwise.
    pub fn open_store(self: &Arc<Self>) -> Result<Box<dyn CdrStore>, CdrError> {
        let s = &self.shared;
        if let Some((until, why)) = s
            .nack_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            && Instant::now() < until
        {
            return Err(link_err(&s.link, why));
        }
        if self.live_session().is_none() {
            let mut attempts = s.attempts.subscribe();
            let seen = attempts.borrow_and_update().count;
            s.poke.notify_one();
            let wait = Duration::from_millis(s.link.connect_timeout_ms.saturating_mul(2).max(100));
            let outcome = self.runtime().block_on(async {
                tokio::time::timeout(wait, attempts.wait_for(|a| a.count > seen))
                    .await
                    .ok()
                    .and_then(|r| r.ok().map(|a| a.error.clone()))
            });
            if self.live_session().is_none() {
                let why = match outcome {
                    Some(Some(e)) => e,
                    _ => "no session with the collector yet".to_string(),
                };
                return Err(link_err(&s.link, why));
            }
        }
        Ok(Box::new(UplinkStore {
            link: self.clone(),
            in_flight: std::collections::VecDeque::new(),
        }))
    }

    fn live_session(&self) -> Option<Arc<Session>> {
        self.shared
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|s| s.is_alive())
    }

    /// Sends a batch (numbered on the live session) without waiting for its acknowledgement.
    fn send(&self, records: &[CdrRecord]) -> Result<InFlight, CdrError> {
        let s = &self.shared;
        let err = |p: String| link_err(&s.link, p);
        let session = self
            .live_session()
            .ok_or_else(|| err("the session with the collector ended".into()))?;
        // Numbered only once encoded: a batch that cannot be sent leaves no gap in the numbers.
        let first = session.next_seq.load(Relaxed);
        let (frames, last) =
            uplink::encode_records(first, records, &session.limits, session.format)
                .map_err(|e| err(e.to_string()))?;
        session.next_seq.store(last + 1, Relaxed);
        let sent = self.runtime().block_on(async {
            session
                .out
                .send(frames)
                .await
                .map_err(|_| "the session with the collector ended".to_string())
        });
        if let Err(why) = sent {
            end_session(&session, &why);
            return Err(err(why));
        }
        Ok(InFlight {
            session,
            last_seq: last,
            records: records.len() as u64,
        })
    }

    /// Waits for a batch's acknowledgement, up to `ack_timeout_ms` from now.
    fn settle(&self, batch: InFlight) -> Result<(), CdrError> {
        let s = &self.shared;
        let InFlight {
            session,
            last_seq,
            records,
        } = batch;
        let ack_timeout = Duration::from_millis(s.link.ack_timeout_ms.max(1));
        let result = self.runtime().block_on(async {
            let mut acked = session.acked.clone();
            let mut ended = session.ended.clone();
            let wait = async {
                loop {
                    if *acked.borrow_and_update() >= last_seq {
                        return Ok(());
                    }
                    if let Some(why) = ended.borrow_and_update().clone() {
                        return Err(why);
                    }
                    tokio::select! {
                        r = acked.changed() => if r.is_err() { return Err("the session with the collector ended".to_string()) },
                        r = ended.changed() => if r.is_err() { return Err("the session with the collector ended".to_string()) },
                    }
                }
            };
            match tokio::time::timeout(ack_timeout, wait).await {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "no acknowledgement within {} ms (the collector or its database is slow)",
                    ack_timeout.as_millis()
                )),
            }
        });
        match result {
            Ok(()) => {
                s.acknowledged.fetch_add(records, Relaxed);
                *s.nack_backoff.lock().unwrap_or_else(|e| e.into_inner()) =
                    Duration::from_millis(s.link.reconnect_min_ms.max(1));
                Ok(())
            }
            Err(why) => {
                // The batch is not known to be stored: this session is over (a new one numbers
                // from 1, and the journal sends the batch again).
                end_session(&session, &why);
                Err(link_err(&s.link, why))
            }
        }
    }

    /// What the link did so far.
    pub fn summary(&self) -> UplinkSummary {
        let s = &self.shared;
        let connected = self.live_session().is_some();
        UplinkSummary {
            collector: s.link.collector.clone(),
            acknowledged_records: s.acknowledged.load(Relaxed),
            sessions: s.sessions.load(Relaxed),
            pcap_requests: s.pcap_requests.load(Relaxed),
            last_error: if connected {
                None
            } else {
                s.attempts.borrow().error.clone()
            },
            connected,
        }
    }
}

impl Drop for Uplink {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Ends a session (its reader and writer see it and stop; the supervisor reconnects).
fn end_session(session: &Session, why: &str) {
    set_end(&session.end, why.to_string());
}

fn set_end(end: &watch::Sender<Option<String>>, why: String) {
    end.send_if_modified(|e| {
        if e.is_none() {
            *e = Some(why);
            true
        } else {
            false
        }
    });
}

/// The CDR writer's store: batches to the collector.
pub struct UplinkStore {
    link: Arc<Uplink>,
    /// Batches sent and not yet settled, oldest first (at most [`DELIVERY_BATCHES_IN_FLIGHT`]).
    in_flight: std::collections::VecDeque<InFlight>,
}

/// A batch on its way: the session it went on and the number of its last record.
struct InFlight {
    session: Arc<Session>,
    last_seq: u64,
    records: u64,
}

impl CdrStore for UplinkStore {
    fn insert_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        self.send_records(records)?;
        while !self.in_flight.is_empty() {
            self.settle_oldest()?;
        }
        Ok(())
    }

    fn batches_in_flight_max(&self) -> usize {
        DELIVERY_BATCHES_IN_FLIGHT
    }

    fn send_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        if records.is_empty() {
            return Ok(());
        }
        let batch = self.link.send(records)?;
        self.in_flight.push_back(batch);
        Ok(())
    }

    fn settle_oldest(&mut self) -> Result<(), CdrError> {
        match self.in_flight.pop_front() {
            Some(batch) => self.link.settle(batch).inspect_err(|_| {
                // Those sent after it went on the same session, which is over.
                self.in_flight.clear();
            }),
            None => Ok(()),
        }
    }

    fn list(&mut self, _: &cdr::CdrFilter) -> Result<Vec<cdr::CdrCall>, CdrError> {
        Err(self.not_here())
    }
    fn show(&mut self, _: &str) -> Result<Option<(cdr::CdrCall, Vec<cdr::CdrStream>)>, CdrError> {
        Err(self.not_here())
    }
    fn t38(&mut self, _: &str) -> Result<Vec<cdr::CdrT38>, CdrError> {
        Err(self.not_here())
    }
    fn search(&mut self, _: &cdr::search::CallQuery) -> Result<cdr::search::CallPage, CdrError> {
        Err(self.not_here())
    }
    fn totals(&mut self, _: &cdr::search::CallQuery) -> Result<cdr::search::CallTotals, CdrError> {
        Err(self.not_here())
    }
    fn call_by_uid(
        &mut self,
        _: &str,
    ) -> Result<
        Option<(
            cdr::search::CallSummary,
            Vec<cdr::CdrStream>,
            Vec<cdr::CdrT38>,
        )>,
        CdrError,
    > {
        Err(self.not_here())
    }
    fn registrations(
        &mut self,
        _: &cdr::registration::RegistrationQuery,
    ) -> Result<cdr::registration::RegistrationPage, CdrError> {
        Err(self.not_here())
    }
}

impl UplinkStore {
    fn not_here(&self) -> CdrError {
        link_err(
            &self.link.shared.link,
            "a sensor's link only delivers CDRs; query them on the collector",
        )
    }
}

/// Keeps a session up: connect, serve it until it ends, reconnect after a backoff (or at once
/// when the writer asks).
async fn supervise(shared: Arc<Shared>) {
    let min = Duration::from_millis(shared.link.reconnect_min_ms.max(1));
    let max = Duration::from_millis(shared.link.reconnect_max_ms).max(min);
    let mut backoff = min;
    let mut failures = 0u64;
    loop {
        let outcome = connect(&shared).await;
        let count = shared.attempts.borrow().count + 1;
        match outcome {
            Ok((io, welcome)) => {
                if failures > 0 {
                    tracing::info!(collector = %shared.link.collector, failures, "connected to the collector again");
                }
                failures = 0;
                backoff = min;
                let skew_ms = (now_us() - welcome.clock_us) / 1000;
                if skew_ms.abs() > 2_000 {
                    tracing::warn!(collector = %shared.link.collector, skew_ms, "this sensor's clock differs from the collector's by more than 2 s");
                }
                shared.sessions.fetch_add(1, Relaxed);
                let (session, run) = start_session(shared.clone(), io, &welcome);
                *shared.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session);
                shared.attempts.send_replace(Attempt { count, error: None });
                let why = run.await;
                shared
                    .session
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                shared.attempts.send_modify(|a| a.error = Some(why.clone()));
                tracing::warn!(collector = %shared.link.collector, reason = %why, "session with the collector ended; reconnecting");
            }
            Err(why) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(collector = %shared.link.collector, error = %why, failures, retry_in_ms = backoff.as_millis() as u64, "cannot reach the collector: CDRs wait in the journal");
                }
                shared.attempts.send_replace(Attempt {
                    count,
                    error: Some(why),
                });
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shared.poke.notified() => {}
        }
        if failures > 0 {
            backoff = (backoff * 2).min(max);
        }
    }
}

/// TCP (or TLS) to the collector, `Hello`, and its `Welcome`.
async fn connect(shared: &Shared) -> Result<(Box<dyn Io>, uplink::Welcome), String> {
    let link = &shared.link;
    let timeout = Duration::from_millis(link.connect_timeout_ms.max(1));
    let attempt = async {
        let collector = link.collector.clone();
        let addrs = tokio::task::spawn_blocking(move || resolve(&collector))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot resolve {}: {e}", link.collector))?;
        let mut last = format!("{} resolves to no address", link.collector);
        let mut tcp = None;
        for addr in addrs {
            if shared.tls.is_none() && !addr.ip().is_loopback() {
                last = format!("{addr} is not loopback: plain TCP is for loopback only");
                continue;
            }
            match tokio::net::TcpStream::connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        let tcp = tcp.ok_or(last)?;
        let _ = tcp.set_nodelay(true);
        let mut io: Box<dyn Io> = match &shared.tls {
            Some((connector, name)) => Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS with {}: {e}", link.collector))?,
            ),
            None => Box::new(tcp),
        };
        let hello = Message::Hello(uplink::Hello {
            version: uplink::PROTOCOL_VERSION,
            sensor: link.sensor.clone(),
            token: shared.token.clone(),
            clock_us: now_us(),
            software: concat!("tandem ", env!("CARGO_PKG_VERSION")).to_string(),
            record_formats: vec![uplink::compact_format().to_string()],
        });
        let mut buf = Vec::new();
        uplink::encode(&hello, &mut buf);
        io.write_all(&buf).await.map_err(|e| e.to_string())?;
        io.flush().await.map_err(|e| e.to_string())?;
        match read_message(&mut io, &link.limits).await? {
            Message::Welcome(w) => Ok((io, w)),
            Message::Refused(r) => Err(format!("the collector refused this sensor: {}", r.reason)),
            other => Err(format!(
                "the collector answered Hello with {}",
                other.kind().name()
            )),
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no welcome from {} within {} ms",
                link.collector,
                timeout.as_millis()
            ))
        })
}

async fn read_message<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    limits: &uplink::Limits,
) -> Result<Message, String> {
    let mut header = [0u8; uplink::HEADER_BYTES];
    r.read_exact(&mut header)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "the collector closed the connection".to_string(),
            _ => e.to_string(),
        })?;
    let len = uplink::payload_len(header, limits).map_err(|e| e.to_string())?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)
        .await
        .map_err(|e| e.to_string())?;
    uplink::decode_payload(&payload, limits).map_err(|e| e.to_string())
}

/// Starts the session's writer and returns the session with the future that reads it until it
/// ends (and says why).
fn start_session(
    shared: Arc<Shared>,
    io: Box<dyn Io>,
    welcome: &uplink::Welcome,
) -> (Arc<Session>, impl std::future::Future<Output = String>) {
    let (mut rd, mut wr) = tokio::io::split(io);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(OUTGOING_FRAMES_MAX);
    let (acked_tx, acked_rx) = watch::channel(0u64);
    let (ended_tx, ended_rx) = watch::channel(None::<String>);
    let ended_tx = Arc::new(ended_tx);
    let heartbeat = Duration::from_millis(if welcome.heartbeat_interval_ms > 0 {
        welcome
            .heartbeat_interval_ms
            .min(shared.link.heartbeat_interval_ms.max(1))
    } else {
        shared.link.heartbeat_interval_ms.max(1)
    });
    let session = Arc::new(Session {
        out: out_tx.clone(),
        acked: acked_rx,
        end: ended_tx.clone(),
        ended: ended_rx,
        next_seq: AtomicU64::new(1),
        format: welcome.record_format(),
        limits: {
            let l = welcome.sending_limits(&shared.link.limits);
            uplink::Limits {
                batch_records_max: l.batch_records_max.min(FRAME_RECORDS_SENT),
                ..l
            }
        },
    });
    // The writer: frames in order, and a heartbeat every interval.
    let writer_shared = shared.clone();
    let writer_ended = ended_tx.clone();
    let mut writer_end = session.ended.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let why = loop {
            let frame = tokio::select! {
                f = out_rx.recv() => match f {
                    Some(f) => f,
                    None => break "the session closed".to_string(),
                },
                _ = tick.tick() => heartbeat_frame(&writer_shared),
                _ = writer_end.changed() => break String::new(),
            };
            if let Err(e) = wr.write_all(&frame).await.and(wr.flush().await) {
                break format!("writing to the collector: {e}");
            }
        };
        let _ = wr.shutdown().await;
        if !why.is_empty() {
            set_end(&writer_ended, why);
        }
    });
    let idle = heartbeat * 3;
    let reader_session = session.clone();
    let run = async move {
        let mut ended = reader_session.ended.clone();
        let why = loop {
            let msg = tokio::select! {
                m = tokio::time::timeout(idle, read_message(&mut rd, &shared.link.limits)) => m,
                _ = ended.changed() => break ended.borrow().clone().unwrap_or_default(),
            };
            match msg {
                Err(_) => break format!("nothing from the collector for {} ms", idle.as_millis()),
                Ok(Err(e)) => break e,
                Ok(Ok(Message::Ack { upto_seq })) => {
                    acked_tx.send_if_modified(|a| {
                        if upto_seq > *a {
                            *a = upto_seq;
                            true
                        } else {
                            false
                        }
                    });
                }
                Ok(Ok(Message::Nack(n))) => {
                    let mut backoff = shared
                        .nack_backoff
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    let why = format!("the collector could not store the records: {}", n.reason);
                    *shared.nack_until.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((Instant::now() + *backoff, why.clone()));
                    *backoff = (*backoff * 2).min(Duration::from_millis(
                        shared
                            .link
                            .reconnect_max_ms
                            .max(shared.link.reconnect_min_ms),
                    ));
                    break why;
                }
                Ok(Ok(Message::Refused(r))) => {
                    break format!("the collector ended the session: {}", r.reason);
                }
                Ok(Ok(Message::PcapRequest(req))) => {
                    shared.pcap_requests.fetch_add(1, Relaxed);
                    tokio::spawn(answer_pcap(shared.clone(), req, out_tx.clone()));
                }
                Ok(Ok(other)) => {
                    break format!("unexpected {} from the collector", other.kind().name());
                }
            }
        };
        set_end(&ended_tx, why.clone());
        let said = ended_tx.borrow().clone();
        said.unwrap_or(why)
    };
    (session, run)
}

fn heartbeat_frame(shared: &Shared) -> Vec<u8> {
    let stats = shared
        .stats
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|w| w.stats())
        .unwrap_or_default();
    let hb = Message::Heartbeat(uplink::Heartbeat {
        clock_us: now_us(),
        journal_records: stats.journal_records,
        spilled: stats.spilled_records,
        replayed: stats.replayed_records,
        dropped: stats.dropped_records,
        queue_records: stats.queue_records as u64,
    });
    let mut buf = Vec::new();
    uplink::encode(&hb, &mut buf);
    buf
}

/// Reads the call's pcap (confined to the archive) and sends it in chunks, or the reason not.
async fn answer_pcap(shared: Arc<Shared>, req: PcapRequest, out: mpsc::Sender<Vec<u8>>) {
    let id = req.request_id;
    let result = match shared.pcap_permits.try_acquire() {
        Err(_) => Err(format!(
            "this sensor is reading {PCAP_REQUESTS_MAX} pcaps already; ask again in a moment"
        )),
        Ok(_permit) => {
            let archive = shared.archive_dir.clone();
            let max = shared.link.pcap_bytes_max;
            tokio::task::spawn_blocking(move || confined_pcap(archive.as_deref(), &req.call, max))
                .await
                .unwrap_or_else(|e| Err(format!("reading the pcap failed: {e}")))
        }
    };
    let mut frames = Vec::new();
    match result {
        Ok(bytes) => {
            let mut chunks = bytes.chunks(uplink::PCAP_CHUNK_BYTES_MAX).peekable();
            if chunks.peek().is_none() {
                frames.push(PcapBody::Chunk {
                    data: Vec::new(),
                    last: true,
                });
            }
            while let Some(c) = chunks.next() {
                frames.push(PcapBody::Chunk {
                    data: c.to_vec(),
                    last: chunks.peek().is_none(),
                });
            }
        }
        Err(e) => {
            tracing::info!(request = id, error = %e, "pcap request from the collector refused");
            frames.push(PcapBody::Error(e));
        }
    }
    for body in frames {
        let mut buf = Vec::new();
        uplink::encode(
            &Message::PcapReply(PcapReply {
                request_id: id,
                body,
            }),
            &mut buf,
        );
        if out.send(buf).await.is_err() {
            return;
        }
    }
}

/// The call's pcap, if its tar files lie in `archive` and it is no larger than `max` bytes.
pub fn confined_pcap(
    archive: Option<&Path>,
    call: &uplink::PcapCall,
    max: u64,
) -> Result<Vec<u8>, String> {
    let Some(archive) = archive else {
        return Err("this sensor keeps no archive (it runs without --archive)".into());
    };
    let root = std::fs::canonicalize(archive)
        .map_err(|e| format!("this sensor's archive {}: {e}", archive.display()))?;
    let confine = |tar: &Option<String>| -> Result<Option<String>, String> {
        let Some(tar) = tar else { return Ok(None) };
        let path = Path::new(tar);
        let name_ok = matches!(
            path.file_name().and_then(|n| n.to_str()),
            Some("sip.tar" | "rtp.tar")
        );
        if !path.is_absolute() || !name_ok {
            return Err(format!(
                "{tar:?} is not a tar file of this sensor's archive"
            ));
        }
        let real = std::fs::canonicalize(path).map_err(|e| {
            format!("archive file {tar} is missing on this sensor (deleted by retention?): {e}")
        })?;
        if !real.starts_with(&root) {
            return Err(format!(
                "{tar:?} lies outside this sensor's archive {}",
                root.display()
            ));
        }
        Ok(Some(real.display().to_string()))
    };
    let mut c = call.to_call();
    c.sip_tar = confine(&call.sip_tar)?;
    c.rtp_tar = confine(&call.rtp_tar)?;
    if call.member_bytes() > max {
        return Err(format!(
            "the call's archived packets take {} bytes, over this sensor's reply limit of {max}",
            call.member_bytes()
        ));
    }
    let bytes = crate::call_pcap::call_pcap(&c).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "the call's pcap is {} bytes, over this sensor's reply limit of {max}",
            bytes.len()
        ));
    }
    Ok(bytes)
}
