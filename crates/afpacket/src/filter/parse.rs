//! The pcap-filter subset's parser: text → [`Expr`]. Bounded: the text length, the nesting
//! depth and the number of primitives are capped, so that no expression makes the compiler
//! work without end.

use std::net::IpAddr;

use super::FilterError;

/// Longest filter text accepted.
pub const MAX_FILTER_BYTES: usize = 4096;
/// Deepest nesting of parentheses and `not`.
pub const MAX_DEPTH: usize = 32;
/// Most primitives in one filter.
pub const MAX_PRIMITIVES: usize = 64;
/// Most `vlan` primitives in one filter (each one doubles the code that follows it).
pub const MAX_VLANS: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Or(Vec<Expr>),
    /// An `and` chain; a `vlan` element moves the elements after it behind the tag.
    And(Vec<Expr>),
    Not(Box<Expr>),
    Prim(Prim),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub fn number(self) -> u8 {
        match self {
            Transport::Udp => 17,
            Transport::Tcp => 6,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Src,
    Dst,
    /// No qualifier, or `src or dst`.
    Either,
    /// `src and dst`.
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prim {
    /// `vlan` or `vlan ID`.
    Vlan(Option<u16>),
    /// `ip`, `ip6`.
    Family(Family),
    /// `ip proto N`, `ip6 proto N`, `proto N` (either family).
    Proto(Option<Family>, u8),
    /// `udp`, `tcp`.
    Transport(Transport),
    /// `[udp|tcp] [src|dst] port N` and `portrange A-B`.
    Port {
        transport: Option<Transport>,
        dir: Dir,
        lo: u16,
        hi: u16,
    },
    /// `[ip|ip6] [src|dst] host ADDR` and `net ADDR/LEN`.
    Net { dir: Dir, addr: IpAddr, prefix: u8 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    LParen,
    RParen,
    And,
    Or,
    Not,
}

struct Lexer<'a> {
    toks: Vec<(usize, Tok<'a>)>,
}

fn lex(text: &str) -> Result<Lexer<'_>, FilterError> {
    let mut toks = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let two = |s: &str| text[i..].starts_with(s);
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b'!' => Tok::Not,
            b'&' if two("&&") => Tok::And,
            b'|' if two("||") => Tok::Or,
            b'&' | b'|' => {
                return Err(FilterError::at(
                    text,
                    i,
                    format!(
                        "`{}` alone is not an operator; write `and`/`&&` or `or`/`||`",
                        c as char
                    ),
                ));
            }
            _ => {
                while i < b.len() && !b" \t\n\r()!&|".contains(&b[i]) {
                    i += 1;
                }
                toks.push((start, keyword(&text[start..i])));
                continue;
            }
        };
        i += if matches!(tok, Tok::And | Tok::Or) {
            2
        } else {
            1
        };
        toks.push((start, tok));
    }
    Ok(Lexer { toks })
}

fn keyword(w: &str) -> Tok<'_> {
    match w {
        "and" => Tok::And,
        "or" => Tok::Or,
        "not" => Tok::Not,
        _ => Tok::Word(w),
    }
}

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(usize, Tok<'a>)>,
    pos: usize,
    depth: usize,
    prims: usize,
    vlans: usize,
}

/// Parses `text`; the empty string (or only spaces) is `None`, meaning "accept everything".
pub fn parse(text: &str) -> Result<Option<Expr>, FilterError> {
    if text.len() > MAX_FILTER_BYTES {
        return Err(FilterError::at(
            text,
            MAX_FILTER_BYTES,
            format!("filter is longer than {MAX_FILTER_BYTES} bytes"),
        ));
    }
    let lexer = lex(text)?;
    if lexer.toks.is_empty() {
        return Ok(None);
    }
    let mut p = Parser {
        text,
        toks: lexer.toks,
        pos: 0,
        depth: 0,
        prims: 0,
        vlans: 0,
    };
    let e = p.or()?;
    if let Some((at, t)) = p.toks.get(p.pos) {
        let what = match t {
            Tok::RParen => "`)` without a matching `(`".to_string(),
            Tok::Word(w) if w.parse::<u32>().is_ok() => {
                format!("unexpected number `{w}`: repeat the qualifier (`port 5060 or port {w}`)")
            }
            _ => format!("expected `and`, `or` or the end, found {}", describe(t)),
        };
        return Err(FilterError::at(text, *at, what));
    }
    Ok(Some(e))
}

fn describe(t: &Tok<'_>) -> String {
    match t {
        Tok::Word(w) => format!("`{w}`"),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::And => "`and`".into(),
        Tok::Or => "`or`".into(),
        Tok::Not => "`not`".into(),
    }
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok<'a>> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }
    fn peek_at(&self, n: usize) -> Option<&Tok<'a>> {
        self.toks.get(self.pos + n).map(|(_, t)| t)
    }
    fn offset(&self) -> usize {
        self.toks
            .get(self.pos)
            .map_or(self.text.len(), |(at, _)| *at)
    }
    fn err(&self, msg: impl Into<String>) -> FilterError {
        FilterError::at(self.text, self.offset(), msg.into())
    }
    fn word(&mut self) -> Option<&'a str> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = *w;
                self.pos += 1;
                Some(w)
            }
            _ => None,
        }
    }
    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut alts = vec![self.and()?];
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            alts.push(self.and()?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().expect("one element")
        } else {
            Expr::Or(alts)
        })
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut items = vec![self.unary()?];
        while self.peek() == Some(&Tok::And) {
            self.pos += 1;
            items.push(self.unary()?);
        }
        Ok(
            if items.len() == 1 && !matches!(items[0], Expr::Prim(Prim::Vlan(_))) {
                items.pop().expect("one element")
            } else {
                Expr::And(items)
            },
        )
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let e = match self.peek() {
            Some(Tok::Not) => {
                self.pos += 1;
                Expr::Not(Box::new(self.unary()?))
            }
            Some(Tok::LParen) => {
                let open = self.offset();
                self.pos += 1;
                let e = self.or()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(FilterError::at(
                        self.text,
                        open,
                        "`(` is never closed".to_string(),
                    ));
                }
                self.pos += 1;
                e
            }
            Some(Tok::Word(_)) => {
                self.prims += 1;
                if self.prims > MAX_PRIMITIVES {
                    return Err(self.err(format!("more than {MAX_PRIMITIVES} primitives")));
                }
                Expr::Prim(self.primitive()?)
            }
            Some(t) => {
                let t = describe(t);
                return Err(self.err(format!("expected a primitive, `not` or `(`, found {t}")));
            }
            None => return Err(self.err("expression ends where a primitive was expected")),
        };
        self.depth -= 1;
        Ok(e)
    }

    fn number(&mut self, what: &str, max: u32) -> Result<u32, FilterError> {
        let at = self.offset();
        let w = self
            .word()
            .ok_or_else(|| self.err(format!("expected {what}")))?;
        parse_number(w).filter(|n| *n <= max).ok_or_else(|| {
            FilterError::at(
                self.text,
                at,
                format!("expected {what} (0 to {max}), found `{w}`"),
            )
        })
    }

    fn dir(&mut self) -> Result<Option<Dir>, FilterError> {
        let first = match self.peek() {
            Some(Tok::Word("src")) => Dir::Src,
            Some(Tok::Word("dst")) => Dir::Dst,
            _ => return Ok(None),
        };
        self.pos += 1;
        // `src or dst` / `src and dst`: the operator binds to the qualifier, not the expression.
        let other = if first == Dir::Src { "dst" } else { "src" };
        match (self.peek(), self.peek_at(1)) {
            (Some(Tok::Or), Some(Tok::Word(w))) if *w == other => {
                self.pos += 2;
                Ok(Some(Dir::Either))
            }
            (Some(Tok::And), Some(Tok::Word(w))) if *w == other => {
                self.pos += 2;
                Ok(Some(Dir::Both))
            }
            _ => Ok(Some(first)),
        }
    }

    fn primitive(&mut self) -> Result<Prim, FilterError> {
        let at = self.offset();
        let word = self.word().expect("caller saw a word");
        if word == "vlan" {
            self.vlans += 1;
            if self.vlans > MAX_VLANS {
                return Err(FilterError::at(
                    self.text,
                    at,
                    format!("more than {MAX_VLANS} `vlan` primitives"),
                ));
            }
            let id = match self.peek() {
                Some(Tok::Word(w)) if parse_number(w).is_some() => {
                    Some(self.number("a VLAN ID", 4095)? as u16)
                }
                _ => None,
            };
            return Ok(Prim::Vlan(id));
        }
        // Optional protocol qualifier, then optional direction, then the type.
        let (family, transport) = match word {
            "ip" => (Some(Family::V4), None),
            "ip6" => (Some(Family::V6), None),
            "udp" => (None, Some(Transport::Udp)),
            "tcp" => (None, Some(Transport::Tcp)),
            _ => {
                self.pos -= 1;
                (None, None)
            }
        };
        let dir_at = self.offset();
        let dir = self.dir()?;
        let kind_at = self.offset();
        let kind = match self.peek() {
            Some(Tok::Word(w @ ("port" | "portrange" | "host" | "net" | "proto"))) => {
                let w = *w;
                self.pos += 1;
                Some(w)
            }
            _ => None,
        };
        let Some(kind) = kind else {
            if dir.is_some() {
                return Err(FilterError::at(
                    self.text,
                    kind_at,
                    "expected `port`, `portrange`, `host` or `net` after `src`/`dst`".into(),
                ));
            }
            return match (family, transport) {
                (Some(f), _) => Ok(Prim::Family(f)),
                (_, Some(t)) => Ok(Prim::Transport(t)),
                _ if parse_number(word).is_some() => Err(FilterError::at(
                    self.text,
                    at,
                    format!(
                        "unexpected number `{word}`: repeat the qualifier (`port 5060 or port {word}`)"
                    ),
                )),
                _ => Err(FilterError::at(
                    self.text,
                    at,
                    format!(
                        "unknown primitive `{word}`; known: udp, tcp, ip, ip6, vlan, [src|dst] port, portrange, host, net, proto"
                    ),
                )),
            };
        };
        let dir = dir.unwrap_or(Dir::Either);
        match kind {
            "port" | "portrange" => {
                if family.is_some() {
                    return Err(FilterError::at(
                        self.text,
                        at,
                        "qualify a port with `udp` or `tcp`, not `ip`/`ip6` (ports match both families)".into(),
                    ));
                }
                let (lo, hi) = if kind == "port" {
                    let p = self.number("a port number", 65535)? as u16;
                    (p, p)
                } else {
                    let r_at = self.offset();
                    let w = self
                        .word()
                        .ok_or_else(|| self.err("expected a port range A-B"))?;
                    let range = w.split_once('-').and_then(|(a, b)| {
                        let a = parse_number(a).filter(|v| *v <= 65535)?;
                        let b = parse_number(b).filter(|v| *v <= 65535)?;
                        (a <= b).then_some((a as u16, b as u16))
                    });
                    range.ok_or_else(|| {
                        FilterError::at(
                            self.text,
                            r_at,
                            format!("expected a port range A-B with A <= B <= 65535, found `{w}`"),
                        )
                    })?
                };
                Ok(Prim::Port {
                    transport,
                    dir,
                    lo,
                    hi,
                })
            }
            "host" | "net" => {
                if transport.is_some() {
                    return Err(FilterError::at(
                        self.text,
                        at,
                        format!("`{word} {kind}` is not supported; write `{word} and host ...`"),
                    ));
                }
                let a_at = self.offset();
                let w = self
                    .word()
                    .ok_or_else(|| self.err(format!("expected an address after `{kind}`")))?;
                let (addr_text, prefix) = match (kind, w.split_once('/')) {
                    ("net", Some((a, p))) => (a, Some(p)),
                    _ => (w, None),
                };
                let bad = |why: &str| FilterError::at(self.text, a_at, format!("{why}: `{w}`"));
                let addr: IpAddr = addr_text.parse().map_err(|_| {
                    bad("expected an IPv4 or IPv6 address (host names are not resolved)")
                })?;
                let bits = if addr.is_ipv4() { 32 } else { 128 };
                let prefix = match prefix {
                    None => bits,
                    Some(p) => parse_number(p)
                        .filter(|v| *v <= bits as u32)
                        .ok_or_else(|| bad("expected a prefix length after `/`"))?
                        as u8,
                };
                match (family, addr) {
                    (Some(Family::V4), IpAddr::V6(_)) | (Some(Family::V6), IpAddr::V4(_)) => {
                        return Err(bad("the address does not belong to the qualifier's family"));
                    }
                    _ => {}
                }
                if kind == "net" && !host_bits_clear(addr, prefix) {
                    return Err(bad("the address has bits set beyond the prefix length"));
                }
                Ok(Prim::Net { dir, addr, prefix })
            }
            _ => {
                if dir_at != kind_at {
                    return Err(FilterError::at(
                        self.text,
                        dir_at,
                        "`src`/`dst` does not apply to `proto`".into(),
                    ));
                }
                if transport.is_some() {
                    return Err(FilterError::at(
                        self.text,
                        at,
                        format!("`{word} proto` is not supported; use `ip proto` or `ip6 proto`"),
                    ));
                }
                let n_at = self.offset();
                let n = match self.word() {
                    Some("udp") => 17,
                    Some("tcp") => 6,
                    Some(w) => parse_number(w).filter(|v| *v <= 255).ok_or_else(|| {
                        FilterError::at(
                            self.text,
                            n_at,
                            format!(
                                "expected a protocol number (0 to 255), `udp` or `tcp`, found `{w}`"
                            ),
                        )
                    })? as u8,
                    None => return Err(self.err("expected a protocol number after `proto`")),
                };
                Ok(Prim::Proto(family, n))
            }
        }
    }
}

/// Decimal, or hexadecimal with `0x`.
fn parse_number(w: &str) -> Option<u32> {
    match w.strip_prefix("0x") {
        Some(h) if !h.is_empty() => u32::from_str_radix(h, 16).ok(),
        _ if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) => w.parse().ok(),
        _ => None,
    }
}

fn host_bits_clear(addr: IpAddr, prefix: u8) -> bool {
    match addr {
        IpAddr::V4(a) => {
            let v = u32::from(a);
            prefix >= 32 || v & (u32::MAX >> prefix) == 0
        }
        IpAddr::V6(a) => {
            let v = u128::from(a);
            prefix >= 128 || v & (u128::MAX >> prefix) == 0
        }
    }
}
