//! The pipeline: a front stage decodes packets, frames SIP (UDP and TCP), reads SDP to learn
//! which media endpoints belong to which call, and dispatches; call shards hold dialogs and RTP
//! streams and build the records. SIP goes to the shard of its Call-ID; RTP and RTCP go to the
//! shard of their flow, which is the call's shard when an SDP announced the flow before its
//! first packet. With one shard everything runs inline on the caller's thread; with more, each
//! shard is a thread fed in batches over bounded channels.

use std::collections::{BTreeMap, HashMap};

/// Hash maps keyed by packet fields: a fast hasher with a per-process random seed.
type FastMap<K, V> = HashMap<K, V, foldhash::quality::RandomState>;

/// An address as 128 bits (IPv4 as IPv4-mapped IPv6): map keys compare as plain integers.
fn ip_bits(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(v) => u32::from(v) as u128 | (0xffff_u128 << 32),
        std::net::IpAddr::V6(v) => u128::from(v),
    }
}

/// A flow (ssrc 0) or stream key packed for hashing and comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PackedKey {
    src: u128,
    dst: u128,
    ports: u32,
    ssrc: u32,
}

impl PackedKey {
    fn new(src: SocketAddr, dst: SocketAddr, ssrc: u32) -> PackedKey {
        PackedKey {
            src: ip_bits(src.ip()),
            dst: ip_bits(dst.ip()),
            ports: (src.port() as u32) << 16 | dst.port() as u32,
            ssrc,
        }
    }

    fn stream(k: &StreamKey) -> PackedKey {
        PackedKey::new(k.src, k.dst, k.ssrc)
    }

    fn flow(&self) -> PackedKey {
        PackedKey { ssrc: 0, ..*self }
    }
}

/// One address and port packed for hashing and comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PackedAddr {
    ip: u128,
    port: u16,
}

impl PackedAddr {
    fn new(a: SocketAddr) -> PackedAddr {
        PackedAddr {
            ip: ip_bits(a.ip()),
            port: a.port(),
        }
    }
}
use std::hash::{BuildHasher, Hash};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use crate::rtp::Media;
use crate::t38::{T38Flow, UdptlHead, UdptlPacket};
use sip::Message;
use sip::sdp::Sdp;

use std::sync::atomic::Ordering::Relaxed;

use crate::clock::{ClockStep, ClockSteps};
use crate::decode::{Datagram, Decoder, FragmentLimits, Transport};
use crate::dialog::{CallState, Dialog, Registration, SdpFacts};
use crate::live::{LiveCounters, PUBLISH_EVERY_PACKETS, Published};
use crate::live_calls::{LIVE_STREAMS_PER_CALL, LiveCall, LiveCalls, LiveStream, ShardPart};
use crate::offer::{PENDING_OFFERS_MAX, PendingOffers, RtpTail, offer_cseq};
use crate::pcap::{CaptureError, CaptureReader};
use crate::rtp::{ReportBlock, RtpHeader, RtpStream, StreamKey};
use crate::sctp::{SctpCounters, SctpLimits, SipSctp};
use crate::tap::{CallTap, FrameDedup, Owner, StreamId, TapFrame, TapKind};
use crate::tcp::{SipTcp, TcpCounters, TcpLimits};

/// Limits and timeouts of the monitor. Every table is bounded; what does not fit is counted in
/// [`Counters`] and dropped.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    /// Calls (dialogs) tracked at once, over all shards.
    pub max_calls: usize,
    /// RTP streams tracked at once, over all shards.
    pub max_streams: usize,
    /// REGISTER chains tracked at once.
    pub max_registrations: usize,
    /// Media endpoints learnt from SDP and flows pinned to shards, each.
    pub max_endpoints: usize,
    /// A call's record is closed this long after its end, so late RTP and retransmissions
    /// still count.
    pub call_linger_ms: u64,
    /// A call refused with 401/407 stays open this long for the retry with credentials, which
    /// continues the same call.
    pub auth_retry_ms: u64,
    /// A call that was not answered and saw no SIP for this long is closed.
    pub call_idle_timeout_ms: u64,
    /// An answered call that saw neither SIP nor RTP for this long is closed.
    pub answered_idle_timeout_ms: u64,
    /// A stream without a call is closed after this long without packets.
    pub stream_idle_timeout_ms: u64,
    /// A media endpoint learnt from SDP is forgotten after this long without use.
    pub endpoint_idle_timeout_ms: u64,
    /// A REGISTER chain is closed after this long without messages.
    pub registration_idle_timeout_ms: u64,
    /// Streams that no SDP announced are reported only with at least this many packets.
    pub min_unsignalled_packets: u64,
    pub fragments: FragmentLimits,
    pub tcp: TcpLimits,
    pub sctp: SctpLimits,
    /// Events per batch handed to a shard thread.
    pub batch_events: usize,
    /// Batches queued per shard thread before the front waits.
    pub queue_batches: usize,
    /// Calls in progress each shard publishes at most on [`Monitor::live_calls`]; the others
    /// are counted as left out.
    pub live_calls_per_shard_max: usize,
    /// Least wall-clock time between two publications of a shard's calls in progress (besides
    /// one second of capture time), so that a file read at full speed does not rebuild them
    /// at every second of its clock. 0: at every tick.
    pub live_calls_min_wall_ms: u64,
    /// Hand out each call's start (its first INVITE) in [`Analysis::started`], for rules
    /// decided while the call is up (at most [`STARTED_PER_TAKE_MAX`] between two takes; the
    /// rest counted in [`Counters::starts_dropped`]).
    pub report_starts: bool,
    /// Which call each dialog belongs to (`[legs]`): each dialog's first INVITE goes through a
    /// [`legs::Linker`], run alike in every worker, and its record carries the answer
    /// ([`Dialog::link`]). Disabled (`enabled = false`) or invalid, nothing is linked.
    pub legs: legs::LegsConfig,
    /// Headers whose values each call keeps ([`crate::dialog::CallFields::headers`]).
    pub headers: crate::dialog::KeptHeaders,
}

/// Call starts kept between two [`Monitor::take_finished`].
pub const STARTED_PER_TAKE_MAX: usize = 100_000;

/// A call seen starting: its first INVITE ([`MonitorConfig::report_starts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StartedCall {
    pub call_id: Arc<str>,
    pub caller: Box<str>,
    pub called: Box<str>,
    pub caller_addr: SocketAddr,
    pub callee_addr: SocketAddr,
    pub invite_ns: i64,
    /// The INVITE's User-Agent (at most 256 bytes).
    pub user_agent: Option<Box<str>>,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            max_calls: 1_000_000,
            max_streams: 1_000_000,
            max_registrations: 200_000,
            max_endpoints: 2_000_000,
            call_linger_ms: 5_000,
            auth_retry_ms: 120_000,
            call_idle_timeout_ms: 300_000,
            answered_idle_timeout_ms: 7_200_000,
            stream_idle_timeout_ms: 60_000,
            endpoint_idle_timeout_ms: 7_200_000,
            registration_idle_timeout_ms: 60_000,
            min_unsignalled_packets: 1,
            fragments: FragmentLimits::default(),
            tcp: TcpLimits::default(),
            sctp: SctpLimits::default(),
            batch_events: 1024,
            queue_batches: 8,
            live_calls_per_shard_max: crate::live_calls::LIVE_CALLS_PER_SHARD_MAX,
            live_calls_min_wall_ms: crate::live_calls::LIVE_CALLS_MIN_WALL_MS,
            report_starts: false,
            legs: legs::LegsConfig::default(),
            headers: crate::dialog::KeptHeaders::default(),
        }
    }
}

/// SIP message counts, as `tshark -z sip,stat` gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SipStats {
    pub messages: u64,
    /// Retransmissions over UDP, by Wireshark's rule (see [`Resends`]).
    pub resent: u64,
    pub requests: BTreeMap<String, u64>,
    pub responses: BTreeMap<u16, u64>,
}

/// What the monitor saw and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
    pub malformed: u64,
    pub unsupported_link: u64,
    pub udp: u64,
    pub tcp: u64,
    pub sip_messages: u64,
    pub sip_parse_errors: u64,
    pub sdp_parse_errors: u64,
    pub rtp_packets: u64,
    pub rtcp_packets: u64,
    /// UDPTL (T.38) packets: on ports an SDP put on `image/udptl/t38`.
    pub udptl_packets: u64,
    /// T.38 flows not tracked because `max_streams` flows were already open.
    pub t38_dropped: u64,
    pub calls_dropped: u64,
    pub streams_dropped: u64,
    pub registrations_dropped: u64,
    /// Call starts not handed out: more than [`STARTED_PER_TAKE_MAX`] between two takes.
    pub starts_dropped: u64,
    pub endpoints_dropped: u64,
    pub fragments_reassembled: u64,
    pub fragments_expired: u64,
    /// Forward jumps of the capture's clock over a day, taken as steps of the clock
    /// ([`crate::clock`]): counted by the reading thread.
    pub clock_steps: u64,
    /// What the decoder did not follow (tunnels, non-IP frames, other transports).
    pub decode: crate::decode::DecodeCounters,
    /// SIP over TCP and WebSocket.
    pub sip_tcp: TcpCounters,
    /// SIP over SCTP.
    pub sip_sctp: SctpCounters,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.calls_dropped += o.calls_dropped;
        self.streams_dropped += o.streams_dropped;
        self.t38_dropped += o.t38_dropped;
        self.registrations_dropped += o.registrations_dropped;
        self.starts_dropped += o.starts_dropped;
    }

    /// Adds what a worker's front counted (packets and bytes are counted by the reader).
    /// Fragments go to every worker, so they are taken from the first one only.
    fn add_front(&mut self, o: &Counters, first: bool) {
        self.malformed += o.malformed;
        self.unsupported_link += o.unsupported_link;
        self.udp += o.udp;
        self.tcp += o.tcp;
        self.sip_messages += o.sip_messages;
        self.sip_parse_errors += o.sip_parse_errors;
        self.sdp_parse_errors += o.sdp_parse_errors;
        self.rtp_packets += o.rtp_packets;
        self.rtcp_packets += o.rtcp_packets;
        self.udptl_packets += o.udptl_packets;
        self.endpoints_dropped += o.endpoints_dropped;
        if first {
            self.fragments_reassembled += o.fragments_reassembled;
            self.fragments_expired += o.fragments_expired;
            // Only frames that go to every worker move these.
            self.decode = o.decode;
            self.sip_tcp = o.sip_tcp;
            self.sip_sctp = o.sip_sctp;
        }
    }
}

impl SipStats {
    fn merge(&mut self, o: &SipStats) {
        self.messages += o.messages;
        self.resent += o.resent;
        for (k, v) in &o.requests {
            *self.requests.entry(k.clone()).or_insert(0) += v;
        }
        for (k, v) in &o.responses {
            *self.responses.entry(*k).or_insert(0) += v;
        }
    }
}

/// Which worker a frame goes to: the one its UDP flow hashes to (RTCP: the flow of the RTP it
/// reports on), or `None` for every worker (SIP, TCP, fragments, anything not plain UDP).
fn route(
    hasher: &foldhash::quality::RandomState,
    workers: usize,
    link_type: u32,
    frame: &[u8],
) -> Option<usize> {
    let (src, dst, payload) = crate::decode::peek_udp(link_type, frame)?;
    if sip::looks_like_sip(payload) {
        return None;
    }
    let flow = if RtpHeader::parse(payload).is_none() && crate::rtp::looks_like_rtcp(payload) {
        PackedKey::new(
            SocketAddr::new(dst.ip(), dst.port().wrapping_sub(1)),
            SocketAddr::new(src.ip(), src.port().wrapping_sub(1)),
            0,
        )
    } else {
        PackedKey::new(src, dst, 0)
    };
    Some((hasher.hash_one(flow) % workers as u64) as usize)
}

/// A closed call with its RTP streams and its T.38 flows.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub dialog: Dialog,
    pub streams: Vec<StreamRecord>,
    /// UDPTL flows after the SDP moved the call to `image/udptl/t38`: a fax call.
    pub t38: Vec<T38Record>,
}

impl CallRecord {
    /// A fax call: some of its media went over T.38. An offer of T.38 that was refused
    /// leaves a call no fax ([`Dialog::t38_offered`] tells it).
    pub fn is_fax(&self) -> bool {
        !self.t38.is_empty()
    }

    /// Its media is SRTP: an offer or answer said so (`RTP/SAVP`, `RTP/SAVPF`,
    /// `UDP/TLS/RTP/SAVPF`), even when none of its RTP was captured.
    pub fn is_encrypted(&self) -> bool {
        self.dialog.sdp.srtp || self.streams.iter().any(|s| s.stream.encrypted)
    }

    /// The call's keypad digits, RFC 4733 events of its streams and INFO requests alike, in
    /// time order.
    pub fn dtmf(&self) -> Vec<CallDigit> {
        let mut out: Vec<CallDigit> = self
            .streams
            .iter()
            .flat_map(|s| {
                s.stream.dtmf.iter().map(|e| CallDigit {
                    digit: e.digit(),
                    start_ns: e.start_ns,
                    // Telephone events run at 8 kHz in practice (RFC 4733 allows others).
                    duration_ms: Some(e.duration_ms(8000)),
                    volume: Some(e.volume),
                    src: s.stream.key.src,
                    dst: s.stream.key.dst,
                    via: DigitVia::Rfc4733,
                    ended: e.ended,
                })
            })
            .chain(self.dialog.info_digits().iter().map(|d| CallDigit {
                digit: match d.digit {
                    '!' => "flash".into(),
                    c => c.to_string().into(),
                },
                start_ns: d.ts_ns,
                duration_ms: d.duration_ms.map(f64::from),
                volume: None,
                src: d.src,
                dst: d.dst,
                via: DigitVia::SipInfo,
                ended: true,
            }))
            .collect();
        out.sort_by_key(|d| d.start_ns);
        out
    }

    /// Gives each stream the names its call's SDP gave its dynamic payload types.
    pub fn name_codecs(&mut self) {
        if self.dialog.codecs().is_empty() {
            return;
        }
        for s in &mut self.streams {
            s.stream.codec_names = self
                .dialog
                .codecs()
                .iter()
                .filter(|(pt, _)| s.stream.payload_types.contains(pt))
                .cloned()
                .collect();
        }
    }

    /// The fax as a whole (start, modulation, pages, result); `None` for a call without T.38.
    pub fn fax(&self) -> Option<crate::t38::FaxSummary> {
        crate::t38::FaxSummary::of(self.t38.iter().map(|r| &r.flow))
    }
}

/// How a keypad digit travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigitVia {
    /// An RFC 4733 telephone event in the RTP stream.
    Rfc4733,
    /// A SIP INFO request.
    SipInfo,
}

impl DigitVia {
    pub fn as_str(self) -> &'static str {
        match self {
            DigitVia::Rfc4733 => "rfc4733",
            DigitVia::SipInfo => "sip-info",
        }
    }
}

/// A keypad digit of a call ([`CallRecord::dtmf`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CallDigit {
    /// `0`-`9`, `*`, `#`, `A`-`D` or `flash` (else `event-N`).
    pub digit: std::borrow::Cow<'static, str>,
    pub start_ns: i64,
    pub duration_ms: Option<f64>,
    /// Power level in -dBm0 (RFC 4733 only).
    pub volume: Option<u8>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub via: DigitVia,
    /// The end of the event was seen (always, for INFO).
    pub ended: bool,
}

impl CallRecord {
    /// The digits as one string (`1234#`), a flash as `!`, for a CDR column.
    pub fn digits(&self) -> String {
        self.dtmf()
            .iter()
            .filter_map(|d| match &*d.digit {
                "flash" => Some('!'),
                s if s.len() == 1 => s.chars().next(),
                _ => None,
            })
            .collect()
    }
}

/// A closed T.38 flow, with the Call-ID of the call whose SDP announced it.
#[derive(Debug, Clone)]
pub struct T38Record {
    pub flow: T38Flow,
    pub call_id: Option<Arc<str>>,
}

/// A closed RTP stream, with the Call-ID of the call whose SDP announced it.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    pub stream: RtpStream,
    pub call_id: Option<Arc<str>>,
}

/// Everything one run produced.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Calls that started, in INVITE order ([`MonitorConfig::report_starts`]).
    pub started: Vec<StartedCall>,
    pub calls: Vec<CallRecord>,
    pub registrations: Vec<Registration>,
    /// Streams not reported inside a call: unsignalled ones, and those that outlived their
    /// call's record.
    pub streams: Vec<StreamRecord>,
    /// T.38 flows not reported inside a call (they outlived its record).
    pub t38: Vec<T38Record>,
    pub sip: SipStats,
    pub counters: Counters,
    /// Time of the first and last packet, ns since the epoch.
    pub first_ns: Option<i64>,
    pub last_ns: i64,
}

impl Analysis {
    /// Every stream: those inside calls and the others.
    pub fn all_streams(&self) -> impl Iterator<Item = &StreamRecord> {
        self.calls
            .iter()
            .flat_map(|c| c.streams.iter())
            .chain(self.streams.iter())
    }
}

/// A media endpoint learnt from SDP.
struct Endpoint {
    call: Arc<str>,
    shard: u16,
    /// Dynamic payload types: (pt, clock rate; 0 for telephone-event).
    dynamic: Box<[(u8, u32)]>,
    /// The payload type the SDP gave `telephone-event` (RFC 4733 digits), if any.
    events_pt: Option<u8>,
    last_ns: i64,
    /// The SDP put this address on `image/udptl/t38`: its packets are T.38, never RTP.
    t38: bool,
    media: Media,
    /// SRTP (`RTP/SAVP`...): the payload is encrypted, the header is not.
    encrypted: bool,
    /// The last RTP packet sent to this address and from it: a datagram that continues one is
    /// RTP even on a port moved to T.38 since ([`crate::offer`]).
    rtp_tails: [RtpTail; 2],
}

/// Where a flow's packets go, and the call last told to that shard for it.
struct FlowRoute {
    shard: u16,
    call: Option<Arc<str>>,
    last_ns: i64,
}

/// Work for a shard.
pub(crate) enum Event {
    Sip {
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        data: Box<[u8]>,
        /// The dynamic payload types its SDP names (not telephone-event), if any.
        codecs: Option<Codecs>,
        /// What its SDP, if any, says of the call's media.
        sdp: SdpFacts,
        /// An INVITE's call, when the linker put its dialog in another's.
        link: Option<Box<legs::Link>>,
    },
    Rtp {
        ts_ns: i64,
        now_ms: f64,
        src: SocketAddr,
        dst: SocketAddr,
        header: RtpHeader,
        clock_rate: u32,
        call: CallRef,
        /// Where the RTP header starts in the frame (`None`: reassembled from fragments).
        rtp_offset: Option<u32>,
        /// What the SDP said of the flow (`Unknown`, false without one).
        media: Media,
        encrypted: bool,
    },
    /// An RFC 4733 telephone event (the SDP's `telephone-event` type), after its `Rtp` event.
    Dtmf {
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        ssrc: u32,
        pt: u8,
        timestamp: u32,
        bytes: [u8; 4],
    },
    Rtcp {
        blocks: Vec<ReportBlock>,
        /// The RTCP packet's addresses: the reported stream flows from its receiver back to
        /// its sender, on the RTP ports (one below, or the same with rtcp-mux).
        src: SocketAddr,
        dst: SocketAddr,
    },
    Udptl {
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        /// Boxed: T.38 is rare, and the RTP event's layout stays as it was without it.
        packet: Box<UdptlPacket>,
        call: CallRef,
    },
    Tick {
        ts_ns: i64,
    },
    /// The capture's clock stepped forward ([`crate::clock`]): before this frame's events.
    ClockStep(ClockStep),
}

/// What an RTP event says about its flow's call.
pub(crate) enum CallRef {
    /// No SDP announced the flow (or nothing new to say).
    Unknown,
    /// The flow's call, sent with every packet (inline: cheaper than a map lookup).
    Known(Arc<str>),
    /// The flow's call, sent once for the shard to remember (worker threads).
    Announce(Arc<str>),
}

struct StreamSlot {
    stream: RtpStream,
    call: Option<Arc<str>>,
}

/// Dialogs, registrations and streams of one shard.
pub(crate) struct CallShard {
    cfg: MonitorConfig,
    max_calls: usize,
    max_streams: usize,
    dialogs: FastMap<Arc<str>, Dialog>,
    /// REGISTER chains by [`registration_key`].
    registrations: FastMap<Box<str>, Registration>,
    streams: FastMap<PackedKey, StreamSlot>,
    by_ssrc: FastMap<u32, StreamKey>,
    /// The call each flow belongs to, as the front told it.
    flow_calls: FastMap<PackedKey, Arc<str>>,
    /// T.38 flows by (src, dst), with their call.
    t38: FastMap<PackedKey, T38Record>,
    out: Analysis,
    /// Calls tracked since the start, for [`LiveCounters`].
    calls_started: u64,
    /// Told of every frame attributed to a call and of every call closed.
    tap: Option<Box<dyn CallTap>>,
    dedup: FrameDedup,
    /// Where this shard publishes its calls in progress, and its slot there.
    board: Option<(Arc<LiveCalls>, usize)>,
    /// The part published before the last one, kept to reuse its buffers.
    board_spare: Option<ShardPart>,
    /// When the shard last published (wall clock), and the capture time it published at.
    board_wall: Option<std::time::Instant>,
    board_now_ns: i64,
    /// The only shard: a stream whose call is not among its dialogs belongs to no open call.
    sole: bool,
    /// Steps of the capture's clock, taken out of idle times.
    clock: ClockSteps,
}

/// The frame being analysed, for the tap.
pub(crate) struct Current<'a> {
    /// Frame number (per shard), so that a frame is reported once per call.
    seq: u64,
    frame: TapFrame<'a>,
}

impl CallShard {
    fn new(cfg: &MonitorConfig, shards: usize) -> CallShard {
        CallShard {
            cfg: cfg.clone(),
            max_calls: (cfg.max_calls / shards).max(1),
            max_streams: (cfg.max_streams / shards).max(1),
            dialogs: FastMap::default(),
            registrations: FastMap::default(),
            streams: FastMap::default(),
            by_ssrc: FastMap::default(),
            flow_calls: FastMap::default(),
            t38: FastMap::default(),
            out: Analysis::default(),
            calls_started: 0,
            tap: None,
            dedup: FrameDedup::default(),
            board: None,
            board_spare: None,
            board_wall: None,
            board_now_ns: 0,
            sole: shards == 1,
            clock: ClockSteps::default(),
        }
    }

    /// Reports `cur` to the tap as `call`'s, once per frame and call.
    fn report(&mut self, call: &Arc<str>, kind: TapKind, cur: &Current<'_>) {
        if let Some(tap) = self.tap.as_mut()
            && self.dedup.first(cur.seq, call)
        {
            tap.packet(call, kind, &cur.frame);
        }
    }

    /// Reports a media frame to the tap as its owner's: a call's, or a stream's without one
    /// (a frame is one stream's, so it needs no deduplication).
    fn report_media(&mut self, owner: Option<Owner>, kind: TapKind, cur: &Current<'_>) {
        match owner {
            Some(Owner::Call(c)) => self.report(&c, kind, cur),
            Some(Owner::Stream(s)) => {
                if let Some(tap) = self.tap.as_mut() {
                    tap.stream_packet(&s, kind, &cur.frame);
                }
            }
            None => {}
        }
    }

    fn handle(&mut self, ev: Event, cur: &Current<'_>) {
        match ev {
            Event::Sip {
                ts_ns,
                src,
                dst,
                data,
                codecs,
                sdp,
                link,
            } => {
                if let Ok(m) = Message::parse(&data) {
                    self.on_sip(ts_ns, src, dst, &m, (sdp, codecs.as_deref()), link, cur);
                }
            }
            Event::Rtp {
                ts_ns,
                now_ms,
                src,
                dst,
                header,
                clock_rate,
                call,
                rtp_offset,
                media,
                encrypted,
            } => {
                let sdp = (media, encrypted);
                let owner = self.on_rtp(ts_ns, now_ms, src, dst, &header, clock_rate, call, sdp);
                let rtp_offset = rtp_offset.map(|o| o as usize);
                self.report_media(owner, TapKind::Rtp { rtp_offset }, cur);
            }
            Event::Rtcp { blocks, src, dst } => {
                let owner = self.on_rtcp(&blocks, src, dst);
                self.report_media(owner, TapKind::Rtcp, cur);
            }
            Event::Dtmf {
                ts_ns,
                src,
                dst,
                ssrc,
                pt,
                timestamp,
                bytes,
            } => {
                if let Some(s) = self.streams.get_mut(&PackedKey::new(src, dst, ssrc)) {
                    s.stream.add_event(ts_ns, pt, timestamp, bytes);
                }
            }
            Event::Udptl {
                ts_ns,
                src,
                dst,
                packet,
                call,
            } => {
                if let Some(c) = self.on_udptl(ts_ns, src, dst, &packet, call) {
                    self.report(&c, TapKind::Udptl, cur);
                }
            }
            Event::ClockStep(step) => self.clock.push(step),
            Event::Tick { ts_ns } => {
                self.sweep(ts_ns, false);
                self.publish_calls(ts_ns, false);
                if let Some(tap) = self.tap.as_mut() {
                    tap.progress(ts_ns);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_sip(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        m: &Message<'_>,
        (facts, codecs): SdpSeen<'_>,
        link: Option<Box<legs::Link>>,
        cur: &Current<'_>,
    ) {
        let Some(call_id) = m.call_id() else { return };
        let method = m.method().unwrap_or("");
        if method == "REGISTER" {
            // A chain is one To user's requests in one Call-ID (see `Registration`).
            let key = registration_key(call_id, m);
            if let Some(r) = self.registrations.get_mut(&key) {
                if m.is_request() {
                    r.on_request(ts_ns, m);
                } else {
                    r.on_response(ts_ns, m);
                }
            } else if m.is_request() {
                if self.registrations.len() >= self.cfg.max_registrations {
                    self.out.counters.registrations_dropped += 1;
                    return;
                }
                self.registrations
                    .insert(key, Registration::from_request(ts_ns, src, dst, call_id, m));
            }
            return;
        }
        if let Some(d) = self.dialogs.get_mut(call_id) {
            d.on_message(ts_ns, src, dst, m);
            d.learn_fields(m, &self.cfg.headers);
            d.learn_sdp(facts, codecs.unwrap_or_default());
        } else if m.is_request() && method == "INVITE" {
            if self.dialogs.len() >= self.max_calls {
                self.out.counters.calls_dropped += 1;
                return;
            }
            let mut d = Dialog::from_invite(ts_ns, src, dst, m);
            d.link = link.map(|l| *l);
            d.on_message(ts_ns, src, dst, m);
            d.learn_fields(m, &self.cfg.headers);
            d.learn_sdp(facts, codecs.unwrap_or_default());
            let call_id: Arc<str> = Arc::from(call_id);
            if self.cfg.report_starts {
                if self.out.started.len() < STARTED_PER_TAKE_MAX {
                    self.out.started.push(StartedCall {
                        call_id: call_id.clone(),
                        caller: d.caller.clone(),
                        called: d.called.clone(),
                        caller_addr: d.caller_addr,
                        callee_addr: d.callee_addr,
                        invite_ns: ts_ns,
                        user_agent: m.header("User-Agent").map(|ua| {
                            let mut end = ua.len().min(256);
                            while !ua.is_char_boundary(end) {
                                end -= 1;
                            }
                            ua[..end].into()
                        }),
                    });
                } else {
                    self.out.counters.starts_dropped += 1;
                }
            }
            self.dialogs.insert(call_id.clone(), d);
            self.calls_started += 1;
        } else {
            return;
        }
        if self.tap.is_some()
            && let Some((key, _)) = self.dialogs.get_key_value(call_id)
        {
            let key = key.clone();
            self.report(&key, TapKind::Sip, cur);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_rtp(
        &mut self,
        ts_ns: i64,
        now_ms: f64,
        src: SocketAddr,
        dst: SocketAddr,
        h: &RtpHeader,
        clock_rate: u32,
        call: CallRef,
        (media, encrypted): (Media, bool),
    ) -> Option<Owner> {
        let known = match call {
            CallRef::Unknown => None,
            CallRef::Known(c) => Some(c),
            CallRef::Announce(c) => {
                self.flow_calls
                    .insert(PackedKey::new(src, dst, 0), c.clone());
                Some(c)
            }
        };
        let key = StreamKey {
            src,
            dst,
            ssrc: h.ssrc,
        };
        let packed = PackedKey::new(src, dst, h.ssrc);
        let slot = match self.streams.get_mut(&packed) {
            Some(s) => {
                // A stream whose first packets came before the SDP announcing it: now the
                // call's. Alone, only a call this shard holds (one it closed already keeps
                // none); with other shards the call may be theirs, and the records join at
                // the end.
                if s.call.is_none()
                    && let Some(c) = known
                    && (!self.sole || self.dialogs.contains_key(&c))
                {
                    if let Some(d) = self.dialogs.get_mut(&c)
                        && d.streams.len() < 64
                    {
                        d.streams.push(key);
                    }
                    if let Some(tap) = self.tap.as_mut() {
                        let id = StreamId {
                            key,
                            first_ns: s.stream.first_ns,
                        };
                        tap.stream_joined(&id, &c);
                    }
                    s.call = Some(c);
                }
                s
            }
            None => {
                let call = known.or_else(|| self.flow_calls.get(&packed.flow()).cloned());
                if self.streams.len() >= self.max_streams {
                    self.out.counters.streams_dropped += 1;
                    return None;
                }
                if let Some(c) = &call
                    && let Some(d) = self.dialogs.get_mut(c)
                    && d.streams.len() < 64
                {
                    d.streams.push(key);
                }
                self.by_ssrc.insert(h.ssrc, key);
                self.streams.entry(packed).or_insert(StreamSlot {
                    stream: RtpStream::new(key, ts_ns, call.is_some()),
                    call,
                })
            }
        };
        slot.stream.add(ts_ns, now_ms, h, clock_rate);
        if media != Media::Unknown {
            slot.stream.media = media;
            slot.stream.encrypted = encrypted;
        }
        // The packet is its stream's call's, or the stream's own (only when someone listens).
        self.tap.as_ref()?;
        Some(match &slot.call {
            Some(c) => Owner::Call(c.clone()),
            None => Owner::Stream(StreamId {
                key,
                first_ns: slot.stream.first_ns,
            }),
        })
    }

    /// Counts a UDPTL packet in its flow; returns the flow's call, for the tap.
    fn on_udptl(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        packet: &UdptlPacket,
        call: CallRef,
    ) -> Option<Arc<str>> {
        let flow = PackedKey::new(src, dst, 0);
        let known = match call {
            CallRef::Unknown => None,
            CallRef::Known(c) => Some(c),
            CallRef::Announce(c) => {
                self.flow_calls.insert(flow, c.clone());
                Some(c)
            }
        };
        if let Some(r) = self.t38.get_mut(&flow) {
            r.flow.take(ts_ns, packet);
            return r.call_id.clone().filter(|_| self.tap.is_some());
        }
        if self.streams.len() + self.t38.len() >= self.max_streams {
            self.out.counters.t38_dropped += 1;
            return None;
        }
        let call_id = known.or_else(|| self.flow_calls.get(&flow).cloned());
        let r = T38Record {
            flow: T38Flow::new(src, dst, ts_ns, packet),
            call_id,
        };
        let call = r.call_id.clone().filter(|_| self.tap.is_some());
        self.t38.insert(flow, r);
        call
    }

    /// Adds RTCP report blocks to their streams; returns, for the tap, the call of the first
    /// stream that has one, else the first stream reported on. Each block goes to the stream
    /// on the packet's path ([`crate::rtp::rtcp_reported_streams`]), else to the latest stream
    /// of its SSRC.
    fn on_rtcp(
        &mut self,
        blocks: &[ReportBlock],
        src: SocketAddr,
        dst: SocketAddr,
    ) -> Option<Owner> {
        let mut call = None;
        let mut lone = None;
        for b in blocks {
            let on_path = crate::rtp::rtcp_reported_streams(src, dst, b.ssrc)
                .iter()
                .map(PackedKey::stream)
                .find(|k| self.streams.contains_key(k));
            let key = on_path.or_else(|| self.by_ssrc.get(&b.ssrc).map(PackedKey::stream));
            if let Some(key) = key
                && let Some(s) = self.streams.get_mut(&key)
            {
                s.stream.add_rtcp(b);
                if call.is_none() && self.tap.is_some() {
                    call = s.call.clone();
                    if call.is_none() && lone.is_none() {
                        lone = Some(StreamId {
                            key: s.stream.key,
                            first_ns: s.stream.first_ns,
                        });
                    }
                }
            }
        }
        call.map(Owner::Call).or(lone.map(Owner::Stream))
    }

    /// Takes a stream's record out at capture time `now_ns`; the tap hears the end of one
    /// without a call.
    fn close_stream(&mut self, key: &StreamKey, now_ns: i64) -> Option<StreamRecord> {
        let packed = PackedKey::stream(key);
        let slot = self.streams.remove(&packed)?;
        self.flow_calls.remove(&packed.flow());
        if self.by_ssrc.get(&key.ssrc) == Some(key) {
            self.by_ssrc.remove(&key.ssrc);
        }
        if slot.call.is_none()
            && let Some(tap) = self.tap.as_mut()
        {
            let id = StreamId {
                key: *key,
                first_ns: slot.stream.first_ns,
            };
            // Left out of the analysis when this short ([`Monitor::take_finished`]).
            let kept = slot.stream.packets >= self.cfg.min_unsignalled_packets;
            tap.stream_ended(&id, now_ns, kept);
        }
        Some(StreamRecord {
            stream: slot.stream,
            call_id: slot.call,
        })
    }

    /// Closes what is done (or everything, at the end).
    fn sweep(&mut self, now_ns: i64, all: bool) {
        let ms = 1_000_000i64;
        let linger = self.cfg.call_linger_ms as i64 * ms;
        let auth_linger = self.cfg.auth_retry_ms as i64 * ms;
        let idle = self.cfg.call_idle_timeout_ms as i64 * ms;
        let answered_idle = self.cfg.answered_idle_timeout_ms as i64 * ms;
        let streams = &self.streams;
        // Idle times leave out the steps of the capture's clock (taken out of `self` meanwhile,
        // so that records can be closed while it is borrowed).
        let clock = std::mem::take(&mut self.clock);
        let idle_since = |then_ns: i64| clock.elapsed(then_ns, now_ns);
        let done: Vec<Arc<str>> = self
            .dialogs
            .iter()
            .filter(|(_, d)| {
                if all {
                    return true;
                }
                if let Some(end) = d.end_ns
                    && d.state.is_final()
                {
                    let challenged =
                        d.state == CallState::Failed && matches!(d.last_code, 401 | 407);
                    return idle_since(end) > if challenged { auth_linger } else { linger };
                }
                let media_last = d
                    .streams
                    .iter()
                    .filter_map(|k| streams.get(&PackedKey::stream(k)).map(|s| s.stream.last_ns))
                    .max()
                    .unwrap_or(i64::MIN);
                let last = d.last_activity_ns.max(media_last);
                let limit = if d.state == CallState::Answered {
                    answered_idle
                } else {
                    idle
                };
                idle_since(last) > limit
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in done {
            let d = self.dialogs.remove(&k).expect("dialog listed");
            let streams = d
                .streams
                .iter()
                .filter_map(|s| self.close_stream(s, now_ns))
                .collect();
            if let Some(tap) = self.tap.as_mut() {
                tap.call_ended(&k, d.invite_ns, now_ns);
            }
            let mut t38: Vec<T38Record> = self
                .t38
                .extract_if(|_, r| r.call_id.as_ref() == Some(&k))
                .map(|(_, r)| r)
                .collect();
            t38.sort_by_key(|r| (r.flow.first_ns, r.flow.src, r.flow.dst));
            let mut call = CallRecord {
                dialog: d,
                streams,
                t38,
            };
            call.name_codecs();
            self.out.calls.push(call);
        }
        let stream_idle = self.cfg.stream_idle_timeout_ms as i64 * ms;
        let dialogs = &self.dialogs;
        let idle_streams: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(_, s)| {
                all || (idle_since(s.stream.last_ns) > stream_idle
                    && s.call.as_ref().is_none_or(|c| !dialogs.contains_key(c)))
            })
            .map(|(_, s)| s.stream.key)
            .collect();
        for k in idle_streams {
            if let Some(r) = self.close_stream(&k, now_ns) {
                self.out.streams.push(r);
            }
        }
        let dialogs = &self.dialogs;
        let idle_t38 = self.t38.extract_if(|_, r| {
            all || (idle_since(r.flow.last_ns) > stream_idle
                && r.call_id.as_ref().is_none_or(|c| !dialogs.contains_key(c)))
        });
        self.out.t38.extend(idle_t38.map(|(_, r)| r));
        let reg_idle = self.cfg.registration_idle_timeout_ms as i64 * ms;
        let regs: Vec<Box<str>> = self
            .registrations
            .iter()
            .filter(|(_, r)| all || idle_since(r.last_ns) > reg_idle)
            .map(|(k, _)| k.clone())
            .collect();
        for k in regs {
            if let Some(r) = self.registrations.remove(&k) {
                self.out.registrations.push(r);
            }
        }
        self.clock = clock;
    }

    /// Publishes the calls in progress and their streams on the board: on the shard's tick,
    /// unless the last publication is more recent than `live_calls_min_wall_ms` (`force`: at
    /// the end). The part is built aside and swapped in; its strings are the only allocations.
    fn publish_calls(&mut self, now_ns: i64, force: bool) {
        let Some((board, slot)) = &self.board else {
            return;
        };
        let min_wall = self.cfg.live_calls_min_wall_ms;
        if !force && min_wall > 0 {
            let now = std::time::Instant::now();
            if self
                .board_wall
                .is_some_and(|t| now.duration_since(t).as_millis() < u128::from(min_wall))
            {
                return;
            }
            self.board_wall = Some(now);
        }
        self.board_now_ns = now_ns;
        let mut part = self.board_spare.take().unwrap_or_default();
        part.clear();
        part.taken_at_ns = now_ns;
        let calls_max = self.cfg.live_calls_per_shard_max;
        for (id, d) in &self.dialogs {
            if d.state.is_final() {
                continue;
            }
            if part.calls.len() < calls_max {
                part.calls.push(LiveCall::of(id, d, now_ns));
            } else {
                part.calls_left_out += 1;
            }
        }
        let streams_max = calls_max.saturating_mul(LIVE_STREAMS_PER_CALL);
        for slot in self.streams.values() {
            let Some(call) = &slot.call else { continue };
            let open = match self.dialogs.get(call) {
                Some(d) => !d.state.is_final(),
                // Kept by another shard, unless there is none.
                None => !self.sole,
            };
            if !open {
                continue;
            }
            if part.streams.len() < streams_max {
                part.streams
                    .push((call.clone(), LiveStream::of(&slot.stream)));
            } else {
                part.streams_left_out += 1;
            }
        }
        self.board_spare = board.publish(*slot, part);
    }

    fn finish(mut self) -> Analysis {
        self.sweep(i64::MAX, true);
        // Every call is closed: the board shows none of this shard's.
        self.publish_calls(self.board_now_ns, true);
        if let Some(tap) = self.tap.as_mut() {
            tap.progress(i64::MAX);
        }
        self.out
    }

    /// Active calls.
    fn active_calls(&self) -> usize {
        self.dialogs.len()
    }

    /// This shard's figures for [`LiveCounters`], with the SIP and RTP counts of `front`.
    fn live(&self, front: &Counters) -> Published {
        Published {
            sip_messages: front.sip_messages,
            rtp_packets: front.rtp_packets,
            calls_active: self.dialogs.len() as i64,
            calls_started: self.calls_started,
        }
    }
}

/// The key of a REGISTER chain: its Call-ID and its To user, apart by a line feed, which
/// neither can hold.
fn registration_key(call_id: &str, m: &Message<'_>) -> Box<str> {
    let user = m.to().map(|t| t.user()).unwrap_or("");
    let mut key = String::with_capacity(call_id.len() + 1 + user.len());
    key.push_str(call_id);
    key.push('\n');
    key.push_str(user);
    key.into()
}

/// Most (Call-ID, source, destination) keys tracked for resends; past it the table starts over
/// (a retransmission across the restart is then counted as a first transmission).
const RESEND_KEYS_MAX: usize = 200_000;

/// Wireshark's reading of a resent SIP message, so that `resent` equals `tshark -z sip,stat`'s:
/// over UDP only, per (Call-ID, source address and port, destination address and port), the
/// last CSeq number and method, the state of that transaction and its last final response. A
/// new CSeq number starts over. A request is resent when its CSeq number and method match and
/// the request was already seen (ACK and CANCEL never count); a final response is resent when
/// its CSeq number, method and code match a final response already seen. The call view marks
/// the ladder's resent messages with it.
#[derive(Default)]
pub struct Resends {
    keys: HashMap<(String, SocketAddr, SocketAddr), Transaction>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TransactionState {
    Nothing,
    Request,
    Provisional,
    Final,
}

struct Transaction {
    cseq: u32,
    method: String,
    state: TransactionState,
    final_code: u16,
}

impl Resends {
    /// Whether this message (of `call_id`, from `src` to `dst`, with its CSeq and, for a
    /// response, its code) resends one seen before; call it for every SIP message over UDP in
    /// capture order.
    pub fn is_resend(
        &mut self,
        call_id: &str,
        src: SocketAddr,
        dst: SocketAddr,
        cseq: u32,
        method: &str,
        code: Option<u16>,
    ) -> bool {
        let key = (call_id.to_string(), src, dst);
        if !self.keys.contains_key(&key) && self.keys.len() >= RESEND_KEYS_MAX {
            self.keys.clear();
        }
        let mut compare_to = 0;
        let t = match self.keys.get_mut(&key) {
            Some(t) => {
                compare_to = t.cseq;
                if t.cseq != cseq {
                    *t = Transaction {
                        cseq,
                        method: method.to_string(),
                        state: TransactionState::Nothing,
                        final_code: t.final_code,
                    };
                }
                t
            }
            None => self.keys.entry(key).or_insert(Transaction {
                cseq,
                method: method.to_string(),
                state: TransactionState::Nothing,
                final_code: 0,
            }),
        };
        let same = cseq == compare_to && method == t.method;
        let resend = match code {
            None => {
                same && t.state == TransactionState::Request
                    && method != "ACK"
                    && method != "CANCEL"
            }
            Some(c) => same && t.state == TransactionState::Final && c >= 200 && c == t.final_code,
        };
        match code {
            None => t.state = TransactionState::Request,
            Some(c) if c >= 200 => {
                t.final_code = c;
                t.state = TransactionState::Final;
            }
            Some(_) => t.state = TransactionState::Provisional,
        }
        resend
    }
}

/// The front stage's state.
struct Front {
    cfg: MonitorConfig,
    shards: usize,
    hasher: foldhash::quality::RandomState,
    /// In a worker: the shard this front feeds. Events for other shards are dropped (their
    /// own workers produce them), and RTP of other shards' flows is skipped early.
    me: Option<u16>,
    decoder: Decoder,
    tcp: SipTcp,
    sctp: SipSctp,
    endpoints: FastMap<PackedAddr, Endpoint>,
    flows: FastMap<PackedKey, FlowRoute>,
    first_ns: Option<i64>,
    last_ns: i64,
    last_tick_ns: i64,
    last_endpoint_sweep_ns: i64,
    sip: SipStats,
    resends: Resends,
    counters: Counters,
    rtcp_blocks: Vec<ReportBlock>,
    tcp_messages: Vec<Vec<u8>>,
    /// Steps of the capture's clock: found by the reading thread's front, told to workers'.
    clock: ClockSteps,
    /// Offers that change a known address's kind, until their answer ([`crate::offer`]).
    offers: PendingOffers<PackedAddr, Endpoint>,
    /// Puts each dialog in its call: every front that sees SIP runs one on the same INVITEs,
    /// so every worker decides alike.
    linker: Option<legs::Linker>,
    /// The HEP correlation id of the packet being read, if it came with one.
    correlation: Option<Box<str>>,
}

impl Front {
    fn new(
        cfg: &MonitorConfig,
        shards: usize,
        me: Option<u16>,
        hasher: foldhash::quality::RandomState,
    ) -> Front {
        Front {
            cfg: cfg.clone(),
            shards,
            me,
            hasher,
            decoder: Decoder::new(cfg.fragments),
            tcp: SipTcp::new(cfg.tcp),
            sctp: SipSctp::new(cfg.sctp),
            endpoints: FastMap::default(),
            flows: FastMap::default(),
            first_ns: None,
            last_ns: 0,
            last_tick_ns: i64::MIN,
            last_endpoint_sweep_ns: i64::MIN,
            sip: SipStats::default(),
            resends: Resends::default(),
            counters: Counters::default(),
            rtcp_blocks: Vec::new(),
            tcp_messages: Vec::new(),
            clock: ClockSteps::default(),
            offers: PendingOffers::new(PENDING_OFFERS_MAX),
            linker: linker_of(cfg),
            correlation: None,
        }
    }

    /// Whether the frame at `ts_ns` steps the capture's clock (the reading thread asks, before
    /// the frame counts as the latest): then the step is counted, logged and remembered.
    fn find_clock_step(&mut self, ts_ns: i64) -> Option<ClockStep> {
        self.first_ns?;
        // Measured from the time reached, which [`Monitor::advance_to`] moves on while a live
        // network is quiet: a quiet day is time that passed, not a step.
        let step = ClockStep::between(self.last_ns.max(self.last_tick_ns), ts_ns)?;
        self.counters.clock_steps += 1;
        step.log(self.counters.clock_steps);
        Some(step)
    }

    /// Takes a step of the clock into account here and in the shards, before the frame after
    /// it.
    fn clock_step(&mut self, step: ClockStep, emit: &mut dyn FnMut(u16, Event)) {
        self.clock.push(step);
        for s in 0..self.shards {
            emit(s as u16, Event::ClockStep(step));
        }
    }

    fn shard_of<T: Hash>(&self, v: &T) -> u16 {
        if self.shards == 1 {
            0
        } else {
            (self.hasher.hash_one(v) % self.shards as u64) as u16
        }
    }

    /// Milliseconds since the first packet, computed as Wireshark does (seconds and
    /// nanoseconds converted separately).
    fn rel_ms(&self, ts_ns: i64) -> f64 {
        let rel = ts_ns - self.first_ns.unwrap_or(ts_ns);
        let secs = rel.div_euclid(1_000_000_000);
        let nsecs = rel.rem_euclid(1_000_000_000);
        secs as f64 * 1000.0 + nsecs as f64 / 1_000_000.0
    }

    fn packet(
        &mut self,
        ts_ns: i64,
        link_type: u32,
        frame: &[u8],
        emit: &mut dyn FnMut(u16, Event),
    ) {
        self.counters.packets += 1;
        self.counters.bytes += frame.len() as u64;
        // A worker's front sees a part of the frames: the reading thread finds the steps.
        if self.me.is_none()
            && let Some(step) = self.find_clock_step(ts_ns)
        {
            self.clock_step(step, emit);
        }
        if self.first_ns.is_none() {
            self.first_ns = Some(ts_ns);
        }
        self.last_ns = self.last_ns.max(ts_ns);
        if ts_ns.saturating_sub(self.last_tick_ns) >= 1_000_000_000 {
            self.last_tick_ns = ts_ns;
            for s in 0..self.shards {
                emit(s as u16, Event::Tick { ts_ns });
            }
            self.sweep_endpoints(ts_ns);
        }
        let d = match self.decoder.decode(ts_ns, link_type, frame) {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(crate::decode::DecodeError::UnsupportedLink(_)) => {
                self.counters.unsupported_link += 1;
                return;
            }
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        let Datagram {
            src,
            dst,
            transport,
            payload,
        } = d;
        match transport {
            Transport::Udp => {
                self.counters.udp += 1;
                if sip::looks_like_sip(payload) {
                    // `payload` may borrow the fragment buffer: SIP is copied out first.
                    let data = payload.to_vec();
                    self.sip_message(ts_ns, src, dst, &data, true, emit);
                } else if let Some(h) = RtpHeader::parse(payload) {
                    // The payload lies in the frame unless it was reassembled from fragments.
                    let at = (payload.as_ptr() as usize).wrapping_sub(frame.as_ptr() as usize);
                    let rtp_offset = (at <= frame.len() && payload.len() <= frame.len() - at)
                        .then_some(at as u32);
                    // A reassembled datagram is gone once `rtp` runs: its head is kept in
                    // case the SDP made it UDPTL. One in the frame is read from there.
                    let head = rtp_offset
                        .is_none()
                        .then(|| UdptlHead::new(payload))
                        .flatten();
                    let len = payload.len();
                    // Telephone events use a dynamic payload type; only those are looked at.
                    let event = (h.payload_type >= 96)
                        .then(|| h.event_bytes(payload))
                        .flatten();
                    if self.rtp(ts_ns, src, dst, h, rtp_offset, event, emit) {
                        let packet = match rtp_offset {
                            Some(at) => frame.get(at as usize..at as usize + len),
                            None => None,
                        };
                        self.rtp_looking_udptl(ts_ns, (src, dst), packet, head, emit);
                    }
                } else if payload.len() >= crate::t38::MIN_UDPTL_BYTES
                    && is_t38(&self.endpoints, src, dst)
                    && let Some(p) = UdptlPacket::parse(payload)
                {
                    self.udptl(ts_ns, src, dst, p, emit);
                } else if crate::rtp::looks_like_rtcp(payload) {
                    self.counters.rtcp_packets += 1;
                    let mut blocks = std::mem::take(&mut self.rtcp_blocks);
                    blocks.clear();
                    crate::rtp::rtcp_report_blocks(payload, &mut blocks);
                    if !blocks.is_empty() {
                        // The reported stream flows from the RTCP receiver to its sender, on the
                        // RTP ports (conventionally one below).
                        let rtp_src = SocketAddr::new(dst.ip(), dst.port().wrapping_sub(1));
                        let rtp_dst = SocketAddr::new(src.ip(), src.port().wrapping_sub(1));
                        let shard = match self.flows.get(&PackedKey::new(rtp_src, rtp_dst, 0)) {
                            Some(route) => route.shard,
                            None => self.shard_of(&PackedKey::new(rtp_src, rtp_dst, 0)),
                        };
                        emit(
                            shard,
                            Event::Rtcp {
                                blocks: blocks.clone(),
                                src,
                                dst,
                            },
                        );
                    }
                    self.rtcp_blocks = blocks;
                }
            }
            Transport::Tcp { seq, flags } => {
                self.counters.tcp += 1;
                let mut msgs = std::mem::take(&mut self.tcp_messages);
                self.tcp.segment(ts_ns, src, dst, seq, flags, payload, |m| {
                    msgs.push(m.to_vec())
                });
                for m in msgs.drain(..) {
                    self.sip_message(ts_ns, src, dst, &m, false, emit);
                }
                self.tcp_messages = msgs;
            }
            Transport::Sctp => {
                let mut msgs = std::mem::take(&mut self.tcp_messages);
                self.sctp
                    .packet(ts_ns, src, dst, payload, |m| msgs.push(m.to_vec()));
                for m in msgs.drain(..) {
                    self.sip_message(ts_ns, src, dst, &m, false, emit);
                }
                self.tcp_messages = msgs;
            }
        }
    }

    fn sip_message(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        data: &[u8],
        udp: bool,
        emit: &mut dyn FnMut(u16, Event),
    ) {
        // A header section not in UTF-8 (a Latin-1 display name) is read with its bad bytes
        // replaced, and the shards are handed the repaired bytes.
        let mut repaired = Vec::new();
        let (m, data) = match Message::parse_lossy(data, &mut repaired) {
            Ok(read) => read,
            Err(_) => {
                self.counters.sip_parse_errors += 1;
                return;
            }
        };
        self.counters.sip_messages += 1;
        self.sip.messages += 1;
        match m.start {
            sip::StartLine::Request { method, .. } => {
                if let Some(n) = self.sip.requests.get_mut(method) {
                    *n += 1;
                } else {
                    self.sip.requests.insert(method.to_string(), 1);
                }
            }
            sip::StartLine::Response { code, .. } => {
                *self.sip.responses.entry(code).or_insert(0) += 1
            }
        }
        let Some(call_id) = m.call_id() else { return };
        if udp
            && let Some((cseq, method)) = m.cseq()
            && self
                .resends
                .is_resend(call_id, src, dst, cseq, method, m.status())
        {
            self.sip.resent += 1;
        }
        let shard = self.shard_of(&call_id);
        let mut codecs = None;
        let mut facts = SdpFacts::default();
        let mut answer = None;
        if m.has_sdp() {
            match Sdp::parse(m.body) {
                Ok(sdp) => {
                    self.learn_endpoints(ts_ns, call_id, shard, &sdp, offer_cseq(&m));
                    codecs = dynamic_codecs(&sdp);
                    facts = SdpFacts::of(&sdp);
                    answer = Some(sdp);
                }
                Err(_) => self.counters.sdp_parse_errors += 1,
            }
        }
        if !self.offers.is_empty() {
            self.settle_offer(call_id, &m, answer.as_ref());
        }
        let link = self.link(ts_ns, src, dst, call_id, &m);
        emit(
            shard,
            Event::Sip {
                ts_ns,
                src,
                dst,
                data: m_bytes(data, &m),
                codecs,
                sdp: facts,
                link,
            },
        );
    }

    /// The linker's answer for an INVITE (every INVITE: the linker knows Call-IDs it has seen).
    fn link(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        call_id: &str,
        m: &Message<'_>,
    ) -> Option<Box<legs::Link>> {
        let linker = self.linker.as_mut()?;
        let sip::StartLine::Request {
            method: "INVITE",
            uri,
        } = m.start
        else {
            return None;
        };
        let names = linker.headers().to_vec();
        let headers: Vec<(&str, &str)> = names
            .iter()
            .filter_map(|name| Some((&**name, m.header(name)?)))
            .collect();
        let to = m.to();
        let invite = legs::Invite {
            ts_ns,
            src,
            dst,
            call_id,
            caller: m.from().map_or("", |f| f.user()),
            ruri_user: ruri_user(uri),
            to_user: to.map_or("", |t| t.user()),
            initial: to.is_none_or(|t| t.tag.is_none()),
            headers: &headers,
            correlation: self.correlation.as_deref(),
        };
        linker.invite(&invite).map(Box::new)
    }

    /// Learns the media addresses of an SDP. An offer's T.38 streams, and its RTP streams on
    /// the call's T.38 addresses, wait for its answer (`offer_cseq`: the offer's CSeq, `None`
    /// for an answer); the rest applies at once.
    fn learn_endpoints(
        &mut self,
        ts_ns: i64,
        call_id: &str,
        shard: u16,
        sdp: &Sdp<'_>,
        offer_cseq: Option<u32>,
    ) {
        let call: Arc<str> = Arc::from(call_id);
        let mut changes = Vec::new();
        for media in &sdp.media {
            let Some(ip) = media.connection else { continue };
            let t38 = crate::dialog::is_t38(media);
            if media.port == 0 || (media.payload_types.is_empty() && !t38) {
                continue;
            }
            let dynamic: Box<[(u8, u32)]> = media
                .rtpmaps
                .iter()
                .filter(|m| m.payload_type >= 96)
                .map(|m| {
                    let rate = if m.encoding.eq_ignore_ascii_case("telephone-event") {
                        0
                    } else {
                        m.clock_rate
                    };
                    (m.payload_type, rate)
                })
                .collect();
            // RTCP needs no endpoint: it is routed by the flow of the stream it reports on.
            let addr = SocketAddr::new(ip, media.port);
            let addr = PackedAddr::new(addr);
            let known = self.endpoints.get(&addr);
            let endpoint = Endpoint {
                call: call.clone(),
                shard,
                dynamic,
                last_ns: ts_ns,
                t38,
                events_pt: media
                    .rtpmaps
                    .iter()
                    .find(|m| m.encoding.eq_ignore_ascii_case("telephone-event"))
                    .map(|m| m.payload_type),
                media: Media::from_sdp(media.kind),
                encrypted: crate::rtp::is_srtp_proto(media.proto),
                rtp_tails: known.map_or_else(Default::default, |e| e.rtp_tails),
            };
            // An offer of T.38, or of RTP on an address of the call's T.38.
            let changes_kind = t38 || known.is_some_and(|e| e.t38 && *e.call == *call_id);
            if offer_cseq.is_some() && changes_kind {
                changes.push((addr, endpoint, t38));
                continue;
            }
            self.add_endpoint(addr, endpoint);
        }
        if let Some(cseq) = offer_cseq
            && let Some(full) = self.offers.hold(call_id, cseq, ts_ns, changes)
        {
            for (addr, endpoint, _) in full {
                self.add_endpoint(addr, endpoint);
            }
        }
    }

    /// Adds or replaces an endpoint, within `max_endpoints`.
    fn add_endpoint(&mut self, addr: PackedAddr, endpoint: Endpoint) {
        if !self.endpoints.contains_key(&addr) && self.endpoints.len() >= self.cfg.max_endpoints {
            self.counters.endpoints_dropped += 1;
            return;
        }
        self.endpoints.insert(addr, endpoint);
    }

    /// Applies what an answer to a pending offer accepts of it.
    #[cold]
    fn settle_offer(&mut self, call_id: &str, m: &Message<'_>, answer: Option<&Sdp<'_>>) {
        for (addr, endpoint) in self.offers.settle(call_id, m, answer) {
            // The address kept its RTP since the offer: carry that on.
            let tails = self.endpoints.get(&addr).map(|e| e.rtp_tails);
            let endpoint = Endpoint {
                rtp_tails: tails.unwrap_or(endpoint.rtp_tails),
                ..endpoint
            };
            self.add_endpoint(addr, endpoint);
        }
    }

    fn sweep_endpoints(&mut self, now_ns: i64) {
        if now_ns.saturating_sub(self.last_endpoint_sweep_ns) < 60_000_000_000 {
            return;
        }
        self.last_endpoint_sweep_ns = now_ns;
        let idle = self.cfg.endpoint_idle_timeout_ms as i64 * 1_000_000;
        let clock = &self.clock;
        self.endpoints
            .retain(|_, e| clock.elapsed(e.last_ns, now_ns) <= idle);
        // An offer unanswered for as long as an unanswered call lives is not answered.
        let offer_idle = self.cfg.call_idle_timeout_ms as i64 * 1_000_000;
        self.offers
            .retain(|ts_ns| clock.elapsed(ts_ns, now_ns) <= offer_idle);
        let flow_idle = self.cfg.stream_idle_timeout_ms as i64 * 1_000_000;
        self.flows
            .retain(|_, f| clock.elapsed(f.last_ns, now_ns) <= flow_idle.max(idle));
    }

    /// Ticks every shard at `now_ns`, as a packet at that time would, if that is past the
    /// newest packet and the last tick (see [`Monitor::advance_to`]). True if it did.
    fn advance(&mut self, now_ns: i64, emit: &mut dyn FnMut(u16, Event)) -> bool {
        if self.first_ns.is_none() || now_ns <= self.last_ns || now_ns <= self.last_tick_ns {
            return false;
        }
        self.last_tick_ns = now_ns;
        for s in 0..self.shards {
            emit(s as u16, Event::Tick { ts_ns: now_ns });
        }
        self.sweep_endpoints(now_ns);
        true
    }

    #[allow(clippy::too_many_arguments)]
    // Out of line: inlined into `packet`, the RTP path cost 1 % more instructions (callgrind).
    #[inline(never)]
    fn rtp(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        h: RtpHeader,
        rtp_offset: Option<u32>,
        event: Option<[u8; 4]>,
        emit: &mut dyn FnMut(u16, Event),
    ) -> bool {
        // Returns whether the SDP made the flow UDPTL: the caller then reads it as T.38.
        let packed_flow = PackedKey::new(src, dst, 0);
        let flow_shard = if self.shards == 1 {
            0
        } else {
            (self.hasher.hash_one(packed_flow) % self.shards as u64) as u16
        };
        if self.me.is_some_and(|me| me != flow_shard) {
            return false;
        }
        // Counted by the flow's worker, which alone decides what the packet is (a fragmented
        // datagram reaches every worker: see the workers' loop).
        self.counters.rtp_packets += 1;
        let now_ms = self.rel_ms(ts_ns);
        // Which way the packet goes for the endpoint found: to it (0) or from it (1).
        let (mut ep, way) = match self.endpoints.get_mut(&PackedAddr::new(dst)) {
            Some(e) => (Some(e), 0),
            None => (self.endpoints.get_mut(&PackedAddr::new(src)), 1),
        };
        if ep
            .as_ref()
            .is_some_and(|e| e.t38 && !e.rtp_tails[way].continued_by(&h))
        {
            // The SDP moved this port to UDPTL: an RTP-looking first byte is a sequence number,
            // unless the datagram continues the RTP stream the port carried, or the one its
            // sender sent (known by the sender's endpoint when this one is new).
            let sent = way == 0
                && self
                    .endpoints
                    .get(&PackedAddr::new(src))
                    .is_some_and(|e| e.rtp_tails[1].continued_by(&h));
            if !sent {
                self.counters.rtp_packets -= 1;
                return true;
            }
            ep = self.endpoints.get_mut(&PackedAddr::new(dst));
        }
        let (call, call_shard, clock_rate, (media, encrypted, dtmf)) = match ep {
            Some(e) => {
                e.last_ns = ts_ns;
                e.rtp_tails[way] = RtpTail::of(&h);
                let rate = if h.payload_type < 96 {
                    crate::rtp::static_clock_rate(h.payload_type)
                } else {
                    e.dynamic
                        .iter()
                        .find(|(pt, _)| *pt == h.payload_type)
                        .map(|(_, r)| *r)
                        .unwrap_or(0)
                };
                let dtmf = e.events_pt == Some(h.payload_type);
                (
                    Some(&e.call),
                    Some(e.shard),
                    rate,
                    (e.media, e.encrypted, dtmf),
                )
            }
            None => {
                // Without SDP, RTP is recognised by its header alone; like Wireshark's heuristic
                // it only applies to ports that no well-known protocol owns (DNS, NetBIOS, ...).
                if src.port() < 1024 || dst.port() < 1024 {
                    self.counters.rtp_packets -= 1;
                    return false;
                }
                let rate = crate::rtp::static_clock_rate(h.payload_type);
                (None, None, rate, (Media::Unknown, false, false))
            }
        };
        if self.shards == 1 && self.me.is_none() {
            // Inline: one shard, the call goes with every packet.
            let call = match call {
                Some(c) => CallRef::Known(c.clone()),
                None => CallRef::Unknown,
            };
            emit(
                0,
                Event::Rtp {
                    ts_ns,
                    now_ms,
                    src,
                    dst,
                    header: h,
                    clock_rate,
                    call,
                    rtp_offset,
                    media,
                    encrypted,
                },
            );
            if dtmf && let Some(bytes) = event {
                emit(0, dtmf_event(ts_ns, src, dst, &h, bytes));
            }
            return false;
        }
        let (shard, call) = pin_flow(
            &mut self.flows,
            self.cfg.max_endpoints,
            self.me,
            ts_ns,
            packed_flow,
            flow_shard,
            call,
            call_shard,
        );
        let call = match call {
            Some(c) => CallRef::Announce(c),
            None => CallRef::Unknown,
        };
        emit(
            shard,
            Event::Rtp {
                ts_ns,
                now_ms,
                src,
                dst,
                header: h,
                clock_rate,
                call,
                rtp_offset,
                media,
                encrypted,
            },
        );
        if dtmf && let Some(bytes) = event {
            emit(shard, dtmf_event(ts_ns, src, dst, &h, bytes));
        }
        false
    }
}

/// Pins a flow to one shard at its first packet and tells that shard the flow's call once (not
/// per packet): the shard and the call to announce, if it is new.
#[allow(clippy::too_many_arguments)]
fn pin_flow(
    flows: &mut FastMap<PackedKey, FlowRoute>,
    flows_max: usize,
    me: Option<u16>,
    ts_ns: i64,
    packed_flow: PackedKey,
    flow_shard: u16,
    call: Option<&Arc<str>>,
    call_shard: Option<u16>,
) -> (u16, Option<Arc<str>>) {
    match flows.get_mut(&packed_flow) {
        Some(route) => {
            route.last_ns = ts_ns;
            let announce = match (call, &route.call) {
                (Some(c), Some(prev)) if Arc::ptr_eq(c, prev) => None,
                (Some(c), _) => {
                    route.call = Some(c.clone());
                    Some(c.clone())
                }
                (None, _) => None,
            };
            (route.shard, announce)
        }
        None => {
            // Inline, a flow goes with its call; across workers, by its own hash.
            let shard = match call_shard {
                Some(s) if me.is_none() => s,
                _ => flow_shard,
            };
            if flows.len() < flows_max {
                flows.insert(
                    packed_flow,
                    FlowRoute {
                        shard,
                        call: call.cloned(),
                        last_ns: ts_ns,
                    },
                );
            }
            (shard, call.cloned())
        }
    }
}

/// Names of dynamic payload types, as an SDP's `a=rtpmap` lines give them.
pub(crate) type Codecs = Box<[(u8, Box<str>)]>;

/// What a SIP message's SDP told its call: its facts and the names of its dynamic payload types.
/// The linker `[legs]` asks for, if any.
fn linker_of(cfg: &MonitorConfig) -> Option<legs::Linker> {
    if !cfg.legs.enabled {
        return None;
    }
    legs::Linker::new(cfg.legs.clone())
        .inspect_err(|e| tracing::warn!("dialogs are not linked into calls: {e}"))
        .ok()
}

/// The user part of a Request-URI: none for a URI without one (`sip:10.0.0.2`), whose host is
/// no number.
fn ruri_user(uri: &str) -> &str {
    let tel = uri.get(..4).is_some_and(|s| s.eq_ignore_ascii_case("tel:"));
    if tel || uri.contains('@') {
        sip::uri_user(uri)
    } else {
        ""
    }
}

type SdpSeen<'a> = (SdpFacts, Option<&'a [(u8, Box<str>)]>);

/// The dynamic payload types an SDP names, telephone events aside (the front tells those apart
/// itself); `None` when there are none, as in most G.711 calls, so that nothing is allocated.
fn dynamic_codecs(sdp: &Sdp<'_>) -> Option<Codecs> {
    let named = || {
        sdp.media
            .iter()
            .flat_map(|m| m.rtpmaps.iter())
            .filter(|r| r.payload_type >= 96 && !r.encoding.eq_ignore_ascii_case("telephone-event"))
    };
    named().next()?;
    Some(
        named()
            .take(crate::dialog::CODECS_MAX)
            .map(|r| (r.payload_type, Box::from(r.encoding)))
            .collect(),
    )
}

/// Hands each item whose Call-ID names one of `calls` to it with `push`; returns the others.
fn join_to_calls<T>(
    calls: &mut [CallRecord],
    items: Vec<T>,
    call_id: impl Fn(&T) -> Option<&str>,
    push: impl Fn(&mut CallRecord, T),
) -> Vec<T> {
    let index: HashMap<Box<str>, usize> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.dialog.call_id.clone(), i))
        .collect();
    let mut unjoined = Vec::new();
    for item in items {
        match call_id(&item).and_then(|c| index.get(c)) {
            Some(&i) => push(&mut calls[i], item),
            None => unjoined.push(item),
        }
    }
    unjoined
}

/// The event for a telephone-event packet: its stream's key, RTP timestamp and event bytes.
fn dtmf_event(
    ts_ns: i64,
    src: SocketAddr,
    dst: SocketAddr,
    h: &RtpHeader,
    bytes: [u8; 4],
) -> Event {
    Event::Dtmf {
        ts_ns,
        src,
        dst,
        ssrc: h.ssrc,
        pt: h.payload_type,
        timestamp: h.timestamp,
        bytes,
    }
}

/// Whether an SDP put `dst` (or else `src`) on UDPTL.
fn is_t38(endpoints: &FastMap<PackedAddr, Endpoint>, src: SocketAddr, dst: SocketAddr) -> bool {
    endpoints
        .get(&PackedAddr::new(dst))
        .or_else(|| endpoints.get(&PackedAddr::new(src)))
        .is_some_and(|e| e.t38)
}

impl Front {
    /// A datagram that looked like RTP on a port the SDP moved to T.38: read whole from the
    /// frame, or from the head kept of a reassembled one. Cold, out of the RTP path.
    #[cold]
    #[inline(never)]
    fn rtp_looking_udptl(
        &mut self,
        ts_ns: i64,
        (src, dst): (SocketAddr, SocketAddr),
        datagram: Option<&[u8]>,
        head: Option<UdptlHead>,
        emit: &mut dyn FnMut(u16, Event),
    ) {
        let packet = match datagram {
            Some(d) => UdptlPacket::parse(d),
            None => head.as_ref().map(UdptlPacket::from_head),
        };
        if let Some(p) = packet {
            self.udptl(ts_ns, src, dst, p, emit);
        }
    }

    /// A UDPTL packet on a port the SDP moved to T.38: routed like RTP (the flow keeps its
    /// shard), counted apart from it. Cold: kept out of the RTP path's instructions.
    #[cold]
    #[inline(never)]
    fn udptl(
        &mut self,
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        packet: UdptlPacket,
        emit: &mut dyn FnMut(u16, Event),
    ) {
        let packed_flow = PackedKey::new(src, dst, 0);
        let flow_shard = if self.shards == 1 {
            0
        } else {
            (self.hasher.hash_one(packed_flow) % self.shards as u64) as u16
        };
        if self.me.is_some_and(|me| me != flow_shard) {
            return;
        }
        self.counters.udptl_packets += 1;
        let ep = match self.endpoints.get_mut(&PackedAddr::new(dst)) {
            Some(e) => Some(e),
            None => self.endpoints.get_mut(&PackedAddr::new(src)),
        };
        let (call, call_shard) = match ep {
            Some(e) => {
                e.last_ns = ts_ns;
                (Some(&e.call), Some(e.shard))
            }
            None => (None, None),
        };
        let (shard, call) = if self.shards == 1 && self.me.is_none() {
            (
                0,
                call.map_or(CallRef::Unknown, |c| CallRef::Known(c.clone())),
            )
        } else {
            let (shard, announce) = pin_flow(
                &mut self.flows,
                self.cfg.max_endpoints,
                self.me,
                ts_ns,
                packed_flow,
                flow_shard,
                call,
                call_shard,
            );
            (shard, announce.map_or(CallRef::Unknown, CallRef::Announce))
        };
        emit(
            shard,
            Event::Udptl {
                ts_ns,
                src,
                dst,
                packet: Box::new(packet),
                call,
            },
        );
    }
}

/// The message's own bytes (a UDP datagram may carry trailing bytes past Content-Length).
fn m_bytes(data: &[u8], m: &Message<'_>) -> Box<[u8]> {
    data[..m.len.min(data.len())].into()
}

/// Packets copied out of the capture for the workers, shared by all of them.
#[derive(Default)]
struct RawBatch {
    data: Vec<u8>,
    /// (time ns, link type, start in `data`, length, counted here): every packet is counted
    /// by exactly one worker, also when it is sent to all of them.
    packets: Vec<(i64, u32, usize, usize, bool)>,
    /// Time of the capture's first packet, so that every worker measures from the same origin.
    first_ns: i64,
    /// Steps of the capture's clock, each before the packet at its index in `packets`.
    clock_steps: Vec<(usize, ClockStep)>,
    /// After its packets, move capture time on to this ([`Monitor::advance_to`]).
    advance_ns: Option<i64>,
    /// HEP correlation ids, each of the packet at its index in `packets`.
    correlations: Vec<(usize, Box<str>)>,
}

enum Backend {
    Inline(Box<CallShard>),
    /// The reading thread peeks at each UDP datagram and sends RTP, RTCP and other UDP to the
    /// worker its flow hashes to; SIP, TCP and fragments go to every worker (so each knows
    /// every call's media endpoints). A worker keeps the dialogs whose Call-ID and the flows
    /// whose addresses hash to it.
    Workers {
        senders: Vec<SyncSender<RawBatch>>,
        /// Emptied batches coming back from the workers, reused so that their buffers are not
        /// allocated (and page-faulted in) again for every batch.
        returns: Vec<Receiver<RawBatch>>,
        batches: Vec<RawBatch>,
        handles: Vec<JoinHandle<(Analysis, FrontTotals)>>,
        hasher: foldhash::quality::RandomState,
    },
}

/// What a worker's front counted.
struct FrontTotals {
    sip: SipStats,
    counters: Counters,
    first_ns: Option<i64>,
    last_ns: i64,
}

impl Front {
    fn totals(&self) -> FrontTotals {
        let mut counters = self.counters;
        counters.fragments_reassembled = self.decoder.counters.reassembled;
        counters.fragments_expired = self.decoder.counters.fragments_expired;
        counters.decode = self.decoder.counters;
        counters.sip_tcp = self.tcp.counters;
        counters.sip_sctp = self.sctp.counters;
        FrontTotals {
            sip: self.sip.clone(),
            counters,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
        }
    }
}

/// The call monitor: feed it packets (or whole files), then take the [`Analysis`].
pub struct Monitor {
    cfg: MonitorConfig,
    front: Front,
    backend: Backend,
    live: Arc<LiveCounters>,
    live_calls: Arc<LiveCalls>,
    /// What the inline shard published last.
    published: Published,
    /// Frames fed so far (inline mode), numbering them for the tap.
    seq: u64,
}

impl Monitor {
    /// A monitor with `workers` threads; 1 runs everything inline on the caller's thread.
    /// With more, the caller's thread only reads and copies packets into shared batches.
    pub fn new(cfg: MonitorConfig, workers: usize) -> Monitor {
        Self::build(cfg, workers, None)
    }

    /// A monitor like [`Monitor::new`] whose shards report to taps: `make_tap(i)` is called once
    /// for each shard `i` (one with one worker), and the tap is then called on that shard's
    /// thread (see [`crate::tap`]).
    pub fn with_tap(
        cfg: MonitorConfig,
        workers: usize,
        mut make_tap: impl FnMut(usize) -> Box<dyn CallTap>,
    ) -> Monitor {
        Self::build(cfg, workers, Some(&mut make_tap))
    }

    fn build(
        cfg: MonitorConfig,
        workers: usize,
        mut make_tap: Option<&mut dyn FnMut(usize) -> Box<dyn CallTap>>,
    ) -> Monitor {
        let workers = workers.clamp(1, 256);
        let hasher = foldhash::quality::RandomState::default();
        let front = Front::new(&cfg, 1, None, hasher.clone());
        let live = Arc::new(LiveCounters::default());
        let live_calls = Arc::new(LiveCalls::new(workers));
        let mut shard_with_tap = |i: usize| {
            let mut shard = CallShard::new(&cfg, workers);
            shard.tap = make_tap.as_mut().map(|f| f(i));
            shard.board = Some((live_calls.clone(), i));
            shard
        };
        let backend = if workers == 1 {
            Backend::Inline(Box::new(shard_with_tap(0)))
        } else {
            let mut senders = Vec::new();
            let mut returns = Vec::new();
            let mut handles = Vec::new();
            for i in 0..workers {
                let (tx, rx): (SyncSender<RawBatch>, Receiver<RawBatch>) =
                    sync_channel(cfg.queue_batches);
                let (back_tx, back_rx): (SyncSender<RawBatch>, Receiver<RawBatch>) =
                    sync_channel(cfg.queue_batches + 2);
                returns.push(back_rx);
                let mut shard = shard_with_tap(i);
                let mut front = Front::new(&cfg, workers, Some(i as u16), hasher.clone());
                let me = i as u16;
                let live = live.clone();
                let h = std::thread::Builder::new()
                    .name(format!("monitor-worker-{i}"))
                    .spawn(move || {
                        let mut published = Published::default();
                        let mut seq = 0u64;
                        while let Ok(mut batch) = rx.recv() {
                            front.first_ns.get_or_insert(batch.first_ns);
                            let mut steps = batch.clock_steps.iter().peekable();
                            let mut correlations = batch.correlations.iter().peekable();
                            for (i, &(ts, lt, start, len, counted)) in
                                batch.packets.iter().enumerate()
                            {
                                let frame = &batch.data[start..start + len];
                                seq += 1;
                                let cur = Current {
                                    seq,
                                    frame: TapFrame {
                                        ts_ns: ts,
                                        link_type: lt,
                                        data: frame,
                                    },
                                };
                                let mut emit = |s: u16, ev: Event| {
                                    if s == me {
                                        shard.handle(ev, &cur);
                                    }
                                };
                                while let Some((_, step)) = steps.next_if(|(at, _)| *at <= i) {
                                    front.clock_step(*step, &mut emit);
                                }
                                front.correlation = correlations
                                    .next_if(|(at, _)| *at == i)
                                    .map(|(_, c)| c.clone());
                                if counted {
                                    front.packet(ts, lt, frame, &mut emit);
                                } else {
                                    // Counted by another worker: analyse, but leave the counts,
                                    // except those of a flow this worker owns (a fragmented RTP or
                                    // UDPTL datagram is counted by its flow's worker, which alone
                                    // tells what it is).
                                    let counters = front.counters;
                                    let sip = std::mem::take(&mut front.sip);
                                    front.packet(ts, lt, frame, &mut emit);
                                    let owned =
                                        (front.counters.rtp_packets, front.counters.udptl_packets);
                                    front.counters = counters;
                                    (front.counters.rtp_packets, front.counters.udptl_packets) =
                                        owned;
                                    front.sip = sip;
                                }
                            }
                            if let Some(now_ns) = batch.advance_ns.take() {
                                let cur = Current {
                                    seq,
                                    frame: TapFrame {
                                        ts_ns: now_ns,
                                        link_type: 0,
                                        data: &[],
                                    },
                                };
                                front.advance(now_ns, &mut |s, ev| {
                                    if s == me {
                                        shard.handle(ev, &cur);
                                    }
                                });
                            }
                            published.publish(shard.live(&front.counters), &live);
                            batch.data.clear();
                            batch.packets.clear();
                            batch.clock_steps.clear();
                            batch.correlations.clear();
                            // The reader may have stopped taking them back: then drop it.
                            let _ = back_tx.try_send(batch);
                        }
                        (shard.finish(), front.totals())
                    })
                    .expect("spawn monitor worker thread");
                senders.push(tx);
                handles.push(h);
            }
            Backend::Workers {
                senders,
                returns,
                batches: (0..workers).map(|_| RawBatch::default()).collect(),
                handles,
                hasher,
            }
        };
        Monitor {
            cfg,
            front,
            backend,
            live,
            live_calls,
            published: Published::default(),
            seq: 0,
        }
    }

    /// The calls in progress, as the shards publish them about once a second while packets
    /// come (see [`crate::live_calls`]); empty once [`Monitor::finish`] has closed them.
    pub fn live_calls(&self) -> Arc<LiveCalls> {
        self.live_calls.clone()
    }

    /// Publishes the calls in progress again without waiting for the next second of capture
    /// time, which only packets bring: a call that ended while the network went quiet leaves
    /// the board at once. Live sources call it every quarter of a second. Inline mode only
    /// (with worker threads the workers publish on their own ticks); at most every
    /// `live_calls_min_wall_ms`, like the ticks' publications.
    pub fn refresh_live_calls(&mut self) {
        // The newest packet, or the time [`Monitor::advance_to`] moved on to since.
        let now_ns = self.front.last_ns.max(self.front.last_tick_ns);
        if let Backend::Inline(s) = &mut self.backend
            && self.front.first_ns.is_some()
        {
            s.publish_calls(now_ns, false);
        }
    }

    /// Moves capture time on to `now_ns` without a packet, for a live source while the network
    /// is quiet: every shard ticks as a packet at `now_ns` would make it tick (calls past their
    /// linger or idle timeout close, streams and registrations time out, the live board and
    /// the taps' progress move on), so that a call that ended is reported without waiting for
    /// an unrelated packet. Time never moves back: nothing happens before the first packet,
    /// nor unless `now_ns` is past the newest packet and the last tick. With worker threads the
    /// packets batched so far go to the workers with the tick, without waiting: a worker whose
    /// queue is full has packets to move its time on. Returns whether time moved.
    pub fn advance_to(&mut self, now_ns: i64) -> bool {
        match &mut self.backend {
            Backend::Inline(shard) => {
                let shard = &mut **shard;
                let cur = Current {
                    seq: self.seq,
                    frame: TapFrame {
                        ts_ns: now_ns,
                        link_type: 0,
                        data: &[],
                    },
                };
                let moved = self
                    .front
                    .advance(now_ns, &mut |_, ev| shard.handle(ev, &cur));
                if moved {
                    self.publish();
                }
                moved
            }
            Backend::Workers {
                senders,
                returns,
                batches,
                ..
            } => {
                let f = &mut self.front;
                let Some(first_ns) = f.first_ns else {
                    return false;
                };
                if now_ns <= f.last_ns || now_ns <= f.last_tick_ns {
                    return false;
                }
                f.last_tick_ns = now_ns;
                for (w, b) in batches.iter_mut().enumerate() {
                    b.advance_ns = Some(now_ns);
                    b.first_ns = first_ns;
                    let fresh = returns[w].try_recv().unwrap_or_default();
                    let batch = std::mem::replace(b, fresh);
                    // Full: kept, and sent with its packets once the batch fills.
                    if let Err(TrySendError::Full(back) | TrySendError::Disconnected(back)) =
                        senders[w].try_send(batch)
                    {
                        *b = back;
                    }
                }
                true
            }
        }
    }

    /// Counters this monitor publishes as it runs, for other threads to read.
    pub fn live(&self) -> Arc<LiveCounters> {
        self.live.clone()
    }

    /// Copies the reading thread's counts (and the inline shard's) to [`LiveCounters`].
    fn publish(&mut self) {
        self.live
            .packets
            .store(self.front.counters.packets, Relaxed);
        if let Backend::Inline(shard) = &self.backend {
            self.published
                .publish(shard.live(&self.front.counters), &self.live);
        }
    }

    /// Feeds a frame that came with a HEP correlation id (chunk 17), which the linker reads
    /// when the frame is an INVITE ([`MonitorConfig::legs`]); otherwise as [`Monitor::packet`].
    pub fn packet_correlated(
        &mut self,
        ts_ns: i64,
        link_type: u32,
        frame: &[u8],
        correlation: Option<&[u8]>,
    ) {
        // Longer ones are never a Call-ID the linker remembers: one byte over tells it so.
        let c = correlation.map(|c| &c[..c.len().min(legs::config::MAX_VALUE_BYTES + 1)]);
        self.front.correlation = c.map(|c| String::from_utf8_lossy(c).into());
        self.packet(ts_ns, link_type, frame);
        self.front.correlation = None;
    }

    /// Feeds one link-layer frame captured at `ts_ns` (ns since the epoch).
    pub fn packet(&mut self, ts_ns: i64, link_type: u32, frame: &[u8]) {
        match &mut self.backend {
            Backend::Inline(shard) => {
                let shard = &mut **shard;
                self.seq += 1;
                let cur = Current {
                    seq: self.seq,
                    frame: TapFrame {
                        ts_ns,
                        link_type,
                        data: frame,
                    },
                };
                self.front
                    .packet(ts_ns, link_type, frame, &mut |_, ev| match ev {
                        // Inline: hand SIP over without copying the message again.
                        Event::Sip {
                            ts_ns,
                            src,
                            dst,
                            data,
                            codecs,
                            sdp,
                            link,
                        } => {
                            if let Ok(m) = Message::parse(&data) {
                                let sdp = (sdp, codecs.as_deref());
                                shard.on_sip(ts_ns, src, dst, &m, sdp, link, &cur);
                            }
                        }
                        other => shard.handle(other, &cur),
                    });
                if self
                    .front
                    .counters
                    .packets
                    .is_multiple_of(PUBLISH_EVERY_PACKETS)
                {
                    self.publish();
                }
            }
            Backend::Workers {
                senders,
                returns,
                batches,
                hasher,
                ..
            } => {
                if let Some(step) = self.front.find_clock_step(ts_ns) {
                    for b in batches.iter_mut() {
                        b.clock_steps.push((b.packets.len(), step));
                    }
                }
                let first_ns = *self.front.first_ns.get_or_insert(ts_ns);
                self.front.counters.packets += 1;
                if self
                    .front
                    .counters
                    .packets
                    .is_multiple_of(PUBLISH_EVERY_PACKETS)
                {
                    self.live
                        .packets
                        .store(self.front.counters.packets, Relaxed);
                }
                self.front.counters.bytes += frame.len() as u64;
                self.front.last_ns = self.front.last_ns.max(ts_ns);
                let n = batches.len();
                let target = route(hasher, n, link_type, frame);
                let cap = self.cfg.batch_events;
                let correlation = &self.front.correlation;
                let mut push = |w: usize, counted: bool| {
                    let b = &mut batches[w];
                    if let Some(c) = correlation {
                        b.correlations.push((b.packets.len(), c.clone()));
                    }
                    let start = b.data.len();
                    b.data.extend_from_slice(frame);
                    b.packets
                        .push((ts_ns, link_type, start, frame.len(), counted));
                    b.first_ns = first_ns;
                    if b.packets.len() >= cap {
                        let fresh = returns[w].try_recv().unwrap_or_default();
                        let full = std::mem::replace(b, fresh);
                        // A worker that died has panicked; finish() reports it.
                        let _ = senders[w].send(full);
                    }
                };
                match target {
                    Some(w) => push(w, true),
                    None => {
                        for w in 0..n {
                            push(w, w == 0);
                        }
                    }
                }
            }
        }
    }

    /// Reads every packet of a capture file. On a read error the packets before it stay
    /// analysed; the error names the file and byte offset. `progress` gets the bytes read so
    /// far every 64 Ki packets and at the end.
    pub fn read_file(
        &mut self,
        path: &Path,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, CaptureError> {
        let mut r = CaptureReader::open(path)?;
        self.read_capture(&mut r, &mut progress)
    }

    /// Reads every packet from an open capture.
    pub fn read_capture(
        &mut self,
        r: &mut CaptureReader,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, CaptureError> {
        let mut n = 0u64;
        loop {
            let offset = r.offset();
            match r.next_packet()? {
                Some(p) => {
                    let (ts, lt) = (p.ts_ns, p.link_type);
                    self.packet(ts, lt, p.data);
                    n += 1;
                    if n.is_multiple_of(65_536) {
                        progress(offset);
                    }
                }
                None => {
                    progress(r.offset());
                    return Ok(n);
                }
            }
        }
    }

    /// Takes the records closed so far (calls, registrations, streams without a call), so that
    /// a long capture does not keep them all in memory. Inline mode only: with worker threads a
    /// call's streams may live in another worker, and records are joined in [`Monitor::finish`];
    /// this then returns an empty analysis.
    pub fn take_finished(&mut self) -> Analysis {
        self.publish();
        match &mut self.backend {
            Backend::Inline(s) => {
                let mut out = Analysis::default();
                std::mem::swap(&mut out.started, &mut s.out.started);
                std::mem::swap(&mut out.calls, &mut s.out.calls);
                std::mem::swap(&mut out.registrations, &mut s.out.registrations);
                std::mem::swap(&mut out.t38, &mut s.out.t38);
                let min = self.cfg.min_unsignalled_packets;
                out.streams = std::mem::take(&mut s.out.streams)
                    .into_iter()
                    .filter(|s| s.call_id.is_some() || s.stream.packets >= min)
                    .collect();
                out
            }
            Backend::Workers { .. } => Analysis::default(),
        }
    }

    /// Calls being tracked now (inline mode only; 0 with worker threads).
    pub fn active_calls(&self) -> usize {
        match &self.backend {
            Backend::Inline(s) => s.active_calls(),
            Backend::Workers { .. } => 0,
        }
    }

    /// The stream `key` as it stands now, while it is open (inline mode only; `None` with
    /// worker threads and once its record has closed). Lets a caller follow a stream's running
    /// figures (packets, loss, jitter) between packets, as the call view's intervals do.
    pub fn open_stream(&self, key: &StreamKey) -> Option<&RtpStream> {
        match &self.backend {
            Backend::Inline(s) => s.streams.get(&PackedKey::stream(key)).map(|s| &s.stream),
            Backend::Workers { .. } => None,
        }
    }

    /// Closes everything still open and returns the whole analysis. Streams whose call was
    /// kept by another worker are joined to their call here.
    pub fn finish(mut self) -> Analysis {
        self.publish();
        let Monitor {
            front,
            backend,
            cfg,
            live,
            ..
        } = self;
        let (parts, totals): (Vec<Analysis>, FrontTotals) = match backend {
            Backend::Inline(shard) => (vec![shard.finish()], front.totals()),
            Backend::Workers {
                senders,
                batches,
                handles,
                ..
            } => {
                for (tx, b) in senders.iter().zip(batches) {
                    if !b.packets.is_empty() {
                        let _ = tx.send(b);
                    }
                }
                drop(senders);
                let mut parts = Vec::new();
                let mut totals = front.totals();
                let mut first_worker = true;
                for h in handles {
                    let (a, t) = h.join().expect("monitor worker thread panicked");
                    parts.push(a);
                    totals.counters.add_front(&t.counters, first_worker);
                    first_worker = false;
                    totals.sip.merge(&t.sip);
                }
                (parts, totals)
            }
        };
        // The shards have closed every call still open (and the workers published their last
        // batches).
        live.calls_active.store(0, Relaxed);
        let mut out = Analysis {
            sip: totals.sip,
            counters: totals.counters,
            first_ns: totals.first_ns,
            last_ns: totals.last_ns,
            ..Analysis::default()
        };
        for p in parts {
            out.counters.add(&p.counters);
            out.started.extend(p.started);
            out.calls.extend(p.calls);
            out.registrations.extend(p.registrations);
            out.streams.extend(p.streams);
            out.t38.extend(p.t38);
        }
        // Streams and T.38 flows kept by another worker than their call's dialog join it here.
        let streams = std::mem::take(&mut out.streams);
        out.streams = join_to_calls(
            &mut out.calls,
            streams,
            |s| s.call_id.as_deref(),
            |c, s| c.streams.push(s),
        );
        let t38 = std::mem::take(&mut out.t38);
        out.t38 = join_to_calls(
            &mut out.calls,
            t38,
            |r| r.call_id.as_deref(),
            |c, r| c.t38.push(r),
        );
        for c in &mut out.calls {
            c.name_codecs();
            c.streams.sort_by_key(|s| (s.stream.first_ns, s.stream.key));
            c.t38
                .sort_by_key(|r| (r.flow.first_ns, r.flow.src, r.flow.dst));
        }
        let min = cfg.min_unsignalled_packets;
        out.streams
            .retain(|s| s.call_id.is_some() || s.stream.packets >= min);
        out.calls.sort_by(|a, b| {
            (a.dialog.invite_ns, &a.dialog.call_id).cmp(&(b.dialog.invite_ns, &b.dialog.call_id))
        });
        out.registrations.sort_by_key(|r| r.first_ns);
        out.started.sort_by_key(|c| c.invite_ns);
        out.streams
            .sort_by_key(|s| (s.stream.first_ns, s.stream.key));
        out
    }
}
