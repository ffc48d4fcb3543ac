//! The CDR sink: closed calls, streams and registrations become [`CdrRecord`]s handed to a
//! [`CdrWriter`], which stores them in SQLite or PostgreSQL on its own thread, so that capture
//! never waits for the database; what the database cannot take goes to the journal (see
//! `cdr::writer`). With a collector (`--collector`) the writer's store is the link to it
//! ([`crate::uplink`]): the same queue, journal and replay, with the collector's acknowledgement
//! in place of the database's commit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdr::{
    CdrRecord, CdrStore, CdrWriter, CdrWriterConfig, CdrWriterStats, CdrWriterWatch, PgStore,
    SqliteStore,
};
use monitor::Analysis;

use crate::SensorError;
use crate::config::CdrConfig;
use crate::records::{cdr_call, cdr_registration, cdr_stream, create_parent};
use crate::uplink::{Uplink, UplinkSummary};

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

/// The journal's place when CDRs go to a collector: its own file, so that records meant for a
/// local database are never sent away, nor the other way.
pub fn collector_journal(db: &Path) -> PathBuf {
    db.parent()
        .unwrap_or(Path::new(""))
        .join("cdr-collector.journal")
}

/// The running CDR writer of one capture.
pub struct CdrSink {
    writer: CdrWriter,
    uplink: Option<Arc<Uplink>>,
}

impl CdrSink {
    /// Starts the writer. An unreachable database is not an error here: CDRs are journaled
    /// until it is reachable.
    /// With a collector, `archive` is the directory its pcap requests are confined to. A
    /// SQLite database is created, or narrowed, to `access` (the writer owns its mode).
    pub fn start(
        config: &CdrConfig,
        archive: Option<&Path>,
        access: &filemode::Access,
    ) -> Result<Self, SensorError> {
        let postgres = config.postgres.as_deref();
        let journal = config.journal.clone().unwrap_or_else(|| {
            if config.collector.is_some() {
                collector_journal(&config.db)
            } else {
                default_journal(&config.db, postgres.is_some())
            }
        });
        let cfg = CdrWriterConfig {
            queue_records_max: config.queue_records_max.max(1),
            journal_bytes_max: config.journal_bytes_max,
            sensor: config.sensor_id.clone(),
            ..CdrWriterConfig::new(&journal)
        };
        if let Some(link) = &config.collector {
            if link.sensor != config.sensor_id {
                return Err(SensorError::Config(format!(
                    "the collector link is for sensor {:?}, the CDRs for {:?}",
                    link.sensor, config.sensor_id
                )));
            }
            let uplink = Arc::new(Uplink::start(link.clone(), archive)?);
            let opener = uplink.clone();
            let cfg = CdrWriterConfig {
                batch_records_max: crate::uplink::DELIVERY_BATCH_RECORDS_MAX,
                ..cfg
            };
            let writer = CdrWriter::start(cfg, move || opener.open_store())?;
            uplink.set_stats(writer.watch());
            return Ok(CdrSink {
                writer,
                uplink: Some(uplink),
            });
        }
        let writer = match postgres {
            Some(conninfo) => {
                let conninfo = conninfo.to_string();
                let groups = config.groups.clone();
                CdrWriter::start(cfg, move || {
                    let mut st = PgStore::connect(&conninfo)?;
                    st.set_groups(groups.clone());
                    Ok(Box::new(st) as Box<dyn CdrStore>)
                })
            }
            None => {
                // A newer Tandem's database (or another kind of file) is refused here: the
                // writer would only journal every record while it waits for it.
                SqliteStore::check_format(&config.db)?;
                create_parent(&config.db, access)?;
                let (db, access) = (config.db.clone(), access.clone());
                let groups = config.groups.clone();
                CdrWriter::start(cfg, move || {
                    let mut st = SqliteStore::open_with(&db, &access)?;
                    st.set_groups(groups.clone());
                    Ok(Box::new(st) as Box<dyn CdrStore>)
                })
            }
        }?;
        Ok(CdrSink {
            writer,
            uplink: None,
        })
    }

    /// Hands over the closed calls (each with its streams), the streams without a call and
    /// the closed REGISTER chains. With an archive, each call's row says where its packets are,
    /// and so does each stream's without a call.
    pub fn submit(&self, a: &Analysis, archive: Option<&crate::archive_tap::CaptureArchive>) {
        self.submit_rows(Self::rows(a, archive));
    }

    /// The batch's records as CDR rows (calls with their streams and T.38 flows, streams
    /// without a call, REGISTER chains), with where the archive put their packets.
    pub fn rows(
        a: &Analysis,
        archive: Option<&crate::archive_tap::CaptureArchive>,
    ) -> Vec<CdrRecord> {
        let mut out = Vec::with_capacity(a.calls.len() + a.streams.len() + a.registrations.len());
        for c in &a.calls {
            let streams = c.streams.iter().map(cdr_stream).collect();
            let mut row = cdr_call(c);
            if let Some(archive) = archive {
                archive.fill(c, &mut row);
            }
            let mut record = CdrRecord::call(row, streams);
            record.t38 = c.t38.iter().map(crate::records::cdr_t38).collect();
            out.push(record);
        }
        for s in &a.streams {
            let mut row = cdr_stream(s);
            if let Some(archive) = archive {
                archive.fill_stream(s, &mut row);
            }
            out.push(CdrRecord::lone_stream(row));
        }
        for r in &a.registrations {
            out.push(CdrRecord::registration(cdr_registration(r)));
        }
        out
    }

    /// Hands rows to the writer (which never waits).
    pub fn submit_rows(&self, rows: Vec<CdrRecord>) {
        for r in rows {
            self.writer.submit(r);
        }
    }

    pub fn watch(&self) -> CdrWriterWatch {
        self.writer.watch()
    }

    /// Stores or journals what is queued, and says where CDRs went if not all reached the
    /// database (or the collector: then also what the link did).
    pub fn close(self) -> (CdrWriterStats, Option<UplinkSummary>) {
        let s = self.writer.close();
        let link = self.uplink.as_ref().map(|u| u.summary());
        if let Some(l) = &link
            && s.journal_records > 0
        {
            tracing::warn!(
                records = s.journal_records,
                collector = %l.collector,
                reason = l.last_error.as_deref().unwrap_or("not acknowledged"),
                "CDRs wait in the journal for the collector; the next `tandem capture` delivers them first"
            );
        } else if s.journal_records > 0 {
            tracing::warn!(
                records = s.journal_records,
                bytes = s.journal_bytes,
                "CDRs wait in the journal for the database; the next `tandem capture` stores them"
            );
        }
        if s.dropped_records > 0 {
            tracing::error!(records = s.dropped_records, "CDRs were dropped");
        }
        (s, link)
    }
}
