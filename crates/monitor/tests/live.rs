//! The counters the monitor publishes while it runs agree with its final analysis, with one
//! thread and with worker threads.

use monitor::synth::{SynthConfig, generate};
use monitor::{Monitor, MonitorConfig};

#[test]
fn live_counters_agree_with_the_analysis() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("calls.pcap");
    let cfg = SynthConfig {
        calls: 12,
        ..SynthConfig::default()
    };
    let truth = generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    for workers in [1, 3] {
        let mut mon = Monitor::new(MonitorConfig::default(), workers);
        let live = mon.live();
        let packets = mon.read_file(&pcap, |_| {}).unwrap();
        let a = mon.finish();
        let s = live.snapshot();
        assert_eq!(s.packets, packets, "{workers} workers");
        assert_eq!(s.sip_messages, a.sip.messages, "{workers} workers");
        assert_eq!(s.rtp_packets, a.counters.rtp_packets, "{workers} workers");
        assert_eq!(
            s.calls_started,
            truth.calls.len() as u64,
            "{workers} workers"
        );
        assert_eq!(s.calls_active, 0, "every call closed at the end");
    }
}
