//! The CDR journal: records the database could not take, kept in a local file until it can.
//!
//! Format: the 8-byte header [`MAGIC`] (`TNDMCDR` and the format version, `1`, as an ASCII
//! digit; a journal of a newer version is refused, never misread), then one entry per
//! [`CdrRecord`]:
//!
//! ```text
//! u32 LE  payload length (at most ENTRY_BYTES_MAX)
//! u32 LE  CRC-32 (IEEE) of the payload
//! ...     payload: the record as JSON (serde), so new fields of CdrCall/CdrStream flow through
//! ```
//!
//! Entries are appended and fsynced (`fdatasync`) before [`Journal::append`] returns: only then
//! do the records count as safe. A crash can leave a torn last entry (a short frame header, a
//! payload running past the end of the file, a checksum that does not match). Reading stops at
//! the first damaged entry with a warning naming the file, the byte offset and what is wrong;
//! [`Journal::open`] cuts the damaged tail off, so that new entries are never written behind
//! bytes that cannot be read. Replay reads entries in order ([`Journal::read_batch`]), and once
//! everything has been stored the file is truncated back to its header ([`Journal::consume`]).
//!
//! One process at a time: the file is locked (`flock`) while a [`Journal`] holds it. Its size is
//! bounded by `bytes_max`; an append that does not fit fails with [`JournalError::Full`].

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::CdrRecord;

/// The first bytes of a journal file: [`MAGIC_PREFIX`], then the format version as an ASCII
/// digit.
pub const MAGIC: &[u8; 8] = b"TNDMCDR1";
/// What every CDR journal starts with, whatever its version.
pub const MAGIC_PREFIX: &[u8; 7] = b"TNDMCDR";
/// The journal format this build writes, and the highest it reads: `MAGIC`'s last byte, `'1'`.
/// A later format is the next byte value (`'2'`, ...); an older build refuses it
/// ([`JournalError::Format`]) rather than misread its entries.
pub const FORMAT_VERSION: u32 = 1;
const _: () = assert!(MAGIC[7] == b'0' + FORMAT_VERSION as u8);
/// Bytes before the first entry.
pub const HEADER_BYTES: u64 = MAGIC.len() as u64;
/// Bytes of an entry's frame header: length and checksum.
const FRAME_BYTES: u64 = 8;
/// Largest payload of one entry (one record: a call with its streams takes a few KiB). A length
/// above it is read as damage, so a corrupt length never makes a reader allocate gigabytes.
pub const ENTRY_BYTES_MAX: u32 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("CDR journal {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "CDR journal {path} is not a Tandem CDR journal (it does not start with \"TNDMCDR1\"); \
         move it away or choose another journal path"
    )]
    NotAJournal { path: String },
    /// A journal in a newer format than this build reads: named with both versions and what
    /// to do; nothing of it is read or changed.
    #[error(transparent)]
    Format(#[from] fileformat::FormatError),
    #[error("CDR journal {path} is in use by another process")]
    Locked { path: String },
    #[error(
        "CDR journal {path} is full: {bytes} bytes used, {needed} more needed, limit {bytes_max} \
         bytes (journal_bytes_max)"
    )]
    Full {
        path: String,
        bytes: u64,
        needed: u64,
        bytes_max: u64,
    },
}

/// Where and why reading stopped before the end of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Damage {
    /// Byte offset of the first damaged entry.
    pub offset: u64,
    /// Bytes from there to the end of the file.
    pub bytes: u64,
    pub reason: String,
}

/// What [`Journal::open`] found in the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalOpened {
    /// Complete entries waiting to be replayed (left by an earlier run).
    pub records: u64,
    /// Their bytes, frames included.
    pub bytes: u64,
    /// A damaged tail, cut off.
    pub damage: Option<Damage>,
}

/// Records read for replay, and where the next read starts once they are stored.
#[derive(Debug, Default)]
pub struct JournalBatch {
    pub records: Vec<CdrRecord>,
    /// Entries read, including any that did not decode.
    pub entries: u64,
    /// Entries whose checksum is right but whose JSON is not a record (written by another
    /// program?): skipped with a warning, and counted as dropped by the writer.
    pub undecodable: u64,
    pub next_offset: u64,
}

/// Outcome of [`Journal::append`].
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Appended {
    pub records: u64,
    pub bytes: u64,
    /// Records over [`ENTRY_BYTES_MAX`] once serialized: not journaled.
    pub too_large: u64,
}

/// An open, locked journal file.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// End of the last complete entry: where the next append goes.
    end: u64,
    /// Start of the first entry not yet replayed.
    read_offset: u64,
    pending_records: u64,
    bytes_max: u64,
}

enum Entry {
    Record(Vec<u8>, u64),
    End,
    Damaged(Damage),
}

/// Refuses a file that is not a CDR journal, or one in a newer format than [`FORMAT_VERSION`].
fn check_header(file: &File, path: &Path, len: u64) -> Result<(), JournalError> {
    let mut magic = [0u8; 8];
    if len < HEADER_BYTES
        || file.read_exact_at(&mut magic, 0).is_err()
        || magic[..7] != MAGIC_PREFIX[..]
        || magic[7] < b'1'
    {
        return Err(JournalError::NotAJournal {
            path: path.display().to_string(),
        });
    }
    let version = u32::from(magic[7] - b'0');
    if version > FORMAT_VERSION {
        return Err(fileformat::FormatError::TooNew {
            path: path.to_path_buf(),
            kind: "CDR journal",
            found: i64::from(version),
            known: FORMAT_VERSION,
        }
        .into());
    }
    Ok(())
}

impl Journal {
    /// Opens the journal at `path`, creating it (and fsyncing its directory) if missing, and
    /// counts the entries a previous run left. A damaged tail is reported and cut off.
    pub fn open(path: &Path, bytes_max: u64) -> Result<(Journal, JournalOpened), JournalError> {
        let name = path.display().to_string();
        let io = |source| JournalError::Io {
            path: name.clone(),
            source,
        };
        // Calls' numbers and addresses: its owner's alone (0600) from the first byte, and an
        // older release's 0644 journal is narrowed here.
        let file = filemode::open_rw(path, &filemode::Access::Private).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(JournalError::Locked { path: name });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            file.write_all_at(MAGIC, 0).map_err(io)?;
            file.sync_all().map_err(io)?;
            sync_parent(path).map_err(io)?;
        } else {
            check_header(&file, path, len)?;
        }
        let mut journal = Journal {
            path: path.to_path_buf(),
            file,
            end: HEADER_BYTES,
            read_offset: HEADER_BYTES,
            pending_records: 0,
            bytes_max,
        };
        let len = len.max(HEADER_BYTES);
        let mut opened = JournalOpened::default();
        let mut pos = HEADER_BYTES;
        loop {
            match journal.entry_at(pos, len).map_err(io)? {
                Entry::Record(_, next) => {
                    opened.records += 1;
                    pos = next;
                }
                Entry::End => break,
                Entry::Damaged(d) => {
                    journal.warn_damage(&d);
                    journal.file.set_len(pos).map_err(io)?;
                    journal.file.sync_all().map_err(io)?;
                    opened.damage = Some(d);
                    break;
                }
            }
        }
        journal.end = pos;
        journal.pending_records = opened.records;
        opened.bytes = pos - HEADER_BYTES;
        Ok((journal, opened))
    }

    /// Reads every complete entry of the journal at `path` without changing or locking it:
    /// the records (entries that do not decode are skipped) and the damage that stopped the
    /// reading, if any.
    pub fn inspect(path: &Path) -> Result<(Vec<CdrRecord>, Option<Damage>), JournalError> {
        let name = path.display().to_string();
        let io = |source| JournalError::Io {
            path: name.clone(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        check_header(&file, path, len)?;
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            end: len,
            read_offset: HEADER_BYTES,
            pending_records: 0,
            bytes_max: u64::MAX,
        };
        let mut records = Vec::new();
        let mut pos = HEADER_BYTES;
        loop {
            match journal.entry_at(pos, len).map_err(io)? {
                Entry::Record(payload, next) => {
                    if let Some(r) = journal.decode(&payload, pos) {
                        records.push(r);
                    }
                    pos = next;
                }
                Entry::End => return Ok((records, None)),
                Entry::Damaged(d) => {
                    journal.warn_damage(&d);
                    return Ok((records, Some(d)));
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries appended and not yet consumed by a replay.
    pub fn pending_records(&self) -> u64 {
        self.pending_records
    }

    /// Bytes of the entries in the file (the header not counted).
    pub fn bytes(&self) -> u64 {
        self.end - HEADER_BYTES
    }

    pub fn bytes_max(&self) -> u64 {
        self.bytes_max
    }

    /// Appends `records` in order with one write and one fsync. When this returns `Ok` they are
    /// on disk. Fails without writing anything if they do not fit in `bytes_max`.
    pub fn append(&mut self, records: &[CdrRecord]) -> Result<Appended, JournalError> {
        let mut buf = Vec::with_capacity(records.len() * 1024);
        let mut out = Appended::default();
        for r in records {
            let start = buf.len();
            buf.extend_from_slice(&[0u8; FRAME_BYTES as usize]);
            serde_json::to_writer(&mut buf, r).expect("a CdrRecord serializes to JSON");
            let len = buf.len() - start - FRAME_BYTES as usize;
            if len > ENTRY_BYTES_MAX as usize {
                buf.truncate(start);
                out.too_large += 1;
                continue;
            }
            let crc = crc32fast::hash(&buf[start + FRAME_BYTES as usize..]);
            buf[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
            buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
            out.records += 1;
        }
        if buf.is_empty() {
            return Ok(out);
        }
        let needed = buf.len() as u64;
        if self.end + needed > self.bytes_max {
            return Err(JournalError::Full {
                path: self.path.display().to_string(),
                bytes: self.bytes(),
                needed,
                bytes_max: self.bytes_max,
            });
        }
        let written = self
            .file
            .write_all_at(&buf, self.end)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // Leave no partial entry behind for the next append to land after.
            let _ = self.file.set_len(self.end);
            return Err(self.io(e));
        }
        self.end += needed;
        self.pending_records += out.records;
        out.bytes = needed;
        Ok(out)
    }

    /// Reads up to `max_records` entries from the first one not yet replayed. Nothing changes
    /// until [`Journal::consume`] is called with the batch once its records are stored.
    pub fn read_batch(&mut self, max_records: usize) -> Result<JournalBatch, JournalError> {
        self.read_batch_from(self.read_offset, max_records)
    }

    /// Reads up to `max_records` entries after `before`, a batch read and not yet consumed,
    /// so that a replay can send the next batch while the store settles one. Batches are
    /// consumed in the order they were read.
    pub fn read_batch_after(
        &mut self,
        before: &JournalBatch,
        max_records: usize,
    ) -> Result<JournalBatch, JournalError> {
        self.read_batch_from(before.next_offset, max_records)
    }

    fn read_batch_from(
        &mut self,
        from: u64,
        max_records: usize,
    ) -> Result<JournalBatch, JournalError> {
        let mut batch = JournalBatch {
            next_offset: from,
            ..JournalBatch::default()
        };
        while batch.records.len() < max_records {
            let pos = batch.next_offset;
            match self.entry_at(pos, self.end).map_err(|e| self.io(e))? {
                Entry::Record(payload, next) => {
                    batch.entries += 1;
                    match self.decode(&payload, pos) {
                        Some(r) => batch.records.push(r),
                        None => batch.undecodable += 1,
                    }
                    batch.next_offset = next;
                }
                Entry::End => break,
                Entry::Damaged(d) => {
                    // Written by this process and fsynced: only a disk fault gets here. Keep
                    // what reads and drop the rest, as at open.
                    self.warn_damage(&d);
                    self.file.set_len(pos).map_err(|e| self.io(e))?;
                    self.end = pos;
                    break;
                }
            }
        }
        Ok(batch)
    }

    /// Marks a batch from [`Journal::read_batch`] as stored. When nothing is left to replay the
    /// file is truncated back to its header and fsynced.
    pub fn consume(&mut self, batch: &JournalBatch) -> Result<(), JournalError> {
        self.read_offset = batch.next_offset;
        self.pending_records = self.pending_records.saturating_sub(batch.entries);
        if self.read_offset >= self.end {
            self.file
                .set_len(HEADER_BYTES)
                .and_then(|()| self.file.sync_all())
                .map_err(|e| self.io(e))?;
            self.end = HEADER_BYTES;
            self.read_offset = HEADER_BYTES;
            self.pending_records = 0;
        }
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> JournalError {
        JournalError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// The entry at `pos` in a file of `len` bytes.
    fn entry_at(&self, pos: u64, len: u64) -> std::io::Result<Entry> {
        if pos >= len {
            return Ok(Entry::End);
        }
        let damaged = |reason: String| {
            Ok(Entry::Damaged(Damage {
                offset: pos,
                bytes: len - pos,
                reason,
            }))
        };
        if len - pos < FRAME_BYTES {
            return damaged(format!(
                "{} bytes where an entry header of {FRAME_BYTES} bytes begins",
                len - pos
            ));
        }
        let mut frame = [0u8; FRAME_BYTES as usize];
        self.file.read_exact_at(&mut frame, pos)?;
        let n = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(frame[4..].try_into().expect("4 bytes"));
        if n > ENTRY_BYTES_MAX {
            return damaged(format!(
                "entry length {n} is over the limit of {ENTRY_BYTES_MAX} bytes"
            ));
        }
        let next = pos + FRAME_BYTES + u64::from(n);
        if next > len {
            return damaged(format!(
                "entry of {n} bytes runs {} bytes past the end of the file",
                next - len
            ));
        }
        let mut payload = vec![0u8; n as usize];
        self.file.read_exact_at(&mut payload, pos + FRAME_BYTES)?;
        let actual = crc32fast::hash(&payload);
        if actual != crc {
            return damaged(format!(
                "checksum mismatch (stored {crc:08x}, computed {actual:08x})"
            ));
        }
        Ok(Entry::Record(payload, next))
    }

    fn decode(&self, payload: &[u8], pos: u64) -> Option<CdrRecord> {
        match serde_json::from_slice(payload) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(
                    journal = %self.path.display(),
                    offset = pos,
                    error = %e,
                    "CDR journal entry has a valid checksum but is not a CDR record; skipped"
                );
                None
            }
        }
    }

    fn warn_damage(&self, d: &Damage) {
        tracing::warn!(
            journal = %self.path.display(),
            offset = d.offset,
            discarded_bytes = d.bytes,
            reason = %d.reason,
            "CDR journal is damaged at byte {} ({}), as a write cut short by a crash leaves it: \
             the entries before it are read, the {} bytes from there are discarded",
            d.offset,
            d.reason,
            d.bytes
        );
    }
}

/// Makes a new file's directory entry durable.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}
