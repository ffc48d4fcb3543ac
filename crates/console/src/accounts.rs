//! Console users, their sessions and their API tokens, in a small SQLite file of their own
//! (`console.sqlite3` in the data directory).
//!
//! Why a file apart from the key-value store: the store is written by one process at a time,
//! and `tandem user add` must work while `tandem serve` runs (the first admin is created on a
//! running system). SQLite lets both processes write this file; the server reads a session's
//! user at every request, so a deleted user or a changed role takes effect at once.
//!
//! Secrets are never stored: passwords as Argon2id hashes (PHC strings), session ids and API
//! tokens as SHA-256 digests (both are 256-bit random values, so a fast digest is enough).
//!
//! A new password ends the user's sessions and API tokens, and clears their failed-login
//! counters, as `tandem user unlock` does: both write `login_reset`, which the running server
//! reads at the user's next login attempt ([`Accounts::login_account`]).
//!
//! The file says what it is and which format it holds (application_id `TDCN`, `PRAGMA
//! user_version` [`FORMAT_VERSION`]; crate `fileformat`): an older file is upgraded at open in
//! one transaction ([`MIGRATIONS`]), a newer one refused ([`AccountError::Format`]) untouched.

use argon2::password_hash::{PasswordHasher, SaltString};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::password_checks;

/// Longest user name (letters, digits, `.`, `_`, `-`).
pub const USER_NAME_BYTES_MAX: usize = 64;
/// Shortest password accepted.
pub const PASSWORD_CHARS_MIN: usize = 8;
/// Longest password accepted (Argon2 hashes anything; a bound keeps a request small).
pub const PASSWORD_BYTES_MAX: usize = 1024;
/// Longest token label.
pub const TOKEN_LABEL_BYTES_MAX: usize = 128;
/// A token as sent: `tdm_` + 8 hex of id + `_` + 64 hex of secret.
const TOKEN_PREFIX: &str = "tdm_";

/// What a user may do. Viewers read; admins also manage what later pages allow (listening to
/// calls, downloads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = AccountError;
    fn from_str(s: &str) -> Result<Role, AccountError> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "admin" => Ok(Role::Admin),
            other => Err(AccountError::Invalid(format!(
                "role {other:?}: expected admin or viewer"
            ))),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A signed-in user, as a request sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub role: Role,
}

/// An API token as listed (its secret is never kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub user: String,
    pub label: String,
    pub created_s: i64,
    pub last_used_s: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("console accounts {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    /// Another kind of file, or a newer Tandem's (crate `fileformat`).
    #[error(transparent)]
    Format(#[from] fileformat::FormatError),
    #[error("{0}")]
    Invalid(String),
    #[error("no console user named {0:?}")]
    NoSuchUser(String),
    #[error("a console user named {0:?} exists already")]
    UserExists(String),
    #[error("hashing the password failed: {0}")]
    Hash(String),
    #[error("the system's random source failed: {0}")]
    Random(String),
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS user (
    name      TEXT PRIMARY KEY,
    role      TEXT NOT NULL,
    hash      TEXT NOT NULL,
    created_s INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS token (
    id          TEXT PRIMARY KEY,
    user        TEXT NOT NULL REFERENCES user(name) ON DELETE CASCADE,
    hash        TEXT NOT NULL,
    label       TEXT NOT NULL,
    created_s   INTEGER NOT NULL,
    last_used_s INTEGER
);
CREATE TABLE IF NOT EXISTS session (
    hash      TEXT PRIMARY KEY,
    user      TEXT NOT NULL REFERENCES user(name) ON DELETE CASCADE,
    expires_s INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS session_expiry ON session(expires_s);
CREATE TABLE IF NOT EXISTS login_reset (
    user     TEXT PRIMARY KEY REFERENCES user(name) ON DELETE CASCADE,
    reset_us INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS access_log (
    id     INTEGER PRIMARY KEY,
    at_s   INTEGER NOT NULL,
    user   TEXT    NOT NULL,
    action TEXT    NOT NULL,
    target TEXT    NOT NULL
);";

/// The accounts file's format versions (crate `fileformat`: application_id `TDCN`, `PRAGMA
/// user_version`), applied at open in one transaction. A change of the tables is a new entry,
/// never an edit of an applied one.
pub const MIGRATIONS: &[fileformat::Migration] = &[fileformat::Migration {
    version: 1,
    name: "users, tokens, sessions, login resets, access log",
    apply: |c| c.execute_batch(SCHEMA),
}];

/// The format version this build writes and the highest it reads.
pub const FORMAT_VERSION: u32 = fileformat::latest(MIGRATIONS);

/// Most rows the access log keeps; older ones are dropped as new ones come (the log answers
/// "who listened to this call", not a full history of years).
pub const ACCESS_LOG_ROWS_MAX: i64 = 100_000;

/// One listen or download, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub at_s: i64,
    pub user: String,
    /// `listen` or `pcap`.
    pub action: String,
    /// What was listened to or downloaded (the call's uid and stream).
    pub target: String,
}

/// The console's accounts file.
pub struct Accounts {
    path: PathBuf,
    conn: Mutex<Connection>,
}

/// What a login attempt needs of an existing user: their role, their password hash, and when
/// their failed-login counters were last cleared.
#[derive(Debug, Clone)]
pub struct LoginAccount {
    pub role: Role,
    pub hash: String,
    pub reset_us: i64,
}

/// How stale a token's `last_used_s` may be: a script calling the API every second does not
/// make every call a write (and an fsync) to the accounts file.
pub const TOKEN_USE_RESOLUTION_S: i64 = 60;

/// The accounts file in a data directory.
pub fn accounts_file(data_dir: &Path) -> PathBuf {
    data_dir.join("console.sqlite3")
}

pub fn now_s() -> i64 {
    now_us() / 1_000_000
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Marks a user's failed-login counters as cleared now (always later than the last mark).
const RESET_LOGIN_COUNTERS: &str = "INSERT INTO login_reset (user, reset_us) \
     SELECT name, ?2 FROM user WHERE name = ?1 \
     ON CONFLICT(user) DO UPDATE SET reset_us = MAX(excluded.reset_us, reset_us + 1)";

fn random_hex(bytes: usize) -> Result<String, AccountError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| AccountError::Random(e.to_string()))?;
    Ok(hex(&buf))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// Compares two digests in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn hash_password(password: &str) -> Result<String, AccountError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| AccountError::Random(e.to_string()))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| AccountError::Hash(e.to_string()))?;
    // argon2's defaults: Argon2id, 19 MiB, 2 passes, 1 lane (OWASP's first recommendation).
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AccountError::Hash(e.to_string()))
}

/// Checks `password` for `name` (its account, when it exists) in `memory`: the user when it
/// is theirs.
pub fn check_login(
    memory: &mut password_checks::Memory,
    name: &str,
    account: Option<&LoginAccount>,
    password: &str,
) -> Result<Option<User>, AccountError> {
    let hash_err = |e: password_checks::CheckError| AccountError::Hash(e.to_string());
    Ok(match account {
        Some(a) => password_checks::verify(memory, &a.hash, password.as_bytes())
            .map_err(hash_err)?
            .then(|| User {
                name: name.to_owned(),
                role: a.role,
            }),
        None => {
            password_checks::decoy(memory, password.as_bytes()).map_err(hash_err)?;
            None
        }
    })
}

fn check_name(name: &str) -> Result<(), AccountError> {
    let ok = !name.is_empty()
        && name.len() <= USER_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(AccountError::Invalid(format!(
            "user name {name:?}: 1 to {USER_NAME_BYTES_MAX} letters, digits, '.', '_' or '-'"
        )))
    }
}

fn check_password(password: &str) -> Result<(), AccountError> {
    if password.chars().count() < PASSWORD_CHARS_MIN {
        return Err(AccountError::Invalid(format!(
            "the password is too short: at least {PASSWORD_CHARS_MIN} characters"
        )));
    }
    if password.len() > PASSWORD_BYTES_MAX {
        return Err(AccountError::Invalid(format!(
            "the password is too long: at most {PASSWORD_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

impl Accounts {
    /// Opens (creating if needed) the accounts file at `path`. It holds password and token
    /// hashes: the file is created 0600 before SQLite opens it, so that the WAL and
    /// shared-memory files SQLite creates beside it are 0600 too, whatever the umask; an older
    /// release's 0644 files are narrowed here.
    pub fn open(path: &Path) -> Result<Accounts, AccountError> {
        let wrap = |source| AccountError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        filemode::prepare_sqlite(path, &filemode::Access::Private).map_err(|e| {
            let cannot_open = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN);
            wrap(rusqlite::Error::SqliteFailure(
                cannot_open,
                Some(e.to_string()),
            ))
        })?;
        let conn = Connection::open(path).map_err(wrap)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(wrap)?;
        // A newer Tandem's file is refused before anything is written to it.
        let kind = &fileformat::CONSOLE_ACCOUNTS;
        fileformat::check(&conn, path, kind, FORMAT_VERSION)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(wrap)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(wrap)?;
        fileformat::upgrade(&conn, path, kind, MIGRATIONS)?;
        Ok(Accounts {
            path: path.to_owned(),
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, AccountError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut conn).map_err(|source| AccountError::Sqlite {
            path: self.path.display().to_string(),
            source,
        })
    }

    /// Records that `user` listened to or downloaded `target`. Written before the data is
    /// sent, so a download that fails half-way is still logged.
    pub fn log_access(&self, user: &str, action: &str, target: &str) -> Result<(), AccountError> {
        let now = now_s();
        self.with(|c| {
            c.execute(
                "INSERT INTO access_log (at_s, user, action, target) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![now, user, action, target],
            )?;
            let id = c.last_insert_rowid();
            if id % 1000 == 0 {
                c.execute(
                    "DELETE FROM access_log WHERE id <= ?1",
                    [id - ACCESS_LOG_ROWS_MAX],
                )?;
            }
            Ok(())
        })
    }

    /// The newest `limit` accesses, newest first.
    pub fn access_log(&self, limit: usize) -> Result<Vec<Access>, AccountError> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT at_s, user, action, target FROM access_log ORDER BY id DESC LIMIT ?1",
            )?;
            let rows = st.query_map([limit as i64], |r| {
                Ok(Access {
                    at_s: r.get(0)?,
                    user: r.get(1)?,
                    action: r.get(2)?,
                    target: r.get(3)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Adds a user; the name must be new.
    pub fn add_user(&self, name: &str, role: Role, password: &str) -> Result<(), AccountError> {
        check_name(name)?;
        check_password(password)?;
        let hash = hash_password(password)?;
        let added = self.with(|c| {
            let tx = c.transaction()?;
            let n = tx.execute(
                "INSERT OR IGNORE INTO user (name, role, hash, created_s) VALUES (?1, ?2, ?3, ?4)",
                params![name, role.as_str(), hash, now_s()],
            )?;
            // A name deleted and added again starts with no counters of its own.
            if n > 0 {
                tx.execute(RESET_LOGIN_COUNTERS, params![name, now_us()])?;
            }
            tx.commit()?;
            Ok(n)
        })?;
        if added == 0 {
            return Err(AccountError::UserExists(name.to_owned()));
        }
        Ok(())
    }

    /// Sets a user's password, ends every session and API token of theirs (whoever held the
    /// old password may have made them), and clears their failed-login counters.
    pub fn set_password(&self, name: &str, password: &str) -> Result<(), AccountError> {
        check_password(password)?;
        let hash = hash_password(password)?;
        let changed = self.with(|c| {
            let tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE user SET hash = ?2 WHERE name = ?1",
                params![name, hash],
            )?;
            tx.execute("DELETE FROM session WHERE user = ?1", [name])?;
            tx.execute("DELETE FROM token WHERE user = ?1", [name])?;
            tx.execute(RESET_LOGIN_COUNTERS, params![name, now_us()])?;
            tx.commit()?;
            Ok(n)
        })?;
        if changed == 0 {
            return Err(AccountError::NoSuchUser(name.to_owned()));
        }
        Ok(())
    }

    /// Clears a user's failed-login counters: a running server sees it at the user's next
    /// login attempt.
    pub fn unlock(&self, name: &str) -> Result<(), AccountError> {
        let n = self.with(|c| c.execute(RESET_LOGIN_COUNTERS, params![name, now_us()]))?;
        if n == 0 {
            return Err(AccountError::NoSuchUser(name.to_owned()));
        }
        Ok(())
    }

    /// Deletes a user with their sessions and tokens.
    pub fn delete_user(&self, name: &str) -> Result<(), AccountError> {
        let n = self.with(|c| c.execute("DELETE FROM user WHERE name = ?1", [name]))?;
        if n == 0 {
            return Err(AccountError::NoSuchUser(name.to_owned()));
        }
        Ok(())
    }

    /// Every user, by name.
    pub fn users(&self) -> Result<Vec<User>, AccountError> {
        let rows = self.with(|c| {
            let mut st = c.prepare("SELECT name, role FROM user ORDER BY name")?;
            st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })?;
        Ok(rows
            .into_iter()
            .map(|(name, role)| User {
                role: role.parse().unwrap_or(Role::Viewer),
                name,
            })
            .collect())
    }

    pub fn is_empty(&self) -> Result<bool, AccountError> {
        self.with(|c| c.query_row("SELECT COUNT(*) = 0 FROM user", [], |r| r.get(0)))
    }

    /// An existing user as a login attempt needs them; `None` for an unknown name (or one no
    /// user could have).
    pub fn login_account(&self, name: &str) -> Result<Option<LoginAccount>, AccountError> {
        if check_name(name).is_err() {
            return Ok(None);
        }
        let row: Option<(String, String, i64)> = self.with(|c| {
            c.query_row(
                "SELECT u.role, u.hash, COALESCE(r.reset_us, 0) FROM user u \
                 LEFT JOIN login_reset r ON r.user = u.name WHERE u.name = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
        })?;
        Ok(row.map(|(role, hash, reset_us)| LoginAccount {
            role: role.parse().unwrap_or(Role::Viewer),
            hash,
            reset_us,
        }))
    }

    /// The user, if `password` is theirs; an unknown name costs the same check against a
    /// decoy. For one-off checks: the console runs its checks through
    /// [`crate::password_checks::PasswordChecks`], which bounds their memory.
    pub fn verify_password(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<User>, AccountError> {
        if password.len() > PASSWORD_BYTES_MAX {
            return Ok(None);
        }
        let account = self.login_account(name)?;
        let mut memory = password_checks::Memory::new();
        check_login(&mut memory, name, account.as_ref(), password)
    }

    /// Starts a session for `user` lasting `ttl_s`; returns its id (the cookie's value).
    pub fn new_session(&self, user: &str, ttl_s: i64) -> Result<String, AccountError> {
        let sid = random_hex(32)?;
        let now = now_s();
        self.with(|c| {
            // Expired sessions go as new ones come: the table stays as small as the live ones.
            c.execute("DELETE FROM session WHERE expires_s <= ?1", [now])?;
            c.execute(
                "INSERT INTO session (hash, user, expires_s) VALUES (?1, ?2, ?3)",
                params![digest(&sid), user, now + ttl_s],
            )
        })?;
        Ok(sid)
    }

    /// The user of a live session.
    pub fn session_user(&self, sid: &str) -> Result<Option<User>, AccountError> {
        if sid.len() != 64 {
            return Ok(None);
        }
        let row: Option<(String, String)> = self.with(|c| {
            c.query_row(
                "SELECT u.name, u.role FROM session s JOIN user u ON u.name = s.user \
                 WHERE s.hash = ?1 AND s.expires_s > ?2",
                params![digest(sid), now_s()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
        })?;
        Ok(row.map(|(name, role)| User {
            name,
            role: role.parse().unwrap_or(Role::Viewer),
        }))
    }

    /// Ends a session (logout). Unknown ids are ignored.
    pub fn end_session(&self, sid: &str) -> Result<(), AccountError> {
        self.with(|c| c.execute("DELETE FROM session WHERE hash = ?1", [digest(sid)]))?;
        Ok(())
    }

    /// Creates an API token for `user`; returns its listing and the token itself, which is
    /// shown once and never stored.
    pub fn new_token(&self, user: &str, label: &str) -> Result<(TokenInfo, String), AccountError> {
        if label.len() > TOKEN_LABEL_BYTES_MAX || label.chars().any(char::is_control) {
            return Err(AccountError::Invalid(format!(
                "token label: at most {TOKEN_LABEL_BYTES_MAX} bytes, no control characters"
            )));
        }
        let (id, secret) = (random_hex(4)?, random_hex(32)?);
        let created_s = now_s();
        let n = self.with(|c| {
            c.execute(
                "INSERT INTO token (id, user, hash, label, created_s) \
                 SELECT ?1, name, ?3, ?4, ?5 FROM user WHERE name = ?2",
                params![id, user, digest(&secret), label, created_s],
            )
        })?;
        if n == 0 {
            return Err(AccountError::NoSuchUser(user.to_owned()));
        }
        let info = TokenInfo {
            id: id.clone(),
            user: user.to_owned(),
            label: label.to_owned(),
            created_s,
            last_used_s: None,
        };
        Ok((info, format!("{TOKEN_PREFIX}{id}_{secret}")))
    }

    /// The tokens of one user, or of all.
    pub fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenInfo>, AccountError> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT id, user, label, created_s, last_used_s FROM token \
                 WHERE ?1 IS NULL OR user = ?1 ORDER BY user, created_s, id",
            )?;
            st.query_map([user], |r| {
                Ok(TokenInfo {
                    id: r.get(0)?,
                    user: r.get(1)?,
                    label: r.get(2)?,
                    created_s: r.get(3)?,
                    last_used_s: r.get(4)?,
                })
            })?
            .collect()
        })
    }

    /// Revokes a token by id; returns whether it existed.
    pub fn revoke_token(&self, id: &str) -> Result<bool, AccountError> {
        Ok(self.with(|c| c.execute("DELETE FROM token WHERE id = ?1", [id]))? > 0)
    }

    /// The user a token (as sent in `Authorization: Bearer`) belongs to.
    pub fn token_user(&self, token: &str) -> Result<Option<User>, AccountError> {
        let Some((id, secret)) = token
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|t| t.split_once('_'))
        else {
            return Ok(None);
        };
        if id.len() != 8 || secret.len() != 64 {
            return Ok(None);
        }
        let row: Option<(String, String, String)> = self.with(|c| {
            c.query_row(
                "SELECT t.hash, u.name, u.role FROM token t JOIN user u ON u.name = t.user \
                 WHERE t.id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
        })?;
        let Some((hash, name, role)) = row else {
            return Ok(None);
        };
        if !same(&hash, &digest(secret)) {
            return Ok(None);
        }
        self.with(|c| {
            c.execute(
                "UPDATE token SET last_used_s = ?2 WHERE id = ?1 \
                 AND (last_used_s IS NULL OR last_used_s <= ?2 - ?3)",
                params![id, now_s(), TOKEN_USE_RESOLUTION_S],
            )
        })?;
        Ok(Some(User {
            name,
            role: role.parse().unwrap_or(Role::Viewer),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts() -> (tempfile::TempDir, Accounts) {
        let dir = tempfile::tempdir().unwrap();
        let a = Accounts::open(&accounts_file(dir.path())).unwrap();
        (dir, a)
    }

    #[test]
    fn a_password_is_kept_as_an_argon2id_hash_and_checked() {
        let (_d, a) = accounts();
        assert!(a.is_empty().unwrap());
        a.add_user("alice", Role::Admin, "correct horse").unwrap();
        let stored: String = a
            .with(|c| c.query_row("SELECT hash FROM user", [], |r| r.get(0)))
            .unwrap();
        assert!(stored.starts_with("$argon2id$"), "{stored}");
        assert!(!stored.contains("correct horse"));
        let alice = a
            .verify_password("alice", "correct horse")
            .unwrap()
            .unwrap();
        assert_eq!(alice.role, Role::Admin);
        assert_eq!(a.verify_password("alice", "wrong horse").unwrap(), None);
        assert_eq!(a.verify_password("bob", "correct horse").unwrap(), None);
        assert!(matches!(
            a.add_user("alice", Role::Viewer, "another one"),
            Err(AccountError::UserExists(_))
        ));
        assert!(matches!(
            a.add_user("bad name", Role::Viewer, "long enough"),
            Err(AccountError::Invalid(_))
        ));
        assert!(matches!(
            a.add_user("carol", Role::Viewer, "short"),
            Err(AccountError::Invalid(_))
        ));
    }

    #[test]
    fn a_new_password_or_a_deleted_user_ends_their_sessions() {
        let (_d, a) = accounts();
        a.add_user("alice", Role::Viewer, "first password").unwrap();
        let sid = a.new_session("alice", 3600).unwrap();
        assert_eq!(a.session_user(&sid).unwrap().unwrap().name, "alice");
        a.set_password("alice", "second password").unwrap();
        assert_eq!(a.session_user(&sid).unwrap(), None);
        let (_, token) = a.new_token("alice", "cron").unwrap();
        assert!(a.token_user(&token).unwrap().is_some());
        a.set_password("alice", "third password").unwrap();
        assert_eq!(a.token_user(&token).unwrap(), None, "tokens end too");
        let sid = a.new_session("alice", 3600).unwrap();
        let (_, token) = a.new_token("alice", "cron").unwrap();
        a.delete_user("alice").unwrap();
        assert_eq!(a.session_user(&sid).unwrap(), None);
        assert_eq!(a.token_user(&token).unwrap(), None);
    }

    #[test]
    fn unlock_and_a_new_password_mark_the_counters_cleared() {
        let (_d, a) = accounts();
        a.add_user("alice", Role::Viewer, "first password").unwrap();
        let first = a.login_account("alice").unwrap().unwrap().reset_us;
        a.unlock("alice").unwrap();
        let unlocked = a.login_account("alice").unwrap().unwrap().reset_us;
        assert!(unlocked > first);
        a.set_password("alice", "second password").unwrap();
        assert!(a.login_account("alice").unwrap().unwrap().reset_us > unlocked);
        assert!(matches!(a.unlock("bob"), Err(AccountError::NoSuchUser(_))));
        assert!(a.login_account("bob").unwrap().is_none());
        assert!(a.login_account("bad name\n").unwrap().is_none());
    }

    #[test]
    fn sessions_expire_and_logout_ends_them() {
        let (_d, a) = accounts();
        a.add_user("alice", Role::Viewer, "a password").unwrap();
        let gone = a.new_session("alice", -1).unwrap();
        assert_eq!(a.session_user(&gone).unwrap(), None);
        let sid = a.new_session("alice", 3600).unwrap();
        a.end_session(&sid).unwrap();
        assert_eq!(a.session_user(&sid).unwrap(), None);
    }

    #[test]
    fn every_listen_and_download_is_logged_with_its_user() {
        let (_d, a) = accounts();
        a.log_access("alice", "listen", "uid-1/stream/0").unwrap();
        a.log_access("alice", "pcap", "uid-1").unwrap();
        let log = a.access_log(10).unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(
            (log[0].action.as_str(), log[0].target.as_str()),
            ("pcap", "uid-1")
        );
        assert_eq!(
            (log[1].user.as_str(), log[1].action.as_str()),
            ("alice", "listen")
        );
    }

    #[test]
    fn tokens_are_stored_hashed_listed_and_revocable() {
        let (_d, a) = accounts();
        a.add_user("ops", Role::Viewer, "a password").unwrap();
        let (info, token) = a.new_token("ops", "grafana").unwrap();
        assert!(token.starts_with("tdm_"));
        let stored: String = a
            .with(|c| c.query_row("SELECT hash FROM token", [], |r| r.get(0)))
            .unwrap();
        assert!(!token.contains(&stored) && !stored.contains(&token[13..]));
        assert_eq!(a.token_user(&token).unwrap().unwrap().name, "ops");
        let mut forged = token.clone();
        forged.pop();
        forged.push('x');
        assert_eq!(a.token_user(&forged).unwrap(), None);
        let listed = a.tokens(Some("ops")).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].last_used_s.is_some());
        assert!(a.revoke_token(&info.id).unwrap());
        assert_eq!(a.token_user(&token).unwrap(), None);
        assert!(matches!(
            a.new_token("nobody", ""),
            Err(AccountError::NoSuchUser(_))
        ));
    }
}
