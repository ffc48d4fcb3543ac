//! A real Prometheus Alertmanager (Debian's `prometheus-alertmanager`) receives Tandem's
//! alerts through its v2 API, and a silence made there keeps the rule's other actions quiet
//! for the alerts it matches, and only those.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alert_actions::{Actions, Notifier, NotifierOptions};
use alerts::{ActionConfig, Alert, AlertState};
use common::{HookServer, TempDir, alert, free_port, http, wait_listening, wait_stats};

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// An Alertmanager on a loopback port, killed when dropped.
struct Peer {
    child: Child,
    addr: String,
    _dir: TempDir,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn alertmanager() -> Option<Peer> {
    if !std::path::Path::new(ALERTMANAGER).exists() {
        test_env::skip(
            "prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)",
        );
        return None;
    }
    let dir = TempDir::new("alertmanager");
    let config = dir.0.join("alertmanager.yml");
    // Every alert goes to a receiver that notifies no one: the test reads Alertmanager's API.
    std::fs::write(
        &config,
        "route:\n  receiver: nobody\nreceivers:\n  - name: nobody\n",
    )
    .unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(ALERTMANAGER)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", dir.0.join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--cluster.listen-address=")
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let peer = Peer {
        child,
        addr,
        _dir: dir,
    };
    assert!(
        wait_listening(port, Duration::from_secs(10)),
        "Alertmanager did not listen"
    );
    let end = Instant::now() + Duration::from_secs(10);
    while http("GET", &peer.addr, "/-/ready", None).0 != 200 {
        assert!(Instant::now() < end, "Alertmanager never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(peer)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn live(rule: &str, key: &str) -> Alert {
    let now = now_us();
    Alert {
        at_us: now,
        since_us: now - 60_000_000,
        ..alert(rule, key, &["am", "hook"])
    }
}

/// Alertmanager's alerts (active, silenced or not), by their `key` label.
fn alerts_in(am: &Peer) -> BTreeMap<String, serde_json::Value> {
    let (status, body) = http("GET", &am.addr, "/api/v2/alerts", None);
    assert_eq!(status, 200, "{body}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    list.into_iter()
        .map(|a| (a["labels"]["key"].as_str().unwrap_or("").to_string(), a))
        .collect()
}

fn wait_alerts(
    am: &Peer,
    done: impl Fn(&BTreeMap<String, serde_json::Value>) -> bool,
) -> BTreeMap<String, serde_json::Value> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let a = alerts_in(am);
        if done(&a) || Instant::now() > end {
            return a;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn alertmanager_receives_alerts_and_its_silences_quiet_the_other_actions() {
    let Some(am) = alertmanager() else { return };
    let hook = HookServer::start(&[]);
    let config = BTreeMap::from([
        (
            "am".to_string(),
            ActionConfig {
                kind: "alertmanager".into(),
                url: Some(format!("http://{}", am.addr)),
                ..Default::default()
            },
        ),
        (
            "hook".to_string(),
            ActionConfig {
                kind: "webhook".into(),
                url: Some(hook.url("/hook")),
                ..Default::default()
            },
        ),
    ]);
    let notifier = Notifier::start(
        Actions::from_config(&config).unwrap(),
        NotifierOptions {
            // Read the silences on every alert, so that the one made below counts at once.
            silences_cache_ms: 0,
            // Post firing alerts again this often (a minute in service), which keeps them
            // from timing out in Alertmanager between the rule's repeats.
            alertmanager_resend_ms: 300,
            ..Default::default()
        },
    )
    .unwrap();

    // 1. A firing alert reaches both, and Alertmanager shows it with Tandem's labels.
    let first = live("premium", "2001");
    assert!(notifier.submit(first.clone()));
    assert_eq!(hook.wait_for(1, Duration::from_secs(5)).len(), 1);
    let seen = wait_alerts(&am, |a| a.contains_key("2001"));
    let a = &seen["2001"];
    assert_eq!(a["labels"]["alertname"], "premium");
    assert_eq!(a["labels"]["severity"], "critical");
    assert_eq!(a["labels"]["rule_kind"], "fraud.destination");
    assert_eq!(a["labels"]["group_by"], "caller");
    assert!(
        a["labels"]["instance"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert_eq!(a["annotations"]["summary"], first.summary);
    assert_eq!(
        a["annotations"]["calls"],
        "edge1|a84c@192.0.2.10|1 edge1|b93d@192.0.2.10|1 edge1|c02e@192.0.2.10|1"
    );
    assert_eq!(a["status"]["state"], "active");
    let starts = a["startsAt"].as_str().unwrap();
    assert_eq!(
        utc::parse_us(starts).map(|t| t / 1_000_000),
        Some(first.since_us / 1_000_000),
        "{starts}"
    );

    // ...and posts it again while it fires: Alertmanager pushes its end further out.
    let ends = a["endsAt"].as_str().unwrap().to_string();
    let seen = wait_alerts(&am, |a| a["2001"]["endsAt"].as_str() != Some(&ends));
    assert_ne!(seen["2001"]["endsAt"].as_str(), Some(ends.as_str()));
    assert!(notifier.stats().actions["am"].resent >= 1);
    assert_eq!(
        hook.requests().len(),
        1,
        "a resend goes to Alertmanager alone"
    );

    // 2. A silence made in Alertmanager (an equal and a regex matcher)...
    let now_s = now_us() / 1_000_000;
    let silence = serde_json::json!({
        "matchers": [
            {"name": "alertname", "value": "premium", "isRegex": false, "isEqual": true},
            {"name": "key", "value": "20(01|09)", "isRegex": true, "isEqual": true},
        ],
        "startsAt": utc::format_s(now_s - 1),
        "endsAt": utc::format_s(now_s + 3600),
        "createdBy": "tandem tests",
        "comment": "carrier maintenance",
    });
    let (status, body) = http(
        "POST",
        &am.addr,
        "/api/v2/silences",
        Some(&silence.to_string()),
    );
    assert_eq!(status, 200, "{body}");

    // ...quiets the webhook for 2001's repeat while 3001 passes; Alertmanager gets both.
    let repeat = Alert {
        repeat: true,
        ..live("premium", "2001")
    };
    assert!(notifier.submit(repeat));
    assert!(notifier.submit(live("premium", "3001")));
    assert!(notifier.submit(live("premium", "2009")));
    let stats = wait_stats(&notifier, Duration::from_secs(5), |s| {
        s.actions["am"].sent == 4 && s.actions["hook"].sent == 2
    });
    assert_eq!(stats.actions["hook"].silenced, 2, "{stats:?}");
    assert_eq!(stats.actions["am"].silenced, 0);
    let keys: Vec<String> = hook
        .requests()
        .iter()
        .map(|r| r.json()["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["2001", "3001"]);
    let seen = wait_alerts(&am, |a| {
        a.get("2001")
            .is_some_and(|x| x["status"]["state"] == "suppressed")
            && a.contains_key("3001")
    });
    assert_eq!(seen["2001"]["status"]["state"], "suppressed");
    assert_eq!(seen["3001"]["status"]["state"], "active");

    // 3. A resolved alert ends it in Alertmanager (it leaves the list of active alerts) and
    // reaches the other actions, unless they never heard of its firing (2009: silenced).
    for key in ["2009", "3001"] {
        let resolved = Alert {
            state: AlertState::Resolved,
            ..live("premium", key)
        };
        assert!(notifier.submit(resolved));
    }
    let seen = wait_alerts(&am, |a| !a.contains_key("3001"));
    assert!(!seen.contains_key("3001"), "{:?}", seen.get("3001"));
    // Resolved, it is no longer posted again.
    let resent = notifier.stats().actions["am"].resent;
    wait_stats(&notifier, Duration::from_secs(2), |s| {
        s.actions["am"].resent > resent
    });
    assert!(!alerts_in(&am).contains_key("3001"));
    let stats = notifier.close(Instant::now() + Duration::from_secs(5));
    assert_eq!(stats.actions["hook"].sent, 3);
    assert_eq!(stats.actions["hook"].silenced, 3);
    let last = hook.requests().last().unwrap().json();
    assert_eq!(
        (&last["key"], &last["state"]),
        (&"3001".into(), &"resolved".into())
    );
    assert_eq!(stats.actions["am"].given_up, 0);
}
