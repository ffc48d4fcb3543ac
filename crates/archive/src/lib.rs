//! The packet archive: each call's packets as one pcap stream, stored as a member of one tar file
//! per minute of call start, `DIR/YYYY-MM-DD/HH/MM/sip.tar` and `rtp.tar` (UTC). Writing one file
//! per call costs an IO operation per call; grouping calls into a tar per minute keeps the number
//! of files created to two a minute whatever the call rate.
//!
//! A call's packets are buffered in memory while the call runs; when it ends, its SIP stream
//! (zstd-compressed, `CALLID.pcap.zst`) and RTP stream (`CALLID.pcap`) are each appended to the
//! tar of the call's start minute in one positioned write, followed by the end-of-archive blocks,
//! so the tar is valid after every member. Calls may end in any order of their start minutes
//! (a capture read out of time order): a minute's tar that was closed (at most
//! [`ArchiveConfig::max_open_tars`] stay open) is reopened and appended to. [`Archive::end_call`] returns a [`MemberRecord`] per
//! stream (tar path, member name, data offset and length) for the call's CDR, and [`extract`]
//! reads one call back with a single positioned read.
//!
//! Never: lets a Call-ID choose a path (member names are confined by [`safe_stem`]: no `/`, no
//! leading `.`, no control characters, at most 100 bytes, long ones hashed); buffers without
//! bound (per call [`ArchiveConfig::max_call_bytes`], in total
//! [`ArchiveConfig::max_buffered_bytes`], [`ArchiveConfig::max_calls`] calls and
//! [`ArchiveConfig::max_open_tars`] open files; packets over a limit are dropped and counted,
//! and the member is marked truncated); appends to an existing file that does not end in the
//! tar end-of-archive blocks (it is refused and left alone); deletes anything but whole minute
//! directories named `YYYY-MM-DD/HH/MM`, or the minute being written; lets another user read
//! it (directories 0700 and tars 0600 from their first byte whatever the umask, or 02750 and
//! 0640 for the one group [`ArchiveConfig::access`] names; an older release's 0755/0644
//! archive is narrowed by [`Archive::new`], once: it walks the tree only when the archive's own
//! directory was wrong). Files are written but not
//! fsynced per member: the archive is evidence, not acknowledged data
//! ([`Archive::sync_and_close_tars`] at shutdown). Two calls with the same Call-ID starting in
//! the same minute get members of the same name; their records' offsets tell them apart.
//!
//! ```
//! use archive::{Archive, ArchiveConfig, LinkType, Packet, extract};
//!
//! let dir = tempfile::tempdir()?;
//! let mut archive = Archive::new(ArchiveConfig::new(dir.path()))?;
//! // 2026-11-21T08:09:00Z: the call's members go to DIR/2026-11-21/08/09/{sip,rtp}.tar.
//! let call = archive.start_call(b"a84b4c76e66710@pc33.atlanta.com", 1_795_248_540, LinkType::RAW)?;
//! let ip_packet = [0x45u8; 40]; // a raw IP packet as captured
//! archive.add_sip(call, &Packet { ts_sec: 1_795_248_540, ts_usec: 0, data: &ip_packet, orig_len: 40 })?;
//! let records = archive.end_call(call)?;
//! let sip = records.sip.expect("the call had SIP packets");
//! assert!(sip.tar_path.ends_with("2026-11-21/08/09/sip.tar"));
//! assert_eq!(sip.member_name, "a84b4c76e66710@pc33.atlanta.com.pcap.zst");
//! let pcap = extract(&sip)?; // one positioned read, then zstd
//! assert_eq!(pcap.len(), 24 + 16 + 40);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Start reading at [`Archive`] ([`Archive::start_call`], [`Archive::add_sip`],
//! [`Archive::add_rtp`], [`Archive::end_call`]), then [`extract`] and [`Archive::prune`]
//! (retention by age and total size, [`Retention`]). [`pcap`] and [`tar`] are the two file formats,
//! written here from their specifications.

mod minute;
mod name;
pub mod pcap;
mod retention;
pub mod tar;
mod writer;

use std::path::PathBuf;

pub use minute::Minute;
pub use name::{KEEP_PREFIX_BYTES, MAX_ENCODED_CALL_ID_BYTES, MAX_MEMBER_NAME_BYTES, safe_stem};
pub use pcap::LinkType;
pub use retention::{PruneReport, Retention};
pub use writer::{
    Archive, ArchiveStats, CallArchive, CallHandle, Compression, DEFAULT_MAX_EXTRACT_BYTES,
    MemberRecord, Packet, extract, extract_with_limit,
};

/// What the archive keeps of each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreMode {
    /// SIP only; RTP packets are ignored.
    SipOnly,
    /// SIP, and RTP packets cut after the RTP header (12 bytes, CSRCs and header extension): enough
    /// for sequence, timing, loss and jitter analysis, without the audio.
    #[default]
    SipAndRtpHeaders,
    /// SIP and whole RTP packets (audio can be replayed).
    FullRtp,
}

/// Default for [`ArchiveConfig::max_call_bytes`]: 128 MiB of pcap per stream (SIP or RTP) of
/// one call. An hour of a G.711 call both ways is about 82 MB with whole RTP packets and 25 MB
/// with RTP headers only, so a call of an hour and a half is kept whole in either mode.
pub const DEFAULT_MAX_CALL_BYTES: usize = 128 * 1024 * 1024;
/// Default for [`ArchiveConfig::max_buffered_bytes`]: 512 MiB across all calls in progress.
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 512 * 1024 * 1024;
/// Default for [`ArchiveConfig::max_calls`]: calls in progress.
pub const DEFAULT_MAX_CALLS: usize = 100_000;
/// Default for [`ArchiveConfig::max_open_tars`]: tar files held open.
pub const DEFAULT_MAX_OPEN_TARS: usize = 16;
/// Default for [`ArchiveConfig::zstd_level`].
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// How the archive is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveConfig {
    /// The archive's root directory; minute directories are created under it.
    pub dir: PathBuf,
    /// What to keep.
    pub store: StoreMode,
    /// Snapshot length written in each pcap header; longer packets are cut to it. Bytes.
    pub snaplen_bytes: u32,
    /// Most pcap bytes buffered for one stream (SIP or RTP) of one call; later packets of that
    /// stream are dropped and counted. Default [`DEFAULT_MAX_CALL_BYTES`].
    pub max_call_bytes: usize,
    /// Most pcap bytes buffered across all calls in progress. Default
    /// [`DEFAULT_MAX_BUFFERED_BYTES`].
    pub max_buffered_bytes: usize,
    /// Most calls in progress; [`Archive::start_call`] refuses more. Default [`DEFAULT_MAX_CALLS`].
    pub max_calls: usize,
    /// Most tar files held open; the least recently written is closed first. Default
    /// [`DEFAULT_MAX_OPEN_TARS`].
    pub max_open_tars: usize,
    /// zstd level for SIP members (1 fastest .. 19). Default [`DEFAULT_ZSTD_LEVEL`].
    pub zstd_level: i32,
    /// Who may read the archive: its owner only (directories 0700, tar files 0600: they hold
    /// calls' signalling and audio), or also one group (02750 and 0640), for Asterisk's user.
    /// An older release's wider archive is narrowed by [`Archive::new`].
    pub access: filemode::Access,
}

impl ArchiveConfig {
    /// Defaults for an archive under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            store: StoreMode::default(),
            snaplen_bytes: pcap::DEFAULT_SNAPLEN_BYTES,
            max_call_bytes: DEFAULT_MAX_CALL_BYTES,
            max_buffered_bytes: DEFAULT_MAX_BUFFERED_BYTES,
            max_calls: DEFAULT_MAX_CALLS,
            max_open_tars: DEFAULT_MAX_OPEN_TARS,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            access: filemode::Access::Private,
        }
    }
}

/// Why an archive operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file or directory operation failed.
    #[error("archive {path}: {op}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// [`ArchiveConfig::max_calls`] calls are in progress.
    #[error("archive already holds {max} calls in progress (max_calls); end some first")]
    TooManyCalls {
        /// The limit.
        max: usize,
    },
    /// The handle is not a call in progress (never started, or already ended).
    #[error("archive has no call in progress with handle {0}")]
    UnknownCall(u64),
    /// [`Archive::move_rtp`] between calls whose packets start with different link-layer
    /// headers: they cannot share one pcap.
    #[error("archive: cannot move packets of link type {from} into a call of link type {into}")]
    LinkTypes {
        /// The moved call's link type.
        from: u32,
        /// The receiving call's.
        into: u32,
    },
    /// An existing tar file does not end with the end-of-archive blocks, so it was not written by
    /// this archive (or was cut short); it is left alone.
    #[error("archive {path}: existing file does not end with a tar trailer; not appending to it")]
    NotOurTar {
        /// The file.
        path: PathBuf,
    },
    /// A tar header could not be written or read.
    #[error("archive {path}: {source}")]
    Tar {
        /// The tar file.
        path: PathBuf,
        /// What was wrong.
        source: tar::TarError,
    },
    /// The header before a recorded member does not name that member (the file was replaced or
    /// pruned and rewritten).
    #[error("archive {path} at offset {offset}: expected member {expected:?}, found {found:?}")]
    MemberMismatch {
        /// The tar file.
        path: PathBuf,
        /// The recorded data offset.
        offset: u64,
        /// The recorded name and length.
        expected: (String, u64),
        /// What the header says.
        found: (String, u64),
    },
    /// A member larger than the extraction limit, before or after decompression.
    #[error(
        "archive {path}: member {name} is larger than the extraction limit of {max_bytes} bytes"
    )]
    TooLargeToExtract {
        /// The tar file.
        path: PathBuf,
        /// The member.
        name: String,
        /// The limit.
        max_bytes: usize,
    },
    /// zstd compression or decompression failed.
    #[error("archive {path}: member {name}: zstd: {source}")]
    Zstd {
        /// The tar file.
        path: PathBuf,
        /// The member.
        name: String,
        /// The error.
        source: std::io::Error,
    },
}
