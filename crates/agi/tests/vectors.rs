//! Replays every FastAGI transcript recorded against a real Asterisk 22.10.1
//! (`../shared/vectors/agi/`): the header parses to exactly the variables on the wire, and each
//! reply parses, in order, to the result its command should have.
//!
//! The transcripts live beside the repository (CI has them); a clone without them skips, saying so.

use agi::{ChannelStatus, Event, Header, HeaderLimits, ReplyParser, Response};
use std::path::PathBuf;

fn vectors_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("TANDEM_SHARED_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    }
    .join("vectors/agi");
    if dir.is_dir() {
        Some(dir)
    } else {
        test_env::skip(&format!(
            "no AGI vectors at {} (set TANDEM_SHARED_DIR)",
            dir.display()
        ));
        None
    }
}

/// A session as recorded: the header, and each command with the events that answered it.
struct Transcript {
    header: Header,
    header_lines: Vec<(String, String)>,
    exchanges: Vec<(String, Vec<Event>)>,
    hangups: usize,
}

fn load(dir: &std::path::Path, name: &str) -> Transcript {
    let from = std::fs::read(dir.join(format!("{name}.from_asterisk.bin"))).unwrap();
    let to = std::fs::read(dir.join(format!("{name}.to_asterisk.bin"))).unwrap();
    let txt = std::fs::read_to_string(dir.join(format!("{name}.txt"))).unwrap();

    let header = Header::parse(&from, HeaderLimits::default()).unwrap();
    let end = from.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    let header_lines = txt
        .lines()
        .filter_map(|l| l.strip_prefix(">>> "))
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_string(), v.to_string())
        })
        .collect();

    // Commands as the server wrote them; the last one may lack its newline (S11).
    let commands: Vec<String> = String::from_utf8(to)
        .unwrap()
        .split_inclusive('\n')
        .map(|l| l.trim_end_matches('\n').to_string())
        .collect();
    let mut exchanges: Vec<(String, Vec<Event>)> =
        commands.into_iter().map(|c| (c, Vec::new())).collect();
    let mut parser = ReplyParser::default();
    let (mut current, mut hangups) = (0, 0);
    for line in from[end..].split_inclusive(|&b| b == b'\n') {
        match parser
            .push_line(line)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
        {
            None => {}
            Some(Event::Hangup) => hangups += 1,
            Some(e @ Event::Trying(_)) => exchanges[current].1.push(e),
            Some(e @ Event::Response(_)) => {
                exchanges[current].1.push(e);
                current += 1;
            }
        }
    }
    assert!(!parser.in_usage(), "{name}: usage text left open");
    assert_eq!(
        current,
        exchanges.len(),
        "{name}: every command has exactly one final reply"
    );
    Transcript {
        header,
        header_lines,
        exchanges,
        hangups,
    }
}

fn success(events: &[Event]) -> &agi::Reply {
    match events.last() {
        Some(Event::Response(Response::Success(r))) => r,
        other => panic!("expected 200, got {other:?}"),
    }
}

#[test]
fn every_transcript_header_and_reply_parses() {
    let Some(dir) = vectors_dir() else { return };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".from_asterisk.bin").map(str::to_string))
        .filter(|n| {
            std::fs::metadata(dir.join(format!("{n}.from_asterisk.bin")))
                .unwrap()
                .len()
                > 0
        })
        .collect();
    names.sort();
    assert!(
        names.len() >= 12,
        "expected the S01-S14 transcripts, found {names:?}"
    );
    for name in &names {
        let t = load(&dir, name);
        let got: Vec<(String, String)> = t
            .header
            .vars()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            got, t.header_lines,
            "{name}: header variables, in order, exactly"
        );
        assert!(t.header.is_network(), "{name}");
        assert_eq!(t.header.version(), "22.10.1", "{name}");
        // Re-encoding gives back the bytes Asterisk sent.
        let from = std::fs::read(dir.join(format!("{name}.from_asterisk.bin"))).unwrap();
        assert!(
            from.starts_with(t.header.encode(true).as_bytes()),
            "{name}: header round trip"
        );
        let txt = std::fs::read_to_string(dir.join(format!("{name}.txt"))).unwrap();
        let recorded_hangups = txt.lines().filter(|l| *l == ">>> HANGUP").count();
        assert_eq!(t.hangups, recorded_hangups, "{name}: HANGUP lines");
    }
}

#[test]
fn s01_every_reply_has_its_typed_meaning() {
    let Some(dir) = vectors_dir() else { return };
    let t = load(&dir, "S01_full_command_sequence");
    let route = t.header.route();
    assert_eq!(route.path, "myscript");
    assert_eq!(route.param("x"), Some("1"));
    assert_eq!(t.header.args().collect::<Vec<_>>(), ["first arg", "second"]);
    assert_eq!(t.header.channel(), "Local/100@agitest-00000001;2");
    assert_eq!(t.header.accountcode(), "");

    let by_cmd = |cmd: &str, nth: usize| -> &Vec<Event> {
        &t.exchanges
            .iter()
            .filter(|(c, _)| c == cmd)
            .nth(nth)
            .unwrap_or_else(|| panic!("{cmd}"))
            .1
    };
    let var = |cmd: &str| success(by_cmd(cmd, 0)).variable().map(str::to_string);
    assert_eq!(
        var("GET VARIABLE CHANNEL").as_deref(),
        Some("Local/100@agitest-00000001;2")
    );
    assert_eq!(var("GET VARIABLE NOSUCHVAR"), None);
    assert_eq!(var("GET VARIABLE FOO").as_deref(), Some("bar baz"));
    assert_eq!(var("GET FULL VARIABLE ${FOO}").as_deref(), Some("bar baz"));
    assert_eq!(var("GET FULL VARIABLE ${NOSUCHVAR}").as_deref(), Some(""));
    assert_eq!(
        var("GET FULL VARIABLE ${CHANNEL(state)}").as_deref(),
        Some("Up")
    );
    assert_eq!(var("GET VARIABLE PAREN").as_deref(), Some("a)b(c"));
    assert_eq!(var("DATABASE GET fam key").as_deref(), Some("value"));
    assert_eq!(var("DATABASE GET fam nokey"), None);
    assert_eq!(
        success(by_cmd("CHANNEL STATUS", 0)).channel_status(),
        Some(ChannelStatus::Up)
    );
    assert_eq!(
        success(by_cmd("CHANNEL STATUS Local/nosuch-00000000;1", 0)).channel_status(),
        Some(ChannelStatus::NoSuchChannel)
    );
    assert_eq!(
        success(by_cmd("EXEC NoSuchApp foo", 0)).result_int(),
        Some(-2)
    );
    assert_eq!(success(by_cmd("DATABASE DELTREE fam", 0)).result, "0");
    assert_eq!(success(by_cmd("DATABASE DELTREE fam", 1)).result, "1");

    let gosub = by_cmd("GOSUB agitest sub 1 gosubarg", 0);
    assert!(matches!(&gosub[0], Event::Trying(r) if r.note.as_deref() == Some("Trying...")));
    assert_eq!(success(gosub).note.as_deref(), Some("Gosub complete"));

    for unknown in ["NOOP\r", "FOOBAR"] {
        assert_eq!(
            by_cmd(unknown, 0),
            &[Event::Response(Response::InvalidCommand)]
        );
    }
    for usage_of in ["DATABASE GET", "GET VARIABLE"] {
        match by_cmd(usage_of, 0).as_slice() {
            [Event::Response(Response::Usage { usage: Some(text) })] => {
                assert!(text.contains("Example return code: 200 result=1 (testvariable)"))
            }
            other => panic!("{usage_of}: {other:?}"),
        }
    }
    let stream = success(by_cmd("STREAM FILE nosuchfile \"\"", 0));
    assert_eq!((stream.result_int(), stream.endpos), (Some(-1), Some(0)));
    assert_eq!(success(by_cmd("WAIT FOR DIGIT 1", 0)).digit(), None);
    // After the HANGUP command: ANSWER and STREAM FILE are refused, GET VARIABLE still works.
    assert_eq!(
        by_cmd("ANSWER", 1),
        &[Event::Response(Response::DeadChannel)]
    );
    assert_eq!(
        by_cmd("STREAM FILE nosuchfile \"\"", 1),
        &[Event::Response(Response::DeadChannel)]
    );
    assert!(
        success(by_cmd("GET VARIABLE CHANNEL", 1))
            .variable()
            .is_some()
    );
    assert_eq!(
        t.hangups, 2,
        "one for the hangup, one when the session ended"
    );
}

#[test]
fn odd_arguments_and_missing_script_path() {
    let Some(dir) = vectors_dir() else { return };
    let t = load(&dir, "S10_no_script_odd_args");
    assert_eq!(t.header.network_script(), None);
    assert_eq!(t.header.route().path, "");
    assert_eq!(
        t.header.args().collect::<Vec<_>>(),
        ["", "a b ", ",comma", "quoted", "x=y&z"]
    );

    let t = load(&dir, "S02_script_path_query_and_args");
    let r = t.header.route();
    assert_eq!(
        (r.path.as_str(), r.param("a"), r.param("b")),
        ("some/script.php", Some("1"), Some("two"))
    );
    assert_eq!(t.header.args().collect::<Vec<_>>(), ["arg one", "arg2"]);
}

#[test]
fn hangup_during_a_command_and_media_failures() {
    let Some(dir) = vectors_dir() else { return };
    let t = load(&dir, "S07_caller_hangup_during_command");
    assert_eq!(
        success(&t.exchanges[1].1).result_int(),
        Some(-1),
        "WAIT FOR DIGIT ends with -1"
    );
    assert_eq!(t.exchanges[3].1, [Event::Response(Response::DeadChannel)]);
    assert_eq!(t.hangups, 2);

    let t = load(&dir, "S08_caller_hangup_AGISIGHUP_no");
    assert_eq!(t.hangups, 0, "AGISIGHUP=no suppresses every HANGUP line");

    let t = load(&dir, "S13_misc_media_commands_without_sounds");
    let get_data = t
        .exchanges
        .iter()
        .find(|(c, _)| c.starts_with("GET DATA"))
        .unwrap();
    assert_eq!(success(&get_data.1).get_data(), None);
    let ctrl = t
        .exchanges
        .iter()
        .find(|(c, _)| c.starts_with("CONTROL STREAM"))
        .unwrap();
    assert_eq!(success(&ctrl.1).endpos, Some(-1));
    let recv = t
        .exchanges
        .iter()
        .find(|(c, _)| c.starts_with("RECEIVE CHAR"))
        .unwrap();
    assert_eq!(success(&recv.1).data.as_deref(), Some("hangup"));
}

#[test]
fn pipelined_and_unterminated_commands_still_pair_with_replies() {
    let Some(dir) = vectors_dir() else { return };
    let t = load(&dir, "S12_pipelined_commands");
    assert_eq!(t.exchanges.len(), 4);
    assert_eq!(success(&t.exchanges[3].1).variable(), Some("1"));
    let t = load(&dir, "S11_last_command_without_newline");
    assert_eq!(t.exchanges.last().unwrap().0, "GET VARIABLE CHANNEL");
    assert!(success(&t.exchanges.last().unwrap().1).variable().is_some());
}
