//! Rollups against a straightforward recomputation from the raw samples, at every level, over
//! random histories with restarts in the middle of buckets; rows per tick that do not grow with
//! the history; the level a chart reads; retention.

use history::{Bucket, History, HistoryConfig, LevelConfig, bucket_start};

/// A small deterministic PRNG (xorshift64*), so that a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Short levels, so that a few hundred samples cross many buckets of each.
fn small_levels() -> HistoryConfig {
    let level = |name: &str, width_s: u32| LevelConfig {
        name: name.into(),
        width_s,
        retention_s: None,
    };
    HistoryConfig {
        levels: vec![
            level("raw", 10),
            level("1m", 60),
            level("10m", 600),
            level("1h", 3600),
        ],
        max_series: history::SERIES_MAX,
    }
}

/// The buckets of `samples` at width `w`, computed the plain way: group, then fold.
fn recompute(samples: &[(i64, f64)], w: u32) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    for &(t, v) in samples {
        let start = bucket_start(t, w);
        match out.last_mut() {
            Some(b) if b.start_s == start => {
                b.count += 1;
                b.sum += v;
                b.min = b.min.min(v);
                b.max = b.max.max(v);
                b.last = v;
                b.last_s = t;
            }
            _ => out.push(Bucket {
                start_s: start,
                count: 1,
                sum: v,
                min: v,
                max: v,
                last: v,
                last_s: t,
            }),
        }
    }
    out
}

#[test]
fn rollups_equal_a_recomputation_from_raw_samples_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 1..=40u64 {
        let path = dir.path().join(format!("h{seed}.sqlite3"));
        let cfg = small_levels();
        let mut rng = Rng(seed * 7919);
        let names: Vec<String> = (0..1 + rng.below(4)).map(|i| format!("s{i}")).collect();
        let mut sent: Vec<Vec<(i64, f64)>> = vec![Vec::new(); names.len()];
        let mut h = History::open(&path, cfg.clone()).unwrap();
        let mut t = 1_700_000_000 + rng.below(3600) as i64;
        for _ in 0..50 + rng.below(400) {
            // Mostly every 10 s; sometimes a gap of minutes (Tandem was down).
            t += if rng.below(20) == 0 {
                60 + rng.below(5000) as i64
            } else {
                10
            };
            let mut tick = Vec::new();
            for (i, n) in names.iter().enumerate() {
                // Some series skip some ticks; values with fractions and negatives.
                if rng.below(5) == 0 {
                    continue;
                }
                let v = (rng.below(2_000_001) as f64 - 1_000_000.0) / 1000.0;
                tick.push((n.as_str(), v));
                sent[i].push((t, v));
            }
            h.record(t, &tick).unwrap();
            // A restart now and then, in the middle of whatever buckets are open.
            if rng.below(30) == 0 {
                drop(h);
                h = History::open(&path, cfg.clone()).unwrap();
            }
        }
        for (i, n) in names.iter().enumerate() {
            for (level, l) in cfg.levels.iter().enumerate() {
                let want = recompute(&sent[i], l.width_s);
                let got = h.points(n, level, i64::MIN / 2, i64::MAX).unwrap();
                assert_eq!(got.len(), want.len(), "seed {seed} {n} level {}", l.name);
                for (g, w) in got.iter().zip(&want) {
                    let what = format!("seed {seed} {n} level {} bucket {}", l.name, w.start_s);
                    assert_eq!(g.t_s, w.start_s, "{what}");
                    assert_eq!(g.count, w.count, "{what}");
                    assert_eq!((g.min, g.max, g.last), (w.min, w.max, w.last), "{what}");
                    assert_eq!(g.avg, w.avg(), "{what}: the same sum in the same order");
                }
            }
        }
    }
}

#[test]
fn a_tick_costs_the_same_rows_whatever_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..50).map(|i| format!("series_{i}")).collect();
    let t0 = 1_700_000_040; // a minute boundary
    // One history empty, one with 3 days of closed 1-minute and 1-hour buckets behind it.
    let mut short =
        History::open(&dir.path().join("short.sqlite3"), HistoryConfig::default()).unwrap();
    let mut long =
        History::open(&dir.path().join("long.sqlite3"), HistoryConfig::default()).unwrap();
    let mut old = Vec::new();
    for n in &names {
        for (level, w) in [(1usize, 60i64), (2, 3600)] {
            let mut t = t0 - 3 * 86_400;
            while t < t0 - w {
                old.push((level, n.as_str(), Bucket::of(t, t, 1.0)));
                t += w;
            }
        }
    }
    long.import(&old).unwrap();
    let costs = |h: &mut History| -> Vec<(u64, u64)> {
        (0..120)
            .map(|k| {
                let t = t0 + 10 * k;
                let tick: Vec<(&str, f64)> = names.iter().map(|n| (n.as_str(), k as f64)).collect();
                let c = h.record(t, &tick).unwrap();
                (c.read, c.written)
            })
            .collect()
    };
    let (a, b) = (costs(&mut short), costs(&mut long));
    // The first tick looks up each series (the import already did, in the long one) and its
    // open buckets; after it, the same ticks cost the same rows on either history.
    assert_eq!((a[0].0, b[0].0), (50 + 50 * 4, 50 * 4));
    assert_eq!(
        a[1..],
        b[1..],
        "the same ticks cost the same rows on 3 days of history"
    );
    // Nothing is read; each tick writes the 4 open buckets of 50 series, plus the buckets that
    // close: every raw one, and the minute's at each minute.
    assert!(a[1..].iter().all(|c| c.0 == 0));
    assert_eq!(a[1].1, 50 * 4 + 50);
    assert_eq!(a[6].1, 50 * 4 + 50 + 50, "a minute closed");
}

#[test]
fn a_chart_reads_at_most_about_a_thousand_points_and_always_now() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = History::open(&dir.path().join("h.sqlite3"), HistoryConfig::default()).unwrap();
    let now = 1_700_000_000;
    h.record(now, &[("calls", 3.0)]).unwrap();
    let cases = [
        (3600, "raw"),
        (6 * 3600, "1m"),
        // 1,440 one-minute buckets: "about 1,000", where 1-hour buckets would draw 24 points.
        (24 * 3600, "1m"),
        (7 * 86_400, "1h"),
        (30 * 86_400, "1h"),
        (365 * 86_400, "1d"),
    ];
    for (span, level) in cases {
        let d = h.query("calls", now - span, now + 1, 1000).unwrap();
        assert_eq!(d.level, level, "a range of {span} s");
        assert!(span as u64 / u64::from(d.width_s) <= 1500);
        // The open bucket holds the sample just taken.
        assert_eq!(d.points.last().map(|p| p.last), Some(3.0), "{level}");
    }
    // A range older than the raw level keeps is read from a level that still has it.
    let old = h.level_for(now - 3 * 86_400, now - 3 * 86_400 + 3600, 1000);
    assert_eq!(h.config().levels[old].name, "1m");
    assert!(
        h.query("nothing", now - 60, now, 1000)
            .unwrap()
            .points
            .is_empty()
    );
}

#[test]
fn retention_drops_old_ranges_per_level() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = History::open(&dir.path().join("h.sqlite3"), HistoryConfig::default()).unwrap();
    let t0 = 1_700_000_000;
    for day in 0..4 {
        h.record(t0 + day * 86_400, &[("x", 1.0)]).unwrap();
    }
    let now = t0 + 3 * 86_400;
    // Raw samples are kept 48 h: the first day's goes (the one exactly 48 h old stays); the
    // other levels keep theirs.
    assert_eq!(h.retain(now).unwrap(), 1);
    assert_eq!(h.points("x", 0, 0, i64::MAX).unwrap().len(), 3);
    assert_eq!(h.points("x", 3, 0, i64::MAX).unwrap().len(), 4);
}

#[test]
fn bad_samples_and_changed_levels_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite3");
    let mut h = History::open(&path, HistoryConfig::default()).unwrap();
    h.record(1_000, &[("x", f64::NAN), ("y", 1.0)]).unwrap();
    // A sample from before the open bucket (the clock went back) is refused, not merged.
    h.record(900, &[("y", 2.0)]).unwrap();
    assert_eq!(h.rejected, 2);
    assert_eq!(h.series_names().unwrap(), ["y"]);
    drop(h);
    let Err(e) = History::open(&path, HistoryConfig::with_interval(15)) else {
        panic!("opened with other levels")
    };
    let text = e.to_string();
    assert!(
        text.contains("[10, 60, 3600, 86400]") && text.contains("[15, 60"),
        "{text}"
    );
    let mut bad = HistoryConfig::default();
    bad.levels[1].width_s = 45;
    assert!(History::open(&dir.path().join("b.sqlite3"), bad).is_err());
}

/// Latency sketches compose as sums do: at every level, each bucket's sketch answers as the
/// sketch of every latency observed in it, across restarts, and a range's quantiles are those
/// of all its latencies.
#[test]
fn latency_sketches_equal_a_recomputation_from_the_raw_latencies_across_restarts() {
    use history::LatencySketch;
    let dir = tempfile::tempdir().unwrap();
    for seed in 1..=15u64 {
        let path = dir.path().join(format!("q{seed}.sqlite3"));
        let cfg = small_levels();
        let mut rng = Rng(seed * 104_729);
        let mut h = History::open(&path, cfg.clone()).unwrap();
        let mut sent: Vec<(i64, f64, u64)> = Vec::new();
        let mut t = 1_700_000_000 + rng.below(3600) as i64;
        for _ in 0..50 + rng.below(300) {
            t += if rng.below(20) == 0 {
                60 + rng.below(5000) as i64
            } else {
                10
            };
            // A few latencies per tick, from 100 µs to 10 s, each seen a few times.
            let observed: Vec<(f64, u64)> = (0..rng.below(6))
                .map(|_| {
                    let v = 10f64.powf(-4.0 + 5.0 * rng.below(10_000) as f64 / 10_000.0);
                    (v, 1 + rng.below(50))
                })
                .collect();
            for &(v, n) in &observed {
                sent.push((t, v, n));
            }
            h.record_tick(t, &[], &[("agi_seconds", &observed)])
                .unwrap();
            if rng.below(30) == 0 {
                drop(h);
                h = History::open(&path, cfg.clone()).unwrap();
            }
        }
        for (level, l) in cfg.levels.iter().enumerate() {
            let got = h
                .sketches("agi_seconds", level, i64::MIN / 2, i64::MAX)
                .unwrap();
            let mut want: Vec<(i64, LatencySketch)> = Vec::new();
            for &(t, v, n) in &sent {
                let start = bucket_start(t, l.width_s);
                if want.last().is_none_or(|(s, _)| *s != start) {
                    want.push((start, LatencySketch::new()));
                }
                want.last_mut().unwrap().1.add(v, n);
            }
            // Buckets whose ticks observed nothing have an empty sketch; the plain way has none.
            let got: Vec<_> = got.into_iter().filter(|(_, k)| k.count() > 0).collect();
            let want: Vec<_> = want.into_iter().filter(|(_, k)| k.count() > 0).collect();
            assert_eq!(got.len(), want.len(), "seed {seed} level {}", l.name);
            for ((gt, g), (wt, w)) in got.iter().zip(&want) {
                assert_eq!(gt, wt, "seed {seed} level {}", l.name);
                assert_eq!(
                    g.count(),
                    w.count(),
                    "seed {seed} level {} bucket {gt}",
                    l.name
                );
                for q in [0.5, 0.9, 0.99] {
                    assert_eq!(
                        g.quantile(q),
                        w.quantile(q),
                        "seed {seed} {} {gt} p{q}",
                        l.name
                    );
                }
            }
        }
        // The whole range: the merge of the buckets is the sketch of every latency.
        let mut all = LatencySketch::new();
        for &(_, v, n) in &sent {
            all.add(v, n);
        }
        let range = h
            .quantiles(
                "agi_seconds",
                i64::MIN / 4,
                i64::MAX / 4,
                1000,
                &[0.5, 0.99],
            )
            .unwrap();
        assert_eq!(range.count, all.count(), "seed {seed}");
        assert_eq!(
            range.whole,
            vec![all.quantile(0.5), all.quantile(0.99)],
            "seed {seed}"
        );
    }
}
