//! The dialparties decision over made-up channel variables, astdb values, hints and contacts,
//! member lists such as `{-7135689715#}` included. It may not panic, and the dial strings it
//! sets may hold Asterisk's separators (`,` between Dial's arguments, `&` between channels) and
//! line ends only where it puts them, unless the values it read had them.
#![no_main]

use agi_routes::dialparties::{self, Call, Facts, Fix, Rules, Shuffle, Version, decide};
use libfuzzer_sys::fuzz_target;

/// Values cut from the input in turn: each read takes the next piece (to the next `\x1f`),
/// and the pieces run round.
struct Input {
    pieces: Vec<String>,
    next: usize,
    seen: String,
}

impl Input {
    fn take(&mut self) -> String {
        if self.pieces.is_empty() {
            return String::new();
        }
        let v = self.pieces[self.next % self.pieces.len()].clone();
        self.next += 1;
        self.seen.push_str(&v);
        v
    }
}

impl Facts for Input {
    fn var(&mut self, name: &str) -> String {
        // Follow a real macro-dial call often enough to reach the members.
        match name {
            "ARG5" | "ARG6" | "ARG7" => String::new(),
            _ => self.take(),
        }
    }
    fn db(&mut self, _: &str, _: &str) -> String {
        self.take()
    }
    fn state(&mut self, _: &str) -> String {
        let words = ["NOT_INUSE", "INUSE", "BUSY", "UNAVAILABLE", "RINGING", "ONHOLD", ""];
        let i = self.next % words.len();
        self.next += 1;
        words[i].to_string()
    }
    fn contacts(&mut self, _: &str) -> String {
        self.take()
    }
}

struct Rotate;
impl Shuffle for Rotate {
    fn shuffle(&mut self, members: &mut [String]) {
        members.rotate_left(members.len().min(1));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let pieces: Vec<String> = text.split('\x1f').map(str::to_string).collect();
    let version = if flags & 1 == 0 { Version::V16 } else { Version::V17 };
    let fixes: Vec<Fix> = Fix::ALL
        .iter()
        .enumerate()
        .filter(|(i, _)| flags >> (i + 1) & 1 == 1)
        .map(|(_, f)| *f)
        .collect();
    let rules = Rules {
        version,
        fixes,
        notes: flags & 0x80 != 0,
    };
    let call = Call {
        callerid: pieces.first().cloned().unwrap_or_default(),
        calleridname: "x".into(),
        channel: "Local/1@x;2".into(),
        now_s: 1_790_000_000,
    };
    let mut input = Input {
        pieces,
        next: 1,
        seen: String::new(),
    };
    let d = decide(&call, &rules, &mut input, &mut Rotate);
    let input_had = |c: char| input.seen.contains(c) || call.callerid.contains(c);
    for a in &d.actions {
        let dialparties::Action::Set { name, value } = a else {
            continue;
        };
        if !input_had('\n') && !input_had('\r') {
            assert!(!value.contains(['\n', '\r']), "{name} = {value:?}");
        }
        if name == "ds" && !input_had(',') && !d.actions.iter().any(|a| matches!(a, dialparties::Action::Set { name, .. } if name == "dsextra")) {
            // Dial's three arguments: channels, ring time, options.
            assert_eq!(value.matches(',').count(), 2, "ds = {value:?}");
        }
        if name.starts_with("HuntMember") && name != "HuntMembers" {
            if !input_had(',') {
                assert!(!value.contains(','), "{name} = {value:?}");
            }
            if !input_had('&') {
                // One member, one channel, unless memoryhunt adds the earlier ones.
                let memory = input.seen.contains("memoryhunt");
                assert!(memory || !value.contains('&'), "{name} = {value:?}");
            }
        }
    }
});
