//! `tandem.toml`: every service's settings in one file. A missing file means the embedded
//! defaults (loopback listeners, data under `./tandem-data`); `tandem.example.toml` documents
//! every option with its default.

use anyhow::Context;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub fastagi: fastagi::ServerConfig,
    pub scripts: fastagi::script::ScriptConfig,
    pub metrics: MetricsConfig,
    pub kv: KvConfig,
    pub capture: CaptureConfig,
    pub history: HistorySettings,
    pub web: console::WebConfig,
    pub dialparties: DialpartiesConfig,
    /// Present: the SIP registrar runs.
    pub registrar: Option<registrar::Settings>,
    /// `listen` set: sensors deliver their CDRs here (`collector` crate).
    pub collector: collector::Settings,
    /// Alert rules and where alerts go (`alerts` crate; README, "Alerts").
    pub alerts: alerts::AlertsConfig,
    /// `[[groups]]`: named groups of addresses and numbers, for reports, searches and rules
    /// (`groups` crate; README, "Reports").
    pub groups: Vec<groups::GroupConfig>,
    /// The daily report by email (README, "Reports").
    pub reports: crate::reports::ReportsSettings,
}

/// `[dialparties]`: FreePBX's ring-group and Follow Me logic as a native route.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DialpartiesConfig {
    /// Serve `dialparties` and `dialparties.agi` natively; false: `dialparties.agi` goes to
    /// the script directory like any other script.
    pub enabled: bool,
    /// FreePBX release whose script is followed: 16 (also 15) or 17.
    pub version: u32,
    /// The script's VERBOSE lines to Tandem's log (at info) instead of nowhere.
    pub verbose: bool,
    /// The script's bugs to fix, by name (see README, "FreePBX ring groups and Follow Me").
    pub fix: Vec<String>,
}

impl Default for DialpartiesConfig {
    fn default() -> Self {
        DialpartiesConfig {
            enabled: true,
            version: 17,
            verbose: false,
            fix: Vec::new(),
        }
    }
}

impl DialpartiesConfig {
    pub fn rules(&self) -> anyhow::Result<agi_routes::dialparties::Rules> {
        agi_routes::dialparties::Rules::from_settings(self.version, &self.fix)
            .map_err(anyhow::Error::msg)
    }
}

/// `[history]`: the figures of `/metrics` and of the host, sampled into a history for the
/// console's charts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistorySettings {
    pub enabled: bool,
    /// Seconds between samples: the raw level's bucket. 1 to 60, dividing 60.
    pub interval_s: u32,
    /// The history's file; empty: history.sqlite3 in the store's data directory.
    pub file: String,
    /// How long raw samples, 1-minute and 1-hour buckets are kept (1-day buckets: for ever).
    pub raw_hours: u64,
    pub minute_days: u64,
    pub hour_days: u64,
    /// Most series recorded; a new series past it is refused and counted
    /// (`tandem_history_series_refused_total`).
    pub max_series: usize,
}

impl Default for HistorySettings {
    fn default() -> Self {
        HistorySettings {
            enabled: true,
            interval_s: 10,
            file: String::new(),
            raw_hours: 48,
            minute_days: 30,
            hour_days: 730,
            max_series: history::SERIES_MAX,
        }
    }
}

impl HistorySettings {
    /// The history's levels, or what is wrong with the settings.
    pub fn to_config(&self) -> anyhow::Result<history::HistoryConfig> {
        let mut config = history::HistoryConfig::with_retention(
            self.interval_s,
            self.raw_hours,
            self.minute_days,
            self.hour_days,
        )
        .map_err(|e| anyhow::anyhow!("[history] {e}"))?;
        config.max_series = self.max_series;
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("[history] {e}"))?;
        Ok(config)
    }

    /// The history's file, given the store's data directory.
    pub fn path(&self, data_dir: &Path) -> std::path::PathBuf {
        if self.file.is_empty() {
            data_dir.join("history.sqlite3")
        } else {
            self.file.clone().into()
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvConfig {
    /// Directory of the key-value store (its file is kv.sqlite3 in it).
    pub data_dir: std::path::PathBuf,
    /// astdb families that legacy scripts' DATABASE commands reach in Tandem's store instead of
    /// Asterisk's astdb (only families no dialplan or module of Asterisk uses).
    pub script_families: Vec<String>,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            data_dir: "tandem-data".into(),
            script_families: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Prometheus `/metrics` and `/health` over HTTP.
    pub listen: SocketAddr,
    /// Names it answers to besides its listen address (and `localhost` on loopback): `name`
    /// (any port) or `name:port`, as a Prometheus scrapes it. Another `Host` gets 421.
    pub hosts: Vec<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9573)),
            hosts: Vec::new(),
        }
    }
}

/// `tandem capture`'s options alone, to parse them as the command does.
#[derive(clap::Parser)]
struct CaptureCommand {
    #[command(flatten)]
    args: crate::capture::Args,
}

/// The call monitor run by `tandem serve` beside FastAGI: the same as `tandem capture
/// --interface` or `--hep-listen`, with these options (empty strings: off or the default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CaptureConfig {
    /// Capture live on this interface (needs root or CAP_NET_RAW). Empty: no live capture.
    pub interface: String,
    /// Receive HEP v3 over UDP and TCP on this address instead. Empty: off.
    pub hep_listen: String,
    /// The UDP receive buffer asked for `hep_listen`, MiB.
    pub hep_socket_buffer_mib: usize,
    /// Only HEP packets carrying this authentication key are analysed, and `hep_send` sends it.
    /// Empty: packets with or without a key are accepted.
    pub hep_auth_key: String,
    /// The key read from this file instead. Empty: none.
    pub hep_auth_key_file: String,
    /// Thin sensor: forward what `interface` captures as HEP to `[udp://|tcp://]HOST:PORT`.
    /// Empty: off.
    pub hep_send: String,
    /// Capture agent id of the forwarded packets.
    pub hep_capture_id: u32,
    /// Also analyse here (calls, CDRs, archive) what is forwarded.
    pub hep_send_analyse: bool,
    /// Most packets forwarded per second (0: no cap).
    pub hep_send_max_pps: u64,
    /// Kernel filter (pcap-filter subset). Empty: UDP, and TCP on the SIP ports.
    pub filter: String,
    pub promiscuous: bool,
    /// Kernel ring per capture thread, MiB.
    pub ring_mib: usize,
    /// Buffer between the capture threads and the analysis, MiB.
    pub buffer_mib: usize,
    /// Capture threads sharing the interface (PACKET_FANOUT).
    pub capture_threads: usize,
    /// SQLite file of the CDRs.
    pub cdr_db: std::path::PathBuf,
    /// PostgreSQL instead (libpq-style `host=... user=... dbname=...`). Empty: SQLite.
    pub cdr_postgres: String,
    /// Per-minute tar archive of each call's packets under this directory. Empty: no archive.
    pub archive_dir: String,
    /// What the archive keeps: sip, headers (SIP and RTP headers) or full.
    pub archive_store: String,
    /// MiB of one call's SIP, and of its RTP, held until it ends and archived.
    pub archive_call_max_mib: usize,
    /// The group that may read the CDR database and the archive (`asterisk`). Empty: their
    /// owner only.
    pub group: String,
    /// Seconds between status lines in the log (0: none).
    pub status_interval_s: u64,
    /// The capture's Prometheus metrics on their own address. Empty: off.
    pub metrics_listen: String,
    /// Deliver the CDRs to this collector (`HOST:PORT`) instead of a database here. Empty: off.
    pub collector: String,
    /// This sensor's name on the collector (`tandem sensor add NAME`). Empty: `local`.
    pub sensor_id: String,
    /// The file holding the token `tandem sensor add` printed.
    pub sensor_token_file: String,
    /// The collector's CA certificate (PEM); needed unless the collector is on loopback.
    pub collector_ca: String,
    /// The name the collector's certificate carries. Empty: the host of `collector`.
    pub collector_server_name: String,
    /// A client certificate and key (PEM) for mutual TLS, instead of a token.
    pub sensor_cert: String,
    pub sensor_key: String,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            interface: String::new(),
            hep_listen: String::new(),
            hep_socket_buffer_mib: sensor::hep::HEP_SOCKET_BUFFER_BYTES >> 20,
            hep_auth_key: String::new(),
            hep_auth_key_file: String::new(),
            hep_send: String::new(),
            hep_capture_id: sensor::hep_send::HEP_SEND_CAPTURE_ID,
            hep_send_analyse: false,
            hep_send_max_pps: 0,
            filter: String::new(),
            promiscuous: false,
            ring_mib: 64,
            buffer_mib: 64,
            capture_threads: 1,
            cdr_db: "tandem-data/cdr.sqlite3".into(),
            cdr_postgres: String::new(),
            archive_dir: String::new(),
            archive_store: "headers".into(),
            archive_call_max_mib: sensor::ARCHIVE_CALL_MAX_BYTES >> 20,
            group: String::new(),
            status_interval_s: 10,
            metrics_listen: String::new(),
            collector: String::new(),
            sensor_id: String::new(),
            sensor_token_file: String::new(),
            collector_ca: String::new(),
            collector_server_name: String::new(),
            sensor_cert: String::new(),
            sensor_key: String::new(),
        }
    }
}

impl CaptureConfig {
    /// Whether `tandem serve` runs a capture.
    pub fn enabled(&self) -> bool {
        !self.interface.is_empty() || !self.hep_listen.is_empty()
    }

    /// The sensor these settings mean: the `tandem capture` command line they stand for, parsed
    /// as the command parses it (so the checks and defaults are the command's).
    pub fn to_sensor(&self) -> anyhow::Result<sensor::SensorConfig> {
        self.to_args()?.to_config()
    }

    /// The `tandem capture` command line these settings mean, parsed as the command parses it.
    fn to_args(&self) -> anyhow::Result<crate::capture::Args> {
        let mut argv: Vec<String> = vec!["capture".into()];
        let mut opt = |name: &str, value: &dyn std::fmt::Display| {
            argv.push(format!("--{name}"));
            argv.push(value.to_string());
        };
        if !self.interface.is_empty() {
            opt("interface", &self.interface);
            if !self.filter.is_empty() {
                opt("filter", &self.filter);
            }
            opt("ring-mib", &self.ring_mib);
            opt("buffer-mib", &self.buffer_mib);
            opt("capture-threads", &self.capture_threads);
        }
        if !self.hep_listen.is_empty() {
            opt("hep-listen", &self.hep_listen);
            opt("hep-socket-buffer-mib", &self.hep_socket_buffer_mib);
        }
        if !self.hep_send.is_empty() {
            opt("hep-send", &self.hep_send);
            opt("hep-capture-id", &self.hep_capture_id);
            opt("hep-send-max-pps", &self.hep_send_max_pps);
        }
        if !self.hep_auth_key_file.is_empty() {
            opt("hep-auth-key-file", &self.hep_auth_key_file);
        }
        opt("cdr-db", &self.cdr_db.display());
        if !self.cdr_postgres.is_empty() {
            opt("cdr-postgres", &self.cdr_postgres);
        }
        if !self.archive_dir.is_empty() {
            opt("archive", &self.archive_dir);
            opt("archive-store", &self.archive_store);
            opt("archive-call-max-mib", &self.archive_call_max_mib);
        }
        if !self.group.is_empty() {
            opt("group", &self.group);
        }
        opt("status-interval-s", &self.status_interval_s);
        if !self.metrics_listen.is_empty() {
            opt("metrics-listen", &self.metrics_listen);
        }
        for (name, value) in [
            ("collector", &self.collector),
            ("sensor-id", &self.sensor_id),
            ("sensor-token-file", &self.sensor_token_file),
            ("collector-ca", &self.collector_ca),
            ("collector-server-name", &self.collector_server_name),
            ("sensor-cert", &self.sensor_cert),
            ("sensor-key", &self.sensor_key),
        ] {
            if !value.is_empty() {
                opt(name, value);
            }
        }
        if self.promiscuous && !self.interface.is_empty() {
            argv.push("--promiscuous".into());
        }
        if !self.hep_auth_key.is_empty() {
            // One argument, so that a key that starts with `-` is not taken for an option.
            argv.push(format!("--hep-auth-key={}", self.hep_auth_key));
        }
        if self.hep_send_analyse && !self.hep_send.is_empty() {
            argv.push("--hep-send-analyse".into());
        }
        let args = <CaptureCommand as clap::Parser>::try_parse_from(&argv)
            .map_err(|e| anyhow::anyhow!("[capture]: {}", e.render().to_string().trim()))?
            .args;
        Ok(args)
    }
}

impl Config {
    /// The `[[groups]]`, checked (every problem named with its entry).
    pub fn groups(&self) -> Result<std::sync::Arc<groups::Groups>, groups::GroupsError> {
        groups::Groups::new(&self.groups).map(std::sync::Arc::new)
    }

    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        let mut table: toml::Table = toml::from_str(&text)
            .with_context(|| format!("configuration file {} is not valid", path.display()))?;
        // Read from the text when nothing was retired, so that an error keeps its line.
        let config: Config = if retire_login_keys(&mut table, path).is_empty() {
            toml::from_str(&text)
        } else {
            Config::deserialize(table)
        }
        .with_context(|| format!("configuration file {} is not valid", path.display()))?;
        config
            .fastagi
            .validate()
            .map_err(|e| anyhow::anyhow!("configuration file {}: {e}", path.display()))?;
        config
            .groups()
            .with_context(|| format!("configuration file {}", path.display()))?;
        config
            .dialparties
            .rules()
            .with_context(|| format!("configuration file {}", path.display()))?;
        if config.capture.enabled() {
            config
                .capture
                .to_args()
                .with_context(|| format!("configuration file {}", path.display()))?;
        }
        crate::alerts::rule_set(&config.alerts)
            .with_context(|| format!("configuration file {}: [alerts]", path.display()))?;
        config
            .reports
            .report_groups(&crate::serve::group_names(&config))
            .and_then(|_| config.reports.mailer(&config.alerts))
            .with_context(|| format!("configuration file {}", path.display()))?;
        Ok(config)
    }
}

/// `[web]`'s login limits of earlier releases: `login_failures_per_user`,
/// `login_failures_per_address` and `login_window_s` (a hard lock per name) gave way to
/// `[web.login]`'s counters and delays. A file that still has them starts, with a warning that
/// names the new settings, rather than failing on an upgrade.
const RETIRED_LOGIN_KEYS: [(&str, &str); 3] = [
    (
        "login_failures_per_user",
        "failures_per_user_address, failures_per_user",
    ),
    (
        "login_failures_per_address",
        "failures_per_address, failures_per_prefix",
    ),
    ("login_window_s", "delay_first_s, delay_max_s, forget_s"),
];

fn retire_login_keys(table: &mut toml::Table, path: &Path) -> Vec<&'static str> {
    let Some(toml::Value::Table(web)) = table.get_mut("web") else {
        return Vec::new();
    };
    let mut retired = Vec::new();
    for (key, instead) in RETIRED_LOGIN_KEYS {
        if web.remove(key).is_some() {
            tracing::warn!(
                file = %path.display(),
                "[web] {key} is no longer used and is ignored: failed logins are counted \
                 under [web.login] ({instead}; see tandem.example.toml)"
            );
            retired.push(key);
        }
    }
    retired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readmes_reverse_proxy_settings_load() {
        let readme =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
                .unwrap();
        let section = readme
            .split("\n## Security")
            .nth(1)
            .expect("a Security section");
        let block = section
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .expect("a toml block in the Security section");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tandem.toml");
        std::fs::write(&path, block).unwrap();
        let config = Config::load(&path).unwrap();
        assert_eq!(config.web.hosts, ["pbx.example.com"]);
        assert_eq!(config.web.login.trusted_proxies.len(), 1);
    }

    #[test]
    fn an_earlier_releases_login_limits_are_ignored_with_a_warning_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tandem.toml");
        let old = "[web]\nlogin_failures_per_user = 5\nlogin_failures_per_address = 20\n\
                   login_window_s = 900\nsession_hours = 8\n";
        std::fs::write(&path, old).unwrap();
        let config = Config::load(&path).unwrap();
        assert_eq!(config.web.session_hours, 8);
        assert_eq!(config.web.login, console::throttle::LoginConfig::default());
        let mut table: toml::Table = toml::from_str(old).unwrap();
        assert_eq!(retire_login_keys(&mut table, &path).len(), 3);
        // Any other unknown key is still an error.
        std::fs::write(&path, "[web]\nlogin_failures_per_usr = 5\n").unwrap();
        assert!(Config::load(&path).is_err());
    }

    #[test]
    fn the_example_file_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tandem.example.toml");
        let example = Config::load(&path).unwrap();
        let defaults = Config::default();
        assert_eq!(example.fastagi, defaults.fastagi);
        assert_eq!(example.scripts, defaults.scripts);
        assert_eq!(example.metrics.listen, defaults.metrics.listen);
        assert_eq!(example.metrics.hosts, defaults.metrics.hosts);
        assert_eq!(example.kv.data_dir, defaults.kv.data_dir);
        assert_eq!(example.kv.script_families, defaults.kv.script_families);
        assert_eq!(example.capture, defaults.capture);
        assert_eq!(example.history, defaults.history);
        assert_eq!(example.web, defaults.web);
        assert_eq!(example.dialparties, defaults.dialparties);
        assert_eq!(example.collector, defaults.collector);
        assert!(defaults.history.to_config().is_ok());
    }

    #[test]
    fn the_example_registrar_block_uncommented_is_the_defaults() {
        // The block is commented out (the registrar is off unless asked for); its settings
        // lines, uncommented, must still be the defaults.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tandem.example.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let start = text.find("# [registrar]").unwrap();
        let end = start + text[start..].find("\n\n").unwrap();
        let settings: String = text[start..end]
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.starts_with('[') || l.contains(" = "))
            .filter(|l| !l.starts_with("listen") && !l.starts_with("tls_"))
            .map(|l| format!("{l}\n"))
            .collect();
        let parsed: Config = toml::from_str(&settings).unwrap();
        assert_eq!(parsed.registrar, Some(registrar::Settings::default()));
    }

    #[test]
    fn dialparties_settings_name_what_is_wrong() {
        let c = |v: u32, fix: &[&str]| DialpartiesConfig {
            version: v,
            fix: fix.iter().map(|s| s.to_string()).collect(),
            ..DialpartiesConfig::default()
        };
        assert!(c(16, &["dense-index", "exact-values"]).rules().is_ok());
        let e = c(18, &[]).rules().unwrap_err().to_string();
        assert!(e.contains("use 16"), "{e}");
        let e = c(17, &["hunt"]).rules().unwrap_err().to_string();
        assert!(e.contains("hunt-keeps-forwarded"), "{e}");
    }

    #[test]
    fn history_settings_become_levels_or_a_clear_error() {
        let h = HistorySettings {
            interval_s: 7,
            ..HistorySettings::default()
        };
        let err = h.to_config().unwrap_err().to_string();
        assert!(err.contains("interval_s = 7"), "{err}");
        let cfg = HistorySettings {
            raw_hours: 6,
            ..HistorySettings::default()
        }
        .to_config()
        .unwrap();
        assert_eq!(cfg.levels[0].retention_s, Some(6 * 3_600));
        assert_eq!(cfg.levels[3].retention_s, None);
        let minute = HistorySettings {
            interval_s: 60,
            ..HistorySettings::default()
        };
        assert_eq!(minute.to_config().unwrap().levels[0].name, "1m");
        let none = HistorySettings {
            max_series: 0,
            ..HistorySettings::default()
        };
        let err = none.to_config().unwrap_err().to_string();
        assert!(
            err.contains("[history] ") && err.contains("max_series"),
            "{err}"
        );
    }

    /// `[capture]` in `tandem serve` means what the same options mean to `tandem capture`, and
    /// its defaults are the command's.
    #[test]
    fn capture_settings_are_the_capture_command_line() {
        use clap::Parser;
        let capture = CaptureConfig {
            interface: "eth1".into(),
            ..CaptureConfig::default()
        };
        let from_config = capture.to_args().unwrap();
        let from_command = CaptureCommand::parse_from(["capture", "--interface", "eth1"]).args;
        assert_eq!(format!("{from_config:?}"), format!("{from_command:?}"));
        assert_eq!(
            format!("{:?}", capture.to_sensor().unwrap()),
            format!("{:?}", from_command.to_config().unwrap())
        );

        let hep = CaptureConfig {
            hep_listen: "127.0.0.1:9060".into(),
            archive_dir: "/var/spool/tandem".into(),
            archive_store: "full".into(),
            ..CaptureConfig::default()
        };
        let args = hep.to_args().unwrap();
        assert_eq!(args.hep_listen, Some("127.0.0.1:9060".parse().unwrap()));
        assert!(!CaptureConfig::default().enabled());

        let both = CaptureConfig {
            interface: "eth1".into(),
            hep_listen: "127.0.0.1:9060".into(),
            ..CaptureConfig::default()
        };
        let err = both.to_args().unwrap_err().to_string();
        assert!(
            err.starts_with("[capture]:") && err.contains("cannot be used with"),
            "{err}"
        );
    }

    #[test]
    fn unknown_options_are_errors_that_name_them() {
        let err = toml::from_str::<Config>("[fastagi]\nmax_session = 3\n").unwrap_err();
        assert!(err.to_string().contains("max_session"), "{err}");
    }
}
