//! The alerts API: the alerts the rules raised (stored in the CDR database by whatever decided
//! them), acknowledgements, silences, and the rules themselves.
//!
//! - `GET /api/alerts?state=firing|resolved&rule=&key=&from=&to=&after=&limit=` →
//!   `{"alerts": [...], "next", "firing", "unacked"}`, newest first by when each began,
//!   keyset-paged (`next` is the `after` of the next page). A database without alerts (not
//!   created yet, or of an older release) reads as empty, with `hint`.
//! - `GET /api/alerts/{id}` → `{"alert": {...}}` with every call uid behind it (`calls`) and,
//!   for the first 100, the call each names (`call_rows`: start, parties, result; `null` for a
//!   uid that is no stored call, a registration's); the page links each call to `/calls/{uid}`.
//! - `POST /api/alerts/{id}/ack`: any signed-in user; the first acknowledgement stays, with its
//!   user and time.
//! - `GET /api/silences` (those running now); `POST /api/silences` (admins; JSON
//!   [`SilenceForm`], each error names its field); `POST /api/silences/{id}/end` (admins).
//! - `GET /api/alerts/rules`, `PUT /api/alerts/rules` (the console-managed rules as TOML, at
//!   most 256 KiB), `POST /api/alerts/rules/check`: admins only; a refused text comes back as
//!   `{"errors": [...]}` with 422.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cdr::{AlertQuery, AlertRow, AlertStore, CdrError, CdrStore, SilenceRow};

use super::Shared;
use super::api::{ApiError, api_error};
use super::calls_api::admit;
use crate::accounts::User;
use crate::alert_board::{BadgeCounts, FieldError, PAGE_MAX, SilenceForm};
use crate::alert_rules::{AlertRules, capped, check_text};
use crate::calls::{Calls, CallsError};

/// What an empty first page says: how alerts come to be here.
const HOW_ALERTS_COME: &str = "Alerts appear here once a rule fires: [[alerts.rule]] tables in \
    tandem.toml (or the rules managed on this page) run in serve's capture and its collector, and \
    each alert is kept in the CDR database.";
/// Calls of one alert read back for its detail (the engine keeps 100 by default).
const DETAIL_CALLS_MAX: usize = 100;

fn now_us() -> i64 {
    crate::sensors::now_us()
}

fn calls_of(state: &Shared) -> Result<Arc<Calls>, ApiError> {
    state.calls.clone().ok_or_else(|| {
        api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no CDR database is configured, so no alerts are kept: start serve with [capture] (cdr_sqlite or cdr_postgres)",
        )
    })
}

/// Runs `f` on the database's alert store; a store without one (no database) reads as `empty`,
/// and so does a database not created yet.
async fn with_alerts<T: Clone + Send + 'static>(
    calls: &Arc<Calls>,
    empty: T,
    f: impl FnOnce(&mut dyn AlertStore) -> Result<T, CdrError> + Send + 'static,
) -> Result<T, ApiError> {
    let fallback = empty.clone();
    let read = calls
        .read(move |s: &mut dyn CdrStore| match s.alert_store() {
            Some(a) => f(a),
            None => Ok(empty),
        })
        .await;
    match read {
        Err(CallsError::NoDatabase(_)) => Ok(fallback),
        other => Ok(other?),
    }
}

/// The header's count: `None` (no badge) without a CDR database or when it cannot be read.
/// Read at most once per [`crate::alert_board::BADGE_TTL`] by all the pages together.
pub(super) async fn badge(state: &Shared) -> Option<BadgeCounts> {
    let calls = state.calls.clone()?;
    state
        .badge
        .get(|| async move {
            // A database not created yet has nothing firing.
            let zero = Some(BadgeCounts::default());
            with_alerts(&calls, zero, |a| counts(a).map(Some))
                .await
                .unwrap_or_else(|e| {
                    tracing::debug!("the alerts badge: {}", e.message());
                    None
                })
        })
        .await
}

/// Firing alerts, and those of them nobody acknowledged (among the newest page of them).
fn counts(a: &mut dyn AlertStore) -> Result<BadgeCounts, CdrError> {
    let firing = a.firing_count()?;
    if firing == 0 {
        return Ok(BadgeCounts::default());
    }
    let q = AlertQuery {
        state: Some("firing".into()),
        limit: PAGE_MAX,
        ..AlertQuery::default()
    };
    let rows = a.list_alerts(&q)?;
    let unacked = rows.iter().filter(|r| r.acked_by.is_none()).count() as u64;
    Ok(BadgeCounts { firing, unacked })
}

fn alert_query(raw: &str) -> Result<AlertQuery, ApiError> {
    crate::alert_board::alert_query(raw).map_err(|e| api_error(StatusCode::BAD_REQUEST, e))
}

/// An alert as the API shows it: the row, its figures as JSON, and the silence that covers it
/// now (when one does). `calls` is every uid with `full`, else its count alone.
fn alert_json(a: AlertRow, silences: &[SilenceRow], now: i64, full: bool) -> serde_json::Value {
    let figures: serde_json::Value =
        serde_json::from_str(&a.figures_json).unwrap_or(serde_json::Value::Null);
    let silenced = silences
        .iter()
        .find(|s| a.state == "firing" && s.mutes(&a.rule, &a.key, now))
        .map(|s| serde_json::json!({"id": s.id, "ends_us": s.ends_us, "by": s.created_by}));
    let mut v = serde_json::json!({
        "id": a.id,
        "rule": a.rule,
        "rule_kind": a.rule_kind,
        "severity": a.severity,
        "group_by": a.group_by,
        "key": a.key,
        "state": a.state,
        "since_us": a.since_us,
        "at_us": a.at_us,
        "resolved_us": a.resolved_us,
        "notified_us": a.notified_us,
        "figures": figures,
        "calls_count": a.calls.len(),
        "summary": a.summary,
        "node": a.node,
        "acked_by": a.acked_by,
        "acked_us": a.acked_us,
        "silenced": silenced,
    });
    if full {
        v["calls"] = a.calls.into();
    }
    v
}

pub(super) async fn api_alerts(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let q = alert_query(raw.as_deref().unwrap_or(""))?;
    let calls = calls_of(&state)?;
    let first = q.after_id.is_none();
    let limit = q.limit;
    let empty = (Vec::new(), Vec::new(), BadgeCounts::default());
    let (rows, silences, counts) = with_alerts(&calls, empty, move |a| {
        let rows = a.list_alerts(&q)?;
        let silences = a.silences(Some(now_us()))?;
        Ok((rows, silences, counts(a)?))
    })
    .await?;
    let next = (rows.len() >= limit).then(|| rows.last().map(|r| r.id.to_string()));
    let now = now_us();
    let nothing = rows.is_empty();
    let alerts: Vec<_> = rows
        .into_iter()
        .map(|a| alert_json(a, &silences, now, false))
        .collect();
    let mut out = serde_json::json!({
        "alerts": alerts,
        "next": next.flatten(),
        "firing": counts.firing,
        "unacked": counts.unacked,
    });
    if first && nothing && counts.firing == 0 {
        out["hint"] = HOW_ALERTS_COME.into();
    }
    Ok(axum::Json(out).into_response())
}

/// An alert's or a silence's id from the path, or 404 naming it.
fn id_of(raw: &str, what: &str) -> Result<i64, ApiError> {
    raw.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
        let raw: String = raw.chars().take(40).collect();
        api_error(
            StatusCode::NOT_FOUND,
            format!("no {what} {raw:?}: ids are numbers"),
        )
    })
}

fn alert_id(raw: &str) -> Result<i64, ApiError> {
    id_of(raw, "alert")
}

pub(super) async fn api_alert(
    State(state): State<Shared>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let id = alert_id(&raw)?;
    let calls = calls_of(&state)?;
    let found = with_alerts(&calls, None, move |a| {
        Ok(match a.alert(id)? {
            Some(row) => Some((row, a.silences(Some(now_us()))?)),
            None => None,
        })
    })
    .await?;
    let (row, silences) =
        found.ok_or_else(|| api_error(StatusCode::NOT_FOUND, format!("no alert {id}")))?;
    let call_rows = call_rows(&calls, &row.calls).await;
    let mut alert = alert_json(row, &silences, now_us(), true);
    alert["call_rows"] = call_rows;
    Ok(axum::Json(serde_json::json!({ "alert": alert })).into_response())
}

/// The first [`DETAIL_CALLS_MAX`] uids' calls as the page lists them (start, parties,
/// result), in the uids' order, `null` for a uid that is no stored call (a registration, or
/// a call the retention removed). A failed read leaves the uids alone (`null`).
async fn call_rows(calls: &Arc<Calls>, uids: &[String]) -> serde_json::Value {
    let uids: Vec<String> = uids.iter().take(DETAIL_CALLS_MAX).cloned().collect();
    let read = calls
        .read(move |s: &mut dyn CdrStore| {
            let mut rows = Vec::with_capacity(uids.len());
            for uid in &uids {
                rows.push(s.call_by_uid(uid)?.map(|(c, _, _)| {
                    serde_json::json!({"uid": c.uid, "start_us": c.call.start_us,
                        "caller": c.call.caller, "called": c.call.called, "state": c.call.state,
                        "last_response": c.call.last_response, "duration_s": c.duration_s})
                }));
            }
            Ok(rows)
        })
        .await;
    match read {
        Ok(rows) => rows.into(),
        Err(e) => {
            tracing::debug!("an alert's calls: {e}");
            serde_json::Value::Null
        }
    }
}

pub(super) async fn api_ack(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let id = alert_id(&raw)?;
    let calls = calls_of(&state)?;
    let name = user.name.clone();
    let found = with_alerts(&calls, None, move |a| {
        let now = a.ack_alert(id, &name, now_us())?;
        Ok(a.alert(id)?.map(|row| (now, row)))
    })
    .await?;
    let (acked_now, row) =
        found.ok_or_else(|| api_error(StatusCode::NOT_FOUND, format!("no alert {id}")))?;
    if acked_now {
        tracing::info!(user = %user.name, alert = id, rule = %row.rule, key = %row.key, "alert acknowledged");
        state.badge.forget().await;
    }
    let alert = alert_json(row, &[], now_us(), false);
    Ok(axum::Json(serde_json::json!({ "alert": alert, "acked_now": acked_now })).into_response())
}

pub(super) async fn api_silences(State(state): State<Shared>) -> Result<Response, ApiError> {
    let calls = calls_of(&state)?;
    let silences = with_alerts(&calls, Vec::new(), |a| a.silences(Some(now_us()))).await?;
    Ok(axum::Json(serde_json::json!({ "silences": silences })).into_response())
}

/// A 400 that names the field at fault.
fn field_error(e: FieldError) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(serde_json::json!({"error": e.to_string(), "field": e.field})),
    )
        .into_response()
}

pub(super) async fn api_add_silence(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    body: Bytes,
) -> Result<Response, ApiError> {
    admit(&user, "creating a silence")?;
    let form: SilenceForm = serde_json::from_slice(&body).map_err(|e| {
        api_error(
            StatusCode::BAD_REQUEST,
            format!("the silence is JSON {{rule, key, duration_s or ends, comment}}: {e}"),
        )
    })?;
    let now = now_us();
    let spec = match form.check(now) {
        Ok(s) => s,
        Err(e) => return Ok(field_error(e)),
    };
    let calls = calls_of(&state)?;
    let row = SilenceRow {
        id: 0,
        rule: spec.rule,
        key: spec.key,
        starts_us: spec.starts_us,
        ends_us: spec.ends_us,
        created_by: user.name.clone(),
        comment: spec.comment,
        created_us: now,
    };
    let stored = row.clone();
    let id = with_alerts(&calls, None, move |a| a.add_silence(&stored).map(Some)).await?;
    let Some(id) = id else {
        return Err(api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this CDR store keeps no silences",
        ));
    };
    tracing::info!(user = %user.name, silence = id, rule = %row.rule, key = %row.key, ends_us = row.ends_us, "silence created");
    let silence = SilenceRow { id, ..row };
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::json!({ "silence": silence })),
    )
        .into_response())
}

pub(super) async fn api_end_silence(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    admit(&user, "ending a silence")?;
    let id = id_of(&raw, "silence")?;
    let calls = calls_of(&state)?;
    let ended = with_alerts(&calls, false, move |a| a.end_silence(id, now_us())).await?;
    if !ended {
        return Err(api_error(
            StatusCode::NOT_FOUND,
            format!("no running silence {id}: it ended already, or there is none"),
        ));
    }
    tracing::info!(user = %user.name, silence = id, "silence ended");
    Ok(axum::Json(serde_json::json!({ "ended": id })).into_response())
}

fn rules_of(state: &Shared) -> Option<Arc<dyn AlertRules>> {
    state.alert_rules.clone()
}

const RULES_OFF: &str = "Alert rules are not enabled in this serve: there is no [alerts] section in tandem.toml, or serve was started without alerts.";

pub(super) async fn api_rules(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
) -> Result<Response, ApiError> {
    admit(&user, "reading the alert rules")?;
    let Some(rules) = rules_of(&state) else {
        return Ok(
            axum::Json(serde_json::json!({"enabled": false, "note": RULES_OFF})).into_response(),
        );
    };
    let (config, console) =
        tokio::task::spawn_blocking(move || (rules.config_text(), rules.console_text()))
            .await
            .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(axum::Json(serde_json::json!({
        "enabled": true,
        "config_text": config,
        "console_text": console,
        "bytes_max": crate::alert_rules::RULES_TEXT_BYTES_MAX,
    }))
    .into_response())
}

/// Checks (`save` false) or applies a rules text for an admin: 200, or 422 with the problems.
async fn rules_change(
    state: Shared,
    user: User,
    body: Bytes,
    save: bool,
) -> Result<Response, ApiError> {
    admit(&user, "changing the alert rules")?;
    let Some(rules) = rules_of(&state) else {
        return Err(api_error(StatusCode::NOT_FOUND, RULES_OFF));
    };
    let refused = |errors: Vec<String>| {
        let error = format!(
            "the rules were not {}: {}",
            if save { "saved" } else { "accepted" },
            errors.first().map_or("", String::as_str)
        );
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            axum::Json(serde_json::json!({"error": error, "errors": capped(errors)})),
        )
            .into_response()
    };
    let text = match check_text(&body) {
        Ok(t) => t.to_owned(),
        Err(e) => return Ok(refused(vec![e])),
    };
    let bytes = text.len();
    let done = tokio::task::spawn_blocking(move || {
        if save {
            rules.apply(&text)
        } else {
            rules.validate(&text)
        }
    })
    .await
    .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    match done {
        Ok(()) => {
            if save {
                tracing::info!(user = %user.name, bytes, "alert rules saved from the console");
            }
            Ok(axum::Json(serde_json::json!({"ok": true, "saved": save})).into_response())
        }
        Err(errors) => Ok(refused(errors)),
    }
}

pub(super) async fn api_put_rules(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    body: Bytes,
) -> Result<Response, ApiError> {
    rules_change(state, user, body, true).await
}

pub(super) async fn api_check_rules(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    body: Bytes,
) -> Result<Response, ApiError> {
    rules_change(state, user, body, false).await
}
