//! The scenarios that are not the background: a compromised extension, a scanner, a failing
//! trunk.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::call::{self, CallPlan, End, MS, Media, Second};
use super::sip::{Agent, Register, options};
use super::{Builder, HOUR, SECOND, Site, TruthCall, phone};

/// The compromised extension and what it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TollFraudTruth {
    pub extension: String,
    pub phone: IpAddr,
    pub user_agent: String,
    /// The premium calls, by start.
    pub calls: Vec<FraudCall>,
    /// Most of them up at once (from INVITE to BYE).
    pub peak_concurrent: u32,
    /// The UTC hour they were made in.
    pub hour_utc: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FraudCall {
    pub call_id: String,
    /// As dialled: `00882…`, `011883…` or `+881…`.
    pub number: String,
    pub start_ns: i64,
}

/// The scanner's address and what it tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannerTruth {
    pub source: IpAddr,
    pub user_agents: Vec<String>,
    /// Users tried, each several times.
    pub users: Vec<String>,
    /// REGISTER chains that never got a 200.
    pub failed_chains: u32,
    pub options_probes: u32,
}

/// The failing trunk and its refusals.
#[derive(Debug, Clone, PartialEq)]
pub struct Trunk503Truth {
    pub pbx: SocketAddr,
    pub trunk: SocketAddr,
    pub calls: u32,
    /// The calls answered 503 Service Unavailable.
    pub failed_call_ids: Vec<String>,
    /// Their share of the trunk's calls, in percent.
    pub share_pct: f64,
}

/// Numbers in International Networks (+882, +883) and satellite (+881, +870) ranges, each
/// dialled with `00`, `011` or `+`.
const PREMIUM: [&str; 12] = [
    "00882165500101",
    "+88213000201",
    "01188216500302",
    "0088351001234",
    "+883140000777",
    "011883510009876",
    "008816315550123",
    "+881631555077",
    "00870773112233",
    "+870772001144",
    "011870773000555",
    "0088216550199",
];

/// Extension 2001 at `192.168.10.21` (a Yealink) registers at 08:41, makes two ordinary calls
/// in the day, then from 02:07 the next night calls [`PREMIUM`] in two bursts of six, every
/// call answered with 8-12 s of audio, the calls of a burst a second or two apart.
pub(super) fn toll_fraud(b: &mut Builder, site: &Site) {
    let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 10, 21));
    let ext = phone("2001", ip, "Yealink SIP-T46U 108.86.0.45");
    b.register_ok(
        &ext,
        site,
        b.day0 + 8 * HOUR + 41 * 60 * SECOND + 7 * SECOND,
    );
    let day_calls = [
        (10 * HOUR + 12 * 60 * SECOND, "02079460555"),
        (15 * HOUR + 47 * 60 * SECOND, "1001"),
    ];
    let day0 = b.day0;
    for (j, (at, number)) in day_calls.into_iter().enumerate() {
        let t = own_call(
            b,
            site,
            &ext,
            number,
            day0 + at,
            1_800,
            1_600 + 200 * j as u32,
        );
        b.truth.calls.push(t);
    }
    let night = b.day0 + 24 * HOUR + 2 * HOUR;
    let mut fraud = Vec::new();
    let mut spans = Vec::new();
    for (j, number) in PREMIUM.iter().enumerate() {
        let burst = if j < 6 { 7 * 60 } else { 34 * 60 };
        let at = night + burst * SECOND + (j % 6) as i64 * 1_500 * MS;
        let media_ms = b.between(400, 600) * call::PTIME_MS;
        let t = own_call(b, site, &ext, number, at, 2_500, media_ms);
        spans.push((t.invite_ns, t.end_ns));
        fraud.push(FraudCall {
            call_id: t.call_id.clone(),
            number: number.to_string(),
            start_ns: t.invite_ns,
        });
        b.truth.calls.push(TruthCall {
            background: false,
            ..t
        });
    }
    b.truth.toll_fraud = Some(TollFraudTruth {
        extension: ext.user.clone(),
        phone: ip,
        user_agent: ext.user_agent.clone(),
        calls: fraud,
        peak_concurrent: peak(&spans),
        hour_utc: 2,
    });
}

/// An answered call from `ext` through the PBX.
fn own_call(
    b: &mut Builder,
    site: &Site,
    ext: &Agent,
    number: &str,
    at: i64,
    ring_ms: u32,
    media_ms: u32,
) -> TruthCall {
    let seed = b.rng.next_u64();
    let n = b.truth.calls.len() as u16;
    call::call(
        &mut b.tl,
        &CallPlan {
            background: true,
            call_id: format!("{:08x}-{:08x}@{}", seed as u32, seed >> 32, ext.addr.ip()),
            caller: ext,
            callee: &site.pbx,
            calling: ext.user.clone(),
            called: number.to_string(),
            start_ns: at,
            ring_ms,
            end: End::Answered {
                media_ms,
                caller_hangs_up: true,
                media: [Media::Full; 2],
            },
            pt: 8,
            ports: [12_000 + 2 * n, 18_000 + 2 * n],
            seed,
        },
    )
}

/// Most intervals `[start, end)` open at once.
fn peak(spans: &[(i64, i64)]) -> u32 {
    let mut edges: Vec<(i64, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    most as u32
}

/// From `203.0.113.66`: at 13:21 `friendly-scanner` probes with OPTIONS, then tries users 100
/// to 160 with two passwords each (every chain: 401, then 403 to the credentials); at 13:40
/// `sipvicious` does the same from another port, answered 401 twice. Ten chains a second.
pub(super) fn scanner(b: &mut Builder, site: &Site) {
    let source = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 66));
    let users: Vec<String> = (100..=160).map(|u: u32| u.to_string()).collect();
    let phases = [
        ("friendly-scanner", 5070, 13 * 60 + 21, Second::Forbidden, 3),
        ("sipvicious", 5061, 13 * 60 + 40, Second::Challenged, 2),
    ];
    let mut failed = 0;
    let mut probes = 0;
    for (ua, port, minute, second, n_options) in phases {
        let scanner = Agent {
            user: "sipvicious".into(),
            addr: SocketAddr::new(source, port),
            domain: source,
            user_agent: ua.into(),
            media_ip: source,
        };
        let mut t = b.day0 + i64::from(minute) * 60 * SECOND;
        for user in users.iter().take(n_options) {
            let seed = b.rng.next_u64();
            let call_id = format!("{:x}", seed >> 4);
            let tag = format!("{:x}", seed as u32);
            let [probe, answer] = options(&scanner, &site.pbx, user, &call_id, &tag);
            b.tl.sip(t, scanner.addr, site.pbx.addr, probe);
            b.tl.sip(t + 2 * MS, site.pbx.addr, scanner.addr, answer);
            probes += 1;
            t += 200 * MS;
        }
        for user in &users {
            for _password in 0..2 {
                let seed = b.rng.next_u64();
                let r = Register {
                    agent: &scanner,
                    user,
                    registrar: &site.pbx,
                    call_id: &format!("{:x}", seed >> 4),
                    from_tag: &format!("{:x}", seed as u32),
                    branch: &format!("{:x}", seed >> 12),
                    expires_s: 3600,
                };
                let truth = call::register(&mut b.tl, &r, t, 40, second, seed);
                b.truth.registrations.push(truth);
                failed += 1;
                t += 100 * MS;
            }
        }
    }
    b.truth.options = probes;
    b.truth.scanner = Some(ScannerTruth {
        source,
        user_agents: phases.iter().map(|p| p.0.to_string()).collect(),
        users,
        failed_chains: failed,
        options_probes: probes as u32,
    });
}

/// The PBX's second leg, `10.0.0.2`, sends 18 calls to the trunk `198.51.100.20` every five
/// minutes from 10:00; call `3k+2` is answered `503 Service Unavailable` at once, the others
/// connect with 1.5-3 s of audio.
pub(super) fn trunk_503(b: &mut Builder) {
    let pbx_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5060);
    let trunk_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 20)), 5060);
    let server = |addr: SocketAddr, ua: &str| Agent {
        user: "trunk".into(),
        addr,
        domain: addr.ip(),
        user_agent: ua.into(),
        media_ip: addr.ip(),
    };
    let pbx = server(pbx_addr, super::PBX_UA);
    let trunk = server(trunk_addr, "carrier-sbc 4.2.1");
    const CALLS: u32 = 18;
    let mut failed = Vec::new();
    for i in 0..CALLS {
        let seed = b.rng.next_u64();
        let end = if i % 3 == 2 {
            End::Refused {
                status: "503 Service Unavailable",
            }
        } else {
            End::Answered {
                media_ms: b.between(75, 150) * call::PTIME_MS,
                caller_hangs_up: i.is_multiple_of(2),
                media: [Media::Full; 2],
            }
        };
        let start_ns = b.day0 + 10 * HOUR + i64::from(i) * 5 * 60 * SECOND;
        let ring_ms = b.between(2_000, 5_000);
        let t = call::call(
            &mut b.tl,
            &CallPlan {
                background: false,
                call_id: format!(
                    "{seed:016x}{:016x}@{}:5060",
                    seed.rotate_left(29) ^ 0x6a09_e667_f3bc_c908,
                    pbx_addr.ip()
                ),
                caller: &pbx,
                callee: &trunk,
                calling: format!("+442079460{:03}", 100 + i),
                called: format!("+441632960{:03}", 200 + i),
                start_ns,
                ring_ms,
                end,
                pt: 8,
                ports: [(14_000 + 2 * i) as u16, (30_000 + 2 * i) as u16],
                seed,
            },
        );
        if t.final_code == 503 {
            failed.push(t.call_id.clone());
        }
        b.truth.calls.push(t);
    }
    b.truth.trunk = Some(Trunk503Truth {
        pbx: pbx_addr,
        trunk: trunk_addr,
        calls: CALLS,
        share_pct: 100.0 * failed.len() as f64 / f64::from(CALLS),
        failed_call_ids: failed,
    });
}
