//! Classic BPF (the `struct sock_filter` programs of `SO_ATTACH_FILTER`): the instruction type,
//! the kernel's validity rules, and a user-space interpreter that gives the kernel's verdicts,
//! so that compiled filters can be tested on packets without a socket.
//!
//! The interpreter follows Linux's `bpf_prog_run` for classic programs: a load outside the
//! packet ends the program with verdict 0 (reject), as does a division by zero; the two VLAN
//! ancillary loads (`SKF_AD_VLAN_TAG`, `SKF_AD_VLAN_TAG_PRESENT`) read the tag the kernel keeps
//! beside the frame (see [`Packet::vlan_tci`]). Other ancillary loads are refused by
//! [`validate`], since Tandem's compiler never emits them.

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl Insn {
    pub const fn stmt(code: u16, k: u32) -> Insn {
        Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }
}

// Instruction classes and fields, from <linux/filter.h> / <linux/bpf_common.h>.
pub const LD: u16 = 0x00;
pub const LDX: u16 = 0x01;
pub const ST: u16 = 0x02;
pub const STX: u16 = 0x03;
pub const ALU: u16 = 0x04;
pub const JMP: u16 = 0x05;
pub const RET: u16 = 0x06;
pub const MISC: u16 = 0x07;
pub const W: u16 = 0x00;
pub const H: u16 = 0x08;
pub const B: u16 = 0x10;
pub const IMM: u16 = 0x00;
pub const ABS: u16 = 0x20;
pub const IND: u16 = 0x40;
pub const MEM: u16 = 0x60;
pub const LEN: u16 = 0x80;
pub const MSH: u16 = 0xa0;
pub const ADD: u16 = 0x00;
pub const SUB: u16 = 0x10;
pub const MUL: u16 = 0x20;
pub const DIV: u16 = 0x30;
pub const OR: u16 = 0x40;
pub const AND: u16 = 0x50;
pub const LSH: u16 = 0x60;
pub const RSH: u16 = 0x70;
pub const NEG: u16 = 0x80;
pub const MOD: u16 = 0x90;
pub const XOR: u16 = 0xa0;
pub const JA: u16 = 0x00;
pub const JEQ: u16 = 0x10;
pub const JGT: u16 = 0x20;
pub const JGE: u16 = 0x30;
pub const JSET: u16 = 0x40;
pub const K: u16 = 0x00;
pub const X: u16 = 0x08;
pub const A: u16 = 0x10;
pub const TAX: u16 = 0x00;
pub const TXA: u16 = 0x80;

/// The kernel's limit on a classic program (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
/// Scratch memory words (`BPF_MEMWORDS`).
pub const MEM_WORDS: u32 = 16;
/// Where ancillary data starts in the load offset space (`SKF_AD_OFF`, -0x1000).
pub const ANC_OFF: u32 = 0xffff_f000;
/// `SKF_AD_VLAN_TAG`: the VLAN TCI the kernel took out of the frame.
pub const ANC_VLAN_TAG: u32 = ANC_OFF + 44;
/// `SKF_AD_VLAN_TAG_PRESENT`: 1 when the frame had a VLAN tag that the kernel took out.
pub const ANC_VLAN_TAG_PRESENT: u32 = ANC_OFF + 48;

/// Why a program is not one the kernel would accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    #[error("BPF program is empty")]
    Empty,
    #[error("BPF program has {0} instructions; the kernel accepts at most {MAX_INSNS}")]
    TooLong(usize),
    #[error("BPF instruction {at} has unknown opcode {code:#06x}")]
    BadOpcode { at: usize, code: u16 },
    #[error("BPF instruction {at} jumps past the end of the program")]
    JumpOutOfRange { at: usize },
    #[error("BPF instruction {at} uses scratch word {k}; there are {MEM_WORDS}")]
    BadMemory { at: usize, k: u32 },
    #[error("BPF instruction {at} divides by the constant 0")]
    DivideByZero { at: usize },
    #[error("BPF instruction {at} reads ancillary data {k:#x}, which is not supported")]
    UnsupportedAncillary { at: usize, k: u32 },
    #[error("BPF program does not end with a return")]
    NoFinalReturn,
}

/// Checks `prog` with the kernel's rules for classic programs (`bpf_check_classic`): known
/// opcodes, forward jumps inside the program, scratch memory in range, no division by a
/// constant zero, a return at the end.
pub fn validate(prog: &[Insn]) -> Result<(), ProgramError> {
    if prog.is_empty() {
        return Err(ProgramError::Empty);
    }
    if prog.len() > MAX_INSNS {
        return Err(ProgramError::TooLong(prog.len()));
    }
    for (at, i) in prog.iter().enumerate() {
        let left = prog.len() - at - 1;
        let bad = || ProgramError::BadOpcode { at, code: i.code };
        match i.code & 0x07 {
            LD => match i.code {
                c if c == LD | W | ABS || c == LD | H | ABS || c == LD | B | ABS => {
                    if i.k >= ANC_OFF && i.k != ANC_VLAN_TAG && i.k != ANC_VLAN_TAG_PRESENT {
                        return Err(ProgramError::UnsupportedAncillary { at, k: i.k });
                    }
                }
                c if c == LD | W | IND || c == LD | H | IND || c == LD | B | IND => {}
                c if c == LD | W | LEN || c == LD | IMM => {}
                c if c == LD | MEM => check_mem(at, i.k)?,
                _ => return Err(bad()),
            },
            LDX => match i.code {
                c if c == LDX | W | IMM || c == LDX | W | LEN || c == LDX | B | MSH => {}
                c if c == LDX | W | MEM => check_mem(at, i.k)?,
                _ => return Err(bad()),
            },
            ST | STX => {
                if i.code & !0x07 != 0 {
                    return Err(bad());
                }
                check_mem(at, i.k)?;
            }
            ALU => {
                let op = i.code & 0xf0;
                if i.code & !0xff != 0 || !matches!(i.code & 0x08, K | X) || op > XOR {
                    return Err(bad());
                }
                if op == NEG && i.code & 0x08 != 0 {
                    return Err(bad());
                }
                if matches!(op, DIV | MOD) && i.code & 0x08 == K && i.k == 0 {
                    return Err(ProgramError::DivideByZero { at });
                }
            }
            JMP => match i.code & 0xf0 {
                JA if i.code == JMP | JA => {
                    if i.k as usize >= left {
                        return Err(ProgramError::JumpOutOfRange { at });
                    }
                }
                JEQ | JGT | JGE | JSET if i.code & !0xf8 == JMP => {
                    if i.jt as usize >= left || i.jf as usize >= left {
                        return Err(ProgramError::JumpOutOfRange { at });
                    }
                }
                _ => return Err(bad()),
            },
            RET => {
                if !matches!(i.code, c if c == RET | K || c == RET | A) {
                    return Err(bad());
                }
            }
            _ => {
                if i.code != MISC | TAX && i.code != MISC | TXA {
                    return Err(bad());
                }
            }
        }
    }
    if prog[prog.len() - 1].code & 0x07 != RET {
        return Err(ProgramError::NoFinalReturn);
    }
    Ok(())
}

fn check_mem(at: usize, k: u32) -> Result<(), ProgramError> {
    if k >= MEM_WORDS {
        return Err(ProgramError::BadMemory { at, k });
    }
    Ok(())
}

/// A frame as a socket filter sees it: the bytes from the link-layer header on, and the VLAN
/// tag the kernel may have taken out of them (Linux removes the outer 802.1Q/802.1ad tag on
/// receive and keeps it beside the frame; a frame read from a file has its tags inline).
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    pub data: &'a [u8],
    pub vlan_tci: Option<u16>,
}

/// Runs a program that [`validate`] accepted and returns its verdict: the number of bytes to
/// keep, 0 to reject. A program that was not validated may give any verdict but never panics
/// or loops (jumps are forward only, and an out-of-range jump ends with 0).
pub fn run(prog: &[Insn], pkt: Packet<'_>) -> u32 {
    let data = pkt.data;
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; MEM_WORDS as usize];
    let mut pc = 0usize;
    let load = |off: u32, size: u16| -> Option<u32> {
        let off = off as usize;
        let n = match size {
            W => 4,
            H => 2,
            _ => 1,
        };
        let b = data.get(off..off.checked_add(n)?)?;
        Some(b.iter().fold(0u32, |acc, &v| (acc << 8) | u32::from(v)))
    };
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let src = if i.code & 0x08 == X { x } else { i.k };
        match i.code & 0x07 {
            LD => {
                a = match i.code & 0xe0 {
                    ABS if i.k >= ANC_OFF => match i.k {
                        ANC_VLAN_TAG => u32::from(pkt.vlan_tci.unwrap_or(0)),
                        ANC_VLAN_TAG_PRESENT => u32::from(pkt.vlan_tci.is_some()),
                        _ => return 0,
                    },
                    ABS => match load(i.k, i.code & 0x18) {
                        Some(v) => v,
                        None => return 0,
                    },
                    IND => match x.checked_add(i.k).and_then(|o| load(o, i.code & 0x18)) {
                        Some(v) => v,
                        None => return 0,
                    },
                    LEN => data.len() as u32,
                    IMM => i.k,
                    MEM => mem[(i.k % MEM_WORDS) as usize],
                    _ => return 0,
                }
            }
            LDX => {
                x = match i.code & 0xe0 {
                    IMM => i.k,
                    LEN => data.len() as u32,
                    MEM => mem[(i.k % MEM_WORDS) as usize],
                    MSH => match load(i.k, B) {
                        Some(v) => (v & 0x0f) * 4,
                        None => return 0,
                    },
                    _ => return 0,
                }
            }
            ST => mem[(i.k % MEM_WORDS) as usize] = a,
            STX => mem[(i.k % MEM_WORDS) as usize] = x,
            ALU => {
                a = match i.code & 0xf0 {
                    ADD => a.wrapping_add(src),
                    SUB => a.wrapping_sub(src),
                    MUL => a.wrapping_mul(src),
                    DIV if src == 0 => return 0,
                    DIV => a / src,
                    MOD if src == 0 => return 0,
                    MOD => a % src,
                    OR => a | src,
                    AND => a & src,
                    XOR => a ^ src,
                    // The shift count is taken modulo 32, as x86 does for the kernel's
                    // translated program; Tandem's compiler never shifts.
                    LSH => a.wrapping_shl(src),
                    RSH => a.wrapping_shr(src),
                    NEG => a.wrapping_neg(),
                    _ => return 0,
                }
            }
            JMP => {
                let skip = match i.code & 0xf0 {
                    JA => i.k as usize,
                    op => {
                        let taken = match op {
                            JEQ => a == src,
                            JGT => a > src,
                            JGE => a >= src,
                            JSET => a & src != 0,
                            _ => return 0,
                        };
                        usize::from(if taken { i.jt } else { i.jf })
                    }
                };
                pc = match pc.checked_add(skip) {
                    Some(p) if p < prog.len() => p,
                    _ => return 0,
                };
            }
            RET => return if i.code & 0x18 == A { a } else { i.k },
            _ => {
                if i.code & 0xf8 == TXA {
                    a = x;
                } else {
                    x = a;
                }
            }
        }
    }
    0
}

/// Reads a program in the C-array form `tcpdump -dd` prints (`{ 0x28, 0, 0, 0x0000000c },`
/// per line). Used to compare Tandem's programs with libpcap's on the same packets.
pub fn parse_c_array(text: &str) -> Result<Vec<Insn>, String> {
    let mut prog = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let inner = line
            .trim_end_matches(',')
            .strip_prefix('{')
            .and_then(|l| l.strip_suffix('}'))
            .ok_or_else(|| format!("line {}: not an instruction: {line:?}", n + 1))?;
        let fields: Vec<u64> = inner
            .split(',')
            .map(|f| {
                let f = f.trim();
                match f.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => f.parse(),
                }
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("line {}: {e}: {line:?}", n + 1))?;
        let [code, jt, jf, k] = fields[..] else {
            return Err(format!("line {}: expected 4 fields: {line:?}", n + 1));
        };
        let narrow = |v: u64, max: u64| {
            (v <= max)
                .then_some(v)
                .ok_or_else(|| format!("line {}: field {v} out of range", n + 1))
        };
        prog.push(Insn {
            code: narrow(code, 0xffff)? as u16,
            jt: narrow(jt, 0xff)? as u8,
            jf: narrow(jf, 0xff)? as u8,
            k: narrow(k, 0xffff_ffff)? as u32,
        });
    }
    Ok(prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(data: &[u8]) -> Packet<'_> {
        Packet {
            data,
            vlan_tci: None,
        }
    }

    #[test]
    fn a_load_past_the_end_rejects_like_the_kernel() {
        let prog = [Insn::stmt(LD | H | ABS, 12), Insn::stmt(RET | K, 1)];
        validate(&prog).unwrap();
        assert_eq!(run(&prog, pkt(&[0; 13])), 0);
        assert_eq!(run(&prog, pkt(&[0; 14])), 1);
    }

    #[test]
    fn msh_reads_the_ipv4_header_length() {
        // x = 4 * (byte 0 & 0xf); A = byte at x; return A.
        let prog = [
            Insn::stmt(LDX | B | MSH, 0),
            Insn::stmt(LD | B | IND, 0),
            Insn::stmt(RET | A, 0),
        ];
        let mut data = [0u8; 24];
        data[0] = 0x45;
        data[20] = 7;
        assert_eq!(run(&prog, pkt(&data)), 7);
    }

    #[test]
    fn ancillary_vlan_loads_read_the_tag_beside_the_frame() {
        let prog = [
            Insn::stmt(LD | B | ABS, ANC_VLAN_TAG_PRESENT),
            Insn::jump(JMP | JEQ | K, 1, 0, 1),
            Insn::stmt(LD | W | ABS, ANC_VLAN_TAG),
            Insn::stmt(RET | A, 0),
        ];
        validate(&prog).unwrap();
        let tagged = Packet {
            data: &[],
            vlan_tci: Some(0x2064),
        };
        assert_eq!(run(&prog, tagged), 0x2064);
        assert_eq!(run(&prog, pkt(&[])), 0);
    }

    #[test]
    fn validation_refuses_what_the_kernel_refuses() {
        assert_eq!(validate(&[]), Err(ProgramError::Empty));
        let jump_out = [Insn::jump(JMP | JEQ | K, 0, 1, 0), Insn::stmt(RET | K, 0)];
        assert_eq!(
            validate(&jump_out),
            Err(ProgramError::JumpOutOfRange { at: 0 })
        );
        let no_ret = [Insn::stmt(LD | IMM, 0)];
        assert_eq!(validate(&no_ret), Err(ProgramError::NoFinalReturn));
        let div0 = [Insn::stmt(ALU | DIV | K, 0), Insn::stmt(RET | A, 0)];
        assert_eq!(validate(&div0), Err(ProgramError::DivideByZero { at: 0 }));
        let mem = [Insn::stmt(ST, 16), Insn::stmt(RET | A, 0)];
        assert_eq!(
            validate(&mem),
            Err(ProgramError::BadMemory { at: 0, k: 16 })
        );
    }

    #[test]
    fn tcpdump_dd_output_parses() {
        let text = "{ 0x28, 0, 0, 0x0000000c },\n{ 0x15, 0, 1, 0x00000800 },\n{ 0x6, 0, 0, 0x00040000 },\n{ 0x6, 0, 0, 0x00000000 },\n";
        let prog = parse_c_array(text).unwrap();
        assert_eq!(prog.len(), 4);
        assert_eq!(prog[1], Insn::jump(JMP | JEQ | K, 0x800, 0, 1));
        validate(&prog).unwrap();
        assert!(parse_c_array("{ 1, 2 },").is_err());
    }
}
