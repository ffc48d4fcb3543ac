//! Listening TCP sockets, bound UDP sockets and the processes that hold them, from
//! `/proc/net/tcp`, `/proc/net/udp` (and their IPv6 twins) and `/proc/PID/fd` (proc(5)), so
//! that "address in use" can name what holds the address (`listen_error`).
//!
//! A line of `/proc/net/tcp` is `sl local rem st ... uid timeout inode ...`: `local` is
//! `ADDR:PORT` in hex, the address as the kernel stores it (IPv4: one 32-bit word; IPv6: four),
//! each word printed in host byte order; `st` `0A` is LISTEN. A process holds the socket when a
//! link in its `fd` directory reads `socket:[INODE]`; another user's process cannot be looked
//! into without privileges, so the holder may stay unknown.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A listening TCP socket (or a bound UDP one) as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpListenerEntry {
    pub local: SocketAddr,
    /// The socket's inode: how `/proc/PID/fd` names it.
    pub inode: u64,
    pub uid: u32,
}

/// The process holding a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketHolder {
    pub pid: u32,
    /// Its command line, arguments joined by spaces (empty for a kernel thread).
    pub command: String,
}

/// Parses one line of `/proc/net/tcp` or `/proc/net/tcp6`; `None` for the header, a line that
/// is not one, or a socket that is not listening.
pub fn parse_tcp_line(line: &str) -> Option<TcpListenerEntry> {
    parse_line(line, Some("0A"))
}

/// Parses one line of `/proc/net/udp` or `/proc/net/udp6`: every socket bound to a port.
pub fn parse_udp_line(line: &str) -> Option<TcpListenerEntry> {
    parse_line(line, None)
}

/// A line of the `/proc/net` socket tables whose state is `state` (any when None).
fn parse_line(line: &str, state: Option<&str>) -> Option<TcpListenerEntry> {
    let mut f = line.split_ascii_whitespace();
    let _slot = f.next()?;
    let local = f.next()?;
    let _remote = f.next()?;
    let st = f.next()?;
    if state.is_some_and(|s| s != st) || u8::from_str_radix(st, 16).is_err() {
        return None;
    }
    let mut rest = f.skip(3);
    let uid = rest.next()?.parse().ok()?;
    let _timeout = rest.next()?;
    let inode = rest.next()?.parse().ok()?;
    let (addr, port) = local.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?.to_be_bytes())),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?.to_be_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(TcpListenerEntry {
        local: SocketAddr::new(ip, port),
        inode,
        uid,
    })
}

/// One 32-bit word as the kernel printed it (host order), as the bytes it holds in memory.
fn word(hex: &str) -> Option<u32> {
    let printed = u32::from_str_radix(hex, 16).ok()?;
    Some(u32::from_be_bytes(printed.to_ne_bytes()))
}

/// Every listening TCP socket on `port`, IPv4 and IPv6.
pub fn tcp_listeners_on_port(port: u16) -> Vec<TcpListenerEntry> {
    on_port(["/proc/net/tcp", "/proc/net/tcp6"], parse_tcp_line, port)
}

/// Every UDP socket bound to `port`, IPv4 and IPv6.
pub fn udp_sockets_on_port(port: u16) -> Vec<TcpListenerEntry> {
    on_port(["/proc/net/udp", "/proc/net/udp6"], parse_udp_line, port)
}

fn on_port(
    tables: [&str; 2],
    parse: fn(&str) -> Option<TcpListenerEntry>,
    port: u16,
) -> Vec<TcpListenerEntry> {
    tables
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(parse)
                .filter(|e| e.local.port() == port)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The transport of an address a server binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// What holds `addr` for `proto`: `ADDR by pid N: COMMAND` for each socket that takes its
/// traffic, one per process, comma-joined; empty when none is seen.
pub fn port_holders(addr: SocketAddr, proto: Proto) -> String {
    let found = match proto {
        Proto::Tcp => tcp_listeners_on_port(addr.port()),
        Proto::Udp => udp_sockets_on_port(addr.port()),
    };
    let mut holders: Vec<String> = found
        .into_iter()
        .filter(|e| listen_addrs_overlap(e.local, addr))
        .map(|e| format!("{} by {}", e.local, holder_text(e.inode)))
        .collect();
    // One line per process, not per worker socket.
    holders.sort();
    holders.dedup();
    holders.join(", ")
}

/// `pid N: COMMAND` for the process holding the socket `inode`.
pub fn holder_text(inode: u64) -> String {
    match socket_holder(inode) {
        Some(h) if h.command.is_empty() => format!("pid {}", h.pid),
        Some(h) => format!("pid {}: {}", h.pid, h.command),
        None => "a process this user cannot see".to_string(),
    }
}

/// `e`, a failure to bind `addr`, with what holds the address when it is in use:
/// `Address already in use (held: 127.0.0.1:9574 by pid 812: python3 -m http.server 9574)`.
pub fn name_holder(addr: SocketAddr, proto: Proto, e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::AddrInUse {
        return e;
    }
    let holders = port_holders(addr, proto);
    if holders.is_empty() {
        return e;
    }
    std::io::Error::new(e.kind(), format!("{e} (held: {holders})"))
}

/// True when a socket listening on `a` and one on `b` take connections for the same address:
/// the same port, and the same address or either one unspecified (`0.0.0.0`, `::`).
pub fn listen_addrs_overlap(a: SocketAddr, b: SocketAddr) -> bool {
    let v4 = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        ip => ip,
    };
    a.port() == b.port()
        && (a.ip().is_unspecified() || b.ip().is_unspecified() || v4(a.ip()) == v4(b.ip()))
}

/// The inode of the socket behind `fd`, as `/proc/net/tcp` lists it.
pub fn socket_inode(fd: std::os::fd::BorrowedFd<'_>) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    parse_socket_link(link.to_str()?)
}

fn parse_socket_link(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The process that holds the socket with this inode, when this process may look.
pub fn socket_holder(inode: u64) -> Option<SocketHolder> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|l| l.to_str().and_then(parse_socket_link))
                == Some(inode)
        });
        if holds {
            let command = std::fs::read(entry.path().join("cmdline"))
                .map(|raw| {
                    raw.split(|b| *b == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default();
            return Some(SocketHolder { pid, command });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_line_gives_its_address_uid_and_inode() {
        // 127.0.0.1:4573, as a little-endian kernel prints it.
        let line = "   0: 0100007F:11DD 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 123456 1 0000000000000000 100 0 0 10 0";
        let e = parse_tcp_line(line).unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(e.local, "127.0.0.1:4573".parse().unwrap());
        }
        assert_eq!((e.uid, e.inode), (1000, 123456));
    }

    #[test]
    fn established_sockets_and_the_header_are_not_listeners() {
        assert_eq!(
            parse_tcp_line(
                "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
            ),
            None
        );
        let line = "   1: 0100007F:11DD 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 123457 1 0000000000000000 20 4 30 10 -1";
        assert_eq!(parse_tcp_line(line), None);
    }

    #[test]
    fn a_udp_line_in_any_state_is_a_bound_socket() {
        // 0.0.0.0:5060, unconnected (07), as /proc/net/udp lists a SIP server's socket.
        let line = "  55: 00000000:13C4 00000000:0000 07 00000000:00000000 00:00000000 00000000   106        0 4242 2 0000000000000000 0";
        let e = parse_udp_line(line).unwrap();
        assert_eq!(e.local, "0.0.0.0:5060".parse().unwrap());
        assert_eq!(e.inode, 4242);
        assert_eq!(parse_tcp_line(line), None, "not a TCP listener");
    }

    #[test]
    fn an_address_in_use_names_this_process_as_its_holder() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let e = std::net::UdpSocket::bind(addr).unwrap_err();
        let named = name_holder(addr, Proto::Udp, e).to_string();
        let me = format!("{addr} by pid {}", std::process::id());
        assert!(named.contains("(held: ") && named.contains(&me), "{named}");
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let e = std::net::TcpListener::bind(addr).unwrap_err();
        assert!(
            name_holder(addr, Proto::Tcp, e)
                .to_string()
                .contains(&format!("{addr} by pid"))
        );
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(
            !name_holder(addr, Proto::Tcp, other)
                .to_string()
                .contains("held")
        );
    }

    #[test]
    fn overlap_is_the_same_port_and_address_or_a_wildcard() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(listen_addrs_overlap(
            a("127.0.0.1:4573"),
            a("127.0.0.1:4573")
        ));
        assert!(listen_addrs_overlap(a("0.0.0.0:4573"), a("127.0.0.1:4573")));
        assert!(listen_addrs_overlap(a("[::]:4573"), a("127.0.0.1:4573")));
        assert!(listen_addrs_overlap(
            a("[::ffff:127.0.0.1]:4573"),
            a("127.0.0.1:4573")
        ));
        assert!(!listen_addrs_overlap(
            a("127.0.0.1:4573"),
            a("127.0.0.2:4573")
        ));
        assert!(!listen_addrs_overlap(
            a("127.0.0.1:4573"),
            a("127.0.0.1:4574")
        ));
    }

    #[test]
    fn this_process_finds_its_own_listener_and_itself_as_holder() {
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let inode = socket_inode(l.as_fd()).unwrap();
        let found = tcp_listeners_on_port(port);
        assert!(found.iter().any(|e| e.inode == inode), "{found:?}");
        assert_eq!(socket_holder(inode).unwrap().pid, std::process::id());
    }
}
