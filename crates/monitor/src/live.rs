//! [`LiveCounters`]: figures the monitor publishes while it runs, for a status line or metrics
//! read on other threads.
//!
//! The analysing threads keep their counters in plain integers and copy them here now and then
//! (every [`PUBLISH_EVERY_PACKETS`] packets, after each worker batch, and whenever closed
//! records are taken), so the hot path pays nothing per packet. Readers see figures at most that
//! far behind.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Packets between two publications by the reading thread.
pub const PUBLISH_EVERY_PACKETS: u64 = 1024;

/// Counts since the monitor started. `calls_active` may lag behind by one publication.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Frames handed to the monitor.
    pub packets: AtomicU64,
    pub sip_messages: AtomicU64,
    pub rtp_packets: AtomicU64,
    /// Calls (INVITE dialogs) tracked now.
    pub calls_active: AtomicI64,
    /// Calls seen since the start (tracked, not dropped at `max_calls`).
    pub calls_started: AtomicU64,
}

/// A copy of [`LiveCounters`] at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LiveSnapshot {
    pub packets: u64,
    pub sip_messages: u64,
    pub rtp_packets: u64,
    pub calls_active: u64,
    pub calls_started: u64,
}

impl LiveCounters {
    pub fn snapshot(&self) -> LiveSnapshot {
        LiveSnapshot {
            packets: self.packets.load(Relaxed),
            sip_messages: self.sip_messages.load(Relaxed),
            rtp_packets: self.rtp_packets.load(Relaxed),
            calls_active: self.calls_active.load(Relaxed).max(0) as u64,
            calls_started: self.calls_started.load(Relaxed),
        }
    }
}

/// What one worker published last, so that it adds only what changed since.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Published {
    pub sip_messages: u64,
    pub rtp_packets: u64,
    pub calls_active: i64,
    pub calls_started: u64,
}

impl Published {
    /// Adds this worker's change since its last publication to the shared counters.
    pub(crate) fn publish(&mut self, now: Published, to: &LiveCounters) {
        to.sip_messages
            .fetch_add(now.sip_messages.wrapping_sub(self.sip_messages), Relaxed);
        to.rtp_packets
            .fetch_add(now.rtp_packets.wrapping_sub(self.rtp_packets), Relaxed);
        to.calls_active
            .fetch_add(now.calls_active - self.calls_active, Relaxed);
        to.calls_started
            .fetch_add(now.calls_started.wrapping_sub(self.calls_started), Relaxed);
        *self = now;
    }
}
