//! Who gets a connection: at most `per_address_max` per client address (an IPv6 client by its
//! /64, which one subscriber usually holds whole), and at most `total_max` in all. When the
//! server is full, a newcomer takes the oldest connection of the address that holds the most,
//! if that address holds more than the newcomer's would after it: so a flood from a few
//! addresses fills the server with itself and still yields a place to every other address,
//! where a plain cap on the total (stop accepting while full) leaves everyone else waiting in
//! the kernel's queue behind the flood's next connections.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often, at most, shedding is logged as a warning (each case is counted meanwhile).
const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// A client address as counted: IPv4 whole, IPv6 by its /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key(u128);

impl Key {
    pub(crate) fn of(ip: IpAddr) -> Key {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Key(u128::from(u32::from(v4))),
            // A bit above any IPv4 value tells the families apart.
            IpAddr::V6(v6) => Key((u128::from(v6) >> 64) | (1 << 64)),
        }
    }
}

/// Why a connection was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its address holds `per_address_max` already.
    AddressFull,
    /// The server is full, and no address holds enough more than this one's to give way.
    ServerFull,
}

pub(crate) struct Admission {
    total_max: usize,
    per_address_max: usize,
    name: &'static str,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Each address's connections, oldest first, with the sender that cuts each.
    by_key: HashMap<Key, Vec<(u64, tokio::sync::oneshot::Sender<()>)>>,
    total: usize,
    next_id: u64,
    /// Since the last warning: refused per address, refused when full, cut to make room.
    shed: [u64; 3],
    warned_at: Option<Instant>,
}

/// A connection's place: given back when dropped. `cut` completes when a newcomer took it.
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    key: Key,
    id: u64,
    pub(crate) cut: tokio::sync::oneshot::Receiver<()>,
}

impl Admission {
    pub(crate) fn new(total_max: usize, per_address_max: usize, name: &'static str) -> Admission {
        Admission {
            total_max: total_max.max(1),
            per_address_max: per_address_max.max(1),
            name,
            table: Mutex::new(Table::default()),
        }
    }

    /// A place for a connection from `ip`, or why not.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, Refused> {
        let key = Key::of(ip);
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let held = t.by_key.get(&key).map_or(0, Vec::len);
        if held >= self.per_address_max {
            return Err(self.shed(&mut t, 0));
        }
        if t.total >= self.total_max {
            let heaviest = t
                .by_key
                .iter()
                .max_by_key(|(_, conns)| conns.len())
                .map(|(k, conns)| (*k, conns.len()));
            match heaviest {
                Some((k, n)) if n > held + 1 => {
                    let conns = t.by_key.get_mut(&k).expect("the heaviest address");
                    let (_, cut) = conns.remove(0);
                    if conns.is_empty() {
                        t.by_key.remove(&k);
                    }
                    t.total -= 1;
                    // Its task ends the connection; a task already ending ignores it.
                    let _ = cut.send(());
                    self.shed(&mut t, 2);
                }
                _ => return Err(self.shed(&mut t, 1)),
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let (tx, rx) = tokio::sync::oneshot::channel();
        t.by_key.entry(key).or_default().push((id, tx));
        t.total += 1;
        Ok(Ticket {
            admission: self.clone(),
            key,
            id,
            cut: rx,
        })
    }

    /// Counts one case of shedding (0: address full, 1: server full, 2: cut to make room) and
    /// warns at most once a [`WARN_INTERVAL`] with the counts since the last warning.
    fn shed(&self, t: &mut Table, case: usize) -> Refused {
        t.shed[case] += 1;
        let now = Instant::now();
        if t.warned_at
            .is_none_or(|w| now.duration_since(w) >= WARN_INTERVAL)
        {
            let busiest = t.by_key.values().map(Vec::len).max().unwrap_or(0);
            tracing::warn!(
                server = self.name,
                refused_address_full = t.shed[0],
                refused_server_full = t.shed[1],
                cut_for_room = t.shed[2],
                connections = t.total,
                busiest_address_holds = busiest,
                "{}: shedding connections (at most {} per address, {} in all)",
                self.name,
                self.per_address_max,
                self.total_max
            );
            t.shed = [0; 3];
            t.warned_at = Some(now);
        }
        if case == 0 {
            Refused::AddressFull
        } else {
            Refused::ServerFull
        }
    }

    #[cfg(test)]
    fn held(&self, ip: IpAddr) -> usize {
        let t = self.table.lock().unwrap();
        t.by_key.get(&Key::of(ip)).map_or(0, Vec::len)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut t = self
            .admission
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(conns) = t.by_key.get_mut(&self.key) else {
            return;
        };
        // Absent when a newcomer took this place (and counted it already).
        if let Some(i) = conns.iter().position(|(id, _)| *id == self.id) {
            conns.remove(i);
            if conns.is_empty() {
                t.by_key.remove(&self.key);
            }
            t.total -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_gets_its_share_and_no_more() {
        let a = Arc::new(Admission::new(10, 3, "test"));
        let held: Vec<_> = (0..3).map(|_| a.admit(ip("192.0.2.1")).unwrap()).collect();
        assert_eq!(a.admit(ip("192.0.2.1")).err(), Some(Refused::AddressFull));
        assert!(a.admit(ip("192.0.2.2")).is_ok());
        drop(held);
        assert!(a.admit(ip("192.0.2.1")).is_ok(), "places come back");
    }

    #[test]
    fn an_ipv6_subscriber_is_counted_by_its_64() {
        let a = Arc::new(Admission::new(10, 2, "test"));
        let _x = a.admit(ip("2001:db8:1:2::1")).unwrap();
        let _y = a.admit(ip("2001:db8:1:2:ffff::9")).unwrap();
        assert_eq!(
            a.admit(ip("2001:db8:1:2::77")).err(),
            Some(Refused::AddressFull)
        );
        assert!(a.admit(ip("2001:db8:1:3::1")).is_ok());
        // A v4 client of a dual-stack socket is its v4 address.
        let _z = a.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert_eq!(a.held(ip("192.0.2.1")), 1);
    }

    #[test]
    fn when_full_a_newcomer_takes_the_oldest_place_of_the_busiest_address() {
        let a = Arc::new(Admission::new(6, 5, "test"));
        let (flooder, other) = (ip("198.51.100.1"), ip("198.51.100.2"));
        let mut flood: Vec<_> = (0..5).map(|_| a.admit(flooder).unwrap()).collect();
        let mut others = vec![a.admit(other).unwrap()];
        // Full: the other address takes the flood's oldest place, and that connection is told.
        others.push(a.admit(other).unwrap());
        assert!(flood[0].cut.try_recv().is_ok(), "the oldest is cut");
        assert!(flood[1].cut.try_recv().is_err(), "the others stay");
        others.push(a.admit(other).unwrap());
        assert!(flood[1].cut.try_recv().is_ok());
        assert_eq!((a.held(flooder), a.held(other)), (3, 3));
        // 3 against 3: neither gives way to the other.
        assert_eq!(a.admit(other).err(), Some(Refused::ServerFull));
        assert_eq!(a.admit(flooder).err(), Some(Refused::ServerFull));
        // A cut connection's task ends and gives back nothing more.
        flood.drain(..2);
        assert_eq!(a.held(flooder), 3);
        // A new address still gets in.
        let _me = a.admit(ip("192.0.2.50")).unwrap();
        assert_eq!(a.held(flooder) + a.held(other), 5);
    }
}
