//! The `[alerts]` section of `tandem.toml` (and of a `--rules` file) as it is written, before
//! validation: [`AlertsConfig`], its `[[alerts.rule]]` tables ([`RuleConfig`]) and its
//! `[alerts.action.NAME]` tables ([`ActionConfig`]).
//!
//! Every bound has its default here, so that the README, `tandem.example.toml` and the code
//! say the same thing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Keys (group-by values) tracked per rule before the least recently seen is evicted.
pub const KEYS_PER_RULE_MAX_DEFAULT: usize = 100_000;
/// Call or registration uids kept per alert.
pub const CALLS_PER_ALERT_MAX_DEFAULT: usize = 100;
/// A rule's window when it names none.
pub const WINDOW_S_DEFAULT: u64 = 300;
/// How long a firing alert waits before it is notified again (Alertmanager's default).
pub const REPEAT_S_DEFAULT: u64 = 4 * 3600;
/// Rules in one configuration.
pub const RULES_MAX: usize = 1_000;

/// `[alerts]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// `[[alerts.rule]]`, in order.
    #[serde(default)]
    pub rule: Vec<RuleConfig>,
    /// `[alerts.action.NAME]`: where notifications go; rules name them in `actions`.
    #[serde(default)]
    pub action: BTreeMap<String, ActionConfig>,
    /// `[alerts.ip_groups]`: named lists of addresses and networks (`carrier = ["192.0.2.0/24"]`),
    /// for `group_by = "ip_group"` and a scope's `ip_group=NAME`.
    #[serde(default)]
    pub ip_groups: BTreeMap<String, Vec<String>>,
    /// Number prefixes dialled that count as premium or high-risk (`premium = true` in a
    /// `fraud.destination` rule), in E.164 (`+88213`); added to the built-in list.
    #[serde(default)]
    pub premium_prefixes: Vec<String>,
    /// How the PBX's users dial abroad: a number starting with one of these is international
    /// (default `["00", "011"]`; with a trunk access code, e.g. `["900", "9011"]`).
    pub international_prefixes: Option<Vec<String>>,
    /// A MaxMind-format country database (GeoLite2-Country, DB-IP Lite) that replaces the
    /// embedded IP-to-country table.
    pub geoip_mmdb: Option<PathBuf>,
    /// Default [`KEYS_PER_RULE_MAX_DEFAULT`].
    pub keys_per_rule_max: Option<usize>,
    /// Default [`CALLS_PER_ALERT_MAX_DEFAULT`].
    pub calls_per_alert_max: Option<usize>,
}

/// One `[[alerts.rule]]` table. Only the parameters its kind reads may be set (validation
/// refuses the others, naming them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Unique among the rules; letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// `quality.mos`, `sip.response`, `register.failed`, `fraud.destination`, ... (README,
    /// "Alerts").
    pub kind: String,
    /// `false` keeps the rule written but idle.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Which calls the rule looks at: a Calls-page query string (`called=00*&ip=192.0.2.0/24`,
    /// `sensor=edge1`, `codec=PCMA`, `response=5xx`), empty for all.
    #[serde(default)]
    pub scope: String,
    /// `none` (default), `caller`, `called_prefix`, `source_ip`, `destination_ip`, `sensor`,
    /// `user`, `ip_group`.
    #[serde(default)]
    pub group_by: String,
    /// Digits of the called number (after normalisation to E.164 where it can be) for
    /// `group_by = "called_prefix"`; default 4.
    pub prefix_digits: Option<u8>,
    /// Default [`WINDOW_S_DEFAULT`].
    pub window_s: Option<u64>,
    /// Fire at this many matching events in the window (default 1).
    pub threshold: Option<u64>,
    /// Or fire when this percentage of the scope's events in the window match...
    pub threshold_pct: Option<f64>,
    /// ...once the window holds at least this many (default 10).
    pub min_calls: Option<u64>,
    /// Default [`REPEAT_S_DEFAULT`]; 0 never repeats.
    pub repeat_s: Option<u64>,
    #[serde(default)]
    pub severity: crate::Severity,
    /// Names of `[alerts.action.NAME]` tables.
    #[serde(default)]
    pub actions: Vec<String>,

    // Kind parameters.
    /// `quality.mos`: a call's worst stream below this MOS.
    pub mos: Option<f64>,
    /// `quality.loss`: a stream lost more than this percentage.
    pub loss_pct: Option<f64>,
    /// `quality.jitter`: a stream's mean jitter above this.
    pub jitter_ms: Option<f64>,
    /// `quality.one_way`: a direction that stopped this long before the call ended counts as
    /// silent (default: only a direction with no RTP at all).
    pub gap_s: Option<f64>,
    /// `sip.response`: these final codes...
    #[serde(default)]
    pub codes: Vec<u16>,
    /// ...or these classes (`4xx`, `5xx`, `6xx`).
    #[serde(default)]
    pub classes: Vec<String>,
    /// `sip.asr`: answered share below this.
    pub asr_pct: Option<f64>,
    /// `sip.ner`: network effectiveness below this.
    pub ner_pct: Option<f64>,
    /// `sip.pdd`: post-dial delay (INVITE to first ringing or answer) above this.
    pub pdd_ms: Option<f64>,
    /// `fraud.destination`: called numbers starting with these (E.164 with `+`, matched after
    /// `00`/`011` are read as `+`).
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// `fraud.destination`: called numbers in these countries (ISO 3166 alpha-2), by the
    /// E.164 country code table; `fraud.country_change`/`register.new_country` ignore these.
    #[serde(default)]
    pub countries: Vec<String>,
    /// `fraud.destination`: the premium and high-risk ranges (built in, plus
    /// `[alerts] premium_prefixes`).
    #[serde(default)]
    pub premium: bool,
    /// `fraud.concurrent`: more calls up at once than this.
    pub max: Option<u64>,
    /// `fraud.hours`: the allowed hours, `08:00-18:00` (calls outside fire).
    pub hours: Option<String>,
    /// `fraud.hours`: the allowed days, `mon-fri` or `mon,tue,sat` (default every day).
    pub days: Option<String>,
    /// `fraud.hours`: the offset of the PBX's clock from UTC, `+01:00` (default `+00:00`).
    pub utc_offset: Option<String>,
    /// `register.new_prefix`: the IPv4 prefix length a new address is judged by (default 24).
    pub prefix_v4: Option<u8>,
    /// `register.new_prefix`: the IPv6 prefix length (default 64).
    pub prefix_v6: Option<u8>,
    /// `health.sensor_silent`: silent this long.
    pub silent_s: Option<u64>,
    /// `health.metric`: the metric's name as `/metrics` shows it.
    pub metric: Option<String>,
    /// `health.metric`: labels the series must carry.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `health.*`: fire above this value...
    pub above: Option<f64>,
    /// ...or below this one.
    pub below: Option<f64>,
}

fn yes() -> bool {
    true
}

/// Attempts after the first, when an action names none.
pub const ACTION_RETRIES_DEFAULT: u32 = 5;
/// The first retry's wait; it doubles each time, up to [`ACTION_BACKOFF_MS_MAX`].
pub const ACTION_BACKOFF_MS_DEFAULT: u64 = 1_000;
pub const ACTION_BACKOFF_MS_MAX: u64 = 300_000;
/// One attempt's deadline.
pub const ACTION_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// `[alerts.action.NAME]`: `type` says which (`webhook`, `email`, `alertmanager`, `script`);
/// only the keys of that type may be set (validation refuses the others, naming them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionConfig {
    #[serde(rename = "type")]
    pub kind: String,
    /// `webhook`: where to POST; `alertmanager`: its base URL (`http://127.0.0.1:9093`).
    pub url: Option<String>,
    /// `webhook`: `json` (default: the [`crate::Alert`] with `version`) or `slack`
    /// (`{"text": ...}`).
    pub format: Option<String>,
    /// `webhook`: a file holding the HMAC-SHA256 key; the body's signature goes in
    /// `X-Tandem-Signature: sha256=HEX`.
    pub secret_file: Option<PathBuf>,
    /// `email`: the SMTP server, `host` or `host:port`.
    pub server: Option<String>,
    /// `email`: `starttls` (default, port 587), `tls` (port 465) or `none` (port 25, loopback
    /// only unless `allow_plain = true`).
    pub security: Option<String>,
    #[serde(default)]
    pub allow_plain: bool,
    /// `email`: the SMTP login, with `password_file`.
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    /// `email`: the sender and the recipients.
    pub from: Option<String>,
    #[serde(default)]
    pub to: Vec<String>,
    /// `script`: an absolute path, run without a shell.
    pub program: Option<PathBuf>,
    /// `script`: its arguments; `{rule}`, `{key}`, `{state}`, `{severity}` are replaced by
    /// the alert's.
    #[serde(default)]
    pub args: Vec<String>,
    /// Default [`ACTION_RETRIES_DEFAULT`].
    pub retries: Option<u32>,
    /// Default [`ACTION_BACKOFF_MS_DEFAULT`].
    pub backoff_ms: Option<u64>,
    /// Default [`ACTION_TIMEOUT_MS_DEFAULT`].
    pub timeout_ms: Option<u64>,
}

/// A `--rules` file or `tandem.toml`: only `[alerts]` is read; other top-level tables are left
/// to their own readers, while unknown keys inside `[alerts]` are refused.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RulesFile {
    #[serde(default)]
    pub alerts: AlertsConfig,
}

impl RulesFile {
    /// Parses `text` (read from `path`, which errors name).
    pub fn parse(path: &std::path::Path, text: &str) -> Result<AlertsConfig, crate::RuleError> {
        toml::from_str::<RulesFile>(text)
            .map(|f| f.alerts)
            .map_err(|e| crate::RuleError::Parse {
                path: path.display().to_string(),
                message: e.to_string(),
            })
    }
}
