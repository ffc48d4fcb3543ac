//! Classic AGI, as Asterisk runs it: fork the script for the call, hand it the header on stdin,
//! answer each command it prints on stdout. The baseline FastAGI's script relay is measured
//! against, with the script and the answers unchanged.

use crate::session::{AgiStatus, EmuError, Outcome, Plan, Violation, header};
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Runs `script` for one call as classic AGI does: argv[0] the path, the plan's arguments after
/// it, the header without its network lines, one reply per command line.
pub async fn run_classic(script: &Path, plan: &Plan, seq: u64) -> Result<Outcome, EmuError> {
    let started = Instant::now();
    let mut channel = plan.channel_for(seq);
    let mut child = tokio::process::Command::new(script)
        .args(&plan.args)
        .current_dir("/")
        .env("AST_AGI_DIR", script.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let name = script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let full = header(
        plan,
        "127.0.0.1:4573".parse().expect("an address"),
        &channel,
        seq,
    );
    // The header a local script reads: no network lines, agi_request = the script's name.
    let mut local = String::with_capacity(full.len());
    for line in full.split_inclusive('\n') {
        if line.starts_with("agi_network") {
            continue;
        }
        if line.starts_with("agi_request: ") {
            local.push_str(&format!("agi_request: {name}\n"));
        } else {
            local.push_str(line);
        }
    }
    let _ = stdin.write_all(local.as_bytes()).await;

    let mut out = Outcome::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = match tokio::time::timeout(plan.idle_timeout, stdout.read_line(&mut line)).await {
            Err(_) => {
                out.violations.push(Violation::Stalled);
                break;
            }
            Ok(r) => r?,
        };
        if n == 0 {
            break;
        }
        if line.len() > plan.max_line_bytes {
            out.violations
                .push(Violation::LineTooLong { bytes: line.len() });
            break;
        }
        let command = line.trim_end_matches('\n');
        if crate::session::is_failure_line(command) {
            out.failure_line = true;
            out.status = AgiStatus::Failure;
            break;
        }
        out.commands += 1;
        let answer = channel.execute(command);
        let _ = stdin.write_all(answer.text.as_bytes()).await;
        if plan.record {
            out.exchanges.push((command.to_string(), answer.text));
        }
    }
    drop(stdin);
    let status = child.wait().await?;
    if !status.success() && out.status == AgiStatus::Success {
        out.status = AgiStatus::Failure;
    }
    out.duration = started.elapsed();
    if plan.record {
        out.channel = Some(channel);
    }
    Ok(out)
}
