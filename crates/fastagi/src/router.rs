//! Routing by the script path of `agi_network_script`.
//!
//! Patterns are paths of segments: a literal (`health`), `{name}` for one captured segment, or
//! `{*name}` for the rest of the path (one or more segments, last in the pattern). Exact paths
//! are found in a hash map; patterns are tried in the order they were added. A fallback, if set,
//! takes every path no route matched.

use crate::handler::{DynHandler, Handler};
use crate::metrics::RouteMetrics;
use crate::timeouts::CommandTimeouts;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    One(String),
    Rest(String),
}

#[derive(Clone)]
pub(crate) struct Entry {
    pub handler: Arc<dyn DynHandler>,
    /// The pattern as written: the label of this route's metrics.
    pub pattern: Arc<str>,
    pub metrics: Option<RouteMetrics>,
    /// This route's limits on replies, set when the server binds.
    pub timeouts: CommandTimeouts,
}

#[derive(Default, Clone)]
pub struct Router {
    exact: HashMap<String, Entry>,
    patterns: Vec<(Vec<Segment>, Entry)>,
    fallback: Option<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("route pattern {pattern:?}: {why}")]
    Pattern { pattern: String, why: &'static str },
    #[error("route {0:?} is defined twice")]
    Duplicate(String),
}

pub(crate) struct Found<'a> {
    pub entry: &'a Entry,
    pub captures: Vec<(String, String)>,
}

impl Router {
    pub fn new() -> Self {
        Router::default()
    }

    /// Adds a route. Leading and trailing `/` are ignored.
    pub fn route(mut self, pattern: &str, handler: impl Handler) -> Result<Self, RouteError> {
        let segments = parse_pattern(pattern)?;
        let entry = Entry {
            handler: Arc::new(handler),
            pattern: Arc::from(pattern.trim_matches('/')),
            metrics: None,
            timeouts: CommandTimeouts::default(),
        };
        if segments.iter().all(|s| matches!(s, Segment::Literal(_))) {
            let path = pattern.trim_matches('/').to_string();
            if self.exact.insert(path.clone(), entry).is_some() {
                return Err(RouteError::Duplicate(path));
            }
        } else {
            if self.patterns.iter().any(|(s, _)| *s == segments) {
                return Err(RouteError::Duplicate(pattern.to_string()));
            }
            self.patterns.push((segments, entry));
        }
        Ok(self)
    }

    /// Sets the handler for paths no route matches (the script runner, for instance). Without
    /// one, an unknown route ends the session with `failure`.
    pub fn fallback(mut self, label: &str, handler: impl Handler) -> Self {
        self.fallback = Some(Entry {
            handler: Arc::new(handler),
            pattern: Arc::from(label),
            metrics: None,
            timeouts: CommandTimeouts::default(),
        });
        self
    }

    /// Every route's label, for metrics and `--help`.
    pub fn patterns(&self) -> Vec<String> {
        let mut all: Vec<String> = self.exact.keys().cloned().collect();
        all.sort();
        all.extend(self.patterns.iter().map(|(_, e)| e.pattern.to_string()));
        all.extend(self.fallback.iter().map(|e| e.pattern.to_string()));
        all
    }

    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.exact
            .values_mut()
            .chain(self.patterns.iter_mut().map(|(_, e)| e))
            .chain(self.fallback.iter_mut())
    }

    pub(crate) fn find(&self, path: &str) -> Option<Found<'_>> {
        if let Some(entry) = self.exact.get(path) {
            return Some(Found {
                entry,
                captures: Vec::new(),
            });
        }
        let parts: Vec<&str> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/').collect()
        };
        for (segments, entry) in &self.patterns {
            if let Some(captures) = match_segments(segments, &parts) {
                return Some(Found { entry, captures });
            }
        }
        self.fallback.as_ref().map(|entry| Found {
            entry,
            captures: Vec::new(),
        })
    }
}

fn parse_pattern(pattern: &str) -> Result<Vec<Segment>, RouteError> {
    let bad = |why| RouteError::Pattern {
        pattern: pattern.to_string(),
        why,
    };
    let trimmed = pattern.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let parts: Vec<&str> = trimmed.split('/').collect();
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        let seg = if let Some(inner) = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if let Some(name) = inner.strip_prefix('*') {
                if i + 1 != parts.len() {
                    return Err(bad("{*rest} must be the last segment"));
                }
                Segment::Rest(name.to_string())
            } else {
                Segment::One(inner.to_string())
            }
        } else if p.is_empty() {
            return Err(bad("empty segment"));
        } else if p.contains(['{', '}']) {
            return Err(bad("a capture must be a whole segment"));
        } else {
            Segment::Literal(p.to_string())
        };
        if let Segment::One(n) | Segment::Rest(n) = &seg
            && n.is_empty()
        {
            return Err(bad("a capture needs a name"));
        }
        out.push(seg);
    }
    Ok(out)
}

fn match_segments(segments: &[Segment], parts: &[&str]) -> Option<Vec<(String, String)>> {
    let mut captures = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        match seg {
            Segment::Literal(l) => {
                if parts.get(i) != Some(&l.as_str()) {
                    return None;
                }
            }
            Segment::One(name) => captures.push((name.clone(), parts.get(i)?.to_string())),
            Segment::Rest(name) => {
                if parts.len() <= i {
                    return None;
                }
                captures.push((name.clone(), parts[i..].join("/")));
                return Some(captures);
            }
        }
    }
    (parts.len() == segments.len()).then_some(captures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgiError, Session};

    struct Nop;
    impl Handler for Nop {
        async fn call(&self, _: &mut Session) -> Result<(), AgiError> {
            Ok(())
        }
    }

    fn router() -> Router {
        Router::new()
            .route("health", Nop)
            .unwrap()
            .route("/queue/{name}/join", Nop)
            .unwrap()
            .route("files/{*path}", Nop)
            .unwrap()
    }

    #[test]
    fn exact_pattern_and_rest() {
        let r = router();
        assert_eq!(&*r.find("health").unwrap().entry.pattern, "health");
        let f = r.find("queue/sales/join").unwrap();
        assert_eq!(&*f.entry.pattern, "queue/{name}/join");
        assert_eq!(f.captures, vec![("name".to_string(), "sales".to_string())]);
        let f = r.find("files/a/b/c.txt").unwrap();
        assert_eq!(
            f.captures,
            vec![("path".to_string(), "a/b/c.txt".to_string())]
        );
        assert!(r.find("files").is_none());
        assert!(r.find("queue/sales").is_none());
        assert!(r.find("queue/sales/join/x").is_none());
        assert!(r.find("").is_none());
        assert!(r.fallback("scripts", Nop).find("anything/else").is_some());
    }

    #[test]
    fn bad_patterns_and_duplicates() {
        assert!(Router::new().route("a/{*r}/b", Nop).is_err());
        assert!(Router::new().route("a//b", Nop).is_err());
        assert!(Router::new().route("a/x{y}", Nop).is_err());
        assert!(Router::new().route("a/{}", Nop).is_err());
        assert!(router().route("health", Nop).is_err());
    }
}
