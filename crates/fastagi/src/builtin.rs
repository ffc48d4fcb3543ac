//! Routes every Tandem serves: a health check, an example that shows the session API, and the
//! ten-command session the benchmark measures.

use crate::{AgiError, Handler, Router, Session};

/// `agi://127.0.0.1/health`: sets `TANDEM_STATUS=OK` and `TANDEM_VERSION` on the channel, so a
/// dialplan can check that Tandem answers before it relies on it.
pub struct Health;

impl Handler for Health {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        s.set_variable("TANDEM_STATUS", "OK").await?;
        s.set_variable("TANDEM_VERSION", env!("CARGO_PKG_VERSION"))
            .await
    }
}

/// `agi://127.0.0.1/example,GREETING`: the session API in one place. Answers, looks up the
/// caller in a family of the astdb, counts their calls, plays a greeting (the first argument,
/// `hello-world` by default), collects a digit, and says goodbye; a hangup at any point ends it
/// quietly.
pub struct Example;

impl Handler for Example {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let greeting = s
            .arg(1)
            .filter(|a| !a.is_empty())
            .unwrap_or("hello-world")
            .to_string();
        s.answer().await?;
        let caller = s
            .get_full_variable("${CALLERID(num)}")
            .await?
            .unwrap_or_else(|| "unknown".into());
        let calls: u64 = s
            .database_get("tandem-example", &caller)
            .await?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        s.database_put("tandem-example", &caller, &(calls + 1).to_string())
            .await?;
        s.set_variable("TANDEM_CALLS", &(calls + 1).to_string())
            .await?;
        s.verbose(
            &format!("Tandem example: caller {caller}, call number {}", calls + 1),
            3,
        )
        .await?;
        let pressed = match s.stream_file(&greeting, "0123456789#*").await {
            Ok(digit) => digit,
            // A missing sound file is not worth failing the call over in an example.
            Err(AgiError::Failed { .. }) => None,
            Err(e) => return Err(e),
        };
        let pressed = match pressed {
            Some(d) => Some(d),
            None => s.wait_for_digit(3_000).await?,
        };
        s.set_variable(
            "TANDEM_DIGIT",
            &pressed.map(String::from).unwrap_or_default(),
        )
        .await?;
        Ok(())
    }
}

/// `agi://127.0.0.1/bench`: the ten commands of a typical routing decision, without media (so
/// the benchmark measures the server, not sound files): read the channel and caller, look the
/// caller up, set the route, log it. Its byte exchange is what the wire-floor server of
/// `tandem bench agi` reproduces.
pub struct Bench;

/// The ten commands the benchmark's routing session sends, in order.
pub const BENCH_COMMANDS: [&str; 10] = [
    "GET VARIABLE CHANNEL",
    "GET FULL VARIABLE ${CALLERID(num)}",
    "DATABASE GET cidname 2000",
    "SET VARIABLE CALLERID(name) \"Front desk\"",
    "GET VARIABLE DIALSTATUS",
    "CHANNEL STATUS",
    "SET VARIABLE ROUTE PJSIP/2000",
    "VERBOSE \"routing to PJSIP/2000\" 3",
    "EXEC NoOp routed",
    "SET VARIABLE TANDEM_ROUTED 1",
];

impl Handler for Bench {
    async fn call(&self, s: &mut Session) -> Result<(), AgiError> {
        let _channel = s.get_variable("CHANNEL").await?;
        let caller = s
            .get_full_variable("${CALLERID(num)}")
            .await?
            .unwrap_or_default();
        let caller = if caller.is_empty() {
            "2000".to_string()
        } else {
            caller
        };
        let name = s.database_get("cidname", &caller).await?;
        s.set_variable("CALLERID(name)", name.as_deref().unwrap_or("Front desk"))
            .await?;
        let _status = s.get_variable("DIALSTATUS").await?;
        let _state = s.channel_status().await?;
        let target = format!("PJSIP/{caller}");
        s.set_variable("ROUTE", &target).await?;
        s.verbose(&format!("routing to {target}"), 3).await?;
        s.exec("NoOp", "routed").await?;
        s.set_variable("TANDEM_ROUTED", "1").await
    }
}

/// A router with the built-in routes.
pub fn routes() -> Router {
    Router::new()
        .route("health", Health)
        .and_then(|r| r.route("example", Example))
        .and_then(|r| r.route("bench", Bench))
        .expect("built-in routes are distinct and well formed")
}
