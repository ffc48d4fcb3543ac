//! The PHP rules dialparties.agi's decisions run under, so the route decides as the script
//! does on odd values too: FreePBX 16 runs it on PHP 7.4, FreePBX 17 on PHP 8.2, and the two
//! differ where a string meets a number (`"abc" > 1`, `"" + 2`).
//!
//! Only what the script uses is here: truthiness, `is_numeric`, loose `==` between strings,
//! comparison of a value with an integer, `+`/`-`, `round`, number-to-string, and phpagi's
//! reading of a reply's value.

/// Which PHP the script runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Php {
    /// PHP 7.4 (FreePBX 16).
    V7,
    /// PHP 8.2 (FreePBX 17).
    V8,
}

/// A PHP value of the kinds the script's timers hold: a string read from Asterisk, or a
/// number it computed.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(String),
    Int(i64),
    Float(f64),
}

/// The script stops here in PHP 8: an arithmetic operand that is not a number at all
/// (`TypeError: Unsupported operand types`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    pub operand: String,
}

/// PHP's `trim()` character set.
const TRIM: &[char] = &[' ', '\t', '\n', '\r', '\0', '\u{b}'];
/// The whitespace a numeric string may have around it.
const NUMERIC_SPACE: &[char] = &[' ', '\t', '\n', '\r', '\u{b}', '\u{c}'];

pub fn trim(s: &str) -> &str {
    s.trim_matches(TRIM)
}

/// A string's truth: `""` and `"0"` are false.
pub fn truthy(s: &str) -> bool {
    !s.is_empty() && s != "0"
}

impl Val {
    pub fn truthy(&self) -> bool {
        match self {
            Val::Str(s) => truthy(s),
            Val::Int(i) => *i != 0,
            Val::Float(f) => *f != 0.0,
        }
    }

    /// The value as PHP prints it (`echo`, string concatenation).
    pub fn text(&self) -> String {
        match self {
            Val::Str(s) => s.clone(),
            Val::Int(i) => i.to_string(),
            Val::Float(f) => float_text(*f),
        }
    }
}

/// PHP 8's float to string: the shortest representation that reads back, integral values
/// without a point, and exponents from 1e15 up and below 1e-4.
fn float_text(f: f64) -> String {
    if f.is_nan() {
        return "NAN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "INF" } else { "-INF" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e15).contains(&a) {
        let e = format!("{f:E}");
        let (mantissa, exp) = e.split_once('E').unwrap_or((&e, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        let exp = if exp.starts_with('-') {
            exp.to_string()
        } else {
            format!("+{exp}")
        };
        return format!("{mantissa}E{exp}");
    }
    if f == f.trunc() {
        // -0.0 prints as "-0" in PHP.
        return format!("{f:.0}");
    }
    format!("{f}")
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// Reads the numeric prefix of `s` (after leading whitespace): its value and its length in
/// bytes from the start of `s`. None when no digit starts it.
fn numeric_prefix(s: &str) -> Option<(Num, usize)> {
    let b = s.as_bytes();
    let mut i = s.len() - s.trim_start_matches(NUMERIC_SPACE).len();
    let start = i;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    let mut is_float = false;
    if i < b.len() && b[i] == b'.' {
        let mut j = i + 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        frac_digits = j - i - 1;
        if int_digits + frac_digits > 0 {
            i = j;
            is_float = true;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let exp_start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > exp_start {
            i = j;
            is_float = true;
        }
    }
    let text = &s[start..i];
    let num = if is_float {
        Num::Float(text.parse().ok()?)
    } else {
        match text.parse::<i64>() {
            Ok(n) => Num::Int(n),
            Err(_) => Num::Float(text.parse().ok()?),
        }
    };
    Some((num, i))
}

/// `is_numeric($s)`: the whole string is a number, with leading whitespace (and, in PHP 8,
/// trailing whitespace).
fn numeric(s: &str, php: Php) -> Option<Num> {
    let (n, end) = numeric_prefix(s)?;
    let rest = &s[end..];
    let ok =
        rest.is_empty() || (php == Php::V8 && rest.trim_start_matches(NUMERIC_SPACE).is_empty());
    ok.then_some(n)
}

pub fn is_numeric(s: &str, php: Php) -> bool {
    numeric(s, php).is_some()
}

/// The number a value is in arithmetic: PHP 7 reads a leading number or 0; PHP 8 the same
/// for a leading number, and a TypeError for a string that does not start with one.
fn arith(v: &Val, php: Php) -> Result<Num, TypeError> {
    match v {
        Val::Int(i) => Ok(Num::Int(*i)),
        Val::Float(f) => Ok(Num::Float(*f)),
        Val::Str(s) => match numeric_prefix(s) {
            Some((n, _)) => Ok(n),
            None if php == Php::V7 => Ok(Num::Int(0)),
            None => Err(TypeError { operand: s.clone() }),
        },
    }
}

pub fn add(a: &Val, b: &Val, php: Php) -> Result<Val, TypeError> {
    let (x, y) = (arith(a, php)?, arith(b, php)?);
    Ok(match (x, y) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_add(y)
            .map_or(Val::Float(x as f64 + y as f64), Val::Int),
        _ => Val::Float(x.f() + y.f()),
    })
}

pub fn sub(a: &Val, b: &Val, php: Php) -> Result<Val, TypeError> {
    let (x, y) = (arith(a, php)?, arith(b, php)?);
    Ok(match (x, y) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_sub(y)
            .map_or(Val::Float(x as f64 - y as f64), Val::Int),
        _ => Val::Float(x.f() - y.f()),
    })
}

/// `round($x / 60, 0)`: half away from zero, a float.
pub fn round_div(x: &Val, by: i64, php: Php) -> Result<Val, TypeError> {
    let n = arith(x, php)?.f() / by as f64;
    Ok(Val::Float(n.round()))
}

/// `$v <=> $n` for an integer `n`, as `$v > 1` and `$v < 0` compare.
pub fn cmp_int(v: &Val, n: i64, php: Php) -> std::cmp::Ordering {
    let num = |x: f64| {
        x.partial_cmp(&(n as f64))
            .unwrap_or(std::cmp::Ordering::Less)
    };
    match v {
        Val::Int(i) => i.cmp(&n),
        Val::Float(f) => num(*f),
        Val::Str(s) => match (numeric(s, php), php) {
            (Some(x), _) => num(x.f()),
            // PHP 8 compares a non-numeric string with the number's text.
            (None, Php::V8) => s.as_str().cmp(n.to_string().as_str()),
            // PHP 7 reads the string's leading number, or 0.
            (None, Php::V7) => num(numeric_prefix(s).map_or(0.0, |(x, _)| x.f())),
        },
    }
}

/// Loose `==` between two strings: numerically when both are numeric, else byte for byte.
pub fn loose_eq(a: &str, b: &str, php: Php) -> bool {
    match (numeric(a, php), numeric(b, php)) {
        (Some(x), Some(y)) => x.f() == y.f(),
        _ => a == b,
    }
}

/// What phpagi hands the script for a `200 result=1 (VALUE)` reply: `(result, data)`. It
/// splits the line on spaces and strips one parenthesis from the ends of the value's first and
/// last words, so `a b` reads `a b` but `x (y) z` reads `x y z)`, leading and trailing spaces
/// go, and a word of the form `k=v` once the parentheses have closed is taken as a field
/// (`a) result=0 (b` reads as not set).
pub fn phpagi_reply(value: &str) -> (String, String) {
    let line = format!("result=1 ({value})");
    let mut result = String::new();
    let mut data = String::new();
    let mut in_token = false;
    for token in trim(&line).split(' ') {
        if in_token {
            let mut tmp = trim(token);
            tmp = tmp.strip_prefix('(').unwrap_or(tmp);
            tmp = tmp.strip_suffix(')').unwrap_or(tmp);
            data.push(' ');
            data.push_str(trim(tmp));
            if token.ends_with(')') {
                in_token = false;
            }
        } else if let Some(rest) = token.strip_prefix('(') {
            in_token = !token.ends_with(')');
            let mut tmp = trim(rest);
            if !in_token {
                // substr($tmp, 0, strlen($tmp) - 1): the last byte goes, whatever it is.
                let cut = tmp.len().saturating_sub(1);
                tmp = tmp.get(..cut).unwrap_or("");
            }
            data.push(' ');
            data.push_str(trim(tmp));
        } else if token.find('=').is_some_and(|i| i > 0) {
            let mut parts = token.split('=');
            let key = parts.next().unwrap_or("");
            if key == "result" {
                result = parts.next().unwrap_or("").to_string();
            }
        } else if !token.is_empty() {
            data.push(' ');
            data.push_str(token);
        }
    }
    (result, trim(&data).to_string())
}

/// One word without parentheses or spaces reads as it is (nearly every value).
pub fn phpagi_keeps(value: &str) -> bool {
    !value.contains(['(', ')']) && !value.contains(TRIM)
}

/// `get_var()` and `database_get()['data']` as the script sees a value that is set: the
/// value, or `""` when phpagi no longer reads `result=1`.
pub fn phpagi_value(value: &str, php: Php) -> String {
    if phpagi_keeps(value) {
        return value.to_string();
    }
    let (result, data) = phpagi_reply(value);
    if loose_eq(&result, "1", php) {
        data
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn numbers_as_php_reads_them() {
        for (s, v7, v8) in [
            ("5", true, true),
            (" 5", true, true),
            ("5 ", false, true),
            ("1e3", true, true),
            (".5", true, true),
            ("5.", true, true),
            (".", false, false),
            ("0x1A", false, false),
            ("", false, false),
            ("+1", true, true),
            ("12abc", false, false),
        ] {
            assert_eq!(is_numeric(s, Php::V7), v7, "{s:?} in PHP 7");
            assert_eq!(is_numeric(s, Php::V8), v8, "{s:?} in PHP 8");
        }
    }

    #[test]
    fn comparisons_differ_between_7_and_8() {
        let s = |x: &str| Val::Str(x.into());
        // Checked against php 8.2: "" > 1 false, "abc" > 1 true, "5abc" > 1 true.
        assert_eq!(cmp_int(&s(""), 1, Php::V8), Less);
        assert_eq!(cmp_int(&s("abc"), 1, Php::V8), Greater);
        assert_eq!(cmp_int(&s("5abc"), 1, Php::V8), Greater);
        assert_eq!(cmp_int(&s("abc"), 1, Php::V7), Less);
        assert_eq!(cmp_int(&s("5abc"), 1, Php::V7), Greater);
        assert_eq!(cmp_int(&s("-1"), 0, Php::V8), Less);
    }

    #[test]
    fn arithmetic_on_strings() {
        let s = |x: &str| Val::Str(x.into());
        assert_eq!(add(&s("3"), &Val::Int(2), Php::V8), Ok(Val::Int(5)));
        assert_eq!(add(&s("5abc"), &Val::Int(2), Php::V8), Ok(Val::Int(7)));
        assert_eq!(add(&s("2.5"), &Val::Int(1), Php::V8), Ok(Val::Float(3.5)));
        assert_eq!(add(&s(""), &Val::Int(2), Php::V7), Ok(Val::Int(2)));
        assert!(add(&s(""), &Val::Int(2), Php::V8).is_err());
        assert_eq!(Val::Float(10.0).text(), "10");
        assert_eq!(Val::Float(3.5).text(), "3.5");
        assert_eq!(Val::Float(1e25).text(), "1.0E+25");
    }

    #[test]
    fn phpagi_reads_values_as_it_splits_them() {
        let v = |x: &str| phpagi_value(x, Php::V8);
        assert_eq!(v("HhtrM(auto-blkvm)"), "HhtrM(auto-blkvm)");
        assert_eq!(v("a b"), "a b");
        assert_eq!(v(" padded "), "padded");
        // Checked against the same parsing run by php 8.2.
        assert_eq!(v("x (y) z"), "x y z)");
        assert_eq!(v("a result=0"), "a result=0");
        assert_eq!(v("a) result=0 (b"), "");
        assert_eq!(v("a  b"), "a  b");
        assert_eq!(v(""), "");
        assert_eq!(
            v("PJSIP/100/sip:100@10.0.0.1:5060;ob"),
            "PJSIP/100/sip:100@10.0.0.1:5060;ob"
        );
    }

    #[test]
    fn loose_equality() {
        assert!(loose_eq("100", "100.0", Php::V8));
        assert!(loose_eq("1e2", "100", Php::V7));
        assert!(!loose_eq("abc", "ABC", Php::V8));
        assert!(loose_eq(" 100", "100", Php::V7));
        assert!(!loose_eq("100 ", "100", Php::V7));
        assert!(loose_eq("100 ", "100", Php::V8));
    }
}
