//! HEP ingest per core on this machine, until `tandem bench collector` runs it:
//!
//! ```sh
//! cargo run --release -p bench --example hep_load -- [CALLS] [SECONDS] [RUNS]
//! ```
//!
//! Prints, for UDP and TCP, Tandem's `--hep-listen` (packets analysed into calls and CDRs per
//! CPU second of its threads, loss) and the bare receiver's bound, one JSON object per run.

use bench::hep_load::{FloorKind, HepLoad, LoadOptions, Transport, floor, ingest};

fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let calls = args.first().copied().unwrap_or(1_000) as usize;
    let duration_s = args.get(1).copied().unwrap_or(10);
    let runs = args.get(2).copied().unwrap_or(3);
    // A fourth argument: 1 UDP only, 2 TCP only; a fifth: 1 Tandem only (for perf).
    let only = args.get(3).copied().unwrap_or(0);
    let tandem_only = args.get(4).copied() == Some(1);
    let dir = tempfile::tempdir()?;
    let load = HepLoad::synthesise(calls, duration_s, dir.path())?;
    eprintln!(
        "{} HEP packets ({} bytes) of {calls} calls",
        load.packets.len(),
        load.bytes.len()
    );
    let opts = LoadOptions {
        calls,
        duration_s,
        ..LoadOptions::default()
    };
    for transport in [Transport::Udp, Transport::Tcp] {
        if (only == 1 && transport == Transport::Tcp) || (only == 2 && transport == Transport::Udp)
        {
            continue;
        }
        for _ in 0..runs {
            for kind in [FloorKind::PlainSocket, FloorKind::Bare] {
                if tandem_only || (transport == Transport::Tcp && kind == FloorKind::PlainSocket) {
                    continue;
                }
                let f = floor(&load, transport, kind, &opts)?;
                println!("{}", serde_json::json!({ "floor": f }));
            }
            let t = ingest(&load, transport, &opts)?;
            println!("{}", serde_json::json!({ "tandem": t }));
        }
    }
    Ok(())
}
