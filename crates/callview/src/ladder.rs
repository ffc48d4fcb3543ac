//! The SIP ladder: every SIP message of the pcap in capture order, with its hosts, its start
//! line read, and the media its SDP offers or answers.

use std::collections::HashSet;
use std::net::SocketAddr;

use serde::Serialize;
use sip::Message;
use sip::sdp::{Direction, Sdp};

use crate::Limits;
use crate::frames::SipTransport;

/// Characters kept of a message's label (an unreadable message's first line, a response's
/// reason phrase), of its CSeq and of its Call-ID: each comes from the input, and a header may
/// be 64 KiB long, so every event holds at most a few hundred bytes besides its text.
const LABEL_CHARS_MAX: usize = 120;
const CSEQ_CHARS_MAX: usize = 120;
const CALL_ID_CHARS_MAX: usize = 256;
/// `m=` lines kept per SDP marker, and formats kept per `m=` line (the rest are counted in
/// [`SdpMarker::media_left_out`] and [`SdpMedia::codecs_left_out`]): an `m=` line may list
/// thousands of formats, each of which would become a string.
const SDP_MEDIA_MAX: usize = 16;
const SDP_CODECS_MAX: usize = 32;
/// Characters kept of an `m=` line's media type and protocol.
const SDP_TOKEN_CHARS_MAX: usize = 32;

/// One SIP message on the ladder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LadderEvent {
    /// Its frame in the pcap, from 1 (as Wireshark numbers frames). A TCP message is the frame
    /// whose segment completed it.
    pub frame: u64,
    /// Capture time, µs since the epoch.
    pub ts_us: i64,
    /// Since the previous message on the ladder (0 for the first).
    pub delta_us: i64,
    /// `ip:port` of the sender and of the receiver, as in [`crate::CallView::hosts`].
    pub src: String,
    pub dst: String,
    /// `UDP` or `TCP`.
    pub transport: &'static str,
    /// The method of a request (`INVITE`), the code and reason of a response (`180 Ringing`),
    /// or the first line of a message the SIP parser cannot read.
    pub label: String,
    /// A request's method.
    pub method: Option<String>,
    /// A response's status code.
    pub code: Option<u16>,
    /// The CSeq header (`1 INVITE`), empty without one.
    pub cseq: String,
    /// The Call-ID, empty without one (a pcap of one call may still hold REGISTERs).
    pub call_id: String,
    /// The media of the message's SDP, when it carries one.
    pub sdp: Option<SdpMarker>,
    /// The whole message, as lossy UTF-8, cut at [`Limits::sip_text_bytes_max`].
    pub text: String,
    /// Bytes of the message left out of `text`.
    pub text_cut_bytes: usize,
    /// The message resends one seen before (over UDP, by Wireshark's rule, which the monitor's
    /// `resent` count uses: `monitor::Resends`): a request of the same CSeq and method, or the
    /// same final response, between the same two addresses.
    pub resent: bool,
}

/// What an SDP body offers or answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SdpMarker {
    pub media: Vec<SdpMedia>,
    /// `m=` lines past the first 16, not listed.
    pub media_left_out: usize,
    /// Why the body could not be read as SDP (then `media` is empty).
    pub error: Option<String>,
}

/// One `m=` line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SdpMedia {
    /// `audio`, `video`, `image`...
    pub kind: String,
    /// Where the media is to be sent: `ip:port` (the media's `c=` else the session's), or
    /// `None` without a connection address.
    pub addr: Option<String>,
    pub port: u16,
    /// `RTP/AVP`, `RTP/SAVP`, `udptl`...
    pub proto: String,
    /// The formats in the line's order: `PCMA/8000`, `telephone-event/8000`, or the bare
    /// payload type when neither `a=rtpmap` nor the static table names it.
    pub codecs: Vec<String>,
    /// Formats past the first 32, not listed.
    pub codecs_left_out: usize,
    /// `sendrecv`, `sendonly`, `recvonly` or `inactive`.
    pub direction: &'static str,
}

/// Builds the ladder as messages come.
pub(crate) struct Ladder {
    pub(crate) events: Vec<LadderEvent>,
    pub(crate) hosts: Vec<String>,
    known_hosts: HashSet<String>,
    pub(crate) left_out: u64,
    resends: monitor::Resends,
    messages_max: usize,
    text_bytes_max: usize,
}

impl Ladder {
    pub(crate) fn new(limits: &Limits) -> Ladder {
        Ladder {
            events: Vec::new(),
            hosts: Vec::new(),
            known_hosts: HashSet::new(),
            left_out: 0,
            resends: monitor::Resends::default(),
            messages_max: limits.sip_messages_max,
            text_bytes_max: limits.sip_text_bytes_max,
        }
    }

    fn host(&mut self, a: SocketAddr) -> String {
        let s = a.to_string();
        if self.known_hosts.insert(s.clone()) {
            self.hosts.push(s.clone());
        }
        s
    }

    /// Adds one message: `data` is a UDP datagram (which may run past the message) or a
    /// message framed out of TCP or SCTP.
    pub(crate) fn push(
        &mut self,
        frame: u64,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        transport: SipTransport,
        data: &[u8],
    ) {
        if self.events.len() >= self.messages_max {
            self.left_out += 1;
            return;
        }
        let ts_us = ts_ns.div_euclid(1000);
        let (src_addr, dst_addr) = (src, dst);
        let delta_us = self.events.last().map_or(0, |e| ts_us - e.ts_us);
        let (src, dst) = (self.host(src), self.host(dst));
        let mut event = LadderEvent {
            frame,
            ts_us,
            delta_us,
            src,
            dst,
            transport: transport.name(),
            label: String::new(),
            method: None,
            code: None,
            cseq: String::new(),
            call_id: String::new(),
            sdp: None,
            text: String::new(),
            text_cut_bytes: 0,
            resent: false,
        };
        let mut repaired = Vec::new();
        let own_len = match Message::parse_lossy(data, &mut repaired) {
            Ok((m, _)) => {
                read_message(&m, &mut event);
                if transport == SipTransport::Udp
                    && let (Some(call_id), Some((cseq, method))) = (m.call_id(), m.cseq())
                {
                    event.resent = self.resends.is_resend(
                        call_id,
                        src_addr,
                        dst_addr,
                        cseq,
                        method,
                        m.status(),
                    );
                }
                m.len.min(data.len())
            }
            Err(_) => {
                event.label = first_line(data);
                data.len()
            }
        };
        let kept = own_len.min(self.text_bytes_max);
        event.text = String::from_utf8_lossy(&data[..kept]).into_owned();
        event.text_cut_bytes = own_len - kept;
        self.events.push(event);
    }
}

/// Fills the fields read from a parsed message.
fn read_message(m: &Message<'_>, e: &mut LadderEvent) {
    match m.start {
        sip::StartLine::Request { method, .. } => {
            e.label = cut(method, LABEL_CHARS_MAX);
            e.method = Some(e.label.clone());
        }
        sip::StartLine::Response { code, reason } => {
            e.label = if reason.is_empty() {
                code.to_string()
            } else {
                cut(&format!("{code} {reason}"), LABEL_CHARS_MAX)
            };
            e.code = Some(code);
        }
    }
    if let Some((n, method)) = m.cseq() {
        e.cseq = cut(&format!("{n} {method}"), CSEQ_CHARS_MAX);
    }
    e.call_id = cut(m.call_id().unwrap_or(""), CALL_ID_CHARS_MAX);
    if m.has_sdp() {
        e.sdp = Some(sdp_marker(m.body));
    }
}

/// The media lines of an SDP body.
fn sdp_marker(body: &[u8]) -> SdpMarker {
    let sdp = match Sdp::parse(body) {
        Ok(s) => s,
        Err(e) => {
            return SdpMarker {
                media: Vec::new(),
                media_left_out: 0,
                error: Some(cut(&e.to_string(), LABEL_CHARS_MAX)),
            };
        }
    };
    let media = sdp
        .media
        .iter()
        .take(SDP_MEDIA_MAX)
        .map(|m| SdpMedia {
            kind: cut(m.kind, SDP_TOKEN_CHARS_MAX),
            addr: m
                .connection
                .map(|ip| SocketAddr::new(ip, m.port).to_string()),
            port: m.port,
            proto: cut(m.proto, SDP_TOKEN_CHARS_MAX),
            codecs: m
                .payload_types
                .iter()
                .take(SDP_CODECS_MAX)
                .map(|&pt| match m.codec(pt) {
                    Some((name, rate)) => format!("{}/{rate}", cut(name, SDP_TOKEN_CHARS_MAX)),
                    None => pt.to_string(),
                })
                .collect(),
            codecs_left_out: m.payload_types.len().saturating_sub(SDP_CODECS_MAX),
            direction: match m.direction {
                Direction::SendRecv => "sendrecv",
                Direction::SendOnly => "sendonly",
                Direction::RecvOnly => "recvonly",
                Direction::Inactive => "inactive",
            },
        })
        .collect();
    SdpMarker {
        media,
        media_left_out: sdp.media.len().saturating_sub(SDP_MEDIA_MAX),
        error: None,
    }
}

/// At most `max` characters of `s`.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => s[..at].to_string(),
        None => s.to_string(),
    }
}

/// The first line of an unreadable message, for its label.
fn first_line(data: &[u8]) -> String {
    let end = data
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(data.len())
        .min(LABEL_CHARS_MAX * 4);
    String::from_utf8_lossy(&data[..end])
        .chars()
        .take(LABEL_CHARS_MAX)
        .collect()
}
