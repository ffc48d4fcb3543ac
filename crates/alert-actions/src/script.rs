//! The script: a program run with arguments and environment, never through a shell, killed
//! with its whole process group when it outlives its timeout.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use alerts::{ActionConfig, Alert};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::DeliveryError;
use crate::config::{Check, SCRIPT_ARGS_MAX, executable};

/// What is kept of a script's stdout and of its stderr (the rest is read and discarded, so
/// that a chatty script never blocks on a full pipe).
pub const SCRIPT_OUTPUT_BYTES_MAX: usize = 64 * 1024;
/// The `PATH` a script starts with: its environment is cleared, so that nothing of Tandem's
/// (a database URL, a token) reaches it.
pub const SCRIPT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug)]
pub struct Script {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Script {
    pub(crate) fn from_config(check: &mut Check<'_>, c: &ActionConfig) -> Option<Script> {
        let Some(program) = &c.program else {
            check.fail(
                "program",
                "missing: the absolute path of the program to run",
            );
            return None;
        };
        if let Err(e) = executable(program) {
            check.fail("program", e);
            return None;
        }
        if c.args.len() > SCRIPT_ARGS_MAX {
            check.fail("args", format!("at most {SCRIPT_ARGS_MAX} arguments"));
            return None;
        }
        if let Some(i) = c.args.iter().position(|a| a.contains('\0')) {
            check.fail("args", format!("argument {} holds a NUL byte", i + 1));
            return None;
        }
        Some(Script {
            program: program.clone(),
            args: c.args.clone(),
        })
    }

    pub(crate) async fn run(&self, alert: &Alert, timeout_ms: u64) -> Result<(), DeliveryError> {
        let json = alert.json_line();
        let at = utc::format_us(alert.at_us);
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(self.args.iter().map(|a| substitute(a, alert)))
            .env_clear()
            .env("PATH", SCRIPT_PATH)
            .env("TANDEM_ALERT_RULE", &alert.rule)
            .env("TANDEM_ALERT_KEY", &alert.key)
            .env("TANDEM_ALERT_STATE", alert.state.as_str())
            .env("TANDEM_ALERT_SEVERITY", alert.severity.as_str())
            .env("TANDEM_ALERT_KIND", &alert.rule_kind)
            .env("TANDEM_ALERT_SUMMARY", &alert.summary)
            .env("TANDEM_ALERT_AT", &at)
            .env("TANDEM_ALERT_JSON", &json)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that a timeout kills what it started too.
            .process_group(0)
            .kill_on_drop(true);
        let shown = self.program.display();
        let mut child = cmd
            .spawn()
            .map_err(|e| DeliveryError::Transient(format!("{shown}: cannot start: {e}")))?;
        let group = Group(child.id().map(|p| p as libc::pid_t));
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let feed = async move {
            if let Some(s) = stdin.as_mut() {
                // A script that does not read its stdin closes the pipe: not an error.
                let _ = s.write_all(json.as_bytes()).await;
                let _ = s.write_all(b"\n").await;
            }
            drop(stdin);
        };
        let run = async {
            let (_, out, err, status) =
                tokio::join!(feed, bounded(stdout), bounded(stderr), child.wait());
            (out, err, status)
        };
        match tokio::time::timeout(Duration::from_millis(timeout_ms), run).await {
            Ok((out, err, status)) => {
                group.disarm();
                let status =
                    status.map_err(|e| DeliveryError::Transient(format!("{shown}: wait: {e}")))?;
                if status.success() {
                    Ok(())
                } else {
                    Err(DeliveryError::Transient(format!(
                        "{shown} {status}; stdout: {:?}; stderr: {:?}",
                        String::from_utf8_lossy(&out),
                        String::from_utf8_lossy(&err)
                    )))
                }
            }
            // `group` goes out of scope here and kills the process group.
            Err(_) => Err(DeliveryError::Transient(format!(
                "{shown} still running after {timeout_ms} ms: killed with its process group"
            ))),
        }
    }
}

/// `{rule}`, `{key}`, `{state}` and `{severity}` replaced by the alert's; any other text
/// (braces of an nft set included) left as it is.
pub(crate) fn substitute(arg: &str, alert: &Alert) -> String {
    arg.replace("{rule}", &alert.rule)
        .replace("{key}", &alert.key)
        .replace("{state}", alert.state.as_str())
        .replace("{severity}", alert.severity.as_str())
}

/// Reads a pipe to its end, keeping the first [`SCRIPT_OUTPUT_BYTES_MAX`] bytes.
async fn bounded(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else { return kept };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = SCRIPT_OUTPUT_BYTES_MAX - kept.len();
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Kills a script's process group when dropped before [`Group::disarm`]: on a timeout, or
/// when the notifier stops mid-run.
struct Group(Option<libc::pid_t>);

impl Group {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.filter(|p| *p > 0) {
            // SAFETY: kill(2) with a negative pid signals the group the child leads (it was
            // started with process_group(0), so its pid is the group's id).
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}
