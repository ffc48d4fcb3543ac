//! The console's call search: [`CallQuery`] (the query string of `GET /api/calls`), and
//! [`CdrStore::search`](crate::CdrStore::search), [`CdrStore::totals`](crate::CdrStore::totals)
//! and [`CdrStore::call_by_uid`](crate::CdrStore::call_by_uid) on both backends.
//!
//! ```text
//! GET /api/calls?from=&to=&caller=&called=&call_id=&ip=&response=&min_duration_s=&mos_below=
//!     &loss_above_pct=&jitter_above_ms=&codec=&hangup_by=&sensor=&after=&limit=
//! ```
//!
//! # Search columns
//!
//! The store computes these from the record when it writes a call ([`derive`]), and adds them
//! to older databases when it opens them, filled from the rows already there:
//!
//! | column | what | why |
//! |---|---|---|
//! | `sensor` | the sensor that saw the call (`local` by default) | `sensor=` |
//! | `caller_rev`, `called_rev` | the numbers reversed | `*89` is the prefix `98` of an index |
//! | `caller_ip`, `callee_ip` | the IP of the signalling address, 16 bytes, IPv4 v4-mapped | a CIDR is a byte range |
//! | `duration_ms` | end − start, NULL while not ended | `min_duration_s=` |
//! | `codecs` | the streams' payload names, distinct, comma-joined | `codec=` |
//! | `loss_max_pct` | the worst stream's loss, 100·lost/(received+lost) | `loss_above_pct=` |
//! | `jitter_max_ms` | the largest jitter of a stream | `jitter_above_ms=` |
//!
//! # Indexes
//!
//! Each costs every insert a B-tree update, so there is one per filter that can pick a few rows
//! out of millions, and none for filters that match many calls (a response class, a codec, a
//! MOS threshold, a sensor): those are checked on each row of a walk in time order, where they
//! fill a page soon. PostgreSQL's text indexes are `COLLATE "C"` so that a prefix is a byte
//! range whatever the database's collation, and end with `id` so that rows of equal times come
//! out in keyset order (SQLite's rowid ends every index already).
//!
//! | filter | index | why |
//! |---|---|---|
//! | newest first, `from`/`to`, `after` | `cdr_start (start_us[, id])` | keyset paging walks it backwards from the cursor; every walk uses it |
//! | `caller=1001`, `12*` | `cdr_caller_start (caller, start_us[, id])` | an exact number's calls come out in time order; a prefix is a range |
//! | `called=` | `cdr_called_start (called, start_us[, id])` | the same for the called number |
//! | `caller=*89` | `cdr_caller_rev_start (caller_rev, start_us[, id])` | a suffix is a prefix of the reversed number |
//! | `called=*89` | `cdr_called_rev_start (called_rev, start_us[, id])` | the same |
//! | `ip=` | `cdr_caller_ip_start (caller_ip, start_us[, id])`, `cdr_callee_ip_start` | a CIDR is `BETWEEN lo AND hi` on each; the union of both |
//! | `call_id=` | `cdr_call_id (call_id)` | a Call-ID has one call, or a few |
//! | a call page | `cdr_uid (uid)` (unique) | `call_by_uid`; also the upsert's conflict target |
//!
//! # Plans
//!
//! A plain `ORDER BY start_us DESC LIMIT 50` with a filter on another index goes wrong one way
//! or the other: a dense prefix wants the time index walked backwards, a sparse one wants its
//! own index and a sort. So the search chooses, explicitly (`plan.rs`, `choose`):
//!
//! 1. Each indexed filter counts its index entries, stopping at [`INDEX_MATCHES_MAX`] (a
//!    covering range count, within the time range for a single number whose index orders its
//!    calls by time).
//! 2. The one with the fewest, if under the cap, is read whole through its index (SQLite
//!    `INDEXED BY`; PostgreSQL a `MATERIALIZED` CTE) and sorted by time, from the index
//!    entries alone; when other conditions need the rows, the rows are then read in that order
//!    in growing batches ([`CHECK_BATCH_MIN`] to [`CHECK_BATCH_MAX`]) until the page is full.
//! 3. Otherwise the filters match often: the search walks newest first — along a single
//!    number's own index when one is asked for, else along `cdr_start` — checking the other
//!    conditions on each row, and stops at `limit + 1` matches or after [`SCAN_ROWS_MAX`] rows.
//!    A page cut short by that budget has fewer calls, `scanned_to_us` (how far back it
//!    looked) and a `next` that continues below the last row read, so every page costs a
//!    bounded amount whatever the filter. SQLite steps the rows itself
//!    (`INDEXED BY cdr_start`); PostgreSQL gets one statement that stops on its own (a
//!    `LIMIT` over the backward index scan, `row_number()` marking the budget's last row).
//!
//! Measured on 10 million seeded calls with their streams (30 days, [`crate::seed`]), warm
//! cache, two cores: every search in `plan_check.rs`'s list (last hour, exact and rare numbers,
//! dense and sparse prefixes, suffixes, lists, negation, MOS, CIDRs v4/v6, response codes and
//! classes, codecs, a Call-ID, a filter that matches nothing) takes at most 20 ms in SQLite
//! and 27 ms in PostgreSQL; totals 50 to 100 ms.
//!
//! [`CdrStore::totals`](crate::CdrStore::totals) uses the same choice; its walk reads at most
//! [`TOTALS_ROWS_MAX`] rows, the newest of the range ([`TOTALS_NUMBER_ROWS_MAX`] along a
//! number's index, whose rows lie scattered), and says so in `note`. PostgreSQL groups by
//! bucket with a hash; SQLite, which would sort every row for a GROUP BY, is asked bucket by
//! bucket, newest first, within what is left of the budget.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::plan::{self, Arg, Bound, Branch, Cols, Exec, Kind, Plan, Pred, Scope, Table};
use crate::query::{self, Cursor, IpNet, LIMIT_DEFAULT, NumberFilter, NumberPattern, QueryError};
use crate::{CdrCall, CdrError, CdrStream, CdrT38};

/// A filter whose index holds fewer entries than this is served from that index (read whole,
/// sorted by time); with more, the search walks the time index (or a single number's index)
/// newest first instead, where such a filter matches often enough to fill a page soon.
/// Counting stops here, so a count costs at most this many index entries.
pub const INDEX_MATCHES_MAX: i64 = 20_000;
/// Rows a walk reads at most for one page. A filter that matches one call in a thousand
/// still fills a page of 50 within it; a rarer one returns a short page whose `next` goes on
/// from where the walk stopped.
pub const SCAN_ROWS_MAX: usize = 50_000;
/// Rows of an index plan checked against the other conditions in the first batch, and at most
/// in one batch (each batch four times the last).
pub const CHECK_BATCH_MIN: usize = 200;
pub const CHECK_BATCH_MAX: usize = 5_000;
/// Rows the totals read at most when no index narrows the filter: the newest of the range.
pub const TOTALS_ROWS_MAX: usize = 100_000;
/// Rows the totals read at most along a single number's index: its rows are scattered over
/// the table (one read each, not a page of neighbours), so fewer fit the same time.
pub const TOTALS_NUMBER_ROWS_MAX: usize = 50_000;
/// Buckets the totals aim for over their range.
pub const TOTALS_BUCKETS: i64 = 60;
/// The range of the totals when the query gives none: the last 24 hours.
pub const TOTALS_DEFAULT_RANGE_S: i64 = 86_400;
/// Distinct payload names kept in the `codecs` column, and its length.
pub const CODECS_MAX: usize = 16;
pub const CODECS_BYTES_MAX: usize = 256;

/// Codec names that mean the same: the RTP names (`PCMA`) and the monitor's (`g711A`).
const CODEC_ALIASES: &[&[&str]] = &[
    &["pcma", "g711a"],
    &["pcmu", "g711u"],
    &["g722"],
    &["g729", "g729a"],
    &["g723", "g7231"],
];

/// Who hung up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HangupBy {
    Caller,
    Callee,
}

impl HangupBy {
    pub fn as_str(&self) -> &'static str {
        match self {
            HangupBy::Caller => "caller",
            HangupBy::Callee => "callee",
        }
    }
}

/// A last-response filter: one code, or a class (`4xx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMatch {
    Code(u16),
    /// 1 to 6: `1xx` to `6xx`.
    Class(u8),
}

/// The calls page's filters. Every field left empty filters nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct CallQuery {
    /// Calls that started at or after this time (µs since the epoch).
    pub from_us: Option<i64>,
    /// Calls that started before this time.
    pub to_us: Option<i64>,
    pub caller: Option<NumberFilter>,
    pub called: Option<NumberFilter>,
    pub call_id: Option<String>,
    /// The caller's or the callee's signalling address lies in this network.
    pub ip: Option<IpNet>,
    /// Any of these final responses.
    pub response: Vec<ResponseMatch>,
    pub min_duration_s: Option<f64>,
    /// The worst stream scored below this MOS.
    pub mos_below: Option<f64>,
    /// The worst stream lost more than this percentage.
    pub loss_above_pct: Option<f64>,
    pub jitter_above_ms: Option<f64>,
    /// A payload name among the call's (`PCMA`, `g711A`, `opus`...), any case.
    pub codec: Option<String>,
    pub hangup_by: Option<HangupBy>,
    pub sensor: Option<String>,
    /// Continue after this row (the `next` of the previous page).
    pub after: Option<Cursor>,
    /// Calls per page, 1 to [`query::LIMIT_MAX`].
    pub limit: usize,
    /// Fax calls only (`fax=1`), or none of them (`fax=0`): a call with a fax result or a
    /// T.38 flow ([`fax_sql`]).
    pub fax: Option<bool>,
    /// The calls of a configured group (`group=NAME`, [`GroupFilter`]).
    pub group: Option<GroupFilter>,
}

/// A `[[groups]]` entry as a search filter: a call whose caller's or callee's address lies in
/// one of `networks`, or whose caller or called number starts with one of `prefixes` — the
/// IP ranges and number prefixes the search indexes, so the group is read through those
/// indexes (each branch counted) like any other filter.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFilter {
    pub name: String,
    pub networks: Vec<IpNet>,
    pub prefixes: Vec<String>,
}

/// Most networks and prefixes (together) a group may have to be searched by: each is an
/// index branch of the search, counted and read apart.
pub const GROUP_SEARCH_ITEMS_MAX: usize = 256;

/// The groups `group=NAME` names (tandem.toml's `[[groups]]`), for this process: set once by
/// the binary at start ([`set_search_groups`]); none until then.
static SEARCH_GROUPS: std::sync::RwLock<Option<std::sync::Arc<groups::Groups>>> =
    std::sync::RwLock::new(None);

/// The groups the calls search and the alert rules' scopes know by name (`group=NAME`).
pub fn set_search_groups(groups: std::sync::Arc<groups::Groups>) {
    *SEARCH_GROUPS.write().unwrap_or_else(|e| e.into_inner()) = Some(groups);
}

impl GroupFilter {
    /// The filter of group `name` among the configured groups; `all` is no filter.
    pub fn parse(param: &str, name: &str) -> Result<Option<GroupFilter>, QueryError> {
        if name == groups::ALL {
            return Ok(None);
        }
        let known = SEARCH_GROUPS
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        let Some(g) = known.get(name) else {
            let names: Vec<&str> = known.groups().iter().map(|g| g.name.as_str()).collect();
            let shown: String = name.chars().take(64).collect();
            return Err(QueryError::new(
                param,
                if names.is_empty() {
                    format!(
                        "no group {shown:?}: no [[groups]] are configured (\"all\" is every call)"
                    )
                } else {
                    format!(
                        "no group {shown:?}; the groups are all, {}",
                        names.join(", ")
                    )
                },
            ));
        };
        let items = g.addresses.len() + g.numbers.len();
        if items > GROUP_SEARCH_ITEMS_MAX {
            return Err(QueryError::new(
                param,
                format!(
                    "group {name:?} has {items} addresses and numbers; a search takes groups of \
                     at most {GROUP_SEARCH_ITEMS_MAX} (reports take any)"
                ),
            ));
        }
        Ok(Some(GroupFilter {
            name: g.name.clone(),
            networks: g
                .addresses
                .iter()
                .map(|n| IpNet {
                    addr: n.addr,
                    prefix: n.prefix,
                })
                .collect(),
            prefixes: g.numbers.clone(),
        }))
    }

    /// The filter as a number filter of its prefixes (none without prefixes).
    pub(crate) fn number_filter(&self) -> Option<NumberFilter> {
        (!self.prefixes.is_empty()).then(|| NumberFilter {
            negate: false,
            items: self
                .prefixes
                .iter()
                .map(|p| NumberPattern::Prefix(p.clone()))
                .collect(),
        })
    }
}

impl Default for CallQuery {
    fn default() -> CallQuery {
        CallQuery {
            from_us: None,
            to_us: None,
            caller: None,
            called: None,
            call_id: None,
            ip: None,
            response: Vec::new(),
            min_duration_s: None,
            mos_below: None,
            loss_above_pct: None,
            jitter_above_ms: None,
            codec: None,
            hangup_by: None,
            sensor: None,
            after: None,
            limit: LIMIT_DEFAULT,
            fax: None,
            group: None,
        }
    }
}

/// The parameters of `GET /api/calls`, in the order [`CallQuery::to_query`] writes them.
pub const CALL_PARAMS: [&str; 18] = [
    "from",
    "to",
    "caller",
    "called",
    "call_id",
    "ip",
    "response",
    "min_duration_s",
    "mos_below",
    "loss_above_pct",
    "jitter_above_ms",
    "codec",
    "hangup_by",
    "sensor",
    "after",
    "limit",
    "fax",
    "group",
];

/// At most this many items in `response`.
pub const RESPONSE_ITEMS_MAX: usize = 32;

fn parse_response(value: &str) -> Result<Vec<ResponseMatch>, QueryError> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if out.len() == RESPONSE_ITEMS_MAX {
            return Err(QueryError::new(
                "response",
                format!("more than {RESPONSE_ITEMS_MAX} items"),
            ));
        }
        let bad = || {
            QueryError::new(
                "response",
                format!(
                    "{:?} is neither a SIP response code (100 to 699) nor a class such as 4xx",
                    item.chars().take(16).collect::<String>()
                ),
            )
        };
        let b = item.as_bytes();
        let m = if b.len() == 3 && b[1..].eq_ignore_ascii_case(b"xx") {
            match b[0] {
                c @ b'1'..=b'6' => ResponseMatch::Class(c - b'0'),
                _ => return Err(bad()),
            }
        } else {
            match item.parse::<u16>() {
                Ok(c) if (100..=699).contains(&c) && b.len() == 3 => ResponseMatch::Code(c),
                _ => return Err(bad()),
            }
        };
        out.push(m);
    }
    Ok(out)
}

/// A codec name: letters, digits and `.-_+`, as payload names are written.
fn parse_codec(value: &str) -> Result<String, QueryError> {
    if value.len() > query::NUMBER_ITEM_BYTES_MAX {
        return Err(QueryError::new(
            "codec",
            format!("at most {} bytes", query::NUMBER_ITEM_BYTES_MAX),
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|&c| !c.is_ascii_alphanumeric() && !"._+-".contains(c))
    {
        return Err(QueryError::new(
            "codec",
            format!(
                "the character {c:?} is not in a codec name; write one name such as PCMA or opus"
            ),
        ));
    }
    Ok(value.to_string())
}

impl CallQuery {
    /// Reads the query string of `GET /api/calls` (percent-encoded, `+` as a space, a leading
    /// `?` allowed). Unknown parameters are refused, naming them.
    pub fn from_query(raw: &str) -> Result<CallQuery, QueryError> {
        let v = query::decode_pairs(raw, &CALL_PARAMS)?;
        let get = |i: usize| v[i].as_deref();
        let (from_us, to_us) = query::parse_range(get(0), get(1))?;
        let num = |i: usize, p: &str| -> Result<Option<f64>, QueryError> {
            get(i)
                .map(|x| query::parse_number(p, x, Some(0.0)))
                .transpose()
        };
        Ok(CallQuery {
            from_us,
            to_us,
            caller: get(2)
                .map(|x| NumberFilter::parse("caller", x))
                .transpose()?
                .flatten(),
            called: get(3)
                .map(|x| NumberFilter::parse("called", x))
                .transpose()?
                .flatten(),
            call_id: get(4)
                .map(|x| query::parse_text("call_id", x))
                .transpose()?,
            ip: get(5).map(|x| IpNet::parse("ip", x)).transpose()?,
            response: get(6).map(parse_response).transpose()?.unwrap_or_default(),
            min_duration_s: num(7, "min_duration_s")?,
            mos_below: get(8)
                .map(|x| query::parse_number("mos_below", x, None))
                .transpose()?,
            loss_above_pct: num(9, "loss_above_pct")?,
            jitter_above_ms: num(10, "jitter_above_ms")?,
            codec: get(11).map(parse_codec).transpose()?,
            hangup_by: get(12)
                .map(|x| match x.to_ascii_lowercase().as_str() {
                    "caller" => Ok(HangupBy::Caller),
                    "callee" => Ok(HangupBy::Callee),
                    _ => Err(QueryError::new("hangup_by", "must be caller or callee")),
                })
                .transpose()?,
            sensor: get(13)
                .map(|x| query::parse_text("sensor", x))
                .transpose()?,
            after: get(14).map(|x| Cursor::parse("after", x)).transpose()?,
            limit: get(15)
                .map(|x| query::parse_limit("limit", x))
                .transpose()?
                .unwrap_or(LIMIT_DEFAULT),
            fax: get(16).map(|x| query::parse_flag("fax", x)).transpose()?,
            group: get(17)
                .map(|x| GroupFilter::parse("group", x))
                .transpose()?
                .flatten(),
        })
    }

    /// The query string that [`CallQuery::from_query`] reads back as this query.
    pub fn to_query(&self) -> String {
        let mut s = String::new();
        let p = &mut s;
        if let Some(v) = self.from_us {
            query::push_pair(p, "from", &query::time_text(v));
        }
        if let Some(v) = self.to_us {
            query::push_pair(p, "to", &query::time_text(v));
        }
        if let Some(f) = &self.caller {
            query::push_pair(p, "caller", &f.to_text());
        }
        if let Some(f) = &self.called {
            query::push_pair(p, "called", &f.to_text());
        }
        if let Some(v) = &self.call_id {
            query::push_pair(p, "call_id", v);
        }
        if let Some(v) = &self.ip {
            query::push_pair(p, "ip", &v.to_text());
        }
        if !self.response.is_empty() {
            let items: Vec<String> = self
                .response
                .iter()
                .map(|r| match r {
                    ResponseMatch::Code(c) => c.to_string(),
                    ResponseMatch::Class(c) => format!("{c}xx"),
                })
                .collect();
            query::push_pair(p, "response", &items.join(","));
        }
        let nums = [
            ("min_duration_s", self.min_duration_s),
            ("mos_below", self.mos_below),
            ("loss_above_pct", self.loss_above_pct),
            ("jitter_above_ms", self.jitter_above_ms),
        ];
        for (name, v) in nums {
            if let Some(v) = v {
                query::push_pair(p, name, &v.to_string());
            }
        }
        if let Some(v) = &self.codec {
            query::push_pair(p, "codec", v);
        }
        if let Some(v) = self.hangup_by {
            query::push_pair(p, "hangup_by", v.as_str());
        }
        if let Some(v) = &self.sensor {
            query::push_pair(p, "sensor", v);
        }
        if let Some(c) = self.after {
            query::push_pair(p, "after", &c.to_text());
        }
        if self.limit != LIMIT_DEFAULT {
            query::push_pair(p, "limit", &self.limit.to_string());
        }
        if let Some(v) = self.fax {
            query::push_pair(p, "fax", if v { "1" } else { "0" });
        }
        if let Some(g) = &self.group {
            query::push_pair(p, "group", &g.name);
        }
        s
    }
}

/// One call of a result page: its row, its handle and the figures the list shows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CallSummary {
    #[serde(flatten)]
    pub call: CdrCall,
    /// The row's `uid`, or `#<id>` for a row stored without one: every row is addressable
    /// ([`CdrStore::call_by_uid`](crate::CdrStore::call_by_uid)).
    pub uid: String,
    pub id: i64,
    pub duration_s: Option<f64>,
    /// The call's payload names, comma-joined (`g711A,telephone-event`).
    pub codec: String,
    pub loss_pct_max: Option<f64>,
    pub jitter_max_ms: Option<f64>,
    /// A fax call: it has a fax result or a T.38 flow.
    pub fax: bool,
}

/// A page of calls, newest first.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CallPage {
    pub calls: Vec<CallSummary>,
    /// The `after` of the next page; `None` when there is none.
    pub next: Option<String>,
    /// Set when the search stopped on its row budget ([`SCAN_ROWS_MAX`]) before the page was
    /// full: it looked at calls down to this start time, and `next` goes on from there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned_to_us: Option<i64>,
    /// On a first page that found nothing: the start of the newest call the database holds,
    /// whatever the filter (so that a page can offer the range that has calls), `None` when
    /// it holds none. Always `None` on a page with calls.
    pub newest_us: Option<i64>,
}

/// The calls a filter matches over a time range, in total and per bucket.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CallTotals {
    pub from_us: i64,
    pub to_us: i64,
    pub calls: u64,
    pub answered: u64,
    /// Over the calls with a MOS.
    pub mos_avg: Option<f64>,
    pub mos_min: Option<f64>,
    /// Width of a bucket: a round number of seconds (1 min, 5 min, 1 h, 1 d...).
    pub bucket_s: i64,
    /// Every bucket over [from, to), empty ones included.
    pub buckets: Vec<TotalsBucket>,
    /// Set when not every call of the range was counted, saying which were.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TotalsBucket {
    pub start_us: i64,
    pub calls: u64,
    pub answered: u64,
    pub mos_avg: Option<f64>,
    pub mos_min: Option<f64>,
}

/// The search columns of a call, computed from the record itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Derived {
    pub sensor: String,
    pub caller_rev: String,
    pub called_rev: String,
    pub caller_ip: Option<Vec<u8>>,
    pub callee_ip: Option<Vec<u8>>,
    pub duration_ms: Option<i64>,
    pub codecs: Option<String>,
    pub loss_max_pct: Option<f64>,
    pub jitter_max_ms: Option<f64>,
}

/// The columns of [`Derived`] after `sensor`, in its order, as stored.
pub(crate) const DERIVED_COLUMNS: &str = "caller_rev, called_rev, caller_ip, callee_ip, duration_ms, codecs, loss_max_pct, jitter_max_ms";

/// Text reversed by characters: `*89` becomes the prefix `98` of `caller_rev`.
pub(crate) fn reversed(s: &str) -> String {
    s.chars().rev().collect()
}

/// The sensor stored for a call: its own, else the default.
pub(crate) fn sensor_or_default(s: &str) -> &str {
    if s.is_empty() {
        crate::writer::DEFAULT_SENSOR
    } else {
        s
    }
}

/// The stream figures the search columns need (a stored stream row has more).
pub(crate) struct StreamFigures<'a> {
    pub payload: &'a str,
    pub packets: u64,
    pub lost: i64,
    pub max_jitter_ms: f64,
}

impl<'a> From<&'a CdrStream> for StreamFigures<'a> {
    fn from(s: &'a CdrStream) -> StreamFigures<'a> {
        StreamFigures {
            payload: &s.payload,
            packets: s.packets,
            lost: s.lost,
            max_jitter_ms: s.max_jitter_ms,
        }
    }
}

/// The search columns of a call with its streams.
pub(crate) fn derive<'a>(
    c: &CdrCall,
    streams: impl IntoIterator<Item = StreamFigures<'a>>,
) -> Derived {
    let mut codecs: Vec<&str> = Vec::new();
    let mut bytes = 0;
    let mut loss: Option<f64> = None;
    let mut jitter: Option<f64> = None;
    for s in streams {
        for name in s
            .payload
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            if codecs.len() < CODECS_MAX
                && bytes + name.len() < CODECS_BYTES_MAX
                && !codecs.contains(&name)
            {
                bytes += name.len() + 1;
                codecs.push(name);
            }
        }
        let lost = s.lost.max(0) as f64;
        let expected = s.packets as f64 + lost;
        let pct = if expected > 0.0 {
            100.0 * lost / expected
        } else {
            0.0
        };
        loss = Some(loss.map_or(pct, |l| l.max(pct)));
        jitter = Some(jitter.map_or(s.max_jitter_ms, |j| j.max(s.max_jitter_ms)));
    }
    Derived {
        sensor: sensor_or_default(&c.sensor).to_string(),
        caller_rev: reversed(&c.caller),
        called_rev: reversed(&c.called),
        caller_ip: query::ip_bytes(&c.caller_addr).map(|b| b.to_vec()),
        callee_ip: query::ip_bytes(&c.callee_addr).map(|b| b.to_vec()),
        duration_ms: c.end_us.map(|e| (e - c.start_us) / 1000),
        codecs: (!codecs.is_empty()).then(|| codecs.join(",")),
        loss_max_pct: loss,
        jitter_max_ms: jitter,
    }
}

pub(crate) const CDR_TABLE: Table = Table {
    name: "cdr",
    time: "start_us",
    time_index: "cdr_start",
    keyed_by_time: true,
    only: None,
};

/// The predicates of a number filter on `column` (with its index), its suffixes on the
/// reversed column when there is one.
pub(crate) fn number_pred(
    f: &NumberFilter,
    column: &'static str,
    index: &'static str,
    rev: Option<(&'static str, &'static str)>,
) -> Pred {
    let branch = |column, index, bound| {
        Pred::Branch(Branch {
            column,
            kind: Kind::Text,
            bound,
            index: Some(index),
            ordered: true,
        })
    };
    let items: Vec<Pred> = f
        .items
        .iter()
        .map(|p| match p {
            NumberPattern::Exact(v) => branch(column, index, Bound::Eq(Arg::Text(v.clone()))),
            NumberPattern::Prefix(v) => branch(
                column,
                index,
                Bound::Range(Arg::Text(v.clone()), Arg::Text(plan::prefix_end(v))),
            ),
            NumberPattern::Suffix(v) => match rev {
                Some((rc, ri)) => {
                    let r = reversed(v);
                    let end = plan::prefix_end(&r);
                    branch(rc, ri, Bound::Range(Arg::Text(r), Arg::Text(end)))
                }
                None => Pred::EndsWith(column, v.clone()),
            },
            NumberPattern::Contains(v) => Pred::Contains(column, v.clone()),
        })
        .collect();
    let any = Pred::any(items);
    if f.negate {
        Pred::Not(Box::new(any))
    } else {
        any
    }
}

/// The IP predicate: the network on either address column (each with its index when given).
pub(crate) fn ip_pred(net: &IpNet, columns: [(&'static str, Option<&'static str>); 2]) -> Pred {
    let (lo, hi) = net.range();
    Pred::Or(
        columns
            .iter()
            .map(|&(column, index)| {
                Pred::Branch(Branch {
                    column,
                    kind: Kind::Blob,
                    bound: if net.is_host() {
                        Bound::Eq(Arg::Blob(lo.to_vec()))
                    } else {
                        Bound::Between(Arg::Blob(lo.to_vec()), Arg::Blob(hi.to_vec()))
                    },
                    index,
                    ordered: true,
                })
            })
            .collect(),
    )
}

/// The names a codec filter matches: the name and its aliases, lower case.
pub(crate) fn codec_names(codec: &str) -> Vec<String> {
    let lower = codec.to_ascii_lowercase();
    CODEC_ALIASES
        .iter()
        .find(|g| g.contains(&lower.as_str()))
        .map(|g| g.iter().map(|n| n.to_string()).collect())
        .unwrap_or_else(|| vec![lower])
}

/// [`plan::newest`] for a first page that found nothing (`empty`), else `None`.
pub(crate) fn newest_if_empty(
    x: &mut dyn Exec,
    t: &Table,
    empty: bool,
) -> Result<Option<i64>, CdrError> {
    if empty { plan::newest(x, t) } else { Ok(None) }
}

/// The query's filter as predicates (time and cursor aside: [`Scope`]); `partitioned`: the
/// tables are PostgreSQL's day partitions.
fn call_preds(q: &CallQuery, partitioned: bool) -> Vec<Pred> {
    let mut p = Vec::new();
    if let Some(id) = &q.call_id {
        p.push(Pred::Branch(Branch {
            column: "call_id",
            kind: Kind::PlainText,
            bound: Bound::Eq(Arg::Text(id.clone())),
            index: Some("cdr_call_id"),
            ordered: false,
        }));
    }
    if let Some(f) = &q.caller {
        p.push(number_pred(
            f,
            "caller",
            "cdr_caller_start",
            Some(("caller_rev", "cdr_caller_rev_start")),
        ));
    }
    if let Some(f) = &q.called {
        p.push(number_pred(
            f,
            "called",
            "cdr_called_start",
            Some(("called_rev", "cdr_called_rev_start")),
        ));
    }
    let ip_columns = [
        ("caller_ip", Some("cdr_caller_ip_start")),
        ("callee_ip", Some("cdr_callee_ip_start")),
    ];
    if let Some(net) = &q.ip {
        p.push(ip_pred(net, ip_columns));
    }
    if let Some(g) = &q.group {
        let mut any: Vec<Pred> = g.networks.iter().map(|n| ip_pred(n, ip_columns)).collect();
        if let Some(f) = g.number_filter() {
            any.push(number_pred(&f, "caller", "cdr_caller_start", None));
            any.push(number_pred(&f, "called", "cdr_called_start", None));
        }
        p.push(Pred::any(any));
    }
    if !q.response.is_empty() {
        let codes: Vec<i64> = q
            .response
            .iter()
            .filter_map(|r| match r {
                ResponseMatch::Code(c) => Some(i64::from(*c)),
                ResponseMatch::Class(_) => None,
            })
            .collect();
        let mut any = Vec::new();
        if !codes.is_empty() {
            any.push(Pred::IntIn("last_response", codes));
        }
        for r in &q.response {
            if let ResponseMatch::Class(c) = r {
                let lo = i64::from(*c) * 100;
                any.push(Pred::IntBetween("last_response", lo, lo + 99));
            }
        }
        p.push(Pred::any(any));
    }
    if let Some(v) = q.min_duration_s {
        p.push(Pred::Cmp(
            "duration_ms",
            ">=",
            Arg::Int((v * 1000.0).ceil().min(i64::MAX as f64) as i64),
        ));
    }
    if let Some(v) = q.mos_below {
        p.push(Pred::Cmp("mos_min", "<", Arg::Real(v)));
    }
    if let Some(v) = q.loss_above_pct {
        p.push(Pred::Cmp("loss_max_pct", ">", Arg::Real(v)));
    }
    if let Some(v) = q.jitter_above_ms {
        p.push(Pred::Cmp("jitter_max_ms", ">", Arg::Real(v)));
    }
    if let Some(c) = &q.codec {
        p.push(Pred::ListHasAny("codecs", codec_names(c)));
    }
    if let Some(h) = q.hangup_by {
        p.push(Pred::Cmp("hangup_by", "=", Arg::Text(h.as_str().into())));
    }
    if let Some(s) = &q.sensor {
        p.push(Pred::Cmp("sensor", "=", Arg::Text(s.clone())));
    }
    if let Some(fax) = q.fax {
        let is_fax = Pred::Sql(fax_sql(partitioned));
        p.push(if fax {
            is_fax
        } else {
            Pred::Not(Box::new(is_fax))
        });
    }
    p
}

/// The keys of a page: at most `want` (limit + 1) matches newest first, and where a walk
/// stopped when its budget ran out.
pub(crate) fn page_keys(
    x: &mut dyn Exec,
    t: &Table,
    scope: &Scope,
    preds: &[Pred],
    want: usize,
) -> Result<plan::Walked, CdrError> {
    match plan::choose(x, t, scope, preds)? {
        // The driving index answers alone: its entries hold the time and id.
        Plan::Index(driver) if preds.len() == 1 => Ok(plan::Walked {
            keys: plan::index_keys(x, t, scope, preds, driver, want)?,
            boundary: None,
        }),
        // Other conditions need the rows: the driving index's keys first (fewer than
        // INDEX_MATCHES_MAX, sorted newest first without reading a row), then the rows in that
        // order, a batch at a time, until the page is full. A page then reads about as many
        // rows as it takes to find `want` matches, not every row the index matched.
        Plan::Index(driver) => {
            let only = std::slice::from_ref(&preds[driver]);
            let keys = plan::index_keys(x, t, scope, only, 0, plan::INDEX_MATCHES_MAX as usize)?;
            let others: Vec<Pred> = preds
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != driver)
                .map(|(_, p)| p.clone())
                .collect();
            let mut out = plan::Walked::default();
            let mut at = 0;
            let mut batch = (2 * want).max(CHECK_BATCH_MIN);
            while at < keys.len() && out.keys.len() < want {
                let chunk = &keys[at..(at + batch).min(keys.len())];
                at += chunk.len();
                let mut hit = plan::matching_ids(x, t, chunk, &others)?;
                hit.sort_unstable();
                out.keys
                    .extend(chunk.iter().filter(|k| hit.binary_search(&k.id).is_ok()));
                batch = (batch * 4).min(CHECK_BATCH_MAX);
            }
            out.keys.truncate(want);
            Ok(out)
        }
        Plan::Walk(source) => {
            let sql = plan::walk_sql(x.dialect(), t, scope, preds, source, want, SCAN_ROWS_MAX);
            x.walk(&sql, want, SCAN_ROWS_MAX)
        }
    }
}

/// The page's shown keys and its `next`.
pub(crate) fn paginate(mut w: plan::Walked, limit: usize) -> (Vec<Cursor>, Option<Cursor>, bool) {
    w.keys.sort_by(|a, b| b.cmp(a));
    if w.keys.len() > limit {
        w.keys.truncate(limit);
        let next = w.keys.last().copied();
        (w.keys, next, false)
    } else {
        let cut = w.boundary.is_some();
        (w.keys, w.boundary, cut)
    }
}

/// Whether the `cdr` row is a fax call: a fax result, or a T.38 flow (whose T.30 frames may
/// not have been seen, when the capture began late). One lookup in `cdr_t38_cdr` per row; in
/// the partitioned layout with the call's start, so that one day's partition is read.
pub(crate) fn fax_sql(partitioned: bool) -> String {
    let day = if partitioned {
        " AND t.call_start_us = cdr.start_us"
    } else {
        ""
    };
    format!(
        "(cdr.fax_result IS NOT NULL OR EXISTS (SELECT 1 FROM cdr_t38 t WHERE t.cdr_id = cdr.id{day}))"
    )
}

/// The columns [`summary_from`] reads.
fn summary_columns(partitioned: bool) -> String {
    format!(
        "id, uid, {}, duration_ms, codecs, loss_max_pct, jitter_max_ms, CASE WHEN {} THEN 1 ELSE 0 END",
        crate::CALL_COLUMNS,
        fax_sql(partitioned)
    )
}

/// A call from the columns of `CALL_COLUMNS`.
pub(crate) fn call_from(c: &mut Cols) -> Result<CdrCall, CdrError> {
    Ok(CdrCall {
        call_id: c.text()?,
        caller: c.text()?,
        called: c.text()?,
        caller_addr: c.text()?,
        callee_addr: c.text()?,
        start_us: c.i64()?,
        ringing_us: c.opt_i64()?,
        answer_us: c.opt_i64()?,
        end_us: c.opt_i64()?,
        state: c.text()?,
        last_response: c.opt_u16()?,
        last_reason: c.text()?,
        hangup_by: c.opt_text()?,
        q850_cause: c.opt_u16()?,
        sip_messages: c.u32()?,
        reinvites: c.u32()?,
        mos_min: c.opt_f64()?,
        sip_tar: c.opt_text()?,
        sip_member: c.opt_text()?,
        sip_offset: c.opt_u64()?,
        sip_len: c.opt_u64()?,
        sip_compression: c.opt_text()?,
        rtp_tar: c.opt_text()?,
        rtp_member: c.opt_text()?,
        rtp_offset: c.opt_u64()?,
        rtp_len: c.opt_u64()?,
        rtp_compression: c.opt_text()?,
        dtmf: c.text()?,
        fax_pages: c.opt_u32()?,
        fax_result: c.opt_text()?,
        // Booleans: 0/1 in SQLite, read from PostgreSQL's as integers.
        encrypted: c.opt_i64()?.is_some_and(|v| v != 0),
        t38_offered: c.opt_i64()?.is_some_and(|v| v != 0),
        sensor: c.text()?,
    })
}

fn summary_from(row: Vec<crate::plan::Val>) -> Result<CallSummary, CdrError> {
    let mut c = Cols::new(row);
    let id = c.i64()?;
    let uid = c.opt_text()?.unwrap_or_else(|| format!("#{id}"));
    let call = call_from(&mut c)?;
    let duration_ms = c.opt_i64()?;
    Ok(CallSummary {
        duration_s: duration_ms
            .or_else(|| call.end_us.map(|e| (e - call.start_us) / 1000))
            .map(|ms| ms as f64 / 1000.0),
        codec: c.text()?,
        loss_pct_max: c.opt_f64()?,
        jitter_max_ms: c.opt_f64()?,
        fax: c.i64()? != 0,
        uid,
        id,
        call,
    })
}

/// The summaries of the rows of `keys`, newest first.
fn summaries(x: &mut dyn Exec, keys: &[Cursor]) -> Result<Vec<CallSummary>, CdrError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut s = plan::Sql::new(x.dialect());
    let list: Vec<String> = keys.iter().map(|k| s.int(k.id)).collect();
    let times = plan::time_list(&CDR_TABLE, keys, &mut s);
    s.text = format!(
        "SELECT {} FROM cdr WHERE id IN ({}){times}",
        summary_columns(x.partitioned()),
        list.join(", ")
    );
    let mut out = x
        .rows(&s)?
        .into_iter()
        .map(summary_from)
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by_key(|c| std::cmp::Reverse((c.call.start_us, c.id)));
    Ok(out)
}

fn scope_of(q: &CallQuery) -> Scope {
    Scope {
        from_us: q.from_us,
        to_us: q.to_us,
        after: q.after,
    }
}

/// [`CdrStore::search`](crate::CdrStore::search) on either backend.
pub(crate) fn search(x: &mut dyn Exec, q: &CallQuery) -> Result<CallPage, CdrError> {
    let limit = q.limit.clamp(1, query::LIMIT_MAX);
    let preds = call_preds(q, x.partitioned());
    let walked = page_keys(x, &CDR_TABLE, &scope_of(q), &preds, limit + 1)?;
    let (keys, next, cut) = paginate(walked, limit);
    let calls = summaries(x, &keys)?;
    Ok(CallPage {
        newest_us: newest_if_empty(x, &CDR_TABLE, calls.is_empty() && q.after.is_none())?,
        calls,
        scanned_to_us: if cut { next.map(|c| c.time_us) } else { None },
        next: next.map(|c| c.to_text()),
    })
}

/// A round bucket width (seconds) giving about [`TOTALS_BUCKETS`] buckets over `span_s`.
pub fn bucket_width_s(span_s: i64) -> i64 {
    const ROUND_S: [i64; 22] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200,
        86_400, 172_800, 604_800, 2_592_000, 31_536_000,
    ];
    let want = (span_s.max(1) + TOTALS_BUCKETS - 1) / TOTALS_BUCKETS;
    ROUND_S
        .iter()
        .copied()
        .find(|&w| w >= want)
        .unwrap_or_else(|| ceil_div(want, 86_400) * 86_400)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The range of the totals: the query's, else the last 24 hours (up to `to` when only that is
/// given).
pub(crate) fn totals_range(from: Option<i64>, to: Option<i64>) -> (i64, i64) {
    let day_us = TOTALS_DEFAULT_RANGE_S * 1_000_000;
    match (from, to) {
        (Some(f), Some(t)) => (f, t),
        (Some(f), None) => (f, now_us().max(f + 1_000_000)),
        (None, Some(t)) => (t - day_us, t),
        (None, None) => {
            let t = now_us();
            (t - day_us, t)
        }
    }
}

/// `a / b` rounded up, for `a >= 0` and `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

/// Numbers with thousands separators, for notes: 200,000.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

impl CallTotals {
    /// The totals of `q`'s range with no call in it: its buckets, every one empty. What a
    /// database that holds no call yet (or none at all) answers.
    pub fn empty(q: &CallQuery) -> CallTotals {
        let (from_us, to_us) = totals_range(q.from_us, q.to_us);
        let to_us = to_us.max(from_us + 1);
        let bucket_s = bucket_width_s(ceil_div(to_us - from_us, 1_000_000));
        let width_us = bucket_s * 1_000_000;
        let base_us = from_us.div_euclid(width_us) * width_us;
        let n = ceil_div(to_us - base_us, width_us).max(1);
        CallTotals {
            from_us,
            to_us,
            bucket_s,
            buckets: (0..n)
                .map(|b| TotalsBucket {
                    start_us: base_us + b * width_us,
                    ..TotalsBucket::default()
                })
                .collect(),
            ..CallTotals::default()
        }
    }
}

/// [`CdrStore::totals`](crate::CdrStore::totals) on either backend.
pub(crate) fn totals(x: &mut dyn Exec, q: &CallQuery) -> Result<CallTotals, CdrError> {
    let mut t = CallTotals::empty(q);
    let (from_us, to_us, bucket_s) = (t.from_us, t.to_us, t.bucket_s);
    let width_us = bucket_s * 1_000_000;
    let base_us = t.buckets[0].start_us;
    let n = t.buckets.len() as i64;
    let scope = Scope {
        from_us: Some(from_us),
        to_us: Some(to_us),
        after: None,
    };
    let preds = call_preds(q, x.partitioned());
    let plan = plan::choose(x, &CDR_TABLE, &scope, &preds)?;
    let cap = match plan {
        Plan::Walk(Some(_)) => TOTALS_NUMBER_ROWS_MAX,
        _ => TOTALS_ROWS_MAX,
    };
    // (bucket, the rows of the statement): PostgreSQL groups by bucket itself (a hash
    // aggregate); SQLite would sort every row read for a GROUP BY, so it is asked bucket by
    // bucket, newest first, each within what is left of the row budget.
    let mut results: Vec<(Option<i64>, Vec<plan::Val>)> = Vec::new();
    if x.dialect() == plan::Dialect::Sqlite && matches!(plan, Plan::Walk(_)) {
        let mut left = cap;
        for b in (0..n).rev() {
            let lo = (base_us + b * width_us).max(from_us);
            let hi = (base_us + (b + 1) * width_us).min(to_us);
            let bucket_scope = Scope {
                from_us: Some(lo),
                to_us: Some(hi),
                after: None,
            };
            let sql = plan::totals_sql(
                x.dialect(),
                &CDR_TABLE,
                &bucket_scope,
                &preds,
                plan,
                base_us,
                width_us,
                left,
                false,
            );
            for row in x.rows(&sql)? {
                let read = Cols::new(row.clone()).nth_u64(6)?;
                left = left.saturating_sub(read as usize);
                results.push((Some(b), row));
            }
            if left == 0 {
                break;
            }
        }
    } else {
        let sql = plan::totals_sql(
            x.dialect(),
            &CDR_TABLE,
            &scope,
            &preds,
            plan,
            base_us,
            width_us,
            cap,
            true,
        );
        results = x.rows(&sql)?.into_iter().map(|r| (None, r)).collect();
    }
    let mut buckets = std::mem::take(&mut t.buckets);
    let (mut read, mut earliest) = (0u64, i64::MAX);
    let (mut mos_sum, mut mos_n) = (0.0, 0u64);
    for (bucket, row) in results {
        let mut c = Cols::new(row);
        let b = c.i64()?;
        let b = bucket.unwrap_or(b);
        let calls = c.u64()?;
        let answered = c.u64()?;
        let sum = c.opt_f64()?.unwrap_or(0.0);
        let count = c.u64()?;
        let min = c.opt_f64()?;
        read += c.u64()?;
        earliest = earliest.min(c.opt_i64()?.unwrap_or(i64::MAX));
        if let Some(bucket) = usize::try_from(b).ok().and_then(|b| buckets.get_mut(b)) {
            bucket.calls += calls;
            bucket.answered += answered;
            bucket.mos_avg = (count > 0).then(|| sum / count as f64);
            bucket.mos_min = min;
        }
        t.calls += calls;
        t.answered += answered;
        mos_sum += sum;
        mos_n += count;
        t.mos_min = match (t.mos_min, min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    t.mos_avg = (mos_n > 0).then(|| mos_sum / mos_n as f64);
    t.buckets = buckets;
    if matches!(plan, Plan::Walk(_)) && read >= cap as u64 {
        t.note = Some(format!(
            "counted over the newest {} calls of the range, those since {}; the range holds more, and earlier ones are not counted",
            grouped(cap as u64),
            query::time_text(earliest)
        ));
    }
    Ok(t)
}

/// The columns of a stream row that [`stream_from`] reads, in [`CdrStream`]'s order.
pub(crate) const STREAM_READ_COLUMNS: &str = "call_id, src, dst, ssrc, payload, start_us, \
     end_us, packets, lost, duplicates, out_of_order, min_delta_ms, mean_delta_ms, max_delta_ms, \
     mean_jitter_ms, max_jitter_ms, mos, rtcp_reports, rtcp_fraction_lost_pct, rtcp_jitter_ms, \
     rtp_tar, rtp_member, rtp_offset, rtp_len, rtp_compression";

/// A stream from the columns of [`STREAM_READ_COLUMNS`].
pub(crate) fn stream_from(c: &mut Cols) -> Result<CdrStream, CdrError> {
    Ok(CdrStream {
        call_id: c.opt_text()?,
        src: c.text()?,
        dst: c.text()?,
        ssrc: c.u32()?,
        payload: c.text()?,
        start_us: c.i64()?,
        end_us: c.i64()?,
        packets: c.u64()?,
        lost: c.i64()?,
        duplicates: c.u64()?,
        out_of_order: c.u64()?,
        min_delta_ms: c.opt_f64()?.unwrap_or(0.0),
        mean_delta_ms: c.opt_f64()?.unwrap_or(0.0),
        max_delta_ms: c.opt_f64()?.unwrap_or(0.0),
        mean_jitter_ms: c.opt_f64()?.unwrap_or(0.0),
        max_jitter_ms: c.opt_f64()?.unwrap_or(0.0),
        mos: c.opt_f64()?,
        rtcp_reports: c.u32()?,
        rtcp_fraction_lost_pct: c.opt_f64()?,
        rtcp_jitter_ms: c.opt_f64()?,
        rtp_tar: c.opt_text()?,
        rtp_member: c.opt_text()?,
        rtp_offset: c.opt_i64()?.map(|v| v.max(0) as u64),
        rtp_len: c.opt_i64()?.map(|v| v.max(0) as u64),
        rtp_compression: c.opt_text()?,
    })
}

/// [`CdrStore::call_by_uid`](crate::CdrStore::call_by_uid) on either backend: `#<id>` names a
/// row stored without a uid.
#[allow(clippy::type_complexity)]
pub(crate) fn call_by_uid(
    x: &mut dyn Exec,
    uid: &str,
) -> Result<Option<(CallSummary, Vec<CdrStream>, Vec<CdrT38>)>, CdrError> {
    let cols = summary_columns(x.partitioned());
    let mut found = None;
    // Partitioned: a uid made by `CdrRecord::identity` ends with the call's start, the
    // partition key; looked up with it, the row is read from its own day only.
    let start = uid.rsplit('|').next().and_then(|t| t.parse::<i64>().ok());
    if let Some(start) = start.filter(|_| x.partitioned() && !uid.starts_with('#')) {
        let mut s = plan::Sql::new(x.dialect());
        let (a, b) = (s.arg(Arg::Text(uid.to_string())), s.int(start));
        s.text = format!("SELECT {cols} FROM cdr WHERE uid = {a} AND start_us = {b}");
        found = x.rows(&s)?.into_iter().next();
    }
    if found.is_none() {
        let mut s = plan::Sql::new(x.dialect());
        s.text = match uid.strip_prefix('#').and_then(|i| i.parse::<i64>().ok()) {
            Some(id) => {
                let (a, b) = (s.int(id), s.arg(Arg::Text(uid.to_string())));
                format!("SELECT {cols} FROM cdr WHERE (id = {a} AND uid IS NULL) OR uid = {b}")
            }
            None => {
                let a = s.arg(Arg::Text(uid.to_string()));
                format!("SELECT {cols} FROM cdr WHERE uid = {a}")
            }
        };
        found = x.rows(&s)?.into_iter().next();
    }
    let Some(row) = found else {
        return Ok(None);
    };
    let summary = summary_from(row)?;
    // The call's streams and flows: by its row, and in the partitioned layout its start.
    let of_call = |s: &mut plan::Sql, partitioned: bool| {
        let id = s.int(summary.id);
        if partitioned {
            let start = s.int(summary.call.start_us);
            format!("cdr_id = {id} AND call_start_us = {start}")
        } else {
            format!("cdr_id = {id}")
        }
    };
    let mut s = plan::Sql::new(x.dialect());
    let cond = of_call(&mut s, x.partitioned());
    s.text = format!("SELECT {STREAM_READ_COLUMNS} FROM cdr_rtp WHERE {cond} ORDER BY id");
    let streams = x
        .rows(&s)?
        .into_iter()
        .map(|r| stream_from(&mut Cols::new(r)))
        .collect::<Result<Vec<_>, CdrError>>()?;
    let mut s = plan::Sql::new(x.dialect());
    let cond = of_call(&mut s, x.partitioned());
    s.text = format!(
        "SELECT {} FROM cdr_t38 WHERE {cond} ORDER BY start_us, id",
        crate::T38_COLUMNS
    );
    let t38 = x
        .rows(&s)?
        .into_iter()
        .map(|r| t38_from(&mut Cols::new(r)))
        .collect::<Result<Vec<_>, CdrError>>()?;
    Ok(Some((summary, streams, t38)))
}

/// A T.38 flow from the columns of [`crate::T38_COLUMNS`].
pub(crate) fn t38_from(c: &mut Cols) -> Result<CdrT38, CdrError> {
    Ok(CdrT38 {
        src: c.text()?,
        dst: c.text()?,
        start_us: c.i64()?,
        end_us: c.i64()?,
        packets: c.u64()?,
        bytes: c.u64()?,
        lost: c.u64()?,
        duplicates: c.u64()?,
        out_of_order: c.u64()?,
        types: c.text()?,
        redundant: c.u64()?,
        fec: c.u64()?,
        t30: c.text()?,
    })
}

/// Fills the search columns of rows stored before they existed, from each row and its
/// streams, `BACKFILL_ROWS` at a time (each chunk one transaction: SQLite an UPDATE per row,
/// PostgreSQL one UPDATE from arrays).
pub(crate) fn backfill(x: &mut dyn Exec) -> Result<u64, CdrError> {
    const BACKFILL_ROWS: i64 = 10_000;
    let mut done = 0u64;
    let mut after = i64::MIN;
    loop {
        let mut s = plan::Sql::new(x.dialect());
        let (a, n) = (s.int(after), s.int(BACKFILL_ROWS));
        s.text = format!(
            "SELECT id, caller, called, caller_addr, callee_addr, start_us, end_us, uid FROM cdr \
             WHERE id > {a} ORDER BY id LIMIT {n}"
        );
        let rows = x.rows(&s)?;
        let Some(last) = rows.last() else {
            return Ok(done);
        };
        let last_id = Cols::new(last.clone()).i64()?;
        let mut s = plan::Sql::new(x.dialect());
        let (lo, hi) = (s.int(after), s.int(last_id));
        s.text = format!(
            "SELECT cdr_id, payload, packets, lost, max_jitter_ms FROM cdr_rtp \
             WHERE cdr_id > {lo} AND cdr_id <= {hi} ORDER BY cdr_id, id"
        );
        let mut streams: std::collections::HashMap<i64, Vec<(String, u64, i64, f64)>> =
            std::collections::HashMap::new();
        for r in x.rows(&s)? {
            let mut c = Cols::new(r);
            let id = c.i64()?;
            let payload = c.text()?;
            let figures = (payload, c.u64()?, c.i64()?, c.opt_f64()?.unwrap_or(0.0));
            streams.entry(id).or_default().push(figures);
        }
        let mut filled = Vec::with_capacity(rows.len());
        for r in rows {
            let mut c = Cols::new(r);
            let id = c.i64()?;
            let call = CdrCall {
                caller: c.text()?,
                called: c.text()?,
                caller_addr: c.text()?,
                callee_addr: c.text()?,
                start_us: c.i64()?,
                end_us: c.opt_i64()?,
                ..CdrCall::default()
            };
            // The sensor is the first part of the uid (`sensor|Call-ID|start`).
            let sensor = c
                .opt_text()?
                .and_then(|u| u.split_once('|').map(|(s, _)| s.to_string()))
                .unwrap_or_default();
            let call = CdrCall { sensor, ..call };
            let figures = streams.get(&id).map(Vec::as_slice).unwrap_or_default();
            let d = derive(
                &call,
                figures.iter().map(|(p, packets, lost, j)| StreamFigures {
                    payload: p,
                    packets: *packets,
                    lost: *lost,
                    max_jitter_ms: *j,
                }),
            );
            filled.push((id, d));
        }
        x.update_derived(&filled)?;
        done += filled.len() as u64;
        after = last_id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(raw: &str) -> CallQuery {
        CallQuery::from_query(raw).unwrap()
    }

    fn err(raw: &str) -> String {
        CallQuery::from_query(raw).unwrap_err().to_string()
    }

    #[test]
    fn an_empty_query_is_the_newest_fifty() {
        assert_eq!(q(""), CallQuery::default());
        assert_eq!(q("?caller=&called=&limit="), CallQuery::default());
        assert_eq!(CallQuery::default().to_query(), "");
    }

    #[test]
    fn a_full_query_round_trips() {
        let raw = "from=2026-11-25T00:00:00Z&to=1795650000&caller=!12*,*89&called=%2B4930*\
                   &call_id=a84b4c76e66710%40pc33.example.com&ip=10.0.0.0/8&response=486,5xx\
                   &min_duration_s=2.5&mos_below=3.1&loss_above_pct=1&jitter_above_ms=30\
                   &codec=PCMA&hangup_by=callee&sensor=site-a&after=1732612345000000.42&limit=100\
                   &fax=yes";
        let a = q(raw);
        assert_eq!(a.called.as_ref().unwrap().to_text(), "+4930*");
        assert_eq!(
            a.call_id.as_deref(),
            Some("a84b4c76e66710@pc33.example.com")
        );
        assert_eq!(
            a.response,
            vec![ResponseMatch::Code(486), ResponseMatch::Class(5)]
        );
        assert_eq!(
            a.after,
            Some(Cursor {
                time_us: 1_732_612_345_000_000,
                id: 42
            })
        );
        assert_eq!(a.fax, Some(true));
        assert_eq!(q(&a.to_query()), a);
        assert_eq!(q("fax=0").fax, Some(false));
    }

    #[test]
    fn every_error_names_its_parameter() {
        assert!(err("nope=1&caller=1").starts_with("query: unknown parameter \"nope\""));
        assert!(err("from=yesterday").starts_with("from: not a time"));
        assert!(err("from=2026-01-02&to=2026-01-01").starts_with("to: must be later"));
        assert!(err("caller=12%2534").starts_with("caller: the character '%'"));
        assert!(err("ip=10.0.0.0/40").starts_with("ip: the prefix length"));
        assert!(err("response=4x").starts_with("response: \"4x\" is neither"));
        assert!(err("response=700").starts_with("response:"));
        assert!(err("min_duration_s=-1").starts_with("min_duration_s: must be at least 0"));
        assert!(err("mos_below=NaN").starts_with("mos_below: not a number"));
        assert!(err("codec=PC%20MA").starts_with("codec: the character ' '"));
        assert!(err("hangup_by=both").starts_with("hangup_by: must be caller or callee"));
        assert!(err("after=42").starts_with("after: not a page cursor"));
        assert!(err("limit=501").starts_with("limit: must be a whole number from 1 to 500"));
        assert!(err("limit=0").starts_with("limit:"));
        assert!(err("call_id=a%0Ab").starts_with("call_id: holds a control character"));
        assert!(err("fax=maybe").starts_with("fax: must be 1"));
    }

    #[test]
    fn derived_columns_come_from_the_record() {
        let call = CdrCall {
            caller: "+4930123".into(),
            called: "1001".into(),
            caller_addr: "192.0.2.1:5060".into(),
            callee_addr: "[2001:db8::5]:5062".into(),
            start_us: 1_000_000,
            end_us: Some(4_500_000),
            ..CdrCall::default()
        };
        let streams = [
            CdrStream {
                payload: "g711A, telephone-event".into(),
                packets: 95,
                lost: 5,
                max_jitter_ms: 3.0,
                ..CdrStream::default()
            },
            CdrStream {
                payload: "g711A".into(),
                packets: 100,
                lost: -2,
                max_jitter_ms: 7.5,
                ..CdrStream::default()
            },
        ];
        let d = derive(&call, streams.iter().map(StreamFigures::from));
        assert_eq!(d.sensor, "local");
        assert_eq!(
            (d.caller_rev.as_str(), d.called_rev.as_str()),
            ("3210394+", "1001")
        );
        assert_eq!(d.caller_ip.unwrap()[10..], [0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(d.callee_ip.unwrap()[..2], [0x20, 0x01]);
        assert_eq!(d.duration_ms, Some(3_500));
        assert_eq!(d.codecs.as_deref(), Some("g711A,telephone-event"));
        assert_eq!((d.loss_max_pct, d.jitter_max_ms), (Some(5.0), Some(7.5)));
        let none = derive(&CdrCall::default(), []);
        assert_eq!(
            (none.codecs, none.loss_max_pct, none.caller_ip),
            (None, None, None)
        );
    }

    #[test]
    fn buckets_are_round_widths() {
        assert_eq!(bucket_width_s(3600), 60);
        assert_eq!(bucket_width_s(86_400), 1800);
        assert_eq!(bucket_width_s(7 * 86_400), 10_800);
        assert_eq!(bucket_width_s(30 * 86_400), 43_200);
        assert_eq!(bucket_width_s(100 * 365 * 86_400), 609 * 86_400);
    }

    #[test]
    fn codec_aliases_match_both_names() {
        assert_eq!(codec_names("PCMA"), vec!["pcma", "g711a"]);
        assert_eq!(codec_names("g711U"), vec!["pcmu", "g711u"]);
        assert_eq!(codec_names("OPUS"), vec!["opus"]);
    }
}
