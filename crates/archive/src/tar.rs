//! ustar (POSIX.1-1988) headers: 512-byte blocks, octal numbers, a checksum over the header
//! with the checksum field counted as spaces. The archive ends with two zero blocks.

/// The tar block size, in bytes.
pub const BLOCK_BYTES: usize = 512;
/// Bytes of the end-of-archive marker: two zero blocks.
pub const TRAILER_BYTES: usize = 2 * BLOCK_BYTES;
/// Largest member size an 11-digit octal size field can hold (8 GiB - 1), in bytes.
pub const MAX_MEMBER_BYTES: u64 = 0o77_777_777_777;

/// Why a tar header cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TarError {
    /// Names longer than the 100-byte `name` field are never written.
    #[error("tar member name of {0} bytes exceeds the 100-byte ustar name field")]
    NameTooLong(usize),
    /// Sizes above [`MAX_MEMBER_BYTES`] need extensions this writer does not emit.
    #[error("tar member of {0} bytes exceeds the ustar limit of 8 GiB")]
    TooLarge(u64),
    /// A header block whose checksum or magic is wrong.
    #[error("not a ustar header: {0}")]
    BadHeader(&'static str),
}

/// A regular-file ustar header for `name` with `size` bytes, modified at `mtime_unix_sec`.
pub fn header(name: &str, size: u64, mtime_unix_sec: u64) -> Result<[u8; BLOCK_BYTES], TarError> {
    if name.len() > 100 {
        return Err(TarError::NameTooLong(name.len()));
    }
    if size > MAX_MEMBER_BYTES {
        return Err(TarError::TooLarge(size));
    }
    let mut h = [0u8; BLOCK_BYTES];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], 0o644); // mode
    octal(&mut h[108..116], 0); // uid
    octal(&mut h[116..124], 0); // gid
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime_unix_sec.min(0o77_777_777_777));
    h[156] = b'0'; // regular file
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..271].copy_from_slice(b"tandem"); // uname
    h[297..303].copy_from_slice(b"tandem"); // gname
    let sum = checksum(&h);
    // Six octal digits, NUL, space: the form GNU tar and POSIX readers accept.
    let digits = format!("{sum:06o}");
    h[148..154].copy_from_slice(digits.as_bytes());
    h[154] = 0;
    h[155] = b' ';
    Ok(h)
}

/// A parsed header: the member's name and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Member name (the `name` field; this writer never uses `prefix`).
    pub name: String,
    /// Member size in bytes.
    pub size: u64,
}

/// Reads a header block written by [`header`]: checks magic and checksum.
pub fn parse_header(h: &[u8]) -> Result<Entry, TarError> {
    if h.len() != BLOCK_BYTES {
        return Err(TarError::BadHeader("not 512 bytes"));
    }
    if &h[257..262] != b"ustar" {
        return Err(TarError::BadHeader("no ustar magic"));
    }
    let stored = parse_octal(&h[148..156]).ok_or(TarError::BadHeader("unreadable checksum"))?;
    if stored != u64::from(checksum(h)) {
        return Err(TarError::BadHeader("checksum mismatch"));
    }
    let end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
    let name = std::str::from_utf8(&h[..end])
        .map_err(|_| TarError::BadHeader("name is not UTF-8"))?
        .to_string();
    let size = parse_octal(&h[124..136]).ok_or(TarError::BadHeader("unreadable size"))?;
    Ok(Entry { name, size })
}

/// Bytes of zero padding after `size` bytes of data, to the next block.
pub fn padding(size: u64) -> usize {
    ((BLOCK_BYTES as u64 - size % BLOCK_BYTES as u64) % BLOCK_BYTES as u64) as usize
}

/// Sum of the header's bytes with the checksum field (148..156) counted as eight spaces.
fn checksum(h: &[u8]) -> u32 {
    h.iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u32::from(b' ')
            } else {
                u32::from(b)
            }
        })
        .sum()
}

/// Writes `value` as zero-padded octal filling all but the last byte of `field`, then NUL.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let s = format!("{value:0width$o}");
    field[..width].copy_from_slice(&s.as_bytes()[s.len() - width..]);
    field[width] = 0;
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let s: &[u8] = {
        let start = field.iter().position(|&b| b != b' ')?;
        let rest = &field[start..];
        let end = rest
            .iter()
            .position(|&b| b == 0 || b == b' ')
            .unwrap_or(rest.len());
        &rest[..end]
    };
    if s.is_empty() || s.len() > 21 {
        return None;
    }
    let mut v = 0u64;
    for &c in s {
        if !(b'0'..=b'7').contains(&c) {
            return None;
        }
        v = v * 8 + u64::from(c - b'0');
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = header("abc@host.pcap.zst", 1234, 1_795_766_970).unwrap();
        assert_eq!(
            parse_header(&h).unwrap(),
            Entry {
                name: "abc@host.pcap.zst".into(),
                size: 1234
            }
        );
        assert_eq!(&h[124..136], b"00000002322\0");
        let mut bad = h;
        bad[0] ^= 1;
        assert_eq!(
            parse_header(&bad),
            Err(TarError::BadHeader("checksum mismatch"))
        );
        assert_eq!(
            parse_header(&[0u8; 512]),
            Err(TarError::BadHeader("no ustar magic"))
        );
    }

    #[test]
    fn limits() {
        assert_eq!(
            header(&"a".repeat(101), 0, 0),
            Err(TarError::NameTooLong(101))
        );
        assert!(header(&"a".repeat(100), 0, 0).is_ok());
        assert_eq!(
            header("a", MAX_MEMBER_BYTES + 1, 0),
            Err(TarError::TooLarge(MAX_MEMBER_BYTES + 1))
        );
        assert_eq!(padding(0), 0);
        assert_eq!(padding(1), 511);
        assert_eq!(padding(512), 0);
    }
}
