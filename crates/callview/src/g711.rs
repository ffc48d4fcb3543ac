//! G.711 (ITU-T, 1988) decoding: each 8-bit code word to the 16-bit linear sample it stands for.
//!
//! Both laws split the magnitude into 8 segments of 16 steps each; a code word carries a sign
//! bit, a 3-bit segment number and a 4-bit step. Decoding gives the middle of the step's
//! interval (the spec's "decoder output value"), then scales the law's linear range to 16 bits:
//! A-law's 13 bits by 8, µ-law's 14 bits by 4.
//!
//! The tables are computed here from those rules, at compile time, not copied.

/// A-law to linear. The even bits of an A-law code word travel inverted (the spec's
/// alternate-bit inversion, XOR 0x55); a set sign bit means a positive sample. Segments 0 and
/// 1 share a step of 2 (13-bit units) and each later segment doubles it; the middle of step
/// `s` of segment `g ≥ 1` is `(2 s + 33) · 2^(g-1)`, of segment 0 `2 s + 1`.
const fn alaw_sample(code: u8) -> i16 {
    let v = code ^ 0x55;
    let segment = ((v >> 4) & 0x07) as i32;
    let step = (v & 0x0f) as i32;
    let middle_13bit = if segment == 0 {
        2 * step + 1
    } else {
        (2 * step + 33) << (segment - 1)
    };
    let linear = middle_13bit << 3;
    if v & 0x80 != 0 {
        linear as i16
    } else {
        -linear as i16
    }
}

/// µ-law to linear. Every bit of a µ-law code word travels inverted; after inverting, a set
/// sign bit means a negative sample. The segments are built on a bias of 33 (14-bit units) so
/// that they meet at zero: the middle of step `s` of segment `g` is `(2 s + 33) · 2^g - 33`.
const fn ulaw_sample(code: u8) -> i16 {
    let v = !code;
    let segment = ((v >> 4) & 0x07) as i32;
    let step = (v & 0x0f) as i32;
    let magnitude_14bit = ((2 * step + 33) << segment) - 33;
    let linear = magnitude_14bit << 2;
    if v & 0x80 != 0 {
        -linear as i16
    } else {
        linear as i16
    }
}

const fn alaw_table() -> [i16; 256] {
    let mut t = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = alaw_sample(i as u8);
        i += 1;
    }
    t
}

const fn ulaw_table() -> [i16; 256] {
    let mut t = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = ulaw_sample(i as u8);
        i += 1;
    }
    t
}

/// Linear sample of each A-law code word (PCMA, RTP payload type 8).
pub static ALAW_TO_LINEAR: [i16; 256] = alaw_table();
/// Linear sample of each µ-law code word (PCMU, RTP payload type 0).
pub static ULAW_TO_LINEAR: [i16; 256] = ulaw_table();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_of_the_spec() {
        // A-law: 0xD5 (0x80 after the even-bit inversion) is the smallest positive step.
        assert_eq!(ALAW_TO_LINEAR[0xD5], 8);
        assert_eq!(ALAW_TO_LINEAR[0x55], -8);
        // The largest magnitudes: segment 7, step 15.
        assert_eq!(ALAW_TO_LINEAR[0xAA], 32256);
        assert_eq!(ALAW_TO_LINEAR[0x2A], -32256);
        // µ-law: 0xFF and 0x7F are the two zeros; 0x00 the most negative, 0x80 the most positive.
        assert_eq!(ULAW_TO_LINEAR[0xFF], 0);
        assert_eq!(ULAW_TO_LINEAR[0x7F], 0);
        assert_eq!(ULAW_TO_LINEAR[0x00], -32124);
        assert_eq!(ULAW_TO_LINEAR[0x80], 32124);
        // Segment 1, step 0 of µ-law: (2·0 + 33)·2 - 33 = 33 in 14 bits, 132 in 16.
        assert_eq!(ULAW_TO_LINEAR[0xEF], 132);
    }

    #[test]
    fn tables_are_symmetric_and_monotonic_within_a_sign() {
        for code in 0..=255u8 {
            assert_eq!(
                ALAW_TO_LINEAR[code as usize],
                -ALAW_TO_LINEAR[(code ^ 0x80) as usize]
            );
            assert_eq!(
                ULAW_TO_LINEAR[code as usize],
                -ULAW_TO_LINEAR[(code ^ 0x80) as usize]
            );
        }
        // Positive A-law codes in order of magnitude: 0x80..=0xFF once the inversion is undone.
        let alaw: Vec<i16> = (0x80..=0xFFu8)
            .map(|v| ALAW_TO_LINEAR[(v ^ 0x55) as usize])
            .collect();
        assert!(alaw.windows(2).all(|w| w[0] < w[1]), "{alaw:?}");
        // Positive µ-law codes from 0xFF (zero) down to 0x80 (largest).
        let ulaw: Vec<i16> = (0x80..=0xFFu8)
            .rev()
            .map(|c| ULAW_TO_LINEAR[c as usize])
            .collect();
        assert!(ulaw.windows(2).all(|w| w[0] < w[1]), "{ulaw:?}");
    }
}
