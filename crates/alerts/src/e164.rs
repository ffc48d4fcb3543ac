//! Dialled numbers as E.164, and the country and premium ranges they reach.
//!
//! What it is: [`normalize`] turns a number as a PBX sees it (a `sip:`/`tel:` URI, a dial
//! string with separators, `+CC…`, `00CC…`, `011CC…`) into E.164 (`+CC…`); [`country`] names
//! the country of an E.164 number by ITU-T E.164's country codes (longest prefix wins); and
//! [`PremiumList`] says whether it falls in a premium or high-risk range.
//!
//! Never: guesses. A number dialled without an international prefix is national, and its
//! country depends on the PBX's own, which Tandem does not assume: it stays `None`. Never
//! allocates more than the 16 bytes of a result, and never reads past
//! [`NUMBER_INPUT_BYTES_MAX`] of its input.
//!
//! Start reading: [`normalize`], then [`country`]; the tables are in `e164/codes.rs`.

mod codes;

/// Input longer than this is not a dialled number (a URI with a long host still fits).
pub const NUMBER_INPUT_BYTES_MAX: usize = 64;
/// An E.164 number has at most 15 digits, country code included.
pub const E164_DIGITS_MAX: usize = 15;
/// International prefixes in one [`Dialling`].
pub const INTERNATIONAL_PREFIXES_MAX: usize = 16;
/// Digits in one international prefix (a trunk access code and `00`, e.g. `9011`, fits).
pub const INTERNATIONAL_PREFIX_DIGITS_MAX: usize = 8;
/// Prefixes in a [`PremiumList`], built-in ones included.
pub const PREMIUM_PREFIXES_MAX: usize = 10_000;
/// The international prefixes used when none are configured: `00` (ITU's recommendation,
/// most of the world) and `011` (North America).
pub const INTERNATIONAL_PREFIXES_DEFAULT: [&str; 2] = ["00", "011"];

/// A configuration this module refuses, naming the entry and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum E164Error {
    #[error(
        "international prefix {prefix:?}: {problem}; write digits only, e.g. \"00\" or \"011\""
    )]
    InternationalPrefix { prefix: String, problem: String },
    #[error("premium prefix {prefix:?}: {problem}; write it in E.164 with its +, e.g. \"+88213\"")]
    PremiumPrefix { prefix: String, problem: String },
}

/// How numbers are dialled on this PBX: which leading digits mean "international".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dialling {
    /// Longest first, so that `0011` is tried before `00` when both are configured.
    international_prefixes: Vec<String>,
}

impl Default for Dialling {
    fn default() -> Self {
        Dialling::new(INTERNATIONAL_PREFIXES_DEFAULT).expect("the defaults are valid")
    }
}

impl Dialling {
    /// International prefixes as the PBX's users dial them (`["00", "011"]`, or with a trunk
    /// access code, `["900", "9011"]`): digits only, at most
    /// [`INTERNATIONAL_PREFIX_DIGITS_MAX`] each, at most [`INTERNATIONAL_PREFIXES_MAX`].
    pub fn new<S: AsRef<str>>(
        prefixes: impl IntoIterator<Item = S>,
    ) -> Result<Dialling, E164Error> {
        let mut international_prefixes = Vec::new();
        for prefix in prefixes {
            let prefix = prefix.as_ref();
            let refuse = |problem: &str| E164Error::InternationalPrefix {
                prefix: shown(prefix),
                problem: problem.to_string(),
            };
            if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
                return Err(refuse("not a run of digits"));
            }
            if prefix.len() > INTERNATIONAL_PREFIX_DIGITS_MAX {
                return Err(refuse(&format!(
                    "longer than {INTERNATIONAL_PREFIX_DIGITS_MAX} digits"
                )));
            }
            if international_prefixes.len() == INTERNATIONAL_PREFIXES_MAX {
                return Err(refuse(&format!(
                    "more than {INTERNATIONAL_PREFIXES_MAX} international prefixes"
                )));
            }
            international_prefixes.push(prefix.to_string());
        }
        international_prefixes.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        international_prefixes.dedup();
        Ok(Dialling {
            international_prefixes,
        })
    }

    /// Longest first.
    pub fn international_prefixes(&self) -> &[String] {
        &self.international_prefixes
    }
}

/// A dialled number in E.164 (`+` and up to 15 digits), or `None` when it is national, a
/// service code, or not a number.
///
/// Read: a `sip:`/`sips:` URI's user part (`sip:0088213@pbx`), a `tel:` URI's number
/// (`tel:+882-13…`), either with URI parameters or in `<…>`; visual separators (`-`, `.`,
/// spaces, parentheses) are dropped. Then `+CC…` is kept as it is, and a number starting
/// with one of `dialling`'s international prefixes has it replaced by `+`.
///
/// Idempotent: a result given back returns itself.
pub fn normalize(dialled: &str, dialling: &Dialling) -> Option<String> {
    if dialled.len() > NUMBER_INPUT_BYTES_MAX {
        return None;
    }
    let number = uri_number(dialled.trim());
    let mut digits = [0u8; NUMBER_INPUT_BYTES_MAX];
    let mut count = 0;
    let mut plus = false;
    for byte in number.bytes() {
        match byte {
            b'0'..=b'9' => {
                digits[count] = byte;
                count += 1;
            }
            // Only before the first digit, once: "(+44) 20…" has it, "12+3" is no number.
            b'+' if count == 0 && !plus => plus = true,
            b'-' | b'.' | b' ' | b'(' | b')' => {}
            _ => return None,
        }
    }
    let digits = &digits[..count];
    let national = if plus {
        digits
    } else {
        let prefix = dialling
            .international_prefixes
            .iter()
            .find(|prefix| digits.starts_with(prefix.as_bytes()))?;
        &digits[prefix.len()..]
    };
    if national.is_empty() || national.len() > E164_DIGITS_MAX || national[0] == b'0' {
        return None;
    }
    let mut e164 = String::with_capacity(1 + E164_DIGITS_MAX);
    e164.push('+');
    // The bytes are ASCII digits: one char each.
    e164.extend(national.iter().map(|&b| char::from(b)));
    Some(e164)
}

/// The number inside a SIP or tel URI, or `text` itself when it is none.
fn uri_number(text: &str) -> &str {
    let text = text
        .strip_prefix('<')
        .and_then(|inner| inner.strip_suffix('>'))
        .unwrap_or(text);
    let scheme_end = match text.find(':') {
        Some(colon) => colon,
        None => return text,
    };
    let scheme = &text[..scheme_end];
    let rest = &text[scheme_end + 1..];
    if scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips") {
        // The user part ends at '@'; a password (user:password@) and user parameters
        // (;isub=, ;phone-context=) are not the number. No '@' means no user part.
        let Some(at) = rest.find('@') else {
            return "";
        };
        let user = &rest[..at];
        let end = user.find([':', ';']).unwrap_or(user.len());
        &user[..end]
    } else if scheme.eq_ignore_ascii_case("tel") {
        let end = rest.find([';', '?']).unwrap_or(rest.len());
        &rest[..end]
    } else {
        // Another scheme, or a colon in a dial string: not a number.
        ""
    }
}

/// A country code of ITU-T E.164 and the country (or pseudo-country) a number reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CountryCode {
    /// The ITU country code's digits, without `+`: `"44"`, `"1"`, `"882"`.
    pub code: &'static str,
    /// ISO 3166-1 alpha-2 (`"GB"`, `"GG"` for a Guernsey number under +44), or a
    /// pseudo-country for a global service: `XF` freephone and shared cost (+800, +808), `XS`
    /// satellite (+870, +881), `XN` International Networks (+882, +883), `XU` UPT (+878), `XD`
    /// disaster relief (+888), `XP` premium rate (+979), `XT` the +991 trial.
    pub iso: &'static str,
}

impl CountryCode {
    /// A global service rather than a country (`XF`, `XS`, `XN`, ...).
    pub fn is_global_service(&self) -> bool {
        self.iso.starts_with('X') && self.iso != "XK"
    }
}

/// The country an E.164 number (`+` and digits, as [`normalize`] gives) reaches, or `None`
/// for a spare country code or text that is no E.164 number.
///
/// +1 is split by the North American area code (the other countries' and territories' codes
/// are tabled; the rest is `US`), +7 by the next digit (`76`, `77` Kazakhstan, the rest
/// Russia), and a few codes shared by a country and its territories by their national ranges.
pub fn country(e164: &str) -> Option<CountryCode> {
    let digits = e164_digits(e164)?;
    let code = (1..=3.min(digits.len()))
        .rev()
        .find_map(|len| lookup(codes::COUNTRY_CODES, &digits[..len]))?;
    let iso = (code.0.len() + 1..=codes::REGION_DIGITS_MAX.min(digits.len()))
        .rev()
        .find_map(|len| lookup(codes::REGIONS, &digits[..len]))
        .map_or(code.1, |region| region.1);
    Some(CountryCode { code: code.0, iso })
}

/// The digits of `+` and 1 to 15 digits, the first not 0.
fn e164_digits(e164: &str) -> Option<&str> {
    let digits = e164.strip_prefix('+')?;
    let valid = !digits.is_empty()
        && digits.len() <= E164_DIGITS_MAX
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.starts_with('0');
    valid.then_some(digits)
}

fn lookup(
    table: &'static [(&'static str, &'static str)],
    prefix: &str,
) -> Option<&'static (&'static str, &'static str)> {
    table
        .binary_search_by(|(key, _)| (*key).cmp(prefix))
        .ok()
        .map(|at| &table[at])
}

/// Premium and high-risk ranges: the built-in ones (global satellite, network and
/// premium-rate services, and the remote territories most abused in revenue-share fraud; the
/// list is in `e164/codes.rs` with its reasons) plus the operator's `premium_prefixes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PremiumList {
    /// Sorted, without repeats, for a binary search per prefix length.
    prefixes: Vec<String>,
}

impl PremiumList {
    /// The built-in ranges alone.
    pub fn builtin() -> PremiumList {
        PremiumList {
            prefixes: codes::PREMIUM_BUILTIN
                .iter()
                .map(|p| p.to_string())
                .collect(),
        }
        .sorted()
    }

    /// No range at all (for an operator who wants only their own).
    pub fn empty() -> PremiumList {
        PremiumList {
            prefixes: Vec::new(),
        }
    }

    /// These ranges added: each `+` and 1 to 15 digits (`+88213`); at most
    /// [`PREMIUM_PREFIXES_MAX`] in all.
    pub fn with<S: AsRef<str>>(
        mut self,
        extra: impl IntoIterator<Item = S>,
    ) -> Result<PremiumList, E164Error> {
        for prefix in extra {
            let prefix = prefix.as_ref();
            let refuse = |problem: String| E164Error::PremiumPrefix {
                prefix: shown(prefix),
                problem,
            };
            if e164_digits(prefix).is_none() {
                return Err(refuse(format!(
                    "not + and 1 to {E164_DIGITS_MAX} digits, the first not 0"
                )));
            }
            if self.prefixes.len() == PREMIUM_PREFIXES_MAX {
                return Err(refuse(format!(
                    "more than {PREMIUM_PREFIXES_MAX} premium prefixes"
                )));
            }
            self.prefixes.push(prefix.to_string());
        }
        Ok(self.sorted())
    }

    fn sorted(mut self) -> PremiumList {
        self.prefixes.sort();
        self.prefixes.dedup();
        self
    }

    /// Whether an E.164 number falls in one of the ranges.
    pub fn matches(&self, e164: &str) -> bool {
        self.longest_match(e164).is_some()
    }

    /// The longest range an E.164 number falls in (what an alert shows as the reason).
    pub fn longest_match(&self, e164: &str) -> Option<&str> {
        e164_digits(e164)?;
        // One binary search per length: `+8` to the whole number, longest first.
        (2..=e164.len()).rev().find_map(|len| {
            self.prefixes
                .binary_search_by(|p| p.as_str().cmp(&e164[..len]))
                .ok()
                .map(|at| self.prefixes[at].as_str())
        })
    }

    /// The ranges, sorted.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }
}

/// Configuration text as an error shows it: cut, so that a pasted paragraph stays one line.
fn shown(text: &str) -> String {
    const SHOWN_CHARS_MAX: usize = 40;
    let mut shown: String = text.chars().take(SHOWN_CHARS_MAX).collect();
    if text.chars().nth(SHOWN_CHARS_MAX).is_some() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e164(dialled: &str) -> Option<String> {
        normalize(dialled, &Dialling::default())
    }

    fn iso(e164: &str) -> Option<&'static str> {
        country(e164).map(|c| c.iso)
    }

    #[test]
    fn every_form_of_an_international_networks_number_is_the_same_e164() {
        for dialled in [
            "+882134567890",
            "00882134567890",
            "011882134567890",
            "tel:+882-13-456-7890",
            "tel:+882.13.456.7890;phone-context=+882",
            "sip:00882134567890@pbx",
            "sips:011882134567890@pbx.example.com:5061;transport=tls",
            "<sip:+882134567890;user=phone@pbx>",
            "SIP:00882134567890:secret@pbx",
            " +882 (13) 456 7890 ",
        ] {
            assert_eq!(e164(dialled).as_deref(), Some("+882134567890"), "{dialled}");
        }
    }

    #[test]
    fn a_national_number_stays_unknown() {
        for dialled in [
            "0201234567",   // a national trunk prefix
            "2125551234",   // a North American number without 1 or 011
            "5551234",      // a local number
            "sip:1001@pbx", // an extension
            "tel:1234;phone-context=example.com",
            "*97", // a feature code
            "",
            "+",
            "00",
            "011",
            "+0441234",            // no country code starts with 0
            "000441234",           // 00 then 0...
            "+1234567890123456",   // 16 digits
            "sip:pbx.example.com", // no user part
            "http://+44123",
            "12+34",
            "++44123",
            "+44 12a",
        ] {
            assert_eq!(e164(dialled), None, "{dialled}");
        }
        let long = format!("+44{}", "1".repeat(NUMBER_INPUT_BYTES_MAX));
        assert_eq!(e164(&long), None);
    }

    #[test]
    fn international_prefixes_are_configurable_and_longest_first() {
        // A PBX whose users dial 9 for an outside line.
        let dialling = Dialling::new(["900", "9011"]).unwrap();
        assert_eq!(dialling.international_prefixes(), ["9011", "900"]);
        assert_eq!(
            normalize("9011442079460000", &dialling).as_deref(),
            Some("+442079460000")
        );
        assert_eq!(
            normalize("900353123456", &dialling).as_deref(),
            Some("+353123456")
        );
        assert_eq!(normalize("00353123456", &dialling), None);
        // Australia's 0011 against a configured 00: the longer is read first.
        let dialling = Dialling::new(["00", "0011"]).unwrap();
        assert_eq!(
            normalize("0011441234", &dialling).as_deref(),
            Some("+441234")
        );
        for bad in ["", "+00", "0x0", "123456789"] {
            let err = Dialling::new([bad]).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let many: Vec<String> = (0..=INTERNATIONAL_PREFIXES_MAX)
            .map(|n| n.to_string())
            .collect();
        assert!(Dialling::new(&many).is_err());
    }

    #[test]
    fn normalize_is_idempotent_on_its_output() {
        for dialled in [
            "0044 20 7946 0000",
            "tel:+1-212-555-0100",
            "sip:0118821612345@x",
        ] {
            let once = e164(dialled).unwrap();
            assert_eq!(e164(&once).as_deref(), Some(once.as_str()));
        }
    }

    #[test]
    fn the_tables_are_sorted_for_binary_search_and_well_formed() {
        for table in [codes::COUNTRY_CODES, codes::REGIONS] {
            for pair in table.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{:?} before {:?}", pair[0], pair[1]);
            }
            for (prefix, iso) in table {
                assert!(prefix.bytes().all(|b| b.is_ascii_digit()) && !prefix.starts_with('0'));
                assert!(
                    iso.len() == 2 && iso.bytes().all(|b| b.is_ascii_uppercase()),
                    "{iso}"
                );
            }
        }
        for (code, _) in codes::COUNTRY_CODES {
            assert!((1..=3).contains(&code.len()), "{code}");
        }
        for (prefix, _) in codes::REGIONS {
            assert!(prefix.len() <= codes::REGION_DIGITS_MAX, "{prefix}");
            // Every region lies under an assigned code, which is not itself a prefix of
            // another code (E.164's codes are a prefix-free set).
            let code = country(&format!("+{prefix}")).unwrap().code;
            assert!(
                prefix.starts_with(code) && prefix.len() > code.len(),
                "{prefix}"
            );
        }
        for (a, _) in codes::COUNTRY_CODES {
            for (b, _) in codes::COUNTRY_CODES {
                assert!(a == b || !b.starts_with(a), "{a} is a prefix of {b}");
            }
        }
    }

    #[test]
    fn country_codes_of_every_length() {
        let cases = [
            ("+12125550100", "1", "US"),
            ("+14165550100", "1", "CA"),
            ("+18765550100", "1", "JM"),
            ("+18095550100", "1", "DO"),
            ("+17875550100", "1", "PR"),
            ("+16715550100", "1", "GU"),
            ("+74951234567", "7", "RU"),
            ("+77011234567", "7", "KZ"),
            ("+76112345678", "7", "KZ"),
            ("+79161234567", "7", "RU"),
            ("+201001234567", "20", "EG"),
            ("+27211234567", "27", "ZA"),
            ("+442079460000", "44", "GB"),
            ("+441481123456", "44", "GG"),
            ("+441534123456", "44", "JE"),
            ("+441624123456", "44", "IM"),
            ("+4930123456", "49", "DE"),
            ("+81312345678", "81", "JP"),
            ("+353123456789", "353", "IE"),
            ("+3906698123", "39", "VA"),
            ("+390612345678", "39", "IT"),
            ("+8801712345678", "880", "BD"),
            ("+8816123456789", "881", "XS"),
            ("+882134567890", "882", "XN"),
            ("+88351234567", "883", "XN"),
            ("+870773123456", "870", "XS"),
            ("+80012345678", "800", "XF"),
            ("+97912345678", "979", "XP"),
            ("+886212345678", "886", "TW"),
            ("+262269123456", "262", "YT"),
            ("+262262123456", "262", "RE"),
            ("+59997123456", "599", "CW"),
            ("+5997171234", "599", "BQ"),
            ("+3838123456", "383", "XK"),
            ("+998901234567", "998", "UZ"),
        ];
        for (number, code, iso) in cases {
            assert_eq!(country(number), Some(CountryCode { code, iso }), "{number}");
        }
        assert!(country("+882134567890").unwrap().is_global_service());
        assert!(!country("+3838123456").unwrap().is_global_service());
    }

    #[test]
    fn spare_codes_and_non_numbers_have_no_country() {
        for number in [
            "+2101234567",
            "+2801234567",
            "+3841234567",
            "+8011234567",
            "+8511234567",
            "+8711234567",
            "+9901234567",
            "+9991234567",
            "",
            "+",
            "882",
            "+0044",
            "+88a",
            "+1234567890123456",
        ] {
            assert_eq!(iso(number), None, "{number}");
        }
        // A short number still has a country by its code: the alert names what was dialled.
        assert_eq!(iso("+1"), Some("US"));
        assert_eq!(iso("+7"), Some("RU"));
    }

    #[test]
    fn the_builtin_premium_list_holds_the_satellite_network_and_premium_codes() {
        let premium = PremiumList::builtin();
        for number in [
            "+882134567890",
            "+88351234567",
            "+8816123456789",
            "+870773123456",
            "+97912345678",
            "+2474123",
            "+6901234",
        ] {
            assert!(premium.matches(number), "{number}");
        }
        for number in [
            "+442079460000",
            "+8801712345678",
            "+12125550100",
            "+88",
            "00882134567890",
        ] {
            assert!(!premium.matches(number), "{number}");
        }
        assert_eq!(premium.longest_match("+882134567890"), Some("+882"));
    }

    #[test]
    fn the_operator_adds_premium_prefixes_and_the_longest_is_named() {
        let premium = PremiumList::builtin()
            .with(["+88213", "+5358", "+1876", "+88213"])
            .unwrap();
        assert_eq!(premium.longest_match("+882134567890"), Some("+88213"));
        assert_eq!(premium.longest_match("+5358123456"), Some("+5358"));
        assert_eq!(premium.longest_match("+5371234567"), None);
        assert!(premium.matches("+18765550100"));
        assert_eq!(
            premium.prefixes().iter().filter(|p| *p == "+88213").count(),
            1
        );
        let own = PremiumList::empty().with(["+4490"]).unwrap();
        assert!(own.matches("+449012345") && !own.matches("+882134567890"));
        for bad in [
            "88213",
            "0088213",
            "+",
            "+0123",
            "+88 213",
            "+1234567890123456",
        ] {
            let err = PremiumList::builtin().with([bad]).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }
}
