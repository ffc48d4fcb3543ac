//! Key material that travels in SDP and must never be kept in clear: SDES keys
//! (`a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:KEY|2^20|1:32`, RFC 4568) and MIKEY
//! (`a=key-mgmt:mikey DATA`, RFC 4567). [`redact_keys`] overwrites them in place with `X`, so a
//! stored SIP message keeps its length (and its framing, its Content-Length and the offsets of
//! everything after it) while the secret is gone.

/// What marks the start of a secret, and the bytes that may belong to it.
const MARKERS: [&[u8]; 2] = [b"inline:", b"key-mgmt:mikey "];

/// Overwrites every SDES `inline:` key and MIKEY payload in `msg` with `X`; returns how many
/// were found. Only the key is touched: a `|lifetime|MKI` after an SDES key stays, as does the
/// rest of the line. Works on any bytes (a whole SIP message, a fragment of one).
pub fn redact_keys(msg: &mut [u8]) -> usize {
    // One pass, comparing at most a marker's length at each byte: linear in the message
    // whatever it holds, so a message crafted with thousands of markers costs no more.
    let mut found = 0;
    let mut i = 0;
    while i < msg.len() {
        let Some(marker) = MARKERS.iter().find(|m| {
            msg.get(i..i + m.len())
                .is_some_and(|w| w.eq_ignore_ascii_case(m))
        }) else {
            i += 1;
            continue;
        };
        let start = i + marker.len();
        let mut end = start;
        while end < msg.len() && is_key_byte(msg[end]) {
            msg[end] = b'X';
            end += 1;
        }
        if end > start {
            found += 1;
        }
        i = end.max(i + 1);
    }
    found
}

/// Base64 (RFC 4648) and its padding: what SDES keys and MIKEY payloads are written in.
fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdes_keys_and_mikey_are_overwritten_and_nothing_else() {
        let mut m = b"m=audio 4000 RTP/SAVP 0\r\n\
a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz|2^20|1:32\r\n\
a=crypto:2 F8_128_HMAC_SHA1_80 inline:MTIzNDU2Nzg5QUJDREUwMTIzNDU2Nzg5QUJjZGVm|2^20|1:4;inline:QUJjZGVmMTIzNDU2Nzg5QUJDREUwMTIzNDU2Nzg5|2^20|2:4\r\n\
a=key-mgmt:mikey AQAFgM0XflABAAAAAAAAAAAAAAsAyO\r\n"
            .to_vec();
        let len = m.len();
        assert_eq!(redact_keys(&mut m), 4);
        assert_eq!(m.len(), len);
        let text = String::from_utf8(m).unwrap();
        assert!(!text.contains("WVNfX19"), "{text}");
        assert!(
            !text.contains("MTIzNDU2") && !text.contains("QUJjZGVm") && !text.contains("AQAFgM0")
        );
        assert!(
            text.contains("inline:XXXXXXXX") && text.contains("|2^20|1:32\r\n"),
            "{text}"
        );
        assert!(text.contains("a=key-mgmt:mikey XXXX"));
        assert!(text.starts_with("m=audio 4000 RTP/SAVP 0\r\n"));
    }

    #[test]
    fn a_message_without_keys_is_left_alone() {
        let mut m = b"INVITE sip:a@b SIP/2.0\r\nContent-Length: 0\r\n\r\n".to_vec();
        let before = m.clone();
        assert_eq!(redact_keys(&mut m), 0);
        assert_eq!(m, before);
    }
}
