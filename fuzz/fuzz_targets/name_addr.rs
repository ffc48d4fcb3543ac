//! From/To/Contact values (`sip::NameAddr`): any text is read without a panic and every part
//! read lies within it; and a name-addr built from fuzzed parts (a quoted display name with
//! its `"` and `\` escaped, a URI of URI characters, a tag) gives back that URI and tag, whatever
//! the display name holds: a display name is never taken for the caller.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Whether `part` is a slice of `whole`.
fn within(part: &str, whole: &str) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let n = sip::NameAddr::parse(&text);
    assert!(within(n.uri, &text) && within(n.params, &text));
    assert!(n.display.is_none_or(|d| within(d, &text)));
    assert!(n.tag.is_none_or(|t| within(t, &n.params)));
    assert!(within(n.user(), n.uri) || n.uri.is_empty());

    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let (display, uri) = rest.split_at((cut as usize).min(rest.len()));
    let mut quoted = String::from("\"");
    for c in String::from_utf8_lossy(display).chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            '\r' | '\n' => {}
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    // What a SIP URI may hold (RFC 3261 §25), `<`, `>`, `"` and white space never.
    let uri: String = std::iter::once("sip:".to_string())
        .chain(
            uri.iter()
                .map(|&b| b as char)
                .filter(|c| c.is_ascii_alphanumeric() || "-_.!~*'()&=+$,;?/:@[]%".contains(*c))
                .map(String::from),
        )
        .collect();
    let value = format!("{quoted} <{uri}>;tag=f1");
    let n = sip::NameAddr::parse(&value);
    assert_eq!(n.uri, uri, "{value:?}");
    assert_eq!(n.user(), sip::uri_user(&uri));
    assert_eq!(n.tag, Some("f1"), "{value:?}");
});
