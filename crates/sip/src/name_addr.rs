//! From, To, Contact and the like: `name-addr` or `addr-spec` followed by header parameters
//! (RFC 3261 §25):
//!
//! ```text
//! from-spec    = ( name-addr / addr-spec ) *( SEMI from-param )
//! name-addr    = [ display-name ] LAQUOT addr-spec RAQUOT
//! display-name = *(token LWS) / quoted-string
//! quoted-string = SWS DQUOTE *(qdtext / quoted-pair ) DQUOTE
//! quoted-pair  = "\" (%x00-09 / %x0B-0C / %x0E-7F)
//! ```
//!
//! The URI is what identifies the party; the display name is free text its sender chose, and
//! may itself look like a URI (`"<sip:5551234@bank.example>" <sip:1001@pbx>`). So the display
//! name is read first, as the grammar has it (a quoted string to its closing quote, skipping
//! quoted pairs such as `\"`; or tokens up to `<`), and the URI only after it. Without angle
//! brackets every `;` parameter is the header's, not the URI's (RFC 3261 20.10).

/// A From/To/Contact value: `"Display" <uri>;tag=x` or `uri;tag=x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameAddr<'a> {
    /// The display name as written: a quoted string's content without its quotes (quoted
    /// pairs such as `\"` left as written), or unquoted tokens; `None` when absent or empty.
    pub display: Option<&'a str>,
    /// The URI: what stands inside `<>`, or an addr-spec up to its first `;`. Empty when the
    /// value has none that can be told (a quoted display name that never ends).
    pub uri: &'a str,
    /// The `tag` header parameter.
    pub tag: Option<&'a str>,
    /// The header parameters after the URI as written, from their first `;` (`;tag=a;q=1`),
    /// or empty.
    pub params: &'a str,
}

/// The end (exclusive) of the quoted string that opens `s` (which starts with `"`), or `None`
/// when it never closes.
fn quoted_end(s: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The first `byte` in `s` that stands outside quoted strings, or `s.len()`.
fn outside_quotes(s: &str, byte: u8) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => match quoted_end(&b[i..]) {
                Some(n) => i += n,
                None => return b.len(),
            },
            c if c == byte => return i,
            _ => i += 1,
        }
    }
    b.len()
}

fn non_empty(s: &str) -> Option<&str> {
    let s = s.trim();
    (!s.is_empty()).then_some(s)
}

impl<'a> NameAddr<'a> {
    pub fn parse(value: &'a str) -> NameAddr<'a> {
        let value = value.trim();
        let b = value.as_bytes();
        // Where `<` opens the URI, and the display name before it.
        let (display, open) = if b.first() == Some(&b'"') {
            let Some(end) = quoted_end(b) else {
                // An unterminated quoted string: everything after the quote is display text,
                // and no URI can be told from it. The empty parts are slices of the value's end,
                // so that every part lies within what was read.
                let end = &value[value.len()..];
                return NameAddr {
                    display: non_empty(&value[1..]),
                    uri: end,
                    tag: None,
                    params: end,
                };
            };
            let display = Some(&value[1..end - 1]).filter(|d| !d.is_empty());
            let rest = value[end..].trim_start();
            if rest.starts_with('<') {
                (display, Some(value.len() - rest.len()))
            } else {
                // Not the grammar (a quoted name must be followed by `<`), read leniently:
                // what follows is an addr-spec.
                return NameAddr::addr_spec(display, rest);
            }
        } else {
            // Unquoted tokens up to `<`; a `;` before any `<` means an addr-spec, whose
            // parameters (maybe quoted strings holding `<`) are the header's.
            let lt = outside_quotes(value, b'<');
            if lt < outside_quotes(value, b';') {
                (non_empty(&value[..lt]), Some(lt))
            } else {
                (None, None)
            }
        };
        let Some(open) = open else {
            return NameAddr::addr_spec(display, value);
        };
        let inside = &value[open + 1..];
        // A URI never holds `>` (RFC 3986 escapes it), so the first one closes it.
        let (uri, after) = match inside.find('>') {
            Some(gt) => (&inside[..gt], &inside[gt + 1..]),
            None => (inside, &inside[inside.len()..]),
        };
        let params = &after[after.find(';').unwrap_or(after.len())..];
        NameAddr {
            display,
            uri: uri.trim(),
            tag: tag_of(params),
            params,
        }
    }

    /// An addr-spec: the URI to the first `;`, the header's parameters from there.
    fn addr_spec(display: Option<&'a str>, s: &'a str) -> NameAddr<'a> {
        let semi = outside_quotes(s, b';');
        let params = &s[semi..];
        NameAddr {
            display,
            uri: s[..semi].trim(),
            tag: tag_of(params),
            params,
        }
    }

    /// The user part of the URI (`sip:alice@host` → `alice`), else the host part.
    pub fn user(&self) -> &'a str {
        uri_user(self.uri)
    }
}

/// The value of the `tag` parameter in `;a=b;tag=x`.
fn tag_of(params: &str) -> Option<&str> {
    crate::split_outside(params, b';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("tag").then(|| v.trim())
    })
}

/// The user part of a SIP/SIPS/TEL URI, or its host when it has no user part.
///
/// In a SIP URI the userinfo is everything before the `@` (RFC 3261 §25: `user` may hold `;`
/// and `?`, as in `sip:+15551234;npdi@example.com`, and no part of a URI but the userinfo's end
/// holds `@`), less a `:password`. A TEL URI's number ends at its first `;`.
pub fn uri_user(uri: &str) -> &str {
    let (scheme, rest) = uri.split_once(':').unwrap_or(("", uri));
    let is = |s: &str| scheme.eq_ignore_ascii_case(s);
    let rest = if is("sip") || is("sips") || is("tel") {
        rest
    } else {
        uri
    };
    if !is("tel")
        && let Some(at) = rest.find('@')
    {
        let userinfo = &rest[..at];
        return userinfo.split(':').next().unwrap_or(userinfo);
    }
    let end = rest.find([';', '?', '>']).unwrap_or(rest.len());
    let rest = &rest[..end];
    if rest.starts_with('[')
        && let Some(close) = rest.find(']')
    {
        return &rest[..=close]; // an IPv6 reference, whose colons are no port's
    }
    rest.split(':').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(v: &str) -> (Option<&str>, &str, Option<&str>, &str) {
        let n = NameAddr::parse(v);
        (n.display, n.uri, n.tag, n.params)
    }

    #[test]
    fn every_part_of_an_unfinished_value_lies_within_it() {
        // Found by the name_addr fuzz target: empty parts were literals, not slices of the
        // value, so an offset taken from them pointed outside it.
        for value in ["\"\0\x08", "\"Alice", "<sip:a@b"] {
            let n = NameAddr::parse(value);
            let range = value.as_ptr() as usize..=value.as_ptr() as usize + value.len();
            for part in [n.uri, n.params] {
                assert!(range.contains(&(part.as_ptr() as usize)), "{value:?}");
                assert!(range.contains(&(part.as_ptr() as usize + part.len())));
            }
        }
    }

    #[test]
    fn a_display_name_that_looks_like_a_uri_is_only_a_display_name() {
        let n = NameAddr::parse("\"<sip:5551234@bank.example>\" <sip:1001@pbx.example>;tag=9");
        assert_eq!(n.display, Some("<sip:5551234@bank.example>"));
        assert_eq!(
            (n.uri, n.user(), n.tag),
            ("sip:1001@pbx.example", "1001", Some("9"))
        );
        // Escaped quotes and angle brackets inside the quoted name.
        let n = NameAddr::parse(r#""a \"<sip:666@evil>\" b" <sip:1001@pbx>"#);
        assert_eq!(n.display, Some(r#"a \"<sip:666@evil>\" b"#));
        assert_eq!(n.user(), "1001");
        // A backslash escaping the backslash: the quote after it closes the name.
        let n = NameAddr::parse(r#""x\\" <sip:1001@pbx>"#);
        assert_eq!((n.display, n.user()), (Some(r"x\\"), "1001"));
    }

    #[test]
    fn every_form_of_the_grammar() {
        assert_eq!(
            parts("Alice Smith <sip:alice@a.example>;tag=x"),
            (
                Some("Alice Smith"),
                "sip:alice@a.example",
                Some("x"),
                ";tag=x"
            )
        );
        assert_eq!(
            parts("\"Alice\"<sip:alice@a.example;transport=tcp>;tag=x;foo=\"<y>\""),
            (
                Some("Alice"),
                "sip:alice@a.example;transport=tcp",
                Some("x"),
                ";tag=x;foo=\"<y>\""
            )
        );
        // An addr-spec: the parameters are the header's, quoted ones holding `<` included.
        assert_eq!(
            parts("sip:1001@pbx;tag=7;x=\"<sip:6@e>\""),
            (None, "sip:1001@pbx", Some("7"), ";tag=7;x=\"<sip:6@e>\"")
        );
        assert_eq!(parts("<sip:a@b>"), (None, "sip:a@b", None, ""));
        assert_eq!(parts("\"\" <sip:a@b>"), (None, "sip:a@b", None, ""));
        assert_eq!(parts("  tel:+4411 "), (None, "tel:+4411", None, ""));
        // Not the grammar, read leniently.
        assert_eq!(
            parts("\"A\" sip:a@b;tag=1"),
            (Some("A"), "sip:a@b", Some("1"), ";tag=1")
        );
        assert_eq!(parts("<sip:a@b;tag=1"), (None, "sip:a@b;tag=1", None, ""));
        assert_eq!(
            parts("\"<sip:6@e> <sip:7@e>"),
            (Some("<sip:6@e> <sip:7@e>"), "", None, "")
        );
        assert_eq!(parts(""), (None, "", None, ""));
    }

    #[test]
    fn uri_users() {
        assert_eq!(uri_user("sip:100@10.0.0.1:5060;transport=tcp"), "100");
        assert_eq!(uri_user("tel:+4411"), "+4411");
        assert_eq!(uri_user("tel:+4411;phone-context=example.com"), "+4411");
        assert_eq!(uri_user("sip:example.com"), "example.com");
        assert_eq!(uri_user("sip:alice:secret@example.com"), "alice");
        assert_eq!(uri_user("sip:+15551234;npdi@example.com"), "+15551234;npdi");
        assert_eq!(uri_user("sips:a@b?subject=x"), "a");
        assert_eq!(uri_user("sip:[2001:db8::1]:5060"), "[2001:db8::1]");
    }
}
