//! REGISTER chains as a phone sends them: challenges and retries, refreshes challenged again,
//! and several lines of one phone sharing a Call-ID.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use monitor::dialog::Registration;
use monitor::synth::PcapBuilder;
use monitor::{Monitor, MonitorConfig};

const PHONE: &str = "10.0.0.5:5060";
const REGISTRAR: &str = "10.0.0.1:5060";
const CALL_ID: &str = "lines-1@10.0.0.5";
const MS: i64 = 1_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A REGISTER of `user` with `contact` (`*` removes every binding) asking for `expires` s.
fn register(user: &str, cseq: u32, contact: &str, expires: u32) -> String {
    let contact = if contact == "*" {
        "*".to_string()
    } else {
        format!("<{contact}>")
    };
    format!(
        "REGISTER sip:pbx.example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {PHONE};branch=z9hG4bK{user}{cseq}\r\n\
         From: <sip:{user}@pbx.example.com>;tag=f{user}\r\n\
         To: <sip:{user}@pbx.example.com>\r\n\
         Call-ID: {CALL_ID}\r\nCSeq: {cseq} REGISTER\r\n\
         Contact: {contact}\r\nExpires: {expires}\r\n\
         User-Agent: Desk phone 2.1\r\nContent-Length: 0\r\n\r\n"
    )
}

fn response(user: &str, cseq: u32, status: &str, extra: &str) -> String {
    format!(
        "SIP/2.0 {status}\r\n\
         Via: SIP/2.0/UDP {PHONE};branch=z9hG4bK{user}{cseq}\r\n\
         From: <sip:{user}@pbx.example.com>;tag=f{user}\r\n\
         To: <sip:{user}@pbx.example.com>;tag=r{cseq}\r\n\
         Call-ID: {CALL_ID}\r\nCSeq: {cseq} REGISTER\r\n\
         {extra}Content-Length: 0\r\n\r\n"
    )
}

const CHALLENGE: &str = "401 Unauthorized";
const OK: &str = "200 OK";

/// The exchanges of a capture: (from the phone?, message), one every 100 ms.
fn write(path: &Path, messages: &[(bool, String)]) {
    let mut b = PcapBuilder::create(path).unwrap();
    let mut t = 1_700_000_000_000_000_000;
    for (from_phone, text) in messages {
        let (src, dst) = if *from_phone {
            (addr(PHONE), addr(REGISTRAR))
        } else {
            (addr(REGISTRAR), addr(PHONE))
        };
        b.udp(t, src, dst, text.as_bytes());
        t += 100 * MS;
    }
    b.finish().unwrap();
}

fn chains(path: &Path, workers: usize) -> Vec<Registration> {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).unwrap();
    m.finish().registrations
}

#[test]
fn a_registered_chain_stays_registered_when_a_refresh_is_challenged_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refresh.pcap");
    let contact = "sip:1001@10.0.0.5:5060";
    write(
        &path,
        &[
            (true, register("1001", 1, contact, 3600)),
            (false, response("1001", 1, CHALLENGE, "")),
            (true, register("1001", 2, contact, 3600)),
            (false, response("1001", 2, "100 Trying", "")),
            (
                false,
                response(
                    "1001",
                    2,
                    OK,
                    "Contact: <sip:1001@10.0.0.5:5060>;expires=1800\r\n",
                ),
            ),
            // The refresh is challenged, and the phone has not answered it yet.
            (true, register("1001", 3, contact, 3600)),
            (false, response("1001", 3, CHALLENGE, "")),
        ],
    );
    for workers in [1, 2] {
        let r = chains(&path, workers);
        assert_eq!(r.len(), 1, "{workers} worker(s): {r:?}");
        let r = &r[0];
        assert_eq!(
            (&*r.user, r.outcome(), r.last_code, r.expires_s),
            ("1001", "registered", 200, Some(1800)),
            "{workers} worker(s)"
        );
        assert_eq!((r.requests, r.challenges), (3, 2));
    }
}

#[test]
fn another_to_user_in_the_same_call_id_starts_its_own_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lines.pcap");
    let second = "sip:1002@10.0.0.5:5060;line=2";
    write(
        &path,
        &[
            // Line 1 is removed (every binding), with a challenge on the way: unregistered...
            (true, register("1001", 10, "*", 0)),
            (false, response("1001", 10, CHALLENGE, "")),
            (true, register("1001", 11, "*", 0)),
            (false, response("1001", 11, OK, "")),
            // ...then line 2 registers from the same phone, in the same Call-ID.
            (true, register("1002", 12, second, 600)),
            (false, response("1002", 12, CHALLENGE, "")),
            (true, register("1002", 13, second, 600)),
            (false, response("1002", 13, "403 Forbidden", "")),
        ],
    );
    for workers in [1, 2] {
        let r = chains(&path, workers);
        let got: Vec<_> = r
            .iter()
            .map(|r| {
                (
                    &*r.user,
                    &*r.contact,
                    r.requests,
                    r.outcome(),
                    r.last_code,
                    r.expires_s,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("1001", "*", 2, "unregistered", 200, Some(0)),
                ("1002", second, 2, "failed", 403, None),
            ],
            "{workers} worker(s)"
        );
        assert!(r.iter().all(|r| &*r.call_id == CALL_ID));
    }
}

/// aaa.pcap: one phone registers three lines, all in Call-ID 578222729-…, then again in a
/// second Call-ID. Read off `tshark -Y sip.CSeq.method==REGISTER`, frame by frame.
#[test]
fn the_chains_of_a_real_phone_checked_by_hand() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    let r = chains(&shared.join("captures/aaa.pcap"), 1);
    let got: Vec<_> = r
        .iter()
        .map(|r| {
            (
                &*r.user,
                r.contact.split(';').next().unwrap(),
                r.requests,
                r.outcome(),
                r.last_code,
            )
        })
        .collect();
    let first = "sip:voi18063@192.168.1.2:5060";
    let second = "sip:voi18062@192.168.1.2:5060";
    let third = "sip:35104723@192.168.1.2:5060";
    assert_eq!(
        got,
        [
            // Frames 19-32: 401, then 100 and 403.
            ("voi18063", first, 2, "failed", 403),
            // 107-122: challenged twice, no answer but challenges.
            ("voi18063", first, 2, "challenged", 401),
            // 143-155, then 169-182 (a minute and more later: a new chain) ending in 200.
            ("voi18062", second, 2, "challenged", 401),
            ("voi18062", second, 2, "registered", 200),
            // 421-432: the line is removed (expires 0), challenged twice...
            ("voi18062", second, 2, "challenged", 401),
            // ...and 441-454 register 35104723 in the same Call-ID: a chain of its own.
            ("35104723", third, 2, "challenged", 401),
            // The second Call-ID: 401, 200, then a refresh challenged twice: registered.
            ("35104723", third, 4, "registered", 200),
            // 639-650, after more than a minute: 401, 200.
            ("35104723", third, 2, "registered", 200),
        ]
    );
    assert_eq!(r[4].requested_expires_s, Some(0));
    assert_eq!((r[6].challenges, r[6].expires_s), (3, Some(1200)));
    // What each chain's failure is, and why: frame 32's "403 Wrong password" after the
    // challenge of frame 20; the others refused once (frames 122, 155, 432, 454: "401 nonce
    // has changed", stale=false, to credentials) or not answered, which is no wrong password
    // (the same phone registers with the same credentials minutes later).
    let failures: Vec<_> = r
        .iter()
        .map(|r| (r.failure().map(|f| f.as_str()), r.failure_reason()))
        .collect();
    let once = "401 nonce has changed: credentials refused once";
    assert_eq!(
        failures,
        [
            (
                Some("wrong-password"),
                "403 Wrong password after a challenge".into()
            ),
            (Some("challenged"), once.into()),
            (Some("challenged"), once.into()),
            (None, String::new()),
            (Some("challenged"), once.into()),
            (Some("challenged"), once.into()),
            (None, String::new()),
            (None, String::new()),
        ]
    );
}

/// ipip0.pcap (raw IP): user 1154 answers the challenge twice with credentials, and is
/// challenged again each time: a wrong password. tshark reads the same three transactions:
/// each a REGISTER, the second and third with an Authorization header, each answered 401.
#[test]
fn credentials_challenged_again_and_again_are_a_wrong_password() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    let path = shared.join("captures/ipip0.pcap");
    let r = chains(&path, 1);
    assert_eq!(r.len(), 1, "{r:?}");
    let r = &r[0];
    assert_eq!(
        (&*r.user, r.requests, r.challenges, r.outcome()),
        ("1154", 3, 3, "challenged")
    );
    assert_eq!(
        (r.failure().map(|f| f.as_str()), r.failure_reason().as_str()),
        (
            Some("wrong-password"),
            "401 Unauthorized: credentials refused 2 times"
        )
    );
    if let Some(lines) = common::tshark_fields(
        &path,
        "sip.CSeq.method == \"REGISTER\"",
        &["sip.CSeq.seq", "sip.Status-Code", "sip.Authorization"],
    ) {
        let got: Vec<(String, String, bool)> = lines
            .iter()
            .map(|l| (l[0].clone(), l[1].clone(), !l[2].is_empty()))
            .collect();
        let want: Vec<(String, String, bool)> = [
            ("1", "", false),
            ("1", "401", false),
            ("2", "", true),
            ("2", "401", false),
            ("3", "", true),
            ("3", "401", false),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
        .collect();
        assert_eq!(got, want, "tshark's reading of {}", path.display());
    }
}
