//! HEP v3 as a real sender writes it: Kamailio's `siptrace` module (Debian's `kamailio`
//! package) mirroring a SIP request to a collector. One packet it sent is kept as a fixture; the
//! live test starts Kamailio and skips with a message if it is not installed.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hep::{DecodeLimits, Payload, ProtocolType, decode};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Sent by Kamailio 5.6.3 for an OPTIONS from 127.0.0.1:58945 to its port 35060, with
/// `hep_capture_id` 2001.
#[test]
fn kamailio_fixture_decodes_and_reencodes_byte_exact() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/kamailio-5.6.3-siptrace-options.hep"),
    )
    .unwrap();
    let p = decode(&bytes, &DecodeLimits::default()).unwrap();
    assert_eq!((p.src_ip, p.dst_ip), (LOCALHOST, LOCALHOST));
    assert_eq!((p.src_port, p.dst_port), (58945, 35060));
    assert_eq!(p.ip_protocol, 17);
    assert_eq!((p.ts_sec, p.ts_usec), (0x6b01_52af, 450_417));
    assert_eq!(p.protocol_type, ProtocolType::SIP);
    assert_eq!(p.capture_id, 2001);
    assert_eq!(
        (p.keep_alive_timer, p.auth_key, p.correlation_id),
        (None, None, None)
    );
    let Payload::Raw(sip) = p.payload else {
        panic!("raw payload expected")
    };
    assert!(sip.starts_with(b"OPTIONS sip:ping@127.0.0.1:35060 SIP/2.0\r\n"));
    assert!(sip.ends_with(b"Content-Length: 0\r\n\r\n"));
    // Kamailio writes the chunks in type order, as the encoder does: the same bytes.
    assert_eq!(p.to_bytes().unwrap(), bytes);
}

struct Kamailio(Child);

impl Drop for Kamailio {
    fn drop(&mut self) {
        // SIGTERM to the main process, which stops its workers; then reap it.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn live_kamailio_siptrace_hep_v3_decodes() {
    let Some(modules) = [
        "/usr/lib/x86_64-linux-gnu/kamailio/modules",
        "/usr/lib/kamailio/modules",
    ]
    .into_iter()
    .find(|d| Path::new(d).join("siptrace.so").exists()) else {
        test_env::skip("Kamailio's siptrace module is not installed (Debian package `kamailio`)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hep_port = collector.local_addr().unwrap().port();
    let sip_port = free_udp_port();
    let cfg = format!(
        "#!KAMAILIO\n\
         debug=2\nlog_stderror=yes\nchildren=1\nauto_aliases=no\n\
         listen=udp:127.0.0.1:{sip_port}\n\
         mpath=\"{modules}/\"\n\
         loadmodule \"tm.so\"\nloadmodule \"sl.so\"\nloadmodule \"siptrace.so\"\n\
         modparam(\"siptrace\", \"duplicate_uri\", \"sip:127.0.0.1:{hep_port}\")\n\
         modparam(\"siptrace\", \"hep_mode_on\", 1)\n\
         modparam(\"siptrace\", \"hep_version\", 3)\n\
         modparam(\"siptrace\", \"hep_capture_id\", 4242)\n\
         modparam(\"siptrace\", \"trace_to_database\", 0)\n\
         modparam(\"siptrace\", \"trace_on\", 1)\n\
         request_route {{\n    sip_trace();\n    sl_send_reply(\"200\", \"OK\");\n}}\n"
    );
    let cfg_path = tmp.path().join("kamailio.cfg");
    std::fs::write(&cfg_path, cfg).unwrap();
    let child = Command::new("kamailio")
        .arg("-f")
        .arg(&cfg_path)
        .args(["-DD", "-E", "-Y"])
        .arg(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        test_env::skip("`kamailio` could not be started");
        return;
    };
    let _kamailio = Kamailio(child);

    let ua = UdpSocket::bind("127.0.0.1:0").unwrap();
    let ua_port = ua.local_addr().unwrap().port();
    ua.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let options = format!(
        "OPTIONS sip:ping@127.0.0.1:{sip_port} SIP/2.0\r\n\
         Via: SIP/2.0/UDP 127.0.0.1:{ua_port};branch=z9hG4bK-tandem-1;rport\r\n\
         Max-Forwards: 70\r\nFrom: <sip:t@127.0.0.1>;tag=1\r\nTo: <sip:ping@127.0.0.1>\r\n\
         Call-ID: hep-live-1@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    );
    // Kamailio takes a moment to start listening: resend until it answers.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = [0u8; 65_535];
    loop {
        assert!(
            Instant::now() < deadline,
            "Kamailio did not answer on port {sip_port}"
        );
        ua.send_to(options.as_bytes(), ("127.0.0.1", sip_port))
            .unwrap();
        if let Ok(n) = ua.recv(&mut buf) {
            assert!(buf[..n].starts_with(b"SIP/2.0 200 OK"));
            break;
        }
    }

    collector
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = collector
        .recv(&mut buf)
        .expect("a HEP packet from siptrace");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    let p = decode(&buf[..n], &DecodeLimits::default()).unwrap();
    assert_eq!((p.src_ip, p.src_port), (LOCALHOST, ua_port));
    assert_eq!((p.dst_ip, p.dst_port), (LOCALHOST, sip_port));
    assert_eq!(p.ip_protocol, 17);
    assert_eq!(p.protocol_type, ProtocolType::SIP);
    assert_eq!(p.capture_id, 4242);
    assert!(p.ts_sec.abs_diff(now) < 60 && p.ts_usec < 1_000_000);
    assert_eq!(p.payload, Payload::Raw(options.as_bytes()));
    assert_eq!(p.to_bytes().unwrap(), &buf[..n]);
}
