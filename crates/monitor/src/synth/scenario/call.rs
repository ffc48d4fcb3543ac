//! One call or one REGISTER chain put on the timeline, returning its ground truth.

use super::sip::{Agent, Dialog, Register, Side, Txn, sdp};
use super::timeline::{RtpRun, Timeline};
use super::{Direction, TruthCall, TruthRegistration};

pub(super) const MS: i64 = 1_000_000;
pub(super) const PTIME_MS: u32 = 20;

/// What one direction of an answered call's audio does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Media {
    /// RTP from the answer to the hang-up.
    Full,
    /// No RTP at all.
    Missing,
    /// RTP that stops this long before the others' end.
    StopsEarly { before_end_ms: u32 },
}

/// How a call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// Answered after ringing; audio for `media_ms`, each direction as `media` says (caller to
    /// callee first).
    Answered {
        media_ms: u32,
        caller_hangs_up: bool,
        media: [Media; 2],
    },
    /// 486 Busy Here after ringing.
    Busy,
    /// The caller gives up while it rings: CANCEL, 487.
    Cancelled,
    /// Refused at once with this final status (e.g. `503 Service Unavailable`).
    Refused { status: &'static str },
}

/// One INVITE dialog to write.
#[derive(Debug, Clone)]
pub(super) struct CallPlan<'a> {
    pub background: bool,
    pub call_id: String,
    pub caller: &'a Agent,
    pub callee: &'a Agent,
    pub calling: String,
    pub called: String,
    pub start_ns: i64,
    /// From the INVITE to the answer (or the 486, or the CANCEL).
    pub ring_ms: u32,
    pub end: End,
    /// 0 (PCMU) or 8 (PCMA).
    pub pt: u8,
    /// RTP ports of the caller and the callee.
    pub ports: [u16; 2],
    /// Tags, branches, SSRCs and sequence numbers derive from it.
    pub seed: u64,
}

/// Writes the call's SIP and RTP; returns its truth.
pub(super) fn call(tl: &mut Timeline, p: &CallPlan<'_>) -> TruthCall {
    let d = Dialog {
        call_id: &p.call_id,
        caller: p.caller,
        callee: p.callee,
        calling: &p.calling,
        called: &p.called,
        caller_tag: format!("{:08x}", p.seed as u32),
        callee_tag: format!("as{:08x}", (p.seed >> 32) as u32),
        branch: format!("{:012x}", p.seed & 0xffff_ffff_ffff),
    };
    let (a, b) = (p.caller.addr, p.callee.addr);
    let txn = |method, side, cseq, id, tagged| Txn {
        method,
        side,
        cseq,
        id,
        tagged,
    };
    let req = |method, side, cseq, id, tagged, extra, body| {
        d.request(&txn(method, side, cseq, id, tagged), extra, body)
    };
    let resp = |status, method, side, cseq, id, tagged, extra, body| {
        d.response(status, &txn(method, side, cseq, id, tagged), extra, body)
    };
    let session = p.seed % 1_000_000_000;
    let offer = sdp(session, p.caller.media_ip, p.ports[0], p.pt, PTIME_MS);
    let mut t = p.start_ns;
    tl.sip(
        t,
        a,
        b,
        req("INVITE", Side::Caller, 1, 1, false, "", &offer),
    );
    tl.sip(
        t + 3 * MS,
        b,
        a,
        resp("100 Trying", "INVITE", Side::Caller, 1, 1, false, "", ""),
    );
    let mut truth = TruthCall {
        call_id: p.call_id.clone(),
        background: p.background,
        caller: p.calling.clone(),
        called: p.called.clone(),
        caller_addr: a,
        callee_addr: b,
        user_agent: p.caller.user_agent.clone(),
        invite_ns: p.start_ns,
        answer_ns: None,
        end_ns: 0,
        final_code: 0,
        rtp_packets: [0, 0],
        last_rtp_ns: [None, None],
        silent: None,
    };
    // A non-2xx final answer and its ACK (same transaction as the INVITE).
    let refuse = |tl: &mut Timeline, t: i64, status: &'static str| {
        tl.sip(
            t,
            b,
            a,
            resp(status, "INVITE", Side::Caller, 1, 1, true, "", ""),
        );
        tl.sip(
            t + 2 * MS,
            a,
            b,
            req("ACK", Side::Caller, 1, 1, true, "", ""),
        );
    };
    if let End::Refused { status } = p.end {
        t += 80 * MS;
        refuse(tl, t, status);
        truth.final_code = status_code(status);
        truth.end_ns = t;
        return truth;
    }
    tl.sip(
        t + 40 * MS,
        b,
        a,
        resp("180 Ringing", "INVITE", Side::Caller, 1, 1, true, "", ""),
    );
    t += i64::from(p.ring_ms) * MS;
    truth.end_ns = t;
    match p.end {
        End::Refused { .. } => {}
        End::Busy => {
            refuse(tl, t, "486 Busy Here");
            truth.final_code = 486;
        }
        End::Cancelled => {
            tl.sip(t, a, b, req("CANCEL", Side::Caller, 1, 1, false, "", ""));
            tl.sip(
                t + 2 * MS,
                b,
                a,
                resp("200 OK", "CANCEL", Side::Caller, 1, 1, true, "", ""),
            );
            refuse(tl, t + 4 * MS, "487 Request Terminated");
            truth.final_code = 487;
        }
        End::Answered {
            media_ms,
            caller_hangs_up,
            media,
        } => {
            let answer = sdp(session + 1, p.callee.media_ip, p.ports[1], p.pt, PTIME_MS);
            tl.sip(
                t,
                b,
                a,
                resp("200 OK", "INVITE", Side::Caller, 1, 1, true, "", &answer),
            );
            tl.sip(
                t + 8 * MS,
                a,
                b,
                req("ACK", Side::Caller, 1, 2, true, "", ""),
            );
            truth.answer_ns = Some(t);
            truth.final_code = 200;
            let media_start = t + 20 * MS;
            let full = media_ms / PTIME_MS;
            for (dir, m) in media.iter().enumerate() {
                let count = match *m {
                    Media::Full => full,
                    Media::Missing => 0,
                    Media::StopsEarly { before_end_ms } => full - before_end_ms / PTIME_MS,
                };
                let (src, dst) = (
                    std::net::SocketAddr::new(p.caller.media_ip, p.ports[0]),
                    std::net::SocketAddr::new(p.callee.media_ip, p.ports[1]),
                );
                let (src, dst) = if dir == 0 { (src, dst) } else { (dst, src) };
                let mix = p.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (dir * 16);
                tl.rtp(RtpRun {
                    start_ns: media_start,
                    count,
                    ptime_ms: PTIME_MS,
                    src,
                    dst,
                    ssrc: mix as u32 | 1,
                    seq0: (mix >> 32) as u16,
                    ts0: (mix >> 20) as u32,
                    pt: p.pt,
                });
                truth.rtp_packets[dir] = u64::from(count);
                truth.last_rtp_ns[dir] = (count > 0)
                    .then(|| media_start + i64::from(count - 1) * i64::from(PTIME_MS) * MS);
                if *m != Media::Full {
                    truth.silent = Some(if dir == 0 {
                        Direction::CallerToCallee
                    } else {
                        Direction::CalleeToCaller
                    });
                }
            }
            let bye = media_start + i64::from(full) * i64::from(PTIME_MS) * MS + 30 * MS;
            if caller_hangs_up {
                tl.sip(bye, a, b, req("BYE", Side::Caller, 2, 3, true, "", ""));
                tl.sip(
                    bye + 3 * MS,
                    b,
                    a,
                    resp("200 OK", "BYE", Side::Caller, 2, 3, true, "", ""),
                );
            } else {
                let reason = "Reason: Q.850;cause=16;text=\"Normal Clearing\"\r\n";
                tl.sip(
                    bye,
                    b,
                    a,
                    req("BYE", Side::Callee, 102, 4, true, reason, ""),
                );
                tl.sip(
                    bye + 3 * MS,
                    a,
                    b,
                    resp("200 OK", "BYE", Side::Callee, 102, 4, true, "", ""),
                );
            }
            truth.end_ns = bye;
        }
    }
    truth
}

fn status_code(status: &str) -> u16 {
    status
        .split(' ')
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// How the second REGISTER of a chain is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Second {
    /// 200 OK: registered.
    Accepted,
    /// 403 Forbidden.
    Forbidden,
    /// 401 again, with a new nonce.
    Challenged,
}

/// A REGISTER chain: a request, its 401 challenge, the request again with credentials
/// `gap_ms` later, and its answer.
pub(super) fn register(
    tl: &mut Timeline,
    r: &Register<'_>,
    start_ns: i64,
    gap_ms: u32,
    second: Second,
    seed: u64,
) -> TruthRegistration {
    let (src, dst) = (r.agent.addr, r.registrar.addr);
    let nonce = format!("{:016x}", seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let hash = format!(
        "{:016x}{:016x}",
        seed.rotate_left(17) ^ 0x5bd1_e995,
        seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    );
    tl.sip(start_ns, src, dst, r.request(1, None));
    tl.sip(
        start_ns + 2 * MS,
        dst,
        src,
        r.response(1, "401 Unauthorized", Some(&nonce)),
    );
    let t = start_ns + i64::from(gap_ms) * MS;
    tl.sip(t, src, dst, r.request(2, Some((&nonce, &hash))));
    let (final_code, last) = match second {
        Second::Accepted => (200, r.response(2, "200 OK", None)),
        Second::Forbidden => (403, r.response(2, "403 Forbidden", None)),
        Second::Challenged => {
            let again = format!("{:016x}", seed.rotate_left(31) ^ 0xa5a5);
            (401, r.response(2, "401 Unauthorized", Some(&again)))
        }
    };
    tl.sip(t + 2 * MS, dst, src, last);
    TruthRegistration {
        call_id: r.call_id.to_string(),
        user: r.user.to_string(),
        src,
        user_agent: r.agent.user_agent.clone(),
        final_code,
        challenges: if second == Second::Challenged { 2 } else { 1 },
        at_ns: start_ns,
    }
}
