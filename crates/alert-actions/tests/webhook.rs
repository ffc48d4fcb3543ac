//! The webhook against a real HTTP server on loopback: signed, retried after a 500, not
//! retried after a 400, in Slack's form; and a queue that fills drops instead of waiting.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use alert_actions::{Actions, Notifier, NotifierOptions};
use alerts::ActionConfig;
use common::{HookServer, TempDir, alert, wait_stats};
use hmac::{KeyInit, Mac};

fn webhook(url: String) -> ActionConfig {
    ActionConfig {
        kind: "webhook".into(),
        url: Some(url),
        retries: Some(3),
        backoff_ms: Some(50),
        timeout_ms: Some(2000),
        ..Default::default()
    }
}

fn start(actions: &[(&str, ActionConfig)]) -> Notifier {
    let config: BTreeMap<String, ActionConfig> = actions
        .iter()
        .map(|(n, c)| (n.to_string(), c.clone()))
        .collect();
    let actions = Actions::from_config(&config).unwrap();
    Notifier::start(actions, NotifierOptions::default()).unwrap()
}

#[test]
fn a_signed_webhook_is_retried_after_a_500_and_verifies() {
    let server = HookServer::start(&[500]);
    let dir = TempDir::new("hook-key");
    let key_file = dir.0.join("key");
    std::fs::write(&key_file, "webhook-key-42\n").unwrap();
    let notifier = start(&[(
        "ops",
        ActionConfig {
            secret_file: Some(key_file),
            ..webhook(server.url("/tandem?site=lab"))
        },
    )]);
    let sent = alert("premium", "2001", &["ops"]);
    assert!(notifier.submit(sent.clone()));
    let reqs = server.wait_for(2, Duration::from_secs(5));
    assert_eq!(reqs.len(), 2, "the 500 was retried once");
    assert_eq!(reqs[0].body, reqs[1].body);
    let r = &reqs[1];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/tandem?site=lab");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.header("user-agent"),
        Some(concat!("tandem/", env!("CARGO_PKG_VERSION")))
    );
    // The receiver's check: HMAC-SHA256 of the exact body with the key (no newline).
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"webhook-key-42").unwrap();
    mac.update(&r.body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        r.header("x-tandem-signature"),
        Some(format!("sha256={want}").as_str())
    );
    assert_eq!(String::from_utf8_lossy(&r.body), sent.json_line());
    let body = r.json();
    assert_eq!(body["kind"], "alert");
    assert_eq!(body["version"], 1);
    assert_eq!(body["rule"], "premium");
    assert_eq!(body["key"], "2001");
    let stats = wait_stats(&notifier, Duration::from_secs(2), |s| {
        s.actions["ops"].sent == 1
    });
    let ops = &stats.actions["ops"];
    assert_eq!(
        (ops.sent, ops.failed_attempts, ops.given_up, ops.queued),
        (1, 1, 0, 0)
    );
    let closed = notifier.close(Instant::now() + Duration::from_secs(2));
    assert_eq!(closed.actions["ops"].dropped, 0);
}

#[test]
fn a_400_is_not_retried_and_slack_gets_one_readable_line() {
    let refusing = HookServer::start(&[400]);
    let slack = HookServer::start(&[]);
    let notifier = start(&[
        ("refusing", webhook(refusing.url("/x"))),
        (
            "slack",
            ActionConfig {
                format: Some("slack".into()),
                ..webhook(slack.url("/services/T0/B0/XYZ"))
            },
        ),
    ]);
    assert!(notifier.submit(alert("premium", "2001", &["refusing", "slack", "nowhere"])));
    let stats = wait_stats(&notifier, Duration::from_secs(5), |s| {
        s.actions["refusing"].given_up == 1 && s.actions["slack"].sent == 1
    });
    assert_eq!(stats.actions["refusing"].failed_attempts, 1);
    assert_eq!(stats.unknown_action, 1);
    // Past the retries' backoff: still one request.
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(refusing.requests().len(), 1);
    let text = slack.requests()[0].json();
    assert_eq!(
        text,
        serde_json::json!({
            "text": "FIRING critical: premium caller=2001: 3 calls from 2001 to +88213 (International Networks)"
        })
    );
}

#[test]
fn submit_never_waits_a_full_queue_drops_and_counts() {
    // A server that accepts and never answers: every delivery hangs until its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let config = BTreeMap::from([("slow".to_string(), webhook(url))]);
    let notifier = Notifier::start(
        Actions::from_config(&config).unwrap(),
        NotifierOptions {
            queue_max: 4,
            in_flight_per_action_max: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let accepted = (0..200)
        .filter(|i| notifier.submit(alert("premium", &i.to_string(), &["slow"])))
        .count();
    let stats = notifier.stats();
    assert!(accepted < 200, "accepted {accepted}");
    assert_eq!(stats.dropped, 200 - accepted as u64);
    assert_eq!(stats.submitted, accepted as u64);
    // Closing at once gives up what is left, counted per action.
    let closed = notifier.close(Instant::now());
    let slow = &closed.actions["slow"];
    assert_eq!(slow.dropped + slow.sent + slow.given_up, 200);
    assert_eq!(slow.queued, 0);
    drop(silent);
}
