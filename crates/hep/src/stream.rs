//! HEP over a stream transport (TCP): packets sent back to back, each framed by its own total
//! length. [`Deframer`] is a fixed-size buffer that the caller reads bytes into and takes whole
//! packets out of, in order; it never grows and never does IO.
//!
//! ```
//! use hep::{Deframer, DecodeLimits};
//! # let packet = hep::HepPacket {
//! #     ip_protocol: 17,
//! #     src_ip: "192.0.2.1".parse().unwrap(),
//! #     dst_ip: "192.0.2.2".parse().unwrap(),
//! #     src_port: 5060, dst_port: 5060, ts_sec: 1, ts_usec: 2,
//! #     protocol_type: hep::ProtocolType::SIP, capture_id: 7, keep_alive_timer: None,
//! #     auth_key: None, payload: hep::Payload::Raw(b"OPTIONS sip:a SIP/2.0\r\n\r\n"),
//! #     correlation_id: None,
//! # }.to_bytes()?;
//! let mut stream = packet.repeat(2);
//! stream.truncate(packet.len() + 10); // the second packet is cut short
//! let mut deframer = Deframer::new(hep::STREAM_BUFFER_BYTES_MIN);
//! let room = deframer.spare();
//! room[..stream.len()].copy_from_slice(&stream);
//! deframer.filled(stream.len());
//! let first = deframer.next_frame()?.expect("one whole packet");
//! assert!(hep::decode(first, &DecodeLimits::default()).is_ok());
//! assert_eq!(deframer.next_frame()?, None); // the rest has not arrived yet
//! assert_eq!(deframer.buffered(), 10);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{DecodeError, MAX_PACKET_BYTES, frame_len};

/// The smallest buffer a [`Deframer`] accepts: one packet of the largest size a u16 length
/// describes, so that every packet fits whole.
pub const STREAM_BUFFER_BYTES_MIN: usize = MAX_PACKET_BYTES;

/// Cuts the packets of one stream out of the bytes read from it.
///
/// Read into [`Deframer::spare`], say how many bytes came with [`Deframer::filled`], then take
/// packets with [`Deframer::next_frame`] until it returns `Ok(None)`. An error means the stream
/// is not HEP (or lost its framing): nothing after it can be trusted, so the caller closes the
/// connection.
#[derive(Debug)]
pub struct Deframer {
    buf: Box<[u8]>,
    /// The first byte not yet handed out as part of a packet.
    start: usize,
    /// One past the last byte read.
    end: usize,
}

impl Deframer {
    /// A deframer holding at most `capacity` bytes (raised to [`STREAM_BUFFER_BYTES_MIN`]).
    pub fn new(capacity: usize) -> Deframer {
        Deframer {
            buf: vec![0; capacity.max(STREAM_BUFFER_BYTES_MIN)].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Bytes read but not yet handed out.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// The buffer's size.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Room to read into; never empty while [`Deframer::next_frame`] has returned `Ok(None)`
    /// since the last read, because a whole packet always fits.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            // The unfinished packet moves to the front; it is shorter than the buffer.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into [`Deframer::spare`].
    ///
    /// # Panics
    /// If `n` is more than the room `spare` gave.
    pub fn filled(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "filled past the spare room");
        self.end += n;
    }

    /// The next whole packet, `Ok(None)` until its last byte has been read, or why the bytes
    /// at the front cannot start a packet ([`frame_len`]'s error).
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, DecodeError> {
        let pending = &self.buf[self.start..self.end];
        match frame_len(pending)? {
            Some(len) if len <= pending.len() => {
                let at = self.start;
                self.start += len;
                Ok(Some(&self.buf[at..at + len]))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body_len: usize, fill: u8) -> Vec<u8> {
        let total = 6 + body_len;
        let mut v = b"HEP3".to_vec();
        v.extend_from_slice(&(total as u16).to_be_bytes());
        v.resize(total, fill);
        v
    }

    /// Feeds `stream` in pieces of `step` bytes; the frames handed out.
    fn cut(stream: &[u8], step: usize, capacity: usize) -> Result<Vec<Vec<u8>>, DecodeError> {
        let mut d = Deframer::new(capacity);
        let mut out = Vec::new();
        let mut rest = stream;
        while !rest.is_empty() {
            let room = d.spare();
            let n = step.min(room.len()).min(rest.len());
            assert!(n > 0);
            room[..n].copy_from_slice(&rest[..n]);
            d.filled(n);
            rest = &rest[n..];
            while let Some(f) = d.next_frame()? {
                out.push(f.to_vec());
            }
        }
        Ok(out)
    }

    #[test]
    fn frames_come_out_whole_however_the_bytes_arrive() {
        let frames = [frame(0, 1), frame(100, 2), frame(65_529, 3), frame(7, 4)];
        let stream = frames.concat();
        for step in [1, 5, 6, 7, 1000, 65_535, 200_000] {
            assert_eq!(cut(&stream, step, 0).unwrap(), frames, "step {step}");
        }
    }

    #[test]
    fn a_largest_frame_fits_after_the_buffer_moves_its_start() {
        // The first frame leaves a partial largest one ending at the buffer's end.
        let frames = [frame(994, 1), frame(65_529, 2), frame(65_529, 3)];
        let stream = frames.concat();
        assert_eq!(cut(&stream, 65_535, 0).unwrap(), frames);
    }

    #[test]
    fn garbage_is_an_error_at_its_first_byte() {
        let mut stream = frame(10, 0);
        stream.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert!(matches!(
            cut(&stream, 1, 0),
            Err(DecodeError::BadMagic { found }) if found == [b'G', 0, 0, 0]
        ));
        // A length below the header cannot frame anything.
        assert!(cut(b"HEP3\x00\x05", 6, 0).is_err());
    }
}
