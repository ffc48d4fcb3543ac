//! What the console's login reads before anything else: the form body, the page to go to
//! afterwards (`next`), `X-Forwarded-For` and a user-supplied text as a log line shows it.
//! None may panic; a form past its bound is refused unread; `next` only ever leads to a path
//! on this site that is a valid `Location`; a forwarded address is believed only from a
//! trusted proxy; a logged text holds no control character and stays short.
#![no_main]

use console::login_form::{
    LOG_TEXT_CHARS_MAX, LOGIN_FORM_BYTES_MAX, LogText, LoginForm, NEXT_BYTES_MAX, client_address,
    local_target,
};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};

/// `next` as a browser may be sent back to: `/` or a path of URI characters with one
/// leading `/`.
fn assert_local(target: &str) {
    let b = target.as_bytes();
    assert_eq!(b.first(), Some(&b'/'), "{target:?}");
    assert!(
        !target.starts_with("//") && !target.starts_with("/\\"),
        "{target:?}"
    );
    assert!(b.len() <= NEXT_BYTES_MAX, "{} bytes", b.len());
    // A header value that cannot end the header or start another, nor be read as a scheme.
    assert!(
        b.iter().all(|c| c.is_ascii_graphic() && *c != b'\\'),
        "{target:?}"
    );
}

/// A logged text: one line of printable characters, at most [`LOG_TEXT_CHARS_MAX`] of the
/// input's, each escape at most `\u{10ffff}`, then the count of bytes left out.
fn assert_loggable(text: &str) {
    let shown = LogText(text).to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(
        shown.len() <= LOG_TEXT_CHARS_MAX * 10 + 32,
        "{} bytes",
        shown.len()
    );
    if text.chars().count() <= LOG_TEXT_CHARS_MAX {
        assert!(!shown.contains("…(+"), "{shown:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The input as a `next` of its own, and as a name to log.
    assert_local(&local_target(Some(&text)));
    assert_loggable(&text);
    // The input as `X-Forwarded-For` lines, from a stranger and from a trusted proxy.
    let proxy = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let stranger = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    assert_eq!(client_address(stranger, text.lines(), &[proxy]), stranger);
    let client = client_address(proxy, text.lines(), &[proxy]);
    if client != proxy {
        // Only an address one of the header's entries spells, whole.
        let entries = text.lines().flat_map(|l| l.split(','));
        assert!(
            entries
                .filter_map(|e| e.trim().parse::<IpAddr>().ok())
                .any(|a| a == client),
            "{client}"
        );
    }
    if let Ok(form) = LoginForm::parse(data) {
        assert!(data.len() <= LOGIN_FORM_BYTES_MAX);
        // Decoding never makes a field longer than the body it came from.
        assert!(form.user.len() + form.password.len() <= data.len() * 3);
        let target = local_target(form.next.as_deref());
        assert_local(&target);
        // A valid path is kept as it was sent.
        if target != "/" {
            assert_eq!(form.next.as_deref(), Some(target.as_str()));
        }
        assert_loggable(&form.user);
        if form.within_limits() {
            assert!(!form.user.is_empty());
        }
    }
});
