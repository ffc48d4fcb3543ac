//! What narrowing an older release's archive costs at the first start after an upgrade:
//! `DAYS` days of minute directories (`DAYS/HH/MM`, 1,440 a day) with a `sip.tar` and an
//! `rtp.tar` each, all 0755/0644, narrowed by `secure_tree`; then the same walk again, which
//! finds everything right (what a start would cost if it always walked).
//!
//! `cargo run --release -p filemode --example secure_tree_cost -- DAYS DIR`

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let days: u32 = args.get(1).and_then(|d| d.parse().ok()).unwrap_or(10);
    let base = args.get(2).map_or_else(std::env::temp_dir, Into::into);
    let root = base.join(format!("secure-tree-cost-{}", std::process::id()));
    let open_dir = std::fs::Permissions::from_mode(0o755);
    let open_file = std::fs::Permissions::from_mode(0o644);
    for day in 0..days {
        for hour in 0..24 {
            for minute in 0..60 {
                let dir = root.join(format!("2026-11-{:02}/{hour:02}/{minute:02}", day + 1));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::set_permissions(&dir, open_dir.clone()).unwrap();
                for name in ["sip.tar", "rtp.tar"] {
                    std::fs::write(dir.join(name), b"").unwrap();
                    std::fs::set_permissions(dir.join(name), open_file.clone()).unwrap();
                }
            }
        }
    }
    let private = filemode::Access::Private;
    for pass in ["narrowing", "already right"] {
        let t = Instant::now();
        let report = filemode::secure_tree(&root, &private, 3).unwrap();
        println!(
            "{days} days ({} minute dirs): {pass}: {:.0} ms, {report:?}",
            days * 1440,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
