//! Transports: UDP (one socket, a large receive buffer), TCP and TLS (`streams.rs`: a task per
//! connection, messages framed by Content-Length, connection limits and idle timeouts). Every
//! message goes to [`Registrar::dispatch`]; responses go back the way the request came.

use crate::Error;
use crate::server::{Job, Registrar, ReplyTo, Transport};
use crate::streams::{Connections, StreamLimits, accept_loop};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UdpSocket};

/// Largest datagram read (a SIP message over UDP must fit a datagram; RFC 3261 18.1.1).
pub const DATAGRAM_BYTES_MAX: usize = 65_535;
/// UDP receive buffer asked of the kernel: bursts of REGISTERs wait here, not in drops.
const UDP_RECEIVE_BUFFER_BYTES: usize = 8 * 1024 * 1024;

/// Sockets bound for the registrar, before serving.
pub struct Listeners {
    pub udp: Arc<UdpSocket>,
    pub tcp: TcpListener,
    pub tls: Option<(TcpListener, tokio_rustls::TlsAcceptor)>,
}

impl Listeners {
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
            .local_addr()
            .expect("a bound socket has an address")
    }
}

/// A TLS acceptor from PEM files: the certificate chain (leaf first) and its private key.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, Error> {
    let config = tls_pem::server_config(cert, key).map_err(Error::Tls)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Binds UDP and TCP on `addr` (and TLS on `tls_addr` with `tls`). Call inside a runtime.
pub async fn bind(
    addr: SocketAddr,
    tls: Option<(SocketAddr, tokio_rustls::TlsAcceptor)>,
) -> Result<Listeners, Error> {
    let bind_err = |what: &str, a: SocketAddr, e: std::io::Error| {
        // An address in use names what holds it (Asterisk's own SIP stack, often).
        let proto = if what == "UDP" {
            procstat::Proto::Udp
        } else {
            procstat::Proto::Tcp
        };
        Error::Bind(format!(
            "SIP {what} on {a}: {}",
            procstat::name_holder(a, proto, e)
        ))
    };
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| bind_err("UDP", addr, e))?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = sock.set_recv_buffer_size(UDP_RECEIVE_BUFFER_BYTES);
    let _ = sock.set_send_buffer_size(UDP_RECEIVE_BUFFER_BYTES);
    sock.set_nonblocking(true)
        .map_err(|e| bind_err("UDP", addr, e))?;
    sock.bind(&addr.into())
        .map_err(|e| bind_err("UDP", addr, e))?;
    let udp = UdpSocket::from_std(sock.into()).map_err(|e| bind_err("UDP", addr, e))?;
    // TCP on the same port as UDP, as SIP phones expect (an ephemeral UDP port is reused).
    let tcp_addr = udp.local_addr().map_err(|e| bind_err("UDP", addr, e))?;
    let tcp = TcpListener::bind(tcp_addr)
        .await
        .map_err(|e| bind_err("TCP", tcp_addr, e))?;
    let tls = match tls {
        Some((a, acceptor)) => Some((
            TcpListener::bind(a)
                .await
                .map_err(|e| bind_err("TLS", a, e))?,
            acceptor,
        )),
        None => None,
    };
    Ok(Listeners {
        udp: Arc::new(udp),
        tcp,
        tls,
    })
}

/// Serves the listeners until `stop` resolves; sweeps expiries every second.
pub async fn serve(
    registrar: Arc<Registrar>,
    listeners: Listeners,
    limits: StreamLimits,
    stop: impl std::future::Future<Output = ()>,
) {
    let Listeners { udp, tcp, tls } = listeners;
    let table = Connections::new(limits, registrar.metrics.clone());
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(udp_loop(registrar.clone(), udp));
    tasks.spawn(accept_loop(registrar.clone(), tcp, None, table.clone()));
    if let Some((l, acceptor)) = tls {
        tasks.spawn(accept_loop(registrar.clone(), l, Some(acceptor), table));
    }
    let sweeper = registrar.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            sweeper.sweep().await;
        }
    });
    stop.await;
    // Waits for every task to end, so the registrar (and its hold on the store) goes with them:
    // first the readers and the sweep, then the REGISTERs already queued, which commit and are
    // answered (bounded: a store that no longer completes a commit does not hold the stop).
    tasks.shutdown().await;
    if tokio::time::timeout(DRAIN_ON_STOP, registrar.drained())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_ms = DRAIN_ON_STOP.as_millis() as u64,
            "REGISTERs still being committed when the registrar stopped"
        );
    }
}

/// How long a stopping registrar waits for the REGISTERs it already took to be committed and
/// answered.
const DRAIN_ON_STOP: Duration = Duration::from_secs(10);

async fn udp_loop(registrar: Arc<Registrar>, sock: Arc<UdpSocket>) {
    let mut buf = vec![0u8; DATAGRAM_BYTES_MAX];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(v) => v,
            Err(e) => {
                // ICMP errors of earlier sends surface here on Linux; they end nothing.
                tracing::debug!(error = %e, "SIP UDP receive error");
                continue;
            }
        };
        let bytes = &buf[..n];
        if bytes.iter().all(|&b| b == b'\r' || b == b'\n' || b == 0) {
            continue; // keep-alive
        }
        registrar.dispatch(Job::new(
            bytes.to_vec(),
            from,
            Transport::Udp,
            ReplyTo::Udp(sock.clone()),
        ));
    }
}
