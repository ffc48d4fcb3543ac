//! The registrar over a real UDP socket and a real store: a binding acknowledged with 200 is in
//! the store, survives a restart with its remaining time, lapses on the timer wheel, and the
//! per-AOR order holds for a burst of refreshes.

use registrar::{Config, Registrar, StreamLimits};
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

fn register(
    user: &str,
    call_id: &str,
    cseq: u32,
    contact: &str,
    expires: u32,
    branch: &str,
) -> String {
    format!(
        "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK{branch}\r\n\
         From: <sip:{user}@example.com>;tag=f\r\nTo: <sip:{user}@example.com>\r\nCall-ID: {call_id}\r\n\
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
    let dir = tempfile::tempdir().unwrap();
    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let Running {
        reg,
        addr,
        stop: _serving,
        ..
    } = start(&store, no_auth()).await;
    let phone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let r = exchange(
        &phone,
        addr,
        &register("1002", "c2", 1, "sip:1002@192.0.2.11", 1, "b"),
    )
    .await;
    assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
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
    let dir = tempfile::tempdir().unwrap();
    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let Running {
        reg,
        addr,
        stop: _serving,
        ..
    } = start(&store, no_auth()).await;
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
