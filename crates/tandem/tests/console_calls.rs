//! The console's calls pages as an operator meets them: `tandem capture` analyses real and
//! synthetic captures into CDRs and a per-minute archive, `tandem serve` shows them, and a real
//! headless Chromium (through chromedriver) searches, opens a call, reads its ladder, plays its
//! audio and downloads its packets. What the pages show is checked against the capture's own
//! `--json`, against `tandem cdr pcap`, and against tshark's reading of the same packets.

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bench::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use fantoccini::Locator;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
/// The browser's zone in these tests: +05:30 all year, so a time shown in UTC, or shifted by a
/// whole hour, cannot pass for local time.
const ZONE: &str = "Asia/Kolkata";
const ZONE_OFFSET_S: i64 = 5 * 3600 + 1800;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn shared_captures() -> Option<PathBuf> {
    let dir = std::env::var_os("TANDEM_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
        .join("captures");
    dir.is_dir().then_some(dir)
}

/// What `tandem capture --json` said of the inputs: every line, by kind.
struct Captured {
    data: PathBuf,
    lines: Vec<Value>,
}

impl Captured {
    fn calls(&self) -> impl Iterator<Item = &Value> {
        self.lines.iter().filter(|l| l["kind"] == "call")
    }
    fn call(&self, call_id: &str) -> &Value {
        self.calls()
            .find(|c| c["call_id"] == call_id)
            .unwrap_or_else(|| panic!("no call {call_id} in the capture's JSON"))
    }
    fn streams_of(&self, call_id: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|l| l["kind"] == "rtp_stream" && l["call_id"] == call_id)
            .collect()
    }
    fn cdr_db(&self) -> PathBuf {
        self.data.join("cdr.sqlite3")
    }
}

/// Analyses `inputs` into the data directory `data` (CDRs, and every packet archived), as an
/// operator would with `tandem capture`.
fn capture(data: &Path, inputs: &[PathBuf]) -> Captured {
    std::fs::create_dir_all(data).unwrap();
    let out = Command::new(EXE)
        .arg("capture")
        .arg("--read")
        .args(inputs)
        .arg("--archive")
        .arg(data.join("archive"))
        .args(["--archive-store", "full", "--json", "--cdr-db"])
        .arg(data.join("cdr.sqlite3"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tandem capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Captured {
        data: data.to_owned(),
        lines,
    }
}

/// Twelve synthetic G.711 calls two hours ago, with loss and jitter; every tenth fails.
fn synthetic_pcap(dir: &Path) -> PathBuf {
    let path = dir.join("synthetic.pcap");
    let cfg = monitor::synth::SynthConfig {
        calls: 12,
        call_interval_us: 400_000,
        call_duration_ms: 3_000,
        loss_pct: 2.0,
        jitter_ms: 4.0,
        seed: 17,
        start_ns: (now_s() - 7200) * 1_000_000_000,
        kinds: vec![
            monitor::synth::CallKind::Voice,
            monitor::synth::CallKind::Dtmf,
        ],
        ..monitor::synth::SynthConfig::default()
    };
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    monitor::synth::generate(&cfg, file).unwrap();
    path
}

/// `tandem cdr pcap CALL-ID`'s bytes.
fn cdr_pcap(db: &Path, call_id: &str) -> Vec<u8> {
    let out = Command::new(EXE)
        .args(["cdr", "pcap", call_id, "--cdr-db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tandem cdr pcap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// tshark's reading of a pcap's SIP messages, in order: (method or status code, carries SDP).
fn tshark_sip(pcap: &[u8], dir: &Path) -> Option<Vec<(String, bool)>> {
    let path = dir.join("tshark-input.pcap");
    std::fs::write(&path, pcap).unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-Y", "sip", "-T", "fields", "-E", "occurrence=f"])
        .args([
            "-e",
            "sip.Method",
            "-e",
            "sip.Status-Code",
            "-e",
            "sdp.version",
        ])
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let label = if f[0].is_empty() { f[1] } else { f[0] };
                (label.to_owned(), f.get(2).is_some_and(|v| !v.is_empty()))
            })
            .collect(),
    )
}

/// Polls `check` until it gives a value, for at most `secs` seconds.
async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `script` in the page and returns what it returns.
async fn js(b: &Browser, script: &str) -> Value {
    b.client.execute(script, vec![]).await.unwrap()
}

/// Waits for the page's data (`data-ready` on `#id`) and fails on the page's own error.
async fn wait_ready(b: &Browser, id: &str) {
    let script = format!("return document.getElementById('{id}')?.dataset.ready || '';");
    let state: String = eventually(30, "the page's data", || async {
        let v = js(b, &script).await;
        let s = v.as_str().unwrap_or("").to_owned();
        (!s.is_empty()).then_some(s)
    })
    .await;
    if state != "1" {
        let err = js(
            b,
            "return document.querySelector('.error')?.textContent || '';",
        )
        .await;
        panic!("the page could not load its data: {err}");
    }
}

/// The rows of a search result once its status says the search is over.
async fn search_rows(b: &Browser) -> (String, Vec<Value>) {
    let status: String = eventually(30, "the search's answer", || async {
        let s = js(b, "return document.getElementById('status').textContent;").await;
        let s = s.as_str().unwrap_or("").to_owned();
        (!s.is_empty() && !s.starts_with("Searching")).then_some(s)
    })
    .await;
    let rows = js(
        b,
        "return [...document.querySelectorAll('table.grid tbody tr')].map(tr => ({
            uid: tr.dataset.uid || null, user: tr.dataset.user || null,
            cells: [...tr.cells].map(td => td.textContent),
            time: tr.querySelector('time')?.dateTime || null,
            shown: tr.querySelector('time')?.textContent || null }));",
    )
    .await;
    (status, rows.as_array().unwrap().clone())
}

fn rfc3339(s: i64) -> String {
    utc::format_s(s)
}

/// The local text a page shows for a UTC instant in [`ZONE`]: `YYYY-MM-DD HH:MM:SS`.
fn shown_in_zone(us: i64) -> String {
    let t = utc::format_s(us.div_euclid(1_000_000) + ZONE_OFFSET_S);
    t.trim_end_matches('Z').replacen('T', " ", 1)
}

fn us_of(rfc: &Value) -> i64 {
    utc::parse_us(rfc.as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_call_reads_its_ladder_listens_and_downloads_its_packets() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut inputs = vec![synthetic_pcap(dir.path())];
    let shared = shared_captures();
    match &shared {
        Some(s) => {
            inputs.push(s.join("rtp_rtcp_sip_ipv4_udp.pcap"));
            inputs.push(s.join("aaa.pcap"));
        }
        None => test_env::skip(
            "../shared/captures is absent: the calls pages are tested on synthetic calls only",
        ),
    }
    let cap = capture(&data, &inputs);
    add_user(Path::new(EXE), &data, "ops", "admin", PASSWORD).unwrap();
    add_user(Path::new(EXE), &data, "watcher", "viewer", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let base = server.base();
    let b = Browser::launch_in_zone(1366, 900, Some(ZONE))
        .await
        .unwrap();
    let after = b.login(&base, "ops", PASSWORD).await.unwrap();
    assert!(after.ends_with("/dashboard"), "{after}");

    // 1. A number prefix over the last day finds exactly the synthetic calls it should.
    let (from, to) = (now_s() - 86_400, now_s() + 60);
    let expected: BTreeSet<String> = cap
        .calls()
        .filter(|c| c["caller"].as_str().unwrap().starts_with("100000"))
        .map(|c| c["caller"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        expected.len(),
        10,
        "calls 0 to 9 have callers 1000000..1000009"
    );
    b.client
        .goto(&format!(
            "{base}calls?from={}&to={}&caller=100000*",
            rfc3339(from),
            rfc3339(to)
        ))
        .await
        .unwrap();
    let (status, rows) = search_rows(&b).await;
    let found: BTreeSet<String> = rows
        .iter()
        .map(|r| r["cells"][1].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(found, expected, "{status}");
    // Newest first, and every time shown in the browser's zone, which the page names.
    let times: Vec<&str> = rows.iter().map(|r| r["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    for r in &rows {
        let utc_us = utc::parse_us(r["time"].as_str().unwrap()).unwrap();
        assert_eq!(r["shown"].as_str().unwrap(), shown_in_zone(utc_us));
    }
    // (Chromium may name the zone by its older alias, Asia/Calcutta.)
    let zone = js(&b, "return document.querySelector('.tz').textContent;").await;
    assert!(zone.as_str().unwrap().contains("UTC+05:30"), "{zone}");
    // The header's totals are the filter's.
    let totals: String = eventually(20, "the totals", || async {
        let v = js(
            &b,
            "return document.getElementById('total-calls')?.textContent || '';",
        )
        .await;
        let s = v.as_str().unwrap_or("").to_owned();
        (!s.is_empty()).then_some(s)
    })
    .await;
    assert_eq!(totals, "10 calls");

    // 2. A suffix, a negation and a range with nothing in it.
    b.client
        .goto(&format!(
            "{base}calls?from={}&to={}&called=*0003",
            rfc3339(from),
            rfc3339(to)
        ))
        .await
        .unwrap();
    let (_, rows) = search_rows(&b).await;
    let called: Vec<&str> = rows
        .iter()
        .map(|r| r["cells"][2].as_str().unwrap())
        .collect();
    assert_eq!(called, ["2000003"]);
    b.client
        .goto(&format!(
            "{base}calls?from={}&to={}&caller=!100000*",
            rfc3339(now_s() - 3 * 3600),
            rfc3339(to)
        ))
        .await
        .unwrap();
    let (_, rows) = search_rows(&b).await;
    let callers: BTreeSet<&str> = rows
        .iter()
        .map(|r| r["cells"][1].as_str().unwrap())
        .collect();
    assert_eq!(callers, BTreeSet::from(["1000010", "1000011"]));
    b.client
        .goto(&format!(
            "{base}calls?from=2001-01-01T00:00:00Z&to=2001-01-02T00:00:00Z"
        ))
        .await
        .unwrap();
    let (status, rows) = search_rows(&b).await;
    assert!(rows.is_empty());
    assert!(
        status.starts_with("No calls from 2001-01-01 05:30:00 to 2001-01-02 05:30:00"),
        "{status}"
    );
    assert!(
        status.contains("2001-01-01T00:00:00.000Z"),
        "the range in UTC too: {status}"
    );

    // 3. One answered call: open it from the list.
    let call = cap
        .calls()
        .find(|c| c["caller"] == "1000002" && c["state"] == "ended")
        .expect("call 2 is answered and ended");
    let call_id = call["call_id"].as_str().unwrap();
    b.client
        .goto(&format!(
            "{base}calls?from={}&to={}&caller=1000002",
            rfc3339(from),
            rfc3339(to)
        ))
        .await
        .unwrap();
    let (_, rows) = search_rows(&b).await;
    assert_eq!(rows.len(), 1);
    b.click(Locator::Css("#calls tbody tr a")).await.unwrap();
    wait_ready(&b, "call-page").await;
    let uid = js(
        &b,
        "return document.getElementById('call-page').dataset.uid;",
    )
    .await;
    let uid = uid.as_str().unwrap().to_owned();
    check_call_page(&b, &cap, call_id, dir.path()).await;

    // 4. Listening: the stream's WAV lasts as long as the stream.
    check_audio(&b, &cap, call_id, dir.path()).await;

    // 5. The pcap the page downloads is `tandem cdr pcap`'s, byte for byte.
    let downloaded = b
        .fetch_bytes("document.getElementById('pcap').href")
        .await
        .unwrap();
    assert_eq!(downloaded, cdr_pcap(&cap.cdr_db(), call_id));

    // 6. Every listen and download was logged with its user.
    let accounts = console::accounts::Accounts::open(&data.join("console.sqlite3")).unwrap();
    let log = accounts.access_log(10).unwrap();
    assert!(
        log.iter()
            .any(|a| a.user == "ops" && a.action == "pcap" && a.target == uid),
        "{log:?}"
    );
    assert!(
        log.iter().any(|a| a.user == "ops" && a.action == "listen"),
        "{log:?}"
    );

    // 7. The real capture: a ladder with RTCP on its streams, and A-law to listen to.
    if shared.is_some() {
        let real = cap
            .calls()
            .find(|c| c["answer"].is_string())
            .expect("rtp_rtcp_sip_ipv4_udp.pcap holds an answered call");
        let real_id = real["call_id"].as_str().unwrap();
        let start = us_of(&real["start"]) / 1_000_000;
        b.client
            .goto(&format!(
                "{base}calls?from={}&to={}&call_id={}",
                rfc3339(start - 60),
                rfc3339(start + 3600),
                console::web::url_encode(real_id)
            ))
            .await
            .unwrap();
        let (_, rows) = search_rows(&b).await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        b.click(Locator::Css("#calls tbody tr a")).await.unwrap();
        wait_ready(&b, "call-page").await;
        check_call_page(&b, &cap, real_id, dir.path()).await;
        let rtcp = js(
            &b,
            "return document.querySelectorAll('#ladder .rtcp-text').length;",
        )
        .await;
        assert!(
            rtcp.as_u64().unwrap() > 0,
            "RTCP reports are drawn on the streams"
        );
        check_audio(&b, &cap, real_id, dir.path()).await;

        // The REGISTER chains of aaa.pcap on the registrations page.
        let regs: Vec<&Value> = cap
            .lines
            .iter()
            .filter(|l| l["kind"] == "registration")
            .collect();
        assert!(!regs.is_empty());
        let first = regs.iter().map(|r| us_of(&r["start"])).min().unwrap() / 1_000_000;
        let last = regs.iter().map(|r| us_of(&r["end"])).max().unwrap() / 1_000_000;
        b.client
            .goto(&format!(
                "{base}registrations?from={}&to={}",
                rfc3339(first - 60),
                rfc3339(last + 60)
            ))
            .await
            .unwrap();
        let (status, rows) = search_rows(&b).await;
        assert_eq!(rows.len(), regs.len(), "{status}");
        let users: BTreeSet<&str> = rows.iter().map(|r| r["user"].as_str().unwrap()).collect();
        let want: BTreeSet<&str> = regs.iter().map(|r| r["user"].as_str().unwrap()).collect();
        assert_eq!(users, want);
    }
    b.close().await;

    // 8. Without a session every data, audio and pcap URL answers 401, every page sends to the
    // login; a viewer may search and look, but neither listen nor download.
    let enc = console::web::url_encode(&uid);
    let data_urls = [
        "/api/calls".to_owned(),
        "/api/calls/totals".to_owned(),
        format!("/api/calls/{enc}"),
        format!("/api/calls/{enc}/pcap"),
        format!("/api/calls/{enc}/audio/0.wav"),
        format!("/api/calls/{enc}/audio/mixed.wav"),
        "/api/registrations".to_owned(),
        "/api/live".to_owned(),
    ];
    for url in &data_urls {
        let (status, _, _) = http(server.web, "GET", url, &[], "").unwrap();
        assert_eq!(status, 401, "{url}");
    }
    for page in [
        "/calls".to_owned(),
        format!("/calls/{enc}"),
        "/live".into(),
        "/registrations".into(),
    ] {
        let (status, head, _) = http(server.web, "GET", &page, &[], "").unwrap();
        assert!(status == 303 && head.contains("/login"), "{page}: {status}");
    }
    let viewer = login_cookie(server.web, "watcher", PASSWORD).unwrap();
    let as_viewer = [("Cookie", viewer.as_str())];
    let (status, _, body) = http(
        server.web,
        "GET",
        &format!("/api/calls/{enc}"),
        &as_viewer,
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    for url in &data_urls[3..6] {
        let (status, _, body) = http(server.web, "GET", url, &as_viewer, "").unwrap();
        assert_eq!(status, 403, "{url}: {body}");
        assert!(body.contains("admin"), "{body}");
    }

    // 9. A bad search is refused with what was wrong and where, never run.
    for (query, names) in [
        ("caller=12%27%3B--", "caller"),
        ("ip=10.0.0.0%2F33", "ip"),
        ("from=yesterday", "from"),
        ("colour=blue", "colour"),
        ("after=42", "after"),
    ] {
        let (status, _, body) = http(
            server.web,
            "GET",
            &format!("/api/calls?{query}"),
            &as_viewer,
            "",
        )
        .unwrap();
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(names), "{query}: {body}");
    }
    let (status, _, body) = http(
        server.web,
        "GET",
        "/api/calls/nobody%7Cx%7C1",
        &as_viewer,
        "",
    )
    .unwrap();
    assert_eq!(status, 404, "{body}");
}

/// The call page of `call_id` against the capture: one arrow per SIP message in tshark's order
/// with the SDP markers where SDP was sent, and the streams table equal to `--json`'s figures.
async fn check_call_page(b: &Browser, cap: &Captured, call_id: &str, dir: &Path) {
    let shown = js(
        b,
        "return [...document.querySelectorAll('#ladder g.msg')].map(g => [g.dataset.label, g.dataset.sdp === '1', g.querySelector('.sdp-marker') !== null]);",
    )
    .await;
    let shown = shown.as_array().unwrap();
    let pcap = cdr_pcap(&cap.cdr_db(), call_id);
    match tshark_sip(&pcap, dir) {
        Some(want) => {
            assert_eq!(
                shown.len(),
                want.len(),
                "one arrow per SIP message: {shown:?} {want:?}"
            );
            for (s, (label, sdp)) in shown.iter().zip(&want) {
                let first = s[0].as_str().unwrap().split(' ').next().unwrap();
                assert_eq!(first, label, "{shown:?}");
                assert_eq!(s[1].as_bool().unwrap(), *sdp, "SDP on {label}");
                assert_eq!(s[2].as_bool().unwrap(), *sdp, "the SDP marker of {label}");
            }
        }
        None => test_env::skip("tshark is not installed: the ladder is not compared with it"),
    }
    let call = cap.call(call_id);
    assert!(shown.len() as u64 >= call["sip_messages"].as_u64().unwrap());

    // The streams table, cell by cell, against the capture's JSON for this call.
    let table = js(
        b,
        "return [...document.querySelectorAll('#streams tbody tr')].map(tr => Object.fromEntries(
            [...tr.cells].filter(td => td.className).map(td => [td.className.replace(/^n /, ''), td.textContent])));",
    )
    .await;
    let table = table.as_array().unwrap();
    let streams = cap.streams_of(call_id);
    assert_eq!(table.len(), streams.len(), "{table:?}");
    for s in streams {
        let row = table
            .iter()
            .find(|r| r["src"] == s["src"] && r["dst"] == s["dst"] && r["ssrc"] == s["ssrc"])
            .unwrap_or_else(|| panic!("stream {} → {} not shown: {table:?}", s["src"], s["dst"]));
        assert_eq!(row["payload"], s["payload"]);
        for key in ["packets", "lost", "duplicates", "out_of_order"] {
            assert_eq!(row[key].as_str().unwrap(), s[key].to_string(), "{key}");
        }
        for (key, digits) in [
            ("max_delta_ms", 3),
            ("mean_jitter_ms", 3),
            ("max_jitter_ms", 3),
            ("mos", 2),
        ] {
            let want = s[key].as_f64();
            let got = row[key].as_str().unwrap();
            match want {
                Some(w) => {
                    let g: f64 = got.parse().unwrap_or_else(|_| panic!("{key}: {got:?}"));
                    assert!(
                        (g - w).abs() <= 0.5 * 10f64.powi(-digits) + 1e-9,
                        "{key}: {g} vs {w}"
                    );
                }
                None => assert_eq!(got, "", "{key}"),
            }
        }
        let rtcp_reports = s["rtcp"]["reports"].as_u64().unwrap_or(0);
        assert_eq!(
            row["rtcp_reports"].as_str().unwrap(),
            rtcp_reports.to_string()
        );
    }
}

/// tshark's reading of the RTP timestamps of stream `ssrc` (`0x…`) in a pcap: the span they
/// cover in seconds at 8 kHz, one packet of `ptime_s` included.
fn tshark_rtp_seconds(pcap: &[u8], ssrc: &str, ptime_s: f64, dir: &Path) -> Option<f64> {
    let path = dir.join("tshark-rtp.pcap");
    std::fs::write(&path, pcap).unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-o", "rtp.heuristic_rtp:TRUE", "-Y"])
        .arg(format!("rtp.ssrc == {ssrc}"))
        .args(["-T", "fields", "-e", "rtp.timestamp"])
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ts: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let (lo, hi) = (*ts.iter().min()?, *ts.iter().max()?);
    Some((hi - lo) as f64 / 8000.0 + ptime_s)
}

/// Plays each G.711 stream of the call and its mix: each WAV lasts as long as its stream's
/// RTP timestamps say (tshark's reading), silence where packets were lost or suppressed.
async fn check_audio(b: &Browser, cap: &Captured, call_id: &str, dir: &Path) {
    let players = js(
        b,
        "return [...document.querySelectorAll('#streams audio')].map(a => [a.dataset.stream,
            a.closest('tr').querySelector('.src').textContent, a.closest('tr').querySelector('.dst').textContent,
            a.closest('tr').querySelector('.ssrc').textContent]);",
    )
    .await;
    let players = players.as_array().unwrap();
    let g711: Vec<&Value> = cap
        .streams_of(call_id)
        .into_iter()
        .filter(|s| s["payload"].as_str().unwrap().contains("g711"))
        .collect();
    assert!(!g711.is_empty(), "the call has G.711 streams");
    assert_eq!(
        players.len(),
        g711.len(),
        "one player per G.711 stream: {players:?}"
    );
    let pcap = cdr_pcap(&cap.cdr_db(), call_id);
    for p in players {
        let ssrc = p[3].as_str().unwrap();
        let played = b
            .play_audio(&format!(
                "#streams audio[data-stream='{}']",
                p[0].as_str().unwrap()
            ))
            .await
            .unwrap();
        match tshark_rtp_seconds(&pcap, ssrc, 0.02, dir) {
            Some(want) => assert!(
                (played - want).abs() < 0.002,
                "WAV of {played} s for stream {ssrc}, whose timestamps span {want} s"
            ),
            None => test_env::skip("tshark is not installed: WAV lengths are not compared with it"),
        }
    }
    let mixed = b.play_audio("#mixed-audio").await.unwrap();
    assert!(mixed > 0.5, "the mix plays: {mixed} s");
}

/// One SIP message of the live call below, as HEP from 192.0.2.10 (caller) or .20.
fn hep_sip(
    first: &str,
    from_caller: bool,
    cseq: &str,
    call_id: &str,
    with_sdp: Option<u16>,
    at_us: i64,
) -> Vec<u8> {
    let (a, b): (IpAddr, IpAddr) = ("192.0.2.10".parse().unwrap(), "192.0.2.20".parse().unwrap());
    let (src, dst) = if from_caller { (a, b) } else { (b, a) };
    let to_tag = if first.starts_with("INVITE") {
        ""
    } else {
        ";tag=b2"
    };
    let body = with_sdp
        .map(|port| {
            format!(
                "v=0\r\no=- 1 1 IN IP4 {src}\r\ns=-\r\nc=IN IP4 {src}\r\nt=0 0\r\nm=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n"
            )
        })
        .unwrap_or_default();
    let ctype = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/sdp\r\n"
    };
    let text = format!(
        "{first}\r\nVia: SIP/2.0/UDP {src}:5060;branch=z9hG4bK-{cseq_n}\r\nFrom: <sip:5551234@192.0.2.10>;tag=a1\r\n\
         To: <sip:5559876@192.0.2.20>{to_tag}\r\nCall-ID: {call_id}\r\nCSeq: {cseq}\r\n{ctype}Content-Length: {}\r\n\r\n{body}",
        body.len(),
        cseq_n = cseq.replace(' ', "-"),
    );
    hep_packet(
        SocketAddr::new(src, 5060),
        SocketAddr::new(dst, 5060),
        hep::ProtocolType::SIP,
        text.as_bytes(),
        at_us,
    )
}

fn hep_packet(
    src: SocketAddr,
    dst: SocketAddr,
    kind: hep::ProtocolType,
    payload: &[u8],
    at_us: i64,
) -> Vec<u8> {
    bench::hep_replay::hep_udp(src, dst, kind, payload, at_us).unwrap()
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_call_appears_on_the_live_page_and_leaves_it_when_it_ends() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let hep_port = common::free_udp_port();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nhep_listen = \"127.0.0.1:{hep_port}\"\ncdr_db = \"{}\"\nstatus_interval_s = 0\n",
            data.join("cdr.sqlite3").display()
        ),
    )
    .unwrap();
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let server = ConsoleServer::start(
        Path::new(EXE),
        &data,
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    let base = server.base();
    let b = Browser::launch_in_zone(1366, 768, Some(ZONE))
        .await
        .unwrap();
    b.login(&base, "ops", PASSWORD).await.unwrap();
    b.client.goto(&format!("{base}live")).await.unwrap();
    let rows = || async {
        js(&b, "return [...document.querySelectorAll('#live tbody tr')].map(tr => [tr.dataset.callId, tr.querySelector('.state').textContent, tr.cells[5].textContent]);").await
    };
    // The page is connected before the call starts: it must appear without a reload.
    eventually(20, "the live feed's first event", || async {
        let s = js(
            &b,
            "return document.getElementById('live-status').textContent;",
        )
        .await;
        s.as_str()
            .unwrap_or("")
            .contains("calls in progress")
            .then_some(())
    })
    .await;

    let call_id = "live-1@tandem.test";
    let caller_rtp = SocketAddr::from(([192, 0, 2, 10], 40_000));
    let callee_rtp = SocketAddr::from(([192, 0, 2, 20], 50_000));
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let send = |p: Vec<u8>| {
        sender.send_to(&p, ("127.0.0.1", hep_port)).unwrap();
    };
    let t0 = now_us();
    send(hep_sip(
        "INVITE sip:5559876@192.0.2.20 SIP/2.0",
        true,
        "1 INVITE",
        call_id,
        Some(caller_rtp.port()),
        t0,
    ));
    send(hep_sip(
        "SIP/2.0 200 OK",
        false,
        "1 INVITE",
        call_id,
        Some(callee_rtp.port()),
        t0 + 1000,
    ));
    send(hep_sip(
        "ACK sip:5559876@192.0.2.20 SIP/2.0",
        true,
        "1 ACK",
        call_id,
        None,
        t0 + 2000,
    ));
    // Media both ways, 20 ms apart, until the page shows the call with its streams.
    let mut seq = 0u16;
    let mut send_rtp = || {
        seq = seq.wrapping_add(1);
        let at = now_us();
        for (src, dst, ssrc) in [
            (caller_rtp, callee_rtp, 0x1111_1111u32),
            (callee_rtp, caller_rtp, 0x2222_2222),
        ] {
            let mut rtp = Vec::new();
            let ts = u32::from(seq) * 160;
            monitor::synth::packet::write_rtp(&mut rtp, 8, false, seq, ts, ssrc, 160, 0xd5);
            send(hep_packet(src, dst, hep::ProtocolType::RTP, &rtp, at));
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let shown = loop {
        for _ in 0..10 {
            send_rtp();
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = rows().await;
        let r = r.as_array().unwrap();
        if let Some(row) = r.iter().find(|x| x[0] == call_id)
            && row[2].as_str().unwrap_or("").contains("g711A")
        {
            break row.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the live call did not appear: {r:?}"
        );
    };
    assert_eq!(shown[1], "answered");

    // The caller hangs up: the call leaves the page, still without a reload.
    let t1 = now_us();
    send(hep_sip(
        "BYE sip:5559876@192.0.2.20 SIP/2.0",
        true,
        "2 BYE",
        call_id,
        None,
        t1,
    ));
    send(hep_sip(
        "SIP/2.0 200 OK",
        false,
        "2 BYE",
        call_id,
        None,
        t1 + 1000,
    ));
    eventually(20, "the ended call leaving the live page", || async {
        let r = rows().await;
        (!r.as_array().unwrap().iter().any(|x| x[0] == call_id)).then_some(())
    })
    .await;
    b.close().await;
}

/// Downloads `path` from the console with `cookie` through Python's `urllib` (a client that
/// reads a chunked body as any other and raises on one cut short), and reads it back with
/// Python's `csv` module: `{"status", "headers", "body", "rows"}`.
fn python_download(addr: SocketAddr, path: &str, cookie: &str) -> Value {
    const SCRIPT: &str = r#"
import csv, io, json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Cookie": sys.argv[2]})
with urllib.request.urlopen(req, timeout=60) as resp:
    body = resp.read().decode("utf-8")
    out = {"status": resp.status, "headers": {k.lower(): v for k, v in resp.getheaders()}, "body": body}
out["rows"] = list(csv.reader(io.StringIO(body, newline="")))
json.dump(out, sys.stdout)
"#;
    let out = Command::new("python3")
        .args(["-c", SCRIPT, &format!("http://{addr}{path}"), cookie])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3 {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every row of a JSON search, page after page (`list`: the array's key).
fn json_pages(addr: SocketAddr, path: &str, list: &str, cookie: &str) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut after = String::new();
    loop {
        let (status, _, body) = http(
            addr,
            "GET",
            &format!("{path}&limit=500{after}"),
            &[("Cookie", cookie)],
            "",
        )
        .unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        rows.extend(page[list].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(n) => after = format!("&after={n}"),
            None => return rows,
        }
    }
}

/// A JSON value as the CSV export writes it in a field (crate `exports`).
fn csv_cell(v: Option<&Value>) -> String {
    let text = match v {
        None | Some(Value::Null) => return String::new(),
        Some(Value::Bool(b)) => return b.to_string(),
        Some(Value::Number(n)) => return n.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    if exports::formula_like(&text) {
        format!("'{text}")
    } else {
        text
    }
}

/// The exported rows of `list`'s JSON rows: each column of `columns` as a CSV field.
fn check_csv_equals_json(
    what: &str,
    csv: &Value,
    json: &[Value],
    columns: &[&str],
    time: (&str, &str),
) {
    let rows = csv["rows"].as_array().unwrap();
    let header: Vec<&str> = rows[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(header, columns, "{what}: the header line");
    assert_eq!(rows.len() - 1, json.len(), "{what}: a CSV row per JSON row");
    for (i, (row, want)) in rows[1..].iter().zip(json).enumerate() {
        for (c, cell) in columns.iter().zip(row.as_array().unwrap()) {
            let expected = if *c == time.0 {
                utc::format_us(want[time.1].as_i64().unwrap())
            } else {
                csv_cell(want.get(*c))
            };
            assert_eq!(
                cell.as_str().unwrap(),
                expected,
                "{what}: row {i}, column {c}"
            );
        }
    }
}

/// `GET /api/calls?…&format=csv|jsonl` and `/api/registrations?…&format=csv`, streamed over real
/// HTTP, give the JSON API's rows of the same search, in its order; `tandem cdr list --csv`
/// writes the same bytes; the new signalling fields come from real captures and are searched.
#[test]
fn a_search_downloads_whole_as_csv_and_json_lines_with_the_rows_of_its_json() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("cdr.sqlite3");
    // More rows than one chunk of the body, and registrations: seeded in bulk.
    let now_us = now_s() * 1_000_000;
    let calls = cdr::seed::synthetic_calls(3_000, now_us - 86_400_000_000, now_us, 5);
    let regs = cdr::seed::synthetic_registrations(600, now_us - 86_400_000_000, now_us, 5);
    cdr::seed::bulk_load_sqlite(&db, calls.chain(regs)).unwrap();
    // Real captures with their User-Agents and a kept header.
    let mut captured: Vec<Value> = Vec::new();
    if let Some(s) = shared_captures() {
        let files = [
            "rtp_rtcp_sip_ipv4_udp.pcap",
            "sip_ipv4_tcp.pcap",
            "ipip0.pcap",
        ];
        let out = Command::new(EXE)
            .args(["capture", "--json", "--header", "Supported", "--cdr-db"])
            .arg(&db)
            .arg("--read")
            .args(files.iter().map(|f| s.join(f)))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        captured = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["kind"] == "call")
            .collect();
    } else {
        test_env::skip("../shared/captures is absent: exports are tested on seeded calls only");
    }
    add_user(Path::new(EXE), &data, "watcher", "viewer", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let cookie = login_cookie(server.web, "watcher", PASSWORD).unwrap();
    let q = format!("from=2000-01-01T00:00:00Z&to={}", rfc3339(now_s() + 60));

    let json = json_pages(server.web, &format!("/api/calls?{q}"), "calls", &cookie);
    assert_eq!(json.len(), 3_000 + captured.len());
    let csv = python_download(server.web, &format!("/api/calls?{q}&format=csv"), &cookie);
    assert_eq!(csv["status"], 200);
    assert_eq!(
        csv["headers"]["transfer-encoding"], "chunked",
        "streamed, not sized"
    );
    assert!(
        csv["headers"]["content-type"]
            .as_str()
            .unwrap()
            .starts_with("text/csv")
    );
    assert!(
        csv["headers"]["content-disposition"]
            .as_str()
            .unwrap()
            .contains(".csv")
    );
    let columns = cdr::export::CALL_EXPORT_COLUMNS;
    check_csv_equals_json("calls", &csv, &json, columns, ("start", "start_us"));

    // JSON lines: the same rows, the columns in order, values unchanged.
    let jsonl = python_download(server.web, &format!("/api/calls?{q}&format=jsonl"), &cookie);
    let lines: Vec<Value> = jsonl["body"]
        .as_str()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), json.len());
    for (line, want) in lines.iter().zip(&json) {
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut sorted = columns.to_vec();
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "every column, and no other");
        for c in columns.iter().filter(|c| **c != "start") {
            assert_eq!(line[*c], want[*c], "{c}");
        }
    }

    // The command line writes the same bytes.
    let out = Command::new(EXE)
        .args(["cdr", "list", "--csv", "--query", &q, "--cdr-db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8(out.stdout).unwrap() == csv["body"].as_str().unwrap(),
        "tandem cdr list --csv and the console's export differ"
    );

    // Registrations.
    let q_reg = format!("from=2000-01-01T00:00:00Z&to={}", rfc3339(now_s() + 86_400));
    let regs = json_pages(
        server.web,
        &format!("/api/registrations?{q_reg}"),
        "registrations",
        &cookie,
    );
    assert!(regs.len() >= 600);
    let regs_csv = python_download(
        server.web,
        &format!("/api/registrations?{q_reg}&format=csv"),
        &cookie,
    );
    let columns = cdr::export::REGISTRATION_EXPORT_COLUMNS;
    check_csv_equals_json(
        "registrations",
        &regs_csv,
        &regs,
        columns,
        ("last", "last_us"),
    );

    // The search pages offer the same downloads, and the new filters.
    for (page, inputs) in [
        (
            "/calls",
            &["ua", "from_domain", "to_domain", "ruri_user", "header"][..],
        ),
        ("/registrations", &[][..]),
    ] {
        let (status, _, html) =
            http(server.web, "GET", page, &[("Cookie", cookie.as_str())], "").unwrap();
        assert_eq!(status, 200);
        assert!(
            html.contains("id=\"export-csv\"") && html.contains("id=\"export-jsonl\""),
            "{page}"
        );
        for name in inputs {
            assert!(html.contains(&format!("name=\"{name}\"")), "{page}: {name}");
        }
    }

    // A bad format is refused, naming it.
    let (status, _, body) = http(
        server.web,
        "GET",
        &format!("/api/calls?{q}&format=xlsx"),
        &[("Cookie", cookie.as_str())],
        "",
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("xlsx"), "{body}");

    // The signalling fields of the real calls, stored and searched.
    for c in &captured {
        let row = json
            .iter()
            .find(|r| r["call_id"] == c["call_id"])
            .expect("a captured call in the search");
        for k in [
            "caller_ua",
            "callee_ua",
            "from_domain",
            "to_domain",
            "ruri_user",
            "headers",
        ] {
            assert_eq!(row[k], c[k], "{}: {k}", c["call_id"]);
        }
        let ua = c["callee_ua"].as_str().unwrap();
        if !ua.is_empty() {
            let word = ua.split_whitespace().next().unwrap();
            let found = json_pages(
                server.web,
                &format!("/api/calls?{q}&callee_ua={}", word.replace('/', "%2F")),
                "calls",
                &cookie,
            );
            assert!(
                found.iter().any(|r| r["call_id"] == c["call_id"]),
                "callee_ua={word}"
            );
            assert!(
                found
                    .iter()
                    .all(|r| r["callee_ua"].as_str().unwrap().contains(word))
            );
        }
    }
}
