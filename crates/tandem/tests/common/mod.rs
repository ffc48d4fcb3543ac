//! What several of the binary's tests need: a free UDP port, one call as a HEP sender
//! (Kamailio's siptrace, heplify) would send it, and captures replayed with their long gaps cut.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

/// A port on loopback that is free for both UDP and TCP now, taken from below the kernel's
/// ephemeral range (`net.ipv4.ip_local_port_range`).
///
/// Why not port 0: what the kernel hands out there is an ephemeral port, the kind every
/// outgoing connection of a parallel test (sipp, Kamailio, PostgreSQL clients) is also given,
/// so one could take it between this pick and the child's bind. A HEP listener binds UDP and
/// TCP on the one port, which doubles the chance. Below the range only another explicit bind
/// can collide, and the start is spread by the process id and the clock.
pub fn free_port() -> u16 {
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);

    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u32, ephemeral_low.max(10_001));
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
    for _ in 0..10_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (low + (seed.wrapping_add(n.wrapping_mul(7_919))) % (high - low)) as u16;
        let tcp = TcpListener::bind(("127.0.0.1", port));
        if tcp.is_ok() && UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port below {ephemeral_low} is free for both UDP and TCP on 127.0.0.1");
}

/// A UDP port on loopback that nothing listens on now (free for TCP too: see [`free_port`]).
pub fn free_udp_port() -> u16 {
    free_port()
}

/// The six HEP v3 packets of one call from 1001@192.0.2.10 to 2002@192.0.2.20, answered and
/// ended by the caller: INVITE, 100, 200, ACK, BYE, 200, one second apart from
/// 2026-11-21 05:30:00 UTC.
pub fn one_call_as_hep(call_id: &str) -> Vec<Vec<u8>> {
    let (a, b): (IpAddr, IpAddr) = ("192.0.2.10".parse().unwrap(), "192.0.2.20".parse().unwrap());
    let messages = [
        ("INVITE sip:2002@192.0.2.20 SIP/2.0", true, "1 INVITE"),
        ("SIP/2.0 100 Trying", false, "1 INVITE"),
        ("SIP/2.0 200 OK", false, "1 INVITE"),
        ("ACK sip:2002@192.0.2.20 SIP/2.0", true, "1 ACK"),
        ("BYE sip:2002@192.0.2.20 SIP/2.0", true, "2 BYE"),
        ("SIP/2.0 200 OK", false, "2 BYE"),
    ];
    messages
        .iter()
        .enumerate()
        .map(|(i, (first, from_a, cseq))| {
            let to_tag = if first.starts_with("INVITE") {
                ""
            } else {
                ";tag=b2"
            };
            let text = format!(
                "{first}\r\nVia: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK-{i}\r\n\
                 From: <sip:1001@192.0.2.10>;tag=a1\r\nTo: <sip:2002@192.0.2.20>{to_tag}\r\n\
                 Call-ID: {call_id}\r\nCSeq: {cseq}\r\nContent-Length: 0\r\n\r\n"
            );
            let (src_ip, dst_ip) = if *from_a { (a, b) } else { (b, a) };
            hep::HepPacket {
                ip_protocol: 17,
                src_ip,
                dst_ip,
                src_port: 5060,
                dst_port: 5060,
                ts_sec: 1_795_239_000 + i as u32,
                ts_usec: 0,
                protocol_type: hep::ProtocolType::SIP,
                capture_id: 2001,
                keep_alive_timer: None,
                auth_key: None,
                payload: hep::Payload::Raw(text.as_bytes()),
                correlation_id: None,
            }
            .to_bytes()
            .unwrap()
        })
        .collect()
}

/// Sends `packets` to 127.0.0.1:`port` from a socket of its own, in order.
pub fn send_udp(port: u16, packets: &[Vec<u8>]) {
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for p in packets {
        sender.send_to(p, ("127.0.0.1", port)).unwrap();
    }
}

/// The capture's duration with gaps cut to `max_gap_ms`, in seconds.
pub fn replay_seconds(path: &Path, max_gap_ms: u64) -> f64 {
    let mut r = monitor::pcap::CaptureReader::open(path).unwrap();
    let (mut prev, mut total) = (None::<i64>, 0i64);
    while let Some(p) = r.next_packet().unwrap() {
        if let Some(prev) = prev {
            total += (p.ts_ns - prev).clamp(0, max_gap_ms as i64 * 1_000_000);
        }
        prev = Some(p.ts_ns);
    }
    total as f64 / 1e9
}

/// A copy of `path` stamped as the replayer sends it with gaps cut to `max_gap_ms`.
pub fn paced_copy(path: &Path, max_gap_ms: u64, out: &Path) {
    let mut r = monitor::pcap::CaptureReader::open(path).unwrap();
    let mut w = None;
    let (mut prev, mut ts) = (None::<i64>, 0i64);
    while let Some(p) = r.next_packet().unwrap() {
        match prev {
            None => ts = p.ts_ns,
            Some(prev) => ts += (p.ts_ns - prev).clamp(0, max_gap_ms as i64 * 1_000_000),
        }
        prev = Some(p.ts_ns);
        let w = w.get_or_insert_with(|| {
            monitor::pcap::PcapWriter::new(std::fs::File::create(out).unwrap(), p.link_type, true)
                .unwrap()
        });
        w.write_packet(ts, p.data).unwrap();
    }
}

/// The lines a child process writes to a pipe, read as they come by a thread of their own (so
/// that the child never blocks on a full pipe), for a test to wait on while the child runs.
#[derive(Clone)]
pub struct Lines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Lines {
    pub fn read(pipe: impl std::io::Read + Send + 'static) -> Lines {
        use std::io::BufRead;
        let lines = Lines(Default::default());
        let to = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                to.0.lock().unwrap().push(line);
            }
        });
        lines
    }

    /// Every line so far.
    pub fn text(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }

    /// Waits until a line read from `from` on (a line index) satisfies `found`, at most
    /// `within`; that line's index, or `None` at the deadline.
    pub fn wait_for(
        &self,
        from: usize,
        within: std::time::Duration,
        found: impl Fn(&str) -> bool,
    ) -> Option<usize> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let hit = {
                let v = self.0.lock().unwrap();
                v.iter().skip(from).position(|l| found(l)).map(|i| from + i)
            };
            if hit.is_some() || std::time::Instant::now() >= deadline {
                return hit;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Lines read so far.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// The number of calls active that a status line says (`calls N active, ...`), if it is one.
pub fn calls_active(status_line: &str) -> Option<u64> {
    let (_, rest) = status_line.split_once("calls ")?;
    rest.split_once(" active")?.0.parse().ok()
}

/// Every call stored in the SQLite file `db`, as `tandem cdr list --json` prints them (none
/// before the file exists).
pub fn stored_calls(db: &Path) -> Vec<serde_json::Value> {
    if !db.exists() {
        return Vec::new();
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["cdr", "list", "--json", "--limit", "0", "--db"])
        .arg(db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Waits until `db` holds `n` calls, at most `within`; the calls it holds then.
pub fn wait_for_stored_calls(
    db: &Path,
    n: usize,
    within: std::time::Duration,
) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let stored = stored_calls(db);
        if stored.len() >= n || std::time::Instant::now() >= deadline {
            return stored;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// What a quiet capture must show once its `n` calls have ended and nothing more comes: the
/// `n` calls stored in `db` (within `within`; the time it took is printed), each ended and
/// with its SIP archived in a tar that exists, and then a status line in `status` (the
/// capture's stderr) that counts no call active. Returns the stored calls.
pub fn stored_then_none_active(
    status: &Lines,
    db: &Path,
    n: usize,
    within: std::time::Duration,
) -> Vec<serde_json::Value> {
    let since = std::time::Instant::now();
    let stored = wait_for_stored_calls(db, n, within);
    eprintln!(
        "{} of {n} calls stored {:.1} s after the check began (call linger 5 s)",
        stored.len(),
        since.elapsed().as_secs_f64()
    );
    assert_eq!(
        stored.len(),
        n,
        "calls that ended were not stored while nothing came: {}",
        status.text()
    );
    for c in &stored {
        assert_eq!(c["state"], "ended", "{c}");
        let tar = c["sip_tar"].as_str().unwrap_or_else(|| panic!("{c}"));
        assert!(Path::new(tar).exists(), "{c}");
    }
    assert!(
        status
            .wait_for(status.len(), within, |l| calls_active(l) == Some(0))
            .is_some(),
        "the status line still counts the ended calls: {}",
        status.text()
    );
    stored
}

/// A figure of `/proc/PID/status` in KiB: `VmRSS`, or `VmHWM` (the peak resident memory, which
/// the flood tests hold to a bound).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A TCP connection to `server` from the local address `local` (any port), within `deadline`:
/// floods come from several loopback addresses, and a legitimate client from another.
pub fn connect_from(
    local: IpAddr,
    server: SocketAddr,
    deadline: Duration,
) -> std::io::Result<TcpStream> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(server),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    sock.bind(&SocketAddr::new(local, 0).into())?;
    sock.connect_timeout(&server.into(), deadline)?;
    Ok(sock.into())
}

/// A `tandem serve` child, killed (SIGKILL) when dropped.
pub struct ServeChild {
    pub child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl ServeChild {
    /// `tandem serve --config CONFIG`, its stderr in LOG, once `port` (on loopback) accepts.
    pub fn start(config: &Path, log: &Path, port: u16) -> ServeChild {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["serve", "--config"])
            .arg(config)
            .env_remove("TANDEM_DATA_DIR")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let s = ServeChild {
            child,
            log: log.to_path_buf(),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "serve did not start:\n{}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether SIPp can run here; skips (fails under CI) when it cannot.
#[track_caller]
pub fn have_sipp() -> bool {
    let found = std::process::Command::new("sipp")
        .arg("-v")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !found {
        test_env::skip("`sipp` is not installed (Debian package `sip-tester`)");
    }
    found
}
