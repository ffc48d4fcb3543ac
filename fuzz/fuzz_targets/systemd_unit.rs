//! A systemd unit and its drop-ins as `tandem doctor` reads them (the files, or `systemctl
//! show`'s answer): never panics, and what it grants can be asked of any name.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // NUL separates the unit file from its drop-ins.
    let texts: Vec<String> = text.split('\0').map(str::to_string).collect();
    let from_files = doctor::unit::parse_unit("fuzz".into(), &texts);
    let shown = doctor::unit::parse_show("tandem.service", &text);
    for g in [Some(from_files), shown].into_iter().flatten() {
        for cap in ["CAP_NET_RAW", "CAP_SETUID", "CAP_NET_BIND_SERVICE"] {
            let _ = g.has_capability(cap);
        }
        let _ = g.address_families.contains("AF_PACKET");
        assert!(g.state_directories.iter().all(|d| d.starts_with("/var/lib")));
    }
});
