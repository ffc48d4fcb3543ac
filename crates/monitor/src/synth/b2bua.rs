//! Two-leg calls through a back-to-back user agent, as Asterisk makes them: a phone's INVITE to
//! the PBX (the A leg), then the PBX's own INVITE to a trunk with a Call-ID of its own (the B
//! leg), each answered and hung up in step. The ground truth is which B leg belongs to which A
//! leg, for the linker's tests and benchmarks. Signalling only: no SDP, no RTP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// What the calls look like.
#[derive(Debug, Clone)]
pub struct B2buaConfig {
    pub calls: usize,
    /// The first A leg's INVITE, ns since the epoch.
    pub start_ns: i64,
    /// Between two calls' A-leg INVITEs.
    pub spacing_ms: u64,
    /// From an A leg's INVITE to its B leg's.
    pub leg_delay_ms: u64,
    /// From the answer to the BYE.
    pub talk_ms: u64,
    pub pbx: SocketAddr,
    pub trunk: SocketAddr,
    /// The B leg carries this header with the A leg's Call-ID (`X-CID`), if set.
    pub header: Option<String>,
    /// What the phone dials before the number (an outside-line `9`), which the B leg lacks.
    pub dial_prefix: String,
    /// Every this many calls share their called number with the call before (0: never), as
    /// two callers phoning the same number at once.
    pub same_number_every: usize,
    /// The B legs' caller (a trunk's one number), instead of the phone's extension.
    pub trunk_caller: Option<String>,
}

impl Default for B2buaConfig {
    fn default() -> Self {
        B2buaConfig {
            calls: 10,
            start_ns: 1_700_000_000_000_000_000,
            spacing_ms: 100,
            leg_delay_ms: 30,
            talk_ms: 2_000,
            pbx: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5060),
            trunk: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 5)), 5060),
            header: None,
            dial_prefix: "9".into(),
            same_number_every: 0,
            trunk_caller: None,
        }
    }
}

/// One SIP datagram of the calls.
#[derive(Debug, Clone)]
pub struct SipPacket {
    pub ts_ns: i64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: String,
    /// This is a B leg's INVITE: the index of its pair.
    pub b_invite_of: Option<usize>,
}

/// One call's two legs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegPair {
    pub a_call_id: String,
    pub b_call_id: String,
    /// The A leg's INVITE.
    pub a_start_ns: i64,
}

/// The phone of call `i`: one per call, 10.1.x.y.
fn phone(i: usize) -> SocketAddr {
    let n = i as u32 + 10;
    let ip = Ipv4Addr::new(10, 1, (n >> 8) as u8, n as u8);
    SocketAddr::new(IpAddr::V4(ip), 5060)
}

struct Leg<'a> {
    call_id: &'a str,
    caller: &'a str,
    called: &'a str,
    from: SocketAddr,
    to: SocketAddr,
    extra: &'a str,
}

impl Leg<'_> {
    fn request(&self, method: &str, cseq: u32, tagged: bool, reverse: bool) -> String {
        let (from, to) = if reverse {
            (self.to, self.from)
        } else {
            (self.from, self.to)
        };
        let to_tag = if tagged { ";tag=b" } else { "" };
        let extra = if method == "INVITE" { self.extra } else { "" };
        format!(
            "{method} sip:{called}@{to} SIP/2.0\r\nVia: SIP/2.0/UDP {from};branch=z9hG4bK{method}{cseq}{id}\r\n\
             From: <sip:{caller}@{a}>;tag=a\r\nTo: <sip:{called}@{b}>{to_tag}\r\nCall-ID: {id}\r\n\
             CSeq: {cseq} {method}\r\nMax-Forwards: 70\r\n{extra}Content-Length: 0\r\n\r\n",
            called = self.called,
            caller = self.caller,
            id = self.call_id,
            a = self.from.ip(),
            b = self.to.ip(),
        )
    }

    fn response(&self, code: u16, reason: &str, method: &str, cseq: u32, reverse: bool) -> String {
        let via = if reverse { self.to } else { self.from };
        let to_tag = if code > 100 { ";tag=b" } else { "" };
        format!(
            "SIP/2.0 {code} {reason}\r\nVia: SIP/2.0/UDP {via};branch=z9hG4bK{method}{cseq}{id}\r\n\
             From: <sip:{caller}@{a}>;tag=a\r\nTo: <sip:{called}@{b}>{to_tag}\r\nCall-ID: {id}\r\n\
             CSeq: {cseq} {method}\r\nContent-Length: 0\r\n\r\n",
            called = self.called,
            caller = self.caller,
            id = self.call_id,
            a = self.from.ip(),
            b = self.to.ip(),
        )
    }
}

/// The calls' SIP in time order, and which legs pair up.
pub fn b2bua_calls(cfg: &B2buaConfig) -> (Vec<SipPacket>, Vec<LegPair>) {
    let ms = 1_000_000i64;
    let mut out = Vec::new();
    let mut pairs = Vec::new();
    let mut number = 0usize;
    for i in 0..cfg.calls {
        if i == 0 || cfg.same_number_every == 0 || i % cfg.same_number_every != 0 {
            number = i;
        }
        let t0 = cfg.start_ns + i as i64 * cfg.spacing_ms as i64 * ms;
        let tb = t0 + cfg.leg_delay_ms as i64 * ms;
        let a_id = format!("a{i}@phone");
        let b_id = format!("b{i}-pbx");
        let national = format!("030{:07}", 1_000_000 + number);
        let dialled = format!("{}{national}", cfg.dial_prefix);
        let ext = format!("{}", 200 + i % 800);
        let extra = cfg
            .header
            .as_ref()
            .map(|h| format!("{h}: {a_id}\r\n"))
            .unwrap_or_default();
        let a = Leg {
            call_id: &a_id,
            caller: &ext,
            called: &dialled,
            from: phone(i),
            to: cfg.pbx,
            extra: "",
        };
        let b = Leg {
            call_id: &b_id,
            caller: cfg.trunk_caller.as_deref().unwrap_or(&ext),
            called: &national,
            from: cfg.pbx,
            to: cfg.trunk,
            extra: &extra,
        };
        let answer = tb + 500 * ms;
        let bye = answer + cfg.talk_ms as i64 * ms;
        let mut push = |ts_ns: i64, leg: &Leg<'_>, back: bool, payload: String| {
            let (src, dst) = if back {
                (leg.to, leg.from)
            } else {
                (leg.from, leg.to)
            };
            out.push(SipPacket {
                ts_ns,
                src,
                dst,
                payload,
                b_invite_of: None,
            });
        };
        push(t0, &a, false, a.request("INVITE", 1, false, false));
        push(
            t0 + ms,
            &a,
            true,
            a.response(100, "Trying", "INVITE", 1, false),
        );
        push(tb, &b, false, b.request("INVITE", 1, false, false));
        push(
            tb + 100 * ms,
            &b,
            true,
            b.response(180, "Ringing", "INVITE", 1, false),
        );
        push(
            tb + 101 * ms,
            &a,
            true,
            a.response(180, "Ringing", "INVITE", 1, false),
        );
        push(answer, &b, true, b.response(200, "OK", "INVITE", 1, false));
        push(answer + ms, &b, false, b.request("ACK", 1, true, false));
        push(
            answer + ms,
            &a,
            true,
            a.response(200, "OK", "INVITE", 1, false),
        );
        push(answer + 2 * ms, &a, false, a.request("ACK", 1, true, false));
        push(bye, &a, false, a.request("BYE", 2, true, false));
        push(bye + ms, &a, true, a.response(200, "OK", "BYE", 2, false));
        push(bye + ms, &b, false, b.request("BYE", 2, true, false));
        push(
            bye + 20 * ms,
            &b,
            true,
            b.response(200, "OK", "BYE", 2, false),
        );
        let n = out.len();
        out[n - 11].b_invite_of = Some(i);
        pairs.push(LegPair {
            a_call_id: a_id.clone(),
            b_call_id: b_id.clone(),
            a_start_ns: t0,
        });
    }
    out.sort_by_key(|p| p.ts_ns);
    (out, pairs)
}
