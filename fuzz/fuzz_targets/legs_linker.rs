//! The linker shown a stream of INVITEs made from the input: every field (Call-ID, numbers,
//! header values, correlation ids, addresses, times going back and forth) is bytes from the
//! fuzzer. It never panics, its tables stay within their bounds, a link always names a dialog
//! it was shown, and the same input gives the same links (every worker decides alike).
#![no_main]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;

fn config() -> legs::LegsConfig {
    legs::LegsConfig {
        pbx: vec!["10.0.0.2".into()],
        prefix_rules: vec![
            legs::PrefixRule {
                strip: "9".into(),
                add: String::new(),
            },
            legs::PrefixRule {
                strip: "0".into(),
                add: "+49".into(),
            },
        ],
        max_dialogs: 64,
        max_tokens: 16,
        max_pending: 16,
        max_addresses: 8,
        window_ms: 2_000,
        memory_ms: 60_000,
        ..legs::LegsConfig::default()
    }
}

/// The links of the INVITEs `data` describes.
fn run(data: &[u8]) -> Vec<Option<legs::Link>> {
    let mut k = legs::Linker::new(config()).unwrap();
    let mut out = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut ts: i64 = 0;
    // Each INVITE: a control byte, then up to six text fields split at 0xff.
    for record in data.split(|&b| b == 0xfe).take(512) {
        let Some((&ctl, rest)) = record.split_first() else {
            continue;
        };
        let mut f = rest.split(|&b| b == 0xff).map(String::from_utf8_lossy);
        let mut next = || f.next().unwrap_or_default().into_owned();
        let (call_id, caller, called, value, corr, to) =
            (next(), next(), next(), next(), next(), next());
        ts += i64::from(ctl & 0x0f) * 300_000_000 - if ctl & 0x10 != 0 { 1_000_000_000 } else { 0 };
        let host = |b: u8| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, b % 4)), 5060);
        let headers = [("X-CID", value.as_str())];
        let inv = legs::Invite {
            ts_ns: ts,
            src: host(ctl >> 5),
            dst: host(ctl >> 3),
            call_id: &call_id,
            caller: &caller,
            ruri_user: &called,
            to_user: &to,
            initial: ctl & 0x80 == 0,
            headers: if ctl & 0x20 != 0 { &headers } else { &[] },
            correlation: (ctl & 0x40 != 0).then_some(corr.as_str()),
        };
        let link = k.invite(&inv);
        if let Some(l) = &link {
            assert!(seen.iter().any(|s| **s == *l.group.call_id), "a link to an unseen dialog");
            assert!((0.0..=1.0).contains(&l.confidence));
        }
        seen.push(call_id.clone());
        out.push(link);
        let c = k.counters();
        assert!(c.by_b2bua + c.by_header + c.by_correlation <= c.dialogs);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    assert_eq!(run(data), run(data));
});
