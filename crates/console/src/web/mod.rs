//! The console's HTTP routes: login and logout, the dashboard, the JSON API and the embedded
//! assets. Every route but the login page and the assets needs a signed-in user (a session
//! cookie) or, for `/api/*`, an API token; without one a page redirects to the login and an
//! API call gets 401, never data. Nothing changes state through GET.

mod alerts_api;
mod alerts_page;
mod api;
mod call_legs;
mod calls_api;
mod calls_page;
mod devices_page;
pub(crate) mod export;
mod login;
mod page;
mod reports;

use crate::accounts::{Accounts, User};
use crate::dashboard::RANGES;
use crate::throttle::LoginThrottle;
use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use history::History;
use serde::Deserialize;
use std::sync::{Arc, Mutex};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tandem_session";

/// What every request handler shares.
pub struct ConsoleState {
    pub accounts: Accounts,
    pub throttle: LoginThrottle,
    /// Password checks at once, with their memory.
    pub checks: crate::password_checks::PasswordChecks,
    /// A reader of the metrics history (`None`: `[history]` is disabled).
    pub history: Option<Mutex<History>>,
    pub session_ttl_s: i64,
    /// Whether the console is served over TLS (the cookie is then `Secure`).
    pub tls: bool,
    /// The command that creates the first admin, shown while there is no user.
    pub first_admin_hint: String,
    /// The calls (`None`: no CDR database configured; the calls pages say so).
    pub calls: Option<Arc<crate::calls::Calls>>,
    /// The collector's sensors (`None`: `serve` runs no collector; no panel, no data).
    pub sensors: Option<crate::sensors::SensorsConfig>,
    /// The registrar's devices (`None`: `serve` runs no registrar; the Devices page shows the
    /// monitor's alone).
    pub registrar_devices: Option<crate::devices::RegistrarFeed>,
    /// The alert rules an admin edits (`None`: alerts are not enabled; the page says so).
    pub alert_rules: Option<Arc<dyn crate::alert_rules::AlertRules>>,
    /// The groups and their reports (`None`: `serve` hands none; the page says how they come).
    pub reports: Option<crate::reports::ReportsConfig>,
    /// The header badge's count of firing alerts, read at most every few seconds.
    pub badge: crate::alert_board::BadgeCache,
    /// Turns true when the console stops: long-lived answers (the live feed) end then.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

pub(crate) type Shared = Arc<ConsoleState>;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; media-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes over `state`.
pub fn router(state: Shared) -> Router {
    let private = Router::new()
        .route("/", get(|| async { Redirect::to("/dashboard") }))
        .route("/dashboard", get(page::dashboard_page))
        .route("/api/series", get(api::api_series))
        .route("/api/series-names", get(api::api_series_names))
        .route("/api/quantiles", get(api::api_quantiles))
        .route("/api/whoami", get(api::api_whoami))
        .route("/api/sensors", get(api::api_sensors))
        .route("/api/calls", get(calls_api::api_calls))
        .route("/api/calls/totals", get(calls_api::api_totals))
        .route("/api/calls/{uid}", get(calls_api::api_call))
        .route("/api/calls/{uid}/pcap", get(calls_api::api_pcap))
        .route("/api/calls/{uid}/audio/{file}", get(calls_api::api_audio))
        .route("/api/registrations", get(calls_api::api_registrations))
        .route("/api/devices", get(devices_page::api_devices))
        .route("/api/streams", get(calls_api::api_streams))
        .route("/api/streams/{uid}", get(calls_api::api_stream))
        .route("/api/streams/{uid}/pcap", get(calls_api::api_stream_pcap))
        .route(
            "/api/streams/{uid}/audio/{file}",
            get(calls_api::api_stream_audio),
        )
        .route("/api/live", get(calls_api::api_live))
        .route("/api/reports", get(reports::api_reports))
        .route("/reports", get(reports::reports_page))
        .route("/api/alerts", get(alerts_api::api_alerts))
        .route(
            "/api/alerts/rules",
            get(alerts_api::api_rules).put(alerts_api::api_put_rules),
        )
        .route("/api/alerts/rules/check", post(alerts_api::api_check_rules))
        .route("/api/alerts/{id}", get(alerts_api::api_alert))
        .route("/api/alerts/{id}/ack", post(alerts_api::api_ack))
        .route(
            "/api/silences",
            get(alerts_api::api_silences).post(alerts_api::api_add_silence),
        )
        .route("/api/silences/{id}/end", post(alerts_api::api_end_silence))
        .route("/alerts", get(alerts_page::alerts_page))
        .route("/calls", get(calls_page::calls_page))
        .route("/calls/{uid}", get(calls_page::call_page))
        .route("/live", get(calls_page::live_page))
        .route("/registrations", get(calls_page::registrations_page))
        .route("/devices", get(devices_page::devices_page))
        .route("/streams", get(calls_page::streams_page))
        .route("/streams/{uid}", get(calls_page::stream_page))
        .route("/logout", post(login::logout))
        .fallback(not_found)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_user));
    Router::new()
        .route("/login", get(login::login_page).post(login::login))
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
        .route("/assets/calls.js", get(calls_js))
        .merge(private)
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

async fn security_headers(req: axum::extract::Request, next: Next) -> Response {
    // A POST (or PUT, DELETE...) from another site is refused whatever its cookies (login CSRF
    // included).
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads && !same_origin(req.headers()) {
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

pub(crate) fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
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
        include_str!("../../assets/console.css"),
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("../../assets/console.js"),
    )
        .into_response()
}

async fn calls_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("../../assets/calls.js"),
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

pub(crate) fn html<T: Template>(status: StatusCode, page: T) -> Response {
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

#[derive(Debug, Default, Deserialize)]
pub struct RangeQuery {
    pub range: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub refresh: Option<u32>,
}

/// Widest range a page or a query may ask for: 20 years.
pub(crate) const SPAN_MAX_S: i64 = 20 * 366 * 86400;

impl RangeQuery {
    /// `(from, to, relative range name)`: an absolute range when both ends read and make sense,
    /// else the named relative range (default 1 h) ending now.
    pub fn resolve(&self, now: i64) -> (i64, i64, Option<&'static str>) {
        let from = self.from.as_deref().and_then(utc::parse_s);
        let to = self.to.as_deref().and_then(utc::parse_s);
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

#[cfg(test)]
mod tests {
    use super::*;

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

    use crate::sensors::{SensorState, SensorsConfig};
    use axum::body::Body;
    use tower::ServiceExt;

    /// A console with one viewer, no history and no calls, and `sensors`; its session cookie.
    fn console_with(sensors: Option<SensorsConfig>) -> (tempfile::TempDir, Shared, String) {
        let dir = tempfile::tempdir().unwrap();
        let accounts = Accounts::open(&crate::accounts::accounts_file(dir.path())).unwrap();
        accounts
            .add_user("ops", crate::Role::Viewer, "a long enough secret")
            .unwrap();
        let sid = accounts.new_session("ops", 3600).unwrap();
        let state = Arc::new(ConsoleState {
            accounts,
            throttle: LoginThrottle::new(crate::throttle::LoginConfig::default()),
            checks: crate::password_checks::PasswordChecks::new(
                1,
                std::time::Duration::from_secs(1),
            ),
            history: None,
            session_ttl_s: 3600,
            tls: false,
            first_admin_hint: String::new(),
            calls: None,
            sensors,
            registrar_devices: None,
            alert_rules: None,
            reports: None,
            badge: Default::default(),
            stopping: tokio::sync::watch::channel(false).1,
        });
        (dir, state, format!("{SESSION_COOKIE}={sid}"))
    }

    async fn get(state: &Shared, path: &str, cookie: Option<&str>) -> (StatusCode, String) {
        let mut req = axum::http::Request::get(path);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        let resp = router(state.clone())
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn two_sensors() -> SensorsConfig {
        let now = crate::sensors::now_us();
        SensorsConfig {
            feed: Arc::new(move || {
                vec![
                    SensorState {
                        name: "site-b".into(),
                        connected: true,
                        peer: "192.0.2.7:50412".into(),
                        last_seen_us: now - 2_000_000,
                        clock_skew_ms: 3_100,
                        lag_ms: 40,
                        records_received: 12_345,
                        records_stored: 12_340,
                        replayed: 8,
                        sessions: 2,
                        software: Some("tandem 0.1.0".into()),
                        ..SensorState::default()
                    },
                    SensorState {
                        name: "site-a".into(),
                        connected: false,
                        peer: "198.51.100.3:41000".into(),
                        last_seen_us: now - 754_000_000,
                        clock_skew_ms: -150,
                        records_received: 8,
                        records_stored: 8,
                        spilled: 3,
                        dropped: 1,
                        sessions: 1,
                        ..SensorState::default()
                    },
                ]
            }),
            clock_skew_warn_ms: 2_000,
        }
    }

    #[tokio::test]
    async fn the_sensors_are_behind_the_login_and_absent_without_a_collector() {
        let (_dir, state, cookie) = console_with(None);
        let (status, body) = get(&state, "/api/sensors", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        let (status, body) = get(&state, "/api/sensors", Some(&cookie)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("--collector-listen"));
        let (status, page) = get(&state, "/dashboard", Some(&cookie)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!page.contains("panel-sensors"), "no collector, no panel");
    }

    #[tokio::test]
    async fn the_dashboard_and_the_api_show_each_sensor_offline_ones_first() {
        let (_dir, state, cookie) = console_with(Some(two_sensors()));
        let (status, _) = get(&state, "/api/sensors", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, body) = get(&state, "/api/sensors", Some(&cookie)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["clock_skew_warn_ms"], 2_000);
        assert!(v["now_us"].as_i64().unwrap() > 0);
        let names: Vec<_> = v["sensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["site-a", "site-b"], "name order");
        let b = &v["sensors"][1];
        assert_eq!(b["connected"], true);
        assert_eq!(b["records_stored"], 12_340);
        assert_eq!(b["replayed"], 8);
        assert_eq!(b["software"], "tandem 0.1.0");

        // The panel shows without the history (its charts are missing, not the sensors).
        let (status, page) = get(&state, "/dashboard", Some(&cookie)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("metrics history is disabled"));
        let panel = &page[page.find("id=\"panel-sensors\"").expect("a Sensors panel")..];
        let panel = &panel[..panel.find("</section>").unwrap()];
        assert!(
            panel.contains("1 connected") && panel.contains("1 offline"),
            "{panel}"
        );
        let (a, b) = (
            panel.find("data-sensor=\"site-a\"").unwrap(),
            panel.find("data-sensor=\"site-b\"").unwrap(),
        );
        assert!(a < b, "the offline sensor comes first");
        let row_a = &panel[a..b];
        let row_b = &panel[b..];
        assert!(row_a.contains("class=\"state down\">Offline"), "{row_a}");
        assert!(row_a.contains("12 min ago"), "{row_a}");
        assert!(row_a.contains("\u{2212}150 ms") && !row_a.contains("skew warn"));
        assert!(row_a.contains("dropped bad\">1<"), "{row_a}");
        assert!(row_b.contains("class=\"state up\">Connected"), "{row_b}");
        assert!(
            row_b.contains("class=\"n skew warn\""),
            "3.1 s is past 2 s: {row_b}"
        );
        assert!(
            row_b.contains("+3.1 s") && row_b.contains("12,340"),
            "{row_b}"
        );
        assert!(row_b.contains("192.0.2.7:50412") && row_b.contains("tandem 0.1.0"));
    }
}
