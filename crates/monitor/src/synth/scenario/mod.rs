//! Scenarios for alert rules: one pcap each, with its ground truth as data.
//!
//! Every scenario sits in the same clean day of a small FreePBX site (the background): phones
//! at `192.168.10.100` up register with the PBX at `192.168.10.2` (a 401 challenge, then 200)
//! before 09:00 UTC and make or take answered G.711 calls with RTP both ways between 09:00 and
//! 17:00, a tenth of them busy (486) and a tenth given up while ringing (CANCEL, 487). Then:
//! - [`Scenario::TollFraud`]: extension 2001 dials premium international ranges between
//!   02:00 and 03:00 the next night, several calls up at once ([`TollFraudTruth`]);
//! - [`Scenario::Scanner`]: `friendly-scanner`, then `sipvicious`, guess passwords from
//!   `203.0.113.66` ([`ScannerTruth`]);
//! - [`Scenario::Trunk503`]: a trunk refuses one call in three with 503 ([`Trunk503Truth`]);
//! - [`Scenario::OneWayAudio`]: some answered calls lose one direction's RTP ([`OneWayCall`]);
//! - [`Scenario::Clean`]: the background alone.
//!
//! Start at [`write()`]. Media is generated as the file is written (the private `timeline`
//! module keeps SIP whole and RTP as runs), so a day of 10,000 calls costs its signalling in
//! memory, not its packets.

mod call;
mod fraud;
mod sip;
mod timeline;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use call::{CallPlan, End, MS, Media, Second};
use sip::{Agent, Register};
use timeline::Timeline;

pub use fraud::{ScannerTruth, TollFraudTruth, Trunk503Truth};
pub use timeline::PacketCounts;

/// A synthetic situation for the alert rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    TollFraud,
    Scanner,
    Trunk503,
    OneWayAudio,
    Clean,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::TollFraud,
        Scenario::Scanner,
        Scenario::Trunk503,
        Scenario::OneWayAudio,
        Scenario::Clean,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::TollFraud => "toll-fraud",
            Scenario::Scanner => "scanner",
            Scenario::Trunk503 => "trunk-503",
            Scenario::OneWayAudio => "one-way-audio",
            Scenario::Clean => "clean",
        }
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Scenario, String> {
        Scenario::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown scenario {s:?} (one of {})", names.join(", "))
            })
    }
}

/// How to write a scenario.
#[derive(Debug, Clone)]
pub struct ScenarioOptions {
    /// Varies call timing and lengths; the same seed writes the same file.
    pub seed: u64,
    /// The capture's day is the UTC day holding this instant (ns since the epoch).
    pub start_ns: i64,
    /// Background calls between 09:00 and 17:00 UTC (at least 20 for [`Scenario::OneWayAudio`],
    /// which turns six of them one-way).
    pub clean_calls: usize,
}

impl Default for ScenarioOptions {
    fn default() -> Self {
        ScenarioOptions {
            seed: 1,
            // 2026-03-02 00:00:00 UTC, a Monday.
            start_ns: 1_772_409_600_000_000_000,
            clean_calls: 40,
        }
    }
}

/// Which way a call's RTP goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    CallerToCallee,
    CalleeToCaller,
}

/// Ground truth of one INVITE dialog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruthCall {
    pub call_id: String,
    /// Part of the clean background (not what the scenario is about).
    pub background: bool,
    /// The From user and the To user (the number as dialled).
    pub caller: String,
    pub called: String,
    /// Where the INVITE came from and went to.
    pub caller_addr: SocketAddr,
    pub callee_addr: SocketAddr,
    /// The caller's User-Agent.
    pub user_agent: String,
    pub invite_ns: i64,
    pub answer_ns: Option<i64>,
    /// The BYE, the CANCEL or the final refusal.
    pub end_ns: i64,
    /// 200 when answered; else the final refusal (486, 487, 503).
    pub final_code: u16,
    /// RTP packets sent caller to callee and callee to caller.
    pub rtp_packets: [u64; 2],
    /// The last RTP packet of each direction.
    pub last_rtp_ns: [Option<i64>; 2],
    /// The direction that carried no RTP or stopped early, if one did.
    pub silent: Option<Direction>,
}

/// Ground truth of one REGISTER chain (one Call-ID and user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruthRegistration {
    pub call_id: String,
    pub user: String,
    pub src: SocketAddr,
    pub user_agent: String,
    /// 200 registered, 403 refused, 401 challenged again.
    pub final_code: u16,
    /// 401 challenges received.
    pub challenges: u32,
    pub at_ns: i64,
}

impl TruthRegistration {
    pub fn failed(&self) -> bool {
        self.final_code != 200
    }
}

/// One answered call that lost one direction's audio.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneWayCall {
    pub call_id: String,
    pub silent: Direction,
    /// `None`: the direction carried no RTP at all; else how long before the BYE its last
    /// packet went.
    pub stopped_before_bye_ns: Option<i64>,
}

/// What a scenario's capture holds.
#[derive(Debug, Clone)]
pub struct ScenarioTruth {
    pub scenario: Scenario,
    /// Every INVITE dialog, background included, by start.
    pub calls: Vec<TruthCall>,
    /// Every REGISTER chain, by start.
    pub registrations: Vec<TruthRegistration>,
    /// OPTIONS requests (each answered 200).
    pub options: u64,
    pub counts: PacketCounts,
    pub toll_fraud: Option<TollFraudTruth>,
    pub scanner: Option<ScannerTruth>,
    pub trunk: Option<Trunk503Truth>,
    pub one_way: Vec<OneWayCall>,
}

impl ScenarioTruth {
    pub fn call(&self, call_id: &str) -> Option<&TruthCall> {
        self.calls.iter().find(|c| c.call_id == call_id)
    }

    /// The calls the scenario is about: every call but the background's.
    pub fn scenario_calls(&self) -> impl Iterator<Item = &TruthCall> {
        self.calls.iter().filter(|c| !c.background)
    }

    /// The REGISTER chains that never got a 200.
    pub fn failed_registrations(&self) -> impl Iterator<Item = &TruthRegistration> {
        self.registrations.iter().filter(|r| r.failed())
    }
}

const SECOND: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SECOND;

/// The PBX of the site every scenario shares.
const PBX_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 2);
const PBX_UA: &str = "FPBX-16.0.40.7(20.5.2)";
const PHONE_UAS: [&str; 4] = [
    "Yealink SIP-T54W 96.86.0.100",
    "Grandstream GXP2170 1.0.11.45",
    "Yealink SIP-T46S 66.86.0.15",
    "PolycomVVX-VVX_450-UA/6.4.3.5018",
];
/// Most background phones: one per ten calls, at least 4, at most 150 (`192.168.10.100` to
/// `.249`).
const PHONES_MAX: usize = 150;

/// Writes `scenario` to `path` (Ethernet, microsecond pcap) and returns its ground truth.
pub fn write(scenario: Scenario, path: &Path, opts: &ScenarioOptions) -> io::Result<ScenarioTruth> {
    if scenario == Scenario::OneWayAudio && opts.clean_calls < 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the one-way-audio scenario needs at least 20 background calls, {} asked",
                opts.clean_calls
            ),
        ));
    }
    let site = Site::new(opts.clean_calls);
    let day0 = opts.start_ns - opts.start_ns.rem_euclid(24 * HOUR);
    let mut b = Builder {
        tl: Timeline::default(),
        rng: super::Rng(opts.seed.max(1)),
        truth: ScenarioTruth {
            scenario,
            calls: Vec::new(),
            registrations: Vec::new(),
            options: 0,
            counts: PacketCounts::default(),
            toll_fraud: None,
            scanner: None,
            trunk: None,
            one_way: Vec::new(),
        },
        day0,
    };
    b.register_phones(&site);
    let mut plans = background(&mut b, &site, opts.clean_calls);
    match scenario {
        Scenario::TollFraud => fraud::toll_fraud(&mut b, &site),
        Scenario::Scanner => fraud::scanner(&mut b, &site),
        Scenario::Trunk503 => fraud::trunk_503(&mut b),
        Scenario::OneWayAudio => one_way(&mut b, &mut plans),
        Scenario::Clean => {}
    }
    for p in &plans {
        let t = call::call(&mut b.tl, p);
        b.truth.calls.push(t);
    }
    let Builder { tl, mut truth, .. } = b;
    truth.counts = tl.write(path)?;
    truth.calls.sort_by_key(|c| c.invite_ns);
    truth.registrations.sort_by_key(|r| r.at_ns);
    Ok(truth)
}

/// What a scenario is written with.
struct Builder {
    tl: Timeline,
    rng: super::Rng,
    truth: ScenarioTruth,
    /// 00:00 UTC of the capture's day.
    day0: i64,
}

impl Builder {
    /// A random whole number in `lo..=hi`.
    fn between(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.rng.next_u64() % u64::from(hi - lo + 1)) as u32
    }

    /// Each phone registers before the day begins: a 401 challenge, then 200.
    fn register_phones(&mut self, site: &Site) {
        for (k, phone) in site.phones.iter().enumerate() {
            let at = self.day0 + 8 * HOUR + 50 * 60 * SECOND + k as i64 * 3 * SECOND;
            self.register_ok(phone, site, at);
        }
    }

    /// A phone's REGISTER chain that succeeds.
    fn register_ok(&mut self, phone: &Agent, site: &Site, at: i64) {
        let seed = self.rng.next_u64();
        let call_id = format!("{:08x}-{:04x}@{}", seed as u32, seed >> 48, phone.addr.ip());
        let r = Register {
            agent: phone,
            user: &phone.user,
            registrar: &site.pbx,
            call_id: &call_id,
            from_tag: &format!("{:x}", seed >> 20),
            branch: &format!("{:x}", seed >> 8),
            expires_s: 3600,
        };
        let gap = self.between(20, 60);
        let t = call::register(&mut self.tl, &r, at, gap, Second::Accepted, seed);
        self.truth.registrations.push(t);
    }
}

/// The PBX and its phones.
struct Site {
    pbx: Agent,
    phones: Vec<Agent>,
}

impl Site {
    fn new(calls: usize) -> Site {
        let pbx_addr = SocketAddr::new(IpAddr::V4(PBX_IP), 5060);
        let phones = (0..(calls / 10).clamp(4, PHONES_MAX))
            .map(|k| {
                let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 10, 100 + k as u8));
                phone(&(1001 + k).to_string(), ip, PHONE_UAS[k % PHONE_UAS.len()])
            })
            .collect();
        Site {
            pbx: Agent {
                user: "asterisk".into(),
                addr: pbx_addr,
                domain: pbx_addr.ip(),
                user_agent: PBX_UA.into(),
                media_ip: pbx_addr.ip(),
            },
            phones,
        }
    }
}

/// A phone registered with the site's PBX.
fn phone(extension: &str, ip: IpAddr, user_agent: &str) -> Agent {
    Agent {
        user: extension.into(),
        addr: SocketAddr::new(ip, 5060),
        domain: IpAddr::V4(PBX_IP),
        user_agent: user_agent.into(),
        media_ip: ip,
    }
}

/// The day's ordinary calls, `calls` of them spread evenly over 09:00-17:00 UTC: phone `i %
/// phones` takes part in call `i`, so a phone's calls never overlap. One in five comes in from
/// the PBX; a third of those going out call another extension, the others a national number.
/// Call `10k+9` is busy, `10k+8` cancelled, the others answered with 1-2 s of audio.
fn background<'a>(b: &mut Builder, site: &'a Site, calls: usize) -> Vec<CallPlan<'a>> {
    let span = 8 * HOUR;
    let slot = span / calls.max(1) as i64;
    let mut plans = Vec::with_capacity(calls);
    for i in 0..calls {
        let k = i % site.phones.len();
        let phone = &site.phones[k];
        let jitter = (b.rng.next_u64() % (slot / 2).max(1) as u64) as i64;
        let start_ns = b.day0 + 9 * HOUR + i as i64 * slot + jitter / MS * MS;
        let inbound = i % 5 == 3;
        let national = format!("02079460{:03}", i % 1000);
        let (caller, callee, calling, called) = if inbound {
            (&site.pbx, phone, national, phone.user.clone())
        } else if i % 3 == 0 {
            let other = &site.phones[(k + 1) % site.phones.len()];
            (phone, &site.pbx, phone.user.clone(), other.user.clone())
        } else {
            (phone, &site.pbx, phone.user.clone(), national)
        };
        let (end, ring_ms) = match i % 10 {
            9 => (End::Busy, b.between(300, 900)),
            8 => (End::Cancelled, b.between(4_000, 9_000)),
            _ => (
                End::Answered {
                    media_ms: b.between(50, 100) * call::PTIME_MS,
                    caller_hangs_up: i.is_multiple_of(2),
                    media: [Media::Full; 2],
                },
                b.between(1_500, 4_000),
            ),
        };
        let seed = b.rng.next_u64();
        let media_port = |base: usize| (base + 2 * (i % 4_000)) as u16;
        let (phone_port, pbx_port) = (media_port(11_780), media_port(10_000));
        plans.push(CallPlan {
            background: true,
            call_id: format!("{:016x}-{i}@{}", seed, caller.addr.ip()),
            caller,
            callee,
            calling,
            called,
            start_ns,
            ring_ms,
            end,
            pt: if k.is_multiple_of(3) { 0 } else { 8 },
            ports: if inbound {
                [pbx_port, phone_port]
            } else {
                [phone_port, pbx_port]
            },
            seed,
        });
    }
    plans
}

/// Six answered background calls lose a direction, with 9 s of audio: two never hear the
/// callee, one never hears the caller, two hear the callee stop 5 s before the end, one the
/// caller.
fn one_way(b: &mut Builder, plans: &mut [CallPlan<'_>]) {
    const EARLY: Media = Media::StopsEarly {
        before_end_ms: 5_000,
    };
    let shapes = [
        [Media::Full, Media::Missing],
        [Media::Full, Media::Missing],
        [Media::Missing, Media::Full],
        [Media::Full, EARLY],
        [Media::Full, EARLY],
        [EARLY, Media::Full],
    ];
    let n = plans.len();
    let mut next = 0;
    for (j, media) in shapes.into_iter().enumerate() {
        let first = next.max(n * (j + 1) / 7);
        let Some(idx) = (first..n).find(|&i| matches!(plans[i].end, End::Answered { .. })) else {
            break;
        };
        next = idx + 1;
        let p = &mut plans[idx];
        let End::Answered {
            caller_hangs_up, ..
        } = p.end
        else {
            continue;
        };
        p.end = End::Answered {
            media_ms: 9_000,
            caller_hangs_up,
            media,
        };
        p.background = false;
        let silent = if media[0] == Media::Full {
            Direction::CalleeToCaller
        } else {
            Direction::CallerToCallee
        };
        let early = media.contains(&EARLY);
        b.truth.one_way.push(OneWayCall {
            call_id: p.call_id.clone(),
            silent,
            // The early stream's last packet is 20 ms before its 5 s of silence; the BYE 30 ms
            // after the audio's end.
            stopped_before_bye_ns: early.then_some((5_000 + 20 + 30) * MS),
        });
    }
}
