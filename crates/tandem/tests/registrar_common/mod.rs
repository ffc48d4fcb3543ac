//! What the registrar's tests share: a `tandem serve` of their own ([`Tandem`]) and a phone
//! that registers with digest credentials over UDP or TCP from an address of its choice
//! ([`Phone`]), as a real one does (retransmitting over UDP).
// Each test binary uses part of this module.
#![allow(dead_code)]

use crate::common::free_port;
use registrar::digest::{self, Algorithm};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REALM: &str = "tandem";

/// One `tandem serve` with the registrar, its store and configuration in a temporary directory.
/// Killed and reaped when dropped, so a failed assertion leaves no server behind.
pub struct Tandem {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    config: PathBuf,
    /// `--sip-listen` given on the command line rather than a `[registrar]` section.
    sip_flag: bool,
    pub sip: SocketAddr,
    pub http: SocketAddr,
    pub agi: SocketAddr,
    pub sipp_runs: u32,
}

impl Drop for Tandem {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Tandem {
    /// Starts a server whose `[registrar]` section holds `registrar` (besides `listen`), after
    /// `seed` has had the store to itself (users, the nonce secret).
    pub fn serve(registrar: &str, seed: impl FnOnce(&kv::Store)) -> Tandem {
        Tandem::new(Some(registrar), seed)
    }

    /// Starts `tandem serve --sip-listen ADDR` with no `[registrar]` section: every registrar
    /// setting at its default.
    pub fn serve_defaults(seed: impl FnOnce(&kv::Store)) -> Tandem {
        Tandem::new(None, seed)
    }

    fn new(registrar: Option<&str>, seed: impl FnOnce(&kv::Store)) -> Tandem {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // The store is closed again before the server opens it: one process at a time.
        seed(&kv::Store::open_dir(&data, kv::Options::default()).unwrap());
        let (sip, http, agi) = (free_port(), free_port(), free_port());
        let config = dir.path().join("tandem.toml");
        let section = registrar.map_or(String::new(), |r| {
            format!("[registrar]\nlisten = \"127.0.0.1:{sip}\"\n{r}\n")
        });
        std::fs::write(
            &config,
            format!(
                "[fastagi]\nlisten = \"127.0.0.1:{agi}\"\n\
                 [metrics]\nlisten = \"127.0.0.1:{http}\"\n\
                 [web]\nenabled = false\n\
                 [history]\nenabled = false\n\
                 [kv]\ndata_dir = {data:?}\n{section}"
            ),
        )
        .unwrap();
        let mut t = Tandem {
            child: None,
            dir,
            config,
            sip_flag: registrar.is_none(),
            sip: SocketAddr::from(([127, 0, 0, 1], sip)),
            http: SocketAddr::from(([127, 0, 0, 1], http)),
            agi: SocketAddr::from(([127, 0, 0, 1], agi)),
            sipp_runs: 0,
        };
        t.spawn();
        t
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `tandem serve` and waits until it answers HTTP, which it binds after the registrar's
    /// sockets: from then on SIP is served.
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("serve.log"))
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
        cmd.arg("serve").arg("--config").arg(&self.config);
        if self.sip_flag {
            cmd.arg("--sip-listen").arg(self.sip.to_string());
        }
        let child = cmd
            .current_dir(self.dir.path())
            .env_remove("TANDEM_DATA_DIR")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(self.http).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("tandem serve exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "tandem serve did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no shutdown path runs, as in a power cut of the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }

    /// A figure of the server's /proc status in KiB (`VmRSS`, `VmHWM`: its peak).
    pub fn memory_kib(&self, field: &str) -> u64 {
        crate::common::status_kib(self.child.as_ref().expect("running").id(), field)
    }

    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.http
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    /// The value of the sample `series` (name and labels exactly as exported); 0 when absent
    /// (a labelled counter appears once it is first counted).
    pub fn metric(&self, series: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// The stored bindings of every AOR, read from the store file as `tandem sip bindings`
    /// does (the server may be running).
    pub fn stored_bindings(&self) -> std::collections::HashMap<String, Vec<registrar::Binding>> {
        let file = self.data_dir().join(kv::FILE_NAME);
        let store = kv::ReadOnlyStore::open_namespace(&file, registrar::users::NAMESPACE).unwrap();
        store
            .tree(Some("aor"), None)
            .unwrap()
            .into_iter()
            .map(|(k, v)| {
                let aor = k.strip_prefix("/aor/").unwrap_or(&k).to_string();
                (aor, registrar::binding::decode(&v.to_string_lossy()).0)
            })
            .collect()
    }

    /// `tandem sip bindings [AOR]` on this server's store: its output, which must succeed.
    pub fn bindings_cli(&self, aor: Option<&str>) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["sip", "bindings"])
            .args(aor)
            .arg("--data-dir")
            .arg(self.data_dir())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// A call to `exten` through `dialplan`'s `[from-internal]`, with the dialplan's
/// `127.0.0.1:4573` reaching this server's FastAGI port.
pub fn agi_call(
    t: &Tandem,
    dialplan: &asterisk_emu::Dialplan,
    exten: &str,
) -> (asterisk_emu::Call, asterisk_emu::CallEnd) {
    let mut channel = asterisk_emu::Channel::new("PJSIP/2000-00000001", "1795239019.1");
    channel.sounds.push("vm-nobodyavail".into());
    let mut call = asterisk_emu::Call::new(channel);
    call.agi_hosts.push(asterisk_emu::AgiHost {
        name: "127.0.0.1:4573".into(),
        addr: t.agi,
    });
    call.agi_idle_timeout = Duration::from_secs(10);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = runtime
        .block_on(call.run(dialplan, "from-internal", exten))
        .unwrap();
    (call, end)
}

pub fn with_user(user: &'static str, password: &'static str) -> impl FnOnce(&kv::Store) {
    move |store| registrar::users::add(store, REALM, user, password).unwrap()
}

/// A phone: a user and password, the address it sends from, and the registrar it registers
/// with. Every exchange has a deadline: it fails (with what it saw) rather than hang.
pub struct Phone {
    pub user: String,
    pub password: String,
    pub local: IpAddr,
    pub server: SocketAddr,
    /// The `uri` its credentials name (the Request-URI unless a test says otherwise).
    pub digest_uri: Option<String>,
    /// Written as the Request-URI instead of `sip:HOST:PORT`.
    pub request_uri: Option<String>,
}

/// What a registration attempt ended with.
#[derive(Debug)]
pub struct Exchange {
    /// Every response received, in order.
    pub responses: Vec<String>,
}

impl Exchange {
    pub fn last_status(&self) -> Option<u16> {
        self.responses.last().and_then(|r| status(r))
    }
}

/// The status code of a response.
pub fn status(response: &str) -> Option<u16> {
    response.strip_prefix("SIP/2.0 ")?.get(..3)?.parse().ok()
}

/// A header's value in a message.
pub fn header<'a>(msg: &'a str, name: &str) -> Option<&'a str> {
    msg.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A parameter's value in a `WWW-Authenticate` value (quotes removed).
fn auth_param<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    value.split(',').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        let k = k.trim().rsplit(' ').next()?;
        k.eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"'))
    })
}

fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    format!("{:016x}", h.finish())
}

impl Phone {
    pub fn new(user: &str, password: &str, local: &str, server: SocketAddr) -> Phone {
        Phone {
            user: user.into(),
            password: password.into(),
            local: local.parse().unwrap(),
            server,
            digest_uri: None,
            request_uri: None,
        }
    }

    fn request_uri(&self) -> String {
        self.request_uri
            .clone()
            .unwrap_or_else(|| format!("sip:{}", self.server))
    }

    /// A REGISTER from `via` (`UDP 127.0.0.9:40000`), with credentials answering `challenge`
    /// when given.
    fn register_text(
        &self,
        via: (&str, SocketAddr),
        call_id: &str,
        cseq: u32,
        challenge: Option<&str>,
    ) -> String {
        let (transport, local) = via;
        let uri = self.request_uri();
        let user = &self.user;
        let mut auth = String::new();
        if let Some(c) = challenge {
            let nonce = auth_param(c, "nonce").expect("a nonce in the challenge");
            let digest_uri = self.digest_uri.clone().unwrap_or_else(|| uri.clone());
            let ha1 = Algorithm::Md5.ha1(user, REALM, &self.password);
            let cnonce = random_token();
            let response = digest::client_response(
                Algorithm::Md5,
                &ha1,
                nonce,
                "00000001",
                &cnonce,
                "REGISTER",
                &digest_uri,
            );
            auth = format!(
                "Authorization: Digest username=\"{user}\", realm=\"{REALM}\", \
                 nonce=\"{nonce}\", uri=\"{digest_uri}\", response=\"{response}\", \
                 algorithm=MD5, cnonce=\"{cnonce}\", nc=00000001, qop=auth\r\n"
            );
        }
        format!(
            "REGISTER {uri} SIP/2.0\r\n\
             Via: SIP/2.0/{transport} {local};branch=z9hG4bK{};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:{user}@tandem.test>;tag={call_id}\r\n\
             To: <sip:{user}@tandem.test>\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} REGISTER\r\n\
             Contact: <sip:{user}@{local};transport={}>\r\n\
             Expires: 600\r\n{auth}Content-Length: 0\r\n\r\n",
            random_token(),
            transport.to_ascii_lowercase()
        )
    }

    /// Registers over UDP as a phone does: REGISTER, 401, REGISTER with credentials, each
    /// retransmitted on RFC 3261's Timer E (500 ms doubling to 4 s) until its final response
    /// or `deadline`.
    pub fn register_udp(&self, deadline: Duration) -> Exchange {
        let sock = UdpSocket::bind((self.local, 0)).unwrap();
        let local = sock.local_addr().unwrap();
        let until = Instant::now() + deadline;
        let call_id = format!("{}@{}", random_token(), self.local);
        let mut seen = Exchange { responses: vec![] };
        let mut challenge: Option<String> = None;
        for cseq in 1..=2 {
            let text = self.register_text(("UDP", local), &call_id, cseq, challenge.as_deref());
            let mut wait = Duration::from_millis(500);
            let mut sent_at = Instant::now();
            sock.send_to(text.as_bytes(), self.server).unwrap();
            let final_response = loop {
                let now = Instant::now();
                if now >= until {
                    return seen;
                }
                let left = (sent_at + wait).min(until).saturating_duration_since(now);
                sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                    .unwrap();
                let mut buf = [0u8; 65_535];
                match sock.recv_from(&mut buf) {
                    Ok((n, _)) => {
                        let r = String::from_utf8_lossy(&buf[..n]).to_string();
                        let ours = header(&r, "cseq") == Some(&format!("{cseq} REGISTER"));
                        let code = status(&r).unwrap_or(0);
                        seen.responses.push(r.clone());
                        if ours && code >= 200 {
                            break r;
                        }
                    }
                    Err(_) => {
                        // Timer E: send again, waiting twice as long, at most 4 s.
                        wait = (wait * 2).min(Duration::from_secs(4));
                        sent_at = Instant::now();
                        let _ = sock.send_to(text.as_bytes(), self.server);
                    }
                }
            };
            match status(&final_response) {
                Some(401) if cseq == 1 => {
                    challenge = header(&final_response, "www-authenticate").map(str::to_string);
                }
                _ => return seen,
            }
        }
        seen
    }

    /// Registers over TCP: connects from this phone's address, then REGISTER, 401, REGISTER
    /// with credentials on the one connection, each waiting until `deadline` at most. Returns
    /// what was received and the connection (open when it is).
    pub fn register_tcp(&self, deadline: Duration) -> (Exchange, Option<TcpStream>) {
        let until = Instant::now() + deadline;
        let mut seen = Exchange { responses: vec![] };
        let Ok(mut conn) = connect_from(self.local, self.server, deadline) else {
            return (seen, None);
        };
        let local = conn.local_addr().unwrap();
        let call_id = format!("{}@{}", random_token(), self.local);
        let mut challenge: Option<String> = None;
        for cseq in 1..=2 {
            let text = self.register_text(("TCP", local), &call_id, cseq, challenge.as_deref());
            if conn.write_all(text.as_bytes()).is_err() {
                return (seen, None);
            }
            let Some(r) = read_response(&mut conn, until) else {
                return (seen, None);
            };
            seen.responses.push(r.clone());
            match status(&r) {
                Some(401) if cseq == 1 => {
                    challenge = header(&r, "www-authenticate").map(str::to_string);
                }
                _ => break,
            }
        }
        (seen, Some(conn))
    }
}

pub use crate::common::connect_from;

/// One response read from a stream (a header section ending in a blank line; the registrar's
/// responses carry no body), `None` when the connection ends or `until` passes first.
pub fn read_response(conn: &mut TcpStream, until: Instant) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        conn.set_read_timeout(Some(left)).unwrap();
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&got).to_string())
}
