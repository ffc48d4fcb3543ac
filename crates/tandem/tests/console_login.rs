//! The console's login under attack, as a penetration tester attacks it: a real `tandem serve`,
//! real HTTP over loopback from many source addresses (all of 127.0.0.0/8 reaches loopback on
//! Linux, so each client binds its own: attackers in 127.0-127.99, the legitimate user in
//! 127.200 and up, other /24s), and the server's log and memory as the kernel reports them.

mod common;

use console::web::url_encode;
use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
/// How much the server's resident memory may grow over idle during a login flood: the password
/// checks' buffers (2 × 19 MiB by default) and the connections, with room to spare.
const FLOOD_RSS_MIB_MAX: u64 = 256;

/// A `tandem serve` with only its console of interest, its log in a file.
struct Serve {
    child: Child,
    web: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Serves a data directory holding `users` (name, role), all with [`PASSWORD`], with
    /// `config` as `tandem.toml`.
    fn start(users: &[(&str, &str)], config: &str) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        for (name, role) in users {
            bench::browser::add_user(Path::new(EXE), &data, name, role, PASSWORD).unwrap();
        }
        let toml = dir.path().join("tandem.toml");
        std::fs::write(&toml, config).unwrap();
        let web = SocketAddr::from((
            [127, 0, 0, 1],
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port(),
        ));
        let log = dir.path().join("serve.log");
        let child = Command::new(EXE)
            .args(["serve", "--agi-listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0", "--web-listen"])
            .arg(web.to_string())
            .arg("--config")
            .arg(&toml)
            .arg("--data-dir")
            .arg(&data)
            .env("TANDEM_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut serve = Serve {
            child,
            web,
            data,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(web).is_err() {
            assert!(serve.child.try_wait().unwrap().is_none(), "{}", serve.log());
            assert!(Instant::now() < deadline, "serve did not listen on {web}");
            std::thread::sleep(Duration::from_millis(25));
        }
        serve
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `tandem user ARGS` on this data directory, with `stdin` as its input.
    fn user(&self, args: &[&str], stdin: &str) -> String {
        let mut child = Command::new(EXE)
            .arg("user")
            .args(args)
            .arg("--data-dir")
            .arg(&self.data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "tandem user {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts measuring the peak (clear_refs 5 resets VmHWM to the current RSS): the resident
    /// memory now, in bytes.
    fn idle(&self) -> u64 {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5");
        self.memory().0
    }

    /// Prints the peak since [`Serve::idle`] and asserts it stays within [`FLOOD_RSS_MIB_MAX`]
    /// above `idle`.
    fn peak_within_bound(&self, idle: u64, flood: &str) {
        let (rss, peak) = self.memory();
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        eprintln!(
            "{flood}: idle {:.1} MiB, peak {:.1} MiB (+{:.1}), after {:.1} MiB",
            mib(idle),
            mib(peak),
            mib(peak.saturating_sub(idle)),
            mib(rss)
        );
        assert!(
            peak < idle + (FLOOD_RSS_MIB_MAX << 20),
            "{flood}: peak {:.1} MiB over an idle {:.1} MiB",
            mib(peak),
            mib(idle)
        );
    }

    /// `(VmRSS, VmHWM)` of the server, in bytes.
    fn memory(&self) -> (u64, u64) {
        let bytes = |field| common::status_kib(self.child.id(), field) * 1024;
        (bytes("VmRSS"), bytes("VmHWM"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 127.a.b.c
fn at(a: u8, b: u8, c: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, a, b, c))
}

/// Where the legitimate user signs in from: a /24 no attacker uses.
const HOME: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 200, 0, 1));

fn form(user: &str, password: &str) -> String {
    format!(
        "user={}&password={}",
        url_encode(user),
        url_encode(password)
    )
}

/// One request from source address `from`, over a fresh connection: `(status, head)` with
/// lower-case header names as hyper writes them.
async fn request(web: SocketAddr, from: IpAddr, head: &str, body: &str) -> (u16, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let exchange = async {
        let mut s = socket.connect(web).await?;
        let req = format!(
            "{head}\r\nHost: {web}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        // Written while the answer is read: a server that answers before the whole body is
        // in (a body too long) may close on the rest.
        let (mut rd, mut wr) = s.split();
        let write = async {
            let _ = wr.write_all(req.as_bytes()).await;
        };
        let read = async {
            let mut raw = Vec::new();
            let r = rd.read_to_end(&mut raw).await;
            (r, raw)
        };
        let ((), (read, raw)) = tokio::join!(write, read);
        match read {
            Err(e) if raw.is_empty() => Err(e),
            _ => Ok(raw),
        }
    };
    let raw = tokio::time::timeout(Duration::from_secs(45), exchange)
        .await
        .expect("an answer within 45 s")
        .unwrap_or_else(|e| panic!("request from {from}: {e}"));
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status from {from}: {text:.200}"));
    (status, head)
}

async fn post_login(web: SocketAddr, from: IpAddr, body: &str) -> (u16, String) {
    post_login_forwarded(web, from, None, body).await
}

/// A login through a reverse proxy at `from` that says the client is `forwarded_for`.
async fn post_login_forwarded(
    web: SocketAddr,
    from: IpAddr,
    forwarded_for: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut head =
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded".to_owned();
    if let Some(client) = forwarded_for {
        head += &format!("\r\nX-Forwarded-For: {client}");
    }
    request(web, from, &head, body).await
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
}

/// Signs in as `user` from `from`, waiting as Retry-After says while the answer is 429, until
/// `deadline`: the session cookie.
async fn sign_in(web: SocketAddr, from: IpAddr, user: &str, deadline: Duration) -> String {
    let until = Instant::now() + deadline;
    loop {
        let (status, head) = post_login(web, from, &form(user, PASSWORD)).await;
        if status == 303 {
            let cookie = header(&head, "set-cookie").expect("a session cookie");
            return cookie.split(';').next().unwrap().to_owned();
        }
        assert_eq!(status, 429, "{head}");
        assert!(
            Instant::now() < until,
            "{user} could not sign in from {from}"
        );
        let wait: u64 = header(&head, "retry-after").unwrap().parse().unwrap();
        tokio::time::sleep(Duration::from_secs(wait.min(2))).await;
    }
}

/// Five wrong passwords for `user` from `from` (failures_per_user_address by default), each
/// checked and refused; then even the right one waits.
async fn guess_until_held(web: SocketAddr, from: IpAddr, user: &str) {
    guess_until_held_forwarded(web, from, None, user).await
}

async fn guess_until_held_forwarded(
    web: SocketAddr,
    from: IpAddr,
    forwarded_for: Option<&str>,
    user: &str,
) {
    let wrong = form(user, "wrong guess");
    for _ in 0..5 {
        let (status, head) = post_login_forwarded(web, from, forwarded_for, &wrong).await;
        assert_eq!(status, 401, "{head}");
    }
    let right = form(user, PASSWORD);
    let (status, head) = post_login_forwarded(web, from, forwarded_for, &right).await;
    assert_eq!(status, 429, "{head}");
}

/// `n` login attempts, `concurrency` at a time, the i-th from `make(i)`: how many got each
/// status.
async fn flood(
    web: SocketAddr,
    n: usize,
    concurrency: usize,
    make: impl Fn(usize) -> (IpAddr, String) + Send + Sync + 'static,
) -> HashMap<u16, usize> {
    let next = Arc::new(AtomicUsize::new(0));
    let make = Arc::new(make);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (next, make) = (next.clone(), make.clone());
        workers.spawn(async move {
            let mut seen = HashMap::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return seen;
                }
                let (from, body) = make(i);
                *seen
                    .entry(post_login(web, from, &body).await.0)
                    .or_insert(0) += 1;
            }
        });
    }
    let mut all = HashMap::new();
    while let Some(seen) = workers.join_next().await {
        for (status, count) in seen.unwrap() {
            *all.entry(status).or_insert(0) += count;
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_logins_without_an_account_hold_memory_within_a_bound() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = serve.idle();
    // 250 at once, for names that do not exist, from 250 addresses in 25 networks.
    let attack = tokio::spawn(flood(web, 250, 250, |i| {
        let from = at((i / 10) as u8, 0, (i % 10 + 2) as u8);
        (from, form(&format!("nobody{i}"), "not a password at all"))
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let user = tokio::spawn(sign_in(web, HOME, "ops", Duration::from_secs(40)));
    let (seen, user) = (attack.await, user.await);
    serve.peak_within_bound(idle, "250 unknown names at once");
    let seen = seen.unwrap();
    eprintln!("answers {seen:?}");
    user.expect("the user signed in during the flood");
    assert_eq!(seen.values().sum::<usize>(), 250);
    assert!(
        seen.keys().all(|s| *s == 401 || *s == 429),
        "only refusals: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_wrong_passwords_are_counted_before_they_are_checked() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    // The user's own address, known from an earlier login.
    sign_in(web, HOME, "ops", Duration::from_secs(10)).await;
    let idle = serve.idle();
    // Forty at once from one address: five are checked, the others refused unchecked (429),
    // or not even read: past [web] connections_per_address_max (32) a connection gets 503.
    let wrong = form("ops", "wrong guess");
    let one = {
        let wrong = wrong.clone();
        flood(web, 40, 40, move |_| (at(0, 0, 2), wrong.clone())).await
    };
    assert!(
        one.get(&401).copied().unwrap_or(0) <= 5,
        "at most failures_per_user_address checked: {one:?}"
    );
    assert_eq!(one.values().sum::<usize>(), 40);
    assert!(one.keys().all(|s| [401, 429, 503].contains(s)), "{one:?}");
    // Two hundred at once from twenty networks: at most failures_per_user (20) checked in all,
    // and the user still signs in from their own address meanwhile.
    let many = tokio::spawn(flood(web, 200, 200, move |i| {
        (at(1, (i % 20) as u8, 1), wrong.clone())
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    sign_in(web, HOME, "ops", Duration::from_secs(40)).await;
    let many = many.await.unwrap();
    serve.peak_within_bound(idle, "240 wrong passwords for one name at once");
    assert!(
        many.get(&401).copied().unwrap_or(0) <= 20,
        "at most failures_per_user checked: {many:?}"
    );
    assert!(many.keys().all(|s| *s == 401 || *s == 429), "{many:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_failed_logins_from_other_addresses_does_not_lift_a_delay() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    let attacker = at(0, 0, 2);
    guess_until_held(web, attacker, "ops").await;
    let idle = serve.idle();
    // 13,000 failed logins with passwords one byte too long (never checked, but counted), each
    // from an address of its own in a network of its own.
    let long = "p".repeat(1025);
    let attack = tokio::spawn(flood(web, 13_000, 64, move |i| {
        let from = at(1 + (i / 256) as u8, (i % 256) as u8, 1);
        (from, form(&format!("u{i}"), &long))
    }));
    tokio::time::sleep(Duration::from_millis(200)).await;
    sign_in(web, HOME, "ops", Duration::from_secs(40)).await;
    let seen = attack.await.unwrap();
    serve.peak_within_bound(idle, "13,000 failed logins from as many networks");
    assert_eq!(seen.values().sum::<usize>(), 13_000, "{seen:?}");
    assert!(seen.keys().all(|s| *s == 401 || *s == 429), "{seen:?}");
    // The delay on (ops, attacker) is still there: guessing does not resume.
    let (status, head) = post_login(web, attacker, &form("ops", PASSWORD)).await;
    assert_eq!(status, 429, "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attack_on_a_name_does_not_lock_the_user_out_and_unlock_clears_it() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    sign_in(web, HOME, "ops", Duration::from_secs(10)).await;
    let attacker = at(0, 0, 2);
    guess_until_held(web, attacker, "ops").await;
    // The attack on the name does not reach the user at home.
    sign_in(web, HOME, "ops", Duration::from_secs(5)).await;
    // Guesses from twenty other networks use up the name's allowance for new addresses:
    // a new address waits, the user's own does not.
    // (The attacker's five count there too: 15 more reach the default 20.)
    for i in 0..15 {
        let (status, head) = post_login(web, at(2, i, 1), &form("ops", "wrong")).await;
        assert_eq!(status, 401, "{head}");
    }
    let elsewhere = at(201, 0, 1);
    let (status, head) = post_login(web, at(2, 15, 1), &form("ops", "wrong")).await;
    assert_eq!(status, 429, "{head}");
    assert_eq!(
        post_login(web, elsewhere, &form("ops", PASSWORD)).await.0,
        429
    );
    sign_in(web, HOME, "ops", Duration::from_secs(5)).await;
    // An admin clears the counters while serve runs.
    serve.user(&["unlock", "ops"], "");
    let (status, head) = post_login(web, attacker, &form("ops", PASSWORD)).await;
    assert_eq!(status, 303, "{head}");
    assert_eq!(
        post_login(web, elsewhere, &form("ops", PASSWORD)).await.0,
        303
    );
    // So does a new password.
    guess_until_held(web, attacker, "ops").await;
    let renewed = "another long secret";
    serve.user(
        &["passwd", "ops", "--password-stdin"],
        &format!("{renewed}\n"),
    );
    let (status, head) = post_login(web, attacker, &form("ops", renewed)).await;
    assert_eq!(status, 303, "{head}");
    let out = Command::new(EXE)
        .args(["user", "unlock", "nobody", "--data-dir"])
        .arg(&serve.data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_client_is_counted_by_its_own_address() {
    let proxy = at(250, 0, 1);
    let config = format!("[web.login]\ntrusted_proxies = [\"{proxy}\"]\n");
    let serve = Serve::start(&[("ops", "viewer")], &config);
    let web = serve.web;
    // A guesser behind the proxy is held; the user behind the same proxy is not.
    guess_until_held_forwarded(web, proxy, Some("198.51.100.7"), "ops").await;
    let right = form("ops", PASSWORD);
    let (status, head) = post_login_forwarded(web, proxy, Some("203.0.113.5"), &right).await;
    assert_eq!(status, 303, "{head}");
    // What a client writes before the proxy's entry proves nothing.
    let forged = Some("198.51.100.99, 198.51.100.7");
    let (status, head) = post_login_forwarded(web, proxy, forged, &right).await;
    assert_eq!(status, 429, "{head}");
    // Nor does the header from an address that is not a trusted proxy: the guesser there is
    // counted by its own address, and the address it names is not held.
    let direct = at(0, 5, 2);
    guess_until_held_forwarded(web, direct, Some("203.0.113.6"), "ops").await;
    let (status, head) = post_login_forwarded(web, proxy, Some("203.0.113.6"), &right).await;
    assert_eq!(status, 303, "{head}");
    let log = serve.log();
    assert!(log.contains("address=203.0.113.5"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_fields_are_bounded_and_a_logged_name_cannot_forge_a_line() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    // A megabyte of name is refused before it is read.
    let idle = serve.idle();
    let huge = form(&"N".repeat(1 << 20), "whatever");
    let seen = flood(web, 20, 20, move |i| (at(0, 1, i as u8 + 2), huge.clone())).await;
    serve.peak_within_bound(idle, "20 one-MiB names at once");
    assert_eq!(seen.get(&413), Some(&20), "{seen:?}");
    // A newline in a name does not start a line of its own.
    let forged = "admin\n2099-01-01T00:00:00.000000Z  WARN console: console login user=admin address=10.0.0.1";
    let (status, _) = post_login(web, at(0, 2, 2), &form(forged, "wrong")).await;
    assert_eq!(status, 401);
    // Names longer than any account's, past the address's allowance: what the log keeps of
    // each is short, refused or not.
    let long_name = "B".repeat(5000);
    for _ in 0..25 {
        let (status, _) = post_login(web, at(0, 3, 2), &form(&long_name, "wrong")).await;
        assert!(status == 401 || status == 429, "{status}");
    }
    let (status, head) = post_login(web, at(0, 3, 2), &form(&long_name, "wrong")).await;
    assert_eq!(status, 429, "{head}");
    let log = serve.log();
    assert!(
        !log.lines().any(|l| l.starts_with("2099-01-01")),
        "a forged line:\n{log}"
    );
    assert!(log.contains("admin\\u{a}2099"), "the name, escaped:\n{log}");
    assert!(
        !log.contains(&"B".repeat(100)),
        "a whole long name in:\n{log:.2000}"
    );
    assert!(!log.contains(&"N".repeat(100)), "a whole huge name logged");
    assert!(log.len() < 64 * 1024, "{} bytes of log", log.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_login_next_only_leads_to_a_path_on_this_site() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    let login = |next: &'static str| async move {
        let body = format!("{}&next={next}", form("ops", PASSWORD));
        let (status, head) = post_login(web, HOME, &body).await;
        assert_eq!(status, 303, "next={next}: {head}");
        assert!(header(&head, "set-cookie").is_some(), "{head}");
        header(&head, "location").unwrap().to_owned()
    };
    for bad in [
        "%2F%09%2F127.0.0.2%3A19999%2Fpwned",
        "%2Fcalls%0ASet-Cookie:%20x=1",
        "%2Fcalls%00",
        "%2Fcalls%7F",
        "%2F%2Fevil.example%2F",
        "%2F%5Cevil.example",
        "https%3A%2F%2Fevil.example%2F",
        "%2Fcalls%20x",
    ] {
        assert_eq!(login(bad).await, "/", "next={bad}");
    }
    assert_eq!(
        login("%2Fcalls%3Fcaller%3D%252B33").await,
        "/calls?caller=%2B33"
    );
    // The login page carries a bad next as `/` too.
    let (status, _) = request(
        web,
        HOME,
        "GET /login?next=%2F%09%2Fevil.example HTTP/1.1",
        "",
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_password_ends_the_users_sessions_and_api_tokens() {
    let serve = Serve::start(&[("ops", "viewer")], "");
    let web = serve.web;
    let token = serve.user(&["token", "ops", "--label", "cron"], "");
    let bearer = format!("Authorization: Bearer {}", token.trim());
    let cookie = sign_in(web, HOME, "ops", Duration::from_secs(10)).await;
    let whoami = |auth: String| async move {
        let head = format!("GET /api/whoami HTTP/1.1\r\n{auth}");
        request(web, HOME, &head, "").await.0
    };
    assert_eq!(whoami(bearer.clone()).await, 200);
    assert_eq!(whoami(format!("Cookie: {cookie}")).await, 200);
    serve.user(
        &["passwd", "ops", "--password-stdin"],
        "a brand new secret\n",
    );
    assert_eq!(whoami(bearer).await, 401, "the token ended");
    assert_eq!(
        whoami(format!("Cookie: {cookie}")).await,
        401,
        "the session ended"
    );
    assert!(serve.user(&["tokens", "ops"], "").is_empty());
}
