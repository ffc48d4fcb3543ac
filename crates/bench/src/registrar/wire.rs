//! REGISTER latency on the wire: a capture on the loopback interface times each transaction
//! from its request to its final response, matched by the Via branch, with the kernel's
//! timestamps. It sees every transaction of a step (not a sample) and does not depend on the
//! load generator's clock. A retransmitted request keeps its first timestamp, so a loss costs
//! the transaction its retransmission delay.

use afpacket::{Capture, CaptureConfig, RingConfig, filter::Filter};
use monitor::decode::{link, peek_udp};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// What the capture saw over one step.
#[derive(Debug, Default)]
pub struct Wire {
    /// Request to 2xx, nanoseconds, one per REGISTER answered with 2xx.
    pub ok_latencies_ns: Vec<u64>,
    /// From the step's first request to its last 2xx, nanoseconds.
    pub span_ns: u64,
    /// Frames the kernel dropped because the ring was full (latencies then miss them).
    pub drops: u64,
}

impl Wire {
    /// 2xx answers per second of the step, as served on the wire.
    pub fn ok_per_sec(&self) -> f64 {
        if self.span_ns == 0 {
            return 0.0;
        }
        self.ok_latencies_ns.len() as f64 * 1e9 / self.span_ns as f64
    }
}

/// A capture running on its own thread until [`Tap::stop`].
pub(super) struct Tap {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<anyhow::Result<Wire>>>,
}

impl Tap {
    /// Starts capturing UDP to and from `port` on `lo`. Opening fails without root (or
    /// CAP_NET_RAW); the error says so.
    pub fn start(port: u16) -> anyhow::Result<Tap> {
        let cfg = CaptureConfig {
            ring: RingConfig::with_mib(32),
            filter: Some(Filter::compile(&format!("udp port {port}"))?),
            ..CaptureConfig::default()
        };
        let cap = Capture::open("lo", &cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("register-tap".into())
            .spawn(move || read(cap, &flag))?;
        Ok(Tap {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops after the frames already captured have been read.
    pub fn stop(mut self) -> anyhow::Result<Wire> {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.handle.take().expect("a tap is stopped once");
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("the capture thread panicked"))?
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn read(mut cap: Capture, stop: &AtomicBool) -> anyhow::Result<Wire> {
    let hasher = RandomState::new();
    let mut pending: HashMap<u64, i64> = HashMap::with_capacity(1 << 16);
    let mut out = Wire::default();
    let (mut first_ns, mut last_ok_ns) = (None::<i64>, 0i64);
    loop {
        // Once asked to stop, read on until a block timeout passes with nothing new.
        let stopping = stop.load(Ordering::Relaxed);
        let Some(block) = cap.next_block(50)? else {
            if stopping {
                break;
            }
            continue;
        };
        for frame in block.frames() {
            // `lo` hands frames over behind a zeroed Ethernet header.
            let payload = peek_udp(link::ETHERNET, frame.data).map(|(_, _, p)| p);
            let Some(msg) = payload.and_then(classify) else {
                continue;
            };
            match msg {
                Sip::Request(branch) => {
                    first_ns.get_or_insert(frame.ts_ns);
                    pending
                        .entry(hasher.hash_one(branch))
                        .or_insert(frame.ts_ns);
                }
                Sip::Final { branch, ok } => {
                    if let Some(sent) = pending.remove(&hasher.hash_one(branch))
                        && ok
                    {
                        out.ok_latencies_ns
                            .push(u64::try_from(frame.ts_ns - sent).unwrap_or(0));
                        last_ok_ns = last_ok_ns.max(frame.ts_ns);
                    }
                }
            }
        }
    }
    out.span_ns = first_ns.map_or(0, |f| u64::try_from(last_ok_ns - f).unwrap_or(0));
    out.drops = cap.stats()?.drops;
    Ok(out)
}

#[derive(Debug, PartialEq)]
enum Sip<'a> {
    Request(&'a [u8]),
    Final { branch: &'a [u8], ok: bool },
}

/// A REGISTER or a final response, with its Via branch; provisional responses and anything
/// else are skipped.
fn classify(payload: &[u8]) -> Option<Sip<'_>> {
    let at = payload.windows(7).position(|w| w == b"branch=")? + 7;
    let rest = &payload[at..];
    let end = rest
        .iter()
        .position(|b| b";, \r\n".contains(b))
        .unwrap_or(rest.len());
    let branch = &rest[..end];
    if let Some(status) = payload.strip_prefix(b"SIP/2.0 ") {
        let code: u16 = std::str::from_utf8(status.get(..3)?).ok()?.parse().ok()?;
        return (code >= 200).then_some(Sip::Final {
            branch,
            ok: (200..300).contains(&code),
        });
    }
    payload
        .starts_with(b"REGISTER ")
        .then_some(Sip::Request(branch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_final_responses_are_keyed_by_branch() {
        let req =
            b"REGISTER sip:tandem SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5;branch=z9hG4bK-1-2-0\r\n";
        assert_eq!(classify(req), Some(Sip::Request(b"z9hG4bK-1-2-0")));
        let ok = b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5;branch=z9hG4bK-1-2-0;rport=5\r\n";
        assert_eq!(
            classify(ok),
            Some(Sip::Final {
                branch: b"z9hG4bK-1-2-0",
                ok: true
            })
        );
        let challenge = b"SIP/2.0 401 Unauthorized\r\nVia: SIP/2.0/UDP h;branch=b1\r\n";
        assert_eq!(
            classify(challenge),
            Some(Sip::Final {
                branch: b"b1",
                ok: false
            })
        );
        assert_eq!(
            classify(b"SIP/2.0 100 Trying\r\nVia: x;branch=b1\r\n"),
            None
        );
        assert_eq!(
            classify(b"OPTIONS sip:x SIP/2.0\r\nVia: x;branch=b1\r\n"),
            None
        );
    }
}
