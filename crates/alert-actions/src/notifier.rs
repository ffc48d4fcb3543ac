//! The [`Notifier`]: a thread of its own (a single-threaded tokio runtime) that takes alerts
//! from a bounded queue and delivers each to the actions it names.
//!
//! ```text
//! submit ──try_send──▶ queue (queue_max) ──▶ dispatcher ──▶ one queue per action ──▶ worker
//!   full: dropped         Alertmanager silences ─┘ (silenced: skipped)   in_flight_per_action_max
//!                                                         deliveries, one at a time per rule+key
//! ```
//!
//! A worker keeps the alerts of one rule and key in order (a `resolved` never overtakes the
//! `firing` still being retried) while other keys go on beside it.
//!
//! Alertmanager ends an alert posted without `endsAt` after its `resolve_timeout` (5 minutes
//! by default) unless it is posted again, as Prometheus does every minute; so the firing
//! alerts of each Alertmanager action are posted again every
//! [`NotifierOptions::alertmanager_resend_ms`] until they resolve.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alerts::config::ACTION_BACKOFF_MS_MAX;
use alerts::{Alert, AlertState};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;

use crate::alertmanager::{self, SilenceCache};
use crate::{Action, ActionKind, Actions, DeliveryError};

/// Default of [`NotifierOptions::queue_max`].
pub const QUEUE_MAX_DEFAULT: usize = 10_000;
/// Default of [`NotifierOptions::in_flight_per_action_max`].
pub const IN_FLIGHT_PER_ACTION_MAX_DEFAULT: usize = 16;
/// Default of [`NotifierOptions::silences_cache_ms`].
pub const SILENCES_CACHE_MS_DEFAULT: u64 = 10_000;
/// Default of [`NotifierOptions::alertmanager_resend_ms`]: Prometheus' own resend delay.
pub const ALERTMANAGER_RESEND_MS_DEFAULT: u64 = 60_000;
/// Unknown action names remembered (each is logged once).
const UNKNOWN_NAMES_LOGGED_MAX: usize = 1_000;

#[derive(Debug, Clone)]
pub struct NotifierOptions {
    /// Alerts waiting to be dispatched; and, per action, alerts waiting for delivery. Past it
    /// an alert is dropped and counted.
    pub queue_max: usize,
    /// Deliveries of one action under way at once (each with its retries).
    pub in_flight_per_action_max: usize,
    /// How long one read of an Alertmanager's silences is reused.
    pub silences_cache_ms: u64,
    /// How often the alerts still firing are posted again to each Alertmanager action (at
    /// most `queue_max` of them per action); 0 never.
    pub alertmanager_resend_ms: u64,
}

impl Default for NotifierOptions {
    fn default() -> Self {
        NotifierOptions {
            queue_max: QUEUE_MAX_DEFAULT,
            in_flight_per_action_max: IN_FLIGHT_PER_ACTION_MAX_DEFAULT,
            silences_cache_ms: SILENCES_CACHE_MS_DEFAULT,
            alertmanager_resend_ms: ALERTMANAGER_RESEND_MS_DEFAULT,
        }
    }
}

/// One action's counters since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionStats {
    /// Alerts delivered.
    pub sent: u64,
    /// Attempts that failed (each retry counts).
    pub failed_attempts: u64,
    /// Alerts abandoned: retries spent, or refused by the peer (a 4xx, a permanent SMTP error).
    pub given_up: u64,
    /// Alerts never tried: a full queue, or still waiting when [`Notifier::close`]'s deadline
    /// passed.
    pub dropped: u64,
    /// Alerts skipped because an Alertmanager silence of the same alert was active.
    pub silenced: u64,
    /// Firing alerts posted again to an Alertmanager (not retried: the next round is).
    pub resent: u64,
    /// Alerts accepted and not yet sent, given up, dropped or silenced (a gauge).
    pub queued: u64,
}

/// Everything [`Notifier::stats`] reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifierStats {
    /// Alerts [`Notifier::submit`] accepted.
    pub submitted: u64,
    /// Alerts [`Notifier::submit`] refused because the queue was full (or closed).
    pub dropped: u64,
    /// Action names alerts carried that no `[alerts.action.NAME]` defines.
    pub unknown_action: u64,
    /// Per action, by name.
    pub actions: BTreeMap<String, ActionStats>,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    failed_attempts: AtomicU64,
    given_up: AtomicU64,
    dropped: AtomicU64,
    silenced: AtomicU64,
    resent: AtomicU64,
    queued: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The alert left the queue: delivered, given up, dropped or silenced.
    fn settle(&self, outcome: &AtomicU64) {
        Counters::add(outcome);
        self.queued.fetch_sub(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ActionStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ActionStats {
            sent: r(&self.sent),
            failed_attempts: r(&self.failed_attempts),
            given_up: r(&self.given_up),
            dropped: r(&self.dropped),
            silenced: r(&self.silenced),
            resent: r(&self.resent),
            queued: r(&self.queued),
        }
    }
}

#[derive(Default)]
struct Shared {
    submitted: AtomicU64,
    dropped: AtomicU64,
    unknown_action: AtomicU64,
    per_action: BTreeMap<String, Arc<Counters>>,
}

/// Delivers alerts off the caller's thread. Dropping it without [`Notifier::close`] stops
/// it at once.
pub struct Notifier {
    tx: Option<mpsc::Sender<Alert>>,
    shared: Arc<Shared>,
    abort: Arc<Notify>,
    done: std::sync::mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Notifier {
    /// Starts the notifier's thread. Fails only when the system refuses a thread or the
    /// runtime's event loop (out of file descriptors or memory).
    pub fn start(actions: Actions, options: NotifierOptions) -> std::io::Result<Notifier> {
        let queue_max = options.queue_max.max(1);
        let shared = Arc::new(Shared {
            per_action: actions
                .map
                .keys()
                .map(|k| (k.clone(), Arc::new(Counters::default())))
                .collect(),
            ..Shared::default()
        });
        let (tx, rx) = mpsc::channel(queue_max);
        let abort = Arc::new(Notify::new());
        let (done_tx, done) = std::sync::mpsc::channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("alert-actions")
            .build()?;
        let thread = {
            let shared = shared.clone();
            let abort = abort.clone();
            std::thread::Builder::new()
                .name("alert-actions".into())
                .spawn(move || {
                    rt.block_on(async {
                        tokio::select! {
                            _ = dispatch(actions, rx, shared, options) => {}
                            _ = abort.notified() => {}
                        }
                    });
                    // Dropping the runtime drops every delivery still under way (a script's
                    // process group is killed with it).
                    drop(rt);
                    let _ = done_tx.send(());
                })?
        };
        Ok(Notifier {
            tx: Some(tx),
            shared,
            abort,
            done,
            thread: Some(thread),
        })
    }

    /// Queues `alert` for its actions; never blocks. False when the queue was full (the
    /// alert is dropped and counted).
    pub fn submit(&self, alert: Alert) -> bool {
        let known: Vec<&Arc<Counters>> = alert
            .actions
            .iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter_map(|n| self.shared.per_action.get(n.as_str()))
            .collect();
        for c in &known {
            Counters::add(&c.queued);
        }
        let Some(tx) = &self.tx else { return false };
        match tx.try_send(alert) {
            Ok(()) => {
                Counters::add(&self.shared.submitted);
                true
            }
            Err(e) => {
                let n = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                for c in &known {
                    c.settle(&c.dropped);
                }
                if worth_logging(n) {
                    let alert = e.into_inner();
                    tracing::warn!(
                        rule = %alert.rule,
                        key = %alert.key,
                        dropped = n,
                        "the alert queue is full: alerts are dropped (raise queue_max, or check why actions are slow)"
                    );
                }
                false
            }
        }
    }

    /// The counters, read now.
    pub fn stats(&self) -> NotifierStats {
        let s = &self.shared;
        NotifierStats {
            submitted: s.submitted.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            unknown_action: s.unknown_action.load(Ordering::Relaxed),
            actions: s
                .per_action
                .iter()
                .map(|(k, c)| (k.clone(), c.snapshot()))
                .collect(),
        }
    }

    /// Stops taking alerts and delivers what is queued until `deadline`; what is left then
    /// (queued, or waiting for a retry) is dropped and counted. Returns the final counters.
    pub fn close(mut self, deadline: Instant) -> NotifierStats {
        self.tx = None;
        let left = deadline.saturating_duration_since(Instant::now());
        if self.done.recv_timeout(left).is_err() {
            self.abort.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut abandoned = 0;
        for c in self.shared.per_action.values() {
            let q = c.queued.swap(0, Ordering::Relaxed);
            c.dropped.fetch_add(q, Ordering::Relaxed);
            abandoned += q;
        }
        if abandoned > 0 {
            tracing::warn!(
                abandoned,
                "alert notifications still undelivered when the notifier stopped"
            );
        }
        self.stats()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.tx = None;
        self.abort.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Drops are logged the first time and every thousandth after, so that a flood of them
/// does not become a flood of log lines.
fn worth_logging(dropped: u64) -> bool {
    dropped == 1 || dropped.is_multiple_of(1000)
}

/// Takes alerts off the queue and hands each to its actions' queues.
async fn dispatch(
    actions: Actions,
    mut rx: mpsc::Receiver<Alert>,
    shared: Arc<Shared>,
    options: NotifierOptions,
) {
    let queue_max = options.queue_max.max(1);
    let mut queues = HashMap::new();
    let mut workers = JoinSet::new();
    let mut firing: HashMap<String, Firing> = HashMap::new();
    for (name, action) in &actions.map {
        let (tx, rx) = mpsc::channel(queue_max);
        if matches!(action.kind, ActionKind::Alertmanager(_)) && options.alertmanager_resend_ms > 0
        {
            let f = Firing::default();
            firing.insert(name.clone(), f.clone());
            tokio::spawn(resend(
                tx.downgrade(),
                f,
                Duration::from_millis(options.alertmanager_resend_ms),
                shared.per_action[name].clone(),
            ));
        }
        queues.insert(name.clone(), tx);
        workers.spawn(worker(
            action.clone(),
            rx,
            shared.per_action[name].clone(),
            options.in_flight_per_action_max.max(1),
            queue_max,
        ));
    }
    let mut silences: HashMap<String, SilenceCache> = HashMap::new();
    let mut heard = Heard {
        told: HashMap::new(),
        max: queue_max,
    };
    let mut unknown_logged = HashSet::new();
    let ttl = Duration::from_millis(options.silences_cache_ms);
    while let Some(alert) = rx.recv().await {
        let alert = Arc::new(alert);
        let names: BTreeSet<&str> = alert.actions.iter().map(String::as_str).collect();
        let silence = if consults_silences(&names, &actions) {
            let s = silenced_by(&alert, &names, &actions, &mut silences, ttl).await;
            heard.observe(&alert, s)
        } else {
            None
        };
        for name in names {
            let Some(action) = actions.get(name) else {
                Counters::add(&shared.unknown_action);
                if unknown_logged.len() < UNKNOWN_NAMES_LOGGED_MAX
                    && unknown_logged.insert(name.to_string())
                {
                    tracing::warn!(
                        action = name,
                        rule = %alert.rule,
                        "a rule names an action no [alerts.action.NAME] defines: its alerts do not go there"
                    );
                }
                continue;
            };
            let c = &shared.per_action[name];
            if let Some(id) = &silence
                && !matches!(action.kind, ActionKind::Alertmanager(_))
            {
                tracing::debug!(action = name, rule = %alert.rule, key = %alert.key, silence = %id, "silenced in Alertmanager");
                c.settle(&c.silenced);
                continue;
            }
            // In the same step as the send (this runtime has one thread), so that a resend
            // never slips between a resolved alert and its delivery.
            if let Some(f) = firing.get(name) {
                remember(f, &alert, queue_max);
            }
            let job = Job {
                alert: alert.clone(),
                resend: false,
            };
            if queues[name].try_send(job).is_err() {
                let n = c.dropped.load(Ordering::Relaxed) + 1;
                c.settle(&c.dropped);
                if worth_logging(n) {
                    tracing::warn!(
                        action = name,
                        dropped = n,
                        "the action's queue is full: alerts are dropped"
                    );
                }
            }
        }
    }
    drop(queues);
    while workers.join_next().await.is_some() {}
}

/// One delivery to make: an alert, or a firing alert posted again to an Alertmanager.
struct Job {
    alert: Arc<Alert>,
    resend: bool,
}

/// The firing alerts last posted to one Alertmanager, by rule and key.
type Firing = Arc<Mutex<HashMap<String, Arc<Alert>>>>;

fn remember(firing: &Firing, alert: &Arc<Alert>, max: usize) {
    let mut f = firing.lock().unwrap_or_else(|e| e.into_inner());
    let fp = alert.fingerprint();
    match alert.state {
        AlertState::Resolved => {
            f.remove(&fp);
        }
        AlertState::Firing if f.len() < max || f.contains_key(&fp) => {
            f.insert(fp, alert.clone());
        }
        AlertState::Firing => {}
    }
}

/// Every `every`, queues the firing alerts of one Alertmanager action again; ends with the
/// dispatcher (when the action's queue has no other sender).
async fn resend(queue: mpsc::WeakSender<Job>, firing: Firing, every: Duration, c: Arc<Counters>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(tx) = queue.upgrade() else { return };
        let list: Vec<Arc<Alert>> = firing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for alert in list {
            if tx
                .try_send(Job {
                    alert,
                    resend: true,
                })
                .is_err()
            {
                break;
            }
            Counters::add(&c.queued);
        }
    }
}

/// The Alertmanager actions among `names`.
fn managers<'a>(names: &BTreeSet<&str>, actions: &'a Actions) -> Vec<&'a Arc<Action>> {
    names
        .iter()
        .filter_map(|n| actions.get(n))
        .filter(|a| matches!(a.kind, ActionKind::Alertmanager(_)))
        .collect()
}

/// An alert whose actions are an Alertmanager and others beside it: Alertmanager's silences
/// decide whether the others run.
fn consults_silences(names: &BTreeSet<&str>, actions: &Actions) -> bool {
    let m = managers(names, actions).len();
    m > 0 && m < names.len()
}

/// Whether the rule's other actions were told of each key's firing. A key whose firings
/// were all silenced resolves quietly too, as Alertmanager sends no resolution for what it
/// never notified.
struct Heard {
    told: HashMap<String, bool>,
    max: usize,
}

impl Heard {
    /// The silence that keeps `alert` from the rule's other actions, if any.
    fn observe(&mut self, alert: &Alert, silence: Option<String>) -> Option<String> {
        let fp = alert.fingerprint();
        match alert.state {
            AlertState::Firing => {
                let told = silence.is_none();
                let room = self.told.len() < self.max;
                match self.told.get_mut(&fp) {
                    Some(t) => *t |= told,
                    // Past the bound a key is not remembered, and its resolution goes out.
                    None if room => {
                        self.told.insert(fp, told);
                    }
                    None => {}
                }
                silence
            }
            AlertState::Resolved => match self.told.remove(&fp) {
                Some(false) => Some("(every firing was silenced)".into()),
                _ => None,
            },
        }
    }
}

/// For a firing alert with an Alertmanager among its actions and other actions beside it:
/// the id of an active silence there that matches the alert's labels.
async fn silenced_by(
    alert: &Alert,
    names: &BTreeSet<&str>,
    actions: &Actions,
    caches: &mut HashMap<String, SilenceCache>,
    ttl: Duration,
) -> Option<String> {
    if alert.state != AlertState::Firing {
        return None;
    }
    let managers = managers(names, actions);
    let labels = alertmanager::labels(alert);
    for a in managers {
        let ActionKind::Alertmanager(am) = &a.kind else {
            continue;
        };
        let cache = caches
            .entry(a.name.clone())
            .or_insert_with(SilenceCache::new);
        let timeout = Duration::from_millis(a.timeout_ms);
        if let Some(s) = cache
            .get(am, &a.name, ttl, timeout)
            .await
            .iter()
            .find(|s| s.matches(&labels))
        {
            return Some(s.id.clone());
        }
    }
    None
}

/// Delivers one action's alerts: up to `in_flight_max` at once, those of one rule and key in
/// the order they came.
async fn worker(
    action: Arc<Action>,
    mut rx: mpsc::Receiver<Job>,
    c: Arc<Counters>,
    in_flight_max: usize,
    waiting_max: usize,
) {
    let mut running = JoinSet::new();
    let mut running_key: HashMap<tokio::task::Id, String> = HashMap::new();
    let mut busy: HashSet<String> = HashSet::new();
    let mut waiting: HashMap<String, VecDeque<Job>> = HashMap::new();
    let mut waiting_len = 0usize;
    let mut open = true;
    let start = |running: &mut JoinSet<()>,
                 running_key: &mut HashMap<tokio::task::Id, String>,
                 fp: String,
                 job: Job| {
        let h = running.spawn(deliver(action.clone(), job, c.clone()));
        running_key.insert(h.id(), fp);
    };
    while open || !running.is_empty() {
        tokio::select! {
            got = rx.recv(), if open && running.len() < in_flight_max => match got {
                None => open = false,
                Some(job) => {
                    let fp = job.alert.fingerprint();
                    if !busy.contains(&fp) {
                        busy.insert(fp.clone());
                        start(&mut running, &mut running_key, fp, job);
                    } else if waiting_len < waiting_max {
                        waiting.entry(fp).or_default().push_back(job);
                        waiting_len += 1;
                    } else {
                        c.settle(&c.dropped);
                        tracing::warn!(action = %action.name, rule = %job.alert.rule, key = %job.alert.key, "too many alerts of one key waiting for delivery: dropped");
                    }
                }
            },
            Some(done) = running.join_next_with_id(), if !running.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => {
                        tracing::error!(action = %action.name, error = %e, "a delivery ended abnormally");
                        e.id()
                    }
                };
                let Some(fp) = running_key.remove(&id) else { continue };
                let next = waiting.get_mut(&fp).and_then(VecDeque::pop_front);
                if waiting.get(&fp).is_some_and(VecDeque::is_empty) {
                    waiting.remove(&fp);
                }
                match next {
                    Some(job) => {
                        waiting_len -= 1;
                        start(&mut running, &mut running_key, fp, job);
                    }
                    None => {
                        busy.remove(&fp);
                    }
                }
            }
        }
    }
}

/// One alert to one action, with its retries.
async fn deliver(action: Arc<Action>, job: Job, c: Arc<Counters>) {
    let alert = job.alert;
    if job.resend {
        // Not retried, and quiet: the next round posts it again.
        match attempt(&action, &alert).await {
            Ok(()) => c.settle(&c.resent),
            Err(e) => {
                tracing::debug!(action = %action.name, rule = %alert.rule, key = %alert.key, error = %e, "posting a firing alert again failed");
                c.settle(&c.failed_attempts);
            }
        }
        return;
    }
    let mut backoff_ms = action.backoff_ms;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let error = match attempt(&action, &alert).await {
            Ok(()) => {
                tracing::debug!(action = %action.name, rule = %alert.rule, key = %alert.key, state = alert.state.as_str(), attempts, "alert delivered");
                c.settle(&c.sent);
                return;
            }
            Err(e) => e,
        };
        Counters::add(&c.failed_attempts);
        match error {
            DeliveryError::Refused(e) => {
                tracing::error!(action = %action.name, kind = action.kind.type_name(), rule = %alert.rule, key = %alert.key, error = %e, "alert refused, not retried: a configuration problem");
                c.settle(&c.given_up);
                return;
            }
            DeliveryError::Transient(e) if attempts > action.retries => {
                tracing::error!(action = %action.name, kind = action.kind.type_name(), rule = %alert.rule, key = %alert.key, attempts, error = %e, "alert not delivered: giving up");
                c.settle(&c.given_up);
                return;
            }
            DeliveryError::Transient(e) => {
                tracing::warn!(action = %action.name, kind = action.kind.type_name(), rule = %alert.rule, key = %alert.key, attempts, retry_in_ms = backoff_ms, error = %e, "alert delivery failed: will retry");
            }
        }
        tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
        backoff_ms = backoff_ms.saturating_mul(2).min(ACTION_BACKOFF_MS_MAX);
    }
}

/// One attempt, within the action's `timeout_ms` (a script keeps its own clock, so that it
/// can say what it printed before it was killed).
async fn attempt(action: &Action, alert: &Alert) -> Result<(), DeliveryError> {
    let timeout = Duration::from_millis(action.timeout_ms);
    let within = |r: Result<Result<(), DeliveryError>, _>| {
        r.unwrap_or_else(|_| {
            Err(DeliveryError::Transient(format!(
                "no answer within {} ms",
                action.timeout_ms
            )))
        })
    };
    match &action.kind {
        ActionKind::Script(s) => s.run(alert, action.timeout_ms).await,
        ActionKind::Webhook(w) => within(tokio::time::timeout(timeout, w.send(alert)).await),
        ActionKind::Email(e) => within(tokio::time::timeout(timeout, e.send(alert)).await),
        ActionKind::Alertmanager(a) => within(tokio::time::timeout(timeout, a.send(alert)).await),
    }
}
