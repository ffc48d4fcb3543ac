//! Scripts run as another user (`[scripts] user`): FreePBX's scripts read `/etc/freepbx.conf`
//! and write under `/var/spool/asterisk` as the `asterisk` user, as they do under classic AGI,
//! while Tandem itself runs as its own.
//!
//! The user is looked up once, at start (`getpwnam_r`, `getgrouplist`). Each script is then
//! started with that user's supplementary groups, primary group and uid (`setgroups`, `setgid`,
//! `setuid`, in that order, between fork and exec), and without the ambient capabilities that
//! let Tandem switch: the script gets the user's rights and nothing of Tandem's. Switching needs
//! CAP_SETUID and CAP_SETGID (root has them); without them the runner refuses to start and says
//! so, rather than fail on every call.

use std::ffi::{CStr, CString};
use std::io;
use std::sync::Arc;

/// `CAP_SETGID` and `CAP_SETUID` (linux/capability.h).
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
/// The largest passwd entry buffer tried before giving up.
const PASSWD_BUFFER_MAX: usize = 1 << 20;
/// The most supplementary groups taken (Linux's NGROUPS_MAX).
const GROUPS_MAX: usize = 65_536;

/// A user scripts run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, the primary one included (as `initgroups` sets them).
    pub groups: Vec<u32>,
    pub home: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RunAsError {
    #[error("scripts.user = {user:?}: no such user on this system")]
    NoSuchUser { user: String },
    #[error("scripts.user = {user:?}: cannot look the user up: {source}")]
    Lookup { user: String, source: io::Error },
    #[error(
        "scripts.user = {user:?} (uid {uid}): Tandem runs as uid {euid} without {missing}, so it \
         cannot start scripts as that user. Run Tandem as root, or give it CAP_SETUID and \
         CAP_SETGID (the drop-in in deploy/tandem.service's comments), or remove scripts.user"
    )]
    NotPermitted {
        user: String,
        uid: u32,
        euid: u32,
        missing: String,
    },
}

impl RunAs {
    /// Looks `name` up in the system's user database.
    pub fn lookup(name: &str) -> Result<RunAs, RunAsError> {
        let lookup = |source| RunAsError::Lookup {
            user: name.to_string(),
            source,
        };
        let c_name = CString::new(name)
            .map_err(|_| lookup(io::Error::other("the name holds a NUL byte")))?;
        let mut buf = vec![0u8; 16 * 1024];
        // SAFETY: an all-zero passwd is a valid value of a plain C struct; getpwnam_r fills it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        loop {
            // SAFETY: every pointer is valid for the call: the name is NUL-terminated, `pwd`
            // and `found` are ours, and `buf` is writable for its length.
            let rc = unsafe {
                libc::getpwnam_r(
                    c_name.as_ptr(),
                    &mut pwd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    &mut found,
                )
            };
            match rc {
                0 => break,
                libc::ERANGE if buf.len() < PASSWD_BUFFER_MAX => buf.resize(buf.len() * 2, 0),
                e => return Err(lookup(io::Error::from_raw_os_error(e))),
            }
        }
        if found.is_null() {
            return Err(RunAsError::NoSuchUser {
                user: name.to_string(),
            });
        }
        // SAFETY: getpwnam_r succeeded: pw_dir points at a NUL-terminated string in `buf`.
        let home = unsafe { CStr::from_ptr(pwd.pw_dir) }
            .to_string_lossy()
            .into_owned();
        let (uid, gid) = (pwd.pw_uid, pwd.pw_gid);
        let mut groups: Vec<libc::gid_t> = vec![0; 64];
        loop {
            let mut n = groups.len() as libc::c_int;
            // SAFETY: `groups` holds `n` writable entries; getgrouplist writes at most that
            // many and says how many it needs in `n` when they do not fit.
            let rc =
                unsafe { libc::getgrouplist(c_name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
            if rc >= 0 {
                groups.truncate(n.max(0) as usize);
                break;
            }
            if groups.len() >= GROUPS_MAX {
                return Err(lookup(io::Error::other(format!(
                    "in more than {GROUPS_MAX} groups"
                ))));
            }
            let wanted = (n.max(0) as usize).max(groups.len() * 2).min(GROUPS_MAX);
            groups.resize(wanted, 0);
        }
        Ok(RunAs {
            name: name.to_string(),
            uid,
            gid,
            groups,
            home,
        })
    }

    /// Whether this process is already this user: then nothing needs switching.
    pub fn is_current(&self) -> bool {
        // SAFETY: these getters have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut current = current_groups();
        current.sort_unstable();
        let mut wanted = self.groups.clone();
        wanted.sort_unstable();
        euid == self.uid && egid == self.gid && current == wanted
    }

    /// Checks that this process may switch to the user: it is the user already, or holds
    /// CAP_SETUID and CAP_SETGID.
    pub fn check_permitted(&self) -> Result<(), RunAsError> {
        if self.is_current() {
            return Ok(());
        }
        let effective = effective_capabilities().unwrap_or(0);
        let missing: Vec<&str> = [(CAP_SETUID, "CAP_SETUID"), (CAP_SETGID, "CAP_SETGID")]
            .into_iter()
            .filter(|(bit, _)| effective & (1u64 << bit) == 0)
            .map(|(_, name)| name)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(RunAsError::NotPermitted {
            user: self.name.clone(),
            uid: self.uid,
            // SAFETY: no preconditions.
            euid: unsafe { libc::geteuid() },
            missing: missing.join(" and "),
        })
    }

    /// Makes `cmd` start as this user, without ambient capabilities, with its HOME, USER and
    /// LOGNAME.
    pub fn apply(self: &Arc<Self>, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        cmd.env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name);
        if self.is_current() {
            return;
        }
        let me = self.clone();
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: prctl, setgroups, setgid and setuid are plain
        // system calls, and it reads memory allocated before the fork without allocating.
        unsafe {
            cmd.pre_exec(move || {
                // Ambient capabilities (how a service gets CAP_SETUID without being root) would
                // survive the exec: the script must not have them. Kernels before 4.3 have no
                // ambient set; EINVAL there means there is nothing to clear.
                if libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                ) != 0
                    && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
                {
                    return Err(io::Error::last_os_error());
                }
                switch_user(&me.groups, me.gid, me.uid)
            });
        }
    }
}

/// Makes this process `uid` with primary group `gid` and supplementary `groups`, in the order
/// that leaves no privilege behind (groups, gid, uid). Plain system calls, no allocation: safe
/// between fork and exec. Needs CAP_SETUID and CAP_SETGID (root has them).
pub fn switch_user(groups: &[u32], gid: u32, uid: u32) -> io::Result<()> {
    // SAFETY: plain system calls on memory the caller owns; `groups.len()` entries are read.
    let failed = unsafe {
        libc::setgroups(groups.len(), groups.as_ptr()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
    };
    if failed {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's supplementary groups.
fn current_groups() -> Vec<u32> {
    // SAFETY: with a size of 0, getgroups only returns how many groups there are.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `groups` has room for `n` entries.
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(n.max(0) as usize);
    groups
}

/// The effective capability set (`CapEff` in /proc/self/status).
fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_and_an_unknown_user_is_named() {
        let root = RunAs::lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        let err = RunAs::lookup("no-such-user-tandem").unwrap_err();
        assert!(err.to_string().contains("\"no-such-user-tandem\""), "{err}");
        assert!(effective_capabilities().is_some());
    }
}
