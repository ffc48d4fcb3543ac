//! The daily report by email, as an operator sets it up: `tandem.toml` with `[[groups]]` and
//! `[reports]`, a CDR database whose calls were stored with those groups (so the rollups were
//! kept as in production), `tandem report --send-now` to a real SMTP server (aiosmtpd, Debian's
//! `python3-aiosmtpd`, which parses each message with Python's `email` package), and `tandem
//! serve`'s `/api/reports` over HTTP for the same days: the attached CSV's rows are the API's.
//!
//! With `TANDEM_SCREENSHOT_DIR` set, the email's HTML is saved there, to be looked at.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::browser::{ConsoleServer, add_user, http, login_cookie};
use cdr::SqliteStore;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PYTHON: &str = "/usr/bin/python3";
const PASSWORD: &str = "a long enough secret";
const DAY_S: i64 = 86_400;

/// An SMTP server that writes each message it accepts as JSON: the envelope, the subject, and
/// each MIME part's type, file name and decoded text.
const SERVER: &str = r#"
import email, email.policy, json, os, sys, threading
from aiosmtpd.controller import Controller

out, port = sys.argv[1], int(sys.argv[2])

class Handler:
    async def handle_DATA(self, server, session, envelope):
        m = email.message_from_bytes(envelope.content, policy=email.policy.default)
        parts = []
        for p in m.walk():
            if p.is_multipart():
                parts.append({"type": p.get_content_type()})
                continue
            parts.append({
                "type": p.get_content_type(),
                "filename": p.get_filename(),
                "disposition": p.get_content_disposition(),
                "text": p.get_content() if p.get_content_maintype() == "text" else None,
            })
        n = len(os.listdir(out))
        with open(os.path.join(out, "%d.json" % n), "w") as f:
            json.dump({"from": envelope.mail_from, "to": envelope.rcpt_tos,
                       "subject": str(m["subject"]), "type": m.get_content_type(),
                       "parts": parts}, f)
        return "250 OK"

c = Controller(Handler(), hostname="127.0.0.1", port=port)
c.start()
print("ready", flush=True)
threading.Event().wait()
"#;

struct Smtp(Child);

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn smtp(dir: &Path, port: u16) -> Smtp {
    let script = dir.join("smtp.py");
    std::fs::write(&script, SERVER).unwrap();
    let out = dir.join("mail");
    std::fs::create_dir_all(&out).unwrap();
    let child = Command::new(PYTHON)
        .arg(&script)
        .arg(&out)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let s = Smtp(child);
    // Python starts slowly on a loaded machine: a poll, not a sleep.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "aiosmtpd did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

const GROUPS: &str = r#"
[[groups]]
name = "carrier-a"
addresses = ["203.0.113.10", "203.0.113.11"]

[[groups]]
name = "berlin"
numbers = ["+4930123456"]
"#;

/// Stores `n` synthetic calls over the last eight days with the configuration's groups.
fn seed(db: &Path, config: &str, n: u64) {
    #[derive(serde::Deserialize)]
    struct G {
        groups: Vec<groups::GroupConfig>,
    }
    let g: G = toml::from_str(config).unwrap();
    let mut s = SqliteStore::open(db).unwrap();
    s.set_groups(Arc::new(groups::Groups::new(&g.groups).unwrap()));
    let to_us = now_s() * 1_000_000;
    let from_us = to_us - 8 * DAY_S * 1_000_000;
    let records: Vec<cdr::CdrRecord> = cdr::seed::synthetic_calls(n, from_us, to_us, 11).collect();
    for chunk in records.chunks(500) {
        cdr::CdrStore::insert_records(&mut s, chunk).unwrap();
    }
}

#[test]
fn send_now_mails_html_and_the_csv_whose_rows_are_the_apis() {
    let have = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        test_env::skip("aiosmtpd is not installed (apt-get install python3-aiosmtpd)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let _smtp = smtp(dir.path(), port);
    let config = format!(
        r#"{GROUPS}
[kv]
data_dir = "{data}"

[reports]
email_to = ["noc@example.com", "Night Desk <night@example.com>"]
email_at = "06:00"
email_days = 3
console_url = "https://pbx.example.com:9574/reports"

[reports.smtp]
server = "127.0.0.1:{port}"
security = "none"
from = "Tandem <tandem@pbx.example.com>"
"#,
        data = data.display()
    );
    let config_path = dir.path().join("tandem.toml");
    std::fs::write(&config_path, &config).unwrap();
    seed(&data.join("cdr.sqlite3"), &config, 2_000);

    let out = Command::new(EXE)
        .args(["report", "--send-now", "--config"])
        .arg(&config_path)
        .env("TANDEM_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yesterday = utc::format_s(now_s() - DAY_S)[..10].to_owned();
    assert!(
        stdout.contains(&format!(
            "sent the daily report of {yesterday} to 2 recipients (3 groups"
        )),
        "{stdout}"
    );

    let path = dir.path().join("mail/0.json");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no message arrived");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(m["from"], "tandem@pbx.example.com");
    assert_eq!(
        m["to"],
        serde_json::json!(["noc@example.com", "night@example.com"])
    );
    assert_eq!(m["subject"], format!("Tandem daily report {yesterday}"));
    assert_eq!(m["type"], "multipart/mixed");
    let parts = m["parts"].as_array().unwrap();
    let part = |t: &str| {
        parts
            .iter()
            .find(|p| p["type"] == t)
            .unwrap_or_else(|| panic!("no {t} part: {parts:?}"))
    };
    part("multipart/alternative");
    let html = part("text/html")["text"].as_str().unwrap();
    assert!(
        html.contains("carrier-a") && html.contains("berlin"),
        "every group"
    );
    assert!(html.contains(&yesterday) && html.contains("https://pbx.example.com:9574/reports"));
    assert!(
        !html.contains("<svg") && !html.contains("<img"),
        "bars as tables"
    );
    if let Some(dir) = std::env::var_os("TANDEM_SCREENSHOT_DIR") {
        std::fs::write(Path::new(&dir).join("reports-email.html"), html).unwrap();
    }
    let text = part("text/plain")["text"].as_str().unwrap();
    assert!(
        text.contains("carrier-a:") && text.contains("ASR"),
        "{text}"
    );
    let csv_part = part("text/csv");
    assert_eq!(csv_part["disposition"], "attachment");
    assert_eq!(
        csv_part["filename"],
        format!("tandem-report-{yesterday}.csv")
    );
    let csv = csv_part["text"].as_str().unwrap().replace("\r\n", "\n");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("group,period,start,calls,answered,"),
        "{}",
        lines[0]
    );
    assert_eq!(lines.len(), 1 + 3 * 3, "three days of three groups");

    // The console of the same data: its CSV of each group's same days is the attachment's.
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let serve = ConsoleServer::start(
        Path::new(EXE),
        &data,
        &["--config", config_path.to_str().unwrap()],
    )
    .unwrap();
    let cookie = login_cookie(serve.web, "ops", PASSWORD).unwrap();
    let today = utc::format_s(now_s())[..10].to_owned();
    let first = utc::format_s(now_s() - 3 * DAY_S)[..10].to_owned();
    let mut from_api = vec![lines[0].to_owned()];
    for group in ["all", "carrier-a", "berlin"] {
        let (status, _, body) = http(
            serve.web,
            "GET",
            &format!("/api/reports?group={group}&period=day&from={first}&to={today}&format=csv"),
            &[("Cookie", &cookie)],
            "",
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
        let body = body.replace("\r\n", "\n");
        let mut rows = body.lines();
        assert_eq!(rows.next(), Some(lines[0]), "the same columns");
        from_api.extend(rows.map(str::to_owned));
    }
    assert_eq!(from_api, lines, "the attachment's figures are the API's");
    let calls: u64 = lines[1..4]
        .iter()
        .map(|l| l.split(',').nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(calls > 300, "the report of all has the calls: {calls}");

    // A configuration that cannot send is refused, naming the key.
    let bad = config.replace("security = \"none\"", "security = \"smoke-signals\"");
    std::fs::write(&config_path, bad).unwrap();
    let out = Command::new(EXE)
        .args(["report", "--send-now", "--config"])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reports") && err.contains("security"), "{err}");
}
