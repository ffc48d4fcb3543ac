//! The collector's PostgreSQL ingest against its floor, on a throwaway server with fsync on
//! (a production setting): synthetic calls (`cdr::seed`, about 1.5 streams each) into the
//! day-partitioned tables, through `PgStore::insert_records` (upsert, exactly once) and by
//! plain `COPY` of the same rows (`cdr::pg_bench::copy_floor`), with 1 and 4 writers, each run
//! on a fresh database. Then the same records again through the store: a replay, every call
//! updated in place and its streams replaced. Not run by `cargo test`:
//!
//! ```text
//! cargo test -p cdr --release --test pg_ingest -- --ignored --nocapture
//! CDR_INGEST_RECORDS=400000 CDR_INGEST_BATCH=2000 cargo test ...   # other sizes
//! ```

mod common;

use cdr::pg_bench::{self, BATCH_RECORDS_DEFAULT};
use cdr::{CdrRecord, PgOptions};

/// CPU seconds so far of a process (`self` or a pid) and its reaped children: fields 14 to 17
/// of its `stat` line (utime, stime, cutime, cstime, in USER_HZ ticks: 100 per second), and
/// its parent's pid.
fn proc_cpu(pid: &str) -> Option<(f64, u32)> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = line[line.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: u64 = rest
        .get(11..15)?
        .iter()
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    Some((ticks as f64 / 100.0, rest.get(1)?.parse().ok()?))
}

/// CPU seconds of the whole PostgreSQL server: the postmaster with the backends it reaped, and
/// the processes it runs now.
fn server_cpu(postmaster: u32) -> f64 {
    let mut total = proc_cpu(&postmaster.to_string()).map_or(0.0, |c| c.0);
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.bytes().all(|b| b.is_ascii_digit())
            && let Some((cpu, parent)) = proc_cpu(&name)
            && parent == postmaster
        {
            total += cpu;
        }
    }
    total
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore]
fn ingest_against_the_copy_floor() {
    let options = pg_scratch::Options {
        fsync: env("CDR_INGEST_FSYNC", 1) == 1,
        shared_buffers_mib: Some(1024),
        settings: vec![("max_wal_size".into(), "4GB".into())],
        ..pg_scratch::Options::default()
    };
    let server = match pg_scratch::PgServer::start(&options) {
        Ok(s) => s,
        Err(pg_scratch::PgError::NotInstalled) => {
            test_env::skip("PostgreSQL is not installed");
            return;
        }
        Err(e) => panic!("starting PostgreSQL: {e}"),
    };
    let n = env("CDR_INGEST_RECORDS", 200_000);
    let batch = env("CDR_INGEST_BATCH", BATCH_RECORDS_DEFAULT);
    // The last hour, as a collector receives them.
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let records: Vec<CdrRecord> =
        cdr::seed::synthetic_calls(n as u64, now_us - 3_600_000_000, now_us, 42).collect();
    let streams: usize = records.iter().map(|r| r.streams.len()).sum();
    println!(
        "{n} calls with {streams} streams, batches of {batch}, PostgreSQL fsync {}, {} cores",
        if options.fsync { "on" } else { "off" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let opts = PgOptions::partitioned();
    let mut db = 0;
    let mut fresh = || {
        db += 1;
        let mut admin = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE ingest_{db}"))
            .unwrap();
        let conninfo = server
            .conninfo()
            .replace("dbname=postgres", &format!("dbname=ingest_{db}"));
        pg_bench::prepare(&conninfo, &records, &opts).unwrap();
        conninfo
    };
    let rate = |d: std::time::Duration| n as f64 / d.as_secs_f64();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let runs = env("CDR_INGEST_RUNS", 3);
    let postmaster: u32 = {
        let mut pg = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
        let checkpointer: i32 = pg
            .query_one(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'",
                &[],
            )
            .unwrap()
            .get(0);
        proc_cpu(&checkpointer.to_string()).unwrap().1
    };
    // CPU µs per CDR, of the server and of this process, over one measurement.
    let cpu = |run: &mut dyn FnMut() -> std::time::Duration| {
        let (s0, c0) = (server_cpu(postmaster), proc_cpu("self").unwrap().0);
        let d = run();
        // The writers' backends have ended; let the postmaster reap them.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (s1, c1) = (server_cpu(postmaster), proc_cpu("self").unwrap().0);
        (d, (s1 - s0) * 1e6 / n as f64, (c1 - c0) * 1e6 / n as f64)
    };
    for writers in [1, 4] {
        let (mut floors, mut ingests, mut replays) = (Vec::new(), Vec::new(), Vec::new());
        let mut cpus = Vec::new();
        // Floor and ingest alternate, so that a busy moment of the machine weighs on both.
        for _ in 0..runs {
            let c = fresh();
            let (floor, fs, fc) =
                cpu(&mut || pg_bench::copy_floor(&c, &records, writers, batch).unwrap());
            let conninfo = fresh();
            let (ingest, is, ic) =
                cpu(&mut || pg_bench::ingest(&conninfo, &records, writers, batch, &opts).unwrap());
            let (replay, rs, rc) =
                cpu(&mut || pg_bench::ingest(&conninfo, &records, writers, batch, &opts).unwrap());
            floors.push(rate(floor));
            ingests.push(rate(ingest));
            replays.push(rate(replay));
            cpus.push([fs, fc, is, ic, rs, rc]);
            let mut pg = postgres::Client::connect(&conninfo, postgres::NoTls).unwrap();
            let row = pg
                .query_one("SELECT count(*), count(DISTINCT uid) FROM cdr", &[])
                .unwrap();
            assert_eq!(
                (row.get::<_, i64>(0), row.get::<_, i64>(1)),
                (n as i64, n as i64),
                "every call once after the replay"
            );
            let rtp: i64 = pg
                .query_one("SELECT count(*) FROM cdr_rtp", &[])
                .unwrap()
                .get(0);
            assert_eq!(rtp as usize, streams, "every stream once after the replay");
        }
        let (floor, ingest) = (median(floors.clone()), median(ingests.clone()));
        println!(
            "{writers} writer(s), median of {runs}: COPY floor {floor:>7.0} CDRs/s | ingest \
             {ingest:>7.0} CDRs/s, {:.0}% of the floor | replay {:>7.0} CDRs/s",
            100.0 * ingest / floor,
            median(replays.clone())
        );
        println!(
            "    floor runs {floors:.0?}, ingest runs {ingests:.0?}, replay runs {replays:.0?}"
        );
        let m = |k: usize| median(cpus.iter().map(|c| c[k]).collect());
        println!(
            "    CPU µs per CDR (server + client), medians: floor {:.1} + {:.1}, ingest {:.1} + {:.1}, \
             replay {:.1} + {:.1}; the ingest costs {:.0}% of the floor's CPU",
            m(0),
            m(1),
            m(2),
            m(3),
            m(4),
            m(5),
            100.0 * (m(2) + m(3)) / (m(0) + m(1))
        );
    }
}
