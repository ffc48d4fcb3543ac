//! Which file a script route may run. The path comes from the caller's dialplan through
//! Asterisk, so it is treated as hostile: it must name a regular, executable file inside the
//! script directory, reached without `..`, without an absolute path, and without a symlink that
//! leads out of the directory. The query string is never part of the file name.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused. Each names the path as asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefusedPath {
    #[error("script path {0:?} is absolute; only paths under the script directory are served")]
    Absolute(String),
    #[error("script path {0:?} contains `..`")]
    Traversal(String),
    #[error("script path {0:?} contains a NUL or control character")]
    BadCharacter(String),
    #[error("script path is empty (the request named no script)")]
    Empty,
    #[error("no script {0:?} in the script directory")]
    Missing(String),
    #[error("script {0:?} leads outside the script directory (a symlink)")]
    OutsideDirectory(String),
    #[error("script {0:?} is not a regular file")]
    NotAFile(String),
    #[error("script {0:?} is not executable (chmod +x)")]
    NotExecutable(String),
}

impl RefusedPath {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            RefusedPath::Absolute(_) => "absolute",
            RefusedPath::Traversal(_) => "traversal",
            RefusedPath::BadCharacter(_) => "bad_character",
            RefusedPath::Empty => "empty",
            RefusedPath::Missing(_) => "missing",
            RefusedPath::OutsideDirectory(_) => "outside_directory",
            RefusedPath::NotAFile(_) => "not_a_file",
            RefusedPath::NotExecutable(_) => "not_executable",
        }
    }
}

/// A script path that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptPath {
    /// As asked for, relative to the directory (`sub/x.sh`): `agi_request` for the script.
    pub name: String,
    /// The directory joined with the name: the script's argv[0], as classic AGI gives it.
    pub full: PathBuf,
    /// The file itself: its canonical path (symlinks followed) relative to the directory. One
    /// per file however the caller spelt it (`./ok.sh`, `sub//x.sh` and a symlink inside the
    /// directory all name `ok.sh` or `sub/x.sh`), so it is what metrics and per-script settings
    /// key on: the caller's dialplan cannot make more of them than there are files.
    pub file: String,
}

/// Resolves `requested` (the decoded path of `agi_network_script`, query already removed) under
/// `dir`, which must be canonical (see [`canonical_dir`]).
pub fn resolve(dir: &Path, requested: &str) -> Result<ScriptPath, RefusedPath> {
    if requested.is_empty() {
        return Err(RefusedPath::Empty);
    }
    if requested.chars().any(|c| c.is_control()) {
        return Err(RefusedPath::BadCharacter(requested.to_string()));
    }
    let rel = Path::new(requested);
    if rel.is_absolute() {
        return Err(RefusedPath::Absolute(requested.to_string()));
    }
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(RefusedPath::Traversal(requested.to_string())),
            Component::RootDir | Component::Prefix(_) => {
                return Err(RefusedPath::Absolute(requested.to_string()));
            }
        }
    }
    let full = dir.join(rel);
    // The real file, symlinks followed: it must still be inside the directory.
    let real = match full.canonicalize() {
        Ok(r) => r,
        Err(_) => return Err(RefusedPath::Missing(requested.to_string())),
    };
    if !real.starts_with(dir) {
        return Err(RefusedPath::OutsideDirectory(requested.to_string()));
    }
    let meta = real
        .metadata()
        .map_err(|_| RefusedPath::Missing(requested.to_string()))?;
    if !meta.is_file() {
        return Err(RefusedPath::NotAFile(requested.to_string()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(RefusedPath::NotExecutable(requested.to_string()));
    }
    let file = real
        .strip_prefix(dir)
        .map_err(|_| RefusedPath::OutsideDirectory(requested.to_string()))?
        .to_string_lossy()
        .into_owned();
    Ok(ScriptPath {
        name: requested.to_string(),
        full,
        file,
    })
}

/// The script directory, canonical, checked to be a directory. Its error names the directory.
pub fn canonical_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let canonical = dir.canonicalize().map_err(|e| {
        std::io::Error::new(e.kind(), format!("script directory {}: {e}", dir.display()))
    })?;
    if !canonical.is_dir() {
        return Err(std::io::Error::other(format!(
            "script directory {} is not a directory",
            dir.display()
        )));
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let d = canonical_dir(t.path()).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        for (name, mode) in [("ok.sh", 0o755), ("sub/x.sh", 0o755), ("plain.txt", 0o644)] {
            std::fs::write(d.join(name), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        symlink("/bin/sh", d.join("escape")).unwrap();
        symlink(d.join("ok.sh"), d.join("inside")).unwrap();
        (t, d)
    }

    #[test]
    fn only_executables_inside_the_directory() {
        let (_t, d) = dir();
        let ok = resolve(&d, "sub/x.sh").unwrap();
        assert_eq!(
            (ok.name.as_str(), ok.full.clone()),
            ("sub/x.sh", d.join("sub/x.sh"))
        );
        assert_eq!(ok.file, "sub/x.sh");
        assert_eq!(
            resolve(&d, "inside").unwrap().file,
            "ok.sh",
            "a symlink that stays inside is fine, and names the file it leads to"
        );
        let refused = |p: &str| resolve(&d, p).unwrap_err().reason();
        assert_eq!(refused("../etc/passwd"), "traversal");
        assert_eq!(refused("sub/../../x"), "traversal");
        assert_eq!(refused("/bin/sh"), "absolute");
        assert_eq!(refused("escape"), "outside_directory");
        assert_eq!(refused("plain.txt"), "not_executable");
        assert_eq!(refused("sub"), "not_a_file");
        assert_eq!(refused("nosuch.sh"), "missing");
        assert_eq!(refused(""), "empty");
        assert_eq!(refused("a\0b"), "bad_character");
    }

    #[test]
    fn every_spelling_of_a_file_names_the_same_file() {
        let (_t, d) = dir();
        symlink(".", d.join("sub/self")).unwrap();
        for spelling in [
            "ok.sh",
            "./ok.sh",
            ".//./ok.sh",
            "sub/../ok.sh",
            "inside",
            "sub/self/self/../ok.sh",
        ] {
            match resolve(&d, spelling) {
                Ok(p) => {
                    assert_eq!(p.file, "ok.sh", "{spelling}");
                    assert_eq!(p.name, spelling, "agi_request stays as asked for");
                }
                Err(e) => assert_eq!(e.reason(), "traversal", "{spelling}"),
            }
        }
        for spelling in [
            "sub/x.sh",
            "sub//x.sh",
            "./sub/./x.sh",
            "sub/self/self/x.sh",
        ] {
            assert_eq!(
                resolve(&d, spelling).unwrap().file,
                "sub/x.sh",
                "{spelling}"
            );
        }
    }
}
