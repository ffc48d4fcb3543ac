//! The emulator's header has Asterisk's variables in Asterisk's order (`shared/vectors/agi`).

use std::net::SocketAddr;

fn names(header: &str) -> Vec<String> {
    header
        .lines()
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_once(':').unwrap().0.to_string())
        .collect()
}

#[test]
fn same_variables_in_the_same_order_as_a_real_asterisk() {
    let Some(shared) = asterisk_emu::shared_dir() else {
        test_env::skip("no shared/ beside the repository (set TANDEM_SHARED_DIR)");
        return;
    };
    let real =
        std::fs::read(shared.join("vectors/agi/S01_full_command_sequence.from_asterisk.bin"))
            .unwrap();
    let real = String::from_utf8_lossy(&real);
    let plan = asterisk_emu::Plan {
        script: "myscript?x=1".into(),
        args: vec!["first arg".into(), "second".into()],
        ..Default::default()
    };
    let addr: SocketAddr = "127.0.0.1:4573".parse().unwrap();
    let channel = asterisk_emu::Channel::new("Local/100@agitest-00000001;2", "1795239019.3");
    let ours = asterisk_emu::header(&plan, addr, &channel, 1);
    assert_eq!(names(&ours), names(&real));
    let parsed = agi::Header::parse(ours.as_bytes(), agi::HeaderLimits::default()).unwrap();
    assert_eq!(parsed.request(), "agi://127.0.0.1:4573/myscript?x=1");
    assert_eq!(parsed.args().collect::<Vec<_>>(), ["first arg", "second"]);
    assert_eq!(parsed.get("agi_accountcode"), Some(""));
}
