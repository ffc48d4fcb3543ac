//! Capture file reading (pcap, pcapng, gzip) into the monitor: any input ends in packets and
//! then either the end of the file or an error naming the offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::pcap::CaptureReader;
use monitor::{Monitor, MonitorConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = CaptureReader::from_reader("fuzz.pcap", std::io::Cursor::new(data.to_vec())) else {
        return;
    };
    let mut m = Monitor::new(MonitorConfig::default(), 1);
    let mut last = 0;
    loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                assert!(p.offset >= last);
                last = p.offset;
                let (ts, lt) = (p.ts_ns, p.link_type);
                m.packet(ts, lt, p.data);
            }
            Ok(None) => break,
            Err(e) => {
                assert_eq!(e.file, "fuzz.pcap");
                break;
            }
        }
    }
    let _ = m.finish();
});
