//! The sensors a collector knows: `sensors.sqlite3` in the data directory, a file of its own
//! (like the console's `console.sqlite3`) so that `tandem sensor add|list|del` change it while
//! `tandem serve` runs; the collector reads it at each `Hello`, so a sensor added is let in at
//! once and a sensor deleted is refused from its next session on.
//!
//! A token is 32 random bytes in hex, printed once by `tandem sensor add`; only its SHA-256 is
//! kept (a random secret of 256 bits needs no slow hash: nobody can guess it, and the hash
//! only keeps a stolen file from being a list of working tokens), and compared in constant
//! time.
//!
//! The file says what it is and which format it holds (application_id `TDSN`, `PRAGMA
//! user_version`; crate `fileformat`): an older list is upgraded at open in one transaction
//! ([`MIGRATIONS`]), a newer one refused ([`SensorListError::Format`]) untouched.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

/// The file's name in the data directory.
pub const SENSORS_FILE: &str = "sensors.sqlite3";

/// How long a statement waits for another process' write lock.
const BUSY_TIMEOUT_MS: u64 = 5_000;

/// The sensor list of a data directory.
pub fn sensors_file(data_dir: &Path) -> PathBuf {
    data_dir.join(SENSORS_FILE)
}

#[derive(Debug, thiserror::Error)]
pub enum SensorListError {
    #[error("sensor list {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error("sensor list {path}: {source}")]
    Files {
        path: String,
        source: std::io::Error,
    },
    /// Another kind of file, or a newer Tandem's (crate `fileformat`).
    #[error(transparent)]
    Format(#[from] fileformat::FormatError),
    #[error(
        "{0:?} cannot name a sensor: use 1 to 64 letters, digits, '.', '_' or '-' (not starting with '.' or '-')"
    )]
    BadName(String),
    #[error("sensor {0:?} exists already (delete it first to give it a new token)")]
    Exists(String),
    #[error("no sensor named {0:?}")]
    Unknown(String),
    #[error("no random numbers from the system: {0}")]
    Random(String),
}

/// The list's format versions (crate `fileformat`: application_id `TDSN`, `PRAGMA
/// user_version`), applied at open in one transaction; a newer Tandem's list is refused.
pub const MIGRATIONS: &[fileformat::Migration] = &[fileformat::Migration {
    version: 1,
    name: "sensors and their token hashes",
    apply: |c| {
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS sensor (
                name         TEXT PRIMARY KEY,
                token_sha256 BLOB NOT NULL,
                created_s    INTEGER NOT NULL
            );",
        )
    },
}];

/// A known sensor, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownSensor {
    pub name: String,
    /// Seconds since the epoch.
    pub created_s: i64,
}

/// What a `Hello`'s name and token amount to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    UnknownSensor,
    WrongToken,
}

/// `sensors.sqlite3`: one table `sensor(name PRIMARY KEY, token_sha256, created_s)`.
pub struct SensorList {
    path: String,
    conn: Connection,
}

fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Equal bytes, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl SensorList {
    /// Opens (creating) the list. It holds the sensors' token hashes: its files are their
    /// owner's alone (0600) from the first byte, and an older release's 0644 ones are narrowed.
    pub fn open(path: &Path) -> Result<SensorList, SensorListError> {
        let name = path.display().to_string();
        filemode::prepare_sqlite(path, &filemode::Access::Private).map_err(|source| {
            SensorListError::Files {
                path: name.clone(),
                source,
            }
        })?;
        let wrap = |source| SensorListError::Sqlite {
            path: name.clone(),
            source,
        };
        let conn = Connection::open(path).map_err(wrap)?;
        conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(wrap)?;
        fileformat::upgrade(&conn, path, &fileformat::SENSOR_LIST, MIGRATIONS)?;
        Ok(SensorList { path: name, conn })
    }

    fn err(&self, source: rusqlite::Error) -> SensorListError {
        SensorListError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Adds `name` with a new token, returned once (only its hash is kept).
    pub fn add(&self, name: &str) -> Result<String, SensorListError> {
        if !uplink::valid_sensor_name(name) {
            return Err(SensorListError::BadName(name.to_string()));
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| SensorListError::Random(e.to_string()))?;
        let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        match self.conn.execute(
            "INSERT INTO sensor (name, token_sha256, created_s) VALUES (?1, ?2, ?3)",
            params![name, hash(&token), now],
        ) {
            Ok(_) => Ok(token),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(SensorListError::Exists(name.to_string()))
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// Deletes `name`; its next session is refused.
    pub fn delete(&self, name: &str) -> Result<(), SensorListError> {
        let n = self
            .conn
            .execute("DELETE FROM sensor WHERE name = ?1", [name])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(SensorListError::Unknown(name.to_string()));
        }
        Ok(())
    }

    pub fn list(&self) -> Result<Vec<KnownSensor>, SensorListError> {
        let mut st = self
            .conn
            .prepare("SELECT name, created_s FROM sensor ORDER BY name")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| {
                Ok(KnownSensor {
                    name: r.get(0)?,
                    created_s: r.get(1)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Whether `name` is known.
    pub fn contains(&self, name: &str) -> Result<bool, SensorListError> {
        self.conn
            .query_row("SELECT 1 FROM sensor WHERE name = ?1", [name], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .map_err(|e| self.err(e))
    }

    /// Whether `token` is `name`'s.
    pub fn verify(&self, name: &str, token: &str) -> Result<Verdict, SensorListError> {
        let stored: Option<Vec<u8>> = self
            .conn
            .query_row(
                "SELECT token_sha256 FROM sensor WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(match stored {
            None => Verdict::UnknownSensor,
            Some(h) if same(&h, &hash(token)) => Verdict::Accepted,
            Some(_) => Verdict::WrongToken,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_shown_once_and_only_its_hash_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = sensors_file(dir.path());
        let list = SensorList::open(&path).unwrap();
        let token = list.add("site-a").unwrap();
        assert_eq!(token.len(), 64);
        assert!(matches!(
            list.add("site-a"),
            Err(SensorListError::Exists(_))
        ));
        assert!(matches!(list.add("a|b"), Err(SensorListError::BadName(_))));
        // Another process (`tandem sensor add` while serve runs) sees the same file.
        let other = SensorList::open(&path).unwrap();
        assert_eq!(other.verify("site-a", &token).unwrap(), Verdict::Accepted);
        assert_eq!(other.verify("site-a", "x").unwrap(), Verdict::WrongToken);
        assert_eq!(
            other.verify("site-b", &token).unwrap(),
            Verdict::UnknownSensor
        );
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the token is not in the file"
        );
        assert_eq!(list.list().unwrap()[0].name, "site-a");
        list.delete("site-a").unwrap();
        assert_eq!(
            other.verify("site-a", &token).unwrap(),
            Verdict::UnknownSensor
        );
        assert!(matches!(
            list.delete("site-a"),
            Err(SensorListError::Unknown(_))
        ));
    }
}
