//! The call tap: a recording tap hears every SIP frame of each call's dialog and every RTP packet
//! of the streams linked to the call, once each, and each call's end once, with one shard and
//! with several; and every RTP packet (and the RTCP on it) of each stream without a call under
//! the stream's identity, its end once, and a stream whose SDP came late joining its call.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use monitor::synth::{PcapBuilder, SynthConfig, generate};
use monitor::{CallTap, Monitor, MonitorConfig, StreamId, TapFrame, TapKind};

#[derive(Debug, Default)]
struct Heard {
    sip: HashMap<String, u64>,
    rtp: HashMap<String, u64>,
    /// RTCP frames reported as a call's.
    rtcp: HashMap<String, u64>,
    /// (Call-ID, capture time of the end), in the order heard.
    ended: Vec<(String, i64)>,
    /// Frames heard after their call's end on the same tap.
    after_end: u64,
    /// A reported RTP header offset that does not point at an RTP version-2 header.
    bad_offsets: u64,
    last_progress: Vec<i64>,
    /// Streams without a call: RTP and RTCP frames heard under each identity, and the shard
    /// that reported them.
    lone_rtp: HashMap<StreamId, u64>,
    lone_rtcp: HashMap<StreamId, u64>,
    lone_shard: HashMap<StreamId, usize>,
    /// Their ends (identity, kept), and frames heard after one.
    lone_ended: Vec<(StreamId, bool)>,
    lone_after_end: u64,
    /// Streams that joined a call: (identity, Call-ID).
    joined: Vec<(StreamId, String)>,
}

impl Heard {
    /// Counts a reported RTP header offset that does not point at an RTP version-2 header.
    fn check_offset(&mut self, rtp_offset: Option<usize>, frame: &TapFrame<'_>) {
        let ok = rtp_offset
            .and_then(|at| frame.data.get(at))
            .is_some_and(|b| b >> 6 == 2);
        if !ok {
            self.bad_offsets += 1;
        }
    }
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
                h.check_offset(rtp_offset, frame);
            }
            TapKind::Rtcp => *h.rtcp.entry(call_id.to_string()).or_default() += 1,
            TapKind::Udptl => {}
        }
    }

    fn stream_packet(&mut self, stream: &StreamId, kind: TapKind, frame: &TapFrame<'_>) {
        let mut h = self.heard.lock().unwrap();
        if h.lone_ended.iter().any(|(s, _)| s == stream)
            || h.joined.iter().any(|(s, _)| s == stream)
        {
            h.lone_after_end += 1;
        }
        let shard = *h.lone_shard.entry(*stream).or_insert(self.shard);
        assert_eq!(shard, self.shard, "{stream:?}: one shard's");
        match kind {
            TapKind::Rtp { rtp_offset } => {
                *h.lone_rtp.entry(*stream).or_default() += 1;
                h.check_offset(rtp_offset, frame);
            }
            TapKind::Rtcp => *h.lone_rtcp.entry(*stream).or_default() += 1,
            other => panic!("{other:?} of a stream without a call"),
        }
    }

    fn stream_joined(&mut self, stream: &StreamId, call_id: &Arc<str>) {
        let mut h = self.heard.lock().unwrap();
        h.joined.push((*stream, call_id.to_string()));
    }

    fn stream_ended(&mut self, stream: &StreamId, _now_ns: i64, kept: bool) {
        let mut h = self.heard.lock().unwrap();
        assert_eq!(h.lone_shard.get(stream), Some(&self.shard), "{stream:?}");
        h.lone_ended.push((*stream, kept));
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

const MS: i64 = 1_000_000;

/// A monitor with `shards` shards whose taps record into one `Heard`.
fn recording(cfg: MonitorConfig, shards: usize) -> (Monitor, Arc<Mutex<Heard>>) {
    let heard = Arc::new(Mutex::new(Heard::default()));
    let h = heard.clone();
    let mon = Monitor::with_tap(cfg, shards, move |shard| {
        Box::new(Recorder {
            shard,
            heard: h.clone(),
        })
    });
    (mon, heard)
}

/// An RTCP receiver report from `src` to `dst` with one block about `ssrc`.
fn receiver_report(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x81, 201, 0, 7];
    p.extend_from_slice(&0x5EED_u32.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]); // fraction and cumulative lost
    p.extend_from_slice(&120u32.to_be_bytes()); // highest sequence
    p.extend_from_slice(&[0; 12]); // jitter, LSR, DLSR
    p
}

/// Two streams with no SIP (one with RTCP on it, one short) beside a REGISTER: each stream's
/// RTP and RTCP are heard under its identity, from the one shard that has it, and its end once;
/// nothing of them is a call's. The short one is left out of the analysis and its end says so.
#[test]
fn media_without_signalling_is_heard_under_each_stream_s_identity() {
    use common::calls::addr;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lone.pcap");
    let mut b = PcapBuilder::create(&path).unwrap();
    let t0 = 1_795_000_000_000_000_000;
    let (long, short) = (
        (addr("10.9.9.9:30000"), addr("10.9.9.8:30002")),
        (addr("10.9.9.7:31000"), addr("10.9.9.6:31002")),
    );
    let mut t = t0;
    for k in 0..3u16 {
        t = b.pcma_run(t, long, 0xAB, 40 * k, 40);
        b.udp(
            t,
            addr("10.9.9.8:30003"),
            addr("10.9.9.9:30001"),
            &receiver_report(0xAB),
        );
    }
    b.pcma_run(t + 500 * MS, short, 0xCD, 0, 5);
    b.finish().unwrap();
    for shards in [1, 2, 3] {
        let cfg = MonitorConfig {
            min_unsignalled_packets: 10,
            ..MonitorConfig::default()
        };
        let (mut mon, heard) = recording(cfg, shards);
        mon.read_file(&path, |_| {}).unwrap();
        let a = mon.finish();
        let h = heard.lock().unwrap();
        assert!(
            a.calls.is_empty() && h.rtp.is_empty() && h.rtcp.is_empty(),
            "{shards}"
        );
        assert_eq!(a.streams.len(), 1, "{shards}: the short one is left out");
        let s = &a.streams[0].stream;
        let id = StreamId {
            key: s.key,
            first_ns: s.first_ns,
        };
        assert_eq!((s.packets, s.first_ns), (120, t0));
        assert_eq!(h.lone_rtp.get(&id), Some(&120), "{shards} shards");
        assert_eq!(h.lone_rtcp.get(&id), Some(&3), "{shards} shards");
        assert_eq!(h.lone_rtp.len(), 2, "{shards} shards");
        let mut ended = h.lone_ended.clone();
        ended.sort_by_key(|(s, _)| s.first_ns);
        assert_eq!(ended.len(), 2, "{shards} shards: one end each");
        assert_eq!(ended[0], (id, true));
        assert_eq!((ended[1].0.key.ssrc, ended[1].1), (0xCD, false));
        assert_eq!((h.lone_after_end, h.bad_offsets), (0, 0));
        assert!(h.joined.is_empty());
    }
}

/// The callee's RTP starts before the INVITE announcing where it goes (the caller's media
/// address): the stream is heard under its own identity until the SDP comes, then joins the
/// call, and the call's record has it whole; with one shard and with several.
#[test]
fn a_stream_whose_sdp_comes_late_joins_its_call() {
    use common::calls::{A_MEDIA, A_SSRC, B_MEDIA, B_SSRC, CALL_ID, addr, audio, audio_sdp};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late_sdp.pcap");
    let mut b = PcapBuilder::create(&path).unwrap();
    let t0 = 1_795_000_000_000_000_000;
    let t = b.pcma_run(t0, (addr(B_MEDIA), addr(A_MEDIA)), B_SSRC, 90, 10);
    let t = common::calls::answered_call(&mut b, t, &audio_sdp(true), &audio_sdp(false), 1);
    let t = audio(&mut b, t, 10..60, &[0, 1]);
    common::calls::bye(&mut b, t + 20 * MS, 2);
    b.finish().unwrap();
    for shards in [1, 2, 3] {
        let (mut mon, heard) = recording(MonitorConfig::default(), shards);
        mon.read_file(&path, |_| {}).unwrap();
        let a = mon.finish();
        let h = heard.lock().unwrap();
        assert!(a.streams.is_empty(), "{shards} shards: {:?}", a.streams);
        assert_eq!(a.calls.len(), 1);
        let call = &a.calls[0];
        let late = call
            .streams
            .iter()
            .find(|s| s.stream.key.ssrc == B_SSRC)
            .expect("the callee's stream is the call's");
        assert_eq!(late.stream.packets, 60, "{shards} shards");
        let early = call
            .streams
            .iter()
            .find(|s| s.stream.key.ssrc == A_SSRC)
            .unwrap();
        let id = StreamId {
            key: late.stream.key,
            first_ns: t0,
        };
        assert_eq!(h.joined, [(id, CALL_ID.to_string())], "{shards} shards");
        assert_eq!(
            h.lone_rtp.get(&id),
            Some(&10),
            "{shards} shards: before the SDP"
        );
        assert_eq!(
            h.rtp.get(CALL_ID),
            Some(&(50 + early.stream.packets)),
            "{shards} shards: after it, as the call's"
        );
        assert!(
            h.lone_ended.is_empty(),
            "{shards} shards: a joined stream ends with its call"
        );
        assert_eq!(h.lone_after_end, 0);
    }
}
