//! Mean opinion score from the ITU-T G.107 E-model with G.113 codec impairments.
//!
//! `R = R0 - Is - Id - Ie,eff + A`, with G.107's default parameters giving `R0 - Is = 93.2`
//! and the advantage factor `A = 0` (wired network).
//!
//! - Delay impairment `Id`: the simplified form of G.107's `Idd`/`Idte` for default echo
//!   parameters (Cole and Rosenbluth, 2001): `Id = 0.024 d + 0.11 (d - 177.3) H(d - 177.3)` with
//!   `d` the one-way mouth-to-ear delay in ms. A passive monitor at one point cannot see network
//!   delay, so `d` is estimated as the codec's packetization and look-ahead plus a jitter buffer
//!   of twice the stream's mean jitter (at least one 20 ms packet).
//! - Effective equipment impairment (G.107 7.2): `Ie,eff = Ie + (95 - Ie) Ppl / (Ppl / BurstR +
//!   Bpl)` with `Ppl` the packet loss in percent and `BurstR` the burst ratio: 1 for random
//!   loss, `1 / (p + q)` from the stream's own loss pattern (`p` the probability of a loss after
//!   a received packet, `q` of a received packet after a loss).
//! - `Ie` and `Bpl` from G.113 Appendix I: G.711 `Ie = 0, Bpl = 25.1` (with packet loss
//!   concealment); G.729A `Ie = 11, Bpl = 19.0`; G.723.1 (6.3 kbit/s) `Ie = 15, Bpl = 16.1`.
//!   G.722 has values only for the wideband E-model (G.107.1); on this narrowband scale it is
//!   scored with G.711's values.
//! - `R` to MOS (G.107 Annex B): `MOS = 1` for `R < 0`, `4.5` for `R > 100`, else
//!   `1 + 0.035 R + R (R - 60) (100 - R) 7e-6`.

/// Codecs with known impairment factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    G711,
    G722,
    G723,
    G729,
}

impl Codec {
    pub fn from_payload_type(pt: u8) -> Option<Codec> {
        Some(match pt {
            0 | 8 => Codec::G711,
            9 => Codec::G722,
            4 => Codec::G723,
            18 => Codec::G729,
            _ => return None,
        })
    }

    /// (Ie, Bpl) from G.113 Appendix I.
    pub fn impairment(self) -> (f64, f64) {
        match self {
            Codec::G711 | Codec::G722 => (0.0, 25.1),
            Codec::G729 => (11.0, 19.0),
            Codec::G723 => (15.0, 16.1),
        }
    }

    /// Packetization plus algorithmic look-ahead, ms.
    fn codec_delay_ms(self) -> f64 {
        match self {
            Codec::G711 | Codec::G722 => 20.0,
            Codec::G729 => 25.0,
            Codec::G723 => 37.5,
        }
    }
}

/// Burst ratio from received packets, loss bursts (gaps) and packets lost in them.
pub fn burst_ratio(received: u64, bursts: u64, lost: u64) -> f64 {
    if bursts == 0 || lost == 0 || received == 0 {
        return 1.0;
    }
    let p = bursts as f64 / received as f64;
    let q = bursts as f64 / lost as f64;
    1.0 / (p + q)
}

/// The E-model's R factor.
pub fn r_factor(codec: Codec, loss_pct: f64, burst_r: f64, delay_ms: f64) -> f64 {
    let (ie, bpl) = codec.impairment();
    let ppl = loss_pct.clamp(0.0, 100.0);
    let burst_r = if burst_r.is_finite() && burst_r > 0.0 {
        burst_r
    } else {
        1.0
    };
    let ie_eff = ie + (95.0 - ie) * ppl / (ppl / burst_r + bpl);
    let d = delay_ms.max(0.0);
    let id = 0.024 * d + if d > 177.3 { 0.11 * (d - 177.3) } else { 0.0 };
    93.2 - id - ie_eff
}

/// R to MOS (G.107 Annex B).
pub fn r_to_mos(r: f64) -> f64 {
    if r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6
    }
}

/// MOS of a stream with `loss_pct` loss, burst ratio `burst_r` and mean jitter `jitter_ms`.
pub fn mos(codec: Codec, loss_pct: f64, burst_r: f64, jitter_ms: f64) -> f64 {
    let delay = codec.codec_delay_ms() + (2.0 * jitter_ms).max(20.0);
    r_to_mos(r_factor(codec, loss_pct, burst_r, delay))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_g711_scores_about_4_4() {
        let m = mos(Codec::G711, 0.0, 1.0, 0.0);
        // R = 93.2 - 0.024 * 40 = 92.24
        assert!((r_factor(Codec::G711, 0.0, 1.0, 40.0) - 92.24).abs() < 1e-9);
        assert!((m - 4.39).abs() < 0.01, "{m}");
    }

    #[test]
    fn loss_and_bursts_lower_the_score() {
        let clean = mos(Codec::G711, 0.0, 1.0, 0.0);
        let lossy = mos(Codec::G711, 5.0, 1.0, 0.0);
        let bursty = mos(Codec::G711, 5.0, 2.0, 0.0);
        assert!(clean > lossy && lossy > bursty);
        assert!(mos(Codec::G729, 0.0, 1.0, 0.0) < clean);
        assert_eq!(r_to_mos(-5.0), 1.0);
        assert_eq!(r_to_mos(120.0), 4.5);
        assert_eq!(burst_ratio(100, 0, 0), 1.0);
        // one loss after every 20 received, single packets: p = 0.05, q = 1, BurstR < 1
        assert!((burst_ratio(100, 5, 5) - 1.0 / 1.05).abs() < 1e-12);
    }
}
