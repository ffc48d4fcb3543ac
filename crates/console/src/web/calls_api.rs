//! The calls API: search, totals, one call whole (its CDR, its ladder, its streams with their
//! figures over time), its pcap and its audio, the registrations, and the live feed.
//!
//! - `GET /api/calls?…` → `{"calls": [...], "next": cursor, "newest_us"}`, newest first,
//!   keyset-paged; the filters are `cdr::search::CallQuery`'s. A first page that found nothing
//!   says where the newest call is (`newest_us`), or, with none at all (a new install: no
//!   database yet, or an empty one), `"hint"`: how calls come to be here. An empty state is
//!   not an error: 200, never 503.
//! - `GET /api/calls/totals?…` → the filter's totals and buckets for the header chart.
//! - `GET /api/calls/{uid}` → `{"call", "archived", "note", "hosts", "ladder", "streams", "t38"}`;
//!   a viewer's ladder has its `Authorization` and `Proxy-Authorization` secrets replaced
//!   (`redact`), an admin's is as captured.
//! - `GET /api/calls/{uid}/pcap`, `GET /api/calls/{uid}/audio/{stream}.wav` (or `mixed.wav`):
//!   admins only, and each is written to the access log with its user before a byte is sent.
//! - `GET /api/registrations?…` → `{"registrations": [...], "next": cursor, "newest_us"}`.
//! - Either with `format=csv` or `format=jsonl`: every row of the search, streamed
//!   (`export.rs`).
//! - `GET /api/streams?…` → `{"streams": [...], "next": cursor, "newest_us"}`: RTP streams seen
//!   without signalling (`cdr::lone::StreamQuery`'s filters); `GET /api/streams/{uid}` one of
//!   them, `{"stream", "archived", "note", "streams"}` (its figures over time from its own
//!   archived packets, as a call's streams); `GET /api/streams/{uid}/pcap` and
//!   `/audio/0.wav`, admins only and written to the access log as a call's are.
//! - `GET /api/live` → server-sent events: `calls` once a second while something changes (and at
//!   least every 15 s), `unavailable` when no capture runs.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cdr::search::CallQuery;

use super::Shared;
use super::api::{ApiError, api_error};
use super::call_legs;
use crate::accounts::{Role, User};
use crate::calls::{Calls, CallsError};

/// How often the live feed is read.
const LIVE_INTERVAL: Duration = Duration::from_secs(1);
/// A live feed that has not changed is sent again this often (the page shows it is alive).
const LIVE_RESEND: Duration = Duration::from_secs(15);

fn calls_of(state: &Shared) -> Result<Arc<Calls>, ApiError> {
    state.calls.clone().ok_or_else(|| {
        api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no CDR database is configured: start serve with [capture] (cdr_sqlite or cdr_postgres)",
        )
    })
}

impl From<CallsError> for ApiError {
    fn from(e: CallsError) -> ApiError {
        api_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

fn query(raw: Option<String>) -> Result<CallQuery, ApiError> {
    CallQuery::from_query(raw.as_deref().unwrap_or(""))
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, e.to_string()))
}

/// A search's page as JSON: an empty first page with nothing stored at all (`newest_us`
/// null) gets `hint`, how such records come to be here; a database not created yet reads as
/// one with nothing in it.
async fn page_json<P: serde::Serialize + Default + Send + 'static>(
    calls: &Arc<Calls>,
    what: &str,
    list: &str,
    first: bool,
    read: impl FnOnce(&mut dyn cdr::CdrStore) -> Result<P, cdr::CdrError> + Send + 'static,
) -> Result<Response, ApiError> {
    let page = match calls.read(read).await {
        Err(CallsError::NoDatabase(_)) => P::default(),
        other => other?,
    };
    let mut json = serde_json::to_value(&page)
        .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if let Some(o) = json.as_object_mut() {
        let nothing = o
            .get(list)
            .and_then(|l| l.as_array())
            .is_some_and(|l| l.is_empty())
            && o.get("newest_us").is_none_or(|n| n.is_null());
        if first && nothing {
            o.insert("hint".into(), calls.source().how_to_fill(what).into());
        }
    }
    Ok(axum::Json(json).into_response())
}

pub(super) async fn api_calls(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (format, raw) = super::export::split_format(raw)?;
    let (calls, q) = (calls_of(&state)?, query(raw)?);
    if let Some(format) = format {
        let columns = cdr::export::CALL_EXPORT_COLUMNS;
        let produce: super::export::Produce = Box::new(move |store, w| {
            let max = super::export::EXPORT_ROWS_MAX;
            cdr::export::each_call(store, &q, max, |c| {
                w.row(&cdr::export::CallExportRow::from(c))
                    .map_err(super::export::ExportFail::from)
            })
        });
        return super::export::stream(&calls, "calls", format, columns, produce).await;
    }
    let first = q.after.is_none();
    page_json(&calls, "Calls", "calls", first, move |s| s.search(&q)).await
}

pub(super) async fn api_totals(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (calls, q) = (calls_of(&state)?, query(raw)?);
    let empty = cdr::search::CallTotals::empty(&q);
    let totals = match calls.read(move |s| s.totals(&q)).await {
        Err(CallsError::NoDatabase(_)) => empty,
        other => other?,
    };
    Ok(axum::Json(totals).into_response())
}

/// A call's row, or 404 naming the uid.
async fn call_row(
    calls: &Arc<Calls>,
    uid: &str,
) -> Result<
    (
        cdr::search::CallSummary,
        Vec<cdr::CdrStream>,
        Vec<cdr::CdrT38>,
    ),
    ApiError,
> {
    let key = uid.to_owned();
    calls
        .read(move |s| s.call_by_uid(&key))
        .await?
        .ok_or_else(|| api_error(StatusCode::NOT_FOUND, format!("no call with uid {uid:?}")))
}

fn archived(c: &cdr::CdrCall) -> bool {
    c.sip_tar.is_some() || c.rtp_tar.is_some()
}

/// The call view of archived packets, off the runtime; `Ok(Err(why))` when they cannot be
/// fetched or read (pruned, their sensor offline, damaged), for a page that then shows the
/// rows alone and says why.
async fn view_of(
    pcap: Result<Arc<Vec<u8>>, String>,
) -> Result<Result<callview::CallView, String>, ApiError> {
    let pcap = match pcap {
        Ok(pcap) => pcap,
        Err(e) => return Ok(Err(e)),
    };
    tokio::task::spawn_blocking(move || callview::analyze(&pcap, &callview::Limits::default()))
        .await
        .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        .map(|r| r.map_err(|e| e.to_string()))
}

pub(super) async fn api_call(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    let calls = calls_of(&state)?;
    let (summary, streams, t38) = call_row(&calls, &uid).await?;
    let legs = call_legs::legs_of(&calls, &summary, &streams).await?;
    let (leg_quality, worst_leg) = call_legs::quality(&legs);
    let rows: Vec<(Option<String>, cdr::CdrStream)> = legs
        .iter()
        .flat_map(|l| {
            let leg = Some(l.summary.uid.clone());
            l.streams.iter().map(move |s| (leg.clone(), s.clone()))
        })
        .collect();
    let leg_rows: Vec<&cdr::search::CallSummary> = legs.iter().map(|l| &l.summary).collect();
    let legs_json = serde_json::json!({
        "legs": leg_rows,
        "leg_quality": leg_quality,
        "worst_leg": worst_leg,
    });
    let with_legs = |mut body: serde_json::Value| {
        if let (Some(o), Some(l)) = (body.as_object_mut(), legs_json.as_object()) {
            o.extend(l.clone());
        }
        axum::Json(body).into_response()
    };
    // Without its packets (never archived, or the archive pruned sooner than the CDRs, or its
    // sensor offline) the page still shows the call's rows and says why there is no more.
    let figures_only = |summary, rows: Vec<(Option<String>, cdr::CdrStream)>, t38, why: String| {
        let streams: Vec<_> = rows
            .into_iter()
            .map(|(leg, figures)| {
                serde_json::json!({"figures": figures, "leg": leg, "intervals": [], "rtcp": [],
                    "audio": null, "audio_note": "no packets"})
            })
            .collect();
        with_legs(serde_json::json!({
            "call": summary,
            "archived": false,
            "note": format!("{why}: no ladder, charts or audio; the streams are the CDR's."),
            "hosts": [],
            "ladder": [],
            "streams": streams,
            "t38": t38,
        }))
    };
    if !legs.iter().any(|l| archived(&l.summary.call)) {
        let why = "This call's packets were not archived".to_string();
        return Ok(figures_only(summary, rows, t38, why));
    }
    let mut view = match view_of(call_legs::pcap_of(&calls, &legs).await).await? {
        Ok(v) => v,
        Err(e) => {
            let why = format!("This call's archived packets cannot be read ({e})");
            return Ok(figures_only(summary, rows, t38, why));
        }
    };
    let note = view
        .read_error
        .as_ref()
        .map(|e| format!("The archived packets end early ({e}): what was read is shown."))
        .unwrap_or_default();
    // A viewer reads who authenticated, never the digest response (an admin may download the
    // pcap, which holds it anyway).
    if user.role != Role::Admin {
        for event in &mut view.ladder {
            if let std::borrow::Cow::Owned(text) = crate::redact::sip_credentials(&event.text) {
                event.text = text;
            }
        }
    }
    Ok(with_legs(serde_json::json!({
        "call": summary,
        "archived": true,
        "note": note,
        "hosts": view.hosts,
        "ladder": view.ladder,
        "ladder_left_out": view.ladder_left_out,
        "streams": merge_streams(rows, view.streams),
        "t38": t38,
    })))
}

/// The call's streams for the page: the view's, in its order (a stream's place is the number
/// its audio is asked for by), each showing the CDR's figures and naming its leg (`leg`, the
/// uid of the leg whose row has it) when a leg's CDR has that stream, then the CDRs' streams
/// the archive does not hold. The CDR rows are the record of the call; the view adds what only
/// the packets tell (seconds, RTCP reports, audio).
fn merge_streams(
    mut rows: Vec<(Option<String>, cdr::CdrStream)>,
    view: Vec<callview::StreamView>,
) -> Vec<serde_json::Value> {
    let mut out = Vec::with_capacity(view.len() + rows.len());
    for v in view {
        let at = rows
            .iter()
            .position(|(_, r)| r.src == v.key.src && r.dst == v.key.dst && r.ssrc == v.key.ssrc);
        let mut json = serde_json::to_value(&v).unwrap_or(serde_json::Value::Null);
        if let Some(o) = json.as_object_mut() {
            let (leg, figures) = match at {
                Some(i) => {
                    let (leg, row) = rows.remove(i);
                    (leg, serde_json::to_value(row).ok())
                }
                None => (None, None),
            };
            if let Some(f) = figures {
                o.insert("figures".into(), f);
            }
            o.insert("leg".into(), serde_json::json!(leg));
        }
        out.push(json);
    }
    out.extend(rows.into_iter().map(|(leg, figures)| {
        serde_json::json!({"figures": figures, "leg": leg, "intervals": [], "rtcp": [],
            "audio": null, "audio_note": "this stream's packets are not in the archive"})
    }));
    out
}

/// Listening and downloading (and, on the Alerts page, silences and rules) are an admin's
/// right: anyone else is refused before anything is read.
pub(super) fn admit(user: &User, action: &str) -> Result<(), ApiError> {
    if user.role != Role::Admin {
        return Err(api_error(
            StatusCode::FORBIDDEN,
            format!("{action} needs the admin role; {} is a viewer", user.name),
        ));
    }
    Ok(())
}

/// Writes what is about to be sent to the access log with its user, once it is ready (a
/// request refused or failed sends nothing and logs no access), and before a byte goes.
async fn log_sent(
    state: &Shared,
    user: &User,
    action: &str,
    target: String,
) -> Result<(), ApiError> {
    let (st, name, act, what) = (
        state.clone(),
        user.name.clone(),
        action.to_owned(),
        target.clone(),
    );
    tokio::task::spawn_blocking(move || st.accounts.log_access(&name, &act, &what))
        .await
        .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| {
            // Nothing is sent that the log could not record.
            api_error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the access log: {e}"),
            )
        })?;
    tracing::info!(user = %user.name, action, target = %target, "call data sent");
    Ok(())
}

/// A Call-ID as a file name: token characters kept, the rest `_`.
fn file_name(call_id: &str) -> String {
    let s: String = call_id
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "call".into() } else { s }
}

pub(super) async fn api_pcap(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    let calls = calls_of(&state)?;
    let (summary, streams, _) = call_row(&calls, &uid).await?;
    let legs = call_legs::legs_of(&calls, &summary, &streams).await?;
    if !legs.iter().any(|l| archived(&l.summary.call)) {
        return Err(api_error(
            StatusCode::NOT_FOUND,
            format!("call {uid:?}: its packets were not archived"),
        ));
    }
    admit(&user, "pcap")?;
    // A linked call downloads as it is shown: every leg's packets in one pcap.
    let pcap = call_legs::pcap_of(&calls, &legs)
        .await
        .map_err(|e| api_error(StatusCode::NOT_FOUND, format!("call {uid:?}: {e}")))?;
    let name = file_name(&summary.call.call_id);
    log_sent(&state, &user, "pcap", uid).await?;
    Ok(pcap_response(&pcap, &name))
}

fn pcap_response(pcap: &[u8], name: &str) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                "application/vnd.tcpdump.pcap".to_owned(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}.pcap\""),
            ),
        ],
        pcap.to_vec(),
    )
        .into_response()
}

/// Sends the pcap of `row`'s archive columns as `name.pcap`, to an admin, once the access log
/// has it.
async fn send_pcap(
    state: &Shared,
    calls: &Arc<Calls>,
    user: &User,
    uid: String,
    row: cdr::CdrCall,
    name: &str,
) -> Result<Response, ApiError> {
    admit(user, "pcap")?;
    let pcap = calls.pcap(&uid, row).await?;
    log_sent(state, user, "pcap", uid).await?;
    Ok(pcap_response(&pcap, name))
}

/// Which audio `file` asks for: `N.wav` (a stream's number) or `mixed.wav`.
fn audio_select(file: &str) -> Result<callview::AudioSelect, ApiError> {
    match file.strip_suffix(".wav") {
        Some("mixed") => Ok(callview::AudioSelect::Mixed),
        Some(n) => n
            .parse::<usize>()
            .map(callview::AudioSelect::Stream)
            .map_err(|_| bad_audio(file)),
        None => Err(bad_audio(file)),
    }
}

pub(super) async fn api_audio(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path((uid, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let which = audio_select(&file)?;
    let calls = calls_of(&state)?;
    let (summary, streams, _) = call_row(&calls, &uid).await?;
    let legs = call_legs::legs_of(&calls, &summary, &streams).await?;
    if !legs.iter().any(|l| archived(&l.summary.call)) {
        return Err(api_error(
            StatusCode::NOT_FOUND,
            format!("call {uid:?}: its packets were not archived, so there is nothing to play"),
        ));
    }
    // Streams are numbered as the page shows them: over every leg's packets.
    send_audio(
        &state,
        &calls,
        &user,
        (uid, file),
        Packets::Legs(legs),
        which,
    )
    .await
}

/// Where the audio is read from: one row's archive columns, or a call's legs together.
enum Packets {
    Row(Box<cdr::CdrCall>),
    Legs(Vec<call_legs::Leg>),
}

/// Sends the WAV of `which` from `packets`, to an admin, once the
/// access log has it (`uid file`).
async fn send_audio(
    state: &Shared,
    calls: &Arc<Calls>,
    user: &User,
    (uid, file): (String, String),
    packets: Packets,
    which: callview::AudioSelect,
) -> Result<Response, ApiError> {
    admit(user, "listen")?;
    let pcap = match packets {
        Packets::Row(row) => calls.pcap(&uid, *row).await?,
        Packets::Legs(legs) => call_legs::pcap_of(calls, &legs)
            .await
            .map_err(|e| api_error(StatusCode::NOT_FOUND, format!("call {uid:?}: {e}")))?,
    };
    let wav = tokio::task::spawn_blocking(move || {
        callview::wav(&pcap, which, &callview::Limits::default())
    })
    .await
    .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| api_error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    log_sent(state, user, "listen", format!("{uid} {file}")).await?;
    Ok(([(header::CONTENT_TYPE, "audio/wav")], wav).into_response())
}

fn bad_audio(file: &str) -> ApiError {
    api_error(
        StatusCode::NOT_FOUND,
        format!("no audio {file:?}: ask for STREAM.wav (a stream's number) or mixed.wav"),
    )
}

pub(super) async fn api_registrations(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (format, raw) = super::export::split_format(raw)?;
    let calls = calls_of(&state)?;
    let q = cdr::registration::RegistrationQuery::from_query(raw.as_deref().unwrap_or(""))
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, e.to_string()))?;
    if let Some(format) = format {
        let columns = cdr::export::REGISTRATION_EXPORT_COLUMNS;
        let produce: super::export::Produce = Box::new(move |store, w| {
            let max = super::export::EXPORT_ROWS_MAX;
            cdr::export::each_registration(store, &q, max, |r| {
                w.row(&cdr::export::RegistrationExportRow::from(r))
                    .map_err(super::export::ExportFail::from)
            })
        });
        return super::export::stream(&calls, "registrations", format, columns, produce).await;
    }
    let first = q.after.is_none();
    let read = move |s: &mut dyn cdr::CdrStore| s.registrations(&q);
    let what = "Registrations (the REGISTER requests a capture sees)";
    page_json(&calls, what, "registrations", first, read).await
}

pub(super) async fn api_streams(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let calls = calls_of(&state)?;
    let q = cdr::lone::StreamQuery::from_query(raw.as_deref().unwrap_or(""))
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, e.to_string()))?;
    let first = q.after.is_none();
    let what = "RTP streams seen without their SIP";
    page_json(&calls, what, "streams", first, move |s| s.lone_streams(&q)).await
}

/// A stream without a call's row, or 404 naming the uid.
async fn lone_row(calls: &Arc<Calls>, uid: &str) -> Result<cdr::lone::LoneStream, ApiError> {
    let key = uid.to_owned();
    calls
        .read(move |s| s.lone_stream_by_uid(&key))
        .await?
        .ok_or_else(|| {
            api_error(
                StatusCode::NOT_FOUND,
                format!("no stream without a call has uid {uid:?}"),
            )
        })
}

/// A stream without a call as a call row whose RTP columns are its member: what the pcap
/// readers take (here or, for a remote sensor's, through the collector); 404 when it was not
/// archived.
fn lone_archive(l: &cdr::lone::LoneStream, what: &str) -> Result<cdr::CdrCall, ApiError> {
    if !l.stream.archived() {
        return Err(api_error(
            StatusCode::NOT_FOUND,
            format!("stream {:?}: its packets were not archived{what}", l.uid),
        ));
    }
    Ok(l.stream.archive_as_call(&l.uid, &l.sensor))
}

/// One stream without a call: `{"stream", "archived", "note", "streams"}`. Archived, its
/// packets are read as a call's are (`callview`): `streams` holds it with its seconds, its
/// RTCP reports and its audio, and the row's figures. Else, or when its packets cannot be
/// read (retention deleted them, its sensor is offline), only the row's figures, and `note`
/// says why.
pub(super) async fn api_stream(
    State(state): State<Shared>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    let calls = calls_of(&state)?;
    let stream = lone_row(&calls, &uid).await?;
    let figures_only = |stream: cdr::lone::LoneStream, why: String| {
        let figures = stream.stream.clone();
        axum::Json(serde_json::json!({
            "stream": stream,
            "archived": false,
            "note": format!("{why}: its figures are the CDR's, with no chart over time and no audio."),
            "streams": [{"figures": figures, "intervals": [], "rtcp": [], "audio": null,
                "audio_note": "no packets"}],
        }))
        .into_response()
    };
    let Ok(row) = lone_archive(&stream, "") else {
        let why = "This stream's packets were not archived (captured without --archive, or by \
                   a release that archived only calls)";
        return Ok(figures_only(stream, why.to_string()));
    };
    let view = match view_of(calls.pcap(&uid, row).await.map_err(|e| e.to_string())).await? {
        Ok(v) => v,
        Err(e) => {
            let why = format!("This stream's archived packets cannot be read ({e})");
            return Ok(figures_only(stream, why));
        }
    };
    let note = view
        .read_error
        .as_ref()
        .map(|e| format!("The archived packets end early ({e}): what was read is shown."))
        .unwrap_or_default();
    let figures = stream.stream.clone();
    Ok(axum::Json(serde_json::json!({
        "stream": stream,
        "archived": true,
        "note": note,
        "streams": merge_streams(vec![(None, figures)], view.streams),
    }))
    .into_response())
}

/// A stream without a call's packets as a pcap (`rtp_SRC_DST_SSRC.pcap`).
pub(super) async fn api_stream_pcap(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path(uid): Path<String>,
) -> Result<Response, ApiError> {
    let calls = calls_of(&state)?;
    let l = lone_row(&calls, &uid).await?;
    let row = lone_archive(&l, "")?;
    let s = &l.stream;
    let name = file_name(&format!("rtp_{}_{}_{:08X}", s.src, s.dst, s.ssrc));
    send_pcap(&state, &calls, &user, uid, row, &name).await
}

/// A stream without a call's audio: `0.wav` (its own packets hold one stream).
pub(super) async fn api_stream_audio(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path((uid, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let which = audio_select(&file)?;
    let calls = calls_of(&state)?;
    let l = lone_row(&calls, &uid).await?;
    let row = lone_archive(&l, ", so there is nothing to play")?;
    send_audio(
        &state,
        &calls,
        &user,
        (uid, file),
        Packets::Row(Box::new(row)),
        which,
    )
    .await
}

pub(super) async fn api_live(State(state): State<Shared>) -> Response {
    let feed = state.calls.as_ref().and_then(|c| c.live().cloned());
    let stopping = state.stopping.clone();
    // One event per change (at most one a second), or a resend after LIVE_RESEND; the stream
    // ends when the console stops, so a page's open connection never holds up the shutdown.
    let stream = futures_util::stream::unfold(
        LiveState {
            feed,
            stopping,
            last: None,
            last_sent: tokio::time::Instant::now(),
            first: true,
        },
        |mut st| async move {
            if !st.first && !st.pause().await {
                return None;
            }
            let Some(f) = st.feed.clone() else {
                if !st.first {
                    let _ = st.stopping.wait_for(|s| *s).await;
                    return None;
                }
                st.first = false;
                let e = Event::default().event("unavailable").data(
                    serde_json::json!({"error": "no capture runs in this serve: configure [capture] to see calls in progress"})
                        .to_string(),
                );
                return Some((Ok::<_, std::convert::Infallible>(e), st));
            };
            loop {
                let snapshot = f();
                let mut body = snapshot.clone();
                // The snapshot's time changes at every read: what changed is the rest.
                if let Some(o) = body.as_object_mut() {
                    o.remove("taken_at_us");
                }
                let changed = st.last.as_ref() != Some(&body);
                if st.first || changed || st.last_sent.elapsed() >= LIVE_RESEND {
                    let e = Event::default().event("calls").data(snapshot.to_string());
                    st.first = false;
                    st.last = Some(body);
                    st.last_sent = tokio::time::Instant::now();
                    return Some((Ok(e), st));
                }
                if !st.pause().await {
                    return None;
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(LIVE_RESEND))
        .into_response()
}

/// Where one page's live feed is.
struct LiveState {
    feed: Option<crate::calls::LiveFeed>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// The last snapshot sent, without its time.
    last: Option<serde_json::Value>,
    last_sent: tokio::time::Instant,
    first: bool,
}

impl LiveState {
    /// Waits one interval; false when the console is stopping.
    async fn pause(&mut self) -> bool {
        let stopped = tokio::select! {
            _ = tokio::time::sleep(LIVE_INTERVAL) => false,
            _ = self.stopping.wait_for(|s| *s) => true,
        };
        !stopped && !*self.stopping.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_id_becomes_a_safe_file_name() {
        assert_eq!(
            file_name("a84b4c76e66710@pc33.example.com"),
            "a84b4c76e66710_pc33.example.com"
        );
        assert_eq!(file_name("../../etc/passwd"), ".._.._etc_passwd");
        assert_eq!(file_name("\"; rm"), "___rm");
        assert_eq!(file_name(""), "call");
    }
}
