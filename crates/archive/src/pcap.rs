//! Classic pcap (libpcap 2.4) writing and reading: a 24-byte file header, then per packet a
//! 16-byte record header and the captured bytes. Written little-endian with microsecond
//! timestamps (magic `d4 c3 b2 a1` on disk).

/// Bytes of the file header.
pub const FILE_HEADER_BYTES: usize = 24;
/// Bytes of each packet record header.
pub const RECORD_HEADER_BYTES: usize = 16;
/// The magic number for microsecond timestamps.
pub const MAGIC_USEC: u32 = 0xa1b2_c3d4;
/// Default snapshot length written in the header and applied to packets, in bytes.
pub const DEFAULT_SNAPLEN_BYTES: u32 = 262_144;

/// A pcap link type: what every packet of the stream starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    /// Ethernet (`LINKTYPE_ETHERNET`).
    pub const ETHERNET: Self = Self(1);
    /// Raw IPv4 or IPv6, no link header (`LINKTYPE_RAW`).
    pub const RAW: Self = Self(101);
    /// Linux cooked capture v1 (`LINKTYPE_LINUX_SLL`), what `-i any` captures give.
    pub const LINUX_SLL: Self = Self(113);
}

/// Appends a pcap file header.
pub fn write_file_header(out: &mut Vec<u8>, link_type: LinkType, snaplen_bytes: u32) {
    out.extend_from_slice(&MAGIC_USEC.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes()); // version major
    out.extend_from_slice(&4u16.to_le_bytes()); // version minor
    out.extend_from_slice(&0i32.to_le_bytes()); // thiszone: timestamps are UTC
    out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    out.extend_from_slice(&snaplen_bytes.to_le_bytes());
    out.extend_from_slice(&link_type.0.to_le_bytes());
}

/// Appends one packet record: `data` is what was kept, `orig_len` the packet's length on the
/// wire (at least `data.len()`).
pub fn write_record(out: &mut Vec<u8>, ts_sec: u32, ts_usec: u32, data: &[u8], orig_len: u32) {
    let incl = data.len() as u32;
    out.extend_from_slice(&ts_sec.to_le_bytes());
    out.extend_from_slice(&ts_usec.to_le_bytes());
    out.extend_from_slice(&incl.to_le_bytes());
    out.extend_from_slice(&orig_len.max(incl).to_le_bytes());
    out.extend_from_slice(data);
}

/// One record read back by [`records`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Seconds since the Unix epoch.
    pub ts_sec: u32,
    /// Microseconds.
    pub ts_usec: u32,
    /// Length on the wire.
    pub orig_len: u32,
    /// The bytes kept.
    pub data: &'a [u8],
}

/// The link type and records of a little-endian microsecond pcap written by this module, or
/// `None` if `bytes` is not one (wrong magic, or a record that runs past the end).
pub fn records(bytes: &[u8]) -> Option<(LinkType, Vec<Record<'_>>)> {
    if bytes.len() < FILE_HEADER_BYTES || bytes[..4] != MAGIC_USEC.to_le_bytes() {
        return None;
    }
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let link = LinkType(le32(&bytes[20..24]));
    let mut out = Vec::new();
    let mut at = FILE_HEADER_BYTES;
    while at < bytes.len() {
        let h = bytes.get(at..at + RECORD_HEADER_BYTES)?;
        let incl = le32(&h[8..12]) as usize;
        let data =
            bytes.get(at + RECORD_HEADER_BYTES..(at + RECORD_HEADER_BYTES).checked_add(incl)?)?;
        out.push(Record {
            ts_sec: le32(&h[0..4]),
            ts_usec: le32(&h[4..8]),
            orig_len: le32(&h[12..16]),
            data,
        });
        at += RECORD_HEADER_BYTES + incl;
    }
    Some((link, out))
}

/// Bytes of the RTP header (12, plus 4 per CSRC, plus the header extension if the X bit is set)
/// at the start of `rtp`, capped at `rtp.len()`.
pub fn rtp_header_len(rtp: &[u8]) -> usize {
    let Some(&b0) = rtp.first() else { return 0 };
    let mut len = 12 + 4 * usize::from(b0 & 0x0f);
    if b0 & 0x10 != 0 {
        if let Some(ext) = rtp.get(len + 2..len + 4) {
            len += 4 + 4 * usize::from(u16::from_be_bytes([ext[0], ext[1]]));
        } else {
            len += 4;
        }
    }
    len.min(rtp.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_layout() {
        let mut b = Vec::new();
        write_file_header(&mut b, LinkType::RAW, 65_535);
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(b.len(), FILE_HEADER_BYTES);
        write_record(&mut b, 10, 20, b"abc", 100);
        let (link, recs) = records(&b).unwrap();
        assert_eq!(link, LinkType::RAW);
        assert_eq!(
            recs,
            vec![Record {
                ts_sec: 10,
                ts_usec: 20,
                orig_len: 100,
                data: b"abc"
            }]
        );
        assert!(records(&b[..b.len() - 1]).is_none());
    }

    #[test]
    fn rtp_header_lengths() {
        assert_eq!(rtp_header_len(&[]), 0);
        let mut p = vec![0x80u8; 172];
        assert_eq!(rtp_header_len(&p), 12);
        p[0] = 0x82; // two CSRCs
        assert_eq!(rtp_header_len(&p), 20);
        p[0] = 0x90; // extension of 3 words
        p[14] = 0;
        p[15] = 3;
        assert_eq!(rtp_header_len(&p), 12 + 4 + 12);
        assert_eq!(rtp_header_len(&p[..13]), 13);
    }
}
