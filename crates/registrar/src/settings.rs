//! `[registrar]` in tandem.toml, as the operator writes it (times in seconds, algorithms by
//! name, listeners and stream limits), turned into the [`Config`] the registrar runs on. The
//! section's presence turns the registrar on; `tandem.example.toml` documents every key.

use crate::{Algorithm, Config, Error, StreamLimits};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Where the registrar listens when `[registrar]` gives no address.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:5060";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub enabled: bool,
    /// UDP and TCP address (default [`LISTEN_DEFAULT`]).
    pub listen: Option<SocketAddr>,
    /// SIP over TLS address (off unless set).
    pub tls_listen: Option<SocketAddr>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub domains: Vec<String>,
    pub realm: String,
    pub algorithms: Vec<String>,
    pub min_expires: u32,
    pub max_expires: u32,
    pub default_expires: u32,
    pub max_contacts: usize,
    pub redirect: bool,
    pub nonce_ttl_s: u32,
    pub auth_failures_max: u32,
    pub auth_failure_window_s: u64,
    pub transactions_max: usize,
    pub connections_max: usize,
    pub connections_per_address_max: usize,
    pub idle_timeout_ms: u64,
    pub unregistered_idle_timeout_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        let d = Config::default();
        let s = StreamLimits::default();
        Settings {
            enabled: true,
            listen: None,
            tls_listen: None,
            tls_cert: None,
            tls_key: None,
            domains: d.domains,
            realm: d.realm,
            algorithms: d.algorithms.iter().map(|a| a.name().to_string()).collect(),
            min_expires: d.min_expires_s,
            max_expires: d.max_expires_s,
            default_expires: d.default_expires_s,
            max_contacts: d.max_contacts,
            redirect: d.redirect,
            nonce_ttl_s: d.nonce_ttl_s,
            auth_failures_max: d.auth_failures_max,
            auth_failure_window_s: d.auth_failure_window_s,
            transactions_max: d.transactions_max,
            connections_max: s.connections_max,
            connections_per_address_max: s.connections_per_address_max,
            idle_timeout_ms: s.idle_timeout_ms,
            unregistered_idle_timeout_ms: s.unregistered_idle_timeout_ms,
        }
    }
}

impl Settings {
    /// The registrar's configuration, checked; an error names the key.
    pub fn config(&self) -> Result<Config, Error> {
        let mut algorithms = Vec::new();
        for name in &self.algorithms {
            algorithms.push(Algorithm::from_name(name).ok_or_else(|| {
                Error::Config(format!(
                    "registrar.algorithms: {name:?} is not MD5, SHA-256 or SHA-512-256"
                ))
            })?);
        }
        let c = Config {
            domains: self.domains.clone(),
            realm: self.realm.clone(),
            algorithms,
            min_expires_s: self.min_expires,
            max_expires_s: self.max_expires,
            default_expires_s: self.default_expires,
            max_contacts: self.max_contacts,
            redirect: self.redirect,
            nonce_ttl_s: self.nonce_ttl_s,
            auth_failures_max: self.auth_failures_max,
            auth_failure_window_s: self.auth_failure_window_s,
            transactions_max: self.transactions_max,
            ..Config::default()
        };
        c.check()?;
        Ok(c)
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
            .unwrap_or_else(|| LISTEN_DEFAULT.parse().expect("a valid address"))
    }

    /// The TCP/TLS limits, checked; an error names the key.
    pub fn stream_limits(&self) -> Result<StreamLimits, Error> {
        let limits = StreamLimits {
            connections_max: self.connections_max,
            connections_per_address_max: self.connections_per_address_max,
            idle_timeout_ms: self.idle_timeout_ms,
            unregistered_idle_timeout_ms: self.unregistered_idle_timeout_ms,
        };
        limits.check()?;
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_a_valid_configuration_and_a_bad_algorithm_is_named() {
        assert_eq!(Settings::default().config().unwrap(), Config::default());
        let s = Settings {
            algorithms: vec!["SHA-1".into()],
            ..Settings::default()
        };
        assert!(s.config().unwrap_err().to_string().contains("\"SHA-1\""));
    }
}
