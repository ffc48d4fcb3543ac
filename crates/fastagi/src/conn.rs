//! The connection to Asterisk: a bounded line reader and a writer over one TCP stream.
//!
//! The read buffer holds at most one line of `max_line_bytes` plus what arrived after it; a line
//! that does not end within the limit is an error, never a growing buffer.

use crate::error::AgiError;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    max_line_bytes: usize,
    eof: bool,
}

impl Conn {
    pub fn new(stream: TcpStream, max_line_bytes: usize) -> Self {
        // Room for the longest line, its newline, and a little of what follows it.
        let cap = (max_line_bytes + 1).max(4096);
        Conn {
            stream,
            buf: vec![0u8; cap].into_boxed_slice(),
            start: 0,
            end: 0,
            max_line_bytes,
            eof: false,
        }
    }

    /// The next line, with its `\n` (a last line cut by EOF comes without it). `Ok(None)` at EOF.
    pub async fn read_line(&mut self) -> Result<Option<&[u8]>, AgiError> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
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
            if self.end - self.start > self.max_line_bytes {
                return Err(AgiError::LineTooLong {
                    max: self.max_line_bytes,
                });
            }
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let line = self.start..self.end;
                self.start = self.end;
                return Ok(Some(&self.buf[line]));
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes, first moving a partial line to the front when the buffer's end is full.
    async fn fill(&mut self) -> Result<(), AgiError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            self.eof = true;
        }
        self.end += n;
        Ok(())
    }

    /// Reads whatever has already arrived, without waiting. Returns false when nothing had.
    pub fn fill_nonblocking(&mut self) -> bool {
        if self.eof || self.end == self.buf.len() {
            return false;
        }
        match self.stream.try_read(&mut self.buf[self.end..]) {
            Ok(0) => {
                self.eof = true;
                true
            }
            Ok(n) => {
                self.end += n;
                true
            }
            Err(_) => false,
        }
    }

    /// Looks at the next buffered line: `Some(true)` when it is `HANGUP` (and consumes it),
    /// `Some(false)` when it is something else (left in place), `None` when no whole line is here.
    pub fn take_hangup_line(&mut self) -> Option<bool> {
        let i = memchr::memchr(b'\n', &self.buf[self.start..self.end])?;
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
