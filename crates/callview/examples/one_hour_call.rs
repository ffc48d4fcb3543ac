//! Measures the call view on a one-hour G.711 call: 2 streams × 180,000 packets (20 ms), made
//! by the monitor's synthetic generator with a little loss, jitter, reordering and duplicates.
//!
//! ```sh
//! cargo run --release -p callview --example one_hour_call
//! ```
//!
//! Prints the analysis time (pcap reading, monitor, ladder, streams, seconds, RTCP) and the
//! WAV decoding speed as a multiple of real time, each the best and the median of 5 runs.

use std::time::{Duration, Instant};

use monitor::synth::{SynthConfig, generate};

const RUNS: usize = 5;
const CALL_MS: u64 = 3_600_000;

fn timed<T>(mut f: impl FnMut() -> T) -> (T, Duration, Duration) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..RUNS {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    times.sort();
    (last.expect("at least one run"), times[0], times[RUNS / 2])
}

fn main() {
    let cfg = SynthConfig {
        calls: 1,
        call_duration_ms: CALL_MS,
        failures: false,
        loss_pct: 0.5,
        jitter_ms: 3.0,
        reorder_pct: 0.2,
        duplicate_pct: 0.2,
        ..SynthConfig::default()
    };
    let mut pcap = Vec::new();
    let truth = generate(&cfg, &mut pcap).expect("generating the call");
    println!(
        "one call, {} RTP packets, {} SIP messages, pcap {:.1} MB",
        truth.rtp_packets,
        truth.sip_messages,
        pcap.len() as f64 / 1e6
    );
    // The monitor alone, as `tandem capture --read` runs it (its reader over a copy), for
    // comparison: what the call view adds is the ladder, the trackers and the reading in place.
    let (_, best, median) = timed(|| {
        let mut r = monitor::pcap::CaptureReader::from_reader(
            "call.pcap",
            std::io::Cursor::new(pcap.clone()),
        )
        .expect("a pcap");
        let mut m = monitor::Monitor::new(monitor::MonitorConfig::default(), 1);
        m.read_capture(&mut r, &mut |_| {}).expect("reading");
        m.finish()
    });
    println!(
        "monitor alone: best {:.1} ms, median {:.1} ms",
        best.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3
    );
    let limits = callview::Limits::default();
    let (view, best, median) = timed(|| callview::analyze(&pcap, &limits).expect("analyze"));
    println!(
        "analyze: best {:.1} ms, median {:.1} ms ({} streams, {} seconds in the first, {} SIP messages)",
        best.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3,
        view.streams.len(),
        view.streams.first().map_or(0, |s| s.intervals.len()),
        view.ladder.len()
    );
    let seconds = view.streams[0].audio.as_ref().expect("decodable").seconds;
    for (name, which) in [
        ("wav stream 0", callview::AudioSelect::Stream(0)),
        ("wav mixed", callview::AudioSelect::Mixed),
    ] {
        let (wav, best, median) = timed(|| callview::wav(&pcap, which, &limits).expect("wav"));
        println!(
            "{name}: {:.1} MB, best {:.1} ms, median {:.1} ms: {:.0}× real time (best), {:.0}× (median)",
            wav.len() as f64 / 1e6,
            best.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e3,
            seconds / best.as_secs_f64(),
            seconds / median.as_secs_f64()
        );
    }
}
