//! Numbers as the B2BUA rule compares them: a user part cleaned to its dialable characters, and
//! the other forms the prefix rules give it.

use crate::config::{MAX_FORMS, PrefixRule};

/// Numbers shorter than this are never compared (`s`, `0`, an operator code).
pub const MIN_DIGITS: usize = 2;
/// Longest number compared, in characters (E.164 is at most 15 digits; room for prefixes).
pub const MAX_NUMBER_CHARS: usize = 32;

/// The dialable characters of a SIP user part (`+49 30-1234` is `+49301234`; the `+` only
/// leading), or `None` for something else: a name, `anonymous`, too short or too long.
pub fn clean(user: &str) -> Option<String> {
    // A user part may carry parameters (`123;phone-context=...`).
    let user = user.split(';').next().unwrap_or("");
    let mut out = String::new();
    for (i, c) in user.chars().enumerate() {
        match c {
            '0'..='9' | '*' | '#' => out.push(c),
            '+' if i == 0 => out.push(c),
            '-' | '.' | ' ' | '(' | ')' => {}
            _ => return None,
        }
        if out.len() > MAX_NUMBER_CHARS {
            return None;
        }
    }
    let digits = out.bytes().filter(u8::is_ascii_digit).count();
    (digits >= MIN_DIGITS).then_some(out)
}

/// A number's forms: itself and, rule after rule, what each rule makes of the forms so far
/// (at most [`MAX_FORMS`]).
pub fn forms(user: &str, rules: &[PrefixRule]) -> Vec<Box<str>> {
    let Some(n) = clean(user) else {
        return Vec::new();
    };
    let mut out: Vec<Box<str>> = vec![n.into()];
    for r in rules {
        let mut i = 0;
        while i < out.len() && out.len() < MAX_FORMS {
            if let Some(rest) = out[i].strip_prefix(r.strip.as_str())
                && !rest.is_empty()
            {
                let f: Box<str> = format!("{}{rest}", r.add).into();
                if !out.contains(&f) {
                    out.push(f);
                }
            }
            i += 1;
        }
    }
    out
}

/// Two numbers are the same when a form of one is a form of the other.
pub fn same(a: &[Box<str>], b: &[Box<str>]) -> bool {
    a.iter().any(|f| b.contains(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(strip: &str, add: &str) -> PrefixRule {
        PrefixRule {
            strip: strip.into(),
            add: add.into(),
        }
    }

    #[test]
    fn clean_keeps_dialable_characters() {
        assert_eq!(clean("+49 30-1234").as_deref(), Some("+49301234"));
        assert_eq!(clean("201;phone-context=pbx").as_deref(), Some("201"));
        assert_eq!(clean("anonymous"), None);
        assert_eq!(clean("s"), None);
        assert_eq!(clean("7"), None);
        assert_eq!(clean("12+3"), None);
        assert_eq!(clean(&"1".repeat(40)), None);
    }

    #[test]
    fn rules_chain_an_outside_line_digit_then_a_national_prefix() {
        let rules = [rule("9", ""), rule("0", "+49")];
        let dialled = forms("90301234567", &rules);
        assert!(same(&dialled, &forms("+49301234567", &rules)));
        assert!(same(&dialled, &forms("0301234567", &rules)));
        assert!(!same(&dialled, &forms("+49301234568", &rules)));
        // Without rules only the same text matches.
        assert!(!same(
            &forms("90301234567", &[]),
            &forms("+49301234567", &[])
        ));
    }

    #[test]
    fn forms_are_bounded() {
        let rules: Vec<PrefixRule> = (0..16).map(|i| rule("1", &format!("{i}1"))).collect();
        assert!(forms("11111111", &rules).len() <= MAX_FORMS);
    }
}
