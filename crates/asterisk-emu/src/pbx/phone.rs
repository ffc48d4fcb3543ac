//! One phone call with media, for the console's linked-call tests and screenshot: a plain
//! UDP user agent places a call through the PBX, sends G.711 A-law RTP every 20 ms (leaving
//! out the packets a lossy LAN would lose), reads what comes back, and hangs up. The trunk
//! (SIPp with `-rtp_echo`) echoes the PBX's media, so every leg carries a stream each way.

use super::msg::{Msg, sdp_audio, tag};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// What the phone does.
#[derive(Debug, Clone)]
pub struct PhoneCall {
    pub pbx: SocketAddr,
    pub ip: IpAddr,
    pub caller: String,
    pub dialled: String,
    /// RTP packets sent (20 ms each).
    pub packets: u16,
    /// Every n-th packet is never sent (loss on the phone's side of the PBX); 0 for none.
    pub lose_every: u16,
}

/// What came of it.
#[derive(Debug, Clone)]
pub struct Placed {
    pub call_id: String,
    pub packets_sent: u16,
    pub packets_received: u32,
}

const WAIT: Duration = Duration::from_secs(5);

fn recv_until(
    sock: &UdpSocket,
    what: &str,
    mut done: impl FnMut(&Msg) -> bool,
) -> std::io::Result<Msg> {
    let deadline = Instant::now() + WAIT;
    let mut buf = vec![0u8; 65_535];
    while Instant::now() < deadline {
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let Ok((n, _)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if let Some(m) = Msg::parse(&buf[..n])
            && done(&m)
        {
            return Ok(m);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the PBX sent no {what} within 5 s"),
    ))
}

impl PhoneCall {
    /// Places the call and returns once its BYE is answered.
    pub fn place(&self) -> std::io::Result<Placed> {
        let sip = UdpSocket::bind((self.ip, 0))?;
        let rtp = UdpSocket::bind((self.ip, 0))?;
        let (me, media) = (sip.local_addr()?, rtp.local_addr()?);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let call_id = format!("{nanos:x}@{}", self.ip);
        let from = format!(
            "\"Desk {c}\" <sip:{c}@{ip}>;tag=ph{nanos:x}",
            c = self.caller,
            ip = self.ip
        );
        let ruri = format!("sip:{}@{}", self.dialled, self.pbx);
        let head = |method: &str, cseq: u32, to: &str| {
            format!(
                "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP {me};branch=z9hG4bK{method}{nanos:x}\r\nFrom: {from}\r\nTo: {to}\r\n\
Call-ID: {call_id}\r\nCSeq: {cseq} {method}\r\nContact: <sip:{c}@{me}>\r\nMax-Forwards: 70\r\nUser-Agent: Yealink SIP-T46S 66.86.0.15\r\n",
                c = self.caller
            )
        };
        let sdp = format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n",
            ip = self.ip,
            port = media.port()
        );
        let to = format!("<sip:{}@{}>", self.dialled, self.pbx);
        let invite = format!(
            "{}Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
            head("INVITE", 1, &to),
            sdp.len()
        );
        sip.send_to(invite.as_bytes(), self.pbx)?;
        let ok = recv_until(&sip, "200 to the INVITE", |m| {
            m.status >= 200 && m.cseq().1 == "INVITE"
        })?;
        if ok.status != 200 {
            return Err(std::io::Error::other(format!(
                "the PBX answered {} {}",
                ok.status, ok.reason
            )));
        }
        let to = ok
            .header("To")
            .filter(|t| tag(t).is_some())
            .unwrap_or(&to)
            .to_string();
        let far = sdp_audio(&ok.body)
            .ok_or_else(|| std::io::Error::other("the PBX's 200 has no audio SDP"))?;
        sip.send_to(
            format!("{}Content-Length: 0\r\n\r\n", head("ACK", 1, &to)).as_bytes(),
            self.pbx,
        )?;

        rtp.set_nonblocking(true)?;
        let (mut sent, mut received) = (0u16, 0u32);
        let mut packet = [0xd5u8; 12 + 160];
        packet[0] = 0x80;
        packet[1] = 8;
        packet[8..12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        let start = Instant::now();
        let mut buf = [0u8; 2048];
        for seq in 0..self.packets {
            packet[2..4].copy_from_slice(&seq.to_be_bytes());
            packet[4..8].copy_from_slice(&(u32::from(seq) * 160).to_be_bytes());
            if self.lose_every == 0 || seq % self.lose_every != self.lose_every - 1 {
                rtp.send_to(&packet, far)?;
                sent += 1;
            }
            while rtp.recv_from(&mut buf).is_ok() {
                received += 1;
            }
            let due = start + Duration::from_millis(20 * (u64::from(seq) + 1));
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        sip.send_to(
            format!("{}Content-Length: 0\r\n\r\n", head("BYE", 2, &to)).as_bytes(),
            self.pbx,
        )?;
        recv_until(&sip, "200 to the BYE", |m| {
            m.status == 200 && m.cseq().1 == "BYE"
        })?;
        Ok(Placed {
            call_id,
            packets_sent: sent,
            packets_received: received,
        })
    }
}
