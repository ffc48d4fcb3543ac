//! How many INVITEs a second the linker decides: `cargo run --release -p legs --example
//! linker_rate -- CALLS CPS`. Each call is an A leg to a learned PBX and its B leg 80 ms later;
//! CPS calls a second keep CPS × 5 s inbound INVITEs waiting in the window at once.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let calls = args.next().unwrap_or(100_000);
    let cps = args.next().unwrap_or(200);
    let mut k = legs::Linker::new(legs::LegsConfig::default()).unwrap();
    let pbx = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5060);
    let trunk = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 5)), 5060);
    let mut invites = Vec::with_capacity(2 * calls as usize);
    for i in 0..calls {
        let t = (i * 1_000_000_000 / cps) as i64;
        let phone = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i as u32)), 5060);
        let number = format!("0301{:06}", i % 1_000_000);
        invites.push((
            t,
            phone,
            pbx,
            format!("a{i}"),
            format!("{}", 200 + i % 800),
            number.clone(),
        ));
        invites.push((
            t + 80_000_000,
            pbx,
            trunk,
            format!("b{i}"),
            "+4930555000".into(),
            number,
        ));
    }
    invites.sort_by_key(|x| x.0);
    let start = Instant::now();
    let mut linked = 0u64;
    for (ts_ns, src, dst, call_id, caller, called) in &invites {
        let inv = legs::Invite {
            ts_ns: *ts_ns,
            src: *src,
            dst: *dst,
            call_id,
            caller,
            ruri_user: called,
            to_user: called,
            initial: true,
            headers: &[],
            correlation: None,
        };
        linked += u64::from(k.invite(&inv).is_some());
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "{} INVITEs in {:.3} s: {:.0} a second; {linked} linked of {calls} pairs",
        invites.len(),
        s,
        invites.len() as f64 / s
    );
}
