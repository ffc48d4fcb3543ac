//! The decision itself: what dialparties.agi would set, write and dial for one call, given
//! what it would read. No IO: every read goes through [`Facts`], so the route can run the
//! decision over values it fetched in a few round trips, and tests and the fuzz target can
//! run it over values they made up.
//!
//! The order of reads and writes follows the script (FreePBX/core `agi-bin/dialparties.agi`,
//! releases 16.0 and 17.0), and so do its PHP quirks: a PHP array's keys (`unset` leaves
//! holes that the script's positional counters then miss), loose `==`, and the PHP 7/8 rules
//! for strings met as numbers. Where the script has a known bug, the bug is the default and
//! the [`Fix`] that changes it is named beside it.

use super::php::{self, Php, Val};
use std::cmp::Ordering;

/// FreePBX release whose script is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// FreePBX 15 and 16 (same script), PHP 7.4: `M(auto-blkvm)`.
    V16,
    /// FreePBX 17, PHP 8.2: `U(macro-auto-blkvm)`, and `__DIALPARTIES=1`.
    V17,
}

impl Version {
    pub fn php(self) -> Php {
        match self {
            Version::V16 => Php::V7,
            Version::V17 => Php::V8,
        }
    }
}

/// The script's known bugs, each fixed only when named in `dialparties.fix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fix {
    /// `hunt-keeps-forwarded`: hunt-type strategies (hunt, memoryhunt, random, firstavailable,
    /// firstnotonphone) set `HuntMemberN` only for members of the last `ARGn` that were not
    /// forwarded, while `FILTERED_DIAL` lists the forwarded ones too, so a forwarded member is
    /// never rung. Fixed: every member that got a dial string is a hunt member, in call order.
    HuntKeepsForwarded,
    /// `dense-index`: after CFIGNORE drops a forwarded member, the DND pass and the ringallv2
    /// clean-up count positions but remove by key, so they miss (a DND member stays and is
    /// rung) or remove a neighbour. Fixed: they remove the member they looked at.
    DenseIndex,
    /// `skip-deviceless`: a member without a device still lands in `FILTERED_DIAL` and gets a
    /// CALLTRACE key, though nothing rings it. Fixed: only members with a dial string do.
    SkipDeviceless,
    /// `t-outside-arguments`: `DIRECTION=INBOUND` and `FROMQ=true` remove every `T` from the
    /// dial options, inside option arguments too (`U(sub^Test)` becomes `U(sub^est)`); the
    /// script protects only the first `m(...)`. Fixed: only the `T` option itself is removed.
    TOutsideArguments,
    /// `exact-values`: the script reads values through phpagi, which splits replies on spaces:
    /// leading and trailing spaces go, `x (y) z` reads `x y z`. Fixed: values are read exactly.
    ExactValues,
    /// `followme-empty-grptime`: on PHP 8 (FreePBX 17) a ringallv2 follow-me whose `grptime`
    /// is empty or not a number stops the script with a TypeError before it sets `ds`. Fixed:
    /// it counts as 0, as PHP 7 did.
    FollowmeEmptyGrptime,
}

impl Fix {
    pub const ALL: [Fix; 6] = [
        Fix::HuntKeepsForwarded,
        Fix::DenseIndex,
        Fix::SkipDeviceless,
        Fix::TOutsideArguments,
        Fix::ExactValues,
        Fix::FollowmeEmptyGrptime,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fix::HuntKeepsForwarded => "hunt-keeps-forwarded",
            Fix::DenseIndex => "dense-index",
            Fix::SkipDeviceless => "skip-deviceless",
            Fix::TOutsideArguments => "t-outside-arguments",
            Fix::ExactValues => "exact-values",
            Fix::FollowmeEmptyGrptime => "followme-empty-grptime",
        }
    }

    pub fn parse(name: &str) -> Option<Fix> {
        Fix::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// How the decision is made: the release followed and the bugs fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub version: Version,
    pub fixes: Vec<Fix>,
    /// Keep the notes the script would have sent as VERBOSE ([`Decision::log`]).
    pub notes: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            version: Version::V17,
            fixes: Vec::new(),
            notes: false,
        }
    }
}

impl Rules {
    /// The rules from settings as an operator writes them: a FreePBX release (15, 16 or 17) and
    /// fix names. The error names what is wrong and what would be right.
    pub fn from_settings(release: u32, fixes: &[String]) -> Result<Rules, String> {
        let version = match release {
            15 | 16 => Version::V16,
            17 => Version::V17,
            v => {
                return Err(format!(
                    "dialparties.version = {v}: use 16 (FreePBX 15 and 16) or 17"
                ));
            }
        };
        let fixes = fixes
            .iter()
            .map(|name| {
                Fix::parse(name).ok_or_else(|| {
                    let known: Vec<&str> = Fix::ALL.iter().map(|f| f.name()).collect();
                    format!(
                        "dialparties.fix: no fix named {name:?}; known: {}",
                        known.join(", ")
                    )
                })
            })
            .collect::<Result<Vec<Fix>, String>>()?;
        Ok(Rules {
            version,
            fixes,
            notes: false,
        })
    }

    fn fixed(&self, f: Fix) -> bool {
        self.fixes.contains(&f)
    }
}

/// What the script reads from Asterisk, one value at a time, as Asterisk has it (phpagi's
/// reading is applied by the decision). A value that is not set is `""`.
pub trait Facts {
    /// `GET VARIABLE name`.
    fn var(&mut self, name: &str) -> String;
    /// `DATABASE GET family key`.
    fn db(&mut self, family: &str, key: &str) -> String;
    /// `GET VARIABLE EXTENSION_STATE(ext@ext-local)`.
    fn state(&mut self, ext: &str) -> String;
    /// `GET VARIABLE PJSIP_DIAL_CONTACTS(endpoint)`.
    fn contacts(&mut self, endpoint: &str) -> String;
}

/// Shuffles the members of a `random` group (PHP's `shuffle`). Injectable so that tests are
/// deterministic.
pub trait Shuffle {
    fn shuffle(&mut self, members: &mut [String]);
}

/// The session header fields the script uses.
#[derive(Debug, Clone, Default)]
pub struct Call {
    pub callerid: String,
    pub calleridname: String,
    pub channel: String,
    /// The clock, for QUEUEWAIT's minutes (`time()`).
    pub now_s: i64,
}

/// One thing the script does to the call, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Set {
        name: String,
        value: String,
    },
    DbPut {
        family: String,
        key: String,
        value: String,
    },
    DbDel {
        family: String,
        key: String,
    },
    /// Screening without memory: remove the caller's recorded introductions,
    /// `<dir>/<callerid>.*` (the script runs `rm -f` for it).
    ForgetIntroductions {
        dir: String,
        callerid: String,
    },
}

/// The decision: actions in order, what the script would have logged with VERBOSE, and where
/// the script would have stopped early (it exits when an `ARGn` is `-`, and PHP 8 stops it on
/// a TypeError).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    pub actions: Vec<Action>,
    pub log: Vec<String>,
    pub stopped: Option<String>,
}

impl Decision {
    /// The value the decision gives `name` last, if it sets it.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.actions.iter().rev().find_map(|a| match a {
            Action::Set { name: n, value } if n == name => Some(value.as_str()),
            _ => None,
        })
    }
}

/// The most `ARGn` read for members (the script reads until one is empty).
pub const MEMBER_ARGS_MAX: usize = 64;

const HUNT_TYPES: [&str; 5] = [
    "hunt",
    "random",
    "memoryhunt",
    "firstavailable",
    "firstnotonphone",
];

/// A PHP array with integer keys, in insertion order.
#[derive(Debug, Clone, Default)]
struct PhpList {
    items: Vec<(usize, String)>,
    next_key: usize,
}

impl PhpList {
    fn push(&mut self, v: String) {
        self.items.push((self.next_key, v));
        self.next_key += 1;
    }
    fn unset(&mut self, key: usize) {
        self.items.retain(|(k, _)| *k != key);
    }
    fn set(&mut self, key: usize, v: String) {
        match self.items.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = v,
            None => {
                self.items.push((key, v));
                self.next_key = self.next_key.max(key + 1);
            }
        }
    }
    fn get(&self, key: usize) -> Option<&str> {
        self.items
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
    /// `array_unshift`: the value goes first and the keys are renumbered from 0.
    fn unshift(&mut self, v: String) {
        let old = std::mem::take(&mut self.items);
        self.items = std::iter::once(v)
            .chain(old.into_iter().map(|(_, v)| v))
            .enumerate()
            .collect();
        self.next_key = self.items.len();
    }
    fn values(&self) -> Vec<String> {
        self.items.iter().map(|(_, v)| v.clone()).collect()
    }
    fn len(&self) -> usize {
        self.items.len()
    }
}

fn ends_with_hash(s: &str) -> bool {
    s.ends_with('#')
}

/// EXTENSION_STATE's word as the script's number.
fn state_number(word: &str) -> i64 {
    match word {
        "NOT_INUSE" => 0,
        "INUSE" => 1,
        "BUSY" => 2,
        "RINGING" => 8,
        "RINGINUSE" => 9,
        "HOLDINUSE" => 17,
        "ONHOLD" => 16,
        _ => 4,
    }
}

/// Removes the `T` option: everywhere (the script), or outside option arguments (the fix).
fn strip_t(opts: &str, outside_arguments: bool) -> String {
    if !outside_arguments {
        return opts.replace('T', "");
    }
    let mut depth = 0usize;
    opts.chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            }
            !(depth == 0 && *c == 'T')
        })
        .collect()
}

/// The decision's state as the script's globals.
struct Run<'a> {
    rules: &'a Rules,
    php: Php,
    facts: &'a mut dyn Facts,
    out: Decision,
}

impl Run<'_> {
    fn exact(&self) -> bool {
        self.rules.fixed(Fix::ExactValues)
    }
    fn seen(&self, v: String) -> String {
        if self.exact() || php::phpagi_keeps(&v) {
            v
        } else {
            php::phpagi_value(&v, self.php)
        }
    }
    /// `get_var()`. DIALSTATUS may have been set by the script itself before it reads it.
    fn var(&mut self, name: &str) -> String {
        if name == "DIALSTATUS"
            && let Some(v) = self.out.value("DIALSTATUS")
        {
            return v.to_string();
        }
        let v = self.facts.var(name);
        self.seen(v)
    }
    fn db(&mut self, family: &str, key: &str) -> String {
        let v = self.facts.db(family, key);
        self.seen(v)
    }
    fn set(&mut self, name: &str, value: &str) {
        self.out.actions.push(Action::Set {
            name: name.to_string(),
            value: value.to_string(),
        });
    }
    /// A note for Tandem's log, written only when the rules keep notes.
    fn log(&mut self, text: impl FnOnce() -> String) {
        if self.rules.notes {
            self.out.log.push(text());
        }
    }
    /// `is_ext_avail()`: the member that is the caller counts as in use without asking.
    fn state(&mut self, ext: &str, ampuser: &str) -> i64 {
        if php::loose_eq(ext, ampuser, self.php) {
            return 1;
        }
        let v = self.facts.state(ext);
        state_number(&self.seen(v))
    }
    fn eq(&self, a: &str, b: &str) -> bool {
        php::loose_eq(a, b, self.php)
    }
}

/// Decides one call as dialparties.agi would.
pub fn decide(
    call: &Call,
    rules: &Rules,
    facts: &mut dyn Facts,
    rng: &mut dyn Shuffle,
) -> Decision {
    let php = rules.version.php();
    let mut r = Run {
        rules,
        php,
        facts,
        out: Decision::default(),
    };
    // The script stops early in a few places; what it did until then stands.
    let _ = run(call, &mut r, rng);
    r.out
}

/// Where the script stops early.
struct Stop;

fn run(call: &Call, r: &mut Run<'_>, rng: &mut dyn Shuffle) -> Result<(), Stop> {
    let php = r.php;
    let cidnum = call.callerid.as_str();
    let cidname = call.calleridname.as_str();

    let cwinusebusy = r.var("CWINUSEBUSY");
    let cwignore = php::trim(&r.var("CWIGNORE")).to_uppercase();
    let cfignore = php::truthy(&php::trim(&r.var("CFIGNORE")).to_uppercase());
    let signore = php::trim(&r.var("SIGNORE")).to_uppercase();
    let ampuser = php::trim(&r.var("AMPUSER")).to_string();

    let queue_wait = r.var("QUEUEWAIT");
    if !queue_wait.is_empty() {
        let saved = r.var("SAVEDCIDNAME");
        let waited = php::sub(&Val::Int(call.now_s), &Val::Str(queue_wait.clone()), php)
            .and_then(|d| php::round_div(&d, 60, php));
        let minutes = match waited {
            Ok(m) => m.text(),
            Err(e) => {
                return stop(
                    r,
                    format!("QUEUEWAIT {:?} is not a time (PHP TypeError)", e.operand),
                );
            }
        };
        if saved.is_empty() {
            r.set("__SAVEDCIDNAME", cidname);
            r.set("CALLERID(name)", &format!("M{minutes}:{cidname}"));
        } else {
            r.set("CALLERID(name)", &format!("M{minutes}:{saved}"));
        }
    }
    r.set("__KEEPCID", "TRUE");
    r.set("DIALSTATUS_CW", "");

    let mut timer = Val::Str(r.var("ARG1"));
    let mut dialopts = r.var("ARG2");
    let mut method = php::trim(&r.var("RingGroupMethod")).to_string();
    let rgconfirm = r.var("RG_CONFIRM");

    // SIP headers, in the order PHP's array keeps them.
    let mut headers: Vec<(String, String)> = Vec::new();
    let rvol = r.var("RVOL");
    let alertinfo = r.var("ALERT_INFO");
    if php::truthy(&alertinfo) {
        let v = if rvol.is_empty() {
            alertinfo.clone()
        } else {
            format!("{alertinfo}\\;volume={rvol}")
        };
        headers.push(("Alert-Info".into(), v));
    }
    let sipheader = r.var("SIPADDHEADER");
    if php::truthy(&sipheader) {
        let (name, value) = sipheader.split_once(':').unwrap_or((&sipheader, ""));
        match headers.iter_mut().find(|(h, _)| h == name) {
            Some(slot) => slot.1 = value.to_string(),
            None => headers.push((name.to_string(), value.to_string())),
        }
    }
    for (h, v) in &headers {
        r.set(&format!("HASH(__SIPHEADERS,{h})"), v);
    }

    let fmgrp = r.var("FMGRP");
    let mut pr_dialstatus = if fmgrp.is_empty() {
        String::new()
    } else {
        r.var("PR_DIALSTATUS")
    };
    let nodest = r.var("NODEST");
    let ringgroup_index = r.var("RINGGROUP_INDEX");
    let mut use_confirmation = r.var("USE_CONFIRMATION");
    if !php::truthy(&use_confirmation) {
        use_confirmation = "FALSE".into();
    }
    if !timer.truthy() {
        timer = Val::Int(0);
    }
    if !php::truthy(&dialopts) {
        dialopts.clear();
    }
    if !php::truthy(&method) {
        method = "none".into();
    }
    r.log(|| format!("Methodology of ring is '{method}'"));

    let asked_method = method.clone();
    let mut master = true;
    match method.as_str() {
        "ringall-prim" => method = "ringall".into(),
        "hunt-prim" => method = "hunt".into(),
        "memoryhunt-prim" => method = "memoryhunt".into(),
        "ringallv2-prim" => method = "ringallv2".into(),
        _ => {
            master = false;
            pr_dialstatus.clear();
        }
    }
    if php::truthy(&cwignore) && method != "ringallv2" {
        r.set("__CWIGNORE", "");
    }
    if use_confirmation != "FALSE"
        && !["ringall", "ringallv2", "hunt", "random"].contains(&method.as_str())
    {
        r.log(|| format!("Unsupported RingMethod '{method}' with confirmation: ringall"));
        method = "ringall".into();
    }
    let hunt_type = HUNT_TYPES.contains(&method.as_str());

    // Members: ARG3, ARG4, ... until one is empty, each split on '-'.
    let mut ext = PhpList::default();
    let mut every_member: Vec<String> = Vec::new();
    let mut last_arg_members: Vec<String> = Vec::new();
    for n in 3..3 + MEMBER_ARGS_MAX {
        let arg = r.var(&format!("ARG{n}"));
        if !php::truthy(&arg) {
            break;
        }
        if arg == "-" {
            return stop(r, format!("ARG{n} is '-'"));
        }
        last_arg_members = arg.split('-').map(str::to_string).collect();
        for k in &last_arg_members {
            ext.push(k.clone());
            every_member.push(k.clone());
        }
    }

    // Follow-me pre-ring: the primary goes first, rung alone for the pre-ring time.
    let mut primary_removed = false;
    let mut prering: Option<Val> = None;
    let mut grptime: Option<Val> = None;
    let mut total_prering: Option<Val> = None;
    let mut real_prering: Option<Val> = None;
    if method == "ringallv2" && !fmgrp.is_empty() {
        let p = r.db("AMPUSER", &format!("{fmgrp}/followme/prering"));
        let p = if php::cmp_int(&Val::Str(p.clone()), 1, php) == Ordering::Greater {
            Val::Str(p)
        } else {
            Val::Int(2)
        };
        let g = Val::Str(r.db("AMPUSER", &format!("{fmgrp}/followme/grptime")));
        let total = match php::add(&g, &p, php) {
            Ok(t) => t,
            Err(_) if r.rules.fixed(Fix::FollowmeEmptyGrptime) => {
                php::add(&g, &p, Php::V7).unwrap_or(Val::Int(0))
            }
            Err(e) => {
                return stop(
                    r,
                    format!(
                        "follow-me grptime {:?} is not a number (PHP TypeError)",
                        e.operand
                    ),
                );
            }
        };
        let values = ext.values();
        if values.iter().any(|v| r.eq(v, &fmgrp)) {
            real_prering = Some(total.clone());
            let first_is_primary = ext.get(0).is_some_and(|v| r.eq(v, &fmgrp));
            if !first_is_primary {
                // array_flip then unset: the last key holding exactly this value.
                if let Some(key) = ext
                    .items
                    .iter()
                    .rev()
                    .find(|(_, v)| *v == fmgrp)
                    .map(|(k, _)| *k)
                {
                    ext.unset(key);
                }
                ext.unshift(fmgrp.clone());
            }
        } else {
            real_prering = Some(p.clone());
            ext.unshift(fmgrp.clone());
        }
        prering = Some(p);
        grptime = Some(g);
        total_prering = Some(total);
    }

    // Screening, for a call from outside to one extension or its follow-me.
    let already_screened = r.var("SCREEN");
    let from_outside = r.var("FROM_DID");
    let mut screen = false;
    if let Some(first) = ext.get(0).map(str::to_string)
        && !from_outside.is_empty()
        && (method == "none" || r.eq(&fmgrp, &first))
        && !php::truthy(&signore)
        && !php::truthy(&already_screened)
        && !(!nodest.is_empty() && !r.eq(&fmgrp, &nodest))
    {
        let screen_call = r.db("AMPUSER", &format!("{first}/screen"));
        if !screen_call.is_empty() {
            if screen_call == "nomemory"
                && !cidnum.is_empty()
                && cidnum
                    .bytes()
                    .all(|b| b == b' ' || b.is_ascii_alphanumeric())
            {
                let dir = r.var("ASTVARLIBDIR");
                r.out.actions.push(Action::ForgetIntroductions {
                    dir: format!("{dir}/sounds/priv-callerintros"),
                    callerid: cidnum.to_string(),
                });
            }
            screen = true;
            r.set("__SCREEN", &screen_call);
            r.set("__SCREEN_EXTEN", &first);
        }
    }

    // Call forward (CF): the member becomes `<target>#`, dialled through Local.
    let mut realcalleridnum: Option<String> = None;
    let mut blindtransfer: Option<String> = None;
    for (kk, k) in ext.items.clone() {
        let cf = r.db("CF", &k);
        if cf.is_empty() {
            continue;
        }
        let real = match &realcalleridnum {
            Some(v) => v.clone(),
            None => {
                let v = r.var("REALCALLERIDNUM");
                realcalleridnum = Some(v.clone());
                v
            }
        };
        let blind = match &blindtransfer {
            Some(v) => v.clone(),
            None => {
                let v = r.var("BLINDTRANSFER");
                blindtransfer = Some(v.clone());
                v
            }
        };
        if r.eq(&ampuser, &cf) || r.eq(&real, &cf) || blind.contains(&format!("/{cf}-")) {
            r.log(|| format!("Extension {k} cf is ignored"));
            continue;
        }
        if r.eq(&k, &cf) {
            r.log(|| format!("Loop detected, extension {k} cf is ignored"));
            continue;
        }
        if cfignore {
            ext.unset(kk);
            r.log(|| format!("Extension {k} has call forward set to {cf}: ignored (CFIGNORE)"));
            r.set("DIALSTATUS", "NOANSWER");
        } else {
            ext.set(kk, format!("{cf}#"));
            r.log(|| format!("Extension {k} has call forward set to {cf}"));
            if method == "none" {
                r.set("__DIVERSION_REASON", "unconditional");
                let cfrt = r.db("AMPUSER", &format!("{k}/cfringtimer"));
                if php::truthy(&cfrt) {
                    let v = Val::Str(cfrt.clone());
                    timer = if php::cmp_int(&v, 0, php) == Ordering::Less {
                        Val::Str(String::new())
                    } else {
                        v
                    };
                }
            }
        }
        if kk == 0 {
            master = false;
            pr_dialstatus.clear();
        }
    }

    // Do not disturb.
    let mut skip_remaining = false;
    for (count, (key, k)) in ext.items.clone().into_iter().enumerate() {
        if ends_with_hash(&k) {
            continue;
        }
        let dnd = r.db("DND", &k);
        if !dnd.is_empty() || pr_dialstatus == "BUSY" {
            r.log(|| {
                format!(
                    "Extension {k} has do not disturb enabled, or followme pre-ring returned busy"
                )
            });
            // The script removes by position, which is not the key once CFIGNORE made a hole.
            ext.unset(if r.rules.fixed(Fix::DenseIndex) {
                key
            } else {
                count
            });
            r.set("DIALSTATUS", "BUSY");
            if count == 0 && master {
                skip_remaining = true;
            }
            if count == 0 {
                primary_removed = true;
            }
        }
    }

    // Presence: call waiting, busy and unavailable forwards, the strategy's own filters.
    let mut ds = String::new();
    let mut dialled: Vec<String> = Vec::new(); // $dsarray's keys
    let mut hunt: Vec<(String, String)> = Vec::new(); // $ext_hunt
    for k in ext.values() {
        if skip_remaining {
            continue;
        }
        let mut extnum = k.clone();
        let cw = !php::truthy(&cwignore) && php::truthy(&r.db("CW", &extnum));
        let cfb = r.db("CFB", &extnum);
        let cfu = r.db("CFU", &extnum);
        let (has_cfb, has_cfu) = (!cfb.is_empty(), !cfu.is_empty());
        if master {
            master = false;
            let st = r.state(&extnum, &ampuser);
            if st != 0 && st != 4 {
                skip_remaining = true;
            }
        }
        if !ends_with_hash(&k) {
            if !cw || has_cfb || has_cfu {
                let st = r.state(&extnum, &ampuser);
                if has_cfu && st == 4 {
                    if method != "none" && !cfignore {
                        extnum = format!("{cfu}#");
                    } else {
                        extnum.clear();
                        r.set("DIALSTATUS", "NOANSWER");
                    }
                } else if !cw || has_cfb {
                    if st > 0 && st != 4 {
                        if has_cfb && !cfignore && !cw {
                            if method == "none" {
                                extnum.clear();
                                r.set("DIALSTATUS", "BUSY");
                                r.set("__DIVERSION_REASON", "user-busy");
                            } else {
                                extnum = format!("{cfb}#");
                            }
                        } else if !cw {
                            r.log(|| format!("Extension {extnum} has call waiting disabled"));
                            extnum.clear();
                            r.set("DIALSTATUS", "BUSY");
                            r.set("__DIVERSION_REASON", "user-busy");
                        }
                    } else if st == 4 {
                        extnum.clear();
                    }
                }
            } else if method == "none" && cw && php::truthy(&cwinusebusy) {
                let st = r.state(&extnum, &ampuser);
                if st > 0 && st != 4 {
                    r.set("DIALSTATUS_CW", "BUSY");
                }
            } else if cw && method == "firstnotonphone" {
                if r.state(&extnum, &ampuser) != 0 {
                    extnum.clear();
                    r.set("DIALSTATUS", "BUSY");
                }
            } else if method == "firstavailable" && r.state(&extnum, &ampuser) == 4 {
                extnum.clear();
                r.set("DIALSTATUS", "BUSY");
            }
        }
        if extnum.is_empty() {
            continue;
        }
        let real_ext = extnum.replace('#', "");
        if dialled.contains(&real_ext) {
            r.log(|| {
                format!("Extension '{real_ext}' already in the dialstring, ignoring duplicate")
            });
            continue;
        }
        let extds = dial_string(r, &extnum, &use_confirmation, &ringgroup_index);
        if extds.is_empty() && r.rules.fixed(Fix::SkipDeviceless) {
            r.log(|| format!("Extension {real_ext} has nothing to dial"));
            continue;
        }
        dialled.push(real_ext);
        if !extds.is_empty() {
            ds.push_str(&extds);
            ds.push('&');
        }
        if !ends_with_hash(&k) && !hunt_type {
            if php::is_numeric(cidnum, php) {
                r.out.actions.push(Action::DbPut {
                    family: "CALLTRACE".into(),
                    key: k.clone(),
                    value: cidnum.to_string(),
                });
            } else {
                r.out.actions.push(Action::DbDel {
                    family: "CALLTRACE".into(),
                    key: k.clone(),
                });
            }
        } else {
            match hunt.iter_mut().find(|(m, _)| *m == k) {
                Some(slot) => slot.1 = extds,
                None => hunt.push((k.clone(), extds)),
            }
        }
    }

    let mut hunt_order = last_arg_members;
    if method == "firstnotonphone" {
        // Idle members first, then the rest of those dialled, in their order.
        let mut first: Vec<String> = Vec::new();
        let mut order: Vec<String> = Vec::new();
        for k in ext.values() {
            if r.state(&k, &ampuser) == 0 {
                first.push(k.clone());
                if !order.contains(&k) {
                    order.push(k);
                }
            }
        }
        for key in &dialled {
            if !first.iter().any(|f| r.eq(f, key)) {
                first.push(key.clone());
                if !order.contains(key) {
                    order.push(key.clone());
                }
            }
        }
        dialled = order;
        hunt_order = first
            .into_iter()
            .map(|f| {
                let hashed = format!("{f}#");
                if hunt_order.iter().any(|m| r.eq(&hashed, m)) {
                    hashed
                } else {
                    f
                }
            })
            .collect();
    }
    r.set("FILTERED_DIAL", &dialled.join("-"));

    if method == "ringallv2" {
        let mut long = every_member.clone();
        if let Some(i) = long.iter().position(|m| r.eq(&fmgrp, m)) {
            long.remove(i);
        }
        r.set("FMGL_DIAL", &long.join("-"));
    }

    let mut loops = 0usize;
    if hunt_type {
        if php::truthy(cidnum) {
            r.set("CALLTRACE_HUNT", cidnum);
        }
        let mut members: Vec<(String, String)> = if r.rules.fixed(Fix::HuntKeepsForwarded) {
            hunt.clone()
        } else {
            hunt_order
                .iter()
                .filter_map(|k| hunt.iter().find(|(m, _)| m == k).cloned())
                .collect()
        };
        if method == "random" {
            let mut names: Vec<String> = members.iter().map(|(m, _)| m.clone()).collect();
            rng.shuffle(&mut names);
            members = names
                .iter()
                .filter_map(|n| members.iter().find(|(m, _)| m == n).cloned())
                .collect();
        }
        let mut cumulative = String::new();
        for (_, extds) in members {
            if !php::truthy(&extds) {
                continue;
            }
            let name = format!("HuntMember{loops}");
            if method == "memoryhunt" {
                if loops > 0 {
                    cumulative.push('&');
                }
                cumulative.push_str(&extds);
                r.set(&name, &cumulative.clone());
            } else {
                r.set(&name, &extds);
            }
            loops += 1;
        }
    }

    let ds_trimmed = ds.trim_end_matches([' ', '&']).to_string();
    ds = ds_trimmed;
    no_destination_options(r, &nodest, &use_confirmation, &rgconfirm, &mut dialopts);

    if method == "ringallv2" {
        for (count, (key, x)) in ext.items.clone().into_iter().enumerate() {
            if x.is_empty() {
                ext.unset(if r.rules.fixed(Fix::DenseIndex) {
                    key
                } else {
                    count
                });
            }
        }
        let real = real_prering.clone().unwrap_or(Val::Str(String::new()));
        let total = total_prering.clone().unwrap_or(Val::Str(String::new()));
        if skip_remaining || (ext.len() == 1 && !primary_removed) {
            timer = real;
        } else if ext.len() == 1 {
            timer = grptime.clone().unwrap_or(Val::Str(String::new()));
        } else {
            timer = total;
            let values = ext.values();
            let (primary, rest) = values
                .split_first()
                .map_or((String::new(), &[][..]), |(p, r)| (p.clone(), r));
            ds = format!(
                "Local/FMPR-{primary}@from-internal&Local/FMGL-{}@from-internal",
                rest.join("-")
            );
            r.set("_FMUNIQUE", &call.channel);
            r.set("_RingGroupMethod", "ringall");
            let p = prering.clone().unwrap_or(Val::Int(0));
            let p = php::sub(&p, &Val::Int(2), php).unwrap_or(Val::Int(0));
            r.set("_FMPRERING", &p.text());
            r.set(
                "_FMREALPRERING",
                &real_prering.clone().map_or(String::new(), |v| v.text()),
            );
            r.set(
                "_FMGRPTIME",
                &grptime.clone().map_or(String::new(), |v| v.text()),
            );
            r.set(
                "_FMPRIME",
                if asked_method == "ringallv2" {
                    "FALSE"
                } else {
                    "TRUE"
                },
            );
            if use_confirmation != "FALSE" {
                r.set("_USE_CONFIRMATION", &use_confirmation.clone());
                r.set("_RINGGROUP_INDEX", &ringgroup_index);
                use_confirmation = "FALSE".into();
            }
        }
    }
    no_destination_options(r, &nodest, &use_confirmation, &rgconfirm, &mut dialopts);

    let direction = r.var("DIRECTION");
    let from_queue = r.var("FROMQ");
    let outside = r.rules.fixed(Fix::TOutsideArguments);
    if direction == "INBOUND" {
        dialopts = match music_class(&dialopts) {
            // The script shields the first m(...) class from the removal, wherever its
            // text appears.
            Some(class) if !class.is_empty() && !outside => dialopts
                .replace(&class, "[mclass]")
                .replace('T', "")
                .replace("[mclass]", &class),
            _ => strip_t(&dialopts, outside),
        };
    }
    if php::truthy(&from_queue) && from_queue == "true" {
        dialopts = strip_t(&dialopts, outside);
    }

    let separator = ',';
    if ds.is_empty() {
        r.log(|| "Nothing to dial".into());
    } else if hunt_type {
        let mut hunt_ds = String::from(separator);
        if timer.truthy() {
            hunt_ds.push_str(&timer.text());
        }
        hunt_ds.push(separator);
        hunt_ds.push_str(&dialopts);
        ds = hunt_ds;
        r.set("ds", &ds);
        r.set("HuntMembers", &loops.to_string());
        r.set("MACRODIALGOTO_PRI", "huntdial");
    } else {
        ds.push(separator);
        if timer.truthy() {
            ds.push_str(&timer.text());
            if php::trim(&use_confirmation) != "FALSE" {
                r.set("__RT", &timer.text());
            }
        }
        ds.push(separator);
        ds.push_str(&dialopts);
        if screen {
            ds.push('p');
        }
        if php::trim(&use_confirmation) != "FALSE" {
            r.set("__RG_IDX", &ringgroup_index);
            let cid = if php::is_numeric(cidnum, php) {
                cidnum
            } else {
                "999"
            };
            r.set("__CALLCONFIRMCID", cid);
        }
        if ds.len() > DS_BYTES_MAX {
            let mut cut = DS_BYTES_MAX;
            while !ds.is_char_boundary(cut) {
                cut -= 1;
            }
            let (head, extra) = ds.split_at(cut);
            let (head, extra) = (head.to_string(), extra.to_string());
            r.set("ds", &head);
            r.set("dsextra", &extra);
        } else {
            r.set("ds", &ds);
        }
        r.set("MACRODIALGOTO_PRI", "normdial");
    }
    if !php::truthy(&ds) {
        let status = r.var("DIALSTATUS");
        if !php::truthy(&status) {
            r.set("DIALSTATUS", "NOANSWER");
        }
    }

    let rvol_mode = php::trim(&r.var("RVOL_MODE")).to_string();
    let rvol = php::trim(&r.var("RVOL")).to_string();
    let rvol_parent = php::trim(&r.var("RVOLPARENT")).to_string();
    match rvol_mode.as_str() {
        "force" | "yes" => r.set("__RVOL", &rvol_parent),
        "no" | "never" => r.set("__RVOL", &rvol),
        _ => {}
    }
    if r.rules.version == Version::V17 {
        r.set("__DIALPARTIES", "1");
    }
    r.set("TIMEOUT", &timer.text());
    r.set("DIALOPTS", &dialopts);
    Ok(())
}

/// The longest `ds` the script sets; the rest goes to `dsextra`.
pub const DS_BYTES_MAX: usize = 2000;

fn stop(r: &mut Run<'_>, why: String) -> Result<(), Stop> {
    r.out.stopped = Some(why);
    Err(Stop)
}

/// The first `m(...)` music class in the options, as `/m\((.*?)\)/` finds it.
fn music_class(opts: &str) -> Option<String> {
    let start = opts.find("m(")? + 2;
    let len = opts[start..].find(')')?;
    Some(opts[start..start + len].to_string())
}

/// NODEST without confirmation: the called party's voicemail is blocked unless a blkvm or
/// confirm macro is already there (run twice by the script: before and after ringallv2 may
/// turn confirmation off).
fn no_destination_options(
    r: &mut Run<'_>,
    nodest: &str,
    use_confirmation: &str,
    rgconfirm: &str,
    dialopts: &mut String,
) {
    if nodest.is_empty() || use_confirmation != "FALSE" {
        return;
    }
    let (blkvm, present) = match r.rules.version {
        Version::V16 => (
            "M(auto-blkvm)",
            ["M(auto-blkvm)", "M(auto-confirm", "M(confirm"],
        ),
        Version::V17 => (
            "U(macro-auto-blkvm)",
            [
                "U(macro-auto-blkvm)",
                "U(macro-auto-confirm",
                "U(macro-confirm",
            ],
        ),
    };
    if present.iter().any(|p| dialopts.contains(p)) {
        return;
    }
    if !r.eq(rgconfirm, "1") {
        dialopts.push_str(blkvm);
    }
}

/// `get_dial_string()`: a `#` member through Local, an extension through its devices.
fn dial_string(
    r: &mut Run<'_>,
    extnum: &str,
    use_confirmation: &str,
    ringgroup_index: &str,
) -> String {
    let confirm = php::trim(use_confirmation) != "FALSE";
    // strpos($extnum, '#') != 0: a '#' anywhere but first.
    if extnum.find('#').is_some_and(|i| i > 0) {
        let n = extnum.replace('#', "");
        return if confirm {
            format!("Local/RG-{ringgroup_index}*-{n}#@from-internal")
        } else {
            format!("Local/{n}@from-internal/n")
        };
    }
    let devices = r.db("AMPUSER", &format!("{extnum}/device"));
    let mut out = String::new();
    for device in devices.split('&') {
        if confirm {
            out.push_str(&format!("Local/LC-{device}@from-internal&"));
            continue;
        }
        let mut dial = r.db("DEVICE", &format!("{device}/dial"));
        if dial.starts_with("PJSIP") {
            let endpoint = dial.get(6..).unwrap_or("").to_string();
            let v = r.facts.contacts(&endpoint);
            dial = r.seen(v);
            if dial.is_empty() {
                continue;
            }
        }
        out.push_str(&dial);
        out.push('&');
    }
    out.trim_matches([' ', '&']).to_string()
}
