//! Steps of the capture's clock. A capture whose time jumps forward by more than a day between
//! two frames (a sensor whose clock was set while it captured, files of different years read
//! as one, a capture tool that wrote bad timestamps) did not wait that long: measured across
//! the jump, every timeout would close the open calls, streams and registrations before the
//! next frame is read, and an INVITE would be closed unanswered just before its 200 OK.
//!
//! So a forward jump over [`CLOCK_STEP_MIN_NS`] is a clock step: the reading thread logs it
//! (the capture time before and after, a few times per run) and tells every stage, and each
//! keeps its last [`CLOCK_STEPS_MAX`] steps in [`ClockSteps`] to measure idle times with the
//! steps taken out. Records keep the frames' own times: a call answered across a step says
//! so in its answer time, as tshark shows it.

use std::collections::VecDeque;

/// A forward jump of the capture time longer than this (one day) is a step of the clock, not
/// time that passed.
pub const CLOCK_STEP_MIN_NS: i64 = 86_400 * 1_000_000_000;

/// Steps remembered by each stage. Past it the oldest is forgotten: something idle since
/// before it is then measured across it.
pub const CLOCK_STEPS_MAX: usize = 64;

/// Steps logged in a run; the others are counted ([`crate::Counters::clock_steps`]).
pub const CLOCK_STEPS_LOGGED_MAX: u64 = 8;

/// A forward jump of the capture's clock: the latest time before it and the first after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockStep {
    pub before_ns: i64,
    pub after_ns: i64,
}

impl ClockStep {
    /// The step from the latest time seen so far to a frame's, if the jump is one.
    pub fn between(latest_ns: i64, ts_ns: i64) -> Option<ClockStep> {
        (ts_ns.saturating_sub(latest_ns) > CLOCK_STEP_MIN_NS).then_some(ClockStep {
            before_ns: latest_ns,
            after_ns: ts_ns,
        })
    }

    fn len_ns(&self) -> i64 {
        self.after_ns.saturating_sub(self.before_ns)
    }

    /// Logs the step, the `n`th of the run (from 1): each of the first
    /// [`CLOCK_STEPS_LOGGED_MAX`], then once that the rest go unlogged.
    pub fn log(&self, n: u64) {
        let time = |ns: i64| utc::format_us(ns.div_euclid(1000));
        if n <= CLOCK_STEPS_LOGGED_MAX {
            tracing::warn!(
                before = %time(self.before_ns),
                after = %time(self.after_ns),
                jump_s = self.len_ns() / 1_000_000_000,
                "the capture's clock jumped forward by more than a day: taken as a step of the \
                 clock, not as time that passed; calls, streams and registrations stay open \
                 across it"
            );
        }
        if n == CLOCK_STEPS_LOGGED_MAX {
            tracing::warn!(
                "{CLOCK_STEPS_LOGGED_MAX} clock steps in this capture: the next ones are counted, \
                 not logged"
            );
        }
    }
}

/// The steps a stage has been told of, oldest first (at most [`CLOCK_STEPS_MAX`]).
#[derive(Debug, Clone, Default)]
pub struct ClockSteps {
    steps: VecDeque<ClockStep>,
}

impl ClockSteps {
    pub fn push(&mut self, step: ClockStep) {
        if self.steps.len() == CLOCK_STEPS_MAX {
            self.steps.pop_front();
        }
        self.steps.push_back(step);
    }

    /// The time from `then_ns` to `now_ns` less the steps between them: how long something
    /// last seen at `then_ns` has really been idle.
    pub fn elapsed(&self, then_ns: i64, now_ns: i64) -> i64 {
        let mut elapsed = now_ns.saturating_sub(then_ns);
        for s in self.steps.iter().rev() {
            if s.before_ns < then_ns {
                break;
            }
            if s.after_ns <= now_ns {
                elapsed = elapsed.saturating_sub(s.len_ns());
            }
        }
        elapsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = CLOCK_STEP_MIN_NS;
    const S: i64 = 1_000_000_000;

    #[test]
    fn idle_time_leaves_out_the_steps_after_the_last_activity() {
        assert_eq!(
            ClockStep::between(0, DAY),
            None,
            "a day is time that passed"
        );
        let step = ClockStep::between(10 * S, 10 * S + 30 * 365 * DAY).unwrap();
        let mut steps = ClockSteps::default();
        assert_eq!(steps.elapsed(S, 10 * S), 9 * S);
        steps.push(step);
        // Seen 9 s before the step, now 5 s after it: idle 14 s.
        assert_eq!(steps.elapsed(S, step.after_ns + 5 * S), 14 * S);
        // Seen after the step: nothing to take out.
        assert_eq!(steps.elapsed(step.after_ns, step.after_ns + 5 * S), 5 * S);
        // Two steps after the last activity both go.
        let second = ClockStep::between(step.after_ns + S, step.after_ns + 3 * DAY).unwrap();
        steps.push(second);
        assert_eq!(steps.elapsed(S, second.after_ns + S), 11 * S);
        // Bounded: the oldest steps are forgotten first, and an idle time from before them is
        // then measured across them.
        let mut t = second.after_ns + 2 * S;
        for _ in 0..CLOCK_STEPS_MAX {
            let later = ClockStep::between(t, t + 2 * DAY).unwrap();
            steps.push(later);
            t = later.after_ns;
        }
        assert_eq!(steps.steps.len(), CLOCK_STEPS_MAX);
        assert_eq!(steps.elapsed(S, second.after_ns + S), second.after_ns);
    }
}
