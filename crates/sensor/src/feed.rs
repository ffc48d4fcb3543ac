//! What a source sees of the sensor: a [`Feed`] to push packets into, a [`FlushClock`] for
//! handing closed records on, the [`QuietClock`] that moves a live source's capture time on
//! while no packet comes, and the [`StopSignal`] it polls. Sources (`live`, `hep`, the file
//! reader) depend on this module and the pipeline builds on them; nothing here knows the
//! pipeline, so data flows one way: source → monitor → sinks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use monitor::{Analysis, Monitor};

use crate::SensorError;

/// Live and HEP sources hand closed records to the sinks this often, and move capture time on
/// while no packet comes: a quarter of a second, so that with [`QUIET_GRACE`] a call is
/// reported within a second of being due (its linger passed), archive included.
const FLUSH_INTERVAL: Duration = Duration::from_millis(250);

/// While no packet comes, capture time follows the wall clock this far behind: a packet still
/// on its way (in a kernel ring block, which the kernel hands over within its 10 ms timeout,
/// or in the buffer before the analysis) is never older than the time already reached, so no
/// call is ended early for want of it.
const QUIET_GRACE: Duration = Duration::from_millis(250);

/// Where closed records go: the pipeline's sinks (archive, observer, CDR writer).
pub(crate) trait RecordSink {
    /// Takes a batch of closed records. `finished`: the monitor is done.
    fn flush(&mut self, part: Analysis, finished: bool) -> Result<(), SensorError>;
    /// Closed records are held back (for the archive to write their calls): a quiet source
    /// flushes again at its next wake-up instead of waiting for its [`FlushClock`].
    fn holding(&self) -> bool;
}

/// Asks a running sensor to stop: its source ends, the calls in progress are closed, reported
/// and stored. Cloneable; stopping twice is stopping once.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a source feeds: the monitor, and the sinks its closed records go to.
pub(crate) struct Feed<'a> {
    pub monitor: &'a mut Monitor,
    pub sinks: &'a mut dyn RecordSink,
    /// `--hep-send`: every frame is forwarded as HEP, and analysed only if it says so.
    pub hep_send: Option<&'a mut crate::hep_send::HepForwarder>,
    clock: QuietClock,
}

/// Capture time while no packet comes (live and HEP sources): the newest packet's time moved on
/// by the wall-clock time since it was analysed, less [`QUIET_GRACE`]. Relative to the
/// packets' own clock, not the machine's, so that a HEP agent whose clock is off by minutes
/// gets its calls closed on its own time; and monotonic (`Instant`), so that the machine's
/// clock being set does not move it.
#[derive(Debug, Default)]
pub(crate) struct QuietClock {
    newest_ns: Option<i64>,
    /// When the batch that brought `newest_ns` had been analysed; `None` while that batch is
    /// being analysed.
    analysed_at: Option<Instant>,
}

impl QuietClock {
    /// A packet captured at `ts_ns` is being analysed.
    fn saw(&mut self, ts_ns: i64) {
        if self.newest_ns.is_none_or(|n| ts_ns > n) {
            self.newest_ns = Some(ts_ns);
            self.analysed_at = None;
        }
    }

    /// The batch being analysed is done.
    fn analysed(&mut self) {
        if self.analysed_at.is_none() {
            self.analysed_at = Some(Instant::now());
        }
    }

    /// The capture time reached now, if a packet has come.
    pub fn now_ns(&self) -> Option<i64> {
        let since = self.analysed_at?.elapsed().saturating_sub(QUIET_GRACE);
        let since_ns = i64::try_from(since.as_nanos()).unwrap_or(i64::MAX);
        Some(self.newest_ns?.saturating_add(since_ns))
    }
}

impl Feed<'_> {
    pub fn new<'a>(
        monitor: &'a mut Monitor,
        sinks: &'a mut dyn RecordSink,
        hep_send: Option<&'a mut crate::hep_send::HepForwarder>,
    ) -> Feed<'a> {
        Feed {
            monitor,
            sinks,
            hep_send,
            clock: QuietClock::default(),
        }
    }

    pub fn packet(&mut self, ts_ns: i64, link_type: u32, data: &[u8]) {
        self.packet_correlated(ts_ns, link_type, data, None);
    }

    /// A frame that came with a HEP correlation id (chunk 17), which the monitor's linker reads
    /// from an INVITE.
    pub fn packet_correlated(
        &mut self,
        ts_ns: i64,
        link_type: u32,
        data: &[u8],
        correlation: Option<&[u8]>,
    ) {
        self.clock.saw(ts_ns);
        if let Some(f) = self.hep_send.as_deref_mut() {
            f.frame(ts_ns, link_type, data);
            if !f.analyse() {
                return;
            }
        }
        self.monitor
            .packet_correlated(ts_ns, link_type, data, correlation);
    }

    /// Whether the sinks hold closed records back ([`RecordSink::holding`]).
    pub fn holding(&self) -> bool {
        self.sinks.holding()
    }

    /// A batch of packets has been analysed: the time of the newest one is reached now.
    pub fn batch_analysed(&mut self) {
        self.clock.analysed();
    }

    /// Hands the records the monitor has closed to the sinks, and publishes its calls in
    /// progress again (a call that ended in a quiet moment leaves the live page). `quiet`: the
    /// source had nothing waiting, so capture time first moves on with the wall clock
    /// ([`QuietClock`]) and the calls due by then are closed.
    pub fn flush_finished(&mut self, quiet: bool) -> Result<(), SensorError> {
        let mut quiet_now_ns = 0;
        if quiet && let Some(now_ns) = self.clock.now_ns() {
            self.monitor.advance_to(now_ns);
            quiet_now_ns = now_ns;
        }
        self.monitor.refresh_live_calls();
        let mut part = self.monitor.take_finished();
        // The time the batch was taken at, so that alerts resolve while the network is quiet.
        part.last_ns = part.last_ns.max(quiet_now_ns);
        self.sinks.flush(part, false)
    }
}

/// A timer for the live sources' flushes.
pub(crate) struct FlushClock(Instant);

impl FlushClock {
    pub fn new() -> Self {
        FlushClock(Instant::now())
    }
    /// True once every [`FLUSH_INTERVAL`].
    pub fn due(&mut self) -> bool {
        if self.0.elapsed() >= FLUSH_INTERVAL {
            self.0 = Instant::now();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_time_follows_the_wall_clock_behind_the_grace_and_never_back() {
        let mut c = QuietClock::default();
        assert_eq!(c.now_ns(), None, "no time before a packet");
        // Days behind the machine's clock, as from a HEP agent whose clock is off.
        let t = 1_000_000_000_000_000_000;
        c.saw(t);
        assert_eq!(c.now_ns(), None, "not while its batch is analysed");
        c.analysed();
        // Within the grace, time stays at the newest packet.
        assert_eq!(c.now_ns(), Some(t));
        // An older packet moves nothing back.
        c.saw(t - 5_000_000_000);
        c.analysed();
        assert_eq!(c.now_ns(), Some(t));
        let since = Instant::now();
        std::thread::sleep(QUIET_GRACE + Duration::from_millis(150));
        let now = c.now_ns().unwrap();
        let elapsed = since.elapsed() + Duration::from_millis(1);
        assert!(now > t, "{now} after {t}");
        assert!(
            now - t <= (elapsed - QUIET_GRACE).as_nanos() as i64,
            "{} ns past the packet, {elapsed:?} since",
            now - t
        );
        // A newer packet is the new origin.
        c.saw(t + 10);
        c.analysed();
        assert_eq!(c.now_ns(), Some(t + 10));
    }
}
