//! The pcap's frames, each read down to what the call view looks at: a SIP message (UDP, or
//! framed out of a TCP stream), an RTP packet or an RTCP packet. The monitor's own decoder and
//! TCP reassembly do the work, so a frame is what the monitor also sees it as.
//!
//! Reading: a classic pcap (what `tandem cdr pcap` and the console hand over) is read in place,
//! without copying it, by [`for_each_frame`]; its record rules are the monitor's
//! (`monitor::pcap::CaptureReader`: the same time conversion, the same packet size limit, the
//! same errors naming the byte offset). Anything else (pcapng, gzip) goes through the monitor's
//! reader over one copy of the bytes.

use std::net::SocketAddr;

use monitor::decode::{Decoder, FragmentLimits, Transport, peek_udp};
use monitor::pcap::{CaptureError, CaptureErrorKind, CaptureReader, MAX_PACKET_BYTES};
use monitor::rtp::{RtpHeader, looks_like_rtcp};
use monitor::sctp::{SctpLimits, SipSctp};
use monitor::tcp::{SipTcp, TcpLimits};

/// The name the input goes by in read errors: "the call's pcap: at byte N: ...".
pub(crate) const INPUT_NAME: &str = "the call's pcap";

/// Bytes of a classic pcap file header and of a record header.
const FILE_HEADER_BYTES: usize = 24;
const RECORD_HEADER_BYTES: usize = 16;

/// One frame of the pcap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<'a> {
    /// Its place in the pcap, from 1 (as Wireshark numbers frames).
    pub number: u64,
    /// Capture time, ns since the epoch.
    pub ts_ns: i64,
    pub link_type: u32,
    pub data: &'a [u8],
    /// Length on the wire: more than `data.len()` when the capture (or an archive that kept
    /// RTP headers only) cut the packet.
    pub orig_len: u32,
}

impl Frame<'_> {
    /// The frame was captured without all of its bytes.
    pub(crate) fn is_cut(&self) -> bool {
        (self.orig_len as usize) > self.data.len()
    }
}

/// Calls `f` for every frame of `pcap`, in order. `Err` when the pcap cannot be read at all
/// (no valid file header); `Ok(Some(e))` when reading stopped at a damaged or truncated record
/// after every frame before it was seen; `Ok(None)` at a clean end.
pub(crate) fn for_each_frame(
    pcap: &[u8],
    mut f: impl FnMut(&Frame<'_>),
) -> Result<Option<CaptureError>, CaptureError> {
    match classic_header(pcap) {
        Some(h) => Ok(read_in_place(pcap, h, &mut f)),
        None => read_with_monitor(pcap, &mut f),
    }
}

/// What a classic pcap file header says.
#[derive(Debug, Clone, Copy)]
struct ClassicHeader {
    big_endian: bool,
    nanos: bool,
    link_type: u32,
}

/// The header of a classic pcap (any of its four magics), `None` for anything else, including
/// a classic magic whose header is cut short (the monitor's reader then names the error).
fn classic_header(pcap: &[u8]) -> Option<ClassicHeader> {
    let head = pcap.get(..FILE_HEADER_BYTES)?;
    let (big_endian, nanos) = match head[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] => (false, false),
        [0xa1, 0xb2, 0xc3, 0xd4] => (true, false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (false, true),
        [0xa1, 0xb2, 0x3c, 0x4d] => (true, true),
        _ => return None,
    };
    // As the monitor reads it: the upper 4 bits carry FCS information, not the link type.
    let link_type = u32_at(&head[20..24], big_endian) & 0x0FFF_FFFF;
    Some(ClassicHeader {
        big_endian,
        nanos,
        link_type,
    })
}

fn u32_at(b: &[u8], big_endian: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big_endian {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

fn read_error(offset: usize, kind: CaptureErrorKind) -> CaptureError {
    CaptureError {
        file: INPUT_NAME.to_string(),
        offset: offset as u64,
        kind,
    }
}

/// Walks the records of a classic pcap in place: each frame's bytes are a slice of `pcap`.
fn read_in_place(
    pcap: &[u8],
    h: ClassicHeader,
    f: &mut impl FnMut(&Frame<'_>),
) -> Option<CaptureError> {
    let mut at = FILE_HEADER_BYTES;
    let mut number = 0u64;
    while at < pcap.len() {
        let start = at;
        let Some(rec) = pcap.get(at..at + RECORD_HEADER_BYTES) else {
            return Some(read_error(
                start,
                CaptureErrorKind::Truncated("pcap record header"),
            ));
        };
        let secs = i64::from(u32_at(&rec[0..4], h.big_endian));
        let frac = i64::from(u32_at(&rec[4..8], h.big_endian));
        let incl = u32_at(&rec[8..12], h.big_endian) as usize;
        let orig_len = u32_at(&rec[12..16], h.big_endian);
        if incl > MAX_PACKET_BYTES {
            return Some(read_error(
                start,
                CaptureErrorKind::PacketTooLarge(incl as u64),
            ));
        }
        at += RECORD_HEADER_BYTES;
        let Some(data) = pcap.get(at..at + incl) else {
            return Some(read_error(start, CaptureErrorKind::Truncated("packet")));
        };
        at += incl;
        number += 1;
        f(&Frame {
            number,
            ts_ns: secs * 1_000_000_000 + if h.nanos { frac } else { frac * 1000 },
            link_type: h.link_type,
            data,
            orig_len,
        });
    }
    None
}

/// Reads anything but a classic pcap (pcapng, gzip, or bytes that are no capture at all, which
/// the monitor's reader names) through the monitor's reader, over one copy of the bytes.
fn read_with_monitor(
    pcap: &[u8],
    f: &mut impl FnMut(&Frame<'_>),
) -> Result<Option<CaptureError>, CaptureError> {
    let mut r = CaptureReader::from_reader(INPUT_NAME, std::io::Cursor::new(pcap.to_vec()))?;
    let mut number = 0u64;
    loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                number += 1;
                f(&Frame {
                    number,
                    ts_ns: p.ts_ns,
                    link_type: p.link_type,
                    data: p.data,
                    orig_len: p.orig_len,
                });
            }
            Ok(None) => return Ok(None),
            Err(e) => return Ok(Some(e)),
        }
    }
}

/// What a frame carries, as far as the call view is concerned.
pub(crate) enum Seen<'a> {
    /// One SIP message: over UDP its datagram, over TCP or SCTP the message framed out of the
    /// stream (reported with the segment or packet that completes it).
    Sip {
        src: SocketAddr,
        dst: SocketAddr,
        transport: SipTransport,
        data: &'a [u8],
    },
    Rtp {
        src: SocketAddr,
        dst: SocketAddr,
        header: RtpHeader,
        /// The UDP payload as captured: the RTP header and what follows it.
        datagram: &'a [u8],
    },
    Rtcp {
        src: SocketAddr,
        dst: SocketAddr,
        datagram: &'a [u8],
    },
}

/// What carried a SIP message, as the ladder names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SipTransport {
    Udp,
    /// TCP, and WebSocket over it.
    Tcp,
    Sctp,
}

impl SipTransport {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SipTransport::Udp => "UDP",
            SipTransport::Tcp => "TCP",
            SipTransport::Sctp => "SCTP",
        }
    }
}

/// Reads frames down to [`Seen`]. Plain UDP is read without state (`peek_udp`, as the
/// monitor's dispatcher does); everything else (fragments, TCP, tunnels the peek refuses) goes
/// through a decoder and a TCP reassembler of its own, with the monitor's default limits
/// (those of `tandem capture`).
pub(crate) struct Classifier {
    decoder: Decoder,
    tcp: SipTcp,
    sctp: SipSctp,
    /// SIP messages framed out of the current TCP segment (the buffer is reused).
    tcp_messages: Vec<Vec<u8>>,
    /// Whether TCP segments are followed at all (audio needs only UDP).
    follow_tcp: bool,
}

impl Classifier {
    pub(crate) fn new(follow_tcp: bool) -> Classifier {
        Classifier {
            decoder: Decoder::new(FragmentLimits::default()),
            tcp: SipTcp::new(TcpLimits::default()),
            sctp: SipSctp::new(SctpLimits::default()),
            tcp_messages: Vec::new(),
            follow_tcp,
        }
    }

    /// Reads one frame; `f` hears what it carries (nothing, once, or, for a TCP segment that
    /// completes several SIP messages, once per message).
    pub(crate) fn frame(&mut self, frame: &Frame<'_>, f: &mut impl FnMut(Seen<'_>)) {
        if let Some((src, dst, payload)) = peek_udp(frame.link_type, frame.data) {
            udp(src, dst, payload, f);
            return;
        }
        let Ok(Some(d)) = self
            .decoder
            .decode(frame.ts_ns, frame.link_type, frame.data)
        else {
            return;
        };
        match d.transport {
            Transport::Udp => udp(d.src, d.dst, d.payload, f),
            Transport::Tcp { seq, flags } if self.follow_tcp => {
                let mut messages = std::mem::take(&mut self.tcp_messages);
                self.tcp
                    .segment(frame.ts_ns, d.src, d.dst, seq, flags, d.payload, |m| {
                        messages.push(m.to_vec())
                    });
                sip_messages(d.src, d.dst, SipTransport::Tcp, &mut messages, f);
                self.tcp_messages = messages;
            }
            Transport::Tcp { .. } => {}
            Transport::Sctp if self.follow_tcp => {
                let mut messages = std::mem::take(&mut self.tcp_messages);
                self.sctp.packet(frame.ts_ns, d.src, d.dst, d.payload, |m| {
                    messages.push(m.to_vec())
                });
                sip_messages(d.src, d.dst, SipTransport::Sctp, &mut messages, f);
                self.tcp_messages = messages;
            }
            Transport::Sctp => {}
        }
    }
}

/// The SIP messages a TCP segment or an SCTP packet completed, handed on (and the buffer left
/// empty for the next).
fn sip_messages(
    src: SocketAddr,
    dst: SocketAddr,
    transport: SipTransport,
    messages: &mut Vec<Vec<u8>>,
    f: &mut impl FnMut(Seen<'_>),
) {
    for m in messages.drain(..) {
        f(Seen::Sip {
            src,
            dst,
            transport,
            data: &m,
        });
    }
}

/// A UDP datagram, told apart in the monitor's order: SIP, then RTP, then RTCP.
fn udp(src: SocketAddr, dst: SocketAddr, payload: &[u8], f: &mut impl FnMut(Seen<'_>)) {
    if sip::looks_like_sip(payload) {
        f(Seen::Sip {
            src,
            dst,
            transport: SipTransport::Udp,
            data: payload,
        });
    } else if let Some(header) = RtpHeader::parse(payload) {
        f(Seen::Rtp {
            src,
            dst,
            header,
            datagram: payload,
        });
    } else if looks_like_rtcp(payload) {
        f(Seen::Rtcp {
            src,
            dst,
            datagram: payload,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames (time, link type, bytes, wire length) and the error that ended the reading.
    type Read = (Vec<(i64, u32, Vec<u8>, u32)>, Option<String>);

    /// Every frame and the final error, as read by `for_each_frame`.
    fn ours(pcap: &[u8]) -> Result<Read, String> {
        let mut frames = Vec::new();
        let end = for_each_frame(pcap, |f| {
            frames.push((f.ts_ns, f.link_type, f.data.to_vec(), f.orig_len))
        })
        .map_err(|e| e.to_string())?;
        Ok((frames, end.map(|e| e.to_string())))
    }

    /// The same through the monitor's reader.
    fn monitors(pcap: &[u8]) -> Result<Read, String> {
        let mut r = CaptureReader::from_reader(INPUT_NAME, std::io::Cursor::new(pcap.to_vec()))
            .map_err(|e| e.to_string())?;
        let mut frames = Vec::new();
        loop {
            match r.next_packet() {
                Ok(Some(p)) => frames.push((p.ts_ns, p.link_type, p.data.to_vec(), p.orig_len)),
                Ok(None) => return Ok((frames, None)),
                Err(e) => return Ok((frames, Some(e.to_string()))),
            }
        }
    }

    fn sample_pcap(nanos: bool) -> Vec<u8> {
        let mut w = monitor::pcap::PcapWriter::new(Vec::new(), 1, nanos).unwrap();
        for i in 0..5i64 {
            let frame = vec![i as u8; 20 + i as usize];
            w.write_packet(1_700_000_000_123_456_789 + i * 1_000_000_007, &frame)
                .unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn reads_in_place_as_the_monitor_reads() {
        for nanos in [false, true] {
            let pcap = sample_pcap(nanos);
            // Every truncation, and the whole file: the same frames and the same error.
            for cut in 0..=pcap.len() {
                assert_eq!(ours(&pcap[..cut]), monitors(&pcap[..cut]), "cut at {cut}");
            }
            // A record claiming more than the largest packet.
            let mut big = pcap.clone();
            big[FILE_HEADER_BYTES + 8..FILE_HEADER_BYTES + 12]
                .copy_from_slice(&(MAX_PACKET_BYTES as u32 + 1).to_le_bytes());
            assert_eq!(ours(&big), monitors(&big));
            let (frames, err) = ours(&big).unwrap();
            assert!(frames.is_empty());
            assert!(err.unwrap().starts_with("the call's pcap: at byte 24: "));
        }
    }

    #[test]
    fn big_endian_headers_are_read() {
        let le = sample_pcap(false);
        // Rewrite every header field big-endian.
        let mut be = le.clone();
        be[..4].copy_from_slice(&[0xa1, 0xb2, 0xc3, 0xd4]);
        for at in [4usize, 6] {
            be[at..at + 2].reverse();
        }
        for at in [8usize, 12, 16, 20] {
            be[at..at + 4].reverse();
        }
        let mut at = FILE_HEADER_BYTES;
        while at < be.len() {
            for k in 0..4 {
                be[at + 4 * k..at + 4 * k + 4].reverse();
            }
            let incl = u32::from_be_bytes(be[at + 8..at + 12].try_into().unwrap()) as usize;
            at += RECORD_HEADER_BYTES + incl;
        }
        assert_eq!(ours(&be).unwrap(), ours(&le).unwrap());
        assert_eq!(ours(&be), monitors(&be));
    }
}
