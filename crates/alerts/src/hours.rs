//! Business hours for `fraud.hours`: `hours = "08:00-18:00"`, `days = "mon-fri"`,
//! `utc_offset = "+01:00"`. A call that starts outside them is an incident.

/// Allowed hours and days, in the PBX's clock (UTC plus a fixed offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hours {
    /// Minutes after midnight; `start > end` spans midnight (`22:00-06:00`).
    start_min: u16,
    end_min: u16,
    /// Bit 0 Monday ... bit 6 Sunday.
    days: u8,
    offset_min: i32,
}

const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

impl Hours {
    /// Reads the three keys; an error names the key and what to write.
    pub fn parse(
        hours: &str,
        days: Option<&str>,
        offset: Option<&str>,
    ) -> Result<Hours, (&'static str, String)> {
        let bad_hours = || {
            (
                "hours",
                format!("{hours:?}: write the allowed hours as \"08:00-18:00\""),
            )
        };
        let (a, b) = hours.split_once('-').ok_or_else(bad_hours)?;
        let start_min = clock(a.trim()).ok_or_else(bad_hours)?;
        let end_min = clock(b.trim()).ok_or_else(bad_hours)?;
        if start_min == end_min {
            return Err(("hours", format!("{hours:?} allows no time at all")));
        }
        let days = match days {
            None => 0x7f,
            Some(d) => parse_days(d).ok_or((
                "days",
                format!("{d:?}: write days as \"mon-fri\" or \"mon,wed,sat\""),
            ))?,
        };
        let offset_min = match offset {
            None => 0,
            Some(o) => parse_offset(o).ok_or((
                "utc_offset",
                format!("{o:?}: write the offset from UTC as \"+01:00\" or \"-05:00\""),
            ))?,
        };
        Ok(Hours {
            start_min,
            end_min,
            days,
            offset_min,
        })
    }

    /// Whether `at_us` (µs since the epoch) falls within the allowed hours and days.
    pub fn allows(&self, at_us: i64) -> bool {
        let local_min = at_us.div_euclid(60_000_000) + i64::from(self.offset_min);
        let day = local_min.div_euclid(1440);
        let minute = local_min.rem_euclid(1440) as u16;
        // 1970-01-01 was a Thursday (index 3).
        let weekday = |d: i64| (d + 3).rem_euclid(7) as u8;
        if self.start_min < self.end_min {
            self.days & (1 << weekday(day)) != 0
                && minute >= self.start_min
                && minute < self.end_min
        } else if minute >= self.start_min {
            self.days & (1 << weekday(day)) != 0
        } else if minute < self.end_min {
            // The early morning belongs to the shift that began the day before.
            self.days & (1 << weekday(day - 1)) != 0
        } else {
            false
        }
    }
}

fn clock(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    match (h, m) {
        (24, 0) => Some(1440),
        (0..=23, 0..=59) => Some(h * 60 + m),
        _ => None,
    }
}

fn parse_days(s: &str) -> Option<u8> {
    let idx = |n: &str| {
        DAY_NAMES
            .iter()
            .position(|d| d.eq_ignore_ascii_case(n.trim()))
    };
    let mut mask = 0u8;
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (idx(a)?, idx(b)?);
                let mut d = a;
                loop {
                    mask |= 1 << d;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => mask |= 1 << idx(part)?,
        }
    }
    (mask != 0).then_some(mask)
}

fn parse_offset(s: &str) -> Option<i32> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && m < 60).then_some(sign * (h * 60 + m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-23 was a Monday.
    const MONDAY_US: i64 = 1_795_392_000_000_000;
    const HOUR_US: i64 = 3_600_000_000;

    #[test]
    fn office_hours_on_weekdays() {
        let h = Hours::parse("08:00-18:00", Some("mon-fri"), None).unwrap();
        assert!(h.allows(MONDAY_US + 9 * HOUR_US));
        assert!(!h.allows(MONDAY_US + 3 * HOUR_US));
        assert!(!h.allows(MONDAY_US + 18 * HOUR_US));
        assert!(
            !h.allows(MONDAY_US + 5 * 24 * HOUR_US + 10 * HOUR_US),
            "Saturday"
        );
    }

    #[test]
    fn offset_and_midnight() {
        let h = Hours::parse("08:00-18:00", None, Some("+02:00")).unwrap();
        assert!(h.allows(MONDAY_US + 7 * HOUR_US), "09:00 local");
        assert!(!h.allows(MONDAY_US + 17 * HOUR_US), "19:00 local");
        let night = Hours::parse("22:00-06:00", Some("fri"), None).unwrap();
        assert!(
            night.allows(MONDAY_US + 4 * 24 * HOUR_US + 23 * HOUR_US),
            "Friday 23:00"
        );
        assert!(
            night.allows(MONDAY_US + 5 * 24 * HOUR_US + 2 * HOUR_US),
            "Saturday 02:00 is Friday's shift"
        );
        assert!(
            !night.allows(MONDAY_US + 2 * HOUR_US),
            "Monday 02:00 is Sunday's"
        );
    }

    #[test]
    fn errors_name_the_key() {
        assert_eq!(Hours::parse("8-18", None, None).unwrap_err().0, "hours");
        assert_eq!(
            Hours::parse("08:00-18:00", Some("monday"), None)
                .unwrap_err()
                .0,
            "days"
        );
        assert_eq!(
            Hours::parse("08:00-18:00", None, Some("1")).unwrap_err().0,
            "utc_offset"
        );
    }
}
