//! A channel as AGI sees it, and Asterisk's answers to every AGI command.
//!
//! The answers follow what Asterisk 22 was recorded sending (`shared/vectors/agi`): result codes
//! and their quirks (DATABASE DEL answers 1 for a missing key, DATABASE DELTREE answers 0 when it
//! deleted something), which commands still work on a dead channel (GET/SET VARIABLE, GET FULL
//! VARIABLE, DATABASE *, EXEC, VERBOSE, NOOP, ASYNCAGI BREAK, SPEECH DESTROY, SPEECH UNLOAD
//! GRAMMAR: res_agi.c's `dead` flags), 510 for unknown commands, the
//! multi-line 520 for wrong syntax, and GOSUB's provisional `100`.

use std::collections::{BTreeMap, HashMap};

/// One entry of Asterisk's AGI command table.
struct Spec {
    words: &'static [&'static str],
    /// Fewest words (the command's own included) that are not a syntax error.
    min_words: usize,
    /// Runs on a dead channel.
    dead_ok: bool,
    usage: &'static str,
}

const fn spec(
    words: &'static [&'static str],
    min_words: usize,
    dead_ok: bool,
    usage: &'static str,
) -> Spec {
    Spec {
        words,
        min_words,
        dead_ok,
        usage,
    }
}

#[rustfmt::skip]
static TABLE: &[Spec] = &[
    spec(&["answer"], 1, false, "Answers channel if not already in answer state."),
    spec(&["asyncagi", "break"], 2, true, "Interrupts expected flow of Async AGI commands."),
    spec(&["channel", "status"], 2, false, "Returns status of the connected channel."),
    spec(&["control", "stream", "file"], 5, false, "Sends audio file on channel and allows the listener to control the stream."),
    spec(&["database", "del"], 4, true, "Deletes an entry in the Asterisk database for a given <replaceable>family</replaceable> and <replaceable>key</replaceable>."),
    spec(&["database", "deltree"], 3, true, "Deletes a <replaceable>family</replaceable> or specific <replaceable>keytree</replaceable> within a <replaceable>family</replaceable> in the Asterisk database."),
    spec(&["database", "get"], 4, true, "Retrieves an entry in the Asterisk database for a given <replaceable>family</replaceable> and <replaceable>key</replaceable>."),
    spec(&["database", "put"], 5, true, "Adds or updates an entry in the Asterisk database for a given <replaceable>family</replaceable>, <replaceable>key</replaceable>, and <replaceable>value</replaceable>."),
    spec(&["exec"], 2, true, "Executes <replaceable>application</replaceable> with given <replaceable>options</replaceable>."),
    spec(&["get", "data"], 3, false, "Stream the given <replaceable>file</replaceable>, and receive DTMF data."),
    spec(&["get", "full", "variable"], 4, true, "Evaluates the given <replaceable>expression</replaceable> against the channel specified by <replaceable>variablename</replaceable>, or the current channel."),
    spec(&["get", "option"], 4, false, "Behaves similar to STREAM FILE but used with a timeout option."),
    spec(&["get", "variable"], 3, true, "Returns <literal>0</literal> if <replaceable>variablename</replaceable> is not set. Returns <literal>1</literal> if <replaceable>variablename</replaceable> is set and returns the variable in parentheses."),
    spec(&["gosub"], 4, false, "Cause the channel to execute the specified dialplan subroutine."),
    spec(&["hangup"], 1, false, "Hangs up the specified channel. If no channel name is given, hangs up the current channel"),
    spec(&["noop"], 1, true, "Does nothing."),
    spec(&["receive", "char"], 3, false, "Receives a character of text on a channel."),
    spec(&["receive", "text"], 3, false, "Receives a string of text on a channel."),
    spec(&["record", "file"], 6, false, "Record to a file until a given dtmf digit in the sequence is received."),
    spec(&["say", "alpha"], 4, false, "Say a given character string."),
    spec(&["say", "date"], 4, false, "Say a given date."),
    spec(&["say", "datetime"], 4, false, "Say a given time as specified by the format given."),
    spec(&["say", "digits"], 4, false, "Say a given digit string."),
    spec(&["say", "number"], 4, false, "Say a given number."),
    spec(&["say", "phonetic"], 4, false, "Say a given character string with phonetics."),
    spec(&["say", "time"], 4, false, "Say a given time."),
    spec(&["send", "image"], 3, false, "Sends images to channels supporting it."),
    spec(&["send", "text"], 3, false, "Sends text to channels supporting it."),
    spec(&["set", "autohangup"], 3, false, "Autohangup channel in some time."),
    spec(&["set", "callerid"], 3, false, "Sets callerid for the current channel."),
    spec(&["set", "context"], 3, false, "Sets channel context."),
    spec(&["set", "extension"], 3, false, "Changes channel extension."),
    spec(&["set", "music"], 3, false, "Enable/Disable Music on hold generator"),
    spec(&["set", "priority"], 3, false, "Set channel dialplan priority."),
    spec(&["set", "variable"], 4, true, "Sets a variable to the current channel."),
    spec(&["speech", "activate", "grammar"], 4, false, "Activates a grammar."),
    spec(&["speech", "create"], 3, false, "Creates a speech object."),
    spec(&["speech", "deactivate", "grammar"], 4, false, "Deactivates a grammar."),
    spec(&["speech", "destroy"], 2, true, "Destroys a speech object."),
    spec(&["speech", "load", "grammar"], 5, false, "Loads a grammar."),
    spec(&["speech", "recognize"], 4, false, "Recognizes speech."),
    spec(&["speech", "set"], 4, false, "Sets a speech engine setting."),
    spec(&["speech", "unload", "grammar"], 4, true, "Unloads a grammar."),
    spec(&["stream", "file"], 4, false, "Sends audio file on channel."),
    spec(&["tdd", "mode"], 3, false, "Toggles TDD mode (for the deaf)."),
    spec(&["verbose"], 3, true, "Logs a message to the asterisk verbose log."),
    spec(&["wait", "for", "digit"], 4, false, "Waits for a digit to be pressed."),
];

/// The command table has one entry per AGI command.
pub const COMMANDS: usize = 47;

/// What the channel does in answer to one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The reply, every line with its `\n` (GOSUB's `100` line included).
    pub text: String,
    /// The command failed on a live channel (Asterisk's RESULT_FAILURE): AGISTATUS=FAILURE.
    pub failure: bool,
    /// The command hung the channel up (HANGUP): Asterisk follows the reply with `HANGUP`.
    pub hung_up_now: bool,
}

/// A channel's state as far as AGI can see it.
#[derive(Debug, Clone)]
pub struct Channel {
    pub name: String,
    pub uniqueid: String,
    pub callerid_num: String,
    pub callerid_name: String,
    pub context: String,
    pub extension: String,
    pub priority: String,
    pub up: bool,
    pub alive: bool,
    pub variables: HashMap<String, String>,
    /// The astdb, as `/family/key` → value.
    pub astdb: BTreeMap<String, String>,
    /// Sound files that exist.
    pub sounds: Vec<String>,
    /// The digit pressed during the next media command (`None`: the caller presses nothing).
    pub digit: Option<char>,
    /// Hint states by `exten@context`, as `EXTENSION_STATE()` reads them (`NOT_INUSE`,
    /// `INUSE`, ...); a missing hint reads `UNKNOWN`.
    pub extension_states: HashMap<String, String>,
    /// `PJSIP_DIAL_CONTACTS()` by endpoint.
    pub pjsip_contacts: HashMap<String, String>,
    /// What Asterisk would have logged as a WARNING while evaluating on this channel (an
    /// expression that does not parse).
    pub warnings: Vec<String>,
}

impl Channel {
    pub fn new(name: &str, uniqueid: &str) -> Self {
        Channel {
            name: name.to_string(),
            uniqueid: uniqueid.to_string(),
            callerid_num: "2000".into(),
            callerid_name: "Alice".into(),
            context: "tandem".into(),
            extension: "100".into(),
            priority: "1".into(),
            up: false,
            alive: true,
            variables: HashMap::new(),
            astdb: BTreeMap::new(),
            sounds: vec!["hello-world".into(), "beep".into(), "vm-goodbye".into()],
            digit: None,
            extension_states: HashMap::new(),
            pjsip_contacts: HashMap::new(),
            warnings: Vec::new(),
        }
    }

    /// Answers one command line (without its newline), as Asterisk would.
    pub fn execute(&mut self, line: &str) -> Answer {
        let ok = |text: String| Answer {
            text,
            failure: false,
            hung_up_now: false,
        };
        let Ok(words) = agi::split_args(line) else {
            return ok("510 Invalid or unknown command\n".into());
        };
        let Some(spec) = TABLE.iter().find(|s| {
            s.words.len() <= words.len()
                && s.words
                    .iter()
                    .zip(&words)
                    .all(|(a, b)| a.eq_ignore_ascii_case(b))
        }) else {
            return ok("510 Invalid or unknown command\n".into());
        };
        if !self.alive && !spec.dead_ok {
            return ok("511 Command Not Permitted on a dead channel or intercept routine\n".into());
        }
        if words.len() < spec.min_words {
            return ok(format!(
                "520-Invalid command syntax.  Proper usage follows:\n{}\n520 End of proper usage.\n",
                spec.usage
            ));
        }
        let args = &words[spec.words.len()..];
        let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
        let name = spec.words.join(" ");
        let mut failure = false;
        let mut hung_up_now = false;
        let text = match name.as_str() {
            "answer" => {
                self.up = true;
                "200 result=0\n".to_string()
            }
            "channel status" => {
                let state = if args.is_empty() || arg(0) == self.name {
                    if self.up { 6 } else { 4 }
                } else {
                    -1
                };
                format!("200 result={state}\n")
            }
            "database del" => {
                self.astdb.remove(&format!("/{}/{}", arg(0), arg(1)));
                "200 result=1\n".into()
            }
            "database deltree" => {
                let prefix = if args.len() > 1 {
                    format!("/{}/{}", arg(0), arg(1))
                } else {
                    format!("/{}", arg(0))
                };
                let doomed: Vec<String> = self
                    .astdb
                    .keys()
                    .filter(|k| *k == &prefix || k.starts_with(&format!("{prefix}/")))
                    .cloned()
                    .collect();
                for k in &doomed {
                    self.astdb.remove(k);
                }
                format!("200 result={}\n", if doomed.is_empty() { 1 } else { 0 })
            }
            "database get" => match self.astdb.get(&format!("/{}/{}", arg(0), arg(1))) {
                Some(v) => format!("200 result=1 ({v})\n"),
                None => "200 result=0\n".into(),
            },
            "database put" => {
                self.astdb
                    .insert(format!("/{}/{}", arg(0), arg(1)), arg(2).to_string());
                "200 result=1\n".into()
            }
            "exec" if arg(0).eq_ignore_ascii_case("mset") => {
                self.mset(arg(1));
                "200 result=0\n".into()
            }
            "exec" => {
                let known = [
                    "noop", "set", "verbose", "wait", "playback", "dial", "log", "answer",
                ];
                if known.iter().any(|k| k.eq_ignore_ascii_case(arg(0))) {
                    "200 result=0\n".into()
                } else {
                    "200 result=-2\n".into()
                }
            }
            "get data" => {
                if self.has_sound(arg(0)) {
                    match self.digit.take() {
                        Some(d) => format!("200 result={d}\n"),
                        None => "200 result= (timeout)\n".into(),
                    }
                } else {
                    "200 result=-1\n".into()
                }
            }
            "get full variable" => format!("200 result=1 ({})\n", self.substitute(arg(0))),
            "get option" | "stream file" | "control stream file" => {
                if self.has_sound(arg(0)) {
                    let digit = self.digit.take().filter(|d| arg(1).contains(*d));
                    format!("200 result={} endpos=8000\n", digit.map_or(0, |d| d as u32))
                } else {
                    failure = true;
                    let end = if name == "control stream file" { -1 } else { 0 };
                    format!("200 result=-1 endpos={end}\n")
                }
            }
            "get variable" => match self.read(arg(0)) {
                Some(v) => format!("200 result=1 ({v})\n"),
                None => "200 result=0\n".into(),
            },
            "gosub" => "100 result=0 Trying...\n200 result=0 Gosub complete\n".into(),
            "hangup" => {
                if args.is_empty() || arg(0) == self.name {
                    self.alive = false;
                    hung_up_now = true;
                    "200 result=1\n".into()
                } else {
                    "200 result=-1\n".into()
                }
            }
            "receive char" => "200 result=-1 (hangup)\n".into(),
            "receive text" => "200 result=-1\n".into(),
            "record file" => "200 result=0 (timeout) endpos=0\n".into(),
            "set callerid" => {
                self.callerid_num = arg(0).to_string();
                "200 result=1\n".into()
            }
            "set context" => {
                self.context = arg(0).to_string();
                "200 result=0\n".into()
            }
            "set extension" => {
                self.extension = arg(0).to_string();
                "200 result=0\n".into()
            }
            "set priority" => {
                self.priority = arg(0).to_string();
                "200 result=0\n".into()
            }
            "set variable" => {
                self.variables
                    .insert(arg(0).to_string(), arg(1).to_string());
                "200 result=1\n".into()
            }
            "verbose" => "200 result=1\n".into(),
            "wait for digit" => match self.digit.take() {
                Some(d) => format!("200 result={}\n", d as u32),
                None => "200 result=0\n".into(),
            },
            // NOOP, ASYNCAGI BREAK, SAY *, SEND *, SET AUTOHANGUP/MUSIC, SPEECH *, TDD MODE:
            // all answer 0 on a channel without speech engines or text support.
            _ => "200 result=0\n".into(),
        };
        Answer {
            text,
            failure,
            hung_up_now,
        }
    }

    /// The reply a media command gets when the caller hangs up while it runs.
    pub fn cut_by_hangup(&mut self, line: &str) -> Option<String> {
        let words = agi::split_args(line).ok()?;
        let first = words.first()?.to_ascii_lowercase();
        let media = [
            "answer", "stream", "control", "get", "wait", "record", "say", "receive",
        ];
        self.alive = false;
        if !media.contains(&first.as_str())
            || (first == "get"
                && words.get(1).is_some_and(|w| {
                    w.eq_ignore_ascii_case("variable") || w.eq_ignore_ascii_case("full")
                }))
        {
            return None;
        }
        Some(
            if first == "stream" {
                "200 result=-1 endpos=0\n"
            } else {
                "200 result=-1\n"
            }
            .into(),
        )
    }

    fn has_sound(&self, file: &str) -> bool {
        self.sounds.iter().any(|s| s == file)
    }

    fn variable(&self, name: &str) -> Option<String> {
        if let Some(v) = self.variables.get(name) {
            return Some(v.clone());
        }
        Some(match name {
            "CHANNEL" => self.name.clone(),
            "UNIQUEID" => self.uniqueid.clone(),
            "CALLERID(num)" => self.callerid_num.clone(),
            "CALLERID(name)" => self.callerid_name.clone(),
            "CONTEXT" => self.context.clone(),
            "EXTEN" => self.extension.clone(),
            "PRIORITY" => self.priority.clone(),
            "CHANNEL(state)" => if self.up { "Up" } else { "Ring" }.to_string(),
            _ => return None,
        })
    }

    /// The MSet application: pairs split at `,`, each at its first `=`, by Asterisk's
    /// argument splitter; a name ending in `)` is a function (`DB(family/key)` writes astdb).
    fn mset(&mut self, data: &str) {
        for (name, value) in mset_pairs(data) {
            match name.strip_prefix("DB(").and_then(|n| n.strip_suffix(')')) {
                Some(path) => {
                    self.astdb.insert(format!("/{path}"), value);
                }
                None => {
                    self.variables.insert(name, value);
                }
            }
        }
    }

    /// A variable, or a function when the name ends in `)` (as GET VARIABLE reads it).
    fn read(&mut self, name: &str) -> Option<String> {
        if let Some(v) = self.variable(name) {
            return Some(v);
        }
        let open = name.find('(')?;
        let args = name.strip_suffix(')')?.get(open + 1..)?;
        self.function(&name[..open], args)
    }

    /// The functions FreePBX's scripts read: DB, URIENCODE, EXTENSION_STATE,
    /// PJSIP_DIAL_CONTACTS. Others are unknown (None).
    fn function(&mut self, name: &str, args: &str) -> Option<String> {
        Some(match name {
            "DB" => {
                let (family, key) = args.split_once('/')?;
                let v = self.astdb.get(&format!("/{family}/{key}")).cloned();
                match v {
                    // func_db.c sets DB_RESULT when the key exists.
                    Some(v) => {
                        self.variables.insert("DB_RESULT".into(), v.clone());
                        v
                    }
                    None => String::new(),
                }
            }
            "URIENCODE" => uri_encode(args),
            "LEN" => args.chars().count().to_string(),
            "EXTENSION_STATE" => {
                let (exten, context) = args.split_once('@').unwrap_or((args, "default"));
                let context = if context.is_empty() {
                    "default"
                } else {
                    context
                };
                self.extension_states
                    .get(&format!("{exten}@{context}"))
                    .cloned()
                    .unwrap_or_else(|| "UNKNOWN".into())
            }
            "PJSIP_DIAL_CONTACTS" => self.pjsip_contacts.get(args).cloned().unwrap_or_default(),
            _ => return None,
        })
    }

    /// Substitutes `${...}` and `$[...]` as Asterisk does: the braces (or brackets) are
    /// matched first, then the inside is substituted, then read as a variable or function
    /// (`${EXTEN:1}`, `${VAR:0:5}` take a substring) or evaluated as an expression (an
    /// expression that does not parse is empty, and its error is kept in `warnings`). A value
    /// is not substituted again. Unknown names give nothing.
    pub fn substitute(&mut self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find(['$']) {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let (open, close) = match after.chars().next() {
                Some('{') => ('{', '}'),
                Some('[') => ('[', ']'),
                _ => {
                    out.push('$');
                    rest = after;
                    continue;
                }
            };
            let body = &after[1..];
            let Some(end) = matching(body, open, close) else {
                out.push_str(&rest[start..]);
                return out;
            };
            let inner = &body[..end];
            let inner = if inner.contains('$') {
                self.substitute(inner)
            } else {
                inner.to_string()
            };
            if open == '{' {
                out.push_str(&self.read_with_substring(&inner));
            } else {
                match crate::dialplan::expr::evaluate(&inner) {
                    Ok(v) => out.push_str(&v),
                    Err(e) => self.warnings.push(format!("{e}; Input: {inner:?}")),
                }
            }
            rest = &body[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `NAME`, `FUNC(args)`, or either with `:offset[:length]` (Asterisk's substring, negative
    /// values counting from the end).
    fn read_with_substring(&mut self, name: &str) -> String {
        let mut depth = 0i32;
        let colon = name.char_indices().find_map(|(i, c)| {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ':' if depth == 0 => return Some(i),
                _ => {}
            }
            None
        });
        let Some(colon) = colon else {
            return self.read(name).unwrap_or_default();
        };
        let value: Vec<char> = self
            .read(&name[..colon])
            .unwrap_or_default()
            .chars()
            .collect();
        let mut parts = name[colon + 1..].splitn(2, ':');
        let offset: i64 = parts
            .next()
            .and_then(|o| o.trim().parse().ok())
            .unwrap_or(0);
        let length: Option<i64> = parts.next().and_then(|l| l.trim().parse().ok());
        let n = value.len() as i64;
        let start = if offset < 0 {
            (n + offset).max(0)
        } else {
            offset.min(n)
        };
        let end = match length {
            None => n,
            Some(l) if l < 0 => (n + l).max(start),
            Some(l) => (start + l).min(n),
        };
        value[start as usize..end as usize].iter().collect()
    }
}

/// Where the `close` that ends a group opened just before `text` is (groups of `open`/`close`
/// nest).
fn matching(text: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 1usize;
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// The `name=value` pairs of an `MSet` argument as Asterisk reads them: up to 99 pairs split
/// at `,`, each at its first `=`; a pair without `=` is ignored.
pub fn mset_pairs(data: &str) -> Vec<(String, String)> {
    separate_args(data, ',', 99)
        .into_iter()
        .filter_map(|pair| match separate_args(&pair, '=', 2).as_slice() {
            [name, value] => Some((name.clone(), value.clone())),
            _ => None,
        })
        .collect()
}

/// Asterisk's `__ast_app_separate_args` with `remove_chars`: splits at `delim` outside
/// parentheses, brackets and quotes; quotes are removed and a backslash makes the next character
/// literal. At most `max` arguments; the last of `max` is the rest of the text, untouched.
pub(crate) fn separate_args(buf: &str, delim: char, max: usize) -> Vec<String> {
    let chars: Vec<char> = buf.chars().collect();
    let mut out = Vec::new();
    let (mut paren, mut bracket, mut quote) = (0u32, 0u32, false);
    let mut i = 0;
    let mut ended_on_delim = false;
    while i < chars.len() && out.len() < max - 1 {
        let mut arg = String::new();
        ended_on_delim = false;
        while i < chars.len() {
            let c = chars[i];
            i += 1;
            match c {
                '(' => paren += 1,
                ')' => paren = paren.saturating_sub(1),
                '[' => bracket += 1,
                ']' => bracket = bracket.saturating_sub(1),
                '"' if delim != '"' => {
                    quote = !quote;
                    continue;
                }
                '\\' => {
                    if let Some(&n) = chars.get(i) {
                        arg.push(n);
                        i += 1;
                    }
                    continue;
                }
                c if c == delim && paren == 0 && !quote && bracket == 0 => {
                    ended_on_delim = true;
                    break;
                }
                _ => {}
            }
            arg.push(c);
        }
        out.push(arg);
    }
    if i < chars.len() {
        // The last argument: the rest as it is (the splitter no longer looks at it).
        out.push(chars[i..].iter().collect());
    } else if ended_on_delim {
        out.push(String::new());
    }
    out
}

/// `URIENCODE()`: letters, digits and `-_.!~*'()` stay, every other byte is `%XX`.
fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_command_once() {
        assert_eq!(TABLE.len(), COMMANDS);
        for name in agi::Command::NAMES {
            let words: Vec<String> = name.split(' ').map(|w| w.to_ascii_lowercase()).collect();
            assert!(TABLE.iter().any(|s| s.words == words), "{name} missing");
        }
    }

    #[test]
    fn the_dead_channel_rules_are_res_agis() {
        for spec in TABLE {
            let name = spec.words.join(" ").to_ascii_uppercase();
            assert_eq!(
                spec.dead_ok,
                agi::Command::DEAD_CHANNEL_NAMES.contains(&name.as_str()),
                "{name}"
            );
        }
    }

    #[test]
    fn answers_like_the_recordings() {
        let mut c = Channel::new("Local/100@agitest-00000001;2", "1.1");
        assert_eq!(c.execute("ANSWER").text, "200 result=0\n");
        assert_eq!(
            c.execute("SET VARIABLE PAREN \"a)b(c\"").text,
            "200 result=1\n"
        );
        assert_eq!(
            c.execute("GET VARIABLE PAREN").text,
            "200 result=1 (a)b(c)\n"
        );
        assert_eq!(
            c.execute("GET FULL VARIABLE ${NOSUCHVAR}").text,
            "200 result=1 ()\n"
        );
        assert_eq!(
            c.execute("GET FULL VARIABLE ${CHANNEL(state)}").text,
            "200 result=1 (Up)\n"
        );
        assert_eq!(c.execute("DATABASE DEL fam key").text, "200 result=1\n");
        c.execute("DATABASE PUT fam k2 \"v 2\"");
        assert_eq!(c.execute("DATABASE DELTREE fam").text, "200 result=0\n");
        assert_eq!(c.execute("DATABASE DELTREE fam").text, "200 result=1\n");
        assert_eq!(c.execute("EXEC NoSuchApp foo").text, "200 result=-2\n");
        assert_eq!(c.execute("NOOP\r").text, "510 Invalid or unknown command\n");
        assert_eq!(c.execute("noop with some args").text, "200 result=0\n");
        assert!(
            c.execute("GET VARIABLE")
                .text
                .starts_with("520-Invalid command syntax.  Proper")
        );
        let s = c.execute("STREAM FILE nosuchfile \"\"");
        assert_eq!(
            (s.text.as_str(), s.failure),
            ("200 result=-1 endpos=0\n", true)
        );
        let h = c.execute("HANGUP");
        assert_eq!((h.text.as_str(), h.hung_up_now), ("200 result=1\n", true));
        assert!(c.execute("ANSWER").text.starts_with("511 "));
        assert!(
            c.execute("GET VARIABLE CHANNEL")
                .text
                .starts_with("200 result=1 (Local/")
        );
    }

    #[test]
    fn expressions_nest_functions_as_asterisk_does() {
        let mut c = Channel::new("Local/100@agitest-00000001;2", "1.1");
        c.astdb.insert("/AMPUSER/100/device".into(), "100".into());
        c.astdb
            .insert("/DEVICE/100/dial".into(), "PJSIP/100".into());
        c.extension_states
            .insert("100@ext-local".into(), "INUSE".into());
        c.pjsip_contacts
            .insert("100".into(), "PJSIP/100/sip:100@10.0.0.9".into());
        c.variables.insert("FMGRP".into(), "100".into());
        let full = |c: &mut Channel, e: &str| c.execute(&format!("GET FULL VARIABLE {e}")).text;
        assert_eq!(
            full(
                &mut c,
                "${URIENCODE(${DB(DEVICE/${DB(AMPUSER/${FMGRP}/device)}/dial)})},x"
            ),
            "200 result=1 (PJSIP%2F100,x)\n"
        );
        // DB() leaves the value found in DB_RESULT, as func_db.c does.
        assert_eq!(c.variables["DB_RESULT"], "PJSIP/100");
        assert_eq!(
            full(
                &mut c,
                "${EXTENSION_STATE(100@ext-local)}${EXTENSION_STATE(7)}"
            ),
            "200 result=1 (INUSEUNKNOWN)\n"
        );
        assert_eq!(
            c.execute("GET VARIABLE PJSIP_DIAL_CONTACTS(100)").text,
            "200 result=1 (PJSIP/100/sip:100@10.0.0.9)\n"
        );
        assert_eq!(c.execute("GET VARIABLE NOSUCH(1)").text, "200 result=0\n");
        assert_eq!(full(&mut c, "${URIENCODE(,)}"), "200 result=1 (%2C)\n");
    }
}
