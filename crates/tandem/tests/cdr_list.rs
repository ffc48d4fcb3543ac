//! `tandem cdr list --number` reads numbers as the console's search does: `1001` is that number,
//! `12*` starts with, `*89` ends with, `a,b` is any of, `!a` none of, on the caller's or the
//! called's side. Checked against a plain reading of the same rules over synthetic calls.

use std::collections::BTreeSet;
use std::process::Command;

/// The Call-IDs `tandem cdr list --json --limit 0 ARGS` prints.
fn listed(db: &std::path::Path, args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["cdr", "list", "--json", "--limit", "0"])
        .args(args)
        .arg("--cdr-db")
        .arg(db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["call_id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn number_is_the_consoles_syntax_on_either_side() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let start = 1_780_000_000_000_000i64;
    let calls: Vec<cdr::CdrCall> =
        cdr::seed::synthetic_calls(3000, start, start + 86_400_000_000, 7)
            .filter_map(|r| r.call)
            .collect();
    cdr::seed::bulk_load_sqlite(
        &db,
        cdr::seed::synthetic_calls(3000, start, start + 86_400_000_000, 7),
    )
    .unwrap();
    let expect = |keep: &dyn Fn(&str) -> bool, both: bool| -> BTreeSet<String> {
        calls
            .iter()
            .filter(|c| {
                if both {
                    keep(&c.caller) && keep(&c.called)
                } else {
                    keep(&c.caller) || keep(&c.called)
                }
            })
            .map(|c| c.call_id.clone())
            .collect()
    };

    // A number that others contain: "contains" would find more than the number itself.
    let numbers: BTreeSet<&str> = calls
        .iter()
        .flat_map(|c| [c.caller.as_str(), c.called.as_str()])
        // A `*` in a stored number (`*97`) reads as a wildcard in the syntax.
        .filter(|n| n.len() >= 3 && !n.contains('*'))
        .collect();
    let exact = numbers
        .iter()
        .copied()
        .find(|n| numbers.iter().any(|m| m != n && m.contains(*n)))
        .expect("a number inside another");
    let one = expect(&|n| n == exact, false);
    assert!(!one.is_empty());
    assert_eq!(listed(&db, &["--number", exact]), one, "--number {exact}");
    assert_ne!(one, expect(&|n| n.contains(exact), false));

    let head = &exact[..2];
    assert_eq!(
        listed(&db, &["--number", &format!("{head}*")]),
        expect(&|n| n.starts_with(head), false)
    );
    let tail = &exact[exact.len() - 2..];
    assert_eq!(
        listed(&db, &["--number", &format!("*{tail}")]),
        expect(&|n| n.ends_with(tail), false)
    );
    let other = numbers.iter().copied().find(|n| *n != exact).unwrap();
    let list = format!("{exact},{other}");
    assert_eq!(
        listed(&db, &["--number", &list]),
        expect(&|n| n == exact || n == other, false)
    );
    assert_eq!(
        listed(&db, &["--number", &format!("!{list}")]),
        expect(&|n| n != exact && n != other, true)
    );

    // A filter the search refuses is an error naming the option.
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["cdr", "list", "--number", "12 34", "--cdr-db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--number: the character ' '"),
        "{out:?}"
    );
}

/// `tandem report` over calls stored before their group was configured: `--rebuild` counts
/// them into the groups of tandem.toml, and the report's calls are the group's calls (its
/// network on either side), per day as JSON, CSV and a table.
#[test]
fn report_counts_a_groups_calls_per_day() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cdr.sqlite3");
    let day = 86_400_000_000i64;
    let start = 1_780_012_800_000_000i64 / day * day;
    let records = || cdr::seed::synthetic_calls(3000, start, start + 2 * day, 7);
    cdr::seed::bulk_load_sqlite(&db, records()).unwrap();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        "[[groups]]\nname = \"carrier\"\naddresses = [\"203.0.113.10/31\"]\n",
    )
    .unwrap();
    let tandem = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .arg("report")
            .args(args)
            .arg("--cdr-db")
            .arg(&db)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(tandem(&["--groups"]), "all\n");
    let rebuilt = tandem(&["--rebuild", "--config", config.to_str().unwrap()]);
    assert!(rebuilt.starts_with("3000 calls counted again"), "{rebuilt}");
    assert_eq!(tandem(&["--groups"]), "all\ncarrier\n");
    let range = [
        "--from",
        &format!("{}", start / 1_000_000),
        "--to",
        &format!("{}", (start + 2 * day) / 1_000_000),
    ];
    let json = tandem(&[&["--group", "carrier", "--json"][..], &range[..]].concat());
    let report: cdr::Report = serde_json::from_str(&json).unwrap();
    let trunk = |a: &str| a.starts_with("203.0.113.10:") || a.starts_with("203.0.113.11:");
    let want = records()
        .filter_map(|r| r.call)
        .filter(|c| trunk(&c.caller_addr) || trunk(&c.callee_addr))
        .count() as u64;
    assert!(want > 100, "{want}");
    assert_eq!(report.total.calls, want);
    assert_eq!(report.rows.len(), 2);
    assert_eq!(report.rows.iter().map(|r| r.calls).sum::<u64>(), want);
    let csv = tandem(&[&["--group", "carrier", "--csv"][..], &range[..]].concat());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], cdr::ReportRow::COLUMNS.join(","));
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(lines[3].starts_with("total,"), "{csv}");
    let table = tandem(&[&["--group", "carrier"][..], &range[..]].concat());
    assert!(
        table.contains("group carrier per day") && table.contains("total"),
        "{table}"
    );
    // A group that is not configured has no calls; a bad period is refused by name.
    let none = tandem(&[&["--group", "nowhere", "--json"][..], &range[..]].concat());
    let none: cdr::Report = serde_json::from_str(&none).unwrap();
    assert_eq!(none.total.calls, 0);
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["report", "--period", "month", "--cdr-db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("hour, day, week"));
}
