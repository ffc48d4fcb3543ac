//! SIGTERM and SIGINT (ctrl-c) for the commands that run until stopped: a thread that waits for
//! either and stops what it was given. The libraries install no handlers of their own.

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

/// While the returned handle is open, SIGTERM or SIGINT stops `sensor` (its calls in progress are
/// then reported and stored) instead of killing the process.
pub fn stop_on_signals(sensor: sensor::StopSignal) -> std::io::Result<Handle> {
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                sensor.stop();
            }
        })?;
    Ok(handle)
}
