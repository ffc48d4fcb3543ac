//! A throwaway PostgreSQL server for tests and benchmarks: Debian's package (`initdb`,
//! `pg_ctl`) run in a temporary directory, listening on 127.0.0.1 with trust authentication,
//! stopped and removed when dropped. As root it runs as the `postgres` user, because
//! PostgreSQL refuses to run as root.
//!
//! ```no_run
//! let server = pg_scratch::PgServer::start(&pg_scratch::Options::default())?;
//! let conninfo = server.conninfo(); // host=127.0.0.1 port=… user=tandem dbname=postgres
//! # Ok::<(), pg_scratch::PgError>(())
//! ```
//!
//! Never: touches a cluster it did not create, listens beyond loopback, or outlives its value
//! (`Drop` stops it with `pg_ctl stop -m immediate`; the directory goes with the `TempDir`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error(
        "PostgreSQL is not installed: no initdb under /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql; no server needs to run)"
    )]
    NotInstalled,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed: {output}")]
    Command { command: String, output: String },
}

/// How the server runs; the default is a test's (fsync off, the package's buffers).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Where the temporary directory goes (the system's temporary directory when `None`).
    pub parent: Option<PathBuf>,
    /// `fsync`: off for tests (nothing survives them anyway), on for a benchmark that measures
    /// what a production server would do.
    pub fsync: bool,
    /// `shared_buffers` in MiB (the package's default, 128, when `None`).
    pub shared_buffers_mib: Option<u64>,
    /// More `-c name=value` settings.
    pub settings: Vec<(String, String)>,
}

/// The newest `bin` directory of Debian's PostgreSQL packages, if one is installed.
pub fn bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// A running server in a directory of its own.
pub struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    as_user: Option<&'static str>,
    opts: String,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
    let what = what.into();
    move |source| PgError::Io { what, source }
}

/// Runs a PostgreSQL tool (as `as_user` when given); its stdout, or what it said on failure.
fn run(as_user: Option<&str>, program: &Path, args: &[&str]) -> Result<String, PgError> {
    let mut cmd = match as_user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    };
    let out = cmd
        .args(args)
        .output()
        .map_err(io(format!("running {}", program.display())))?;
    if !out.status.success() {
        return Err(PgError::Command {
            command: format!("{} {}", program.display(), args.join(" ")),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl PgServer {
    /// Creates a cluster and starts it; returns once it accepts connections.
    pub fn start(options: &Options) -> Result<PgServer, PgError> {
        let bin = bin_dir().ok_or(PgError::NotInstalled)?;
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let as_user = root.then_some("postgres");
        let mut builder = tempfile::Builder::new();
        builder.prefix("pg-scratch-");
        let dir = match &options.parent {
            Some(p) => builder.tempdir_in(p),
            None => builder.tempdir(),
        }
        .map_err(io("creating a directory for PostgreSQL"))?;
        if let Some(u) = as_user {
            let ok = Command::new("chown")
                .arg(u)
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(PgError::Command {
                    command: format!("chown {u} {}", dir.path().display()),
                    output: "failed".into(),
                });
            }
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io("finding a free port"))?
            .port();
        let data = dir.path().join("data");
        let mut opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync={}",
            dir.path().display(),
            if options.fsync { "on" } else { "off" }
        );
        if let Some(mib) = options.shared_buffers_mib {
            opts.push_str(&format!(" -c shared_buffers={mib}MB"));
        }
        for (k, v) in &options.settings {
            opts.push_str(&format!(" -c {k}={v}"));
        }
        let server = PgServer {
            bin,
            data,
            as_user,
            opts,
            port,
            dir,
        };
        run(
            as_user,
            &server.bin.join("initdb"),
            &[
                "-D",
                &server.data.to_string_lossy(),
                "-A",
                "trust",
                "-U",
                "tandem",
                "--no-sync",
            ],
        )?;
        server.start_again()?;
        Ok(server)
    }

    /// A libpq connection string for the `postgres` database.
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=tandem dbname=postgres connect_timeout=5",
            self.port
        )
    }

    /// The directory holding the server's Unix socket (`.s.PGSQL.<port>`). A socket file is
    /// reached by its path, so a client in another network namespace of this machine, which
    /// cannot reach this one's 127.0.0.1, can still connect through it.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// [`PgServer::conninfo`] through the Unix socket in [`PgServer::socket_dir`].
    pub fn conninfo_unix(&self) -> String {
        format!(
            "host={} port={} user=tandem dbname=postgres connect_timeout=5",
            self.dir.path().display(),
            self.port
        )
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// Starts the (stopped) server on its data directory; returns once it accepts connections.
    pub fn start_again(&self) -> Result<(), PgError> {
        let log = self.dir.path().join("server.log");
        run(
            self.as_user,
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-o",
                &self.opts,
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-t",
                "120",
                "start",
            ],
        )
        .map(drop)
    }

    /// `pg_ctl stop -m fast`: sessions are disconnected, as a database restart does to clients.
    pub fn stop_fast(&self) -> Result<(), PgError> {
        run(
            self.as_user,
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        )
        .map(drop)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = run(
            self.as_user,
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}
