//! The collector's sensors on the console, as an operator meets them: `tandem serve` with a
//! collector on a throwaway PostgreSQL and its console, two sensors registered with
//! `tandem sensor add`, one that delivers a file and goes away and one that stays up after
//! replaying its journal. `/api/sensors` (signed in) says what the collector knows of each, and
//! the dashboard in a real headless Chromium shows the Sensors panel: the offline sensor first
//! and marked, times in the browser's zone, refreshed at the dashboard's own cadence.

mod common;
use common::free_port;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bench::browser::{Browser, ConsoleServer, add_user, http, login_cookie};
use fantoccini::Locator;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
/// The browser's zone: +05:30 all year, so a time shown in UTC cannot pass for local time.
const ZONE: &str = "Asia/Kolkata";
const ZONE_OFFSET_S: i64 = 5 * 3600 + 1800;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn run(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env_remove("TANDEM_DATA_DIR")
        .env_remove("TANDEM_CDR_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tandem sensor add NAME` on the collector's data directory; the token's file.
fn add_sensor(data: &Path, dir: &Path, name: &str) -> PathBuf {
    let added = run(&["sensor", "add", name, "--data-dir", data.to_str().unwrap()]);
    assert!(added.status.success(), "{}", text(&added.stderr));
    let token = dir.join(format!("{name}.token"));
    std::fs::write(&token, &added.stdout).unwrap();
    token
}

/// Eight synthetic calls an hour ago.
fn synthetic(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let path = dir.join(name);
    let cfg = monitor::synth::SynthConfig {
        calls: 8,
        call_interval_us: 200_000,
        call_duration_ms: 1_000,
        failures: false,
        seed,
        start_ns: (now_s() - 3600) * 1_000_000_000,
        ..monitor::synth::SynthConfig::default()
    };
    monitor::synth::generate(&cfg, std::fs::File::create(&path).unwrap()).unwrap();
    path
}

/// A sensor's own files: its CDR database, and the collector journal beside it.
struct Sensor {
    name: &'static str,
    token: PathBuf,
    db: PathBuf,
}

impl Sensor {
    fn args<'a>(&'a self, collector: &'a str) -> Vec<&'a str> {
        vec![
            "--cdr-db",
            self.db.to_str().unwrap(),
            "--collector",
            collector,
            "--sensor-id",
            self.name,
            "--sensor-token-file",
            self.token.to_str().unwrap(),
        ]
    }

    /// `tandem capture --read FILE` delivering to `collector`.
    fn capture(&self, file: &Path, collector: &str) -> Output {
        let mut args = vec!["capture", "--read", file.to_str().unwrap()];
        args.extend(self.args(collector));
        run(&args)
    }

    /// A sensor that stays up (HEP source) until SIGTERM.
    fn live(&self, collector: &str) -> Child {
        Command::new(EXE)
            .args(["capture", "--hep-listen", "127.0.0.1:0"])
            .args(self.args(collector))
            .args(["--status-interval-s", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }
}

/// An hour of the host's figures up to a minute ago, so that the charts under the panel are
/// drawn (the screenshot), in the history serve reads and keeps writing. Returns the end of
/// the hour.
fn seed_history(data: &Path) -> i64 {
    std::fs::create_dir_all(data).unwrap();
    let cfg = history::HistoryConfig::with_retention(10, 48, 30, 730).unwrap();
    let mut h = history::History::open(&data.join("history.sqlite3"), cfg).unwrap();
    let end = history::bucket_start(now_s() - 60, 10);
    let (gib, mib) = ((1u64 << 30) as f64, (1u64 << 20) as f64);
    for i in 0..360 {
        let t = end - (359 - i) * 10;
        let x = i as f64 / 360.0 * std::f64::consts::TAU;
        let wave = |mid: f64, amp: f64| mid + amp * (x + 0.3 * (3.0 * x).sin()).sin();
        let samples = [
            ("host_cpu_busy_pct{cpu=\"cpu\"}", wave(32.0, 14.0)),
            ("host_cpu_busy_pct{cpu=\"cpu0\"}", wave(37.0, 18.0)),
            ("host_cpu_busy_pct{cpu=\"cpu1\"}", wave(27.0, 11.0)),
            ("host_load1", wave(0.9, 0.5)),
            ("host_load5", wave(0.8, 0.3)),
            ("host_load15", wave(0.7, 0.2)),
            ("host_memory_total_bytes", 24.0 * gib),
            ("host_memory_available_bytes", wave(17.0, 1.5) * gib),
            ("host_swap_used_bytes", 0.0),
            ("tandem_process_rss_bytes", wave(64.0, 6.0) * mib),
            (
                "host_fs_used_bytes{mount=\"/\"}",
                41.0 * gib + i as f64 * 2.0 * mib,
            ),
            (
                "host_fs_used_bytes{mount=\"/var\"}",
                12.0 * gib + i as f64 * 9.0 * mib,
            ),
            (
                "host_disk_read_bytes_per_second{device=\"vda\"}",
                wave(0.3, 0.2) * mib,
            ),
            (
                "host_disk_written_bytes_per_second{device=\"vda\"}",
                wave(1.1, 0.6) * mib,
            ),
            (
                "host_net_rx_bytes_per_second{interface=\"eth0\"}",
                wave(2.4, 1.6) * mib,
            ),
            (
                "host_net_tx_bytes_per_second{interface=\"eth0\"}",
                wave(2.1, 1.4) * mib,
            ),
            ("tandem_process_cpu_pct", wave(9.0, 5.0)),
        ];
        h.record(t, &samples).unwrap();
    }
    end + 10
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
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET /api/sensors` with the session `cookie`: the sensors by name.
fn api_sensors(web: SocketAddr, cookie: &str) -> (Value, Vec<Value>) {
    let (status, _, body) = http(web, "GET", "/api/sensors", &[("Cookie", cookie)], "").unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let sensors = v["sensors"].as_array().unwrap().clone();
    (v, sensors)
}

fn sensor<'a>(sensors: &'a [Value], name: &str) -> Option<&'a Value> {
    sensors.iter().find(|s| s["name"] == name)
}

/// The local text the panel shows for a UTC instant in [`ZONE`]: `YYYY-MM-DD HH:MM:SS`.
fn shown_in_zone(us: i64) -> String {
    let t = utc::format_s(us.div_euclid(1_000_000) + ZONE_OFFSET_S);
    t.trim_end_matches('Z').replacen('T', " ", 1)
}

/// The panel's rows as the browser shows them.
async fn panel_rows(b: &Browser) -> Vec<Value> {
    let v = b
        .client
        .execute(
            "return [...document.querySelectorAll('#panel-sensors tbody tr')].map(tr => ({
                name: tr.dataset.sensor, cls: tr.className,
                cells: [...tr.cells].map(td => td.textContent.trim()),
                us: Number(tr.querySelector('time').dataset.us),
                shown: tr.querySelector('time').textContent,
                dot: getComputedStyle(tr.querySelector('.state'), '::before').backgroundColor }));",
            vec![],
        )
        .await
        .unwrap();
    v.as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_each_sensor_of_the_collector_with_its_state_and_counts() {
    if bench::browser::tools().is_none() {
        test_env::skip("chromium and chromedriver are not installed");
        return;
    }
    let pg = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return;
        }
        Err(e) => panic!("PostgreSQL: {e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let seeded_end = seed_history(&data);
    add_user(Path::new(EXE), &data, "ops", "viewer", PASSWORD).unwrap();
    let sensor_of = |name: &'static str| {
        let own = dir.path().join(name);
        std::fs::create_dir_all(&own).unwrap();
        Sensor {
            name,
            token: add_sensor(&data, dir.path(), name),
            db: own.join("cdr.sqlite3"),
        }
    };
    let (paris, lyon) = (sensor_of("paris-edge"), sensor_of("lyon-pbx"));

    let collector = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let server = ConsoleServer::start(
        Path::new(EXE),
        &data,
        &[
            "--collector-listen",
            &collector,
            "--collector-postgres",
            &pg.conninfo(),
        ],
    )
    .unwrap();
    let cookie = login_cookie(server.web, "ops", PASSWORD).unwrap();
    let (v, sensors) = api_sensors(server.web, &cookie);
    assert!(sensors.is_empty(), "no sensor yet: {v}");
    assert_eq!(v["clock_skew_warn_ms"], 2000);
    // Without a session the sensors are not shown.
    let (status, _, _) = http(server.web, "GET", "/api/sensors", &[], "").unwrap();
    assert_eq!(status, 401);

    // lyon-pbx delivers a file and goes away.
    let out = lyon.capture(&synthetic(dir.path(), "lyon.pcap", 1), &collector);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("acknowledged by the collector"));
    // paris-edge cannot reach the collector (nothing listens there): its CDRs wait in its
    // journal, then a paris-edge that stays up delivers them first.
    let nowhere = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let out = paris.capture(&synthetic(dir.path(), "paris.pcap", 2), &nowhere);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("waiting in the journal"),
        "{}",
        text(&out.stderr)
    );
    let mut live = paris.live(&collector);

    // What the collector knows, through the console's API.
    let sensors = eventually(60, "paris-edge's replayed journal", || async {
        let (_, sensors) = api_sensors(server.web, &cookie);
        let p = sensor(&sensors, "paris-edge")?;
        let done = p["connected"] == true && p["replayed"] == 8 && p["records_stored"] == 8;
        done.then_some(sensors)
    })
    .await;
    let names: Vec<&str> = sensors
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lyon-pbx", "paris-edge"], "in name order");
    let (lyon_v, paris_v) = (
        sensor(&sensors, "lyon-pbx").unwrap(),
        sensor(&sensors, "paris-edge").unwrap(),
    );
    assert_eq!(lyon_v["connected"], false, "{lyon_v}");
    assert_eq!(lyon_v["records_received"], 8, "{lyon_v}");
    assert_eq!(lyon_v["records_stored"], 8, "{lyon_v}");
    assert_eq!(lyon_v["sessions"], 1, "{lyon_v}");
    assert_eq!(paris_v["journal_records"], 0, "{paris_v}");
    assert_eq!(paris_v["spilled"], 0, "{paris_v}");
    assert_eq!(paris_v["dropped"], 0, "{paris_v}");
    for s in [lyon_v, paris_v] {
        assert!(s["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{s}");
        let seen_s = s["last_seen_us"].as_i64().unwrap() / 1_000_000;
        assert!((now_s() - seen_s).abs() < 300, "{s}");
        // One machine, one clock.
        assert!(s["clock_skew_ms"].as_i64().unwrap().abs() < 2000, "{s}");
    }

    // The dashboard, refreshing every 10 s, in a browser five and a half hours east of UTC.
    let b = Browser::launch_in_zone(1366, 900, Some(ZONE))
        .await
        .unwrap();
    let after = b.login(&server.base(), "ops", PASSWORD).await.unwrap();
    assert!(after.ends_with("/dashboard"), "{after}");
    b.client
        .goto(&format!("{}dashboard?range=1h&refresh=10", server.base()))
        .await
        .unwrap();
    let tally = b
        .text(Locator::Css("#panel-sensors h2 .tally"))
        .await
        .unwrap();
    assert!(
        tally.contains("2 sensors") && tally.contains("1 connected") && tally.contains("1 offline"),
        "{tally}"
    );
    let rows = panel_rows(&b).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    // The offline sensor first, marked as such; its last sighting in the browser's zone.
    let (down, up) = (&rows[0], &rows[1]);
    assert_eq!(down["name"], "lyon-pbx", "{rows:?}");
    assert_eq!(down["cls"], "down");
    assert_eq!(down["cells"][1], "Offline");
    assert_eq!(
        down["us"].as_i64().unwrap(),
        lyon_v["last_seen_us"].as_i64().unwrap()
    );
    assert_eq!(
        down["shown"].as_str().unwrap(),
        shown_in_zone(down["us"].as_i64().unwrap())
    );
    assert!(
        down["cells"][2].as_str().unwrap().contains(" ago"),
        "{down}"
    );
    assert_eq!(down["cells"][5], "8", "delivered: {down}");
    assert_eq!(
        down["cells"][4], "\u{2014}",
        "no lag without a session: {down}"
    );
    assert_eq!(up["name"], "paris-edge", "{rows:?}");
    assert_eq!(up["cls"], "up");
    assert_eq!(up["cells"][1], "Connected");
    assert_eq!(up["cells"][5], "8", "delivered: {up}");
    assert_eq!(up["cells"][7], "0", "spilled: {up}");
    assert_eq!(up["cells"][8], "8", "replayed: {up}");
    assert!(up["cells"][10].as_str().unwrap().starts_with("127.0.0.1:"));
    assert_ne!(
        up["dot"], down["dot"],
        "up and down are told apart by colour too"
    );
    // The page's own refresh brings the next heartbeat's sighting.
    let first_seen = up["us"].as_i64().unwrap();
    eventually(40, "a refreshed last sighting", || async {
        let rows = panel_rows(&b).await;
        let up = rows.iter().find(|r| r["name"] == "paris-edge")?;
        (up["us"].as_i64()? > first_seen).then_some(())
    })
    .await;
    // With TANDEM_SCREENSHOTS=DIR, DIR/console-dashboard-sensors.png (the README's is under
    // docs/): the panel over the seeded hour, down to the end of the first row of charts.
    if let Some(dir) = std::env::var_os("TANDEM_SCREENSHOTS") {
        std::fs::create_dir_all(&dir).unwrap();
        let (from, to) = (seeded_end - 3600, seeded_end);
        let url = format!("{}dashboard?from={from}&to={to}", server.base());
        b.client.goto(&url).await.unwrap();
        let fit = b
            .client
            .execute(
                "const f = document.querySelector('#panel-host .chart-box:nth-child(3)');
                 return [Math.ceil(f.getBoundingClientRect().bottom) + 14,
                         window.outerHeight - window.innerHeight];",
                vec![],
            )
            .await
            .unwrap();
        let (bottom, chrome) = (fit[0].as_u64().unwrap(), fit[1].as_u64().unwrap());
        b.client
            .set_window_size(1366, (bottom + chrome) as u32)
            .await
            .unwrap();
        let path = Path::new(&dir).join("console-dashboard-sensors.png");
        b.screenshot(&path).await.unwrap();
    }
    b.close().await;

    // paris-edge stops: the collector, and so the API, says it is offline.
    unsafe {
        libc::kill(live.id() as i32, libc::SIGTERM);
    }
    let _ = live.wait();
    eventually(60, "paris-edge offline", || async {
        let (_, sensors) = api_sensors(server.web, &cookie);
        let p = sensor(&sensors, "paris-edge")?;
        (p["connected"] == false).then_some(())
    })
    .await;
}
