//! The dashboard page: the time picker's links, and every panel's charts for the range.

use super::{RangeQuery, Shared, html};
use crate::accounts::{Role, User, now_s};
use crate::chart::{COLOURS, format_value};
use crate::dashboard::{self, PANELS, RANGES};
use crate::sensors::{self, SensorsConfig};
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use utc::format_s;

pub(super) struct LinkView {
    pub(super) label: String,
    pub(super) href: String,
    pub(super) active: bool,
}

pub(super) struct LegendView {
    pub(super) label: String,
    pub(super) class: String,
    pub(super) index: usize,
    pub(super) latest: String,
}

/// A chart as `chart_box.html` draws it: its SVG and its legend's toggles.
pub(super) struct ChartView {
    pub(super) id: String,
    pub(super) title: String,
    pub(super) svg: String,
    pub(super) legend: Vec<LegendView>,
}

impl ChartView {
    /// The chart drawn, each series' legend with its latest value.
    pub(super) fn of(chart: &crate::chart::Chart) -> ChartView {
        let legend = chart
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| LegendView {
                label: s.label.clone(),
                class: format!("c{}", i % COLOURS.len()),
                index: i,
                latest: s
                    .points
                    .last()
                    .map(|p| format_value(p.avg, chart.unit))
                    .unwrap_or_default(),
            })
            .collect();
        ChartView {
            id: chart.id.clone(),
            title: chart.title.clone(),
            svg: chart.svg(),
            legend,
        }
    }
}

struct PanelView {
    id: String,
    title: String,
    source: String,
    charts: Vec<ChartView>,
    has_data: bool,
}

/// One row of the Sensors panel, its figures as shown.
struct SensorRowView {
    name: String,
    connected: bool,
    seen_ago: String,
    seen_us: i64,
    seen_iso: String,
    seen_utc: String,
    skew: String,
    skew_warn: bool,
    skew_ms: i64,
    lag: String,
    delivered: String,
    received: String,
    sessions: u64,
    journal: String,
    spilled: String,
    spilled_warn: bool,
    replayed: String,
    dropped: String,
    dropped_bad: bool,
    peer: String,
    software: String,
}

/// The Sensors panel: the collector's sensors now, offline ones first.
struct SensorsPanelView {
    rows: Vec<SensorRowView>,
    total: usize,
    connected: usize,
    offline: usize,
    /// Sensors beyond the rows drawn (`/api/sensors` has them).
    more: usize,
    /// Whether any row names its software (the column is left out otherwise).
    software: bool,
    now_us: i64,
    now_iso: String,
    now_utc: String,
    warn: String,
}

/// `2026-11-25 14:30:12 UTC`: a time as the page shows it before (or without) its script.
fn utc_text(us: i64) -> String {
    let iso = utc::format_s(us.div_euclid(1_000_000));
    format!("{} UTC", iso.trim_end_matches('Z').replacen('T', " ", 1))
}

fn sensors_panel(cfg: &SensorsConfig) -> SensorsPanelView {
    let now_us = sensors::now_us();
    let answer = cfg.read(now_us);
    let total = answer.sensors.len();
    let connected = answer.sensors.iter().filter(|s| s.connected).count();
    let software = answer
        .sensors
        .iter()
        .any(|s| s.software.as_ref().is_some_and(|v| !v.is_empty()));
    let mut list = answer.sensors;
    // Offline sensors first: they are what a person looks for.
    list.sort_by(|a, b| a.connected.cmp(&b.connected).then(a.name.cmp(&b.name)));
    let warn_ms = cfg.clock_skew_warn_ms;
    let rows = list
        .into_iter()
        .take(sensors::PANEL_ROWS_MAX)
        .map(|s| SensorRowView {
            seen_ago: sensors::ago(now_us, s.last_seen_us),
            seen_us: s.last_seen_us,
            seen_iso: utc::format_s(s.last_seen_us.div_euclid(1_000_000)),
            seen_utc: utc_text(s.last_seen_us),
            skew: sensors::skew(s.clock_skew_ms),
            skew_warn: s.clock_skew_ms.unsigned_abs() > warn_ms,
            skew_ms: s.clock_skew_ms,
            // Without a session nothing waits for the database.
            lag: if s.connected {
                sensors::duration_ms(s.lag_ms)
            } else {
                "\u{2014}".to_owned()
            },
            delivered: sensors::thousands(s.records_stored),
            received: sensors::thousands(s.records_received),
            sessions: s.sessions,
            journal: sensors::thousands(s.journal_records),
            spilled: sensors::thousands(s.spilled),
            spilled_warn: s.spilled > 0,
            replayed: sensors::thousands(s.replayed),
            dropped: sensors::thousands(s.dropped),
            dropped_bad: s.dropped > 0,
            software: s
                .software
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "\u{2014}".to_owned()),
            peer: s.peer,
            connected: s.connected,
            name: s.name,
        })
        .collect();
    SensorsPanelView {
        rows,
        total,
        connected,
        offline: total - connected,
        more: total.saturating_sub(sensors::PANEL_ROWS_MAX),
        software,
        now_us,
        now_iso: utc::format_s(now_us.div_euclid(1_000_000)),
        now_utc: utc_text(now_us),
        warn: sensors::duration_ms(warn_ms),
    }
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct DashboardPage {
    page: &'static str,
    user: String,
    admin: bool,
    badge: Option<crate::alert_board::BadgeCounts>,
    ranges: Vec<LinkView>,
    refreshes: Vec<LinkView>,
    refresh_s: u32,
    from_s: i64,
    to_s: i64,
    from_iso: String,
    to_iso: String,
    from_input: String,
    to_input: String,
    zoom_out: String,
    earlier: String,
    later: String,
    level_note: String,
    panels: Vec<PanelView>,
    /// The collector's sensors, when `serve` runs one.
    sensors: Option<SensorsPanelView>,
    error: String,
}

fn range_href(from: i64, to: i64) -> String {
    format!("/dashboard?from={from}&to={to}")
}

pub(super) async fn dashboard_page(
    State(state): State<Shared>,
    axum::Extension(user): axum::Extension<User>,
    Query(q): Query<RangeQuery>,
) -> Response {
    let now = now_s();
    let (from, to, relative) = q.resolve(now);
    // Auto-refresh only moves a range that ends now.
    let refresh_s = match (relative, q.refresh) {
        (Some(_), Some(r @ (10 | 60))) => r,
        _ => 0,
    };
    let sensors = state.sensors.as_ref().map(sensors_panel);
    let badge = super::alerts_api::badge(&state).await;
    let built = tokio::task::spawn_blocking(move || -> Result<(Vec<PanelView>, String), String> {
        let Some(h) = &state.history else {
            return Err("The metrics history is disabled ([history] enabled = false): there is nothing to chart.".into());
        };
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        let names = h.series_names().map_err(|e| e.to_string())?;
        let level = h.level_for(from, to, dashboard::CHART_POINTS_MAX);
        let lc = &h.config().levels[level];
        let level_note = format!("{} buckets of {} s", lc.name, lc.width_s);
        let mut panels = Vec::new();
        for def in PANELS {
            let mut charts = Vec::new();
            for cdef in def.charts {
                let chart = dashboard::chart(&mut h, &names, cdef, from, to, now)
                    .map_err(|e| e.to_string())?;
                charts.push(ChartView::of(&chart));
            }
            let has_data = charts.iter().any(|c| !c.legend.is_empty());
            panels.push(PanelView {
                id: def.id.to_owned(),
                title: def.title.to_owned(),
                source: def.source.to_owned(),
                charts,
                has_data,
            });
        }
        Ok((panels, level_note))
    })
    .await;
    let (panels, level_note, error) = match built {
        Ok(Ok((p, l))) => (p, l, String::new()),
        Ok(Err(e)) => (Vec::new(), String::new(), e),
        Err(e) => (Vec::new(), String::new(), e.to_string()),
    };
    let span = to - from;
    let mid = from + span / 2;
    let (zf, zt) = (mid - span, (mid + span).min(now.max(to)));
    let keep_refresh = |href: String| {
        if refresh_s > 0 {
            format!("{href}&refresh={refresh_s}")
        } else {
            href
        }
    };
    let ranges = RANGES
        .iter()
        .map(|(name, _)| LinkView {
            label: name.to_string(),
            href: keep_refresh(format!("/dashboard?range={name}")),
            active: relative == Some(*name),
        })
        .collect();
    let base = match relative {
        Some(r) => format!("/dashboard?range={r}"),
        None => range_href(from, to),
    };
    let refreshes = [(0, "off"), (10, "10 s"), (60, "1 min")]
        .iter()
        .map(|(r, label)| LinkView {
            label: label.to_string(),
            href: if *r == 0 {
                base.clone()
            } else {
                format!("{base}&refresh={r}")
            },
            active: *r == refresh_s,
        })
        .collect();
    let input = |t: i64| format_s(t)[..16].to_owned();
    html(
        StatusCode::OK,
        DashboardPage {
            page: "dashboard",
            user: user.name,
            admin: user.role == Role::Admin,
            badge,
            ranges,
            refreshes,
            refresh_s,
            from_s: from,
            to_s: to,
            from_iso: format_s(from),
            to_iso: format_s(to),
            from_input: input(from),
            to_input: input(to),
            zoom_out: range_href(zf, zt),
            earlier: range_href(from - span / 2, to - span / 2),
            later: range_href(from + span / 2, to + span / 2),
            level_note,
            panels,
            sensors,
            error,
        },
    )
}
