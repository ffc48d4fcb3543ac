//! `tandem capture` and `tandem cdr` as a user runs them, on synthetic captures.

mod common;

use std::process::Command;

use monitor::synth::{SynthConfig, generate};

fn tandem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem"));
    c.env("TANDEM_LOG", "warn");
    c
}

/// Runs `cmd`, which must succeed; its stdout.
fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn capture_json_then_cdr_list_and_show() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("calls.pcap");
    let cfg = SynthConfig {
        calls: 10,
        loss_pct: 2.0,
        ..SynthConfig::default()
    };
    let truth = generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let out = tandem()
        .arg("capture")
        .arg("--read")
        .arg(&pcap)
        .arg("--json")
        .arg("--cdr-db")
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<_> = lines.iter().filter(|v| v["kind"] == "call").collect();
    let streams: Vec<_> = lines.iter().filter(|v| v["kind"] == "rtp_stream").collect();
    assert_eq!(calls.len(), truth.calls.len());
    assert_eq!(streams.len(), 2 * 8, "8 answered calls, 2 streams each");
    for c in &calls {
        for key in [
            "call_id",
            "caller",
            "called",
            "start",
            "end",
            "last_response",
            "streams",
        ] {
            assert!(c.get(key).is_some(), "call without {key}: {c}");
        }
    }
    let busy = calls
        .iter()
        .find(|c| c["call_id"] == "synth-9@tandem.test")
        .unwrap();
    assert_eq!(busy["last_response"], 486);
    for s in &streams {
        let ssrc = s["ssrc"].as_str().unwrap();
        assert!(
            ssrc.starts_with("0x")
                && ssrc.len() == 10
                && ssrc[2..]
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
        );
        assert!(s["src"].as_str().unwrap().contains(':'));
        for key in [
            "payload",
            "packets",
            "lost",
            "min_delta_ms",
            "mean_delta_ms",
            "max_delta_ms",
            "mean_jitter_ms",
            "max_jitter_ms",
            "mos",
        ] {
            assert!(s.get(key).is_some(), "stream without {key}: {s}");
        }
        assert_eq!(s["payload"], "g711A");
    }

    let out = tandem()
        .args(["cdr", "list", "--json", "--response", "486"])
        .arg("--cdr-db")
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(text.contains("synth-9@tandem.test"));

    let out = tandem()
        .args(["cdr", "show", "synth-0@tandem.test"])
        .arg("--cdr-db")
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("hangup by    caller") && text.matches("rtp  ").count() == 2,
        "{text}"
    );

    let out = tandem()
        .args(["cdr", "show", "nope"])
        .arg("--cdr-db")
        .arg(&db)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn truncated_capture_reports_file_and_offset_and_keeps_calls() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("cut.pcap");
    let cfg = SynthConfig {
        calls: 10,
        call_interval_us: 500_000,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let bytes = std::fs::read(&pcap).unwrap();
    std::fs::write(&pcap, &bytes[..bytes.len() * 3 / 4 + 3]).unwrap();
    let out = tandem()
        .arg("capture")
        .arg("--read")
        .arg(&pcap)
        .args(["--json", "--no-store"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cut.pcap: at byte") && err.contains("truncated"),
        "{err}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout
            .lines()
            .filter(|l| l.contains("\"kind\":\"call\""))
            .count()
            >= 5,
        "{stdout}"
    );
}

/// `tandem capture --hep-listen 127.0.0.1:PORT --json --no-store` taking `packets` HEP
/// packets, with `extra` options, once it says it listens; its stderr after that line.
fn hep_capture(
    port: u16,
    packets: usize,
    extra: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["capture", "--hep-listen", &format!("127.0.0.1:{port}")])
        .args([
            "--json",
            "--no-store",
            "--hep-max-packets",
            &packets.to_string(),
        ])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("listening for HEP v3"), "{line}");
    (child, stderr)
}

/// A call sent as HEP v3 (as Kamailio's siptrace or heplify would send it) comes out as a call,
/// and a datagram that is not HEP is skipped.
#[test]
fn hep_listen_builds_calls_from_hep_packets() {
    let port = common::free_udp_port();
    let (child, mut stderr) = hep_capture(port, 7, &[]);

    let call_id = "hep-test-call@192.0.2.10";
    let mut datagrams = vec![b"not a HEP packet".to_vec()];
    datagrams.extend(common::one_call_as_hep(call_id));
    common::send_udp(port, &datagrams);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let call = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "call")
        .unwrap_or_else(|| panic!("no call in {stdout}"));
    assert_eq!(call["call_id"], call_id);
    assert_eq!(call["last_response"], 200);
    assert!(call["caller"].as_str().unwrap().contains("1001"), "{call}");
    assert!(call["called"].as_str().unwrap().contains("2002"), "{call}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(rest.contains("1 datagrams were not HEP v3"), "{rest}");
}

#[test]
fn reading_the_same_capture_twice_stores_each_call_once() {
    // A CDR's identity is (sensor, Call-ID, start time): storing it again updates it in place.
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("calls.pcap");
    let truth = generate(
        &SynthConfig {
            calls: 12,
            ..SynthConfig::default()
        },
        std::fs::File::create(&pcap).unwrap(),
    )
    .unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let count = || {
        stdout_of(
            tandem()
                .args(["cdr", "list", "--json", "--limit", "0", "--db"])
                .arg(&db),
        )
        .lines()
        .count()
    };
    // The second read with two shards: the order records reach the database differs.
    for shards in ["1", "2"] {
        stdout_of(
            tandem()
                .args(["capture", "--shards", shards, "--read"])
                .arg(&pcap)
                .arg("--cdr-db")
                .arg(&db),
        );
        assert_eq!(
            count(),
            truth.calls.len(),
            "after the read with {shards} shard(s)"
        );
    }
    let out = tandem()
        .args(["cdr", "show", "synth-0@tandem.test", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.matches("rtp  ").count(),
        2,
        "streams are replaced, not added:\n{text}"
    );
}

#[test]
fn a_failed_capture_leaves_nothing_behind_and_says_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a capture\n").unwrap();
    for (input, problem) in [
        ("missing.pcap", "No such file or directory"),
        ("notes.txt", "not a pcap or pcapng file"),
    ] {
        let out = tandem()
            .current_dir(dir.path())
            .env("RUST_BACKTRACE", "1")
            .args(["capture", "--read", input])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(input) && err.contains(problem), "{err}");
        // A user error: the message chain, no backtrace, and no talk of calls never decoded.
        assert!(
            !err.contains("backtrace") && !err.contains("calls above"),
            "{err}"
        );
        assert!(
            !dir.path().join("tandem-data").exists(),
            "a failed capture of {input} created the data directory"
        );
    }
    // A source that cannot be opened: the same.
    for (args, problem) in [
        (
            ["capture", "--hep-listen", "192.0.2.1:9060"],
            "Cannot assign requested address",
        ),
        (["capture", "--interface", "nosuchif0"], "no such interface"),
    ] {
        let out = tandem()
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(args[2]), "{err}");
        assert_eq!(err.matches(problem).count(), 1, "said once:\n{err}");
        assert!(!dir.path().join("tandem-data").exists(), "{args:?}");
    }
    // No source at all: the message names the three kinds.
    let out = tandem().arg("capture").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("--read")
            && err.contains("--interface")
            && err.contains("--hep-listen"),
        "{err}"
    );
}

#[test]
fn without_json_a_person_gets_tables_cut_to_a_screenful_and_where_the_cdrs_went() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("calls.pcap");
    let cfg = SynthConfig {
        calls: 25,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let text = stdout_of(
        tandem()
            .current_dir(dir.path())
            .args(["capture", "--read"])
            .arg(&pcap),
    );
    for heading in [
        "caller",
        "called",
        "start (UTC)",
        "duration",
        "last response",
        "worst MOS",
    ] {
        assert!(text.contains(heading), "no {heading:?} column:\n{text}");
    }
    for heading in ["RTP stream", "packets", "lost", "jitter ms", "MOS"] {
        assert!(text.contains(heading), "no {heading:?} column:\n{text}");
    }
    assert!(text.contains("… and 5 more calls"), "{text}");
    assert!(text.contains("25 calls ("), "{text}");
    assert!(
        text.contains("CDRs: ") && text.contains("tandem-data/cdr.sqlite3"),
        "{text}"
    );

    // One call: singular words, and --no-store said.
    let one = dir.path().join("one.pcap");
    let cfg = SynthConfig {
        calls: 1,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&one).unwrap()).unwrap();
    let text = stdout_of(tandem().args(["capture", "--no-store", "--read"]).arg(&one));
    assert!(
        text.contains(": 1 call (1 answered), 2 RTP streams"),
        "{text}"
    );
    assert!(text.contains("CDRs not stored (--no-store)"), "{text}");

    // `cdr list` has a header row.
    let list = stdout_of(
        tandem()
            .args(["cdr", "list", "--db"])
            .arg(dir.path().join("tandem-data/cdr.sqlite3")),
    );
    assert!(
        list.lines().next().unwrap().starts_with("start (UTC)"),
        "{list}"
    );
    assert_eq!(list.lines().count(), 1 + 25, "{list}");
}

#[test]
fn a_reader_that_goes_away_ends_the_capture_quietly() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("calls.pcap");
    let cfg = SynthConfig {
        calls: 1_500,
        call_duration_ms: 200,
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    // `tandem capture --json ... | head -1`: far more output than a pipe holds.
    let db = dir.path().join("cdr.sqlite3");
    let mut child = tandem()
        .args(["capture", "--json", "--read"])
        .arg(&pcap)
        .arg("--cdr-db")
        .arg(&db)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with('{'), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Ended as `cat` ends, with nothing to say about it.
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe") && !err.contains("Error"),
        "{:?}: {err}",
        out.status
    );
    // What the CDR writer had accepted was stored before the process ended.
    let stored = stdout_of(
        tandem()
            .args(["cdr", "list", "--json", "--limit", "0", "--db"])
            .arg(&db),
    );
    assert!(stored.lines().count() > 0, "no CDR stored");
}

/// Every kind of call through `tandem capture --json` and into the CDR database: a fax with its
/// pages and T.30 frames, a digit, SRTP, video and a move to new ports, as a user reads them.
#[test]
fn every_kind_of_call_in_json_and_cdrs() {
    use monitor::synth::CallKind;
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("kinds.pcap");
    let cfg = SynthConfig {
        calls: 6,
        failures: false,
        kinds: CallKind::ALL.to_vec(),
        ..SynthConfig::default()
    };
    let truth = generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let text = stdout_of(
        tandem()
            .arg("capture")
            .arg("--read")
            .arg(&pcap)
            .arg("--json")
            .arg("--cdr-db")
            .arg(&db),
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let call = |kind: CallKind| {
        let t = truth.calls.iter().find(|c| c.kind == kind).unwrap();
        let c = lines
            .iter()
            .find(|v| v["kind"] == "call" && v["call_id"] == t.call_id.as_str())
            .unwrap();
        (t, c)
    };
    let (t, c) = call(CallKind::Fax);
    assert_eq!(c["fax"], true);
    let fax = &c["fax_session"];
    let f = t.fax.as_ref().unwrap();
    assert_eq!(fax["pages"], f.pages);
    assert_eq!(fax["result"], "completed");
    assert_eq!(fax["modulation"], "v17-14400");
    let flows: Vec<_> = lines
        .iter()
        .filter(|v| v["kind"] == "t38_stream" && v["call_id"] == t.call_id.as_str())
        .collect();
    assert_eq!(flows.len(), 2);
    let t30: Vec<&str> = flows
        .iter()
        .flat_map(|f| f["t30"].as_array().unwrap())
        .map(|v| v.as_str().unwrap())
        .collect();
    for frame in ["DIS", "DCS", "CFR", "EOP", "MCF", "DCN"] {
        assert!(t30.contains(&frame), "{frame} in {t30:?}");
    }
    let (t, c) = call(CallKind::Dtmf);
    let digits: Vec<&str> = c["dtmf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["digit"].as_str().unwrap())
        .collect();
    assert_eq!(digits.concat(), t.digits);
    assert_eq!(c["dtmf"][0]["via"], "rfc4733");
    let (_, c) = call(CallKind::Srtp);
    assert_eq!(
        (c["encrypted"].clone(), c["video"].clone()),
        (true.into(), false.into())
    );
    let (t, c) = call(CallKind::Video);
    assert_eq!(c["video"], true);
    let video = lines
        .iter()
        .find(|v| {
            v["kind"] == "rtp_stream" && v["call_id"] == t.call_id.as_str() && v["media"] == "video"
        })
        .unwrap();
    assert_eq!(
        (video["payload"].as_str(), video["mos"].is_null()),
        (Some("H264"), true)
    );
    assert_eq!(video["payload_types"], serde_json::json!([96]));
    let (t, _) = call(CallKind::HoldResume);
    let moved = lines
        .iter()
        .filter(|v| v["kind"] == "rtp_stream" && v["call_id"] == t.call_id.as_str())
        .count();
    assert_eq!(moved, 4, "two streams before the move, two after");
    // The CDRs hold the digits and the fax's outcome.
    let cdr_show = |call_id: &str| {
        stdout_of(
            tandem()
                .args(["cdr", "show", call_id])
                .arg("--cdr-db")
                .arg(&db),
        )
    };
    let (t, _) = call(CallKind::Dtmf);
    let shown = cdr_show(&t.call_id);
    assert!(
        shown.contains(&format!("digits       {}", t.digits)),
        "{shown}"
    );
    let (t, _) = call(CallKind::Fax);
    let shown = cdr_show(&t.call_id);
    assert!(
        shown.contains("fax          completed, 1 page(s)"),
        "{shown}"
    );
    assert!(shown.contains("t30 DIS,"), "{shown}");
}

/// An SRTP call whose RTP was not captured (signalling only) is `encrypted` from its SDP, in
/// the JSON and in its CDR; a fax call says T.38 was offered.
#[test]
fn what_the_sdp_said_is_on_the_call_without_its_media() {
    use monitor::synth::CallKind;
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("signalling.pcap");
    let cfg = SynthConfig {
        calls: 2,
        rtp: false,
        failures: false,
        kinds: vec![CallKind::Srtp, CallKind::Fax],
        ..SynthConfig::default()
    };
    let truth = generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let text = stdout_of(
        tandem()
            .args(["capture", "--json", "--read"])
            .arg(&pcap)
            .arg("--cdr-db")
            .arg(&db),
    );
    let calls: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "call")
        .collect();
    assert_eq!(calls.len(), 2);
    for (t, c) in truth.calls.iter().zip(&calls) {
        let srtp = t.kind == CallKind::Srtp;
        let flags = |v: &serde_json::Value| {
            (
                v["encrypted"].as_bool(),
                v["t38_offered"].as_bool(),
                v["fax"].as_bool(),
            )
        };
        assert_eq!(c["call_id"], t.call_id.as_str());
        assert!(c["streams"].as_array().unwrap().is_empty(), "{c}");
        // No UDPTL was captured either: T.38 offered and accepted, but no fax seen.
        assert_eq!(flags(c), (Some(srtp), Some(!srtp), Some(false)), "{c}");
        let shown = stdout_of(
            tandem()
                .args(["cdr", "show", "--json", &t.call_id])
                .arg("--cdr-db")
                .arg(&db),
        );
        let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(
            (
                shown["call"]["encrypted"].as_bool(),
                shown["call"]["t38_offered"].as_bool()
            ),
            (Some(srtp), Some(!srtp)),
            "{shown}"
        );
    }
}

/// What the decoder does not follow is named on the summary, not dropped without a word; a
/// call inside ERSPAN is read as a bare one.
#[test]
fn the_summary_names_tunnels_not_followed() {
    use monitor::gre::build as gre;
    use monitor::synth::PcapBuilder;
    use monitor::synth::packet::{ethernet, ipv4, ipv4_udp};

    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("tunnels.pcap");
    let outer = |g: &[u8]| {
        let ip = ipv4(
            "192.0.2.1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
            47,
            g,
        );
        ethernet(0x0800, &ip)
    };
    let options = b"OPTIONS sip:pbx SIP/2.0\r\nCall-ID: o@x\r\nCSeq: 1 OPTIONS\r\n\r\n";
    let sip = ipv4_udp(
        "10.0.0.1:5060".parse().unwrap(),
        "10.0.0.2:5060".parse().unwrap(),
        options,
    );
    let mut b = PcapBuilder::create(&pcap).unwrap();
    let mut pptp = gre::gre(0x880b, Some(1), None, b"\xff\x03\x00\x21");
    pptp[1] |= 1;
    b.frame(1_000_000_000, &outer(&pptp));
    b.frame(2_000_000_000, &outer(&gre::gre(0x8847, None, None, &sip)));
    b.frame(
        3_000_000_000,
        &outer(&gre::erspan_ii(1, 5, &ethernet(0x0800, &sip))),
    );
    b.finish().unwrap();
    let out = tandem()
        .args(["capture", "--no-store", "--read"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 SIP message"), "{text}");
    assert!(
        text.contains(
            "not followed: GRE packets of version 1 (PPTP) or above: 1; \
             GRE packets of a protocol other than IP, Ethernet and ERSPAN: 1"
        ),
        "{text}"
    );
}

/// The calls of `stdout` (JSON lines of `capture`, or of `cdr list` without a kind) by
/// Call-ID.
fn json_calls(stdout: &str) -> std::collections::HashMap<String, serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "call" || v.get("kind").is_none())
        .map(|v| (v["call_id"].as_str().unwrap().to_string(), v))
        .collect()
}

/// Two-leg calls through a PBX, read from a file: each B leg is linked to its A leg by the
/// B2BUA rule (after the prefix rule for the outside-line 9), in the JSON and in the CDRs, and
/// `--no-legs` links nothing.
#[test]
fn b2bua_legs_are_linked_in_json_and_cdrs() {
    use monitor::synth::b2bua::{B2buaConfig, b2bua_calls};
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("legs.pcap");
    let (packets, pairs) = b2bua_calls(&B2buaConfig {
        calls: 4,
        ..B2buaConfig::default()
    });
    let mut w = monitor::synth::PcapBuilder::create(&pcap).unwrap();
    for p in &packets {
        w.udp(p.ts_ns, p.src, p.dst, p.payload.as_bytes());
    }
    w.finish().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let out = stdout_of(
        tandem()
            .args(["capture", "--json", "--legs-prefix-rule", "9=", "--read"])
            .arg(&pcap)
            .arg("--cdr-db")
            .arg(&db),
    );
    let calls = json_calls(&out);
    for p in &pairs {
        let (a, b) = (&calls[&p.a_call_id], &calls[&p.b_call_id]);
        assert_eq!(
            a["uid"],
            format!("local|{}|{}", p.a_call_id, p.a_start_ns / 1000)
        );
        assert_eq!(a["call_group"], a["uid"], "{a}");
        assert_eq!(a["linked_by"], serde_json::Value::Null);
        assert_eq!(b["call_group"], a["uid"], "{b}");
        assert_eq!(b["linked_by"], "b2bua");
        let confidence = b["link_confidence"].as_f64().unwrap();
        assert!(confidence > 0.5 && confidence < 1.0, "{b}");
    }
    let listed = stdout_of(
        tandem()
            .args(["cdr", "list", "--json", "--cdr-db"])
            .arg(&db),
    );
    let stored = json_calls(&listed);
    assert_eq!(stored.len(), 8);
    for p in &pairs {
        assert_eq!(
            stored[&p.b_call_id]["call_group"],
            stored[&p.a_call_id]["call_group"]
        );
        assert_eq!(stored[&p.b_call_id]["linked_by"], "b2bua");
    }
    let out = stdout_of(
        tandem()
            .args(["capture", "--json", "--no-store", "--no-legs", "--read"])
            .arg(&pcap),
    );
    assert!(json_calls(&out).values().all(|c| c["linked_by"].is_null()));
}

/// A B leg sent as HEP with the A leg's Call-ID as its correlation id (chunk 17) is linked by
/// it, with no header and no PBX learned.
#[test]
fn hep_correlation_ids_link_legs() {
    use monitor::synth::b2bua::{B2buaConfig, b2bua_calls};

    let (packets, pairs) = b2bua_calls(&B2buaConfig {
        calls: 2,
        trunk_caller: Some("+4930555000".into()),
        ..B2buaConfig::default()
    });
    let port = common::free_udp_port();
    let (child, _stderr) = hep_capture(port, packets.len(), &["--no-legs-learn"]);
    let datagrams: Vec<Vec<u8>> = packets
        .iter()
        .map(|p| {
            let a_leg = p.b_invite_of.map(|i| pairs[i].a_call_id.as_bytes());
            hep::HepPacket {
                ip_protocol: 17,
                src_ip: p.src.ip(),
                dst_ip: p.dst.ip(),
                src_port: p.src.port(),
                dst_port: p.dst.port(),
                ts_sec: (p.ts_ns / 1_000_000_000) as u32,
                ts_usec: (p.ts_ns % 1_000_000_000 / 1000) as u32,
                protocol_type: hep::ProtocolType::SIP,
                capture_id: 2001,
                keep_alive_timer: None,
                auth_key: None,
                payload: hep::Payload::Raw(p.payload.as_bytes()),
                correlation_id: a_leg,
            }
            .to_bytes()
            .unwrap()
        })
        .collect();
    common::send_udp(port, &datagrams);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let calls = json_calls(&String::from_utf8(out.stdout).unwrap());
    for p in &pairs {
        let (a, b) = (&calls[&p.a_call_id], &calls[&p.b_call_id]);
        assert_eq!(b["linked_by"], "hep-correlation", "{b}");
        assert_eq!(b["link_confidence"], 1.0);
        assert_eq!(b["call_group"], a["uid"]);
    }
}
