//! [`ShapeMemo`]: a cycle's memos keyed by the number of a queued job's shape
//! (`queue_order::QueueShapes`, where equal shapes share a number) and a small key. A
//! key that owned the shape cloned it at every lookup, and one that borrowed it hashed
//! and compared its pool and model names.
//!
//! Stale when: as each memo of it says at its field in `Cycle` (see [`super`]): the
//! victimless memo once the change logs move, the memo of shapes that did not fit once a
//! victim is released (or the allocation changes, for a fit that delayed bookings), ETAs
//! once the allocation changes. Off: [`super::memos_off`] (its users then work out an
//! answer the memo holds afresh, without counting it against the cycle's budgets, so the
//! plan shows whether the memo's answer was right).

use rustc_hash::FxHashMap as HashMap;
use std::hash::Hash;

#[derive(Debug)]
pub(in crate::decide::cycle) struct ShapeMemo<K, V> {
    by_shape: Vec<HashMap<K, V>>,
}

impl<K, V> Default for ShapeMemo<K, V> {
    fn default() -> Self {
        ShapeMemo {
            by_shape: Vec::new(),
        }
    }
}

impl<K: Eq + Hash, V> ShapeMemo<K, V> {
    pub fn get(&self, shape: usize, key: &K) -> Option<&V> {
        self.by_shape.get(shape)?.get(key)
    }

    pub fn insert(&mut self, shape: usize, key: K, value: V) {
        if self.by_shape.len() <= shape {
            self.by_shape.resize_with(shape + 1, HashMap::default);
        }
        if let Some(memo) = self.by_shape.get_mut(shape) {
            memo.insert(key, value);
        }
    }

    pub fn clear(&mut self) {
        self.by_shape.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_shape_and_key_and_forgets_on_clear() {
        let mut memo: ShapeMemo<u32, &str> = ShapeMemo::default();
        memo.insert(0, 1, "a1");
        memo.insert(0, 2, "a2");
        memo.insert(3, 1, "b1");
        memo.insert(0, 1, "a1 again");
        assert_eq!(memo.get(0, &1), Some(&"a1 again"));
        assert_eq!(memo.get(0, &2), Some(&"a2"));
        assert_eq!(memo.get(3, &1), Some(&"b1"));
        assert_eq!(memo.get(3, &2), None);
        assert_eq!(memo.get(1, &1), None);
        assert_eq!(memo.get(7, &1), None);
        memo.clear();
        assert_eq!(memo.get(0, &1), None);
        assert_eq!(memo.get(3, &1), None);
    }
}
