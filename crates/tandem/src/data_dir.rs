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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The packaged service's configuration (the unit's `TANDEM_CONFIG`).
pub const SERVICE_CONFIG: &str = "/etc/tandem/tandem.toml";
/// The data directory when nothing else names one.
const LOCAL_DATA_DIR: &str = "tandem-data";

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
    // The owner's name, primary group and supplementary groups, as `initgroups` would set them
    // (the user database may not know the uid: then its group alone).
    let account =
        doctor::account::user_name(uid).and_then(|name| fastagi::script::RunAs::lookup(&name).ok());
    let (name, gid, groups) = match account {
        Some(a) => (a.name, a.gid, a.groups),
        None => (String::new(), meta.gid(), vec![meta.gid()]),
    };
    if let Err(e) = fastagi::script::switch_user(&groups, gid, uid) {
        anyhow::bail!(
            "{} belongs to uid {uid}{}: cannot become that user to open its files ({}); run \
             the command as that user",
            dir.display(),
            if name.is_empty() {
                String::new()
            } else {
                format!(" ({name})")
            },
            e
        );
    }
    Ok(())
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
