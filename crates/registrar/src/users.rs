//! Digest credentials in the store: one entry per realm and user holding the HA1 of each
//! algorithm (`MD5:<hex> SHA-256:<hex> SHA-512-256:<hex>`), never the password. An entry
//! imported from a PJSIP `md5_cred` has only its MD5 HA1, so only MD5 works for that user.
//!
//! Layout in the store's `registrar` namespace: family `user/<realm>`, key `<user>`.

use crate::Error;
use crate::digest::Algorithm;
use kv::{Durability, Namespace, Store};

/// The store namespace of the registrar (bindings, users, the nonce secret).
pub const NAMESPACE: &str = "registrar";
/// A user name or realm longer than this is refused.
pub const NAME_BYTES_MAX: usize = 128;

fn family(realm: &str) -> String {
    format!("user/{realm}")
}

fn check_name(what: &str, s: &str) -> Result<(), Error> {
    let ok = !s.is_empty()
        && s.len() <= NAME_BYTES_MAX
        && s.bytes()
            .all(|b| b > b' ' && b != b'/' && b != b'"' && b != b'\\' && b < 0x7f);
    if ok {
        Ok(())
    } else {
        Err(Error::Input(format!(
            "{what} {s:?} must be 1-{NAME_BYTES_MAX} printable ASCII characters without space, '/', '\"' or '\\'"
        )))
    }
}

/// The stored HA1s of one user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ha1s(Vec<(Algorithm, String)>);

impl Ha1s {
    pub fn from_password(user: &str, realm: &str, password: &str) -> Ha1s {
        Ha1s(
            Algorithm::ALL
                .iter()
                .map(|&a| (a, a.ha1(user, realm, password)))
                .collect(),
        )
    }

    pub fn md5_only(ha1_hex: &str) -> Ha1s {
        Ha1s(vec![(Algorithm::Md5, ha1_hex.to_ascii_lowercase())])
    }

    pub fn get(&self, a: Algorithm) -> Option<&str> {
        self.0
            .iter()
            .find(|(x, _)| *x == a)
            .map(|(_, h)| h.as_str())
    }

    pub fn algorithms(&self) -> impl Iterator<Item = Algorithm> + '_ {
        self.0.iter().map(|(a, _)| *a)
    }

    pub fn encode(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(a, h)| format!("{}:{h}", a.name()))
            .collect();
        parts.join(" ")
    }

    pub fn decode(s: &str) -> Ha1s {
        Ha1s(
            s.split_ascii_whitespace()
                .filter_map(|p| {
                    let (a, h) = p.split_once(':')?;
                    Some((Algorithm::from_name(a)?, h.to_string()))
                })
                .collect(),
        )
    }
}

fn namespace(store: &Store) -> Result<Namespace, Error> {
    Ok(store.namespace(NAMESPACE)?)
}

/// Adds or replaces a user; returns once on disk.
pub fn add(store: &Store, realm: &str, user: &str, password: &str) -> Result<(), Error> {
    check_name("realm", realm)?;
    check_name("user", user)?;
    if password.is_empty() {
        return Err(Error::Input("the password is empty".into()));
    }
    let ha1s = Ha1s::from_password(user, realm, password);
    namespace(store)?.put(&family(realm), user, ha1s.encode())?;
    Ok(())
}

/// Adds many users in one group commit (provisioning, benchmarks); returns how many.
pub fn add_many(
    store: &Store,
    realm: &str,
    users: impl IntoIterator<Item = (String, String)>,
) -> Result<usize, Error> {
    check_name("realm", realm)?;
    let ns = namespace(store)?;
    let fam = family(realm);
    let mut n = 0;
    for (user, password) in users {
        check_name("user", &user)?;
        let ha1s = Ha1s::from_password(&user, realm, &password);
        // Async here, one flush at the end: a single fsync for the whole batch.
        let _queued = ns.put_with(&fam, &user, ha1s.encode(), Durability::Async)?;
        n += 1;
    }
    store.flush()?;
    Ok(n)
}

/// Stores an HA1 given directly (an MD5 HA1 from PJSIP's `md5_cred`).
pub fn add_ha1(store: &Store, realm: &str, user: &str, ha1s: &Ha1s) -> Result<(), Error> {
    check_name("realm", realm)?;
    check_name("user", user)?;
    namespace(store)?.put(&family(realm), user, ha1s.encode())?;
    Ok(())
}

/// Removes a user; `false` when there was none.
pub fn del(store: &Store, realm: &str, user: &str) -> Result<bool, Error> {
    Ok(namespace(store)?.del(&family(realm), user)?)
}

/// The HA1s of a user, from memory.
pub fn lookup(ns: &Namespace, realm: &str, user: &str) -> Option<Ha1s> {
    let v = ns.get(&family(realm), user).ok()??;
    Some(Ha1s::decode(v.as_str()?))
}

/// Every (realm, user, algorithms) in key order, from entries read with `kv::ReadOnlyStore` or
/// `Namespace::tree` (`/user/<realm>/<user>` = HA1s).
pub fn parse_entries(
    entries: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String, Vec<Algorithm>)> {
    entries
        .into_iter()
        .filter_map(|(path, value)| {
            let rest = path.strip_prefix("/user/")?;
            let (realm, user) = rest.split_once('/')?;
            Some((
                realm.to_string(),
                user.to_string(),
                Ha1s::decode(&value).algorithms().collect(),
            ))
        })
        .collect()
}

/// One credential found in a PJSIP configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PjsipAuth {
    pub section: String,
    pub username: String,
    /// The section's realm, when it sets one.
    pub realm: Option<String>,
    pub secret: PjsipSecret,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PjsipSecret {
    Password(String),
    Md5Ha1(String),
}

/// A pjsip.conf section: name, whether it is a template, the templates it inherits, and its
/// own settings in order.
type Section = (String, bool, Vec<String>, Vec<(String, String)>);

/// Reads the `type=auth` sections of a pjsip.conf text (templates `[name](!)` and inheritance
/// `[name](tmpl)` included; `#include` lines are reported, not followed). Returns the
/// credentials and, per section it skipped, why.
pub fn parse_pjsip(text: &str) -> (Vec<PjsipAuth>, Vec<String>) {
    use std::collections::HashMap;
    // Section name → (templates it inherits, its own key/value lines in order).
    let mut sections: Vec<Section> = Vec::new();
    let mut notes = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split(';').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with("#include") || line.starts_with("#tryinclude") {
            notes.push(format!(
                "line {}: {line} is not followed; import that file too",
                n + 1
            ));
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else {
                notes.push(format!("line {}: bad section header {line:?}", n + 1));
                continue;
            };
            let name = rest[..end].trim().to_string();
            let opts = rest[end + 1..].trim();
            let opts = opts
                .strip_prefix('(')
                .and_then(|o| o.strip_suffix(')'))
                .unwrap_or("");
            let mut template = false;
            let mut parents = Vec::new();
            for o in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                match o {
                    "!" => template = true,
                    "+" => {}
                    p => parents.push(p.to_string()),
                }
            }
            sections.push((name, template, parents, Vec::new()));
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if let Some(s) = sections.last_mut() {
            let k = k.trim().trim_end_matches('>').trim().to_ascii_lowercase();
            s.3.push((k, v.trim().to_string()));
        }
    }
    let by_name: HashMap<&str, usize> = sections
        .iter()
        .enumerate()
        .map(|(i, s)| (s.0.as_str(), i))
        .collect();
    // A section's effective settings: its templates' first (in order), then its own.
    fn settings(
        i: usize,
        all: &[Section],
        by: &HashMap<&str, usize>,
        depth: usize,
        out: &mut HashMap<String, String>,
    ) {
        if depth > 8 {
            return;
        }
        for p in &all[i].2 {
            if let Some(&j) = by.get(p.as_str()) {
                settings(j, all, by, depth + 1, out);
            }
        }
        for (k, v) in &all[i].3 {
            out.insert(k.clone(), v.clone());
        }
    }
    let mut out = Vec::new();
    for (i, s) in sections.iter().enumerate() {
        if s.1 {
            continue;
        }
        let mut kv = HashMap::new();
        settings(i, &sections, &by_name, 0, &mut kv);
        if kv.get("type").map(|t| t.as_str()) != Some("auth") {
            continue;
        }
        let auth_type = kv.get("auth_type").map_or("userpass", |s| s.as_str());
        let username = kv.get("username").cloned().unwrap_or_else(|| s.0.clone());
        let realm = kv.get("realm").cloned().filter(|r| !r.is_empty());
        let secret = match auth_type {
            "userpass" => match kv.get("password") {
                Some(p) if !p.is_empty() => PjsipSecret::Password(p.clone()),
                _ => {
                    notes.push(format!("[{}]: userpass without a password; skipped", s.0));
                    continue;
                }
            },
            "md5" => match kv.get("md5_cred") {
                Some(h) if h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    PjsipSecret::Md5Ha1(h.clone())
                }
                _ => {
                    notes.push(format!(
                        "[{}]: md5 without a 32-digit md5_cred; skipped",
                        s.0
                    ));
                    continue;
                }
            },
            other => {
                notes.push(format!(
                    "[{}]: auth_type={other} cannot be imported; skipped",
                    s.0
                ));
                continue;
            }
        };
        out.push(PjsipAuth {
            section: s.0.clone(),
            username,
            realm,
            secret,
        });
    }
    (out, notes)
}

/// Adds every credential of a pjsip.conf text; sections that set no realm go to
/// `default_realm`. Returns how many were stored and, per section skipped, why.
pub fn import_pjsip(
    store: &Store,
    text: &str,
    default_realm: &str,
) -> Result<(usize, Vec<String>), Error> {
    let (auths, notes) = parse_pjsip(text);
    for a in &auths {
        let realm = a.realm.as_deref().unwrap_or(default_realm);
        let stored = match &a.secret {
            PjsipSecret::Password(p) => add(store, realm, &a.username, p),
            PjsipSecret::Md5Ha1(h) => add_ha1(store, realm, &a.username, &Ha1s::md5_only(h)),
        };
        stored.map_err(|e| Error::Input(format!("[{}]: {e}", a.section)))?;
    }
    Ok((auths.len(), notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pjsip_auth_sections_with_templates() {
        let text = "\
[global]\ntype=global\n\
[auth-tmpl](!)\ntype=auth\nauth_type=userpass\n\
[1001](auth-tmpl)\nusername=1001\npassword=s3cret ; a comment\n\
[1002]\ntype=auth\nauth_type=md5\nusername=1002\nrealm=pbx\nmd5_cred=0123456789abcdef0123456789ABCDEF\n\
[1003]\ntype=auth\nauth_type=oauth\n\
[1001-endpoint]\ntype=endpoint\nauth=1001\n\
#include pjsip.auth.conf\n";
        let (auths, notes) = parse_pjsip(text);
        assert_eq!(auths.len(), 2);
        assert_eq!(auths[0].username, "1001");
        assert_eq!(auths[0].secret, PjsipSecret::Password("s3cret".into()));
        assert_eq!(auths[1].realm.as_deref(), Some("pbx"));
        assert!(matches!(auths[1].secret, PjsipSecret::Md5Ha1(_)));
        assert_eq!(notes.len(), 2, "{notes:?}");
    }

    #[test]
    fn ha1s_read_back() {
        let h = Ha1s::from_password("1001", "tandem", "pw");
        assert_eq!(Ha1s::decode(&h.encode()), h);
        assert_eq!(
            h.get(Algorithm::Md5).unwrap(),
            Algorithm::Md5.ha1("1001", "tandem", "pw")
        );
    }
}
