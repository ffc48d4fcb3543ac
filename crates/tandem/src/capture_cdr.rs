//! CDR storage for `tandem capture`: closed calls and streams become [`CdrRecord`]s handed to a
//! [`CdrWriter`], which stores them in SQLite or PostgreSQL on its own thread, so that capture
//! never waits for the database; what the database cannot take goes to the journal (see
//! `cdr::writer`).

use std::path::{Path, PathBuf};

use ::cdr::writer::{DEFAULT_JOURNAL_BYTES_MAX, DEFAULT_QUEUE_RECORDS_MAX};
use ::cdr::{
    CdrRecord, CdrStore, CdrWriter, CdrWriterConfig, CdrWriterStats, CdrWriterWatch, PgStore,
    SqliteStore,
};
use anyhow::Context;
use monitor::Analysis;

use crate::capture::{cdr_call, cdr_stream};

#[derive(clap::Args, Debug)]
pub struct CdrWriterArgs {
    /// Journal of CDRs the database cannot take yet (down, slow, read-only): replayed in order
    /// when it is back, or by the next run. Default: beside --cdr-db, `cdr.journal`
    /// (`cdr-postgres.journal` with --cdr-postgres).
    #[arg(long, value_name = "FILE")]
    pub cdr_journal: Option<PathBuf>,
    /// Size limit of the journal (1 GiB: about 600 000 calls); CDRs that do not fit are
    /// dropped, counted and logged.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_JOURNAL_BYTES_MAX)]
    pub cdr_journal_bytes_max: u64,
    /// CDRs queued for the database at most; past it the capture thread journals them itself.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_QUEUE_RECORDS_MAX)]
    pub cdr_queue_records_max: usize,
}

/// The journal's default place: beside the SQLite file, one per kind of database, so that one
/// database's records are never replayed into the other.
pub fn default_journal(db: &Path, postgres: bool) -> PathBuf {
    let name = if postgres {
        "cdr-postgres.journal"
    } else {
        "cdr.journal"
    };
    db.parent().unwrap_or(Path::new("")).join(name)
}

/// The running CDR writer of one capture.
pub struct CdrSink {
    writer: CdrWriter,
}

impl CdrSink {
    /// Starts the writer. An unreachable database is not an error here: CDRs are journaled
    /// until it is reachable.
    pub fn start(db: &Path, postgres: Option<&str>, args: &CdrWriterArgs) -> anyhow::Result<Self> {
        let journal = args
            .cdr_journal
            .clone()
            .unwrap_or_else(|| default_journal(db, postgres.is_some()));
        let cfg = CdrWriterConfig {
            queue_records_max: args.cdr_queue_records_max.max(1),
            journal_bytes_max: args.cdr_journal_bytes_max,
            ..CdrWriterConfig::new(&journal)
        };
        let writer = match postgres {
            Some(conninfo) => {
                let conninfo = conninfo.to_string();
                CdrWriter::start(cfg, move || {
                    Ok(Box::new(PgStore::connect(&conninfo)?) as Box<dyn CdrStore>)
                })
            }
            None => {
                if let Some(dir) = db.parent()
                    && !dir.as_os_str().is_empty()
                {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                let db = db.to_path_buf();
                CdrWriter::start(cfg, move || {
                    Ok(Box::new(SqliteStore::open(&db)?) as Box<dyn CdrStore>)
                })
            }
        }?;
        Ok(CdrSink { writer })
    }

    /// Hands over the closed calls (each with its streams) and the streams without a call.
    /// With an archive, each call's row says where its packets are.
    pub fn submit(&self, a: &Analysis, archive: Option<&crate::capture_archive::CaptureArchive>) {
        for c in &a.calls {
            let streams = c.streams.iter().map(cdr_stream).collect();
            let mut row = cdr_call(c);
            if let Some(archive) = archive {
                archive.fill(c, &mut row);
            }
            self.writer.submit(CdrRecord::call(row, streams));
        }
        for s in &a.streams {
            self.writer.submit(CdrRecord::lone_stream(cdr_stream(s)));
        }
    }

    pub fn watch(&self) -> CdrWriterWatch {
        self.writer.watch()
    }

    /// Stores or journals what is queued, and says where CDRs went if not all reached the
    /// database.
    pub fn close(self) -> CdrWriterStats {
        let s = self.writer.close();
        if s.journal_records > 0 {
            tracing::warn!(
                records = s.journal_records,
                bytes = s.journal_bytes,
                "CDRs wait in the journal for the database; the next `tandem capture` stores them"
            );
        }
        if s.dropped_records > 0 {
            tracing::error!(records = s.dropped_records, "CDRs were dropped");
        }
        s
    }
}
