//! Tandem's SIP registrar: REGISTER per RFC 3261 10.3 with Path (RFC 3327) and Outbound flows
//! (RFC 5626), digest authentication (MD5, SHA-256, SHA-512-256; RFC 7616/8760), bindings kept
//! in memory and committed to the key-value store (a sync put through group commit) before the
//! 200 OK, expiry on a timer wheel, OPTIONS keep-alives, and a redirect mode that answers INVITE
//! with 302 and the contacts.
//!
//! ```no_run
//! # async fn f() -> Result<(), registrar::Error> {
//! let store = kv::Store::open_dir("tandem-data", kv::Options::default())?;
//! registrar::users::add(&store, "tandem", "1001", "secret")?;
//! let reg = registrar::Registrar::open(&store, registrar::Config::default())?;
//! let listeners = registrar::bind("127.0.0.1:5060".parse().unwrap(), None).await?;
//! let limits = registrar::StreamLimits::default();
//! registrar::serve(reg, listeners, limits, std::future::pending()).await;
//! # Ok(()) }
//! ```
//!
//! Start reading at `server.rs` ([`Registrar::dispatch`]), then `binding.rs` (the update as a
//! pure function), `location.rs` (memory, store and wheel) and `digest.rs`.
//!
//! Never: answers 200 before the change is on disk, keeps a password (only HA1s), grows a table
//! without bound (transactions, nonce counts, failed-attempt windows, stream buffers all have a
//! maximum), or lets one AOR's requests overtake each other.

pub mod binding;
pub mod devices;
pub mod digest;
pub mod guard;
pub mod location;
pub mod metrics;
pub mod request;
pub mod response;
pub mod server;
pub mod settings;
pub mod streams;
pub mod transport;
pub mod users;

pub use binding::Binding;
pub use digest::Algorithm;
pub use server::{Found, Registrar, Transport, now_ms};
pub use settings::Settings;
pub use streams::StreamLimits;
pub use transport::{Listeners, bind, serve, tls_acceptor};

/// What can go wrong opening or running the registrar.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] kv::KvError),
    #[error("registrar configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Input(String),
    #[error("cannot bind {0}")]
    Bind(String),
    #[error("SIP TLS: {0}")]
    Tls(String),
}

/// The registrar's settings (`[registrar]` in tandem.toml). Every limit has its default here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Domains served; an AOR in another gets 404. Empty: every domain.
    pub domains: Vec<String>,
    /// The digest realm.
    pub realm: String,
    /// Algorithms offered, one WWW-Authenticate each, in this order. Empty: no authentication.
    /// MD5 leads by default: many phones (and SIPp) answer only the first challenge and fail
    /// on an algorithm they do not know; put SHA-256 first once every phone supports it.
    pub algorithms: Vec<Algorithm>,
    pub min_expires_s: u32,
    pub max_expires_s: u32,
    pub default_expires_s: u32,
    /// Most bindings per AOR; a REGISTER that would pass it gets 503.
    pub max_contacts: usize,
    /// Answer INVITE for a registered AOR with 302 and its contacts.
    pub redirect: bool,
    /// How long a nonce is accepted before it is answered `stale=true`.
    pub nonce_ttl_s: u32,
    /// Nonce-count records kept against replay (about 40 bytes each).
    pub nonce_counts_max: usize,
    /// Failed digest attempts per source address within `auth_failure_window_s` before the
    /// source's requests are dropped for the rest of the window. 0: no limit.
    pub auth_failures_max: u32,
    pub auth_failure_window_s: u64,
    /// Source addresses tracked for failed attempts.
    pub sources_tracked_max: usize,
    /// Server transactions held for retransmissions (each holds its response, about 600 bytes).
    pub transactions_max: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            domains: Vec::new(),
            realm: "tandem".into(),
            algorithms: vec![Algorithm::Md5, Algorithm::Sha256],
            min_expires_s: 60,
            max_expires_s: 7200,
            default_expires_s: 3600,
            max_contacts: 10,
            redirect: false,
            nonce_ttl_s: 30,
            nonce_counts_max: 262_144,
            auth_failures_max: 20,
            auth_failure_window_s: 60,
            sources_tracked_max: 65_536,
            transactions_max: 131_072,
        }
    }
}

impl Config {
    pub fn check(&self) -> Result<(), Error> {
        let bad = |s: String| Err(Error::Config(s));
        if self.min_expires_s == 0 || self.min_expires_s > self.max_expires_s {
            return bad(format!(
                "min_expires ({}) must be at least 1 and at most max_expires ({})",
                self.min_expires_s, self.max_expires_s
            ));
        }
        if !(self.min_expires_s..=self.max_expires_s).contains(&self.default_expires_s) {
            return bad(format!(
                "default_expires ({}) must lie within min_expires ({}) and max_expires ({})",
                self.default_expires_s, self.min_expires_s, self.max_expires_s
            ));
        }
        if self.max_contacts == 0 {
            return bad("max_contacts must be at least 1".into());
        }
        if self.realm.is_empty() || self.realm.contains(['"', '\\', '/']) {
            return bad(format!(
                "realm {:?} must be non-empty without '\"', '\\' or '/'",
                self.realm
            ));
        }
        Ok(())
    }
}
