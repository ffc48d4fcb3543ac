//! WebSocket framing (RFC 6455) for SIP over WebSocket (RFC 7118): the HTTP Upgrade handshake
//! that starts a stream, frame headers (7-, 16- and 64-bit lengths, masked or not), unmasking,
//! and a message put back together from a data frame and its continuation frames, with control
//! frames (ping, pong, close) allowed between them. Each complete text or binary message is one
//! SIP message (RFC 7118 section 5: no Content-Length framing).
//!
//! [`WsStream`] holds one TCP direction's state; [`crate::tcp::SipTcp`] feeds it the stream's
//! bytes in order. Frames are read only when whole, so a frame split across segments waits in
//! the TCP buffer; a message over `max_message_bytes` is skipped (its frames still read through
//! to keep the framing) and counted.

/// Largest header: 2 bytes, a 64-bit length, a masking key.
pub const MAX_HEADER_BYTES: usize = 14;

const OPCODE_CONTINUATION: u8 = 0;
const OPCODE_TEXT: u8 = 1;
const OPCODE_BINARY: u8 = 2;

/// One frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub fin: bool,
    pub opcode: u8,
    pub mask: Option<[u8; 4]>,
    /// Bytes of the header itself.
    pub header_len: usize,
    pub payload_len: u64,
}

impl FrameHeader {
    /// Data frames carry messages; opcodes 8 and above are control frames.
    pub fn is_control(&self) -> bool {
        self.opcode >= 8
    }
}

/// A byte sequence that is no WebSocket frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("reserved bits set in a WebSocket frame header")]
    Reserved,
    #[error("WebSocket opcode {0} is reserved")]
    Opcode(u8),
    #[error("WebSocket control frame is fragmented or longer than 125 bytes")]
    Control,
    #[error("WebSocket 64-bit length has its top bit set")]
    Length,
}

/// Reads a frame header at the start of `buf`; `Ok(None)` when more bytes are needed.
pub fn parse_header(buf: &[u8]) -> Result<Option<FrameHeader>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    if buf[0] & 0x70 != 0 {
        return Err(FrameError::Reserved);
    }
    let fin = buf[0] & 0x80 != 0;
    let opcode = buf[0] & 0x0f;
    if matches!(opcode, 3..=7 | 11..=15) {
        return Err(FrameError::Opcode(opcode));
    }
    let masked = buf[1] & 0x80 != 0;
    let (payload_len, at) = match buf[1] & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let n = u64::from_be_bytes(b.try_into().expect("eight bytes"));
                if n >> 63 != 0 {
                    return Err(FrameError::Length);
                }
                (n, 10)
            }
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    if opcode >= 8 && (!fin || payload_len > 125) {
        return Err(FrameError::Control);
    }
    let (mask, header_len) = if masked {
        let Some(key) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        (Some([key[0], key[1], key[2], key[3]]), at + 4)
    } else {
        (None, at)
    };
    Ok(Some(FrameHeader {
        fin,
        opcode,
        mask,
        header_len,
        payload_len,
    }))
}

/// Unmasks (or masks: the operation is its own inverse) `data`, which starts `offset` bytes
/// into its frame's payload.
pub fn unmask(key: [u8; 4], offset: usize, data: &mut [u8]) {
    for (i, b) in data.iter_mut().enumerate() {
        *b ^= key[(offset + i) % 4];
    }
}

/// Whether `head` (the start of a TCP stream) is an HTTP request or response that upgrades the
/// connection to WebSocket for SIP: `Upgrade: websocket`, and a `Sec-WebSocket-Protocol` that
/// names `sip` when it is there. `None` while the header block is incomplete; otherwise the
/// header block's length and the verdict.
pub fn handshake(head: &[u8]) -> Option<(usize, bool)> {
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&head[..end]);
    let mut lines = text.split("\r\n");
    let start = lines.next().unwrap_or_default();
    let http = (start.starts_with("GET ") && start.ends_with(" HTTP/1.1"))
        || start.starts_with("HTTP/1.1 101");
    let mut upgrade = false;
    let mut protocol_ok = true;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("upgrade") {
            upgrade |= value.trim().eq_ignore_ascii_case("websocket");
        } else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
            protocol_ok = value
                .split(',')
                .any(|p| p.trim().eq_ignore_ascii_case("sip"));
        }
    }
    Some((end, http && upgrade && protocol_ok))
}

/// Whether an HTTP request or response could be starting here (worth waiting for its end).
pub fn looks_like_http_upgrade_start(buf: &[u8]) -> bool {
    buf.starts_with(b"GET ") || buf.starts_with(b"HTTP/1.1 101")
}

/// Whether `buf`, the first bytes of a stream seen mid-way, starts with a data frame whose
/// payload begins a SIP message (a stream whose handshake was not captured).
pub fn starts_with_sip_frame(buf: &[u8]) -> bool {
    let Ok(Some(h)) = parse_header(buf) else {
        return false;
    };
    if !matches!(h.opcode, OPCODE_TEXT | OPCODE_BINARY) {
        return false;
    }
    let n = (h.payload_len as usize).min(16);
    let Some(start) = buf.get(h.header_len..h.header_len + n) else {
        return false;
    };
    let mut start = start.to_vec();
    if let Some(key) = h.mask {
        unmask(key, 0, &mut start);
    }
    sip::looks_like_sip(&start)
}

/// What the WebSocket framing saw and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsCounters {
    /// Streams that switched to WebSocket (handshake seen or frames recognised).
    pub streams: u64,
    pub frames: u64,
    pub control_frames: u64,
    /// Complete messages that are not SIP (and not a blank keep-alive).
    pub not_sip: u64,
    /// Messages dropped for exceeding `max_message_bytes`.
    pub messages_too_large: u64,
    /// Continuation frames with no message begun, or a data frame while one is open.
    pub frames_out_of_order: u64,
    /// Bytes that are no frame header: the stream waits for a recognisable frame again.
    pub resyncs: u64,
}

/// The state of one direction of a WebSocket connection.
#[derive(Debug, Default)]
pub struct WsStream {
    /// The message being put back together from its frames.
    message: Vec<u8>,
    in_message: bool,
    /// The open message went over the limit: its frames are read and thrown away.
    oversized: bool,
}

impl WsStream {
    /// Reads every whole frame at the start of `buf`, passing each complete SIP message to
    /// `on_message`; returns the bytes used. `Err` when `buf` does not start with a frame.
    pub fn frames(
        &mut self,
        buf: &[u8],
        max_message_bytes: usize,
        counters: &mut WsCounters,
        on_message: &mut impl FnMut(&[u8]),
    ) -> Result<usize, FrameError> {
        let mut used = 0;
        loop {
            let Some(h) = parse_header(&buf[used..])? else {
                return Ok(used);
            };
            let len = h.header_len as u64 + h.payload_len;
            if ((buf.len() - used) as u64) < len {
                return Ok(used);
            }
            let frame = &buf[used..used + len as usize];
            used += len as usize;
            counters.frames += 1;
            let payload = &frame[h.header_len..];
            if h.is_control() {
                counters.control_frames += 1;
                continue;
            }
            match (h.opcode, self.in_message) {
                (OPCODE_CONTINUATION, false) => {
                    counters.frames_out_of_order += 1;
                    continue;
                }
                (OPCODE_CONTINUATION, true) => {}
                (_, open) => {
                    if open {
                        // A new message while one is open: the open one cannot end.
                        counters.frames_out_of_order += 1;
                    }
                    self.message.clear();
                    self.in_message = true;
                    self.oversized = false;
                }
            }
            if self.message.len() + payload.len() > max_message_bytes {
                if !self.oversized {
                    counters.messages_too_large += 1;
                }
                self.oversized = true;
                self.message.clear();
            }
            if !self.oversized {
                let at = self.message.len();
                self.message.extend_from_slice(payload);
                if let Some(key) = h.mask {
                    unmask(key, 0, &mut self.message[at..]);
                }
            }
            if h.fin {
                self.in_message = false;
                if !self.oversized {
                    self.deliver(counters, on_message);
                }
                self.message.clear();
            }
        }
    }

    fn deliver(&self, counters: &mut WsCounters, on_message: &mut impl FnMut(&[u8])) {
        if sip::looks_like_sip(&self.message) {
            on_message(&self.message);
        } else if !self.message.iter().all(u8::is_ascii_whitespace) {
            counters.not_sip += 1;
        }
    }

    /// Forgets the open message (the TCP layer lost bytes).
    pub fn reset(&mut self) {
        self.message.clear();
        self.in_message = false;
        self.oversized = false;
    }
}

/// Frame builders for tests, fuzz seeds and synthetic captures.
pub mod build {
    /// One frame: `opcode`, FIN as given, masked with `mask` when given, the shortest length
    /// encoding unless `long_length` asks for the 64-bit one.
    pub fn frame(
        fin: bool,
        opcode: u8,
        mask: Option<[u8; 4]>,
        long_length: bool,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut v = vec![if fin { 0x80 } else { 0 } | opcode];
        let m = if mask.is_some() { 0x80 } else { 0 };
        let n = payload.len();
        if long_length {
            v.push(m | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        } else if n < 126 {
            v.push(m | n as u8);
        } else if n <= 0xffff {
            v.push(m | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            v.push(m | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
        if let Some(key) = mask {
            v.extend_from_slice(&key);
        }
        let start = v.len();
        v.extend_from_slice(payload);
        if let Some(key) = mask {
            super::unmask(key, 0, &mut v[start..]);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIP: &[u8] = b"OPTIONS sip:a@b SIP/2.0\r\nCall-ID: 1\r\n\r\n";

    fn run(bytes: &[u8]) -> (Vec<Vec<u8>>, usize, WsCounters) {
        let mut s = WsStream::default();
        let mut c = WsCounters::default();
        let mut got = Vec::new();
        let used = s
            .frames(bytes, 1024, &mut c, &mut |m| got.push(m.to_vec()))
            .unwrap();
        (got, used, c)
    }

    #[test]
    fn masked_fragmented_message_with_a_ping_between() {
        let key = Some([1, 2, 3, 4]);
        let mut bytes = build::frame(false, 1, key, false, &SIP[..10]);
        bytes.extend(build::frame(true, 9, key, false, b"ping"));
        bytes.extend(build::frame(false, 0, key, true, &SIP[10..20]));
        bytes.extend(build::frame(true, 0, key, false, &SIP[20..]));
        let (got, used, c) = run(&bytes);
        assert_eq!(got, [SIP.to_vec()]);
        assert_eq!(used, bytes.len());
        assert_eq!((c.frames, c.control_frames), (4, 1));
        // Cut anywhere, the whole frames before the cut are read and the rest waits.
        for cut in 0..bytes.len() {
            let (got, used, _) = run(&bytes[..cut]);
            assert!(got.is_empty() && used <= cut);
        }
    }

    #[test]
    fn lengths_and_bounds() {
        let big = [SIP, &[b'x'; 300][..]].concat();
        for long in [false, true] {
            let (got, _, _) = run(&build::frame(true, 2, None, long, &big));
            assert_eq!(got, std::slice::from_ref(&big));
        }
        let huge = [SIP, &[b'x'; 2000][..]].concat();
        let (got, _, c) = run(&build::frame(true, 1, None, false, &huge));
        assert!(got.is_empty());
        assert_eq!(c.messages_too_large, 1);
        assert_eq!(
            parse_header(&[0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            Err(FrameError::Length)
        );
        assert_eq!(parse_header(&[0xf1, 0]), Err(FrameError::Reserved));
        assert!(starts_with_sip_frame(&build::frame(
            true,
            1,
            Some([9; 4]),
            false,
            SIP
        )));
        assert!(!starts_with_sip_frame(&build::frame(
            true,
            1,
            None,
            false,
            b"{\"a\":1}"
        )));
    }

    #[test]
    fn handshake_for_sip_only() {
        let req = b"GET / HTTP/1.1\r\nHost: pbx\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: sip\r\n\r\n\x81";
        assert_eq!(handshake(req), Some((req.len() - 1, true)));
        let resp = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\n\r\n";
        assert_eq!(handshake(resp), Some((resp.len(), true)));
        let other =
            b"GET /chat HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n";
        assert_eq!(handshake(other), Some((other.len(), false)));
        assert_eq!(handshake(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n"), None);
    }
}
