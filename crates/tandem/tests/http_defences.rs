//! The console and `/metrics` under attack from the network, against a real `tandem serve`
//! over loopback: a slowloris flood from several addresses while a client on another one
//! reads its pages and signs in, a request whose body never comes, a browser led by DNS
//! rebinding (a foreign `Host`), and a viewer reading a call's ladder for digest responses.
//! Each client socket is bound to its own loopback address (127.0.0.2, 127.0.0.3, ...) before
//! it connects, so the server sees many peers, as it would on a network.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const EXE: &str = env!("CARGO_BIN_EXE_tandem");
const PASSWORD: &str = "a long enough secret";
/// What the flood may add to the server's resident memory at its peak (README, "Security").
const FLOOD_RSS_MIB_MAX: u64 = 64;

/// A `tandem serve` with its console and metrics on free loopback ports, over a data directory
/// of its own, configured by `toml` (sections of `tandem.toml`).
struct Serve {
    child: Child,
    web: SocketAddr,
    metrics: SocketAddr,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// `what` went wrong: says whether the server still runs, with its log.
    fn explain(&self, what: &str) -> String {
        let state = match std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())) {
            Ok(stat) if !stat.contains(") Z ") => "still runs",
            _ => "has exited",
        };
        let log = std::fs::read_to_string(self._dir.path().join("serve.log")).unwrap_or_default();
        format!("{what}; tandem serve {state}; its log:\n{log}")
    }

    fn start(toml: &str, users: &[(&str, &str)]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        for (name, role) in users {
            bench::browser::add_user(Path::new(EXE), &data, name, role, PASSWORD).unwrap();
        }
        let config = dir.path().join("tandem.toml");
        std::fs::write(&config, toml).unwrap();
        let web = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
        let mut child = Command::new(EXE)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .args(["--agi-listen", "127.0.0.1:0"])
            .arg("--metrics-listen")
            .arg(metrics.to_string())
            .arg("--web-listen")
            .arg(web.to_string())
            .arg("--data-dir")
            .arg(&data)
            .env("TANDEM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        for addr in [web, metrics] {
            while std::net::TcpStream::connect(addr).is_err() {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("tandem serve exited before listening on {addr}: {status}");
                }
                assert!(Instant::now() < deadline, "serve did not listen on {addr}");
                std::thread::sleep(Duration::from_millis(25));
            }
        }
        Serve {
            child,
            web,
            metrics,
            data,
            _dir: dir,
        }
    }

    /// A figure of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
    fn status_kib(&self, field: &str) -> u64 {
        common::status_kib(self.child.id(), field)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// What a request got: `(status, head, body)`.
type Answer = (u16, String, String);

/// One HTTP/1.1 request from `from` with this `Host` (none when empty), on a fresh connection the server closes
/// after its answer; `None` when no whole answer came within `wait`.
async fn request(
    from: IpAddr,
    to: SocketAddr,
    host: &str,
    head: &str,
    body: &str,
    wait: Duration,
) -> Option<Answer> {
    let exchange = async {
        let mut s = connect_from(from, to).await.ok()?;
        // An empty `host` sends none.
        let mut req = format!("{head}\r\n");
        if !host.is_empty() {
            req.push_str(&format!("Host: {host}\r\n"));
        }
        req.push_str("Connection: close\r\n");
        if !body.is_empty() {
            req.push_str(&format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split(' ').nth(1)?.parse().ok()?;
        Some((status, head.to_owned(), body.to_owned()))
    };
    tokio::time::timeout(wait, exchange).await.ok().flatten()
}

async fn get(from: IpAddr, to: SocketAddr, path: &str, extra: &[(&str, &str)]) -> Answer {
    let mut head = format!("GET {path} HTTP/1.1");
    for (k, v) in extra {
        head.push_str(&format!("\r\n{k}: {v}"));
    }
    request(
        from,
        to,
        &to.to_string(),
        &head,
        "",
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|| panic!("GET {path} from {from}: no answer within 30 s"))
}

/// Signs in from `from`; the `Cookie` header value of the new session.
async fn sign_in(from: IpAddr, to: SocketAddr, user: &str, wait: Duration) -> Option<String> {
    let body = format!(
        "user={user}&password={}&next=/dashboard",
        PASSWORD.replace(' ', "+")
    );
    let (status, head, _) = request(
        from,
        to,
        &to.to_string(),
        "POST /login HTTP/1.1",
        &body,
        wait,
    )
    .await?;
    assert_eq!(status, 303, "signing in as {user}: {head}");
    head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .starts_with("set-cookie:")
            .then(|| l[11..].trim().split(';').next().unwrap_or("").to_owned())
    })
}

/// A slowloris: from each address, `per_address` connections that send a request's first
/// line and then one header line a second, never the end of the headers, reconnecting (after
/// a pause) whenever the server closes one. Counts the connections made.
fn slowloris(
    addresses: &[IpAddr],
    per_address: usize,
    to: SocketAddr,
    stop: Arc<AtomicBool>,
    made: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for &from in addresses {
        for _ in 0..per_address {
            let (stop, made) = (stop.clone(), made.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) = connect_from(from, to).await {
                        made.fetch_add(1, Ordering::Relaxed);
                        let first = format!("GET /login HTTP/1.1\r\nHost: {to}\r\n");
                        let mut open = s.write_all(first.as_bytes()).await.is_ok();
                        while open && !stop.load(Ordering::Relaxed) {
                            let mut b = [0u8; 256];
                            // A read that ends (or fails) means the server closed it.
                            tokio::select! {
                                r = s.read(&mut b) => open = matches!(r, Ok(n) if n > 0),
                                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                                    open = s.write_all(b"X-Slow: 1\r\n").await.is_ok();
                                }
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }));
        }
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_flood_from_ten_addresses_leaves_another_its_pages_and_its_login() {
    let _ = fastagi::runtime::raise_fd_limit();
    // A console with room for 64 connections: ten addresses at the per-address cap fill it
    // five times over, so the fair share at accept is what lets the client in.
    let serve = Serve::start("[web]\nconnections_max = 64\n", &[("ops", "viewer")]);
    let client = loopback(50);
    let (status, _, _) = get(client, serve.web, "/login", &[]).await;
    assert_eq!(status, 200);
    let idle_kib = serve.status_kib("VmRSS");

    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let attackers: Vec<IpAddr> = (2..12).map(loopback).collect();
    let flood = slowloris(&attackers, 60, serve.web, stop.clone(), made.clone());
    // Let the flood fill the console (and the kernel's queue of connections to accept).
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Eleven page loads, each on a new connection, with a generous deadline each.
    let mut answered = 0;
    let mut missed = Vec::new();
    for i in 0..11 {
        let t = Instant::now();
        let got = request(
            client,
            serve.web,
            &serve.web.to_string(),
            "GET /login HTTP/1.1",
            "",
            Duration::from_secs(15),
        )
        .await;
        match got {
            Some((200, _, _)) => answered += 1,
            other => missed.push(format!("#{i}: {other:?} after {:?}", t.elapsed())),
        }
    }
    // And a sign-in, then the dashboard with its session.
    let cookie = sign_in(client, serve.web, "ops", Duration::from_secs(60)).await;
    let dashboard = match &cookie {
        Some(c) => {
            request(
                client,
                serve.web,
                &serve.web.to_string(),
                &format!("GET /dashboard HTTP/1.1\r\nCookie: {c}"),
                "",
                Duration::from_secs(30),
            )
            .await
        }
        None => None,
    };
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.abort();
    }
    let peak_kib = serve.status_kib("VmHWM");
    let made = made.load(Ordering::Relaxed);
    eprintln!(
        "flood: {made} connections made; the client's pages: {answered}/11; RSS idle {} MiB, \
         peak {} MiB",
        idle_kib / 1024,
        peak_kib / 1024
    );
    assert!(made >= 600, "the flood made only {made} connections");
    assert_eq!(
        answered, 11,
        "pages not served during the flood: {missed:?}"
    );
    assert!(cookie.is_some(), "no sign-in within 60 s during the flood");
    assert!(
        matches!(dashboard, Some((200, _, _))),
        "the dashboard during the flood: {dashboard:?}"
    );
    assert!(
        peak_kib.saturating_sub(idle_kib) <= FLOOD_RSS_MIB_MAX * 1024,
        "the flood took the server from {idle_kib} KiB to a peak of {peak_kib} KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_never_comes_is_answered_and_closed() {
    let serve = Serve::start("[web]\nbody_timeout_ms = 1000\n", &[]);
    let t = Instant::now();
    let exchange = async {
        let mut s = match connect_from(loopback(3), serve.web).await {
            Ok(s) => s,
            Err(e) => panic!(
                "{}",
                serve.explain(&format!("connect to {}: {e}", serve.web))
            ),
        };
        let head = format!(
            "POST /login HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: 400\r\n\r\nuser=ops&pass",
            serve.web
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        String::from_utf8_lossy(&raw).into_owned()
    };
    let answer = tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("a body that never came held the connection for 20 s");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body"), "{answer}");
    eprintln!("cut after {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_and_the_metrics_answer_only_to_their_own_names() {
    let toml = "[web]\nhosts = [\"console.example\", \"proxy.example:8443\"]\n\
                [metrics]\nhosts = [\"metrics.example\"]\n";
    let serve = Serve::start(toml, &[]);
    let wait = Duration::from_secs(30);
    let from = loopback(7);
    for (to, what, path) in [
        (serve.web, "[web] hosts", "/login"),
        (serve.metrics, "[metrics] hosts", "/metrics"),
    ] {
        let port = to.port();
        let req = format!("GET {path} HTTP/1.1");
        let ask = |host: String| {
            let req = req.clone();
            async move {
                request(from, to, &host, &req, "", wait)
                    .await
                    .unwrap_or_else(|| panic!("{path} with Host {host}: no answer"))
            }
        };
        // A page of an attacker's site whose name now resolves to 127.0.0.1.
        for host in [
            format!("rebind.example:{port}"),
            "rebind.example".to_owned(),
            format!("127.0.0.1.rebind.example:{port}"),
            format!("localhost.rebind.example:{port}"),
            // This server's address with a port it does not listen on, or another address.
            "127.0.0.1:1".to_owned(),
            "127.0.0.2".to_owned(),
            format!("[::1]:{port}"),
        ] {
            let (status, _, body) = ask(host.clone()).await;
            assert_eq!(status, 421, "{path} with Host {host}: {body}");
            assert!(body.contains(what), "{path} with Host {host}: {body}");
        }
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("LocalHost.:{port}"),
            "127.0.0.1".to_owned(),
        ] {
            let (status, _, body) = ask(host.clone()).await;
            assert_eq!(status, 200, "{path} with Host {host}: {body}");
        }
    }
    // The names configured for each.
    for (host, status) in [
        ("console.example", 200),
        ("console.example:443", 200),
        ("proxy.example:8443", 200),
        ("proxy.example", 421),
        ("metrics.example", 421),
    ] {
        let (got, _, body) = request(from, serve.web, host, "GET /login HTTP/1.1", "", wait)
            .await
            .unwrap();
        assert_eq!(got, status, "console, Host {host}: {body}");
    }
    let (got, _, body) = request(
        from,
        serve.metrics,
        "metrics.example",
        "GET /metrics HTTP/1.1",
        "",
        wait,
    )
    .await
    .unwrap();
    assert_eq!(got, 200, "{body}");
    // Without a Host, an HTTP/1.1 request is malformed.
    let (got, _, _) = request(from, serve.web, "", "GET /login HTTP/1.1", "", wait)
        .await
        .unwrap();
    assert!(got == 400 || got == 421, "no Host: {got}");
}

/// A call set up with digest authentication, as Asterisk challenges a phone: INVITE, 407,
/// ACK, the INVITE again with `Proxy-Authorization`, 200 with SDP, ACK, then a BYE that
/// carries `Authorization`, and its 200. Returns (the pcap, the Call-ID).
fn digest_call_pcap(dir: &Path) -> (PathBuf, String) {
    let path = dir.join("digest-call.pcap");
    let call_id = "digest-call-1@192.0.2.10".to_owned();
    let phone: SocketAddr = "192.0.2.10:5060".parse().unwrap();
    let pbx: SocketAddr = "192.0.2.20:5060".parse().unwrap();
    let start_ns = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 600)
        * 1_000_000_000;
    let sdp = |ip: &str, port: u16| {
        format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
             m=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n"
        )
    };
    let message = |first: &str, cseq: &str, to_tag: &str, extra: &str, body: &str| {
        let ctype = if body.is_empty() {
            String::new()
        } else {
            "Content-Type: application/sdp\r\n".to_owned()
        };
        format!(
            "{first}\r\nVia: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK-{cseq_n}\r\n\
             From: <sip:1001@192.0.2.20>;tag=ph1\r\nTo: <sip:2002@192.0.2.20>{to_tag}\r\n\
             Call-ID: {call_id}\r\nCSeq: {cseq}\r\nContact: <sip:1001@192.0.2.10:5060>\r\n\
             {extra}{ctype}Content-Length: {}\r\n\r\n{body}",
            body.len(),
            cseq_n = cseq.replace(' ', "-"),
        )
    };
    let proxy_auth = "Proxy-Authorization: Digest username=\"1001\", realm=\"asterisk\", \
                      nonce=\"5f3a1c2b\", uri=\"sip:2002@192.0.2.20\", \
                      response=\"6629fae49393a05397450978507c4ef1\", algorithm=MD5, \
                      cnonce=\"0a4f113b\", qop=auth, nc=00000001\r\n";
    let bye_auth = "Authorization: Digest username=\"1001\",realm=\"asterisk\",\
                    nonce=\"5f3a1c2b\",uri=\"sip:2002@192.0.2.20\",\
                    response=\"e1c3b0a77d5f0d9bb6bdbb06ad3b0f22\",cnonce=\"77ab90cd\",\
                    qop=auth,nc=00000002\r\n";
    let flow: Vec<(bool, String)> = vec![
        (
            true,
            message(
                "INVITE sip:2002@192.0.2.20 SIP/2.0",
                "1 INVITE",
                "",
                "",
                &sdp("192.0.2.10", 40000),
            ),
        ),
        (
            false,
            message(
                "SIP/2.0 407 Proxy Authentication Required",
                "1 INVITE",
                ";tag=pbx1",
                "Proxy-Authenticate: Digest realm=\"asterisk\", nonce=\"5f3a1c2b\", \
                 algorithm=MD5, qop=\"auth\"\r\n",
                "",
            ),
        ),
        (
            true,
            message(
                "ACK sip:2002@192.0.2.20 SIP/2.0",
                "1 ACK",
                ";tag=pbx1",
                "",
                "",
            ),
        ),
        (
            true,
            message(
                "INVITE sip:2002@192.0.2.20 SIP/2.0",
                "2 INVITE",
                "",
                proxy_auth,
                &sdp("192.0.2.10", 40000),
            ),
        ),
        (
            false,
            message(
                "SIP/2.0 200 OK",
                "2 INVITE",
                ";tag=pbx2",
                "",
                &sdp("192.0.2.20", 50000),
            ),
        ),
        (
            true,
            message(
                "ACK sip:2002@192.0.2.20 SIP/2.0",
                "2 ACK",
                ";tag=pbx2",
                "",
                "",
            ),
        ),
        (
            true,
            message(
                "BYE sip:2002@192.0.2.20 SIP/2.0",
                "3 BYE",
                ";tag=pbx2",
                bye_auth,
                "",
            ),
        ),
        (
            false,
            message("SIP/2.0 200 OK", "3 BYE", ";tag=pbx2", "", ""),
        ),
    ];
    let mut pcap = monitor::synth::PcapBuilder::create(&path).unwrap();
    let mut t = start_ns;
    for (i, (from_phone, text)) in flow.iter().enumerate() {
        let (src, dst) = if *from_phone {
            (phone, pbx)
        } else {
            (pbx, phone)
        };
        pcap.udp(t, src, dst, text.as_bytes());
        t += 100_000_000;
        if i == 5 {
            // A second of audio each way between the answer and the BYE.
            let a: SocketAddr = "192.0.2.10:40000".parse().unwrap();
            let b: SocketAddr = "192.0.2.20:50000".parse().unwrap();
            pcap.pcma_run(t, (a, b), 0x1111, 1, 50);
            t = pcap.pcma_run(t, (b, a), 0x2222, 1, 50);
        }
    }
    pcap.finish().unwrap();
    (path, call_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_the_ladder_without_digest_responses_and_an_admin_reads_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (pcap, call_id) = digest_call_pcap(dir.path());
    let serve = Serve::start("", &[("watcher", "viewer"), ("boss", "admin")]);
    let out = Command::new(EXE)
        .args(["capture", "--read"])
        .arg(&pcap)
        .arg("--archive")
        .arg(serve.data.join("archive"))
        .args(["--archive-store", "full", "--cdr-db"])
        .arg(serve.data.join("cdr.sqlite3"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tandem capture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from = loopback(9);
    let wait = Duration::from_secs(60);
    let viewer = sign_in(from, serve.web, "watcher", wait).await.unwrap();
    let admin = sign_in(from, serve.web, "boss", wait).await.unwrap();
    let (status, _, body) = get(
        from,
        serve.web,
        &format!("/api/calls?call_id={}", console::web::url_encode(&call_id)),
        &[("Cookie", &viewer)],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let uid = page["calls"][0]["uid"]
        .as_str()
        .expect("the call's uid")
        .to_owned();
    let call_url = format!("/api/calls/{}", console::web::url_encode(&uid));

    let secrets = [
        "6629fae49393a05397450978507c4ef1",
        "e1c3b0a77d5f0d9bb6bdbb06ad3b0f22",
        "0a4f113b",
        "77ab90cd",
    ];
    let ladder_texts = |body: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["ladder"]
            .as_array()
            .expect("a ladder")
            .iter()
            .map(|e| e["text"].as_str().unwrap().to_owned())
            .collect()
    };

    // A viewer: every secret replaced by the marker; who, where and how kept.
    let (status, _, body) = get(from, serve.web, &call_url, &[("Cookie", &viewer)]).await;
    assert_eq!(status, 200, "{body}");
    for s in secrets {
        assert!(!body.contains(s), "a viewer read {s}: {body}");
    }
    let texts = ladder_texts(&body);
    assert_eq!(texts.len(), 8, "{texts:?}");
    let invite = &texts[3];
    assert!(
        invite.contains(
            "Proxy-Authorization: Digest username=\"1001\", realm=\"asterisk\", \
             nonce=\"5f3a1c2b\", uri=\"sip:2002@192.0.2.20\", response=\"<redacted>\", \
             algorithm=MD5, cnonce=\"<redacted>\", qop=auth, nc=00000001\r\n"
        ),
        "{invite}"
    );
    assert!(texts[6].contains("Authorization: Digest username=\"1001\",realm=\"asterisk\""));
    assert!(texts[6].contains("response=\"<redacted>\""), "{}", texts[6]);
    // The challenge is not a secret: it stays as sent.
    assert!(texts[1].contains("Proxy-Authenticate: Digest realm=\"asterisk\", nonce=\"5f3a1c2b\""));

    // An admin reads the messages as they were sent, as in the pcap they may download.
    let (status, _, body) = get(from, serve.web, &call_url, &[("Cookie", &admin)]).await;
    assert_eq!(status, 200, "{body}");
    for s in secrets {
        assert!(body.contains(s), "an admin's ladder lacks {s}");
    }
    let (status, _, body) = get(
        from,
        serve.web,
        &format!("{call_url}/pcap"),
        &[("Cookie", &viewer)],
    )
    .await;
    assert_eq!(status, 403, "{body}");
}
