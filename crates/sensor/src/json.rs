//! The records as JSON lines (`tandem capture --json`): one object per call
//! (`"kind":"call"`), per RTP stream (`"kind":"rtp_stream"`) and per REGISTER chain
//! (`"kind":"registration"`). The keys are an interface: scripts read them.

use std::io::Write;

use monitor::{Analysis, CallRecord, StreamRecord, T38Record};
use serde_json::json;
use utc::format_us;

use crate::records::us;

/// Writes every record of each batch as JSON lines to `out`.
pub struct JsonLines<W: Write + Send> {
    out: W,
    /// The sensor's name, the first part of each call's `uid` and `call_group`.
    sensor: String,
}

impl<W: Write + Send> JsonLines<W> {
    /// Under the default sensor name ([`cdr::writer::DEFAULT_SENSOR`]).
    pub fn new(out: W) -> Self {
        Self::with_sensor(out, cdr::writer::DEFAULT_SENSOR)
    }

    /// Names each call's `uid` and `call_group` as sensor `sensor` stores them.
    pub fn with_sensor(out: W, sensor: &str) -> Self {
        JsonLines {
            out,
            sensor: sensor.to_string(),
        }
    }
}

impl<W: Write + Send> crate::RecordObserver for JsonLines<W> {
    fn records(&mut self, part: &Analysis) -> std::io::Result<()> {
        write_json_as(part, &self.sensor, &mut self.out)
    }

    /// One line per alert (`"kind":"alert"`, [`alerts::Alert::json_line`]).
    fn alerts(&mut self, alerts: &[alerts::Alert]) -> std::io::Result<()> {
        for a in alerts {
            writeln!(self.out, "{}", a.json_line())?;
        }
        self.out.flush()
    }
}

fn opt_time(ns: Option<i64>) -> serde_json::Value {
    ns.map(|n| json!(format_us(us(n))))
        .unwrap_or(serde_json::Value::Null)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

pub fn stream_json(s: &StreamRecord) -> serde_json::Value {
    let st = &s.stream;
    let w = &st.wireshark;
    json!({
        "kind": "rtp_stream",
        "call_id": s.call_id.as_deref(),
        "src": st.key.src.to_string(),
        "dst": st.key.dst.to_string(),
        "ssrc": format!("0x{:08X}", st.key.ssrc),
        "media": st.media.as_str(),
        "encrypted": st.encrypted,
        "payload": st.payload_names(),
        "payload_types": &st.payload_types,
        "comfort_noise": st.has_comfort_noise(),
        "payload_types": st.payload_types,
        "start": format_us(us(st.first_ns)),
        "end": format_us(us(st.last_ns)),
        "packets": st.packets,
        "lost": w.lost(),
        "duplicates": st.sequence.duplicates,
        "out_of_order": st.sequence.out_of_order,
        "min_delta_ms": round3(w.min_delta_ms),
        "mean_delta_ms": round3(w.mean_delta_ms),
        "max_delta_ms": round3(w.max_delta_ms),
        "min_jitter_ms": round3(w.min_jitter_ms),
        "mean_jitter_ms": round3(w.mean_jitter_ms),
        "max_jitter_ms": round3(w.max_jitter_ms),
        "mos": st.mos().map(|m| (m * 100.0).round() / 100.0),
        "rtcp": st.rtcp.map(|r| json!({
            "reports": r.reports,
            "fraction_lost_pct": round3(r.fraction_lost_pct),
            "cumulative_lost": r.cumulative_lost,
            "jitter_ms": round3(r.jitter_ms),
        })),
    })
}

/// A T.38 (UDPTL) flow: `kind: "t38_stream"`.
pub fn t38_json(t: &T38Record) -> serde_json::Value {
    let f = &t.flow;
    json!({
        "kind": "t38_stream",
        "call_id": t.call_id.as_deref(),
        "src": f.src.to_string(),
        "dst": f.dst.to_string(),
        "start": format_us(us(f.first_ns)),
        "end": format_us(us(f.last_ns)),
        "duration_ms": f.duration_ns() / 1_000_000,
        "packets": f.packets,
        "bytes": f.bytes,
        "lost": f.lost,
        "duplicates": f.duplicates,
        "out_of_order": f.out_of_order,
        "first_seq": f.first_seq,
        "last_seq": f.highest_seq(),
        "types": f.types.iter().map(|t| t.name()).collect::<Vec<_>>(),
        "redundant": f.redundant,
        "fec": f.fec,
        "t30": f.t30.iter().map(|t| monitor::t38::fcf::label(t.fcf)).collect::<Vec<_>>(),
    })
}

/// The call's keypad digits (RFC 4733 events and SIP INFO alike), in time order.
fn dtmf_json(c: &CallRecord) -> serde_json::Value {
    c.dtmf()
        .iter()
        .map(|e| {
            json!({
                "digit": e.digit,
                "start": format_us(us(e.start_ns)),
                "duration_ms": e.duration_ms.map(round3),
                "volume": e.volume,
                "src": e.src.to_string(),
                "dst": e.dst.to_string(),
                "via": e.via.as_str(),
                "ended": e.ended,
            })
        })
        .collect()
}

/// The fax of a call as a whole; `null` for a call without T.38.
fn fax_json(c: &CallRecord) -> serde_json::Value {
    let Some(f) = c.fax() else {
        return serde_json::Value::Null;
    };
    json!({
        "start": format_us(us(f.start_ns)),
        "modulation": f.modulation.map(|m| m.name()),
        "pages": f.pages,
        "result": f.result.map(|r| r.as_str()),
    })
}

/// A call: `kind: "call"`, with its `uid` and `call_group` under sensor `sensor`.
pub fn call_json(c: &CallRecord, sensor: &str) -> serde_json::Value {
    let d = &c.dialog;
    let mut v = call_core_json(c, sensor);
    let f = &d.fields;
    let headers: serde_json::Map<String, serde_json::Value> = f
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), json!(&**v)))
        .collect();
    let extra = [
        ("caller_ua", json!(&*f.caller_ua)),
        ("callee_ua", json!(&*f.callee_ua)),
        ("from_domain", json!(&*f.from_domain)),
        ("to_domain", json!(&*f.to_domain)),
        ("ruri_user", json!(&*f.ruri_user)),
        ("headers", serde_json::Value::Object(headers)),
    ];
    if let Some(o) = v.as_object_mut() {
        o.extend(extra.into_iter().map(|(k, v)| (k.to_string(), v)));
    }
    v
}

/// The call's keys before its signalling fields.
fn call_core_json(c: &CallRecord, sensor: &str) -> serde_json::Value {
    let d = &c.dialog;
    let uid = cdr::call_uid(sensor, &d.call_id, us(d.invite_ns));
    let link = d.link.as_ref();
    json!({
        "kind": "call",
        "uid": &uid,
        "call_group": match link {
            Some(l) => cdr::call_uid(sensor, &l.group.call_id, us(l.group.start_ns)),
            None => uid.clone(),
        },
        "linked_by": link.map(|l| l.rule.to_string()),
        "link_confidence": link.map(|l| crate::records::link_confidence(l.confidence)),
        "call_id": &*d.call_id,
        "caller": &*d.caller,
        "called": &*d.called,
        "caller_addr": d.caller_addr.to_string(),
        "callee_addr": d.callee_addr.to_string(),
        "start": format_us(us(d.invite_ns)),
        "ringing": opt_time(d.ringing_ns),
        "answer": opt_time(d.answer_ns),
        "end": opt_time(d.end_ns),
        "state": d.state.as_str(),
        "last_response": (d.last_code != 0).then_some(d.last_code),
        "last_reason": &*d.last_reason,
        "hangup_by": d.hangup_by.map(|p| p.as_str()),
        "q850_cause": d.q850_cause,
        "sip_messages": d.sip_messages,
        "reinvites": d.reinvites,
        "fax": c.is_fax(),
        "t38_offered": c.dialog.t38_offered(),
        "fax_session": fax_json(c),
        "dtmf": dtmf_json(c),
        "encrypted": c.is_encrypted(),
        "video": c.streams.iter().any(|s| s.stream.media == monitor::rtp::Media::Video),
        "streams": c.streams.iter().map(|s| json!({
            "src": s.stream.key.src.to_string(),
            "dst": s.stream.key.dst.to_string(),
            "ssrc": format!("0x{:08X}", s.stream.key.ssrc),
        })).collect::<Vec<_>>(),
    })
}

/// Writes `a`'s calls (each followed by its streams), its lone streams and its registrations,
/// under the default sensor name.
pub fn write_json(a: &Analysis, out: &mut dyn Write) -> std::io::Result<()> {
    write_json_as(a, cdr::writer::DEFAULT_SENSOR, out)
}

/// [`write_json`] under sensor `sensor`.
pub fn write_json_as(a: &Analysis, sensor: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(out);
    for c in &a.calls {
        serde_json::to_writer(&mut out, &call_json(c, sensor))?;
        writeln!(out)?;
        for s in &c.streams {
            serde_json::to_writer(&mut out, &stream_json(s))?;
            writeln!(out)?;
        }
        for t in &c.t38 {
            serde_json::to_writer(&mut out, &t38_json(t))?;
            writeln!(out)?;
        }
    }
    for s in &a.streams {
        serde_json::to_writer(&mut out, &stream_json(s))?;
        writeln!(out)?;
    }
    for t in &a.t38 {
        serde_json::to_writer(&mut out, &t38_json(t))?;
        writeln!(out)?;
    }
    for r in &a.registrations {
        let v = json!({
            "kind": "registration",
            "call_id": &*r.call_id,
            "user": &*r.user,
            "domain": &*r.domain,
            "contact": &*r.contact,
            "user_agent": &*r.user_agent,
            "expires_s": r.expires_s,
            "src": r.src.to_string(),
            "dst": r.dst.to_string(),
            "start": format_us(us(r.first_ns)),
            "end": format_us(us(r.last_ns)),
            "requests": r.requests,
            "challenges": r.challenges,
            "last_response": (r.last_code != 0).then_some(r.last_code),
            "outcome": r.outcome(),
            "failure": r.failure().map(|f| f.as_str()),
            "failure_reason": r.failure().map(|_| r.failure_reason()),
        });
        serde_json::to_writer(&mut out, &v)?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}
