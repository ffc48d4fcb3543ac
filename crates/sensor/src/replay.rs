//! Capture files sent onto an interface (`tandem replay --interface IF --read FILE...`), at
//! their original pace, a scaled pace or a fixed rate, to feed a live capture (tests, trials,
//! the `bench capture-live` benchmark). Frames of any link type the monitor
//! reads are rewritten to Ethernet; the IP packet inside is sent unchanged.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use afpacket::Sender;
use monitor::decode::link as linktype;
use monitor::pcap::CaptureReader;

/// What to send, and how fast.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Interface to send on (needs root or CAP_NET_RAW).
    pub interface: String,
    /// Capture files, sent in the order given.
    pub files: Vec<PathBuf>,
    /// A fixed rate in frames per second instead of the files' timing.
    pub pps: Option<f64>,
    /// The files' timing scaled: 2 sends twice as fast.
    pub speed: f64,
    /// Longest pause between two frames, in ms of the files' time.
    pub max_gap_ms: Option<u64>,
    /// Send the files this many times.
    pub loops: u64,
    /// Send from a real-time thread (SCHED_FIFO, priority 10).
    pub realtime: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Interface(#[from] afpacket::Error),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: monitor::pcap::CaptureError,
    },
}

/// What was sent.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ReplayStats {
    pub sent: u64,
    pub bytes: u64,
    /// Frames the kernel refused (over the MTU, queue full, link down).
    pub failed: u64,
    /// Frames of a link type that cannot be rewritten to Ethernet.
    pub skipped: u64,
    pub seconds: f64,
    /// The first error the kernel gave for a frame, if any.
    #[serde(skip)]
    pub first_error: Option<String>,
}

/// Source and destination MACs of frames built from link types without one.
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// Rewrites a frame of `link_type` to an Ethernet frame in `out`; `None` when the link type
/// is not one the monitor reads or the frame is too short for its header.
pub fn to_ethernet<'a>(link_type: u32, data: &'a [u8], out: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    let by_version = |ip: &[u8]| match ip.first().map(|b| b >> 4) {
        Some(4) => Some(0x0800u16),
        Some(6) => Some(0x86dd),
        _ => None,
    };
    let (ethertype, payload) = match link_type {
        linktype::ETHERNET => return Some(data),
        linktype::RAW | linktype::RAW_ALT | linktype::IPV4 | linktype::IPV6 => {
            (by_version(data)?, data)
        }
        linktype::LINUX_SLL => {
            let p = data.get(16..)?;
            (u16::from_be_bytes([data[14], data[15]]), p)
        }
        linktype::LINUX_SLL2 => {
            let p = data.get(20..)?;
            (u16::from_be_bytes([data[0], data[1]]), p)
        }
        linktype::NULL | linktype::LOOP => {
            let p = data.get(4..)?;
            (by_version(p)?, p)
        }
        _ => return None,
    };
    out.clear();
    out.extend_from_slice(&DST_MAC);
    out.extend_from_slice(&SRC_MAC);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out.extend_from_slice(payload);
    Some(out)
}

/// When each frame is due, from the start of the replay.
pub struct Pace {
    pps: Option<f64>,
    speed: f64,
    max_gap_ns: i64,
    prev_ts: Option<i64>,
    /// The files' time elapsed so far, with gaps cut to `max_gap_ns`.
    file_ns: i64,
    n: u64,
}

impl Pace {
    pub fn new(pps: Option<f64>, speed: f64, max_gap_ms: Option<u64>) -> Pace {
        Pace {
            pps,
            speed,
            max_gap_ns: max_gap_ms.map_or(i64::MAX, |m| m as i64 * 1_000_000),
            prev_ts: None,
            file_ns: 0,
            n: 0,
        }
    }

    /// The offset from the start at which the frame stamped `ts_ns` is due. Frames stamped
    /// earlier than the one before them are due at once.
    pub fn due(&mut self, ts_ns: i64) -> Duration {
        let n = self.n;
        self.n += 1;
        if let Some(pps) = self.pps {
            return Duration::from_secs_f64(n as f64 / pps);
        }
        if let Some(prev) = self.prev_ts {
            self.file_ns += ts_ns.saturating_sub(prev).clamp(0, self.max_gap_ns);
        }
        self.prev_ts = Some(ts_ns);
        Duration::from_secs_f64(self.file_ns as f64 / 1e9 / self.speed)
    }

    /// The next file's first frame follows the last one at once (its own timing from there).
    pub fn next_file(&mut self) {
        self.prev_ts = None;
    }
}

/// Sends the files as `config` says; returns what was sent. Frames the kernel refuses are
/// counted, not fatal.
pub fn replay(config: &ReplayConfig) -> Result<ReplayStats, ReplayError> {
    if !(config.speed > 0.0 && config.speed.is_finite()) {
        return Err(ReplayError::Config("--speed must be above 0".into()));
    }
    if let Some(p) = config.pps
        && !(p > 0.0 && p.is_finite())
    {
        return Err(ReplayError::Config("--pps must be above 0".into()));
    }
    let sender = Sender::open(&config.interface)?;
    if config.realtime {
        let param = libc::sched_param { sched_priority: 10 };
        // SAFETY: changes this thread's scheduling policy; `param` is a valid sched_param.
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        if r != 0 {
            return Err(ReplayError::Config(format!(
                "--realtime: SCHED_FIFO refused ({}); it needs root or CAP_SYS_NICE",
                std::io::Error::last_os_error()
            )));
        }
    }
    let mut pace = Pace::new(config.pps, config.speed, config.max_gap_ms);
    let mut st = ReplayStats::default();
    let mut buf = Vec::with_capacity(65_536);
    let start = Instant::now();
    let read_error = |path: &PathBuf| {
        let path = path.display().to_string();
        move |source| ReplayError::Read { path, source }
    };
    for _ in 0..config.loops {
        for path in &config.files {
            let mut reader = CaptureReader::open(path).map_err(read_error(path))?;
            pace.next_file();
            while let Some(p) = reader.next_packet().map_err(read_error(path))? {
                let due = pace.due(p.ts_ns);
                let Some(frame) = to_ethernet(p.link_type, p.data, &mut buf) else {
                    st.skipped += 1;
                    continue;
                };
                // Sleep only when ahead of time; behind, send at once to catch up.
                if let Some(wait) = due.checked_sub(start.elapsed())
                    && !wait.is_zero()
                {
                    std::thread::sleep(wait);
                }
                match sender.send(frame) {
                    Ok(()) => {
                        st.sent += 1;
                        st.bytes += frame.len() as u64;
                    }
                    Err(e) => {
                        st.failed += 1;
                        st.first_error.get_or_insert(e.to_string());
                    }
                }
            }
        }
    }
    st.seconds = start.elapsed().as_secs_f64();
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_layers_become_ethernet_around_the_same_ip_packet() {
        let ip = [
            0x45u8, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let mut out = Vec::new();
        let e = to_ethernet(linktype::RAW, &ip, &mut out).unwrap().to_vec();
        assert_eq!(&e[12..14], &[0x08, 0x00]);
        assert_eq!(&e[14..], &ip);
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&[0x86, 0xdd]);
        sll.extend_from_slice(&ip);
        let e = to_ethernet(linktype::LINUX_SLL, &sll, &mut out).unwrap();
        assert_eq!(&e[12..14], &[0x86, 0xdd]);
        assert_eq!(&e[14..], &ip);
        let mut null = vec![2, 0, 0, 0];
        null.extend_from_slice(&ip);
        assert_eq!(
            &to_ethernet(linktype::NULL, &null, &mut out).unwrap()[14..],
            &ip
        );
        assert!(to_ethernet(9999, &ip, &mut out).is_none());
        assert!(to_ethernet(linktype::LINUX_SLL, &ip[..10], &mut out).is_none());
    }

    #[test]
    fn pace_follows_the_files_scaled_with_gaps_cut() {
        let mut p = Pace::new(None, 2.0, Some(1000));
        let s = 1_000_000_000i64;
        assert_eq!(p.due(10 * s), Duration::ZERO);
        assert_eq!(p.due(11 * s), Duration::from_millis(500));
        assert_eq!(p.due(3600 * s), Duration::from_millis(1000)); // an hour cut to 1 s
        assert_eq!(p.due(3599 * s), Duration::from_millis(1000)); // backwards: at once
        let mut fixed = Pace::new(Some(100.0), 1.0, None);
        fixed.due(0);
        assert_eq!(fixed.due(0), Duration::from_millis(10));
    }
}
