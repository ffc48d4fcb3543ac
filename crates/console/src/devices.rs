//! The Devices page and `GET /api/devices`: every user seen registering, by the monitor (the
//! REGISTER chains in the CDR database, `cdr::devices`) and by Tandem's own registrar.
//!
//! The console does not know the registrar: `serve` hands it a [`RegistrarFeed`], a function
//! returning the registrar's devices as the plain [`RegistrarDevice`] rows defined here (as it
//! hands the dashboard the collector's sensors). Without a registrar there is no feed and only
//! the monitor's rows are shown; without a CDR database, only the registrar's.

use std::sync::Arc;

use cdr::devices::{DeviceRow, DeviceState};

/// One device as the registrar knows it: a user at a source address.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegistrarDevice {
    pub user: String,
    pub domain: String,
    /// The source IP address.
    pub address: String,
    /// Where its last REGISTER came from: `udp:192.0.2.1:5060`.
    pub source: String,
    pub contact: String,
    pub user_agent: String,
    /// When its binding was last written, and when it lapses or lapsed, ms since the epoch.
    pub registered_ms: Option<u64>,
    pub expires_ms: Option<u64>,
    /// Whether a binding is live now.
    pub live: bool,
    /// Refused digest attempts (while the registrar's log keeps them), and the last one's
    /// time, class (`wrong-password`, `unknown-user`, `rejected`) and reason.
    pub failures: u64,
    pub last_failure_ms: Option<u64>,
    pub last_failure: String,
    pub last_failure_reason: String,
}

/// Reads the registrar's devices now. Called on a blocking thread (it walks the registrar's
/// bindings in memory).
pub type RegistrarFeed = Arc<dyn Fn() -> Vec<RegistrarDevice> + Send + Sync>;

fn us(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX / 1000) * 1000
}

impl RegistrarDevice {
    /// The device's row: failing when its last refused attempt came after its binding was
    /// written (or it has none), registered while a binding is live, else expired.
    pub fn row(&self) -> DeviceRow {
        let failed_last = self
            .last_failure_ms
            .is_some_and(|f| self.registered_ms.is_none_or(|r| f > r));
        let state = if failed_last {
            DeviceState::Failing
        } else if self.live {
            DeviceState::Registered
        } else {
            DeviceState::Expired
        };
        let last_seen = self.registered_ms.max(self.last_failure_ms).unwrap_or(0);
        DeviceRow {
            user: self.user.clone(),
            domain: self.domain.clone(),
            address: self.address.clone(),
            seen_by: "registrar".into(),
            state: state.as_str().into(),
            contact: self.contact.clone(),
            user_agent: self.user_agent.clone(),
            source: self.source.clone(),
            last_seen_us: us(last_seen),
            registered_us: self.registered_ms.map(us),
            expires_us: self.expires_ms.map(us),
            failure: self.last_failure.clone(),
            failure_reason: self.last_failure_reason.clone(),
            failure_us: self.last_failure_ms.map(us),
            failures: self.failures,
            address_failures: 0,
            sensor: String::new(),
        }
    }
}

/// The rows of the registrar's devices (the filters apply later, with the monitor's).
pub fn registrar_rows(feed: &RegistrarFeed) -> Vec<DeviceRow> {
    feed().iter().map(RegistrarDevice::row).collect()
}

/// `2026-11-28 06:10:05` (UTC) for a page without JavaScript; `-` for none.
pub fn utc_text(us: Option<i64>) -> String {
    match us {
        Some(us) => cdr::query::time_text(us)
            .replace('T', " ")
            .trim_end_matches('Z')
            .split('.')
            .next()
            .unwrap_or("")
            .to_string(),
        None => "-".into(),
    }
}

/// How far `us` lies from `now_us`, as a person says it: `in 9 min`, `12 min ago`.
pub fn relative(now_us: i64, us: i64) -> String {
    if us >= now_us {
        let s = (us - now_us) / 1_000_000;
        match s {
            0..60 => format!("in {s} s"),
            60..3600 => format!("in {} min", s / 60),
            3600..86400 => format!("in {} h", s / 3600),
            _ => format!("in {} d", s / 86400),
        }
    } else {
        crate::sensors::ago(now_us, us)
    }
}

/// The answer of `GET /api/devices` when nothing configured can have devices.
pub fn nothing_to_show() -> &'static str {
    "no device source: serve has neither a CDR database ([capture] cdr_sqlite or cdr_postgres, \
     which keeps the REGISTER chains a capture sees) nor its registrar ([registrar] enabled)"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registrar_device_is_failing_when_refused_after_its_binding() {
        let d = RegistrarDevice {
            user: "1001".into(),
            registered_ms: Some(1_000),
            expires_ms: Some(61_000),
            live: true,
            ..RegistrarDevice::default()
        };
        assert_eq!(d.row().state, "registered");
        let refused = RegistrarDevice {
            failures: 3,
            last_failure_ms: Some(2_000),
            last_failure: "wrong-password".into(),
            ..d.clone()
        };
        let r = refused.row();
        assert_eq!(
            (r.state.as_str(), r.failures, r.last_seen_us),
            ("failing", 3, 2_000_000)
        );
        let lapsed = RegistrarDevice { live: false, ..d };
        assert_eq!(lapsed.row().state, "expired");
        assert_eq!(utc_text(Some(1_800_000_000_500_000)), "2027-01-15 08:00:00");
        assert_eq!(relative(10_000_000, 70_000_000), "in 1 min");
    }
}
