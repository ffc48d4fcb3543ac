//! What the FastAGI tests share: a server on a loopback port with its metrics, and the recorded
//! transcripts when they are beside the checkout.

#![allow(dead_code)] // each test file uses its own part

use fastagi::{Metrics, Router, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub struct Running {
    pub addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::task::JoinHandle<fastagi::RunSummary>,
}

impl Running {
    pub async fn stop(self) -> fastagi::RunSummary {
        let _ = self.stop.send(true);
        self.done.await.unwrap()
    }
}

/// Loopback on a free port, two listening sockets (as on a two-core machine), short waits.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        header_timeout_ms: 2_000,
        workers: 2,
        close_linger_ms: 1_000,
        ..ServerConfig::default()
    }
}

/// Binds `router` with `config` and serves on the test's runtime.
pub async fn start(config: ServerConfig, router: Router) -> Running {
    let metrics = Arc::new(Metrics::unregistered());
    let server = Server::bind(config, router, metrics.clone()).unwrap();
    let addr = server.local_addr();
    let (stop, rx) = fastagi::shutdown_channel();
    let done = tokio::spawn(server.run(rx));
    Running {
        addr,
        metrics,
        stop,
        done,
    }
}

/// The transcripts of a real Asterisk (`shared/vectors/agi`), or `None` after saying why.
pub fn vectors() -> Option<PathBuf> {
    match asterisk_emu::shared_dir().map(|d| d.join("vectors/agi")) {
        Some(d)
            if d.join("S16_next_command_after_minus_one_brings_hangup.txt")
                .exists() =>
        {
            Some(d)
        }
        _ => {
            test_env::skip("the transcript replays: no shared/vectors/agi beside the checkout");
            None
        }
    }
}

/// How the recorded Asterisk wrote `HANGUP` after a hangup cut a command: the scenario, the
/// command cut (1-based) and how long after the `-1` the line came with the server silent
/// (`None`: only when the next command arrived). Read from S07, S15 and S16 when they are here;
/// else the same figures as recorded.
pub fn recorded_hangups() -> Vec<(&'static str, usize, Option<std::time::Duration>)> {
    use std::time::Duration;
    let names = [
        "S07_caller_hangup_during_command",
        "S15_hangup_line_late_after_minus_one",
        "S16_next_command_after_minus_one_brings_hangup",
    ];
    let Some(dir) = vectors() else {
        return vec![
            (names[0], 2, Some(Duration::from_millis(44))),
            (names[1], 2, Some(Duration::from_millis(545))),
            (names[2], 2, None),
        ];
    };
    names
        .into_iter()
        .map(|name| {
            let t = asterisk_emu::Transcript::load(&dir, name).unwrap();
            let h = t.hangup().unwrap_or_else(|| panic!("{name}: no hangup"));
            (name, h.during, h.silent_delay)
        })
        .collect()
}

/// The emulator's plan for a recorded hangup.
pub fn hangup_plan(
    route: &str,
    during: usize,
    delay: Option<std::time::Duration>,
) -> asterisk_emu::Plan {
    asterisk_emu::Plan {
        hangup_during: Some(during),
        hangup_line_delay: delay.unwrap_or(std::time::Duration::from_secs(3600)),
        idle_timeout: std::time::Duration::from_secs(15),
        ..asterisk_emu::Plan::route(route)
    }
}
