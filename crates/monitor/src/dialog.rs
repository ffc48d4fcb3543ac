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
    /// What the call's offers and answers said of its media as a whole.
    pub sdp: SdpFacts,
    /// User-Agents, domains, Request-URI user and the configured headers' values. Boxed: a
    /// pointer in the dialog, its strings beside it.
    pub fields: Box<CallFields>,
    /// What few calls have: INFO digits, named dynamic payload types. Boxed, so that a call
    /// without them costs one pointer.
    extras: Option<Box<DialogExtras>>,
    /// The call this dialog is a leg of, when the linker put it in another dialog's (`None`:
    /// it is its own call, or the first leg of one).
    pub link: Option<legs::Link>,
}

/// Longest User-Agent, Server, domain and Request-URI user kept for a call, in bytes (cut at a
/// character).
pub const CALL_TEXT_BYTES_MAX: usize = 256;

/// What a call's headers say beyond its numbers ([`Dialog::learn_fields`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFields {
    /// The User-Agent of the call's first INVITE (or of its retry with credentials, when the
    /// first had none).
    pub caller_ua: Box<str>,
    /// The answering side's Server header, else its User-Agent, from a response to the INVITE
    /// other than 100 (a proxy may send that one): a 2xx's replaces a provisional one's.
    pub callee_ua: Box<str>,
    /// The hosts of the first INVITE's From and To URIs, lower case.
    pub from_domain: Box<str>,
    pub to_domain: Box<str>,
    /// The user part of the first INVITE's Request-URI; empty when it has none.
    pub ruri_user: Box<str>,
    /// The configured headers' values, by lower-case name, in the order they were first seen:
    /// each from the first message of the call that carried it (several lines of one message
    /// joined with `, `, as RFC 3261 7.3.1 allows), cut at a character to the configured bytes.
    pub headers: Vec<(Box<str>, Box<str>)>,
    /// `callee_ua` came from a 2xx: later responses leave it alone.
    callee_ua_final: bool,
}

/// `s` cut to at most `max` bytes at a character boundary.
pub fn cut_at_char(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The user part of a Request-URI: `sip:600@pbx` → `600`, `tel:+4930123` → `+4930123`, none
/// for `sip:pbx.example.com`.
pub fn request_uri_user(uri: &str) -> &str {
    let tel = uri.get(..4).is_some_and(|s| s.eq_ignore_ascii_case("tel:"));
    if tel || uri.contains('@') {
        sip::uri_user(uri)
    } else {
        ""
    }
}

/// The headers to keep of each call, as the configuration names them
/// ([`crate::MonitorConfig::headers`]), and the bytes of a value kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptHeaders {
    /// Lower-case names, at most [`KEPT_HEADERS_MAX`].
    pub names: Vec<Box<str>>,
    pub value_bytes_max: usize,
}

impl Default for KeptHeaders {
    fn default() -> Self {
        KeptHeaders {
            names: Vec::new(),
            value_bytes_max: KEPT_HEADER_VALUE_BYTES_DEFAULT,
        }
    }
}

/// Headers kept per call at most (`[capture] headers`).
pub const KEPT_HEADERS_MAX: usize = 16;
/// Bytes kept of one header's value by default (`[capture] header_value_bytes_max`), and at
/// most.
pub const KEPT_HEADER_VALUE_BYTES_DEFAULT: usize = 256;
pub const KEPT_HEADER_VALUE_BYTES_MAX: usize = 4_096;

impl CallFields {
    /// From a call's first INVITE.
    fn of_invite(m: &Message<'_>) -> CallFields {
        let host = |n: Option<sip::NameAddr<'_>>| -> Box<str> {
            let h = n.map(|n| uri_host(n.uri)).unwrap_or("");
            cut_at_char(h, CALL_TEXT_BYTES_MAX)
                .to_ascii_lowercase()
                .into()
        };
        let ruri = match m.start {
            sip::StartLine::Request { uri, .. } => request_uri_user(uri),
            sip::StartLine::Response { .. } => "",
        };
        CallFields {
            caller_ua: text(m.header("user-agent")),
            from_domain: host(m.from()),
            to_domain: host(m.to()),
            ruri_user: cut_at_char(ruri, CALL_TEXT_BYTES_MAX).into(),
            ..CallFields::default()
        }
    }
}

/// A header's value as kept: cut to [`CALL_TEXT_BYTES_MAX`]; empty when absent.
fn text(v: Option<&str>) -> Box<str> {
    cut_at_char(v.unwrap_or(""), CALL_TEXT_BYTES_MAX).into()
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

/// What a call's SDP said of its media beyond addresses: facts of the call that hold even when
/// none of its media was captured. Each is set by any offer or answer of the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SdpFacts {
    /// A stream was `m=image … udptl t38`: a fax was offered, whether or not it was accepted.
    pub t38: bool,
    /// A stream was `RTP/SAVP`, `RTP/SAVPF` or `UDP/TLS/RTP/SAVPF`: its media is SRTP.
    pub srtp: bool,
}

impl SdpFacts {
    /// The facts of one SDP's streams (those not declined with port 0).
    pub fn of(sdp: &sip::sdp::Sdp<'_>) -> SdpFacts {
        let live = || sdp.media.iter().filter(|m| m.port != 0);
        SdpFacts {
            t38: live().any(|m| is_t38(m)),
            srtp: live().any(|m| crate::rtp::is_srtp_proto(m.proto)),
        }
    }

    fn merge(&mut self, o: SdpFacts) {
        self.t38 |= o.t38;
        self.srtp |= o.srtp;
    }
}

/// An `m=image … udptl …` stream: T.38 over UDPTL.
pub fn is_t38(media: &sip::sdp::Media<'_>) -> bool {
    media.kind.eq_ignore_ascii_case("image") && media.proto.eq_ignore_ascii_case("udptl")
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
            sdp: SdpFacts::default(),
            fields: Box::new(CallFields::of_invite(m)),
            extras: None,
            link: None,
        }
    }

    /// Takes what a message of the call says of its parties: the callee's Server or
    /// User-Agent from the INVITE's responses, the caller's User-Agent from a retried INVITE
    /// when the first had none, and the values of the `kept` headers not seen yet.
    pub fn learn_fields(&mut self, m: &Message<'_>, kept: &KeptHeaders) {
        let f = &mut *self.fields;
        match m.start {
            sip::StartLine::Request { method, .. } => {
                if method == "INVITE" && f.caller_ua.is_empty() && self.answer_ns.is_none() {
                    f.caller_ua = text(m.header("user-agent"));
                }
            }
            sip::StartLine::Response { code, .. } => {
                let invite = m.cseq().is_some_and(|(_, method)| method == "INVITE");
                let answer = (200..300).contains(&code);
                if invite && code > 100 && !f.callee_ua_final {
                    let ua = m.header("server").or_else(|| m.header("user-agent"));
                    if let Some(ua) = ua
                        && (answer || f.callee_ua.is_empty())
                    {
                        f.callee_ua = text(Some(ua));
                    }
                    f.callee_ua_final = answer && !f.callee_ua.is_empty();
                }
            }
        }
        for name in &kept.names {
            if f.headers.iter().any(|(n, _)| n == name) {
                continue;
            }
            let mut lines = m
                .headers
                .iter()
                .filter(|h| sip::header_name_eq(h.name, name))
                .peekable();
            if lines.peek().is_none() {
                continue;
            }
            let mut value = String::new();
            for h in lines {
                if value.len() >= kept.value_bytes_max {
                    break;
                }
                if !value.is_empty() {
                    value.push_str(", ");
                }
                value.push_str(cut_at_char(h.value, kept.value_bytes_max));
            }
            let value = cut_at_char(&value, kept.value_bytes_max);
            f.headers.push((name.clone(), value.into()));
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

    /// A T.38 stream was offered (or answered), accepted or not: see [`SdpFacts`].
    pub fn t38_offered(&self) -> bool {
        self.sdp.t38
    }

    /// Takes what an offer or answer of the call said: its facts, the names it gave dynamic
    /// payload types.
    pub fn learn_sdp(&mut self, facts: SdpFacts, codecs: &[(u8, Box<str>)]) {
        self.sdp.merge(facts);
        self.learn_codecs(codecs);
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

/// Longest Contact URI and User-Agent kept for a registration, in bytes: a registration
/// lives as long as its chain, and there may be `max_registrations` of them.
pub const REGISTRATION_TEXT_BYTES_MAX: usize = 256;

/// A REGISTER chain, with its outcome.
///
/// A chain is the REGISTER requests one phone sends for one address of record (one To user)
/// in one Call-ID, with no silence longer than `registration_idle_timeout_ms` between them:
/// the first request, its retry with credentials after a 401/407, and the refreshes that
/// follow (RFC 3261 10.2.4: a client keeps its Call-ID and raises the CSeq). A phone that
/// registers several lines may reuse one Call-ID for all of them: a request for another To
/// user starts a chain of that user's own, and each chain holds the contact, user agent and
/// expiry of its own user's requests.
///
/// A chain reports its last final result ([`Registration::outcome`]): the last final response
/// that is not a challenge — a 200 is not undone by a refresh challenged later, a 403 after
/// a 200 is a failure — and a challenge (401/407) only while no other final response came.
/// Provisional responses (100 Trying) are no result.
#[derive(Debug, Clone)]
pub struct Registration {
    pub call_id: Box<str>,
    /// The To user (the address of record).
    pub user: Box<str>,
    /// The To URI's host (the registrar's domain), without a port.
    pub domain: Box<str>,
    /// The first Contact URI of the last request that had one (`*` to remove every binding),
    /// at most [`REGISTRATION_TEXT_BYTES_MAX`] bytes.
    pub contact: Box<str>,
    /// The User-Agent of the last request that had one, at most
    /// [`REGISTRATION_TEXT_BYTES_MAX`] bytes.
    pub user_agent: Box<str>,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub first_ns: i64,
    pub last_ns: i64,
    pub requests: u32,
    /// The last final result (see the type's documentation); 0 before any.
    pub last_code: u16,
    /// Challenges (401/407) the chain received, a retransmitted one counted once.
    pub challenges: u32,
    /// The CSeq number of the last challenge, so that its retransmission is not counted again.
    challenged_cseq: Option<u32>,
    /// The expiry the last 2xx granted: its Contact's `expires` for our binding, else its
    /// Expires header, else what the request asked for. `None` before a 2xx.
    pub expires_s: Option<u32>,
    /// What the last request asked for (its Contact's `expires`, else its Expires header).
    pub requested_expires_s: Option<u32>,
    /// When the last 2xx came, ns; `None` before one. Its expiry runs from here.
    pub registered_ns: Option<i64>,
    /// Why the chain is failing, when it is: see [`Registration::failure`].
    failure: Option<RegFailure>,
    /// The final response behind `failure`: its code and reason phrase, at most
    /// [`REASON_BYTES_MAX`] bytes.
    failure_response: Option<(u16, Box<str>)>,
    /// Challenges since the last 2xx, and those among them that answered a request carrying
    /// credentials (a `stale=true` one excepted: the nonce lapsed, the password was right).
    challenges_since_ok: u32,
    credentials_refused: u32,
    /// The CSeq number of the last request that carried Authorization or
    /// Proxy-Authorization, so that its response is known to answer credentials.
    credentials_cseq: Option<u32>,
}

/// Longest reason phrase kept for a registration's failure, in bytes.
pub const REASON_BYTES_MAX: usize = 64;

/// Credentials refused this many times in a chain, with no 2xx after them, is a wrong
/// password (or user name): a phone that computed its digest from the right secret would have
/// been let in by the second try.
pub const CREDENTIALS_REFUSED_WRONG: u32 = 2;

/// Why a REGISTER chain failed, told from the shape of the chain:
///
/// - `WrongPassword`: a 403 after a challenge (the server read the credentials and refused
///   them, as Asterisk's chan_sip and many carriers do), or credentials refused
///   [`CREDENTIALS_REFUSED_WRONG`] times by a new challenge (Asterisk's PJSIP, Kamailio and
///   Tandem's registrar challenge again), with no 2xx after. A registrar that answers an
///   unknown user the same way (`alwaysauthreject`) is read the same: the two cannot be told
///   apart on the wire, by design.
/// - `Challenged`: the chain ended on a challenge with no 2xx before it, and no credentials
///   sent or refused only once (a nonce that lapsed while the phone was slow is refused once,
///   and a phone without a password never answers). A challenge then a 2xx is normal digest
///   authentication, no failure.
/// - `Rejected`: another 4xx or a 6xx (404 unknown domain, 423 interval too brief...).
/// - `ServerError`: a 5xx.
/// - `Timeout`: no final response at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegFailure {
    WrongPassword,
    Challenged,
    Rejected,
    ServerError,
    Timeout,
}

impl RegFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            RegFailure::WrongPassword => "wrong-password",
            RegFailure::Challenged => "challenged",
            RegFailure::Rejected => "rejected",
            RegFailure::ServerError => "server-error",
            RegFailure::Timeout => "timeout",
        }
    }
}

/// Whether a challenge says its nonce merely lapsed (`stale=true`, RFC 7616 3.3).
fn stale_challenge(m: &Message<'_>) -> bool {
    m.headers
        .iter()
        .filter(|h| {
            h.name.eq_ignore_ascii_case("www-authenticate")
                || h.name.eq_ignore_ascii_case("proxy-authenticate")
        })
        .any(|h| {
            sip::split_outside(h.value, b',').any(|p| {
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("stale")
                        && v.trim().trim_matches('"').eq_ignore_ascii_case("true")
                })
            })
        })
}

/// At most `REGISTRATION_TEXT_BYTES_MAX` bytes of `s`, cut at a character boundary.
fn bounded(s: &str) -> Box<str> {
    bounded_to(s, REGISTRATION_TEXT_BYTES_MAX)
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn bounded_to(s: &str, max: usize) -> Box<str> {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].into()
}

/// The host of a SIP URI (`sip:alice@example.com:5060;transport=tcp` → `example.com`,
/// `sip:[2001:db8::1]:5060` → `[2001:db8::1]`).
pub fn uri_host(uri: &str) -> &str {
    let rest = uri.split_once(':').map_or(uri, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let end = rest.find([';', '?', '>']).unwrap_or(rest.len());
    let host = &rest[..end];
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    host.split(':').next().unwrap_or(host)
}

/// A Contact value split into its URI and its header parameters: `"A" <sip:a@b;x>;expires=60`
/// gives `sip:a@b;x` and `expires=60` (`sip::NameAddr` reads the display name first, so a
/// quoted one holding `<` is not taken for the URI).
fn contact_parts(value: &str) -> (&str, &str) {
    let n = sip::NameAddr::parse(value);
    (n.uri, n.params.trim_start_matches(';'))
}

/// The `expires` parameter of a Contact value.
fn contact_expires(value: &str) -> Option<u32> {
    sip::split_outside(contact_parts(value).1, b';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("expires")
            .then(|| v.trim().trim_matches('"').parse().ok())?
    })
}

/// The URI without its parameters, for matching a binding in a 2xx to the one registered.
fn uri_base(uri: &str) -> &str {
    uri.split(';').next().unwrap_or(uri).trim()
}

impl Registration {
    /// A chain started by request `m`.
    pub fn from_request(
        ts_ns: i64,
        src: SocketAddr,
        dst: SocketAddr,
        call_id: &str,
        m: &Message<'_>,
    ) -> Registration {
        let to = m.to();
        let mut r = Registration {
            call_id: call_id.into(),
            user: to.map(|t| t.user()).unwrap_or("").into(),
            domain: bounded(to.map(|t| uri_host(t.uri)).unwrap_or("")),
            contact: "".into(),
            user_agent: "".into(),
            src,
            dst,
            first_ns: ts_ns,
            last_ns: ts_ns,
            requests: 0,
            last_code: 0,
            challenges: 0,
            challenged_cseq: None,
            expires_s: None,
            requested_expires_s: None,
            registered_ns: None,
            failure: None,
            failure_response: None,
            challenges_since_ok: 0,
            credentials_refused: 0,
            credentials_cseq: None,
        };
        r.on_request(ts_ns, m);
        r
    }

    /// A request of the chain (the first, or a retry with credentials, or a refresh).
    pub fn on_request(&mut self, ts_ns: i64, m: &Message<'_>) {
        self.last_ns = ts_ns;
        self.requests = self.requests.saturating_add(1);
        let contact = m.header_values("contact").next();
        if let Some(c) = contact {
            let uri = contact_parts(c).0;
            if *self.contact != *bounded(uri) {
                self.contact = bounded(uri);
            }
        }
        if let Some(ua) = m.header("user-agent")
            && *self.user_agent != *bounded(ua)
        {
            self.user_agent = bounded(ua);
        }
        self.requested_expires_s = contact
            .and_then(contact_expires)
            .or_else(|| m.header("expires").and_then(|v| v.trim().parse().ok()));
        let credentials = m.headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case("authorization")
                || h.name.eq_ignore_ascii_case("proxy-authorization")
        });
        if credentials {
            self.credentials_cseq = m.cseq().map(|c| c.0);
        }
    }

    /// Notes a final response that is not a 2xx: the failure it makes of the chain, and its
    /// code and reason phrase.
    fn failed(&mut self, m: &Message<'_>, code: u16, failure: RegFailure) {
        self.failure = Some(failure);
        let reason = match m.start {
            sip::StartLine::Response { reason, .. } => bounded_to(reason, REASON_BYTES_MAX),
            sip::StartLine::Request { .. } => "".into(),
        };
        self.failure_response = Some((code, reason));
    }

    /// A response of the chain: a final one is its result (a challenge only while no other
    /// final response came), and on a 2xx the expiry granted.
    pub fn on_response(&mut self, ts_ns: i64, m: &Message<'_>) {
        self.last_ns = ts_ns;
        let Some(code) = m.status() else { return };
        if code < 200 {
            return;
        }
        if matches!(code, 401 | 407) {
            let cseq = m.cseq().map(|c| c.0);
            if cseq.is_none() || cseq != self.challenged_cseq {
                self.challenges = self.challenges.saturating_add(1);
                self.challenges_since_ok = self.challenges_since_ok.saturating_add(1);
                self.challenged_cseq = cseq;
                if cseq.is_some() && cseq == self.credentials_cseq && !stale_challenge(m) {
                    self.credentials_refused = self.credentials_refused.saturating_add(1);
                }
            }
            if self.credentials_refused >= CREDENTIALS_REFUSED_WRONG {
                self.failed(m, code, RegFailure::WrongPassword);
            } else if self.registered_ns.is_none() && matches!(self.last_code, 0 | 401 | 407) {
                self.failed(m, code, RegFailure::Challenged);
            }
            if matches!(self.last_code, 0 | 401 | 407) {
                self.last_code = code;
            }
            return;
        }
        self.last_code = code;
        if !(200..300).contains(&code) {
            let failure = match code {
                403 if self.challenges_since_ok > 0 => RegFailure::WrongPassword,
                500..=599 => RegFailure::ServerError,
                _ => RegFailure::Rejected,
            };
            self.failed(m, code, failure);
            return;
        }
        self.registered_ns = Some(ts_ns);
        self.failure = None;
        self.failure_response = None;
        self.challenges_since_ok = 0;
        self.credentials_refused = 0;
        let ours = uri_base(&self.contact);
        let granted = m
            .header_values("contact")
            .find(|c| uri_base(contact_parts(c).0).eq_ignore_ascii_case(ours))
            .and_then(contact_expires);
        self.expires_s = granted
            .or_else(|| m.header("expires").and_then(|v| v.trim().parse().ok()))
            .or(self.requested_expires_s);
    }

    /// The chain's result: `registered`, `unregistered` (a 2xx to a request that removed the
    /// binding: expires 0, or `Contact: *`), `challenged`, `failed` or `no-response`.
    pub fn outcome(&self) -> &'static str {
        match self.last_code {
            0 => "no-response",
            200..=299 if self.expires_s == Some(0) => "unregistered",
            200..=299 => "registered",
            401 | 407 => "challenged",
            _ => "failed",
        }
    }

    /// Why the chain is failing ([`RegFailure`]): decided by what came since its last 2xx, so
    /// a chain that registered and then had its credentials refused is failing, while a
    /// refresh challenged once and not answered yet is not. `None` for a chain that ended
    /// well.
    pub fn failure(&self) -> Option<RegFailure> {
        match self.last_code {
            0 => Some(RegFailure::Timeout),
            _ => self.failure,
        }
    }

    /// What a person reads beside [`Registration::failure`]: the final response
    /// (`403 Wrong password`), with how the credentials fared (`credentials refused 2 times`),
    /// or `no final response to 3 requests`. Empty for a chain that ended well.
    pub fn failure_reason(&self) -> String {
        let Some(failure) = self.failure() else {
            return String::new();
        };
        let response = match &self.failure_response {
            Some((code, reason)) if reason.is_empty() => code.to_string(),
            Some((code, reason)) => format!("{code} {reason}"),
            None => String::new(),
        };
        match failure {
            RegFailure::Timeout => format!(
                "no final response to {} request{}",
                self.requests,
                if self.requests == 1 { "" } else { "s" }
            ),
            RegFailure::WrongPassword if self.credentials_refused >= CREDENTIALS_REFUSED_WRONG => {
                format!(
                    "{response}: credentials refused {} times",
                    self.credentials_refused
                )
            }
            RegFailure::WrongPassword => format!("{response} after a challenge"),
            RegFailure::Challenged if self.credentials_refused > 0 => {
                format!("{response}: credentials refused once")
            }
            RegFailure::Challenged => format!("{response}: no credentials sent"),
            RegFailure::Rejected | RegFailure::ServerError => response,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Vec<u8> {
        text.replace('\n', "\r\n").into_bytes()
    }

    fn invite(cseq: u32, extra: &str) -> Vec<u8> {
        msg(&format!(
            "INVITE sip:600@PBX.example.com SIP/2.0\n\
             Via: SIP/2.0/UDP 10.0.0.5:5060;branch=z9hG4bKi{cseq}\n\
             From: \"A\" <sip:1001@Phones.Example.com>;tag=a\n\
             To: <sip:2002@Carrier.example.net:5060;user=phone>\n\
             Call-ID: fields@test\n\
             CSeq: {cseq} INVITE\n\
             {extra}Content-Length: 0\n\n"
        ))
    }

    fn invite_response(code: u16, extra: &str) -> Vec<u8> {
        msg(&format!(
            "SIP/2.0 {code} Whatever\n\
             Via: SIP/2.0/UDP 10.0.0.5:5060;branch=z9hG4bKi1\n\
             From: <sip:1001@phones.example.com>;tag=a\n\
             To: <sip:2002@carrier.example.net>;tag=b\n\
             Call-ID: fields@test\n\
             CSeq: 1 INVITE\n\
             {extra}Content-Length: 0\n\n"
        ))
    }

    #[test]
    fn a_call_keeps_both_user_agents_its_domains_and_its_chosen_headers() {
        let a: SocketAddr = "10.0.0.5:5060".parse().unwrap();
        let b: SocketAddr = "10.0.0.6:5060".parse().unwrap();
        let kept = KeptHeaders {
            names: vec![
                "x-account".into(),
                "p-asserted-identity".into(),
                "x-late".into(),
            ],
            value_bytes_max: 5,
        };
        // The first INVITE has no User-Agent; its retry with credentials has.
        let first = invite(
            1,
            "X-Account: é1234\nP-Asserted-Identity: <sip:1>\nP-Asserted-Identity: <tel:2>\n",
        );
        let m = Message::parse(&first).unwrap();
        let mut d = Dialog::from_invite(0, a, b, &m);
        d.on_message(0, a, b, &m);
        d.learn_fields(&m, &kept);
        let feed = |d: &mut Dialog, raw: Vec<u8>| {
            let m = Message::parse(&raw).unwrap();
            d.on_message(1, b, a, &m);
            d.learn_fields(&m, &kept);
        };
        feed(&mut d, invite_response(100, "User-Agent: a proxy\n"));
        feed(&mut d, invite_response(401, "User-Agent: the PBX\n"));
        feed(
            &mut d,
            invite(2, "User-Agent: Yealink SIP-T46S\nX-Account: other\n"),
        );
        feed(&mut d, invite_response(180, "User-Agent: Phone B 1.0\n"));
        feed(
            &mut d,
            invite_response(
                200,
                "Server: Asterisk PBX 20\nUser-Agent: not this\nX-Late: v\n",
            ),
        );
        feed(
            &mut d,
            invite_response(200, "Server: a retransmission says otherwise\n"),
        );
        let f = &d.fields;
        assert_eq!(&*f.caller_ua, "Yealink SIP-T46S");
        assert_eq!(&*f.callee_ua, "Asterisk PBX 20");
        assert_eq!(
            (&*f.from_domain, &*f.to_domain),
            ("phones.example.com", "carrier.example.net")
        );
        assert_eq!(&*f.ruri_user, "600");
        let h: Vec<(&str, &str)> = f.headers.iter().map(|(n, v)| (&**n, &**v)).collect();
        // Cut at 5 bytes without splitting the é; two lines joined, then cut; the first
        // message that carried each.
        assert_eq!(
            h,
            [
                ("x-account", "é123"),
                ("p-asserted-identity", "<sip:"),
                ("x-late", "v")
            ]
        );
        assert_eq!(request_uri_user("sip:pbx.example.com"), "");
        assert_eq!(request_uri_user("tel:+4930123;phone-context=x"), "+4930123");
    }

    fn register(cseq: u32, extra: &str) -> Vec<u8> {
        msg(&format!(
            "REGISTER sip:pbx.example.com SIP/2.0\n\
             Via: SIP/2.0/UDP 10.0.0.5:5060;branch=z9hG4bK{cseq}\n\
             From: <sip:1001@pbx.example.com>;tag=a\n\
             To: \"Desk\" <sip:1001@pbx.example.com:5060>\n\
             Call-ID: reg-1@10.0.0.5\n\
             CSeq: {cseq} REGISTER\n\
             Contact: <sip:1001@10.0.0.5:5060;transport=udp>;expires=3600;+sip.instance=\"<urn:uuid:1>\"\n\
             User-Agent: Yealink SIP-T46U 108.86.0.20\n\
             {extra}Content-Length: 0\n\n"
        ))
    }

    fn response(code: u16, extra: &str) -> Vec<u8> {
        response_to(1, code, extra)
    }

    fn response_to(cseq: u32, code: u16, extra: &str) -> Vec<u8> {
        msg(&format!(
            "SIP/2.0 {code} X\n\
             Via: SIP/2.0/UDP 10.0.0.5:5060;branch=z9hG4bK1\n\
             From: <sip:1001@pbx.example.com>;tag=a\n\
             To: <sip:1001@pbx.example.com>;tag=b\n\
             Call-ID: reg-1@10.0.0.5\n\
             CSeq: {cseq} REGISTER\n\
             {extra}Content-Length: 0\n\n"
        ))
    }

    fn chain(responses: &[Vec<u8>]) -> Registration {
        let a = "10.0.0.5:5060".parse().unwrap();
        let b = "10.0.0.1:5060".parse().unwrap();
        let first = register(1, "");
        let mut r =
            Registration::from_request(1, a, b, "reg-1@10.0.0.5", &Message::parse(&first).unwrap());
        for (i, bytes) in responses.iter().enumerate() {
            r.on_response(10 + i as i64, &Message::parse(bytes).unwrap());
        }
        r
    }

    #[test]
    fn a_registration_keeps_contact_agent_domain_and_the_expiry_granted() {
        let two_bindings = response(
            200,
            "Contact: <sip:1001@10.0.0.9:5060>;expires=60\n\
             Contact: <sip:1001@10.0.0.5:5060;transport=UDP>;expires=1800\n\
             Expires: 999\n",
        );
        let r = chain(&[response(401, ""), two_bindings]);
        assert_eq!(&*r.domain, "pbx.example.com");
        assert_eq!(&*r.contact, "sip:1001@10.0.0.5:5060;transport=udp");
        assert_eq!(&*r.user_agent, "Yealink SIP-T46U 108.86.0.20");
        assert_eq!((r.last_code, r.outcome()), (200, "registered"));
        assert_eq!(r.expires_s, Some(1800), "our binding's expires param");
        let r = chain(&[response(200, "Expires: 600\n")]);
        assert_eq!(r.expires_s, Some(600), "the 2xx's Expires header");
        let r = chain(&[response(200, "")]);
        assert_eq!(r.expires_s, Some(3600), "what the request asked for");
        let r = chain(&[response(403, "Expires: 600\n")]);
        assert_eq!((r.expires_s, r.outcome()), (None, "failed"));
    }

    #[test]
    fn a_chain_reports_its_last_final_result_and_a_challenge_only_alone() {
        // Registered, then a refresh challenged (and its challenge resent): still registered.
        let refresh_challenged = response_to(3, 401, "");
        let r = chain(&[
            response(401, ""),
            response_to(2, 200, "Expires: 600\n"),
            refresh_challenged.clone(),
            refresh_challenged,
        ]);
        assert_eq!(
            (r.outcome(), r.last_code, r.expires_s),
            ("registered", 200, Some(600))
        );
        assert_eq!(
            r.challenges, 2,
            "two requests challenged, the last challenge resent"
        );
        // Refused after it registered: failed.
        let r = chain(&[response(200, ""), response(407, ""), response(403, "")]);
        assert_eq!((r.outcome(), r.last_code), ("failed", 403));
        // Challenged alone, or a 100 Trying with nothing after it.
        let r = chain(&[response(100, ""), response(407, "")]);
        assert_eq!((r.outcome(), r.last_code), ("challenged", 407));
        let r = chain(&[response(100, "")]);
        assert_eq!((r.outcome(), r.last_code), ("no-response", 0));
    }

    /// A chain of requests, each followed by its responses: `(credentials?, [responses])`.
    fn exchange(steps: &[(bool, &[&str])]) -> Registration {
        let a = "10.0.0.5:5060".parse().unwrap();
        let b = "10.0.0.1:5060".parse().unwrap();
        let mut r: Option<Registration> = None;
        let mut t = 1;
        for (i, (credentials, responses)) in steps.iter().enumerate() {
            let cseq = i as u32 + 1;
            let auth = if *credentials {
                "Authorization: Digest username=\"1001\", realm=\"pbx\", nonce=\"n\", \
                 uri=\"sip:pbx.example.com\", response=\"0\"\n"
            } else {
                ""
            };
            let req = register(cseq, auth);
            let m = Message::parse(&req).unwrap();
            match r.as_mut() {
                None => r = Some(Registration::from_request(t, a, b, "reg-1@10.0.0.5", &m)),
                Some(r) => r.on_request(t, &m),
            }
            for status in *responses {
                t += 1;
                let (line, extra) = status.split_once('|').unwrap_or((status, ""));
                let code: u16 = line[..3].parse().unwrap();
                let text = response_to(cseq, code, &extra.replace('~', "\n"));
                let text = String::from_utf8(text).unwrap().replacen(
                    " X\r\n",
                    &format!(" {}\r\n", line[3..].trim()),
                    1,
                );
                r.as_mut()
                    .unwrap()
                    .on_response(t, &Message::parse(text.as_bytes()).unwrap());
            }
            t += 1;
        }
        r.unwrap()
    }

    fn verdict(r: &Registration) -> (&'static str, Option<&'static str>, String) {
        (
            r.outcome(),
            r.failure().map(RegFailure::as_str),
            r.failure_reason(),
        )
    }

    #[test]
    fn a_wrong_password_is_told_apart_from_a_normal_challenge() {
        // Digest as it should go: challenged, then answered.
        let r = exchange(&[(false, &["401 Unauthorized"]), (true, &["200 OK"])]);
        assert_eq!(verdict(&r), ("registered", None, String::new()));
        assert_eq!((r.challenges, r.registered_ns), (1, Some(4)));
        // chan_sip and carriers: the credentials are refused with a 403.
        let r = exchange(&[
            (false, &["401 Unauthorized"]),
            (true, &["403 Wrong password"]),
        ]);
        assert_eq!(
            verdict(&r),
            (
                "failed",
                Some("wrong-password"),
                "403 Wrong password after a challenge".into()
            )
        );
        // PJSIP, Kamailio, Tandem: challenged again, twice.
        let r = exchange(&[
            (false, &["401 Unauthorized"]),
            (true, &["401 Unauthorized"]),
            (true, &["401 Unauthorized"]),
        ]);
        assert_eq!(
            verdict(&r),
            (
                "challenged",
                Some("wrong-password"),
                "401 Unauthorized: credentials refused 2 times".into()
            )
        );
        // Refused once (a nonce that lapsed while the phone was slow): challenged, not yet
        // a wrong password; and a stale=true challenge is no refusal at all.
        let r = exchange(&[
            (false, &["401 Unauthorized"]),
            (true, &["401 nonce has changed"]),
        ]);
        assert_eq!(
            verdict(&r),
            (
                "challenged",
                Some("challenged"),
                "401 nonce has changed: credentials refused once".into()
            )
        );
        let stale =
            "401 Unauthorized|WWW-Authenticate: Digest realm=\"pbx\", nonce=\"m\", stale=TRUE~";
        let r = exchange(&[
            (false, &["407 Proxy Authentication Required"]),
            (true, &[stale]),
            (true, &[stale]),
        ]);
        assert_eq!(r.failure(), Some(RegFailure::Challenged));
        // A phone with no password never answers.
        let r = exchange(&[(false, &["100 Trying", "401 Unauthorized"])]);
        assert_eq!(
            verdict(&r),
            (
                "challenged",
                Some("challenged"),
                "401 Unauthorized: no credentials sent".into()
            )
        );
        // A 403 with no challenge before it is a refusal of another kind (an address list).
        let r = exchange(&[(false, &["403 Forbidden"])]);
        assert_eq!(r.failure(), Some(RegFailure::Rejected));
    }

    #[test]
    fn other_failures_keep_their_reason_and_a_later_2xx_clears_them() {
        let r = exchange(&[(false, &["404 Not Found"])]);
        assert_eq!(
            verdict(&r),
            ("failed", Some("rejected"), "404 Not Found".into())
        );
        let r = exchange(&[(false, &["503 Service Unavailable"])]);
        assert_eq!(r.failure(), Some(RegFailure::ServerError));
        let r = exchange(&[(false, &["100 Trying"]), (false, &[])]);
        assert_eq!(
            verdict(&r),
            (
                "no-response",
                Some("timeout"),
                "no final response to 2 requests".into()
            )
        );
        // Failing, then let in: it ended well.
        let r = exchange(&[
            (false, &["401 Unauthorized"]),
            (true, &["401 Unauthorized"]),
            (true, &["401 Unauthorized"]),
            (true, &["200 OK"]),
        ]);
        assert_eq!(verdict(&r), ("registered", None, String::new()));
        // Registered, then a refresh challenged and not answered yet: no failure; then its
        // credentials refused twice: failing, though the binding it had still runs.
        let r = exchange(&[(false, &["200 OK"]), (false, &["401 Unauthorized"])]);
        assert_eq!(verdict(&r), ("registered", None, String::new()));
        let r = exchange(&[
            (false, &["200 OK"]),
            (false, &["401 Unauthorized"]),
            (true, &["401 Unauthorized"]),
            (true, &["401 Unauthorized"]),
        ]);
        assert_eq!(
            (r.outcome(), r.failure()),
            ("registered", Some(RegFailure::WrongPassword))
        );
    }

    #[test]
    fn registration_text_is_bounded_at_a_character_boundary() {
        let long = format!("{}é", "a".repeat(REGISTRATION_TEXT_BYTES_MAX - 1));
        let b = bounded(&long);
        assert_eq!(b.len(), REGISTRATION_TEXT_BYTES_MAX - 1);
        assert_eq!(
            uri_host("sip:[2001:db8::1]:5060;transport=tcp"),
            "[2001:db8::1]"
        );
        assert_eq!(uri_host("sips:bob@example.com"), "example.com");
        assert_eq!(uri_host("sip:example.com:5061"), "example.com");
        assert_eq!(contact_expires("sip:a@b;expires=30"), Some(30));
        assert_eq!(contact_expires("<sip:a@b;expires=30>"), None);
        assert_eq!(
            contact_parts("\"x<y\" <sip:a@b>;+sip.instance=\"<urn:1>\";expires=5"),
            ("sip:a@b", "+sip.instance=\"<urn:1>\";expires=5")
        );
        assert_eq!(contact_parts("*"), ("*", ""));
    }
}
