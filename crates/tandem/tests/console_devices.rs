//! The Devices page as an operator meets it: `tandem serve` with its registrar and console,
//! phones played by SIPp from loopback addresses of their own (one registered, one whose
//! binding lapses, one with a wrong password), and REGISTER chains a capture read from a file
//! (answered, refused with 403 after a challenge, challenged again and again, lapsed,
//! rejected, unanswered) in the CDR database serve reads. `/api/devices` over real HTTP says
//! each device's state and failure, pages by keyset and filters; the dashboard's Registrar
//! panel draws the registrar's series from the metrics history; a real headless Chromium shows
//! the page (saved as `devices.png` in `TANDEM_SCREENSHOT_DIR` when set).

mod common;
use common::{free_port, have_sipp};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bench::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use monitor::synth::PcapBuilder;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
const PHONE_SECRET: &str = "phone secret 1";
const REGISTRAR: &str = "10.20.0.1:5060";
const S_NS: i64 = 1_000_000_000;

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A REGISTER of `user` from `phone` (cseq, credentials or not, expires).
fn register(user: &str, phone: &str, cseq: u32, credentials: bool, expires: u32) -> String {
    let auth = if credentials {
        format!(
            "Authorization: Digest username=\"{user}\", realm=\"pbx\", nonce=\"n{cseq}\", \
             uri=\"sip:pbx.example.com\", response=\"0123456789abcdef0123456789abcdef\"\r\n"
        )
    } else {
        String::new()
    };
    format!(
        "REGISTER sip:pbx.example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {phone};branch=z9hG4bK{user}x{cseq}\r\n\
         From: <sip:{user}@pbx.example.com>;tag=f{user}\r\n\
         To: <sip:{user}@pbx.example.com>\r\n\
         Call-ID: reg-{user}@{phone}\r\nCSeq: {cseq} REGISTER\r\n\
         Contact: <sip:{user}@{phone}>;expires={expires}\r\n\
         User-Agent: Yealink SIP-T46U 108.86.0.{user}\r\n{auth}Content-Length: 0\r\n\r\n"
    )
}

fn response(user: &str, phone: &str, cseq: u32, status: &str, extra: &str) -> String {
    format!(
        "SIP/2.0 {status}\r\n\
         Via: SIP/2.0/UDP {phone};branch=z9hG4bK{user}x{cseq}\r\n\
         From: <sip:{user}@pbx.example.com>;tag=f{user}\r\n\
         To: <sip:{user}@pbx.example.com>;tag=r{cseq}\r\n\
         Call-ID: reg-{user}@{phone}\r\nCSeq: {cseq} REGISTER\r\n\
         {extra}Content-Length: 0\r\n\r\n"
    )
}

const CHALLENGE: &str = "401 Unauthorized";
const WWW: &str = "WWW-Authenticate: Digest realm=\"pbx\", nonce=\"n\", algorithm=MD5\r\n";

/// REGISTER chains as a capture of a PBX's LAN would hold them, each its own phone, `ago`
/// seconds before now: (user, seconds ago, [(credentials?, expires, [responses])]).
fn monitor_capture(path: &Path) {
    type Step<'a> = (bool, u32, &'a [&'a str]);
    let chains: [(&str, i64, &[Step<'_>]); 6] = [
        // Challenged, then answered: normal digest, registered for an hour.
        (
            "3001",
            60,
            &[(false, 3600, &[CHALLENGE]), (true, 3600, &["200 OK"])],
        ),
        // chan_sip's way with a wrong password: 403 after the challenge.
        (
            "3002",
            120,
            &[
                (false, 3600, &[CHALLENGE]),
                (true, 3600, &["403 Forbidden"]),
            ],
        ),
        // PJSIP's way: challenged again, twice.
        (
            "3003",
            180,
            &[
                (false, 3600, &[CHALLENGE]),
                (true, 3600, &[CHALLENGE]),
                (true, 3600, &[CHALLENGE]),
            ],
        ),
        // Registered for a minute, two hours ago: lapsed.
        (
            "3004",
            7200,
            &[(false, 60, &[CHALLENGE]), (true, 60, &["200 OK"])],
        ),
        ("3005", 300, &[(false, 3600, &["404 Not Found"])]),
        ("3006", 400, &[(false, 3600, &[]), (false, 3600, &[])]),
    ];
    let mut b = PcapBuilder::create(path).unwrap();
    let registrar: SocketAddr = REGISTRAR.parse().unwrap();
    let now = now_ns();
    let mut all: Vec<(i64, SocketAddr, SocketAddr, String)> = Vec::new();
    for (i, (user, ago, steps)) in chains.iter().enumerate() {
        let phone: SocketAddr = format!("10.20.0.{}:5060", 11 + i).parse().unwrap();
        let mut t = now - ago * S_NS;
        for (n, (credentials, expires, responses)) in steps.iter().enumerate() {
            let cseq = n as u32 + 1;
            let p = phone.to_string();
            all.push((
                t,
                phone,
                registrar,
                register(user, &p, cseq, *credentials, *expires),
            ));
            for status in *responses {
                t += 20_000_000;
                let extra = match *status {
                    CHALLENGE => WWW.to_string(),
                    "200 OK" => format!("Contact: <sip:{user}@{p}>;expires={expires}\r\n"),
                    _ => String::new(),
                };
                all.push((
                    t,
                    registrar,
                    phone,
                    response(user, &p, cseq, status, &extra),
                ));
            }
            t += 500_000_000;
        }
    }
    all.sort_by_key(|m| m.0);
    for (t, src, dst, text) in all {
        b.udp(t, src, dst, text.as_bytes());
    }
    b.finish().unwrap();
}

/// Plays `scenario` once as `user` from `phone_ip` against `sip`, with `args`; SIPp must
/// exit 0 (every step as the scenario expects).
fn sipp(dir: &Path, sip: SocketAddr, scenario: &str, user: &str, phone_ip: &str, args: &[&str]) {
    let run = dir.join(format!("sipp-{user}"));
    std::fs::create_dir_all(&run).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sipp")
        .join(format!("{scenario}.xml"));
    std::fs::copy(&src, run.join(format!("{scenario}.xml"))).unwrap();
    let out = Command::new("sipp")
        .arg(sip.to_string())
        .args(["-sf", &format!("{scenario}.xml")])
        .args(["-i", phone_ip, "-p", &free_port().to_string()])
        .args(["-m", "1", "-s", user, "-au", user])
        .args([
            "-nostdin",
            "-trace_err",
            "-timeout_error",
            "-timeout",
            "20s",
        ])
        .args(args)
        .current_dir(&run)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let errors: String = std::fs::read_dir(&run)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with("_errors.log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(
        out.status.success(),
        "SIPp {scenario} as {user} from {phone_ip}: {}\n{errors}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn get(addr: SocketAddr, cookie: &str, path: &str) -> (u16, String) {
    let (status, _, body) = http(addr, "GET", path, &[("Cookie", cookie)], "").unwrap();
    (status, body)
}

fn devices(addr: SocketAddr, cookie: &str, query: &str) -> Value {
    let (status, body) = get(addr, cookie, &format!("/api/devices?{query}"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// (user, seen_by, state, failure) of each row of an answer.
fn summary(v: &Value) -> Vec<(String, String, String, String)> {
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap().to_string();
            (s("user"), s("seen_by"), s("state"), s("failure"))
        })
        .collect()
}

fn eventually<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn row<'a>(v: &'a Value, user: &str, seen_by: &str) -> &'a Value {
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["user"] == user && d["seen_by"] == seen_by)
        .unwrap_or_else(|| panic!("no row of {user} by the {seen_by}: {v:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_of_the_registrar_and_the_monitor_with_wrong_passwords_told_apart() {
    if !have_sipp() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // The monitor's chains, read from a file into the CDR database serve reads.
    let pcap = dir.path().join("registers.pcap");
    monitor_capture(&pcap);
    let out = Command::new(EXE)
        .args(["capture", "--read"])
        .arg(&pcap)
        .arg("--cdr-db")
        .arg(data.join("cdr.sqlite3"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The registrar's users, in the store before serve opens it.
    {
        let store = kv::Store::open_dir(&data, kv::Options::default()).unwrap();
        for user in ["1001", "1002", "1003"] {
            registrar::users::add(&store, "tandem", user, PHONE_SECRET).unwrap();
        }
    }
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let sip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[registrar]\nlisten = \"{sip}\"\nalgorithms = [\"MD5\"]\nmin_expires = 1\n\
             auth_failures_max = 3\n[history]\ninterval_s = 1\n"
        ),
    )
    .unwrap();
    let server = ConsoleServer::start(
        Path::new(EXE),
        &data,
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    let web = server.web;

    // Three phones, each from a loopback address of its own.
    sipp(
        dir.path(),
        sip,
        "register_expires",
        "1001",
        "127.0.0.2",
        &["-ap", PHONE_SECRET, "-key", "expires", "3600"],
    );
    sipp(
        dir.path(),
        sip,
        "register_expires",
        "1003",
        "127.0.0.4",
        &["-ap", PHONE_SECRET, "-key", "expires", "1"],
    );
    // Three wrong answers, then the address is dropped (auth_failures_max = 3).
    sipp(
        dir.path(),
        sip,
        "wrong_password",
        "1002",
        "127.0.0.3",
        &["-ap", "not the secret"],
    );

    let cookie = login_cookie(web, "ops", PASSWORD).unwrap();
    // 1003's binding lapses within a second or two; the sweep notes it.
    let all = eventually(15, "1003's binding lapsed", || {
        let v = devices(web, &cookie, "");
        (row(&v, "1003", "registrar")["state"] == "expired").then_some(v)
    });
    let want = |rows: &[(&str, &str, &str, &str)]| -> Vec<(String, String, String, String)> {
        rows.iter()
            .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
            .collect()
    };
    assert_eq!(
        summary(&all),
        want(&[
            ("1001", "registrar", "registered", ""),
            ("1002", "registrar", "failing", "wrong-password"),
            ("1003", "registrar", "expired", ""),
            ("3001", "monitor", "registered", ""),
            ("3002", "monitor", "failing", "wrong-password"),
            ("3003", "monitor", "failing", "wrong-password"),
            ("3004", "monitor", "expired", ""),
            ("3005", "monitor", "failing", "rejected"),
            ("3006", "monitor", "failing", "timeout"),
        ]),
        "{all:#}"
    );
    assert_eq!(
        (
            &all["total"],
            &all["registered"],
            &all["expired"],
            &all["failing"]
        ),
        (
            &Value::from(9),
            &Value::from(2),
            &Value::from(2),
            &Value::from(5)
        )
    );
    // What each knows: the registrar's own words and counts, the monitor's responses.
    let r = row(&all, "1002", "registrar");
    assert_eq!(
        (&r["address"], &r["failures"]),
        (&"127.0.0.3".into(), &3.into()),
        "{r:#}"
    );
    assert_eq!(
        r["failure_reason"],
        "digest response does not match the stored password"
    );
    let r = row(&all, "1001", "registrar");
    assert_eq!(r["user_agent"], "Desk phone 1001");
    assert!(
        r["source"].as_str().unwrap().starts_with("udp:127.0.0.2:"),
        "{r:#}"
    );
    assert!(r["expires_us"].as_i64().unwrap() > all["now_us"].as_i64().unwrap() + 3_000_000_000);
    let r = row(&all, "1003", "registrar");
    let now_us = all["now_us"].as_i64().unwrap();
    assert!(
        r["last_seen_us"].as_i64().unwrap() > now_us - 60_000_000
            && r["expires_us"].as_i64().unwrap() <= now_us
            && r["contact"]
                .as_str()
                .unwrap()
                .starts_with("sip:1003@127.0.0.4:"),
        "{r:#}"
    );
    let r = row(&all, "3002", "monitor");
    assert_eq!(r["failure_reason"], "403 Forbidden after a challenge");
    assert_eq!(
        row(&all, "3003", "monitor")["failure_reason"],
        "401 Unauthorized: credentials refused 2 times"
    );
    assert_eq!(
        row(&all, "3006", "monitor")["failure_reason"],
        "no final response to 2 requests"
    );
    let r = row(&all, "3001", "monitor");
    assert_eq!(
        (&r["address"], &r["user_agent"], &r["failures"]),
        (
            &"10.20.0.11".into(),
            &"Yealink SIP-T46U 108.86.0.3001".into(),
            &0.into()
        )
    );
    // Keyset pages of two walk the same rows, once each.
    let mut paged = Vec::new();
    let mut query = "limit=2".to_string();
    loop {
        let v = devices(web, &cookie, &query);
        paged.extend(summary(&v));
        let Some(next) = v["next"].as_str() else {
            break;
        };
        query = format!(
            "limit=2&after={}",
            next.replace('%', "%25").replace('|', "%7C")
        );
    }
    assert_eq!(paged, summary(&all));
    // Filters: state, user, address.
    let failing = devices(web, &cookie, "state=failing&user=300*");
    let users: Vec<_> = summary(&failing).into_iter().map(|r| r.0).collect();
    assert_eq!(users, ["3002", "3003", "3005", "3006"]);
    let by_ip = devices(web, &cookie, "ip=127.0.0.3");
    assert_eq!(
        summary(&by_ip),
        want(&[("1002", "registrar", "failing", "wrong-password")])
    );
    let (status, body) = get(web, &cookie, "/api/devices?state=up");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("state"), "{body}");
    let (status, _) = get(web, "tandem_session=nope", "/api/devices");
    assert_eq!(status, 401);

    // The dashboard's Registrar panel draws the registrar's series from the history.
    let chart = |page: &str, id: &str| -> Option<String> {
        let at = page.find(&format!("data-chart=\"{id}\""))?;
        let chart = &page[at..];
        Some(chart[..chart.find("</figure>").unwrap_or(chart.len())].to_string())
    };
    let dashboard = eventually(15, "the Registrar panel's series", || {
        let (_, page) = get(web, &cookie, "/dashboard?range=15m");
        let drawn = chart(&page, "registrar-bindings")?
            .contains("data-name=\"tandem_registrar_bindings\"")
            && chart(&page, "registrar-registers")?.contains("code=&quot;200&quot;")
            && chart(&page, "registrar-auth-failures")?.contains("wrong_response");
        drawn.then_some(page)
    });
    assert!(dashboard.contains("id=\"panel-registrar\""));
    assert!(chart(&dashboard, "registrar-commit").is_some());

    // The page, in a real browser.
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let b = Browser::launch(1366, 768).await.unwrap();
    b.login(&server.base(), "ops", PASSWORD).await.unwrap();
    b.client
        .goto(&format!("{}devices", server.base()))
        .await
        .unwrap();
    let rows = b
        .client
        .execute(
            "return [...document.querySelectorAll('#devices tbody tr')].map(tr => \
             [tr.dataset.user, tr.dataset.seenBy, tr.dataset.state, tr.dataset.failure, \
              tr.querySelector('.state').textContent]);",
            vec![],
        )
        .await
        .unwrap();
    let rows: Vec<Vec<String>> = serde_json::from_value(rows).unwrap();
    let page: Vec<_> = rows
        .iter()
        .map(|r| (r[0].clone(), r[1].clone(), r[2].clone(), r[3].clone()))
        .collect();
    assert_eq!(page, summary(&all));
    assert_eq!(rows[1][4], "Failing");
    let nav = b
        .text(fantoccini::Locator::Css("nav.pages a.active"))
        .await
        .unwrap();
    assert_eq!(nav, "Devices");
    // The form's state filter, submitted as a person would.
    b.client
        .execute(
            "document.getElementById('state').value = 'failing'; \
             document.getElementById('search').submit(); return 1;",
            vec![],
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = b
            .client
            .execute(
                "return location.search + ' ' + \
                 document.querySelectorAll('#devices tbody tr').length;",
                vec![],
            )
            .await
            .unwrap();
        if v.as_str() == Some("?user=&state=failing&ip= 5") {
            break;
        }
        assert!(Instant::now() < deadline, "the failing devices: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(dir) = std::env::var_os("TANDEM_SCREENSHOT_DIR") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        b.client.set_window_size(1440, 1000).await.unwrap();
        b.client
            .goto(&format!("{}devices", server.base()))
            .await
            .unwrap();
        b.screenshot(&dir.join("devices.png")).await.unwrap();
    }
    b.close().await;
}
