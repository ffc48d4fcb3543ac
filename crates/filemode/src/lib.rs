//! Who may read Tandem's files.
//!
//! What it is: the modes of the files and directories Tandem keeps. They hold secrets (the
//! registrar's HA1s and nonce secret in `kv.sqlite3`, the console's password and token hashes,
//! the collector's token hashes) and call content (CDRs, archived packets with their audio), so
//! each is created readable by its owner alone from its first byte — files 0600, directories
//! 0700 — whatever the process's umask; or, for a family an operator shares with a group
//! ([`Access::Group`]: the CDR database and the packet archive, for Asterisk's user), files
//! 0640 and directories 02750 with that group (setgid, so that what is created inside, SQLite's
//! `-wal` and `-shm` files included, belongs to the group too).
//!
//! A file or directory left wider by an older release (or by hand) is narrowed when its owner
//! opens it ([`open_rw`], [`secure_dir`], [`prepare_sqlite`]), and the change is logged; the next
//! open finds it right and says nothing.
//!
//! SQLite: the unix VFS creates a database's `-wal`, `-shm` and `-journal` files with the main
//! file's permission bits (it fchmods them to those bits whatever the umask, and as root gives
//! them the main file's owner), so [`prepare_sqlite`] creates the main file with the right mode
//! before SQLite opens it. `tests/sqlite.rs` checks that on the SQLite Tandem links.
//!
//! Never: gives the owner a right it did not have (a read-only file stays read-only), makes a
//! file readable by every user, or gives a group more than reading (and searching directories).
//! Paths are followed as SQLite follows them: a symbolic link's target is what gets the mode.
//!
//! Start at [`Access`], then [`prepare_sqlite`] and [`open_rw`].

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The umask Tandem's binary sets at start: what anything else creates (a library's file this
/// crate does not know, a temporary file) is its owner's alone.
pub const UMASK: u32 = 0o077;
/// A private file: read and written by its owner.
pub const FILE_MODE: u32 = 0o600;
/// A private directory.
pub const DIR_MODE: u32 = 0o700;
/// A file a group reads.
pub const GROUP_FILE_MODE: u32 = 0o640;
/// A directory a group lists and enters; setgid, so that files created in it get its group.
pub const GROUP_DIR_MODE: u32 = 0o2750;

/// Who besides the owner may read a family of files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Access {
    /// Nobody: files 0600, directories 0700.
    #[default]
    Private,
    /// The members of one group read: files 0640, directories 02750, all with that group.
    Group(Group),
}

/// A group files are given to, looked up once ([`Access::group`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
}

/// Why a group cannot be given files.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("there is no group {name:?} on this system")]
    Unknown { name: String },
    #[error(
        "this process (uid {uid}) is not a member of group {name} (gid {gid}) and lacks \
         CAP_CHOWN, so it cannot give files that group"
    )]
    NotMember { name: String, gid: u32, uid: u32 },
    #[error("cannot look up group {name:?}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: io::Error,
    },
}

impl Access {
    /// Group access for the group `name` (or a numeric gid), after checking that this process
    /// may give files that group: it is a member, or holds CAP_CHOWN (root does).
    pub fn group(name: &str) -> Result<Access, GroupError> {
        let gid = match lookup_gid(name) {
            Ok(Some(gid)) => gid,
            Ok(None) => match name.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => return Err(GroupError::Unknown { name: name.into() }),
            },
            Err(source) => {
                return Err(GroupError::Lookup {
                    name: name.into(),
                    source,
                });
            }
        };
        if !may_give_group(gid) {
            return Err(GroupError::NotMember {
                name: name.into(),
                gid,
                // SAFETY: geteuid has no preconditions.
                uid: unsafe { libc::geteuid() },
            });
        }
        Ok(Access::Group(Group {
            name: name.into(),
            gid,
        }))
    }

    /// The mode of a file this access creates.
    pub fn file_mode(&self) -> u32 {
        match self {
            Access::Private => FILE_MODE,
            Access::Group(_) => GROUP_FILE_MODE,
        }
    }

    /// The mode of a directory this access creates.
    pub fn dir_mode(&self) -> u32 {
        match self {
            Access::Private => DIR_MODE,
            Access::Group(_) => GROUP_DIR_MODE,
        }
    }

    /// The group files are given, if any.
    pub fn gid(&self) -> Option<u32> {
        match self {
            Access::Private => None,
            Access::Group(g) => Some(g.gid),
        }
    }

    /// What an existing file or directory of mode `mode` becomes: the owner's bits it has (a
    /// file's never executable), the group's reading (and a directory's search and setgid)
    /// for group access, nothing for anyone else.
    pub fn narrowed(&self, mode: u32, dir: bool) -> u32 {
        let owner = mode & if dir { 0o700 } else { 0o600 };
        match (self, dir) {
            (Access::Private, _) => owner,
            (Access::Group(_), false) => owner | 0o040,
            (Access::Group(_), true) => owner | 0o2050,
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Private => f.write_str("its owner only"),
            Access::Group(g) => write!(f, "its owner and group {}", g.name),
        }
    }
}

/// The umask the process had before [`set_umask`]; `u32::MAX` while it was not called.
static INHERITED_UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// Sets the process's umask to [`UMASK`] and returns the one it had. For a binary's first
/// line, before any thread exists.
pub fn set_umask() -> u32 {
    // SAFETY: umask only swaps the process's mask.
    let inherited = unsafe { libc::umask(UMASK as libc::mode_t) as u32 };
    INHERITED_UMASK.store(inherited, std::sync::atomic::Ordering::Relaxed);
    inherited
}

/// The umask the process was started with, when [`set_umask`] replaced it: what a program
/// Tandem runs for someone else (a legacy AGI script, whose files Asterisk may read) gets
/// back, as it would from Asterisk.
pub fn inherited_umask() -> Option<u32> {
    let mask = INHERITED_UMASK.load(std::sync::atomic::Ordering::Relaxed);
    (mask != u32::MAX).then_some(mask)
}

/// Creates `path` and the directories above it that are missing, each with `access`'s mode and
/// group whatever the umask. Directories that exist are left as they are.
pub fn create_dir_all(path: &Path, access: &Access) -> io::Result<()> {
    if path.as_os_str().is_empty() || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        create_dir_all(parent, access)?;
    }
    // Owner-only until its group and mode are set, so it is never open to a wrong group.
    match std::fs::DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => return Ok(()),
        Err(e) => return Err(context(e, "create the directory", path)),
    }
    if let Some(gid) = access.gid() {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| context(e, "give the group of", path))?;
    }
    set_mode(path, access.dir_mode())
}

/// Creates the directory `path` as [`create_dir_all`] does or, when it exists, narrows it to
/// `access` (an older release's 0755 becomes 0700). True when an existing directory changed.
pub fn secure_dir(path: &Path, access: &Access) -> io::Result<bool> {
    if !path.exists() {
        create_dir_all(path, access)?;
        return Ok(false);
    }
    let meta = std::fs::metadata(path).map_err(|e| context(e, "read the mode of", path))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", path.display()),
        ));
    }
    fit(&Target::Path(path), &meta, access, true)
}

/// Opens `path` for reading and writing, creating it with `access`'s mode and group (whatever
/// the umask) when missing; an existing file is narrowed to `access`. Never truncates.
pub fn open_rw(path: &Path, access: &Access) -> io::Result<File> {
    match create_new(path, access) {
        Ok(file) => return Ok(file),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| context(e, "open", path))?;
    let meta = file
        .metadata()
        .map_err(|e| context(e, "read the mode of", path))?;
    fit(&Target::File(&file, path), &meta, access, false)?;
    Ok(file)
}

/// Creates the new file `path` (it must not exist) for reading and writing, with `access`'s
/// mode and group whatever the umask.
pub fn create_new(path: &Path, access: &Access) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| context(e, "create", path))?;
    if let Some(gid) = access.gid() {
        std::os::unix::fs::fchown(&file, None, Some(gid))
            .map_err(|e| context(e, "give the group of", path))?;
    }
    file.set_permissions(std::fs::Permissions::from_mode(access.file_mode()))
        .map_err(|e| context(e, "set the mode of", path))?;
    Ok(file)
}

/// Narrows the existing file `path` to `access`; a missing file is not an error. True when
/// it changed.
pub fn secure_file(path: &Path, access: &Access) -> io::Result<bool> {
    match std::fs::metadata(path) {
        Ok(meta) => fit(&Target::Path(path), &meta, access, false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(context(e, "read the mode of", path)),
    }
}

/// The files SQLite keeps beside the database `db`: its WAL, the WAL's index and the rollback
/// journal.
pub fn sqlite_companions(db: &Path) -> [PathBuf; 3] {
    ["-wal", "-shm", "-journal"].map(|suffix| {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        PathBuf::from(p)
    })
}

/// Before SQLite opens the database `db` as its owner: creates it (empty, which SQLite reads
/// as a new database) with `access`'s mode and group when missing, so that SQLite gives its
/// `-wal` and `-shm` files the same mode; narrows it and the files beside it otherwise.
pub fn prepare_sqlite(db: &Path, access: &Access) -> io::Result<()> {
    match create_new(db, access) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    secure_sqlite(db, access)
}

/// Narrows the database `db` and the files SQLite keeps beside it to `access`, those that
/// exist. After the owner's connection is open, this also gives a `-wal` or `-shm` file that
/// SQLite created outside a setgid directory its group.
pub fn secure_sqlite(db: &Path, access: &Access) -> io::Result<()> {
    secure_file(db, access)?;
    for companion in sqlite_companions(db) {
        secure_file(&companion, access)?;
    }
    Ok(())
}

/// What [`secure_tree`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeReport {
    pub dirs: u64,
    pub files: u64,
}

/// Narrows everything below the directory `root` to `access`: directories down to `depth`
/// levels below it and the files in them (the root itself is [`secure_dir`]'s). Symbolic links
/// are left alone and not followed; what vanishes meanwhile (a concurrent prune) is skipped.
/// One line is logged for the whole tree, not one per file: for a tree an older release wrote
/// (an archive of a hundred thousand files), after [`secure_dir`] found its root wrong.
pub fn secure_tree(root: &Path, access: &Access, depth: usize) -> io::Result<TreeReport> {
    let mut report = TreeReport::default();
    let mut pending = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, level)) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(context(e, "list", &dir)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| context(e, "list", &dir))?;
            let path = entry.path();
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(context(e, "read the mode of", &path)),
            };
            let is_dir = meta.is_dir();
            if !(is_dir || meta.is_file()) || (is_dir && level >= depth) {
                continue;
            }
            match change(&Target::Path(&path), &meta, access, is_dir) {
                Ok(Some(_)) if is_dir => report.dirs += 1,
                Ok(Some(_)) => report.files += 1,
                Ok(None) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            if is_dir {
                pending.push((path, level + 1));
            }
        }
    }
    if report != TreeReport::default() {
        tracing::warn!(
            root = %root.display(),
            dirs = report.dirs,
            files = report.files,
            "files and directories below were wider than {access} may read: narrowed"
        );
    }
    Ok(report)
}

/// Logs a warning when the file `path` (`what`: "the sensor's token file") may be read by
/// every local user: a key Tandem reads but did not write.
pub fn warn_if_readable_by_all(path: &Path, what: &str) {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.mode() & 0o004 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = %format!("{:04o}", meta.mode() & 0o7777),
            "{what} may be read by every local user: `chmod o-rwx {}`",
            path.display()
        );
    }
}

enum Target<'a> {
    Path(&'a Path),
    File(&'a File, &'a Path),
}

impl Target<'_> {
    fn path(&self) -> &Path {
        match self {
            Target::Path(p) | Target::File(_, p) => p,
        }
    }

    fn chmod(&self, mode: u32) -> io::Result<()> {
        let perm = std::fs::Permissions::from_mode(mode);
        match self {
            Target::Path(p) => std::fs::set_permissions(p, perm),
            Target::File(f, _) => f.set_permissions(perm),
        }
        .map_err(|e| context(e, "set the mode of", self.path()))
    }

    fn chgrp(&self, gid: u32) -> io::Result<()> {
        match self {
            Target::Path(p) => std::os::unix::fs::chown(p, None, Some(gid)),
            Target::File(f, _) => std::os::unix::fs::fchown(f, None, Some(gid)),
        }
        .map_err(|e| context(e, "give the group of", self.path()))
    }
}

/// Brings an existing file or directory to `access`; true when something changed, which is
/// logged: a warning when others could read it.
fn fit(target: &Target, meta: &Metadata, access: &Access, dir: bool) -> io::Result<bool> {
    let Some((from, want)) = change(target, meta, access, dir)? else {
        return Ok(false);
    };
    let path = target.path();
    let opened = from & 0o077 & !want;
    let (from, to) = (format!("{from:04o}"), format!("{want:04o}"));
    if opened & 0o007 != 0 {
        tracing::warn!(path = %path.display(), from, to, "every local user could read this; now {access} can");
    } else if opened != 0 {
        tracing::warn!(path = %path.display(), from, to, "its group could read this; now {access} can");
    } else {
        tracing::info!(path = %path.display(), from, to, "mode set: {access} may read it");
    }
    Ok(true)
}

/// Brings an existing file or directory to `access` without a word; the modes before and
/// after when it changed.
fn change(
    target: &Target,
    meta: &Metadata,
    access: &Access,
    dir: bool,
) -> io::Result<Option<(u32, u32)>> {
    let mode = meta.mode() & 0o7777;
    let want = access.narrowed(mode, dir);
    let regroup = access.gid().filter(|&gid| gid != meta.gid());
    if mode == want && regroup.is_none() {
        return Ok(None);
    }
    if let Some(gid) = regroup {
        // Owner-only before the group changes: its bits never apply to the wrong group.
        let owner_only = mode & 0o700;
        if owner_only != mode {
            target.chmod(owner_only).map_err(|e| owned_by(e, meta))?;
        }
        target.chgrp(gid).map_err(|e| owned_by(e, meta))?;
    }
    target.chmod(want).map_err(|e| owned_by(e, meta))?;
    Ok(Some((mode, want)))
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| context(e, "set the mode of", path))
}

fn context(e: io::Error, op: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("cannot {op} {}: {e}", path.display()))
}

/// A permission error on a file this process does not own names both owners: the way out is
/// giving the file to Tandem's user.
fn owned_by(e: io::Error, meta: &Metadata) -> io::Error {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if e.kind() != io::ErrorKind::PermissionDenied || meta.uid() == me {
        return e;
    }
    io::Error::new(
        e.kind(),
        format!(
            "{e}; it belongs to uid {}, and this process runs as uid {me}: give it to this \
             user (chown)",
            meta.uid()
        ),
    )
}

/// The gid of the group `name`, `None` when there is no such group.
fn lookup_gid(name: &str) -> io::Result<Option<u32>> {
    const BUFFER_MAX: usize = 1 << 20;
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the name"))?;
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: an all-zero group is a valid value of a plain C struct; getgrnam_r fills it.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and `buf` holds `buf.len()` bytes.
        let rc = unsafe {
            libc::getgrnam_r(
                c_name.as_ptr(),
                &mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(grp.gr_gid)),
            libc::ERANGE if buf.len() < BUFFER_MAX => buf.resize(buf.len() * 2, 0),
            // Not found, as some NSS modules say it.
            libc::ENOENT | libc::ESRCH => return Ok(None),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// Whether this process may give its files the group `gid`: a member of it, or CAP_CHOWN.
fn may_give_group(gid: u32) -> bool {
    // SAFETY: getegid has no preconditions.
    if unsafe { libc::getegid() } == gid || has_cap_chown() {
        return true;
    }
    // SAFETY: with a size of 0, getgroups only counts.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return false;
    }
    let mut groups: Vec<libc::gid_t> = vec![0; n as usize];
    // SAFETY: `groups` holds `n` writable entries.
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    n > 0 && groups[..n as usize].contains(&gid)
}

/// CAP_CHOWN (bit 0) in the effective set, from /proc/self/status.
fn has_cap_chown() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
            u64::from_str_radix(hex, 16).ok()
        })
        .is_some_and(|caps| caps & 1 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn narrowing_keeps_the_owners_bits_and_takes_everyone_elses() {
        let g = Access::Group(Group {
            name: "g".into(),
            gid: 1,
        });
        assert_eq!(Access::Private.narrowed(0o644, false), 0o600);
        assert_eq!(Access::Private.narrowed(0o444, false), 0o400);
        assert_eq!(Access::Private.narrowed(0o4755, false), 0o600);
        assert_eq!(Access::Private.narrowed(0o2755, true), 0o700);
        assert_eq!(g.narrowed(0o666, false), 0o640);
        assert_eq!(g.narrowed(0o600, false), 0o640);
        assert_eq!(g.narrowed(0o777, true), 0o2750);
    }

    #[test]
    fn created_files_and_directories_are_their_owners_and_old_ones_are_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b/c");
        create_dir_all(&nested, &Access::Private).unwrap();
        for d in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&dir.path().join(d)), 0o700, "{d}");
        }
        let f = nested.join("f");
        drop(open_rw(&f, &Access::Private).unwrap());
        assert_eq!(mode(&f), 0o600);

        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&nested, std::fs::Permissions::from_mode(0o755)).unwrap();
        drop(open_rw(&f, &Access::Private).unwrap());
        assert_eq!(mode(&f), 0o600);
        assert!(secure_dir(&nested, &Access::Private).unwrap());
        assert_eq!(mode(&nested), 0o700);
        assert!(
            !secure_dir(&nested, &Access::Private).unwrap(),
            "already right"
        );
        assert!(!secure_file(&dir.path().join("missing"), &Access::Private).unwrap());
    }

    #[test]
    fn a_tree_is_narrowed_to_its_depth_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("archive");
        let minute = root.join("2026-11-21/05/30");
        std::fs::create_dir_all(&minute).unwrap();
        let deeper = minute.join("deeper");
        std::fs::create_dir(&deeper).unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"").unwrap();
        std::os::unix::fs::symlink(&outside, minute.join("link")).unwrap();
        for p in [
            &root.join("2026-11-21"),
            &root.join("2026-11-21/05"),
            &minute,
            &deeper,
        ] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for name in ["sip.tar", "rtp.tar"] {
            std::fs::write(minute.join(name), b"").unwrap();
            std::fs::set_permissions(minute.join(name), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
        let report = secure_tree(&root, &Access::Private, 3).unwrap();
        assert_eq!(report, TreeReport { dirs: 3, files: 2 });
        assert_eq!(mode(&minute), 0o700);
        assert_eq!(mode(&minute.join("sip.tar")), 0o600);
        assert_eq!(mode(&deeper), 0o755, "below the depth");
        assert_eq!(mode(&outside), 0o644, "a link is not followed");
        assert_eq!(
            secure_tree(&root, &Access::Private, 3).unwrap(),
            TreeReport::default()
        );
    }

    #[test]
    fn a_database_is_created_before_sqlite_and_its_companions_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.sqlite3");
        prepare_sqlite(&db, &Access::Private).unwrap();
        assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
        assert_eq!(mode(&db), 0o600);
        let [wal, shm, journal] = sqlite_companions(&db);
        for p in [&wal, &shm, &journal] {
            std::fs::write(p, b"").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        prepare_sqlite(&db, &Access::Private).unwrap();
        for p in [&db, &wal, &shm, &journal] {
            assert_eq!(mode(p), 0o600, "{}", p.display());
        }
    }

    #[test]
    fn the_processs_own_group_may_be_given_and_an_unknown_one_is_named() {
        // SAFETY: getegid has no preconditions.
        let gid = unsafe { libc::getegid() };
        let access = Access::group(&gid.to_string()).unwrap();
        assert_eq!(access.gid(), Some(gid));
        let err = Access::group("no-such-group-tandem")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no group \"no-such-group-tandem\""), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        create_dir_all(&shared, &access).unwrap();
        assert_eq!(mode(&shared), 0o2750);
        let f = shared.join("f");
        drop(open_rw(&f, &access).unwrap());
        assert_eq!(mode(&f), 0o640);
        assert_eq!(std::fs::metadata(&f).unwrap().gid(), gid);
        // Back to private: the group loses it.
        drop(open_rw(&f, &Access::Private).unwrap());
        assert_eq!(mode(&f), 0o600);
        assert!(secure_dir(&shared, &Access::Private).unwrap());
        assert_eq!(mode(&shared), 0o700);
    }
}
