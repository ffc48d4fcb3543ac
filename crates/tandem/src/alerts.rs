//! `[alerts]` for the commands that run rules: reading a rules file (`--rules`, tandem.toml)
//! into a validated rule set, and the engine's lookups.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

/// Reads and validates the `[alerts]` of `path`; every problem is listed, each naming its
/// rule and key.
pub fn load_rules(path: &Path) -> anyhow::Result<(alerts::AlertsConfig, alerts::RuleSet)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the alert rules in {}", path.display()))?;
    let cfg = alerts::RulesFile::parse(path, &text)?;
    let set = rule_set(&cfg).with_context(|| format!("the alert rules in {}", path.display()))?;
    Ok((cfg, set))
}

/// Validates `cfg`, all its problems in one error.
pub fn rule_set(cfg: &alerts::AlertsConfig) -> anyhow::Result<alerts::RuleSet> {
    alerts::RuleSet::new(cfg).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        anyhow::anyhow!("{} problem(s):\n{}", errors.len(), lines.join("\n"))
    })
}

/// The lookups rules use: numbers as dialled, and countries.
pub fn lookup(_cfg: &alerts::AlertsConfig) -> anyhow::Result<Arc<dyn alerts::Lookup>> {
    Ok(Arc::new(alerts::lookup::Basic))
}

/// An engine for `cfg`'s rules.
pub fn engine(
    cfg: &alerts::AlertsConfig,
    set: alerts::RuleSet,
) -> anyhow::Result<Arc<std::sync::Mutex<alerts::Engine>>> {
    Ok(Arc::new(std::sync::Mutex::new(alerts::Engine::new(
        set,
        lookup(cfg)?,
    ))))
}

/// Alerts queued between the places that decide them and the thread that delivers them.
const DISPATCH_QUEUE_MAX: usize = 10_000;

/// `serve`'s alerts: one engine for its capture, its collector and its metrics, and one thread
/// that stores and delivers what fires.
pub struct ServeAlerts {
    pub engine: Arc<std::sync::Mutex<alerts::Engine>>,
    tx: std::sync::mpsc::SyncSender<alerts::Alert>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

/// A handle that queues alerts for the dispatcher (the sensor's output, the collector's tap).
#[derive(Clone)]
pub struct AlertQueue {
    tx: std::sync::mpsc::SyncSender<alerts::Alert>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl AlertQueue {
    fn push(&self, alerts: &[alerts::Alert]) {
        for a in alerts {
            if self.tx.try_send(a.clone()).is_err() {
                let n = self
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n + 1, "alert queue full: alerts dropped");
                }
            }
        }
    }
}

impl sensor::AlertOutput for AlertQueue {
    fn alerts(&mut self, alerts: &[alerts::Alert]) {
        self.push(alerts);
    }
}

/// The collector's records through the engine once committed.
struct CollectorTap {
    engine: Arc<std::sync::Mutex<alerts::Engine>>,
    queue: AlertQueue,
}

impl collector::StoredRecords for CollectorTap {
    fn stored(&self, records: &[cdr::CdrRecord]) {
        let mut out = Vec::new();
        {
            let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            for r in records {
                if r.call.is_some() {
                    engine.observe(alerts::Event::CallEnd(r), &mut out);
                } else if r.registration.is_some() {
                    engine.observe(alerts::Event::Registration(r), &mut out);
                }
            }
        }
        self.queue.push(&out);
    }
}

impl ServeAlerts {
    /// Starts the engine and the dispatcher for `cfg`'s rules.
    pub fn start(cfg: &alerts::AlertsConfig, set: alerts::RuleSet) -> anyhow::Result<ServeAlerts> {
        let engine = engine(cfg, set)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<alerts::Alert>(DISPATCH_QUEUE_MAX);
        std::thread::Builder::new()
            .name("alerts".into())
            .spawn(move || {
                for a in rx {
                    tracing::info!(
                        rule = %a.rule,
                        key = %a.key,
                        state = a.state.as_str(),
                        severity = a.severity.as_str(),
                        "alert: {}",
                        a.summary
                    );
                }
            })?;
        Ok(ServeAlerts {
            engine,
            tx,
            dropped: Default::default(),
        })
    }

    pub fn queue(&self) -> AlertQueue {
        AlertQueue {
            tx: self.tx.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// The rules for a sensor named `sensor`.
    pub fn sensor(&self, sensor: &str) -> sensor::SensorAlerts {
        sensor::SensorAlerts {
            engine: self.engine.clone(),
            sensor: sensor.to_string(),
            output: Some(Box::new(self.queue())),
        }
    }

    /// Shows the collector's committed records to the rules.
    pub fn watch_collector(&self, handle: &collector::CollectorHandle) {
        handle.on_stored(Arc::new(CollectorTap {
            engine: self.engine.clone(),
            queue: self.queue(),
        }));
    }

    /// A closure for the metrics recorder: each tick's samples through the rules.
    pub fn sampler(&self) -> impl Fn(&[(String, f64)]) + Send + 'static {
        let (engine, queue) = (self.engine.clone(), self.queue());
        move |samples| {
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            let mut out = Vec::new();
            {
                let mut engine = engine.lock().unwrap_or_else(|p| p.into_inner());
                for (series, value) in samples {
                    if let Some(s) = alerts::Sample::from_series(series, *value, now_us) {
                        engine.observe(alerts::Event::Sample(&s), &mut out);
                    }
                }
                engine.advance(now_us, &mut out);
            }
            queue.push(&out);
        }
    }
}
