//! Call detail records: the rows ([`CdrCall`], [`CdrStream`], [`CdrRegistration`]), the
//! [`CdrStore`] trait, its SQLite backend ([`SqliteStore`], the default) and its PostgreSQL
//! backend ([`PgStore`]).
//!
//! Schema (see [`SCHEMA`]): a `cdr` table with one row per call (who, when, how it ended, worst
//! MOS, where its packets are archived) and a `cdr_rtp` table with one row per RTP stream, linked by `cdr_id` (NULL for streams
//! without signalling). Times are microseconds since the Unix epoch (UTC). Inserts are batched:
//! one transaction per [`CdrStore::insert`] call.
//!
//! Every row written through [`CdrStore::insert_records`] carries the stable identity of its
//! [`CdrRecord`] (sensor, Call-ID, start time) in a `uid` column with a UNIQUE index, and
//! storing a record again updates its call row in place and replaces its streams
//! (`ON CONFLICT (uid) DO UPDATE`): the same capture read twice, or a record written again after
//! a crash, is stored once. Databases created before the `uid` column get it when opened.
//!
//! [`CdrWriter`] puts a store on a thread of its own behind a bounded queue, so that capture
//! never waits for the database; records it cannot store go to a local [`journal`] and are
//! replayed when the database is back.
//!
//! Archive columns: when the capture archives packets, each call row says where its SIP and its
//! RTP are: `sip_tar` / `rtp_tar` (the tar file), `*_member` (the member's name), `*_offset` (byte
//! offset of the member's data in the tar), `*_len` (bytes of member data) and
//! `*_compression` (`zstd` or `none`); all NULL when nothing was archived. Databases created
//! before these columns existed get them added when opened ([`LATER_COLUMNS`]). A stream
//! without a call has its packets in a member of its own, and its `cdr_rtp` row the same
//! `rtp_*` columns ([`STREAM_LATER_COLUMNS`]; a call's streams leave them NULL).
//!
//! Media beyond voice: each call row has its keypad digits (`dtmf`), for a fax its pages and
//! result (`fax_pages`, `fax_result`), and whether its SDP was SRTP (`encrypted`) and offered
//! T.38 (`t38_offered`, refused offers included); a `cdr_t38` table has one row per T.38 flow
//! ([`CdrT38`]).
//!
//! Search (the console's calls pages, [`search`]): each call row also has columns the store
//! computes from the record when it writes it — the `sensor` that saw it, the numbers reversed
//! (`caller_rev`, `called_rev`: a suffix is a prefix there), the signalling IPs as 16 bytes
//! (`caller_ip`, `callee_ip`: a CIDR is a byte range), `duration_ms`, the payload names
//! (`codecs`), the worst stream's loss and jitter (`loss_max_pct`, `jitter_max_ms`) — with an
//! index for each filter that picks few rows ([`SEARCH_COLUMNS`]; databases from before get
//! them, filled from their rows, when opened). [`CdrStore::search`] pages newest first by
//! keyset, choosing between a filter's own index and a walk in time order by counting first;
//! [`CdrStore::totals`] counts a filter's calls per time bucket; [`CdrStore::call_by_uid`]
//! reads one call whole. The query strings are parsed by [`search::CallQuery`] and
//! [`registration::RegistrationQuery`] ([`query`]: the shared syntax).
//!
//! Registrations: the REGISTER chains the monitor saw ([`CdrRegistration`], in a record's
//! `registration`), in table `registration`, searched by [`CdrStore::registrations`]. Streams
//! stored without a call are searched by [`CdrStore::lone_streams`] ([`lone`]).
//!
//! PostgreSQL ([`pg`]): the same tables, plain or partitioned by day for the collector
//! ([`PgLayout`], [`pg_partition`]: retention drops whole days, a late record gets its day),
//! kept by versioned migrations applied at connect ([`migrate`]), written a batch at a time
//! with set-based statements that keep every record once; [`pg_bench`] measures that ingest
//! against a plain `COPY` of the same rows.
//!
//! Alerts ([`alerts`]): the alert episodes the rule engine decides (table `alert`, one row per
//! rule, key and start, updated in place as it fires again and resolves; acknowledgements kept)
//! and the silences that mute them (`alert_silence`), through [`AlertStore`] on both backends;
//! SQLite files get the tables when a writer opens them, PostgreSQL by migration 5, and a reader
//! of a database without them reads none. [`replay`] reads the stored calls and registrations
//! of a time range back in start order, in bounded batches, for a dry run of the rules.
//!
//! Seeding: [`seed`] makes realistic synthetic calls and loads millions of them fast into
//! either backend (for `tandem bench console` and for checking the plans).
//!
//! This crate knows nothing of packets or SIP parsing; the binary converts the monitor's
//! records into rows.

pub mod alerts;
pub mod devices;
pub mod export;
pub mod fields;
pub mod journal;
pub mod lone;
mod matches;
pub mod migrate;
pub mod pg;
pub mod pg_bench;
mod pg_insert;
pub mod pg_partition;
mod plan;
#[cfg(test)]
mod plan_check;
pub mod query;
mod record;
pub mod registration;
pub mod replay;
pub mod report;
pub mod report_bench;
mod rollup;
pub mod search;
pub mod seed;
pub mod writer;

use std::path::Path;

pub use alerts::{AlertQuery, AlertRow, AlertStore, SilenceRow};
pub use journal::{Journal, JournalError};
pub use pg::{PgLayout, PgOptions, PgStore};
pub use pg_partition::{Day, PARTITION_DAYS_AHEAD, RETENTION_DAYS_PER_CALL_MAX};
pub use record::{CdrRecord, call_uid};
pub use registration::CdrRegistration;
pub use report::{PeriodKind, Report, ReportQuery, ReportRow};
pub use writer::{CdrWriter, CdrWriterConfig, CdrWriterStats, CdrWriterWatch, Submitted};

use rusqlite::{Connection, OptionalExtension, ToSql, params};

use plan::{Arg, Dialect, Exec, Sql, Ty, Val, Walked};
use query::Cursor;
use registration::RegistrationQuery;
use search::{CallPage, CallQuery, CallSummary, CallTotals};

#[derive(Debug, thiserror::Error)]
pub enum CdrError {
    #[error("CDR database {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("CDR database {target}: {source}")]
    Postgres {
        target: String,
        #[source]
        source: postgres::Error,
    },
    /// A stored row that does not read as the schema says (another program wrote it).
    #[error("CDR database: {problem}")]
    Data { problem: String },
    /// A store that is not a database here: a sensor's link to its collector
    /// (`sensor::uplink`), which failed or refused the records.
    #[error("collector {target}: {problem}")]
    Remote { target: String, problem: String },
    /// A schema migration failed; its transaction was rolled back ([`migrate`]).
    #[error(
        "CDR database {target}: schema migration {version} ({name}) failed and was rolled back, \
         the database is as it was before it; fix the cause and connect again"
    )]
    Migration {
        target: String,
        version: i64,
        name: String,
        #[source]
        source: Box<CdrError>,
    },
    /// The schema is not one this operation can use: the tables' layout ([`PgLayout`]), or a
    /// schema version from a newer release.
    #[error("CDR database {target}: {problem}")]
    Schema { target: String, problem: String },
    /// A row refused before it was stored ([`alerts::AlertStore::add_silence`]): what is wrong
    /// with it.
    #[error("CDR database: {problem}")]
    Invalid { problem: String },
    /// The SQLite file is another kind of file, or a newer Tandem's (crate `fileformat`): the
    /// message names the file, both versions and what to do.
    #[error(transparent)]
    Format(#[from] fileformat::FormatError),
    /// The database file's mode or group could not be set ([`SqliteStore::open_with`]).
    #[error("CDR database {path}: {source}")]
    Files {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One call. `serde(default)`: a journal written by an older Tandem, whose calls lack newer
/// fields, still reads back.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CdrCall {
    pub call_id: String,
    pub caller: String,
    pub called: String,
    pub caller_addr: String,
    pub callee_addr: String,
    pub start_us: i64,
    pub ringing_us: Option<i64>,
    pub answer_us: Option<i64>,
    pub end_us: Option<i64>,
    /// answered, ended, failed, cancelled, calling, early.
    pub state: String,
    pub last_response: Option<u16>,
    pub last_reason: String,
    /// caller or callee.
    pub hangup_by: Option<String>,
    pub q850_cause: Option<u16>,
    pub sip_messages: u32,
    pub reinvites: u32,
    /// Lowest MOS among the call's streams.
    pub mos_min: Option<f64>,
    /// The tar file holding the call's SIP packets (a pcap member), if archived.
    #[serde(default)]
    pub sip_tar: Option<String>,
    /// The SIP member's name in `sip_tar`.
    #[serde(default)]
    pub sip_member: Option<String>,
    /// Byte offset of the SIP member's data in `sip_tar`.
    #[serde(default)]
    pub sip_offset: Option<u64>,
    /// Bytes of SIP member data (compressed).
    #[serde(default)]
    pub sip_len: Option<u64>,
    /// How the SIP member is stored: `zstd` or `none`.
    #[serde(default)]
    pub sip_compression: Option<String>,
    /// The tar file holding the call's RTP and RTCP packets, if archived.
    #[serde(default)]
    pub rtp_tar: Option<String>,
    /// The RTP member's name in `rtp_tar`.
    #[serde(default)]
    pub rtp_member: Option<String>,
    /// Byte offset of the RTP member's data in `rtp_tar`.
    #[serde(default)]
    pub rtp_offset: Option<u64>,
    /// Bytes of RTP member data.
    #[serde(default)]
    pub rtp_len: Option<u64>,
    /// How the RTP member is stored: `zstd` or `none`.
    #[serde(default)]
    pub rtp_compression: Option<String>,
    /// Keypad digits in order (RFC 4733 and SIP INFO), `!` for a flash; empty if none.
    #[serde(default)]
    pub dtmf: String,
    /// A fax call's pages confirmed by the receiver, when its T.30 frames were seen.
    #[serde(default)]
    pub fax_pages: Option<u32>,
    /// A fax call's result: `completed` or `interrupted`.
    #[serde(default)]
    pub fax_result: Option<String>,
    /// The call's media is SRTP: an offer or answer said `RTP/SAVP`, `RTP/SAVPF` or
    /// `UDP/TLS/RTP/SAVPF` (whether or not its RTP was captured).
    #[serde(default)]
    pub encrypted: bool,
    /// T.38 was offered in the call, accepted or not (a refused offer leaves no `fax_result`).
    #[serde(default)]
    pub t38_offered: bool,
    /// The sensor that saw the call. [`CdrWriter::submit`] fills it from its configuration
    /// when empty; the store writes `local` for an empty one.
    #[serde(default)]
    pub sensor: String,
    /// The User-Agent of the call's first INVITE (at most
    /// [`fields::HEADER_VALUE_BYTES_MAX`] bytes); empty when it had none.
    pub caller_ua: String,
    /// The answering side's Server header, else its User-Agent, from its responses to the
    /// INVITE (a 2xx's before a provisional one's; never a 100's, which a proxy may send).
    pub callee_ua: String,
    /// The host of the first INVITE's From and To URIs, lower case.
    pub from_domain: String,
    pub to_domain: String,
    /// The user part of the first INVITE's Request-URI (the number dialled as routed).
    pub ruri_user: String,
    /// The values of the headers `[capture] headers` names, by lower-case name: the first
    /// message of the call that carried each (at most [`fields::HEADERS_MAX`] headers,
    /// [`fields::HEADER_VALUE_BYTES_MAX`] bytes each, cut at a character).
    pub headers: std::collections::BTreeMap<String, String>,
    /// The call this leg belongs to: the `uid` of its first leg; a leg alone carries its own
    /// uid. Filled when the record gets its identity ([`CdrRecord::fill_identity`]); a row
    /// stored before legs were linked has none (NULL: it is its own call).
    #[serde(default)]
    pub call_group: String,
    /// The rule that linked this leg to its call's first leg: `header:NAME`,
    /// `hep-correlation` or `b2bua`; `None` when not linked.
    #[serde(default)]
    pub linked_by: Option<String>,
    /// How sure the link is, 0 to 1; `None` when not linked.
    #[serde(default)]
    pub link_confidence: Option<f64>,
    /// The first leg of the call, as the monitor named it, when this leg was linked to it:
    /// `call_group` is made from it under the sensor's name when the record gets its identity
    /// ([`CdrRecord::fill_identity`], before it is journaled or sent). Neither a column nor
    /// serialized (the compact form between sensor and collector has no field names).
    #[serde(skip)]
    pub first_leg: Option<FirstLeg>,
}

/// A call's first leg, named as the record's identity names a call (Call-ID and start).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FirstLeg {
    pub call_id: String,
    pub start_us: i64,
}

/// The columns of `cdr` added after its first release, in order, with their SQLite and
/// PostgreSQL types: where the call is archived, its digits, its fax, whether it was SRTP and
/// offered T.38. Opening an SQLite database adds those it lacks; PostgreSQL gets the first
/// [`migrate::V1_LATER_COLUMNS`] from migration 1 and the others from the migrations after it.
pub const LATER_COLUMNS: [(&str, &str, &str); 15] = [
    ("sip_tar", "TEXT", "TEXT"),
    ("sip_member", "TEXT", "TEXT"),
    ("sip_offset", "INTEGER", "BIGINT"),
    ("sip_len", "INTEGER", "BIGINT"),
    ("sip_compression", "TEXT", "TEXT"),
    ("rtp_tar", "TEXT", "TEXT"),
    ("rtp_member", "TEXT", "TEXT"),
    ("rtp_offset", "INTEGER", "BIGINT"),
    ("rtp_len", "INTEGER", "BIGINT"),
    ("rtp_compression", "TEXT", "TEXT"),
    ("dtmf", "TEXT", "TEXT"),
    ("fax_pages", "INTEGER", "BIGINT"),
    ("fax_result", "TEXT", "TEXT"),
    ("encrypted", "INTEGER", "BOOLEAN"),
    ("t38_offered", "INTEGER", "BOOLEAN"),
];

/// The search columns of `cdr` ([`search`]), with their SQLite and PostgreSQL types. The store
/// computes them from the record; opening a database that lacks them adds them and fills them
/// from the rows already stored.
pub const SEARCH_COLUMNS: [(&str, &str, &str); 9] = [
    ("sensor", "TEXT", "TEXT"),
    ("caller_rev", "TEXT", "TEXT"),
    ("called_rev", "TEXT", "TEXT"),
    ("caller_ip", "BLOB", "BYTEA"),
    ("callee_ip", "BLOB", "BYTEA"),
    ("duration_ms", "INTEGER", "BIGINT"),
    ("codecs", "TEXT", "TEXT"),
    ("loss_max_pct", "REAL", "DOUBLE PRECISION"),
    ("jitter_max_ms", "REAL", "DOUBLE PRECISION"),
];

/// The columns of `cdr_rtp` added after its first release: where a stream without a call has
/// its packets archived. Opening an SQLite database adds those it lacks; PostgreSQL gets them
/// from migration 4.
pub const STREAM_LATER_COLUMNS: [(&str, &str, &str); 5] = [
    ("rtp_tar", "TEXT", "TEXT"),
    ("rtp_member", "TEXT", "TEXT"),
    ("rtp_offset", "INTEGER", "BIGINT"),
    ("rtp_len", "INTEGER", "BIGINT"),
    ("rtp_compression", "TEXT", "TEXT"),
];

/// The columns of `cdr_t38` added after its first release.
pub const T38_LATER_COLUMNS: [(&str, &str, &str); 3] = [
    ("redundant", "INTEGER", "BIGINT"),
    ("fec", "INTEGER", "BIGINT"),
    ("t30", "TEXT", "TEXT"),
];

/// One direction of a call's T.38 fax (UDPTL) media.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CdrT38 {
    pub src: String,
    pub dst: String,
    pub start_us: i64,
    pub end_us: i64,
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// The IFP types seen, in order, comma-separated (`cng,v21-preamble,v21,...`).
    pub types: String,
    /// Packets carrying redundant copies of earlier IFPs, and packets carrying FEC.
    pub redundant: u64,
    pub fec: u64,
    /// The T.30 control frames, in order, comma-separated (`DIS,DCS,CFR,MPS,MCF,...`).
    pub t30: String,
}

/// The columns of a T.38 row after `cdr_id`, in [`CdrT38`]'s order.
pub(crate) const T38_COLUMNS: &str = "src, dst, start_us, end_us, packets, bytes, lost, duplicates, out_of_order, types, redundant, fec, t30";

/// One RTP stream.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CdrStream {
    pub call_id: Option<String>,
    pub src: String,
    pub dst: String,
    pub ssrc: u32,
    pub payload: String,
    pub start_us: i64,
    pub end_us: i64,
    pub packets: u64,
    pub lost: i64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub min_delta_ms: f64,
    pub mean_delta_ms: f64,
    pub max_delta_ms: f64,
    pub mean_jitter_ms: f64,
    pub max_jitter_ms: f64,
    pub mos: Option<f64>,
    pub rtcp_reports: u32,
    pub rtcp_fraction_lost_pct: Option<f64>,
    pub rtcp_jitter_ms: Option<f64>,
    /// A stream without a call: the tar file holding its RTP and RTCP packets, if archived
    /// (a call's streams are in their call's `rtp_*` member, and leave these empty).
    pub rtp_tar: Option<String>,
    /// The stream's member name in `rtp_tar`.
    pub rtp_member: Option<String>,
    /// Byte offset of the member's data in `rtp_tar`.
    pub rtp_offset: Option<u64>,
    /// Bytes of member data.
    pub rtp_len: Option<u64>,
    /// How the member is stored: `zstd` or `none`.
    pub rtp_compression: Option<String>,
}

impl CdrStream {
    /// Whether the stream's own packets are archived (a stream without a call).
    pub fn archived(&self) -> bool {
        self.rtp_tar.is_some()
    }

    /// A call row whose RTP archive columns are this stream's, and whose `call_id` is `name`:
    /// what reads a pcap back (`sensor::call_pcap`, a collector's pcap request) takes.
    pub fn archive_as_call(&self, name: &str, sensor: &str) -> CdrCall {
        CdrCall {
            call_id: name.to_string(),
            start_us: self.start_us,
            rtp_tar: self.rtp_tar.clone(),
            rtp_member: self.rtp_member.clone(),
            rtp_offset: self.rtp_offset,
            rtp_len: self.rtp_len,
            rtp_compression: self.rtp_compression.clone(),
            sensor: sensor.to_string(),
            ..CdrCall::default()
        }
    }
}

/// Which calls `list` returns. Empty fields do not filter.
#[derive(Debug, Clone, Default)]
pub struct CdrFilter {
    /// Calls that started at or after this time (µs since the epoch).
    pub since_us: Option<i64>,
    /// Calls that started before this time.
    pub until_us: Option<i64>,
    /// Caller or called number contains this.
    pub number: Option<String>,
    pub last_response: Option<u16>,
    /// Calls whose worst stream scored below this MOS.
    pub mos_below: Option<f64>,
    /// At most this many rows, newest first.
    pub limit: usize,
}

/// Where CDRs are kept.
pub trait CdrStore {
    /// Stores records in one transaction: each call with its streams linked to it, and streams
    /// without a call unlinked. A record whose `uid` is already stored updates that call row
    /// and replaces its streams, so inserting the same records twice stores them once (an empty
    /// `uid` is never matched).
    fn insert_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError>;
    /// Batches this store can have on their way at once ([`CdrStore::send_records`] before
    /// [`CdrStore::settle_oldest`]); 1 for a database, which stores a batch before it returns.
    /// A collector's link sends the next batch while the collector commits the one before.
    fn batches_in_flight_max(&self) -> usize {
        1
    }
    /// Starts storing a batch; it is stored once [`CdrStore::settle_oldest`] says so for it
    /// (batches settle in the order they were sent). By default stores it at once.
    fn send_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        self.insert_records(records)
    }
    /// Waits until the oldest batch sent and not yet settled is stored (Ok) or known not to be
    /// (Err: it and every later one must be stored again).
    fn settle_oldest(&mut self) -> Result<(), CdrError> {
        Ok(())
    }
    /// Stores calls and streams in one transaction, without unique ids. Streams are linked to
    /// the call with the same Call-ID in `calls` (or stored unlinked).
    fn insert(&mut self, calls: &[CdrCall], streams: &[CdrStream]) -> Result<(), CdrError> {
        self.insert_records(&record::records_of(calls, streams))
    }
    fn list(&mut self, filter: &CdrFilter) -> Result<Vec<CdrCall>, CdrError>;
    /// The most recent call with this Call-ID and its streams.
    fn show(&mut self, call_id: &str) -> Result<Option<(CdrCall, Vec<CdrStream>)>, CdrError>;
    /// The T.38 flows of the most recent call with this Call-ID (empty for a voice call).
    fn t38(&mut self, call_id: &str) -> Result<Vec<CdrT38>, CdrError>;
    /// A page of the calls `q` matches, newest first by (start, id), from `q.after` on (keyset,
    /// never OFFSET). See [`search`] for the plans.
    fn search(&mut self, q: &CallQuery) -> Result<CallPage, CdrError>;
    /// The calls `q` matches over its range (the last 24 hours without one), in total and in
    /// about 60 round buckets; `q.after` and `q.limit` do not apply.
    fn totals(&mut self, q: &CallQuery) -> Result<CallTotals, CdrError>;
    /// One call with its streams and T.38 flows, by its `uid` (or `#<id>` for a row stored
    /// without one, as [`CallSummary::uid`] names it).
    #[allow(clippy::type_complexity)]
    fn call_by_uid(
        &mut self,
        uid: &str,
    ) -> Result<Option<(CallSummary, Vec<CdrStream>, Vec<CdrT38>)>, CdrError>;
    /// Every leg of the call that the leg `uid` (or `#<id>`) belongs to, in order of start
    /// (at most [`search::CALL_LEGS_MAX`], within [`search::CALL_LEGS_SPAN_US`] of the first);
    /// empty when no such leg is stored. A store that is no database has none.
    fn call_legs(&mut self, uid: &str) -> Result<Vec<CallSummary>, CdrError> {
        let _ = uid;
        Ok(Vec::new())
    }
    /// A page of the registrations `q` matches, newest first by (last message, id).
    fn registrations(
        &mut self,
        q: &RegistrationQuery,
    ) -> Result<registration::RegistrationPage, CdrError>;
    /// A page of the RTP streams stored without a call that `q` matches, newest first by
    /// (start, id) ([`lone`]). A store that is no database (a collector's link) has none.
    fn lone_streams(&mut self, q: &lone::StreamQuery) -> Result<lone::LoneStreamPage, CdrError> {
        let _ = q;
        Err(CdrError::Data {
            problem: "this store keeps no streams to search".to_string(),
        })
    }
    /// One stream without a call, by its `uid` (or `#<id>`).
    fn lone_stream_by_uid(&mut self, uid: &str) -> Result<Option<lone::LoneStream>, CdrError> {
        let _ = uid;
        Ok(None)
    }
    /// The database's alerts and silences ([`alerts`]); `None` for a store that is no database
    /// (a collector's link).
    fn alert_store(&mut self) -> Option<&mut dyn AlertStore> {
        None
    }
    /// The database's stored records in time order ([`replay::records_between`]); `None` for a
    /// store that is no database.
    fn replay_source(&mut self) -> Option<&mut dyn replay::ReplaySource> {
        None
    }
    /// A group's report over a range, per hour, day or week ([`report`]), read from the
    /// rollups the store keeps as calls are stored, never from the calls. A group without
    /// calls in the range (or not configured) has rows of zeros.
    fn report(&mut self, q: &ReportQuery) -> Result<Report, CdrError> {
        let _ = q;
        Err(CdrError::Data {
            problem: "this store keeps no reports".to_string(),
        })
    }
    /// The groups that have rollups (`all` first, then by name), at most
    /// [`report::REPORT_GROUPS_MAX`].
    fn report_groups(&mut self) -> Result<Vec<String>, CdrError> {
        Ok(Vec::new())
    }
}

/// The SQLite schema: the tables. Their indexes are [`SQLITE_INDEXES`], created once the
/// columns they cover exist (a database from before the search columns gets those first).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS cdr (
    id             INTEGER PRIMARY KEY,
    call_id        TEXT    NOT NULL,
    caller         TEXT    NOT NULL,
    called         TEXT    NOT NULL,
    caller_addr    TEXT    NOT NULL,
    callee_addr    TEXT    NOT NULL,
    start_us       INTEGER NOT NULL,
    ringing_us     INTEGER,
    answer_us      INTEGER,
    end_us         INTEGER,
    state          TEXT    NOT NULL,
    last_response  INTEGER,
    last_reason    TEXT    NOT NULL,
    hangup_by      TEXT,
    q850_cause     INTEGER,
    sip_messages   INTEGER NOT NULL,
    reinvites      INTEGER NOT NULL,
    mos_min        REAL,
    sip_tar        TEXT,
    sip_member     TEXT,
    sip_offset     INTEGER,
    sip_len        INTEGER,
    sip_compression TEXT,
    rtp_tar        TEXT,
    rtp_member     TEXT,
    rtp_offset     INTEGER,
    rtp_len        INTEGER,
    rtp_compression TEXT,
    dtmf           TEXT,
    fax_pages      INTEGER,
    fax_result     TEXT,
    encrypted      INTEGER,
    t38_offered    INTEGER,
    uid            TEXT,
    sensor         TEXT,
    caller_rev     TEXT,
    called_rev     TEXT,
    caller_ip      BLOB,
    callee_ip      BLOB,
    duration_ms    INTEGER,
    codecs         TEXT,
    loss_max_pct   REAL,
    jitter_max_ms  REAL
);
CREATE TABLE IF NOT EXISTS cdr_rtp (
    id                      INTEGER PRIMARY KEY,
    cdr_id                  INTEGER REFERENCES cdr(id),
    call_id                 TEXT,
    src                     TEXT    NOT NULL,
    dst                     TEXT    NOT NULL,
    ssrc                    INTEGER NOT NULL,
    payload                 TEXT    NOT NULL,
    start_us                INTEGER NOT NULL,
    end_us                  INTEGER NOT NULL,
    packets                 INTEGER NOT NULL,
    lost                    INTEGER NOT NULL,
    duplicates              INTEGER NOT NULL,
    out_of_order            INTEGER NOT NULL,
    min_delta_ms            REAL    NOT NULL,
    mean_delta_ms           REAL    NOT NULL,
    max_delta_ms            REAL    NOT NULL,
    mean_jitter_ms          REAL    NOT NULL,
    max_jitter_ms           REAL    NOT NULL,
    mos                     REAL,
    rtcp_reports            INTEGER NOT NULL,
    rtcp_fraction_lost_pct  REAL,
    rtcp_jitter_ms          REAL,
    uid                     TEXT,
    rtp_tar                 TEXT,
    rtp_member              TEXT,
    rtp_offset              INTEGER,
    rtp_len                 INTEGER,
    rtp_compression         TEXT
);
CREATE TABLE IF NOT EXISTS cdr_t38 (
    id            INTEGER PRIMARY KEY,
    cdr_id        INTEGER REFERENCES cdr(id),
    src           TEXT    NOT NULL,
    dst           TEXT    NOT NULL,
    start_us      INTEGER NOT NULL,
    end_us        INTEGER NOT NULL,
    packets       INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,
    lost          INTEGER NOT NULL,
    duplicates    INTEGER NOT NULL,
    out_of_order  INTEGER NOT NULL,
    types         TEXT    NOT NULL,
    redundant     INTEGER,
    fec           INTEGER,
    t30           TEXT,
    uid           TEXT
);
CREATE TABLE IF NOT EXISTS registration (
    id            INTEGER PRIMARY KEY,
    uid           TEXT,
    call_id       TEXT    NOT NULL,
    username      TEXT    NOT NULL,
    domain        TEXT    NOT NULL,
    contact       TEXT    NOT NULL,
    user_agent    TEXT    NOT NULL,
    src           TEXT    NOT NULL,
    dst           TEXT    NOT NULL,
    first_us      INTEGER NOT NULL,
    last_us       INTEGER NOT NULL,
    requests      INTEGER NOT NULL,
    last_code     INTEGER,
    result        TEXT    NOT NULL,
    expires_s     INTEGER,
    sensor        TEXT    NOT NULL,
    src_ip        BLOB,
    dst_ip        BLOB
);
";

/// The SQLite indexes, by name: what [`SqliteStore::open`] creates and [`seed`]'s bulk load
/// drops and builds again. Why each exists: the table in [`search`]'s documentation. Every
/// SQLite index ends with the rowid (`id`), so `(start_us)` is the keyset's `(start_us, id)`.
pub const SQLITE_INDEXES: [(&str, &str); 16] = [
    ("cdr_start", "cdr(start_us)"),
    ("cdr_call_id", "cdr(call_id)"),
    ("cdr_uid", "UNIQUE cdr(uid)"),
    ("cdr_caller_start", "cdr(caller, start_us)"),
    ("cdr_called_start", "cdr(called, start_us)"),
    ("cdr_caller_rev_start", "cdr(caller_rev, start_us)"),
    ("cdr_called_rev_start", "cdr(called_rev, start_us)"),
    ("cdr_caller_ip_start", "cdr(caller_ip, start_us)"),
    ("cdr_callee_ip_start", "cdr(callee_ip, start_us)"),
    ("cdr_rtp_cdr", "cdr_rtp(cdr_id)"),
    ("cdr_rtp_call_id", "cdr_rtp(call_id)"),
    ("cdr_rtp_uid", "UNIQUE cdr_rtp(uid)"),
    ("cdr_t38_cdr", "cdr_t38(cdr_id)"),
    ("cdr_t38_uid", "UNIQUE cdr_t38(uid)"),
    ("registration_last", "registration(last_us)"),
    ("registration_user", "registration(username, last_us)"),
];

/// The registration table's unique index, created with the others.
const SQLITE_REG_UID: (&str, &str) = ("registration_uid", "UNIQUE registration(uid)");

/// Indexes of earlier releases that the search indexes replace: `(caller, start_us)` serves
/// everything `(caller)` did.
pub const RETIRED_INDEXES: [&str; 2] = ["cdr_caller", "cdr_called"];

/// `CREATE [UNIQUE] INDEX IF NOT EXISTS name ON table(columns)` from an entry of an index list.
pub(crate) fn create_index_sql(name: &str, def: &str) -> String {
    let (unique, on) = match def.strip_prefix("UNIQUE ") {
        Some(on) => ("UNIQUE ", on),
        None => ("", def),
    };
    format!("CREATE {unique}INDEX IF NOT EXISTS {name} ON {on};")
}

/// Every index SQLite should have, and none of the retired ones.
fn sqlite_index_sql() -> String {
    let mut sql: String = RETIRED_INDEXES
        .iter()
        .map(|n| format!("DROP INDEX IF EXISTS {n};"))
        .collect();
    let lone = lone::SQLITE_LONE_INDEXES.iter();
    for (name, def) in SQLITE_INDEXES.iter().chain([&SQLITE_REG_UID]).chain(lone) {
        sql += &create_index_sql(name, def);
    }
    sql
}

/// Adds the `uid` column to the tables of a database created before it existed; the indexes
/// then cover it.
fn upgrade_sqlite(conn: &Connection) -> rusqlite::Result<()> {
    for table in ["cdr", "cdr_rtp", "cdr_t38", "registration"] {
        let (exists, has_uid): (i64, i64) = conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(name = 'uid'), 0) FROM pragma_table_info(?1)",
            [table],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if exists > 0 && has_uid == 0 {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN uid TEXT"))?;
        }
    }
    Ok(())
}

/// The format versions of the SQLite CDR database and what each brings (crate `fileformat`:
/// `PRAGMA user_version`, application_id `TDCR`). Applied at open, all in one transaction with
/// the new version. A change of the tables is a new entry here, never an edit of an applied
/// one.
pub const SQLITE_MIGRATIONS: &[(u32, &str)] = &[
    (1, "CDR tables, columns and indexes"),
    (
        2,
        "calls linked across their legs: call_group, linked_by, link_confidence",
    ),
    (
        3,
        "calls keep their User-Agents, domains, Request-URI user and chosen headers",
    ),
    (4, "registrations say why they fail"),
    (
        5,
        "report rollups (report_hour), the calls stored before counted in group all",
    ),
];

/// The columns of `cdr` that link a call's legs ([`CdrCall::call_group`]), with their SQLite
/// and PostgreSQL types: SQLite migration 2 and PostgreSQL migration 6 add them, with the
/// index [`CALL_GROUP_INDEX`].
pub const LEG_COLUMNS: [(&str, &str, &str); 3] = [
    ("call_group", "TEXT", "TEXT"),
    ("linked_by", "TEXT", "TEXT"),
    ("link_confidence", "REAL", "DOUBLE PRECISION"),
];

/// The index of the legs of a call by their group (both backends; on a partitioned parent,
/// built on every day).
pub const CALL_GROUP_INDEX: (&str, &str) = ("cdr_call_group", "cdr (call_group)");

/// PostgreSQL's `ALTER TABLE cdr ADD COLUMN IF NOT EXISTS ...` for each of [`LEG_COLUMNS`],
/// and the index.
pub(crate) fn pg_leg_columns_sql() -> String {
    let mut sql: String = LEG_COLUMNS
        .iter()
        .map(|(name, _, ty)| format!("ALTER TABLE cdr ADD COLUMN IF NOT EXISTS {name} {ty};"))
        .collect();
    sql += &create_index_sql(CALL_GROUP_INDEX.0, CALL_GROUP_INDEX.1);
    sql
}

/// The SQLite CDR database's format version this build writes, and the highest it reads.
pub const SQLITE_FORMAT_VERSION: u32 = 5;
const _: () = assert!(SQLITE_MIGRATIONS[SQLITE_MIGRATIONS.len() - 1].0 == SQLITE_FORMAT_VERSION);

/// How long a statement waits for another connection's write lock (the capture's writer and
/// the console's readers share the file) before it fails.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 5_000;

/// SQLite's page cache per connection, in KiB (32 MiB; SQLite's default is 2 MiB): each call
/// inserted updates the search indexes at scattered places, and a search reads rows scattered
/// over the file; pages kept here spare a read from the OS each. Taken as it is used.
pub const SQLITE_CACHE_KIB: i64 = 32 * 1024;

/// CDRs in one SQLite file (WAL journal).
pub struct SqliteStore {
    path: String,
    conn: Connection,
    /// The groups whose report rollups this store keeps as it stores calls (`all` always).
    groups: std::sync::Arc<groups::Groups>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and its schema. A database from an
    /// earlier release is upgraded to [`SQLITE_FORMAT_VERSION`] in one transaction: it gets
    /// the columns and indexes it lacks, and the search columns are filled from its rows (once:
    /// a minute or so per million calls). A newer Tandem's file, or another kind of file, is
    /// refused ([`CdrError::Format`]) before anything is written to it.
    ///
    /// A new file is readable by its owner only (0600, and so are the WAL and shared-memory
    /// files SQLite creates beside it); an existing one keeps its mode: readers (the console,
    /// `tandem cdr`) leave that to the writer, which opens with [`SqliteStore::open_with`].
    pub fn open(path: &Path) -> Result<SqliteStore, CdrError> {
        let files = |source| CdrError::Files {
            path: path.display().to_string(),
            source,
        };
        match filemode::create_new(path, &filemode::Access::Private) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(files(e)),
            _ => {}
        }
        Self::open_file(path)
    }

    /// [`SqliteStore::open`] by the database's writer: the file is created, or narrowed, to
    /// `access` (0600, or 0640 with a group), with its WAL and shared-memory files, before and
    /// after SQLite opens it (a WAL created outside a setgid directory is given the group). An
    /// older release's 0644 database becomes 0600 here.
    pub fn open_with(path: &Path, access: &filemode::Access) -> Result<SqliteStore, CdrError> {
        let files = |source| CdrError::Files {
            path: path.display().to_string(),
            source,
        };
        filemode::prepare_sqlite(path, access).map_err(files)?;
        let store = Self::open_file(path)?;
        filemode::secure_sqlite(path, access).map_err(files)?;
        Ok(store)
    }

    /// Refuses, writing nothing, a database file of a newer format or of another kind
    /// ([`CdrError::Format`]): what waiting and retrying will never fix, so that a capture
    /// says so at its start rather than journal its records for ever. A missing file, or one
    /// that cannot be read here, passes: opening it reports that.
    pub fn check_format(path: &Path) -> Result<(), CdrError> {
        if !path.is_file() {
            return Ok(());
        }
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let Ok(conn) = Connection::open_with_flags(path, flags) else {
            return Ok(());
        };
        let kind = &fileformat::CDR_DATABASE;
        match fileformat::check(&conn, path, kind, SQLITE_FORMAT_VERSION) {
            Err(
                e @ (fileformat::FormatError::TooNew { .. }
                | fileformat::FormatError::WrongKind { .. }),
            ) => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn open_file(path: &Path) -> Result<SqliteStore, CdrError> {
        let name = path.display().to_string();
        let wrap = |source| CdrError::Sqlite {
            path: name.clone(),
            source,
        };
        let conn = Connection::open(path).map_err(wrap)?;
        conn.busy_timeout(std::time::Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
            .map_err(wrap)?;
        // A newer Tandem's file, or another kind of file, is refused before anything is
        // written to it (WAL mode writes the header).
        let kind = &fileformat::CDR_DATABASE;
        fileformat::check(&conn, path, kind, SQLITE_FORMAT_VERSION)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(wrap)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(wrap)?;
        conn.pragma_update(None, "cache_size", -SQLITE_CACHE_KIB)
            .map_err(wrap)?;
        let mut store = SqliteStore {
            path: name,
            conn,
            groups: Default::default(),
        };
        if let fileformat::Pending::From(from) =
            fileformat::begin(&store.conn, path, kind, SQLITE_FORMAT_VERSION)?
        {
            // One transaction for every migration and the new version: all or nothing.
            if let Err(e) = store.migrate(from) {
                fileformat::rollback(&store.conn);
                return Err(e);
            }
            fileformat::commit(&store.conn, path, kind, SQLITE_FORMAT_VERSION)?;
            fileformat::log_upgraded(path, kind, from, SQLITE_FORMAT_VERSION);
        }
        // Statistics for the planner of the queries that do not name their index (list, show);
        // bounded work, and only where they are missing or stale. A read-only file cannot
        // take them, which is no reason to fail.
        let _ = store.conn.execute_batch("PRAGMA optimize=0x10002;");
        Ok(store)
    }

    /// The migrations after format version `from`, inside [`fileformat::begin`]'s
    /// transaction ([`SQLITE_MIGRATIONS`]).
    fn migrate(&mut self, from: u32) -> Result<(), CdrError> {
        for &(version, name) in SQLITE_MIGRATIONS.iter().filter(|(v, _)| *v > from) {
            let r = match version {
                1 => self.tables(),
                2 => self.leg_columns(),
                5 => self.report_tables(),
                3 => fields::sqlite_migrate(&self.conn).map_err(|e| self.err(e)),
                4 => add_registration_columns(&self.conn).map_err(|e| self.err(e)),
                _ => unreachable!("SQLITE_MIGRATIONS lists versions 1..={SQLITE_FORMAT_VERSION}"),
            };
            r.map_err(|source| CdrError::Migration {
                target: self.path.clone(),
                version: i64::from(version),
                name: name.to_string(),
                source: Box::new(source),
            })?;
        }
        Ok(())
    }

    /// Version 1: the tables, columns and indexes of this release. A database from before
    /// versions gets the columns and indexes it lacks (each statement applies again to what
    /// it finds), and its search columns filled.
    fn tables(&mut self) -> Result<(), CdrError> {
        upgrade_sqlite(&self.conn).map_err(|e| self.err(e))?;
        self.conn.execute_batch(SCHEMA).map_err(|e| self.err(e))?;
        if add_missing_columns(&self.conn).map_err(|e| self.err(e))? {
            let n = search::backfill(self)?;
            tracing::info!(path = %self.path, rows = n, "CDR search columns added and filled");
        }
        self.conn
            .execute_batch(&sqlite_index_sql())
            .map_err(|e| self.err(e))?;
        alerts::create_sqlite(&self.conn).map_err(|e| self.err(e))
    }

    /// Version 2: the columns that link a call's legs, and their index. Rows stored before
    /// keep NULL: each is its own call.
    /// Each column is added only where it is missing (SQLite has no `ADD COLUMN IF NOT
    /// EXISTS`): a file stamped with an older version may have them already.
    fn leg_columns(&mut self) -> Result<(), CdrError> {
        let r = (|| {
            let mut st = self
                .conn
                .prepare("SELECT name FROM pragma_table_info('cdr')")?;
            let have: Vec<String> = st
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            drop(st);
            let mut sql = String::new();
            for (name, ty, _) in LEG_COLUMNS {
                if !have.iter().any(|h| h == name) {
                    sql += &format!("ALTER TABLE cdr ADD COLUMN {name} {ty};");
                }
            }
            sql += &create_index_sql(CALL_GROUP_INDEX.0, CALL_GROUP_INDEX.1);
            self.conn.execute_batch(&sql)
        })();
        r.map_err(|e| self.err(e))
    }

    /// Version 5: the report rollups, with every call already stored counted (again, should
    /// the table be there) in group
    /// [`groups::ALL`] (configured groups count from the calls stored after they are; a
    /// minute or so per million calls, once).
    fn report_tables(&mut self) -> Result<(), CdrError> {
        self.conn
            .execute_batch(rollup::SQLITE_TABLE)
            .map_err(|e| self.err(e))?;
        let n = rollup::sqlite_rebuild(&self.conn, &groups::Groups::none(), true)
            .map_err(|e| self.err(e))?;
        if n > 0 {
            tracing::info!(path = %self.path, calls = n, "CDR report rollups filled");
        }
        Ok(())
    }

    /// Counts every stored call again into the rollups of [`groups::ALL`] and of this store's
    /// groups ([`SqliteStore::set_groups`]), replacing the rollups kept so far, in one
    /// transaction: for groups configured after their calls were stored. A scan of every
    /// call, so an explicit step (`tandem report rebuild`), never part of drawing a report.
    /// Answers the calls counted.
    pub fn rebuild_reports(&mut self) -> Result<u64, CdrError> {
        let groups = self.groups.clone();
        let r = (|| {
            let tx = self.conn.transaction()?;
            let n = rollup::sqlite_rebuild(&tx, &groups, true)?;
            tx.commit()?;
            Ok(n)
        })();
        r.map_err(|e| self.err(e))
    }

    /// The groups whose rollups this store keeps from now on, besides `all`.
    pub fn set_groups(&mut self, groups: std::sync::Arc<groups::Groups>) {
        self.groups = groups;
    }

    fn err(&self, source: rusqlite::Error) -> CdrError {
        CdrError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    pub(crate) fn conn(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// Format version 4: `registration`'s columns of why a chain fails
/// ([`registration::REG_LATER_COLUMNS`]), each added only where it is missing; the rows
/// stored before keep `failure` NULL and are read by their result.
fn add_registration_columns(conn: &Connection) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info('registration')")?;
    let have: Vec<String> = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for (name, ty, _) in registration::REG_LATER_COLUMNS {
        if !have.iter().any(|h| h == name) {
            conn.execute_batch(&format!("ALTER TABLE registration ADD COLUMN {name} {ty}"))?;
        }
    }
    Ok(())
}

/// Adds the later columns to `cdr`, `cdr_t38` and `cdr_rtp` tables created before they existed; true when
/// search columns were added to a `cdr` table that holds rows (they must be filled).
fn add_missing_columns(conn: &Connection) -> rusqlite::Result<bool> {
    let mut fill = false;
    for (table, columns, search) in [
        ("cdr", &LATER_COLUMNS[..], false),
        ("cdr", &SEARCH_COLUMNS[..], true),
        ("cdr_t38", &T38_LATER_COLUMNS[..], false),
        ("cdr_rtp", &STREAM_LATER_COLUMNS[..], false),
    ] {
        let mut st = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
        let have: Vec<String> = st
            .query_map([table], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for (name, ty, _) in columns {
            if !have.iter().any(|h| h == name) {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {name} {ty}"))?;
                fill |= search;
            }
        }
    }
    if fill {
        fill = conn.query_row("SELECT EXISTS (SELECT 1 FROM cdr)", [], |r| r.get(0))?;
    }
    Ok(fill)
}

/// An optional byte count or offset as SQLite stores it (a signed 64-bit integer).
fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// A call from the row of `SELECT {CALL_COLUMNS}`, starting at column `o`.
fn call_from_row(r: &rusqlite::Row<'_>, o: usize) -> rusqlite::Result<CdrCall> {
    let u = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(r.get::<_, Option<i64>>(o + i)?.map(|v| v.max(0) as u64))
    };
    Ok(CdrCall {
        call_id: r.get(o)?,
        caller: r.get(o + 1)?,
        called: r.get(o + 2)?,
        caller_addr: r.get(o + 3)?,
        callee_addr: r.get(o + 4)?,
        start_us: r.get(o + 5)?,
        ringing_us: r.get(o + 6)?,
        answer_us: r.get(o + 7)?,
        end_us: r.get(o + 8)?,
        state: r.get(o + 9)?,
        last_response: r.get(o + 10)?,
        last_reason: r.get(o + 11)?,
        hangup_by: r.get(o + 12)?,
        q850_cause: r.get(o + 13)?,
        sip_messages: r.get(o + 14)?,
        reinvites: r.get(o + 15)?,
        mos_min: r.get(o + 16)?,
        sip_tar: r.get(o + 17)?,
        sip_member: r.get(o + 18)?,
        sip_offset: u(19)?,
        sip_len: u(20)?,
        sip_compression: r.get(o + 21)?,
        rtp_tar: r.get(o + 22)?,
        rtp_member: r.get(o + 23)?,
        rtp_offset: u(24)?,
        rtp_len: u(25)?,
        rtp_compression: r.get(o + 26)?,
        dtmf: r.get::<_, Option<String>>(o + 27)?.unwrap_or_default(),
        fax_pages: r.get(o + 28)?,
        fax_result: r.get(o + 29)?,
        encrypted: r.get::<_, Option<bool>>(o + 30)?.unwrap_or_default(),
        t38_offered: r.get::<_, Option<bool>>(o + 31)?.unwrap_or_default(),
        sensor: r.get::<_, Option<String>>(o + 32)?.unwrap_or_default(),
        call_group: r.get::<_, Option<String>>(o + 33)?.unwrap_or_default(),
        linked_by: r.get(o + 34)?,
        link_confidence: r.get(o + 35)?,
        first_leg: None,
        caller_ua: r.get::<_, Option<String>>(o + 36)?.unwrap_or_default(),
        callee_ua: r.get::<_, Option<String>>(o + 37)?.unwrap_or_default(),
        from_domain: r.get::<_, Option<String>>(o + 38)?.unwrap_or_default(),
        to_domain: r.get::<_, Option<String>>(o + 39)?.unwrap_or_default(),
        ruri_user: r.get::<_, Option<String>>(o + 40)?.unwrap_or_default(),
        headers: fields::headers_of(r.get::<_, Option<String>>(o + 41)?.as_deref()),
    })
}

/// The columns of a stream row as inserted, `cdr_id` first.
pub(crate) const STREAM_COLUMNS: &str = "cdr_id, call_id, src, dst, ssrc, payload, start_us, end_us, packets, lost, \
     duplicates, out_of_order, min_delta_ms, mean_delta_ms, max_delta_ms, mean_jitter_ms, max_jitter_ms, \
     mos, rtcp_reports, rtcp_fraction_lost_pct, rtcp_jitter_ms, \
     rtp_tar, rtp_member, rtp_offset, rtp_len, rtp_compression";

/// `a = excluded.a, b = excluded.b, ...`: an upsert that replaces every column of `columns`
/// (SQLite and PostgreSQL share the syntax).
pub(crate) fn upsert_set(columns: &str) -> String {
    columns
        .split(',')
        .map(|c| c.trim())
        .map(|c| format!("{c} = excluded.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns of a call, in [`CdrCall`]'s order.
pub(crate) const CALL_COLUMNS: &str = "call_id, caller, called, caller_addr, callee_addr, start_us, ringing_us, answer_us, \
     end_us, state, last_response, last_reason, hangup_by, q850_cause, sip_messages, reinvites, mos_min, \
     sip_tar, sip_member, sip_offset, sip_len, sip_compression, \
     rtp_tar, rtp_member, rtp_offset, rtp_len, rtp_compression, dtmf, fax_pages, fax_result, \
     encrypted, t38_offered, sensor, call_group, linked_by, link_confidence, \
     caller_ua, callee_ua, from_domain, to_domain, ruri_user, headers";

/// Placeholders `?1, ?2, ..., ?n` (or `$1...` with `dollar`).
pub(crate) fn placeholders(n: usize, dollar: bool) -> String {
    let p = if dollar { '$' } else { '?' };
    (1..=n)
        .map(|i| format!("{p}{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The call insert of both backends: every column of the call, its search columns, its uid;
/// with `upsert`, a call stored before under the same uid is updated in place.
pub(crate) fn call_insert_sql(dollar: bool, upsert: bool) -> String {
    let cols = format!("{CALL_COLUMNS}, {}", search::DERIVED_COLUMNS);
    let n = cols.split(',').count() + 1;
    let conflict = if upsert {
        format!(" ON CONFLICT (uid) DO UPDATE SET {}", upsert_set(&cols))
    } else {
        String::new()
    };
    format!(
        "INSERT INTO cdr ({cols}, uid) VALUES ({}){conflict} RETURNING id",
        placeholders(n, dollar)
    )
}

impl rusqlite::ToSql for Arg {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Arg::Int(v) => ValueRef::Integer(*v),
            Arg::Real(v) => ValueRef::Real(*v),
            Arg::Text(v) => ValueRef::Text(v.as_bytes()),
            Arg::Blob(v) => ValueRef::Blob(v),
            Arg::Null(_) => ValueRef::Null,
        }))
    }
}

fn sqlite_val(v: rusqlite::types::ValueRef<'_>) -> Val {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Val::Null,
        ValueRef::Integer(i) => Val::Int(i),
        ValueRef::Real(f) => Val::Real(f),
        ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Val::Blob(b.to_vec()),
    }
}

impl Exec for SqliteStore {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn rows(&mut self, sql: &Sql) -> Result<Vec<Vec<Val>>, CdrError> {
        let r = (|| {
            let mut st = self.conn.prepare_cached(&sql.text)?;
            let n = st.column_count();
            let mut rows = st.query(rusqlite::params_from_iter(sql.args.iter()))?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(
                    (0..n)
                        .map(|i| r.get_ref(i).map(sqlite_val))
                        .collect::<rusqlite::Result<Vec<_>>>()?,
                );
            }
            Ok(out)
        })();
        r.map_err(|e| self.err(e))
    }

    fn update_derived(&mut self, rows: &[(i64, search::Derived)]) -> Result<(), CdrError> {
        let r = (|| {
            // A savepoint: one transaction of its own, or a part of the upgrade's.
            let tx = self.conn.savepoint()?;
            {
                let mut st = tx.prepare_cached(&format!(
                    "UPDATE cdr SET sensor = ?1, {} WHERE id = ?10",
                    search::DERIVED_COLUMNS
                        .split(", ")
                        .enumerate()
                        .map(|(i, c)| format!("{c} = ?{}", i + 2))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))?;
                for (id, d) in rows {
                    st.execute(params![
                        d.sensor,
                        d.caller_rev,
                        d.called_rev,
                        d.caller_ip,
                        d.callee_ip,
                        d.duration_ms,
                        d.codecs,
                        d.loss_max_pct,
                        d.jitter_max_ms,
                        id
                    ])?;
                }
            }
            tx.commit()
        })();
        r.map_err(|e| self.err(e))
    }

    fn walk(&mut self, sql: &Sql, want: usize, budget: usize) -> Result<Walked, CdrError> {
        let r = (|| {
            let mut st = self.conn.prepare_cached(&sql.text)?;
            let mut rows = st.query(rusqlite::params_from_iter(sql.args.iter()))?;
            let mut w = Walked::default();
            let mut read = 0;
            while let Some(r) = rows.next()? {
                read += 1;
                let key = Cursor {
                    time_us: r.get(0)?,
                    id: r.get(1)?,
                };
                if r.get::<_, i64>(2)? != 0 {
                    w.keys.push(key);
                    if w.keys.len() >= want {
                        break;
                    }
                }
                if read >= budget {
                    w.boundary = Some(key);
                    break;
                }
            }
            Ok(w)
        })();
        r.map_err(|e| self.err(e))
    }
}

impl CdrStore for SqliteStore {
    fn insert_records(&mut self, records: &[CdrRecord]) -> Result<(), CdrError> {
        let groups = &*self.groups;
        let tx = self.conn.transaction().map_err(|e| CdrError::Sqlite {
            path: self.path.clone(),
            source: e,
        })?;
        let r = (|| -> rusqlite::Result<()> {
            // The report rollups' changes, applied in this transaction: a call stored before
            // is taken away as stored, and added as it comes now.
            let mut changes = rollup::Rollup::default();
            let mut ins_call = tx.prepare_cached(&call_insert_sql(false, true))?;
            let mut del_streams = tx.prepare_cached("DELETE FROM cdr_rtp WHERE cdr_id = ?1")?;
            let mut del_t38 = tx.prepare_cached("DELETE FROM cdr_t38 WHERE cdr_id = ?1")?;
            let mut ins_t38 = tx.prepare_cached(&format!(
                "INSERT INTO cdr_t38 (cdr_id, {T38_COLUMNS}, uid) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
                 ON CONFLICT (uid) DO UPDATE SET cdr_id = excluded.cdr_id, {}",
                upsert_set(T38_COLUMNS)
            ))?;
            let mut ins_stream = tx.prepare_cached(&format!(
                "INSERT INTO cdr_rtp ({STREAM_COLUMNS}, uid) \
                 VALUES ({}) ON CONFLICT (uid) DO UPDATE SET {}",
                placeholders(STREAM_COLUMNS.split(',').count() + 1, false),
                upsert_set(STREAM_COLUMNS)
            ))?;
            let mut ins_reg = tx.prepare_cached(&registration_insert_sql(false))?;
            for rec in records {
                let mut cdr_id = None;
                if let Some(c) = &rec.call {
                    if let Some(uid) = rec.call_uid()
                        && let Some(old) = rollup::sqlite_stored(&tx, uid)?
                    {
                        changes.call(groups, &old.facts(), -1);
                    }
                    changes.call(groups, &rollup::CallFacts::of_record(c, &rec.streams), 1);
                    let id = sqlite_insert_call(&mut ins_call, c, &rec.streams, rec.call_uid())?;
                    // Stored before (the same call read again): its streams are replaced.
                    del_streams.execute([id])?;
                    del_t38.execute([id])?;
                    cdr_id = Some(id);
                }
                for (i, s) in rec.streams.iter().enumerate() {
                    sqlite_insert_stream(&mut ins_stream, cdr_id, s, rec.stream_uid(i))?;
                }
                for (i, t) in rec.t38.iter().enumerate() {
                    ins_t38.execute(params![
                        cdr_id,
                        t.src,
                        t.dst,
                        t.start_us,
                        t.end_us,
                        opt_i64(Some(t.packets)),
                        opt_i64(Some(t.bytes)),
                        opt_i64(Some(t.lost)),
                        opt_i64(Some(t.duplicates)),
                        opt_i64(Some(t.out_of_order)),
                        t.types,
                        opt_i64(Some(t.redundant)),
                        opt_i64(Some(t.fec)),
                        t.t30,
                        rec.t38_uid(i)
                    ])?;
                }
                if let Some(reg) = &rec.registration {
                    sqlite_insert_registration(&mut ins_reg, rec.call_uid(), reg)?;
                }
            }
            rollup::sqlite_apply(&tx, changes)
        })();
        let path = &self.path;
        let wrap = |source| CdrError::Sqlite {
            path: path.clone(),
            source,
        };
        r.map_err(wrap)?;
        tx.commit().map_err(wrap)
    }

    fn list(&mut self, f: &CdrFilter) -> Result<Vec<CdrCall>, CdrError> {
        let mut sql = format!("SELECT {CALL_COLUMNS} FROM cdr WHERE 1=1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(v) = f.since_us {
            args.push(v.into());
            sql += &format!(" AND start_us >= ?{}", args.len());
        }
        if let Some(v) = f.until_us {
            args.push(v.into());
            sql += &format!(" AND start_us < ?{}", args.len());
        }
        if let Some(n) = &f.number {
            args.push(format!("%{n}%").into());
            sql += &format!(" AND (caller LIKE ?{0} OR called LIKE ?{0})", args.len());
        }
        if let Some(v) = f.last_response {
            args.push((v as i64).into());
            sql += &format!(" AND last_response = ?{}", args.len());
        }
        if let Some(v) = f.mos_below {
            args.push(v.into());
            sql += &format!(" AND mos_min < ?{}", args.len());
        }
        args.push(
            (if f.limit == 0 {
                i64::MAX
            } else {
                f.limit as i64
            })
            .into(),
        );
        sql += &format!(" ORDER BY start_us DESC, id DESC LIMIT ?{}", args.len());
        let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| call_from_row(r, 0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    fn t38(&mut self, call_id: &str) -> Result<Vec<CdrT38>, CdrError> {
        let sql = format!(
            "SELECT {T38_COLUMNS} FROM cdr_t38 WHERE cdr_id = \
             (SELECT id FROM cdr WHERE call_id = ?1 ORDER BY id DESC LIMIT 1) ORDER BY start_us, id"
        );
        let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map([call_id], |r| {
                let n =
                    |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
                Ok(CdrT38 {
                    src: r.get(0)?,
                    dst: r.get(1)?,
                    start_us: r.get(2)?,
                    end_us: r.get(3)?,
                    packets: n(4)?,
                    bytes: n(5)?,
                    lost: n(6)?,
                    duplicates: n(7)?,
                    out_of_order: n(8)?,
                    types: r.get(9)?,
                    redundant: r.get::<_, Option<i64>>(10)?.unwrap_or(0).max(0) as u64,
                    fec: r.get::<_, Option<i64>>(11)?.unwrap_or(0).max(0) as u64,
                    t30: r.get::<_, Option<String>>(12)?.unwrap_or_default(),
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        drop(st);
        rows.map_err(|e| CdrError::Sqlite {
            path: self.path.clone(),
            source: e,
        })
    }

    fn show(&mut self, call_id: &str) -> Result<Option<(CdrCall, Vec<CdrStream>)>, CdrError> {
        let row: Option<(i64, CdrCall)> = self
            .conn
            .query_row(
                &format!(
                    "SELECT id, {CALL_COLUMNS} FROM cdr WHERE call_id = ?1 ORDER BY id DESC LIMIT 1"
                ),
                [call_id],
                |r| Ok((r.get(0)?, call_from_row(r, 1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((id, call)) = row else {
            return Ok(None);
        };
        let mut st = self
            .conn
            .prepare(
                "SELECT call_id, src, dst, ssrc, payload, start_us, end_us, packets, lost, duplicates, out_of_order, \
                 min_delta_ms, mean_delta_ms, max_delta_ms, mean_jitter_ms, max_jitter_ms, mos, rtcp_reports, \
                 rtcp_fraction_lost_pct, rtcp_jitter_ms FROM cdr_rtp WHERE cdr_id = ?1 ORDER BY id",
            )
            .map_err(|e| self.err(e))?;
        let streams = st
            .query_map([id], |r| {
                Ok(CdrStream {
                    call_id: r.get(0)?,
                    src: r.get(1)?,
                    dst: r.get(2)?,
                    ssrc: r.get(3)?,
                    payload: r.get(4)?,
                    start_us: r.get(5)?,
                    end_us: r.get(6)?,
                    packets: r.get::<_, i64>(7)? as u64,
                    lost: r.get(8)?,
                    duplicates: r.get::<_, i64>(9)? as u64,
                    out_of_order: r.get::<_, i64>(10)? as u64,
                    min_delta_ms: r.get(11)?,
                    mean_delta_ms: r.get(12)?,
                    max_delta_ms: r.get(13)?,
                    mean_jitter_ms: r.get(14)?,
                    max_jitter_ms: r.get(15)?,
                    mos: r.get(16)?,
                    rtcp_reports: r.get(17)?,
                    rtcp_fraction_lost_pct: r.get(18)?,
                    rtcp_jitter_ms: r.get(19)?,
                    // A call's streams are in their call's member.
                    ..CdrStream::default()
                })
            })
            .map_err(|e| self.err(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.err(e))?;
        Ok(Some((call, streams)))
    }

    fn search(&mut self, q: &CallQuery) -> Result<CallPage, CdrError> {
        search::search(self, q)
    }

    fn totals(&mut self, q: &CallQuery) -> Result<CallTotals, CdrError> {
        search::totals(self, q)
    }

    fn call_by_uid(
        &mut self,
        uid: &str,
    ) -> Result<Option<(CallSummary, Vec<CdrStream>, Vec<CdrT38>)>, CdrError> {
        search::call_by_uid(self, uid)
    }

    fn call_legs(&mut self, uid: &str) -> Result<Vec<CallSummary>, CdrError> {
        search::call_legs(self, uid)
    }

    fn registrations(
        &mut self,
        q: &RegistrationQuery,
    ) -> Result<registration::RegistrationPage, CdrError> {
        registration::registrations(self, q)
    }

    fn lone_streams(&mut self, q: &lone::StreamQuery) -> Result<lone::LoneStreamPage, CdrError> {
        lone::lone_streams(self, q)
    }

    fn lone_stream_by_uid(&mut self, uid: &str) -> Result<Option<lone::LoneStream>, CdrError> {
        lone::lone_stream_by_uid(self, uid)
    }

    fn alert_store(&mut self) -> Option<&mut dyn AlertStore> {
        Some(self)
    }

    fn replay_source(&mut self) -> Option<&mut dyn replay::ReplaySource> {
        Some(self)
    }

    fn report(&mut self, q: &ReportQuery) -> Result<Report, CdrError> {
        let range = q.range()?;
        let hours =
            rollup::sqlite_read(&self.conn, &q.group, range.0, range.1).map_err(|e| self.err(e))?;
        Ok(report::assemble(q, range, hours))
    }

    fn report_groups(&mut self) -> Result<Vec<String>, CdrError> {
        rollup::sqlite_groups(&self.conn).map_err(|e| self.err(e))
    }
}

/// The `call_group` column of a call stored under `uid`: its group, or its own uid when it
/// has none (NULL without either).
pub(crate) fn call_group_column<'a>(c: &'a CdrCall, uid: Option<&'a str>) -> Option<&'a str> {
    if c.call_group.is_empty() {
        uid
    } else {
        Some(&c.call_group)
    }
}

/// Inserts a call (with `call_insert_sql`) and its search columns; its row id.
pub(crate) fn sqlite_insert_call(
    st: &mut rusqlite::CachedStatement<'_>,
    c: &CdrCall,
    streams: &[CdrStream],
    uid: Option<&str>,
) -> rusqlite::Result<i64> {
    let d = search::derive(c, streams.iter().map(search::StreamFigures::from));
    let group = call_group_column(c, uid);
    let headers = fields::headers_text(&c.headers);
    let p: [&dyn ToSql; 51] = [
        &c.call_id,
        &c.caller,
        &c.called,
        &c.caller_addr,
        &c.callee_addr,
        &c.start_us,
        &c.ringing_us,
        &c.answer_us,
        &c.end_us,
        &c.state,
        &c.last_response,
        &c.last_reason,
        &c.hangup_by,
        &c.q850_cause,
        &c.sip_messages,
        &c.reinvites,
        &c.mos_min,
        &c.sip_tar,
        &c.sip_member,
        &opt_i64(c.sip_offset),
        &opt_i64(c.sip_len),
        &c.sip_compression,
        &c.rtp_tar,
        &c.rtp_member,
        &opt_i64(c.rtp_offset),
        &opt_i64(c.rtp_len),
        &c.rtp_compression,
        &c.dtmf,
        &c.fax_pages,
        &c.fax_result,
        &c.encrypted,
        &c.t38_offered,
        &d.sensor,
        &group,
        &c.linked_by,
        &c.link_confidence,
        &c.caller_ua,
        &c.callee_ua,
        &c.from_domain,
        &c.to_domain,
        &c.ruri_user,
        &headers,
        &d.caller_rev,
        &d.called_rev,
        &d.caller_ip,
        &d.callee_ip,
        &d.duration_ms,
        &d.codecs,
        &d.loss_max_pct,
        &d.jitter_max_ms,
        &uid,
    ];
    st.query_row(&p[..], |r| r.get(0))
}

/// Inserts a stream row.
pub(crate) fn sqlite_insert_stream(
    st: &mut rusqlite::CachedStatement<'_>,
    cdr_id: Option<i64>,
    s: &CdrStream,
    uid: Option<String>,
) -> rusqlite::Result<usize> {
    st.execute(params![
        cdr_id,
        s.call_id,
        s.src,
        s.dst,
        s.ssrc,
        s.payload,
        s.start_us,
        s.end_us,
        s.packets as i64,
        s.lost,
        s.duplicates as i64,
        s.out_of_order as i64,
        s.min_delta_ms,
        s.mean_delta_ms,
        s.max_delta_ms,
        s.mean_jitter_ms,
        s.max_jitter_ms,
        s.mos,
        s.rtcp_reports,
        s.rtcp_fraction_lost_pct,
        s.rtcp_jitter_ms,
        s.rtp_tar,
        s.rtp_member,
        opt_i64(s.rtp_offset),
        opt_i64(s.rtp_len),
        s.rtp_compression,
        uid
    ])
}

/// The registration upsert of both backends (uid, [`registration::REG_COLUMNS`], `src_ip`,
/// `dst_ip`).
pub(crate) fn registration_insert_sql(dollar: bool) -> String {
    let cols = format!("{}, src_ip, dst_ip", registration::REG_COLUMNS);
    format!(
        "INSERT INTO registration (uid, {cols}) VALUES ({}) ON CONFLICT (uid) DO UPDATE SET {}",
        placeholders(cols.split(',').count() + 1, dollar),
        upsert_set(&cols)
    )
}

pub(crate) fn sqlite_insert_registration(
    st: &mut rusqlite::CachedStatement<'_>,
    uid: Option<&str>,
    r: &CdrRegistration,
) -> rusqlite::Result<usize> {
    let uid = uid.map_or(Arg::Null(Ty::Text), |u| Arg::Text(u.to_string()));
    let args: Vec<Arg> = std::iter::once(uid)
        .chain(registration::reg_args(r))
        .collect();
    st.execute(rusqlite::params_from_iter(args.iter()))
}
