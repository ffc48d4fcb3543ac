//! The little SIP the emulated PBX needs: a bounded reader of one UDP datagram into a start line,
//! headers and body, and the SDP facts it anchors (the connection address and audio port).
//! It reads what SIPp, Kamailio and phones send; it is not a general SIP parser (Tandem's is
//! `crates/sip`).

use std::net::{IpAddr, SocketAddr};

/// Headers kept per message; a datagram with more is refused (a test peer needs no more).
pub const MAX_HEADERS: usize = 64;

/// One SIP request or response.
#[derive(Debug, Clone)]
pub struct Msg {
    /// `Some((method, uri))` for a request.
    pub request: Option<(String, String)>,
    /// The status code of a response.
    pub status: u16,
    pub reason: String,
    /// Header names as sent, with compact forms expanded, in order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// RFC 3261's compact header forms (section 7.3.3), expanded so lookups need one name.
fn expand(name: &str) -> &str {
    match name {
        "i" | "I" => "Call-ID",
        "f" | "F" => "From",
        "t" | "T" => "To",
        "v" | "V" => "Via",
        "m" | "M" => "Contact",
        "l" | "L" => "Content-Length",
        "c" | "C" => "Content-Type",
        "k" | "K" => "Supported",
        _ => name,
    }
}

impl Msg {
    /// Reads one datagram; `None` when it is not SIP this emulator can act on.
    pub fn parse(data: &[u8]) -> Option<Msg> {
        let text = std::str::from_utf8(data).ok()?;
        let (head, body) = match text.find("\r\n\r\n") {
            Some(at) => (&text[..at], &text[at + 4..]),
            None => (text, ""),
        };
        let mut lines = head.split("\r\n");
        let first = lines.next()?;
        let (mut request, mut status, mut reason) = (None, 0, String::new());
        if let Some(rest) = first.strip_prefix("SIP/2.0 ") {
            let (code, why) = rest.split_once(' ').unwrap_or((rest, ""));
            status = code.parse().ok()?;
            reason = why.to_string();
        } else {
            let mut parts = first.split(' ');
            let method = parts.next()?.to_string();
            let uri = parts.next()?.to_string();
            if parts.next() != Some("SIP/2.0") {
                return None;
            }
            request = Some((method, uri));
        }
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line.split_once(':')?;
            if headers.len() == MAX_HEADERS {
                return None;
            }
            headers.push((expand(name.trim()).to_string(), value.trim().to_string()));
        }
        Some(Msg {
            request,
            status,
            reason,
            headers,
            body: body.to_string(),
        })
    }

    pub fn method(&self) -> &str {
        self.request.as_ref().map_or("", |(m, _)| m)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn call_id(&self) -> &str {
        self.header("Call-ID").unwrap_or("")
    }

    /// The CSeq number and method.
    pub fn cseq(&self) -> (u32, &str) {
        let v = self.header("CSeq").unwrap_or("");
        let (n, m) = v.split_once(' ').unwrap_or((v, ""));
        (n.trim().parse().unwrap_or(0), m.trim())
    }
}

/// The `tag` parameter of a From or To value.
pub fn tag(value: &str) -> Option<&str> {
    let at = value.find(";tag=")?;
    let rest = &value[at + 5..];
    Some(rest.split([';', ' ', '>']).next().unwrap_or(rest))
}

/// The user part of the URI in a From, To or request URI value (`sip:USER@host`).
pub fn user(value: &str) -> &str {
    let uri = match value.find('<') {
        Some(at) => &value[at + 1..],
        None => value,
    };
    let uri = uri
        .strip_prefix("sip:")
        .or_else(|| uri.strip_prefix("sips:"))
        .or_else(|| uri.strip_prefix("tel:"))
        .unwrap_or(uri);
    match uri.find('@') {
        Some(at) => &uri[..at],
        None => uri.split([';', '>']).next().unwrap_or(""),
    }
}

/// The quoted or bare display name before `<`, if any.
pub fn display_name(value: &str) -> &str {
    match value.find('<') {
        Some(at) => value[..at].trim().trim_matches('"'),
        None => "",
    }
}

/// The URI inside `<...>` of a Contact value, or the value itself.
pub fn contact_uri(value: &str) -> &str {
    match (value.find('<'), value.find('>')) {
        (Some(a), Some(b)) if a < b => &value[a + 1..b],
        _ => value.split(';').next().unwrap_or(value),
    }
}

/// Where an SDP body wants its audio: the session or media `c=` address and the `m=audio` port;
/// `None` without an audio line or with port 0 (a declined stream).
pub fn sdp_audio(body: &str) -> Option<SocketAddr> {
    let mut ip: Option<IpAddr> = None;
    let mut port = None;
    for line in body.lines() {
        if let Some(c) = line
            .strip_prefix("c=IN IP4 ")
            .or(line.strip_prefix("c=IN IP6 "))
        {
            if let Ok(addr) = c.trim().parse() {
                ip = Some(addr);
            }
        } else if let Some(m) = line.strip_prefix("m=audio ") {
            port = m.split(' ').next().and_then(|p| p.parse::<u16>().ok());
        }
    }
    match (ip, port) {
        (Some(ip), Some(port)) if port != 0 => Some(SocketAddr::new(ip, port)),
        _ => None,
    }
}

/// The first G.711 payload type of an SDP offer's audio line (PCMU 0 or PCMA 8), the one an
/// answer keeps; PCMU when the offer has neither.
pub fn sdp_g711(body: &str) -> u8 {
    body.lines()
        .find_map(|l| l.strip_prefix("m=audio "))
        .and_then(|m| {
            m.split(' ')
                .skip(2)
                .filter_map(|p| p.trim().parse::<u8>().ok())
                .find(|p| *p == 0 || *p == 8)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_request_with_compact_headers_and_sdp() {
        let m = Msg::parse(
            b"INVITE sip:9017@127.0.0.1:5060 SIP/2.0\r\nv: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK1\r\n\
f: \"Ann\" <sip:201@127.0.0.1>;tag=a1\r\nt: <sip:9017@127.0.0.1>\r\ni: c1\r\nCSeq: 7 INVITE\r\n\r\n\
v=0\r\nc=IN IP4 127.0.0.2\r\nm=audio 6000 RTP/AVP 8 0 101\r\n",
        )
        .unwrap();
        assert_eq!(m.method(), "INVITE");
        assert_eq!(m.call_id(), "c1");
        assert_eq!(m.cseq(), (7, "INVITE"));
        assert_eq!(tag(m.header("From").unwrap()), Some("a1"));
        assert_eq!(user(m.header("From").unwrap()), "201");
        assert_eq!(display_name(m.header("From").unwrap()), "Ann");
        assert_eq!(user(&m.request.as_ref().unwrap().1), "9017");
        assert_eq!(sdp_audio(&m.body), Some("127.0.0.2:6000".parse().unwrap()));
        assert_eq!(sdp_g711(&m.body), 8);
    }

    #[test]
    fn refuses_what_is_not_sip() {
        assert!(Msg::parse(b"\x80\x00garbage").is_none());
        assert!(Msg::parse(b"HELLO world\r\n\r\n").is_none());
        assert!(Msg::parse(b"SIP/2.0 abc OK\r\n\r\n").is_none());
    }
}
