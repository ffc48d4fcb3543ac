//! The console's pages where they used to mislead, in a real headless Chromium: an install
//! with no calls yet, a fax call, an SRTP call with loss, a call between two ports of one IP
//! with a resent INVITE, a stream seen without its SIP, and searches over years. Calls come
//! from `tandem capture` reading synthetic and hand-built captures, as an operator's would.
//!
//! With `TANDEM_SCREENSHOT_DIR` set, each page is also saved there as a PNG, at 1366x768 and
//! at 1920x1080, to be looked at.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bench::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use fantoccini::Locator;
use monitor::synth::packet::{write_ethernet_udp, write_rtp};
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
/// The sizes every page is looked at: the narrowest laptop the pages are made for, and wide.
const SIZES: [(u32, u32); 2] = [(1366, 768), (1920, 1080)];

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
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

async fn js(b: &Browser, script: &str) -> Value {
    b.client.execute(script, vec![]).await.unwrap()
}

/// The status line of a search page once the search is over.
async fn search_status(b: &Browser) -> String {
    eventually(30, "the search's answer", || async {
        let s = js(b, "return document.getElementById('status').textContent;").await;
        let s = s.as_str().unwrap_or("").to_owned();
        (!s.is_empty() && !s.starts_with("Searching")).then_some(s)
    })
    .await
}

/// Waits for `#id`'s data (`data-ready`), failing on the page's own error.
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

/// Saves the page as `name` at each size when `TANDEM_SCREENSHOT_DIR` is set (the window is
/// left at the first size).
async fn look(b: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("TANDEM_SCREENSHOT_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (w, h) in SIZES.iter().rev() {
        b.client
            .set_window_size(*w, *h)
            .await
            .expect("resizing the window");
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.screenshot(&dir.join(format!("{name}-{w}.png")))
            .await
            .unwrap();
        // And the whole page at that width.
        let tall = js(b, "return document.documentElement.scrollHeight;").await;
        let tall = tall
            .as_u64()
            .unwrap_or(u64::from(*h))
            .clamp(u64::from(*h), 6000) as u32;
        b.client.set_window_size(*w, tall).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.screenshot(&dir.join(format!("{name}-{w}-full.png")))
            .await
            .unwrap();
        b.client.set_window_size(*w, *h).await.unwrap();
    }
}

/// Whether the page itself scrolls sideways (a table too wide should scroll in its own box).
async fn page_overflows(b: &Browser) -> bool {
    js(
        b,
        "return document.documentElement.scrollWidth > window.innerWidth + 1;",
    )
    .await
    .as_bool()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_install_says_no_calls_yet_and_how_to_get_some() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    add_user(Path::new(EXE), &data, "ops", "admin", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let base = server.base();
    // No CDR database yet is no failure: the API answers an empty page and says how calls come.
    let cookie = login_cookie(server.web, "ops", PASSWORD).unwrap();
    let auth = [("Cookie", cookie.as_str())];
    for (url, list) in [
        ("/api/calls", "calls"),
        ("/api/registrations", "registrations"),
        ("/api/streams", "streams"),
    ] {
        let (status, _, body) = http(server.web, "GET", url, &auth, "").unwrap();
        assert_eq!(status, 200, "{url}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v[list], serde_json::json!([]), "{url}");
        assert!(v["hint"].as_str().unwrap().contains("cdr.sqlite3"), "{v}");
    }
    let (status, _, body) = http(server.web, "GET", "/api/calls/totals", &auth, "").unwrap();
    assert_eq!(status, 200, "{body}");

    let b = Browser::launch(SIZES[0].0, SIZES[0].1).await.unwrap();
    b.login(&base, "ops", PASSWORD).await.unwrap();
    b.client.goto(&format!("{base}calls")).await.unwrap();
    let status = search_status(&b).await;
    assert!(status.starts_with("No calls yet."), "{status}");
    assert!(
        status.contains("[capture]") && status.contains("tandem capture --read"),
        "how to get calls: {status}"
    );
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
    assert_eq!(totals, "0 calls");
    let page = js(&b, "return document.body.innerText;").await;
    let page = page.as_str().unwrap();
    assert!(
        !page.contains("failed"),
        "nothing reads as an error: {page}"
    );
    let errors = js(&b, "return document.querySelectorAll('.error').length;").await;
    assert_eq!(errors, 0);
    look(&b, "empty-calls").await;

    b.client
        .goto(&format!("{base}registrations"))
        .await
        .unwrap();
    let status = search_status(&b).await;
    assert!(status.starts_with("No registrations yet."), "{status}");
    assert!(
        !status.contains("alls"),
        "the registrations page talks about calls: {status}"
    );
    look(&b, "empty-registrations").await;

    b.client.goto(&format!("{base}streams")).await.unwrap();
    let status = search_status(&b).await;
    assert!(
        status.starts_with("No streams without a call yet."),
        "{status}"
    );
    b.close().await;
}

/// A classic pcap (µs, Ethernet), written frame by frame.
struct Pcap {
    bytes: Vec<u8>,
}

impl Pcap {
    fn new() -> Pcap {
        let mut bytes = Vec::new();
        for v in [0xa1b2_c3d4u32.to_le_bytes().as_slice(), &2u16.to_le_bytes()] {
            bytes.extend_from_slice(v);
        }
        bytes.extend_from_slice(&4u16.to_le_bytes());
        bytes.extend_from_slice(&[0; 8]);
        bytes.extend_from_slice(&65_535u32.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        Pcap { bytes }
    }

    fn udp(&mut self, t_us: i64, src: &str, dst: &str, payload: &[u8]) {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let mut frame = Vec::new();
        write_ethernet_udp(&mut frame, src, dst, payload);
        self.bytes
            .extend_from_slice(&((t_us / 1_000_000) as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&((t_us % 1_000_000) as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(&frame);
    }

    /// `seconds` of 20 ms A-law packets from `src` to `dst`, from `t_us`.
    fn rtp(&mut self, t_us: i64, src: &str, dst: &str, ssrc: u32, seconds: i64) {
        for k in 0..seconds * 50 {
            let mut p = Vec::new();
            write_rtp(
                &mut p,
                8,
                k == 0,
                k as u16,
                (k * 160) as u32,
                ssrc,
                160,
                0xD5,
            );
            self.udp(t_us + k * 20_000, src, dst, &p);
        }
    }
}

/// One SIP message of the dialog `call_id` from `from` to `to`; an SDP offering `media` when
/// given.
fn sip(
    start: &str,
    cseq: &str,
    call_id: &str,
    from: &str,
    to: &str,
    media: Option<&str>,
) -> Vec<u8> {
    let body = media
        .map(|m| {
            let (ip, port) = m.rsplit_once(':').unwrap();
            format!(
                "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
                 m=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n"
            )
        })
        .unwrap_or_default();
    let (caller, callee) = ("1001", "1002");
    let to_tag =
        if start.starts_with("SIP/2.0") || start.starts_with("BYE") || start.starts_with("ACK") {
            ";tag=b"
        } else {
            ""
        };
    let kind = if body.is_empty() {
        String::new()
    } else {
        "Content-Type: application/sdp\r\n".to_owned()
    };
    format!(
        "{start}\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK-{cseq_n}\r\n\
         From: <sip:{caller}@{from}>;tag=a\r\nTo: <sip:{callee}@{to}>{to_tag}\r\n\
         Call-ID: {call_id}\r\nCSeq: {cseq}\r\nContact: <sip:{caller}@{from}>\r\n\
         {kind}Content-Length: {}\r\n\r\n{body}",
        body.len(),
        cseq_n = cseq.split(' ').next().unwrap(),
    )
    .into_bytes()
}

/// An answered call from `a` to `b` with RTP both ways for `seconds` from `t_us`: media on
/// `ma` and `mb`; with `resend`, the INVITE goes twice.
#[allow(clippy::too_many_arguments)]
fn call(
    p: &mut Pcap,
    t_us: i64,
    call_id: &str,
    a: &str,
    b: &str,
    ma: &str,
    mb: &str,
    seconds: i64,
    resend: bool,
) {
    let ruri = format!("INVITE sip:1002@{b} SIP/2.0");
    p.udp(t_us, a, b, &sip(&ruri, "1 INVITE", call_id, a, b, Some(ma)));
    if resend {
        p.udp(
            t_us + 500_000,
            a,
            b,
            &sip(&ruri, "1 INVITE", call_id, a, b, Some(ma)),
        );
    }
    let t = t_us + 600_000;
    p.udp(
        t,
        b,
        a,
        &sip("SIP/2.0 100 Trying", "1 INVITE", call_id, a, b, None),
    );
    p.udp(
        t + 10_000,
        b,
        a,
        &sip("SIP/2.0 180 Ringing", "1 INVITE", call_id, a, b, None),
    );
    p.udp(
        t + 900_000,
        b,
        a,
        &sip("SIP/2.0 200 OK", "1 INVITE", call_id, a, b, Some(mb)),
    );
    p.udp(
        t + 910_000,
        a,
        b,
        &sip(
            &format!("ACK sip:1002@{b} SIP/2.0"),
            "1 ACK",
            call_id,
            a,
            b,
            None,
        ),
    );
    let media = t + 920_000;
    let mut both = Pcap::new();
    both.rtp(media, ma, mb, 0x0A0A_0001, seconds);
    both.rtp(media + 5_000, mb, ma, 0x0B0B_0002, seconds);
    // Both directions in time order.
    let mut frames = records(&both.bytes[24..]);
    frames.sort_by_key(|f| f.0);
    for (_, f) in frames {
        p.bytes.extend_from_slice(&f);
    }
    let end = media + seconds * 1_000_000 + 100_000;
    p.udp(
        end,
        a,
        b,
        &sip(
            &format!("BYE sip:1002@{b} SIP/2.0"),
            "2 BYE",
            call_id,
            a,
            b,
            None,
        ),
    );
    p.udp(
        end + 20_000,
        b,
        a,
        &sip("SIP/2.0 200 OK", "2 BYE", call_id, a, b, None),
    );
}

/// The records of a classic pcap's body: (time µs, record bytes).
fn records(mut body: &[u8]) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 16 {
        let s = u32::from_le_bytes(body[0..4].try_into().unwrap()) as i64;
        let us = u32::from_le_bytes(body[4..8].try_into().unwrap()) as i64;
        let len = u32::from_le_bytes(body[8..12].try_into().unwrap()) as usize;
        out.push((s * 1_000_000 + us, body[..16 + len].to_vec()));
        body = &body[16 + len..];
    }
    out
}

/// Synthetic calls two hours ago: voice, fax after a re-INVITE, SRTP; with loss.
fn synthetic(dir: &Path) -> PathBuf {
    let path = dir.join("synthetic.pcap");
    let cfg = monitor::synth::SynthConfig {
        calls: 6,
        call_interval_us: 700_000,
        call_duration_ms: 4_000,
        loss_pct: 3.0,
        jitter_ms: 3.0,
        seed: 29,
        start_ns: (now_s() - 7200) * 1_000_000_000,
        failures: false,
        kinds: vec![
            monitor::synth::CallKind::Fax,
            monitor::synth::CallKind::Srtp,
            monitor::synth::CallKind::Voice,
        ],
        ..monitor::synth::SynthConfig::default()
    };
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    monitor::synth::generate(&cfg, file).unwrap();
    path
}

/// Reads `input` into the data directory's CDRs and archive; returns `--json`'s lines.
fn capture(data: &Path, input: &Path) -> Vec<Value> {
    capture_as(data, input, true)
}

/// [`capture`], into the archive or not.
fn capture_as(data: &Path, input: &Path, archive: bool) -> Vec<Value> {
    let mut c = Command::new(EXE);
    c.arg("capture").arg("--read").arg(input);
    if archive {
        c.arg("--archive")
            .arg(data.join("archive"))
            .args(["--archive-store", "full"]);
    }
    let out = c
        .args(["--json", "--cdr-db"])
        .arg(data.join("cdr.sqlite3"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tandem capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The start (µs) of the first call of `lines` with this Call-ID.
fn start_of(lines: &[Value], call_id: &str) -> i64 {
    let c = lines
        .iter()
        .find(|l| l["kind"] == "call" && l["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no call {call_id}"));
    utc::parse_us(c["start"].as_str().unwrap()).unwrap()
}

/// Opens the call with this Call-ID from the calls page over `range`.
async fn open_call(b: &Browser, base: &str, call_id: &str, around_us: i64) {
    let t = around_us / 1_000_000;
    b.client
        .goto(&format!(
            "{base}calls?from={}&to={}&call_id={}",
            utc::format_s(t - 3600),
            utc::format_s(t + 3600),
            console::web::url_encode(call_id)
        ))
        .await
        .unwrap();
    let status = search_status(b).await;
    assert!(status.starts_with("1 calls shown"), "{call_id}: {status}");
    b.click(Locator::Css("#calls tbody tr a")).await.unwrap();
    wait_ready(b, "call-page").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fax_srtp_one_ip_and_lone_streams_read_as_what_they_are() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let synth = capture(&data, &synthetic(dir.path()));
    // Three hours ago: a call between two ports of one host, its INVITE resent, and a stream
    // whose SIP the capture never saw. In 2019: an old call, as imported pcaps bring.
    let t0 = (now_s() - 3 * 3600) * 1_000_000;
    let mut p = Pcap::new();
    let (a, b_) = ("10.20.0.1:5060", "10.20.0.1:5062");
    call(
        &mut p,
        t0,
        "one-ip@test",
        a,
        b_,
        "10.20.0.1:40000",
        "10.20.0.1:40002",
        3,
        true,
    );
    p.rtp(
        t0 + 10_000_000,
        "10.30.0.5:16384",
        "10.30.0.6:16386",
        0x5EED_F00D,
        3,
    );
    let hand = dir.path().join("hand.pcap");
    std::fs::write(&hand, &p.bytes).unwrap();
    let hand_lines = capture(&data, &hand);
    let old_t = 1_552_000_000_000_000; // 2019-03-07
    let mut old = Pcap::new();
    call(
        &mut old,
        old_t,
        "old@test",
        "192.0.2.1:5060",
        "192.0.2.2:5060",
        "192.0.2.1:30000",
        "192.0.2.2:30000",
        2,
        false,
    );
    let old_path = dir.path().join("old.pcap");
    std::fs::write(&old_path, &old.bytes).unwrap();
    capture(&data, &old_path);

    add_user(Path::new(EXE), &data, "ops", "admin", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let base = server.base();
    let b = Browser::launch(SIZES[0].0, SIZES[0].1).await.unwrap();
    b.login(&base, "ops", PASSWORD).await.unwrap();

    // 1. Fax calls: marked in the list, and the filter finds exactly them.
    let faxes: Vec<&Value> = synth
        .iter()
        .filter(|l| l["kind"] == "call" && l["fax"] == true)
        .collect();
    assert_eq!(faxes.len(), 2, "calls 0 and 3 send a fax");
    b.client.goto(&format!("{base}calls?fax=1")).await.unwrap();
    let status = search_status(&b).await;
    assert!(status.starts_with("2 calls shown"), "{status}");
    let badges = js(&b, "return [...document.querySelectorAll('#calls tbody tr')].map(tr => tr.querySelector('.badge.fax')?.textContent || '');").await;
    assert_eq!(badges, serde_json::json!(["fax", "fax"]));
    b.client.goto(&format!("{base}calls")).await.unwrap();
    search_status(&b).await;
    let marked = js(
        &b,
        "return document.querySelectorAll('#calls tbody tr .badge.fax').length;",
    )
    .await;
    assert_eq!(marked, 2, "the list marks the fax calls among the others");
    look(&b, "calls").await;

    // 2. A fax call's page: its T.38 flows with their T.30 frames, and "1 page".
    let fax_id = faxes[0]["call_id"].as_str().unwrap();
    open_call(&b, &base, fax_id, start_of(&synth, fax_id)).await;
    let flows: Vec<&Value> = synth
        .iter()
        .filter(|l| l["kind"] == "t38_stream" && l["call_id"] == fax_id)
        .collect();
    assert!(!flows.is_empty());
    let table = js(&b, "return { hidden: document.getElementById('t38-panel').hidden, rows: [...document.querySelectorAll('#t38 tbody tr')].map(tr => ({ src: tr.querySelector('.src').textContent, packets: Number(tr.querySelector('.packets').textContent), t30: tr.querySelector('.t30').textContent })), result: document.getElementById('t38-result').textContent, fields: document.getElementById('call-fields').textContent };").await;
    assert_eq!(table["hidden"], false);
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), flows.len(), "{table}");
    for f in &flows {
        let row = rows
            .iter()
            .find(|r| r["src"] == f["src"])
            .unwrap_or_else(|| panic!("no row for the flow from {}", f["src"]));
        assert_eq!(row["packets"], f["packets"], "{table}");
        let frames: Vec<&str> = f["t30"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert_eq!(row["t30"].as_str().unwrap(), frames.join(" "), "{table}");
    }
    let result = table["result"].as_str().unwrap();
    assert!(result.contains("completed, 1 page confirmed"), "{result}");
    let fields = table["fields"].as_str().unwrap();
    assert!(
        fields.contains("completed, 1 page") && !fields.contains("1 pages"),
        "{fields}"
    );
    look(&b, "call-fax").await;

    // 3. An SRTP call with loss: no second of loss below zero, nothing drawn below a frame,
    // and an axis with a span.
    let srtp = synth
        .iter()
        .find(|l| l["kind"] == "call" && l["encrypted"] == true)
        .expect("call 1 is SRTP");
    let srtp_id = srtp["call_id"].as_str().unwrap();
    open_call(&b, &base, srtp_id, start_of(&synth, srtp_id)).await;
    let uid = js(
        &b,
        "return document.getElementById('call-page').dataset.uid;",
    )
    .await;
    let uid = uid.as_str().unwrap().to_owned();
    let cookie = login_cookie(server.web, "ops", PASSWORD).unwrap();
    let auth = [("Cookie", cookie.as_str())];
    let enc = console::web::url_encode(&uid);
    let (_, _, body) = http(server.web, "GET", &format!("/api/calls/{enc}"), &auth, "").unwrap();
    let view: Value = serde_json::from_str(&body).unwrap();
    let mut lost_seconds = 0;
    for s in view["streams"].as_array().unwrap() {
        for i in s["intervals"].as_array().unwrap() {
            assert!(i["lost"].as_i64().unwrap() >= 0, "{i}");
            lost_seconds += i64::from(i["lost"].as_i64().unwrap() > 0);
        }
    }
    assert!(lost_seconds > 0, "3 % loss shows in some seconds");
    let charts = js(&b, r#"return [...document.querySelectorAll('#stream-charts figure')].map(f => {
        const svg = f.querySelector('svg'); const h = svg.viewBox.baseVal.height;
        const ys = (f.querySelector('path.line')?.getAttribute('d') || '').split(/[ML]/).filter(Boolean).map(p => Number(p.split(',')[1]));
        return { figure: f.dataset.figure, ticks: [...svg.querySelectorAll('.tick-y')].map(t => t.textContent), inside: ys.every(y => y >= 0 && y <= h - 20 + 0.01) };
    });"#).await;
    for c in charts.as_array().unwrap() {
        assert_eq!(c["inside"], true, "{c}");
        let ticks: Vec<&str> = c["ticks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let distinct: std::collections::BTreeSet<&&str> = ticks.iter().collect();
        assert_eq!(distinct.len(), ticks.len(), "an axis reads {ticks:?}: {c}");
    }
    look(&b, "call-srtp-loss").await;
    // SRTP cannot be played: the answer is 422, and no listen is written to the access log.
    let (status, _, body) = http(
        server.web,
        "GET",
        &format!("/api/calls/{enc}/audio/0.wav"),
        &auth,
        "",
    )
    .unwrap();
    assert_eq!(status, 422, "{body}");
    let accounts = console::accounts::Accounts::open(&data.join("console.sqlite3")).unwrap();
    let log = accounts.access_log(50).unwrap();
    assert!(
        !log.iter()
            .any(|a| a.action == "listen" && a.target.starts_with(&uid)),
        "a refused listen was logged as sent: {log:?}"
    );

    // 4. Two ports of one IP: each end its own column, RTP between the columns, the resent
    // INVITE marked.
    open_call(&b, &base, "one-ip@test", t0).await;
    let ladder = js(&b, r#"const xs = [...document.querySelectorAll('#ladder .lifeline')].map(l => Number(l.getAttribute('x1')));
        return { hosts: [...document.querySelectorAll('#ladder text.host')].map(t => t.textContent), lifelines: xs,
          rtp: [...document.querySelectorAll('#ladder g.rtp line.rtp-span')].map(l => [Number(l.getAttribute('x1')), Number(l.getAttribute('x2'))]),
          resent: [...document.querySelectorAll('#ladder g.msg.resent')].map(g => g.dataset.label),
          labels: [...document.querySelectorAll('#ladder g.msg.resent .label')].map(t => t.textContent),
          note: document.getElementById('ladder-note').textContent,
          width: document.querySelector('#ladder svg').viewBox.baseVal.width,
          texts: [...document.querySelectorAll('#ladder svg text')].map(t => { const b = t.getBBox(); return [b.x, b.x + b.width]; }) };"#).await;
    assert_eq!(ladder["hosts"], serde_json::json!([a, b_]), "{ladder}");
    let lifelines: Vec<f64> = ladder["lifelines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(
        lifelines.len(),
        2,
        "no column of its own for the media: {ladder}"
    );
    let rtp = ladder["rtp"].as_array().unwrap();
    assert_eq!(rtp.len(), 2, "{ladder}");
    for span in rtp {
        let (x1, x2) = (span[0].as_f64().unwrap(), span[1].as_f64().unwrap());
        assert!(
            x1 != x2 && lifelines.contains(&x1) && lifelines.contains(&x2),
            "an RTP stub: {ladder}"
        );
    }
    assert_eq!(ladder["resent"], serde_json::json!(["INVITE"]), "{ladder}");
    assert!(ladder["labels"][0].as_str().unwrap().contains("resent"));
    assert!(
        ladder["note"]
            .as_str()
            .unwrap()
            .contains("1 of them resent"),
        "{ladder}"
    );
    let width = ladder["width"].as_f64().unwrap();
    for t in ladder["texts"].as_array().unwrap() {
        let (l, r) = (t[0].as_f64().unwrap(), t[1].as_f64().unwrap());
        assert!(
            l >= -0.5 && r <= width + 0.5,
            "text cut at the edge: {t} in {width}"
        );
    }
    assert!(!page_overflows(&b).await, "the call page scrolls sideways");
    look(&b, "call-one-ip").await;

    // 5. The stream without SIP: found by its SSRC, shown with its figures, its charts over
    // time and its audio from its own archived packets.
    let lone = hand_lines
        .iter()
        .find(|l| l["kind"] == "rtp_stream" && l["call_id"].is_null())
        .expect("the lone stream in --json");
    b.client
        .goto(&format!("{base}streams?ssrc=0x5EEDF00D"))
        .await
        .unwrap();
    let status = search_status(&b).await;
    assert!(
        status.starts_with("1 streams without a call shown"),
        "{status}"
    );
    let cells = js(&b, "return [...document.querySelectorAll('#lone-streams tbody tr td')].map(td => td.textContent);").await;
    assert_eq!(cells[1], lone["src"]);
    assert_eq!(cells[3], "0x5EEDF00D");
    assert_eq!(cells[6].as_str().unwrap(), lone["packets"].to_string());
    look(&b, "streams").await;
    b.click(Locator::Css("#lone-streams tbody tr a"))
        .await
        .unwrap();
    wait_ready(&b, "stream-page").await;
    let title = js(
        &b,
        "return document.getElementById('stream-title').textContent;",
    )
    .await;
    assert!(title.as_str().unwrap().contains("0x5EEDF00D"), "{title}");
    let packets = js(
        &b,
        "return document.querySelector('#streams td.packets').textContent;",
    )
    .await;
    assert_eq!(packets.as_str().unwrap(), lone["packets"].to_string());
    // Its own archived packets: a chart per figure over its seconds, one packets-per-second
    // point for each of them, every point in its frame...
    let charts = eventually(20, "the stream's charts", || async {
        let v = js(&b, r#"return [...document.querySelectorAll('#stream-charts figure')].map(f => {
            const svg = f.querySelector('svg'); const h = svg.viewBox.baseVal.height;
            const ys = (f.querySelector('path.line')?.getAttribute('d') || '').split(/[ML]/).filter(Boolean).map(p => Number(p.split(',')[1]));
            return { figure: f.dataset.figure, points: ys.length, inside: ys.every(y => y >= 0 && y <= h - 20 + 0.01) };
        });"#).await;
        v.as_array().filter(|a| !a.is_empty()).cloned()
    })
    .await;
    let figures: Vec<&str> = charts
        .iter()
        .map(|c| c["figure"].as_str().unwrap())
        .collect();
    assert_eq!(figures, ["Jitter", "Lost packets", "MOS", "Packets"]);
    for c in &charts {
        assert_eq!(
            (c["inside"].as_bool(), c["points"].as_u64()),
            (Some(true), Some(3)),
            "{c}"
        );
    }
    let stream_uid = js(
        &b,
        "return document.getElementById('stream-page').dataset.uid;",
    )
    .await;
    let stream_uid = stream_uid.as_str().unwrap().to_owned();
    // A path segment: its `/` too (a stream's uid ends with `/0`).
    let enc = console::web::url_encode(&stream_uid).replace('/', "%2F");
    let (_, _, body) = http(server.web, "GET", &format!("/api/streams/{enc}"), &auth, "").unwrap();
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["archived"], true, "{view}");
    let per_second: Vec<i64> = view["streams"][0]["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["packets"].as_i64().unwrap())
        .collect();
    assert_eq!(per_second, [50, 50, 50], "{view}");
    // ...its audio offered and played (3 s of PCMA), its pcap downloaded, each written to the
    // access log; a viewer gets neither.
    let played = b
        .play_audio("#streams audio[data-stream='0']")
        .await
        .unwrap();
    assert!((played - 3.0).abs() < 0.05, "the WAV lasts {played} s");
    let pcap = b
        .fetch_bytes("document.getElementById('pcap').href")
        .await
        .unwrap();
    assert_eq!(pcap.len(), 24 + 150 * (16 + 42 + 172), "its 150 packets");
    let accounts = console::accounts::Accounts::open(&data.join("console.sqlite3")).unwrap();
    let log = accounts.access_log(50).unwrap();
    for (action, target) in [
        ("listen", format!("{stream_uid} 0.wav")),
        ("pcap", stream_uid.clone()),
    ] {
        assert!(
            log.iter()
                .any(|a| a.user == "ops" && a.action == action && a.target == target),
            "{action} {target} not in {log:?}"
        );
    }
    add_user(Path::new(EXE), &data, "watcher", "viewer", PASSWORD).unwrap();
    let viewer = login_cookie(server.web, "watcher", PASSWORD).unwrap();
    for url in [
        format!("/api/streams/{enc}/pcap"),
        format!("/api/streams/{enc}/audio/0.wav"),
    ] {
        let (status, _, body) =
            http(server.web, "GET", &url, &[("Cookie", viewer.as_str())], "").unwrap();
        assert_eq!(status, 403, "{url}: {body}");
        let (status, _, _) = http(server.web, "GET", &url, &[], "").unwrap();
        assert_eq!(status, 401, "{url}");
    }
    assert!(
        !page_overflows(&b).await,
        "the stream page scrolls sideways"
    );
    look(&b, "stream").await;
    // Two more: one captured without --archive, one whose archived packets are gone (its
    // minute deleted): each page shows the row's figures and says why there is no more.
    let mut gone = Pcap::new();
    gone.rtp(
        t0 - 3_600_000_000,
        "10.30.0.7:17384",
        "10.30.0.8:17386",
        0x5EED_0001,
        2,
    );
    let gone_path = dir.path().join("gone.pcap");
    std::fs::write(&gone_path, &gone.bytes).unwrap();
    capture(&data, &gone_path);
    let mut plain = Pcap::new();
    plain.rtp(
        t0 - 7_200_000_000,
        "10.30.0.9:18384",
        "10.30.0.10:18386",
        0x5EED_0002,
        2,
    );
    let plain_path = dir.path().join("plain.pcap");
    std::fs::write(&plain_path, &plain.bytes).unwrap();
    capture_as(&data, &plain_path, false);
    for (ssrc, why) in [
        ("0x5EED0001", "cannot be read"),
        ("0x5EED0002", "not archived"),
    ] {
        let (_, _, body) = http(
            server.web,
            "GET",
            &format!("/api/streams?ssrc={ssrc}&from=2026-01-01"),
            &auth,
            "",
        )
        .unwrap();
        let found: Value = serde_json::from_str(&body).unwrap();
        let row = &found["streams"][0];
        if let Some(tar) = row["rtp_tar"].as_str() {
            std::fs::remove_dir_all(Path::new(tar).parent().unwrap()).unwrap();
        }
        let enc = console::web::url_encode(row["uid"].as_str().unwrap()).replace('/', "%2F");
        let (status, _, body) =
            http(server.web, "GET", &format!("/api/streams/{enc}"), &auth, "").unwrap();
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["archived"], false, "{v}");
        assert!(v["note"].as_str().unwrap().contains(why), "{ssrc}: {v}");
        assert_eq!(v["streams"][0]["figures"]["packets"], 100, "{v}");
        let (status, _, body) = http(
            server.web,
            "GET",
            &format!("/api/streams/{enc}/pcap"),
            &auth,
            "",
        )
        .unwrap();
        assert!(status == 404 || status == 503, "{ssrc}: {status} {body}");
    }
    // By address and port too, and not as a call's stream.
    for q in ["ip=10.30.0.6&port=16386", "ip=10.30.0.5", "port=16384"] {
        let (status, _, body) =
            http(server.web, "GET", &format!("/api/streams?{q}"), &auth, "").unwrap();
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["streams"].as_array().unwrap().len(), 1, "{q}: {v}");
    }

    // 6. Over years: the totals' dates carry the year; a lone bucket's MOS is drawn.
    b.client
        .goto(&format!(
            "{base}calls?from=2019-01-01T00:00:00Z&to={}",
            utc::format_s(now_s() + 60)
        ))
        .await
        .unwrap();
    search_status(&b).await;
    let labels = eventually(20, "the totals chart", || async {
        let v = js(&b, "return [...document.querySelectorAll('#totals-chart .tick-x-label')].map(t => t.textContent);").await;
        v.as_array().filter(|a| !a.is_empty()).cloned()
    })
    .await;
    assert!(
        labels[0].as_str().unwrap().starts_with("2019-")
            || labels[0].as_str().unwrap().starts_with("2018-"),
        "{labels:?}"
    );
    let year = utc::format_s(now_s())[..4].to_owned();
    assert!(labels[2].as_str().unwrap().starts_with(&year), "{labels:?}");
    look(&b, "calls-years").await;
    b.client
        .goto(&format!(
            "{base}calls?from=2019-03-01T00:00:00Z&to=2019-03-31T00:00:00Z&call_id=old%40test"
        ))
        .await
        .unwrap();
    search_status(&b).await;
    let dots = eventually(20, "the MOS dot", || async {
        let v = js(
            &b,
            "return document.querySelectorAll('#totals-chart .mos circle').length;",
        )
        .await;
        v.as_u64().filter(|n| *n > 0)
    })
    .await;
    assert_eq!(dots, 1, "one bucket, one MOS dot");

    // A call whose archive was pruned before its CDR (the archive's retention is shorter):
    // the page shows its row and says why there is no ladder.
    let (_, _, body) = http(
        server.web,
        "GET",
        "/api/calls?from=2019-03-01T00:00:00Z&to=2019-03-31T00:00:00Z&call_id=old%40test",
        &auth,
        "",
    )
    .unwrap();
    let found: Value = serde_json::from_str(&body).unwrap();
    let old_call = &found["calls"][0];
    let tar = old_call["sip_tar"].as_str().unwrap();
    std::fs::remove_dir_all(Path::new(tar).parent().unwrap()).unwrap();
    let enc = console::web::url_encode(old_call["uid"].as_str().unwrap()).replace('/', "%2F");
    let (status, _, body) =
        http(server.web, "GET", &format!("/api/calls/{enc}"), &auth, "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["archived"], false, "{v}");
    assert!(
        v["note"].as_str().unwrap().contains("cannot be read"),
        "{v}"
    );
    assert_eq!(v["call"]["call_id"], "old@test", "{v}");
    b.client.goto(&format!("{base}calls/{enc}")).await.unwrap();
    let shown = eventually(20, "the call page's note", || async {
        let t = js(&b, "return document.body.innerText;").await;
        t.as_str()
            .filter(|t| t.contains("cannot be read"))
            .map(str::to_owned)
    })
    .await;
    assert!(shown.contains("old@test"), "{shown}");
    look(&b, "call-pruned").await;

    // 7. Nothing in the range: the page offers the range of the newest call.
    b.client
        .goto(&format!(
            "{base}calls?from=2030-01-01T00:00:00Z&to=2030-01-02T00:00:00Z"
        ))
        .await
        .unwrap();
    let status = search_status(&b).await;
    assert!(status.contains("The newest started at"), "{status}");
    look(&b, "calls-empty-range").await;
    b.click(Locator::Id("newest-range")).await.unwrap();
    let status = search_status(&b).await;
    assert!(
        status.contains("calls shown"),
        "the offered range holds calls: {status}"
    );

    // 8. At 1366 px the tables scroll in their boxes, never the page.
    b.client
        .set_window_size(SIZES[0].0, SIZES[0].1)
        .await
        .unwrap();
    for page in ["registrations", "streams", "calls"] {
        b.client.goto(&format!("{base}{page}")).await.unwrap();
        search_status(&b).await;
        assert!(
            !page_overflows(&b).await,
            "/{page} scrolls sideways at 1366 px"
        );
    }
    b.close().await;
}
