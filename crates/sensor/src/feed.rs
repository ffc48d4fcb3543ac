//! What a source sees of the sensor: a [`Feed`] to push packets into, a [`FlushClock`] for
//! handing closed records on, and the [`StopSignal`] it polls. Sources (`live`, `hep`, the file
//! reader) depend on this module and the pipeline builds on them; nothing here knows the
//! pipeline, so data flows one way: source → monitor → sinks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use monitor::{Analysis, Monitor};

use crate::SensorError;

/// Live and HEP sources hand closed records to the sinks this often.
const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Where closed records go: the pipeline's sinks (archive, observer, CDR writer).
pub(crate) trait RecordSink {
    /// Takes a batch of closed records. `finished`: the monitor is done.
    fn flush(&mut self, part: Analysis, finished: bool) -> Result<(), SensorError>;
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
}

impl Feed<'_> {
    pub fn packet(&mut self, ts_ns: i64, link_type: u32, data: &[u8]) {
        if let Some(f) = self.hep_send.as_deref_mut() {
            f.frame(ts_ns, link_type, data);
            if !f.analyse() {
                return;
            }
        }
        self.monitor.packet(ts_ns, link_type, data);
    }
    /// Hands the records the monitor has closed to the sinks, and publishes its calls in
    /// progress again (a call that ended in a quiet moment leaves the live page).
    pub fn flush_finished(&mut self) -> Result<(), SensorError> {
        self.monitor.refresh_live_calls();
        let part = self.monitor.take_finished();
        self.sinks.flush(part, false)
    }
}

/// A timer for the live sources' flushes.
pub(crate) struct FlushClock(Instant);

impl FlushClock {
    pub fn new() -> Self {
        FlushClock(Instant::now())
    }
    /// True once a second.
    pub fn due(&mut self) -> bool {
        if self.0.elapsed() >= FLUSH_INTERVAL {
            self.0 = Instant::now();
            return true;
        }
        false
    }
}
