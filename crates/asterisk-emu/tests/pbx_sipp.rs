//! The emulated PBX between real SIPp phones and trunks (Debian's `sip-tester`): answered calls
//! are bridged with a trunk leg of the PBX's own, a busy trunk's 486 reaches the phone, a
//! phone's CANCEL reaches the trunk, an unrouted number is refused 404. Skips without SIPp.

use asterisk_emu::pbx::sipp::{self, Dial, Sipp};
use asterisk_emu::pbx::{DialPattern, Pbx, PbxConfig};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

fn free_port(ip: &str) -> u16 {
    UdpSocket::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn dials(n: usize, prefix: &str) -> Vec<Dial> {
    (0..n)
        .map(|i| Dial {
            caller: format!("{}", 201 + i),
            dialled: format!("{prefix}0171555{i:04}"),
            name: format!("Desk {i}"),
        })
        .collect()
}

#[test]
fn bridges_answers_refusals_cancels_and_unrouted_calls() {
    if !sipp::available() {
        test_env::skip("sipp is not installed (Debian package sip-tester)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (answer_port, busy_port, ring_port) = (
        free_port("127.0.0.31"),
        free_port("127.0.0.32"),
        free_port("127.0.0.33"),
    );
    let at = |ip: &str, port: u16| -> SocketAddr { format!("{ip}:{port}").parse().unwrap() };
    let mut config = PbxConfig::loopback(at("127.0.0.31", answer_port));
    config.sip = at("127.0.0.20", 0);
    config.routes = vec![
        DialPattern::new("8", "0049").via(at("127.0.0.32", busy_port)),
        DialPattern::new("7", "0049").via(at("127.0.0.33", ring_port)),
        DialPattern::new("9", "0049"),
    ];
    config.correlation_header = Some("X-Call-ID".into());
    let pbx = Pbx::start(config).unwrap();
    let pbx_addr = pbx.sip_addr().to_string();

    let busy = sipp::scenario_file(dir.path(), "busy.xml", sipp::BUSY_TRUNK).unwrap();
    let ring = sipp::scenario_file(dir.path(), "ring.xml", sipp::RINGING_TRUNK).unwrap();
    let phone = sipp::scenario_file(dir.path(), "phone.xml", &sipp::phone()).unwrap();
    let cancel = sipp::scenario_file(dir.path(), "cancel.xml", &sipp::cancelling_phone()).unwrap();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let p = |x: &std::path::Path| x.display().to_string();
    let mut trunks = vec![
        Sipp::spawn(
            dir.path(),
            "answer",
            &s(&[
                "-sn",
                "uas",
                "-i",
                "127.0.0.31",
                "-p",
                &answer_port.to_string(),
                "-m",
                "3",
            ]),
        )
        .unwrap(),
        Sipp::spawn(
            dir.path(),
            "busy",
            &s(&[
                "-sf",
                &p(&busy),
                "-i",
                "127.0.0.32",
                "-p",
                &busy_port.to_string(),
                "-m",
                "2",
            ]),
        )
        .unwrap(),
        Sipp::spawn(
            dir.path(),
            "ring",
            &s(&[
                "-sf",
                &p(&ring),
                "-i",
                "127.0.0.33",
                "-p",
                &ring_port.to_string(),
                "-m",
                "1",
            ]),
        )
        .unwrap(),
    ];
    for (ip, port) in [
        ("127.0.0.31", answer_port),
        ("127.0.0.32", busy_port),
        ("127.0.0.33", ring_port),
    ] {
        assert!(
            sipp::wait_bound(at(ip, port), Duration::from_secs(10)),
            "SIPp on {ip}:{port}"
        );
    }
    let mut calls = dials(3, "9");
    calls.extend(dials(2, "8"));
    calls.push(Dial {
        caller: "299".into(),
        dialled: "5555".into(),
        name: "Lobby".into(),
    });
    let csv = dir.path().join("calls.csv");
    sipp::injection_file(&csv, &calls).unwrap();
    let mut phones = Sipp::spawn(
        dir.path(),
        "phones",
        &s(&[
            &pbx_addr,
            "-sf",
            &p(&phone),
            "-inf",
            &p(&csv),
            "-i",
            "127.0.0.10",
            "-m",
            "6",
            "-r",
            "20",
            "-d",
            "200",
        ]),
    )
    .unwrap();
    let cancel_csv = dir.path().join("cancel.csv");
    sipp::injection_file(&cancel_csv, &dials(1, "7")).unwrap();
    let mut canceller = Sipp::spawn(
        dir.path(),
        "cancel",
        &s(&[
            &pbx_addr,
            "-sf",
            &p(&cancel),
            "-inf",
            &p(&cancel_csv),
            "-i",
            "127.0.0.11",
            "-m",
            "1",
        ]),
    )
    .unwrap();

    let errors = |name: &str| {
        std::fs::read_to_string(dir.path().join(format!("{name}-errors.log"))).unwrap_or_default()
    };
    assert_eq!(
        phones.wait(Duration::from_secs(20)),
        Some(0),
        "phones: {}",
        errors("phones")
    );
    assert_eq!(
        canceller.wait(Duration::from_secs(10)),
        Some(0),
        "canceller: {}",
        errors("cancel")
    );
    for trunk in &mut trunks {
        let name = trunk.name.clone();
        assert_eq!(
            trunk.wait(Duration::from_secs(10)),
            Some(0),
            "{name}: {}",
            errors(&name)
        );
    }
    let mut bridged = pbx.bridged();
    bridged.sort_by(|a, b| a.dialled.cmp(&b.dialled));
    let summary: Vec<_> = bridged
        .iter()
        .map(|b| {
            (
                b.dialled.as_str(),
                b.sent_to_trunk.as_deref(),
                b.phone_status,
                b.outbound_call_id.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("5555", None, 404, false),
            ("701715550000", Some("004901715550000"), 487, true),
            ("801715550000", Some("004901715550000"), 486, true),
            ("801715550001", Some("004901715550001"), 486, true),
            ("901715550000", Some("004901715550000"), 0, true),
            ("901715550001", Some("004901715550001"), 0, true),
            ("901715550002", Some("004901715550002"), 0, true),
        ]
    );
    for b in &bridged {
        assert_ne!(
            b.outbound_call_id.as_deref(),
            Some(b.inbound_call_id.as_str())
        );
    }
}

/// A campaign's capture holds both legs of every bridged call and the direct calls: tshark's
/// count of INVITE dialogs is the PBX's two per call plus one per direct call.
#[test]
fn a_recorded_campaign_holds_every_leg() {
    if !sipp::available() || !on_path("dumpcap") || !on_path("tshark") {
        test_env::skip("sipp, dumpcap or tshark is not installed (Debian: sip-tester, tshark)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let campaign = asterisk_emu::pbx::campaign::Campaign {
        net: "127.0.35".into(),
        calls: 6,
        direct_calls: 3,
        same_number_every: 3,
        calls_per_s: 30,
        hold_ms: 300,
        correlation_header: None,
    };
    let rec = campaign.run(dir.path()).unwrap();
    for (name, status) in &rec.sipp_status {
        assert_eq!(*status, Some(0), "{name}");
    }
    assert_eq!(rec.bridged.len(), 6);
    let out = std::process::Command::new("tshark")
        // The legs use ports picked at run time, which tshark may take for another protocol's:
        // its SIP heuristic goes first, so every SIP datagram is read as SIP.
        .args(["-o", "udp.try_heuristic_first:TRUE", "-r"])
        .arg(&rec.pcap)
        .args([
            "-Y",
            "sip.Method == \"INVITE\"",
            "-T",
            "fields",
            "-e",
            "sip.Call-ID",
        ])
        .output()
        .unwrap();
    let mut ids: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6 * 2 + 3);
    // Every hang-up is a well-formed BYE (a phone's is sent to the PBX's Contact), on both legs.
    let out = std::process::Command::new("tshark")
        // The legs use ports picked at run time, which tshark may take for another protocol's:
        // its SIP heuristic goes first, so every SIP datagram is read as SIP.
        .args(["-o", "udp.try_heuristic_first:TRUE", "-r"])
        .arg(&rec.pcap)
        .args([
            "-Y",
            "sip.Method == \"BYE\" && sip.r-uri",
            "-T",
            "fields",
            "-e",
            "sip.Call-ID",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().lines().count(),
        6 * 2 + 3
    );
    for b in &rec.bridged {
        assert!(ids.contains(&b.inbound_call_id));
        assert!(ids.contains(b.outbound_call_id.as_ref().unwrap()));
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Media crosses the PBX both ways: the phone's RTP reaches the trunk renumbered, SIPp's echo
/// comes back through the PBX to the phone.
#[test]
fn a_phone_call_with_media_is_relayed_both_ways() {
    if !sipp::available() {
        test_env::skip("sipp is not installed (Debian package sip-tester)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trunk_port = free_port("127.0.0.41");
    let media_port = free_port("127.0.0.41");
    let mut config = PbxConfig::loopback(format!("127.0.0.41:{trunk_port}").parse().unwrap());
    config.sip = "127.0.0.40:0".parse().unwrap();
    let pbx = Pbx::start(config).unwrap();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut trunk = Sipp::spawn(
        dir.path(),
        "echo",
        &s(&[
            "-sn",
            "uas",
            "-i",
            "127.0.0.41",
            "-p",
            &trunk_port.to_string(),
            "-mp",
            &media_port.to_string(),
            "-rtp_echo",
            "-m",
            "1",
        ]),
    )
    .unwrap();
    let trunk_at = format!("127.0.0.41:{trunk_port}").parse().unwrap();
    assert!(sipp::wait_bound(trunk_at, Duration::from_secs(10)));
    let placed = asterisk_emu::pbx::phone::PhoneCall {
        pbx: pbx.sip_addr(),
        ip: "127.0.0.42".parse().unwrap(),
        caller: "201".into(),
        dialled: "4711".into(),
        packets: 50,
        lose_every: 10,
    }
    .place()
    .unwrap();
    assert_eq!(placed.packets_sent, 45);
    assert!(placed.packets_received >= 30, "{placed:?}");
    assert_eq!(trunk.wait(Duration::from_secs(5)), Some(0));
    assert_eq!(pbx.bridged()[0].inbound_call_id, placed.call_id);
}
