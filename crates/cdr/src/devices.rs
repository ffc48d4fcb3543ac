//! Devices: every user seen registering, one row per user and source address, with its state
//! (`registered`, `expired`, `failing`), its last failure and the failures per address. The
//! console's Devices page and `GET /api/devices` (the console adds the rows of Tandem's own
//! registrar to the monitor's, which are read here).
//!
//! ```text
//! GET /api/devices?user=&state=&ip=&since=&after=&limit=
//! ```
//!
//! `user` has the number syntax of `caller` (`1001`, `10*`, lists, `!`); `state` is a comma
//! list of `registered`, `expired`, `failing`; `ip` an address or CIDR of the source; `since`
//! how far back REGISTER chains are read (default the last [`SINCE_DEFAULT_S`] seconds).
//!
//! **Bounded.** The monitor's rows come from the newest REGISTER chains since `since`, at most
//! [`CHAINS_SCANNED_MAX`] of them, read newest first through the registration search
//! ([`crate::CdrStore::registrations`]: its indexes, its pages; `user` goes down to it, `ip`
//! is checked on each chain's source, since the search's `ip` also matches the destination),
//! folded into one row per (user, domain, source address): the newest chain gives the row's
//! contact, User-Agent and state, the newest failing chain its last failure, and every failing
//! chain counts. A scan cut at the cap says so (`scanned_to_us`). Rows are ordered by user,
//! domain, address and source, and paged by keyset on that order (`after`, the `next` of the
//! page before), at most [`crate::query::LIMIT_MAX`] a page.

use serde::Serialize;

use crate::query::{self, IpNet, LIMIT_MAX, NumberFilter, QueryError};
use crate::registration::{CdrRegistration, RegistrationQuery};
use crate::{CdrError, CdrStore};

/// REGISTER chains read for one answer at most.
pub const CHAINS_SCANNED_MAX: usize = 50_000;
/// How far back chains are read without `since`: a day (phones refresh hourly or more often).
pub const SINCE_DEFAULT_S: i64 = 86_400;
/// Rows a page holds without `limit`.
pub const DEVICES_LIMIT_DEFAULT: usize = 100;
/// Longest `after` cursor read, in bytes.
pub const CURSOR_BYTES_MAX: usize = 1_100;

/// A device's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceState {
    /// Its last REGISTER succeeded and the binding has not lapsed.
    Registered,
    /// Its binding lapsed, or it removed it (expires 0).
    Expired,
    /// Its last REGISTER failed (wrong password, rejected, no response...).
    Failing,
}

impl DeviceState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceState::Registered => "registered",
            DeviceState::Expired => "expired",
            DeviceState::Failing => "failing",
        }
    }

    const ALL: [DeviceState; 3] = [
        DeviceState::Registered,
        DeviceState::Expired,
        DeviceState::Failing,
    ];
}

/// One user at one source address, as the monitor or the registrar saw it. The fields are the
/// columns of an export, in this order ([`DEVICE_COLUMNS`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceRow {
    pub user: String,
    pub domain: String,
    /// The source IP address of its REGISTERs.
    pub address: String,
    /// `monitor` (REGISTERs captured) or `registrar` (Tandem's own registrar).
    pub seen_by: String,
    /// `registered`, `expired` or `failing`.
    pub state: String,
    pub contact: String,
    pub user_agent: String,
    /// Where its last REGISTER came from: `ip:port` (the registrar: `udp:ip:port`).
    pub source: String,
    /// Its last REGISTER, µs since the epoch.
    pub last_seen_us: i64,
    /// When its registration last succeeded, and when that binding lapses (or lapsed).
    pub registered_us: Option<i64>,
    pub expires_us: Option<i64>,
    /// Its last failure: the class (`wrong-password`, `challenged`, `rejected`,
    /// `server-error`, `timeout`; the registrar also `unknown-user`), why, and when.
    pub failure: String,
    pub failure_reason: String,
    pub failure_us: Option<i64>,
    /// Failures of this user from this address, and of every user from this address (REGISTER
    /// chains that failed, for the monitor; refused digest attempts, for the registrar).
    pub failures: u64,
    pub address_failures: u64,
    /// The sensor that saw it (the monitor's rows).
    pub sensor: String,
}

/// The columns of a device row, in order.
pub const DEVICE_COLUMNS: [&str; 17] = [
    "user",
    "domain",
    "address",
    "seen_by",
    "state",
    "contact",
    "user_agent",
    "source",
    "last_seen_us",
    "registered_us",
    "expires_us",
    "failure",
    "failure_reason",
    "failure_us",
    "failures",
    "address_failures",
    "sensor",
];

/// The Devices page's filters.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceQuery {
    pub user: Option<NumberFilter>,
    pub state: Vec<DeviceState>,
    pub ip: Option<IpNet>,
    /// Chains whose last message came at or after this time; `None`: the last
    /// [`SINCE_DEFAULT_S`].
    pub since_us: Option<i64>,
    /// The key of the last row of the page before (user, domain, address, seen_by).
    pub after: Option<[String; 4]>,
    pub limit: usize,
}

impl Default for DeviceQuery {
    fn default() -> DeviceQuery {
        DeviceQuery {
            user: None,
            state: Vec::new(),
            ip: None,
            since_us: None,
            after: None,
            limit: DEVICES_LIMIT_DEFAULT,
        }
    }
}

/// The parameters of `GET /api/devices`.
pub const DEVICE_PARAMS: [&str; 6] = ["user", "state", "ip", "since", "after", "limit"];

/// `|` and `%` escaped, so that the four parts of a cursor join with `|`.
fn escape_part(s: &str) -> String {
    s.replace('%', "%25").replace('|', "%7C")
}

fn unescape_part(s: &str) -> String {
    s.replace("%7C", "|").replace("%25", "%")
}

impl DeviceQuery {
    /// Reads the query string of `GET /api/devices`; every error names its parameter.
    pub fn from_query(raw: &str) -> Result<DeviceQuery, QueryError> {
        let v = query::decode_pairs(raw, &DEVICE_PARAMS)?;
        let get = |i: usize| v[i].as_deref();
        let mut state = Vec::new();
        for item in get(1)
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
        {
            let s = DeviceState::ALL
                .into_iter()
                .find(|s| s.as_str().eq_ignore_ascii_case(item))
                .ok_or_else(|| {
                    QueryError::new(
                        "state",
                        format!(
                            "{:?} is not one of registered, expired, failing",
                            item.chars().take(16).collect::<String>()
                        ),
                    )
                })?;
            if !state.contains(&s) {
                state.push(s);
            }
        }
        let after = match get(4) {
            None => None,
            Some(c) if c.len() > CURSOR_BYTES_MAX => {
                return Err(QueryError::new(
                    "after",
                    format!(
                        "longer than {CURSOR_BYTES_MAX} bytes; pass the `next` of the previous page unchanged"
                    ),
                ));
            }
            Some(c) => Some(parse_cursor(c).ok_or_else(|| {
                QueryError::new(
                    "after",
                    "not a page cursor; pass the `next` of the previous page unchanged",
                )
            })?),
        };
        Ok(DeviceQuery {
            user: get(0)
                .map(|x| NumberFilter::parse("user", x))
                .transpose()?
                .flatten(),
            state,
            ip: get(2).map(|x| IpNet::parse("ip", x)).transpose()?,
            since_us: get(3).map(|x| query::parse_time("since", x)).transpose()?,
            after,
            limit: get(5)
                .map(|x| query::parse_limit("limit", x))
                .transpose()?
                .unwrap_or(DEVICES_LIMIT_DEFAULT),
        })
    }

    /// The query string that [`DeviceQuery::from_query`] reads back as this query.
    pub fn to_query(&self) -> String {
        let mut s = String::new();
        let p = &mut s;
        if let Some(f) = &self.user {
            query::push_pair(p, "user", &f.to_text());
        }
        if !self.state.is_empty() {
            let v: Vec<&str> = self.state.iter().map(|s| s.as_str()).collect();
            query::push_pair(p, "state", &v.join(","));
        }
        if let Some(v) = &self.ip {
            query::push_pair(p, "ip", &v.to_text());
        }
        if let Some(v) = self.since_us {
            query::push_pair(p, "since", &query::time_text(v));
        }
        if let Some(a) = &self.after {
            query::push_pair(p, "after", &cursor_text(a));
        }
        if self.limit != DEVICES_LIMIT_DEFAULT {
            query::push_pair(p, "limit", &self.limit.to_string());
        }
        s
    }

    /// Where the chains are read from: `since`, or [`SINCE_DEFAULT_S`] before `now_us`.
    pub fn since(&self, now_us: i64) -> i64 {
        self.since_us
            .unwrap_or(now_us - SINCE_DEFAULT_S * 1_000_000)
    }

    /// Whether a row passes the filters (the monitor's rows passed `user` and `ip` already,
    /// in the search; the registrar's are checked here).
    pub fn matches(&self, row: &DeviceRow) -> bool {
        self.user.as_ref().is_none_or(|f| f.matches(&row.user))
            && self.ip.as_ref().is_none_or(|net| {
                query::ip_bytes(&row.address).is_some_and(|b| {
                    let (lo, hi) = net.range();
                    lo <= b && b <= hi
                })
            })
            && (self.state.is_empty() || self.state.iter().any(|s| s.as_str() == row.state))
    }
}

/// A page's cursor read back from its text (a page's `next`).
pub fn parse_cursor(text: &str) -> Option<[String; 4]> {
    let parts: Vec<String> = text.split('|').map(unescape_part).collect();
    parts.try_into().ok()
}

/// A page's cursor as text.
fn cursor_text(key: &[String; 4]) -> String {
    key.iter()
        .map(|p| escape_part(p))
        .collect::<Vec<_>>()
        .join("|")
}

fn key_of(r: &DeviceRow) -> [&str; 4] {
    [&r.user, &r.domain, &r.address, &r.seen_by]
}

/// The IP address of `ip:port`, `[v6]:port` or a bare address, as text.
pub fn address_of(src: &str) -> String {
    src.parse::<std::net::SocketAddr>()
        .map(|a| a.ip().to_string())
        .or_else(|_| src.parse::<std::net::IpAddr>().map(|ip| ip.to_string()))
        .unwrap_or_else(|_| src.to_string())
}

/// When a successful chain's binding lapses: from its last 2xx (or its last message, for a
/// row stored without that time) plus the expiry granted.
fn expiry_us(r: &CdrRegistration) -> Option<i64> {
    let from = r.registered_us.unwrap_or(r.last_us);
    r.expires_s.map(|s| from + i64::from(s) * 1_000_000)
}

/// What the chains read ([`monitor_rows`]) covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Scan {
    pub chains: usize,
    /// When the scan stopped at [`CHAINS_SCANNED_MAX`]: the last message of the oldest chain
    /// read (older chains were not).
    pub scanned_to_us: Option<i64>,
}

/// Folds REGISTER chains, newest first, into one row per (user, domain, source address).
pub fn fold_chains(chains: &[CdrRegistration], now_us: i64) -> Vec<DeviceRow> {
    use std::collections::HashMap;
    let mut rows: Vec<DeviceRow> = Vec::new();
    let mut at: HashMap<(String, String, String), usize> = HashMap::new();
    for r in chains {
        let address = address_of(&r.src);
        let key = (r.user.clone(), r.domain.clone(), address.clone());
        let i = *at.entry(key).or_insert_with(|| {
            // The newest chain of this device: its contact, agent and state.
            let registered = matches!(r.result.as_str(), "registered" | "unregistered");
            let expires_us = if registered { expiry_us(r) } else { None };
            let state = if !r.failure.is_empty() {
                DeviceState::Failing
            } else if r.result == "registered" && expires_us.is_some_and(|e| e > now_us) {
                DeviceState::Registered
            } else {
                DeviceState::Expired
            };
            rows.push(DeviceRow {
                user: r.user.clone(),
                domain: r.domain.clone(),
                address,
                seen_by: "monitor".into(),
                state: state.as_str().into(),
                contact: r.contact.clone(),
                user_agent: r.user_agent.clone(),
                source: r.src.clone(),
                last_seen_us: r.last_us,
                registered_us: r.registered_us.or(registered.then_some(r.last_us)),
                expires_us,
                sensor: r.sensor.clone(),
                ..DeviceRow::default()
            });
            rows.len() - 1
        });
        let row = &mut rows[i];
        if row.registered_us.is_none() && matches!(r.result.as_str(), "registered") {
            // Failing now, registered before: when, and until when.
            row.registered_us = r.registered_us.or(Some(r.last_us));
            row.expires_us = expiry_us(r);
        }
        if !r.failure.is_empty() {
            row.failures += 1;
            if row.failure_us.is_none() {
                row.failure = r.failure.clone();
                row.failure_reason = r.failure_reason.clone();
                row.failure_us = Some(r.last_us);
            }
        }
    }
    rows
}

/// Fills `address_failures`: the failures of every row of the same source and address.
pub fn count_address_failures(rows: &mut [DeviceRow]) {
    use std::collections::HashMap;
    let mut per: HashMap<(String, String), u64> = HashMap::new();
    for r in rows.iter() {
        *per.entry((r.seen_by.clone(), r.address.clone()))
            .or_default() += r.failures;
    }
    for r in rows.iter_mut() {
        r.address_failures = per[&(r.seen_by.clone(), r.address.clone())];
    }
}

/// The monitor's devices: the newest chains since `q.since`, at most [`CHAINS_SCANNED_MAX`],
/// through the registration search, folded ([`fold_chains`]).
pub fn monitor_rows(
    store: &mut dyn CdrStore,
    q: &DeviceQuery,
    now_us: i64,
) -> Result<(Vec<DeviceRow>, Scan), CdrError> {
    let mut rq = RegistrationQuery {
        from_us: Some(q.since(now_us)),
        user: q.user.clone(),
        ip: None,
        limit: LIMIT_MAX,
        ..RegistrationQuery::default()
    };
    // The registration search's `ip` is the source or the destination; a device's address is
    // the source alone, checked on the rows below.
    let mut chains: Vec<CdrRegistration> = Vec::new();
    let mut scan = Scan::default();
    loop {
        let page = store.registrations(&rq)?;
        for row in page.registrations {
            scan.chains += 1;
            let r = row.registration;
            if let Some(net) = &q.ip {
                let (lo, hi) = net.range();
                if !query::ip_bytes(&r.src).is_some_and(|b| lo <= b && b <= hi) {
                    continue;
                }
            }
            chains.push(r);
        }
        let Some(next) = page.next else { break };
        if scan.chains >= CHAINS_SCANNED_MAX {
            scan.scanned_to_us = chains.last().map(|c| c.last_us);
            break;
        }
        rq.after = Some(
            query::Cursor::parse("after", &next).map_err(|e| CdrError::Data {
                problem: e.to_string(),
            })?,
        );
    }
    Ok((fold_chains(&chains, now_us), scan))
}

/// A page of devices.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DevicePage {
    pub devices: Vec<DeviceRow>,
    /// The `after` of the next page; `None` on the last.
    pub next: Option<String>,
    /// Rows that pass the filters, on every page.
    pub total: usize,
    /// Counts by state of those rows: registered, expired, failing.
    pub registered: usize,
    pub expired: usize,
    pub failing: usize,
    /// When the answer was made, and where the chains were read from, µs since the epoch.
    pub now_us: i64,
    pub since_us: i64,
    pub scan: Scan,
}

/// Sorts `rows`, applies `q`'s filters and cuts the page after `q.after`.
pub fn page(mut rows: Vec<DeviceRow>, q: &DeviceQuery, now_us: i64, scan: Scan) -> DevicePage {
    count_address_failures(&mut rows);
    rows.retain(|r| q.matches(r));
    rows.sort_by(|a, b| key_of(a).cmp(&key_of(b)));
    let count = |s: DeviceState| rows.iter().filter(|r| r.state == s.as_str()).count();
    let mut p = DevicePage {
        total: rows.len(),
        registered: count(DeviceState::Registered),
        expired: count(DeviceState::Expired),
        failing: count(DeviceState::Failing),
        now_us,
        since_us: q.since(now_us),
        scan,
        ..DevicePage::default()
    };
    let start = match &q.after {
        Some(a) => {
            let a: [&str; 4] = [&a[0], &a[1], &a[2], &a[3]];
            rows.partition_point(|r| key_of(r) <= a)
        }
        None => 0,
    };
    let limit = q.limit.clamp(1, LIMIT_MAX);
    let end = (start + limit).min(rows.len());
    if end < rows.len() && end > start {
        let k = key_of(&rows[end - 1]);
        p.next = Some(cursor_text(&k.map(str::to_string)));
    }
    p.devices = rows.drain(start.min(end)..end).collect();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000_000;
    const S: i64 = 1_000_000;

    fn chain(user: &str, src: &str, last_us: i64, result: &str, failure: &str) -> CdrRegistration {
        CdrRegistration {
            call_id: format!("{user}-{last_us}"),
            user: user.into(),
            domain: "pbx".into(),
            contact: format!("sip:{user}@{src}"),
            user_agent: "Desk 1".into(),
            src: src.into(),
            dst: "10.0.0.1:5060".into(),
            first_us: last_us - S,
            last_us,
            requests: 2,
            last_code: Some(200),
            result: result.into(),
            expires_s: (result == "registered").then_some(600),
            failure: failure.into(),
            failure_reason: if failure.is_empty() {
                String::new()
            } else {
                "403 Forbidden after a challenge".into()
            },
            registered_us: (result == "registered").then_some(last_us),
            ..CdrRegistration::default()
        }
    }

    #[test]
    fn chains_fold_into_a_row_per_user_and_address_with_their_failures() {
        // Newest first.
        let chains = [
            chain("1001", "10.0.0.5:5060", NOW - 10 * S, "registered", ""),
            chain(
                "1001",
                "10.0.0.5:5062",
                NOW - 100 * S,
                "failed",
                "wrong-password",
            ),
            chain(
                "1002",
                "10.0.0.5:5060",
                NOW - 200 * S,
                "failed",
                "wrong-password",
            ),
            chain("1002", "10.0.0.5:5060", NOW - 900 * S, "registered", ""),
            chain(
                "1003",
                "[2001:db8::7]:5060",
                NOW - 3600 * S,
                "registered",
                "",
            ),
        ];
        let mut rows = fold_chains(&chains, NOW);
        count_address_failures(&mut rows);
        let got: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.user.as_str(),
                    r.address.as_str(),
                    r.state.as_str(),
                    r.failure.as_str(),
                    r.failures,
                    r.address_failures,
                    r.expires_us,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "1001",
                    "10.0.0.5",
                    "registered",
                    "wrong-password",
                    1,
                    2,
                    Some(NOW + 590 * S)
                ),
                (
                    "1002",
                    "10.0.0.5",
                    "failing",
                    "wrong-password",
                    1,
                    2,
                    Some(NOW - 300 * S)
                ),
                (
                    "1003",
                    "2001:db8::7",
                    "expired",
                    "",
                    0,
                    0,
                    Some(NOW - 3000 * S)
                ),
            ]
        );
    }

    #[test]
    fn pages_follow_the_key_and_filters_apply() {
        let rows: Vec<DeviceRow> = (0..5)
            .map(|i| DeviceRow {
                user: format!("10{i}"),
                domain: "pbx".into(),
                address: format!("10.0.0.{i}"),
                seen_by: "monitor".into(),
                state: if i % 2 == 0 { "registered" } else { "failing" }.into(),
                ..DeviceRow::default()
            })
            .collect();
        let q = DeviceQuery {
            limit: 2,
            ..DeviceQuery::default()
        };
        let p1 = page(rows.clone(), &q, NOW, Scan::default());
        assert_eq!((p1.total, p1.registered, p1.failing), (5, 3, 2));
        let q2 = DeviceQuery::from_query(&format!(
            "limit=2&after={}",
            p1.next.clone().unwrap().replace('|', "%7C")
        ))
        .unwrap();
        let p2 = page(rows.clone(), &q2, NOW, Scan::default());
        let q3 = DeviceQuery::from_query(&format!("limit=2&after={}", p2.next.clone().unwrap()))
            .unwrap();
        let p3 = page(rows.clone(), &q3, NOW, Scan::default());
        let users: Vec<_> = [p1, p2, p3.clone()]
            .iter()
            .flat_map(|p| p.devices.iter().map(|d| d.user.clone()))
            .collect();
        assert_eq!(users, ["100", "101", "102", "103", "104"]);
        assert_eq!(p3.next, None);
        let q = DeviceQuery::from_query("state=failing&ip=10.0.0.0/30&user=10*").unwrap();
        assert_eq!(DeviceQuery::from_query(&q.to_query()).unwrap(), q);
        let p = page(rows, &q, NOW, Scan::default());
        let users: Vec<_> = p.devices.iter().map(|d| d.user.as_str()).collect();
        assert_eq!(users, ["101", "103"]);
    }

    #[test]
    fn bad_parameters_are_named() {
        assert_eq!(
            DeviceQuery::from_query("state=up").unwrap_err().param,
            "state"
        );
        assert_eq!(
            DeviceQuery::from_query("after=a|b").unwrap_err().param,
            "after"
        );
        assert_eq!(
            DeviceQuery::from_query("ip=10.0.0.300").unwrap_err().param,
            "ip"
        );
        let a = ["1|0%".to_string(), "d".into(), "a".into(), "monitor".into()];
        let q = DeviceQuery {
            after: Some(a),
            ..DeviceQuery::default()
        };
        assert_eq!(DeviceQuery::from_query(&q.to_query()).unwrap(), q);
    }
}
