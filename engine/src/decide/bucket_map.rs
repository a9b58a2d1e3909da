//! A quota book's buckets: at most a few (one per pool with a guarantee, or one overall),
//! kept sorted in a vector. The ledger reads them for every placement tried, and walking a
//! `BTreeMap` of three entries cost more than the entries themselves.

/// Milli-GPUs by bucket, in key order, with `BTreeMap`'s meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct BucketMap<K> {
    entries: Vec<(K, u64)>,
}

impl<K: Ord> BucketMap<K> {
    pub fn get(&self, key: &K) -> Option<&u64> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` to `value`, keeping the keys in order.
    pub fn insert(&mut self, key: K, value: u64) {
        match self.entries.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => {
                if let Some(e) = self.entries.get_mut(i) {
                    e.1 = value;
                }
            }
            Err(i) => self.entries.insert(i, (key, value)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &u64)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut u64)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn values(&self) -> impl Iterator<Item = &u64> {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl<K: Ord> FromIterator<(K, u64)> for BucketMap<K> {
    /// As a `BTreeMap` collects: in key order, a later value for a key replacing an
    /// earlier one.
    fn from_iter<I: IntoIterator<Item = (K, u64)>>(iter: I) -> Self {
        let mut map = BucketMap {
            entries: Vec::new(),
        };
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::BucketMap;
    use std::collections::BTreeMap;

    /// Reads as a `BTreeMap` given the same inserts (repeated keys included) reads.
    #[test]
    fn reads_as_a_btree_map() {
        let keys = [
            None,
            Some("b"),
            Some("a"),
            Some("c"),
            Some("a"),
            None,
            Some("d"),
        ];
        let mut ours: BucketMap<Option<String>> = BucketMap::default();
        let mut theirs: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let k = k.map(str::to_string);
            ours.insert(k.clone(), i as u64 * 10);
            theirs.insert(k, i as u64 * 10);
            assert!(ours.iter().eq(theirs.iter()));
            for probe in [None, Some("a"), Some("z")] {
                let probe = probe.map(str::to_string);
                assert_eq!(ours.get(&probe), theirs.get(&probe));
            }
        }
        for (_, v) in ours.iter_mut() {
            *v += 1;
        }
        assert!(ours
            .values()
            .eq(theirs.values().map(|v| v + 1).collect::<Vec<_>>().iter()));
        let collected: BucketMap<Option<String>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.map(str::to_string), i as u64))
            .collect();
        let expected: BTreeMap<Option<String>, u64> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.map(str::to_string), i as u64))
            .collect();
        assert!(collected.iter().eq(expected.iter()));
    }
}
