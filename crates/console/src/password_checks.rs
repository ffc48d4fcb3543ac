//! Password checks with a fixed memory budget.
//!
//! An Argon2id check with the default parameters fills 19 MiB. Run once per login attempt
//! without a bound, a few hundred concurrent attempts take gigabytes, and the allocator keeps
//! much of it afterwards. Here at most `checks_max` checks run at once, each in a buffer kept
//! for the next one: the memory the login may ever use is `checks_max` × 19 MiB, allocated once.
//! An attempt that waits longer than `check_wait_ms` for a buffer is refused (429).
//!
//! A name that does not exist is checked against a decoy with the same parameters in the same
//! buffers: it costs the same time and the same memory, so neither tells which names exist.

use argon2::password_hash::PasswordHash;
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most memory one stored hash may ask for, in KiB (a hash asking for more is refused
/// rather than allocated: the accounts file is trusted, but not to size our memory).
pub const HASH_MEMORY_KIB_MAX: u32 = 64 * 1024;

/// A check's working memory (Argon2 blocks of 1 KiB).
pub type Memory = Vec<Block>;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("stored password hash: {0}")]
    Hash(String),
    #[error("stored password hash asks for {0} KiB, more than {HASH_MEMORY_KIB_MAX} KiB")]
    TooMuchMemory(u32),
}

fn hash_err(e: impl std::fmt::Display) -> CheckError {
    CheckError::Hash(e.to_string())
}

/// Whether `password` is the one hashed in `phc` (a PHC string), computed in `memory`
/// (grown to what the hash asks for, and kept).
pub fn verify(memory: &mut Memory, phc: &str, password: &[u8]) -> Result<bool, CheckError> {
    let parsed = PasswordHash::new(phc).map_err(hash_err)?;
    let algorithm = Algorithm::try_from(parsed.algorithm).map_err(hash_err)?;
    let version = match parsed.version {
        Some(v) => Version::try_from(v).map_err(hash_err)?,
        None => Version::default(),
    };
    let params = Params::try_from(&parsed).map_err(hash_err)?;
    let expected = parsed.hash.ok_or_else(|| hash_err("no hash in it"))?;
    let salt = parsed.salt.ok_or_else(|| hash_err("no salt in it"))?;
    let mut salt_buf = [0u8; 64];
    let salt = salt.decode_b64(&mut salt_buf).map_err(hash_err)?;
    let mut out = [0u8; 64];
    let out = out
        .get_mut(..expected.len())
        .ok_or_else(|| hash_err("hash longer than 64 bytes"))?;
    run(memory, algorithm, version, params, password, salt, out)?;
    Ok(same(out, expected.as_bytes()))
}

/// The check of a name that does not exist: the default parameters (what every stored hash
/// uses) over a fixed salt. Never true.
pub fn decoy(memory: &mut Memory, password: &[u8]) -> Result<bool, CheckError> {
    let mut out = [0u8; 32];
    run(
        memory,
        Algorithm::Argon2id,
        Version::default(),
        Params::default(),
        password,
        b"tandem: no such user",
        &mut out,
    )?;
    Ok(false)
}

fn run(
    memory: &mut Memory,
    algorithm: Algorithm,
    version: Version,
    params: Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<(), CheckError> {
    if params.m_cost() > HASH_MEMORY_KIB_MAX {
        return Err(CheckError::TooMuchMemory(params.m_cost()));
    }
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password, salt, out, &mut memory[..blocks])
        .map_err(hash_err)
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bounded pool of checks.
pub struct PasswordChecks {
    slots: Arc<Semaphore>,
    memory: Arc<Mutex<Vec<Memory>>>,
    wait: Duration,
}

/// The right to run one check, with its buffer; both go back to the pool when dropped.
pub struct CheckSlot {
    _permit: OwnedSemaphorePermit,
    memory: Memory,
    pool: Arc<Mutex<Vec<Memory>>>,
}

impl PasswordChecks {
    pub fn new(checks_max: usize, wait: Duration) -> PasswordChecks {
        PasswordChecks {
            slots: Arc::new(Semaphore::new(checks_max.max(1))),
            memory: Arc::new(Mutex::new(Vec::new())),
            wait,
        }
    }

    /// A free check within the wait, or `None` (the caller answers 429). Waiters are served
    /// in arrival order.
    pub async fn slot(&self) -> Option<CheckSlot> {
        let permit = tokio::time::timeout(self.wait, self.slots.clone().acquire_owned())
            .await
            .ok()?
            .ok()?;
        // Never more buffers than permits: each slot holds one.
        let memory = self
            .memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        Some(CheckSlot {
            _permit: permit,
            memory,
            pool: self.memory.clone(),
        })
    }
}

impl CheckSlot {
    /// The slot's working memory, for [`verify`] or [`decoy`].
    pub fn memory(&mut self) -> &mut Memory {
        &mut self.memory
    }
}

impl Drop for CheckSlot {
    fn drop(&mut self) {
        let memory = std::mem::take(&mut self.memory);
        self.pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::{PasswordHasher, SaltString};

    #[test]
    fn a_check_in_kept_memory_agrees_with_argon2s_own() {
        let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
        let phc = Argon2::default()
            .hash_password(b"correct horse", &salt)
            .unwrap()
            .to_string();
        let mut memory = Memory::new();
        assert!(verify(&mut memory, &phc, b"correct horse").unwrap());
        assert_eq!(memory.len(), 19 * 1024, "19 MiB of 1 KiB blocks");
        assert!(!verify(&mut memory, &phc, b"wrong horse").unwrap());
        assert!(!decoy(&mut memory, b"correct horse").unwrap());
        assert_eq!(memory.len(), 19 * 1024, "the buffer is reused, not grown");
        assert!(verify(&mut memory, "$argon2id$nonsense", b"x").is_err());
        let greedy = "$argon2id$v=19$m=1048576,t=2,p=1$MDEyMzQ1Njc4OWFiY2RlZg$\
                      AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        assert!(matches!(
            verify(&mut memory, greedy, b"x"),
            Err(CheckError::TooMuchMemory(1_048_576))
        ));
    }

    #[tokio::test]
    async fn checks_beyond_the_pool_wait_then_are_refused() {
        let checks = PasswordChecks::new(2, Duration::from_millis(50));
        let a = checks.slot().await.unwrap();
        let _b = checks.slot().await.unwrap();
        assert!(checks.slot().await.is_none(), "both slots are taken");
        drop(a);
        assert!(checks.slot().await.is_some());
    }
}
