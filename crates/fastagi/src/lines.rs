//! A bounded line buffer over any async reader: the connection to Asterisk and a script's stdout
//! both read through it.
//!
//! The buffer starts small (most lines are under 100 bytes) and grows, never past one line of
//! `max_line_bytes` plus room to read; a line that does not end within the limit is an error,
//! never a growing buffer. Every method is cancel-safe: bytes are kept only once a read completes,
//! so a `select!` may drop a pending read without losing anything.

use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt};

/// First size of the buffer: a whole session header (about 600 bytes) in one read.
const INITIAL_BUFFER_BYTES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LineError {
    #[error("line over {max} bytes")]
    TooLong { max: usize },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub(crate) struct LineBuffer {
    /// Bytes read and not yet consumed are `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
    buf_max: usize,
    max_line_bytes: usize,
    eof: bool,
}

impl LineBuffer {
    pub fn new(max_line_bytes: usize) -> Self {
        let buf_max = (max_line_bytes + 1).max(INITIAL_BUFFER_BYTES) + INITIAL_BUFFER_BYTES;
        LineBuffer {
            buf: Vec::with_capacity(INITIAL_BUFFER_BYTES),
            start: 0,
            buf_max,
            max_line_bytes,
            eof: false,
        }
    }

    /// The next line, with its `\n` (a last line cut by EOF comes without it). `Ok(None)` at EOF.
    pub async fn read_line<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Option<&[u8]>, LineError> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                // The buffer may hold more than `max_line_bytes`; the limit is on the line.
                let content = self.buf[self.start..self.start + i].strip_suffix(b"\r");
                if content.map_or(i, <[u8]>::len) > self.max_line_bytes {
                    return Err(LineError::TooLong {
                        max: self.max_line_bytes,
                    });
                }
                let line = self.start..self.start + i + 1;
                self.start += i + 1;
                return Ok(Some(&self.buf[line]));
            }
            if self.buf.len() - self.start > self.max_line_bytes {
                return Err(LineError::TooLong {
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
            self.fill(reader).await?;
        }
    }

    /// Reads more bytes into the spare capacity. Cancel-safe: `read_buf` keeps bytes only once
    /// the read completes.
    pub async fn fill<R: AsyncRead + Unpin>(&mut self, reader: &mut R) -> std::io::Result<()> {
        self.make_room();
        if reader.read_buf(&mut self.buf).await? == 0 {
            self.eof = true;
        }
        Ok(())
    }

    /// Reads what has already arrived, without waiting. False when nothing had.
    pub fn fill_now<R: AsyncRead + Unpin>(&mut self, reader: &mut R) -> bool {
        if self.eof {
            return false;
        }
        matches!(self.fill(reader).now_or_never(), Some(Ok(())))
    }

    /// Drops consumed bytes, and grows the buffer (within `buf_max`) only when a partial line
    /// fills it. A buffer that grew for a long line goes back to its first size once that line
    /// is consumed, so a session that then waits (hours, in a `Dial`) holds 1 KiB, not the
    /// longest line it ever read.
    fn make_room(&mut self) {
        if self.start > 0 && (self.start == self.buf.len() || self.buf.len() == self.buf.capacity())
        {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.capacity() > INITIAL_BUFFER_BYTES && self.buf.len() < INITIAL_BUFFER_BYTES / 2 {
            self.buf.shrink_to(INITIAL_BUFFER_BYTES);
        }
        if self.buf.len() == self.buf.capacity() && self.buf.capacity() < self.buf_max {
            let grow = self.buf.capacity().min(self.buf_max - self.buf.capacity());
            self.buf.reserve_exact(grow);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_limits_and_eof() {
        let mut input: &[u8] = b"one\ntwo\r\nthree-is-too-long\nlast";
        let mut lines = LineBuffer::new(9);
        assert_eq!(
            lines.read_line(&mut input).await.unwrap(),
            Some(&b"one\n"[..])
        );
        assert_eq!(
            lines.read_line(&mut input).await.unwrap(),
            Some(&b"two\r\n"[..])
        );
        assert!(matches!(
            lines.read_line(&mut input).await,
            Err(LineError::TooLong { max: 9 })
        ));
    }

    #[tokio::test]
    async fn a_last_line_without_newline_and_a_long_stream_in_small_lines() {
        let mut input: &[u8] = b"a\nlast";
        let mut lines = LineBuffer::new(64);
        assert_eq!(
            lines.read_line(&mut input).await.unwrap(),
            Some(&b"a\n"[..])
        );
        assert_eq!(
            lines.read_line(&mut input).await.unwrap(),
            Some(&b"last"[..])
        );
        assert_eq!(lines.read_line(&mut input).await.unwrap(), None);

        let many = "line of text\n".repeat(10_000);
        let mut input = many.as_bytes();
        let mut lines = LineBuffer::new(64);
        let mut n = 0;
        while lines.read_line(&mut input).await.unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 10_000);
        assert!(
            lines.buf.capacity() <= lines.buf_max,
            "the buffer stayed bounded"
        );
    }

    #[tokio::test]
    async fn a_buffer_grown_for_a_long_line_shrinks_back_before_the_next_wait() {
        let long = format!("{}\nshort\n", "x".repeat(6_000));
        let mut input = long.as_bytes();
        let mut lines = LineBuffer::new(8_192);
        assert_eq!(
            lines.read_line(&mut input).await.unwrap().unwrap().len(),
            6_001
        );
        assert!(lines.buf.capacity() >= 6_001);
        assert_eq!(
            lines.read_line(&mut input).await.unwrap(),
            Some(&b"short\n"[..])
        );
        // The next read (here, the end of the input) starts with the line consumed.
        assert_eq!(lines.read_line(&mut input).await.unwrap(), None);
        assert!(
            lines.buf.capacity() <= INITIAL_BUFFER_BYTES * 2,
            "{} bytes kept while waiting",
            lines.buf.capacity()
        );
    }
}
