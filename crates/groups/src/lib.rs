//! Named groups of calls: a carrier's signalling addresses, a customer's number range, a site.
//!
//! `[[groups]]` in tandem.toml, each with a `name`, `addresses` (IPs and CIDRs, IPv4 or IPv6)
//! and `numbers` (prefixes of a number, `+49`, `0049`, `1001`): a call is in a group when
//! either of its signalling addresses is in one of the group's networks, or its caller or its
//! called number starts with one of the group's prefixes. Every call is also in the implicit
//! group [`ALL`], which is never configured.
//!
//! [`Groups::new`] checks every entry and reports every problem at once, each naming the group
//! (`[[groups]] #2 "carrier-a"`) and the value; the number of groups and of entries is bounded
//! ([`GROUPS_MAX`], [`ADDRESSES_MAX`], [`NUMBERS_MAX`]). [`Groups::of_call`] answers the set of
//! a call's groups in a hash lookup per distinct prefix length configured (at most 129 for
//! addresses, [`NUMBER_PREFIX_BYTES_MAX`] for numbers), whatever the number of entries.
//!
//! Numbers are compared as written, byte for byte: `+49` and `0049` are two prefixes; list
//! both when calls carry both forms.
//!
//! Never: does IO, allocates beyond its bounds, or reads the network. Start at [`Groups::new`]
//! and [`Groups::of_call`]; users are the CDR store's rollups and search (`cdr`), and the alert
//! rules' `group` scope (`alerts`).

use std::collections::HashMap;
use std::net::IpAddr;

/// The implicit group every call is in. A configured group may not take this name.
pub const ALL: &str = "all";
/// Most groups configured.
pub const GROUPS_MAX: usize = 256;
/// Most addresses (IPs and CIDRs) over all groups.
pub const ADDRESSES_MAX: usize = 65_536;
/// Most number prefixes over all groups.
pub const NUMBERS_MAX: usize = 65_536;
/// Longest group name, in bytes (letters, digits, `-`, `_`, `.`).
pub const NAME_BYTES_MAX: usize = 64;
/// Longest number prefix, in bytes.
pub const NUMBER_PREFIX_BYTES_MAX: usize = 32;
/// Most problems listed in one error (the rest are counted).
const PROBLEMS_SHOWN_MAX: usize = 20;

/// One `[[groups]]` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: String,
    /// IPs and CIDRs (`192.0.2.10`, `198.51.100.0/24`, `2001:db8::/32`).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Prefixes of the caller or the called number.
    #[serde(default)]
    pub numbers: Vec<String>,
}

/// Every problem of a `[[groups]]` list, each naming its entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[[groups]]: {}", .problems.join("; "))]
pub struct GroupsError {
    pub problems: Vec<String>,
}

/// A set of configured groups, by index (at most [`GROUPS_MAX`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GroupSet([u64; GROUPS_MAX / 64]);

impl GroupSet {
    pub fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    pub fn contains(&self, i: usize) -> bool {
        i < GROUPS_MAX && self.0[i / 64] & (1 << (i % 64)) != 0
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    /// The indexes in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..GROUPS_MAX).filter(|i| self.contains(*i))
    }
}

/// An IP network as a 16-byte range (IPv4 as IPv4-mapped IPv6, `::ffff:a.b.c.d`, which is how
/// the CDR store keeps signalling addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    pub addr: IpAddr,
    /// The prefix length as written (32 or 128 for a single address).
    pub prefix: u8,
}

impl Network {
    /// Parses `ip` or `ip/len`.
    pub fn parse(text: &str) -> Result<Network, String> {
        let (ip, len) = match text.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or CIDR"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("{text:?}: the prefix length must be 0 to {max}")),
            },
        };
        Ok(Network { addr, prefix })
    }

    /// The prefix length over the 16-byte form (IPv4's plus 96).
    fn prefix_v6(&self) -> u8 {
        if self.addr.is_ipv4() {
            self.prefix + 96
        } else {
            self.prefix
        }
    }

    /// The lowest and the highest address, as 16 bytes.
    pub fn range(&self) -> ([u8; 16], [u8; 16]) {
        let a = u128::from_be_bytes(bytes16(self.addr));
        let host = host_mask(self.prefix_v6());
        ((a & !host).to_be_bytes(), (a | host).to_be_bytes())
    }

    pub fn to_text(&self) -> String {
        let max = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == max {
            self.addr.to_string()
        } else {
            format!("{}/{}", self.addr, self.prefix)
        }
    }
}

fn host_mask(prefix_v6: u8) -> u128 {
    if prefix_v6 >= 128 {
        0
    } else {
        u128::MAX >> prefix_v6
    }
}

/// An address as 16 bytes, IPv4 mapped.
pub fn bytes16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP of a signalling address as the CDRs write it (`192.0.2.1:5060`, `[2001:db8::1]:5060`,
/// or a bare IP); `None` when it holds none.
pub fn ip_of_addr(addr: &str) -> Option<IpAddr> {
    if let Ok(ip) = addr.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    addr.rsplit_once(':')?.0.parse().ok()
}

/// One configured group, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub addresses: Vec<Network>,
    pub numbers: Vec<String>,
}

/// What [`Groups::of_call`] looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallKeys<'a> {
    pub caller: &'a str,
    pub called: &'a str,
    pub caller_ip: Option<IpAddr>,
    pub callee_ip: Option<IpAddr>,
}

/// The configured groups and their lookup tables.
#[derive(Debug, Clone, Default)]
pub struct Groups {
    groups: Vec<Group>,
    /// Per prefix length over the 16-byte form (distinct lengths only, longest first): the
    /// masked network to the groups holding it.
    by_network: Vec<(u8, HashMap<u128, GroupSet>)>,
    /// Per prefix length in bytes (distinct lengths only): the prefix to the groups holding it.
    by_number: Vec<(usize, HashMap<String, GroupSet>)>,
}

/// Two sets of groups are equal when they were configured alike (the lookup tables follow).
impl PartialEq for Groups {
    fn eq(&self, other: &Groups) -> bool {
        self.groups == other.groups
    }
}

impl Groups {
    /// No groups: every call is in [`ALL`] only.
    pub fn none() -> Groups {
        Groups::default()
    }

    /// Checks `configs` (every problem at once) and builds the lookup tables.
    pub fn new(configs: &[GroupConfig]) -> Result<Groups, GroupsError> {
        let mut problems: Vec<String> = Vec::new();
        if configs.len() > GROUPS_MAX {
            problems.push(format!(
                "{} groups are configured; at most {GROUPS_MAX} are allowed",
                configs.len()
            ));
        }
        let total_addresses: usize = configs.iter().map(|c| c.addresses.len()).sum();
        if total_addresses > ADDRESSES_MAX {
            problems.push(format!(
                "{total_addresses} addresses over all groups; at most {ADDRESSES_MAX} are allowed"
            ));
        }
        let total_numbers: usize = configs.iter().map(|c| c.numbers.len()).sum();
        if total_numbers > NUMBERS_MAX {
            problems.push(format!(
                "{total_numbers} number prefixes over all groups; at most {NUMBERS_MAX} are allowed"
            ));
        }
        if !problems.is_empty() {
            return Err(GroupsError { problems });
        }
        let mut groups = Vec::with_capacity(configs.len());
        for (i, c) in configs.iter().enumerate() {
            let shown: String = c.name.chars().take(NAME_BYTES_MAX).collect();
            let entry = format!("#{} {shown:?}", i + 1);
            let mut say = |p: String| problems.push(format!("{entry}: {p}"));
            if let Err(p) = check_name(&c.name) {
                say(p);
            } else if configs[..i].iter().any(|o| o.name == c.name) {
                say("the name is taken by an earlier group".to_string());
            }
            if c.addresses.is_empty() && c.numbers.is_empty() {
                say("no addresses and no numbers: the group could hold no call".to_string());
            }
            let mut addresses = Vec::with_capacity(c.addresses.len());
            for (j, a) in c.addresses.iter().enumerate() {
                match Network::parse(a.trim()) {
                    Ok(n) => addresses.push(n),
                    Err(p) => say(format!("addresses[{j}]: {p}")),
                }
            }
            let mut numbers = Vec::with_capacity(c.numbers.len());
            for (j, n) in c.numbers.iter().enumerate() {
                match check_number(n.trim()) {
                    Ok(()) => numbers.push(n.trim().to_string()),
                    Err(p) => say(format!("numbers[{j}]: {p}")),
                }
            }
            groups.push(Group {
                name: c.name.clone(),
                addresses,
                numbers,
            });
        }
        if !problems.is_empty() {
            let more = problems.len().saturating_sub(PROBLEMS_SHOWN_MAX);
            problems.truncate(PROBLEMS_SHOWN_MAX);
            if more > 0 {
                problems.push(format!("and {more} more"));
            }
            return Err(GroupsError { problems });
        }
        Ok(Groups::build(groups))
    }

    fn build(groups: Vec<Group>) -> Groups {
        let mut by_network: HashMap<u8, HashMap<u128, GroupSet>> = HashMap::new();
        let mut by_number: HashMap<usize, HashMap<String, GroupSet>> = HashMap::new();
        for (i, g) in groups.iter().enumerate() {
            for n in &g.addresses {
                let len = n.prefix_v6();
                let key = u128::from_be_bytes(n.range().0);
                by_network
                    .entry(len)
                    .or_default()
                    .entry(key)
                    .or_default()
                    .insert(i);
            }
            for p in &g.numbers {
                by_number
                    .entry(p.len())
                    .or_default()
                    .entry(p.clone())
                    .or_default()
                    .insert(i);
            }
        }
        let mut by_network: Vec<_> = by_network.into_iter().collect();
        by_network.sort_by_key(|(len, _)| std::cmp::Reverse(*len));
        let mut by_number: Vec<_> = by_number.into_iter().collect();
        by_number.sort_by_key(|(len, _)| *len);
        Groups {
            groups,
            by_network,
            by_number,
        }
    }

    /// The configured groups, in the order written (a [`GroupSet`]'s indexes).
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The group named `name` (not [`ALL`], which is not configured).
    pub fn get(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The configured groups a call is in ([`ALL`] aside).
    pub fn of_call(&self, call: &CallKeys<'_>) -> GroupSet {
        let mut set = GroupSet::default();
        if self.groups.is_empty() {
            return set;
        }
        for ip in [call.caller_ip, call.callee_ip].into_iter().flatten() {
            let a = u128::from_be_bytes(bytes16(ip));
            for (len, map) in &self.by_network {
                if let Some(s) = map.get(&(a & !host_mask(*len))) {
                    union(&mut set, s);
                }
            }
        }
        for number in [call.caller, call.called] {
            for (len, map) in &self.by_number {
                if number.len() < *len {
                    break;
                }
                let Some(prefix) = number.get(..*len) else {
                    continue;
                };
                if let Some(s) = map.get(prefix) {
                    union(&mut set, s);
                }
            }
        }
        set
    }

    /// The names of the groups a call is in, [`ALL`] first.
    pub fn names_of_call(&self, call: &CallKeys<'_>) -> Vec<&str> {
        let set = self.of_call(call);
        std::iter::once(ALL)
            .chain(set.iter().map(|i| self.groups[i].name.as_str()))
            .collect()
    }
}

fn union(set: &mut GroupSet, other: &GroupSet) {
    for (a, b) in set.0.iter_mut().zip(other.0.iter()) {
        *a |= *b;
    }
}

/// A group name: 1 to [`NAME_BYTES_MAX`] bytes of letters, digits, `-`, `_` and `.`, and not
/// [`ALL`].
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".to_string());
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "the name is {} bytes; at most {NAME_BYTES_MAX}",
            name.len()
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err("a name is letters, digits, '-', '_' and '.'".to_string());
    }
    if name == ALL {
        return Err(format!(
            "{ALL:?} is the implicit group of every call and cannot be configured"
        ));
    }
    Ok(())
}

/// A number prefix: 1 to [`NUMBER_PREFIX_BYTES_MAX`] bytes of digits, `+`, `*`, `#` and letters
/// (a SIP user part may be a name).
fn check_number(n: &str) -> Result<(), String> {
    if n.is_empty() {
        return Err("an empty prefix would match every call; use the group \"all\"".to_string());
    }
    if n.len() > NUMBER_PREFIX_BYTES_MAX {
        return Err(format!(
            "{n:?} is {} bytes; at most {NUMBER_PREFIX_BYTES_MAX}",
            n.len()
        ));
    }
    if !n
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"+*#-_.".contains(&b))
    {
        return Err(format!(
            "{n:?}: a prefix is digits, '+', '*', '#' and letters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct File {
        groups: Vec<GroupConfig>,
    }

    fn parse(text: &str) -> Result<Groups, GroupsError> {
        let f: File = toml::from_str(text).expect("toml");
        Groups::new(&f.groups)
    }

    fn keys<'a>(caller: &'a str, called: &'a str, a: &str, b: &str) -> CallKeys<'a> {
        CallKeys {
            caller,
            called,
            caller_ip: ip_of_addr(a),
            callee_ip: ip_of_addr(b),
        }
    }

    const CONFIG: &str = r#"
        [[groups]]
        name = "carrier-a"
        addresses = ["198.51.100.0/24", "2001:db8:a::/48"]
        [[groups]]
        name = "customer-b"
        numbers = ["+4930", "004930"]
        [[groups]]
        name = "site-c"
        addresses = ["10.1.0.0/16", "10.1.2.3"]
        numbers = ["12"]
    "#;

    #[test]
    fn a_call_is_in_each_group_either_side_matches() {
        let g = parse(CONFIG).unwrap();
        let names = |k: CallKeys<'_>| g.names_of_call(&k).join(" ");
        assert_eq!(
            names(keys("100", "200", "198.51.100.7:5060", "192.0.2.1:5060")),
            "all carrier-a"
        );
        assert_eq!(
            names(keys(
                "100",
                "200",
                "192.0.2.1:5060",
                "[2001:db8:a:ff::1]:5062"
            )),
            "all carrier-a"
        );
        assert_eq!(
            names(keys("+493012345", "1203", "10.1.2.3:5060", "198.51.100.1")),
            "all carrier-a customer-b site-c"
        );
        assert_eq!(
            names(keys(
                "555",
                "00493099",
                "192.0.2.1:5060",
                "[2001:db8:b::1]:5060"
            )),
            "all customer-b"
        );
        assert_eq!(names(keys("1", "", "", "")), "all");
        // An IPv4 network never matches an IPv6 address that is not IPv4-mapped.
        assert_eq!(
            names(keys("", "", "[::c633:6407]:5060", "[::ffff:10.1.9.9]:5060")),
            "all site-c"
        );
        assert!(
            Groups::none()
                .of_call(&keys("1", "2", "10.1.2.3", ""))
                .is_empty()
        );
    }

    #[test]
    fn every_problem_is_named_with_its_entry() {
        let e = parse(
            r#"
            [[groups]]
            name = "all"
            numbers = ["1"]
            [[groups]]
            name = "ok"
            addresses = ["10.0.0.0/33", "nonsense", "2001:db8::/129"]
            numbers = ["", "12 34"]
            [[groups]]
            name = "ok"
            [[groups]]
            name = "bad name"
            numbers = ["1"]
        "#,
        )
        .unwrap_err();
        let text = e.to_string();
        for want in [
            "#1 \"all\": \"all\" is the implicit group",
            "#2 \"ok\": addresses[0]: \"10.0.0.0/33\": the prefix length must be 0 to 32",
            "#2 \"ok\": addresses[1]: \"nonsense\" is not an IP address",
            "#2 \"ok\": addresses[2]: \"2001:db8::/129\": the prefix length must be 0 to 128",
            "#2 \"ok\": numbers[0]: an empty prefix",
            "#2 \"ok\": numbers[1]: \"12 34\"",
            "#3 \"ok\": the name is taken",
            "#3 \"ok\": no addresses and no numbers",
            "#4 \"bad name\": a name is letters",
        ] {
            assert!(text.contains(want), "{want:?} not in {text}");
        }
        let unknown: Result<File, _> = toml::from_str("[[groups]]\nname = \"x\"\nips = []\n");
        assert!(unknown.is_err());
    }

    #[test]
    fn the_bounds_are_enforced() {
        let many: Vec<GroupConfig> = (0..=GROUPS_MAX)
            .map(|i| GroupConfig {
                name: format!("g{i}"),
                numbers: vec!["1".into()],
                ..GroupConfig::default()
            })
            .collect();
        let e = Groups::new(&many).unwrap_err().to_string();
        assert!(e.contains("257 groups are configured; at most 256"), "{e}");
        let most = Groups::new(&many[..GROUPS_MAX]).unwrap();
        let set = most.of_call(&keys("1", "", "", ""));
        assert_eq!(set.iter().count(), GROUPS_MAX);
        let long = GroupConfig {
            name: "x".repeat(NAME_BYTES_MAX + 1),
            numbers: vec!["9".repeat(NUMBER_PREFIX_BYTES_MAX + 1)],
            ..GroupConfig::default()
        };
        let e = Groups::new(&[long]).unwrap_err().to_string();
        assert!(e.contains("the name is 65 bytes; at most 64"), "{e}");
        assert!(e.contains("is 33 bytes; at most 32"), "{e}");
    }

    #[test]
    fn the_lookup_agrees_with_a_plain_scan() {
        // Many overlapping networks and prefixes: the hashed lookup against testing each entry.
        let mut configs = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..40 {
            let mut c = GroupConfig {
                name: format!("g{i}"),
                ..GroupConfig::default()
            };
            for _ in 0..5 {
                let r = next();
                let len = 8 + (r % 25) as u8;
                c.addresses
                    .push(format!("10.{}.{}.0/{len}", (r >> 8) % 4, (r >> 16) % 8));
                c.numbers.push(format!("{}", (r >> 24) % 1000));
            }
            configs.push(c);
        }
        let g = Groups::new(&configs).unwrap();
        for _ in 0..5000 {
            let r = next();
            let a = format!("10.{}.{}.{}:5060", r % 4, (r >> 8) % 8, (r >> 16) % 256);
            let n = format!("{}", (r >> 24) % 100_000);
            let k = keys(&n, "", &a, "");
            let want: Vec<usize> = (0..g.groups().len())
                .filter(|&i| {
                    let grp = &g.groups()[i];
                    let ip = u128::from_be_bytes(bytes16(k.caller_ip.unwrap()));
                    grp.addresses.iter().any(|net| {
                        let (lo, hi) = net.range();
                        (u128::from_be_bytes(lo)..=u128::from_be_bytes(hi)).contains(&ip)
                    }) || grp.numbers.iter().any(|p| n.starts_with(p.as_str()))
                })
                .collect();
            assert_eq!(g.of_call(&k).iter().collect::<Vec<_>>(), want, "{a} {n}");
        }
    }
}
