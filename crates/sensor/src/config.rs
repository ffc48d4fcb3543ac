//! What a sensor is built from: one source, the monitor's limits, and the sinks to feed. Plain
//! values with the defaults of `tandem capture`; the binary fills them from its command line or
//! from `[capture]` in `tandem.toml`.

use std::net::SocketAddr;
use std::path::PathBuf;

pub use archive::StoreMode;
pub use cdr::writer::{DEFAULT_JOURNAL_BYTES_MAX, DEFAULT_QUEUE_RECORDS_MAX};
pub use monitor::MonitorConfig;

/// The default pcap-filter of a live capture: UDP, and TCP on the SIP ports, with or without a
/// VLAN tag, and tunnels.
pub use afpacket::filter::DEFAULT_FILTER;

/// Everything a [`crate::Sensor`] needs.
#[derive(Debug, Clone)]
pub struct SensorConfig {
    pub source: Source,
    /// Calls tracked at once and the other limits of the analysis.
    pub monitor: MonitorConfig,
    /// Call shards (threads) behind the decoding thread; 1 runs everything on one thread.
    pub shards: usize,
    /// Where CDRs go; `None`: nowhere.
    pub cdr: Option<CdrConfig>,
    /// Each call's packets into per-minute tar files; `None`: no archive.
    pub archive: Option<ArchiveSettings>,
    pub status: StatusConfig,
    /// HEP: the authentication key and bounds of `--hep-listen`, and `--hep-send`.
    pub hep: crate::hep::HepSettings,
    /// Who may read the CDR database (SQLite) and the archive: their owner only, or also one
    /// group (files 0640, directories 02750 of that group). The CDR journal stays the owner's.
    pub files: filemode::Access,
}

impl SensorConfig {
    /// A sensor reading `source` with `tandem capture`'s defaults and no sink.
    pub fn new(source: Source) -> SensorConfig {
        SensorConfig {
            source,
            monitor: MonitorConfig::default(),
            shards: 1,
            cdr: None,
            archive: None,
            status: StatusConfig::default(),
            hep: crate::hep::HepSettings::default(),
            files: filemode::Access::Private,
        }
    }
}

/// Where packets come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Capture files (pcap or pcapng, optionally gzip-compressed), read in order. The sensor
    /// ends at their end.
    Files(Vec<PathBuf>),
    /// HEP v3 over UDP and TCP on the same address, until stopped (or `max_packets` packets,
    /// for tests and trials); its key and bounds are in [`SensorConfig::hep`].
    Hep {
        listen: SocketAddr,
        max_packets: Option<u64>,
    },
    /// A live interface, until stopped (or one of its limits).
    Interface(LiveConfig),
}

impl Source {
    /// True for sources that run until stopped: their archive taps never wait for room.
    pub fn is_live(&self) -> bool {
        !matches!(self, Source::Files(_))
    }
}

/// A live capture (AF_PACKET, TPACKET_V3).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveConfig {
    pub interface: String,
    /// Kernel ring per capture thread, MiB.
    pub ring_mib: usize,
    /// pcap-filter expression; empty captures everything.
    pub filter: String,
    /// Also receive frames addressed to other hosts (a mirror or SPAN port).
    pub promiscuous: bool,
    /// Capture threads sharing the interface by flow hash (PACKET_FANOUT), 1 to 64.
    pub capture_threads: usize,
    /// The bounded buffer between the capture threads and the analysis, MiB.
    pub buffer_mib: usize,
    /// Stop after analysing this many frames.
    pub max_packets: Option<u64>,
    /// Stop after this many seconds.
    pub duration_s: Option<u64>,
}

impl LiveConfig {
    /// `interface` with `tandem capture`'s defaults.
    pub fn new(interface: &str) -> LiveConfig {
        LiveConfig {
            interface: interface.to_string(),
            ring_mib: 64,
            filter: DEFAULT_FILTER.to_string(),
            promiscuous: false,
            capture_threads: 1,
            buffer_mib: 64,
            max_packets: None,
            duration_s: None,
        }
    }
}

/// The CDR database and the journal in front of it.
#[derive(Debug, Clone, PartialEq)]
pub struct CdrConfig {
    /// The SQLite file (its directory is created), and where the journal goes by default.
    pub db: PathBuf,
    /// PostgreSQL instead (libpq-style `host=... user=... dbname=...`).
    pub postgres: Option<String>,
    /// The journal of CDRs the database cannot take yet; default beside `db`
    /// ([`crate::default_journal`]).
    pub journal: Option<PathBuf>,
    pub journal_bytes_max: u64,
    /// CDRs queued for the database at most; past it the capture thread journals them itself.
    pub queue_records_max: usize,
    /// The sensor's name, the first part of each record's uid and its `sensor` column
    /// (`cdr::writer::DEFAULT_SENSOR`, `local`, unless given).
    pub sensor_id: String,
    /// Deliver the CDRs to a collector instead of a database here (`--collector`); the journal
    /// then defaults to `cdr-collector.journal` beside `db`.
    pub collector: Option<crate::uplink::CollectorLink>,
    /// The groups whose report rollups the database keeps besides `all` (tandem.toml's
    /// `[[groups]]`); a collector keeps its own.
    pub groups: std::sync::Arc<groups::Groups>,
}

impl CdrConfig {
    /// SQLite at `db`, with the default journal and bounds.
    pub fn sqlite(db: impl Into<PathBuf>) -> CdrConfig {
        CdrConfig {
            db: db.into(),
            postgres: None,
            journal: None,
            journal_bytes_max: DEFAULT_JOURNAL_BYTES_MAX,
            queue_records_max: DEFAULT_QUEUE_RECORDS_MAX,
            sensor_id: cdr::writer::DEFAULT_SENSOR.to_string(),
            collector: None,
            groups: Default::default(),
        }
    }
}

/// The per-minute packet archive.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveSettings {
    pub dir: PathBuf,
    pub store: StoreMode,
    /// Delete minute directories that ended more than this long before the newest packet.
    pub max_age_sec: Option<u64>,
    /// Delete the oldest minute directories while the archive holds more than this.
    pub max_total_bytes: Option<u64>,
    /// Most bytes of one call's SIP, and of its RTP, kept in memory until it ends and
    /// archived; later packets are dropped and counted in the call's record
    /// (`archive::DEFAULT_MAX_CALL_BYTES` unless set).
    pub max_call_bytes: usize,
}

/// The status line and the capture's own metrics endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusConfig {
    /// Seconds between status lines in the log; 0: none.
    pub interval_s: u64,
    /// Serve `tandem_capture_*` metrics here. Keep it on loopback: no authentication.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for StatusConfig {
    fn default() -> Self {
        StatusConfig {
            interval_s: 10,
            metrics_listen: None,
        }
    }
}
