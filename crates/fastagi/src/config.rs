//! The server's settings, with the defaults an operator gets when they configure nothing.
//! `tandem.example.toml` documents the same fields under `[fastagi]`.

use ipnet::IpNet;
use serde::Deserialize;
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
    /// rather than accepted and left waiting: Asterisk has no read timeout on FastAGI.
    pub max_sessions: usize,
    /// Longest line accepted from Asterisk or sent to it, without the newline.
    pub max_line_bytes: usize,
    /// Most variables (arguments included) in a session header.
    pub max_header_variables: usize,
    /// Time allowed for the whole header to arrive after the connection is accepted.
    pub header_timeout_ms: u64,
    /// Time allowed for each command's reply. 0 turns it off, the default: a `Dial` through
    /// `EXEC` may last hours, and Asterisk answers only when the application returns.
    pub command_timeout_ms: u64,
    /// On shutdown, how long sessions in progress may run before they are cut.
    pub drain_timeout_ms: u64,
    /// After a session ends, how long to wait for Asterisk to close its side (it sends a last
    /// `HANGUP` first) before the socket is closed anyway.
    pub close_linger_ms: u64,
    /// When a media command returns -1, how long to wait for the `HANGUP` line that tells a
    /// hangup from a plain failure (Asterisk writes it just after the reply).
    pub hangup_probe_ms: u64,
    /// Client networks allowed to connect. Others are refused with `failure`.
    pub allowed_networks: Vec<IpNet>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4573)),
            workers: 0,
            max_sessions: 1024,
            max_line_bytes: 8192,
            max_header_variables: 256,
            header_timeout_ms: 5_000,
            command_timeout_ms: 0,
            drain_timeout_ms: 30_000,
            close_linger_ms: 2_000,
            hangup_probe_ms: 20,
            allowed_networks: vec![
                "127.0.0.0/8".parse().expect("valid network"),
                "::1/128".parse().expect("valid network"),
            ],
        }
    }
}

impl ServerConfig {
    pub fn command_timeout(&self) -> Option<Duration> {
        (self.command_timeout_ms > 0).then(|| Duration::from_millis(self.command_timeout_ms))
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
        if self.max_sessions == 0 {
            return Err("fastagi.max_sessions must be at least 1".into());
        }
        if self.max_line_bytes < 256 {
            return Err("fastagi.max_line_bytes must be at least 256 (header lines)".into());
        }
        if self.max_header_variables < 22 {
            return Err(
                "fastagi.max_header_variables must be at least 22 (Asterisk sends 22)".into(),
            );
        }
        if self.header_timeout_ms == 0 {
            return Err("fastagi.header_timeout_ms must be above 0".into());
        }
        if self.allowed_networks.is_empty() {
            return Err("fastagi.allowed_networks is empty: no client could connect".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(c.validate(), Ok(()));
    }
}
