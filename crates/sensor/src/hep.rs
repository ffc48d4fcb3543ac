//! The HEP source: HEP v3 datagrams (Kamailio's siptrace, OpenSIPS, FreeSWITCH, Asterisk's
//! res_hep, heplify) rebuilt into the IP packets they carry and fed to the monitor as raw IP.
//! A datagram that is not valid HEP is counted and skipped, never fatal.

use std::time::Duration;

use crate::SensorError;
use crate::feed::{Feed, FlushClock, StopSignal};

/// Link type of the packets rebuilt from HEP: raw IP.
const LINKTYPE_RAW: u32 = 101;
/// The socket wakes up at least this often, to flush finished calls and look at the stop flag.
const WAKE_INTERVAL: Duration = Duration::from_secs(1);

/// Receives until stopped or `max_packets` datagrams; returns how many were not HEP v3.
pub(crate) fn receive(
    socket: std::net::UdpSocket,
    max_packets: Option<u64>,
    sink: &mut Feed<'_>,
    packets: &mut u64,
    stop: &StopSignal,
) -> Result<u64, SensorError> {
    socket
        .set_read_timeout(Some(WAKE_INTERVAL))
        .map_err(SensorError::HepReceive)?;
    let limits = hep::DecodeLimits::default();
    let mut buf = vec![0u8; 65_536];
    let mut datagram = Vec::with_capacity(2048);
    let mut invalid = 0u64;
    let mut clock = FlushClock::new();
    while !stop.is_stopped() && max_packets.is_none_or(|m| *packets + invalid < m) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => match hep::decode(&buf[..n], &limits) {
                Ok(p) => {
                    datagram.clear();
                    if p.to_udp_datagram(&mut datagram).is_ok() {
                        let ts_ns =
                            i64::from(p.ts_sec) * 1_000_000_000 + i64::from(p.ts_usec) * 1_000;
                        sink.packet(ts_ns, LINKTYPE_RAW, &datagram);
                        *packets += 1;
                    } else {
                        invalid += 1;
                    }
                }
                Err(e) => {
                    invalid += 1;
                    if invalid.is_power_of_two() {
                        tracing::warn!(%from, error = %e, invalid, "datagram is not HEP v3; skipped");
                    }
                }
            },
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(SensorError::HepReceive(e)),
        }
        if clock.due() {
            sink.flush_finished()?;
        }
    }
    Ok(invalid)
}
