//! Charts as SVG, drawn on the server: a page shows its charts without JavaScript, and the
//! small script in `assets/console.js` only adds zoom, legend toggles and local time labels.
//!
//! Each series is drawn as its average line over a min-max band. The plot's geometry and range
//! are written on the `<svg>` (`data-from`, `data-to`, `data-x0`, `data-x1`, `data-y0`,
//! `data-y1`, `data-ymax`), so a script (or a test) maps a pixel back to a time and a value.
//! The open bucket, still filling, is the last point of a series and drawn hollow: "now" is
//! always on the chart.

use std::fmt::Write;

/// The plot's size in SVG user units; the page scales it to its column.
pub const WIDTH: f64 = 640.0;
pub const HEIGHT: f64 = 200.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 22.0;
/// Series colours, in order (readable on white, distinct for the common colour blindnesses);
/// a series gets the class `c<i>`, and the stylesheet gives the colour (the page's content
/// security policy allows no inline styles).
pub const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2",
];

/// How values are written on the axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Plain,
    Bytes,
    BytesPerSecond,
    /// A percentage on an axis of 0 to 100 %.
    Percent,
    /// A percentage on an axis that fits its values: a loss of 2 % drawn on 0 to 100 % would
    /// be a flat line.
    PercentFitted,
    PerSecond,
    PerMinute,
    Seconds,
}

/// One point as drawn: a bucket's time and figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChartPoint {
    pub t_s: i64,
    pub min: f64,
    pub max: f64,
    pub avg: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChartSeries {
    pub label: String,
    /// The history's series name (for `/api/series` and the legend's tooltip).
    pub name: String,
    pub points: Vec<ChartPoint>,
}

/// Everything one chart needs.
#[derive(Debug, Clone)]
pub struct Chart {
    pub id: String,
    pub title: String,
    pub unit: Unit,
    pub from_s: i64,
    pub to_s: i64,
    /// Bucket width of the level the points come from.
    pub width_s: u32,
    /// Buckets starting after `now_s - width_s` are still open.
    pub now_s: i64,
    pub series: Vec<ChartSeries>,
}

/// A number with at most 3 significant digits and a unit prefix.
pub fn format_value(v: f64, unit: Unit) -> String {
    let (scaled, suffix) = match unit {
        Unit::Bytes | Unit::BytesPerSecond => {
            let mut v = v;
            let mut i = 0;
            const P: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
            while v.abs() >= 1024.0 && i < P.len() - 1 {
                v /= 1024.0;
                i += 1;
            }
            let per = if unit == Unit::BytesPerSecond {
                "/s"
            } else {
                ""
            };
            return format!("{} {}{per}", trim(v), P[i]);
        }
        Unit::Percent | Unit::PercentFitted => (v, "%"),
        Unit::PerSecond => (v, "/s"),
        Unit::PerMinute => (v, "/min"),
        Unit::Seconds => {
            return if v.abs() < 1.0 && v != 0.0 {
                format!("{} ms", trim(v * 1000.0))
            } else {
                format!("{} s", trim(v))
            };
        }
        Unit::Plain => (v, ""),
    };
    let (scaled, prefix) = if scaled.abs() >= 1e9 {
        (scaled / 1e9, "G")
    } else if scaled.abs() >= 1e6 {
        (scaled / 1e6, "M")
    } else if scaled.abs() >= 1e4 {
        (scaled / 1e3, "k")
    } else {
        (scaled, "")
    };
    format!("{}{prefix}{suffix}", trim(scaled))
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// A "nice" top of the axis and its step: four steps of 1, 2 or 5 times a power of ten, at
/// least `max`; for bytes, the same in the binary unit that writes `max` best (so the labels
/// read 1 MiB, 2 MiB, not 1.46 MiB).
fn nice_axis(max: f64, unit: Unit) -> (f64, f64) {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    if unit == Unit::Percent && max <= 100.0 {
        return (100.0, 25.0);
    }
    let scale = if matches!(unit, Unit::Bytes | Unit::BytesPerSecond) {
        let mut p = 1.0;
        while max / p >= 1024.0 {
            p *= 1024.0;
        }
        p
    } else {
        1.0
    };
    let m = max / scale;
    let raw = m / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|k| k * mag)
        .find(|s| s * 4.0 >= m)
        .unwrap_or(10.0 * mag);
    (step * 4.0 * scale, step * scale)
}

/// The time step of the x axis for a span under 60 days: about six ticks.
fn time_step(span_s: i64) -> i64 {
    const STEPS: [i64; 14] = [
        60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span_s / s <= 7)
        .unwrap_or(604800)
}

/// Month names for the labels of long spans.
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Ticks at the first of every `n`th month in `[from_s, to_s)`: for spans over 60 days, where
/// a fixed step would fall on arbitrary dates.
fn month_ticks(from_s: i64, to_s: i64) -> Vec<(i64, String)> {
    let span_days = (to_s - from_s) / 86400;
    let every = match span_days {
        ..=200 => 1,
        201..=400 => 2,
        401..=1200 => 6,
        _ => 12,
    };
    let (mut y, mut m, _) = utc::civil_from_days(from_s.div_euclid(86400));
    let mut out = Vec::new();
    loop {
        m += 1;
        if m > 12 {
            (y, m) = (y + 1, 1);
        }
        if (m - 1) % every != 0 {
            continue;
        }
        let t = utc::days_from_civil(y, m, 1) * 86400;
        if t >= to_s {
            return out;
        }
        let label = if m == 1 {
            y.to_string()
        } else {
            MONTHS[m as usize - 1].to_owned()
        };
        out.push((t, label));
    }
}

/// `HH:MM` for spans under two days, else `MM-DD`, in UTC (the page's script rewrites the
/// labels in the browser's time zone).
fn time_label(t_s: i64, span_s: i64) -> String {
    let days = t_s.div_euclid(86400);
    let secs = t_s.rem_euclid(86400);
    if span_s <= 2 * 86400 {
        format!("{:02}:{:02}", secs / 3600, secs % 3600 / 60)
    } else {
        let (_, m, d) = utc::civil_from_days(days);
        format!("{m:02}-{d:02}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Chart {
    /// The highest value drawn (band tops included).
    pub fn y_max(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| p.t_s + i64::from(self.width_s) > self.from_s && p.t_s < self.to_s)
            .map(|p| p.max.max(p.avg))
            .fold(0.0, f64::max)
    }

    /// Where time `t_s` is drawn; a point past the range's end (the middle of a bucket still
    /// open) is drawn at the end.
    fn x(&self, t_s: f64) -> f64 {
        let span = (self.to_s - self.from_s).max(1) as f64;
        let t = t_s.min(self.to_s as f64);
        LEFT + (t - self.from_s as f64) / span * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, v: f64, top: f64) -> f64 {
        HEIGHT - BOTTOM - (v / top).clamp(-0.05, 1.05) * (HEIGHT - TOP - BOTTOM)
    }

    /// The chart as an SVG element.
    pub fn svg(&self) -> String {
        let (top, step) = nice_axis(self.y_max(), self.unit);
        let mut s = String::with_capacity(4096);
        let _ = write!(
            s,
            r#"<svg class="chart" id="{id}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{title}" data-from="{from}" data-to="{to}" data-x0="{LEFT}" data-x1="{x1}" data-y0="{y0}" data-y1="{TOP}" data-ymax="{top}" data-width="{w}" preserveAspectRatio="none">"#,
            id = esc(&self.id),
            title = esc(&self.title),
            from = self.from_s,
            to = self.to_s,
            x1 = WIDTH - RIGHT,
            y0 = HEIGHT - BOTTOM,
            w = self.width_s,
        );
        // Grid and y labels.
        for i in 0..=4 {
            let v = step * f64::from(i);
            let y = self.y(v, top);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{LEFT}" x2="{x2}" y1="{y:.1}" y2="{y:.1}"/><text class="tick-y" x="{tx}" y="{ty:.1}">{label}</text>"#,
                x2 = WIDTH - RIGHT,
                tx = LEFT - 4.0,
                ty = y + 3.5,
                label = esc(&format_value(v, self.unit)),
            );
        }
        // Time ticks, labelled in UTC with data-t for the page's script.
        let span = self.to_s - self.from_s;
        let ticks: Vec<(i64, String)> = if span > 60 * 86400 {
            month_ticks(self.from_s, self.to_s)
        } else {
            let step = time_step(span);
            let first = self.from_s.div_euclid(step) * step + step;
            (0..)
                .map(|i| first + i * step)
                .take_while(|t| *t < self.to_s)
                .map(|t| (t, time_label(t, span)))
                .collect()
        };
        let fmt = match span {
            s if s > 60 * 86400 => "month",
            s if s > 2 * 86400 => "day",
            _ => "time",
        };
        for (t, label) in ticks {
            let x = self.x(t as f64);
            let _ = write!(
                s,
                r#"<line class="grid-x" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{y0}"/><text class="tick-x" x="{x:.1}" y="{ty}" data-t="{t}" data-fmt="{fmt}">{label}</text>"#,
                y0 = HEIGHT - BOTTOM,
                ty = HEIGHT - 6.0,
            );
        }
        let half = f64::from(self.width_s) / 2.0;
        for (i, series) in self.series.iter().enumerate() {
            let _ = write!(
                s,
                r#"<g class="series c{c}" data-series="{i}" data-name="{name}">"#,
                c = i % COLOURS.len(),
                name = esc(&series.name)
            );
            let (merged, step_s) = columns(&series.points, self.from_s, self.to_s, self.width_s);
            // Points further apart than one and a half steps leave a gap: no samples there.
            let gap = step_s * 3 / 2;
            let pts: Vec<&ChartPoint> = merged.iter().collect();
            // The band: min to max, one closed shape per run without gaps.
            let mut runs: Vec<Vec<&ChartPoint>> = Vec::new();
            for p in &pts {
                match runs.last_mut() {
                    Some(run) if p.t_s - run.last().map_or(p.t_s, |q| q.t_s) <= gap => run.push(p),
                    _ => runs.push(vec![p]),
                }
            }
            for run in &runs {
                let at = |p: &ChartPoint, v: f64| (self.x(p.t_s as f64 + half), self.y(v, top));
                if run.iter().any(|p| p.max > p.min) {
                    let mut d = String::with_capacity(run.len() * 24);
                    let tops = run.iter().map(|p| at(p, p.max));
                    let bottoms = run.iter().rev().map(|p| at(p, p.min));
                    polyline(&mut d, tops.chain(bottoms));
                    let _ = write!(s, r#"<path class="band" d="{d}Z"/>"#);
                }
                let mut d = String::with_capacity(run.len() * 12);
                polyline(&mut d, run.iter().map(|p| at(p, p.avg)));
                let _ = write!(s, r#"<path class="line" d="{d}"/>"#);
            }
            if let Some(last) = pts.last()
                && last.t_s + i64::from(self.width_s) > self.now_s
            {
                let _ = write!(
                    s,
                    r#"<circle class="open" cx="{:.2}" cy="{:.2}" r="3"><title>open bucket, still filling: {}</title></circle>"#,
                    self.x(last.t_s as f64 + half),
                    self.y(last.avg, top),
                    esc(&format_value(last.avg, self.unit)),
                );
            }
            s.push_str("</g>");
        }
        if self.series.iter().all(|s| s.points.is_empty()) {
            let _ = write!(
                s,
                r#"<text class="empty" x="{x}" y="{y}">no data in this range</text>"#,
                x = WIDTH / 2.0,
                y = HEIGHT / 2.0
            );
        }
        let _ = write!(
            s,
            r#"<rect class="zoom" x="{LEFT}" y="{TOP}" width="0" height="{h}"/></svg>"#,
            h = HEIGHT - TOP - BOTTOM
        );
        s
    }
}

/// Writes `M x,y L x,y ...` with one decimal: a tenth of a unit is finer than a pixel, and
/// writing fixed-point integers costs a fraction of formatting floats (the biggest part of a
/// page's drawing time otherwise).
fn polyline(d: &mut String, vertices: impl Iterator<Item = (f64, f64)>) {
    for (i, (x, y)) in vertices.enumerate() {
        d.push(if i == 0 { 'M' } else { 'L' });
        tenths(d, x);
        d.push(',');
        tenths(d, y);
    }
}

/// A non-negative coordinate to one decimal (negative ones, never drawn here, clamp to 0).
fn tenths(d: &mut String, v: f64) {
    let n = (v.max(0.0) * 10.0).round() as u64;
    let _ = write!(d, "{}.{}", n / 10, n % 10);
}

/// Most points drawn per series: about one per unit of the plot's width. More would only
/// weigh on the page; buckets that fall in one column are merged (min of the mins, max of the
/// maxes, mean of the averages) and drawn once.
pub const COLUMNS_MAX: i64 = 576;

/// The points of a series as drawn, and the time between two of them: merged by column when
/// there are more than the plot has.
fn columns(points: &[ChartPoint], from_s: i64, to_s: i64, width_s: u32) -> (Vec<ChartPoint>, i64) {
    let span = (to_s - from_s).max(1);
    if points.len() as i64 <= COLUMNS_MAX {
        return (points.to_vec(), i64::from(width_s));
    }
    // Whole buckets per column, so that every column merges the same number of buckets.
    let w = i64::from(width_s.max(1));
    let per_column = ((span / COLUMNS_MAX + w - 1) / w).max(1) * w;
    let mut out: Vec<ChartPoint> = Vec::with_capacity(COLUMNS_MAX as usize + 2);
    let mut n = 0.0;
    let mut key = None;
    for p in points {
        let k = (p.t_s - from_s).div_euclid(per_column);
        match out.last_mut() {
            Some(c) if key == Some(k) => {
                c.min = c.min.min(p.min);
                c.max = c.max.max(p.max);
                n += 1.0;
                c.avg += (p.avg - c.avg) / n;
            }
            _ => {
                // The column is drawn at the middle of its span, as a bucket is.
                let t_s = from_s + k * per_column + per_column / 2 - i64::from(width_s) / 2;
                out.push(ChartPoint { t_s, ..*p });
                n = 1.0;
                key = Some(k);
            }
        }
    }
    (out, per_column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_buckets_than_columns_are_merged_exactly() {
        let points: Vec<ChartPoint> = (0..1440)
            .map(|i| ChartPoint {
                t_s: i * 60,
                min: i as f64,
                max: i as f64 + 1.0,
                avg: i as f64 + 0.5,
            })
            .collect();
        let (c, step) = columns(&points, 0, 86_400, 60);
        assert_eq!(step, 180);
        assert!(c.len() as i64 <= COLUMNS_MAX, "{}", c.len());
        // 1440 minutes over at most 576 columns: 3 minutes each.
        assert_eq!(c.len(), 480);
        assert_eq!((c[0].min, c[0].max, c[0].avg), (0.0, 3.0, 1.5));
        assert_eq!(c[1].t_s, 180 + 90 - 30);
        let (few, step) = columns(&points[..100], 0, 86_400, 60);
        assert_eq!((few, step), (points[..100].to_vec(), 60));
    }

    #[test]
    fn values_are_written_with_their_unit() {
        assert_eq!(format_value(0.0, Unit::Percent), "0%");
        assert_eq!(format_value(12.5, Unit::Percent), "12.5%");
        assert_eq!(format_value(3.0 * 1024.0 * 1024.0, Unit::Bytes), "3 MiB");
        assert_eq!(format_value(1536.0, Unit::BytesPerSecond), "1.5 KiB/s");
        assert_eq!(format_value(25_000.0, Unit::PerSecond), "25k/s");
        assert_eq!(format_value(0.0042, Unit::Seconds), "4.2 ms");
    }

    #[test]
    fn the_axis_top_covers_the_highest_value() {
        for (max, unit) in [
            (0.3, Unit::Plain),
            (7.0, Unit::Plain),
            (1234.0, Unit::Plain),
        ] {
            let (top, step) = nice_axis(max, unit);
            assert!(top >= max && top < max * 3.0, "{max} -> {top}");
            assert_eq!(top, step * 4.0);
        }
        assert_eq!(nice_axis(42.0, Unit::Percent), (100.0, 25.0));
        assert_eq!(nice_axis(1.6, Unit::PercentFitted), (2.0, 0.5));
        let mib = 1024.0 * 1024.0;
        assert_eq!(nice_axis(3.4 * mib, Unit::BytesPerSecond), (4.0 * mib, mib));
    }

    #[test]
    fn a_long_span_is_marked_at_month_starts() {
        // 2025-11-25 to 2026-11-25: every other month, the new year by its number.
        let ticks = month_ticks(1_764_028_800, 1_795_564_800);
        let labels: Vec<&str> = ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["2026", "Mar", "May", "Jul", "Sep", "Nov"]);
        assert_eq!(utc::format_s(ticks[0].0), "2026-01-01T00:00:00Z");
    }

    #[test]
    fn dates_are_civil_dates() {
        assert_eq!(utc::format_s(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc::format_s(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc::format_s(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn a_point_is_drawn_where_its_time_and_value_say() {
        let chart = Chart {
            id: "c".into(),
            title: "t".into(),
            unit: Unit::Plain,
            from_s: 0,
            to_s: 1000,
            width_s: 10,
            now_s: 995,
            series: vec![ChartSeries {
                label: "a".into(),
                name: "a".into(),
                points: vec![
                    ChartPoint {
                        t_s: 0,
                        min: 4.0,
                        max: 4.0,
                        avg: 4.0,
                    },
                    ChartPoint {
                        t_s: 990,
                        min: 2.0,
                        max: 2.0,
                        avg: 2.0,
                    },
                ],
            }],
        };
        let svg = chart.svg();
        // The first point sits at the middle of its bucket: t = 5 of 1000.
        let x = LEFT + 5.0 / 1000.0 * (WIDTH - LEFT - RIGHT);
        assert!(svg.contains(&format!("M{x:.1},")), "{svg}");
        assert!(
            svg.contains("class=\"open\""),
            "the bucket of t = 990 is open at 995"
        );
        assert!(svg.contains("data-ymax=\"4\""), "{svg}");
    }
}
