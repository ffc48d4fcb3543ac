//! Dialled numbers to E.164: never panics, the result is E.164, and normalising it again
//! gives it back; its country and premium lookups never panic.
#![no_main]

use alerts::e164::{self, Dialling, PremiumList};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let dialling = Dialling::default();
    let premium = PremiumList::builtin();
    // The text as a number, and as an E.164 number given straight to the lookups.
    let _ = e164::country(text);
    let _ = premium.longest_match(text);
    if let Some(number) = e164::normalize(text, &dialling) {
        assert!(number.len() <= 1 + e164::E164_DIGITS_MAX);
        assert!(number.starts_with('+') && number[1..].bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(
            e164::normalize(&number, &dialling).as_deref(),
            Some(number.as_str())
        );
        let _ = e164::country(&number);
        let _ = premium.matches(&number);
    }
});
