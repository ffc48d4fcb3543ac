//! The archive writer: per-call buffers, per-minute tar files, member records, extraction.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::minute::Minute;
use crate::name::safe_stem;
use crate::pcap::{self, LinkType};
use crate::retention::{self, PruneReport, Retention};
use crate::tar::{self, BLOCK_BYTES, TRAILER_BYTES};
use crate::{ArchiveConfig, ArchiveError, StoreMode};

/// Default limit of [`extract`]: 256 MiB of pcap, after decompression.
pub const DEFAULT_MAX_EXTRACT_BYTES: usize = 256 * 1024 * 1024;

/// One captured packet, as the capture gave it (starting with the call's link-layer header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Capture time, seconds since the Unix epoch.
    pub ts_sec: u32,
    /// Microseconds.
    pub ts_usec: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// Length on the wire (at least `data.len()`; a capture with a snap length may have cut it).
    pub orig_len: u32,
}

/// A call in progress, from [`Archive::start_call`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallHandle(u64);

/// How a member's data is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// The pcap as is (`.pcap`).
    None,
    /// One zstd frame holding the pcap (`.pcap.zst`).
    Zstd,
}

/// Where one stream of one call is: what a CDR records so [`extract`] can read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    /// The tar file (the archive directory joined with `YYYY-MM-DD/HH/MM/sip.tar` or `rtp.tar`).
    pub tar_path: PathBuf,
    /// The member's name in the tar.
    pub member_name: String,
    /// Offset of the member's first data byte in the tar file.
    pub data_offset: u64,
    /// Bytes of member data (compressed size for [`Compression::Zstd`]).
    pub data_len: u64,
    /// How the data is stored.
    pub compression: Compression,
    /// Packets stored.
    pub packets: u64,
    /// Packets dropped because a buffer limit was reached; the stream is truncated if non-zero.
    pub dropped_packets: u64,
}

/// What [`Archive::end_call`] wrote for a call: a record per stream that had packets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallArchive {
    /// The SIP stream, in `sip.tar`.
    pub sip: Option<MemberRecord>,
    /// The RTP stream, in `rtp.tar`.
    pub rtp: Option<MemberRecord>,
}

/// Counters and gauges of an [`Archive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchiveStats {
    /// Calls started and not yet ended.
    pub calls_in_progress: usize,
    /// Pcap bytes buffered for calls in progress (limit [`ArchiveConfig::max_buffered_bytes`]).
    pub buffered_bytes: usize,
    /// Tar files held open (limit [`ArchiveConfig::max_open_tars`]).
    pub open_tars: usize,
    /// Tar files opened since the archive was created (each is one file created or reopened).
    pub tars_opened: u64,
    /// Of those, files that were new (empty when opened): files created in the file system.
    pub tars_created: u64,
    /// Members appended.
    pub members_written: u64,
    /// Bytes written to tar files (headers, data, padding, trailers).
    pub bytes_written: u64,
    /// Packets stored in members.
    pub packets_written: u64,
    /// Packets dropped at a buffer limit.
    pub packets_dropped: u64,
}

#[derive(Default)]
struct Stream {
    pcap: Vec<u8>,
    packets: u64,
    dropped: u64,
}

struct Call {
    stem: String,
    start_unix_sec: i64,
    link_type: LinkType,
    sip: Stream,
    rtp: Stream,
}

struct OpenTar {
    file: File,
    minute: Minute,
    /// Where the next header goes: the start of the end-of-archive blocks.
    end: u64,
    last_used: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sip,
    Rtp,
}

impl Kind {
    fn file_name(self) -> &'static str {
        match self {
            Kind::Sip => "sip.tar",
            Kind::Rtp => "rtp.tar",
        }
    }
}

/// Writes calls' packets into per-minute tar files. Single-threaded: the caller serialises
/// access (one archive thread fed by a bounded queue is the intended use).
pub struct Archive {
    config: ArchiveConfig,
    calls: HashMap<u64, Call>,
    next_handle: u64,
    tars: HashMap<PathBuf, OpenTar>,
    use_clock: u64,
    stats: ArchiveStats,
}

impl Archive {
    /// An archive under `config.dir` (created if missing), readable as `config.access` says.
    /// When the directory itself was wider (an older release's 0755) or of another group, its
    /// minute directories and tar files are narrowed too, before anything is written.
    pub fn new(config: ArchiveConfig) -> Result<Self, ArchiveError> {
        let io = |op| {
            let path = config.dir.clone();
            move |source| ArchiveError::Io { path, op, source }
        };
        let changed =
            filemode::secure_dir(&config.dir, &config.access).map_err(io("create directory"))?;
        if changed {
            // Day, hour and minute directories, and the tars in the minutes.
            filemode::secure_tree(&config.dir, &config.access, 3)
                .map_err(io("set the modes below"))?;
        }
        Ok(Self {
            config,
            calls: HashMap::new(),
            next_handle: 0,
            tars: HashMap::new(),
            use_clock: 0,
            stats: ArchiveStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ArchiveConfig {
        &self.config
    }

    /// Current counters.
    pub fn stats(&self) -> ArchiveStats {
        ArchiveStats {
            calls_in_progress: self.calls.len(),
            open_tars: self.tars.len(),
            ..self.stats
        }
    }

    /// Packets dropped at a buffer limit so far ([`ArchiveStats::packets_dropped`]), cheaply:
    /// compared before and after adding a packet, it tells whether that packet was dropped.
    pub fn packets_dropped(&self) -> u64 {
        self.stats.packets_dropped
    }

    /// Starts buffering a call. `start_unix_sec` (the time of its first packet) chooses the
    /// minute directory; `link_type` is what the call's packets start with.
    pub fn start_call(
        &mut self,
        call_id: &[u8],
        start_unix_sec: i64,
        link_type: LinkType,
    ) -> Result<CallHandle, ArchiveError> {
        if self.calls.len() >= self.config.max_calls {
            return Err(ArchiveError::TooManyCalls {
                max: self.config.max_calls,
            });
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.calls.insert(
            handle,
            Call {
                stem: safe_stem(call_id),
                start_unix_sec,
                link_type,
                sip: Stream::default(),
                rtp: Stream::default(),
            },
        );
        Ok(CallHandle(handle))
    }

    /// Adds a SIP packet to the call.
    pub fn add_sip(&mut self, call: CallHandle, packet: &Packet<'_>) -> Result<(), ArchiveError> {
        let keep = packet.data.len();
        self.add(call, Kind::Sip, packet, keep)
    }

    /// Adds an RTP packet whose RTP header starts `rtp_offset` bytes into `packet.data`. Ignored
    /// under [`StoreMode::SipOnly`]; cut after the RTP header under
    /// [`StoreMode::SipAndRtpHeaders`].
    pub fn add_rtp(
        &mut self,
        call: CallHandle,
        packet: &Packet<'_>,
        rtp_offset: usize,
    ) -> Result<(), ArchiveError> {
        let keep = match self.config.store {
            StoreMode::SipOnly => {
                if self.calls.contains_key(&call.0) {
                    return Ok(());
                }
                return Err(ArchiveError::UnknownCall(call.0));
            }
            StoreMode::SipAndRtpHeaders => match packet.data.get(rtp_offset..) {
                Some(rtp) => rtp_offset + pcap::rtp_header_len(rtp),
                None => packet.data.len(),
            },
            StoreMode::FullRtp => packet.data.len(),
        };
        self.add(call, Kind::Rtp, packet, keep)
    }

    fn add(
        &mut self,
        call: CallHandle,
        kind: Kind,
        packet: &Packet<'_>,
        keep: usize,
    ) -> Result<(), ArchiveError> {
        let snaplen = self.config.snaplen_bytes;
        let c = self
            .calls
            .get_mut(&call.0)
            .ok_or(ArchiveError::UnknownCall(call.0))?;
        let link_type = c.link_type;
        let stream = match kind {
            Kind::Sip => &mut c.sip,
            Kind::Rtp => &mut c.rtp,
        };
        let kept = &packet.data[..keep.min(packet.data.len()).min(snaplen as usize)];
        let header = if stream.pcap.is_empty() {
            pcap::FILE_HEADER_BYTES
        } else {
            0
        };
        let need = header + pcap::RECORD_HEADER_BYTES + kept.len();
        if stream.pcap.len() + need > self.config.max_call_bytes
            || self.stats.buffered_bytes + need > self.config.max_buffered_bytes
        {
            stream.dropped += 1;
            self.stats.packets_dropped += 1;
            return Ok(());
        }
        if header > 0 {
            pcap::write_file_header(&mut stream.pcap, link_type, snaplen);
        }
        let orig_len = packet.orig_len.max(packet.data.len() as u32);
        pcap::write_record(
            &mut stream.pcap,
            packet.ts_sec,
            packet.ts_usec,
            kept,
            orig_len,
        );
        stream.packets += 1;
        self.stats.buffered_bytes += need;
        Ok(())
    }

    /// Ends the call: appends its SIP and RTP streams (those with packets) to the tar files of
    /// its start minute and returns where they are. The call's buffers are released whatever
    /// the outcome. The SIP member is written first: if it is written and the RTP member then
    /// fails, the error is returned and the SIP member stays in its tar without a record.
    pub fn end_call(&mut self, call: CallHandle) -> Result<CallArchive, ArchiveError> {
        let c = self
            .calls
            .remove(&call.0)
            .ok_or(ArchiveError::UnknownCall(call.0))?;
        self.stats.buffered_bytes -= c.sip.pcap.len() + c.rtp.pcap.len();
        let minute = Minute::of_unix_sec(c.start_unix_sec);
        let mtime = c.start_unix_sec.max(0) as u64;
        let mut out = CallArchive::default();
        if c.sip.packets > 0 {
            let name = format!("{}.pcap.zst", c.stem);
            let path = self.tar_path(minute, Kind::Sip);
            let data =
                zstd::bulk::compress(&c.sip.pcap, self.config.zstd_level).map_err(|source| {
                    ArchiveError::Zstd {
                        path: path.clone(),
                        name: name.clone(),
                        source,
                    }
                })?;
            let (data_offset, data_len) = self.append(minute, Kind::Sip, &name, &data, mtime)?;
            self.stats.packets_written += c.sip.packets;
            out.sip = Some(MemberRecord {
                tar_path: path,
                member_name: name,
                data_offset,
                data_len,
                compression: Compression::Zstd,
                packets: c.sip.packets,
                dropped_packets: c.sip.dropped,
            });
        }
        if c.rtp.packets > 0 {
            let name = format!("{}.pcap", c.stem);
            let (data_offset, data_len) =
                self.append(minute, Kind::Rtp, &name, &c.rtp.pcap, mtime)?;
            self.stats.packets_written += c.rtp.packets;
            out.rtp = Some(MemberRecord {
                tar_path: self.tar_path(minute, Kind::Rtp),
                member_name: name,
                data_offset,
                data_len,
                compression: Compression::None,
                packets: c.rtp.packets,
                dropped_packets: c.rtp.dropped,
            });
        }
        Ok(out)
    }

    /// Moves the RTP packets buffered for `from` after those of `into`, and forgets `from`: a
    /// stream archived on its own that turned out to be `into`'s (the SDP announcing it came
    /// after its first packets). Returns the packets moved. Packets over `into`'s limit
    /// ([`ArchiveConfig::max_call_bytes`]) are dropped and counted, as [`Archive::add_rtp`]
    /// would; `from` must have `into`'s link type (else nothing moves and `from` stays).
    pub fn move_rtp(&mut self, from: CallHandle, into: CallHandle) -> Result<u64, ArchiveError> {
        let to_link = match self.calls.get(&into.0) {
            Some(c) if from != into => c.link_type,
            _ => return Err(ArchiveError::UnknownCall(into.0)),
        };
        let from_link = self
            .calls
            .get(&from.0)
            .ok_or(ArchiveError::UnknownCall(from.0))?
            .link_type;
        if from_link != to_link {
            return Err(ArchiveError::LinkTypes {
                from: from_link.0,
                into: to_link.0,
            });
        }
        let f = self.calls.remove(&from.0).expect("looked up above");
        self.stats.buffered_bytes -= f.sip.pcap.len() + f.rtp.pcap.len();
        let records = f
            .rtp
            .pcap
            .get(pcap::FILE_HEADER_BYTES..)
            .unwrap_or_default();
        let max_call_bytes = self.config.max_call_bytes;
        let snaplen = self.config.snaplen_bytes;
        let to = &mut self.calls.get_mut(&into.0).expect("looked up above").rtp;
        to.dropped += f.rtp.dropped;
        if records.is_empty() {
            return Ok(0);
        }
        let header = if to.pcap.is_empty() {
            pcap::FILE_HEADER_BYTES
        } else {
            0
        };
        let need = header + records.len();
        if to.pcap.len() + need > max_call_bytes
            || self.stats.buffered_bytes + need > self.config.max_buffered_bytes
        {
            to.dropped += f.rtp.packets;
            self.stats.packets_dropped += f.rtp.packets;
            return Ok(0);
        }
        if header > 0 {
            pcap::write_file_header(&mut to.pcap, to_link, snaplen);
        }
        to.pcap.extend_from_slice(records);
        to.packets += f.rtp.packets;
        self.stats.buffered_bytes += need;
        Ok(f.rtp.packets)
    }

    /// Forgets a call in progress without writing it, releasing its buffers; returns the packets
    /// that were buffered. For calls that will never be ended (their packets were attributed to
    /// a call the capture has already closed).
    pub fn discard_call(&mut self, call: CallHandle) -> Result<u64, ArchiveError> {
        let c = self
            .calls
            .remove(&call.0)
            .ok_or(ArchiveError::UnknownCall(call.0))?;
        self.stats.buffered_bytes -= c.sip.pcap.len() + c.rtp.pcap.len();
        Ok(c.sip.packets + c.rtp.packets)
    }

    /// Ends every call in progress (at shutdown), returning their records in no order.
    pub fn end_all(&mut self) -> Vec<(CallHandle, Result<CallArchive, ArchiveError>)> {
        let handles: Vec<u64> = self.calls.keys().copied().collect();
        handles
            .into_iter()
            .map(|h| (CallHandle(h), self.end_call(CallHandle(h))))
            .collect()
    }

    /// Flushes every open tar file to disk (fsync) and closes them.
    pub fn sync_and_close_tars(&mut self) -> Result<(), ArchiveError> {
        for (path, t) in self.tars.drain() {
            t.file.sync_all().map_err(|source| ArchiveError::Io {
                path,
                op: "fsync",
                source,
            })?;
        }
        Ok(())
    }

    /// Deletes whole minute directories older than `policy.max_age_sec` or, oldest first, beyond
    /// `policy.max_total_bytes`. Never deletes the minute of `now_unix_sec`, a minute with a
    /// call in progress, or a minute whose tar file is open.
    pub fn prune(
        &mut self,
        policy: &Retention,
        now_unix_sec: i64,
    ) -> Result<PruneReport, ArchiveError> {
        let mut protected: HashSet<Minute> = self.tars.values().map(|t| t.minute).collect();
        protected.extend(
            self.calls
                .values()
                .map(|c| Minute::of_unix_sec(c.start_unix_sec)),
        );
        protected.insert(Minute::of_unix_sec(now_unix_sec));
        retention::prune(&self.config.dir, policy, now_unix_sec, &protected)
    }

    fn tar_path(&self, minute: Minute, kind: Kind) -> PathBuf {
        self.config
            .dir
            .join(minute.rel_dir())
            .join(kind.file_name())
    }

    /// Appends one member; returns its data offset and length.
    fn append(
        &mut self,
        minute: Minute,
        kind: Kind,
        name: &str,
        data: &[u8],
        mtime: u64,
    ) -> Result<(u64, u64), ArchiveError> {
        let path = self.tar_path(minute, kind);
        let header =
            tar::header(name, data.len() as u64, mtime).map_err(|source| ArchiveError::Tar {
                path: path.clone(),
                source,
            })?;
        self.use_clock += 1;
        let clock = self.use_clock;
        if !self.tars.contains_key(&path) {
            let t = self.open_tar(&path, minute)?;
            self.tars.insert(path.clone(), t);
        }
        let t = self.tars.get_mut(&path).expect("inserted above");
        t.last_used = clock;
        let pad = tar::padding(data.len() as u64);
        let mut block = Vec::with_capacity(BLOCK_BYTES + data.len() + pad + TRAILER_BYTES);
        block.extend_from_slice(&header);
        block.extend_from_slice(data);
        block.resize(block.len() + pad + TRAILER_BYTES, 0);
        if let Err(source) = t.file.write_all_at(&block, t.end) {
            // A partial member (disk full): cut it off and restore the trailer, so the file stays
            // a valid tar of the members before it; the next append reopens the file.
            let _ = t
                .file
                .set_len(t.end)
                .and_then(|()| t.file.write_all_at(&[0u8; TRAILER_BYTES], t.end));
            self.tars.remove(&path);
            return Err(ArchiveError::Io {
                path,
                op: "write member",
                source,
            });
        }
        let data_offset = t.end + BLOCK_BYTES as u64;
        t.end += (BLOCK_BYTES + data.len() + pad) as u64;
        self.stats.members_written += 1;
        self.stats.bytes_written += block.len() as u64;
        Ok((data_offset, data.len() as u64))
    }

    fn open_tar(&mut self, path: &Path, minute: Minute) -> Result<OpenTar, ArchiveError> {
        while self.tars.len() >= self.config.max_open_tars.max(1) {
            let oldest = self
                .tars
                .iter()
                .min_by_key(|(_, t)| t.last_used)
                .map(|(p, _)| p.clone());
            match oldest {
                Some(p) => {
                    self.tars.remove(&p);
                }
                None => break,
            }
        }
        let dir = path.parent().expect("tar paths have a minute directory");
        let access = &self.config.access;
        filemode::create_dir_all(dir, access).map_err(|source| ArchiveError::Io {
            path: dir.to_path_buf(),
            op: "create directory",
            source,
        })?;
        let file = filemode::open_rw(path, access).map_err(|source| ArchiveError::Io {
            path: path.to_path_buf(),
            op: "open",
            source,
        })?;
        let len = file
            .metadata()
            .map_err(|source| ArchiveError::Io {
                path: path.to_path_buf(),
                op: "stat",
                source,
            })?
            .len();
        let end = if len == 0 {
            self.stats.tars_created += 1;
            0
        } else {
            let trailer = TRAILER_BYTES as u64;
            if len < trailer || len % BLOCK_BYTES as u64 != 0 {
                return Err(ArchiveError::NotOurTar {
                    path: path.to_path_buf(),
                });
            }
            let mut tail = [0u8; TRAILER_BYTES];
            file.read_exact_at(&mut tail, len - trailer)
                .map_err(|source| ArchiveError::Io {
                    path: path.to_path_buf(),
                    op: "read trailer",
                    source,
                })?;
            if tail.iter().any(|&b| b != 0) {
                return Err(ArchiveError::NotOurTar {
                    path: path.to_path_buf(),
                });
            }
            len - trailer
        };
        self.stats.tars_opened += 1;
        Ok(OpenTar {
            file,
            minute,
            end,
            last_used: 0,
        })
    }
}

/// One call's stream as pcap bytes, read with one positioned read of the member's header and
/// data, checked against the record, and decompressed if zstd. At most
/// [`DEFAULT_MAX_EXTRACT_BYTES`].
pub fn extract(record: &MemberRecord) -> Result<Vec<u8>, ArchiveError> {
    extract_with_limit(record, DEFAULT_MAX_EXTRACT_BYTES)
}

/// [`extract`] with a limit on the stored and on the decompressed size, in bytes.
pub fn extract_with_limit(
    record: &MemberRecord,
    max_bytes: usize,
) -> Result<Vec<u8>, ArchiveError> {
    let path = &record.tar_path;
    let too_large = || ArchiveError::TooLargeToExtract {
        path: path.clone(),
        name: record.member_name.clone(),
        max_bytes,
    };
    if record.data_len > max_bytes as u64 {
        return Err(too_large());
    }
    let mismatch = |found: (String, u64)| ArchiveError::MemberMismatch {
        path: path.clone(),
        offset: record.data_offset,
        expected: (record.member_name.clone(), record.data_len),
        found,
    };
    let Some(header_at) = record.data_offset.checked_sub(BLOCK_BYTES as u64) else {
        return Err(mismatch((String::new(), 0)));
    };
    let file = File::open(path).map_err(|source| ArchiveError::Io {
        path: path.clone(),
        op: "open",
        source,
    })?;
    let mut buf = vec![0u8; BLOCK_BYTES + record.data_len as usize];
    file.read_exact_at(&mut buf, header_at)
        .map_err(|source| ArchiveError::Io {
            path: path.clone(),
            op: "read member",
            source,
        })?;
    let entry = tar::parse_header(&buf[..BLOCK_BYTES]).map_err(|_| mismatch((String::new(), 0)))?;
    if entry.name != record.member_name || entry.size != record.data_len {
        return Err(mismatch((entry.name, entry.size)));
    }
    buf.drain(..BLOCK_BYTES);
    match record.compression {
        Compression::None => Ok(buf),
        Compression::Zstd => {
            let zerr = |source| ArchiveError::Zstd {
                path: path.clone(),
                name: record.member_name.clone(),
                source,
            };
            let decoder = zstd::stream::read::Decoder::new(&buf[..]).map_err(zerr)?;
            let mut out = Vec::new();
            decoder
                .take(max_bytes as u64 + 1)
                .read_to_end(&mut out)
                .map_err(zerr)?;
            if out.len() > max_bytes {
                return Err(too_large());
            }
            Ok(out)
        }
    }
}
