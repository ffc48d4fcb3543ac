//! Retention: deleting whole minute directories by age and by total size, oldest first.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::ArchiveError;
use crate::minute::Minute;

/// How much archive to keep. `None` means no limit of that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// Minutes that ended more than this many seconds before now are deleted.
    pub max_age_sec: Option<u64>,
    /// When the minute directories hold more than this many bytes, the oldest are deleted until
    /// they do not.
    pub max_total_bytes: Option<u64>,
}

/// What a prune did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PruneReport {
    /// Minute directories deleted.
    pub minutes_deleted: usize,
    /// Bytes of files in them.
    pub bytes_deleted: u64,
    /// Minute directories left.
    pub minutes_kept: usize,
    /// Bytes of files in them.
    pub bytes_kept: u64,
}

struct MinuteDir {
    minute: Minute,
    path: PathBuf,
    bytes: u64,
}

fn io(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> ArchiveError {
    let path = path.to_path_buf();
    move |source| ArchiveError::Io { path, op, source }
}

/// Subdirectories of `dir` (not following symlinks) with their names.
fn subdirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, ArchiveError> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io(dir, "list directory")(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir, "list directory"))?;
        let ft = entry.file_type().map_err(io(&entry.path(), "stat"))?;
        if !ft.is_dir() {
            continue;
        }
        if let Ok(name) = entry.file_name().into_string() {
            out.push((name, entry.path()));
        }
    }
    Ok(out)
}

/// The minute directories under `root`, oldest first.
fn minute_dirs(root: &Path) -> Result<Vec<MinuteDir>, ArchiveError> {
    let mut out = Vec::new();
    for (day, day_path) in subdirs(root)? {
        for (hour, hour_path) in subdirs(&day_path)? {
            for (min, path) in subdirs(&hour_path)? {
                let Some(minute) = Minute::from_dir_names(&day, &hour, &min) else {
                    continue;
                };
                let mut bytes = 0;
                for entry in std::fs::read_dir(&path).map_err(io(&path, "list directory"))? {
                    let entry = entry.map_err(io(&path, "list directory"))?;
                    let meta = entry.metadata().map_err(io(&entry.path(), "stat"))?;
                    if meta.is_file() {
                        bytes += meta.len();
                    }
                }
                out.push(MinuteDir {
                    minute,
                    path,
                    bytes,
                });
            }
        }
    }
    out.sort_by_key(|m| m.minute);
    Ok(out)
}

pub(crate) fn prune(
    root: &Path,
    policy: &Retention,
    now_unix_sec: i64,
    protected: &HashSet<Minute>,
) -> Result<PruneReport, ArchiveError> {
    let dirs = minute_dirs(root)?;
    let mut total: u64 = dirs.iter().map(|d| d.bytes).sum();
    let mut report = PruneReport::default();
    for d in &dirs {
        if protected.contains(&d.minute) {
            continue;
        }
        let end_sec = d.minute.start_unix_sec() + 60;
        let too_old = policy.max_age_sec.is_some_and(|age| {
            now_unix_sec.saturating_sub(end_sec) > i64::try_from(age).unwrap_or(i64::MAX)
        });
        let too_big = policy.max_total_bytes.is_some_and(|max| total > max);
        if !(too_old || too_big) {
            continue;
        }
        std::fs::remove_dir_all(&d.path).map_err(io(&d.path, "delete minute directory"))?;
        total -= d.bytes;
        report.minutes_deleted += 1;
        report.bytes_deleted += d.bytes;
        // Remove the hour and day directories once empty; a non-empty one stays.
        for parent in d.path.ancestors().skip(1).take(2) {
            if std::fs::remove_dir(parent).is_err() {
                break;
            }
        }
    }
    report.minutes_kept = dirs.len() - report.minutes_deleted;
    report.bytes_kept = total;
    Ok(report)
}
