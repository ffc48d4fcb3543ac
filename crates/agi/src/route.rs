//! The route a session asks for, from `agi_network_script`: `some/script.php?a=1&b=two` is the
//! path `some/script.php` with parameters `a=1`, `b=two`. Path and parameters are
//! percent-decoded, so `%2e%2e` arrives as `..` and is refused by whoever confines paths, instead
//! of slipping past a check as an odd file name.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// Decoded path without leading or trailing `/`. Empty when the URL had no path.
    pub path: String,
    /// Decoded `name=value` pairs in order; a bare `name` has the empty value.
    pub query: Vec<(String, String)>,
}

impl Route {
    pub fn parse(script: &str) -> Route {
        let (path, query) = script.split_once('?').unwrap_or((script, ""));
        let query = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
                (
                    percent_decode(&n.replace('+', " ")),
                    percent_decode(&v.replace('+', " ")),
                )
            })
            .collect();
        Route {
            path: percent_decode(path).trim_matches('/').to_string(),
            query,
        }
    }

    /// The first value of a query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Decodes `%XX` escapes. Malformed escapes are kept literally; bytes that do not form UTF-8 are
/// replaced by U+FFFD, so the result is always a string and never silently shorter.
pub fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_query() {
        let r = Route::parse("myscript?x=1");
        assert_eq!(r.path, "myscript");
        assert_eq!(r.query, vec![("x".into(), "1".into())]);
        let r = Route::parse("/db/get/?family=a%20b&flag&v=x+y");
        assert_eq!(r.path, "db/get");
        assert_eq!(r.param("family"), Some("a b"));
        assert_eq!(r.param("flag"), Some(""));
        assert_eq!(r.param("v"), Some("x y"));
        assert_eq!(Route::parse(""), Route::default());
    }

    #[test]
    fn escapes_are_decoded_so_traversal_is_visible() {
        assert_eq!(Route::parse("%2e%2e/etc/passwd").path, "../etc/passwd");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }
}
