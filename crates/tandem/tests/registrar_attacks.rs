//! The registrar of a real `tandem serve --sip-listen` under attack from loopback addresses:
//! connection floods over TCP from one address and from many, connections that never
//! register, TLS handshakes never finished, floods of garbage and REGISTERs over UDP, and credentials computed for another
//! URI. During each flood a phone on another address registers over TCP and UDP and a FastAGI
//! session finds it, and the server's peak memory stays within [`RSS_GROWTH_MAX_KIB`] of what
//! it held idle. Deadlines are generous: they say whether something happens, not how fast.

mod common;
mod registrar_common;

use registrar_common::{Phone, Tandem, agi_call, connect_from, read_response, with_user};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How much more than idle the server may hold at its peak during a flood (README,
/// "Security").
const RSS_GROWTH_MAX_KIB: u64 = 256 * 1024;
/// Long enough for anything that happens at all on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(40);
const PASSWORD: &str = "s3cret";
/// A UDP flood's pace from one address: 10,000 datagrams a second.
const UDP_FLOOD_PER_10_MS: u64 = 100;

fn closed(reason: &str) -> String {
    format!("tandem_registrar_connections_closed_total{{reason=\"{reason}\"}}")
}

/// `127.0.0.N`.
fn loopback(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// What a flood of connections came to.
struct Flood {
    /// The connections open on the client's side, silent (some reset by the server since).
    held: Vec<TcpStream>,
    /// Connections reset by the server while they were being made.
    reset: usize,
    /// Connections not made within their 2 s.
    failed: usize,
}

/// Raises this process's soft open-file limit to its hard one (a flood holds a descriptor per
/// connection; tests run at once), and requires room for `needed`.
fn raise_open_files(needed: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the one struct given, which lives here.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
    }
    assert!(
        l.rlim_cur >= needed,
        "the open-file limit ({}) is below the {needed} this flood needs: raise it (ulimit -Hn)",
        l.rlim_cur
    );
}

/// `count` TCP connections to `server` from each of `sources`, held open and silent, all
/// attempted within `DEADLINE`.
fn tcp_flood(server: SocketAddr, sources: &[IpAddr], count: usize) -> Flood {
    // The floods of the tests running at once, with room for everything else.
    raise_open_files(12_000);
    let until = Instant::now() + DEADLINE;
    let mut flood = Flood {
        held: Vec::with_capacity(sources.len() * count),
        reset: 0,
        failed: 0,
    };
    for &source in sources {
        for _ in 0..count {
            if Instant::now() > until {
                flood.failed += 1;
                continue;
            }
            match connect_from(source, server, Duration::from_secs(2)) {
                Ok(c) => flood.held.push(c),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => flood.reset += 1,
                Err(_) => flood.failed += 1,
            }
        }
    }
    flood
}

/// The phone registers over TCP (its connection kept open) and over UDP, each answered 200.
fn phone_registers(t: &Tandem, local: &str) -> TcpStream {
    let phone = Phone::new("1001", PASSWORD, local, t.sip);
    let (tcp, conn) = phone.register_tcp(DEADLINE);
    assert_eq!(
        tcp.last_status(),
        Some(200),
        "REGISTER over TCP from {local}: {:#?}\n{}",
        tcp.responses,
        t.metrics()
    );
    let udp = phone.register_udp(DEADLINE);
    assert_eq!(
        udp.last_status(),
        Some(200),
        "REGISTER over UDP from {local}: {:#?}",
        udp.responses
    );
    conn.expect("the TCP connection stays open")
}

/// A FastAGI session asks `registrar/1001` for the phone and dials what it answers.
fn fastagi_finds_the_phone(t: &Tandem) {
    let dialplan = asterisk_emu::Dialplan::load(&[(
        "extensions.conf",
        "[from-internal]\n\
         exten => _X.,1,AGI(agi://127.0.0.1/registrar/${EXTEN})\n \
         same => n,Dial(${TANDEM_CONTACTS},30)\n",
    )]);
    let (call, end) = agi_call(t, &dialplan, "1001");
    let asterisk_emu::CallEnd::Answered { dial } = &end else {
        panic!("1001 was not dialled: {end:?}\n{:#?}", call.log());
    };
    assert!(dial.starts_with("PJSIP/1001/sip:1001@127.0.0."), "{dial}");
}

/// An OPTIONS on `conn` (a phone's open connection) is answered 200.
fn options_answered(t: &Tandem, conn: &mut TcpStream, call_id: &str) {
    let options = format!(
        "OPTIONS sip:{sip} SIP/2.0\r\nVia: SIP/2.0/TCP {local};branch=z9hG4bK{call_id}\r\n\
         From: <sip:1001@tandem.test>;tag=o\r\nTo: <sip:{sip}>\r\nCall-ID: {call_id}\r\n\
         CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
        sip = t.sip,
        local = conn.local_addr().unwrap(),
    );
    conn.write_all(options.as_bytes()).unwrap();
    let answer = read_response(conn, Instant::now() + DEADLINE);
    assert!(
        answer
            .as_deref()
            .is_some_and(|a| a.starts_with("SIP/2.0 200")),
        "OPTIONS on a registered connection: {answer:?}"
    );
}

/// The server's peak memory against what it held idle.
fn memory_within_bound(t: &Tandem, idle_kib: u64) {
    let peak_kib = t.memory_kib("VmHWM");
    eprintln!(
        "serve: idle {idle_kib} KiB, peak {peak_kib} KiB (+{} KiB)",
        peak_kib.saturating_sub(idle_kib)
    );
    assert!(
        peak_kib <= idle_kib + RSS_GROWTH_MAX_KIB,
        "peak {peak_kib} KiB against {idle_kib} KiB idle"
    );
}

#[test]
fn a_tcp_flood_from_one_address_is_refused_and_phones_still_register_and_are_found() {
    let t = Tandem::serve_defaults(with_user("1001", PASSWORD));
    let idle_kib = t.memory_kib("VmRSS");
    // What locked the registrar up: 4,100 idle connections from one address.
    let flood = tcp_flood(t.sip, &[loopback(2)], 4_100);
    assert_eq!(
        flood.failed, 0,
        "every connection was accepted or reset at once"
    );
    let conn = phone_registers(&t, "127.0.0.200");
    fastagi_finds_the_phone(&t);
    // 256 were admitted (the per-address default), the rest reset when accepted.
    let refused = t.metric(&closed("address_limit"));
    assert!(refused >= (4_100 - 256) as f64, "{refused} refused");
    assert!(t.metric("tandem_registrar_connections") <= 257.0);
    memory_within_bound(&t, idle_kib);
    drop((flood, conn));
}

#[test]
fn a_tcp_flood_from_many_addresses_evicts_unregistered_connections_not_phones() {
    let t = Tandem::serve_defaults(with_user("1001", PASSWORD));
    let idle_kib = t.memory_kib("VmRSS");
    let mut registered = phone_registers(&t, "127.0.0.200");
    // 20 addresses × 256: past the total of 4,096.
    let sources: Vec<IpAddr> = (2..22).map(loopback).collect();
    let flood = tcp_flood(t.sip, &sources, 256);
    assert!(t.metric(&closed("evicted")) >= 1.0, "{}", t.metrics());
    assert!(t.metric("tandem_registrar_connections") <= 4_096.0);
    // The phone that registered before the flood keeps its connection; a new one gets in.
    options_answered(&t, &mut registered, "opt1");
    let conn = phone_registers(&t, "127.0.0.201");
    fastagi_finds_the_phone(&t);
    memory_within_bound(&t, idle_kib);
    drop((flood, conn));
}

#[test]
fn a_connection_that_never_registers_is_closed_after_the_short_idle_timeout() {
    let config = "unregistered_idle_timeout_ms = 1000\nidle_timeout_ms = 600000";
    let t = Tandem::serve(config, with_user("1001", PASSWORD));
    let mut silent = connect_from(loopback(2), t.sip, DEADLINE).unwrap();
    // A request dribbled out a byte at a time never makes a message: no activity either.
    let mut dribble = connect_from(loopback(3), t.sip, DEADLINE).unwrap();
    let registered = phone_registers(&t, "127.0.0.200");
    let started = Instant::now();
    let mut dribbled_to_the_end = true;
    for b in b"REGISTER sip:x SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.3:1\r\n".iter() {
        if dribble.write_all(&[*b]).is_err() {
            dribbled_to_the_end = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !dribbled_to_the_end,
        "the dribbling connection was never closed"
    );
    // The silent one was closed too: reading ends (rather than waiting).
    silent
        .set_read_timeout(Some(DEADLINE.saturating_sub(started.elapsed())))
        .unwrap();
    let mut byte = [0u8; 1];
    let end = std::io::Read::read(&mut silent, &mut byte);
    assert!(
        matches!(&end, Ok(0))
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the silent connection was not closed: {end:?}"
    );
    assert!(metric_becomes(&t, &closed("unregistered_idle"), 2.0));
    // The registered connection outlives the unregistered timeout.
    let mut registered = registered;
    options_answered(&t, &mut registered, "opt2");
}

/// Sends from `source` until `stop`: unparsable datagrams and REGISTERs for made-up users
/// without credentials in turn, or (`guess`) REGISTERs for 1001 with wrong credentials.
/// Returns how many it sent. Paced at [`UDP_FLOOD_PER_10_MS`] datagrams per 10 ms: a flood
/// faster than the server reads only fills the kernel's buffer, and loses the phone's datagrams
/// there whatever the server does; that contest is not what this measures.
fn udp_flood(server: SocketAddr, source: IpAddr, guess: bool, stop: &AtomicBool) -> u64 {
    let sock = UdpSocket::bind((source, 0)).unwrap();
    let local = sock.local_addr().unwrap();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = sent;
        let text = if guess {
            format!(
                "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bKg{n}\r\n\
                 From: <sip:1001@tandem.test>;tag={n}\r\nTo: <sip:1001@tandem.test>\r\n\
                 Call-ID: guess{n}\r\nCSeq: 1 REGISTER\r\nContact: <sip:x@{local}>\r\n\
                 Authorization: Digest username=\"1001\", realm=\"tandem\", nonce=\"1.2\", \
                 uri=\"sip:{server}\", response=\"00\", cnonce=\"c\", nc=00000001, qop=auth\r\n\
                 Content-Length: 0\r\n\r\n"
            )
        } else if n.is_multiple_of(2) {
            format!("\x16\x03\x01 not SIP at all {n}\r\n\r\n")
        } else {
            format!(
                "REGISTER sip:{server} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bKf{n}\r\n\
                 From: <sip:x{n}@tandem.test>;tag={n}\r\nTo: <sip:x{n}@tandem.test>\r\n\
                 Call-ID: flood{n}\r\nCSeq: 1 REGISTER\r\nContact: <sip:x@{local}>\r\n\
                 Content-Length: 0\r\n\r\n"
            )
        };
        let _ = sock.send_to(text.as_bytes(), server);
        sent += 1;
        if sent.is_multiple_of(UDP_FLOOD_PER_10_MS) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    sent
}

#[test]
fn udp_floods_of_garbage_and_registers_leave_another_phone_registering() {
    let t = Tandem::serve_defaults(with_user("1001", PASSWORD));
    let idle_kib = t.memory_kib("VmRSS");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = [(3, false), (4, true)]
        .into_iter()
        .map(|(n, guess)| {
            let (stop, sent, server) = (stop.clone(), sent.clone(), t.sip);
            std::thread::spawn(move || {
                let n = udp_flood(server, loopback(n), guess, &stop);
                sent.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let conn = phone_registers(&t, "127.0.0.200");
    fastagi_finds_the_phone(&t);
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    eprintln!(
        "{} datagrams sent by the floods",
        sent.load(Ordering::Relaxed)
    );
    // The wrong guesses got the source dropped; the made-up AORs left no entry behind.
    assert!(t.metric("tandem_registrar_dropped_total{reason=\"source_throttled\"}") >= 1.0);
    // The gauge is refreshed by the sweep, once a second.
    assert!(
        metric_becomes(&t, "tandem_registrar_aors", 1.0),
        "only 1001's AOR is kept: {}\n{:?}",
        t.metrics(),
        t.stored_bindings()
    );
    memory_within_bound(&t, idle_kib);
    drop(conn);
}

#[test]
fn credentials_for_another_uri_get_400_and_another_spelling_of_the_request_uri_passes() {
    let t = Tandem::serve_defaults(with_user("1001", PASSWORD));
    let mut phone = Phone::new("1001", PASSWORD, "127.0.0.1", t.sip);
    phone.digest_uri = Some("sip:evil.example".into());
    let seen = phone.register_udp(DEADLINE);
    let last = seen.responses.last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("SIP/2.0 400 Bad Request (digest uri is not the Request-URI)\r\n"),
        "{seen:#?}"
    );
    assert_eq!(
        t.metric("tandem_registrar_auth_failures_total{reason=\"uri_mismatch\"}"),
        1.0
    );
    assert!(t.stored_bindings().is_empty(), "nothing was bound");
    // The same URI written another way (RFC 3261 19.1.4): the scheme's case, a parameter
    // present in one only.
    phone.request_uri = Some(format!("SIP:{};x=1", t.sip));
    phone.digest_uri = Some(format!("sip:{}", t.sip));
    let seen = phone.register_udp(DEADLINE);
    assert_eq!(seen.last_status(), Some(200), "{seen:#?}");
    // Over TCP too, from another address.
    let mut phone = Phone::new("1001", PASSWORD, "127.0.0.9", t.sip);
    phone.digest_uri = Some(format!("sip:{}:5060", t.sip.ip()));
    let (seen, _) = phone.register_tcp(DEADLINE);
    assert_eq!(seen.last_status(), Some(400), "{seen:#?}");
}

/// Whether the sample `series` has `value` within [`DEADLINE`] (a close is counted after the
/// socket is closed; gauges are refreshed by the sweep).
fn metric_becomes(t: &Tandem, series: &str, value: f64) -> bool {
    let until = Instant::now() + DEADLINE;
    while t.metric(series) != value {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// Whether the server closed `conn` (it reads an end or a reset) within [`DEADLINE`].
fn closed_by_server(conn: &mut TcpStream) -> bool {
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut byte = [0u8; 1];
    match std::io::Read::read(conn, &mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

#[test]
fn tcp_and_tls_share_the_per_address_cap_and_a_handshake_never_finished_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("sip.pem"), dir.path().join("sip.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let tls = SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let config = format!(
        "tls_listen = \"{tls}\"\ntls_cert = {cert:?}\ntls_key = {key:?}\n\
         connections_per_address_max = 4\nunregistered_idle_timeout_ms = 3000"
    );
    let t = Tandem::serve(&config, with_user("1001", PASSWORD));
    // Two silent TCP connections and two silent TLS ones (no ClientHello) take the address's
    // share: a fifth, to either port, is reset when accepted.
    let mut held: Vec<TcpStream> = [t.sip, t.sip, tls, tls]
        .into_iter()
        .map(|server| connect_from(loopback(2), server, DEADLINE).unwrap())
        .collect();
    let until = Instant::now() + DEADLINE;
    while t.metric("tandem_registrar_connections") < 4.0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Reset at once: maybe before the connect returns.
    match connect_from(loopback(2), tls, DEADLINE) {
        Ok(mut fifth) => assert!(
            closed_by_server(&mut fifth),
            "the fifth connection stayed open"
        ),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(
        metric_becomes(&t, &closed("address_limit"), 1.0),
        "{}",
        t.metrics()
    );
    // The handshakes never finished and the TCP connections never registered: all closed.
    for conn in &mut held {
        assert!(closed_by_server(conn), "a silent connection stayed open");
    }
    for reason in ["tls_handshake", "unregistered_idle"] {
        assert!(metric_becomes(&t, &closed(reason), 2.0), "{}", t.metrics());
    }
    // Another address is not held to the first one's share meanwhile.
    phone_registers(&t, "127.0.0.200");
}
