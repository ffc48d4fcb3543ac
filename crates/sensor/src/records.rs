//! A closed call and its streams, and a closed REGISTER chain, as CDR rows; and the CDR database
//! they go to.

use std::path::Path;

use cdr::{CdrCall, CdrRegistration, CdrStore, CdrStream, SqliteStore};
use monitor::dialog::Registration;
use monitor::{CallRecord, StreamRecord};

use crate::SensorError;

/// Capture time in ns to the µs of CDR rows.
pub(crate) fn us(ns: i64) -> i64 {
    ns.div_euclid(1000)
}

/// The CDR row of a call.
pub fn cdr_call(c: &CallRecord) -> CdrCall {
    let d = &c.dialog;
    let fax = c.fax();
    CdrCall {
        call_id: d.call_id.to_string(),
        caller: d.caller.to_string(),
        called: d.called.to_string(),
        caller_addr: d.caller_addr.to_string(),
        callee_addr: d.callee_addr.to_string(),
        start_us: us(d.invite_ns),
        ringing_us: d.ringing_ns.map(us),
        answer_us: d.answer_ns.map(us),
        end_us: d.end_ns.map(us),
        state: d.state.as_str().to_string(),
        last_response: (d.last_code != 0).then_some(d.last_code),
        last_reason: d.last_reason.to_string(),
        hangup_by: d.hangup_by.map(|p| p.as_str().to_string()),
        q850_cause: d.q850_cause,
        sip_messages: d.sip_messages,
        reinvites: d.reinvites as u32,
        mos_min: c
            .streams
            .iter()
            .filter_map(|s| s.stream.mos())
            .min_by(|a, b| a.total_cmp(b)),
        dtmf: c.digits(),
        fax_pages: fax.and_then(|f| f.pages),
        fax_result: fax.and_then(|f| f.result).map(|r| r.as_str().to_string()),
        encrypted: c.is_encrypted(),
        t38_offered: c.dialog.t38_offered(),
        // `call_group` is made from the first leg under the sensor's name when the record gets
        // its identity (`CdrRecord::fill_identity`); a leg alone gets its own uid.
        first_leg: d.link.as_ref().map(|l| cdr::FirstLeg {
            call_id: l.group.call_id.to_string(),
            start_us: us(l.group.start_ns),
        }),
        linked_by: d.link.as_ref().map(|l| l.rule.to_string()),
        link_confidence: d.link.as_ref().map(|l| link_confidence(l.confidence)),
        caller_ua: d.fields.caller_ua.to_string(),
        callee_ua: d.fields.callee_ua.to_string(),
        from_domain: d.fields.from_domain.to_string(),
        to_domain: d.fields.to_domain.to_string(),
        ruri_user: d.fields.ruri_user.to_string(),
        headers: d
            .fields
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        ..CdrCall::default()
    }
}

/// A link's confidence as stored: two decimals (the rule's figures are products of a few
/// factors; more digits would say more than they know).
pub fn link_confidence(c: f32) -> f64 {
    (f64::from(c) * 100.0).round() / 100.0
}

/// The CDR row of a stream.
pub fn cdr_stream(s: &StreamRecord) -> CdrStream {
    let st = &s.stream;
    let w = &st.wireshark;
    CdrStream {
        call_id: s.call_id.as_deref().map(str::to_string),
        src: st.key.src.to_string(),
        dst: st.key.dst.to_string(),
        ssrc: st.key.ssrc,
        payload: st.payload_names(),
        start_us: us(st.first_ns),
        end_us: us(st.last_ns),
        packets: st.packets,
        lost: w.lost(),
        duplicates: st.sequence.duplicates,
        out_of_order: st.sequence.out_of_order,
        min_delta_ms: w.min_delta_ms,
        mean_delta_ms: w.mean_delta_ms,
        max_delta_ms: w.max_delta_ms,
        mean_jitter_ms: w.mean_jitter_ms,
        max_jitter_ms: w.max_jitter_ms,
        mos: st.mos(),
        rtcp_reports: st.rtcp.map(|r| r.reports).unwrap_or(0),
        rtcp_fraction_lost_pct: st.rtcp.map(|r| r.fraction_lost_pct),
        rtcp_jitter_ms: st.rtcp.map(|r| r.jitter_ms),
        // Where a stream without a call is archived: filled by the archive sink.
        ..CdrStream::default()
    }
}

/// The row of a REGISTER chain.
pub fn cdr_registration(r: &Registration) -> CdrRegistration {
    CdrRegistration {
        call_id: r.call_id.to_string(),
        user: r.user.to_string(),
        domain: r.domain.to_string(),
        contact: r.contact.to_string(),
        user_agent: r.user_agent.to_string(),
        src: r.src.to_string(),
        dst: r.dst.to_string(),
        first_us: us(r.first_ns),
        last_us: us(r.last_ns),
        requests: r.requests,
        last_code: (r.last_code != 0).then_some(r.last_code),
        result: r.outcome().to_string(),
        expires_s: r.expires_s,
        // The writer fills in its sensor.
        sensor: String::new(),
        challenges: r.challenges,
        failure: r.failure().map_or("", |f| f.as_str()).to_string(),
        failure_reason: r.failure_reason(),
        registered_us: r.registered_ns.map(us),
    }
}

/// The CDR row of a T.38 flow.
pub fn cdr_t38(r: &monitor::T38Record) -> cdr::CdrT38 {
    let f = &r.flow;
    cdr::CdrT38 {
        src: f.src.to_string(),
        dst: f.dst.to_string(),
        start_us: us(f.first_ns),
        end_us: us(f.last_ns),
        packets: f.packets,
        bytes: f.bytes,
        lost: f.lost,
        duplicates: f.duplicates,
        out_of_order: f.out_of_order,
        types: f
            .types
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(","),
        redundant: f.redundant,
        fec: f.fec,
        t30: f
            .t30
            .iter()
            .map(|t| monitor::t38::fcf::label(t.fcf))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The CDR store: PostgreSQL when a connection string is given, else the SQLite file (its
/// directory is created).
pub fn open_store(path: &Path, postgres: Option<&str>) -> Result<Box<dyn CdrStore>, SensorError> {
    if let Some(conninfo) = postgres {
        return Ok(Box::new(cdr::PgStore::connect(conninfo)?));
    }
    create_parent(path, &filemode::Access::Private)?;
    Ok(Box::new(SqliteStore::open(path)?))
}

/// Creates the directories a file goes in that are missing, with `access`'s mode and group
/// (those that exist are left as they are).
pub(crate) fn create_parent(path: &Path, access: &filemode::Access) -> Result<(), SensorError> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        filemode::create_dir_all(dir, access).map_err(|source| SensorError::CreateDir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    Ok(())
}
