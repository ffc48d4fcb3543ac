//! Calls whose packets were not all archived, named: the counters say how many packets were
//! lost and why; these lists say whose, so that an operator can tell which calls' pcaps are
//! incomplete. A stream without a call is named `stream SRC>DST 0xSSRC` among them. Each reason names at most [`NAMED_CALLS_MAX`] calls (the first ones met), so
//! the lists stay small whatever the capture; a named call is logged once when it is named.

use std::sync::{Arc, Mutex};

/// Calls named per reason, at most.
pub const NAMED_CALLS_MAX: usize = 10;

/// Why some of a call's packets are not in the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The queue to the archive thread was full (a live source never waits).
    QueueFull,
    /// The archive's limits (calls in progress, bytes per call or in all) or a link type
    /// other than the call's first packet's.
    Limits,
    /// Media that arrived after its call was closed and written.
    Late,
    /// Media of a call the monitor had already closed, forgotten unwritten.
    Orphaned,
    /// Writing the call's members failed.
    WriteError,
}

const REASONS: [(Loss, &str); 5] = [
    (Loss::QueueFull, "queue full"),
    (Loss::Limits, "at limits"),
    (Loss::Late, "late media"),
    (Loss::Orphaned, "orphaned"),
    (Loss::WriteError, "write errors"),
];

#[derive(Debug, Default)]
struct Named {
    calls: Vec<Arc<str>>,
    /// Another call was met once the list was full.
    more: bool,
}

/// The calls named per reason, shared by the taps (queue full) and the archive thread.
#[derive(Debug, Default)]
pub(crate) struct LossNames(Mutex<[Named; REASONS.len()]>);

impl LossNames {
    /// Names `call` under `why`, unless it is already named there or the list is full.
    pub fn add(&self, why: Loss, call: &Arc<str>) {
        let i = REASONS.iter().position(|(r, _)| *r == why).unwrap_or(0);
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let named = &mut all[i];
        if named.calls.iter().any(|c| c == call) {
            return;
        }
        if named.calls.len() >= NAMED_CALLS_MAX {
            named.more = true;
            return;
        }
        named.calls.push(call.clone());
        tracing::warn!(call_id = %call, reason = REASONS[i].1, "some of the call's packets are not in the archive");
    }

    /// Whether the list of `why` is full (callers with many calls to name stop early).
    pub fn full(&self, why: Loss) -> bool {
        let i = REASONS.iter().position(|(r, _)| *r == why).unwrap_or(0);
        self.0.lock().unwrap_or_else(|p| p.into_inner())[i]
            .calls
            .len()
            >= NAMED_CALLS_MAX
    }

    /// One line naming every call listed, `None` when every call was archived whole:
    /// `calls not archived whole: at limits: ID, ID; late media: ID and more`.
    pub fn line(&self) -> Option<String> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let parts: Vec<String> = REASONS
            .iter()
            .zip(all.iter())
            .filter(|(_, n)| !n.calls.is_empty())
            .map(|((_, reason), n)| {
                let ids: Vec<&str> = n.calls.iter().map(|c| &**c).collect();
                let more = if n.more { " and more" } else { "" };
                format!("{reason}: {}{more}", ids.join(", "))
            })
            .collect();
        (!parts.is_empty()).then(|| format!("calls not archived whole: {}", parts.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_names_a_call_once_and_at_most_the_bound() {
        let names = LossNames::default();
        assert_eq!(names.line(), None);
        let a: Arc<str> = Arc::from("a@x");
        names.add(Loss::Late, &a);
        names.add(Loss::Late, &a);
        names.add(Loss::Orphaned, &a);
        assert_eq!(
            names.line().unwrap(),
            "calls not archived whole: late media: a@x; orphaned: a@x"
        );
        for i in 0..NAMED_CALLS_MAX + 3 {
            names.add(Loss::Limits, &Arc::from(format!("c{i}").as_str()));
        }
        assert!(names.full(Loss::Limits));
        let line = names.line().unwrap();
        assert!(line.contains("at limits: c0, c1,"), "{line}");
        assert!(
            line.contains(&format!("c{} and more", NAMED_CALLS_MAX - 1)),
            "{line}"
        );
        assert!(!line.contains(&format!("c{}", NAMED_CALLS_MAX)), "{line}");
    }
}
