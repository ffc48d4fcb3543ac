//! A history records at most `max_series` series: a new one past that is refused, counted, and
//! leaves nothing in the file, while the series already recorded go on.

use history::{History, HistoryConfig};
use std::sync::atomic::Ordering;

fn capped(max_series: usize) -> HistoryConfig {
    HistoryConfig {
        max_series,
        ..HistoryConfig::with_interval(10)
    }
}

#[test]
fn new_series_past_the_cap_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite3");
    let mut h = History::open(&path, capped(3)).unwrap();
    let stats = h.stats();
    let names: Vec<String> = (0..1_000)
        .map(|i| format!("flood{{path=\"./{i}\"}}"))
        .collect();
    let mut tick: Vec<(&str, f64)> = vec![("kept_a", 1.0), ("kept_b", 2.0)];
    tick.extend(names.iter().map(|n| (n.as_str(), 1.0)));
    for t in 0..5 {
        h.record_tick(1_000 + t * 10, &tick, &[("latency", &[(0.01, 1)][..])])
            .unwrap();
    }
    // The first three series seen are kept (a tick's latencies are recorded first).
    assert_eq!(h.series_names().unwrap(), ["kept_a", "kept_b", "latency"]);
    assert_eq!(h.points("kept_b", 0, 0, i64::MAX).unwrap().len(), 5);
    assert_eq!(h.series_recorded(), 3);
    assert_eq!(h.series_refused, 5 * 1_000);
    assert_eq!(stats.series.load(Ordering::Relaxed), 3);
    assert_eq!(stats.series_refused.load(Ordering::Relaxed), 5_000);
    assert_eq!(stats.rejected.load(Ordering::Relaxed), 0);
    drop(h);

    // After a restart the file's series are not taken for recorded ones: the cap counts what
    // this history records, so an older file over the cap is not filled further.
    let mut h = History::open(&path, capped(3)).unwrap();
    h.record(
        2_000,
        &[
            ("kept_a", 1.0),
            ("new", 1.0),
            ("kept_b", 1.0),
            ("newer", 1.0),
        ],
    )
    .unwrap();
    assert_eq!(h.series_recorded(), 3);
    assert_eq!(h.series_refused, 1);
    assert_eq!(h.series_names().unwrap().len(), 4, "one new series at most");
}

#[test]
fn a_cap_of_zero_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = History::open(&dir.path().join("h.sqlite3"), capped(0))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("max_series"), "{err}");
}
