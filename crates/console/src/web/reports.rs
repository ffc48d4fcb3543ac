//! The Reports page and `GET /api/reports`: one group's figures per hour, day or week, read
//! from the rollups through the calls' CDR readers.
//!
//! - `GET /api/reports?group=NAME&period=hour|day|week&from=…&to=…&format=json|csv|jsonl` →
//!   JSON `{"group", "period", "from", "to", "columns", "rows": [...], "groups"}`, or the rows as
//!   CSV (a header line of `reports::COLUMNS`) or JSON lines. Without groups or a CDR database
//!   the JSON says how reports come to be (`"hint"`), with 200: an empty install is not an
//!   error.
//! - `GET /reports?…` (the same parameters but `format`): a group picker, the period and range,
//!   charts drawn on the server (calls and answered, ASR and NER, PDD, MOS, loss, jitter) and a
//!   table of every figure per period, with links to the CSV and JSON lines.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, api_error};
use super::page::{ChartView, LinkView};
use super::{Shared, html, url_encode};
use crate::accounts::{Role, User, now_s};
use crate::alert_board::BadgeCounts;
use crate::chart::{Chart, ChartPoint, ChartSeries, Unit};
use crate::reports::{self, ParsedQuery, PeriodKind, Report, ReportFormat, ReportQuery, ReportRow};

/// Why there is no report to draw, and what makes one: a CDR database, calls stored.
fn hint(state: &Shared) -> Option<String> {
    if state.reports.is_none() {
        return Some(
            "Reports are drawn from the rollups serve keeps as calls are stored: start the \
             console with serve, with a capture ([capture] in tandem.toml) or a collector."
                .into(),
        );
    }
    match &state.calls {
        None => Some(
            "Reports are read from the CDR database: give serve a capture ([capture] in \
             tandem.toml, cdr_sqlite or cdr_postgres)."
                .into(),
        ),
        Some(_) => None,
    }
}

/// What an install without calls or without groups is told: how reports come to be.
fn how_to_fill(state: &Shared, calls: u64) -> String {
    let mut out = String::new();
    if calls == 0 {
        out.push_str(&match &state.calls {
            Some(c) => c.source().how_to_fill("Calls"),
            None => String::new(),
        });
        out.push_str(" Each call is counted as it is stored, per hour, in the groups it is in.");
    }
    if state.reports.as_ref().is_some_and(|r| r.groups.is_empty()) {
        out.push_str(
            " Only the group all (every call) is defined: name your carriers, customers and \
             sites with [[groups]] in tandem.toml (name, addresses, numbers) for a report each.",
        );
    }
    out.trim().to_owned()
}

/// The report of a checked query.
async fn read_report(state: &Shared, rq: ReportQuery) -> Result<Option<Report>, ApiError> {
    let (Some(_), Some(calls)) = (&state.reports, state.calls.clone()) else {
        return Ok(None);
    };
    match calls.read(move |s| s.report(&rq)).await {
        Ok(r) => Ok(Some(r)),
        // A database no capture has made yet holds no calls: no rows, not an error.
        Err(crate::calls::CallsError::NoDatabase(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn checked(state: &Shared, q: &ParsedQuery) -> Result<Option<ReportQuery>, String> {
    match &state.reports {
        Some(cfg) => cfg.check(q).map(Some),
        None => Ok(None),
    }
}

pub(super) async fn api_reports(
    State(state): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let q = ParsedQuery::from_query(raw.as_deref().unwrap_or(""), now_s())
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, e))?;
    let rq = checked(&state, &q).map_err(|e| api_error(StatusCode::BAD_REQUEST, e))?;
    let report = match &rq {
        Some(rq) => read_report(&state, rq.clone()).await?,
        None => None,
    };
    let group = rq.as_ref().map(|r| r.group.clone()).unwrap_or_default();
    let reports: Vec<Report> = report.iter().cloned().collect();
    Ok(match q.format {
        ReportFormat::Csv => download(
            "text/csv; charset=utf-8",
            &file_name(&group, q.period, q.from_s, "csv"),
            reports::csv(&reports),
        ),
        ReportFormat::Jsonl => download(
            "application/x-ndjson",
            &file_name(&group, q.period, q.from_s, "jsonl"),
            reports::jsonl(&reports),
        ),
        ReportFormat::Json => {
            let mut v = serde_json::json!({
                "group": group,
                "period": q.period.as_str(),
                "from": utc::format_s(q.from_s),
                "to": utc::format_s(q.to_s),
                "from_s": q.from_s,
                "to_s": q.to_s,
                "columns": reports::columns(),
                "rows": report.as_ref().map_or(Vec::new(), |r| r.rows.iter().map(|row| reports::row_json(&group, row)).collect()),
                "total": report.as_ref().map(|r| reports::row_json(&group, &r.total)),
                "groups": state.reports.as_ref().map(|r| r.names()).unwrap_or_default(),
            });
            let calls = report.as_ref().map_or(0, |r| r.total.calls);
            if let Some(h) = hint(&state) {
                v["hint"] = h.into();
            } else if calls == 0 || state.reports.as_ref().is_some_and(|r| r.groups.is_empty()) {
                v["hint"] = how_to_fill(&state, calls).into();
            }
            axum::Json(v).into_response()
        }
    })
}

/// `tandem-report-NAME-day-2025-11-25.csv`, the name kept to safe characters.
pub fn file_name(group: &str, period: PeriodKind, from_s: i64, ext: &str) -> String {
    let safe: String = group
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let day = &utc::format_s(from_s)[..10];
    format!("tandem-report-{safe}-{}-{day}.{ext}", period.as_str())
}

fn download(content_type: &'static str, name: &str, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

#[derive(Template)]
#[template(path = "reports.html")]
struct ReportsPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<BadgeCounts>,
    hint: String,
    /// How reports come to be, for a report without calls or an install without groups.
    fill: String,
    error: String,
    group: String,
    groups: Vec<LinkView>,
    periods: Vec<LinkView>,
    period: &'static str,
    from_s: i64,
    to_s: i64,
    from_iso: String,
    to_iso: String,
    from_input: String,
    to_input: String,
    base: String,
    csv_href: String,
    jsonl_href: String,
    api_href: String,
    summary: String,
    has_calls: bool,
    no_groups: bool,
    charts: Vec<ChartView>,
    head: Vec<&'static str>,
    rows: Vec<[String; 14]>,
}

/// A figure of a row, as a chart's series draws it.
type Pick = fn(&ReportRow) -> Option<f64>;
/// A chart of the page: its id, title, unit, the scale from the row's unit to the chart's
/// (milliseconds to seconds), and its series' labels and figures.
type ChartSpec = (
    &'static str,
    &'static str,
    Unit,
    f64,
    &'static [(&'static str, Pick)],
);

/// The charts of one group's rows: each series one point per period with a figure.
fn charts(rq: &ReportQuery, rows: &[ReportRow], now: i64) -> Vec<ChartView> {
    let width_s = (rq.period.len_us() / 1_000_000) as u32;
    let specs: [ChartSpec; 6] = [
        (
            "calls",
            "Calls and answered",
            Unit::Plain,
            1.0,
            &[
                ("Calls", |r| Some(r.calls as f64)),
                ("Answered", |r| Some(r.answered as f64)),
            ],
        ),
        (
            "asr",
            "ASR and NER",
            Unit::Percent,
            1.0,
            &[("ASR", |r| r.asr_pct), ("NER", |r| r.ner_pct)],
        ),
        (
            "pdd",
            "Post-dial delay",
            Unit::Seconds,
            0.001,
            &[("Median", |r| r.pdd_median_ms), ("p95", |r| r.pdd_p95_ms)],
        ),
        (
            "mos",
            "Calls with MOS below",
            Unit::PercentFitted,
            1.0,
            &[
                ("3.6", |r| r.mos_below_3_6_pct),
                ("3.1", |r| r.mos_below_3_1_pct),
            ],
        ),
        (
            "loss",
            "Packet loss",
            Unit::PercentFitted,
            1.0,
            &[
                ("Median", |r| r.loss_median_pct),
                ("p95", |r| r.loss_p95_pct),
            ],
        ),
        (
            "jitter",
            "Jitter",
            Unit::Seconds,
            0.001,
            &[
                ("Median", |r| r.jitter_median_ms),
                ("p95", |r| r.jitter_p95_ms),
            ],
        ),
    ];
    specs
        .iter()
        .map(|(id, title, unit, scale, series)| {
            let series: Vec<ChartSeries> = series
                .iter()
                .map(|(label, pick)| ChartSeries {
                    label: (*label).to_owned(),
                    name: format!("{id}.{}", label.to_lowercase()),
                    points: rows
                        .iter()
                        .filter_map(|r| {
                            pick(r).filter(|v| v.is_finite()).map(|v| ChartPoint {
                                t_s: r.start_us.div_euclid(1_000_000),
                                min: v * scale,
                                max: v * scale,
                                avg: v * scale,
                            })
                        })
                        .collect(),
                })
                .collect();
            let chart = Chart {
                id: format!("report-{id}"),
                title: (*title).to_owned(),
                unit: *unit,
                from_s: rq.from_us.div_euclid(1_000_000),
                to_s: rq.to_us.div_euclid(1_000_000),
                width_s,
                now_s: now,
                series,
            };
            ChartView::of(&chart)
        })
        .collect()
}

pub(super) async fn reports_page(
    State(state): State<Shared>,
    axum::Extension(u): axum::Extension<User>,
    RawQuery(raw): RawQuery,
) -> Response {
    let now = now_s();
    let badge = super::alerts_api::badge(&state).await;
    // A bad parameter shows the default report with the error above it, rather than no page.
    let (q, mut error) = match ParsedQuery::from_query(raw.as_deref().unwrap_or(""), now) {
        Ok(q) => (q, String::new()),
        Err(e) => (
            ParsedQuery::from_query("", now).unwrap_or_else(|_| unreachable!()),
            e,
        ),
    };
    let rq = match checked(&state, &q) {
        Ok(rq) => rq,
        Err(e) => {
            error = e;
            let default = ParsedQuery {
                group: None,
                ..q.clone()
            };
            checked(&state, &default).ok().flatten()
        }
    };
    let report = match &rq {
        Some(rq) => match read_report(&state, rq.clone()).await {
            Ok(r) => r,
            Err(e) => {
                error = e.message().to_owned();
                None
            }
        },
        None => None,
    };
    let rows: &[ReportRow] = report.as_ref().map_or(&[], |r| &r.rows);
    let group = rq.as_ref().map(|r| r.group.clone()).unwrap_or_default();
    let range =
        |g: &str, p: PeriodKind| format!("/reports?group={}&period={}", url_encode(g), p.as_str());
    let span = format!("&from={}&to={}", q.from_s, q.to_s);
    let groups = state
        .reports
        .as_ref()
        .map(|r| r.names())
        .unwrap_or_default()
        .iter()
        .map(|g| LinkView {
            label: g.clone(),
            href: format!("{}{span}", range(g, q.period)),
            active: *g == group,
        })
        .collect();
    // Another period keeps the group, and its own default range.
    let periods = [PeriodKind::Hour, PeriodKind::Day, PeriodKind::Week]
        .iter()
        .map(|p| LinkView {
            label: p.as_str().to_owned(),
            href: range(&group, *p),
            active: *p == q.period,
        })
        .collect();
    let base = range(&group, q.period);
    let api = |format: &str| {
        format!(
            "/api/reports?group={}&period={}{span}{format}",
            url_encode(&group),
            q.period.as_str()
        )
    };
    let (csv_href, jsonl_href, api_href) = (api("&format=csv"), api("&format=jsonl"), api(""));
    let calls = report.as_ref().map_or(0, |r| r.total.calls);
    let summary = match &report {
        Some(r) if calls > 0 => {
            let t = &r.total;
            let with_calls = r.rows.iter().filter(|p| p.calls > 0).count();
            format!(
                "{} calls, {} answered (ASR {}), NER {}, at most {} at once; {with_calls} of {} {}s with calls",
                t.calls,
                t.answered,
                reports::cell(t.asr_pct, "%"),
                reports::cell(t.ner_pct, "%"),
                t.peak_concurrent,
                r.rows.len(),
                q.period.as_str()
            )
        }
        _ => String::new(),
    };
    let charts = match &rq {
        Some(rq) => charts(rq, rows, now),
        None => Vec::new(),
    };
    let input = |t: i64| utc::format_s(t)[..16].to_owned();
    html(
        StatusCode::OK,
        ReportsPage {
            page: "reports",
            user: u.name,
            admin: u.role == Role::Admin,
            badge,
            hint: hint(&state).unwrap_or_default(),
            fill: how_to_fill(&state, calls),
            has_calls: calls > 0,
            no_groups: state.reports.as_ref().is_some_and(|r| r.groups.is_empty()),
            error,
            group,
            groups,
            periods,
            period: q.period.as_str(),
            from_s: q.from_s,
            to_s: q.to_s,
            from_iso: utc::format_s(q.from_s),
            to_iso: utc::format_s(q.to_s),
            from_input: input(q.from_s),
            to_input: input(q.to_s),
            base,
            csv_href,
            jsonl_href,
            api_href,
            summary,
            charts,
            head: reports::HEAD.to_vec(),
            // Newest first; periods without calls are left out of the table (not the charts).
            rows: rows
                .iter()
                .rev()
                .filter(|r| r.calls > 0)
                .map(reports::row_cells)
                .collect(),
        },
    )
}
