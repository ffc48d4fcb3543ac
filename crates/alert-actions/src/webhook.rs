//! The webhook: the alert's JSON line (`"kind":"alert"`, `"version":1`) POSTed as it is, or a
//! Slack-compatible `{"text": ...}`; signed with HMAC-SHA256 when a key is configured.

use alerts::{Alert, AlertState};
use hmac::{KeyInit, Mac};

use crate::DeliveryError;
use crate::config::Secret;
use crate::http;

/// The header carrying `sha256=HEX`, the HMAC-SHA256 of the exact body with the action's key.
pub const SIGNATURE_HEADER: &str = "X-Tandem-Signature";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookFormat {
    Json,
    Slack,
}

#[derive(Debug)]
pub struct Webhook {
    pub url: url::Url,
    pub format: WebhookFormat,
    pub(crate) secret: Option<Secret>,
}

impl Webhook {
    pub(crate) async fn send(&self, alert: &Alert) -> Result<(), DeliveryError> {
        let body = match self.format {
            WebhookFormat::Json => alert.json_line(),
            WebhookFormat::Slack => serde_json::json!({ "text": one_line(alert) }).to_string(),
        };
        let mut headers = Vec::new();
        if let Some(secret) = &self.secret {
            headers.push((
                SIGNATURE_HEADER,
                format!("sha256={}", sign(&secret.0, body.as_bytes())),
            ));
        }
        let resp = http::exchange(
            hyper::Method::POST,
            &self.url,
            Some("application/json"),
            &headers,
            body.into_bytes(),
        )
        .await?;
        http::judge(&self.url, &resp)
    }
}

/// Lowercase hex of HMAC-SHA256(key, body).
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(body);
    hex(&mac.finalize().into_bytes())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// One readable line: `FIRING critical: premium-destinations caller=2001: 3 calls to +882...`.
pub(crate) fn one_line(alert: &Alert) -> String {
    let state = match alert.state {
        AlertState::Firing if alert.repeat => "FIRING (again)",
        AlertState::Firing => "FIRING",
        AlertState::Resolved => "RESOLVED",
    };
    let key = if alert.key.is_empty() {
        String::new()
    } else {
        format!(" {}={}", alert.group_by, alert.key)
    };
    format!(
        "{state} {}: {}{key}: {}",
        alert.severity.as_str(),
        alert.rule,
        alert.summary
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
