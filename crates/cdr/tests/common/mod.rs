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
