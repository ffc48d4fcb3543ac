//! [`Engine`]: every rule's keys and windows, fed one event at a time.
//!
//! For each event the engine finds the rules decided at that moment (a call's INVITE, its end,
//! a REGISTER chain, a metric sample), checks the rule's scope, takes the group key, counts
//! the event in that key's window and judges the key. Keys that fire are listed per rule, so
//! that moving the clock on ([`Engine::advance`]) visits only them (to resolve or repeat) and
//! the oldest idle keys (to forget).
//!
//! A call counts once whichever way it comes: the engine keeps the Call-IDs (with their
//! start) of the starts and ends it took lately, so that the same call reported by two
//! sensors, or an end whose start was already seen, is not counted again; an end whose start
//! was never seen (the collector, a dry run) first goes through the start rules.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use cdr::{CdrCall, CdrRecord, CdrRegistration};

use crate::event::{Event, Sample};
use crate::keys::KeyTable;
use crate::lookup::Lookup;
use crate::rule::{GroupBy, Kind, Moment, Rule, RuleSet, Threshold};
use crate::window::{Counts, Window};
use crate::{Alert, AlertState, Figures};

/// How often (in the events' time) the engine visits firing keys by itself.
const TICK_US: i64 = 1_000_000;
/// How often it forgets idle keys.
const FORGET_EVERY_US: i64 = 10_000_000;
/// Values remembered per key by the rules that compare a user with its past (countries,
/// prefixes, User-Agents).
const SEEN_PER_KEY_MAX: usize = 8;
/// Calls tracked per key by `fraud.concurrent`; an older open one is dropped first.
const OPEN_CALLS_PER_KEY_MAX: usize = 1_024;
/// A call open longer than this without an end is forgotten by `fraud.concurrent`.
const OPEN_CALL_MAX_US: i64 = 12 * 3_600_000_000;
/// Samples kept per series for a counter's increase over the window.
const SAMPLES_PER_SERIES_MAX: usize = 64;
/// Idle keys forgotten per visit of the clock, at most (the rest wait for the next).
const FORGET_PER_TICK_MAX: usize = 4_096;
/// Calls remembered as started or ended, per generation (two generations are kept).
const RECENT_CALLS_PER_GENERATION: usize = 1_000_000;
/// A generation of remembered calls is turned over at least this often.
const RECENT_GENERATION_US: i64 = 2 * 3_600_000_000;

/// What the engine has done, for the status line and /metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub events: u64,
    /// Events that repeated a call already counted (another sensor's copy).
    pub duplicates: u64,
    pub keys: u64,
    pub keys_evicted: u64,
    pub fired: u64,
    pub resolved: u64,
    pub repeated: u64,
}

/// A firing alert's life so far.
#[derive(Debug, Clone)]
struct Firing {
    since_us: i64,
    notified_us: i64,
}

/// What some kinds remember of a key beyond its window.
#[derive(Debug, Clone, Default)]
pub(crate) enum Memo {
    #[default]
    None,
    /// Values seen (newest last): countries, prefixes, User-Agents.
    Seen(Vec<Box<str>>),
    /// Calls of the key: (call hash, start, end once known).
    Calls(Vec<(u64, i64, Option<i64>)>),
    /// Samples of the series a sample rule reads for one key, each by its name (the metric,
    /// or the label value that tells the series apart): (time, value), oldest first.
    Series(Vec<(Box<str>, Vec<TimedValue>)>),
}

/// A sample's time (µs) and value.
pub(crate) type TimedValue = (i64, f64);

#[derive(Debug, Clone, Default)]
struct KeyState {
    window: Window,
    /// Uids behind the key's incidents, newest last.
    calls: Vec<Box<str>>,
    last_true_us: Option<i64>,
    /// The newest incident's own time (window-counted kinds).
    last_match_us: Option<i64>,
    /// The measured value of gauge-like kinds at their last judgement.
    last_figures: Option<Figures>,
    firing: Option<Firing>,
    memo: Memo,
}

struct RuleState {
    rule: Arc<Rule>,
    keys: KeyTable<KeyState>,
    /// Slots of keys that fire.
    firing: HashSet<u32>,
}

/// The engine's call hashes are already keyed SipHash values: the sets use them as they are.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type CallSet = HashSet<u64, std::hash::BuildHasherDefault<Prehashed>>;

/// Call-IDs (with their start) seen lately, in two generations.
#[derive(Default)]
struct RecentCalls {
    current: CallSet,
    previous: CallSet,
    since_us: i64,
}

impl RecentCalls {
    /// True when `h` was there; adds it otherwise.
    fn check_insert(&mut self, h: u64, now_us: i64) -> bool {
        if self.current.contains(&h) || self.previous.contains(&h) {
            return true;
        }
        if self.current.len() >= RECENT_CALLS_PER_GENERATION
            || now_us - self.since_us > RECENT_GENERATION_US
        {
            self.previous = std::mem::take(&mut self.current);
            self.since_us = now_us;
        }
        self.current.insert(h);
        false
    }
}

/// The rules' state, fed events in (roughly) time order.
pub struct Engine {
    set: RuleSet,
    rules: Vec<RuleState>,
    lookup: Arc<dyn Lookup>,
    now_us: i64,
    next_tick_us: i64,
    next_forget_us: i64,
    starts: RecentCalls,
    ends: RecentCalls,
    hasher: std::collections::hash_map::RandomState,
    stats: EngineStats,
}

/// The facts of a call that its start rules need, shared by an INVITE and an end whose start
/// was not seen.
struct StartFacts<'a> {
    uid: &'a str,
    call: std::borrow::Cow<'a, CdrCall>,
    user_agent: Option<&'a str>,
}

impl Engine {
    pub fn new(set: RuleSet, lookup: Arc<dyn Lookup>) -> Engine {
        let rules = set.rules.iter().map(|r| Self::state_for(r, &set)).collect();
        Engine {
            set,
            rules,
            lookup,
            now_us: i64::MIN,
            next_tick_us: i64::MIN,
            next_forget_us: i64::MIN,
            starts: RecentCalls::default(),
            ends: RecentCalls::default(),
            hasher: Default::default(),
            stats: EngineStats::default(),
        }
    }

    fn state_for(r: &Rule, set: &RuleSet) -> RuleState {
        RuleState {
            rule: Arc::new(r.clone()),
            keys: KeyTable::new(set.keys_per_rule_max),
            firing: HashSet::new(),
        }
    }

    pub fn rules(&self) -> &RuleSet {
        &self.set
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats;
        s.keys = self.rules.iter().map(|r| r.keys.len() as u64).sum();
        s.keys_evicted = self.rules.iter().map(|r| r.keys.evicted).sum();
        s
    }

    /// The time the engine stands at (the newest event's or `advance`'s).
    pub fn now_us(&self) -> i64 {
        self.now_us
    }

    /// Swaps the rules: a rule unchanged (same name, same settings) keeps its keys and firing
    /// alerts; a rule removed or changed resolves what it had firing, into `out`.
    pub fn replace_rules(&mut self, set: RuleSet, out: &mut Vec<Alert>) {
        let mut old: HashMap<String, RuleState> = self
            .rules
            .drain(..)
            .map(|r| (r.rule.name.clone(), r))
            .collect();
        let same_shared = set.ip_groups == self.set.ip_groups
            && set.premium_prefixes == self.set.premium_prefixes
            && set.keys_per_rule_max == self.set.keys_per_rule_max
            && set.calls_per_alert_max == self.set.calls_per_alert_max;
        let mut rules = Vec::with_capacity(set.rules.len());
        for r in &set.rules {
            match old.remove(&r.name) {
                Some(st) if same_shared && *st.rule == *r => rules.push(st),
                Some(mut st) => {
                    Self::resolve_all(&mut st, self.now_us, &mut self.stats, out);
                    rules.push(Self::state_for(r, &set));
                }
                None => rules.push(Self::state_for(r, &set)),
            }
        }
        for (_, mut st) in old {
            Self::resolve_all(&mut st, self.now_us, &mut self.stats, out);
        }
        self.rules = rules;
        self.set = set;
    }

    fn resolve_all(st: &mut RuleState, now_us: i64, stats: &mut EngineStats, out: &mut Vec<Alert>) {
        for i in std::mem::take(&mut st.firing) {
            if let Some((key, ks)) = st.keys.get(i).map(|(k, v)| (k.to_string(), v.clone())) {
                out.push(Self::alert(
                    &st.rule,
                    &key,
                    &ks,
                    AlertState::Resolved,
                    now_us,
                    false,
                ));
                stats.resolved += 1;
            }
        }
    }

    /// Shows the engine one event; alerts it fires (or resolves, as its clock moves) are
    /// appended to `out`.
    pub fn observe(&mut self, ev: Event<'_>, out: &mut Vec<Alert>) {
        self.stats.events += 1;
        let at = ev.at_us();
        self.now_us = self.now_us.max(at);
        match ev {
            Event::CallStart(s) => {
                let h = self.call_hash(&s.call.call_id, s.call.start_us);
                if self.starts.check_insert(h, self.now_us) {
                    self.stats.duplicates += 1;
                } else {
                    let facts = StartFacts {
                        uid: &s.uid,
                        call: std::borrow::Cow::Borrowed(&s.call),
                        user_agent: s.user_agent.as_deref(),
                    };
                    self.on_start(&facts, h, out);
                }
            }
            Event::CallEnd(r) => {
                if let Some(c) = &r.call {
                    let h = self.call_hash(&c.call_id, c.start_us);
                    if self.ends.check_insert(h, self.now_us) {
                        self.stats.duplicates += 1;
                    } else {
                        if !self.starts.check_insert(h, self.now_us) {
                            let facts = StartFacts {
                                uid: &r.uid,
                                call: std::borrow::Cow::Borrowed(c),
                                user_agent: None,
                            };
                            self.on_start(&facts, h, out);
                        }
                        self.on_end(r, c, h, out);
                    }
                }
            }
            Event::Registration(r) => {
                if let Some(g) = &r.registration {
                    let h = self.call_hash(&g.call_id, g.first_us);
                    if self.ends.check_insert(h, self.now_us) {
                        self.stats.duplicates += 1;
                    } else {
                        self.on_registration(r, g, out);
                    }
                }
            }
            Event::Sample(s) => self.on_sample(s, out),
        }
        if self.now_us >= self.next_tick_us {
            self.tick(out);
        }
    }

    /// Moves the clock to `now_us` (never back) and visits the firing keys: each resolves once
    /// its condition has been false for a whole window, or repeats after its rule's
    /// `repeat_s`; idle keys are forgotten.
    pub fn advance(&mut self, now_us: i64, out: &mut Vec<Alert>) {
        self.now_us = self.now_us.max(now_us);
        self.tick(out);
    }

    fn call_hash(&self, call_id: &str, start_us: i64) -> u64 {
        let mut h = self.hasher.build_hasher();
        call_id.hash(&mut h);
        start_us.hash(&mut h);
        h.finish()
    }

    fn on_start(&mut self, f: &StartFacts<'_>, h: u64, out: &mut Vec<Alert>) {
        let now = self.now_us;
        let lookup = self.lookup.clone();
        let e164 = lookup.normalize_number(&f.call.called);
        let mut keys = KeyCache::new(e164.clone());
        for st in &mut self.rules {
            if st.rule.kind.moment() != Moment::CallStart || !st.rule.scope.matches_start(&f.call) {
                continue;
            }
            let Some(key) = keys.get(&st.rule.group_by, &f.call, &self.set, lookup.as_ref()) else {
                continue;
            };
            let rule = st.rule.clone();
            let matched = match &rule.kind {
                Kind::Destination {
                    prefixes,
                    countries,
                    premium,
                } => e164.as_deref().is_some_and(|n| {
                    prefixes.iter().any(|p| n.starts_with(p.as_str()))
                        || (!countries.is_empty()
                            && lookup
                                .number_country(n)
                                .is_some_and(|c| countries.contains(&c)))
                        || (*premium && lookup.is_premium(n, &self.set.premium_prefixes))
                }),
                Kind::Calls => true,
                Kind::Hours(hours) => !hours.allows(f.call.start_us),
                Kind::CountryChange => {
                    // An address without a country (private, unknown) says nothing of a change.
                    let Some(country) =
                        ip_of(&f.call.caller_addr).and_then(|ip| lookup.ip_country(ip))
                    else {
                        continue;
                    };
                    let i = touch(st, key, &mut self.stats, now, out);
                    let ks = st.keys.get_mut(i).expect("touched");
                    changed(&mut ks.memo, &country, 1)
                }
                Kind::Concurrent { max } => {
                    let i = touch(st, key, &mut self.stats, now, out);
                    let ks = st.keys.get_mut(i).expect("touched");
                    let up = open_call(&mut ks.memo, h, f.call.start_us, now);
                    let fig = Figures {
                        value: up as f64,
                        threshold: *max as f64,
                        unit: "calls up".into(),
                        matched: up,
                        total: up,
                        window_s: (rule.window_us / 1_000_000) as u64,
                    };
                    let fires = up > *max;
                    note_uid(ks, fires, f.uid, self.set.calls_per_alert_max);
                    judge(st, i, fires, Some(fig), now, &mut self.stats, out);
                    continue;
                }
                _ => false,
            };
            let _ = f.user_agent;
            count(
                st,
                key,
                matched,
                f.uid,
                f.call.start_us,
                &self.set,
                &mut self.stats,
                now,
                out,
            );
        }
    }

    fn on_end(&mut self, r: &CdrRecord, c: &CdrCall, h: u64, out: &mut Vec<Alert>) {
        let now = self.now_us;
        let lookup = self.lookup.clone();
        let mut keys = KeyCache::default();
        let at = c.end_us.unwrap_or(c.start_us);
        for st in &mut self.rules {
            let rule = st.rule.clone();
            if let Kind::Concurrent { .. } = rule.kind {
                // The call is no longer up: close it wherever its start put it.
                if rule.scope.matches_start(c)
                    && let Some(key) = keys.get(&rule.group_by, c, &self.set, lookup.as_ref())
                    && let Some(i) = st.keys.find(key)
                    && let Some(ks) = st.keys.get_mut(i)
                {
                    close_call(&mut ks.memo, h, at);
                }
                continue;
            }
            if rule.kind.moment() != Moment::CallEnd || !rule.scope.matches(r) {
                continue;
            }
            let Some(key) = keys.get(&rule.group_by, c, &self.set, lookup.as_ref()) else {
                continue;
            };
            let matched = end_matches(&rule.kind, r, c);
            count(
                st,
                key,
                matched,
                &r.uid,
                at,
                &self.set,
                &mut self.stats,
                now,
                out,
            );
        }
    }

    fn on_registration(&mut self, r: &CdrRecord, g: &CdrRegistration, out: &mut Vec<Alert>) {
        let now = self.now_us;
        let lookup = self.lookup.clone();
        let src_ip = ip_of(&g.src);
        let registered = g.result == "registered";
        for st in &mut self.rules {
            let rule = st.rule.clone();
            if rule.kind.moment() != Moment::Registration
                || !scope_allows_addrs(&rule, &g.src, &g.dst, &g.sensor)
            {
                continue;
            }
            let key = match &rule.group_by {
                GroupBy::None => String::new(),
                GroupBy::User | GroupBy::Caller => g.user.clone(),
                GroupBy::SourceIp => match src_ip {
                    Some(ip) => ip.to_string(),
                    None => continue,
                },
                GroupBy::DestinationIp => match ip_of(&g.dst) {
                    Some(ip) => ip.to_string(),
                    None => continue,
                },
                GroupBy::Sensor => sensor_name(&g.sensor).to_string(),
                GroupBy::IpGroup => match self.set.ip_groups.group_of(&g.src) {
                    Some(n) => n.to_string(),
                    None => continue,
                },
                GroupBy::CalledPrefix(_) => continue,
            };
            let matched = match &rule.kind {
                Kind::RegisterFailed => matches!(g.result.as_str(), "challenged" | "failed"),
                Kind::RegisterNewCountry
                | Kind::RegisterNewPrefix { .. }
                | Kind::UserAgentChange => {
                    if !registered {
                        continue;
                    }
                    let value = match &rule.kind {
                        Kind::RegisterNewCountry => src_ip.and_then(|ip| lookup.ip_country(ip)),
                        Kind::RegisterNewPrefix { v4, v6 } => {
                            src_ip.map(|ip| prefix_text(ip, *v4, *v6))
                        }
                        _ => (!g.user_agent.is_empty()).then(|| g.user_agent.clone()),
                    };
                    let Some(value) = value else { continue };
                    let keep = if matches!(rule.kind, Kind::UserAgentChange) {
                        1
                    } else {
                        SEEN_PER_KEY_MAX
                    };
                    let i = touch(st, &key, &mut self.stats, now, out);
                    changed(&mut st.keys.get_mut(i).expect("touched").memo, &value, keep)
                }
                _ => false,
            };
            count(
                st,
                &key,
                matched,
                &r.uid,
                g.last_us,
                &self.set,
                &mut self.stats,
                now,
                out,
            );
        }
    }

    fn on_sample(&mut self, s: &Sample, out: &mut Vec<Alert>) {
        let now = self.now_us;
        for st in &mut self.rules {
            let rule = st.rule.clone();
            let Some(reading) = crate::samples::read(&rule, s) else {
                continue;
            };
            let i = touch(st, &reading.key, &mut self.stats, now, out);
            let ks = st.keys.get_mut(i).expect("touched");
            let (fires, fig) = crate::samples::judge(
                &rule,
                &mut ks.memo,
                s,
                &reading,
                now,
                SAMPLES_PER_SERIES_MAX,
            );
            judge(st, i, fires, Some(fig), now, &mut self.stats, out);
        }
    }

    fn tick(&mut self, out: &mut Vec<Alert>) {
        let now = self.now_us;
        self.next_tick_us = now.saturating_add(TICK_US);
        let forget = now >= self.next_forget_us;
        if forget {
            self.next_forget_us = now.saturating_add(FORGET_EVERY_US);
        }
        for st in &mut self.rules {
            if st.firing.is_empty() {
                if forget {
                    forget_idle(st, now);
                }
                continue;
            }
            let rule = st.rule.clone();
            let firing: Vec<u32> = st.firing.iter().copied().collect();
            for i in firing {
                let Some(ks) = st.keys.get_mut(i) else {
                    st.firing.remove(&i);
                    continue;
                };
                if counts_window(&rule.kind) {
                    let c = ks.window.counts(rule.window_us, now);
                    if condition(&rule, c).0 {
                        ks.last_true_us = Some(now);
                    } else if let Some(m) = ks.last_match_us {
                        // Between two visits the condition held at least until the newest
                        // incident left the window.
                        let held = (m + rule.window_us).min(now);
                        ks.last_true_us = Some(ks.last_true_us.map_or(held, |t| t.max(held)));
                    }
                }
                let last_true = ks.last_true_us.unwrap_or(now);
                let Some(f) = &ks.firing else { continue };
                let resolve = now - last_true >= rule.window_us;
                if !resolve && (rule.repeat_us == 0 || now - f.notified_us < rule.repeat_us) {
                    continue;
                }
                let key = st
                    .keys
                    .get(i)
                    .map(|(k, _)| k.to_string())
                    .unwrap_or_default();
                let ks = st.keys.get_mut(i).expect("present");
                if resolve {
                    out.push(Self::alert(
                        &rule,
                        &key,
                        ks,
                        AlertState::Resolved,
                        now,
                        false,
                    ));
                    ks.firing = None;
                    ks.calls.clear();
                    st.firing.remove(&i);
                    self.stats.resolved += 1;
                } else {
                    ks.firing_figures(&rule, now);
                    if let Some(f) = ks.firing.as_mut() {
                        f.notified_us = now;
                    }
                    out.push(Self::alert(&rule, &key, ks, AlertState::Firing, now, true));
                    self.stats.repeated += 1;
                }
            }
            if forget {
                forget_idle(st, now);
            }
        }
    }

    fn alert(
        rule: &Rule,
        key: &str,
        ks: &KeyState,
        state: AlertState,
        at_us: i64,
        repeat: bool,
    ) -> Alert {
        let figures = ks.last_figures.clone().unwrap_or_default();
        let since_us = ks.firing.as_ref().map_or(at_us, |f| f.since_us);
        Alert {
            rule: rule.name.clone(),
            rule_kind: rule.kind_name.to_string(),
            severity: rule.severity,
            group_by: rule.group_by.as_str().to_string(),
            key: key.to_string(),
            state,
            at_us,
            since_us,
            repeat,
            summary: crate::summary::line(rule, key, &figures),
            figures,
            calls: ks.calls.iter().map(|u| u.to_string()).collect(),
            actions: rule.actions.clone(),
        }
    }
}

impl KeyState {
    /// Refreshes the figures of a window-counted key before it is reported.
    fn firing_figures(&mut self, rule: &Rule, now: i64) {
        if counts_window(&rule.kind) {
            let c = self.window.counts(rule.window_us, now);
            self.last_figures = Some(condition(rule, c).1);
        }
    }
}

/// Kinds judged on the counts of their window (the others on a value they compute).
fn counts_window(k: &Kind) -> bool {
    !matches!(k.moment(), Moment::Sample) && !matches!(k, Kind::Concurrent { .. })
}

/// The key's slot, made if new; an evicted key that fired resolves.
fn touch(
    st: &mut RuleState,
    key: &str,
    stats: &mut EngineStats,
    now: i64,
    out: &mut Vec<Alert>,
) -> u32 {
    let rule = st.rule.clone();
    let firing = &mut st.firing;
    let mut evicted_slot = None;
    let oldest = st.keys.oldest();
    let i = st.keys.touch(key, KeyState::default, |k, ks| {
        if ks.firing.is_some() {
            out.push(Engine::alert(
                &rule,
                k,
                &ks,
                AlertState::Resolved,
                now,
                false,
            ));
            stats.resolved += 1;
            evicted_slot = oldest;
        }
    });
    if let Some(slot) = evicted_slot {
        firing.remove(&slot);
    }
    // A slot reused after an eviction is not the evicted key's any more.
    if evicted_slot == Some(i) {
        firing.remove(&i);
    }
    i
}

/// Counts one event of a window-counted rule and judges its key.
#[allow(clippy::too_many_arguments)]
fn count(
    st: &mut RuleState,
    key: &str,
    matched: bool,
    uid: &str,
    at_us: i64,
    set: &RuleSet,
    stats: &mut EngineStats,
    now: i64,
    out: &mut Vec<Alert>,
) {
    let rule = st.rule.clone();
    let i = touch(st, key, stats, now, out);
    let ks = st.keys.get_mut(i).expect("touched");
    ks.window.add(rule.window_us, now, at_us, matched);
    if matched {
        ks.last_match_us = Some(ks.last_match_us.map_or(at_us, |t| t.max(at_us)));
    }
    note_uid(ks, matched, uid, set.calls_per_alert_max);
    let c = ks.window.counts(rule.window_us, now);
    // The figures are made only when they are reported: most events change no alert.
    if !holds(&rule, c) {
        return;
    }
    if ks.firing.is_some() {
        ks.last_true_us = Some(now);
        return;
    }
    judge(st, i, true, Some(condition(&rule, c).1), now, stats, out);
}

/// Whether a window's counts meet the rule ([`condition`] without the figures).
fn holds(rule: &Rule, c: Counts) -> bool {
    let pct = || {
        if c.total > 0 {
            100.0 * c.matched as f64 / c.total as f64
        } else {
            0.0
        }
    };
    match (&rule.kind, rule.threshold) {
        (
            Kind::Asr { pct: below } | Kind::Ner { pct: below },
            Threshold::Percent { min_calls, .. },
        ) => c.total >= min_calls && pct() < *below,
        (_, Threshold::Percent { pct: at, min_calls }) => {
            c.total >= min_calls && c.matched > 0 && pct() >= at
        }
        (_, Threshold::Count(n)) => c.matched >= n,
    }
}

/// Remembers the uid behind an incident (the newest `max`).
fn note_uid(ks: &mut KeyState, matched: bool, uid: &str, max: usize) {
    if !matched || uid.is_empty() || max == 0 {
        return;
    }
    if ks.calls.len() >= max {
        ks.calls.remove(0);
    }
    ks.calls.push(uid.into());
}

/// Records a key's judgement: it starts firing when the condition holds and it did not.
fn judge(
    st: &mut RuleState,
    i: u32,
    fires: bool,
    fig: Option<Figures>,
    now: i64,
    stats: &mut EngineStats,
    out: &mut Vec<Alert>,
) {
    let rule = st.rule.clone();
    let Some(ks) = st.keys.get_mut(i) else { return };
    if fig.is_some() && (fires || ks.firing.is_none()) {
        ks.last_figures = fig;
    }
    if !fires {
        return;
    }
    ks.last_true_us = Some(now);
    if ks.firing.is_some() {
        return;
    }
    ks.firing = Some(Firing {
        since_us: now,
        notified_us: now,
    });
    st.firing.insert(i);
    stats.fired += 1;
    let key = st
        .keys
        .get(i)
        .map(|(k, _)| k.to_string())
        .unwrap_or_default();
    let ks = st.keys.get(i).expect("present").1;
    out.push(Engine::alert(
        &rule,
        &key,
        ks,
        AlertState::Firing,
        now,
        false,
    ));
}

/// Whether a window's counts meet the rule, and the figures that say so.
fn condition(rule: &Rule, c: Counts) -> (bool, Figures) {
    let window_s = (rule.window_us / 1_000_000) as u64;
    let pct = if c.total > 0 {
        100.0 * c.matched as f64 / c.total as f64
    } else {
        0.0
    };
    let unit = if rule.kind.moment() == Moment::Registration {
        "registrations"
    } else {
        "calls"
    };
    match (&rule.kind, rule.threshold) {
        (
            Kind::Asr { pct: below } | Kind::Ner { pct: below },
            Threshold::Percent { min_calls, .. },
        ) => (
            c.total >= min_calls && pct < *below,
            Figures {
                value: pct,
                threshold: *below,
                unit: "%".into(),
                matched: c.matched,
                total: c.total,
                window_s,
            },
        ),
        (_, Threshold::Percent { pct: at, min_calls }) => (
            c.total >= min_calls && c.matched > 0 && pct >= at,
            Figures {
                value: pct,
                threshold: at,
                unit: "%".into(),
                matched: c.matched,
                total: c.total,
                window_s,
            },
        ),
        (_, Threshold::Count(n)) => (
            c.matched >= n,
            Figures {
                value: c.matched as f64,
                threshold: n as f64,
                unit: unit.into(),
                matched: c.matched,
                total: c.total,
                window_s,
            },
        ),
    }
}

/// Whether a call that ended is an incident of `kind`.
fn end_matches(kind: &Kind, r: &CdrRecord, c: &CdrCall) -> bool {
    let answered = c.answer_us.is_some();
    match kind {
        Kind::Mos { mos } => c.mos_min.is_some_and(|m| m < *mos),
        Kind::Loss { pct } => r.streams.iter().any(|s| {
            let lost = s.lost.max(0) as f64;
            let expected = s.packets as f64 + lost;
            expected > 0.0 && 100.0 * lost / expected > *pct
        }),
        Kind::Jitter { ms } => r.streams.iter().any(|s| s.max_jitter_ms > *ms),
        Kind::NoRtp => answered && r.streams.iter().all(|s| s.packets == 0),
        Kind::OneWay { gap_us } => answered && one_way(r, c, *gap_us),
        Kind::Response { codes, classes } => c.last_response.is_some_and(|x| {
            x >= 200 && (codes.contains(&x) || classes.contains(&((x / 100) as u8)))
        }),
        Kind::NoResponse => {
            !answered && c.last_response.is_none_or(|x| x < 200) && c.state != "cancelled"
        }
        Kind::Asr { .. } => answered,
        Kind::Ner { .. } => {
            answered
                || c.state == "cancelled"
                || c.last_response
                    .is_some_and(|x| matches!(x, 486 | 480 | 487 | 600 | 603))
        }
        Kind::Pdd { ms } => c
            .ringing_us
            .or(c.answer_us)
            .is_some_and(|t| (t - c.start_us) as f64 / 1000.0 > *ms),
        _ => false,
    }
}

/// An answered call where one direction carried no RTP, or (with `gap_us`) stopped that long
/// before the call's end. Directions are told apart by address: a stream from A to B is
/// answered by one from B to A.
fn one_way(r: &CdrRecord, c: &CdrCall, gap_us: Option<i64>) -> bool {
    // Each stream's addresses read once, not once per pair.
    let streams: Vec<_> = r
        .streams
        .iter()
        .filter(|s| s.packets > 0)
        .map(|s| (ip_of(&s.src), ip_of(&s.dst), s.end_us))
        .collect();
    if streams.is_empty() {
        return false; // no RTP at all: quality.no_rtp's
    }
    let reverse_missing = streams
        .iter()
        .any(|(src, dst, _)| !streams.iter().any(|(s2, d2, _)| s2 == dst && d2 == src));
    if reverse_missing {
        return true;
    }
    match (gap_us, c.end_us) {
        (Some(gap), Some(end)) => streams.iter().any(|(_, _, e)| end - e >= gap),
        _ => false,
    }
}

/// A call's group keys, each made once per event however many rules group by it.
#[derive(Default)]
struct KeyCache {
    /// The called number in E.164, once asked for.
    e164: Option<Option<String>>,
    keys: Vec<(GroupBy, Option<String>)>,
}

impl KeyCache {
    fn new(e164: Option<String>) -> KeyCache {
        KeyCache {
            e164: Some(e164),
            keys: Vec::new(),
        }
    }

    fn get(
        &mut self,
        by: &GroupBy,
        c: &CdrCall,
        set: &RuleSet,
        lookup: &dyn Lookup,
    ) -> Option<&str> {
        let i = match self.keys.iter().position(|(b, _)| b == by) {
            Some(i) => i,
            None => {
                let e164 = match by {
                    GroupBy::CalledPrefix(_) => self
                        .e164
                        .get_or_insert_with(|| lookup.normalize_number(&c.called))
                        .as_deref(),
                    _ => None,
                };
                let key = call_key(by, c, set, e164);
                self.keys.push((by.clone(), key));
                self.keys.len() - 1
            }
        };
        self.keys[i].1.as_deref()
    }
}

/// The group key of a call for `by`; `None` when the call has none (no address, no group).
fn call_key(by: &GroupBy, c: &CdrCall, set: &RuleSet, e164: Option<&str>) -> Option<String> {
    Some(match by {
        GroupBy::None => String::new(),
        GroupBy::Caller | GroupBy::User => c.caller.clone(),
        GroupBy::CalledPrefix(n) => {
            let number = e164.unwrap_or(&c.called);
            let digits = number.strip_prefix('+').unwrap_or(number);
            let cut: String = digits.chars().take(usize::from(*n)).collect();
            if e164.is_some() {
                format!("+{cut}")
            } else {
                cut
            }
        }
        GroupBy::SourceIp => ip_of(&c.caller_addr)?.to_string(),
        GroupBy::DestinationIp => ip_of(&c.callee_addr)?.to_string(),
        GroupBy::Sensor => sensor_name(&c.sensor).to_string(),
        GroupBy::IpGroup => set
            .ip_groups
            .group_of(&c.caller_addr)
            .or_else(|| set.ip_groups.group_of(&c.callee_addr))?
            .to_string(),
    })
}

/// A registration or sample rule's scope (addresses and sensor only, by validation).
fn scope_allows_addrs(rule: &Rule, src: &str, dst: &str, sensor: &str) -> bool {
    let probe = CdrCall {
        caller_addr: src.to_string(),
        callee_addr: dst.to_string(),
        sensor: sensor.to_string(),
        ..CdrCall::default()
    };
    rule.scope.from_us.is_none() && rule.scope.to_us.is_none() && rule.scope.matches_start(&probe)
}

fn sensor_name(s: &str) -> &str {
    if s.is_empty() { "local" } else { s }
}

fn ip_of(addr: &str) -> Option<IpAddr> {
    addr.parse::<std::net::SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| addr.parse::<IpAddr>())
        .ok()
}

/// `192.0.2.0/24` for an address under its prefix length.
fn prefix_text(ip: IpAddr, v4: u8, v6: u8) -> String {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a) & (u32::MAX.checked_shl(32 - u32::from(v4)).unwrap_or(0));
            format!("{}/{v4}", std::net::Ipv4Addr::from(bits))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a) & (u128::MAX.checked_shl(128 - u32::from(v6)).unwrap_or(0));
            format!("{}/{v6}", std::net::Ipv6Addr::from(bits))
        }
    }
}

/// Whether `value` is new for a key that has seen others; remembers it (the newest `keep`).
fn changed(memo: &mut Memo, value: &str, keep: usize) -> bool {
    if !matches!(memo, Memo::Seen(_)) {
        *memo = Memo::Seen(Vec::new());
    }
    let Memo::Seen(seen) = memo else {
        unreachable!()
    };
    if let Some(p) = seen.iter().position(|v| &**v == value) {
        let v = seen.remove(p);
        seen.push(v);
        return false;
    }
    let new_for_known_key = !seen.is_empty();
    if seen.len() >= keep {
        seen.remove(0);
    }
    seen.push(value.into());
    new_for_known_key
}

/// Adds a call that started; returns how many of the key's calls are up at its start.
fn open_call(memo: &mut Memo, h: u64, start_us: i64, now: i64) -> u64 {
    if !matches!(memo, Memo::Calls(_)) {
        *memo = Memo::Calls(Vec::new());
    }
    let Memo::Calls(calls) = memo else {
        unreachable!()
    };
    calls.retain(|&(_, s, e)| match e {
        Some(e) => e > start_us.min(now),
        None => now - s < OPEN_CALL_MAX_US,
    });
    if calls.len() >= OPEN_CALLS_PER_KEY_MAX {
        calls.remove(0);
    }
    calls.push((h, start_us, None));
    calls
        .iter()
        .filter(|&&(_, s, e)| s <= start_us && e.is_none_or(|e| e > start_us))
        .count() as u64
}

fn close_call(memo: &mut Memo, h: u64, end_us: i64) {
    if let Memo::Calls(calls) = memo
        && let Some(c) = calls.iter_mut().find(|c| c.0 == h)
    {
        c.2 = Some(end_us);
    }
}

/// Forgets the oldest keys that have nothing left to say: no firing alert, an empty window,
/// and nothing remembered beyond it.
fn forget_idle(st: &mut RuleState, now: i64) {
    let window_us = st.rule.window_us;
    let mut cursor = st.keys.oldest();
    for _ in 0..FORGET_PER_TICK_MAX {
        let Some(i) = cursor else { break };
        cursor = st.keys.newer(i);
        let Some(ks) = st.keys.get_mut(i) else { break };
        let idle = ks.firing.is_none()
            && matches!(ks.memo, Memo::None)
            && ks.last_true_us.is_none_or(|t| now - t >= window_us)
            && ks.window.expire(window_us, now);
        if !idle {
            // Newer keys were seen later still: stop at the first that is not idle.
            break;
        }
        st.keys.remove(i);
    }
}
