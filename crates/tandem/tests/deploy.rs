//! deploy/tandem.service as an operator installs it: what `Documentation=` names, the install
//! steps in its comments create; systemd reads the unit, and the unit with the drop-in its
//! comments give for scripts run as Asterisk's user, without a complaint.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn unit() -> String {
    std::fs::read_to_string(repo().join("deploy/tandem.service")).unwrap()
}

/// The files the `install` lines of the unit's comments put in place: destination → source.
fn installed(unit: &str) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for line in unit.lines().filter_map(|l| l.strip_prefix("#   install ")) {
        let words: Vec<&str> = line.split('#').next().unwrap().split_whitespace().collect();
        // Options with a value, then the operands.
        let mut operands = Vec::new();
        let mut target_dir = None;
        let mut i = 0;
        while i < words.len() {
            match words[i] {
                "-m" | "-o" | "-g" => i += 1,
                "-t" => {
                    target_dir = words.get(i + 1).map(PathBuf::from);
                    i += 1;
                }
                w if w.starts_with('-') => {}
                w => operands.push(w),
            }
            i += 1;
        }
        match (target_dir, operands.as_slice()) {
            (Some(dir), sources) => {
                for s in sources {
                    out.push((
                        dir.join(Path::new(s).file_name().unwrap()),
                        PathBuf::from(s),
                    ));
                }
            }
            (None, [source, dest]) => out.push((PathBuf::from(dest), PathBuf::from(source))),
            _ => {}
        }
    }
    out
}

#[test]
fn the_documentation_the_unit_names_is_installed_by_its_steps() {
    let unit = unit();
    let installed = installed(&unit);
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
        let Some((_, source)) = installed.iter().find(|(dest, _)| dest == Path::new(path)) else {
            panic!(
                "{path} is named by Documentation= but no install step creates it: {installed:?}"
            );
        };
        assert!(
            repo().join(source).is_file(),
            "{} is installed from the repository but is not in it",
            source.display()
        );
    }
}

/// `systemd-analyze verify` of the unit (its ExecStart on the built binary) in `dir`; what it
/// said.
fn verify(dir: &Path) -> String {
    let text = unit().replace("/usr/local/bin/tandem", env!("CARGO_BIN_EXE_tandem"));
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
