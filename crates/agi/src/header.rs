//! The session header: `name: value` lines ending with an empty line.
//!
//! Asterisk 22 writes, in this order: `agi_network`, `agi_network_script` (only when the URL has a
//! path), `agi_request`, `agi_channel`, `agi_language`, `agi_type`, `agi_uniqueid`, `agi_version`,
//! `agi_callerid`, `agi_calleridname`, `agi_callingpres`, `agi_callingani2`, `agi_callington`,
//! `agi_callingtns`, `agi_dnid`, `agi_rdnis`, `agi_context`, `agi_extension`, `agi_priority`,
//! `agi_enhanced`, `agi_accountcode`, `agi_threadid`, then `agi_arg_1..N`. Values may contain `:`
//! and may be empty (`agi_accountcode: `), so a line splits on its first `:` and one following
//! space is dropped; the rest of the value is kept byte for byte (`agi_arg_2: a b ` keeps its
//! trailing space).

use crate::route::Route;
use std::fmt::Write as _;

/// Bounds applied while a header is read. Both come from the server's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderLimits {
    /// Longest accepted line, without its `\n`.
    pub max_line_bytes: usize,
    /// Most `name: value` lines (arguments included).
    pub max_variables: usize,
}

impl Default for HeaderLimits {
    fn default() -> Self {
        // Asterisk passes at most 127 arguments plus 22 fixed variables; 256 leaves room for
        // variables a future Asterisk may add without letting a client make us store thousands.
        HeaderLimits {
            max_line_bytes: 8192,
            max_variables: 256,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header line {line} is {bytes} bytes, over the limit of {max} (max_line_bytes)")]
    LineTooLong {
        line: usize,
        bytes: usize,
        max: usize,
    },
    #[error("header has more than {max} variables (max_header_variables)")]
    TooManyVariables { max: usize },
    #[error("header line {line} is not `name: value`: {text:?}")]
    Malformed { line: usize, text: String },
    #[error("header line {line}: argument number {index} is over {max} (max_header_variables)")]
    ArgumentIndex {
        line: usize,
        index: usize,
        max: usize,
    },
    #[error("header ended before its empty line")]
    Truncated,
}

/// A parsed session header. Variables keep their order and exact values; arguments are also
/// available by position through [`Header::args`]. Names and values live in one string, arguments
/// included (they are not copied), so a header costs a couple of allocations rather than two per
/// variable, and about its own size: a session keeps it for its whole life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    text: String,
    /// Byte ranges of each variable's name and value in `text`, in arrival order.
    vars: Vec<(Span, Span)>,
    /// Byte ranges of `agi_arg_1..N` in `text`; an empty range for a missing one.
    args: Vec<Span>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Header {
    /// Parses a complete header block (lines ending in `\n`, closed by an empty line). Bytes after
    /// the empty line are ignored; use [`HeaderReader`] to parse as lines arrive.
    pub fn parse(block: &[u8], limits: HeaderLimits) -> Result<Header, HeaderError> {
        let mut reader = HeaderReader::new(limits);
        for line in block.split_inclusive(|&b| b == b'\n') {
            if !line.ends_with(b"\n") {
                break;
            }
            if let Some(header) = reader.push_line(line)? {
                return Ok(header);
            }
        }
        Err(HeaderError::Truncated)
    }

    /// Builds a header from variables in order (used by the emulator and tests).
    pub fn from_vars<N: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (N, V)>,
    ) -> Header {
        let mut h = Header::default();
        for (n, v) in vars {
            h.insert(&n.into(), &v.into());
        }
        h
    }

    fn insert(&mut self, name: &str, value: &str) {
        // An index past the cap stays a plain variable: `agi_arg_4000000000` must not make us
        // allocate four billion arguments. (The reader refuses such a line before it gets here.)
        let index = arg_index(name).filter(|&n| n <= ARG_INDEX_MAX);
        // Arguments normally arrive in order; a gap is filled with empty arguments so that
        // `args()[n-1]` is always `agi_arg_n`.
        if let Some(n) = index
            && self.args.len() < n
        {
            self.args.resize(n, Span { start: 0, end: 0 });
        }
        let name = self.append(name);
        let value = self.append(value);
        if let Some(n) = index {
            self.args[n - 1] = value;
        }
        self.vars.push((name, value));
    }

    fn append(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        // A header is bounded by max_line_bytes × max_variables, far below 4 GiB.
        Span {
            start: start as u32,
            end: self.text.len() as u32,
        }
    }

    fn span(&self, s: Span) -> &str {
        &self.text[s.start as usize..s.end as usize]
    }

    /// The value of a variable by its full name (`agi_channel`), if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(n, _)| self.span(*n) == name)
            .map(|(_, v)| self.span(*v))
    }

    /// Every variable in the order Asterisk sent them, arguments included.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars
            .iter()
            .map(|(n, v)| (self.span(*n), self.span(*v)))
    }

    /// `agi_arg_1..N` by position (index 0 is `agi_arg_1`). Empty arguments are kept.
    pub fn args(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.args.iter().map(|a| self.span(*a))
    }

    /// `agi_arg_N` by its number `n` (from 1), if the header has it.
    pub fn arg(&self, n: usize) -> Option<&str> {
        let i = n.checked_sub(1)?;
        self.args.get(i).map(|a| self.span(*a))
    }

    fn field(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    /// `agi_network: yes` marks a FastAGI session.
    pub fn is_network(&self) -> bool {
        self.get("agi_network") == Some("yes")
    }
    /// `agi_network_script`: the URL's path with its query, absent when the URL has no path.
    pub fn network_script(&self) -> Option<&str> {
        self.get("agi_network_script")
    }
    pub fn request(&self) -> &str {
        self.field("agi_request")
    }
    pub fn channel(&self) -> &str {
        self.field("agi_channel")
    }
    pub fn language(&self) -> &str {
        self.field("agi_language")
    }
    pub fn channel_type(&self) -> &str {
        self.field("agi_type")
    }
    pub fn uniqueid(&self) -> &str {
        self.field("agi_uniqueid")
    }
    pub fn version(&self) -> &str {
        self.field("agi_version")
    }
    pub fn callerid(&self) -> &str {
        self.field("agi_callerid")
    }
    pub fn calleridname(&self) -> &str {
        self.field("agi_calleridname")
    }
    pub fn dnid(&self) -> &str {
        self.field("agi_dnid")
    }
    pub fn rdnis(&self) -> &str {
        self.field("agi_rdnis")
    }
    pub fn context(&self) -> &str {
        self.field("agi_context")
    }
    pub fn extension(&self) -> &str {
        self.field("agi_extension")
    }
    pub fn priority(&self) -> &str {
        self.field("agi_priority")
    }
    pub fn accountcode(&self) -> &str {
        self.field("agi_accountcode")
    }

    /// The script part of the request: `agi_network_script`, or, from a client that leaves that
    /// line out, the path and query of `agi_request` (`agi://host:port/PATH?QUERY`), which is
    /// what Asterisk would have written. `None` when neither names one.
    pub fn script(&self) -> Option<&str> {
        self.network_script()
            .or_else(|| script_of_request(self.get("agi_request")?))
    }

    /// The route asked for: [`Header::script`] split into a path and query parameters.
    /// A request without a path (`agi://127.0.0.1`) has the empty route.
    pub fn route(&self) -> Route {
        Route::parse(self.script().unwrap_or(""))
    }

    /// The header lines a route is read from that this header lacks (both, or none).
    pub fn missing_route_lines(&self) -> &'static [&'static str] {
        match (self.get("agi_network_script"), self.get("agi_request")) {
            (None, None) => &["agi_network_script", "agi_request"],
            _ => &[],
        }
    }

    /// Writes the header as Asterisk would: every variable, then the empty line. With
    /// `network = false` the `agi_network*` lines are left out, which is exactly what a classic
    /// (forked) AGI script reads on its stdin.
    pub fn encode(&self, network: bool) -> String {
        let mut out = String::with_capacity(64 + self.vars.len() * 40);
        for (n, v) in self.vars() {
            if !network && n.starts_with("agi_network") {
                continue;
            }
            let _ = writeln!(out, "{n}: {v}");
        }
        out.push('\n');
        out
    }

    /// Replaces a variable's value, or appends it when absent.
    pub fn set(&mut self, name: &str, value: &str) {
        let vars: Vec<(String, String)> = self
            .vars()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let mut rebuilt = Header::default();
        let mut found = false;
        for (n, v) in &vars {
            if n == name {
                found = true;
                rebuilt.insert(n, value);
            } else {
                rebuilt.insert(n, v);
            }
        }
        if !found {
            rebuilt.insert(name, value);
        }
        *self = rebuilt;
    }
}

/// The highest `agi_arg_N` kept by position (Asterisk passes at most 127).
const ARG_INDEX_MAX: usize = 1024;

fn arg_index(name: &str) -> Option<usize> {
    let n: usize = name.strip_prefix("agi_arg_")?.parse().ok()?;
    (n >= 1).then_some(n)
}

/// Reads a header one line at a time, enforcing [`HeaderLimits`]. The IO layer hands it each
/// line as it arrives (with or without the trailing `\n`, and may pass an over-long line's first
/// bytes to have it rejected by length).
#[derive(Debug)]
pub struct HeaderReader {
    limits: HeaderLimits,
    header: Header,
    lines: usize,
}

impl HeaderReader {
    pub fn new(limits: HeaderLimits) -> Self {
        HeaderReader {
            limits,
            header: Header::default(),
            lines: 0,
        }
    }

    /// Feeds one line. Returns the header when the empty line arrives.
    pub fn push_line(&mut self, line: &[u8]) -> Result<Option<Header>, HeaderError> {
        self.lines += 1;
        // Asterisk ends header lines with `\n` alone; a CR before it belongs to the value, and
        // keeping it keeps the header byte for byte (scripts are handed it again).
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.len() > self.limits.max_line_bytes {
            return Err(HeaderError::LineTooLong {
                line: self.lines,
                bytes: line.len(),
                max: self.limits.max_line_bytes,
            });
        }
        if line.is_empty() {
            let mut header = std::mem::take(&mut self.header);
            // Grown by doubling as lines came; kept for the session's life.
            header.text.shrink_to_fit();
            header.vars.shrink_to_fit();
            return Ok(Some(header));
        }
        if self.header.vars.len() >= self.limits.max_variables {
            return Err(HeaderError::TooManyVariables {
                max: self.limits.max_variables,
            });
        }
        let text = crate::line_text(line);
        let malformed = || HeaderError::Malformed {
            line: self.lines,
            text: text.to_string(),
        };
        let (name, value) = text.split_once(':').ok_or_else(malformed)?;
        if name.is_empty()
            || name
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(malformed());
        }
        let value = value.strip_prefix(' ').unwrap_or(value);
        if let Some(index) = arg_index(name)
            && index > self.limits.max_variables
        {
            return Err(HeaderError::ArgumentIndex {
                line: self.lines,
                index,
                max: self.limits.max_variables,
            });
        }
        self.header.insert(name, value);
        Ok(None)
    }

    /// Lines consumed so far.
    pub fn lines(&self) -> usize {
        self.lines
    }
}

/// Drops a trailing `\n` and one `\r` before it (some AGI clients end lines with CRLF).
pub(crate) fn strip_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `PATH?QUERY` of `agi://host[:port]/PATH?QUERY` (or `hagi://`, the scheme ignoring case).
fn script_of_request(request: &str) -> Option<&str> {
    let scheme_end = request.find("://")?;
    let scheme = &request[..scheme_end];
    if !scheme.eq_ignore_ascii_case("agi") && !scheme.eq_ignore_ascii_case("hagi") {
        return None;
    }
    let (_, script) = request[scheme_end + 3..].split_once('/')?;
    (!script.is_empty()).then_some(script)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S02: &[u8] = b"agi_network: yes\nagi_network_script: some/script.php?a=1&b=two\n\
agi_request: agi://127.0.0.1:4573/some/script.php?a=1&b=two\nagi_channel: Local/101@agitest-00000002;2\n\
agi_accountcode: \nagi_arg_1: arg one\nagi_arg_2: arg2\n\n";

    #[test]
    fn without_agi_network_script_the_route_comes_from_agi_request() {
        let parse = |text: &str| Header::parse(text.as_bytes(), HeaderLimits::default()).unwrap();
        let h = parse("agi_network: yes\nagi_request: agi://[::1]:4573/ivr/main?lang=fr\n\n");
        assert_eq!(h.script(), Some("ivr/main?lang=fr"));
        assert_eq!(h.route().path, "ivr/main");
        assert_eq!(h.route().param("lang"), Some("fr"));
        assert!(h.missing_route_lines().is_empty());
        let h = parse("agi_request: HAGI://pbx.example/dialparties.agi\n\n");
        assert_eq!(h.route().path, "dialparties.agi");
        // No path: the empty route, as with agi_network_script absent from Asterisk's header.
        assert_eq!(parse("agi_request: agi://127.0.0.1\n\n").script(), None);
        // A classic AGI request is a file name, not a URL: no route from it.
        assert_eq!(
            parse("agi_request: /var/lib/asterisk/agi-bin/x.php\n\n").script(),
            None
        );
        let neither = parse("agi_channel: SIP/1\n\n");
        assert_eq!(
            neither.missing_route_lines(),
            ["agi_network_script", "agi_request"]
        );
        // When both are there, agi_network_script wins, as Asterisk writes them the same.
        let both = parse("agi_network_script: a\nagi_request: agi://h/b\n\n");
        assert_eq!(both.route().path, "a");
    }

    #[test]
    fn values_with_colons_and_empty_values() {
        let h = Header::parse(S02, HeaderLimits::default()).unwrap();
        assert_eq!(
            h.request(),
            "agi://127.0.0.1:4573/some/script.php?a=1&b=two"
        );
        assert_eq!(h.accountcode(), "");
        assert_eq!(h.args().collect::<Vec<_>>(), ["arg one", "arg2"]);
        let r = h.route();
        assert_eq!(r.path, "some/script.php");
        assert_eq!(r.param("b"), Some("two"));
    }

    #[test]
    fn encode_round_trips_and_drops_network_lines_for_scripts() {
        let h = Header::parse(S02, HeaderLimits::default()).unwrap();
        assert_eq!(h.encode(true).as_bytes(), S02);
        let local = h.encode(false);
        assert!(local.starts_with("agi_request: "));
        assert!(local.ends_with("agi_arg_2: arg2\n\n"));
    }

    #[test]
    fn limits_are_enforced() {
        let limits = HeaderLimits {
            max_line_bytes: 16,
            max_variables: 2,
        };
        let err = Header::parse(b"agi_request: 0123456789\n\n", limits).unwrap_err();
        assert!(matches!(
            err,
            HeaderError::LineTooLong {
                line: 1,
                bytes: 23,
                max: 16
            }
        ));
        let err = Header::parse(b"a: 1\nb: 2\nc: 3\n\n", limits).unwrap_err();
        assert_eq!(err, HeaderError::TooManyVariables { max: 2 });
        assert_eq!(
            Header::parse(b"a: 1\n", limits),
            Err(HeaderError::Truncated)
        );
        assert!(matches!(
            Header::parse(b"no colon here\n\n", HeaderLimits::default()),
            Err(HeaderError::Malformed { line: 1, .. })
        ));
    }

    #[test]
    fn a_huge_argument_number_is_refused_not_allocated() {
        // Found by fuzzing: `agi_arg_<huge>` made the header resize its arguments to that size.
        let err = Header::parse(
            b"agi_arg_3287003324691717234: x\n\n",
            HeaderLimits::default(),
        );
        assert!(matches!(
            err,
            Err(HeaderError::ArgumentIndex {
                index: 3287003324691717234,
                ..
            })
        ));
        let h = Header::from_vars([("agi_arg_99999999", "x")]);
        assert_eq!(h.args().len(), 0);
        assert_eq!(h.get("agi_arg_99999999"), Some("x"));
    }

    #[test]
    fn a_carriage_return_in_a_value_is_kept_and_round_trips() {
        // Found by fuzzing: stripping an optional CR lost one per parse/encode round.
        let h = Header::parse(b"agi_arg_1: arg3\r\r\n\n", HeaderLimits::default()).unwrap();
        assert_eq!(h.args().collect::<Vec<_>>(), ["arg3\r\r"]);
        let again = Header::parse(h.encode(true).as_bytes(), HeaderLimits::default()).unwrap();
        assert_eq!(again, h);
    }

    #[test]
    fn arguments_keep_position_even_with_gaps() {
        let h = Header::parse(
            b"agi_arg_2: b\nagi_arg_1: a\nagi_arg_4: d\n\n",
            HeaderLimits::default(),
        )
        .unwrap();
        assert_eq!(h.args().collect::<Vec<_>>(), ["a", "b", "", "d"]);
    }
}
