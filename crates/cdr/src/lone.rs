//! Media without signalling: the RTP streams stored with no call (`cdr_rtp.cdr_id` NULL: the
//! capture saw no SIP that announced them), and the console's search of them
//! ([`StreamQuery`], `GET /api/streams`).
//!
//! ```text
//! GET /api/streams?from=&to=&ip=&port=&ssrc=&after=&limit=
//! ```
//!
//! `from` and `to` bound the stream's first packet; `ip` is an address (not a network: the
//! addresses are kept as `ip:port` text) matched against the source or the destination, `port`
//! a UDP port of either, both together one endpoint; `ssrc` is `0x` and hex (as the pages and
//! tshark write it), or decimal. Pages are newest first by (start, `id`) with the calls' keyset
//! cursor and plans ([`crate::search`]).
//!
//! # Indexes
//!
//! Every one is partial, on the streams without a call only (`WHERE cdr_id IS NULL`): a call's
//! streams, nearly every row, cost them nothing, and each statement of this search says
//! `cdr_id IS NULL` ([`crate::plan::Table::only`]) so that it can read through them. In the
//! partitioned PostgreSQL layout the time is `call_start_us`, which for a stream without a
//! call is its own start: a range reads the days it spans.
//!
//! | filter | index | why |
//! |---|---|---|
//! | newest first, `from`/`to`, `after` | `cdr_rtp_lone_start (start_us[, id])` | the walk of every search |
//! | `ssrc=` | `cdr_rtp_lone_ssrc (ssrc, start_us[, id])` | an SSRC is one stream, or a few |
//! | `ip=` (with or without `port=`) | `cdr_rtp_lone_src (src, start_us[, id])`, `cdr_rtp_lone_dst` | an address is a prefix of `ip:port` (`10.0.0.7:`, `[2001:db8::7]:`), an endpoint the whole text; the union of both |
//! | `port=` alone | none | checked on each row of the walk: a port is reused by every range of RTP ports |
//!
//! SQLite creates them when it opens a database; PostgreSQL by migration 3
//! ([`crate::migrate`]).

use std::net::{IpAddr, SocketAddr};

use crate::plan::{self, Arg, Bound, Branch, Cols, Exec, Kind, Pred, Scope, Table};
use crate::query::{self, Cursor, LIMIT_DEFAULT, QueryError};
use crate::search::{STREAM_READ_COLUMNS, newest_if_empty, page_keys, paginate, stream_from};
use crate::{CdrError, CdrStream};

/// The lone streams' indexes in SQLite (added to [`crate::SQLITE_INDEXES`]' work at open).
pub const SQLITE_LONE_INDEXES: [(&str, &str); 4] = [
    (
        "cdr_rtp_lone_start",
        "cdr_rtp(start_us) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_ssrc",
        "cdr_rtp(ssrc, start_us) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_src",
        "cdr_rtp(src, start_us) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_dst",
        "cdr_rtp(dst, start_us) WHERE cdr_id IS NULL",
    ),
];

/// The same in PostgreSQL's plain layout (text in the C collation, as the calls' indexes).
pub const PG_LONE_INDEXES: [(&str, &str); 4] = [
    (
        "cdr_rtp_lone_start",
        "cdr_rtp (start_us, id) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_ssrc",
        "cdr_rtp (ssrc, start_us, id) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_src",
        "cdr_rtp (src COLLATE \"C\", start_us, id) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_dst",
        "cdr_rtp (dst COLLATE \"C\", start_us, id) WHERE cdr_id IS NULL",
    ),
];

/// The same in the partitioned layout, by the partition key.
pub const PG_PARTITIONED_LONE_INDEXES: [(&str, &str); 4] = [
    (
        "cdr_rtp_lone_start",
        "cdr_rtp (call_start_us, id) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_ssrc",
        "cdr_rtp (ssrc, call_start_us, id) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_src",
        "cdr_rtp (src COLLATE \"C\", call_start_us, id) WHERE cdr_id IS NULL",
    ),
    (
        "cdr_rtp_lone_dst",
        "cdr_rtp (dst COLLATE \"C\", call_start_us, id) WHERE cdr_id IS NULL",
    ),
];

const LONE: Option<&str> = Some("cdr_id IS NULL");

pub(crate) const LONE_TABLE: Table = Table {
    name: "cdr_rtp",
    time: "start_us",
    time_index: "cdr_rtp_lone_start",
    keyed_by_time: false,
    only: LONE,
};

/// Partitioned: the partition key, equal to `start_us` for a stream without a call.
pub(crate) const LONE_TABLE_PARTITIONED: Table = Table {
    name: "cdr_rtp",
    time: "call_start_us",
    time_index: "cdr_rtp_lone_start",
    keyed_by_time: true,
    only: LONE,
};

fn table(x: &dyn Exec) -> &'static Table {
    if x.partitioned() {
        &LONE_TABLE_PARTITIONED
    } else {
        &LONE_TABLE
    }
}

/// The lone streams page's filters; empty fields filter nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamQuery {
    /// Streams whose first packet came at or after this time (µs since the epoch).
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    /// The source's or the destination's IP.
    pub ip: Option<IpAddr>,
    /// The source's or the destination's port (with `ip`: that endpoint).
    pub port: Option<u16>,
    pub ssrc: Option<u32>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

impl Default for StreamQuery {
    fn default() -> StreamQuery {
        StreamQuery {
            from_us: None,
            to_us: None,
            ip: None,
            port: None,
            ssrc: None,
            after: None,
            limit: LIMIT_DEFAULT,
        }
    }
}

/// The parameters of `GET /api/streams`, in the order `to_query` writes them.
pub const STREAM_PARAMS: [&str; 7] = ["from", "to", "ip", "port", "ssrc", "after", "limit"];

fn parse_ip(value: &str) -> Result<IpAddr, QueryError> {
    let v = value.trim();
    let v = v
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(v);
    v.parse().map_err(|_| {
        let why = if v.contains('/') {
            "an address, not a network: streams without a call are found by their endpoints \
             (write 10.0.0.7 or 2001:db8::7, and a port in port=)"
        } else {
            "not an IP address (write 10.0.0.7 or 2001:db8::7)"
        };
        QueryError::new("ip", why)
    })
}

fn parse_port(value: &str) -> Result<u16, QueryError> {
    match value.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(QueryError::new("port", "must be a UDP port, 1 to 65535")),
    }
}

/// `0x` and hex, else decimal digits, else hex digits (an SSRC copied without its `0x`).
fn parse_ssrc(value: &str) -> Result<u32, QueryError> {
    let v = value.trim();
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None if v.bytes().all(|b| b.is_ascii_digit()) => v.parse::<u32>().ok(),
        None => u32::from_str_radix(v, 16).ok(),
    };
    parsed.ok_or_else(|| {
        QueryError::new(
            "ssrc",
            "not an SSRC: write 32 bits as 0x and hex (0x1A2B3C4D) or as a decimal number",
        )
    })
}

impl StreamQuery {
    /// Reads the query string of `GET /api/streams`.
    pub fn from_query(raw: &str) -> Result<StreamQuery, QueryError> {
        let v = query::decode_pairs(raw, &STREAM_PARAMS)?;
        let get = |i: usize| v[i].as_deref();
        let (from_us, to_us) = query::parse_range(get(0), get(1))?;
        Ok(StreamQuery {
            from_us,
            to_us,
            ip: get(2).map(parse_ip).transpose()?,
            port: get(3).map(parse_port).transpose()?,
            ssrc: get(4).map(parse_ssrc).transpose()?,
            after: get(5).map(|x| Cursor::parse("after", x)).transpose()?,
            limit: get(6)
                .map(|x| query::parse_limit("limit", x))
                .transpose()?
                .unwrap_or(LIMIT_DEFAULT),
        })
    }

    /// The query string that [`StreamQuery::from_query`] reads back as this query.
    pub fn to_query(&self) -> String {
        let mut s = String::new();
        let p = &mut s;
        if let Some(v) = self.from_us {
            query::push_pair(p, "from", &query::time_text(v));
        }
        if let Some(v) = self.to_us {
            query::push_pair(p, "to", &query::time_text(v));
        }
        if let Some(v) = self.ip {
            query::push_pair(p, "ip", &v.to_string());
        }
        if let Some(v) = self.port {
            query::push_pair(p, "port", &v.to_string());
        }
        if let Some(v) = self.ssrc {
            query::push_pair(p, "ssrc", &format!("0x{v:08X}"));
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

/// A stream without a call as the pages show it: its handle and its figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoneStream {
    /// The row's `uid` (`sensor|rtp|src|dst|ssrc|start_us/0`), or `#<id>` for a row stored
    /// without one.
    pub uid: String,
    pub id: i64,
    /// The sensor that saw it: the first part of its uid (`local` without one).
    pub sensor: String,
    #[serde(flatten)]
    pub stream: CdrStream,
}

/// A page of streams without a call, newest first.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LoneStreamPage {
    pub streams: Vec<LoneStream>,
    pub next: Option<String>,
    /// As [`crate::search::CallPage::scanned_to_us`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scanned_to_us: Option<i64>,
    /// As [`crate::search::CallPage::newest_us`]: the newest such stream's start.
    pub newest_us: Option<i64>,
}

/// `ip:port` as the stores keep an address ([`SocketAddr`]'s text: `[v6]:port`).
fn endpoint(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

/// What every address of `ip` starts with: `10.0.0.7:`, `[2001:db8::7]:`.
fn ip_prefix(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:"),
        IpAddr::V6(a) => format!("[{a}]:"),
    }
}

fn stream_preds(q: &StreamQuery) -> Vec<Pred> {
    let mut p = Vec::new();
    let on_both = |bound: &dyn Fn() -> Bound| {
        Pred::Or(
            [("src", "cdr_rtp_lone_src"), ("dst", "cdr_rtp_lone_dst")]
                .into_iter()
                .map(|(column, index)| {
                    Pred::Branch(Branch {
                        column,
                        kind: Kind::Text,
                        bound: bound(),
                        index: Some(index),
                        ordered: true,
                    })
                })
                .collect(),
        )
    };
    match (q.ip, q.port) {
        (Some(ip), Some(port)) => {
            let e = endpoint(ip, port);
            p.push(on_both(&|| Bound::Eq(Arg::Text(e.clone()))));
        }
        (Some(ip), None) => {
            let lo = ip_prefix(ip);
            let hi = plan::prefix_end(&lo);
            p.push(on_both(&|| {
                Bound::Range(Arg::Text(lo.clone()), Arg::Text(hi.clone()))
            }));
        }
        (None, Some(port)) => {
            let tail = format!(":{port}");
            p.push(Pred::Or(vec![
                Pred::EndsWith("src", tail.clone()),
                Pred::EndsWith("dst", tail),
            ]));
        }
        (None, None) => {}
    }
    if let Some(ssrc) = q.ssrc {
        p.push(Pred::Branch(Branch {
            column: "ssrc",
            kind: Kind::PlainText,
            bound: Bound::Eq(Arg::Int(i64::from(ssrc))),
            index: Some("cdr_rtp_lone_ssrc"),
            ordered: true,
        }));
    }
    p
}

/// The sensor a uid names (`sensor|rtp|...`), `local` without one.
fn sensor_of(uid: Option<&str>) -> String {
    let s = uid.and_then(|u| u.split_once('|')).map_or("", |(s, _)| s);
    crate::search::sensor_or_default(s).to_string()
}

fn lone_from(row: Vec<plan::Val>) -> Result<LoneStream, CdrError> {
    let mut c = Cols::new(row);
    let id = c.i64()?;
    let uid = c.opt_text()?;
    let stream = stream_from(&mut c)?;
    Ok(LoneStream {
        sensor: sensor_of(uid.as_deref()),
        uid: uid.unwrap_or_else(|| format!("#{id}")),
        id,
        stream,
    })
}

/// [`CdrStore::lone_streams`](crate::CdrStore::lone_streams) on either backend.
pub(crate) fn lone_streams(x: &mut dyn Exec, q: &StreamQuery) -> Result<LoneStreamPage, CdrError> {
    let t = table(x);
    let limit = q.limit.clamp(1, query::LIMIT_MAX);
    let scope = Scope {
        from_us: q.from_us,
        to_us: q.to_us,
        after: q.after,
    };
    let walked = page_keys(x, t, &scope, &stream_preds(q), limit + 1)?;
    let (keys, next, cut) = paginate(walked, limit);
    let mut streams = Vec::new();
    if !keys.is_empty() {
        let mut s = plan::Sql::new(x.dialect());
        let ids: Vec<String> = keys.iter().map(|k| s.int(k.id)).collect();
        let times = plan::time_list(t, &keys, &mut s);
        s.text = format!(
            "SELECT id, uid, {STREAM_READ_COLUMNS} FROM cdr_rtp WHERE id IN ({}){times}",
            ids.join(", ")
        );
        streams = x
            .rows(&s)?
            .into_iter()
            .map(lone_from)
            .collect::<Result<Vec<_>, _>>()?;
        streams.sort_by_key(|l| std::cmp::Reverse((l.stream.start_us, l.id)));
    }
    let empty = streams.is_empty() && q.after.is_none();
    Ok(LoneStreamPage {
        newest_us: newest_if_empty(x, t, empty)?,
        streams,
        scanned_to_us: if cut { next.map(|c| c.time_us) } else { None },
        next: next.map(|c| c.to_text()),
    })
}

/// [`CdrStore::lone_stream_by_uid`](crate::CdrStore::lone_stream_by_uid) on either backend:
/// `#<id>` names a row stored without a uid. A stream of a call is not found here.
pub(crate) fn lone_stream_by_uid(
    x: &mut dyn Exec,
    uid: &str,
) -> Result<Option<LoneStream>, CdrError> {
    let mut s = plan::Sql::new(x.dialect());
    let cond = match uid.strip_prefix('#').and_then(|i| i.parse::<i64>().ok()) {
        Some(id) => {
            let (a, b) = (s.int(id), s.arg(Arg::Text(uid.to_string())));
            format!("((id = {a} AND uid IS NULL) OR uid = {b})")
        }
        None => {
            let a = s.arg(Arg::Text(uid.to_string()));
            // Partitioned: the uid (`...|start_us/0`) holds the start, the partition key.
            let start = uid
                .rsplit_once('/')
                .and_then(|(head, _)| head.rsplit('|').next())
                .and_then(|t| t.parse::<i64>().ok());
            match start.filter(|_| x.partitioned()) {
                Some(t) => format!("uid = {a} AND call_start_us = {}", s.int(t)),
                None => format!("uid = {a}"),
            }
        }
    };
    s.text = format!(
        "SELECT id, uid, {STREAM_READ_COLUMNS} FROM cdr_rtp WHERE {cond} AND cdr_id IS NULL"
    );
    x.rows(&s)?.into_iter().next().map(lone_from).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_query_round_trips() {
        let q = StreamQuery::from_query(
            "from=2026-11-25T00:00:00Z&ip=[2001:db8::7]&port=4000&ssrc=0x00ab12cd&limit=20",
        )
        .unwrap();
        assert_eq!(q.ssrc, Some(0x00AB_12CD));
        assert_eq!(q.ip, Some("2001:db8::7".parse().unwrap()));
        assert_eq!(StreamQuery::from_query(&q.to_query()).unwrap(), q);
        assert_eq!(
            StreamQuery::from_query("ssrc=11211213").unwrap().ssrc,
            Some(11_211_213),
            "digits alone are decimal"
        );
        assert_eq!(
            StreamQuery::from_query("ssrc=AB12CD").unwrap().ssrc,
            Some(0xAB12CD),
            "hex without its 0x"
        );
        assert_eq!(StreamQuery::from_query("").unwrap(), StreamQuery::default());
    }

    #[test]
    fn stream_query_errors_name_the_parameter() {
        for (raw, param, says) in [
            ("ip=10.0.0.0/8", "ip", "not a network"),
            ("ip=ten", "ip", "not an IP address"),
            ("port=0", "port", "1 to 65535"),
            ("port=70000", "port", "1 to 65535"),
            ("ssrc=0x1FFFFFFFF", "ssrc", "32 bits"),
            ("caller=1", "query", "unknown parameter"),
        ] {
            let e = StreamQuery::from_query(raw).unwrap_err();
            assert_eq!(e.param, param, "{raw}");
            assert!(e.to_string().contains(says), "{raw}: {e}");
        }
    }

    #[test]
    fn an_address_is_the_text_the_stores_keep() {
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        assert_eq!(endpoint(v6, 4000), "[2001:db8::7]:4000");
        assert_eq!(ip_prefix(v6), "[2001:db8::7]:");
        assert_eq!(ip_prefix("10.0.0.7".parse().unwrap()), "10.0.0.7:");
        assert_eq!(sensor_of(Some("site-a|rtp|a|b|1|2/0")), "site-a");
        assert_eq!(sensor_of(None), "local");
    }
}
