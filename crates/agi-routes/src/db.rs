//! FastAGI routes backed by the key-value store, so dialplan reads and writes Tandem's store
//! without a script:
//!
//! ```text
//! same => n,AGI(agi://127.0.0.1/db/get,sip,${EXTEN})           ; DB_RESULT, TANDEM_DB_STATUS
//! same => n,AGI(agi://127.0.0.1/db/get,sip,${EXTEN},CONTACT)   ; the value in CONTACT instead
//! same => n,AGI(agi://127.0.0.1/db/put,sip,${EXTEN},${VALUE})  ; returns once on disk
//! same => n,AGI(agi://127.0.0.1/db/del,sip,${EXTEN})
//! same => n,AGI(agi://127.0.0.1/db/deltree,sip[,KEYTREE])      ; TANDEM_DB_COUNT
//! ```
//!
//! `TANDEM_DB_STATUS` is `FOUND` or `NOTFOUND` for get and del, `OK` for put and deltree. Missing
//! arguments or a store error end the session with `failure` (AGISTATUS=FAILURE) and a log line.
//!
//! A native handler gets the store the same way these do: it holds a [`kv::Store`] (a cheap
//! clone) in its own struct.

use fastagi::{AgiError, Handler, RouteError, Router, Session};
use kv::{Durability, Store, Value};

/// The variable every db route sets to say what happened.
pub const STATUS_VARIABLE: &str = "TANDEM_DB_STATUS";

/// The variable `db/get` sets when no third argument names one (as Asterisk's DBget did).
pub const DEFAULT_RESULT_VARIABLE: &str = "DB_RESULT";

fn fail(msg: String) -> AgiError {
    AgiError::Handler(msg.into())
}

fn required<'a>(s: &'a Session, n: usize, route: &str, what: &str) -> Result<&'a str, AgiError> {
    match s.arg(n) {
        Some(a) if !a.is_empty() => Ok(a),
        _ => Err(fail(format!(
            "{route}: argument {n} ({what}) is missing; use AGI(agi://HOST/{route},FAMILY,KEY...)"
        ))),
    }
}

fn store_err(route: &str, e: impl std::fmt::Display) -> AgiError {
    fail(format!("{route}: {e}"))
}

/// Reads from memory; a value that lives on disk is read on the blocking pool, never on the
/// session's runtime thread.
async fn get(store: &Store, family: &str, key: &str) -> Result<Option<Value>, AgiError> {
    if let Some(found) = store.try_get(family, key) {
        return Ok(found);
    }
    let (store, family, key) = (store.clone(), family.to_string(), key.to_string());
    tokio::task::spawn_blocking(move || store.get(&family, &key))
        .await
        .map_err(|e| store_err("db/get", e))?
        .map_err(|e| store_err("db/get", e))
}

/// `db/get,FAMILY,KEY[,VARIABLE]`.
pub struct DbGet {
    pub store: Store,
}

impl Handler for DbGet {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let family = required(s, 1, "db/get", "FAMILY")?.to_string();
        let key = required(s, 2, "db/get", "KEY")?.to_string();
        let var = s
            .arg(3)
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_RESULT_VARIABLE)
            .to_string();
        match get(&self.store, &family, &key).await? {
            Some(v) => {
                s.set_variable(&var, &v.to_string_lossy()).await?;
                s.set_variable(STATUS_VARIABLE, "FOUND").await
            }
            None => {
                s.set_variable(&var, "").await?;
                s.set_variable(STATUS_VARIABLE, "NOTFOUND").await
            }
        }
    }
}

/// `db/put,FAMILY,KEY,VALUE`: durable before the dialplan continues.
pub struct DbPut {
    pub store: Store,
}

impl Handler for DbPut {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let family = required(s, 1, "db/put", "FAMILY")?.to_string();
        let key = required(s, 2, "db/put", "KEY")?.to_string();
        let value = s.arg(3).unwrap_or("").to_string();
        self.store
            .put_with(&family, &key, value, Durability::Sync)
            .map_err(|e| store_err("db/put", e))?
            .await
            .map_err(|e| store_err("db/put", e))?;
        s.set_variable(STATUS_VARIABLE, "OK").await
    }
}

/// `db/del,FAMILY,KEY`.
pub struct DbDel {
    pub store: Store,
}

impl Handler for DbDel {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let family = required(s, 1, "db/del", "FAMILY")?.to_string();
        let key = required(s, 2, "db/del", "KEY")?.to_string();
        let (existed, commit) = self
            .store
            .del_with(&family, &key, Durability::Sync)
            .map_err(|e| store_err("db/del", e))?;
        commit.await.map_err(|e| store_err("db/del", e))?;
        let status = if existed { "FOUND" } else { "NOTFOUND" };
        s.set_variable(STATUS_VARIABLE, status).await
    }
}

/// `db/deltree,FAMILY[,KEYTREE]`: sets `TANDEM_DB_COUNT` to the number of keys deleted.
pub struct DbDeltree {
    pub store: Store,
}

impl Handler for DbDeltree {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let family = required(s, 1, "db/deltree", "FAMILY")?.to_string();
        let keytree = s.arg(2).filter(|k| !k.is_empty()).map(str::to_string);
        // A tree deletion scans the whole index: done on the blocking pool.
        let store = self.store.clone();
        let (n, commit) = tokio::task::spawn_blocking(move || {
            store.deltree_with(Some(&family), keytree.as_deref(), Durability::Sync)
        })
        .await
        .map_err(|e| store_err("db/deltree", e))?
        .map_err(|e| store_err("db/deltree", e))?;
        commit.await.map_err(|e| store_err("db/deltree", e))?;
        s.set_variable("TANDEM_DB_COUNT", &n.to_string()).await?;
        s.set_variable(STATUS_VARIABLE, "OK").await
    }
}

/// Serves legacy scripts' `DATABASE GET/PUT/DEL/DELTREE` on chosen families from the store
/// instead of relaying them to Asterisk (`kv.script_families`), with Asterisk 22's replies:
/// GET `200 result=1 (value)` or `200 result=0`; PUT and DEL `200 result=1` (DEL of a missing
/// key too), `200 result=0` if the store fails; DELTREE `200 result=1` when nothing was deleted
/// and `200 result=0` when something was (res_agi's inverted answer, kept for scripts that test
/// it). A PUT is answered once it is on disk. Commands with the wrong number of arguments are
/// relayed, so Asterisk gives its usage reply.
pub struct DatabaseIntercept {
    pub store: Store,
    pub families: std::collections::HashSet<String>,
}

fn get_reply(v: Option<Value>) -> String {
    match v {
        // A line break would end the reply early: shown as a space.
        Some(v) => format!(
            "200 result=1 ({})",
            v.to_string_lossy().replace(['\r', '\n'], " ")
        ),
        None => "200 result=0".to_string(),
    }
}

impl fastagi::script::Intercept for DatabaseIntercept {
    fn intercept(&self, line: &str) -> Option<fastagi::script::InterceptedReply> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let args = agi::split_args(line).ok()?;
        if args.len() < 3
            || !args[0].eq_ignore_ascii_case("DATABASE")
            || !self.families.contains(&args[2])
        {
            return None;
        }
        let store = self.store.clone();
        let sub = args[1].to_ascii_uppercase();
        let mut args = args.into_iter().skip(2);
        let family = args.next().unwrap_or_default();
        let rest: Vec<String> = args.collect();
        match (sub.as_str(), rest.len()) {
            ("GET", 1) => {
                let key = rest.into_iter().next().unwrap_or_default();
                if let Some(found) = store.try_get(&family, &key) {
                    let reply = get_reply(found);
                    return Some(Box::pin(async move { reply }));
                }
                Some(Box::pin(async move {
                    match tokio::task::spawn_blocking(move || store.get(&family, &key)).await {
                        Ok(Ok(v)) => get_reply(v),
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "DATABASE GET from the store failed");
                            "200 result=0".to_string()
                        }
                        Err(_) => "200 result=0".to_string(),
                    }
                }))
            }
            ("PUT", 2) => {
                let mut it = rest.into_iter();
                let (key, value) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                Some(Box::pin(async move {
                    let done = match store.put_with(&family, &key, value, Durability::Sync) {
                        Ok(commit) => commit.await,
                        Err(e) => Err(e),
                    };
                    match done {
                        Ok(()) => "200 result=1".to_string(),
                        Err(e) => {
                            tracing::warn!(error = %e, "DATABASE PUT to the store failed");
                            "200 result=0".to_string()
                        }
                    }
                }))
            }
            ("DEL", 1) => {
                let key = rest.into_iter().next().unwrap_or_default();
                Some(Box::pin(async move {
                    let done = match store.del_with(&family, &key, Durability::Sync) {
                        Ok((_, commit)) => commit.await,
                        Err(e) => Err(e),
                    };
                    match done {
                        Ok(()) => "200 result=1".to_string(),
                        Err(e) => {
                            tracing::warn!(error = %e, "DATABASE DEL in the store failed");
                            "200 result=0".to_string()
                        }
                    }
                }))
            }
            ("DELTREE", 0 | 1) => {
                let keytree = rest.into_iter().next();
                Some(Box::pin(async move {
                    let done = tokio::task::spawn_blocking(move || {
                        let (n, commit) = store.deltree_with(
                            Some(&family),
                            keytree.as_deref(),
                            Durability::Sync,
                        )?;
                        commit.wait().map(|()| n)
                    })
                    .await;
                    match done {
                        Ok(Ok(n)) if n > 0 => "200 result=0".to_string(),
                        Ok(Ok(_)) => "200 result=1".to_string(),
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "DATABASE DELTREE in the store failed");
                            "200 result=0".to_string()
                        }
                        Err(_) => "200 result=0".to_string(),
                    }
                }))
            }
            _ => None,
        }
    }
}

/// Adds the `db/get`, `db/put`, `db/del` and `db/deltree` routes to `router`.
pub fn add(router: Router, store: &Store) -> Result<Router, RouteError> {
    router
        .route(
            "db/get",
            DbGet {
                store: store.clone(),
            },
        )?
        .route(
            "db/put",
            DbPut {
                store: store.clone(),
            },
        )?
        .route(
            "db/del",
            DbDel {
                store: store.clone(),
            },
        )?
        .route(
            "db/deltree",
            DbDeltree {
                store: store.clone(),
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use asterisk_emu::{AgiStatus, Plan};
    use std::sync::Arc;
    use std::time::Duration;

    async fn session(
        addr: std::net::SocketAddr,
        route: &str,
        args: &[&str],
    ) -> asterisk_emu::Outcome {
        let plan = Plan {
            args: args.iter().map(|a| a.to_string()).collect(),
            idle_timeout: Duration::from_secs(10),
            ..Plan::route(route)
        };
        asterisk_emu::run(addr, &plan, 1).await.unwrap()
    }

    fn sets(o: &asterisk_emu::Outcome, var: &str, value: &str) -> bool {
        o.exchanges
            .iter()
            .any(|(cmd, _)| cmd.starts_with(&format!("SET VARIABLE {var} ")) && cmd.contains(value))
    }

    #[tokio::test]
    async fn dialplan_reads_and_writes_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path(), kv::Options::default()).unwrap();
        let config = fastagi::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            workers: 1,
            close_linger_ms: 500,
            ..fastagi::ServerConfig::default()
        };
        let router = add(Router::new(), &store).unwrap();
        let server =
            fastagi::Server::bind(config, router, Arc::new(fastagi::Metrics::unregistered()))
                .unwrap();
        let addr = server.local_addr();
        let (stop, rx) = fastagi::shutdown_channel();
        let done = tokio::spawn(server.run(rx));

        let o = session(addr, "db/put", &["sip", "1001", "sip:1001@192.0.2.1"]).await;
        assert_eq!(o.status, AgiStatus::Success, "{o:?}");
        assert!(sets(&o, STATUS_VARIABLE, "OK"), "{o:?}");
        assert_eq!(
            store.get("sip", "1001").unwrap().unwrap(),
            "sip:1001@192.0.2.1"
        );

        let o = session(addr, "db/get", &["sip", "1001"]).await;
        assert!(
            sets(&o, DEFAULT_RESULT_VARIABLE, "sip:1001@192.0.2.1"),
            "{o:?}"
        );
        assert!(sets(&o, STATUS_VARIABLE, "FOUND"), "{o:?}");
        let o = session(addr, "db/get", &["sip", "1001", "CONTACT"]).await;
        assert!(sets(&o, "CONTACT", "sip:1001@192.0.2.1"), "{o:?}");
        let o = session(addr, "db/get", &["sip", "9999"]).await;
        assert!(sets(&o, STATUS_VARIABLE, "NOTFOUND"), "{o:?}");

        // A large value lives on disk after a reopen; the route reads it off the runtime.
        let big = "B".repeat(6000);
        store.put("big", "v", big.as_str()).unwrap();
        let o = session(addr, "db/get", &["big", "v"]).await;
        assert!(sets(&o, DEFAULT_RESULT_VARIABLE, &big), "{o:?}");

        store.put("sip", "1001/x", "below").unwrap();
        store.put("sip", "10011", "sibling").unwrap();
        let o = session(addr, "db/deltree", &["sip", "1001"]).await;
        assert!(sets(&o, "TANDEM_DB_COUNT", "2"), "{o:?}");
        assert!(store.exists("sip", "10011"));
        let o = session(addr, "db/del", &["sip", "10011"]).await;
        assert!(sets(&o, STATUS_VARIABLE, "FOUND"), "{o:?}");
        assert!(!store.exists("sip", "10011"));

        // Scripts' DATABASE commands on a chosen family are answered from the store.
        let ic = DatabaseIntercept {
            store: store.clone(),
            families: ["cf".to_string()].into_iter().collect(),
        };
        use fastagi::script::Intercept;
        assert!(ic.intercept("DATABASE GET other 1").is_none());
        assert!(ic.intercept("GET VARIABLE X").is_none());
        assert!(
            ic.intercept("DATABASE PUT cf 1001").is_none(),
            "wrong count: relayed"
        );
        assert_eq!(
            ic.intercept("DATABASE GET cf 1001").unwrap().await,
            "200 result=0"
        );
        assert_eq!(
            ic.intercept("DATABASE PUT cf 1001 \"555 1234\"")
                .unwrap()
                .await,
            "200 result=1"
        );
        assert_eq!(store.get("cf", "1001").unwrap().unwrap(), "555 1234");
        assert_eq!(
            ic.intercept("database get cf 1001\r").unwrap().await,
            "200 result=1 (555 1234)"
        );
        assert_eq!(
            ic.intercept("DATABASE DEL cf 1001").unwrap().await,
            "200 result=1"
        );
        ic.intercept("DATABASE PUT cf 1002/a x").unwrap().await;
        assert_eq!(
            ic.intercept("DATABASE DELTREE cf 1002").unwrap().await,
            "200 result=0"
        );
        assert_eq!(
            ic.intercept("DATABASE DELTREE cf").unwrap().await,
            "200 result=1"
        );

        // Missing arguments: AGISTATUS=FAILURE.
        let o = session(addr, "db/get", &["sip"]).await;
        assert_eq!(o.status, AgiStatus::Failure, "{o:?}");

        let _ = stop.send(true);
        done.await.unwrap();
    }

    #[tokio::test]
    async fn a_scripts_database_commands_reach_the_store() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path().join("data"), kv::Options::default()).unwrap();
        let scripts = dir.path().join("agi-bin");
        std::fs::create_dir(&scripts).unwrap();
        let script = scripts.join("db.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\n\
             while read -r l && [ -n \"$l\" ]; do :; done\n\
             echo 'DATABASE PUT cf 1001 \"555 1234\"'; read -r a\n\
             echo 'DATABASE GET cf 1001'; read -r b\n\
             echo 'DATABASE GET other 1001'; read -r c\n\
             echo \"SET VARIABLE R \\\"$a|$b|$c\\\"\"; read -r d\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = fastagi::script::ScriptConfig {
            dir: Some(scripts),
            ..fastagi::script::ScriptConfig::default()
        };
        let runner = fastagi::script::ScriptRunner::new(
            config,
            8192,
            Arc::new(fastagi::script::ScriptMetrics::unregistered()),
        )
        .unwrap()
        .with_intercept(Arc::new(DatabaseIntercept {
            store: store.clone(),
            families: ["cf".to_string()].into_iter().collect(),
        }));
        let server = fastagi::Server::bind(
            fastagi::ServerConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                workers: 1,
                close_linger_ms: 500,
                ..fastagi::ServerConfig::default()
            },
            Router::new().fallback("script", runner),
            Arc::new(fastagi::Metrics::unregistered()),
        )
        .unwrap();
        let addr = server.local_addr();
        let (stop, rx) = fastagi::shutdown_channel();
        let done = tokio::spawn(server.run(rx));

        let o = session(addr, "db.sh", &[]).await;
        assert_eq!(o.status, AgiStatus::Success, "{o:?}");
        // Asterisk saw only the commands on other families.
        let sent: Vec<&str> = o.exchanges.iter().map(|(c, _)| c.as_str()).collect();
        assert!(sent.iter().all(|c| !c.contains(" cf ")), "{sent:?}");
        assert!(
            sent.iter().any(|c| c.starts_with("DATABASE GET other")),
            "{sent:?}"
        );
        assert!(
            sets(&o, "R", "200 result=1|200 result=1 (555 1234)|200 result=0"),
            "{sent:?}"
        );
        assert_eq!(store.get("cf", "1001").unwrap().unwrap(), "555 1234");

        let _ = stop.send(true);
        done.await.unwrap();
    }
}
