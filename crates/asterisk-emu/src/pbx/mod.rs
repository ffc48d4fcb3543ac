//! An emulated Asterisk PBX bridging SIP calls: a back-to-back user agent on UDP, as
//! chan_pjsip and `Dial()` behave on a FreePBX outbound route, for tests and benchmarks of
//! Tandem's leg linking. Never on a serving path.
//!
//! A phone's INVITE gets Asterisk's immediate `100 Trying`, then the dialled number goes
//! through the outbound route's dial patterns (strip a prefix, prepend another, as FreePBX's
//! "prefix" and "prepend" do) and a new INVITE leaves for the trunk as a dialog of the PBX's
//! own: a new Call-ID, new tags and branch, its own Contact, the caller's number and name passed
//! on in From, and SDP anchoring the media on the PBX's own ports ([`media`]). The trunk's
//! 180 becomes a 180 to the phone, a 183 with SDP a 183 with the PBX's SDP, its 200 a 200
//! (the trunk's 200 ACKed by the PBX at once), a refusal the status Asterisk's hangup-cause
//! tables make of it ([`causes`]). BYE and CANCEL cross to the other leg. An optional header
//! (`X-Call-ID`-style, as a dialplan's `PJSIP_HEADER(add,...)` adds) carries the phone leg's
//! Call-ID on the trunk leg.
//!
//! What it leaves out: authentication, re-INVITEs and UPDATE (answered 501), 100rel, session
//! timers' refreshes, TCP/TLS, inbound routes (every call goes out to the one trunk), RTCP.
//! Retransmissions are answered (a repeated INVITE gets the last response again, a repeated
//! 200 from the trunk the ACK again), never originated: it is meant for loopback.
//!
//! Every bridged pair is recorded ([`Pbx::bridged`]): the truth a linker is measured against.
//! Start reading at [`Pbx::start`], then `Switch::on_datagram`.

pub mod campaign;
mod causes;
mod media;
mod msg;
pub mod phone;
pub mod sipp;

pub use causes::relayed_status;
pub use msg::Msg;

use media::Anchor;
use msg::{contact_uri, display_name, sdp_audio, sdp_g711, tag, user};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// The largest SIP datagram read (a UDP datagram's limit).
pub const MAX_SIP_BYTES: usize = 65_535;
/// Bridged pairs kept in [`Pbx::bridged`]; later calls are still bridged, not recorded.
pub const MAX_RECORDED_CALLS: usize = 1_000_000;
/// Calls in progress at once; a further INVITE is answered 503, as Asterisk's `maxcalls` does.
pub const MAX_CALLS: usize = 20_000;
/// How long an ended call is remembered, to answer a retransmitted BYE or INVITE.
const LINGER: Duration = Duration::from_secs(8);

/// One FreePBX dial pattern of an outbound route: a number that starts with `prefix` loses it
/// and gains `prepend` (`9|0049…`: `prefix` "90", `prepend` "0049" turns 9017… into 004917…).
#[derive(Debug, Clone)]
pub struct DialPattern {
    pub prefix: String,
    pub prepend: String,
    /// The route's trunk, when not the PBX's default one.
    pub trunk: Option<SocketAddr>,
}

impl DialPattern {
    pub fn new(prefix: &str, prepend: &str) -> Self {
        DialPattern {
            prefix: prefix.to_string(),
            prepend: prepend.to_string(),
            trunk: None,
        }
    }

    /// The same pattern sending its calls to `trunk`.
    pub fn via(mut self, trunk: SocketAddr) -> Self {
        self.trunk = Some(trunk);
        self
    }

    /// The number sent to the trunk, when `dialled` matches.
    pub fn apply(&self, dialled: &str) -> Option<String> {
        let rest = dialled.strip_prefix(&self.prefix)?;
        (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'+'))
            .then(|| format!("{}{rest}", self.prepend))
    }
}

/// How the PBX is set up.
#[derive(Debug, Clone)]
pub struct PbxConfig {
    /// Where it listens for SIP (UDP); port 0 picks one. A concrete address: it goes in Via,
    /// Contact and SDP.
    pub sip: SocketAddr,
    /// The trunk every routed call goes to.
    pub trunk: SocketAddr,
    /// The outbound route's dial patterns, first match wins; no match is answered 404.
    pub routes: Vec<DialPattern>,
    /// Even RTP ports are taken from this range (Asterisk's `rtpstart`, `rtpend`).
    pub rtp_ports: (u16, u16),
    /// A header the trunk leg's INVITE carries with the phone leg's Call-ID (`X-Call-ID`).
    pub correlation_header: Option<String>,
    /// `User-Agent` and `Server`: `Asterisk PBX` and the version, as res_pjsip's default.
    pub user_agent: String,
}

impl PbxConfig {
    /// Loopback, any SIP port, the trunk at `trunk`, routes that pass every number unchanged.
    pub fn loopback(trunk: SocketAddr) -> Self {
        PbxConfig {
            sip: SocketAddr::from(([127, 0, 0, 1], 0)),
            trunk,
            routes: vec![DialPattern::new("", "")],
            rtp_ports: (10_000, 20_000),
            correlation_header: None,
            user_agent: "Asterisk PBX 22.10.1".to_string(),
        }
    }
}

/// One call the PBX took: the phone leg and, when it was routed, the trunk leg.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Bridged {
    pub inbound_call_id: String,
    pub outbound_call_id: Option<String>,
    pub caller: String,
    pub dialled: String,
    pub sent_to_trunk: Option<String>,
    /// The final status the phone got (0 while the call is up or when BYE ended it answered).
    pub phone_status: u16,
}

/// A running emulated PBX; stops when dropped.
pub struct Pbx {
    addr: SocketAddr,
    bridged: Arc<Mutex<Vec<Bridged>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pbx {
    /// Binds the SIP socket and runs the PBX on a thread of its own.
    pub fn start(config: PbxConfig) -> std::io::Result<Pbx> {
        // Bound here (so that the caller learns a taken port at once) and handed to the PBX's
        // own runtime on its thread: the caller may be inside a runtime of its own.
        let std_socket = std::net::UdpSocket::bind(config.sip)?;
        std_socket.set_nonblocking(true)?;
        let addr = std_socket.local_addr()?;
        let bridged: Arc<Mutex<Vec<Bridged>>> = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let recorded = Arc::clone(&bridged);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("pbx-emu".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(socket) = UdpSocket::from_std(std_socket) else {
                        return;
                    };
                    Switch::new(config, addr, socket, recorded)
                        .run(stopped)
                        .await;
                })
            })?;
        Ok(Pbx {
            addr,
            bridged,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where phones send their INVITEs.
    pub fn sip_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every call taken so far, in the order the phones' INVITEs arrived.
    pub fn bridged(&self) -> Vec<Bridged> {
        self.bridged.lock().expect("bridged calls").clone()
    }
}

impl Drop for Pbx {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The headers a response copies from its request.
#[derive(Debug, Clone)]
struct Heads {
    vias: Vec<String>,
    from: String,
    to: String,
    call_id: String,
    cseq: String,
}

impl Heads {
    fn of(m: &Msg) -> Heads {
        Heads {
            vias: m.all("Via").map(str::to_string).collect(),
            from: m.header("From").unwrap_or("").to_string(),
            to: m.header("To").unwrap_or("").to_string(),
            call_id: m.call_id().to_string(),
            cseq: m.header("CSeq").unwrap_or("").to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The trunk leg's INVITE is out, no final answer yet.
    Calling,
    /// Both legs answered.
    Up,
    /// Over; kept a while for retransmissions.
    Ended(Instant),
}

/// One call: the phone leg (A) as the PBX's UAS, the trunk leg (B) as its UAC.
struct Call {
    key: u64,
    state: State,
    record: usize,
    // The phone leg.
    a_invite: Heads,
    a_src: SocketAddr,
    a_target: String,
    a_tag: String,
    a_last: Option<Vec<u8>>,
    a_cseq: u32,
    a_sent_180: bool,
    a_sent_183: bool,
    a_cancelled: bool,
    // The trunk leg.
    b_call_id: String,
    b_trunk: SocketAddr,
    b_ruri: String,
    b_branch: String,
    b_from: String,
    b_to: String,
    b_cseq: u32,
    b_target: String,
    b_ack: Option<Vec<u8>>,
    // Media.
    peers: Arc<Mutex<media::Peers>>,
    phone_port: u16,
    codec: u8,
    relay: Option<JoinHandle<()>>,
}

struct Switch {
    config: PbxConfig,
    addr: SocketAddr,
    socket: UdpSocket,
    bridged: Arc<Mutex<Vec<Bridged>>>,
    calls: HashMap<u64, Call>,
    by_call_id: HashMap<String, u64>,
    next_key: u64,
    next_rtp_port: u16,
    rng: u64,
}

impl Switch {
    fn new(
        config: PbxConfig,
        addr: SocketAddr,
        socket: UdpSocket,
        bridged: Arc<Mutex<Vec<Bridged>>>,
    ) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64)
            ^ u64::from(addr.port());
        let next_rtp_port = config.rtp_ports.0;
        Switch {
            config,
            addr,
            socket,
            bridged,
            calls: HashMap::new(),
            by_call_id: HashMap::new(),
            next_key: 1,
            next_rtp_port,
            rng: seed | 1,
        }
    }

    async fn run(&mut self, mut stopped: tokio::sync::oneshot::Receiver<()>) {
        let mut buf = vec![0u8; MAX_SIP_BYTES];
        let mut sweep = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                _ = sweep.tick() => self.forget_ended(),
                got = self.socket.recv_from(&mut buf) => {
                    let Ok((n, src)) = got else { continue };
                    if let Some(m) = Msg::parse(&buf[..n]) {
                        self.on_datagram(m, src).await;
                    }
                }
            }
        }
        for call in self.calls.values_mut() {
            if let Some(relay) = call.relay.take() {
                relay.abort();
            }
        }
    }

    /// splitmix64: tags, branches and Call-IDs need to be unique, not secret.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A UUID-shaped identifier, as pjproject's Call-IDs and tags are.
    fn uuid(&mut self) -> String {
        let (a, b) = (self.random(), self.random());
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    fn host(&self) -> String {
        self.addr.to_string()
    }

    fn ip(&self) -> IpAddr {
        self.addr.ip()
    }

    async fn send(&self, text: &str, to: SocketAddr) {
        let _ = self.socket.send_to(text.as_bytes(), to).await;
    }

    fn forget_ended(&mut self) {
        let now = Instant::now();
        let gone: Vec<u64> = self
            .calls
            .values()
            .filter(|c| matches!(c.state, State::Ended(at) if now.duration_since(at) > LINGER))
            .map(|c| c.key)
            .collect();
        for key in gone {
            if let Some(call) = self.calls.remove(&key) {
                self.by_call_id.remove(&call.a_invite.call_id);
                self.by_call_id.remove(&call.b_call_id);
            }
        }
    }

    async fn on_datagram(&mut self, m: Msg, src: SocketAddr) {
        let key = self.by_call_id.get(m.call_id()).copied();
        match (key, m.request.is_some()) {
            (None, true)
                if m.method() == "INVITE" && tag(m.header("To").unwrap_or("")).is_none() =>
            {
                self.new_call(m, src).await
            }
            (None, true) if m.method() == "OPTIONS" => {
                let r = self.response(200, "OK", &Heads::of(&m), None, "", None);
                self.send(&r, src).await;
            }
            (None, true) if m.method() != "ACK" => {
                let r = self.response(
                    481,
                    "Call/Transaction Does Not Exist",
                    &Heads::of(&m),
                    None,
                    "",
                    None,
                );
                self.send(&r, src).await;
            }
            (None, _) => {}
            (Some(key), _) => {
                let Some(mut call) = self.calls.remove(&key) else {
                    return;
                };
                if m.call_id() == call.a_invite.call_id {
                    self.on_phone_leg(&mut call, m, src).await;
                } else {
                    self.on_trunk_leg(&mut call, m, src).await;
                }
                self.calls.insert(key, call);
            }
        }
    }

    /// A response to a request of the phone leg's, `to_tag` added to To when given.
    fn response(
        &self,
        status: u16,
        reason: &str,
        h: &Heads,
        to_tag: Option<&str>,
        extra: &str,
        sdp: Option<&str>,
    ) -> String {
        let mut r = format!("SIP/2.0 {status} {reason}\r\n");
        for via in &h.vias {
            r.push_str(&format!("Via: {via}\r\n"));
        }
        let to = match to_tag {
            Some(t) if tag(&h.to).is_none() => format!("{};tag={t}", h.to),
            _ => h.to.clone(),
        };
        r.push_str(&format!(
            "Call-ID: {}\r\nFrom: {}\r\nTo: {to}\r\nCSeq: {}\r\nServer: {}\r\n",
            h.call_id, h.from, h.cseq, self.config.user_agent
        ));
        r.push_str(extra);
        finish(r, sdp)
    }

    fn sdp(&mut self, port: u16, codec: u8) -> String {
        let session = self.random() % 1_000_000_000;
        let ip = self.ip();
        let family = if ip.is_ipv4() { "IP4" } else { "IP6" };
        let name = if codec == 8 { "PCMA" } else { "PCMU" };
        format!(
            "v=0\r\no=- {session} {session} IN {family} {ip}\r\ns=Asterisk\r\nc=IN {family} {ip}\r\nt=0 0\r\n\
m=audio {port} RTP/AVP {codec} 101\r\na=rtpmap:{codec} {name}/8000\r\na=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-16\r\na=ptime:20\r\na=maxptime:150\r\na=sendrecv\r\n"
        )
    }

    async fn new_call(&mut self, m: Msg, src: SocketAddr) {
        let heads = Heads::of(&m);
        let trying = self.response(100, "Trying", &heads, None, "", None);
        self.send(&trying, src).await;
        let dialled = user(m.request.as_ref().map_or("", |(_, uri)| uri)).to_string();
        let from = m.header("From").unwrap_or("");
        let caller = user(from).to_string();
        let a_tag = self.uuid();
        let routed = self
            .config
            .routes
            .iter()
            .find_map(|r| Some((r.apply(&dialled)?, r.trunk.unwrap_or(self.config.trunk))));
        let mut record = Bridged {
            inbound_call_id: heads.call_id.clone(),
            outbound_call_id: None,
            caller: caller.clone(),
            dialled: dialled.clone(),
            sent_to_trunk: routed.as_ref().map(|(n, _)| n.clone()),
            phone_status: 0,
        };
        let refusal = match &routed {
            None => Some((404, "Not Found")),
            Some(_) if self.calls.len() >= MAX_CALLS => Some((503, "Service Unavailable")),
            Some(_) => None,
        };
        let anchor = match refusal {
            Some(_) => None,
            None => Anchor::bind(self.ip(), self.config.rtp_ports, &mut self.next_rtp_port)
                .await
                .ok(),
        };
        let (Some((number, trunk)), Some(anchor)) = (routed, anchor) else {
            let (status, reason) = refusal.unwrap_or((503, "Service Unavailable"));
            record.phone_status = status;
            self.record(record);
            let r = self.response(status, reason, &heads, Some(&a_tag), "", None);
            self.send(&r, src).await;
            return;
        };
        if let Some(media) = sdp_audio(&m.body) {
            anchor.peers.lock().expect("media peers").phone = Some(media);
        }
        let codec = sdp_g711(&m.body);
        let b_call_id = self.uuid();
        let b_tag = self.uuid();
        let b_branch = format!("z9hG4bKPj{}", self.uuid());
        let b_cseq = (self.random() % 30_000) as u32 + 1;
        let name = display_name(from);
        let ip = self.ip();
        let b_from = if name.is_empty() {
            format!("<sip:{caller}@{ip}>;tag={b_tag}")
        } else {
            format!("\"{name}\" <sip:{caller}@{ip}>;tag={b_tag}")
        };
        let b_ruri = format!("sip:{number}@{trunk}");
        let b_to = format!("<sip:{number}@{trunk}>");
        let mut extra = String::new();
        if let Some(header) = &self.config.correlation_header {
            extra.push_str(&format!("{header}: {}\r\n", heads.call_id));
        }
        let sdp = self.sdp(anchor.trunk_port(), codec);
        let invite = self.request(
            "INVITE",
            &b_ruri,
            &b_branch,
            &b_from,
            &b_to,
            &b_call_id,
            b_cseq,
            &extra,
            Some(&sdp),
        );
        record.outbound_call_id = Some(b_call_id.clone());
        let record = self.record(record);
        let key = self.next_key;
        self.next_key += 1;
        let phone_port = anchor.phone_port();
        let peers = Arc::clone(&anchor.peers);
        let seed = self.random();
        let a_cseq = (self.random() % 30_000) as u32 + 1;
        let relay = tokio::spawn(anchor.relay(seed));
        self.by_call_id.insert(heads.call_id.clone(), key);
        self.by_call_id.insert(b_call_id.clone(), key);
        self.calls.insert(
            key,
            Call {
                key,
                state: State::Calling,
                record,
                a_target: m.header("Contact").map_or_else(
                    || format!("sip:{caller}@{src}"),
                    |c| contact_uri(c).to_string(),
                ),
                a_invite: heads,
                a_src: src,
                a_tag,
                a_last: Some(trying.into_bytes()),
                a_cseq,
                a_sent_180: false,
                a_sent_183: false,
                a_cancelled: false,
                b_call_id,
                b_trunk: trunk,
                b_ruri: b_ruri.clone(),
                b_branch,
                b_from,
                b_to,
                b_cseq,
                b_target: b_ruri,
                b_ack: None,
                peers,
                phone_port,
                codec,
                relay: Some(relay),
            },
        );
        self.send(&invite, trunk).await;
    }

    fn record(&self, record: Bridged) -> usize {
        let mut all = self.bridged.lock().expect("bridged calls");
        if all.len() < MAX_RECORDED_CALLS {
            all.push(record);
        }
        all.len() - 1
    }

    fn set_phone_status(&self, call: &Call, status: u16) {
        if let Some(r) = self
            .bridged
            .lock()
            .expect("bridged calls")
            .get_mut(call.record)
        {
            r.phone_status = status;
        }
    }

    /// A request of the PBX's own, on either leg.
    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        method: &str,
        ruri: &str,
        branch: &str,
        from: &str,
        to: &str,
        call_id: &str,
        cseq: u32,
        extra: &str,
        sdp: Option<&str>,
    ) -> String {
        let host = self.host();
        let mut r = format!(
            "{method} {ruri} SIP/2.0\r\nVia: SIP/2.0/UDP {host};rport;branch={branch}\r\nFrom: {from}\r\nTo: {to}\r\n\
Contact: <sip:asterisk@{host}>\r\nCall-ID: {call_id}\r\nCSeq: {cseq} {method}\r\n"
        );
        if method == "INVITE" {
            r.push_str(
                "Allow: OPTIONS, REGISTER, SUBSCRIBE, NOTIFY, PUBLISH, INVITE, ACK, BYE, CANCEL, UPDATE, PRACK, INFO, MESSAGE, REFER\r\n\
Supported: 100rel, timer, replaces, norefersub, histinfo\r\nSession-Expires: 1800\r\nMin-SE: 90\r\n",
            );
        }
        r.push_str(&format!(
            "Max-Forwards: 70\r\nUser-Agent: {}\r\n",
            self.config.user_agent
        ));
        r.push_str(extra);
        finish(r, sdp)
    }

    /// A request from the PBX to the trunk inside the trunk leg's dialog.
    async fn send_on_trunk_leg(&mut self, call: &mut Call, method: &str) {
        let (cseq, branch, ruri) = match method {
            // ACK of a refusal and CANCEL reuse the INVITE's branch and CSeq (RFC 3261 17.1.1.3, 9.1).
            "CANCEL" => (call.b_cseq, call.b_branch.clone(), call.b_ruri.clone()),
            "ACK" => (
                call.b_cseq,
                format!("z9hG4bKPj{}", self.uuid()),
                call.b_target.clone(),
            ),
            _ => {
                call.b_cseq += 1;
                (
                    call.b_cseq,
                    format!("z9hG4bKPj{}", self.uuid()),
                    call.b_target.clone(),
                )
            }
        };
        let to = if method == "CANCEL" {
            call.b_to.split(";tag=").next().unwrap_or("").to_string()
        } else {
            call.b_to.clone()
        };
        let r = self.request(
            method,
            &ruri,
            &branch,
            &call.b_from,
            &to,
            &call.b_call_id,
            cseq,
            if method == "BYE" {
                "Reason: Q.850;cause=16\r\n"
            } else {
                ""
            },
            None,
        );
        if method == "ACK" {
            call.b_ack = Some(r.clone().into_bytes());
        }
        self.send(&r, call.b_trunk).await;
    }

    fn end(&self, call: &mut Call) {
        call.state = State::Ended(Instant::now());
        if let Some(relay) = call.relay.take() {
            relay.abort();
        }
    }

    async fn answer_phone(&mut self, call: &mut Call, status: u16, reason: &str, sdp: bool) {
        let body = sdp.then(|| self.sdp(call.phone_port, call.codec));
        // Asterisk's responses carry a Contact without a user part (`<sip:10.0.0.1:5060>`).
        let contact = format!("Contact: <sip:{}>\r\n", self.host());
        let r = self.response(
            status,
            reason,
            &call.a_invite,
            Some(&call.a_tag),
            &contact,
            body.as_deref(),
        );
        self.send(&r, call.a_src).await;
        call.a_last = Some(r.into_bytes());
    }

    async fn on_phone_leg(&mut self, call: &mut Call, m: Msg, src: SocketAddr) {
        let heads = Heads::of(&m);
        match m.method() {
            "INVITE" if heads.cseq == call.a_invite.cseq => {
                if let Some(last) = &call.a_last {
                    let _ = self.socket.send_to(last, src).await;
                }
            }
            "ACK" | "" => {}
            "BYE" => {
                let ok = self.response(200, "OK", &heads, None, "", None);
                self.send(&ok, src).await;
                if call.state == State::Up {
                    self.send_on_trunk_leg(call, "BYE").await;
                }
                self.end(call);
            }
            "CANCEL" => {
                let ok = self.response(200, "OK", &heads, Some(&call.a_tag), "", None);
                self.send(&ok, src).await;
                if call.state == State::Calling && !call.a_cancelled {
                    call.a_cancelled = true;
                    self.answer_phone(call, 487, "Request Terminated", false)
                        .await;
                    self.set_phone_status(call, 487);
                    self.send_on_trunk_leg(call, "CANCEL").await;
                }
            }
            _ => {
                let r = self.response(501, "Not Implemented", &heads, Some(&call.a_tag), "", None);
                self.send(&r, src).await;
            }
        }
    }

    async fn on_trunk_leg(&mut self, call: &mut Call, m: Msg, src: SocketAddr) {
        if let Some((method, _)) = &m.request {
            let heads = Heads::of(&m);
            let status = match method.as_str() {
                "ACK" => return,
                "BYE" => 200,
                _ => 501,
            };
            let r = self.response(
                status,
                if status == 200 {
                    "OK"
                } else {
                    "Not Implemented"
                },
                &heads,
                None,
                "",
                None,
            );
            self.send(&r, src).await;
            if method == "BYE" && call.state == State::Up {
                // The trunk hung up: Asterisk hangs the phone's channel up with a BYE of its own.
                call.a_cseq += 1;
                let from = format!(
                    "{};tag={}",
                    call.a_invite.to.split(";tag=").next().unwrap_or(""),
                    call.a_tag
                );
                let branch = format!("z9hG4bKPj{}", self.uuid());
                let bye = self.request(
                    "BYE",
                    &call.a_target,
                    &branch,
                    &from,
                    &call.a_invite.from,
                    &call.a_invite.call_id,
                    call.a_cseq,
                    // Normal clearing, as Asterisk says on its BYEs.
                    "Reason: Q.850;cause=16\r\n",
                    None,
                );
                self.send(&bye, call.a_src).await;
                self.end(call);
            }
            return;
        }
        let (_, cseq_method) = m.cseq();
        if cseq_method != "INVITE" {
            return;
        }
        if let Some(to) = m.header("To")
            && tag(to).is_some()
        {
            call.b_to = to.to_string();
        }
        if let Some(contact) = m.header("Contact") {
            call.b_target = contact_uri(contact).to_string();
        }
        match m.status {
            100 => {}
            101..=199 => {
                if let Some(media) = sdp_audio(&m.body) {
                    call.peers.lock().expect("media peers").trunk = Some(media);
                }
                if call.state != State::Calling || call.a_cancelled {
                    return;
                }
                if m.status == 183 && sdp_audio(&m.body).is_some() && !call.a_sent_183 {
                    call.a_sent_183 = true;
                    self.answer_phone(call, 183, "Session Progress", true).await;
                } else if (180..=182).contains(&m.status) && !call.a_sent_180 {
                    call.a_sent_180 = true;
                    self.answer_phone(call, 180, "Ringing", false).await;
                }
            }
            200..=299 => {
                if let Some(ack) = &call.b_ack {
                    // A retransmitted 200: our ACK was lost.
                    let _ = self.socket.send_to(ack, call.b_trunk).await;
                    return;
                }
                if let Some(media) = sdp_audio(&m.body) {
                    call.peers.lock().expect("media peers").trunk = Some(media);
                }
                self.send_on_trunk_leg(call, "ACK").await;
                if call.a_cancelled {
                    // Answered after the phone gave up: Asterisk hangs the trunk leg up.
                    self.send_on_trunk_leg(call, "BYE").await;
                    self.end(call);
                    return;
                }
                call.state = State::Up;
                self.answer_phone(call, 200, "OK", true).await;
            }
            status => {
                // ACK of a non-2xx final response: same branch as the INVITE (RFC 3261 17.1.1.3).
                let ack = self.request(
                    "ACK",
                    &call.b_ruri,
                    &call.b_branch,
                    &call.b_from,
                    &call.b_to,
                    &call.b_call_id,
                    call.b_cseq,
                    "",
                    None,
                );
                self.send(&ack, call.b_trunk).await;
                if call.state == State::Calling && !call.a_cancelled {
                    let relayed = relayed_status(status);
                    self.answer_phone(call, relayed, reason(relayed), false)
                        .await;
                    self.set_phone_status(call, relayed);
                }
                if call.state == State::Calling {
                    self.end(call);
                }
            }
        }
    }
}

/// Content-Type and Content-Length, and the body.
fn finish(mut r: String, sdp: Option<&str>) -> String {
    match sdp {
        Some(body) => r.push_str(&format!(
            "Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )),
        None => r.push_str("Content-Length: 0\r\n\r\n"),
    }
    r
}

/// The reason phrase pjproject sends with a status.
fn reason(status: u16) -> &'static str {
    match status {
        302 => "Moved Temporarily",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        410 => "Gone",
        480 => "Temporarily Unavailable",
        484 => "Address Incomplete",
        486 => "Busy Here",
        487 => "Request Terminated",
        488 => "Not Acceptable Here",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Decline",
    }
}

#[cfg(test)]
mod tests {
    use super::DialPattern;

    #[test]
    fn dial_patterns_strip_and_prepend() {
        let p = DialPattern::new("90", "0049");
        assert_eq!(p.apply("9017112345").as_deref(), Some("004917112345"));
        assert_eq!(p.apply("017112345"), None);
        assert_eq!(p.apply("90"), None);
        assert_eq!(
            DialPattern::new("", "").apply("201").as_deref(),
            Some("201")
        );
    }
}
