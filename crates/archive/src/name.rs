//! Tar member names from Call-IDs, which are client-controlled text.

/// Longest member name written, in bytes: the ustar `name` field holds 100, so no name needs the
/// `prefix` field and none can be split into directories by it.
pub const MAX_MEMBER_NAME_BYTES: usize = 100;

/// Longest encoded Call-ID kept whole, in bytes. Longer ones become their first
/// [`KEEP_PREFIX_BYTES`] bytes, `~` and a 16-hex-digit hash of the whole Call-ID.
pub const MAX_ENCODED_CALL_ID_BYTES: usize = 80;

/// Bytes of the encoded Call-ID kept in front of the hash of a long one.
pub const KEEP_PREFIX_BYTES: usize = 48;

/// The safe stem of a member name for `call_id` (without `.pcap`): ASCII letters, digits and
/// `-_.@+=:!~` are kept, every other byte (including `/`, `\`, `%`, control characters, spaces
/// and non-ASCII) becomes `%XX`. A leading `.` is encoded too, so no name is `.`, `..` or hidden.
/// An empty Call-ID becomes `%empty`, which no other Call-ID encodes to (an encoded `%` is always
/// followed by two hex digits). The result is at most
/// [`MAX_ENCODED_CALL_ID_BYTES`] bytes.
pub fn safe_stem(call_id: &[u8]) -> String {
    if call_id.is_empty() {
        return "%empty".to_string();
    }
    let mut out = String::with_capacity(call_id.len().min(MAX_ENCODED_CALL_ID_BYTES + 3));
    for (i, &b) in call_id.iter().enumerate() {
        let keep = b.is_ascii_alphanumeric() || (b"-_@+=:!~".contains(&b)) || (b == b'.' && i > 0);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
        if out.len() > MAX_ENCODED_CALL_ID_BYTES {
            break;
        }
    }
    if out.len() <= MAX_ENCODED_CALL_ID_BYTES {
        return out;
    }
    let mut cut = KEEP_PREFIX_BYTES;
    // Do not cut a %XX escape in half.
    while let Some(p) = out[..cut].rfind('%') {
        if p + 3 <= cut {
            break;
        }
        cut = p;
    }
    format!("{}~{:016x}", &out[..cut], fnv1a64(call_id))
}

/// FNV-1a, 64 bits. Only tells long Call-IDs apart in names meant for people; extraction uses the
/// recorded offset, never the name.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_call_ids_are_kept() {
        assert_eq!(
            safe_stem(b"a84b4c76e66710@pc33.atlanta.com"),
            "a84b4c76e66710@pc33.atlanta.com"
        );
        assert_eq!(
            safe_stem(b"3848276298220188511@atlanta.example.com"),
            "3848276298220188511@atlanta.example.com"
        );
    }

    #[test]
    fn hostile_call_ids_are_confined() {
        assert_eq!(safe_stem(b"../../etc/passwd"), "%2E.%2F..%2Fetc%2Fpasswd");
        assert_eq!(safe_stem(b".."), "%2E.");
        assert_eq!(safe_stem(b"."), "%2E");
        assert_eq!(safe_stem(b"a\nb\0c d"), "a%0Ab%00c%20d");
        assert_eq!(safe_stem(b"100%"), "100%25");
        assert_eq!(safe_stem(b"\\x"), "%5Cx");
        assert_eq!(safe_stem("é".as_bytes()), "%C3%A9");
        assert_eq!(safe_stem(b""), "%empty");
    }

    #[test]
    fn long_call_ids_are_hashed_and_bounded() {
        let long = vec![b'a'; 1000];
        let s = safe_stem(&long);
        assert!(s.len() <= MAX_ENCODED_CALL_ID_BYTES);
        assert!(s.starts_with(&"a".repeat(KEEP_PREFIX_BYTES)));
        let mut other = long.clone();
        other[999] = b'b';
        assert_ne!(safe_stem(&other), s);

        let slashes = vec![b'/'; 1000];
        let s = safe_stem(&slashes);
        assert!(s.len() <= MAX_ENCODED_CALL_ID_BYTES, "{s}");
        assert!(!s.contains('/'));
        // The cut never leaves half an escape before the `~`.
        let (head, _) = s.split_once('~').unwrap();
        assert_eq!(head.len() % 3, 0);
    }

    #[test]
    fn every_byte_value_gives_a_safe_name() {
        for b in 0..=255u8 {
            for id in [vec![b], vec![b'x', b], vec![b; 200]] {
                let s = safe_stem(&id);
                assert!(s.len() <= MAX_ENCODED_CALL_ID_BYTES);
                assert!(
                    s.bytes()
                        .all(|c| c.is_ascii_graphic() && c != b'/' && c != b'\\'),
                    "{s:?}"
                );
                assert!(!s.starts_with('.'));
            }
        }
    }
}
