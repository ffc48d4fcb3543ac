//! SIP over SCTP (RFC 4168): the DATA chunks of an SCTP packet (RFC 9260), several to a
//! packet, their user messages put back together from fragments (B and E flags, consecutive
//! TSNs on one stream), each complete user message that looks like SIP handed on whole (RFC 4168
//! carries one SIP message per user message, so no Content-Length framing is needed).
//!
//! RFC 4168 names no payload protocol identifier and implementations send 0, so a user message
//! is taken for SIP by its start line whatever its PPID and ports, as SIP over UDP is. A DATA
//! chunk retransmitted (a TSN seen lately in that direction) is skipped, as TCP retransmissions
//! are. What does not fit the bounds — messages over `max_message_bytes` or
//! `max_fragments`, a missing fragment, more partial messages than `max_partial_per_association`,
//! associations past `max_associations` or idle past `idle_timeout_ms` — is dropped and counted
//! in [`SctpCounters`]. I-DATA chunks (RFC 8260, interleaved fragments) are counted, not
//! followed.

use std::collections::HashMap;
use std::net::SocketAddr;

/// The SCTP common header: ports, verification tag, checksum.
pub const COMMON_HEADER_BYTES: usize = 12;

const CHUNK_DATA: u8 = 0;
const CHUNK_ABORT: u8 = 6;
const CHUNK_SHUTDOWN_COMPLETE: u8 = 14;
const CHUNK_IDATA: u8 = 64;
/// Chunk header and DATA fields before the user data: TSN, stream, stream sequence, PPID.
const DATA_HEADER_BYTES: usize = 16;
const FLAG_END: u8 = 0x01;
const FLAG_BEGIN: u8 = 0x02;
/// TSNs remembered per direction to recognise retransmitted DATA chunks.
const RECENT_TSNS: usize = 32;

#[derive(Debug, Clone, Copy)]
pub struct SctpLimits {
    /// Association directions followed at once; the least recently active is dropped beyond this
    /// (default 16,384).
    pub max_associations: usize,
    /// Largest user message put back together from fragments (default 256 KiB, as a TCP
    /// stream's buffer).
    pub max_message_bytes: usize,
    /// Fragments of one user message beyond this drop it (default 256).
    pub max_fragments: usize,
    /// User messages being put back together at once in one direction of an association
    /// (default 16).
    pub max_partial_per_association: usize,
    /// A direction without packets for this long is forgotten, with its partial messages
    /// (default 300,000: five minutes, as a TCP stream).
    pub idle_timeout_ms: u64,
}

impl Default for SctpLimits {
    fn default() -> Self {
        SctpLimits {
            max_associations: 16_384,
            max_message_bytes: 256 * 1024,
            max_fragments: 256,
            max_partial_per_association: 16,
            idle_timeout_ms: 300_000,
        }
    }
}

/// What the SCTP decoder saw and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SctpCounters {
    pub packets: u64,
    pub data_chunks: u64,
    /// User messages that are not SIP (Diameter, M3UA, ...).
    pub not_sip: u64,
    /// DATA chunks whose TSN was seen lately in the same direction.
    pub retransmitted_chunks: u64,
    /// Fragmented user messages dropped: too large, too many fragments, a fragment missing,
    /// no room for another partial message, or their association forgotten.
    pub messages_dropped: u64,
    /// Fragments that continue no message being put back together (its start was not captured).
    pub fragments_unmatched: u64,
    /// Chunks whose length runs past the packet or is shorter than their header.
    pub chunks_malformed: u64,
    /// I-DATA chunks (RFC 8260), not followed.
    pub idata_chunks: u64,
    pub associations_evicted: u64,
}

struct Partial {
    stream: u16,
    next_tsn: u32,
    fragments: usize,
    /// Whether the message is SIP (its first fragment says): other protocols' fragments are
    /// followed only to keep their TSNs apart, never copied.
    sip: bool,
    data: Vec<u8>,
}

#[derive(Default)]
struct Direction {
    recent: [u32; RECENT_TSNS],
    recent_len: usize,
    recent_at: usize,
    partial: Vec<Partial>,
    last_ns: i64,
}

impl Direction {
    /// Remembers `tsn`; false when it was already seen (a retransmission).
    fn first_sight(&mut self, tsn: u32) -> bool {
        if self.recent[..self.recent_len].contains(&tsn) {
            return false;
        }
        self.recent[self.recent_at] = tsn;
        self.recent_at = (self.recent_at + 1) % RECENT_TSNS;
        self.recent_len = (self.recent_len + 1).min(RECENT_TSNS);
        true
    }
}

/// Follows SCTP associations that carry SIP.
pub struct SipSctp {
    limits: SctpLimits,
    directions: HashMap<(SocketAddr, SocketAddr), Direction>,
    last_sweep_ns: i64,
    pub counters: SctpCounters,
}

struct DataChunk<'a> {
    flags: u8,
    tsn: u32,
    stream: u16,
    data: &'a [u8],
}

impl SipSctp {
    pub fn new(limits: SctpLimits) -> SipSctp {
        SipSctp {
            limits,
            directions: HashMap::new(),
            last_sweep_ns: i64::MIN,
            counters: SctpCounters::default(),
        }
    }

    /// Association directions followed now.
    pub fn associations(&self) -> usize {
        self.directions.len()
    }

    /// Feeds one SCTP packet's chunks (after the common header); every complete SIP message is
    /// passed to `on_message`.
    pub fn packet(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        mut chunks: &[u8],
        mut on_message: impl FnMut(&[u8]),
    ) {
        self.counters.packets += 1;
        if ts_ns.saturating_sub(self.last_sweep_ns) >= 1_000_000_000 {
            self.last_sweep_ns = ts_ns;
            self.sweep(ts_ns);
        }
        while chunks.len() >= 4 {
            let kind = chunks[0];
            let flags = chunks[1];
            let len = u16::from_be_bytes([chunks[2], chunks[3]]) as usize;
            if len < 4 || len > chunks.len() {
                self.counters.chunks_malformed += 1;
                return;
            }
            let body = &chunks[..len];
            // Chunks are padded to four bytes; the last one's padding may be missing.
            chunks = chunks.get(len.next_multiple_of(4)..).unwrap_or_default();
            match kind {
                CHUNK_DATA if len < DATA_HEADER_BYTES => self.counters.chunks_malformed += 1,
                CHUNK_DATA => {
                    let chunk = DataChunk {
                        flags,
                        tsn: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                        stream: u16::from_be_bytes([body[8], body[9]]),
                        data: &body[DATA_HEADER_BYTES..],
                    };
                    self.data(ts_ns, src, dst, chunk, &mut on_message);
                }
                CHUNK_IDATA => self.counters.idata_chunks += 1,
                CHUNK_ABORT | CHUNK_SHUTDOWN_COMPLETE => {
                    // The association is over: both directions go.
                    for key in [(src, dst), (dst, src)] {
                        if let Some(d) = self.directions.remove(&key) {
                            self.drop_partial(&d);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn data(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        chunk: DataChunk<'_>,
        on_message: &mut impl FnMut(&[u8]),
    ) {
        self.counters.data_chunks += 1;
        let key = (src, dst);
        if !self.directions.contains_key(&key) {
            self.make_room();
        }
        let limits = self.limits;
        let counters = &mut self.counters;
        let dir = self.directions.entry(key).or_default();
        dir.last_ns = ts_ns;
        if !dir.first_sight(chunk.tsn) {
            counters.retransmitted_chunks += 1;
            return;
        }
        let begin = chunk.flags & FLAG_BEGIN != 0;
        let end = chunk.flags & FLAG_END != 0;
        let at = dir.partial.iter().position(|p| p.stream == chunk.stream);
        if begin {
            if let Some(i) = at {
                // A new message on the stream before the last one ended: a fragment was lost.
                dir.partial.swap_remove(i);
                counters.messages_dropped += 1;
            }
            let sip = sip::looks_like_sip(chunk.data);
            if end {
                if sip {
                    on_message(chunk.data);
                } else {
                    counters.not_sip += 1;
                }
                return;
            }
            if dir.partial.len() >= limits.max_partial_per_association {
                counters.messages_dropped += 1;
                return;
            }
            dir.partial.push(Partial {
                stream: chunk.stream,
                next_tsn: chunk.tsn.wrapping_add(1),
                fragments: 1,
                sip,
                data: if sip { chunk.data.to_vec() } else { Vec::new() },
            });
            return;
        }
        let Some(i) = at else {
            counters.fragments_unmatched += 1;
            return;
        };
        let p = &mut dir.partial[i];
        p.fragments += 1;
        let fits = p.next_tsn == chunk.tsn
            && p.fragments <= limits.max_fragments
            && p.data.len() + chunk.data.len() <= limits.max_message_bytes;
        if !fits {
            dir.partial.swap_remove(i);
            counters.messages_dropped += 1;
            return;
        }
        p.next_tsn = chunk.tsn.wrapping_add(1);
        if p.sip {
            p.data.extend_from_slice(chunk.data);
        }
        if end {
            let p = dir.partial.swap_remove(i);
            if p.sip {
                on_message(&p.data);
            } else {
                counters.not_sip += 1;
            }
        }
    }

    /// Evicts the least recently active direction when the table is full.
    fn make_room(&mut self) {
        if self.directions.len() < self.limits.max_associations {
            return;
        }
        if let Some(oldest) = self
            .directions
            .iter()
            .min_by_key(|(_, d)| d.last_ns)
            .map(|(k, _)| *k)
            && let Some(d) = self.directions.remove(&oldest)
        {
            self.counters.associations_evicted += 1;
            self.drop_partial(&d);
        }
    }

    fn sweep(&mut self, now_ns: i64) {
        let idle_ns = self.limits.idle_timeout_ms.saturating_mul(1_000_000) as i64;
        let mut dropped = 0;
        self.directions.retain(|_, d| {
            let keep = now_ns.saturating_sub(d.last_ns) <= idle_ns;
            if !keep {
                dropped += d.partial.len() as u64;
            }
            keep
        });
        self.counters.messages_dropped += dropped;
    }

    fn drop_partial(&mut self, d: &Direction) {
        self.counters.messages_dropped += d.partial.len() as u64;
    }
}

/// SCTP packet builders for tests, fuzz seeds and synthetic captures (no checksums: monitors
/// and tshark do not verify them by default).
pub mod build {
    /// A DATA chunk (padded to four bytes) with the B/E `flags` given.
    pub fn data_chunk(
        flags: u8,
        tsn: u32,
        stream: u16,
        ssn: u16,
        ppid: u32,
        data: &[u8],
    ) -> Vec<u8> {
        let len = super::DATA_HEADER_BYTES + data.len();
        let mut v = vec![super::CHUNK_DATA, flags & 0x0f];
        v.extend_from_slice(&(len as u16).to_be_bytes());
        v.extend_from_slice(&tsn.to_be_bytes());
        v.extend_from_slice(&stream.to_be_bytes());
        v.extend_from_slice(&ssn.to_be_bytes());
        v.extend_from_slice(&ppid.to_be_bytes());
        v.extend_from_slice(data);
        v.resize(len.next_multiple_of(4), 0);
        v
    }

    /// A user message as DATA chunks of at most `max_fragment` bytes each, TSNs from `tsn`.
    pub fn message_chunks(
        tsn: u32,
        stream: u16,
        ssn: u16,
        message: &[u8],
        max_fragment: usize,
    ) -> Vec<Vec<u8>> {
        let parts: Vec<&[u8]> = message.chunks(max_fragment.max(1)).collect();
        let n = parts.len();
        parts
            .iter()
            .enumerate()
            .map(|(i, part)| {
                let flags = if i == 0 { super::FLAG_BEGIN } else { 0 }
                    | if i + 1 == n { super::FLAG_END } else { 0 };
                data_chunk(flags, tsn.wrapping_add(i as u32), stream, ssn, 0, part)
            })
            .collect()
    }

    /// An SCTP packet: the common header (verification tag `vtag`) and `chunks`.
    pub fn packet(src_port: u16, dst_port: u16, vtag: u32, chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&src_port.to_be_bytes());
        v.extend_from_slice(&dst_port.to_be_bytes());
        v.extend_from_slice(&vtag.to_be_bytes());
        v.extend_from_slice(&[0; 4]);
        for c in chunks {
            v.extend_from_slice(c);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sip_msg(n: usize, body: usize) -> Vec<u8> {
        let body = "x".repeat(body);
        format!(
            "MESSAGE sip:a@b SIP/2.0\r\nCall-ID: {n}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn feed(s: &mut SipSctp, packet_chunks: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let a: SocketAddr = "10.0.0.1:5060".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5060".parse().unwrap();
        let packet = build::packet(5060, 5060, 1, packet_chunks);
        let mut got = Vec::new();
        s.packet(0, a, b, &packet[COMMON_HEADER_BYTES..], |m| {
            got.push(m.to_vec())
        });
        got
    }

    #[test]
    fn bundled_and_fragmented_messages_come_out_whole() {
        let mut s = SipSctp::new(SctpLimits::default());
        // Two whole messages bundled in one packet.
        let bundle = vec![
            build::data_chunk(3, 10, 0, 0, 0, &sip_msg(1, 3)),
            build::data_chunk(3, 11, 1, 0, 0, &sip_msg(2, 0)),
        ];
        assert_eq!(feed(&mut s, &bundle), [sip_msg(1, 3), sip_msg(2, 0)]);
        // One message in five fragments over three packets, with a retransmitted middle one.
        let big = sip_msg(3, 500);
        let frags = build::message_chunks(12, 0, 1, &big, 120);
        assert_eq!(frags.len(), 5);
        assert!(feed(&mut s, &frags[..2]).is_empty());
        assert!(feed(&mut s, &frags[1..3]).is_empty());
        assert_eq!(feed(&mut s, &frags[3..]), [big]);
        assert_eq!(s.counters.retransmitted_chunks, 1);
        // The whole bundle again: a retransmission, nothing new.
        assert!(feed(&mut s, &bundle).is_empty());
        assert_eq!(s.counters.messages_dropped, 0);
    }

    #[test]
    fn what_is_out_of_bounds_is_counted() {
        let limits = SctpLimits {
            max_message_bytes: 300,
            ..SctpLimits::default()
        };
        let mut s = SipSctp::new(limits);
        let frags = build::message_chunks(1, 0, 0, &sip_msg(1, 500), 100);
        assert!(feed(&mut s, &frags).is_empty());
        assert_eq!(s.counters.messages_dropped, 1);
        assert_eq!(s.counters.fragments_unmatched, frags.len() as u64 - 4);
        // A missing middle fragment drops the message.
        let frags = build::message_chunks(100, 0, 1, &sip_msg(2, 150), 100);
        assert_eq!(frags.len(), 3);
        assert!(feed(&mut s, &[frags[0].clone(), frags[2].clone()]).is_empty());
        assert_eq!(s.counters.messages_dropped, 2);
        // Not SIP: counted, never buffered.
        assert!(
            feed(
                &mut s,
                &[build::data_chunk(3, 200, 0, 0, 46, b"\x01\0\0\x14")]
            )
            .is_empty()
        );
        assert_eq!(s.counters.not_sip, 1);
        // A chunk longer than the packet stops the walk.
        let mut bad = build::data_chunk(3, 300, 0, 0, 0, &sip_msg(4, 0));
        bad[3] = 0xff;
        assert!(feed(&mut s, &[bad]).is_empty());
        assert_eq!(s.counters.chunks_malformed, 1);
    }
}
