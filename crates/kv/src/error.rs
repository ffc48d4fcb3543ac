//! Typed errors. Every message names the file or input and says what to do.

use std::path::{Path, PathBuf};

/// What went wrong, with the file or input it concerns.
///
/// `Clone` because one failed commit is reported to every writer whose operation was in it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KvError {
    /// The store could not be opened or created.
    #[error("cannot open key-value store {path}: {reason}; {hint}")]
    Open {
        path: PathBuf,
        reason: String,
        hint: &'static str,
    },

    /// Another process holds the store open for writing.
    #[error(
        "key-value store {path} is in use by another process (lock file {lock} is held); \
         stop the other Tandem process (for example `tandem serve`) first, or read the store \
         with a command that does not change it"
    )]
    Locked { path: PathBuf, lock: PathBuf },

    /// A commit failed. Writes acknowledged before it are on disk; the failed ones are not.
    #[error(
        "writing key-value store {path} failed: {reason}; {hint} \
         (writes acknowledged before this error are safe on disk; this write was not stored)"
    )]
    Write {
        path: PathBuf,
        reason: String,
        hint: &'static str,
    },

    /// A read from the file failed (large values and read-only access read the file).
    #[error("reading key-value store {path} failed: {reason}; {hint}")]
    Read {
        path: PathBuf,
        reason: String,
        hint: &'static str,
    },

    /// A family, key or key tree that the store does not accept.
    #[error("invalid key {key:?}: {problem}")]
    InvalidKey { key: String, problem: String },

    /// A value over `Options::value_bytes_max`.
    #[error(
        "value for {key:?} is {len} bytes, over the limit of {max} bytes (value_bytes_max); \
         store large data elsewhere or raise the limit"
    )]
    ValueTooLarge { key: String, len: usize, max: usize },

    /// A namespace name that is not `[a-z][a-z0-9_]{0,62}`.
    #[error("invalid namespace name {name:?}: {problem}")]
    InvalidNamespace { name: String, problem: &'static str },

    /// The store was closed, or its writer thread stopped.
    #[error("key-value store {path} is closed: {reason}")]
    Closed { path: PathBuf, reason: String },

    /// An Asterisk astdb file that cannot be read or written.
    #[error("astdb file {path}: {problem}")]
    Astdb { path: PathBuf, problem: String },

    /// The file is another kind of file, or a newer Tandem's (crate `fileformat`): its
    /// message names the file, both versions and what to do.
    #[error(transparent)]
    Format(#[from] fileformat::FormatError),

    /// A backup or export destination that cannot be written.
    #[error("{path}: {problem}")]
    Destination { path: PathBuf, problem: String },
}

/// `Result` with [`KvError`].
pub type Result<T, E = KvError> = std::result::Result<T, E>;

/// Advice for an SQLite or IO failure, chosen from its error code.
pub(crate) fn hint_for(err: &rusqlite::Error) -> &'static str {
    use rusqlite::ErrorCode as C;
    match err.sqlite_error_code() {
        Some(C::DiskFull) => "the filesystem is full: free some space",
        Some(C::SystemIoFailure) => {
            "the disk reported an I/O error (a full disk, a file size limit or a failing \
             device): check free space and the system log"
        }
        Some(C::ReadOnly) | Some(C::CannotOpen) | Some(C::PermissionDenied) => {
            "check that the directory and its files exist and are writable by this user"
        }
        Some(C::DatabaseCorrupt) | Some(C::NotADatabase) => {
            "the file is damaged or is not a Tandem store: restore it from a backup"
        }
        Some(C::DatabaseBusy) | Some(C::DatabaseLocked) => {
            "another program holds a lock on the file: stop it and retry"
        }
        _ => "see the SQLite error above",
    }
}

pub(crate) fn describe(err: &rusqlite::Error) -> String {
    match err {
        rusqlite::Error::SqliteFailure(e, Some(msg)) => {
            format!("{msg} (SQLite code {})", e.extended_code)
        }
        rusqlite::Error::SqliteFailure(e, None) => {
            format!("{e} (SQLite code {})", e.extended_code)
        }
        other => other.to_string(),
    }
}

pub(crate) fn open_error(path: &Path, err: &rusqlite::Error) -> KvError {
    KvError::Open {
        path: path.to_path_buf(),
        reason: describe(err),
        hint: hint_for(err),
    }
}

pub(crate) fn write_error(path: &Path, err: &rusqlite::Error) -> KvError {
    KvError::Write {
        path: path.to_path_buf(),
        reason: describe(err),
        hint: hint_for(err),
    }
}

pub(crate) fn read_error(path: &Path, err: &rusqlite::Error) -> KvError {
    KvError::Read {
        path: path.to_path_buf(),
        reason: describe(err),
        hint: hint_for(err),
    }
}

pub(crate) fn io_hint(err: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match err.kind() {
        K::PermissionDenied | K::ReadOnlyFilesystem => {
            "check that the directory exists and is writable by this user"
        }
        K::StorageFull | K::QuotaExceeded | K::FileTooLarge => {
            "the filesystem is full: free some space"
        }
        K::NotFound => "check the path",
        _ => "check the path and the filesystem",
    }
}
