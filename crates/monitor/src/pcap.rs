//! Capture file sources: classic pcap (microsecond and nanosecond, either byte order) and
//! pcapng (section header, interface description, enhanced/simple/obsolete packet blocks), each
//! optionally gzip-compressed. Reads one packet at a time into a reused buffer.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

/// Packets whose captured length exceeds this are refused as malformed (pcap's own maximum
/// snapshot length is 262,144 bytes).
pub const MAX_PACKET_BYTES: usize = 262_144;
/// pcapng blocks larger than this are refused as malformed.
pub const MAX_BLOCK_BYTES: usize = 16 * 1024 * 1024;
/// At most this many pcapng interfaces per section.
pub const MAX_INTERFACES: usize = 1024;
/// Read buffer in front of the file (or the gzip decoder).
pub const READ_BUFFER_BYTES: usize = 1 << 20;

/// What was wrong with a capture file, and where: `file` and the byte `offset` of the record or
/// block that could not be read (in the decompressed stream for gzip files).
#[derive(Debug, thiserror::Error)]
#[error("{file}: at byte {offset}: {kind}")]
pub struct CaptureError {
    pub file: String,
    pub offset: u64,
    pub kind: CaptureErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureErrorKind {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error("not a pcap or pcapng file (magic {0:02x?})")]
    UnknownFormat([u8; 4]),
    #[error("file ends inside a {0} (truncated capture)")]
    Truncated(&'static str),
    #[error(
        "packet record claims {0} captured bytes, more than the {MAX_PACKET_BYTES}-byte maximum"
    )]
    PacketTooLarge(u64),
    #[error("pcapng block of type {block_type:#x} has invalid length {len}")]
    BadBlockLength { block_type: u32, len: u64 },
    #[error("pcapng section header has unknown byte-order magic {0:#010x}")]
    BadByteOrder(u32),
    #[error("pcapng packet refers to interface {0}, which was not described")]
    UnknownInterface(u32),
    #[error("pcapng file has more than {MAX_INTERFACES} interfaces")]
    TooManyInterfaces,
}

/// One packet as stored in the file.
#[derive(Debug, Clone, Copy)]
pub struct RawPacket<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// The link-layer header type (LINKTYPE_* value).
    pub link_type: u32,
    pub data: &'a [u8],
    /// Original length on the wire (may exceed `data.len()` when the snapshot length cut it).
    pub orig_len: u32,
    /// Byte offset of this packet's record or block in the (decompressed) file.
    pub offset: u64,
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: u32,
    /// Timestamp units: `(base, exponent)` meaning one unit is base^-exponent seconds.
    ts_base: u32,
    ts_exp: u32,
}

enum Format {
    Pcap {
        big_endian: bool,
        nanos: bool,
        link_type: u32,
    },
    PcapNg {
        big_endian: bool,
        interfaces: Vec<Interface>,
    },
}

/// Reads packets from one capture file.
pub struct CaptureReader {
    name: String,
    input: BufReader<Box<dyn Read + Send>>,
    format: Format,
    offset: u64,
    buf: Vec<u8>,
}

fn u16_at(b: &[u8], big: bool) -> u16 {
    let a = [b[0], b[1]];
    if big {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

fn u32_at(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// Converts a pcapng timestamp in `units` of base^-exp seconds to nanoseconds.
fn units_to_ns(units: u64, base: u32, exp: u32) -> i64 {
    let ns: u128 = if base == 10 {
        if exp <= 9 {
            units as u128 * 10u128.pow(9 - exp)
        } else {
            units as u128 / 10u128.pow((exp - 9).min(38))
        }
    } else {
        (units as u128 * 1_000_000_000) >> exp.min(127)
    };
    ns.min(i64::MAX as u128) as i64
}

impl CaptureReader {
    /// Opens `path`; gzip-compressed files are recognised by their magic and decompressed.
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|e| CaptureError {
            file: name.clone(),
            offset: 0,
            kind: CaptureErrorKind::Io(e),
        })?;
        CaptureReader::from_reader(name, file)
    }

    /// Reads a capture from any byte stream; `name` is used in errors.
    pub fn from_reader(
        name: impl Into<String>,
        reader: impl Read + Send + 'static,
    ) -> Result<CaptureReader, CaptureError> {
        let name = name.into();
        let mut raw = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
        let gz = {
            use std::io::BufRead;
            let head = raw.fill_buf().map_err(|e| CaptureError {
                file: name.clone(),
                offset: 0,
                kind: e.into(),
            })?;
            head.starts_with(&[0x1f, 0x8b])
        };
        let boxed: Box<dyn Read + Send> = if gz {
            Box::new(flate2::read::MultiGzDecoder::new(raw))
        } else {
            Box::new(raw)
        };
        let mut r = CaptureReader {
            name,
            input: BufReader::with_capacity(READ_BUFFER_BYTES, boxed),
            format: Format::Pcap {
                big_endian: false,
                nanos: false,
                link_type: 0,
            },
            offset: 0,
            buf: Vec::with_capacity(65536),
        };
        r.read_file_header()?;
        Ok(r)
    }

    /// The file's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes consumed so far (of the decompressed stream).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn err(&self, offset: u64, kind: CaptureErrorKind) -> CaptureError {
        CaptureError {
            file: self.name.clone(),
            offset,
            kind,
        }
    }

    /// Reads exactly `n` bytes into `self.buf[at..]`; `Ok(false)` on clean EOF at the start
    /// when `eof_ok`.
    fn fill(
        &mut self,
        at: usize,
        n: usize,
        what: &'static str,
        start: u64,
        eof_ok: bool,
    ) -> Result<bool, CaptureError> {
        // Grow only: zero-filling the buffer for every packet would cost as much as reading it.
        if self.buf.len() < at + n {
            self.buf.resize(at + n, 0);
        }
        let mut got = 0;
        while got < n {
            match self.input.read(&mut self.buf[at + got..at + n]) {
                Ok(0) => {
                    if got == 0 && eof_ok {
                        return Ok(false);
                    }
                    return Err(self.err(start, CaptureErrorKind::Truncated(what)));
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(start, e.into())),
            }
        }
        self.offset += n as u64;
        Ok(true)
    }

    fn read_file_header(&mut self) -> Result<(), CaptureError> {
        if !self.fill(0, 4, "file header", 0, true)? {
            return Err(self.err(0, CaptureErrorKind::Truncated("file header")));
        }
        let magic = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
        match magic {
            [0xd4, 0xc3, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0xc3, 0xd4]
            | [0x4d, 0x3c, 0xb2, 0xa1]
            | [0xa1, 0xb2, 0x3c, 0x4d] => {
                self.fill(4, 20, "pcap file header", 0, false)?;
                let big_endian = magic[0] == 0xa1;
                let nanos = magic == [0x4d, 0x3c, 0xb2, 0xa1] || magic == [0xa1, 0xb2, 0x3c, 0x4d];
                let link_type = u32_at(&self.buf[20..24], big_endian) & 0x0FFF_FFFF;
                self.format = Format::Pcap {
                    big_endian,
                    nanos,
                    link_type,
                };
                Ok(())
            }
            [0x0a, 0x0d, 0x0d, 0x0a] => {
                self.format = Format::PcapNg {
                    big_endian: false,
                    interfaces: Vec::new(),
                };
                self.read_section_header(0)
            }
            _ => Err(self.err(0, CaptureErrorKind::UnknownFormat(magic))),
        }
    }

    /// With the 4 block-type bytes of a section header already in `buf`, reads the rest.
    fn read_section_header(&mut self, start: u64) -> Result<(), CaptureError> {
        self.fill(4, 8, "pcapng section header", start, false)?;
        let bom_le = u32::from_le_bytes([self.buf[8], self.buf[9], self.buf[10], self.buf[11]]);
        let big_endian = match bom_le {
            0x1A2B_3C4D => false,
            0x4D3C_2B1A => true,
            other => return Err(self.err(start, CaptureErrorKind::BadByteOrder(other))),
        };
        let len = u32_at(&self.buf[4..8], big_endian) as usize;
        if !(28..=MAX_BLOCK_BYTES).contains(&len) || !len.is_multiple_of(4) {
            return Err(self.err(
                start,
                CaptureErrorKind::BadBlockLength {
                    block_type: 0x0A0D_0D0A,
                    len: len as u64,
                },
            ));
        }
        self.fill(12, len - 12, "pcapng section header", start, false)?;
        self.format = Format::PcapNg {
            big_endian,
            interfaces: Vec::new(),
        };
        Ok(())
    }

    /// The next packet, `Ok(None)` at the end of the file.
    pub fn next_packet(&mut self) -> Result<Option<RawPacket<'_>>, CaptureError> {
        match self.format {
            Format::Pcap {
                big_endian,
                nanos,
                link_type,
            } => {
                let start = self.offset;
                if !self.fill(0, 16, "pcap record header", start, true)? {
                    return Ok(None);
                }
                let secs = u32_at(&self.buf[0..4], big_endian) as i64;
                let frac = u32_at(&self.buf[4..8], big_endian) as i64;
                let incl = u32_at(&self.buf[8..12], big_endian) as u64;
                let orig_len = u32_at(&self.buf[12..16], big_endian);
                if incl as usize > MAX_PACKET_BYTES {
                    return Err(self.err(start, CaptureErrorKind::PacketTooLarge(incl)));
                }
                self.fill(0, incl as usize, "packet", start, false)?;
                let ts_ns = secs * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
                Ok(Some(RawPacket {
                    ts_ns,
                    link_type,
                    data: &self.buf[..incl as usize],
                    orig_len,
                    offset: start,
                }))
            }
            Format::PcapNg { .. } => self.next_pcapng(),
        }
    }

    fn next_pcapng(&mut self) -> Result<Option<RawPacket<'_>>, CaptureError> {
        loop {
            let start = self.offset;
            if !self.fill(0, 4, "pcapng block header", start, true)? {
                return Ok(None);
            }
            if self.buf[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                self.read_section_header(start)?;
                continue;
            }
            let Format::PcapNg { big_endian, .. } = self.format else {
                unreachable!("pcapng reader in pcap mode")
            };
            self.fill(4, 4, "pcapng block header", start, false)?;
            let block_type = u32_at(&self.buf[0..4], big_endian);
            let len = u32_at(&self.buf[4..8], big_endian) as usize;
            if !(12..=MAX_BLOCK_BYTES).contains(&len) || !len.is_multiple_of(4) {
                return Err(self.err(
                    start,
                    CaptureErrorKind::BadBlockLength {
                        block_type,
                        len: len as u64,
                    },
                ));
            }
            let what = match block_type {
                1 => "pcapng interface description block",
                2 | 3 | 6 => "pcapng packet block",
                _ => "pcapng block",
            };
            self.fill(8, len - 8, what, start, false)?;
            let body_end = len - 4;
            let bad_len = |r: &Self| {
                r.err(
                    start,
                    CaptureErrorKind::BadBlockLength {
                        block_type,
                        len: len as u64,
                    },
                )
            };
            match block_type {
                1 => {
                    if len < 20 {
                        return Err(bad_len(self));
                    }
                    let link_type = u16_at(&self.buf[8..10], big_endian) as u32;
                    let (mut ts_base, mut ts_exp) = (10, 6);
                    let mut o = 16;
                    while o + 4 <= body_end {
                        let code = u16_at(&self.buf[o..o + 2], big_endian);
                        let olen = u16_at(&self.buf[o + 2..o + 4], big_endian) as usize;
                        if code == 0 || o + 4 + olen > body_end {
                            break;
                        }
                        if code == 9 && olen >= 1 {
                            let v = self.buf[o + 4];
                            (ts_base, ts_exp) = if v & 0x80 != 0 {
                                (2, (v & 0x7f) as u32)
                            } else {
                                (10, v as u32)
                            };
                        }
                        o += 4 + olen.div_ceil(4) * 4;
                    }
                    let Format::PcapNg { interfaces, .. } = &mut self.format else {
                        unreachable!()
                    };
                    if interfaces.len() == MAX_INTERFACES {
                        return Err(self.err(start, CaptureErrorKind::TooManyInterfaces));
                    }
                    interfaces.push(Interface {
                        link_type,
                        ts_base,
                        ts_exp,
                    });
                }
                6 | 2 | 3 => {
                    let (iface_id, ts_units, cap_len, orig_len, data_at) = match block_type {
                        6 => {
                            if len < 32 {
                                return Err(bad_len(self));
                            }
                            let b = &self.buf;
                            let hi = u32_at(&b[12..16], big_endian) as u64;
                            let lo = u32_at(&b[16..20], big_endian) as u64;
                            (
                                u32_at(&b[8..12], big_endian),
                                (hi << 32) | lo,
                                u32_at(&b[20..24], big_endian) as usize,
                                u32_at(&b[24..28], big_endian),
                                28,
                            )
                        }
                        2 => {
                            if len < 32 {
                                return Err(bad_len(self));
                            }
                            let b = &self.buf;
                            let hi = u32_at(&b[12..16], big_endian) as u64;
                            let lo = u32_at(&b[16..20], big_endian) as u64;
                            (
                                u16_at(&b[8..10], big_endian) as u32,
                                (hi << 32) | lo,
                                u32_at(&b[20..24], big_endian) as usize,
                                u32_at(&b[24..28], big_endian),
                                28,
                            )
                        }
                        _ => {
                            if len < 16 {
                                return Err(bad_len(self));
                            }
                            let orig = u32_at(&self.buf[8..12], big_endian);
                            (0, 0, (orig as usize).min(len - 16), orig, 12)
                        }
                    };
                    if data_at + cap_len > body_end {
                        return Err(bad_len(self));
                    }
                    let Format::PcapNg { interfaces, .. } = &self.format else {
                        unreachable!()
                    };
                    let Some(iface) = interfaces.get(iface_id as usize).copied() else {
                        return Err(self.err(start, CaptureErrorKind::UnknownInterface(iface_id)));
                    };
                    return Ok(Some(RawPacket {
                        ts_ns: units_to_ns(ts_units, iface.ts_base, iface.ts_exp),
                        link_type: iface.link_type,
                        data: &self.buf[data_at..data_at + cap_len],
                        orig_len,
                        offset: start,
                    }));
                }
                _ => {}
            }
        }
    }
}

/// Writes classic pcap files (microsecond or nanosecond timestamps, little-endian). Used by the
/// synthetic capture generator and by tests.
pub struct PcapWriter<W: io::Write> {
    out: W,
    nanos: bool,
}

impl<W: io::Write> PcapWriter<W> {
    pub fn new(mut out: W, link_type: u32, nanos: bool) -> io::Result<Self> {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        out.write_all(&magic.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&(MAX_PACKET_BYTES as u32).to_le_bytes())?;
        out.write_all(&link_type.to_le_bytes())?;
        Ok(PcapWriter { out, nanos })
    }

    pub fn write_packet(&mut self, ts_ns: i64, data: &[u8]) -> io::Result<()> {
        let secs = ts_ns.div_euclid(1_000_000_000) as u32;
        let sub = ts_ns.rem_euclid(1_000_000_000) as u32;
        let frac = if self.nanos { sub } else { sub / 1000 };
        self.out.write_all(&secs.to_le_bytes())?;
        self.out.write_all(&frac.to_le_bytes())?;
        self.out.write_all(&(data.len() as u32).to_le_bytes())?;
        self.out.write_all(&(data.len() as u32).to_le_bytes())?;
        self.out.write_all(data)
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcapng_sample() -> Vec<u8> {
        let mut v = Vec::new();
        // SHB
        v.extend_from_slice(&0x0A0D0D0Au32.to_le_bytes());
        v.extend_from_slice(&28u32.to_le_bytes());
        v.extend_from_slice(&0x1A2B3C4Du32.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&(-1i64).to_le_bytes());
        v.extend_from_slice(&28u32.to_le_bytes());
        // IDB with if_tsresol = 9 (ns)
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&32u32.to_le_bytes());
        v.extend_from_slice(&101u16.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&9u16.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&[9, 0, 0, 0]);
        v.extend_from_slice(&[0, 0, 0, 0]);
        v.extend_from_slice(&32u32.to_le_bytes());
        // EPB with 5 bytes of data
        let ts: u64 = 1_500_000_000_123_456_789;
        v.extend_from_slice(&6u32.to_le_bytes());
        v.extend_from_slice(&40u32.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        v.extend_from_slice(&(ts as u32).to_le_bytes());
        v.extend_from_slice(&5u32.to_le_bytes());
        v.extend_from_slice(&5u32.to_le_bytes());
        v.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
        v.extend_from_slice(&40u32.to_le_bytes());
        v
    }

    #[test]
    fn reads_pcapng_with_ns_resolution() {
        let mut r =
            CaptureReader::from_reader("t.pcapng", io::Cursor::new(pcapng_sample())).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.ts_ns, 1_500_000_000_123_456_789);
        assert_eq!(p.link_type, 101);
        assert_eq!(p.data, &[1, 2, 3, 4, 5]);
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn truncated_pcapng_names_file_and_offset() {
        let mut s = pcapng_sample();
        s.truncate(s.len() - 6);
        let mut r = CaptureReader::from_reader("cut.pcapng", io::Cursor::new(s)).unwrap();
        let e = match r.next_packet() {
            Err(e) => e,
            Ok(_) => panic!("truncated block accepted"),
        };
        assert_eq!(e.offset, 60);
        assert!(
            e.to_string()
                .starts_with("cut.pcapng: at byte 60: file ends inside")
        );
    }

    #[test]
    fn pcap_round_trip_and_gzip() {
        let mut w = PcapWriter::new(Vec::new(), 1, true).unwrap();
        w.write_packet(1_000_000_001, b"abc").unwrap();
        w.write_packet(2_000_000_002, b"defg").unwrap();
        let bytes = w.into_inner();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &bytes).unwrap();
        let gz = gz.finish().unwrap();
        for input in [bytes, gz] {
            let mut r = CaptureReader::from_reader("x", io::Cursor::new(input)).unwrap();
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!(
                (p.ts_ns, p.data, p.link_type),
                (1_000_000_001, &b"abc"[..], 1)
            );
            let p = r.next_packet().unwrap().unwrap();
            assert_eq!(
                (p.ts_ns, p.data, p.offset),
                (2_000_000_002, &b"defg"[..], 43)
            );
            assert!(r.next_packet().unwrap().is_none());
        }
    }

    #[test]
    fn unknown_magic_is_an_error() {
        let e = CaptureReader::from_reader("junk", io::Cursor::new(b"hello world".to_vec()))
            .err()
            .unwrap();
        assert!(e.to_string().contains("junk: at byte 0: not a pcap"));
    }
}
