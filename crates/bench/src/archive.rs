//! `tandem bench archive`: what storing every call's packets costs the file system, with the
//! per-minute tar archive and with one pcap file per call (the baseline), for the same synthetic
//! calls in the same run: many concurrent calls over several minutes of capture time, each
//! with its SIP and a sample of its RTP, fed call by call in capture-time order.
//!
//! Counted, not estimated: files created (by this process, in each layout), write system calls
//! (the kernel's `syscw` from `/proc/self/io` around each side, and the writes each side issues),
//! bytes written, and the fsyncs each layout needs to make the archive durable (one per file
//! written: the archive syncs its tars at shutdown, the baseline would sync every call's file).
//! RTP is sampled (`--rtp-packets-per-call`, 60 by default instead of the 12,000 of a two-minute
//! G.711 call) to keep the run short: files and write calls do not depend on it, bytes do.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use archive::{Archive, ArchiveConfig, LinkType, Minute, Packet, StoreMode, pcap};
use monitor::synth::packet::ethernet_udp;
use serde::Serialize;

use super::report::{self, BenchReport, Table};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Calls in progress at any time (once the first call duration has passed).
    #[arg(long, default_value_t = 10_000)]
    pub concurrent_calls: usize,
    /// Minutes of capture time.
    #[arg(long, default_value_t = 5)]
    pub minutes: u64,
    /// Seconds from a call's INVITE to its BYE.
    #[arg(long, default_value_t = 120)]
    pub call_duration_s: u64,
    /// SIP messages per call (INVITE, 100, 180, 200, ACK, ..., BYE, 200).
    #[arg(long, default_value_t = 10)]
    pub sip_packets_per_call: u64,
    /// RTP packets per call, spread over its duration (a sample: see the module docs).
    #[arg(long, default_value_t = 60)]
    pub rtp_packets_per_call: u64,
    /// Keep whole RTP packets instead of their headers.
    #[arg(long)]
    pub full_rtp: bool,
    /// Directory for the two temporary archives (removed afterwards); the system's temporary
    /// directory by default. Put it on the disk you mean to measure.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// One layout's figures.
#[derive(Serialize, Debug, Default, Clone, Copy)]
struct Side {
    /// Regular files created.
    files_created: u64,
    /// Directories created (minute, hour and day directories).
    dirs_created: u64,
    /// write/pwrite calls issued by this side (its own count).
    write_calls: u64,
    /// Write system calls the kernel counted for the process while this side ran
    /// (`/proc/self/io` syscw); includes the progress bar's, if shown.
    kernel_write_syscalls: u64,
    /// Bytes written to files.
    bytes_written: u64,
    /// fsyncs needed to make everything durable: one per file written.
    fsyncs_needed: u64,
    /// Wall seconds for the whole run of this side.
    seconds: f64,
    /// Files created per minute of capture time.
    files_created_per_minute: f64,
    /// fsyncs needed per minute of capture time.
    fsyncs_needed_per_minute: f64,
    /// Write calls per minute of capture time (data writes; the page cache merges them).
    write_calls_per_minute: f64,
}

#[derive(Serialize, Debug)]
struct ArchiveBench {
    concurrent_calls: usize,
    capture_minutes: u64,
    calls: u64,
    packets: u64,
    store: &'static str,
    tar_archive: Side,
    file_per_call: Side,
    /// Baseline files created per minute / the archive's.
    files_ratio: f64,
    /// Baseline write calls per minute / the archive's (the archive writes SIP and RTP as two
    /// members, so this is about one half).
    write_calls_ratio: f64,
    /// Baseline fsyncs needed / the archive's.
    fsyncs_ratio: f64,
}

impl BenchReport for ArchiveBench {
    fn print_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{} concurrent calls, {} minutes of capture time: {} calls, {} packets, {}",
            self.concurrent_calls, self.capture_minutes, self.calls, self.packets, self.store
        )?;
        let mut t = Table::new(["figure", "tar per minute", "file per call", "ratio"]);
        let (a, b) = (&self.tar_archive, &self.file_per_call);
        let ratio = |x: f64, y: f64| {
            if x > 0.0 {
                format!("{:.1}x", y / x)
            } else {
                "-".into()
            }
        };
        let row = |t: &mut Table, name: &str, x: f64, y: f64| {
            t.row([
                name.to_string(),
                format!("{x:.1}"),
                format!("{y:.1}"),
                ratio(x, y),
            ]);
        };
        row(
            &mut t,
            "files created / minute",
            a.files_created_per_minute,
            b.files_created_per_minute,
        );
        row(
            &mut t,
            "fsyncs needed / minute",
            a.fsyncs_needed_per_minute,
            b.fsyncs_needed_per_minute,
        );
        row(
            &mut t,
            "write calls / minute",
            a.write_calls_per_minute,
            b.write_calls_per_minute,
        );
        row(
            &mut t,
            "files created",
            a.files_created as f64,
            b.files_created as f64,
        );
        row(
            &mut t,
            "directories created",
            a.dirs_created as f64,
            b.dirs_created as f64,
        );
        row(
            &mut t,
            "write calls",
            a.write_calls as f64,
            b.write_calls as f64,
        );
        row(
            &mut t,
            "write syscalls (kernel)",
            a.kernel_write_syscalls as f64,
            b.kernel_write_syscalls as f64,
        );
        row(
            &mut t,
            "fsyncs needed",
            a.fsyncs_needed as f64,
            b.fsyncs_needed as f64,
        );
        row(
            &mut t,
            "MiB written",
            a.bytes_written as f64 / 1048576.0,
            b.bytes_written as f64 / 1048576.0,
        );
        row(&mut t, "seconds (wall)", a.seconds, b.seconds);
        t.write(out)
    }
}

/// The kernel's count of write system calls by this process.
fn syscw() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("syscw: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Where the archive of one side goes.
trait Sink {
    fn start(&mut self, call: u64, call_id: &str, start_sec: i64) -> anyhow::Result<()>;
    fn sip(&mut self, call: u64, p: &Packet<'_>) -> anyhow::Result<()>;
    fn rtp(&mut self, call: u64, p: &Packet<'_>, rtp_offset: usize) -> anyhow::Result<()>;
    fn end(&mut self, call: u64) -> anyhow::Result<()>;
    fn finish(&mut self) -> anyhow::Result<Side>;
}

struct TarSink {
    archive: Archive,
    handles: HashMap<u64, archive::CallHandle>,
    minutes: std::collections::HashSet<Minute>,
}

impl Sink for TarSink {
    fn start(&mut self, call: u64, call_id: &str, start_sec: i64) -> anyhow::Result<()> {
        let h = self
            .archive
            .start_call(call_id.as_bytes(), start_sec, LinkType::ETHERNET)?;
        self.minutes.insert(Minute::of_unix_sec(start_sec));
        self.handles.insert(call, h);
        Ok(())
    }
    fn sip(&mut self, call: u64, p: &Packet<'_>) -> anyhow::Result<()> {
        Ok(self.archive.add_sip(self.handles[&call], p)?)
    }
    fn rtp(&mut self, call: u64, p: &Packet<'_>, at: usize) -> anyhow::Result<()> {
        Ok(self.archive.add_rtp(self.handles[&call], p, at)?)
    }
    fn end(&mut self, call: u64) -> anyhow::Result<()> {
        let h = self.handles.remove(&call).expect("call started");
        self.archive.end_call(h)?;
        Ok(())
    }
    fn finish(&mut self) -> anyhow::Result<Side> {
        let s = self.archive.stats();
        let fsyncs = s.tars_opened;
        self.archive.sync_and_close_tars()?;
        Ok(Side {
            files_created: s.tars_created,
            dirs_created: minute_dirs_created(&self.minutes),
            write_calls: s.members_written,
            bytes_written: s.bytes_written,
            fsyncs_needed: fsyncs,
            ..Side::default()
        })
    }
}

/// Directories a set of minutes needs: each minute, each hour and each day once.
fn minute_dirs_created(minutes: &std::collections::HashSet<Minute>) -> u64 {
    let hours: std::collections::HashSet<i64> = minutes.iter().map(|m| m.0 / 60).collect();
    let days: std::collections::HashSet<i64> = minutes.iter().map(|m| m.0 / 1440).collect();
    (minutes.len() + hours.len() + days.len()) as u64
}

/// The baseline: each call's packets buffered, then written as its own pcap file in the
/// minute directory of its start when it ends (one create and one write per call).
struct FilePerCallSink {
    dir: PathBuf,
    store: StoreMode,
    calls: HashMap<u64, (String, i64, Vec<u8>)>,
    minutes: std::collections::HashSet<Minute>,
    side: Side,
}

impl Sink for FilePerCallSink {
    fn start(&mut self, call: u64, call_id: &str, start_sec: i64) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        pcap::write_file_header(&mut buf, LinkType::ETHERNET, pcap::DEFAULT_SNAPLEN_BYTES);
        self.calls.insert(
            call,
            (archive::safe_stem(call_id.as_bytes()), start_sec, buf),
        );
        Ok(())
    }
    fn sip(&mut self, call: u64, p: &Packet<'_>) -> anyhow::Result<()> {
        let buf = &mut self.calls.get_mut(&call).expect("call started").2;
        pcap::write_record(buf, p.ts_sec, p.ts_usec, p.data, p.orig_len);
        Ok(())
    }
    fn rtp(&mut self, call: u64, p: &Packet<'_>, at: usize) -> anyhow::Result<()> {
        let keep = match self.store {
            StoreMode::FullRtp => p.data.len(),
            _ => at + pcap::rtp_header_len(&p.data[at..]),
        };
        let buf = &mut self.calls.get_mut(&call).expect("call started").2;
        pcap::write_record(buf, p.ts_sec, p.ts_usec, &p.data[..keep], p.orig_len);
        Ok(())
    }
    fn end(&mut self, call: u64) -> anyhow::Result<()> {
        let (stem, start, buf) = self.calls.remove(&call).expect("call started");
        let minute = Minute::of_unix_sec(start);
        let dir = self.dir.join(minute.rel_dir());
        if self.minutes.insert(minute) {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let path = dir.join(format!("{stem}.pcap"));
        let mut f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        f.write_all(&buf)?;
        self.side.files_created += 1;
        self.side.write_calls += 1;
        self.side.bytes_written += buf.len() as u64;
        Ok(())
    }
    fn finish(&mut self) -> anyhow::Result<Side> {
        self.side.dirs_created = minute_dirs_created(&self.minutes);
        self.side.fsyncs_needed = self.side.files_created;
        Ok(self.side)
    }
}

/// The synthetic calls: call `i` starts at `i / rate` seconds, lasts `call_duration_s`.
struct Workload {
    t0_sec: i64,
    calls: u64,
    rate_per_sec: f64,
    duration_s: u64,
    sip: u64,
    rtp: u64,
    seconds: u64,
}

impl Workload {
    fn start_sec(&self, i: u64) -> f64 {
        i as f64 / self.rate_per_sec
    }

    /// Feeds every call's packets to `sink` in capture-time order, a second at a time; returns
    /// the packets fed.
    fn run(
        &self,
        sink: &mut dyn Sink,
        bar: Option<&indicatif::ProgressBar>,
    ) -> anyhow::Result<u64> {
        let sip_src: SocketAddr = "10.0.0.1:5060".parse().unwrap();
        let sip_dst: SocketAddr = "10.0.0.2:5060".parse().unwrap();
        let mut rtp_payload = vec![0x80u8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        rtp_payload.resize(12 + 160, 0xd5);
        let mut next_call = 0u64;
        let mut active: Vec<(u64, f64, u64)> = Vec::new(); // (call, start, RTP packets sent)
        let mut packets = 0u64;
        let end_all = self.seconds + self.duration_s;
        for sec in 0..end_all {
            if let Some(b) = bar {
                b.set_position(sec);
            }
            let now = (sec + 1) as f64;
            // Calls starting this second: their call setup (all SIP but the BYE and its 200).
            while next_call < self.calls && self.start_sec(next_call) < now {
                let start = self.start_sec(next_call);
                let call_id = format!("bench-{next_call}@10.0.0.1");
                let ts = self.t0_sec as f64 + start;
                sink.start(next_call, &call_id, ts as i64)?;
                for k in 0..self.sip.saturating_sub(2) {
                    let frame = ethernet_udp(sip_src, sip_dst, sip_text(&call_id, k).as_bytes());
                    feed_sip(sink, next_call, ts + k as f64 * 0.01, &frame)?;
                    packets += 1;
                }
                active.push((next_call, start, 0));
                next_call += 1;
            }
            // RTP of the calls in progress, spread evenly over each call.
            let mut ended = Vec::new();
            for (call, start, sent) in active.iter_mut() {
                let elapsed = (now - *start).min(self.duration_s as f64);
                let due = (self.rtp as f64 * elapsed / self.duration_s as f64) as u64;
                while *sent < due {
                    let seq = *sent as u16;
                    rtp_payload[2..4].copy_from_slice(&seq.to_be_bytes());
                    rtp_payload[8..12].copy_from_slice(&(*call as u32).to_be_bytes());
                    let src = SocketAddr::new(sip_src.ip(), 20_000 + (*call % 20_000) as u16 * 2);
                    let dst = SocketAddr::new(sip_dst.ip(), 40_000);
                    let frame = ethernet_udp(src, dst, &rtp_payload);
                    let ts = self.t0_sec as f64
                        + *start
                        + *sent as f64 * self.duration_s as f64 / self.rtp as f64;
                    let p = packet(ts, &frame);
                    sink.rtp(*call, &p, 14 + 20 + 8)?;
                    *sent += 1;
                    packets += 1;
                }
                if now - *start >= self.duration_s as f64 {
                    ended.push(*call);
                }
            }
            for call in ended {
                let (_, start, _) = active.iter().find(|(c, ..)| *c == call).copied().unwrap();
                let call_id = format!("bench-{call}@10.0.0.1");
                let ts = self.t0_sec as f64 + start + self.duration_s as f64;
                for k in self.sip.saturating_sub(2)..self.sip {
                    let frame = ethernet_udp(sip_dst, sip_src, sip_text(&call_id, k).as_bytes());
                    feed_sip(sink, call, ts + k as f64 * 0.01, &frame)?;
                    packets += 1;
                }
                sink.end(call)?;
            }
            active.retain(|(_, start, _)| now - *start < self.duration_s as f64);
        }
        Ok(packets)
    }
}

fn packet(ts: f64, frame: &[u8]) -> Packet<'_> {
    Packet {
        ts_sec: ts as u32,
        ts_usec: ((ts.fract()) * 1e6) as u32,
        data: frame,
        orig_len: frame.len() as u32,
    }
}

fn feed_sip(sink: &mut dyn Sink, call: u64, ts: f64, frame: &[u8]) -> anyhow::Result<()> {
    sink.sip(call, &packet(ts, frame))
}

/// A SIP message of realistic size (about 500 bytes) for the call.
fn sip_text(call_id: &str, k: u64) -> String {
    format!(
        "INVITE sip:2002@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{k:08}\r\n\
         Max-Forwards: 70\r\nFrom: \"Alice\" <sip:1001@10.0.0.1>;tag=1928301774\r\n\
         To: <sip:2002@10.0.0.2>\r\nCall-ID: {call_id}\r\nCSeq: {k} INVITE\r\n\
         Contact: <sip:1001@10.0.0.1:5060>\r\nUser-Agent: Tandem bench\r\n\
         Allow: INVITE, ACK, CANCEL, OPTIONS, BYE, REFER, NOTIFY\r\n\
         Content-Type: application/sdp\r\nContent-Length: 130\r\n\r\n\
         v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
         m=audio 20000 RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\n"
    )
}

fn run_side(
    w: &Workload,
    sink: &mut dyn Sink,
    label: &str,
    minutes: u64,
) -> anyhow::Result<(Side, u64)> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(w.seconds + w.duration_s);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg:>14} {bar:40} {pos}/{len} s")
                .expect("progress template"),
        );
        b.set_message(label.to_string());
        b
    });
    let before = syscw();
    let started = Instant::now();
    let packets = w.run(sink, bar.as_ref())?;
    let mut side = sink.finish()?;
    side.seconds = started.elapsed().as_secs_f64();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    side.kernel_write_syscalls = syscw().saturating_sub(before);
    let m = minutes.max(1) as f64;
    side.files_created_per_minute = side.files_created as f64 / m;
    side.fsyncs_needed_per_minute = side.fsyncs_needed as f64 / m;
    side.write_calls_per_minute = side.write_calls as f64 / m;
    Ok((side, packets))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.concurrent_calls > 0 && args.minutes > 0 && args.call_duration_s > 0,
        "--concurrent-calls, --minutes and --call-duration-s must be positive"
    );
    let rate = args.concurrent_calls as f64 / args.call_duration_s as f64;
    let seconds = args.minutes * 60;
    let w = Workload {
        // 2026-11-21T08:00:00Z: calls start on a minute boundary.
        t0_sec: 1_795_248_000,
        calls: (rate * seconds as f64).ceil() as u64,
        rate_per_sec: rate,
        duration_s: args.call_duration_s,
        sip: args.sip_packets_per_call.max(2),
        rtp: args.rtp_packets_per_call.max(1),
        seconds,
    };
    let store = if args.full_rtp {
        StoreMode::FullRtp
    } else {
        StoreMode::SipAndRtpHeaders
    };
    let tmp = match &args.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .context("creating the benchmark's temporary directory")?;
    // Calls are written to the minute of their start; the capture spans the calls' minutes
    // plus the last calls' duration.
    let minutes = args.minutes;
    let mut tar = TarSink {
        archive: Archive::new(ArchiveConfig {
            store,
            max_calls: args.concurrent_calls * 2 + 1000,
            max_buffered_bytes: usize::MAX / 2,
            ..ArchiveConfig::new(tmp.path().join("tar"))
        })?,
        handles: HashMap::new(),
        minutes: Default::default(),
    };
    let (a, packets) = run_side(&w, &mut tar, "tar per minute", minutes)?;
    drop(tar);
    let mut files = FilePerCallSink {
        dir: tmp.path().join("files"),
        store,
        calls: HashMap::new(),
        minutes: Default::default(),
        side: Side::default(),
    };
    let (b, _) = run_side(&w, &mut files, "file per call", minutes)?;
    drop(files);
    remove(tmp.path())?;
    let r = |x: f64, y: f64| if x > 0.0 { y / x } else { 0.0 };
    let report = ArchiveBench {
        concurrent_calls: args.concurrent_calls,
        capture_minutes: minutes,
        calls: w.calls,
        packets,
        store: if args.full_rtp {
            "SIP and full RTP"
        } else {
            "SIP and RTP headers"
        },
        files_ratio: r(a.files_created_per_minute, b.files_created_per_minute),
        write_calls_ratio: r(a.write_calls_per_minute, b.write_calls_per_minute),
        fsyncs_ratio: r(a.fsyncs_needed as f64, b.fsyncs_needed as f64),
        tar_archive: a,
        file_per_call: b,
    };
    report::emit(&report, args.json)
}

fn remove(dir: &Path) -> anyhow::Result<()> {
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}
