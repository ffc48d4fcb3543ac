//! SIP dialogs keyed by Call-ID: the INVITE transaction and its provisional and final responses,
//! ACK, CANCEL, BYE, re-INVITEs; REGISTER transactions kept apart with their outcome.

use std::net::SocketAddr;

use sip::Message;

/// Which side of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    Caller,
    Callee,
}

impl Party {
    pub fn as_str(self) -> &'static str {
        match self {
            Party::Caller => "caller",
            Party::Callee => "callee",
        }
    }
}

/// Where a call got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallState {
    /// INVITE sent, no response other than 100 yet.
    Calling,
    /// A 18x (ringing or session progress) came.
    Early,
    /// A 2xx answered the INVITE.
    Answered,
    /// Answered and then ended by BYE.
    Ended,
    /// The INVITE got a final 3xx-6xx (other than 487 after CANCEL).
    Failed,
    /// The caller cancelled before an answer.
    Cancelled,
}

impl CallState {
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Calling => "calling",
            CallState::Early => "early",
            CallState::Answered => "answered",
            CallState::Ended => "ended",
            CallState::Failed => "failed",
            CallState::Cancelled => "cancelled",
        }
    }

    /// True once nothing more is expected but stray retransmissions (or, after a 401/407, an
    /// authenticated retry).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            CallState::Ended | CallState::Failed | CallState::Cancelled
        )
    }
}

/// One call's signalling state. Strings are boxed to keep the struct small (about 200 bytes
/// plus the strings), since a monitor holds hundreds of thousands of these.
#[derive(Debug, Clone)]
pub struct Dialog {
    pub call_id: Box<str>,
    pub caller: Box<str>,
    pub called: Box<str>,
    pub caller_tag: Box<str>,
    /// Signalling addresses of the first INVITE.
    pub caller_addr: SocketAddr,
    pub callee_addr: SocketAddr,
    pub invite_ns: i64,
    pub ringing_ns: Option<i64>,
    pub answer_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub last_activity_ns: i64,
    pub last_code: u16,
    pub last_reason: Box<str>,
    pub hangup_by: Option<Party>,
    pub q850_cause: Option<u16>,
    pub state: CallState,
    pub invite_cseq: u32,
    pub reinvites: u16,
    pub sip_messages: u32,
    /// The RTP streams tied to this call by its SDP, in order of first packet.
    pub streams: Vec<crate::rtp::StreamKey>,
    /// What few calls have: INFO digits, named dynamic payload types. Boxed, so that a call
    /// without them costs one pointer.
    extras: Option<Box<DialogExtras>>,
}

/// The rarer parts of a dialog.
#[derive(Debug, Clone, Default)]
struct DialogExtras {
    /// Keypad digits sent in INFO requests, in order (at most [`INFO_DIGITS_MAX`]).
    dtmf: Vec<InfoDtmf>,
    /// Dynamic payload types and the encodings the SDP named them (`96 H264`), the latest
    /// naming of each (at most [`CODECS_MAX`]).
    codecs: Vec<(u8, Box<str>)>,
}

/// At most this many named dynamic payload types are kept per call.
pub const CODECS_MAX: usize = 16;

/// At most this many INFO digits are kept per call.
pub const INFO_DIGITS_MAX: usize = 256;

/// A keypad digit sent in a SIP INFO request (`application/dtmf-relay` or `application/dtmf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfoDtmf {
    /// Capture time of the INFO, ns since the epoch.
    pub ts_ns: i64,
    pub digit: char,
    pub duration_ms: Option<u32>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The request's CSeq: a retransmission of the same INFO is counted once.
    pub cseq: u32,
}

impl Dialog {
    /// A dialog from its first INVITE.
    pub fn from_invite(ts_ns: i64, src: SocketAddr, dst: SocketAddr, m: &Message<'_>) -> Dialog {
        let from = m.from();
        let to = m.to();
        Dialog {
            call_id: m.call_id().unwrap_or("").into(),
            caller: from.map(|f| f.user()).unwrap_or("").into(),
            called: to.map(|t| t.user()).unwrap_or("").into(),
            caller_tag: from.and_then(|f| f.tag).unwrap_or("").into(),
            caller_addr: src,
            callee_addr: dst,
            invite_ns: ts_ns,
            ringing_ns: None,
            answer_ns: None,
            end_ns: None,
            last_activity_ns: ts_ns,
            last_code: 0,
            last_reason: "".into(),
            hangup_by: None,
            q850_cause: None,
            state: CallState::Calling,
            invite_cseq: m.cseq().map(|c| c.0).unwrap_or(0),
            reinvites: 0,
            sip_messages: 0,
            streams: Vec::new(),
            extras: None,
        }
    }

    /// Keypad digits sent in INFO requests, in order (at most [`INFO_DIGITS_MAX`]).
    pub fn info_digits(&self) -> &[InfoDtmf] {
        self.extras.as_ref().map_or(&[], |e| &e.dtmf)
    }

    /// Dynamic payload types and the encodings the SDP named them (`96 H264`), the latest
    /// naming of each (at most [`CODECS_MAX`]).
    pub fn codecs(&self) -> &[(u8, Box<str>)] {
        self.extras.as_ref().map_or(&[], |e| &e.codecs)
    }

    /// Takes the names an SDP gave dynamic payload types.
    pub fn learn_codecs(&mut self, codecs: &[(u8, Box<str>)]) {
        if codecs.is_empty() {
            return;
        }
        let known = &mut self.extras.get_or_insert_default().codecs;
        for (pt, name) in codecs {
            if let Some(c) = known.iter_mut().find(|(p, _)| p == pt) {
                if c.1 != *name {
                    c.1 = name.clone();
                }
            } else if known.len() < CODECS_MAX {
                known.push((*pt, name.clone()));
            }
        }
    }

    /// Updates the dialog with one message of its Call-ID.
    pub fn on_message(&mut self, ts_ns: i64, src: SocketAddr, dst: SocketAddr, m: &Message<'_>) {
        self.sip_messages = self.sip_messages.saturating_add(1);
        self.last_activity_ns = ts_ns;
        let from_caller = || {
            m.from()
                .and_then(|f| f.tag)
                .map(|t| *t == *self.caller_tag)
                .unwrap_or(src == self.caller_addr)
        };
        match m.start {
            sip::StartLine::Request { method, .. } => match method {
                "INVITE" => {
                    let cseq = m.cseq().map(|c| c.0).unwrap_or(0);
                    if self.answer_ns.is_none() && cseq > self.invite_cseq {
                        // A new INVITE transaction before any answer (typically the retry with
                        // credentials after 401/407) continues the same call.
                        self.invite_cseq = cseq;
                        self.state = CallState::Calling;
                        self.end_ns = None;
                        self.hangup_by = None;
                    } else if cseq != self.invite_cseq && self.answer_ns.is_some() {
                        self.reinvites = self.reinvites.saturating_add(1);
                    }
                }
                "CANCEL" if self.answer_ns.is_none() && !self.state.is_final() => {
                    self.hangup_by = Some(Party::Caller);
                    self.end_ns.get_or_insert(ts_ns);
                    self.state = CallState::Cancelled;
                    if let Some(c) = m.q850_cause() {
                        self.q850_cause = Some(c);
                    }
                }
                "INFO" => {
                    if let Some(d) = m.info_digit() {
                        let cseq = m.cseq().map(|c| c.0).unwrap_or(0);
                        let dtmf = &mut self.extras.get_or_insert_default().dtmf;
                        let repeated = dtmf.iter().any(|e| e.cseq == cseq && e.src == src);
                        if !repeated && dtmf.len() < INFO_DIGITS_MAX {
                            dtmf.push(InfoDtmf {
                                ts_ns,
                                digit: d.digit,
                                duration_ms: d.duration_ms,
                                src,
                                dst,
                                cseq,
                            });
                        }
                    }
                }
                "BYE" => {
                    if self.hangup_by.is_none() || self.state != CallState::Ended {
                        self.hangup_by = Some(if from_caller() {
                            Party::Caller
                        } else {
                            Party::Callee
                        });
                    }
                    self.end_ns.get_or_insert(ts_ns);
                    if self.answer_ns.is_some() {
                        self.state = CallState::Ended;
                    }
                    if let Some(c) = m.q850_cause() {
                        self.q850_cause = Some(c);
                    }
                }
                _ => {}
            },
            sip::StartLine::Response { code, reason } => {
                let Some((cseq, method)) = m.cseq() else {
                    return;
                };
                if method != "INVITE" {
                    return;
                }
                if let Some(c) = m.q850_cause() {
                    self.q850_cause = Some(c);
                }
                let initial = cseq == self.invite_cseq;
                if !initial && self.answer_ns.is_some() {
                    // A re-INVITE's response leaves the call's outcome alone.
                    return;
                }
                self.last_code = code;
                if *self.last_reason != *reason {
                    self.last_reason = reason.into();
                }
                match code {
                    180..=189 => {
                        self.ringing_ns.get_or_insert(ts_ns);
                        if self.state == CallState::Calling {
                            self.state = CallState::Early;
                        }
                    }
                    200..=299 => {
                        if self.answer_ns.is_none() {
                            self.answer_ns = Some(ts_ns);
                        }
                        if !matches!(self.state, CallState::Ended) {
                            self.state = CallState::Answered;
                        }
                    }
                    300..=699 if self.answer_ns.is_none() => {
                        self.end_ns.get_or_insert(ts_ns);
                        if self.state != CallState::Cancelled {
                            self.state = CallState::Failed;
                            // The side that answered with a final failure ended the call.
                            self.hangup_by.get_or_insert(Party::Callee);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A REGISTER transaction chain (one Call-ID), with its outcome.
#[derive(Debug, Clone)]
pub struct Registration {
    pub call_id: Box<str>,
    /// The To user (the address of record).
    pub user: Box<str>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub first_ns: i64,
    pub last_ns: i64,
    pub requests: u32,
    pub last_code: u16,
}

impl Registration {
    pub fn outcome(&self) -> &'static str {
        match self.last_code {
            0 => "no-response",
            200..=299 => "registered",
            401 | 407 => "challenged",
            _ => "failed",
        }
    }
}
