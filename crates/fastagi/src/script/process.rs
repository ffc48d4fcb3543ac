//! A script's process: started as classic AGI starts it, signalled by pid, always reaped.
//!
//! Processes are started with `std::process` (a prewarmed one waits, started, for a session that
//! may run on any worker) and their pipes are handed to the session's runtime when it takes them.
//! Each script leads its own process group, so that a script that must be killed takes its own
//! children with it; a script that ends by itself is left to its background jobs, as classic AGI
//! leaves them.

use super::AstEnv;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tracing::warn;

/// How a script ended, for the log and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// The wait itself failed (should not happen: the process is ours).
    Unknown,
}

impl From<ExitStatus> for Exit {
    fn from(s: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(sig)) => Exit::Signal(sig),
            _ => Exit::Unknown,
        }
    }
}

/// Starts `path` with `args` as argv[1..], in `working_dir`, with the `AST_*` variables, as
/// the user `env` names (if any).
pub fn spawn(
    path: &Path,
    args: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>,
    working_dir: &Path,
    env: &AstEnv,
) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(path);
    cmd.args(args)
        .current_dir(working_dir)
        .envs(env.vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(user) = env.run_as() {
        user.apply(&mut cmd);
    }
    // Tandem's own umask keeps its files private; a script gets the one Tandem was started
    // with, as Asterisk would give it (its files are often for Asterisk to read).
    if let Some(mask) = filemode::inherited_umask().filter(|m| *m != filemode::UMASK) {
        // SAFETY: umask is async-signal-safe and touches only the child's mask.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(mask as libc::mode_t);
                Ok(())
            });
        }
    }
    cmd.spawn()
}

/// Sends `signal` to the process `pid` (not yet reaped: its pid cannot have been reused).
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) has no memory effects; a stale pid only yields ESRCH.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Sends SIGKILL to the process group the script leads (the script and what it started).
pub fn kill_group(pid: u32) {
    // SAFETY: as above; a negative pid names the process group.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
    }
}

/// Waits for `child` to end, for at most `grace`; after that kills its process group and waits
/// for it. Always reaps: no zombie is left behind.
pub async fn reap(mut child: Child, grace: Duration) -> Exit {
    if let Ok(Some(status)) = child.try_wait() {
        return status.into();
    }
    let pid = child.id();
    // The common case: the script closed its stdout while exiting and is about to be a zombie.
    // A pidfd lets the runtime wait for that without a thread; the blocking wait is the fallback.
    if let Some(exited) = pidfd_exit(pid)
        && tokio::time::timeout(grace, exited).await.is_ok()
        && let Ok(Some(status)) = child.try_wait()
    {
        return status.into();
    }
    let mut wait = tokio::task::spawn_blocking(move || child.wait());
    match tokio::time::timeout(grace, &mut wait).await {
        Ok(Ok(Ok(status))) => status.into(),
        Ok(_) => Exit::Unknown,
        Err(_) => {
            kill_group(pid);
            match wait.await {
                Ok(Ok(status)) => status.into(),
                _ => Exit::Unknown,
            }
        }
    }
}

/// A future that completes when process `pid` has exited, through a pidfd (Linux 5.3 and later);
/// `None` where pidfds are not available.
fn pidfd_exit(pid: u32) -> Option<impl std::future::Future<Output = ()>> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it stays open and the same
    // descriptor for the AsyncFd's whole life.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    }
    .ok()?;
    Some(async move {
        let _ = fd.readable().await;
    })
}

/// Copies a script's stderr into the log, line by line, each line with the script's name and
/// the session. At most `max_lines` lines are logged (then a count of the rest); over-long lines
/// are cut at `max_line_bytes`. Reading never stops while the script writes, so a chatty script
/// cannot block on a full pipe.
pub async fn log_stderr(
    mut stderr: tokio::process::ChildStderr,
    script: String,
    session: u64,
    max_lines: usize,
    max_line_bytes: usize,
) {
    let mut chunk = vec![0u8; 4096];
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let (mut logged, mut dropped) = (0usize, 0usize);
    let emit = |line: &mut Vec<u8>, logged: &mut usize, dropped: &mut usize| {
        if line.is_empty() {
            return;
        }
        if *logged < max_lines {
            *logged += 1;
            warn!(script = %script, session, "script stderr: {}", String::from_utf8_lossy(line));
        } else {
            *dropped += 1;
        }
        line.clear();
    };
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                emit(&mut line, &mut logged, &mut dropped);
            } else if line.len() < max_line_bytes {
                line.push(b);
            }
        }
    }
    emit(&mut line, &mut logged, &mut dropped);
    if dropped > 0 {
        warn!(script = %script, session, lines = dropped, "script stderr: further lines not logged");
    }
}
