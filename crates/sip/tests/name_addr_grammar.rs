//! `NameAddr::parse` against the grammar of RFC 3261 §25: From values built from the grammar's
//! rules (name-addr or addr-spec, display names of tokens or quoted strings with quoted pairs,
//! URIs with userinfo, parameters and headers, header parameters with quoted values, optional
//! whitespace wherever SWS and LWS allow it), with display names that imitate a URI, a tag or
//! a closing quote. Each must give back the URI, user and tag it was built with, alone and in
//! a whole message.

use proptest::prelude::*;
use proptest::sample::select;

/// A From value with what a correct reader must find in it.
#[derive(Debug, Clone)]
struct Built {
    text: String,
    display: Option<String>,
    uri: String,
    user: String,
    tag: Option<String>,
}

const ALPHANUM: &str = "abcxyzABCXYZ0189";
/// token = 1*(alphanum / "-" / "." / "!" / "%" / "*" / "_" / "+" / "`" / "'" / "~")
const TOKEN_EXTRA: &str = "-.!%*_+`'~";
/// unreserved = alphanum / mark; mark = "-" / "_" / "." / "!" / "~" / "*" / "'" / "(" / ")"
const MARK: &str = "-_.!~*'()";
/// user-unreserved = "&" / "=" / "+" / "$" / "," / ";" / "?" / "/"
const USER_UNRESERVED: &str = "&=+$,;?/";
/// param-unreserved = "[" / "]" / "/" / ":" / "&" / "+" / "$"
const PARAM_UNRESERVED: &str = "[]/:&+$";
/// hnv-unreserved = "[" / "]" / "/" / "?" / ":" / "+" / "$"
const HNV_UNRESERVED: &str = "[]/?:+$";

fn chars_of(sets: &[&str]) -> Vec<char> {
    sets.iter().flat_map(|s| s.chars()).collect()
}

fn string_of(sets: &[&str], len: std::ops::Range<usize>) -> impl Strategy<Value = String> + use<> {
    let pool = chars_of(sets);
    prop::collection::vec(select(pool), len).prop_map(|v| v.into_iter().collect())
}

/// `escaped = "%" HEXDIG HEXDIG`, mixed into a run of characters from `sets`.
fn with_escapes(
    sets: &[&str],
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = String> + use<> {
    let plain = string_of(sets, 1..4);
    let escape = select(vec!["%41", "%3C", "%3e", "%22", "%40", "%20"]).prop_map(str::to_string);
    prop::collection::vec(prop_oneof![4 => plain, 1 => escape], len).prop_map(|v| v.concat())
}

fn token() -> impl Strategy<Value = String> {
    string_of(&[ALPHANUM, TOKEN_EXTRA], 1..8)
}

/// SWS = [LWS]; LWS = [*WSP CRLF] 1*WSP.
fn sws() -> impl Strategy<Value = &'static str> {
    select(vec!["", "", "", " ", "  ", "\t", " \r\n "])
}

fn lws() -> impl Strategy<Value = &'static str> {
    select(vec![" ", " ", "\t", "  ", "\r\n\t"])
}

/// A quoted-string's content: qdtext (LWS, %x21, %x23-5B, %x5D-7E, UTF8-NONASCII) and
/// quoted-pairs, with pieces that imitate a URI, a tag or an end of the string.
fn quoted_content() -> impl Strategy<Value = String> {
    let qdtext = string_of(&[ALPHANUM, " !#$%&'()*+,-./:;<=>?@[]^_`{|}~", "üé中"], 1..6);
    let pair = select(vec![
        "\\\"", "\\\\", "\\<", "\\>", "\\a", "\\;", "\\\t", "\\\x01",
    ])
    .prop_map(str::to_string);
    let bait = select(vec![
        "<sip:5551234@bank.example>",
        "sip:666@evil.example",
        "<",
        ">",
        ";tag=evil",
        "\\\"<sip:7@e>\\\"",
        "@",
    ])
    .prop_map(str::to_string);
    prop::collection::vec(prop_oneof![3 => qdtext, 2 => pair, 2 => bait], 0..5)
        .prop_map(|v| v.concat())
}

/// `display-name = *(token LWS) / quoted-string`: (as written before `<`, as it reads back).
fn display_name() -> impl Strategy<Value = Option<(String, String)>> {
    let tokens = (prop::collection::vec((token(), lws()), 1..4), sws()).prop_map(|(v, sws)| {
        let tokens: String = v.iter().map(|(t, w)| format!("{t}{w}")).collect();
        let written = format!("{sws}{tokens}");
        let read = written.trim().to_string();
        (written, read)
    });
    let quoted = (sws(), quoted_content(), sws()).prop_map(|(a, c, b)| {
        let read = c.clone();
        (format!("{a}\"{c}\"{b}"), read)
    });
    prop_oneof![1 => Just(None), 2 => tokens.prop_map(Some), 3 => quoted.prop_map(Some)]
}

fn host() -> impl Strategy<Value = String> {
    let label = string_of(&["abcxyz019"], 1..6);
    let name = prop::collection::vec(label, 1..4).prop_map(|l| l.join("."));
    let v4 = (0u8..=255, 0u8..=255, 0u8..=255, 1u8..=254)
        .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}"));
    let v6 = select(vec!["[2001:db8::1]", "[::1]", "[fe80::a:b]"]).prop_map(str::to_string);
    prop_oneof![3 => name, 1 => v4, 1 => v6]
}

/// A SIP or SIPS URI: (text, user as read back). `plain` leaves out what an addr-spec outside
/// `<>` may not hold (`,`, `;`, `?`: RFC 3261 20.10).
fn sip_uri(plain: bool) -> impl Strategy<Value = (String, String)> {
    let user_sets: &[&str] = if plain {
        &[ALPHANUM, MARK, "&=+$/"]
    } else {
        &[ALPHANUM, MARK, USER_UNRESERVED]
    };
    let user = prop::option::weighted(0.9, with_escapes(user_sets, 1..4));
    let password_sets: &[&str] = if plain {
        &[ALPHANUM, MARK, "&=+$"]
    } else {
        &[ALPHANUM, MARK, "&=+$,"]
    };
    let password = prop::option::weighted(0.1, with_escapes(password_sets, 1..3));
    let port = prop::option::of(1u16..=65535);
    let param = (
        string_of(&[ALPHANUM, MARK], 1..6),
        prop::option::of(with_escapes(&[ALPHANUM, MARK, PARAM_UNRESERVED], 1..3)),
    )
        .prop_map(|(k, v)| match v {
            Some(v) => format!(";{k}={v}"),
            None => format!(";{k}"),
        });
    let params = prop::collection::vec(param, 0..3).prop_map(|v| v.concat());
    let header = (
        with_escapes(&[ALPHANUM, MARK, HNV_UNRESERVED], 1..3),
        with_escapes(&[ALPHANUM, MARK, HNV_UNRESERVED], 0..3),
    )
        .prop_map(|(k, v)| format!("{k}={v}"));
    let headers = prop::option::weighted(0.2, prop::collection::vec(header, 1..3));
    (
        select(vec!["sip", "sips", "SIP"]),
        user,
        password,
        host(),
        port,
        params,
        headers,
    )
        .prop_map(
            move |(scheme, user, password, host, port, params, headers)| {
                let mut text = format!("{scheme}:");
                if let Some(u) = &user {
                    text.push_str(u);
                    if let Some(p) = &password {
                        text.push(':');
                        text.push_str(p);
                    }
                    text.push('@');
                }
                text.push_str(&host);
                if let Some(p) = port {
                    text.push_str(&format!(":{p}"));
                }
                if !plain {
                    text.push_str(&params);
                    if let Some(h) = &headers {
                        text.push('?');
                        text.push_str(&h.join("&"));
                    }
                }
                // Without a user part the host is what identifies the party.
                let read = user.unwrap_or(host);
                (text, read)
            },
        )
}

fn tel_uri() -> impl Strategy<Value = (String, String)> {
    (string_of(&["0123456789"], 3..10), prop::option::of(host())).prop_map(|(n, ctx)| {
        let number = format!("+{n}");
        let text = match ctx {
            Some(c) => format!("tel:{number};phone-context={c}"),
            None => format!("tel:{number}"),
        };
        (text, number)
    })
}

/// Header parameters: `tag` (maybe) and generic ones, some with quoted values that imitate a
/// URI.
fn header_params() -> impl Strategy<Value = (String, Option<String>)> {
    let generic = (
        token(),
        prop_oneof![
            Just(String::new()),
            token().prop_map(|t| format!("={t}")),
            host().prop_map(|h| format!("={h}")),
            quoted_content().prop_map(|q| format!("=\"{q}\"")),
        ],
    )
        .prop_filter("not a second tag", |(k, _)| !k.eq_ignore_ascii_case("tag"))
        .prop_map(|(k, v)| format!("{k}{v}"));
    (
        prop::option::of(token()),
        prop::collection::vec(generic, 0..3),
        0usize..4,
        sws(),
        sws(),
    )
        .prop_map(|(tag, mut params, at, before, after)| {
            if let Some(t) = &tag {
                params.insert(at.min(params.len()), format!("tag={t}"));
            }
            let text = params
                .iter()
                .map(|p| format!("{before};{after}{p}"))
                .collect();
            (text, tag)
        })
}

/// from-spec = ( name-addr / addr-spec ) *( SEMI from-param )
fn from_spec() -> impl Strategy<Value = Built> {
    let name_addr = (
        display_name(),
        prop_oneof![4 => sip_uri(false), 1 => tel_uri()],
        header_params(),
        sws(),
    )
        .prop_map(|(display, (uri, user), (params, tag), after)| {
            let (written, read) = display.unzip();
            Built {
                text: format!("{}<{uri}>{after}{params}", written.unwrap_or_default()),
                display: read.filter(|d| !d.is_empty()),
                uri,
                user,
                tag,
            }
        });
    let addr_spec =
        (sip_uri(true), header_params()).prop_map(|((uri, user), (params, tag))| Built {
            text: format!("{uri}{params}"),
            display: None,
            uri,
            user,
            tag,
        });
    prop_oneof![3 => name_addr, 1 => addr_spec]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 4096,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn from_values_of_the_grammar_give_their_uri_user_and_tag(b in from_spec()) {
        let n = sip::NameAddr::parse(&b.text);
        prop_assert_eq!(n.uri, b.uri.as_str(), "URI of {:?}", b.text);
        prop_assert_eq!(n.user(), b.user.as_str(), "user of {:?}", b.text);
        prop_assert_eq!(n.tag, b.tag.as_deref(), "tag of {:?}", b.text);
        prop_assert_eq!(n.display, b.display.as_deref(), "display name of {:?}", b.text);

        // The same value as a message's From header (folded lines and all).
        let msg = format!(
            "INVITE sip:2000@pbx SIP/2.0\r\nFrom: {}\r\nTo: <sip:2000@pbx>\r\n\
             Call-ID: p@x\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
            b.text
        );
        let m = sip::Message::parse(msg.as_bytes()).unwrap();
        let from = m.from().unwrap();
        prop_assert_eq!(from.user(), b.user.as_str(), "user of From: {:?}", b.text);
        prop_assert_eq!(from.tag, b.tag.as_deref());
    }
}
