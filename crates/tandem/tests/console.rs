//! The web console as a person and a script meet it: a real `tandem serve`, a real headless
//! Chromium through chromedriver, a seeded metrics history on disk.

use bench::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use fantoccini::Locator;
use std::path::Path;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// An hour of `host_load15` ten-second samples, from three hours ago to two, with a value
/// that says its own time: `1 + (i % 12) / 4` for the i-th sample. Returns the window.
fn seed_load(data_dir: &Path) -> (i64, i64, Vec<(i64, f64)>) {
    std::fs::create_dir_all(data_dir).unwrap();
    let cfg = history::HistoryConfig::with_retention(10, 48, 30, 730).unwrap();
    let mut h = history::History::open(&data_dir.join("history.sqlite3"), cfg).unwrap();
    let start = history::bucket_start(now_s() - 3 * 3600, 3600);
    let mut seeded = Vec::new();
    for i in 0..360 {
        let t = start + i * 10;
        let v = 1.0 + (i % 12) as f64 / 4.0;
        h.record(t, &[("host_load15", v)]).unwrap();
        seeded.push((t, v));
    }
    (start, start + 3600, seeded)
}

/// The points of one series as drawn: its line's vertices mapped back through the chart's
/// geometry to (time, value).
async fn drawn_points(b: &Browser, chart: &str, series: &str) -> Vec<(f64, f64)> {
    let svg = b
        .client
        .find(Locator::Css(&format!("svg#{chart}")))
        .await
        .unwrap();
    let attr = |name: &'static str| {
        let svg = svg.clone();
        async move {
            svg.attr(name)
                .await
                .unwrap()
                .unwrap()
                .parse::<f64>()
                .unwrap()
        }
    };
    let (from, to) = (attr("data-from").await, attr("data-to").await);
    let (x0, x1) = (attr("data-x0").await, attr("data-x1").await);
    let (y0, y1, ymax) = (
        attr("data-y0").await,
        attr("data-y1").await,
        attr("data-ymax").await,
    );
    let d = b
        .client
        .find(Locator::Css(&format!(
            "svg#{chart} g.series[data-name=\"{series}\"] path.line"
        )))
        .await
        .unwrap()
        .attr("d")
        .await
        .unwrap()
        .unwrap();
    d.split(['M', 'L'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            let t = from + (x - x0) / (x1 - x0) * (to - from);
            let v = (y0 - y) / (y0 - y1) * ymax;
            (t, v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_picks_ranges_zooms_and_sees_the_seeded_points() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (from, to, seeded) = seed_load(&data);
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let base = server.base();
    let b = Browser::launch(1280, 1000).await.unwrap();

    // Not signed in: the dashboard sends to the login page.
    b.client.goto(&format!("{base}dashboard")).await.unwrap();
    let url = b.client.current_url().await.unwrap();
    assert_eq!(url.path(), "/login", "{url}");

    // A wrong password is refused, with a message.
    let after = b.login(&base, "ops", "not the password").await.unwrap();
    assert!(after.contains("/login"), "{after}");
    let msg = b.text(Locator::Id("login-error")).await.unwrap();
    assert!(msg.contains("Wrong user name or password"), "{msg}");

    // The right one opens the dashboard, on the last hour.
    let after = b.login(&base, "ops", PASSWORD).await.unwrap();
    assert!(after.ends_with("/dashboard"), "{after}");
    for panel in ["host", "calls", "agi", "store", "capture", "cdr"] {
        b.client
            .find(Locator::Id(&format!("panel-{panel}")))
            .await
            .unwrap_or_else(|_| panic!("no {panel} panel"));
    }
    // The browser's time zone is named.
    let tz = b.text(Locator::Id("tz")).await.unwrap();
    assert!(!tz.is_empty());

    // Switching ranges.
    b.click(Locator::Css("a[data-range='24h']")).await.unwrap();
    let url = b.client.current_url().await.unwrap();
    assert!(url.as_str().contains("range=24h"), "{url}");
    let active = b.text(Locator::Css(".ranges a.active")).await.unwrap();
    assert_eq!(active, "24h");

    // The seeded hour: every drawn point is a seeded sample, at its time and value.
    b.client
        .goto(&format!("{base}dashboard?from={from}&to={to}"))
        .await
        .unwrap();
    let drawn = drawn_points(&b, "load", "host_load15").await;
    assert_eq!(drawn.len(), seeded.len(), "one point per raw bucket");
    for ((t, v), (st, sv)) in drawn.iter().zip(&seeded) {
        // Points sit at the middle of their ten-second bucket.
        assert!((t - (*st as f64 + 5.0)).abs() < 1.0, "time {t} vs {st}");
        assert!((v - sv).abs() < 0.01, "value {v} vs {sv} at {st}");
    }

    // Drag across the second quarter of the chart: the page shows that quarter.
    let svg = b.client.find(Locator::Css("svg#load")).await.unwrap();
    let rect = svg.rectangle().await.unwrap();
    let (x0, x1) = (56.0 / 640.0 * rect.2, (640.0 - 8.0) / 640.0 * rect.2);
    let at = |share: f64| (x0 + share * (x1 - x0) - rect.2 / 2.0).round();
    use fantoccini::actions::{InputSource, MouseActions, PointerAction};
    let drag = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: svg.clone(),
            duration: None,
            x: at(0.25),
            y: 0.0,
        })
        .then(PointerAction::Down { button: 0 })
        .then(PointerAction::MoveToElement {
            element: svg.clone(),
            duration: Some(std::time::Duration::from_millis(100)),
            x: at(0.5),
            y: 0.0,
        })
        .then(PointerAction::Up { button: 0 });
    b.client.perform_actions(drag).await.unwrap();
    let mut zoomed = None;
    for _ in 0..100 {
        let url = b.client.current_url().await.unwrap();
        let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        if let (Some(f), Some(t)) = (q.get("from"), q.get("to")) {
            let (f, t): (i64, i64) = (f.parse().unwrap(), t.parse().unwrap());
            if (f, t) != (from, to) {
                zoomed = Some((f, t));
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (zf, zt) = zoomed.expect("the drag zoomed in");
    let quarter = (to - from) / 4;
    assert!((zf - (from + quarter)).abs() <= 30, "zoomed from {zf}");
    assert!((zt - (from + 2 * quarter)).abs() <= 30, "zoomed to {zt}");
    let drawn = drawn_points(&b, "load", "host_load15").await;
    assert!(
        (85..=95).contains(&drawn.len()),
        "a quarter of the hour: {} points",
        drawn.len()
    );

    // Zoom out doubles the span around the middle.
    b.click(Locator::Id("zoom-out")).await.unwrap();
    let url = b.client.current_url().await.unwrap();
    let q: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
    let span: i64 = q["to"].parse::<i64>().unwrap() - q["from"].parse::<i64>().unwrap();
    assert_eq!(span, 2 * (zt - zf));

    // Signing out ends the session.
    b.click(Locator::Id("logout")).await.unwrap();
    b.client.goto(&format!("{base}dashboard")).await.unwrap();
    assert_eq!(b.client.current_url().await.unwrap().path(), "/login");
    b.close().await;
}

#[test]
fn without_a_session_or_a_token_no_page_and_no_data_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    seed_load(&data);
    add_user(Path::new(EXE), &data, "ops", "admin", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let addr = server.web;
    for path in ["/", "/dashboard", "/dashboard?range=1y", "/no-such-page"] {
        let (status, head, _) = http(addr, "GET", path, &[], "").unwrap();
        assert_eq!(status, 303, "{path}: {head}");
        assert!(head.contains("location: /login?next="), "{path}: {head}");
    }
    for path in [
        "/api/series?name=host_load15",
        "/api/series-names",
        "/api/whoami",
    ] {
        let (status, _, body) = http(addr, "GET", path, &[], "").unwrap();
        assert_eq!(status, 401, "{path}");
        assert!(!body.contains("host_load15"), "{path}: {body}");
    }
    // A forged or stale cookie is no better.
    let forged = format!("tandem_session={}", "0".repeat(64));
    let (status, _, _) =
        http(addr, "GET", "/api/series-names", &[("Cookie", &forged)], "").unwrap();
    assert_eq!(status, 401);
    // Logout is a POST: a GET changes nothing and shows nothing.
    let cookie = login_cookie(addr, "ops", PASSWORD).unwrap();
    let (status, _, _) = http(addr, "GET", "/logout", &[("Cookie", &cookie)], "").unwrap();
    assert_ne!(status, 303);
    let (status, _, body) = http(addr, "GET", "/api/whoami", &[("Cookie", &cookie)], "").unwrap();
    assert_eq!(status, 200, "{body}");
    // A POST from another site is refused.
    let (status, _, _) = http(
        addr,
        "POST",
        "/logout",
        &[("Cookie", &cookie), ("Origin", "https://evil.example")],
        "",
    )
    .unwrap();
    assert_eq!(status, 403);
    let (status, _, _) = http(addr, "GET", "/api/whoami", &[("Cookie", &cookie)], "").unwrap();
    assert_eq!(status, 200, "the cross-site logout did nothing");
}

#[test]
fn the_session_cookie_is_http_only_and_same_site_strict_and_failed_logins_are_limited() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let addr = server.web;
    let (status, head, _) = http(
        addr,
        "POST",
        "/login",
        &[],
        &format!(
            "user=ops&password={}&next=/dashboard",
            PASSWORD.replace(' ', "+")
        ),
    )
    .unwrap();
    assert_eq!(status, 303, "{head}");
    let cookie_line = head.lines().find(|l| l.starts_with("set-cookie:")).unwrap();
    assert!(cookie_line.contains("HttpOnly") && cookie_line.contains("SameSite=Strict"));
    assert!(!cookie_line.contains("Secure"), "plain HTTP on loopback");
    // Five wrong passwords for a name, then even the right one waits.
    for _ in 0..5 {
        let (status, _, _) =
            http(addr, "POST", "/login", &[], "user=ops&password=wrong-guess").unwrap();
        assert_eq!(status, 401);
    }
    let (status, head, _) = http(
        addr,
        "POST",
        "/login",
        &[],
        &format!("user=ops&password={}", PASSWORD.replace(' ', "+")),
    )
    .unwrap();
    assert_eq!(status, 429, "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after"), "{head}");
}

#[test]
fn an_api_token_reads_series_until_it_is_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (from, to, seeded) = seed_load(&data);
    add_user(Path::new(EXE), &data, "grafana", "viewer", PASSWORD).unwrap();
    let out = std::process::Command::new(EXE)
        .args([
            "user",
            "token",
            "grafana",
            "--label",
            "dashboards",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let server = ConsoleServer::start(Path::new(EXE), &data, &[]).unwrap();
    let bearer = format!("Bearer {token}");
    let path = format!("/api/series?name=host_load15&from={from}&to={to}");
    let (status, _, body) =
        http(server.web, "GET", &path, &[("Authorization", &bearer)], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["level"], "raw");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), seeded.len());
    for (p, (t, value)) in points.iter().zip(&seeded) {
        assert_eq!(p["t"].as_i64(), Some(*t));
        for k in ["min", "max", "avg", "last"] {
            assert_eq!(p[k].as_f64(), Some(*value), "{k} at {t}");
        }
    }
    // A token only opens the API, not the pages.
    let (status, _, _) = http(
        server.web,
        "GET",
        "/dashboard",
        &[("Authorization", &bearer)],
        "",
    )
    .unwrap();
    assert_eq!(status, 303);
    // Listed with its label, never with its secret; revoked, it opens nothing.
    let list = std::process::Command::new(EXE)
        .args(["user", "tokens", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    assert!(
        list.contains("dashboards") && !list.contains(&token[13..]),
        "{list}"
    );
    let id = list.split('\t').next().unwrap();
    let revoked = std::process::Command::new(EXE)
        .args(["user", "revoke", id, "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(revoked.status.success());
    let (status, _, _) = http(server.web, "GET", &path, &[("Authorization", &bearer)], "").unwrap();
    assert_eq!(status, 401);
}

/// `tandem serve` over `data_dir` with `extra` arguments, run until it ends (these runs are
/// refused at start).
fn serve_refused(data_dir: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(EXE)
        .args([
            "serve",
            "--agi-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .unwrap()
}

#[test]
fn a_console_off_loopback_needs_tls_and_a_first_user() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |extra: &[&str]| serve_refused(&data, extra);
    let out = run(&["--web-listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without TLS") && err.contains("web.tls_cert"),
        "{err}"
    );

    // Plain HTTP allowed, but no user yet: loopback only, and the command to run is named.
    let config = dir.path().join("tandem.toml");
    std::fs::write(&config, "[web]\nallow_plain_http = true\n").unwrap();
    let out = run(&[
        "--config",
        config.to_str().unwrap(),
        "--web-listen",
        "0.0.0.0:0",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no console user exists yet")
            && err.contains("tandem user add admin --role admin --data-dir"),
        "{err}"
    );
}

/// An HTTPS request with a client that trusts only `ca_pem`: `(status, headers, body)`.
fn https(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String, String) {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    bench::browser::http_on(&mut tls, "localhost", method, path, &[], body).unwrap()
}

#[test]
fn with_a_certificate_the_console_speaks_https_and_its_cookie_is_secure() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    let (cert_path, key_path) = (
        dir.path().join("console.crt"),
        dir.path().join("console.key"),
    );
    std::fs::write(&cert_path, &cert_pem).unwrap();
    std::fs::write(&key_path, &key_pem).unwrap();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[web]\ntls_cert = {:?}\ntls_key = {:?}\n",
            cert_path.display().to_string(),
            key_path.display().to_string()
        ),
    )
    .unwrap();
    let server = ConsoleServer::start(
        Path::new(EXE),
        &data,
        &["--config", config.to_str().unwrap()],
    )
    .unwrap();
    let (status, head, _) = https(server.web, &cert_pem, "GET", "/login", "");
    assert_eq!(status, 200, "{head}");
    let (status, head, _) = https(
        server.web,
        &cert_pem,
        "POST",
        "/login",
        &format!("user=ops&password={}", PASSWORD.replace(' ', "+")),
    );
    assert_eq!(status, 303, "{head}");
    let cookie = head.lines().find(|l| l.starts_with("set-cookie:")).unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    // Plain HTTP on the TLS port gets no page.
    let plain = http(server.web, "GET", "/login", &[], "");
    assert!(plain.is_err() || plain.unwrap().0 != 200);

    // A key that is not the certificate's is refused at start, naming the file.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(&key_path, other.signing_key.serialize_pem()).unwrap();
    let out = serve_refused(
        &dir.path().join("other-data"),
        &[
            "--web-listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    drop(server);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("console.key"), "{err}");
    assert!(
        !dir.path().join("other-data").exists(),
        "refused before anything was created"
    );
}
