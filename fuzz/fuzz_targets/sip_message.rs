//! SIP message parsing (header sections not in UTF-8 repaired), stream framing and every
//! accessor.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sip::message_len(data);
    let _ = sip::looks_like_sip(data);
    let mut scratch = Vec::new();
    if let Ok((m, read)) = sip::Message::parse_lossy(data, &mut scratch) {
        // Read in place, or from a repaired copy of the same length.
        assert_eq!(read.len(), data.len());
        assert!(m.len <= data.len());
        let _ = m.call_id();
        let _ = m.cseq();
        let _ = m.method();
        let _ = m.status();
        let _ = m.has_sdp();
        let _ = m.q850_cause();
        let _ = m.info_digit();
        if let Some(f) = m.from() {
            let _ = f.user();
        }
        if let Some(t) = m.to() {
            let _ = t.user();
        }
        for v in m.header_values("via").chain(m.header_values("contact")) {
            let n = sip::NameAddr::parse(v);
            let _ = n.user();
        }
    }
});
