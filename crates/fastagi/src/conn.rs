//! The connection to Asterisk: a bounded line reader and a writer over one TCP stream.

use crate::error::AgiError;
use crate::lines::{LineBuffer, LineError};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub(crate) struct Conn {
    stream: TcpStream,
    lines: LineBuffer,
}

impl From<LineError> for AgiError {
    fn from(e: LineError) -> Self {
        match e {
            LineError::TooLong { max } => AgiError::LineTooLong { max },
            LineError::Io(e) => AgiError::Io(e),
        }
    }
}

impl Conn {
    pub fn new(stream: TcpStream, max_line_bytes: usize) -> Self {
        Conn {
            stream,
            lines: LineBuffer::new(max_line_bytes),
        }
    }

    /// The next line, with its `\n` (a last line cut by EOF comes without it). `Ok(None)` at EOF.
    pub async fn read_line(&mut self) -> Result<Option<&[u8]>, AgiError> {
        Ok(self.lines.read_line(&mut self.stream).await?)
    }

    /// Reads whatever has already arrived, without waiting. Returns false when nothing had.
    pub fn fill_nonblocking(&mut self) -> bool {
        self.lines.fill_now(&mut self.stream)
    }

    pub fn take_hangup_line(&mut self) -> Option<bool> {
        self.lines.take_hangup_line()
    }

    pub fn at_eof(&self) -> bool {
        self.lines.at_eof()
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> Result<(), AgiError> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Ends the session as Asterisk expects: optionally a `failure` line (AGISTATUS=FAILURE),
    /// then our half-close, then reading until Asterisk closes its side (it sends a last
    /// `HANGUP` first), for at most `linger`. Closing without reading would turn unread bytes
    /// into a reset that can destroy the `failure` line before Asterisk reads it.
    pub async fn close(mut self, failure: bool, linger: Duration) -> usize {
        if failure {
            let _ = self.stream.write_all(b"failure\n").await;
        }
        let _ = self.stream.shutdown().await;
        let mut hangups = 0;
        let drain = async {
            while let Ok(Some(line)) = self.read_line().await {
                if line.strip_suffix(b"\n").unwrap_or(line) == b"HANGUP" {
                    hangups += 1;
                }
            }
        };
        let _ = tokio::time::timeout(linger, drain).await;
        hangups
    }
}
