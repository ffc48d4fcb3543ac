//! `Monitor::advance_to`: capture time moved on without a packet, as a live source does while
//! the network is quiet. Calls that ended close once their linger has passed, with one shard
//! and with worker threads, and time never moves back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use monitor::synth::{SynthConfig, generate};
use monitor::{CallTap, Monitor, MonitorConfig, TapFrame, TapKind};

/// What the shards' taps heard: the calls closed, and the latest progress per shard.
#[derive(Default)]
struct Heard {
    ended: Vec<String>,
    progress: Vec<i64>,
}

struct Recorder {
    shard: usize,
    heard: Arc<Mutex<Heard>>,
}

impl CallTap for Recorder {
    fn packet(&mut self, _: &Arc<str>, _: TapKind, _: &TapFrame<'_>) {}
    fn call_ended(&mut self, call_id: &Arc<str>, _: i64, _: i64) {
        self.heard.lock().unwrap().ended.push(call_id.to_string());
    }
    fn progress(&mut self, ts_ns: i64) {
        let mut h = self.heard.lock().unwrap();
        if h.progress.len() <= self.shard {
            h.progress.resize(self.shard + 1, i64::MIN);
        }
        h.progress[self.shard] = ts_ns;
    }
}

/// Two answered calls of a second each, ended by BYE and 200; returns the packets.
fn two_calls() -> Vec<(i64, u32, Vec<u8>)> {
    let cfg = SynthConfig {
        calls: 2,
        call_interval_us: 200_000,
        call_duration_ms: 1_000,
        failures: false,
        ..SynthConfig::default()
    };
    let mut pcap = Vec::new();
    generate(&cfg, &mut pcap).unwrap();
    let path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(path.path(), &pcap).unwrap();
    let mut r = monitor::pcap::CaptureReader::open(path.path()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        out.push((p.ts_ns, p.link_type, p.data.to_vec()));
    }
    out
}

/// Waits (for the worker threads) until `done`, at most a generous while.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn calls_end_without_another_packet(workers: usize) {
    let heard = Arc::new(Mutex::new(Heard::default()));
    let cfg = MonitorConfig::default();
    let linger_ns = cfg.call_linger_ms as i64 * 1_000_000;
    let mut m = {
        let heard = heard.clone();
        Monitor::with_tap(cfg, workers, move |shard| {
            Box::new(Recorder {
                shard,
                heard: heard.clone(),
            })
        })
    };
    // Before any packet, there is no time to move on.
    assert!(!m.advance_to(1_000_000_000));
    let packets = two_calls();
    for (ts, lt, data) in &packets {
        m.packet(*ts, *lt, data);
    }
    let last = packets.iter().map(|p| p.0).max().unwrap();
    let live = m.live();
    let active = || live.snapshot().calls_active;
    // Not back, nor to the newest packet's own time.
    assert!(!m.advance_to(last - 10_000_000_000));
    assert!(!m.advance_to(last));
    // Within the linger the calls stay open.
    assert!(m.advance_to(last + linger_ns / 2));
    eventually("the shards' progress at the tick", || {
        let h = heard.lock().unwrap();
        h.progress.len() == workers && h.progress.iter().all(|&p| p == last + linger_ns / 2)
    });
    assert!(heard.lock().unwrap().ended.is_empty());
    assert_eq!(active(), 2);
    // Past it they close, in every shard, and the counters say so.
    assert!(m.advance_to(last + linger_ns + 1_000_000_000));
    eventually("both calls closed", || {
        heard.lock().unwrap().ended.len() == 2
    });
    eventually("no call active", || active() == 0);
    if workers == 1 {
        // Inline, the records are there to take at once.
        assert_eq!(m.take_finished().calls.len(), 2);
    }
    let all = m.finish();
    assert_eq!(all.calls.len(), if workers == 1 { 0 } else { 2 });
}

#[test]
fn calls_end_without_another_packet_on_one_shard() {
    calls_end_without_another_packet(1);
}

#[test]
fn calls_end_without_another_packet_on_every_worker() {
    calls_end_without_another_packet(3);
}
