//! [`KeyTable`]: the group keys of one rule and their state, at most `max` of them, the least
//! recently seen evicted first.
//!
//! A slab of entries linked newest to oldest by index, and a hash map from key to slot: a
//! lookup, a touch and an eviction are each O(1), and a key's text is stored once (shared by
//! the map and its entry).

use std::collections::HashMap;
use std::sync::Arc;

const NIL: u32 = u32::MAX;

struct Slot<T> {
    key: Arc<str>,
    value: T,
    /// Towards the newest, and towards the oldest.
    newer: u32,
    older: u32,
}

pub struct KeyTable<T> {
    map: HashMap<Arc<str>, u32>,
    slots: Vec<Option<Slot<T>>>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
    max: usize,
    /// Keys evicted to make room, since the table was made.
    pub evicted: u64,
}

impl<T> KeyTable<T> {
    pub fn new(max: usize) -> KeyTable<T> {
        KeyTable {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
            max: max.clamp(1, NIL as usize - 1),
            evicted: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The slot of `key`, made (with `make`) when absent, and marked the newest. When the table
    /// is full the oldest key is evicted first and handed to `evict`.
    pub fn touch(
        &mut self,
        key: &str,
        make: impl FnOnce() -> T,
        evict: impl FnOnce(&str, T),
    ) -> u32 {
        if let Some(&i) = self.map.get(key) {
            self.unlink(i);
            self.push_newest(i);
            return i;
        }
        if self.map.len() >= self.max
            && let Some((k, v)) = self.pop_oldest()
        {
            self.evicted += 1;
            evict(&k, v);
        }
        let key: Arc<str> = Arc::from(key);
        let slot = Slot {
            key: key.clone(),
            value: make(),
            newer: NIL,
            older: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        self.push_newest(i);
        i
    }

    /// The slot of `key`, without marking it seen.
    pub fn find(&self, key: &str) -> Option<u32> {
        self.map.get(key).copied()
    }

    pub fn get(&self, i: u32) -> Option<(&str, &T)> {
        self.slots
            .get(i as usize)?
            .as_ref()
            .map(|s| (&*s.key, &s.value))
    }

    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots
            .get_mut(i as usize)?
            .as_mut()
            .map(|s| &mut s.value)
    }

    /// The oldest slot (least recently seen).
    pub fn oldest(&self) -> Option<u32> {
        (self.oldest != NIL).then_some(self.oldest)
    }

    /// The slot seen just before `i` (towards the newest).
    pub fn newer(&self, i: u32) -> Option<u32> {
        let n = self.slots.get(i as usize)?.as_ref()?.newer;
        (n != NIL).then_some(n)
    }

    /// Removes slot `i`.
    pub fn remove(&mut self, i: u32) -> Option<(Arc<str>, T)> {
        self.slots.get(i as usize)?.as_ref()?;
        self.unlink(i);
        let s = self.slots[i as usize].take()?;
        self.map.remove(&s.key);
        self.free.push(i);
        Some((s.key, s.value))
    }

    fn pop_oldest(&mut self) -> Option<(Arc<str>, T)> {
        let i = self.oldest()?;
        self.remove(i)
    }

    fn unlink(&mut self, i: u32) {
        let (newer, older) = match &self.slots[i as usize] {
            Some(s) => (s.newer, s.older),
            None => return,
        };
        if newer != NIL {
            if let Some(s) = self.slots[newer as usize].as_mut() {
                s.older = older;
            }
        } else {
            self.newest = older;
        }
        if older != NIL {
            if let Some(s) = self.slots[older as usize].as_mut() {
                s.newer = newer;
            }
        } else {
            self.oldest = newer;
        }
    }

    fn push_newest(&mut self, i: u32) {
        let old_newest = self.newest;
        if let Some(s) = self.slots[i as usize].as_mut() {
            s.newer = NIL;
            s.older = old_newest;
        }
        if old_newest != NIL
            && let Some(s) = self.slots[old_newest as usize].as_mut()
        {
            s.newer = i;
        }
        self.newest = i;
        if self.oldest == NIL {
            self.oldest = i;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_seen_key_goes_first() {
        let mut t: KeyTable<u32> = KeyTable::new(3);
        let mut gone = Vec::new();
        for k in ["a", "b", "c"] {
            t.touch(k, || 0, |k, _| gone.push(k.to_string()));
        }
        t.touch("a", || 0, |k, _| gone.push(k.to_string()));
        t.touch("d", || 0, |k, _| gone.push(k.to_string()));
        assert_eq!(gone, ["b"]);
        assert_eq!(t.evicted, 1);
        assert!(t.find("b").is_none() && t.find("a").is_some());
        let i = t.oldest().unwrap();
        assert_eq!(t.get(i).unwrap().0, "c");
        t.remove(i);
        assert_eq!(t.len(), 2);
        t.touch("e", || 7, |_, _| panic!("room was made"));
        assert_eq!(t.get(t.find("e").unwrap()).unwrap().1, &7);
    }
}
