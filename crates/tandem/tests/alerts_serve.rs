//! `tandem serve` with `[alerts]`: a call arriving as HEP fires a rule at its INVITE, the
//! webhook named by the rule receives it signed, and the alert is kept in the CDR database.

mod common;
use common::{free_port, free_udp_port, one_call_as_hep, send_udp};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let _serve = Killed(
        Command::new(EXE)
            .args(["serve", "--config"])
            .arg(&config)
            .env_remove("TANDEM_DATA_DIR")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", http)).is_err() {
        assert!(
            Instant::now() < deadline,
            "serve did not start:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
