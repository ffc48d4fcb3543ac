//! The real captures in shared/captures, compared with tshark and with what was checked by hand.

mod common;

use std::path::Path;

use monitor::{Analysis, Monitor, MonitorConfig};

fn analyse(path: &Path) -> Analysis {
    analyse_with(path, 1)
}

fn analyse_with(path: &Path, workers: usize) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    m.finish()
}

/// Extra tshark options per file (none needed so far: every SIP here is on port 5060).
fn decode_as(_file: &str) -> &'static [&'static str] {
    &[]
}

const FILES: [&str; 7] = [
    "rtp_rtcp_sip_ipv4_udp.pcap",
    "sip_ipv4_tcp.pcap",
    "sip_ipv6_udp.pcap",
    "ipv6_udp_fragmented.pcap",
    "ipip0.pcap",
    "aaa.pcap",
    "g711a-rtp-only.pcap",
];

#[test]
fn rtp_streams_equal_tshark() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    if !common::have_tshark() {
        return;
    }
    for f in FILES {
        let path = shared.join("captures").join(f);
        let theirs = common::tshark_rtp_streams(&path, decode_as(f));
        let one = analyse_with(&path, 1);
        let two = analyse_with(&path, 2);
        common::assert_workers_agree(f, &one, &two);
        for workers in [1, 2] {
            let a = analyse_with(&path, workers);
            let ours: Vec<_> = a.all_streams().collect();
            common::assert_streams_match(&format!("{f} ({workers} workers)"), &ours, &theirs);
        }
    }
}

#[test]
fn sip_counts_equal_tshark() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    if !common::have_tshark() {
        return;
    }
    for f in FILES {
        let path = shared.join("captures").join(f);
        let a = analyse(&path);
        let (messages, requests, responses, resent) = common::tshark_sip_stat(&path, decode_as(f));
        assert_eq!(a.sip.messages, messages, "{f}: SIP messages");
        assert_eq!(a.sip.requests, requests, "{f}: requests");
        assert_eq!(a.sip.responses, responses, "{f}: responses");
        assert_eq!(a.sip.resent, resent, "{f}: resent messages");
    }
}

fn open(name: &str) -> Option<Analysis> {
    let shared = common::shared_dir()?;
    Some(analyse(&shared.join("captures").join(name)))
}

fn summary(a: &Analysis) -> Vec<(String, String, String, u16, usize)> {
    a.calls
        .iter()
        .map(|c| {
            let d = &c.dialog;
            (
                d.caller.to_string(),
                d.called.to_string(),
                d.state.as_str().to_string(),
                d.last_code,
                c.streams.len(),
            )
        })
        .collect()
}

fn row(
    caller: &str,
    called: &str,
    state: &str,
    code: u16,
    streams: usize,
) -> (String, String, String, u16, usize) {
    (caller.into(), called.into(), state.into(), code, streams)
}

/// Calls and outcomes read off each capture by hand (tshark -Y sip, Call-ID by Call-ID).
#[test]
fn calls_and_outcomes_checked_by_hand() {
    let Some(a) = open("rtp_rtcp_sip_ipv4_udp.pcap") else {
        return;
    };
    // Call 1: INVITE, 100, 180, 200 Ok, ACK; media both ways; no BYE in the capture.
    // Call 2: INVITE, 100, 180, capture ends while ringing.
    assert_eq!(
        summary(&a),
        [
            row("200.57.7.195", "francisco", "answered", 200, 2),
            row("5514540002", "francisco", "early", 180, 0)
        ]
    );
    assert!(a.calls[0].dialog.end_ns.is_none());
    // Two REGISTER chains answered 200 (one Call-ID registered twice).
    assert_eq!(a.registrations.len(), 2);
    assert!(a.registrations.iter().all(|r| r.outcome() == "registered"));
    // 200.57.7.199:4800 <-> 200.57.7.196:40378 is relayed media no SDP here announces, and
    // 200.57.7.202:30000 -> 200.57.7.196:40362 was announced by SDP outside SIP: found by header.
    assert_eq!(a.streams.len(), 3);
    assert!(
        a.calls[0].streams.iter().any(|s| s.stream.rtcp.is_some()),
        "RTCP reports attached"
    );

    let Some(a) = open("sip_ipv4_tcp.pcap") else {
        return;
    };
    assert_eq!(summary(&a), [row("101", "201", "ended", 200, 2)]);
    let d = &a.calls[0].dialog;
    assert_eq!(
        d.hangup_by,
        Some(monitor::dialog::Party::Callee),
        "BYE came from 201"
    );
    assert!(d.ringing_ns.is_some() && d.answer_ns.is_some() && d.end_ns.is_some());

    let Some(a) = open("aaa.pcap") else { return };
    // 1: cancelled by the caller, the INVITE then timed out (408).
    // 2, 3: 407 challenge, retried with credentials in the same Call-ID, refused with 403.
    // 4: 407, retry, 183 with early media (one stream), then 480.
    assert_eq!(
        summary(&a),
        [
            row("816666", "97239287044", "cancelled", 408, 0),
            row("voi18062", "0097239287044", "failed", 403, 0),
            row("35104723", "0097239287044", "failed", 403, 0),
            row("35104723", "35104724", "failed", 480, 1),
        ]
    );
    assert_eq!(
        a.calls[0].dialog.hangup_by,
        Some(monitor::dialog::Party::Caller)
    );
    // Eight REGISTER chains (tests/registrations.rs reads them one by one).
    assert_eq!(a.registrations.len(), 8);

    let Some(a) = open("ipip0.pcap") else { return };
    // SIP inside IP-in-IP: the INVITE's 403 carries a different Call-ID, so the INVITE has no
    // answer; the REGISTER is challenged three times.
    assert_eq!(
        summary(&a),
        [row("18121862248", "+3908351673002", "calling", 0, 0)]
    );
    assert_eq!(a.registrations.len(), 1);
    assert_eq!(a.registrations[0].outcome(), "challenged");
    assert_eq!(a.registrations[0].requests, 3);

    let Some(a) = open("sip_ipv6_udp.pcap") else {
        return;
    };
    // The frames of this capture are stamped years apart: steps of the clock, across which the
    // call is followed from its INVITE to its BYE, as tshark follows it (tests/clock_steps.rs).
    assert_eq!(summary(&a), [row("9876", "4321", "ended", 200, 0)]);
    assert_eq!(a.sip.messages, 6);

    let Some(a) = open("ipv6_udp_fragmented.pcap") else {
        return;
    };
    // Not SIP despite its name: NDN over UDP port 6363; one datagram in four IPv6 fragments.
    assert_eq!(a.counters.fragments_reassembled, 1);
    assert_eq!((a.sip.messages, a.calls.len()), (0, 0));

    let Some(a) = open("g711a-rtp-only.pcap") else {
        return;
    };
    assert_eq!((a.calls.len(), a.streams.len()), (0, 1));
    assert_eq!(a.streams[0].stream.packets, 236);
    assert!(a.streams[0].call_id.is_none());
}

/// What tshark says of each call's parties: per Call-ID, the User-Agent of the first INVITE
/// that has one before the answer, the callee's Server (else User-Agent) from the INVITE's
/// responses above 100 (a 2xx's first, else the first provisional one's), the first INVITE's
/// From and To hosts and Request-URI user, and the first `Supported` of the call.
fn tshark_call_fields(path: &Path) -> std::collections::BTreeMap<String, [String; 6]> {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args([
            "-Y",
            "sip",
            "-T",
            "fields",
            "-E",
            "occurrence=f",
            "-E",
            "separator=\t",
        ])
        .args([
            "-e",
            "sip.Call-ID",
            "-e",
            "sip.Method",
            "-e",
            "sip.Status-Code",
        ])
        .args([
            "-e",
            "sip.CSeq.method",
            "-e",
            "sip.User-Agent",
            "-e",
            "sip.Server",
        ])
        .args([
            "-e",
            "sip.from.host",
            "-e",
            "sip.to.host",
            "-e",
            "sip.r-uri.user",
        ])
        .args(["-e", "sip.Supported"])
        .output()
        .expect("run tshark");
    assert!(out.status.success());
    let mut calls: std::collections::BTreeMap<String, [String; 6]> = Default::default();
    let mut answered: std::collections::BTreeSet<String> = Default::default();
    let mut started: std::collections::BTreeSet<String> = Default::default();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [
            id,
            method,
            code,
            cseq_method,
            ua,
            server,
            from,
            to,
            ruri,
            supported,
        ] = f[..]
        else {
            continue;
        };
        let e = calls.entry(id.to_string()).or_default();
        if method == "INVITE" {
            if started.insert(id.to_string()) {
                e[2] = from.to_ascii_lowercase();
                e[3] = to.to_ascii_lowercase();
                e[4] = ruri.to_string();
            }
            if e[0].is_empty() && !answered.contains(id) {
                e[0] = ua.to_string();
            }
        }
        let code: u16 = code.parse().unwrap_or(0);
        if cseq_method == "INVITE" && code > 100 && !answered.contains(id) {
            let theirs = if server.is_empty() { ua } else { server };
            let answer = (200..300).contains(&code);
            if !theirs.is_empty() && (answer || e[1].is_empty()) {
                e[1] = theirs.to_string();
            }
            if answer && !e[1].is_empty() {
                answered.insert(id.to_string());
            }
        }
        if e[5].is_empty() && !supported.is_empty() && started.contains(id) {
            e[5] = supported.to_string();
        }
    }
    calls
}

#[test]
fn call_fields_equal_tshark() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    if !common::have_tshark() {
        return;
    }
    let cfg = MonitorConfig {
        headers: monitor::dialog::KeptHeaders {
            names: vec!["supported".into()],
            value_bytes_max: 4_096,
        },
        ..MonitorConfig::default()
    };
    let mut seen = 0;
    for f in FILES {
        let path = shared.join("captures").join(f);
        let mut m = Monitor::new(cfg.clone(), 1);
        m.read_file(&path, |_| {}).unwrap_or_else(|e| panic!("{e}"));
        let a = m.finish();
        let theirs = tshark_call_fields(&path);
        for c in &a.calls {
            let d = &c.dialog;
            let t = &theirs[&*d.call_id];
            let ours = &d.fields;
            let supported = ours
                .headers
                .iter()
                .find(|(n, _)| &**n == "supported")
                .map_or("", |(_, v)| &**v);
            let ours = [
                &*ours.caller_ua,
                &*ours.callee_ua,
                &*ours.from_domain,
                &*ours.to_domain,
                &*ours.ruri_user,
                supported,
            ];
            assert_eq!(ours, t.each_ref().map(|s| s.as_str()), "{f}: {}", d.call_id);
            seen += usize::from(!ours[0].is_empty() || !ours[1].is_empty());
        }
    }
    assert!(
        seen >= 3,
        "calls with a User-Agent among the captures: {seen}"
    );
}
