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

/// Validates `cfg`'s rules and actions, all their problems in one error.
pub fn rule_set(cfg: &alerts::AlertsConfig) -> anyhow::Result<alerts::RuleSet> {
    check(cfg).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        anyhow::anyhow!("{} problem(s):\n{}", errors.len(), lines.join("\n"))
    })
}

/// Every problem of `cfg`, each naming its rule or action and key.
pub fn check(cfg: &alerts::AlertsConfig) -> Result<alerts::RuleSet, Vec<String>> {
    let mut errors: Vec<String> = Vec::new();
    if let Err(e) = alert_actions::Actions::from_config(&cfg.action) {
        errors.extend(e.iter().map(ToString::to_string));
    }
    match alerts::RuleSet::new(cfg) {
        Ok(set) if errors.is_empty() => Ok(set),
        Ok(_) => Err(errors),
        Err(e) => {
            errors.extend(e.iter().map(ToString::to_string));
            Err(errors)
        }
    }
}

/// The notifier for `cfg`'s actions, or `None` when it has none.
pub fn notifier(cfg: &alerts::AlertsConfig) -> anyhow::Result<Option<alert_actions::Notifier>> {
    if cfg.action.is_empty() {
        return Ok(None);
    }
    let actions = alert_actions::Actions::from_config(&cfg.action).map_err(|e| {
        anyhow::anyhow!(
            "[alerts.action]: {}",
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let n = alert_actions::Notifier::start(actions, alert_actions::NotifierOptions::default())
        .context("starting the alert notifier")?;
    Ok(Some(n))
}

/// The sensor's output when a rules file names actions: each alert to the notifier.
pub struct Notify(pub Arc<std::sync::Mutex<alert_actions::Notifier>>);

impl sensor::AlertOutput for Notify {
    fn alerts(&mut self, alerts: &[alerts::Alert]) {
        let n = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for a in alerts {
            n.submit(a.clone());
        }
    }
}

/// The lookups rules use: numbers as dialled, their countries, premium ranges, and the
/// countries of addresses (the embedded table, or `geoip_mmdb`).
pub fn lookup(cfg: &alerts::AlertsConfig) -> anyhow::Result<Arc<dyn alerts::Lookup>> {
    let tables = alerts::lookup::Tables::from_config(cfg)?;
    tracing::debug!(countries = %tables.describe(), "alert lookups ready");
    Ok(Arc::new(tables))
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
    pub dropped: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        // A batch holds several sensors' records in the order they were queued: the rules take
        // them in the order they happened.
        let at = |r: &cdr::CdrRecord| {
            r.call
                .as_ref()
                .map(|c| c.end_us.unwrap_or(c.start_us))
                .or(r.registration.as_ref().map(|g| g.last_us))
                .unwrap_or(0)
        };
        let mut sorted: Vec<&cdr::CdrRecord> = records.iter().collect();
        sorted.sort_by_key(|r| at(r));
        let mut out = Vec::new();
        {
            let mut engine = self.engine.lock().unwrap_or_else(|p| p.into_inner());
            for r in sorted {
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
    /// Starts the engine and the dispatcher for `cfg`'s rules; alerts are kept in the CDR
    /// database `db` (SQLite, or PostgreSQL when `postgres` is set).
    pub fn start(
        cfg: &alerts::AlertsConfig,
        set: alerts::RuleSet,
        db: Dispatch,
    ) -> anyhow::Result<ServeAlerts> {
        let engine = engine(cfg, set)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<alerts::Alert>(DISPATCH_QUEUE_MAX);
        let thread = std::thread::Builder::new()
            .name("alerts".into())
            .spawn(move || db.run(rx))?;
        Ok(ServeAlerts {
            engine,
            tx,
            dropped: Default::default(),
            thread: Some(thread),
        })
    }

    /// Waits until every queued alert is kept and handed on, once whatever fed the queue (the
    /// sensor) has ended.
    pub fn finish(mut self) {
        let (closed, _) = std::sync::mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.tx, closed));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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

/// How long the silences read from the database are trusted.
const SILENCES_FRESH: std::time::Duration = std::time::Duration::from_secs(1);
/// The least wait before a failed database is opened again.
const REOPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Hands an alert to the configured actions (it must not wait).
pub type Deliver = Box<dyn FnMut(&alerts::Alert) + Send>;

/// Delivery through the configured actions' notifier (shared with the metrics that count it).
pub fn deliver_to(notifier: Arc<std::sync::Mutex<alert_actions::Notifier>>) -> Deliver {
    Box::new(move |a| {
        notifier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .submit(a.clone());
    })
}

/// The dispatcher: each alert stored in the CDR database, then delivered unless a silence
/// mutes it or, for a repeat, a user acknowledged it.
pub struct Dispatch {
    pub db: std::path::PathBuf,
    pub postgres: Option<String>,
    /// Who decided the alerts, in their rows.
    pub node: String,
    /// Delivery to the configured actions; `None` logs only.
    pub deliver: Option<Deliver>,
    /// Each alert in the log at `info` (serve's record); `false` for a capture that prints them.
    pub log: bool,
}

impl Dispatch {
    fn run(mut self, rx: std::sync::mpsc::Receiver<alerts::Alert>) {
        let mut store: Option<Box<dyn cdr::CdrStore>> = None;
        let mut failed_at: Option<std::time::Instant> = None;
        let mut silences: (Option<std::time::Instant>, Vec<cdr::alerts::SilenceRow>) =
            (None, Vec::new());
        for a in rx {
            if self.log {
                tracing::info!(
                    rule = %a.rule,
                    key = %a.key,
                    state = a.state.as_str(),
                    severity = a.severity.as_str(),
                    "alert: {}",
                    a.summary
                );
            }
            if store.is_none() && failed_at.is_none_or(|t| t.elapsed() >= REOPEN_WAIT) {
                match sensor::records::open_store(&self.db, self.postgres.as_deref()) {
                    Ok(s) => store = Some(s),
                    Err(e) => {
                        failed_at = Some(std::time::Instant::now());
                        tracing::warn!(error = %e, "alerts: the CDR database cannot be opened; alerts are delivered but not kept");
                    }
                }
            }
            let mut acked = false;
            if let Some(st) = store.as_mut().and_then(|s| s.alert_store()) {
                match st.record_alert(&a.to_row(&self.node)) {
                    Ok(id) => {
                        if a.repeat {
                            acked = st
                                .alert(id)
                                .ok()
                                .flatten()
                                .is_some_and(|r| r.acked_by.is_some());
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "alerts: not kept in the CDR database");
                        store = None;
                        failed_at = Some(std::time::Instant::now());
                    }
                }
                if silences.0.is_none_or(|t| t.elapsed() >= SILENCES_FRESH)
                    && let Some(st) = store.as_mut().and_then(|s| s.alert_store())
                {
                    let now_us = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros() as i64);
                    silences = (
                        Some(std::time::Instant::now()),
                        st.silences(Some(now_us)).unwrap_or_default(),
                    );
                }
            }
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            if silences.1.iter().any(|s| s.mutes(&a.rule, &a.key, now_us)) {
                tracing::info!(rule = %a.rule, key = %a.key, "alert silenced: not delivered");
                continue;
            }
            if acked {
                continue;
            }
            if let Some(d) = self.deliver.as_mut() {
                d(&a);
            }
        }
    }
}

/// Where the console keeps the rules an admin edits, in the data directory.
pub const CONSOLE_RULES_FILE: &str = "alert-rules.toml";

/// The console's side of the rules: `tandem.toml`'s (shown read-only) and the admin's, kept in
/// [`CONSOLE_RULES_FILE`] and put in effect without a restart. The admin's text holds
/// `[[alerts.rule]]` tables only: actions, address groups and tables stay in `tandem.toml`.
pub struct ConsoleRules {
    config: alerts::AlertsConfig,
    path: std::path::PathBuf,
    text: std::sync::Mutex<String>,
    engine: Arc<std::sync::Mutex<alerts::Engine>>,
    queue: AlertQueue,
}

impl ConsoleRules {
    /// The rule set of `tandem.toml` and the console's file together, and the console's text;
    /// a console file that no longer fits (a rule renamed in `tandem.toml` since) is left out
    /// with an error in the log, so that `serve` still starts.
    pub fn load(
        config: &alerts::AlertsConfig,
        data_dir: &std::path::Path,
    ) -> anyhow::Result<(alerts::RuleSet, String)> {
        let path = data_dir.join(CONSOLE_RULES_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        match combined(config, &path, &text) {
            Ok((_, set)) => Ok((set, text)),
            Err(errors) => {
                tracing::error!(
                    file = %path.display(),
                    "the console's alert rules are left out: {}",
                    errors.join("; ")
                );
                Ok((rule_set(config)?, text))
            }
        }
    }

    pub fn new(
        config: &alerts::AlertsConfig,
        data_dir: &std::path::Path,
        text: String,
        alerts: &ServeAlerts,
    ) -> ConsoleRules {
        ConsoleRules {
            config: config.clone(),
            path: data_dir.join(CONSOLE_RULES_FILE),
            text: std::sync::Mutex::new(text),
            engine: alerts.engine.clone(),
            queue: alerts.queue(),
        }
    }
}

/// `config`'s rules and `text`'s (from `path`) as one rule set.
fn combined(
    config: &alerts::AlertsConfig,
    path: &std::path::Path,
    text: &str,
) -> Result<(alerts::AlertsConfig, alerts::RuleSet), Vec<String>> {
    let console = alerts::RulesFile::parse(path, text).map_err(|e| vec![e.to_string()])?;
    let only_rules = alerts::AlertsConfig {
        rule: console.rule.clone(),
        ..alerts::AlertsConfig::default()
    };
    if console != only_rules {
        return Err(vec![
            "the console keeps [[alerts.rule]] tables only: set actions, ip_groups and the \
             other [alerts] keys in tandem.toml"
                .into(),
        ]);
    }
    let mut all = config.clone();
    all.rule.extend(console.rule);
    check(&all).map(|set| (all, set))
}

impl console::alert_rules::AlertRules for ConsoleRules {
    fn config_text(&self) -> String {
        #[derive(serde::Serialize)]
        struct Only<'a> {
            alerts: Rules<'a>,
        }
        #[derive(serde::Serialize)]
        struct Rules<'a> {
            rule: &'a [alerts::RuleConfig],
        }
        if self.config.rule.is_empty() {
            return String::new();
        }
        toml::to_string(&Only {
            alerts: Rules {
                rule: &self.config.rule,
            },
        })
        .unwrap_or_default()
    }

    fn console_text(&self) -> String {
        self.text.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn validate(&self, text: &str) -> Result<(), Vec<String>> {
        combined(&self.config, &self.path, text).map(|_| ())
    }

    fn apply(&self, text: &str) -> Result<(), Vec<String>> {
        let (_, set) = combined(&self.config, &self.path, text)?;
        // Kept first (0600, then renamed over the old file), so that what is in effect is what
        // the next start reads.
        let tmp = self.path.with_extension("toml.tmp");
        let write = || -> std::io::Result<()> {
            let _ = std::fs::remove_file(&tmp);
            let mut f = filemode::create_new(&tmp, &filemode::Access::Private)?;
            std::io::Write::write_all(&mut f, text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            vec![format!(
                "cannot keep the rules in {}: {e}",
                self.path.display()
            )]
        })?;
        let mut out = Vec::new();
        self.engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace_rules(set, &mut out);
        self.queue.push(&out);
        *self.text.lock().unwrap_or_else(|p| p.into_inner()) = text.to_string();
        tracing::info!(file = %self.path.display(), "alert rules changed in the console are in effect");
        Ok(())
    }
}
