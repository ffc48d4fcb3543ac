//! Calls' pcaps exactly as the console gets them: a capture read by the sensor (the code
//! `tandem capture --read FILE --archive DIR --archive-store MODE --cdr-db DB --json` runs),
//! each call's CDR row read back from the SQLite store and its pcap written by
//! `sensor::call_pcap::write_call_pcap` (`tandem cdr pcap CALL-ID`). Beside each call: its
//! streams as `--json` printed them and as the CDR stored them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use cdr::{CdrStore, CdrStream, SqliteStore};
use sensor::{ArchiveSettings, CdrConfig, Sensor, SensorConfig, Source, StatusConfig, StoreMode};
use serde_json::Value;

/// One archived call.
pub struct ArchivedCall {
    pub call_id: String,
    /// `tandem cdr pcap CALL-ID`'s bytes.
    pub pcap: Vec<u8>,
    /// The call's `rtp_stream` lines of `--json`, in the order printed.
    pub json_streams: Vec<Value>,
    /// The call's stream rows in the CDR store.
    pub cdr_streams: Vec<CdrStream>,
    /// The CDR's count of the call's SIP messages.
    pub sip_messages: u64,
}

/// Each call's Call-ID and its `--json` stream objects.
type Seen = Arc<Mutex<Vec<(String, Vec<Value>)>>>;

/// Collects `--json`'s stream objects per call, as the sensor hands records over.
struct Collect(Seen);

impl sensor::RecordObserver for Collect {
    fn records(&mut self, part: &monitor::Analysis) -> std::io::Result<()> {
        let mut calls = self.0.lock().expect("collector lock");
        for c in &part.calls {
            let streams = c.streams.iter().map(sensor::json::stream_json).collect();
            calls.push((c.dialog.call_id.to_string(), streams));
        }
        Ok(())
    }
}

/// Captures `input` with an archive in `dir` and returns every call with its pcap.
pub fn archived_calls(input: &Path, store: StoreMode, dir: &Path) -> Vec<ArchivedCall> {
    let db = dir.join("cdr.sqlite3");
    let mut config = SensorConfig::new(Source::Files(vec![input.to_path_buf()]));
    config.archive = Some(ArchiveSettings {
        dir: dir.join("archive"),
        store,
        max_age_sec: None,
        max_total_bytes: None,
        max_call_bytes: sensor::ARCHIVE_CALL_MAX_BYTES,
    });
    config.cdr = Some(CdrConfig::sqlite(&db));
    config.status = StatusConfig {
        interval_s: 0,
        metrics_listen: None,
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handle = Sensor::start(config, Some(Box::new(Collect(seen.clone())))).expect("sensor");
    let report = handle.join().expect("capture");
    assert!(report.read_error.is_none(), "{:?}", report.read_error);
    let mut store = SqliteStore::open(&db).expect("CDR store");
    let calls = std::mem::take(&mut *seen.lock().unwrap());
    calls
        .into_iter()
        .map(|(call_id, json_streams)| {
            let (call, cdr_streams) = store
                .show(&call_id)
                .expect("CDR query")
                .unwrap_or_else(|| panic!("call {call_id} is not in the CDR store"));
            let mut pcap = Vec::new();
            sensor::call_pcap::write_call_pcap(&call, &mut pcap)
                .unwrap_or_else(|e| panic!("call {call_id}: {e}"));
            ArchivedCall {
                call_id,
                pcap,
                json_streams,
                cdr_streams,
                sip_messages: u64::from(call.sip_messages),
            }
        })
        .collect()
}

/// The shared real captures (`../shared/captures` beside the checkout), or `None` after
/// skipping with the reason.
pub fn shared_captures() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures");
    if dir.join("README.md").is_file() {
        Some(dir)
    } else {
        test_env::skip(&format!(
            "the real captures: {} is absent (the shared data beside the checkout)",
            dir.display()
        ));
        None
    }
}

/// Whether `tshark` runs here; skips (with the reason) when not.
pub fn have_tshark(what: &str) -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        test_env::skip(&format!("{what}: tshark is not installed (Debian: tshark)"));
    }
    ok
}

/// Frame numbers tshark shows as SIP in `pcap` (one per frame, however many messages it
/// completes).
pub fn tshark_sip_frames(pcap: &Path) -> Vec<u64> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "sip", "-T", "fields", "-e", "frame.number"])
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().expect("a frame number"))
        .collect()
}

/// The values of a WAV file made by `callview::wav`: (sample rate, samples).
pub fn wav_samples(wav: &[u8]) -> (u32, Vec<i16>) {
    assert!(wav.len() >= 44, "a WAV file has a 44-byte header");
    assert_eq!(&wav[0..4], b"RIFF");
    assert_eq!(&wav[8..16], b"WAVEfmt ");
    assert_eq!(u16::from_le_bytes([wav[20], wav[21]]), 1, "PCM");
    assert_eq!(u16::from_le_bytes([wav[22], wav[23]]), 1, "mono");
    assert_eq!(u16::from_le_bytes([wav[34], wav[35]]), 16, "16-bit");
    assert_eq!(&wav[36..40], b"data");
    let data = u32::from_le_bytes(wav[40..44].try_into().unwrap()) as usize;
    assert_eq!(data, wav.len() - 44, "the data chunk's size");
    assert_eq!(
        u32::from_le_bytes(wav[4..8].try_into().unwrap()) as usize,
        wav.len() - 8,
        "the RIFF size"
    );
    let rate = u32::from_le_bytes(wav[24..28].try_into().unwrap());
    let samples = wav[44..]
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    (rate, samples)
}

/// Rounds as `--json` does (3 decimals).
pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The seconds' lost packets against the stream's: never negative, adding up to the stream's
/// RFC 3550 loss (Wireshark's `lost` counts a duplicate as received, the RFC does not), or to
/// more when packets came late across a second's end.
pub fn assert_seconds_lost(s: &callview::StreamView, what: &str) {
    assert!(
        s.intervals.iter().all(|i| i.lost >= 0),
        "{what}: a second with negative loss: {:?}",
        s.intervals.iter().find(|i| i.lost < 0)
    );
    let seconds: i64 = s.intervals.iter().map(|i| i.lost).sum();
    let stream = (s.figures.lost + s.figures.duplicates as i64).max(0);
    if s.figures.out_of_order == 0 {
        assert_eq!(seconds, stream, "{what}: lost over the seconds");
    } else {
        assert!(
            seconds >= stream,
            "{what}: lost over the seconds {seconds} < {stream}"
        );
    }
}
