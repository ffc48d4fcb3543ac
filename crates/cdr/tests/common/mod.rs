//! The tests' PostgreSQL: a throwaway server (`pg_scratch`), or a skip with the reason when
//! PostgreSQL is not installed.

#![allow(dead_code)] // Each test file uses its own part of this module.

use cdr::{CdrCall, CdrRecord, CdrRegistration, CdrStream};

/// A server for one test, stopped and removed on drop.
pub struct PgServer(pg_scratch::PgServer);

impl std::ops::Deref for PgServer {
    type Target = pg_scratch::PgServer;
    fn deref(&self) -> &pg_scratch::PgServer {
        &self.0
    }
}

impl PgServer {
    /// Creates and starts a server, or says why not (a skip) and returns `None` when
    /// PostgreSQL is not installed. Any other failure to start fails the test.
    pub fn start() -> Option<PgServer> {
        match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
            Ok(s) => Some(PgServer(s)),
            Err(pg_scratch::PgError::NotInstalled) => {
                test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
                None
            }
            Err(e) => panic!("starting a throwaway PostgreSQL: {e}"),
        }
    }

    /// Starts the stopped server again.
    pub fn start_again(&self) {
        self.0.start_again().expect("pg_ctl start");
    }

    /// `pg_ctl stop -m fast`, as a database restart does to its clients.
    pub fn stop_fast(&self) {
        self.0.stop_fast().expect("pg_ctl stop -m fast");
    }
}

/// Both PostgreSQL layouts: the suites that run on PostgreSQL run on each.
pub const LAYOUTS: [cdr::PgLayout; 2] = [cdr::PgLayout::Plain, cdr::PgLayout::Partitioned];

/// The options that create a database in `layout`.
pub fn options(layout: cdr::PgLayout) -> cdr::PgOptions {
    cdr::PgOptions {
        layout,
        ..cdr::PgOptions::default()
    }
}

impl PgServer {
    /// A new, empty database on the server named `name`; its connection string.
    pub fn database(&self, name: &str) -> String {
        let mut admin = postgres::Client::connect(&self.conninfo(), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        self.conninfo()
            .replace("dbname=postgres", &format!("dbname={name}"))
    }

    /// A new database for `layout` (named after it and `test`), with its tables created.
    pub fn layout_database(&self, test: &str, layout: cdr::PgLayout) -> String {
        let conninfo = self.database(&format!("{test}_{layout:?}").to_lowercase());
        drop(cdr::PgStore::connect_with(&conninfo, &options(layout)).unwrap());
        conninfo
    }
}

/// A call of `sensor` at `start_us` with `streams` streams, its uid its identity.
pub fn call(sensor: &str, n: u64, start_us: i64, streams: usize) -> CdrRecord {
    let call_id = format!("call-{n}@partitions.test");
    let c = CdrCall {
        call_id: call_id.clone(),
        caller: format!("{}", 1000 + n % 7),
        called: format!("+4930{n:06}"),
        caller_addr: "10.1.0.5:5060".into(),
        callee_addr: "192.168.10.5:5060".into(),
        start_us,
        answer_us: Some(start_us + 2_000_000),
        end_us: Some(start_us + 62_000_000),
        state: "ended".into(),
        last_response: Some(200),
        last_reason: "OK".into(),
        sip_messages: 7,
        mos_min: Some(4.1),
        sensor: sensor.into(),
        ..CdrCall::default()
    };
    let s = (0..streams)
        .map(|i| CdrStream {
            call_id: Some(call_id.clone()),
            src: "10.1.0.5:4000".into(),
            dst: "192.168.10.5:4000".into(),
            ssrc: i as u32,
            payload: "g711A".into(),
            start_us: start_us + 2_000_000,
            end_us: start_us + 62_000_000,
            packets: 3000,
            ..CdrStream::default()
        })
        .collect();
    let mut r = CdrRecord::call(c, s);
    r.fill_identity(sensor);
    r
}

pub fn registration(n: u64, first_us: i64) -> CdrRecord {
    let mut r = CdrRecord::registration(CdrRegistration {
        call_id: format!("reg-{n}@partitions.test"),
        user: "1001".into(),
        domain: "pbx.example.com".into(),
        contact: "sip:1001@10.1.0.5".into(),
        src: "10.1.0.5:5060".into(),
        dst: "192.168.10.5:5060".into(),
        first_us,
        last_us: first_us + 40_000,
        requests: 2,
        last_code: Some(200),
        result: "registered".into(),
        ..CdrRegistration::default()
    });
    r.uid = r.identity("site-a");
    r
}

/// Makes a file unwritable even for root (the immutable attribute) or, for other users,
/// removes its write permission. False if neither works here.
pub fn set_read_only(path: &std::path::Path, read_only: bool) -> bool {
    use std::process::Command;
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if root {
        Command::new("chattr")
            .arg(if read_only { "+i" } else { "-i" })
            .arg(path)
            .status()
            .is_ok_and(|s| s.success())
    } else {
        use std::os::unix::fs::PermissionsExt;
        let mode = if read_only { 0o444 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).is_ok()
    }
}
