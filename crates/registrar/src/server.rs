//! The registrar's request handling: one entry point, [`Registrar::dispatch`], for a request
//! from any transport. REGISTER goes through the AOR's queue (in order, one at a time, commit
//! before answer); everything else is answered at once from memory.

use crate::binding::{self, Binding, Policy, Update};
use crate::devices::{DEVICE_LOG_ENTRIES_MAX, DEVICES_MAX, Device, DeviceLog};
use crate::digest::{self, Algorithm, Credentials, NonceCounts, NonceKey, Verdict};
use crate::guard::{FailedAttempts, Transactions, TxVerdict, transaction_key};
use crate::location::{self, Aor, AorQuery, Location};
use crate::metrics::{Metrics, ReasonLabel};
use crate::request::{self, Refusal, Register};
use crate::response::{self, ALLOW, SUPPORTED};
use crate::{Config, Error};
use kv::{Durability, Store};
use parking_lot::Mutex;
use sip::Message;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Timer J / Timer H for unreliable transports: 64 × T1 (500 ms).
const TX_LINGER_MS: u64 = 32_000;
const NONCE_SECRET_KEY: &str = "nonce";
/// The reason phrase of the 400 for credentials whose `uri` is not the Request-URI.
pub const DIGEST_URI_MISMATCH: &str = "Bad Request (digest uri is not the Request-URI)";
/// REGISTERs queued on one AOR before more get 503 (a phone sends one at a time; several
/// phones of one AOR, each maybe retransmitting, stay far below).
pub const AOR_QUEUE_MAX: usize = 64;
const RETRY_AFTER: &str = "Retry-After: 1\r\n";
/// Domains an ambiguous lookup names (the count says how many there are).
pub const AMBIGUOUS_DOMAINS_SHOWN: usize = 8;

/// Where a lookup led: see [`Registrar::find`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// One AOR and its live bindings in q order (none when it has none).
    Aor { aor: String, bindings: Vec<Binding> },
    /// A bare user with no AOR to look in: several domains or none configured, and no live
    /// binding in any of them.
    Nothing,
    /// A bare user with live bindings in several domains: which one is meant cannot be told.
    /// `domains` names the first [`AMBIGUOUS_DOMAINS_SHOWN`] in order; `bound_domains` counts
    /// them all.
    Ambiguous {
        user: String,
        domains: Vec<String>,
        bound_domains: usize,
    },
}

/// An IP address as a URI's host (`192.0.2.1`, `[2001:db8::1]`), rather than a domain name.
fn is_address(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<std::net::IpAddr>().is_ok()
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The transport a request came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    Tls,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Tls => "tls",
        }
    }
}

/// Where a response goes: a datagram back to the source, or the connection's writer.
#[derive(Clone)]
pub enum ReplyTo {
    Udp(Arc<tokio::net::UdpSocket>),
    /// A TCP or TLS connection's writer, and the connection (told when a REGISTER on it is
    /// answered 200).
    Stream(mpsc::Sender<Vec<u8>>, Arc<crate::streams::Flow>),
}

/// A request and where it came from.
pub struct Job {
    pub bytes: Vec<u8>,
    pub source: SocketAddr,
    pub transport: Transport,
    pub reply: ReplyTo,
    tx_key: Option<String>,
}

impl Job {
    pub fn new(bytes: Vec<u8>, source: SocketAddr, transport: Transport, reply: ReplyTo) -> Job {
        Job {
            bytes,
            source,
            transport,
            reply,
            tx_key: None,
        }
    }
}

/// The registrar: configuration, location service, credentials and protections.
pub struct Registrar {
    config: Config,
    policy: Policy,
    location: Location,
    nonce_key: NonceKey,
    nonce_counts: Mutex<NonceCounts>,
    failures: Mutex<FailedAttempts>,
    /// Failed attempts and lapsed bindings per user and address, for the device list.
    device_log: Mutex<DeviceLog>,
    transactions: Mutex<Transactions>,
    /// The AOR queues being drained by tasks of their own.
    drains: Arc<Drains>,
    pub metrics: Metrics,
}

/// Counts the tasks draining AOR queues, so that a stopping server waits for the REGISTERs it
/// accepted (their commit and their answer) and for those tasks' hold on the registrar, and so
/// on the store, before it lets go of the store.
#[derive(Default)]
struct Drains {
    running: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Drains {
    /// Runs `drain` on a task of its own, counted until it has returned and dropped what it
    /// held.
    fn spawn(self: &Arc<Self>, drain: impl std::future::Future<Output = ()> + Send + 'static) {
        use std::sync::atomic::Ordering::SeqCst;
        self.running.fetch_add(1, SeqCst);
        let me = self.clone();
        tokio::spawn(async move {
            drain.await;
            if me.running.fetch_sub(1, SeqCst) == 1 {
                me.idle.notify_waiters();
            }
        });
    }

    async fn done(&self) {
        loop {
            let idle = self.idle.notified();
            let mut idle = std::pin::pin!(idle);
            idle.as_mut().enable();
            if self.running.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// The server secret for nonces: read from the store, or made and stored on first start.
pub fn nonce_key(store: &Store) -> Result<NonceKey, Error> {
    let ns = store.namespace(crate::users::NAMESPACE)?;
    if let Some(v) = ns.get("secret", NONCE_SECRET_KEY)?
        && let Ok(bytes) = <[u8; 32]>::try_from(v.as_bytes())
    {
        return Ok(NonceKey::new(bytes));
    }
    let key = NonceKey::random();
    ns.put("secret", NONCE_SECRET_KEY, key.bytes().to_vec())?;
    Ok(key)
}

impl Registrar {
    /// Opens the registrar on `store`: loads the bindings and the nonce secret.
    pub fn open(store: &Store, config: Config) -> Result<Arc<Registrar>, Error> {
        config.check()?;
        let policy = Policy {
            min_expires_s: config.min_expires_s,
            max_expires_s: config.max_expires_s,
            default_expires_s: config.default_expires_s,
            max_contacts: config.max_contacts,
        };
        let location = Location::open(store, now_ms())?;
        let r = Registrar {
            nonce_key: nonce_key(store)?,
            nonce_counts: Mutex::new(NonceCounts::new(config.nonce_counts_max)),
            failures: Mutex::new(FailedAttempts::new(
                config.auth_failures_max,
                config.auth_failure_window_s,
                config.sources_tracked_max,
            )),
            device_log: Mutex::new(DeviceLog::new(DEVICE_LOG_ENTRIES_MAX)),
            transactions: Mutex::new(Transactions::new(config.transactions_max)),
            drains: Arc::default(),
            config,
            policy,
            location,
            metrics: Metrics::new(),
        };
        r.refresh_gauges();
        Ok(Arc::new(r))
    }

    /// Returns once no task drains an AOR queue: every REGISTER taken from the wire has been
    /// committed and answered. A server that stopped reading waits for this before it lets go
    /// of the store ([`crate::serve`]).
    pub async fn drained(&self) {
        self.drains.done().await
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The live bindings of `aor` (`sip:user@domain`, `user@domain`, or a bare `user` when
    /// that names one AOR: see [`Registrar::find`]), from memory, in q order.
    pub fn lookup(&self, aor: &str) -> Vec<Binding> {
        match self.find(aor) {
            Found::Aor { bindings, .. } => bindings,
            Found::Nothing | Found::Ambiguous { .. } => Vec::new(),
        }
    }

    /// Where `query` leads, from memory. An AOR (`sip:1001@example.com`, `1001@example.com`)
    /// is that AOR. A bare user (`1001`, as a dialplan has it) is the user in the one domain
    /// served when `domains` names one; otherwise the AOR the user has bindings in, when there
    /// is exactly one (with `domains = []` phones register in whatever domain they were given,
    /// often the server's address); bindings in several domains are [`Found::Ambiguous`].
    pub fn find(&self, query: &str) -> Found {
        let now = now_ms();
        let user = match AorQuery::parse(query) {
            AorQuery::Aor(aor) => {
                let bindings = self.location.lookup(&aor, now);
                return Found::Aor { aor, bindings };
            }
            AorQuery::User(user) => user,
        };
        if let [domain] = self.config.domains.as_slice() {
            let aor = format!("sip:{user}@{}", domain.to_ascii_lowercase());
            let bindings = self.location.lookup(&aor, now);
            return Found::Aor { aor, bindings };
        }
        let mut bound = self.location.user_bindings(&user, now);
        // Bindings left from a domain no longer served do not count.
        bound.retain(|(aor, _)| location::domain_of(aor).is_some_and(|d| self.serves(d)));
        match bound.len() {
            0 => Found::Nothing,
            1 => {
                let (aor, bindings) = bound.pop().expect("one entry");
                Found::Aor {
                    aor: aor.to_string(),
                    bindings,
                }
            }
            n => Found::Ambiguous {
                domains: bound
                    .iter()
                    .take(AMBIGUOUS_DOMAINS_SHOWN)
                    .filter_map(|(aor, _)| location::domain_of(aor).map(str::to_string))
                    .collect(),
                bound_domains: n,
                user,
            },
        }
    }

    fn refresh_gauges(&self) {
        let s = self.location.stats();
        self.metrics.aors.set(s.aors as i64);
        self.metrics.bindings.set(s.bindings as i64);
        self.metrics
            .transactions
            .set(self.transactions.lock().len() as i64);
    }

    fn send(self: &Arc<Self>, job: &Job, bytes: Vec<u8>) {
        match &job.reply {
            ReplyTo::Udp(sock) => {
                if let Err(e) = sock.try_send_to(&bytes, job.source) {
                    if e.kind() == std::io::ErrorKind::WouldBlock {
                        // The socket's send buffer is full: wait for room off this path.
                        let sock = sock.clone();
                        let to = job.source;
                        tokio::spawn(async move {
                            let _ = sock.send_to(&bytes, to).await;
                        });
                    } else {
                        tracing::debug!(to = %job.source, error = %e, "cannot send a SIP response");
                    }
                }
            }
            ReplyTo::Stream(tx, _) => {
                // A full writer queue means a peer that does not read: drop, it will retransmit
                // or the connection times out.
                if tx.try_send(bytes).is_err() {
                    self.drop_packet("stream_writer_full");
                }
            }
        }
    }

    fn drop_packet(&self, reason: &'static str) {
        self.metrics
            .dropped
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Handles one packet. REGISTER is queued on its AOR; the rest is answered here.
    pub fn dispatch(self: &Arc<Self>, mut job: Job) {
        // A Latin-1 display name is read with its bad bytes replaced, not dropped.
        let mut scratch = Vec::new();
        let Ok((msg, _)) = Message::parse_lossy(&job.bytes, &mut scratch) else {
            self.drop_packet("unparsable");
            return;
        };
        let Some((method, _uri)) = request::request_line(&msg) else {
            // A response: the registrar sends no requests, so none is expected.
            self.drop_packet("response");
            return;
        };
        if method == "ACK" {
            // The ACK of a non-2xx final response ends the INVITE transaction; nothing to say.
            return;
        }
        if self
            .failures
            .lock()
            .blocked(job.source.ip(), now_ms() / 1000)
        {
            self.drop_packet("source_throttled");
            return;
        }
        // RFC 3261 8.2.6: a request without these cannot be answered.
        if msg.header("via").is_none() || msg.cseq().is_none() || msg.call_id().is_none() {
            self.drop_packet("unanswerable");
            return;
        }
        let tx_key = transaction_key(&msg, method);
        if let Some(key) = &tx_key {
            match self.transactions.lock().begin(key, now_ms(), TX_LINGER_MS) {
                TxVerdict::New => {}
                TxVerdict::Absorb => {
                    self.metrics.retransmissions.inc();
                    return;
                }
                TxVerdict::Resend(bytes) => {
                    self.metrics.retransmissions.inc();
                    self.send(&job, bytes.to_vec());
                    return;
                }
            }
        }
        if method != "REGISTER" {
            let (code, bytes) = self.answer_other(&msg, method, job.source);
            self.finish(&job, tx_key.as_deref(), method, code, bytes);
            return;
        }
        let aor = match request::to_aor(&msg) {
            Ok((aor, _, _)) => aor,
            Err(refusal) => {
                let bytes = refuse(&msg, &refusal, job.source);
                self.finish(&job, tx_key.as_deref(), method, refusal.status, bytes);
                return;
            }
        };
        if self.location.slot(&aor).queue.lock().jobs.len() >= AOR_QUEUE_MAX {
            // A flood on one AOR: refused cheaply, and the queue's memory stays bounded.
            let bytes = response::build(&msg, 503, "Service Unavailable", RETRY_AFTER, job.source);
            self.drop_packet("aor_queue_full");
            self.finish(&job, tx_key.as_deref(), method, 503, bytes);
            return;
        }
        drop(msg);
        job.tx_key = tx_key;
        loop {
            let slot = self.location.slot(&aor);
            let start = {
                let mut q = slot.queue.lock();
                if q.retired {
                    // The sweep dropped this entry after we found it: look it up again.
                    continue;
                }
                q.jobs.push_back(job);
                !std::mem::replace(&mut q.draining, true)
            };
            if start {
                let me = self.clone();
                self.drains.spawn(me.drain(slot));
            }
            return;
        }
    }

    /// Runs an AOR's queued REGISTERs in order until the queue is empty.
    async fn drain(self: Arc<Self>, slot: Arc<Aor>) {
        loop {
            let job = {
                let mut q = slot.queue.lock();
                match q.jobs.pop_front() {
                    Some(j) => j,
                    None => {
                        q.draining = false;
                        drop(q);
                        // An AOR left without bindings (a REGISTER refused, a query, an
                        // unregistration) leaves memory now: unanswered REGISTERs for made-up
                        // AORs must not grow the map.
                        self.location.forget_if_empty(&slot);
                        return;
                    }
                }
            };
            let (code, bytes) = self.register(&slot, &job).await;
            self.finish(&job, job.tx_key.as_deref(), "REGISTER", code, bytes);
        }
    }

    fn finish(
        self: &Arc<Self>,
        job: &Job,
        tx_key: Option<&str>,
        method: &str,
        code: u16,
        bytes: Vec<u8>,
    ) {
        if let Some(key) = tx_key {
            self.transactions
                .lock()
                .complete(key, &bytes, job.transport == Transport::Udp);
        }
        self.metrics.answered(method, code);
        if method == "REGISTER"
            && (200..300).contains(&code)
            && let ReplyTo::Stream(_, flow) = &job.reply
        {
            flow.mark_registered();
        }
        self.send(job, bytes);
    }

    fn answer_other(&self, msg: &Message<'_>, method: &str, source: SocketAddr) -> (u16, Vec<u8>) {
        let allow = format!("Allow: {ALLOW}\r\nSupported: {SUPPORTED}\r\n");
        match method {
            "OPTIONS" => (
                200,
                response::build(
                    msg,
                    200,
                    "OK",
                    &format!("{allow}Accept: application/sdp\r\n"),
                    source,
                ),
            ),
            "INVITE" if self.config.redirect => self.redirect(msg, source),
            "CANCEL" => (
                481,
                response::build(msg, 481, "Call/Transaction Does Not Exist", "", source),
            ),
            "INVITE" | "BYE" | "SUBSCRIBE" | "NOTIFY" | "PUBLISH" | "INFO" | "MESSAGE"
            | "UPDATE" | "PRACK" | "REFER" => (
                405,
                response::build(msg, 405, "Method Not Allowed", &allow, source),
            ),
            _ => (
                501,
                response::build(msg, 501, "Not Implemented", &allow, source),
            ),
        }
    }

    /// Redirect mode: an INVITE for a registered AOR gets 302 with its contacts in q order.
    fn redirect(&self, msg: &Message<'_>, source: SocketAddr) -> (u16, Vec<u8>) {
        let uri = request::request_line(msg).map_or("", |(_, u)| u);
        let Some((aor, domain, user)) = request::aor_of(uri) else {
            return (404, response::build(msg, 404, "Not Found", "", source));
        };
        let list = if is_address(&domain) {
            // Asterisk names Tandem by its address (a trunk's `contact=sip:127.0.0.1:5060`),
            // not by the domain the phone registered in: the user is looked up as the
            // dialplan's bare user is, when the address itself is no AOR's domain.
            match self.location.lookup(&aor, now_ms()) {
                found if !found.is_empty() => found,
                _ => match self.find(user) {
                    Found::Aor { bindings, .. } => bindings,
                    Found::Nothing => Vec::new(),
                    Found::Ambiguous { domains, .. } => {
                        tracing::warn!(
                            user,
                            ?domains,
                            "an INVITE names the user by the registrar's address, and the user \
                             is registered in several domains: 480; send it to user@domain"
                        );
                        Vec::new()
                    }
                },
            }
        } else if self.serves(&domain) {
            self.location.lookup(&aor, now_ms())
        } else {
            return (404, response::build(msg, 404, "Not Found", "", source));
        };
        if list.is_empty() {
            return (
                480,
                response::build(msg, 480, "Temporarily Unavailable", "", source),
            );
        }
        let mut headers = String::new();
        for b in &list {
            let _ = write!(headers, "Contact: <{}>", b.uri);
            if let Some(q) = b.q_milli {
                let _ = write!(headers, ";q={}", q_text(q));
            }
            headers.push_str("\r\n");
        }
        (
            302,
            response::build(msg, 302, "Moved Temporarily", &headers, source),
        )
    }

    fn serves(&self, domain: &str) -> bool {
        self.config.domains.is_empty()
            || self
                .config
                .domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(domain))
    }

    /// A failed digest attempt: counted by reason, logged for the device list, and held
    /// against its source address.
    fn failed(&self, attempt: &Attempt<'_>, reason: &'static str) {
        let source = attempt.source;
        self.metrics
            .auth_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
        self.device_log.lock().failed(
            attempt.req.user,
            &attempt.req.domain,
            source.ip(),
            &format!("{}:{source}", attempt.transport.name()),
            attempt.req.user_agent,
            reason,
            now_ms(),
        );
        if self.failures.lock().failed(source.ip(), now_ms() / 1000) {
            tracing::warn!(source = %source.ip(), "too many failed SIP digest attempts; requests from this address are dropped for a while");
        }
    }

    fn challenge(&self, msg: &Message<'_>, source: SocketAddr, stale: bool) -> (u16, Vec<u8>) {
        let nonce = self.nonce_key.nonce(&self.config.realm, now_ms() / 1000);
        let mut headers = String::new();
        for &a in &self.config.algorithms {
            let _ = write!(
                headers,
                "WWW-Authenticate: {}\r\n",
                digest::challenge(&self.config.realm, &nonce, a, stale)
            );
        }
        (
            401,
            response::build(msg, 401, "Unauthorized", &headers, source),
        )
    }

    /// Checks the request's credentials. `Ok(())` lets it through; `Err` is the response.
    fn authenticate(
        &self,
        msg: &Message<'_>,
        attempt: &Attempt<'_>,
        method: &str,
    ) -> Result<(), (u16, Vec<u8>)> {
        let (req, source) = (attempt.req, attempt.source);
        if self.config.algorithms.is_empty() {
            return Ok(());
        }
        // Of several Authorization headers, the one for our realm with an algorithm we offer.
        let found: Option<(Credentials<'_>, Algorithm)> = msg
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("authorization"))
            .filter_map(|h| digest::parse_authorization(h.value))
            .filter(|c| c.realm == self.config.realm)
            .find_map(|c| {
                let a = Algorithm::from_name(c.algorithm.unwrap_or("MD5"))?;
                self.config.algorithms.contains(&a).then_some((c, a))
            });
        let Some((cred, algorithm)) = found else {
            return Err(self.challenge(msg, source, false));
        };
        // RFC 7616 3.4.6: the response covers `uri`, which must name the resource requested, or
        // a response computed for another request (another server's) would pass here. Equal as
        // SIP URIs (RFC 3261 19.1.4), not as text: a phone may write the same URI another way.
        let request_uri = request::request_line(msg).map_or("", |(_, u)| u);
        if !sip::uri_eq(cred.uri, request_uri) {
            self.failed(attempt, "uri_mismatch");
            return Err((
                400,
                response::build(msg, 400, DIGEST_URI_MISMATCH, "", source),
            ));
        }
        let verdict = self.verify(&cred, algorithm, method);
        match verdict {
            Verdict::Accepted => {}
            Verdict::Stale => return Err(self.challenge(msg, source, true)),
            Verdict::Rejected(reason) => {
                self.failed(attempt, reason);
                return Err(self.challenge(msg, source, false));
            }
        }
        if cred.username != req.user {
            self.failed(attempt, "wrong_aor");
            return Err((403, response::build(msg, 403, "Forbidden", "", source)));
        }
        Ok(())
    }

    fn verify(&self, cred: &Credentials<'_>, algorithm: Algorithm, method: &str) -> Verdict {
        let realm = &self.config.realm;
        let Some(issued_s) = self.nonce_key.issued_s(realm, cred.nonce) else {
            return Verdict::Rejected("foreign_nonce");
        };
        let now_s = now_ms() / 1000;
        if issued_s > now_s + 5 {
            return Verdict::Rejected("foreign_nonce");
        }
        if now_s > issued_s + self.config.nonce_ttl_s as u64 {
            return Verdict::Stale;
        }
        if !cred.qop.is_some_and(|q| q.eq_ignore_ascii_case("auth")) {
            return Verdict::Rejected("no_qop");
        }
        let Some(ha1s) = crate::users::lookup(self.location.namespace(), realm, cred.username)
        else {
            return Verdict::Rejected("unknown_user");
        };
        let Some(ha1) = ha1s.get(algorithm) else {
            return Verdict::Rejected("algorithm_not_stored");
        };
        if !digest::response_matches(algorithm, ha1, cred, method) {
            return Verdict::Rejected("wrong_response");
        }
        let nc = cred
            .nc
            .and_then(|n| u32::from_str_radix(n, 16).ok())
            .unwrap_or(0);
        let oldest_s = now_s.saturating_sub(self.config.nonce_ttl_s as u64);
        let fresh = self.nonce_counts.lock().check(
            cred.nonce,
            cred.username,
            cred.cnonce.unwrap_or(""),
            nc,
            issued_s,
            oldest_s,
        );
        if fresh {
            Verdict::Accepted
        } else {
            Verdict::Stale
        }
    }

    /// One REGISTER, with the AOR's queue held: checks, update, commit, answer.
    async fn register(&self, slot: &Aor, job: &Job) -> (u16, Vec<u8>) {
        let mut scratch = Vec::new();
        let Ok((msg, _)) = Message::parse_lossy(&job.bytes, &mut scratch) else {
            return (0, Vec::new());
        };
        let source = job.source;
        let req = match request::register(&msg) {
            Ok(r) => r,
            Err(refusal) => return (refusal.status, refuse(&msg, &refusal, source)),
        };
        if let Some(tags) = unsupported_required(&msg) {
            let h = format!("Unsupported: {tags}\r\n");
            return (420, response::build(&msg, 420, "Bad Extension", &h, source));
        }
        if !self.serves(&req.domain) {
            return (404, response::build(&msg, 404, "Not Found", "", source));
        }
        let attempt = Attempt {
            req: &req,
            source,
            transport: job.transport,
        };
        if let Err(r) = self.authenticate(&msg, &attempt, "REGISTER") {
            return r;
        }
        let now = now_ms();
        let current = slot.live(now);
        let source_text = format!("{}:{source}", job.transport.name());
        let list = match binding::apply(&current, &req, &source_text, now, &self.policy) {
            Err(refusal) => return (refusal.status, refuse(&msg, &refusal, source)),
            Ok(Update::Unchanged) => current,
            Ok(Update::Changed(list)) => {
                let started = Instant::now();
                let committed = match self.location.commit(slot, &list, Durability::Sync) {
                    Ok(c) => c.await.map_err(Error::from),
                    Err(e) => Err(e),
                };
                self.metrics
                    .commit_seconds
                    .observe(started.elapsed().as_secs_f64());
                if let Err(e) = committed {
                    tracing::error!(aor = %slot.name, error = %e, "binding change not committed; answered 500");
                    return (
                        500,
                        response::build(
                            &msg,
                            500,
                            "Server Internal Error",
                            "Retry-After: 5\r\n",
                            source,
                        ),
                    );
                }
                // The gauges follow at the next sweep (every second): reading them walks every
                // shard, which is not for each REGISTER.
                self.location.set(slot, list.clone());
                list
            }
        };
        (200, self.ok(&msg, &req, &list, now, source))
    }

    fn ok(
        &self,
        msg: &Message<'_>,
        req: &Register<'_>,
        list: &[Binding],
        now: u64,
        source: SocketAddr,
    ) -> Vec<u8> {
        let mut h = String::with_capacity(128 * (list.len() + 1));
        let mut outbound = false;
        for b in list {
            let _ = write!(h, "Contact: <{}>;expires={}", b.uri, b.remaining_s(now));
            if let Some(q) = b.q_milli {
                let _ = write!(h, ";q={}", q_text(q));
            }
            if let (Some(i), Some(r)) = (&b.instance, b.reg_id) {
                let _ = write!(h, ";+sip.instance={i};reg-id={r}");
                outbound |= b.call_id == req.call_id;
            }
            h.push_str("\r\n");
        }
        if req.supported_path && !req.path.is_empty() {
            let _ = write!(h, "Path: {}\r\n", req.path.join(", "));
        }
        if outbound && req.supported_outbound {
            h.push_str("Require: outbound\r\n");
        }
        let _ = write!(
            h,
            "Date: {}\r\nSupported: {SUPPORTED}\r\n",
            response::http_date((now / 1000) as i64)
        );
        response::build(msg, 200, "OK", &h, source)
    }

    /// Removes lapsed bindings of the AORs due on the wheel; called every second.
    pub async fn sweep(self: &Arc<Self>) {
        let now = now_ms();
        for slot in self.location.due(now) {
            // The sweep takes the AOR's queue like a REGISTER does, so that its write can never
            // land after (and undo) a REGISTER's. A busy AOR is looked at again later.
            let claimed = {
                let mut q = slot.queue.lock();
                q.jobs.is_empty() && !std::mem::replace(&mut q.draining, true)
            };
            if !claimed {
                self.location.set(&slot, slot.bindings().to_vec());
                continue;
            }
            let live = slot.live(now);
            let lapsed = slot.bindings().len() - live.len();
            if lapsed > 0 {
                self.metrics.expired.inc_by(lapsed as u64);
                let gone: Vec<Binding> = slot
                    .bindings()
                    .iter()
                    .filter(|b| !b.is_live(now))
                    .cloned()
                    .collect();
                if let (Some(user), Some(domain)) = (
                    location::user_of(&slot.name),
                    location::domain_of(&slot.name),
                ) {
                    self.device_log.lock().lapsed(user, domain, &gone, now);
                }
                // Expiry needs no fsync: a restart drops lapsed bindings on load anyway.
                if let Err(e) = self.location.commit(&slot, &live, Durability::Async) {
                    tracing::warn!(aor = %slot.name, error = %e, "cannot store an expiry");
                }
            }
            self.location.set(&slot, live);
            let more = {
                let mut q = slot.queue.lock();
                q.draining = !q.jobs.is_empty();
                q.draining
            };
            if more {
                let me = self.clone();
                self.drains.spawn(me.drain(slot));
            } else {
                self.location.forget_if_empty(&slot);
            }
        }
        self.refresh_gauges();
    }
}

/// A REGISTER whose credentials are being checked, and where it came from.
struct Attempt<'a> {
    req: &'a Register<'a>,
    source: SocketAddr,
    transport: Transport,
}

impl Registrar {
    /// Every device the registrar knows now, at most [`DEVICES_MAX`]: each live binding (a
    /// user at a source address), and each (user, address) of its log that has no live binding
    /// (failed attempts, a binding that lapsed). A failure logged for a pair with a live
    /// binding rides on that binding's row. From memory; walks every AOR.
    pub fn devices(&self, now_ms: u64) -> Vec<Device> {
        use std::collections::HashMap;
        let mut rows: HashMap<(String, String), Device> = HashMap::new();
        'aors: for aor in self.location.aors() {
            let (Some(user), Some(domain)) =
                (location::user_of(&aor.name), location::domain_of(&aor.name))
            else {
                continue;
            };
            for b in aor.live(now_ms) {
                if rows.len() >= DEVICES_MAX {
                    break 'aors;
                }
                let address = crate::devices::source_ip(&b.source)
                    .map_or_else(|| b.source.clone(), |ip| ip.to_string());
                let row = rows.entry((user.to_string(), address.clone())).or_default();
                // Of several bindings of one user at one address, the one written last.
                if row.registered_ms.is_some_and(|t| t > b.updated_at_ms) {
                    continue;
                }
                *row = Device {
                    user: user.to_string(),
                    domain: domain.to_string(),
                    address,
                    source: b.source.clone(),
                    contact: b.uri.clone(),
                    user_agent: b.user_agent.clone(),
                    registered_ms: Some(b.updated_at_ms),
                    expires_ms: Some(b.expires_at_ms),
                    live: true,
                    ..Device::default()
                };
            }
        }
        let log = self.device_log.lock();
        for (ip, e) in log.entries() {
            let key = (e.user.clone(), ip.to_string());
            if !rows.contains_key(&key) && rows.len() >= DEVICES_MAX {
                continue;
            }
            let row = rows.entry(key).or_insert_with(|| Device {
                user: e.user.clone(),
                domain: e.domain.clone(),
                address: ip.to_string(),
                source: e.source.clone(),
                user_agent: e.user_agent.clone(),
                ..Device::default()
            });
            if !row.live
                && let Some(lapsed) = &e.lapsed
            {
                row.contact = lapsed.contact.clone();
                row.registered_ms = Some(lapsed.written_ms);
                row.expires_ms = Some(lapsed.expired_ms);
            }
            row.failures = e.failures;
            row.last_failure_ms = e.last_failure_ms;
            if e.last_failure_ms.is_some() {
                (row.last_failure, row.last_failure_reason) =
                    crate::devices::failure_of(e.last_reason);
            }
        }
        rows.into_values().collect()
    }
}

/// The Require option tags the registrar does not implement, comma-joined.
fn unsupported_required(msg: &Message<'_>) -> Option<String> {
    let tags: Vec<&str> = msg
        .header_values("require")
        .map(str::trim)
        .filter(|t| !t.eq_ignore_ascii_case("path") && !t.eq_ignore_ascii_case("outbound"))
        .collect();
    (!tags.is_empty()).then(|| tags.join(", "))
}

fn refuse(msg: &Message<'_>, refusal: &Refusal, source: SocketAddr) -> Vec<u8> {
    let extra = refusal
        .header
        .as_ref()
        .map(|h| format!("{h}\r\n"))
        .unwrap_or_default();
    response::build(msg, refusal.status, &refusal.reason, &extra, source)
}

fn q_text(q_milli: u16) -> String {
    if q_milli >= 1000 {
        "1".into()
    } else {
        format!("0.{q_milli:03}").trim_end_matches('0').to_string()
    }
}
