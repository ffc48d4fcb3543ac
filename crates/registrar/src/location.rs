//! The location service: every address of record's bindings in memory, each change committed to
//! the store before it is acknowledged, and expiry on a timer wheel.
//!
//! Reads ([`Location::lookup`]) take one shard lock for a map lookup and a read lock for an
//! `Arc` clone; they never wait for the disk. Changes to one AOR run one at a time, in arrival
//! order, on the AOR's own queue ([`AorQueue`]); different AORs commit concurrently, which is
//! what lets the store's group commit put many of them behind one fsync.
//!
//! Stored as `aor/<aor>` in the `registrar` namespace, one value per AOR holding all its
//! bindings (see `binding::encode`): a REGISTER's change is one put, so it is on disk whole or
//! not at all.
//!
//! Beside the map of AORs, an index by user (`1001` → its AORs in every domain) answers a
//! lookup of a bare user, which is what a dialplan has (`${EXTEN}`), without a walk of the map.

use crate::Error;
use crate::binding::{self, Binding};
use crate::users::NAMESPACE;
use kv::{Durability, Namespace, Store};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 64;
/// One wheel slot per second; a binding further away than this goes round again.
const WHEEL_SLOTS: usize = 4096;
const FAMILY: &str = "aor";

/// One address of record: its live bindings and its queue of pending changes.
pub struct Aor {
    pub name: Arc<str>,
    bindings: RwLock<Arc<[Binding]>>,
    /// The second the wheel will look at this AOR next (0: not scheduled).
    scheduled_s: AtomicU64,
    pub(crate) queue: Mutex<AorQueue>,
}

/// Changes waiting for an AOR, and whether a task is draining them.
pub struct AorQueue {
    pub(crate) jobs: VecDeque<crate::server::Job>,
    pub(crate) draining: bool,
    /// Set when the entry left the map: a job must not be queued here any more.
    pub(crate) retired: bool,
}

impl Aor {
    /// The bindings as last committed (maybe including some that lapsed since the last sweep).
    pub fn bindings(&self) -> Arc<[Binding]> {
        self.bindings.read().clone()
    }

    /// The bindings still live at `now_ms`.
    pub fn live(&self, now_ms: u64) -> Vec<Binding> {
        self.bindings
            .read()
            .iter()
            .filter(|b| b.is_live(now_ms))
            .cloned()
            .collect()
    }
}

/// Figures for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocationStats {
    pub aors: u64,
    pub bindings: u64,
    pub wheel_entries: u64,
}

type AorMap = HashMap<Arc<str>, Arc<Aor>>;
type UserMap = HashMap<Box<str>, Vec<Arc<Aor>>>;

pub struct Location {
    shards: Box<[RwLock<AorMap>]>,
    /// The AORs of each user part, sharded by user. An entry is added with its AOR's and
    /// removed with it, under the AOR's shard lock (taken first), so the two never disagree.
    users: Box<[RwLock<UserMap>]>,
    ns: Namespace,
    wheel: Mutex<Wheel>,
    bindings: AtomicU64,
}

struct Wheel {
    slots: Vec<Vec<(Arc<str>, u64)>>,
    /// The last second swept.
    swept_s: u64,
    entries: usize,
}

/// The user part of a canonical AOR (`sip:user@host`, as `request::aor_of` builds it).
pub fn user_of(aor: &str) -> Option<&str> {
    aor.strip_prefix("sip:")?
        .rsplit_once('@')
        .map(|(user, _)| user)
}

/// The host part of a canonical AOR.
pub fn domain_of(aor: &str) -> Option<&str> {
    aor.strip_prefix("sip:")?
        .rsplit_once('@')
        .map(|(_, host)| host)
}

fn shard_of(aor: &str) -> usize {
    // FNV-1a: cheap and stable; AORs are not chosen to collide (the map inside is SipHash).
    let mut h: u32 = 0x811c_9dc5;
    for b in aor.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    h as usize % SHARDS
}

impl Location {
    /// Loads every stored AOR, dropping bindings that lapsed while Tandem was down.
    pub fn open(store: &Store, now_ms: u64) -> Result<Location, Error> {
        let ns = store.namespace(NAMESPACE)?;
        let loc = Location {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            users: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            ns,
            wheel: Mutex::new(Wheel {
                slots: vec![Vec::new(); WHEEL_SLOTS],
                swept_s: now_ms / 1000,
                entries: 0,
            }),
            bindings: AtomicU64::new(0),
        };
        let prefix = format!("/{FAMILY}/");
        let mut unreadable = 0;
        for (path, value) in loc.ns.tree(Some(FAMILY), None)? {
            let Some(name) = path.strip_prefix(&prefix) else {
                continue;
            };
            let (mut list, bad) = binding::decode(&value.to_string_lossy());
            unreadable += bad;
            list.retain(|b| b.is_live(now_ms));
            if list.is_empty() {
                continue;
            }
            let aor = loc.slot(name);
            loc.set(&aor, list);
        }
        if unreadable > 0 {
            tracing::warn!(
                unreadable,
                "stored bindings that could not be read were skipped"
            );
        }
        Ok(loc)
    }

    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// The AOR's entry, created empty when absent.
    pub fn slot(&self, name: &str) -> Arc<Aor> {
        let shard = &self.shards[shard_of(name)];
        if let Some(a) = shard.read().get(name) {
            return a.clone();
        }
        let mut map = shard.write();
        if let Some(a) = map.get(name) {
            return a.clone();
        }
        let aor = Arc::new(Aor {
            name: Arc::from(name),
            bindings: RwLock::new(Arc::from(Vec::new())),
            scheduled_s: AtomicU64::new(0),
            queue: Mutex::new(AorQueue {
                jobs: VecDeque::new(),
                draining: false,
                retired: false,
            }),
        });
        map.insert(aor.name.clone(), aor.clone());
        if let Some(user) = user_of(name) {
            self.users[shard_of(user)]
                .write()
                .entry(user.into())
                .or_default()
                .push(aor.clone());
        }
        aor
    }

    /// Every AOR of `user` (in every domain) that has live bindings at `now_ms`, with them.
    pub fn user_bindings(&self, user: &str, now_ms: u64) -> Vec<(Arc<str>, Vec<Binding>)> {
        let aors = self.users[shard_of(user)]
            .read()
            .get(user)
            .cloned()
            .unwrap_or_default();
        let mut out: Vec<(Arc<str>, Vec<Binding>)> = aors
            .into_iter()
            .map(|a| (a.name.clone(), a.live(now_ms)))
            .filter(|(_, live)| !live.is_empty())
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The live bindings of an AOR, in q order, from memory.
    pub fn lookup(&self, aor: &str, now_ms: u64) -> Vec<Binding> {
        let found = self.shards[shard_of(aor)].read().get(aor).cloned();
        found.map(|a| a.live(now_ms)).unwrap_or_default()
    }

    /// Every AOR with live bindings (for `tandem sip bindings` on a running server, metrics).
    pub fn aors(&self) -> Vec<Arc<Aor>> {
        self.shards
            .iter()
            .flat_map(|s| s.read().values().cloned().collect::<Vec<_>>())
            .collect()
    }

    pub fn stats(&self) -> LocationStats {
        LocationStats {
            aors: self.shards.iter().map(|s| s.read().len() as u64).sum(),
            bindings: self.bindings.load(Ordering::Relaxed),
            wheel_entries: self.wheel.lock().entries as u64,
        }
    }

    /// Starts the commit of `list` as the AOR's bindings (a delete when empty). The caller
    /// awaits the commit and then calls [`Location::set`]; until then memory shows the old set.
    pub fn commit(
        &self,
        aor: &Aor,
        list: &[Binding],
        durability: Durability,
    ) -> Result<kv::Commit, Error> {
        Ok(if list.is_empty() {
            self.ns.del_with(FAMILY, &aor.name, durability)?.1
        } else {
            self.ns
                .put_with(FAMILY, &aor.name, binding::encode(list), durability)?
        })
    }

    /// Makes `list` the AOR's bindings in memory and schedules its next expiry.
    pub fn set(&self, aor: &Aor, list: Vec<Binding>) {
        let earliest_s = list.iter().map(|b| b.expires_at_ms.div_ceil(1000)).min();
        let new_len = list.len() as u64;
        let old = std::mem::replace(&mut *aor.bindings.write(), Arc::from(list));
        self.bindings.fetch_add(new_len, Ordering::Relaxed);
        self.bindings.fetch_sub(old.len() as u64, Ordering::Relaxed);
        // An emptied AOR is looked at once more so that the sweep can drop its entry.
        let due_s = earliest_s.unwrap_or_else(|| self.wheel.lock().swept_s + 1);
        let scheduled = aor.scheduled_s.load(Ordering::Relaxed);
        if scheduled == 0 || due_s < scheduled {
            aor.scheduled_s.store(due_s, Ordering::Relaxed);
            self.wheel.lock().push(aor.name.clone(), due_s);
        }
    }

    /// Takes the AORs due by `now_ms` off the wheel (their entries are consumed).
    pub fn due(&self, now_ms: u64) -> Vec<Arc<Aor>> {
        let now_s = now_ms / 1000;
        let names = self.wheel.lock().advance(now_s);
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let Some(aor) = self.shards[shard_of(&name)].read().get(&name).cloned() else {
                continue;
            };
            aor.scheduled_s.store(0, Ordering::Relaxed);
            out.push(aor);
        }
        out
    }

    /// Drops the AOR's entry when it has no bindings and nothing queued (called by the sweep
    /// with the AOR's queue idle).
    pub fn forget_if_empty(&self, aor: &Arc<Aor>) {
        let mut shard = self.shards[shard_of(&aor.name)].write();
        let mut q = aor.queue.lock();
        if aor.bindings.read().is_empty() && q.jobs.is_empty() && !q.draining {
            q.retired = true;
            shard.remove(&aor.name);
            if let Some(user) = user_of(&aor.name) {
                let mut users = self.users[shard_of(user)].write();
                if let Some(list) = users.get_mut(user) {
                    list.retain(|a| !Arc::ptr_eq(a, aor));
                    if list.is_empty() {
                        users.remove(user);
                    }
                }
            }
        }
    }
}

impl Wheel {
    fn push(&mut self, name: Arc<str>, due_s: u64) {
        let due_s = due_s.max(self.swept_s + 1);
        self.slots[due_s as usize % WHEEL_SLOTS].push((name, due_s));
        self.entries += 1;
    }

    fn advance(&mut self, now_s: u64) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        // After a long pause (a suspended machine) every slot is looked at once, not per second.
        let steps = (now_s.saturating_sub(self.swept_s)).min(WHEEL_SLOTS as u64);
        for step in 1..=steps {
            let slot = &mut self.slots[(self.swept_s + step) as usize % WHEEL_SLOTS];
            let mut i = 0;
            while i < slot.len() {
                if slot[i].1 <= now_s {
                    out.push(slot.swap_remove(i).0);
                } else {
                    i += 1;
                }
            }
        }
        self.entries -= out.len();
        self.swept_s = self.swept_s.max(now_s);
        out
    }
}

/// Which AORs a person asks for: `1001` is that user in every domain, `1001@example.com` or
/// `sip:1001@example.com` one AOR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AorQuery {
    User(String),
    Aor(String),
}

impl AorQuery {
    pub fn parse(text: &str) -> AorQuery {
        let uri = if text.contains(':') {
            text.to_string()
        } else {
            format!("sip:{text}")
        };
        match crate::request::aor_of(&uri) {
            Some((canon, _, _)) => AorQuery::Aor(canon),
            None => AorQuery::User(text.to_string()),
        }
    }

    pub fn matches(&self, aor: &str) -> bool {
        match self {
            AorQuery::Aor(a) => a == aor,
            AorQuery::User(u) => aor
                .strip_prefix("sip:")
                .and_then(|rest| rest.strip_prefix(u.as_str()))
                .is_some_and(|rest| rest.starts_with('@')),
        }
    }
}

/// The live bindings among stored entries (`/aor/<aor>` = bindings, as a read-only reader of
/// the `registrar` namespace returns them), in AOR order, for those `query` asks for.
pub fn stored_bindings(
    entries: impl IntoIterator<Item = (String, String)>,
    query: Option<&AorQuery>,
    now_ms: u64,
) -> Vec<(String, Binding)> {
    let prefix = format!("/{FAMILY}/");
    let mut out = Vec::new();
    for (path, value) in entries {
        let Some(aor) = path.strip_prefix(&prefix) else {
            continue;
        };
        if query.is_some_and(|q| !q.matches(aor)) {
            continue;
        }
        let (list, _) = binding::decode(&value);
        out.extend(
            list.into_iter()
                .filter(|b| b.is_live(now_ms))
                .map(|b| (aor.to_string(), b)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_matches_every_domain_and_an_aor_one() {
        let user = AorQuery::parse("1001");
        assert!(user.matches("sip:1001@a.example") && user.matches("sip:1001@b.example"));
        assert!(!user.matches("sip:10011@a.example"));
        let aor = AorQuery::parse("1001@A.example");
        assert_eq!(aor, AorQuery::parse("sip:1001@a.example"));
        assert!(aor.matches("sip:1001@a.example") && !aor.matches("sip:1001@b.example"));
    }

    #[test]
    fn wheel_gives_entries_when_due_and_keeps_later_rounds() {
        let mut w = Wheel {
            slots: vec![Vec::new(); WHEEL_SLOTS],
            swept_s: 100,
            entries: 0,
        };
        w.push("a".into(), 105);
        w.push("b".into(), 105 + WHEEL_SLOTS as u64);
        w.push("late".into(), 50);
        assert_eq!(w.advance(101), vec![Arc::<str>::from("late")]);
        assert!(w.advance(104).is_empty());
        assert_eq!(w.advance(105), vec![Arc::<str>::from("a")]);
        assert_eq!(w.entries, 1);
        assert_eq!(
            w.advance(105 + 2 * WHEEL_SLOTS as u64),
            vec![Arc::<str>::from("b")]
        );
        assert_eq!(w.entries, 0);
    }
}
