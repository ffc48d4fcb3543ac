//! The login form, its answer (a session cookie, or a refusal counted against the name and the
//! address), and logout.

use super::{SESSION_COOKIE, Shared, cookie, html, local_target};
use crate::accounts::now_s;
use askama::Template;
use axum::extract::{ConnectInfo, Form, Query, State};
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

#[derive(Deserialize)]
pub(super) struct LoginForm {
    user: String,
    password: String,
    next: Option<String>,
}

pub(super) async fn login(
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
