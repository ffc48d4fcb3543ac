//! A capture whose clock jumps forward by years between an INVITE and its answer: the jump is a
//! step of the clock, not time that passed, and the call is followed across it. A gap of a few
//! minutes is time that passed, and closes an unanswered INVITE as before.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use monitor::dialog::{CallState, Party};
use monitor::synth::PcapBuilder;
use monitor::synth::packet::write_rtp;
use monitor::{Analysis, Monitor, MonitorConfig};

const MS: i64 = 1_000_000;
const START_NS: i64 = 1_328_589_362_000_000_000;
const YEARS_30_NS: i64 = 30 * 365 * 86_400 * 1_000_000_000;
const PACKETS: u16 = 50;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn sip(start: &str, cseq: &str, to_tag: bool, sdp_ip: Option<&str>) -> String {
    let body = sdp_ip.map_or(String::new(), |ip| {
        format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio 4000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        )
    });
    format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{}\r\n\
         From: <sip:100@10.0.0.1>;tag=a\r\nTo: <sip:200@10.0.0.2>{}\r\n\
         Call-ID: step-1@tandem.test\r\nCSeq: {cseq}\r\n{}Content-Length: {}\r\n\r\n{body}",
        cseq.replace(' ', ""),
        if to_tag { ";tag=b" } else { "" },
        if body.is_empty() {
            ""
        } else {
            "Content-Type: application/sdp\r\n"
        },
        body.len()
    )
}

/// INVITE and 100 Trying at `START_NS`, then `gap_ns` later 180, 200, ACK, a second of PCMU
/// both ways, BYE and its 200.
fn write_call(path: &Path, gap_ns: i64) {
    let (a, b) = (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"));
    let (a_media, b_media) = (addr("10.0.0.1:4000"), addr("10.0.0.2:4000"));
    let uri = "sip:200@10.0.0.2";
    let mut w = PcapBuilder::create(path).unwrap();
    let mut t = START_NS;
    let invite = sip(
        &format!("INVITE {uri} SIP/2.0"),
        "1 INVITE",
        false,
        Some("10.0.0.1"),
    );
    w.udp(t, a, b, invite.as_bytes());
    w.udp(
        t + 5 * MS,
        b,
        a,
        sip("SIP/2.0 100 Trying", "1 INVITE", false, None).as_bytes(),
    );
    t += gap_ns;
    w.udp(
        t,
        b,
        a,
        sip("SIP/2.0 180 Ringing", "1 INVITE", true, None).as_bytes(),
    );
    t += 2_000 * MS;
    let ok = sip("SIP/2.0 200 OK", "1 INVITE", true, Some("10.0.0.2"));
    w.udp(t, b, a, ok.as_bytes());
    t += 10 * MS;
    w.udp(
        t,
        a,
        b,
        sip(&format!("ACK {uri} SIP/2.0"), "1 ACK", true, None).as_bytes(),
    );
    let mut rtp = Vec::new();
    for n in 0..PACKETS {
        t += 20 * MS;
        for (dir, (src, dst)) in [(a_media, b_media), (b_media, a_media)]
            .into_iter()
            .enumerate()
        {
            rtp.clear();
            let ssrc = 0x5000 + dir as u32;
            write_rtp(&mut rtp, 0, n == 0, n, 160 * u32::from(n), ssrc, 160, 0xff);
            w.udp(t + dir as i64 * MS, src, dst, &rtp);
        }
    }
    t += 100 * MS;
    w.udp(
        t,
        a,
        b,
        sip(&format!("BYE {uri} SIP/2.0"), "2 BYE", true, None).as_bytes(),
    );
    w.udp(
        t + 10 * MS,
        b,
        a,
        sip("SIP/2.0 200 OK", "2 BYE", true, None).as_bytes(),
    );
    w.finish().unwrap();
}

fn analyse(path: &Path, workers: usize) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).unwrap();
    m.finish()
}

/// What the monitor logs while it reads `path` with one worker.
fn logged(path: &Path) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || analyse(path, 1));
    String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
}

#[test]
fn a_call_answered_across_a_step_of_decades_is_followed_to_its_bye() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step.pcap");
    write_call(&path, YEARS_30_NS);
    for workers in [1, 2] {
        let a = analyse(&path, workers);
        assert_eq!(a.counters.clock_steps, 1, "{workers} worker(s)");
        assert_eq!(a.calls.len(), 1, "{workers} worker(s): {:?}", a.calls);
        let c = &a.calls[0];
        let d = &c.dialog;
        assert_eq!(
            (d.state, d.last_code, d.hangup_by, d.sip_messages),
            (CallState::Ended, 200, Some(Party::Caller), 7),
            "{workers} worker(s)"
        );
        // The record keeps the frames' own times.
        assert_eq!(d.invite_ns, START_NS);
        assert_eq!(d.answer_ns, Some(START_NS + YEARS_30_NS + 2_000 * MS));
        let packets: Vec<u64> = c.streams.iter().map(|s| s.stream.packets).collect();
        assert_eq!(packets, [50, 50], "{workers} worker(s)");
        assert!(a.streams.is_empty());
    }
    // Logged once, with the capture times on both sides of the step.
    let log = logged(&path);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("clock jumped")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("before=2012-02-07T04:36:02.005000Z"),
        "{log}"
    );
    assert!(
        lines[0].contains("after=2042-01-30T04:36:02.000000Z"),
        "{log}"
    );
}

#[test]
fn a_gap_of_minutes_is_time_that_passed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gap.pcap");
    // Longer than call_idle_timeout_ms (5 minutes), shorter than a day.
    write_call(&path, 6 * 60_000 * MS);
    let a = analyse(&path, 1);
    assert_eq!(a.counters.clock_steps, 0);
    let d = &a.calls[0].dialog;
    assert_eq!(
        (d.state, d.last_code, d.sip_messages),
        (CallState::Calling, 100, 2)
    );
}

/// sip_ipv6_udp.pcap: six messages stamped years apart (2012 to 2092). tshark matches each
/// response to its request whatever the gap: the INVITE answered by the 200 of frame 3, the BYE
/// of frame 5 answered by frame 6. Its response times are milliseconds in 32 bits (they wrap).
#[test]
fn sip_ipv6_udp_is_one_call_as_tshark_reads_it() {
    let Some(shared) = common::shared_dir() else {
        return;
    };
    if !common::have_tshark() {
        return;
    }
    let path = shared.join("captures/sip_ipv6_udp.pcap");
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=|"])
        .args([
            "-e",
            "frame.time_epoch",
            "-e",
            "sip.Method",
            "-e",
            "sip.Status-Code",
        ])
        .args(["-e", "sip.CSeq.method", "-e", "sip.response-time"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    let ns = |r: &[&str]| {
        let (s, f) = r[0].split_once('.').unwrap();
        s.parse::<i64>().unwrap() * 1_000_000_000 + f[..9].parse::<i64>().unwrap()
    };
    let ok = rows
        .iter()
        .find(|r| r[2] == "200" && r[3] == "INVITE")
        .expect("tshark: a 200 to the INVITE");
    let bye = rows.iter().find(|r| r[1] == "BYE").expect("tshark: a BYE");
    for workers in [1, 2] {
        let a = analyse(&path, workers);
        assert_eq!(a.counters.clock_steps, 5);
        assert_eq!(a.calls.len(), 1);
        let d = &a.calls[0].dialog;
        assert_eq!(
            (&*d.caller, &*d.called, d.state, d.last_code, d.hangup_by),
            ("9876", "4321", CallState::Ended, 200, Some(Party::Caller)),
            "{workers} worker(s)"
        );
        assert_eq!(d.sip_messages, 6);
        assert_eq!(d.answer_ns, Some(ns(ok)));
        let setup_ms = (d.answer_ns.unwrap() - d.invite_ns) / MS;
        assert_eq!(
            (setup_ms as u64 % (1 << 32)).to_string(),
            ok[4],
            "tshark's response time of the 200"
        );
        assert_eq!(d.end_ns, Some(ns(bye)));
    }
}
