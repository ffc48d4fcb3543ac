//! Metrics history: every sample of a series is rolled up, as it arrives, into the open bucket
//! of each level (raw samples, 1-minute, 1-hour and 1-day buckets by default), kept in SQLite.
//!
//! Why this shape: a dashboard that re-averages its whole retained history on every refresh does
//! work that grows with the history (FreePBX's did 90 days every minute). Here a sample costs
//! O(levels) row writes whatever the history's length, and reads nothing once the series' open
//! buckets are in memory. Each bucket keeps count, sum, min, max and last ([`Bucket`]), so
//! averages compose exactly across buckets and levels. A chart's query picks the finest level
//! that fits its range in about `max_points` buckets ([`History::query`]), so no chart reads
//! more than about that many rows per series, and the open bucket is always among them: "now"
//! is on every chart.
//!
//! Durability: one transaction per [`History::record`] call (one sampling tick), so a restart
//! loses at most the tick in flight. The open buckets live in a small table of their own,
//! rewritten at every tick and read back when a series is next sampled, so a restart in the
//! middle of a bucket keeps it whole; a bucket joins the closed ones once, when it closes. The
//! pages a tick dirties are then the open table's few and each series' newest closed rows, not
//! one page per series per level: the cost of a tick does not grow with the history.
//! Retention drops whole ranges of old buckets per level ([`History::retain`]).
//!
//! Format: the file says what it is and which format it holds (application_id `TDHS`, `PRAGMA
//! user_version` [`FORMAT_VERSION`]; crate `fileformat`); an older file is upgraded at open in
//! one transaction ([`MIGRATIONS`]), a newer one refused ([`HistoryError::Format`]) untouched.
//!
//! Bounded: a history records at most [`HistoryConfig::max_series`] series (sample and
//! latency series together). A new series past that is refused and counted
//! ([`History::stats`]), never stored: a label that multiplies (a caller-chosen path, say)
//! cannot grow the file, the memory or the work of each tick without bound.
//!
//! This crate does no sampling and no network IO: [`Recorder`] ticks on a thread of its own and
//! records what the caller's source returns (in `tandem serve`, the figures of `/metrics` and of
//! `/proc`).

mod bucket;
mod recorder;
mod sketch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use bucket::Bucket;
pub use recorder::{Recorder, Tick};
use rusqlite::{Connection, OptionalExtension, params};
pub use sketch::LatencySketch;

/// At most this many levels.
pub const LEVELS_MAX: usize = 8;
/// Longest series name accepted (`tandem_agi_sessions_total{route="dialparties"}` is 46).
pub const NAME_BYTES_MAX: usize = 256;
/// Most points a query may ask for.
pub const POINTS_MAX: usize = 10_000;
/// SQLite's page cache for the history, KiB (SQLite's default is 2,000).
pub const CACHE_KIB: u32 = 32 * 1024;
/// Default of [`HistoryConfig::max_series`]. A `tandem serve` with every service on records
/// about 400 series (more per core, interface, disk, route and script): this leaves room for
/// ten times that, and bounds a tick to about 20,000 row writes.
pub const SERIES_MAX: usize = 5_000;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history database {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("history database {path}: {source}")]
    Files {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Another kind of file, or a newer Tandem's (crate `fileformat`).
    #[error(transparent)]
    Format(#[from] fileformat::FormatError),
    #[error("history levels: {0}")]
    Config(String),
    #[error(
        "history database {path} was written with levels {stored:?} (bucket seconds); the configuration now says {configured:?}: move the file away or restore the levels"
    )]
    LevelsChanged {
        path: String,
        stored: Vec<u32>,
        configured: Vec<u32>,
    },
}

/// One level: buckets of `width_s` seconds, kept `retention_s` (for ever when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelConfig {
    pub name: String,
    pub width_s: u32,
    pub retention_s: Option<u64>,
}

/// The levels, finest first. Defaults: raw samples every 10 s kept 48 h, 1-minute buckets kept
/// 30 days, 1-hour buckets kept 2 years, 1-day buckets kept for ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryConfig {
    pub levels: Vec<LevelConfig>,
    /// Most series one history records ([`SERIES_MAX`] by default); a new series past it is
    /// refused and counted in [`HistoryStats::series_refused`].
    pub max_series: usize,
}

const HOUR_S: u64 = 3_600;
const DAY_S: u64 = 86_400;

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig::with_interval(10)
    }
}

impl HistoryConfig {
    /// The default levels over raw samples every `interval_s`.
    pub fn with_interval(interval_s: u32) -> HistoryConfig {
        let level = |name: &str, width_s: u32, retention_s: Option<u64>| LevelConfig {
            name: name.into(),
            width_s,
            retention_s,
        };
        HistoryConfig {
            levels: vec![
                level("raw", interval_s, Some(48 * HOUR_S)),
                level("1m", 60, Some(30 * DAY_S)),
                level("1h", 3_600, Some(730 * DAY_S)),
                level("1d", 86_400, None),
            ],
            max_series: SERIES_MAX,
        }
    }

    /// The default levels over raw samples every `interval_s` (1 to 60, dividing a minute),
    /// keeping raw samples `raw_hours`, 1-minute buckets `minute_days` and 1-hour buckets
    /// `hour_days`; 1-day buckets for ever. At 60 s the raw level is the minute level, kept once.
    pub fn with_retention(
        interval_s: u32,
        raw_hours: u64,
        minute_days: u64,
        hour_days: u64,
    ) -> Result<HistoryConfig, HistoryError> {
        if !(1..=60).contains(&interval_s) || 60 % interval_s != 0 {
            return Err(HistoryError::Config(format!(
                "interval_s = {interval_s}: it must be 1 to 60 seconds and divide a minute"
            )));
        }
        let mut cfg = HistoryConfig::with_interval(interval_s);
        if interval_s == 60 {
            cfg.levels.remove(0);
        }
        let hours = |h: u64| Some(h.saturating_mul(HOUR_S));
        let days = |d: u64| Some(d.saturating_mul(DAY_S));
        for l in &mut cfg.levels {
            l.retention_s = match l.name.as_str() {
                "raw" => hours(raw_hours),
                "1m" => days(minute_days),
                "1h" => days(hour_days),
                _ => None,
            };
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Widths must grow and each divide the next, so that every bucket lies inside one bucket of
    /// each coarser level.
    pub fn validate(&self) -> Result<(), HistoryError> {
        let bad = |m: String| Err(HistoryError::Config(m));
        if self.max_series == 0 {
            return bad("max_series is 0: nothing could be recorded".into());
        }
        if self.levels.is_empty() || self.levels.len() > LEVELS_MAX {
            return bad(format!(
                "1 to {LEVELS_MAX} levels, not {}",
                self.levels.len()
            ));
        }
        for (i, l) in self.levels.iter().enumerate() {
            if l.width_s == 0 {
                return bad(format!("level {} has a width of 0 s", l.name));
            }
            if let Some(prev) = i.checked_sub(1).map(|p| &self.levels[p])
                && (l.width_s <= prev.width_s || l.width_s % prev.width_s != 0)
            {
                return bad(format!(
                    "level {} ({} s) must be a larger multiple of level {} ({} s)",
                    l.name, l.width_s, prev.name, prev.width_s
                ));
            }
        }
        Ok(())
    }

    fn widths(&self) -> Vec<u32> {
        self.levels.iter().map(|l| l.width_s).collect()
    }
}

/// What a history recorded and refused, shared with whoever reports it (`tandem serve`'s
/// `/metrics`), updated at each tick.
#[derive(Debug, Default)]
pub struct HistoryStats {
    /// Series this history records (sample and latency series).
    pub series: AtomicU64,
    /// Samples and latencies of new series refused because `max_series` was reached.
    pub series_refused: AtomicU64,
    /// Samples ignored otherwise: not finite, a name empty or too long, older than the open
    /// bucket.
    pub rejected: AtomicU64,
}

/// What a call cost the database: the figure that must stay flat as history grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCounts {
    pub read: u64,
    pub written: u64,
}

/// One point of a chart: a bucket at the level the query chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub t_s: i64,
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub avg: f64,
    pub last: f64,
    /// When `last` was sampled (a counter's rate between two points divides by this time).
    pub last_s: i64,
}

/// A series over a range, at one level.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesData {
    pub level: String,
    pub width_s: u32,
    pub points: Vec<Point>,
}

/// One bucket's latency quantiles.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantilePoint {
    pub t_s: i64,
    /// Latencies in the bucket.
    pub count: u64,
    /// The quantiles asked for, seconds, in the order asked.
    pub values: Vec<f64>,
}

/// A latency series over a range, at one level.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantileSeries {
    pub level: String,
    pub width_s: u32,
    pub points: Vec<QuantilePoint>,
    /// Latencies in the whole range, and its quantiles (`None`: none observed).
    pub count: u64,
    pub whole: Vec<Option<f64>>,
}

/// The history database.
pub struct History {
    path: String,
    conn: Connection,
    cfg: HistoryConfig,
    ids: HashMap<String, i64>,
    /// The open bucket of each level, per series id, once the series was sampled here.
    open: HashMap<i64, Vec<Option<Bucket>>>,
    /// The open latency sketch of each level, per latency series id, once observed here.
    open_sketches: HashMap<i64, Vec<Option<(i64, LatencySketch)>>>,
    /// The latest sample time recorded.
    latest_s: Option<i64>,
    rows: RowCounts,
    /// Samples ignored: not finite, or older than their series' open bucket.
    pub rejected: u64,
    /// Samples and latencies of new series refused at `max_series`.
    pub series_refused: u64,
    stats: Arc<HistoryStats>,
}

/// The columns of a bucket row, closed or open.
const BUCKET_COLUMNS: &str = "
    level   INTEGER NOT NULL,
    series  INTEGER NOT NULL,
    start_s INTEGER NOT NULL,
    count   INTEGER NOT NULL,
    sum     REAL    NOT NULL,
    min     REAL    NOT NULL,
    max     REAL    NOT NULL,
    last    REAL    NOT NULL,
    last_s  INTEGER NOT NULL,";

/// Closed buckets by (level, series, start); the one open bucket per (level, series) apart.
fn schema() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS bucket ({BUCKET_COLUMNS}
    PRIMARY KEY (level, series, start_s)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS bucket_age ON bucket(level, start_s);
CREATE TABLE IF NOT EXISTS open_bucket ({BUCKET_COLUMNS}
    PRIMARY KEY (level, series)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sketch (level INTEGER NOT NULL, series INTEGER NOT NULL,
    start_s INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (level, series, start_s)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS open_sketch (level INTEGER NOT NULL, series INTEGER NOT NULL,
    start_s INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (level, series)) WITHOUT ROWID;"
    )
}

/// The history file's format versions (crate `fileformat`: application_id `TDHS`, `PRAGMA
/// user_version`), applied at open in one transaction. A change of the tables is a new entry,
/// never an edit of an applied one.
pub const MIGRATIONS: &[fileformat::Migration] = &[fileformat::Migration {
    version: 1,
    name: "series, buckets and sketches",
    apply: |c| c.execute_batch(&schema()),
}];

/// The format version this build writes and the highest it reads.
pub const FORMAT_VERSION: u32 = fileformat::latest(MIGRATIONS);

impl History {
    /// Opens (creating if needed) the history at `path`. Its files (the database, its WAL and
    /// shared-memory files) are its owner's alone, 0600 from their first byte; an older
    /// release's 0644 ones are narrowed here.
    pub fn open(path: &Path, cfg: HistoryConfig) -> Result<History, HistoryError> {
        cfg.validate()?;
        let name = path.display().to_string();
        filemode::prepare_sqlite(path, &filemode::Access::Private).map_err(|source| {
            HistoryError::Files {
                path: name.clone(),
                source,
            }
        })?;
        let wrap = |source| HistoryError::Sqlite {
            path: name.clone(),
            source,
        };
        let conn = Connection::open(path).map_err(wrap)?;
        // The console reads the file while the recorder writes it.
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(wrap)?;
        // A newer Tandem's file is refused before anything is written to it.
        let kind = &fileformat::METRICS_HISTORY;
        fileformat::check(&conn, path, kind, FORMAT_VERSION)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(wrap)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(wrap)?;
        // Room for the pages every tick touches (each series' newest closed rows and the open
        // table), so that they are not read back from the file at every tick.
        conn.pragma_update(None, "cache_size", -(CACHE_KIB as i64))
            .map_err(wrap)?;
        fileformat::upgrade(&conn, path, kind, MIGRATIONS)?;
        let widths = cfg.widths();
        let text = widths
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let stored: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'levels'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(wrap)?;
        match stored {
            Some(s) if s != text => {
                return Err(HistoryError::LevelsChanged {
                    path: name,
                    stored: s.split(',').filter_map(|w| w.parse().ok()).collect(),
                    configured: widths,
                });
            }
            Some(_) => {}
            None => {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('levels', ?1)",
                    [&text],
                )
                .map_err(wrap)?;
            }
        }
        let latest_s: Option<i64> = conn
            .query_row(
                "SELECT MAX(last_s) FROM open_bucket WHERE level = 0",
                [],
                |r| r.get(0),
            )
            .map_err(wrap)?;
        Ok(History {
            path: name,
            conn,
            cfg,
            ids: HashMap::new(),
            open: HashMap::new(),
            open_sketches: HashMap::new(),
            latest_s,
            rows: RowCounts::default(),
            rejected: 0,
            series_refused: 0,
            stats: Arc::default(),
        })
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.path)
    }

    pub fn config(&self) -> &HistoryConfig {
        &self.cfg
    }

    /// The figures [`HistoryStats`] reports, shared: read them from any thread.
    pub fn stats(&self) -> Arc<HistoryStats> {
        self.stats.clone()
    }

    /// Series recorded since the history was opened (sample and latency series).
    pub fn series_recorded(&self) -> usize {
        self.open.len() + self.open_sketches.len()
    }

    /// Rows read and written since the history was opened.
    pub fn rows(&self) -> RowCounts {
        self.rows
    }

    fn err(&self, source: rusqlite::Error) -> HistoryError {
        HistoryError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Records one sampling tick: every `(series, value)` taken at `t_s` (seconds since the
    /// epoch), in one transaction. Returns the rows it read and wrote.
    pub fn record(&mut self, t_s: i64, samples: &[(&str, f64)]) -> Result<RowCounts, HistoryError> {
        self.record_tick(t_s, samples, &[])
    }

    /// [`History::record`] with the latencies observed since the last tick, per latency series:
    /// `(seconds, count)` pairs merged into each level's open [`LatencySketch`].
    pub fn record_tick(
        &mut self,
        t_s: i64,
        samples: &[(&str, f64)],
        latencies: &[(&str, &[(f64, u64)])],
    ) -> Result<RowCounts, HistoryError> {
        let before = self.rows;
        let r = self.record_in_tx(t_s, samples, latencies);
        let stats = &self.stats;
        stats
            .series
            .store(self.series_recorded() as u64, Ordering::Relaxed);
        stats
            .series_refused
            .store(self.series_refused, Ordering::Relaxed);
        stats.rejected.store(self.rejected, Ordering::Relaxed);
        r.map_err(|e| self.err(e))?;
        self.latest_s = Some(self.latest_s.map_or(t_s, |l| l.max(t_s)));
        Ok(RowCounts {
            read: self.rows.read - before.read,
            written: self.rows.written - before.written,
        })
    }

    fn record_in_tx(
        &mut self,
        t_s: i64,
        samples: &[(&str, f64)],
        latencies: &[(&str, &[(f64, u64)])],
    ) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        // Latencies: each series' observations merge into its open sketch at every level; a
        // sketch whose bucket is over joins the closed ones, once. O(levels) rows per series.
        if !latencies.is_empty() {
            let mut put_open = tx.prepare_cached(
                "INSERT OR REPLACE INTO open_sketch (level, series, start_s, data) VALUES (?1, ?2, ?3, ?4)",
            )?;
            let mut put_closed = tx.prepare_cached(
                "INSERT OR REPLACE INTO sketch (level, series, start_s, data) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for &(name, observed) in latencies {
                if name.is_empty() || name.len() > NAME_BYTES_MAX {
                    self.rejected += 1;
                    continue;
                }
                // A new series past max_series is refused before it gets an id, leaving
                // nothing in the file.
                let known = self.ids.get(name);
                if !known.is_some_and(|id| self.open_sketches.contains_key(id))
                    && self.open.len() + self.open_sketches.len() >= self.cfg.max_series
                {
                    self.series_refused += 1;
                    continue;
                }
                let id = series_id(&tx, &mut self.ids, name, &mut self.rows)?;
                if !self.open_sketches.contains_key(&id) {
                    let loaded =
                        load_open_sketches(&tx, id, self.cfg.levels.len(), &mut self.rows)?;
                    self.open_sketches.insert(id, loaded);
                }
                let open = self.open_sketches.get_mut(&id).expect("loaded above");
                let mut tick = LatencySketch::new();
                for &(seconds, count) in observed {
                    tick.add(seconds, count);
                }
                for (level, cfg) in self.cfg.levels.iter().enumerate() {
                    let start = bucket_start(t_s, cfg.width_s);
                    let slot = &mut open[level];
                    match slot {
                        Some((s, sketch)) if *s == start => sketch.merge(&tick),
                        // A tick older than the open sketch (the clock went back) is left out.
                        Some((s, _)) if *s > start => continue,
                        _ => {
                            if let Some((s, closed)) = slot.take() {
                                put_closed.execute(params![
                                    level as i64,
                                    id,
                                    s,
                                    closed.to_bytes()
                                ])?;
                                self.rows.written += 1;
                            }
                            *slot = Some((start, tick.clone()));
                        }
                    }
                    let (s, sketch) = slot.as_ref().expect("set above");
                    put_open.execute(params![level as i64, id, s, sketch.to_bytes()])?;
                    self.rows.written += 1;
                }
            }
        }

        {
            let mut put_open = tx.prepare_cached(PUT_OPEN)?;
            let mut put_closed = tx.prepare_cached(PUT_BUCKET)?;
            for &(name, v) in samples {
                if !v.is_finite() || name.is_empty() || name.len() > NAME_BYTES_MAX {
                    self.rejected += 1;
                    continue;
                }
                let recorded = self.open.len() + self.open_sketches.len();
                let known = self
                    .ids
                    .get(name)
                    .is_some_and(|id| self.open.contains_key(id));
                if !known && recorded >= self.cfg.max_series {
                    self.series_refused += 1;
                    continue;
                }
                let id = series_id(&tx, &mut self.ids, name, &mut self.rows)?;
                if !self.open.contains_key(&id) {
                    let loaded = load_open(&tx, id, self.cfg.levels.len(), &mut self.rows)?;
                    self.open.insert(id, loaded);
                }
                let open = self.open.get_mut(&id).expect("loaded above");
                // A sample older than the open bucket of the finest level (the clock went back)
                // would reopen closed buckets: it is refused whole, at every level.
                if open[0]
                    .is_some_and(|b| bucket_start(t_s, self.cfg.levels[0].width_s) < b.start_s)
                {
                    self.rejected += 1;
                    continue;
                }
                for (level, cfg) in self.cfg.levels.iter().enumerate() {
                    let start = bucket_start(t_s, cfg.width_s);
                    let b = match &mut open[level] {
                        Some(b) if b.start_s == start => {
                            b.add(t_s, v);
                            *b
                        }
                        slot => {
                            // The open bucket is over: it joins the closed ones, once.
                            if let Some(closed) = slot {
                                put_bucket(&mut put_closed, level, id, closed)?;
                                self.rows.written += 1;
                            }
                            *slot.insert(Bucket::of(start, t_s, v))
                        }
                    };
                    put_bucket(&mut put_open, level, id, &b)?;
                    self.rows.written += 1;
                }
            }
        }
        tx.commit()
    }

    /// The latency series `name` over `[from_s, to_s)` at the level [`History::level_for`]
    /// picks: each bucket's quantiles `qs`, and the quantiles of the whole range (from the
    /// merge of its buckets' sketches).
    pub fn quantiles(
        &mut self,
        name: &str,
        from_s: i64,
        to_s: i64,
        max_points: usize,
        qs: &[f64],
    ) -> Result<QuantileSeries, HistoryError> {
        let level = self.level_for(from_s, to_s, max_points);
        let cfg = self.cfg.levels[level].clone();
        let mut whole = LatencySketch::new();
        let mut points = Vec::new();
        for (t_s, sketch) in self.sketches(name, level, from_s, to_s)? {
            whole.merge(&sketch);
            points.push(QuantilePoint {
                t_s,
                count: sketch.count(),
                values: qs
                    .iter()
                    .map(|q| sketch.quantile(*q).unwrap_or(0.0))
                    .collect(),
            });
        }
        Ok(QuantileSeries {
            level: cfg.name,
            width_s: cfg.width_s,
            points,
            count: whole.count(),
            whole: qs.iter().map(|q| whole.quantile(*q)).collect(),
        })
    }

    /// The latency sketches of series `name` at `level` whose bucket starts in the bucket of
    /// `from_s` or after it, and before `to_s`, in time order (the open one last).
    pub fn sketches(
        &mut self,
        name: &str,
        level: usize,
        from_s: i64,
        to_s: i64,
    ) -> Result<Vec<(i64, LatencySketch)>, HistoryError> {
        let Some(cfg) = self.cfg.levels.get(level) else {
            return Ok(Vec::new());
        };
        let from = bucket_start(from_s, cfg.width_s);
        let rows = (|| -> rusqlite::Result<Vec<(i64, Vec<u8>)>> {
            let args = params![level as i64, name, from, to_s];
            let mut out: Vec<(i64, Vec<u8>)> = self
                .conn
                .prepare_cached(
                    "SELECT k.start_s, k.data FROM sketch k JOIN series s ON s.id = k.series \
                     WHERE k.level = ?1 AND s.name = ?2 AND k.start_s >= ?3 AND k.start_s < ?4 \
                     ORDER BY k.start_s",
                )?
                .query_map(args, |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let open = self
                .conn
                .prepare_cached(
                    "SELECT k.start_s, k.data FROM open_sketch k JOIN series s ON s.id = k.series \
                     WHERE k.level = ?1 AND s.name = ?2 AND k.start_s >= ?3 AND k.start_s < ?4",
                )?
                .query_row(args, |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            out.extend(open);
            Ok(out)
        })()
        .map_err(|e| self.err(e))?;
        self.rows.read += rows.len() as u64;
        // A row that does not decode (written by something else) is left out, not fatal.
        Ok(rows
            .into_iter()
            .filter_map(|(t, data)| LatencySketch::from_bytes(&data).map(|k| (t, k)))
            .collect())
    }

    /// The level a chart of `[from_s, to_s)` reads: the finest whose buckets cover the range in
    /// about `max_points` (at most one and a half times as many: a day of 1-minute buckets for
    /// a chart of 1,000 points, not a day of 24 hours) and whose retention still holds `from_s`;
    /// else the coarsest.
    pub fn level_for(&self, from_s: i64, to_s: i64, max_points: usize) -> usize {
        let now = self.latest_s.unwrap_or(to_s).max(to_s);
        let span = (to_s - from_s).max(0) as u64;
        let max_points = max_points.clamp(1, POINTS_MAX) as u64;
        let max_points = max_points + max_points / 2;
        self.cfg
            .levels
            .iter()
            .position(|l| {
                let fits = span.div_ceil(u64::from(l.width_s)) <= max_points;
                let kept = l
                    .retention_s
                    .is_none_or(|r| now.saturating_sub(from_s) as u64 <= r);
                fits && kept
            })
            .unwrap_or(self.cfg.levels.len() - 1)
    }

    /// The series `name` over `[from_s, to_s)`, at the level [`History::level_for`] picks: its
    /// buckets in time order, the open one included. An unknown series has no points.
    pub fn query(
        &mut self,
        name: &str,
        from_s: i64,
        to_s: i64,
        max_points: usize,
    ) -> Result<SeriesData, HistoryError> {
        let level = self.level_for(from_s, to_s, max_points);
        let points = self.points(name, level, from_s, to_s)?;
        let cfg = &self.cfg.levels[level];
        Ok(SeriesData {
            level: cfg.name.clone(),
            width_s: cfg.width_s,
            points,
        })
    }

    /// The buckets of series `name` at `level` whose start lies in the bucket of `from_s` or
    /// after it, and before `to_s`, in time order.
    pub fn points(
        &mut self,
        name: &str,
        level: usize,
        from_s: i64,
        to_s: i64,
    ) -> Result<Vec<Point>, HistoryError> {
        let Some(cfg) = self.cfg.levels.get(level) else {
            return Ok(Vec::new());
        };
        let from = bucket_start(from_s, cfg.width_s);
        let id: Option<i64> = match self.ids.get(name) {
            Some(&id) => Some(id),
            None => self
                .conn
                .query_row("SELECT id FROM series WHERE name = ?1", [name], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(|e| self.err(e))?,
        };
        if let Some(id) = id {
            // A reader (the console) learns the ids it looks up, as the writer does.
            self.ids.entry(name.to_owned()).or_insert(id);
        }
        let Some(id) = id else {
            return Ok(Vec::new());
        };
        let row = |r: &rusqlite::Row<'_>| {
            let count = r.get::<_, i64>(1)?.max(0) as u64;
            let sum: f64 = r.get(2)?;
            Ok(Point {
                t_s: r.get(0)?,
                count,
                min: r.get(3)?,
                max: r.get(4)?,
                avg: if count == 0 { 0.0 } else { sum / count as f64 },
                last: r.get(5)?,
                last_s: r.get(6)?,
            })
        };
        // The closed buckets in primary-key order (no sort), then the open one, which is newer
        // than every closed bucket of its series and level.
        let rows = (|| -> rusqlite::Result<Vec<Point>> {
            let args = params![level as i64, id, from, to_s];
            let mut points: Vec<Point> = self
                .conn
                .prepare_cached(
                    "SELECT start_s, count, sum, min, max, last, last_s FROM bucket \
                     WHERE level = ?1 AND series = ?2 AND start_s >= ?3 AND start_s < ?4 \
                     ORDER BY start_s",
                )?
                .query_map(args, row)?
                .collect::<rusqlite::Result<_>>()?;
            let open = self
                .conn
                .prepare_cached(
                    "SELECT start_s, count, sum, min, max, last, last_s FROM open_bucket \
                     WHERE level = ?1 AND series = ?2 AND start_s >= ?3 AND start_s < ?4",
                )?
                .query_row(args, row)
                .optional()?;
            points.extend(open);
            Ok(points)
        })();
        let points = rows.map_err(|e| self.err(e))?;
        self.rows.read += points.len() as u64;
        Ok(points)
    }

    /// Drops, per level, the buckets older than its retention before `now_s`. Returns the rows
    /// dropped.
    pub fn retain(&mut self, now_s: i64) -> Result<u64, HistoryError> {
        let mut dropped = 0;
        for (level, cfg) in self.cfg.levels.iter().enumerate() {
            let Some(keep) = cfg.retention_s else {
                continue;
            };
            let before = now_s.saturating_sub(i64::try_from(keep).unwrap_or(i64::MAX));
            // A series no longer sampled leaves its last bucket open: it ages out the same way.
            for table in ["bucket", "open_bucket", "sketch", "open_sketch"] {
                dropped += self
                    .conn
                    .execute(
                        &format!("DELETE FROM {table} WHERE level = ?1 AND start_s < ?2"),
                        params![level as i64, before],
                    )
                    .map_err(|e| HistoryError::Sqlite {
                        path: self.path.clone(),
                        source: e,
                    })? as u64;
            }
            // Forget the open buckets just dropped, so that they are not written back closed.
            for open in self.open.values_mut() {
                if open[level].is_some_and(|b| b.start_s < before) {
                    open[level] = None;
                }
            }
            for open in self.open_sketches.values_mut() {
                if open[level].as_ref().is_some_and(|(s, _)| *s < before) {
                    open[level] = None;
                }
            }
        }
        Ok(dropped)
    }

    /// The names of every series recorded, sorted.
    pub fn series_names(&self) -> Result<Vec<String>, HistoryError> {
        let mut st = self
            .conn
            .prepare("SELECT name FROM series ORDER BY name")
            .map_err(|e| self.err(e))?;
        let names = st
            .query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>());
        names.map_err(|e| self.err(e))
    }

    /// Writes closed buckets directly (building a long history for a benchmark or an import):
    /// `(level, series, bucket)` rows in one transaction. The open buckets in memory are left
    /// alone.
    pub fn import(&mut self, rows: &[(usize, &str, Bucket)]) -> Result<(), HistoryError> {
        let r = (|| -> rusqlite::Result<()> {
            let tx = self.conn.transaction()?;
            {
                let mut ins = tx.prepare_cached(PUT_BUCKET)?;
                let mut ignored = RowCounts::default();
                for (level, name, b) in rows {
                    let id = series_id(&tx, &mut self.ids, name, &mut ignored)?;
                    put_bucket(&mut ins, *level, id, b)?;
                }
            }
            tx.commit()
        })();
        r.map_err(|e| self.err(e))
    }
}

/// A closed bucket joins the history.
const PUT_BUCKET: &str = "INSERT OR REPLACE INTO bucket \
     (level, series, start_s, count, sum, min, max, last, last_s) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// The open bucket of a level and series, rewritten at every sample. Kept apart from the closed
/// ones: this small table's pages stay few and hot whatever the history's length, where rewriting
/// each series' last row in the big table would dirty one page per series per level.
const PUT_OPEN: &str = "INSERT OR REPLACE INTO open_bucket \
     (level, series, start_s, count, sum, min, max, last, last_s) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

/// Writes one bucket row with a statement of [`PUT_BUCKET`].
fn put_bucket(
    st: &mut rusqlite::CachedStatement<'_>,
    level: usize,
    series: i64,
    b: &Bucket,
) -> rusqlite::Result<usize> {
    st.execute(params![
        level as i64,
        series,
        b.start_s,
        b.count as i64,
        b.sum,
        b.min,
        b.max,
        b.last,
        b.last_s
    ])
}

/// The start of the bucket of `width_s` seconds that holds `t_s`.
pub fn bucket_start(t_s: i64, width_s: u32) -> i64 {
    t_s - t_s.rem_euclid(i64::from(width_s))
}

/// The id of series `name`, from `ids` or else from the file (created if new, and kept in `ids`).
fn series_id(
    tx: &Connection,
    ids: &mut HashMap<String, i64>,
    name: &str,
    rows: &mut RowCounts,
) -> rusqlite::Result<i64> {
    if let Some(&id) = ids.get(name) {
        return Ok(id);
    }
    tx.execute("INSERT OR IGNORE INTO series (name) VALUES (?1)", [name])?;
    rows.read += 1;
    let id = tx.query_row("SELECT id FROM series WHERE name = ?1", [name], |r| {
        r.get(0)
    })?;
    ids.insert(name.to_owned(), id);
    Ok(id)
}

/// The open sketch of each level of latency series `id`, if it was observed before.
fn load_open_sketches(
    tx: &Connection,
    id: i64,
    levels: usize,
    rows: &mut RowCounts,
) -> rusqlite::Result<Vec<Option<(i64, LatencySketch)>>> {
    let mut st = tx
        .prepare_cached("SELECT start_s, data FROM open_sketch WHERE level = ?1 AND series = ?2")?;
    (0..levels)
        .map(|level| {
            let row: Option<(i64, Vec<u8>)> = st
                .query_row(params![level as i64, id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            rows.read += 1;
            Ok(row.and_then(|(s, data)| LatencySketch::from_bytes(&data).map(|k| (s, k))))
        })
        .collect()
}

/// The latest bucket of each level of series `id`: its open buckets, if it was sampled before.
fn load_open(
    tx: &Connection,
    id: i64,
    levels: usize,
    rows: &mut RowCounts,
) -> rusqlite::Result<Vec<Option<Bucket>>> {
    let mut st = tx.prepare_cached(
        "SELECT start_s, count, sum, min, max, last, last_s FROM open_bucket \
         WHERE level = ?1 AND series = ?2",
    )?;
    (0..levels)
        .map(|level| {
            let b = st
                .query_row(params![level as i64, id], |r| {
                    Ok(Bucket {
                        start_s: r.get(0)?,
                        count: r.get::<_, i64>(1)?.max(0) as u64,
                        sum: r.get(2)?,
                        min: r.get(3)?,
                        max: r.get(4)?,
                        last: r.get(5)?,
                        last_s: r.get(6)?,
                    })
                })
                .optional()?;
            rows.read += 1;
            Ok(b)
        })
        .collect()
}
