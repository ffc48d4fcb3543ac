//! Names: astdb key paths (`/family/key`, and key trees with whole-segment matching) and
//! namespace names.

use crate::error::{KvError, Result};

/// The astdb path of `family` and `key`: `/family/key` (either may contain `/`).
pub fn key_path(family: &str, key: &str) -> String {
    let mut s = String::with_capacity(family.len() + key.len() + 2);
    s.push('/');
    s.push_str(family);
    s.push('/');
    s.push_str(key);
    s
}

/// Paths up to this length are built on the stack by [`with_key_path`].
const STACK_PATH_BYTES_MAX: usize = 192;

/// Calls `f` with the path `/family/key`, built on the stack when it is short (as astdb paths
/// are), so that a lookup allocates nothing.
pub(crate) fn with_key_path<R>(family: &str, key: &str, f: impl FnOnce(&str) -> R) -> R {
    let len = family.len() + key.len() + 2;
    if len > STACK_PATH_BYTES_MAX {
        return f(&key_path(family, key));
    }
    let mut buf = [0u8; STACK_PATH_BYTES_MAX];
    buf[0] = b'/';
    buf[1..=family.len()].copy_from_slice(family.as_bytes());
    buf[family.len() + 1] = b'/';
    buf[family.len() + 2..len].copy_from_slice(key.as_bytes());
    match std::str::from_utf8(&buf[..len]) {
        Ok(path) => f(path),
        // Unreachable: two strings joined by '/' are UTF-8.
        Err(_) => f(&key_path(family, key)),
    }
}

/// The prefix a tree operation covers, as astdb builds it: no family (or an empty one) covers
/// everything (`None`); a family alone covers `/family`; a family and key tree cover
/// `/family/keytree`.
pub fn tree_prefix(family: Option<&str>, keytree: Option<&str>) -> Option<String> {
    match family {
        None | Some("") => None,
        Some(f) => match keytree {
            None | Some("") => Some(format!("/{f}")),
            Some(t) => Some(key_path(f, t)),
        },
    }
}

/// Whether `key` lies in the tree `prefix`: the key itself or anything below it, by whole path
/// segments (`/a/b` covers `/a/b` and `/a/b/c` but not `/a/bc`). `None` covers every key.
pub fn covers(prefix: Option<&str>, key: &str) -> bool {
    match prefix {
        None => true,
        Some(p) => key.starts_with(p) && (key.len() == p.len() || key.as_bytes()[p.len()] == b'/'),
    }
}

pub(crate) fn check_key(path: &str, key_bytes_max: usize) -> Result<()> {
    if path.len() > key_bytes_max {
        return Err(KvError::InvalidKey {
            key: truncated(path),
            problem: format!(
                "{} bytes, over the limit of {key_bytes_max} bytes (key_bytes_max)",
                path.len()
            ),
        });
    }
    if path.contains('\0') {
        return Err(KvError::InvalidKey {
            key: truncated(path),
            problem: "contains a NUL byte".to_string(),
        });
    }
    Ok(())
}

fn truncated(s: &str) -> String {
    if s.len() <= 80 {
        return s.to_string();
    }
    let mut end = 80;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The namespace that holds astdb families (what `tandem db` and Asterisk's DATABASE commands
/// use). Other namespaces are for Tandem's own modules, one table each.
pub const DEFAULT_NAMESPACE: &str = "astdb";

pub(crate) fn check_namespace(name: &str) -> Result<()> {
    let bad = |problem| {
        Err(KvError::InvalidNamespace {
            name: name.to_string(),
            problem,
        })
    };
    if name.is_empty() || name.len() > 63 {
        return bad("must be 1 to 63 characters");
    }
    if !name.as_bytes()[0].is_ascii_lowercase() {
        return bad("must start with a lowercase letter");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return bad("may hold only lowercase letters, digits and '_'");
    }
    Ok(())
}

/// The lock file beside a store file: held (flock) by the one process that writes the store.
pub(crate) fn lock_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut p = path.to_path_buf().into_os_string();
    p.push(".lock");
    std::path::PathBuf::from(p)
}

/// The WAL file SQLite keeps beside a store file while it is open, or after a crash.
pub(crate) fn wal_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut p = path.to_path_buf().into_os_string();
    p.push("-wal");
    std::path::PathBuf::from(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_segments() {
        assert!(covers(Some("/a/b"), "/a/b"));
        assert!(covers(Some("/a/b"), "/a/b/c"));
        assert!(!covers(Some("/a/b"), "/a/bc"));
        assert!(!covers(Some("/a/b"), "/a"));
        assert!(covers(None, "/anything"));
        assert_eq!(tree_prefix(Some(""), Some("x")), None);
        assert_eq!(tree_prefix(Some("f"), None), Some("/f".into()));
        assert_eq!(tree_prefix(Some("f"), Some("k")), Some("/f/k".into()));
        assert_eq!(key_path("f", "k/l"), "/f/k/l");
    }

    #[test]
    fn stack_built_paths_equal_heap_built_ones() {
        let long = "k".repeat(STACK_PATH_BYTES_MAX);
        for (family, key) in [
            ("f", "k"),
            ("", ""),
            ("sip", "1001/ü"),
            ("f", long.as_str()),
        ] {
            with_key_path(family, key, |p| assert_eq!(p, key_path(family, key)));
        }
        let edge = "k".repeat(STACK_PATH_BYTES_MAX - 3);
        with_key_path("f", &edge, |p| assert_eq!(p, key_path("f", &edge)));
    }
}
