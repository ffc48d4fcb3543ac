//! A [`CallQuery`]'s filter applied to one record in memory, as the search's SQL applies it to
//! stored rows: the alert rules' scopes are Calls-page queries, decided on each call as it
//! ends, before (or without) any database.

use crate::query::{NumberFilter, NumberPattern, ip_bytes};
use crate::search::{CallQuery, ResponseMatch, derive};
use crate::{CdrCall, CdrRecord};

impl NumberFilter {
    /// Whether `number` passes the filter (`12*` starts with, `*89` ends with, a list any of,
    /// `!` none of).
    pub fn matches(&self, number: &str) -> bool {
        let any = self.items.iter().any(|p| match p {
            NumberPattern::Exact(x) => number == x,
            NumberPattern::Prefix(x) => number.starts_with(x.as_str()),
            NumberPattern::Suffix(x) => number.ends_with(x.as_str()),
            NumberPattern::Contains(x) => number.contains(x.as_str()),
        });
        any != self.negate
    }
}

impl CallQuery {
    /// Whether the call of `record` passes every filter of the query, its time range included
    /// (the cursor and the limit are a page's, not a filter's). A record without a call
    /// passes nothing.
    pub fn matches(&self, record: &CdrRecord) -> bool {
        let Some(c) = &record.call else {
            return false;
        };
        if !self.matches_start(c) {
            return false;
        }
        if !self.needs_end() {
            return true;
        }
        if !self.response.is_empty()
            && !c.last_response.is_some_and(|code| {
                self.response.iter().any(|r| match *r {
                    ResponseMatch::Code(x) => x == code,
                    ResponseMatch::Class(k) => code / 100 == u16::from(k),
                })
            })
        {
            return false;
        }
        if let Some(min) = self.min_duration_s
            && c.end_us
                .map(|e| (e - c.start_us) / 1000)
                .is_none_or(|ms| ms < (min * 1000.0).ceil() as i64)
        {
            return false;
        }
        if let Some(v) = self.mos_below
            && !c.mos_min.is_some_and(|m| m < v)
        {
            return false;
        }
        // The worst stream's figures and the codecs, as the search columns hold them.
        if self.loss_above_pct.is_some() || self.jitter_above_ms.is_some() || self.codec.is_some() {
            let d = derive(c, record.streams.iter().map(Into::into));
            if let Some(v) = self.loss_above_pct
                && !d.loss_max_pct.is_some_and(|l| l > v)
            {
                return false;
            }
            if let Some(v) = self.jitter_above_ms
                && !d.jitter_max_ms.is_some_and(|j| j > v)
            {
                return false;
            }
            if let Some(codec) = &self.codec {
                let names = crate::search::codec_names(codec);
                let have = d.codecs.unwrap_or_default().to_ascii_lowercase();
                if !have.split(',').any(|h| names.iter().any(|n| n == h)) {
                    return false;
                }
            }
        }
        if let Some(h) = self.hangup_by
            && c.hangup_by.as_deref() != Some(h.as_str())
        {
            return false;
        }
        if let Some(fax) = self.fax {
            let is_fax = c.fax_result.is_some() || !record.t38.is_empty();
            if is_fax != fax {
                return false;
            }
        }
        true
    }

    /// The filters a call passes or fails from its INVITE alone: time, numbers, Call-ID,
    /// addresses and sensor. [`CallQuery::needs_end`] says whether any other is set.
    pub fn matches_start(&self, c: &CdrCall) -> bool {
        if self.from_us.is_some_and(|f| c.start_us < f)
            || self.to_us.is_some_and(|t| c.start_us >= t)
        {
            return false;
        }
        if let Some(f) = &self.caller
            && !f.matches(&c.caller)
        {
            return false;
        }
        if let Some(f) = &self.called
            && !f.matches(&c.called)
        {
            return false;
        }
        if let Some(id) = &self.call_id
            && *id != c.call_id
        {
            return false;
        }
        if let Some(net) = &self.ip {
            let (lo, hi) = net.range();
            let inside = |a: &str| ip_bytes(a).is_some_and(|b| b >= lo && b <= hi);
            if !inside(&c.caller_addr) && !inside(&c.callee_addr) {
                return false;
            }
        }
        if let Some(s) = &self.sensor
            && crate::search::sensor_or_default(&c.sensor) != s
        {
            return false;
        }
        if let Some(g) = &self.group {
            let inside = |a: &str| {
                ip_bytes(a).is_some_and(|b| {
                    g.networks.iter().any(|n| {
                        let (lo, hi) = n.range();
                        b >= lo && b <= hi
                    })
                })
            };
            let numbered = |n: &str| g.prefixes.iter().any(|p| n.starts_with(p.as_str()));
            if !inside(&c.caller_addr)
                && !inside(&c.callee_addr)
                && !numbered(&c.caller)
                && !numbered(&c.called)
            {
                return false;
            }
        }
        true
    }

    /// The query filters on something only a call's end tells: its response, duration,
    /// quality, codecs, who hung up, or a fax.
    pub fn needs_end(&self) -> bool {
        !self.response.is_empty()
            || self.min_duration_s.is_some()
            || self.mos_below.is_some()
            || self.loss_above_pct.is_some()
            || self.jitter_above_ms.is_some()
            || self.codec.is_some()
            || self.hangup_by.is_some()
            || self.fax.is_some()
    }
}
