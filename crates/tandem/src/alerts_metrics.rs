//! `tandem_alerts_*` and `tandem_alert_notifications_*` on `/metrics`: what the rules decided
//! and what the actions did, read at each scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

pub struct AlertMetrics {
    pub engine: Arc<Mutex<alerts::Engine>>,
    /// Alerts the dispatcher's queue could not take.
    pub dropped: Arc<AtomicU64>,
    pub notifier: Option<Arc<Mutex<alert_actions::Notifier>>>,
}

impl std::fmt::Debug for AlertMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertMetrics").finish_non_exhaustive()
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

impl Collector for AlertMetrics {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let s = self
            .engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stats();
        counter(
            &mut e,
            "tandem_alerts_events",
            "Events the alert rules were shown (call starts and ends, registrations, samples)",
            s.events,
        )?;
        counter(
            &mut e,
            "tandem_alerts_duplicate_events",
            "Events that repeated a call already counted (another sensor's copy)",
            s.duplicates,
        )?;
        let keys = ConstGauge::new(i64::try_from(s.keys).unwrap_or(i64::MAX));
        keys.encode(e.encode_descriptor(
            "tandem_alerts_keys",
            "Group keys tracked by all rules",
            None,
            keys.metric_type(),
        )?)?;
        counter(
            &mut e,
            "tandem_alerts_keys_evicted",
            "Keys evicted at a rule's keys_per_rule_max",
            s.keys_evicted,
        )?;
        counter(
            &mut e,
            "tandem_alerts_fired",
            "Alerts that started firing",
            s.fired,
        )?;
        counter(
            &mut e,
            "tandem_alerts_repeated",
            "Repeats of firing alerts after repeat_s",
            s.repeated,
        )?;
        counter(
            &mut e,
            "tandem_alerts_resolved",
            "Alerts that resolved",
            s.resolved,
        )?;
        counter(
            &mut e,
            "tandem_alerts_queue_dropped",
            "Alerts dropped because the dispatcher's queue was full",
            self.dropped.load(Ordering::Relaxed),
        )?;
        let Some(n) = &self.notifier else {
            return Ok(());
        };
        let st = n.lock().unwrap_or_else(|p| p.into_inner()).stats();
        type Field = fn(&alert_actions::ActionStats) -> u64;
        let families: [(&str, &str, Field); 5] = [
            (
                "tandem_alert_notifications_sent",
                "Alerts an action delivered",
                |a| a.sent,
            ),
            (
                "tandem_alert_notifications_failed_attempts",
                "Delivery attempts that failed (each retry counts)",
                |a| a.failed_attempts,
            ),
            (
                "tandem_alert_notifications_given_up",
                "Alerts an action abandoned after its retries, or that its peer refused",
                |a| a.given_up,
            ),
            (
                "tandem_alert_notifications_dropped",
                "Alerts an action never tried (a full queue)",
                |a| a.dropped,
            ),
            (
                "tandem_alert_notifications_silenced",
                "Alerts skipped because an Alertmanager silence was active",
                |a| a.silenced,
            ),
        ];
        for (name, help, field) in families {
            let mut family =
                e.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
            for (action, a) in &st.actions {
                ConstCounter::new(field(a))
                    .encode(family.encode_family(&[("action", action.as_str())])?)?;
            }
        }
        counter(
            &mut e,
            "tandem_alert_notifications_unknown_action",
            "Alerts naming an action no [alerts.action] table defines",
            st.unknown_action,
        )
    }
}
