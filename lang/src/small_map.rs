//! A map kept as one sorted vector. The IR holds many maps of one or two entries (a
//! signal's filters, a team's per-pool quota); a `BTreeMap` allocates a node with room for
//! eleven entries for each, which made them the largest part of a large policy's IR.

use std::borrow::Borrow;

use serde::ser::{Serialize, SerializeMap, Serializer};

/// Entries sorted by key, each key once. Lookups are binary searches; inserts shift the
/// entries after the new one, which is cheap at the sizes the IR holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap {
            entries: Vec::new(),
        }
    }
}

/// Borrowed entries in key order.
pub type Iter<'a, K, V> =
    std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

impl<K: Ord, V> SmallMap<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn find<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let at = self.find(key).ok()?;
        self.entries.get(at).map(|(_, v)| v)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`, returning the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(at) => self
                .entries
                .get_mut(at)
                .map(|(_, v)| std::mem::replace(v, value)),
            Err(at) => {
                self.entries.insert(at, (key, value));
                None
            }
        }
    }

    /// Changes the value of `key`, inserting `make()` first if there is none.
    pub fn update(&mut self, key: K, make: impl FnOnce() -> V, change: impl FnOnce(&mut V)) {
        let at = match self.find(&key) {
            Ok(at) => at,
            Err(at) => {
                self.entries.insert(at, (key, make()));
                at
            }
        };
        if let Some((_, v)) = self.entries.get_mut(at) {
            change(v);
        }
    }

    pub fn iter(&self) -> Iter<'_, K, V> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl<'a, K: Ord, V> IntoIterator for &'a SmallMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SmallMap<K, V> {
    /// Later entries of a key replace earlier ones, as in `BTreeMap`.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = SmallMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

/// Serialised as a map in key order, as a `BTreeMap` is: the IR's JSON is unchanged.
impl<K: Serialize, V: Serialize> Serialize for SmallMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::SmallMap;
    use std::collections::BTreeMap;

    #[test]
    fn agrees_with_a_btree_map() {
        // A fixed pseudo-random sequence of inserts, replacements and lookups.
        let mut small = SmallMap::new();
        let mut btree = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..2_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("k{}", x % 97);
            if step % 3 == 0 {
                small.update(key.clone(), || 0, |v| *v += step);
                *btree.entry(key.clone()).or_insert(0) += step;
            } else {
                assert_eq!(
                    small.insert(key.clone(), step),
                    btree.insert(key.clone(), step)
                );
            }
            assert_eq!(small.get(key.as_str()), btree.get(key.as_str()));
            assert_eq!(small.len(), btree.len());
        }
        assert!(small.iter().eq(btree.iter()));
        assert_eq!(
            serde_json::to_string(&small).unwrap(),
            serde_json::to_string(&btree).unwrap()
        );
        let rebuilt: SmallMap<_, _> = btree.clone().into_iter().collect();
        assert_eq!(rebuilt, small);
        assert!(!small.contains_key("absent"));
    }
}
