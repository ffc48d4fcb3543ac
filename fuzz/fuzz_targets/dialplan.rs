//! The emulator's dialplan reader and expression evaluator on arbitrary text: loading never
//! panics and refuses what pbx_config refuses, every extension it finds by name is found again,
//! and substitution (with `$[...]` expressions) of any line ends with a value.
#![no_main]

use asterisk_emu::{Channel, Dialplan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let d = Dialplan::load(&[("fuzz.conf", &text)]);
    for (name, context) in &d.contexts {
        for (exten, _) in &context.extensions {
            if !exten.starts_with('_') {
                assert!(d.find(name, exten).is_some(), "{exten}@{name}");
            }
        }
    }
    let mut channel = Channel::new("Local/fuzz@test;2", "1.1");
    for line in text.lines().take(64) {
        let _ = channel.substitute(line);
    }
    let _ = asterisk_emu::dialplan::expr::evaluate(&text);
});
