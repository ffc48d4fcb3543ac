//! The load: SIPp sending REGISTER from a users file, one step of the rate ladder at a time.
//!
//! A rate above what one SIPp process is asked to carry is split over several processes, each
//! with its own slice of the AORs (so no two processes refresh the same AOR at once) and its
//! own share of the rate. Each process writes its statistics file (`-trace_stat`); the last
//! line holds the cumulative counters read here. SIPp's own response times are not used: SIPp
//! 3.6 reads `CLOCK_MONOTONIC_COARSE`, whose tick is the kernel's jiffy (4 ms here), too coarse
//! for a 2 ms goal, so latency comes from the wire (`wire.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The REGISTER every call sends, as SIPp's template. `[field0]` is the user, `[field1]` its
/// credentials; the From tag and Call-ID are new for every call, the branch for every message.
const REGISTER: &str = "REGISTER sip:tandem SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
Max-Forwards: 70
From: <sip:[field0]@tandem>;tag=[call_number]
To: <sip:[field0]@tandem>
Call-ID: [call_id]
CSeq: CSEQ REGISTER
Contact: <sip:[field0]@[local_ip]:[local_port]>
Expires: 3600
User-Agent: tandem-bench
AUTH
Content-Length: 0

";

/// The scenario file: one REGISTER answered by 200, or, with `auth`, the 401 challenge and
/// a second REGISTER with MD5 credentials (SIPp's `[authentication]` knows MD5 only).
pub(super) fn scenario(auth: bool) -> String {
    let send = |cseq: u32, credentials: bool| {
        let msg = REGISTER
            .replace("CSEQ", &cseq.to_string())
            .replace("AUTH\n", if credentials { "[field1]\n" } else { "" });
        format!("  <send retrans=\"500\">\n    <![CDATA[\n{msg}    ]]>\n  </send>\n")
    };
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<scenario name=\"register\">\n",
    );
    if auth {
        xml.push_str(&send(1, false));
        xml.push_str("  <recv response=\"401\" auth=\"true\" />\n");
        xml.push_str(&send(2, true));
    } else {
        xml.push_str(&send(1, false));
    }
    xml.push_str("  <recv response=\"200\" />\n</scenario>\n");
    xml
}

/// The password of user `n` (the same for every server).
pub(super) fn password(user: u64) -> String {
    format!("pw{user}")
}

/// Writes `parts` users files for `users`, slice `j` holding every `parts`-th user from the
/// `j`-th. Returns their paths. The second field is SIPp's
/// `[authentication]` keyword itself: SIPp expands keywords in a field, but does not parse a
/// field nested in the keyword's parameters.
pub(super) fn users_files(
    dir: &Path,
    tag: &str,
    users: std::ops::Range<u64>,
    parts: usize,
) -> anyhow::Result<Vec<PathBuf>> {
    (0..parts)
        .map(|j| {
            let path = dir.join(format!("users-{tag}-{j}-of-{parts}.csv"));
            let mut text = String::from("SEQUENTIAL\n");
            for user in users.clone().skip(j).step_by(parts) {
                text.push_str(&format!(
                    "{user};[authentication username={user} password={}]\n",
                    password(user)
                ));
            }
            std::fs::write(&path, text)?;
            Ok(path)
        })
        .collect()
}

/// What one load step asks for.
pub(super) struct Load<'a> {
    pub scenario: &'a Path,
    /// One users file per SIPp process.
    pub users: &'a [PathBuf],
    pub server_port: u16,
    pub rate_per_sec: u32,
    pub calls: u64,
    /// Where the statistics files go.
    pub dir: &'a Path,
}

/// SIPp's cumulative counters over the step, summed over its processes.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Counters {
    pub calls: u64,
    pub successful: u64,
    pub failed: u64,
    /// Failed by SIPp's receive timeout or after its last UDP retransmission.
    pub timed_out: u64,
    pub retransmissions: u64,
    /// Calls SIPp started per second over its run (its `CallRate(C)`), summed over processes.
    pub sipp_call_rate_per_sec: f64,
    /// User + system CPU of the SIPp processes over the step, in percent of one core.
    pub sipp_cpu_percent: f64,
    pub processes: usize,
}

/// A SIPp process; killed and reaped if dropped before it exits.
struct Sipp {
    child: Child,
    stats: PathBuf,
    errors: PathBuf,
}

impl Drop for Sipp {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs one step: the processes start together, each at its share of the rate, and the step
/// ends when they have all finished their calls (or after a deadline, when they are killed).
pub(super) fn run(load: &Load<'_>) -> anyhow::Result<Counters> {
    let parts = load.users.len();
    let cpu_before = children_cpu_seconds();
    let started = Instant::now();
    let secs = load.calls as f64 / load.rate_per_sec as f64;
    let mut procs = Vec::with_capacity(parts);
    for (j, users) in load.users.iter().enumerate() {
        let stats = load.dir.join(format!("sipp-stat-{j}.csv"));
        let _ = std::fs::remove_file(&stats);
        // A file, not a pipe: a pipe nobody reads during the step could fill and stall SIPp.
        let errors = load.dir.join(format!("sipp-stderr-{j}.log"));
        let share =
            |total: u64| total / parts as u64 + u64::from((j as u64) < total % parts as u64);
        let child = Command::new("sipp")
            .arg("-sf")
            .arg(load.scenario)
            .arg("-inf")
            .arg(users)
            .args(["-r", &share(u64::from(load.rate_per_sec)).to_string()])
            .args(["-rp", "1000", "-m", &share(load.calls).to_string()])
            // A large socket buffer, so that a burst is not lost in SIPp's own socket.
            .args([
                "-buff_size",
                "8388608",
                "-t",
                "u1",
                "-i",
                "127.0.0.1",
                "-p",
                "0",
            ])
            .args([
                "-recv_timeout",
                "2000",
                "-nostdin",
                "-trace_stat",
                "-fd",
                "1",
            ])
            .arg("-stf")
            .arg(&stats)
            // A backstop: SIPp ends itself well after the step should have ended.
            .args(["-timeout", &format!("{}s", secs.ceil() as u64 + 20)])
            .arg(format!("127.0.0.1:{}", load.server_port))
            .current_dir(load.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&errors)?)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start sipp (is sip-tester installed?): {e}"))?;
        procs.push(Sipp {
            child,
            stats,
            errors,
        });
    }
    let deadline = started + Duration::from_secs_f64(secs + 30.0);
    let mut out = Counters {
        processes: parts,
        ..Counters::default()
    };
    for mut p in procs {
        let status = loop {
            if let Some(s) = p.child.try_wait()? {
                break s;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "sipp did not end its step in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = std::fs::read_to_string(&p.errors).unwrap_or_default();
        // 0: every call succeeded; 1: some failed. Anything else is SIPp failing to run.
        anyhow::ensure!(
            matches!(status.code(), Some(0 | 1)),
            "sipp ended with {status}: {}",
            err.trim()
        );
        let c = parse_stats(&std::fs::read_to_string(&p.stats)?)?;
        out.calls += c.calls;
        out.successful += c.successful;
        out.failed += c.failed;
        out.timed_out += c.timed_out;
        out.retransmissions += c.retransmissions;
        out.sipp_call_rate_per_sec += c.sipp_call_rate_per_sec;
    }
    let wall_secs = started.elapsed().as_secs_f64();
    out.sipp_cpu_percent = (children_cpu_seconds() - cpu_before) * 100.0 / wall_secs;
    Ok(out)
}

/// CPU seconds of this process's reaped children. Between two reads in a step the only
/// children that end are the step's SIPp processes (the servers outlive it).
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// Reads the cumulative counters from the last line of a `-trace_stat` file.
fn parse_stats(text: &str) -> anyhow::Result<Counters> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| anyhow::anyhow!("sipp wrote an empty statistics file"))?
        .split(';')
        .collect();
    let last: Vec<&str> = lines
        .next_back()
        .ok_or_else(|| anyhow::anyhow!("sipp wrote no statistics line"))?
        .split(';')
        .collect();
    let field = |name: &str| -> anyhow::Result<f64> {
        let i = header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| anyhow::anyhow!("sipp's statistics have no {name} column"))?;
        last.get(i)
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow::anyhow!("sipp's {name} is not a number"))
    };
    let count = |name: &str| field(name).map(|v| v as u64);
    Ok(Counters {
        calls: count("OutgoingCall(C)")?,
        successful: count("SuccessfulCall(C)")?,
        failed: count("FailedCall(C)")?,
        timed_out: count("FailedTimeoutOnRecv(C)")? + count("FailedMaxUDPRetrans(C)")?,
        retransmissions: count("Retransmissions(C)")?,
        sipp_call_rate_per_sec: field("CallRate(C)")?,
        ..Counters::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_auth_scenario_answers_the_challenge_with_credentials() {
        let xml = scenario(true);
        assert_eq!(xml.matches("<send").count(), 2);
        assert!(xml.contains("<recv response=\"401\" auth=\"true\" />"));
        assert!(xml.contains("CSeq: 2 REGISTER\nContact: <sip:[field0]@"));
        assert_eq!(xml.matches("[field1]").count(), 1);
        let plain = scenario(false);
        assert_eq!(plain.matches("<send").count(), 1);
        assert!(!plain.contains("[field1]"));
    }

    #[test]
    fn counters_come_from_the_last_line() {
        let text = "OutgoingCall(C);SuccessfulCall(C);FailedCall(C);FailedTimeoutOnRecv(C);\
                    FailedMaxUDPRetrans(C);Retransmissions(C);CallRate(C)\n\
                    1;1;0;0;0;0;1.0\n30000;29990;10;4;2;493;9920.63\n";
        let c = parse_stats(text).unwrap();
        assert_eq!(
            (c.calls, c.successful, c.failed, c.timed_out),
            (30000, 29990, 10, 6)
        );
        assert_eq!(c.retransmissions, 493);
        assert_eq!(c.sipp_call_rate_per_sec, 9920.63);
    }
}
