//! When a port's media changes kind: SDP offer and answer (RFC 3264) as the front stage reads
//! them, and the RTP that goes on regardless.
//!
//! An offer proposes, the answer decides. A re-INVITE that offers `m=image … udptl t38` on the
//! port the audio uses changes nothing until it is accepted: answered 488 (or any final
//! failure), the audio goes on, and a monitor that believed the offer would read it as T.38 (a
//! bogus fax, the audio counted lost). So the front applies an offer's T.38 streams, and its
//! RTP streams on addresses the call has on T.38 (the way back to audio), only when a 2xx or a
//! 18x with SDP answers its CSeq with a stream of that kind; a refusal drops them
//! ([`PendingOffers`]). Nothing is lost by the wait: T.38 flows only once the answer is sent.
//! Everything else an SDP says (audio and video offers, the answer's own streams) applies from
//! its packet on, so that early media is linked to its call.
//!
//! And a datagram that continues an RTP stream — version 2, the stream's SSRC, a sequence
//! number just after the last ([`RtpTail`]) — is RTP whatever was offered or accepted since:
//! audio still in flight while the answer travels, or sent after it by a gateway slower to
//! switch. A UDPTL packet would have to carry the stream's SSRC in its bytes 8-11 to pass.

use std::collections::HashMap;

use sip::Message;
use sip::sdp::Sdp;

use crate::dialog::is_t38;
use crate::rtp::RtpHeader;

/// Offers awaiting their answer at most, by default (one per call at a time).
pub const PENDING_OFFERS_MAX: usize = 100_000;

/// Sequence numbers ahead of a stream's last that still continue it (RFC 3550 A.1's
/// MAX_DROPOUT), and behind it (MAX_MISORDER: a packet reordered).
const CONTINUES_AHEAD: u16 = 3000;
const CONTINUES_BEHIND: u16 = 100;

/// The CSeq number of a request that carries an offer (INVITE or UPDATE with SDP); `None` for
/// anything else (a response's SDP, an ACK's, is an answer and applies at once).
pub(crate) fn offer_cseq(m: &Message<'_>) -> Option<u32> {
    match m.start {
        sip::StartLine::Request {
            method: "INVITE" | "UPDATE",
            ..
        } => m.cseq().map(|c| c.0),
        _ => None,
    }
}

/// An offer's changes of kind, held until its answer.
struct Pending<K, E> {
    cseq: u32,
    ts_ns: i64,
    /// Each address with what the offer makes of it, and whether that is T.38.
    changes: Vec<(K, E, bool)>,
}

/// Offers whose changes of kind wait for their answer, by Call-ID (the latest of each call).
/// Bounded by [`PENDING_OFFERS_MAX`] (past it an offer applies at once); the front forgets
/// an offer unanswered for `call_idle_timeout_ms`.
pub(crate) struct PendingOffers<K, E> {
    offers: HashMap<Box<str>, Pending<K, E>, foldhash::quality::RandomState>,
    max: usize,
}

impl<K, E> PendingOffers<K, E> {
    pub fn new(max: usize) -> Self {
        PendingOffers {
            offers: HashMap::default(),
            max,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.offers.is_empty()
    }

    /// Holds an offer's changes until its answer; gives them back when the table is full
    /// (they then apply at once, as if no answer could refuse them).
    pub fn hold(
        &mut self,
        call_id: &str,
        cseq: u32,
        ts_ns: i64,
        changes: Vec<(K, E, bool)>,
    ) -> Option<Vec<(K, E, bool)>> {
        if changes.is_empty() {
            return None;
        }
        if self.offers.len() >= self.max && !self.offers.contains_key(call_id) {
            return Some(changes);
        }
        self.offers.insert(
            call_id.into(),
            Pending {
                cseq,
                ts_ns,
                changes,
            },
        );
        None
    }

    /// A message of `call_id`: when it answers the call's pending offer, the changes it accepts
    /// (those whose kind the answer has on a port other than 0; all of them for a 2xx without
    /// SDP, whose answer came earlier or was not captured). A final failure drops the offer.
    pub fn settle(
        &mut self,
        call_id: &str,
        m: &Message<'_>,
        answer: Option<&Sdp<'_>>,
    ) -> Vec<(K, E)> {
        let Some(code) = m.status() else {
            return Vec::new();
        };
        let answers = self.offers.get(call_id).is_some_and(|p| {
            m.cseq()
                .is_some_and(|(n, method)| n == p.cseq && matches!(method, "INVITE" | "UPDATE"))
        });
        if !answers || (code < 200 && answer.is_none()) {
            return Vec::new();
        }
        let Some(p) = self.offers.remove(call_id) else {
            return Vec::new();
        };
        if code >= 300 {
            return Vec::new();
        }
        p.changes
            .into_iter()
            .filter(|(_, _, t38)| {
                answer.is_none_or(|a| a.media.iter().any(|m| m.port != 0 && is_t38(m) == *t38))
            })
            .map(|(k, e, _)| (k, e))
            .collect()
    }

    /// Forgets the offers for which `keep` is false (given when each was made).
    pub fn retain(&mut self, keep: impl Fn(i64) -> bool) {
        self.offers.retain(|_, p| keep(p.ts_ns));
    }
}

/// The last RTP packet that reached an address one way: a datagram continuing it is RTP.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RtpTail {
    ssrc: u32,
    seq: u16,
    seen: bool,
}

impl RtpTail {
    pub fn of(h: &RtpHeader) -> RtpTail {
        RtpTail {
            ssrc: h.ssrc,
            seq: h.seq,
            seen: true,
        }
    }

    /// Whether `h` continues the stream: its SSRC, a sequence number up to
    /// [`CONTINUES_AHEAD`] after the last or [`CONTINUES_BEHIND`] before it.
    pub fn continued_by(&self, h: &RtpHeader) -> bool {
        let ahead = h.seq.wrapping_sub(self.seq);
        self.seen
            && h.ssrc == self.ssrc
            && (ahead <= CONTINUES_AHEAD || ahead >= 0u16.wrapping_sub(CONTINUES_BEHIND))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Vec<u8> {
        text.replace('\n', "\r\n").into_bytes()
    }

    fn response(code: u16, cseq: &str, sdp: &str) -> Vec<u8> {
        msg(&format!(
            "SIP/2.0 {code} X\nCall-ID: c1\nCSeq: {cseq}\n{}Content-Length: {}\n\n{sdp}",
            if sdp.is_empty() {
                ""
            } else {
                "Content-Type: application/sdp\n"
            },
            sdp.len()
        ))
    }

    const IMAGE: &str = "v=0\r\nc=IN IP4 10.0.0.2\r\nm=image 5000 udptl t38\r\n";
    const DECLINED: &str = "v=0\r\nc=IN IP4 10.0.0.2\r\nm=image 0 udptl t38\r\n";

    fn settle(
        offers: &mut PendingOffers<u8, &'static str>,
        bytes: &[u8],
    ) -> Vec<(u8, &'static str)> {
        let m = Message::parse(bytes).unwrap();
        let sdp = m.has_sdp().then(|| Sdp::parse(m.body).unwrap());
        offers.settle("c1", &m, sdp.as_ref())
    }

    #[test]
    fn an_offer_applies_when_its_answer_accepts_it() {
        let mut offers = PendingOffers::new(4);
        let hold = |o: &mut PendingOffers<u8, &str>| {
            assert!(o.hold("c1", 2, 0, vec![(1, "t38", true)]).is_none());
        };
        hold(&mut offers);
        // Another transaction, a 100 Trying, a 180 without SDP: still pending.
        assert!(settle(&mut offers, &response(200, "1 INVITE", "")).is_empty());
        assert!(settle(&mut offers, &response(100, "2 INVITE", "")).is_empty());
        assert!(settle(&mut offers, &response(180, "2 INVITE", "")).is_empty());
        assert!(!offers.is_empty());
        assert_eq!(
            settle(&mut offers, &response(200, "2 INVITE", IMAGE)),
            [(1, "t38")]
        );
        assert!(offers.is_empty());
        // Refused, or accepted with the image stream declined: nothing changes.
        hold(&mut offers);
        assert!(settle(&mut offers, &response(488, "2 INVITE", "")).is_empty());
        assert!(offers.is_empty(), "a refusal settles the offer");
        hold(&mut offers);
        assert!(settle(&mut offers, &response(200, "2 INVITE", DECLINED)).is_empty());
        // A 2xx without SDP accepts; a full table gives the changes back.
        hold(&mut offers);
        assert_eq!(
            settle(&mut offers, &response(200, "2 INVITE", "")),
            [(1, "t38")]
        );
        let mut full = PendingOffers::new(0);
        assert_eq!(
            full.hold("c1", 2, 0, vec![(1, "t38", true)])
                .map(|v| v.len()),
            Some(1)
        );
    }

    #[test]
    fn a_stream_is_continued_by_its_ssrc_and_next_sequence_numbers() {
        let h = |ssrc: u32, seq: u16| RtpHeader {
            marker: false,
            payload_type: 8,
            seq,
            timestamp: 0,
            ssrc,
            payload_len: 160,
            payload_off: 12,
        };
        let tail = RtpTail::of(&h(7, 65_530));
        assert!(tail.continued_by(&h(7, 65_531)));
        assert!(tail.continued_by(&h(7, 10)), "across the wrap");
        assert!(tail.continued_by(&h(7, 65_500)), "reordered");
        assert!(!tail.continued_by(&h(8, 65_531)), "another SSRC");
        assert!(!tail.continued_by(&h(7, 30_000)), "far from the last");
        assert!(!RtpTail::default().continued_by(&h(0, 1)), "nothing seen");
    }
}
