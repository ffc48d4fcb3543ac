//! `[alerts.action.NAME]` tables validated into [`Actions`]: each key checked against its
//! type, URLs parsed, the SMTP transport built, secret files read (once, here; never logged).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use alerts::RuleError;
use alerts::config::{
    ACTION_BACKOFF_MS_DEFAULT, ACTION_BACKOFF_MS_MAX, ACTION_RETRIES_DEFAULT,
    ACTION_TIMEOUT_MS_DEFAULT, ActionConfig,
};

use crate::email::Email;
use crate::script::Script;
use crate::webhook::{Webhook, WebhookFormat};

/// Retries one action may ask for: with the backoff capped at five minutes, 100 retries
/// already keep one alert alive for over eight hours.
pub const ACTION_RETRIES_MAX: u32 = 100;
/// The longest one attempt may take (an SMTP exchange with a slow server stays well under).
pub const ACTION_TIMEOUT_MS_MAX: u64 = 600_000;
/// A secret or password file larger than this is not a key (a wrong path, most likely).
pub const SECRET_FILE_BYTES_MAX: u64 = 4096;
/// Arguments one script may be given.
pub const SCRIPT_ARGS_MAX: usize = 64;
/// Recipients of one email action.
pub const EMAIL_TO_MAX: usize = 100;

/// The validated actions, by name.
#[derive(Debug, Clone, Default)]
pub struct Actions {
    pub(crate) map: BTreeMap<String, Arc<Action>>,
}

/// One validated `[alerts.action.NAME]`.
#[derive(Debug)]
pub struct Action {
    pub name: String,
    pub kind: ActionKind,
    /// Attempts after the first.
    pub retries: u32,
    /// The first retry's wait; doubled each time up to [`ACTION_BACKOFF_MS_MAX`].
    pub backoff_ms: u64,
    /// One attempt's deadline.
    pub timeout_ms: u64,
}

/// What an action does, with everything it needs already read and parsed.
#[derive(Debug)]
pub enum ActionKind {
    Webhook(Webhook),
    Email(Email),
    Alertmanager(crate::alertmanager::Alertmanager),
    Script(Script),
}

impl ActionKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            ActionKind::Webhook(_) => "webhook",
            ActionKind::Email(_) => "email",
            ActionKind::Alertmanager(_) => "alertmanager",
            ActionKind::Script(_) => "script",
        }
    }
}

/// A secret read from a file: compared and used, never printed.
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Actions {
    /// Validates every action; all problems are returned, each naming the action and the key.
    pub fn from_config(config: &BTreeMap<String, ActionConfig>) -> Result<Actions, Vec<RuleError>> {
        let mut map = BTreeMap::new();
        let mut errors = Vec::new();
        for (name, c) in config {
            let mut v = Check {
                action: name,
                errors: &mut errors,
            };
            if let Some(action) = v.action(name, c) {
                map.insert(name.clone(), Arc::new(action));
            }
        }
        if errors.is_empty() {
            Ok(Actions { map })
        } else {
            Err(errors)
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Action>> {
        self.map.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Collects one action's problems.
pub(crate) struct Check<'a> {
    pub(crate) action: &'a str,
    pub(crate) errors: &'a mut Vec<RuleError>,
}

impl Check<'_> {
    pub(crate) fn fail(&mut self, key: &str, problem: impl Into<String>) {
        self.errors.push(RuleError::Action {
            action: self.action.to_string(),
            key: key.to_string(),
            problem: problem.into(),
        });
    }

    fn action(&mut self, name: &str, c: &ActionConfig) -> Option<Action> {
        let before = self.errors.len();
        if name.is_empty()
            || !name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.'))
        {
            self.fail(
                "name",
                "an action's name is letters, digits, '-', '_' and '.'",
            );
        }
        let used: &[&str] = match c.kind.as_str() {
            "webhook" => &["url", "format", "secret_file"],
            "email" => &[
                "server",
                "security",
                "allow_plain",
                "username",
                "password_file",
                "from",
                "to",
            ],
            "alertmanager" => &["url"],
            "script" => &["program", "args"],
            other => {
                self.fail(
                    "type",
                    format!("{other:?} is not a type: webhook, email, alertmanager or script"),
                );
                return None;
            }
        };
        for key in set_keys(c) {
            if !used.contains(&key) {
                self.fail(
                    key,
                    format!("a {} action does not use {key}: remove it", c.kind),
                );
            }
        }
        let retries = c.retries.unwrap_or(ACTION_RETRIES_DEFAULT);
        if retries > ACTION_RETRIES_MAX {
            self.fail("retries", format!("at most {ACTION_RETRIES_MAX}"));
        }
        let backoff_ms = c.backoff_ms.unwrap_or(ACTION_BACKOFF_MS_DEFAULT);
        if !(1..=ACTION_BACKOFF_MS_MAX).contains(&backoff_ms) {
            self.fail(
                "backoff_ms",
                format!("between 1 and {ACTION_BACKOFF_MS_MAX}"),
            );
        }
        let timeout_ms = c.timeout_ms.unwrap_or(ACTION_TIMEOUT_MS_DEFAULT);
        if !(1..=ACTION_TIMEOUT_MS_MAX).contains(&timeout_ms) {
            self.fail(
                "timeout_ms",
                format!("between 1 and {ACTION_TIMEOUT_MS_MAX}"),
            );
        }
        let kind = match c.kind.as_str() {
            "webhook" => self.webhook(c).map(ActionKind::Webhook),
            "email" => Email::from_config(self, c, timeout_ms).map(ActionKind::Email),
            "alertmanager" => self
                .url("url", c.url.as_deref())
                .map(|url| ActionKind::Alertmanager(crate::alertmanager::Alertmanager::new(url))),
            _ => Script::from_config(self, c).map(ActionKind::Script),
        };
        if self.errors.len() > before {
            return None;
        }
        Some(Action {
            name: name.to_string(),
            kind: kind?,
            retries,
            backoff_ms,
            timeout_ms,
        })
    }

    fn webhook(&mut self, c: &ActionConfig) -> Option<Webhook> {
        let url = self.url("url", c.url.as_deref());
        let format = match c.format.as_deref().unwrap_or("json") {
            "json" => WebhookFormat::Json,
            "slack" => WebhookFormat::Slack,
            other => {
                self.fail("format", format!("{other:?}: json or slack"));
                WebhookFormat::Json
            }
        };
        let secret = match &c.secret_file {
            Some(path) => Some(self.secret_file("secret_file", path)?),
            None => None,
        };
        Some(Webhook {
            url: url?,
            format,
            secret,
        })
    }

    /// An `http://` or `https://` URL with a host, and nothing after `#`.
    pub(crate) fn url(&mut self, key: &str, url: Option<&str>) -> Option<url::Url> {
        let Some(text) = url else {
            self.fail(key, "missing: the URL to send to");
            return None;
        };
        let parsed = match url::Url::parse(text) {
            Ok(u) => u,
            Err(e) => {
                self.fail(key, format!("{text:?} is not a URL: {e}"));
                return None;
            }
        };
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            self.fail(
                key,
                format!("{text:?}: an http:// or https:// URL with a host"),
            );
            return None;
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            self.fail(
                key,
                "a URL with a user or password: a webhook signs with secret_file instead",
            );
            return None;
        }
        Some(parsed)
    }

    /// Reads a key or password from `path`; a trailing newline (as `echo` writes) is not
    /// part of it.
    pub(crate) fn secret_file(&mut self, key: &str, path: &Path) -> Option<Secret> {
        let shown = path.display();
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                self.fail(key, format!("{shown} is not a file"));
                return None;
            }
            Ok(m) if m.len() > SECRET_FILE_BYTES_MAX => {
                self.fail(
                    key,
                    format!("{shown} is larger than {SECRET_FILE_BYTES_MAX} bytes: not a key file"),
                );
                return None;
            }
            Err(e) => {
                self.fail(key, format!("{shown} cannot be read: {e}"));
                return None;
            }
            Ok(_) => {}
        }
        let mut bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                self.fail(key, format!("{shown} cannot be read: {e}"));
                return None;
            }
        };
        while matches!(bytes.last(), Some(b'\n' | b'\r')) {
            bytes.pop();
        }
        if bytes.is_empty() {
            self.fail(key, format!("{shown} is empty"));
            return None;
        }
        Some(Secret(bytes))
    }
}

/// The keys of `c` that are set (beyond `type` and the delivery settings every type takes).
fn set_keys(c: &ActionConfig) -> Vec<&'static str> {
    let flags = [
        ("url", c.url.is_some()),
        ("format", c.format.is_some()),
        ("secret_file", c.secret_file.is_some()),
        ("server", c.server.is_some()),
        ("security", c.security.is_some()),
        ("allow_plain", c.allow_plain),
        ("username", c.username.is_some()),
        ("password_file", c.password_file.is_some()),
        ("from", c.from.is_some()),
        ("to", !c.to.is_empty()),
        ("program", c.program.is_some()),
        ("args", !c.args.is_empty()),
    ];
    flags
        .iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| *k)
        .collect()
}

/// True for a path that is absolute, a regular file and executable by this process.
pub(crate) fn executable(path: &PathBuf) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    if !path.is_absolute() {
        return Err(format!("{}: an absolute path", path.display()));
    }
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    let mut c = path.as_os_str().as_bytes().to_vec();
    c.push(0);
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let ok = unsafe { libc::access(c.as_ptr().cast(), libc::X_OK) } == 0;
    if meta.permissions().mode() & 0o111 == 0 || !ok {
        return Err(format!(
            "{} is not executable by this user (chmod +x, or check its owner)",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(c: ActionConfig) -> Result<Actions, Vec<RuleError>> {
        Actions::from_config(&BTreeMap::from([("a".to_string(), c)]))
    }

    fn keys(r: Result<Actions, Vec<RuleError>>) -> Vec<String> {
        r.unwrap_err()
            .into_iter()
            .map(|e| match e {
                RuleError::Action { key, .. } => key,
                other => panic!("{other}"),
            })
            .collect()
    }

    #[test]
    fn a_key_of_another_type_is_refused_by_name() {
        let c = ActionConfig {
            kind: "webhook".into(),
            url: Some("http://127.0.0.1:1/hook".into()),
            program: Some("/bin/true".into()),
            to: vec!["x@example.com".into()],
            ..Default::default()
        };
        assert_eq!(keys(one(c)), ["to", "program"]);
    }

    #[test]
    fn urls_are_http_or_https_with_a_host() {
        for bad in [
            "ftp://example.com/",
            "not a url",
            "http://user:pw@example.com/",
        ] {
            let c = ActionConfig {
                kind: "alertmanager".into(),
                url: Some(bad.into()),
                ..Default::default()
            };
            assert_eq!(keys(one(c)), ["url"], "{bad}");
        }
        let c = ActionConfig {
            kind: "alertmanager".into(),
            ..Default::default()
        };
        assert_eq!(keys(one(c)), ["url"]);
    }

    #[test]
    fn defaults_come_from_the_alerts_constants() {
        let c = ActionConfig {
            kind: "webhook".into(),
            url: Some("https://hooks.example.com/x".into()),
            ..Default::default()
        };
        let a = one(c).unwrap();
        let a = a.get("a").unwrap();
        assert_eq!(a.retries, ACTION_RETRIES_DEFAULT);
        assert_eq!(a.backoff_ms, ACTION_BACKOFF_MS_DEFAULT);
        assert_eq!(a.timeout_ms, ACTION_TIMEOUT_MS_DEFAULT);
    }

    #[test]
    fn bounds_and_unknown_types_are_refused() {
        let c = ActionConfig {
            kind: "webhook".into(),
            url: Some("http://127.0.0.1/".into()),
            retries: Some(1000),
            backoff_ms: Some(0),
            timeout_ms: Some(0),
            format: Some("teams".into()),
            ..Default::default()
        };
        assert_eq!(
            keys(one(c)),
            ["retries", "backoff_ms", "timeout_ms", "format"]
        );
        let c = ActionConfig {
            kind: "pager".into(),
            ..Default::default()
        };
        assert_eq!(keys(one(c)), ["type"]);
    }

    #[test]
    fn a_secret_file_must_be_readable_and_is_never_printed() {
        let dir = std::env::temp_dir().join(format!("alert-actions-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "s3cret-value\n").unwrap();
        let c = ActionConfig {
            kind: "webhook".into(),
            url: Some("http://127.0.0.1/".into()),
            secret_file: Some(file.clone()),
            ..Default::default()
        };
        let a = one(c.clone()).unwrap();
        let shown = format!("{a:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let ActionKind::Webhook(w) = &a.get("a").unwrap().kind else {
            panic!()
        };
        assert_eq!(w.secret.as_ref().unwrap().0, b"s3cret-value");
        let missing = ActionConfig {
            secret_file: Some(dir.join("absent")),
            ..c
        };
        assert_eq!(keys(one(missing)), ["secret_file"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_script_is_absolute_existing_and_executable() {
        let plain =
            std::env::temp_dir().join(format!("alert-actions-plain-{}", std::process::id()));
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let plain_str = plain.to_str().unwrap();
        for (program, ok) in [
            ("/bin/true", true),
            ("true", false),
            ("/nonexistent/tandem-script", false),
            (plain_str, false),
            ("/etc", false),
        ] {
            let c = ActionConfig {
                kind: "script".into(),
                program: Some(program.into()),
                ..Default::default()
            };
            assert_eq!(one(c).is_ok(), ok, "{program}");
        }
        std::fs::remove_file(&plain).unwrap();
    }

    #[test]
    fn email_needs_server_from_and_to_and_plain_only_on_loopback() {
        let base = ActionConfig {
            kind: "email".into(),
            server: Some("127.0.0.1:2525".into()),
            security: Some("none".into()),
            from: Some("Tandem <tandem@example.com>".into()),
            to: vec!["ops@example.com".into()],
            ..Default::default()
        };
        assert!(one(base.clone()).is_ok());
        let c = ActionConfig {
            kind: "email".into(),
            ..Default::default()
        };
        assert_eq!(keys(one(c)), ["server", "from", "to"]);
        let remote = ActionConfig {
            server: Some("mail.example.com".into()),
            ..base.clone()
        };
        assert_eq!(keys(one(remote.clone())), ["security"]);
        assert!(
            one(ActionConfig {
                allow_plain: true,
                ..remote
            })
            .is_ok()
        );
        let bad = ActionConfig {
            security: Some("ssl".into()),
            from: Some("not an address".into()),
            username: Some("tandem".into()),
            ..base
        };
        assert_eq!(keys(one(bad)), ["security", "from", "username"]);
    }
}
