//! Tandem's call monitor: reads captures (pcap, pcapng, gzip), decodes packets down to UDP and
//! TCP, follows SIP dialogs by Call-ID, measures every RTP stream the way Wireshark does, scores
//! it with the E-model, and builds call records.
//!
//! Start reading at [`analyzer::Monitor`]: [`pcap`] → [`decode`] (+ [`tcp`]) → front stage
//! (SIP framing, SDP endpoints, dispatch) → call shards ([`dialog`], [`rtp`], [`mos`]) →
//! [`analyzer::Analysis`]. A [`tap::CallTap`] given to [`Monitor::with_tap`] hears which call
//! each frame belongs to and when each call closes, and the same of each stream without a call
//! (the packet archive listens there).
//! [`synth`] writes synthetic captures with known ground truth.
//!
//! This crate does no network IO and keeps no files open beyond the capture being read; storing
//! records is the `cdr` crate's job.

pub mod analyzer;
pub mod clock;
pub mod decode;
pub mod dialog;
pub mod gre;
pub mod live;
pub mod live_calls;
pub mod mos;
mod offer;
pub mod pcap;
pub mod rtp;
pub mod sctp;
pub mod synth;
pub mod t38;
pub mod tap;
pub mod tcp;
pub mod websocket;

pub use analyzer::{
    Analysis, CallDigit, CallRecord, DigitVia, Monitor, MonitorConfig, Resends,
    STARTED_PER_TAKE_MAX, SipStats, StartedCall, StreamRecord, T38Record,
};
pub use live::{LiveCounters, LiveSnapshot};
pub use live_calls::{LiveCall, LiveCalls, LiveCallsSnapshot, LiveStream};
pub use tap::{CallTap, StreamId, TapFrame, TapKind};
