//! Latency sketches: a mergeable histogram (HdrHistogram, two significant digits, 1 µs to one
//! hour) per bucket of a latency series, so that p50 and p99 compose across buckets and levels
//! as sums do: the sketch of an hour is the merge of its minutes', and a chart's p99 over a
//! range is read from the merge of its buckets', never an average of percentiles.

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};

/// Smallest and largest latency kept apart, microseconds (values outside are clamped).
pub const LOW_US: u64 = 1;
pub const HIGH_US: u64 = 3_600_000_000;
/// Significant digits: values within 1 % compare equal.
const SIGFIG: u8 = 2;

/// The latencies that fell in one bucket.
#[derive(Debug, Clone)]
pub struct LatencySketch(Histogram<u64>);

impl Default for LatencySketch {
    fn default() -> Self {
        LatencySketch::new()
    }
}

impl LatencySketch {
    pub fn new() -> LatencySketch {
        LatencySketch(
            Histogram::new_with_bounds(LOW_US, HIGH_US, SIGFIG).expect("fixed valid bounds"),
        )
    }

    /// Adds `count` latencies of `seconds` each (not finite or negative: ignored).
    pub fn add(&mut self, seconds: f64, count: u64) {
        if !seconds.is_finite() || seconds < 0.0 || count == 0 {
            return;
        }
        let us = (seconds * 1e6).round().clamp(LOW_US as f64, HIGH_US as f64) as u64;
        // Within the bounds by the clamp; a count overflowing u64 saturates.
        self.0.saturating_record_n(us, count);
    }

    /// Merges the latencies of `o` into this sketch.
    pub fn merge(&mut self, o: &LatencySketch) {
        // Same bounds on both sides: addition cannot fail.
        let _ = self.0.add(&o.0);
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The latency at quantile `q` (0 to 1), seconds; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        (self.count() > 0).then(|| self.0.value_at_quantile(q.clamp(0.0, 1.0)) as f64 / 1e6)
    }

    /// The sketch as stored (HdrHistogram's V2 encoding).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail for a histogram of these bounds.
        let _ = V2Serializer::new().serialize(&self.0, &mut out);
        out
    }

    /// A stored sketch; `None` if the bytes are not one of this module's.
    pub fn from_bytes(bytes: &[u8]) -> Option<LatencySketch> {
        // The V2 header names the histogram's bounds, which size what the decoder allocates:
        // bytes that claim other bounds are refused before anything is allocated for them.
        let be32 = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let be64 = |at: usize| Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        let ours = be32(12)? == u32::from(SIGFIG) && be64(16)? == LOW_US && be64(24)? == HIGH_US;
        if !ours {
            return None;
        }
        let h: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).ok()?;
        Some(LatencySketch(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_sketches_answer_as_the_sketch_of_all_their_latencies() {
        let (mut a, mut b, mut all) = (
            LatencySketch::new(),
            LatencySketch::new(),
            LatencySketch::new(),
        );
        for i in 1..=1000u64 {
            let v = i as f64 / 1000.0; // 1 ms .. 1 s
            if i % 3 == 0 {
                a.add(v, 2)
            } else {
                b.add(v, 2)
            }
            all.add(v, 2);
        }
        a.merge(&b);
        assert_eq!(a.count(), 2000);
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(a.quantile(q), all.quantile(q));
            let exact = q; // the q-quantile of 1 ms .. 1 s in 1 ms steps
            let got = a.quantile(q).unwrap();
            assert!((got - exact).abs() <= exact * 0.01 + 0.001, "p{q}: {got}");
        }
        let back = LatencySketch::from_bytes(&a.to_bytes()).unwrap();
        assert_eq!(back.quantile(0.99), a.quantile(0.99));
        assert_eq!(LatencySketch::new().quantile(0.5), None);
        assert!(LatencySketch::from_bytes(b"not a sketch").is_none());
    }
}
