//! Report rollups: per group and per UTC hour, the counts and sketches a [`crate::report`] is
//! drawn from, kept in table `report_hour` (one row per group and hour; `WITHOUT ROWID` in
//! SQLite, a plain table in either PostgreSQL layout).
//!
//! Written by the store in the same transaction as the calls: for each call of a batch, its
//! [`CallFacts`] are added to the buckets of its groups ([`groups::ALL`] and the configured ones
//! it matches), and a call stored before under the same uid first has its stored row's facts
//! taken away. So a record stored again (a journal replayed, the same capture read twice, the
//! collector's upsert) changes nothing, and a record stored again with other figures leaves the
//! buckets as if only the last version had come. Every part of a bucket is a count — including
//! the sketches' bins and the per-minute calls in progress — so taking away is exact.
//!
//! A batch's changes are summed in memory ([`Rollup`]) and each bucket they touch is read,
//! changed and written once per batch, in (group, hour) order.
//!
//! Never: reads the `cdr` table beyond the rows a batch stores again, or holds more than a
//! batch's buckets.

use std::collections::{BTreeMap, HashMap};

use groups::{CallKeys, Groups};

use crate::report::{FailureCount, PEAK_CALL_MINUTES_MAX, ReportRow, TOP_FAILURE_CODES};

const HOUR_US: i64 = 3_600_000_000;
const MINUTE_US: i64 = 60_000_000;

/// Bins grow by this factor: a bin's middle is within 2 % of any value in it.
const GAMMA: f64 = 1.04;
/// The highest bin (values above the last bin's floor are counted in it).
const BIN_MAX: u16 = 1023;

/// A sketch's unit and floor.
#[derive(Debug, Clone, Copy)]
struct Scale {
    /// Bin 1 starts here; bin 0 holds 0 (and anything not above it).
    low: f64,
}

const PDD_MS: Scale = Scale { low: 0.1 };
const LOSS_PCT: Scale = Scale { low: 0.001 };
const JITTER_MS: Scale = Scale { low: 0.01 };

impl Scale {
    fn bin(&self, v: f64) -> u16 {
        if v.is_nan() || v <= 0.0 {
            return 0;
        }
        let i = ((v / self.low).ln() / GAMMA.ln()).floor();
        (1.0 + i.max(0.0)).min(f64::from(BIN_MAX)) as u16
    }

    /// The value a bin stands for: its geometric middle.
    fn value(&self, bin: u16) -> f64 {
        if bin == 0 {
            0.0
        } else {
            self.low * GAMMA.powf(f64::from(bin) - 0.5)
        }
    }
}

/// Counts by key: a sketch's bins, failure codes, or calls in progress by minute of the hour.
/// Signed, so that a batch's changes can take away.
pub type Bins = BTreeMap<u16, i64>;

fn add_bins(to: &mut Bins, from: &Bins, sign: i64) {
    for (k, v) in from {
        let e = to.entry(*k).or_insert(0);
        *e += sign * v;
        if *e == 0 {
            to.remove(k);
        }
    }
}

/// The value at quantile `q` (nearest rank: the smallest value with at least `ceil(q * n)` of
/// the `n` values at or below it), or `None` when empty.
fn quantile(bins: &Bins, scale: Scale, q: f64) -> Option<f64> {
    let n: i64 = bins.values().sum();
    if n <= 0 {
        return None;
    }
    let rank = ((q * n as f64).ceil() as i64).clamp(1, n);
    let mut seen = 0;
    for (k, v) in bins {
        seen += v;
        if seen >= rank {
            return Some(scale.value(*k));
        }
    }
    None
}

/// One group's hour: what [`crate::report`] reads. Every field is a count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HourBucket {
    pub(crate) calls: i64,
    pub(crate) answered: i64,
    pub(crate) user_ended: i64,
    pub(crate) talk_calls: i64,
    pub(crate) talk_ms: i64,
    pub(crate) mos_calls: i64,
    pub(crate) mos_below_36: i64,
    pub(crate) mos_below_31: i64,
    pub(crate) one_way: i64,
    pub(crate) no_rtp: i64,
    pub(crate) pdd: Bins,
    pub(crate) loss: Bins,
    pub(crate) jitter: Bins,
    pub(crate) codes: Bins,
    /// Calls in progress per minute of the hour (0 to 59).
    pub(crate) minutes: Bins,
}

/// The count columns of `report_hour`, in [`HourBucket::counts`]' order.
pub(crate) const COUNT_COLUMNS: [&str; 10] = [
    "calls",
    "answered",
    "user_ended",
    "talk_calls",
    "talk_ms",
    "mos_calls",
    "mos_below_36",
    "mos_below_31",
    "one_way",
    "no_rtp",
];

/// The SQLite table (format version 5).
pub(crate) const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS report_hour (
    group_name    TEXT    NOT NULL,
    hour_us       INTEGER NOT NULL,
    calls         INTEGER NOT NULL,
    answered      INTEGER NOT NULL,
    user_ended    INTEGER NOT NULL,
    talk_calls    INTEGER NOT NULL,
    talk_ms       INTEGER NOT NULL,
    mos_calls     INTEGER NOT NULL,
    mos_below_36  INTEGER NOT NULL,
    mos_below_31  INTEGER NOT NULL,
    one_way       INTEGER NOT NULL,
    no_rtp        INTEGER NOT NULL,
    sketches      BLOB    NOT NULL,
    PRIMARY KEY (group_name, hour_us)
) WITHOUT ROWID;";

/// The PostgreSQL table (migration 9).
pub(crate) const PG_TABLE: &str = "CREATE TABLE IF NOT EXISTS report_hour (
    group_name    TEXT    NOT NULL,
    hour_us       BIGINT  NOT NULL,
    calls         BIGINT  NOT NULL,
    answered      BIGINT  NOT NULL,
    user_ended    BIGINT  NOT NULL,
    talk_calls    BIGINT  NOT NULL,
    talk_ms       BIGINT  NOT NULL,
    mos_calls     BIGINT  NOT NULL,
    mos_below_36  BIGINT  NOT NULL,
    mos_below_31  BIGINT  NOT NULL,
    one_way       BIGINT  NOT NULL,
    no_rtp        BIGINT  NOT NULL,
    sketches      BYTEA   NOT NULL,
    PRIMARY KEY (group_name, hour_us)
);";

/// The sketches' encoding: this byte, then the five bin maps (pdd, loss, jitter, codes,
/// minutes), each a u16 count of entries and that many (u16 key, u32 count), little-endian.
const SKETCH_FORMAT: u8 = 1;

impl HourBucket {
    pub(crate) fn counts(&self) -> [i64; 10] {
        [
            self.calls,
            self.answered,
            self.user_ended,
            self.talk_calls,
            self.talk_ms,
            self.mos_calls,
            self.mos_below_36,
            self.mos_below_31,
            self.one_way,
            self.no_rtp,
        ]
    }

    pub(crate) fn from_counts(c: [i64; 10], sketches: &[u8]) -> Result<HourBucket, String> {
        let mut b = HourBucket {
            calls: c[0],
            answered: c[1],
            user_ended: c[2],
            talk_calls: c[3],
            talk_ms: c[4],
            mos_calls: c[5],
            mos_below_36: c[6],
            mos_below_31: c[7],
            one_way: c[8],
            no_rtp: c[9],
            ..HourBucket::default()
        };
        let (&format, mut rest) = sketches
            .split_first()
            .ok_or("report_hour: empty sketches")?;
        if format != SKETCH_FORMAT {
            return Err(format!(
                "report_hour: sketch format {format} is not {SKETCH_FORMAT} (a newer Tandem's?)"
            ));
        }
        for bins in [
            &mut b.pdd,
            &mut b.loss,
            &mut b.jitter,
            &mut b.codes,
            &mut b.minutes,
        ] {
            let take = |rest: &mut &[u8], n: usize| -> Result<Vec<u8>, String> {
                if rest.len() < n {
                    return Err("report_hour: sketches cut short".to_string());
                }
                let (a, b) = rest.split_at(n);
                *rest = b;
                Ok(a.to_vec())
            };
            let n = u16::from_le_bytes(take(&mut rest, 2)?.try_into().expect("2 bytes"));
            for _ in 0..n {
                let e = take(&mut rest, 6)?;
                let k = u16::from_le_bytes([e[0], e[1]]);
                let v = u32::from_le_bytes([e[2], e[3], e[4], e[5]]);
                bins.insert(k, i64::from(v));
            }
        }
        Ok(b)
    }

    pub(crate) fn sketch_bytes(&self) -> Vec<u8> {
        let mut out = vec![SKETCH_FORMAT];
        for bins in [
            &self.pdd,
            &self.loss,
            &self.jitter,
            &self.codes,
            &self.minutes,
        ] {
            let kept: Vec<_> = bins.iter().filter(|(_, v)| **v > 0).collect();
            out.extend_from_slice(&(kept.len() as u16).to_le_bytes());
            for (k, v) in kept {
                out.extend_from_slice(&k.to_le_bytes());
                out.extend_from_slice(&(u32::try_from(*v).unwrap_or(u32::MAX)).to_le_bytes());
            }
        }
        out
    }

    /// Adds `other` times `sign` (1, or -1 to take away).
    pub(crate) fn add(&mut self, other: &HourBucket, sign: i64) {
        self.calls += sign * other.calls;
        self.answered += sign * other.answered;
        self.user_ended += sign * other.user_ended;
        self.talk_calls += sign * other.talk_calls;
        self.talk_ms += sign * other.talk_ms;
        self.mos_calls += sign * other.mos_calls;
        self.mos_below_36 += sign * other.mos_below_36;
        self.mos_below_31 += sign * other.mos_below_31;
        self.one_way += sign * other.one_way;
        self.no_rtp += sign * other.no_rtp;
        add_bins(&mut self.pdd, &other.pdd, sign);
        add_bins(&mut self.loss, &other.loss, sign);
        add_bins(&mut self.jitter, &other.jitter, sign);
        add_bins(&mut self.codes, &other.codes, sign);
        add_bins(&mut self.minutes, &other.minutes, sign);
    }

    /// Nothing counted: the row can go.
    pub(crate) fn is_empty(&self) -> bool {
        self.counts().iter().all(|c| *c == 0)
            && self.pdd.is_empty()
            && self.loss.is_empty()
            && self.jitter.is_empty()
            && self.codes.is_empty()
            && self.minutes.is_empty()
    }

    /// The most calls in progress in one minute of this hour and the first such minute.
    pub(crate) fn peak(&self, hour_us: i64) -> Option<(u64, i64)> {
        let mut best: Option<(u64, i64)> = None;
        for (m, n) in &self.minutes {
            let n = (*n).max(0) as u64;
            if n > 0 && best.is_none_or(|(b, _)| n > b) {
                best = Some((n, hour_us + i64::from(*m) * MINUTE_US));
            }
        }
        best
    }

    /// The figures of a period whose hours were added into this bucket.
    pub(crate) fn row(&self, start_us: i64, label: String, peak: Option<(u64, i64)>) -> ReportRow {
        let n = |v: i64| v.max(0) as u64;
        let pct = |a: i64, b: i64| (b > 0).then(|| 100.0 * a as f64 / b as f64);
        let count = |b: &Bins| n(b.values().sum());
        let mut codes: Vec<FailureCount> = self
            .codes
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| FailureCount {
                code: *k,
                calls: n(*v),
            })
            .collect();
        codes.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.code.cmp(&b.code)));
        codes.truncate(TOP_FAILURE_CODES);
        ReportRow {
            start_us,
            label,
            calls: n(self.calls),
            answered: n(self.answered),
            asr_pct: pct(self.answered, self.calls),
            ner_pct: pct(self.answered + self.user_ended, self.calls),
            acd_s: (self.talk_calls > 0)
                .then(|| self.talk_ms as f64 / self.talk_calls as f64 / 1000.0),
            pdd_calls: count(&self.pdd),
            pdd_median_ms: quantile(&self.pdd, PDD_MS, 0.5),
            pdd_p95_ms: quantile(&self.pdd, PDD_MS, 0.95),
            mos_calls: n(self.mos_calls),
            mos_below_3_6_pct: pct(self.mos_below_36, self.mos_calls),
            mos_below_3_1_pct: pct(self.mos_below_31, self.mos_calls),
            rtp_calls: count(&self.loss),
            loss_median_pct: quantile(&self.loss, LOSS_PCT, 0.5),
            loss_p95_pct: quantile(&self.loss, LOSS_PCT, 0.95),
            jitter_median_ms: quantile(&self.jitter, JITTER_MS, 0.5),
            jitter_p95_ms: quantile(&self.jitter, JITTER_MS, 0.95),
            one_way: n(self.one_way),
            no_rtp: n(self.no_rtp),
            failures: codes,
            peak_concurrent: peak.map_or(0, |p| p.0),
            peak_minute_us: peak.map(|p| p.1),
        }
    }
}

/// How a call's RTP flowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Media {
    /// No stream carried a packet.
    None,
    /// Packets went one way only.
    OneWay,
    Both,
}

impl Media {
    /// From the streams' (source, destination, packets): one way when no stream with packets
    /// comes from an IP another stream with packets goes to.
    pub(crate) fn of<'a>(streams: impl IntoIterator<Item = (&'a str, &'a str, u64)>) -> Media {
        let flows: Vec<(Option<std::net::IpAddr>, Option<std::net::IpAddr>)> = streams
            .into_iter()
            .filter(|s| s.2 > 0)
            .map(|(src, dst, _)| (groups::ip_of_addr(src), groups::ip_of_addr(dst)))
            .collect();
        if flows.is_empty() {
            return Media::None;
        }
        let back = flows
            .iter()
            .any(|(src, _)| src.is_some() && flows.iter().any(|(_, dst)| dst == src));
        if back { Media::Both } else { Media::OneWay }
    }
}

/// What a call adds to its buckets, from its stored columns.
#[derive(Debug, Clone)]
pub(crate) struct CallFacts<'a> {
    pub caller: &'a str,
    pub called: &'a str,
    pub caller_addr: &'a str,
    pub callee_addr: &'a str,
    pub start_us: i64,
    pub ringing_us: Option<i64>,
    pub answer_us: Option<i64>,
    pub end_us: Option<i64>,
    pub state: &'a str,
    pub last_response: Option<u16>,
    pub mos_min: Option<f64>,
    pub loss_max_pct: Option<f64>,
    pub jitter_max_ms: Option<f64>,
    pub media: Media,
}

impl<'a> CallFacts<'a> {
    /// The facts of a call as the store writes it.
    pub(crate) fn of_record(c: &'a crate::CdrCall, streams: &'a [crate::CdrStream]) -> Self {
        let d = crate::search::derive(c, streams.iter().map(crate::search::StreamFigures::from));
        CallFacts {
            caller: &c.caller,
            called: &c.called,
            caller_addr: &c.caller_addr,
            callee_addr: &c.callee_addr,
            start_us: c.start_us,
            ringing_us: c.ringing_us,
            answer_us: c.answer_us,
            end_us: c.end_us,
            state: &c.state,
            last_response: c.last_response,
            mos_min: c.mos_min,
            loss_max_pct: d.loss_max_pct,
            jitter_max_ms: d.jitter_max_ms,
            media: Media::of(
                streams
                    .iter()
                    .map(|s| (s.src.as_str(), s.dst.as_str(), s.packets)),
            ),
        }
    }

    /// The call's own bucket (its INVITE's hour), without the minutes in progress.
    fn bucket(&self) -> HourBucket {
        let mut b = HourBucket {
            calls: 1,
            ..HourBucket::default()
        };
        let answered = self.answer_us.is_some();
        if answered {
            b.answered = 1;
            if let (Some(a), Some(e)) = (self.answer_us, self.end_us) {
                b.talk_calls = 1;
                b.talk_ms = (e - a) / 1000;
            }
            match self.media {
                Media::None => b.no_rtp = 1,
                Media::OneWay => b.one_way = 1,
                Media::Both => {}
            }
        } else {
            let rang = self.ringing_us.is_some();
            if crate::report::user_ended(self.state, self.last_response, rang) {
                b.user_ended = 1;
            }
            let code = self.last_response.filter(|c| *c >= 300).unwrap_or(0);
            b.codes.insert(code, 1);
        }
        if let Some(r) = self.ringing_us.filter(|r| *r >= self.start_us) {
            b.pdd
                .insert(PDD_MS.bin((r - self.start_us) as f64 / 1000.0), 1);
        }
        if let Some(m) = self.mos_min {
            b.mos_calls = 1;
            b.mos_below_36 = i64::from(m < 3.6);
            b.mos_below_31 = i64::from(m < 3.1);
        }
        if let Some(l) = self.loss_max_pct {
            b.loss.insert(LOSS_PCT.bin(l), 1);
        }
        if let Some(j) = self.jitter_max_ms {
            b.jitter.insert(JITTER_MS.bin(j), 1);
        }
        b
    }

    /// The minutes the call was in progress, first and last (see [`crate::report`]).
    pub(crate) fn minutes(&self) -> (i64, i64) {
        let first = self.start_us.div_euclid(MINUTE_US);
        let last = self
            .end_us
            .unwrap_or(self.start_us)
            .max(self.start_us)
            .div_euclid(MINUTE_US);
        (first, last.min(first + PEAK_CALL_MINUTES_MAX - 1))
    }
}

/// A batch's changes to the buckets, by (group, hour).
#[derive(Debug, Default)]
pub(crate) struct Rollup {
    pub(crate) buckets: HashMap<(String, i64), HourBucket>,
}

impl Rollup {
    /// Adds (`sign` 1) or takes away (-1) a call in each of its groups.
    pub(crate) fn call(&mut self, groups: &Groups, f: &CallFacts<'_>, sign: i64) {
        let keys = CallKeys {
            caller: f.caller,
            called: f.called,
            caller_ip: groups::ip_of_addr(f.caller_addr),
            callee_ip: groups::ip_of_addr(f.callee_addr),
        };
        let own = f.bucket();
        let hour = f.start_us.div_euclid(HOUR_US) * HOUR_US;
        let (first, last) = f.minutes();
        for name in groups.names_of_call(&keys) {
            self.bucket(name, hour).add(&own, sign);
            let mut m = first;
            while m <= last {
                let h = (m * MINUTE_US).div_euclid(HOUR_US) * HOUR_US;
                let b = self.bucket(name, h);
                let end = last.min((h + HOUR_US) / MINUTE_US - 1);
                for minute in m..=end {
                    let k = ((minute * MINUTE_US - h) / MINUTE_US) as u16;
                    let e = b.minutes.entry(k).or_insert(0);
                    *e += sign;
                    if *e == 0 {
                        b.minutes.remove(&k);
                    }
                }
                m = end + 1;
            }
        }
    }

    fn bucket(&mut self, group: &str, hour_us: i64) -> &mut HourBucket {
        self.buckets
            .entry((group.to_string(), hour_us))
            .or_default()
    }

    /// The changes in (group, hour) order, those that cancel out left out.
    pub(crate) fn sorted(self) -> Vec<((String, i64), HourBucket)> {
        let mut v: Vec<_> = self
            .buckets
            .into_iter()
            .filter(|(_, b)| !b.is_empty())
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// The columns a stored call's facts are read from (`id` first), for a call stored again.
pub(crate) const FACT_COLUMNS: &str = "id, caller, called, caller_addr, callee_addr, start_us, \
     ringing_us, answer_us, end_us, state, last_response, mos_min, loss_max_pct, jitter_max_ms";

/// A stored call's facts, owned (read back from `FACT_COLUMNS` and its streams).
#[derive(Debug, Clone)]
pub(crate) struct StoredFacts {
    pub id: i64,
    pub caller: String,
    pub called: String,
    pub caller_addr: String,
    pub callee_addr: String,
    pub start_us: i64,
    pub ringing_us: Option<i64>,
    pub answer_us: Option<i64>,
    pub end_us: Option<i64>,
    pub state: String,
    pub last_response: Option<u16>,
    pub mos_min: Option<f64>,
    pub loss_max_pct: Option<f64>,
    pub jitter_max_ms: Option<f64>,
    pub media: Media,
}

impl StoredFacts {
    pub(crate) fn facts(&self) -> CallFacts<'_> {
        CallFacts {
            caller: &self.caller,
            called: &self.called,
            caller_addr: &self.caller_addr,
            callee_addr: &self.callee_addr,
            start_us: self.start_us,
            ringing_us: self.ringing_us,
            answer_us: self.answer_us,
            end_us: self.end_us,
            state: &self.state,
            last_response: self.last_response,
            mos_min: self.mos_min,
            loss_max_pct: self.loss_max_pct,
            jitter_max_ms: self.jitter_max_ms,
            media: self.media,
        }
    }
}

/// SQLite: the stored facts of the call under `uid`, if any.
pub(crate) fn sqlite_stored(
    conn: &rusqlite::Connection,
    uid: &str,
) -> rusqlite::Result<Option<StoredFacts>> {
    use rusqlite::OptionalExtension;
    let mut st = conn.prepare_cached(&format!("SELECT {FACT_COLUMNS} FROM cdr WHERE uid = ?1"))?;
    let Some(mut f) = st
        .query_row([uid], |r| {
            Ok(StoredFacts {
                id: r.get(0)?,
                caller: r.get(1)?,
                called: r.get(2)?,
                caller_addr: r.get(3)?,
                callee_addr: r.get(4)?,
                start_us: r.get(5)?,
                ringing_us: r.get(6)?,
                answer_us: r.get(7)?,
                end_us: r.get(8)?,
                state: r.get(9)?,
                last_response: r.get(10)?,
                mos_min: r.get(11)?,
                loss_max_pct: r.get(12)?,
                jitter_max_ms: r.get(13)?,
                media: Media::None,
            })
        })
        .optional()?
    else {
        return Ok(None);
    };
    let mut st = conn.prepare_cached("SELECT src, dst, packets FROM cdr_rtp WHERE cdr_id = ?1")?;
    let streams: Vec<(String, String, i64)> = st
        .query_map([f.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    f.media = Media::of(
        streams
            .iter()
            .map(|(s, d, p)| (s.as_str(), d.as_str(), (*p).max(0) as u64)),
    );
    Ok(Some(f))
}

/// SQLite: applies a batch's changes in the caller's transaction.
pub(crate) fn sqlite_apply(conn: &rusqlite::Connection, rollup: Rollup) -> rusqlite::Result<()> {
    use rusqlite::OptionalExtension;
    if rollup.buckets.is_empty() {
        return Ok(());
    }
    let cols = COUNT_COLUMNS.join(", ");
    let mut read = conn.prepare_cached(&format!(
        "SELECT {cols}, sketches FROM report_hour WHERE group_name = ?1 AND hour_us = ?2"
    ))?;
    let mut write = conn.prepare_cached(&format!(
        "INSERT OR REPLACE INTO report_hour (group_name, hour_us, {cols}, sketches) \
         VALUES ({})",
        crate::placeholders(COUNT_COLUMNS.len() + 3, false)
    ))?;
    let mut delete =
        conn.prepare_cached("DELETE FROM report_hour WHERE group_name = ?1 AND hour_us = ?2")?;
    for ((group, hour), change) in rollup.sorted() {
        let stored = read
            .query_row(rusqlite::params![group, hour], |r| {
                let mut c = [0i64; 10];
                for (i, v) in c.iter_mut().enumerate() {
                    *v = r.get(i)?;
                }
                Ok((c, r.get::<_, Vec<u8>>(10)?))
            })
            .optional()?;
        let mut b = match stored {
            Some((c, s)) => HourBucket::from_counts(c, &s).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(10, rusqlite::types::Type::Blob, e.into())
            })?,
            None => HourBucket::default(),
        };
        b.add(&change, 1);
        if b.is_empty() {
            delete.execute(rusqlite::params![group, hour])?;
            continue;
        }
        let c = b.counts();
        let mut p: Vec<&dyn rusqlite::ToSql> = vec![&group, &hour];
        p.extend(c.iter().map(|v| v as &dyn rusqlite::ToSql));
        let sk = b.sketch_bytes();
        p.push(&sk);
        write.execute(&p[..])?;
    }
    Ok(())
}

/// SQLite: the hour buckets of `group` in `[from, to)`; none when the table is missing (a
/// file from before it, opened read-only).
pub(crate) fn sqlite_read(
    conn: &rusqlite::Connection,
    group: &str,
    from: i64,
    to: i64,
) -> rusqlite::Result<Vec<(i64, HourBucket)>> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'report_hour')",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut st = conn.prepare_cached(&format!(
        "SELECT hour_us, {}, sketches FROM report_hour \
         WHERE group_name = ?1 AND hour_us >= ?2 AND hour_us < ?3 ORDER BY hour_us",
        COUNT_COLUMNS.join(", ")
    ))?;
    let rows = st.query_map(rusqlite::params![group, from, to], |r| {
        let mut c = [0i64; 10];
        for (i, v) in c.iter_mut().enumerate() {
            *v = r.get(i + 1)?;
        }
        let s: Vec<u8> = r.get(11)?;
        let b = HourBucket::from_counts(c, &s).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(11, rusqlite::types::Type::Blob, e.into())
        })?;
        Ok((r.get(0)?, b))
    })?;
    rows.collect()
}

/// SQLite: counts every stored call into `groups`' rollups (and `all`'s), after deleting
/// those kept (`replace`). A scan of the calls in id order with their streams, the changes
/// written every [`REBUILD_CALLS_PER_WRITE`] calls; answers the calls counted.
pub(crate) fn sqlite_rebuild(
    conn: &rusqlite::Connection,
    groups: &Groups,
    replace: bool,
) -> rusqlite::Result<u64> {
    if replace {
        conn.execute("DELETE FROM report_hour", [])?;
    }
    let cols = FACT_COLUMNS
        .split(", ")
        .map(|c| format!("c.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let mut st = conn.prepare(&format!(
        "SELECT {cols}, r.src, r.dst, r.packets FROM cdr c \
         LEFT JOIN cdr_rtp r ON r.cdr_id = c.id ORDER BY c.id, r.id"
    ))?;
    let mut rows = st.query([])?;
    let mut changes = Rollup::default();
    let mut calls = 0u64;
    let mut current: Option<Scanned> = None;
    let mut finish = |cur: Option<Scanned>, changes: &mut Rollup| -> rusqlite::Result<()> {
        if let Some((mut f, streams)) = cur {
            f.media = Media::of(streams.iter().map(|(s, d, p)| (s.as_str(), d.as_str(), *p)));
            changes.call(groups, &f.facts(), 1);
            calls += 1;
            if calls.is_multiple_of(REBUILD_CALLS_PER_WRITE) {
                sqlite_apply(conn, std::mem::take(changes))?;
            }
        }
        Ok(())
    };
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        if current.as_ref().is_none_or(|(f, _)| f.id != id) {
            let f = StoredFacts {
                id,
                caller: r.get(1)?,
                called: r.get(2)?,
                caller_addr: r.get(3)?,
                callee_addr: r.get(4)?,
                start_us: r.get(5)?,
                ringing_us: r.get(6)?,
                answer_us: r.get(7)?,
                end_us: r.get(8)?,
                state: r.get(9)?,
                last_response: r.get(10)?,
                mos_min: r.get(11)?,
                loss_max_pct: r.get(12)?,
                jitter_max_ms: r.get(13)?,
                media: Media::None,
            };
            finish(current.replace((f, Vec::new())), &mut changes)?;
        }
        if let (Some(src), Some((_, streams))) = (r.get::<_, Option<String>>(14)?, current.as_mut())
        {
            let dst: String = r.get(15)?;
            let packets: i64 = r.get(16)?;
            streams.push((src, dst, packets.max(0) as u64));
        }
    }
    finish(current.take(), &mut changes)?;
    sqlite_apply(conn, changes)?;
    Ok(calls)
}

/// A call read by a rebuild, with its streams' (source, destination, packets).
type Scanned = (StoredFacts, Vec<(String, String, u64)>);

/// Calls counted between two writes of a rebuild's changes (bounds its memory).
pub(crate) const REBUILD_CALLS_PER_WRITE: u64 = 200_000;

/// SQLite: the groups with rollups, `all` first.
pub(crate) fn sqlite_groups(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'report_hour')",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut st = conn.prepare_cached(
        "SELECT DISTINCT group_name FROM report_hour ORDER BY group_name LIMIT ?1",
    )?;
    let mut names: Vec<String> = st
        .query_map([crate::report::REPORT_GROUPS_MAX as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    sort_groups(&mut names);
    Ok(names)
}

/// `all` first, then by name.
pub(crate) fn sort_groups(names: &mut [String]) {
    names.sort_by(|a, b| (a != groups::ALL, a).cmp(&(b != groups::ALL, b)));
}

/// PostgreSQL: the transaction-level advisory lock ("TNDMRPRT") that keeps the rollups exact
/// when writers race: a batch that may store calls again (the upsert) holds it exclusively
/// from before it reads their stored facts to its commit, and a batch of new calls (`COPY`)
/// holds it shared. So an upsert never reads the facts of a call while another transaction
/// that stores the same call is still open, and batches of new calls run side by side.
pub(crate) const PG_REPORT_LOCK_KEY: i64 = 0x544E_444D_5250_5254;

/// PostgreSQL: the stored facts of the calls under `keys` (uid as stored, start), by uid.
pub(crate) fn pg_stored(
    tx: &mut postgres::Transaction<'_>,
    partitioned: bool,
    uids: &[String],
    starts: &[i64],
) -> Result<HashMap<String, StoredFacts>, postgres::Error> {
    let mut out = HashMap::new();
    if uids.is_empty() {
        return Ok(out);
    }
    let rows = tx.query(
        &format!(
            "SELECT {FACT_COLUMNS}, uid FROM cdr \
             WHERE (uid, start_us) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))"
        ),
        &[&uids, &starts],
    )?;
    let mut ids: Vec<i64> = Vec::new();
    let mut id_starts: Vec<i64> = Vec::new();
    let mut by_id: HashMap<i64, String> = HashMap::new();
    for r in rows {
        let f = StoredFacts {
            id: r.get(0),
            caller: r.get(1),
            called: r.get(2),
            caller_addr: r.get(3),
            callee_addr: r.get(4),
            start_us: r.get(5),
            ringing_us: r.get(6),
            answer_us: r.get(7),
            end_us: r.get(8),
            state: r.get(9),
            last_response: r.get::<_, Option<i32>>(10).map(|v| v as u16),
            mos_min: r.get(11),
            loss_max_pct: r.get(12),
            jitter_max_ms: r.get(13),
            media: Media::None,
        };
        let uid: String = r.get(14);
        ids.push(f.id);
        id_starts.push(f.start_us);
        by_id.insert(f.id, uid.clone());
        out.insert(uid, f);
    }
    if ids.is_empty() {
        return Ok(out);
    }
    let sql = if partitioned {
        "SELECT cdr_id, src, dst, packets FROM cdr_rtp WHERE (cdr_id, call_start_us) IN \
         (SELECT * FROM unnest($1::bigint[], $2::bigint[]))"
    } else {
        "SELECT cdr_id, src, dst, packets FROM cdr_rtp WHERE cdr_id = ANY($1) \
         AND $2::bigint[] IS NOT NULL"
    };
    let mut streams: HashMap<i64, Vec<(String, String, u64)>> = HashMap::new();
    for r in tx.query(sql, &[&ids, &id_starts])? {
        let packets: i64 = r.get(3);
        streams
            .entry(r.get(0))
            .or_default()
            .push((r.get(1), r.get(2), packets.max(0) as u64));
    }
    for (id, uid) in by_id {
        if let (Some(f), Some(s)) = (out.get_mut(&uid), streams.get(&id)) {
            f.media = Media::of(s.iter().map(|(a, b, p)| (a.as_str(), b.as_str(), *p)));
        }
    }
    Ok(out)
}

/// PostgreSQL: applies a batch's changes in the caller's transaction: the rows made if
/// missing, locked in (group, hour) order (so writers of the same hours wait for each other
/// and never deadlock), read, changed and written back, three statements in all.
pub(crate) fn pg_apply(
    tx: &mut postgres::Transaction<'_>,
    rollup: Rollup,
) -> Result<(), postgres::Error> {
    let changes = rollup.sorted();
    if changes.is_empty() {
        return Ok(());
    }
    let groups: Vec<&str> = changes.iter().map(|((g, _), _)| g.as_str()).collect();
    let hours: Vec<i64> = changes.iter().map(|((_, h), _)| *h).collect();
    let cols = COUNT_COLUMNS.join(", ");
    let zeros = vec!["0"; COUNT_COLUMNS.len()].join(", ");
    let empty = HourBucket::default().sketch_bytes();
    tx.execute(
        &format!(
            "INSERT INTO report_hour (group_name, hour_us, {cols}, sketches) \
             SELECT g, h, {zeros}, $3 FROM unnest($1::text[], $2::bigint[]) AS k(g, h) \
             ORDER BY g, h ON CONFLICT (group_name, hour_us) DO NOTHING"
        ),
        &[&groups, &hours, &empty],
    )?;
    let rows = tx.query(
        &format!(
            "SELECT group_name, hour_us, {cols}, sketches FROM report_hour \
             WHERE (group_name, hour_us) IN (SELECT * FROM unnest($1::text[], $2::bigint[])) \
             ORDER BY group_name, hour_us FOR UPDATE"
        ),
        &[&groups, &hours],
    )?;
    let mut stored: HashMap<(String, i64), HourBucket> = HashMap::new();
    for r in rows {
        let mut c = [0i64; 10];
        for (i, v) in c.iter_mut().enumerate() {
            *v = r.get(i + 2);
        }
        let s: Vec<u8> = r.get(12);
        // A row this release cannot read is counted afresh rather than failing every batch.
        let b = HourBucket::from_counts(c, &s).unwrap_or_else(|e| {
            tracing::warn!(problem = %e, "report_hour row unreadable, counted afresh");
            HourBucket::default()
        });
        stored.insert((r.get(0), r.get(1)), b);
    }
    let mut columns: Vec<Vec<i64>> = vec![Vec::with_capacity(changes.len()); COUNT_COLUMNS.len()];
    let mut sketches: Vec<Vec<u8>> = Vec::with_capacity(changes.len());
    for (key, change) in &changes {
        let mut b = stored.remove(key).unwrap_or_default();
        b.add(change, 1);
        for (col, v) in columns.iter_mut().zip(b.counts()) {
            col.push(v);
        }
        sketches.push(b.sketch_bytes());
    }
    let sets = COUNT_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = v.c{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let unnest = (0..COUNT_COLUMNS.len())
        .map(|i| format!("${}::bigint[]", i + 3))
        .collect::<Vec<_>>()
        .join(", ");
    let names = (0..COUNT_COLUMNS.len())
        .map(|i| format!("c{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sk = COUNT_COLUMNS.len() + 3;
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&groups, &hours];
    for c in &columns {
        params.push(c);
    }
    params.push(&sketches);
    tx.execute(
        &format!(
            "UPDATE report_hour r SET {sets}, sketches = v.sk \
             FROM unnest($1::text[], $2::bigint[], {unnest}, ${sk}::bytea[]) \
             AS v(g, h, {names}, sk) WHERE r.group_name = v.g AND r.hour_us = v.h"
        ),
        &params,
    )?;
    Ok(())
}

/// PostgreSQL: the hour buckets of `group` in `[from, to)`.
pub(crate) fn pg_read(
    client: &mut postgres::Client,
    group: &str,
    from: i64,
    to: i64,
) -> Result<Vec<(i64, HourBucket)>, postgres::Error> {
    let rows = client.query(
        &format!(
            "SELECT hour_us, {}, sketches FROM report_hour \
             WHERE group_name = $1 AND hour_us >= $2 AND hour_us < $3 ORDER BY hour_us",
            COUNT_COLUMNS.join(", ")
        ),
        &[&group, &from, &to],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut c = [0i64; 10];
        for (i, v) in c.iter_mut().enumerate() {
            *v = r.get(i + 1);
        }
        let s: Vec<u8> = r.get(11);
        match HourBucket::from_counts(c, &s) {
            Ok(b) => out.push((r.get(0), b)),
            Err(e) => tracing::warn!(problem = %e, group, "report_hour row unreadable, left out"),
        }
    }
    Ok(out)
}

/// PostgreSQL: the groups with rollups, `all` first.
pub(crate) fn pg_groups(client: &mut postgres::Client) -> Result<Vec<String>, postgres::Error> {
    let rows = client.query(
        "SELECT DISTINCT group_name FROM report_hour ORDER BY group_name LIMIT $1",
        &[&(crate::report::REPORT_GROUPS_MAX as i64)],
    )?;
    let mut names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    sort_groups(&mut names);
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bin_stands_within_two_percent_of_its_values() {
        for scale in [PDD_MS, LOSS_PCT, JITTER_MS] {
            let mut v = scale.low;
            while v < 1e5 {
                let got = scale.value(scale.bin(v));
                assert!(((got - v) / v).abs() <= 0.02, "{v} read as {got}");
                v *= 1.013;
            }
            assert_eq!(scale.value(scale.bin(0.0)), 0.0);
        }
    }

    #[test]
    fn buckets_read_back_as_written_and_take_away_exactly() {
        let mut b = HourBucket {
            calls: 3,
            answered: 2,
            talk_ms: 123_456,
            ..HourBucket::default()
        };
        b.pdd.insert(17, 2);
        b.codes.insert(486, 1);
        b.minutes.insert(59, 3);
        let back = HourBucket::from_counts(b.counts(), &b.sketch_bytes()).unwrap();
        assert_eq!(back, b);
        let mut sum = b.clone();
        sum.add(&b, 1);
        sum.add(&b, -1);
        assert_eq!(sum, b);
        sum.add(&b, -1);
        assert!(sum.is_empty());
        assert!(HourBucket::from_counts(b.counts(), &[2]).is_err());
        assert!(HourBucket::from_counts(b.counts(), &[1, 5, 0]).is_err());
    }

    #[test]
    fn one_way_and_silent_calls() {
        let a = "192.0.2.1:4000";
        let b = "198.51.100.2:5000";
        assert_eq!(Media::of([(a, b, 10), (b, a, 10)]), Media::Both);
        assert_eq!(Media::of([(a, b, 10), (b, a, 0)]), Media::OneWay);
        assert_eq!(Media::of([(a, b, 0)]), Media::None);
        assert_eq!(Media::of([]), Media::None);
        // The other side answering from another port is still both ways.
        assert_eq!(
            Media::of([(a, b, 10), ("198.51.100.2:5002", "192.0.2.1:4002", 3)]),
            Media::Both
        );
    }
}
