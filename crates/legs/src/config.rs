//! `[legs]` as written in `tandem.toml`, with its defaults, and its validation.

use std::net::{IpAddr, SocketAddr};

/// Header names looked at by default: sngrep's and Asterisk's usual ones.
pub const DEFAULT_HEADERS: [&str; 2] = ["X-Call-ID", "X-CID"];
/// How long after an inbound INVITE to a PBX an outbound one may follow and still be its leg.
pub const DEFAULT_WINDOW_MS: u64 = 5_000;
/// How long a dialog is remembered for a header or correlation id naming it (transfers and
/// follow-me come minutes later).
pub const DEFAULT_MEMORY_MS: u64 = 3_600_000;
/// Dialogs remembered at most (the oldest forgotten first).
pub const DEFAULT_MAX_DIALOGS: usize = 100_000;
/// Shared header values remembered at most.
pub const DEFAULT_MAX_TOKENS: usize = 100_000;
/// Inbound INVITEs to PBX addresses waiting for their outbound leg, at most.
pub const DEFAULT_MAX_PENDING: usize = 20_000;
/// Addresses watched for learning PBXs, at most.
pub const DEFAULT_MAX_ADDRESSES: usize = 10_000;
/// Longest header value or correlation id looked at, in bytes (longer ones are ignored).
pub const MAX_VALUE_BYTES: usize = 256;
/// Configured headers, at most.
pub const MAX_HEADERS: usize = 16;
/// Prefix rules, at most.
pub const MAX_PREFIX_RULES: usize = 16;
/// Forms of one number kept after the prefix rules (the number itself included).
pub const MAX_FORMS: usize = 8;

/// One prefix rule: a number starting with `strip` is also known as `add` followed by the rest
/// (`{ strip = "9" }` for an outside-line digit, `{ strip = "0", add = "+49" }` for a national
/// number). Rules apply in order, each also to what the earlier ones made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixRule {
    #[serde(default)]
    pub strip: String,
    #[serde(default)]
    pub add: String,
}

/// `[legs]`. Every table is bounded; see the `DEFAULT_*` constants.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LegsConfig {
    /// Link dialogs at all.
    pub enabled: bool,
    /// Headers whose value names the first leg's Call-ID or is a token the legs share
    /// (matched without regard to case).
    pub headers: Vec<String>,
    /// The PBX's signalling addresses: `IP` (any port) or `IP:port`.
    pub pbx: Vec<String>,
    /// Also take as a PBX an address (IP and port) seen both receiving and sending INVITEs of
    /// different Call-IDs.
    pub learn_pbx: bool,
    pub window_ms: u64,
    pub prefix_rules: Vec<PrefixRule>,
    pub memory_ms: u64,
    pub max_dialogs: usize,
    pub max_tokens: usize,
    pub max_pending: usize,
    pub max_addresses: usize,
}

impl Default for LegsConfig {
    fn default() -> Self {
        LegsConfig {
            enabled: true,
            headers: DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect(),
            pbx: Vec::new(),
            learn_pbx: true,
            window_ms: DEFAULT_WINDOW_MS,
            prefix_rules: Vec::new(),
            memory_ms: DEFAULT_MEMORY_MS,
            max_dialogs: DEFAULT_MAX_DIALOGS,
            max_tokens: DEFAULT_MAX_TOKENS,
            max_pending: DEFAULT_MAX_PENDING,
            max_addresses: DEFAULT_MAX_ADDRESSES,
        }
    }
}

/// What is wrong with a `[legs]` setting; each names the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "[legs] pbx: {0:?} is neither an IP address nor IP:port (write 192.0.2.10 or 192.0.2.10:5060)"
    )]
    Pbx(String),
    #[error("[legs] headers: {0:?} is not a header name (letters, digits and -_. only)")]
    Header(String),
    #[error("[legs] headers: at most {MAX_HEADERS} names")]
    TooManyHeaders,
    #[error(
        "[legs] prefix_rules: rule {0} has an empty strip and add, or characters other than digits, +, * and #"
    )]
    PrefixRule(usize),
    #[error("[legs] prefix_rules: at most {MAX_PREFIX_RULES} rules")]
    TooManyRules,
    #[error("[legs] {0} must be above 0")]
    Zero(&'static str),
}

/// A configured PBX address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PbxAddr {
    Ip(IpAddr),
    Socket(SocketAddr),
}

impl PbxAddr {
    pub fn parse(s: &str) -> Result<PbxAddr, ConfigError> {
        let s = s.trim();
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(PbxAddr::Ip(ip));
        }
        s.parse::<SocketAddr>()
            .map(PbxAddr::Socket)
            .map_err(|_| ConfigError::Pbx(s.to_string()))
    }

    pub fn matches(&self, a: SocketAddr) -> bool {
        match *self {
            PbxAddr::Ip(ip) => a.ip() == ip,
            PbxAddr::Socket(s) => a == s,
        }
    }
}

fn is_number_text(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'*' | b'#'))
}

impl LegsConfig {
    /// Checks every setting; the PBX addresses parsed.
    pub fn validate(&self) -> Result<Vec<PbxAddr>, ConfigError> {
        if self.headers.len() > MAX_HEADERS {
            return Err(ConfigError::TooManyHeaders);
        }
        for h in &self.headers {
            let ok = !h.is_empty()
                && h.len() <= 64
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !ok {
                return Err(ConfigError::Header(h.clone()));
            }
        }
        if self.prefix_rules.len() > MAX_PREFIX_RULES {
            return Err(ConfigError::TooManyRules);
        }
        for (i, r) in self.prefix_rules.iter().enumerate() {
            let empty = r.strip.is_empty() && r.add.is_empty();
            if empty || !is_number_text(&r.strip) || !is_number_text(&r.add) || r.add.len() > 16 {
                return Err(ConfigError::PrefixRule(i + 1));
            }
        }
        for (key, v) in [
            ("window_ms", self.window_ms as usize),
            ("memory_ms", self.memory_ms as usize),
            ("max_dialogs", self.max_dialogs),
            ("max_tokens", self.max_tokens),
            ("max_pending", self.max_pending),
            ("max_addresses", self.max_addresses),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(key));
            }
        }
        self.pbx.iter().map(|p| PbxAddr::parse(p)).collect()
    }
}
