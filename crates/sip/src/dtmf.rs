//! Keypad digits sent in SIP INFO requests, as phones and PBXes do when RFC 4733 events are not
//! negotiated: `application/dtmf-relay` (`Signal=5` and `Duration=160` lines) and
//! `application/dtmf` (the digit alone).

/// Bodies longer than this are not read as a digit (a real one is under 40 bytes).
pub const BODY_BYTES_MAX: usize = 512;

/// One digit from an INFO body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfoDigit {
    /// `0`-`9`, `*`, `#`, `A`-`D`, or `!` for a hook flash.
    pub digit: char,
    /// The `Duration=` line in milliseconds, if given and a number.
    pub duration_ms: Option<u32>,
}

/// The digit of an INFO request's body, given its Content-Type; `None` for any other type or a
/// body that names no digit.
pub fn info_digit(content_type: &str, body: &[u8]) -> Option<InfoDigit> {
    if body.len() > BODY_BYTES_MAX {
        return None;
    }
    let media = content_type.split(';').next()?.trim();
    let text = std::str::from_utf8(body).ok()?;
    if media.eq_ignore_ascii_case("application/dtmf-relay") {
        let (mut digit, mut duration_ms) = (None, None);
        for line in text.lines() {
            let Some((name, value)) = line.split_once('=') else {
                continue;
            };
            let name = name.trim();
            if name.eq_ignore_ascii_case("signal") {
                digit = signal(value.trim());
            } else if name.eq_ignore_ascii_case("duration") {
                duration_ms = value.trim().parse().ok();
            }
        }
        return Some(InfoDigit {
            digit: digit?,
            duration_ms,
        });
    }
    if media.eq_ignore_ascii_case("application/dtmf") {
        return Some(InfoDigit {
            digit: signal(text.trim())?,
            duration_ms: None,
        });
    }
    None
}

/// A signal as written: the character itself, or RFC 4733's event number (10 is `*`, 11 `#`,
/// 12-15 `A`-`D`, 16 a flash), as some gateways send it.
fn signal(s: &str) -> Option<char> {
    let mut chars = s.chars();
    let c = chars.next()?;
    if chars.next().is_none() {
        return match c.to_ascii_uppercase() {
            d @ ('0'..='9' | '*' | '#' | 'A'..='D' | '!') => Some(d),
            _ => None,
        };
    }
    match s.parse::<u8>().ok()? {
        10 => Some('*'),
        11 => Some('#'),
        n @ 12..=15 => Some(char::from(b'A' + n - 12)),
        16 => Some('!'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtmf_relay_bodies_name_a_signal_and_a_duration() {
        let d = info_digit("application/dtmf-relay", b"Signal=5\r\nDuration=160\r\n");
        assert_eq!(
            d,
            Some(InfoDigit {
                digit: '5',
                duration_ms: Some(160)
            })
        );
        // Spaces, lower case, LF line ends, a parameter on the type, event numbers.
        let d = info_digit(
            "Application/DTMF-Relay; x=1",
            b"signal = 11\nduration= 250\n",
        );
        assert_eq!(d.map(|d| (d.digit, d.duration_ms)), Some(('#', Some(250))));
        let d = info_digit("application/dtmf-relay", b"Signal=a\r\n");
        assert_eq!(d.map(|d| (d.digit, d.duration_ms)), Some(('A', None)));
    }

    #[test]
    fn dtmf_bodies_are_the_digit_alone() {
        let d = info_digit("application/dtmf", b"*\r\n").unwrap();
        assert_eq!((d.digit, d.duration_ms), ('*', None));
    }

    #[test]
    fn other_bodies_are_not_digits() {
        assert_eq!(info_digit("application/sdp", b"Signal=5"), None);
        assert_eq!(info_digit("application/dtmf-relay", b"Signal=55\r\n"), None);
        assert_eq!(
            info_digit("application/dtmf-relay", b"Duration=100\r\n"),
            None
        );
        assert_eq!(info_digit("application/dtmf", b"\xff"), None);
        let long = vec![b'5'; BODY_BYTES_MAX + 1];
        assert_eq!(info_digit("application/dtmf", &long), None);
    }
}
