use super::*;

const S: i64 = 1_000_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const PHONE: &str = "10.0.0.21:5060";
const PBX: &str = "10.0.0.2:5060";
const TRUNK: &str = "203.0.113.5:5060";

/// An INVITE starting a dialog, without headers.
fn inv<'a>(
    ts_ns: i64,
    src: &str,
    dst: &str,
    call_id: &'a str,
    caller: &'a str,
    called: &'a str,
) -> Invite<'a> {
    Invite {
        ts_ns,
        src: addr(src),
        dst: addr(dst),
        call_id,
        caller,
        ruri_user: called,
        to_user: called,
        initial: true,
        headers: &[],
        correlation: None,
    }
}

fn linker(f: impl FnOnce(&mut LegsConfig)) -> Linker {
    let mut cfg = LegsConfig::default();
    f(&mut cfg);
    Linker::new(cfg).unwrap()
}

fn group(l: &Option<Link>) -> Option<(&str, i64)> {
    l.as_ref().map(|l| (&*l.group.call_id, l.group.start_ns))
}

#[test]
fn header_naming_the_a_legs_call_id_links_with_full_confidence() {
    let mut k = linker(|_| {});
    assert_eq!(k.invite(&inv(S, PHONE, PBX, "a@x", "201", "0301")), None);
    let h = [("x-cid", "a@x")];
    let b = k.invite(&Invite {
        headers: &h,
        ..inv(S + 1, PBX, TRUNK, "b@y", "+4930", "+49301")
    });
    let b = b.unwrap();
    assert_eq!(b.rule.to_string(), "header:X-CID");
    assert_eq!(b.confidence, 1.0);
    assert_eq!((&*b.group.call_id, b.group.start_ns), ("a@x", S));
}

#[test]
fn header_token_shared_by_the_legs_links_them_to_the_first() {
    let mut k = linker(|c| c.headers = vec!["X-Asterisk-Linkedid".into()]);
    let h = [("X-Asterisk-Linkedid", "1700000000.12")];
    let a = k.invite(&Invite {
        headers: &h,
        ..inv(S, PHONE, PBX, "a", "201", "555")
    });
    assert_eq!(a, None);
    for (i, id) in ["b", "c"].into_iter().enumerate() {
        let l = k.invite(&Invite {
            headers: &h,
            ..inv(S * (10 + i as i64), "10.9.9.9:5060", TRUNK, id, "x", "y")
        });
        let l = l.unwrap();
        assert_eq!(l.rule, Rule::Header("X-Asterisk-Linkedid".into()));
        assert_eq!(l.confidence, 0.9);
        assert_eq!(&*l.group.call_id, "a");
    }
    // X-CID is not configured here: it links nothing.
    let other = [("X-CID", "a")];
    assert_eq!(
        k.invite(&Invite {
            headers: &other,
            ..inv(S * 20, "10.9.9.8:5060", TRUNK, "d", "x", "y")
        }),
        None
    );
}

#[test]
fn hep_correlation_naming_another_dialog_links() {
    let mut k = linker(|c| c.learn_pbx = false);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    let b = k.invite(&Invite {
        correlation: Some("a"),
        ..inv(S + 1, "10.1.1.1:5060", TRUNK, "b", "9", "9")
    });
    assert_eq!(b.as_ref().unwrap().rule.to_string(), "hep-correlation");
    assert_eq!(group(&b), Some(("a", S)));
    // Its own Call-ID, or one never seen, links nothing.
    let own = Invite {
        correlation: Some("c"),
        ..inv(S + 2, "10.1.1.1:5060", TRUNK, "c", "9", "9")
    };
    assert_eq!(k.invite(&own), None);
    let unknown = Invite {
        correlation: Some("zz"),
        ..inv(S + 3, "10.1.1.1:5060", TRUNK, "d", "9", "9")
    };
    assert_eq!(k.invite(&unknown), None);
}

#[test]
fn b2bua_links_by_called_number_after_the_prefix_rules() {
    let mut k = linker(|c| {
        c.pbx = vec!["10.0.0.2".into()];
        c.prefix_rules = vec![
            PrefixRule {
                strip: "9".into(),
                add: String::new(),
            },
            PrefixRule {
                strip: "0".into(),
                add: "+49".into(),
            },
        ];
    });
    k.invite(&inv(S, PHONE, PBX, "a", "201", "90301234567"));
    // From another port of the same IP: the PBX is configured by IP.
    let b = k.invite(&inv(
        S + S / 2,
        "10.0.0.2:5080",
        TRUNK,
        "b",
        "+4930555",
        "+49301234567",
    ));
    let b = b.unwrap();
    assert_eq!(b.rule, Rule::B2bua);
    assert_eq!(b.confidence, 0.85);
    assert_eq!(&*b.group.call_id, "a");
}

#[test]
fn b2bua_by_caller_alone_is_less_sure_and_both_is_surest() {
    let mut k = linker(|c| c.pbx = vec![PBX.into()]);
    k.invite(&inv(S, TRUNK, PBX, "in", "+4930999", "+4930100"));
    let ring = k.invite(&inv(S + 1, PBX, PHONE, "ring", "+4930999", "201"));
    assert_eq!(ring.as_ref().unwrap().confidence, 0.6);
    let mut k = linker(|c| c.pbx = vec![PBX.into()]);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "202"));
    let b = k.invite(&inv(S + 1, PBX, "10.0.0.22:5060", "b", "201", "202"));
    assert_eq!(b.as_ref().unwrap().confidence, 0.95);
}

#[test]
fn b2bua_window_is_kept() {
    let mut k = linker(|c| {
        c.pbx = vec![PBX.into()];
        c.window_ms = 2_000;
    });
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    assert_eq!(
        k.invite(&inv(3 * S + 1, PBX, TRUNK, "b", "201", "555")),
        None
    );
    k.invite(&inv(10 * S, PHONE, PBX, "c", "201", "556"));
    assert!(
        k.invite(&inv(12 * S, PBX, TRUNK, "d", "x", "556"))
            .is_some()
    );
}

#[test]
fn b2bua_needs_the_leg_to_leave_the_address_the_call_came_to() {
    let mut k = linker(|c| c.pbx = vec![PBX.into(), "10.0.0.3".into()]);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    // Another PBX sending the same number is not this call's leg.
    assert_eq!(
        k.invite(&inv(S + 1, "10.0.0.3:5060", TRUNK, "b", "7", "555")),
        None
    );
    // Nor is anything from an address that is no PBX.
    let mut k = linker(|c| c.learn_pbx = false);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    assert_eq!(k.invite(&inv(S + 1, PBX, TRUNK, "b", "201", "555")), None);
}

#[test]
fn a_pbx_is_learned_from_receiving_and_originating() {
    let mut k = linker(|_| {});
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    let b = k.invite(&inv(S + 1, PBX, TRUNK, "b", "x", "555")).unwrap();
    assert_eq!(b.rule, Rule::B2bua);
    assert!((b.confidence - 0.85 * 0.9).abs() < 1e-6, "{}", b.confidence);
}

#[test]
fn a_proxy_forwarding_the_same_call_id_is_not_learned() {
    let mut k = linker(|_| {});
    let proxy = "10.0.0.9:5060";
    k.invite(&inv(S, PHONE, proxy, "a", "201", "555"));
    // The proxy forwards "a" (the same dialog: known, no new decision) ...
    assert_eq!(k.invite(&inv(S + 1, proxy, PBX, "a", "201", "555")), None);
    // ... and a later dialog of another Call-ID from a different address is unrelated.
    assert_eq!(k.invite(&inv(S + 2, PHONE, TRUNK, "b", "201", "555")), None);
    assert_eq!(k.counters().dialogs, 2);
}

#[test]
fn a_tie_links_nothing_and_an_unclaimed_candidate_breaks_it() {
    let mut k = linker(|c| c.pbx = vec![PBX.into()]);
    k.invite(&inv(S, PHONE, PBX, "a1", "201", "555"));
    k.invite(&inv(S + 1, "10.0.0.22:5060", PBX, "a2", "202", "555"));
    // Called number alone matches both: a tie.
    assert_eq!(
        k.invite(&inv(S + 2, PBX, TRUNK, "b1", "+4930", "555")),
        None
    );
    assert_eq!(k.counters().ties, 1);
    // The caller tells them apart; the other candidate lowers the confidence.
    let b = k
        .invite(&inv(S + 3, PBX, TRUNK, "b2", "202", "555"))
        .unwrap();
    assert_eq!(&*b.group.call_id, "a2");
    assert!((b.confidence - 0.95 * 0.8).abs() < 1e-6, "{}", b.confidence);
    // Now a2 has a leg: of two equal candidates, the one without takes the next.
    let b = k
        .invite(&inv(S + 4, PBX, TRUNK, "b3", "+4930", "555"))
        .unwrap();
    assert_eq!(&*b.group.call_id, "a1");
    assert!(
        (b.confidence - 0.7 * 0.85 * 0.8).abs() < 1e-6,
        "{}",
        b.confidence
    );
}

#[test]
fn groups_are_transitive_and_a_call_id_seen_again_gets_the_same_answer() {
    let mut k = linker(|c| c.pbx = vec!["10.0.0.2".into(), "10.0.0.3".into()]);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    let b = k.invite(&inv(S + 1, PBX, "10.0.0.3:5060", "b", "201", "555"));
    let c = k.invite(&inv(S + 2, "10.0.0.3:5060", TRUNK, "c", "201", "555"));
    assert_eq!(group(&b), Some(("a", S)));
    assert_eq!(group(&c), Some(("a", S)));
    // A retransmission or a retry after 401 of b: the same link, no new dialog.
    assert_eq!(
        k.invite(&inv(S + 3, PBX, "10.0.0.3:5060", "b", "201", "555")),
        b
    );
    assert_eq!(k.counters().dialogs, 3);
}

#[test]
fn a_retry_after_a_challenge_keeps_the_inbound_call_waiting() {
    let mut k = linker(|c| {
        c.pbx = vec![PBX.into()];
        c.window_ms = 1_000;
    });
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    // The phone answers the 401 with credentials 0.8 s later; the PBX dials out 0.9 s after.
    k.invite(&inv(S + 800_000_000, PHONE, PBX, "a", "201", "555"));
    let b = k.invite(&inv(2 * S + 700_000_000, PBX, TRUNK, "b", "201", "555"));
    assert_eq!(group(&b), Some(("a", S)));
}

#[test]
fn re_invites_of_an_unknown_dialog_are_never_b2bua_legs() {
    let mut k = linker(|c| c.pbx = vec![PBX.into()]);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    let re = Invite {
        initial: false,
        ..inv(S + 1, PBX, TRUNK, "old", "201", "555")
    };
    assert_eq!(k.invite(&re), None);
}

#[test]
fn every_table_is_bounded() {
    let mut k = linker(|c| {
        c.pbx = vec![PBX.into()];
        c.max_dialogs = 10;
        c.max_tokens = 5;
        c.max_pending = 4;
        c.max_addresses = 8;
        c.headers = vec!["X-CID".into()];
    });
    for i in 0..100 {
        let id = format!("c{i}");
        let tok = format!("t{i}");
        let h = [("X-CID", tok.as_str())];
        let src = format!("10.1.0.{}:5060", i % 50);
        k.invite(&Invite {
            headers: &h,
            ..inv(S + i, &src, PBX, &id, "201", "555")
        });
        assert!(k.known.len() <= 10 && k.tokens.len() <= 5);
        assert!(k.pending.len() <= 4 && k.addresses.len() <= 8);
    }
    let c = k.counters();
    assert_eq!(c.dialogs_forgotten, 90);
    assert_eq!(c.tokens_forgotten, 95);
    assert_eq!(c.pending_dropped, 96);
    assert!(c.addresses_full > 0);
    // The oldest dialog is forgotten: a header naming it links nothing now.
    let h = [("X-CID", "c0")];
    assert_eq!(
        k.invite(&Invite {
            headers: &h,
            ..inv(2 * S, "10.2.0.1:5060", TRUNK, "z", "1", "2")
        }),
        None
    );
    // Long values are ignored.
    let long = "x".repeat(config::MAX_VALUE_BYTES + 1);
    let h = [("X-CID", long.as_str())];
    k.invite(&Invite {
        headers: &h,
        ..inv(2 * S + 1, "10.2.0.1:5060", TRUNK, "y", "1", "2")
    });
    assert_eq!(k.counters().values_too_long, 1);
}

#[test]
fn dialogs_and_tokens_are_forgotten_after_their_memory() {
    let mut k = linker(|c| c.memory_ms = 60_000);
    k.invite(&inv(S, PHONE, PBX, "a", "201", "555"));
    let h = [("X-CID", "a")];
    let late = Invite {
        headers: &h,
        ..inv(62 * S, "10.3.0.1:5060", TRUNK, "b", "1", "2")
    };
    assert_eq!(k.invite(&late), None);
}

#[test]
fn bad_settings_are_refused_naming_the_key() {
    let bad = |f: fn(&mut LegsConfig)| {
        let mut c = LegsConfig::default();
        f(&mut c);
        Linker::new(c).err().unwrap().to_string()
    };
    assert!(bad(|c| c.pbx = vec!["pbx.example".into()]).contains("[legs] pbx"));
    assert!(bad(|c| c.headers = vec!["X CID".into()]).contains("[legs] headers"));
    assert!(
        bad(|c| c.prefix_rules = vec![PrefixRule {
            strip: "a".into(),
            add: String::new()
        }])
        .contains("prefix_rules: rule 1")
    );
    assert!(bad(|c| c.window_ms = 0).contains("window_ms"));
}
