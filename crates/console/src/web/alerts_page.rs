//! The Alerts page: a shell that names the user and reads the alerts API (`alerts_api.rs`)
//! from `assets/calls.js`. The rules editor is drawn for an admin only.

use super::{Shared, html};
use crate::accounts::{Role, User};
use crate::alert_board::BadgeCounts;
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

#[derive(Template)]
#[template(path = "alerts.html")]
struct AlertsPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
}

pub(super) async fn alerts_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
) -> Response {
    let page = AlertsPage {
        page: "alerts",
        admin: u.role == Role::Admin,
        user: u.name,
        badge: super::alerts_api::badge(&state).await,
    };
    html(StatusCode::OK, page)
}
