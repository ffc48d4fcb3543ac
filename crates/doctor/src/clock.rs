//! The system clock: synchronised or not, as the kernel's NTP state says (adjtimex(2) with no
//! change asked: `STA_UNSYNC`, the `TIME_ERROR` state, the maximum error). A sensor stamps its
//! calls and a collector compares them across machines, so an unsynchronised clock is a
//! warning with the fix.

use crate::Finding;

const GROUP: &str = "clock";
/// A synchronised clock whose maximum error is larger than this is warned about.
pub const MAX_ERROR_WARN_US: i64 = 500_000;

/// The kernel's NTP state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockState {
    /// Whether the kernel says the clock is synchronised (no `STA_UNSYNC`, not `TIME_ERROR`).
    pub synchronised: bool,
    /// Maximum error, microseconds.
    pub max_error_us: i64,
    /// Estimated error, microseconds.
    pub est_error_us: i64,
}

/// Reads the kernel's state (adjtimex with `modes` 0 changes nothing and needs no privilege).
pub fn read() -> Result<ClockState, std::io::Error> {
    // SAFETY: an all-zero timex is a valid value; modes 0 asks for nothing to be set.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, writable timex.
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ClockState {
        synchronised: state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        max_error_us: tx.maxerror as i64,
        est_error_us: tx.esterror as i64,
    })
}

pub const FIX: &str = "run an NTP client:\n\
Debian: apt-get install chrony (or systemd-timesyncd, then: timedatectl set-ntp true)\n\
SNG7: yum install chrony && systemctl enable --now chronyd";

/// A finding on the clock.
pub fn check(state: Result<ClockState, std::io::Error>) -> Finding {
    let check = "synchronised";
    match state {
        Err(e) => Finding::warn(GROUP, check, format!("cannot ask the kernel: {e}"), FIX),
        Ok(s) if !s.synchronised => Finding::warn(
            GROUP,
            check,
            "no: the kernel marks the clock unsynchronised; sensors' and the collector's call \
             times may disagree",
            FIX,
        ),
        Ok(s) if s.max_error_us > MAX_ERROR_WARN_US => Finding::warn(
            GROUP,
            check,
            format!("yes, but the maximum error is {} ms", s.max_error_us / 1000),
            "check the NTP client's sources: chronyc sources (or timedatectl timesync-status)",
        ),
        Ok(s) => Finding::ok(
            GROUP,
            check,
            format!(
                "yes (maximum error {} ms, estimated {} ms)",
                s.max_error_us / 1000,
                s.est_error_us / 1000
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_clock_is_read_and_judged() {
        let state = read().unwrap();
        let f = check(Ok(state));
        assert_eq!(
            f.status == crate::Status::Ok,
            state.synchronised && state.max_error_us <= MAX_ERROR_WARN_US,
            "{f:?}"
        );
        let unsync = ClockState {
            synchronised: false,
            max_error_us: 16_000_000,
            est_error_us: 0,
        };
        let f = check(Ok(unsync));
        assert_eq!(f.status, crate::Status::Warn);
        assert!(f.fix.unwrap().contains("chrony"));
    }
}
