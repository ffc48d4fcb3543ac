//! A call across its legs: the phone's dialog to the PBX and the PBX's to the trunk (and any
//! more a transfer or a fork made), linked by the capture into one call (`call_group`). A leg's
//! page shows them all as one: every leg's row, one ladder over the legs' pcaps read together
//! in capture order (a column per address across the legs, as sngrep shows B legs), every
//! leg's streams each naming its leg, and which leg had the worst loss and jitter.
//!
//! Its pcap, its audio and its download are of the whole call, so that a stream's number on
//! the page is the one its audio is asked for by. A leg alone (or a row stored before legs
//! were linked) is its own call, read as before.

use std::sync::Arc;

use serde::Serialize;

use super::api::ApiError;
use crate::calls::{Calls, CallsError};

/// One leg with its streams.
pub(super) struct Leg {
    pub summary: cdr::search::CallSummary,
    pub streams: Vec<cdr::CdrStream>,
}

/// Every leg of the call `summary` belongs to, in start order, with their streams; just the
/// call itself when it has no other leg. Legs are read at most `cdr::search::CALL_LEGS_MAX`.
pub(super) async fn legs_of(
    calls: &Arc<Calls>,
    summary: &cdr::search::CallSummary,
    streams: &[cdr::CdrStream],
) -> Result<Vec<Leg>, ApiError> {
    let key = summary.uid.clone();
    let group = calls.read(move |s| s.call_legs(&key)).await?;
    let mut legs = Vec::with_capacity(group.len().max(1));
    for other in group {
        if other.uid == summary.uid {
            legs.push(Leg {
                summary: summary.clone(),
                streams: streams.to_vec(),
            });
            continue;
        }
        let key = other.uid.clone();
        let streams = match calls.read(move |s| s.call_by_uid(&key)).await? {
            Some((_, streams, _)) => streams,
            None => Vec::new(),
        };
        legs.push(Leg {
            summary: other,
            streams,
        });
    }
    if !legs.iter().any(|l| l.summary.uid == summary.uid) {
        legs.push(Leg {
            summary: summary.clone(),
            streams: streams.to_vec(),
        });
    }
    Ok(legs)
}

fn archived(c: &cdr::CdrCall) -> bool {
    c.sip_tar.is_some() || c.rtp_tar.is_some()
}

/// The packets of the call: the one leg's pcap, or every archived leg's read together in
/// capture order. `Err(why)` when none can be fetched or read.
pub(super) async fn pcap_of(calls: &Arc<Calls>, legs: &[Leg]) -> Result<Arc<Vec<u8>>, String> {
    let archived: Vec<&Leg> = legs.iter().filter(|l| archived(&l.summary.call)).collect();
    if let [one] = archived.as_slice() {
        return calls
            .pcap(&one.summary.uid, one.summary.call.clone())
            .await
            .map_err(|e| e.to_string());
    }
    let mut parts = Vec::with_capacity(archived.len());
    for leg in &archived {
        let pcap = calls
            .pcap(&leg.summary.uid, leg.summary.call.clone())
            .await
            .map_err(|e: CallsError| format!("leg {}: {e}", leg.summary.call.call_id))?;
        parts.push((format!("leg {:?}", leg.summary.call.call_id), pcap));
    }
    if parts.is_empty() {
        return Err("no leg of this call was archived".into());
    }
    let first = legs.first().map_or("", |l| l.summary.call.call_id.as_str());
    let id = format!("call {first:?}");
    tokio::task::spawn_blocking(move || {
        let named: Vec<(String, &[u8])> = parts
            .iter()
            .map(|(n, p)| (n.clone(), p.as_slice()))
            .collect();
        sensor::call_pcap::merge(&id, &named).map(Arc::new)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

/// How one leg sounded: its streams' worst figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct LegQuality {
    pub uid: String,
    pub call_id: String,
    pub streams: usize,
    pub loss_pct_max: Option<f64>,
    pub jitter_max_ms: Option<f64>,
    pub mos_min: Option<f64>,
}

/// Each leg's worst figures (the CDR's own, kept as the call was written), and the leg with
/// the most loss (then the most jitter) when any leg lost packets or jittered at all: where
/// the trouble was.
pub(super) fn quality(legs: &[Leg]) -> (Vec<LegQuality>, Option<String>) {
    let per_leg: Vec<LegQuality> = legs
        .iter()
        .map(|l| LegQuality {
            uid: l.summary.uid.clone(),
            call_id: l.summary.call.call_id.clone(),
            streams: l.streams.len(),
            loss_pct_max: l.summary.loss_pct_max,
            jitter_max_ms: l.summary.jitter_max_ms,
            mos_min: l.summary.call.mos_min,
        })
        .collect();
    let key = |q: &LegQuality| {
        (
            q.loss_pct_max.unwrap_or(0.0),
            q.jitter_max_ms.unwrap_or(0.0),
        )
    };
    let worst = per_leg
        .iter()
        .filter(|q| key(q) > (0.0, 0.0))
        .max_by(|a, b| {
            key(a)
                .partial_cmp(&key(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|q| q.uid.clone());
    (per_leg, worst)
}
