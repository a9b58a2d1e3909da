//! [`ShapeMemo`]: a cycle's memos keyed by a job's shape and a small key, looked up by a
//! borrowed shape. A shape holds pool and model names, so a key that owned one cloned it
//! (allocating) at every lookup, for every job.

use crate::core::gang::JobShape;
use rustc_hash::FxHashMap as HashMap;
use std::hash::Hash;

#[derive(Debug)]
pub(super) struct ShapeMemo<K, V> {
    by_shape: HashMap<JobShape, HashMap<K, V>>,
}

impl<K, V> Default for ShapeMemo<K, V> {
    fn default() -> Self {
        ShapeMemo {
            by_shape: HashMap::default(),
        }
    }
}

impl<K: Eq + Hash, V> ShapeMemo<K, V> {
    pub fn get(&self, shape: &JobShape, key: &K) -> Option<&V> {
        self.by_shape.get(shape)?.get(key)
    }

    /// Remembers `value`; the shape is cloned only the first time it is seen.
    pub fn insert(&mut self, shape: &JobShape, key: K, value: V) {
        match self.by_shape.get_mut(shape) {
            Some(memo) => {
                memo.insert(key, value);
            }
            None => {
                let mut memo = HashMap::default();
                memo.insert(key, value);
                self.by_shape.insert(shape.clone(), memo);
            }
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
        let a = JobShape::default();
        let b = JobShape {
            pools: vec!["train".into()],
            ..JobShape::default()
        };
        let mut memo: ShapeMemo<u32, &str> = ShapeMemo::default();
        memo.insert(&a, 1, "a1");
        memo.insert(&a, 2, "a2");
        memo.insert(&b, 1, "b1");
        memo.insert(&a, 1, "a1 again");
        assert_eq!(memo.get(&a, &1), Some(&"a1 again"));
        assert_eq!(memo.get(&a, &2), Some(&"a2"));
        assert_eq!(memo.get(&b, &1), Some(&"b1"));
        assert_eq!(memo.get(&b, &2), None);
        memo.clear();
        assert_eq!(memo.get(&a, &1), None);
    }
}
