//! What can stop a sensor from starting, or end it early. Each message names the input (file,
//! address, interface, directory) and what was wrong with it.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum SensorError {
    /// A setting that cannot work, named as `tandem capture` spells it.
    #[error("{0}")]
    Config(String),
    /// A capture file that cannot be read at all: missing, unreadable, or not a capture.
    #[error(transparent)]
    Input(monitor::pcap::CaptureError),
    #[error("cannot listen for HEP on {addr}: {source}")]
    HepBind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("receiving HEP: {0}")]
    HepReceive(std::io::Error),
    #[error("cannot capture on {interface}: {source}")]
    Live {
        interface: String,
        source: afpacket::Error,
    },
    #[error("capture filter: {0}")]
    Filter(#[from] afpacket::filter::FilterError),
    #[error("a capture thread on {interface}: {source}")]
    CaptureThread {
        interface: String,
        source: afpacket::Error,
    },
    #[error("creating {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot open the archive directory {dir}: {source}")]
    Archive {
        dir: String,
        source: archive::ArchiveError,
    },
    #[error(transparent)]
    CdrJournal(#[from] cdr::JournalError),
    #[error(transparent)]
    Cdr(#[from] cdr::CdrError),
    #[error(transparent)]
    Metrics(#[from] metrics_http::HttpError),
    /// The observer of the records (the `--json` output) failed, e.g. its pipe closed.
    #[error("writing the records: {0}")]
    Output(std::io::Error),
    #[error("cannot start the {thread} thread: {source}")]
    Thread {
        thread: &'static str,
        source: std::io::Error,
    },
    #[error("the sensor's thread panicked")]
    Panicked,
}
