//! Reports: per group and per period (hour, day, week), the figures an operator hands on —
//! calls, ASR, NER, ACD, PDD, MOS, loss, jitter, one-way and silent calls, failure codes, peak
//! concurrent calls — read from rollups kept as calls are stored (table `report_hour`),
//! never from a scan of the calls.
//!
//! [`CdrStore::report`](crate::CdrStore::report) takes a [`ReportQuery`] (a group, a
//! [`PeriodKind`] and a range) and answers a [`Report`]: one [`ReportRow`] per period of the
//! range and the range's total. Periods are UTC: an hour, a day from 00:00, an ISO week from
//! Monday 00:00 (labelled `2026-W48`). Day and week rows are the merge of their hour buckets:
//! counts add, and the percentile sketches are merged, never averaged.
//!
//! What each figure is (a call is a `cdr` row, one INVITE dialog, counted in the hour its
//! INVITE was seen):
//! - `calls`: attempts; `answered`: calls with an answer (a 2xx to the INVITE);
//!   `asr_pct` = answered / calls.
//! - `ner_pct` (ITU-T E.411's network effectiveness ratio): calls answered or ended by the
//!   user, over calls. Ended by the user: a final 486 Busy Here, 600 Busy Everywhere, 603
//!   Decline or 487 Request Terminated; a call cancelled by its caller (state `cancelled`); a
//!   480 Temporarily Unavailable or 408 Request Timeout after the callee rang (no answer).
//!   Everything else that was not answered — other 4xx, 5xx, 6xx, no final response — is the
//!   network's failure. ([`user_ended`]).
//! - `acd_s`: talk time (answer to end) over the answered calls that ended.
//! - `pdd_median_ms`, `pdd_p95_ms`: post-dial delay, the INVITE to the first 18x, over the
//!   calls that rang.
//! - `mos_calls`: calls with a MOS (their worst stream's); `mos_below_3_6_pct` and
//!   `mos_below_3_1_pct` the shares of those under 3.6 and 3.1.
//! - `loss_median_pct`, `loss_p95_pct`, `jitter_median_ms`, `jitter_p95_ms`: over the calls
//!   with RTP, each call's worst stream (the `loss_max_pct` and `jitter_max_ms` of the calls
//!   search).
//! - `one_way`: answered calls whose RTP went one way only (no stream with packets comes from
//!   an IP another stream with packets goes to); `no_rtp`: answered calls without a stream
//!   that carried a packet.
//! - `failures`: the [`TOP_FAILURE_CODES`] most frequent final responses of the calls not
//!   answered (code 0: no final response).
//! - `peak_concurrent`: the most calls in progress in one UTC minute, `peak_minute_us` that
//!   minute. A call is in progress in every minute from its INVITE's to its end's (its
//!   INVITE's alone when it has no end), at most [`PEAK_CALL_MINUTES_MAX`] minutes; counted
//!   per minute, so a day's peak is exactly the highest minute of its hours, and two calls
//!   one after the other within a minute both count in it.
//!
//! Percentiles are read from sketches of fixed logarithmic bins ([`Sketch`]): a reported
//! percentile is within [`SKETCH_RELATIVE_ERROR`] (2 %) of the exact one (nearest rank), 0
//! exactly, and values below a sketch's floor (0.01 ms, 0.001 %) read as that floor.

use crate::CdrError;
use crate::rollup::HourBucket;

/// Longest range a report reads, in days (400: a year of daily rows and a margin): at most
/// 9,600 hour buckets per report.
pub const REPORT_RANGE_DAYS_MAX: i64 = 400;
/// Most groups [`crate::CdrStore::report_groups`] lists (the configured maximum and `all`).
pub const REPORT_GROUPS_MAX: usize = groups::GROUPS_MAX + 1;
/// Failure codes listed per row.
pub const TOP_FAILURE_CODES: usize = 10;
/// Most minutes one call counts in for the peak of concurrent calls (24 hours): a call left
/// open by a lost BYE does not hold the peak up for ever.
pub const PEAK_CALL_MINUTES_MAX: i64 = 1_440;
/// The relative error of a percentile read from a sketch (half a bin).
pub const SKETCH_RELATIVE_ERROR: f64 = 0.02;

const HOUR_US: i64 = 3_600_000_000;
const DAY_US: i64 = 24 * HOUR_US;
/// 1970-01-01 was a Thursday: ISO weeks start on the Mondays 3 days before each multiple of 7
/// days.
const WEEK_OFFSET_US: i64 = -3 * DAY_US;

/// The period of a report's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeriodKind {
    Hour,
    Day,
    Week,
}

impl PeriodKind {
    /// `hour`, `day` or `week`.
    pub fn parse(text: &str) -> Result<PeriodKind, String> {
        match text.trim() {
            "hour" => Ok(PeriodKind::Hour),
            "day" => Ok(PeriodKind::Day),
            "week" => Ok(PeriodKind::Week),
            other => Err(format!("period {other:?}: it is one of hour, day, week")),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            PeriodKind::Hour => "hour",
            PeriodKind::Day => "day",
            PeriodKind::Week => "week",
        }
    }

    /// The start of the period holding `us` (UTC).
    pub fn start_of(&self, us: i64) -> i64 {
        match self {
            PeriodKind::Hour => us.div_euclid(HOUR_US) * HOUR_US,
            PeriodKind::Day => us.div_euclid(DAY_US) * DAY_US,
            PeriodKind::Week => {
                (us - WEEK_OFFSET_US).div_euclid(7 * DAY_US) * 7 * DAY_US + WEEK_OFFSET_US
            }
        }
    }

    /// The length of one period.
    pub fn len_us(&self) -> i64 {
        match self {
            PeriodKind::Hour => HOUR_US,
            PeriodKind::Day => DAY_US,
            PeriodKind::Week => 7 * DAY_US,
        }
    }

    /// The period's name: `2026-11-28T05:00Z`, `2026-11-28`, `2026-W48` (ISO week).
    pub fn label(&self, start_us: i64) -> String {
        let days = start_us.div_euclid(DAY_US);
        let (y, m, d) = utc::civil_from_days(days);
        match self {
            PeriodKind::Hour => {
                let h = start_us.rem_euclid(DAY_US) / HOUR_US;
                format!("{y:04}-{m:02}-{d:02}T{h:02}:00Z")
            }
            PeriodKind::Day => format!("{y:04}-{m:02}-{d:02}"),
            PeriodKind::Week => {
                // The ISO year is the year of the week's Thursday.
                let (iy, _, _) = utc::civil_from_days(days + 3);
                let first_thursday = {
                    let jan4 = utc::days_from_civil(iy, 1, 4);
                    // Monday of the week holding 4 January.
                    PeriodKind::Week.start_of(jan4 * DAY_US).div_euclid(DAY_US)
                };
                let week = (days - first_thursday).div_euclid(7) + 1;
                format!("{iy:04}-W{week:02}")
            }
        }
    }
}

/// What a report is asked for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReportQuery {
    /// A configured group's name, or `all`.
    pub group: String,
    pub period: PeriodKind,
    /// The range, µs since the epoch: widened to whole periods (`from_us` down to its period's
    /// start, `to_us` up to the end of the period holding `to_us - 1`).
    pub from_us: i64,
    pub to_us: i64,
}

impl ReportQuery {
    /// The range as read: whole periods, checked against [`REPORT_RANGE_DAYS_MAX`].
    pub fn range(&self) -> Result<(i64, i64), CdrError> {
        if self.to_us <= self.from_us {
            return Err(CdrError::Invalid {
                problem: format!(
                    "report range: the end ({}) is not after the start ({})",
                    utc::format_us(self.to_us),
                    utc::format_us(self.from_us)
                ),
            });
        }
        let from = self.period.start_of(self.from_us);
        let to = self.period.start_of(self.to_us - 1) + self.period.len_us();
        if to - from > REPORT_RANGE_DAYS_MAX * DAY_US {
            return Err(CdrError::Invalid {
                problem: format!(
                    "report range: {} days; a report covers at most {REPORT_RANGE_DAYS_MAX}",
                    (to - from) / DAY_US
                ),
            });
        }
        Ok((from, to))
    }
}

/// A final response and the calls that ended with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FailureCount {
    /// The SIP status code; 0 for calls with no final response.
    pub code: u16,
    pub calls: u64,
}

/// One period's figures (see the module's documentation for each). Ratios and percentiles
/// are `None` when no call contributes to them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReportRow {
    /// The period's start, µs since the epoch; for the total, the range's start.
    pub start_us: i64,
    /// `2026-11-28T05:00Z`, `2026-11-28`, `2026-W48`; `total` for the total.
    pub label: String,
    pub calls: u64,
    pub answered: u64,
    pub asr_pct: Option<f64>,
    pub ner_pct: Option<f64>,
    pub acd_s: Option<f64>,
    /// Calls with a PDD (they rang).
    pub pdd_calls: u64,
    pub pdd_median_ms: Option<f64>,
    pub pdd_p95_ms: Option<f64>,
    pub mos_calls: u64,
    pub mos_below_3_6_pct: Option<f64>,
    pub mos_below_3_1_pct: Option<f64>,
    /// Calls with RTP figures.
    pub rtp_calls: u64,
    pub loss_median_pct: Option<f64>,
    pub loss_p95_pct: Option<f64>,
    pub jitter_median_ms: Option<f64>,
    pub jitter_p95_ms: Option<f64>,
    pub one_way: u64,
    pub no_rtp: u64,
    pub failures: Vec<FailureCount>,
    pub peak_concurrent: u64,
    /// The first minute the peak was reached.
    pub peak_minute_us: Option<i64>,
}

impl ReportRow {
    /// The columns of a row as a table or CSV shows them, in order (`failures` as
    /// `486:12 503:4`): fixed, documented, never reordered.
    pub const COLUMNS: [&'static str; 22] = [
        "period",
        "start",
        "calls",
        "answered",
        "asr_pct",
        "ner_pct",
        "acd_s",
        "pdd_calls",
        "pdd_median_ms",
        "pdd_p95_ms",
        "mos_calls",
        "mos_below_3_6_pct",
        "mos_below_3_1_pct",
        "rtp_calls",
        "loss_median_pct",
        "loss_p95_pct",
        "jitter_median_ms",
        "jitter_p95_ms",
        "one_way",
        "no_rtp",
        "peak_concurrent",
        "failures",
    ];

    /// The row's values in [`ReportRow::COLUMNS`]' order, as text (empty for none; ratios and
    /// percentiles to two decimals).
    pub fn fields(&self) -> Vec<String> {
        let f = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
        vec![
            self.label.clone(),
            utc::format_s(self.start_us.div_euclid(1_000_000)),
            self.calls.to_string(),
            self.answered.to_string(),
            f(self.asr_pct),
            f(self.ner_pct),
            f(self.acd_s),
            self.pdd_calls.to_string(),
            f(self.pdd_median_ms),
            f(self.pdd_p95_ms),
            self.mos_calls.to_string(),
            f(self.mos_below_3_6_pct),
            f(self.mos_below_3_1_pct),
            self.rtp_calls.to_string(),
            f(self.loss_median_pct),
            f(self.loss_p95_pct),
            f(self.jitter_median_ms),
            f(self.jitter_p95_ms),
            self.one_way.to_string(),
            self.no_rtp.to_string(),
            self.peak_concurrent.to_string(),
            self.failures
                .iter()
                .map(|c| format!("{}:{}", c.code, c.calls))
                .collect::<Vec<_>>()
                .join(" "),
        ]
    }
}

/// A report: a row per period of the range (periods without calls included, so a chart's
/// axis is regular) and the total of the range.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub group: String,
    pub period: PeriodKind,
    /// The range read, whole periods.
    pub from_us: i64,
    pub to_us: i64,
    pub rows: Vec<ReportRow>,
    pub total: ReportRow,
}

/// Builds a report from the hour buckets of its group over its range (as the stores read
/// them: any order, hours without calls absent).
pub(crate) fn assemble(
    q: &ReportQuery,
    (from, to): (i64, i64),
    hours: Vec<(i64, HourBucket)>,
) -> Report {
    let n = ((to - from) / q.period.len_us()).max(0) as usize;
    // Per period: the sum of its hours, and its highest minute (the first, on a tie).
    let mut periods: Vec<(HourBucket, Option<(u64, i64)>)> = vec![Default::default(); n];
    let mut total: (HourBucket, Option<(u64, i64)>) = Default::default();
    let higher = |best: &mut Option<(u64, i64)>, p: Option<(u64, i64)>| {
        if let Some(p) = p
            && best.is_none_or(|b| p.0 > b.0 || (p.0 == b.0 && p.1 < b.1))
        {
            *best = Some(p);
        }
    };
    for (hour_us, b) in hours {
        if hour_us < from || hour_us >= to {
            continue;
        }
        let peak = b.peak(hour_us);
        let i = ((q.period.start_of(hour_us) - from) / q.period.len_us()) as usize;
        if let Some(p) = periods.get_mut(i) {
            p.0.add(&b, 1);
            higher(&mut p.1, peak);
        }
        total.0.add(&b, 1);
        higher(&mut total.1, peak);
    }
    let rows = periods
        .iter()
        .enumerate()
        .map(|(i, (b, peak))| {
            let start = from + i as i64 * q.period.len_us();
            b.row(start, q.period.label(start), *peak)
        })
        .collect();
    Report {
        group: q.group.clone(),
        period: q.period,
        from_us: from,
        to_us: to,
        rows,
        total: total.0.row(from, "total".to_string(), total.1),
    }
}

/// Whether a call not answered was ended by its user (E.411), from its state, final response
/// and whether it rang. See the module's documentation.
pub fn user_ended(state: &str, last_response: Option<u16>, rang: bool) -> bool {
    matches!(last_response, Some(486 | 487 | 600 | 603))
        || state == "cancelled"
        || (rang && matches!(last_response, Some(480 | 408)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_hours_days_and_iso_weeks() {
        let t = utc::parse_us("2026-11-28T05:41:07Z").unwrap();
        let h = PeriodKind::Hour.start_of(t);
        assert_eq!(PeriodKind::Hour.label(h), "2026-11-28T05:00Z");
        assert_eq!(
            PeriodKind::Day.label(PeriodKind::Day.start_of(t)),
            "2026-11-28"
        );
        let w = PeriodKind::Week.start_of(t);
        assert_eq!(utc::format_s(w / 1_000_000), "2026-11-23T00:00:00Z"); // a Monday
        assert_eq!(PeriodKind::Week.label(w), "2026-W48");
        // ISO years that are not the calendar's: 2021-01-03 is in 2020-W53, 2024-12-30 in
        // 2025-W01.
        for (day, want) in [
            ("2021-01-03", "2020-W53"),
            ("2021-01-04", "2021-W01"),
            ("2024-12-30", "2025-W01"),
            ("2026-01-01", "2026-W01"),
            ("1970-01-01", "1970-W01"),
        ] {
            let us = utc::parse_us(day).unwrap();
            let got = PeriodKind::Week.label(PeriodKind::Week.start_of(us));
            assert_eq!(got, want, "{day}");
        }
        assert!(
            PeriodKind::parse("month")
                .unwrap_err()
                .contains("hour, day, week")
        );
    }

    #[test]
    fn a_range_is_whole_periods_and_bounded() {
        let q = ReportQuery {
            group: "all".into(),
            period: PeriodKind::Day,
            from_us: utc::parse_us("2026-11-01T10:00").unwrap(),
            to_us: utc::parse_us("2026-11-03T00:00").unwrap(),
        };
        let (from, to) = q.range().unwrap();
        assert_eq!(utc::format_s(from / 1_000_000), "2026-11-01T00:00:00Z");
        assert_eq!(utc::format_s(to / 1_000_000), "2026-11-03T00:00:00Z");
        let long = ReportQuery {
            to_us: q.from_us + 500 * DAY_US,
            ..q.clone()
        };
        assert!(
            long.range()
                .unwrap_err()
                .to_string()
                .contains("at most 400")
        );
        let backwards = ReportQuery {
            to_us: q.from_us,
            ..q
        };
        assert!(backwards.range().is_err());
    }
}
