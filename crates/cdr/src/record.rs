//! [`CdrRecord`]: the unit the writer queues, journals and stores.

use std::collections::HashMap;

use crate::{CdrCall, CdrStream};

/// A call with its RTP streams, or one stream seen without signalling (`call` is `None`).
///
/// `uid` identifies the record for as long as it exists: the call row is stored with it, and
/// stream `i` with `{uid}/{i}`, under UNIQUE indexes, so that storing a record again (a journal
/// replayed after a crash that came between the insert and the journal's truncation) adds
/// nothing. [`crate::CdrWriter::submit`] gives a record without one a new uid; an empty uid is
/// stored as NULL and never recognised.
///
/// Serialized whole (serde) into the journal, so fields added to [`CdrCall`] or [`CdrStream`]
/// flow through it unchanged.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CdrRecord {
    pub uid: String,
    pub call: Option<CdrCall>,
    pub streams: Vec<CdrStream>,
}

impl CdrRecord {
    /// A call and its streams, without a uid yet.
    pub fn call(call: CdrCall, streams: Vec<CdrStream>) -> CdrRecord {
        CdrRecord {
            uid: String::new(),
            call: Some(call),
            streams,
        }
    }

    /// A stream without signalling, without a uid yet.
    pub fn lone_stream(stream: CdrStream) -> CdrRecord {
        CdrRecord {
            uid: String::new(),
            call: None,
            streams: vec![stream],
        }
    }

    /// The `uid` column of the call row (NULL without a uid).
    pub fn call_uid(&self) -> Option<&str> {
        (!self.uid.is_empty()).then_some(self.uid.as_str())
    }

    /// The `uid` column of stream `i`'s row.
    pub fn stream_uid(&self, i: usize) -> Option<String> {
        (!self.uid.is_empty()).then(|| format!("{}/{i}", self.uid))
    }
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
