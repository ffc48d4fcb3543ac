//! The query strings of the console's searches, and the parts [`crate::search::CallQuery`] and
//! [`crate::registration::RegistrationQuery`] share: percent-decoding, number patterns, IP
//! networks, times and the keyset cursor.
//!
//! Every part is bounded (the string, the items of a list, the bytes of an item) and every
//! refusal is a [`QueryError`] naming the parameter and what was wrong, because the console
//! shows it as the 400 answer. Values are trimmed, and an empty value is no filter: an HTML
//! form sends its empty fields.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

/// Longest query string read, in bytes (16 KiB): two full number lists (32 items of 64 bytes
/// each, percent-encoded) and every other filter fit.
pub const QUERY_BYTES_MAX: usize = 16 * 1024;
/// Most items in a number list (`1001,1002,...`).
pub const NUMBER_ITEMS_MAX: usize = 32;
/// Longest item of a number list, in bytes.
pub const NUMBER_ITEM_BYTES_MAX: usize = 64;
/// Longest free-text value (a Call-ID, a sensor, a codec), in bytes.
pub const TEXT_BYTES_MAX: usize = 256;
/// Rows on a page when `limit` is not given.
pub const LIMIT_DEFAULT: usize = 50;
/// Most rows on a page.
pub const LIMIT_MAX: usize = 500;
/// Longest parameter name echoed back in an error, in characters.
const NAME_ECHO_CHARS_MAX: usize = 40;

/// A query string the search refuses: which parameter, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{param}: {problem}")]
pub struct QueryError {
    /// The parameter (`caller`, `from`, ...), or `query` for the string as a whole.
    pub param: String,
    pub problem: String,
}

impl QueryError {
    pub(crate) fn new(param: &str, problem: impl Into<String>) -> QueryError {
        QueryError {
            param: param.to_string(),
            problem: problem.into(),
        }
    }
}

/// Decodes `raw` (`a=1&b=2`, a leading `?` allowed) into the values of the `known`
/// parameters, in `known`'s order. Unknown names are refused all at once, naming each; a name
/// given twice is refused; empty values are left out.
pub(crate) fn decode_pairs(
    raw: &str,
    known: &[&'static str],
) -> Result<Vec<Option<String>>, QueryError> {
    if raw.len() > QUERY_BYTES_MAX {
        return Err(QueryError::new(
            "query",
            format!(
                "the query string is {} bytes; at most {QUERY_BYTES_MAX} are read",
                raw.len()
            ),
        ));
    }
    let raw = raw.strip_prefix('?').unwrap_or(raw);
    let mut values: Vec<Option<String>> = vec![None; known.len()];
    let mut unknown: Vec<String> = Vec::new();
    for part in raw.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        let name = percent_decode("query", name)?;
        let Some(i) = known.iter().position(|k| *k == name) else {
            let shown: String = name.chars().take(NAME_ECHO_CHARS_MAX).collect();
            let shown = format!("{shown:?}");
            if !unknown.contains(&shown) {
                unknown.push(shown);
            }
            continue;
        };
        let value = percent_decode(known[i], value)?;
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        if values[i].is_some() {
            return Err(QueryError::new(known[i], "given twice; give it once"));
        }
        values[i] = Some(value.to_string());
    }
    if !unknown.is_empty() {
        return Err(QueryError::new(
            "query",
            format!(
                "unknown parameter{} {}; the known ones are {}",
                if unknown.len() == 1 { "" } else { "s" },
                unknown.join(", "),
                known.join(", ")
            ),
        ));
    }
    Ok(values)
}

/// `%XX` escapes and `+` as a space, as HTML forms encode; the result must be UTF-8.
fn percent_decode(param: &str, s: &str) -> Result<String, QueryError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => {
                        return Err(QueryError::new(
                            param,
                            format!(
                                "a % at byte {i} is not followed by two hex digits (write %25 for %)"
                            ),
                        ));
                    }
                }
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out)
        .map_err(|_| QueryError::new(param, "the decoded value is not UTF-8 text"))
}

/// Appends `name=value` to a query string, percent-encoding all but the characters that read
/// the same in a URL.
pub(crate) fn push_pair(out: &mut String, name: &str, value: &str) {
    if !out.is_empty() {
        out.push('&');
    }
    out.push_str(name);
    out.push('=');
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~*,!:@/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// One item of a number list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumberPattern {
    /// `1001`
    Exact(String),
    /// `12*`: starts with.
    Prefix(String),
    /// `*89`: ends with.
    Suffix(String),
    /// `*12*`: contains (no index serves it: the search reads rows in time order).
    Contains(String),
}

/// A number filter: `123`, `12*`, `*89`, `*12*`, a list of them (`1,2*,*3`: any of), or a
/// list after `!` (none of).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberFilter {
    pub negate: bool,
    pub items: Vec<NumberPattern>,
}

/// The characters a number pattern may hold besides letters and digits.
const NUMBER_PUNCTUATION: &str = "+#*._@-";

impl NumberFilter {
    /// Reads a number filter; `None` when it filters nothing (`*`).
    pub fn parse(param: &str, value: &str) -> Result<Option<NumberFilter>, QueryError> {
        let value = value.trim();
        let (negate, list) = match value.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        let mut items = Vec::new();
        let mut any = false;
        for (n, item) in list
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .enumerate()
        {
            if n >= NUMBER_ITEMS_MAX {
                return Err(QueryError::new(
                    param,
                    format!("more than {NUMBER_ITEMS_MAX} items; search for fewer at a time"),
                ));
            }
            if item.len() > NUMBER_ITEM_BYTES_MAX {
                return Err(QueryError::new(
                    param,
                    format!(
                        "an item is {} bytes long; at most {NUMBER_ITEM_BYTES_MAX}",
                        item.len()
                    ),
                ));
            }
            if let Some(c) = item
                .chars()
                .find(|&c| !c.is_ascii_alphanumeric() && !NUMBER_PUNCTUATION.contains(c))
            {
                let hint = if c == ' ' {
                    " (a + in a URL reads as a space: write %2B)"
                } else {
                    ""
                };
                return Err(QueryError::new(
                    param,
                    format!(
                        "the character {c:?} is not allowed; use digits, letters and {NUMBER_PUNCTUATION}{hint}"
                    ),
                ));
            }
            let core = item.trim_start_matches('*').trim_end_matches('*');
            if core.is_empty() {
                any = true;
                continue;
            }
            let lead = item.starts_with('*');
            let trail = item.ends_with('*');
            items.push(match (lead, trail) {
                (false, false) => NumberPattern::Exact(core.to_string()),
                (false, true) => NumberPattern::Prefix(core.to_string()),
                (true, false) => NumberPattern::Suffix(core.to_string()),
                (true, true) => NumberPattern::Contains(core.to_string()),
            });
        }
        if negate && list.trim().is_empty() {
            return Err(QueryError::new(param, "nothing follows the !"));
        }
        if any {
            if negate {
                return Err(QueryError::new(
                    param,
                    "!* excludes every number; leave the field empty to see all",
                ));
            }
            return Ok(None);
        }
        if items.is_empty() {
            return Ok(None);
        }
        Ok(Some(NumberFilter { negate, items }))
    }

    /// The filter as typed: `!12*,*89`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if self.negate {
            s.push('!');
        }
        for (i, p) in self.items.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            match p {
                NumberPattern::Exact(v) => s.push_str(v),
                NumberPattern::Prefix(v) => {
                    s.push_str(v);
                    s.push('*');
                }
                NumberPattern::Suffix(v) => {
                    s.push('*');
                    s.push_str(v);
                }
                NumberPattern::Contains(v) => {
                    s.push('*');
                    s.push_str(v);
                    s.push('*');
                }
            }
        }
        s
    }
}

/// An IP network: an address (`10.0.0.7`, `2001:db8::1`) or a CIDR (`10.0.0.0/8`,
/// `2001:db8::/32`), host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn parse(param: &str, value: &str) -> Result<IpNet, QueryError> {
        let value = value.trim();
        let (addr, len) = match value.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (value, None),
        };
        let addr = addr
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr);
        let addr: IpAddr = addr.parse().map_err(|_| {
            QueryError::new(
                param,
                "not an IP address or network (write 10.0.0.7, 10.0.0.0/8 or 2001:db8::/32)",
            )
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => {
                    return Err(QueryError::new(
                        param,
                        format!("the prefix length after / must be 0 to {max}"),
                    ));
                }
            },
        };
        let addr = match addr {
            IpAddr::V4(a) => {
                let bits = u32::from(a) & mask32(prefix);
                IpAddr::V4(bits.into())
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a) & mask128(prefix);
                IpAddr::V6(bits.into())
            }
        };
        Ok(IpNet { addr, prefix })
    }

    /// The network's first and last address as stored (16 bytes, IPv4 as v4-mapped IPv6).
    pub fn range(&self) -> ([u8; 16], [u8; 16]) {
        let (bits, prefix) = match self.addr {
            IpAddr::V4(a) => (u128::from(a.to_ipv6_mapped()), self.prefix + 96),
            IpAddr::V6(a) => (u128::from(a), self.prefix),
        };
        let m = mask128(prefix);
        ((bits & m).to_be_bytes(), (bits | !m).to_be_bytes())
    }

    /// A single address (`/32`, `/128`).
    pub fn is_host(&self) -> bool {
        self.prefix == if self.addr.is_ipv4() { 32 } else { 128 }
    }

    pub fn to_text(&self) -> String {
        if self.is_host() {
            self.addr.to_string()
        } else {
            format!("{}/{}", self.addr, self.prefix)
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

fn mask128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    }
}

/// The 16 bytes stored for the IP of an `ip:port` or `[v6]:port` address (or a bare IP),
/// IPv4 as v4-mapped IPv6; `None` when it is neither.
pub fn ip_bytes(addr: &str) -> Option<[u8; 16]> {
    let ip = match addr.parse::<std::net::SocketAddr>() {
        Ok(sa) => sa.ip(),
        Err(_) => addr.parse::<IpAddr>().ok()?,
    };
    Some(match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    })
}

/// The stored bytes back as an address (IPv4 for a v4-mapped one).
pub fn ip_of_bytes(b: &[u8]) -> Option<IpAddr> {
    let b: [u8; 16] = b.try_into().ok()?;
    let a = Ipv6Addr::from(b);
    Some(match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    })
}

/// Where the next page starts: the (time, id) of the last row of this one, written
/// `1732612345000000.42`. The next page holds the rows strictly older in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub time_us: i64,
    pub id: i64,
}

impl Cursor {
    pub fn parse(param: &str, value: &str) -> Result<Cursor, QueryError> {
        let bad = || {
            QueryError::new(
                param,
                "not a page cursor; pass the `next` of the previous page unchanged",
            )
        };
        let (t, i) = value.trim().split_once('.').ok_or_else(bad)?;
        Ok(Cursor {
            time_us: t.parse().map_err(|_| bad())?,
            id: i.parse().map_err(|_| bad())?,
        })
    }

    pub fn to_text(&self) -> String {
        format!("{}.{}", self.time_us, self.id)
    }
}

/// A time: seconds since the epoch, or RFC 3339 (`2026-11-25T14:30:05Z`, a fraction, an
/// offset `+01:00`; a date alone is its midnight UTC), as µs since the epoch.
pub fn parse_time(param: &str, value: &str) -> Result<i64, QueryError> {
    let bad = || {
        QueryError::new(
            param,
            "not a time; write seconds since the epoch or RFC 3339 such as 2026-11-25T14:30:05Z",
        )
    };
    let s = value.trim();
    // An offset such as +01:00 at the end of a date with a time (a + left unencoded in a URL
    // arrives as a space, so a space takes its place).
    let split = s
        .len()
        .checked_sub(6)
        .filter(|&i| s.is_char_boundary(i))
        .map(|i| s.split_at(i));
    let (s, offset_s) = match split {
        Some((head, tail))
            if head.contains(':')
                && tail.is_ascii()
                && matches!(tail.as_bytes()[0], b'+' | b'-' | b' ')
                && tail.as_bytes()[3] == b':' =>
        {
            let hh: i64 = tail[1..3].parse().map_err(|_| bad())?;
            let mm: i64 = tail[4..6].parse().map_err(|_| bad())?;
            if !tail[1..3].bytes().all(|b| b.is_ascii_digit())
                || !tail[4..6].bytes().all(|b| b.is_ascii_digit())
                || hh > 23
                || mm > 59
            {
                return Err(bad());
            }
            let sign = if tail.as_bytes()[0] == b'-' { -1 } else { 1 };
            (head, sign * (hh * 3600 + mm * 60))
        }
        _ => (s, 0),
    };
    let us = utc::parse_us(s).ok_or_else(bad)? - offset_s * 1_000_000;
    if !(utc::SECS_MIN * 1_000_000..=utc::SECS_MAX * 1_000_000).contains(&us) {
        return Err(QueryError::new(
            param,
            "the time is outside the years 0 to 9999",
        ));
    }
    Ok(us)
}

/// A time as [`parse_time`] reads it back: RFC 3339 UTC, with µs when it has a fraction.
pub fn time_text(us: i64) -> String {
    if us % 1_000_000 == 0 {
        utc::format_s(us / 1_000_000)
    } else {
        utc::format_us(us)
    }
}

/// A finite number, at least `min` when given.
pub(crate) fn parse_number(param: &str, value: &str, min: Option<f64>) -> Result<f64, QueryError> {
    let v: f64 = value
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| QueryError::new(param, "not a number (write 3.5)"))?;
    if let Some(min) = min
        && v < min
    {
        return Err(QueryError::new(param, format!("must be at least {min}")));
    }
    Ok(v)
}

/// `limit`: 1 to [`LIMIT_MAX`].
/// A yes-or-no parameter: `1`, `true`, `yes` or `0`, `false`, `no`.
pub(crate) fn parse_flag(param: &str, value: &str) -> Result<bool, QueryError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(QueryError::new(param, "must be 1 (yes) or 0 (no)")),
    }
}

pub(crate) fn parse_limit(param: &str, value: &str) -> Result<usize, QueryError> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=LIMIT_MAX).contains(&n) => Ok(n),
        _ => Err(QueryError::new(
            param,
            format!("must be a whole number from 1 to {LIMIT_MAX}"),
        )),
    }
}

/// Free text compared exactly (a Call-ID, a sensor): bounded, without control characters.
pub(crate) fn parse_text(param: &str, value: &str) -> Result<String, QueryError> {
    if value.len() > TEXT_BYTES_MAX {
        return Err(QueryError::new(
            param,
            format!("{} bytes long; at most {TEXT_BYTES_MAX}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(QueryError::new(param, "holds a control character"));
    }
    Ok(value.to_string())
}

/// `from` and `to`, checked against each other.
pub(crate) fn parse_range(
    from: Option<&str>,
    to: Option<&str>,
) -> Result<(Option<i64>, Option<i64>), QueryError> {
    let from_us = from.map(|v| parse_time("from", v)).transpose()?;
    let to_us = to.map(|v| parse_time("to", v)).transpose()?;
    if let (Some(f), Some(t)) = (from_us, to_us)
        && t <= f
    {
        return Err(QueryError::new(
            "to",
            "must be later than from (from is inclusive, to exclusive)",
        ));
    }
    Ok((from_us, to_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_percent_decoded_with_plus_as_space() {
        let v = decode_pairs("?a=%2B49%20x+y&b=", &["a", "b"]).unwrap();
        assert_eq!(v, vec![Some("+49 x y".to_string()), None]);
    }

    #[test]
    fn unknown_and_repeated_parameters_are_refused_by_name() {
        let e = decode_pairs("a=1&zz=2&yy=3", &["a"]).unwrap_err();
        assert_eq!(e.param, "query");
        assert!(e.problem.contains("\"zz\", \"yy\""), "{e}");
        let e = decode_pairs("a=1&a=2", &["a"]).unwrap_err();
        assert_eq!(e.to_string(), "a: given twice; give it once");
        let e = decode_pairs("a=%G1", &["a"]).unwrap_err();
        assert!(e.to_string().starts_with("a: a % at byte 0"), "{e}");
        let e = decode_pairs("a=%FF", &["a"]).unwrap_err();
        assert_eq!(e.to_string(), "a: the decoded value is not UTF-8 text");
        let long = "a=".to_string() + &"1".repeat(QUERY_BYTES_MAX);
        assert_eq!(decode_pairs(&long, &["a"]).unwrap_err().param, "query");
    }

    #[test]
    fn number_patterns_read_as_typed() {
        let f = NumberFilter::parse("caller", "!12*, *89,*5*,1001")
            .unwrap()
            .unwrap();
        assert!(f.negate);
        assert_eq!(
            f.items,
            vec![
                NumberPattern::Prefix("12".into()),
                NumberPattern::Suffix("89".into()),
                NumberPattern::Contains("5".into()),
                NumberPattern::Exact("1001".into()),
            ]
        );
        assert_eq!(f.to_text(), "!12*,*89,*5*,1001");
        assert_eq!(NumberFilter::parse("caller", "*").unwrap(), None);
        assert_eq!(NumberFilter::parse("caller", "1,*").unwrap(), None);
    }

    #[test]
    fn number_errors_name_the_parameter_and_the_problem() {
        let e = NumberFilter::parse("called", "12%3").unwrap_err();
        assert_eq!(e.param, "called");
        assert!(e.problem.contains("'%'"), "{e}");
        let e = NumberFilter::parse("caller", " 49 30").unwrap_err();
        assert!(e.problem.contains("%2B"), "{e}");
        let e = NumberFilter::parse("caller", &vec!["1"; 33].join(",")).unwrap_err();
        assert!(e.problem.contains("more than 32"), "{e}");
        let e = NumberFilter::parse("caller", &"9".repeat(65)).unwrap_err();
        assert!(e.problem.contains("65 bytes"), "{e}");
        assert!(NumberFilter::parse("caller", "!").is_err());
        assert!(NumberFilter::parse("caller", "!*").is_err());
    }

    #[test]
    fn networks_clear_host_bits_and_map_ipv4() {
        let n = IpNet::parse("ip", "10.1.2.3/8").unwrap();
        assert_eq!(n.to_text(), "10.0.0.0/8");
        let (lo, hi) = n.range();
        assert_eq!(lo, ip_bytes("10.0.0.0:1").unwrap());
        assert_eq!(hi, ip_bytes("10.255.255.255").unwrap());
        let n = IpNet::parse("ip", "[2001:db8::1]").unwrap();
        assert!(n.is_host());
        assert_eq!(n.range().0, ip_bytes("[2001:db8::1]:5060").unwrap());
        assert!(IpNet::parse("ip", "10.0.0.0/33").is_err());
        assert!(IpNet::parse("ip", "example.com").is_err());
        assert_eq!(ip_bytes("nonsense"), None);
        assert_eq!(
            ip_of_bytes(&ip_bytes("192.0.2.1:5060").unwrap()),
            Some("192.0.2.1".parse().unwrap())
        );
    }

    #[test]
    fn times_read_rfc_3339_with_offsets_and_epoch_seconds() {
        let z = parse_time("from", "2026-11-25T14:30:05Z").unwrap();
        assert_eq!(parse_time("from", "1795617005").unwrap(), z);
        assert_eq!(parse_time("from", "2026-11-25T15:30:05+01:00").unwrap(), z);
        assert_eq!(parse_time("from", "2026-11-25T15:30:05 01:00").unwrap(), z);
        assert_eq!(parse_time("from", "2026-11-25T09:30:05-05:00").unwrap(), z);
        assert_eq!(parse_time("from", &time_text(z + 1)).unwrap(), z + 1);
        let e = parse_time("to", "yesterday").unwrap_err();
        assert!(e.to_string().starts_with("to: not a time"), "{e}");
        assert!(parse_time("to", "2026-11-25T15:30:05+25:00").is_err());
    }
}
