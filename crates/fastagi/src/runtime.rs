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

/// Refuses a port that a listening socket outside `ours` also takes connections on. Workers
/// bind with `SO_REUSEPORT`, so a second server started on the same address by the same user
/// binds without error, and the kernel would split Asterisk's sessions between the two
/// processes; checked after binding, so two servers starting at once both see each other.
pub fn refuse_shared_port(addr: SocketAddr, ours: &[std::net::TcpListener]) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let mine: Vec<u64> = ours
        .iter()
        .filter_map(|l| procstat::socket_inode(l.as_fd()))
        .collect();
    if mine.len() != ours.len() {
        return Ok(()); // no /proc: nothing to compare with
    }
    let other = procstat::tcp_listeners_on_port(addr.port())
        .into_iter()
        .find(|e| !mine.contains(&e.inode) && procstat::listen_addrs_overlap(e.local, addr));
    match other {
        None => Ok(()),
        Some(e) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!(
                "another process is already listening on {} ({}); two FastAGI servers on one \
                 port would split Asterisk's sessions between them",
                e.local,
                procstat::holder_text(e.inode)
            ),
        )),
    }
}

/// Fails when something already listens on `addr`, naming it; for a caller that would otherwise
/// create state (a data directory) before binding. The bind that follows checks again.
pub fn check_listen_free(addr: SocketAddr) -> std::io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    std::net::TcpListener::bind(addr)
        .map(drop)
        .map_err(|e| listen_error(addr, e))
}

/// `cannot listen on ADDR: WHY`, and who holds the port when it is in use.
pub fn listen_error(addr: SocketAddr, e: std::io::Error) -> std::io::Error {
    let e = procstat::name_holder(addr, procstat::Proto::Tcp, e);
    std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
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

/// File descriptors left for everything but sessions when `max_sessions` is sized from the
/// limit: listeners, the store's database and WAL, capture sockets and files, HTTP clients.
pub const FDS_RESERVED: u64 = 512;
/// File descriptors one session may hold: its socket, plus the three pipes of a legacy script.
pub const FDS_PER_SESSION: u64 = 4;
/// The least `max_sessions` sized from the limit, whatever the limit.
pub const MIN_SIZED_SESSIONS: usize = 1_024;
/// The most `max_sessions` sized from the limit: an unlimited or huge descriptor limit must not
/// turn into a promise the memory cannot keep (see README, "What a session costs").
pub const MAX_SIZED_SESSIONS: usize = 262_144;

/// The process's file-descriptor limits: (soft, hard).
pub fn fd_limits() -> std::io::Result<(u64, u64)> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given, which lives here.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((l.rlim_cur, l.rlim_max))
}

/// Raises the soft file-descriptor limit to the hard one, as a server that holds a socket per
/// call should (systemd starts services at a soft 1024 under a hard 524288). Returns the soft
/// limit before and after.
pub fn raise_fd_limit() -> std::io::Result<(u64, u64)> {
    let (soft, hard) = fd_limits()?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    let l = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit from the struct it is given, which lives here.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((soft, hard))
}

/// The `max_sessions` a process whose soft descriptor limit is `nofile` can keep: what is left
/// after [`FDS_RESERVED`], at [`FDS_PER_SESSION`] each, between [`MIN_SIZED_SESSIONS`] and
/// [`MAX_SIZED_SESSIONS`].
pub fn sessions_for_fd_limit(nofile: u64) -> usize {
    let fit = nofile.saturating_sub(FDS_RESERVED) / FDS_PER_SESSION;
    (fit.min(MAX_SIZED_SESSIONS as u64) as usize).max(MIN_SIZED_SESSIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_follow_the_descriptor_limit_within_bounds() {
        assert_eq!(sessions_for_fd_limit(0), MIN_SIZED_SESSIONS);
        assert_eq!(sessions_for_fd_limit(1_024), MIN_SIZED_SESSIONS);
        assert_eq!(sessions_for_fd_limit(20_000), (20_000 - 512) / 4);
        assert_eq!(sessions_for_fd_limit(524_288), (524_288 - 512) / 4);
        assert_eq!(sessions_for_fd_limit(u64::MAX), MAX_SIZED_SESSIONS);
    }

    #[test]
    fn raising_the_limit_leaves_soft_at_hard() {
        let (_, after) = raise_fd_limit().unwrap();
        let (soft, hard) = fd_limits().unwrap();
        assert_eq!((soft, after), (hard, hard));
    }
}
