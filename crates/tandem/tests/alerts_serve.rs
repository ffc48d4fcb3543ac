//! `tandem serve` with `[alerts]`: a call arriving as HEP fires a rule at its INVITE, the
//! webhook named by the rule receives it signed, and the alert is kept in the CDR database.

mod common;
use common::{ServeChild, free_port, free_udp_port, one_call_as_hep, send_udp};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");

/// A webhook receiver: each POST's signature header and body, answered 200.
fn webhook() -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let (mut length, mut signature) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("x-tandem-signature:") {
                    signature = line["x-tandem-signature:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = tx.send((signature, body));
        }
    });
    (port, rx)
}

#[test]
fn a_call_fires_a_rule_at_its_invite_and_the_webhook_gets_it_signed() {
    let dir = tempfile::tempdir().unwrap();
    let (hook, received) = webhook();
    let (agi, http, hep) = (free_port(), free_port(), free_udp_port());
    let key = dir.path().join("webhook.key");
    std::fs::write(&key, "s3cret\n").unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"127.0.0.1:{agi}\"\n[metrics]\nlisten = \"127.0.0.1:{http}\"\n\
             [web]\nenabled = false\n[history]\nenabled = false\n[kv]\ndata_dir = {:?}\n\
             [capture]\nhep_listen = \"127.0.0.1:{hep}\"\ncdr_db = {db:?}\n\n\
             [alerts.action.hook]\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{hook}/tandem\"\nsecret_file = {key:?}\n\n\
             [[alerts.rule]]\nname = \"any-call\"\nkind = \"fraud.calls\"\ngroup_by = \"caller\"\nactions = [\"hook\"]\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let _serve = ServeChild::start(&config, &log, http);
    send_udp(hep, &one_call_as_hep("alert-1@test"));
    let (signature, body) = received
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| {
            panic!(
                "no webhook:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    assert_eq!(
        signature,
        format!("sha256={}", alert_actions::sign(b"s3cret", &body))
    );
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["kind"], "alert");
    assert_eq!(v["version"], 1);
    assert_eq!(v["rule"], "any-call");
    assert_eq!(v["key"], "1001");
    assert_eq!(v["state"], "firing");
    assert!(
        v["calls"][0].as_str().unwrap().contains("alert-1@test"),
        "{v}"
    );

    // Kept in the CDR database the console reads.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new(EXE)
            .args(["alerts", "--cdr-db"])
            .arg(&db)
            .args(["list", "--json"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.contains("\"any-call\"") {
            let row: serde_json::Value =
                serde_json::from_str(text.lines().next().unwrap()).unwrap();
            assert_eq!(row["key"], "1001");
            assert_eq!(row["state"], "firing");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not stored: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP request on a fresh connection; (status, body).
fn http(port: u16, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn a_rule_an_admin_saves_in_the_console_takes_effect_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str], stdin: &str| {
        let mut c = Command::new(EXE)
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .env_remove("TANDEM_DATA_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(
        &["user", "add", "ops", "--role", "admin", "--password-stdin"],
        "a long enough password\n",
    );
    let token = run(&["user", "token", "ops"], "").trim().to_string();
    let (hook, received) = webhook();
    let (agi, http_port, web, hep) = (free_port(), free_port(), free_port(), free_udp_port());
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"127.0.0.1:{agi}\"\n[metrics]\nlisten = \"127.0.0.1:{http_port}\"\n\
             [web]\nlisten = \"127.0.0.1:{web}\"\n[history]\nenabled = false\n[kv]\ndata_dir = {data:?}\n\
             [capture]\nhep_listen = \"127.0.0.1:{hep}\"\ncdr_db = {:?}\n\n\
             [alerts.action.hook]\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{hook}/tandem\"\n",
            dir.path().join("cdr.sqlite3")
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let _serve = ServeChild::start(&config, &log, web);
    // A rule naming an action tandem.toml does not have is refused, and changes nothing.
    let bad =
        "[[alerts.rule]]\nname = \"any-call\"\nkind = \"fraud.calls\"\nactions = [\"nowhere\"]\n";
    let (status, body) = http(web, "PUT", "/api/alerts/rules", &token, bad);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("nowhere"), "{body}");
    assert!(!data.join("alert-rules.toml").exists());

    let good = "[[alerts.rule]]\nname = \"any-call\"\nkind = \"fraud.calls\"\ngroup_by = \"caller\"\nactions = [\"hook\"]\n";
    let (status, body) = http(web, "PUT", "/api/alerts/rules", &token, good);
    assert!(status == 200 || status == 204, "{status} {body}");
    let kept = data.join("alert-rules.toml");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), good);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );

    send_udp(hep, &one_call_as_hep("console-rule@test"));
    let (_, body) = received
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| {
            panic!(
                "no webhook:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["rule"], "any-call");
    let (status, rules) = http(web, "GET", "/api/alerts/rules", &token, "");
    assert_eq!(status, 200);
    assert!(rules.contains("any-call"), "{rules}");

    // A silence made in the console: its rule's alert is kept but not sent; another rule's,
    // fired by the same call after it, is.
    let more = format!(
        "{good}\n[[alerts.rule]]\nname = \"muted\"\nkind = \"fraud.calls\"\ngroup_by = \"caller\"\nactions = [\"hook\"]\n\n\
         [[alerts.rule]]\nname = \"heard\"\nkind = \"fraud.calls\"\ngroup_by = \"caller\"\nactions = [\"hook\"]\n"
    );
    let (status, body) = http(web, "PUT", "/api/alerts/rules", &token, &more);
    assert!(status == 200 || status == 204, "{status} {body}");
    let silence = r#"{"rule":"muted","key":"*","duration_s":3600,"comment":"test"}"#;
    let (status, body) = http(web, "POST", "/api/silences", &token, silence);
    assert!((200..300).contains(&status), "{status} {body}");
    // The dispatcher reads the silences again at most a second after its last read.
    std::thread::sleep(Duration::from_millis(1500));
    send_udp(hep, &one_call_as_hep("silenced@test"));
    let mut rules_heard = Vec::new();
    while !rules_heard.contains(&"heard".to_string()) {
        let (_, body) = received
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                panic!(
                    "no webhook for heard:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        rules_heard.push(v["rule"].as_str().unwrap().to_string());
    }
    // One action delivers in order: a muted alert sent would have come first.
    assert!(
        !rules_heard.contains(&"muted".to_string()),
        "{rules_heard:?}"
    );
    let (status, listed) = http(web, "GET", "/api/alerts?rule=muted", &token, "");
    assert_eq!(status, 200);
    assert!(listed.contains("\"muted\""), "kept all the same: {listed}");
}
