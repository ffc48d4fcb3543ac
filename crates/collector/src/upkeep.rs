//! The database's daily upkeep on a timer: an idle collector must still drop the days past
//! its retention and create the days ahead. The writers do it when they connect and at their
//! first transaction of each UTC day, but a writer connects only when a batch comes; a
//! collector whose sensors are quiet (a weekend, an outage at the sites) would otherwise keep
//! old days, and a disk fills.
//!
//! One thread, `collector-upkeep`: at start and then every `maintenance_interval_s`, it
//! connects (which applies the migrations and the maintenance, see
//! [`cdr::PgStore::connect_with`]), repeats the maintenance while retention days are left over
//! (at most [`cdr::RETENTION_DAYS_PER_CALL_MAX`] go at a time) and disconnects. It holds no
//! connection between rounds. A failure is logged and tried again at the next round.
//!
//! Never: blocks a writer (its own connection), or deletes rows (days go whole).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use cdr::{Day, PgStore};

use crate::Shared;

/// Rounds of [`PgStore::maintain`] in one upkeep at most: each drops at most
/// [`cdr::RETENTION_DAYS_PER_CALL_MAX`] days, so a collector that was off for a long time
/// catches up over a few upkeeps rather than holding the tables' locks at length.
const ROUNDS_MAX: usize = 16;

/// Runs until `stop` is dropped or sent to.
pub(crate) fn run(shared: Arc<Shared>, stop: Receiver<()>) {
    let s = &shared.settings;
    let interval = Duration::from_secs(s.maintenance_interval_s.max(1));
    loop {
        upkeep(&shared);
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One upkeep: connect (maintenance included), finish the retention, disconnect.
fn upkeep(shared: &Shared) {
    let s = &shared.settings;
    let mut store = match PgStore::connect_with(&s.postgres, &s.pg_options()) {
        Ok(st) => st,
        Err(e) => {
            // The writers report the database's state; this only says the upkeep waits.
            tracing::warn!(error = %e, "collector: the CDR tables' upkeep could not connect; tried again in {} s", s.maintenance_interval_s);
            return;
        }
    };
    for _ in 0..ROUNDS_MAX {
        match store.maintain(Day::today()) {
            Ok(m) if m.dropped.more => continue,
            Ok(_) => {
                shared.counters.upkeeps.fetch_add(1, Relaxed);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "collector: the CDR tables' upkeep failed; tried again in {} s", s.maintenance_interval_s);
                return;
            }
        }
    }
}
