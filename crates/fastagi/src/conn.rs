//! The connection to Asterisk: a bounded line reader and a writer over one TCP stream.
//!
//! The read buffer starts small (most lines are under 100 bytes) and grows, never past one line of
//! `max_line_bytes` plus what arrived after it; a line that does not end within the limit is an
//! error, never a growing buffer.

use crate::error::AgiError;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// First size of the read buffer: a whole header (about 600 bytes) in one read.
const INITIAL_BUFFER_BYTES: usize = 1024;

pub(crate) struct Conn {
    stream: TcpStream,
    /// Bytes read and not yet consumed are `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
    /// The buffer never grows past this: one longest line, its newline, and room to read.
    buf_max: usize,
    max_line_bytes: usize,
    eof: bool,
}

impl Conn {
    pub fn new(stream: TcpStream, max_line_bytes: usize) -> Self {
        let buf_max = (max_line_bytes + 1).max(INITIAL_BUFFER_BYTES) + INITIAL_BUFFER_BYTES;
        Conn {
            stream,
            buf: Vec::with_capacity(INITIAL_BUFFER_BYTES),
            start: 0,
            buf_max,
            max_line_bytes,
            eof: false,
        }
    }

    /// The next line, with its `\n` (a last line cut by EOF comes without it). `Ok(None)` at EOF.
    pub async fn read_line(&mut self) -> Result<Option<&[u8]>, AgiError> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                // The buffer may hold more than `max_line_bytes`; the limit is on the line.
                let content = self.buf[self.start..self.start + i].strip_suffix(b"\r");
                if content.map_or(i, <[u8]>::len) > self.max_line_bytes {
                    return Err(AgiError::LineTooLong {
                        max: self.max_line_bytes,
                    });
                }
                let line = self.start..self.start + i + 1;
                self.start += i + 1;
                return Ok(Some(&self.buf[line]));
            }
            if self.buf.len() - self.start > self.max_line_bytes {
                return Err(AgiError::LineTooLong {
                    max: self.max_line_bytes,
                });
            }
            if self.eof {
                if self.start == self.buf.len() {
                    return Ok(None);
                }
                let line = self.start..self.buf.len();
                self.start = self.buf.len();
                return Ok(Some(&self.buf[line]));
            }
            self.fill().await?;
        }
    }

    /// Makes room to read: drops consumed bytes, and grows the buffer (within `buf_max`) only
    /// when a partial line fills it.
    fn make_room(&mut self) {
        if self.start > 0 && (self.start == self.buf.len() || self.buf.len() == self.buf.capacity())
        {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.len() == self.buf.capacity() && self.buf.capacity() < self.buf_max {
            let grow = self.buf.capacity().min(self.buf_max - self.buf.capacity());
            self.buf.reserve_exact(grow);
        }
    }

    /// Reads more bytes into the spare capacity (not zeroed first: `read_buf` writes only what
    /// arrived).
    async fn fill(&mut self) -> Result<(), AgiError> {
        self.make_room();
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            self.eof = true;
        }
        Ok(())
    }

    /// Reads whatever has already arrived, without waiting. Returns false when nothing had.
    pub fn fill_nonblocking(&mut self) -> bool {
        if self.eof {
            return false;
        }
        self.make_room();
        if self.buf.len() == self.buf.capacity() {
            return false;
        }
        match self.stream.try_read_buf(&mut self.buf) {
            Ok(0) => {
                self.eof = true;
                true
            }
            Ok(_) => true,
            Err(_) => false,
        }
    }

    /// Looks at the next buffered line: `Some(true)` when it is `HANGUP` (and consumes it),
    /// `Some(false)` when it is something else (left in place), `None` when no whole line is here.
    pub fn take_hangup_line(&mut self) -> Option<bool> {
        let i = memchr::memchr(b'\n', &self.buf[self.start..])?;
        let line = &self.buf[self.start..self.start + i];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line == b"HANGUP" {
            self.start += i + 1;
            Some(true)
        } else {
            Some(false)
        }
    }

    pub fn at_eof(&self) -> bool {
        self.eof
    }

    /// Waits until the socket has something to read (or is closed).
    pub async fn readable(&self) -> std::io::Result<()> {
        self.stream.readable().await
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
