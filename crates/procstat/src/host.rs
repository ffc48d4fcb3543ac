//! What /proc says about the host: CPU time per core and in total (`/proc/stat`), load
//! (`/proc/loadavg`), memory and swap (`/proc/meminfo`), network counters per interface
//! (`/proc/net/dev`), block device IO (`/proc/diskstats`) and uptime (`/proc/uptime`). Counters
//! are returned as the kernel keeps them (since boot); a caller that wants rates takes the
//! difference between two readings. Each parser takes the file's text, so it is tested on fixed
//! input as well as on this machine's /proc.

/// CPU time of one line of `/proc/stat` (`cpu` for all cores, `cpuN` for one), clock ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTimes {
    /// `cpu` or `cpu0`, `cpu1`...
    pub name: String,
    /// Time doing work: user, nice, system, irq, softirq, steal.
    pub busy: u64,
    /// Time idle or waiting for IO.
    pub idle: u64,
}

/// The `cpu` lines of `/proc/stat`, the total first.
pub fn parse_cpu_times(stat: &str) -> Vec<CpuTimes> {
    stat.lines()
        .take_while(|l| l.starts_with("cpu"))
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let name = f.next()?.to_owned();
            let v: Vec<u64> = f.map_while(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal (guest time is inside user).
            if v.len() < 4 {
                return None;
            }
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            Some(CpuTimes {
                name,
                busy: at(0) + at(1) + at(2) + at(5) + at(6) + at(7),
                idle: at(3) + at(4),
            })
        })
        .collect()
}

/// Load averages over 1, 5 and 15 minutes.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut f = text.split_ascii_whitespace().map(|x| x.parse::<f64>().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// Memory and swap, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub total: u64,
    /// What can be given to programs without swapping (`MemAvailable`).
    pub available: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

pub fn parse_meminfo(text: &str) -> Option<Memory> {
    let mut m = Memory::default();
    let mut seen = 0;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let kib: u64 = match rest
            .split_ascii_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
        {
            Some(v) => v,
            None => continue,
        };
        let slot = match key {
            "MemTotal" => &mut m.total,
            "MemAvailable" => &mut m.available,
            "SwapTotal" => &mut m.swap_total,
            "SwapFree" => &mut m.swap_free,
            _ => continue,
        };
        *slot = kib * 1024;
        seen += 1;
    }
    (seen == 4).then_some(m)
}

/// One interface's counters since boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetCounters {
    pub interface: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

pub fn parse_net_dev(text: &str) -> Vec<NetCounters> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let v: Vec<u64> = rest
                .split_ascii_whitespace()
                .map_while(|x| x.parse().ok())
                .collect();
            if v.len() < 12 {
                return None;
            }
            Some(NetCounters {
                interface: name.trim().to_owned(),
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            })
        })
        .collect()
}

/// One block device's IO since boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskCounters {
    pub device: String,
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub written_bytes: u64,
    /// Time spent doing IO, ms (the basis of "utilisation").
    pub io_ms: u64,
}

/// Whole disks and partitions of `/proc/diskstats` (loop and ram devices left out).
pub fn parse_diskstats(text: &str) -> Vec<DiskCounters> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_ascii_whitespace().collect();
            let device = (*f.get(2)?).to_owned();
            if device.starts_with("loop") || device.starts_with("ram") {
                return None;
            }
            let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
            // Sectors are 512 bytes in this file, whatever the device's own sector size.
            Some(DiskCounters {
                device,
                reads: n(3)?,
                read_bytes: n(5)? * 512,
                writes: n(7)?,
                written_bytes: n(9)? * 512,
                io_ms: n(12)?,
            })
        })
        .collect()
}

/// Filesystems whose usage is worth a chart: those on disks, not the kernel's own.
const DISK_FILESYSTEMS: [&str; 8] = [
    "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "vfat", "f2fs",
];

/// The mount points of `/proc/mounts` on disk filesystems, each once, in order.
pub fn parse_mounts(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_ascii_whitespace().collect();
        if let [_, mount, fs, ..] = f[..]
            && DISK_FILESYSTEMS.contains(&fs)
            // Spaces and tabs in a mount point are written octal-escaped (`\040`).
            && !out.iter().any(|m| m == mount)
        {
            out.push(mount.to_owned());
        }
    }
    out
}

/// Space on one mounted filesystem, bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountUsage {
    pub mount: String,
    pub total: u64,
    /// Used, as `df` counts it (total less free, reserved blocks included in used).
    pub used: u64,
}

/// `statvfs` of a mount point; `None` if it cannot be read.
// The statvfs fields are u64 here but narrower on 32-bit targets: the casts are for those.
#[allow(clippy::unnecessary_cast)]
pub fn mount_usage(mount: &str) -> Option<MountUsage> {
    let path = std::ffi::CString::new(mount).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `path` is a NUL-terminated string and `st` points at a statvfs-sized buffer that
    // the call fills in; its result is checked before the buffer is read.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the whole struct.
    let st = unsafe { st.assume_init() };
    let block = st.f_frsize as u64;
    let total = st.f_blocks as u64 * block;
    let free = st.f_bfree as u64 * block;
    Some(MountUsage {
        mount: mount.to_owned(),
        total,
        used: total.saturating_sub(free),
    })
}

/// Seconds since boot.
pub fn parse_uptime(text: &str) -> Option<f64> {
    text.split_ascii_whitespace().next()?.parse().ok()
}

/// Everything above, read now from this machine's /proc; a file that cannot be read gives an
/// empty list or `None`.
#[derive(Debug, Clone, Default)]
pub struct HostSnapshot {
    pub cpu: Vec<CpuTimes>,
    pub load: Option<[f64; 3]>,
    pub memory: Option<Memory>,
    pub net: Vec<NetCounters>,
    pub disks: Vec<DiskCounters>,
    pub mounts: Vec<MountUsage>,
    pub uptime_s: Option<f64>,
}

impl HostSnapshot {
    pub fn read() -> HostSnapshot {
        let file = |p: &str| std::fs::read_to_string(p).ok();
        HostSnapshot {
            cpu: file("/proc/stat")
                .map(|t| parse_cpu_times(&t))
                .unwrap_or_default(),
            load: file("/proc/loadavg").and_then(|t| parse_loadavg(&t)),
            memory: file("/proc/meminfo").and_then(|t| parse_meminfo(&t)),
            net: file("/proc/net/dev")
                .map(|t| parse_net_dev(&t))
                .unwrap_or_default(),
            disks: file("/proc/diskstats")
                .map(|t| parse_diskstats(&t))
                .unwrap_or_default(),
            mounts: file("/proc/mounts")
                .map(|t| parse_mounts(&t))
                .unwrap_or_default()
                .iter()
                .filter_map(|m| mount_usage(m))
                .collect(),
            uptime_s: file("/proc/uptime").and_then(|t| parse_uptime(&t)),
        }
    }
}

impl HostSnapshot {
    /// The snapshot as named figures for a history: gauges as they are, counters as rates per
    /// second since `prev` (taken `elapsed_s` before; none without it). CPU is a percentage of
    /// the time since `prev` spent busy, per core (`host_cpu_busy_pct{cpu="cpu0"}`) and in total
    /// (`{cpu="cpu"}`).
    pub fn samples(&self, prev: Option<&HostSnapshot>, elapsed_s: f64) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        if let Some([l1, l5, l15]) = self.load {
            out.push(("host_load1".to_owned(), l1));
            out.push(("host_load5".to_owned(), l5));
            out.push(("host_load15".to_owned(), l15));
        }
        if let Some(m) = self.memory {
            out.push(("host_memory_total_bytes".to_owned(), m.total as f64));
            out.push(("host_memory_available_bytes".to_owned(), m.available as f64));
            out.push((
                "host_swap_used_bytes".to_owned(),
                m.swap_total.saturating_sub(m.swap_free) as f64,
            ));
        }
        if let Some(u) = self.uptime_s {
            out.push(("host_uptime_seconds".to_owned(), u));
        }
        for m in &self.mounts {
            let l = format!("{{mount=\"{}\"}}", m.mount);
            out.push((format!("host_fs_used_bytes{l}"), m.used as f64));
            out.push((format!("host_fs_size_bytes{l}"), m.total as f64));
        }
        let Some(prev) = prev.filter(|_| elapsed_s > 0.0) else {
            return out;
        };
        let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / elapsed_s;
        for c in &self.cpu {
            if let Some(p) = prev.cpu.iter().find(|p| p.name == c.name) {
                let busy = c.busy.saturating_sub(p.busy) as f64;
                let all = busy + c.idle.saturating_sub(p.idle) as f64;
                if all > 0.0 {
                    out.push((
                        format!("host_cpu_busy_pct{{cpu=\"{}\"}}", c.name),
                        100.0 * busy / all,
                    ));
                }
            }
        }
        for n in &self.net {
            let Some(p) = prev.net.iter().find(|p| p.interface == n.interface) else {
                continue;
            };
            let l = format!("{{interface=\"{}\"}}", n.interface);
            for (what, now, before) in [
                ("rx_bytes", n.rx_bytes, p.rx_bytes),
                ("tx_bytes", n.tx_bytes, p.tx_bytes),
                ("rx_packets", n.rx_packets, p.rx_packets),
                ("tx_packets", n.tx_packets, p.tx_packets),
                (
                    "errors",
                    n.rx_errors + n.tx_errors,
                    p.rx_errors + p.tx_errors,
                ),
                (
                    "dropped",
                    n.rx_dropped + n.tx_dropped,
                    p.rx_dropped + p.tx_dropped,
                ),
            ] {
                out.push((format!("host_net_{what}_per_second{l}"), rate(now, before)));
            }
        }
        for d in &self.disks {
            let Some(p) = prev.disks.iter().find(|p| p.device == d.device) else {
                continue;
            };
            let l = format!("{{device=\"{}\"}}", d.device);
            out.push((
                format!("host_disk_read_bytes_per_second{l}"),
                rate(d.read_bytes, p.read_bytes),
            ));
            out.push((
                format!("host_disk_written_bytes_per_second{l}"),
                rate(d.written_bytes, p.written_bytes),
            ));
            // Share of the time the device was busy.
            out.push((
                format!("host_disk_busy_pct{l}"),
                (rate(d.io_ms, p.io_ms) / 10.0).min(100.0),
            ));
        }
        out
    }
}

/// The host's figures at each call, with rates since the call before, and this process's RSS
/// and CPU share as `{prefix}_rss_bytes` and `{prefix}_cpu_pct`.
pub struct HostSampler {
    prefix: String,
    prev: Option<(HostSnapshot, std::time::Instant, Option<f64>)>,
}

impl HostSampler {
    pub fn new(prefix: &str) -> HostSampler {
        HostSampler {
            prefix: prefix.to_owned(),
            prev: None,
        }
    }

    pub fn sample(&mut self) -> Vec<(String, f64)> {
        let host = HostSnapshot::read();
        let cpu_s = crate::process_cpu_seconds(std::process::id());
        let elapsed = self
            .prev
            .as_ref()
            .map_or(0.0, |p| p.1.elapsed().as_secs_f64());
        let mut out = host.samples(self.prev.as_ref().map(|p| &p.0), elapsed);
        if let Some(rss) = crate::rss_bytes() {
            out.push((format!("{}_rss_bytes", self.prefix), rss as f64));
        }
        if let (Some(now), Some(before)) = (cpu_s, self.prev.as_ref().and_then(|p| p.2))
            && elapsed > 0.0
        {
            out.push((
                format!("{}_cpu_pct", self.prefix),
                100.0 * (now - before).max(0.0) / elapsed,
            ));
        }
        self.prev = Some((host, std::time::Instant::now(), cpu_s));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lines_split_into_busy_and_idle() {
        let stat = "cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 60 5 30 500 10 1 1 2 0 0\ncpu1 40 0 20 500 10 0 1 1 0 0\nintr 12345\n";
        let c = parse_cpu_times(stat);
        assert_eq!(c.len(), 3);
        assert_eq!(
            (c[0].name.as_str(), c[0].busy, c[0].idle),
            ("cpu", 161, 1020)
        );
        assert_eq!(c[2].name, "cpu1");
    }

    #[test]
    fn memory_network_disks_load_and_uptime() {
        let mem = "MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 600 kB\nSwapTotal: 200 kB\nSwapFree: 150 kB\n";
        assert_eq!(
            parse_meminfo(mem),
            Some(Memory {
                total: 1_024_000,
                available: 614_400,
                swap_total: 204_800,
                swap_free: 153_600
            })
        );
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None, "a field missing");
        let net = "Inter-| Receive | Transmit\n face |bytes ...\n  eth0: 100 2 0 1 0 0 0 0 300 4 0 0 0 0 0 0\n";
        let n = parse_net_dev(net);
        assert_eq!(
            (
                n[0].interface.as_str(),
                n[0].rx_bytes,
                n[0].rx_dropped,
                n[0].tx_bytes,
                n[0].tx_packets
            ),
            ("eth0", 100, 1, 300, 4)
        );
        let disks = "   7       0 loop0 1 0 2 0 0 0 0 0 0 0 0\n 254       0 vda 10 0 80 5 20 0 160 7 0 30 12\n";
        let d = parse_diskstats(disks);
        assert_eq!(d.len(), 1, "loop devices left out");
        assert_eq!(
            (d[0].reads, d[0].read_bytes, d[0].written_bytes, d[0].io_ms),
            (10, 40_960, 81_920, 30)
        );
        assert_eq!(
            parse_loadavg("0.06 0.69 0.88 1/81 12300\n"),
            Some([0.06, 0.69, 0.88])
        );
        assert_eq!(parse_uptime("28446.61 36118.95\n"), Some(28446.61));
    }

    #[test]
    fn counters_become_rates_and_cpu_a_busy_share() {
        let mut a = HostSnapshot {
            cpu: parse_cpu_times("cpu 100 0 0 900 0 0 0 0\n"),
            net: parse_net_dev("h\nh\n  eth0: 1000 10 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"),
            load: Some([1.0, 2.0, 3.0]),
            ..HostSnapshot::default()
        };
        assert_eq!(
            a.samples(None, 0.0).len(),
            3,
            "load only: no rates without a reading before"
        );
        let b = HostSnapshot {
            cpu: parse_cpu_times("cpu 130 0 0 970 0 0 0 0\n"),
            net: parse_net_dev("h\nh\n  eth0: 3000 30 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"),
            ..a.clone()
        };
        let s = b.samples(Some(&a), 10.0);
        let get = |n: &str| s.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
        assert_eq!(get("host_cpu_busy_pct{cpu=\"cpu\"}"), Some(30.0));
        assert_eq!(
            get("host_net_rx_bytes_per_second{interface=\"eth0\"}"),
            Some(200.0)
        );
        assert_eq!(
            get("host_net_rx_packets_per_second{interface=\"eth0\"}"),
            Some(2.0)
        );
        a.cpu.clear();
        assert!(
            b.samples(Some(&a), 10.0)
                .iter()
                .all(|(k, _)| !k.starts_with("host_cpu"))
        );
    }

    #[test]
    fn disk_filesystems_are_the_mounts_worth_a_chart() {
        let mounts = "proc /proc proc rw 0 0\n/dev/vda1 / ext4 rw 0 0\ntmpfs /run tmpfs rw 0 0\n/dev/vda1 / ext4 rw 0 0\n/dev/vdb /data xfs rw 0 0\n";
        assert_eq!(parse_mounts(mounts), ["/", "/data"]);
        let root = mount_usage("/").unwrap();
        assert!(root.total > 0 && root.used <= root.total, "{root:?}");
        assert_eq!(mount_usage("/nonexistent/mount"), None);
    }

    #[test]
    fn this_machine_s_proc_reads() {
        let h = HostSnapshot::read();
        assert!(
            h.cpu.len() >= 2,
            "the total and at least one core: {:?}",
            h.cpu
        );
        assert!(
            h.memory
                .is_some_and(|m| m.total > 0 && m.available <= m.total)
        );
        assert!(h.net.iter().any(|n| n.interface == "lo"));
        assert!(h.load.is_some() && h.uptime_s.is_some_and(|u| u > 0.0));
    }
}
