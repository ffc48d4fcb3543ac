//! [`Value`]: an immutable, cheaply cloned byte string (astdb values are text, usually UTF-8).

use std::fmt;
use std::sync::Arc;

/// A stored value. Cloning is a reference-count increment; reads hand out clones of the copy in
/// memory, so a get never copies the bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Value(Arc<[u8]>);

impl Value {
    /// The raw bytes, exactly as stored.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The value as text, if it is valid UTF-8 (Asterisk writes text; an imported astdb may hold
    /// other bytes).
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The value as text, invalid UTF-8 replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the value is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Some(s) => write!(f, "{s:?}"),
            None => write!(f, "{:?}", &self.0[..]),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value(Arc::from(s.as_bytes()))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value(Arc::from(s.into_bytes()))
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::from(s.as_str())
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Self {
        Value(Arc::from(b))
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value(Arc::from(b))
    }
}

impl PartialEq<str> for Value {
    fn eq(&self, other: &str) -> bool {
        &self.0[..] == other.as_bytes()
    }
}

impl PartialEq<&str> for Value {
    fn eq(&self, other: &&str) -> bool {
        &self.0[..] == other.as_bytes()
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Binds a byte string as SQLite TEXT (what Asterisk stores), never as a BLOB.
pub(crate) struct Text<'a>(pub &'a [u8]);

impl rusqlite::ToSql for Text<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(
            rusqlite::types::ValueRef::Text(self.0),
        ))
    }
}

/// Reads a column as bytes whatever its storage class; `None` for NULL.
pub(crate) fn column_bytes(v: rusqlite::types::ValueRef<'_>) -> Option<Vec<u8>> {
    use rusqlite::types::ValueRef as V;
    match v {
        V::Null => None,
        V::Text(b) | V::Blob(b) => Some(b.to_vec()),
        V::Integer(i) => Some(i.to_string().into_bytes()),
        V::Real(r) => Some(r.to_string().into_bytes()),
    }
}
