//! What the registrar knows of each phone, for a list of devices: its live bindings (from the
//! location service), and, in a bounded table of its own ([`DeviceLog`]), the failed digest
//! attempts per user and source address and the bindings that lapsed, which the location
//! service forgets.
//!
//! The log holds at most `entries_max` (user, address) pairs; a new pair beyond that takes
//! the place of the one updated longest ago. Nothing here is stored: a restart starts it
//! empty (the bindings themselves are in the store).

use std::collections::HashMap;
use std::net::IpAddr;

use crate::binding::Binding;

/// Pairs of (user, source address) the log keeps by default.
pub const DEVICE_LOG_ENTRIES_MAX: usize = 4096;

/// Longest text (user, domain, contact, User-Agent) the log keeps, in bytes.
pub const DEVICE_TEXT_BYTES_MAX: usize = 256;

/// Rows [`crate::Registrar::devices`] returns at most.
pub const DEVICES_MAX: usize = 20_000;

/// Why the registrar refused a REGISTER's credentials, in a person's words, from the reason
/// label of `tandem_registrar_auth_failures`; and the failure class the device list shows.
pub fn failure_of(reason: &str) -> (&'static str, &'static str) {
    match reason {
        "wrong_response" => (
            "wrong-password",
            "digest response does not match the stored password",
        ),
        "unknown_user" => ("unknown-user", "no such user in the realm"),
        "wrong_aor" => (
            "rejected",
            "credentials of another user than the one registered (403)",
        ),
        "uri_mismatch" => ("rejected", "digest uri is not the Request-URI (400)"),
        "foreign_nonce" => ("rejected", "a nonce this registrar did not issue"),
        "no_qop" => ("rejected", "digest without qop=auth"),
        "algorithm_not_stored" => ("rejected", "no stored secret for the digest algorithm"),
        _ => ("rejected", "credentials refused"),
    }
}

/// One (user, address) as the log remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub user: String,
    pub domain: String,
    /// Where the last REGISTER of this pair came from: `udp:192.0.2.1:5060`.
    pub source: String,
    pub user_agent: String,
    /// Failed digest attempts since the entry was made.
    pub failures: u64,
    /// The last failure: when (ms since the epoch) and its reason label.
    pub last_failure_ms: Option<u64>,
    pub last_reason: &'static str,
    /// The last binding of this pair that lapsed: its contact, when it was last written and
    /// when it lapsed (ms since the epoch).
    pub lapsed: Option<Lapsed>,
    /// When the entry was last touched, ms: the oldest goes first when the log is full.
    pub touched_ms: u64,
}

/// A binding that lapsed, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapsed {
    pub contact: String,
    pub written_ms: u64,
    pub expired_ms: u64,
}

/// Failed attempts and lapsed bindings per (user, source address), bounded.
pub struct DeviceLog {
    entries: HashMap<(Box<str>, IpAddr), LogEntry>,
    entries_max: usize,
}

fn bounded(s: &str) -> String {
    let mut end = s.len().min(DEVICE_TEXT_BYTES_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The address of a binding's source (`udp:192.0.2.1:5060` → 192.0.2.1).
pub fn source_ip(source: &str) -> Option<IpAddr> {
    let rest = source.split_once(':').map_or(source, |(_, r)| r);
    rest.parse::<std::net::SocketAddr>()
        .map(|a| a.ip())
        .ok()
        .or_else(|| rest.parse().ok())
}

impl DeviceLog {
    pub fn new(entries_max: usize) -> DeviceLog {
        DeviceLog {
            entries: HashMap::new(),
            entries_max: entries_max.max(1),
        }
    }

    fn entry(
        &mut self,
        user: &str,
        domain: &str,
        ip: IpAddr,
        source: &str,
        now_ms: u64,
    ) -> &mut LogEntry {
        let key: (Box<str>, IpAddr) = (bounded(user).into(), ip);
        if !self.entries.contains_key(&key) && self.entries.len() >= self.entries_max {
            // Full: the pair touched longest ago makes room (a scan, only when full and a
            // new pair comes: at most `entries_max` steps).
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.touched_ms)
                .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        let e = self.entries.entry(key).or_insert_with(|| LogEntry {
            user: bounded(user),
            domain: bounded(domain),
            source: String::new(),
            user_agent: String::new(),
            failures: 0,
            last_failure_ms: None,
            last_reason: "",
            lapsed: None,
            touched_ms: now_ms,
        });
        e.touched_ms = now_ms;
        e.source = bounded(source);
        e
    }

    /// A failed digest attempt of `user`@`domain` from `source` (`udp:ip:port`).
    #[allow(clippy::too_many_arguments)]
    pub fn failed(
        &mut self,
        user: &str,
        domain: &str,
        ip: IpAddr,
        source: &str,
        user_agent: Option<&str>,
        reason: &'static str,
        now_ms: u64,
    ) {
        let e = self.entry(user, domain, ip, source, now_ms);
        e.failures = e.failures.saturating_add(1);
        e.last_failure_ms = Some(now_ms);
        e.last_reason = reason;
        if let Some(ua) = user_agent {
            e.user_agent = bounded(ua);
        }
    }

    /// Bindings of `user`@`domain` that lapsed at `now_ms` (the sweep removed them).
    pub fn lapsed(&mut self, user: &str, domain: &str, bindings: &[Binding], now_ms: u64) {
        for b in bindings {
            let Some(ip) = source_ip(&b.source) else {
                continue;
            };
            let e = self.entry(user, domain, ip, &b.source, now_ms);
            e.lapsed = Some(Lapsed {
                contact: bounded(&b.uri),
                written_ms: b.updated_at_ms,
                expired_ms: b.expires_at_ms,
            });
            e.user_agent = bounded(&b.user_agent);
        }
    }

    pub fn entries(&self) -> impl Iterator<Item = (&IpAddr, &LogEntry)> {
        self.entries.iter().map(|((_, ip), e)| (ip, e))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A device as the registrar sees it: one user at one source address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    pub user: String,
    pub domain: String,
    pub address: String,
    /// Where its last REGISTER came from: `udp:192.0.2.1:5060`.
    pub source: String,
    pub contact: String,
    pub user_agent: String,
    /// When its binding was last written (ms since the epoch); `None` without one.
    pub registered_ms: Option<u64>,
    /// When its binding lapses (live) or lapsed (expired), ms since the epoch.
    pub expires_ms: Option<u64>,
    /// Whether a binding is live now.
    pub live: bool,
    /// Failed digest attempts from this address for this user (while the log keeps them),
    /// and the last one: when, its class (`wrong-password`, `unknown-user`, `rejected`) and
    /// its reason.
    pub failures: u64,
    pub last_failure_ms: Option<u64>,
    pub last_failure: &'static str,
    pub last_failure_reason: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_bounded_and_keeps_the_pairs_touched_last() {
        let mut log = DeviceLog::new(2);
        let ip = |n: u8| IpAddr::from([192, 0, 2, n]);
        log.failed(
            "1001",
            "pbx",
            ip(1),
            "udp:192.0.2.1:5060",
            None,
            "wrong_response",
            1,
        );
        log.failed(
            "1001",
            "pbx",
            ip(1),
            "udp:192.0.2.1:5062",
            Some("ua"),
            "wrong_response",
            2,
        );
        log.failed(
            "1002",
            "pbx",
            ip(2),
            "udp:192.0.2.2:5060",
            None,
            "unknown_user",
            3,
        );
        assert_eq!(log.len(), 2);
        let e = log.entries().find(|(_, e)| e.user == "1001").unwrap().1;
        assert_eq!(
            (
                e.failures,
                e.last_failure_ms,
                e.source.as_str(),
                e.user_agent.as_str()
            ),
            (2, Some(2), "udp:192.0.2.1:5062", "ua")
        );
        // A third pair: 1001's, touched longest ago, goes.
        log.failed(
            "1003",
            "pbx",
            ip(3),
            "udp:192.0.2.3:5060",
            None,
            "wrong_response",
            4,
        );
        let mut users: Vec<_> = log.entries().map(|(_, e)| e.user.clone()).collect();
        users.sort();
        assert_eq!(users, ["1002", "1003"]);
        assert_eq!(
            source_ip("tcp:[2001:db8::1]:5060"),
            "2001:db8::1".parse().ok()
        );
        assert_eq!(failure_of("wrong_response").0, "wrong-password");
    }
}
