//! `[reports]`: the daily report by email, sent by `serve` at `email_at` (UTC) and at once by
//! `tandem report --send-now`.
//!
//! The report is each group's last `email_days` days, per day, read from the rollups of the
//! CDR database (`CdrStore::report`): an HTML body drawn with tables and bars every mail
//! client renders (`console::reports::email_html`), a plain-text alternative, and the figures
//! as CSV attached (the columns of `/api/reports?format=csv`). It goes through the SMTP
//! settings of an `[alerts.action.NAME]` email action (`email_action`) or its own
//! `[reports.smtp]`.
//!
//! Never: sends without `email_to`, catches up on a day `serve` was not running for, or
//! retries a refused message (a 5xx: the address or the login is wrong).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

/// Most recipients of the daily report.
pub const EMAIL_TO_MAX: usize = 100;
/// Most days one daily report covers.
pub const EMAIL_DAYS_MAX: u32 = 31;
/// Attempts of one day's report, a few minutes apart, when the server cannot be reached.
const SEND_ATTEMPTS: u32 = 3;
const RETRY_WAIT: Duration = Duration::from_secs(300);

/// `[reports]` in tandem.toml.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportsSettings {
    /// Who receives the daily report; empty: none is sent.
    pub email_to: Vec<String>,
    /// When it is sent each day, `HH:MM` in UTC.
    pub email_at: String,
    /// The groups it covers, in this order; empty: `all`, then every `[[groups]]` entry.
    pub groups: Vec<String>,
    /// The days it covers, per day, up to the end of yesterday (UTC).
    pub email_days: u32,
    pub email_subject: String,
    /// Send with the SMTP settings (server, security, login, sender) of this
    /// `[alerts.action.NAME]`, which must be an email action.
    pub email_action: Option<String>,
    /// Or with these.
    pub smtp: Option<SmtpSettings>,
    /// The console's address as the recipients reach it: the email links its Reports page.
    pub console_url: Option<String>,
    /// One attempt's deadline (connection, TLS, login, the message).
    pub email_timeout_ms: u64,
}

impl Default for ReportsSettings {
    fn default() -> Self {
        ReportsSettings {
            email_to: Vec::new(),
            email_at: "06:00".into(),
            groups: Vec::new(),
            email_days: 7,
            email_subject: "Tandem daily report".into(),
            email_action: None,
            smtp: None,
            console_url: None,
            email_timeout_ms: 60_000,
        }
    }
}

/// `[reports.smtp]`: the keys of an email action, without its recipients.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    /// `host` or `host:port`.
    pub server: Option<String>,
    /// `starttls` (default, port 587), `tls` (465) or `none` (25, loopback only unless
    /// `allow_plain`).
    pub security: Option<String>,
    #[serde(default)]
    pub allow_plain: bool,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    pub from: Option<String>,
}

impl ReportsSettings {
    /// `email_at` in minutes after midnight UTC.
    pub fn send_minute(&self) -> anyhow::Result<i64> {
        let bad = || {
            anyhow::anyhow!(
                "[reports] email_at = {:?}: a time of day in UTC, HH:MM (06:00)",
                self.email_at
            )
        };
        let (h, m) = self.email_at.split_once(':').ok_or_else(bad)?;
        let (h, m): (i64, i64) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if h > 23 || m > 59 || h < 0 || m < 0 || self.email_at.len() != 5 {
            return Err(bad());
        }
        Ok(h * 60 + m)
    }

    /// The groups the report covers, checked against the configured ones.
    pub fn report_groups(&self, configured: &[String]) -> anyhow::Result<Vec<String>> {
        if self.groups.is_empty() {
            let mut all = vec![console::reports::ALL.to_owned()];
            all.extend(configured.iter().cloned());
            return Ok(all);
        }
        for g in &self.groups {
            if g != console::reports::ALL && !configured.contains(g) {
                anyhow::bail!(
                    "[reports] groups: {g:?} is not a [[groups]] name (nor all); there are: {}",
                    configured.join(", ")
                );
            }
        }
        Ok(self.groups.clone())
    }

    /// The SMTP sender, or `None` when no recipient is set; every problem named.
    pub fn mailer(
        &self,
        alerts: &alerts::AlertsConfig,
    ) -> anyhow::Result<Option<alert_actions::Email>> {
        if self.email_to.is_empty() {
            if self.email_action.is_some() || self.smtp.is_some() {
                anyhow::bail!(
                    "[reports] email_to: missing: the daily report's recipients (its SMTP settings are given)"
                );
            }
            return Ok(None);
        }
        if self.email_to.len() > EMAIL_TO_MAX {
            anyhow::bail!("[reports] email_to: at most {EMAIL_TO_MAX} addresses");
        }
        if !(1..=EMAIL_DAYS_MAX).contains(&self.email_days) {
            anyhow::bail!("[reports] email_days: 1 to {EMAIL_DAYS_MAX}");
        }
        self.send_minute()?;
        let mut c = match (&self.email_action, &self.smtp) {
            (Some(name), None) => {
                let a = alerts.action.get(name).ok_or_else(|| {
                    anyhow::anyhow!(
                        "[reports] email_action = {name:?}: no [alerts.action.{name}] (there are: {})",
                        alerts.action.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                })?;
                if a.kind != "email" {
                    anyhow::bail!(
                        "[reports] email_action = {name:?}: [alerts.action.{name}] is a {} action, not email",
                        a.kind
                    );
                }
                a.clone()
            }
            (None, Some(s)) => alerts::ActionConfig {
                kind: "email".into(),
                server: s.server.clone(),
                security: s.security.clone(),
                allow_plain: s.allow_plain,
                username: s.username.clone(),
                password_file: s.password_file.clone(),
                from: s.from.clone(),
                ..Default::default()
            },
            (None, None) => anyhow::bail!(
                "[reports] email_to is set but not how to send: name an email action with \
                 email_action = \"NAME\" ([alerts.action.NAME]), or give [reports.smtp]"
            ),
            (Some(_), Some(_)) => anyhow::bail!(
                "[reports] email_action and [reports.smtp]: one or the other, not both"
            ),
        };
        c.to = self.email_to.clone();
        let email = alert_actions::Email::from_settings("reports", &c, self.email_timeout_ms)
            .map_err(|errors| {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                anyhow::anyhow!("[reports]: {}", all.join("; "))
            })?;
        Ok(Some(email))
    }
}

/// The daily report: what it covers, where its figures come from, how it goes.
pub struct DailyReport {
    pub settings: ReportsSettings,
    pub groups: Vec<String>,
    /// The CDR database: the SQLite file, or a PostgreSQL connection string.
    pub cdr: (PathBuf, Option<String>),
    pub email: alert_actions::Email,
}

/// What one sending did.
#[derive(Debug)]
pub struct Sent {
    pub groups: usize,
    pub calls: u64,
    pub day: String,
    pub recipients: usize,
}

/// Midnight UTC of the day holding `t_s`.
fn midnight(t_s: i64) -> i64 {
    t_s.div_euclid(86_400) * 86_400
}

/// The next time after `now_s` that is `minute` minutes after a midnight UTC.
pub fn next_send_s(now_s: i64, minute: i64) -> i64 {
    let today = midnight(now_s) + minute * 60;
    if today > now_s { today } else { today + 86_400 }
}

impl DailyReport {
    /// Reads the report as of `now_s` and sends it.
    pub async fn send(&self, now_s: i64) -> anyhow::Result<Sent> {
        let reports = {
            let this = (self.settings.clone(), self.groups.clone(), self.cdr.clone());
            tokio::task::spawn_blocking(move || {
                let (settings, groups, cdr) = this;
                read_reports(settings.email_days, &groups, &cdr, now_s)
            })
            .await
            .context("reading the report")??
        };
        let last_day = &utc::format_s(midnight(now_s) - 86_400)[..10];
        let title = format!("{} {last_day}", self.settings.email_subject);
        let html = console::reports::email_html(
            &title,
            &reports,
            self.settings.console_url.as_deref().map(str::trim),
        );
        let text = plain_text(&title, &reports);
        let csv = console::reports::csv(&reports);
        let attachment = alert_actions::Attachment {
            file_name: format!("tandem-report-{last_day}.csv"),
            content_type: "text/csv; charset=utf-8".into(),
            body: csv.into_bytes(),
        };
        self.email
            .send_multipart(&title, text, html, &[attachment])
            .await
            .map_err(|e| anyhow::Error::new(e).context("sending the daily report"))?;
        Ok(Sent {
            groups: reports.len(),
            calls: reports.iter().map(|r| r.total.calls).sum(),
            day: last_day.to_owned(),
            recipients: self.email.to.len(),
        })
    }

    /// Sends the report every day at `email_at` until `stop` completes. A day whose sending
    /// fails is tried [`SEND_ATTEMPTS`] times, then given up with an error in the log.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let minute = self.settings.send_minute().unwrap_or(6 * 60);
        tokio::pin!(stop);
        loop {
            let now = now_s();
            let at = next_send_s(now, minute);
            tracing::info!(at = %utc::format_s(at), "daily report: next sending");
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(Duration::from_secs((at - now).max(1) as u64)) => {}
            }
            for attempt in 1..=SEND_ATTEMPTS {
                match self.send(now_s()).await {
                    Ok(s) => {
                        tracing::info!(day = %s.day, groups = s.groups, calls = s.calls,
                            recipients = s.recipients, "daily report sent");
                        break;
                    }
                    Err(e) if attempt < SEND_ATTEMPTS && !refused(&e) => {
                        tracing::warn!(error = %format!("{e:#}"), attempt, "daily report not sent; trying again");
                        tokio::select! {
                            _ = &mut stop => return,
                            _ = tokio::time::sleep(RETRY_WAIT) => {}
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), "daily report not sent");
                        break;
                    }
                }
            }
        }
    }
}

fn refused(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<alert_actions::DeliveryError>(),
            Some(alert_actions::DeliveryError::Refused(_))
        )
    })
}

/// Each group's last `days` days, per day, up to the end of yesterday (UTC, as of `now_s`).
pub fn read_reports(
    days: u32,
    groups: &[String],
    (path, pg): &(PathBuf, Option<String>),
    now_s: i64,
) -> anyhow::Result<Vec<console::reports::Report>> {
    let to_us = midnight(now_s) * 1_000_000;
    let from_us = to_us - i64::from(days) * 86_400_000_000;
    if pg.is_none() && !path.exists() {
        anyhow::bail!(
            "no CDR database at {}: the report is read from the calls a capture stores there",
            path.display()
        );
    }
    let mut store = sensor::records::open_store(path, pg.as_deref())?;
    groups
        .iter()
        .map(|g| {
            let q = console::reports::ReportQuery {
                group: g.clone(),
                period: console::reports::PeriodKind::Day,
                from_us,
                to_us,
            };
            store
                .report(&q)
                .with_context(|| format!("the report of group {g}"))
        })
        .collect()
}

/// The plain-text alternative: each group's totals and days.
fn plain_text(title: &str, reports: &[console::reports::Report]) -> String {
    use std::fmt::Write;
    let mut t = format!("{title}\n\n");
    for r in reports {
        let c = &r.total;
        let _ = writeln!(
            t,
            "{}: {} calls, {} answered, ASR {}, NER {}, peak {} at once",
            r.group,
            c.calls,
            c.answered,
            console::reports::cell(c.asr_pct, "%"),
            console::reports::cell(c.ner_pct, "%"),
            c.peak_concurrent
        );
        for row in &r.rows {
            let _ = writeln!(
                t,
                "  {}  {:>6} calls  {:>6} answered  ASR {}",
                row.label,
                row.calls,
                row.answered,
                console::reports::cell(row.asr_pct, "%")
            );
        }
        t.push('\n');
    }
    t.push_str("The figures of every day are attached as CSV.\n");
    t
}

/// `tandem report --send-now`: the daily report of `config`'s `[reports]`, now, to its
/// `email_to` or to `to`; prints what was sent.
pub fn send_now(config: &std::path::Path, to: Vec<String>) -> anyhow::Result<()> {
    let mut c = crate::config::Config::load(config)?;
    if !to.is_empty() {
        c.reports.email_to = to;
    }
    if c.reports.email_to.is_empty() {
        anyhow::bail!(
            "[reports] email_to is empty in {}: set the recipients there, or give --email-to ADDRESS",
            config.display()
        );
    }
    let daily = crate::serve::daily_report(&c)?.context("the daily report has no SMTP settings")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let sent = rt.block_on(daily.send(now_s()))?;
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            one.to_owned()
        } else {
            many.to_owned()
        }
    };
    println!(
        "sent the daily report of {} to {} {} ({} {}, {} calls)",
        sent.day,
        sent.recipients,
        plural(sent.recipients, "recipient", "recipients"),
        sent.groups,
        plural(sent.groups, "group", "groups"),
        sent.calls
    );
    Ok(())
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_goes_at_the_next_email_at() {
        let t = utc::parse_s("2026-11-28T05:59:00Z").unwrap();
        assert_eq!(utc::format_s(next_send_s(t, 360)), "2026-11-28T06:00:00Z");
        let t = utc::parse_s("2026-11-28T06:00:00Z").unwrap();
        assert_eq!(utc::format_s(next_send_s(t, 360)), "2026-11-29T06:00:00Z");
        let s = |at: &str| ReportsSettings {
            email_at: at.into(),
            ..Default::default()
        };
        assert_eq!(s("06:00").send_minute().unwrap(), 360);
        assert_eq!(s("23:59").send_minute().unwrap(), 1439);
        for bad in ["6:00", "24:00", "06:60", "0600", "ab:cd", "-1:00"] {
            let e = s(bad).send_minute().unwrap_err().to_string();
            assert!(e.contains("email_at") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn the_smtp_settings_are_checked_and_named() {
        let mut alerts = alerts::AlertsConfig::default();
        alerts.action.insert(
            "hook".into(),
            alerts::ActionConfig {
                kind: "webhook".into(),
                url: Some("http://127.0.0.1:9/".into()),
                ..Default::default()
            },
        );
        let none = ReportsSettings::default();
        assert!(
            none.mailer(&alerts).unwrap().is_none(),
            "no recipient, no email"
        );
        let to = ReportsSettings {
            email_to: vec!["noc@example.com".into()],
            ..Default::default()
        };
        let e = to.mailer(&alerts).unwrap_err().to_string();
        assert!(
            e.contains("email_action") && e.contains("[reports.smtp]"),
            "{e}"
        );
        let webhook = ReportsSettings {
            email_action: Some("hook".into()),
            ..to.clone()
        };
        let e = webhook.mailer(&alerts).unwrap_err().to_string();
        assert!(e.contains("webhook action, not email"), "{e}");
        let missing = ReportsSettings {
            email_action: Some("mail".into()),
            ..to.clone()
        };
        let e = missing.mailer(&alerts).unwrap_err().to_string();
        assert!(e.contains("no [alerts.action.mail]"), "{e}");
        let own = ReportsSettings {
            smtp: Some(SmtpSettings {
                server: Some("127.0.0.1:2525".into()),
                security: Some("none".into()),
                from: Some("tandem@example.com".into()),
                ..Default::default()
            }),
            ..to.clone()
        };
        let email = own.mailer(&alerts).unwrap().unwrap();
        assert_eq!((email.server.as_str(), email.port), ("127.0.0.1", 2525));
        let plain_off_loopback = ReportsSettings {
            smtp: Some(SmtpSettings {
                server: Some("mail.example.com".into()),
                security: Some("none".into()),
                ..Default::default()
            }),
            ..to
        };
        let e = plain_off_loopback.mailer(&alerts).unwrap_err().to_string();
        assert!(
            e.contains("reports") && e.contains("security") && e.contains("from"),
            "{e}"
        );
        let groups = ReportsSettings {
            groups: vec!["carrier-a".into(), "nobody".into()],
            ..Default::default()
        };
        let e = groups
            .report_groups(&["carrier-a".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"nobody\""), "{e}");
        assert_eq!(
            ReportsSettings::default()
                .report_groups(&["carrier-a".into()])
                .unwrap(),
            ["all", "carrier-a"]
        );
    }
}
