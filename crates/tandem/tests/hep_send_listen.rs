//! HEP in and out with real sockets and real peers: one Tandem's `--hep-send` (a thin sensor
//! reading a capture) to another Tandem's `--hep-listen`, over UDP and over TCP, must give the
//! same calls, streams and figures as `tandem capture --read` of the same capture; the
//! authentication key is enforced (wrong and missing keys refused and counted, the right one
//! analysed); a TCP peer that sends garbage, or a packet over the payload limit, is
//! disconnected while the other connections go on.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use monitor::synth::{CallKind, SynthConfig, generate};

const KEY: &str = "thin-sensor-key-7";

fn tandem() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tandem"));
    c.env("TANDEM_LOG", "warn")
        .env_remove("TANDEM_HEP_AUTH_KEY");
    c
}

/// A running `tandem capture --hep-listen`: stopped and reaped when dropped; its stdout (JSON
/// lines) and stderr read by threads so that it never blocks on a full pipe.
struct Listener {
    child: Child,
    addr: SocketAddr,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl Listener {
    /// `tandem capture --hep-listen 127.0.0.1:0 --json --no-store` with `extra` options.
    fn start(extra: &[&str]) -> Listener {
        let mut child = tandem()
            .args([
                "capture",
                "--hep-listen",
                "127.0.0.1:0",
                "--json",
                "--no-store",
                "--status-interval-s",
                "0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).unwrap();
        // listening for HEP v3 on udp://127.0.0.1:PORT and tcp://127.0.0.1:PORT (...)
        let addr: SocketAddr = first
            .split_whitespace()
            .find_map(|w| w.strip_prefix("udp://"))
            .unwrap_or_else(|| panic!("no listening line: {first:?}"))
            .parse()
            .unwrap();
        assert!(first.contains(&format!("tcp://{addr}")), "{first}");
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            out.read_to_string(&mut s).unwrap();
            s
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            err.read_to_string(&mut s).unwrap();
            s
        });
        Listener {
            child,
            addr,
            stdout: Some(stdout),
            stderr: Some(stderr),
        }
    }

    /// Waits for the exit `--hep-max-packets` brings (SIGTERM after a minute: a bound on a
    /// broken test, which then fails); stdout and stderr.
    fn finish(mut self) -> (String, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut status = None;
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let timed_out = status.is_none();
        if timed_out {
            self.terminate();
            status = Some(self.child.wait().unwrap());
        }
        let out = self.stdout.take().unwrap().join().unwrap();
        let err = self.stderr.take().unwrap().join().unwrap();
        assert!(
            !timed_out,
            "the listener did not receive every packet within a minute: {err}"
        );
        assert!(status.unwrap().success(), "{err}");
        (out, err)
    }

    fn terminate(&mut self) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The records of a `--json` output, each as its JSON text, sorted: the order in which
/// records close depends on when the source flushes, their content must not.
fn records(json_lines: &str) -> Vec<String> {
    let mut v: Vec<String> = json_lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .unwrap_or_else(|e| panic!("{e}: {l}"))
                .to_string()
        })
        .collect();
    v.sort();
    v
}

/// `tandem capture --read PCAP --json --no-store`: the reference.
fn read_directly(pcap: &Path) -> Vec<String> {
    let out = tandem()
        .args(["capture", "--json", "--no-store", "--read"])
        .arg(pcap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    records(&String::from_utf8(out.stdout).unwrap())
}

/// `tandem capture --read PCAP --hep-send TARGET` (a thin sensor), which must succeed; its
/// stderr.
fn send(pcap: &Path, target: &str, extra: &[&str]) -> String {
    let out = tandem()
        .args(["capture", "--read"])
        .arg(pcap)
        .args(["--hep-send", target])
        .args(extra)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("--hep-send forwards only"), "{stdout}");
    err
}

/// The packets a thin sensor sends for `pcap`, as a collector of the test's own reads them
/// over TCP (deframed and decoded with the `hep` crate): how many, each with the key.
fn packets_sent_for(pcap: &Path, key_file: &Path) -> usize {
    let collector = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = collector.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = collector.accept().unwrap();
        let mut frames = hep::Deframer::new(0);
        let mut n = 0;
        loop {
            let got = s.read(frames.spare()).unwrap();
            if got == 0 {
                assert_eq!(frames.buffered(), 0, "the stream ended inside a packet");
                return n;
            }
            frames.filled(got);
            while let Some(f) = frames.next_frame().unwrap() {
                let p = hep::decode(f, &hep::DecodeLimits::default()).unwrap();
                assert_eq!(p.auth_key, Some(KEY.as_bytes()));
                assert_eq!(p.capture_id, 77);
                n += 1;
            }
        }
    });
    send(
        pcap,
        &format!("tcp://{addr}"),
        &[
            "--hep-auth-key-file",
            key_file.to_str().unwrap(),
            "--hep-capture-id",
            "77",
        ],
    );
    reader.join().unwrap()
}

fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("hep.key");
    std::fs::write(&path, format!("{KEY}\n")).unwrap();
    path
}

/// A synthetic capture with every kind of call, loss, jitter, reordering and duplicates.
fn synthetic(dir: &Path) -> PathBuf {
    let pcap = dir.join("synthetic.pcap");
    let cfg = SynthConfig {
        calls: 12,
        call_duration_ms: 1_500,
        loss_pct: 1.0,
        duplicate_pct: 0.5,
        reorder_pct: 1.0,
        jitter_ms: 4.0,
        kinds: CallKind::ALL.to_vec(),
        ..SynthConfig::default()
    };
    generate(&cfg, std::fs::File::create(&pcap).unwrap()).unwrap();
    pcap
}

/// Every capture the comparison runs on: the synthetic one, and the shared real ones when
/// they are there.
fn captures(dir: &Path) -> Vec<PathBuf> {
    let mut v = vec![synthetic(dir)];
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if shared.is_dir() {
        for name in [
            "rtp_rtcp_sip_ipv4_udp.pcap",
            "sip_ipv4_tcp.pcap",
            "sip_ipv6_udp.pcap",
            "aaa.pcap",
            "ipip0.pcap",
            "g711a-rtp-only.pcap",
        ] {
            v.push(shared.join(name));
        }
    } else {
        test_env::skip("../shared/captures is not there: only the synthetic capture is compared");
    }
    v
}

fn same_through_hep(transport: &str, sender_extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let key_arg = key.to_str().unwrap();
    for pcap in captures(dir.path()) {
        let expected = read_directly(&pcap);
        assert!(!expected.is_empty(), "{}", pcap.display());
        let n = packets_sent_for(&pcap, &key);
        let listener = Listener::start(&[
            "--hep-auth-key-file",
            key_arg,
            "--hep-max-packets",
            &n.to_string(),
        ]);
        let target = format!("{transport}://{}", listener.addr);
        let mut extra = vec!["--hep-auth-key-file", key_arg];
        extra.extend_from_slice(sender_extra);
        let sent = send(&pcap, &target, &extra);
        assert!(sent.contains(&format!("{n} packets")), "{sent}");
        let (out, err) = listener.finish();
        assert!(
            err.contains(&format!("HEP: {n} packets analysed")),
            "{}: {err}",
            pcap.display()
        );
        assert!(
            err.contains("refused: 0 for their authentication key, 0 not HEP v3"),
            "{err}"
        );
        assert_eq!(
            records(&out),
            expected,
            "{} through HEP over {transport}",
            pcap.display()
        );
    }
}

#[test]
fn a_thin_sensor_over_tcp_gives_the_calls_of_reading_the_capture() {
    same_through_hep("tcp", &[]);
}

#[test]
fn a_thin_sensor_over_udp_gives_the_calls_of_reading_the_capture() {
    // Paced, so that the listener's socket never overflows whatever the machine's load: this
    // test is about what arrives, not how fast.
    same_through_hep("udp", &["--hep-send-max-pps", "20000"]);
}

/// `packets` with their authentication key set to `key` (None: without one).
fn with_key(packets: &[Vec<u8>], key: Option<&[u8]>) -> Vec<Vec<u8>> {
    packets
        .iter()
        .map(|bytes| {
            let mut p = hep::decode(bytes, &hep::DecodeLimits::default()).unwrap();
            p.auth_key = key;
            p.to_bytes().unwrap()
        })
        .collect()
}

/// `GET /metrics` from a capture's metrics listener.
fn metrics(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// A port on loopback nothing listens on over TCP now.
fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn packets_without_the_key_or_with_another_are_refused_and_counted() {
    let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let missing = common::one_call_as_hep("no-key@192.0.2.10");
    let wrong = with_key(
        &common::one_call_as_hep("wrong-key@192.0.2.10"),
        Some(b"thin-sensor-key-8"),
    );
    let prefix = with_key(
        &common::one_call_as_hep("prefix-key@192.0.2.10"),
        Some(&KEY.as_bytes()[..KEY.len() - 1]),
    );
    let right = with_key(
        &common::one_call_as_hep("right-key@192.0.2.10"),
        Some(KEY.as_bytes()),
    );
    let refused = missing.len() + wrong.len() + prefix.len();
    let total = refused + 2 * right.len();
    let listener = Listener::start(&[
        "--hep-auth-key",
        KEY,
        "--hep-max-packets",
        &total.to_string(),
        "--metrics-listen",
        &metrics_addr.to_string(),
    ]);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for p in missing.iter().chain(&wrong) {
        udp.send_to(p, listener.addr).unwrap();
    }
    // Over TCP the same check: a packet with a key one byte short.
    let mut tcp = TcpStream::connect(listener.addr).unwrap();
    tcp.write_all(&prefix.concat()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = metrics(metrics_addr);
        let auth = metric(&m, "tandem_capture_hep_refused_total{reason=\"auth\"}");
        if auth == Some(refused as u64) {
            assert_eq!(
                metric(&m, "tandem_capture_hep_packets_total{transport=\"udp\"}"),
                Some(0),
                "{m}"
            );
            assert_eq!(metric(&m, "tandem_capture_calls_total"), Some(0), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "refusals not counted: {m}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The right key is analysed, over UDP and over the same TCP connection.
    for p in &right {
        udp.send_to(p, listener.addr).unwrap();
    }
    let right_tcp = with_key(
        &common::one_call_as_hep("right-key-tcp@192.0.2.10"),
        Some(KEY.as_bytes()),
    );
    tcp.write_all(&right_tcp.concat()).unwrap();
    let (out, err) = listener.finish();
    let calls: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "call")
        .collect();
    let mut ids: Vec<&str> = calls
        .iter()
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["right-key-tcp@192.0.2.10", "right-key@192.0.2.10"],
        "{out}"
    );
    for c in &calls {
        assert_eq!(c["state"], "ended", "{c}");
        assert_eq!(c["sip_messages"], 6, "{c}");
    }
    assert!(
        err.contains(&format!("refused: {refused} for their authentication key")),
        "{err}"
    );
    assert!(err.contains("authentication key"), "{err}");
    assert!(!err.contains(KEY), "the key must not be logged: {err}");
}

/// Reads until the peer closes the connection: true when it did within 30 s.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_tcp_peer_sending_garbage_or_an_oversized_packet_is_closed_and_the_others_go_on() {
    let call = common::one_call_as_hep("survivor@192.0.2.10");
    let oversized = {
        let p = hep::decode(&call[0], &hep::DecodeLimits::default()).unwrap();
        let big = vec![b'x'; hep::DEFAULT_MAX_PAYLOAD_BYTES + 1];
        hep::HepPacket {
            payload: hep::Payload::Raw(&big),
            ..p
        }
        .to_bytes()
        .unwrap()
    };
    // The survivor's packets, and the oversized one (taken, then refused).
    let listener = Listener::start(&["--hep-max-packets", &(call.len() + 1).to_string()]);
    let mut good = TcpStream::connect(listener.addr).unwrap();
    good.write_all(&call[..3].concat()).unwrap();
    // Half a packet is kept for later: the survivor's stream is cut mid-packet while the
    // others are refused.
    let (head, tail) = call[3].split_at(10);
    good.write_all(head).unwrap();

    let mut garbage = TcpStream::connect(listener.addr).unwrap();
    let garbage_addr = garbage.local_addr().unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: collector\r\n\r\n")
        .unwrap();
    assert!(closed_by_peer(&mut garbage), "garbage did not close");

    let mut big = TcpStream::connect(listener.addr).unwrap();
    let big_addr = big.local_addr().unwrap();
    // The peer may close before the whole packet is read: a failed write is expected.
    let _ = big.write_all(&oversized);
    assert!(
        closed_by_peer(&mut big),
        "the oversized packet did not close"
    );

    good.write_all(tail).unwrap();
    good.write_all(&call[4..].concat()).unwrap();
    let (out, err) = listener.finish();
    let calls: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "call")
        .collect();
    assert_eq!(calls.len(), 1, "{out}");
    assert_eq!(calls[0]["call_id"], "survivor@192.0.2.10");
    assert_eq!(calls[0]["sip_messages"], 6, "{}", calls[0]);
    assert_eq!(calls[0]["state"], "ended");
    // Each closed connection is logged with its peer and what was wrong.
    let line_of = |peer: SocketAddr| {
        err.lines()
            .find(|l| l.contains(&peer.to_string()) && l.contains("not HEP v3; closed"))
            .unwrap_or_else(|| panic!("no line for {peer}: {err}"))
            .to_string()
    };
    assert!(line_of(garbage_addr).contains("expected \"HEP3\""), "{err}");
    assert!(
        line_of(big_addr).contains("exceeds max_payload_bytes"),
        "{err}"
    );
    assert!(err.contains("2 not HEP v3"), "{err}");
}

/// A child process killed and reaped if a test ends early.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A call that arrives as HEP, ends, and then nothing more comes: its CDR is stored, with its
/// archived SIP, and the status line says no call is active, without another packet. The
/// call's timestamps are days before the machine's clock (as from an agent whose clock is
/// off): capture time moves on from the packets' own clock.
#[test]
fn a_call_over_hep_is_stored_while_nothing_more_comes() {
    let work = tempfile::tempdir().unwrap();
    let (db, archive) = (work.path().join("cdr.sqlite3"), work.path().join("archive"));
    let mut child = tandem()
        .args(["capture", "--hep-listen", "127.0.0.1:0"])
        .args(["--status-interval-s", "1", "--cdr-db"])
        .arg(&db)
        .arg("--archive")
        .arg(&archive)
        .env("TANDEM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = common::Lines::read(child.stderr.take().unwrap());
    let mut child = Kill(child);
    let minute = Duration::from_secs(60);
    let at = err
        .wait_for(0, minute, |l| l.contains("listening for HEP v3"))
        .unwrap_or_else(|| panic!("no listening line: {}", err.text()));
    let line = err.text().lines().nth(at).unwrap().to_string();
    let port: u16 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("udp://"))
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .unwrap_or_else(|| panic!("{line}"))
        .port();
    let call_id = "quiet-after-bye@192.0.2.10";
    common::send_udp(port, &common::one_call_as_hep(call_id));
    assert!(
        err.wait_for(0, minute, |l| common::calls_active(l) == Some(1))
            .is_some(),
        "no status line counted the call: {}",
        err.text()
    );
    let stored = common::stored_then_none_active(&err, &db, 1, minute);
    let c = &stored[0];
    assert_eq!(c["call_id"], call_id);
    assert!(
        c["sip_tar"]
            .as_str()
            .is_some_and(|t| t.ends_with("2026-11-21/05/30/sip.tar")),
        "{c}"
    );
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.0.wait().unwrap().success(), "{}", err.text());
    // Six packets came, and nothing else.
    assert!(
        err.wait_for(0, minute, |l| l.starts_with("HEP: 6 packets analysed"))
            .is_some(),
        "{}",
        err.text()
    );
}

/// Worker threads hand their records out only at the end, so a live or HEP capture with
/// `--shards` above 1 would store no call before it stops: it is refused, saying what to do.
#[test]
fn a_live_capture_with_several_shards_is_refused() {
    let out = tandem()
        .args(["capture", "--hep-listen", "127.0.0.1:0", "--no-store"])
        .args(["--shards", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--shards 2 works with --read only") && err.contains("leave --shards out"),
        "{err}"
    );
}

/// `tandem serve` with a `[capture]` section does the same: a call that arrives as HEP and
/// ends is stored and archived, and the server's status line drops it, while the server runs
/// and nothing more comes.
#[test]
fn serve_stores_a_call_that_ends_while_nothing_more_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (db, archive) = (dir.path().join("cdr.sqlite3"), dir.path().join("archive"));
    let hep_port = common::free_udp_port();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "[capture]\nhep_listen = \"127.0.0.1:{hep_port}\"\ncdr_db = \"{}\"\narchive_dir = \"{}\"\nstatus_interval_s = 1\n",
            db.display(),
            archive.display()
        ),
    )
    .unwrap();
    let mut child = tandem()
        .args(["serve", "--agi-listen", "127.0.0.1:0", "--metrics-listen"])
        .args(["127.0.0.1:0", "--web-listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("TANDEM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = common::Lines::read(child.stderr.take().unwrap());
    let mut child = Kill(child);
    let minute = Duration::from_secs(60);
    assert!(
        log.wait_for(0, minute, |l| l.contains("listening for HEP v3"))
            .is_some(),
        "{}",
        log.text()
    );
    let call_id = "serve-quiet@192.0.2.10";
    common::send_udp(hep_port, &common::one_call_as_hep(call_id));
    assert!(
        log.wait_for(0, minute, |l| common::calls_active(l) == Some(1))
            .is_some(),
        "no status line counted the call: {}",
        log.text()
    );
    let stored = common::stored_then_none_active(&log, &db, 1, minute);
    assert_eq!(stored[0]["call_id"], call_id);
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.0.wait().unwrap().success(), "{}", log.text());
}
