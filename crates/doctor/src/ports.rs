//! The configured listening addresses: each is free, or held by Tandem; held by anything else
//! is a failure that names the process (`procstat` reads who holds it). A free-looking address
//! is bound once, without listening, and closed at once: that is what finds an address that is
//! not this machine's, or a port the service's user may not bind.

use crate::{Finding, within};
use procstat::Proto;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const GROUP: &str = "ports";

/// One address a service of `tandem serve` listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// The service: `fastagi`, `metrics`, `web console`, `sip`, `hep`, `collector`, ...
    pub service: String,
    /// The setting that gives the address, for the fix: `[metrics] listen`.
    pub setting: String,
    pub addr: SocketAddr,
    pub proto: Proto,
    /// The metrics listener: a Tandem holding it is asked for `/health`.
    pub health: bool,
}

impl Listener {
    fn name(&self) -> String {
        let proto = match self.proto {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        };
        format!("{} {}/{proto}", self.service, self.addr)
    }
}

/// What the service's user may bind: ports below `/proc/sys/net/ipv4/ip_unprivileged_port_start`
/// only as root or with CAP_NET_BIND_SERVICE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindRights {
    pub low_ports: bool,
    pub unprivileged_port_start: u16,
}

impl BindRights {
    /// `low_ports` as given, and the kernel's current boundary (1024 when it cannot be read).
    pub fn with_kernel(low_ports: bool) -> BindRights {
        let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(1024);
        BindRights {
            low_ports,
            unprivileged_port_start: start,
        }
    }
}

/// A finding per listener, after one per pair of listeners that take the same address.
pub fn check_listeners(
    listeners: &[Listener],
    rights: BindRights,
    timeout: Duration,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, a) in listeners.iter().enumerate() {
        for b in &listeners[i + 1..] {
            if a.proto == b.proto && procstat::listen_addrs_overlap(a.addr, b.addr) {
                out.push(Finding::fail(
                    GROUP,
                    b.name(),
                    format!("{} and {} take the same address", a.setting, b.setting),
                    format!("give {} another port", b.setting),
                ));
            }
        }
    }
    out.extend(listeners.iter().map(|l| check_listener(l, rights, timeout)));
    out
}

/// One listener: free, held by Tandem, or held by something else.
pub fn check_listener(l: &Listener, rights: BindRights, timeout: Duration) -> Finding {
    let found = match l.proto {
        Proto::Tcp => procstat::tcp_listeners_on_port(l.addr.port()),
        Proto::Udp => procstat::udp_sockets_on_port(l.addr.port()),
    };
    let mut tandem = Vec::new();
    let mut others = Vec::new();
    let mut unseen = Vec::new();
    for e in found
        .iter()
        .filter(|e| procstat::listen_addrs_overlap(e.local, l.addr))
    {
        match procstat::socket_holder(e.inode) {
            Some(h) if is_tandem(h.pid) => tandem.push(h),
            Some(h) => others.push(format!("{} by pid {}: {}", e.local, h.pid, h.command)),
            None => unseen.push(format!(
                "{} by user {}",
                e.local,
                crate::account::owner_text(e.uid)
            )),
        }
    }
    // One line per process, not per worker socket.
    for list in [&mut others, &mut unseen] {
        list.sort();
        list.dedup();
    }
    if !others.is_empty() {
        let pids: Vec<String> = others
            .iter()
            .filter_map(|o| o.split("by pid ").nth(1))
            .filter_map(|p| p.split(':').next())
            .map(str::to_string)
            .collect();
        return Finding::fail(
            GROUP,
            l.name(),
            format!("held by another program: {}", others.join(", ")),
            format!(
                "stop it (`systemctl status {}` names its service), or set {} to a free address",
                pids.first().map_or("PID", String::as_str),
                l.setting
            ),
        );
    }
    if !unseen.is_empty() {
        return Finding::warn(
            GROUP,
            l.name(),
            format!(
                "held by a process this user cannot see: {}",
                unseen.join(", ")
            ),
            "run tandem doctor as root to name it",
        );
    }
    if let Some(h) = tandem.first() {
        let answers = if l.health {
            match answers_http(l.addr, timeout) {
                true => ", and it answers /health",
                false => ", but it does not answer HTTP",
            }
        } else {
            ""
        };
        return Finding::ok(
            GROUP,
            l.name(),
            format!("held by Tandem (pid {}: {}){answers}", h.pid, h.command),
        );
    }
    check_bind(l, rights)
}

/// Binds the address without listening and closes it: free, or why not.
fn check_bind(l: &Listener, rights: BindRights) -> Finding {
    use socket2::{Domain, Socket, Type};
    let ty = match l.proto {
        Proto::Tcp => Type::STREAM,
        Proto::Udp => Type::DGRAM,
    };
    let result = Socket::new(Domain::for_address(l.addr), ty, None).and_then(|s| {
        if l.proto == Proto::Tcp {
            // As every Tandem listener does: a connection of a previous run in TIME_WAIT does
            // not make the port taken.
            s.set_reuse_address(true)?;
        }
        s.bind(&l.addr.into())
    });
    let low = l.addr.port() != 0 && l.addr.port() < rights.unprivileged_port_start;
    match result {
        Ok(()) if low && !rights.low_ports => Finding::fail(
            GROUP,
            l.name(),
            format!(
                "free, but below {}: the service's user may not bind it",
                rights.unprivileged_port_start
            ),
            format!(
                "set {} to a port from 1024 up, or grant the unit \
                 AmbientCapabilities=CAP_NET_BIND_SERVICE and \
                 CapabilityBoundingSet=CAP_NET_BIND_SERVICE (`systemctl edit tandem`)",
                l.setting
            ),
        ),
        Ok(()) => Finding::ok(GROUP, l.name(), "free"),
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => Finding::fail(
            GROUP,
            l.name(),
            format!("{} is not an address of this machine", l.addr.ip()),
            format!(
                "set {} to one of this machine's addresses (`ip -br addr`), or 0.0.0.0",
                l.setting
            ),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Finding::fail(
            GROUP,
            l.name(),
            if std::path::Path::new("/proc/net/tcp").exists() {
                "in use, by a socket /proc/net does not list"
            } else {
                "in use; /proc is not mounted here, so what holds it cannot be named"
            },
            format!(
                "find it with `ss -lnp 'sport = :{}'` and stop it, or set {} to a free address",
                l.addr.port(),
                l.setting
            ),
        ),
        Err(e) => Finding::fail(
            GROUP,
            l.name(),
            format!("cannot be bound: {e}"),
            format!("set {} to an address this machine can bind", l.setting),
        ),
    }
}

/// Whether process `pid` is a Tandem: its executable (or, when that cannot be read, the first
/// word of its command line) is named `tandem`. An upgraded binary reads `tandem (deleted)`.
pub fn is_tandem(pid: u32) -> bool {
    let named = |p: &std::path::Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "tandem" || n.starts_with("tandem "))
    };
    if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
        return named(&exe);
    }
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|raw| {
        let first = raw.split(|b| *b == 0).next().unwrap_or_default();
        named(std::path::Path::new(&*String::from_utf8_lossy(first)))
    })
}

/// Whether an HTTP server answers at `addr` (any status: a `421` for the Host is an answer).
pub fn answers_http(addr: SocketAddr, timeout: Duration) -> bool {
    let target = match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv4() => {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        }
        ip if ip.is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    };
    within(timeout, move || {
        let mut s = TcpStream::connect_timeout(&target, timeout).ok()?;
        s.set_read_timeout(Some(timeout)).ok()?;
        s.set_write_timeout(Some(timeout)).ok()?;
        let request =
            format!("GET /health HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).ok()?;
        let mut head = [0u8; 16];
        let n = s.read(&mut head).ok()?;
        Some(head[..n].starts_with(b"HTTP/1."))
    })
    .flatten()
    .unwrap_or(false)
}
