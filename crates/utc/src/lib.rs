//! UTC times as text, in one place for every crate: the civil (proleptic Gregorian) calendar,
//! ISO 8601 parsing of what people type (`2026-11-25`, `2026-11-25T14:30`, `...:05.25Z`, or
//! seconds since the epoch), and the RFC 3339 forms Tandem writes.
//!
//! Every time read is bounded to the years 0 to 9999 ([`SECS_MIN`], [`SECS_MAX`]), so no arithmetic on a time
//! that parsed can overflow, whatever the text (a 17-digit year is refused, not wrapped).
//!
//! Never: reads a clock, a time zone database or the locale. Local time is the browser's job.

/// The earliest and latest times [`parse_us`] accepts, seconds since the epoch:
/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z, whether typed as a date or as a number, so
/// that every time read can be written and read back.
pub const SECS_MIN: i64 = -62_167_219_200;
pub const SECS_MAX: i64 = 253_402_300_799;

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`:
/// the epoch is moved to 0000-03-01 so that each leap day falls at the end of its 400-year era.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, 0..=11
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) to days since 1970-01-01: the inverse of [`civil_from_days`].
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Whether (year, month, day) is a real date (not 2026-02-31).
pub fn is_date(y: i64, m: u32, d: u32) -> bool {
    (1..=12).contains(&m)
        && (1..=31).contains(&d)
        && civil_from_days(days_from_civil(y, m, d)) == (y, m, d)
}

/// Reads seconds since the epoch (an integer) or `YYYY-MM-DD[(T| )HH:MM[:SS[.fraction]]][Z]`
/// in UTC, as µs since the epoch. `None` for anything else, or outside the years 0 to 9999.
pub fn parse_us(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<i64>() {
        return (SECS_MIN..=SECS_MAX)
            .contains(&secs)
            .then(|| secs * 1_000_000);
    }
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00"));
    let mut dp = date.splitn(3, '-');
    let y: i64 = dp.next()?.parse().ok()?;
    let m: u32 = dp.next()?.parse().ok()?;
    let d: u32 = dp.next()?.parse().ok()?;
    if !(0..=9999).contains(&y) || !is_date(y, m, d) {
        return None;
    }
    let mut tp = time.splitn(3, ':');
    let hh: i64 = tp.next()?.parse().ok()?;
    let mm: i64 = tp.next()?.parse().ok()?;
    let ss: f64 = match tp.next() {
        Some(x) => x.parse().ok()?,
        None => 0.0,
    };
    // 60: a leap second as written; it reads as the next minute's first.
    if !(0..=23).contains(&hh) || !(0..=59).contains(&mm) || !(0.0..61.0).contains(&ss) {
        return None;
    }
    let secs = days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60;
    Some(secs * 1_000_000 + (ss * 1e6).round() as i64)
}

/// [`parse_us`] in whole seconds (a fraction is dropped).
pub fn parse_s(s: &str) -> Option<i64> {
    parse_us(s).map(|us| us.div_euclid(1_000_000))
}

fn date_time(secs: i64) -> (i64, u32, u32, i64, i64, i64) {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    (y, m, d, sod / 3600, sod % 3600 / 60, sod % 60)
}

/// Seconds since the epoch as RFC 3339 UTC: `2026-11-25T14:30:05Z`.
pub fn format_s(secs: i64) -> String {
    let (y, m, d, hh, mm, ss) = date_time(secs);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// µs since the epoch as RFC 3339 UTC with microseconds: `2026-11-25T14:30:05.000001Z`.
pub fn format_us(us: i64) -> String {
    let (y, m, d, hh, mm, ss) = date_time(us.div_euclid(1_000_000));
    let micros = us.rem_euclid(1_000_000);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{micros:06}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calendar_round_trips_and_knows_leap_days() {
        for days in [-800_000, -1, 0, 59, 11_016, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert!(is_date(2024, 2, 29) && !is_date(2026, 2, 29) && !is_date(2026, 4, 31));
    }

    #[test]
    fn times_read_as_people_type_them() {
        assert_eq!(parse_s("1700000000"), Some(1_700_000_000));
        assert_eq!(parse_s("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(parse_s("2023-11-14 22:13"), Some(1_700_000_000 - 20));
        assert_eq!(parse_s("2023-11-14"), Some(1_699_920_000));
        assert_eq!(
            parse_us("2024-02-29T13:45:10.5Z"),
            Some(1_709_214_310_500_000)
        );
        for bad in [
            "yesterday",
            "2023-13-14T22:13",
            "2026-02-31",
            "2023-11-14T24:00",
            "2023-11-14T22:61",
            "99999999999999",
            "80000000000000000-6-7T6:9:9",
            "2023-11-14T22:13:20:00",
        ] {
            assert_eq!(parse_us(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_write_as_rfc_3339() {
        assert_eq!(format_s(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_s(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(format_us(-1), "1969-12-31T23:59:59.999999Z");
        let t = parse_us("2024-02-29T13:45:10.5Z").unwrap();
        assert_eq!(format_us(t), "2024-02-29T13:45:10.500000Z");
        assert_eq!(parse_us(&format_s(SECS_MAX)), Some(SECS_MAX * 1_000_000));
        assert_eq!(format_s(SECS_MIN), "0000-01-01T00:00:00Z");
        assert_eq!(parse_s(&(SECS_MIN - 1).to_string()), None);
    }
}
