//! The sensor–collector protocol's decoder: never panics, never accepts a frame or a batch over
//! its limits, and whatever decodes encodes to bytes that decode to the same message (records
//! in the form they came in, JSON or compact), and encode again to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits, so that the fuzzer reaches them.
    let limits = uplink::Limits {
        frame_bytes_max: 64 << 10,
        batch_records_max: 16,
    };
    let mut at = 0;
    // A stream of frames, as a session reads them, until one does not decode.
    while let Ok(Some((msg, used))) = uplink::decode_frame(&data[at..], &limits) {
        assert!(
            used > uplink::HEADER_BYTES && used - uplink::HEADER_BYTES <= limits.frame_bytes_max
        );
        if let uplink::Message::Records(r) = &msg {
            assert!(!r.records.is_empty() && r.records.len() <= limits.batch_records_max);
        }
        let mut again = Vec::new();
        uplink::encode(&msg, &mut again);
        // Re-encoding is canonical JSON, never longer than generous whitespace-free input
        // would need; it must decode (with room for escapes JSON may add) to the same message.
        let roomy = uplink::Limits {
            frame_bytes_max: again.len().max(limits.frame_bytes_max),
            ..limits
        };
        let (back, used_again) = uplink::decode_frame(&again, &roomy)
            .expect("a re-encoded message decodes")
            .expect("a re-encoded message is whole");
        assert_eq!(used_again, again.len());
        assert_eq!(back.kind(), msg.kind());
        // What was read back encodes to the same bytes.
        let mut third = Vec::new();
        uplink::encode(&back, &mut third);
        assert_eq!(third, again);
        // And it is the same message, field by field, unless a compact record carries a NaN
        // figure (JSON cannot), which is equal to nothing, not even itself.
        #[allow(clippy::eq_op)]
        let comparable = msg == msg;
        if comparable {
            assert_eq!(back, msg);
        }
        at += used;
    }
});
