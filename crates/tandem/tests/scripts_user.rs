//! Legacy scripts as the `asterisk` user, set up as deploy/tandem.service documents it: Tandem
//! runs as its own unprivileged user with CAP_SETUID and CAP_SETGID (the drop-in's
//! `AmbientCapabilities=`; `setpriv` gives the same here, without systemd), `[scripts] user`
//! names the user scripts run as. A script then runs as that user, with its supplementary
//! groups and no capabilities, and reads a file outside Tandem's data directory that only that
//! user's group may read, as FreePBX's scripts read `/etc/freepbx.conf`. Without the two
//! capabilities, `tandem serve` refuses to start and says why.
//!
//! Needs root (to create the users); skips with a reason otherwise.

use asterisk_emu::{AgiStatus, Plan};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Users and a group made for one test, removed when dropped.
struct Accounts {
    service: String,
    scripts: String,
    group: String,
}

impl Accounts {
    fn create() -> Accounts {
        let tag = std::process::id();
        let a = Accounts {
            service: format!("tdmsvc{tag}"),
            scripts: format!("tdmast{tag}"),
            group: format!("tdmgrp{tag}"),
        };
        run("groupadd", &["--system", &a.group]);
        for (user, extra) in [(&a.service, None), (&a.scripts, Some(&a.group))] {
            let mut args = vec![
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ];
            if let Some(g) = extra {
                args.extend(["--groups", g.as_str()]);
            }
            args.push(user.as_str());
            run("useradd", &args);
        }
        a
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for user in [&self.service, &self.scripts] {
            let _ = Command::new("userdel").arg(user).status();
        }
        let _ = Command::new("groupdel").arg(&self.group).status();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

fn id(flag: &str, name: &str) -> String {
    let out = Command::new("id").args([flag, name]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Killed and reaped when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tandem serve` as `user`, holding only the capabilities named (`+setuid,+setgid` or none).
fn serve_as(user: &str, caps: &str, config: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", user, "--regid", user, "--init-groups"]);
    if !caps.is_empty() {
        cmd.args(["--inh-caps", caps, "--ambient-caps", caps]);
    }
    let bounding = if caps.is_empty() {
        "-all".to_string()
    } else {
        format!("-all,{caps}")
    };
    cmd.arg(format!("--bounding-set={bounding}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::null());
    cmd
}

#[test]
fn a_script_runs_as_the_scripts_user_with_its_groups_and_reads_a_file_only_they_may() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        test_env::skip("needs root, to create the users the service and its scripts run as");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        test_env::skip("`setpriv` is not installed (Debian package `util-linux`)");
        return;
    }
    let accounts = Accounts::create();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    // A file outside the data directory that only the scripts' group may read, as FreePBX's
    // /etc/freepbx.conf (root:asterisk, 0640).
    let secret = dir.path().join("freepbx.conf");
    std::fs::write(&secret, "AMPDBPASS=s3cret\n").unwrap();
    run(
        "chown",
        &[
            &format!("root:{}", accounts.group),
            secret.to_str().unwrap(),
        ],
    );
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o640)).unwrap();

    let agi_bin = dir.path().join("agi-bin");
    std::fs::create_dir(&agi_bin).unwrap();
    std::fs::set_permissions(&agi_bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = agi_bin.join("whoami.agi");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nwhile read -r line && [ -n \"$line\" ]; do :; done\n\
             echo \"SET VARIABLE WHO \\\"$(id -un) $(id -u) $(id -g) $(id -G)\\\"\"\nread -r reply\n\
             echo \"SET VARIABLE CAPS $(grep CapEff /proc/self/status | cut -f2)\"\nread -r reply\n\
             echo \"SET VARIABLE CONF \\\"$(cat {})\\\"\"\nread -r reply\n",
            secret.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The data directory belongs to the service's user, as StateDirectory= makes it.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    run("chown", &[&accounts.service, data.to_str().unwrap()]);
    let (agi, metrics) = (free_addr(), free_addr());
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"{agi}\"\n[metrics]\nlisten = \"{metrics}\"\n\
             [web]\nenabled = false\n[history]\nenabled = false\n\
             [kv]\ndata_dir = {data:?}\n\
             [scripts]\ndir = {agi_bin:?}\nuser = \"{}\"\n",
            accounts.scripts
        ),
    )
    .unwrap();

    // Without CAP_SETUID and CAP_SETGID the service refuses to start, and says why.
    let out = serve_as(&accounts.service, "", &config).output().unwrap();
    assert!(!out.status.success(), "started without the capabilities");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("scripts.user = \"{}\"", accounts.scripts))
            && err.contains("without CAP_SETUID and CAP_SETGID"),
        "{err}"
    );

    // With them, as the drop-in gives them.
    let log = dir.path().join("serve.log");
    let served = Served(
        serve_as(&accounts.service, "+setuid,+setgid", &config)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(metrics).is_err() {
        assert!(
            Instant::now() < deadline,
            "tandem serve did not start:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let plan = Plan {
        idle_timeout: Duration::from_secs(10),
        ..Plan::route("whoami.agi")
    };
    let out = rt.block_on(asterisk_emu::run(agi, &plan, 1)).unwrap();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(out.status, AgiStatus::Success, "{out:?}\n{log_text}");
    let vars = &out.channel.as_ref().unwrap().variables;
    let who = format!(
        "{} {} {} {}",
        accounts.scripts,
        id("-u", &accounts.scripts),
        id("-g", &accounts.scripts),
        id("-G", &accounts.scripts)
    );
    assert_eq!(vars["WHO"], who, "{log_text}");
    assert_eq!(
        vars["CAPS"], "0000000000000000",
        "the script holds no capability"
    );
    assert_eq!(vars["CONF"], "AMPDBPASS=s3cret", "{log_text}");
    drop(served);
}
