//! deploy/tandem.service as the packages install it: they install what it runs and what its
//! `Documentation=` names (packaging/files); systemd reads the unit, and the unit with the
//! drop-in its comments give for scripts run as Asterisk's user, without a complaint.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn unit() -> String {
    std::fs::read_to_string(repo().join("deploy/tandem.service")).unwrap()
}

/// The files the packages install (packaging/files): destination → source in the repository
/// (or `@binary`, `@config`).
fn installed() -> Vec<(PathBuf, String)> {
    let manifest = std::fs::read_to_string(repo().join("packaging/files")).unwrap();
    manifest
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(words.len(), 4, "packaging/files: {l}");
            (PathBuf::from(words[1]), words[0].to_string())
        })
        .collect()
}

#[test]
fn the_packages_install_the_unit_what_it_runs_and_the_documentation_it_names() {
    let unit = unit();
    let installed = installed();
    let has = |dest: &str| installed.iter().find(|(d, _)| d == Path::new(dest));
    assert_eq!(
        has("/usr/lib/systemd/system/tandem.service").map(|(_, s)| s.as_str()),
        Some("deploy/tandem.service")
    );
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    assert!(
        has(exec.split_whitespace().next().unwrap()).is_some(),
        "{exec}"
    );
    let config = unit
        .lines()
        .find_map(|l| l.strip_prefix("Environment=TANDEM_CONFIG="))
        .unwrap();
    assert!(has(config).is_some(), "{config}");
    let docs: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Documentation="))
        .flat_map(str::split_whitespace)
        .collect();
    assert!(!docs.is_empty());
    for doc in docs {
        let path = doc
            .strip_prefix("file://")
            .expect("a file:// documentation link");
        let Some((_, source)) = has(path) else {
            panic!("{path} is named by Documentation= but no package installs it: {installed:?}");
        };
        assert!(
            repo().join(source).is_file(),
            "{source} is installed from the repository but is not in it"
        );
    }
    for (_, source) in &installed {
        assert!(
            source.starts_with('@') || repo().join(source).is_file(),
            "packaging/files names {source}, which is not in the repository"
        );
    }
}

/// `systemd-analyze verify` of the unit (its ExecStart on the built binary) in `dir`; what it
/// said.
fn verify(dir: &Path) -> String {
    let text = unit().replace("/usr/bin/tandem", env!("CARGO_BIN_EXE_tandem"));
    std::fs::write(dir.join("tandem.service"), text).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("tandem.service"))
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn systemd_reads_the_unit_and_the_scripts_drop_in_without_a_complaint() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        test_env::skip("`systemd-analyze` is not installed (Debian package `systemd`)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(verify(dir.path()), "", "the unit alone");

    // The drop-in as the comments give it: the lines from `[Service]` to the next blank one.
    let unit = unit();
    let start = unit
        .find("#   [Service]")
        .expect("the drop-in in the comments");
    let drop_in: String = unit[start..]
        .lines()
        .take_while(|l| *l != "#")
        .map(|l| l.strip_prefix("#   ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        drop_in.contains("AmbientCapabilities=CAP_SETUID CAP_SETGID"),
        "{drop_in}"
    );
    let d = dir.path().join("tandem.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("scripts.conf"), &drop_in).unwrap();
    assert_eq!(verify(dir.path()), "", "with the drop-in:\n{drop_in}");
}
