//! What the registrar reads from a request: the headers every response copies, the address of
//! record, the contacts with their parameters, Path, and the digest credentials. Pure functions
//! over `sip::Message`; every refusal says which header was wrong.

use sip::{Message, StartLine};

/// At most this many Contact values are read from one REGISTER; more is a 400.
pub const CONTACTS_PER_REQUEST_MAX: usize = 32;
/// At most this many Path values are kept with a binding; more is a 400.
pub const PATH_VALUES_MAX: usize = 8;
/// A contact URI longer than this is refused (400): it would be stored and returned.
pub const CONTACT_URI_BYTES_MAX: usize = 512;

/// Why a request cannot be processed: the status to answer with and the reason phrase, which
/// names the header. `status` 0 means the request cannot even be answered (no Via, no CSeq).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: String,
    /// One more header line for the response (`Min-Expires: 60`), without its line end.
    pub header: Option<String>,
}

impl Refusal {
    pub fn new(status: u16, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
            header: None,
        }
    }
    pub fn with_header(mut self, line: String) -> Refusal {
        self.header = Some(line);
        self
    }
    fn bad(reason: impl Into<String>) -> Refusal {
        Refusal::new(400, reason)
    }
}

/// One Contact of a REGISTER, as the registrar needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContactParam<'a> {
    /// The URI inside `<>` (or the bare URI).
    pub uri: &'a str,
    /// `expires` parameter, when present.
    pub expires_s: Option<u32>,
    /// `q` in thousandths (0..=1000), when present.
    pub q_milli: Option<u16>,
    /// RFC 5626 `+sip.instance` (quotes and angle brackets kept as sent).
    pub instance: Option<&'a str>,
    /// RFC 5626 `reg-id`.
    pub reg_id: Option<u32>,
}

/// The Contact header of a REGISTER: absent (a query), the wildcard, or a list.
#[derive(Debug, Clone, PartialEq)]
pub enum Contacts<'a> {
    Query,
    Wildcard,
    List(Vec<ContactParam<'a>>),
}

/// A REGISTER request, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Register<'a> {
    pub aor: String,
    /// The To URI's host, lower-case: the domain checked against the served ones.
    pub domain: String,
    /// The To URI's user part: the name the credentials must carry.
    pub user: &'a str,
    pub call_id: &'a str,
    pub cseq: u32,
    pub expires_header_s: Option<u32>,
    pub contacts: Contacts<'a>,
    pub path: Vec<&'a str>,
    pub supported_path: bool,
    pub supported_outbound: bool,
    pub user_agent: Option<&'a str>,
}

/// The request line's method and URI; `None` for a response.
pub fn request_line<'a>(msg: &Message<'a>) -> Option<(&'a str, &'a str)> {
    match msg.start {
        StartLine::Request { method, uri } => Some((method, uri)),
        StartLine::Response { .. } => None,
    }
}

/// Whether a token (header parameter list item, option tag) is in a comma-separated header.
pub fn has_option_tag(msg: &Message<'_>, header: &str, tag: &str) -> bool {
    msg.header_values(header)
        .any(|v| v.trim().eq_ignore_ascii_case(tag))
}

/// The parameters after a URI or value: `;a=b;c` → (name, value) pairs, names trimmed.
pub fn params(s: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    sip::split_outside(s, b';').filter_map(|p| {
        let p = p.trim();
        if p.is_empty() {
            return None;
        }
        Some(match p.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (p, None),
        })
    })
}

/// A name-addr or addr-spec header value split into (URI, header parameters from their first
/// `;`), as `sip::NameAddr` reads it: the display name first (a quoted one may hold `<`, `;` and
/// escaped quotes), and in a bare URI every `;` is the header's (RFC 3261 20).
pub fn split_name_addr(value: &str) -> (&str, &str) {
    let n = sip::NameAddr::parse(value);
    (n.uri, n.params)
}

/// `sip:user@Host:port;params` → (scheme, user, host lower-case) when it is a SIP or SIPS URI.
pub fn sip_uri_parts(uri: &str) -> Option<(&str, &str, String)> {
    let (scheme, rest) = uri.split_once(':')?;
    if !scheme.eq_ignore_ascii_case("sip") && !scheme.eq_ignore_ascii_case("sips") {
        return None;
    }
    let rest = &rest[..rest.find([';', '?']).unwrap_or(rest.len())];
    let (user, hostport) = match rest.rfind('@') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => ("", rest),
    };
    let user = user.split(':').next().unwrap_or("");
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        format!("[{}]", &v6[..v6.find(']')?])
    } else {
        hostport.split(':').next().unwrap_or("").to_string()
    };
    if host.is_empty() || host.len() > 255 {
        return None;
    }
    Some((scheme, user, host.to_ascii_lowercase()))
}

/// The address of record of a To URI: `sip:user@domain` (scheme, user and host only; RFC 3261
/// 10.3 step 5 says to canonicalise it so that equal AORs are equal strings).
pub fn aor_of(to_uri: &str) -> Option<(String, String, &str)> {
    let (_, user, host) = sip_uri_parts(to_uri)?;
    if user.is_empty() {
        return None;
    }
    Some((format!("sip:{user}@{host}"), host, user))
}

fn parse_u32(what: &str, v: &str) -> Result<u32, Refusal> {
    // Large values are clamped by policy later; digits beyond u32 are still a number.
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::bad(format!("Bad {what} {v:?}")));
    }
    Ok(v.parse::<u64>()
        .map_or(u32::MAX, |n| n.min(u32::MAX as u64) as u32))
}

fn parse_q(v: &str) -> Result<u16, Refusal> {
    // qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
    let bad = || Refusal::bad(format!("Bad Contact q {v:?}"));
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut milli: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        milli += (b - b'0') as u16 * [100, 10, 1][i];
    }
    match int {
        "0" => Ok(milli),
        "1" if milli == 0 => Ok(1000),
        _ => Err(bad()),
    }
}

fn contact_param(value: &str) -> Result<ContactParam<'_>, Refusal> {
    let (uri, header_params) = split_name_addr(value);
    if uri.len() > CONTACT_URI_BYTES_MAX {
        return Err(Refusal::bad("Contact URI too long"));
    }
    if uri.is_empty() || !uri.contains(':') || uri.bytes().any(|b| b <= b' ' || b == b'>') {
        return Err(Refusal::bad(format!("Bad Contact {value:?}")));
    }
    let mut c = ContactParam {
        uri,
        expires_s: None,
        q_milli: None,
        instance: None,
        reg_id: None,
    };
    for (k, v) in params(header_params) {
        let v = v.unwrap_or("");
        if k.eq_ignore_ascii_case("expires") {
            c.expires_s = Some(parse_u32("Contact expires", v)?);
        } else if k.eq_ignore_ascii_case("q") {
            c.q_milli = Some(parse_q(v)?);
        } else if k.eq_ignore_ascii_case("+sip.instance") {
            c.instance = Some(v).filter(|v| !v.is_empty());
        } else if k.eq_ignore_ascii_case("reg-id") {
            c.reg_id = Some(parse_u32("Contact reg-id", v)?);
        }
    }
    Ok(c)
}

/// The request's address of record, from To: (AOR, domain, user). All that is read of a
/// REGISTER before it is queued on its AOR; the rest is read by [`register`] in the queue.
pub fn to_aor<'a>(msg: &Message<'a>) -> Result<(String, String, &'a str), Refusal> {
    let to = msg.header("to").ok_or_else(|| Refusal::bad("Missing To"))?;
    let to_uri = split_name_addr(to).0;
    aor_of(to_uri)
        .ok_or_else(|| Refusal::bad(format!("To is not a SIP URI with a user: {to_uri:?}")))
}

/// Reads a REGISTER. A refusal carries the 400 to answer (or 0 when unanswerable).
pub fn register<'a>(msg: &Message<'a>) -> Result<Register<'a>, Refusal> {
    let (aor, domain, user) = to_aor(msg)?;
    let call_id = msg
        .call_id()
        .filter(|c| !c.is_empty() && c.len() <= 256)
        .ok_or_else(|| Refusal::bad("Missing or over-long Call-ID"))?;
    let cseq = match msg.cseq() {
        Some((n, m)) if m.eq_ignore_ascii_case("REGISTER") => n,
        _ => return Err(Refusal::bad("Bad CSeq")),
    };
    let expires_header_s = match msg.header("expires") {
        Some(v) => Some(parse_u32("Expires", v.trim())?),
        None => None,
    };
    let mut list = Vec::new();
    let mut wildcard = false;
    for v in msg.header_values("contact") {
        if v.trim() == "*" {
            wildcard = true;
            continue;
        }
        if list.len() == CONTACTS_PER_REQUEST_MAX {
            return Err(Refusal::bad(format!(
                "More than {CONTACTS_PER_REQUEST_MAX} Contact values"
            )));
        }
        list.push(contact_param(v)?);
    }
    let contacts = match (wildcard, list.is_empty()) {
        (false, true) => Contacts::Query,
        (false, false) => Contacts::List(list),
        // RFC 3261 10.3 step 6: "*" only alone, and only with Expires: 0.
        (true, true) if expires_header_s == Some(0) => Contacts::Wildcard,
        (true, _) => {
            return Err(Refusal::bad(
                "Contact * is allowed only alone and with Expires: 0",
            ));
        }
    };
    let path: Vec<&str> = msg.header_values("path").collect();
    if path.len() > PATH_VALUES_MAX {
        return Err(Refusal::bad(format!(
            "More than {PATH_VALUES_MAX} Path values"
        )));
    }
    Ok(Register {
        aor,
        domain,
        user,
        call_id,
        cseq,
        expires_header_s,
        contacts,
        path,
        supported_path: has_option_tag(msg, "supported", "path"),
        supported_outbound: has_option_tag(msg, "supported", "outbound"),
        user_agent: msg.header("user-agent"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(extra: &str) -> String {
        format!(
            "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK1\r\n\
             From: <sip:1001@example.com>;tag=a\r\nTo: <sip:1001@Example.COM>\r\nCall-ID: c1\r\n\
             CSeq: 7 REGISTER\r\n{extra}Content-Length: 0\r\n\r\n"
        )
    }

    #[test]
    fn reads_aor_contacts_and_parameters() {
        let text = reg(
            "Contact: <sip:1001@192.0.2.1:5060;transport=udp>;expires=120;q=0.5, \
             <sip:1001@198.51.100.2>;+sip.instance=\"<urn:uuid:1>\";reg-id=2\r\nExpires: 300\r\n",
        );
        let msg = Message::parse(text.as_bytes()).unwrap();
        let r = register(&msg).unwrap();
        assert_eq!(r.aor, "sip:1001@example.com");
        assert_eq!(
            (r.call_id, r.cseq, r.expires_header_s),
            ("c1", 7, Some(300))
        );
        let Contacts::List(list) = r.contacts else {
            panic!("contacts")
        };
        assert_eq!(list[0].uri, "sip:1001@192.0.2.1:5060;transport=udp");
        assert_eq!((list[0].expires_s, list[0].q_milli), (Some(120), Some(500)));
        assert_eq!(list[1].instance, Some("\"<urn:uuid:1>\""));
        assert_eq!(list[1].reg_id, Some(2));
    }

    #[test]
    fn wildcard_only_alone_with_expires_zero() {
        let ok = reg("Contact: *\r\nExpires: 0\r\n");
        let m = Message::parse(ok.as_bytes()).unwrap();
        assert_eq!(register(&m).unwrap().contacts, Contacts::Wildcard);
        for bad in [
            "Contact: *\r\n",
            "Contact: *\r\nExpires: 60\r\n",
            "Contact: *, <sip:a@b>\r\nExpires: 0\r\n",
        ] {
            let t = reg(bad);
            let m = Message::parse(t.as_bytes()).unwrap();
            assert_eq!(register(&m).unwrap_err().status, 400, "{bad}");
        }
    }

    #[test]
    fn q_values_follow_the_grammar() {
        assert_eq!(parse_q("1").unwrap(), 1000);
        assert_eq!(parse_q("0.07").unwrap(), 70);
        assert_eq!(parse_q("1.000").unwrap(), 1000);
        for bad in ["1.5", "2", "0.1234", "-1", "", "x"] {
            assert!(parse_q(bad).is_err(), "{bad}");
        }
    }
}
