//! [`CdrRecord`]: the unit the writer queues, journals and stores.

use std::collections::HashMap;

use crate::{CdrCall, CdrRegistration, CdrStream, CdrT38};

/// A call with its RTP streams, one stream seen without signalling (`call` is `None`), or a
/// REGISTER chain (`registration`).
///
/// `uid` is the record's identity, stable across runs: [`CdrRecord::identity`], from the sensor,
/// the Call-ID and the start time (for a stream without signalling: its addresses, SSRC and
/// start). The call row is stored under it with a UNIQUE index, and storing a record again
/// updates that row in place and replaces its streams (stream `i` stored as `{uid}/{i}`):
/// reading the same capture twice, or replaying a journal after a crash that came between the
/// insert and the journal's truncation, leaves one row per call. [`crate::CdrWriter::submit`]
/// gives a record without one its identity; an empty uid is stored as NULL and never recognised.
///
/// Serialized whole (serde) into the journal, so fields added to [`CdrCall`] or [`CdrStream`]
/// flow through it unchanged.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CdrRecord {
    pub uid: String,
    pub call: Option<CdrCall>,
    pub streams: Vec<CdrStream>,
    /// The call's T.38 (fax) flows, stored in `cdr_t38` (`{uid}/t38/{i}`).
    pub t38: Vec<CdrT38>,
    /// A REGISTER chain, stored in table `registration` under `uid`. `serde(default)`: journals
    /// written before registrations were stored still read.
    pub registration: Option<CdrRegistration>,
}

impl CdrRecord {
    /// A call and its streams, without a uid yet.
    pub fn call(call: CdrCall, streams: Vec<CdrStream>) -> CdrRecord {
        CdrRecord {
            uid: String::new(),
            call: Some(call),
            streams,
            ..CdrRecord::default()
        }
    }

    /// A stream without signalling, without a uid yet.
    pub fn lone_stream(stream: CdrStream) -> CdrRecord {
        CdrRecord {
            streams: vec![stream],
            ..CdrRecord::default()
        }
    }

    /// A REGISTER chain, without a uid yet.
    pub fn registration(registration: CdrRegistration) -> CdrRecord {
        CdrRecord {
            registration: Some(registration),
            ..CdrRecord::default()
        }
    }

    /// The record's stable identity as sensor `sensor` saw it: `sensor|Call-ID|start_us` for a
    /// call, `sensor|rtp|src|dst|ssrc|start_us` for a stream without signalling,
    /// `sensor|reg|Call-ID|first_us` for a REGISTER chain. `|` cannot occur in a Call-ID's
    /// token characters (RFC 3261 `word`), so the parts cannot run together.
    pub fn identity(&self, sensor: &str) -> String {
        match (&self.call, &self.registration, self.streams.first()) {
            (Some(c), _, _) => call_uid(sensor, &c.call_id, c.start_us),
            (None, Some(r), _) => format!("{sensor}|reg|{}|{}", r.call_id, r.first_us),
            (None, None, Some(s)) => {
                format!("{sensor}|rtp|{}|{}|{}|{}", s.src, s.dst, s.ssrc, s.start_us)
            }
            (None, None, None) => String::new(),
        }
    }

    /// The call's group as sensor `sensor` names it: the uid of its first leg
    /// ([`CdrCall::first_leg`]) when it was linked, else its own. `None` for a record that is
    /// no call.
    pub fn group_identity(&self, sensor: &str) -> Option<String> {
        let c = self.call.as_ref()?;
        Some(match &c.first_leg {
            Some(f) => call_uid(sensor, &f.call_id, f.start_us),
            None if self.uid.is_empty() => self.identity(sensor),
            None => self.uid.clone(),
        })
    }

    /// Gives a record its identity under `sensor` where it lacks it: the uid
    /// ([`CdrRecord::identity`]) and a call's `call_group` ([`CdrRecord::group_identity`]).
    pub fn fill_identity(&mut self, sensor: &str) {
        if self.uid.is_empty() {
            self.uid = self.identity(sensor);
        }
        if self.call.as_ref().is_some_and(|c| c.call_group.is_empty()) {
            let group = self.group_identity(sensor).unwrap_or_default();
            if let Some(c) = self.call.as_mut() {
                c.call_group = group;
            }
        }
    }

    /// The `uid` column of the call row (NULL without a uid).
    pub fn call_uid(&self) -> Option<&str> {
        (!self.uid.is_empty()).then_some(self.uid.as_str())
    }

    /// The `uid` column of T.38 flow `i`'s row.
    pub fn t38_uid(&self, i: usize) -> Option<String> {
        (!self.uid.is_empty()).then(|| format!("{}/t38/{i}", self.uid))
    }

    /// The `uid` column of stream `i`'s row.
    pub fn stream_uid(&self, i: usize) -> Option<String> {
        (!self.uid.is_empty()).then(|| format!("{}/{i}", self.uid))
    }
}

/// The uid of a call that sensor `sensor` saw with `call_id` starting at `start_us`: what
/// [`CdrRecord::identity`] gives its record, and what its linked legs carry as `call_group`.
pub fn call_uid(sensor: &str, call_id: &str, start_us: i64) -> String {
    format!("{sensor}|{call_id}|{start_us}")
}

/// Groups plain rows into records: each stream goes with the last call of the same Call-ID in
/// `calls`, the others stand alone. Used by [`crate::CdrStore::insert`].
pub(crate) fn records_of(calls: &[CdrCall], streams: &[CdrStream]) -> Vec<CdrRecord> {
    let mut out: Vec<CdrRecord> = calls
        .iter()
        .map(|c| CdrRecord::call(c.clone(), Vec::new()))
        .collect();
    let by_call_id: HashMap<&str, usize> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.call_id.as_str(), i))
        .collect();
    for s in streams {
        match s.call_id.as_deref().and_then(|id| by_call_id.get(id)) {
            Some(&i) => out[i].streams.push(s.clone()),
            None => out.push(CdrRecord::lone_stream(s.clone())),
        }
    }
    out
}
