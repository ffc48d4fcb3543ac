//! A webhook over https: the server's certificate is checked against the trusted ones
//! (here a throwaway certificate named by `SSL_CERT_FILE`), and a server whose certificate
//! is not trusted gets nothing.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alert_actions::{Actions, Notifier, NotifierOptions};
use alerts::ActionConfig;
use common::{Request, TempDir, alert, read_request, wait_stats};

/// An https server on loopback that answers 200 to each request and sends what it read.
fn https_server(
    certified: &rcgen::CertifiedKey<rcgen::KeyPair>,
) -> (u16, std::sync::mpsc::Receiver<Request>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            if let Some(req) = read_request(&mut tls) {
                let _ = tx.send(req);
                let _ = tls.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        }
    });
    (port, rx)
}

#[test]
fn a_webhook_over_https_checks_the_servers_certificate() {
    let dir = TempDir::new("https");
    let trusted = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let stranger = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let bundle = dir.0.join("trusted.pem");
    std::fs::write(&bundle, trusted.cert.pem()).unwrap();
    // SAFETY: this binary's only test, before it starts any thread that reads the environment.
    unsafe { std::env::set_var("SSL_CERT_FILE", &bundle) };
    let (good, requests) = https_server(&trusted);
    let (bad, strays) = https_server(&stranger);
    let hook = |port: u16| ActionConfig {
        kind: "webhook".into(),
        url: Some(format!("https://localhost:{port}/hook")),
        retries: Some(0),
        timeout_ms: Some(5000),
        ..Default::default()
    };
    let config = BTreeMap::from([
        ("good".to_string(), hook(good)),
        ("bad".to_string(), hook(bad)),
    ]);
    let notifier = Notifier::start(
        Actions::from_config(&config).unwrap(),
        NotifierOptions::default(),
    )
    .unwrap();
    let sent = alert("premium", "2001", &["good", "bad"]);
    assert!(notifier.submit(sent.clone()));
    let stats = wait_stats(&notifier, Duration::from_secs(5), |s| {
        s.actions["good"].sent == 1 && s.actions["bad"].given_up == 1
    });
    assert_eq!(stats.actions["good"].sent, 1, "{stats:?}");
    assert_eq!(stats.actions["bad"].given_up, 1, "{stats:?}");
    let got = requests.recv_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(String::from_utf8_lossy(&got.body), sent.json_line());
    assert_eq!(
        got.header("host"),
        Some(format!("localhost:{good}").as_str())
    );
    assert!(
        strays.try_recv().is_err(),
        "the untrusted server was sent the alert"
    );
    notifier.close(Instant::now() + Duration::from_secs(1));
}
