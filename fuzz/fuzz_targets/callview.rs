//! The call view on arbitrary bytes: `callview::analyze` and `callview::wav` (every stream
//! mixed) must end in a view, a playable WAV or an error, never a panic, and stay within the
//! limits they are given (small here, so that a fuzzed input cannot ask for hours of audio).
#![no_main]

use callview::{AudioSelect, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        sip_messages_max: 50,
        sip_text_bytes_max: 1024,
        streams_max: 8,
        intervals_max: 120,
        rtcp_reports_max: 50,
        audio_seconds_max: 60,
    };
    if let Ok(view) = callview::analyze(data, &limits) {
        assert!(view.ladder.len() <= limits.sip_messages_max);
        assert!(view.streams.len() <= limits.streams_max);
        for s in &view.streams {
            assert!(s.intervals.len() <= limits.intervals_max);
            assert!(s.rtcp.len() <= limits.rtcp_reports_max);
            assert_eq!(s.audio.is_some(), s.audio_note.is_none());
        }
        for e in &view.ladder {
            assert!(e.text.len() <= limits.sip_text_bytes_max * 3);
        }
    }
    if let Ok(wav) = callview::wav(data, AudioSelect::Mixed, &limits) {
        assert!(wav.len() >= 44);
        assert!((wav.len() - 44) as u64 <= 2 * 8000 * limits.audio_seconds_max);
    }
});
