//! Tandem's alert notifications: where an [`alerts::Alert`] goes once the engine has decided it.
//!
//! What it is: the `[alerts.action.NAME]` tables validated into [`Actions`] (every key checked,
//! secrets read once at start), and a [`Notifier`] that runs them on its own thread: a webhook
//! (the alert's JSON or a Slack text, optionally HMAC-signed), an email over SMTP (lettre,
//! STARTTLS, TLS or plain on loopback), Prometheus Alertmanager's v2 API (whose silences are
//! respected by the rule's other actions) and a script run without a shell. Each delivery is
//! retried with doubling backoff, logged and counted per action ([`NotifierStats`]).
//!
//! Never: blocks or waits in [`Notifier::submit`] (a full queue drops and counts), runs a
//! shell, logs a secret, or holds anything without a bound (queues, in-flight deliveries,
//! captured script output, response bodies).
//!
//! Start reading: [`Actions::from_config`] (what each type accepts), then [`Notifier`]'s
//! dispatcher and per-action workers in `notifier.rs`, then one action's module.

pub mod alertmanager;
mod config;
mod email;
mod http;
mod notifier;
mod script;
mod webhook;

pub use config::{Action, ActionKind, Actions};
pub use email::{Attachment, Email};
pub use notifier::{
    ALERTMANAGER_RESEND_MS_DEFAULT, ActionStats, IN_FLIGHT_PER_ACTION_MAX_DEFAULT, Notifier,
    NotifierOptions, NotifierStats, QUEUE_MAX_DEFAULT, SILENCES_CACHE_MS_DEFAULT,
};
pub use script::{SCRIPT_OUTPUT_BYTES_MAX, Script};
pub use webhook::{SIGNATURE_HEADER, Webhook, WebhookFormat, sign};

/// What one attempt of one delivery came to, when it did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Worth another attempt: a connection refused or reset, a timeout, a 5xx, 408 or 429, a
    /// script that exited non-zero.
    #[error("{0}")]
    Transient(String),
    /// Will fail the same way again (a 4xx: the URL, the signature key or the body is wrong):
    /// not retried, logged as a configuration problem.
    #[error("{0}")]
    Refused(String),
}
