//! ARCHITECTURE.md is the code map: it must name every crate, and only crates that exist.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn the_code_map_has_an_entry_for_every_crate_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let crates: BTreeSet<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let entries: BTreeSet<String> = map
        .lines()
        .filter_map(|l| l.strip_prefix("## `crates/"))
        .filter_map(|l| l.split('`').next())
        .map(|name| name.trim_end_matches('/').to_string())
        .collect();
    let missing: Vec<_> = crates.difference(&entries).collect();
    let stale: Vec<_> = entries.difference(&crates).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md: crates without an entry {missing:?}; entries without a crate {stale:?}"
    );
}
