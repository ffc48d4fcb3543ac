//! SIP URI equality (RFC 3261 19.1.4), for checks where two spellings of one URI must agree:
//! a digest response's `uri` against the Request-URI it authenticates (RFC 7616 3.4.6).
//!
//! Equal when: both SIP or both SIPS; the userinfo (user and password) is the same, case and
//! all; host and port are the same, case aside (an absent port is not 5060); every URI parameter
//! present in both has the same value, and `transport`, `user`, `ttl`, `method` and `maddr` are
//! present in both or in neither (other parameters present in one only are ignored); the
//! headers are the same set. Parameters and headers may come in any order, and an escaped character that needs
//! no escaping (`%61`) equals the character itself.

/// Characters that keep their meaning only unescaped (RFC 3261 §25 `reserved`): `%3B` is not
/// `;`.
const RESERVED: &[u8] = b";/?:@&=+$,";

/// `s` with every `%XX` that stands for an unreserved character decoded, the others kept (hex
/// digits in upper case), and everything lower-cased when `fold` (every part but userinfo).
fn normal(s: &str, fold: bool) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let escaped = (b[i] == b'%')
            .then(|| b.get(i + 1..i + 3))
            .flatten()
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match escaped {
            Some(c) if c.is_ascii() && !RESERVED.contains(&c) && c > b' ' => {
                out.push(if fold { c.to_ascii_lowercase() } else { c } as char);
                i += 3;
            }
            Some(c) => {
                out.push_str(&format!("%{c:02X}"));
                i += 3;
            }
            None => {
                // Copy the whole character (a URI is ASCII, but the input may not be).
                let len = s[i..].chars().next().map_or(1, char::len_utf8);
                let piece = &s[i..i + len];
                if fold {
                    out.push_str(&piece.to_ascii_lowercase());
                } else {
                    out.push_str(piece);
                }
                i += len;
            }
        }
    }
    out
}

/// A SIP or SIPS URI in the parts equality compares, each normalised.
#[derive(Debug, PartialEq, Eq)]
struct Parts {
    secure: bool,
    userinfo: Option<String>,
    host: String,
    port: Option<String>,
    /// (name, value), sorted by name.
    params: Vec<(String, Option<String>)>,
    /// `name=value`, sorted.
    headers: Vec<String>,
}

fn parts(uri: &str) -> Option<Parts> {
    let (scheme, rest) = uri.trim().split_once(':')?;
    let secure = if scheme.eq_ignore_ascii_case("sips") {
        true
    } else if scheme.eq_ignore_ascii_case("sip") {
        false
    } else {
        return None;
    };
    // The userinfo ends at the one `@` a SIP URI may hold; it may itself hold `;` and `?`.
    let (userinfo, rest) = match rest.find('@') {
        Some(at) => (Some(normal(&rest[..at], false)), &rest[at + 1..]),
        None => (None, rest),
    };
    let (rest, headers) = rest.split_once('?').unwrap_or((rest, ""));
    let (hostport, params) = rest.split_once(';').unwrap_or((rest, ""));
    let (host, port) = if hostport.starts_with('[') {
        let close = hostport.find(']')?;
        let port = hostport[close + 1..].strip_prefix(':');
        (&hostport[..=close], port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let mut params: Vec<(String, Option<String>)> = params
        .split(';')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (normal(k, true), Some(normal(v, true))),
            None => (normal(p, true), None),
        })
        .collect();
    params.sort();
    let mut headers: Vec<String> = headers
        .split('&')
        .filter(|h| !h.is_empty())
        .map(|h| normal(h, true))
        .collect();
    headers.sort();
    Some(Parts {
        secure,
        userinfo,
        host: normal(host, true),
        port: port.map(|p| p.to_string()),
        params,
        headers,
    })
}

/// Whether SIP (or SIPS) URIs `a` and `b` are equal by RFC 3261 19.1.4. URIs of other schemes
/// are equal only as the same text, the scheme's case aside.
pub fn uri_eq(a: &str, b: &str) -> bool {
    let (Some(a), Some(b)) = (parts(a), parts(b)) else {
        return match (a.trim().split_once(':'), b.trim().split_once(':')) {
            (Some((sa, ra)), Some((sb, rb))) => sa.eq_ignore_ascii_case(sb) && ra == rb,
            _ => a.trim() == b.trim(),
        };
    };
    if a.secure != b.secure
        || a.userinfo != b.userinfo
        || a.host != b.host
        || a.port != b.port
        || a.headers != b.headers
    {
        return false;
    }
    let value = |p: &Parts, name: &str| {
        p.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let names = a.params.iter().chain(&b.params).map(|(k, _)| k.as_str());
    for name in names {
        match (value(&a, name), value(&b, name)) {
            (Some(x), Some(y)) if x != y => return false,
            (Some(_), None) | (None, Some(_))
                if matches!(name, "transport" | "user" | "ttl" | "method" | "maddr") =>
            {
                return false;
            }
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::uri_eq;

    #[test]
    fn rfc_3261_19_1_4_equal_uris() {
        for (a, b) in [
            (
                "sip:%61lice@atlanta.com;transport=TCP",
                "sip:alice@AtLanTa.CoM;Transport=tcp",
            ),
            ("sip:carol@chicago.com", "sip:carol@chicago.com;newparam=5"),
            ("sip:carol@chicago.com", "sip:carol@chicago.com;security=on"),
            (
                "sip:carol@chicago.com;newparam=5",
                "sip:carol@chicago.com;security=on",
            ),
            (
                "sip:biloxi.com;transport=tcp;method=REGISTER?to=sip:bob%40biloxi.com",
                "sip:biloxi.com;method=REGISTER;transport=tcp?to=sip:bob%40biloxi.com",
            ),
            (
                "sip:alice@atlanta.com?subject=project%20x&priority=urgent",
                "sip:alice@atlanta.com?priority=urgent&subject=project%20x",
            ),
            ("SIP:127.0.0.1:5060", "sip:127.0.0.1:5060"),
            ("sip:[2001:DB8::1]:5060", "sip:[2001:db8::1]:5060"),
        ] {
            assert!(uri_eq(a, b), "{a} = {b}");
            assert!(uri_eq(b, a), "{b} = {a}");
        }
    }

    #[test]
    fn rfc_3261_19_1_4_unequal_uris() {
        for (a, b) in [
            (
                "SIP:ALICE@AtLanTa.CoM;Transport=udp",
                "sip:alice@AtLanTa.CoM;Transport=UDP",
            ),
            ("sip:bob@biloxi.com", "sip:bob@biloxi.com:5060"),
            ("sip:bob@biloxi.com", "sip:bob@biloxi.com;transport=udp"),
            (
                "sip:bob@biloxi.com",
                "sip:bob@biloxi.com:6000;transport=tcp",
            ),
            (
                "sip:carol@chicago.com",
                "sip:carol@chicago.com?Subject=next%20meeting",
            ),
            ("sip:bob@phone21.boxesbybob.com", "sip:bob@192.0.2.4"),
            (
                "sip:carol@chicago.com;security=on",
                "sip:carol@chicago.com;security=off",
            ),
            ("sip:a@b", "sips:a@b"),
            ("sip:a@b", "sip:a@b;maddr=192.0.2.1"),
            ("sip:a@b", "sip:a:pw@b"),
            ("sip:127.0.0.1:5060", "sip:evil.example"),
            ("sip:a%3Bb@x", "sip:a;b@x"),
            ("sip:x", ""),
        ] {
            assert!(!uri_eq(a, b), "{a} != {b}");
            assert!(!uri_eq(b, a), "{b} != {a}");
        }
    }

    #[test]
    fn other_schemes_are_compared_as_text() {
        assert!(uri_eq("TEL:+4411", "tel:+4411"));
        assert!(!uri_eq("tel:+4411", "tel:+4412"));
        assert!(!uri_eq("tel:+4411", "sip:+4411@x"));
    }
}
