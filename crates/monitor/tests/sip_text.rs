//! SIP whose header section is not UTF-8: a Latin-1 display name (older phones and PBXs still
//! send one) and stray bytes in a tag (seen in a real mirrored capture, in a NOTIFY's To). tshark
//! shows these messages; the monitor must not drop them, nor the call they belong to.

mod common;

use monitor::synth::PcapBuilder;
use monitor::{Monitor, MonitorConfig};

use common::calls::{CALL_ID, URI, addr};

const MS: i64 = 1_000_000;

/// A message of the call from 10.0.0.1 to 10.0.0.2 whose From has `display` as raw bytes.
fn message(start: &str, cseq: &str, display: &[u8], to_tag: &[u8]) -> Vec<u8> {
    let branch = cseq.replace(' ', "");
    let mut m = format!("{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{branch}\r\n")
        .into_bytes();
    m.extend_from_slice(b"From: \"");
    m.extend_from_slice(display);
    m.extend_from_slice(b"\" <sip:100@10.0.0.1>;tag=a\r\nTo: <sip:200@10.0.0.2>");
    m.extend_from_slice(to_tag);
    m.extend_from_slice(
        format!(
            "\r\nCall-ID: {CALL_ID}\r\nCSeq: {cseq}\r\nContact: <sip:100@10.0.0.1>\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    );
    m
}

#[test]
fn a_call_with_a_latin1_display_name_is_followed_as_tshark_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.pcap");
    let (a, b) = (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"));
    let name = b"J\xfcrgen M\xfcller";
    // The callee's tag carries bytes that are no text at all.
    let tag = b";tag=5af5720\xef\x0e\xa4b\x01";
    let mut p = PcapBuilder::create(&path).unwrap();
    let t = 1_700_000_000_000 * MS;
    let invite = message(&format!("INVITE {URI} SIP/2.0"), "1 INVITE", name, b"");
    p.udp(t, a, b, &invite);
    let ok = message("SIP/2.0 200 OK", "1 INVITE", name, tag);
    p.udp(t + 100 * MS, b, a, &ok);
    let ack = message(&format!("ACK {URI} SIP/2.0"), "1 ACK", name, tag);
    p.udp(t + 110 * MS, a, b, &ack);
    let bye = message(&format!("BYE {URI} SIP/2.0"), "2 BYE", name, tag);
    p.udp(t + 5_000 * MS, a, b, &bye);
    let ok = message("SIP/2.0 200 OK", "2 BYE", name, tag);
    p.udp(t + 5_010 * MS, b, a, &ok);
    p.finish().unwrap();

    for workers in [1, 2] {
        let mut m = Monitor::new(MonitorConfig::default(), workers);
        m.read_file(&path, |_| {}).unwrap();
        let analysis = m.finish();
        assert_eq!(analysis.counters.sip_parse_errors, 0, "workers {workers}");
        assert_eq!(analysis.sip.messages, 5, "workers {workers}");
        let [call] = &analysis.calls[..] else {
            panic!("workers {workers}: {:?}", analysis.calls);
        };
        let d = &call.dialog;
        assert_eq!(&*d.call_id, CALL_ID);
        assert_eq!(d.last_code, 200, "workers {workers}");
        assert!(d.end_ns.is_some() && d.answer_ns.is_some(), "{d:?}");
        assert_eq!(&*d.caller, "100");
    }
    if !common::have_tshark() {
        return;
    }
    let (messages, requests, responses, _) = common::tshark_sip_stat(&path, &[]);
    assert_eq!(messages, 5);
    assert_eq!(requests.values().sum::<u64>(), 3);
    assert_eq!(responses.get(&200), Some(&2));
}
