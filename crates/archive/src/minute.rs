//! UTC minutes and the `YYYY-MM-DD/HH/MM` directory names they map to.

use std::path::{Path, PathBuf};

/// One UTC minute, as whole minutes since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minute(pub i64);

impl Minute {
    /// The minute that contains `unix_sec`.
    pub fn of_unix_sec(unix_sec: i64) -> Self {
        Minute(unix_sec.div_euclid(60))
    }

    /// The first second of the minute, since the Unix epoch.
    pub fn start_unix_sec(self) -> i64 {
        self.0 * 60
    }

    /// `YYYY-MM-DD/HH/MM`, relative to the archive directory.
    pub fn rel_dir(self) -> PathBuf {
        let days = self.0.div_euclid(24 * 60);
        let in_day = self.0.rem_euclid(24 * 60);
        let (y, m, d) = utc::civil_from_days(days);
        Path::new(&format!("{y:04}-{m:02}-{d:02}"))
            .join(format!("{:02}", in_day / 60))
            .join(format!("{:02}", in_day % 60))
    }

    /// The minute named by the three directory levels `day` (`YYYY-MM-DD`), `hour` (`HH`) and
    /// `minute` (`MM`), or `None` if they are not exactly that form.
    pub fn from_dir_names(day: &str, hour: &str, minute: &str) -> Option<Self> {
        let b = day.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let y = digits(&day[0..4])?;
        let m = digits(&day[5..7])?;
        let d = digits(&day[8..10])?;
        if hour.len() != 2 || minute.len() != 2 {
            return None;
        }
        let h = digits(hour)?;
        let mi = digits(minute)?;
        // Refuses 2026-02-31 as well as month 13.
        if !(1..=12).contains(&m) || !utc::is_date(y, m as u32, d as u32) || h > 23 || mi > 59 {
            return None;
        }
        let days = utc::days_from_civil(y, m as u32, d as u32);
        Some(Minute(days * 24 * 60 + h * 60 + mi))
    }
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(
            Minute::of_unix_sec(0).rel_dir(),
            Path::new("1970-01-01/00/00")
        );
        // 2026-11-21T08:09:30Z
        assert_eq!(
            Minute::of_unix_sec(1_795_248_570).rel_dir(),
            Path::new("2026-11-21/08/09")
        );
        // 2024-02-29T23:59:59Z, a leap day.
        assert_eq!(
            Minute::of_unix_sec(1_709_251_199).rel_dir(),
            Path::new("2024-02-29/23/59")
        );
        assert_eq!(
            Minute::of_unix_sec(-1).rel_dir(),
            Path::new("1969-12-31/23/59")
        );
    }

    #[test]
    fn names_round_trip_over_many_years() {
        let mut m = Minute::of_unix_sec(-86_400 * 366 * 3);
        while m.0 < 60 * 24 * 366 * 80 {
            let rel = m.rel_dir();
            let parts: Vec<&str> = rel.iter().map(|s| s.to_str().unwrap()).collect();
            assert_eq!(
                Minute::from_dir_names(parts[0], parts[1], parts[2]),
                Some(m),
                "{rel:?}"
            );
            m.0 += 6_841; // odd step: visits every hour, minute and day of month over the range
        }
    }

    #[test]
    fn rejects_other_names() {
        for (d, h, m) in [
            ("2026-02-31", "00", "00"),
            ("2026-13-01", "00", "00"),
            ("2026-11-21", "24", "00"),
            ("2026-11-21", "00", "60"),
            ("2026-11-21", "0", "00"),
            ("2026_11_21", "00", "00"),
            ("2026-11-2x", "00", "00"),
            ("2026-11-21", "+1", "00"),
        ] {
            assert_eq!(Minute::from_dir_names(d, h, m), None, "{d}/{h}/{m}");
        }
    }
}
