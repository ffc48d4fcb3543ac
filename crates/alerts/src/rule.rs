//! A rule as the engine runs it: [`Rule`], made from a [`RuleConfig`] by [`RuleSet::new`],
//! which checks every key against the rule's kind and names what is wrong.

use std::collections::{BTreeMap, HashSet};

use cdr::query::IpNet;
use cdr::search::CallQuery;

use crate::config::{self, AlertsConfig, RuleConfig};
use crate::{RuleError, Severity};

/// What a rule looks for, with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A call whose worst stream scored below `mos`.
    Mos { mos: f64 },
    /// A call with a stream that lost more than `pct`.
    Loss { pct: f64 },
    /// A call with a stream whose mean jitter exceeds `ms`.
    Jitter { ms: f64 },
    /// An answered call with a direction that carried no RTP, or that stopped `gap_us` or
    /// more before the call ended.
    OneWay { gap_us: Option<i64> },
    /// An answered call without any RTP.
    NoRtp,
    /// A call whose final response is one of `codes` or in one of `classes` (`5` for 5xx).
    Response { codes: Vec<u16>, classes: Vec<u8> },
    /// An INVITE that never got a final response.
    NoResponse,
    /// The answered share of the calls in the window below `pct`.
    Asr { pct: f64 },
    /// The network effectiveness (answered, busy, no answer, rejected by the user: every
    /// outcome but a network failure) below `pct`.
    Ner { pct: f64 },
    /// Post-dial delay (INVITE to the first 18x or 2xx) above `ms`.
    Pdd { ms: f64 },
    /// SIP messages the monitor could not parse (a sample of its counter).
    Malformed,
    /// A REGISTER chain that ended challenged or refused (401/403/407), never registered.
    RegisterFailed,
    /// A user registering from a country it had not registered from.
    RegisterNewCountry,
    /// A user registering from an address outside every prefix it had registered from.
    RegisterNewPrefix { v4: u8, v6: u8 },
    /// A user registering with another User-Agent than before.
    UserAgentChange,
    /// A call to these prefixes, countries or premium ranges (decided at its INVITE).
    Destination {
        prefixes: Vec<String>,
        countries: Vec<String>,
        premium: bool,
    },
    /// More than `max` calls up at once.
    Concurrent { max: u64 },
    /// Calls started in the window (decided at each INVITE).
    Calls,
    /// A caller whose signalling address is in another country than on its last call.
    CountryChange,
    /// A call started outside the allowed hours.
    Hours(crate::hours::Hours),
    /// A sensor that sent nothing for `silent_s`.
    SensorSilent { silent_s: u64 },
    /// Packets the capture dropped (kernel, buffer or archive).
    CaptureDrops,
    /// Records waiting in the CDR journal (the database unreachable or slow).
    CdrJournal,
    /// FastAGI sessions that ended in failure, per route.
    FastagiFailures,
    /// The store's (registrar's) commits slower on average than `ms`.
    StoreCommit { ms: f64 },
    /// A metric's value above or below a threshold.
    Metric {
        metric: String,
        labels: BTreeMap<String, String>,
        above: Option<f64>,
        below: Option<f64>,
    },
}

/// When a kind is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// At a call's INVITE.
    CallStart,
    /// When a call ends.
    CallEnd,
    /// When a REGISTER chain settles.
    Registration,
    /// When a metric is sampled.
    Sample,
}

/// Every kind's name, for messages and the README.
pub const KIND_NAMES: [&str; 26] = [
    "quality.mos",
    "quality.loss",
    "quality.jitter",
    "quality.one_way",
    "quality.no_rtp",
    "sip.response",
    "sip.no_response",
    "sip.asr",
    "sip.ner",
    "sip.pdd",
    "sip.malformed",
    "register.failed",
    "register.new_country",
    "register.new_prefix",
    "register.user_agent",
    "fraud.destination",
    "fraud.concurrent",
    "fraud.calls",
    "fraud.country_change",
    "fraud.hours",
    "health.sensor_silent",
    "health.capture_drops",
    "health.cdr_journal",
    "health.fastagi_failures",
    "health.store_commit",
    "health.metric",
];

impl Kind {
    pub fn moment(&self) -> Moment {
        match self {
            Kind::Destination { .. }
            | Kind::Concurrent { .. }
            | Kind::Calls
            | Kind::CountryChange
            | Kind::Hours(_) => Moment::CallStart,
            Kind::RegisterFailed
            | Kind::RegisterNewCountry
            | Kind::RegisterNewPrefix { .. }
            | Kind::UserAgentChange => Moment::Registration,
            Kind::Malformed
            | Kind::SensorSilent { .. }
            | Kind::CaptureDrops
            | Kind::CdrJournal
            | Kind::FastagiFailures
            | Kind::StoreCommit { .. }
            | Kind::Metric { .. } => Moment::Sample,
            _ => Moment::CallEnd,
        }
    }

    /// A ratio that fires when it falls below its figure (ASR, NER), rather than a count of
    /// incidents.
    pub fn is_ratio_below(&self) -> bool {
        matches!(self, Kind::Asr { .. } | Kind::Ner { .. })
    }
}

/// What a rule's events are grouped by: one alert per value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    None,
    Caller,
    CalledPrefix(u8),
    SourceIp,
    DestinationIp,
    Sensor,
    User,
    IpGroup,
}

impl GroupBy {
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupBy::None => "none",
            GroupBy::Caller => "caller",
            GroupBy::CalledPrefix(_) => "called_prefix",
            GroupBy::SourceIp => "source_ip",
            GroupBy::DestinationIp => "destination_ip",
            GroupBy::Sensor => "sensor",
            GroupBy::User => "user",
            GroupBy::IpGroup => "ip_group",
        }
    }
}

/// When a rule fires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// At this many matching events in the window.
    Count(u64),
    /// When this share (%) of the scope's events in the window match, once it holds
    /// `min_calls`.
    Percent { pct: f64, min_calls: u64 },
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub name: String,
    pub kind_name: &'static str,
    pub kind: Kind,
    /// The scope as written (a Calls-page query string) and parsed.
    pub scope_text: String,
    pub scope: CallQuery,
    pub group_by: GroupBy,
    pub window_us: i64,
    pub threshold: Threshold,
    pub repeat_us: i64,
    pub severity: Severity,
    pub actions: Vec<String>,
}

/// Named address groups (`[alerts.ip_groups]`), in order, the first that holds an address
/// naming it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IpGroups(pub Vec<(String, Vec<IpNet>)>);

impl IpGroups {
    /// The first group that holds `addr` (`ip` or `ip:port`).
    pub fn group_of(&self, addr: &str) -> Option<&str> {
        let b = cdr::query::ip_bytes(addr)?;
        self.0
            .iter()
            .find(|(_, nets)| {
                nets.iter().any(|n| {
                    let (lo, hi) = n.range();
                    b >= lo && b <= hi
                })
            })
            .map(|(name, _)| name.as_str())
    }
}

/// Every rule of a configuration, validated, with the settings they share.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    pub ip_groups: IpGroups,
    /// E.164 prefixes (`+882`) counted as premium beside the built-in list.
    pub premium_prefixes: Vec<String>,
    pub keys_per_rule_max: usize,
    pub calls_per_alert_max: usize,
}

impl Default for RuleSet {
    fn default() -> RuleSet {
        RuleSet {
            rules: Vec::new(),
            ip_groups: IpGroups::default(),
            premium_prefixes: Vec::new(),
            keys_per_rule_max: config::KEYS_PER_RULE_MAX_DEFAULT,
            calls_per_alert_max: config::CALLS_PER_ALERT_MAX_DEFAULT,
        }
    }
}

/// Upper bounds a rule's figures must keep (a week's window; a day between repeats is the
/// least a rule may ask, 0 aside).
const WINDOW_S_MAX: u64 = 7 * 86_400;
const KEYS_PER_RULE_CAP: usize = 10_000_000;
const CALLS_PER_ALERT_CAP: usize = 10_000;

impl RuleSet {
    /// Validates `cfg`: every problem of every rule, each naming the rule and the key.
    pub fn new(cfg: &AlertsConfig) -> Result<RuleSet, Vec<RuleError>> {
        let mut errors = Vec::new();
        let mut groups = Vec::new();
        for (name, items) in &cfg.ip_groups {
            let mut nets = Vec::new();
            for item in items {
                match IpNet::parse("ip_groups", item) {
                    Ok(n) => nets.push(n),
                    Err(e) => errors.push(RuleError::Alerts {
                        key: format!("ip_groups.{name}"),
                        problem: format!("{item:?}: {}", e.problem),
                    }),
                }
            }
            groups.push((name.clone(), nets));
        }
        let mut premium = Vec::new();
        for p in &cfg.premium_prefixes {
            match e164_prefix(p) {
                Ok(p) => premium.push(p),
                Err(problem) => errors.push(RuleError::Alerts {
                    key: "premium_prefixes".into(),
                    problem,
                }),
            }
        }
        let keys_per_rule_max = cfg
            .keys_per_rule_max
            .unwrap_or(config::KEYS_PER_RULE_MAX_DEFAULT);
        if keys_per_rule_max == 0 || keys_per_rule_max > KEYS_PER_RULE_CAP {
            errors.push(RuleError::Alerts {
                key: "keys_per_rule_max".into(),
                problem: format!("{keys_per_rule_max}: give 1 to {KEYS_PER_RULE_CAP}"),
            });
        }
        let calls_per_alert_max = cfg
            .calls_per_alert_max
            .unwrap_or(config::CALLS_PER_ALERT_MAX_DEFAULT);
        if calls_per_alert_max > CALLS_PER_ALERT_CAP {
            errors.push(RuleError::Alerts {
                key: "calls_per_alert_max".into(),
                problem: format!("{calls_per_alert_max}: at most {CALLS_PER_ALERT_CAP}"),
            });
        }
        if cfg.rule.len() > config::RULES_MAX {
            errors.push(RuleError::Alerts {
                key: "rule".into(),
                problem: format!("{} rules; at most {}", cfg.rule.len(), config::RULES_MAX),
            });
        }
        let mut names = HashSet::new();
        let mut rules = Vec::new();
        for (i, r) in cfg.rule.iter().enumerate() {
            let label = if r.name.is_empty() {
                format!("#{}", i + 1)
            } else {
                r.name.clone()
            };
            if !r.name.is_empty() && !names.insert(r.name.clone()) {
                errors.push(rule_error(&label, "name", "another rule has this name"));
            }
            for a in &r.actions {
                if !cfg.action.contains_key(a) {
                    errors.push(rule_error(
                        &label,
                        "actions",
                        &format!("no [alerts.action.{a}] table defines {a:?}"),
                    ));
                }
            }
            if r.group_by == "ip_group" && groups.is_empty() {
                errors.push(rule_error(
                    &label,
                    "group_by",
                    "\"ip_group\" needs [alerts.ip_groups]",
                ));
            }
            match Rule::new(r) {
                Ok(rule) if r.enabled => rules.push(rule),
                Ok(_) => {}
                Err(mut e) => errors.append(&mut e),
            }
        }
        if errors.is_empty() {
            Ok(RuleSet {
                rules,
                ip_groups: IpGroups(groups),
                premium_prefixes: premium,
                keys_per_rule_max,
                calls_per_alert_max,
            })
        } else {
            Err(errors)
        }
    }
}

fn rule_error(rule: &str, key: &str, problem: &str) -> RuleError {
    RuleError::Rule {
        rule: rule.into(),
        key: key.into(),
        problem: problem.into(),
    }
}

/// `+882`, `882` or `00882` as `+882`; digits only after the `+`.
fn e164_prefix(p: &str) -> Result<String, String> {
    let t = p.trim();
    let digits = t
        .strip_prefix('+')
        .or_else(|| t.strip_prefix("00"))
        .or_else(|| t.strip_prefix("011"))
        .unwrap_or(t);
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{p:?} is not an E.164 prefix (write +882, +88213)"));
    }
    Ok(format!("+{digits}"))
}

/// The keys a rule table may set whatever its kind.
const COMMON_KEYS: [&str; 12] = [
    "name",
    "kind",
    "enabled",
    "scope",
    "group_by",
    "prefix_digits",
    "window_s",
    "threshold",
    "threshold_pct",
    "min_calls",
    "repeat_s",
    "severity",
];

impl Rule {
    /// Validates one rule table.
    pub fn new(r: &RuleConfig) -> Result<Rule, Vec<RuleError>> {
        let label = if r.name.is_empty() {
            "#?".to_string()
        } else {
            r.name.clone()
        };
        let mut errors = Vec::new();
        let mut err = |key: &str, problem: String| errors.push(rule_error(&label, key, &problem));
        if r.name.is_empty()
            || r.name.len() > 64
            || !r
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            err(
                "name",
                format!("{:?}: give 1 to 64 letters, digits, -, _ or .", r.name),
            );
        }
        let set = set_keys(r);
        let (kind_name, kind, allowed): (&'static str, Option<Kind>, &[&str]) = match r
            .kind
            .as_str()
        {
            "quality.mos" => (
                "quality.mos",
                need(&mut err, "mos", r.mos, 1.0, 5.0).map(|mos| Kind::Mos { mos }),
                &["mos"],
            ),
            "quality.loss" => (
                "quality.loss",
                need(&mut err, "loss_pct", r.loss_pct, 0.0, 100.0).map(|pct| Kind::Loss { pct }),
                &["loss_pct"],
            ),
            "quality.jitter" => (
                "quality.jitter",
                need(&mut err, "jitter_ms", r.jitter_ms, 0.0, 60_000.0)
                    .map(|ms| Kind::Jitter { ms }),
                &["jitter_ms"],
            ),
            "quality.one_way" => {
                let gap = match r.gap_s {
                    Some(g) if !(0.5..=3600.0).contains(&g) => {
                        err("gap_s", format!("{g}: give 0.5 to 3600 seconds"));
                        None
                    }
                    g => Some(g.map(|g| (g * 1e6) as i64)),
                };
                (
                    "quality.one_way",
                    gap.map(|gap_us| Kind::OneWay { gap_us }),
                    &["gap_s"],
                )
            }
            "quality.no_rtp" => ("quality.no_rtp", Some(Kind::NoRtp), &[]),
            "sip.response" => {
                let mut classes = Vec::new();
                for c in &r.classes {
                    match c.as_bytes() {
                        [d @ b'1'..=b'6', b'x' | b'X', b'x' | b'X'] => classes.push(d - b'0'),
                        _ => err(
                            "classes",
                            format!("{c:?}: write a class as 4xx, 5xx or 6xx"),
                        ),
                    }
                }
                for &c in &r.codes {
                    if !(100..=699).contains(&c) {
                        err("codes", format!("{c}: a SIP response code is 100 to 699"));
                    }
                }
                if r.codes.is_empty() && r.classes.is_empty() {
                    err(
                        "codes",
                        "sip.response needs codes = [503] or classes = [\"5xx\"]".into(),
                    );
                }
                (
                    "sip.response",
                    Some(Kind::Response {
                        codes: r.codes.clone(),
                        classes,
                    }),
                    &["codes", "classes"],
                )
            }
            "sip.no_response" => ("sip.no_response", Some(Kind::NoResponse), &[]),
            "sip.asr" => (
                "sip.asr",
                need(&mut err, "asr_pct", r.asr_pct, 0.0, 100.0).map(|pct| Kind::Asr { pct }),
                &["asr_pct"],
            ),
            "sip.ner" => (
                "sip.ner",
                need(&mut err, "ner_pct", r.ner_pct, 0.0, 100.0).map(|pct| Kind::Ner { pct }),
                &["ner_pct"],
            ),
            "sip.pdd" => (
                "sip.pdd",
                need(&mut err, "pdd_ms", r.pdd_ms, 0.0, 600_000.0).map(|ms| Kind::Pdd { ms }),
                &["pdd_ms"],
            ),
            "sip.malformed" => ("sip.malformed", Some(Kind::Malformed), &[]),
            "register.failed" => ("register.failed", Some(Kind::RegisterFailed), &[]),
            "register.new_country" => ("register.new_country", Some(Kind::RegisterNewCountry), &[]),
            "register.new_prefix" => {
                let v4 = r.prefix_v4.unwrap_or(24);
                let v6 = r.prefix_v6.unwrap_or(64);
                if !(8..=32).contains(&v4) {
                    err("prefix_v4", format!("{v4}: give 8 to 32"));
                }
                if !(16..=128).contains(&v6) {
                    err("prefix_v6", format!("{v6}: give 16 to 128"));
                }
                (
                    "register.new_prefix",
                    Some(Kind::RegisterNewPrefix { v4, v6 }),
                    &["prefix_v4", "prefix_v6"],
                )
            }
            "register.user_agent" => ("register.user_agent", Some(Kind::UserAgentChange), &[]),
            "fraud.destination" => {
                let mut prefixes = Vec::new();
                for p in &r.prefixes {
                    match e164_prefix(p) {
                        Ok(p) => prefixes.push(p),
                        Err(problem) => err("prefixes", problem),
                    }
                }
                let mut countries = Vec::new();
                for c in &r.countries {
                    if c.len() == 2 && c.bytes().all(|b| b.is_ascii_alphabetic()) {
                        countries.push(c.to_ascii_uppercase());
                    } else {
                        err(
                            "countries",
                            format!("{c:?}: an ISO 3166 code of two letters (DE, CU)"),
                        );
                    }
                }
                if prefixes.is_empty() && countries.is_empty() && !r.premium {
                    err(
                        "prefixes",
                        "fraud.destination needs prefixes, countries or premium = true".into(),
                    );
                }
                (
                    "fraud.destination",
                    Some(Kind::Destination {
                        prefixes,
                        countries,
                        premium: r.premium,
                    }),
                    &["prefixes", "countries", "premium"],
                )
            }
            "fraud.concurrent" => {
                let max = match r.max {
                    Some(m) if m >= 1 => Some(Kind::Concurrent { max: m }),
                    _ => {
                        err("max", "fraud.concurrent needs max = N (1 or more): more calls up at once fire".into());
                        None
                    }
                };
                ("fraud.concurrent", max, &["max"])
            }
            "fraud.calls" => ("fraud.calls", Some(Kind::Calls), &[]),
            "fraud.country_change" => ("fraud.country_change", Some(Kind::CountryChange), &[]),
            "fraud.hours" => {
                let h = crate::hours::Hours::parse(
                    r.hours.as_deref().unwrap_or(""),
                    r.days.as_deref(),
                    r.utc_offset.as_deref(),
                );
                let h = match h {
                    Ok(h) => Some(Kind::Hours(h)),
                    Err((key, problem)) => {
                        err(key, problem);
                        None
                    }
                };
                ("fraud.hours", h, &["hours", "days", "utc_offset"])
            }
            "health.sensor_silent" => {
                let s = match r.silent_s {
                    Some(s) if (1..=86_400).contains(&s) => {
                        Some(Kind::SensorSilent { silent_s: s })
                    }
                    _ => {
                        err(
                            "silent_s",
                            "health.sensor_silent needs silent_s = 1 to 86400".into(),
                        );
                        None
                    }
                };
                ("health.sensor_silent", s, &["silent_s"])
            }
            "health.capture_drops" => ("health.capture_drops", Some(Kind::CaptureDrops), &[]),
            "health.cdr_journal" => ("health.cdr_journal", Some(Kind::CdrJournal), &[]),
            "health.fastagi_failures" => {
                ("health.fastagi_failures", Some(Kind::FastagiFailures), &[])
            }
            "health.store_commit" => (
                "health.store_commit",
                need(&mut err, "above", r.above, 0.0, 600_000.0).map(|ms| Kind::StoreCommit { ms }),
                &["above"],
            ),
            "health.metric" => {
                let m = match (&r.metric, r.above, r.below) {
                    (None, _, _) => {
                        err(
                            "metric",
                            "health.metric needs metric = \"name\" as /metrics shows it".into(),
                        );
                        None
                    }
                    (Some(_), None, None) => {
                        err("above", "health.metric needs above = X or below = X".into());
                        None
                    }
                    (Some(m), above, below) => Some(Kind::Metric {
                        metric: m.clone(),
                        labels: r.labels.clone(),
                        above,
                        below,
                    }),
                };
                ("health.metric", m, &["metric", "labels", "above", "below"])
            }
            other => {
                err(
                    "kind",
                    format!("{other:?} is not a kind; one of {}", KIND_NAMES.join(", ")),
                );
                ("", None, &[])
            }
        };
        for k in set {
            if !COMMON_KEYS.contains(&k) && !allowed.contains(&k) && k != "actions" {
                err(
                    k,
                    format!(
                        "{} does not read {k}",
                        if kind_name.is_empty() {
                            "this kind"
                        } else {
                            kind_name
                        }
                    ),
                );
            }
        }
        let group_by = match r.group_by.as_str() {
            "" | "none" => GroupBy::None,
            "caller" => GroupBy::Caller,
            "called_prefix" => {
                let d = r.prefix_digits.unwrap_or(4);
                if !(1..=15).contains(&d) {
                    err("prefix_digits", format!("{d}: give 1 to 15"));
                }
                GroupBy::CalledPrefix(d)
            }
            "source_ip" => GroupBy::SourceIp,
            "destination_ip" => GroupBy::DestinationIp,
            "sensor" => GroupBy::Sensor,
            "user" => GroupBy::User,
            "ip_group" => GroupBy::IpGroup,
            other => {
                err(
                    "group_by",
                    format!(
                        "{other:?}: one of none, caller, called_prefix, source_ip, destination_ip, sensor, user, ip_group"
                    ),
                );
                GroupBy::None
            }
        };
        if r.prefix_digits.is_some() && !matches!(group_by, GroupBy::CalledPrefix(_)) {
            err(
                "prefix_digits",
                "only group_by = \"called_prefix\" reads it".into(),
            );
        }
        let scope = match CallQuery::from_query(&r.scope) {
            Ok(q) => q,
            Err(e) => {
                err("scope", format!("{}: {}", e.param, e.problem));
                CallQuery::default()
            }
        };
        if let Some(k) = &kind {
            match k.moment() {
                Moment::CallStart if scope.needs_end() => err(
                    "scope",
                    format!(
                        "{kind_name} is decided at the INVITE: its scope can filter numbers, addresses and sensor, not what only the call's end tells"
                    ),
                ),
                Moment::Registration | Moment::Sample
                    if scope.caller.is_some()
                        || scope.called.is_some()
                        || scope.needs_end()
                        || scope.call_id.is_some() =>
                {
                    err(
                        "scope",
                        format!(
                            "{kind_name} looks at no call: its scope can filter ip and sensor only"
                        ),
                    )
                }
                _ => {}
            }
            let by_call = matches!(group_by, GroupBy::Caller | GroupBy::CalledPrefix(_));
            if by_call && matches!(k.moment(), Moment::Registration | Moment::Sample) {
                err(
                    "group_by",
                    format!(
                        "{kind_name} has no called number or caller; group by user, source_ip, destination_ip, sensor"
                    ),
                );
            }
            if matches!(
                k,
                Kind::RegisterNewCountry
                    | Kind::RegisterNewPrefix { .. }
                    | Kind::UserAgentChange
                    | Kind::CountryChange
            ) && !matches!(group_by, GroupBy::User | GroupBy::Caller)
            {
                err(
                    "group_by",
                    format!("{kind_name} compares a user with itself: group by user (or caller)"),
                );
            }
        }
        let window_s = r.window_s.unwrap_or(config::WINDOW_S_DEFAULT);
        if !(1..=WINDOW_S_MAX).contains(&window_s) {
            err(
                "window_s",
                format!("{window_s}: give 1 to {WINDOW_S_MAX} seconds"),
            );
        }
        let threshold = match (r.threshold, r.threshold_pct) {
            (Some(_), Some(_)) => {
                err(
                    "threshold_pct",
                    "give threshold (a count) or threshold_pct, not both".into(),
                );
                Threshold::Count(1)
            }
            (_, Some(pct)) => {
                if !(pct > 0.0 && pct <= 100.0) {
                    err(
                        "threshold_pct",
                        format!("{pct}: give more than 0 and at most 100"),
                    );
                }
                if kind.as_ref().is_some_and(Kind::is_ratio_below) {
                    err(
                        "threshold_pct",
                        format!(
                            "{kind_name} has its own percentage; set min_calls for the least it judges"
                        ),
                    );
                }
                Threshold::Percent {
                    pct,
                    min_calls: r.min_calls.unwrap_or(10).max(1),
                }
            }
            (Some(0), None) => {
                err("threshold", "0 would always fire; give 1 or more".into());
                Threshold::Count(1)
            }
            (n, None) if kind.as_ref().is_some_and(Kind::is_ratio_below) => {
                if n.is_some() {
                    err(
                        "threshold",
                        format!(
                            "{kind_name} fires below its percentage; set min_calls for the least it judges"
                        ),
                    );
                }
                Threshold::Percent {
                    pct: 0.0,
                    min_calls: r.min_calls.unwrap_or(10).max(1),
                }
            }
            (n, None) => {
                if r.min_calls.is_some() {
                    err(
                        "min_calls",
                        "only a percentage (threshold_pct) reads it".into(),
                    );
                }
                Threshold::Count(n.unwrap_or(1))
            }
        };
        let repeat_s = r.repeat_s.unwrap_or(config::REPEAT_S_DEFAULT);
        if repeat_s != 0 && !(60..=30 * 86_400).contains(&repeat_s) {
            err(
                "repeat_s",
                format!("{repeat_s}: give 0 (never) or 60 to 2592000 seconds"),
            );
        }
        match (errors.is_empty(), kind) {
            (true, Some(kind)) => Ok(Rule {
                name: r.name.clone(),
                kind_name,
                kind,
                scope_text: r.scope.clone(),
                scope,
                group_by,
                window_us: window_s as i64 * 1_000_000,
                threshold,
                repeat_us: repeat_s as i64 * 1_000_000,
                severity: r.severity,
                actions: r.actions.clone(),
            }),
            _ => Err(errors),
        }
    }
}

/// A required number within bounds.
fn need(
    err: &mut impl FnMut(&str, String),
    key: &str,
    v: Option<f64>,
    lo: f64,
    hi: f64,
) -> Option<f64> {
    match v {
        Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Some(x),
        Some(x) => {
            err(key, format!("{x}: give {lo} to {hi}"));
            None
        }
        None => {
            err(key, "this kind needs it".into());
            None
        }
    }
}

/// The kind parameters a rule table sets (serialized back, so that the list follows the
/// struct: a key added to [`RuleConfig`] is checked without a line here).
fn set_keys(r: &RuleConfig) -> Vec<&'static str> {
    let v = toml::Value::try_from(r).unwrap_or(toml::Value::Table(Default::default()));
    let defaults = toml::Value::try_from(RuleConfig::default())
        .unwrap_or(toml::Value::Table(Default::default()));
    let mut out = Vec::new();
    if let (Some(t), Some(d)) = (v.as_table(), defaults.as_table()) {
        for k in KEY_NAMES {
            if t.get(*k) != d.get(*k) {
                out.push(*k);
            }
        }
    }
    out
}

/// Every key of [`RuleConfig`] that is a kind parameter.
const KEY_NAMES: &[&str] = &[
    "mos",
    "loss_pct",
    "jitter_ms",
    "gap_s",
    "codes",
    "classes",
    "asr_pct",
    "ner_pct",
    "pdd_ms",
    "prefixes",
    "countries",
    "premium",
    "max",
    "hours",
    "days",
    "utc_offset",
    "prefix_v4",
    "prefix_v6",
    "silent_s",
    "metric",
    "labels",
    "above",
    "below",
];
