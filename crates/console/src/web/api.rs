//! `/api/*`: JSON for the pages and for scripts (session cookie or Bearer token). Every answer
//! is JSON; an error is `{"error": "..."}` with a status that says whose fault it was.

use super::{SPAN_MAX_S, Shared};
use crate::accounts::{User, now_s};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use history::History;
use serde::Deserialize;

/// Longest `name` a query takes.
const SERIES_NAME_BYTES_MAX: usize = history::NAME_BYTES_MAX;
/// Most points a query returns per call.
const API_POINTS_MAX: usize = 2_000;
/// Most quantiles one call may ask for.
const QUANTILES_MAX: usize = 16;

/// An answer other than the data: its status and what to say.
pub(super) struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(serde_json::json!({"error": self.1}))).into_response()
    }
}

impl ApiError {
    /// What the answer says.
    pub(super) fn message(&self) -> &str {
        &self.1
    }
}

pub(super) fn api_error(status: StatusCode, msg: impl Into<String>) -> ApiError {
    ApiError(status, msg.into())
}

/// The series name, the range (default: the last hour) and the points of a query, or the 400
/// that says what is wrong with them.
fn series_range(
    name: &str,
    from: Option<&str>,
    to: Option<&str>,
    points: Option<usize>,
) -> Result<(i64, i64, usize), ApiError> {
    if name.is_empty() || name.len() > SERIES_NAME_BYTES_MAX {
        let msg = format!("name: 1 to {SERIES_NAME_BYTES_MAX} bytes");
        return Err(api_error(StatusCode::BAD_REQUEST, msg));
    }
    let now = now_s();
    let parse = |v: Option<&str>, what: &str, default: i64| match v {
        None => Ok(default),
        Some(s) => utc::parse_s(s).ok_or_else(|| {
            let msg = format!("{what}={s:?}: seconds since the epoch or 2026-11-25T14:30Z");
            api_error(StatusCode::BAD_REQUEST, msg)
        }),
    };
    let (from, to) = (parse(from, "from", now - 3600)?, parse(to, "to", now)?);
    if to <= from || to - from > SPAN_MAX_S {
        let msg = "from must be before to, at most 20 years apart";
        return Err(api_error(StatusCode::BAD_REQUEST, msg));
    }
    Ok((from, to, points.unwrap_or(1000).clamp(1, API_POINTS_MAX)))
}

/// Runs `read` on the history reader, off the async threads (SQLite blocks).
async fn with_history<T: Send + 'static>(
    state: Shared,
    read: impl FnOnce(&mut History) -> Result<T, history::HistoryError> + Send + 'static,
) -> Result<T, ApiError> {
    let result = tokio::task::spawn_blocking(move || {
        let Some(h) = &state.history else {
            let msg = "the metrics history is disabled ([history] enabled = false)";
            return Err(api_error(StatusCode::SERVICE_UNAVAILABLE, msg));
        };
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        read(&mut h).map_err(|e| api_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
    })
    .await;
    result.unwrap_or_else(|e| Err(api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())))
}

pub(super) async fn api_whoami(axum::Extension(user): axum::Extension<User>) -> Response {
    axum::Json(serde_json::json!({"user": user.name, "role": user.role.as_str()})).into_response()
}

#[derive(Deserialize)]
pub(super) struct SeriesQuery {
    name: String,
    from: Option<String>,
    to: Option<String>,
    points: Option<usize>,
}

/// `GET /api/series?name=&from=&to=`: the buckets of a series at the level that draws the range
/// in about `points` (default 1,000), as `{t, min, max, avg, last, count}`.
pub(super) async fn api_series(
    State(state): State<Shared>,
    Query(q): Query<SeriesQuery>,
) -> Response {
    let (from, to, points) =
        match series_range(&q.name, q.from.as_deref(), q.to.as_deref(), q.points) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
    let name = q.name.clone();
    match with_history(state, move |h| h.query(&name, from, to, points)).await {
        Ok(data) => {
            let pts: Vec<serde_json::Value> = data
                .points
                .iter()
                .map(|p| serde_json::json!({"t": p.t_s, "min": p.min, "max": p.max, "avg": p.avg, "last": p.last, "count": p.count}))
                .collect();
            axum::Json(serde_json::json!({
                "name": q.name, "from": from, "to": to,
                "level": data.level, "width_s": data.width_s, "points": pts,
            }))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
pub(super) struct QuantileQuery {
    name: String,
    from: Option<String>,
    to: Option<String>,
    /// Comma-separated quantiles, 0 to 1 (default 0.5,0.9,0.99).
    q: Option<String>,
    points: Option<usize>,
}

/// `GET /api/quantiles?name=&from=&to=&q=0.5,0.99`: a latency series' quantiles per bucket at
/// the chosen level, and over the whole range (from the merged sketches, not an average).
pub(super) async fn api_quantiles(
    State(state): State<Shared>,
    Query(q): Query<QuantileQuery>,
) -> Response {
    let (from, to, points) =
        match series_range(&q.name, q.from.as_deref(), q.to.as_deref(), q.points) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
    let asked: Vec<&str> =
        q.q.as_deref()
            .unwrap_or("0.5,0.9,0.99")
            .split(',')
            .collect();
    if asked.len() > QUANTILES_MAX {
        let msg = format!("at most {QUANTILES_MAX} quantiles");
        return api_error(StatusCode::BAD_REQUEST, msg).into_response();
    }
    let mut qs = Vec::with_capacity(asked.len());
    for x in asked {
        match x.trim().parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => qs.push(v),
            _ => {
                let msg = format!("q={x:?}: quantiles are numbers from 0 to 1");
                return api_error(StatusCode::BAD_REQUEST, msg).into_response();
            }
        }
    }
    let (name, wanted) = (q.name.clone(), qs.clone());
    match with_history(state, move |h| {
        h.quantiles(&name, from, to, points, &wanted)
    })
    .await
    {
        Ok(data) => {
            let pts: Vec<serde_json::Value> = data
                .points
                .iter()
                .map(|p| serde_json::json!({"t": p.t_s, "count": p.count, "values": p.values}))
                .collect();
            axum::Json(serde_json::json!({
                "name": q.name, "from": from, "to": to, "level": data.level,
                "width_s": data.width_s, "quantiles": qs, "points": pts,
                "count": data.count, "whole": data.whole,
            }))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /api/sensors`: the collector's sensors now (`crate::sensors::SensorsAnswer`): every
/// sensor seen since `serve` started, in name order; 404 when `serve` runs no collector.
pub(super) async fn api_sensors(State(state): State<Shared>) -> Response {
    let Some(sensors) = &state.sensors else {
        let msg = "no collector runs in this serve: start it with --collector-listen and --collector-postgres ([collector] in tandem.toml)";
        return api_error(StatusCode::NOT_FOUND, msg).into_response();
    };
    axum::Json(sensors.read(crate::sensors::now_us())).into_response()
}

/// `GET /api/series-names`: every series the history keeps.
pub(super) async fn api_series_names(State(state): State<Shared>) -> Response {
    // Without a history there is nothing kept: an empty list, not an error.
    if state.history.is_none() {
        return axum::Json(serde_json::json!({ "names": [] })).into_response();
    }
    match with_history(state, |h| h.series_names()).await {
        Ok(names) => axum::Json(serde_json::json!({ "names": names })).into_response(),
        Err(e) => e.into_response(),
    }
}
