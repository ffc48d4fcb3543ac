//! [`LiveCalls`]: the calls in progress as the call shards last published them, for a live page
//! read on other threads (the console's).
//!
//! Each shard builds its part on its tick, which comes once per second of capture time (the
//! packets' own clock), and swaps it in under a short lock; nothing is done per packet. With a
//! live source capture time is wall-clock time. A file read faster than real time would tick many
//! times per wall second, so a shard also lets at least
//! [`MonitorConfig::live_calls_min_wall_ms`](crate::MonitorConfig::live_calls_min_wall_ms) of
//! wall-clock time pass between two publications. A part holds at most
//! [`MonitorConfig::live_calls_per_shard_max`](crate::MonitorConfig::live_calls_per_shard_max)
//! calls and [`LIVE_STREAMS_PER_CALL`] times as many streams; the rest are counted, not shown.
//!
//! A call is in progress from its INVITE until its dialog reaches a final state (BYE, a final
//! failure, CANCEL): it leaves the board at the next publication, although its shard keeps it a
//! few seconds longer for late packets. With worker threads a call's media may be kept by another
//! shard than its dialog, so streams are published with their Call-ID and joined to their calls
//! when a snapshot is taken; the parts of two shards may then be up to a tick apart.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::dialog::Dialog;
use crate::rtp::RtpStream;

/// Default of `MonitorConfig::live_calls_per_shard_max`: calls one shard publishes at most.
pub const LIVE_CALLS_PER_SHARD_MAX: usize = 1_000;

/// Streams a shard publishes at most, per call it may publish: two for a voice call, four with
/// video or after a re-INVITE moved the media to new ports.
pub const LIVE_STREAMS_PER_CALL: usize = 4;

/// Default of `MonitorConfig::live_calls_min_wall_ms`. Below a second, so that a live source,
/// whose ticks reach the shard about a second apart give or take batching, publishes at each.
pub const LIVE_CALLS_MIN_WALL_MS: u64 = 500;

/// One RTP stream of a call in progress, its figures so far.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveStream {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ssrc: u32,
    /// Names of the payload types seen (`g711A`, `telephone-event`; a dynamic one by number).
    pub payload: String,
    /// `audio`, `video` or `unknown`, as the SDP said.
    pub media: &'static str,
    /// First and last packet, µs since the epoch.
    pub first_us: i64,
    pub last_us: i64,
    pub packets: u64,
    /// Expected minus received, as tshark counts it (negative with duplicates).
    pub lost: i64,
    /// `lost` over the packets expected, in percent (0 when `lost` is negative).
    pub loss_pct: f64,
    /// The current interarrival jitter (RFC 3550, Wireshark's reading) and the largest so far.
    pub jitter_ms: f64,
    pub max_jitter_ms: f64,
    /// The E-model's score of the stream so far; `None` for video or an unknown codec.
    pub mos: Option<f64>,
}

impl LiveStream {
    pub(crate) fn of(s: &RtpStream) -> LiveStream {
        let w = &s.wireshark;
        let lost = w.lost();
        LiveStream {
            src: s.key.src,
            dst: s.key.dst,
            ssrc: s.key.ssrc,
            payload: s.payload_names(),
            media: s.media.as_str(),
            first_us: s.first_ns.div_euclid(1000),
            last_us: s.last_ns.div_euclid(1000),
            packets: s.packets,
            lost,
            loss_pct: 100.0 * lost.max(0) as f64 / w.expected().max(1) as f64,
            jitter_ms: w.jitter_ms,
            max_jitter_ms: w.max_jitter_ms,
            mos: s.mos(),
        }
    }
}

/// A call in progress.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveCall {
    pub call_id: Arc<str>,
    pub caller: String,
    pub called: String,
    /// Signalling addresses of the first INVITE.
    pub caller_addr: SocketAddr,
    pub callee_addr: SocketAddr,
    /// `calling`, `early` or `answered`.
    pub state: &'static str,
    /// INVITE, first 18x and answer, µs since the epoch.
    pub start_us: i64,
    pub ringing_us: Option<i64>,
    pub answer_us: Option<i64>,
    /// From the INVITE to the publication that carried the call (`taken_at_us` at most).
    pub duration_ms: i64,
    /// Its RTP streams, by first packet.
    pub streams: Vec<LiveStream>,
}

impl LiveCall {
    pub(crate) fn of(call_id: &Arc<str>, d: &Dialog, now_ns: i64) -> LiveCall {
        let us = |ns: i64| ns.div_euclid(1000);
        LiveCall {
            call_id: call_id.clone(),
            caller: d.caller.to_string(),
            called: d.called.to_string(),
            caller_addr: d.caller_addr,
            callee_addr: d.callee_addr,
            state: d.state.as_str(),
            start_us: us(d.invite_ns),
            ringing_us: d.ringing_ns.map(us),
            answer_us: d.answer_ns.map(us),
            duration_ms: now_ns.saturating_sub(d.invite_ns).max(0) / 1_000_000,
            streams: Vec::new(),
        }
    }
}

/// The calls in progress at one moment, oldest first.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LiveCallsSnapshot {
    /// Capture time of the newest publication, µs since the epoch; `None` before the first.
    pub taken_at_us: Option<i64>,
    pub calls: Vec<LiveCall>,
    /// Calls in progress that the per-shard bound left out.
    pub left_out: u64,
    /// Streams of calls in progress that the per-shard bound left out.
    pub streams_left_out: u64,
}

/// What one shard published last. Streams carry their call's Call-ID (a shared pointer, not a
/// copy) and are joined to the calls in [`LiveCalls::snapshot`].
#[derive(Debug, Default)]
pub(crate) struct ShardPart {
    pub taken_at_ns: i64,
    pub calls: Vec<LiveCall>,
    pub streams: Vec<(Arc<str>, LiveStream)>,
    pub calls_left_out: u64,
    pub streams_left_out: u64,
}

impl ShardPart {
    /// Empties the part for reuse, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.calls.clear();
        self.streams.clear();
        self.calls_left_out = 0;
        self.streams_left_out = 0;
    }
}

/// The board every call shard publishes its calls in progress to; see the module's comment.
#[derive(Debug)]
pub struct LiveCalls {
    /// One slot per shard. A reader clones the `Arc` under the lock and reads outside it.
    parts: Box<[Mutex<Option<Arc<ShardPart>>>]>,
}

impl LiveCalls {
    pub(crate) fn new(shards: usize) -> LiveCalls {
        LiveCalls {
            parts: (0..shards.max(1)).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Puts shard `shard`'s new part in place. Returns the part it replaces when no reader
    /// holds that one any more, so that the shard reuses its buffers.
    pub(crate) fn publish(&self, shard: usize, part: ShardPart) -> Option<ShardPart> {
        let new = Some(Arc::new(part));
        let old = {
            let mut slot = self.parts[shard]
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *slot, new)
        };
        old.and_then(|p| Arc::try_unwrap(p).ok())
    }

    /// The calls in progress as last published, each with its streams, oldest first.
    pub fn snapshot(&self) -> LiveCallsSnapshot {
        let parts: Vec<Arc<ShardPart>> = self
            .parts
            .iter()
            .filter_map(|p| p.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        let mut out = LiveCallsSnapshot {
            taken_at_us: parts.iter().map(|p| p.taken_at_ns.div_euclid(1000)).max(),
            ..LiveCallsSnapshot::default()
        };
        for p in &parts {
            out.calls.extend(p.calls.iter().cloned());
            out.left_out += p.calls_left_out;
            out.streams_left_out += p.streams_left_out;
        }
        let index: HashMap<&str, usize> = out
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| (&*c.call_id, i))
            .collect();
        let mut joined: Vec<(usize, LiveStream)> = Vec::new();
        for p in &parts {
            for (call, s) in &p.streams {
                // A stream whose call is not shown (ended, or left out) is not shown either.
                if let Some(&i) = index.get(&**call) {
                    joined.push((i, s.clone()));
                }
            }
        }
        drop(index);
        for (i, s) in joined {
            out.calls[i].streams.push(s);
        }
        for c in &mut out.calls {
            c.streams.sort_by_key(|s| (s.first_us, s.src, s.dst));
        }
        out.calls
            .sort_by(|a, b| (a.start_us, &a.call_id).cmp(&(b.start_us, &b.call_id)));
        out
    }
}
