//! Legacy AGI scripts run through the FastAGI server, by real interpreters (sh, bash, Python,
//! Perl), with the emulator playing Asterisk. Each script records what it saw in a file named
//! after the call's unique id, in its own directory (`AST_AGI_DIR`).

use asterisk_emu::{AgiStatus, Plan};
use fastagi::script::{ScriptConfig, ScriptMetrics, ScriptRoute, ScriptRunner};
use fastagi::{Router, ServerConfig};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

struct Running {
    server: common::Running,
    scripts: Arc<ScriptMetrics>,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl std::ops::Deref for Running {
    type Target = common::Running;
    fn deref(&self) -> &common::Running {
        &self.server
    }
}

impl Running {
    async fn stop(self) {
        self.server.stop().await;
    }

    /// What the script of session `seq` wrote (it names its file after agi_uniqueid).
    async fn record(&self, seq: u64) -> String {
        let path = self.dir.join(format!("out-1795239019.{seq}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = std::fs::read_to_string(&path)
                && s.contains("### end")
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no complete record at {}",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn write_script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The classic dump: argv, cwd, AST_* environment, the header, then two commands.
const DUMP_SH: &str = r####"#!/bin/sh
header=""
while IFS= read -r line; do
  [ -z "$line" ] && break
  header="$header|$line|
"
  case "$line" in agi_uniqueid:*) id="${line#agi_uniqueid: }";; esac
done
out="$AST_AGI_DIR/out-$id"
{
  echo "### argv"
  echo "|$0|"
  for a in "$@"; do echo "|$a|"; done
  echo "### cwd"
  pwd
  echo "### env"
  env | grep '^AST_' | sort
  echo "### header"
  printf '%s' "$header"
} > "$out.tmp"
echo "GET VARIABLE CHANNEL"
IFS= read -r r1
echo "NOOP"
IFS= read -r r2
{ echo "### replies"; echo "$r1"; echo "$r2"; echo "### end"; } >> "$out.tmp"
mv "$out.tmp" "$out"
"####;

async fn start(config: ScriptConfig, scripts: &[(&str, &str)]) -> Running {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    for (name, body) in scripts {
        write_script(&dir, name, body);
    }
    let config = ScriptConfig {
        dir: Some(dir.clone()),
        kill_grace_ms: 300,
        ..config
    };
    let metrics = Arc::new(ScriptMetrics::unregistered());
    let runner = ScriptRunner::new(config, 8192, metrics.clone()).unwrap();
    let router = Router::new().fallback("script", runner);
    let server_config = ServerConfig {
        workers: 1,
        ..common::test_config()
    };
    Running {
        server: common::start(server_config, router).await,
        scripts: metrics,
        dir,
        _tmp: tmp,
    }
}

fn plan(script: &str, args: &[&str]) -> Plan {
    Plan {
        idle_timeout: Duration::from_secs(15),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Plan::route(script)
    }
}

fn section<'a>(record: &'a str, name: &str) -> Vec<&'a str> {
    record
        .split(&format!("### {name}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {name} in {record}"))
        .split("### ")
        .next()
        .unwrap()
        .lines()
        .collect()
}

#[tokio::test]
async fn a_script_sees_exactly_what_classic_agi_gives_it() {
    let server = start(ScriptConfig::default(), &[("dump.sh", DUMP_SH)]).await;
    let p = plan("dump.sh?x=1", &["first arg", "second", "", "quoted"]);
    let out = asterisk_emu::run(server.addr, &p, 7).await.unwrap();
    assert_eq!(out.status, AgiStatus::Success, "{:?}", out.exchanges);
    let record = server.record(7).await;

    // argv: the full path, then each argument, the empty one kept (vector C01).
    let full = server.dir.join("dump.sh");
    assert_eq!(
        section(&record, "argv"),
        [
            format!("|{}|", full.display()).as_str(),
            "|first arg|",
            "|second|",
            "||",
            "|quoted|"
        ]
    );
    assert_eq!(section(&record, "cwd"), ["/"]);

    let env = section(&record, "env");
    let agi_dir = format!("AST_AGI_DIR={}", server.dir.display());
    for expected in [
        "AST_CONFIG_DIR=/etc/asterisk",
        "AST_CONFIG_FILE=/etc/asterisk/asterisk.conf",
        "AST_DATA_DIR=/var/lib/asterisk",
        "AST_KEY_DIR=/var/lib/asterisk/keys",
        "AST_LOG_DIR=/var/log/asterisk",
        "AST_MODULE_DIR=/usr/lib/asterisk/modules",
        "AST_MONITOR_DIR=/var/spool/asterisk/monitor",
        "AST_RUN_DIR=/var/run/asterisk",
        "AST_SPOOL_DIR=/var/spool/asterisk",
        "AST_SYSTEMNAME=",
        "AST_VAR_DIR=/var/lib/asterisk",
        "AST_VERSION=22.10.1",
        agi_dir.as_str(),
    ] {
        assert!(env.contains(&expected), "{expected} not in {env:?}");
    }

    // The header: no agi_network lines, agi_request = the script as asked for, arguments kept,
    // in Asterisk's order (compared with the real recording when it is at hand).
    let header = section(&record, "header");
    assert_eq!(header[0], "|agi_request: dump.sh|");
    assert!(!header.iter().any(|l| l.contains("agi_network")));
    assert!(header.contains(&"|agi_arg_3: |"));
    if let Some(shared) = asterisk_emu::shared_dir() {
        let c01 = std::fs::read_to_string(
            shared.join("vectors/agi/C01_classic_local_script_relative.txt"),
        )
        .unwrap();
        let names = |lines: Vec<&str>| -> Vec<String> {
            lines
                .iter()
                .map(|l| l.trim_matches('|').split(':').next().unwrap().to_string())
                .collect()
        };
        let real: Vec<&str> = c01
            .lines()
            .filter_map(|l| l.strip_prefix(">>> "))
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(
            names(header.clone()),
            names(real),
            "the variables of a classic header, in order"
        );
    } else {
        eprintln!("no shared/ beside the repository: header order checked without the recording");
    }

    // Two commands, relayed one at a time, and their replies back to the script.
    assert_eq!(
        section(&record, "replies"),
        ["200 result=1 (Local/100@tandem-00000007;2)", "200 result=0"]
    );
    assert!(out.violations.is_empty());
    // The exit is reaped and counted after the session has ended, off the call's path.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.scripts.exit_count("dump.sh", 0) != 1 {
        assert!(
            Instant::now() < deadline,
            "the script's exit was never counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
}

const ROUND_TRIP_PY: &str = r####"#!/usr/bin/env python3
import sys
env = {}
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        break
    k, v = line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
    env[k] = v
print("GET FULL VARIABLE ${CALLERID(num)}", flush=True)
caller = sys.stdin.readline().strip()
print('SET VARIABLE FROM_PYTHON "%s %s"' % (env["agi_arg_1"], caller.split("(")[1].rstrip(")")), flush=True)
sys.stdin.readline()
"####;

const ROUND_TRIP_PL: &str = r####"#!/usr/bin/perl
use strict; use warnings;
$| = 1;
my %env;
while (my $line = <STDIN>) { chomp $line; last if $line eq ''; my ($k, $v) = split(/: /, $line, 2); $env{$k} = $v; }
print "DATABASE PUT perl $env{agi_arg_1} \"$env{agi_extension}\"\n";
my $r = <STDIN>;
print "DATABASE GET perl $env{agi_arg_1}\n";
$r = <STDIN>; chomp $r;
print "SET VARIABLE FROM_PERL \"$r\"\n";
<STDIN>;
"####;

#[tokio::test]
async fn python_and_perl_scripts_round_trip_commands() {
    let server = start(
        ScriptConfig::default(),
        &[("py/trip.py", ROUND_TRIP_PY), ("trip.pl", ROUND_TRIP_PL)],
    )
    .await;
    let out = asterisk_emu::run(server.addr, &plan("py/trip.py", &["hello"]), 1)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    let sent: Vec<&str> = out.exchanges.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        sent,
        [
            "GET FULL VARIABLE ${CALLERID(num)}",
            "SET VARIABLE FROM_PYTHON \"hello 2000\""
        ]
    );

    let out = asterisk_emu::run(server.addr, &plan("trip.pl", &["k1"]), 2)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    assert_eq!(
        out.exchanges.last().unwrap().0,
        "SET VARIABLE FROM_PERL \"200 result=1 (100)\""
    );
    server.stop().await;
}

/// Answers, runs the media command given as its first argument, then waits (up to its second
/// argument, in seconds) for SIGHUP before it says anything more: a classic script learns of a
/// hangup only that way. Then it listens for anything on stdin that is not a reply, and uses
/// the channel again.
const HANGUP_PY: &str = r####"#!/usr/bin/env python3
import os, select, signal, sys, time
got = []
signal.signal(signal.SIGHUP, lambda s, f: got.append("SIGHUP"))
env = {}
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line:
        break
    k, _, v = line.partition(": ")
    env[k] = v
def cmd(c):
    sys.stdout.write(c + "\n"); sys.stdout.flush()
    return sys.stdin.readline().rstrip("\n")
replies = [cmd("ANSWER"), cmd(sys.argv[1])]
deadline = time.monotonic() + float(sys.argv[2])
while not got and time.monotonic() < deadline:
    time.sleep(0.005)
before_next = " ".join(got) or "none"
ready, _, _ = select.select([sys.stdin], [], [], 0.2)
unexpected = sys.stdin.readline().rstrip("\n") if ready else ""
replies += [cmd("GET VARIABLE CHANNEL"), cmd('STREAM FILE beep ""')]
with open(os.path.join(os.environ["AST_AGI_DIR"], "out-" + env["agi_uniqueid"]), "w") as f:
    f.write("### signals\n%s\n### before_next\n%s\n### unexpected\n%s\n### replies\n%s\n### end\n"
            % (" ".join(got), before_next, unexpected, "\n".join(replies)))
"####;

const DEAD: &str = "511 Command Not Permitted on a dead channel or intercept routine";

#[tokio::test]
async fn a_relayed_script_sees_the_minus_one_then_sighup_never_a_hangup_line() {
    let server = start(ScriptConfig::default(), &[("hup.py", HANGUP_PY)]).await;
    // As recorded: HANGUP 44 ms after the -1 (S07), 545 ms after it (S15), or only when the
    // next command arrives (S16). In each the script must get SIGHUP before it says anything
    // more, so Tandem has to find the hangup out itself.
    for (seq, (name, during, delay)) in (3..).zip(common::recorded_hangups()) {
        let p = common::hangup_plan("hup.py", during, delay);
        let p = Plan {
            args: vec!["WAIT FOR DIGIT 5000".into(), "10".into()],
            ..p
        };
        let out = asterisk_emu::run(server.addr, &p, seq).await.unwrap();
        assert_eq!(out.status, AgiStatus::Hangup, "{name}");
        let record = server.record(seq).await;
        assert_eq!(section(&record, "before_next"), ["SIGHUP"], "{name}");
        assert_eq!(section(&record, "signals"), ["SIGHUP"], "{name}: once");
        assert_eq!(
            section(&record, "unexpected"),
            [""],
            "{name}: no HANGUP line reached the script"
        );
        assert_eq!(
            section(&record, "replies"),
            [
                "200 result=0".to_string(),
                "200 result=-1".to_string(),
                format!("200 result=1 (Local/100@tandem-{seq:08x};2)"),
                DEAD.to_string(),
            ],
            "{name}"
        );
        if delay.is_none() {
            assert_eq!(
                out.exchanges[2],
                ("CHANNEL STATUS".to_string(), format!("HANGUP\n{DEAD}\n")),
                "{name}: Tandem asked, right after the -1"
            );
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_relayed_failure_on_a_live_channel_is_no_hangup() {
    let server = start(ScriptConfig::default(), &[("hup.py", HANGUP_PY)]).await;
    let p = Plan {
        args: vec!["STREAM FILE nosuchfile \"\"".into(), "0.3".into()],
        ..plan("hup.py", &[])
    };
    let out = asterisk_emu::run(server.addr, &p, 7).await.unwrap();
    assert_eq!(
        out.status,
        AgiStatus::Failure,
        "a missing file fails on a live channel (S13)"
    );
    let record = server.record(7).await;
    assert_eq!(section(&record, "signals"), [""]);
    assert_eq!(
        section(&record, "replies"),
        [
            "200 result=0",
            "200 result=-1 endpos=0",
            "200 result=1 (Local/100@tandem-00000007;2)",
            "200 result=0 endpos=8000",
        ]
    );
    assert_eq!(
        out.exchanges[2],
        ("CHANNEL STATUS".to_string(), "200 result=6\n".to_string()),
        "the probe found the channel up"
    );
    server.stop().await;
}

/// A script that starts a child and then waits forever; it writes both pids first.
const SLEEPER_SH: &str = r####"#!/bin/sh
while IFS= read -r line; do
  [ -z "$line" ] && break
  case "$line" in agi_uniqueid:*) id="${line#agi_uniqueid: }";; esac
done
sleep 1000 &
echo "### pids
$$ $!
### end" > "$AST_AGI_DIR/out-$id"
wait
"####;

fn pids(record: &str) -> Vec<u32> {
    section(record, "pids")[0]
        .split(' ')
        .map(|p| p.parse().unwrap())
        .collect()
}

/// True once `pid` is gone for good (a zombie still has a /proc entry).
async fn gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn when_asterisk_disconnects_the_script_and_its_children_are_killed_and_reaped() {
    use tokio::io::AsyncWriteExt;
    let server = start(ScriptConfig::default(), &[("sleeper.sh", SLEEPER_SH)]).await;
    let mut raw = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    raw.write_all(
        b"agi_network: yes\nagi_network_script: sleeper.sh\nagi_uniqueid: 1795239019.4\n\n",
    )
    .await
    .unwrap();
    let record = server.record(4).await;
    drop(raw);
    for pid in pids(&record) {
        assert!(gone(pid).await, "process {pid} outlived the session");
    }
    server.stop().await;
}

#[tokio::test]
async fn scripts_over_max_running_are_refused_at_once() {
    let config = ScriptConfig {
        max_running: 1,
        ..ScriptConfig::default()
    };
    let server = start(config, &[("sleeper.sh", SLEEPER_SH)]).await;
    // The first call keeps its script running until the emulator gives up on it.
    let first = Plan {
        idle_timeout: Duration::from_secs(2),
        ..plan("sleeper.sh", &[])
    };
    let addr = server.addr;
    let running = tokio::spawn(async move { asterisk_emu::run(addr, &first, 8).await });
    let pids = pids(&server.record(8).await);
    let out = asterisk_emu::run(server.addr, &plan("sleeper.sh", &[]), 9)
        .await
        .unwrap();
    assert!(out.failure_line, "the second call is refused with failure");
    assert_eq!(out.commands, 0);
    assert_eq!(server.scripts.refused_count("max_running"), 1);
    running.await.unwrap().unwrap();
    for pid in pids {
        assert!(gone(pid).await, "process {pid} outlived its session");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_script_over_its_limit_is_killed() {
    let config = ScriptConfig {
        route: vec![ScriptRoute {
            path: "sleeper.sh".into(),
            prewarm: 0,
            max_run_ms: Some(300),
        }],
        ..ScriptConfig::default()
    };
    let server = start(config, &[("sleeper.sh", SLEEPER_SH)]).await;
    let out = asterisk_emu::run(server.addr, &plan("sleeper.sh", &[]), 5)
        .await
        .unwrap();
    assert!(out.failure_line, "the session ended with failure");
    for pid in pids(&server.record(5).await) {
        assert!(gone(pid).await, "process {pid} outlived its limit");
    }
    assert_eq!(server.scripts.timeout_count("sleeper.sh"), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_script_that_prints_garbage_is_cut_off_without_forwarding_it() {
    let garbage = "#!/bin/sh\nwhile IFS= read -r l; do [ -z \"$l\" ] && break; done\n\
echo 'NOOP'\nread -r r\necho '<br /><b>Warning</b>: Undefined variable $x'\necho 'NOOP'\nsleep 5\n";
    let server = start(ScriptConfig::default(), &[("php-ish.sh", garbage)]).await;
    let out = asterisk_emu::run(server.addr, &plan("php-ish.sh", &[]), 6)
        .await
        .unwrap();
    assert!(out.failure_line);
    let sent: Vec<&str> = out.exchanges.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(sent, ["NOOP"], "only the real command reached Asterisk");
    server.stop().await;
}

#[tokio::test]
async fn paths_outside_the_directory_and_unusable_files_are_refused() {
    let server = start(
        ScriptConfig::default(),
        &[("ok.sh", DUMP_SH), ("sub/inner.sh", DUMP_SH)],
    )
    .await;
    std::os::unix::fs::symlink("/bin/sh", server.dir.join("escape")).unwrap();
    std::fs::write(server.dir.join("noexec.sh"), "#!/bin/sh\n").unwrap();
    for (script, reason) in [
        ("../ok.sh", "traversal"),
        ("sub/../../etc/passwd", "traversal"),
        ("%2e%2e/%2e%2e/bin/sh", "traversal"),
        ("/bin/sh", "absolute"),
        ("escape", "outside_directory"),
        ("noexec.sh", "not_executable"),
        ("missing.sh", "missing"),
        ("sub", "not_a_file"),
    ] {
        let before = server.scripts.refused_count(reason);
        let out = asterisk_emu::run(server.addr, &plan(script, &[]), 9)
            .await
            .unwrap();
        assert!(out.failure_line, "{script} was not refused");
        assert_eq!(out.commands, 0, "{script}");
        assert_eq!(
            server.scripts.refused_count(reason),
            before + 1,
            "{script}: {reason}"
        );
    }
    // The query string is never part of the file name.
    let out = asterisk_emu::run(server.addr, &plan("sub/inner.sh?x=../../y", &[]), 10)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    server.stop().await;
}

#[tokio::test]
async fn a_prewarmed_script_gets_the_call_with_arguments_in_the_header_only() {
    let config = ScriptConfig {
        route: vec![ScriptRoute {
            path: "dump.sh".into(),
            prewarm: 2,
            max_run_ms: None,
        }],
        ..ScriptConfig::default()
    };
    let server = start(config, &[("dump.sh", DUMP_SH)]).await;
    // Let the warmer start its processes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = asterisk_emu::run(server.addr, &plan("dump.sh", &["a1"]), 11)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    let record = server.record(11).await;
    let full = server.dir.join("dump.sh");
    assert_eq!(
        section(&record, "argv"),
        [format!("|{}|", full.display())],
        "argv holds only the path"
    );
    assert!(section(&record, "header").contains(&"|agi_arg_1: a1|"));
    server.stop().await;
}

#[tokio::test]
async fn a_script_that_writes_several_commands_at_once_is_relayed_one_at_a_time() {
    let eager = "#!/bin/sh\nwhile IFS= read -r l; do [ -z \"$l\" ] && break; done\n\
printf 'NOOP\\nGET VARIABLE CHANNEL\\nSET VARIABLE P 1\\n'\nread -r a\nread -r b\nread -r c\n";
    let server = start(ScriptConfig::default(), &[("eager.sh", eager)]).await;
    let out = asterisk_emu::run(server.addr, &plan("eager.sh", &[]), 12)
        .await
        .unwrap();
    assert_eq!(out.status, AgiStatus::Success);
    assert!(out.violations.is_empty(), "{:?}", out.violations);
    assert_eq!(out.commands, 3);
    server.stop().await;
}

/// Reads its header and ends.
const QUICK_SH: &str = "#!/bin/sh\nwhile IFS= read -r l; do [ -z \"$l\" ] && break; done\n";

#[tokio::test]
async fn every_spelling_of_a_script_counts_as_its_file_and_past_the_cap_as_other() {
    let config = ScriptConfig {
        metrics_max_scripts: 2,
        ..ScriptConfig::default()
    };
    let scripts = [
        ("ok.sh", QUICK_SH),
        ("sub/inner.sh", QUICK_SH),
        ("third.sh", QUICK_SH),
    ];
    let server = start(config, &scripts).await;
    std::os::unix::fs::symlink("ok.sh", server.dir.join("alias")).unwrap();
    let spellings = [
        "ok.sh",
        "./ok.sh",
        ".//ok.sh",
        "alias",
        "sub/inner.sh",
        "sub//inner.sh",
        "./sub/./inner.sh",
        "third.sh",
        "./third.sh",
        "missing.sh",
        "./missing.sh",
    ];
    for (seq, script) in spellings.iter().enumerate() {
        asterisk_emu::run(server.addr, &plan(script, &[]), 100 + seq as u64)
            .await
            .unwrap();
    }
    let m = &server.scripts;
    assert_eq!(m.session_count("ok.sh"), 4, "four spellings of one file");
    assert_eq!(m.session_count("sub/inner.sh"), 3);
    assert_eq!(m.session_count("other"), 2, "past metrics_max_scripts");
    for spelling in [
        "./ok.sh",
        "alias",
        "sub//inner.sh",
        "third.sh",
        "missing.sh",
    ] {
        assert_eq!(m.session_count(spelling), 0, "{spelling} has no series");
    }
    assert_eq!(m.refused_count("missing"), 2, "refusals by reason only");
    server.stop().await;
}

#[tokio::test]
async fn a_script_limit_holds_whatever_the_spelling() {
    let config = ScriptConfig {
        route: vec![ScriptRoute {
            path: "./sleeper.sh".into(),
            prewarm: 0,
            max_run_ms: Some(300),
        }],
        ..ScriptConfig::default()
    };
    let server = start(config, &[("sleeper.sh", SLEEPER_SH)]).await;
    for (seq, spelling) in ["sleeper.sh", ".//sleeper.sh"].iter().enumerate() {
        let out = asterisk_emu::run(server.addr, &plan(spelling, &[]), 20 + seq as u64)
            .await
            .unwrap();
        assert!(out.failure_line, "{spelling} ran past its limit");
    }
    assert_eq!(server.scripts.timeout_count("sleeper.sh"), 2);
    server.stop().await;
}
