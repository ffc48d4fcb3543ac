//! `registrar/{aor}` as the dialplan sees it: a phone registers two contacts over UDP with
//! different q-values, and an Asterisk session on the route gets them as one dial string,
//! highest q first; an AOR with no binding gets a count of 0.

use asterisk_emu::{AgiStatus, Plan};
use std::sync::Arc;
use std::time::Duration;

fn set_to<'a>(o: &'a asterisk_emu::Outcome, var: &str) -> Option<&'a str> {
    let prefix = format!("SET VARIABLE {var} ");
    o.exchanges
        .iter()
        .find_map(|(cmd, _)| cmd.strip_prefix(prefix.as_str()))
}

#[tokio::test]
async fn a_registered_user_is_a_dial_string_in_q_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = kv::Store::open_dir(dir.path(), kv::Options::default()).unwrap();
    let config = registrar::Config {
        algorithms: Vec::new(),
        domains: vec!["pbx.example.com".into()],
        ..registrar::Config::default()
    };
    let reg = registrar::Registrar::open(&store, config).unwrap();
    let listeners = registrar::bind("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let sip_addr = listeners.udp_addr();
    let limits = registrar::StreamLimits {
        connections_max: 4,
        idle_timeout_ms: 10_000,
    };
    tokio::spawn(registrar::serve(
        reg.clone(),
        listeners,
        limits,
        std::future::pending(),
    ));

    let phone = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let register = "REGISTER sip:pbx.example.com SIP/2.0\r\n\
        Via: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bKq1\r\n\
        From: <sip:1001@pbx.example.com>;tag=f\r\nTo: <sip:1001@pbx.example.com>\r\n\
        Call-ID: q1\r\nCSeq: 1 REGISTER\r\n\
        Contact: <sip:1001@192.0.2.10:5060>;q=0.4, <sip:1001@198.51.100.7:5062;transport=tcp>;q=0.9\r\n\
        Content-Length: 0\r\n\r\n";
    phone.send_to(register.as_bytes(), sip_addr).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(10), phone.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(buf[..n].starts_with(b"SIP/2.0 200 OK\r\n"));

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
    let (_stop, rx) = fastagi::shutdown_channel();
    tokio::spawn(server.run(rx));

    let plan = Plan {
        idle_timeout: Duration::from_secs(10),
        ..Plan::route("registrar/1001")
    };
    let o = asterisk_emu::run(agi_addr, &plan, 1).await.unwrap();
    assert_eq!(o.status, AgiStatus::Success, "{o:?}");
    assert_eq!(
        set_to(&o, "TANDEM_CONTACTS"),
        Some(
            "PJSIP/1001/sip:1001@198.51.100.7:5062;transport=tcp&PJSIP/1001/sip:1001@192.0.2.10:5060"
        )
    );
    assert_eq!(set_to(&o, "TANDEM_CONTACT_COUNT"), Some("2"));

    let o = asterisk_emu::run(
        agi_addr,
        &Plan {
            idle_timeout: Duration::from_secs(10),
            ..Plan::route("registrar/1002")
        },
        2,
    )
    .await
    .unwrap();
    assert_eq!(set_to(&o, "TANDEM_CONTACT_COUNT"), Some("0"), "{o:?}");
    assert_eq!(set_to(&o, "TANDEM_CONTACTS"), Some("\"\""), "{o:?}");
}
