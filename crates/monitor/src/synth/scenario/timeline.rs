//! A scenario's packets in time order: SIP messages are kept whole (a few dozen per second of
//! capture at most), RTP streams only as runs (start, count, addresses), expanded packet by
//! packet while writing, so a day of 10,000 calls holds its signalling in memory, never its
//! media.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;

use crate::pcap::PcapWriter;
use crate::synth::packet;

/// One RTP stream of G.711: `count` packets every `ptime_ms` from `start_ns`.
#[derive(Debug, Clone)]
pub(super) struct RtpRun {
    pub start_ns: i64,
    pub count: u32,
    pub ptime_ms: u32,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ssrc: u32,
    pub seq0: u16,
    pub ts0: u32,
    /// 0 (PCMU) or 8 (PCMA).
    pub pt: u8,
}

impl RtpRun {
    fn at_ns(&self, n: u32) -> i64 {
        self.start_ns + i64::from(n) * i64::from(self.ptime_ms) * 1_000_000
    }
}

/// What a written capture holds, counted while writing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketCounts {
    pub packets: u64,
    pub sip_messages: u64,
    pub rtp_packets: u64,
}

#[derive(Default)]
pub(super) struct Timeline {
    /// (time, order of insertion, source, destination, text).
    sip: Vec<(i64, u32, SocketAddr, SocketAddr, Box<str>)>,
    runs: Vec<RtpRun>,
}

impl Timeline {
    pub fn sip(&mut self, t_ns: i64, src: SocketAddr, dst: SocketAddr, text: String) {
        let order = self.sip.len() as u32;
        self.sip.push((t_ns, order, src, dst, text.into()));
    }

    pub fn rtp(&mut self, run: RtpRun) {
        if run.count > 0 {
            self.runs.push(run);
        }
    }

    /// Writes every packet in time order (a SIP message before RTP of the same instant) as an
    /// Ethernet, microsecond pcap.
    pub fn write(mut self, path: &Path) -> io::Result<PacketCounts> {
        self.sip.sort_unstable_by_key(|m| (m.0, m.1));
        self.runs.sort_by_key(|r| r.start_ns);
        let file = io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        let mut w = PcapWriter::new(file, 1, false)?;
        let mut counts = PacketCounts::default();
        let mut frame = Vec::with_capacity(2048);
        let mut rtp = Vec::with_capacity(256);
        // Runs under way, by their next packet's time; runs join it when their time comes.
        let mut heap: BinaryHeap<Reverse<(i64, u32, u32)>> = BinaryHeap::new();
        let (mut next_sip, mut next_run) = (0, 0);
        loop {
            let t_sip = self.sip.get(next_sip).map_or(i64::MAX, |m| m.0);
            let t_heap = heap.peek().map_or(i64::MAX, |Reverse(e)| e.0);
            if let Some(r) = self.runs.get(next_run)
                && r.start_ns <= t_sip.min(t_heap)
            {
                heap.push(Reverse((r.start_ns, next_run as u32, 0)));
                next_run += 1;
                continue;
            }
            if t_sip == i64::MAX && t_heap == i64::MAX {
                break;
            }
            frame.clear();
            if t_sip <= t_heap {
                let (t, _, src, dst, text) = &self.sip[next_sip];
                packet::write_ethernet_udp(&mut frame, *src, *dst, text.as_bytes());
                w.write_packet(*t, &frame)?;
                counts.sip_messages += 1;
                next_sip += 1;
            } else {
                let Some(Reverse((t, idx, n))) = heap.pop() else {
                    break;
                };
                let r = &self.runs[idx as usize];
                let seq = r.seq0.wrapping_add(n as u16);
                let ts = r.ts0.wrapping_add(n * r.ptime_ms * 8);
                let fill = if r.pt == 0 { 0xff } else { 0xd5 };
                let samples = (r.ptime_ms * 8) as usize;
                rtp.clear();
                packet::write_rtp(&mut rtp, r.pt, n == 0, seq, ts, r.ssrc, samples, fill);
                packet::write_ethernet_udp(&mut frame, r.src, r.dst, &rtp);
                w.write_packet(t, &frame)?;
                counts.rtp_packets += 1;
                if n + 1 < r.count {
                    heap.push(Reverse((r.at_ns(n + 1), idx, n + 1)));
                }
            }
            counts.packets += 1;
        }
        let mut inner = w.into_inner();
        io::Write::flush(&mut inner)?;
        Ok(counts)
    }
}
