//! Calls through the emulated PBX recorded off the wire: SIPp phones call through the PBX to
//! a SIPp trunk while other phones call the same trunk directly, with the same callers and the
//! same numbers, at the same time (the calls a leg linker must leave alone), and dumpcap
//! records loopback. The result is the pcap and the PBX's own record of which dialogs it
//! bridged: the truth a linker is measured against.
//!
//! Addresses are `NET.10` (phones through the PBX), `NET.11` (phones calling the trunk
//! directly), `NET.20` (the PBX) and `NET.31` (the trunk), `NET` a /24 of 127/8 of the
//! caller's choice, so that runs at once and other traffic on loopback stay apart.

use super::sipp::{self, Dial, Sipp};
use super::{Bridged, DialPattern, Pbx, PbxConfig};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to place.
#[derive(Debug, Clone)]
pub struct Campaign {
    /// The first three octets of the loopback /24 used (`127.0.33`).
    pub net: String,
    /// Calls through the PBX, dialled with the outbound route's `9` before a national number
    /// (`9 0171…`), sent to the trunk in international form (`0049 171…`).
    pub calls: usize,
    /// Calls from other phones straight to the trunk, to the numbers the PBX sends out and
    /// from the same callers, interleaved with the PBX's.
    pub direct_calls: usize,
    /// Every n-th call through the PBX dials the number of the call before it (two calls to
    /// one number at once); 0 for none.
    pub same_number_every: usize,
    /// Calls placed per second by each SIPp phone process.
    pub calls_per_s: u32,
    /// How long an answered call is held before the phone hangs up.
    pub hold_ms: u64,
    /// The header the PBX adds to its trunk INVITEs with the phone leg's Call-ID.
    pub correlation_header: Option<String>,
}

/// A campaign's capture and the PBX's truth.
#[derive(Debug)]
pub struct Recorded {
    pub pcap: PathBuf,
    pub bridged: Vec<Bridged>,
    /// The PBX's SIP address.
    pub pbx: SocketAddr,
    /// SIPp's exit status per process (0: every call of it succeeded).
    pub sipp_status: Vec<(String, Option<i32>)>,
}

/// The called number a campaign's call `i` reaches on the trunk (after the route).
fn national(i: usize) -> String {
    format!("0171{:07}", 1_000_000 + i)
}

impl Campaign {
    fn ip(&self, host: u8) -> String {
        format!("{}.{host}", self.net)
    }

    /// Runs the campaign in `dir` (scenario files, SIPp's logs and `capture.pcap`).
    pub fn run(&self, dir: &Path) -> std::io::Result<Recorded> {
        let trunk_ip = self.ip(31);
        let trunk_port = UdpSocket::bind((trunk_ip.as_str(), 0))?
            .local_addr()?
            .port();
        let trunk: SocketAddr = format!("{trunk_ip}:{trunk_port}")
            .parse()
            .map_err(std::io::Error::other)?;
        let mut config = PbxConfig::loopback(trunk);
        config.sip = format!("{}:5060", self.ip(20))
            .parse()
            .map_err(std::io::Error::other)?;
        config.routes = vec![DialPattern::new("90", "0049")];
        config.correlation_header = self.correlation_header.clone();

        let capture = Dumpcap::start(dir, &self.net)?;
        let pbx = Pbx::start(config)?;
        let phone = sipp::scenario_file(dir, "phone.xml", &sipp::phone())?;
        let total = self.calls + self.direct_calls;
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let trunk_sipp = Sipp::spawn(
            dir,
            "trunk",
            &s(&[
                "-sn",
                "uas",
                "-i",
                &trunk_ip,
                "-p",
                &trunk_port.to_string(),
                "-m",
                &total.to_string(),
            ]),
        )?;
        if !sipp::wait_bound(trunk, Duration::from_secs(10)) {
            return Err(std::io::Error::other(format!(
                "SIPp did not bind the trunk's {trunk} within 10 s"
            )));
        }
        let through: Vec<Dial> = (0..self.calls)
            .map(|i| {
                let n = if self.same_number_every > 0 && i % self.same_number_every == 1 {
                    i - 1
                } else {
                    i
                };
                Dial {
                    caller: format!("{}", 2000 + i),
                    dialled: format!("9{}", national(n)),
                    name: format!("Desk {i}"),
                }
            })
            .collect();
        // The direct calls reuse the PBX calls' callers and trunk-side numbers, in the same order,
        // so that each one starts beside the PBX call it could be mistaken for.
        let direct: Vec<Dial> = (0..self.direct_calls)
            .map(|i| Dial {
                caller: format!("{}", 2000 + i),
                dialled: format!("0049{}", &national(i)[1..]),
                name: format!("Desk {i}"),
            })
            .collect();
        let mut phones = Vec::new();
        for (name, host, to, dials) in [
            ("phones", 10, pbx.sip_addr().to_string(), &through),
            ("direct", 11, trunk.to_string(), &direct),
        ] {
            if dials.is_empty() {
                continue;
            }
            let csv = dir.join(format!("{name}.csv"));
            sipp::injection_file(&csv, dials)?;
            let limit = (u64::from(self.calls_per_s) * (self.hold_ms / 1000 + 2)).max(10) * 2;
            phones.push(Sipp::spawn(
                dir,
                name,
                &s(&[
                    &to,
                    "-sf",
                    &phone.display().to_string(),
                    "-inf",
                    &csv.display().to_string(),
                    "-i",
                    &self.ip(host),
                    "-m",
                    &dials.len().to_string(),
                    "-r",
                    &self.calls_per_s.to_string(),
                    "-l",
                    &limit.to_string(),
                    "-d",
                    &self.hold_ms.to_string(),
                    "-max_socket",
                    "4000",
                ]),
            )?);
        }
        let budget = Duration::from_millis(self.hold_ms + 20_000)
            + Duration::from_secs((total as u64) / u64::from(self.calls_per_s.max(1)) + 1);
        phones.push(trunk_sipp);
        let mut sipp_status = Vec::new();
        for p in &mut phones {
            sipp_status.push((p.name.clone(), p.wait(budget)));
        }
        drop(phones);
        // Let the last 200s to BYE reach the capture.
        std::thread::sleep(Duration::from_millis(200));
        let pcap = capture.stop()?;
        let bridged = pbx.bridged();
        let pbx_addr = pbx.sip_addr();
        drop(pbx);
        Ok(Recorded {
            pcap,
            bridged,
            pbx: pbx_addr,
            sipp_status,
        })
    }
}

/// dumpcap recording loopback into `capture.pcap` (classic pcap), stopped by SIGTERM.
pub struct Dumpcap {
    child: Child,
    path: PathBuf,
}

impl Dumpcap {
    /// Starts dumpcap on `lo` for the addresses `{net}.0/24` (`net` is `127.0.35`) and waits
    /// until it captures. dumpcap says "Capturing on" before the kernel hands it packets
    /// (calls made at once were missing from the file): so datagrams are sent from `{net}.254`
    /// to `{net}.253`'s discard port until the file holds one. They stay in the capture, on a
    /// port below 1024, which nothing takes for SIP or RTP.
    pub fn start(dir: &Path, net: &str) -> std::io::Result<Dumpcap> {
        let path = dir.join("capture.pcap");
        let log = dir.join("dumpcap.log");
        let filter = format!("net {net}.0/24");
        let child = Command::new("dumpcap")
            .args(["-i", "lo", "-P", "-B", "64", "-f", &filter, "-w"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let capture = Dumpcap { child, path };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Capturing on")) {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "dumpcap did not start capturing on lo within 10 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let probe = std::net::UdpSocket::bind(format!("{net}.254:0"))?;
        // pcap's global header is 24 bytes; dumpcap writes packets out about twice a second.
        while std::fs::metadata(&capture.path).map_or(0, |m| m.len()) <= 24 {
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "dumpcap on lo captured none of the probes sent to {net}.253 within 10 s"
                )));
            }
            probe.send_to(b"probe", format!("{net}.253:9"))?;
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(capture)
    }

    /// Stops the capture and returns the file.
    pub fn stop(mut self) -> std::io::Result<PathBuf> {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        self.child.wait()?;
        Ok(self.path.clone())
    }
}

impl Drop for Dumpcap {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
