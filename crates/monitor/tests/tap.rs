//! The call tap: a recording tap hears every SIP frame of each call's dialog and every RTP packet
//! of the streams linked to the call, once each, and each call's end once, with one shard and
//! with several.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use monitor::synth::{SynthConfig, generate};
use monitor::{CallTap, Monitor, MonitorConfig, TapFrame, TapKind};

#[derive(Debug, Default)]
struct Heard {
    sip: HashMap<String, u64>,
    rtp: HashMap<String, u64>,
    /// (Call-ID, capture time of the end), in the order heard.
    ended: Vec<(String, i64)>,
    /// Frames heard after their call's end on the same tap.
    after_end: u64,
    /// A reported RTP header offset that does not point at an RTP version-2 header.
    bad_offsets: u64,
    last_progress: Vec<i64>,
}

/// Records what the monitor tells it, in shared memory.
struct Recorder {
    shard: usize,
    heard: Arc<Mutex<Heard>>,
}

impl CallTap for Recorder {
    fn packet(&mut self, call_id: &Arc<str>, kind: TapKind, frame: &TapFrame<'_>) {
        let mut h = self.heard.lock().unwrap();
        if h.ended.iter().any(|(c, _)| **c == **call_id) && kind == TapKind::Sip {
            h.after_end += 1;
        }
        match kind {
            TapKind::Sip => *h.sip.entry(call_id.to_string()).or_default() += 1,
            TapKind::Rtp { rtp_offset } => {
                *h.rtp.entry(call_id.to_string()).or_default() += 1;
                let ok = rtp_offset
                    .and_then(|at| frame.data.get(at))
                    .is_some_and(|b| b >> 6 == 2);
                if !ok {
                    h.bad_offsets += 1;
                }
            }
            TapKind::Rtcp | TapKind::Udptl => {}
        }
    }

    fn call_ended(&mut self, call_id: &Arc<str>, _invite_ns: i64, now_ns: i64) {
        self.heard
            .lock()
            .unwrap()
            .ended
            .push((call_id.to_string(), now_ns));
    }

    fn progress(&mut self, ts_ns: i64) {
        let mut h = self.heard.lock().unwrap();
        let shard = self.shard;
        if h.last_progress.len() <= shard {
            h.last_progress.resize(shard + 1, i64::MIN);
        }
        assert!(ts_ns >= h.last_progress[shard], "progress goes forward");
        h.last_progress[shard] = ts_ns;
    }
}

#[test]
fn every_frame_of_a_call_is_heard_once_with_one_or_two_shards() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.pcap");
    let cfg = SynthConfig {
        calls: 40,
        call_interval_us: 30_000,
        call_duration_ms: 2_000,
        loss_pct: 2.0,
        duplicate_pct: 1.0,
        seed: 11,
        ..SynthConfig::default()
    };
    let truth = generate(&cfg, std::fs::File::create(&path).unwrap()).unwrap();
    for shards in [1, 2, 3] {
        let heard = Arc::new(Mutex::new(Heard::default()));
        let mut made = 0;
        let mut mon = Monitor::with_tap(MonitorConfig::default(), shards, |shard| {
            made += 1;
            Box::new(Recorder {
                shard,
                heard: heard.clone(),
            })
        });
        mon.read_file(&path, |_| {}).unwrap();
        let a = mon.finish();
        assert_eq!(made, shards, "one tap per shard");
        let h = heard.lock().unwrap();
        assert_eq!(a.calls.len(), truth.calls.len());
        assert_eq!(
            h.ended.len(),
            a.calls.len(),
            "{shards} shards: one end per call"
        );
        assert_eq!(h.after_end, 0);
        assert_eq!(h.bad_offsets, 0);
        assert!(h.last_progress.iter().all(|&p| p == i64::MAX));
        for c in &a.calls {
            let id = &*c.dialog.call_id;
            assert_eq!(
                h.sip.get(id).copied().unwrap_or(0),
                u64::from(c.dialog.sip_messages),
                "{shards} shards, {id}: SIP frames"
            );
            let packets: u64 = c.streams.iter().map(|s| s.stream.packets).sum();
            assert_eq!(
                h.rtp.get(id).copied().unwrap_or(0),
                packets,
                "{shards} shards, {id}: RTP packets"
            );
            assert_eq!(h.ended.iter().filter(|(e, _)| e == id).count(), 1);
        }
    }
}

#[test]
fn register_and_unsignalled_rtp_belong_to_no_call() {
    use monitor::synth::packet::ethernet_udp;
    let a: std::net::SocketAddr = "10.0.0.1:5060".parse().unwrap();
    let b: std::net::SocketAddr = "10.0.0.2:5060".parse().unwrap();
    let register = "REGISTER sip:10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1\r\n\
        From: <sip:1001@10.0.0.2>;tag=1\r\nTo: <sip:1001@10.0.0.2>\r\nCall-ID: reg-1\r\n\
        CSeq: 1 REGISTER\r\nContent-Length: 0\r\n\r\n";
    let mut rtp = vec![0x80, 8, 0, 1, 0, 0, 0, 160, 0, 0, 0, 7];
    rtp.resize(172, 0xd5);
    let heard = Arc::new(Mutex::new(Heard::default()));
    let h2 = heard.clone();
    let mut mon = Monitor::with_tap(MonitorConfig::default(), 1, move |shard| {
        Box::new(Recorder {
            shard,
            heard: h2.clone(),
        })
    });
    let t0 = 1_700_000_000_000_000_000;
    mon.packet(t0, 1, &ethernet_udp(a, b, register.as_bytes()));
    let (ra, rb) = (
        "10.0.0.1:40000".parse().unwrap(),
        "10.0.0.2:40002".parse().unwrap(),
    );
    for i in 0..5 {
        mon.packet(t0 + i * 20_000_000, 1, &ethernet_udp(ra, rb, &rtp));
    }
    let out = mon.finish();
    assert_eq!(out.registrations.len(), 1);
    let h = heard.lock().unwrap();
    assert!(
        h.sip.is_empty() && h.rtp.is_empty() && h.ended.is_empty(),
        "{h:?}"
    );
}
