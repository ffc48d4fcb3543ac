//! The real captures in shared/captures, compared with tshark and with what was checked by hand.

mod common;

use std::path::Path;

use monitor::{Analysis, Monitor, MonitorConfig};

fn analyse(path: &Path) -> Analysis {
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    m.read_file(path, |_| {}).unwrap_or_else(|e| panic!("{e}"));
    m.finish()
}

/// tshark needs to be told that SIP runs on a port other than 5060.
fn decode_as(file: &str) -> &'static [&'static str] {
    match file {
        "ipv6_udp_fragmented.pcap" => &["-d", "udp.port==6363,sip"],
        _ => &[],
    }
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
        let a = analyse(&path);
        let ours: Vec<_> = a.all_streams().collect();
        let theirs = common::tshark_rtp_streams(&path, decode_as(f));
        common::assert_streams_match(f, &ours, &theirs);
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
        let (messages, requests, responses) = common::tshark_sip_stat(&path, decode_as(f));
        assert_eq!(a.sip.messages, messages, "{f}: SIP messages");
        assert_eq!(a.sip.requests, requests, "{f}: requests");
        assert_eq!(a.sip.responses, responses, "{f}: responses");
    }
}
