//! Linking legs into calls through the monitor: two-leg calls through a B2BUA, linked by its
//! pattern, by a header and by a HEP correlation id, alike with one worker and with several.

use std::collections::HashMap;

use monitor::synth::b2bua::{B2buaConfig, LegPair, b2bua_calls};
use monitor::synth::packet::ethernet_udp;
use monitor::{Analysis, Monitor, MonitorConfig};

const LINKTYPE_ETHERNET: u32 = 1;

fn run(cfg: &B2buaConfig, legs: legs::LegsConfig, workers: usize, hep: bool) -> Analysis {
    let (packets, _) = b2bua_calls(cfg);
    let mc = MonitorConfig {
        legs,
        ..MonitorConfig::default()
    };
    let mut m = Monitor::new(mc, workers);
    let ids: Vec<String> = b2bua_calls(cfg)
        .1
        .into_iter()
        .map(|p| p.a_call_id)
        .collect();
    for p in &packets {
        let frame = ethernet_udp(p.src, p.dst, p.payload.as_bytes());
        // A HEP agent names the A leg in the B leg's INVITE, as Homer's do.
        let correlation = p.b_invite_of.filter(|_| hep).map(|i| ids[i].as_bytes());
        m.packet_correlated(p.ts_ns, LINKTYPE_ETHERNET, &frame, correlation);
    }
    m.finish()
}

/// Linking with the prefix rule that drops the phones' outside-line 9.
fn outside_line_nine() -> legs::LegsConfig {
    legs::LegsConfig {
        prefix_rules: vec![legs::PrefixRule {
            strip: "9".into(),
            add: String::new(),
        }],
        ..legs::LegsConfig::default()
    }
}

/// Call-ID to (group's Call-ID, group's start, rule, confidence) of every linked record, and
/// Call-ID to start of every record.
type Links = HashMap<String, (String, i64, String, f32)>;

fn links(a: &Analysis) -> (Links, HashMap<String, i64>) {
    let mut linked = HashMap::new();
    let mut starts = HashMap::new();
    for c in &a.calls {
        let d = &c.dialog;
        starts.insert(d.call_id.to_string(), d.invite_ns);
        if let Some(l) = &d.link {
            let v = (
                l.group.call_id.to_string(),
                l.group.start_ns,
                l.rule.to_string(),
                l.confidence,
            );
            linked.insert(d.call_id.to_string(), v);
        }
    }
    (linked, starts)
}

/// Every B leg linked to its A leg by `rule`, naming the A leg's own start; no A leg linked.
fn assert_pairs(a: &Analysis, pairs: &[LegPair], rule: &str, workers: usize) {
    let (linked, starts) = links(a);
    assert_eq!(
        starts.len(),
        2 * pairs.len(),
        "{workers} workers: every leg a record"
    );
    for p in pairs {
        let l = linked
            .get(&p.b_call_id)
            .unwrap_or_else(|| panic!("{workers} workers: {} not linked", p.b_call_id));
        assert_eq!(l.0, p.a_call_id, "{workers} workers");
        assert_eq!(
            l.1, starts[&p.a_call_id],
            "{workers} workers: the A leg's own start"
        );
        assert_eq!(l.1, p.a_start_ns);
        assert_eq!(l.2, rule);
        assert!(!linked.contains_key(&p.a_call_id), "{workers} workers");
    }
}

#[test]
fn b2bua_pairs_link_alike_with_one_two_and_three_workers() {
    // Overlapping calls, every seventh to the number of the call before (told apart by the
    // caller), through a PBX that is learned, with an outside-line 9.
    let cfg = B2buaConfig {
        calls: 60,
        spacing_ms: 40,
        leg_delay_ms: 120,
        same_number_every: 7,
        ..B2buaConfig::default()
    };
    let legs = outside_line_nine();
    let (_, pairs) = b2bua_calls(&cfg);
    let mut seen = Vec::new();
    for workers in 1..=3 {
        let a = run(&cfg, legs.clone(), workers, false);
        assert_pairs(&a, &pairs, "b2bua", workers);
        let mut l: Vec<_> = links(&a).0.into_iter().collect();
        l.sort_by(|x, y| x.0.cmp(&y.0));
        seen.push(l);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0], seen[2]);
    // Without the prefix rule and with a trunk's own caller number nothing matches.
    let plain = B2buaConfig {
        trunk_caller: Some("+4930555000".into()),
        ..cfg
    };
    let a = run(&plain, legs::LegsConfig::default(), 2, false);
    assert!(links(&a).0.is_empty());
}

#[test]
fn two_calls_to_one_number_at_once_are_never_linked_wrong() {
    // Pairs of calls to one number whose B legs both come after both A legs, from the trunk's
    // one caller number: nothing tells them apart.
    let cfg = B2buaConfig {
        calls: 20,
        spacing_ms: 10,
        leg_delay_ms: 50,
        same_number_every: 2,
        trunk_caller: Some("+4930555000".into()),
        dial_prefix: String::new(),
        ..B2buaConfig::default()
    };
    let (_, pairs) = b2bua_calls(&cfg);
    for workers in [1, 3] {
        let a = run(&cfg, legs::LegsConfig::default(), workers, false);
        let (linked, _) = links(&a);
        for p in &pairs {
            if let Some(l) = linked.get(&p.b_call_id) {
                assert_eq!(l.0, p.a_call_id, "{workers} workers: a wrong link");
            }
        }
        // Calls 1 and 2 share a number and both wait when B1 and B2 come: ties. Call 0 has
        // its number alone.
        assert!(!linked.contains_key("b1-pbx") && !linked.contains_key("b2-pbx"));
        assert!(linked.contains_key("b0-pbx"));
    }
}

#[test]
fn a_header_naming_the_a_leg_links_by_the_header() {
    let cfg = B2buaConfig {
        calls: 12,
        header: Some("X-CID".into()),
        trunk_caller: Some("+4930555000".into()),
        ..B2buaConfig::default()
    };
    let legs = legs::LegsConfig {
        learn_pbx: false,
        ..legs::LegsConfig::default()
    };
    let (_, pairs) = b2bua_calls(&cfg);
    for workers in [1, 2, 3] {
        let a = run(&cfg, legs.clone(), workers, false);
        assert_pairs(&a, &pairs, "header:X-CID", workers);
        assert!(links(&a).0.values().all(|l| l.3 == 1.0));
    }
}

#[test]
fn a_hep_correlation_id_naming_the_a_leg_links() {
    let cfg = B2buaConfig {
        calls: 12,
        trunk_caller: Some("+4930555000".into()),
        ..B2buaConfig::default()
    };
    let legs = legs::LegsConfig {
        learn_pbx: false,
        ..legs::LegsConfig::default()
    };
    let (_, pairs) = b2bua_calls(&cfg);
    for workers in [1, 3] {
        let a = run(&cfg, legs.clone(), workers, true);
        assert_pairs(&a, &pairs, "hep-correlation", workers);
    }
    // Linking off: nothing linked, whatever the packets say.
    let off = legs::LegsConfig {
        enabled: false,
        ..legs::LegsConfig::default()
    };
    assert!(links(&run(&cfg, off, 2, true)).0.is_empty());
}

/// (linked right, linked wrong, missed) over `pairs`, and A legs linked at all.
fn tally(a: &Analysis, pairs: &[LegPair]) -> (usize, usize, usize, usize) {
    let (linked, _) = links(a);
    let (mut right, mut wrong, mut missed) = (0, 0, 0);
    for p in pairs {
        match linked.get(&p.b_call_id) {
            Some(l) if l.0 == p.a_call_id => right += 1,
            Some(_) => wrong += 1,
            None => missed += 1,
        }
    }
    let a_linked = pairs
        .iter()
        .filter(|p| linked.contains_key(&p.a_call_id))
        .count();
    (right, wrong, missed, a_linked)
}

#[test]
fn a_thousand_concurrent_calls_through_one_pbx_link_every_pair_right() {
    // 200 calls a second, each up about 5.6 s: a thousand at once at the peak.
    let busy = B2buaConfig {
        calls: 1_000,
        spacing_ms: 5,
        leg_delay_ms: 80,
        talk_ms: 5_000,
        same_number_every: 50,
        ..B2buaConfig::default()
    };
    let (_, pairs) = b2bua_calls(&busy);
    let legs = outside_line_nine();
    let a = run(&busy, legs.clone(), 2, false);
    assert_eq!(
        tally(&a, &pairs),
        (1_000, 0, 0, 0),
        "learned PBX, caller and number"
    );
    // The trunk's one caller number: calls to the number of the call before are ties while
    // both wait, and are left unlinked, never linked wrong.
    let cli = B2buaConfig {
        trunk_caller: Some("+4930555000".into()),
        ..busy
    };
    let a = run(&cli, legs, 2, false);
    let (right, wrong, missed, a_linked) = tally(&a, &pairs);
    eprintln!("trunk caller number: {right} right, {wrong} wrong, {missed} missed");
    assert_eq!((wrong, a_linked), (0, 0));
    assert_eq!(right + missed, 1_000);
    assert!(right >= 960, "{right}");
}
