//! A throwaway PostgreSQL server for tests: Debian's package, initdb + pg_ctl in a temporary
//! directory, trust authentication on 127.0.0.1, stopped (and its directory removed) on drop.

#![allow(dead_code)] // Each test file uses its own part of this module.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn pg_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// A PostgreSQL server in a temporary directory, stopped on drop. As root it runs as the
/// `postgres` user (PostgreSQL refuses to run as root).
pub struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    as_user: Option<&'static str>,
    pub port: u16,
    dir: tempfile::TempDir,
}

pub fn run(as_user: Option<&str>, program: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = match as_user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    };
    let out = cmd.args(args).output().expect("run a PostgreSQL tool");
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl PgServer {
    /// Creates and starts a server, or prints why not and returns `None` when PostgreSQL is not
    /// installed.
    pub fn start() -> Option<PgServer> {
        let Some(bin) = pg_bin_dir() else {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return None;
        };
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let as_user = root.then_some("postgres");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        if let Some(u) = as_user {
            let ok = Command::new("chown")
                .args([u])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown {} to {u}", dir.path().display());
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data_s = data.to_str().unwrap().to_string();
        run(
            as_user,
            &bin.join("initdb"),
            &["-D", &data_s, "-A", "trust", "-U", "tandem", "--no-sync"],
        );
        let server = PgServer {
            bin,
            data,
            as_user,
            port,
            dir,
        };
        server.start_again();
        Some(server)
    }

    /// A libpq connection string for the `postgres` database.
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=tandem dbname=postgres connect_timeout=5",
            self.port
        )
    }

    /// Starts the (stopped) server on its data directory and waits until it accepts connections.
    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        run(
            self.as_user,
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// `pg_ctl stop -m fast`: sessions are disconnected, as a database restart does to clients.
    pub fn stop_fast(&self) {
        run(
            self.as_user,
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| {
            run(
                self.as_user,
                &self.bin.join("pg_ctl"),
                &[
                    "-D",
                    self.data.to_str().unwrap(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            )
        });
    }
}
