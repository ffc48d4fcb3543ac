//! The latency half of `tandem bench alerts`: from the SIP message that crosses a rule's
//! threshold to the webhook's receipt on loopback, through a live HEP sensor, the engine, the
//! notifier and an HTTP POST.
//!
//! Two rules, each on its own calls: `fraud.destination`, decided at the INVITE (timed from
//! sending the INVITE), and `sip.response` on a 503, decided when the call's record closes
//! (timed from sending the 503: this includes the monitor's `call_linger_ms`, 5 s by default,
//! which waits for retransmissions before a call is final).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::report::Percentiles;

#[derive(Serialize)]
pub(crate) struct Latency {
    pub calls: usize,
    /// INVITE sent to webhook received, fraud.destination (µs).
    pub at_invite: Percentiles,
    /// 503 sent to webhook received, sip.response (µs; includes the call linger).
    pub at_end: Percentiles,
    pub call_linger_ms: u64,
    pub missing: usize,
}

/// A firing alert's rule and key as a webhook received it, and when.
type Receipt = (String, String, Instant);

/// A webhook receiver: (rule, key) of each POST with its receipt time.
fn receiver() -> anyhow::Result<(u16, mpsc::Receiver<Receipt>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut w = conn.try_clone().expect("socket");
                let mut r = BufReader::new(conn);
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let at = Instant::now();
                    let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                        && v["state"] == "firing"
                    {
                        let _ = tx.send((
                            v["rule"].as_str().unwrap_or_default().to_string(),
                            v["key"].as_str().unwrap_or_default().to_string(),
                            at,
                        ));
                    }
                }
            });
        }
    });
    Ok((port, rx))
}

/// One SIP message as HEP, stamped now.
fn hep(text: &str, from_caller: bool) -> Vec<u8> {
    let (a, b): (IpAddr, IpAddr) = ([192, 0, 2, 10].into(), [192, 0, 2, 20].into());
    let (src_ip, dst_ip) = if from_caller { (a, b) } else { (b, a) };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    hep::HepPacket {
        ip_protocol: 17,
        src_ip,
        dst_ip,
        src_port: 5060,
        dst_port: 5060,
        ts_sec: now.as_secs() as u32,
        ts_usec: now.subsec_micros(),
        protocol_type: hep::ProtocolType::SIP,
        capture_id: 1,
        keep_alive_timer: None,
        auth_key: None,
        payload: hep::Payload::Raw(text.as_bytes()),
        correlation_id: None,
    }
    .to_bytes()
    .unwrap_or_default()
}

fn sip(first: &str, caller: &str, called: &str, call_id: &str, cseq: &str, to_tag: bool) -> String {
    let tag = if to_tag { ";tag=b2" } else { "" };
    format!(
        "{first}\r\nVia: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK-{call_id}-{cseq}\r\n\
         From: <sip:{caller}@192.0.2.10>;tag=a1\r\nTo: <sip:{called}@192.0.2.20>{tag}\r\n\
         Call-ID: {call_id}\r\nCSeq: {cseq}\r\nContent-Length: 0\r\n\r\n"
    )
}

pub(crate) fn measure(calls: usize) -> anyhow::Result<Latency> {
    let (port, received) = receiver()?;
    let text = format!(
        "[alerts.action.hook]\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{port}/alerts\"\n\
         [[alerts.rule]]\nname = \"premium\"\nkind = \"fraud.destination\"\nprefixes = [\"+99\"]\ngroup_by = \"caller\"\nactions = [\"hook\"]\n\
         [[alerts.rule]]\nname = \"refused\"\nkind = \"sip.response\"\ncodes = [503]\ngroup_by = \"caller\"\nactions = [\"hook\"]\n"
    );
    let cfg = alerts::RulesFile::parse("bench".as_ref(), &text)?;
    let set = alerts::RuleSet::new(&cfg).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let actions =
        alert_actions::Actions::from_config(&cfg.action).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let notifier = Arc::new(Mutex::new(alert_actions::Notifier::start(
        actions,
        Default::default(),
    )?));
    struct Out(Arc<Mutex<alert_actions::Notifier>>);
    impl sensor::AlertOutput for Out {
        fn alerts(&mut self, alerts: &[alerts::Alert]) {
            let n = self.0.lock().unwrap_or_else(|p| p.into_inner());
            for a in alerts {
                n.submit(a.clone());
            }
        }
    }
    let config = sensor::SensorConfig::new(sensor::Source::Hep {
        listen: "127.0.0.1:0".parse()?,
        max_packets: None,
    });
    let linger = config.monitor.call_linger_ms;
    let handle = sensor::Sensor::start_with_alerts(
        config,
        None,
        Some(sensor::SensorAlerts {
            engine: Arc::new(Mutex::new(alerts::Engine::new(
                set,
                Arc::new(alerts::lookup::Basic),
            ))),
            sensor: "bench".into(),
            output: Some(Box::new(Out(notifier.clone()))),
        }),
    )?;
    let to = handle
        .hep_addr()
        .ok_or_else(|| anyhow::anyhow!("no HEP address"))?;
    let udp = UdpSocket::bind("127.0.0.1:0")?;
    let mut sent: HashMap<(String, String), Instant> = HashMap::new();
    for i in 0..calls {
        // A call to a watched destination, timed from its INVITE.
        let (caller, id) = (format!("5{i:05}"), format!("lat-inv-{i}"));
        let invite = sip(
            "INVITE sip:0099123456@192.0.2.20 SIP/2.0",
            &caller,
            "0099123456",
            &id,
            "1 INVITE",
            false,
        );
        sent.insert(("premium".into(), caller.clone()), Instant::now());
        udp.send_to(&hep(&invite, true), to)?;
        udp.send_to(
            &hep(
                &sip(
                    "CANCEL sip:0099123456@192.0.2.20 SIP/2.0",
                    &caller,
                    "0099123456",
                    &id,
                    "1 CANCEL",
                    false,
                ),
                true,
            ),
            to,
        )?;
        // A call refused 503, timed from the 503.
        let (caller, id) = (format!("6{i:05}"), format!("lat-503-{i}"));
        udp.send_to(
            &hep(
                &sip(
                    "INVITE sip:100@192.0.2.20 SIP/2.0",
                    &caller,
                    "100",
                    &id,
                    "1 INVITE",
                    false,
                ),
                true,
            ),
            to,
        )?;
        sent.insert(("refused".into(), caller.clone()), Instant::now());
        udp.send_to(
            &hep(
                &sip(
                    "SIP/2.0 503 Service Unavailable",
                    &caller,
                    "100",
                    &id,
                    "1 INVITE",
                    true,
                ),
                false,
            ),
            to,
        )?;
        udp.send_to(
            &hep(
                &sip(
                    "ACK sip:100@192.0.2.20 SIP/2.0",
                    &caller,
                    "100",
                    &id,
                    "1 ACK",
                    true,
                ),
                true,
            ),
            to,
        )?;
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut at_invite = Vec::new();
    let mut at_end = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(linger + 15_000);
    while at_invite.len() + at_end.len() < 2 * calls {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        let Ok((rule, key, at)) = received.recv_timeout(left) else {
            break;
        };
        if let Some(t0) = sent.remove(&(rule.clone(), key)) {
            let ns = at.duration_since(t0).as_nanos() as u64;
            if rule == "premium" {
                at_invite.push(ns);
            } else {
                at_end.push(ns);
            }
        }
    }
    handle.stop();
    let _ = handle.join();
    let missing = sent.len();
    Ok(Latency {
        calls,
        at_invite: Percentiles::from_nanos(&mut at_invite),
        at_end: Percentiles::from_nanos(&mut at_end),
        call_linger_ms: linger,
        missing,
    })
}
