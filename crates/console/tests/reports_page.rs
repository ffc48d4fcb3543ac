//! The Reports page and `/api/reports` as an operator meets them: a console on loopback over a
//! real SQLite CDR database whose calls (`cdr::seed`'s, a few sites and carriers over eight
//! days) were stored through the store with three groups configured, so that the rollups were
//! kept as they are in production. The API over real HTTP (JSON, CSV, JSON lines, every bad
//! parameter named), the page in a real headless Chromium, and an install without calls.
//!
//! With `TANDEM_SCREENSHOT_DIR` set, the page is saved there as `reports.png`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::browser::{Browser, http};
use cdr::{CdrStore, SqliteStore};
use console::calls::{CallsConfig, CdrSource};
use console::reports::{PeriodKind, ReportQuery, ReportsConfig};
use console::{Accounts, Console, Role, WebConfig};
use fantoccini::Locator;
use serde_json::Value;

const PASSWORD: &str = "a long enough secret";
const DAY_S: i64 = 86_400;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The groups: two carriers by their trunks' addresses, a site by its DIDs.
fn group_configs() -> Vec<groups::GroupConfig> {
    let g = |name: &str, addresses: &[&str], numbers: &[&str]| groups::GroupConfig {
        name: name.into(),
        addresses: addresses.iter().map(|s| s.to_string()).collect(),
        numbers: numbers.iter().map(|s| s.to_string()).collect(),
    };
    vec![
        g("carrier-a", &["203.0.113.10", "203.0.113.11"], &[]),
        g("carrier-b", &["198.51.100.0/24"], &[]),
        g("berlin", &[], &["+4930123456"]),
    ]
}

/// Stores `n` synthetic calls over the last eight days, through the store with the groups set.
fn seed(db: &Path, n: u64) {
    let mut s = SqliteStore::open(db).unwrap();
    s.set_groups(Arc::new(groups::Groups::new(&group_configs()).unwrap()));
    seed_into(&mut s, n);
}

fn seed_into(s: &mut dyn CdrStore, n: u64) {
    let to_us = now_s() * 1_000_000;
    let from_us = to_us - 8 * DAY_S * 1_000_000;
    let records: Vec<cdr::CdrRecord> = cdr::seed::synthetic_calls(n, from_us, to_us, 7).collect();
    for chunk in records.chunks(500) {
        s.insert_records(chunk).unwrap();
    }
}

struct Running {
    addr: SocketAddr,
    cookie: String,
    db: PathBuf,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

/// A console over a SQLite CDR file in its directory (not created yet), with the groups, and
/// a viewer signed in.
async fn start(groups: Vec<String>) -> Running {
    start_on(groups, None).await
}

/// The same over `source` (`None`: the SQLite file).
async fn start_on(groups: Vec<String>, source: Option<CdrSource>) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let accounts = Accounts::open(&console::accounts::accounts_file(&data)).unwrap();
    accounts.add_user("vic", Role::Viewer, PASSWORD).unwrap();
    let sid = accounts.new_session("vic", 3600).unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let cfg = WebConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..WebConfig::default()
    };
    let calls = CallsConfig::new(source.unwrap_or_else(|| CdrSource::Sqlite(db.clone())));
    let mut console = Console::bind(&cfg, &data, None, Some(calls)).await.unwrap();
    console.show_reports(Some(ReportsConfig { groups }));
    let addr = console.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(console.serve(async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        cookie: format!("{}={sid}", console::web::SESSION_COOKIE),
        db,
        _stop: stop,
        _dir: dir,
    }
}

/// One GET over real HTTP, off the runtime's threads: `(status, headers, body)`.
async fn get(c: &Running, path: &str) -> (u16, String, String) {
    let (addr, path, cookie) = (c.addr, path.to_owned(), c.cookie.clone());
    tokio::task::spawn_blocking(move || {
        http(addr, "GET", &path, &[("Cookie", &cookie)], "").unwrap()
    })
    .await
    .unwrap()
}

fn names() -> Vec<String> {
    group_configs().into_iter().map(|g| g.name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_each_group_as_json_csv_and_json_lines_and_names_bad_parameters() {
    let c = start(names()).await;
    seed(&c.db, 3_000);
    let db = c.db.clone();
    api_answers(&c, move || Box::new(SqliteStore::open(&db).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_the_api_answers_the_same() {
    let pg = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return;
        }
        Err(e) => panic!("PostgreSQL: {e}"),
    };
    let conninfo = pg.conninfo();
    {
        let conninfo = conninfo.clone();
        tokio::task::spawn_blocking(move || {
            let mut s = cdr::PgStore::connect(&conninfo).unwrap();
            s.set_groups(Arc::new(groups::Groups::new(&group_configs()).unwrap()));
            seed_into(&mut s, 3_000);
        })
        .await
        .unwrap();
    }
    let c = start_on(names(), Some(CdrSource::Postgres(conninfo.clone()))).await;
    api_answers(&c, move || {
        Box::new(cdr::PgStore::connect(&conninfo).unwrap())
    })
    .await;
}

/// The API of a console whose database holds the seeded calls, against `open`'s store.
async fn api_answers(c: &Running, open: impl FnOnce() -> Box<dyn CdrStore> + Send + 'static) {
    let day = |t: i64| utc::format_s(t)[..10].to_owned();
    let (from, to) = (day(now_s() - 7 * DAY_S), day(now_s() + DAY_S));
    let q = format!("/api/reports?group=carrier-a&period=day&from={from}&to={to}");

    let (status, _, body) = get(c, &q).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["group"], "carrier-a");
    assert_eq!(v["period"], "day");
    assert_eq!(
        v["groups"],
        serde_json::json!(["all", "carrier-a", "carrier-b", "berlin"])
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        8,
        "one row per day of the range, with calls or not"
    );
    assert!(v.get("hint").is_none(), "{v}");
    // The figures are the store's own report of the same query.
    let direct = {
        let q = ReportQuery {
            group: "carrier-a".into(),
            period: PeriodKind::Day,
            from_us: utc::parse_s(&from).unwrap() * 1_000_000,
            to_us: utc::parse_s(&to).unwrap() * 1_000_000,
        };
        tokio::task::spawn_blocking(move || open().report(&q).unwrap())
            .await
            .unwrap()
    };
    assert!(
        direct.total.calls > 100,
        "the carrier has calls: {}",
        direct.total.calls
    );
    for (row, want) in rows.iter().zip(&direct.rows) {
        assert_eq!(row["group"], "carrier-a");
        assert_eq!(row["label"], want.label.as_str());
        assert_eq!(row["calls"], want.calls);
        assert_eq!(row["answered"], want.answered);
        assert_eq!(row["asr_pct"].as_f64(), want.asr_pct);
        assert_eq!(row["pdd_p95_ms"].as_f64(), want.pdd_p95_ms);
        assert_eq!(row["peak_concurrent"], want.peak_concurrent);
    }
    assert_eq!(v["total"]["calls"], direct.total.calls);

    // CSV: a header line of the documented columns, then the same rows.
    let (status, headers, csv) = get(c, &format!("{q}&format=csv")).await;
    assert_eq!(status, 200, "{csv}");
    let headers = headers.to_ascii_lowercase();
    assert!(headers.contains("content-type: text/csv"), "{headers}");
    assert!(
        headers.contains(&format!(
            "filename=\"tandem-report-carrier-a-day-{from}.csv\""
        )),
        "{headers}"
    );
    let lines: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], console::reports::columns().join(","));
    assert_eq!(lines.len(), 1 + 8);
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for (line, want) in lines[1..].iter().zip(&direct.rows) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[col("group")], "carrier-a");
        assert_eq!(f[col("period")], want.label);
        assert_eq!(f[col("calls")], want.calls.to_string());
        assert_eq!(f[col("answered")], want.answered.to_string());
        let asr: Option<f64> = f[col("asr_pct")].parse().ok();
        match (asr, want.asr_pct) {
            (Some(a), Some(w)) => assert!((a - w).abs() <= 0.005, "{a} vs {w}"),
            (a, w) => assert_eq!(a, w),
        }
    }

    // JSON lines: one object per row, the group on each.
    let (status, headers, jsonl) = get(c, &format!("{q}&format=jsonl")).await;
    assert_eq!(status, 200);
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("application/x-ndjson")
    );
    let objects: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), 8);
    assert_eq!(&objects[3], &rows[3]);

    // Every bad parameter is named, with 400; a group not configured lists those that are.
    for (bad, named) in [
        ("group=nobody", "group=\"nobody\""),
        ("period=month", "period="),
        ("from=last-week", "from="),
        ("format=xlsx", "format="),
        ("period=hour&from=2025-01-01&to=2025-12-31", "at most 1000"),
        ("limit=5", "limit: not a report parameter"),
    ] {
        let (status, _, body) = get(c, &format!("/api/reports?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        let msg = e["error"].as_str().unwrap();
        assert!(msg.contains(named), "{bad}: {msg}");
    }
    let (_, _, body) = get(c, "/api/reports?group=nobody").await;
    assert!(body.contains("all, carrier-a, carrier-b, berlin"), "{body}");

    // Without a login: 401, no figures.
    let addr = c.addr;
    let (status, _, _) =
        tokio::task::spawn_blocking(move || http(addr, "GET", "/api/reports", &[], "").unwrap())
            .await
            .unwrap();
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_without_calls_or_groups_says_how_reports_come_to_be() {
    let c = start(Vec::new()).await;
    let (status, _, body) = get(&c, "/api/reports").await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["group"], "all");
    assert_eq!(v["groups"], serde_json::json!(["all"]));
    let hint = v["hint"].as_str().unwrap();
    assert!(
        hint.contains("tandem capture") && hint.contains("[[groups]]"),
        "{hint}"
    );
    let (status, _, csv) = get(&c, "/api/reports?format=csv").await;
    assert_eq!(status, 200);
    assert_eq!(
        csv,
        format!("{}\r\n", console::reports::columns().join(","))
    );

    let (status, _, page) = get(&c, "/reports").await;
    assert_eq!(status, 200);
    assert!(page.contains("id=\"report-empty\""), "no calls yet");
    assert!(page.contains("id=\"groups-example\"") && page.contains("[[groups]]"));
    assert!(
        !page.contains("class=\"error\""),
        "an empty install is not an error"
    );
    assert!(
        page.contains("href=\"/reports\" class=\"active\""),
        "the navigation's link"
    );
    // A bad parameter on the page: the default report, with the error above it.
    let (status, _, page) = get(&c, "/reports?period=fortnight").await;
    assert_eq!(status, 200);
    let error = &page[page.find("id=\"report-error\"").expect("the error shown")..];
    assert!(
        error.contains("fortnight") && error.contains(": hour, day or week"),
        "{error}"
    );
    assert!(
        page.contains("id=\"report-empty\""),
        "and the default report"
    );
}

async fn wait_for(b: &Browser, css: &str) -> fantoccini::elements::Element {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(e) = b.client.find(Locator::Css(css)).await {
            return e;
        }
        assert!(Instant::now() < deadline, "{css} never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reports_page_in_a_browser_draws_charts_and_the_table_and_picks_groups() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let c = start(names()).await;
    seed(&c.db, 3_000);
    let base = format!("http://{}/", c.addr);
    let b = Browser::launch(1366, 1280).await.unwrap();
    let url = b.login(&base, "vic", PASSWORD).await.unwrap();
    assert!(!url.contains("/login"), "{url}");
    // The navigation leads there.
    b.client.goto(&format!("{base}dashboard")).await.unwrap();
    b.click(Locator::Css("nav.pages a[href='/reports']"))
        .await
        .unwrap();
    wait_for(&b, "#panel-report[data-group='all']").await;

    // The group picker: carrier-a's report, per day.
    b.click(Locator::Css("#groups a[data-group='carrier-a']"))
        .await
        .unwrap();
    wait_for(&b, "#panel-report[data-group='carrier-a']").await;
    for chart in ["calls", "asr", "pdd", "mos", "loss", "jitter"] {
        let svg = wait_for(
            &b,
            &format!("figure[data-chart='report-{chart}'] svg.chart"),
        )
        .await;
        let lines = svg.find_all(Locator::Css("path.line")).await.unwrap();
        assert!(!lines.is_empty(), "{chart}: a line drawn");
    }
    let summary = b.text(Locator::Id("report-summary")).await.unwrap();
    assert!(
        summary.contains("calls") && summary.contains("ASR"),
        "{summary}"
    );
    let rows = b
        .client
        .find_all(Locator::Css("#report-rows tbody tr"))
        .await
        .unwrap();
    assert!(rows.len() >= 7, "a row per day with calls: {}", rows.len());
    let first = rows[0].text().await.unwrap();
    assert!(first.contains('%'), "{first}");
    // The CSV link is the API's, for the same group and range.
    let href = b
        .client
        .find(Locator::Id("csv"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    assert!(
        href.starts_with("/api/reports?group=carrier-a&period=day&from=")
            && href.ends_with("&format=csv"),
        "{href}"
    );
    let csv = b.fetch_bytes(&format!("'{href}'")).await.unwrap();
    assert!(
        String::from_utf8(csv)
            .unwrap()
            .starts_with("group,period,start,calls,")
    );
    if let Some(dir) = std::env::var_os("TANDEM_SCREENSHOT_DIR") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        b.screenshot(&dir.join("reports.png")).await.unwrap();
    }

    // A range from the form keeps the group and the period (the script sends seconds).
    b.client
        .goto(&format!("{base}reports?group=carrier-a&period=day"))
        .await
        .unwrap();
    wait_for(&b, "#panel-report[data-group='carrier-a']").await;
    b.click(Locator::Css("#absolute button[type='submit']"))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let url = b.client.current_url().await.unwrap().to_string();
        if url.contains("&from=") && !url.contains("T00") {
            assert!(
                url.contains("/reports?group=carrier-a&period=day&from="),
                "{url}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the form did not go: {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(&b, "#panel-report[data-group='carrier-a']").await;

    // Per hour: the period picker keeps the group.
    b.click(Locator::Css("#periods a[data-period='hour']"))
        .await
        .unwrap();
    wait_for(&b, "#periods a.active[data-period='hour']").await;
    wait_for(&b, "#panel-report[data-group='carrier-a']").await;
    let n = b
        .client
        .find_all(Locator::Css("#report-rows tbody tr"))
        .await
        .unwrap()
        .len();
    assert!(n > 0, "hours with calls");
    b.close().await;
}
