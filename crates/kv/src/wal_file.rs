//! Giving the WAL file its full length at open, so that every commit overwrites blocks the
//! file already has.
//!
//! Why: a commit that appends to the WAL changes the file's size, and its fdatasync must then
//! also commit the filesystem's journal (on ext4 a second write and cache flush); a commit that
//! overwrites written blocks syncs only its data. The WAL restarts from its beginning before
//! `wal_restart_bytes`, so once the file has that length no commit appends. Without this, the
//! first WAL cycle after each open (the file is emptied at close) would append.
//!
//! Safe for the store's contents: SQLite reads a WAL only up to its first invalid frame, and a
//! frame of zeros is never valid (its salts do not match the header's), so zeros past the last
//! frame are what a restarted WAL leaves there anyway.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Zeros written per call while extending.
const CHUNK_BYTES: usize = 1 << 20;

/// Extends the WAL file `wal` with zeros to `bytes` (never shortens it) and syncs it. Writes
/// real zeros rather than reserving space, as ext4 journals the first write into reserved
/// space. Does nothing if the file does not exist. On failure (a full disk, a file size limit)
/// the file is cut back to its length before, and the error returned.
pub(crate) fn extend_wal(wal: &Path, bytes: u64) -> std::io::Result<()> {
    let f = match OpenOptions::new().write(true).open(wal) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let start = f.metadata()?.len();
    if start >= bytes {
        return Ok(());
    }
    let zeros = vec![0u8; CHUNK_BYTES];
    let mut at = start;
    let written = (|| {
        while at < bytes {
            let n = (bytes - at).min(CHUNK_BYTES as u64) as usize;
            f.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        f.sync_data()
    })();
    if let Err(e) = written {
        let _ = f.set_len(start);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extends_with_zeros_and_never_shortens() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("x-wal");
        extend_wal(&wal, 4096).unwrap();
        assert!(!wal.exists(), "a missing WAL is not created");
        std::fs::write(&wal, b"frames").unwrap();
        extend_wal(&wal, 3 << 20).unwrap();
        let data = std::fs::read(&wal).unwrap();
        assert_eq!(data.len(), 3 << 20);
        assert_eq!(&data[..6], b"frames");
        assert!(data[6..].iter().all(|&b| b == 0));
        extend_wal(&wal, 10).unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 3 << 20);
    }
}
