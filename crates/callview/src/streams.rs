//! Each RTP stream as the pass follows it: after every one of its packets has gone through the
//! monitor, the stream's running figures are read back from the monitor
//! (`Monitor::open_stream`), and the seconds of the stream are cut from those readings; RTCP
//! report blocks are put on the stream their SSRC names; and what audio the stream holds is
//! noted (its timestamps' span, which packets carry G.711, which were cut short).
//!
//! Reading after every packet rather than only at second boundaries gives the same interval
//! totals (the figures move only with the stream's own packets) and, besides, the highest
//! jitter within each second and the mean of its readings.

use std::collections::HashMap;
use std::net::SocketAddr;

use monitor::Monitor;
use monitor::rtp::{ReportBlock, RtpHeader, RtpStream, StreamKey, rtcp_report_blocks};

use crate::{Interval, Limits, RtcpPoint};

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Nanoseconds per second: the length of an interval.
const INTERVAL_NS: i64 = 1_000_000_000;

/// Samples assumed for a packet whose own length does not say (comfort noise, a telephone
/// event, a packet cut short) until the stream's G.711 packets tell: 20 ms at 8 kHz, RFC 3551's
/// default packetization for G.711.
pub(crate) const DEFAULT_PACKET_SAMPLES: i64 = 160;

/// RTP payload types of G.711 (RFC 3551 table 4).
pub(crate) const PT_PCMU: u8 = 0;
pub(crate) const PT_PCMA: u8 = 8;

/// A stream's figures as the monitor holds them after one of its packets.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    packets: u64,
    /// Wireshark's running interarrival jitter.
    jitter_ms: f64,
    /// The RFC 3550 view, which feeds the E-model.
    expected: u64,
    seq_lost: i64,
    received: u64,
    loss_bursts: u64,
    gap_packets: u64,
}

impl Reading {
    fn of(s: &RtpStream) -> Reading {
        Reading {
            packets: s.packets,
            jitter_ms: s.wireshark.jitter_ms,
            expected: s.sequence.expected(),
            seq_lost: s.sequence.lost(),
            received: s.sequence.received,
            loss_bursts: s.sequence.loss_bursts,
            gap_packets: s.sequence.gap_packets,
        }
    }
}

/// The E-model's inputs of one interval, kept until the stream's codec is known (the record's
/// main payload type, at the end).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MosInput {
    pub loss_pct: f64,
    pub burst_ratio: f64,
    pub mean_jitter_ms: f64,
    /// The interval had packets (an empty second has no score).
    pub scored: bool,
}

/// The second being filled.
#[derive(Debug, Clone, Copy)]
struct OpenInterval {
    index: u64,
    /// The reading at the end of the previous second (all zero before the first packet).
    start: Reading,
    max_jitter_ms: f64,
    jitter_sum_ms: f64,
    readings: u32,
}

impl OpenInterval {
    fn new(index: u64, start: Reading) -> OpenInterval {
        OpenInterval {
            index,
            start,
            max_jitter_ms: start.jitter_ms,
            jitter_sum_ms: 0.0,
            readings: 0,
        }
    }
}

/// RTP timestamps made monotonic: each timestamp's distance from the highest one so far, read
/// as a signed 32-bit number (RFC 3550's wrap-around arithmetic), gives its extended value;
/// offsets count from the stream's first packet (0).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unwrap {
    started: bool,
    highest_ts: u32,
    highest: i64,
}

impl Unwrap {
    /// The offset in samples of timestamp `ts` from the first packet's.
    pub(crate) fn offset(&mut self, ts: u32) -> i64 {
        if !self.started {
            self.started = true;
            self.highest_ts = ts;
            return 0;
        }
        let step = i64::from(ts.wrapping_sub(self.highest_ts) as i32);
        let ext = self.highest + step;
        if step > 0 {
            self.highest = ext;
            self.highest_ts = ts;
        }
        ext
    }
}

/// What a stream's packets say about its audio.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AudioFacts {
    unwrap: Unwrap,
    pub packets: u64,
    /// Packets of payload type 0 or 8 with a payload.
    pub g711_packets: u64,
    /// Packets captured shorter than they were on the wire.
    pub cut_packets: u64,
    /// The earliest sample and one past the latest, as offsets from the first packet's
    /// timestamp: a packet covers its own samples (G.711: one per payload byte), any other
    /// packet the samples of the stream's last G.711 packet.
    pub min_offset: i64,
    pub max_end: i64,
    packet_samples: i64,
}

impl Default for AudioFacts {
    fn default() -> Self {
        AudioFacts {
            unwrap: Unwrap::default(),
            packets: 0,
            g711_packets: 0,
            cut_packets: 0,
            min_offset: 0,
            max_end: 0,
            packet_samples: DEFAULT_PACKET_SAMPLES,
        }
    }
}

impl AudioFacts {
    fn packet(&mut self, h: &RtpHeader, cut: bool) {
        let offset = self.unwrap.offset(h.timestamp);
        self.packets += 1;
        if cut {
            self.cut_packets += 1;
        }
        let g711 = (h.payload_type == PT_PCMU || h.payload_type == PT_PCMA) && h.payload_len > 0;
        let samples = if g711 && !cut {
            self.g711_packets += 1;
            self.packet_samples = i64::from(h.payload_len);
            self.packet_samples
        } else {
            self.packet_samples
        };
        if self.packets == 1 {
            self.min_offset = offset;
            self.max_end = offset + samples;
        } else {
            self.min_offset = self.min_offset.min(offset);
            self.max_end = self.max_end.max(offset + samples);
        }
    }

    /// Samples from the earliest to one past the latest.
    pub(crate) fn samples(&self) -> i64 {
        self.max_end - self.min_offset
    }
}

/// One stream (one record of the monitor: a key that closes and opens again is two).
pub(crate) struct Tracker {
    pub key: StreamKey,
    /// The monitor's `first_ns` of the stream: with the key, what names its record.
    pub first_ns: i64,
    open: OpenInterval,
    last: Reading,
    pub intervals: Vec<Interval>,
    pub mos_inputs: Vec<MosInput>,
    pub intervals_left_out: u64,
    pub rtcp: Vec<RtcpPoint>,
    pub rtcp_left_out: u64,
    pub audio: AudioFacts,
}

impl Tracker {
    pub(crate) fn new(key: StreamKey, first_ns: i64) -> Tracker {
        Tracker {
            key,
            first_ns,
            open: OpenInterval::new(0, Reading::default()),
            last: Reading::default(),
            intervals: Vec::new(),
            mos_inputs: Vec::new(),
            intervals_left_out: 0,
            rtcp: Vec::new(),
            rtcp_left_out: 0,
            audio: AudioFacts::default(),
        }
    }

    /// One packet of the stream, `now` the monitor's figures after it.
    fn packet(&mut self, ts_ns: i64, now: Reading, intervals_max: usize) {
        // A frame stamped before an earlier one (an unsorted capture) stays in the current
        // second: seconds only move forward.
        let since = ts_ns.saturating_sub(self.first_ns).max(0);
        let index = ((since / INTERVAL_NS) as u64).max(self.open.index);
        if index > self.open.index {
            self.close(intervals_max);
            // Seconds without a packet of the stream: nothing moved.
            let empty = index - self.open.index - 1;
            let room = (intervals_max.saturating_sub(self.intervals.len()) as u64).min(empty);
            for k in 1..=room {
                self.push(
                    Interval {
                        t_s: (self.open.index + k) as f64,
                        packets: 0,
                        lost: 0,
                        jitter_ms: self.last.jitter_ms,
                        max_jitter_ms: self.last.jitter_ms,
                        loss_pct: 0.0,
                        mos: None,
                    },
                    MosInput {
                        loss_pct: 0.0,
                        burst_ratio: 1.0,
                        mean_jitter_ms: self.last.jitter_ms,
                        scored: false,
                    },
                    intervals_max,
                );
            }
            self.intervals_left_out += empty - room;
            self.open = OpenInterval::new(index, self.last);
        }
        let o = &mut self.open;
        o.max_jitter_ms = o.max_jitter_ms.max(now.jitter_ms);
        o.jitter_sum_ms += now.jitter_ms;
        o.readings += 1;
        self.last = now;
    }

    fn push(&mut self, interval: Interval, mos: MosInput, intervals_max: usize) {
        if self.intervals.len() < intervals_max {
            self.intervals.push(interval);
            self.mos_inputs.push(mos);
        } else {
            self.intervals_left_out += 1;
        }
    }

    /// Closes the open second with the last reading.
    fn close(&mut self, intervals_max: usize) {
        let (o, end) = (self.open, self.last);
        let expected = end.expected.saturating_sub(o.start.expected);
        let seq_lost = (end.seq_lost - o.start.seq_lost).max(0);
        let loss_pct = if expected == 0 {
            0.0
        } else {
            (100.0 * seq_lost as f64 / expected as f64).clamp(0.0, 100.0)
        };
        let burst_ratio = monitor::mos::burst_ratio(
            end.received.saturating_sub(o.start.received),
            end.loss_bursts.saturating_sub(o.start.loss_bursts),
            end.gap_packets.saturating_sub(o.start.gap_packets),
        );
        let mean_jitter_ms = if o.readings == 0 {
            end.jitter_ms
        } else {
            o.jitter_sum_ms / f64::from(o.readings)
        };
        let packets = end.packets.saturating_sub(o.start.packets);
        self.push(
            Interval {
                t_s: o.index as f64,
                packets,
                lost: seq_lost,
                jitter_ms: end.jitter_ms,
                max_jitter_ms: o.max_jitter_ms,
                loss_pct,
                mos: None,
            },
            MosInput {
                loss_pct,
                burst_ratio,
                mean_jitter_ms,
                scored: packets > 0,
            },
            intervals_max,
        );
    }

    /// The E-model score of each interval, with the stream's codec (from its record): `None`
    /// for a video stream, a codec the E-model has no factors for, and empty seconds.
    pub(crate) fn score(&mut self, record: &RtpStream) {
        let codec = (record.media != monitor::rtp::Media::Video)
            .then(|| record.main_payload_type())
            .flatten()
            .and_then(monitor::mos::Codec::from_payload_type);
        let Some(codec) = codec else { return };
        for (i, m) in self.intervals.iter_mut().zip(&self.mos_inputs) {
            if m.scored {
                i.mos = Some(monitor::mos::mos(
                    codec,
                    m.loss_pct,
                    m.burst_ratio,
                    m.mean_jitter_ms,
                ));
            }
        }
    }
}

/// Every stream the pass follows.
pub(crate) struct Trackers {
    pub list: Vec<Tracker>,
    by_key: FastMap<StreamKey, usize>,
    /// The latest stream of each SSRC, as the monitor matches RTCP report blocks.
    by_ssrc: FastMap<u32, usize>,
    streams_max: usize,
    intervals_max: usize,
    rtcp_reports_max: usize,
    /// RTCP report blocks about no stream followed here.
    pub rtcp_unmatched: u64,
    blocks: Vec<ReportBlock>,
}

impl Trackers {
    pub(crate) fn new(limits: &Limits) -> Trackers {
        Trackers {
            list: Vec::new(),
            by_key: FastMap::default(),
            by_ssrc: FastMap::default(),
            streams_max: limits.streams_max,
            intervals_max: limits.intervals_max,
            rtcp_reports_max: limits.rtcp_reports_max,
            rtcp_unmatched: 0,
            blocks: Vec::new(),
        }
    }

    /// An RTP packet the monitor has just been fed: it counts for the stream the monitor holds
    /// open under its key (none: the monitor did not take it as RTP).
    pub(crate) fn rtp(
        &mut self,
        monitor: &Monitor,
        ts_ns: i64,
        key: StreamKey,
        h: &RtpHeader,
        cut: bool,
    ) {
        let Some(s) = monitor.open_stream(&key) else {
            return;
        };
        let at = match self.by_key.get(&key) {
            Some(&i) if self.list[i].first_ns == s.first_ns => i,
            _ => {
                if self.list.len() >= self.streams_max {
                    // Its record is counted as left out of the view at the end.
                    return;
                }
                self.list.push(Tracker::new(key, s.first_ns));
                let i = self.list.len() - 1;
                self.by_key.insert(key, i);
                self.by_ssrc.insert(key.ssrc, i);
                i
            }
        };
        let t = &mut self.list[at];
        t.packet(ts_ns, Reading::of(s), self.intervals_max);
        t.audio.packet(h, cut);
    }

    /// An RTCP packet: each SR/RR report block goes to the stream the monitor gives it: the
    /// one on the packet's path, else the latest of its SSRC
    /// (`monitor::rtp::rtcp_reported_streams`).
    pub(crate) fn rtcp(
        &mut self,
        monitor: &Monitor,
        ts_ns: i64,
        from: SocketAddr,
        to: SocketAddr,
        datagram: &[u8],
    ) {
        let mut blocks = std::mem::take(&mut self.blocks);
        blocks.clear();
        rtcp_report_blocks(datagram, &mut blocks);
        for b in &blocks {
            let on_path = monitor::rtp::rtcp_reported_streams(from, to, b.ssrc)
                .iter()
                .find_map(|k| {
                    let &i = self.by_key.get(k)?;
                    monitor.open_stream(k).is_some().then_some(i)
                });
            let Some(i) = on_path.or_else(|| self.by_ssrc.get(&b.ssrc).copied()) else {
                self.rtcp_unmatched += 1;
                continue;
            };
            let t = &mut self.list[i];
            // As the monitor: a block counts for its SSRC's stream while that is open.
            let Some(s) = monitor
                .open_stream(&t.key)
                .filter(|s| s.first_ns == t.first_ns)
            else {
                self.rtcp_unmatched += 1;
                continue;
            };
            if t.rtcp.len() >= self.rtcp_reports_max {
                t.rtcp_left_out += 1;
                continue;
            }
            // The jitter in ms at the clock the monitor uses for the stream now (as its own
            // RTCP figures do); unknown without one.
            let clock_rate = s.clock_rate;
            t.rtcp.push(RtcpPoint {
                ts_us: ts_ns.div_euclid(1000),
                from: from.to_string(),
                reporter_ssrc: b.reporter_ssrc,
                fraction_lost_pct: f64::from(b.fraction_lost) * 100.0 / 256.0,
                cumulative_lost: i64::from(b.cumulative_lost),
                highest_seq: b.highest_seq,
                jitter_ms: (clock_rate != 0)
                    .then(|| f64::from(b.jitter) * 1000.0 / f64::from(clock_rate)),
            });
        }
        self.blocks = blocks;
    }

    /// Closes every stream's last second.
    pub(crate) fn close_all(&mut self) {
        for t in &mut self.list {
            if t.open.readings > 0 {
                t.close(self.intervals_max);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_unwrap_across_the_wrap_and_backwards() {
        let mut u = Unwrap::default();
        assert_eq!(u.offset(u32::MAX - 159), 0);
        assert_eq!(u.offset(0), 160);
        assert_eq!(u.offset(160), 320);
        // A late packet: before the highest, after the wrap.
        assert_eq!(u.offset(u32::MAX - 159), 0);
        assert_eq!(u.offset(480), 640);
        // Before the first packet.
        assert_eq!(u.offset(u32::MAX - 319), -160);
    }
}
