//! What /proc says about a process: CPU time per thread (`/proc/self/task`), CPU time and
//! resident memory of this process or another one. Linux only; a figure that cannot be read is
//! `None` (or an empty list), never a made-up zero.
//!
//! A thread's line in `/proc/self/task/TID/stat` is `TID (NAME) STATE ...` with `utime` and
//! `stime` (clock ticks) as fields 14 and 15 (proc(5)). NAME is the thread's name (at most 15
//! bytes, set by `std::thread::Builder::name`) and may itself hold spaces or parentheses, so
//! the fields are counted from the last `)`.
//!
//! `sockets.rs`: listening TCP sockets and the process holding each (for a server that must not
//! share its port with another one). `host.rs`: the host's CPU, load, memory, network, disk IO
//! and uptime ([`host::HostSnapshot`]), for the metrics history.

pub mod host;
mod sockets;
pub use sockets::{
    Proto, SocketHolder, TcpListenerEntry, holder_text, listen_addrs_overlap, name_holder,
    parse_tcp_line, parse_udp_line, port_holders, socket_holder, socket_inode,
    tcp_listeners_on_port, udp_sockets_on_port,
};

/// One thread's CPU time so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    pub tid: u32,
    pub name: String,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
}

/// Parses one `stat` line into (name, utime + stime). `None` if it is not one.
pub fn parse_stat(line: &str) -> Option<(String, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line.get(open + 1..close)?;
    // Fields after the name start at field 3 (state): utime is field 14, stime field 15.
    let mut rest = line.get(close + 1..)?.split_ascii_whitespace().skip(11);
    let utime: u64 = rest.next()?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((name.to_string(), utime + stime))
}

/// Every thread of this process. Threads that end while they are read are left out.
pub fn threads() -> Vec<ThreadCpu> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out: Vec<ThreadCpu> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (name, cpu_ticks) = parse_stat(&text)?;
            Some(ThreadCpu {
                tid,
                name,
                cpu_ticks,
            })
        })
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as u64 } else { 100 }
}

/// Resident set size: the second field of `/proc/self/statm` (pages) times the page size.
pub fn rss_bytes() -> Option<u64> {
    rss_bytes_at("/proc/self/statm")
}

/// Resident set size of another process.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    rss_bytes_at(&format!("/proc/{pid}/statm"))
}

/// Peak resident set size of this process (`VmHWM` of `/proc/self/status`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// CPU time the calling thread has run, in seconds, to the nanosecond
/// (`/proc/thread-self/schedstat`).
pub fn thread_cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// User plus system CPU seconds a process has used (`/proc/PID/stat`).
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, ticks) = parse_stat(&stat)?;
    Some(ticks as f64 / ticks_per_second() as f64)
}

fn rss_bytes_at(statm: &str) -> Option<u64> {
    let text = std::fs::read_to_string(statm).ok()?;
    let pages: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_stat_line_whose_name_holds_spaces_and_parentheses() {
        let line =
            "4242 (odd ) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 42 0 0 20 0 3 0 12 0 0";
        assert_eq!(parse_stat(line), Some(("odd ) name".into(), 773)));
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
    }

    #[test]
    fn this_tests_own_threads_are_found_by_name_with_their_cpu_time() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("status-spinner".into())
                .spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
                .unwrap()
        };
        // Wait until it has been given CPU time (one tick), however busy the machine is.
        let deadline = Instant::now() + Duration::from_secs(60);
        let found = loop {
            let found = threads().into_iter().find(|t| t.name == "status-spinner");
            if found.as_ref().is_some_and(|t| t.cpu_ticks > 0) || Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
        let found = found.expect("the spinning thread is listed under its name");
        assert!(found.cpu_ticks > 0, "{found:?}");
        // The test's own thread is there too (the harness names it after the test).
        let me = threads();
        assert!(me.len() >= 2, "{me:?}");
        assert!(rss_bytes().unwrap() > 0);
        assert!(peak_rss_bytes().unwrap() >= rss_bytes().unwrap() / 2);
        assert!(process_rss_bytes(std::process::id()).unwrap() > 0);
        assert!(process_cpu_seconds(std::process::id()).unwrap() > 0.0);
        assert!(thread_cpu_seconds().unwrap() >= 0.0);
        assert!(ticks_per_second() > 0);
    }
}
