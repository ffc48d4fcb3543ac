//! TCP stream reassembly for SIP: segments are put in sequence order (retransmissions and
//! overlaps trimmed, out-of-order segments held briefly) and the byte stream is cut into SIP
//! messages by their Content-Length (RFC 3261 18.3), or, for SIP over WebSocket (RFC 7118), by
//! WebSocket frames ([`crate::websocket`]) after an HTTP Upgrade handshake (or from the first
//! data frame that carries SIP, when the capture starts after the handshake). Several messages
//! per segment and one message over many segments both work. Every stream's buffer, its held
//! segments, the number of streams and their idle time are bounded; a WebSocket message is
//! bounded by the stream buffer's size.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::decode::{TCP_FIN, TCP_RST, TCP_SYN};
use crate::websocket::{self, WsCounters, WsStream};

#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    /// Streams followed at once; the least recently active is dropped beyond this.
    pub max_streams: usize,
    /// Unframed bytes kept per stream; a stream beyond this is resynchronised.
    pub max_buffer_bytes: usize,
    /// Out-of-order segments held per stream.
    pub max_pending_segments: usize,
    /// A stream without segments for this long is forgotten.
    pub idle_timeout_ms: u64,
}

impl Default for TcpLimits {
    fn default() -> Self {
        TcpLimits {
            max_streams: 16_384,
            max_buffer_bytes: 256 * 1024,
            max_pending_segments: 64,
            idle_timeout_ms: 300_000,
        }
    }
}

/// How a stream's bytes are cut into SIP messages.
#[derive(Debug)]
enum Framing {
    /// SIP messages back to back, each by its Content-Length.
    Sip,
    /// An HTTP Upgrade request or response, whose end is awaited.
    Handshake,
    /// WebSocket frames, one SIP message per WebSocket message.
    WebSocket(WsStream),
}

impl Framing {
    /// How a stream whose first captured bytes are `payload` is framed; `None`: not SIP.
    fn recognise(payload: &[u8]) -> Option<Framing> {
        if sip::looks_like_sip(payload) {
            Some(Framing::Sip)
        } else if websocket::looks_like_http_upgrade_start(payload)
            && payload
                .windows(9)
                .any(|w| w.eq_ignore_ascii_case(b"websocket"))
        {
            Some(Framing::Handshake)
        } else if websocket::starts_with_sip_frame(payload) {
            Some(Framing::WebSocket(WsStream::default()))
        } else {
            None
        }
    }
}

struct Stream {
    /// Sequence number of the next byte expected; None until a SIP start is seen.
    next_seq: Option<u32>,
    buf: Vec<u8>,
    pending: Vec<(u32, Vec<u8>)>,
    last_ns: i64,
    framing: Framing,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    pub segments: u64,
    pub retransmitted_bytes: u64,
    pub resyncs: u64,
    pub streams_evicted: u64,
    /// SIP over WebSocket.
    pub websocket: WsCounters,
}

/// Follows TCP streams that carry SIP.
pub struct SipTcp {
    limits: TcpLimits,
    streams: HashMap<(SocketAddr, SocketAddr), Stream>,
    last_sweep_ns: i64,
    pub counters: TcpCounters,
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl SipTcp {
    pub fn new(limits: TcpLimits) -> SipTcp {
        SipTcp {
            limits,
            streams: HashMap::new(),
            last_sweep_ns: i64::MIN,
            counters: TcpCounters::default(),
        }
    }

    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Feeds one segment; every complete SIP message is passed to `on_message`.
    #[allow(clippy::too_many_arguments)]
    pub fn segment(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        flags: u8,
        payload: &[u8],
        mut on_message: impl FnMut(&[u8]),
    ) {
        self.counters.segments += 1;
        if ts_ns.saturating_sub(self.last_sweep_ns) >= 1_000_000_000 {
            self.last_sweep_ns = ts_ns;
            let idle_ns = self.limits.idle_timeout_ms as i64 * 1_000_000;
            self.streams.retain(|_, s| ts_ns - s.last_ns <= idle_ns);
        }
        let key = (src, dst);
        if flags & TCP_RST != 0 {
            self.streams.remove(&key);
            return;
        }
        let seq = if flags & TCP_SYN != 0 {
            seq.wrapping_add(1)
        } else {
            seq
        };
        if payload.is_empty() {
            if flags & TCP_FIN != 0 {
                self.streams.remove(&key);
            }
            return;
        }
        if !self.streams.contains_key(&key) {
            let Some(framing) = Framing::recognise(payload) else {
                return;
            };
            if self.streams.len() >= self.limits.max_streams
                && let Some(oldest) = self
                    .streams
                    .iter()
                    .min_by_key(|(_, s)| s.last_ns)
                    .map(|(k, _)| *k)
            {
                self.streams.remove(&oldest);
                self.counters.streams_evicted += 1;
            }
            if matches!(framing, Framing::WebSocket(_)) {
                self.counters.websocket.streams += 1;
            }
            self.streams.insert(
                key,
                Stream {
                    next_seq: None,
                    buf: Vec::new(),
                    pending: Vec::new(),
                    last_ns: ts_ns,
                    framing,
                },
            );
        }
        let limits = self.limits;
        let counters = &mut self.counters;
        let s = self.streams.get_mut(&key).expect("stream just inserted");
        s.last_ns = ts_ns;
        if s.next_seq.is_none()
            && matches!(s.framing, Framing::WebSocket(_))
            && !websocket::starts_with_sip_frame(payload)
        {
            // Framing was lost: wait for a segment that starts with a frame.
            return;
        }
        let next = *s.next_seq.get_or_insert(seq);
        if seq_lt(next, seq) {
            // A gap: hold the segment until the missing bytes come.
            if s.pending.len() >= limits.max_pending_segments {
                resync(s, counters);
            } else if !s.pending.iter().any(|(q, _)| *q == seq) {
                s.pending.push((seq, payload.to_vec()));
            }
        } else {
            append(s, seq, payload, counters);
            // Drain held segments that now fit.
            loop {
                let next = s.next_seq.expect("set above");
                let Some(i) = s.pending.iter().position(|(q, _)| !seq_lt(next, *q)) else {
                    break;
                };
                let (q, data) = s.pending.swap_remove(i);
                append(s, q, &data, counters);
            }
        }
        if s.buf.len() > limits.max_buffer_bytes {
            resync(s, counters);
        }
        let used = match s.framing {
            Framing::Sip => cut_sip(&s.buf, counters, &mut on_message),
            Framing::Handshake => match websocket::handshake(&s.buf) {
                None => 0,
                Some((end, true)) => {
                    counters.websocket.streams += 1;
                    let mut ws = WsStream::default();
                    let used = end
                        + ws_frames(&mut ws, &s.buf[end..], limits, counters, &mut on_message)
                            .unwrap_or_else(|()| s.buf.len() - end);
                    s.framing = Framing::WebSocket(ws);
                    used
                }
                Some((_, false)) => {
                    // A WebSocket for something else than SIP.
                    self.streams.remove(&key);
                    return;
                }
            },
            Framing::WebSocket(ref mut ws) => {
                match ws_frames(ws, &s.buf, limits, counters, &mut on_message) {
                    Ok(n) => n,
                    Err(()) => {
                        resync(s, counters);
                        0
                    }
                }
            }
        };
        s.buf.drain(..used);
        if flags & TCP_FIN != 0 {
            self.streams.remove(&key);
        }
    }
}

/// Reads the whole WebSocket frames at the start of `buf`; `Err` when framing is lost.
fn ws_frames(
    ws: &mut WsStream,
    buf: &[u8],
    limits: TcpLimits,
    counters: &mut TcpCounters,
    on_message: &mut impl FnMut(&[u8]),
) -> Result<usize, ()> {
    ws.frames(
        buf,
        limits.max_buffer_bytes,
        &mut counters.websocket,
        on_message,
    )
    .map_err(|_| counters.websocket.resyncs += 1)
}

/// Cuts the complete SIP messages at the start of `buf` by their Content-Length; returns the
/// bytes used.
fn cut_sip(buf: &[u8], counters: &mut TcpCounters, on_message: &mut impl FnMut(&[u8])) -> usize {
    {
        let mut used = 0;
        loop {
            match sip::message_len(&buf[used..]) {
                Ok(Some(n)) => {
                    on_message(&buf[used..used + n]);
                    used += n;
                }
                Ok(None) => break,
                Err(_) => {
                    // Not SIP framing: skip to the next line that starts a SIP message.
                    counters.resyncs += 1;
                    let rest = &buf[used..];
                    let skip = (1..rest.len())
                        .find(|&i| rest[i - 1] == b'\n' && sip::looks_like_sip(&rest[i..]))
                        .unwrap_or(rest.len());
                    used += skip;
                }
            }
        }
        used
    }
}

fn append(s: &mut Stream, seq: u32, payload: &[u8], counters: &mut TcpCounters) {
    let next = s.next_seq.expect("next_seq set before append");
    let skip = next.wrapping_sub(seq) as usize;
    if skip >= payload.len() {
        counters.retransmitted_bytes += payload.len() as u64;
        return;
    }
    counters.retransmitted_bytes += skip as u64;
    s.buf.extend_from_slice(&payload[skip..]);
    s.next_seq = Some(seq.wrapping_add(payload.len() as u32));
}

fn resync(s: &mut Stream, counters: &mut TcpCounters) {
    counters.resyncs += 1;
    s.buf.clear();
    s.pending.clear();
    s.next_seq = None;
    if let Framing::WebSocket(ws) = &mut s.framing {
        ws.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: usize) -> Vec<u8> {
        format!("MESSAGE sip:a@b SIP/2.0\r\nCall-ID: {n}\r\nContent-Length: 5\r\n\r\nhello")
            .into_bytes()
    }

    #[test]
    fn frames_split_joined_reordered_and_retransmitted_segments() {
        let a: SocketAddr = "10.0.0.1:5060".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5060".parse().unwrap();
        let mut stream = Vec::new();
        for n in 0..4 {
            stream.extend(msg(n));
        }
        let mut t = SipTcp::new(TcpLimits::default());
        let mut got: Vec<Vec<u8>> = Vec::new();
        let base = 4_000_000_000u32; // wraps inside the stream
        let cut = [0usize, 30, 31, 100, 250, stream.len()];
        let mut segs: Vec<(u32, &[u8])> = cut
            .windows(2)
            .map(|w| (base.wrapping_add(w[0] as u32), &stream[w[0]..w[1]]))
            .collect();
        segs.swap(2, 3); // out of order
        segs.insert(2, segs[0]); // retransmission
        for (seq, data) in segs {
            t.segment(0, a, b, seq, 0, data, |m| got.push(m.to_vec()));
        }
        assert_eq!(got.len(), 4);
        for (n, m) in got.iter().enumerate() {
            assert_eq!(m, &msg(n));
        }
        assert!(t.counters.retransmitted_bytes >= 30);
    }

    #[test]
    fn ignores_non_sip_streams() {
        let a: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let mut t = SipTcp::new(TcpLimits::default());
        t.segment(0, a, b, 1, 0, b"GET / HTTP/1.1\r\n\r\n", |_| {
            panic!("not SIP")
        });
        assert_eq!(t.streams(), 0);
    }
}
