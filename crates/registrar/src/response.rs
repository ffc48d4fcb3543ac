//! Responses: the headers RFC 3261 8.2.6.2 copies from the request (every Via in order, From,
//! To with a tag, Call-ID, CSeq), the top Via marked with where the request came from
//! (`received`, RFC 3581 `rport`), then the caller's headers.

use sip::Message;
use std::fmt::Write as _;
use std::net::SocketAddr;

/// Methods the registrar answers; the `Allow` of every 405 and 501.
pub const ALLOW: &str = "REGISTER, OPTIONS, INVITE, ACK, CANCEL";
/// Option tags the registrar implements.
pub const SUPPORTED: &str = "path, outbound";

/// The top Via with `received` and `rport` filled in for the packet's source.
fn marked_via(via: &str, source: SocketAddr) -> String {
    let mut out = String::with_capacity(via.len() + 40);
    let (head, params) = match via.find(';') {
        Some(i) => (&via[..i], &via[i..]),
        None => (via, ""),
    };
    out.push_str(head);
    let sent_host = head
        .split_ascii_whitespace()
        .nth(1)
        .map(|hp| {
            if let Some(v6) = hp.strip_prefix('[') {
                v6.split(']').next().unwrap_or("")
            } else {
                hp.split(':').next().unwrap_or("")
            }
        })
        .unwrap_or("");
    let mut has_received = false;
    for (k, v) in crate::request::params(params) {
        if k.eq_ignore_ascii_case("rport") {
            let _ = write!(out, ";rport={}", source.port());
            continue;
        }
        if k.eq_ignore_ascii_case("received") {
            has_received = true;
            let _ = write!(out, ";received={}", source.ip());
            continue;
        }
        out.push(';');
        out.push_str(k);
        if let Some(v) = v {
            out.push('=');
            out.push_str(v);
        }
    }
    if !has_received && sent_host != source.ip().to_string() {
        let _ = write!(out, ";received={}", source.ip());
    }
    out
}

/// A stable To tag for a request, so that a retransmission gets the same response.
fn to_tag(msg: &Message<'_>) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    msg.call_id().hash(&mut h);
    msg.header("cseq").hash(&mut h);
    msg.from().and_then(|f| f.tag).hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Builds a response to `msg`. `headers` are extra lines, each ending in CRLF.
pub fn build(
    msg: &Message<'_>,
    status: u16,
    reason: &str,
    headers: &str,
    source: SocketAddr,
) -> Vec<u8> {
    let mut out = String::with_capacity(512 + headers.len());
    let _ = write!(out, "SIP/2.0 {status} {reason}\r\n");
    let mut first = true;
    for h in &msg.headers {
        if sip::header_name_eq(h.name, "via") {
            for via in sip::split_list(h.value) {
                if first {
                    let _ = write!(out, "Via: {}\r\n", marked_via(via, source));
                    first = false;
                } else {
                    let _ = write!(out, "Via: {via}\r\n");
                }
            }
        }
    }
    if let Some(from) = msg.header("from") {
        let _ = write!(out, "From: {from}\r\n");
    }
    if let Some(to) = msg.header("to") {
        if status > 100 && msg.to().is_some_and(|t| t.tag.is_none()) {
            let _ = write!(out, "To: {to};tag={}\r\n", to_tag(msg));
        } else {
            let _ = write!(out, "To: {to}\r\n");
        }
    }
    if let Some(c) = msg.call_id() {
        let _ = write!(out, "Call-ID: {c}\r\n");
    }
    if let Some(c) = msg.header("cseq") {
        let _ = write!(out, "CSeq: {c}\r\n");
    }
    out.push_str(headers);
    out.push_str("Server: Tandem\r\nContent-Length: 0\r\n\r\n");
    out.into_bytes()
}

/// An HTTP-date for the `Date` header (RFC 3261 20.17): `Sat, 13 Nov 2010 23:29:00 GMT`.
pub fn http_date(unix_s: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_s.div_euclid(86_400);
    let secs = unix_s.rem_euclid(86_400);
    let (y, m, d) = utc::civil_from_days(days);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_dialog_headers_and_marks_the_top_via() {
        let req = "OPTIONS sip:x SIP/2.0\r\nVia: SIP/2.0/UDP phone.lan:5060;branch=z9hG4bKa;rport, \
                   SIP/2.0/UDP proxy;branch=z9hG4bKb\r\nv: SIP/2.0/UDP c;branch=z9hG4bKc\r\n\
                   From: <sip:a@x>;tag=1\r\nTo: <sip:b@x>\r\nCall-ID: id\r\nCSeq: 3 OPTIONS\r\n\r\n";
        let msg = Message::parse(req.as_bytes()).unwrap();
        let r = build(
            &msg,
            200,
            "OK",
            "Allow: x\r\n",
            "192.0.2.7:5062".parse().unwrap(),
        );
        let text = String::from_utf8(r).unwrap();
        assert!(text.starts_with("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP phone.lan:5060;branch=z9hG4bKa;rport=5062;received=192.0.2.7\r\n\
             Via: SIP/2.0/UDP proxy;branch=z9hG4bKb\r\nVia: SIP/2.0/UDP c;branch=z9hG4bKc\r\n"), "{text}");
        assert!(text.contains("\r\nTo: <sip:b@x>;tag="));
        assert!(text.ends_with("Allow: x\r\nServer: Tandem\r\nContent-Length: 0\r\n\r\n"));
    }

    #[test]
    fn http_dates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(1_289_690_940), "Sat, 13 Nov 2010 23:29:00 GMT");
    }
}
