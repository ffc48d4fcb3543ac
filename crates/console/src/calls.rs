//! Where the console finds calls: a bounded pool of CDR database readers (SQLite or
//! PostgreSQL), each call's packets from the archive, and the running capture's calls in
//! progress.
//!
//! Database calls block, so they run on tokio's blocking threads, at most `readers_max` at once:
//! a burst of searches waits for a reader rather than opening connections without bound.
//! A call's view is computed from its pcap on demand (`callview`) and the last few pcaps are
//! kept, within `pcap_cache_bytes_max`, because a person who opens a call then plays it and
//! downloads it asks for the same packets three times.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cdr::{CdrError, CdrStore, PgStore, SqliteStore};

/// The CDR database the console reads.
#[derive(Debug, Clone)]
pub enum CdrSource {
    Sqlite(PathBuf),
    /// A libpq-style connection string.
    Postgres(String),
}

impl CdrSource {
    fn open(&self) -> Result<Box<dyn CdrStore + Send>, CallsError> {
        Ok(match self {
            // Opening creates a database; the console only reads one a capture made.
            CdrSource::Sqlite(path) if !path.exists() => {
                return Err(CallsError::NoDatabase(path.display().to_string()));
            }
            CdrSource::Sqlite(path) => Box::new(SqliteStore::open(path)?),
            CdrSource::Postgres(conninfo) => Box::new(PgStore::connect(conninfo)?),
        })
    }

    /// What to call the database in a message (never the password of a connection string).
    pub fn describe(&self) -> String {
        match self {
            CdrSource::Sqlite(path) => path.display().to_string(),
            CdrSource::Postgres(_) => "the PostgreSQL CDR database".to_owned(),
        }
    }

    /// How records of a kind (`calls`, `registrations`, `streams without a call`) come to be
    /// here: what a page says while there are none yet.
    pub fn how_to_fill(&self, what: &str) -> String {
        match self {
            CdrSource::Sqlite(path) => format!(
                "{what} appear here once a capture stores them in {db}: give tandem.toml's \
                 [capture] an interface or hep_listen and restart serve, or read capture files \
                 with `tandem capture --read FILE... --cdr-db {db}`.",
                db = path.display()
            ),
            CdrSource::Postgres(_) => format!(
                "{what} appear here once a capture, or a collector's sensors, store them in \
                 the PostgreSQL CDR database ([capture] cdr_postgres, or `tandem capture \
                 --read FILE... --cdr-postgres ...`)."
            ),
        }
    }
}

/// The running capture's calls in progress, as JSON (`monitor::LiveCallsSnapshot`). A function
/// rather than the monitor's type, so the console needs nothing of the capture but this.
pub type LiveFeed = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Fetches the pcap of a call that a remote sensor archived, over that sensor's session with
/// this `serve`'s collector; `None` when the call is not a remote sensor's (its pcap is read
/// from the archive here).
pub type RemotePcap = Arc<
    dyn Fn(
            cdr::CdrCall,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Option<Result<Vec<u8>, String>>> + Send>,
        > + Send
        + Sync,
>;

/// What the console needs to show calls.
#[derive(Clone)]
pub struct CallsConfig {
    pub cdr: CdrSource,
    /// Most database readers open, and queries running, at once.
    pub readers_max: usize,
    /// Most bytes of call pcaps kept for the next request.
    pub pcap_cache_bytes_max: usize,
    /// The capture's calls in progress, when `serve` runs one.
    pub live: Option<LiveFeed>,
    /// Remote sensors' pcaps, when `serve` runs a collector.
    pub remote_pcap: Option<RemotePcap>,
}

impl CallsConfig {
    pub const READERS_MAX: usize = 4;
    pub const PCAP_CACHE_BYTES_MAX: usize = 256 << 20;

    pub fn new(cdr: CdrSource) -> CallsConfig {
        CallsConfig {
            cdr,
            readers_max: Self::READERS_MAX,
            pcap_cache_bytes_max: Self::PCAP_CACHE_BYTES_MAX,
            live: None,
            remote_pcap: None,
        }
    }
}

/// Why a call request failed.
#[derive(Debug, thiserror::Error)]
pub enum CallsError {
    #[error(transparent)]
    Cdr(#[from] CdrError),
    #[error("{0}")]
    Pcap(String),
    #[error("the console is stopping")]
    Stopping,
    #[error(
        "no CDR database at {0} yet: calls appear once a capture stores them there ([capture] in tandem.toml, or `tandem capture --cdr-db {0}`)"
    )]
    NoDatabase(String),
}

/// The console's calls: readers, the pcap cache, the live feed.
pub struct Calls {
    config: CallsConfig,
    idle: Mutex<Vec<Box<dyn CdrStore + Send>>>,
    permits: tokio::sync::Semaphore,
    pcaps: Mutex<PcapCache>,
    /// Exports running (`web/export.rs`): each holds a reader while it runs.
    exports: Arc<tokio::sync::Semaphore>,
}

impl Calls {
    pub fn new(config: CallsConfig) -> Calls {
        let readers = config.readers_max.max(1);
        Calls {
            permits: tokio::sync::Semaphore::new(readers),
            idle: Mutex::new(Vec::with_capacity(readers)),
            pcaps: Mutex::new(PcapCache::new(config.pcap_cache_bytes_max)),
            exports: Arc::new(tokio::sync::Semaphore::new(
                crate::web::export::EXPORTS_AT_ONCE_MAX,
            )),
            config,
        }
    }

    /// A place for one more export, if one is free.
    pub fn export_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.exports.clone().try_acquire_owned().ok()
    }

    pub fn live(&self) -> Option<&LiveFeed> {
        self.config.live.as_ref()
    }

    /// The database the console reads.
    pub fn source(&self) -> &CdrSource {
        &self.config.cdr
    }

    /// Runs `read` on a reader, off the async threads. A reader whose query failed is dropped
    /// rather than put back: after a lost PostgreSQL connection the next query opens a new one.
    pub async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        read: impl FnOnce(&mut dyn CdrStore) -> Result<T, CdrError> + Send + 'static,
    ) -> Result<T, CallsError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| CallsError::Stopping)?;
        let this = self.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let reader = this.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut reader = match reader {
                Some(r) => r,
                None => this.config.cdr.open()?,
            };
            let out = read(reader.as_mut());
            if out.is_ok() {
                this.idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(reader);
            }
            out.map_err(CallsError::from)
        })
        .await;
        match joined {
            Ok(r) => r,
            Err(e) => Err(CallsError::Pcap(format!("the query's thread failed: {e}"))),
        }
    }

    /// The pcap of a call as `tandem cdr pcap` writes it, from the cache or the archive.
    pub async fn pcap(
        self: &Arc<Self>,
        uid: &str,
        call: cdr::CdrCall,
    ) -> Result<Arc<Vec<u8>>, CallsError> {
        if let Some(p) = self
            .pcaps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
        {
            return Ok(p);
        }
        if let Some(remote) = &self.config.remote_pcap
            && let Some(fetched) = remote(call.clone()).await
        {
            let out = Arc::new(fetched.map_err(CallsError::Pcap)?);
            self.pcaps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(uid.to_owned(), out.clone());
            return Ok(out);
        }
        let this = self.clone();
        let uid = uid.to_owned();
        tokio::task::spawn_blocking(move || {
            let out =
                sensor::call_pcap::call_pcap(&call).map_err(|e| CallsError::Pcap(e.to_string()))?;
            let out = Arc::new(out);
            this.pcaps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(uid, out.clone());
            Ok(out)
        })
        .await
        .map_err(|e| CallsError::Pcap(format!("reading the archive failed: {e}")))?
    }
}

/// The last pcaps read, newest last, within a byte budget.
struct PcapCache {
    bytes_max: usize,
    bytes: usize,
    entries: VecDeque<(String, Arc<Vec<u8>>)>,
}

impl PcapCache {
    fn new(bytes_max: usize) -> PcapCache {
        PcapCache {
            bytes_max,
            bytes: 0,
            entries: VecDeque::new(),
        }
    }

    fn get(&mut self, uid: &str) -> Option<Arc<Vec<u8>>> {
        let i = self.entries.iter().position(|(u, _)| u == uid)?;
        let e = self.entries.remove(i)?;
        let p = e.1.clone();
        self.entries.push_back(e);
        Some(p)
    }

    fn put(&mut self, uid: String, pcap: Arc<Vec<u8>>) {
        if pcap.len() > self.bytes_max {
            return;
        }
        self.bytes += pcap.len();
        self.entries.push_back((uid, pcap));
        while self.bytes > self.bytes_max {
            let Some((_, old)) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pcap_cache_keeps_the_newest_within_its_budget() {
        let mut c = PcapCache::new(10);
        c.put("a".into(), Arc::new(vec![0; 4]));
        c.put("b".into(), Arc::new(vec![0; 4]));
        assert!(c.get("a").is_some()); // a is now the newest
        c.put("c".into(), Arc::new(vec![0; 4]));
        assert!(c.get("b").is_none(), "the oldest went first");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        c.put("huge".into(), Arc::new(vec![0; 11]));
        assert!(c.get("huge").is_none(), "larger than the budget: not kept");
        assert!(c.bytes <= 10);
    }
}
