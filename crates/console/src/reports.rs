//! Reports as the console shows and hands them out: per group and period, the figures of the
//! calls whose INVITE was seen in it, read from the rollups (`CdrStore::report`; never a scan
//! of the calls).
//!
//! `serve` hands the console a [`ReportsConfig`]: the groups configured (`all`, every call, is
//! always there). The console checks a query ([`ParsedQuery::from_query`]: every parameter
//! bounded, each error naming it), draws the Reports page and answers `/api/reports` as JSON,
//! CSV or JSON lines ([`csv`], [`jsonl`]: the columns of [`columns`], stable and documented).
//! [`email_html`] draws the daily email's body with tables and bars that every mail client
//! renders (no SVG, no script, no image).
//!
//! Never: computes a figure itself (the rollups do), or asks for more than [`PERIODS_MAX`]
//! periods or a group that is not configured.

use std::fmt::Write;

pub use cdr::report::{FailureCount, PeriodKind, Report, ReportQuery, ReportRow};

/// Most periods one query reads: 41 days of hours, 400 days (the rollups' longest range,
/// `cdr::report::REPORT_RANGE_DAYS_MAX`) of days or weeks.
pub const PERIODS_MAX: i64 = 1000;
/// Longest group name a query takes.
pub const GROUP_BYTES_MAX: usize = 64;
/// Failure codes a table row shows (CSV and JSON carry every one the rollups keep).
pub const FAILURES_SHOWN: usize = 5;
/// Periods a query without `from` covers, ending with the current one.
pub const DEFAULT_PERIODS: i64 = 14;

/// How a report is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    Json,
    Csv,
    Jsonl,
}

/// A query as the API and the page take it, before the group is checked against the
/// configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedQuery {
    pub group: Option<String>,
    pub period: PeriodKind,
    pub from_s: i64,
    pub to_s: i64,
    pub format: ReportFormat,
}

impl ParsedQuery {
    /// Parses `group`, `period` (hour, day or week; default day), `from` and `to` (seconds
    /// or ISO 8601 UTC; default the last [`DEFAULT_PERIODS`] periods up to now), `format`
    /// (json, csv or jsonl). The range is widened to whole periods. Each error names the
    /// parameter and says what it takes.
    pub fn from_query(raw: &str, now_s: i64) -> Result<ParsedQuery, String> {
        let (mut group, mut period, mut from, mut to, mut format) = (None, None, None, None, None);
        for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
            let slot = match &*k {
                "group" => &mut group,
                "period" => &mut period,
                "from" => &mut from,
                "to" => &mut to,
                "format" => &mut format,
                other => {
                    return Err(format!(
                        "{}: not a report parameter (group, period, from, to, format)",
                        clip(other)
                    ));
                }
            };
            if slot.is_some() {
                return Err(format!("{k}: given twice"));
            }
            *slot = Some(v.into_owned());
        }
        let group = match group {
            Some(g) if g.is_empty() || g.len() > GROUP_BYTES_MAX => {
                return Err(format!(
                    "group={:?}: a group's name, 1 to {GROUP_BYTES_MAX} bytes",
                    clip(&g)
                ));
            }
            g => g,
        };
        let period = match period.as_deref() {
            None | Some("") => PeriodKind::Day,
            Some(p) => PeriodKind::parse(p)
                .map_err(|_| format!("period={:?}: hour, day or week", clip(p)))?,
        };
        let format = match format.as_deref() {
            None | Some("") | Some("json") => ReportFormat::Json,
            Some("csv") => ReportFormat::Csv,
            Some("jsonl") => ReportFormat::Jsonl,
            Some(f) => return Err(format!("format={:?}: json, csv or jsonl", clip(f))),
        };
        let time = |v: &Option<String>, name: &str| -> Result<Option<i64>, String> {
            match v.as_deref() {
                None | Some("") => Ok(None),
                Some(s) => utc::parse_s(s).map(Some).ok_or_else(|| {
                    format!(
                        "{name}={:?}: seconds since the epoch or 2026-11-25T14:30Z",
                        clip(s)
                    )
                }),
            }
        };
        let w = period.len_us() / 1_000_000;
        let floor = |t_s: i64| period.start_of(t_s * 1_000_000) / 1_000_000;
        // `to` is rounded up to the end of its period: the current period is included.
        let to_s = match time(&to, "to")? {
            Some(t) => floor(t - 1) + w,
            None => floor(now_s) + w,
        };
        let from_s = match time(&from, "from")? {
            Some(f) => floor(f),
            None => to_s - DEFAULT_PERIODS * w,
        };
        if to_s <= from_s {
            return Err("from, to: from must be before to".into());
        }
        let periods = (to_s - from_s) / w;
        let days_max = cdr::report::REPORT_RANGE_DAYS_MAX;
        if periods > PERIODS_MAX || to_s - from_s > days_max * 86_400 {
            return Err(format!(
                "from, to: {periods} {}s; at most {PERIODS_MAX} periods and {days_max} days in one report (choose a longer period or a shorter range)",
                period.as_str()
            ));
        }
        Ok(ParsedQuery {
            group,
            period,
            from_s,
            to_s,
            format,
        })
    }
}

/// At most 64 characters of what a client sent, for an error message.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

/// The columns of a report's CSV: the group, then the rollups' row columns
/// (`cdr::report::ReportRow::COLUMNS`). Stable: a column is only ever added at the end.
pub fn columns() -> Vec<&'static str> {
    let mut c = vec!["group"];
    c.extend(ReportRow::COLUMNS);
    c
}

/// A row as one JSON object: the group, then the row's fields as the rollups serialize them.
pub fn row_json(group: &str, row: &ReportRow) -> serde_json::Value {
    let mut v = serde_json::json!({ "group": group });
    if let (Some(o), Ok(serde_json::Value::Object(r))) =
        (v.as_object_mut(), serde_json::to_value(row))
    {
        o.extend(r);
    }
    v
}

/// One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
fn csv_field(out: &mut String, f: &str) {
    if f.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&f.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(f);
    }
}

fn csv_line<'a>(out: &mut String, fields: impl Iterator<Item = &'a str>) {
    for (i, f) in fields.enumerate() {
        if i > 0 {
            out.push(',');
        }
        csv_field(out, f);
    }
    out.push_str("\r\n");
}

/// Reports as CSV (RFC 4180, CRLF line ends): a header line of [`columns`], then every
/// report's rows, each with its group.
pub fn csv(reports: &[Report]) -> String {
    let rows: usize = reports.iter().map(|r| r.rows.len()).sum();
    let mut out = String::with_capacity(512 + rows * 160);
    csv_line(&mut out, columns().into_iter());
    for r in reports {
        for row in &r.rows {
            let fields = row.fields();
            csv_line(
                &mut out,
                std::iter::once(r.group.as_str()).chain(fields.iter().map(String::as_str)),
            );
        }
    }
    out
}

/// Reports as JSON lines: one object per row ([`row_json`]).
pub fn jsonl(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports {
        for row in &r.rows {
            out.push_str(&row_json(&r.group, row).to_string());
            out.push('\n');
        }
    }
    out
}

/// The groups the console offers: `all` (every call) and the configured ones.
#[derive(Debug, Clone, Default)]
pub struct ReportsConfig {
    /// The configured groups' names (`[[groups]]`), in the configuration's order.
    pub groups: Vec<String>,
}

impl ReportsConfig {
    /// Every group a report may be asked for: `all`, then the configured ones.
    pub fn names(&self) -> Vec<String> {
        let mut n = vec![ALL.to_owned()];
        n.extend(self.groups.iter().cloned());
        n
    }

    /// The query, or why not: a group that is neither `all` nor configured.
    pub fn check(&self, q: &ParsedQuery) -> Result<ReportQuery, String> {
        let group = q.group.clone().unwrap_or_else(|| ALL.to_owned());
        if group != ALL && !self.groups.contains(&group) {
            let known = self.names().join(", ");
            return Err(format!(
                "group={:?}: no such group (there are: {known})",
                clip(&group)
            ));
        }
        Ok(ReportQuery {
            group,
            period: q.period,
            from_us: q.from_s * 1_000_000,
            to_us: q.to_s * 1_000_000,
        })
    }
}

/// The group every call is in.
pub const ALL: &str = "all";

/// `42.5%`, `1.2 s`, `-`: a figure as a table cell shows it.
pub fn cell(v: Option<f64>, unit: &str) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "\u{2014}".to_owned(),
        Some(v) => {
            let digits = if v.abs() >= 100.0 { 0 } else { 1 };
            format!("{v:.digits$}{unit}")
        }
    }
}

/// `486:12 503:4`: a row's most frequent failure codes and their calls.
pub fn failures_text(failures: &[FailureCount]) -> String {
    let mut s = String::new();
    for (i, f) in failures.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{}:{}", f.code, f.calls);
    }
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The daily email's HTML: per group, bars of calls (answered darker) and ASR per period,
/// then a table of the figures. Tables and inline styles only: every mail client draws them
/// (SVG and scripts are dropped or blocked by many).
pub fn email_html(title: &str, reports: &[Report], console_url: Option<&str>) -> String {
    let mut h = String::with_capacity(16 << 10);
    let font = "font-family:Arial,Helvetica,sans-serif;color:#1d2330";
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title></head>\
         <body style=\"margin:0;padding:16px;background:#f5f7fa;{font}\">\
         <h1 style=\"font-size:20px;margin:0 0 12px\">{t}</h1>",
        t = esc(title)
    );
    if reports.is_empty() {
        h.push_str("<p>No group is configured for the daily report.</p>");
    }
    for g in reports {
        let t = &g.total;
        let _ = write!(
            h,
            "<table role=\"presentation\" width=\"100%\" cellpadding=\"0\" cellspacing=\"0\" \
             style=\"background:#ffffff;border:1px solid #dfe3ea;margin:0 0 16px\"><tr><td style=\"padding:12px\">\
             <h2 style=\"font-size:16px;margin:0 0 4px\" data-group=\"{name}\">{name}</h2>\
             <p style=\"margin:0 0 10px;color:#5d6675;font-size:12px\">{calls} calls, {ans} answered, peak {peak} at once</p>",
            name = esc(&g.group),
            calls = t.calls,
            ans = t.answered,
            peak = t.peak_concurrent,
        );
        if t.calls == 0 {
            h.push_str("<p style=\"font-size:13px\">No calls in this group in the report's range.</p></td></tr></table>");
            continue;
        }
        bars(&mut h, g);
        figures_table(&mut h, &g.rows);
        h.push_str("</td></tr></table>");
    }
    if let Some(url) = console_url {
        let _ = write!(
            h,
            "<p style=\"font-size:12px;color:#5d6675\">The Reports page: <a href=\"{u}\">{u}</a>. \
             The figures are attached as CSV.</p>",
            u = esc(url)
        );
    } else {
        h.push_str(
            "<p style=\"font-size:12px;color:#5d6675\">The figures are attached as CSV.</p>",
        );
    }
    h.push_str("</body></html>");
    h
}

/// Width in pixels of the longest bar.
const BAR_PX: u64 = 360;

/// Calls per period as a horizontal bar (answered part darker) and ASR as a second bar.
fn bars(h: &mut String, g: &Report) {
    let max = g.rows.iter().map(|r| r.calls).max().unwrap_or(0).max(1);
    h.push_str(
        "<table role=\"presentation\" cellpadding=\"0\" cellspacing=\"0\" style=\"font-size:12px;margin:0 0 10px\" class=\"bars\">\
         <tr><th align=\"left\" style=\"padding:2px 8px 2px 0;color:#5d6675;font-weight:normal\">Period</th>\
         <th align=\"left\" style=\"padding:2px 8px;color:#5d6675;font-weight:normal\">Calls (answered darker)</th>\
         <th align=\"left\" style=\"padding:2px 8px;color:#5d6675;font-weight:normal\">ASR</th></tr>",
    );
    for r in &g.rows {
        let total_px = if r.calls == 0 {
            0
        } else {
            (r.calls * BAR_PX / max).max(1)
        };
        let ans_px = (r.answered * BAR_PX / max).min(total_px);
        let rest_px = total_px - ans_px;
        let asr = r.asr_pct.unwrap_or(0.0).clamp(0.0, 100.0);
        let asr_px = (asr * 1.2).round() as u64;
        let _ = write!(
            h,
            "<tr><td style=\"padding:2px 8px 2px 0;white-space:nowrap\">{label}</td>\
             <td style=\"padding:2px 8px;white-space:nowrap\"><table role=\"presentation\" cellpadding=\"0\" cellspacing=\"0\"><tr>{ans}{rest}\
             <td style=\"padding-left:6px\">{calls}</td></tr></table></td>\
             <td style=\"padding:2px 8px;white-space:nowrap\"><table role=\"presentation\" cellpadding=\"0\" cellspacing=\"0\"><tr>{asr_bar}\
             <td style=\"padding-left:6px\">{asr_text}</td></tr></table></td></tr>",
            label = esc(&r.label),
            ans = bar_cell(ans_px, "#1f77b4"),
            rest = bar_cell(rest_px, "#a9c8e6"),
            calls = r.calls,
            asr_bar = bar_cell(asr_px, "#2ca02c"),
            asr_text = cell(r.asr_pct, "%"),
        );
    }
    h.push_str("</table>");
}

/// One coloured cell `px` wide (nothing when 0): a bar drawn by the table itself.
fn bar_cell(px: u64, colour: &str) -> String {
    if px == 0 {
        return String::new();
    }
    format!(
        "<td width=\"{px}\" height=\"12\" bgcolor=\"{colour}\" style=\"width:{px}px;height:12px;background:{colour};font-size:1px;line-height:1px\">&nbsp;</td>"
    )
}

/// The figures of each period, as the page's table shows them.
fn figures_table(h: &mut String, rows: &[ReportRow]) {
    let th = "padding:3px 6px;border-bottom:1px solid #dfe3ea;color:#5d6675;font-weight:normal;white-space:nowrap";
    let td = "padding:3px 6px;border-bottom:1px solid #eef0f4;white-space:nowrap";
    h.push_str("<table cellpadding=\"0\" cellspacing=\"0\" style=\"font-size:12px;border-collapse:collapse\" class=\"figures\"><tr>");
    for c in HEAD {
        let _ = write!(h, "<th align=\"left\" style=\"{th}\">{}</th>", esc(c));
    }
    h.push_str("</tr>");
    for r in rows {
        let cells = row_cells(r);
        h.push_str("<tr>");
        for (i, c) in cells.iter().enumerate() {
            let last = i == cells.len() - 1;
            let align = if i == 0 || last { "left" } else { "right" };
            // The failure codes wrap rather than widen the table past a phone's screen.
            let style = if last {
                td.replace("white-space:nowrap", "white-space:normal;min-width:140px")
            } else {
                td.to_owned()
            };
            let _ = write!(h, "<td align=\"{align}\" style=\"{style}\">{}</td>", esc(c));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

/// The heads of the page's and the email's tables, in [`row_cells`]' order.
pub const HEAD: [&str; 14] = [
    "Period",
    "Calls",
    "Answered",
    "ASR",
    "NER",
    "ACD",
    "PDD median / p95",
    "MOS <3.6 / <3.1",
    "Loss median / p95",
    "Jitter median / p95",
    "One-way",
    "No RTP",
    "Peak",
    "Top failures",
];

/// A row's cells as the page's and the email's tables show them.
pub fn row_cells(r: &ReportRow) -> [String; 14] {
    let pair = |a: Option<f64>, b: Option<f64>, unit: &str| {
        if a.is_none() && b.is_none() {
            "\u{2014}".to_owned()
        } else {
            format!("{} / {}", cell(a, unit), cell(b, unit))
        }
    };
    [
        r.label.clone(),
        r.calls.to_string(),
        r.answered.to_string(),
        cell(r.asr_pct, "%"),
        cell(r.ner_pct, "%"),
        cell(r.acd_s, " s"),
        pair(r.pdd_median_ms, r.pdd_p95_ms, " ms"),
        pair(r.mos_below_3_6_pct, r.mos_below_3_1_pct, "%"),
        pair(r.loss_median_pct, r.loss_p95_pct, "%"),
        pair(r.jitter_median_ms, r.jitter_p95_ms, " ms"),
        r.one_way.to_string(),
        r.no_rtp.to_string(),
        r.peak_concurrent.to_string(),
        if r.failures.is_empty() {
            "\u{2014}".to_owned()
        } else {
            failures_text(&r.failures[..r.failures.len().min(FAILURES_SHOWN)])
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, start_s: i64, calls: u64, answered: u64) -> ReportRow {
        ReportRow {
            start_us: start_s * 1_000_000,
            label: label.into(),
            calls,
            answered,
            asr_pct: Some(answered as f64 * 100.0 / calls as f64),
            ner_pct: Some(90.0),
            acd_s: Some(61.5),
            pdd_calls: calls,
            pdd_median_ms: Some(820.0),
            pdd_p95_ms: Some(2400.0),
            mos_calls: answered,
            mos_below_3_6_pct: Some(12.5),
            mos_below_3_1_pct: None,
            rtp_calls: answered,
            loss_median_pct: Some(0.1),
            loss_p95_pct: Some(2.25),
            jitter_median_ms: Some(3.0),
            jitter_p95_ms: Some(11.0),
            one_way: 1,
            no_rtp: 0,
            failures: vec![
                FailureCount {
                    code: 486,
                    calls: 12,
                },
                FailureCount {
                    code: 503,
                    calls: 4,
                },
            ],
            peak_concurrent: 7,
            peak_minute_us: None,
        }
    }

    fn report(group: &str, rows: Vec<ReportRow>) -> Report {
        let total = ReportRow {
            calls: rows.iter().map(|r| r.calls).sum(),
            answered: rows.iter().map(|r| r.answered).sum(),
            peak_concurrent: rows.iter().map(|r| r.peak_concurrent).max().unwrap_or(0),
            label: "total".into(),
            ..ReportRow::default()
        };
        Report {
            group: group.into(),
            period: PeriodKind::Day,
            from_us: rows.first().map_or(0, |r| r.start_us),
            to_us: rows.last().map_or(0, |r| r.start_us + 86_400_000_000),
            rows,
            total,
        }
    }

    #[test]
    fn every_parameter_is_checked_and_named() {
        let now = 1_764_072_000; // 2025-11-25T12:00Z
        let q = ParsedQuery::from_query("", now).unwrap();
        assert_eq!(q.period, PeriodKind::Day);
        assert_eq!(q.to_s, 1_764_115_200, "the end of today");
        assert_eq!(q.to_s - q.from_s, DEFAULT_PERIODS * 86_400);
        assert_eq!(q.format, ReportFormat::Json);
        for (raw, named) in [
            ("period=month", "period="),
            ("from=yesterday", "from="),
            ("to=1x", "to="),
            ("format=xml", "format="),
            ("group=", "group="),
            ("colour=red", "colour: not a report parameter"),
            ("period=day&period=hour", "period: given twice"),
            (
                "from=2025-11-25T00:00Z&to=2025-11-20T00:00Z",
                "from must be before to",
            ),
            (
                "period=hour&from=2025-01-01T00:00Z&to=2025-03-01T00:00Z",
                "at most 1000",
            ),
            (
                "period=week&from=2020-01-01T00:00Z&to=2025-03-01T00:00Z",
                "400 days",
            ),
        ] {
            let e = ParsedQuery::from_query(raw, now).unwrap_err();
            assert!(e.starts_with(named) || e.contains(named), "{raw}: {e}");
        }
        let long = "g".repeat(GROUP_BYTES_MAX + 1);
        assert!(ParsedQuery::from_query(&format!("group={long}"), now).is_err());
        // Whole weeks, from Monday.
        let q = ParsedQuery::from_query(
            "period=week&from=2025-11-26T10:00Z&to=2025-11-27T00:00Z&format=csv",
            now,
        )
        .unwrap();
        assert_eq!(utc::format_s(q.from_s), "2025-11-24T00:00:00Z");
        assert_eq!(utc::format_s(q.to_s), "2025-12-01T00:00:00Z");
        assert_eq!(q.format, ReportFormat::Csv);
    }

    #[test]
    fn a_group_is_all_or_configured() {
        let cfg = ReportsConfig {
            groups: vec!["carrier-a".into(), "site-b".into()],
        };
        let mut q = ParsedQuery::from_query("", 1_764_072_000).unwrap();
        assert_eq!(cfg.check(&q).unwrap().group, "all", "every call by default");
        q.group = Some("site-b".into());
        assert_eq!(cfg.check(&q).unwrap().from_us, q.from_s * 1_000_000);
        q.group = Some("nobody".into());
        let e = cfg.check(&q).unwrap_err();
        assert!(
            e.contains("group=\"nobody\"") && e.contains("all, carrier-a, site-b"),
            "{e}"
        );
    }

    #[test]
    fn csv_and_json_lines_carry_the_group_and_the_rows_columns() {
        let a = report(
            "a \"quoted\", group",
            vec![row("2025-11-25", 1_764_028_800, 40, 30)],
        );
        let b = report("b", vec![row("2025-11-26", 1_764_115_200, 3, 0)]);
        let text = csv(&[a.clone(), b]);
        let lines: Vec<&str> = text.split("\r\n").collect();
        assert_eq!(lines[0], columns().join(","));
        assert!(lines[0].starts_with("group,period,start,calls,"));
        assert!(
            lines[1].starts_with("\"a \"\"quoted\"\", group\",2025-11-25,2025-11-25T00:00:00"),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with(",7,486:12 503:4"), "{}", lines[1]);
        assert!(lines[2].starts_with("b,2025-11-26,"), "{}", lines[2]);
        assert_eq!(lines.len(), 4, "header, two rows, and the last CRLF");
        let first: serde_json::Value =
            serde_json::from_str(jsonl(&[a]).lines().next().unwrap()).unwrap();
        assert_eq!(first["group"], "a \"quoted\", group");
        assert_eq!(first["asr_pct"], 75.0);
        assert_eq!(first["mos_below_3_1_pct"], serde_json::Value::Null);
        assert_eq!(first["failures"][0]["code"], 486);
    }

    #[test]
    fn the_email_draws_bars_with_tables_only() {
        let html = email_html(
            "Tandem daily report",
            &[
                report(
                    "carrier-<a>",
                    vec![
                        row("2025-11-25", 1_764_028_800, 40, 30),
                        row("2025-11-26", 1_764_115_200, 20, 5),
                    ],
                ),
                report("quiet", Vec::new()),
            ],
            Some("https://pbx.example:9574/reports"),
        );
        assert!(!html.contains("<svg") && !html.contains("<script") && !html.contains("<img"));
        assert!(html.contains("carrier-&lt;a&gt;"), "names are escaped");
        assert!(html.contains("60 calls, 35 answered"), "totals");
        // 40 calls is the longest bar: 30 answered of them are 270 px of 360.
        assert!(html.contains("width=\"270\""), "{html}");
        assert!(html.contains("No calls in this group"));
        assert!(html.contains("2025-11-25"));
    }
}
