//! Lenient, zero-copy SIP (RFC 3261) and SDP (RFC 4566) parsing.
//!
//! This crate never does IO and never allocates per byte of input: a parsed [`Message`] borrows
//! its start line, header names and values and body from the buffer it was parsed from. It is
//! lenient the way a passive monitor has to be (LF-only line ends, missing reason phrases, odd
//! spacing, unknown headers) but strict about what would make the result wrong: a message
//! without a start line or with a header section that never ends is an error.
//!
//! Start reading at [`Message::parse`] and [`sdp::Sdp::parse`]; keypad digits in INFO bodies are
//! [`dtmf`]'s.

pub mod dtmf;
mod name_addr;
pub mod sdp;
pub mod secrets;
mod uri;

pub use name_addr::{NameAddr, uri_user};
use std::fmt;
pub use uri::uri_eq;

/// At most this many header lines are kept per message; further ones are an error
/// ([`ParseError::TooManyHeaders`]). Real messages carry 10-40.
pub const MAX_HEADERS: usize = 128;

/// Header sections longer than this are refused ([`ParseError::HeadersTooLong`]).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What was wrong with a SIP message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("SIP message is empty")]
    Empty,
    #[error(
        "SIP start line is neither a request (METHOD URI SIP/2.0) nor a status line (SIP/2.0 CODE REASON)"
    )]
    BadStartLine,
    #[error("SIP header section has no end (no empty line) within {0} bytes")]
    Incomplete(usize),
    #[error("SIP header section is longer than {MAX_HEADER_BYTES} bytes")]
    HeadersTooLong,
    #[error("SIP message has more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    #[error("SIP header line {0} has no ':'")]
    BadHeader(usize),
    #[error("SIP header section is not UTF-8")]
    NotUtf8,
    #[error("SIP Content-Length {0:?} is not a number")]
    BadContentLength(String),
}

/// A request line or a status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartLine<'a> {
    Request { method: &'a str, uri: &'a str },
    Response { code: u16, reason: &'a str },
}

/// One header line as it appeared: `name` as written (maybe compact), `value` trimmed. A folded
/// header (continuation lines starting with whitespace) keeps its line breaks inside `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub name: &'a str,
    pub value: &'a str,
}

/// A parsed SIP message borrowing from its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    pub start: StartLine<'a>,
    pub headers: Vec<Header<'a>>,
    /// The body: `Content-Length` bytes when present and available, else the rest of the input.
    pub body: &'a [u8],
    /// Bytes of input this message used (header section, blank line and body).
    pub len: usize,
}

/// The long form of a compact header name (RFC 3261 7.3.3 and later RFCs), lower-case.
fn expand_compact(name: &str) -> Option<&'static str> {
    if name.len() != 1 {
        return None;
    }
    Some(match name.as_bytes()[0].to_ascii_lowercase() {
        b'i' => "call-id",
        b'm' => "contact",
        b'e' => "content-encoding",
        b'l' => "content-length",
        b'c' => "content-type",
        b'f' => "from",
        b'k' => "supported",
        b's' => "subject",
        b't' => "to",
        b'v' => "via",
        b'r' => "refer-to",
        b'o' => "event",
        b'u' => "allow-events",
        b'b' => "referred-by",
        b'x' => "session-expires",
        _ => return None,
    })
}

/// `name` in lower case, borrowed when it already is (every caller in Tandem passes a
/// lower-case literal, so a lookup allocates nothing).
fn lower(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(name.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// True when header `written` (as it appeared, maybe compact) is the header `long_lower`.
pub fn header_name_eq(written: &str, long_lower: &str) -> bool {
    written.eq_ignore_ascii_case(long_lower) || expand_compact(written) == Some(long_lower)
}

/// Where the header section ends: (index of the first body byte, index where the blank line
/// starts). Accepts CRLFCRLF and bare LFLF.
fn find_header_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(p) = buf[from..].iter().position(|&b| b == b'\n') {
        let i = from + p;
        match buf.get(i + 1) {
            Some(b'\n') => return Some((i + 2, i)),
            Some(b'\r') if buf.get(i + 2) == Some(&b'\n') => return Some((i + 3, i)),
            _ => from = i + 1,
        }
    }
    None
}

/// Replaces every byte of each invalid UTF-8 sequence in `bytes` by `?`, in place.
fn replace_invalid_utf8(bytes: &mut [u8]) {
    let mut from = 0;
    while let Err(e) = std::str::from_utf8(&bytes[from..]) {
        let bad = from + e.valid_up_to();
        let end = e.error_len().map_or(bytes.len(), |n| bad + n);
        bytes[bad..end].fill(b'?');
        from = end;
    }
}

/// True when `buf` starts like a SIP message (a known method followed by a space, or
/// `SIP/2.0 `). Cheap: used to pick SIP out of arbitrary UDP and TCP payloads.
pub fn looks_like_sip(buf: &[u8]) -> bool {
    const STARTS: [&[u8]; 15] = [
        b"SIP/2.0 ",
        b"INVITE ",
        b"ACK ",
        b"BYE ",
        b"CANCEL ",
        b"REGISTER ",
        b"OPTIONS ",
        b"PRACK ",
        b"SUBSCRIBE ",
        b"NOTIFY ",
        b"PUBLISH ",
        b"INFO ",
        b"REFER ",
        b"MESSAGE ",
        b"UPDATE ",
    ];
    // Every start is upper-case ASCII: most non-SIP payloads (RTP starts with 0x80) fail here.
    buf.first().is_some_and(u8::is_ascii_uppercase) && STARTS.iter().any(|s| buf.starts_with(s))
}

/// On a stream transport: the length of the first complete message in `buf` (header section plus
/// `Content-Length` body), `Ok(None)` when more bytes are needed. A missing Content-Length counts
/// as 0, as RFC 3261 18.3 requires it on streams. Leading CRLF keep-alives are included in the
/// length so that the caller can skip them.
pub fn message_len(buf: &[u8]) -> Result<Option<usize>, ParseError> {
    let skip = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[skip..];
    let Some((body_start, _)) = find_header_end(rest) else {
        if rest.len() > MAX_HEADER_BYTES {
            return Err(ParseError::HeadersTooLong);
        }
        return Ok(None);
    };
    // Only Content-Length matters here, and it is ASCII: a header elsewhere in the section that
    // is not UTF-8 (a Latin-1 display name) must not stop a stream's framing.
    let mut content_length = 0usize;
    for line in rest[..body_start].split(|&b| b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let Ok(name) = std::str::from_utf8(&line[..colon]) else {
            continue;
        };
        if header_name_eq(name.trim(), "content-length") {
            let v = String::from_utf8_lossy(line[colon + 1..].trim_ascii());
            content_length = v
                .parse()
                .map_err(|_| ParseError::BadContentLength(v.to_string()))?;
        }
    }
    let total = skip + body_start + content_length;
    Ok(if buf.len() >= total {
        Some(total)
    } else {
        None
    })
}

impl<'a> Message<'a> {
    /// Parses one message from the start of `buf` (leading CRLFs are skipped). On a datagram the
    /// body is `Content-Length` bytes when that header is present, else the rest of `buf`.
    pub fn parse(buf: &'a [u8]) -> Result<Message<'a>, ParseError> {
        let skip = buf
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .ok_or(ParseError::Empty)?;
        let input = &buf[skip..];
        let (body_start, head_end) = match find_header_end(input) {
            Some(v) => v,
            // A datagram may end right after its last header line.
            None if input.ends_with(b"\n") => (input.len(), input.len()),
            None => {
                return Err(if input.len() > MAX_HEADER_BYTES {
                    ParseError::HeadersTooLong
                } else {
                    ParseError::Incomplete(input.len())
                });
            }
        };
        if head_end > MAX_HEADER_BYTES {
            return Err(ParseError::HeadersTooLong);
        }
        let head = std::str::from_utf8(&input[..head_end]).map_err(|_| ParseError::NotUtf8)?;
        let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let start = parse_start_line(lines.next().ok_or(ParseError::Empty)?)?;
        let mut headers: Vec<Header<'a>> = Vec::with_capacity(16);
        let mut line_no = 1;
        for line in lines {
            line_no += 1;
            if line.starts_with([' ', '\t']) {
                // Folded continuation: widen the previous value to cover this line too.
                if let Some(last) = headers.last_mut() {
                    let start_ptr = last.value.as_ptr() as usize - head.as_ptr() as usize;
                    let end_ptr = line.as_ptr() as usize - head.as_ptr() as usize + line.len();
                    last.value = head[start_ptr..end_ptr].trim();
                    continue;
                }
                return Err(ParseError::BadHeader(line_no));
            }
            if line.trim().is_empty() {
                continue;
            }
            let (name, value) = line.split_once(':').ok_or(ParseError::BadHeader(line_no))?;
            if headers.len() == MAX_HEADERS {
                return Err(ParseError::TooManyHeaders);
            }
            headers.push(Header {
                name: name.trim(),
                value: value.trim(),
            });
        }
        let mut msg = Message {
            start,
            headers,
            body: &[],
            len: 0,
        };
        let rest = &input[body_start..];
        let body_len = match msg.header("content-length") {
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| ParseError::BadContentLength(v.to_string()))?
                .min(rest.len()),
            None => rest.len(),
        };
        msg.body = &rest[..body_len];
        msg.len = skip + body_start + body_len;
        Ok(msg)
    }

    /// As [`Message::parse`], but a header section that is not UTF-8 does not lose the
    /// message: phones still send display names in Latin-1, and a corrupted byte in a tag is
    /// seen on real links; tshark shows such messages, and a monitor that dropped them would lose
    /// the call. The message is then read from a copy in `scratch` in which every byte of an
    /// invalid sequence in the header section is replaced by `?`, one for one, so that lengths
    /// and offsets are the input's. Returns the message and the bytes it was read from (`buf`,
    /// or the repaired copy), which is what a caller that keeps the message's bytes must copy.
    pub fn parse_lossy(
        buf: &'a [u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<(Message<'a>, &'a [u8]), ParseError> {
        match Message::parse(buf) {
            Err(ParseError::NotUtf8) => {
                scratch.clear();
                scratch.extend_from_slice(buf);
                let head_end = find_header_end(scratch).map_or(scratch.len(), |(_, end)| end);
                replace_invalid_utf8(&mut scratch[..head_end.min(MAX_HEADER_BYTES)]);
                let repaired: &'a [u8] = scratch;
                Message::parse(repaired).map(|m| (m, repaired))
            }
            other => other.map(|m| (m, buf)),
        }
    }

    /// The first value of header `name` (long form, any case; compact forms match too).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        let lower = lower(name);
        self.headers
            .iter()
            .find(|h| header_name_eq(h.name, &lower))
            .map(|h| h.value)
    }

    /// Every value of header `name`, with comma-separated lists split (commas inside quotes or
    /// angle brackets do not split).
    pub fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a str> + 's {
        let lower = lower(name);
        self.headers
            .iter()
            .filter(move |h| header_name_eq(h.name, &lower))
            .flat_map(|h| split_list(h.value))
    }

    pub fn is_request(&self) -> bool {
        matches!(self.start, StartLine::Request { .. })
    }

    /// The request method, or for a response the method in its CSeq.
    pub fn method(&self) -> Option<&'a str> {
        match self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => self.cseq().map(|(_, m)| m),
        }
    }

    /// The status code of a response.
    pub fn status(&self) -> Option<u16> {
        match self.start {
            StartLine::Response { code, .. } => Some(code),
            StartLine::Request { .. } => None,
        }
    }

    pub fn call_id(&self) -> Option<&'a str> {
        self.header("call-id")
    }

    /// CSeq number and method.
    pub fn cseq(&self) -> Option<(u32, &'a str)> {
        let v = self.header("cseq")?;
        let mut it = v.split_ascii_whitespace();
        let n = it.next()?.parse().ok()?;
        Some((n, it.next()?))
    }

    pub fn from(&self) -> Option<NameAddr<'a>> {
        self.header("from").map(NameAddr::parse)
    }

    pub fn to(&self) -> Option<NameAddr<'a>> {
        self.header("to").map(NameAddr::parse)
    }

    /// True when Content-Type is `application/sdp`.
    pub fn has_sdp(&self) -> bool {
        !self.body.is_empty()
            && self.header("content-type").is_some_and(|v| {
                v.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/sdp"))
            })
    }

    /// The keypad digit of an INFO request (`application/dtmf-relay` or `application/dtmf`).
    pub fn info_digit(&self) -> Option<dtmf::InfoDigit> {
        if self.method() != Some("INFO") || self.body.is_empty() {
            return None;
        }
        dtmf::info_digit(self.header("content-type")?, self.body)
    }

    /// The Q.850 cause of a `Reason: Q.850;cause=N` header (RFC 3326), if any.
    pub fn q850_cause(&self) -> Option<u16> {
        self.header_values("reason").find_map(|r| {
            let mut parts = r.split(';');
            if !parts.next()?.trim().eq_ignore_ascii_case("q.850") {
                return None;
            }
            parts.find_map(|p| {
                let (k, v) = p.split_once('=')?;
                if k.trim().eq_ignore_ascii_case("cause") {
                    v.trim().parse().ok()
                } else {
                    None
                }
            })
        })
    }
}

fn parse_start_line(line: &str) -> Result<StartLine<'_>, ParseError> {
    if let Some(rest) = line.strip_prefix("SIP/2.0") {
        let rest = rest.trim_start();
        let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
        let code: u16 = code.parse().map_err(|_| ParseError::BadStartLine)?;
        if !(100..=699).contains(&code) {
            return Err(ParseError::BadStartLine);
        }
        return Ok(StartLine::Response {
            code,
            reason: reason.trim(),
        });
    }
    let mut it = line.split_ascii_whitespace();
    let method = it.next().ok_or(ParseError::BadStartLine)?;
    let uri = it.next().ok_or(ParseError::BadStartLine)?;
    let version = it.next().ok_or(ParseError::BadStartLine)?;
    if !version.eq_ignore_ascii_case("SIP/2.0")
        || !method.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-')
    {
        return Err(ParseError::BadStartLine);
    }
    Ok(StartLine::Request { method, uri })
}

/// Splits a header value on commas that are outside quotes and angle brackets, each item
/// trimmed; an empty last item is left out.
pub fn split_list(value: &str) -> impl Iterator<Item = &str> {
    let mut items = split_outside(value, b',').peekable();
    std::iter::from_fn(move || {
        let item = items.next()?.trim();
        if item.is_empty() && items.peek().is_none() {
            None
        } else {
            Some(item)
        }
    })
}

/// Splits `value` on the byte `sep` where it stands outside double quotes (with `\` escapes)
/// and outside `<...>`, as SIP's lists and parameters are split: `a;b="x;y";c=<u;v>` on `;`
/// gives `a`, `b="x;y"`, `c=<u;v>`. Items are not trimmed.
pub fn split_outside(value: &str, sep: u8) -> impl Iterator<Item = &str> {
    let bytes = value.as_bytes();
    let mut start = 0;
    let mut pos = 0;
    let mut in_quote = false;
    let mut in_angle = false;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        while pos < bytes.len() {
            let b = bytes[pos];
            pos += 1;
            match b {
                b'"' if !in_angle => in_quote = !in_quote,
                b'\\' if in_quote => pos += 1,
                b'<' if !in_quote => in_angle = true,
                b'>' if !in_quote => in_angle = false,
                _ if b == sep && !in_quote && !in_angle => {
                    let item = &value[start..pos - 1];
                    start = pos;
                    return Some(item);
                }
                _ => {}
            }
        }
        done = true;
        Some(value.get(start..).unwrap_or(""))
    })
}

impl fmt::Display for StartLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartLine::Request { method, uri } => write!(f, "{method} {uri}"),
            StartLine::Response { code, reason } => write!(f, "{code} {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776asdhds, SIP/2.0/UDP relay.example.com\r\n\
v: SIP/2.0/UDP third.example.com\r\n\
From: \"Alice, A.\" <sip:alice@example.com>;tag=1928301774\r\n\
t: <sip:+15551234@example.com;user=phone>\r\n\
i: a84b4c76e66710@pc33.example.com\r\n\
CSeq: 314159 INVITE\r\n\
Subject: folded\r\n  continued here\r\n\
c: application/sdp\r\n\
l: 4\r\n\
\r\n\
v=0\r\nextra";

    #[test]
    fn parses_request_with_compact_and_folded_headers() {
        let m = Message::parse(INVITE).unwrap();
        assert_eq!(
            m.start,
            StartLine::Request {
                method: "INVITE",
                uri: "sip:bob@example.com"
            }
        );
        assert_eq!(m.call_id(), Some("a84b4c76e66710@pc33.example.com"));
        assert_eq!(m.cseq(), Some((314159, "INVITE")));
        assert_eq!(m.header_values("via").count(), 3);
        let from = m.from().unwrap();
        assert_eq!(from.display, Some("Alice, A."));
        assert_eq!(from.tag, Some("1928301774"));
        assert_eq!(from.user(), "alice");
        assert_eq!(m.to().unwrap().user(), "+15551234");
        assert_eq!(m.header("subject"), Some("folded\r\n  continued here"));
        assert!(m.has_sdp());
        assert_eq!(m.body, b"v=0\r");
        assert_eq!(m.len, INVITE.len() - "\nextra".len());
    }

    #[test]
    fn parses_response_lf_only_and_reason() {
        let m = Message::parse(
            b"SIP/2.0 486 Busy Here\nCall-ID: x\nCSeq: 1 INVITE\nReason: Q.850;cause=17;text=\"busy\"\n\n",
        )
        .unwrap();
        assert_eq!(m.status(), Some(486));
        assert_eq!(m.method(), Some("INVITE"));
        assert_eq!(m.q850_cause(), Some(17));
    }

    #[test]
    fn frames_stream_messages_by_content_length() {
        let one = b"BYE sip:a@b SIP/2.0\r\nContent-Length: 3\r\n\r\nabc";
        let mut two = b"\r\n\r\n".to_vec();
        two.extend_from_slice(one);
        two.extend_from_slice(one);
        assert_eq!(message_len(&two).unwrap(), Some(4 + one.len()));
        assert_eq!(message_len(&one[..10]).unwrap(), None);
        assert_eq!(message_len(&one[..one.len() - 1]).unwrap(), None);
        assert!(message_len(b"BYE x SIP/2.0\r\nl: z\r\n\r\n").is_err());
    }

    #[test]
    fn a_header_section_not_in_utf8_is_read_with_the_bad_bytes_replaced() {
        // A Latin-1 display name ("Müller") and a tag with stray bytes, as real phones send.
        let bytes: &[u8] = b"INVITE sip:100@pbx SIP/2.0\r\n\
From: \"M\xfcller\" <sip:200@pbx>;tag=a\xc3\r\n\
To: <sip:100@pbx>;tag=5af5720\xef\x0e\xa4b\x01\r\n\
Call-ID: latin1@pbx\r\nCSeq: 1 INVITE\r\nContent-Length: 4\r\n\r\n\xff\xfe\x00x";
        assert_eq!(Message::parse(bytes), Err(ParseError::NotUtf8));
        let mut scratch = Vec::new();
        let (m, read) = Message::parse_lossy(bytes, &mut scratch).unwrap();
        assert_eq!(m.call_id(), Some("latin1@pbx"));
        assert_eq!(m.from().unwrap().display, Some("M?ller"));
        assert_eq!(m.from().unwrap().user(), "200");
        assert_eq!(m.to().unwrap().user(), "100");
        // Offsets are the input's, and the body is left as it came.
        assert_eq!((m.len, read.len()), (bytes.len(), bytes.len()));
        assert_eq!(m.body, b"\xff\xfe\x00x");
        // Framing on a stream needs only Content-Length.
        assert_eq!(message_len(bytes).unwrap(), Some(bytes.len()));
        // A message in UTF-8 is read in place.
        let mut unused = Vec::new();
        let (_, read) = Message::parse_lossy(INVITE, &mut unused).unwrap();
        assert!(std::ptr::eq(read, INVITE) && unused.is_empty());
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(Message::parse(b""), Err(ParseError::Empty));
        assert_eq!(
            Message::parse(b"HELLO\r\n\r\n"),
            Err(ParseError::BadStartLine)
        );
        assert_eq!(
            Message::parse(b"SIP/2.0 99 x\r\n\r\n"),
            Err(ParseError::BadStartLine)
        );
        assert!(matches!(
            Message::parse(b"INVITE a SIP/2.0\r\nnocolon\r\n\r\n"),
            Err(ParseError::BadHeader(2))
        ));
        assert!(looks_like_sip(b"SIP/2.0 200 OK"));
        assert!(!looks_like_sip(&[0x80, 0x08, 0, 1]));
    }
}
