//! The registrar over a real UDP socket and a real store: a binding acknowledged with 200 is in
//! the store, survives a restart with its remaining time, lapses on the timer wheel, and the
//! per-AOR order holds for a burst of refreshes.

use registrar::{Config, Found, Registrar, StreamLimits};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;

fn no_auth() -> Config {
    Config {
        algorithms: Vec::new(),
        min_expires_s: 1,
        ..Config::default()
    }
}

struct Running {
    reg: Arc<Registrar>,
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops serving and lets go of the store, as a stopping `tandem serve` does.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
        assert_eq!(
            Arc::strong_count(&self.reg),
            1,
            "nothing else holds the registrar"
        );
    }
}

async fn start(store: &kv::Store, config: Config) -> Running {
    let reg = Registrar::open(store, config).unwrap();
    let listeners = registrar::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let addr = listeners.udp_addr();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let limits = StreamLimits {
        connections_max: 16,
        idle_timeout_ms: 10_000,
        ..StreamLimits::default()
    };
    let task = tokio::spawn(registrar::serve(reg.clone(), listeners, limits, async {
        let _ = rx.await;
    }));
    Running {
        reg,
        addr,
        stop: tx,
        task,
    }
}

/// A registrar serving on a store of its own in a new directory.
async fn fresh(config: Config) -> (tempfile::TempDir, kv::Store, Running) {
    let dir = tempfile::tempdir().unwrap();
    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let running = start(&store, config).await;
    (dir, store, running)
}

fn register(
    user: &str,
    call_id: &str,
    cseq: u32,
    contact: &str,
    expires: u32,
    branch: &str,
) -> String {
    register_in("example.com", user, call_id, cseq, contact, expires, branch)
}

fn register_in(
    domain: &str,
    user: &str,
    call_id: &str,
    cseq: u32,
    contact: &str,
    expires: u32,
    branch: &str,
) -> String {
    format!(
        "REGISTER sip:{domain} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK{branch}\r\n\
         From: <sip:{user}@{domain}>;tag=f\r\nTo: <sip:{user}@{domain}>\r\nCall-ID: {call_id}\r\n\
         CSeq: {cseq} REGISTER\r\nContact: <{contact}>;expires={expires}\r\nContent-Length: 0\r\n\r\n"
    )
}

async fn exchange(sock: &UdpSocket, to: SocketAddr, text: &str) -> String {
    sock.send_to(text.as_bytes(), to).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), sock.recv_from(&mut buf))
        .await
        .expect("a response within 10 s")
        .unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

/// Sends `text` and requires a 200 OK.
async fn accepted(sock: &UdpSocket, to: SocketAddr, text: &str) {
    let r = exchange(sock, to, text).await;
    assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_binding_survives_a_restart_with_its_remaining_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let first = start(&store, no_auth()).await;
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let r = exchange(
        &phone,
        first.addr,
        &register("1001", "c1", 1, "sip:1001@192.0.2.10:5060", 600, "a"),
    )
    .await;
    assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
    assert!(
        r.contains("Contact: <sip:1001@192.0.2.10:5060>;expires=600\r\n"),
        "{r}"
    );
    first.stop().await;
    drop(store);

    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let second = start(&store, no_auth()).await;
    let found = second.reg.lookup("1001@example.com");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].uri, "sip:1001@192.0.2.10:5060");
    let left = found[0].remaining_s(registrar::now_ms());
    assert!((590..=600).contains(&left), "{left} s left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_binding_is_swept_from_memory_and_store() {
    let (_dir, store, serving) = fresh(no_auth()).await;
    let (reg, addr) = (serving.reg.clone(), serving.addr);
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    accepted(
        &phone,
        addr,
        &register("1002", "c2", 1, "sip:1002@192.0.2.11", 1, "b"),
    )
    .await;
    assert_eq!(reg.lookup("sip:1002@example.com").len(), 1);
    let ns = store.namespace("registrar").unwrap();
    for _ in 0..100 {
        if ns.get("aor", "sip:1002@example.com").unwrap().is_none()
            && reg.location().stats().aors == 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reg.lookup("sip:1002@example.com").is_empty());
    assert!(
        ns.get("aor", "sip:1002@example.com").unwrap().is_none(),
        "the store forgets it too"
    );
    assert_eq!(
        reg.location().stats().aors,
        0,
        "and the AOR's entry is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_refreshes_for_one_aor_is_applied_in_order() {
    let (_dir, _store, serving) = fresh(no_auth()).await;
    let (reg, addr) = (serving.reg.clone(), serving.addr);
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    // 50 refreshes sent back to back, each a higher CSeq and a longer expiry: if any overtook
    // another, the older one would get 400 and the binding would not end on the last expiry.
    for cseq in 1..=50u32 {
        let text = register(
            "1003",
            "c3",
            cseq,
            "sip:1003@192.0.2.12:5062",
            100 + cseq,
            &format!("c{cseq}"),
        );
        phone.send_to(text.as_bytes(), addr).await.unwrap();
    }
    let mut buf = vec![0u8; 65_535];
    for _ in 0..50 {
        let (n, _) = tokio::time::timeout(Duration::from_secs(10), phone.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let r = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
    }
    let found = reg.lookup("sip:1003@example.com");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].cseq, 50);
    assert!(found[0].remaining_s(registrar::now_ms()) > 140);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_user_finds_the_one_domain_it_is_bound_in_and_says_when_there_are_several() {
    // `domains = []`, the default: a phone registers in whatever domain it was given.
    let (_dir, _store, serving) = fresh(no_auth()).await;
    let (reg, addr) = (serving.reg.clone(), serving.addr);
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let contact = "sip:1001@192.0.2.20:5060";
    accepted(
        &phone,
        addr,
        &register_in("192.0.2.1", "1001", "u1", 1, contact, 600, "u1"),
    )
    .await;
    let found = reg.find("1001");
    let Found::Aor { aor, bindings } = &found else {
        panic!("{found:?}")
    };
    assert_eq!(aor, "sip:1001@192.0.2.1");
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0].uri, contact);
    assert_eq!(reg.lookup("1001").len(), 1);
    assert_eq!(reg.find("1002"), Found::Nothing);

    // The same user in a second domain: a bare user no longer says which.
    let other = "sip:1001@198.51.100.9:5060";
    accepted(
        &phone,
        addr,
        &register_in("pbx.example", "1001", "u2", 1, other, 600, "u2"),
    )
    .await;
    assert_eq!(
        reg.find("1001"),
        Found::Ambiguous {
            user: "1001".into(),
            domains: vec!["192.0.2.1".into(), "pbx.example".into()],
            bound_domains: 2,
        }
    );
    assert!(reg.lookup("1001").is_empty());
    assert_eq!(reg.lookup("1001@pbx.example")[0].uri, other);

    // Once one domain's binding is gone, the other is the user's again.
    accepted(
        &phone,
        addr,
        &register_in("pbx.example", "1001", "u2", 2, other, 0, "u3"),
    )
    .await;
    assert_eq!(reg.lookup("1001")[0].uri, contact);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_user_is_the_user_in_the_one_domain_served() {
    let config = Config {
        domains: vec!["Example.com".into()],
        ..no_auth()
    };
    let (_dir, _store, serving) = fresh(config).await;
    let (reg, addr) = (serving.reg.clone(), serving.addr);
    assert_eq!(
        reg.find("1001"),
        Found::Aor {
            aor: "sip:1001@example.com".into(),
            bindings: Vec::new()
        }
    );
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    accepted(
        &phone,
        addr,
        &register("1001", "d1", 1, "sip:1001@192.0.2.21", 600, "d1"),
    )
    .await;
    assert_eq!(reg.lookup("1001")[0].uri, "sip:1001@192.0.2.21");
}

/// A phone that sends its display name in Latin-1 (older firmware does) registers like any
/// other: its REGISTER is not dropped as unparsable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_register_with_a_latin1_display_name_is_served() {
    let (_dir, _store, running) = fresh(no_auth()).await;
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let text = register("1001", "latin1", 1, "sip:1001@192.0.2.10:5060", 600, "l1")
        .replace("From: <", "From: \"M\u{fc}ller\" <");
    // As the phone puts it on the wire: ü as the one byte 0xFC.
    let mut bytes = text.into_bytes();
    let at = bytes.windows(2).position(|w| w == "ü".as_bytes()).unwrap();
    bytes.splice(at..at + 2, [0xfc]);
    phone.send_to(&bytes, running.addr).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), phone.recv_from(&mut buf))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let r = String::from_utf8_lossy(&buf[..n]);
    assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
    assert_eq!(running.reg.lookup("1001@example.com").len(), 1);
}
