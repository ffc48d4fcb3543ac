//! Which call each SIP dialog belongs to. An Asterisk or FreePBX call is two dialogs or more
//! (the phone to the PBX, the PBX to the trunk, plus forks, queues and transfers); the
//! [`Linker`] is shown each dialog's first INVITE, in capture order, and says which earlier
//! dialog's call it belongs to, by which rule and how sure it is.
//!
//! It never reads packets, parses SIP or stores anything: the monitor hands it an [`Invite`]'s
//! facts, and the sensor turns a [`Link`] into the CDR's `call_group`, `linked_by` and
//! `link_confidence`. Start reading at [`Linker::invite`]; `[legs]` is [`LegsConfig`].
//!
//! # Groups
//!
//! A group is named by its first leg ([`LegRef`]: that dialog's Call-ID and the capture time
//! of its first INVITE), so that the sensor can name it by that leg's CDR uid. A dialog linked
//! to a dialog that was itself linked joins the same group (the first leg of a chain of PBXs
//! names them all). A dialog not linked is its own group; [`Linker::invite`] returns `None`.
//! The answer depends only on the INVITEs shown before, in order: every monitor worker shown the
//! same SIP gets the same groups.
//!
//! # Rules, in order
//!
//! 1. **`header:NAME`** (`[legs] headers`, default `X-Call-ID`, `X-CID`): the value of a
//!    configured header is another dialog's Call-ID (confidence 1.0), or a token an earlier
//!    dialog carried in one of those headers (0.9: sngrep's and VoIPmonitor's "merge legs").
//! 2. **`hep-correlation`**: the HEP correlation id (chunk 17) that came with the INVITE is
//!    another dialog's Call-ID (1.0). Homer's agents put the A leg's Call-ID there.
//! 3. **`b2bua`**, Asterisk's own pattern when no header says anything: an INVITE starting a
//!    dialog *from* a PBX address is a leg of an INVITE that came *to* that address at most
//!    `window_ms` before (default 5 s) and carries the same called number (Request-URI or To
//!    user, after the prefix rules) or the same caller (From user).
//!    - PBX addresses are configured (`[legs] pbx`, an IP or IP:port) or learned
//!      (`learn_pbx`, on by default): an IP:port that received an INVITE starting a dialog and
//!      sends one starting a dialog of a Call-ID it did not receive. A proxy forwards the
//!      Call-IDs it receives and is never learned; a learned address gives 0.9 of the
//!      confidence of a configured one.
//!    - Each candidate scores 2 for the called number and 1 for the caller: both 0.95, called
//!      only 0.85, caller only 0.6. Every other candidate that matched at all takes a fifth off
//!      (at most five times). Two candidates with the best score are a tie, and a tie links
//!      nothing, unless exactly one of them has no leg yet (0.7 of the confidence).
//!    - Prefix rules (`[legs] prefix_rules`, `{ strip = "9" }`, `{ strip = "0", add = "+49" }`)
//!      give each number its other forms; numbers match when a form is shared. Names,
//!      `anonymous` and numbers of fewer than two digits never match.
//!
//! ## Where the B2BUA rule fails
//!
//! - **Two calls to the same number at once** through one PBX: the second outbound INVITE
//!   matches both inbound ones. While exactly one has no leg yet it is taken (lower
//!   confidence); otherwise nothing is linked. A header is the cure.
//! - **Forks, ring groups and queues** ringing several phones: the outbound INVITEs carry the
//!   phones' extensions, not the dialled group number, so they link by the caller alone (0.6),
//!   and only while no other call from the same caller is in the window.
//! - **Follow-me and queues** that ring later than `window_ms`, and **transfers** (a new dialog
//!   minutes later, often from the phone, not the PBX): not linked by this rule. Asterisk's
//!   `X-Asterisk-*` or a `__X-CID` header set in the dialplan links them.
//! - **A caller ID rewritten and a number translated** beyond the prefix rules: not linked.
//! - **Phones learned as PBXs**: a phone that is called and then calls out from the same
//!   address and port within the window, to the number it was called from or from the same
//!   caller, is taken for a PBX. Configure `pbx` and turn `learn_pbx` off where that matters.
//! - **Asterisk over TCP or TLS** sends from an ephemeral port: learning by IP:port misses it;
//!   configure the PBX by IP.
//!
//! # Bounds
//!
//! Dialogs are remembered at most `memory_ms` (1 h) and `max_dialogs` (100,000), header tokens
//! `max_tokens` (100,000), inbound INVITEs waiting for their leg `window_ms` and `max_pending`
//! (20,000), addresses watched for learning `max_addresses` (10,000); values longer than
//! [`config::MAX_VALUE_BYTES`] are ignored. The oldest go first; [`LinkCounters`] counts what
//! was dropped.

pub mod config;
pub mod number;
mod pending;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{ConfigError, LegsConfig, PbxAddr, PrefixRule};
use pending::{Pending, PendingTable};

/// The first INVITE of a dialog (or any INVITE: the linker tells a known Call-ID itself).
#[derive(Debug, Clone, Copy)]
pub struct Invite<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: i64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub call_id: &'a str,
    /// From user.
    pub caller: &'a str,
    /// Request-URI user.
    pub ruri_user: &'a str,
    /// To user.
    pub to_user: &'a str,
    /// Without a To tag: the request starts a dialog (a re-INVITE carries one).
    pub initial: bool,
    /// The INVITE's headers as (name, value), of those the linker asks for
    /// ([`Linker::headers`]); others are ignored.
    pub headers: &'a [(&'a str, &'a str)],
    /// The HEP correlation id the packet came with.
    pub correlation: Option<&'a str>,
}

/// A dialog named by its Call-ID and the capture time of its first INVITE: the first leg of a
/// group names the group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LegRef {
    pub call_id: Arc<str>,
    pub start_ns: i64,
}

/// The rule that linked a dialog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// A configured header, named as configured.
    Header(Arc<str>),
    HepCorrelation,
    B2bua,
}

impl fmt::Display for Rule {
    /// `header:NAME`, `hep-correlation` or `b2bua`: the CDR's `linked_by`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Header(name) => write!(f, "header:{name}"),
            Rule::HepCorrelation => f.write_str("hep-correlation"),
            Rule::B2bua => f.write_str("b2bua"),
        }
    }
}

/// A dialog linked to a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The group's first leg.
    pub group: LegRef,
    pub rule: Rule,
    /// 0..=1.
    pub confidence: f32,
}

/// What the linker decided and dropped, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub dialogs: u64,
    pub by_header: u64,
    pub by_correlation: u64,
    pub by_b2bua: u64,
    /// Outbound INVITEs from a PBX that matched two inbound ones equally: not linked.
    pub ties: u64,
    pub dialogs_forgotten: u64,
    pub tokens_forgotten: u64,
    pub pending_dropped: u64,
    /// Addresses not watched because the table was full.
    pub addresses_full: u64,
    /// Header values and correlation ids ignored for their length.
    pub values_too_long: u64,
}

/// What is remembered of a dialog.
struct Known {
    start_ns: i64,
    group: LegRef,
    link: Option<Link>,
}

/// What an address did, for learning PBXs.
#[derive(Default)]
struct Seen {
    received: bool,
    originated: bool,
    last_ns: i64,
}

/// Links dialogs to calls; see the crate's documentation.
pub struct Linker {
    cfg: LegsConfig,
    pbx: Vec<PbxAddr>,
    headers: Vec<Arc<str>>,
    window_ns: i64,
    memory_ns: i64,
    known: HashMap<Arc<str>, Known>,
    known_order: VecDeque<(Arc<str>, i64)>,
    tokens: HashMap<Box<str>, (LegRef, i64)>,
    token_order: VecDeque<(Box<str>, i64)>,
    pending: PendingTable,
    addresses: HashMap<SocketAddr, Seen>,
    last_sweep_ns: i64,
    counters: LinkCounters,
}

const CONF_HEADER_CALL_ID: f32 = 1.0;
const CONF_HEADER_TOKEN: f32 = 0.9;
const CONF_CORRELATION: f32 = 1.0;
const CONF_CALLED_AND_CALLER: f32 = 0.95;
const CONF_CALLED: f32 = 0.85;
const CONF_CALLER: f32 = 0.6;
const LEARNED_FACTOR: f32 = 0.9;
const PER_OTHER_FACTOR: f32 = 0.8;
const OTHERS_COUNTED_MAX: i32 = 5;
const UNCLAIMED_FACTOR: f32 = 0.7;

impl Linker {
    /// A linker for a validated configuration.
    pub fn new(cfg: LegsConfig) -> Result<Linker, ConfigError> {
        let pbx = cfg.validate()?;
        let headers = cfg.headers.iter().map(|h| Arc::from(h.as_str())).collect();
        Ok(Linker {
            window_ns: (cfg.window_ms as i64).saturating_mul(1_000_000),
            memory_ns: (cfg.memory_ms as i64).saturating_mul(1_000_000),
            pbx,
            headers,
            cfg,
            known: HashMap::new(),
            known_order: VecDeque::new(),
            tokens: HashMap::new(),
            token_order: VecDeque::new(),
            pending: PendingTable::default(),
            addresses: HashMap::new(),
            last_sweep_ns: i64::MIN,
            counters: LinkCounters::default(),
        })
    }

    /// The header names to hand over in [`Invite::headers`], as configured.
    pub fn headers(&self) -> &[Arc<str>] {
        &self.headers
    }

    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// Which group the INVITE's dialog belongs to: `None` for a dialog that is its own group.
    /// A Call-ID seen before gets the answer it got then.
    pub fn invite(&mut self, inv: &Invite<'_>) -> Option<Link> {
        self.forget(inv.ts_ns);
        if let Some(k) = self.known.get(inv.call_id) {
            let link = k.link.clone();
            if inv.initial {
                self.pending.touch(inv.call_id, inv.ts_ns);
            }
            return link;
        }
        self.counters.dialogs += 1;
        let call_id: Arc<str> = Arc::from(inv.call_id);
        let own = LegRef {
            call_id: call_id.clone(),
            start_ns: inv.ts_ns,
        };
        let learned_pbx = inv.initial && self.watch_addresses(inv);
        let mut link = self.by_header(inv, &own);
        if link.is_none() {
            link = self.by_correlation(inv);
        }
        if link.is_none() && inv.initial {
            link = self.by_b2bua(inv, learned_pbx);
        }
        match &link {
            Some(l) if l.rule == Rule::B2bua => self.counters.by_b2bua += 1,
            Some(l) if l.rule == Rule::HepCorrelation => self.counters.by_correlation += 1,
            Some(_) => self.counters.by_header += 1,
            None => {}
        }
        if inv.initial {
            self.add_pending(inv, call_id.clone());
        }
        let group = link.as_ref().map_or(own, |l| l.group.clone());
        self.remember(call_id, inv.ts_ns, group, link.clone());
        link
    }

    /// The group of a remembered dialog.
    fn group_of(&self, call_id: &str) -> Option<LegRef> {
        self.known.get(call_id).map(|k| k.group.clone())
    }

    fn by_header(&mut self, inv: &Invite<'_>, own: &LegRef) -> Option<Link> {
        for i in 0..self.headers.len() {
            let name = self.headers[i].clone();
            let Some(value) = inv
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                .map(|(_, v)| v.trim())
            else {
                continue;
            };
            if value.is_empty() {
                continue;
            }
            if value.len() > config::MAX_VALUE_BYTES {
                self.counters.values_too_long += 1;
                continue;
            }
            let rule = Rule::Header(name);
            if value != inv.call_id
                && let Some(group) = self.group_of(value)
            {
                return Some(Link {
                    group,
                    rule,
                    confidence: CONF_HEADER_CALL_ID,
                });
            }
            if let Some((group, _)) = self.tokens.get(value) {
                return Some(Link {
                    group: group.clone(),
                    rule,
                    confidence: CONF_HEADER_TOKEN,
                });
            }
            // The first dialog carrying the token: later ones join its group.
            self.add_token(value, own.clone(), inv.ts_ns);
        }
        None
    }

    fn by_correlation(&mut self, inv: &Invite<'_>) -> Option<Link> {
        let c = inv.correlation?.trim();
        if c.len() > config::MAX_VALUE_BYTES {
            self.counters.values_too_long += 1;
            return None;
        }
        if c.is_empty() || c == inv.call_id {
            return None;
        }
        Some(Link {
            group: self.group_of(c)?,
            rule: Rule::HepCorrelation,
            confidence: CONF_CORRELATION,
        })
    }

    /// Notes that `dst` received and `src` originated a dialog; true if `src` is now a learned
    /// PBX. Only called for a Call-ID not seen before: a proxy forwarding a dialog it received
    /// is not originating it.
    fn watch_addresses(&mut self, inv: &Invite<'_>) -> bool {
        if !self.cfg.learn_pbx {
            return false;
        }
        let max = self.cfg.max_addresses;
        let mut learned = false;
        for (addr, received) in [(inv.dst, true), (inv.src, false)] {
            if !self.addresses.contains_key(&addr) && self.addresses.len() >= max {
                self.counters.addresses_full += 1;
                continue;
            }
            let s = self.addresses.entry(addr).or_default();
            s.last_ns = s.last_ns.max(inv.ts_ns);
            if received {
                s.received = true;
            } else {
                s.originated = true;
                learned = s.received;
            }
        }
        learned
    }

    /// Whether an INVITE that came to `dst` went to the PBX that `src` is.
    fn same_pbx(&self, dst: SocketAddr, src: SocketAddr, learned: bool) -> Option<bool> {
        if self.pbx.iter().any(|p| p.matches(src) && p.matches(dst)) {
            return Some(true);
        }
        (learned && dst == src).then_some(false)
    }

    fn by_b2bua(&mut self, inv: &Invite<'_>, learned: bool) -> Option<Link> {
        let configured = self.pbx.iter().any(|p| p.matches(inv.src));
        if !configured && !learned {
            return None;
        }
        let rules = &self.cfg.prefix_rules;
        let mut called = number::forms(inv.ruri_user, rules);
        for f in number::forms(inv.to_user, rules) {
            if !called.contains(&f) {
                called.push(f);
            }
        }
        let caller = number::forms(inv.caller, rules);
        if called.is_empty() && caller.is_empty() {
            return None;
        }
        let since = inv.ts_ns.saturating_sub(self.window_ns);
        // (seq in pending, score, configured), oldest first.
        let mut scored: Vec<(u64, u8, bool)> = Vec::new();
        // Only INVITEs to the PBX's IP can be its inbound legs (a PBX known by IP and port
        // is matched on the port below).
        for seq in self.pending.sharing(inv.src.ip(), &called, &caller) {
            let Some(p) = self.pending.get(seq) else {
                continue;
            };
            if p.last_ns < since || p.last_ns > inv.ts_ns || *p.call_id == *inv.call_id {
                continue;
            }
            let Some(configured) = self.same_pbx(p.dst, inv.src, learned) else {
                continue;
            };
            let score = 2 * u8::from(number::same(&called, &p.called))
                + u8::from(number::same(&caller, &p.caller));
            if score > 0 {
                scored.push((seq, score, configured));
            }
        }
        let best = scored.iter().map(|s| s.1).max()?;
        let top: Vec<&(u64, u8, bool)> = scored.iter().filter(|s| s.1 == best).collect();
        let (chosen, mut confidence) = if top.len() == 1 {
            (*top[0], 1.0)
        } else {
            let free: Vec<_> = top
                .iter()
                .filter(|s| self.pending.get(s.0).is_some_and(|p| !p.claimed))
                .collect();
            if free.len() != 1 {
                self.counters.ties += 1;
                return None;
            }
            (**free[0], UNCLAIMED_FACTOR)
        };
        confidence *= match best {
            3 => CONF_CALLED_AND_CALLER,
            2 => CONF_CALLED,
            _ => CONF_CALLER,
        };
        if !chosen.2 {
            confidence *= LEARNED_FACTOR;
        }
        let others = (scored.len() as i32 - 1).min(OTHERS_COUNTED_MAX);
        confidence *= PER_OTHER_FACTOR.powi(others);
        let p = self.pending.get_mut(chosen.0)?;
        p.claimed = true;
        let call_id = p.call_id.clone();
        Some(Link {
            group: self.group_of(&call_id)?,
            rule: Rule::B2bua,
            confidence,
        })
    }

    fn add_pending(&mut self, inv: &Invite<'_>, call_id: Arc<str>) {
        if self.pending.len() >= self.cfg.max_pending {
            self.pending.pop_front();
            self.counters.pending_dropped += 1;
        }
        let rules = &self.cfg.prefix_rules;
        let mut called = number::forms(inv.ruri_user, rules);
        for f in number::forms(inv.to_user, rules) {
            if !called.contains(&f) {
                called.push(f);
            }
        }
        self.pending.push(Pending {
            call_id,
            last_ns: inv.ts_ns,
            dst: inv.dst,
            caller: number::forms(inv.caller, rules),
            called,
            claimed: false,
        });
    }

    fn add_token(&mut self, value: &str, group: LegRef, ts_ns: i64) {
        if self.tokens.contains_key(value) {
            return;
        }
        if self.tokens.len() >= self.cfg.max_tokens
            && let Some((old, _)) = self.token_order.pop_front()
        {
            self.tokens.remove(&old);
            self.counters.tokens_forgotten += 1;
        }
        self.tokens.insert(value.into(), (group, ts_ns));
        self.token_order.push_back((value.into(), ts_ns));
    }

    fn remember(&mut self, call_id: Arc<str>, ts_ns: i64, group: LegRef, link: Option<Link>) {
        while self.known.len() >= self.cfg.max_dialogs {
            let Some((old, ts)) = self.known_order.pop_front() else {
                break;
            };
            if self.known.get(&old).is_some_and(|k| k.start_ns == ts) {
                self.known.remove(&old);
                self.counters.dialogs_forgotten += 1;
            }
        }
        self.known_order.push_back((call_id.clone(), ts_ns));
        self.known.insert(
            call_id,
            Known {
                start_ns: ts_ns,
                group,
                link,
            },
        );
    }

    /// Forgets what is older than its time: dialogs and tokens after `memory_ms`, pending
    /// INVITEs after `window_ms`, addresses after `memory_ms` (swept once a window).
    fn forget(&mut self, now_ns: i64) {
        let memory_since = now_ns.saturating_sub(self.memory_ns);
        while let Some((id, ts)) = self.known_order.front() {
            if *ts >= memory_since {
                break;
            }
            // A Call-ID seen again later has a newer entry: leave that one.
            if self.known.get(id).is_some_and(|k| k.start_ns == *ts) {
                self.known.remove(id);
            }
            self.known_order.pop_front();
        }
        while let Some((v, ts)) = self.token_order.front() {
            if *ts >= memory_since {
                break;
            }
            self.tokens.remove(v);
            self.token_order.pop_front();
        }
        let window_since = now_ns.saturating_sub(self.window_ns);
        while self
            .pending
            .front()
            .is_some_and(|p| p.last_ns < window_since)
        {
            self.pending.pop_front();
        }
        if now_ns.saturating_sub(self.last_sweep_ns) >= self.window_ns {
            self.last_sweep_ns = now_ns;
            self.addresses.retain(|_, s| s.last_ns >= memory_since);
        }
    }
}

#[cfg(test)]
mod tests;
