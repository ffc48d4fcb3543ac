//! The server's settings, with the defaults an operator gets when they configure nothing.
//! `tandem.example.toml` documents the same fields under `[fastagi]`.

use crate::timeouts::CommandTimeouts;
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Where to listen. Loopback by default: exposing AGI to a network is a decision.
    pub listen: SocketAddr,
    /// Worker threads, each with its own listening socket (`SO_REUSEPORT`) and runtime; a
    /// session stays on one thread. 0 = one per CPU core.
    pub workers: usize,
    /// Sessions served at once. One more is refused at once with `failure` (AGISTATUS=FAILURE)
    /// rather than accepted and left waiting: Asterisk has no read timeout on FastAGI. 0, the
    /// default, sizes it for the machine from the file-descriptor limit
    /// ([`crate::runtime::sessions_for_fd_limit`]).
    pub max_sessions: usize,
    /// Longest line accepted from Asterisk or sent to it, without the newline.
    pub max_line_bytes: usize,
    /// Most variables (arguments included) in a session header.
    pub max_header_variables: usize,
    /// Most bytes of a whole session header. Asterisk's is about 700 bytes plus the arguments,
    /// which its dialplan caps at 8 KiB together; a header is kept for the session's life, so
    /// this bounds what a held session costs.
    pub max_header_bytes: usize,
    /// Time allowed for the whole header to arrive after the connection is accepted.
    pub header_timeout_ms: u64,
    /// Time allowed for each command's reply. 0 turns it off, the default: a `Dial` through
    /// `EXEC` may last hours, and Asterisk answers only when the application returns.
    pub command_timeout_ms: u64,
    /// Time allowed for the reply to a command Asterisk answers without waiting on the caller,
    /// media or an application (GET/SET VARIABLE, DATABASE, CHANNEL STATUS, VERBOSE, NOOP,
    /// `EXEC Set` and the like: [`crate::timeouts`]). A peer that does not answer one of those
    /// is gone or is not Asterisk. 0 turns it off.
    pub immediate_command_timeout_ms: u64,
    /// Per route, by its pattern as registered (`dialparties`, `db/get`, `script` for the
    /// script routes): timeouts that replace the two above for that route.
    pub routes: BTreeMap<String, RouteSettings>,
    /// TCP keepalive on Asterisk's connections: after this many seconds without a byte either
    /// way, the kernel probes the peer, so that a session whose peer vanished without a FIN
    /// (a host switched off, a link cut) ends instead of holding its slot for ever. 0 turns
    /// keepalive off.
    pub keepalive_idle_s: u32,
    /// Seconds between keepalive probes.
    pub keepalive_interval_s: u32,
    /// Unanswered probes after which the connection is given up. Data sent and never
    /// acknowledged is given up after the same time (`TCP_USER_TIMEOUT`).
    pub keepalive_probes: u32,
    /// On shutdown, how long sessions in progress may run before they are cut.
    pub drain_timeout_ms: u64,
    /// After a session ends, how long to wait for Asterisk to close its side (it sends a last
    /// `HANGUP` first) before the socket is closed anyway.
    pub close_linger_ms: u64,
    /// After a `-1` from a command that needs a live channel, Tandem sends `CHANNEL STATUS` to
    /// tell a hangup (`511`) from a failure (a plain reply). Asterisk answers it at once; this
    /// only caps the wait when it does not, and the `-1` then stands as a failure.
    pub hangup_probe_timeout_ms: u64,
    /// Replaced by `hangup_probe_timeout_ms`: Tandem no longer waits a fixed time for a `HANGUP`
    /// line after a `-1` (a real Asterisk writes it up to half a second later) but asks. Still
    /// read, so that an older file loads; ignored, with a warning at start.
    #[serde(rename = "hangup_probe_ms")]
    pub obsolete_hangup_probe_ms: Option<u64>,
    /// Client networks allowed to connect. Others are refused with `failure`. Each is
    /// `ADDRESS/PREFIX` or a bare address (one host).
    #[serde(deserialize_with = "networks")]
    pub allowed_networks: Vec<IpNet>,
}

/// `[fastagi.routes."PATTERN"]`: one route's timeouts, replacing the section's.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    /// This route's `command_timeout_ms`; the section's when unset.
    pub command_timeout_ms: Option<u64>,
    /// This route's `immediate_command_timeout_ms`; the section's when unset.
    pub immediate_command_timeout_ms: Option<u64>,
}

/// Reads `allowed_networks` with a message that says what is wrong with a bad entry.
fn networks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    texts
        .iter()
        .map(|t| parse_network(t).map_err(serde::de::Error::custom))
        .collect()
}

/// `10.0.0.0/8`, `::1/128`, or a bare address. The error names the entry and the fault:
/// `10.0.0.0/33: prefix length 33 is above 32 for IPv4`.
pub fn parse_network(text: &str) -> Result<IpNet, String> {
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("{text}: {addr:?} is not an IPv4 or IPv6 address"))?;
    let max: u8 = if ip.is_ipv4() { 32 } else { 128 };
    let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    let len = match prefix {
        None => max,
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                format!("{text}: prefix length {p:?} is not a number from 0 to {max}")
            })?,
    };
    if len > max {
        return Err(format!(
            "{text}: prefix length {len} is above {max} for {family}"
        ));
    }
    IpNet::new(ip, len).map_err(|e| format!("{text}: {e}"))
}

/// The session limit a server runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimit {
    pub max_sessions: usize,
    /// The soft file-descriptor limit it was sized from; `None` when configured.
    pub fd_limit: Option<u64>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4573)),
            workers: 0,
            max_sessions: 0,
            max_line_bytes: 8192,
            max_header_variables: 256,
            max_header_bytes: 16 * 1024,
            header_timeout_ms: 5_000,
            command_timeout_ms: 0,
            immediate_command_timeout_ms: 30_000,
            routes: BTreeMap::new(),
            keepalive_idle_s: 60,
            keepalive_interval_s: 10,
            keepalive_probes: 6,
            drain_timeout_ms: 30_000,
            close_linger_ms: 2_000,
            hangup_probe_timeout_ms: 2_000,
            obsolete_hangup_probe_ms: None,
            allowed_networks: vec![
                "127.0.0.0/8".parse().expect("valid network"),
                "::1/128".parse().expect("valid network"),
            ],
        }
    }
}

impl ServerConfig {
    /// The session limit in force, and where it came from: the file, or the descriptor limit
    /// (read when called, so after [`crate::runtime::raise_fd_limit`]).
    pub fn session_limit(&self) -> SessionLimit {
        if self.max_sessions > 0 {
            return SessionLimit {
                max_sessions: self.max_sessions,
                fd_limit: None,
            };
        }
        let soft = crate::runtime::fd_limits().map_or(1_024, |(soft, _)| soft);
        SessionLimit {
            max_sessions: crate::runtime::sessions_for_fd_limit(soft),
            fd_limit: Some(soft),
        }
    }

    pub fn command_timeout(&self) -> Option<Duration> {
        (self.command_timeout_ms > 0).then(|| Duration::from_millis(self.command_timeout_ms))
    }

    /// The timeouts of the route registered as `pattern`: its own settings where it has them,
    /// else the section's.
    pub fn timeouts_for(&self, pattern: &str) -> CommandTimeouts {
        let own = self.routes.get(pattern);
        CommandTimeouts::from_ms(
            own.and_then(|r| r.command_timeout_ms)
                .unwrap_or(self.command_timeout_ms),
            own.and_then(|r| r.immediate_command_timeout_ms)
                .unwrap_or(self.immediate_command_timeout_ms),
        )
    }

    /// The keepalive settings for accepted connections; `None` when off.
    pub fn keepalive(&self) -> Option<socket2::TcpKeepalive> {
        (self.keepalive_idle_s > 0).then(|| {
            socket2::TcpKeepalive::new()
                .with_time(Duration::from_secs(self.keepalive_idle_s.into()))
                .with_interval(Duration::from_secs(self.keepalive_interval_s.into()))
                .with_retries(self.keepalive_probes)
        })
    }

    /// How long a peer that stopped answering keeps its connection: the idle time, then every
    /// probe unanswered. `None` when keepalive is off.
    pub fn keepalive_give_up(&self) -> Option<Duration> {
        (self.keepalive_idle_s > 0).then(|| {
            Duration::from_secs(
                u64::from(self.keepalive_idle_s)
                    + u64::from(self.keepalive_interval_s) * u64::from(self.keepalive_probes),
            )
        })
    }

    /// Whether a client address may connect. IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`,
    /// what a dual-stack listener reports) are checked as the IPv4 address they carry.
    pub fn allows(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map(Into::into).unwrap_or(ip),
            v4 => v4,
        };
        self.allowed_networks.iter().any(|n| n.contains(&ip))
    }

    /// Checks the settings for values that cannot work, with a message naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_line_bytes < 256 {
            return Err("fastagi.max_line_bytes must be at least 256 (header lines)".into());
        }
        if self.max_header_variables < 22 {
            return Err(
                "fastagi.max_header_variables must be at least 22 (Asterisk sends 22)".into(),
            );
        }
        if self.hangup_probe_timeout_ms == 0 {
            return Err("fastagi.hangup_probe_timeout_ms must be above 0".into());
        }
        if self.header_timeout_ms == 0 {
            return Err("fastagi.header_timeout_ms must be above 0".into());
        }
        if self.max_header_bytes < 1024 {
            return Err(
                "fastagi.max_header_bytes must be at least 1024 (Asterisk's header is about 700)"
                    .into(),
            );
        }
        // Linux takes at most 32767 s for the idle time and the interval, 127 probes.
        if self.keepalive_idle_s > 32_767 {
            return Err("fastagi.keepalive_idle_s must be at most 32767".into());
        }
        if self.keepalive_idle_s > 0 && !(1..=32_767).contains(&self.keepalive_interval_s) {
            return Err("fastagi.keepalive_interval_s must be 1 to 32767".into());
        }
        if self.keepalive_idle_s > 0 && !(1..=127).contains(&self.keepalive_probes) {
            return Err("fastagi.keepalive_probes must be 1 to 127".into());
        }
        if self.allowed_networks.is_empty() {
            return Err("fastagi.allowed_networks is empty: no client could connect".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bad_network_names_the_entry_and_the_fault() {
        use super::parse_network;
        assert_eq!(
            parse_network("10.0.0.0/33").unwrap_err(),
            "10.0.0.0/33: prefix length 33 is above 32 for IPv4"
        );
        assert_eq!(
            parse_network("::1/129").unwrap_err(),
            "::1/129: prefix length 129 is above 128 for IPv6"
        );
        assert!(
            parse_network("10.0.0/8")
                .unwrap_err()
                .contains("is not an IPv4 or IPv6 address")
        );
        assert!(
            parse_network("10.0.0.0/x")
                .unwrap_err()
                .contains("is not a number from 0 to 32")
        );
        assert!(parse_network("10.0.0.0/+8").is_err());
        assert_eq!(
            parse_network("192.0.2.7").unwrap().to_string(),
            "192.0.2.7/32"
        );
        assert_eq!(
            parse_network("10.0.0.0/8").unwrap().to_string(),
            "10.0.0.0/8"
        );
    }

    use super::*;

    #[test]
    fn loopback_only_by_default() {
        let c = ServerConfig::default();
        assert!(c.allows("127.0.0.1".parse().unwrap()));
        assert!(c.allows("::1".parse().unwrap()));
        assert!(c.allows("::ffff:127.0.0.9".parse().unwrap()));
        assert!(!c.allows("192.0.2.1".parse().unwrap()));
        assert!(!c.allows("::ffff:192.0.2.1".parse().unwrap()));
        assert_eq!(c.command_timeout(), None);
        assert_eq!(
            c.timeouts_for("anything"),
            CommandTimeouts::from_ms(0, 30_000)
        );
        assert_eq!(c.keepalive_give_up(), Some(Duration::from_secs(120)));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn a_route_s_own_timeouts_replace_the_section_s() {
        let mut c = ServerConfig {
            command_timeout_ms: 9_000,
            ..ServerConfig::default()
        };
        c.routes.insert(
            "dialparties".into(),
            RouteSettings {
                command_timeout_ms: Some(5_000),
                immediate_command_timeout_ms: None,
            },
        );
        assert_eq!(
            c.timeouts_for("dialparties"),
            CommandTimeouts::from_ms(5_000, 30_000)
        );
        assert_eq!(
            c.timeouts_for("db/get"),
            CommandTimeouts::from_ms(9_000, 30_000)
        );
        let off = ServerConfig {
            keepalive_idle_s: 0,
            keepalive_probes: 0,
            ..ServerConfig::default()
        };
        assert_eq!(off.validate(), Ok(()));
        assert!(off.keepalive().is_none());
        let bad = ServerConfig {
            keepalive_probes: 0,
            ..ServerConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("keepalive_probes"));
    }

    #[test]
    fn the_session_limit_is_configured_or_sized_from_the_descriptor_limit() {
        let configured = ServerConfig {
            max_sessions: 50,
            ..ServerConfig::default()
        };
        assert_eq!(
            configured.session_limit(),
            SessionLimit {
                max_sessions: 50,
                fd_limit: None
            }
        );
        // (Another test may raise the limit meanwhile: compare with what was read.)
        let sized = ServerConfig::default().session_limit();
        let soft = sized.fd_limit.expect("sized from the descriptor limit");
        assert_eq!(
            sized.max_sessions,
            crate::runtime::sessions_for_fd_limit(soft)
        );
        assert!(sized.max_sessions >= 1_024);
    }
}
