//! Alert rules on a collector: two sensors deliver the same scenarios (one call seen by two
//! capture points), and the collector fires each alert once, as one sensor alone would, and
//! keeps it in PostgreSQL.

mod common;
use common::{ServeChild, free_port};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use monitor::synth::scenario::{self, Scenario, ScenarioOptions};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");

fn run(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env_remove("TANDEM_DATA_DIR")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn example_rules() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../alerts.example.toml"))
        .unwrap()
}

/// Firing alerts (not repeats) per (rule, key), from JSON lines.
fn count_firing(lines: &str) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for v in lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        if v["kind"] == "alert" && v["state"] == "firing" && v["repeat"] == false {
            *m.entry((
                v["rule"].as_str().unwrap().to_string(),
                v["key"].as_str().unwrap().to_string(),
            ))
            .or_default() += 1;
        }
    }
    m
}

#[test]
fn two_sensors_seeing_the_same_calls_fire_each_alert_once() {
    let pg = match pg_scratch::PgServer::start(&pg_scratch::Options::default()) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed (CI installs Debian's postgresql)");
            return;
        }
        Err(e) => panic!("PostgreSQL: {e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let conninfo = pg.conninfo();
    let data = dir.path().join("collector");
    let mut tokens = Vec::new();
    for name in ["site-a", "site-b"] {
        let added = run(&["sensor", "add", name, "--data-dir", data.to_str().unwrap()]);
        assert!(added.status.success(), "{}", text(&added.stderr));
        let token = dir.path().join(format!("{name}.token"));
        std::fs::write(&token, &added.stdout).unwrap();
        tokens.push((name, token));
    }
    let (agi, http, sensors) = (free_port(), free_port(), free_port());
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"127.0.0.1:{agi}\"\n[metrics]\nlisten = \"127.0.0.1:{http}\"\n\
             [web]\nenabled = false\n[history]\nenabled = false\n[kv]\ndata_dir = {data:?}\n\
             [collector]\nlisten = \"127.0.0.1:{sensors}\"\npostgres = {conninfo:?}\nretention_days = 0\n\n{}",
            example_rules()
        ),
    )
    .unwrap();
    let log = dir.path().join("serve.log");
    let _serve = ServeChild::start(&config, &log, http);

    // What one sensor alone fires.
    let rules_file = dir.path().join("rules.toml");
    std::fs::write(&rules_file, example_rules()).unwrap();
    let mut alone = BTreeMap::new();
    let mut pcaps: Vec<PathBuf> = Vec::new();
    // In the order they happened (a collector's rules follow the newest time its sensors
    // report; what is older than a rule's window then is not counted).
    for s in [Scenario::Scanner, Scenario::TollFraud] {
        let pcap = dir.path().join(format!("{}.pcap", s.as_str()));
        scenario::write(s, &pcap, &ScenarioOptions::default()).unwrap();
        let out = run(&[
            "capture",
            "--no-store",
            "--json",
            "--rules",
            rules_file.to_str().unwrap(),
            "--read",
            pcap.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        alone.extend(count_firing(&text(&out.stdout)));
        pcaps.push(pcap);
    }
    assert!(alone.len() >= 4, "{alone:?}");

    // Both sensors deliver both scenarios to the collector.
    for (name, token) in &tokens {
        let db = dir.path().join(format!("{name}.sqlite3"));
        for pcap in &pcaps {
            let out = run(&[
                "capture",
                "--read",
                pcap.to_str().unwrap(),
                "--cdr-db",
                db.to_str().unwrap(),
                "--collector",
                &format!("127.0.0.1:{sensors}"),
                "--sensor-id",
                name,
                "--sensor-token-file",
                token.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
    }
    // The collector stored the alerts it fired: once each, as one sensor alone fired them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = run(&[
            "alerts",
            "--cdr-postgres",
            &conninfo,
            "list",
            "--json",
            "--limit",
            "500",
        ]);
        assert!(listed.status.success(), "{}", text(&listed.stderr));
        let mut stored: BTreeMap<(String, String), usize> = BTreeMap::new();
        for v in text(&listed.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        {
            assert_eq!(v["node"], "collector");
            *stored
                .entry((
                    v["rule"].as_str().unwrap().into(),
                    v["key"].as_str().unwrap().into(),
                ))
                .or_default() += 1;
        }
        if stored == alone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stored {stored:?}\nexpected {alone:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
