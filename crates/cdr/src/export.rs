//! Every row of a search, page after page along its keyset, for exports (`GET /api/calls?
//! format=csv`, `tandem cdr list --csv`): [`each_call`] and [`each_registration`] hand each
//! row to a closure as its page is read, so that a search of millions of calls is exported
//! holding one page ([`crate::query::LIMIT_MAX`] rows) at a time. The rows are the JSON API's
//! (the same search, the same order), and the exported columns are fixed here
//! ([`CALL_EXPORT_COLUMNS`], [`REGISTRATION_EXPORT_COLUMNS`]): names are an interface, new
//! columns go at the end.

use crate::query::{Cursor, LIMIT_MAX};
use crate::registration::{RegistrationQuery, RegistrationRow};
use crate::search::{CallQuery, CallSummary};
use crate::{CdrError, CdrStore};

/// The columns of a call in an export, in order. Those of the JSON API's rows
/// ([`CallSummary`]) except where its packets are archived (`sip_tar`, `rtp_offset`...: the
/// console's pcap download reads them), and `start` (the start as ISO 8601 UTC text, for a
/// person's spreadsheet) beside `start_us`.
pub const CALL_EXPORT_COLUMNS: &[&str] = &[
    "uid",
    "id",
    "start",
    "call_id",
    "caller",
    "called",
    "caller_addr",
    "callee_addr",
    "start_us",
    "ringing_us",
    "answer_us",
    "end_us",
    "duration_s",
    "state",
    "last_response",
    "last_reason",
    "hangup_by",
    "q850_cause",
    "sip_messages",
    "reinvites",
    "mos_min",
    "loss_pct_max",
    "jitter_max_ms",
    "codec",
    "dtmf",
    "fax",
    "fax_pages",
    "fax_result",
    "encrypted",
    "t38_offered",
    "sensor",
    "call_group",
    "linked_by",
    "link_confidence",
    "caller_ua",
    "callee_ua",
    "from_domain",
    "to_domain",
    "ruri_user",
    "headers",
];

/// The columns of a registration in an export, in order: the JSON API's, and `last` (the last
/// message as ISO 8601 UTC text).
pub const REGISTRATION_EXPORT_COLUMNS: &[&str] = &[
    "uid",
    "last",
    "call_id",
    "user",
    "domain",
    "contact",
    "user_agent",
    "src",
    "dst",
    "first_us",
    "last_us",
    "requests",
    "last_code",
    "result",
    "expires_s",
    "sensor",
    "challenges",
    "failure",
    "failure_reason",
    "registered_us",
];

/// A call as exported: the JSON API's row and its start as text.
#[derive(Debug, serde::Serialize)]
pub struct CallExportRow<'a> {
    #[serde(flatten)]
    pub call: &'a CallSummary,
    pub start: String,
}

impl<'a> From<&'a CallSummary> for CallExportRow<'a> {
    fn from(call: &'a CallSummary) -> Self {
        CallExportRow {
            start: utc::format_us(call.call.start_us),
            call,
        }
    }
}

/// A registration as exported.
#[derive(Debug, serde::Serialize)]
pub struct RegistrationExportRow<'a> {
    #[serde(flatten)]
    pub registration: &'a RegistrationRow,
    pub last: String,
}

impl<'a> From<&'a RegistrationRow> for RegistrationExportRow<'a> {
    fn from(registration: &'a RegistrationRow) -> Self {
        RegistrationExportRow {
            last: utc::format_us(registration.registration.last_us),
            registration,
        }
    }
}

/// How an export ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exported {
    pub rows: u64,
    /// It stopped at `rows_max` with more rows to come.
    pub cut: bool,
}

/// Hands every call `q` matches to `row`, newest first, from `q.after` on, at most
/// `rows_max`; `row` returns an error to stop (a client gone). `q.limit` is ignored: pages are
/// read [`LIMIT_MAX`] at a time.
pub fn each_call<E: From<CdrError>>(
    store: &mut dyn CdrStore,
    q: &CallQuery,
    rows_max: u64,
    row: impl FnMut(&CallSummary) -> Result<(), E>,
) -> Result<Exported, E> {
    let mut q = q.clone();
    q.limit = LIMIT_MAX;
    let from = q.after;
    let page = |after| {
        q.after = after;
        let p = store.search(&q)?;
        Ok((p.calls, p.next))
    };
    each(page, from, rows_max, row)
}

/// [`each_call`] for registrations.
pub fn each_registration<E: From<CdrError>>(
    store: &mut dyn CdrStore,
    q: &RegistrationQuery,
    rows_max: u64,
    row: impl FnMut(&RegistrationRow) -> Result<(), E>,
) -> Result<Exported, E> {
    let mut q = q.clone();
    q.limit = LIMIT_MAX;
    let from = q.after;
    let page = |after| {
        q.after = after;
        let p = store.registrations(&q)?;
        Ok((p.registrations, p.next))
    };
    each(page, from, rows_max, row)
}

/// The pages of `page` from `after` on, each row to `row`, at most `rows_max` rows.
fn each<R, E: From<CdrError>>(
    mut page: impl FnMut(Option<Cursor>) -> Result<(Vec<R>, Option<String>), CdrError>,
    mut after: Option<Cursor>,
    rows_max: u64,
    mut row: impl FnMut(&R) -> Result<(), E>,
) -> Result<Exported, E> {
    let mut done = Exported::default();
    loop {
        let (rows, next) = page(after)?;
        for r in &rows {
            if done.rows == rows_max {
                done.cut = true;
                return Ok(done);
            }
            row(r)?;
            done.rows += 1;
        }
        match next {
            Some(next) => after = Some(cursor(&next)?),
            None => return Ok(done),
        }
    }
}

/// A page's `next` read back (the store wrote it).
fn cursor(next: &str) -> Result<Cursor, CdrError> {
    Cursor::parse("after", next).map_err(|e| CdrError::Data {
        problem: format!("a page's next cursor did not read back: {e}"),
    })
}
