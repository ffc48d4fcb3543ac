//! Media anchored on the PBX: one RTP socket facing the phone and one facing the trunk, and a
//! relay between them that, like Asterisk's core bridge with `direct_media=no`, sends each leg
//! its own stream: its own SSRC, its own sequence numbers and timestamp base. A packet lost
//! before the PBX is a gap on the leg it was lost on only, the other leg's numbering runs on,
//! which is how an operator tells the LAN side from the carrier side. RTCP is not relayed
//! (Asterisk writes its own; this emulator writes none).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::net::UdpSocket;

/// The largest RTP datagram relayed; longer ones are dropped.
pub const MAX_RTP_BYTES: usize = 1500;

/// Where each side's media goes, learnt from SDP (and from the first packet received, as
/// Asterisk's `rtp_symmetric` does).
#[derive(Default)]
pub struct Peers {
    pub phone: Option<SocketAddr>,
    pub trunk: Option<SocketAddr>,
}

/// One leg's outgoing numbering: Asterisk's own SSRC, sequence and timestamp base.
struct Outgoing {
    ssrc: u32,
    seq: u16,
    ts_base: u32,
    first_in_ts: Option<u32>,
}

impl Outgoing {
    fn new(seed: u64) -> Self {
        Outgoing {
            ssrc: seed as u32,
            seq: (seed >> 32) as u16,
            ts_base: (seed >> 16) as u32,
            first_in_ts: None,
        }
    }

    /// Renumbers one RTP packet in place; false when it is not RTP version 2.
    fn rewrite(&mut self, packet: &mut [u8]) -> bool {
        if packet.len() < 12 || packet[0] >> 6 != 2 {
            return false;
        }
        let in_ts = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        let first = *self.first_in_ts.get_or_insert(in_ts);
        let out_ts = self.ts_base.wrapping_add(in_ts.wrapping_sub(first));
        packet[2..4].copy_from_slice(&self.seq.to_be_bytes());
        packet[4..8].copy_from_slice(&out_ts.to_be_bytes());
        packet[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        self.seq = self.seq.wrapping_add(1);
        true
    }
}

/// The two media sockets of one bridged call.
pub struct Anchor {
    pub phone_side: Arc<UdpSocket>,
    pub trunk_side: Arc<UdpSocket>,
    pub peers: Arc<Mutex<Peers>>,
}

impl Anchor {
    /// Binds two even ports (Asterisk keeps RTP on even ports, RTCP on the odd one above) from
    /// `next_port` onwards, wrapping inside `range`.
    pub async fn bind(
        ip: IpAddr,
        range: (u16, u16),
        next_port: &mut u16,
    ) -> std::io::Result<Anchor> {
        let phone_side = bind_even(ip, range, next_port).await?;
        let trunk_side = bind_even(ip, range, next_port).await?;
        Ok(Anchor {
            phone_side: Arc::new(phone_side),
            trunk_side: Arc::new(trunk_side),
            peers: Arc::default(),
        })
    }

    pub fn phone_port(&self) -> u16 {
        self.phone_side.local_addr().map_or(0, |a| a.port())
    }

    pub fn trunk_port(&self) -> u16 {
        self.trunk_side.local_addr().map_or(0, |a| a.port())
    }

    /// Relays until the task is aborted (the call ends).
    pub async fn relay(self, seed: u64) {
        let mut to_trunk = Outgoing::new(seed);
        let mut to_phone = Outgoing::new(seed.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15);
        let mut a = vec![0u8; MAX_RTP_BYTES];
        let mut b = vec![0u8; MAX_RTP_BYTES];
        loop {
            tokio::select! {
                got = self.phone_side.recv_from(&mut a) => {
                    let Ok((n, from)) = got else { continue };
                    let dest = {
                        let mut p = self.peers.lock().expect("media peers");
                        p.phone = Some(from);
                        p.trunk
                    };
                    if let Some(dest) = dest
                        && to_trunk.rewrite(&mut a[..n])
                    {
                        let _ = self.trunk_side.send_to(&a[..n], dest).await;
                    }
                }
                got = self.trunk_side.recv_from(&mut b) => {
                    let Ok((n, from)) = got else { continue };
                    let dest = {
                        let mut p = self.peers.lock().expect("media peers");
                        p.trunk = Some(from);
                        p.phone
                    };
                    if let Some(dest) = dest
                        && to_phone.rewrite(&mut b[..n])
                    {
                        let _ = self.phone_side.send_to(&b[..n], dest).await;
                    }
                }
            }
        }
    }
}

async fn bind_even(
    ip: IpAddr,
    (low, high): (u16, u16),
    next: &mut u16,
) -> std::io::Result<UdpSocket> {
    let span = (high.saturating_sub(low) / 2).max(1);
    for _ in 0..span {
        if *next < low || *next >= high {
            *next = low + (low & 1);
        }
        let port = *next;
        *next = next.saturating_add(2);
        if let Ok(socket) = UdpSocket::bind(SocketAddr::new(ip, port)).await {
            return Ok(socket);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free even RTP port in {low}..{high} on {ip}: widen the PBX's rtp_ports"),
    ))
}

#[cfg(test)]
mod tests {
    use super::Outgoing;

    #[test]
    fn a_gap_on_one_leg_is_not_carried_to_the_other() {
        let mut out = Outgoing::new(0x1234_5678_9abc_def0);
        let mut seqs = Vec::new();
        for in_seq in [10u16, 11, 13, 14] {
            let mut p = [0u8; 20];
            p[0] = 0x80;
            p[2..4].copy_from_slice(&in_seq.to_be_bytes());
            p[4..8].copy_from_slice(&(u32::from(in_seq) * 160).to_be_bytes());
            assert!(out.rewrite(&mut p));
            seqs.push(u16::from_be_bytes([p[2], p[3]]));
            assert_eq!(u32::from_be_bytes([p[8], p[9], p[10], p[11]]), 0x9abc_def0);
        }
        assert!(seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)));
    }
}
