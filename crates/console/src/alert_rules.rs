//! The alert rules as the console shows and edits them, without knowing the engine.
//!
//! `serve` hands the console an [`AlertRules`]: the rules of `tandem.toml` (read-only here) and
//! the console-managed ones as TOML text, which an admin edits on the Alerts page. The console
//! only carries text: checking it is the implementer's (the same parser and validation as
//! `tandem.toml`'s `[[alerts.rule]]`), and so is putting it in effect without a restart.

/// Most bytes of the console-managed rules' text (`PUT /api/alerts/rules`).
pub const RULES_TEXT_BYTES_MAX: usize = 256 << 10;
/// Most problems one check returns to the page (the rest are counted).
pub const RULE_ERRORS_MAX: usize = 50;

/// The rules in effect, as text, and a way to change the console's own.
pub trait AlertRules: Send + Sync {
    /// The `[alerts]` rules from `tandem.toml`, as written there (shown read-only).
    fn config_text(&self) -> String;
    /// The console-managed rules now in effect, as TOML (`[[alerts.rule]]` tables); empty when
    /// there are none.
    fn console_text(&self) -> String;
    /// Checks `text` as the engine would take it, changing nothing: each problem names the rule
    /// and the key.
    fn validate(&self, text: &str) -> Result<(), Vec<String>>;
    /// Checks `text` and, when it is good, keeps it and puts it in effect at once (no restart);
    /// when it is not, changes nothing and says why.
    fn apply(&self, text: &str) -> Result<(), Vec<String>>;
}

/// Why a rules text is refused before it reaches the implementer: too long, or not UTF-8.
pub fn check_text(body: &[u8]) -> Result<&str, String> {
    if body.len() > RULES_TEXT_BYTES_MAX {
        return Err(format!(
            "the rules text is {} bytes; at most {} KiB",
            body.len(),
            RULES_TEXT_BYTES_MAX >> 10
        ));
    }
    std::str::from_utf8(body).map_err(|e| format!("the rules text is not UTF-8: {e}"))
}

/// At most [`RULE_ERRORS_MAX`] problems, and a last line counting the rest.
pub fn capped(mut errors: Vec<String>) -> Vec<String> {
    if errors.len() > RULE_ERRORS_MAX {
        let more = errors.len() - RULE_ERRORS_MAX;
        errors.truncate(RULE_ERRORS_MAX);
        errors.push(format!("... and {more} more"));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_text_is_bounded_and_utf8() {
        assert_eq!(check_text(b"[alerts]\n"), Ok("[alerts]\n"));
        let big = vec![b'#'; RULES_TEXT_BYTES_MAX + 1];
        assert!(check_text(&big).unwrap_err().contains("at most 256 KiB"));
        assert!(check_text(b"\xff").unwrap_err().contains("not UTF-8"));
        let many = capped((0..60).map(|i| i.to_string()).collect());
        assert_eq!(many.len(), RULE_ERRORS_MAX + 1);
        assert_eq!(many.last().unwrap(), "... and 10 more");
    }
}
