//! The collector's ingest rate into PostgreSQL: `cargo run --release -p collector --example
//! ingest -- SENSORS RECORDS_PER_SENSOR`. A throwaway PostgreSQL (fsync on, as in production),
//! a collector on loopback, and SENSORS in-process sensors, each a CDR writer (batches of 500)
//! whose store is the link (`sensor::uplink`), submitting realistic calls (`cdr::seed`) as fast
//! as they can; the figure is records acknowledged (committed) per second, from the first
//! submit to the last acknowledgement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cdr::{CdrWriter, CdrWriterConfig};
use collector::{Collector, SensorList, Settings, sensors_file};
use sensor::uplink::{CollectorLink, Uplink};

fn main() {
    let mut args = std::env::args().skip(1);
    let sensors: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let per: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let pg = pg_scratch::PgServer::start(&pg_scratch::Options {
        fsync: true,
        ..pg_scratch::Options::default()
    })
    .expect("PostgreSQL (Debian's postgresql package)");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("collector");
    std::fs::create_dir_all(&data).unwrap();
    let list = SensorList::open(&sensors_file(&data)).unwrap();
    let tokens: Vec<(String, String)> = (0..sensors)
        .map(|i| {
            let name = format!("s{i}");
            let t = list.add(&name).unwrap();
            (name, t)
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let settings = Settings {
        listen: "127.0.0.1:0".into(),
        postgres: pg.conninfo(),
        ..Settings::default()
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let c = rt
        .block_on(Collector::bind(&settings, None, &data, &mut registry))
        .unwrap();
    let addr = c.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = rt.spawn(c.serve(async {
        let _ = stop_rx.await;
    }));
    // Records made before the clock starts.
    let records: Vec<Vec<cdr::CdrRecord>> = (0..sensors)
        .map(|i| {
            cdr::seed::synthetic_calls(
                per,
                1_750_000_000_000_000,
                1_750_086_400_000_000,
                i as u64 + 1,
            )
            .map(|mut r| {
                r.uid.clear();
                if let Some(c) = r.call.as_mut() {
                    c.sensor.clear();
                }
                r
            })
            .collect()
        })
        .collect();
    let writers: Vec<(CdrWriter, Arc<Uplink>)> = tokens
        .iter()
        .map(|(name, token)| {
            let f = dir.path().join(format!("{name}.token"));
            std::fs::write(&f, token).unwrap();
            let mut link = CollectorLink::new(&addr.to_string(), name);
            link.token_file = Some(f);
            let uplink = Arc::new(Uplink::start(link, None).unwrap());
            let opener = uplink.clone();
            let cfg = CdrWriterConfig {
                sensor: name.clone(),
                queue_records_max: per as usize + 1,
                ..CdrWriterConfig::new(dir.path().join(format!("{name}.journal")))
            };
            let w = CdrWriter::start(cfg, move || opener.open_store()).unwrap();
            uplink.open_store().expect("connected");
            (w, uplink)
        })
        .collect();
    let started = Instant::now();
    std::thread::scope(|s| {
        for ((w, _), recs) in writers.iter().zip(records) {
            s.spawn(move || {
                for r in recs {
                    w.submit(r);
                }
            });
        }
    });
    loop {
        let done = writers
            .iter()
            .all(|(w, _)| w.stats().written_records >= per);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = started.elapsed().as_secs_f64();
    let total = per * sensors as u64;
    let journaled: u64 = writers
        .iter()
        .map(|(w, _)| w.stats().journaled_records)
        .sum();
    println!(
        "{sensors} sensor(s) x {per} records: {total} stored in {secs:.2} s = {:.0} CDRs/s into PostgreSQL ({journaled} went through a journal)",
        total as f64 / secs
    );
    for (w, _) in writers {
        w.close();
    }
    let _ = stop_tx.send(());
    let _ = rt.block_on(served);
}
