//! What the web console reads from a request or from its files: a time in a query (`utc`: epoch
//! or ISO 8601), a range query, a series name's labels, a stored latency sketch, and the text exposition
//! the history's histograms are read from, a SIP message's credentials redacted for a viewer
//! (a second pass changes nothing), the Alerts page's input: its search query, a silence as
//! JSON, a rules text, and a report's query. None may panic; a time that reads must be a time
//! that the calendar functions give back; a silence that is accepted is one the store takes.
#![no_main]

use console::dashboard::split_name;
use console::web::{RangeQuery, url_encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(us) = utc::parse_us(&text) {
        // A time that reads lies within the bounds, on a date that maps back to its day, and
        // reads again as itself once written.
        assert!((utc::SECS_MIN * 1_000_000..=utc::SECS_MAX * 1_000_000 + 999_999).contains(&us));
        let days = us.div_euclid(86_400_000_000);
        let (y, m, d) = utc::civil_from_days(days);
        assert_eq!(utc::days_from_civil(y, m, d), days);
        assert_eq!(utc::parse_us(&utc::format_us(us)), Some(us));
    }
    let mut parts = text.splitn(3, '&');
    let q = RangeQuery {
        range: parts.next().map(str::to_owned),
        from: parts.next().map(str::to_owned),
        to: parts.next().map(str::to_owned),
        refresh: None,
    };
    let (from, to, _) = q.resolve(1_800_000_000);
    assert!(from < to);
    let _ = split_name(&text);
    let redacted = console::redact::sip_credentials(&text);
    assert_eq!(console::redact::sip_credentials(&redacted), redacted);
    let encoded = url_encode(&text);
    assert!(encoded.bytes().all(|b| b.is_ascii_graphic()));
    if let Some(sketch) = history::LatencySketch::from_bytes(data) {
        let _ = sketch.quantile(0.99);
    }
    if let Ok(q) = console::alert_board::alert_query(&text) {
        assert!((1..=console::alert_board::PAGE_MAX).contains(&q.limit));
    }
    if let Ok(form) = serde_json::from_slice::<console::alert_board::SilenceForm>(data)
        && let Ok(s) = form.check(1_800_000_000_000_000)
    {
        assert!(s.ends_us > s.starts_us && !s.rule.is_empty() && !s.key.is_empty());
        assert!(s.comment.len() <= cdr::alerts::ALERT_TEXT_BYTES_MAX);
        let _ = console::alert_board::silence_covers(&s.rule, &s.key, &text, &text);
    }
    let _ = console::alert_rules::check_text(data);
    // A report query that reads is whole periods, forwards, within the bounds.
    if let Ok(q) = console::reports::ParsedQuery::from_query(&text, 1_800_000_000) {
        let len_s = q.period.len_us() / 1_000_000;
        assert!(q.from_s < q.to_s && (q.to_s - q.from_s) % len_s == 0);
        assert!((q.to_s - q.from_s) / len_s <= console::reports::PERIODS_MAX);
        assert!(q.group.as_ref().is_none_or(|g| !g.is_empty() && g.len() <= 64));
    }
    let _ = metrics_http::histograms(&text);
    let mut deltas = metrics_http::HistogramDeltas::default();
    let _ = deltas.observe(metrics_http::histograms(&text));
});
