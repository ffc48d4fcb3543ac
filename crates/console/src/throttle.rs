//! Failed logins, counted per user name and per client address: once either reaches its limit
//! within the window, logins for it are refused until the window ends, whatever the password.
//! A success clears the user's count (not the address's: one right guess among many wrong
//! ones from an address does not clear the address).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Most names and addresses tracked at once; the oldest window goes first when it is full.
pub const ENTRIES_MAX: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleConfig {
    pub failures_per_user: u32,
    pub failures_per_address: u32,
    pub window_s: i64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            failures_per_user: 5,
            failures_per_address: 20,
            window_s: 900,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Address(IpAddr),
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start_s: i64,
    failures: u32,
}

pub struct LoginThrottle {
    cfg: ThrottleConfig,
    windows: Mutex<HashMap<Key, Window>>,
}

impl LoginThrottle {
    pub fn new(cfg: ThrottleConfig) -> LoginThrottle {
        LoginThrottle {
            cfg,
            windows: Mutex::new(HashMap::new()),
        }
    }

    fn limit(&self, key: &Key) -> u32 {
        match key {
            Key::User(_) => self.cfg.failures_per_user,
            Key::Address(_) => self.cfg.failures_per_address,
        }
    }

    /// `Err(seconds)` until logins for this name or from this address are taken again.
    pub fn check(&self, user: &str, addr: IpAddr, now_s: i64) -> Result<(), i64> {
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait = 0;
        for key in [Key::User(user.to_owned()), Key::Address(addr)] {
            if let Some(w) = windows.get(&key) {
                let ends = w.start_s + self.cfg.window_s;
                if now_s < ends && w.failures >= self.limit(&key) {
                    wait = wait.max(ends - now_s);
                }
            }
        }
        if wait > 0 { Err(wait) } else { Ok(()) }
    }

    /// Counts a failed login.
    pub fn failed(&self, user: &str, addr: IpAddr, now_s: i64) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() + 2 > ENTRIES_MAX {
            let window_s = self.cfg.window_s;
            windows.retain(|_, w| now_s < w.start_s + window_s);
            while windows.len() + 2 > ENTRIES_MAX {
                let oldest = windows
                    .iter()
                    .min_by_key(|(_, w)| w.start_s)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => windows.remove(&k),
                    None => break,
                };
            }
        }
        for key in [Key::User(user.to_owned()), Key::Address(addr)] {
            let w = windows.entry(key).or_insert(Window {
                start_s: now_s,
                failures: 0,
            });
            if now_s >= w.start_s + self.cfg.window_s {
                *w = Window {
                    start_s: now_s,
                    failures: 0,
                };
            }
            w.failures += 1;
        }
    }

    /// A login succeeded: the user's count starts again.
    pub fn succeeded(&self, user: &str) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.remove(&Key::User(user.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn a_user_is_locked_after_their_limit_until_the_window_ends() {
        let t = LoginThrottle::new(ThrottleConfig::default());
        for i in 0..5 {
            assert_eq!(t.check("alice", A, 100 + i), Ok(()));
            t.failed("alice", A, 100 + i);
        }
        assert_eq!(t.check("alice", A, 110), Err(890));
        // From another address too: the name is what is guessed at.
        assert!(t.check("alice", B, 110).is_err());
        assert_eq!(t.check("bob", B, 110), Ok(()));
        assert_eq!(t.check("alice", B, 1000), Ok(()));
    }

    #[test]
    fn an_address_is_locked_after_its_limit_whatever_the_names() {
        let t = LoginThrottle::new(ThrottleConfig::default());
        for i in 0..20 {
            t.failed(&format!("user{i}"), A, 100);
        }
        assert!(t.check("someone-new", A, 101).is_err());
        assert_eq!(t.check("someone-new", B, 101), Ok(()));
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = LoginThrottle::new(ThrottleConfig::default());
        for i in 0..(ENTRIES_MAX as u32 + 50) {
            let addr = IpAddr::V4(std::net::Ipv4Addr::from(i));
            t.failed("x", addr, i64::from(i));
        }
        assert!(t.windows.lock().unwrap().len() <= ENTRIES_MAX);
    }
}
