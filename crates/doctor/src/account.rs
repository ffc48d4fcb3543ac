//! Users as the checks need them: who a user is (uid, groups), the name of a file's owner, and
//! what the mode bits let a user do to a file (`may`). POSIX ACLs are not read: Tandem's files
//! carry none, and a script directory that relies on one is said to be unreadable, which is
//! the safe mistake.

use std::os::unix::fs::MetadataExt;

/// A user of the system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, the primary one included.
    pub groups: Vec<u32>,
}

/// Read, write and search/execute, as in a mode's bits.
pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

impl Account {
    /// Looks `name` up in the system's user database; the error says what `RunAs` says
    /// (`no such user on this system`).
    pub fn lookup(name: &str) -> Result<Account, String> {
        let run_as = fastagi::script::RunAs::lookup(name).map_err(|e| {
            // RunAs names the setting it serves; here the user may come from elsewhere.
            e.to_string().replace("scripts.user = ", "user ")
        })?;
        Ok(Account {
            name: run_as.name,
            uid: run_as.uid,
            gid: run_as.gid,
            groups: run_as.groups,
        })
    }

    /// The user this process runs as.
    pub fn current() -> Result<Account, String> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let name = user_name(uid).ok_or_else(|| format!("uid {uid} has no name"))?;
        Account::lookup(&name)
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the mode bits give this user every right in `want` (`READ | EXEC`, ...) on the
    /// file `meta` describes. Root may read and write anything, and execute what anyone may.
    pub fn may(&self, meta: &std::fs::Metadata, want: u32) -> bool {
        let mode = meta.mode();
        if self.is_root() {
            return want & EXEC == 0 || meta.is_dir() || mode & 0o111 != 0;
        }
        let bits = if meta.uid() == self.uid {
            mode >> 6
        } else if meta.gid() == self.gid || self.groups.contains(&meta.gid()) {
            mode >> 3
        } else {
            mode
        } & 7;
        bits & want == want
    }
}

/// The name of user `uid`, when the user database has one.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value of a plain C struct; getpwuid_r fills it.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` is writable for its length.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: pw_name points at a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// `name` or `uid N` for a file's owner.
pub fn owner_text(uid: u32) -> String {
    user_name(uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// `owner:group-id mode` of a file, for a finding: `root 0600`.
pub fn describe(meta: &std::fs::Metadata) -> String {
    format!("{} {:04o}", owner_text(meta.uid()), meta.mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_mode_bits_decide_for_owner_group_and_others() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        let owner = Account {
            name: "o".into(),
            uid: meta.uid(),
            gid: 12345,
            groups: vec![],
        };
        assert!(owner.may(&meta, READ | WRITE) && !owner.may(&meta, EXEC));
        let member = Account {
            uid: 4242,
            groups: vec![meta.gid()],
            ..owner.clone()
        };
        assert!(member.may(&meta, READ) && !member.may(&meta, WRITE));
        let other = Account {
            uid: 4242,
            gid: 4242,
            groups: vec![],
            ..owner
        };
        assert!(!other.may(&meta, READ));
        let nobody = Account::lookup("nobody").unwrap();
        assert_eq!(nobody.uid, 65534);
        assert_eq!(user_name(0).as_deref(), Some("root"));
        let e = Account::lookup("no-such-user-tandem").unwrap_err();
        assert!(e.contains("user \"no-such-user-tandem\""), "{e}");
    }
}
