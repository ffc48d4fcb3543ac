//! Tandem's web console: a login, and a dashboard of the metrics history.
//!
//! - [`Console::bind`] checks the configuration against the security rules (no plain HTTP off
//!   loopback unless allowed; loopback only while no user exists), loads TLS, and binds.
//!   [`Console::serve`] serves until the stop future completes.
//! - [`accounts::Accounts`]: users (Argon2id), sessions and API tokens, in `console.sqlite3`
//!   beside the store; `tandem user ...` manages them while the server runs.
//! - The login's defences: [`login_form`] bounds the form and `next` before anything else,
//!   [`throttle`] counts failures before each check (per user and address, per user from new
//!   addresses, per address, per prefix) with growing delays, and [`password_checks`] runs at
//!   most a few Argon2 checks at once in memory kept for them.
//! - [`dashboard`]: which series each panel draws; [`chart`]: SVG charts drawn on the server.
//! - [`calls`]: the CDR database readers, call pcaps and the live feed behind the calls,
//!   call, live and registrations pages (`web/calls_api.rs`, `assets/calls.js`).
//! - The Alerts page (`web/alerts_api.rs`): the alerts stored in the CDR database, their
//!   acknowledgements and silences ([`alert_board`]: the header badge's count, what a silence
//!   may say), and the rules an admin edits through [`alert_rules::AlertRules`], which `serve`
//!   implements ([`Console::manage_alert_rules`]).
//! - [`reports`]: the groups' reports as rows, CSV, JSON lines and the daily email's HTML;
//!   the Reports page and `/api/reports` (`web/reports.rs`) read them through the calls'
//!   CDR readers ([`Console::show_reports`]).
//! - [`redact`]: the credentials in a call's SIP messages, replaced for a viewer.
//! - [`devices`]: every user seen registering, by the monitor and by the registrar, for the
//!   Devices page and `/api/devices` ([`Console::show_registrar_devices`]).
//! - [`sensors`]: the remote sensors of `serve`'s collector, for the dashboard's Sensors panel
//!   and `/api/sensors` ([`Console::show_sensors`]).
//! - [`web::router`]: the routes. Pages are askama templates (checked at compile time), and
//!   the stylesheet and the one small script are embedded: nothing is fetched from elsewhere,
//!   and a page without JavaScript still shows its charts.
//!
//! Never: serves data to a request without a signed-in user or a valid token, changes state
//! through GET, or keeps a password, a session id or a token in clear.

pub mod accounts;
pub mod alert_board;
pub mod alert_rules;
pub mod calls;
pub mod chart;
pub mod dashboard;
pub mod devices;
mod listen;
pub mod login_form;
pub mod password_checks;
pub mod redact;
pub mod reports;
pub mod sensors;
pub mod throttle;
pub mod web;

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use accounts::{Accounts, Role, User};
pub use listen::tls_acceptor;

/// `[web]` in `tandem.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    pub enabled: bool,
    /// Where the console listens.
    pub listen: SocketAddr,
    /// PEM certificate chain and private key: with both, the console speaks HTTPS only.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback (behind a TLS proxy, say).
    pub allow_plain_http: bool,
    /// How long a login lasts.
    pub session_hours: u32,
    /// `[web.login]`: failed-login counters and delays, password checks at once.
    pub login: throttle::LoginConfig,
    /// Most connections served at once.
    pub connections_max: usize,
    /// Most connections from one client address (an IPv6 client: its /64). When the console
    /// is full, a new address takes the oldest connection of the busiest one.
    pub connections_per_address_max: usize,
    /// Time for a TLS handshake and a request's headers (also an idle kept-alive connection's
    /// wait for its next request), and for a request's body.
    pub header_timeout_ms: u64,
    pub body_timeout_ms: u64,
    /// Bytes of a request's line and headers, and of its body.
    pub header_bytes_max: usize,
    pub body_bytes_max: usize,
    /// Names the console answers to besides its listen address (and `localhost` on
    /// loopback): `name` (any port) or `name:port`. A request for another `Host` gets 421,
    /// which keeps pages of other sites out through DNS rebinding.
    pub hosts: Vec<String>,
    /// CDR database connections of the calls pages, and queries running at once; a search
    /// beyond waits for one.
    pub cdr_readers_max: usize,
    /// MiB of call pcaps kept for the next request (a call opened, then played, then
    /// downloaded reads its packets once).
    pub pcap_cache_mib: usize,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 9574)),
            tls_cert: None,
            tls_key: None,
            allow_plain_http: false,
            session_hours: 12,
            login: throttle::LoginConfig::default(),
            connections_max: http_listen::Limits::CONSOLE.connections_max,
            connections_per_address_max: http_listen::Limits::CONSOLE.connections_per_address_max,
            header_timeout_ms: http_listen::Limits::CONSOLE.header_timeout_ms,
            body_timeout_ms: http_listen::Limits::CONSOLE.body_timeout_ms,
            header_bytes_max: http_listen::Limits::CONSOLE.header_bytes_max,
            // The alert rules' text (256 KiB at most) is the largest body the console takes.
            body_bytes_max: http_listen::Limits::CONSOLE
                .body_bytes_max
                .max(alert_rules::RULES_TEXT_BYTES_MAX),
            hosts: Vec::new(),
            cdr_readers_max: calls::CallsConfig::READERS_MAX,
            pcap_cache_mib: calls::CallsConfig::PCAP_CACHE_BYTES_MAX >> 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error(
        "refusing to serve the console on {0} without TLS: set web.tls_cert and web.tls_key, listen on loopback, or set web.allow_plain_http = true (behind a TLS proxy)"
    )]
    PlainOffLoopback(SocketAddr),
    #[error(
        "no console user exists yet, so the console listens on loopback only, not {addr}: create the first admin with `{hint}`"
    )]
    NoUserOffLoopback { addr: SocketAddr, hint: String },
    #[error("web.tls_cert and web.tls_key go together: one is missing")]
    HalfTls,
    #[error("{0}")]
    Login(String),
    #[error("console TLS: {0}")]
    Tls(String),
    #[error("cannot listen for the console on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Hosts(#[from] http_listen::HostsError),
    #[error(transparent)]
    Accounts(#[from] accounts::AccountError),
    #[error(transparent)]
    History(#[from] history::HistoryError),
}

/// A bound console, ready to serve.
pub struct Console {
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: web::ConsoleState,
    limits: http_listen::Limits,
    hosts: http_listen::Hosts,
    stopping: tokio::sync::watch::Sender<bool>,
}

/// The command that creates the first admin for a data directory.
pub fn first_admin_command(data_dir: &Path) -> String {
    format!(
        "tandem user add admin --role admin --data-dir {}",
        data_dir.display()
    )
}

/// The TLS acceptor the configuration asks for, after the rules that need no disk: both files
/// or neither, and no plain HTTP off loopback unless allowed.
fn checked_tls(cfg: &WebConfig) -> Result<Option<tokio_rustls::TlsAcceptor>, ConsoleError> {
    cfg.login.check().map_err(ConsoleError::Login)?;
    let tls = match (&cfg.tls_cert, &cfg.tls_key) {
        (Some(c), Some(k)) => Some(tls_acceptor(c, k)?),
        (None, None) => None,
        _ => return Err(ConsoleError::HalfTls),
    };
    if !cfg.listen.ip().is_loopback() && tls.is_none() && !cfg.allow_plain_http {
        return Err(ConsoleError::PlainOffLoopback(cfg.listen));
    }
    Ok(tls)
}

/// Checks `[web]` before anything is created (a data directory, a store): the certificate and
/// key load and match, the listen address is allowed without TLS, and `hosts` are host names.
/// [`Console::bind`] checks the same again, with the accounts.
pub fn check(cfg: &WebConfig) -> Result<(), ConsoleError> {
    checked_tls(cfg)?;
    listen::hosts(cfg)?;
    Ok(())
}

impl Console {
    /// Opens the accounts in `data_dir` and a reader of the history (when given), checks the
    /// rules, and binds. With `calls`, the calls pages read that CDR database and archive.
    pub async fn bind(
        cfg: &WebConfig,
        data_dir: &Path,
        history: Option<(&Path, history::HistoryConfig)>,
        calls: Option<calls::CallsConfig>,
    ) -> Result<Console, ConsoleError> {
        let tls = checked_tls(cfg)?;
        let hosts = listen::hosts(cfg)?;
        let loopback = cfg.listen.ip().is_loopback();
        std::fs::create_dir_all(data_dir).map_err(|source| ConsoleError::Bind {
            addr: cfg.listen,
            source,
        })?;
        let accounts = Accounts::open(&accounts::accounts_file(data_dir))?;
        let hint = first_admin_command(data_dir);
        if accounts.is_empty()? {
            if !loopback {
                return Err(ConsoleError::NoUserOffLoopback {
                    addr: cfg.listen,
                    hint,
                });
            }
            tracing::warn!("no console user yet: create the first admin with `{hint}`");
        }
        let history = match history {
            Some((path, hcfg)) => Some(Mutex::new(history::History::open(path, hcfg)?)),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| ConsoleError::Bind {
                addr: cfg.listen,
                // An address in use names what holds it.
                source: procstat::name_holder(cfg.listen, procstat::Proto::Tcp, e),
            })?;
        let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
        let state = web::ConsoleState {
            accounts,
            throttle: throttle::LoginThrottle::new(cfg.login.clone()),
            checks: password_checks::PasswordChecks::new(
                cfg.login.checks_max,
                std::time::Duration::from_millis(cfg.login.check_wait_ms),
            ),
            history,
            session_ttl_s: i64::from(cfg.session_hours.max(1)) * 3600,
            tls: tls.is_some(),
            first_admin_hint: hint,
            calls: calls.map(|c| Arc::new(calls::Calls::new(c))),
            sensors: None,
            registrar_devices: None,
            alert_rules: None,
            reports: None,
            badge: alert_board::BadgeCache::default(),
            stopping: stopping_rx,
        };
        Ok(Console {
            listener,
            tls,
            state,
            limits: listen::limits(cfg),
            hosts,
            stopping,
        })
    }

    /// With `sensors` (when `serve` runs a collector), the dashboard shows a Sensors panel and
    /// `/api/sensors` answers; without, neither exists.
    pub fn show_sensors(&mut self, sensors: Option<sensors::SensorsConfig>) {
        self.state.sensors = sensors;
    }

    /// With `feed` (when `serve` runs its registrar), the Devices page and `/api/devices` show
    /// the registrar's devices beside the REGISTER chains the capture saw.
    pub fn show_registrar_devices(&mut self, feed: Option<devices::RegistrarFeed>) {
        self.state.registrar_devices = feed;
    }

    /// With `rules`, an admin reads and edits the alert rules on the Alerts page (the
    /// implementer checks and applies them); without, the page says rules are not enabled.
    pub fn manage_alert_rules(&mut self, rules: Option<Arc<dyn alert_rules::AlertRules>>) {
        self.state.alert_rules = rules;
    }

    /// With `reports`, the Reports page and `/api/reports` read the groups' rollups; without,
    /// the page says how reports come to be.
    pub fn show_reports(&mut self, reports: Option<reports::ReportsConfig>) {
        self.state.reports = reports;
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The URL a person opens.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        match self.local_addr() {
            Ok(a) => format!("{scheme}://{a}/"),
            Err(_) => format!("{scheme}://?/"),
        }
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ConsoleError> {
        let app = web::router(Arc::new(self.state));
        let stopping = self.stopping;
        // Long-lived answers (the live feed) end first, so the drain does not wait for them.
        let shutdown = async move {
            shutdown.await;
            let _ = stopping.send(true);
        };
        let (tls, limits, hosts) = (self.tls, self.limits, self.hosts);
        http_listen::serve(self.listener, app, tls, limits, hosts, "console", shutdown).await;
        Ok(())
    }
}
