//! The files the service's user must own or reach: the data directory (exists or can be made,
//! owned by and writable for the user, not open to every user, nothing inside owned by another
//! user: a console.sqlite3 copied back as root is one the service cannot open), and the legacy script directory (every script readable and executable by the
//! scripts' user, through every directory above it).

use crate::Finding;
use crate::account::{Account, EXEC, READ, WRITE, describe};
use crate::unit::UnitGrants;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const GROUP: &str = "files";
/// Entries looked at under one directory at most, so that a huge archive cannot stall the
/// report; what is left is said.
pub const WALK_ENTRIES_MAX: usize = 100_000;
/// Directory levels walked at most.
pub const WALK_DEPTH_MAX: usize = 16;
/// Files named in one finding at most.
const NAMED_MAX: usize = 5;

/// The data directory and what is in it, for the service's `user`. `unit`: the installed
/// unit, whose `StateDirectory=` systemd makes at the service's start.
pub fn check_data_dir(dir: &Path, user: &Account, unit: Option<&UnitGrants>) -> Vec<Finding> {
    let check = format!("data directory {}", dir.display());
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(u) = unit.filter(|u| u.state_directories.iter().any(|s| s == dir)) {
                return vec![Finding::ok(
                    GROUP,
                    check,
                    format!(
                        "does not exist yet; systemd makes it, owned by {}, when the service \
                         starts (StateDirectory= of {})",
                        user.name, u.source
                    ),
                )];
            }
            return vec![missing_dir(dir, user, check)];
        }
        Err(e) => {
            return vec![Finding::fail(
                GROUP,
                check,
                format!("cannot be read: {e}"),
                "run tandem doctor as root",
            )];
        }
    };
    if !meta.is_dir() {
        return vec![Finding::fail(
            GROUP,
            check,
            "is not a directory",
            "set [kv] data_dir (or --data-dir) to a directory",
        )];
    }
    let u = &user.name;
    let d = dir.display();
    let mut out = vec![];
    if let Some(blocked) = unsearchable_ancestor(dir, user) {
        out.push(Finding::fail(
            GROUP,
            check.clone(),
            format!("{u} may not enter {} above it", blocked.display()),
            format!("chmod o+x {}", blocked.display()),
        ));
    }
    let mode = meta.mode() & 0o7777;
    out.push(if meta.uid() != user.uid && !user.is_root() {
        Finding::fail(
            GROUP,
            check.clone(),
            format!("owned by {}, not by {u}", describe(&meta)),
            format!("chown {u}: {d}"),
        )
    } else if !user.may(&meta, WRITE | EXEC) {
        Finding::fail(
            GROUP,
            check.clone(),
            format!("{u} may not write in it ({})", describe(&meta)),
            format!("chmod u+rwx {d}"),
        )
    } else if mode & 0o002 != 0 {
        Finding::fail(
            GROUP,
            check.clone(),
            format!("every user may write in it ({})", describe(&meta)),
            format!("chmod 0750 {d}"),
        )
    } else if mode & 0o004 != 0 {
        Finding::warn(
            GROUP,
            check.clone(),
            format!("every user may list it ({})", describe(&meta)),
            format!("chmod o-rwx {d}"),
        )
    } else {
        Finding::ok(
            GROUP,
            check.clone(),
            format!("owned by and writable for {u} ({})", describe(&meta)),
        )
    });
    out.push(check_owners(dir, user));
    out
}

/// A data directory that does not exist yet: `tandem serve` makes it when the user may.
fn missing_dir(dir: &Path, user: &Account, check: String) -> Finding {
    let parent = dir
        .ancestors()
        .skip(1)
        .find(|p| p.as_os_str().is_empty() || p.exists())
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("/"));
    let writable = std::fs::metadata(parent).is_ok_and(|m| user.may(&m, WRITE | EXEC))
        && unsearchable_ancestor(parent, user).is_none();
    if writable {
        Finding::ok(
            GROUP,
            check,
            format!(
                "does not exist yet; tandem serve creates it ({} may write in {})",
                user.name,
                parent.display()
            ),
        )
    } else {
        Finding::fail(
            GROUP,
            check,
            format!(
                "does not exist, and {} may not create it in {}",
                user.name,
                parent.display()
            ),
            format!(
                "mkdir -p -m 0750 {d} && chown {u}: {d}",
                d = dir.display(),
                u = user.name
            ),
        )
    }
}

/// The first directory above `path` (itself excluded) that `user` may not enter.
fn unsearchable_ancestor(path: &Path, user: &Account) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    absolute
        .ancestors()
        .skip(1)
        .find(|a| std::fs::metadata(a).is_ok_and(|m| !user.may(&m, EXEC)))
        .map(Path::to_path_buf)
}

/// Every entry under `dir` owned by `user`.
fn check_owners(dir: &Path, user: &Account) -> Finding {
    let check = format!("files in {}", dir.display());
    let mut foreign = Vec::new();
    let mut foreign_count = 0usize;
    let walk = walk(dir, false, |path, meta| {
        if meta.uid() != user.uid {
            foreign_count += 1;
            if foreign.len() < NAMED_MAX {
                let name = path.strip_prefix(dir).unwrap_or(path);
                foreign.push(format!("{} ({})", name.display(), describe(meta)));
            }
        }
    });
    let cut = if walk.cut {
        format!(" (the first {WALK_ENTRIES_MAX} looked at)")
    } else {
        String::new()
    };
    if user.is_root() && foreign_count > 0 {
        return Finding::ok(
            GROUP,
            check,
            format!(
                "{} entries; the service runs as root, which opens them all{cut}",
                walk.entries
            ),
        );
    }
    if foreign_count == 0 {
        return Finding::ok(
            GROUP,
            check,
            format!("{} entries, all {}'s{cut}", walk.entries, user.name),
        );
    }
    let more = foreign_count.saturating_sub(foreign.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Finding::fail(
        GROUP,
        check,
        format!(
            "{foreign_count} owned by another user, which {} may not be able to open: {}{more}{cut}",
            user.name,
            foreign.join(", ")
        ),
        format!("chown -R {} {}", user.name, dir.display()),
    )
}

struct Walked {
    entries: usize,
    cut: bool,
}

/// Calls `visit` for every entry under `root` (not `root` itself), depth first, within
/// [`WALK_ENTRIES_MAX`] and [`WALK_DEPTH_MAX`]. Symbolic links are followed only when
/// `follow` (a script directory may link its scripts in; a data directory never does).
fn walk(root: &Path, follow: bool, mut visit: impl FnMut(&Path, &std::fs::Metadata)) -> Walked {
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    let mut walked = Walked {
        entries: 0,
        cut: false,
    };
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if walked.entries >= WALK_ENTRIES_MAX {
                walked.cut = true;
                return walked;
            }
            walked.entries += 1;
            let path = e.path();
            let meta = if follow {
                std::fs::metadata(&path)
            } else {
                std::fs::symlink_metadata(&path)
            };
            let Ok(meta) = meta else { continue };
            visit(&path, &meta);
            if meta.is_dir() && depth + 1 < WALK_DEPTH_MAX {
                stack.push((path, depth + 1));
            }
        }
    }
    walked
}

/// The legacy script directory for the scripts' `user` (`[scripts] user`, else the
/// service's): the directory and those above it may be entered, and every executable under it
/// (what the runner serves) may be read and run.
pub fn check_scripts(dir: &Path, user: &Account) -> Vec<Finding> {
    let check = format!("scripts in {}", dir.display());
    let u = &user.name;
    let meta = match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => m,
        Ok(_) => {
            return vec![Finding::fail(
                GROUP,
                check,
                "is not a directory",
                "set [scripts] dir to the directory of the AGI scripts (FreePBX: /var/lib/asterisk/agi-bin)",
            )];
        }
        Err(e) => {
            return vec![Finding::fail(
                GROUP,
                check,
                format!("cannot be read: {e}"),
                "set [scripts] dir to the directory of the AGI scripts (FreePBX: /var/lib/asterisk/agi-bin)",
            )];
        }
    };
    if let Some(blocked) = unsearchable_ancestor(dir, user)
        .or_else(|| (!user.may(&meta, READ | EXEC)).then(|| dir.to_path_buf()))
    {
        return vec![Finding::fail(
            GROUP,
            check,
            format!("{u} may not enter {}", blocked.display()),
            format!(
                "chmod o+x {} (or make {u} its owner or a member of its group)",
                blocked.display()
            ),
        )];
    }
    let mut scripts = 0usize;
    let mut refused = Vec::new();
    let mut refused_count = 0usize;
    let walk = walk(dir, true, |path, meta| {
        let runnable = meta.is_file() && meta.mode() & 0o111 != 0;
        let blocked = if meta.is_dir() {
            !user.may(meta, READ | EXEC)
        } else if runnable {
            scripts += 1;
            !user.may(meta, READ | EXEC)
        } else {
            false
        };
        if blocked {
            refused_count += 1;
            if refused.len() < NAMED_MAX {
                let name = path.strip_prefix(dir).unwrap_or(path);
                refused.push(format!("{} ({})", name.display(), describe(meta)));
            }
        }
    });
    let cut = if walk.cut {
        format!(" (the first {WALK_ENTRIES_MAX} entries looked at)")
    } else {
        String::new()
    };
    if refused_count == 0 {
        return vec![Finding::ok(
            GROUP,
            check,
            format!("{scripts} scripts, each readable and executable by {u}{cut}"),
        )];
    }
    let d = dir.display();
    let fix = if u == "asterisk" && Path::new("/usr/sbin/fwconsole").exists() {
        "fwconsole chown".to_string()
    } else {
        format!("chown -R {u} {d} && chmod -R u+rX {d}")
    };
    let more = refused_count.saturating_sub(refused.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    vec![Finding::fail(
        GROUP,
        check,
        format!(
            "{refused_count} that {u} may not read and run: {}{more}{cut}",
            refused.join(", ")
        ),
        fix,
    )]
}

/// Scripts run as another user than the service's: the service must hold CAP_SETUID and
/// CAP_SETGID (root has them), which its unit grants or not. Without a unit nothing is said.
pub fn check_script_user_switch(
    scripts: &Account,
    service: &Account,
    unit: Option<&UnitGrants>,
) -> Option<Finding> {
    if scripts.uid == service.uid {
        return None;
    }
    let unit = unit?;
    let check = format!("switching to {}", scripts.name);
    let missing: Vec<&str> = ["CAP_SETUID", "CAP_SETGID"]
        .into_iter()
        .filter(|c| !unit.has_capability(c))
        .collect();
    Some(if missing.is_empty() {
        Finding::ok(
            GROUP,
            check,
            format!(
                "the service may start scripts as {} ({})",
                scripts.name, unit.source
            ),
        )
    } else {
        Finding::fail(
            GROUP,
            check,
            format!(
                "the service runs as {} without {} ({}), so it refuses [scripts] user = {:?} at start",
                service.name,
                missing.join(" and "),
                unit.source,
                scripts.name
            ),
            "systemctl edit tandem, and add:\n[Service]\nAmbientCapabilities=CAP_SETUID CAP_SETGID\n\
             CapabilityBoundingSet=CAP_SETUID CAP_SETGID\n(or remove [scripts] user)",
        )
    })
}
