//! Synthetic CDRs and a fast bulk load into either backend: for `tandem bench console`, which
//! fills each backend with millions of calls, and for checking the search's plans on a
//! database of realistic size and shape.
//!
//! [`synthetic_calls`] makes calls as a few PBX sites see them: internal extensions, DIDs and
//! E.164 numbers drawn so that a few numbers are busy and most are rare (prefixes and
//! suffixes of every density), phones in IPv4 subnets per site and an IPv6 site, carriers'
//! trunks, answered calls with two RTP streams (some with loss, jitter and a bad MOS), busy,
//! unanswered, rejected and cancelled calls, G.711, G.722, G.729 and Opus with and without
//! telephone-event, and four sensors. The same seed gives the same calls.
//!
//! [`bulk_load_sqlite`] and [`bulk_load_postgres`] store records as plain inserts (SQLite:
//! prepared statements in one transaction; PostgreSQL: `COPY`), with the secondary indexes
//! dropped before and built again after (sorting once beats millions of B-tree inserts), in
//! one transaction: a failure leaves the database as it was. The records must be new (uids
//! not stored yet): the unique indexes are built again at the end and refuse duplicates.

use std::io::Write as _;
use std::path::Path;

use crate::pg::{PG_INDEXES, PgLayout, PgStore};
use crate::pg_partition::{self, Day, PG_PARTITIONED_INDEXES, PG_PARTITIONED_REG_UID};
use crate::registration::{CdrRegistration, REG_COLUMNS};
use crate::search::{self, DERIVED_COLUMNS, StreamFigures};
use crate::{
    CALL_COLUMNS, CdrCall, CdrError, CdrRecord, CdrStream, SQLITE_INDEXES, STREAM_COLUMNS,
    SqliteStore, T38_COLUMNS,
};

/// A small deterministic generator (SplitMix64): the seeds make the data, not the machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// An index in `0..n` drawn log-uniformly: index 0 is the busiest, and each tenfold
    /// further out is as likely in total as the tenfold before (a few busy numbers, a long
    /// tail of rare ones).
    pub fn skewed(&mut self, n: u64) -> u64 {
        let x = (n as f64 + 1.0).powf(self.unit()) - 1.0;
        (x as u64).min(n.saturating_sub(1))
    }

    /// One of `items` by weight.
    pub fn weighted<'a, T>(&mut self, items: &'a [(T, u32)]) -> &'a T {
        let total: u32 = items.iter().map(|(_, w)| w).sum();
        let mut x = self.below(u64::from(total)) as u32;
        for (t, w) in items {
            if x < *w {
                return t;
            }
            x -= w;
        }
        &items[items.len() - 1].0
    }
}

/// A PBX site as a sensor sees it.
struct Site {
    sensor: &'static str,
    weight: u32,
    /// Extensions `ext_first..ext_first + phones`.
    ext_first: u32,
    phones: u32,
    /// Phone addresses: IPv4 `10.{net}.{n / 250}.{n % 250 + 1}`, or IPv6 under `2001:db8:{net}::`.
    net: u32,
    ipv6: bool,
    pbx: &'static str,
    /// The DID block: the prefix and how many numbers it has.
    did: &'static str,
    dids: u32,
    domain: &'static str,
}

const SITES: [Site; 4] = [
    Site {
        sensor: "local",
        weight: 70,
        ext_first: 1000,
        phones: 1000,
        net: 1,
        ipv6: false,
        pbx: "192.168.10.5:5060",
        did: "+4930123456",
        dids: 1000,
        domain: "berlin.pbx.example.com",
    },
    Site {
        sensor: "site-a",
        weight: 15,
        ext_first: 2000,
        phones: 500,
        net: 2,
        ipv6: false,
        pbx: "192.168.20.5:5060",
        did: "+4940987650",
        dids: 100,
        domain: "hamburg.pbx.example.com",
    },
    Site {
        sensor: "site-b",
        weight: 10,
        ext_first: 3000,
        phones: 300,
        net: 3,
        ipv6: false,
        pbx: "192.168.30.5:5060",
        did: "+498955512",
        dids: 100,
        domain: "munich.pbx.example.com",
    },
    Site {
        sensor: "dc-2",
        weight: 5,
        ext_first: 4000,
        phones: 100,
        net: 4,
        ipv6: true,
        pbx: "[2001:db8:4::5]:5060",
        did: "+3120555010",
        dids: 100,
        domain: "amsterdam.pbx.example.com",
    },
];

/// Carriers' SIP trunks (signalling addresses).
const TRUNKS: [(&str, u32); 4] = [
    ("203.0.113.10:5060", 40),
    ("203.0.113.11:5060", 30),
    ("198.51.100.20:5060", 20),
    ("[2001:db8:ffff::10]:5060", 10),
];

/// External numbers a site calls and is called from, drawn skewed from this many.
const EXTERNAL_NUMBERS: u64 = 5_000_000;

/// An external number: German fixed and mobile, Dutch, US, in E.164.
fn external_number(i: u64) -> String {
    let mut r = Rng::new(i.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5eed);
    let (cc, areas, digits): (&str, &[&str], u32) = match i % 10 {
        0..=3 => ("+49", &["30", "40", "89", "221", "69", "711", "211"], 8),
        4..=6 => ("+49", &["151", "152", "160", "170", "171", "176", "179"], 8),
        7 => ("+31", &["20", "10", "6"], 8),
        _ => ("+1", &["212", "415", "646", "312"], 7),
    };
    let area = areas[r.below(areas.len() as u64) as usize];
    let mut s = format!("{cc}{area}");
    for _ in 0..digits {
        s.push(char::from(b'0' + r.below(10) as u8));
    }
    s
}

fn phone_addr(site: &Site, n: u32, port: u16) -> String {
    if site.ipv6 {
        format!("[2001:db8:{}::{:x}]:{port}", site.net, n + 0x100)
    } else {
        format!("10.{}.{}.{}:{port}", site.net, n / 250, n % 250 + 1)
    }
}

/// The address's IP with another port (RTP beside SIP).
fn with_port(addr: &str, port: u16) -> String {
    match addr.rsplit_once(':') {
        Some((ip, _)) => format!("{ip}:{port}"),
        None => addr.to_string(),
    }
}

/// How a call ended: (weight, state, final response, reason, hangup side, Q.850 cause).
const OUTCOMES: [(u32, &str, u16, &str, &str, u16); 9] = [
    (700, "ended", 200, "OK", "", 16),
    (90, "failed", 486, "Busy Here", "callee", 17),
    (50, "failed", 404, "Not Found", "callee", 1),
    (30, "failed", 480, "Temporarily Unavailable", "callee", 19),
    (15, "failed", 503, "Service Unavailable", "callee", 34),
    (8, "failed", 488, "Not Acceptable Here", "callee", 88),
    (10, "failed", 403, "Forbidden", "callee", 21),
    (90, "cancelled", 487, "Request Terminated", "caller", 16),
    (7, "failed", 408, "Request Timeout", "callee", 102),
];

/// Payload names as the monitor writes them (`RtpStream::payload_names`).
const CODECS: [(&str, u32); 5] = [
    ("g711A", 55),
    ("g711U", 20),
    ("g722", 12),
    ("g729", 8),
    ("opus", 5),
];

/// One synthetic call `i` of `n` over [from_us, to_us).
fn synthetic_call(i: u64, n: u64, from_us: i64, to_us: i64, seed: u64) -> CdrRecord {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let step = ((to_us - from_us) as f64 / n.max(1) as f64).max(1.0);
    let start_us = from_us + (i as f64 * step + r.unit() * step) as i64;
    let start_us = start_us.min(to_us - 1);
    let sites: Vec<(&Site, u32)> = SITES.iter().map(|s| (s, s.weight)).collect();
    let site = *r.weighted(&sites);
    let phone = r.skewed(u64::from(site.phones)) as u32;
    let ext = (site.ext_first + phone).to_string();
    let phone_sip = phone_addr(site, phone, 5060);
    let trunk = *r.weighted(&TRUNKS);
    // 50% outbound, 38% inbound (to a DID or an extension), 12% internal.
    let dir = r.below(100);
    let (caller, called, caller_addr, callee_addr) = if dir < 50 {
        let to = external_number(r.skewed(EXTERNAL_NUMBERS));
        (ext.clone(), to, phone_sip.clone(), site.pbx.to_string())
    } else if dir < 88 {
        let from = if r.chance(0.02) {
            "anonymous".to_string()
        } else {
            external_number(r.skewed(EXTERNAL_NUMBERS))
        };
        let to = if r.chance(0.7) {
            format!("{}{:02}", site.did, r.skewed(u64::from(site.dids)))
        } else {
            ext.clone()
        };
        (from, to, trunk.to_string(), site.pbx.to_string())
    } else {
        let to = if r.chance(0.08) {
            "*97".to_string()
        } else {
            (site.ext_first + r.skewed(u64::from(site.phones)) as u32).to_string()
        };
        (ext.clone(), to, phone_sip.clone(), site.pbx.to_string())
    };
    let outcomes: Vec<(usize, u32)> = OUTCOMES.iter().map(|o| o.0).enumerate().collect();
    let (_, state, code, reason, hangup, q850) = OUTCOMES[*r.weighted(&outcomes)];
    let ringing_us = start_us + r.range(80_000.0, 900_000.0) as i64;
    let answered = code == 200;
    let answer_us = answered.then(|| ringing_us + r.range(1e6, 20e6) as i64);
    let talk_s = -r.range(1e-9, 1.0).ln() * 150.0 + 2.0;
    let end_us = match answer_us {
        Some(a) => a + (talk_s * 1e6) as i64,
        None => ringing_us + r.range(0.05e6, 25e6) as i64,
    };
    // 5% of answered calls are bad (loss, jitter), 8% mediocre.
    let quality = r.below(100);
    let (codec, _) = CODECS[{
        let w: Vec<(usize, u32)> = CODECS.iter().enumerate().map(|(i, c)| (i, c.1)).collect();
        *r.weighted(&w)
    }];
    let payload = if r.chance(0.3) {
        format!("{codec}, telephone-event")
    } else {
        codec.to_string()
    };
    let call_id = format!(
        "{:016x}{:08x}@{}",
        r.next_u64(),
        r.next_u64() as u32,
        site.domain
    );
    let mut streams = Vec::new();
    // Answered calls have their two directions; a tenth of the failed ones early media.
    if answered || r.chance(0.1) {
        let media_start = answer_us.unwrap_or(ringing_us);
        let secs = (end_us - media_start) as f64 / 1e6;
        let phone_rtp = with_port(&caller_addr, 10_000 + 2 * r.below(5000) as u16);
        let pbx_rtp = with_port(&callee_addr, 20_000 + 2 * r.below(5000) as u16);
        for (src, dst) in [(&phone_rtp, &pbx_rtp), (&pbx_rtp, &phone_rtp)] {
            let packets = (secs * 50.0).max(1.0) as u64;
            let (loss_pct, jitter, mos) = match quality {
                0..=4 => (r.range(2.0, 9.0), r.range(15.0, 80.0), r.range(1.6, 3.05)),
                5..=12 => (r.range(0.3, 2.0), r.range(5.0, 20.0), r.range(3.2, 3.95)),
                _ => (
                    if r.chance(0.2) {
                        r.range(0.0, 0.3)
                    } else {
                        0.0
                    },
                    r.range(0.2, 4.0),
                    r.range(4.1, 4.42),
                ),
            };
            let lost = (packets as f64 * loss_pct / 100.0) as i64;
            streams.push(CdrStream {
                call_id: Some(call_id.clone()),
                src: src.clone(),
                dst: dst.clone(),
                ssrc: r.next_u64() as u32,
                payload: payload.clone(),
                start_us: media_start,
                end_us,
                packets: packets.saturating_sub(lost as u64),
                lost,
                duplicates: 0,
                out_of_order: u64::from(r.chance(0.05)),
                min_delta_ms: 19.0 + r.unit(),
                mean_delta_ms: 20.0,
                max_delta_ms: 20.0 + jitter * 2.0,
                mean_jitter_ms: jitter / 3.0,
                max_jitter_ms: jitter,
                mos: Some((mos * 100.0).round() / 100.0),
                rtcp_reports: (secs / 5.0) as u32,
                rtcp_fraction_lost_pct: Some(loss_pct),
                rtcp_jitter_ms: Some(jitter / 3.0),
                ..CdrStream::default()
            });
        }
    }
    let call = CdrCall {
        call_id,
        caller,
        called,
        caller_addr,
        callee_addr,
        start_us,
        ringing_us: Some(ringing_us),
        answer_us,
        end_us: Some(end_us),
        state: state.to_string(),
        last_response: Some(code),
        last_reason: reason.to_string(),
        hangup_by: Some(
            if answered {
                if r.chance(0.55) { "caller" } else { "callee" }
            } else {
                hangup
            }
            .to_string(),
        ),
        q850_cause: Some(q850),
        sip_messages: if answered { 7 } else { 5 },
        reinvites: u32::from(r.chance(0.03)),
        mos_min: streams
            .iter()
            .filter_map(|s| s.mos)
            .min_by(|a, b| a.total_cmp(b)),
        dtmf: if r.chance(0.05) {
            "1".to_string()
        } else {
            String::new()
        },
        sensor: site.sensor.to_string(),
        ..CdrCall::default()
    };
    let mut rec = CdrRecord::call(call, streams);
    rec.uid = rec.identity(site.sensor);
    rec
}

/// `n` calls spread over [from_us, to_us), oldest first, the same for the same `seed`.
pub fn synthetic_calls(
    n: u64,
    from_us: i64,
    to_us: i64,
    seed: u64,
) -> impl Iterator<Item = CdrRecord> {
    let to_us = to_us.max(from_us + 1);
    (0..n).map(move |i| synthetic_call(i, n, from_us, to_us, seed))
}

/// User agents of the phones.
const USER_AGENTS: [&str; 5] = [
    "Yealink SIP-T46U 108.86.0.20",
    "Grandstream GXP2170 1.0.11.23",
    "PolycomVVX-VVX_450-UA/6.4.3.5018",
    "Linphone/5.2.0 (belle-sip/5.2.0)",
    "Z 5.6.1 v2.10.19.4",
];

/// `n` REGISTER chains over [from_us, to_us), oldest first: phones of the sites registering,
/// most with a challenge and success, some refused, some unanswered.
pub fn synthetic_registrations(
    n: u64,
    from_us: i64,
    to_us: i64,
    seed: u64,
) -> impl Iterator<Item = CdrRecord> {
    let to_us = to_us.max(from_us + 1);
    (0..n).map(move |i| {
        let mut r = Rng::new(seed ^ 0xA5A5 ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let step = ((to_us - from_us) as f64 / n.max(1) as f64).max(1.0);
        let first_us = (from_us + (i as f64 * step + r.unit() * step) as i64).min(to_us - 1);
        let sites: Vec<(&Site, u32)> = SITES.iter().map(|s| (s, s.weight)).collect();
        let site = *r.weighted(&sites);
        let phone = r.below(u64::from(site.phones)) as u32;
        let user = (site.ext_first + phone).to_string();
        let src = phone_addr(site, phone, 5060);
        let (code, result, requests) = match r.below(100) {
            0..=88 => (Some(200), "registered", 2),
            89..=92 => (Some(401), "challenged", 1),
            93..=95 => (Some(403), "failed", 2),
            _ => (None, "no-response", 3),
        };
        let reg = CdrRegistration {
            call_id: format!("{:016x}@{}", r.next_u64(), site.domain),
            contact: format!("sip:{user}@{src};transport=udp"),
            domain: site.domain.to_string(),
            user_agent: USER_AGENTS[(phone % USER_AGENTS.len() as u32) as usize].to_string(),
            dst: site.pbx.to_string(),
            src,
            user,
            first_us,
            last_us: first_us + r.range(2_000.0, 900_000.0) as i64,
            requests,
            last_code: code,
            result: result.to_string(),
            expires_s: code.map(|_| [3600, 600, 120][r.below(3) as usize]),
            sensor: site.sensor.to_string(),
        };
        let mut rec = CdrRecord::registration(reg);
        rec.uid = rec.identity(site.sensor);
        rec
    })
}

/// What a bulk load stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loaded {
    pub calls: u64,
    pub streams: u64,
    pub t38: u64,
    pub registrations: u64,
}

/// Records per `COPY` round (PostgreSQL) and per progress step.
pub const BULK_CHUNK_RECORDS: usize = 20_000;
/// SQLite's page cache while it loads, in KiB (256 MiB): index builds sort in it.
pub const BULK_SQLITE_CACHE_KIB: i64 = 256 * 1024;
/// PostgreSQL's `maintenance_work_mem` while it builds the indexes again.
pub const BULK_PG_MAINTENANCE_WORK_MEM: &str = "512MB";

fn plain_insert(table: &str, columns: &str) -> String {
    format!(
        "INSERT INTO {table} ({columns}) VALUES ({})",
        crate::placeholders(columns.split(',').count(), false)
    )
}

/// Stores `records` into the SQLite database at `path` (created if missing): the indexes are
/// dropped, the rows inserted with prepared statements, the indexes built again, all in one
/// transaction with the rollback journal (WAL would copy every page once more), then WAL
/// again and fresh statistics. No other connection may have the file open meanwhile (SQLite
/// leaves WAL mode only alone: the load fails with "database is locked" otherwise).
pub fn bulk_load_sqlite(
    path: &Path,
    records: impl IntoIterator<Item = CdrRecord>,
) -> Result<Loaded, CdrError> {
    bulk_load_sqlite_grouped(path, records, &groups::Groups::none())
}

/// [`bulk_load_sqlite`] with the report rollups of `groups` (and `all`), computed by the
/// store's own code as the calls go in, in the same transaction.
pub fn bulk_load_sqlite_grouped(
    path: &Path,
    records: impl IntoIterator<Item = CdrRecord>,
    groups: &groups::Groups,
) -> Result<Loaded, CdrError> {
    let mut store = SqliteStore::open(path)?;
    let name = path.display().to_string();
    let wrap = |source| CdrError::Sqlite {
        path: name.clone(),
        source,
    };
    let conn = store.conn();
    conn.pragma_update(None, "journal_mode", "DELETE")
        .map_err(wrap)?;
    conn.pragma_update(None, "synchronous", "OFF")
        .map_err(wrap)?;
    conn.pragma_update(None, "cache_size", -BULK_SQLITE_CACHE_KIB)
        .map_err(wrap)?;
    let mut loaded = Loaded::default();
    let tx = conn.transaction().map_err(wrap)?;
    let r = (|| -> rusqlite::Result<()> {
        let later = [
            &("registration_uid", ""),
            &crate::alerts::REGISTRATION_FIRST,
        ];
        for (n, _) in SQLITE_INDEXES.iter().chain(later) {
            tx.execute_batch(&format!("DROP INDEX IF EXISTS {n}"))?;
        }
        let mut call = tx.prepare_cached(&crate::call_insert_sql(false, false))?;
        let mut stream =
            tx.prepare_cached(&plain_insert("cdr_rtp", &format!("{STREAM_COLUMNS}, uid")))?;
        let mut t38 = tx.prepare_cached(&plain_insert(
            "cdr_t38",
            &format!("cdr_id, {T38_COLUMNS}, uid"),
        ))?;
        let mut reg = tx.prepare_cached(&plain_insert(
            "registration",
            &format!("uid, {REG_COLUMNS}, src_ip, dst_ip"),
        ))?;
        let mut changes = crate::rollup::Rollup::default();
        for rec in records {
            let mut cdr_id = None;
            if let Some(c) = &rec.call {
                changes.call(
                    groups,
                    &crate::rollup::CallFacts::of_record(c, &rec.streams),
                    1,
                );
                if loaded.calls % BULK_CHUNK_RECORDS as u64 == 0 {
                    crate::rollup::sqlite_apply(&tx, std::mem::take(&mut changes))?;
                }
                cdr_id = Some(crate::sqlite_insert_call(
                    &mut call,
                    c,
                    &rec.streams,
                    rec.call_uid(),
                )?);
                loaded.calls += 1;
            }
            for (i, s) in rec.streams.iter().enumerate() {
                crate::sqlite_insert_stream(&mut stream, cdr_id, s, rec.stream_uid(i))?;
                loaded.streams += 1;
            }
            for (i, f) in rec.t38.iter().enumerate() {
                let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                t38.execute(rusqlite::params![
                    cdr_id,
                    f.src,
                    f.dst,
                    f.start_us,
                    f.end_us,
                    n(f.packets),
                    n(f.bytes),
                    n(f.lost),
                    n(f.duplicates),
                    n(f.out_of_order),
                    f.types,
                    n(f.redundant),
                    n(f.fec),
                    f.t30,
                    rec.t38_uid(i)
                ])?;
                loaded.t38 += 1;
            }
            if let Some(r) = &rec.registration {
                crate::sqlite_insert_registration(&mut reg, rec.call_uid(), r)?;
                loaded.registrations += 1;
            }
        }
        drop((call, stream, t38, reg));
        crate::rollup::sqlite_apply(&tx, changes)?;
        tx.execute_batch(&crate::sqlite_index_sql())?;
        tx.execute_batch(crate::alerts::SQLITE_ALERT_SCHEMA)?;
        Ok(())
    })();
    r.map_err(wrap)?;
    tx.commit().map_err(wrap)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(wrap)?;
    conn.execute_batch("ANALYZE").map_err(wrap)?;
    Ok(loaded)
}

/// Rows in PostgreSQL's `COPY ... FROM STDIN` text format.
pub(crate) struct CopyText {
    buf: Vec<u8>,
    fresh: bool,
}

impl CopyText {
    fn new() -> CopyText {
        CopyText {
            buf: Vec::new(),
            fresh: true,
        }
    }

    fn sep(&mut self) {
        if !self.fresh {
            self.buf.push(b'\t');
        }
        self.fresh = false;
    }

    fn null(&mut self) {
        self.sep();
        self.buf.extend_from_slice(b"\\N");
    }

    fn text(&mut self, s: &str) {
        self.sep();
        for &b in s.as_bytes() {
            match b {
                b'\\' => self.buf.extend_from_slice(b"\\\\"),
                b'\t' => self.buf.extend_from_slice(b"\\t"),
                b'\n' => self.buf.extend_from_slice(b"\\n"),
                b'\r' => self.buf.extend_from_slice(b"\\r"),
                _ => self.buf.push(b),
            }
        }
    }

    fn opt_text(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.text(s),
            None => self.null(),
        }
    }

    fn int(&mut self, v: i64) {
        self.sep();
        let _ = write!(self.buf, "{v}");
    }

    fn opt_int(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.int(v),
            None => self.null(),
        }
    }

    fn real(&mut self, v: f64) {
        self.sep();
        if v.is_nan() {
            self.buf.extend_from_slice(b"NaN");
        } else if v.is_infinite() {
            self.buf
                .extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
        } else {
            let _ = write!(self.buf, "{v:?}");
        }
    }

    fn opt_real(&mut self, v: Option<f64>) {
        match v {
            Some(v) => self.real(v),
            None => self.null(),
        }
    }

    /// BYTEA as `\\x` and hex (the backslash itself escaped for the text format).
    fn bytes(&mut self, v: Option<&[u8]>) {
        let Some(v) = v else {
            return self.null();
        };
        self.sep();
        self.buf.extend_from_slice(b"\\\\x");
        for b in v {
            let _ = write!(self.buf, "{b:02x}");
        }
    }

    fn end_row(&mut self) {
        self.buf.push(b'\n');
        self.fresh = true;
    }
}

fn u(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The COPY rows of a chunk of records, the calls numbered from `next_id`: the columns of
/// [`copy_statements`], with `call_start_us` in the stream tables when `partitioned`.
pub(crate) struct Chunk {
    pub cdr: CopyText,
    pub rtp: CopyText,
    pub t38: CopyText,
    pub reg: CopyText,
    partitioned: bool,
}

/// The `COPY ... FROM STDIN` statements of [`Chunk`]'s four tables, in its order.
pub(crate) fn copy_statements(layout: PgLayout) -> [String; 4] {
    let start = match layout {
        PgLayout::Plain => "",
        PgLayout::Partitioned => "call_start_us, ",
    };
    let streams = STREAM_COLUMNS.replacen("cdr_id, ", "", 1);
    [
        format!("COPY cdr (id, {CALL_COLUMNS}, {DERIVED_COLUMNS}, uid) FROM STDIN"),
        format!("COPY cdr_rtp (cdr_id, {start}{streams}, uid) FROM STDIN"),
        format!("COPY cdr_t38 (cdr_id, {start}{T38_COLUMNS}, uid) FROM STDIN"),
        format!("COPY registration (uid, {REG_COLUMNS}, src_ip, dst_ip) FROM STDIN"),
    ]
}

impl Chunk {
    pub(crate) fn new(layout: PgLayout) -> Chunk {
        Chunk {
            cdr: CopyText::new(),
            rtp: CopyText::new(),
            t38: CopyText::new(),
            reg: CopyText::new(),
            partitioned: layout == PgLayout::Partitioned,
        }
    }

    /// The four tables' text, in [`copy_statements`]' order.
    pub(crate) fn tables(&self) -> [&[u8]; 4] {
        [&self.cdr.buf, &self.rtp.buf, &self.t38.buf, &self.reg.buf]
    }

    pub(crate) fn add(&mut self, rec: &CdrRecord, next_id: &mut i64, loaded: &mut Loaded) {
        let mut cdr_id = None;
        if let Some(c) = &rec.call {
            let id = *next_id;
            *next_id += 1;
            cdr_id = Some(id);
            let d = search::derive(c, rec.streams.iter().map(StreamFigures::from));
            let w = &mut self.cdr;
            w.int(id);
            w.text(&c.call_id);
            w.text(&c.caller);
            w.text(&c.called);
            w.text(&c.caller_addr);
            w.text(&c.callee_addr);
            w.int(c.start_us);
            w.opt_int(c.ringing_us);
            w.opt_int(c.answer_us);
            w.opt_int(c.end_us);
            w.text(&c.state);
            w.opt_int(c.last_response.map(i64::from));
            w.text(&c.last_reason);
            w.opt_text(c.hangup_by.as_deref());
            w.opt_int(c.q850_cause.map(i64::from));
            w.int(i64::from(c.sip_messages));
            w.int(i64::from(c.reinvites));
            w.opt_real(c.mos_min);
            w.opt_text(c.sip_tar.as_deref());
            w.opt_text(c.sip_member.as_deref());
            w.opt_int(c.sip_offset.map(u));
            w.opt_int(c.sip_len.map(u));
            w.opt_text(c.sip_compression.as_deref());
            w.opt_text(c.rtp_tar.as_deref());
            w.opt_text(c.rtp_member.as_deref());
            w.opt_int(c.rtp_offset.map(u));
            w.opt_int(c.rtp_len.map(u));
            w.opt_text(c.rtp_compression.as_deref());
            w.text(&c.dtmf);
            w.opt_int(c.fax_pages.map(i64::from));
            w.opt_text(c.fax_result.as_deref());
            // PostgreSQL's boolean reads 1 and 0 as true and false.
            w.int(i64::from(c.encrypted));
            w.int(i64::from(c.t38_offered));
            w.text(&d.sensor);
            w.text(&d.caller_rev);
            w.text(&d.called_rev);
            w.bytes(d.caller_ip.as_deref());
            w.bytes(d.callee_ip.as_deref());
            w.opt_int(d.duration_ms);
            w.opt_text(d.codecs.as_deref());
            w.opt_real(d.loss_max_pct);
            w.opt_real(d.jitter_max_ms);
            w.opt_text(rec.call_uid());
            w.end_row();
            loaded.calls += 1;
        }
        for (i, s) in rec.streams.iter().enumerate() {
            let w = &mut self.rtp;
            w.opt_int(cdr_id);
            if self.partitioned {
                w.int(pg_partition::call_start_us(rec, s.start_us));
            }
            w.opt_text(s.call_id.as_deref());
            w.text(&s.src);
            w.text(&s.dst);
            w.int(i64::from(s.ssrc));
            w.text(&s.payload);
            w.int(s.start_us);
            w.int(s.end_us);
            w.int(u(s.packets));
            w.int(s.lost);
            w.int(u(s.duplicates));
            w.int(u(s.out_of_order));
            w.real(s.min_delta_ms);
            w.real(s.mean_delta_ms);
            w.real(s.max_delta_ms);
            w.real(s.mean_jitter_ms);
            w.real(s.max_jitter_ms);
            w.opt_real(s.mos);
            w.int(i64::from(s.rtcp_reports));
            w.opt_real(s.rtcp_fraction_lost_pct);
            w.opt_real(s.rtcp_jitter_ms);
            w.opt_text(s.rtp_tar.as_deref());
            w.opt_text(s.rtp_member.as_deref());
            w.opt_int(s.rtp_offset.map(u));
            w.opt_int(s.rtp_len.map(u));
            w.opt_text(s.rtp_compression.as_deref());
            w.opt_text(rec.stream_uid(i).as_deref());
            w.end_row();
            loaded.streams += 1;
        }
        for (i, f) in rec.t38.iter().enumerate() {
            let w = &mut self.t38;
            w.opt_int(cdr_id);
            if self.partitioned {
                w.int(pg_partition::call_start_us(rec, f.start_us));
            }
            w.text(&f.src);
            w.text(&f.dst);
            w.int(f.start_us);
            w.int(f.end_us);
            for v in [f.packets, f.bytes, f.lost, f.duplicates, f.out_of_order] {
                w.int(u(v));
            }
            w.text(&f.types);
            w.int(u(f.redundant));
            w.int(u(f.fec));
            w.text(&f.t30);
            w.opt_text(rec.t38_uid(i).as_deref());
            w.end_row();
            loaded.t38 += 1;
        }
        if let Some(r) = &rec.registration {
            let w = &mut self.reg;
            w.opt_text(rec.call_uid());
            for t in [
                &r.call_id,
                &r.user,
                &r.domain,
                &r.contact,
                &r.user_agent,
                &r.src,
                &r.dst,
            ] {
                w.text(t);
            }
            w.int(r.first_us);
            w.int(r.last_us);
            w.int(i64::from(r.requests));
            w.opt_int(r.last_code.map(i64::from));
            w.text(&r.result);
            w.opt_int(r.expires_s.map(i64::from));
            w.text(search::sensor_or_default(&r.sensor));
            w.bytes(crate::query::ip_bytes(&r.src).as_ref().map(|b| &b[..]));
            w.bytes(crate::query::ip_bytes(&r.dst).as_ref().map(|b| &b[..]));
            w.end_row();
            loaded.registrations += 1;
        }
    }
}

/// Stores `records` into the PostgreSQL database of `conninfo`, in the layout it has (plain
/// for a new one): in one transaction, the tables locked (other sessions wait: readers of
/// these tables too, since the indexes are dropped), the indexes dropped, the rows sent with
/// `COPY` in chunks of [`BULK_CHUNK_RECORDS`] (partitioned: the days of each chunk created
/// first), the indexes built again; then `VACUUM ANALYZE` (statistics for the planner, and
/// the visibility map that lets counts read the indexes only).
pub fn bulk_load_postgres(
    conninfo: &str,
    records: impl IntoIterator<Item = CdrRecord>,
) -> Result<Loaded, CdrError> {
    bulk_load_postgres_grouped(conninfo, records, &groups::Groups::none())
}

/// [`bulk_load_postgres`] with the report rollups of `groups` (and `all`), computed by the
/// store's own code as the calls go in, in the same transaction.
pub fn bulk_load_postgres_grouped(
    conninfo: &str,
    records: impl IntoIterator<Item = CdrRecord>,
    groups: &groups::Groups,
) -> Result<Loaded, CdrError> {
    let mut store = PgStore::connect(conninfo)?;
    let layout = store.layout();
    let target = store.name().to_string();
    let mut indexes: Vec<(&str, &str)> = match layout {
        PgLayout::Plain => PG_INDEXES.to_vec(),
        PgLayout::Partitioned => PG_PARTITIONED_INDEXES
            .iter()
            .copied()
            .chain([PG_PARTITIONED_REG_UID])
            .collect(),
    };
    indexes.push(crate::alerts::REGISTRATION_FIRST);
    let wrap = |source| CdrError::Postgres {
        target: target.clone(),
        source,
    };
    let client = store.client();
    client
        .batch_execute(&format!(
            "SET maintenance_work_mem = '{BULK_PG_MAINTENANCE_WORK_MEM}'; SET synchronous_commit = off"
        ))
        .map_err(wrap)?;
    let mut tx = client.transaction().map_err(wrap)?;
    tx.batch_execute("LOCK TABLE cdr, cdr_rtp, cdr_t38, registration IN EXCLUSIVE MODE")
        .map_err(wrap)?;
    let drops: String = indexes
        .iter()
        .map(|(n, _)| format!("DROP INDEX IF EXISTS {n};"))
        .collect();
    tx.batch_execute(&drops).map_err(wrap)?;
    let mut next_id: i64 = tx
        .query_one("SELECT COALESCE(max(id), 0) + 1 FROM cdr", &[])
        .map_err(wrap)?
        .get(0);
    let copies = copy_statements(layout);
    let mut loaded = Loaded::default();
    let mut days = std::collections::BTreeSet::new();
    let mut records = records.into_iter().peekable();
    while records.peek().is_some() {
        let mut chunk = Chunk::new(layout);
        let mut need = std::collections::BTreeSet::new();
        let mut changes = crate::rollup::Rollup::default();
        for rec in records.by_ref().take(BULK_CHUNK_RECORDS) {
            if layout == PgLayout::Partitioned {
                pg_partition::record_days(&rec, &mut need);
            }
            if let Some(c) = &rec.call {
                changes.call(
                    groups,
                    &crate::rollup::CallFacts::of_record(c, &rec.streams),
                    1,
                );
            }
            chunk.add(&rec, &mut next_id, &mut loaded);
        }
        crate::rollup::pg_apply(&mut tx, changes).map_err(wrap)?;
        need.retain(|d: &Day| !days.contains(d));
        if !need.is_empty() {
            pg_partition::create_days_in(&mut tx, &need).map_err(wrap)?;
            days.extend(need);
        }
        for (sql, data) in copies.iter().zip(chunk.tables()) {
            if data.is_empty() {
                continue;
            }
            let mut w = tx.copy_in(sql.as_str()).map_err(wrap)?;
            w.write_all(data).map_err(|e| CdrError::Data {
                problem: format!("sending COPY data to {target}: {e}"),
            })?;
            w.finish().map_err(wrap)?;
        }
    }
    tx.execute(
        "SELECT setval(pg_get_serial_sequence('cdr', 'id'), GREATEST($1::bigint - 1, 1))",
        &[&next_id],
    )
    .map_err(wrap)?;
    let creates: String = indexes
        .iter()
        .map(|(n, d)| crate::create_index_sql(n, d))
        .collect();
    tx.batch_execute(&creates).map_err(wrap)?;
    tx.commit().map_err(wrap)?;
    // One statement each: VACUUM refuses to run in the implicit transaction of a batch.
    for table in ["cdr", "cdr_rtp", "cdr_t38", "registration"] {
        client
            .batch_execute(&format!("VACUUM ANALYZE {table}"))
            .map_err(wrap)?;
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_calls() {
        let a: Vec<CdrRecord> = synthetic_calls(50, 0, 3_600_000_000, 7).collect();
        let b: Vec<CdrRecord> = synthetic_calls(50, 0, 3_600_000_000, 7).collect();
        assert_eq!(a, b);
        assert!(a.windows(2).all(|w| {
            w[0].call.as_ref().unwrap().start_us <= w[1].call.as_ref().unwrap().start_us
        }));
        let answered = a
            .iter()
            .filter(|r| r.call.as_ref().unwrap().answer_us.is_some())
            .count();
        assert!(answered > 20, "{answered} of 50 answered");
        assert!(a.iter().all(|r| !r.uid.is_empty()));
    }

    #[test]
    fn copy_text_escapes_what_the_format_reserves() {
        let mut w = CopyText::new();
        w.text("a\tb\\c\nd");
        w.null();
        w.bytes(Some(&[0, 255]));
        w.real(0.1);
        w.end_row();
        assert_eq!(w.buf, b"a\\tb\\\\c\\nd\t\\N\t\\\\x00ff\t0.1\n");
    }
}
