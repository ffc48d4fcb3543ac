//! A MaxMind database flattened at load into sorted address ranges, so that a lookup is an
//! index step and a short binary search in contiguous memory (tens of nanoseconds) rather
//! than a walk of up to 128 tree nodes scattered over the file (a cache miss each).

use std::collections::HashMap;
use std::net::IpAddr;

use super::Country;

/// No country: the value of a gap between the database's networks.
const NONE: [u8; 2] = [0, 0];

/// An address as a number: `u32` for IPv4, `u128` for IPv6.
pub(super) trait Key: Copy + Ord {
    const ZERO: Self;
    /// The top 16 bits, the index's bucket.
    fn bucket(self) -> usize;
    fn checked_next(self) -> Option<Self>;
}

impl Key for u32 {
    const ZERO: Self = 0;
    fn bucket(self) -> usize {
        (self >> 16) as usize
    }
    fn checked_next(self) -> Option<Self> {
        self.checked_add(1)
    }
}

impl Key for u128 {
    const ZERO: Self = 0;
    fn bucket(self) -> usize {
        (self >> 112) as usize
    }
    fn checked_next(self) -> Option<Self> {
        self.checked_add(1)
    }
}

const BUCKETS: usize = 1 << 16;

/// The whole address space as consecutive ranges: `starts[i]` to `starts[i + 1] - 1` is
/// `countries[i]`. `starts[0]` is 0, adjacent ranges of one country are one.
pub(super) struct Ranges<K: Key> {
    starts: Vec<K>,
    countries: Vec<[u8; 2]>,
    /// `index[b]`: the first range starting in bucket `b` or later; `BUCKETS + 1` entries.
    index: Vec<u32>,
    /// Where the next network may start; `None` once the space's end is reached.
    next: Option<K>,
}

impl<K: Key> Ranges<K> {
    pub(super) fn new() -> Ranges<K> {
        Ranges {
            starts: vec![K::ZERO],
            countries: vec![NONE],
            index: Vec::new(),
            next: Some(K::ZERO),
        }
    }

    /// A network from `first` to `last`; networks come in address order, without overlap.
    pub(super) fn push(&mut self, first: K, last: K, country: Option<Country>) {
        let Some(next) = self.next else { return };
        if first < next || last < first {
            return; // out of order or overlapping: the tree never yields it
        }
        if first > next {
            self.begin(next, NONE);
        }
        self.begin(first, country.map_or(NONE, |c| c.0));
        self.next = last.checked_next();
    }

    fn begin(&mut self, start: K, country: [u8; 2]) {
        let last = self.countries.len() - 1;
        if self.countries[last] == country {
            return;
        }
        if self.starts[last] == start {
            // The empty range at 0 replaced by the first network.
            self.countries[last] = country;
        } else {
            self.starts.push(start);
            self.countries.push(country);
        }
    }

    /// Closes the table: the rest of the space has no country, and the index is built.
    pub(super) fn finish(mut self) -> Ranges<K> {
        if let Some(next) = self.next {
            self.begin(next, NONE);
        }
        self.starts.shrink_to_fit();
        self.countries.shrink_to_fit();
        let mut index = Vec::with_capacity(BUCKETS + 1);
        let mut at = 0;
        for bucket in 0..=BUCKETS {
            while at < self.starts.len() && self.starts[at].bucket() < bucket {
                at += 1;
            }
            index.push(at as u32);
        }
        self.index = index;
        self
    }

    pub(super) fn lookup(&self, key: K) -> Option<Country> {
        let bucket = key.bucket();
        let low = self.index[bucket] as usize;
        let high = self.index[bucket + 1] as usize;
        // Ranges starting in this bucket at or before `key`; the one before them covers the
        // bucket's beginning (there is one: the first range starts at 0).
        let covering = low + self.starts[low..high].partition_point(|&start| start <= key);
        let country = self.countries[covering - 1];
        (country != NONE).then_some(Country(country))
    }

    pub(super) fn len(&self) -> usize {
        self.starts.len()
    }

    /// Heap bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.starts.capacity() * size_of::<K>()
            + self.countries.capacity() * 2
            + self.index.capacity() * 4
    }
}

/// Both families' ranges, from a country database.
pub(super) struct CountryRanges {
    pub(super) v4: Ranges<u32>,
    pub(super) v6: Ranges<u128>,
}

impl CountryRanges {
    /// Every network of `reader`, each record's country decoded once.
    pub(super) fn read(
        reader: &maxminddb::Reader<Vec<u8>>,
    ) -> Result<CountryRanges, maxminddb::MaxMindDbError> {
        let mut v4 = Ranges::<u32>::new();
        let mut v6 = Ranges::<u128>::new();
        // Country databases hold a few hundred distinct records for a million networks.
        let mut decoded: HashMap<usize, Option<Country>> = HashMap::new();
        for found in reader.networks(Default::default())? {
            let found = found?;
            let country = match found.offset() {
                Some(offset) => *decoded
                    .entry(offset)
                    .or_insert_with(|| super::record_country(&found)),
                None => None,
            };
            let network = found.network()?;
            match network.ip() {
                IpAddr::V4(ip) => {
                    let (first, last) = span_u32(u32::from(ip), network.prefix());
                    v4.push(first, last, country);
                }
                IpAddr::V6(ip) => {
                    let first = u128::from(ip);
                    let prefix = network.prefix();
                    // An IPv4 network in an IPv6 tree lies under ::/96.
                    if first >> 32 == 0 && prefix >= 96 {
                        let (first, last) = span_u32(first as u32, prefix - 96);
                        v4.push(first, last, country);
                    } else {
                        let host = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
                        v6.push(first, first | host, country);
                    }
                }
            }
        }
        Ok(CountryRanges {
            v4: v4.finish(),
            v6: v6.finish(),
        })
    }

    pub(super) fn lookup(&self, ip: IpAddr) -> Option<Country> {
        match ip {
            IpAddr::V4(v4) => self.v4.lookup(u32::from(v4)),
            IpAddr::V6(v6) => self.v6.lookup(u128::from(v6)),
        }
    }
}

fn span_u32(first: u32, prefix: u8) -> (u32, u32) {
    let host = u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
    (first, first | host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn country(code: &str) -> Option<Country> {
        Country::new(code)
    }

    #[test]
    fn ranges_merge_neighbours_and_leave_gaps_without_a_country() {
        let mut ranges = Ranges::<u32>::new();
        ranges.push(0, 9, None);
        ranges.push(10, 19, country("DE"));
        ranges.push(20, 29, country("DE"));
        ranges.push(40, 49, country("FR"));
        ranges.push(45, 60, country("IT")); // overlapping: ignored
        ranges.push(0x0001_0000, 0x0001_ffff, country("NL"));
        ranges.push(0xffff_ff00, u32::MAX, country("JP"));
        ranges.push(5, 6, country("GB")); // after the end: ignored
        let ranges = ranges.finish();
        let at = |key: u32| ranges.lookup(key).map(|c| c.to_string());
        assert_eq!(at(0), None);
        assert_eq!(at(10).as_deref(), Some("DE"));
        assert_eq!(at(29).as_deref(), Some("DE"));
        assert_eq!(at(30), None);
        assert_eq!(at(45).as_deref(), Some("FR"));
        assert_eq!(at(50), None);
        assert_eq!(at(0xffff), None);
        assert_eq!(at(0x0001_0000).as_deref(), Some("NL"));
        assert_eq!(at(0x0001_8000).as_deref(), Some("NL"));
        assert_eq!(at(0x0002_0000), None);
        assert_eq!(at(0xffff_feff), None);
        assert_eq!(at(u32::MAX).as_deref(), Some("JP"));
        // 0 (none), DE, none, FR, none, NL, none, JP.
        assert_eq!(ranges.len(), 8);
    }

    #[test]
    fn an_empty_table_has_no_country_anywhere() {
        let ranges = Ranges::<u128>::new().finish();
        assert_eq!(ranges.lookup(0), None);
        assert_eq!(ranges.lookup(u128::MAX), None);
        assert_eq!(ranges.len(), 1);
    }
}
