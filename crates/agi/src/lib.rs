//! The AGI wire protocol, as Asterisk speaks it. **No IO**: every type here works on bytes and
//! strings that the caller has already read, so the same code serves the FastAGI server, the
//! script relay, the Asterisk emulator and the fuzz targets.
//!
//! Start reading at:
//! - [`Header`]: the `agi_*: value` block that opens every session, and the [`Route`] (script
//!   path and query parameters) taken from `agi_network_script`.
//! - [`Command`]: typed builders for all 47 AGI commands, encoded with Asterisk's quoting rules;
//!   [`split_args`] is the inverse (Asterisk's own argument parser), used by the emulator.
//! - [`ReplyParser`]: turns reply lines into [`Event`]s: a final [`Response`], GOSUB's provisional
//!   `100 result=0 Trying...`, the multi-line `520` usage text, and the unsolicited `HANGUP`.
//! - [`Reply`]'s typed accessors ([`Reply::digit`], [`Reply::variable`],
//!   [`Reply::channel_status`], ...) for replies whose result has a meaning.
//!
//! Facts about the protocol that this crate relies on were taken from transcripts of a real
//! Asterisk 22 and are cited next to the code that depends on them.

mod args;
mod command;
mod header;
mod reply;
mod route;

pub use args::{ArgsError, split_args};
pub use command::{
    Command, EncodeError, MAX_COMMAND_ARGS, command_name, encode_command, needs_live_channel,
};
pub use header::{Header, HeaderError, HeaderLimits, HeaderReader};
pub use reply::{ChannelStatus, Event, GetDataResult, Reply, ReplyError, ReplyParser, Response};
pub use route::{Route, percent_decode};

/// A line as text: borrowed when it is valid UTF-8, as Asterisk's lines nearly always are (the
/// check is a fast scan), else with U+FFFD for each bad sequence.
fn line_text(line: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(line) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(line),
    }
}
