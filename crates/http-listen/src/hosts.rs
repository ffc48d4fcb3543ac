//! The `Host` allowlist. A browser that a hostile page leads to this server through DNS
//! rebinding (the attacker's name, resolved first to the attacker and then to 127.0.0.1) sends
//! the attacker's name in `Host`; the server answers only to its own names: the address the
//! client connected to with the port it listens on, `localhost` on a loopback connection, and
//! the names configured (a reverse proxy's, a DNS name operators use).

use std::net::{IpAddr, SocketAddr};

/// Longest `Host` value (or configured name) read: a DNS name is at most 253 bytes, and a
/// bracketed IPv6 literal with its port is shorter.
pub const HOST_BYTES_MAX: usize = 300;

/// A configured entry that is not a host name.
#[derive(Debug, thiserror::Error)]
#[error(
    "{setting}: {entry:?} is not a host name: write the name alone (pbx.example.com, 192.0.2.7, \
     [2001:db8::7]), which allows any port, or with the one port allowed (pbx.example.com:8443)"
)]
pub struct HostsError {
    pub setting: String,
    pub entry: String,
}

/// What a server answers to.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// Configured names (lower case, without a trailing dot), each with the only port allowed
    /// or any.
    names: Vec<(Name, Option<u16>)>,
    /// Where an operator adds a name (`[web] hosts`), for the refusal's message; `None`: the
    /// server has no such setting.
    setting: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Name {
    Ip(IpAddr),
    Dns(String),
}

/// A request's authority read: its name and its port, if any.
#[derive(Debug, PartialEq, Eq)]
struct Authority {
    name: Name,
    port: Option<u16>,
}

impl Hosts {
    /// The listen address and `localhost` (on loopback) alone: no setting to add names to.
    pub fn own_addresses() -> Hosts {
        Hosts {
            names: Vec::new(),
            setting: None,
        }
    }

    /// The listen address, `localhost` on loopback, and `configured` (`name` or `name:port`),
    /// which an operator sets in `setting` (named in errors and refusals).
    pub fn new(configured: &[String], setting: &str) -> Result<Hosts, HostsError> {
        let names = configured
            .iter()
            .map(|entry| {
                parse_authority(entry.trim())
                    .map(|a| (a.name, a.port))
                    .ok_or_else(|| HostsError {
                        setting: setting.to_owned(),
                        entry: entry.clone(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Hosts {
            names,
            setting: Some(setting.to_owned()),
        })
    }

    /// Whether a request that names `authority` (its `Host`, or the authority of an
    /// absolute-form target), over a connection to `local`, is for this server. `default_port`
    /// is the scheme's (80, 443), which an authority without a port means to a configured
    /// `name:port`.
    pub fn allows(&self, authority: &str, local: SocketAddr, default_port: u16) -> bool {
        let Some(a) = parse_authority(authority) else {
            return false;
        };
        let local_ip = local.ip().to_canonical();
        // The address the client connected to (an IP literal cannot be rebound: a page of
        // that origin is this server's own), and `localhost` when it is loopback; with the
        // port it connected to, or none (a client that names the server by its address
        // alone, as some scripts do).
        let own = match &a.name {
            Name::Ip(ip) => ip.to_canonical() == local_ip,
            Name::Dns(n) => n == "localhost" && local_ip.is_loopback(),
        };
        if own && a.port.is_none_or(|p| p == local.port()) {
            return true;
        }
        self.names.iter().any(|(name, port)| {
            let same = match (name, &a.name) {
                (Name::Ip(x), Name::Ip(y)) => x.to_canonical() == y.to_canonical(),
                (x, y) => x == y,
            };
            same && port.is_none_or(|p| p == a.port.unwrap_or(default_port))
        })
    }

    /// The body of the refusal of `authority`: what was refused and what to do.
    pub fn refusal(&self, authority: &str) -> String {
        let shown: String = authority
            .chars()
            .take(100)
            .flat_map(char::escape_default)
            .collect();
        let fix = match &self.setting {
            Some(s) => format!(
                "If {shown} is a name of this server (a reverse proxy's, say), add it to {s} in \
                 tandem.toml."
            ),
            None => "Reach it by the address it listens on.".to_owned(),
        };
        format!(
            "421 Misdirected Request: this server does not answer to the name \"{shown}\" (so \
             that a page of another site cannot reach it through DNS rebinding). {fix}\n"
        )
    }
}

/// `host [":" port]` (RFC 9110 §7.2, RFC 3986 §3.2.2): an IPv6 literal in brackets, an IPv4
/// address, or a DNS name, lower-cased, with one trailing dot removed. `None` for anything
/// else (a user part, a path, a bad port, characters no name holds).
fn parse_authority(s: &str) -> Option<Authority> {
    if s.is_empty() || s.len() > HOST_BYTES_MAX {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let ip: std::net::Ipv6Addr = v6.parse().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (Name::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let name_chars = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        if host.is_empty() || !host.chars().all(name_chars) || host.contains("..") {
            return None;
        }
        match host.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => (Name::Ip(IpAddr::V4(ip)), port),
            Err(_) => (Name::Dns(host), port),
        }
    };
    // An empty port (`host:`) means the default, as a missing one does.
    let port = match port {
        None | Some("") => None,
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    Some(Authority { name: host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_server_answers_to_its_address_and_port_and_localhost_on_loopback() {
        let h = Hosts::new(&[], "[web] hosts").unwrap();
        let local = addr("127.0.0.1:9574");
        for ok in [
            "127.0.0.1:9574",
            "localhost:9574",
            "LOCALHOST.:9574",
            "localhost.:9574",
            "127.0.0.1",
            "localhost",
        ] {
            assert!(h.allows(ok, local, 80), "{ok}");
        }
        for refused in [
            "evil.example:9574",
            "evil.example",
            "127.0.0.1:80",
            "127.0.0.2:9574",
            "localhost.evil.example:9574",
            "127.0.0.1.evil.example:9574",
            "[::1]:9574",
            "",
            "user@127.0.0.1:9574",
            "127.0.0.1:9574/x",
            "127.0.0.1:+9574",
            "127.0.0.1:99999",
            "local..host:9574",
        ] {
            assert!(!h.allows(refused, local, 80), "{refused:?}");
        }
        // On another address, localhost is not this server.
        let public = addr("192.0.2.7:443");
        assert!(h.allows("192.0.2.7", public, 443));
        assert!(h.allows("192.0.2.7:443", public, 443));
        assert!(!h.allows("localhost:443", public, 443));
        // A v4 client of a dual-stack socket.
        assert!(h.allows("127.0.0.1:9574", addr("[::ffff:127.0.0.1]:9574"), 80));
        assert!(h.allows("[::1]:9574", addr("[::1]:9574"), 80));
        assert!(h.allows("localhost:9574", addr("[::1]:9574"), 80));
        assert!(h.allows("[2001:DB8::7]:9574", addr("[2001:db8::7]:9574"), 80));
    }

    #[test]
    fn configured_names_allow_any_port_or_the_one_they_name() {
        let h = Hosts::new(
            &[
                "PBX.example.com".into(),
                "proxy.example:8443".into(),
                "203.0.113.9".into(),
                "[2001:db8::1]:443".into(),
            ],
            "[web] hosts",
        )
        .unwrap();
        let local = addr("127.0.0.1:9574");
        for ok in [
            "pbx.example.com",
            "pbx.example.com.",
            "pbx.example.com:9574",
            "pbx.example.com:1",
            "proxy.example:8443",
            "203.0.113.9:8080",
            "[2001:db8::1]",
        ] {
            assert!(h.allows(ok, local, 443), "{ok}");
        }
        for refused in [
            "proxy.example",
            "proxy.example:443",
            "www.pbx.example.com",
            "[2001:db8::1]:80",
        ] {
            assert!(!h.allows(refused, local, 443), "{refused}");
        }
    }

    #[test]
    fn an_entry_that_is_not_a_host_name_is_refused_with_the_setting() {
        for bad in [
            "https://pbx.example.com",
            "pbx.example.com/",
            "*",
            "",
            "a b",
            "x:y",
        ] {
            let e = Hosts::new(&[bad.to_owned()], "[metrics] hosts").unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with("[metrics] hosts: "), "{msg}");
            assert!(msg.contains("pbx.example.com:8443"), "{msg}");
        }
    }

    #[test]
    fn a_refusal_names_the_host_escaped_and_where_to_add_it() {
        let h = Hosts::new(&[], "[web] hosts").unwrap();
        let r = h.refusal("evil.example\u{1b}[31m");
        assert!(r.starts_with("421 Misdirected Request"), "{r}");
        assert!(r.contains("evil.example\\u{1b}[31m"), "{r}");
        assert!(r.contains("add it to [web] hosts in tandem.toml"), "{r}");
        let long = "a".repeat(10_000);
        assert!(h.refusal(&long).len() < 600);
        assert!(
            Hosts::own_addresses()
                .refusal("x")
                .contains("Reach it by the address it listens on")
        );
    }
}
