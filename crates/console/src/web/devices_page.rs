//! The Devices page (`/devices`, drawn on the server) and `GET /api/devices` (the same rows as
//! JSON, `cdr::devices::DevicePage`): the monitor's rows through the CDR readers, the
//! registrar's from `serve`'s feed ([`crate::devices`]).

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cdr::devices::{DevicePage, DeviceQuery, DeviceRow, Scan};

use super::api::{ApiError, api_error};
use super::{Shared, html};
use crate::accounts::{Role, User};
use crate::alert_board::BadgeCounts;
use crate::calls::CallsError;
use crate::devices::{nothing_to_show, registrar_rows, relative, utc_text};
use crate::sensors::{ago, now_us};

/// The rows of both sources for `q`, paged, and what a person should know about them (a
/// source that failed, a scan cut short). `Err` only when neither source exists.
async fn read(state: &Shared, q: DeviceQuery) -> Result<(DevicePage, Vec<String>), ApiError> {
    if state.calls.is_none() && state.registrar_devices.is_none() {
        return Err(api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            nothing_to_show(),
        ));
    }
    let now = now_us();
    let mut rows: Vec<DeviceRow> = Vec::new();
    let mut notes = Vec::new();
    let mut scan = Scan::default();
    if let Some(calls) = &state.calls {
        let q2 = q.clone();
        match calls
            .read(move |s| cdr::devices::monitor_rows(s, &q2, now))
            .await
        {
            Ok((r, s)) => {
                rows = r;
                scan = s;
            }
            Err(CallsError::NoDatabase(_)) => {}
            Err(e) => notes.push(format!(
                "The monitor's registrations could not be read: {e}"
            )),
        }
        if let Some(t) = scan.scanned_to_us {
            notes.push(format!(
                "Only the newest {} REGISTER chains were read (back to {} UTC): narrow the \
                 search by user or address to see older ones.",
                scan.chains,
                utc_text(Some(t))
            ));
        }
    }
    if let Some(feed) = state.registrar_devices.clone() {
        match tokio::task::spawn_blocking(move || registrar_rows(&feed)).await {
            Ok(r) => rows.extend(r),
            Err(e) => notes.push(format!("The registrar's devices could not be read: {e}")),
        }
    }
    Ok((cdr::devices::page(rows, &q, now, scan), notes))
}

fn parse(raw: Option<String>) -> Result<DeviceQuery, ApiError> {
    DeviceQuery::from_query(raw.as_deref().unwrap_or(""))
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, e.to_string()))
}

pub(super) async fn api_devices(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (page, notes) = read(&state, parse(raw)?).await?;
    let mut json = serde_json::to_value(&page)
        .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if let Some(o) = json.as_object_mut() {
        o.insert("notes".into(), notes.into());
        o.insert(
            "columns".into(),
            cdr::devices::DEVICE_COLUMNS.to_vec().into(),
        );
    }
    Ok(axum::Json(json).into_response())
}

/// A row as the page draws it.
struct DeviceView {
    user: String,
    domain: String,
    address: String,
    source: String,
    seen_by: String,
    state: String,
    state_label: &'static str,
    state_class: &'static str,
    contact: String,
    user_agent: String,
    failures: u64,
    address_failures: u64,
    failure: String,
    failure_label: String,
    failure_reason: String,
    failure_us: i64,
    failure_iso: String,
    failure_utc: String,
    expires_us: Option<i64>,
    expires_rel: String,
    expires_iso: String,
    expires_utc: String,
    seen_us: i64,
    seen_iso: String,
    seen_utc: String,
    seen_ago: String,
}

fn iso(us: Option<i64>) -> String {
    us.map(cdr::query::time_text).unwrap_or_default()
}

fn view(r: DeviceRow, now: i64) -> DeviceView {
    let (state_label, state_class) = match r.state.as_str() {
        "registered" => ("Registered", "up"),
        "failing" => ("Failing", "down"),
        _ => ("Expired", "idle"),
    };
    let failure_label = match r.failure.as_str() {
        "wrong-password" => "Wrong password".to_string(),
        "unknown-user" => "Unknown user".to_string(),
        "challenged" => "Challenged, no answer".to_string(),
        "server-error" => "Server error".to_string(),
        "timeout" => "No response".to_string(),
        "rejected" => "Rejected".to_string(),
        other => other.to_string(),
    };
    DeviceView {
        state_label,
        state_class,
        failure_label,
        failure_us: r.failure_us.unwrap_or(0),
        failure_iso: iso(r.failure_us),
        failure_utc: utc_text(r.failure_us),
        expires_rel: r.expires_us.map(|e| relative(now, e)).unwrap_or_default(),
        expires_iso: iso(r.expires_us),
        expires_utc: utc_text(r.expires_us),
        expires_us: r.expires_us,
        seen_us: r.last_seen_us,
        seen_iso: iso(Some(r.last_seen_us)),
        seen_utc: utc_text(Some(r.last_seen_us)),
        seen_ago: ago(now, r.last_seen_us),
        user: r.user,
        domain: r.domain,
        address: r.address,
        source: r.source,
        seen_by: r.seen_by,
        state: r.state,
        contact: r.contact,
        user_agent: r.user_agent,
        failures: r.failures,
        address_failures: r.address_failures,
        failure: r.failure,
        failure_reason: r.failure_reason,
    }
}

#[derive(Template)]
#[template(path = "devices.html")]
struct DevicesPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
    f_user: String,
    f_state: String,
    f_ip: String,
    states: [(&'static str, &'static str); 4],
    sources: String,
    since_us: i64,
    since_iso: String,
    since_utc: String,
    total: usize,
    registered: usize,
    expired: usize,
    failing: usize,
    rows: Vec<DeviceView>,
    notes: Vec<String>,
    empty: String,
    limit: usize,
    next_href: Option<String>,
    api_href: String,
}

pub(super) async fn devices_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
    RawQuery(raw): RawQuery,
) -> Response {
    let badge = super::alerts_api::badge(&state).await;
    let (q, mut notes) = match parse(raw) {
        Ok(q) => (q, Vec::new()),
        Err(e) => (DeviceQuery::default(), vec![e.message().to_string()]),
    };
    let (page, more) = match read(&state, q.clone()).await {
        Ok(p) => p,
        Err(e) => (DevicePage::default(), vec![e.message().to_string()]),
    };
    notes.extend(more);
    let sources = match (state.calls.is_some(), state.registrar_devices.is_some()) {
        (true, true) => "REGISTERs the capture saw, and Tandem's registrar",
        (true, false) => "REGISTERs the capture saw",
        (false, true) => "Tandem's registrar",
        (false, false) => "no source",
    };
    let next_href = page.next.as_ref().map(|n| {
        let next = DeviceQuery {
            after: cdr::devices::parse_cursor(n),
            ..q.clone()
        };
        format!("/devices?{}", next.to_query())
    });
    let first = DeviceQuery {
        after: None,
        ..q.clone()
    };
    let now = page.now_us;
    let view = DevicesPage {
        page: "devices",
        user: u.name.clone(),
        admin: u.role == Role::Admin,
        badge,
        f_user: q.user.as_ref().map(|f| f.to_text()).unwrap_or_default(),
        f_state: q
            .state
            .first()
            .map(|s| s.as_str())
            .unwrap_or("")
            .to_string(),
        f_ip: q.ip.as_ref().map(|n| n.to_text()).unwrap_or_default(),
        states: [
            ("", "any"),
            ("registered", "registered"),
            ("expired", "expired"),
            ("failing", "failing"),
        ],
        sources: sources.to_string(),
        since_us: page.since_us,
        since_iso: iso(Some(page.since_us)),
        since_utc: utc_text(Some(page.since_us)),
        total: page.total,
        registered: page.registered,
        expired: page.expired,
        failing: page.failing,
        empty: if page.total == 0 && first.user.is_none() && first.ip.is_none() {
            "No device has registered yet: phones appear here once they send REGISTER to \
             Tandem's registrar, or once a capture sees their REGISTERs."
                .to_string()
        } else {
            "No device matches this search.".to_string()
        },
        rows: page.devices.into_iter().map(|r| view(r, now)).collect(),
        notes,
        limit: q.limit,
        next_href,
        api_href: format!("/api/devices?{}", first.to_query()),
    };
    html(StatusCode::OK, view)
}
