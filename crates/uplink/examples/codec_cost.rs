//! What encoding and decoding a record costs: `cargo run --release -p uplink --example
//! codec_cost`. Realistic calls (`cdr::seed`: a call with its streams, archive columns, digits)
//! in batches of 500, in JSON and in the compact form.

use std::time::Instant;

use uplink::{Limits, Message, RecordFormat, decode_frame, encode_records};

fn main() {
    for format in [RecordFormat::Json, RecordFormat::Compact] {
        cost(format);
    }
}

fn cost(format: RecordFormat) {
    let n = 100_000u64;
    let records: Vec<_> =
        cdr::seed::synthetic_calls(n, 1_700_000_000_000_000, 1_700_086_400_000_000, 1).collect();
    let limits = Limits::default();
    let batch = 500;
    let mut frames = Vec::new();
    let started = Instant::now();
    let mut seq = 1;
    for chunk in records.chunks(batch) {
        let (buf, last) = encode_records(seq, chunk, &limits, format).unwrap();
        seq = last + 1;
        frames.push(buf);
    }
    let encode_s = started.elapsed().as_secs_f64();
    let bytes: usize = frames.iter().map(Vec::len).sum();
    let started = Instant::now();
    let mut decoded = 0usize;
    for f in &frames {
        let mut at = 0;
        while at < f.len() {
            let (m, used) = decode_frame(&f[at..], &limits).unwrap().unwrap();
            if let Message::Records(r) = m {
                decoded += r.records.len();
            }
            at += used;
        }
    }
    let decode_s = started.elapsed().as_secs_f64();
    assert_eq!(decoded as u64, n);
    println!(
        "{format:?}: {n} records, {:.0} bytes each on the wire; encode {:.2} µs/record, decode {:.2} µs/record; one core decodes {:.0} records/s",
        bytes as f64 / n as f64,
        encode_s * 1e6 / n as f64,
        decode_s * 1e6 / n as f64,
        n as f64 / decode_s
    );
}
