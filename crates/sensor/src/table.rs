//! The calls and streams of a capture as tables for a person (`tandem capture` without
//! `--json`). [`CallTable`] is a [`RecordObserver`]: it keeps the first `rows_max` calls and
//! streams and counts the rest, so a capture of a million calls holds a screenful, not a
//! million rows. Shared through an `Arc<Mutex<…>>`: the sensor's thread fills it, the caller
//! renders it after `join`.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Mutex};

use monitor::analyzer::{CallRecord, StreamRecord};

use crate::RecordObserver;
use crate::records::us;

/// Rows of each table shown by default.
pub const DEFAULT_ROWS_MAX: usize = 20;

struct CallRow {
    caller: String,
    called: String,
    start: String,
    duration: String,
    last_response: String,
    worst_mos: String,
}

struct StreamRow {
    flow: String,
    codec: String,
    packets: String,
    lost: String,
    jitter: String,
    mos: String,
}

/// The first rows of each table, and how many more there were.
pub struct CallTable {
    rows_max: usize,
    calls: Vec<CallRow>,
    streams: Vec<StreamRow>,
    calls_more: u64,
    streams_more: u64,
}

/// The observer half of a [`CallTable`], handed to [`crate::Sensor::start`].
pub struct CallTableObserver(Arc<Mutex<CallTable>>);

impl CallTable {
    /// An empty table keeping at most `rows_max` rows of each kind, and its observer.
    pub fn new(rows_max: usize) -> (Arc<Mutex<CallTable>>, CallTableObserver) {
        let table = Arc::new(Mutex::new(CallTable {
            rows_max,
            calls: Vec::new(),
            streams: Vec::new(),
            calls_more: 0,
            streams_more: 0,
        }));
        (table.clone(), CallTableObserver(table))
    }

    fn add_call(&mut self, c: &CallRecord) {
        if self.calls.len() >= self.rows_max {
            self.calls_more += 1;
            return;
        }
        let d = &c.dialog;
        let duration = match (d.answer_ns, d.end_ns) {
            (Some(a), Some(e)) => duration_text((e - a).max(0) / 1_000_000_000),
            (Some(_), None) => "in progress".to_string(),
            _ => "-".to_string(),
        };
        let last_response = match d.last_code {
            0 => "-".to_string(),
            code if d.last_reason.is_empty() => code.to_string(),
            code => format!("{code} {}", d.last_reason),
        };
        let worst = c
            .streams
            .iter()
            .filter_map(|s| s.stream.mos())
            .min_by(f64::total_cmp);
        self.calls.push(CallRow {
            caller: d.caller.to_string(),
            called: d.called.to_string(),
            start: short_time(us(d.invite_ns)),
            duration,
            last_response,
            worst_mos: worst.map_or("-".to_string(), |m| format!("{m:.2}")),
        });
    }

    fn add_stream(&mut self, s: &StreamRecord) {
        if self.streams.len() >= self.rows_max {
            self.streams_more += 1;
            return;
        }
        let st = &s.stream;
        let w = &st.wireshark;
        let expected = st.packets as i64 + w.lost();
        let lost_pct = if expected > 0 {
            100.0 * w.lost() as f64 / expected as f64
        } else {
            0.0
        };
        self.streams.push(StreamRow {
            flow: format!("{} → {}", st.key.src, st.key.dst),
            codec: st.payload_names(),
            packets: st.packets.to_string(),
            lost: format!("{} ({lost_pct:.1}%)", w.lost()),
            jitter: format!("{:.2} / {:.2}", w.mean_jitter_ms, w.max_jitter_ms),
            mos: st.mos().map_or("-".to_string(), |m| format!("{m:.2}")),
        });
    }

    /// Both tables as text, each followed by the count of rows left out; empty when there were
    /// no calls and no streams.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.calls.is_empty() {
            let rows: Vec<[&str; 6]> = self
                .calls
                .iter()
                .map(|r| {
                    [
                        &r.caller,
                        &r.called,
                        &r.start,
                        &r.duration,
                        &r.last_response,
                        &r.worst_mos,
                    ]
                    .map(String::as_str)
                })
                .collect();
            table(
                &mut out,
                [
                    "caller",
                    "called",
                    "start (UTC)",
                    "duration",
                    "last response",
                    "worst MOS",
                ],
                &rows,
            );
            more(&mut out, self.calls_more, "call");
        }
        if !self.streams.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            let rows: Vec<[&str; 6]> = self
                .streams
                .iter()
                .map(|r| {
                    [&r.flow, &r.codec, &r.packets, &r.lost, &r.jitter, &r.mos].map(String::as_str)
                })
                .collect();
            table(
                &mut out,
                [
                    "RTP stream",
                    "codec",
                    "packets",
                    "lost",
                    "jitter ms (mean / max)",
                    "MOS",
                ],
                &rows,
            );
            more(&mut out, self.streams_more, "stream");
        }
        out
    }
}

impl RecordObserver for CallTableObserver {
    fn records(&mut self, part: &monitor::Analysis) -> std::io::Result<()> {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for c in &part.calls {
            t.add_call(c);
        }
        for s in part.all_streams() {
            t.add_stream(s);
        }
        Ok(())
    }

    /// Alerts are printed as they come, before the tables at the end.
    fn alerts(&mut self, alerts: &[alerts::Alert]) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        for a in alerts {
            writeln!(
                out,
                "alert {} {}: {} [{}]",
                a.state.as_str(),
                a.severity.as_str(),
                a.summary,
                utc::format_us(a.at_us)
            )?;
        }
        Ok(())
    }
}

/// `n thing` or `n things`.
pub fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

fn more(out: &mut String, n: u64, thing: &str) {
    match n {
        0 => {}
        1 => out.push_str(&format!("… and 1 more {thing}\n")),
        n => out.push_str(&format!("… and {n} more {thing}s\n")),
    }
}

/// Left-aligned columns two spaces apart, a header and a rule.
fn table<const N: usize>(out: &mut String, header: [&str; N], rows: &[[&str; N]]) {
    let mut width = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[&str; N]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let _ = write!(text, "{cell:<w$}");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(out, &header);
    let rule = width.map(|w| "─".repeat(w));
    line(out, &rule.each_ref().map(String::as_str));
    for row in rows {
        line(out, row);
    }
}

/// `2026-11-21 08:09:10` from microseconds since the epoch.
fn short_time(us: i64) -> String {
    let full = utc::format_us(us);
    full.get(..19).unwrap_or(&full).replace('T', " ")
}

/// `m:ss` or `h:mm:ss`.
fn duration_text(secs: i64) -> String {
    match secs {
        s if s >= 3600 => format!("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60),
        s => format!("{}:{:02}", s / 60, s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_and_durations_read_as_english() {
        assert_eq!(plural(1, "call"), "1 call");
        assert_eq!(plural(0, "call"), "0 calls");
        assert_eq!(plural(2, "RTP stream"), "2 RTP streams");
        assert_eq!(duration_text(65), "1:05");
        assert_eq!(duration_text(3_725), "1:02:05");
    }

    #[test]
    fn a_table_aligns_its_columns_under_a_rule() {
        let mut out = String::new();
        table(&mut out, ["a", "bbb"], &[["xx", "y"], ["z", "w"]]);
        assert_eq!(out, "a   bbb\n──  ───\nxx  y\nz   w\n");
    }
}
