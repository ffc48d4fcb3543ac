//! The calls-in-progress board (`Monitor::live_calls`): a call appears with its streams and
//! figures once answered and carrying RTP, and leaves it once ended; with one thread and with
//! worker threads; the per-shard bound holds and what it leaves out is counted.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use monitor::synth::packet::{ethernet_udp, write_rtp};
use monitor::{LiveCallsSnapshot, Monitor, MonitorConfig};

const T0_NS: i64 = 1_700_000_000_000_000_000;
const S_NS: i64 = 1_000_000_000;
const MS_NS: i64 = 1_000_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A SIP message of dialog `call_id` between 1001@10.0.0.1 and 2002@10.0.0.2, with an SDP
/// offering `media` when given.
fn sip(first: &str, call_id: &str, cseq: &str, to_tag: bool, media: Option<SocketAddr>) -> Vec<u8> {
    let body = media
        .map(|m| {
            format!(
                "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
                 m=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n",
                ip = m.ip(),
                port = m.port()
            )
        })
        .unwrap_or_default();
    let content_type = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/sdp\r\n"
    };
    let to_tag = if to_tag { ";tag=b" } else { "" };
    format!(
        "{first}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK-{cseq}\r\n\
         From: <sip:1001@10.0.0.1>;tag=a\r\nTo: <sip:2002@10.0.0.2>{to_tag}\r\n\
         Call-ID: {call_id}\r\nCSeq: {cseq}\r\n{content_type}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Feeds one call's INVITE (at `t`), 200 and ACK, with the media of each side at the ports
/// given.
fn answer(
    mon: &mut Monitor,
    t: i64,
    call_id: &str,
    caller_rtp: SocketAddr,
    callee_rtp: SocketAddr,
) {
    let (a, b) = (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"));
    let invite = sip(
        "INVITE sip:2002@10.0.0.2 SIP/2.0",
        call_id,
        "1 INVITE",
        false,
        Some(caller_rtp),
    );
    mon.packet(t, 1, &ethernet_udp(a, b, &invite));
    let ok = sip(
        "SIP/2.0 200 OK",
        call_id,
        "1 INVITE",
        true,
        Some(callee_rtp),
    );
    mon.packet(t + 500 * MS_NS, 1, &ethernet_udp(b, a, &ok));
    let ack = sip(
        "ACK sip:2002@10.0.0.2 SIP/2.0",
        call_id,
        "1 ACK",
        true,
        None,
    );
    mon.packet(t + 600 * MS_NS, 1, &ethernet_udp(a, b, &ack));
}

/// An OPTIONS of no call: SIP goes to every worker, so each one's clock (and tick) moves on.
fn options(mon: &mut Monitor, t: i64) {
    let m = sip(
        "OPTIONS sip:10.0.0.2 SIP/2.0",
        "keepalive",
        "1 OPTIONS",
        false,
        None,
    );
    mon.packet(
        t,
        1,
        &ethernet_udp(addr("10.0.0.1:5060"), addr("10.0.0.2:5060"), &m),
    );
}

/// 20 ms G.711 packets from `src` to `dst`, `count` of them from `t`, leaving out `skip`.
fn rtp(
    mon: &mut Monitor,
    t: i64,
    src: SocketAddr,
    dst: SocketAddr,
    ssrc: u32,
    count: u16,
    skip: &[u16],
) {
    let mut p = Vec::new();
    for seq in 0..count {
        if skip.contains(&seq) {
            continue;
        }
        p.clear();
        write_rtp(
            &mut p,
            8,
            seq == 0,
            seq,
            u32::from(seq) * 160,
            ssrc,
            160,
            0xd5,
        );
        mon.packet(
            t + i64::from(seq) * 20 * MS_NS,
            1,
            &ethernet_udp(src, dst, &p),
        );
    }
}

fn config(workers: usize) -> MonitorConfig {
    MonitorConfig {
        // Every tick publishes: packets here come far faster than their clock says.
        live_calls_min_wall_ms: 0,
        // Each packet goes to its worker at once, so the board moves while the test feeds.
        batch_events: if workers > 1 { 1 } else { 1024 },
        ..MonitorConfig::default()
    }
}

/// The board once `done` holds for it (worker threads publish on their own time), or the last
/// snapshot after 10 s.
fn wait_for(mon: &Monitor, done: impl Fn(&LiveCallsSnapshot) -> bool) -> LiveCallsSnapshot {
    let board = mon.live_calls();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = board.snapshot();
        if done(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_answered_call_shows_with_its_streams_until_its_bye() {
    for workers in [1, 3] {
        let mut mon = Monitor::new(config(workers), workers);
        assert_eq!(mon.live_calls().snapshot(), LiveCallsSnapshot::default());
        let (caller_rtp, callee_rtp) = (addr("10.0.0.1:40000"), addr("10.0.0.2:40002"));
        answer(&mut mon, T0_NS, "live-1", caller_rtp, callee_rtp);
        // Three seconds of media each way; two of the callee's packets are lost.
        rtp(
            &mut mon,
            T0_NS + S_NS,
            caller_rtp,
            callee_rtp,
            0x1111,
            150,
            &[],
        );
        rtp(
            &mut mon,
            T0_NS + S_NS,
            callee_rtp,
            caller_rtp,
            0x2222,
            150,
            &[40, 41],
        );
        options(&mut mon, T0_NS + 5 * S_NS);
        let s = wait_for(&mon, |s| {
            s.calls.len() == 1
                && s.calls[0].streams.len() == 2
                && s.calls[0].streams.iter().map(|x| x.packets).sum::<u64>() == 298
        });
        assert_eq!(
            s.taken_at_us,
            Some((T0_NS + 5 * S_NS) / 1000),
            "{workers} workers"
        );
        assert_eq!((s.left_out, s.streams_left_out), (0, 0));
        assert_eq!(s.calls.len(), 1, "{workers} workers: {s:?}");
        let c = &s.calls[0];
        assert_eq!(&*c.call_id, "live-1");
        assert_eq!((c.caller.as_str(), c.called.as_str()), ("1001", "2002"));
        assert_eq!(c.caller_addr, addr("10.0.0.1:5060"));
        assert_eq!(c.callee_addr, addr("10.0.0.2:5060"));
        assert_eq!(c.state, "answered");
        assert_eq!(c.start_us, T0_NS / 1000);
        assert_eq!(c.answer_us, Some((T0_NS + 500 * MS_NS) / 1000));
        assert_eq!(c.duration_ms, 5000);
        assert_eq!(c.streams.len(), 2, "{workers} workers: {c:?}");
        let from_caller = c.streams.iter().find(|x| x.src == caller_rtp).unwrap();
        let from_callee = c.streams.iter().find(|x| x.src == callee_rtp).unwrap();
        assert_eq!((from_caller.ssrc, from_caller.dst), (0x1111, callee_rtp));
        assert_eq!((from_caller.packets, from_caller.lost), (150, 0));
        assert_eq!(from_caller.loss_pct, 0.0);
        assert_eq!((from_callee.packets, from_callee.lost), (148, 2));
        assert!((from_callee.loss_pct - 200.0 / 150.0).abs() < 1e-9);
        assert_eq!(from_caller.payload, "g711A");
        assert_eq!(from_caller.media, "audio");
        // Packets exactly 20 ms apart: no jitter, and a MOS near G.711's best.
        assert!(from_caller.jitter_ms.abs() < 1e-9);
        assert!(from_caller.mos.unwrap() > 4.0);
        assert!(from_callee.mos.unwrap() < from_caller.mos.unwrap());
        assert_eq!(from_caller.first_us, (T0_NS + S_NS) / 1000);

        // The page gets it as JSON: addresses as text, times in µs.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["calls"][0]["caller_addr"], "10.0.0.1:5060");
        assert_eq!(json["calls"][0]["streams"][0]["src"], "10.0.0.1:40000");
        assert_eq!(json["left_out"], 0);

        // BYE and its 200: gone at the next publication, although the shard keeps the call
        // a few seconds for late packets.
        let (a, b) = (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"));
        let bye = sip(
            "BYE sip:2002@10.0.0.2 SIP/2.0",
            "live-1",
            "2 BYE",
            true,
            None,
        );
        mon.packet(T0_NS + 6 * S_NS, 1, &ethernet_udp(a, b, &bye));
        let ok = sip("SIP/2.0 200 OK", "live-1", "2 BYE", true, None);
        mon.packet(T0_NS + 6 * S_NS + 100 * MS_NS, 1, &ethernet_udp(b, a, &ok));
        options(&mut mon, T0_NS + 7 * S_NS + 200 * MS_NS);
        let s = wait_for(&mon, |s| s.calls.is_empty());
        assert!(s.calls.is_empty(), "{workers} workers: {s:?}");
        let board = mon.live_calls();
        let a = mon.finish();
        assert_eq!(a.calls.len(), 1);
        assert_eq!(board.snapshot().calls, Vec::new());
    }
}

#[test]
fn the_board_is_emptied_when_the_monitor_finishes() {
    for workers in [1, 2] {
        let mut mon = Monitor::new(config(workers), workers);
        answer(
            &mut mon,
            T0_NS,
            "open",
            addr("10.0.0.1:40000"),
            addr("10.0.0.2:40002"),
        );
        options(&mut mon, T0_NS + 2 * S_NS);
        let s = wait_for(&mon, |s| s.calls.len() == 1);
        assert_eq!(s.calls.len(), 1, "{workers} workers");
        assert_eq!(s.calls[0].state, "answered");
        assert!(s.calls[0].streams.is_empty(), "no RTP yet");
        let board = mon.live_calls();
        mon.finish();
        let s = board.snapshot();
        assert!(s.calls.is_empty() && s.left_out == 0, "{s:?}");
        assert_eq!(s.taken_at_us, Some((T0_NS + 2 * S_NS) / 1000));
    }
}

#[test]
fn a_ringing_call_shows_early_and_a_failed_one_leaves() {
    let mut mon = Monitor::new(config(1), 1);
    let (a, b) = (addr("10.0.0.1:5060"), addr("10.0.0.2:5060"));
    let invite = sip(
        "INVITE sip:2002@10.0.0.2 SIP/2.0",
        "busy",
        "1 INVITE",
        false,
        None,
    );
    mon.packet(T0_NS, 1, &ethernet_udp(a, b, &invite));
    let ringing = sip("SIP/2.0 180 Ringing", "busy", "1 INVITE", true, None);
    mon.packet(T0_NS + 300 * MS_NS, 1, &ethernet_udp(b, a, &ringing));
    options(&mut mon, T0_NS + S_NS);
    let s = mon.live_calls().snapshot();
    assert_eq!(s.calls.len(), 1);
    assert_eq!(s.calls[0].state, "early");
    assert_eq!(s.calls[0].ringing_us, Some((T0_NS + 300 * MS_NS) / 1000));
    assert_eq!(s.calls[0].answer_us, None);
    let busy = sip("SIP/2.0 486 Busy Here", "busy", "1 INVITE", true, None);
    mon.packet(T0_NS + 1500 * MS_NS, 1, &ethernet_udp(b, a, &busy));
    options(&mut mon, T0_NS + 2 * S_NS);
    assert!(mon.live_calls().snapshot().calls.is_empty());
}

#[test]
fn the_per_shard_bound_holds_and_counts_what_it_leaves_out() {
    for workers in [1, 2] {
        let cfg = MonitorConfig {
            live_calls_per_shard_max: 1,
            ..config(workers)
        };
        let mut mon = Monitor::new(cfg, workers);
        // Five calls; the first has six streams (a conference bridge's legs to one port).
        let bridge = addr("10.0.0.1:40000");
        answer(&mut mon, T0_NS, "call-0", bridge, addr("10.0.0.2:40002"));
        for i in 1..5u16 {
            answer(
                &mut mon,
                T0_NS + i64::from(i) * 700 * MS_NS,
                &format!("call-{i}"),
                addr(&format!("10.0.0.1:{}", 41000 + 2 * i)),
                addr(&format!("10.0.0.2:{}", 42000 + 2 * i)),
            );
        }
        for leg in 0..6u16 {
            let src = addr(&format!("10.0.0.9:{}", 50000 + 2 * leg));
            rtp(
                &mut mon,
                T0_NS + 4 * S_NS,
                src,
                bridge,
                0x100 + u32::from(leg),
                10,
                &[],
            );
        }
        options(&mut mon, T0_NS + 6 * S_NS);
        let s = wait_for(&mon, |s| {
            s.taken_at_us == Some((T0_NS + 6 * S_NS) / 1000)
                && s.calls.len() + s.left_out as usize == 5
        });
        assert!(s.calls.len() <= workers, "{workers} workers: {s:?}");
        assert_eq!(s.calls.len() as u64 + s.left_out, 5, "{workers} workers");
        if workers == 1 {
            // One call shown, and four of call-0's six streams published: shown with it when
            // call-0 is the call shown.
            assert_eq!(s.left_out, 4);
            assert_eq!(s.streams_left_out, 2);
            let expected = if &*s.calls[0].call_id == "call-0" {
                4
            } else {
                0
            };
            assert_eq!(s.calls[0].streams.len(), expected);
        }
        mon.finish();
    }
}
