//! The tests' PostgreSQL: a throwaway server (`pg_scratch`), or a skip with the reason when
//! PostgreSQL is not installed.

#![allow(dead_code)] // Each test file uses its own part of this module.

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
