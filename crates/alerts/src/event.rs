//! What the engine is shown: [`Event`]s, each at the moment it is produced.
//!
//! Calls and registrations come as the CDR rows the sensor stores (`cdr::CdrRecord`), so that
//! a sensor, the collector (which receives only rows) and a dry run over stored CDRs feed the
//! engine the same thing. A call's start comes earlier, as a [`CallStart`] made from the
//! INVITE, so that fraud rules can fire while the calls are still up.

use std::net::SocketAddr;

/// A call seen starting: its first INVITE.
#[derive(Debug, Clone, PartialEq)]
pub struct CallStart {
    /// The uid its CDR will carry (`cdr::CdrRecord::identity`: `sensor|Call-ID|start_us`).
    pub uid: String,
    pub call_id: String,
    pub caller: String,
    pub called: String,
    pub caller_addr: SocketAddr,
    pub callee_addr: SocketAddr,
    /// The INVITE's time, µs since the epoch.
    pub start_us: i64,
    pub sensor: String,
    /// The INVITE's User-Agent, when it had one.
    pub user_agent: Option<String>,
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
            Event::CallStart(s) => s.start_us,
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
