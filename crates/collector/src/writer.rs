//! The PostgreSQL side: each writer thread owns one connection and one queue, takes the batches
//! waiting (several sensors' together, up to `transaction_records_max` records), stores them in
//! one transaction (upsert by uid) and acknowledges each batch to its session after the commit.
//! A failed transaction (or no connection) answers its batches with `Nack`, which ends their
//! sessions, and the connection is opened again after a backoff.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use cdr::{CdrError, CdrStore, PgStore};
use tokio::sync::mpsc;

use crate::{Batch, Shared};

/// The connection's ups and downs, for the backoff, the log and `db_up`.
struct Health {
    min: Duration,
    max: Duration,
    backoff: Duration,
    retry_at: Instant,
    down: bool,
    failures: u64,
    last_error: String,
}

impl Health {
    fn failed(&mut self, shared: &Shared, e: &CdrError) {
        shared.counters.db_errors.fetch_add(1, Relaxed);
        self.failures += 1;
        self.last_error = e.to_string();
        if !self.down {
            self.down = true;
            shared.writers_down.fetch_add(1, Relaxed);
        }
        if self.failures.is_power_of_two() {
            tracing::warn!(error = %e, failures = self.failures, retry_in_ms = self.backoff.as_millis() as u64, "collector: PostgreSQL unavailable; sensors keep their CDRs in their journals until it is back");
        }
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(self.max);
    }

    fn up(&mut self, shared: &Shared) {
        if self.down {
            self.down = false;
            shared.writers_down.fetch_sub(1, Relaxed);
            tracing::info!(
                failures = self.failures,
                "collector: PostgreSQL reachable again"
            );
        }
        self.failures = 0;
        self.backoff = self.min;
    }
}

pub(crate) fn run(shared: Arc<Shared>, mut rx: mpsc::Receiver<Batch>) {
    let s = &shared.settings;
    let min = Duration::from_millis(s.reconnect_min_ms.max(1));
    let mut h = Health {
        min,
        max: Duration::from_millis(s.reconnect_max_ms).max(min),
        backoff: min,
        retry_at: Instant::now(),
        down: false,
        failures: 0,
        last_error: String::new(),
    };
    let mut store: Option<PgStore> = None;
    while let Some(first) = rx.blocking_recv() {
        let mut n = first.records.len();
        let mut batches = vec![first];
        while n < s.transaction_records_max {
            match rx.try_recv() {
                Ok(b) => {
                    n += b.records.len();
                    batches.push(b);
                }
                Err(_) => break,
            }
        }
        // A session that ended sends its records again on its next one.
        batches.retain(|b| !b.session.is_ended());
        if batches.is_empty() {
            continue;
        }
        if store.is_none() && Instant::now() >= h.retry_at {
            match PgStore::connect_with(&s.postgres, &s.pg_options()) {
                Ok(mut st) => {
                    h.up(&shared);
                    st.set_groups(s.groups.clone());
                    store = Some(st);
                }
                Err(e) => h.failed(&shared, &e),
            }
        }
        let Some(st) = store.as_mut() else {
            nack_all(&shared, &batches, &h.last_error);
            continue;
        };
        let mut records = Vec::with_capacity(n);
        let mut counts = Vec::with_capacity(batches.len());
        for b in &mut batches {
            counts.push(b.records.len() as u64);
            records.append(&mut b.records);
        }
        match st.insert_records(&records) {
            Ok(()) => {
                shared.counters.transactions.fetch_add(1, Relaxed);
                for (b, k) in batches.iter().zip(counts) {
                    b.session.ack(b.upto_seq);
                    shared.counters.records_stored.fetch_add(k, Relaxed);
                    shared
                        .table
                        .update(&b.session.sensor, usize::MAX, |t| t.records_stored += k);
                }
                // After the acknowledgements: the sensors never wait for the rules.
                if let Some(tap) = shared.stored_tap.get() {
                    tap.stored(&records);
                }
            }
            Err(e) => {
                store = None;
                h.failed(&shared, &e);
                nack_all(&shared, &batches, &h.last_error);
            }
        }
    }
    if h.down {
        shared.writers_down.fetch_sub(1, Relaxed);
    }
}

fn nack_all(shared: &Shared, batches: &[Batch], why: &str) {
    let reason = format!("the collector's database is unavailable: {why}");
    for b in batches {
        shared.counters.nacked_batches.fetch_add(1, Relaxed);
        b.session.nack(b.upto_seq, &reason);
    }
}
