//! The collector: remote sensors (`tandem capture --collector`) deliver their CDRs here over
//! TLS; they are written to PostgreSQL in batches and acknowledged after the commit; the
//! console and `tandem cdr pcap` fetch a remote call's pcap over that sensor's own session.
//!
//! ```text
//! sensor ─TLS─▶ accept (sessions_max) ─▶ Hello: version, name, token or client certificate
//!   ▲              │ Records (first_seq, records: sensor and uid set from the authenticated name)
//!   │              ▼
//!   │      writer queues (queue_batches_max, one per writer; each frame to the one with most room)
//!   │              ▼
//!   │      writer thread: batches merged (transaction_records_max) ─▶ PostgreSQL (upsert by uid)
//!   └── Ack {upto_seq} after the commit; Nack and the session's end when it failed
//! console / `tandem cdr pcap` (Unix socket) ─▶ CollectorHandle::fetch_pcap ─▶ PcapRequest on the
//!                                              sensor's session ─▶ PcapReply chunks
//! ```
//!
//! Who gets in: a sensor known by name (`tandem sensor add NAME`, [`sensors`]) with its token,
//! or with a client certificate signed by `client_ca` whose common name is its name. TLS on
//! every connection but those from loopback (plain TCP from elsewhere is refused with a
//! `Refused` frame, counted and logged; the first byte tells TLS from the protocol's frames).
//! Every refusal is counted by reason (`tandem_collector_refused_total{reason}`).
//!
//! Exactly once in effect: each record's uid starts with its sensor's name (the collector
//! rewrites a uid that does not, and sets the `sensor` columns, so a sensor cannot write
//! another's rows); the store upserts by uid, so a batch sent again after a lost
//! acknowledgement is stored once. Acknowledgements follow the commit: a session's frames are
//! spread over the writers and may commit out of order, and its `Ack` moves only over frames
//! that are all committed; after a failed batch the session gets `Nack` and ends, so an
//! acknowledgement never covers a batch that was not stored.
//!
//! Bounded: sessions (`sessions_max`), sensors tracked (`sensors_max`), records per frame
//! (`batch_records_max`) and frame bytes (`frame_bytes_max`), batches queued for the database
//! (`queue_batches_max`: a slow database stops the sessions' reading, so sensors wait for
//! their acknowledgements and keep journaling), pcap requests at once (`pcap_requests_max`)
//! and their bytes (`pcap_bytes_max`). Each has a metric.
//!
//! Never: acknowledges a record before its commit, blocks a tokio worker on the database or a
//! file (the writers are threads; the sensor list is read on the blocking pool), logs a token,
//! or serves plain TCP beyond loopback.
//!
//! Start at [`Collector::bind`], then `session.rs` (a connection from accept to end),
//! `writer.rs` (the database side), `upkeep.rs` (retention and days ahead on a timer, so that
//! an idle collector drops old days too), `state.rs` (per-sensor figures and metrics) and
//! `local.rs` (the socket `tandem cdr pcap` asks through).

mod local;
pub mod sensors;
mod session;
mod state;
mod upkeep;
mod writer;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};

pub use local::{LOCAL_SOCKET_FILE, fetch_pcap_local};
pub use sensors::{KnownSensor, SensorList, SensorListError, sensors_file};
pub use state::{Refusal, SensorStatus};
pub use uplink::PcapCall;

/// `[collector]` in tandem.toml; every bound with its default (tandem.example.toml documents
/// them).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The groups whose report rollups the writers keep (tandem.toml's `[[groups]]`, given by
    /// the binary; `all` always).
    #[serde(skip)]
    pub groups: std::sync::Arc<groups::Groups>,
    /// Where sensors connect, `HOST:PORT` (9575 by convention). Empty: no collector.
    pub listen: String,
    /// The PostgreSQL the CDRs go to (libpq-style `host=... user=... dbname=...`). Required.
    pub postgres: String,
    /// The collector's TLS certificate and key (PEM). Empty: `[web]`'s; with neither, only
    /// loopback sensors (plain TCP) can connect, and `listen` must be a loopback address.
    pub tls_cert: String,
    pub tls_key: String,
    /// CA certificate(s) (PEM) of sensors' client certificates (mutual TLS: the certificate's
    /// common name is the sensor's name, no token needed). Empty: tokens only.
    pub client_ca: String,
    /// The local socket `tandem cdr pcap` asks through. Empty: `collector.sock` in the data
    /// directory.
    pub socket: String,
    /// Sensor sessions at once.
    pub sessions_max: usize,
    /// Sensors tracked (state and metrics) at once.
    pub sensors_max: usize,
    /// Records in one `Records` frame.
    pub batch_records_max: usize,
    /// Bytes of one frame.
    pub frame_bytes_max: usize,
    /// Records written in one PostgreSQL transaction (batches of several sensors merged).
    pub transaction_records_max: usize,
    /// Batches queued for PostgreSQL, all writers together.
    pub queue_batches_max: usize,
    /// PostgreSQL writer threads (connections).
    pub writers: usize,
    /// TLS handshake and Hello, at most.
    pub handshake_timeout_ms: u64,
    /// How often sensors send a heartbeat (told in Welcome).
    pub heartbeat_interval_ms: u64,
    /// A session silent this long ends.
    pub idle_timeout_ms: u64,
    /// A pcap request's whole answer, at most.
    pub pcap_timeout_ms: u64,
    /// Bytes of one pcap from a sensor.
    pub pcap_bytes_max: u64,
    /// Pcap requests in flight at once.
    pub pcap_requests_max: usize,
    /// Backoff of the PostgreSQL reconnection.
    pub reconnect_min_ms: u64,
    pub reconnect_max_ms: u64,
    /// A sensor's clock further off than this is warned about in the log.
    pub clock_skew_warn_ms: u64,
    /// Whole UTC days of CDRs kept before today (default 90). The tables are partitioned by
    /// day and older days are dropped whole, never deleted row by row: at start and every
    /// `maintenance_interval_s` (an idle collector too), and at the writers' first
    /// transaction of each day. 0 keeps every day.
    pub retention_days: u32,
    /// Time between two upkeeps of the CDR tables (retention and days ahead), seconds;
    /// default 3600.
    pub maintenance_interval_s: u64,
    /// Day partitions created ahead of today (default 3), so that midnight never waits for
    /// one.
    pub partition_days_ahead: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            groups: Default::default(),
            listen: String::new(),
            postgres: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            client_ca: String::new(),
            socket: String::new(),
            sessions_max: 1_000,
            sensors_max: 10_000,
            batch_records_max: uplink::BATCH_RECORDS_MAX,
            frame_bytes_max: uplink::FRAME_BYTES_MAX,
            transaction_records_max: 2_000,
            queue_batches_max: 64,
            writers: 2,
            handshake_timeout_ms: 10_000,
            heartbeat_interval_ms: 5_000,
            idle_timeout_ms: 30_000,
            pcap_timeout_ms: 30_000,
            pcap_bytes_max: 256 << 20,
            pcap_requests_max: 8,
            reconnect_min_ms: 250,
            reconnect_max_ms: 10_000,
            clock_skew_warn_ms: 2_000,
            retention_days: 90,
            maintenance_interval_s: 3_600,
            partition_days_ahead: cdr::PARTITION_DAYS_AHEAD,
        }
    }
}

impl Settings {
    /// Whether `serve` runs a collector.
    pub fn enabled(&self) -> bool {
        !self.listen.is_empty()
    }

    /// How the writers connect: the day-partitioned layout (a database created by the plain
    /// layout and holding rows is refused with the step that moves it), with the retention.
    pub(crate) fn pg_options(&self) -> cdr::PgOptions {
        cdr::PgOptions {
            layout: cdr::PgLayout::Partitioned,
            days_ahead: self.partition_days_ahead,
            retention_days: (self.retention_days > 0).then_some(self.retention_days),
        }
    }

    pub(crate) fn limits(&self) -> uplink::Limits {
        uplink::Limits {
            frame_bytes_max: self.frame_bytes_max.max(1024),
            batch_records_max: self.batch_records_max.max(1),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error("[collector] {0}")]
    Config(String),
    #[error("the collector cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the collector's TLS: {0}")]
    Tls(String),
    #[error("the collector's local socket {path}: {source}")]
    Socket {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot start the collector's {thread} thread: {source}")]
    Thread {
        thread: String,
        source: std::io::Error,
    },
}

/// Why a pcap could not be fetched from a sensor; the message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PcapFetchError {
    #[error(
        "sensor {sensor:?} is offline ({since}): its pcaps can be fetched once it reconnects to the collector"
    )]
    Offline { sensor: String, since: String },
    #[error("sensor {sensor:?}: {reason}")]
    Sensor { sensor: String, reason: String },
    #[error("sensor {sensor:?} did not send the pcap within {timeout_ms} ms")]
    Timeout { sensor: String, timeout_ms: u64 },
    #[error("the collector is busy with {0} pcap requests; try again in a moment")]
    Busy(usize),
}

/// A batch on its way to PostgreSQL.
pub(crate) struct Batch {
    pub session: Arc<session::SessionEntry>,
    pub upto_seq: u64,
    pub records: Vec<cdr::CdrRecord>,
}

/// What the sessions, the writers, the handle and the metrics share.
pub(crate) struct Shared {
    pub settings: Settings,
    pub list_path: PathBuf,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub session_permits: Arc<Semaphore>,
    pub pcap_permits: Arc<Semaphore>,
    /// The session of each connected sensor.
    pub sessions: Mutex<HashMap<String, Arc<session::SessionEntry>>>,
    pub table: state::SensorTable,
    pub queues: Mutex<Vec<mpsc::Sender<Batch>>>,
    pub counters: state::Counters,
    pub next_session: AtomicU64,
    pub next_request: AtomicU64,
    /// Writers whose connection is down now.
    pub writers_down: AtomicU64,
    pub stopping: AtomicBool,
    /// Shown every batch once it is committed (the alert rules, in `serve`).
    pub stored_tap: std::sync::OnceLock<Arc<dyn StoredRecords>>,
}

/// Sees the sensors' records after they are committed, on the writer's thread (several
/// writers may call it at once). It must not wait: the writer acknowledges the next batches
/// after it.
pub trait StoredRecords: Send + Sync {
    fn stored(&self, records: &[cdr::CdrRecord]);
}

impl Shared {
    pub fn gauges(&self) -> state::Gauges {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let queued = queues
            .iter()
            .map(|q| (q.max_capacity() - q.capacity()) as u64)
            .sum();
        state::Gauges {
            sessions: (self.settings.sessions_max - self.session_permits.available_permits())
                as u64,
            sessions_max: self.settings.sessions_max as u64,
            queue_batches: queued,
            queue_batches_max: queues.iter().map(|q| q.max_capacity() as u64).sum(),
            db_up: u64::from(self.writers_down.load(Relaxed) == 0),
            sensors_max: self.settings.sensors_max as u64,
        }
    }

    /// Every sensor tracked, with its lag now.
    pub fn sensor_statuses(&self) -> Vec<SensorStatus> {
        let sessions = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut out: Vec<SensorStatus> = self
            .table
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for s in &mut out {
            s.lag_ms = sessions.get(&s.name).map_or(0, |e| e.lag_ms());
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// A bound collector, ready to serve.
pub struct Collector {
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    local: tokio::net::UnixListener,
    local_path: PathBuf,
    writers: Vec<std::thread::JoinHandle<()>>,
    /// Dropped at stop: the upkeep thread ends at its next wake (it is not joined, so that a
    /// stop never waits for a database that hangs).
    upkeep_stop: std::sync::mpsc::Sender<()>,
}

/// The collector seen from the rest of `tandem serve` (the console, the local socket): the
/// sensors' state and their pcaps.
#[derive(Clone)]
pub struct CollectorHandle(Arc<Shared>);

impl Collector {
    /// Checks the settings, binds `settings.listen` and the local socket, sets TLS up (`tls`:
    /// the certificate and key when `[collector]` names none, i.e. `[web]`'s), starts the
    /// PostgreSQL writers and registers `tandem_collector_*` in `registry`.
    pub async fn bind(
        settings: &Settings,
        tls: Option<(PathBuf, PathBuf)>,
        data_dir: &Path,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Result<Collector, CollectorError> {
        let addr: SocketAddr = settings.listen.parse().map_err(|_| {
            CollectorError::Config(format!(
                "listen = {:?} is not an address (HOST:PORT, e.g. 0.0.0.0:9575)",
                settings.listen
            ))
        })?;
        let listener =
            std::net::TcpListener::bind(addr).map_err(|source| CollectorError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        Collector::with_listener(settings, tls, data_dir, listener, registry)
    }

    /// [`Collector::bind`] on a listener the caller bound (a test binds one in a network
    /// namespace).
    pub fn with_listener(
        settings: &Settings,
        tls: Option<(PathBuf, PathBuf)>,
        data_dir: &Path,
        listener: std::net::TcpListener,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Result<Collector, CollectorError> {
        if settings.postgres.is_empty() {
            return Err(CollectorError::Config(
                "postgres is required: the connection string of the database the CDRs go to (--collector-postgres)".into(),
            ));
        }
        let addr = listener
            .local_addr()
            .map_err(|source| CollectorError::Bind {
                addr: settings.listen.clone(),
                source,
            })?;
        let tls_files = match (settings.tls_cert.as_str(), settings.tls_key.as_str()) {
            ("", "") => tls,
            (c, k) if !c.is_empty() && !k.is_empty() => Some((c.into(), k.into())),
            _ => {
                return Err(CollectorError::Config(
                    "tls_cert and tls_key go together".into(),
                ));
            }
        };
        if tls_files.is_none() && !addr.ip().is_loopback() {
            return Err(CollectorError::Config(format!(
                "listen = {addr} is not loopback, and sensors off this machine connect only over TLS: give tls_cert and tls_key (or [web]'s)"
            )));
        }
        if !settings.client_ca.is_empty() && tls_files.is_none() {
            return Err(CollectorError::Config(
                "client_ca needs TLS: give tls_cert and tls_key".into(),
            ));
        }
        let tls = match &tls_files {
            Some((cert, key)) => {
                let ca = (!settings.client_ca.is_empty()).then(|| Path::new(&settings.client_ca));
                let config = tls_pem::server_config_with_clients(cert, key, ca)
                    .map_err(CollectorError::Tls)?;
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
            }
            None => None,
        };
        filemode::create_dir_all(data_dir, &filemode::Access::Private).map_err(|source| {
            CollectorError::Socket {
                path: data_dir.display().to_string(),
                source,
            }
        })?;
        let list_path = sensors_file(data_dir);
        // Created now, so that a wrong data directory fails at start.
        SensorList::open(&list_path).map_err(|e| CollectorError::Config(e.to_string()))?;
        listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
            .map_err(|source| CollectorError::Bind {
                addr: addr.to_string(),
                source,
            })
            .and_then(|listener| {
                let local_path = if settings.socket.is_empty() {
                    data_dir.join(LOCAL_SOCKET_FILE)
                } else {
                    PathBuf::from(&settings.socket)
                };
                let local = local::bind(&local_path)?;
                let writers = settings.writers.max(1);
                let per_writer = (settings.queue_batches_max / writers).max(1);
                let mut senders = Vec::with_capacity(writers);
                let mut receivers = Vec::with_capacity(writers);
                for _ in 0..writers {
                    let (tx, rx) = mpsc::channel(per_writer);
                    senders.push(tx);
                    receivers.push(rx);
                }
                let shared = Arc::new(Shared {
                    list_path,
                    tls,
                    session_permits: Arc::new(Semaphore::new(settings.sessions_max.max(1))),
                    pcap_permits: Arc::new(Semaphore::new(settings.pcap_requests_max.max(1))),
                    sessions: Mutex::new(HashMap::new()),
                    table: state::SensorTable::default(),
                    queues: Mutex::new(senders),
                    counters: state::Counters::default(),
                    next_session: AtomicU64::new(1),
                    next_request: AtomicU64::new(1),
                    writers_down: AtomicU64::new(0),
                    stopping: AtomicBool::new(false),
                    stored_tap: std::sync::OnceLock::new(),
                    settings: Settings {
                        sessions_max: settings.sessions_max.max(1),
                        ..settings.clone()
                    },
                });
                let mut threads = Vec::new();
                for (i, rx) in receivers.into_iter().enumerate() {
                    let s = shared.clone();
                    let t = std::thread::Builder::new()
                        .name(format!("collector-db-{i}"))
                        .spawn(move || writer::run(s, rx))
                        .map_err(|source| CollectorError::Thread {
                            thread: format!("collector-db-{i}"),
                            source,
                        })?;
                    threads.push(t);
                }
                let (upkeep_stop, upkeep_rx) = std::sync::mpsc::channel();
                let s = shared.clone();
                std::thread::Builder::new()
                    .name("collector-upkeep".into())
                    .spawn(move || upkeep::run(s, upkeep_rx))
                    .map_err(|source| CollectorError::Thread {
                        thread: "collector-upkeep".into(),
                        source,
                    })?;
                registry
                    .sub_registry_with_prefix("tandem_collector")
                    .register_collector(Box::new(state::Metrics {
                        shared: shared.clone(),
                    }));
                tracing::info!(
                    %addr,
                    tls = shared.tls.is_some(),
                    mutual_tls = !settings.client_ca.is_empty(),
                    socket = %local_path.display(),
                    "collector listening for sensors"
                );
                Ok(Collector {
                    shared,
                    listener,
                    local,
                    local_path,
                    writers: threads,
                    upkeep_stop,
                })
            })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The local socket `tandem cdr pcap` asks through.
    pub fn socket_path(&self) -> &Path {
        &self.local_path
    }

    pub fn handle(&self) -> CollectorHandle {
        CollectorHandle(self.shared.clone())
    }

    /// Serves sensors and the local socket until `stop`, then ends the sessions, lets the
    /// writers commit what is queued (acknowledging nothing more: sensors send it again) and
    /// joins them.
    pub async fn serve(self, stop: impl std::future::Future<Output = ()>) {
        let Collector {
            shared,
            listener,
            local,
            local_path,
            writers,
            upkeep_stop,
        } = self;
        let handle = CollectorHandle(shared.clone());
        let local_task = tokio::spawn(local::serve(local, handle));
        let accept = async {
            loop {
                match listener.accept().await {
                    Ok((tcp, peer)) => {
                        tokio::spawn(session::connection(shared.clone(), tcp, peer));
                    }
                    Err(e) => {
                        // Out of descriptors, for one: wait rather than spin.
                        tracing::warn!(error = %e, "collector: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = stop => {}
        }
        shared.stopping.store(true, Relaxed);
        drop(upkeep_stop);
        local_task.abort();
        let _ = std::fs::remove_file(&local_path);
        let sessions: Vec<_> = shared
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        for s in sessions {
            s.end("the collector is stopping");
        }
        // The queues close once the sessions' senders and ours are gone.
        shared
            .queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let _ = tokio::task::spawn_blocking(move || {
            for w in writers {
                let _ = w.join();
            }
        })
        .await;
        tracing::info!("collector stopped");
    }
}

impl CollectorHandle {
    /// Shows every committed batch to `tap` from now on (only the first tap set is kept).
    pub fn on_stored(&self, tap: Arc<dyn StoredRecords>) {
        let _ = self.0.stored_tap.set(tap);
    }

    /// Every sensor seen since the start: connected, last seen, clock skew, lag, records.
    pub fn sensors(&self) -> Vec<SensorStatus> {
        self.0.sensor_statuses()
    }

    /// Whether `sensor` is one of this collector's sensors (connected now, seen since the
    /// start, or in the sensor list): its calls' pcaps are on it, not here.
    pub async fn knows(&self, sensor: &str) -> bool {
        if sensor.is_empty() || sensor == cdr::writer::DEFAULT_SENSOR {
            return false;
        }
        if self.0.table.get(sensor).is_some() {
            return true;
        }
        let path = self.0.list_path.clone();
        let name = sensor.to_string();
        tokio::task::spawn_blocking(move || SensorList::open(&path).and_then(|l| l.contains(&name)))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false)
    }

    /// The pcap of `call` from `sensor`, over its session.
    pub async fn fetch_pcap(
        &self,
        sensor: &str,
        call: PcapCall,
    ) -> Result<Vec<u8>, PcapFetchError> {
        session::fetch_pcap(&self.0, sensor, call).await
    }
}
