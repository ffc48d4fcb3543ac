//! Floods against one `tandem serve` with every service on: the console, the registrar (UDP and
//! TCP), FastAGI with a script directory. Each flood comes from eight loopback addresses
//! (127.0.0.2 to 127.0.0.9) and lasts a bounded time; while it runs, a legitimate client on
//! 127.0.0.200 signs in to the console, registers a phone over TCP with its digest password, and
//! runs a FastAGI session that finds that phone. Every one of those must succeed during every
//! flood, and the server's peak resident memory (VmHWM) must stay under the README's bound of
//! 256 MiB above what it held idle.
//!
//! The floods are the attacks the README's Security section names: concurrent logins for
//! unknown users and against the legitimate user's name, megabyte user names, partial requests
//! held open (slowloris), thousands of idle SIP TCP connections, FastAGI sessions spelling one
//! script many ways and sessions that never answer.

mod common;
use common::free_port;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const ADMIN_PASSWORD: &str = "a long enough secret";
const SIP_PASSWORD: &str = "s3cret-1001";
/// The README's bound on what a flood may add to the server's resident memory.
const PEAK_ABOVE_IDLE_MAX_KIB: u64 = 256 * 1024;
/// The legitimate client's address: none of the floods come from it.
const LEGIT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 200);

/// The eight addresses a flood comes from.
fn attackers() -> Vec<Ipv4Addr> {
    (2..=9).map(|i| Ipv4Addr::new(127, 0, 0, i)).collect()
}

struct Serve {
    child: Child,
    dir: tempfile::TempDir,
    web: SocketAddr,
    sip: SocketAddr,
    agi: SocketAddr,
    metrics: SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start() -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        bench::browser::add_user(Path::new(EXE), &data, "admin", "admin", ADMIN_PASSWORD).unwrap();
        run_with_stdin(
            &[
                "sip",
                "user",
                "add",
                "1001",
                "--password-stdin",
                "--data-dir",
            ],
            &data,
            SIP_PASSWORD,
        );
        let scripts = dir.path().join("agi-bin");
        std::fs::create_dir_all(scripts.join("sub")).unwrap();
        for script in [scripts.join("ok.sh"), scripts.join("sub/inner.sh")] {
            std::fs::write(
                &script,
                "#!/bin/sh\nwhile read l && [ -n \"$l\" ]; do :; done\n\
                 echo 'SET VARIABLE DONE 1'\nread r\n",
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let (web, sip, agi, metrics) = (free_port(), free_port(), free_port(), free_port());
        let config = dir.path().join("tandem.toml");
        std::fs::write(
            &config,
            format!(
                "[fastagi]\nlisten = \"127.0.0.1:{agi}\"\n\
                 [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\
                 [web]\nlisten = \"127.0.0.1:{web}\"\n\
                 [scripts]\ndir = {scripts:?}\n\
                 [kv]\ndata_dir = {data:?}\n\
                 [registrar]\nlisten = \"127.0.0.1:{sip}\"\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
        let mut child = Command::new(EXE)
            .args(["serve", "--config"])
            .arg(&config)
            .current_dir(dir.path())
            .env_remove("TANDEM_DATA_DIR")
            .env("TANDEM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let web = SocketAddr::from(([127, 0, 0, 1], web));
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(web).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "tandem serve exited ({status}):\n{}",
                    std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "tandem serve did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        Serve {
            child,
            dir,
            web,
            sip: at(sip),
            agi: at(agi),
            metrics: at(metrics),
        }
    }

    /// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
    fn status_kib(&self, field: &str) -> u64 {
        common::status_kib(self.child.id(), field)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    fn alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("tandem serve died ({status}):\n{}", self.log());
        }
    }
}

fn run_with_stdin(args: &[&str], data: &Path, input: &str) {
    let mut child = Command::new(EXE)
        .args(args)
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{input}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tandem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TCP connection from `from` to `to`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    common::connect_from(IpAddr::V4(from), to, Duration::from_secs(10))
}

/// Raises this process's open-file limit to its hard limit: the SIP flood holds thousands of
/// sockets, and `tandem serve` inherits the limit (so its own caps, not the kernel's, decide).
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    lim.rlim_cur
}

/// What the legitimate client saw in one round: each step's time, or why it failed.
#[derive(Debug)]
struct Round {
    login_ms: Result<u64, String>,
    register_ms: Result<u64, String>,
    agi_ms: Result<u64, String>,
}

impl Round {
    fn ok(&self) -> bool {
        self.login_ms.is_ok() && self.register_ms.is_ok() && self.agi_ms.is_ok()
    }
}

fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<u64, String> {
    let started = Instant::now();
    f().map(|()| started.elapsed().as_millis() as u64)
}

/// The legitimate client's round, from 127.0.0.200: sign in, register over TCP, look the phone
/// up through FastAGI.
fn legit_round(s: &Serve, round: u32) -> Round {
    let login_ms = timed(|| legit_login(s.web));
    let register_ms = timed(|| legit_register(s.sip, round));
    let agi_ms = timed(|| legit_agi(s.agi));
    Round {
        login_ms,
        register_ms,
        agi_ms,
    }
}

fn legit_login(web: SocketAddr) -> Result<(), String> {
    let mut stream = connect_from(LEGIT, web).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = format!("user=admin&password={ADMIN_PASSWORD}&next=/dashboard");
    let (status, head, _) =
        bench::browser::http_on(&mut stream, &web.to_string(), "POST", "/login", &[], &body)
            .map_err(|e| format!("login: {e}"))?;
    if status != 303 {
        return Err(format!("login answered {status}: {head}"));
    }
    Ok(())
}

/// Reads one SIP response (headers and a Content-Length body) from a TCP stream.
fn read_sip_response(stream: &mut TcpStream) -> Result<String, String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => return Err("connection closed".into()),
            Ok(_) => buf.push(byte[0]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("l"))
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream
        .read_exact(&mut body)
        .map_err(|e| format!("body: {e}"))?;
    Ok(head)
}

fn legit_register(sip: SocketAddr, round: u32) -> Result<(), String> {
    let mut stream = connect_from(LEGIT, sip).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let local = stream.local_addr().unwrap();
    let uri = format!("sip:{sip}");
    let call_id = format!("legit-{round}-{}@127.0.0.200", std::process::id());
    let request = |cseq: u32, auth: &str| {
        format!(
            "REGISTER {uri} SIP/2.0\r\n\
             Via: SIP/2.0/TCP {local};branch=z9hG4bK-legit-{round}-{cseq}\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:1001@127.0.0.1>;tag=legit{round}\r\n\
             To: <sip:1001@127.0.0.1>\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} REGISTER\r\n\
             Contact: <sip:1001@127.0.0.200:5060;transport=tcp>\r\n\
             Expires: 3600\r\n{auth}\
             Content-Length: 0\r\n\r\n"
        )
    };
    stream
        .write_all(request(1, "").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let challenge = read_sip_response(&mut stream)?;
    if !challenge.starts_with("SIP/2.0 401") {
        return Err(format!("first REGISTER: {challenge}"));
    }
    let www = challenge
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.trim())
        .find(|v| v.contains("algorithm=MD5"))
        .ok_or_else(|| format!("no MD5 challenge: {challenge}"))?;
    let param = |name: &str| {
        www.split(',')
            .find_map(|p| p.trim().trim_start_matches("Digest ").strip_prefix(name))
            .and_then(|v| v.strip_prefix('='))
            .map(|v| v.trim_matches('"').to_owned())
    };
    let (realm, nonce) = (param("realm").unwrap(), param("nonce").unwrap());
    use registrar::digest::{Algorithm, client_response};
    let ha1 = Algorithm::Md5.ha1("1001", &realm, SIP_PASSWORD);
    let cnonce = format!("c{round}");
    let response = client_response(
        Algorithm::Md5,
        &ha1,
        &nonce,
        "00000001",
        &cnonce,
        "REGISTER",
        &uri,
    );
    let auth = format!(
        "Authorization: Digest username=\"1001\", realm=\"{realm}\", nonce=\"{nonce}\", \
         uri=\"{uri}\", response=\"{response}\", algorithm=MD5, cnonce=\"{cnonce}\", \
         nc=00000001, qop=auth\r\n"
    );
    stream
        .write_all(request(2, &auth).as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let answer = read_sip_response(&mut stream)?;
    if !answer.starts_with("SIP/2.0 200") {
        return Err(format!("authenticated REGISTER: {answer}"));
    }
    Ok(())
}

fn legit_agi(agi: SocketAddr) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let plan = asterisk_emu::Plan::route("registrar/1001");
    let outcome = rt
        .block_on(asterisk_emu::run_from(IpAddr::V4(LEGIT), agi, &plan, 1))
        .map_err(|e| format!("session: {e}"))?;
    if outcome.status != asterisk_emu::AgiStatus::Success {
        return Err(format!("AGISTATUS {:?}", outcome.status));
    }
    let channel = outcome.channel.ok_or("no channel")?;
    match channel
        .variables
        .get("TANDEM_CONTACT_COUNT")
        .map(String::as_str)
    {
        Some(n) if n != "0" => Ok(()),
        other => Err(format!("TANDEM_CONTACT_COUNT {other:?}")),
    }
}

/// An attack: started with the flag that stops it, it returns the thread that reports it.
type Attack = Box<dyn FnOnce(Arc<AtomicBool>) -> std::thread::JoinHandle<String>>;

/// One flood: `attack` runs on its own threads until `stop` is set; the legitimate client runs
/// rounds meanwhile. Returns the rounds and what the attack reported.
fn during(
    s: &mut Serve,
    name: &str,
    hold: Duration,
    attack: impl FnOnce(Arc<AtomicBool>) -> std::thread::JoinHandle<String>,
) -> Vec<Round> {
    let stop = Arc::new(AtomicBool::new(false));
    let handle = attack(stop.clone());
    // Let the flood reach its height before the legitimate client comes.
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut rounds = Vec::new();
    let mut n = 0;
    while rounds.is_empty() || started.elapsed() < hold {
        n += 1;
        rounds.push(legit_round(s, n));
        s.alive();
    }
    stop.store(true, Ordering::Relaxed);
    let report = handle.join().unwrap();
    let summary = |step: fn(&Round) -> &Result<u64, String>| {
        let mut ms: Vec<u64> = rounds
            .iter()
            .filter_map(|r| step(r).as_ref().ok().copied())
            .collect();
        ms.sort_unstable();
        match (ms.get(ms.len() / 2), ms.last()) {
            (Some(median), Some(max)) => format!("median {median} ms, max {max} ms"),
            _ => "never".to_owned(),
        }
    };
    eprintln!(
        "{name:<10} {report}; {} legitimate rounds, {} whole: login {}, register {}, agi {}",
        rounds.len(),
        rounds.iter().filter(|r| r.ok()).count(),
        summary(|r| &r.login_ms),
        summary(|r| &r.register_ms),
        summary(|r| &r.agi_ms),
    );
    rounds
}

/// Runs `per_thread` on `threads` threads spread over the attacking addresses until `stop`.
fn spawn_threads(
    threads: usize,
    stop: &Arc<AtomicBool>,
    per_thread: impl Fn(Ipv4Addr, usize, &AtomicBool) + Send + Sync + 'static,
) -> Vec<std::thread::JoinHandle<()>> {
    let per_thread = Arc::new(per_thread);
    let from = attackers();
    (0..threads)
        .map(|i| {
            let (stop, f, addr) = (stop.clone(), per_thread.clone(), from[i % from.len()]);
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || f(addr, i, &stop))
                .unwrap()
        })
        .collect()
}

/// 250 clients posting logins as fast as they are answered: unknown users, wrong passwords for
/// the legitimate user's name, and one-megabyte names.
fn login_flood(web: SocketAddr) -> impl FnOnce(Arc<AtomicBool>) -> std::thread::JoinHandle<String> {
    move |stop| {
        std::thread::spawn(move || {
            let sent = Arc::new(AtomicUsize::new(0));
            let counted = sent.clone();
            let workers = spawn_threads(250, &stop, move |from, i, stop| {
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    k += 1;
                    let user = match (i + k) % 3 {
                        0 => format!("nobody{i}x{k}"),
                        1 => "admin".to_owned(),
                        _ => "u".repeat(1 << 20),
                    };
                    let body = format!("user={user}&password=wrong{k}&next=/");
                    if let Ok(mut s) = connect_from(from, web) {
                        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                        let _ = bench::browser::http_on(
                            &mut s,
                            &web.to_string(),
                            "POST",
                            "/login",
                            &[],
                            &body,
                        );
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            for w in workers {
                w.join().unwrap();
            }
            format!("{} login attempts", sent.load(Ordering::Relaxed))
        })
    }
}

/// 300 connections that each send part of a request and then a byte every second.
fn slowloris(web: SocketAddr) -> impl FnOnce(Arc<AtomicBool>) -> std::thread::JoinHandle<String> {
    move |stop| {
        std::thread::spawn(move || {
            let opened = Arc::new(AtomicUsize::new(0));
            let counted = opened.clone();
            let workers = spawn_threads(30, &stop, move |from, _, stop| {
                let mut held: Vec<TcpStream> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    while held.len() < 10 {
                        let Ok(mut s) = connect_from(from, web) else {
                            break;
                        };
                        let _ = s.write_all(
                            b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n",
                        );
                        held.push(s);
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                    // A byte a second on every connection; the ones the server closed are
                    // replaced on the next turn.
                    held.retain_mut(|s| s.write_all(b"X").is_ok());
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
            for w in workers {
                w.join().unwrap();
            }
            format!("{} partial requests opened", opened.load(Ordering::Relaxed))
        })
    }
}

/// 4,100 idle TCP connections to the registrar's port, re-opened as the server closes them.
fn sip_idle(sip: SocketAddr) -> impl FnOnce(Arc<AtomicBool>) -> std::thread::JoinHandle<String> {
    move |stop| {
        std::thread::spawn(move || {
            let opened = Arc::new(AtomicUsize::new(0));
            let counted = opened.clone();
            let workers = spawn_threads(8, &stop, move |from, _, stop| {
                let mut held: Vec<TcpStream> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    while held.len() < 4100 / 8 + 1 && !stop.load(Ordering::Relaxed) {
                        match connect_from(from, sip) {
                            Ok(s) => {
                                let _ = s.set_nonblocking(true);
                                held.push(s);
                                counted.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => break,
                        }
                    }
                    // Drop the ones the server closed (a read of 0 bytes) so they are re-opened.
                    held.retain_mut(|s| {
                        let mut b = [0u8; 64];
                        match s.read(&mut b) {
                            Ok(0) => false,
                            Ok(_) => true,
                            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                        }
                    });
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
            for w in workers {
                w.join().unwrap();
            }
            format!(
                "{} idle SIP TCP connections opened",
                opened.load(Ordering::Relaxed)
            )
        })
    }
}

/// FastAGI: sessions asking for one script by many spellings, and sessions that send their
/// header and then never answer a command.
fn agi_flood(agi: SocketAddr) -> impl FnOnce(Arc<AtomicBool>) -> std::thread::JoinHandle<String> {
    move |stop| {
        std::thread::spawn(move || {
            let sessions = Arc::new(AtomicUsize::new(0));
            let counted = sessions.clone();
            let workers = spawn_threads(16, &stop, move |from, i, stop| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let mut silent: Vec<TcpStream> = Vec::new();
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    k += 1;
                    if i % 4 == 0 {
                        // A header, then silence: the server's first command is never answered.
                        if silent.len() < 100
                            && let Ok(mut s) = connect_from(from, agi)
                        {
                            let _ = s.write_all(
                                format!(
                                    "agi_network: yes\nagi_network_script: ok.sh\n\
                                     agi_channel: SIP/x-{i}-{k}\nagi_uniqueid: {i}.{k}\n\n"
                                )
                                .as_bytes(),
                            );
                            silent.push(s);
                        }
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    let spelling = match k % 6 {
                        0 => format!("./ok.sh?n={k}"),
                        1 => format!("{}ok.sh", "./".repeat(k % 50 + 1)),
                        2 => format!("sub/{}inner.sh", "/".repeat(k % 50 + 1)),
                        3 => format!("sub/../ok.sh#{k}"),
                        4 => format!("nothere{i}x{k}.sh"),
                        _ => "ok.sh".to_owned(),
                    };
                    let mut plan = asterisk_emu::Plan::route(&spelling);
                    plan.record = false;
                    plan.idle_timeout = Duration::from_secs(10);
                    let _ = rt.block_on(asterisk_emu::run_from(
                        IpAddr::V4(from),
                        agi,
                        &plan,
                        k as u64,
                    ));
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            });
            for w in workers {
                w.join().unwrap();
            }
            format!("{} script sessions", sessions.load(Ordering::Relaxed))
        })
    }
}

fn metrics_bytes(metrics: SocketAddr) -> usize {
    bench::browser::http(metrics, "GET", "/metrics", &[], "")
        .map(|(_, _, body)| body.len())
        .unwrap_or(0)
}

#[test]
fn a_legitimate_client_is_served_through_every_flood_within_the_memory_bound() {
    let nofile = raise_nofile();
    if nofile < 6000 {
        test_env::skip(&format!(
            "the open-file limit is {nofile}; the SIP flood needs 6,000 (raise the hard limit)"
        ));
        return;
    }
    let mut s = Serve::start();
    // Idle, once every service has served one legitimate round.
    let first = legit_round(&s, 0);
    assert!(
        first.ok(),
        "the legitimate client failed before any flood: {first:?}"
    );
    let idle_kib = s.status_kib("VmRSS");
    let metrics_idle = metrics_bytes(s.metrics);
    let hold = Duration::from_secs(5);

    let floods: Vec<(&str, Attack)> = vec![
        ("logins", Box::new(login_flood(s.web))),
        ("slowloris", Box::new(slowloris(s.web))),
        ("sip-tcp", Box::new(sip_idle(s.sip))),
        ("fastagi", Box::new(agi_flood(s.agi))),
    ];
    let mut failures = Vec::new();
    for (name, attack) in floods {
        let rounds = during(&mut s, name, hold, attack);
        for r in rounds.iter().filter(|r| !r.ok()) {
            failures.push(format!("{name}: {r:?}"));
        }
    }
    let peak_kib = s.status_kib("VmHWM");
    let metrics_after = metrics_bytes(s.metrics);
    eprintln!(
        "idle RSS {} MiB, peak {} MiB ({} MiB above idle); /metrics {} KB idle, {} KB after",
        idle_kib / 1024,
        peak_kib / 1024,
        peak_kib.saturating_sub(idle_kib) / 1024,
        metrics_idle / 1000,
        metrics_after / 1000
    );
    assert!(
        failures.is_empty(),
        "the legitimate client failed during a flood:\n{}",
        failures.join("\n")
    );
    assert!(
        peak_kib.saturating_sub(idle_kib) < PEAK_ABOVE_IDLE_MAX_KIB,
        "peak RSS {peak_kib} KiB is more than 256 MiB above idle ({idle_kib} KiB)"
    );
    s.alive();
}
