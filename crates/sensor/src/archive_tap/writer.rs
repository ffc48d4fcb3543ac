//! The archive thread: batches from the shards' taps into the [`Archive`], each call closed
//! once every shard has passed its end, its location sent back to the capture.
//!
//! Time here is the monitor's: the shards' progress (their ticks), which never moves back. A
//! capture that goes back in time (a file older than the one before it, or a clock stepped
//! back within one) leaves it where it was; the monitor then closes that part's calls when
//! capture time passes them again, or at the end, and the archive holds them until then,
//! within its bounds ([`archive::ArchiveConfig`]: calls in progress, bytes per call and in
//! all). A minute whose tar files were closed meanwhile (at most
//! [`archive::ArchiveConfig::max_open_tars`] stay open) is reopened and appended to.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, Sender};

use archive::{Archive, CallArchive, CallHandle, LinkType, Packet, Retention};

use super::losses::Loss;
use super::{ArchiveGauges, Archived, Batch, End, HOUSEKEEPING_EVERY_NS, Item, RECENT_ENDS_MAX};

/// A forward step of the shards' progress larger than this is a clock step (a capture whose
/// clock jumped, or the next file of a later day), not time passing: it ages no call.
const CLOCK_STEP_NS: i64 = 86_400 * 1_000_000_000;

/// A call being archived.
struct OpenCall {
    handle: CallHandle,
    link_type: u32,
    /// A SIP packet of it was archived: the monitor reports SIP only for a dialog it tracks,
    /// and ends every dialog it tracks, so this call's end will come.
    has_sip: bool,
    /// [`Progress::elapsed_ns`] at its last packet.
    last_seen_ns: i64,
}

/// How far the shards have all got, counted as it moves forward: the clock the archive ages
/// calls by (orphans, housekeeping). Steps over [`CLOCK_STEP_NS`] count as nothing.
#[derive(Debug)]
struct Progress {
    /// The low watermark last seen (`i64::MIN` before every shard has reported).
    low_ns: i64,
    elapsed_ns: i64,
}

impl Progress {
    fn observe(&mut self, low_ns: i64) {
        if low_ns == i64::MIN || low_ns == i64::MAX {
            return;
        }
        if self.low_ns != i64::MIN {
            let step = low_ns.saturating_sub(self.low_ns);
            if step <= 0 {
                return;
            }
            if step <= CLOCK_STEP_NS {
                self.elapsed_ns += step;
            }
        }
        self.low_ns = low_ns;
    }
}

/// The archive thread's state.
pub(super) struct Writer {
    archive: Archive,
    calls: HashMap<Arc<str>, OpenCall>,
    /// Call-IDs of calls closed lately (set and insertion order, at most [`RECENT_ENDS_MAX`]).
    recent_ends: (HashSet<Arc<str>>, VecDeque<Arc<str>>),
    /// Ends waiting for every shard to pass their time.
    pending: Vec<End>,
    /// Per shard: every frame before this capture time has been handed over.
    watermarks: Vec<i64>,
    progress: Progress,
    results: Sender<Archived>,
    retention: Retention,
    /// The newest packet time seen: "now" for retention.
    clock_ns: i64,
    last_housekeeping_ns: i64,
    /// A call without SIP and without a packet for this long (progress) is an orphan.
    orphan_after_ns: i64,
    gauges: Arc<ArchiveGauges>,
}

impl Writer {
    pub(super) fn new(
        archive: Archive,
        shards: usize,
        results: Sender<Archived>,
        retention: Retention,
        orphan_after_ns: i64,
        gauges: Arc<ArchiveGauges>,
    ) -> Writer {
        Writer {
            archive,
            calls: HashMap::new(),
            recent_ends: (HashSet::new(), VecDeque::new()),
            pending: Vec::new(),
            watermarks: vec![i64::MIN; shards.max(1)],
            progress: Progress {
                low_ns: i64::MIN,
                elapsed_ns: 0,
            },
            results,
            retention,
            clock_ns: i64::MIN,
            last_housekeeping_ns: 0,
            orphan_after_ns,
            gauges,
        }
    }

    pub(super) fn run(&mut self, rx: Receiver<Batch>) {
        while let Ok(batch) = rx.recv() {
            self.gauges.queue_batches.fetch_sub(1, Relaxed);
            self.gauges
                .queue_bytes
                .fetch_sub(batch.data.len() as u64, Relaxed);
            self.batch(batch);
        }
        // Every tap is gone: close what is left.
        for w in &mut self.watermarks {
            *w = i64::MAX;
        }
        self.close_ready();
        let left: Vec<Arc<str>> = self.calls.keys().cloned().collect();
        for call in left {
            self.forget(&call);
        }
        if let Err(e) = self.archive.sync_and_close_tars() {
            self.error(&e.to_string());
        }
        self.housekeeping(true);
        self.publish();
    }

    fn batch(&mut self, b: Batch) {
        for item in &b.items {
            self.item(item, &b.data[item.start..item.start + item.len]);
        }
        self.pending.extend(b.ends);
        let last = self.watermarks.len() - 1;
        let w = &mut self.watermarks[b.source.min(last)];
        *w = (*w).max(b.watermark_ns);
        let low = self.watermarks.iter().copied().min().unwrap_or(i64::MAX);
        self.progress.observe(low);
        self.close_ready();
        self.housekeeping(false);
        self.publish();
    }

    fn item(&mut self, item: &Item, data: &[u8]) {
        self.clock_ns = self.clock_ns.max(item.ts_ns);
        if !self.calls.contains_key(&item.call) {
            if self.recent_ends.0.contains(&item.call) {
                if !item.sip {
                    self.gauges.packets_late.fetch_add(1, Relaxed);
                    self.gauges.names.add(Loss::Late, &item.call);
                    return;
                }
                // SIP of a closed Call-ID: a new dialog that reuses it.
                self.recent_ends.0.remove(&item.call);
            }
            let start_sec = item.ts_ns.div_euclid(1_000_000_000);
            match self
                .archive
                .start_call(item.call.as_bytes(), start_sec, LinkType(item.link_type))
            {
                Ok(handle) => {
                    self.calls.insert(
                        item.call.clone(),
                        OpenCall {
                            handle,
                            link_type: item.link_type,
                            has_sip: false,
                            last_seen_ns: self.progress.elapsed_ns,
                        },
                    );
                }
                Err(_) => {
                    self.gauges.dropped_at_limits.fetch_add(1, Relaxed);
                    self.gauges.names.add(Loss::Limits, &item.call);
                    return;
                }
            }
        }
        let call = self.calls.get_mut(&item.call).expect("inserted above");
        call.last_seen_ns = self.progress.elapsed_ns;
        if call.link_type != item.link_type {
            self.gauges.dropped_at_limits.fetch_add(1, Relaxed);
            self.gauges.names.add(Loss::Limits, &item.call);
            return;
        }
        call.has_sip |= item.sip;
        let p = Packet {
            ts_sec: item
                .ts_ns
                .div_euclid(1_000_000_000)
                .clamp(0, u32::MAX as i64) as u32,
            ts_usec: (item.ts_ns.rem_euclid(1_000_000_000) / 1000) as u32,
            data,
            orig_len: item.orig_len,
        };
        let dropped_before = self.archive.packets_dropped();
        let r = if item.sip {
            self.archive.add_sip(call.handle, &p)
        } else {
            self.archive.add_rtp(call.handle, &p, item.rtp_offset)
        };
        if let Err(e) = r {
            self.error(&e.to_string());
            self.gauges.names.add(Loss::WriteError, &item.call);
        } else if self.archive.packets_dropped() > dropped_before {
            // Over the call's or the archive's buffer limit: the member will be truncated.
            self.gauges.names.add(Loss::Limits, &item.call);
        }
    }

    /// Closes the calls whose end every shard has passed.
    fn close_ready(&mut self) {
        let low = self.watermarks.iter().copied().min().unwrap_or(i64::MAX);
        let (ready, wait): (Vec<End>, Vec<End>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.now_ns <= low);
        self.pending = wait;
        for e in ready {
            let result = match self.calls.remove(&e.call) {
                Some(open) => match self.archive.end_call(open.handle) {
                    Ok(a) => {
                        self.gauges.calls_archived.fetch_add(1, Relaxed);
                        Ok(a)
                    }
                    Err(err) => {
                        self.error(&err.to_string());
                        self.gauges.names.add(Loss::WriteError, &e.call);
                        Err(err.to_string())
                    }
                },
                // Nothing of it was archived (limits, or SIP-only with no SIP kept).
                None => Ok(CallArchive::default()),
            };
            self.remember_end(e.call.clone());
            // The capture may have stopped listening (it failed): nothing to do then.
            let _ = self.results.send(Archived {
                key: (e.call, e.invite_ns),
                result,
            });
        }
    }

    fn remember_end(&mut self, call: Arc<str>) {
        let (set, order) = &mut self.recent_ends;
        if set.insert(call.clone()) {
            order.push_back(call);
            if order.len() > RECENT_ENDS_MAX
                && let Some(old) = order.pop_front()
            {
                set.remove(&old);
            }
        }
    }

    /// Drops a call that will never be closed, unwritten.
    fn forget(&mut self, call: &Arc<str>) {
        if let Some(open) = self.calls.remove(call) {
            let _ = self.archive.discard_call(open.handle);
            self.gauges.calls_orphaned.fetch_add(1, Relaxed);
            self.gauges.names.add(Loss::Orphaned, call);
        }
    }

    /// Once a minute of progress (and at the end): forgets orphaned calls and applies
    /// retention. An orphan is a call with media and no SIP that has had no packet for
    /// longer than the monitor keeps any call: media the monitor attributed to a call it had
    /// closed, after the archive stopped remembering that call's end. A call with SIP is never
    /// one: its end will come, however capture time moves meanwhile.
    fn housekeeping(&mut self, last: bool) {
        let now = self.progress.elapsed_ns;
        if !last && now - self.last_housekeeping_ns < HOUSEKEEPING_EVERY_NS {
            return;
        }
        self.last_housekeeping_ns = now;
        let stale: Vec<Arc<str>> = self
            .calls
            .iter()
            .filter(|(_, c)| !c.has_sip && now - c.last_seen_ns > self.orphan_after_ns)
            .map(|(k, _)| k.clone())
            .collect();
        for call in stale {
            self.forget(&call);
        }
        if (self.retention.max_age_sec.is_some() || self.retention.max_total_bytes.is_some())
            && self.clock_ns != i64::MIN
        {
            let now_sec = self.clock_ns.div_euclid(1_000_000_000);
            match self.archive.prune(&self.retention, now_sec) {
                Ok(r) => {
                    self.gauges
                        .minutes_pruned
                        .fetch_add(r.minutes_deleted as u64, Relaxed);
                }
                Err(e) => self.error(&e.to_string()),
            }
        }
    }

    /// Copies the archive's counters to the gauges.
    fn publish(&self) {
        let s = self.archive.stats();
        self.gauges
            .packets_written
            .store(s.packets_written, Relaxed);
        self.gauges.bytes_written.store(s.bytes_written, Relaxed);
        self.gauges.files_created.store(s.tars_created, Relaxed);
        self.gauges
            .members_written
            .store(s.members_written, Relaxed);
        self.gauges
            .dropped_in_buffers
            .store(s.packets_dropped, Relaxed);
    }

    fn error(&self, e: &str) {
        let n = self.gauges.errors.fetch_add(1, Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(error = %e, errors = n, "archive write failed");
        }
    }
}
