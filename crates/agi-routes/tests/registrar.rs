//! `registrar/{aor}` as the dialplan sees it: a phone registers two contacts over UDP with
//! different q-values, and an Asterisk session on the route gets them as one dial string,
//! highest q first; an AOR with no binding gets a count of 0; with every domain served, a bare
//! user finds the one domain it is bound in, and one bound in two gets their names.

use asterisk_emu::{AgiStatus, Plan};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

fn set_to<'a>(o: &'a asterisk_emu::Outcome, var: &str) -> Option<&'a str> {
    let prefix = format!("SET VARIABLE {var} ");
    o.exchanges
        .iter()
        .find_map(|(cmd, _)| cmd.strip_prefix(prefix.as_str()))
}

/// A registrar with `config` on a UDP port and a FastAGI server with `registrar/{aor}`:
/// (the SIP address, the AGI address).
async fn serve(config: registrar::Config) -> (SocketAddr, SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let reg = registrar::Registrar::open(&store, config).unwrap();
    let listeners = registrar::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let sip_addr = listeners.udp_addr();
    let limits = registrar::StreamLimits {
        connections_max: 4,
        idle_timeout_ms: 10_000,
        ..registrar::StreamLimits::default()
    };
    tokio::spawn(registrar::serve(
        reg.clone(),
        listeners,
        limits,
        std::future::pending(),
    ));
    let agi = fastagi::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        close_linger_ms: 500,
        ..fastagi::ServerConfig::default()
    };
    let router = agi_routes::registrar::add(fastagi::Router::new(), reg).unwrap();
    let server =
        fastagi::Server::bind(agi, router, Arc::new(fastagi::Metrics::unregistered())).unwrap();
    let agi_addr = server.local_addr();
    let (stop, rx) = fastagi::shutdown_channel();
    // The server runs until the test ends.
    std::mem::forget(stop);
    tokio::spawn(server.run(rx));
    (sip_addr, agi_addr, dir)
}

/// Sends `register` from a phone's socket and requires a 200.
async fn registered(sip_addr: SocketAddr, register: &str) {
    let phone = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    phone.send_to(register.as_bytes(), sip_addr).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), phone.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let r = String::from_utf8_lossy(&buf[..n]);
    assert!(r.starts_with("SIP/2.0 200 OK\r\n"), "{r}");
}

fn register(user: &str, domain: &str, call_id: &str, contacts: &str) -> String {
    format!(
        "REGISTER sip:{domain} SIP/2.0\r\n\
        Via: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK{call_id}\r\n\
        From: <sip:{user}@{domain}>;tag=f\r\nTo: <sip:{user}@{domain}>\r\n\
        Call-ID: {call_id}\r\nCSeq: 1 REGISTER\r\nContact: {contacts}\r\n\
        Content-Length: 0\r\n\r\n"
    )
}

async fn lookup(agi_addr: SocketAddr, route: &str, seq: u64) -> asterisk_emu::Outcome {
    let plan = Plan {
        idle_timeout: Duration::from_secs(10),
        ..Plan::route(route)
    };
    let o = asterisk_emu::run(agi_addr, &plan, seq).await.unwrap();
    assert_eq!(o.status, AgiStatus::Success, "{o:?}");
    o
}

#[tokio::test]
async fn a_registered_user_is_a_dial_string_in_q_order() {
    let config = registrar::Config {
        algorithms: Vec::new(),
        domains: vec!["pbx.example.com".into()],
        ..registrar::Config::default()
    };
    let (sip_addr, agi_addr, _dir) = serve(config).await;
    let contacts =
        "<sip:1001@192.0.2.10:5060>;q=0.4, <sip:1001@198.51.100.7:5062;transport=tcp>;q=0.9";
    registered(
        sip_addr,
        &register("1001", "pbx.example.com", "q1", contacts),
    )
    .await;

    let o = lookup(agi_addr, "registrar/1001", 1).await;
    assert_eq!(
        set_to(&o, "TANDEM_CONTACTS"),
        Some(
            "PJSIP/1001/sip:1001@198.51.100.7:5062;transport=tcp&PJSIP/1001/sip:1001@192.0.2.10:5060"
        )
    );
    assert_eq!(set_to(&o, "TANDEM_CONTACT_COUNT"), Some("2"));

    let o = lookup(agi_addr, "registrar/1002", 2).await;
    assert_eq!(set_to(&o, "TANDEM_CONTACT_COUNT"), Some("0"), "{o:?}");
    assert_eq!(set_to(&o, "TANDEM_CONTACTS"), Some("\"\""), "{o:?}");
    assert_eq!(set_to(&o, "TANDEM_AMBIGUOUS"), Some("\"\""), "{o:?}");
}

#[tokio::test]
async fn with_every_domain_served_a_bare_user_finds_its_one_domain_or_names_them_all() {
    // `domains = []`, the default: the phone registers in the domain it was given.
    let config = registrar::Config {
        algorithms: Vec::new(),
        ..registrar::Config::default()
    };
    let (sip_addr, agi_addr, _dir) = serve(config).await;
    let phone = "<sip:1001@192.0.2.10:5060>";
    registered(sip_addr, &register("1001", "192.0.2.1", "d1", phone)).await;
    let o = lookup(agi_addr, "registrar/1001", 1).await;
    assert_eq!(
        set_to(&o, "TANDEM_CONTACTS"),
        Some("PJSIP/1001/sip:1001@192.0.2.10:5060")
    );
    assert_eq!(set_to(&o, "TANDEM_CONTACT_COUNT"), Some("1"));
    assert_eq!(set_to(&o, "TANDEM_AMBIGUOUS"), Some("\"\""));

    registered(
        sip_addr,
        &register("1001", "pbx.example", "d2", "<sip:1001@192.0.2.11>"),
    )
    .await;
    let o = lookup(agi_addr, "registrar/1001", 2).await;
    assert_eq!(set_to(&o, "TANDEM_CONTACT_COUNT"), Some("0"), "{o:?}");
    assert_eq!(
        set_to(&o, "TANDEM_AMBIGUOUS"),
        Some("\"192.0.2.1 pbx.example\""),
        "{o:?}"
    );
    // Asked with its domain, each AOR is found.
    let o = lookup(agi_addr, "registrar/1001@pbx.example", 3).await;
    assert_eq!(
        set_to(&o, "TANDEM_CONTACTS"),
        Some("PJSIP/1001/sip:1001@192.0.2.11")
    );
}
