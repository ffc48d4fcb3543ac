//! The email: one plain-text message per alert over SMTP (lettre on tokio, rustls with ring),
//! with STARTTLS (default), TLS from the first byte, or no TLS to a loopback server.

use std::net::IpAddr;
use std::time::Duration;

use alerts::{ActionConfig, Alert, AlertState};
use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::DeliveryError;
use crate::config::{Check, EMAIL_TO_MAX};

/// Call uids listed in an email's body (the console links to all of them).
pub const EMAIL_CALLS_MAX: usize = 100;

pub struct Email {
    pub server: String,
    pub port: u16,
    pub security: &'static str,
    pub from: Mailbox,
    pub to: Vec<Mailbox>,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl std::fmt::Debug for Email {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Email")
            .field("server", &self.server)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("from", &self.from)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

impl Email {
    pub(crate) fn from_config(
        check: &mut Check<'_>,
        c: &ActionConfig,
        timeout_ms: u64,
    ) -> Option<Email> {
        let security = match c.security.as_deref().unwrap_or("starttls") {
            "starttls" => "starttls",
            "tls" => "tls",
            "none" => "none",
            other => {
                check.fail("security", format!("{other:?}: starttls, tls or none"));
                "starttls"
            }
        };
        let default_port = match security {
            "tls" => 465,
            "none" => 25,
            _ => 587,
        };
        let server = match c.server.as_deref() {
            None => {
                check.fail("server", "missing: the SMTP server, host or host:port");
                None
            }
            Some(s) => match host_port(s, default_port) {
                Some(hp) => Some(hp),
                None => {
                    check.fail("server", format!("{s:?}: host or host:port"));
                    None
                }
            },
        };
        if let Some((host, _)) = &server
            && security == "none"
            && !c.allow_plain
            && !loopback(host)
        {
            check.fail(
                "security",
                format!(
                    "\"none\" sends in clear to {host}: use starttls or tls, or set allow_plain = true"
                ),
            );
        }
        let from = match c.from.as_deref() {
            None => {
                check.fail("from", "missing: the sender's address");
                None
            }
            Some(f) => match f.parse::<Mailbox>() {
                Ok(m) => Some(m),
                Err(e) => {
                    check.fail("from", format!("{f:?}: {e}"));
                    None
                }
            },
        };
        if c.to.is_empty() {
            check.fail("to", "missing: one address or more");
        } else if c.to.len() > EMAIL_TO_MAX {
            check.fail("to", format!("at most {EMAIL_TO_MAX} addresses"));
        }
        let mut to = Vec::new();
        for t in &c.to {
            match t.parse::<Mailbox>() {
                Ok(m) => to.push(m),
                Err(e) => check.fail("to", format!("{t:?}: {e}")),
            }
        }
        let credentials = match (&c.username, &c.password_file) {
            (Some(user), Some(file)) => check.secret_file("password_file", file).map(|p| {
                Credentials::new(user.clone(), String::from_utf8_lossy(&p.0).into_owned())
            }),
            (None, None) => None,
            (Some(_), None) => {
                check.fail("username", "needs password_file");
                None
            }
            (None, Some(_)) => {
                check.fail("password_file", "needs username");
                None
            }
        };
        let (host, port) = server?;
        let from = from?;
        let builder = match security {
            "none" => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
                host.clone(),
            )),
            "tls" => AsyncSmtpTransport::<Tokio1Executor>::relay(&host),
            _ => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&host),
        };
        // lettre reads the system's CA certificates (or SSL_CERT_FILE's) here.
        let builder = match builder {
            Ok(b) => b,
            Err(e) => {
                check.fail("server", format!("{host}: TLS: {e}"));
                return None;
            }
        };
        let mut builder = builder
            .port(port)
            .timeout(Some(Duration::from_millis(timeout_ms)))
            .hello_name(ClientId::Domain(crate::alertmanager::hostname()));
        if let Some(creds) = credentials {
            builder = builder.credentials(creds);
        }
        Some(Email {
            server: host,
            port,
            security,
            from,
            to,
            transport: builder.build(),
        })
    }

    pub(crate) async fn send(&self, alert: &Alert) -> Result<(), DeliveryError> {
        let mut m = Message::builder()
            .from(self.from.clone())
            .subject(subject(alert))
            .header(ContentType::TEXT_PLAIN);
        for to in &self.to {
            m = m.to(to.clone());
        }
        let message = m
            .body(body(alert))
            .map_err(|e| DeliveryError::Refused(format!("the message: {e}")))?;
        self.deliver(message).await
    }

    async fn deliver(&self, message: Message) -> Result<(), DeliveryError> {
        let at = format!("{}:{} ({})", self.server, self.port, self.security);
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            // A permanent (5xx) answer: a recipient or the login refused.
            Err(e) if e.is_permanent() => Err(DeliveryError::Refused(format!("{at}: {e}"))),
            Err(e) => Err(DeliveryError::Transient(format!("{at}: {e}"))),
        }
    }
}

/// A file attached to a report email.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub file_name: String,
    /// `text/csv; charset=utf-8`.
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Email {
    /// An SMTP sender from an `email` action's keys (`server`, `security`, `allow_plain`,
    /// `username`, `password_file`, `from`, `to`), for mail other than alerts (the daily
    /// report); every problem names `name` and the key, as `[alerts.action.NAME]`'s do.
    pub fn from_settings(
        name: &str,
        c: &ActionConfig,
        timeout_ms: u64,
    ) -> Result<Email, Vec<alerts::RuleError>> {
        let mut errors = Vec::new();
        let mut check = Check {
            action: name,
            errors: &mut errors,
        };
        let email = Email::from_config(&mut check, c, timeout_ms);
        match email {
            Some(e) if errors.is_empty() => Ok(e),
            _ => Err(errors),
        }
    }

    /// Sends one message to every recipient: the text and the HTML as alternatives (a client
    /// shows the one it can), then the attachments.
    pub async fn send_multipart(
        &self,
        subject: &str,
        text: String,
        html: String,
        attachments: &[Attachment],
    ) -> Result<(), DeliveryError> {
        use lettre::message::{MultiPart, SinglePart};
        let subject: String = subject
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let mut m = Message::builder().from(self.from.clone()).subject(subject);
        for to in &self.to {
            m = m.to(to.clone());
        }
        let mut body = MultiPart::mixed().multipart(MultiPart::alternative_plain_html(text, html));
        for a in attachments {
            let ct = ContentType::parse(&a.content_type).map_err(|e| {
                DeliveryError::Refused(format!("attachment {}: content type: {e}", a.file_name))
            })?;
            let part: SinglePart =
                lettre::message::Attachment::new(a.file_name.clone()).body(a.body.clone(), ct);
            body = body.singlepart(part);
        }
        let message = m
            .multipart(body)
            .map_err(|e| DeliveryError::Refused(format!("the message: {e}")))?;
        self.deliver(message).await
    }
}

/// `host`, `host:port` or `[v6]:port`.
fn host_port(s: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p.parse().ok()?),
        Some(_) => (s, default_port), // a bare IPv6 address
        None => (s, default_port),
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return None;
    }
    Some((host.to_string(), port))
}

fn loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `[Tandem] FIRING critical: RULE KEY`.
pub(crate) fn subject(alert: &Alert) -> String {
    let state = match alert.state {
        AlertState::Firing => "FIRING",
        AlertState::Resolved => "RESOLVED",
    };
    let mut s = format!(
        "[Tandem] {state} {}: {}",
        alert.severity.as_str(),
        alert.rule
    );
    if !alert.key.is_empty() {
        s.push(' ');
        s.push_str(&alert.key);
    }
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The figures, the summary and the calls, in plain text.
pub(crate) fn body(alert: &Alert) -> String {
    use std::fmt::Write;
    let f = &alert.figures;
    let mut b = String::new();
    let _ = writeln!(b, "{}", alert.summary);
    let _ = writeln!(b);
    let _ = writeln!(b, "Rule:      {} ({})", alert.rule, alert.rule_kind);
    let _ = writeln!(b, "Severity:  {}", alert.severity.as_str());
    let key = if alert.key.is_empty() {
        "-"
    } else {
        &alert.key
    };
    let _ = writeln!(b, "Key:       {} = {key}", alert.group_by);
    let state = if alert.repeat {
        "firing (repeat)"
    } else {
        alert.state.as_str()
    };
    let _ = writeln!(b, "State:     {state}");
    let _ = writeln!(
        b,
        "Since:     {}",
        utc::format_s(alert.since_us.div_euclid(1_000_000))
    );
    let _ = writeln!(
        b,
        "At:        {}",
        utc::format_s(alert.at_us.div_euclid(1_000_000))
    );
    let _ = writeln!(
        b,
        "Value:     {} {} (threshold {})",
        f.value, f.unit, f.threshold
    );
    let _ = writeln!(
        b,
        "Matched:   {} of {} in the last {} s",
        f.matched, f.total, f.window_s
    );
    if !alert.calls.is_empty() {
        let _ = writeln!(b);
        let _ = writeln!(b, "Calls ({}):", alert.calls.len());
        for uid in alert.calls.iter().take(EMAIL_CALLS_MAX) {
            let _ = writeln!(b, "  {uid}");
        }
        if alert.calls.len() > EMAIL_CALLS_MAX {
            let _ = writeln!(b, "  ... and {} more", alert.calls.len() - EMAIL_CALLS_MAX);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_with_their_default_ports() {
        assert_eq!(
            host_port("mail.example.com", 587),
            Some(("mail.example.com".into(), 587))
        );
        assert_eq!(
            host_port("127.0.0.1:2525", 25),
            Some(("127.0.0.1".into(), 2525))
        );
        assert_eq!(host_port("[::1]:25", 587), Some(("::1".into(), 25)));
        assert_eq!(host_port("::1", 25), Some(("::1".into(), 25)));
        assert_eq!(host_port("a:b", 25), None);
        assert_eq!(host_port("", 25), None);
        assert!(loopback("::1") && loopback("127.0.0.2") && loopback("LOCALHOST"));
        assert!(!loopback("192.0.2.1"));
    }
}
