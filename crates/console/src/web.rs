//! The console's HTTP routes: login and logout, the dashboard, the JSON API and the embedded
//! assets. Every route but the login page and the assets needs a signed-in user (a session
//! cookie) or, for `/api/*`, an API token; without one a page redirects to the login and an
//! API call gets 401, never data. Nothing changes state through GET.

use crate::accounts::{Accounts, Role, User, now_s};
use crate::chart::{COLOURS, format_value, iso_utc};
use crate::dashboard::{self, PANELS, RANGES};
use crate::throttle::LoginThrottle;
use askama::Template;
use axum::Router;
use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use history::History;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tandem_session";
/// Longest `name` a series query takes.
const SERIES_NAME_BYTES_MAX: usize = history::NAME_BYTES_MAX;
/// Most points `/api/series` returns per call.
const API_POINTS_MAX: usize = 2_000;

/// What every request handler shares.
pub struct ConsoleState {
    pub accounts: Accounts,
    pub throttle: LoginThrottle,
    /// A reader of the metrics history (`None`: `[history]` is disabled).
    pub history: Option<Mutex<History>>,
    pub session_ttl_s: i64,
    /// Whether the console is served over TLS (the cookie is then `Secure`).
    pub tls: bool,
    /// The command that creates the first admin, shown while there is no user.
    pub first_admin_hint: String,
}

type Shared = Arc<ConsoleState>;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; media-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes over `state`.
pub fn router(state: Shared) -> Router {
    let private = Router::new()
        .route("/", get(|| async { Redirect::to("/dashboard") }))
        .route("/dashboard", get(dashboard_page))
        .route("/api/series", get(api_series))
        .route("/api/series-names", get(api_series_names))
        .route("/api/quantiles", get(api_quantiles))
        .route("/api/whoami", get(api_whoami))
        .route("/logout", post(logout))
        .fallback(not_found)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_user));
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
        .merge(private)
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

async fn security_headers(req: axum::extract::Request, next: Next) -> Response {
    // A POST from another site is refused whatever its cookies (login CSRF included).
    if req.method() == Method::POST && !same_origin(req.headers()) {
        return (StatusCode::FORBIDDEN, "cross-site request refused\n").into_response();
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

/// An `Origin` header, when sent, must name this host.
fn same_origin(h: &HeaderMap) -> bool {
    let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin.split_once("://").map(|(_, rest)| rest);
    matches!((origin_host, host), (Some(o), Some(h)) if o == h)
}

fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The user of a request: its session cookie, or its Bearer token on `/api/*`.
async fn user_of(state: &Shared, headers: &HeaderMap, uri: &Uri) -> Option<User> {
    let sid = cookie(headers, SESSION_COOKIE).map(str::to_owned);
    let bearer = if uri.path().starts_with("/api/") {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_owned())
    } else {
        None
    };
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let by_session = sid.and_then(|sid| state.accounts.session_user(&sid).ok().flatten());
        by_session.or_else(|| bearer.and_then(|t| state.accounts.token_user(&t).ok().flatten()))
    })
    .await
    .ok()
    .flatten()
}

async fn require_user(
    State(state): State<Shared>,
    mut req: axum::extract::Request,
    next: Next,
) -> Response {
    match user_of(&state, req.headers(), req.uri()).await {
        Some(user) => {
            req.extensions_mut().insert(user);
            next.run(req).await
        }
        None => refuse(req.uri()),
    }
}

/// The answer to a request without a user: 401 on the API, the login page elsewhere.
fn refuse(uri: &Uri) -> Response {
    if uri.path().starts_with("/api/") {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"tandem\"")],
            axum::Json(
                serde_json::json!({"error": "sign in, or send Authorization: Bearer TOKEN"}),
            ),
        )
            .into_response();
    }
    let next = uri.path_and_query().map_or("/dashboard", |p| p.as_str());
    Redirect::to(&format!("/login?next={}", url_encode(next))).into_response()
}

async fn not_found(State(state): State<Shared>, req: axum::extract::Request) -> Response {
    if user_of(&state, req.headers(), req.uri()).await.is_none() {
        return refuse(req.uri());
    }
    (StatusCode::NOT_FOUND, "no such page\n").into_response()
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("../assets/console.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("../assets/console.js"),
    )
        .into_response()
}

pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Where to go after the login: a path on this site only (no `//host`, no scheme).
fn local_target(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_owned(),
        _ => "/dashboard".to_owned(),
    }
}

fn html<T: Template>(status: StatusCode, page: T) -> Response {
    match page.render() {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the page failed: {e}\n"),
        )
            .into_response(),
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    error: String,
    first_admin_hint: String,
}

#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
}

async fn login_page(State(state): State<Shared>, Query(q): Query<LoginQuery>) -> Response {
    let empty = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || state.accounts.is_empty().unwrap_or(false))
            .await
            .unwrap_or(false)
    };
    html(
        StatusCode::OK,
        LoginPage {
            next: local_target(q.next.as_deref()),
            error: String::new(),
            first_admin_hint: if empty {
                state.first_admin_hint.clone()
            } else {
                String::new()
            },
        },
    )
}

#[derive(Deserialize)]
struct LoginForm {
    user: String,
    password: String,
    next: Option<String>,
}

async fn login(
    State(state): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = local_target(form.next.as_deref());
    let refused = |status, error: String| {
        html(
            status,
            LoginPage {
                next: next.clone(),
                error,
                first_admin_hint: String::new(),
            },
        )
    };
    let now = now_s();
    if let Err(wait_s) = state.throttle.check(&form.user, peer.ip(), now) {
        tracing::warn!(user = %form.user, address = %peer.ip(), "console login refused: too many failures");
        let mut resp = refused(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Too many failed logins: try again in {} minutes.",
                (wait_s + 59) / 60
            ),
        );
        if let Ok(v) = HeaderValue::from_str(&wait_s.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return resp;
    }
    let checked = {
        let state = state.clone();
        let (user, password) = (form.user.clone(), form.password);
        tokio::task::spawn_blocking(move || {
            let user = state.accounts.verify_password(&user, &password)?;
            user.map(|u| {
                let sid = state.accounts.new_session(&u.name, state.session_ttl_s)?;
                Ok::<_, crate::accounts::AccountError>((u, sid))
            })
            .transpose()
        })
        .await
    };
    match checked {
        Ok(Ok(Some((user, sid)))) => {
            state.throttle.succeeded(&user.name);
            tracing::info!(user = %user.name, address = %peer.ip(), "console login");
            let cookie = format!(
                "{SESSION_COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
                state.session_ttl_s,
                if state.tls { "; Secure" } else { "" }
            );
            let mut resp = Redirect::to(&next).into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp
        }
        Ok(Ok(None)) => {
            state.throttle.failed(&form.user, peer.ip(), now);
            tracing::warn!(user = %form.user, address = %peer.ip(), "console login failed");
            refused(
                StatusCode::UNAUTHORIZED,
                "Wrong user name or password.".into(),
            )
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "console login");
            refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Login failed: {e}"),
            )
        }
        Err(e) => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Login failed: {e}"),
        ),
    }
}

async fn logout(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(sid) = cookie(&headers, SESSION_COOKIE).map(str::to_owned) {
        let state = state.clone();
        let _ = tokio::task::spawn_blocking(move || state.accounts.end_session(&sid)).await;
    }
    let mut resp = Redirect::to("/login").into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("tandem_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    resp
}

async fn api_whoami(axum::Extension(user): axum::Extension<User>) -> Response {
    axum::Json(serde_json::json!({"user": user.name, "role": user.role.as_str()})).into_response()
}

/// A time range asked for by a page or an API call.
#[derive(Debug, Default, Deserialize)]
pub struct RangeQuery {
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub refresh: Option<u32>,
}

/// Widest range a page or a query may ask for: 20 years.
const SPAN_MAX_S: i64 = 20 * 366 * 86400;

impl RangeQuery {
    /// `(from, to, relative range name)`: an absolute range when both ends read and make sense,
    /// else the named relative range (default 1 h) ending now.
    pub fn resolve(&self, now: i64) -> (i64, i64, Option<&'static str>) {
        let from = self.from.as_deref().and_then(dashboard::parse_time);
        let to = self.to.as_deref().and_then(dashboard::parse_time);
        if let (Some(f), Some(t)) = (from, to)
            && t - f >= 60
            && t - f <= SPAN_MAX_S
        {
            return (f, t, None);
        }
        let (name, span) = RANGES
            .iter()
            .find(|(n, _)| Some(*n) == self.range.as_deref())
            .copied()
            .unwrap_or(RANGES[1]);
        (now - span, now, Some(name))
    }
}

#[derive(Deserialize)]
struct SeriesQuery {
    name: String,
    from: Option<String>,
    to: Option<String>,
    points: Option<usize>,
}

fn api_error(status: StatusCode, msg: String) -> Response {
    (status, axum::Json(serde_json::json!({"error": msg}))).into_response()
}

async fn api_series(State(state): State<Shared>, Query(q): Query<SeriesQuery>) -> Response {
    if q.name.is_empty() || q.name.len() > SERIES_NAME_BYTES_MAX {
        return api_error(
            StatusCode::BAD_REQUEST,
            format!("name: 1 to {SERIES_NAME_BYTES_MAX} bytes"),
        );
    }
    let now = now_s();
    let parse = |v: &Option<String>, what: &str| match v.as_deref() {
        None => Ok(None),
        Some(s) => dashboard::parse_time(s)
            .map(Some)
            .ok_or_else(|| format!("{what}={s:?}: seconds since the epoch or 2026-11-25T14:30Z")),
    };
    let (from, to) = match (parse(&q.from, "from"), parse(&q.to, "to")) {
        (Ok(f), Ok(t)) => (f.unwrap_or(now - 3600), t.unwrap_or(now)),
        (Err(e), _) | (_, Err(e)) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    if to <= from || to - from > SPAN_MAX_S {
        return api_error(
            StatusCode::BAD_REQUEST,
            "from must be before to, at most 20 years apart".into(),
        );
    }
    let points = q.points.unwrap_or(1000).clamp(1, API_POINTS_MAX);
    let result = tokio::task::spawn_blocking(move || {
        let Some(h) = &state.history else {
            return Err("the metrics history is disabled ([history] enabled = false)".to_owned());
        };
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        h.query(&q.name, from, to, points)
            .map(|d| (q.name, d))
            .map_err(|e| e.to_string())
    })
    .await;
    match result {
        Ok(Ok((name, data))) => {
            let pts: Vec<serde_json::Value> = data
                .points
                .iter()
                .map(|p| serde_json::json!({"t": p.t_s, "min": p.min, "max": p.max, "avg": p.avg, "last": p.last, "count": p.count}))
                .collect();
            axum::Json(serde_json::json!({
                "name": name, "from": from, "to": to,
                "level": data.level, "width_s": data.width_s, "points": pts,
            }))
            .into_response()
        }
        Ok(Err(e)) => api_error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Deserialize)]
struct QuantileQuery {
    name: String,
    from: Option<String>,
    to: Option<String>,
    /// Comma-separated quantiles, 0 to 1 (default 0.5,0.9,0.99).
    q: Option<String>,
    points: Option<usize>,
}

/// Most quantiles one call may ask for.
const QUANTILES_MAX: usize = 16;

/// `GET /api/quantiles?name=&from=&to=&q=0.5,0.99`: a latency series' quantiles per bucket at
/// the chosen level, and over the whole range (from the merged sketches, not an average).
async fn api_quantiles(State(state): State<Shared>, Query(q): Query<QuantileQuery>) -> Response {
    if q.name.is_empty() || q.name.len() > SERIES_NAME_BYTES_MAX {
        return api_error(
            StatusCode::BAD_REQUEST,
            format!("name: 1 to {SERIES_NAME_BYTES_MAX} bytes"),
        );
    }
    let qs: Result<Vec<f64>, String> =
        q.q.as_deref()
            .unwrap_or("0.5,0.9,0.99")
            .split(',')
            .take(QUANTILES_MAX + 1)
            .map(|x| match x.trim().parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
                _ => Err(format!("q={x:?}: quantiles are numbers from 0 to 1")),
            })
            .collect();
    let qs = match qs {
        Ok(v) if v.len() <= QUANTILES_MAX => v,
        Ok(_) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                format!("at most {QUANTILES_MAX} quantiles"),
            );
        }
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    let now = now_s();
    let from = q
        .from
        .as_deref()
        .and_then(dashboard::parse_time)
        .unwrap_or(now - 3600);
    let to =
        q.to.as_deref()
            .and_then(dashboard::parse_time)
            .unwrap_or(now);
    if to <= from || to - from > SPAN_MAX_S {
        return api_error(
            StatusCode::BAD_REQUEST,
            "from must be before to, at most 20 years apart".into(),
        );
    }
    let points = q.points.unwrap_or(1000).clamp(1, API_POINTS_MAX);
    let name = q.name.clone();
    let result = tokio::task::spawn_blocking(move || {
        let Some(h) = &state.history else {
            return Err("the metrics history is disabled ([history] enabled = false)".to_owned());
        };
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        h.quantiles(&name, from, to, points, &qs)
            .map(|d| (qs, d))
            .map_err(|e| e.to_string())
    })
    .await;
    match result {
        Ok(Ok((qs, data))) => {
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
        Ok(Err(e)) => api_error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn api_series_names(State(state): State<Shared>) -> Response {
    let names = tokio::task::spawn_blocking(move || match &state.history {
        Some(h) => h
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .series_names()
            .map_err(|e| e.to_string()),
        None => Ok(Vec::new()),
    })
    .await;
    match names {
        Ok(Ok(n)) => axum::Json(serde_json::json!({ "names": n })).into_response(),
        Ok(Err(e)) => api_error(StatusCode::SERVICE_UNAVAILABLE, e),
        Err(e) => api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

struct LinkView {
    label: String,
    href: String,
    active: bool,
}

struct LegendView {
    label: String,
    class: String,
    index: usize,
    latest: String,
}

struct ChartView {
    id: String,
    title: String,
    svg: String,
    legend: Vec<LegendView>,
}

struct PanelView {
    id: String,
    title: String,
    source: String,
    charts: Vec<ChartView>,
    has_data: bool,
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct DashboardPage {
    user: String,
    admin: bool,
    ranges: Vec<LinkView>,
    refreshes: Vec<LinkView>,
    refresh_s: u32,
    from_s: i64,
    to_s: i64,
    from_iso: String,
    to_iso: String,
    from_input: String,
    to_input: String,
    zoom_out: String,
    earlier: String,
    later: String,
    level_note: String,
    panels: Vec<PanelView>,
    error: String,
}

fn range_href(from: i64, to: i64) -> String {
    format!("/dashboard?from={from}&to={to}")
}

async fn dashboard_page(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Query(q): Query<RangeQuery>,
) -> Response {
    let now = now_s();
    let (from, to, relative) = q.resolve(now);
    // Auto-refresh only moves a range that ends now.
    let refresh_s = match (relative, q.refresh) {
        (Some(_), Some(r @ (10 | 60))) => r,
        _ => 0,
    };
    let built = tokio::task::spawn_blocking(move || -> Result<(Vec<PanelView>, String), String> {
        let Some(h) = &state.history else {
            return Err("The metrics history is disabled ([history] enabled = false): there is nothing to chart.".into());
        };
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        let names = h.series_names().map_err(|e| e.to_string())?;
        let level = h.level_for(from, to, dashboard::CHART_POINTS_MAX);
        let lc = &h.config().levels[level];
        let level_note = format!("{} buckets of {} s", lc.name, lc.width_s);
        let mut panels = Vec::new();
        for def in PANELS {
            let mut charts = Vec::new();
            for cdef in def.charts {
                let chart = dashboard::chart(&mut h, &names, cdef, from, to, now)
                    .map_err(|e| e.to_string())?;
                let legend = chart
                    .series
                    .iter()
                    .enumerate()
                    .map(|(i, s)| LegendView {
                        label: s.label.clone(),
                        class: format!("c{}", i % COLOURS.len()),
                        index: i,
                        latest: s
                            .points
                            .last()
                            .map(|p| format_value(p.avg, chart.unit))
                            .unwrap_or_default(),
                    })
                    .collect();
                charts.push(ChartView {
                    id: chart.id.clone(),
                    title: chart.title.clone(),
                    svg: chart.svg(),
                    legend,
                });
            }
            let has_data = charts.iter().any(|c| !c.legend.is_empty());
            panels.push(PanelView {
                id: def.id.to_owned(),
                title: def.title.to_owned(),
                source: def.source.to_owned(),
                charts,
                has_data,
            });
        }
        Ok((panels, level_note))
    })
    .await;
    let (panels, level_note, error) = match built {
        Ok(Ok((p, l))) => (p, l, String::new()),
        Ok(Err(e)) => (Vec::new(), String::new(), e),
        Err(e) => (Vec::new(), String::new(), e.to_string()),
    };
    let span = to - from;
    let mid = from + span / 2;
    let (zf, zt) = (mid - span, (mid + span).min(now.max(to)));
    let keep_refresh = |href: String| {
        if refresh_s > 0 {
            format!("{href}&refresh={refresh_s}")
        } else {
            href
        }
    };
    let ranges = RANGES
        .iter()
        .map(|(name, _)| LinkView {
            label: name.to_string(),
            href: keep_refresh(format!("/dashboard?range={name}")),
            active: relative == Some(*name),
        })
        .collect();
    let base = match relative {
        Some(r) => format!("/dashboard?range={r}"),
        None => range_href(from, to),
    };
    let refreshes = [(0, "off"), (10, "10 s"), (60, "1 min")]
        .iter()
        .map(|(r, label)| LinkView {
            label: label.to_string(),
            href: if *r == 0 {
                base.clone()
            } else {
                format!("{base}&refresh={r}")
            },
            active: *r == refresh_s,
        })
        .collect();
    let input = |t: i64| iso_utc(t)[..16].to_owned();
    html(
        StatusCode::OK,
        DashboardPage {
            user: user.name,
            admin: user.role == Role::Admin,
            ranges,
            refreshes,
            refresh_s,
            from_s: from,
            to_s: to,
            from_iso: iso_utc(from),
            to_iso: iso_utc(to),
            from_input: input(from),
            to_input: input(to),
            zoom_out: range_href(zf, zt),
            earlier: range_href(from - span / 2, to - span / 2),
            later: range_href(from + span / 2, to + span / 2),
            level_note,
            panels,
            error,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_only_sends_back_to_this_site() {
        assert_eq!(
            local_target(Some("/dashboard?range=1h")),
            "/dashboard?range=1h"
        );
        assert_eq!(local_target(Some("//evil.example/")), "/dashboard");
        assert_eq!(local_target(Some("https://evil.example/")), "/dashboard");
        assert_eq!(local_target(Some("/\\evil.example")), "/dashboard");
        assert_eq!(local_target(None), "/dashboard");
    }

    #[test]
    fn a_range_is_relative_unless_both_ends_make_sense() {
        let q = RangeQuery {
            range: Some("24h".into()),
            ..Default::default()
        };
        assert_eq!(q.resolve(100_000), (13_600, 100_000, Some("24h")));
        let q = RangeQuery {
            from: Some("1000".into()),
            to: Some("5000".into()),
            ..Default::default()
        };
        assert_eq!(q.resolve(100_000), (1000, 5000, None));
        let q = RangeQuery {
            from: Some("5000".into()),
            to: Some("1000".into()),
            ..Default::default()
        };
        assert_eq!(q.resolve(100_000), (96_400, 100_000, Some("1h")));
    }

    #[test]
    fn a_cross_site_post_is_told_apart() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9574"));
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9574"),
        );
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h));
    }
}
