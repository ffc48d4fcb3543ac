//! The registrar's request handling: a REGISTER read from any bytes, applied to the bindings
//! that earlier inputs left (so refreshes, removals and flows meet each other), stored and read
//! back, answered; plus the other texts it reads (Authorization, pjsip.conf, stored HA1s).
#![no_main]

use libfuzzer_sys::fuzz_target;
use registrar::binding::{self, Policy, Update};
use std::sync::Mutex;

const POLICY: Policy = Policy {
    min_expires_s: 60,
    max_expires_s: 3600,
    default_expires_s: 600,
    max_contacts: 4,
};

static BINDINGS: Mutex<Vec<registrar::Binding>> = Mutex::new(Vec::new());

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 4 {
        0 | 1 => register(rest),
        2 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                if let Some(c) = registrar::digest::parse_authorization(text) {
                    let _ = registrar::digest::response_matches(
                        registrar::Algorithm::Sha256,
                        "00",
                        &c,
                        "REGISTER",
                    );
                }
                let _ = registrar::users::Ha1s::decode(text).encode();
                let key = registrar::digest::NonceKey::new([1; 32]);
                let _ = key.issued_s("tandem", text);
            }
        }
        _ => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let _ = registrar::users::parse_pjsip(text);
                let (list, _) = binding::decode(text);
                let again = binding::decode(&binding::encode(&list)).0;
                assert_eq!(list, again, "stored bindings read back as written");
            }
        }
    }
});

fn register(bytes: &[u8]) {
    let Ok(msg) = sip::Message::parse(bytes) else {
        return;
    };
    let source = "192.0.2.1:5060".parse().unwrap();
    let _ = registrar::guard::transaction_key(&msg, "REGISTER");
    let req = match registrar::request::register(&msg) {
        Ok(r) => r,
        Err(refusal) => {
            assert!((400..=599).contains(&refusal.status));
            let _ = registrar::response::build(&msg, refusal.status, &refusal.reason, "", source);
            return;
        }
    };
    let now_ms = 1_790_000_000_000;
    let mut current = BINDINGS.lock().unwrap();
    match binding::apply(&current, &req, "udp:192.0.2.1:5060", now_ms, &POLICY) {
        Ok(Update::Changed(next)) => {
            assert!(next.len() <= POLICY.max_contacts);
            for b in &next {
                let s = b.remaining_s(now_ms);
                assert!((POLICY.min_expires_s as u64..=POLICY.max_expires_s as u64).contains(&s));
            }
            assert!(next.windows(2).all(|w| w[0].q_milli.unwrap_or(1000) >= w[1].q_milli.unwrap_or(1000)));
            let (back, bad) = binding::decode(&binding::encode(&next));
            assert_eq!((back.as_slice(), bad), (next.as_slice(), 0));
            *current = next;
        }
        Ok(Update::Unchanged) => {}
        Err(refusal) => assert!((400..=599).contains(&refusal.status)),
    }
    let _ = registrar::response::build(&msg, 200, "OK", "", source);
}
