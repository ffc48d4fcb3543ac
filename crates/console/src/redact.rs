//! Credentials out of the SIP text a viewer reads. A captured `Authorization` or
//! `Proxy-Authorization` header holds a digest `response` (with `cnonce`), and with the
//! challenge's nonce, realm and uri beside it that is enough to guess the password offline. So
//! a viewer's ladder keeps the header and the parameters that say who and where (`username`,
//! `realm`, `nonce`, `uri`, `algorithm`, `qop`, `nc`, `opaque`) and reads [`MARKER`] for every
//! other value; another scheme's credentials (`Basic`, `Bearer`) are replaced whole.
//!
//! Never: keeps a parameter it does not know (a new one is taken for a secret), or fails on
//! text it cannot read: what does not parse from there on is replaced, up to the line's end.

use std::borrow::Cow;

/// What a viewer reads in place of a secret.
pub const MARKER: &str = "<redacted>";

/// Digest parameters that are no secret (RFC 3261 §25.1, RFC 7616 §3.4): they name the user,
/// the realm and the challenge, all of which the 401/407 before them carries in clear.
const DIGEST_KEPT: [&str; 9] = [
    "username",
    "realm",
    "nonce",
    "uri",
    "algorithm",
    "qop",
    "nc",
    "opaque",
    "userhash",
];

/// `text` (a SIP message, perhaps cut short) with the values of its `Authorization` and
/// `Proxy-Authorization` headers redacted, folded lines included. Other lines are unchanged;
/// text without such a header is returned as it is.
pub fn sip_credentials(text: &str) -> Cow<'_, str> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if !lines.iter().any(|l| credentials_header(l).is_some()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < lines.len() {
        let Some(colon) = credentials_header(lines[i]) else {
            out.push_str(lines[i]);
            i += 1;
            continue;
        };
        // The header with its folded lines (RFC 3261 §7.3.1: a line that starts with a space
        // or a tab continues the one before).
        let mut end = i + 1;
        while end < lines.len() && lines[end].starts_with([' ', '\t']) {
            end += 1;
        }
        let header: String = lines[i..end].concat();
        let body = header.trim_end_matches(['\r', '\n']);
        out.push_str(&body[..=colon]);
        out.push_str(&credentials(&body[colon + 1..]));
        out.push_str(&header[body.len()..]);
        i = end;
    }
    Cow::Owned(out)
}

/// The place of the colon when `line` is an `Authorization` or `Proxy-Authorization` header
/// (any case, with or without spaces before the colon).
fn credentials_header(line: &str) -> Option<usize> {
    let colon = line.find(':')?;
    let name = line[..colon].trim_end_matches([' ', '\t']);
    (name.eq_ignore_ascii_case("authorization") || name.eq_ignore_ascii_case("proxy-authorization"))
        .then_some(colon)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// RFC 3261 §25.1 `token` characters.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b)
}

/// A header's value (after the colon) with its secrets replaced.
fn credentials(value: &str) -> String {
    let b = value.as_bytes();
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    let scheme_start = i;
    while i < b.len() && is_token(b[i]) {
        i += 1;
    }
    out.push_str(&value[..i]);
    let scheme = &value[scheme_start..i];
    if scheme.is_empty() {
        // Not a credentials value at all: nothing of it is kept.
        if i < b.len() {
            out.push_str(MARKER);
        }
        return out;
    }
    if !scheme.eq_ignore_ascii_case("digest") {
        if i < b.len() {
            out.push(' ');
            out.push_str(MARKER);
        }
        return out;
    }
    loop {
        let sep = i;
        while i < b.len() && (is_space(b[i]) || b[i] == b',') {
            i += 1;
        }
        out.push_str(&value[sep..i]);
        if i >= b.len() {
            return out;
        }
        let name_start = i;
        while i < b.len() && is_token(b[i]) {
            i += 1;
        }
        let name = &value[name_start..i];
        if name.is_empty() {
            // Something no parameter starts with: the rest is not read, nor shown.
            out.push_str(MARKER);
            return out;
        }
        out.push_str(name);
        let before_eq = i;
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        if i >= b.len() || b[i] != b'=' {
            // A parameter without a value: the next one, or the end.
            i = before_eq;
            continue;
        }
        i += 1;
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        out.push_str(&value[before_eq..i]);
        let kept = DIGEST_KEPT.iter().any(|k| k.eq_ignore_ascii_case(name));
        let value_start = i;
        let quoted = i < b.len() && b[i] == b'"';
        if quoted {
            i += 1;
            while i < b.len() {
                match b[i] {
                    b'\\' => i += 2,
                    b'"' => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
            // An escape at the very end steps past it; a quote ends on a character's edge.
            i = i.min(b.len());
        } else {
            while i < b.len() && !is_space(b[i]) && b[i] != b',' {
                i += 1;
            }
        }
        match (kept, quoted) {
            (true, _) => out.push_str(&value[value_start..i]),
            (false, true) => {
                out.push('"');
                out.push_str(MARKER);
                out.push('"');
            }
            (false, false) => out.push_str(MARKER),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_keeps_who_and_where_and_loses_its_response() {
        let msg = "INVITE sip:2002@pbx SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.10\r\n\
                   Proxy-Authorization: Digest username=\"1001\", realm=\"asterisk\", \
                   nonce=\"5f3a\", uri=\"sip:2002@pbx\", response=\"6629fae4\", \
                   algorithm=MD5, cnonce=\"0a4f\", qop=auth, nc=00000001, auts=xyz\r\n\
                   Content-Length: 0\r\n\r\n";
        let got = sip_credentials(msg);
        assert_eq!(
            got,
            "INVITE sip:2002@pbx SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.10\r\n\
             Proxy-Authorization: Digest username=\"1001\", realm=\"asterisk\", \
             nonce=\"5f3a\", uri=\"sip:2002@pbx\", response=\"<redacted>\", \
             algorithm=MD5, cnonce=\"<redacted>\", qop=auth, nc=00000001, auts=<redacted>\r\n\
             Content-Length: 0\r\n\r\n"
        );
        assert_eq!(
            sip_credentials(&got),
            got,
            "redacting twice changes nothing"
        );
    }

    #[test]
    fn any_case_spacing_folding_and_scheme_is_redacted() {
        let cases = [
            (
                "authorization : digest USERNAME=\"a\",RESPONSE = \"s\\\"ecret\"\r\n",
                "authorization : digest USERNAME=\"a\",RESPONSE = \"<redacted>\"\r\n",
            ),
            (
                "Authorization: Digest username=\"a\",\r\n  response=\"secret\"\r\nX: y\r\n",
                "Authorization: Digest username=\"a\",\r\n  response=\"<redacted>\"\r\nX: y\r\n",
            ),
            (
                "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l\r\n",
                "Authorization: Basic <redacted>\r\n",
            ),
            (
                "Proxy-Authorization: Digest username=\"a\"; response=\"secret\"\n",
                "Proxy-Authorization: Digest username=\"a\"<redacted>\n",
            ),
            // A message cut inside the header.
            (
                "Authorization: Digest username=\"a\", response=\"6629f",
                "Authorization: Digest username=\"a\", response=\"<redacted>\"",
            ),
            (
                "Authorization: \"secret\"\r\n",
                "Authorization: <redacted>\r\n",
            ),
        ];
        for (input, want) in cases {
            let got = sip_credentials(input);
            assert_eq!(got, want, "{input:?}");
            assert!(!got.contains("secret") && !got.contains("YWxh") && !got.contains("6629f"));
            assert_eq!(sip_credentials(&got), got);
        }
    }

    #[test]
    fn other_text_is_left_alone() {
        let msg = "SIP/2.0 407 Proxy Authentication Required\r\n\
                   Proxy-Authenticate: Digest realm=\"asterisk\", nonce=\"5f3a\"\r\n\
                   X-Authorization-Hint: response=\"kept\"\r\n\r\nv=0\r\n";
        assert!(matches!(sip_credentials(msg), Cow::Borrowed(_)));
        for odd in [
            "",
            "Authorization",
            "\u{e9}\\\"",
            "Authorization: Digest r=\"\u{e9}\\",
        ] {
            let _ = sip_credentials(odd);
        }
    }
}
