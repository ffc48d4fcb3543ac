//! Tandem against tshark on a directory of captures from elsewhere (other projects' test
//! captures, read where they lie): `TANDEM_COMPARE_DIR=DIR cargo test -p monitor --test
//! tshark_compare -- --nocapture`. For each file it prints what agreed and what differed: RTP
//! streams (`-z rtp,streams`, heuristic RTP on), SIP counts (`-z sip,stat`), and the frames
//! each decodes down to UDP and TCP (through tunnels), with what Tandem did not follow. Files
//! listed in `TANDEM_COMPARE_KNOWN` (comma separated) may differ; any other difference fails.
//! `TANDEM_COMPARE_DECODE_AS` gives tshark decode-as rules per file, for SIP on ports tshark
//! does not try (`name=tcp.port==6060,sip;other=...`). Without `TANDEM_COMPARE_DIR` the test
//! does nothing.

mod common;

use std::path::Path;
use std::process::Command;

use monitor::{Analysis, Monitor, MonitorConfig};

fn analyse(path: &Path, workers: usize) -> Result<Analysis, String> {
    let mut m = Monitor::new(MonitorConfig::default(), workers);
    m.read_file(path, |_| {}).map_err(|e| e.to_string())?;
    Ok(m.finish())
}

/// Frames tshark decodes to a UDP or TCP header that is not inside an ICMP error.
fn tshark_frames(path: &Path, filter: &str) -> u64 {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
        .output()
        .expect("run tshark");
    String::from_utf8_lossy(&out.stdout).lines().count() as u64
}

/// One file's comparison: the lines to print and whether everything agreed.
fn compare(path: &Path, decode_as: &[&str]) -> (Vec<String>, bool) {
    let mut lines = Vec::new();
    let mut same = true;
    let one = match analyse(path, 1) {
        Ok(a) => a,
        Err(e) => return (vec![format!("  Tandem cannot read it: {e}")], true),
    };
    let two = analyse(path, 2).expect("read once already");
    if one.counters != two.counters || one.sip != two.sip || one.calls.len() != two.calls.len() {
        lines.push("  DIFFERS: one worker and two workers disagree".into());
        same = false;
    }
    let theirs = common::tshark_rtp_streams(path, decode_as);
    let ours: Vec<_> = one.all_streams().collect();
    let streams = std::panic::catch_unwind(|| {
        common::assert_streams_match("", &ours, &theirs);
    });
    match streams {
        Ok(()) => lines.push(format!(
            "  RTP streams: {} here, {} in tshark, all figures equal",
            ours.len(),
            theirs.len()
        )),
        Err(e) => {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            lines.push(format!(
                "  DIFFERS: RTP streams: {} here, {} in tshark: {}",
                ours.len(),
                theirs.len(),
                why.lines().next().unwrap_or_default()
            ));
            same = false;
        }
    }
    let (messages, requests, responses, resent) = common::tshark_sip_stat(path, decode_as);
    let sip_same = one.sip.messages == messages
        && one.sip.requests == requests
        && one.sip.responses == responses
        && one.sip.resent == resent;
    lines.push(format!(
        "  {}SIP: {} messages ({} resent) here, {} ({}) in tshark{}",
        if sip_same { "" } else { "DIFFERS: " },
        one.sip.messages,
        one.sip.resent,
        messages,
        resent,
        if sip_same {
            ", methods and codes equal".to_string()
        } else {
            format!(
                "; here {:?} {:?}, tshark {:?} {:?}",
                one.sip.requests, one.sip.responses, requests, responses
            )
        }
    ));
    same &= sip_same;
    let c = &one.counters;
    let udp = tshark_frames(path, "udp && !icmp && !icmpv6");
    let tcp = tshark_frames(path, "tcp && !icmp && !icmpv6");
    lines.push(format!(
        "  decoded: UDP {} here, {udp} in tshark; TCP {} here, {tcp} in tshark; malformed {}; \
         not IP {}; other transports {}; tunnels not followed {}; SCTP packets {}",
        c.udp,
        c.tcp,
        c.malformed,
        c.decode.not_ip,
        c.decode.other_transport,
        c.decode.tunnels_undecoded(),
        c.sip_sctp.packets,
    ));
    (lines, same)
}

#[test]
fn captures_from_elsewhere_agree_with_tshark() {
    let Some(dir) = std::env::var_os("TANDEM_COMPARE_DIR") else {
        return;
    };
    if !common::have_tshark() {
        return;
    }
    let known: Vec<String> = std::env::var("TANDEM_COMPARE_KNOWN")
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect();
    let rules: Vec<(String, String)> = std::env::var("TANDEM_COMPARE_DECODE_AS")
        .unwrap_or_default()
        .split(';')
        .filter_map(|r| r.split_once('='))
        .map(|(f, r)| (f.to_string(), r.to_string()))
        .collect();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("TANDEM_COMPARE_DIR is a directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut unexplained = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let rule = rules
            .iter()
            .find(|(file, _)| *file == name)
            .map(|(_, rule)| rule.as_str());
        let decode_as: Vec<&str> = rule.map(|r| vec!["-d", r]).unwrap_or_default();
        let (mut lines, same) = compare(f, &decode_as);
        if let Some(r) = rule {
            lines.insert(0, format!("  (tshark -d {r})"));
        }
        println!("{name}\n{}", lines.join("\n"));
        if !same && !known.contains(&name) {
            unexplained.push(name);
        }
    }
    assert!(
        unexplained.is_empty(),
        "differences not explained: {unexplained:?}"
    );
}
