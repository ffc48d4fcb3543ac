//! The login form, its answer (a session cookie, or a refusal counted against the name and the
//! address), and logout.

use super::{SESSION_COOKIE, Shared, cookie, html};
use crate::accounts::{AccountError, check_login, now_s};
use crate::login_form::{
    FormError, LOGIN_FORM_BYTES_MAX, LogText, LoginForm, client_address, local_target,
};
use crate::throttle::Account;
use askama::Template;
use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use std::net::SocketAddr;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    error: String,
    first_admin_hint: String,
}

#[derive(Deserialize)]
pub(super) struct LoginQuery {
    next: Option<String>,
}

pub(super) async fn login_page(
    State(state): State<Shared>,
    Query(q): Query<LoginQuery>,
) -> Response {
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

/// The answer to a login form. In order: the body is bounded and parsed, `next` checked; the
/// attempt is counted before its password is checked (the throttle may refuse it); the check
/// waits for one of the few Argon2 slots; only then is a session made.
pub(super) async fn login(
    State(state): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let form = match axum::body::to_bytes(body, LOGIN_FORM_BYTES_MAX).await {
        Ok(bytes) => LoginForm::parse(&bytes),
        Err(_) => Err(FormError::TooLong),
    };
    let form = match form {
        Ok(f) => f,
        Err(e) => {
            let status = match e {
                FormError::TooLong => StatusCode::PAYLOAD_TOO_LARGE,
                _ => StatusCode::BAD_REQUEST,
            };
            return page(status, "/".into(), e.to_string());
        }
    };
    let next = local_target(form.next.as_deref());
    let refused = |status, error: &str| page(status, next.clone(), error.to_owned());
    let forwarded = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok());
    let trusted = &state.throttle.config().trusted_proxies;
    let address = client_address(peer.ip(), forwarded, trusted);
    let name = LogText(&form.user);
    let account = if form.within_limits() {
        let state = state.clone();
        let user = form.user.clone();
        match tokio::task::spawn_blocking(move || state.accounts.login_account(&user)).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "console login");
                return refused(StatusCode::INTERNAL_SERVER_ERROR, "Login failed.");
            }
            Err(_) => return refused(StatusCode::INTERNAL_SERVER_ERROR, "Login failed."),
        }
    } else {
        None
    };
    let now = now_s();
    let reset = account.as_ref().map(|a| Account {
        reset_us: a.reset_us,
    });
    let ticket = match state.throttle.reserve(&form.user, reset, address, now) {
        Ok(t) => t,
        Err(r) => {
            tracing::debug!(user = %name, %address, limit = r.limit.as_str(), wait_s = r.wait_s, "console login refused");
            state
                .throttle
                .note_refusal(now, &name, address, r.limit.as_str());
            let wait = match (r.wait_s + 59) / 60 {
                1 => "a minute".to_owned(),
                minutes => format!("{minutes} minutes"),
            };
            return too_many(
                refused(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!("Too many failed logins: try again in {wait}."),
                ),
                r.wait_s,
            );
        }
    };
    if !form.within_limits() {
        tracing::warn!(user = %name, %address, "console login failed: the name or the password is longer than any account's");
        return refused(StatusCode::UNAUTHORIZED, WRONG);
    }
    let Some(mut slot) = state.checks.slot().await else {
        state.throttle.refund(ticket);
        state
            .throttle
            .note_refusal(now, &name, address, "all password checks busy");
        return too_many(
            refused(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many logins at once: try again in a moment.",
            ),
            1,
        );
    };
    let checked = {
        let state = state.clone();
        let (user, password) = (form.user.clone(), form.password);
        tokio::task::spawn_blocking(move || {
            let user = check_login(slot.memory(), &user, account.as_ref(), &password)?;
            drop(slot);
            user.map(|u| {
                let sid = state.accounts.new_session(&u.name, state.session_ttl_s)?;
                Ok::<_, AccountError>((u, sid))
            })
            .transpose()
        })
        .await
    };
    match checked {
        Ok(Ok(Some((user, sid)))) => {
            state.throttle.succeeded(ticket);
            tracing::info!(user = %LogText(&user.name), %address, "console login");
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
            tracing::warn!(user = %name, %address, "console login failed");
            refused(StatusCode::UNAUTHORIZED, WRONG)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "console login");
            refused(StatusCode::INTERNAL_SERVER_ERROR, "Login failed.")
        }
        Err(_) => refused(StatusCode::INTERNAL_SERVER_ERROR, "Login failed."),
    }
}

const WRONG: &str = "Wrong user name or password.";

fn page(status: StatusCode, next: String, error: String) -> Response {
    html(
        status,
        LoginPage {
            next,
            error,
            first_admin_hint: String::new(),
        },
    )
}

fn too_many(mut resp: Response, wait_s: i64) -> Response {
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait_s.max(1)));
    resp
}

pub(super) async fn logout(State(state): State<Shared>, headers: HeaderMap) -> Response {
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
