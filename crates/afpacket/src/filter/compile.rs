//! [`Expr`] → classic BPF for Ethernet frames, in two steps: each primitive becomes a tree of
//! byte tests at fixed or IPv4-header-relative offsets ([`Cond`]), then the tree becomes code
//! with short-circuit jumps to an accept and a reject return.
//!
//! VLAN tags. Linux takes the outer 802.1Q/802.1ad tag out of a received frame and keeps it
//! beside it (readable through the `SKF_AD_VLAN_TAG*` ancillary loads), while a frame read
//! from a file, or an inner tag, is inline. So `vlan` compiles to two alternatives: "the kernel
//! holds a tag, the rest at the same offsets" or "an inline tag, the rest 4 bytes further".
//! Primitives that no `vlan` precedes in their `and` chain match untagged frames only (they
//! check that the kernel holds no tag), so `udp` never matches a tagged frame by accident.

use std::net::IpAddr;

use super::FilterError;
use super::parse::{Dir, Expr, Family, Prim, Transport};
use crate::bpf::{self, Insn};

/// The verdict of an accepted frame: keep it whole (the kernel cuts it to this many bytes).
pub const ACCEPT_BYTES: u32 = 262_144;

const ETH_IPV4: u32 = 0x0800;
const ETH_IPV6: u32 = 0x86dd;
const ETH_VLANS: [u32; 3] = [0x8100, 0x88a8, 0x9100];
const IPV6_FRAGMENT: u32 = 44;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    B,
    H,
    W,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// A fixed offset from the frame's start (or an ancillary offset).
    Abs(Size, u32),
    /// `off` bytes past the IPv4 header that starts at `net` (its length from the IHL).
    AfterIpv4(Size, u32, u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Gt,
    Ge,
    /// Any of the bits of k set.
    Set,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Cond {
    True,
    Test {
        load: Load,
        mask: Option<u32>,
        op: Op,
        k: u32,
    },
    All(Vec<Cond>),
    Any(Vec<Cond>),
    Not(Box<Cond>),
}

fn test(load: Load, op: Op, k: u32) -> Cond {
    Cond::Test {
        load,
        mask: None,
        op,
        k,
    }
}

fn masked(load: Load, mask: u32, k: u32) -> Cond {
    Cond::Test {
        load,
        mask: Some(mask),
        op: Op::Eq,
        k,
    }
}

fn not(c: Cond) -> Cond {
    Cond::Not(Box::new(c))
}

/// Where the headers are for the primitive being compiled.
#[derive(Debug, Clone, Copy)]
struct Loc {
    /// Offset of the ethertype field; the network header follows it.
    ethertype: u32,
    /// No `vlan` consumed yet: the kernel must hold no tag for a plain primitive to match.
    outer: bool,
}

impl Loc {
    fn net(self) -> u32 {
        self.ethertype + 2
    }
}

/// Compiles a parsed expression to a program.
pub(super) fn compile(e: &Expr) -> Result<Vec<Insn>, FilterError> {
    codegen(&lower(e))
}

fn lower(e: &Expr) -> Cond {
    lower_at(
        e,
        Loc {
            ethertype: 12,
            outer: true,
        },
    )
}

fn lower_at(e: &Expr, loc: Loc) -> Cond {
    match e {
        Expr::Or(alts) => Cond::Any(alts.iter().map(|a| lower_at(a, loc)).collect()),
        Expr::And(items) => lower_chain(items, loc),
        Expr::Not(inner) => not(lower_at(inner, loc)),
        Expr::Prim(Prim::Vlan(_)) => lower_chain(std::slice::from_ref(e), loc),
        Expr::Prim(p) => {
            let c = primitive(p, loc);
            if loc.outer {
                Cond::All(vec![no_kernel_tag(), c])
            } else {
                c
            }
        }
    }
}

fn no_kernel_tag() -> Cond {
    test(Load::Abs(Size::B, bpf::ANC_VLAN_TAG_PRESENT), Op::Eq, 0)
}

fn lower_chain(items: &[Expr], loc: Loc) -> Cond {
    let Some((first, rest)) = items.split_first() else {
        return Cond::True;
    };
    let Expr::Prim(Prim::Vlan(id)) = first else {
        return Cond::All(vec![lower_at(first, loc), lower_chain(rest, loc)]);
    };
    let mut alts = Vec::new();
    if loc.outer {
        // The kernel took the tag out: same offsets for the rest.
        let mut held = vec![test(
            Load::Abs(Size::B, bpf::ANC_VLAN_TAG_PRESENT),
            Op::Eq,
            1,
        )];
        if let Some(id) = id {
            held.push(masked(
                Load::Abs(Size::W, bpf::ANC_VLAN_TAG),
                0x0fff,
                u32::from(*id),
            ));
        }
        held.push(lower_chain(
            rest,
            Loc {
                ethertype: loc.ethertype,
                outer: false,
            },
        ));
        alts.push(Cond::All(held));
    }
    let mut inline = Vec::new();
    if loc.outer {
        inline.push(no_kernel_tag());
    }
    let et = Load::Abs(Size::H, loc.ethertype);
    inline.push(Cond::Any(
        ETH_VLANS.iter().map(|v| test(et, Op::Eq, *v)).collect(),
    ));
    if let Some(id) = id {
        inline.push(masked(
            Load::Abs(Size::H, loc.ethertype + 2),
            0x0fff,
            u32::from(*id),
        ));
    }
    inline.push(lower_chain(
        rest,
        Loc {
            ethertype: loc.ethertype + 4,
            outer: false,
        },
    ));
    alts.push(Cond::All(inline));
    Cond::Any(alts)
}

fn is_family(f: Family, loc: Loc) -> Cond {
    let k = match f {
        Family::V4 => ETH_IPV4,
        Family::V6 => ETH_IPV6,
    };
    test(Load::Abs(Size::H, loc.ethertype), Op::Eq, k)
}

/// IPv4 protocol `p` (any fragment).
fn v4_proto(p: u32, loc: Loc) -> Cond {
    Cond::All(vec![
        is_family(Family::V4, loc),
        test(Load::Abs(Size::B, loc.net() + 9), Op::Eq, p),
    ])
}

/// IPv6 next header `p`, directly or behind one fragment header (as libpcap does).
fn v6_proto(p: u32, loc: Loc) -> Cond {
    let nh = Load::Abs(Size::B, loc.net() + 6);
    Cond::All(vec![
        is_family(Family::V6, loc),
        Cond::Any(vec![
            test(nh, Op::Eq, p),
            Cond::All(vec![
                test(nh, Op::Eq, IPV6_FRAGMENT),
                test(Load::Abs(Size::B, loc.net() + 40), Op::Eq, p),
            ]),
        ]),
    ])
}

fn in_range(load: Load, lo: u16, hi: u16) -> Cond {
    if lo == hi {
        return test(load, Op::Eq, u32::from(lo));
    }
    Cond::All(vec![
        test(load, Op::Ge, u32::from(lo)),
        not(test(load, Op::Gt, u32::from(hi))),
    ])
}

/// The port test on a transport header reached by `at(off)`, for a direction.
fn ports(dir: Dir, lo: u16, hi: u16, at: impl Fn(u32) -> Load) -> Cond {
    let src = in_range(at(0), lo, hi);
    let dst = in_range(at(2), lo, hi);
    match dir {
        Dir::Src => src,
        Dir::Dst => dst,
        Dir::Either => Cond::Any(vec![src, dst]),
        Dir::Both => Cond::All(vec![src, dst]),
    }
}

fn port(t: u32, dir: Dir, lo: u16, hi: u16, loc: Loc) -> Cond {
    let net = loc.net();
    // IPv4: only the first fragment carries the ports.
    let v4 = Cond::All(vec![
        v4_proto(t, loc),
        not(test(Load::Abs(Size::H, net + 6), Op::Set, 0x1fff)),
        ports(dir, lo, hi, |off| Load::AfterIpv4(Size::H, net, off)),
    ]);
    let nh = Load::Abs(Size::B, net + 6);
    let v6 = Cond::All(vec![
        is_family(Family::V6, loc),
        Cond::Any(vec![
            Cond::All(vec![
                test(nh, Op::Eq, t),
                ports(dir, lo, hi, |off| Load::Abs(Size::H, net + 40 + off)),
            ]),
            Cond::All(vec![
                test(nh, Op::Eq, IPV6_FRAGMENT),
                test(Load::Abs(Size::B, net + 40), Op::Eq, t),
                not(test(Load::Abs(Size::H, net + 42), Op::Set, 0xfff8)),
                ports(dir, lo, hi, |off| Load::Abs(Size::H, net + 48 + off)),
            ]),
        ]),
    ]);
    Cond::Any(vec![v4, v6])
}

/// Address `addr/prefix` at the address field starting at `field`.
fn address(addr: IpAddr, prefix: u8, field: u32) -> Cond {
    let words: Vec<u32> = match addr {
        IpAddr::V4(a) => vec![u32::from(a)],
        IpAddr::V6(a) => a
            .octets()
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    let mut tests = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let bits = (u32::from(prefix)).saturating_sub(32 * i as u32).min(32);
        if bits == 0 {
            break;
        }
        let load = Load::Abs(Size::W, field + 4 * i as u32);
        if bits == 32 {
            tests.push(test(load, Op::Eq, *w));
        } else {
            let mask = u32::MAX << (32 - bits);
            tests.push(masked(load, mask, w & mask));
        }
    }
    Cond::All(tests)
}

fn primitive(p: &Prim, loc: Loc) -> Cond {
    let net = loc.net();
    match p {
        Prim::Vlan(_) => unreachable!("vlan is lowered by its chain"),
        Prim::Family(f) => is_family(*f, loc),
        Prim::Proto(Some(Family::V4), n) => v4_proto(u32::from(*n), loc),
        Prim::Proto(Some(Family::V6), n) => v6_proto(u32::from(*n), loc),
        Prim::Proto(None, n) => Cond::Any(vec![
            v4_proto(u32::from(*n), loc),
            v6_proto(u32::from(*n), loc),
        ]),
        Prim::Transport(t) => {
            let n = u32::from(t.number());
            Cond::Any(vec![v4_proto(n, loc), v6_proto(n, loc)])
        }
        Prim::Port {
            transport,
            dir,
            lo,
            hi,
        } => match transport {
            Some(t) => port(u32::from(t.number()), *dir, *lo, *hi, loc),
            None => Cond::Any(
                [Transport::Udp, Transport::Tcp]
                    .iter()
                    .map(|t| port(u32::from(t.number()), *dir, *lo, *hi, loc))
                    .collect(),
            ),
        },
        Prim::Net { dir, addr, prefix } => {
            let (family, src, dst) = match addr {
                IpAddr::V4(_) => (Family::V4, net + 12, net + 16),
                IpAddr::V6(_) => (Family::V6, net + 8, net + 24),
            };
            let s = address(*addr, *prefix, src);
            let d = address(*addr, *prefix, dst);
            let which = match dir {
                Dir::Src => s,
                Dir::Dst => d,
                Dir::Either => Cond::Any(vec![s, d]),
                Dir::Both => Cond::All(vec![s, d]),
            };
            Cond::All(vec![is_family(family, loc), which])
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Code generation.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label(usize);

#[derive(Debug, Clone, Copy)]
enum Item {
    Insn(Insn),
    /// A conditional jump (`code`, `k`) to two labels.
    Branch {
        code: u16,
        k: u32,
        t: Label,
        f: Label,
    },
    Goto(Label),
    Place(Label),
}

struct Gen {
    items: Vec<Item>,
    labels: usize,
}

impl Gen {
    fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    fn cond(&mut self, c: &Cond, t: Label, f: Label) {
        match c {
            Cond::True => self.items.push(Item::Goto(t)),
            Cond::Not(inner) => self.cond(inner, f, t),
            Cond::All(v) | Cond::Any(v) if v.is_empty() => {
                let all = matches!(c, Cond::All(_));
                self.items.push(Item::Goto(if all { t } else { f }));
            }
            Cond::All(v) => {
                for (i, c) in v.iter().enumerate() {
                    if i + 1 == v.len() {
                        self.cond(c, t, f);
                    } else {
                        let next = self.label();
                        self.cond(c, next, f);
                        self.items.push(Item::Place(next));
                    }
                }
            }
            Cond::Any(v) => {
                for (i, c) in v.iter().enumerate() {
                    if i + 1 == v.len() {
                        self.cond(c, t, f);
                    } else {
                        let next = self.label();
                        self.cond(c, t, next);
                        self.items.push(Item::Place(next));
                    }
                }
            }
            Cond::Test { load, mask, op, k } => {
                let size = |s: Size| match s {
                    Size::B => bpf::B,
                    Size::H => bpf::H,
                    Size::W => bpf::W,
                };
                match *load {
                    Load::Abs(s, off) => self
                        .items
                        .push(Item::Insn(Insn::stmt(bpf::LD | size(s) | bpf::ABS, off))),
                    Load::AfterIpv4(s, net, off) => {
                        self.items
                            .push(Item::Insn(Insn::stmt(bpf::LDX | bpf::B | bpf::MSH, net)));
                        self.items.push(Item::Insn(Insn::stmt(
                            bpf::LD | size(s) | bpf::IND,
                            net + off,
                        )));
                    }
                }
                if let Some(m) = mask {
                    self.items
                        .push(Item::Insn(Insn::stmt(bpf::ALU | bpf::AND | bpf::K, *m)));
                }
                let code = bpf::JMP
                    | bpf::K
                    | match op {
                        Op::Eq => bpf::JEQ,
                        Op::Gt => bpf::JGT,
                        Op::Ge => bpf::JGE,
                        Op::Set => bpf::JSET,
                    };
                self.items.push(Item::Branch { code, k: *k, t, f });
            }
        }
    }
}

/// Compiles the lowered tree to a program: `ret ACCEPT_BYTES` when it holds, `ret 0` when not.
fn codegen(c: &Cond) -> Result<Vec<Insn>, FilterError> {
    let mut g = Gen {
        items: Vec::new(),
        labels: 0,
    };
    let (accept, reject) = (g.label(), g.label());
    g.cond(c, accept, reject);
    g.items.push(Item::Place(accept));
    g.items
        .push(Item::Insn(Insn::stmt(bpf::RET | bpf::K, ACCEPT_BYTES)));
    g.items.push(Item::Place(reject));
    g.items.push(Item::Insn(Insn::stmt(bpf::RET | bpf::K, 0)));
    assemble(&g.items, g.labels)
}

/// Lays the items out. A conditional jump reaches at most 255 instructions ahead; one that
/// must go further becomes `jxx 0,1; ja t; ja f`. Widening moves later code, so layout repeats
/// until nothing more needs widening (each round only adds wide jumps, so it ends).
fn assemble(items: &[Item], labels: usize) -> Result<Vec<Insn>, FilterError> {
    let mut wide = vec![false; items.len()];
    loop {
        // Positions of labels and items for this round's widths.
        let mut at = vec![0usize; labels];
        let mut pos = Vec::with_capacity(items.len());
        let mut n = 0usize;
        for (i, item) in items.iter().enumerate() {
            pos.push(n);
            match item {
                Item::Insn(_) | Item::Goto(_) => n += 1,
                Item::Branch { .. } => n += if wide[i] { 3 } else { 1 },
                Item::Place(l) => at[l.0] = n,
            }
        }
        let mut changed = false;
        for (i, item) in items.iter().enumerate() {
            if let Item::Branch { t, f, .. } = item
                && !wide[i]
            {
                let far = |l: &Label| at[l.0] - (pos[i] + 1) > 255;
                if far(t) || far(f) {
                    wide[i] = true;
                    changed = true;
                }
            }
        }
        if changed {
            continue;
        }
        if n > bpf::MAX_INSNS {
            return Err(FilterError::too_large(n));
        }
        let mut prog = Vec::with_capacity(n);
        for (i, item) in items.iter().enumerate() {
            let here = prog.len();
            match *item {
                Item::Insn(insn) => prog.push(insn),
                Item::Goto(l) => prog.push(Insn::stmt(
                    bpf::JMP | bpf::JA,
                    (at[l.0] - (here + 1)) as u32,
                )),
                Item::Branch { code, k, t, f } if wide[i] => {
                    prog.push(Insn::jump(code, k, 0, 1));
                    prog.push(Insn::stmt(
                        bpf::JMP | bpf::JA,
                        (at[t.0] - (here + 2)) as u32,
                    ));
                    prog.push(Insn::stmt(
                        bpf::JMP | bpf::JA,
                        (at[f.0] - (here + 3)) as u32,
                    ));
                }
                Item::Branch { code, k, t, f } => prog.push(Insn::jump(
                    code,
                    k,
                    (at[t.0] - (here + 1)) as u8,
                    (at[f.0] - (here + 1)) as u8,
                )),
                Item::Place(_) => {}
            }
        }
        return Ok(prog);
    }
}
