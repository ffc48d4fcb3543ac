//! The call tap: what the monitor tells an observer about each packet it attributes to a call,
//! and about each call it closes, so that a packet archive (or anything else that follows calls)
//! needs no knowledge of the monitor's insides and the monitor none of files.
//!
//! Attribution is the monitor's own: a frame is a call's SIP when its message joins that call's
//! dialog (a REGISTER, OPTIONS or a message of an unknown dialog belongs to no call), and the
//! call's media when its RTP stream is linked to the call (an SDP announced its address), or
//! when it is RTCP reporting on such a stream. A SIP message carried over several IP fragments
//! or TCP segments is attributed as the frame that completes it.
//!
//! Media without signalling is reported too, under the stream's own identity ([`StreamId`]:
//! addresses, SSRC and first packet, what its CDR record is known by): the RTP of a stream
//! that no SDP announced, and the RTCP reporting on it ([`CallTap::stream_packet`]), then its
//! end ([`CallTap::stream_ended`]). When an SDP announcing such a stream comes after its first
//! packets, the stream becomes the call's ([`CallTap::stream_joined`]): its record is then the
//! call's, and what was reported under its identity belongs to the call as well.
//!
//! Each shard has its own tap ([`crate::Monitor::with_tap`] makes one per shard), called on the
//! shard's thread in capture order. With several shards, a call's SIP and its media may be
//! reported by different taps; [`CallTap::call_ended`] comes from the shard of the call's
//! dialog, and [`CallTap::progress`] tells how far in capture time each tap has got, so that a
//! consumer can wait until every shard has passed a call's end before it closes the call. A
//! stream without a call is one shard's (the one its flow goes to, which also gets the RTCP
//! reporting on it): everything about it comes from that shard's tap, in order.

use std::sync::Arc;

use crate::rtp::StreamKey;

/// A stream without a call, by what its record is known by: its addresses and SSRC, and the
/// capture time of its first packet (`cdr::CdrRecord::identity`'s `rtp|src|dst|ssrc|start_us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId {
    pub key: StreamKey,
    /// Capture time of the stream's first packet, ns since the Unix epoch.
    pub first_ns: i64,
}

/// What a frame is to its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapKind {
    /// A SIP message of the call's dialog.
    Sip,
    /// An RTP packet of one of the call's streams; `rtp_offset` is where the RTP header starts in
    /// the frame, `None` when the datagram was reassembled from fragments.
    Rtp {
        /// Byte offset of the RTP header in [`TapFrame::data`].
        rtp_offset: Option<usize>,
    },
    /// An RTCP packet reporting on one of the call's streams.
    Rtcp,
    /// A UDPTL (T.38 fax) packet of one of the call's T.38 flows.
    Udptl,
}

/// One captured frame, as the monitor was given it.
#[derive(Debug, Clone, Copy)]
pub struct TapFrame<'a> {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: i64,
    /// The capture's link type (pcap LINKTYPE_*).
    pub link_type: u32,
    /// The frame, starting with its link-layer header.
    pub data: &'a [u8],
}

/// Receives the monitor's attributions. Called on the shard's thread; an implementation must
/// not block for long (queue the work elsewhere), or it stalls the analysis.
pub trait CallTap: Send {
    /// `frame` belongs to the call `call_id`. A frame is reported at most once per call; a
    /// frame carrying messages of two calls is reported to each.
    fn packet(&mut self, call_id: &Arc<str>, kind: TapKind, frame: &TapFrame<'_>);

    /// The monitor closed the call `call_id` whose first INVITE it saw at `invite_ns`, at
    /// capture time `now_ns`: its record is (or will be) in the analysis, and no more of its
    /// SIP will be reported under this dialog. Media of its streams may still be reported by
    /// other shards until their capture time passes `now_ns`.
    fn call_ended(&mut self, call_id: &Arc<str>, invite_ns: i64, now_ns: i64);

    /// This shard has seen every frame up to capture time `ts_ns`: about once a second of
    /// capture time, and with `i64::MAX` when the monitor finishes.
    fn progress(&mut self, ts_ns: i64);

    /// `frame` belongs to `stream`, a stream without a call: one of its RTP packets
    /// ([`TapKind::Rtp`]), or RTCP reporting on it ([`TapKind::Rtcp`]). By default ignored.
    fn stream_packet(&mut self, stream: &StreamId, kind: TapKind, frame: &TapFrame<'_>) {
        let _ = (stream, kind, frame);
    }

    /// `stream`, reported without a call so far, is now `call_id`'s (its SDP came after its
    /// first packets): what was reported under its identity belongs to that call, and its
    /// later packets are reported as the call's. No [`CallTap::stream_ended`] follows. By
    /// default ignored.
    fn stream_joined(&mut self, stream: &StreamId, call_id: &Arc<str>) {
        let _ = (stream, call_id);
    }

    /// The monitor closed `stream`, a stream without a call, at capture time `now_ns`: no
    /// more of it will be reported. `kept`: its record is in the analysis (false when it had
    /// fewer packets than `MonitorConfig::min_unsignalled_packets` and was left out). By
    /// default ignored.
    fn stream_ended(&mut self, stream: &StreamId, now_ns: i64, kept: bool) {
        let _ = (stream, now_ns, kept);
    }
}

/// Whose a frame is: a call's, or a stream's without a call.
#[derive(Debug, Clone)]
pub(crate) enum Owner {
    Call(Arc<str>),
    Stream(StreamId),
}

/// Remembers the calls a frame was already reported to, so that a TCP segment with two messages
/// of one call is reported once.
#[derive(Default)]
pub(crate) struct FrameDedup {
    seq: u64,
    calls: Vec<Arc<str>>,
}

impl FrameDedup {
    /// True the first time `call` is seen for frame number `seq`.
    pub(crate) fn first(&mut self, seq: u64, call: &Arc<str>) -> bool {
        if self.seq != seq {
            self.seq = seq;
            self.calls.clear();
        }
        if self
            .calls
            .iter()
            .any(|c| Arc::ptr_eq(c, call) || **c == **call)
        {
            return false;
        }
        self.calls.push(call.clone());
        true
    }
}
