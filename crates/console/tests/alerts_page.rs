//! The Alerts page as an operator meets it: a console on loopback over a real SQLite CDR
//! database seeded through the store's own methods (as an engine stores what it decides), an
//! admin and a viewer signed in, the API over real HTTP, and the page in a real headless
//! Chromium. The rules editor runs against a small real implementation of `AlertRules` that
//! parses the text with the `alerts` crate and keeps what it applied.
//!
//! With `TANDEM_SCREENSHOT_DIR` set, the page and a header with the badge are saved there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench::browser::{Browser, http};
use cdr::{AlertRow, AlertStore, CdrCall, CdrRecord, CdrStore, SilenceRow, SqliteStore};
use console::alert_rules::AlertRules;
use console::calls::{CallsConfig, CdrSource};
use console::{Accounts, Console, Role, WebConfig};
use fantoccini::Locator;
use serde_json::Value;

const PASSWORD: &str = "a long enough secret";

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// Rules as `serve` keeps them, for the test: `tandem.toml`'s text fixed, the console's text
/// checked with the `alerts` crate's parser (and names unique), kept when applied.
struct KeptRules {
    config: String,
    console: Mutex<String>,
}

impl AlertRules for KeptRules {
    fn config_text(&self) -> String {
        self.config.clone()
    }
    fn console_text(&self) -> String {
        self.console.lock().unwrap().clone()
    }
    fn validate(&self, text: &str) -> Result<(), Vec<String>> {
        let cfg = alerts::RulesFile::parse(Path::new("console rules"), text)
            .map_err(|e| vec![e.to_string()])?;
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, r) in cfg.rule.iter().enumerate() {
            if r.name.is_empty() {
                problems.push(format!("[[alerts.rule]] #{}: name: missing", i + 1));
            } else if !seen.insert(r.name.clone()) {
                problems.push(format!("[[alerts.rule]] {}: name: used twice", r.name));
            }
            if r.kind.is_empty() {
                problems.push(format!("[[alerts.rule]] {}: kind: missing", r.name));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
    fn apply(&self, text: &str) -> Result<(), Vec<String>> {
        self.validate(text)?;
        *self.console.lock().unwrap() = text.to_owned();
        Ok(())
    }
}

const CONFIG_RULES: &str = "[[alerts.rule]]\nname = \"premium\"\nkind = \"fraud.destination\"\ngroup_by = \"caller\"\npremium = true\nseverity = \"critical\"\n";

/// An alert row as an engine stores one.
fn alert(rule: &str, kind: &str, severity: &str, key: &str, since_us: i64) -> AlertRow {
    AlertRow {
        fingerprint: format!("{rule}\u{1f}{key}"),
        rule: rule.into(),
        rule_kind: kind.into(),
        severity: severity.into(),
        group_by: "source_ip".into(),
        key: key.into(),
        state: "firing".into(),
        since_us,
        at_us: since_us,
        notified_us: since_us,
        figures_json: r#"{"value":42.0,"threshold":10.0,"unit":"registrations","matched":42,"total":42,"window_s":300}"#.into(),
        calls: vec![format!("{key}|reg|1"), format!("{key}|reg|2")],
        summary: format!("{rule}: 42 failed registrations from {key} in 5 min"),
        node: "pbx1".into(),
        ..AlertRow::default()
    }
}

/// The seeded database: three firing (one critical premium-number alert with calls, two
/// scanners), two resolved; ids in that order.
fn seed(db: &Path) -> Vec<i64> {
    seed_into(&mut SqliteStore::open(db).unwrap())
}

/// The premium alert's three calls, stored as a capture stores them.
fn premium_calls(t: i64) -> Vec<CdrRecord> {
    (0..3)
        .map(|i| {
            let start_us = t + i * 150_000_000;
            CdrRecord {
                uid: PREMIUM_CALLS[i as usize].into(),
                call: Some(CdrCall {
                    call_id: format!("premium-{i}@pbx"),
                    caller: "2001".into(),
                    called: format!("0088213000{i}"),
                    caller_addr: "192.0.2.10:5060".into(),
                    callee_addr: "198.51.100.20:5060".into(),
                    start_us,
                    answer_us: Some(start_us + 4_000_000),
                    end_us: Some(start_us + 64_000_000),
                    state: "answered".into(),
                    last_response: Some(200),
                    ..CdrCall::default()
                }),
                ..CdrRecord::default()
            }
        })
        .collect()
}

const PREMIUM_CALLS: [&str; 3] = [
    "edge1|a84b4c76e66710@pbx|1",
    "edge1|b2@pbx|2",
    "edge1|c3@pbx|3",
];

fn seed_into<S: AlertStore + CdrStore>(s: &mut S) -> Vec<i64> {
    let t = now_us() - 3_600_000_000;
    let mut premium = alert(
        "premium",
        "fraud.destination",
        "critical",
        "2001",
        t + 60_000_000,
    );
    premium.group_by = "caller".into();
    premium.figures_json =
        r#"{"value":3.0,"threshold":1.0,"unit":"calls","matched":3,"total":3,"window_s":600}"#
            .into();
    premium.calls = PREMIUM_CALLS.map(String::from).to_vec();
    s.insert_records(&premium_calls(t + 60_000_000)).unwrap();
    premium.summary = "2001 called +88213 premium numbers 3 times in 10 min".into();
    let mut resolved_a = alert("trunk-503", "sip.response", "warning", "198.51.100.20", t);
    resolved_a.state = "resolved".into();
    resolved_a.resolved_us = Some(t + 900_000_000);
    resolved_a.at_us = t + 900_000_000;
    resolved_a.figures_json =
        r#"{"value":37.5,"threshold":30.0,"unit":"%","matched":15,"total":40,"window_s":600}"#
            .into();
    let mut resolved_b = alert("one-way", "quality.one_way", "info", "", t + 10_000_000);
    resolved_b.group_by = "none".into();
    resolved_b.figures_json =
        r#"{"value":4.0,"threshold":3.0,"unit":"calls","matched":4,"total":61,"window_s":900}"#
            .into();
    resolved_b.summary = "4 answered calls with one-way audio in 15 min".into();
    resolved_b.state = "resolved".into();
    resolved_b.resolved_us = Some(t + 1_200_000_000);
    let rows = [
        resolved_a,
        resolved_b,
        alert(
            "scanner",
            "register.failed",
            "warning",
            "203.0.113.9",
            t + 30_000_000,
        ),
        alert(
            "scanner",
            "register.failed",
            "warning",
            "203.0.113.77",
            t + 45_000_000,
        ),
        premium,
    ];
    rows.iter().map(|r| s.record_alert(r).unwrap()).collect()
}

/// A console on loopback over `cdr` (None: no CDR database), with an admin and a viewer; their
/// session cookies. The console stops when the returned sender is dropped.
struct Running {
    addr: SocketAddr,
    admin: String,
    viewer: String,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
    db: PathBuf,
}

async fn start(with_db: bool, rules: Option<Arc<dyn AlertRules>>) -> Running {
    start_on(with_db.then_some(None), rules).await
}

/// A console over `cdr`: `Some(None)` a SQLite file in its directory, `Some(source)` that
/// database, `None` no CDR database.
async fn start_on(cdr: Option<Option<CdrSource>>, rules: Option<Arc<dyn AlertRules>>) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let accounts = Accounts::open(&console::accounts::accounts_file(&data)).unwrap();
    accounts.add_user("ada", Role::Admin, PASSWORD).unwrap();
    accounts.add_user("vic", Role::Viewer, PASSWORD).unwrap();
    let cookie = |u: &str| {
        let sid = accounts.new_session(u, 3600).unwrap();
        format!("{}={sid}", console::web::SESSION_COOKIE)
    };
    let (admin, viewer) = (cookie("ada"), cookie("vic"));
    let db = dir.path().join("cdr.sqlite3");
    let calls = cdr.map(|c| CallsConfig::new(c.unwrap_or_else(|| CdrSource::Sqlite(db.clone()))));
    let cfg = WebConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..WebConfig::default()
    };
    let mut console = Console::bind(&cfg, &data, None, calls).await.unwrap();
    console.manage_alert_rules(rules);
    let addr = console.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(console.serve(async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        admin,
        viewer,
        _stop: stop,
        _dir: dir,
        db,
    }
}

impl Running {
    async fn as_viewer(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        call(self.addr, method, path, &self.viewer, body).await
    }

    async fn as_admin(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        call(self.addr, method, path, &self.admin, body).await
    }
}

fn kept_rules() -> Arc<KeptRules> {
    Arc::new(KeptRules {
        config: CONFIG_RULES.into(),
        console: Mutex::new(String::new()),
    })
}

/// One request off the runtime's threads: `(status, JSON body)`.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    cookie: &str,
    body: &str,
) -> (u16, Value) {
    let (method, path, cookie, body) = (
        method.to_owned(),
        path.to_owned(),
        cookie.to_owned(),
        body.to_owned(),
    );
    tokio::task::spawn_blocking(move || {
        let (status, _, body) = http(addr, &method, &path, &[("Cookie", &cookie)], &body).unwrap();
        let json = serde_json::from_str(&body).unwrap_or(Value::String(body));
        (status, json)
    })
    .await
    .unwrap()
}

async fn page(addr: SocketAddr, path: &str, cookie: &str) -> String {
    let (path, cookie) = (path.to_owned(), cookie.to_owned());
    tokio::task::spawn_blocking(move || {
        let (status, _, body) = http(addr, "GET", &path, &[("Cookie", &cookie)], "").unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        body
    })
    .await
    .unwrap()
}

fn ids(v: &Value) -> Vec<i64> {
    v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_alerts_newest_first_by_pages_and_shows_one_with_its_calls() {
    let c = start(true, None).await;
    let seeded = seed(&c.db);
    lists_pages_and_shows(&c, &seeded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_the_same_api_lists_acknowledges_and_counts() {
    let pg = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return;
        }
        Err(e) => panic!("PostgreSQL: {e}"),
    };
    let conninfo = pg.conninfo();
    let seeded = {
        let conninfo = conninfo.clone();
        tokio::task::spawn_blocking(move || {
            seed_into(&mut cdr::PgStore::connect(&conninfo).unwrap())
        })
        .await
        .unwrap()
    };
    let c = start_on(Some(Some(CdrSource::Postgres(conninfo))), None).await;
    lists_pages_and_shows(&c, &seeded).await;
    let premium = seeded[4];
    let (status, acked) = c
        .as_viewer("POST", &format!("/api/alerts/{premium}/ack"), "")
        .await;
    assert_eq!(
        (status, acked["alert"]["acked_by"].as_str()),
        (200, Some("vic")),
        "{acked}"
    );
    let dash = page(c.addr, "/dashboard", &c.viewer).await;
    assert!(
        dash.contains("data-firing=\"3\" data-unacked=\"2\""),
        "the badge"
    );
}

/// What both backends answer over the seeded alerts.
async fn lists_pages_and_shows(c: &Running, seeded: &[i64]) {
    let (r_a, r_b, scan_a, scan_b, premium) =
        (seeded[0], seeded[1], seeded[2], seeded[3], seeded[4]);

    let (status, firing) = c.as_viewer("GET", "/api/alerts?state=firing", "").await;
    assert_eq!(status, 200, "{firing}");
    assert_eq!(ids(&firing), [premium, scan_b, scan_a], "newest first");
    assert_eq!(
        (firing["firing"].as_u64(), firing["unacked"].as_u64()),
        (Some(3), Some(3))
    );
    let p = &firing["alerts"][0];
    assert_eq!(p["rule"], "premium");
    assert_eq!(p["severity"], "critical");
    assert_eq!(p["figures"]["unit"], "calls");
    assert_eq!(p["calls_count"], 3);
    assert!(p.get("calls").is_none(), "a list carries counts, not uids");

    // Every state, two a page, through the cursor.
    let (mut pages, mut after) = (Vec::new(), String::new());
    loop {
        let path = format!("/api/alerts?limit=2{after}");
        let (_, page) = c.as_viewer("GET", &path, "").await;
        pages.push(ids(&page));
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => break,
        }
    }
    assert_eq!(pages, [vec![premium, scan_b], vec![scan_a, r_b], vec![r_a]]);
    let (_, by_rule) = c
        .as_viewer("GET", "/api/alerts?rule=scanner&key=203.0.113.9", "")
        .await;
    assert_eq!(ids(&by_rule), [scan_a]);
    let (_, resolved) = c.as_viewer("GET", "/api/alerts?state=resolved", "").await;
    assert_eq!(ids(&resolved), [r_b, r_a]);

    let (status, bad) = c.as_viewer("GET", "/api/alerts?state=open", "").await;
    assert_eq!(status, 400);
    assert!(bad["error"].as_str().unwrap().contains("state="), "{bad}");

    let (status, one) = c
        .as_viewer("GET", &format!("/api/alerts/{premium}"), "")
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["alert"]["calls"][0], "edge1|a84b4c76e66710@pbx|1");
    assert_eq!(one["alert"]["calls"].as_array().unwrap().len(), 3);
    let row = &one["alert"]["call_rows"][2];
    assert_eq!(
        (row["uid"].as_str(), row["called"].as_str()),
        (Some("edge1|c3@pbx|3"), Some("00882130002"))
    );
    let (_, scan) = c
        .as_viewer("GET", &format!("/api/alerts/{}", seeded[2]), "")
        .await;
    assert!(
        scan["alert"]["call_rows"][0].is_null(),
        "a registration's uid is no call"
    );
    let (status, _) = c.as_viewer("GET", "/api/alerts/999999", "").await;
    assert_eq!(status, 404);
    let (status, _) = call(c.addr, "GET", "/api/alerts", "", "").await;
    assert_eq!(status, 401, "signed out: no alerts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_user_acknowledges_an_admin_silences_and_the_badge_counts_what_is_left() {
    let c = start(true, None).await;
    let seeded = seed(&c.db);
    let (scan_a, premium) = (seeded[2], seeded[4]);

    let badge = |html: &str| -> (String, String) {
        let at = html
            .find("id=\"alert-badge\"")
            .expect("a badge in the header");
        let tag = &html[html[..at].rfind('<').unwrap()..];
        let tag = &tag[..tag.find('>').unwrap()];
        let attr = |name: &str| {
            let from = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            tag[from..from + tag[from..].find('"').unwrap()].to_owned()
        };
        (attr("data-firing"), attr("class"))
    };
    let dash = page(c.addr, "/dashboard", &c.viewer).await;
    assert_eq!(badge(&dash), ("3".into(), "alert-badge unacked".into()));

    // A viewer acknowledges; the first acknowledgement stays.
    let (status, acked) = c
        .as_viewer("POST", &format!("/api/alerts/{premium}/ack"), "")
        .await;
    assert_eq!(status, 200, "{acked}");
    assert_eq!(acked["alert"]["acked_by"], "vic");
    assert_eq!(acked["acked_now"], true);
    let (_, again) = c
        .as_admin("POST", &format!("/api/alerts/{premium}/ack"), "")
        .await;
    assert_eq!(
        (
            again["acked_now"].as_bool(),
            again["alert"]["acked_by"].as_str()
        ),
        (Some(false), Some("vic"))
    );
    let (status, _) = c
        .as_admin("GET", &format!("/api/alerts/{premium}/ack"), "")
        .await;
    assert_eq!(status, 405, "no acknowledgement through GET");
    let (_, list) = c.as_viewer("GET", "/api/alerts?state=firing", "").await;
    assert_eq!(list["unacked"], 2);

    // The badge still counts three firing, two of them unacknowledged (the ack forgot the cache).
    let calls = page(c.addr, "/calls", &c.viewer).await;
    assert_eq!(badge(&calls).0, "3");
    assert!(calls.contains("data-unacked=\"2\""));
    for id in [seeded[2], seeded[3]] {
        c.as_viewer("POST", &format!("/api/alerts/{id}/ack"), "")
            .await;
    }
    let alerts = page(c.addr, "/alerts", &c.viewer).await;
    assert_eq!(badge(&alerts), ("3".into(), "alert-badge acked".into()));

    // Silences: an admin's; a viewer is refused, and every error names its field.
    let silence = r#"{"rule":"scanner","key":"203.0.113.*","duration_s":3600,"comment":"pen test until noon"}"#;
    let (status, refused) = c.as_viewer("POST", "/api/silences", silence).await;
    assert_eq!(status, 403, "{refused}");
    for (body, field) in [
        (r#"{"rule":"a b","key":"*","duration_s":3600}"#, "rule"),
        (r#"{"rule":"*","key":"1*2","duration_s":3600}"#, "key"),
        (r#"{"rule":"*","key":"*"}"#, "duration_s"),
        (r#"{"rule":"*","key":"*","ends":"soon"}"#, "ends"),
    ] {
        let (status, e) = c.as_admin("POST", "/api/silences", body).await;
        assert_eq!(
            (status, e["field"].as_str()),
            (400, Some(field)),
            "{body}: {e}"
        );
    }
    let (status, made) = c.as_admin("POST", "/api/silences", silence).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["silence"]["created_by"], "ada");
    let sid = made["silence"]["id"].as_i64().unwrap();
    let (_, running) = c.as_viewer("GET", "/api/silences", "").await;
    assert_eq!(running["silences"][0]["key"], "203.0.113.*");
    assert_eq!(running["silences"][0]["comment"], "pen test until noon");
    let (_, scan) = c
        .as_viewer("GET", &format!("/api/alerts/{scan_a}"), "")
        .await;
    assert_eq!(scan["alert"]["silenced"]["id"], sid, "{scan}");
    let (_, p) = c
        .as_viewer("GET", &format!("/api/alerts/{premium}"), "")
        .await;
    assert!(p["alert"]["silenced"].is_null());

    let (status, _) = c
        .as_viewer("POST", &format!("/api/silences/{sid}/end"), "")
        .await;
    assert_eq!(status, 403);
    let (status, _) = c
        .as_admin("POST", &format!("/api/silences/{sid}/end"), "")
        .await;
    assert_eq!(status, 200);
    let (_, running) = c.as_viewer("GET", "/api/silences", "").await;
    assert_eq!(running["silences"].as_array().unwrap().len(), 0);
    let (status, _) = c
        .as_admin("POST", &format!("/api/silences/{sid}/end"), "")
        .await;
    assert_eq!(status, 404, "ended already");

    // The silence is in the store, with who made it, for whatever notifies.
    let mut s = SqliteStore::open(&c.db).unwrap();
    let all: Vec<SilenceRow> = s.silences(None).unwrap();
    assert_eq!(all[0].created_by, "ada");
    assert!(all[0].ends_us <= now_us());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_are_an_admins_to_edit_and_a_refused_text_changes_nothing() {
    let rules = kept_rules();
    let c = start(true, Some(rules.clone())).await;

    let (status, _) = c.as_viewer("GET", "/api/alerts/rules", "").await;
    assert_eq!(status, 403);
    let good = "[[alerts.rule]]\nname = \"scanner\"\nkind = \"register.failed\"\ngroup_by = \"source_ip\"\nthreshold = 20\nwindow_s = 60\n";
    let (status, _) = c.as_viewer("PUT", "/api/alerts/rules", good).await;
    assert_eq!(status, 403);
    assert_eq!(rules.console_text(), "");

    // A viewer's page has neither the rules nor the silence form; an admin's has both.
    let viewer_page = page(c.addr, "/alerts", &c.viewer).await;
    assert!(!viewer_page.contains("rules-panel") && !viewer_page.contains("silence-form"));
    let admin_page = page(c.addr, "/alerts", &c.admin).await;
    assert!(admin_page.contains("rules-panel") && admin_page.contains("silence-form"));

    let (status, shown) = c.as_admin("GET", "/api/alerts/rules", "").await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["enabled"], true);
    assert_eq!(shown["config_text"], CONFIG_RULES);

    let bad = "[[alerts.rule]]\nname = \"x\"\nkind = \"sip.response\"\ncolour = \"red\"\n";
    let (status, refused) = c.as_admin("PUT", "/api/alerts/rules", bad).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["errors"][0].as_str().unwrap().contains("colour"),
        "{refused}"
    );
    let twice = format!("{good}{good}");
    let (status, refused) = c.as_admin("POST", "/api/alerts/rules/check", &twice).await;
    assert_eq!(status, 422);
    assert!(
        refused["errors"][0]
            .as_str()
            .unwrap()
            .contains("used twice")
    );
    assert_eq!(rules.console_text(), "", "nothing applied");

    let (status, checked) = c.as_admin("POST", "/api/alerts/rules/check", good).await;
    assert_eq!((status, checked["saved"].as_bool()), (200, Some(false)));
    assert_eq!(rules.console_text(), "", "a check applies nothing");
    let (status, saved) = c.as_admin("PUT", "/api/alerts/rules", good).await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(rules.console_text(), good);
    let (_, shown) = c.as_admin("GET", "/api/alerts/rules", "").await;
    assert_eq!(shown["console_text"], good);

    // A text over 256 KiB is refused before it reaches the rules.
    let huge = format!("{good}#{}\n", "x".repeat(256 << 10));
    let (status, _) = c.as_admin("PUT", "/api/alerts/rules", &huge).await;
    assert!(status == 413 || status == 422, "{status}");
    assert_eq!(rules.console_text(), good);

    // A change from another site is refused whatever its cookie.
    let (addr, cookie) = (c.addr, c.admin.clone());
    let status = tokio::task::spawn_blocking(move || {
        http(
            addr,
            "PUT",
            "/api/alerts/rules",
            &[("Cookie", &cookie), ("Origin", "https://evil.example")],
            "",
        )
        .unwrap()
        .0
    })
    .await
    .unwrap();
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cdr_database_there_is_no_badge_and_an_empty_one_reads_as_none_firing() {
    let none = start(false, None).await;
    let dash = page(none.addr, "/dashboard", &none.viewer).await;
    assert!(dash.contains("id=\"nav-alerts\"") && !dash.contains("id=\"alert-badge\""));
    let (status, v) = none.as_viewer("GET", "/api/alerts", "").await;
    assert_eq!(status, 503, "{v}");
    let (_, rules) = none.as_admin("GET", "/api/alerts/rules", "").await;
    assert_eq!(rules["enabled"], false);

    // Configured, not created yet: nothing firing, and how alerts come to be here.
    let empty = start(true, None).await;
    let (status, v) = empty.as_viewer("GET", "/api/alerts", "").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["alerts"].as_array().unwrap().len(), 0);
    assert!(v["hint"].as_str().unwrap().contains("[[alerts.rule]]"));
    let dash = page(empty.addr, "/dashboard", &empty.viewer).await;
    assert!(dash.contains("data-firing=\"0\""));
}

/// Saves the window as `name` when `TANDEM_SCREENSHOT_DIR` is set.
async fn look(b: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("TANDEM_SCREENSHOT_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    b.screenshot(&dir.join(name)).await.unwrap();
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
async fn the_alerts_page_in_a_browser_shows_firing_rows_the_badge_and_acknowledges() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let rules = kept_rules();
    *rules.console.lock().unwrap() = "[[alerts.rule]]\nname = \"scanner\"\nkind = \"register.failed\"\ngroup_by = \"source_ip\"\nthreshold = 20\nwindow_s = 60\nactions = [\"ops-mail\"]\n".into();
    let c = start(true, Some(rules.clone())).await;
    let seeded = seed(&c.db);
    let premium = seeded[4];
    {
        let mut s = SqliteStore::open(&c.db).unwrap();
        s.add_silence(&SilenceRow {
            rule: "scanner".into(),
            key: "203.0.113.77".into(),
            starts_us: now_us(),
            ends_us: now_us() + 4 * 3_600_000_000,
            created_by: "ada".into(),
            comment: "our own scanner, during the audit".into(),
            created_us: now_us(),
            ..SilenceRow::default()
        })
        .unwrap();
    }
    let base = format!("http://{}/", c.addr);
    let b = Browser::launch_in_zone(1366, 1100, Some("Asia/Kolkata"))
        .await
        .unwrap();
    let url = b.login(&base, "ada", PASSWORD).await.unwrap();
    assert!(!url.contains("/login"), "{url}");
    b.client.goto(&format!("{base}alerts")).await.unwrap();
    wait_for(&b, "#alerts-page[data-firing-ready='1']").await;

    let row = wait_for(&b, &format!("#firing tr[data-id='{premium}']")).await;
    let text = row.text().await.unwrap();
    assert!(
        text.contains("premium") && text.contains("critical") && text.contains("2001"),
        "{text}"
    );
    assert!(text.contains("3 calls vs 1 over 10 min"), "{text}");
    let since = row
        .find(Locator::Css("time"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let want = utc_plus_0530(now_us() - 3_600_000_000 + 60_000_000);
    assert_eq!(&since[..13], &want[..13], "since, in the browser's zone");
    assert_eq!(b.text(Locator::Id("alert-badge")).await.unwrap(), "3");
    let class = b
        .client
        .find(Locator::Id("alert-badge"))
        .await
        .unwrap()
        .attr("class")
        .await
        .unwrap();
    assert_eq!(class.as_deref(), Some("alert-badge unacked"));
    let silenced = b
        .text(Locator::Css("#firing tr[data-key='203.0.113.77'] .ack"))
        .await
        .unwrap();
    assert!(silenced.contains("silenced until"), "{silenced}");
    wait_for(&b, "#silences tbody tr").await;
    wait_for(&b, "#history tbody tr").await;
    wait_for(&b, "#rules-body:not([hidden])").await;
    let config = b.text(Locator::Id("rules-config")).await.unwrap();
    assert!(config.contains("fraud.destination"), "{config}");
    look(&b, "console-alerts.png").await;

    // One alert, its calls each a link to the call's page.
    b.click(Locator::Css(&format!(
        "#firing tr[data-id='{premium}'] td.rule a"
    )))
    .await
    .unwrap();
    let link = wait_for(&b, "#detail-calls li a").await;
    assert_eq!(
        link.attr("href").await.unwrap().as_deref(),
        Some("/calls/edge1%7Ca84b4c76e66710%40pbx%7C1")
    );
    let text = link.text().await.unwrap();
    assert!(text.ends_with("2001 → 00882130000"), "{text}");
    look(&b, "console-alerts-detail.png").await;

    // A rule with a problem is refused beside the editor.
    let editor = b.client.find(Locator::Id("rules-text")).await.unwrap();
    editor
        .send_keys("\n[[alerts.rule]]\nname = \"scanner\"\nkind = \"register.failed\"\n")
        .await
        .unwrap();
    b.click(Locator::Id("rules-save")).await.unwrap();
    let problem = wait_for(&b, "#rules-errors li").await.text().await.unwrap();
    assert!(problem.contains("used twice"), "{problem}");
    b.client
        .execute(
            "document.getElementById('rules-panel').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    look(&b, "console-alerts-rules.png").await;

    // Acknowledged from the page: the row says by whom, the badge counts one fewer.
    b.click(Locator::Id(&format!("ack-{premium}")))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ack = b
            .text(Locator::Css(&format!(
                "#firing tr[data-id='{premium}'] td.ack"
            )))
            .await
            .unwrap_or_default();
        if ack.contains("ada") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the acknowledgement never showed: {ack}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unacked = b
        .client
        .find(Locator::Id("alert-badge"))
        .await
        .unwrap()
        .attr("data-unacked")
        .await
        .unwrap();
    assert_eq!(unacked.as_deref(), Some("2"));
    let stored = SqliteStore::open(&c.db)
        .unwrap()
        .alert(premium)
        .unwrap()
        .unwrap();
    assert_eq!(stored.acked_by.as_deref(), Some("ada"));

    // The header of any page: the badge, linked to the Alerts page.
    b.client.goto(&format!("{base}calls")).await.unwrap();
    let nav = wait_for(&b, "#nav-alerts").await;
    assert_eq!(nav.attr("href").await.unwrap().as_deref(), Some("/alerts"));
    assert_eq!(b.text(Locator::Id("alert-badge")).await.unwrap(), "3");
    b.client.set_window_size(1366, 300).await.unwrap();
    look(&b, "console-alerts-badge.png").await;
    b.close().await;
}

/// `YYYY-MM-DD HH:MM:SS` at +05:30 (the browser's zone in the test).
fn utc_plus_0530(us: i64) -> String {
    let s = utc::format_s(us / 1_000_000 + 5 * 3600 + 1800);
    s.trim_end_matches('Z').replacen('T', " ", 1)
}
