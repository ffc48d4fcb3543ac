use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn embedded(text: &str) -> Option<String> {
    Countries::embedded()
        .lookup(ip(text))
        .map(|c| c.to_string())
}

#[test]
fn the_embedded_table_knows_the_registries_own_addresses() {
    // Addresses whose registration has not moved in decades: the RIRs' and a few
    // national registries' own servers and well-known resolvers.
    for (address, country) in [
        ("193.0.6.139", "NL"), // RIPE NCC, Amsterdam
        ("2001:67c:2e8:22::c100:68b", "NL"),
        ("202.12.29.205", "AU"), // APNIC, Brisbane
        ("2001:dc0:2001:11::194", "AU"),
        ("200.3.14.10", "UY"),  // LACNIC, Montevideo
        ("81.91.170.12", "DE"), // DENIC, Frankfurt
        ("8.8.8.8", "US"),
        ("2001:4860:4860::8888", "US"),
        ("::ffff:193.0.6.139", "NL"), // as a dual-stack socket reports an IPv4 peer
    ] {
        assert_eq!(embedded(address).as_deref(), Some(country), "{address}");
    }
}

#[test]
fn special_purpose_addresses_have_no_country() {
    for address in [
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.10",
        "100.64.0.1",
        "100.127.255.254",
        "127.0.0.1",
        "169.254.10.20",
        "192.0.2.10",
        "198.51.100.7",
        "203.0.113.200",
        "198.18.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "::ffff:10.0.0.1",
        "fe80::1",
        "fd00::1",
        "2001:db8::1",
        "3fff::1",
        "ff02::1",
        "2001::1",
    ] {
        assert!(is_special(ip(address)), "{address}");
        assert_eq!(embedded(address), None, "{address}");
    }
    // The edges of the blocks are public.
    for address in [
        "172.32.0.1",
        "100.128.0.1",
        "192.0.3.1",
        "11.0.0.1",
        "2001:4860::1",
    ] {
        assert!(!is_special(ip(address)), "{address}");
    }
}

#[test]
fn a_country_is_two_letters() {
    assert_eq!(
        Country::new("de").map(|c| c.to_string()).as_deref(),
        Some("DE")
    );
    for bad in ["", "D", "DEU", "1A", "É"] {
        assert_eq!(Country::new(bad), None, "{bad}");
    }
}

/// Prints the cost of one lookup in the embedded table, half IPv4 and half IPv6 (under
/// `cargo test` a debug build's; `cargo test --release` gives the figure that counts).
#[test]
fn embedded_lookup_cost() {
    let countries = Countries::embedded();
    let addresses: Vec<IpAddr> = (0u32..4096)
        .map(|n| IpAddr::V4(Ipv4Addr::from(n.wrapping_mul(2_654_435_761))))
        .chain((0u128..4096).map(|n| {
            // Inside allocated /32s of each registry, with scattered low bits.
            const BLOCKS: [u128; 8] = [
                0x2001_4860,
                0x2a00_1450,
                0x2001_067c,
                0x2400_cb00,
                0x2606_4700,
                0x2a03_2880,
                0x2001_0dc0,
                0x2800_03f0,
            ];
            let low = n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) >> 32;
            IpAddr::V6(Ipv6Addr::from((BLOCKS[n as usize % 8] << 96) | low))
        }))
        .collect();
    let rounds = 25;
    let started = std::time::Instant::now();
    let mut found = 0usize;
    for _ in 0..rounds {
        for &address in &addresses {
            found += usize::from(std::hint::black_box(countries.lookup(address)).is_some());
        }
    }
    let lookups = rounds * addresses.len();
    println!(
        "embedded lookup: {:.0} ns each over {lookups} lookups ({found} with a country)",
        started.elapsed().as_nanos() as f64 / lookups as f64
    );
}

/// Prints the cost of loading and of one lookup in a database of 20,000 IPv4 and 5,000 IPv6
/// networks with scattered addresses (`cargo test --release` for the figure that counts).
#[test]
fn mmdb_lookup_cost() {
    let mut db = Mmdb::new();
    let records: Vec<Vec<u8>> = ["DE", "FR", "GB", "JP", "US", "BR"]
        .iter()
        .map(|iso| iso_record("country", iso))
        .collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for n in 0..25_000 {
        let record = &records[n % records.len()];
        if n % 5 == 4 {
            let network = (0x2a00u128 << 112) | (u128::from(random() >> 32) << 80);
            db.insert_shared(network, 48, record);
        } else {
            let network = u128::from(random() as u32 & 0xffff_ff00);
            db.insert_shared(network, 96 + 24, record);
        }
    }
    let dir = scratch("cost");
    let path = dir.join("scattered.mmdb");
    std::fs::write(&path, db.bytes("Test-Country")).unwrap();
    let started = std::time::Instant::now();
    let countries = Countries::open_mmdb(&path).unwrap();
    let load = started.elapsed();
    let addresses: Vec<IpAddr> = (0..8192u64)
        .map(|n| {
            if n % 2 == 0 {
                IpAddr::V4(Ipv4Addr::from(random() as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(
                    (0x2a00u128 << 112) | u128::from(random()) << 48,
                ))
            }
        })
        .collect();
    let rounds = 25;
    let started = std::time::Instant::now();
    let mut found = 0usize;
    for _ in 0..rounds {
        for &address in &addresses {
            found += usize::from(std::hint::black_box(countries.lookup(address)).is_some());
        }
    }
    let lookups = rounds * addresses.len();
    println!(
        "mmdb: loaded in {} ms ({countries:?}); lookup: {:.0} ns each over {lookups} lookups \
         ({found} with a country)",
        load.as_millis(),
        started.elapsed().as_nanos() as f64 / lookups as f64
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A MaxMind DB file written by hand from the format's public specification: a binary search
/// tree over the address bits, 16 zero bytes, a data section, then the metadata marker and
/// the metadata map.
struct Mmdb {
    /// Each node's two records (bit 0, bit 1).
    nodes: Vec<[Record; 2]>,
    data: Vec<u8>,
}

#[derive(Clone, Copy)]
enum Record {
    Empty,
    Node(u32),
    Data(u32),
}

impl Mmdb {
    fn new() -> Mmdb {
        Mmdb {
            nodes: vec![[Record::Empty; 2]],
            data: Vec::new(),
        }
    }

    /// `network` as a 128-bit address (an IPv4 network under `::/96`), with its own record.
    fn insert(&mut self, network: u128, prefix_len: u32, record: &[u8]) {
        let offset = self.data.len() as u32;
        self.data.extend_from_slice(record);
        self.insert_at(network, prefix_len, offset);
    }

    /// The same, sharing the record with earlier networks that have its bytes (as a real
    /// database shares one record per country); a network inside an earlier one is skipped.
    fn insert_shared(&mut self, network: u128, prefix_len: u32, record: &[u8]) {
        let offset = match self.data.windows(record.len()).position(|w| w == record) {
            Some(at) => at as u32,
            None => {
                self.data.extend_from_slice(record);
                (self.data.len() - record.len()) as u32
            }
        };
        self.insert_at(network, prefix_len, offset);
    }

    fn insert_at(&mut self, network: u128, prefix_len: u32, offset: u32) {
        let mut node = 0;
        for depth in 0..prefix_len {
            let bit = ((network >> (127 - depth)) & 1) as usize;
            if depth + 1 == prefix_len {
                self.nodes[node][bit] = Record::Data(offset);
                break;
            }
            node = match self.nodes[node][bit] {
                Record::Node(next) => next as usize,
                Record::Empty => {
                    self.nodes.push([Record::Empty; 2]);
                    let next = self.nodes.len() - 1;
                    self.nodes[node][bit] = Record::Node(next as u32);
                    next
                }
                Record::Data(_) => return, // inside an earlier network
            };
        }
    }

    fn bytes(&self, database_type: &str) -> Vec<u8> {
        let node_count = self.nodes.len() as u32;
        let mut file = Vec::new();
        for node in &self.nodes {
            for record in node {
                let value = match *record {
                    Record::Empty => node_count,
                    Record::Node(next) => next,
                    Record::Data(offset) => node_count + 16 + offset,
                };
                file.extend_from_slice(&value.to_be_bytes()[1..]); // 24-bit records
            }
        }
        file.extend_from_slice(&[0; 16]);
        file.extend_from_slice(&self.data);
        file.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
        let mut meta = map(9);
        meta.extend(string("binary_format_major_version"));
        meta.extend(uint16(2));
        meta.extend(string("binary_format_minor_version"));
        meta.extend(uint16(0));
        meta.extend(string("build_epoch"));
        meta.extend([8, 9 - 7]); // uint64, an extended type
        meta.extend(1_800_000_000u64.to_be_bytes());
        meta.extend(string("database_type"));
        meta.extend(string(database_type));
        meta.extend(string("description"));
        meta.extend(map(1));
        meta.extend(string("en"));
        meta.extend(string("two networks"));
        meta.extend(string("ip_version"));
        meta.extend(uint16(6));
        meta.extend(string("languages"));
        meta.extend([1, 11 - 7]); // an array of one, an extended type
        meta.extend(string("en"));
        meta.extend(string("node_count"));
        meta.push(6 << 5 | 4); // uint32
        meta.extend(node_count.to_be_bytes());
        meta.extend(string("record_size"));
        meta.extend(uint16(24));
        file.extend(meta);
        file
    }
}

fn string(text: &str) -> Vec<u8> {
    assert!(text.len() < 29);
    let mut out = vec![2 << 5 | text.len() as u8];
    out.extend_from_slice(text.as_bytes());
    out
}

fn map(pairs: u8) -> Vec<u8> {
    vec![7 << 5 | pairs]
}

fn uint16(value: u16) -> Vec<u8> {
    let mut out = vec![5 << 5 | 2];
    out.extend(value.to_be_bytes());
    out
}

/// `{field: {"iso_code": iso}}`.
fn iso_record(field: &str, iso: &str) -> Vec<u8> {
    let mut out = map(1);
    out.extend(string(field));
    out.extend(map(1));
    out.extend(string("iso_code"));
    out.extend(string(iso));
    out
}

fn two_networks(dir: &Path, database_type: &str) -> PathBuf {
    let mut db = Mmdb::new();
    // 81.2.69.0/24, an IPv4 network under ::/96.
    db.insert(
        u128::from(u32::from(Ipv4Addr::new(81, 2, 69, 0))),
        96 + 24,
        &iso_record("country", "GB"),
    );
    // 2001:218::/32 with only the country it is registered to.
    db.insert(
        u128::from(ip_v6("2001:218::")),
        32,
        &iso_record("registered_country", "JP"),
    );
    // A private network the database claims: never answered.
    db.insert(
        u128::from(u32::from(Ipv4Addr::new(10, 0, 0, 0))),
        96 + 8,
        &iso_record("country", "US"),
    );
    let path = dir.join("countries.mmdb");
    std::fs::write(&path, db.bytes(database_type)).unwrap();
    path
}

fn ip_v6(text: &str) -> Ipv6Addr {
    text.parse().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("alerts-geo-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_maxmind_country_database_is_read() {
    let dir = scratch("mmdb");
    let path = two_networks(&dir, "GeoLite2-Country");
    let countries = Countries::from_config(Some(&path)).unwrap();
    let lookup = |text: &str| countries.lookup(ip(text)).map(|c| c.to_string());
    assert_eq!(lookup("81.2.69.160").as_deref(), Some("GB"));
    assert_eq!(lookup("::ffff:81.2.69.1").as_deref(), Some("GB"));
    assert_eq!(lookup("2001:218:1:2::3").as_deref(), Some("JP"));
    assert_eq!(lookup("81.2.70.1"), None);
    assert_eq!(lookup("2001:219::1"), None);
    assert_eq!(lookup("10.1.2.3"), None);
    assert!(
        countries.describe().contains("GeoLite2-Country"),
        "{countries:?}"
    );
    // A city database carries countries too.
    let path = two_networks(&dir, "GeoIP2-City");
    assert!(Countries::open_mmdb(&path).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_that_is_no_country_database_is_refused_with_its_name() {
    let dir = scratch("refused");
    let text = dir.join("GeoLite2-Country.csv");
    std::fs::write(&text, "network,geoname_id\n81.2.69.0/24,2635167\n").unwrap();
    let asn = two_networks(&dir, "GeoLite2-ASN");
    let missing = dir.join("missing.mmdb");
    for (path, says) in [
        (&text, "not a MaxMind-format database"),
        (&asn, "\"GeoLite2-ASN\" database has no countries"),
        (&missing, "cannot read the GeoIP database"),
    ] {
        let err = Countries::from_config(Some(path)).unwrap_err().to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(err.contains(says) && err.contains("geoip_mmdb"), "{err}");
    }
    assert!(Countries::from_config(None).unwrap().is_embedded());
    std::fs::remove_dir_all(&dir).unwrap();
}
