//! The archive thread: batches from the shards' taps into the [`Archive`], each call closed
//! once every shard has passed its end, its location sent back to the capture. A stream
//! without a call is one shard's, whose batches bring its end after all of it: it is closed
//! at its end. One that joins a call has what was kept of it moved into the call's member.
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
use monitor::StreamId;

use super::losses::Loss;
use super::{
    ArchiveGauges, Archived, Batch, End, HOUSEKEEPING_EVERY_NS, Item, Join, Key, Owner,
    RECENT_ENDS_MAX, stream_stem,
};

/// A forward step of the shards' progress larger than this is a clock step (a capture whose
/// clock jumped, or the next file of a later day), not time passing: it ages no call.
const CLOCK_STEP_NS: i64 = 86_400 * 1_000_000_000;

/// A call (or a stream without a call) being archived.
struct OpenCall {
    handle: CallHandle,
    link_type: u32,
    /// Its end will come: a SIP packet of it was archived (the monitor reports SIP only for a
    /// dialog it tracks, and ends every dialog it tracks), or it is a stream without a call
    /// (the monitor ends every stream it tracks).
    end_comes: bool,
    /// [`Progress::elapsed_ns`] at its last packet.
    last_seen_ns: i64,
    /// The capture time (s) of its first packet: its member's minute.
    start_sec: i64,
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
    calls: HashMap<Owner, OpenCall>,
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
    /// A call without SIP and without a packet for this long (progress) is an orphan (a
    /// stream without a call never is).
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
        let left: Vec<Owner> = self.calls.keys().cloned().collect();
        for owner in left {
            self.forget(&owner);
        }
        if let Err(e) = self.archive.sync_and_close_tars() {
            self.error(&e.to_string());
        }
        self.housekeeping(true);
        self.publish();
    }

    fn batch(&mut self, b: Batch) {
        let mut joins = b.joins.into_iter().peekable();
        for (i, item) in b.items.iter().enumerate() {
            while let Some(j) = joins.next_if(|j| j.at <= i) {
                self.join(j);
            }
            self.item(item, &b.data[item.start..item.start + item.len]);
        }
        for j in joins {
            self.join(j);
        }
        self.pending.extend(b.ends);
        for (stream, kept) in b.stream_ends {
            self.end_stream(stream, kept);
        }
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
        if !self.calls.contains_key(&item.owner) {
            if let Owner::Call(call) = &item.owner
                && self.recent_ends.0.contains(call)
            {
                if !item.sip {
                    self.gauges.packets_late.fetch_add(1, Relaxed);
                    self.gauges.names.add(Loss::Late, call);
                    return;
                }
                // SIP of a closed Call-ID: a new dialog that reuses it.
                self.recent_ends.0.remove(call);
            }
            let start_sec = item.ts_ns.div_euclid(1_000_000_000);
            if self
                .open(item.owner.clone(), start_sec, item.link_type)
                .is_none()
            {
                self.gauges.dropped_at_limits.fetch_add(1, Relaxed);
                self.gauges.names.add(Loss::Limits, &item.owner.name());
                return;
            }
        }
        let call = self.calls.get_mut(&item.owner).expect("inserted above");
        call.last_seen_ns = self.progress.elapsed_ns;
        if call.link_type != item.link_type {
            self.gauges.dropped_at_limits.fetch_add(1, Relaxed);
            self.gauges.names.add(Loss::Limits, &item.owner.name());
            return;
        }
        call.end_comes |= item.sip;
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
            self.gauges.names.add(Loss::WriteError, &item.owner.name());
        } else if self.archive.packets_dropped() > dropped_before {
            // Over the call's or the archive's buffer limit: the member will be truncated.
            self.gauges.names.add(Loss::Limits, &item.owner.name());
        }
    }

    /// Starts archiving `owner`'s packets (a member in the minute of `start_sec`); `None` at
    /// the archive's limit of calls in progress.
    fn open(&mut self, owner: Owner, start_sec: i64, link_type: u32) -> Option<&mut OpenCall> {
        let name = match &owner {
            Owner::Call(c) => c.as_bytes().to_vec(),
            Owner::Stream(s) => stream_stem(s).into_bytes(),
        };
        let handle = self
            .archive
            .start_call(&name, start_sec, LinkType(link_type))
            .ok()?;
        let end_comes = matches!(owner, Owner::Stream(_));
        Some(
            self.calls
                .entry(owner)
                .insert_entry(OpenCall {
                    handle,
                    link_type,
                    end_comes,
                    last_seen_ns: self.progress.elapsed_ns,
                    start_sec,
                })
                .into_mut(),
        )
    }

    /// A stream without a call became a call's: what was kept of it goes into the call's
    /// member (the call is started with the stream's minute if nothing of it came yet). A call
    /// already written gets none of it (late media), nor one at the archive's limits.
    fn join(&mut self, j: Join) {
        let Some(lone) = self.calls.remove(&Owner::Stream(j.stream)) else {
            return;
        };
        let owner = Owner::Call(j.call.clone());
        let into = match self.calls.get(&owner) {
            Some(c) => Some(c.handle),
            None if self.recent_ends.0.contains(&j.call) => {
                let n = self.archive.discard_call(lone.handle).unwrap_or(0);
                self.gauges.packets_late.fetch_add(n, Relaxed);
                self.gauges.names.add(Loss::Late, &j.call);
                return;
            }
            None => self
                .open(owner, lone.start_sec, lone.link_type)
                .map(|c| c.handle),
        };
        let dropped_before = self.archive.packets_dropped();
        let moved = match into {
            Some(into) => self.archive.move_rtp(lone.handle, into).is_ok(),
            None => false,
        };
        if !moved {
            let n = self.archive.discard_call(lone.handle).unwrap_or(0);
            self.gauges.dropped_at_limits.fetch_add(n, Relaxed);
            self.gauges.names.add(Loss::Limits, &j.call);
        } else if self.archive.packets_dropped() > dropped_before {
            self.gauges.names.add(Loss::Limits, &j.call);
        }
    }

    /// A stream without a call ended: its member is written and where it is sent back (a
    /// stream the monitor left out of its records is dropped unwritten).
    fn end_stream(&mut self, stream: StreamId, kept: bool) {
        let open = self.calls.remove(&Owner::Stream(stream));
        if !kept {
            if let Some(o) = open {
                let _ = self.archive.discard_call(o.handle);
            }
            return;
        }
        let result = match open {
            Some(o) => match self.archive.end_call(o.handle) {
                Ok(a) => {
                    self.gauges.streams_archived.fetch_add(1, Relaxed);
                    Ok(a)
                }
                Err(err) => {
                    self.error(&err.to_string());
                    let name = Owner::Stream(stream).name();
                    self.gauges.names.add(Loss::WriteError, &name);
                    Err(err.to_string())
                }
            },
            // Nothing of it was archived (limits, or SIP only).
            None => Ok(CallArchive::default()),
        };
        let _ = self.results.send(Archived {
            key: Key::Stream(stream),
            result,
        });
    }

    /// Closes the calls whose end every shard has passed.
    fn close_ready(&mut self) {
        let low = self.watermarks.iter().copied().min().unwrap_or(i64::MAX);
        let (ready, wait): (Vec<End>, Vec<End>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.now_ns <= low);
        self.pending = wait;
        for e in ready {
            let result = match self.calls.remove(&Owner::Call(e.call.clone())) {
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
                key: Key::Call(e.call, e.invite_ns),
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
    fn forget(&mut self, owner: &Owner) {
        if let Some(open) = self.calls.remove(owner) {
            let _ = self.archive.discard_call(open.handle);
            self.gauges.calls_orphaned.fetch_add(1, Relaxed);
            self.gauges.names.add(Loss::Orphaned, &owner.name());
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
        let stale: Vec<Owner> = self
            .calls
            .iter()
            .filter(|(_, c)| !c.end_comes && now - c.last_seen_ns > self.orphan_after_ns)
            .map(|(k, _)| k.clone())
            .collect();
        for owner in stale {
            self.forget(&owner);
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
