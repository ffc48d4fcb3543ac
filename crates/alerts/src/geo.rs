//! The country of an IP address, for the rules that follow where calls and registrations
//! come from (`register.new_country`, `fraud.country_change`).
//!
//! What it is: [`Countries`], read from the IP-to-country table embedded in the binary (the
//! `iptocc` crate's, built from the five Regional Internet Registries' delegation files: the
//! country an address block is registered to; no download, no account), or from the
//! operator's MaxMind-format country database when `[alerts] geoip_mmdb` names one
//! (GeoLite2-Country, DB-IP's IP-to-Country Lite, or a City database of either), flattened
//! at load into sorted ranges (`geo/ranges.rs`) so that both answer in tens of nanoseconds.
//!
//! Never: guesses. Private, shared (CGNAT), loopback, link-local, documentation, multicast
//! and other special-purpose addresses ([`is_special`]) have no country, whatever a table
//! says; so has an address no table knows. Never reads a database file larger than
//! [`GEOIP_MMDB_BYTES_MAX`], nor one whose type is not a country or city database.
//!
//! Start reading: [`Countries::lookup`].

use std::fmt;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

mod ranges;

/// A country database larger than this is refused (GeoLite2-City, the largest that carries
/// countries, is about 60 MB; the country databases about 10 MB).
pub const GEOIP_MMDB_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// A country: two ASCII capitals, ISO 3166-1 alpha-2 (`DE`), as small as a key can be.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Country([u8; 2]);

impl Country {
    /// `None` unless `code` is two ASCII letters (a lower-case code is raised).
    pub fn new(code: &str) -> Option<Country> {
        match code.as_bytes() {
            &[a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
                Some(Country([a.to_ascii_uppercase(), b.to_ascii_uppercase()]))
            }
            _ => None,
        }
    }

    pub fn as_str(&self) -> &str {
        // Two ASCII letters by construction.
        std::str::from_utf8(&self.0).unwrap_or("??")
    }
}

impl fmt::Display for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Country({})", self.as_str())
    }
}

/// A country database that cannot be used; each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    #[error("{path}: cannot read the GeoIP database: {source}; check [alerts] geoip_mmdb")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: {size} bytes is more than the {max} a country database may have; \
         [alerts] geoip_mmdb takes a country database (GeoLite2-Country, DB-IP Lite)",
        max = GEOIP_MMDB_BYTES_MAX
    )]
    TooLarge { path: PathBuf, size: u64 },
    #[error(
        "{path}: not a MaxMind-format database ({problem}); [alerts] geoip_mmdb takes an \
         .mmdb file such as GeoLite2-Country.mmdb or dbip-country-lite.mmdb"
    )]
    NotMmdb { path: PathBuf, problem: String },
    #[error(
        "{path}: a {database_type:?} database has no countries; [alerts] geoip_mmdb takes a \
         country (or city) database such as GeoLite2-Country or DB-IP's IP-to-Country Lite"
    )]
    NotCountries {
        path: PathBuf,
        database_type: String,
    },
}

/// The country of an address, from the embedded table or an operator's database.
pub struct Countries(Source);

/// Where countries come from.
enum Source {
    /// The table embedded in the binary.
    Embedded,
    /// An operator's MaxMind-format database, read at load into sorted ranges (the file
    /// itself is not kept).
    Mmdb {
        path: PathBuf,
        database_type: String,
        build_epoch: u64,
        ranges: Box<ranges::CountryRanges>,
    },
}

impl fmt::Debug for Countries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Countries {
    /// The embedded table.
    pub fn embedded() -> Countries {
        Countries(Source::Embedded)
    }

    /// Whether answers come from the embedded table.
    pub fn is_embedded(&self) -> bool {
        matches!(self.0, Source::Embedded)
    }

    /// `[alerts] geoip_mmdb`: the database it names, or the embedded table when it is unset.
    pub fn from_config(geoip_mmdb: Option<&Path>) -> Result<Countries, GeoError> {
        match geoip_mmdb {
            Some(path) => Countries::open_mmdb(path),
            None => Ok(Countries::embedded()),
        }
    }

    /// A MaxMind-format database whose type names countries or cities (`GeoLite2-Country`,
    /// `GeoIP2-City`, `DBIP-Country-Lite`, ...); any other file is refused, naming it.
    pub fn open_mmdb(path: &Path) -> Result<Countries, GeoError> {
        let read_error = |source| GeoError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let size = file.metadata().map_err(read_error)?.len();
        let too_large = |size| GeoError::TooLarge {
            path: path.to_path_buf(),
            size,
        };
        if size > GEOIP_MMDB_BYTES_MAX {
            return Err(too_large(size));
        }
        // Read at most one byte past the bound, in case the file grew since.
        let mut bytes = Vec::with_capacity(size as usize);
        file.take(GEOIP_MMDB_BYTES_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > GEOIP_MMDB_BYTES_MAX {
            return Err(too_large(bytes.len() as u64));
        }
        let reader = maxminddb::Reader::from_source(bytes).map_err(|error| GeoError::NotMmdb {
            path: path.to_path_buf(),
            problem: error.to_string(),
        })?;
        let database_type = reader.metadata().database_type.clone();
        let build_epoch = reader.metadata().build_epoch;
        let lower = database_type.to_ascii_lowercase();
        if !(lower.contains("country") || lower.contains("city")) {
            return Err(GeoError::NotCountries {
                path: path.to_path_buf(),
                database_type,
            });
        }
        let ranges = ranges::CountryRanges::read(&reader).map_err(|error| GeoError::NotMmdb {
            path: path.to_path_buf(),
            problem: error.to_string(),
        })?;
        Ok(Countries(Source::Mmdb {
            path: path.to_path_buf(),
            database_type,
            build_epoch,
            ranges: Box::new(ranges),
        }))
    }

    /// Where the answers come from, for the start-up log and the console.
    pub fn describe(&self) -> String {
        match &self.0 {
            Source::Embedded => {
                "the embedded IP-to-country table (the RIRs' delegations)".to_string()
            }
            Source::Mmdb {
                path,
                database_type,
                build_epoch,
                ranges,
            } => format!(
                "{} ({database_type}, built at Unix time {build_epoch}; {} IPv4 and {} IPv6 \
                 ranges in {} KiB)",
                path.display(),
                ranges.v4.len(),
                ranges.v6.len(),
                (ranges.v4.bytes() + ranges.v6.bytes()) / 1024
            ),
        }
    }

    /// The country of `ip`, or `None` for a special-purpose address or one the table does
    /// not know. An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, as a dual-stack socket
    /// reports an IPv4 peer) is looked up as the IPv4 address it carries.
    pub fn lookup(&self, ip: IpAddr) -> Option<Country> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        if is_special(ip) {
            return None;
        }
        match &self.0 {
            Source::Embedded => iptocc::country_code(ip).and_then(Country::new),
            Source::Mmdb { ranges, .. } => ranges.lookup(ip),
        }
    }
}

/// A database record's `country.iso_code` (where the address is used), else its
/// `registered_country.iso_code` (where its block is registered: what the embedded table
/// says, and all a database knows of many anycast and satellite ranges). A record that does
/// not decode has none.
fn record_country(found: &maxminddb::LookupResult<'_, Vec<u8>>) -> Option<Country> {
    ["country", "registered_country"].iter().find_map(|field| {
        let path = [
            maxminddb::PathElement::Key(field),
            maxminddb::PathElement::Key("iso_code"),
        ];
        found
            .decode_path::<&str>(&path)
            .ok()
            .flatten()
            .and_then(Country::new)
    })
}

/// IPv4 blocks that belong to no country (IANA's special-purpose registry, RFC 6890 and its
/// updates): (network, prefix length).
const SPECIAL_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),       // "this network" (RFC 791)
    (Ipv4Addr::new(10, 0, 0, 0), 8),      // private (RFC 1918)
    (Ipv4Addr::new(100, 64, 0, 0), 10),   // shared address space, CGNAT (RFC 6598)
    (Ipv4Addr::new(127, 0, 0, 0), 8),     // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16),  // link-local (RFC 3927)
    (Ipv4Addr::new(172, 16, 0, 0), 12),   // private (RFC 1918)
    (Ipv4Addr::new(192, 0, 0, 0), 24),    // IETF protocol assignments (RFC 6890)
    (Ipv4Addr::new(192, 0, 2, 0), 24),    // documentation TEST-NET-1 (RFC 5737)
    (Ipv4Addr::new(192, 88, 99, 0), 24),  // 6to4 relay anycast (RFC 7526)
    (Ipv4Addr::new(192, 168, 0, 0), 16),  // private (RFC 1918)
    (Ipv4Addr::new(198, 18, 0, 0), 15),   // benchmarking (RFC 2544)
    (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation TEST-NET-2 (RFC 5737)
    (Ipv4Addr::new(203, 0, 113, 0), 24),  // documentation TEST-NET-3 (RFC 5737)
    (Ipv4Addr::new(224, 0, 0, 0), 4),     // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4),     // reserved, and the limited broadcast
];

/// IPv6 blocks that belong to no country.
const SPECIAL_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::UNSPECIFIED, 128),
    (Ipv6Addr::LOCALHOST, 128),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use NAT64 (RFC 8215)
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),     // discard-only (RFC 6666)
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23),    // IETF protocol assignments, Teredo
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation (RFC 3849)
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16),    // 6to4 (RFC 3056)
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20),    // documentation (RFC 9637)
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16),    // SRv6 SIDs (RFC 9602)
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),     // unique local (RFC 4193)
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),    // link-local
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),     // multicast
];

/// Whether `ip` lies in a block that belongs to no country: private (RFC 1918, RFC 4193),
/// shared CGNAT space (RFC 6598), loopback, link-local, documentation (RFC 5737, RFC 3849,
/// RFC 9637), benchmarking, multicast, reserved, and the other IETF special-purpose blocks.
pub fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => SPECIAL_V4.iter().any(|&(network, len)| {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(v4) & mask == u32::from(network)
        }),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_special(IpAddr::V4(v4));
            }
            SPECIAL_V6.iter().any(|&(network, len)| {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(v6) & mask == u128::from(network)
            })
        }
    }
}

#[cfg(test)]
mod tests;
