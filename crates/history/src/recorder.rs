//! A sampling clock: every `interval_s`, the figures a source returns go into the history, on a
//! thread of its own (SQLite blocks); old buckets are dropped once an hour. A tick that fails is
//! handed to the caller's `on_error` and the next one is tried: recording never stops whoever
//! started it.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{History, HistoryError};

/// How often old buckets are dropped.
const RETAIN_EVERY_S: i64 = 3_600;

/// What a source returns at each tick: figures, and the latencies observed since the last tick
/// per latency series (`(seconds, count)` pairs; see [`History::record_tick`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tick {
    pub samples: Vec<(String, f64)>,
    pub latencies: Vec<(String, Vec<(f64, u64)>)>,
}

impl From<Vec<(String, f64)>> for Tick {
    fn from(samples: Vec<(String, f64)>) -> Tick {
        Tick {
            samples,
            latencies: Vec::new(),
        }
    }
}

/// The running clock; [`Recorder::stop`] ends it after the tick in progress.
pub struct Recorder {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<History>,
}

impl Recorder {
    /// Ticks at once, then every `interval_s`, until stopped.
    pub fn spawn(
        mut history: History,
        interval_s: u32,
        mut source: impl FnMut() -> Tick + Send + 'static,
        mut on_error: impl FnMut(HistoryError) + Send + 'static,
    ) -> std::io::Result<Recorder> {
        let (stop, stopped) = mpsc::channel::<()>();
        let interval = Duration::from_secs(interval_s.max(1).into());
        let thread = std::thread::Builder::new()
            .name("history".into())
            .spawn(move || {
                let mut next = Instant::now();
                let mut retained_at = i64::MIN;
                loop {
                    let now_s = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() as i64);
                    let tick = source();
                    let refs: Vec<(&str, f64)> =
                        tick.samples.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                    let latencies: Vec<(&str, &[(f64, u64)])> = tick
                        .latencies
                        .iter()
                        .map(|(n, o)| (n.as_str(), o.as_slice()))
                        .collect();
                    if let Err(e) = history.record_tick(now_s, &refs, &latencies) {
                        on_error(e);
                    }
                    if now_s.saturating_sub(retained_at) >= RETAIN_EVERY_S {
                        retained_at = now_s;
                        if let Err(e) = history.retain(now_s) {
                            on_error(e);
                        }
                    }
                    // A fixed rate: a slow tick does not push the later ones back; a tick
                    // missed altogether is skipped.
                    next += interval;
                    let now = Instant::now();
                    while next <= now {
                        next += interval;
                    }
                    match stopped.recv_timeout(next - now) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return history,
                    }
                }
            })?;
        Ok(Recorder { stop, thread })
    }

    /// Stops the clock and hands the history back.
    pub fn stop(self) -> History {
        let _ = self.stop.send(());
        self.thread.join().expect("the history thread panicked")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HistoryConfig;

    #[test]
    fn it_ticks_at_once_and_every_interval_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let h = History::open(
            &dir.path().join("h.sqlite3"),
            HistoryConfig::with_interval(1),
        )
        .unwrap();
        let mut n = 0.0;
        let r = Recorder::spawn(
            h,
            1,
            move || {
                n += 1.0;
                vec![("ticks".to_owned(), n)].into()
            },
            |e| panic!("{e}"),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(1_500));
        let mut h = r.stop();
        let points = h.points("ticks", 0, 0, i64::MAX).unwrap();
        let count: u64 = points.iter().map(|p| p.count).sum();
        assert_eq!(count, 2, "at once and one second later: {points:?}");
    }
}
