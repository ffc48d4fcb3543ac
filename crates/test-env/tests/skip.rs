//! A skip is visible on a user's machine and a failure under CI.

use std::process::Command;

/// Run by the test below in a child process; does nothing in a normal run.
#[test]
fn skipping_child() {
    if std::env::var_os("TEST_ENV_CHILD").is_none() {
        return;
    }
    test_env::skip("`sometool` is not installed");
}

#[test]
fn under_ci_a_missing_tool_fails_the_test_and_elsewhere_it_skips_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("skipped.log");
    let run = |ci: &str| {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "skipping_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TEST_ENV_CHILD", "1")
            .env("TANDEM_SKIP_LOG", &log)
            .env("CI", ci)
            .output()
            .unwrap()
    };
    let out = run("true");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "CI=true: the test must fail");
    assert!(
        text.contains("would skip: `sometool` is not installed"),
        "{text}"
    );
    assert!(!log.exists(), "a failure is not a skip");

    let out = run("");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("skipped: `sometool` is not installed"),
        "{text}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("skipping_child") && logged.contains("`sometool` is not installed"),
        "{logged}"
    );
}
