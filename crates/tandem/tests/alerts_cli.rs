//! `tandem capture --rules alerts.example.toml` on the synthesiser's scenarios: each fires
//! exactly the alerts of its ground truth, and a clean day of 10,000 calls fires nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use monitor::synth::scenario::{self, Scenario, ScenarioOptions};

fn example_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../alerts.example.toml")
}

/// The (rule, key) of every alert that fired, from `--json`.
fn fired(pcap: &Path, rules: &Path) -> BTreeSet<(String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["capture", "--no-store", "--json", "--rules"])
        .arg(rules)
        .arg("--read")
        .arg(pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "alert" && v["state"] == "firing" && v["repeat"] == false)
        .map(|v| {
            assert!(!v["calls"].as_array().unwrap().is_empty(), "{v}");
            (
                v["rule"].as_str().unwrap().to_string(),
                v["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn write(s: Scenario, calls: usize, dir: &Path) -> (PathBuf, scenario::ScenarioTruth) {
    let path = dir.join(format!("{}.pcap", s.as_str()));
    let opts = ScenarioOptions {
        clean_calls: calls,
        ..ScenarioOptions::default()
    };
    let truth = scenario::write(s, &path, &opts).unwrap();
    (path, truth)
}

fn set(items: &[(&str, String)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(r, k)| (r.to_string(), k.clone()))
        .collect()
}

#[test]
fn each_scenario_fires_exactly_its_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    let rules = example_rules();

    let (pcap, truth) = write(Scenario::TollFraud, 40, dir.path());
    let fraud = truth.toll_fraud.unwrap();
    assert!(fraud.peak_concurrent > 3);
    let ext = fraud.extension.clone();
    assert_eq!(
        fired(&pcap, &rules),
        set(&[
            ("premium-destinations", ext.clone()),
            ("international-at-night", ext.clone()),
            ("concurrent-per-extension", ext),
        ])
    );

    let (pcap, truth) = write(Scenario::Scanner, 40, dir.path());
    let scanner = truth.scanner.unwrap();
    assert_eq!(
        fired(&pcap, &rules),
        set(&[("register-guessing-per-address", scanner.source.to_string())])
    );

    let (pcap, truth) = write(Scenario::Trunk503, 40, dir.path());
    let trunk = truth.trunk.unwrap();
    assert_eq!(
        fired(&pcap, &rules),
        set(&[("trunk-5xx", trunk.trunk.ip().to_string())])
    );

    let (pcap, truth) = write(Scenario::OneWayAudio, 40, dir.path());
    let keys: Vec<(&str, String)> = truth
        .one_way
        .iter()
        .map(|o| {
            (
                "one-way-audio",
                truth.call(&o.call_id).unwrap().callee_addr.ip().to_string(),
            )
        })
        .collect();
    assert_eq!(fired(&pcap, &rules), set(&keys));
}

#[test]
fn a_dry_run_over_stored_cdrs_fires_what_the_capture_fired() {
    let dir = tempfile::tempdir().unwrap();
    let (pcap, truth) = write(Scenario::TollFraud, 40, dir.path());
    let db = dir.path().join("cdr.sqlite3");
    let tandem = env!("CARGO_BIN_EXE_tandem");
    let stored = Command::new(tandem)
        .args(["capture", "--cdr-db"])
        .arg(&db)
        .arg("--read")
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        stored.status.success(),
        "{}",
        String::from_utf8_lossy(&stored.stderr)
    );
    let out = Command::new(tandem)
        .args(["alerts", "--cdr-db"])
        .arg(&db)
        .args([
            "test",
            "--json",
            "--rule",
            "premium-destinations",
            "--rule",
            "concurrent-per-extension",
            "--rules",
        ])
        .arg(example_rules())
        .args([
            "--from",
            "2026-03-01T00:00:00Z",
            "--to",
            "2026-03-04T00:00:00Z",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let firing: BTreeSet<(String, String)> = lines
        .iter()
        .filter(|v| v["state"] == "firing")
        .map(|v| {
            (
                v["rule"].as_str().unwrap().into(),
                v["key"].as_str().unwrap().into(),
            )
        })
        .collect();
    let ext = truth.toll_fraud.unwrap().extension;
    assert_eq!(
        firing,
        set(&[
            ("premium-destinations", ext.clone()),
            ("concurrent-per-extension", ext)
        ])
    );
    // The premium alert names the fraud calls, as stored: each a uid the console opens.
    let premium = lines
        .iter()
        .find(|v| v["rule"] == "premium-destinations")
        .unwrap();
    assert!(premium["calls"][0].as_str().unwrap().starts_with("local|"));

    // A capture with rules keeps its alerts beside its CDRs, where `tandem alerts list` (and
    // the console) read them.
    let kept = dir.path().join("kept.sqlite3");
    let out = Command::new(tandem)
        .args(["capture", "--cdr-db"])
        .arg(&kept)
        .arg("--rules")
        .arg(example_rules())
        .arg("--read")
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("alert firing critical: premium-destinations (caller 2001)")
    );
    let listed = Command::new(tandem)
        .args(["alerts", "--cdr-db"])
        .arg(&kept)
        .args(["list", "--json"])
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        rows.iter().any(|r| r["rule"] == "premium-destinations"
            && r["key"] == "2001"
            && r["node"] == "local"),
        "{rows:?}"
    );

    let wrong = Command::new(tandem)
        .args(["alerts", "--cdr-db"])
        .arg(&db)
        .args(["test", "--rule", "no-such-rule", "--from", "0", "--rules"])
        .arg(example_rules())
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("premium-destinations"),
        "the error lists the rules"
    );
}

#[test]
fn a_clean_day_of_ten_thousand_calls_fires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (pcap, truth) = write(Scenario::Clean, 10_000, dir.path());
    assert_eq!(truth.calls.len(), 10_000);
    assert_eq!(fired(&pcap, &example_rules()), BTreeSet::new());
}
