//! Asterisk's side of FastAGI, emulated over real sockets: it connects, sends the session header
//! exactly as Asterisk 22.10.1 does, and answers each command as Asterisk would.
//!
//! It is strict where Asterisk is: it answers only the first of several commands that arrive in
//! one write (and reports [`Violation::Pipelined`]), sends `HANGUP` when the caller hangs up and
//! again when the server closes, refuses media commands on a dead channel with 511, and reads a
//! `failure` line as AGISTATUS=FAILURE. It drives the FastAGI integration tests and
//! `tandem bench agi`.
//!
//! Start reading at [`run`] (one session by a [`Plan`]), then [`Channel::execute`] (the
//! answers), then [`run_load`] (many sessions at once). [`Dialplan`] loads `extensions.conf`
//! text and [`Call::run`] runs a call through it, its AGI applications through [`run`] or
//! [`run_classic`], so that dialplan meant for an operator is tested as written.

mod channel;
mod classic;
pub mod dialplan;
pub mod freepbx;
mod load;
pub mod pbx;
mod session;
mod transcript;

pub use channel::{Answer, COMMANDS, Channel, mset_pairs};
pub use classic::run_classic;
pub use dialplan::{AgiHost, Call, CallEnd, Dialplan, markdown_block};
pub use load::{Load, LoadReport, Target, run_load};
pub use session::{AgiStatus, EmuError, Outcome, Plan, Violation, header, run, run_from};
pub use transcript::{HangupFacts, Line, Side, Transcript, TranscriptError};

/// Where the shared test material lives (`TANDEM_SHARED_DIR`, or `shared/` beside the
/// repository), if it is there.
pub fn shared_dir() -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("TANDEM_SHARED_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
    };
    dir.is_dir().then_some(dir)
}
