//! A dialplan as Asterisk's `pbx_config` loads it from `extensions.conf` text, and a call run
//! through it, so that dialplan written for an operator (the README's lines, a FreePBX override
//! file) is tested as written, against a real FastAGI server.
//!
//! Loading follows `pbx_config.c`: contexts, `exten =>` and `same =>` with numbered, `n`
//! (next) and labelled priorities, `include =>`, `[globals]`; the first definition of a
//! priority wins and a later one is refused with Asterisk's own warning ("Unable to register
//! extension 's' priority 6 in 'macro-dial', already in use"), as is `n` on a context's first
//! line. Running (`run.rs`) executes the applications a routing dialplan uses: AGI (FastAGI
//! over a real socket through [`crate::run`], or a classic script through
//! [`crate::run_classic`]), Set, Goto, GotoIf, ExecIf, Gosub and Return, NoOp, Verbose, Dial,
//! Playback, Answer, Wait, Hangup. Every step is recorded as Asterisk's verbose log writes it
//! (`Executing [s@macro-dial:6] Goto("chan", "tandem")`), so a run compares line for line
//! with a real Asterisk's.
//!
//! Never: runs a shell, or an application it does not know (the run stops with an error that
//! names it rather than skipping a step).

pub mod expr;
mod run;

pub use run::{AgiHost, Call, CallEnd, DialplanError, Step};

use std::collections::HashMap;

/// The most lines one file may have; the most priorities one call may run (a loop in a
/// dialplan must not hang a test).
pub const MAX_LINES: usize = 100_000;

/// One priority: the application and its data as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priority {
    pub number: u32,
    pub label: Option<String>,
    pub app: String,
    pub data: String,
    /// Where it was written: file name and line.
    pub source: (String, usize),
}

/// An extension (exact, or a `_` pattern) and its priorities in order.
#[derive(Debug, Clone, Default)]
pub struct Extension {
    pub priorities: Vec<Priority>,
}

impl Extension {
    pub fn priority(&self, number: u32) -> Option<&Priority> {
        self.priorities.iter().find(|p| p.number == number)
    }

    pub fn label(&self, label: &str) -> Option<u32> {
        self.priorities
            .iter()
            .find(|p| p.label.as_deref() == Some(label))
            .map(|p| p.number)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Context {
    /// By name as written (`s`, `_1XXX`), in the order first defined.
    pub extensions: Vec<(String, Extension)>,
    pub includes: Vec<String>,
}

/// Contexts by name, global variables, and the warnings Asterisk would log loading them.
#[derive(Debug, Clone, Default)]
pub struct Dialplan {
    pub contexts: HashMap<String, Context>,
    pub globals: HashMap<String, String>,
    pub warnings: Vec<String>,
}

impl Dialplan {
    /// Loads files in order, as `#include`s in `extensions.conf` would: `(name, text)`.
    pub fn load(files: &[(&str, &str)]) -> Dialplan {
        let mut d = Dialplan::default();
        for (name, text) in files {
            d.load_file(name, text);
        }
        d
    }

    fn load_file(&mut self, file: &str, text: &str) {
        let mut context: Option<String> = None;
        // The last extension and priority written in this context, for `same =>` and `n`
        // (pbx_config counts `n` from the last line whatever its extension).
        let mut last_exten: Option<String> = None;
        let mut last_number = 0u32;
        for (i, raw) in text.lines().take(MAX_LINES).enumerate() {
            let line_no = i + 1;
            let line = strip_comment(raw);
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                // `[name]`, maybe with a template mark after it: `[name](+)`.
                let name = rest.split(']').next().unwrap_or("").trim().to_string();
                self.contexts.entry(name.clone()).or_default();
                context = Some(name);
                (last_exten, last_number) = (None, 0);
                continue;
            }
            let Some(ctx) = context.clone() else {
                self.warnings
                    .push(format!("no context for line {line_no} of {file}"));
                continue;
            };
            let (key, value) = match line.split_once("=>") {
                Some((k, v)) => (k.trim(), v.trim()),
                None => match line.split_once('=') {
                    Some((k, v)) => (k.trim(), v.trim()),
                    None => continue,
                },
            };
            match key.to_ascii_lowercase().as_str() {
                "exten" | "same" => {
                    let (exten_name, rest) = if key.eq_ignore_ascii_case("same") {
                        let Some(e) = &last_exten else {
                            self.warnings.push(format!(
                                "No previous extension for 'same' at line {line_no} of {file}"
                            ));
                            continue;
                        };
                        (e.clone(), value)
                    } else {
                        let (e, rest) = value.split_once(',').unwrap_or((value, ""));
                        (e.trim().to_string(), rest)
                    };
                    if let Some(n) =
                        self.add_priority(&ctx, &exten_name, rest, last_number, (file, line_no))
                    {
                        last_number = n;
                    }
                    last_exten = Some(exten_name);
                }
                "include" => self
                    .contexts
                    .entry(ctx)
                    .or_default()
                    .includes
                    .push(value.to_string()),
                _ if ctx == "globals" => {
                    self.globals.insert(key.to_string(), value.to_string());
                }
                _ => {}
            }
        }
    }

    /// Adds `prio[(label)],App(data)` to the extension; the priority number it took (also
    /// when Asterisk refused the line, so that a following `n` counts from it, as in
    /// pbx_config), or None when the line could not be read.
    fn add_priority(
        &mut self,
        ctx: &str,
        exten: &str,
        text: &str,
        last_number: u32,
        (file, line_no): (&str, usize),
    ) -> Option<u32> {
        let (prio, app_text) = text.split_once(',').unwrap_or((text, ""));
        let prio = prio.trim();
        let (prio, label) = match prio.split_once('(') {
            Some((p, l)) => (p, Some(l.trim_end_matches(')').to_string())),
            None => (prio, None),
        };
        let number = match prio {
            "hint" => return None,
            "n" | "next" if last_number == 0 => {
                self.warnings.push(format!(
                    "Can't use 'next' priority on the first entry at line {line_no} of {file}!"
                ));
                return None;
            }
            "n" | "next" => last_number + 1,
            "s" | "same" => last_number,
            p => match p.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    self.warnings.push(format!(
                        "Invalid priority/label '{p}' at line {line_no} of {file}"
                    ));
                    return None;
                }
            },
        };
        let (app, data) = match app_text.split_once('(') {
            Some((a, d)) => (a.trim(), d.rfind(')').map_or(d, |end| &d[..end])),
            None => (app_text.trim(), ""),
        };
        let context = self.contexts.entry(ctx.to_string()).or_default();
        let idx = match context.extensions.iter().position(|(n, _)| n == exten) {
            Some(i) => i,
            None => {
                context
                    .extensions
                    .push((exten.to_string(), Extension::default()));
                context.extensions.len() - 1
            }
        };
        let extension = &mut context.extensions[idx].1;
        let mut label = label;
        if let Some(l) = &label
            && let Some(at) = extension.label(l)
            && at != number
        {
            self.warnings.push(format!(
                "Extension '{exten}' priority {number} in '{ctx}', label '{l}' already in use at priority {at}"
            ));
            label = None;
        }
        if extension.priority(number).is_some() {
            self.warnings.push(format!(
                "Unable to register extension '{exten}' priority {number} in '{ctx}', already in use"
            ));
            self.warnings.push(format!(
                "Unable to register extension at line {line_no} of {file}"
            ));
            return Some(number);
        }
        let at = extension
            .priorities
            .iter()
            .position(|p| p.number > number)
            .unwrap_or(extension.priorities.len());
        extension.priorities.insert(
            at,
            Priority {
                number,
                label,
                app: app.to_string(),
                data: data.to_string(),
                source: (file.to_string(), line_no),
            },
        );
        Some(number)
    }

    /// The extension of `context` (or of a context it includes) that `exten` dials: an exact
    /// name first, then the most specific pattern.
    pub fn find(&self, context: &str, exten: &str) -> Option<(&str, &Extension)> {
        self.find_in(context, exten, 0)
    }

    fn find_in(&self, context: &str, exten: &str, depth: usize) -> Option<(&str, &Extension)> {
        let (name, c) = self.contexts.get_key_value(context)?;
        // Asterisk stops following includes deeper than this (AST_PBX_MAX_STACK).
        if depth > 128 {
            return None;
        }
        if let Some((_, e)) = c.extensions.iter().find(|(n, _)| n == exten) {
            return Some((name, e));
        }
        let best = c
            .extensions
            .iter()
            .filter(|(n, _)| pattern_matches(n, exten))
            .min_by_key(|(n, _)| specificity(n));
        if let Some((_, e)) = best {
            return Some((name, e));
        }
        c.includes
            .iter()
            .find_map(|inc| self.find_in(inc, exten, depth + 1))
    }
}

/// The first fenced code block of a Markdown text that holds `marker`: how a test reads the
/// dialplan a document gives, as written.
pub fn markdown_block<'a>(markdown: &'a str, marker: &str) -> Option<&'a str> {
    let mut rest = markdown;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        // The fence's info string (`text`) ends its line.
        let body_start = after.find('\n')? + 1;
        let body = &after[body_start..];
        let close = body.find("```")?;
        if body[..close].contains(marker) {
            return Some(&body[..close]);
        }
        rest = &body[close + 3..];
    }
    None
}

/// A line without its comment: `;` starts one unless escaped as `\;`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&';') => {
                out.push(';');
                chars.next();
            }
            ';' => break,
            _ => out.push(c),
        }
    }
    out
}

/// The characters one pattern position matches (`X`, `Z`, `N`, `[1-5]`, a literal), and the
/// rest of the pattern after it; `.` and `!` match the rest.
fn pattern_class(p: &str) -> Option<(Vec<char>, &str)> {
    let mut chars = p.chars();
    let c = chars.next()?;
    let rest = chars.as_str();
    Some(match c.to_ascii_uppercase() {
        'X' => (('0'..='9').collect(), rest),
        'Z' => (('1'..='9').collect(), rest),
        'N' => (('2'..='9').collect(), rest),
        '[' => {
            let end = rest.find(']')?;
            let set: Vec<char> = rest[..end].chars().collect();
            let mut out = Vec::new();
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == '-' {
                    out.extend(set[i]..=set[i + 2]);
                    i += 3;
                } else {
                    out.push(set[i]);
                    i += 1;
                }
            }
            (out, &rest[end + 1..])
        }
        _ => (vec![c], rest),
    })
}

/// Whether `name` (a `_` pattern) matches `exten` whole.
fn pattern_matches(name: &str, exten: &str) -> bool {
    fn matches(p: &str, e: &str) -> bool {
        match p.chars().next() {
            None => e.is_empty(),
            Some('.') => !e.is_empty(),
            Some('!') => true,
            Some(_) => {
                let Some((class, rest)) = pattern_class(p) else {
                    return false;
                };
                let mut ec = e.chars();
                match ec.next() {
                    Some(c) if class.contains(&c) => matches(rest, ec.as_str()),
                    _ => false,
                }
            }
        }
    }
    name.strip_prefix('_').is_some_and(|p| matches(p, exten))
}

/// How many extensions each position of a pattern could match, position by position: the
/// smaller, the more specific (Asterisk's `ext_cmp` order).
fn specificity(name: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut p = name.strip_prefix('_').unwrap_or(name);
    while let Some(c) = p.chars().next() {
        if c == '.' || c == '!' {
            out.push(usize::MAX);
            break;
        }
        let Some((class, rest)) = pattern_class(p) else {
            break;
        };
        out.push(class.len());
        p = rest;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_labels_and_asterisks_warnings() {
        let d = Dialplan::load(&[
            (
                "override.conf",
                "[macro-dial]\nexten => s,6(dial),Goto(tandem) ; mine\nexten => s,500(tandem),NoOp(a\\;b)\n",
            ),
            (
                "additional.conf",
                "[macro-dial]\nexten => s,1,NoOp(one)\nexten => s,n,NoOp(two)\nexten => s,6(dial),AGI(x.agi)\nexten => s,n,GotoIf($[1]?dial)\n same => n(end),Return()\n[lone]\nexten => s,n,NoOp()\n",
            ),
        ]);
        let (_, s) = d.find("macro-dial", "s").unwrap();
        let numbers: Vec<u32> = s.priorities.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [1, 2, 6, 7, 8, 500]);
        assert_eq!(s.priority(6).unwrap().app, "Goto");
        assert_eq!(s.priority(500).unwrap().data, "a;b");
        assert_eq!(s.label("end"), Some(8));
        assert_eq!(
            d.warnings,
            [
                "Unable to register extension 's' priority 6 in 'macro-dial', already in use",
                "Unable to register extension at line 4 of additional.conf",
                "Can't use 'next' priority on the first entry at line 8 of additional.conf!",
            ]
        );
    }

    #[test]
    fn a_markdown_block_is_found_by_what_it_holds() {
        let md = "intro\n```sh\nls\n```\ntext\n```text\n[ctx]\nexten => 1,1,NoOp()\n```\n";
        assert_eq!(
            markdown_block(md, "[ctx]"),
            Some("[ctx]\nexten => 1,1,NoOp()\n")
        );
        assert_eq!(markdown_block(md, "nothing"), None);
    }

    #[test]
    fn exact_names_beat_patterns_and_the_most_specific_pattern_wins() {
        let d = Dialplan::load(&[(
            "x.conf",
            "[in]\nexten => _X.,1,NoOp(any)\nexten => _1XXX,1,NoOp(four)\nexten => 1001,1,NoOp(exact)\ninclude => other\n[other]\nexten => _[*#]!,1,NoOp(star)\n",
        )]);
        let first = |e: &str| d.find("in", e).map(|(_, x)| x.priorities[0].data.clone());
        assert_eq!(first("1001").as_deref(), Some("exact"));
        assert_eq!(first("1002").as_deref(), Some("four"));
        assert_eq!(first("20").as_deref(), Some("any"));
        assert_eq!(first("*9").as_deref(), Some("star"));
        assert_eq!(first("abc"), None);
    }
}
