//! The script action: run with the documented arguments and environment, its stdin the
//! alert's JSON line, never through a shell; retried after a non-zero exit; killed with its
//! process group after its timeout.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use alert_actions::{Actions, Notifier, NotifierOptions};
use alerts::ActionConfig;
use common::{TempDir, alert, wait_stats};

fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn start(name: &str, c: ActionConfig) -> Notifier {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let actions = Actions::from_config(&BTreeMap::from([(name.to_string(), c)])).unwrap();
    Notifier::start(actions, NotifierOptions::default()).unwrap()
}

#[test]
fn a_script_gets_its_arguments_verbatim_its_environment_and_no_shell() {
    let dir = TempDir::new("script");
    let out = dir.0.join("out");
    let marker = dir.0.join("touched");
    let script = dir.0.join("record.sh");
    // The script records what it was given: each argument on its own line, then the
    // environment it sees, then its stdin.
    write_script(
        &script,
        &format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > {out}.args\nenv > {out}.env\ncat > {out}.stdin\n",
            out = out.display()
        ),
    );
    let hostile = format!("x; touch {}", marker.display());
    let notifier = start(
        "block",
        ActionConfig {
            kind: "script".into(),
            program: Some(script.clone()),
            args: vec![
                "--rule={rule}".into(),
                "{key}".into(),
                "{state}/{severity}".into(),
                hostile.clone(),
                "$(id)".into(),
                "{ 192.0.2.1 }".into(),
            ],
            timeout_ms: Some(5000),
            ..Default::default()
        },
    );
    let a = alert("scanner", "203.0.113.9", &["block"]);
    assert!(notifier.submit(a.clone()));
    let stats = wait_stats(&notifier, Duration::from_secs(5), |s| {
        s.actions["block"].sent == 1
    });
    assert_eq!(stats.actions["block"].sent, 1, "{stats:?}");
    let args = std::fs::read_to_string(format!("{}.args", out.display())).unwrap();
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [
            "--rule=scanner",
            "203.0.113.9",
            "firing/critical",
            hostile.as_str(),
            "$(id)",
            "{ 192.0.2.1 }"
        ]
    );
    assert!(!marker.exists(), "an argument reached a shell");
    let env = std::fs::read_to_string(format!("{}.env", out.display())).unwrap();
    let env: BTreeMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(env["TANDEM_ALERT_RULE"], "scanner");
    assert_eq!(env["TANDEM_ALERT_KEY"], "203.0.113.9");
    assert_eq!(env["TANDEM_ALERT_STATE"], "firing");
    assert_eq!(env["TANDEM_ALERT_SEVERITY"], "critical");
    assert_eq!(env["TANDEM_ALERT_KIND"], "fraud.destination");
    assert_eq!(env["TANDEM_ALERT_SUMMARY"], a.summary);
    assert_eq!(env["TANDEM_ALERT_AT"], "2025-11-28T00:00:00.000000Z");
    assert_eq!(env["TANDEM_ALERT_JSON"], a.json_line());
    // Nothing of the caller's environment reaches it.
    assert!(!env.contains_key("CARGO_MANIFEST_DIR"));
    let stdin = std::fs::read_to_string(format!("{}.stdin", out.display())).unwrap();
    assert_eq!(stdin, format!("{}\n", a.json_line()));
    notifier.close(Instant::now() + Duration::from_secs(1));
}

#[test]
fn a_failing_script_is_retried_and_a_slow_one_is_killed_with_its_group() {
    let dir = TempDir::new("script-fail");
    let count = dir.0.join("count");
    let flaky = dir.0.join("flaky.sh");
    // Fails (with a word on stderr) the first time, succeeds the second.
    write_script(
        &flaky,
        &format!(
            "#!/bin/sh\nif [ -e {c} ]; then exit 0; fi\ntouch {c}\necho 'nft: no such set' >&2\nexit 1\n",
            c = count.display()
        ),
    );
    let pid_file = dir.0.join("child.pid");
    let slow = dir.0.join("slow.sh");
    // Starts a child of its own, then outlives its timeout.
    write_script(
        &slow,
        &format!(
            "#!/bin/sh\nsleep 30 &\necho $! > {p}\nsleep 30\n",
            p = pid_file.display()
        ),
    );
    let script = |program: &Path, timeout_ms| ActionConfig {
        kind: "script".into(),
        program: Some(program.to_path_buf()),
        retries: Some(2),
        backoff_ms: Some(20),
        timeout_ms: Some(timeout_ms),
        ..Default::default()
    };
    let config = BTreeMap::from([
        ("flaky".to_string(), script(&flaky, 5000)),
        (
            "slow".to_string(),
            ActionConfig {
                retries: Some(0),
                ..script(&slow, 300)
            },
        ),
    ]);
    let notifier = Notifier::start(
        Actions::from_config(&config).unwrap(),
        NotifierOptions::default(),
    )
    .unwrap();
    assert!(notifier.submit(alert("scanner", "203.0.113.9", &["flaky", "slow"])));
    let stats = wait_stats(&notifier, Duration::from_secs(5), |s| {
        s.actions["flaky"].sent == 1 && s.actions["slow"].given_up == 1
    });
    let (f, s) = (&stats.actions["flaky"], &stats.actions["slow"]);
    assert_eq!((f.sent, f.failed_attempts, f.given_up), (1, 1, 0));
    assert_eq!((s.sent, s.failed_attempts, s.given_up), (0, 1, 1));
    // The slow script's own child went with it.
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(2);
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    while alive(pid) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "the script's child {pid} outlived the timeout");
    notifier.close(Instant::now() + Duration::from_secs(1));
}
