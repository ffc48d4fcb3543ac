//! One line for a person, per alert: what happened, to whom, how much.

use crate::Figures;
use crate::rule::{Kind, Rule};

pub(crate) fn line(rule: &Rule, key: &str, f: &Figures) -> String {
    let who = if key.is_empty() {
        String::new()
    } else {
        format!(" ({} {key})", rule.group_by.as_str())
    };
    let what = match &rule.kind {
        Kind::Mos { mos } => format!("calls with MOS below {mos}"),
        Kind::Loss { pct } => format!("calls losing more than {pct}% of RTP"),
        Kind::Jitter { ms } => format!("calls with jitter above {ms} ms"),
        Kind::OneWay { .. } => "answered calls with one-way audio".into(),
        Kind::NoRtp => "answered calls without RTP".into(),
        Kind::Response { .. } => "calls failed with the watched responses".into(),
        Kind::NoResponse => "INVITEs without a final response".into(),
        Kind::Asr { .. } => "answer-seizure ratio".into(),
        Kind::Ner { .. } => "network effectiveness ratio".into(),
        Kind::Pdd { ms } => format!("calls with post-dial delay above {ms} ms"),
        Kind::Malformed => "malformed SIP messages".into(),
        Kind::RegisterFailed => "failed registrations".into(),
        Kind::RegisterNewCountry => "registrations from a new country".into(),
        Kind::RegisterNewPrefix { .. } => "registrations from a new network".into(),
        Kind::UserAgentChange => "registrations with a new User-Agent".into(),
        Kind::Destination { .. } => "calls to watched destinations".into(),
        Kind::Concurrent { .. } => "calls up at once".into(),
        Kind::Calls => "calls started".into(),
        Kind::CountryChange => "calls from a new country".into(),
        Kind::Hours(_) => "calls outside business hours".into(),
        Kind::SensorSilent { .. } => "sensor silent".into(),
        Kind::CaptureDrops => "packets dropped by the capture".into(),
        Kind::CdrJournal => "CDRs waiting in the journal".into(),
        Kind::FastagiFailures => "FastAGI sessions failed".into(),
        Kind::StoreCommit { .. } => "mean store commit time".into(),
        Kind::Metric { metric, .. } => metric.clone(),
    };
    let value = if f.value.fract() == 0.0 {
        format!("{}", f.value)
    } else {
        format!("{:.1}", f.value)
    };
    let threshold = if f.threshold.fract() == 0.0 {
        format!("{}", f.threshold)
    } else {
        format!("{:.1}", f.threshold)
    };
    let of = if f.unit == "%" && f.total > 0 {
        format!(" of {} calls", f.total)
    } else {
        String::new()
    };
    // "1 call", "1 registration", not "1 calls".
    let unit = match (f.value == 1.0, f.unit.strip_suffix('s')) {
        (true, Some(one)) if f.unit == "calls" || f.unit == "registrations" => one,
        _ => f.unit.as_str(),
    };
    format!(
        "{}{who}: {what}: {value} {unit}{of} (threshold {threshold}) in {} s",
        rule.name, f.window_s
    )
}
