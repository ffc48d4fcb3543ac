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

/// A system as the package leaves it, made in private mount and network namespaces (nothing
/// of this machine changes): the `tandem` user (added to an overlay of /etc), /var/lib/tandem
/// (an overlay of /var/lib), /etc/tandem/tandem.toml with the documented defaults, the unit
/// installed, no systemd and no /proc (a chroot's). Doctor passes there with no argument; then
/// the classic mistakes, each failing until the fix it prints is run.
#[test]
fn a_fresh_install_passes_and_each_mistake_fails_until_its_fix_is_run() {
    if !is_root() {
        return test_env::skip("mount and network namespaces need root");
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let script = format!(
        r#"set -e
ip link set lo up
mkdir -p {d}/etc-up {d}/etc-work {d}/lib-up {d}/lib-work
mount -t overlay overlay -o lowerdir=/etc,upperdir={d}/etc-up,workdir={d}/etc-work /etc
mount -t overlay overlay -o lowerdir=/var/lib,upperdir={d}/lib-up,workdir={d}/lib-work /var/lib
id tandem >/dev/null 2>&1 || useradd --system --no-log-init --home-dir /var/lib/tandem --shell /usr/sbin/nologin tandem
rm -rf /var/lib/tandem /etc/tandem /etc/systemd/system/tandem.service.d
install -d -m 0750 -o tandem -g tandem /var/lib/tandem
install -d /etc/tandem
sed 's|^data_dir = "tandem-data"|data_dir = "/var/lib/tandem"|' {example} > /etc/tandem/tandem.toml
cp {unit} /etc/systemd/system/tandem.service
mount -t tmpfs none /proc
mount -t tmpfs none /run
doctor() {{ NO_COLOR=1 {bin} doctor > {d}/out$1 2>&1 && echo 0 > {d}/rc$1 || echo $? > {d}/rc$1; }}
fix() {{ sed -n 's/^ *fix: //p' {d}/out$1 | grep "$2" | head -1; }}
doctor 1
echo 'a long enough password' | {bin} user add admin --role admin --password-stdin --data-dir /var/lib/tandem
doctor 2
cp /var/lib/tandem/console.sqlite3 {d}/accounts
rm -f /var/lib/tandem/console.sqlite3*
cp {d}/accounts /var/lib/tandem/console.sqlite3
doctor 3
sh -c "$(fix 3 chown)"
doctor 4
sed -i 's|^interface = ""|interface = "lo"|' /etc/tandem/tandem.toml
doctor 5
sed -n '/fix: mkdir -p \/etc\/systemd/,/capture.conf/p' {d}/out5 | sed 's/^ *\(fix: \)\{{0,1\}}//' > {d}/dropin.sh
sh {d}/dropin.sh
doctor 6
"#,
        bin = env!("CARGO_BIN_EXE_tandem"),
        example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tandem.example.toml")
            .display(),
        unit = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/tandem.service")
            .display(),
    );
    let o = Command::new("unshare")
        .args(["-m", "-n", "--propagation", "private", "sh", "-c", &script])
        .env_remove("TANDEM_CONFIG")
        .env_remove("TANDEM_DATA_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let run = |n: u32| {
        let out = std::fs::read_to_string(dir.path().join(format!("out{n}"))).unwrap();
        let rc = std::fs::read_to_string(dir.path().join(format!("rc{n}"))).unwrap();
        (rc.trim().parse::<i32>().unwrap(), out)
    };
    let (rc, out) = run(1);
    assert_eq!(rc, 0, "{out}");
    // The unit names the configuration, or doctor takes the packaged one and warns that
    // the service does not.
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tandem.service"),
    )
    .unwrap();
    if unit.contains("serve --config /etc/tandem/tandem.toml")
        || unit.contains("Environment=TANDEM_CONFIG=/etc/tandem/tandem.toml")
    {
        assert!(
            out.contains("/etc/tandem/tandem.toml (the service's"),
            "{out}"
        );
    } else {
        assert!(
            out.contains("/etc/tandem/tandem.toml (the packaged service's"),
            "{out}"
        );
        assert!(out.contains("warn  service unit"), "{out}");
        let fix = "ExecStart=/usr/bin/tandem serve --config /etc/tandem/tandem.toml";
        assert!(out.contains(fix), "{out}");
    }
    assert!(
        out.contains("tandem (User= of /etc/systemd/system/tandem.service)"),
        "{out}"
    );
    assert!(
        out.contains("fix: runuser -u tandem -- tandem user add admin"),
        "{out}"
    );

    // `tandem user add` as root acts as the data directory's owner: the file is tandem's.
    let (rc, out) = run(2);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("ok    first user") && out.contains("1 user in"),
        "{out}"
    );
    // A file put back as root (a plain `cp`): one the service cannot open.
    let (rc, out) = run(3);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("console.sqlite3 (root 0600)"), "{out}");
    assert!(
        out.contains("fix: chown -R tandem /var/lib/tandem"),
        "{out}"
    );
    let (rc, out) = run(4);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("ok    first user") && out.contains("1 user in"),
        "{out}"
    );

    // Live capture configured: the unit must grant raw sockets.
    let (rc, out) = run(5);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("does not grant CAP_NET_RAW or AF_PACKET"),
        "{out}"
    );
    let (rc, out) = run(6);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("grants CAP_NET_RAW and AF_PACKET"), "{out}");
}
