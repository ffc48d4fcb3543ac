//! Failed logins, counted before each password is checked, in counters that slow down guessing
//! without letting anyone lock a user out.
//!
//! Every attempt reserves one failure in each counter it belongs to *before* its password is
//! checked (one lock held for the whole decision), so concurrent attempts cannot all pass a
//! check that counted none of them; a success gives its reservation back. Counters:
//!
//! - per (user, address): what one machine may guess against one account;
//! - per user, from addresses that have not signed in as that user lately (strangers): what a
//!   botnet may guess against one account, while the user's own addresses stay open;
//! - per address and per prefix (/24 for IPv4, /64 for IPv6): what one machine or one network
//!   may spray across names. A user's attempt from an address they signed in from lately is
//!   not counted there, so a sprayer on the same network (or behind the same NAT) cannot keep
//!   them out; their (user, address) counter still bounds guessing from that address.
//!
//! A counter allows its first `failures_*` failures; then each attempt waits a delay that
//! doubles from `delay_first_s` up to `delay_max_s` after each failure. It is forgotten after
//! `forget_s` without a failure. Nothing is a hard lock: a user attacked from elsewhere still
//! signs in from their own address, and `tandem user unlock` or a new password (both seen
//! through [`Account::reset_us`]) clears a user's counters.
//!
//! **Why eviction cannot unlock a user.** The counters that bound guesses against an account
//! (per (user, address) and strangers) are kept only for users that exist, so they are
//! bounded by the number of users and never evicted. The other tables (addresses, prefixes,
//! unknown names) hold at most `sources_max` entries each; an entry leaves only once it is
//! forgotten, and while a table is full a new key is simply not counted there. That can only
//! ever spare an attacker the spraying limits, never the per-account ones.

use serde::Deserialize;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::accounts::USER_NAME_BYTES_MAX;
use crate::login_form::LogText;

/// Addresses counted per user (beyond, an address is counted by the user's strangers counter
/// alone, which is stricter).
pub const USER_ADDRESSES_MAX: usize = 64;
/// Addresses remembered per user as having signed in lately (most recent first).
pub const KNOWN_ADDRESSES_MAX: usize = 8;

/// `[web.login]` in `tandem.toml`: the login's limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoginConfig {
    /// Failures allowed per (user, address) before delays start.
    pub failures_per_user_address: u32,
    /// Failures allowed per user from addresses that have not signed in as them lately.
    pub failures_per_user: u32,
    /// Failures allowed per client address, whatever the names.
    pub failures_per_address: u32,
    /// Failures allowed per /24 (IPv4) or /64 (IPv6), whatever the names.
    pub failures_per_prefix: u32,
    /// The first delay once a counter's failures are used; each failure after doubles it.
    pub delay_first_s: u32,
    /// The longest delay.
    pub delay_max_s: u32,
    /// A counter is forgotten after this long without a failure; longer than `delay_max_s`,
    /// so that waiting out a delay never wipes the count.
    pub forget_s: u32,
    /// Most entries in each of the address, prefix and unknown-name tables.
    pub sources_max: usize,
    /// Password checks (Argon2, 19 MiB each) running at once.
    pub checks_max: usize,
    /// How long an attempt waits for a check to be free before it is refused (429).
    pub check_wait_ms: u64,
    /// Reverse proxies whose `X-Forwarded-For` names the client: behind one, every login would
    /// otherwise come from the proxy's address and share its counters.
    pub trusted_proxies: Vec<IpAddr>,
}

impl Default for LoginConfig {
    fn default() -> Self {
        LoginConfig {
            failures_per_user_address: 5,
            failures_per_user: 20,
            failures_per_address: 20,
            failures_per_prefix: 100,
            delay_first_s: 60,
            delay_max_s: 900,
            forget_s: 3600,
            sources_max: 10_000,
            checks_max: 2,
            check_wait_ms: 3000,
            trusted_proxies: Vec::new(),
        }
    }
}

impl LoginConfig {
    /// Settings that cannot work together, named.
    pub fn check(&self) -> Result<(), String> {
        let counts = [
            ("failures_per_user_address", self.failures_per_user_address),
            ("failures_per_user", self.failures_per_user),
            ("failures_per_address", self.failures_per_address),
            ("failures_per_prefix", self.failures_per_prefix),
            ("delay_first_s", self.delay_first_s),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(format!("web.login.{name} = 0: it must be at least 1"));
        }
        if self.delay_max_s < self.delay_first_s || self.forget_s <= self.delay_max_s {
            return Err(format!(
                "web.login: delay_first_s ({}) <= delay_max_s ({}) < forget_s ({}) must hold, \
                 or waiting out a delay would wipe the count",
                self.delay_first_s, self.delay_max_s, self.forget_s
            ));
        }
        if self.sources_max == 0 || self.checks_max == 0 {
            return Err("web.login.sources_max and checks_max must be at least 1".into());
        }
        Ok(())
    }

    /// How long the `n`-th failure beyond a counter's allowance makes the next attempt wait.
    fn delay_s(&self, beyond: u32) -> i64 {
        let d = i64::from(self.delay_first_s).saturating_mul(1i64 << beyond.min(30));
        d.min(i64::from(self.delay_max_s))
    }
}

/// Which counter refused an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    UserAddress,
    User,
    Address,
    Prefix,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::UserAddress => "user and address",
            Limit::User => "user from new addresses",
            Limit::Address => "address",
            Limit::Prefix => "network prefix",
        }
    }
}

/// An attempt refused before its password was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub wait_s: i64,
    pub limit: Limit,
}

/// The account an attempt names, when it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    /// When the user's counters were last cleared (`tandem user unlock`, a new password);
    /// a newer value than the throttle saw clears them.
    pub reset_us: i64,
}

/// A reserved attempt: give it back with [`LoginThrottle::succeeded`] or
/// [`LoginThrottle::refund`], or keep it (a failure).
#[derive(Debug)]
pub struct Ticket {
    name: Option<String>,
    account: bool,
    stranger: bool,
    /// Counted in the address's and its prefix's counters (not for a user's known address).
    sprayer: bool,
    address: IpAddr,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counter {
    failures: u32,
    last_s: i64,
}

impl Counter {
    fn forget_if_old(&mut self, now_s: i64, forget_s: i64) {
        if now_s - self.last_s >= forget_s {
            self.failures = 0;
        }
    }

    fn wait_s(&self, allowed: u32, cfg: &LoginConfig, now_s: i64) -> i64 {
        if self.failures < allowed {
            return 0;
        }
        (self.last_s + cfg.delay_s(self.failures - allowed) - now_s).max(0)
    }
}

/// A bounded map of counters: entries leave only once forgotten; when full, a new key is not
/// counted (see the module's opening).
struct Table<K> {
    map: HashMap<K, Counter>,
    max: usize,
    pruned_s: i64,
}

impl<K: Hash + Eq> Table<K> {
    fn new(max: usize) -> Table<K> {
        Table {
            map: HashMap::new(),
            max,
            pruned_s: i64::MIN,
        }
    }

    fn slot(&mut self, key: K, now_s: i64, forget_s: i64) -> Option<&mut Counter> {
        if !self.map.contains_key(&key) && self.map.len() >= self.max {
            // A scan at most once a second: a full table under a flood stays cheap.
            if self.pruned_s != now_s {
                self.map.retain(|_, c| now_s - c.last_s < forget_s);
                self.pruned_s = now_s;
            }
            if self.map.len() >= self.max {
                return None;
            }
        }
        Some(self.map.entry(key).or_default())
    }
}

#[derive(Debug, Default)]
struct UserCounters {
    reset_us: i64,
    by_address: HashMap<IpAddr, Counter>,
    strangers: Counter,
    /// Addresses that signed in as this user, most recent first.
    known: Vec<IpAddr>,
}

/// An address's prefix: its /24 (IPv4) or /64 (IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefix {
    V4([u8; 3]),
    V6([u8; 8]),
}

impl Prefix {
    pub fn of(address: IpAddr) -> Prefix {
        match address.to_canonical() {
            IpAddr::V4(a) => {
                let o = a.octets();
                Prefix::V4([o[0], o[1], o[2]])
            }
            IpAddr::V6(a) => {
                let mut p = [0u8; 8];
                p.copy_from_slice(&a.octets()[..8]);
                Prefix::V6(p)
            }
        }
    }
}

struct State {
    users: HashMap<String, UserCounters>,
    names: Table<(String, IpAddr)>,
    name_strangers: Table<String>,
    addresses: Table<IpAddr>,
    prefixes: Table<Prefix>,
}

/// How often refused attempts are summed up in the log (each one alone is at debug level: a
/// flood must not fill the log).
pub const REFUSAL_REPORT_S: i64 = 60;

pub struct LoginThrottle {
    cfg: LoginConfig,
    state: Mutex<State>,
    /// Refusals since the last report, and when that was.
    refusals: Mutex<(u64, i64)>,
}

impl LoginThrottle {
    pub fn new(cfg: LoginConfig) -> LoginThrottle {
        let max = cfg.sources_max.max(1);
        LoginThrottle {
            state: Mutex::new(State {
                users: HashMap::new(),
                names: Table::new(max),
                name_strangers: Table::new(max),
                addresses: Table::new(max),
                prefixes: Table::new(max),
            }),
            refusals: Mutex::new((0, 0)),
            cfg,
        }
    }

    pub fn config(&self) -> &LoginConfig {
        &self.cfg
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves one failure for an attempt by `name` (which names `account` when that user
    /// exists) from `address`, or says how long to wait. A name longer than any user's is
    /// counted by its address and prefix only.
    pub fn reserve(
        &self,
        name: &str,
        account: Option<Account>,
        address: IpAddr,
        now_s: i64,
    ) -> Result<Ticket, Refusal> {
        let cfg = &self.cfg;
        let forget_s = i64::from(cfg.forget_s);
        let address = address.to_canonical();
        let name = (!name.is_empty() && name.len() <= USER_NAME_BYTES_MAX).then_some(name);
        let mut st = self.lock();
        let State {
            users,
            names,
            name_strangers,
            addresses,
            prefixes,
        } = &mut *st;
        let mut counters: Vec<(&mut Counter, u32, Limit)> = Vec::with_capacity(4);
        let mut stranger = false;
        let mut known = false;
        match (name, account) {
            (Some(n), Some(acct)) => {
                let u = users.entry(n.to_owned()).or_default();
                if acct.reset_us > u.reset_us {
                    *u = UserCounters {
                        reset_us: acct.reset_us,
                        ..UserCounters::default()
                    };
                }
                known = u.known.contains(&address);
                if !u.by_address.contains_key(&address) && u.by_address.len() >= USER_ADDRESSES_MAX
                {
                    u.by_address.retain(|_, c| now_s - c.last_s < forget_s);
                }
                // A known address always has its own counter; past the cap, others are
                // counted as strangers alone.
                if known || u.by_address.len() < USER_ADDRESSES_MAX {
                    let c = u.by_address.entry(address).or_default();
                    counters.push((c, cfg.failures_per_user_address, Limit::UserAddress));
                }
                if !known {
                    stranger = true;
                    counters.push((&mut u.strangers, cfg.failures_per_user, Limit::User));
                }
            }
            (Some(n), None) => {
                // Unknown names are throttled as known ones are, so that the answers do not
                // tell which names exist (while these tables have room).
                if let Some(c) = names.slot((n.to_owned(), address), now_s, forget_s) {
                    counters.push((c, cfg.failures_per_user_address, Limit::UserAddress));
                }
                if let Some(c) = name_strangers.slot(n.to_owned(), now_s, forget_s) {
                    counters.push((c, cfg.failures_per_user, Limit::User));
                }
            }
            (None, _) => {}
        }
        if !known {
            if let Some(c) = addresses.slot(address, now_s, forget_s) {
                counters.push((c, cfg.failures_per_address, Limit::Address));
            }
            if let Some(c) = prefixes.slot(Prefix::of(address), now_s, forget_s) {
                counters.push((c, cfg.failures_per_prefix, Limit::Prefix));
            }
        }
        let mut refusal: Option<Refusal> = None;
        for (c, allowed, limit) in &mut counters {
            c.forget_if_old(now_s, forget_s);
            let wait_s = c.wait_s(*allowed, cfg, now_s);
            if wait_s > refusal.map_or(0, |r| r.wait_s) {
                refusal = Some(Refusal {
                    wait_s,
                    limit: *limit,
                });
            }
        }
        if let Some(r) = refusal {
            return Err(r);
        }
        for (c, _, _) in counters {
            c.failures = c.failures.saturating_add(1);
            c.last_s = now_s;
        }
        Ok(Ticket {
            name: name.map(str::to_owned),
            account: account.is_some(),
            stranger,
            sprayer: !known,
            address,
        })
    }

    /// Counts a refused attempt; at most once every [`REFUSAL_REPORT_S`], logs how many there
    /// were, with the latest's name (as a log may show it), address and reason.
    pub fn note_refusal(&self, now_s: i64, user: &LogText<'_>, address: IpAddr, why: &str) {
        let mut r = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        r.0 += 1;
        if now_s - r.1 >= REFUSAL_REPORT_S {
            tracing::warn!(
                refused = r.0,
                latest_user = %user,
                latest_address = %address,
                why,
                "console logins refused since the last report"
            );
            *r = (0, now_s);
        }
    }

    /// Gives back an attempt whose password was never checked (no check was free).
    pub fn refund(&self, ticket: Ticket) {
        self.give_back(&ticket, false);
    }

    /// The password was right: the (user, address) counter starts again and the address is
    /// remembered as the user's; the attempt's reservation in the other counters is given
    /// back (one right password among many wrong ones does not clear an address).
    pub fn succeeded(&self, ticket: Ticket) {
        self.give_back(&ticket, true);
    }

    fn give_back(&self, t: &Ticket, success: bool) {
        let mut st = self.lock();
        let one_back = |c: &mut Counter| c.failures = c.failures.saturating_sub(1);
        if let Some(n) = &t.name {
            if t.account {
                if let Some(u) = st.users.get_mut(n) {
                    if t.stranger {
                        one_back(&mut u.strangers);
                    }
                    if success {
                        u.by_address.remove(&t.address);
                        u.known.retain(|a| *a != t.address);
                        u.known.insert(0, t.address);
                        u.known.truncate(KNOWN_ADDRESSES_MAX);
                    } else if let Some(c) = u.by_address.get_mut(&t.address) {
                        one_back(c);
                    }
                }
            } else {
                if let Some(c) = st.names.map.get_mut(&(n.clone(), t.address)) {
                    one_back(c);
                }
                if let Some(c) = st.name_strangers.map.get_mut(n) {
                    one_back(c);
                }
            }
        }
        if !t.sprayer {
            return;
        }
        if let Some(c) = st.addresses.map.get_mut(&t.address) {
            one_back(c);
        }
        if let Some(c) = st.prefixes.map.get_mut(&Prefix::of(t.address)) {
            one_back(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2));
    const ALICE: Option<Account> = Some(Account { reset_us: 0 });

    fn fail(t: &LoginThrottle, name: &str, acct: Option<Account>, at: IpAddr, now: i64) {
        t.reserve(name, acct, at, now).expect("not refused");
    }

    #[test]
    fn attempts_are_counted_before_they_are_checked() {
        let t = LoginThrottle::new(LoginConfig::default());
        // Forty at once: five reserved, the rest refused before any check finishes.
        let tickets: Vec<_> = (0..40).map(|_| t.reserve("alice", ALICE, A, 100)).collect();
        assert_eq!(tickets.iter().filter(|r| r.is_ok()).count(), 5);
        let refused = tickets.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert_eq!(
            *refused,
            Refusal {
                wait_s: 60,
                limit: Limit::UserAddress
            }
        );
    }

    #[test]
    fn delays_grow_and_an_attacker_does_not_lock_the_user_out() {
        let t = LoginThrottle::new(LoginConfig::default());
        for _ in 0..5 {
            fail(&t, "alice", ALICE, A, 100);
        }
        assert_eq!(t.reserve("alice", ALICE, A, 110).unwrap_err().wait_s, 50);
        fail(&t, "alice", ALICE, A, 160);
        assert_eq!(t.reserve("alice", ALICE, A, 161).unwrap_err().wait_s, 119);
        fail(&t, "alice", ALICE, A, 280);
        assert_eq!(t.reserve("alice", ALICE, A, 280).unwrap_err().wait_s, 240);
        // Alice from her own address is not delayed by what A did.
        let ticket = t.reserve("alice", ALICE, B, 281).unwrap();
        t.succeeded(ticket);
        // The delay stops at delay_max_s, and waiting it out does not wipe the count.
        let mut now = 600;
        for _ in 0..6 {
            if let Err(r) = t.reserve("alice", ALICE, A, now) {
                now += r.wait_s;
                fail(&t, "alice", ALICE, A, now);
            }
        }
        assert_eq!(t.reserve("alice", ALICE, A, now).unwrap_err().wait_s, 900);
        // Forgotten after forget_s without a failure.
        assert!(t.reserve("alice", ALICE, A, now + 3600).is_ok());
    }

    #[test]
    fn many_addresses_meet_the_users_strangers_limit_but_not_her_own_address() {
        let t = LoginThrottle::new(LoginConfig::default());
        let home = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
        t.succeeded(t.reserve("alice", ALICE, home, 50).unwrap());
        for i in 0..20u8 {
            let at = IpAddr::V4(Ipv4Addr::new(10, i, 0, 1));
            fail(&t, "alice", ALICE, at, 100);
        }
        let r = t.reserve("alice", ALICE, B, 101).unwrap_err();
        assert_eq!(r.limit, Limit::User);
        assert!(t.reserve("alice", ALICE, home, 101).is_ok());
    }

    #[test]
    fn a_sprayer_on_the_users_network_does_not_keep_her_out_of_her_own_address() {
        let t = LoginThrottle::new(LoginConfig::default());
        let home = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
        t.succeeded(t.reserve("alice", ALICE, home, 50).unwrap());
        // Her whole /24, her own address included, sprays other names past both limits.
        for i in 0..120u32 {
            let at = IpAddr::V4(Ipv4Addr::new(203, 0, 113, (i % 8) as u8 + 1));
            let _ = t.reserve(&format!("user{i}"), None, at, 100);
        }
        assert!(t.reserve("bob", None, home, 101).is_err());
        // Alice at her own address is counted by her (user, address) counter alone.
        let ticket = t.reserve("alice", ALICE, home, 101).unwrap();
        t.succeeded(ticket);
        for _ in 0..5 {
            fail(&t, "alice", ALICE, home, 102);
        }
        assert_eq!(
            t.reserve("alice", ALICE, home, 103).unwrap_err().limit,
            Limit::UserAddress
        );
    }

    #[test]
    fn a_newer_reset_clears_the_users_counters() {
        let t = LoginThrottle::new(LoginConfig::default());
        for _ in 0..5 {
            fail(&t, "alice", ALICE, A, 100);
        }
        assert!(t.reserve("alice", ALICE, A, 101).is_err());
        let unlocked = Some(Account { reset_us: 7 });
        assert!(t.reserve("alice", unlocked, A, 101).is_ok());
        // An older view (a lookup made before the unlock) does not bring them back.
        assert!(t.reserve("alice", ALICE, A, 101).is_ok());
    }

    #[test]
    fn an_address_and_its_prefix_are_limited_whatever_the_names() {
        let t = LoginThrottle::new(LoginConfig::default());
        for i in 0..20 {
            fail(&t, &format!("user{i}"), None, A, 100);
        }
        let r = t.reserve("someone-new", None, A, 101).unwrap_err();
        assert_eq!(r.limit, Limit::Address);
        assert!(t.reserve("someone-new", None, B, 101).is_ok());
        // A name past the longest user name is counted by its address alone.
        let long = "x".repeat(USER_NAME_BYTES_MAX + 1);
        assert_eq!(
            t.reserve(&long, None, A, 101).unwrap_err().limit,
            Limit::Address
        );
        let t = LoginThrottle::new(LoginConfig::default());
        for i in 0..100u8 {
            let at = IpAddr::V4(Ipv4Addr::new(10, 1, 2, i));
            fail(&t, &format!("x{i}"), None, at, 100);
        }
        let r = t
            .reserve("y", None, IpAddr::V4(Ipv4Addr::new(10, 1, 2, 200)), 101)
            .unwrap_err();
        assert_eq!(r.limit, Limit::Prefix);
        let v6: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let v6_same: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(Prefix::of(v6), Prefix::of(v6_same));
    }

    #[test]
    fn a_flood_of_other_names_and_addresses_never_unlocks_an_account() {
        let cfg = LoginConfig {
            sources_max: 100,
            ..LoginConfig::default()
        };
        let t = LoginThrottle::new(cfg);
        for _ in 0..5 {
            fail(&t, "alice", ALICE, A, 100);
        }
        for i in 0..5_000u32 {
            let at = IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + (i << 8)));
            let _ = t.reserve(&format!("u{i}"), None, at, 100 + i64::from(i % 50));
        }
        let st = t.lock();
        assert!(st.addresses.map.len() <= 100 && st.prefixes.map.len() <= 100);
        assert!(st.names.map.len() <= 100 && st.name_strangers.map.len() <= 100);
        drop(st);
        assert_eq!(
            t.reserve("alice", ALICE, A, 150).unwrap_err().limit,
            Limit::UserAddress
        );
    }

    #[test]
    fn a_refund_gives_the_attempt_back() {
        let t = LoginThrottle::new(LoginConfig::default());
        for _ in 0..20 {
            let ticket = t.reserve("alice", ALICE, A, 100).unwrap();
            t.refund(ticket);
        }
        assert!(t.reserve("alice", ALICE, A, 100).is_ok());
    }

    #[test]
    fn settings_that_would_wipe_the_count_are_refused() {
        assert!(LoginConfig::default().check().is_ok());
        let bad = LoginConfig {
            forget_s: 900,
            ..LoginConfig::default()
        };
        assert!(bad.check().unwrap_err().contains("forget_s"));
        let bad = LoginConfig {
            failures_per_prefix: 0,
            ..LoginConfig::default()
        };
        assert!(bad.check().unwrap_err().contains("failures_per_prefix"));
    }
}
