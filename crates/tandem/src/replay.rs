//! `tandem replay --interface IF --read FILE...`: sends the frames of capture files onto an
//! interface (`sensor::replay`), at their original pace, a scaled pace or a fixed rate, to feed
//! a live capture (tests, trials, the `bench capture-live` benchmark). Frames of any link type
//! the monitor reads are rewritten to Ethernet; the IP packet inside is sent unchanged.

use std::path::PathBuf;

use sensor::replay::{ReplayConfig, replay};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Interface to send on (needs root or CAP_NET_RAW).
    #[arg(long, value_name = "IF")]
    pub interface: String,
    /// Capture files (pcap or pcapng, optionally gzip-compressed), sent in the order given.
    #[arg(long = "read", short = 'r', num_args = 1.., required = true)]
    pub read: Vec<PathBuf>,
    /// A fixed rate in frames per second instead of the files' timing.
    #[arg(long, value_name = "N", conflicts_with = "speed")]
    pub pps: Option<f64>,
    /// The files' timing scaled: 2 sends twice as fast.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub speed: f64,
    /// Longest pause between two frames, in ms of the files' time (longer gaps are cut to
    /// this, so that a capture with idle hours replays in seconds). Unlimited by default.
    #[arg(long, value_name = "MS")]
    pub max_gap_ms: Option<u64>,
    /// Send the files this many times.
    #[arg(long = "loop", value_name = "N", default_value_t = 1)]
    pub loops: u64,
    /// Send from a real-time thread (SCHED_FIFO, priority 10; needs root or CAP_SYS_NICE), so
    /// that a busy machine does not delay frames past their time.
    #[arg(long)]
    pub realtime: bool,
    /// One JSON object with the counters on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let st = replay(&ReplayConfig {
        interface: args.interface.clone(),
        files: args.read,
        pps: args.pps,
        speed: args.speed,
        max_gap_ms: args.max_gap_ms,
        loops: args.loops,
        realtime: args.realtime,
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&st)?);
    }
    eprintln!(
        "replayed on {}: {} frames sent ({} bytes) in {:.3} s, {} failed, {} skipped (link type not convertible to Ethernet)",
        args.interface, st.sent, st.bytes, st.seconds, st.failed, st.skipped
    );
    if let Some(e) = st.first_error {
        eprintln!("first send error: {e}");
    }
    Ok(())
}
