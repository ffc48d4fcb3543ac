//! Who called, as a CDR stores it, when the From header's display name pretends to be another
//! caller: `tandem capture --read` and `tandem cdr show` on a capture of such calls, compared
//! with what tshark reads from the same packets (`sip.from.user`, `sip.to.user`).

use monitor::synth::PcapBuilder;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// Each call: (Call-ID, From value, To value, the caller and called a reader must find).
const CALLS: [(&str, &str, &str, &str, &str); 4] = [
    (
        "spoof-quoted@pbx",
        "\"<sip:5551234@bank.example>\" <sip:1001@pbx.example>;tag=a1",
        "<sip:2000@pbx.example>",
        "1001",
        "2000",
    ),
    (
        "spoof-escaped@pbx",
        r#""Bank \"<sip:5551234@bank.example>\"" <sip:1002@pbx.example>;tag=a2"#,
        "\"sip:9999@x\" <sip:2001@pbx.example>",
        "1002",
        "2001",
    ),
    (
        "spoof-param@pbx",
        "sip:1003@pbx.example;tag=a3;x=\"<sip:5551234@bank.example>\"",
        "sip:2002@pbx.example",
        "1003",
        "2002",
    ),
    (
        "plain-name@pbx",
        "Front Desk <sip:1004@pbx.example;user=phone>;tag=a4",
        "<sip:+15551230000;npdi@pbx.example>",
        "1004",
        "+15551230000;npdi",
    ),
];

/// One answered call per entry of [`CALLS`], a second apart.
fn write_capture(path: &Path) {
    let phone: SocketAddr = "10.0.0.11:5060".parse().unwrap();
    let pbx: SocketAddr = "10.0.0.1:5060".parse().unwrap();
    let mut pcap = PcapBuilder::create(path).unwrap();
    let mut t_ns = 1_790_000_000_000_000_000i64;
    for (call_id, from, to, _, _) in CALLS {
        let headers = |first: &str, cseq: &str, to_tag: &str| {
            format!(
                "{first}\r\nVia: SIP/2.0/UDP {phone};branch=z9hG4bK{}\r\nFrom: {from}\r\n\
                 To: {to}{to_tag}\r\nCall-ID: {call_id}\r\nCSeq: {cseq}\r\n\
                 Contact: <sip:x@{phone}>\r\nContent-Length: 0\r\n\r\n",
                call_id.len() + cseq.len()
            )
        };
        let steps = [
            (
                phone,
                pbx,
                headers("INVITE sip:2000@pbx.example SIP/2.0", "1 INVITE", ""),
            ),
            (pbx, phone, headers("SIP/2.0 200 OK", "1 INVITE", ";tag=b")),
            (
                phone,
                pbx,
                headers("ACK sip:2000@pbx.example SIP/2.0", "1 ACK", ";tag=b"),
            ),
            (
                phone,
                pbx,
                headers("BYE sip:2000@pbx.example SIP/2.0", "2 BYE", ";tag=b"),
            ),
            (pbx, phone, headers("SIP/2.0 200 OK", "2 BYE", ";tag=b")),
        ];
        for (src, dst, text) in steps {
            pcap.udp(t_ns, src, dst, text.as_bytes());
            t_ns += 200_000_000;
        }
        t_ns += 1_000_000_000;
    }
    pcap.finish().unwrap();
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn tandem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem"));
    c.env("TANDEM_LOG", "warn");
    c
}

/// `caller       1001 (10.0.0.11:5060)` → `1001`.
fn shown<'a>(text: &'a str, field: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|l| l.trim().rsplit_once(" ("))
        .map(|(v, _)| v)
        .unwrap_or_else(|| panic!("no {field} in:\n{text}"))
}

#[test]
fn a_display_name_holding_a_uri_is_not_the_caller_in_the_cdr_nor_for_tshark() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("spoof.pcap");
    write_capture(&pcap);
    let db = dir.path().join("cdr.sqlite3");
    run(tandem()
        .args(["capture", "--read"])
        .arg(&pcap)
        .arg("--cdr-db")
        .arg(&db));
    for (call_id, from, _, caller, called) in CALLS {
        let text = run(tandem()
            .args(["cdr", "show", call_id])
            .arg("--cdr-db")
            .arg(&db));
        assert_eq!(shown(&text, "caller"), caller, "From: {from}\n{text}");
        assert_eq!(shown(&text, "called"), called, "{text}");
    }

    // tshark reads the same users from the same INVITEs.
    if Command::new("tshark").arg("-v").output().is_err() {
        test_env::skip("`tshark` is not installed (Debian package `tshark`)");
        return;
    }
    let fields = run(Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "sip.Method == \"INVITE\"", "-T", "fields"])
        .args([
            "-e",
            "sip.Call-ID",
            "-e",
            "sip.from.user",
            "-e",
            "sip.to.user",
        ]));
    let read: Vec<Vec<&str>> = fields.lines().map(|l| l.split('\t').collect()).collect();
    let expected: Vec<Vec<&str>> = CALLS
        .iter()
        .map(|(id, _, _, caller, called)| vec![*id, *caller, *called])
        .collect();
    assert_eq!(read, expected, "tshark:\n{fields}");
}
