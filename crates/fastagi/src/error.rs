//! What can go wrong in a session, as a handler sees it.

use agi::{EncodeError, HeaderError, ReplyError};

#[derive(Debug, thiserror::Error)]
pub enum AgiError {
    /// The channel hung up: a command failed because of it, or Asterisk said so with `HANGUP`.
    /// Commands Asterisk permits on a dead channel (GET VARIABLE, SET VARIABLE, DATABASE *,
    /// EXEC, VERBOSE, NOOP) still work afterwards.
    #[error("the channel hung up")]
    Hangup,
    /// `511`: the command needs a live channel and this one is dead.
    #[error("{command}: not permitted on a dead channel (511)")]
    DeadChannel { command: String },
    /// `510`: Asterisk does not know the command.
    #[error("{command}: invalid or unknown command (510)")]
    InvalidCommand { command: String },
    /// `520`: wrong syntax; the usage text when Asterisk sent one.
    #[error("{command}: invalid command syntax (520)")]
    Usage {
        command: String,
        usage: Option<String>,
    },
    /// The command ran and reported failure (`result=-1` on a live channel, and the like).
    #[error("{command}: failed with result={result}")]
    Failed { command: String, result: String },
    /// `EXEC` of an application Asterisk does not have (`result=-2`).
    #[error("EXEC {application}: no such application")]
    NoSuchApplication { application: String },
    /// Asterisk closed the connection.
    #[error("Asterisk closed the connection")]
    Disconnected,
    /// The reply did not come within `command_timeout_ms` or, for a command Asterisk answers at
    /// once, `immediate_command_timeout_ms` (`setting` says which). The session cannot continue:
    /// a late reply would be taken for the next command's.
    #[error("{command}: no reply within {timeout_ms} ms ({setting})")]
    Timeout {
        command: String,
        timeout_ms: u64,
        setting: &'static str,
    },
    /// A line from Asterisk was longer than `max_line_bytes`.
    #[error("line from Asterisk over {max} bytes (max_line_bytes)")]
    LineTooLong { max: usize },
    /// An encoded command would be longer than `max_line_bytes`.
    #[error("{command}: command line of {bytes} bytes is over {max} (max_line_bytes)")]
    CommandTooLong {
        command: String,
        bytes: usize,
        max: usize,
    },
    #[error("session header: {0}")]
    Header(#[from] HeaderError),
    /// The session header was longer than `max_header_bytes`.
    #[error("session header over {max} bytes (max_header_bytes)")]
    HeaderTooLong { max: usize },
    #[error("reply: {0}")]
    Reply(#[from] ReplyError),
    #[error("command: {0}")]
    Encode(#[from] EncodeError),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// A handler's own error.
    #[error("{0}")]
    Handler(Box<dyn std::error::Error + Send + Sync>),
}

impl AgiError {
    /// Wraps a handler's own error.
    pub fn handler(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        AgiError::Handler(e.into())
    }

    /// True when the error only reflects the call going away (hangup, dead channel, Asterisk
    /// closing): nothing the handler did wrong, and nothing to report as a failure.
    pub fn is_hangup(&self) -> bool {
        matches!(
            self,
            AgiError::Hangup | AgiError::DeadChannel { .. } | AgiError::Disconnected
        )
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            AgiError::Hangup => "hangup",
            AgiError::DeadChannel { .. } => "dead_channel",
            AgiError::InvalidCommand { .. } => "invalid_command",
            AgiError::Usage { .. } => "usage",
            AgiError::Failed { .. } => "failed",
            AgiError::NoSuchApplication { .. } => "no_such_application",
            AgiError::Disconnected => "disconnected",
            AgiError::Timeout { .. } => "timeout",
            AgiError::LineTooLong { .. } | AgiError::CommandTooLong { .. } => "line_too_long",
            AgiError::Header(_) | AgiError::HeaderTooLong { .. } => "header",
            AgiError::Reply(_) => "protocol",
            AgiError::Encode(_) => "encode",
            AgiError::Io(_) => "io",
            AgiError::Handler(_) => "handler",
        }
    }
}
