//! FastAGI attacked as a local user or a host on an allowed network would attack it, against a
//! real `tandem serve`: sessions played by the Asterisk emulator over TCP from several loopback
//! addresses (127.0.0.2 to 127.0.0.6), while a legitimate PBX on 127.0.0.9 still gets its
//! sessions served. What is measured (`/metrics` size, the server's RSS, the history's series)
//! is checked against the bounds the README's "Security" section documents; nothing is timed.
//!
//! - Script paths spelt many ways (`./ok.sh`, `sub//inner.sh`, a symlink) are one series each,
//!   and refused paths none, in `/metrics` and in the history; the history itself records at
//!   most `[history] max_series` series and counts what it refuses.
//! - Held sessions: a peer silent on a command Asterisk answers at once is let go after
//!   `immediate_command_timeout_ms`; sessions held in a long command cost a few KiB each above
//!   their header, since a header over `max_header_bytes` is refused, and a route's own
//!   `command_timeout_ms` lets them go; a peer that vanished without closing (its link cut,
//!   from a network namespace) is let go by TCP keepalive.

mod common;

use asterisk_emu::{AgiStatus, Outcome, Plan};
use common::free_port;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
/// The flood's addresses, and the legitimate PBX's.
const FLOOD_FROM: [u8; 5] = [2, 3, 4, 5, 6];
const PBX: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9));
/// A bound on every wait for an outcome, far beyond what it needs.
const WAIT: Duration = Duration::from_secs(60);

/// Documented bounds (README, "Security").
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// `/metrics` growth from any number of spellings of the scripts it already shows.
const METRICS_GROWTH_MAX: u64 = 8 * KIB;
/// The server's peak RSS above its RSS before a flood.
const FLOOD_RSS_MAX: u64 = 256 * MIB;
/// What one session held in a long command costs above its header, in the debug build tests
/// run (about 20 KiB; a release build's is about 6 KiB, `tandem bench agi-memory`).
const HELD_SESSION_MAX: u64 = 32 * KIB;

/// Reads its header, sends one command, reads the reply, ends.
const OK_SH: &str = "#!/bin/sh\nwhile IFS= read -r l; do [ -z \"$l\" ] && break; done\n\
echo NOOP\nIFS= read -r r\n";

struct Served {
    child: Child,
    agi: SocketAddr,
    http: SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tandem serve` with a script directory (`ok.sh`, `sub/inner.sh`, `alias` → `ok.sh`,
/// `escape` → `/bin/sh`), history every second, and `fastagi`/`history` settings added.
fn serve(fastagi: &str, history: &str) -> Served {
    serve_on(Ipv4Addr::LOCALHOST, fastagi, history)
}

/// [`serve`] with FastAGI on `agi_ip` (`/metrics` stays on loopback).
fn serve_on(agi_ip: Ipv4Addr, fastagi: &str, history: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let scripts = dir.path().join("agi-bin");
    for name in ["ok.sh", "sub/inner.sh"] {
        let path = scripts.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, OK_SH).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::os::unix::fs::symlink("ok.sh", scripts.join("alias")).unwrap();
    std::os::unix::fs::symlink("/bin/sh", scripts.join("escape")).unwrap();
    let (agi, http) = (
        SocketAddr::from((agi_ip, free_port())),
        SocketAddr::from(([127, 0, 0, 1], free_port())),
    );
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[fastagi]\nlisten = \"{agi}\"\n{fastagi}\n\
             [metrics]\nlisten = \"{http}\"\n\n[web]\nlisten = \"127.0.0.1:0\"\n\n\
             [history]\ninterval_s = 1\n{history}\n\n\
             [kv]\ndata_dir = {:?}\n\n[scripts]\ndir = {scripts:?}\n",
            dir.path().join("data"),
        ),
    )
    .unwrap();
    let child = Command::new(EXE)
        .args(["serve", "--config"])
        .arg(&config)
        // Each session a flood ends is a warning: only errors, to keep the test's output short.
        .env("TANDEM_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let served = Served {
        child,
        agi,
        http,
        dir,
    };
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(http).is_err() {
        assert!(Instant::now() < deadline, "tandem serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    served
}

impl Served {
    fn metrics(&self) -> String {
        http_get(self.http, "/metrics")
    }

    /// A figure of `/metrics` (the first line that starts with `series `).
    fn figure(&self, series: &str) -> f64 {
        figure(&self.metrics(), series)
    }

    /// VmRSS and VmHWM (the peak), bytes.
    fn rss(&self) -> (u64, u64) {
        let kib = |field| common::status_kib(self.child.id(), field) * KIB;
        (kib("VmRSS"), kib("VmHWM"))
    }

    /// Prints the peak RSS (VmHWM) above `before`, the RSS before a flood, and checks it
    /// against the documented bound.
    fn check_peak_rss(&self, before: u64) {
        let (_, peak) = self.rss();
        eprintln!(
            "peak RSS {} KiB, {} KiB above {} KiB before the flood",
            peak / KIB,
            peak.saturating_sub(before) / KIB,
            before / KIB
        );
        assert!(
            peak.saturating_sub(before) <= FLOOD_RSS_MAX,
            "peak RSS {peak} against {before} before"
        );
    }

    /// Waits until the sessions of a flood have ended, and checks that `count` or more of them
    /// ended by a timeout.
    fn check_timed_out(&self, count: usize) {
        self.wait_until_idle();
        let timeouts = self.figure("tandem_agi_sessions_failed_total{reason=\"timeout\"}");
        assert!(timeouts >= count as f64, "{timeouts} sessions timed out");
    }

    /// Waits until no session is in progress (each ends with a bounded wait for the peer to
    /// close: `close_linger_ms`).
    fn wait_until_idle(&self) {
        let deadline = Instant::now() + WAIT;
        while self.figure("tandem_agi_sessions_active") != 0.0 {
            assert!(Instant::now() < deadline, "sessions still active");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The series in the history's file.
    fn history_series(&self) -> Vec<String> {
        let path = self.dir.path().join("data/history.sqlite3");
        let config = history::HistoryConfig::with_retention(1, 48, 30, 730).unwrap();
        history::History::open(&path, config)
            .unwrap()
            .series_names()
            .unwrap()
    }

    /// Waits until the history has recorded a tick that began after now.
    fn wait_for_history_ticks(&self) {
        // A tick records the figures of the one before it: two ticks, at one per second.
        std::thread::sleep(Duration::from_millis(2_500));
    }
}

fn figure(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
        .parse()
        .unwrap()
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// The values the label `name` takes in `/metrics`.
fn label_values(metrics: &str, name: &str) -> BTreeSet<String> {
    let key = format!("{name}=\"");
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = &l[l.find(&key)? + key.len()..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A flood's sessions: their tasks, in order, each ending with the session's outcome or the
/// emulator's error (a server may reset a connection it refuses before its header is sent).
type Flood = Vec<tokio::task::JoinHandle<Result<Outcome, String>>>;

/// Starts `plans` from the flood's addresses, `parallel` at a time, numbering the sessions from
/// `first_seq`. Returns their tasks and the count of those that ended.
fn flood(
    addr: SocketAddr,
    plans: Vec<Plan>,
    parallel: usize,
    first_seq: u64,
) -> (Flood, Arc<AtomicUsize>) {
    let done = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(parallel));
    let tasks = plans
        .into_iter()
        .enumerate()
        .map(|(i, plan)| {
            let (gate, done) = (gate.clone(), done.clone());
            let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, FLOOD_FROM[i % FLOOD_FROM.len()]));
            tokio::spawn(async move {
                let _turn = gate.acquire_owned().await.unwrap();
                let out = asterisk_emu::run_from(from, addr, &plan, first_seq + i as u64).await;
                done.fetch_add(1, Ordering::Relaxed);
                out.map_err(|e| e.to_string())
            })
        })
        .collect();
    (tasks, done)
}

/// The legitimate PBX on 127.0.0.9 plays `plans` one after the other.
async fn pbx(addr: SocketAddr, plans: &[Plan]) -> Vec<Outcome> {
    let mut outs = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        outs.push(
            asterisk_emu::run_from(PBX, addr, plan, i as u64 + 1)
                .await
                .unwrap(),
        );
    }
    outs
}

/// Waits until the counters add up to `want`.
async fn wait_for(counters: &[&AtomicUsize], want: usize, what: &str) {
    let deadline = Instant::now() + WAIT;
    let sum = || {
        counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<usize>()
    };
    while sum() < want {
        assert!(Instant::now() < deadline, "{what}: {} of {want}", sum());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The flood's outcomes, once every session has ended; within [`WAIT`], so that a server that
/// holds sessions for ever fails the test instead of hanging it.
async fn join(tasks: Flood) -> Vec<Result<Outcome, String>> {
    let all = async {
        let mut outs = Vec::with_capacity(tasks.len());
        for t in tasks {
            outs.push(t.await.unwrap());
        }
        outs
    };
    tokio::time::timeout(WAIT, all)
        .await
        .expect("flood sessions still held")
}

/// Outcomes of sessions that must all have run.
fn ran(outs: Vec<Result<Outcome, String>>) -> Vec<Outcome> {
    outs.into_iter()
        .map(|o| o.unwrap_or_else(|e| panic!("a flood session: {e}")))
        .collect()
}

fn plan(script: &str) -> Plan {
    Plan {
        idle_timeout: WAIT,
        record: false,
        ..Plan::route(script)
    }
}

/// The `i`th spelling of the flood: the two scripts, the symlink to one, and refused paths,
/// each spelt a new way.
fn spelling(i: usize) -> (String, bool) {
    let k = i / 6 + 1;
    match i % 6 {
        0 => (format!("{}ok.sh", "./".repeat(k)), true),
        1 => (format!("sub{}inner.sh", "/".repeat(k + 1)), true),
        2 => (format!("{}sub/./inner.sh", ".//".repeat(k)), true),
        3 => (format!("{}alias", "./".repeat(k)), true),
        4 => (format!("missing-{i}.sh"), false),
        _ => (format!("{}escape", "./".repeat(k)), false),
    }
}

#[test]
fn script_path_spellings_add_no_series_to_metrics_or_the_history() {
    let served = serve("", "");
    let rt = runtime();
    // Each script once, as a PBX would call them, so that their series exist.
    let warm = rt.block_on(pbx(served.agi, &[plan("ok.sh"), plan("sub/inner.sh")]));
    assert!(warm.iter().all(|o| o.status == AgiStatus::Success));
    served.wait_for_history_ticks();
    let before = served.metrics();
    let history_before = served.history_series();
    let (rss_before, _) = served.rss();

    const SESSIONS: usize = 1_500;
    let plans = (0..SESSIONS).map(|i| plan(&spelling(i).0)).collect();
    let (outs, legit, ended_by_then) = rt.block_on(async {
        let (tasks, done) = flood(served.agi, plans, 32, 1_000);
        wait_for(&[&done], SESSIONS / 3, "flood sessions ended").await;
        let legit = pbx(served.agi, &[plan("health"), plan("ok.sh")]).await;
        let ended_by_then = done.load(Ordering::Relaxed);
        (ran(join(tasks).await), legit, ended_by_then)
    });
    assert!(
        ended_by_then < SESSIONS,
        "the PBX's sessions ran during the flood"
    );
    for (i, out) in outs.iter().enumerate() {
        let (path, runs) = spelling(i);
        let want = if runs {
            AgiStatus::Success
        } else {
            AgiStatus::Failure
        };
        assert_eq!(out.status, want, "{path}");
    }
    assert!(
        legit.iter().all(|o| o.status == AgiStatus::Success),
        "the PBX's sessions during the flood: {legit:?}"
    );

    let after = served.metrics();
    let growth = after.len() as u64 - before.len() as u64;
    eprintln!("/metrics {} -> {} bytes", before.len(), after.len());
    let scripts = label_values(&after, "script");
    let shortest: BTreeSet<&str> = scripts
        .iter()
        .map(String::as_str)
        .filter(|s| s.len() < 24)
        .collect();
    assert!(
        scripts.len() == 2 && scripts.contains("ok.sh") && scripts.contains("sub/inner.sh"),
        "one series per file, none per spelling or refused path: {} script labels, such as \
         {shortest:?}",
        scripts.len()
    );
    assert_eq!(
        figure(&after, "tandem_agi_script_sessions_total{script=\"ok.sh\"}"),
        (1 + 2 * SESSIONS / 6 + 1) as f64,
        "./ok.sh and alias spellings, and the PBX's, count as ok.sh"
    );
    assert!(
        growth <= METRICS_GROWTH_MAX,
        "/metrics grew by {growth} bytes"
    );
    served.check_peak_rss(rss_before);

    served.wait_for_history_ticks();
    let history_after = served.history_series();
    let new: Vec<&String> = history_after
        .iter()
        .filter(|s| !history_before.contains(s))
        .collect();
    // The refusal reasons first seen in the flood, and nothing per spelling.
    assert!(
        new.len() <= 4 && new.iter().all(|s| !s.contains("./") && !s.contains("//")),
        "new series in the history: {new:?}"
    );
}

#[test]
fn the_history_records_at_most_max_series_and_counts_the_rest() {
    let served = serve("", "max_series = 40");
    let deadline = Instant::now() + WAIT;
    while served.figure("tandem_history_series_refused_total") == 0.0 {
        assert!(Instant::now() < deadline, "nothing refused");
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = served.metrics();
    assert_eq!(figure(&metrics, "tandem_history_series"), 40.0);
    assert_eq!(figure(&metrics, "tandem_history_series_max"), 40.0);
    assert!(served.history_series().len() <= 40);
    // The sessions of a PBX go on as ever.
    let legit = runtime().block_on(pbx(served.agi, &[plan("health")]));
    assert_eq!(legit[0].status, AgiStatus::Success);
}

/// A session on `route` whose peer leaves command `hold_at` (1-based) unanswered, counted in
/// `count` once it does.
fn held(route: &str, hold_at: usize, args: Vec<String>, count: &Arc<AtomicUsize>) -> Plan {
    Plan {
        hold_at: Some(hold_at),
        held: Some(count.clone()),
        args,
        ..plan(route)
    }
}

/// Peers that never answer a command Asterisk answers at once are let go after
/// `immediate_command_timeout_ms`, while the PBX's sessions go on.
#[test]
fn peers_silent_on_an_immediate_command_are_let_go() {
    let served = serve("immediate_command_timeout_ms = 1000", "");
    let (rss_before, _) = served.rss();
    const SESSIONS: usize = 300;
    let count = Arc::new(AtomicUsize::new(0));
    // `health` sends SET VARIABLE first; the emulator leaves it unanswered.
    let plans = (0..SESSIONS)
        .map(|_| held("health", 1, Vec::new(), &count))
        .collect();
    let (outs, legit) = runtime().block_on(async {
        let (tasks, _) = flood(served.agi, plans, SESSIONS, 1_000);
        wait_for(&[&count], SESSIONS, "sessions held").await;
        let legit = pbx(served.agi, &[plan("bench")]).await;
        (ran(join(tasks).await), legit)
    });
    assert!(
        outs.iter().all(|o| o.failure_line),
        "every held session ended with failure"
    );
    assert_eq!(legit[0].status, AgiStatus::Success);
    served.check_timed_out(SESSIONS);
    served.check_peak_rss(rss_before);
}

/// Sessions held in a long command (here a prompt; a `Dial` alike) by peers that never answer
/// cost a few KiB each above their header; a header over `max_header_bytes` is refused before it
/// is kept; the route's own `command_timeout_ms` lets the held sessions go; and the PBX's
/// sessions, on that route and others, go on meanwhile.
#[test]
fn sessions_held_in_a_long_command_cost_a_few_kib_and_end_by_the_route_s_timeout() {
    let served = serve(
        "[fastagi.routes.\"example\"]\ncommand_timeout_ms = 10000",
        "",
    );
    let (rss_before, _) = served.rss();
    // The largest header accepted: Asterisk's 22 lines and three arguments, two of 7,000 bytes.
    let big_arg = "x".repeat(7_000);
    let args = vec!["hello-world".to_string(), big_arg.clone(), big_arg];
    let header_bytes = asterisk_emu::header(
        &held("example", 7, args.clone(), &Arc::default()),
        served.agi,
        &Plan::default().channel_for(1),
        1,
    )
    .len() as u64;
    assert!(header_bytes < 16 * KIB, "{header_bytes} bytes of header");
    // Over it: 32 arguments of 8,000 bytes, each line within max_line_bytes.
    let over: Vec<String> = (0..32).map(|_| "y".repeat(8_000)).collect();

    const SESSIONS: usize = 500;
    const OVER: usize = 100;
    let (count, over_held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // `example` sends ANSWER, five commands answered at once, then STREAM FILE: held there.
    let plans = (0..SESSIONS)
        .map(|_| held("example", 7, args.clone(), &count))
        .collect();
    let over_plans = (0..OVER)
        .map(|_| held("example", 7, over.clone(), &over_held))
        .collect();
    let (outs, over_outs, legit, rss_held, held_then) = runtime().block_on(async {
        let (over_tasks, over_done) = flood(served.agi, over_plans, OVER, 10_000);
        let (tasks, done) = flood(served.agi, plans, SESSIONS, 1_000);
        wait_for(&[&count], SESSIONS, "sessions held").await;
        // Each refused (as it must be) or held.
        let over_settled = [&*over_done, &*over_held];
        wait_for(&over_settled, OVER, "sessions with a header too long").await;
        let (rss_held, _) = served.rss();
        // Those the route's timeout let go before all were held are not in the figure.
        let held_then = SESSIONS - done.load(Ordering::Relaxed);
        let legit = pbx(served.agi, &[plan("health"), plan("example")]).await;
        (
            ran(join(tasks).await),
            join(over_tasks).await,
            legit,
            rss_held,
            held_then,
        )
    });
    let per_session = rss_held.saturating_sub(rss_before) / held_then.max(1) as u64;
    eprintln!(
        "{held_then} sessions held with {header_bytes} bytes of header: RSS {} KiB -> {} KiB, \
         {} KiB each",
        rss_before / KIB,
        rss_held / KIB,
        per_session / KIB
    );
    assert_eq!(
        over_held.load(Ordering::Relaxed),
        0,
        "sessions with a header over max_header_bytes were served"
    );
    assert!(
        over_outs
            .iter()
            .all(|o| o.as_ref().map_or(true, |o| o.status == AgiStatus::Failure)),
        "a header over max_header_bytes is refused: {:?}",
        over_outs.iter().find(|o| o.is_ok())
    );
    assert!(
        per_session <= header_bytes + HELD_SESSION_MAX,
        "{per_session} bytes per held session"
    );
    assert!(
        outs.iter().all(|o| o.failure_line),
        "every held session ended with failure"
    );
    assert!(
        legit.iter().all(|o| o.status == AgiStatus::Success),
        "the PBX's sessions while others were held: {legit:?}"
    );
    served.check_timed_out(SESSIONS);
    served.check_peak_rss(rss_before);
}

/// An interface of this namespace, deleted on drop.
struct Deleted(String);

impl Drop for Deleted {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

/// Peers that vanish without closing (the link from their network namespace cut: no FIN, no
/// RST, no answer to anything) while held in a long command are let go by TCP keepalive, here
/// 1 s idle and 2 probes 1 s apart.
#[test]
fn peers_that_vanish_are_let_go_by_keepalive() {
    if let Some(why) = afpacket::netns::VethPair::unavailable() {
        test_env::skip(&why);
        return;
    }
    // The pair's `a` end stays in the namespace, the PBX's side; `b` comes here, Tandem's.
    let pair = afpacket::netns::VethPair::create().unwrap();
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    let net = (std::process::id() % 250) as u8 + 1;
    let (ours, theirs) = (Ipv4Addr::new(10, 79, net, 1), Ipv4Addr::new(10, 79, net, 2));
    let here = std::process::id().to_string();
    ip(&[
        "-n",
        &pair.namespace,
        "link",
        "set",
        &pair.b,
        "netns",
        &here,
    ]);
    // Sockets of the namespace still closing can keep it, and so the pair, alive a while after
    // it is deleted: this end is removed here, even when the test fails.
    let _ours = Deleted(pair.b.clone());
    ip(&["addr", "add", &format!("{ours}/30"), "dev", &pair.b]);
    ip(&["link", "set", &pair.b, "up"]);
    ip(&[
        "-n",
        &pair.namespace,
        "addr",
        "add",
        &format!("{theirs}/30"),
        "dev",
        &pair.a,
    ]);
    let served = serve_on(
        ours,
        &format!(
            "allowed_networks = [\"127.0.0.0/8\", \"{theirs}/32\"]\n\
             keepalive_idle_s = 1\nkeepalive_interval_s = 1\nkeepalive_probes = 2"
        ),
        "",
    );
    let (rss_before, _) = served.rss();
    // A runtime whose threads were started in the namespace: its sessions' sockets are there.
    let rt = pair.in_namespace(runtime).unwrap();
    const SESSIONS: usize = 20;
    let count = Arc::new(AtomicUsize::new(0));
    let addr = served.agi;
    for i in 0..SESSIONS {
        let plan = held("example", 7, Vec::new(), &count);
        // Never joined: their peer is gone, and the runtime is dropped with them.
        rt.spawn(async move { asterisk_emu::run(addr, &plan, i as u64 + 1).await });
    }
    rt.block_on(wait_for(&[&count], SESSIONS, "sessions held"));
    assert_eq!(served.figure("tandem_agi_sessions_active"), SESSIONS as f64);
    ip(&["link", "set", &pair.b, "down"]);
    let cut = Instant::now();
    served.wait_until_idle();
    eprintln!(
        "{SESSIONS} sessions whose peer vanished ended {} ms after the cut",
        cut.elapsed().as_millis()
    );
    served.check_peak_rss(rss_before);
    rt.shutdown_background();
}
