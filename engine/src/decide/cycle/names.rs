//! [`NameIndex`]: the policy's teams and tiers by name, for the lookups a cycle makes for
//! every running job. A name of at most 16 bytes is found by its bytes packed into one
//! integer, so a hit compares no strings; a longer name is found by the string.

use rustc_hash::FxHashMap as HashMap;

/// A name of at most 16 bytes, exactly: its first and its last bytes as two words (they
/// overlap when the name is shorter than their sum; with the length, that is still exact)
/// and its length.
type Packed = (u64, u64, usize);

#[derive(Debug)]
pub(super) struct NameIndex<'a, V> {
    short: HashMap<Packed, V>,
    long: HashMap<&'a str, V>,
}

/// Fixed-size loads only: a copy of the name's own length went through `memcpy`.
fn pack(name: &str) -> Option<Packed> {
    let b = name.as_bytes();
    let n = b.len();
    let word8 = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    let word4 = |at: usize| -> Option<u64> {
        Some(u64::from(u32::from_le_bytes(
            b.get(at..at + 4)?.try_into().ok()?,
        )))
    };
    match n {
        0 => Some((0, 0, 0)),
        1..=3 => {
            let byte = |at: usize| u64::from(b.get(at).copied().unwrap_or(0));
            Some((byte(0) | byte(1) << 8 | byte(2) << 16, 0, n))
        }
        4..=7 => Some((word4(0)?, word4(n - 4)?, n)),
        8..=16 => Some((word8(0)?, word8(n - 8)?, n)),
        _ => None,
    }
}

impl<'a> NameIndex<'a, usize> {
    /// Each name's position in `names` (the first, for a name given twice).
    pub fn positions(names: impl IntoIterator<Item = &'a str>) -> NameIndex<'a, usize> {
        NameIndex::new(names.into_iter().enumerate().map(|(i, n)| (n, i)))
    }
}

impl<'a, V: Copy> NameIndex<'a, V> {
    /// The first value of each name wins, as `Program::team` and `Program::tier` find it.
    pub fn new(entries: impl IntoIterator<Item = (&'a str, V)>) -> NameIndex<'a, V> {
        let mut index = NameIndex {
            short: HashMap::default(),
            long: HashMap::default(),
        };
        for (name, value) in entries {
            match pack(name) {
                Some(key) => index.short.entry(key).or_insert(value),
                None => index.long.entry(name).or_insert(value),
            };
        }
        index
    }

    pub fn get(&self, name: &str) -> Option<V> {
        match pack(name) {
            Some(key) => self.short.get(&key).copied(),
            None => self.long.get(name).copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NameIndex;

    #[test]
    fn finds_short_and_long_names_exactly_and_the_first_of_a_name_wins() {
        let long = "a-team-name-longer-than-sixteen-bytes";
        let names = [
            "",
            "a",
            "a\0",
            "team-7",
            "sixteen-bytes-xx",
            long,
            "a",
            long,
        ];
        let index = NameIndex::new(names.iter().enumerate().map(|(i, n)| (*n, i)));
        assert_eq!(index.get(""), Some(0));
        assert_eq!(index.get("a"), Some(1));
        // A trailing zero byte is part of the name, not padding.
        assert_eq!(index.get("a\0"), Some(2));
        assert_eq!(index.get("team-7"), Some(3));
        assert_eq!(index.get("sixteen-bytes-xx"), Some(4));
        assert_eq!(index.get(long), Some(5));
        assert_eq!(index.get("team-8"), None);
        assert_eq!(index.get("sixteen-bytes-xy"), None);
        assert_eq!(index.get("a-team-name-longer-than-sixteen-bytez"), None);
    }

    #[test]
    fn names_differing_in_any_one_byte_are_told_apart() {
        // Every length up to past 16, and each name with each byte changed in turn.
        let mut names = Vec::new();
        for n in 0..=20usize {
            let base: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            names.push(base.clone());
            for at in 0..n {
                let mut v = base.clone().into_bytes();
                if let Some(b) = v.get_mut(at) {
                    *b = b'Z';
                }
                names.push(String::from_utf8(v).unwrap_or_default());
            }
        }
        let index = NameIndex::new(names.iter().enumerate().map(|(i, n)| (n.as_str(), i)));
        for (i, n) in names.iter().enumerate() {
            assert_eq!(index.get(n), Some(i), "{n:?}");
        }
        assert_eq!(index.get("zzzz"), None);
    }
}
