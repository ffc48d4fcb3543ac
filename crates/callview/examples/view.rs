//! Prints the call view of a pcap as JSON (what the console's call page gets), or writes a
//! stream's audio:
//!
//! ```sh
//! cargo run -p callview --example view -- call.pcap            # the view as JSON
//! cargo run -p callview --example view -- call.pcap 0 out.wav  # stream 0's audio
//! cargo run -p callview --example view -- call.pcap mixed out.wav
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: view FILE.pcap [STREAM|mixed OUT.wav]");
        return ExitCode::FAILURE;
    };
    let pcap = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limits = callview::Limits::default();
    match (args.get(1), args.get(2)) {
        (Some(which), Some(out)) => {
            let which = match which.as_str() {
                "mixed" => callview::AudioSelect::Mixed,
                n => match n.parse() {
                    Ok(i) => callview::AudioSelect::Stream(i),
                    Err(_) => {
                        eprintln!("{n:?}: a stream number or `mixed`");
                        return ExitCode::FAILURE;
                    }
                },
            };
            match callview::wav(&pcap, which, &limits) {
                Ok(wav) => {
                    if let Err(e) = std::fs::write(out, wav) {
                        eprintln!("{out}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => match callview::analyze(&pcap, &limits) {
            Ok(view) => match serde_json::to_string_pretty(&view) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            },
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}
