//! `tandem doctor` as an operator runs it: on the packaged defaults (exit 0 with the console's
//! first user as a warning), beside a running `tandem serve` (its ports held by Tandem), with
//! another program on a port (exit 1, naming it), a configuration `serve` refuses (exit 1, the
//! same error) and one that cannot be read (exit 2).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// tandem.example.toml as the package installs it (its defaults, the data directory
/// `data_dir`), on free ports so that tests beside it do not collide.
fn packaged_config(dir: &Path, data_dir: &Path) -> (PathBuf, [u16; 3]) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tandem.example.toml");
    let mut text = std::fs::read_to_string(example).unwrap();
    let ports = [
        common::free_port(),
        common::free_port(),
        common::free_port(),
    ];
    for (default, port) in [4573, 9573, 9574].iter().zip(ports) {
        let line = format!("listen = \"127.0.0.1:{default}\"");
        assert!(text.contains(&line), "{line}");
        text = text.replace(&line, &format!("listen = \"127.0.0.1:{port}\""));
    }
    let line = "data_dir = \"tandem-data\"";
    assert!(text.contains(line));
    text = text.replace(
        line,
        &format!("data_dir = {:?}", data_dir.display().to_string()),
    );
    let path = dir.join("tandem.toml");
    std::fs::write(&path, text).unwrap();
    (path, ports)
}

fn doctor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("doctor")
        .args(args)
        .env_remove("TANDEM_CONFIG")
        .env_remove("TANDEM_DATA_DIR")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn the_packaged_defaults_on_a_fresh_install_exit_zero() {
    if !is_root() {
        return test_env::skip("a data directory owned by the service's user needs root");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("lib-tandem");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o750)).unwrap();
    let nobody = 65534;
    std::os::unix::fs::chown(&data, Some(nobody), Some(nobody)).unwrap();
    let (config, ports) = packaged_config(dir.path(), &data);
    let config = config.to_str().unwrap();

    let o = doctor(&["--config", config, "--service-user", "nobody"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for port in ports {
        assert!(out.contains(&format!("127.0.0.1:{port}/tcp")), "{out}");
    }
    assert!(out.contains("warn  first user"), "{out}");
    let add = format!(
        "fix: runuser -u nobody -- tandem user add admin --role admin --data-dir {}",
        data.display()
    );
    assert!(out.contains(&add), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        !out.contains('\x1b'),
        "no colour under NO_COLOR or off a terminal"
    );

    let o = doctor(&["--config", config, "--service-user", "nobody", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["summary"]["fail"], 0);
    assert!(
        json["facts"]["configuration"]
            .as_str()
            .unwrap()
            .starts_with(config)
    );
    let checks = json["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["group"] == "ports" && c["status"] == "ok")
    );
    // Nothing was changed: the data directory is still empty.
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
}

#[test]
fn a_running_tandems_ports_are_its_own_and_another_programs_fail() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (config, [agi, metrics, web]) = packaged_config(dir.path(), &data);
    let me = if is_root() {
        "root".to_string()
    } else {
        whoami()
    };
    let args = ["--config", config.to_str().unwrap(), "--service-user", &me];
    {
        let _serve = common::ServeChild::start(&config, &dir.path().join("serve.log"), agi);
        let o = doctor(&args);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        for port in [agi, metrics, web] {
            let line = out
                .lines()
                .find(|l| l.contains(&format!("127.0.0.1:{port}/tcp")))
                .unwrap_or_else(|| panic!("{port}: {out}"));
            assert!(
                line.contains("ok    ") && line.contains("held by Tandem (pid "),
                "{out}"
            );
        }
        assert!(out.contains("and it answers /health"), "{out}");
    }
    // Serve stopped; another program takes the console's port.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", web)).unwrap();
    let o = doctor(&args);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains(&format!("web console 127.0.0.1:{web}/tcp")))
        .unwrap();
    assert!(
        line.contains("FAIL") && line.contains(&format!("by pid {}:", std::process::id())),
        "{out}"
    );
    assert!(
        out.contains("or set [web] listen to a free address"),
        "{out}"
    );
    drop(squatter);
}

fn whoami() -> String {
    let o = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_configuration_serve_refuses_fails_and_one_that_cannot_be_read_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[fastagi]\nmax_session = 3\n").unwrap();
    let bad = bad.to_str().unwrap();
    let o = doctor(&["--config", bad, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let found = json["checks"][0]["found"].as_str().unwrap();
    assert!(found.contains("max_session"), "{found}");
    // The same error as serve's.
    let serve = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--config", bad])
        .output()
        .unwrap();
    let serve_err = String::from_utf8_lossy(&serve.stderr);
    let first = found.split(':').next().unwrap();
    assert!(serve_err.contains(first), "{serve_err} / {found}");

    let missing = dir.path().join("none.toml");
    let o = doctor(&["--config", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("cannot read the configuration file"));
    let o = doctor(&["--config", missing.to_str().unwrap(), "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["exit_code"], 2);
}
