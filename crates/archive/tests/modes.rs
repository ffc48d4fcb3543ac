//! The archive holds calls' signalling and audio: its directories and tar files are their
//! owner's alone from their first byte whatever the umask, or shared with one group when told
//! so; an archive an older release left 0755/0644 is narrowed when it is opened.

use archive::{Archive, ArchiveConfig, LinkType, Packet};
use filemode::Access;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Everything below `root` with its mode and group, root first.
fn tree(root: &Path) -> Vec<(PathBuf, u32, u32)> {
    let mut out = vec![];
    let mut pending = vec![root.to_path_buf()];
    while let Some(p) = pending.pop() {
        let meta = std::fs::metadata(&p).unwrap();
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
        out.push((p, meta.mode() & 0o7777, meta.gid()));
    }
    out
}

fn one_call(config: ArchiveConfig) {
    let mut archive = Archive::new(config).unwrap();
    let call = archive
        .start_call(b"modes@test", 1_795_248_540, LinkType::RAW)
        .unwrap();
    let ip = [0x45u8; 40];
    let packet = Packet {
        ts_sec: 1_795_248_540,
        ts_usec: 0,
        data: &ip,
        orig_len: 40,
    };
    archive.add_sip(call, &packet).unwrap();
    archive.add_rtp(call, &packet, 28).unwrap();
    archive.end_call(call).unwrap();
    archive.sync_and_close_tars().unwrap();
}

fn assert_modes(root: &Path, dir_mode: u32, file_mode: u32, gid: Option<u32>) {
    let all = tree(root);
    assert_eq!(
        all.len(),
        6,
        "root, day, hour, minute and two tars: {all:?}"
    );
    for (p, mode, g) in all {
        let want = if p.is_dir() { dir_mode } else { file_mode };
        assert_eq!(mode, want, "{}: {mode:04o}", p.display());
        if let Some(gid) = gid {
            assert_eq!(g, gid, "{}", p.display());
        }
    }
}

#[test]
fn archive_files_are_private_shared_with_a_group_or_narrowed_when_old() {
    // SAFETY: umask only swaps the process's mask; this binary runs one test.
    unsafe { libc::umask(0o022) };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("archive");
    one_call(ArchiveConfig::new(&root));
    assert_modes(&root, 0o700, 0o600, None);

    // An older release's archive.
    for (p, _, _) in tree(&root) {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    drop(Archive::new(ArchiveConfig::new(&root)).unwrap());
    assert_modes(&root, 0o700, 0o600, None);

    // Shared with a group (this process's own, which it may give).
    // SAFETY: getegid has no preconditions.
    let gid = unsafe { libc::getegid() };
    let group = Access::group(&gid.to_string()).unwrap();
    let shared = dir.path().join("shared");
    one_call(ArchiveConfig {
        access: group.clone(),
        ..ArchiveConfig::new(&shared)
    });
    assert_modes(&shared, 0o2750, 0o640, Some(gid));
    // The same archive, private again: the group loses every file.
    drop(Archive::new(ArchiveConfig::new(&shared)).unwrap());
    assert_modes(&shared, 0o700, 0o600, None);
    // And given to the group again.
    drop(
        Archive::new(ArchiveConfig {
            access: group,
            ..ArchiveConfig::new(&shared)
        })
        .unwrap(),
    );
    assert_modes(&shared, 0o2750, 0o640, Some(gid));
}
