//! SDP parsing and codec lookups.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
