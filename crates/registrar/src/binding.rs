//! Bindings of an address of record and the update a REGISTER makes to them (RFC 3261 10.3
//! steps 6-8, Outbound flows, `max_contacts`), as a pure function: the caller commits the result
//! or nothing, so an update is all or nothing.

use crate::request::{ContactParam, Contacts, Refusal, Register};

/// One contact bound to an address of record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The contact URI as the UA sent it.
    pub uri: String,
    /// q-value in thousandths; `None` when the UA gave none (ordered as 1.0).
    pub q_milli: Option<u16>,
    /// When the binding lapses, in milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
    pub call_id: String,
    pub cseq: u32,
    /// Path values (RFC 3327) in the order received.
    pub path: Vec<String>,
    /// RFC 5626 flow: `+sip.instance` and `reg-id`.
    pub instance: Option<String>,
    pub reg_id: Option<u32>,
    /// Where the REGISTER came from: `udp:192.0.2.1:5060`, `tcp:...`, `tls:...`.
    pub source: String,
    pub user_agent: String,
    /// When this binding was last written, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
}

/// The expiry limits and the contact limit of the registrar's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub min_expires_s: u32,
    pub max_expires_s: u32,
    pub default_expires_s: u32,
    pub max_contacts: usize,
}

/// What an update decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Nothing to write (a query, a retransmission, or a removal of what was not bound).
    Unchanged,
    /// The new binding set to commit before answering.
    Changed(Vec<Binding>),
}

impl Binding {
    /// Seconds left at `now_ms`, rounded up so a live binding never shows 0.
    pub fn remaining_s(&self, now_ms: u64) -> u64 {
        self.expires_at_ms.saturating_sub(now_ms).div_ceil(1000)
    }

    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms > now_ms
    }

    fn is_flow(&self, c: &ContactParam<'_>) -> bool {
        matches!((&self.instance, self.reg_id, c.instance, c.reg_id),
            (Some(i), Some(r), Some(ci), Some(cr)) if i == ci && r == cr)
    }
}

/// RFC 3261 19.1.4, reduced to what tells two contacts of one UA apart: scheme, user and
/// `transport` exactly, host case-insensitively, a missing port equal to 5060 (5061 for sips).
/// Other URI parameters do not make a second binding.
pub fn same_contact(a: &str, b: &str) -> bool {
    fn key(uri: &str) -> Option<(String, String, String, u16, String)> {
        let (scheme, rest) = uri.split_once(':')?;
        let scheme = scheme.to_ascii_lowercase();
        let (main, params) = match rest.find(';') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let main = &main[..main.find('?').unwrap_or(main.len())];
        let (user, hostport) = match main.rfind('@') {
            Some(i) => (&main[..i], &main[i + 1..]),
            None => ("", main),
        };
        let (host, port) = match hostport.rfind(':') {
            Some(i) if !hostport[i..].contains(']') => {
                (&hostport[..i], hostport[i + 1..].parse().ok()?)
            }
            _ => (hostport, if scheme == "sips" { 5061 } else { 5060 }),
        };
        let transport = crate::request::params(params)
            .find(|(k, _)| k.eq_ignore_ascii_case("transport"))
            .and_then(|(_, v)| v)
            .unwrap_or("")
            .to_ascii_lowercase();
        Some((
            scheme,
            user.to_string(),
            host.to_ascii_lowercase(),
            port,
            transport,
        ))
    }
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Orders bindings as Asterisk should try them: higher q first, a missing q as 1.0, then the
/// most recently registered first.
pub fn sort_by_q(bindings: &mut [Binding]) {
    bindings.sort_by(|a, b| {
        b.q_milli
            .unwrap_or(1000)
            .cmp(&a.q_milli.unwrap_or(1000))
            .then(b.updated_at_ms.cmp(&a.updated_at_ms))
    });
}

/// The expiry a contact asks for: its `expires` parameter, else the Expires header, else the
/// default; held below `max`. `Err(min)` when it is above zero and below `min` (423).
pub fn requested_expires(c: &ContactParam<'_>, req: &Register<'_>, p: &Policy) -> Result<u32, u32> {
    let asked = c
        .expires_s
        .or(req.expires_header_s)
        .unwrap_or(p.default_expires_s);
    if asked == 0 {
        return Ok(0);
    }
    if asked < p.min_expires_s {
        return Err(p.min_expires_s);
    }
    Ok(asked.min(p.max_expires_s))
}

/// Why the update failed, as the response to send.
pub fn cseq_refusal() -> Refusal {
    Refusal::new(400, "Invalid CSeq number")
}

/// Applies a REGISTER to the current (live) bindings of its AOR. `Err` is the response to send
/// instead of 200; nothing has been changed then.
pub fn apply(
    current: &[Binding],
    req: &Register<'_>,
    source: &str,
    now_ms: u64,
    policy: &Policy,
) -> Result<Update, Refusal> {
    let list = match &req.contacts {
        Contacts::Query => return Ok(Update::Unchanged),
        Contacts::Wildcard => {
            // Step 6: a binding of this Call-ID with a CSeq not lower aborts the removal.
            for b in current {
                if b.call_id == req.call_id && b.cseq > req.cseq {
                    return Err(cseq_refusal());
                }
            }
            if current.is_empty() {
                return Ok(Update::Unchanged);
            }
            return Ok(Update::Changed(Vec::new()));
        }
        Contacts::List(list) => list,
    };
    // Every contact's expiry is checked before anything changes (one 423 for the request).
    let mut expires = Vec::with_capacity(list.len());
    for c in list {
        match requested_expires(c, req, policy) {
            Ok(e) => expires.push(e),
            Err(min) => {
                return Err(Refusal::new(423, "Interval Too Brief")
                    .with_header(format!("Min-Expires: {min}")));
            }
        }
    }
    let mut next: Vec<Binding> = current.to_vec();
    let mut changed = false;
    for (c, &exp_s) in list.iter().zip(&expires) {
        let found = next.iter().position(|b| {
            if c.instance.is_some() && c.reg_id.is_some() {
                b.is_flow(c)
            } else {
                b.instance.is_none() && same_contact(&b.uri, c.uri)
            }
        });
        if let Some(i) = found {
            let b = &next[i];
            if b.call_id == req.call_id {
                if b.cseq > req.cseq {
                    return Err(cseq_refusal());
                }
                if b.cseq == req.cseq {
                    // The same request again (a retransmission whose transaction is gone):
                    // it was applied already, so it changes nothing now.
                    continue;
                }
            }
            changed = true;
            if exp_s == 0 {
                next.remove(i);
                continue;
            }
            next[i] = new_binding(c, exp_s, req, source, now_ms);
        } else if exp_s > 0 {
            changed = true;
            next.push(new_binding(c, exp_s, req, source, now_ms));
        }
    }
    if !changed {
        return Ok(Update::Unchanged);
    }
    if next.len() > policy.max_contacts {
        return Err(Refusal::new(503, "Too Many Registered Contacts"));
    }
    sort_by_q(&mut next);
    Ok(Update::Changed(next))
}

fn new_binding(
    c: &ContactParam<'_>,
    exp_s: u32,
    req: &Register<'_>,
    source: &str,
    now_ms: u64,
) -> Binding {
    Binding {
        uri: c.uri.to_string(),
        q_milli: c.q_milli,
        expires_at_ms: now_ms + exp_s as u64 * 1000,
        call_id: req.call_id.to_string(),
        cseq: req.cseq,
        path: req.path.iter().map(|p| p.to_string()).collect(),
        instance: c.instance.map(str::to_string),
        reg_id: c.reg_id,
        source: source.to_string(),
        user_agent: req.user_agent.unwrap_or("").to_string(),
        updated_at_ms: now_ms,
    }
}

// The stored form: one line per binding, fields separated by tabs, each field escaped so that
// it holds no tab, line end or '%'. A version tag leads so that the format can change.
const FORMAT: &str = "b1";

fn escape(s: &str, out: &mut String) {
    for ch in s.chars() {
        match ch {
            '%' => out.push_str("%25"),
            '\t' => out.push_str("%09"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            c => out.push(c),
        }
    }
}

fn unescape(s: &str) -> String {
    if !s.contains('%') {
        return s.to_string();
    }
    s.replace("%09", "\t")
        .replace("%0A", "\n")
        .replace("%0D", "\r")
        .replace("%25", "%")
}

/// The stored value of a binding set.
pub fn encode(bindings: &[Binding]) -> String {
    let mut out = String::with_capacity(bindings.len() * 160);
    for b in bindings {
        out.push_str(FORMAT);
        out.push('\t');
        out.push_str(&b.expires_at_ms.to_string());
        out.push('\t');
        out.push_str(&b.updated_at_ms.to_string());
        out.push('\t');
        if let Some(q) = b.q_milli {
            out.push_str(&q.to_string());
        }
        out.push('\t');
        out.push_str(&b.cseq.to_string());
        out.push('\t');
        if let Some(r) = b.reg_id {
            out.push_str(&r.to_string());
        }
        for field in [&b.call_id, &b.uri, &b.source, &b.user_agent] {
            out.push('\t');
            escape(field, &mut out);
        }
        out.push('\t');
        escape(b.instance.as_deref().unwrap_or(""), &mut out);
        for p in &b.path {
            out.push('\t');
            escape(p, &mut out);
        }
        out.push('\n');
    }
    out
}

/// Reads a stored binding set; lines it cannot read are skipped and counted in the error count.
pub fn decode(text: &str) -> (Vec<Binding>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.is_empty()) {
        match decode_line(line) {
            Some(b) => out.push(b),
            None => bad += 1,
        }
    }
    (out, bad)
}

fn decode_line(line: &str) -> Option<Binding> {
    let mut f = line.split('\t');
    if f.next()? != FORMAT {
        return None;
    }
    let expires_at_ms = f.next()?.parse().ok()?;
    let updated_at_ms = f.next()?.parse().ok()?;
    let q = f.next()?;
    let q_milli = if q.is_empty() {
        None
    } else {
        Some(q.parse().ok()?)
    };
    let cseq = f.next()?.parse().ok()?;
    let r = f.next()?;
    let reg_id = if r.is_empty() {
        None
    } else {
        Some(r.parse().ok()?)
    };
    let call_id = unescape(f.next()?);
    let uri = unescape(f.next()?);
    let source = unescape(f.next()?);
    let user_agent = unescape(f.next()?);
    let instance = Some(unescape(f.next()?)).filter(|s| !s.is_empty());
    let path = f.map(unescape).collect();
    Some(Binding {
        uri,
        q_milli,
        expires_at_ms,
        call_id,
        cseq,
        path,
        instance,
        reg_id,
        source,
        user_agent,
        updated_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sip::Message;

    const POLICY: Policy = Policy {
        min_expires_s: 60,
        max_expires_s: 3600,
        default_expires_s: 600,
        max_contacts: 3,
    };

    fn run(current: &[Binding], headers: &str, now_ms: u64) -> Result<Update, Refusal> {
        let text = format!(
            "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bKx\r\n\
             To: <sip:1001@example.com>\r\nFrom: <sip:1001@example.com>;tag=1\r\n{headers}\r\n"
        );
        let msg = Message::parse(text.as_bytes()).unwrap();
        let req = crate::request::register(&msg)?;
        apply(current, &req, "udp:192.0.2.1:5060", now_ms, &POLICY)
    }

    fn changed(u: Update) -> Vec<Binding> {
        match u {
            Update::Changed(b) => b,
            Update::Unchanged => panic!("expected a change"),
        }
    }

    #[test]
    fn expiry_comes_from_param_then_header_then_default_within_limits() {
        let b = changed(
            run(
                &[],
                "Call-ID: a\r\nCSeq: 1 REGISTER\r\nExpires: 120\r\n\
                 Contact: <sip:a@h1>;expires=90, <sip:a@h2>, <sip:a@h3>;expires=99999\r\n",
                0,
            )
            .unwrap(),
        );
        let mut secs: Vec<u64> = b.iter().map(|b| b.remaining_s(0)).collect();
        secs.sort();
        assert_eq!(secs, [90, 120, 3600]);
        let b = changed(
            run(
                &[],
                "Call-ID: a\r\nCSeq: 1 REGISTER\r\nContact: <sip:a@h1>\r\n",
                0,
            )
            .unwrap(),
        );
        assert_eq!(b[0].remaining_s(0), 600);
        let e = run(
            &[],
            "Call-ID: a\r\nCSeq: 1 REGISTER\r\nContact: <sip:a@h1>;expires=30\r\n",
            0,
        );
        let e = e.unwrap_err();
        assert_eq!(
            (e.status, e.header.as_deref()),
            (423, Some("Min-Expires: 60"))
        );
    }

    #[test]
    fn refresh_needs_a_higher_cseq_on_the_same_call_id() {
        let first = changed(
            run(
                &[],
                "Call-ID: a\r\nCSeq: 5 REGISTER\r\nContact: <sip:a@h1>\r\n",
                0,
            )
            .unwrap(),
        );
        let older = run(
            &first,
            "Call-ID: a\r\nCSeq: 4 REGISTER\r\nContact: <sip:a@h1>\r\n",
            1000,
        );
        assert_eq!(older.unwrap_err().status, 400);
        let again = run(
            &first,
            "Call-ID: a\r\nCSeq: 5 REGISTER\r\nContact: <sip:a@h1>\r\n",
            1000,
        );
        assert_eq!(again.unwrap(), Update::Unchanged);
        // Another Call-ID (a UA that rebooted) may take the contact over whatever its CSeq.
        let other = changed(
            run(
                &first,
                "Call-ID: b\r\nCSeq: 1 REGISTER\r\nContact: <sip:a@H1:5060>\r\n",
                1000,
            )
            .unwrap(),
        );
        assert_eq!((other.len(), other[0].call_id.as_str()), (1, "b"));
    }

    #[test]
    fn outbound_flow_replaces_its_previous_binding() {
        let first = changed(
            run(&[], "Call-ID: a\r\nCSeq: 1 REGISTER\r\nContact: <sip:a@10.0.0.1:5060>;+sip.instance=\"<urn:uuid:u1>\";reg-id=1\r\n", 0)
                .unwrap(),
        );
        let moved = changed(
            run(&first, "Call-ID: a\r\nCSeq: 2 REGISTER\r\nContact: <sip:a@10.0.0.9:5070>;+sip.instance=\"<urn:uuid:u1>\";reg-id=1\r\n", 10)
                .unwrap(),
        );
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].uri, "sip:a@10.0.0.9:5070");
        let second_flow = changed(
            run(&moved, "Call-ID: a\r\nCSeq: 3 REGISTER\r\nContact: <sip:a@10.0.0.9:5070>;+sip.instance=\"<urn:uuid:u1>\";reg-id=2\r\n", 20)
                .unwrap(),
        );
        assert_eq!(second_flow.len(), 2);
    }

    #[test]
    fn max_contacts_q_order_and_wildcard() {
        let b = changed(
            run(&[], "Call-ID: a\r\nCSeq: 1 REGISTER\r\nContact: <sip:a@h1>;q=0.1, <sip:a@h2>, <sip:a@h3>;q=0.5\r\n", 0)
                .unwrap(),
        );
        let uris: Vec<&str> = b.iter().map(|b| b.uri.as_str()).collect();
        assert_eq!(uris, ["sip:a@h2", "sip:a@h3", "sip:a@h1"]);
        let full = run(
            &b,
            "Call-ID: a\r\nCSeq: 2 REGISTER\r\nContact: <sip:a@h4>\r\n",
            0,
        );
        assert_eq!(full.unwrap_err().status, 503);
        let gone = run(
            &b,
            "Call-ID: z\r\nCSeq: 1 REGISTER\r\nContact: *\r\nExpires: 0\r\n",
            0,
        )
        .unwrap();
        assert_eq!(gone, Update::Changed(vec![]));
    }

    #[test]
    fn stored_form_reads_back() {
        let mut b = changed(
            run(&[], "Call-ID: a\tb%\r\nCSeq: 1 REGISTER\r\nPath: <sip:p1;lr>, <sip:p2;lr>\r\n\
                 User-Agent: phone 1.0\r\nContact: <sip:a@h1>;q=0.7;+sip.instance=\"<urn:x>\";reg-id=3\r\n", 5)
            .unwrap(),
        );
        b[0].call_id = "a\tb%\n".into();
        let (back, bad) = decode(&encode(&b));
        assert_eq!((back, bad), (b, 0));
        assert_eq!(decode("b1\tx\n").1, 1);
    }
}
