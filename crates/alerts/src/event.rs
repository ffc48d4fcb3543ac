//! What the engine is shown: [`Event`]s, each at the moment it is produced.
//!
//! Calls and registrations come as the CDR rows the sensor stores (`cdr::CdrRecord`), so that
//! a sensor, the collector (which receives only rows) and a dry run over stored CDRs feed the
//! engine the same thing. A call's start comes earlier, as a [`CallStart`] made from the
//! INVITE, so that fraud rules can fire while the calls are still up.

/// A call seen starting: its first INVITE, as the start of the CDR row it will be (`call`:
/// Call-ID, numbers, signalling addresses, `start_us`, sensor; the rest empty).
#[derive(Debug, Clone, PartialEq)]
pub struct CallStart {
    /// The uid its CDR will carry (`cdr::CdrRecord::identity`: `sensor|Call-ID|start_us`).
    pub uid: String,
    pub call: cdr::CdrCall,
    /// The INVITE's User-Agent, when it had one.
    pub user_agent: Option<String>,
}

impl CallStart {
    /// The start of `call` (a row whose start was not seen: a dry run's).
    pub fn of(uid: &str, call: &cdr::CdrCall) -> CallStart {
        CallStart {
            uid: uid.to_string(),
            call: cdr::CdrCall {
                call_id: call.call_id.clone(),
                caller: call.caller.clone(),
                called: call.called.clone(),
                caller_addr: call.caller_addr.clone(),
                callee_addr: call.callee_addr.clone(),
                start_us: call.start_us,
                sensor: call.sensor.clone(),
                state: "calling".into(),
                ..cdr::CdrCall::default()
            },
            user_agent: None,
        }
    }
}

/// One sample of a metric (a `/metrics` series), or of a figure a sensor or collector reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at_us: i64,
    pub metric: String,
    /// Sorted by name.
    pub labels: Vec<(String, String)>,
    /// A counter's value is its total; rules on counters read the increase over their window.
    pub value: f64,
}

/// Something the engine decides on.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// An INVITE opened a call.
    CallStart(&'a CallStart),
    /// A call closed (`record.call` is set), with its streams.
    CallEnd(&'a cdr::CdrRecord),
    /// A REGISTER chain settled (`record.registration` is set).
    Registration(&'a cdr::CdrRecord),
    /// A metric was sampled.
    Sample(&'a Sample),
}

impl Event<'_> {
    /// The event's own time, µs since the epoch.
    pub fn at_us(&self) -> i64 {
        match self {
            Event::CallStart(s) => s.call.start_us,
            Event::CallEnd(r) => r
                .call
                .as_ref()
                .map(|c| c.end_us.unwrap_or(c.start_us))
                .unwrap_or(0),
            Event::Registration(r) => r.registration.as_ref().map(|g| g.last_us).unwrap_or(0),
            Event::Sample(s) => s.at_us,
        }
    }
}

impl Sample {
    /// A sample from a series as the text exposition writes it (`name{a="x",b="y"}`), the
    /// labels sorted; `None` when it does not read as one.
    pub fn from_series(series: &str, value: f64, at_us: i64) -> Option<Sample> {
        let (metric, rest) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.strip_suffix('}')?),
            None => (series, ""),
        };
        let mut labels = Vec::new();
        let mut rest = rest;
        while !rest.is_empty() {
            let (name, after) = rest.split_once("=\"")?;
            // A value ends at the first quote not escaped.
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '"' if !escaped => {
                        end = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let end = end?;
            labels.push((
                name.trim_start_matches(',').to_string(),
                after[..end].replace("\\\"", "\""),
            ));
            rest = after[end + 1..].trim_start_matches(',');
        }
        labels.sort();
        Some(Sample {
            at_us,
            metric: metric.to_string(),
            labels,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_names_read_back_as_metric_and_labels() {
        let s = Sample::from_series(
            r#"tandem_agi_sessions_ended_total{route="x,\"y",result="failure"}"#,
            3.0,
            7,
        )
        .unwrap();
        assert_eq!(s.metric, "tandem_agi_sessions_ended_total");
        assert_eq!(
            s.labels,
            [
                ("result".into(), "failure".into()),
                ("route".into(), "x,\"y".into())
            ]
        );
        assert_eq!(
            Sample::from_series("tandem_kv_keys", 1.0, 0)
                .unwrap()
                .labels,
            []
        );
        assert!(Sample::from_series("bad{x=\"1}", 1.0, 0).is_none());
    }
}
