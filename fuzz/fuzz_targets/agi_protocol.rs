//! The AGI protocol parsers on arbitrary bytes: the session header, reply lines (including the
//! multi-line 520 state), Asterisk's argument splitter, the command name of a line, and the
//! property that encoding any argument without control characters survives Asterisk's parser
//! unchanged.
#![no_main]

use agi::{Command, Header, HeaderLimits, ReplyParser, split_args};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = HeaderLimits { max_line_bytes: 512, max_variables: 64 };
    if let Ok(h) = Header::parse(data, limits) {
        // Whatever parsed must re-encode and parse to the same header.
        let again = Header::parse(h.encode(true).as_bytes(), HeaderLimits::default())
            .expect("an encoded header parses");
        assert!(again.args().eq(h.args()));
        let _ = h.route();
    }

    let mut replies = ReplyParser::new(4096);
    for line in data.split(|&b| b == b'\n') {
        let _ = replies.push_line(line);
    }

    let text = String::from_utf8_lossy(data);
    let _ = split_args(&text);
    // What the script relay asks of a command line after a -1.
    if let Some(name) = agi::command_name(&text) {
        assert!(Command::NAMES.contains(&name));
        let _ = agi::needs_live_channel(name);
    }
    let arg: String = text.chars().filter(|c| !matches!(c, '\r' | '\n' | '\0')).collect();
    let line = Command::set_variable("V", arg.clone()).encode().expect("no control characters");
    let words = split_args(line.trim_end_matches('\n')).expect("four words");
    assert_eq!(words, ["SET", "VARIABLE", "V", arg.as_str()]);
});
