//! One single-threaded tokio runtime per worker thread, each accepting on its own listening
//! socket bound with `SO_REUSEPORT`, so the kernel spreads connections across workers and a
//! session lives its whole life on one thread: no work stealing, no cross-thread wake-ups.

use std::net::SocketAddr;

/// A listening socket that other workers can bind to the same address (`SO_REUSEPORT`).
pub fn reuseport_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Worker threads to run: `configured`, or one per CPU the process may use when 0.
pub fn worker_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
