//! A synthetic T.38 fax: the UDPTL packets of a T.30 session in both directions, with its
//! ground truth (packets, control frames, pages, result), for tests and `tandem bench capture`.
//!
//! The caller sends, the callee receives, as T.30 runs it: CNG and CED tones, the callee's DIS,
//! the caller's DCS and training check, CFR, then per page a training, the page's image data
//! at V.17 14,400 bit/s and a post-message command (MPS, or EOP for the last) that the callee
//! confirms with MCF; DCN ends it. Control frames travel as HDLC data over V.21, as T.38
//! version 0 encodes them.

use crate::t38::{FaxResult, IfpType, fcf};

/// What fax to make.
#[derive(Debug, Clone)]
pub struct FaxPlan {
    pub pages: u32,
    /// Image data packets per page.
    pub page_packets: u32,
    /// `false`: the last page's post-message command goes unanswered and no DCN follows.
    pub complete: bool,
    /// Each packet carries the previous one's IFP as a secondary packet.
    pub redundancy: bool,
    /// First UDPTL sequence numbers: caller, callee.
    pub seq0: [u16; 2],
}

impl Default for FaxPlan {
    fn default() -> Self {
        FaxPlan {
            pages: 2,
            page_packets: 20,
            complete: true,
            redundancy: true,
            seq0: [0, 0],
        }
    }
}

/// One UDPTL datagram of the session.
#[derive(Debug, Clone)]
pub struct FaxPacket {
    pub from_caller: bool,
    /// Time from the session's start.
    pub at_ns: i64,
    pub udptl: Vec<u8>,
}

/// What a monitor should find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaxTruth {
    /// Packets sent: caller, callee.
    pub packets: [u64; 2],
    /// Control frames per direction (caller, callee), by their FCF without the X bit.
    pub frames: [Vec<u8>; 2],
    pub pages: u32,
    pub result: FaxResult,
    pub modulation: IfpType,
}

const V17_14400: u8 = 8;
const PAGE_DATA_BYTES: usize = 160;

/// Builds the IFPs, then wraps them in UDPTL with sequence numbers and recovery.
struct Session {
    packets: Vec<FaxPacket>,
    /// The last IFP per direction, sent again as the next packet's secondary.
    last: [Option<Vec<u8>>; 2],
    seq: [u16; 2],
    t_ns: i64,
    truth: FaxTruth,
    redundancy: bool,
}

impl Session {
    fn send(&mut self, from_caller: bool, ifp: Vec<u8>, gap_ms: i64) {
        let d = usize::from(!from_caller);
        self.t_ns += gap_ms * 1_000_000;
        let mut u = self.seq[d].to_be_bytes().to_vec();
        self.seq[d] = self.seq[d].wrapping_add(1);
        put_open_type(&mut u, &ifp);
        match self.last[d].as_ref().filter(|_| self.redundancy) {
            Some(prev) => {
                u.extend_from_slice(&[0x00, 0x01]);
                put_open_type(&mut u, prev);
            }
            None => u.extend_from_slice(&[0x00, 0x00]),
        }
        self.last[d] = Some(ifp);
        self.truth.packets[d] += 1;
        self.packets.push(FaxPacket {
            from_caller,
            at_ns: self.t_ns,
            udptl: u,
        });
    }

    fn indicator(&mut self, from_caller: bool, n: u8, gap_ms: i64) {
        self.send(from_caller, vec![n << 1], gap_ms);
    }

    /// A data IFP of one field: (field type, bytes).
    fn data(&mut self, from_caller: bool, modulation: u8, kind: u8, bytes: &[u8], gap_ms: i64) {
        let mut ifp = vec![0x80 | 0x40 | modulation << 1, 1];
        if bytes.is_empty() {
            ifp.push(kind << 4);
        } else {
            ifp.push(0x80 | kind << 4);
            ifp.extend_from_slice(&((bytes.len() - 1) as u16).to_be_bytes());
            ifp.extend_from_slice(bytes);
        }
        self.send(from_caller, ifp, gap_ms);
    }

    /// A T.30 control frame: the V.21 preamble, the frame's HDLC data, its good FCS.
    fn frame(&mut self, from_caller: bool, control: u8, fif: &[u8]) {
        self.indicator(from_caller, 3, 30);
        let mut hdlc = vec![0xff, 0xc8, control];
        hdlc.extend_from_slice(fif);
        self.data(from_caller, 0, 0, &hdlc, 30);
        self.data(from_caller, 0, 4, &[], 20);
        self.truth.frames[usize::from(!from_caller)].push(control & 0x7f);
    }

    /// Training then `n` packets of page (or training check) data at V.17 14,400.
    fn image(&mut self, n: u32) {
        self.indicator(true, 15, 30);
        for i in 0..n {
            let fill = [(i & 0xff) as u8; PAGE_DATA_BYTES];
            self.data(true, V17_14400, 6, &fill, 20);
        }
        self.data(true, V17_14400, 7, &[], 20);
    }
}

/// An IFP as a PER open type: its length (one byte under 128, else two with the top bit set),
/// then its bytes.
fn put_open_type(out: &mut Vec<u8>, ifp: &[u8]) {
    assert!(ifp.len() < 1 << 14, "an IFP of {} bytes", ifp.len());
    if ifp.len() < 128 {
        out.push(ifp.len() as u8);
    } else {
        out.extend_from_slice(&(0x8000 | ifp.len() as u16).to_be_bytes());
    }
    out.extend_from_slice(ifp);
}

/// The session's packets, in time order, and its truth.
pub fn fax_session(plan: &FaxPlan) -> (Vec<FaxPacket>, FaxTruth) {
    let mut s = Session {
        packets: Vec::new(),
        last: [None, None],
        seq: plan.seq0,
        t_ns: 0,
        truth: FaxTruth {
            packets: [0, 0],
            frames: [Vec::new(), Vec::new()],
            pages: 0,
            result: FaxResult::Interrupted,
            modulation: IfpType::Data(V17_14400),
        },
        redundancy: plan.redundancy,
    };
    s.indicator(true, 1, 0); // CNG
    s.indicator(false, 2, 20); // CED
    s.frame(false, fcf::DIS, &[0x00, 0x00, 0x00]);
    s.frame(true, fcf::DCS | 0x80, &[0x00, 0x00, 0x00]);
    s.image(5); // the training check (TCF)
    s.frame(false, fcf::CFR | 0x80, &[]);
    for page in 1..=plan.pages {
        let last = page == plan.pages;
        s.image(plan.page_packets);
        s.frame(true, if last { fcf::EOP } else { fcf::MPS } | 0x80, &[]);
        if last && !plan.complete {
            return (s.packets, s.truth);
        }
        s.frame(false, fcf::MCF | 0x80, &[]);
        s.truth.pages += 1;
    }
    s.frame(true, fcf::DCN | 0x80, &[]);
    s.truth.result = FaxResult::Completed;
    (s.packets, s.truth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::t38::{FaxSummary, T38Flow, UdptlPacket};

    #[test]
    fn the_monitor_reads_the_session_it_was_made_from() {
        for complete in [true, false] {
            let plan = FaxPlan {
                pages: 3,
                complete,
                seq0: [0xfff0, 7],
                ..FaxPlan::default()
            };
            let (packets, truth) = fax_session(&plan);
            let a: std::net::SocketAddr = "192.0.2.1:4000".parse().unwrap();
            let b: std::net::SocketAddr = "192.0.2.2:5000".parse().unwrap();
            let mut flows: [Option<T38Flow>; 2] = [None, None];
            for p in &packets {
                let u = UdptlPacket::parse(&p.udptl).unwrap();
                let d = usize::from(!p.from_caller);
                match &mut flows[d] {
                    Some(f) => f.take(p.at_ns, &u),
                    None => flows[d] = Some(T38Flow::new(a, b, p.at_ns, &u)),
                }
            }
            let flows = flows.map(Option::unwrap);
            for (d, flow) in flows.iter().enumerate() {
                assert_eq!(flow.packets, truth.packets[d]);
                assert_eq!(flow.lost, 0);
                let got: Vec<u8> = flow.t30.iter().map(|f| f.fcf).collect();
                assert_eq!(got, truth.frames[d]);
                assert!(flow.redundant > 0);
            }
            let s = FaxSummary::of(&flows).unwrap();
            assert_eq!(s.pages, Some(truth.pages));
            assert_eq!(s.result, Some(truth.result));
            assert_eq!(s.modulation, Some(truth.modulation));
        }
    }
}
