//! Prewarmed script processes: started ahead of the calls and blocked reading their header.
//!
//! A warmer thread keeps each prewarmed route's pool at its target, starting a replacement as
//! soon as a process is taken and replacing any that died while waiting. Taking one is a lock and
//! a pop; a pool that is momentarily empty makes the session start its own process as usual.

use super::path::ScriptPath;
use super::process;
use super::{AstEnv, ScriptMetrics};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use tracing::warn;

/// How often the warmer looks for processes that died while waiting.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);
/// Pause after a failed start, so a broken script does not make the warmer spin.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

struct Pool {
    script: ScriptPath,
    target: usize,
    ready: VecDeque<Child>,
}

struct State {
    pools: HashMap<String, Pool>,
    stopping: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The prewarmed routes' pools (empty when no route is prewarmed).
pub(super) struct Pools {
    shared: Option<Arc<Shared>>,
}

impl Pools {
    pub fn start(
        routes: Vec<(ScriptPath, usize)>,
        working_dir: PathBuf,
        env: AstEnv,
        metrics: Arc<ScriptMetrics>,
    ) -> Pools {
        if routes.is_empty() {
            return Pools { shared: None };
        }
        let pools = routes
            .into_iter()
            .map(|(script, target)| {
                (
                    script.file.clone(),
                    Pool {
                        script,
                        target,
                        ready: VecDeque::with_capacity(target),
                    },
                )
            })
            .collect();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pools,
                stopping: false,
            }),
            wake: Condvar::new(),
        });
        let warmer = shared.clone();
        std::thread::Builder::new()
            .name("script-warmer".into())
            .spawn(move || warm(&warmer, &working_dir, &env, &metrics))
            .expect("start the script warmer thread");
        Pools {
            shared: Some(shared),
        }
    }

    /// A live prewarmed process of `file` (a [`ScriptPath::file`]), if one is ready.
    pub fn take(&self, file: &str) -> Option<Child> {
        let shared = self.shared.as_ref()?;
        let mut state = shared.state.lock().expect("pool lock");
        let pool = state.pools.get_mut(file)?;
        let mut taken = None;
        while let Some(mut child) = pool.ready.pop_front() {
            if matches!(child.try_wait(), Ok(None)) {
                taken = Some(child);
                break;
            }
        }
        drop(state);
        shared.wake.notify_one();
        taken
    }
}

impl Drop for Pools {
    fn drop(&mut self) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.state.lock().expect("pool lock");
        state.stopping = true;
        for pool in state.pools.values_mut() {
            for mut child in pool.ready.drain(..) {
                process::kill_group(child.id());
                let _ = child.wait();
            }
        }
        drop(state);
        shared.wake.notify_all();
    }
}

fn warm(shared: &Shared, working_dir: &std::path::Path, env: &AstEnv, metrics: &ScriptMetrics) {
    let mut state = shared.state.lock().expect("pool lock");
    loop {
        if state.stopping {
            return;
        }
        // Which pools are short, and of what script.
        let mut short: Vec<ScriptPath> = Vec::new();
        for pool in state.pools.values_mut() {
            pool.ready.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
            if pool.ready.len() < pool.target {
                short.push(pool.script.clone());
            }
            metrics
                .for_script(&pool.script.file)
                .prewarmed
                .set(pool.ready.len() as i64);
        }
        if short.is_empty() {
            state = shared
                .wake
                .wait_timeout(state, LIVENESS_CHECK)
                .expect("pool lock")
                .0;
            continue;
        }
        // Start processes without holding the lock: sessions keep taking meanwhile.
        drop(state);
        let mut started = Vec::with_capacity(short.len());
        let mut failed = false;
        for script in short {
            match process::spawn(&script.full, &[] as &[&str], working_dir, env) {
                Ok(child) => started.push((script.file, child)),
                Err(e) => {
                    warn!(script = %script.name, error = %e, "cannot prewarm the script");
                    failed = true;
                }
            }
        }
        state = shared.state.lock().expect("pool lock");
        let stopping = state.stopping;
        for (file, child) in started {
            match state.pools.get_mut(&file) {
                Some(pool) if !stopping => pool.ready.push_back(child),
                _ => {
                    let mut child = child;
                    process::kill_group(child.id());
                    let _ = child.wait();
                }
            }
        }
        if failed {
            state = shared
                .wake
                .wait_timeout(state, RETRY_AFTER_FAILURE)
                .expect("pool lock")
                .0;
        }
    }
}
