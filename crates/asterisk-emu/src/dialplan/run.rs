//! A call through a [`Dialplan`]: priorities run one after the other from an extension's first,
//! each application as Asterisk 22 runs it, each step recorded as its verbose log writes it.

use super::{Dialplan, expr};
use crate::channel::{Channel, separate_args};
use crate::session::{AgiStatus, EmuError, Plan};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The most priorities one call runs before it is stopped as a loop.
pub const MAX_STEPS: usize = 10_000;
/// The deepest Gosub nesting (Asterisk's own limit is far higher; a test needs no more).
pub const MAX_GOSUB_DEPTH: usize = 64;

/// A FastAGI host as the dialplan names it (`127.0.0.1:4573`, the port always written) and
/// where it really listens in this test: the dialplan is run as written, only the socket
/// differs, as a name server or a port forward would make it.
#[derive(Debug, Clone)]
pub struct AgiHost {
    pub name: String,
    pub addr: SocketAddr,
}

/// One priority run: `Executing [s@macro-dial:6] Goto("chan", "tandem")` in Asterisk's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub context: String,
    pub exten: String,
    pub priority: u32,
    /// The application's registered name (`NoOp` however it was written).
    pub app: String,
    /// Its data after substitution.
    pub data: String,
}

impl Step {
    /// The line Asterisk's verbose log writes for this step on `channel`.
    pub fn asterisk_line(&self, channel: &str) -> String {
        format!(
            "Executing [{}@{}:{}] {}(\"{channel}\", \"{}\")",
            self.exten, self.context, self.priority, self.app, self.data
        )
    }
}

/// How a call left the dialplan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEnd {
    /// Hangup(), or the caller hung up during an AGI.
    Hangup,
    /// A Dial was answered: the call is bridged, and the dialplan does not go on.
    Answered { dial: String },
    /// No priority after the last one run.
    FellThrough,
    /// The extension dialled (or jumped to) does not exist.
    NoExtension { context: String, exten: String },
    /// An application ended the call with an error (Dial with nothing to dial).
    Failed { app: String, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum DialplanError {
    #[error("{at}: application {app:?} is not emulated")]
    UnknownApplication { app: String, at: String },
    #[error("more than {MAX_STEPS} priorities run: a loop in the dialplan?")]
    TooManySteps,
    #[error("Gosub deeper than {MAX_GOSUB_DEPTH}")]
    TooDeep,
    #[error("AGI at {at}: {source}")]
    Agi { at: String, source: EmuError },
}

/// Where a call is: context, extension, priority.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Location {
    context: String,
    exten: String,
    priority: u32,
}

/// A Gosub's frame: where Return goes, and the ARGn it hid.
struct Frame {
    back: Location,
    saved_args: Vec<(String, Option<String>)>,
}

enum Flow {
    Next,
    Jump(Location),
    End(CallEnd),
}

/// A call: its channel, where its AGI sessions go, and what it did.
pub struct Call {
    pub channel: Channel,
    pub agi_hosts: Vec<AgiHost>,
    /// Classic AGI scripts (`AGI(dialparties.agi)`): Asterisk's `astagidir`.
    pub agi_dir: Option<PathBuf>,
    /// The DIALSTATUS a Dial ends with (ANSWER by default: the call is bridged).
    pub dial_status: String,
    /// How long an AGI session may stay silent (Asterisk has no such limit; a test must).
    pub agi_idle_timeout: Duration,
    pub steps: Vec<Step>,
    /// What Asterisk would log as WARNING during the call.
    pub warnings: Vec<String>,
    /// Every Dial's data, answered or not.
    pub dials: Vec<String>,
    /// Every Playback's file.
    pub playbacks: Vec<String>,
    frames: Vec<Frame>,
    agi_sessions: u64,
}

impl Call {
    pub fn new(channel: Channel) -> Call {
        Call {
            channel,
            agi_hosts: Vec::new(),
            agi_dir: None,
            dial_status: "ANSWER".into(),
            agi_idle_timeout: Duration::from_secs(30),
            steps: Vec::new(),
            warnings: Vec::new(),
            dials: Vec::new(),
            playbacks: Vec::new(),
            frames: Vec::new(),
            agi_sessions: 0,
        }
    }

    /// The steps as Asterisk's log lines.
    pub fn log(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(|s| s.asterisk_line(&self.channel.name))
            .collect()
    }

    /// Runs the call from `exten`'s first priority in `context` until it ends.
    pub async fn run(
        &mut self,
        dialplan: &Dialplan,
        context: &str,
        exten: &str,
    ) -> Result<CallEnd, DialplanError> {
        for (k, v) in &dialplan.globals {
            self.channel
                .variables
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        let mut at = Location {
            context: context.to_string(),
            exten: exten.to_string(),
            priority: 1,
        };
        for _ in 0..MAX_STEPS {
            let Some((found_in, extension)) = dialplan.find(&at.context, &at.exten) else {
                return Ok(CallEnd::NoExtension {
                    context: at.context,
                    exten: at.exten,
                });
            };
            let Some(priority) = extension.priority(at.priority) else {
                return Ok(CallEnd::FellThrough);
            };
            at.context = found_in.to_string();
            self.channel.context = at.context.clone();
            self.channel.extension = at.exten.clone();
            self.channel.priority = at.priority.to_string();
            self.channel.warnings.clear();
            let data = self.channel.substitute(&priority.data);
            self.warnings.append(&mut self.channel.warnings);
            let app =
                canonical(&priority.app).ok_or_else(|| DialplanError::UnknownApplication {
                    app: priority.app.clone(),
                    at: format!("{}@{}:{}", at.exten, at.context, at.priority),
                })?;
            self.steps.push(Step {
                context: at.context.clone(),
                exten: at.exten.clone(),
                priority: at.priority,
                app: app.to_string(),
                data: data.clone(),
            });
            let flow = if app == "ExecIf" {
                match exec_if_choice(&data) {
                    Some((inner, inner_data)) => {
                        let inner_app =
                            canonical(&inner).ok_or_else(|| DialplanError::UnknownApplication {
                                app: inner.clone(),
                                at: format!("ExecIf at {}@{}", at.exten, at.context),
                            })?;
                        self.execute(dialplan, &at, inner_app, &inner_data).await?
                    }
                    None => Flow::Next,
                }
            } else {
                self.execute(dialplan, &at, app, &data).await?
            };
            match flow {
                Flow::Next => at.priority += 1,
                Flow::Jump(to) => at = to,
                Flow::End(end) => return Ok(end),
            }
        }
        Err(DialplanError::TooManySteps)
    }

    async fn execute(
        &mut self,
        dialplan: &Dialplan,
        at: &Location,
        app: &str,
        data: &str,
    ) -> Result<Flow, DialplanError> {
        Ok(match app {
            "NoOp" | "Verbose" | "Wait" => Flow::Next,
            "Answer" => {
                self.channel.up = true;
                Flow::Next
            }
            "Hangup" => Flow::End(CallEnd::Hangup),
            "Set" => {
                let (name, value) = data.split_once('=').unwrap_or((data, ""));
                self.set(name, value);
                Flow::Next
            }
            "Playback" => {
                let file = separate_args(data, ',', 2)
                    .into_iter()
                    .next()
                    .unwrap_or_default();
                let ok = self.channel.sounds.contains(&file);
                if !ok {
                    self.warnings.push(format!(
                        "Playback failed on {} for {file}",
                        self.channel.name
                    ));
                }
                self.playbacks.push(file);
                self.set("PLAYBACKSTATUS", if ok { "SUCCESS" } else { "FAILED" });
                Flow::Next
            }
            "Dial" => {
                let target = separate_args(data, ',', 2)
                    .into_iter()
                    .next()
                    .unwrap_or_default();
                if target.trim().is_empty() {
                    self.warnings
                        .push("Dial requires an argument (technology/resource)".into());
                    return Ok(Flow::End(CallEnd::Failed {
                        app: "Dial".into(),
                        reason: "nothing to dial".into(),
                    }));
                }
                self.dials.push(data.to_string());
                let status = self.dial_status.clone();
                self.set("DIALSTATUS", &status);
                if status == "ANSWER" {
                    Flow::End(CallEnd::Answered {
                        dial: data.to_string(),
                    })
                } else {
                    Flow::Next
                }
            }
            "Goto" => match self.target(dialplan, at, data) {
                Some(to) => Flow::Jump(to),
                None => Flow::End(CallEnd::NoExtension {
                    context: at.context.clone(),
                    exten: data.to_string(),
                }),
            },
            "GotoIf" => {
                // pbx_builtin_gotoif splits at the first `?`, then at the first `:`.
                let (condition, branches) = data.split_once('?').unwrap_or((data, ""));
                let (yes, no) = branches.split_once(':').unwrap_or((branches, ""));
                let chosen = if expr::is_true(condition) { yes } else { no }.to_string();
                if chosen.is_empty() {
                    Flow::Next
                } else {
                    match self.target(dialplan, at, &chosen) {
                        Some(to) => Flow::Jump(to),
                        None => Flow::End(CallEnd::NoExtension {
                            context: at.context.clone(),
                            exten: chosen,
                        }),
                    }
                }
            }
            "Gosub" => self.gosub(dialplan, at, data)?,
            "Return" => match self.frames.pop() {
                Some(frame) => {
                    for (name, value) in frame.saved_args {
                        match value {
                            Some(v) => self.channel.variables.insert(name, v),
                            None => self.channel.variables.remove(&name),
                        };
                    }
                    Flow::Jump(frame.back)
                }
                None => {
                    self.warnings
                        .push("Return without Gosub: stack is empty".into());
                    Flow::End(CallEnd::FellThrough)
                }
            },
            "AGI" => self.agi(at, data).await?,
            other => unreachable!("canonical() names no other application: {other}"),
        })
    }

    /// Set: `__name` and `_name` are inherited names, stored as `name`; `DB(family/key)`
    /// writes the astdb.
    fn set(&mut self, name: &str, value: &str) {
        let name = name.trim().trim_start_matches('_');
        match name.strip_prefix("DB(").and_then(|n| n.strip_suffix(')')) {
            Some(path) => {
                self.channel
                    .astdb
                    .insert(format!("/{path}"), value.to_string());
            }
            None => {
                self.channel
                    .variables
                    .insert(name.to_string(), value.to_string());
            }
        }
    }

    /// `[[context,]exten,]priority` (a number or a label) from `at`.
    fn target(&self, dialplan: &Dialplan, at: &Location, text: &str) -> Option<Location> {
        let parts: Vec<String> = separate_args(text, ',', 3)
            .into_iter()
            .map(|p| p.trim().to_string())
            .collect();
        let (context, exten, priority) = match parts.as_slice() {
            [p] => (at.context.clone(), at.exten.clone(), p.clone()),
            [e, p] => (at.context.clone(), e.clone(), p.clone()),
            [c, e, p] => (c.clone(), e.clone(), p.clone()),
            _ => return None,
        };
        let number = match priority.parse::<u32>() {
            Ok(n) => n,
            Err(_) => dialplan.find(&context, &exten)?.1.label(&priority)?,
        };
        Some(Location {
            context,
            exten,
            priority: number,
        })
    }

    fn gosub(
        &mut self,
        dialplan: &Dialplan,
        at: &Location,
        data: &str,
    ) -> Result<Flow, DialplanError> {
        if self.frames.len() >= MAX_GOSUB_DEPTH {
            return Err(DialplanError::TooDeep);
        }
        // The arguments are inside the parentheses after the priority.
        let (place, args) = match data.find('(') {
            Some(open) => (
                &data[..open],
                separate_args(
                    data[open + 1..]
                        .strip_suffix(')')
                        .unwrap_or(&data[open + 1..]),
                    ',',
                    usize::MAX,
                ),
            ),
            None => (data, Vec::new()),
        };
        let Some(to) = self.target(dialplan, at, place) else {
            self.warnings.push(format!(
                "Attempt to reach a non-existent destination for Gosub: {place}"
            ));
            return Ok(Flow::Next);
        };
        // A new frame hides every ARGn of the one before (app_stack.c: max_argc).
        let before = self
            .channel
            .variables
            .get("ARGC")
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
        let mut saved_args = Vec::new();
        for i in 0..args.len().max(before) {
            let name = format!("ARG{}", i + 1);
            saved_args.push((name.clone(), self.channel.variables.get(&name).cloned()));
            let value = args.get(i).cloned().unwrap_or_default();
            self.channel.variables.insert(name, value);
        }
        saved_args.push(("ARGC".into(), self.channel.variables.get("ARGC").cloned()));
        self.channel
            .variables
            .insert("ARGC".into(), args.len().to_string());
        self.frames.push(Frame {
            back: Location {
                priority: at.priority + 1,
                ..at.clone()
            },
            saved_args,
        });
        Ok(Flow::Jump(to))
    }

    /// AGI: FastAGI for an `agi://` URL, a classic script otherwise. AGISTATUS as res_agi.c
    /// sets it; a hangup during the session ends the call.
    async fn agi(&mut self, at: &Location, data: &str) -> Result<Flow, DialplanError> {
        let mut args = separate_args(data, ',', usize::MAX).into_iter();
        let target = args.next().unwrap_or_default();
        let plan = Plan {
            args: args.collect(),
            idle_timeout: self.agi_idle_timeout,
            channel: Some(Arc::new(self.channel.clone())),
            ..Plan::default()
        };
        self.agi_sessions += 1;
        let seq = self.agi_sessions;
        let where_ = format!("{}@{}:{}", at.exten, at.context, at.priority);
        let outcome = if let Some(url) = target.strip_prefix("agi://") {
            let (host, script) = url.split_once('/').unwrap_or((url, ""));
            let host_port = if host.contains(':') && !host.ends_with(']') {
                host.to_string()
            } else {
                format!("{host}:4573")
            };
            let addr = match self.agi_hosts.iter().find(|h| h.name == host_port) {
                Some(h) => h.addr,
                None => match host_port.parse::<SocketAddr>() {
                    Ok(a) => a,
                    Err(_) => {
                        return Err(DialplanError::Agi {
                            at: where_,
                            source: EmuError::Io(std::io::Error::other(format!(
                                "{host_port} is no address and no AgiHost names it"
                            ))),
                        });
                    }
                },
            };
            let plan = Plan {
                script: script.to_string(),
                ..plan
            };
            match crate::session::run(addr, &plan, seq).await {
                Err(EmuError::Connect { source, .. }) => {
                    self.warnings.push(format!(
                        "Connecting to '{host_port}' failed for url '{target}': {}",
                        connect_error_text(&source)
                    ));
                    self.warnings
                        .push("Couldn't connect to any host.  FastAGI failed.".into());
                    self.set("AGISTATUS", "FAILURE");
                    return Ok(Flow::Next);
                }
                Err(source) => return Err(DialplanError::Agi { at: where_, source }),
                Ok(o) => o,
            }
        } else {
            let path = self
                .agi_dir
                .as_ref()
                .filter(|_| !target.contains('/'))
                .map(|d| d.join(&target))
                .filter(|p| p.is_file());
            let Some(path) = path else {
                self.warnings.push(format!(
                    "Failed to execute '{target}': File does not exist."
                ));
                self.set("AGISTATUS", "NOTFOUND");
                return Ok(Flow::Next);
            };
            crate::classic::run_classic(&path, &plan, seq)
                .await
                .map_err(|source| DialplanError::Agi { at: where_, source })?
        };
        if let Some(after) = outcome.channel {
            // The session's channel, under this call's name.
            let (name, uniqueid) = (self.channel.name.clone(), self.channel.uniqueid.clone());
            self.channel = Channel {
                name,
                uniqueid,
                ..after
            };
        }
        let status = match outcome.status {
            AgiStatus::Success => "SUCCESS",
            AgiStatus::Failure => "FAILURE",
            AgiStatus::Hangup => "HANGUP",
        };
        self.set("AGISTATUS", status);
        Ok(if outcome.status == AgiStatus::Hangup {
            Flow::End(CallEnd::Hangup)
        } else {
            Flow::Next
        })
    }
}

/// The text res_agi.c logs for a refused connection (`strerror`).
fn connect_error_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "Connection refused".into(),
        _ => e.to_string(),
    }
}

/// ExecIf's choice: `condition?app(args)[:app(args)]` → the application that runs and its
/// data, or None when the chosen branch is empty.
fn exec_if_choice(data: &str) -> Option<(String, String)> {
    let mut split = separate_args(data, '?', 2).into_iter();
    let condition = split.next().unwrap_or_default();
    let rest = split.next().unwrap_or_default();
    let mut branches = separate_args(&rest, ':', 2).into_iter();
    let (yes, no) = (
        branches.next().unwrap_or_default(),
        branches.next().unwrap_or_default(),
    );
    let chosen = if expr::is_true(&condition) { yes } else { no };
    if chosen.trim().is_empty() {
        return None;
    }
    let (app, args) = chosen.split_once('(').unwrap_or((&chosen, ""));
    let args = args.rfind(')').map_or(args, |end| &args[..end]);
    Some((app.trim().to_string(), args.to_string()))
}

/// The registered name of an emulated application, whatever case it was written in.
fn canonical(app: &str) -> Option<&'static str> {
    const APPS: [&str; 14] = [
        "AGI", "Answer", "Dial", "ExecIf", "Gosub", "Goto", "GotoIf", "Hangup", "NoOp", "Playback",
        "Return", "Set", "Verbose", "Wait",
    ];
    APPS.iter()
        .find(|a| a.eq_ignore_ascii_case(app.trim()))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_if_picks_a_branch_and_keeps_nested_parentheses() {
        assert_eq!(
            exec_if_choice("1?AGI(dialparties.agi)"),
            Some(("AGI".into(), "dialparties.agi".into()))
        );
        assert_eq!(exec_if_choice("0?AGI(x)"), None);
        assert_eq!(
            exec_if_choice("0?Set(A=1):Set(HASH(X,y)=r(z))"),
            Some(("Set".into(), "HASH(X,y)=r(z)".into()))
        );
        assert_eq!(canonical("Noop"), Some("NoOp"));
        assert_eq!(canonical("Macro"), None);
    }
}
