//! What the login reads from a request, bounded before anything else: the form (at most
//! [`LOGIN_FORM_BYTES_MAX`] bytes, then each field), the page to go to after the login (`next`,
//! a path on this site or `/`), the client's address behind a trusted proxy, and a
//! user-supplied text as it may appear in a log line. No IO; fuzzed
//! (`fuzz/fuzz_targets/login_form.rs`).

use crate::accounts::{PASSWORD_BYTES_MAX, USER_NAME_BYTES_MAX};
use std::fmt;
use std::net::IpAddr;

/// Longest login form body: room for the longest name, password and `next`, each
/// percent-encoded (three bytes a byte). A longer body is refused (413) unread.
pub const LOGIN_FORM_BYTES_MAX: usize = 16 * 1024;
/// Longest `next`; a longer one is replaced by `/`.
pub const NEXT_BYTES_MAX: usize = 2048;
/// Most characters of a user-supplied text written to a log line.
pub const LOG_TEXT_CHARS_MAX: usize = 64;

/// A login form as sent. The name and the password may be longer than any account's: such an
/// attempt fails (and is counted) without a password check ([`LoginForm::within_limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginForm {
    pub user: String,
    pub password: String,
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("the login form is longer than {LOGIN_FORM_BYTES_MAX} bytes")]
    TooLong,
    #[error("the login form has no {0} field")]
    Missing(&'static str),
    #[error("the login form has its {0} field twice")]
    Repeated(&'static str),
}

impl LoginForm {
    /// Reads an `application/x-www-form-urlencoded` body with the fields `user`, `password`
    /// and optionally `next` (others are ignored).
    pub fn parse(body: &[u8]) -> Result<LoginForm, FormError> {
        if body.len() > LOGIN_FORM_BYTES_MAX {
            return Err(FormError::TooLong);
        }
        let (mut user, mut password, mut next) = (None, None, None);
        for (key, value) in form_urlencoded::parse(body) {
            let (slot, name) = match key.as_ref() {
                "user" => (&mut user, "user"),
                "password" => (&mut password, "password"),
                "next" => (&mut next, "next"),
                _ => continue,
            };
            if slot.replace(value.into_owned()).is_some() {
                return Err(FormError::Repeated(name));
            }
        }
        Ok(LoginForm {
            user: user.ok_or(FormError::Missing("user"))?,
            password: password.ok_or(FormError::Missing("password"))?,
            next,
        })
    }

    /// Whether the name and the password are within what an account can have: past that, no
    /// account can match and no password check is spent.
    pub fn within_limits(&self) -> bool {
        !self.user.is_empty()
            && self.user.len() <= USER_NAME_BYTES_MAX
            && self.password.len() <= PASSWORD_BYTES_MAX
    }
}

/// Where to go after the login: `next` when it is a path on this site, else `/`. A path has
/// one leading `/` (not `//` nor `/\`, which browsers read as another host), no scheme, and
/// only the characters of a URI's path and query (RFC 3986: unreserved, sub-delims, `:`, `@`,
/// `/`, `?`, `%`): no control character, space or backslash, so it is always a valid
/// `Location` header.
pub fn local_target(next: Option<&str>) -> String {
    match next {
        Some(n) if is_local_path(n) => n.to_owned(),
        _ => "/".to_owned(),
    }
}

/// Most `X-Forwarded-For` entries read from the right: a chain of proxies longer than this is
/// not one an operator configured.
pub const FORWARDED_HOPS_MAX: usize = 8;

/// The address a login comes from: `peer` itself, unless `peer` is one of `trusted` proxies;
/// then the rightmost `X-Forwarded-For` entry that is not a trusted proxy (entries to its left
/// were written by the client and prove nothing). A malformed entry stops the walk at the last
/// proxy, so that a forged header never names an address the proxy did not see.
pub fn client_address<'a>(
    peer: IpAddr,
    forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    trusted: &[IpAddr],
) -> IpAddr {
    let mut client = peer;
    let entries = forwarded_for.rev().flat_map(|v| v.rsplit(','));
    for entry in entries.take(FORWARDED_HOPS_MAX) {
        if !trusted.contains(&client) {
            break;
        }
        match entry.trim().parse::<IpAddr>() {
            Ok(a) => client = a,
            Err(_) => break,
        }
    }
    client
}

fn is_local_path(n: &str) -> bool {
    let b = n.as_bytes();
    let uri_char = |c: &u8| c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(c);
    b.len() <= NEXT_BYTES_MAX
        && b.first() == Some(&b'/')
        && b.get(1) != Some(&b'/')
        && b.iter().all(uri_char)
}

/// A user-supplied text as a log line may show it: at most [`LOG_TEXT_CHARS_MAX`] characters,
/// control and formatting characters escaped (`\u{a}`), so that no input forges a line or
/// fills the log.
pub struct LogText<'a>(pub &'a str);

impl fmt::Display for LogText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shown, (i, c)) in self.0.char_indices().enumerate() {
            if shown == LOG_TEXT_CHARS_MAX {
                return write!(f, "…(+{} bytes)", self.0.len() - i);
            }
            if c == '\\' {
                f.write_str("\\\\")?;
            } else if c.is_ascii_graphic() || c == ' ' || (!c.is_ascii() && c.is_alphanumeric()) {
                write!(f, "{c}")?;
            } else {
                write!(f, "{}", c.escape_unicode())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_read_and_bounded() {
        let f = LoginForm::parse(b"user=ops&password=a+b%26c&next=%2Fcalls%3Fq%3D1").unwrap();
        assert_eq!(f.user, "ops");
        assert_eq!(f.password, "a b&c");
        assert_eq!(f.next.as_deref(), Some("/calls?q=1"));
        assert!(f.within_limits());
        assert_eq!(
            LoginForm::parse(b"password=x"),
            Err(FormError::Missing("user"))
        );
        assert_eq!(
            LoginForm::parse(b"user=a&user=b&password=x"),
            Err(FormError::Repeated("user"))
        );
        let long = format!("user=ops&password={}", "x".repeat(LOGIN_FORM_BYTES_MAX));
        assert_eq!(LoginForm::parse(long.as_bytes()), Err(FormError::TooLong));
        let over = format!("user=ops&password={}", "x".repeat(PASSWORD_BYTES_MAX + 1));
        assert!(!LoginForm::parse(over.as_bytes()).unwrap().within_limits());
        let name = format!("user={}&password=x", "n".repeat(USER_NAME_BYTES_MAX + 1));
        assert!(!LoginForm::parse(name.as_bytes()).unwrap().within_limits());
    }

    #[test]
    fn a_login_only_sends_back_to_a_path_on_this_site() {
        for ok in [
            "/",
            "/dashboard?range=1h",
            "/calls?caller=%2B33&to=2024-01-01T00:00",
        ] {
            assert_eq!(local_target(Some(ok)), ok);
        }
        for bad in [
            "//evil.example/",
            "/\\evil.example",
            "https://evil.example/",
            "javascript:alert(1)",
            "/\t/127.0.0.2:19999/pwned",
            "/a\nSet-Cookie: x=1",
            "/a\0",
            "/a\x7f",
            "/a b",
            "/a\\b",
            "/é",
            "",
            "dashboard",
        ] {
            assert_eq!(local_target(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(local_target(None), "/");
        let long = format!("/{}", "a".repeat(NEXT_BYTES_MAX));
        assert_eq!(local_target(Some(&long)), "/");
    }

    #[test]
    fn a_forwarded_address_is_believed_from_a_trusted_proxy_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let proxy = ip("127.0.0.1");
        let trusted = [proxy, ip("10.0.0.2")];
        let from = |peer, xff: &[&'static str]| client_address(peer, xff.iter().copied(), &trusted);
        // No proxy: the header is the client's own word.
        assert_eq!(from(ip("192.0.2.9"), &["198.51.100.1"]), ip("192.0.2.9"));
        assert_eq!(from(proxy, &[]), proxy);
        assert_eq!(from(proxy, &["198.51.100.1"]), ip("198.51.100.1"));
        // A client's forged entries sit left of what the proxies add.
        assert_eq!(
            from(proxy, &["203.0.113.5, 198.51.100.1", "10.0.0.2"]),
            ip("198.51.100.1")
        );
        assert_eq!(from(proxy, &["2001:db8::7 , 10.0.0.2"]), ip("2001:db8::7"));
        assert_eq!(from(proxy, &["garbage"]), proxy);
        assert_eq!(from(proxy, &["198.51.100.1, 10.0.0.2:80"]), proxy);
        let long = vec!["10.0.0.2"; 3 * FORWARDED_HOPS_MAX];
        assert_eq!(from(proxy, &long), ip("10.0.0.2"));
    }

    #[test]
    fn a_log_text_cannot_forge_a_line_or_fill_the_log() {
        let forged = "admin\n2024-01-01T00:00:00Z WARN console login user=admin";
        let shown = LogText(forged).to_string();
        assert!(!shown.contains('\n'), "{shown}");
        assert!(shown.starts_with("admin\\u{a}2024"), "{shown}");
        let huge = "A".repeat(1 << 20);
        let shown = LogText(&huge).to_string();
        assert!(shown.len() < 100, "{shown}");
        assert!(shown.ends_with(&format!("…(+{} bytes)", (1 << 20) - 64)));
        assert_eq!(LogText("zoë.o'neil").to_string(), "zoë.o'neil");
        assert_eq!(LogText("a\u{202e}b\\").to_string(), "a\\u{202e}b\\\\");
    }
}
