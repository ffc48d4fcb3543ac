//! Kamailio as the peer: registrar + usrloc from Debian's package, on loopback UDP, with
//! bindings in memory only (`db_mode=0`) or written through to SQLite in WAL mode
//! (`db_mode=1`), and digest authentication from the subscriber table when asked.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's kamailio-sqlite-modules puts the SQLite schema.
const SCHEMA_DIR: &str = "/usr/share/kamailio/db_sqlite";
const MODULE_DIR: &str = "/usr/lib/x86_64-linux-gnu/kamailio/modules/";

/// How Kamailio keeps its bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Usrloc {
    /// `db_mode=0`: memory only.
    Memory,
    /// `db_mode=1`: every change written to SQLite before the reply.
    WriteThrough,
}

/// A running Kamailio: the main process and its children share a process group, which is
/// ended as a whole when this is dropped.
pub(super) struct Kamailio {
    child: Child,
    pub log: PathBuf,
}

impl Kamailio {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lines Kamailio logged as errors (a failed database write is logged, not answered).
    pub fn error_lines(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.lines().filter(|l| l.contains("ERROR")).count())
            .unwrap_or(0)
    }
}

impl Drop for Kamailio {
    fn drop(&mut self) {
        let group = -(self.child.id() as i32);
        // SAFETY: kill only sends a signal; the group is the one this process made.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever is left of the group (a child that outlived the main process) goes too.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Starts Kamailio on `127.0.0.1:port` with its files in `dir`. With `auth`, or with
/// write-through, the database is `dir/kamailio.sqlite`, made here from Kamailio's own
/// schema, in WAL mode, holding `users` (user, password) as subscribers.
pub(super) fn start(
    dir: &Path,
    port: u16,
    children: u32,
    usrloc: Usrloc,
    auth: bool,
    users: impl Iterator<Item = (String, String)>,
) -> anyhow::Result<Kamailio> {
    let db = (auth || usrloc == Usrloc::WriteThrough).then(|| dir.join("kamailio.sqlite"));
    if let Some(db) = &db {
        create_db(db, users)?;
    }
    let cfg = dir.join("kamailio.cfg");
    std::fs::write(&cfg, config(port, children, usrloc, auth, db.as_deref()))?;
    let log = dir.join("kamailio.log");
    let child = Command::new("kamailio")
        .arg("-f")
        .arg(&cfg)
        // -DD: no daemon (the main process stays this child), but it still forks workers.
        // -E: log to stderr (the log file). -m: shared memory, MiB.
        .args(["-DD", "-E", "-m", "512", "-M", "16"])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start kamailio (is it installed?): {e}"))?;
    Ok(Kamailio { child, log })
}

fn create_db(path: &Path, users: impl Iterator<Item = (String, String)>) -> anyhow::Result<()> {
    let mut conn = rusqlite::Connection::open(path)?;
    for part in ["standard", "usrloc", "auth_db"] {
        let file = Path::new(SCHEMA_DIR).join(format!("{part}-create.sql"));
        let sql = std::fs::read_to_string(&file).map_err(|e| {
            anyhow::anyhow!(
                "cannot read {}: {e} (apt-get install kamailio-sqlite-modules)",
                file.display()
            )
        })?;
        conn.execute_batch(&sql)?;
    }
    // WAL is a property of the file: Kamailio's connections find it set.
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    anyhow::ensure!(mode == "wal", "SQLite refused WAL mode ({mode})");
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO subscriber (username, domain, password) VALUES (?1, 'tandem', ?2)",
        )?;
        for (user, password) in users {
            insert.execute((user, password))?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The configuration: REGISTER only, answered statelessly; anything else gets 405.
fn config(port: u16, children: u32, usrloc: Usrloc, auth: bool, db: Option<&Path>) -> String {
    let mut modules = vec!["sl", "pv", "usrloc", "registrar"];
    let mut params = Vec::new();
    let url = db.map(|p| format!("sqlite://{}", p.display()));
    if let Some(url) = &url {
        modules.insert(0, "db_sqlite");
        if usrloc == Usrloc::WriteThrough {
            params.push(format!("modparam(\"usrloc\", \"db_url\", \"{url}\")"));
        }
    }
    let db_mode = match usrloc {
        Usrloc::Memory => 0,
        Usrloc::WriteThrough => 1,
    };
    params.push(format!("modparam(\"usrloc\", \"db_mode\", {db_mode})"));
    let mut check = String::new();
    if auth {
        let url = url
            .as_deref()
            .expect("authentication reads the subscriber table");
        modules.extend(["auth", "auth_db"]);
        params.push(format!("modparam(\"auth_db\", \"db_url\", \"{url}\")"));
        // The table holds plain passwords; Kamailio computes HA1 from them per request.
        params.push("modparam(\"auth_db\", \"calculate_ha1\", 1)".into());
        params.push("modparam(\"auth_db\", \"password_column\", \"password\")".into());
        check = "  if (!auth_check(\"tandem\", \"subscriber\", \"1\")) {\n    \
                 auth_challenge(\"tandem\", \"1\");\n    exit;\n  }\n  consume_credentials();\n"
            .into();
    }
    let loads: String = modules
        .iter()
        .map(|m| format!("loadmodule \"{m}.so\"\n"))
        .collect();
    format!(
        "#!KAMAILIO\ndebug=0\nlog_stderror=yes\nfork=yes\nchildren={children}\n\
         disable_tcp=yes\nauto_aliases=no\ndns=no\nrev_dns=no\n\
         listen=udp:127.0.0.1:{port}\nmpath=\"{MODULE_DIR}\"\n{loads}{params}\n\
         request_route {{\n  if (method != \"REGISTER\") {{\n    \
         sl_send_reply(\"405\", \"Method Not Allowed\");\n    exit;\n  }}\n{check}  \
         if (!save(\"location\")) {{\n    sl_reply_error();\n  }}\n  exit;\n}}\n",
        params = params.join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_through_with_auth_loads_the_database_first() {
        let cfg = config(
            5070,
            4,
            Usrloc::WriteThrough,
            true,
            Some(Path::new("/d/k.sqlite")),
        );
        assert!(cfg.find("db_sqlite.so").unwrap() < cfg.find("usrloc.so").unwrap());
        assert!(cfg.contains("modparam(\"usrloc\", \"db_mode\", 1)"));
        assert!(cfg.contains("modparam(\"usrloc\", \"db_url\", \"sqlite:///d/k.sqlite\")"));
        assert!(cfg.contains("auth_check(\"tandem\""));
        assert!(cfg.contains("listen=udp:127.0.0.1:5070\n"));
        let mem = config(5070, 2, Usrloc::Memory, false, None);
        assert!(!mem.contains("db_sqlite") && !mem.contains("auth"));
        assert!(mem.contains("modparam(\"usrloc\", \"db_mode\", 0)"));
    }
}
