//! HEP v3 decoding: never panics, never accepts a payload over the limit, and whatever decodes
//! re-encodes to bytes that decode to the same packet.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = hep::DecodeLimits::default();
    let _ = hep::frame_len(data);
    if let Ok(packet) = hep::decode(data, &limits) {
        assert!(packet.payload.bytes().len() <= limits.max_payload_bytes);
        let bytes = packet.to_bytes().expect("a decoded packet fits in 65535 bytes");
        assert!(bytes.len() <= data.len());
        assert_eq!(hep::decode(&bytes, &limits), Ok(packet));
    }
});
