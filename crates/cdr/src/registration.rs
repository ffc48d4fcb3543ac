//! Registrations: the REGISTER chains the monitor saw ([`CdrRegistration`], one per Call-ID
//! and first request), stored in table `registration`, and the console's search of them
//! ([`RegistrationQuery`], `GET /api/registrations`).
//!
//! ```text
//! GET /api/registrations?from=&to=&user=&ip=&result=&after=&limit=
//! ```
//!
//! `from` and `to` bound `last_us` (the chain's last message); `user` has the number syntax of
//! `caller` (`1001`, `10*`, `*01`, lists, `!`); `ip` is an address or CIDR matched against the
//! source or the destination; `result` is a comma list of `registered`, `unregistered`,
//! `challenged`, `failed`, `no-response`. Pages are newest first by (`last_us`, `id`) with the same keyset cursor and
//! the same plans as the calls ([`crate::search`]): the indexes are `registration_last
//! (last_us[, id])` and `registration_user (username, last_us[, id])`; an IP or a result is
//! checked on each row of a walk in time order.

use crate::CdrError;
use crate::plan::{self, Arg, Cols, Exec, Pred, Scope, Table, Ty};
use crate::query::{self, Cursor, IpNet, LIMIT_DEFAULT, NumberFilter, QueryError};
use crate::search::{ip_pred, number_pred, paginate};

/// A REGISTER chain: the requests of one Call-ID and their outcome.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CdrRegistration {
    pub call_id: String,
    /// The To user (the address of record).
    pub user: String,
    /// The To URI's host.
    pub domain: String,
    /// The first Contact URI of the last request.
    pub contact: String,
    pub user_agent: String,
    /// Signalling addresses, `ip:port`.
    pub src: String,
    pub dst: String,
    /// The first and the last message, µs since the epoch.
    pub first_us: i64,
    pub last_us: i64,
    pub requests: u32,
    /// The last response's code.
    pub last_code: Option<u16>,
    /// `registered`, `unregistered`, `challenged`, `failed` or `no-response`.
    pub result: String,
    /// The expiry the registrar granted (its 2xx), else the one requested.
    pub expires_s: Option<u32>,
    /// The sensor that saw it (`local` when stored without one).
    pub sensor: String,
    /// Challenges (401/407) the chain received.
    pub challenges: u32,
    /// Why the chain is failing: `wrong-password`, `challenged`, `rejected`, `server-error`,
    /// `timeout`, or empty when it ended well (the monitor's `RegFailure`, decided by what
    /// came after its last 2xx). A row stored before this column existed reads as its
    /// `result` says ([`failure_of_result`]).
    pub failure: String,
    /// The final response behind `failure` and how the credentials fared
    /// (`403 Wrong password after a challenge`, `401 Unauthorized: credentials refused 2
    /// times`), or `no final response to 3 requests`; empty when it ended well.
    pub failure_reason: String,
    /// When the last 2xx came, µs since the epoch: the binding's expiry runs from here.
    pub registered_us: Option<i64>,
}

/// The failures a chain can have (`CdrRegistration::failure`), most telling first.
pub const FAILURES: [&str; 5] = [
    "wrong-password",
    "challenged",
    "rejected",
    "server-error",
    "timeout",
];

/// The failure of a chain stored before failures were classified, read off its result and
/// last code: a wrong password cannot be told there (it reads as `rejected` or
/// `challenged`).
pub fn failure_of_result(result: &str, last_code: Option<u16>) -> &'static str {
    match (result, last_code) {
        ("challenged", _) => "challenged",
        ("no-response", _) => "timeout",
        ("failed", Some(500..=599)) => "server-error",
        ("failed", _) => "rejected",
        _ => "",
    }
}

/// The outcomes a registration search can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegResult {
    Registered,
    /// A 2xx to a request that removed the binding (expires 0, `Contact: *`).
    Unregistered,
    Challenged,
    Failed,
    NoResponse,
}

impl RegResult {
    pub fn as_str(&self) -> &'static str {
        match self {
            RegResult::Registered => "registered",
            RegResult::Unregistered => "unregistered",
            RegResult::Challenged => "challenged",
            RegResult::Failed => "failed",
            RegResult::NoResponse => "no-response",
        }
    }

    const ALL: [RegResult; 5] = [
        RegResult::Registered,
        RegResult::Unregistered,
        RegResult::Challenged,
        RegResult::Failed,
        RegResult::NoResponse,
    ];
}

/// The registrations page's filters; empty fields filter nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationQuery {
    /// Chains whose last message came at or after this time.
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    pub user: Option<NumberFilter>,
    /// The source or the destination lies in this network.
    pub ip: Option<IpNet>,
    /// Any of these outcomes.
    pub result: Vec<RegResult>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

impl Default for RegistrationQuery {
    fn default() -> RegistrationQuery {
        RegistrationQuery {
            from_us: None,
            to_us: None,
            user: None,
            ip: None,
            result: Vec::new(),
            after: None,
            limit: LIMIT_DEFAULT,
        }
    }
}

/// The parameters of `GET /api/registrations`, in the order `to_query` writes them.
pub const REGISTRATION_PARAMS: [&str; 7] = ["from", "to", "user", "ip", "result", "after", "limit"];

impl RegistrationQuery {
    /// Reads the query string of `GET /api/registrations`.
    pub fn from_query(raw: &str) -> Result<RegistrationQuery, QueryError> {
        let v = query::decode_pairs(raw, &REGISTRATION_PARAMS)?;
        let get = |i: usize| v[i].as_deref();
        let (from_us, to_us) = query::parse_range(get(0), get(1))?;
        let mut result = Vec::new();
        for item in get(4)
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
        {
            let r = RegResult::ALL
                .into_iter()
                .find(|r| r.as_str().eq_ignore_ascii_case(item))
                .ok_or_else(|| {
                    QueryError::new(
                        "result",
                        format!(
                            "{:?} is not one of registered, unregistered, challenged, failed, \
                             no-response",
                            item.chars().take(16).collect::<String>()
                        ),
                    )
                })?;
            if !result.contains(&r) {
                result.push(r);
            }
        }
        Ok(RegistrationQuery {
            from_us,
            to_us,
            user: get(2)
                .map(|x| NumberFilter::parse("user", x))
                .transpose()?
                .flatten(),
            ip: get(3).map(|x| IpNet::parse("ip", x)).transpose()?,
            result,
            after: get(5).map(|x| Cursor::parse("after", x)).transpose()?,
            limit: get(6)
                .map(|x| query::parse_limit("limit", x))
                .transpose()?
                .unwrap_or(LIMIT_DEFAULT),
        })
    }

    /// The query string that [`RegistrationQuery::from_query`] reads back as this query.
    pub fn to_query(&self) -> String {
        let mut s = String::new();
        let p = &mut s;
        if let Some(v) = self.from_us {
            query::push_pair(p, "from", &query::time_text(v));
        }
        if let Some(v) = self.to_us {
            query::push_pair(p, "to", &query::time_text(v));
        }
        if let Some(f) = &self.user {
            query::push_pair(p, "user", &f.to_text());
        }
        if let Some(v) = &self.ip {
            query::push_pair(p, "ip", &v.to_text());
        }
        if !self.result.is_empty() {
            let r: Vec<&str> = self.result.iter().map(RegResult::as_str).collect();
            query::push_pair(p, "result", &r.join(","));
        }
        if let Some(c) = self.after {
            query::push_pair(p, "after", &c.to_text());
        }
        if self.limit != LIMIT_DEFAULT {
            query::push_pair(p, "limit", &self.limit.to_string());
        }
        s
    }
}

/// A registration as the page shows it: its handle (`uid`, or `#<id>` when stored without one)
/// and its fields.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RegistrationRow {
    pub uid: String,
    #[serde(flatten)]
    pub registration: CdrRegistration,
}

/// A page of registrations, newest first.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RegistrationPage {
    pub registrations: Vec<RegistrationRow>,
    pub next: Option<String>,
    /// As [`crate::search::CallPage::scanned_to_us`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned_to_us: Option<i64>,
    /// As [`crate::search::CallPage::newest_us`]: the newest chain's last message, on a first
    /// page that found nothing.
    pub newest_us: Option<i64>,
}

pub(crate) const REG_TABLE: Table = Table {
    name: "registration",
    time: "last_us",
    time_index: "registration_last",
    // Partitioned by the first message (`first_us`, in its uid), not by the last.
    keyed_by_time: false,
    only: None,
};

/// The columns of a registration row after `uid`, in [`CdrRegistration`]'s order (`username`:
/// `user` is a reserved word in PostgreSQL).
pub(crate) const REG_COLUMNS: &str = "call_id, username, domain, contact, user_agent, src, dst, \
     first_us, last_us, requests, last_code, result, expires_s, sensor, challenges, failure, \
     failure_reason, registered_us";

/// The columns of `registration` added after its first release: why a chain fails. SQLite
/// files get them from format version 4, PostgreSQL from migration 8; `failure` is NULL in
/// the rows stored before ([`failure_of_result`] reads them).
pub const REG_LATER_COLUMNS: [(&str, &str, &str); 4] = [
    ("challenges", "INTEGER", "BIGINT"),
    ("failure", "TEXT", "TEXT"),
    ("failure_reason", "TEXT", "TEXT"),
    ("registered_us", "INTEGER", "BIGINT"),
];

/// The values of [`REG_COLUMNS`], then `src_ip`, `dst_ip`.
pub(crate) fn reg_args(r: &CdrRegistration) -> Vec<Arg> {
    let opt = |v: Option<i64>| v.map_or(Arg::Null(Ty::Int), Arg::Int);
    let ip = |a: &str| query::ip_bytes(a).map_or(Arg::Null(Ty::Blob), |b| Arg::Blob(b.to_vec()));
    vec![
        Arg::Text(r.call_id.clone()),
        Arg::Text(r.user.clone()),
        Arg::Text(r.domain.clone()),
        Arg::Text(r.contact.clone()),
        Arg::Text(r.user_agent.clone()),
        Arg::Text(r.src.clone()),
        Arg::Text(r.dst.clone()),
        Arg::Int(r.first_us),
        Arg::Int(r.last_us),
        Arg::Int(i64::from(r.requests)),
        opt(r.last_code.map(i64::from)),
        Arg::Text(r.result.clone()),
        opt(r.expires_s.map(i64::from)),
        Arg::Text(crate::search::sensor_or_default(&r.sensor).to_string()),
        Arg::Int(i64::from(r.challenges)),
        Arg::Text(r.failure.clone()),
        Arg::Text(r.failure_reason.clone()),
        opt(r.registered_us),
        ip(&r.src),
        ip(&r.dst),
    ]
}

fn reg_preds(q: &RegistrationQuery) -> Vec<Pred> {
    let mut p = Vec::new();
    if let Some(f) = &q.user {
        p.push(number_pred(f, "username", "registration_user", None));
    }
    if let Some(net) = &q.ip {
        p.push(ip_pred(net, [("src_ip", None), ("dst_ip", None)]));
    }
    if !q.result.is_empty() {
        p.push(Pred::TextIn(
            "result",
            q.result.iter().map(|r| r.as_str().to_string()).collect(),
        ));
    }
    p
}

/// A registration from the columns of [`REG_COLUMNS`].
pub(crate) fn registration_from(c: &mut Cols) -> Result<CdrRegistration, CdrError> {
    let mut r = CdrRegistration {
        call_id: c.text()?,
        user: c.text()?,
        domain: c.text()?,
        contact: c.text()?,
        user_agent: c.text()?,
        src: c.text()?,
        dst: c.text()?,
        first_us: c.i64()?,
        last_us: c.i64()?,
        requests: c.u32()?,
        last_code: c.opt_u16()?,
        result: c.text()?,
        expires_s: c.opt_u32()?,
        sensor: c.text()?,
        ..CdrRegistration::default()
    };
    r.challenges = c.opt_u32()?.unwrap_or(0);
    r.failure = match c.opt_text()? {
        Some(f) => f,
        None => failure_of_result(&r.result, r.last_code).to_string(),
    };
    r.failure_reason = c.opt_text()?.unwrap_or_default();
    r.registered_us = c.opt_i64()?;
    Ok(r)
}

/// [`CdrStore::registrations`](crate::CdrStore::registrations) on either backend.
pub(crate) fn registrations(
    x: &mut dyn Exec,
    q: &RegistrationQuery,
) -> Result<RegistrationPage, CdrError> {
    let limit = q.limit.clamp(1, query::LIMIT_MAX);
    let scope = Scope {
        from_us: q.from_us,
        to_us: q.to_us,
        after: q.after,
    };
    let preds = reg_preds(q);
    let walked = crate::search::page_keys(x, &REG_TABLE, &scope, &preds, limit + 1)?;
    let (keys, next, cut) = paginate(walked, limit);
    let mut registrations = Vec::new();
    if !keys.is_empty() {
        let mut s = plan::Sql::new(x.dialect());
        let ids: Vec<String> = keys.iter().map(|k| s.int(k.id)).collect();
        s.text = format!(
            "SELECT id, uid, {REG_COLUMNS} FROM registration WHERE id IN ({})",
            ids.join(", ")
        );
        let mut rows = Vec::new();
        for r in x.rows(&s)? {
            let mut c = Cols::new(r);
            let id = c.i64()?;
            let uid = c.opt_text()?.unwrap_or_else(|| format!("#{id}"));
            let reg = registration_from(&mut c)?;
            rows.push((
                (reg.last_us, id),
                RegistrationRow {
                    uid,
                    registration: reg,
                },
            ));
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
        registrations = rows.into_iter().map(|(_, r)| r).collect();
    }
    let empty = registrations.is_empty() && q.after.is_none();
    Ok(RegistrationPage {
        newest_us: crate::search::newest_if_empty(x, &REG_TABLE, empty)?,
        registrations,
        scanned_to_us: if cut { next.map(|c| c.time_us) } else { None },
        next: next.map(|c| c.to_text()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_query_round_trips() {
        let q = RegistrationQuery::from_query(
            "from=2026-11-25T00:00:00Z&user=10*,*99&ip=2001:db8::/32&result=registered,No-Response&limit=20",
        )
        .unwrap();
        assert_eq!(q.result, vec![RegResult::Registered, RegResult::NoResponse]);
        assert_eq!(RegistrationQuery::from_query(&q.to_query()).unwrap(), q);
        assert_eq!(
            RegistrationQuery::from_query("").unwrap(),
            RegistrationQuery::default()
        );
    }

    #[test]
    fn registration_errors_name_the_parameter() {
        let e = RegistrationQuery::from_query("result=ok").unwrap_err();
        assert_eq!(e.param, "result");
        let e = RegistrationQuery::from_query("caller=1").unwrap_err();
        assert!(
            e.to_string().contains("unknown parameter \"caller\""),
            "{e}"
        );
        let e = RegistrationQuery::from_query("user=1 2").unwrap_err();
        assert_eq!(e.param, "user");
    }
}
