//! One call across its legs, on real B2BUA traffic: SIPp phones (Debian's `sip-tester`) call
//! through the emulated Asterisk PBX (`asterisk_emu::pbx`) to a SIPp trunk while other phones
//! call the trunk directly with the same callers and numbers, and dumpcap records loopback.
//! `tandem capture --json` must link each phone leg to its trunk leg by the right rule and
//! link nothing else; the PBX's own record of what it bridged is the truth. Then the console
//! shows a linked call as one, over real HTTP and in Chromium: every leg's row, one ladder
//! across the legs, every leg's streams, and the leg that lost packets.
//!
//! Needs sipp, dumpcap and the right to capture on `lo`; skips without them (fails under
//! `CI=true`, as `test_env::skip` does).

use asterisk_emu::pbx::campaign::{Campaign, Dumpcap, Recorded};
use asterisk_emu::pbx::phone::PhoneCall;
use asterisk_emu::pbx::sipp::{self, Sipp};
use asterisk_emu::pbx::{Pbx, PbxConfig};
use bench::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use bench::legs::{Score, capture_json, legs_options, score};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Runs `campaign` in `dir`, or says why it cannot run here.
fn record(campaign: &Campaign, dir: &Path) -> Option<Recorded> {
    if !sipp::available() || !on_path("dumpcap") {
        test_env::skip("sipp or dumpcap is not installed (Debian: sip-tester, wireshark-common)");
        return None;
    }
    match campaign.run(dir) {
        Ok(rec) => {
            for (name, status) in &rec.sipp_status {
                assert_eq!(*status, Some(0), "SIPp {name} had failed calls");
            }
            Some(rec)
        }
        Err(e) if e.to_string().contains("dumpcap") => {
            test_env::skip(&format!("cannot capture on lo here: {e}"));
            None
        }
        Err(e) => panic!("placing the calls: {e}"),
    }
}

fn campaign(net: &str, header: Option<&str>, same_number_every: usize) -> Campaign {
    Campaign {
        net: net.into(),
        calls: 8,
        direct_calls: 4,
        same_number_every,
        calls_per_s: 40,
        hold_ms: 300,
        correlation_header: header.map(str::to_string),
    }
}

fn linked(rec: &Recorded, options: &[String]) -> Score {
    let lines = capture_json(Path::new(EXE), &rec.pcap, options).unwrap();
    score(&lines, &rec.bridged).unwrap()
}

/// The INVITE dialogs tshark sees in the capture (distinct Call-IDs): its view has no links.
fn tshark_dialogs(pcap: &Path) -> Option<usize> {
    // Ports picked at run time may be another protocol's to tshark: its SIP heuristic first.
    let out = Command::new("tshark")
        .args(["-o", "udp.try_heuristic_first:TRUE", "-r"])
        .arg(pcap)
        .args([
            "-Y",
            "sip.Method == \"INVITE\"",
            "-T",
            "fields",
            "-e",
            "sip.Call-ID",
        ])
        .output()
        .ok()?;
    let mut ids: Vec<String> = String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    Some(ids.len())
}

#[test]
fn pbx_legs_link_by_the_b2bua_rule_and_direct_calls_to_the_same_numbers_stay_alone() {
    let dir = tempfile::tempdir().unwrap();
    let Some(rec) = record(&campaign("127.0.38", None, 0), dir.path()) else {
        return;
    };
    assert_eq!(rec.bridged.len(), 8);
    if let Some(n) = tshark_dialogs(&rec.pcap) {
        assert_eq!(
            n,
            8 * 2 + 4,
            "tshark: two dialogs per PBX call, one per direct call"
        );
    }
    // The PBX learned (it receives INVITEs and sends others of new Call-IDs), then configured.
    for (options, how) in [
        (legs_options(None, None), "learned"),
        (legs_options(Some(rec.pbx), None), "configured"),
    ] {
        let s = linked(&rec, &options);
        assert_eq!(s.dialogs, 20, "{how}");
        assert_eq!(
            (s.pairs, s.pairs_right, s.pairs_missed),
            (8, 8, 0),
            "{how}: {s:?}"
        );
        assert_eq!(s.direct_linked, 0, "{how}: {s:?}");
        let b2bua = &s.by_rule["b2bua"];
        assert_eq!(
            (b2bua.linked, b2bua.right, b2bua.wrong),
            (8, 8, 0),
            "{how}: {s:?}"
        );
        assert_eq!(s.by_rule.len(), 1, "{how}: {s:?}");
    }
    // Without linking, every dialog is its own call.
    let s = linked(&rec, &["--no-legs".to_string()]);
    assert_eq!((s.pairs_right, s.pairs_missed, s.by_rule.len()), (0, 8, 0));
}

#[test]
fn a_header_links_two_calls_to_one_number_at_once_where_the_b2bua_rule_must_not_guess() {
    let dir = tempfile::tempdir().unwrap();
    // Calls 1, 3, 5, 7 dial the number of the call before them, while it is still up.
    let Some(rec) = record(&campaign("127.0.39", Some("X-Call-ID"), 2), dir.path()) else {
        return;
    };
    let s = linked(&rec, &legs_options(None, Some("X-Call-ID")));
    assert_eq!(
        (s.pairs_right, s.pairs_missed, s.direct_linked),
        (8, 0, 0),
        "{s:?}"
    );
    let by_header = &s.by_rule["header:X-Call-ID"];
    assert_eq!(
        (by_header.linked, by_header.right, by_header.wrong),
        (8, 8, 0),
        "{s:?}"
    );
    assert_eq!(by_header.confidence_min, Some(1.0));
    // Looking at another header, only the B2BUA rule is left: it may miss a pair whose number
    // another call shares, but it never links a wrong one.
    let s = linked(&rec, &legs_options(None, Some("X-Other")));
    assert_eq!(s.direct_linked, 0, "{s:?}");
    assert!(s.by_rule.values().all(|f| f.wrong == 0), "{s:?}");
    assert!(
        s.pairs_right >= 4,
        "the calls with a number of their own link: {s:?}"
    );
}

/// A phone call with media through the PBX to a trunk that echoes it, the phone's LAN losing
/// every tenth packet, archived and stored by `tandem capture`. Returns the data directory's
/// capture output and the phone leg's Call-ID.
fn linked_call_with_loss(dir: &Path) -> Option<(Vec<Value>, String)> {
    if !sipp::available() || !on_path("dumpcap") {
        test_env::skip("sipp or dumpcap is not installed (Debian: sip-tester, wireshark-common)");
        return None;
    }
    let capture = match Dumpcap::start(dir, "127.0.40") {
        Ok(c) => c,
        Err(e) => {
            test_env::skip(&format!("cannot capture on lo here: {e}"));
            return None;
        }
    };
    let trunk: std::net::SocketAddr = "127.0.40.31:5060".parse().unwrap();
    let mut config = PbxConfig::loopback(trunk);
    config.sip = "127.0.40.20:5060".parse().unwrap();
    let pbx = Pbx::start(config).unwrap();
    // A media port nobody holds (a wildcard socket of another program may hold 6000).
    let media_port = std::net::UdpSocket::bind("127.0.40.31:0")
        .and_then(|s| s.local_addr())
        .unwrap()
        .port()
        .to_string();
    let args: Vec<String> = [
        "-sn",
        "uas",
        "-i",
        "127.0.40.31",
        "-p",
        "5060",
        "-mp",
        media_port.as_str(),
        "-rtp_echo",
        "-m",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut echo = Sipp::spawn(dir, "echo", &args).unwrap();
    assert!(
        sipp::wait_bound(trunk, Duration::from_secs(10)),
        "SIPp on {trunk}"
    );
    let placed = PhoneCall {
        pbx: pbx.sip_addr(),
        ip: "127.0.40.10".parse().unwrap(),
        caller: "201".into(),
        dialled: "9017155501".into(),
        packets: 150,
        lose_every: 10,
    }
    .place()
    .unwrap();
    assert_eq!(echo.wait(Duration::from_secs(5)), Some(0));
    std::thread::sleep(Duration::from_millis(200));
    let pcap = capture.stop().unwrap();
    drop(pbx);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let out = Command::new(EXE)
        .args(["capture", "--json", "--archive-store", "full", "--archive"])
        .arg(data.join("archive"))
        .arg("--cdr-db")
        .arg(data.join("cdr.sqlite3"))
        .args(legs_options(None, None))
        .arg("--read")
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Some((lines, placed.call_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_linked_call_as_one_with_the_leg_that_lost_packets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let made = tokio::task::spawn_blocking(move || linked_call_with_loss(&path))
        .await
        .unwrap();
    let Some((lines, phone_call_id)) = made else {
        return;
    };
    let calls: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "call").collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let phone = calls
        .iter()
        .find(|c| c["call_id"] == phone_call_id.as_str())
        .unwrap();
    let trunk = calls
        .iter()
        .find(|c| c["call_id"] != phone_call_id.as_str())
        .unwrap();
    assert_eq!(trunk["call_group"], phone["call_group"]);
    assert_eq!(trunk["linked_by"], "b2bua");
    let (phone_uid, trunk_uid) = (
        phone["uid"].as_str().unwrap().to_owned(),
        trunk["uid"].as_str().unwrap().to_owned(),
    );

    let data = dir.path().join("data");
    add_user(Path::new(EXE), &data, "ops", "admin", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let cookie_header = login_cookie(server.web, "ops", PASSWORD).unwrap();
    // Over HTTP: the trunk leg's page is the whole call.
    let path = format!("/api/calls/{}", urlencode(&trunk_uid));
    let (status, _, body) =
        http(server.web, "GET", &path, &[("Cookie", &cookie_header)], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    let legs: Vec<&str> = view["legs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["uid"].as_str().unwrap())
        .collect();
    assert_eq!(legs, [phone_uid.as_str(), trunk_uid.as_str()]);
    // One ladder over both legs' packets: the phone, the PBX and the trunk as its columns, both
    // Call-IDs on it, in capture order.
    let hosts: Vec<&str> = view["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    assert!(
        hosts.contains(&"127.0.40.20:5060") && hosts.contains(&"127.0.40.31:5060"),
        "{hosts:?}"
    );
    let ladder = view["ladder"].as_array().unwrap();
    let ids: std::collections::BTreeSet<&str> = ladder
        .iter()
        .map(|m| m["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(
        ladder
            .windows(2)
            .all(|w| w[0]["ts_us"].as_i64() <= w[1]["ts_us"].as_i64())
    );
    // Every leg's streams, each naming its leg; the phone's leg lost packets, the trunk's none.
    let streams = view["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 4, "two per leg");
    for leg in [&phone_uid, &trunk_uid] {
        assert_eq!(
            streams.iter().filter(|s| s["leg"] == leg.as_str()).count(),
            2,
            "{leg}"
        );
    }
    let lost = |leg: &str| -> i64 {
        streams
            .iter()
            .filter(|s| s["leg"] == leg)
            .map(|s| s["figures"]["lost"].as_i64().unwrap())
            .sum()
    };
    assert!(
        lost(&phone_uid) >= 10,
        "the phone's LAN lost every tenth packet"
    );
    assert_eq!(
        lost(&trunk_uid),
        0,
        "the PBX renumbers: the trunk leg has no gap"
    );
    assert_eq!(view["worst_leg"], phone_uid.as_str());
    // The pcap downloaded is the whole call's.
    let (status, _, _) = http(
        server.web,
        "GET",
        &format!("{path}/pcap"),
        &[("Cookie", &cookie_header)],
        "",
    )
    .unwrap();
    assert_eq!(status, 200);
    // The list marks the trunk leg and can show calls rather than legs.
    let (_, _, list) = http(
        server.web,
        "GET",
        "/api/calls?from=2000-01-01T00:00:00Z&legs=calls",
        &[("Cookie", &cookie_header)],
        "",
    )
    .unwrap();
    let list: Value = serde_json::from_str(&list).unwrap();
    let uids: Vec<&str> = list["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["uid"].as_str().unwrap())
        .collect();
    assert_eq!(
        uids,
        [phone_uid.as_str()],
        "one call, shown as its first leg"
    );

    // In Chromium: the call page draws both legs on one ladder and marks the lossy leg.
    if bench::browser::tools().is_none() {
        test_env::skip(
            "chromium and chromedriver are not installed: the page itself is not checked",
        );
        return;
    }
    let b = Browser::launch(1366, 900).await.unwrap();
    b.login(&server.base(), "ops", PASSWORD).await.unwrap();
    b.client
        .goto(&format!("{}calls/{}", server.base(), urlencode(&trunk_uid)))
        .await
        .unwrap();
    let ready = wait_ready(&b).await;
    assert_eq!(ready, "1");
    let shown = b
        .client
        .execute(
            "return {legs: [...document.querySelectorAll('#legs tbody tr')].map(r => r.dataset.leg),
                     worst: document.querySelector('#legs tr.worst')?.dataset.leg || '',
                     tagged: [...new Set([...document.querySelectorAll('#ladder g.msg')].map(g => g.dataset.leg))],
                     columns: document.querySelectorAll('#ladder text.host').length,
                     streamLegs: [...document.querySelectorAll('#streams tbody td.leg')].map(td => td.textContent),
                     title: document.getElementById('call-title').textContent};",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(shown["legs"], serde_json::json!(["A", "B"]), "{shown}");
    assert_eq!(shown["worst"], "A", "{shown}");
    assert_eq!(shown["columns"], 3, "{shown}");
    let mut tagged: Vec<&str> = shown["tagged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    tagged.sort();
    assert_eq!(tagged, ["A", "B"], "{shown}");
    assert!(
        shown["title"].as_str().unwrap().contains("(2 legs)"),
        "{shown}"
    );
    // With TANDEM_SCREENSHOT_DIR set, the page as docs/linked-call.png shows it.
    if let Some(out) = std::env::var_os("TANDEM_SCREENSHOT_DIR") {
        // The legs' table and the ladder under it, the ladder's messages of both legs in view.
        let scroll = "document.getElementById('legs-panel').scrollIntoView(); return 0;";
        b.client.execute(scroll, vec![]).await.unwrap();
        b.screenshot(&Path::new(&out).join("linked-call.png"))
            .await
            .unwrap();
    }
    b.close().await;
}

async fn wait_ready(b: &Browser) -> String {
    for _ in 0..300 {
        let v = b
            .client
            .execute(
                "return document.getElementById('call-page')?.dataset.ready || '';",
                vec![],
            )
            .await
            .unwrap();
        if let Some(s) = v.as_str().filter(|s| !s.is_empty()) {
            return s.to_string();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the call page did not finish loading");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
