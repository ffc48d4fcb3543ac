//! The contestants as running processes: `tandem serve` with a `[registrar]` section, or
//! Kamailio; how to tell that one answers, and what its processes cost.

use super::kamailio::{self, Kamailio, Usrloc};
use crate::agi;
use std::collections::HashMap;
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

/// Which server, and how it keeps bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Tandem,
    Kamailio(Usrloc),
}

impl Kind {
    pub const ALL: [Kind; 3] = [
        Kind::Tandem,
        Kind::Kamailio(Usrloc::Memory),
        Kind::Kamailio(Usrloc::WriteThrough),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Tandem => "tandem",
            Kind::Kamailio(Usrloc::Memory) => "kamailio-memory",
            Kind::Kamailio(Usrloc::WriteThrough) => "kamailio-sqlite-wal",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Kind::Tandem => "Tandem (durable)",
            Kind::Kamailio(Usrloc::Memory) => "Kamailio db_mode=0 (memory)",
            Kind::Kamailio(Usrloc::WriteThrough) => "Kamailio db_mode=1 (SQLite WAL)",
        }
    }
}

/// A server under test, stopped when dropped.
pub(super) enum Server {
    Tandem(Box<agi::Subject>),
    Kamailio(Kamailio),
}

impl Server {
    pub fn pid(&self) -> u32 {
        match self {
            Server::Tandem(s) => s.pid.expect("a started tandem has a pid"),
            Server::Kamailio(k) => k.pid(),
        }
    }

    /// User + system CPU seconds of the server's processes (Kamailio's workers included).
    pub fn cpu_seconds(&self) -> f64 {
        tree_cpu_seconds(self.pid())
    }

    /// Error lines in the server's log, where it keeps one.
    pub fn error_lines(&self) -> usize {
        match self {
            Server::Tandem(_) => 0,
            Server::Kamailio(k) => k.error_lines(),
        }
    }
}

/// Starts `kind` on `127.0.0.1:port` with its files in `dir`; with `auth`, `users` are its
/// subscribers and MD5 digest is required. Returns once it answers a REGISTER.
pub(super) fn start(
    kind: Kind,
    dir: &Path,
    port: u16,
    auth: bool,
    kamailio_children: u32,
    users: impl Iterator<Item = (String, String)>,
) -> anyhow::Result<Server> {
    let server = match kind {
        Kind::Tandem => Server::Tandem(Box::new(start_tandem(dir, port, auth, users)?)),
        Kind::Kamailio(usrloc) => Server::Kamailio(kamailio::start(
            dir,
            port,
            kamailio_children,
            usrloc,
            auth,
            users,
        )?),
    };
    wait_until_answering(port, kind.name())?;
    Ok(server)
}

fn start_tandem(
    dir: &Path,
    port: u16,
    auth: bool,
    users: impl Iterator<Item = (String, String)>,
) -> anyhow::Result<agi::Subject> {
    if auth {
        // The store is closed again before `tandem serve` opens it.
        let store = kv::Store::open_dir(dir.join("data"), kv::Options::default())?;
        registrar::users::add_many(&store, "tandem", users)?;
    }
    let section = format!(
        "[registrar]\nlisten = \"127.0.0.1:{port}\"\ndomains = []\nrealm = \"tandem\"\n\
         algorithms = [{}]\nmin_expires = 60\nmax_expires = 7200\ndefault_expires = 3600\n\
         max_contacts = 10\n",
        if auth { "\"MD5\"" } else { "" }
    );
    // FastAGI needs a port of its own; nothing uses it here.
    let fastagi_port = agi::free_port()?;
    let config = agi::write_serve_config(dir, fastagi_port, "", &section)?;
    // Errors only: each fresh store would warn that the console has no user yet.
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .env("TANDEM_LOG", "error");
    agi::spawn("tandem", cmd, fastagi_port, &agi::load_plan("bench"), None)
}

/// A port free for both UDP and TCP on loopback (Tandem listens on both).
pub(super) fn free_sip_port() -> anyhow::Result<u16> {
    for _ in 0..100 {
        let udp = UdpSocket::bind("127.0.0.1:0")?;
        let port = udp.local_addr()?.port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no port free for both UDP and TCP on 127.0.0.1")
}

/// Sends an unregistering REGISTER (Expires: 0, so no binding is left behind) until any SIP
/// response comes back (a 401 counts: the server is up).
fn wait_until_answering(port: u16, name: &str) -> anyhow::Result<()> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let local = sock.local_addr()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    for n in 0u32.. {
        let msg = format!(
            "REGISTER sip:tandem SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-probe-{n}\r\n\
             Max-Forwards: 70\r\nFrom: <sip:probe@tandem>;tag=p{n}\r\nTo: <sip:probe@tandem>\r\n\
             Call-ID: probe-{n}@bench\r\nCSeq: {} REGISTER\r\nContact: <sip:probe@{local}>\r\n\
             Expires: 0\r\nContent-Length: 0\r\n\r\n",
            n + 1
        );
        sock.send_to(msg.as_bytes(), ("127.0.0.1", port))?;
        if let Ok(len) = sock.recv(&mut buf)
            && buf[..len].starts_with(b"SIP/2.0 ")
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} does not answer REGISTER on 127.0.0.1:{port}"
        );
    }
    unreachable!("the probe loop ends by returning")
}

/// CPU seconds of `root` and every process descended from it.
fn tree_cpu_seconds(root: u32) -> f64 {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The parent is the second field after the command name (which may hold spaces).
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut total = 0.0;
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        total += procstat::process_cpu_seconds(pid).unwrap_or(0.0);
        todo.extend(children.get(&pid).into_iter().flatten());
    }
    total
}
