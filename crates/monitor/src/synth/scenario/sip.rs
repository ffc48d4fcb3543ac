//! SIP text as phones, PBXs, trunks and scanners write it: Via with a branch and rport, From
//! and To with tags, Call-ID, CSeq, Contact, User-Agent or Server, SDP with `c=` and `m=`, and
//! Digest challenges and credentials.

use std::net::{IpAddr, SocketAddr};

/// One SIP party: a phone, a PBX, a trunk or a scanner.
#[derive(Debug, Clone)]
pub(super) struct Agent {
    /// The user part it puts in From and Contact.
    pub user: String,
    /// Its signalling address.
    pub addr: SocketAddr,
    /// The host of its From URI: its registrar's for a phone, its own for a server.
    pub domain: IpAddr,
    /// Its User-Agent (requests) and Server (responses) text.
    pub user_agent: String,
    /// Where its RTP goes from and to (the port is per call).
    pub media_ip: IpAddr,
}

pub(super) const REALM: &str = "asterisk";
pub(super) const ALLOW: &str =
    "INVITE, ACK, CANCEL, BYE, REFER, NOTIFY, OPTIONS, INFO, MESSAGE, UPDATE";

/// The fixed parts of one INVITE dialog.
pub(super) struct Dialog<'a> {
    pub call_id: &'a str,
    pub caller: &'a Agent,
    pub callee: &'a Agent,
    /// The calling number or extension: the From user.
    pub calling: &'a str,
    /// The number or extension dialled: the Request-URI's and To's user.
    pub called: &'a str,
    pub caller_tag: String,
    pub callee_tag: String,
    /// Distinguishes this dialog's Via branches from every other's.
    pub branch: String,
}

/// One transaction of a dialog.
#[derive(Debug, Clone, Copy)]
pub(super) struct Txn<'a> {
    pub method: &'a str,
    /// Which side sends the request.
    pub side: Side,
    pub cseq: u32,
    /// The Via branch's suffix: the INVITE is 1, and its CANCEL and non-2xx ACK reuse it.
    pub id: u32,
    /// The To tag is known (any request or response after the first provisional answer).
    pub tagged: bool,
}

/// Which side sends a request of the dialog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Caller,
    Callee,
}

impl Dialog<'_> {
    fn caller_value(&self) -> String {
        format!(
            "<sip:{}@{}>;tag={}",
            self.calling, self.caller.domain, self.caller_tag
        )
    }

    fn callee_value(&self, tagged: bool) -> String {
        let tag = if tagged {
            format!(";tag={}", self.callee_tag)
        } else {
            String::new()
        };
        format!("<sip:{}@{}>{tag}", self.called, self.callee.addr.ip())
    }

    /// The sender and the other party of `txn`'s requests, and its From and To values: a
    /// request from the callee swaps From and To (RFC 3261 §12.2.1.1).
    fn parties(&self, txn: &Txn<'_>) -> (&Agent, &Agent, String, String) {
        match txn.side {
            Side::Caller => (
                self.caller,
                self.callee,
                self.caller_value(),
                self.callee_value(txn.tagged),
            ),
            Side::Callee => (
                self.callee,
                self.caller,
                self.callee_value(true),
                self.caller_value(),
            ),
        }
    }

    /// A request of the dialog, with `extra` header lines and an SDP `body` (or none).
    pub fn request(&self, txn: &Txn<'_>, extra: &str, body: &str) -> String {
        let Txn {
            method, cseq, id, ..
        } = *txn;
        let (sender, target, from, to) = self.parties(txn);
        // The INVITE's transaction (number 1: its CANCEL and non-2xx ACK too) targets the
        // dialled address; the dialog's other requests the peer's Contact.
        let uri = match txn.side {
            Side::Caller if id == 1 => format!("sip:{}@{}", self.called, self.callee.addr.ip()),
            Side::Caller => format!("sip:{}@{}", self.called, target.addr),
            Side::Callee => format!("sip:{}@{}", target.user, target.addr),
        };
        let (contact, allow) = if method == "INVITE" {
            (
                format!("Contact: <sip:{}@{}>\r\n", sender.user, sender.addr),
                format!("Allow: {ALLOW}\r\n"),
            )
        } else {
            (String::new(), String::new())
        };
        format!(
            "{method} {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {};branch=z9hG4bK{}-{id};rport\r\nMax-Forwards: 70\r\nFrom: {from}\r\nTo: {to}\r\nCall-ID: {}\r\nCSeq: {cseq} {method}\r\n{contact}User-Agent: {}\r\n{allow}{extra}{}",
            sender.addr,
            self.branch,
            self.call_id,
            sender.user_agent,
            with_body(body),
        )
    }

    /// The answer `status` to `txn`'s request.
    pub fn response(&self, status: &str, txn: &Txn<'_>, extra: &str, body: &str) -> String {
        let Txn {
            method, cseq, id, ..
        } = *txn;
        let (requester, answerer, from, to) = self.parties(txn);
        let contact = if method == "INVITE" && status.starts_with('2') {
            // A callee answers as the number dialled; the caller would be asked nothing.
            let user = if txn.side == Side::Caller {
                self.called
            } else {
                &answerer.user
            };
            format!("Contact: <sip:{user}@{}>\r\n", answerer.addr)
        } else {
            String::new()
        };
        format!(
            "SIP/2.0 {status}\r\nVia: SIP/2.0/UDP {};branch=z9hG4bK{}-{id};rport={};received={}\r\nFrom: {from}\r\nTo: {to}\r\nCall-ID: {}\r\nCSeq: {cseq} {method}\r\n{contact}Server: {}\r\n{extra}{}",
            requester.addr,
            self.branch,
            requester.addr.port(),
            requester.addr.ip(),
            self.call_id,
            answerer.user_agent,
            with_body(body),
        )
    }
}

/// Content headers and the body (none: `Content-Length: 0`).
fn with_body(body: &str) -> String {
    if body.is_empty() {
        "Content-Length: 0\r\n\r\n".to_string()
    } else {
        format!(
            "Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }
}

/// An audio offer or answer of G.711 `pt` (0 PCMU, 8 PCMA) with RFC 4733 events, at `ip:port`.
pub(super) fn sdp(session: u64, ip: IpAddr, port: u16, pt: u8, ptime_ms: u32) -> String {
    let codec = if pt == 0 { "PCMU" } else { "PCMA" };
    format!(
        "v=0\r\no=- {session} {session} IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP {pt} 101\r\na=rtpmap:{pt} {codec}/8000\r\na=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\na=ptime:{ptime_ms}\r\na=sendrecv\r\n"
    )
}

/// One REGISTER transaction's fixed parts (a chain is one Call-ID's transactions).
pub(super) struct Register<'a> {
    pub agent: &'a Agent,
    /// The user whose binding is asked for (To and From), and the Digest username.
    pub user: &'a str,
    pub registrar: &'a Agent,
    pub call_id: &'a str,
    pub from_tag: &'a str,
    pub branch: &'a str,
    pub expires_s: u32,
}

impl Register<'_> {
    fn aor(&self) -> String {
        format!("<sip:{}@{}>", self.user, self.registrar.domain)
    }

    /// The request numbered `cseq`; with `credentials` (nonce, response hash), an
    /// Authorization header answering a challenge.
    pub fn request(&self, cseq: u32, credentials: Option<(&str, &str)>) -> String {
        let auth = credentials.map_or(String::new(), |(nonce, response)| {
            format!(
                "Authorization: Digest username=\"{}\", realm=\"{REALM}\", nonce=\"{nonce}\", uri=\"sip:{}\", response=\"{response}\", algorithm=MD5\r\n",
                self.user, self.registrar.domain
            )
        });
        format!(
            "REGISTER sip:{} SIP/2.0\r\nVia: SIP/2.0/UDP {};branch=z9hG4bK{}-{cseq};rport\r\nMax-Forwards: 70\r\nFrom: {};tag={}\r\nTo: {}\r\nCall-ID: {}\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:{}@{}>\r\n{auth}User-Agent: {}\r\nExpires: {}\r\nAllow: {ALLOW}\r\nContent-Length: 0\r\n\r\n",
            self.registrar.domain,
            self.agent.addr,
            self.branch,
            self.aor(),
            self.from_tag,
            self.aor(),
            self.call_id,
            self.user,
            self.agent.addr,
            self.agent.user_agent,
            self.expires_s,
        )
    }

    /// The registrar's answer to request `cseq`: a 401 with `challenge` (a nonce) carries
    /// WWW-Authenticate, a 200 the binding.
    pub fn response(&self, cseq: u32, status: &str, challenge: Option<&str>) -> String {
        let extra = match challenge {
            Some(nonce) => format!(
                "WWW-Authenticate: Digest realm=\"{REALM}\", nonce=\"{nonce}\", algorithm=MD5, qop=\"auth\"\r\n"
            ),
            None if status.starts_with('2') => format!(
                "Contact: <sip:{}@{}>;expires={}\r\nExpires: {}\r\n",
                self.user, self.agent.addr, self.expires_s, self.expires_s
            ),
            None => String::new(),
        };
        format!(
            "SIP/2.0 {status}\r\nVia: SIP/2.0/UDP {};branch=z9hG4bK{}-{cseq};rport={};received={}\r\nFrom: {};tag={}\r\nTo: {};tag=r{}\r\nCall-ID: {}\r\nCSeq: {cseq} REGISTER\r\n{extra}Server: {}\r\nContent-Length: 0\r\n\r\n",
            self.agent.addr,
            self.branch,
            self.agent.addr.port(),
            self.agent.addr.ip(),
            self.aor(),
            self.from_tag,
            self.aor(),
            self.branch,
            self.call_id,
            self.registrar.user_agent,
        )
    }
}

/// An OPTIONS probe for `user` from `prober` and the server's 200 answer.
pub(super) fn options(
    prober: &Agent,
    server: &Agent,
    user: &str,
    call_id: &str,
    tag: &str,
) -> [String; 2] {
    let head = format!(
        "Via: SIP/2.0/UDP {};branch=z9hG4bK{tag}\r\nFrom: \"{}\" <sip:{}@{}>;tag={tag}\r\nTo: <sip:{user}@{}>",
        prober.addr,
        prober.user,
        prober.user,
        prober.addr.ip(),
        server.addr.ip(),
    );
    [
        format!(
            "OPTIONS sip:{user}@{} SIP/2.0\r\n{head}\r\nCall-ID: {call_id}\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContact: <sip:{}@{}>\r\nAccept: application/sdp\r\nUser-Agent: {}\r\nContent-Length: 0\r\n\r\n",
            server.addr.ip(),
            prober.user,
            prober.addr,
            prober.user_agent
        ),
        format!(
            "SIP/2.0 200 OK\r\n{head};tag=o{tag}\r\nCall-ID: {call_id}\r\nCSeq: 1 OPTIONS\r\nServer: {}\r\nAllow: {ALLOW}\r\nAccept: application/sdp\r\nContent-Length: 0\r\n\r\n",
            server.user_agent
        ),
    ]
}
