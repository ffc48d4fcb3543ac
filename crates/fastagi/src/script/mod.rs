//! Legacy AGI scripts served through FastAGI: `AGI(agi://127.0.0.1/sub/x.php,a,b)` runs
//! `DIR/sub/x.php` on Asterisk's behalf, exactly as classic `AGI(sub/x.php,a,b)` would run it,
//! but without Asterisk forking.
//!
//! What the script sees is what classic AGI gives it (recorded from Asterisk 22.10.1):
//! - argv[0] the full path, then each dialplan argument as its own argv entry (empty ones kept);
//! - the working directory `/` (configurable);
//! - the `AST_*` directory variables, `AST_SYSTEMNAME` and `AST_VERSION`;
//! - on stdin the header without its `agi_network*` lines, `agi_request` being the script name as
//!   asked for, then each reply to the commands it prints on stdout, one command at a time.
//!
//! Hangup reaches a classic script as SIGHUP, never as a line: when Asterisk sends `HANGUP`,
//! Tandem delivers SIGHUP (unless `sighup = false`, like AGISIGHUP=no) and never writes the line
//! to the script, which would read it as the reply to its next command. When Asterisk goes away
//! the script gets SIGHUP, then, after `kill_grace_ms`, SIGKILL to its process group; a script
//! over its `max_run_ms` is killed the same way at once. A line on stdout that is not an AGI
//! command (PHP's warnings, HTML) ends the session instead of reaching Asterisk. The script's
//! stderr goes to the log, line by line, with its name and the session.
//!
//! Prewarmed routes (`prewarm = N`) keep N processes started and blocked on stdin, so a call does
//! not wait for an interpreter to start. Such a script must not assume (1) arguments in argv:
//! argv holds only the path, the arguments arrive as `agi_arg_N` in the header; (2) that it
//! started with the call: its start time, `$$`-based names and anything computed before reading
//! the header predate the call; (3) `AST_VERSION`, unknown before the call.

mod metrics;
mod path;
mod prewarm;
mod process;
mod user;

pub use metrics::{METRICS_MAX_SCRIPTS, ScriptMetrics};
pub use path::{RefusedPath, ScriptPath, canonical_dir, resolve};
pub use process::Exit;
pub use user::{RunAs, RunAsError, switch_user};

use crate::{AgiError, Handler, Session};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tracing::{debug, info, warn};

/// The reply to give a script in place of Asterisk's, computed in Tandem.
pub type InterceptedReply = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// Answers some of a script's commands in Tandem instead of relaying them to Asterisk (for
/// instance DATABASE commands on families that Tandem's store serves).
pub trait Intercept: Send + Sync + 'static {
    /// For a command line from a script (without its newline): `Some` reply line (without its
    /// newline) to answer it here, or `None` to relay it to Asterisk.
    fn intercept(&self, line: &str) -> Option<InterceptedReply>;
}

/// `[scripts]` in `tandem.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptConfig {
    /// Directory of AGI scripts served as routes (FreePBX: `/var/lib/asterisk/agi-bin`). Unset:
    /// no script routes.
    pub dir: Option<PathBuf>,
    /// The scripts' working directory, `/` as in classic AGI.
    pub working_dir: PathBuf,
    /// The user scripts run as (its uid, primary group and supplementary groups), `asterisk`
    /// for FreePBX's, which read `/etc/freepbx.conf` and write under `/var/spool/asterisk`.
    /// Unset: Tandem's own user. Needs Tandem to run as root or with CAP_SETUID and CAP_SETGID;
    /// without them the runner refuses to start.
    pub user: Option<String>,
    /// Deliver SIGHUP to a script when its channel hangs up (Asterisk's AGISIGHUP).
    pub sighup: bool,
    /// After Asterisk goes away (or the session must end), time between SIGHUP and SIGKILL.
    pub kill_grace_ms: u64,
    /// Wall-clock limit of one script run; 0 = none (the default: a script may Dial).
    pub max_run_ms: u64,
    /// Script processes serving sessions at once. One more session is refused at once with
    /// `failure`: each is a whole interpreter (tens of MiB for PHP), and `fastagi.max_sessions`
    /// is sized for native sessions of a few KiB.
    pub max_running: usize,
    /// Most stderr lines logged per run; the rest are counted.
    pub max_stderr_lines: usize,
    /// Longest stderr line logged; longer ones are cut.
    pub max_stderr_line_bytes: usize,
    /// Commands besides the 47 of Asterisk's res_agi that a script may send (commands that other
    /// Asterisk modules register), by their first word.
    pub extra_commands: Vec<String>,
    /// `AST_SYSTEMNAME` (Asterisk's `systemname`).
    pub system_name: String,
    /// The `AST_*_DIR` variables; Asterisk's defaults unless set.
    pub env: AstDirs,
    /// Scripts with metric series of their own (`script` label, about 5 KiB of `/metrics`
    /// each); scripts run after that many count under `script="other"`. Configured routes
    /// come first.
    pub metrics_max_scripts: usize,
    /// Settings of single scripts.
    pub route: Vec<ScriptRoute>,
}

impl Default for ScriptConfig {
    fn default() -> Self {
        ScriptConfig {
            dir: None,
            working_dir: PathBuf::from("/"),
            user: None,
            sighup: true,
            kill_grace_ms: 2_000,
            max_run_ms: 0,
            max_running: 512,
            max_stderr_lines: 1_000,
            max_stderr_line_bytes: 4_096,
            extra_commands: Vec::new(),
            system_name: String::new(),
            env: AstDirs::default(),
            metrics_max_scripts: metrics::METRICS_MAX_SCRIPTS,
            route: Vec::new(),
        }
    }
}

/// Settings of one script, by its path relative to the directory (any spelling of it: they
/// apply to the file).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptRoute {
    pub path: String,
    /// Processes kept started and waiting for a call.
    #[serde(default)]
    pub prewarm: usize,
    /// This script's wall-clock limit; the section's `max_run_ms` when unset.
    pub max_run_ms: Option<u64>,
}

/// The directories Asterisk tells its scripts about. `agi_dir` defaults to the script directory.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AstDirs {
    pub config_dir: String,
    pub config_file: String,
    pub module_dir: String,
    pub spool_dir: String,
    pub monitor_dir: String,
    pub var_dir: String,
    pub data_dir: String,
    pub log_dir: String,
    pub agi_dir: Option<String>,
    pub key_dir: String,
    pub run_dir: String,
}

impl Default for AstDirs {
    fn default() -> Self {
        AstDirs {
            config_dir: "/etc/asterisk".into(),
            config_file: "/etc/asterisk/asterisk.conf".into(),
            module_dir: "/usr/lib/asterisk/modules".into(),
            spool_dir: "/var/spool/asterisk".into(),
            monitor_dir: "/var/spool/asterisk/monitor".into(),
            var_dir: "/var/lib/asterisk".into(),
            data_dir: "/var/lib/asterisk".into(),
            log_dir: "/var/log/asterisk".into(),
            agi_dir: None,
            key_dir: "/var/lib/asterisk/keys".into(),
            run_dir: "/var/run/asterisk".into(),
        }
    }
}

/// The environment variables a script gets on top of Tandem's own.
/// How a script is started: the variables on top of Tandem's own, and the user it runs as.
#[derive(Debug, Clone)]
pub struct AstEnv {
    vars: Vec<(String, String)>,
    run_as: Option<Arc<RunAs>>,
}

impl AstEnv {
    fn new(
        config: &ScriptConfig,
        script_dir: &Path,
        version: Option<&str>,
        run_as: Option<Arc<RunAs>>,
    ) -> AstEnv {
        let d = &config.env;
        let agi_dir = d
            .agi_dir
            .clone()
            .unwrap_or_else(|| script_dir.display().to_string());
        let mut vars: Vec<(String, String)> = [
            ("AST_CONFIG_DIR", d.config_dir.clone()),
            ("AST_CONFIG_FILE", d.config_file.clone()),
            ("AST_MODULE_DIR", d.module_dir.clone()),
            ("AST_SPOOL_DIR", d.spool_dir.clone()),
            ("AST_MONITOR_DIR", d.monitor_dir.clone()),
            ("AST_VAR_DIR", d.var_dir.clone()),
            ("AST_DATA_DIR", d.data_dir.clone()),
            ("AST_LOG_DIR", d.log_dir.clone()),
            ("AST_AGI_DIR", agi_dir),
            ("AST_KEY_DIR", d.key_dir.clone()),
            ("AST_RUN_DIR", d.run_dir.clone()),
            ("AST_SYSTEMNAME", config.system_name.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(v) = version {
            vars.push(("AST_VERSION".into(), v.to_string()));
        }
        AstEnv { vars, run_as }
    }

    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn run_as(&self) -> Option<&Arc<RunAs>> {
        self.run_as.as_ref()
    }
}

/// Why a script run ended badly: the server logs it and ends the session with `failure`.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("script refused: {0}")]
    Refused(#[from] RefusedPath),
    #[error("script {script}: cannot start: {source}")]
    Spawn {
        script: String,
        source: std::io::Error,
    },
    #[error("script {script} printed a line that is not an AGI command, cut off: {line:?}")]
    NotProtocol { script: String, line: String },
    #[error("script {script} printed a line over {max} bytes (max_line_bytes), cut off")]
    LineTooLong { script: String, max: usize },
    #[error("script {script} ran over its limit of {limit_ms} ms and was killed")]
    TimedOut { script: String, limit_ms: u64 },
    #[error("script {script} refused: {max} scripts already running (scripts.max_running)")]
    Busy { script: String, max: usize },
}

/// The handler behind every script route: register it as the router's fallback.
pub struct ScriptRunner {
    config: ScriptConfig,
    /// Each `[[scripts.route]]`'s file ([`ScriptPath::file`]) and wall-clock limit.
    limits: Vec<(String, Option<u64>)>,
    dir: PathBuf,
    max_line_bytes: usize,
    commands: Vec<String>,
    metrics: Arc<ScriptMetrics>,
    pools: prewarm::Pools,
    intercept: Option<Arc<dyn Intercept>>,
    running: Arc<tokio::sync::Semaphore>,
    run_as: Option<Arc<RunAs>>,
}

impl ScriptRunner {
    /// Checks the directory and starts the prewarmed processes. `max_line_bytes` is the server's
    /// limit, applied to the script's lines too.
    pub fn new(
        config: ScriptConfig,
        max_line_bytes: usize,
        metrics: Arc<ScriptMetrics>,
    ) -> std::io::Result<ScriptRunner> {
        let dir = canonical_dir(config.dir.as_deref().ok_or_else(|| {
            std::io::Error::other("scripts.dir is not set: no script directory to serve")
        })?)?;
        let mut commands: Vec<String> = agi::Command::NAMES
            .iter()
            .map(|n| {
                n.split(' ')
                    .next()
                    .expect("a command has a word")
                    .to_string()
            })
            .chain(config.extra_commands.iter().map(|c| c.to_ascii_uppercase()))
            .collect();
        commands.sort();
        commands.dedup();
        let run_as = match &config.user {
            Some(name) => {
                let user = RunAs::lookup(name).map_err(std::io::Error::other)?;
                user.check_permitted().map_err(std::io::Error::other)?;
                Some(Arc::new(user))
            }
            None => None,
        };
        let env = AstEnv::new(&config, &dir, None, run_as.clone());
        let mut warm = Vec::new();
        let mut limits = Vec::new();
        metrics.limit_scripts(config.metrics_max_scripts);
        for r in &config.route {
            let file = match resolve(&dir, &r.path) {
                Ok(script) => {
                    let file = script.file.clone();
                    if r.prewarm > 0 {
                        warm.push((script, r.prewarm));
                    }
                    file
                }
                Err(e) if r.prewarm > 0 => {
                    return Err(std::io::Error::other(format!(
                        "scripts.route {:?} (prewarm): {e}",
                        r.path
                    )));
                }
                // A script not there yet may come later: its settings apply to the path as
                // written, tidied (a symlink to it, made later, is not followed here).
                Err(e) => {
                    warn!(path = %r.path, error = %e, "scripts.route names no script yet");
                    tidy(&r.path)
                }
            };
            // Configured scripts get their series before any the callers ask for.
            metrics.label_for(&file);
            limits.push((file, r.max_run_ms));
        }
        let pools = prewarm::Pools::start(warm, config.working_dir.clone(), env, metrics.clone());
        if config.max_running == 0 {
            return Err(std::io::Error::other(
                "scripts.max_running must be at least 1",
            ));
        }
        metrics.running_max.set(config.max_running as i64);
        info!(dir = %dir.display(), prewarmed = config.route.iter().filter(|r| r.prewarm > 0).count(),
              max_running = config.max_running,
              user = run_as.as_ref().map_or("(tandem's own)", |u| u.name.as_str()),
              "serving AGI scripts");
        Ok(ScriptRunner {
            running: Arc::new(tokio::sync::Semaphore::new(config.max_running)),
            config,
            limits,
            dir,
            max_line_bytes,
            commands,
            metrics,
            pools,
            intercept: None,
            run_as,
        })
    }

    /// Answers the commands `intercept` takes in Tandem instead of relaying them.
    pub fn with_intercept(mut self, intercept: Arc<dyn Intercept>) -> Self {
        self.intercept = Some(intercept);
        self
    }

    /// The wall-clock limit of `file` (a [`ScriptPath::file`]).
    fn limit_for(&self, file: &str) -> Option<Duration> {
        let ms = self
            .limits
            .iter()
            .find(|(f, _)| f == file)
            .and_then(|(_, ms)| *ms)
            .unwrap_or(self.config.max_run_ms);
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    /// True for a line that is an AGI command: no control characters (a final CR is passed on,
    /// as Asterisk would read it), and a first word that names a command.
    fn is_command(&self, line: &[u8]) -> bool {
        let body = line.strip_suffix(b"\r").unwrap_or(line);
        if body.iter().any(|&b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return false;
        }
        let first = body
            .split(|&b| b == b' ' || b == b'\t')
            .next()
            .unwrap_or(b"");
        let Ok(first) = std::str::from_utf8(first) else {
            return false;
        };
        self.commands
            .binary_search(&first.to_ascii_uppercase())
            .is_ok()
    }

    /// The path as asked for, percent-decoded, query removed, leading `/` kept (so that an
    /// absolute path is seen as one).
    fn requested(session: &Session) -> String {
        let raw = session.header().network_script().unwrap_or("");
        let path = raw.split_once('?').map_or(raw, |(p, _)| p);
        agi::percent_decode(path)
    }
}

impl Handler for ScriptRunner {
    async fn call(&self, session: &mut Session) -> Result<(), AgiError> {
        let requested = Self::requested(session);
        let script = match resolve(&self.dir, &requested) {
            Ok(s) => s,
            Err(e) => {
                self.metrics.refused(e.reason());
                return Err(AgiError::handler(ScriptError::Refused(e)));
            }
        };
        let name = script.name.clone();
        let Ok(_running) = self.running.clone().try_acquire_owned() else {
            self.metrics.refused("max_running");
            return Err(AgiError::handler(ScriptError::Busy {
                script: name,
                max: self.config.max_running,
            }));
        };
        self.metrics.running.inc();
        let _counted = RunningGauge(&self.metrics.running);
        let m = self.metrics.for_script(&script.file);
        m.sessions.inc();

        // The header as classic AGI writes it for a local script.
        let mut header = session.header().clone();
        header.set("agi_request", &name);
        let header = header.encode(false);

        let started = Instant::now();
        let child = match self.pools.take(&script.file) {
            Some(child) => child,
            None => {
                let env = AstEnv::new(
                    &self.config,
                    &self.dir,
                    Some(session.header().version()),
                    self.run_as.clone(),
                );
                process::spawn(&script.full, session.args(), &self.config.working_dir, &env)
                    .map_err(|source| {
                        AgiError::handler(ScriptError::Spawn {
                            script: name.clone(),
                            source,
                        })
                    })?
            }
        };
        m.spawn_seconds.observe(started.elapsed().as_secs_f64());
        let outcome = self
            .relay(session, child, &script, &m, header, started)
            .await;
        m.run_seconds.observe(started.elapsed().as_secs_f64());
        outcome
    }
}

/// Takes one off the running-scripts gauge when the session's script is done with.
struct RunningGauge<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl Drop for RunningGauge<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// How the relay loop ended.
enum End {
    /// The script closed its stdout: it is done.
    ScriptDone,
    /// Asterisk closed the connection (or the channel is gone and it said so by closing).
    AsteriskGone,
    /// The script outlived its `max_run_ms`.
    TimedOut,
    Failed(AgiError),
}

impl ScriptRunner {
    async fn relay(
        &self,
        session: &mut Session,
        mut child: std::process::Child,
        script: &ScriptPath,
        m: &metrics::PerScript,
        header: String,
        started: Instant,
    ) -> Result<(), AgiError> {
        let name = script.name.as_str();
        let pid = child.id();
        let id = session.id();
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            unreachable!("scripts are started with piped stdio");
        };
        let mut stdin = tokio::process::ChildStdin::from_std(stdin)?;
        let mut stdout = tokio::process::ChildStdout::from_std(stdout)?;
        tokio::spawn(process::log_stderr(
            tokio::process::ChildStderr::from_std(stderr)?,
            name.to_string(),
            id,
            self.config.max_stderr_lines,
            self.config.max_stderr_line_bytes,
        ));
        // A script that exits before reading its header is not an error of ours: EPIPE is
        // ignored here and below, and the end of its stdout ends the session.
        let _ = stdin.write_all(header.as_bytes()).await;

        let limit = self.limit_for(&script.file);
        let deadline = limit.map(|l| tokio::time::Instant::from_std(started + l));
        let mut lines = crate::lines::LineBuffer::new(self.max_line_bytes);
        let mut reply = Vec::with_capacity(256);
        let mut sighup_sent = false;
        let sighup = |session: &Session, sent: &mut bool| {
            if session.hung_up() && !*sent && self.config.sighup {
                process::signal(pid, libc::SIGHUP);
                *sent = true;
            }
        };
        let end = loop {
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                line = lines.read_line(&mut stdout) => {
                    let line = match line {
                        Ok(Some(l)) => l.strip_suffix(b"\n").unwrap_or(l),
                        Ok(None) => break End::ScriptDone,
                        Err(crate::lines::LineError::TooLong { max }) => {
                            break End::Failed(AgiError::handler(ScriptError::LineTooLong {
                                script: name.to_string(),
                                max,
                            }));
                        }
                        Err(crate::lines::LineError::Io(e)) => break End::Failed(e.into()),
                    };
                    if line.iter().all(|b| b.is_ascii_whitespace()) {
                        continue; // a blank line is not a command
                    }
                    if !self.is_command(line) {
                        let shown: String = String::from_utf8_lossy(line).chars().take(120).collect();
                        break End::Failed(AgiError::handler(ScriptError::NotProtocol {
                            script: name.to_string(),
                            line: shown,
                        }));
                    }
                    reply.clear();
                    if let Some(answer) = self
                        .intercept
                        .as_ref()
                        .and_then(|i| std::str::from_utf8(line).ok().and_then(|l| i.intercept(l)))
                    {
                        reply.extend_from_slice(answer.await.as_bytes());
                        reply.push(b'\n');
                        let _ = stdin.write_all(&reply).await;
                        continue;
                    }
                    let relayed = match deadline {
                        Some(d) => match tokio::time::timeout_at(d, session.relay(line, &mut reply)).await {
                            Ok(r) => r,
                            Err(_) => break End::TimedOut,
                        },
                        None => session.relay(line, &mut reply).await,
                    };
                    let response = match relayed {
                        Ok(r) => r,
                        Err(AgiError::Disconnected) => break End::AsteriskGone,
                        Err(e) => break End::Failed(e),
                    };
                    // The script reads its reply first and learns of the hangup after, as from
                    // Asterisk's own loop, which signals a classic script on its next turn.
                    let _ = stdin.write_all(&reply).await;
                    if !session.take_arrived_hangups() && is_minus_one(&response) {
                        let command = agi::command_name(&String::from_utf8_lossy(line))
                            .filter(|name| agi::needs_live_channel(name));
                        if let Some(command) = command {
                            match session.hung_up_after_minus_one(command).await {
                                Ok(_) => {}
                                Err(AgiError::Disconnected) => break End::AsteriskGone,
                                Err(e) => break End::Failed(e),
                            }
                        }
                    }
                    sighup(session, &mut sighup_sent);
                }
                said = session.unsolicited() => match said {
                    Ok(crate::session::Unsolicited::Hangup) => sighup(session, &mut sighup_sent),
                    Ok(crate::session::Unsolicited::Closed) => break End::AsteriskGone,
                    Err(e) => break End::Failed(e),
                },
                () = timeout => break End::TimedOut,
            }
        };
        drop(stdin);
        let grace = Duration::from_millis(self.config.kill_grace_ms);
        let (exit, result) = match end {
            End::ScriptDone => {
                // The session ends with the script's output, as under Asterisk: the script's exit
                // (an interpreter's shutdown takes milliseconds) is waited for, and recorded, off
                // the call's path.
                let metrics = self.metrics.clone();
                let (name, label) = (name.to_string(), m.label.clone());
                tokio::spawn(async move {
                    let exit = process::reap(child, grace).await;
                    record_exit(&metrics, &name, &label, id, exit);
                });
                return Ok(());
            }
            abnormal => {
                // The session ends before the script did: stop it, then make sure nothing it
                // started outlives it (its process group), so no process is ever orphaned.
                let result = match abnormal {
                    End::AsteriskGone => {
                        if !sighup_sent {
                            process::signal(pid, libc::SIGHUP);
                        }
                        debug!(
                            session = id,
                            script = name,
                            "Asterisk closed the connection; stopping the script"
                        );
                        Err(AgiError::Disconnected)
                    }
                    End::TimedOut => {
                        m.timeouts.inc();
                        process::kill_group(pid);
                        let limit_ms = limit.map_or(0, |l| l.as_millis() as u64);
                        Err(AgiError::handler(ScriptError::TimedOut {
                            script: name.to_string(),
                            limit_ms,
                        }))
                    }
                    End::Failed(e) => {
                        process::signal(pid, libc::SIGTERM);
                        Err(e)
                    }
                    End::ScriptDone => unreachable!("handled above"),
                };
                let exit = process::reap(child, grace).await;
                process::kill_group(pid);
                (exit, result)
            }
        };
        record_exit(&self.metrics, name, &m.label, id, exit);
        result
    }
}

/// `path` without `.` segments and empty ones (`./sub//x.sh` is `sub/x.sh`): the file a
/// configured path names when it cannot be resolved yet.
fn tidy(path: &str) -> String {
    path.split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// A `200` whose result is negative: from a command that needs the channel, the caller may have
/// hung up while it ran.
fn is_minus_one(response: &agi::Response) -> bool {
    matches!(response, agi::Response::Success(r) if r.result.starts_with('-'))
}

/// Counts how a script ended under its `label`, and logs a failure code under its `name`.
fn record_exit(metrics: &ScriptMetrics, name: &str, label: &str, session: u64, exit: Exit) {
    match exit {
        Exit::Code(c) => metrics.exit(label, c),
        Exit::Signal(s) => metrics.signal(label, s),
        Exit::Unknown => {}
    }
    if let Exit::Code(c) = exit
        && c != 0
    {
        warn!(
            session,
            script = name,
            code = c,
            "script exited with a failure code"
        );
    }
}
