//! Each check against real parts: sockets held by this process, directories and files owned
//! by `nobody` and root (as root; skipped otherwise), the deploy unit with and without the
//! capture drop-in, a console accounts file made by the console itself, a throwaway
//! PostgreSQL, and a TLS server with the collector's TLS setup.

use doctor::Status;
use doctor::account::Account;
use doctor::ports::{BindRights, Listener};
use procstat::Proto;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(3);

fn listener(service: &str, addr: SocketAddr, proto: Proto) -> Listener {
    Listener {
        service: service.into(),
        setting: format!("[{service}] listen"),
        addr,
        proto,
        health: false,
    }
}

const RIGHTS: BindRights = BindRights {
    low_ports: false,
    unprivileged_port_start: 1024,
};

#[test]
fn ports_free_held_by_another_program_foreign_or_shared() {
    // Free: an ephemeral port just given back.
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let f = doctor::ports::check_listener(&listener("fastagi", free, Proto::Tcp), RIGHTS, TIMEOUT);
    assert_eq!((f.status, f.found.as_str()), (Status::Ok, "free"), "{f:?}");

    // Held by this test (not a Tandem): a failure naming this process.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let f = doctor::ports::check_listener(&listener("metrics", addr, Proto::Tcp), RIGHTS, TIMEOUT);
    assert_eq!(f.status, Status::Fail, "{f:?}");
    let me = format!("by pid {}:", std::process::id());
    assert!(f.found.contains(&me), "{f:?}");
    let fix = f.fix.unwrap();
    assert!(
        fix.contains(&format!("systemctl status {}", std::process::id()))
            && fix.contains("[metrics] listen"),
        "{fix}"
    );
    // A wildcard listener takes the loopback address too.
    let any = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = any.local_addr().unwrap().port();
    let on_loopback = SocketAddr::from(([127, 0, 0, 1], port));
    let f =
        doctor::ports::check_listener(&listener("web", on_loopback, Proto::Tcp), RIGHTS, TIMEOUT);
    assert_eq!(f.status, Status::Fail, "{f:?}");

    // UDP, as the registrar and HEP bind it.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let f = doctor::ports::check_listener(
        &listener("sip", udp.local_addr().unwrap(), Proto::Udp),
        RIGHTS,
        TIMEOUT,
    );
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.check.ends_with("/udp"), "{f:?}");

    // An address that is not this machine's (TEST-NET-1).
    let foreign: SocketAddr = "192.0.2.1:4573".parse().unwrap();
    let f =
        doctor::ports::check_listener(&listener("fastagi", foreign, Proto::Tcp), RIGHTS, TIMEOUT);
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.found.contains("not an address of this machine"), "{f:?}");

    // Two services on one address.
    let both = doctor::ports::check_listeners(
        &[
            listener("metrics", free, Proto::Tcp),
            listener("web", free, Proto::Tcp),
        ],
        RIGHTS,
        TIMEOUT,
    );
    assert_eq!(both.len(), 3);
    assert_eq!(both[0].status, Status::Fail);
    assert!(
        both[0].found.contains("[metrics] listen and [web] listen"),
        "{:?}",
        both[0]
    );
}

#[test]
fn a_low_port_needs_the_right_to_bind_it() {
    if unsafe { libc::geteuid() } != 0 {
        return test_env::skip("binding a port below 1024 needs root");
    }
    let low: SocketAddr = "127.0.0.1:7".parse().unwrap();
    let f = doctor::ports::check_listener(&listener("web", low, Proto::Tcp), RIGHTS, TIMEOUT);
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.fix.unwrap().contains("CAP_NET_BIND_SERVICE"));
    let rights = BindRights {
        low_ports: true,
        ..RIGHTS
    };
    let f = doctor::ports::check_listener(&listener("web", low, Proto::Tcp), rights, TIMEOUT);
    assert_eq!(f.status, Status::Ok, "{f:?}");
}

/// A directory for `nobody`'s files, under a temporary one others may enter. None (skipped)
/// unless root.
fn as_root() -> Option<(tempfile::TempDir, Account)> {
    if unsafe { libc::geteuid() } != 0 {
        test_env::skip("files owned by another user need root");
        return None;
    }
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some((top, Account::lookup("nobody").unwrap()))
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), None).unwrap();
}

fn mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory `name` under `top`, `user`'s, with mode 0750.
fn dir_of(top: &Path, name: &str, user: &Account) -> PathBuf {
    let dir = top.join(name);
    std::fs::create_dir(&dir).unwrap();
    chown(&dir, user.uid);
    mode(&dir, 0o750);
    dir
}

#[test]
fn a_root_owned_file_in_the_data_directory_fails_until_its_fix_is_run() {
    let Some((top, nobody)) = as_root() else {
        return;
    };
    let dir = dir_of(top.path(), "data", &nobody);
    let kv = dir.join("kv.sqlite3");
    std::fs::write(&kv, "").unwrap();
    chown(&kv, nobody.uid);
    let found = doctor::files::check_data_dir(&dir, &nobody, None);
    assert!(found.iter().all(|f| f.status == Status::Ok), "{found:#?}");

    // `tandem user add` run as root: a console.sqlite3 the service cannot open.
    std::fs::write(dir.join("console.sqlite3"), "").unwrap();
    let found = doctor::files::check_data_dir(&dir, &nobody, None);
    let bad = found
        .iter()
        .find(|f| f.status == Status::Fail)
        .expect("a failure");
    assert!(bad.found.contains("console.sqlite3 (root 0"), "{bad:?}");
    let fix = bad.fix.clone().unwrap();
    assert_eq!(fix, format!("chown -R nobody {}", dir.display()));
    // The fix, run as given, clears it.
    let status = std::process::Command::new("sh")
        .args(["-c", &fix])
        .status()
        .unwrap();
    assert!(status.success());
    let found = doctor::files::check_data_dir(&dir, &nobody, None);
    assert!(found.iter().all(|f| f.status == Status::Ok), "{found:#?}");

    // Open to every user: a warning (reading) or a failure (writing).
    mode(&dir, 0o755);
    let found = doctor::files::check_data_dir(&dir, &nobody, None);
    assert_eq!(found[0].status, Status::Warn, "{found:#?}");
    assert_eq!(
        found[0].fix.as_deref(),
        Some(&*format!("chmod o-rwx {}", dir.display()))
    );
    mode(&dir, 0o777);
    assert_eq!(
        doctor::files::check_data_dir(&dir, &nobody, None)[0].status,
        Status::Fail
    );

    // Owned by root.
    mode(&dir, 0o750);
    chown(&dir, 0);
    let found = doctor::files::check_data_dir(&dir, &nobody, None);
    assert_eq!(found[0].status, Status::Fail, "{found:#?}");
    assert_eq!(
        found[0].fix.as_deref(),
        Some(&*format!("chown nobody: {}", dir.display()))
    );
}

#[test]
fn a_missing_data_directory_is_fine_where_the_user_may_create_it() {
    let Some((top, nobody)) = as_root() else {
        return;
    };
    let theirs = dir_of(top.path(), "theirs", &nobody);
    let found = doctor::files::check_data_dir(&theirs.join("data"), &nobody, None);
    assert_eq!(found[0].status, Status::Ok, "{found:#?}");
    assert!(found[0].found.contains("does not exist yet"));
    let found = doctor::files::check_data_dir(&top.path().join("data"), &nobody, None);
    assert_eq!(found[0].status, Status::Fail, "{found:#?}");
    assert!(
        found[0]
            .fix
            .as_ref()
            .unwrap()
            .starts_with("mkdir -p -m 0750 ")
    );
    // Unless the unit's StateDirectory= is that directory: systemd makes it at the start.
    let name = format!("tandem-doctor-test-{}", std::process::id());
    let units = tempfile::tempdir().unwrap();
    let unit_text = format!("[Service]\nUser=nobody\nStateDirectory={name}\n");
    std::fs::write(units.path().join("tandem.service"), unit_text).unwrap();
    let unit = doctor::unit::from_files("tandem.service", &[units.path()]);
    let state = Path::new("/var/lib").join(&name);
    let found = doctor::files::check_data_dir(&state, &nobody, unit.as_ref());
    assert_eq!(found[0].status, Status::Ok, "{found:#?}");
    assert!(found[0].found.contains("systemd makes it"), "{found:#?}");
}

#[test]
fn scripts_the_scripts_user_cannot_run_are_named() {
    let Some((top, nobody)) = as_root() else {
        return;
    };
    let dir = top.path().join("agi-bin");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let script = |name: &str, m: u32| {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        mode(&p, m);
        p
    };
    script("a.sh", 0o755);
    script("sub/b.agi", 0o755);
    script("phpagi.php", 0o644); // a library, not a route
    let found = doctor::files::check_scripts(&dir, &nobody);
    assert_eq!(found[0].status, Status::Ok, "{found:#?}");
    assert!(found[0].found.starts_with("2 scripts"), "{found:#?}");

    let private = script("private.sh", 0o700);
    let found = doctor::files::check_scripts(&dir, &nobody);
    assert_eq!(found[0].status, Status::Fail, "{found:#?}");
    assert!(
        found[0].found.contains("private.sh (root 0700)"),
        "{found:#?}"
    );
    chown(&private, nobody.uid);
    assert_eq!(
        doctor::files::check_scripts(&dir, &nobody)[0].status,
        Status::Ok
    );

    mode(&dir, 0o700);
    let found = doctor::files::check_scripts(&dir, &nobody);
    assert_eq!(found[0].status, Status::Fail, "{found:#?}");
    assert!(found[0].found.contains("may not enter"), "{found:#?}");
    let missing = doctor::files::check_scripts(&top.path().join("none"), &nobody);
    assert_eq!(missing[0].status, Status::Fail);
}

#[test]
fn capture_needs_an_interface_and_a_unit_that_grants_raw_sockets() {
    let sys = Path::new("/sys/class/net");
    assert_eq!(
        doctor::capture::check_interface("lo", sys).status,
        Status::Ok
    );
    let f = doctor::capture::check_interface("nosuch0", sys);
    assert_eq!(f.status, Status::Fail);
    assert!(f.found.contains("lo"), "{f:?}");

    let now = doctor::capture::raw_socket_allowed();
    let root = unsafe { libc::geteuid() } == 0;
    assert_eq!(now.is_ok(), root, "{now:?}");

    let units = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tandem.service"),
        units.path().join("tandem.service"),
    )
    .unwrap();
    let read = || doctor::unit::from_files("tandem.service", &[units.path()]);
    let found = doctor::capture::check_raw_sockets(Ok(()), read().as_ref());
    assert_eq!(found[1].status, Status::Fail, "{found:#?}");
    // The fix writes its drop-in under /etc: run it against the temporary directory instead.
    let fix = found[1].fix.clone().unwrap();
    let fix = fix
        .replace("/etc/systemd/system", &units.path().display().to_string())
        .replace(
            "systemctl daemon-reload && systemctl restart tandem",
            "true",
        );
    let status = std::process::Command::new("sh")
        .args(["-c", &fix])
        .status()
        .unwrap();
    assert!(status.success());
    let found = doctor::capture::check_raw_sockets(Ok(()), read().as_ref());
    assert_eq!(found[1].status, Status::Ok, "{found:#?}");

    // Without a unit, this process's refusal is the service's.
    let refused = std::io::Error::from_raw_os_error(libc::EPERM);
    let found = doctor::capture::check_raw_sockets(Err(refused), None);
    assert_eq!(found[0].status, Status::Fail);
    assert!(found[0].fix.as_ref().unwrap().contains("cap_net_raw"));
}

#[test]
fn the_console_user_is_counted_without_touching_the_accounts_file() {
    let dir = tempfile::tempdir().unwrap();
    let add = "tandem user add admin --role admin";
    let f = doctor::console::check_first_user(dir.path(), add);
    assert_eq!((f.status, f.fix.as_deref()), (Status::Warn, Some(add)));

    let file = doctor::console::accounts_file(dir.path());
    let accounts = console::Accounts::open(&file).unwrap();
    drop(accounts);
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    assert_eq!(
        doctor::console::check_first_user(dir.path(), add).status,
        Status::Warn
    );
    let accounts = console::Accounts::open(&file).unwrap();
    accounts
        .add_user("admin", console::Role::Admin, "a long enough password")
        .unwrap();
    drop(accounts);
    let f = doctor::console::check_first_user(dir.path(), add);
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.found.starts_with("1 user in"), "{f:?}");
    assert_eq!(listing(), before, "doctor created or removed a file");
}

#[test]
fn postgresql_connects_with_its_version_or_says_why_not() {
    let server = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(e) => return test_env::skip(&e.to_string()),
    };
    let f = doctor::postgres::check_connection(
        "[collector] postgres",
        &format!("{} password=hunter2-secret", server.conninfo()),
        TIMEOUT,
    );
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.found.contains("connected, PostgreSQL "), "{f:?}");
    let missing = server
        .conninfo()
        .replace("dbname=postgres", "dbname=tandem_cdr");
    let f = doctor::postgres::check_connection("[capture] cdr_postgres", &missing, TIMEOUT);
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.fix.unwrap().contains("createdb -O tandem tandem_cdr"));

    // Nothing listening, and a server that accepts and never answers: failures within the
    // timeout, never a hang; the password never printed.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let f = doctor::postgres::check_connection(
        "[collector] postgres",
        &format!(
            "host=127.0.0.1 port={} user=u password=hunter2-secret",
            closed.port()
        ),
        TIMEOUT,
    );
    assert_eq!(f.status, Status::Fail, "{f:?}");
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let f = doctor::postgres::check_connection(
        "[collector] postgres",
        &format!(
            "host=127.0.0.1 port={} user=u password=hunter2-secret",
            silent.local_addr().unwrap().port()
        ),
        Duration::from_millis(300),
    );
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.found.contains("no answer within 300 ms"), "{f:?}");
    assert!(!format!("{f:?}").contains("hunter2"));
    let f = doctor::postgres::check_connection("[collector] postgres", "host=x port=abc", TIMEOUT);
    assert!(f.found.contains("not a valid connection string"), "{f:?}");
}

/// A CA and a server certificate for `names`, signed by it.
fn pki(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let paths = (dir.join("ca.pem"), dir.join("c.pem"), dir.join("k.pem"));
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// A TLS server with the collector's TLS setup (`tls_pem`), answering handshakes until the
/// test ends.
fn tls_server(cert: &Path, key: &Path) -> SocketAddr {
    let config = std::sync::Arc::new(tls_pem::server_config(cert, key).unwrap());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut tcp in l.incoming().flatten() {
            let mut conn = rustls::ServerConnection::new(config.clone()).unwrap();
            while conn.is_handshaking() {
                if conn.complete_io(&mut tcp).is_err() {
                    break;
                }
            }
            let _ = conn.complete_io(&mut tcp);
        }
    });
    addr
}

#[test]
fn the_collector_is_reached_over_tls_with_its_name_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki(dir.path(), &["collector.example", "localhost"]);
    let addr = tls_server(&cert, &key);
    let mut target = doctor::collector::CollectorTarget {
        addr: format!("localhost:{}", addr.port()),
        ca_file: Some(ca.clone()),
        ..Default::default()
    };
    let f = doctor::collector::check_collector(&target, TIMEOUT);
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(f.found.contains("handshake done"), "{f:?}");

    target.server_name = Some("other.example".into());
    let f = doctor::collector::check_collector(&target, TIMEOUT);
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(
        f.fix.as_ref().unwrap().contains("collector_server_name"),
        "{f:?}"
    );

    // Another CA: the certificate is not trusted.
    let other = tempfile::tempdir().unwrap();
    let (other_ca, _, _) = pki(other.path(), &["localhost"]);
    target.server_name = None;
    target.ca_file = Some(other_ca);
    assert_eq!(
        doctor::collector::check_collector(&target, TIMEOUT).status,
        Status::Fail
    );

    // Plain TCP off loopback is refused before anything is sent.
    let plain = doctor::collector::CollectorTarget {
        addr: "192.0.2.1:9575".into(),
        ..Default::default()
    };
    let f = doctor::collector::check_collector(&plain, TIMEOUT);
    assert_eq!(f.status, Status::Fail);
    assert!(f.fix.unwrap().contains("collector_ca"));

    // A collector that accepts and never answers the handshake: a failure, not a hang.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = doctor::collector::CollectorTarget {
        addr: format!("localhost:{}", silent.local_addr().unwrap().port()),
        ca_file: Some(ca),
        ..Default::default()
    };
    let f = doctor::collector::check_collector(&target, Duration::from_millis(300));
    assert_eq!(f.status, Status::Fail, "{f:?}");
    // Nothing listening.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let target = doctor::collector::CollectorTarget {
        addr: closed.to_string(),
        ..Default::default()
    };
    let f = doctor::collector::check_collector(&target, TIMEOUT);
    assert!(
        f.status == Status::Fail && f.found.contains("cannot connect"),
        "{f:?}"
    );
}

#[test]
fn the_sensor_token_file_must_hold_a_token_the_service_reads() {
    let Some((top, nobody)) = as_root() else {
        return;
    };
    let token = top.path().join("sensor.token");
    let f = doctor::collector::check_token_file(&token, &nobody, "pbx1");
    assert_eq!(f.status, Status::Fail);
    assert!(f.fix.unwrap().contains("tandem sensor add pbx1"));
    std::fs::write(&token, "\n").unwrap();
    chown(&token, nobody.uid);
    mode(&token, 0o600);
    assert!(doctor::collector::check_token_file(&token, &nobody, "pbx1").found == "is empty");
    std::fs::write(&token, "tok-secret-value\n").unwrap();
    let f = doctor::collector::check_token_file(&token, &nobody, "pbx1");
    assert_eq!(f.status, Status::Ok, "{f:?}");
    assert!(
        !format!("{f:?}").contains("tok-secret"),
        "the token is never shown"
    );
    chown(&token, 0);
    let f = doctor::collector::check_token_file(&token, &nobody, "pbx1");
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(f.fix.unwrap().starts_with("chown nobody "));
}

#[test]
fn scripts_as_another_user_need_the_units_setuid_grants() {
    let nobody = Account::lookup("nobody").unwrap();
    let service = Account {
        name: "tandem".into(),
        uid: 4242,
        gid: 4242,
        groups: vec![4242],
    };
    let units = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tandem.service"),
        units.path().join("tandem.service"),
    )
    .unwrap();
    let read = || doctor::unit::from_files("tandem.service", &[units.path()]);
    let f = doctor::files::check_script_user_switch(&nobody, &service, read().as_ref()).unwrap();
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(
        f.found.contains("without CAP_SETUID and CAP_SETGID"),
        "{f:?}"
    );
    // The lines the fix gives, as the drop-in `systemctl edit` writes.
    let fix = f.fix.unwrap();
    let drop_in: String = fix
        .lines()
        .filter(|l| l.starts_with('[') || l.contains('='))
        .map(|l| format!("{l}\n"))
        .collect();
    let d = units.path().join("tandem.service.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("override.conf"), drop_in).unwrap();
    let f = doctor::files::check_script_user_switch(&nobody, &service, read().as_ref()).unwrap();
    assert_eq!(f.status, Status::Ok, "{f:?}");
    // The same user, or no unit: nothing to say.
    assert!(doctor::files::check_script_user_switch(&service, &service, read().as_ref()).is_none());
    assert!(doctor::files::check_script_user_switch(&nobody, &service, None).is_none());
}
