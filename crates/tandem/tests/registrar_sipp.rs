//! The SIP registrar of `tandem serve` driven by SIPp (Debian's `sip-tester` package): each test
//! starts its own server on free loopback ports with a fresh store, plays one or more scenarios
//! of `tests/sipp/` against it, and requires SIPp to exit 0 (every call passed: each expected
//! response came, no unexpected one did, and every `check_it` regular expression held). What
//! a scenario checks is written at its top. Skips with a message when SIPp is missing.

mod common;
mod registrar_common;
use common::{free_port, have_sipp};
use registrar_common::{REALM, Tandem, agi_call, with_user};

use registrar::digest::{self, Algorithm, NonceKey};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A new server (see [`Tandem::serve`]); `None` when SIPp is missing: the test is skipped.
#[track_caller]
fn start(registrar: &str, seed: impl FnOnce(&kv::Store)) -> Option<Tandem> {
    have_sipp().then(|| Tandem::serve(registrar, seed))
}

impl Tandem {
    /// A directory for one SIPp run: the scenario and `files` (injection files: name and
    /// text) are put in and SIPp runs there, so that its logs (named after the scenario) stay
    /// in it and the scenario names its files without a directory.
    fn sipp_dir(&mut self, scenario: &str, files: &[(&str, &str)]) -> PathBuf {
        self.sipp_runs += 1;
        let dir = self
            .dir
            .path()
            .join(format!("sipp-{}-{scenario}", self.sipp_runs));
        std::fs::create_dir(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/sipp")
            .join(format!("{scenario}.xml"));
        std::fs::copy(&src, dir.join(format!("{scenario}.xml")))
            .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    /// The SIPp command for `calls` calls of `scenario` against this server, from a port of
    /// its own, stopping with a failure after `timeout_s` at the latest; `args` are added
    /// (`-s USER`, `-t t1`, injection files).
    fn sipp_command(
        &mut self,
        scenario: &str,
        files: &[(&str, &str)],
        calls: u32,
        timeout_s: u32,
        args: &[&str],
    ) -> (Command, PathBuf) {
        let dir = self.sipp_dir(scenario, files);
        let mut cmd = Command::new("sipp");
        cmd.arg(self.sip.to_string())
            .args(["-sf", &format!("{scenario}.xml")])
            .args(["-i", "127.0.0.1", "-p", &free_port().to_string()])
            .args(["-m", &calls.to_string()])
            .args(["-nostdin", "-trace_err", "-timeout_error"])
            .args(["-timeout", &format!("{timeout_s}s")])
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("screen.txt")).unwrap())
            .stderr(std::fs::File::create(dir.join("stderr.txt")).unwrap());
        (cmd, dir)
    }

    /// Runs `scenario` once (`-trace_msg`) and requires every call to pass.
    fn play(&mut self, scenario: &str, args: &[&str]) -> SippRun {
        self.play_with(scenario, &[], args)
    }

    /// [`Tandem::play`] with injection files.
    fn play_with(&mut self, scenario: &str, files: &[(&str, &str)], args: &[&str]) -> SippRun {
        let mut all = vec!["-trace_msg"];
        all.extend_from_slice(args);
        let (mut cmd, dir) = self.sipp_command(scenario, files, 1, 20, &all);
        let run = SippRun {
            status: cmd.status().unwrap(),
            dir,
        };
        run.assert_passed(self);
        run
    }
}

/// A finished SIPp run and its directory of logs.
struct SippRun {
    status: ExitStatus,
    dir: PathBuf,
}

impl SippRun {
    /// The log whose name ends with `suffix` (`_messages.log`, `_errors.log`, `_logs.log`).
    fn log(&self, suffix: &str) -> String {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().ends_with(suffix))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .unwrap_or_default()
    }

    /// SIPp exits 0 only when every call passed.
    fn assert_passed(&self, tandem: &Tandem) {
        assert!(
            self.status.success(),
            "SIPp failed ({}) in {}\nerrors:\n{}\nmessages:\n{}\nstderr:\n{}\nlast screen:\n{}\ntandem:\n{}",
            self.status,
            self.dir.display(),
            self.log("_errors.log"),
            self.log("_messages.log"),
            std::fs::read_to_string(self.dir.join("stderr.txt")).unwrap_or_default(),
            self.last_screen(),
            tandem.log()
        );
    }

    /// SIPp's last statistics screen, which counts the calls and messages of each step.
    fn last_screen(&self) -> String {
        let screen = std::fs::read_to_string(self.dir.join("screen.txt")).unwrap_or_default();
        let last = screen.rfind("----- Scenario Screen").unwrap_or(0);
        screen[last..].to_string()
    }

    /// The responses SIPp received, in order, from its `-trace_msg` log.
    fn responses(&self) -> Vec<String> {
        self.log("_messages.log")
            .split("-----------------------------------------------")
            .filter_map(|block| {
                // "UDP message received [384] bytes :\n\nSIP/2.0 200 OK\r\n..."
                let (_, msg) = block.split_once(" received ")?;
                let msg = msg.split_once(":\n")?.1.trim_start();
                msg.starts_with("SIP/2.0")
                    .then(|| msg.trim_end().to_string())
            })
            .collect()
    }
}

/// Each (method, code) was answered exactly once.
fn assert_requests(t: &Tandem, answered: &[(&str, u16)]) {
    for (method, code) in answered {
        let series =
            format!("tandem_registrar_requests_total{{method=\"{method}\",code=\"{code}\"}}");
        assert_eq!(t.metric(&series), 1.0, "{series}");
    }
}

/// A new server (see [`start`]) once `scenario` has passed on it, with its SIPp run.
#[track_caller]
fn played(
    registrar: &str,
    seed: impl FnOnce(&kv::Store),
    scenario: &str,
    args: &[&str],
) -> Option<(Tandem, SippRun)> {
    let mut t = start(registrar, seed)?;
    let run = t.play(scenario, args);
    Some((t, run))
}

fn failures(reason: &str) -> String {
    format!("tandem_registrar_auth_failures_total{{reason=\"{reason}\"}}")
}

fn no_auth(extra: &str) -> String {
    format!("algorithms = []\n{extra}")
}

#[test]
fn register_refresh_query_and_unregister_over_udp_and_tcp() {
    let Some((mut t, _)) = played(&no_auth(""), |_| {}, "register", &["-s", "1001"]) else {
        return;
    };
    t.play("register", &["-s", "1002", "-t", "t1"]);
    // Both ended unregistered.
    assert_eq!(t.stored_bindings().values().map(Vec::len).sum::<usize>(), 0);
}

#[test]
fn wildcard_removes_every_binding_and_needs_expires_zero() {
    played(&no_auth(""), |_| {}, "wildcard", &["-s", "1001"]);
}

#[test]
fn an_interval_below_min_expires_gets_423_and_one_above_max_is_held_to_it() {
    let config = no_auth("min_expires = 120\nmax_expires = 7200");
    played(&config, |_| {}, "interval", &["-s", "1001"]);
}

#[test]
fn a_lower_cseq_in_the_same_call_id_gets_400() {
    played(&no_auth(""), |_| {}, "cseq_order", &["-s", "1001"]);
}

#[test]
fn digest_md5_with_both_default_challenges() {
    let args = ["-s", "1001", "-au", "1001", "-ap", "s3cret-md5"];
    played("", with_user("1001", "s3cret-md5"), "auth_md5", &args);
}

#[test]
fn digest_sha256_answered_from_precomputed_responses() {
    const PASSWORD: &str = "s3cret-sha";
    // The nonce secret is the test's, so that it can compute every nonce the server may issue.
    let secret = [0x5a; 32];
    let Some(mut t) = start("algorithms = [\"SHA-256\"]", |store| {
        registrar::users::add(store, REALM, "1001", PASSWORD).unwrap();
        store
            .namespace(registrar::users::NAMESPACE)
            .unwrap()
            .put("secret", "nonce", secret.to_vec())
            .unwrap();
    }) else {
        return;
    };
    // The Request-URI the scenario sends: sip:[remote_ip]:[remote_port].
    let uri = format!("sip:{}", t.sip);
    let key = NonceKey::new(secret);
    let ha1 = Algorithm::Sha256.ha1("1001", REALM, PASSWORD);
    let now_s = registrar::now_ms() / 1000;
    // Every second the challenge may be issued in, with room for a slow start of SIPp.
    let mut csv = String::from("SEQUENTIAL\n");
    for issued_s in now_s - 5..=now_s + 120 {
        let nonce = key.nonce(REALM, issued_s);
        let cnonce = format!("c{issued_s:x}");
        let response = digest::client_response(
            Algorithm::Sha256,
            &ha1,
            &nonce,
            "00000001",
            &cnonce,
            "REGISTER",
            &uri,
        );
        csv.push_str(&format!(
            "{nonce};Authorization: Digest username=\"1001\", realm=\"{REALM}\", \
             nonce=\"{nonce}\", uri=\"{uri}\", response=\"{response}\", algorithm=SHA-256, \
             cnonce=\"{cnonce}\", nc=00000001, qop=auth\n"
        ));
    }
    t.play_with(
        "auth_sha256",
        &[("sha.csv", &csv)],
        &["-s", "1001", "-inf", "sha.csv", "-infindex", "sha.csv", "0"],
    );
    assert_requests(&t, &[("REGISTER", 401), ("REGISTER", 200)]);
}

#[test]
fn a_stale_nonce_is_challenged_again_with_stale_true() {
    let config = "algorithms = [\"MD5\"]\nnonce_ttl_s = 3";
    let args = ["-s", "1001", "-au", "1001", "-ap", "s3cret"];
    let Some((t, _)) = played(config, with_user("1001", "s3cret"), "stale_nonce", &args) else {
        return;
    };
    // A stale nonce is no failed attempt.
    assert_eq!(t.metric(&failures("wrong_response")), 0.0);
}

#[test]
fn wrong_passwords_are_challenged_again_until_the_source_is_dropped() {
    let config = "algorithms = [\"MD5\"]\nauth_failures_max = 3";
    let args = ["-s", "1001", "-au", "1001", "-ap", "not-the-password"];
    let Some((t, _)) = played(config, with_user("1001", "s3cret"), "wrong_password", &args) else {
        return;
    };
    assert_eq!(t.metric(&failures("wrong_response")), 3.0);
    assert!(t.metric("tandem_registrar_dropped_total{reason=\"source_throttled\"}") >= 1.0);
}

#[test]
fn path_is_echoed_and_kept_with_the_binding() {
    let Some((t, _)) = played(&no_auth(""), |_| {}, "path", &["-s", "1001"]) else {
        return;
    };
    let stored = t.stored_bindings();
    let list = &stored["sip:1001@example.com"];
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].uri, "sip:1001@192.0.2.7:5060");
    assert_eq!(list[0].path, ["<sip:edge.example.com;lr>"]);
    let shown = t.bindings_cli(Some("1001@example.com"));
    assert!(
        shown.contains("sip:1001@example.com\tsip:1001@192.0.2.7:5060\t")
            && shown.contains("ua=SIPp path")
            && shown.ends_with("1 bindings.\n"),
        "{shown}"
    );
}

#[test]
fn outbound_flows_are_replaced_by_instance_and_reg_id() {
    let Some((t, _)) = played(&no_auth(""), |_| {}, "outbound", &["-s", "1001"]) else {
        return;
    };
    let mut flows: Vec<(u32, String)> = t.stored_bindings()["sip:1001@example.com"]
        .iter()
        .map(|b| (b.reg_id.unwrap(), b.uri.clone()))
        .collect();
    flows.sort();
    assert_eq!(
        flows,
        [
            (1, "sip:1001@192.0.2.2:5060;ob".to_string()),
            (2, "sip:1001@192.0.2.3:5060;ob".to_string())
        ]
    );
}

#[test]
fn options_unknown_methods_and_invite_without_redirect() {
    if let Some((t, _)) = played(&no_auth(""), |_| {}, "methods", &["-s", "1001"]) {
        assert_requests(&t, &[("OPTIONS", 200), ("other", 501), ("INVITE", 405)]);
    }
}

#[test]
fn redirect_mode_answers_invite_with_302_or_480() {
    let config = no_auth("redirect = true");
    if let Some((t, _)) = played(&config, |_| {}, "redirect", &["-s", "1001"]) {
        // 302 twice: for the AOR, and for the user at the registrar's address.
        assert_eq!(
            t.metric("tandem_registrar_requests_total{method=\"INVITE\",code=\"302\"}"),
            2.0
        );
        assert_requests(&t, &[("INVITE", 480)]);
    }
}

#[test]
fn a_retransmitted_register_gets_the_same_200_again() {
    let Some((t, run)) = played(&no_auth(""), |_| {}, "retransmission", &["-s", "1001"]) else {
        return;
    };
    let responses = run.responses();
    assert_eq!(responses.len(), 3, "{responses:#?}");
    assert!(
        responses[0].contains("CSeq: 1 REGISTER"),
        "{}",
        responses[0]
    );
    assert_eq!(responses[0], responses[2]);
    assert!(t.metric("tandem_registrar_retransmissions_total") >= 1.0);
    // Processed once: one commit.
    assert_eq!(t.metric("tandem_registrar_commit_seconds_count"), 1.0);
}

/// A child process killed and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The users whose 200 SIPp logged in a run of `durable.xml`.
fn acknowledged(run: &SippRun) -> HashSet<String> {
    run.log("_logs.log")
        .lines()
        .filter_map(|l| l.strip_prefix("OK "))
        .map(|u| u.trim().to_string())
        .collect()
}

#[test]
fn every_acknowledged_registration_survives_a_sigkill_in_a_refresh_storm() {
    const AORS: u32 = 10_000;
    let Some(mut t) = start(&no_auth(""), |_| {}) else {
        return;
    };
    let mut users = String::from("SEQUENTIAL\n");
    for i in 0..AORS {
        users.push_str(&format!("u{i:05};\n"));
    }
    let files = [("users.csv", users.as_str())];
    // Both runs: one REGISTER per AOR at 2,000 a second, the same Call-IDs (no process id in
    // them), the CSeq, the expires and how long a call waits for its 200 given here.
    let storm = |t: &mut Tandem, cseq: &str, expires: &str, wait_ms: &str| {
        let args = [
            "-inf",
            "users.csv",
            "-key",
            "expires",
            expires,
            "-base_cseq",
            cseq,
            "-cid_str",
            "durable-%u@%s",
            "-r",
            "2000",
            "-recv_timeout",
            wait_ms,
            "-trace_logs",
        ];
        t.sipp_command("durable", &files, AORS, 60, &args)
    };
    let registered_200 = "tandem_registrar_requests_total{method=\"REGISTER\",code=\"200\"}";

    // Every AOR registered, for 600 s.
    let (mut cmd, dir) = storm(&mut t, "1", "600", "15000");
    let first = SippRun {
        status: cmd.status().unwrap(),
        dir,
    };
    first.assert_passed(&t);
    let registered = acknowledged(&first);
    assert_eq!(registered.len(), AORS as usize);

    // Every AOR refreshed for 3,600 s; SIGKILL once a quarter of them are answered (SIPp sends
    // at a fixed rate, so the rest are still to come). A call then waits 4 s for its 200: the
    // calls to the killed server fail soon, and one that timed out before is just not counted.
    let (mut cmd, dir) = storm(&mut t, "2", "3600", "4000");
    let mut sipp = Running(cmd.spawn().unwrap());
    while t.metric(registered_200) < (AORS + AORS / 4) as f64 {
        assert!(
            sipp.0.try_wait().unwrap().is_none(),
            "SIPp ended before the registrar was killed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    t.kill();
    // The calls left unanswered time out (-recv_timeout); SIPp then exits non-zero.
    let second = SippRun {
        status: sipp.0.wait().unwrap(),
        dir,
    };
    let refreshed = acknowledged(&second);
    assert!(
        !refreshed.is_empty() && refreshed.len() < AORS as usize,
        "{} refreshes acknowledged: the kill was not in the middle of the storm",
        refreshed.len()
    );

    // The same store, after the crash.
    t.spawn();
    assert_eq!(t.metric("tandem_registrar_bindings"), AORS as f64);
    let shown = t.bindings_cli(None);
    // AOR -> (contact, seconds left), from lines `AOR \t URI \t expires=Ns \t ...`.
    let mut bound: HashMap<&str, Vec<(&str, u64)>> = HashMap::new();
    for line in shown.lines().filter(|l| l.contains('\t')) {
        let mut f = line.split('\t');
        let (aor, uri, expires) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        let left_s = expires
            .strip_prefix("expires=")
            .and_then(|e| e.strip_suffix('s'))
            .and_then(|e| e.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        bound.entry(aor).or_default().push((uri, left_s));
    }
    let mut refreshed_found = 0;
    for user in &registered {
        let aor = format!("sip:{user}@example.com");
        let list = bound
            .get(aor.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        // One binding, the same contact whichever REGISTER was last.
        assert_eq!(list.len(), 1, "{aor}: {list:?}");
        let (uri, left_s) = list[0];
        assert_eq!(uri, format!("sip:{user}@192.0.2.1:5060"));
        // A binding of the first run has at most 600 s left; of the second, far more.
        let is_refreshed = left_s > 600;
        assert!(
            is_refreshed || !refreshed.contains(user),
            "{aor}: the refresh was answered 200 but the binding has {left_s} s left"
        );
        refreshed_found += is_refreshed as usize;
    }
    // Refreshes committed but not answered before the kill may be there too.
    assert!(refreshed_found >= refreshed.len());
    eprintln!(
        "{} refreshes answered before the kill, {refreshed_found} found after the restart",
        refreshed.len()
    );
}

#[test]
fn the_readme_dialplan_dials_a_phone_registered_by_sipp_on_default_settings() {
    // As the README sets it up: every domain (`domains = []`), a user with a password, the
    // default algorithms; SIPp registers 1001 in the domain it was given, example.com.
    let args = ["-s", "1001", "-au", "1001", "-ap", "s3cret"];
    let Some((mut t, _)) = played("", with_user("1001", "s3cret"), "auth_md5", &args) else {
        return;
    };
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let block = asterisk_emu::markdown_block(&readme, "AGI(agi://127.0.0.1/registrar/${EXTEN})")
        .expect("the README's registrar dialplan");
    let dialplan = asterisk_emu::Dialplan::load(&[("extensions.conf", block)]);
    assert!(dialplan.warnings.is_empty(), "{:?}", dialplan.warnings);

    // The registered phone is dialled at the contact SIPp registered.
    let (call, end) = agi_call(&t, &dialplan, "1001");
    let asterisk_emu::CallEnd::Answered { dial } = &end else {
        panic!(
            "1001 was not dialled: {end:?}\n{:#?}\n{}",
            call.log(),
            t.log()
        );
    };
    assert!(
        dial.starts_with("PJSIP/1001/sip:1001@127.0.0.1:") && dial.ends_with(",30"),
        "{dial}"
    );
    assert!(
        call.playbacks.is_empty() && call.warnings.is_empty(),
        "{:?} {:?}",
        call.playbacks,
        call.warnings
    );

    // A user with no phone registered goes to the unavailable message.
    let (call, end) = agi_call(&t, &dialplan, "1002");
    assert_eq!(end, asterisk_emu::CallEnd::FellThrough, "{:#?}", call.log());
    assert_eq!(call.playbacks, ["vm-nobodyavail"]);
    assert!(
        call.dials.is_empty() && call.warnings.is_empty(),
        "{:?}",
        call.warnings
    );

    // Tandem stopped: AGISTATUS says so, and the call goes to the message rather than to a
    // Dial with nothing to dial.
    t.kill();
    let (call, _) = agi_call(&t, &dialplan, "1001");
    assert_eq!(call.playbacks, ["vm-nobodyavail"], "{:#?}", call.log());
    assert!(call.dials.is_empty());
    assert_eq!(call.channel.variables["AGISTATUS"], "FAILURE");
}
