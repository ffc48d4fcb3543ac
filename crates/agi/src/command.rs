//! Typed builders for every AGI command, and their encoding.
//!
//! Arguments are written so that Asterisk's parser ([`crate::split_args`]) gives them back
//! exactly: a word with no space, tab, quote or backslash goes bare; anything else (the empty
//! argument included) is wrapped in `"..."` with `"` and `\` escaped by a backslash. A CR, LF or
//! NUL cannot be carried by the line protocol at all (a newline would start a second command), so
//! such an argument is refused rather than altered.

use crate::args::MAX_WORDS;
use std::borrow::Cow;

/// Most words one encoded command may have; Asterisk drops the rest.
pub const MAX_COMMAND_ARGS: usize = MAX_WORDS;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("argument {index} of {command} contains a control character (CR, LF or NUL): {arg:?}")]
    ControlCharacter {
        command: &'static str,
        index: usize,
        arg: String,
    },
    #[error("{command} has {words} words; Asterisk reads at most {MAX_COMMAND_ARGS}")]
    TooManyWords { command: &'static str, words: usize },
}

/// `TDD MODE` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TddMode {
    On,
    Off,
    Tdd,
    Mate,
}

/// One AGI command. Field names carry units; optional trailing arguments are `Option`s, and an
/// optional argument left out before one that is given is filled with Asterisk's own default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Answer,
    AsyncAgiBreak,
    ChannelStatus {
        channel: Option<String>,
    },
    ControlStreamFile {
        file: String,
        escape_digits: String,
        skip_ms: Option<u32>,
        forward_digit: Option<String>,
        rewind_digit: Option<String>,
        pause_digit: Option<String>,
        offset_ms: Option<u32>,
    },
    DatabaseDel {
        family: String,
        key: String,
    },
    DatabaseDelTree {
        family: String,
        keytree: Option<String>,
    },
    DatabaseGet {
        family: String,
        key: String,
    },
    DatabasePut {
        family: String,
        key: String,
        value: String,
    },
    /// `EXEC app options`: the options travel as one argument (commas separate the application's
    /// own arguments, as in dialplan).
    Exec {
        application: String,
        options: String,
    },
    GetData {
        file: String,
        timeout_ms: Option<u32>,
        max_digits: Option<u32>,
    },
    GetFullVariable {
        expression: String,
        channel: Option<String>,
    },
    GetOption {
        file: String,
        escape_digits: String,
        timeout_ms: Option<u32>,
    },
    GetVariable {
        name: String,
    },
    Gosub {
        context: String,
        extension: String,
        priority: String,
        args: Option<String>,
    },
    Hangup {
        channel: Option<String>,
    },
    Noop,
    ReceiveChar {
        timeout_ms: i32,
    },
    ReceiveText {
        timeout_ms: i32,
    },
    RecordFile {
        file: String,
        format: String,
        escape_digits: String,
        /// -1 records until hangup or an escape digit.
        timeout_ms: i32,
        offset_samples: Option<u32>,
        beep: bool,
        silence_s: Option<u32>,
    },
    SayAlpha {
        text: String,
        escape_digits: String,
    },
    SayDate {
        epoch_s: i64,
        escape_digits: String,
    },
    SayDateTime {
        epoch_s: i64,
        escape_digits: String,
        format: Option<String>,
        timezone: Option<String>,
    },
    SayDigits {
        digits: String,
        escape_digits: String,
    },
    SayNumber {
        number: String,
        escape_digits: String,
        gender: Option<String>,
    },
    SayPhonetic {
        text: String,
        escape_digits: String,
    },
    SayTime {
        epoch_s: i64,
        escape_digits: String,
    },
    SendImage {
        image: String,
    },
    SendText {
        text: String,
    },
    SetAutoHangup {
        seconds: u32,
    },
    SetCallerId {
        number: String,
    },
    SetContext {
        context: String,
    },
    SetExtension {
        extension: String,
    },
    SetMusic {
        on: bool,
        class: Option<String>,
    },
    SetPriority {
        priority: String,
    },
    SetVariable {
        name: String,
        value: String,
    },
    SpeechActivateGrammar {
        name: String,
    },
    SpeechCreate {
        engine: String,
    },
    SpeechDeactivateGrammar {
        name: String,
    },
    SpeechDestroy,
    SpeechLoadGrammar {
        name: String,
        path: String,
    },
    SpeechRecognize {
        prompt: String,
        timeout_ms: u32,
        offset_samples: Option<u32>,
    },
    SpeechSet {
        name: String,
        value: String,
    },
    SpeechUnloadGrammar {
        name: String,
    },
    StreamFile {
        file: String,
        escape_digits: String,
        offset_samples: Option<u32>,
    },
    TddMode {
        mode: TddMode,
    },
    Verbose {
        message: String,
        level: u8,
    },
    WaitForDigit {
        timeout_ms: i32,
    },
    /// A command line sent as it is (after the control-character check). For commands added by
    /// modules, or to reproduce a client byte for byte.
    Raw(String),
}

impl Command {
    /// The names of the 47 AGI commands, as Asterisk 22 lists them (`agi show commands`).
    pub const NAMES: [&'static str; 47] = [
        "ANSWER",
        "ASYNCAGI BREAK",
        "CHANNEL STATUS",
        "CONTROL STREAM FILE",
        "DATABASE DEL",
        "DATABASE DELTREE",
        "DATABASE GET",
        "DATABASE PUT",
        "EXEC",
        "GET DATA",
        "GET FULL VARIABLE",
        "GET OPTION",
        "GET VARIABLE",
        "GOSUB",
        "HANGUP",
        "NOOP",
        "RECEIVE CHAR",
        "RECEIVE TEXT",
        "RECORD FILE",
        "SAY ALPHA",
        "SAY DATE",
        "SAY DATETIME",
        "SAY DIGITS",
        "SAY NUMBER",
        "SAY PHONETIC",
        "SAY TIME",
        "SEND IMAGE",
        "SEND TEXT",
        "SET AUTOHANGUP",
        "SET CALLERID",
        "SET CONTEXT",
        "SET EXTENSION",
        "SET MUSIC",
        "SET PRIORITY",
        "SET VARIABLE",
        "SPEECH ACTIVATE GRAMMAR",
        "SPEECH CREATE",
        "SPEECH DEACTIVATE GRAMMAR",
        "SPEECH DESTROY",
        "SPEECH LOAD GRAMMAR",
        "SPEECH RECOGNIZE",
        "SPEECH SET",
        "SPEECH UNLOAD GRAMMAR",
        "STREAM FILE",
        "TDD MODE",
        "VERBOSE",
        "WAIT FOR DIGIT",
    ];

    /// The commands Asterisk still runs once the channel has hung up: those res_agi registers
    /// with its `dead` flag set (res_agi.c, the `commands` table). Every other command, GOSUB
    /// (app_stack) included, answers `511` on a dead channel.
    pub const DEAD_CHANNEL_NAMES: [&'static str; 13] = [
        "ASYNCAGI BREAK",
        "DATABASE DEL",
        "DATABASE DELTREE",
        "DATABASE GET",
        "DATABASE PUT",
        "EXEC",
        "GET FULL VARIABLE",
        "GET VARIABLE",
        "NOOP",
        "SET VARIABLE",
        "SPEECH DESTROY",
        "SPEECH UNLOAD GRAMMAR",
        "VERBOSE",
    ];

    /// True when the command needs a live channel: on a dead one Asterisk answers `511`, and
    /// a `-1` from it may mean that the caller hung up while it ran. False for the commands
    /// permitted on a dead channel and for lines that name no AGI command.
    pub fn needs_live_channel(&self) -> bool {
        match self {
            Command::Raw(line) => command_name(line).is_some_and(needs_live_channel),
            _ => needs_live_channel(self.parts().0),
        }
    }

    pub fn get_variable(name: impl Into<String>) -> Self {
        Command::GetVariable { name: name.into() }
    }
    pub fn set_variable(name: impl Into<String>, value: impl Into<String>) -> Self {
        Command::SetVariable {
            name: name.into(),
            value: value.into(),
        }
    }
    pub fn get_full_variable(expression: impl Into<String>) -> Self {
        Command::GetFullVariable {
            expression: expression.into(),
            channel: None,
        }
    }
    pub fn exec(application: impl Into<String>, options: impl Into<String>) -> Self {
        Command::Exec {
            application: application.into(),
            options: options.into(),
        }
    }
    pub fn verbose(message: impl Into<String>, level: u8) -> Self {
        Command::Verbose {
            message: message.into(),
            level,
        }
    }
    pub fn stream_file(file: impl Into<String>, escape_digits: impl Into<String>) -> Self {
        Command::StreamFile {
            file: file.into(),
            escape_digits: escape_digits.into(),
            offset_samples: None,
        }
    }
    pub fn database_get(family: impl Into<String>, key: impl Into<String>) -> Self {
        Command::DatabaseGet {
            family: family.into(),
            key: key.into(),
        }
    }
    pub fn database_put(
        family: impl Into<String>,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        Command::DatabasePut {
            family: family.into(),
            key: key.into(),
            value: value.into(),
        }
    }
    pub fn database_del(family: impl Into<String>, key: impl Into<String>) -> Self {
        Command::DatabaseDel {
            family: family.into(),
            key: key.into(),
        }
    }

    /// The command's name (for a raw command, its first word).
    pub fn name(&self) -> &str {
        match self {
            Command::Raw(line) => line.split([' ', '\t']).next().unwrap_or(""),
            _ => self.parts().0,
        }
    }

    /// True for GOSUB, which Asterisk answers first with `100 result=0 Trying...`.
    pub fn is_gosub(&self) -> bool {
        match self {
            Command::Gosub { .. } => true,
            Command::Raw(line) => line.trim_start().get(..5).is_some_and(|w| {
                w.eq_ignore_ascii_case("gosub") && line.trim_start()[5..].starts_with([' ', '\t'])
            }),
            _ => false,
        }
    }

    /// Appends the command line, `\n` included, to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if let Command::Raw(line) = self {
            if line.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
                return Err(EncodeError::ControlCharacter {
                    command: "raw command",
                    index: 0,
                    arg: line.clone(),
                });
            }
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
            return Ok(());
        }
        let (name, args) = self.parts();
        encode_words(name, args.iter().map(|a| a.as_ref()), out)
    }

    /// The command line with its `\n`.
    pub fn encode(&self) -> Result<String, EncodeError> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out)?;
        Ok(String::from_utf8(out).expect("encoding copies UTF-8 strings and ASCII"))
    }

    /// The command's name and its arguments in order, defaults filled in.
    fn parts(&self) -> (&'static str, Vec<Cow<'_, str>>) {
        use Command as C;
        fn s(v: &str) -> Cow<'_, str> {
            Cow::Borrowed(v)
        }
        fn n(v: i64) -> Cow<'static, str> {
            Cow::Owned(v.to_string())
        }
        match self {
            C::Answer => ("ANSWER", vec![]),
            C::AsyncAgiBreak => ("ASYNCAGI BREAK", vec![]),
            C::ChannelStatus { channel } => {
                ("CHANNEL STATUS", channel.iter().map(|v| s(v)).collect())
            }
            C::ControlStreamFile {
                file,
                escape_digits,
                skip_ms,
                forward_digit,
                rewind_digit,
                pause_digit,
                offset_ms,
            } => {
                let mut a = vec![s(file), s(escape_digits)];
                optional_tail(
                    &mut a,
                    [
                        (skip_ms.map(|v| n(v.into())), "3000"),
                        (forward_digit.as_ref().map(|v| s(v)), "#"),
                        (rewind_digit.as_ref().map(|v| s(v)), "*"),
                        (pause_digit.as_ref().map(|v| s(v)), ""),
                        (offset_ms.map(|v| n(v.into())), "0"),
                    ],
                );
                ("CONTROL STREAM FILE", a)
            }
            C::DatabaseDel { family, key } => ("DATABASE DEL", vec![s(family), s(key)]),
            C::DatabaseDelTree { family, keytree } => {
                let mut a = vec![s(family)];
                a.extend(keytree.iter().map(|v| s(v)));
                ("DATABASE DELTREE", a)
            }
            C::DatabaseGet { family, key } => ("DATABASE GET", vec![s(family), s(key)]),
            C::DatabasePut { family, key, value } => {
                ("DATABASE PUT", vec![s(family), s(key), s(value)])
            }
            C::Exec {
                application,
                options,
            } => ("EXEC", vec![s(application), s(options)]),
            C::GetData {
                file,
                timeout_ms,
                max_digits,
            } => {
                let mut a = vec![s(file)];
                optional_tail(
                    &mut a,
                    [
                        (timeout_ms.map(|v| n(v.into())), "0"),
                        (max_digits.map(|v| n(v.into())), "1024"),
                    ],
                );
                ("GET DATA", a)
            }
            C::GetFullVariable {
                expression,
                channel,
            } => {
                let mut a = vec![s(expression)];
                a.extend(channel.iter().map(|v| s(v)));
                ("GET FULL VARIABLE", a)
            }
            C::GetOption {
                file,
                escape_digits,
                timeout_ms,
            } => {
                let mut a = vec![s(file), s(escape_digits)];
                a.extend(timeout_ms.map(|v| n(v.into())));
                ("GET OPTION", a)
            }
            C::GetVariable { name } => ("GET VARIABLE", vec![s(name)]),
            C::Gosub {
                context,
                extension,
                priority,
                args,
            } => {
                let mut a = vec![s(context), s(extension), s(priority)];
                a.extend(args.iter().map(|v| s(v)));
                ("GOSUB", a)
            }
            C::Hangup { channel } => ("HANGUP", channel.iter().map(|v| s(v)).collect()),
            C::Noop => ("NOOP", vec![]),
            C::ReceiveChar { timeout_ms } => ("RECEIVE CHAR", vec![n((*timeout_ms).into())]),
            C::ReceiveText { timeout_ms } => ("RECEIVE TEXT", vec![n((*timeout_ms).into())]),
            C::RecordFile {
                file,
                format,
                escape_digits,
                timeout_ms,
                offset_samples,
                beep,
                silence_s,
            } => {
                let mut a = vec![
                    s(file),
                    s(format),
                    s(escape_digits),
                    n((*timeout_ms).into()),
                ];
                // Asterisk looks for BEEP and s=N by content after the timeout, but reads a
                // number right after the timeout as the offset, so the offset goes first.
                a.extend(offset_samples.map(|v| n(v.into())));
                if *beep {
                    a.push(Cow::Borrowed("BEEP"));
                }
                a.extend(silence_s.map(|v| Cow::Owned(format!("s={v}"))));
                ("RECORD FILE", a)
            }
            C::SayAlpha {
                text,
                escape_digits,
            } => ("SAY ALPHA", vec![s(text), s(escape_digits)]),
            C::SayDate {
                epoch_s,
                escape_digits,
            } => ("SAY DATE", vec![n(*epoch_s), s(escape_digits)]),
            C::SayDateTime {
                epoch_s,
                escape_digits,
                format,
                timezone,
            } => {
                let mut a = vec![n(*epoch_s), s(escape_digits)];
                optional_tail(
                    &mut a,
                    [
                        (format.as_ref().map(|v| s(v)), "ABdY 'digits/at' IMp"),
                        (timezone.as_ref().map(|v| s(v)), ""),
                    ],
                );
                ("SAY DATETIME", a)
            }
            C::SayDigits {
                digits,
                escape_digits,
            } => ("SAY DIGITS", vec![s(digits), s(escape_digits)]),
            C::SayNumber {
                number,
                escape_digits,
                gender,
            } => {
                let mut a = vec![s(number), s(escape_digits)];
                a.extend(gender.iter().map(|v| s(v)));
                ("SAY NUMBER", a)
            }
            C::SayPhonetic {
                text,
                escape_digits,
            } => ("SAY PHONETIC", vec![s(text), s(escape_digits)]),
            C::SayTime {
                epoch_s,
                escape_digits,
            } => ("SAY TIME", vec![n(*epoch_s), s(escape_digits)]),
            C::SendImage { image } => ("SEND IMAGE", vec![s(image)]),
            C::SendText { text } => ("SEND TEXT", vec![s(text)]),
            C::SetAutoHangup { seconds } => ("SET AUTOHANGUP", vec![n((*seconds).into())]),
            C::SetCallerId { number } => ("SET CALLERID", vec![s(number)]),
            C::SetContext { context } => ("SET CONTEXT", vec![s(context)]),
            C::SetExtension { extension } => ("SET EXTENSION", vec![s(extension)]),
            C::SetMusic { on, class } => {
                let mut a = vec![Cow::Borrowed(if *on { "on" } else { "off" })];
                a.extend(class.iter().map(|v| s(v)));
                ("SET MUSIC", a)
            }
            C::SetPriority { priority } => ("SET PRIORITY", vec![s(priority)]),
            C::SetVariable { name, value } => ("SET VARIABLE", vec![s(name), s(value)]),
            C::SpeechActivateGrammar { name } => ("SPEECH ACTIVATE GRAMMAR", vec![s(name)]),
            C::SpeechCreate { engine } => ("SPEECH CREATE", vec![s(engine)]),
            C::SpeechDeactivateGrammar { name } => ("SPEECH DEACTIVATE GRAMMAR", vec![s(name)]),
            C::SpeechDestroy => ("SPEECH DESTROY", vec![]),
            C::SpeechLoadGrammar { name, path } => ("SPEECH LOAD GRAMMAR", vec![s(name), s(path)]),
            C::SpeechRecognize {
                prompt,
                timeout_ms,
                offset_samples,
            } => {
                let mut a = vec![s(prompt), n((*timeout_ms).into())];
                a.extend(offset_samples.map(|v| n(v.into())));
                ("SPEECH RECOGNIZE", a)
            }
            C::SpeechSet { name, value } => ("SPEECH SET", vec![s(name), s(value)]),
            C::SpeechUnloadGrammar { name } => ("SPEECH UNLOAD GRAMMAR", vec![s(name)]),
            C::StreamFile {
                file,
                escape_digits,
                offset_samples,
            } => {
                let mut a = vec![s(file), s(escape_digits)];
                a.extend(offset_samples.map(|v| n(v.into())));
                ("STREAM FILE", a)
            }
            C::TddMode { mode } => {
                let m = match mode {
                    TddMode::On => "on",
                    TddMode::Off => "off",
                    TddMode::Tdd => "tdd",
                    TddMode::Mate => "mate",
                };
                ("TDD MODE", vec![Cow::Borrowed(m)])
            }
            C::Verbose { message, level } => ("VERBOSE", vec![s(message), n((*level).into())]),
            C::WaitForDigit { timeout_ms } => ("WAIT FOR DIGIT", vec![n((*timeout_ms).into())]),
            C::Raw(_) => ("", vec![]),
        }
    }
}

/// The AGI command a command line asks for, as its name in [`Command::NAMES`]: the words are
/// compared without regard to case, as Asterisk's `find_command` does (`noop` is `NOOP`). `None`
/// for a line that names no command of res_agi (`NOOP\r` included: a CR is not a separator).
pub fn command_name(line: &str) -> Option<&'static str> {
    let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
    let first = words.next()?;
    let (second, third) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let given = [first, second, third];
    Command::NAMES.iter().copied().find(|name| {
        name.split(' ')
            .zip(given)
            .all(|(want, got)| want.eq_ignore_ascii_case(got))
    })
}

/// True when the command named `name` (as in [`Command::NAMES`]) needs a live channel; see
/// [`Command::needs_live_channel`].
pub fn needs_live_channel(name: &str) -> bool {
    Command::NAMES.contains(&name) && !Command::DEAD_CHANNEL_NAMES.contains(&name)
}

/// Appends the command line `name args...` with its `\n` to `out`, quoting each argument as
/// [`Command`] does. For callers that have the words at hand and no [`Command`] to build.
pub fn encode_command(
    name: &'static str,
    args: &[&str],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    encode_words(name, args.iter().copied(), out)
}

fn encode_words<'a>(
    name: &'static str,
    args: impl ExactSizeIterator<Item = &'a str>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let words = name.split(' ').count() + args.len();
    if words > MAX_COMMAND_ARGS {
        return Err(EncodeError::TooManyWords {
            command: name,
            words,
        });
    }
    let rollback = out.len();
    out.extend_from_slice(name.as_bytes());
    for (i, arg) in args.enumerate() {
        if arg.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            out.truncate(rollback);
            return Err(EncodeError::ControlCharacter {
                command: name,
                index: i + 1,
                arg: arg.to_string(),
            });
        }
        out.push(b' ');
        quote_into(arg, out);
    }
    out.push(b'\n');
    Ok(())
}

/// Appends optional positional arguments up to the last one given, filling the gaps before it
/// with each slot's default so that later arguments keep their position.
fn optional_tail<'a, const N: usize>(
    args: &mut Vec<Cow<'a, str>>,
    slots: [(Option<Cow<'a, str>>, &'static str); N],
) {
    let Some(last) = slots.iter().rposition(|(v, _)| v.is_some()) else {
        return;
    };
    for (value, default) in slots.into_iter().take(last + 1) {
        args.push(value.unwrap_or(Cow::Borrowed(default)));
    }
}

fn quote_into(arg: &str, out: &mut Vec<u8>) {
    let needs_quotes = arg.is_empty()
        || arg
            .bytes()
            .any(|b| matches!(b, b' ' | b'\t' | b'"' | b'\\'));
    if !needs_quotes {
        out.extend_from_slice(arg.as_bytes());
        return;
    }
    out.push(b'"');
    for b in arg.bytes() {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split_args;

    #[test]
    fn encodes_like_the_recorded_sessions() {
        assert_eq!(Command::Answer.encode().unwrap(), "ANSWER\n");
        assert_eq!(
            Command::set_variable("FOO", "bar baz").encode().unwrap(),
            "SET VARIABLE FOO \"bar baz\"\n"
        );
        assert_eq!(
            Command::stream_file("nosuchfile", "").encode().unwrap(),
            "STREAM FILE nosuchfile \"\"\n"
        );
        assert_eq!(
            Command::verbose("hello", 1).encode().unwrap(),
            "VERBOSE hello 1\n"
        );
        let gosub = Command::Gosub {
            context: "agitest".into(),
            extension: "sub".into(),
            priority: "1".into(),
            args: Some("gosubarg".into()),
        };
        assert_eq!(gosub.encode().unwrap(), "GOSUB agitest sub 1 gosubarg\n");
        assert!(gosub.is_gosub());
        assert!(Command::Raw("gosub a b 1".into()).is_gosub());
        assert!(!Command::Raw("gosubx".into()).is_gosub());
    }

    #[test]
    fn every_argument_survives_asterisks_parser() {
        let awkward = [
            "",
            " ",
            "a b",
            "a\"b",
            "a\\b",
            "\\",
            "\"",
            "x=y&z",
            "tab\there",
            "ü ß",
        ];
        for v in awkward {
            let line = Command::set_variable("V", v).encode().unwrap();
            let words = split_args(line.trim_end_matches('\n')).unwrap();
            assert_eq!(
                words,
                ["SET", "VARIABLE", "V", v],
                "value {v:?} as {line:?}"
            );
        }
    }

    #[test]
    fn control_characters_are_refused_not_altered() {
        let err = Command::set_variable("V", "a\nANSWER")
            .encode()
            .unwrap_err();
        assert!(matches!(
            err,
            EncodeError::ControlCharacter { index: 2, .. }
        ));
        assert!(Command::Raw("NOOP\r".into()).encode().is_err());
    }

    #[test]
    fn optional_arguments_keep_their_positions() {
        let c = Command::GetData {
            file: "beep".into(),
            timeout_ms: None,
            max_digits: Some(4),
        };
        assert_eq!(c.encode().unwrap(), "GET DATA beep 0 4\n");
        let c = Command::GetData {
            file: "beep".into(),
            timeout_ms: None,
            max_digits: None,
        };
        assert_eq!(c.encode().unwrap(), "GET DATA beep\n");
    }

    #[test]
    fn command_lines_name_their_command_as_asterisk_matches_it() {
        assert_eq!(command_name("WAIT FOR DIGIT 5000"), Some("WAIT FOR DIGIT"));
        assert_eq!(command_name("noop"), Some("NOOP"));
        assert_eq!(command_name("stream\tfile beep \"\""), Some("STREAM FILE"));
        assert_eq!(
            command_name("GET FULL VARIABLE ${X}"),
            Some("GET FULL VARIABLE")
        );
        assert_eq!(command_name("GET VARIABLE X"), Some("GET VARIABLE"));
        assert_eq!(command_name("NOOP\r"), None);
        assert_eq!(command_name("FOOBAR"), None);
        assert_eq!(command_name(""), None);
        assert_eq!(command_name("GET"), None);
    }

    #[test]
    fn which_commands_need_a_live_channel() {
        for name in Command::DEAD_CHANNEL_NAMES {
            assert!(Command::NAMES.contains(&name), "{name}");
            assert!(!needs_live_channel(name), "{name}");
        }
        let live: Vec<&str> = Command::NAMES
            .into_iter()
            .filter(|n| needs_live_channel(n))
            .collect();
        assert_eq!(live.len(), 47 - 13);
        for media in [
            "ANSWER",
            "STREAM FILE",
            "WAIT FOR DIGIT",
            "GET DATA",
            "CHANNEL STATUS",
        ] {
            assert!(live.contains(&media), "{media}");
        }
        assert!(Command::Answer.needs_live_channel());
        assert!(!Command::exec("Dial", "PJSIP/2000").needs_live_channel());
        assert!(Command::Raw("gosub ctx s 1".into()).needs_live_channel());
        assert!(!Command::Raw("database get a b".into()).needs_live_channel());
        assert!(!Command::Raw("MYMODULE COMMAND".into()).needs_live_channel());
    }

    #[test]
    fn names_cover_all_47_commands() {
        assert_eq!(Command::NAMES.len(), 47);
        let mut sorted = Command::NAMES.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 47);
    }
}
