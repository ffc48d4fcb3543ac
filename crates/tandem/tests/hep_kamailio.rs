//! HEP v3 from a real SIP proxy: Kamailio (Debian's `kamailio` package) relays calls that SIPp
//! (Debian's `sip-tester` package) places and answers, and mirrors every SIP message it receives or
//! sends to `tandem capture --hep-listen` with its `siptrace` module: over UDP, and over TCP
//! with an authentication key (`duplicate_uri` with `;transport=tcp` and `auth_key`, which
//! Kamailio 5.6's siptrace supports, checked by Tandem). Tandem must see every call, answered
//! and hung up by the caller. Skips with a message when either program is missing.

mod common;

use common::free_udp_port;
use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Calls SIPp places, and their rate (calls per second): enough to interleave dialogs.
const CALLS: u32 = 20;
const CALLS_PER_SEC: u32 = 20;

/// A child process stopped with SIGTERM (then SIGKILL) and reaped when dropped, so a failing
/// assertion leaves no Kamailio or SIPp behind.
struct Running(Child, &'static str);

impl Running {
    fn terminate(&mut self) {
        // SAFETY: kill(2) on a pid we spawned and have not reaped yet.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
    }

    /// Waits up to `timeout` for the process to exit by itself.
    fn wait_for(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        self.terminate();
        if self.wait_for(Duration::from_secs(5)).is_none() {
            eprintln!("{} ignored SIGTERM; killing it", self.1);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// True once some process has bound `port` on loopback: binding it ourselves then fails.
fn udp_port_taken(port: u16) -> bool {
    UdpSocket::bind(("127.0.0.1", port)).is_err()
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// How Kamailio sends HEP: over UDP without a key, or over TCP with one.
#[derive(Clone, Copy)]
enum Hep {
    Udp,
    TcpWithKey(&'static str),
}

/// Kamailio as a stateful proxy that relays every request to SIPp's answering side and mirrors
/// all SIP traffic, both legs, as HEP v3 (`trace_mode` 1: no `sip_trace()` call needed). Over
/// TCP Kamailio needs a TCP socket of its own to send from.
fn kamailio_config(modules: &str, sip_port: u16, uas_port: u16, hep_port: u16, hep: Hep) -> String {
    let (tcp_listen, transport, key) = match hep {
        Hep::Udp => (String::new(), "", String::new()),
        Hep::TcpWithKey(k) => (
            format!("listen=tcp:127.0.0.1:{sip_port}\n"),
            ";transport=tcp",
            format!("modparam(\"siptrace\", \"auth_key\", \"{k}\")\n"),
        ),
    };
    format!(
        "#!KAMAILIO\n\
         debug=2\nlog_stderror=yes\nchildren=2\nauto_aliases=no\n\
         listen=udp:127.0.0.1:{sip_port}\n{tcp_listen}\
         mpath=\"{modules}/\"\n\
         loadmodule \"tm.so\"\nloadmodule \"sl.so\"\nloadmodule \"siptrace.so\"\n\
         modparam(\"siptrace\", \"duplicate_uri\", \"sip:127.0.0.1:{hep_port}{transport}\")\n{key}\
         modparam(\"siptrace\", \"hep_mode_on\", 1)\n\
         modparam(\"siptrace\", \"hep_version\", 3)\n\
         modparam(\"siptrace\", \"hep_capture_id\", 4242)\n\
         modparam(\"siptrace\", \"trace_to_database\", 0)\n\
         modparam(\"siptrace\", \"trace_on\", 1)\n\
         modparam(\"siptrace\", \"trace_mode\", 1)\n\
         request_route {{\n    t_relay_to_udp(\"127.0.0.1\", \"{uas_port}\");\n    exit;\n}}\n"
    )
}

#[test]
fn calls_through_kamailio_arrive_as_hep_and_become_calls() {
    calls_through_kamailio(Hep::Udp);
}

#[test]
fn calls_through_kamailio_arrive_as_hep_over_tcp_with_its_key() {
    calls_through_kamailio(Hep::TcpWithKey("kamailio-hep-key"));
}

fn calls_through_kamailio(hep: Hep) {
    let Some(modules) = [
        "/usr/lib/x86_64-linux-gnu/kamailio/modules",
        "/usr/lib/kamailio/modules",
    ]
    .into_iter()
    .find(|d| Path::new(d).join("siptrace.so").exists()) else {
        test_env::skip("Kamailio's siptrace module is not installed (Debian package `kamailio`)");
        return;
    };
    if !on_path("sipp") {
        test_env::skip("`sipp` is not installed (Debian package `sip-tester`)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (sip_port, uas_port, uac_port, hep_port) = (
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
    );

    // Tandem first, so no HEP packet is sent before it listens.
    let key_args = match hep {
        Hep::Udp => vec![],
        Hep::TcpWithKey(k) => vec!["--hep-auth-key", k],
    };
    let mut tandem = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "capture",
            "--json",
            "--no-store",
            "--status-interval-s",
            "1",
        ])
        .arg("--hep-listen")
        .arg(format!("127.0.0.1:{hep_port}"))
        .args(&key_args)
        .env("TANDEM_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tandem_err = BufReader::new(tandem.stderr.take().unwrap());
    let tandem_out = common::Lines::read(tandem.stdout.take().unwrap());
    let mut tandem = Running(tandem, "tandem");
    let mut line = String::new();
    tandem_err.read_line(&mut line).unwrap();
    assert!(line.contains("listening for HEP v3"), "{line}");
    let tandem_err = common::Lines::read(tandem_err);

    let cfg_path = tmp.path().join("kamailio.cfg");
    std::fs::write(
        &cfg_path,
        kamailio_config(modules, sip_port, uas_port, hep_port, hep),
    )
    .unwrap();
    let Ok(kamailio) = Command::new("kamailio")
        .arg("-f")
        .arg(&cfg_path)
        .args(["-DD", "-E", "-Y"])
        .arg(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        test_env::skip("`kamailio` could not be started");
        return;
    };
    let _kamailio = Running(kamailio, "kamailio");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !udp_port_taken(sip_port) {
        assert!(
            Instant::now() < deadline,
            "Kamailio did not listen on {sip_port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let sipp = |args: &[String]| {
        Command::new("sipp")
            .args(["-i", "127.0.0.1", "-nostdin", "-m"])
            .arg(CALLS.to_string())
            .args(args)
            .current_dir(tmp.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut uas = Running(
        sipp(&[
            "-sn".into(),
            "uas".into(),
            "-p".into(),
            uas_port.to_string(),
        ]),
        "sipp (uas)",
    );
    while !udp_port_taken(uas_port) {
        assert!(
            Instant::now() < deadline,
            "SIPp did not listen on {uas_port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Each call: INVITE, 100, 180, 200, ACK, a 200 ms pause, BYE, 200.
    let mut uac = Running(
        sipp(&[
            "-sn".into(),
            "uac".into(),
            format!("127.0.0.1:{sip_port}"),
            "-p".into(),
            uac_port.to_string(),
            "-r".into(),
            CALLS_PER_SEC.to_string(),
            "-d".into(),
            "200".into(),
        ]),
        "sipp (uac)",
    );
    let uac_status = uac.wait_for(Duration::from_secs(60));
    let mut uac_err = String::new();
    uac.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut uac_err)
        .ok();
    assert_eq!(
        uac_status.map(|s| s.code()),
        Some(Some(0)),
        "SIPp did not complete its {CALLS} calls: {uac_err}"
    );
    assert!(
        uas.wait_for(Duration::from_secs(10)).is_some(),
        "SIPp's answering side did not see {CALLS} calls"
    );

    // The last BYE's 200 was mirrored before SIPp exited, and nothing comes after it: every
    // call is reported once its linger has passed, and the status line counts none, while
    // Tandem runs on (a generous bound on "it happens at all"; the time is printed).
    let ended = Instant::now();
    let is_call = |l: &str| l.contains("\"kind\":\"call\"");
    let reported = |out: &common::Lines| out.text().lines().filter(|l| is_call(l)).count();
    while reported(&tandem_out) < CALLS as usize && ended.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "{} of {CALLS} calls reported {:.1} s after SIPp's last call (call linger 5 s)",
        reported(&tandem_out),
        ended.elapsed().as_secs_f64()
    );
    assert_eq!(
        reported(&tandem_out),
        CALLS as usize,
        "calls that ended were not reported while Tandem ran: {}",
        tandem_err.text()
    );
    let from = tandem_err.len();
    assert!(
        tandem_err
            .wait_for(from, Duration::from_secs(60), |l| {
                common::calls_active(l) == Some(0)
            })
            .is_some(),
        "the status line still counts calls: {}",
        tandem_err.text()
    );
    tandem.terminate();
    let status = tandem.wait_for(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "tandem: {status:?}");
    // The pipes are closed once Tandem has exited; their readers have read everything.
    std::thread::sleep(Duration::from_millis(200));
    let stdout = tandem_out.text();

    let calls: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "call")
        .collect();
    assert_eq!(calls.len(), CALLS as usize, "{stdout}");
    let mut call_ids: Vec<&str> = calls
        .iter()
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    call_ids.sort_unstable();
    call_ids.dedup();
    assert_eq!(call_ids.len(), CALLS as usize, "{call_ids:?}");
    for call in &calls {
        assert_eq!(call["state"], "ended", "{call}");
        assert_eq!(call["last_response"], 200, "{call}");
        assert_eq!(call["hangup_by"], "caller", "{call}");
        assert_eq!(call["caller"], "sipp", "{call}");
        assert_eq!(call["called"], "service", "{call}");
        assert_eq!(
            call["caller_addr"],
            format!("127.0.0.1:{uac_port}"),
            "{call}"
        );
        assert!(!call["answer"].is_null(), "{call}");
        // Both legs are mirrored, so each message of the seven SIPp exchanges appears at
        // least once.
        assert!(call["sip_messages"].as_u64().unwrap() >= 7, "{call}");
    }
    let rest = tandem_err.text();
    assert!(
        !rest.contains("were not HEP v3"),
        "Kamailio sent datagrams Tandem could not read: {rest}"
    );
    // Every packet came the way it was sent, and none was refused.
    let summary = rest
        .lines()
        .find(|l| l.starts_with("HEP: "))
        .unwrap_or_else(|| panic!("no HEP summary: {rest}"));
    let (udp, tcp) = summary
        .split_once(" packets analysed (")
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(r, _)| {
            let n: Vec<u64> = r
                .split(", ")
                .map(|p| p.split(' ').next().unwrap().parse().unwrap())
                .collect();
            (n[0], n[1])
        })
        .unwrap();
    match hep {
        Hep::Udp => assert!(udp >= 7 * u64::from(CALLS) && tcp == 0, "{summary}"),
        Hep::TcpWithKey(_) => assert!(tcp >= 7 * u64::from(CALLS) && udp == 0, "{summary}"),
    }
    assert!(
        summary.contains("refused: 0 for their authentication key, 0 not HEP v3"),
        "{summary}"
    );
}
