//! [`Window`]: counts of events over the last `window`, in [`BUCKETS`] buckets, so that a key
//! costs a few words however many events it sees.

/// Buckets a window is cut into: a count leaves the window at most 1/12 of it late.
pub const BUCKETS: i64 = 12;

/// One bucket: its number (time / width) and its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    no: i64,
    matched: u32,
    total: u32,
}

/// Matching and scoped events over a sliding window. Only buckets that saw an event are kept
/// (at most [`BUCKETS`]), so a key seen once holds one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    buckets: Vec<Bucket>,
}

/// The sums over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub matched: u64,
    pub total: u64,
}

impl Window {
    /// The width of one bucket of a window of `window_us`.
    pub fn width_us(window_us: i64) -> i64 {
        (window_us / BUCKETS).max(1)
    }

    /// Counts an event at `at_us` (`matched`: it met the rule's condition). An event older
    /// than the window at `now_us` is not counted.
    pub fn add(&mut self, window_us: i64, now_us: i64, at_us: i64, matched: bool) {
        let w = Self::width_us(window_us);
        let no = at_us.div_euclid(w);
        let oldest = now_us.div_euclid(w) - BUCKETS + 1;
        if no < oldest {
            return;
        }
        self.prune(oldest);
        let i = match self.buckets.iter().rposition(|b| b.no <= no) {
            Some(i) if self.buckets[i].no == no => i,
            Some(i) => {
                self.buckets.insert(
                    i + 1,
                    Bucket {
                        no,
                        matched: 0,
                        total: 0,
                    },
                );
                i + 1
            }
            None => {
                self.buckets.insert(
                    0,
                    Bucket {
                        no,
                        matched: 0,
                        total: 0,
                    },
                );
                0
            }
        };
        let b = &mut self.buckets[i];
        b.total = b.total.saturating_add(1);
        if matched {
            b.matched = b.matched.saturating_add(1);
        }
    }

    /// The sums over the window ending at `now_us`.
    pub fn counts(&self, window_us: i64, now_us: i64) -> Counts {
        let w = Self::width_us(window_us);
        let oldest = now_us.div_euclid(w) - BUCKETS + 1;
        self.buckets
            .iter()
            .filter(|b| b.no >= oldest)
            .fold(Counts::default(), |c, b| Counts {
                matched: c.matched + u64::from(b.matched),
                total: c.total + u64::from(b.total),
            })
    }

    /// Drops the buckets that left the window at `now_us`; true when none is left.
    pub fn expire(&mut self, window_us: i64, now_us: i64) -> bool {
        let w = Self::width_us(window_us);
        self.prune(now_us.div_euclid(w) - BUCKETS + 1);
        self.buckets.is_empty()
    }

    fn prune(&mut self, oldest: i64) {
        let keep = self
            .buckets
            .iter()
            .position(|b| b.no >= oldest)
            .unwrap_or(self.buckets.len());
        if keep > 0 {
            self.buckets.drain(..keep);
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    #[test]
    fn events_leave_the_window() {
        let mut w = Window::default();
        let win = 60 * S;
        for t in 0..30 {
            w.add(win, t * S, t * S, t % 3 == 0);
        }
        assert_eq!(
            w.counts(win, 29 * S),
            Counts {
                matched: 10,
                total: 30
            }
        );
        // 60 s after the last event, all are gone (to a bucket's width).
        assert_eq!(w.counts(win, 29 * S + win + 5 * S).total, 0);
        assert!(w.expire(win, 29 * S + win + 5 * S));
    }

    #[test]
    fn late_events_land_in_their_bucket_and_too_old_ones_are_ignored() {
        let mut w = Window::default();
        let win = 60 * S;
        w.add(win, 50 * S, 50 * S, true);
        w.add(win, 50 * S, 20 * S, true);
        w.add(win, 200 * S, 100 * S, true);
        // At 100 s the window holds the event at 50 s; the one at 100 s came at 200 s, too old.
        assert_eq!(w.counts(win, 100 * S).matched, 1);
        assert!(w.buckets.len() <= BUCKETS as usize);
        assert!(w.buckets.windows(2).all(|p| p[0].no < p[1].no));
    }
}
