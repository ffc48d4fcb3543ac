//! The dialparties route against the Asterisk emulator: a FreePBX-shaped astdb and hints, the
//! route's answer read back from the channel as Asterisk would hold it.
//!
//! The uniform matrix gives every member of a group the same state and the same feature, so
//! that what the script does can be said in a few rules (`expected` below); the cases after it
//! pin what the rules do not cover: follow-me, confirmation, the script's bugs and their fixes,
//! hostile member lists, and the round trips.

use agi_routes::dialparties::{self, Dialparties, Fix, Rules, Shuffle, Version};
use asterisk_emu::freepbx::{self, contact};
use asterisk_emu::{AgiStatus, Channel, Outcome, Plan};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

const CALLER: &str = "2000";

/// A server with the route, on a loopback port.
async fn serve(rules: Rules) -> SocketAddr {
    serve_route(route(rules)).await
}

fn route(rules: Rules) -> Dialparties {
    let mut route = Dialparties::new(rules, false);
    route.shuffle = Arc::new(|| Box::new(Reverse));
    route
}

async fn serve_route(route: Dialparties) -> SocketAddr {
    let config = fastagi::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        ..fastagi::ServerConfig::default()
    };
    let router = dialparties::add(fastagi::Router::new(), route).unwrap();
    let server =
        fastagi::Server::bind(config, router, Arc::new(fastagi::Metrics::unregistered())).unwrap();
    let addr = server.local_addr();
    let (stop, rx) = fastagi::shutdown_channel();
    tokio::spawn(async move {
        let _keep = stop;
        server.run(rx).await
    });
    addr
}

/// The deterministic "random" order: members reversed.
struct Reverse;
impl Shuffle for Reverse {
    fn shuffle(&mut self, members: &mut [String]) {
        members.reverse();
    }
}

/// A FreePBX system: extensions with one PJSIP device each, call waiting on, idle.
#[derive(Clone)]
struct Pbx {
    channel: Channel,
}

impl Pbx {
    fn new(exts: &[String]) -> Pbx {
        let mut channel = freepbx::extensions(exts);
        channel.callerid_num = CALLER.into();
        Pbx { channel }
    }
    fn var(mut self, name: &str, value: &str) -> Pbx {
        self.channel.variables.insert(name.into(), value.into());
        self
    }
    fn db(mut self, path: &str, value: &str) -> Pbx {
        self.channel.astdb.insert(path.into(), value.into());
        self
    }
    fn undb(mut self, path: &str) -> Pbx {
        self.channel.astdb.remove(path);
        self
    }
    fn state(mut self, ext: &str, word: &str) -> Pbx {
        self.channel
            .extension_states
            .insert(format!("{ext}@ext-local"), word.into());
        self
    }
    /// macro-dial's arguments: ring time, dial options, members.
    fn group(mut self, method: &str, members: &[String]) -> Pbx {
        freepbx::ring_group(&mut self.channel, method, members);
        self
    }
}

/// One call through the route: the outcome, and the channel as it was left.
async fn dial(addr: SocketAddr, pbx: &Pbx) -> (Outcome, Channel) {
    let plan = Plan {
        channel: Some(Arc::new(pbx.channel.clone())),
        ..Plan::route("dialparties.agi")
    };
    let outcome = asterisk_emu::run(addr, &plan, 1).await.unwrap();
    assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
    assert_eq!(
        outcome.status,
        AgiStatus::Success,
        "{:?}",
        outcome.exchanges
    );
    let channel = outcome.channel.clone().unwrap();
    (outcome, channel)
}

/// The variables the route set, by the name it used (`__KEEPCID`, `HuntMember0`, ...), with
/// SET VARIABLE or in an `EXEC MSet` batch.
fn sets(o: &Outcome) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (line, _) in &o.exchanges {
        let words = agi::split_args(line).unwrap();
        match words
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["SET", "VARIABLE", name, value @ ..] => {
                out.insert(name.to_string(), value.first().unwrap_or(&"").to_string());
            }
            ["EXEC", "MSet", options] => {
                for (name, value) in asterisk_emu::mset_pairs(options) {
                    if !name.starts_with("DB(") {
                        out.insert(name, value);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Round trips that write: SET VARIABLE, EXEC MSet, DATABASE PUT and DEL.
fn writes(o: &Outcome) -> usize {
    o.exchanges.len() - reads(o)
}

fn reads(o: &Outcome) -> usize {
    o.exchanges
        .iter()
        .filter(|(l, _)| l.starts_with("GET ") || l.starts_with("DATABASE GET"))
        .count()
}

fn exts(n: usize) -> Vec<String> {
    freepbx::numbers(n)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Feature {
    Nothing,
    /// CF/<ext> = 2<ext>: unconditional forward.
    Cf,
    /// CFB/<ext> = 3<ext>: forward on busy (call waiting stays on).
    Cfb,
    /// CFU/<ext> = 4<ext>: forward when unavailable (call waiting stays on).
    Cfu,
    Dnd,
    /// No CW key: call waiting off.
    CwOff,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Size {
    One,
    Three,
    Twenty,
    /// Three outside numbers (`5550100#`...).
    External,
}

const STRATEGIES: [&str; 12] = [
    "none",
    "ringall",
    "ringall-prim",
    "ringallv2",
    "ringallv2-prim",
    "hunt",
    "hunt-prim",
    "memoryhunt",
    "memoryhunt-prim",
    "firstavailable",
    "firstnotonphone",
    "random",
];
const STATES: [&str; 4] = ["NOT_INUSE", "INUSE", "BUSY", "UNAVAILABLE"];

/// What the script decides when every member has `state` and `feature`: the members dialled
/// (their dial strings, in order), DIALSTATUS, __DIVERSION_REASON.
struct Expect {
    dialled: Vec<(String, String)>, // (FILTERED_DIAL entry, dial string)
    dialstatus: Option<&'static str>,
    diversion: Option<&'static str>,
}

fn expected(
    method: &str,
    state: &str,
    feature: Feature,
    members: &[String],
    external: bool,
) -> Expect {
    let base = method.trim_end_matches("-prim");
    let master = method.ends_with("-prim");
    let busy = state == "INUSE" || state == "BUSY";
    let unavailable = state == "UNAVAILABLE";
    let mut dialled = Vec::new();
    let mut dialstatus = None;
    let mut diversion = None;
    if external {
        // Outside numbers have no astdb features and no state worth reading: all rung.
        for m in members {
            let n = m.trim_end_matches('#').to_string();
            dialled.push((n.clone(), format!("Local/{n}@from-internal/n")));
        }
        return Expect {
            dialled,
            dialstatus,
            diversion,
        };
    }
    for (i, m) in members.iter().enumerate() {
        let fwd = |p: &str| (format!("{p}{m}"), format!("Local/{p}{m}@from-internal/n"));
        let own = (m.clone(), contact(m));
        let pick = match feature {
            Feature::Cf => {
                if base == "none" {
                    diversion = Some("unconditional");
                }
                Some(fwd("2"))
            }
            Feature::Dnd => {
                dialstatus = Some("BUSY");
                None
            }
            // Call waiting off: the state is read. In use or busy: dropped as busy;
            // unavailable: dropped silently.
            Feature::CwOff if busy => {
                dialstatus = Some("BUSY");
                diversion = Some("user-busy");
                None
            }
            Feature::CwOff if unavailable => None,
            // Busy forward with call waiting on: the member keeps ringing (call waiting).
            Feature::Cfb if unavailable => None,
            // Unavailable forward: in a group through Local; a single extension drops back to
            // the dialplan with NOANSWER.
            Feature::Cfu if unavailable && base != "none" => Some(fwd("4")),
            Feature::Cfu if unavailable => {
                dialstatus = Some("NOANSWER");
                None
            }
            // Call waiting on, no state-dependent feature: the strategy's own filters.
            Feature::Nothing if base == "firstnotonphone" && state != "NOT_INUSE" => {
                dialstatus = Some("BUSY");
                None
            }
            Feature::Nothing if base == "firstavailable" && unavailable => {
                dialstatus = Some("BUSY");
                None
            }
            _ => Some(own),
        };
        if let Some(p) = pick {
            dialled.push(p);
        }
        // Master mode: the primary in use or busy (not idle, not unavailable) ends the list,
        // unless it was forwarded or on DND (which reset master mode or empty the list).
        if i == 0 && master && (busy) && !matches!(feature, Feature::Cf | Feature::Dnd) {
            break;
        }
    }
    Expect {
        dialled,
        dialstatus,
        diversion,
    }
}

#[tokio::test]
async fn the_uniform_matrix() {
    let addr = serve(Rules::default()).await;
    let features = [
        Feature::Nothing,
        Feature::Cf,
        Feature::Cfb,
        Feature::Cfu,
        Feature::Dnd,
        Feature::CwOff,
    ];
    let mut cases = 0;
    for size in [Size::One, Size::Three, Size::Twenty, Size::External] {
        let members: Vec<String> = match size {
            Size::One => exts(1),
            Size::Three => exts(3),
            Size::Twenty => exts(20),
            Size::External => (0..3).map(|i| format!("555010{i}#")).collect(),
        };
        let external = size == Size::External;
        for method in STRATEGIES {
            for state in STATES {
                for feature in features {
                    if external && feature != Feature::Nothing {
                        continue;
                    }
                    let extensions = if external { &[][..] } else { &members[..] };
                    let mut pbx = Pbx::new(extensions).group(method, &members);
                    for m in &members {
                        // Outside numbers have no hint.
                        if !external {
                            pbx = pbx.state(m, state);
                        }
                        pbx = match feature {
                            Feature::Nothing => pbx,
                            Feature::Cf => pbx.db(&format!("/CF/{m}"), &format!("2{m}")),
                            Feature::Cfb => pbx.db(&format!("/CFB/{m}"), &format!("3{m}")),
                            Feature::Cfu => pbx.db(&format!("/CFU/{m}"), &format!("4{m}")),
                            Feature::Dnd => pbx.db(&format!("/DND/{m}"), "YES"),
                            Feature::CwOff => pbx.undb(&format!("/CW/{m}")),
                        };
                    }
                    let (o, ch) = dial(addr, &pbx).await;
                    check(method, state, feature, &members, external, &o, &ch);
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 12 * 4 * (6 * 3 + 1));
}

fn check(
    method: &str,
    state: &str,
    feature: Feature,
    members: &[String],
    external: bool,
    o: &Outcome,
    ch: &Channel,
) {
    let case = format!(
        "{method} / {state} / {feature:?} / {} members",
        members.len()
    );
    let set = sets(o);
    let e = expected(method, state, feature, members, external);
    let base = method.trim_end_matches("-prim");
    let hunt_type = [
        "hunt",
        "memoryhunt",
        "random",
        "firstavailable",
        "firstnotonphone",
    ]
    .contains(&base);
    let filtered: Vec<&str> = e.dialled.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        set["FILTERED_DIAL"],
        filtered.join("-"),
        "{case}: FILTERED_DIAL"
    );
    assert_eq!(set["__KEEPCID"], "TRUE", "{case}");
    assert_eq!(set["__DIALPARTIES"], "1", "{case}");
    assert_eq!(set["DIALOPTS"], "tr", "{case}");
    assert_eq!(
        set.get("__DIVERSION_REASON").map(String::as_str),
        e.diversion,
        "{case}: diversion"
    );
    let dials: Vec<&str> = e.dialled.iter().map(|(_, d)| d.as_str()).collect();
    // DIALSTATUS: what a dropped member said, or NOANSWER when nothing is left to dial.
    // ringallv2 hands the list to the follow-me contexts unless exactly one member is left
    // after DND: with every member on DND too, since a count of 0 is not 1.
    // Master mode ends the list first when the primary is on DND, or in use or busy and
    // not forwarded: the dial string is then kept as built.
    let busy = state == "INUSE" || state == "BUSY";
    let skipped = method.ends_with("-prim")
        && !external
        && (feature == Feature::Dnd || (busy && feature != Feature::Cf));
    let left = if feature == Feature::Dnd {
        0
    } else {
        members.len()
    };
    let follow_me_form = base == "ringallv2" && !skipped && left != 1;
    let ds_empty = dials.is_empty() && !follow_me_form;
    let status = e.dialstatus.or(ds_empty.then_some("NOANSWER"));
    assert_eq!(
        set.get("DIALSTATUS").map(String::as_str),
        status,
        "{case}: DIALSTATUS"
    );

    if follow_me_form {
        // Without FMGRP, ringallv2 still hands the list to the follow-me contexts: the first
        // member (after DND) to FMPR, the rest to FMGL, with no ring time.
        // The list as the passes left it: forwarded members as `<target>#`.
        let left: Vec<String> = match feature {
            Feature::Dnd => vec![],
            Feature::Cf => members.iter().map(|m| format!("2{m}#")).collect(),
            _ => members.to_vec(),
        };
        let first = left.first().cloned().unwrap_or_default();
        let rest: Vec<String> = left.iter().skip(1).cloned().collect();
        let want = format!(
            "Local/FMPR-{first}@from-internal&Local/FMGL-{}@from-internal,,tr",
            rest.join("-")
        );
        assert_eq!(
            set.get("ds").map(String::as_str),
            Some(want.as_str()),
            "{case}: ds"
        );
        assert_eq!(
            set["_FMPRIME"],
            if method == "ringallv2" {
                "FALSE"
            } else {
                "TRUE"
            },
            "{case}"
        );
        return;
    }
    if dials.is_empty() {
        assert!(!set.contains_key("ds"), "{case}: ds {:?}", set.get("ds"));
        return;
    }
    if hunt_type {
        // Members forwarded by CF are left out of the hunt list (the script's bug: it looks
        // them up by their original number, and CF replaced it). A CFU forward keeps its
        // place: it is filed under the member's own number. Outside numbers are never hunt
        // place: it is filed under the member's own number, except in firstnotonphone, whose
        // reordering looks members up by the number dialled.
        let mut hunt: Vec<String> = if feature == Feature::Cf {
            Vec::new()
        } else {
            e.dialled
                .iter()
                .filter(|(f, _)| base != "firstnotonphone" || members.contains(f) || external)
                .map(|(_, d)| d.clone())
                .collect()
        };
        if base == "random" {
            hunt.reverse();
        }
        assert_eq!(set["ds"], ",20,tr", "{case}: ds");
        assert_eq!(set["HuntMembers"], hunt.len().to_string(), "{case}");
        assert_eq!(set["MACRODIALGOTO_PRI"], "huntdial", "{case}");
        assert_eq!(set["CALLTRACE_HUNT"], CALLER, "{case}");
        for (i, d) in hunt.iter().enumerate() {
            let want = if base == "memoryhunt" {
                hunt[..=i].join("&")
            } else {
                d.clone()
            };
            assert_eq!(
                set[&format!("HuntMember{i}")],
                want,
                "{case}: HuntMember{i}"
            );
        }
        assert!(
            !ch.astdb.keys().any(|k| k.starts_with("/CALLTRACE/")),
            "{case}: no CALLTRACE in a hunt"
        );
        return;
    }
    // ringallv2 with one member keeps its ring time empty (no follow-me times).
    let timer = if base == "ringallv2" { "" } else { "20" };
    assert_eq!(
        set["ds"],
        format!("{},{timer},tr", dials.join("&")),
        "{case}: ds"
    );
    assert_eq!(set["MACRODIALGOTO_PRI"], "normdial", "{case}");
    for (f, d) in &e.dialled {
        let trace = ch.astdb.get(&format!("/CALLTRACE/{f}"));
        if d.starts_with("PJSIP") {
            assert_eq!(
                trace.map(String::as_str),
                Some(CALLER),
                "{case}: CALLTRACE/{f}"
            );
        }
    }
}

fn rules(version: Version, fixes: &[Fix]) -> Rules {
    Rules {
        version,
        fixes: fixes.to_vec(),
        ..Rules::default()
    }
}

#[tokio::test]
async fn a_group_of_up_to_twenty_takes_at_most_four_reads() {
    let addr = serve(Rules::default()).await;
    for n in [1, 3, 20] {
        let members = exts(n);
        let pbx = Pbx::new(&members).group("ringall", &members);
        let (o, _) = dial(addr, &pbx).await;
        // The script: about 96 round trips for three members, ~17 more per member.
        assert!(reads(&o) <= 4, "{n} members: {} reads", reads(&o));
        assert!(o.exchanges.iter().all(|(l, _)| !l.starts_with("VERBOSE")));
        // Writes: the script's variables and a CALLTRACE key per member, in one MSet.
        assert_eq!(writes(&o), 1, "{n} members: {:?}", o.exchanges.last());
        let (_, ch) = dial(addr, &pbx).await;
        assert_eq!(
            ch.astdb
                .keys()
                .filter(|k| k.starts_with("/CALLTRACE/"))
                .count(),
            n
        );
        // The common case, single-device PJSIP members: variables, members, contacts.
        assert_eq!(reads(&o), 3, "{n} members");
    }
}

#[tokio::test]
async fn an_older_asterisk_gets_shorter_lines() {
    // Asterisk before 22.6 reads 2 KiB per command: twenty members need more round trips,
    // and no line may pass the limit.
    let addr = serve(Rules::default()).await;
    let members = exts(20);
    let pbx = Pbx::new(&members).group("ringall", &members);
    let plan = Plan {
        channel: Some(Arc::new(pbx.channel.clone())),
        agi_version: "22.5.0".into(),
        max_line_bytes: 2047,
        ..Plan::route("dialparties")
    };
    let o = asterisk_emu::run(addr, &plan, 1).await.unwrap();
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    let (_, new_ds) = {
        let (o8, _) = dial(addr, &pbx).await;
        (o8.clone(), sets(&o8)["ds"].clone())
    };
    assert_eq!(sets(&o)["ds"], new_ds, "the same decision");
    assert!(reads(&o) <= 6, "{} reads at 2 KiB", reads(&o));
}

#[tokio::test]
async fn follow_me_rings_the_primary_first() {
    let addr = serve(Rules::default()).await;
    let members = exts(3);
    // Follow-me of 100 with list 101-102 (the primary not in the list): it rings alone for
    // the pre-ring time (FMPR), the list joins after it (FMGL).
    let pbx = Pbx::new(&members)
        .group("ringallv2-prim", &members[1..])
        .var("FMGRP", "100")
        .db("/AMPUSER/100/followme/prering", "7")
        .db("/AMPUSER/100/followme/grptime", "20");
    let (o, _) = dial(addr, &pbx).await;
    let set = sets(&o);
    assert_eq!(
        set["ds"],
        "Local/FMPR-100@from-internal&Local/FMGL-101-102@from-internal,27,tr"
    );
    assert_eq!(set["_FMPRERING"], "5", "prering - 2");
    assert_eq!(
        set["_FMREALPRERING"], "7",
        "not in the list: only the pre-ring time"
    );
    assert_eq!(set["_FMGRPTIME"], "20");
    assert_eq!(set["_FMPRIME"], "TRUE");
    assert_eq!(set["_FMUNIQUE"], "Local/100@tandem-00000001;2");
    assert_eq!(set["_RingGroupMethod"], "ringall");
    assert_eq!(set["FMGL_DIAL"], "101-102");
    assert_eq!(set["TIMEOUT"], "27");
    assert!(reads(&o) <= 3, "{}", reads(&o));

    // In the list: rung for the whole time; a pre-ring of 1 counts as 2.
    let pbx = Pbx::new(&members)
        .group(
            "ringallv2",
            &[members[1].clone(), members[0].clone(), members[2].clone()],
        )
        .var("FMGRP", "100")
        .db("/AMPUSER/100/followme/prering", "1")
        .db("/AMPUSER/100/followme/grptime", "20");
    let (o, _) = dial(addr, &pbx).await;
    let set = sets(&o);
    assert_eq!(
        set["ds"],
        "Local/FMPR-100@from-internal&Local/FMGL-101-102@from-internal,22,tr"
    );
    assert_eq!(set["_FMREALPRERING"], "22");
    assert_eq!(set["_FMPRIME"], "FALSE");

    // The primary on DND with the list empty otherwise: the group time alone.
    let pbx = Pbx::new(&members)
        .group("ringallv2", &members[1..2])
        .var("FMGRP", "100")
        .db("/DND/100", "YES")
        .db("/AMPUSER/100/followme/prering", "7")
        .db("/AMPUSER/100/followme/grptime", "20");
    let (o, _) = dial(addr, &pbx).await;
    let set = sets(&o);
    assert_eq!(set["ds"], format!("{},20,tr", contact("101")));
    assert_eq!(set["DIALSTATUS"], "BUSY");
}

#[tokio::test]
async fn an_empty_group_time_stops_php_8_but_not_the_fix() {
    let members = exts(3);
    let pbx = Pbx::new(&members)
        .group("ringallv2", &members[1..])
        .var("FMGRP", "100")
        .db("/AMPUSER/100/followme/prering", "7");
    // FreePBX 17 (PHP 8): "" + 7 is a TypeError; the script dies before it sets ds.
    let (o, _) = dial(serve(Rules::default()).await, &pbx).await;
    let set = sets(&o);
    assert!(!set.contains_key("ds") && !set.contains_key("TIMEOUT"));
    assert_eq!(set["__KEEPCID"], "TRUE", "what came before stands");
    // FreePBX 16 (PHP 7) reads it as 0, and so does the fix.
    for r in [
        rules(Version::V16, &[]),
        rules(Version::V17, &[Fix::FollowmeEmptyGrptime]),
    ] {
        let (o, _) = dial(serve(r).await, &pbx).await;
        assert_eq!(
            sets(&o)["ds"],
            "Local/FMPR-100@from-internal&Local/FMGL-101-102@from-internal,7,tr"
        );
    }
}

#[tokio::test]
async fn confirmation_dials_through_local_and_forces_ringall() {
    let addr = serve(Rules::default()).await;
    let members = vec!["100".to_string(), "5550100#".to_string()];
    let pbx = Pbx::new(&members[..1])
        .group("memoryhunt", &members)
        .var("USE_CONFIRMATION", "TRUE")
        .var("RINGGROUP_INDEX", "5")
        .var("NODEST", "600");
    let (o, ch) = dial(addr, &pbx).await;
    let set = sets(&o);
    // memoryhunt cannot confirm: ringall. Members go through the confirmation contexts, and
    // NODEST adds no blkvm macro while confirming.
    assert_eq!(
        set["ds"],
        "Local/LC-100@from-internal&Local/RG-5*-5550100#@from-internal,20,tr"
    );
    assert_eq!(set["__RT"], "20");
    assert_eq!(set["__RG_IDX"], "5");
    assert_eq!(set["__CALLCONFIRMCID"], CALLER);
    assert_eq!(set["MACRODIALGOTO_PRI"], "normdial");
    assert_eq!(ch.astdb["/CALLTRACE/100"], CALLER);

    // A caller ID that is not a number confirms as 999, and its CALLTRACE is removed.
    let mut pbx = pbx.db("/CALLTRACE/100", "1999");
    pbx.channel.callerid_num = "anonymous".into();
    let (o, ch) = dial(addr, &pbx).await;
    assert_eq!(sets(&o)["__CALLCONFIRMCID"], "999");
    assert!(!ch.astdb.contains_key("/CALLTRACE/100"));
}

#[tokio::test]
async fn no_destination_blocks_voicemail_per_release() {
    let members = exts(2);
    let pbx = Pbx::new(&members)
        .group("ringall", &members)
        .var("NODEST", "600");
    let (o, _) = dial(serve(rules(Version::V16, &[])).await, &pbx).await;
    assert_eq!(sets(&o)["DIALOPTS"], "trM(auto-blkvm)");
    assert!(!sets(&o).contains_key("__DIALPARTIES"));
    let (o, _) = dial(serve(Rules::default()).await, &pbx).await;
    assert_eq!(sets(&o)["DIALOPTS"], "trU(macro-auto-blkvm)");
    assert_eq!(sets(&o)["__DIALPARTIES"], "1");
    // Already there: not twice. RG_CONFIRM=1: not at all.
    let pbx2 = pbx.clone().var("ARG2", "trU(macro-auto-blkvm)");
    let (o, _) = dial(serve(Rules::default()).await, &pbx2).await;
    assert_eq!(sets(&o)["DIALOPTS"], "trU(macro-auto-blkvm)");
    let pbx3 = pbx.var("RG_CONFIRM", "1");
    let (o, _) = dial(serve(Rules::default()).await, &pbx3).await;
    assert_eq!(sets(&o)["DIALOPTS"], "tr");
}

#[tokio::test]
async fn inbound_and_queue_calls_lose_the_transfer_option() {
    let members = exts(1);
    let base = Pbx::new(&members)
        .group("ringall", &members)
        .var("ARG2", "TtrU(sub^Test)m(Tunes)");
    let addr = serve(Rules::default()).await;
    // The script spares the music class m(Tunes), and nothing else: U(sub^Test) loses its T.
    let (o, _) = dial(addr, &base.clone().var("DIRECTION", "INBOUND")).await;
    assert_eq!(sets(&o)["DIALOPTS"], "trU(sub^est)m(Tunes)");
    let (o, _) = dial(addr, &base.clone().var("FROMQ", "true")).await;
    assert_eq!(sets(&o)["DIALOPTS"], "trU(sub^est)m(unes)");
    let fixed = serve(rules(Version::V17, &[Fix::TOutsideArguments])).await;
    let (o, _) = dial(fixed, &base.clone().var("FROMQ", "true")).await;
    assert_eq!(sets(&o)["DIALOPTS"], "trU(sub^Test)m(Tunes)");
    let (o, _) = dial(addr, &base).await;
    assert_eq!(sets(&o)["DIALOPTS"], "TtrU(sub^Test)m(Tunes)");
}

#[tokio::test]
async fn cfignore_leaves_a_hole_the_dnd_pass_misses() {
    // 100 forwards (dropped under CFIGNORE, key 0 unset), 101 is on DND. The DND pass counts
    // positions: 101 is at position 0 but key 1, so it unsets key 0 (gone already) and 101
    // stays, and is rung though on DND.
    let members = exts(3);
    let pbx = Pbx::new(&members)
        .group("ringall", &members)
        .var("CFIGNORE", "TRUE")
        .db("/CF/100", "300")
        .db("/DND/101", "YES");
    let (o, _) = dial(serve(Rules::default()).await, &pbx).await;
    assert_eq!(sets(&o)["FILTERED_DIAL"], "101-102");
    let (o, _) = dial(serve(rules(Version::V17, &[Fix::DenseIndex])).await, &pbx).await;
    assert_eq!(sets(&o)["FILTERED_DIAL"], "102");
    assert_eq!(sets(&o)["DIALSTATUS"], "BUSY");
}

#[tokio::test]
async fn hunting_skips_forwarded_members_unless_fixed() {
    let members = exts(3);
    let pbx = Pbx::new(&members)
        .group("hunt", &members)
        .db("/CF/101", "5550199");
    let (o, _) = dial(serve(Rules::default()).await, &pbx).await;
    let set = sets(&o);
    assert_eq!(set["FILTERED_DIAL"], "100-5550199-102");
    assert_eq!(set["HuntMembers"], "2");
    assert_eq!(set["HuntMember1"], contact("102"));
    let (o, _) = dial(
        serve(rules(Version::V17, &[Fix::HuntKeepsForwarded])).await,
        &pbx,
    )
    .await;
    let set = sets(&o);
    assert_eq!(set["HuntMembers"], "3");
    assert_eq!(set["HuntMember1"], "Local/5550199@from-internal/n");
}

#[tokio::test]
async fn deviceless_members_are_listed_unless_fixed() {
    let members = exts(2);
    let pbx = Pbx::new(&members)
        .group("ringall", &members)
        .undb("/AMPUSER/101/device");
    let (o, ch) = dial(serve(Rules::default()).await, &pbx).await;
    assert_eq!(sets(&o)["FILTERED_DIAL"], "100-101");
    assert_eq!(sets(&o)["ds"], format!("{},20,tr", contact("100")));
    assert!(ch.astdb.contains_key("/CALLTRACE/101"));
    let (o, ch) = dial(
        serve(rules(Version::V17, &[Fix::SkipDeviceless])).await,
        &pbx,
    )
    .await;
    assert_eq!(sets(&o)["FILTERED_DIAL"], "100");
    assert!(!ch.astdb.contains_key("/CALLTRACE/101"));
}

#[tokio::test]
async fn queue_wait_names_the_minutes_and_headers_carry_alert_info() {
    let members = exts(1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let pbx = Pbx::new(&members)
        .group("ringall", &members)
        .var("QUEUEWAIT", &(now - 185).to_string())
        .var("ALERT_INFO", "<http://x>;info=ring2")
        .var("RVOL", "5")
        .var("SIPADDHEADER", "X-Group:sales")
        .var("RVOL_MODE", "no");
    let (o, _) = dial(serve(Rules::default()).await, &pbx).await;
    let set = sets(&o);
    assert_eq!(set["CALLERID(name)"], "M3:Alice");
    assert_eq!(set["__SAVEDCIDNAME"], "Alice");
    assert_eq!(
        set["HASH(__SIPHEADERS,Alert-Info)"],
        "<http://x>;info=ring2\\;volume=5"
    );
    assert_eq!(set["HASH(__SIPHEADERS,X-Group)"], "sales");
    assert_eq!(set["__RVOL"], "5");
}

#[tokio::test]
async fn hostile_member_lists_stay_in_their_place() {
    let addr = serve(Rules::default()).await;
    // issue-tracker#433's list splits on '-' into `{` and `7135689715#}`; a member that is an
    // expression is read with its own DATABASE GET, never evaluated.
    let list = "{-7135689715#}-${SHELL(id)}-100";
    // With call waiting on, no state is read and every member is kept: `{` and the expression
    // have no device (nothing to dial, but listed), `7135689715#}` has a '#' after its first
    // character, so it is an outside number, dialled with its brace.
    let pbx = Pbx::new(&exts(1))
        .var("RingGroupMethod", "ringall")
        .var("ARG1", "20")
        .var("ARG3", list)
        .db("/CW/{", "ENABLED")
        .db("/CW/7135689715#}", "ENABLED")
        .db("/CW/${SHELL(id)}", "ENABLED");
    let (o, _) = dial(addr, &pbx).await;
    let set = sets(&o);
    assert_eq!(set["FILTERED_DIAL"], "{-7135689715}-${SHELL(id)}-100");
    assert_eq!(
        set["ds"],
        format!("Local/7135689715}}@from-internal/n&{},20,", contact("100"))
    );
    for (line, _) in &o.exchanges {
        if line.starts_with("GET FULL VARIABLE") {
            assert!(!line.contains("SHELL"), "{line}");
        }
    }
    // An ARGn of '-' ends the script there (it exits with the argument's number).
    let pbx = Pbx::new(&exts(1))
        .var("RingGroupMethod", "ringall")
        .var("ARG3", "100")
        .var("ARG4", "-");
    let (o, _) = dial(addr, &pbx).await;
    assert!(!sets(&o).contains_key("FILTERED_DIAL"));
}

#[tokio::test]
async fn screening_from_outside_marks_the_call() {
    let members = exts(1);
    let dir = tempfile::tempdir().unwrap();
    let intros = dir.path().join("sounds/priv-callerintros");
    std::fs::create_dir_all(&intros).unwrap();
    for f in ["2000.wav", "2000.gsm", "20001.wav"] {
        std::fs::write(intros.join(f), b"x").unwrap();
    }
    let pbx = Pbx::new(&members)
        .group("none", &members)
        .var("FROM_DID", "5551234")
        .var("ASTVARLIBDIR", dir.path().to_str().unwrap())
        .db("/AMPUSER/100/screen", "nomemory");
    let (o, _) = dial(serve(Rules::default()).await, &pbx).await;
    let set = sets(&o);
    assert_eq!(set["__SCREEN"], "nomemory");
    assert_eq!(set["__SCREEN_EXTEN"], "100");
    assert_eq!(set["ds"], format!("{},20,trp", contact("100")));
    // The caller's introductions are gone, another caller's stay.
    let left: Vec<_> = std::fs::read_dir(&intros)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("20001.wav")]);
}

#[tokio::test]
async fn batched_writes_keep_every_character() {
    // Values reach the channel exactly through MSet's two splitting passes: commas, equals
    // signs, quotes, backslashes, parentheses and brackets.
    let members = exts(2);
    let nasty = r#"a,b=c"d\e(f)[g] h"#;
    let pbx = Pbx::new(&members)
        .group("ringall", &members)
        .var("SIPADDHEADER", &format!("X-Odd:{nasty}"))
        .var("ARG2", "tr(x,y)=\\");
    let (o, ch) = dial(serve(rules(Version::V17, &[Fix::ExactValues])).await, &pbx).await;
    assert_eq!(ch.variables["HASH(__SIPHEADERS,X-Odd)"], nasty);
    assert_eq!(ch.variables["DIALOPTS"], "tr(x,y)=\\");
    assert_eq!(
        ch.variables["ds"],
        format!("{}&{},20,tr(x,y)=\\", contact("100"), contact("101"))
    );
    assert_eq!(sets(&o)["DIALOPTS"], "tr(x,y)=\\");
    assert_eq!(writes(&o), 1);
}
