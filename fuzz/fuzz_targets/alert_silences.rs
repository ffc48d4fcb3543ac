//! Alertmanager's answer to `GET /api/v2/silences` as the alert actions read it before
//! skipping a rule's other actions: any bytes are either a list of silences or refused, no
//! pattern panics or grows past its bound, and matching an alert's labels always answers.
#![no_main]

use std::collections::BTreeMap;

use alert_actions::alertmanager::{SILENCES_MAX, active_silences};
use libfuzzer_sys::fuzz_target;

const LABELS: [&str; 6] = [
    "alertname",
    "severity",
    "key",
    "rule_kind",
    "group_by",
    "instance",
];

fuzz_target!(|data: &[u8]| {
    // The first line holds the alert's label values, tab-separated; the rest is the answer.
    let (head, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    let values = String::from_utf8_lossy(head);
    let labels: BTreeMap<&'static str, String> = LABELS
        .iter()
        .zip(values.split('\t'))
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| (*n, v.to_string()))
        .collect();
    if let Ok(silences) = active_silences(body) {
        assert!(silences.len() <= SILENCES_MAX);
        for s in &silences {
            let _ = s.matches(&labels);
        }
    }
});
