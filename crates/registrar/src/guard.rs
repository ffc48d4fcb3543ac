//! Two bounded tables that protect the registrar: failed digest attempts per source address
//! (rate limiting guessing), and server transactions (RFC 3261 17.2: a retransmitted request
//! gets the response already sent, or nothing while the first copy is still being processed).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Failed attempts per source address within a window; over the limit, the source's requests
/// are dropped unanswered until its window ends.
pub struct FailedAttempts {
    windows: HashMap<IpAddr, (u64, u32)>,
    failures_max: u32,
    window_s: u64,
    entries_max: usize,
}

impl FailedAttempts {
    pub fn new(failures_max: u32, window_s: u64, entries_max: usize) -> FailedAttempts {
        FailedAttempts {
            windows: HashMap::new(),
            failures_max,
            window_s: window_s.max(1),
            entries_max: entries_max.max(1),
        }
    }

    /// Whether requests from `ip` are refused now.
    pub fn blocked(&self, ip: IpAddr, now_s: u64) -> bool {
        self.failures_max > 0
            && self
                .windows
                .get(&ip)
                .is_some_and(|&(start, n)| n >= self.failures_max && now_s < start + self.window_s)
    }

    /// Counts a failure; returns whether it just crossed the limit.
    pub fn failed(&mut self, ip: IpAddr, now_s: u64) -> bool {
        if !self.windows.contains_key(&ip) && self.windows.len() >= self.entries_max {
            // Full: drop the windows that ended; if none did, the oldest window.
            let window_s = self.window_s;
            self.windows
                .retain(|_, (start, _)| now_s < *start + window_s);
            if self.windows.len() >= self.entries_max
                && let Some(oldest) = self
                    .windows
                    .iter()
                    .min_by_key(|(_, w)| w.0)
                    .map(|(k, _)| *k)
            {
                self.windows.remove(&oldest);
            }
        }
        let w = self.windows.entry(ip).or_insert((now_s, 0));
        if now_s >= w.0 + self.window_s {
            *w = (now_s, 0);
        }
        w.1 += 1;
        w.1 == self.failures_max
    }

    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

/// The state of a server transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxState {
    /// The request is being processed: a retransmission is absorbed.
    Trying,
    /// The final response, sent again for each retransmission.
    Completed(std::sync::Arc<[u8]>),
}

/// What to do with an arriving request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxVerdict {
    New,
    Absorb,
    Resend(std::sync::Arc<[u8]>),
}

/// Server transactions keyed by the top Via's branch and sent-by and the method (ACK matches
/// its INVITE). Kept `linger_ms` after the final response (Timer J: 64*T1 = 32 s for UDP) and at
/// most `entries_max`; past that, the oldest goes first (a retransmission that then arrives is
/// processed again, which the REGISTER logic treats as a repeat of an applied request).
pub struct Transactions {
    map: HashMap<Box<str>, TxState>,
    order: VecDeque<(u64, Box<str>)>,
    entries_max: usize,
}

impl Transactions {
    pub fn new(entries_max: usize) -> Transactions {
        Transactions {
            map: HashMap::new(),
            order: VecDeque::new(),
            entries_max: entries_max.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn begin(&mut self, key: &str, now_ms: u64, linger_ms: u64) -> TxVerdict {
        self.expire(now_ms);
        match self.map.get(key) {
            Some(TxState::Trying) => return TxVerdict::Absorb,
            Some(TxState::Completed(r)) => return TxVerdict::Resend(r.clone()),
            None => {}
        }
        while self.map.len() >= self.entries_max {
            let Some((_, k)) = self.order.pop_front() else {
                break;
            };
            self.map.remove(&k);
        }
        let key: Box<str> = key.into();
        self.map.insert(key.clone(), TxState::Trying);
        self.order.push_back((now_ms + linger_ms, key));
        TxVerdict::New
    }

    /// Records the final response; `keep` false (reliable transports) ends the transaction.
    pub fn complete(&mut self, key: &str, response: &[u8], keep: bool) {
        if keep {
            if let Some(s) = self.map.get_mut(key) {
                *s = TxState::Completed(response.into());
            }
        } else {
            self.map.remove(key);
        }
    }

    fn expire(&mut self, now_ms: u64) {
        while let Some((t, _)) = self.order.front() {
            if *t > now_ms {
                break;
            }
            let (_, k) = self.order.pop_front().expect("front exists");
            // Only a completed transaction lapses; one still processing keeps absorbing.
            if matches!(self.map.get(&k), Some(TxState::Completed(_)) | None) {
                self.map.remove(&k);
            } else {
                self.order.push_back((now_ms + 1000, k));
                break;
            }
        }
    }
}

/// The transaction key of a request: `branch|sent-by|method`, or `None` when the top Via has no
/// RFC 3261 branch (`z9hG4bK`), in which case the request is simply processed again.
pub fn transaction_key(msg: &sip::Message<'_>, method: &str) -> Option<String> {
    let via = sip::split_list(msg.header("via")?).next()?;
    let (head, params) = via.split_at(via.find(';')?);
    let sent_by = head.split_ascii_whitespace().nth(1)?;
    let branch = crate::request::params(params)
        .find(|(k, _)| k.eq_ignore_ascii_case("branch"))
        .and_then(|(_, v)| v)?;
    if !branch.starts_with("z9hG4bK") {
        return None;
    }
    let method = if method == "ACK" { "INVITE" } else { method };
    Some(format!(
        "{branch}|{}|{method}",
        sent_by.to_ascii_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_attempts_block_for_the_window() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let mut f = FailedAttempts::new(3, 60, 10);
        assert!(!f.failed(ip, 100));
        assert!(!f.failed(ip, 101));
        assert!(!f.blocked(ip, 101));
        assert!(f.failed(ip, 102));
        assert!(f.blocked(ip, 159));
        assert!(!f.blocked(ip, 160));
    }

    #[test]
    fn transactions_absorb_then_resend_then_lapse() {
        let mut t = Transactions::new(2);
        assert_eq!(t.begin("a", 0, 32_000), TxVerdict::New);
        assert_eq!(t.begin("a", 1, 32_000), TxVerdict::Absorb);
        t.complete("a", b"200", true);
        assert_eq!(
            t.begin("a", 2, 32_000),
            TxVerdict::Resend(b"200"[..].into())
        );
        assert_eq!(t.begin("a", 32_001, 32_000), TxVerdict::New);
        // Bounded: the oldest goes.
        t.begin("b", 32_002, 32_000);
        t.begin("c", 32_003, 32_000);
        assert_eq!(t.len(), 2);
    }
}
