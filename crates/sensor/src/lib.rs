//! A call-monitoring sensor, in the class of VoIPmonitor's: packets in from capture files, a live
//! interface or HEP; calls, RTP stream quality and registrations out, to a CDR database (with a
//! journal in front of it), a per-minute packet archive, an observer (the `--json` lines) and a
//! status line with its metrics.
//!
//! ```no_run
//! use sensor::{CdrConfig, Sensor, SensorConfig, Source};
//!
//! # fn main() -> Result<(), sensor::SensorError> {
//! let mut config = SensorConfig::new(Source::Files(vec!["calls.pcap".into()]));
//! config.cdr = Some(CdrConfig::sqlite("tandem-data/cdr.sqlite3"));
//! let handle = Sensor::start(config, None)?;
//! // handle.stop() from a signal handler's thread ends a live or HEP source.
//! let report = handle.join()?;
//! println!("{} calls in {} packets", report.totals.calls, report.packets);
//! # Ok(()) }
//! ```
//!
//! Data flows one way: source → monitor (`monitor` crate) → sinks (archive, observer, CDR
//! writer), and each part registers its figures on the status board. Start reading at
//! `pipeline.rs` ([`Sensor::start`] and the sensor's thread), then `live.rs` (capture threads
//! and the bounded frame buffer), `archive_tap.rs` (the monitor's taps and the archive thread),
//! `cdr_sink.rs` and `status.rs`; `uplink.rs` is the link to a collector (`--collector`).
//!
//! What it never does: keep process-wide state or install signal handlers (the binary turns
//! signals into [`SensorHandle::stop`]); print to stdout or stderr (the binary prints what
//! [`SensorHandle`] and [`Report`] tell, and logs go through `tracing`); wait for the CDR
//! database or, with a live source, for the archive (both are bounded queues that count what
//! they drop); let a bad packet or datagram end the capture.

pub mod alerts_tap;
mod archive_tap;
pub mod call_pcap;
mod cdr_sink;
pub mod config;
mod error;
mod feed;
pub mod hep;
pub mod hep_send;
pub mod json;
pub mod live;
mod pipeline;
pub mod records;
pub mod replay;
pub mod status;
pub mod table;
pub mod uplink;

pub use alerts_tap::{AlertOutput, SensorAlerts};

/// A batch's records as the CDR rows the writer stores (no archive locations), for a
/// benchmark of what reads them.
pub struct CdrRows;

impl CdrRows {
    pub fn rows(part: &monitor::Analysis) -> Vec<cdr::CdrRecord> {
        cdr_sink::CdrSink::rows(part, None)
    }
}
pub use archive::DEFAULT_MAX_CALL_BYTES as ARCHIVE_CALL_MAX_BYTES;
pub use archive_tap::{ArchiveGauges, ArchiveStatus, compression_name};
pub use cdr_sink::{collector_journal, default_journal};
pub use config::{
    ArchiveSettings, CdrConfig, LiveConfig, SensorConfig, Source, StatusConfig, StoreMode,
};
pub use error::SensorError;
pub use feed::StopSignal;
/// The calls in progress a running sensor publishes ([`SensorHandle::live_calls`]).
pub use monitor::{LiveCalls, LiveCallsSnapshot};
pub use pipeline::{FileProgress, LiveDescription, Report, Sensor, SensorHandle, Totals};

/// Sees every batch of closed records before the CDR writer does (the `--json` output is one).
/// Called on the sensor's thread; an error ends the sensor.
pub trait RecordObserver: Send {
    fn records(&mut self, part: &monitor::Analysis) -> std::io::Result<()>;
    /// Alerts that fired or resolved on this batch (after its records).
    fn alerts(&mut self, _alerts: &[alerts::Alert]) -> std::io::Result<()> {
        Ok(())
    }
}
