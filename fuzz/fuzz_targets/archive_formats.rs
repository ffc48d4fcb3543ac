//! The archive's input-facing code: member names from arbitrary Call-IDs are always safe, and
//! the ustar header and pcap readers never panic on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let stem = archive::safe_stem(data);
    assert!(stem.len() <= archive::MAX_ENCODED_CALL_ID_BYTES);
    assert!(!stem.starts_with('.'));
    assert!(stem.bytes().all(|c| c.is_ascii_graphic() && c != b'/' && c != b'\\'));
    let name = format!("{stem}.pcap.zst");
    let header = archive::tar::header(&name, data.len() as u64, 0).expect("safe names fit");
    let entry = archive::tar::parse_header(&header).expect("own header parses");
    assert_eq!(entry.name, name);

    if data.len() >= archive::tar::BLOCK_BYTES {
        let _ = archive::tar::parse_header(&data[..archive::tar::BLOCK_BYTES]);
    }
    if let Some((link, records)) = archive::pcap::records(data) {
        // What reads back writes back to the same bytes (the header's other fields aside; the
        // writer never records a wire length below the captured length).
        if records.iter().any(|r| (r.orig_len as usize) < r.data.len()) {
            return;
        }
        let mut out = Vec::new();
        archive::pcap::write_file_header(&mut out, link, u32::from_le_bytes([data[16], data[17], data[18], data[19]]));
        for r in &records {
            archive::pcap::write_record(&mut out, r.ts_sec, r.ts_usec, r.data, r.orig_len);
        }
        assert_eq!(out[24..], data[24..]);
    }
});
