//! The call fields read from the signalling beyond numbers and addresses: the User-Agent of
//! each side (`caller_ua`, `callee_ua`), the From and To domains, the Request-URI's user, and
//! the values of the headers the capture is told to keep (`[capture] headers`); their columns,
//! their indexes, the migration that adds them (SQLite 3, PostgreSQL 7) and their filters in
//! the calls search ([`FieldFilter`]).
//!
//! The text fields are stored as they are, empty when the call did not say (so that a negated
//! filter, `from_domain=!example.com`, finds them; rows from before the migration hold NULL and
//! are found by no filter on these fields). `headers` is stored as one JSON object (`{"x-account":"1234"}`), names in lower case
//! (header names are case-insensitive), NULL when the call carried none of them. A header
//! filter (`header=X-Account:1234`, or `1234*` for a prefix) looks for the pair as the object
//! spells it, so a value is matched whole or from its start, never in its middle; it has no
//! index and is checked on each row of a walk in time order (bounded per page like every
//! unindexed filter: [`crate::search::SCAN_ROWS_MAX`]).

use std::collections::BTreeMap;

use crate::plan::Pred;
use crate::query::{self, NumberFilter, QueryError};
use crate::search::number_pred;

/// Headers kept per call at most (`[capture] headers`: the configuration refuses more).
pub const HEADERS_MAX: usize = 16;
/// Bytes kept of one header's value (cut at a character boundary), and of a User-Agent.
pub const HEADER_VALUE_BYTES_MAX: usize = 256;
/// Bytes of a header name.
pub const HEADER_NAME_BYTES_MAX: usize = 64;
/// Bytes kept of a domain or a Request-URI user (the monitor cuts there; an index entry stays
/// far below PostgreSQL's limit).
pub const FIELD_BYTES_MAX: usize = 256;

/// The columns of `cdr` this module adds, with their SQLite and PostgreSQL types, in
/// [`crate::CdrCall`]'s order (they end [`crate::CALL_COLUMNS`]).
pub const FIELD_COLUMNS: [(&str, &str, &str); 6] = [
    ("caller_ua", "TEXT", "TEXT"),
    ("callee_ua", "TEXT", "TEXT"),
    ("from_domain", "TEXT", "TEXT"),
    ("to_domain", "TEXT", "TEXT"),
    ("ruri_user", "TEXT", "TEXT"),
    ("headers", "TEXT", "TEXT"),
];

/// SQLite's indexes of the fields a search can narrow to few calls (the rowid ends each).
pub const SQLITE_FIELD_INDEXES: [(&str, &str); 3] = [
    ("cdr_from_domain_start", "cdr(from_domain, start_us)"),
    ("cdr_to_domain_start", "cdr(to_domain, start_us)"),
    ("cdr_ruri_user_start", "cdr(ruri_user, start_us)"),
];

/// PostgreSQL's, in both layouts (created on a partitioned parent, they reach every day).
pub const PG_FIELD_INDEXES: [(&str, &str); 3] = [
    (
        "cdr_from_domain_start",
        "cdr (from_domain COLLATE \"C\", start_us, id)",
    ),
    (
        "cdr_to_domain_start",
        "cdr (to_domain COLLATE \"C\", start_us, id)",
    ),
    (
        "cdr_ruri_user_start",
        "cdr (ruri_user COLLATE \"C\", start_us, id)",
    ),
];

/// `s` cut to at most `max` bytes at a character boundary.
pub fn cut_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The `headers` column of a call: its JSON object, or NULL without headers.
pub(crate) fn headers_text(h: &BTreeMap<String, String>) -> Option<String> {
    (!h.is_empty()).then(|| serde_json::to_string(h).unwrap_or_default())
}

/// The headers of a `headers` column (a value that is not the object reads as none: it came
/// from another program).
pub(crate) fn headers_of(text: Option<&str>) -> BTreeMap<String, String> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// The search parameters of these fields, in [`FieldFilter::from_values`]' order.
pub const FIELD_PARAMS: [&str; 7] = [
    "ua",
    "caller_ua",
    "callee_ua",
    "from_domain",
    "to_domain",
    "ruri_user",
    "header",
];

/// A header filter: `NAME:VALUE` (the value whole) or `NAME:VALUE*` (its start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderFilter {
    /// Lower case.
    pub name: String,
    pub value: String,
    pub prefix: bool,
}

impl HeaderFilter {
    pub fn parse(param: &str, text: &str) -> Result<HeaderFilter, QueryError> {
        let text = query::parse_text(param, text)?;
        let Some((name, value)) = text.split_once(':') else {
            return Err(QueryError::new(
                param,
                "write NAME:VALUE (X-Account:1234), or NAME:VALUE* for values that start so",
            ));
        };
        let name = name.trim();
        if name.is_empty() || name.len() > HEADER_NAME_BYTES_MAX || !name.bytes().all(is_token_byte)
        {
            return Err(QueryError::new(
                param,
                format!(
                    "{:?} is not a header name (letters, digits and -._!%*+`'~, at most {HEADER_NAME_BYTES_MAX} bytes)",
                    cut_utf8(name, HEADER_NAME_BYTES_MAX)
                ),
            ));
        }
        let value = value.trim();
        let (value, prefix) = match value.strip_suffix('*') {
            Some(v) => (v, true),
            None => (value, false),
        };
        Ok(HeaderFilter {
            name: name.to_ascii_lowercase(),
            value: value.to_string(),
            prefix,
        })
    }

    pub fn to_text(&self) -> String {
        let star = if self.prefix { "*" } else { "" };
        format!("{}:{}{star}", self.name, self.value)
    }

    /// What the stored JSON object holds when the call matches: `"name":"value"` (without the
    /// closing quote for a prefix). serde_json writes both the same way.
    fn needle(&self) -> String {
        let name = serde_json::to_string(&self.name).unwrap_or_default();
        let mut value = serde_json::to_string(&self.value).unwrap_or_default();
        if self.prefix {
            value.pop();
        }
        format!("{name}:{value}")
    }
}

/// RFC 3261 `token` characters: what a header name is made of.
pub fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b)
}

/// The calls search's filters on these fields. Every field left empty filters nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldFilter {
    /// Either side's User-Agent contains this (ASCII case ignored).
    pub ua: Option<String>,
    pub caller_ua: Option<String>,
    pub callee_ua: Option<String>,
    /// Number-style patterns (`example.com`, `sip.*`, `*.example.com`, lists, `!`), lower case.
    pub from_domain: Option<NumberFilter>,
    pub to_domain: Option<NumberFilter>,
    pub ruri_user: Option<NumberFilter>,
    pub header: Option<HeaderFilter>,
}

impl FieldFilter {
    /// The filter from the values of [`FIELD_PARAMS`], in order.
    pub(crate) fn from_values(v: &[Option<&str>]) -> Result<FieldFilter, QueryError> {
        let text = |i: usize| {
            v[i].map(|x| query::parse_text(FIELD_PARAMS[i], x))
                .transpose()
        };
        let pattern = |i: usize, lower: bool| -> Result<Option<NumberFilter>, QueryError> {
            let Some(x) = v[i] else { return Ok(None) };
            let x = if lower {
                x.to_ascii_lowercase()
            } else {
                x.to_string()
            };
            NumberFilter::parse(FIELD_PARAMS[i], &x)
        };
        Ok(FieldFilter {
            ua: text(0)?,
            caller_ua: text(1)?,
            callee_ua: text(2)?,
            from_domain: pattern(3, true)?,
            to_domain: pattern(4, true)?,
            ruri_user: pattern(5, false)?,
            header: v[6]
                .map(|x| HeaderFilter::parse(FIELD_PARAMS[6], x))
                .transpose()?,
        })
    }

    /// Appends this filter's pairs to a query string.
    pub(crate) fn push_pairs(&self, p: &mut String) {
        for (name, v) in [
            ("ua", &self.ua),
            ("caller_ua", &self.caller_ua),
            ("callee_ua", &self.callee_ua),
        ] {
            if let Some(v) = v {
                query::push_pair(p, name, v);
            }
        }
        for (name, f) in [
            ("from_domain", &self.from_domain),
            ("to_domain", &self.to_domain),
            ("ruri_user", &self.ruri_user),
        ] {
            if let Some(f) = f {
                query::push_pair(p, name, &f.to_text());
            }
        }
        if let Some(h) = &self.header {
            query::push_pair(p, "header", &h.to_text());
        }
    }

    /// Whether any field is set.
    pub fn is_empty(&self) -> bool {
        *self == FieldFilter::default()
    }

    /// Whether call `c` passes, as the search's SQL decides on its row (for the alert rules'
    /// scopes, decided on each call as it ends).
    pub fn matches(&self, c: &crate::CdrCall) -> bool {
        let has = |hay: &str, needle: &str| {
            hay.to_ascii_lowercase()
                .contains(&needle.to_ascii_lowercase())
        };
        if let Some(v) = &self.ua
            && !has(&c.caller_ua, v)
            && !has(&c.callee_ua, v)
        {
            return false;
        }
        let pairs = [
            (&self.caller_ua, &c.caller_ua),
            (&self.callee_ua, &c.callee_ua),
        ];
        if pairs
            .iter()
            .any(|(f, v)| f.as_ref().is_some_and(|f| !has(v, f)))
        {
            return false;
        }
        let patterns = [
            (&self.from_domain, &c.from_domain),
            (&self.to_domain, &c.to_domain),
            (&self.ruri_user, &c.ruri_user),
        ];
        if patterns
            .iter()
            .any(|(f, v)| f.as_ref().is_some_and(|f| !f.matches(v)))
        {
            return false;
        }
        match &self.header {
            None => true,
            Some(h) => c.headers.get(&h.name).is_some_and(|v| {
                if h.prefix {
                    v.starts_with(&h.value)
                } else {
                    *v == h.value
                }
            }),
        }
    }

    /// The predicates of this filter.
    pub(crate) fn preds(&self, p: &mut Vec<Pred>) {
        let ua = |col, v: &String| Pred::ContainsNoCase(col, v.clone());
        if let Some(v) = &self.ua {
            p.push(Pred::Or(vec![ua("caller_ua", v), ua("callee_ua", v)]));
        }
        if let Some(v) = &self.caller_ua {
            p.push(ua("caller_ua", v));
        }
        if let Some(v) = &self.callee_ua {
            p.push(ua("callee_ua", v));
        }
        let indexed = [
            (&self.from_domain, "from_domain", "cdr_from_domain_start"),
            (&self.to_domain, "to_domain", "cdr_to_domain_start"),
            (&self.ruri_user, "ruri_user", "cdr_ruri_user_start"),
        ];
        for (f, column, index) in indexed {
            if let Some(f) = f {
                p.push(number_pred(f, column, index, None));
            }
        }
        if let Some(h) = &self.header {
            p.push(Pred::Contains("headers", h.needle()));
        }
    }
}

/// SQLite's migration 3: the columns a table lacks, and their indexes.
pub(crate) fn sqlite_migrate(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info('cdr')")?;
    let have: Vec<String> = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for (name, ty, _) in FIELD_COLUMNS {
        if !have.iter().any(|h| h == name) {
            conn.execute_batch(&format!("ALTER TABLE cdr ADD COLUMN {name} {ty}"))?;
        }
    }
    for (name, def) in SQLITE_FIELD_INDEXES {
        conn.execute_batch(&crate::create_index_sql(name, def))?;
    }
    Ok(())
}

/// PostgreSQL's migration 7, in either layout: `ADD COLUMN IF NOT EXISTS` and `CREATE INDEX IF
/// NOT EXISTS`, so that it applies again to what it finds.
pub(crate) fn pg_migrate_sql() -> String {
    let adds: Vec<String> = FIELD_COLUMNS
        .iter()
        .map(|(name, _, ty)| format!("ADD COLUMN IF NOT EXISTS {name} {ty}"))
        .collect();
    let mut sql = format!("ALTER TABLE cdr {};", adds.join(", "));
    for (name, def) in PG_FIELD_INDEXES {
        sql += &crate::create_index_sql(name, def);
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calls_search_takes_these_parameters_in_order() {
        let all = crate::search::CALL_PARAMS;
        assert_eq!(all[all.len() - FIELD_PARAMS.len()..], FIELD_PARAMS);
    }

    #[test]
    fn a_value_is_cut_at_a_character_and_a_header_filter_reads_back() {
        assert_eq!(cut_utf8("aé", 2), "a");
        assert_eq!(cut_utf8("aé", 3), "aé");
        let f = HeaderFilter::parse("header", "X-Account: 12\"3*").unwrap();
        assert_eq!(f.name, "x-account");
        assert!(f.prefix);
        assert_eq!(f.needle(), r#""x-account":"12\"3"#);
        assert_eq!(HeaderFilter::parse("header", &f.to_text()).unwrap(), f);
        assert!(HeaderFilter::parse("header", "no colon").is_err());
        assert!(HeaderFilter::parse("header", "bad name:1").is_err());
        let mut h = BTreeMap::new();
        h.insert("x-account".to_string(), "12\"34".to_string());
        assert!(headers_text(&h).unwrap().contains(&f.needle()));
        assert_eq!(headers_of(headers_text(&h).as_deref()), h);
        assert!(headers_of(Some("not json")).is_empty());
    }
}
