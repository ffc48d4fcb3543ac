//! What the action tests share: an alert to send, a local HTTP server that records what it
//! is sent, a small HTTP client for peers' APIs, and free loopback ports.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alerts::{Alert, AlertState, Figures, Severity};

pub fn alert(rule: &str, key: &str, actions: &[&str]) -> Alert {
    Alert {
        rule: rule.into(),
        rule_kind: "fraud.destination".into(),
        severity: Severity::Critical,
        group_by: "caller".into(),
        key: key.into(),
        state: AlertState::Firing,
        at_us: 1_764_288_000_000_000,
        since_us: 1_764_287_940_000_000,
        repeat: false,
        figures: Figures {
            value: 3.0,
            threshold: 1.0,
            unit: "calls".into(),
            matched: 3,
            total: 12,
            window_s: 300,
        },
        calls: vec![
            "edge1|a84c@192.0.2.10|1".into(),
            "edge1|b93d@192.0.2.10|1".into(),
            "edge1|c02e@192.0.2.10|1".into(),
        ],
        summary: format!("3 calls from {key} to +88213 (International Networks)"),
        actions: actions.iter().map(|s| s.to_string()).collect(),
    }
}

/// A temporary directory removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("alert-actions-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `port`.
pub fn wait_listening(port: u16, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A webhook receiver: records each request and answers the statuses it was given, in
/// order, then 200.
pub struct HookServer {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl HookServer {
    pub fn start(statuses: &[u16]) -> HookServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let statuses = Arc::new(Mutex::new(
            statuses.iter().copied().collect::<VecDeque<_>>(),
        ));
        let recorded = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let recorded = recorded.clone();
                let statuses = statuses.clone();
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    if let Some(req) = read_request(&conn) {
                        recorded.lock().unwrap().push(req);
                        let status = statuses.lock().unwrap().pop_front().unwrap_or(200);
                        let mut conn = conn;
                        let _ = write!(
                            conn,
                            "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                        );
                    }
                });
            }
        });
        HookServer { addr, requests }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until `n` requests came (or `within` passed) and returns those that did.
    pub fn wait_for(&self, n: usize, within: Duration) -> Vec<Request> {
        let end = Instant::now() + within;
        loop {
            let r = self.requests();
            if r.len() >= n || Instant::now() > end {
                return r;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Reads one HTTP/1.1 request with a Content-Length body.
pub fn read_request(conn: impl Read) -> Option<Request> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':')?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

/// One HTTP/1.1 request to a peer's API (`Connection: close`); the status and the body.
pub fn http(method: &str, addr: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut chunked = false;
    let mut len = None;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end().to_ascii_lowercase();
        if h.is_empty() {
            break;
        }
        if h == "transfer-encoding: chunked" {
            chunked = true;
        }
        if let Some(v) = h.strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
    }
    let mut out = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = len {
        out.resize(n, 0);
        r.read_exact(&mut out).unwrap();
    } else {
        r.read_to_end(&mut out).unwrap();
    }
    (code, String::from_utf8_lossy(&out).into_owned())
}

/// Waits for `notifier`'s counters to satisfy `done`.
pub fn wait_stats(
    notifier: &alert_actions::Notifier,
    within: Duration,
    done: impl Fn(&alert_actions::NotifierStats) -> bool,
) -> alert_actions::NotifierStats {
    let end = Instant::now() + within;
    loop {
        let s = notifier.stats();
        if done(&s) || Instant::now() > end {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
