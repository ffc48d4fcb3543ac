//! G.711 audio as WAV: each packet's samples placed by its RTP timestamp, then written as
//! 8 kHz mono 16-bit PCM in a RIFF/WAVE file (the canonical 44-byte header: a `fmt ` chunk for
//! PCM, then the `data` chunk).
//!
//! The output is allocated once, at its final size, from the stream placements the analysis
//! pass computed (bounded by `Limits::audio_seconds_max` before anything is allocated); then
//! each stream is written in one more walk over the pcap's frames. Within a stream the first
//! packet to cover a sample wins (a duplicate or a late copy changes nothing), which a bitmap
//! of written samples tracks; streams are added to each other with saturation.

use monitor::rtp::StreamKey;

use crate::frames::{Classifier, Seen, for_each_frame};
use crate::g711::{ALAW_TO_LINEAR, ULAW_TO_LINEAR};
use crate::streams::{PT_PCMA, PT_PCMU, Unwrap};

/// G.711's sampling rate.
pub(crate) const SAMPLE_RATE_HZ: u32 = 8000;
/// Nanoseconds per sample at 8 kHz.
pub(crate) const NS_PER_SAMPLE: i64 = 125_000;
/// The RIFF header, `fmt ` chunk and `data` chunk header of a PCM WAV file.
pub(crate) const WAV_HEADER_BYTES: usize = 44;
const BYTES_PER_SAMPLE: usize = 2;

/// Where one stream's audio goes in the output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    pub key: StreamKey,
    /// The stream's record spans these capture times: its packets are those of its key
    /// between them (a key that closed and opened again is another stream).
    pub first_ns: i64,
    pub last_ns: i64,
    /// The offset (from the first packet's timestamp) of the stream's earliest sample.
    pub min_offset: i64,
    /// The stream's length in samples.
    pub samples: usize,
    /// Where its earliest sample goes in the output.
    pub at: usize,
}

/// A WAV file of `samples` samples of silence.
fn silent_wav(samples: usize) -> Vec<u8> {
    let data_bytes = samples * BYTES_PER_SAMPLE;
    let mut out = Vec::with_capacity(WAV_HEADER_BYTES + data_bytes);
    // The caller has checked that the sizes fit the 32-bit fields.
    let data_len = data_bytes as u32;
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVE");
    out.extend_from_slice(b"fmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    // Format 1: integer PCM; one channel.
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&SAMPLE_RATE_HZ.to_le_bytes());
    out.extend_from_slice(&(SAMPLE_RATE_HZ * BYTES_PER_SAMPLE as u32).to_le_bytes());
    out.extend_from_slice(&(BYTES_PER_SAMPLE as u16).to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    out.resize(WAV_HEADER_BYTES + data_bytes, 0);
    out
}

/// The largest number of samples a WAV file's 32-bit sizes can describe.
pub(crate) const WAV_SAMPLES_MAX: u64 = (u32::MAX as u64 - 36) / BYTES_PER_SAMPLE as u64;

/// Renders `placements` into a WAV of `total_samples` samples (each placement lies within it:
/// `at + samples <= total_samples`).
pub(crate) fn render(pcap: &[u8], placements: &[Placement], total_samples: usize) -> Vec<u8> {
    let mut out = silent_wav(total_samples);
    let mut written = Vec::new();
    for p in placements {
        written.clear();
        written.resize(p.samples.div_ceil(64), 0u64);
        add_stream(pcap, p, &mut out[WAV_HEADER_BYTES..], &mut written);
    }
    out
}

/// Adds one stream's samples to `data` (little-endian 16-bit samples).
fn add_stream(pcap: &[u8], p: &Placement, data: &mut [u8], written: &mut [u64]) {
    let mut classifier = Classifier::new(false);
    let mut unwrap = Unwrap::default();
    // Read errors were reported by the analysis pass, which read the same bytes: what was read
    // before one is played.
    let _ = for_each_frame(pcap, |frame| {
        if frame.ts_ns < p.first_ns || frame.ts_ns > p.last_ns {
            return;
        }
        classifier.frame(frame, &mut |seen| {
            let Seen::Rtp {
                src,
                dst,
                header,
                datagram,
            } = seen
            else {
                return;
            };
            if src != p.key.src || dst != p.key.dst || header.ssrc != p.key.ssrc {
                return;
            }
            // Every packet of the stream moves the timestamps on, whatever it carries.
            let offset = unwrap.offset(header.timestamp);
            let table = match header.payload_type {
                PT_PCMA => &ALAW_TO_LINEAR,
                PT_PCMU => &ULAW_TO_LINEAR,
                // Comfort noise, telephone events and anything else: silence.
                _ => return,
            };
            if frame.is_cut() {
                return;
            }
            let at = usize::from(header.payload_off);
            let Some(payload) = datagram.get(at..at + usize::from(header.payload_len)) else {
                return;
            };
            let first = offset - p.min_offset;
            for (j, &code) in payload.iter().enumerate() {
                let pos = first + j as i64;
                if pos < 0 || pos >= p.samples as i64 {
                    continue;
                }
                let pos = pos as usize;
                let (word, bit) = (pos / 64, 1u64 << (pos % 64));
                if written[word] & bit != 0 {
                    continue;
                }
                written[word] |= bit;
                let b = (p.at + pos) * BYTES_PER_SAMPLE;
                let Some(slot) = data.get_mut(b..b + BYTES_PER_SAMPLE) else {
                    continue;
                };
                let old = i16::from_le_bytes([slot[0], slot[1]]);
                let new = old.saturating_add(table[usize::from(code)]);
                slot.copy_from_slice(&new.to_le_bytes());
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_describes_8_khz_mono_16_bit_pcm() {
        let w = silent_wav(8000);
        assert_eq!(w.len(), 44 + 16000);
        assert_eq!(&w[0..4], b"RIFF");
        assert_eq!(u32::from_le_bytes(w[4..8].try_into().unwrap()), 36 + 16000);
        assert_eq!(&w[8..16], b"WAVEfmt ");
        assert_eq!(u16::from_le_bytes([w[20], w[21]]), 1);
        assert_eq!(u16::from_le_bytes([w[22], w[23]]), 1);
        assert_eq!(u32::from_le_bytes(w[24..28].try_into().unwrap()), 8000);
        assert_eq!(u32::from_le_bytes(w[28..32].try_into().unwrap()), 16000);
        assert_eq!(u16::from_le_bytes([w[32], w[33]]), 2);
        assert_eq!(u16::from_le_bytes([w[34], w[35]]), 16);
        assert_eq!(&w[36..40], b"data");
        assert_eq!(u32::from_le_bytes(w[40..44].try_into().unwrap()), 16000);
    }
}
