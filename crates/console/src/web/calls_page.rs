//! The calls, call, live, registrations and streams pages: shells that name the user and read
//! the calls API (`calls_api.rs`) from `assets/calls.js`.

use super::{Shared, html};
use crate::accounts::{Role, User};
use crate::alert_board::BadgeCounts;
use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

#[derive(Template)]
#[template(path = "calls.html")]
struct CallsPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
}

#[derive(Template)]
#[template(path = "call.html")]
struct CallPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
    uid: String,
}

#[derive(Template)]
#[template(path = "live.html")]
struct LivePage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
}

#[derive(Template)]
#[template(path = "registrations.html")]
struct RegistrationsPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
}

fn admin(u: &User) -> bool {
    u.role == Role::Admin
}

pub(super) async fn calls_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
) -> Response {
    let admin = admin(&u);
    let page = CallsPage {
        page: "calls",
        user: u.name,
        admin,
        badge: super::alerts_api::badge(&state).await,
    };
    html(StatusCode::OK, page)
}

pub(super) async fn call_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
    Path(uid): Path<String>,
) -> Response {
    let admin = admin(&u);
    // The uid goes into an attribute: askama escapes it.
    let page = CallPage {
        page: "calls",
        user: u.name,
        admin,
        badge: super::alerts_api::badge(&state).await,
        uid,
    };
    html(StatusCode::OK, page)
}

pub(super) async fn live_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
) -> Response {
    let admin = admin(&u);
    let page = LivePage {
        page: "live",
        user: u.name,
        admin,
        badge: super::alerts_api::badge(&state).await,
    };
    html(StatusCode::OK, page)
}

pub(super) async fn registrations_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
) -> Response {
    let admin = admin(&u);
    let page = RegistrationsPage {
        page: "registrations",
        user: u.name,
        admin,
        badge: super::alerts_api::badge(&state).await,
    };
    html(StatusCode::OK, page)
}

#[derive(Template)]
#[template(path = "streams.html")]
struct StreamsPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
}

#[derive(Template)]
#[template(path = "stream.html")]
struct StreamPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
    uid: String,
}

pub(super) async fn streams_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
) -> Response {
    let admin = admin(&u);
    let page = StreamsPage {
        page: "streams",
        user: u.name,
        admin,
        badge: super::alerts_api::badge(&state).await,
    };
    html(StatusCode::OK, page)
}

pub(super) async fn stream_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
    Path(uid): Path<String>,
) -> Response {
    let admin = admin(&u);
    // The uid goes into an attribute: askama escapes it.
    let page = StreamPage {
        page: "streams",
        user: u.name,
        admin,
        badge: super::alerts_api::badge(&state).await,
        uid,
    };
    html(StatusCode::OK, page)
}
