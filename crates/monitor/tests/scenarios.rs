//! The alert scenarios read back by the monitor: every call, response, REGISTER chain and
//! stream of each scenario's ground truth is what the monitor sees, and nothing more; tshark
//! counts the same SIP messages and RTP packets.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use monitor::dialog::CallState;
use monitor::synth::scenario::{
    Direction, Scenario, ScenarioOptions, ScenarioTruth, TruthCall, write,
};
use monitor::{Analysis, CallRecord, Monitor, MonitorConfig};

const SECOND: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SECOND;

fn scenario(
    s: Scenario,
    opts: &ScenarioOptions,
) -> (tempfile::TempDir, PathBuf, ScenarioTruth, Analysis) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{}.pcap", s.as_str()));
    let truth = write(s, &path, opts).unwrap();
    let a = analyse(&path);
    assert_matches_truth(&truth, &a);
    (dir, path, truth, a)
}

fn analyse(path: &Path) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    m.read_file(path, |_| {}).unwrap();
    m.finish()
}

fn hour_of(ns: i64) -> i64 {
    ns.rem_euclid(24 * HOUR) / HOUR
}

/// The monitor's record of each call in the truth, by Call-ID.
fn records<'a>(truth: &ScenarioTruth, a: &'a Analysis) -> HashMap<String, &'a CallRecord> {
    let by_id: HashMap<String, &CallRecord> = a
        .calls
        .iter()
        .map(|c| (c.dialog.call_id.to_string(), c))
        .collect();
    for t in &truth.calls {
        assert!(by_id.contains_key(&t.call_id), "call {} missing", t.call_id);
    }
    by_id
}

/// Everything the truth says the monitor sees, and nothing else.
fn assert_matches_truth(truth: &ScenarioTruth, a: &Analysis) {
    let name = truth.scenario.as_str();
    assert_eq!(a.calls.len(), truth.calls.len(), "{name}: calls");
    assert_eq!(a.sip.messages, truth.counts.sip_messages, "{name}: SIP");
    assert_eq!(a.counters.rtp_packets, truth.counts.rtp_packets, "{name}");
    assert_eq!(a.counters.packets, truth.counts.packets, "{name}");
    assert_eq!(a.counters.sip_parse_errors, 0, "{name}");
    assert!(
        a.streams.is_empty(),
        "{name}: every stream belongs to a call"
    );
    assert_eq!(
        a.sip.requests.get("OPTIONS").copied().unwrap_or(0),
        truth.options,
        "{name}: OPTIONS"
    );
    let by_id = records(truth, a);
    for t in &truth.calls {
        assert_call(t, by_id[&t.call_id]);
    }
    assert_eq!(a.registrations.len(), truth.registrations.len(), "{name}");
    let chains: HashMap<(&str, &str), _> = a
        .registrations
        .iter()
        .map(|r| ((&*r.call_id, &*r.user), r))
        .collect();
    for t in &truth.registrations {
        let r = chains
            .get(&(t.call_id.as_str(), t.user.as_str()))
            .unwrap_or_else(|| panic!("{name}: chain {} of {} missing", t.call_id, t.user));
        assert_eq!(r.last_code, t.final_code, "{name}: {}", t.call_id);
        assert_eq!(r.challenges, t.challenges, "{name}: {}", t.call_id);
        assert_eq!((r.src, &*r.user_agent), (t.src, t.user_agent.as_str()));
        assert_eq!(r.requests, 2);
        assert_eq!(r.outcome() == "registered", !t.failed());
    }
}

/// One call's signalling and streams against its truth.
fn assert_call(t: &TruthCall, c: &CallRecord) {
    let d = &c.dialog;
    let id = &t.call_id;
    assert_eq!((&*d.caller, &*d.called), (&*t.caller, &*t.called), "{id}");
    assert_eq!(
        (d.caller_addr, d.callee_addr),
        (t.caller_addr, t.callee_addr)
    );
    assert_eq!(
        (d.invite_ns, d.answer_ns),
        (t.invite_ns, t.answer_ns),
        "{id}"
    );
    assert_eq!(d.last_code, t.final_code, "{id}");
    let state = match t.final_code {
        200 => CallState::Ended,
        487 => CallState::Cancelled,
        _ => CallState::Failed,
    };
    assert_eq!(d.state, state, "{id}");
    assert_eq!(d.end_ns, Some(t.end_ns), "{id}");
    let directions = t.rtp_packets.iter().filter(|&&n| n > 0).count();
    assert_eq!(c.streams.len(), directions, "{id}: streams");
    for (dir, &sent) in t.rtp_packets.iter().enumerate() {
        let from_caller = dir == 0;
        let s = c
            .streams
            .iter()
            .find(|s| (s.stream.key.src.ip() == t.caller_addr.ip()) == from_caller);
        match s {
            None => assert_eq!(sent, 0, "{id}: direction {dir} missing"),
            Some(s) => {
                assert_eq!(s.stream.packets, sent, "{id}: direction {dir}");
                assert_eq!(Some(s.stream.last_ns), t.last_rtp_ns[dir], "{id}");
                assert_eq!(s.stream.sequence.lost(), 0, "{id}");
                assert!(s.stream.mos().unwrap() > 4.0, "{id}: clean audio");
            }
        }
    }
}

/// What every scenario's background is: daytime, ordinary numbers, answered or busy or
/// cancelled, both directions to the end, phones registered at the first try with credentials.
fn assert_clean_background(truth: &ScenarioTruth) {
    for c in truth.calls.iter().filter(|c| c.background) {
        assert!((9..17).contains(&hour_of(c.invite_ns)), "{}", c.call_id);
        assert!(
            !c.called.starts_with("00") && !c.called.starts_with('+'),
            "{}",
            c.call_id
        );
        assert!(matches!(c.final_code, 200 | 486 | 487), "{}", c.call_id);
        assert!(c.silent.is_none());
        if c.final_code == 200 {
            assert!(c.rtp_packets.iter().all(|&n| (50..=100).contains(&n)));
        }
    }
    let codes: BTreeSet<u16> = truth.calls.iter().map(|c| c.final_code).collect();
    assert!(codes.is_superset(&[200, 486, 487].into()), "{codes:?}");
}

/// Most calls up at once among `calls` in the monitor's view (INVITE to end).
fn peak_concurrent<'a>(calls: impl Iterator<Item = &'a CallRecord>) -> u32 {
    let mut edges: Vec<(i64, i32)> = calls
        .flat_map(|c| [(c.dialog.invite_ns, 1), (c.dialog.end_ns.unwrap(), -1)])
        .collect();
    edges.sort_unstable();
    let (mut open, mut most) = (0, 0);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    most as u32
}

#[test]
fn toll_fraud_is_extension_2001_dialling_premium_ranges_at_night() {
    let (_dir, _, truth, a) = scenario(Scenario::TollFraud, &ScenarioOptions::default());
    assert_clean_background(&truth);
    let f = truth.toll_fraud.as_ref().unwrap();
    assert_eq!(
        (f.extension.as_str(), f.phone.to_string()),
        ("2001", "192.168.10.21".into())
    );
    assert!(f.user_agent.starts_with("Yealink"));
    assert!(f.calls.len() >= 8);
    assert!(f.peak_concurrent >= 4, "{}", f.peak_concurrent);
    assert_eq!(f.hour_utc, 2);
    let mut forms = BTreeSet::new();
    let mut codes = BTreeSet::new();
    for fc in &f.calls {
        let (form, rest) = ["00", "011", "+"]
            .iter()
            .find_map(|p| fc.number.strip_prefix(p).map(|r| (*p, r)))
            .unwrap_or_else(|| panic!("{} has no international prefix", fc.number));
        forms.insert(form);
        codes.insert(&rest[..3]);
        assert_eq!(hour_of(fc.start_ns), 2, "{}", fc.number);
    }
    assert_eq!(forms.len(), 3, "00, 011 and + all dialled");
    assert_eq!(codes, ["870", "881", "882", "883"].into());
    // The monitor sees each fraud call from the extension's phone, answered with audio both
    // ways, as many up at once as the truth says; no other call goes to those ranges.
    let by_id = records(&truth, &a);
    let fraud: Vec<&CallRecord> = f.calls.iter().map(|fc| by_id[&fc.call_id]).collect();
    for (fc, c) in f.calls.iter().zip(&fraud) {
        assert_eq!(&*c.dialog.called, fc.number);
        assert_eq!(&*c.dialog.caller, "2001");
        assert_eq!(c.dialog.caller_addr.ip(), f.phone);
        assert_eq!(c.dialog.invite_ns, fc.start_ns);
        assert_eq!(c.streams.len(), 2);
    }
    assert_eq!(peak_concurrent(fraud.iter().copied()), f.peak_concurrent);
    let premium = a.calls.iter().filter(|c| {
        ["882", "883", "881", "870"].iter().any(|cc| {
            c.dialog
                .called
                .trim_start_matches(['0', '1', '+'])
                .starts_with(cc)
        })
    });
    assert_eq!(premium.count(), f.calls.len());
    let night = a
        .calls
        .iter()
        .filter(|c| !(9..17).contains(&hour_of(c.dialog.invite_ns)));
    assert_eq!(night.count(), f.calls.len());
    // It registered normally, with the same phone and User-Agent.
    let reg = a
        .registrations
        .iter()
        .find(|r| &*r.user == "2001")
        .expect("2001 registers");
    assert_eq!(
        (reg.src.ip(), &*reg.user_agent),
        (f.phone, f.user_agent.as_str())
    );
    assert_eq!((reg.outcome(), reg.challenges), ("registered", 1));
}

#[test]
fn scanner_guesses_passwords_from_one_address_and_never_registers() {
    let (_dir, _, truth, a) = scenario(Scenario::Scanner, &ScenarioOptions::default());
    assert_clean_background(&truth);
    let s = truth.scanner.as_ref().unwrap();
    assert_eq!(s.source.to_string(), "203.0.113.66");
    assert_eq!(s.user_agents, ["friendly-scanner", "sipvicious"]);
    let expected: Vec<String> = (100..=160).map(|u: u32| u.to_string()).collect();
    assert_eq!(s.users, expected);
    let from_scanner: Vec<_> = a
        .registrations
        .iter()
        .filter(|r| r.src.ip() == s.source)
        .collect();
    assert_eq!(from_scanner.len() as u32, s.failed_chains);
    assert_eq!(truth.failed_registrations().count() as u32, s.failed_chains);
    assert_eq!(truth.scenario_calls().count(), 0);
    assert!(s.failed_chains >= 3 * s.users.len() as u32);
    assert!(from_scanner.iter().all(|r| r.last_code != 200));
    let outcomes: BTreeSet<(&str, u16)> = from_scanner
        .iter()
        .map(|r| (r.outcome(), r.last_code))
        .collect();
    assert_eq!(outcomes, [("challenged", 401), ("failed", 403)].into());
    let users: BTreeSet<&str> = from_scanner.iter().map(|r| &*r.user).collect();
    assert_eq!(users.len(), s.users.len());
    let agents: BTreeSet<&str> = from_scanner.iter().map(|r| &*r.user_agent).collect();
    assert_eq!(agents, ["friendly-scanner", "sipvicious"].into());
    // Everyone else registers at the first try with credentials.
    for r in a.registrations.iter().filter(|r| r.src.ip() != s.source) {
        assert_eq!((r.outcome(), r.challenges), ("registered", 1), "{}", r.user);
    }
    assert_eq!(truth.options, u64::from(s.options_probes));
    assert!(s.options_probes > 0);
    assert!(
        a.calls
            .iter()
            .all(|c| c.dialog.caller_addr.ip() != s.source)
    );
}

#[test]
fn trunk_answers_a_third_of_its_calls_503() {
    let (_dir, _, truth, a) = scenario(Scenario::Trunk503, &ScenarioOptions::default());
    assert_clean_background(&truth);
    let t = truth.trunk.as_ref().unwrap();
    assert_eq!(t.trunk.to_string(), "198.51.100.20:5060");
    let to_trunk: Vec<&CallRecord> = a
        .calls
        .iter()
        .filter(|c| c.dialog.callee_addr == t.trunk)
        .collect();
    assert_eq!(to_trunk.len() as u32, t.calls);
    assert!(to_trunk.iter().all(|c| c.dialog.caller_addr == t.pbx));
    let refused: BTreeSet<&str> = a
        .calls
        .iter()
        .filter(|c| c.dialog.last_code == 503)
        .map(|c| &*c.dialog.call_id)
        .collect();
    let expected: BTreeSet<&str> = t.failed_call_ids.iter().map(|s| s.as_str()).collect();
    assert_eq!(refused, expected, "only the trunk's refusals are 503");
    assert!((t.share_pct - 100.0 / 3.0).abs() < 0.01);
    for c in to_trunk.iter().filter(|c| c.dialog.last_code != 503) {
        assert_eq!((c.dialog.state, c.streams.len()), (CallState::Ended, 2));
    }
    for c in to_trunk.iter().filter(|c| c.dialog.last_code == 503) {
        assert!(c.streams.is_empty());
        assert_eq!(&*c.dialog.last_reason, "Service Unavailable");
    }
}

#[test]
fn one_way_calls_lose_one_direction_and_tshark_counts_the_same() {
    let (_dir, path, truth, a) = scenario(Scenario::OneWayAudio, &ScenarioOptions::default());
    assert_clean_background(&truth);
    assert_eq!(truth.one_way.len(), 6);
    assert_eq!(truth.scenario_calls().count(), 6);
    let missing = truth
        .one_way
        .iter()
        .filter(|o| o.stopped_before_bye_ns.is_none());
    assert_eq!(missing.count(), 3);
    let by_id = records(&truth, &a);
    for o in &truth.one_way {
        let c = by_id[&o.call_id];
        let t = truth.call(&o.call_id).unwrap();
        assert_eq!(
            (c.dialog.state, t.silent),
            (CallState::Ended, Some(o.silent))
        );
        let caller_ip = c.dialog.caller_addr.ip();
        let silent_from_caller = o.silent == Direction::CallerToCallee;
        let silent = c
            .streams
            .iter()
            .find(|s| (s.stream.key.src.ip() == caller_ip) == silent_from_caller);
        let bye = c.dialog.end_ns.unwrap();
        match o.stopped_before_bye_ns {
            None => assert!(silent.is_none() && c.streams.len() == 1, "{}", o.call_id),
            Some(gap) => {
                let s = silent.expect("the stream that stops");
                assert_eq!(bye - s.stream.last_ns, gap);
                assert!(gap >= 5 * SECOND);
            }
        }
    }
    // Every other answered call has audio both ways to within 50 ms of its end.
    let one_way: BTreeSet<&str> = truth.one_way.iter().map(|o| o.call_id.as_str()).collect();
    for c in a.calls.iter().filter(|c| c.dialog.answer_ns.is_some()) {
        if one_way.contains(&*c.dialog.call_id) {
            continue;
        }
        assert_eq!(c.streams.len(), 2);
        for s in &c.streams {
            assert!(c.dialog.end_ns.unwrap() - s.stream.last_ns <= 50_000_000);
        }
    }
    if !common::have_tshark() {
        return;
    }
    let (messages, requests, responses, resent) = common::tshark_sip_stat(&path, &[]);
    assert_eq!((messages, resent), (truth.counts.sip_messages, 0));
    assert_eq!((a.sip.requests, a.sip.responses), (requests, responses));
    let streams = common::tshark_rtp_streams(&path, &[]);
    let answered_directions: usize = truth
        .calls
        .iter()
        .map(|c| c.rtp_packets.iter().filter(|&&n| n > 0).count())
        .sum();
    assert_eq!(streams.len(), answered_directions);
    let rtp: u64 = streams.iter().map(|s| s.packets).sum();
    assert_eq!(rtp, truth.counts.rtp_packets);
}

#[test]
fn clean_day_is_background_only_and_scales_with_the_call_count() {
    let opts = ScenarioOptions {
        clean_calls: 300,
        seed: 9,
        ..ScenarioOptions::default()
    };
    let (_dir, path, truth, _) = scenario(Scenario::Clean, &opts);
    assert_clean_background(&truth);
    assert_eq!(truth.calls.len(), 300);
    assert!(truth.calls.iter().all(|c| c.background));
    assert!(truth.registrations.iter().all(|r| !r.failed()));
    assert!(truth.one_way.is_empty() && truth.toll_fraud.is_none());
    // One call per phone at a time.
    let mut by_phone: HashMap<std::net::IpAddr, Vec<(i64, i64)>> = HashMap::new();
    for c in &truth.calls {
        let phone = if c.caller_addr.ip().to_string() == "192.168.10.2" {
            c.callee_addr.ip()
        } else {
            c.caller_addr.ip()
        };
        by_phone
            .entry(phone)
            .or_default()
            .push((c.invite_ns, c.end_ns));
    }
    for spans in by_phone.values_mut() {
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].1 < w[1].0));
    }
    // The same seed writes the same bytes; another seed other timing.
    let again = path.with_extension("again.pcap");
    let truth2 = write(Scenario::Clean, &again, &opts).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap()
    );
    assert_eq!(truth2.calls, truth.calls);
    let other = write(
        Scenario::Clean,
        &again,
        &ScenarioOptions {
            seed: 10,
            ..opts.clone()
        },
    )
    .unwrap();
    assert_ne!(other.calls, truth.calls);
}

#[test]
fn one_way_asks_for_enough_background_calls() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ScenarioOptions {
        clean_calls: 5,
        ..ScenarioOptions::default()
    };
    let e = write(Scenario::OneWayAudio, &dir.path().join("x.pcap"), &opts).unwrap_err();
    assert!(e.to_string().contains("at least 20"), "{e}");
}
