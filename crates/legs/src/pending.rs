//! Inbound INVITEs waiting for their outbound leg, in arrival order, found by the IP they went
//! to and the forms of their numbers: an outbound INVITE looks up only those that went to its
//! PBX and share a number with it, however many wait (a thousand calls a second through one PBX
//! keep five thousand waiting).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// An INVITE that started a dialog, waiting `window_ms` for its outbound leg.
pub(crate) struct Pending {
    pub call_id: Arc<str>,
    /// Its latest INVITE without a To tag (a retry after a 401 moves it on).
    pub last_ns: i64,
    pub dst: SocketAddr,
    pub caller: Vec<Box<str>>,
    pub called: Vec<Box<str>>,
    /// An outbound leg was linked to it.
    pub claimed: bool,
}

/// Which number a form is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Side {
    Caller,
    Called,
}

/// The waiting INVITEs: numbered in arrival order (`seq`), the oldest first.
#[derive(Default)]
pub(crate) struct PendingTable {
    items: VecDeque<Pending>,
    /// The `seq` of `items[0]`.
    first_seq: u64,
    /// By the IP the INVITE went to and a form of one of its numbers: the `seq`s, ascending
    /// (so the oldest, which leaves first, is at the front).
    by_form: HashMap<(IpAddr, Side, Box<str>), VecDeque<u64>>,
    by_call: HashMap<Arc<str>, u64>,
}

impl PendingTable {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn front(&self) -> Option<&Pending> {
        self.items.front()
    }

    pub fn get(&self, seq: u64) -> Option<&Pending> {
        self.items.get(seq.checked_sub(self.first_seq)? as usize)
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut Pending> {
        self.items
            .get_mut(seq.checked_sub(self.first_seq)? as usize)
    }

    /// A later INVITE of a waiting dialog (a retry after a challenge): it waits from then on.
    pub fn touch(&mut self, call_id: &str, ts_ns: i64) {
        if let Some(&seq) = self.by_call.get(call_id)
            && let Some(p) = self.get_mut(seq)
        {
            p.last_ns = p.last_ns.max(ts_ns);
        }
    }

    pub fn push(&mut self, p: Pending) {
        let seq = self.first_seq + self.items.len() as u64;
        let ip = p.dst.ip();
        for (side, forms) in [(Side::Called, &p.called), (Side::Caller, &p.caller)] {
            for f in forms {
                let v = self.by_form.entry((ip, side, f.clone())).or_default();
                // A number may have two equal forms' entries for one INVITE: once is enough.
                if v.back() != Some(&seq) {
                    v.push_back(seq);
                }
            }
        }
        self.by_call.insert(p.call_id.clone(), seq);
        self.items.push_back(p);
    }

    pub fn pop_front(&mut self) {
        let Some(p) = self.items.pop_front() else {
            return;
        };
        let seq = self.first_seq;
        self.first_seq += 1;
        let ip = p.dst.ip();
        for (side, forms) in [(Side::Called, &p.called), (Side::Caller, &p.caller)] {
            for f in forms {
                let key = (ip, side, f.clone());
                if let Some(v) = self.by_form.get_mut(&key) {
                    // The oldest waiting: first in each of its lists.
                    if v.front() == Some(&seq) {
                        v.pop_front();
                    }
                    if v.is_empty() {
                        self.by_form.remove(&key);
                    }
                }
            }
        }
        if self.by_call.get(&p.call_id) == Some(&seq) {
            self.by_call.remove(&p.call_id);
        }
    }

    /// The waiting INVITEs that went to `ip` and whose called number or caller has a form
    /// among these, oldest first.
    pub fn sharing(&self, ip: IpAddr, called: &[Box<str>], caller: &[Box<str>]) -> Vec<u64> {
        let mut out = Vec::new();
        for (side, forms) in [(Side::Called, called), (Side::Caller, caller)] {
            for f in forms {
                if let Some(v) = self.by_form.get(&(ip, side, f.clone())) {
                    out.extend(v.iter().copied());
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}
