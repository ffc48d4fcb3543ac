//! The engine on hand-made events: each kind fires on its incidents and resolves a window
//! after the last, keys stay bounded, and a call reported twice counts once.

use std::sync::Arc;

use alerts::{
    Alert, AlertState, AlertsConfig, CallStart, Engine, Event, RuleSet, RulesFile, Sample,
};
use cdr::{CdrCall, CdrRecord, CdrRegistration, CdrStream};

const S: i64 = 1_000_000;
/// 2026-11-23 00:00 UTC, a Monday.
const T0: i64 = 1_795_392_000 * S;

fn engine(rules: &str) -> Engine {
    let cfg: AlertsConfig = RulesFile::parse("test.toml".as_ref(), rules).unwrap();
    let set = RuleSet::new(&cfg).unwrap_or_else(|e| panic!("{e:?}"));
    Engine::new(set, Arc::new(alerts::lookup::Basic))
}

fn start(id: &str, caller: &str, called: &str, from: &str, at: i64) -> CallStart {
    CallStart {
        uid: format!("s|{id}|{at}"),
        call: CdrCall {
            call_id: id.into(),
            caller: caller.into(),
            called: called.into(),
            caller_addr: format!("{from}:5060"),
            callee_addr: "10.0.0.2:5060".into(),
            start_us: at,
            sensor: "s".into(),
            ..CdrCall::default()
        },
        user_agent: None,
    }
}

fn call(id: &str, to: &str, at: i64, code: u16, streams: Vec<CdrStream>) -> CdrRecord {
    let answered = code == 200;
    CdrRecord {
        uid: format!("s|{id}|{at}"),
        call: Some(CdrCall {
            call_id: id.into(),
            caller: "2001".into(),
            called: "5551234".into(),
            caller_addr: "10.0.0.2:5060".into(),
            callee_addr: format!("{to}:5060"),
            start_us: at,
            ringing_us: Some(at + S),
            answer_us: answered.then_some(at + 2 * S),
            end_us: Some(at + 30 * S),
            state: if answered { "ended" } else { "failed" }.into(),
            last_response: Some(code),
            sensor: "s".into(),
            ..CdrCall::default()
        }),
        streams,
        ..CdrRecord::default()
    }
}

fn stream(src: &str, dst: &str, at: i64, end: i64) -> CdrStream {
    CdrStream {
        src: src.into(),
        dst: dst.into(),
        start_us: at,
        end_us: end,
        packets: 1000,
        payload: "PCMA".into(),
        ..CdrStream::default()
    }
}

fn registration(id: &str, user: &str, from: &str, result: &str, at: i64) -> CdrRecord {
    CdrRecord {
        uid: format!("s|reg|{id}|{at}"),
        registration: Some(CdrRegistration {
            call_id: id.into(),
            user: user.into(),
            src: format!("{from}:5060"),
            dst: "10.0.0.2:5060".into(),
            first_us: at,
            last_us: at + S / 10,
            result: result.into(),
            user_agent: "friendly-scanner".into(),
            sensor: "s".into(),
            ..CdrRegistration::default()
        }),
        ..CdrRecord::default()
    }
}

fn states(out: &[Alert]) -> Vec<(String, String, AlertState)> {
    out.iter()
        .map(|a| (a.rule.clone(), a.key.clone(), a.state))
        .collect()
}

#[test]
fn premium_calls_fire_at_the_invite_in_every_dialled_form_and_resolve_a_window_later() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "premium"
        kind = "fraud.destination"
        premium = true
        group_by = "caller"
        window_s = 600
        "#,
    );
    let mut out = Vec::new();
    for (i, n) in [
        "+88213000001",
        "0088213000002",
        "01188213000003",
        "tel:+870-77-123456",
    ]
    .iter()
    .enumerate()
    {
        let caller = format!("20{i:02}");
        e.observe(
            Event::CallStart(&start(
                &format!("c{i}"),
                &caller,
                n,
                "192.168.1.5",
                T0 + i as i64 * S,
            )),
            &mut out,
        );
    }
    e.observe(
        Event::CallStart(&start(
            "ok",
            "2009",
            "0049301234567",
            "192.168.1.5",
            T0 + 5 * S,
        )),
        &mut out,
    );
    assert_eq!(out.len(), 4, "{:#?}", states(&out));
    assert!(
        out.iter()
            .all(|a| a.state == AlertState::Firing && a.rule_kind == "fraud.destination")
    );
    assert_eq!(out[0].calls, ["s|c0|1795392000000000"]);
    assert_eq!(out[2].key, "2002");
    let line: serde_json::Value = serde_json::from_str(&out[0].json_line()).unwrap();
    assert_eq!(line["kind"], "alert");
    out.clear();
    // Still within two windows of the last call: nothing resolves yet.
    e.advance(T0 + 900 * S, &mut out);
    assert!(out.is_empty(), "{:#?}", states(&out));
    // The count left the window at ~600 s, and stayed false for a window more.
    e.advance(T0 + 1300 * S, &mut out);
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|a| a.state == AlertState::Resolved));
}

#[test]
fn a_scanner_fires_once_per_address_not_once_per_registration() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "guessing"
        kind = "register.failed"
        group_by = "source_ip"
        window_s = 60
        threshold = 10
        "#,
    );
    let mut out = Vec::new();
    for i in 0..200 {
        let r = registration(
            &format!("r{i}"),
            &format!("{}", 100 + i % 60),
            "203.0.113.66",
            "challenged",
            T0 + i * S / 10,
        );
        e.observe(Event::Registration(&r), &mut out);
    }
    // A phone that registers after its challenge is no failure.
    e.observe(
        Event::Registration(&registration(
            "ok",
            "2001",
            "192.168.1.5",
            "registered",
            T0 + 30 * S,
        )),
        &mut out,
    );
    assert_eq!(
        states(&out),
        [("guessing".into(), "203.0.113.66".into(), AlertState::Firing)]
    );
    assert_eq!(out[0].figures.matched, 10);
    assert_eq!(out[0].calls.len(), 10);
}

#[test]
fn a_trunk_answering_503_to_a_third_of_calls_fires_on_its_share() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "trunk-5xx"
        kind = "sip.response"
        classes = ["5xx"]
        group_by = "destination_ip"
        window_s = 300
        threshold_pct = 20
        min_calls = 10
        "#,
    );
    let mut out = Vec::new();
    for i in 0..30 {
        let code = if i % 3 == 0 { 503 } else { 200 };
        e.observe(
            Event::CallEnd(&call(
                &format!("t{i}"),
                "198.51.100.20",
                T0 + i * 5 * S,
                code,
                vec![],
            )),
            &mut out,
        );
        // A healthy trunk beside it.
        e.observe(
            Event::CallEnd(&call(
                &format!("h{i}"),
                "198.51.100.30",
                T0 + i * 5 * S,
                200,
                vec![],
            )),
            &mut out,
        );
    }
    assert_eq!(
        states(&out),
        [(
            "trunk-5xx".into(),
            "198.51.100.20".into(),
            AlertState::Firing
        )]
    );
    assert!(
        out[0].figures.value >= 20.0 && out[0].figures.total >= 10,
        "{:?}",
        out[0].figures
    );
}

#[test]
fn one_way_audio_and_calls_without_rtp() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "one-way"
        kind = "quality.one_way"
        gap_s = 4

        [[alerts.rule]]
        name = "no-rtp"
        kind = "quality.no_rtp"
        "#,
    );
    let mut out = Vec::new();
    let both = vec![
        stream("10.0.0.2:10000", "192.0.2.7:20000", T0, T0 + 30 * S),
        stream("192.0.2.7:20000", "10.0.0.2:10000", T0, T0 + 30 * S),
    ];
    e.observe(
        Event::CallEnd(&call("fine", "192.0.2.7", T0, 200, both)),
        &mut out,
    );
    assert!(out.is_empty());
    let one = vec![stream("10.0.0.2:10000", "192.0.2.7:20000", T0, T0 + 30 * S)];
    e.observe(
        Event::CallEnd(&call("one", "192.0.2.7", T0 + S, 200, one)),
        &mut out,
    );
    assert_eq!(
        states(&out),
        [("one-way".into(), String::new(), AlertState::Firing)]
    );
    assert_eq!(out[0].calls, [format!("s|one|{}", T0 + S)]);
    out.clear();
    let mut e =
        engine("[[alerts.rule]]\nname = \"one-way\"\nkind = \"quality.one_way\"\ngap_s = 4\n");
    let stops = vec![
        stream("10.0.0.2:10000", "192.0.2.7:20000", T0, T0 + 30 * S),
        stream("192.0.2.7:20000", "10.0.0.2:10000", T0, T0 + 24 * S),
    ];
    e.observe(
        Event::CallEnd(&call("stops", "192.0.2.7", T0, 200, stops)),
        &mut out,
    );
    assert_eq!(out.len(), 1, "a direction that stopped 6 s before the end");
    let mut e = engine("[[alerts.rule]]\nname = \"no-rtp\"\nkind = \"quality.no_rtp\"\n");
    out.clear();
    e.observe(
        Event::CallEnd(&call("silent", "192.0.2.7", T0, 200, vec![])),
        &mut out,
    );
    e.observe(
        Event::CallEnd(&call("busy", "192.0.2.7", T0, 486, vec![])),
        &mut out,
    );
    assert_eq!(out.len(), 1);
}

#[test]
fn concurrent_calls_per_caller_fire_while_they_are_up() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "concurrent"
        kind = "fraud.concurrent"
        group_by = "caller"
        max = 3
        window_s = 60
        "#,
    );
    let mut out = Vec::new();
    for i in 0..3 {
        e.observe(
            Event::CallStart(&start(
                &format!("c{i}"),
                "2001",
                "0088213",
                "192.168.1.5",
                T0 + i * S,
            )),
            &mut out,
        );
    }
    assert!(out.is_empty(), "three calls up is allowed");
    e.observe(
        Event::CallStart(&start("c3", "2001", "0088213", "192.168.1.5", T0 + 3 * S)),
        &mut out,
    );
    assert_eq!(
        states(&out),
        [("concurrent".into(), "2001".into(), AlertState::Firing)]
    );
    assert_eq!(out[0].figures.value, 4.0);
}

#[test]
fn the_same_call_from_two_sensors_counts_once_and_an_end_without_a_start_is_started() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "calls"
        kind = "fraud.calls"
        threshold = 3
        "#,
    );
    let mut out = Vec::new();
    for i in 0..2 {
        let r = call(&format!("c{i}"), "192.0.2.7", T0 + i * S, 200, vec![]);
        let mut copy = r.clone();
        copy.uid = format!("other|c{i}");
        copy.call.as_mut().unwrap().sensor = "other".into();
        e.observe(Event::CallEnd(&r), &mut out);
        e.observe(Event::CallEnd(&copy), &mut out);
    }
    assert!(
        out.is_empty(),
        "two calls, each seen twice: {:#?}",
        states(&out)
    );
    assert_eq!(e.stats().duplicates, 2);
    e.observe(
        Event::CallEnd(&call("c2", "192.0.2.7", T0 + 2 * S, 200, vec![])),
        &mut out,
    );
    assert_eq!(out.len(), 1);
}

#[test]
fn keys_are_bounded_and_evictions_counted() {
    let mut e = engine(
        r#"
        [alerts]
        keys_per_rule_max = 1000

        [[alerts.rule]]
        name = "per-caller"
        kind = "fraud.calls"
        group_by = "caller"
        threshold = 5
        window_s = 3600
        "#,
    );
    let mut out = Vec::new();
    for i in 0..5000 {
        e.observe(
            Event::CallStart(&start(
                &format!("c{i}"),
                &format!("{i}"),
                "100",
                "192.168.1.5",
                T0 + i * 1000,
            )),
            &mut out,
        );
    }
    let st = e.stats();
    assert_eq!(st.keys, 1000);
    assert_eq!(st.keys_evicted, 4000);
    assert!(out.is_empty());
}

#[test]
fn outside_hours_and_metric_rules() {
    let mut e = engine(
        r#"
        [[alerts.rule]]
        name = "night"
        kind = "fraud.hours"
        hours = "07:00-20:00"
        group_by = "caller"

        [[alerts.rule]]
        name = "drops"
        kind = "health.capture_drops"
        window_s = 60

        [[alerts.rule]]
        name = "journal"
        kind = "health.metric"
        metric = "tandem_capture_cdr_journal_records"
        above = 100
        window_s = 60
        "#,
    );
    let mut out = Vec::new();
    e.observe(
        Event::CallStart(&start(
            "day",
            "2001",
            "100",
            "192.168.1.5",
            T0 + 10 * 3600 * S,
        )),
        &mut out,
    );
    assert!(out.is_empty());
    e.observe(
        Event::CallStart(&start(
            "night",
            "2002",
            "100",
            "192.168.1.5",
            T0 + 27 * 3600 * S,
        )),
        &mut out,
    );
    assert_eq!(
        states(&out),
        [("night".into(), "2002".into(), AlertState::Firing)]
    );
    out.clear();
    let at = T0 + 28 * 3600 * S;
    let sample = |metric: &str, v: f64, t: i64| Sample {
        at_us: t,
        metric: metric.into(),
        labels: vec![],
        value: v,
    };
    for (i, v) in [0.0, 0.0, 5.0].iter().enumerate() {
        e.observe(
            Event::Sample(&sample(
                "tandem_capture_kernel_drops_total",
                *v,
                at + i as i64 * 10 * S,
            )),
            &mut out,
        );
    }
    e.observe(
        Event::Sample(&sample(
            "tandem_capture_cdr_journal_records",
            50.0,
            at + 30 * S,
        )),
        &mut out,
    );
    e.observe(
        Event::Sample(&sample(
            "tandem_capture_cdr_journal_records",
            500.0,
            at + 40 * S,
        )),
        &mut out,
    );
    assert_eq!(
        states(&out)
            .into_iter()
            .filter(|s| s.2 == AlertState::Firing)
            .map(|s| s.0)
            .collect::<Vec<_>>(),
        ["drops", "journal"],
        "{out:#?}"
    );
    let drops = out.iter().find(|a| a.rule == "drops").unwrap();
    assert_eq!(drops.figures.value, 5.0);
}

#[test]
fn changed_rules_resolve_what_they_had_firing_and_unchanged_ones_keep_it() {
    let text = |n: u64| {
        format!(
            "[[alerts.rule]]\nname = \"a\"\nkind = \"fraud.calls\"\nthreshold = 1\n\n[[alerts.rule]]\nname = \"b\"\nkind = \"fraud.calls\"\nthreshold = {n}\n"
        )
    };
    let mut e = engine(&text(1));
    let mut out = Vec::new();
    e.observe(
        Event::CallStart(&start("c", "2001", "100", "192.168.1.5", T0)),
        &mut out,
    );
    assert_eq!(out.len(), 2);
    out.clear();
    let cfg = RulesFile::parse("t".as_ref(), &text(2)).unwrap();
    e.replace_rules(RuleSet::new(&cfg).unwrap(), &mut out);
    assert_eq!(
        states(&out),
        [("b".into(), String::new(), AlertState::Resolved)]
    );
}

#[test]
fn validation_names_the_rule_and_the_key() {
    let bad = r#"
        [[alerts.rule]]
        name = "x"
        kind = "quality.mos"
        mos = 9
        loss_pct = 3

        [[alerts.rule]]
        name = "y"
        kind = "fraud.destination"
        scope = "response=5xx"
        prefixes = ["+882"]
        actions = ["nowhere"]

        [[alerts.rule]]
        name = "z"
        kind = "no.such"
        "#;
    let cfg = RulesFile::parse("t".as_ref(), bad).unwrap();
    let errors: Vec<String> = RuleSet::new(&cfg)
        .unwrap_err()
        .iter()
        .map(|e| e.to_string())
        .collect();
    let joined = errors.join("\n");
    for want in [
        "x: mos: 9",
        "x: loss_pct: quality.mos does not read",
        "y: scope:",
        "y: actions: no [alerts.action.nowhere]",
        "z: kind:",
    ] {
        assert!(joined.contains(want), "{want:?} missing from:\n{joined}");
    }
    let unknown = RulesFile::parse(
        "rules.toml".as_ref(),
        "[[alerts.rule]]\nname = \"a\"\nkind = \"fraud.calls\"\ntreshold = 3\n",
    );
    let msg = unknown.unwrap_err().to_string();
    assert!(
        msg.contains("rules.toml") && msg.contains("treshold"),
        "{msg}"
    );
}

#[test]
fn the_example_rule_set_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../alerts.example.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let cfg = RulesFile::parse(path.as_ref(), &text).unwrap();
    let set = RuleSet::new(&cfg).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(set.rules.len(), 20);
}

/// A rule's scope `group=NAME` (tandem.toml's `[[groups]]`) decides on that group's calls
/// only: the failing trunk's group fires, the healthy one's stays quiet.
#[test]
fn a_scope_by_group_counts_only_the_groups_calls() {
    let group = |name: &str, address: &str| groups::GroupConfig {
        name: name.into(),
        addresses: vec![address.into()],
        numbers: vec![],
    };
    cdr::search::set_search_groups(Arc::new(
        groups::Groups::new(&[
            group("trunk-a", "198.51.100.20"),
            group("trunk-b", "198.51.100.30/32"),
        ])
        .unwrap(),
    ));
    let rule = |name: &str, g: &str| {
        format!(
            "[[alerts.rule]]\nname = \"{name}\"\nkind = \"sip.response\"\nclasses = [\"5xx\"]\n\
             group_by = \"none\"\nwindow_s = 300\nthreshold_pct = 20\nmin_calls = 10\n\
             scope = \"group={g}\"\n"
        )
    };
    let mut e = engine(&(rule("a", "trunk-a") + &rule("b", "trunk-b")));
    let mut out = Vec::new();
    for i in 0..30 {
        let code = if i % 3 == 0 { 503 } else { 200 };
        let failing = call(
            &format!("t{i}"),
            "198.51.100.20",
            T0 + i * 5 * S,
            code,
            vec![],
        );
        e.observe(Event::CallEnd(&failing), &mut out);
        let healthy = call(
            &format!("h{i}"),
            "198.51.100.30",
            T0 + i * 5 * S,
            200,
            vec![],
        );
        e.observe(Event::CallEnd(&healthy), &mut out);
    }
    let fired: Vec<&str> = out.iter().map(|a| a.rule.as_str()).collect();
    assert_eq!(fired, ["a"]);
}
