//! A network namespace holding a veth pair, for tests and benchmarks that capture real frames
//! without touching the machine's interfaces. Made with the `ip` command (iproute2), removed
//! when the value is dropped, even when a test fails.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A namespace with two connected veth ends, both up, IPv6 disabled (no autoconfiguration or
/// neighbour discovery chatter), MTU 9000 so that large captured frames fit.
pub struct VethPair {
    pub namespace: String,
    /// Frames sent on `a` are received on `b`, and the other way.
    pub a: String,
    pub b: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running `ip`: {e} (is iproute2 installed?)"))?;
    if !out.status.success() {
        return Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

impl VethPair {
    /// Why this cannot work here, if it cannot: not root, or no `ip`.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("needs root (network namespaces and packet sockets)".into());
        }
        match Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => None,
            _ => Some("the `ip` command (iproute2) is missing".into()),
        }
    }

    /// Creates the namespace and the pair; names are unique per process and call.
    pub fn create() -> Result<VethPair, String> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{}", std::process::id() % 100_000, n);
        let pair = VethPair {
            namespace: format!("tandem-test-{id}"),
            a: format!("tva{id}"),
            b: format!("tvb{id}"),
        };
        ip(&["netns", "add", &pair.namespace])?;
        // From here on, Drop removes the namespace and the pair with it.
        let ns = pair.namespace.clone();
        pair.in_namespace(move || {
            std::fs::write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1")
                .and_then(|_| std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"))
                .map_err(|e| format!("disabling IPv6 in {ns}: {e}"))
        })??;
        let n = pair.namespace.as_str();
        ip(&[
            "-n", n, "link", "add", &pair.a, "type", "veth", "peer", "name", &pair.b,
        ])?;
        for dev in [&pair.a, &pair.b] {
            ip(&["-n", n, "link", "set", dev, "mtu", "9000", "up"])?;
        }
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        Ok(pair)
    }

    /// Runs `f` on a thread that joined the namespace: sockets it opens belong to the
    /// namespace and keep working from any thread afterwards.
    pub fn in_namespace<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, String> {
        let path = format!("/run/netns/{}", self.namespace);
        let file = File::open(&path).map_err(|e| format!("opening {path}: {e}"))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: `file` is an open namespace file; setns changes only this thread's
                // network namespace, and the thread ends with the scope.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                if r != 0 {
                    return Err(format!(
                        "joining network namespace {}: {}",
                        self.namespace,
                        std::io::Error::last_os_error()
                    ));
                }
                // Writes to /proc/sys/net go to the namespace of the thread that opens the
                // file, which is this one.
                Ok(f())
            })
            .join()
            .map_err(|_| "a thread in the namespace panicked".to_string())?
        })
    }

    /// `ip netns exec NS` followed by `program` and its arguments: a child process in the
    /// namespace. No shell is involved.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.namespace]).arg(program);
        c
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair in it.
        if let Err(e) = ip(&["netns", "del", &self.namespace]) {
            eprintln!("removing network namespace {}: {e}", self.namespace);
        }
    }
}
