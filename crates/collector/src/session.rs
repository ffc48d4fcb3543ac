//! One sensor's connection, from accept to end: TLS or plain TCP (loopback only), `Hello` and
//! its checks, then records to the writers, acknowledgements back, heartbeats, and the pcap
//! requests the collector sends on the session.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use uplink::{Message, PcapBody};

use crate::sensors::{SensorList, Verdict};
use crate::state::Refusal;
use crate::{Batch, PcapFetchError, Shared};

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Frames waiting to be written on one session (pcap requests, heartbeat answers).
const OUTGOING_FRAMES_MAX: usize = 16;
/// Pcap reply chunks waiting for their requester.
const REPLY_CHUNKS_MAX: usize = 4;

pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A session the collector holds: what the writers and pcap requests reach it through.
pub(crate) struct SessionEntry {
    pub id: u64,
    pub sensor: String,
    out: mpsc::Sender<Vec<u8>>,
    acked: watch::Sender<u64>,
    end: watch::Sender<Option<String>>,
    nack: Mutex<Option<uplink::Nack>>,
    /// Each batch received and not yet acknowledged, in the order it came.
    inflight: Mutex<VecDeque<Inflight>>,
    pending: Mutex<HashMap<u64, mpsc::Sender<PcapBody>>>,
}

/// A batch of a session on its way to the database.
struct Inflight {
    /// Its last record's number.
    upto: u64,
    received: Instant,
    committed: bool,
}

impl SessionEntry {
    pub fn end(&self, why: &str) {
        self.end.send_if_modified(|e| {
            if e.is_none() {
                *e = Some(why.to_string());
                true
            } else {
                false
            }
        });
    }

    pub fn is_ended(&self) -> bool {
        self.end.borrow().is_some()
    }

    /// The batch ending at `upto` is committed. A sensor's batches are spread over the
    /// writers (one sensor alone keeps every database connection busy) and may commit out of
    /// order; the acknowledgement, which covers every record up to its number, moves only over
    /// batches that are all committed, so it never covers one still being written or one that
    /// failed.
    pub fn ack(&self, upto: u64) {
        let mut q = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = q.iter_mut().find(|b| b.upto == upto) {
            b.committed = true;
        }
        let mut covered = None;
        while q.front().is_some_and(|b| b.committed) {
            covered = q.pop_front().map(|b| b.upto);
        }
        drop(q);
        if let Some(upto) = covered {
            self.acked.send_if_modified(|a| {
                if upto > *a {
                    *a = upto;
                    true
                } else {
                    false
                }
            });
        }
    }

    /// The batch ending at `upto` was not stored: say so, and end the session (so that no
    /// later acknowledgement covers it).
    pub fn nack(&self, upto: u64, reason: &str) {
        {
            let mut n = self.nack.lock().unwrap_or_else(|e| e.into_inner());
            if n.is_none() {
                *n = Some(uplink::Nack {
                    upto_seq: upto,
                    reason: reason.to_string(),
                });
            }
        }
        self.end(reason);
    }

    pub fn lag_ms(&self) -> u64 {
        self.inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .front()
            .map_or(0, |b| b.received.elapsed().as_millis() as u64)
    }
}

fn frame(msg: &Message) -> Vec<u8> {
    let mut buf = Vec::new();
    uplink::encode(msg, &mut buf);
    buf
}

async fn read_message<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    limits: &uplink::Limits,
) -> Result<Message, String> {
    let mut header = [0u8; uplink::HEADER_BYTES];
    r.read_exact(&mut header)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "the sensor closed the connection".to_string(),
            _ => e.to_string(),
        })?;
    let len = uplink::payload_len(header, limits).map_err(|e| e.to_string())?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)
        .await
        .map_err(|e| e.to_string())?;
    uplink::decode_payload(&payload, limits).map_err(|e| e.to_string())
}

/// Says why, counts it, logs it, and closes.
async fn refuse(
    shared: &Shared,
    mut io: Box<dyn Io>,
    peer: SocketAddr,
    what: Refusal,
    sensor: &str,
    reason: String,
) {
    shared.counters.refused(what);
    tracing::warn!(%peer, sensor, reason = %reason, "sensor refused");
    let f = frame(&Message::Refused(uplink::Refused { reason }));
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        io.write_all(&f).await?;
        io.shutdown().await
    })
    .await;
}

/// The common name of a (verified) client certificate.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// A connection from accept to end.
pub(crate) async fn connection(shared: Arc<Shared>, tcp: tokio::net::TcpStream, peer: SocketAddr) {
    let settings = &shared.settings;
    let handshake = Duration::from_millis(settings.handshake_timeout_ms.max(1));
    let Ok(_permit) = shared.session_permits.clone().try_acquire_owned() else {
        shared.counters.refused(Refusal::TooManySessions);
        tracing::warn!(%peer, sessions_max = settings.sessions_max, "sensor connection refused: too many sessions");
        return;
    };
    let _ = tcp.set_nodelay(true);
    let mut first = [0u8; 1];
    match tokio::time::timeout(handshake, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => {
            shared.counters.refused(Refusal::Handshake);
            return;
        }
    }
    // A TLS record starts with 0x16 (handshake); a frame of this protocol with a length byte.
    let (io, cert_name): (Box<dyn Io>, Option<String>) = if first[0] == 0x16 {
        let Some(acceptor) = &shared.tls else {
            shared.counters.refused(Refusal::Handshake);
            tracing::warn!(%peer, "TLS from a sensor, but the collector has no certificate ([collector] tls_cert, or [web]'s)");
            return;
        };
        match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => {
                let cn = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| common_name(c));
                (Box::new(tls), cn)
            }
            Ok(Err(e)) => {
                shared.counters.refused(Refusal::Handshake);
                tracing::warn!(%peer, error = %e, "TLS handshake with a sensor failed");
                return;
            }
            Err(_) => {
                shared.counters.refused(Refusal::Handshake);
                return;
            }
        }
    } else {
        if !peer.ip().is_loopback() {
            refuse(
                &shared,
                Box::new(tcp),
                peer,
                Refusal::PlainTcp,
                "",
                format!(
                    "plain TCP is accepted from loopback only, and {peer} is not: connect over TLS (the sensor's --collector-ca)"
                ),
            )
            .await;
            return;
        }
        (Box::new(tcp), None)
    };
    let mut io = io;
    let limits = settings.limits();
    let hello = match tokio::time::timeout(handshake, read_message(&mut io, &limits)).await {
        Ok(Ok(Message::Hello(h))) => h,
        Ok(Ok(other)) => {
            let reason = format!("expected Hello, got {}", other.kind().name());
            refuse(&shared, io, peer, Refusal::Protocol, "", reason).await;
            return;
        }
        Ok(Err(e)) => {
            refuse(&shared, io, peer, Refusal::Protocol, "", e).await;
            return;
        }
        Err(_) => {
            shared.counters.refused(Refusal::Handshake);
            tracing::warn!(%peer, "no Hello from a sensor within the handshake timeout");
            return;
        }
    };
    let name = hello.sensor.clone();
    if let Err(reason) = hello.check_version() {
        refuse(&shared, io, peer, Refusal::Version, &name, reason).await;
        return;
    }
    if !uplink::valid_sensor_name(&name) {
        let reason = format!("{name:?} is not a sensor name");
        refuse(&shared, io, peer, Refusal::UnknownSensor, "", reason).await;
        return;
    }
    let unknown = format!(
        "unknown sensor {name:?}: add it on the collector with `tandem sensor add {name}` and give the sensor the token it prints"
    );
    let verdict = {
        let (path, n, token, cn) = (
            shared.list_path.clone(),
            name.clone(),
            hello.token.clone(),
            cert_name.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let list = SensorList::open(&path)?;
            match cn {
                // A certificate the client CA signed, for this name: no token needed.
                Some(cn) if cn == n => Ok(if list.contains(&n)? {
                    Verdict::Accepted
                } else {
                    Verdict::UnknownSensor
                }),
                _ => list.verify(&n, &token),
            }
        })
        .await
    };
    match verdict {
        Ok(Ok(Verdict::Accepted)) => {}
        Ok(Ok(Verdict::UnknownSensor)) => {
            refuse(&shared, io, peer, Refusal::UnknownSensor, &name, unknown).await;
            return;
        }
        Ok(Ok(Verdict::WrongToken)) => {
            let reason = match &cert_name {
                Some(cn) => format!(
                    "the client certificate is for {cn:?}, not {name:?}, and the token is not {name:?}'s"
                ),
                None => format!(
                    "wrong token for sensor {name:?} (the token `tandem sensor add {name}` printed)"
                ),
            };
            let what = if cert_name.is_some() {
                Refusal::Certificate
            } else {
                Refusal::BadToken
            };
            refuse(&shared, io, peer, what, &name, reason).await;
            return;
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the collector cannot read its sensor list");
            let reason = "the collector cannot read its sensor list; try again later".into();
            refuse(&shared, io, peer, Refusal::Protocol, &name, reason).await;
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "checking a sensor's token failed");
            return;
        }
    }
    let skew_ms = (hello.clock_us - now_us()) / 1000;
    let fits = shared.table.update(&name, settings.sensors_max, |s| {
        s.connected = true;
        s.peer = peer.to_string();
        s.last_seen_us = now_us();
        s.clock_skew_ms = skew_ms;
        s.sessions += 1;
        s.software.clone_from(&hello.software);
    });
    if !fits {
        let reason = format!(
            "the collector tracks {} sensors already (sensors_max)",
            settings.sensors_max
        );
        refuse(&shared, io, peer, Refusal::TooManySensors, &name, reason).await;
        return;
    }
    if skew_ms.unsigned_abs() > settings.clock_skew_warn_ms {
        tracing::warn!(sensor = %name, skew_ms, "the sensor's clock differs from the collector's; its times are stored as it sent them");
    }
    let (out_tx, out_rx) = mpsc::channel(OUTGOING_FRAMES_MAX);
    let entry = Arc::new(SessionEntry {
        id: shared.next_session.fetch_add(1, Relaxed),
        sensor: name.clone(),
        out: out_tx,
        acked: watch::channel(0).0,
        end: watch::channel(None).0,
        nack: Mutex::new(None),
        inflight: Mutex::new(VecDeque::new()),
        pending: Mutex::new(HashMap::new()),
    });
    let replaced = shared
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.clone(), entry.clone());
    if let Some(old) = replaced {
        old.end("a newer session of the same sensor replaced this one");
    }
    shared.counters.sessions_accepted.fetch_add(1, Relaxed);
    let record_format = hello.record_format_chosen();
    let limits = settings.limits();
    tracing::info!(sensor = %name, %peer, tls = shared.tls.is_some() && first[0] == 0x16, client_certificate = cert_name.is_some(), software = %hello.software, records = if record_format.is_empty() { "json" } else { record_format }, skew_ms, "sensor connected");
    let welcome = frame(&Message::Welcome(uplink::Welcome {
        version: uplink::PROTOCOL_VERSION,
        clock_us: now_us(),
        heartbeat_interval_ms: settings.heartbeat_interval_ms,
        record_format: record_format.to_string(),
        frame_bytes_max: limits.frame_bytes_max as u64,
        batch_records_max: limits.batch_records_max as u64,
    }));
    if io.write_all(&welcome).await.is_ok() && io.flush().await.is_ok() {
        let why = run(&shared, &entry, io, out_rx).await;
        tracing::info!(sensor = %name, %peer, reason = %why, "sensor session ended");
    }
    entry.end("the session ended");
    let mut sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
    if sessions.get(&name).is_some_and(|e| e.id == entry.id) {
        sessions.remove(&name);
        drop(sessions);
        shared
            .table
            .update(&name, usize::MAX, |s| s.connected = false);
    }
}

/// The uid of each record starts with the sensor's name, and its rows say which sensor: a
/// sensor cannot write rows as another.
fn own_records(sensor: &str, records: &mut [cdr::CdrRecord]) {
    let prefix = format!("{sensor}|");
    for r in records {
        if r.uid.is_empty() {
            r.uid = r.identity(sensor);
        } else if !r.uid.starts_with(&prefix) {
            r.uid = format!("{prefix}{}", r.uid);
        }
        if let Some(c) = r.call.as_mut() {
            c.sensor = sensor.to_string();
            // A call's group is one of the sensor's own calls too.
            if !c.call_group.is_empty() && !c.call_group.starts_with(&prefix) {
                c.call_group = format!("{prefix}{}", c.call_group);
            }
        }
        r.fill_identity(sensor);
        if let Some(g) = r.registration.as_mut() {
            g.sensor = sensor.to_string();
        }
    }
}

/// Reads the session until it ends; returns why.
async fn run(
    shared: &Arc<Shared>,
    entry: &Arc<SessionEntry>,
    io: Box<dyn Io>,
    out_rx: mpsc::Receiver<Vec<u8>>,
) -> String {
    let (mut rd, wr) = tokio::io::split(io);
    let writer = tokio::spawn(write_loop(entry.clone(), wr, out_rx));
    let settings = &shared.settings;
    let limits = settings.limits();
    let idle = Duration::from_millis(settings.idle_timeout_ms.max(1));
    let mut end = entry.end.subscribe();
    let mut expected = 1u64;
    // Batches this session handed to the writers, to rotate among them.
    let mut batches_sent = 0usize;
    let name = entry.sensor.as_str();
    let why = loop {
        let msg = tokio::select! {
            m = tokio::time::timeout(idle, read_message(&mut rd, &limits)) => m,
            _ = end.changed() => break end.borrow().clone().unwrap_or_default(),
        };
        let msg = match msg {
            Err(_) => break format!("nothing from the sensor for {} ms", idle.as_millis()),
            Ok(Err(e)) => break e,
            Ok(Ok(m)) => m,
        };
        shared
            .table
            .update(name, usize::MAX, |s| s.last_seen_us = now_us());
        match msg {
            Message::Records(mut r) => {
                if r.first_seq != expected {
                    break format!(
                        "records numbered from {} where {expected} was expected",
                        r.first_seq
                    );
                }
                expected = r.last_seq() + 1;
                let n = r.records.len() as u64;
                own_records(name, &mut r.records);
                shared.counters.records_received.fetch_add(n, Relaxed);
                shared
                    .table
                    .update(name, usize::MAX, |s| s.records_received += n);
                entry
                    .inflight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back(Inflight {
                        upto: r.last_seq(),
                        received: Instant::now(),
                        committed: false,
                    });
                let queue = {
                    let queues = shared.queues.lock().unwrap_or_else(|e| e.into_inner());
                    // The writer with the most room, the first of equals after the last one
                    // this session used: one sensor's batches keep every connection busy.
                    // Two batches of a session rarely hold the same record (a record is sent
                    // again only after its session failed), and when they do, either commit
                    // leaves one row for it.
                    let n = queues.len();
                    batches_sent += 1;
                    (0..n)
                        .max_by_key(|&k| {
                            let i = (batches_sent + k) % n;
                            (queues[i].capacity(), std::cmp::Reverse(k))
                        })
                        .map(|k| queues[(batches_sent + k) % n].clone())
                };
                let Some(queue) = queue else {
                    break "the collector is stopping".to_string();
                };
                let batch = Batch {
                    session: entry.clone(),
                    upto_seq: r.last_seq(),
                    records: r.records,
                };
                // A full queue (a slow database) waits here: the sensor waits for its
                // acknowledgement and journals meanwhile.
                tokio::select! {
                    sent = queue.send(batch) => if sent.is_err() { break "the collector is stopping".to_string() },
                    _ = end.changed() => break end.borrow().clone().unwrap_or_default(),
                }
            }
            Message::Heartbeat(h) => {
                let skew_ms = (h.clock_us - now_us()) / 1000;
                let mut was = 0;
                shared.table.update(name, usize::MAX, |s| {
                    was = s.clock_skew_ms;
                    s.clock_skew_ms = skew_ms;
                    s.journal_records = h.journal_records;
                    s.spilled = h.spilled;
                    s.replayed = h.replayed;
                    s.dropped = h.dropped;
                });
                let limit = settings.clock_skew_warn_ms;
                if skew_ms.unsigned_abs() > limit && was.unsigned_abs() <= limit {
                    tracing::warn!(sensor = %name, skew_ms, "the sensor's clock differs from the collector's; its times are stored as it sent them");
                }
                // The last acknowledgement again: the sensor knows the link is alive.
                let upto = *entry.acked.borrow();
                let _ = entry.out.try_send(frame(&Message::Ack { upto_seq: upto }));
            }
            Message::PcapReply(r) => {
                let last = r.is_last();
                let tx = entry
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&r.request_id)
                    .cloned();
                if let Some(tx) = tx
                    && (tx.send(r.body).await.is_err() || last)
                {
                    entry
                        .pending
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&r.request_id);
                }
            }
            other => {
                break format!("unexpected {} from a sensor", other.kind().name());
            }
        }
    };
    entry.end(&why);
    let _ = writer.await;
    why
}

/// Writes pcap requests and heartbeat answers as they come, an `Ack` whenever the writers
/// commit, and at the end a `Nack` (a failed batch) or a `Refused` saying why.
async fn write_loop(
    entry: Arc<SessionEntry>,
    mut wr: tokio::io::WriteHalf<Box<dyn Io>>,
    mut out_rx: mpsc::Receiver<Vec<u8>>,
) {
    let mut acked = entry.acked.subscribe();
    let mut end = entry.end.subscribe();
    let mut sent = 0u64;
    loop {
        if end.borrow().is_some() {
            break;
        }
        let f = tokio::select! {
            f = out_rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            r = acked.changed() => {
                if r.is_err() {
                    break;
                }
                let a = *acked.borrow_and_update();
                if a <= sent {
                    continue;
                }
                sent = a;
                frame(&Message::Ack { upto_seq: a })
            }
            _ = end.changed() => break,
        };
        if wr.write_all(&f).await.is_err() || wr.flush().await.is_err() {
            entry.end("writing to the sensor failed");
            return;
        }
    }
    // Acknowledgements that came before the end, then why it ended.
    let mut last = Vec::new();
    let a = *acked.borrow();
    if a > sent {
        last.extend(frame(&Message::Ack { upto_seq: a }));
    }
    let nack = entry.nack.lock().unwrap_or_else(|e| e.into_inner()).take();
    match nack {
        Some(n) => last.extend(frame(&Message::Nack(n))),
        None => {
            if let Some(reason) = end.borrow().clone() {
                last.extend(frame(&Message::Refused(uplink::Refused { reason })));
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        wr.write_all(&last).await?;
        wr.shutdown().await
    })
    .await;
}

/// Removes a pending request however the fetch ends.
struct Pending<'a>(&'a SessionEntry, u64);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

pub(crate) async fn fetch_pcap(
    shared: &Arc<Shared>,
    sensor: &str,
    call: uplink::PcapCall,
) -> Result<Vec<u8>, PcapFetchError> {
    let c = &shared.counters;
    let entry = shared
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(sensor)
        .cloned()
        .filter(|e| !e.is_ended());
    let Some(entry) = entry else {
        c.pcap_offline.fetch_add(1, Relaxed);
        let since = match shared.table.get(sensor) {
            Some(s) => format!("last seen {}", utc::format_us(s.last_seen_us)),
            None => "not connected since the collector started".to_string(),
        };
        return Err(PcapFetchError::Offline {
            sensor: sensor.to_string(),
            since,
        });
    };
    let max = shared.settings.pcap_requests_max.max(1);
    let _permit = shared
        .pcap_permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| PcapFetchError::Busy(max))?;
    let id = shared.next_request.fetch_add(1, Relaxed);
    let (tx, mut rx) = mpsc::channel(REPLY_CHUNKS_MAX);
    entry
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, tx);
    let _pending = Pending(&entry, id);
    let failed = |reason: String| {
        c.pcap_failed.fetch_add(1, Relaxed);
        PcapFetchError::Sensor {
            sensor: sensor.to_string(),
            reason,
        }
    };
    let gone = "the sensor disconnected before its pcap came; ask again once it is back";
    let request = frame(&Message::PcapRequest(uplink::PcapRequest {
        request_id: id,
        call,
    }));
    let timeout_ms = shared.settings.pcap_timeout_ms.max(1);
    let bytes_max = shared.settings.pcap_bytes_max;
    let result = tokio::time::timeout(Duration::from_millis(timeout_ms), async {
        entry
            .out
            .send(request)
            .await
            .map_err(|_| gone.to_string())?;
        let mut pcap = Vec::new();
        loop {
            match rx.recv().await {
                Some(PcapBody::Chunk { data, last }) => {
                    if (pcap.len() + data.len()) as u64 > bytes_max {
                        return Err(format!(
                            "the pcap is larger than the collector's limit of {bytes_max} bytes (pcap_bytes_max)"
                        ));
                    }
                    pcap.extend_from_slice(&data);
                    if last {
                        return Ok(pcap);
                    }
                }
                Some(PcapBody::Error(reason)) => return Err(reason),
                None => return Err(gone.to_string()),
            }
        }
    })
    .await;
    match result {
        Ok(Ok(pcap)) => {
            c.pcap_ok.fetch_add(1, Relaxed);
            Ok(pcap)
        }
        Ok(Err(reason)) => Err(failed(reason)),
        Err(_) => {
            c.pcap_failed.fetch_add(1, Relaxed);
            Err(PcapFetchError::Timeout {
                sensor: sensor.to_string(),
                timeout_ms,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> SessionEntry {
        let (out, _) = mpsc::channel(1);
        SessionEntry {
            id: 1,
            sensor: "edge".into(),
            out,
            acked: watch::channel(0).0,
            end: watch::channel(None).0,
            nack: Mutex::new(None),
            inflight: Mutex::new(VecDeque::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn received(e: &SessionEntry, upto: u64) {
        e.inflight.lock().unwrap().push_back(Inflight {
            upto,
            received: Instant::now(),
            committed: false,
        });
    }

    #[test]
    fn an_acknowledgement_never_covers_a_batch_still_being_written() {
        let e = entry();
        for upto in [1_000, 2_000, 3_000] {
            received(&e, upto);
        }
        // The second writer commits its batch first: nothing can be acknowledged yet.
        e.ack(2_000);
        assert_eq!(*e.acked.borrow(), 0);
        // The first batch commits: both are covered at once.
        e.ack(1_000);
        assert_eq!(*e.acked.borrow(), 2_000);
        e.ack(3_000);
        assert_eq!(*e.acked.borrow(), 3_000);
        assert!(e.inflight.lock().unwrap().is_empty());
    }
}
