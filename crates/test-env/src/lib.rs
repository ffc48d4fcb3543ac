//! What a test needs from its machine, and what happens when it is missing.
//!
//! Some tests need a tool (tshark, tcpdump, PostgreSQL, Kamailio, SIPp), data beside the
//! checkout (`../shared`), or a privilege (root for network namespaces and tmpfs). On a user's
//! machine such a test skips: [`skip`] prints why and appends the reason to
//! `target/tmp/skipped-tests.log`, so that one command lists every skip of a run:
//!
//! ```sh
//! rm -f target/tmp/skipped-tests.log; cargo test --workspace; cat target/tmp/skipped-tests.log
//! ```
//!
//! Under `CI=true` (set by `.ci/run`) nothing skips: CI installs every tool and has the data,
//! so a missing one is a failure of CI's setup, and [`skip`] panics with the reason.
//!
//! Never: used outside tests.

use std::io::Write;

/// True when running under CI (`CI=true` or `CI=1`), where nothing may skip.
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// Skips the calling test, or part of it, because `why`; under CI, fails it instead.
/// The caller returns (or leaves out the part) after this.
#[track_caller]
pub fn skip(why: &str) {
    let at = std::panic::Location::caller();
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if in_ci() {
        panic!(
            "{test} ({at}) would skip: {why}. Under CI=true nothing skips: \
             .ci/run installs every tool and has the shared data."
        );
    }
    eprintln!("skipped: {why}");
    let log = log_path();
    if let Some(dir) = log.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
    {
        let _ = writeln!(f, "{test} ({}:{}): {why}", at.file(), at.line());
    }
}

/// `target/tmp/skipped-tests.log` of this workspace, or `TANDEM_SKIP_LOG` when set.
pub fn log_path() -> std::path::PathBuf {
    match std::env::var_os("TANDEM_SKIP_LOG") {
        Some(p) => p.into(),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/tmp/skipped-tests.log"),
    }
}
