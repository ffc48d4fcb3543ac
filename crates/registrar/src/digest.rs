//! Digest authentication (RFC 7616 over SIP, RFC 8760 algorithms): challenges, stateless nonces,
//! the nonce-count record against replay, and checking a response against a stored HA1.
//!
//! A nonce is `hex(issued_s) . hex(HMAC-SHA-256(secret, realm, issued_s))[..32]`: the registrar
//! keeps no state per challenge, a nonce from before a restart stays valid (the secret is in the
//! store), and one past `nonce_ttl_s` is answered with `stale=true` so that the phone retries at
//! once without asking its user. Nonces are per second, so several phones may share one; the
//! replay record is therefore kept per nonce, user and cnonce, which the response covers.

use hmac::{KeyInit, Mac};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

/// A digest algorithm of RFC 8760.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Md5,
    Sha256,
    Sha512_256,
}

impl Algorithm {
    pub const ALL: [Algorithm; 3] = [Algorithm::Md5, Algorithm::Sha256, Algorithm::Sha512_256];

    /// The name on the wire and in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Sha256 => "SHA-256",
            Algorithm::Sha512_256 => "SHA-512-256",
        }
    }

    pub fn from_name(s: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Lower-case hex of the hash of `parts` joined by ':'.
    pub fn hash_hex(self, parts: &[&[u8]]) -> String {
        fn run<D: sha2::Digest>(parts: &[&[u8]]) -> Vec<u8> {
            let mut d = D::new();
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    d.update(b":");
                }
                d.update(p);
            }
            d.finalize().to_vec()
        }
        let bytes = match self {
            Algorithm::Md5 => run::<md5::Md5>(parts),
            Algorithm::Sha256 => run::<sha2::Sha256>(parts),
            Algorithm::Sha512_256 => run::<sha2::Sha512_256>(parts),
        };
        hex(&bytes)
    }

    /// HA1 = H(user:realm:password).
    pub fn ha1(self, user: &str, realm: &str, password: &str) -> String {
        self.hash_hex(&[user.as_bytes(), realm.as_bytes(), password.as_bytes()])
    }
}

pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The `Authorization` header's parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials<'a> {
    pub username: &'a str,
    pub realm: &'a str,
    pub nonce: &'a str,
    pub uri: &'a str,
    pub response: &'a str,
    pub algorithm: Option<&'a str>,
    pub cnonce: Option<&'a str>,
    pub nc: Option<&'a str>,
    pub qop: Option<&'a str>,
}

/// Reads `Digest a="b", c=d`; `None` when it is not a Digest header or lacks a required field.
pub fn parse_authorization(value: &str) -> Option<Credentials<'_>> {
    let value = value.trim();
    let (scheme, rest) = value.split_once(|c: char| c.is_ascii_whitespace())?;
    if !scheme.eq_ignore_ascii_case("digest") {
        return None;
    }
    let mut c = Credentials::default();
    for item in sip::split_list(rest) {
        let (k, v) = item.split_once('=')?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        match k.trim().to_ascii_lowercase().as_str() {
            "username" => c.username = v,
            "realm" => c.realm = v,
            "nonce" => c.nonce = v,
            "uri" => c.uri = v,
            "response" => c.response = v,
            "algorithm" => c.algorithm = Some(v),
            "cnonce" => c.cnonce = Some(v),
            "nc" => c.nc = Some(v),
            "qop" => c.qop = Some(v),
            _ => {}
        }
    }
    (!c.username.is_empty() && !c.nonce.is_empty() && !c.response.is_empty()).then_some(c)
}

/// The server secret behind nonces: 32 random bytes kept in the store.
#[derive(Clone)]
pub struct NonceKey([u8; 32]);

impl NonceKey {
    pub fn new(bytes: [u8; 32]) -> NonceKey {
        NonceKey(bytes)
    }

    pub fn random() -> NonceKey {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).expect("the system's random source");
        NonceKey(b)
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn tag(&self, realm: &str, issued_s: u64) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0).expect("any key length");
        mac.update(realm.as_bytes());
        mac.update(&issued_s.to_be_bytes());
        hex(&mac.finalize().into_bytes()[..16])
    }

    /// The nonce issued at `issued_s` (seconds since the epoch) for `realm`.
    pub fn nonce(&self, realm: &str, issued_s: u64) -> String {
        format!("{issued_s:x}.{}", self.tag(realm, issued_s))
    }

    /// When a nonce of ours was issued, or `None` when it is not ours.
    pub fn issued_s(&self, realm: &str, nonce: &str) -> Option<u64> {
        let (t, tag) = nonce.split_once('.')?;
        if t.len() > 16 {
            return None;
        }
        let issued_s = u64::from_str_radix(t, 16).ok()?;
        let expected = self.tag(realm, issued_s);
        // Constant time: the comparison must not tell an attacker how much of a tag is right.
        let same = expected.len() == tag.len()
            && expected
                .bytes()
                .zip(tag.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        same.then_some(issued_s)
    }
}

/// The verdict on a request's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// The nonce is ours but too old (or its count is replayed): challenge with `stale=true`.
    Stale,
    /// Wrong response, unknown user or algorithm, foreign realm or nonce: a failed attempt.
    Rejected(&'static str),
}

/// The nonce-count record: the highest `nc` seen per (nonce, user, cnonce), kept while the nonce
/// is valid, at most `entries_max`. A count not above the last one is a replay. When the record
/// is full, a nonce it does not know is answered stale (a new challenge) rather than trusted.
pub struct NonceCounts {
    counts: HashMap<u64, u32>,
    order: VecDeque<(u64, u64)>,
    entries_max: usize,
}

impl NonceCounts {
    pub fn new(entries_max: usize) -> NonceCounts {
        NonceCounts {
            counts: HashMap::new(),
            order: VecDeque::new(),
            entries_max: entries_max.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    fn key(nonce: &str, user: &str, cnonce: &str) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        // A keyed hash: the key is per process, so nobody can aim collisions at it.
        static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> =
            std::sync::OnceLock::new();
        let mut h = STATE.get_or_init(Default::default).build_hasher();
        h.write(nonce.as_bytes());
        h.write_u8(0);
        h.write(user.as_bytes());
        h.write_u8(0);
        h.write(cnonce.as_bytes());
        h.finish()
    }

    /// Records `nc` and says whether it is fresh. `issued_s` orders the record's expiry.
    pub fn check(
        &mut self,
        nonce: &str,
        user: &str,
        cnonce: &str,
        nc: u32,
        issued_s: u64,
        oldest_valid_s: u64,
    ) -> bool {
        while let Some(&(t, k)) = self.order.front() {
            if t >= oldest_valid_s {
                break;
            }
            self.order.pop_front();
            self.counts.remove(&k);
        }
        let key = NonceCounts::key(nonce, user, cnonce);
        let full = self.counts.len() >= self.entries_max;
        match self.counts.get_mut(&key) {
            Some(last) if nc <= *last => false,
            Some(last) => {
                *last = nc;
                true
            }
            None if full => false,
            None => {
                self.counts.insert(key, nc);
                self.order.push_back((issued_s, key));
                true
            }
        }
    }
}

/// Checks `cred` for a request with `method` against `ha1` (hex, for `algorithm`).
pub fn response_matches(
    algorithm: Algorithm,
    ha1: &str,
    cred: &Credentials<'_>,
    method: &str,
) -> bool {
    let ha2 = algorithm.hash_hex(&[method.as_bytes(), cred.uri.as_bytes()]);
    let expected = match (cred.qop, cred.nc, cred.cnonce) {
        (Some(qop), Some(nc), Some(cnonce)) => algorithm.hash_hex(&[
            ha1.as_bytes(),
            cred.nonce.as_bytes(),
            nc.as_bytes(),
            cnonce.as_bytes(),
            qop.as_bytes(),
            ha2.as_bytes(),
        ]),
        _ => return false,
    };
    expected.len() == cred.response.len()
        && expected
            .bytes()
            .zip(cred.response.bytes().map(|b| b.to_ascii_lowercase()))
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A `WWW-Authenticate` value for one algorithm.
pub fn challenge(realm: &str, nonce: &str, algorithm: Algorithm, stale: bool) -> String {
    format!(
        "Digest realm=\"{realm}\", nonce=\"{nonce}\", algorithm={}, qop=\"auth\"{}",
        algorithm.name(),
        if stale { ", stale=true" } else { "" }
    )
}

/// The `response` a client computes (for tests and tools that play the phone).
pub fn client_response(
    algorithm: Algorithm,
    ha1: &str,
    nonce: &str,
    nc: &str,
    cnonce: &str,
    method: &str,
    uri: &str,
) -> String {
    let ha2 = algorithm.hash_hex(&[method.as_bytes(), uri.as_bytes()]);
    algorithm.hash_hex(&[
        ha1.as_bytes(),
        nonce.as_bytes(),
        nc.as_bytes(),
        cnonce.as_bytes(),
        b"auth",
        ha2.as_bytes(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_7616_sha256_example() {
        // RFC 7616 3.9.1 (with the HTTP method and URI of the example).
        let ha1 = Algorithm::Sha256.ha1("Mufasa", "http-auth@example.org", "Circle of Life");
        let r = client_response(
            Algorithm::Sha256,
            &ha1,
            "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
            "00000001",
            "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
            "GET",
            "/dir/index.html",
        );
        assert_eq!(
            r,
            "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"
        );
        let md5 = client_response(
            Algorithm::Md5,
            &Algorithm::Md5.ha1("Mufasa", "http-auth@example.org", "Circle of Life"),
            "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
            "00000001",
            "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
            "GET",
            "/dir/index.html",
        );
        assert_eq!(md5, "8ca523f5e9506fed4657c9700eebdbec");
    }

    #[test]
    fn nonces_are_ours_and_dated() {
        let k = NonceKey::new([7; 32]);
        let n = k.nonce("tandem", 1_790_000_000);
        assert_eq!(k.issued_s("tandem", &n), Some(1_790_000_000));
        assert_eq!(k.issued_s("other", &n), None);
        assert_eq!(NonceKey::new([8; 32]).issued_s("tandem", &n), None);
        assert_eq!(k.issued_s("tandem", "zz.00"), None);
    }

    #[test]
    fn a_nonce_count_is_used_once() {
        let mut c = NonceCounts::new(2);
        assert!(c.check("n", "u", "c", 1, 100, 90));
        assert!(!c.check("n", "u", "c", 1, 100, 90));
        assert!(c.check("n", "u", "c", 2, 100, 90));
        assert!(c.check("n", "u", "other", 1, 100, 90));
        // Full: an unknown nonce is not trusted.
        assert!(!c.check("m", "u", "c", 1, 100, 90));
        // Entries of expired nonces go, which frees room.
        assert!(c.check("m", "u", "c", 1, 200, 150));
    }

    #[test]
    fn parses_authorization() {
        let c = parse_authorization(
            "Digest username=\"1001\", realm=\"tandem\", nonce=\"a.b\", uri=\"sip:x\", \
             response=\"abc\", algorithm=SHA-256, cnonce=\"c,1\", nc=00000001, qop=auth",
        )
        .unwrap();
        assert_eq!(
            (c.username, c.cnonce, c.nc, c.algorithm),
            ("1001", Some("c,1"), Some("00000001"), Some("SHA-256"))
        );
        assert!(parse_authorization("Basic abc").is_none());
    }
}
