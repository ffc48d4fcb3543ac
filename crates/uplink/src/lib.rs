//! The sensor–collector protocol: the messages a sensor (`tandem capture --collector`) and the
//! collector (`tandem serve --collector-listen`) exchange over one byte stream (TLS, or plain
//! TCP on loopback). No IO: the sensor's link (`sensor::uplink`) and the collector
//! (`collector`) read and write the frames; this crate only says what the bytes mean.
//!
//! ```text
//! sensor                                             collector
//!   Hello {version, sensor, token, clock_us} ──────▶  (checks version, name, token)
//!                                            ◀──────  Welcome {version, clock_us} | Refused {reason}
//!   Records {first_seq, records} ──────────────────▶  (queued, written to PostgreSQL, committed)
//!                                            ◀──────  Ack {upto_seq}  | Nack {upto_seq, reason}
//!   Heartbeat {clock_us, journal_records, ...} ────▶
//!                                            ◀──────  Ack {upto_seq} (the last one again: the link is alive)
//!                                            ◀──────  PcapRequest {request_id, call}
//!   PcapReply {request_id, chunk | error, last} ───▶
//! ```
//!
//! **Frames.** Every message is one frame: a 4-byte big-endian length, then that many bytes of
//! payload, whose first byte is the message's kind ([`Kind`]) and the rest its body. The
//! length is checked against [`Limits::frame_bytes_max`] before a byte of the body is read
//! or allocated.
//!
//! **Bodies.** The control messages (`Hello`, `Welcome`, `Refused`, `Heartbeat`, `Nack`,
//! `PcapRequest`) are JSON objects: they are rare, and JSON lets a newer peer add fields that an
//! older one ignores. `Ack` is a big-endian u64. `Records` is `first_seq` (u64), a record count
//! (u32, checked against [`Limits::batch_records_max`] before anything is allocated), then each
//! record as a u32 length and the record itself, in one of two forms:
//!
//! - **JSON** (kind `Records`, 0x02): the form the sensor's journal keeps, self-describing, so a
//!   field added to [`cdr::CdrCall`] flows through and an older collector reads a newer
//!   sensor's records. Every release reads it.
//! - **Compact** (kind `RecordsCompact`, 0x05): postcard, serde's compact binary form, a third
//!   of JSON's bytes and a third of its CPU (`cargo run --release -p uplink --example
//!   codec_cost`: 0.8 µs to encode and 0.8 to decode a call with its streams, against 2.2 and
//!   2.9 in JSON). It carries no field names, so it is used only when both ends have records of
//!   the same shape: the sensor offers [`compact_format`] in `Hello.record_formats`, and the
//!   collector answers with it in `Welcome.record_format` when it is its own too. Mixed
//!   releases fall back to JSON by themselves.
//!
//! `PcapReply` is the request id (u64), one flags byte (0: a chunk, 1: the last chunk, 2: an
//! error, which ends the reply) and the chunk's bytes or the error's text.
//!
//! Why the compact form: on a machine where the sensors, the collector and PostgreSQL share
//! two cores, JSON was 6 of the 45 µs of CPU a CDR cost from the sensor's writer to the commit.
//!
//! **Sequence numbers.** Within one session the sensor numbers its records from 1 up, without
//! gaps; `Records.first_seq` is the number of the batch's first record. The collector answers
//! `Ack {upto_seq}` once every record up to `upto_seq` is committed, in order; a batch that
//! could not be stored is answered with `Nack` and the session ends (the sensor keeps the
//! records in its journal and sends them again on a new session; the collector's upsert by
//! uid makes a record sent twice a record stored once).
//!
//! **Versions.** `Hello.version` is [`PROTOCOL_VERSION`]; a collector refuses another version
//! with a `Refused` whose reason says which versions each side speaks ([`Hello::check_version`]).
//! A `Hello` of any version decodes as long as it has these fields, so that the refusal can be
//! said.
//!
//! Never: does IO, allocates beyond the frame it is given (a frame's bytes are bounded by the
//! caller's limits before they are read), panics on input (fuzzed by
//! `fuzz/fuzz_targets/uplink.rs`: whatever decodes encodes and decodes again to the same
//! message), or prints a token (`Hello`'s `Debug` leaves it out).

use serde::{Deserialize, Serialize};

pub use cdr::CdrRecord;

/// The protocol version this release speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Bytes of a frame's length prefix.
pub const HEADER_BYTES: usize = 4;

/// Default bound of one frame's payload: 16 MiB. A batch of 500 calls with two streams each is
/// about 1 MiB; a pcap reply comes in chunks of [`PCAP_CHUNK_BYTES_MAX`].
pub const FRAME_BYTES_MAX: usize = 16 << 20;

/// Default bound of the records in one `Records` frame: 5,000 (the sensor's writer sends
/// batches of 500 by default).
pub const BATCH_RECORDS_MAX: usize = 5_000;

/// The largest chunk of a pcap reply a sensor sends: 1 MiB.
pub const PCAP_CHUNK_BYTES_MAX: usize = 1 << 20;

/// The longest sensor name: 64 bytes of `[A-Za-z0-9._-]` ([`valid_sensor_name`]).
pub const SENSOR_NAME_BYTES_MAX: usize = 64;

/// What a decoder accepts at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one frame's payload (kind byte and body).
    pub frame_bytes_max: usize,
    /// Records in one `Records` frame.
    pub batch_records_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            frame_bytes_max: FRAME_BYTES_MAX,
            batch_records_max: BATCH_RECORDS_MAX,
        }
    }
}

/// The first byte of a frame's payload. Sensor to collector below 0x80, collector to sensor
/// from 0x80.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 0x01,
    Records = 0x02,
    Heartbeat = 0x03,
    PcapReply = 0x04,
    /// `Records` whose records are in the compact form ([`RecordFormat::Compact`]).
    RecordsCompact = 0x05,
    Welcome = 0x81,
    Refused = 0x82,
    Ack = 0x83,
    Nack = 0x84,
    PcapRequest = 0x85,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            0x01 => Kind::Hello,
            0x02 => Kind::Records,
            0x03 => Kind::Heartbeat,
            0x04 => Kind::PcapReply,
            0x05 => Kind::RecordsCompact,
            0x81 => Kind::Welcome,
            0x82 => Kind::Refused,
            0x83 => Kind::Ack,
            0x84 => Kind::Nack,
            0x85 => Kind::PcapRequest,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "Hello",
            Kind::Records => "Records",
            Kind::Heartbeat => "Heartbeat",
            Kind::PcapReply => "PcapReply",
            Kind::RecordsCompact => "Records (compact)",
            Kind::Welcome => "Welcome",
            Kind::Refused => "Refused",
            Kind::Ack => "Ack",
            Kind::Nack => "Nack",
            Kind::PcapRequest => "PcapRequest",
        }
    }
}

/// A sensor's first message.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the sensor's release.
    pub version: u32,
    /// The sensor's name, as `tandem sensor add NAME` registered it.
    pub sensor: String,
    /// The token `tandem sensor add` printed; empty with mutual TLS (the certificate's common
    /// name is the sensor's name).
    #[serde(default)]
    pub token: String,
    /// The sensor's clock, µs since the Unix epoch, when it sent this.
    pub clock_us: i64,
    /// The sensor's software, for the collector's log (`tandem 0.1.0`).
    #[serde(default)]
    pub software: String,
    /// The record forms the sensor can send besides JSON ([`compact_format`]); the collector
    /// picks one in `Welcome.record_format`. Absent from older sensors: JSON.
    #[serde(default)]
    pub record_formats: Vec<String>,
}

impl std::fmt::Debug for Hello {
    /// Everything but the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("version", &self.version)
            .field("sensor", &self.sensor)
            .field("token", &if self.token.is_empty() { "" } else { "***" })
            .field("clock_us", &self.clock_us)
            .field("software", &self.software)
            .field("record_formats", &self.record_formats)
            .finish()
    }
}

impl Hello {
    /// Whether a collector of this release can serve this sensor; the error is the `Refused`
    /// reason.
    pub fn check_version(&self) -> Result<(), String> {
        if self.version == PROTOCOL_VERSION {
            return Ok(());
        }
        Err(format!(
            "protocol version {} is not supported: this collector speaks version {PROTOCOL_VERSION}; run the sensor and the collector from releases that speak the same version",
            self.version
        ))
    }
}

/// Whether `name` can name a sensor: 1 to [`SENSOR_NAME_BYTES_MAX`] bytes of ASCII letters,
/// digits, `.`, `_` and `-`, not starting with `.` or `-`. (`|` separates the parts of a
/// record's uid, which starts with the sensor's name.)
pub fn valid_sensor_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= SENSOR_NAME_BYTES_MAX
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A batch of records, numbered from `first_seq` up.
#[derive(Debug, Clone, PartialEq)]
pub struct Records {
    pub first_seq: u64,
    pub records: Vec<CdrRecord>,
    /// How the records were (or are to be) encoded.
    pub format: RecordFormat,
}

/// How the records of a batch are encoded (see the module's documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecordFormat {
    /// JSON, the form of the sensor's journal: every release reads it.
    #[default]
    Json,
    /// postcard (serde's compact binary form), spoken only between a sensor and a collector
    /// whose records have the same shape ([`compact_format`]).
    Compact,
}

/// The version of the compact form's rules; raise it when a field of a record changes type
/// in a way the shape does not show (one `Option` for another).
const COMPACT_FORMAT_VERSION: u32 = 1;

/// The name of this release's compact record form: `postcard-{version}-{shape}`, where the
/// shape is a hash (FNV-1a, 64 bits) of a record with every part present (a call, a stream, a
/// T.38 flow, a registration) as JSON: its field names in their order and the kind of each
/// default value. postcard carries no field names, so a sensor and a collector use it only
/// when their names agree; a field added, removed or moved changes the name, and the pair
/// falls back to JSON.
pub fn compact_format() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let sample = CdrRecord {
            uid: String::new(),
            call: Some(cdr::CdrCall::default()),
            streams: vec![cdr::CdrStream::default()],
            t38: vec![cdr::CdrT38::default()],
            registration: Some(cdr::CdrRegistration::default()),
        };
        let shape = serde_json::to_vec(&sample).expect("a CDR record serializes");
        let hash = shape.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("postcard-{COMPACT_FORMAT_VERSION}-{hash:016x}")
    })
}

impl Records {
    /// The number of the batch's last record.
    pub fn last_seq(&self) -> u64 {
        self.first_seq + self.records.len() as u64 - 1
    }
}

/// What a sensor says of itself every few seconds (and what the collector shows per sensor).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Heartbeat {
    /// The sensor's clock, µs since the Unix epoch.
    pub clock_us: i64,
    /// Records waiting in the sensor's journal now.
    pub journal_records: u64,
    /// Records the sensor's capture thread journaled itself because its queue was full.
    pub spilled: u64,
    /// Records delivered from the journal since the sensor started.
    pub replayed: u64,
    /// Records the sensor lost (its journal full or failing).
    pub dropped: u64,
    /// Records queued in the sensor's writer now.
    pub queue_records: u64,
}

/// The collector's answer to an accepted `Hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub version: u32,
    /// The collector's clock, µs since the Unix epoch.
    pub clock_us: i64,
    /// How often the collector expects a heartbeat; a session silent for three of these ends.
    #[serde(default)]
    pub heartbeat_interval_ms: u64,
    /// The record form the sensor is to send: one of `Hello.record_formats`, or empty for
    /// JSON (and from older collectors).
    #[serde(default)]
    pub record_format: String,
    /// The collector's [`Limits`]: the sensor cuts its batches into frames within them (a
    /// frame over them would end the session, again at every attempt). 0 from older
    /// collectors: the defaults.
    #[serde(default)]
    pub frame_bytes_max: u64,
    #[serde(default)]
    pub batch_records_max: u64,
}

impl Hello {
    /// The record form a collector of this release answers this `Hello` with, for
    /// `Welcome.record_format`: [`compact_format`] when the sensor offers it, empty (JSON)
    /// otherwise.
    pub fn record_format_chosen(&self) -> &'static str {
        let compact = compact_format();
        if self.record_formats.iter().any(|f| f == compact) {
            compact
        } else {
            ""
        }
    }
}

impl Welcome {
    /// How a sensor of this release sends its records to this collector.
    pub fn record_format(&self) -> RecordFormat {
        if self.record_format == compact_format() {
            RecordFormat::Compact
        } else {
            RecordFormat::Json
        }
    }

    /// The limits frames to this collector must keep: the tighter of `own` and the
    /// collector's.
    pub fn sending_limits(&self, own: &Limits) -> Limits {
        let tighter = |mine: usize, theirs: u64| match usize::try_from(theirs) {
            Ok(0) | Err(_) => mine,
            Ok(t) => mine.min(t),
        };
        Limits {
            frame_bytes_max: tighter(own.frame_bytes_max, self.frame_bytes_max),
            batch_records_max: tighter(own.batch_records_max, self.batch_records_max).max(1),
        }
    }
}

/// The collector's answer to a `Hello` it does not accept (or to anything else it cannot
/// serve); the session ends after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    pub reason: String,
}

/// The records up to `upto_seq` were not stored; the session ends after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nack {
    pub upto_seq: u64,
    pub reason: String,
}

/// Where a call's packets are in a sensor's archive: the archive columns of its CDR. For a
/// stream without a call, its row's RTP columns, and `call_id` its uid
/// (`cdr::CdrStream::archive_as_call`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PcapCall {
    pub call_id: String,
    pub sip_tar: Option<String>,
    pub sip_member: Option<String>,
    pub sip_offset: Option<u64>,
    pub sip_len: Option<u64>,
    pub sip_compression: Option<String>,
    pub rtp_tar: Option<String>,
    pub rtp_member: Option<String>,
    pub rtp_offset: Option<u64>,
    pub rtp_len: Option<u64>,
    pub rtp_compression: Option<String>,
}

impl From<&cdr::CdrCall> for PcapCall {
    fn from(c: &cdr::CdrCall) -> PcapCall {
        PcapCall {
            call_id: c.call_id.clone(),
            sip_tar: c.sip_tar.clone(),
            sip_member: c.sip_member.clone(),
            sip_offset: c.sip_offset,
            sip_len: c.sip_len,
            sip_compression: c.sip_compression.clone(),
            rtp_tar: c.rtp_tar.clone(),
            rtp_member: c.rtp_member.clone(),
            rtp_offset: c.rtp_offset,
            rtp_len: c.rtp_len,
            rtp_compression: c.rtp_compression.clone(),
        }
    }
}

impl PcapCall {
    /// A CDR row with these archive columns (what `sensor::call_pcap` reads).
    pub fn to_call(&self) -> cdr::CdrCall {
        cdr::CdrCall {
            call_id: self.call_id.clone(),
            sip_tar: self.sip_tar.clone(),
            sip_member: self.sip_member.clone(),
            sip_offset: self.sip_offset,
            sip_len: self.sip_len,
            sip_compression: self.sip_compression.clone(),
            rtp_tar: self.rtp_tar.clone(),
            rtp_member: self.rtp_member.clone(),
            rtp_offset: self.rtp_offset,
            rtp_len: self.rtp_len,
            rtp_compression: self.rtp_compression.clone(),
            ..cdr::CdrCall::default()
        }
    }

    /// Bytes of archive data the call's members take (before decompression).
    pub fn member_bytes(&self) -> u64 {
        self.sip_len
            .unwrap_or(0)
            .saturating_add(self.rtp_len.unwrap_or(0))
    }
}

/// The collector asks a sensor for a call's pcap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcapRequest {
    pub request_id: u64,
    pub call: PcapCall,
}

/// One part of a sensor's answer to a `PcapRequest`.
#[derive(Debug, Clone, PartialEq)]
pub struct PcapReply {
    pub request_id: u64,
    pub body: PcapBody,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PcapBody {
    /// Bytes of the pcap, in order; `last` ends the reply.
    Chunk { data: Vec<u8>, last: bool },
    /// The pcap cannot be had (not archived, outside the archive, too large, damaged); ends the
    /// reply.
    Error(String),
}

impl PcapReply {
    pub fn is_last(&self) -> bool {
        matches!(
            self.body,
            PcapBody::Chunk { last: true, .. } | PcapBody::Error(_)
        )
    }
}

/// One message of either side.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Hello(Hello),
    Records(Records),
    Heartbeat(Heartbeat),
    PcapReply(PcapReply),
    Welcome(Welcome),
    Refused(Refused),
    Ack { upto_seq: u64 },
    Nack(Nack),
    PcapRequest(PcapRequest),
}

impl Message {
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::Records(r) => match r.format {
                RecordFormat::Json => Kind::Records,
                RecordFormat::Compact => Kind::RecordsCompact,
            },
            Message::Heartbeat(_) => Kind::Heartbeat,
            Message::PcapReply(_) => Kind::PcapReply,
            Message::Welcome(_) => Kind::Welcome,
            Message::Refused(_) => Kind::Refused,
            Message::Ack { .. } => Kind::Ack,
            Message::Nack(_) => Kind::Nack,
            Message::PcapRequest(_) => Kind::PcapRequest,
        }
    }
}

/// Why bytes are not a message. Each names the message kind or the limit at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("a frame of {len} bytes is over the limit of {max} bytes")]
    FrameTooLarge { len: usize, max: usize },
    #[error("an empty frame (no message kind)")]
    Empty,
    #[error("unknown message kind 0x{0:02x}")]
    UnknownKind(u8),
    #[error("a batch of {count} records is over the limit of {max}")]
    TooManyRecords { count: u64, max: usize },
    #[error("{kind} message: {problem}")]
    Malformed { kind: &'static str, problem: String },
}

/// Why a batch cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error(
        "record {uid:?} is {bytes} bytes as sent, over the frame limit of {max} bytes; it cannot be delivered"
    )]
    RecordTooLarge {
        uid: String,
        bytes: usize,
        max: usize,
    },
    #[error("an empty batch of records")]
    EmptyBatch,
}

fn malformed(kind: Kind, problem: impl Into<String>) -> DecodeError {
    DecodeError::Malformed {
        kind: kind.name(),
        problem: problem.into(),
    }
}

/// The payload's length from a frame's 4-byte header, checked against the limit (before the
/// payload is read or allocated).
pub fn payload_len(header: [u8; HEADER_BYTES], limits: &Limits) -> Result<usize, DecodeError> {
    let len = u32::from_be_bytes(header) as usize;
    if len == 0 {
        return Err(DecodeError::Empty);
    }
    if len > limits.frame_bytes_max {
        return Err(DecodeError::FrameTooLarge {
            len,
            max: limits.frame_bytes_max,
        });
    }
    Ok(len)
}

/// One frame from the front of `buf`: the message and the bytes it took, or `None` when `buf`
/// holds only part of a frame.
pub fn decode_frame(buf: &[u8], limits: &Limits) -> Result<Option<(Message, usize)>, DecodeError> {
    let Some(header) = buf.first_chunk::<HEADER_BYTES>() else {
        return Ok(None);
    };
    let len = payload_len(*header, limits)?;
    let Some(payload) = buf[HEADER_BYTES..].get(..len) else {
        return Ok(None);
    };
    Ok(Some((decode_payload(payload, limits)?, HEADER_BYTES + len)))
}

/// A payload (kind byte and body) as a message.
pub fn decode_payload(payload: &[u8], limits: &Limits) -> Result<Message, DecodeError> {
    let (&kind_byte, body) = payload.split_first().ok_or(DecodeError::Empty)?;
    if payload.len() > limits.frame_bytes_max {
        return Err(DecodeError::FrameTooLarge {
            len: payload.len(),
            max: limits.frame_bytes_max,
        });
    }
    let kind = Kind::from_byte(kind_byte).ok_or(DecodeError::UnknownKind(kind_byte))?;
    fn json<T: serde::de::DeserializeOwned>(kind: Kind, body: &[u8]) -> Result<T, DecodeError> {
        serde_json::from_slice(body).map_err(|e| malformed(kind, e.to_string()))
    }
    Ok(match kind {
        Kind::Hello => Message::Hello(json(kind, body)?),
        Kind::Heartbeat => Message::Heartbeat(json(kind, body)?),
        Kind::Welcome => Message::Welcome(json(kind, body)?),
        Kind::Refused => Message::Refused(json(kind, body)?),
        Kind::Nack => Message::Nack(json(kind, body)?),
        Kind::PcapRequest => Message::PcapRequest(json(kind, body)?),
        Kind::Ack => {
            let b: [u8; 8] = body
                .try_into()
                .map_err(|_| malformed(kind, format!("{} bytes, expected 8", body.len())))?;
            Message::Ack {
                upto_seq: u64::from_be_bytes(b),
            }
        }
        Kind::Records => Message::Records(decode_records(body, limits, RecordFormat::Json)?),
        Kind::RecordsCompact => {
            Message::Records(decode_records(body, limits, RecordFormat::Compact)?)
        }
        Kind::PcapReply => {
            let (id, rest) = body
                .split_first_chunk::<8>()
                .ok_or_else(|| malformed(kind, "shorter than its request id and flags"))?;
            let (&flags, data) = rest
                .split_first()
                .ok_or_else(|| malformed(kind, "no flags byte"))?;
            let body = match flags {
                0 | 1 => PcapBody::Chunk {
                    data: data.to_vec(),
                    last: flags == 1,
                },
                2 => PcapBody::Error(
                    std::str::from_utf8(data)
                        .map_err(|_| malformed(kind, "the error text is not UTF-8"))?
                        .to_owned(),
                ),
                other => return Err(malformed(kind, format!("unknown flags {other}"))),
            };
            Message::PcapReply(PcapReply {
                request_id: u64::from_be_bytes(*id),
                body,
            })
        }
    })
}

fn decode_records(
    body: &[u8],
    limits: &Limits,
    format: RecordFormat,
) -> Result<Records, DecodeError> {
    let kind = match format {
        RecordFormat::Json => Kind::Records,
        RecordFormat::Compact => Kind::RecordsCompact,
    };
    let (seq, rest) = body
        .split_first_chunk::<8>()
        .ok_or_else(|| malformed(kind, "shorter than its sequence number"))?;
    let (count, mut rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| malformed(kind, "no record count"))?;
    let first_seq = u64::from_be_bytes(*seq);
    let count = u32::from_be_bytes(*count) as u64;
    if count as usize > limits.batch_records_max {
        return Err(DecodeError::TooManyRecords {
            count,
            max: limits.batch_records_max,
        });
    }
    if count == 0 {
        return Err(malformed(kind, "no records"));
    }
    if first_seq == 0 || first_seq.checked_add(count).is_none() {
        return Err(malformed(
            kind,
            format!("sequence numbers from {first_seq} for {count} records are out of range"),
        ));
    }
    // Every record takes at least its length and a byte (`{}` in JSON): a count the body
    // cannot hold is refused before the vector is allocated for it.
    if count.saturating_mul(5) > rest.len() as u64 {
        return Err(malformed(
            kind,
            format!("{count} records cannot fit in {} bytes", rest.len()),
        ));
    }
    let mut records = Vec::with_capacity(count as usize);
    for i in 0..count {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| malformed(kind, format!("record {i} has no length")))?;
        let len = u32::from_be_bytes(*len) as usize;
        let (bytes, tail) = tail.split_at_checked(len).ok_or_else(|| {
            malformed(
                kind,
                format!("record {i} runs past the end of the frame ({len} bytes)"),
            )
        })?;
        let record: CdrRecord = match format {
            RecordFormat::Json => serde_json::from_slice(bytes)
                .map_err(|e| malformed(kind, format!("record {i}: {e}")))?,
            RecordFormat::Compact => match postcard::take_from_bytes(bytes) {
                Ok((r, [])) => r,
                Ok((_, left)) => {
                    return Err(malformed(
                        kind,
                        format!("record {i}: {} bytes after its end", left.len()),
                    ));
                }
                Err(e) => return Err(malformed(kind, format!("record {i}: {e}"))),
            },
        };
        records.push(record);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(malformed(
            kind,
            format!("{} bytes after the last record", rest.len()),
        ));
    }
    Ok(Records {
        first_seq,
        records,
        format,
    })
}

/// Starts a frame of `kind` at the end of `out`; [`finish`] writes its length.
fn start(out: &mut Vec<u8>, kind: Kind) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    out.push(kind as u8);
    at
}

fn finish(out: &mut [u8], at: usize) {
    let len = (out.len() - at - HEADER_BYTES) as u32;
    out[at..at + HEADER_BYTES].copy_from_slice(&len.to_be_bytes());
}

fn json_into<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    // Our messages are plain structs of strings and numbers: serializing them cannot fail.
    serde_json::to_writer(&mut *out, value).expect("a protocol message serializes");
}

/// Appends `msg` as one frame to `out`.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    let at = start(out, msg.kind());
    match msg {
        Message::Hello(m) => json_into(out, m),
        Message::Heartbeat(m) => json_into(out, m),
        Message::Welcome(m) => json_into(out, m),
        Message::Refused(m) => json_into(out, m),
        Message::Nack(m) => json_into(out, m),
        Message::PcapRequest(m) => json_into(out, m),
        Message::Ack { upto_seq } => out.extend_from_slice(&upto_seq.to_be_bytes()),
        Message::Records(r) => records_body(out, r.first_seq, &r.records, r.format),
        Message::PcapReply(r) => {
            out.extend_from_slice(&r.request_id.to_be_bytes());
            match &r.body {
                PcapBody::Chunk { data, last } => {
                    out.push(u8::from(*last));
                    out.extend_from_slice(data);
                }
                PcapBody::Error(text) => {
                    out.push(2);
                    out.extend_from_slice(text.as_bytes());
                }
            }
        }
    }
    finish(out, at);
}

fn records_body(out: &mut Vec<u8>, first_seq: u64, records: &[CdrRecord], format: RecordFormat) {
    out.extend_from_slice(&first_seq.to_be_bytes());
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for r in records {
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        record_into(out, r, format);
        let len = (out.len() - len_at - 4) as u32;
        out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// Appends one record in `format`.
fn record_into(out: &mut Vec<u8>, r: &CdrRecord, format: RecordFormat) {
    match format {
        RecordFormat::Json => json_into(out, r),
        // A record is plain data (no maps with non-string keys, no unknown lengths): postcard
        // cannot fail on it.
        RecordFormat::Compact => {
            let taken = std::mem::take(out);
            *out = postcard::to_extend(r, taken).expect("a CDR record serializes");
        }
    }
}

/// A batch as `Records` frames numbered from `first_seq`, each within `limits` (a batch larger
/// than one frame is cut into several), records in `format`, without copying the records.
/// Returns the frames, all in one buffer, and the number of the last record.
pub fn encode_records(
    first_seq: u64,
    records: &[CdrRecord],
    limits: &Limits,
    format: RecordFormat,
) -> Result<(Vec<u8>, u64), EncodeError> {
    if records.is_empty() {
        return Err(EncodeError::EmptyBatch);
    }
    // Every record encoded once, back to back in one buffer, then packed greedily into frames.
    let mut bodies: Vec<u8> = Vec::with_capacity(records.len() * 640);
    let mut ends: Vec<usize> = Vec::with_capacity(records.len());
    let overhead = 1 + 8 + 4;
    for r in records {
        let from = bodies.len();
        record_into(&mut bodies, r, format);
        let len = bodies.len() - from;
        if overhead + 4 + len > limits.frame_bytes_max {
            return Err(EncodeError::RecordTooLarge {
                uid: r.uid.clone(),
                bytes: len,
                max: limits.frame_bytes_max,
            });
        }
        ends.push(bodies.len());
    }
    let kind = match format {
        RecordFormat::Json => Kind::Records,
        RecordFormat::Compact => Kind::RecordsCompact,
    };
    let body = |k: usize| (if k == 0 { 0 } else { ends[k - 1] })..ends[k];
    let per_frame = limits.batch_records_max.max(1);
    let mut out = Vec::with_capacity(bodies.len() + 4 * records.len() + 64);
    let mut seq = first_seq;
    let mut i = 0;
    while i < ends.len() {
        let mut n = 0;
        let mut bytes = overhead;
        while i + n < ends.len()
            && n < per_frame
            && bytes + 4 + body(i + n).len() <= limits.frame_bytes_max
        {
            bytes += 4 + body(i + n).len();
            n += 1;
        }
        let at = start(&mut out, kind);
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&(n as u32).to_be_bytes());
        for k in i..i + n {
            let b = &bodies[body(k)];
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        }
        finish(&mut out, at);
        seq += n as u64;
        i += n;
    }
    Ok((out, seq - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: u64) -> CdrRecord {
        cdr::seed::synthetic_calls(i + 1, 1_700_000_000_000_000, 1_700_000_100_000_000, 7)
            .last()
            .unwrap()
    }

    fn round_trip(msg: Message) {
        let mut buf = Vec::new();
        encode(&msg, &mut buf);
        let (back, used) = decode_frame(&buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(back, msg);
    }

    #[test]
    fn every_message_reads_back_as_itself() {
        round_trip(Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            sensor: "site-a".into(),
            token: "secret".into(),
            clock_us: 1_700_000_000_123_456,
            software: "tandem 0.1.0".into(),
            record_formats: vec![compact_format().to_string()],
        }));
        for format in [RecordFormat::Json, RecordFormat::Compact] {
            round_trip(Message::Records(Records {
                first_seq: 1,
                records: (0..3).map(record).collect(),
                format,
            }));
        }
        round_trip(Message::Heartbeat(Heartbeat {
            clock_us: 5,
            journal_records: 10,
            spilled: 2,
            replayed: 3,
            dropped: 0,
            queue_records: 7,
        }));
        round_trip(Message::Welcome(Welcome {
            version: 1,
            clock_us: -1,
            heartbeat_interval_ms: 10_000,
            record_format: compact_format().to_string(),
            frame_bytes_max: 1 << 20,
            batch_records_max: 100,
        }));
        round_trip(Message::Refused(Refused {
            reason: "unknown sensor".into(),
        }));
        round_trip(Message::Ack { upto_seq: u64::MAX });
        round_trip(Message::Nack(Nack {
            upto_seq: 9,
            reason: "database down".into(),
        }));
        round_trip(Message::PcapRequest(PcapRequest {
            request_id: 4,
            call: PcapCall {
                call_id: "abc@host".into(),
                sip_tar: Some("/var/spool/a/sip.tar".into()),
                sip_offset: Some(512),
                ..PcapCall::default()
            },
        }));
        for body in [
            PcapBody::Chunk {
                data: vec![1, 2, 3],
                last: false,
            },
            PcapBody::Chunk {
                data: Vec::new(),
                last: true,
            },
            PcapBody::Error("sensor keeps no archive".into()),
        ] {
            round_trip(Message::PcapReply(PcapReply {
                request_id: 77,
                body,
            }));
        }
    }

    #[test]
    fn a_partial_frame_asks_for_more_and_frames_follow_each_other() {
        let mut buf = Vec::new();
        encode(&Message::Ack { upto_seq: 1 }, &mut buf);
        encode(&Message::Ack { upto_seq: 2 }, &mut buf);
        let limits = Limits::default();
        for cut in 0..13 {
            assert_eq!(decode_frame(&buf[..cut], &limits), Ok(None), "cut at {cut}");
        }
        let (m, used) = decode_frame(&buf, &limits).unwrap().unwrap();
        assert_eq!((m, used), (Message::Ack { upto_seq: 1 }, 13));
        let (m, _) = decode_frame(&buf[used..], &limits).unwrap().unwrap();
        assert_eq!(m, Message::Ack { upto_seq: 2 });
    }

    #[test]
    fn limits_are_checked_before_anything_is_read() {
        let limits = Limits {
            frame_bytes_max: 100,
            batch_records_max: 2,
        };
        assert_eq!(
            payload_len(101u32.to_be_bytes(), &limits),
            Err(DecodeError::FrameTooLarge { len: 101, max: 100 })
        );
        assert_eq!(
            payload_len([0; 4], &limits),
            Err(DecodeError::Empty),
            "a frame without a kind"
        );
        // A count over the limit is refused from the header alone.
        let mut body = vec![Kind::Records as u8];
        body.extend_from_slice(&1u64.to_be_bytes());
        body.extend_from_slice(&3u32.to_be_bytes());
        assert_eq!(
            decode_payload(&body, &limits),
            Err(DecodeError::TooManyRecords { count: 3, max: 2 })
        );
        // A count the body cannot hold, under the limit, too.
        let mut body = vec![Kind::Records as u8];
        body.extend_from_slice(&1u64.to_be_bytes());
        body.extend_from_slice(&2u32.to_be_bytes());
        assert!(matches!(
            decode_payload(&body, &limits),
            Err(DecodeError::Malformed { .. })
        ));
        assert_eq!(
            decode_payload(&[0x7f], &limits),
            Err(DecodeError::UnknownKind(0x7f))
        );
    }

    #[test]
    fn the_compact_form_is_chosen_only_when_both_ends_have_it() {
        let hello = |formats: Vec<String>| Hello {
            version: PROTOCOL_VERSION,
            sensor: "s".into(),
            token: String::new(),
            clock_us: 0,
            software: String::new(),
            record_formats: formats,
        };
        let welcome = |format: &str| Welcome {
            version: PROTOCOL_VERSION,
            clock_us: 0,
            heartbeat_interval_ms: 0,
            record_format: format.into(),
            frame_bytes_max: 0,
            batch_records_max: 0,
        };
        let ours = hello(vec!["postcard-0-0".into(), compact_format().into()]);
        assert_eq!(ours.record_format_chosen(), compact_format());
        assert_eq!(
            welcome(ours.record_format_chosen()).record_format(),
            RecordFormat::Compact
        );
        for other in [hello(Vec::new()), hello(vec!["postcard-9-ffff".into()])] {
            assert_eq!(other.record_format_chosen(), "");
        }
        assert_eq!(welcome("").record_format(), RecordFormat::Json);
        assert_eq!(
            welcome("postcard-9-ffff").record_format(),
            RecordFormat::Json,
            "another release's shape"
        );
    }

    /// The compact form of the release before streams without a call carried their archive
    /// columns (`CdrStream::rtp_*`), as its sensors and collectors name it.
    const BEFORE_STREAM_ARCHIVE: &str = "postcard-1-b973b5e7189413d4";

    /// A sensor and a collector of that release and of this one find no compact form in
    /// common and speak JSON, in which each reads the other's records: an older record has no
    /// archive columns in its streams, a newer one's are fields an older reader skips.
    #[test]
    fn releases_either_side_of_the_stream_archive_columns_fall_back_to_json() {
        assert_ne!(compact_format(), BEFORE_STREAM_ARCHIVE);
        let older_sensor = Hello {
            version: PROTOCOL_VERSION,
            sensor: "s".into(),
            token: String::new(),
            clock_us: 0,
            software: String::new(),
            record_formats: vec![BEFORE_STREAM_ARCHIVE.into()],
        };
        assert_eq!(older_sensor.record_format_chosen(), "");
        let older_collector = Welcome {
            version: PROTOCOL_VERSION,
            clock_us: 0,
            heartbeat_interval_ms: 0,
            record_format: BEFORE_STREAM_ARCHIVE.into(),
            frame_bytes_max: 0,
            batch_records_max: 0,
        };
        assert_eq!(older_collector.record_format(), RecordFormat::Json);
        // An older sensor's stream without a call, as JSON: its columns read as not archived.
        let mut lone = CdrRecord::lone_stream(record(1).streams[0].clone());
        lone.streams[0].call_id = None;
        lone.uid = lone.identity("site-a");
        let ours = serde_json::to_string(&lone).unwrap();
        let tail = ",\"rtp_tar\":null,\"rtp_member\":null,\"rtp_offset\":null,\"rtp_len\":null,\"rtp_compression\":null";
        assert!(ours.contains(tail), "{ours}");
        let older = ours.replace(tail, "");
        let frame = |json: &str| {
            let mut body = vec![Kind::Records as u8];
            body.extend_from_slice(&1u64.to_be_bytes());
            body.extend_from_slice(&1u32.to_be_bytes());
            body.extend_from_slice(&(json.len() as u32).to_be_bytes());
            body.extend_from_slice(json.as_bytes());
            decode_payload(&body, &Limits::default()).unwrap()
        };
        let Message::Records(r) = frame(&older) else {
            panic!("not records")
        };
        assert_eq!(r.records, [lone.clone()]);
        // This sensor's stream with its archive columns: read whole here, and by an older
        // collector as a record with fields it does not know (shown by a newer field still).
        lone.streams[0].rtp_tar = Some("/archive/2026-11-18/20/13/rtp.tar".into());
        lone.streams[0].rtp_offset = Some(1536);
        let ours = serde_json::to_string(&lone).unwrap();
        let Message::Records(r) = frame(&ours) else {
            panic!("not records")
        };
        assert_eq!(r.records, [lone.clone()]);
        let newer = ours.replacen("\"rtp_tar\"", "\"from_a_later_release\":1,\"rtp_tar\"", 1);
        let Message::Records(r) = frame(&newer) else {
            panic!("not records")
        };
        assert_eq!(r.records, [lone]);
    }

    #[test]
    fn a_sensor_sends_within_the_tighter_of_its_limits_and_the_collectors() {
        let own = Limits::default();
        let mut w = Welcome {
            version: PROTOCOL_VERSION,
            clock_us: 0,
            heartbeat_interval_ms: 0,
            record_format: String::new(),
            frame_bytes_max: 0,
            batch_records_max: 0,
        };
        assert_eq!(
            w.sending_limits(&own),
            own,
            "an older collector says nothing"
        );
        w.frame_bytes_max = 1 << 20;
        w.batch_records_max = 200;
        assert_eq!(
            w.sending_limits(&own),
            Limits {
                frame_bytes_max: 1 << 20,
                batch_records_max: 200
            }
        );
        w.frame_bytes_max = u64::MAX;
        w.batch_records_max = 1_000_000;
        assert_eq!(
            w.sending_limits(&own),
            own,
            "never looser than the sensor's own"
        );
    }

    #[test]
    fn a_batch_larger_than_a_frame_is_cut_into_numbered_frames() {
        for format in [RecordFormat::Json, RecordFormat::Compact] {
            cut_into_frames(format);
        }
    }

    fn cut_into_frames(format: RecordFormat) {
        let records: Vec<CdrRecord> = (0..10).map(record).collect();
        let one = match format {
            RecordFormat::Json => serde_json::to_vec(&records[0]).unwrap().len(),
            RecordFormat::Compact => postcard::to_stdvec(&records[0]).unwrap().len(),
        };
        let limits = Limits {
            frame_bytes_max: 13 + 3 * (one + 200),
            batch_records_max: 4,
        };
        let (buf, last) = encode_records(41, &records, &limits, format).unwrap();
        assert_eq!(last, 50);
        let mut at = 0;
        let mut back = Vec::new();
        let mut next_seq = 41;
        while at < buf.len() {
            let (m, used) = decode_frame(&buf[at..], &limits).unwrap().unwrap();
            let Message::Records(r) = m else {
                panic!("not records")
            };
            assert_eq!(r.first_seq, next_seq, "frames are numbered without gaps");
            assert_eq!(r.format, format);
            assert!(r.records.len() <= 4);
            next_seq = r.last_seq() + 1;
            back.extend(r.records);
            at += used;
        }
        assert_eq!(back, records);
        let tiny = Limits {
            frame_bytes_max: 50,
            batch_records_max: 4,
        };
        assert!(matches!(
            encode_records(1, &records, &tiny, format),
            Err(EncodeError::RecordTooLarge { .. })
        ));
    }

    #[test]
    fn another_version_is_refused_with_a_reason_and_the_token_is_never_shown() {
        let hello = Hello {
            version: 2,
            sensor: "s".into(),
            token: "t0ps3cret".into(),
            clock_us: 0,
            software: String::new(),
            record_formats: Vec::new(),
        };
        let reason = hello.check_version().unwrap_err();
        assert!(
            reason.contains("version 2") && reason.contains("speaks version 1"),
            "{reason}"
        );
        assert!(!format!("{hello:?}").contains("t0ps3cret"));
        // A newer Hello with fields this release does not know still decodes, so the refusal
        // can be said.
        let mut payload = vec![Kind::Hello as u8];
        payload
            .extend_from_slice(br#"{"version":7,"sensor":"s","clock_us":1,"compression":"zstd"}"#);
        let Message::Hello(h) = decode_payload(&payload, &Limits::default()).unwrap() else {
            panic!()
        };
        assert_eq!(h.version, 7);
    }

    #[test]
    fn sensor_names_are_plain() {
        for ok in ["a", "site-1", "pbx.example_2", &"x".repeat(64)] {
            assert!(valid_sensor_name(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a|b", "a b", "é", &"x".repeat(65)] {
            assert!(!valid_sensor_name(bad), "{bad}");
        }
    }
}
