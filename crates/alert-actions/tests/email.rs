//! Email to a real SMTP server (aiosmtpd, Debian's `python3-aiosmtpd`): in clear to a
//! loopback server, then with STARTTLS (a throwaway self-signed certificate Tandem is told
//! to trust through `SSL_CERT_FILE`) and a login.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use alert_actions::{Actions, Notifier, NotifierOptions};
use alerts::ActionConfig;
use common::{TempDir, alert, free_port, wait_listening, wait_stats};

/// Debian's interpreter, where `python3-aiosmtpd` installs (a `python3` earlier on PATH may
/// be another one).
const PYTHON: &str = "/usr/bin/python3";

/// An SMTP server that writes each message it accepts, with its envelope, the login used and
/// whether the session was encrypted, as one JSON file in its directory.
const SERVER: &str = r#"
import json, os, ssl, sys, threading
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

out, port = sys.argv[1], int(sys.argv[2])
tls = None
if len(sys.argv) > 4:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(sys.argv[3], sys.argv[4])

class Handler:
    async def handle_DATA(self, server, session, envelope):
        n = len(os.listdir(out))
        with open(os.path.join(out, "%d.json" % n), "w") as f:
            json.dump({
                "from": envelope.mail_from,
                "to": envelope.rcpt_tos,
                "login": session.auth_data,
                "tls": session.ssl is not None,
                "data": envelope.content.decode("utf-8", "replace"),
            }, f)
        return "250 OK"

def authenticate(server, session, envelope, mechanism, data):
    if isinstance(data, LoginPassword) and data.login == b"tandem" and data.password == b"mail-pw":
        return AuthResult(success=True, auth_data="tandem")
    return AuthResult(success=False, handled=False)

c = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=authenticate,
               auth_require_tls=tls is not None, tls_context=tls, require_starttls=tls is not None)
c.start()
print("ready", flush=True)
threading.Event().wait()
"#;

struct Smtp {
    child: Child,
    port: u16,
    out: std::path::PathBuf,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn smtp(dir: &TempDir, name: &str, tls: Option<(&std::path::Path, &std::path::Path)>) -> Smtp {
    let script = dir.0.join("smtp.py");
    std::fs::write(&script, SERVER).unwrap();
    let out = dir.0.join(name);
    std::fs::create_dir_all(&out).unwrap();
    let port = free_port();
    let mut cmd = Command::new(PYTHON);
    cmd.arg(&script).arg(&out).arg(port.to_string());
    if let Some((cert, key)) = tls {
        cmd.arg(cert).arg(key);
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let s = Smtp { child, port, out };
    assert!(
        wait_listening(s.port, Duration::from_secs(10)),
        "aiosmtpd did not listen"
    );
    s
}

fn messages(s: &Smtp, n: usize) -> Vec<serde_json::Value> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let found: Vec<serde_json::Value> = (0..n)
            .map_while(|i| std::fs::read_to_string(s.out.join(format!("{i}.json"))).ok())
            .filter_map(|t| serde_json::from_str(&t).ok())
            .collect();
        if found.len() >= n || Instant::now() > end {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn email(port: u16, security: &str) -> ActionConfig {
    ActionConfig {
        kind: "email".into(),
        server: Some(format!("localhost:{port}")),
        security: Some(security.into()),
        from: Some("Tandem <tandem@pbx.example.com>".into()),
        to: vec![
            "ops@example.com".into(),
            "Night Desk <night@example.com>".into(),
        ],
        retries: Some(1),
        backoff_ms: Some(50),
        timeout_ms: Some(5000),
        ..Default::default()
    }
}

#[test]
fn email_reaches_a_real_smtp_server_in_clear_on_loopback_and_with_starttls() {
    let have = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        test_env::skip("aiosmtpd is not installed (apt-get install python3-aiosmtpd)");
        return;
    }
    let dir = TempDir::new("smtp");
    // A throwaway certificate for localhost, trusted through SSL_CERT_FILE; set before any
    // thread of this test binary starts a TLS client.
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.0.join("cert.pem");
    let key = dir.0.join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    // SAFETY: this binary's only test, before it starts any thread that reads the environment.
    unsafe { std::env::set_var("SSL_CERT_FILE", &cert) };
    let password = dir.0.join("password");
    std::fs::write(&password, "mail-pw\n").unwrap();

    let plain = smtp(&dir, "plain", None);
    let secure = smtp(&dir, "secure", Some((&cert, &key)));
    let config = BTreeMap::from([
        ("plain".to_string(), email(plain.port, "none")),
        (
            "secure".to_string(),
            ActionConfig {
                username: Some("tandem".into()),
                password_file: Some(password.clone()),
                ..email(secure.port, "starttls")
            },
        ),
    ]);
    let notifier = Notifier::start(
        Actions::from_config(&config).unwrap(),
        NotifierOptions::default(),
    )
    .unwrap();
    let sent = alert("premium", "2001", &["plain", "secure"]);
    assert!(notifier.submit(sent.clone()));
    let stats = wait_stats(&notifier, Duration::from_secs(10), |s| {
        s.actions.values().all(|a| a.sent == 1)
    });
    assert!(stats.actions.values().all(|a| a.sent == 1), "{stats:?}");

    for (server, tls, login) in [(&plain, false, None), (&secure, true, Some("tandem"))] {
        let got = messages(server, 1);
        let m = &got[0];
        assert_eq!(m["tls"], tls);
        assert_eq!(m["login"].as_str(), login);
        assert_eq!(m["from"], "tandem@pbx.example.com");
        assert_eq!(
            m["to"],
            serde_json::json!(["ops@example.com", "night@example.com"])
        );
        let data = m["data"].as_str().unwrap();
        assert!(
            data.contains("Subject: [Tandem] FIRING critical: premium 2001\r\n"),
            "{data}"
        );
        assert!(data.contains("Content-Type: text/plain"), "{data}");
        assert!(data.contains("\r\nDate: "), "{data}");
        for want in [
            sent.summary.as_str(),
            "Rule:      premium (fraud.destination)",
            "Key:       caller = 2001",
            "Value:     3 calls (threshold 1)",
            "Matched:   3 of 12 in the last 300 s",
            "  edge1|a84c@192.0.2.10|1",
            "  edge1|c02e@192.0.2.10|1",
        ] {
            assert!(data.contains(want), "{want:?} not in {data}");
        }
    }
    notifier.close(Instant::now() + Duration::from_secs(2));
}
