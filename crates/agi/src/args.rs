//! Asterisk's own reading of a command line (res_agi.c `parse_args`), so that the emulator
//! splits commands exactly as Asterisk does and [`crate::Command`]'s encoding can be checked
//! against it.
//!
//! The rules: space and tab separate words; `"` toggles quoting and, when it opens right after
//! whitespace, starts a word, so `""` is an empty argument; `\` makes the next character literal,
//! inside or outside quotes; a CR is an ordinary character (`NOOP\r` is an unknown command).

/// Most words Asterisk keeps from one command line (its `MAX_ARGS`, 128, less the terminator).
pub const MAX_WORDS: usize = 127;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("command line has more than {MAX_WORDS} words")]
    TooManyWords,
}

/// Splits a command line (without its `\n`) into words.
pub fn split_args(line: &str) -> Result<Vec<String>, ArgsError> {
    let mut words: Vec<String> = Vec::new();
    let mut quoted = false;
    let mut escaped = false;
    let mut in_word = false;
    for c in line.chars() {
        match c {
            '"' if !escaped => {
                quoted = !quoted;
                if quoted && !in_word {
                    start_word(&mut words)?;
                    in_word = true;
                }
            }
            ' ' | '\t' if !quoted && !escaped => in_word = false,
            '\\' if !escaped => {
                escaped = true;
                continue;
            }
            _ => {
                if !in_word {
                    start_word(&mut words)?;
                    in_word = true;
                }
                words.last_mut().expect("a word was started").push(c);
            }
        }
        escaped = false;
    }
    Ok(words)
}

fn start_word(words: &mut Vec<String>) -> Result<(), ArgsError> {
    if words.len() >= MAX_WORDS {
        return Err(ArgsError::TooManyWords);
    }
    words.push(String::new());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<String> {
        split_args(s).unwrap()
    }

    #[test]
    fn asterisk_word_rules() {
        assert_eq!(
            split("SET VARIABLE FOO \"bar baz\""),
            ["SET", "VARIABLE", "FOO", "bar baz"]
        );
        assert_eq!(
            split("STREAM FILE nosuchfile \"\""),
            ["STREAM", "FILE", "nosuchfile", ""]
        );
        assert_eq!(
            split("SET CALLERID \"Alice\" <1234>"),
            ["SET", "CALLERID", "Alice", "<1234>"]
        );
        assert_eq!(split("a\\ b \"c\\\"d\" e\\\\"), ["a b", "c\"d", "e\\"]);
        assert_eq!(split("  NOOP   x\t"), ["NOOP", "x"]);
        assert_eq!(split("NOOP\r"), ["NOOP\r"]);
        assert_eq!(split(""), Vec::<String>::new());
    }

    #[test]
    fn word_count_is_bounded() {
        let line = "w ".repeat(MAX_WORDS + 1);
        assert_eq!(split_args(&line), Err(ArgsError::TooManyWords));
        assert_eq!(
            split_args(&"w ".repeat(MAX_WORDS)).unwrap().len(),
            MAX_WORDS
        );
    }
}
