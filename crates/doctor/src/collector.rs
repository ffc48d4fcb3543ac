//! The collector a sensor delivers to (`[capture] collector`): it is reached over TCP within the
//! timeout, and, with a CA certificate configured, a TLS handshake completes with the
//! collector's certificate checked against it for the expected name (and the client
//! certificate offered, for mutual TLS). Without a CA the sensor sends in clear to loopback
//! only, so an address off loopback is a failure. Nothing is sent after the handshake: the
//! collector sees a connection that closes before its Hello.

use crate::account::{Account, READ};
use crate::{Finding, within};
use rustls::pki_types::ServerName;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const GROUP: &str = "collector";

/// How the sensor reaches its collector, as `[capture]` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectorTarget {
    /// `HOST:PORT`.
    pub addr: String,
    /// The collector's CA certificate (PEM): TLS. None: plain TCP, loopback only.
    pub ca_file: Option<PathBuf>,
    /// The name the collector's certificate must carry; None: HOST of `addr`.
    pub server_name: Option<String>,
    /// A client certificate and key for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// HOST of `HOST:PORT` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Reaches the collector (and shakes hands over TLS when configured).
pub fn check_collector(t: &CollectorTarget, timeout: Duration) -> Finding {
    let check = format!("reach {}", t.addr);
    let target = t.clone();
    // Resolving, connecting and the handshake each within `timeout`: three of them at most.
    match within(timeout * 3, move || reach(&target, timeout)) {
        Some(Ok(found)) => Finding::ok(GROUP, check, found),
        Some(Err((found, fix))) => Finding::fail(GROUP, check, found, fix),
        None => Finding::fail(
            GROUP,
            check,
            format!("no answer within {} ms", (timeout * 3).as_millis()),
            "check the name resolves (`getent hosts HOST`) and that a firewall lets this host reach the collector's port",
        ),
    }
}

type Failure = (String, String);

fn reach(t: &CollectorTarget, timeout: Duration) -> Result<String, Failure> {
    let setting_fix =
        "set [capture] collector to the collector's HOST:PORT (its [collector] listen)";
    let addrs: Vec<SocketAddr> = t
        .addr
        .to_socket_addrs()
        .map_err(|e| {
            (
                format!("cannot resolve {}: {e}", t.addr),
                setting_fix.to_string(),
            )
        })?
        .collect();
    if t.ca_file.is_none() && !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err((
            "no collector_ca: the sensor sends in clear to a loopback collector only".into(),
            "set [capture] collector_ca to the collector's CA certificate (PEM)".into(),
        ));
    }
    let mut last = format!("{} resolves to no address", t.addr);
    let mut tcp = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => {
                tcp = Some((s, *a));
                break;
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    let (mut tcp, peer) = tcp.ok_or_else(|| {
        (
            last,
            "check that the collector runs (tandem serve with [collector] listen) and that a \
             firewall lets this host reach its port"
                .to_string(),
        )
    })?;
    let Some(ca) = &t.ca_file else {
        return Ok(format!("connected to {peer} (plain TCP, loopback)"));
    };
    let client = t
        .client_cert
        .as_ref()
        .map(|(c, k)| (c.as_path(), k.as_path()));
    let config = tls_pem::client_config(ca, client).map_err(|e| {
        (
            e,
            "give [capture] collector_ca, sensor_cert and sensor_key readable PEM files"
                .to_string(),
        )
    })?;
    let name = t
        .server_name
        .clone()
        .unwrap_or_else(|| host_of(&t.addr).to_string());
    let server_name = ServerName::try_from(name.clone()).map_err(|e| {
        (
            format!("{name:?} is not a name a certificate can carry: {e}"),
            "set [capture] collector_server_name to the name in the collector's certificate"
                .to_string(),
        )
    })?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server_name)
        .map_err(|e| (e.to_string(), String::new()))?;
    let _ = tcp.set_read_timeout(Some(timeout));
    let _ = tcp.set_write_timeout(Some(timeout));
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            return Err((
                format!("TLS handshake with {peer} failed: {e}"),
                format!(
                    "the collector's certificate must be signed by {} and carry the name {name:?} \
                     (else set [capture] collector_server_name)",
                    ca.display()
                ),
            ));
        }
    }
    let version = conn
        .protocol_version()
        .map_or("TLS".to_string(), |v| format!("{v:?}").replace('_', "."));
    Ok(format!(
        "connected to {peer}; {version} handshake done, certificate for {name:?} verified by {}",
        ca.display()
    ))
}

/// The sensor's token file: the service's user reads a non-empty first line from it.
pub fn check_token_file(path: &Path, user: &Account, sensor: &str) -> Finding {
    let check = format!("token file {}", path.display());
    let fix_add = format!(
        "on the collector: tandem sensor add {sensor}; put the token it prints in {}",
        path.display()
    );
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Finding::fail(GROUP, check, format!("cannot be read: {e}"), fix_add),
    };
    if !user.may(&meta, READ) {
        return Finding::fail(
            GROUP,
            check,
            format!(
                "{} may not read it ({})",
                user.name,
                crate::account::describe(&meta)
            ),
            format!(
                "chown {} {} && chmod 0600 {}",
                user.name,
                path.display(),
                path.display()
            ),
        );
    }
    // The token is one line: the first 64 KiB hold it.
    let mut raw = Vec::new();
    let _ = std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 64 << 10), &mut raw));
    let text = String::from_utf8_lossy(&raw);
    let first = text.lines().next().unwrap_or("").trim();
    if first.is_empty() {
        return Finding::fail(GROUP, check, "is empty", fix_add);
    }
    Finding::ok(
        GROUP,
        check,
        format!("readable by {}, holds a token", user.name),
    )
}
