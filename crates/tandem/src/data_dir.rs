//! Where the commands that open Tandem's files (`db`, `user`, `sip`, `sensor`) find them, and
//! as whom they open them.
//!
//! - **Where.** `--data-dir`, else `TANDEM_DATA_DIR`, else, on a packaged install (the service's
//!   configuration [`SERVICE_CONFIG`] exists), that configuration's `[kv] data_dir`, so `tandem
//!   user add` run from any directory reaches the service's accounts; else `tandem-data`.
//! - **As whom.** Run as root on a data directory that belongs to another user (the service's),
//!   these commands become that user, with its groups, before they open anything. SQLite
//!   creates `-wal` and `-shm` files even for a reader, and a root-owned one would stop the
//!   service at its next start; acting as the owner keeps every file the service's.

use std::ffi::CStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The packaged service's configuration (the unit's `TANDEM_CONFIG`).
pub const SERVICE_CONFIG: &str = "/etc/tandem/tandem.toml";
/// The data directory when nothing else names one.
const LOCAL_DATA_DIR: &str = "tandem-data";
/// The largest passwd entry buffer tried before giving up.
const PASSWD_BUFFER_MAX: usize = 1 << 20;
/// The most supplementary groups taken (Linux's NGROUPS_MAX).
const GROUPS_MAX: usize = 65_536;

/// The default of `--data-dir` (see the module's doc).
pub fn default_path() -> PathBuf {
    service_data_dir(Path::new(SERVICE_CONFIG)).unwrap_or_else(|| LOCAL_DATA_DIR.into())
}

/// `[kv] data_dir` of the configuration at `config`, when it exists. A configuration that
/// cannot be read (this user may not) or names none means the packaged default.
fn service_data_dir(config: &Path) -> Option<PathBuf> {
    if !config.exists() {
        return None;
    }
    const PACKAGED: &str = "/var/lib/tandem";
    let named = std::fs::read_to_string(config)
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| t.get("kv")?.get("data_dir")?.as_str().map(PathBuf::from));
    Some(named.unwrap_or_else(|| PACKAGED.into()))
}

/// Root becomes the owner of `dir` (its uid, primary group and supplementary groups) when that
/// owner is another user; nothing happens otherwise (not root, no such directory yet, or root's
/// own). Call before any thread exists and before any file is opened.
pub fn act_as_owner(dir: &Path) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    let uid = meta.uid();
    if uid == 0 {
        return Ok(());
    }
    let (name, gid) = user_of(uid).unwrap_or_else(|| (String::new(), meta.gid()));
    let groups = if name.is_empty() {
        vec![gid]
    } else {
        groups_of(&name, gid)
    };
    // SAFETY: plain system calls on values we own; the order (groups, gid, uid) is the one
    // that leaves no privilege behind.
    let failed = unsafe {
        libc::setgroups(groups.len(), groups.as_ptr()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
    };
    if failed {
        anyhow::bail!(
            "{} belongs to uid {uid}{}: cannot become that user to open its files ({}); run \
             the command as that user",
            dir.display(),
            if name.is_empty() {
                String::new()
            } else {
                format!(" ({name})")
            },
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The name and primary group of `uid`, when the user database has it.
fn user_of(uid: u32) -> Option<(String, u32)> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid out-parameter for getpwuid_r.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: buf outlives the call and its length is passed; result points into pwd.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < PASSWD_BUFFER_MAX {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points to a NUL-terminated string inside buf.
        let name = unsafe { CStr::from_ptr(pwd.pw_name) }
            .to_string_lossy()
            .into_owned();
        return Some((name, pwd.pw_gid));
    }
}

/// `name`'s supplementary groups, `gid` included (as `initgroups` sets them).
fn groups_of(name: &str, gid: u32) -> Vec<u32> {
    let Ok(cname) = std::ffi::CString::new(name) else {
        return vec![gid];
    };
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: groups holds n entries; getgrouplist writes at most n and sets n.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            return groups;
        }
        if groups.len() >= GROUPS_MAX {
            return vec![gid];
        }
        groups.resize((n.max(0) as usize).clamp(groups.len() * 2, GROUPS_MAX), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packaged_configuration_names_the_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("tandem.toml");
        assert_eq!(service_data_dir(&config), None, "no configuration");
        std::fs::write(&config, "[kv]\ndata_dir = \"/srv/tandem\"\n").unwrap();
        assert_eq!(service_data_dir(&config), Some("/srv/tandem".into()));
        std::fs::write(&config, "[fastagi]\nlisten = \"127.0.0.1:4573\"\n").unwrap();
        assert_eq!(service_data_dir(&config), Some("/var/lib/tandem".into()));
    }
}
