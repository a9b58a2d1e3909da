//! Numbers for keys a cycle hashes and compares again and again (askers, a shape's member
//! and pools): their vectors and names are hashed and compared once, when first seen,
//! and the memos and indexes keyed by them compare numbers.

use super::preempt::Asker;
use crate::core::alloc::Request;
use crate::core::gang::JobShape;
use rustc_hash::FxHashMap as HashMap;
use std::hash::Hash;

/// Each distinct key seen gets the next number, for the cycle.
#[derive(Debug)]
pub(super) struct Numbering<K> {
    numbers: HashMap<K, u32>,
}

impl<K> Default for Numbering<K> {
    fn default() -> Self {
        Numbering {
            numbers: HashMap::default(),
        }
    }
}

impl<K: Eq + Hash + Clone> Numbering<K> {
    pub fn number(&mut self, key: &K) -> u32 {
        if let Some(n) = self.numbers.get(key) {
            return *n;
        }
        let n = u32::try_from(self.numbers.len()).unwrap_or(u32::MAX);
        self.numbers.insert(key.clone(), n);
        n
    }
}

/// Numbers for askers. An asker whose teams all fit a bit set is looked up by those
/// bits, held in the table itself: comparing the teams' vectors read each stored one's
/// heap buffer, a cache miss at nearly every victim search.
#[derive(Debug, Default)]
pub(super) struct AskerNumbers {
    by_bits: HashMap<(Option<usize>, i64, [u64; 2]), u32>,
    others: HashMap<Asker, u32>,
    count: u32,
}

impl AskerNumbers {
    pub fn number(&mut self, asker: &Asker) -> u32 {
        let next = self.count;
        let n = match asker.team_bits() {
            Some(bits) => *self
                .by_bits
                .entry((asker.team, asker.priority, bits))
                .or_insert(next),
            None => match self.others.get(asker) {
                Some(n) => *n,
                None => {
                    self.others.insert(asker.clone(), next);
                    next
                }
            },
        };
        if n == next {
            self.count = next.saturating_add(1);
        }
        n
    }
}

/// The number of a queued shape's member and pools (what a cost index is kept for),
/// looked up once per shape number (`queue_order::QueueShapes`).
#[derive(Debug, Default)]
pub(super) struct MemberPools {
    numbering: Numbering<(Request, Vec<String>)>,
    by_shape: Vec<Option<u32>>,
}

impl MemberPools {
    pub fn number(&mut self, shape_no: usize, shape: &JobShape) -> u32 {
        if let Some(Some(n)) = self.by_shape.get(shape_no) {
            debug_assert_eq!(
                Some(*n),
                self.numbering
                    .numbers
                    .get(&(shape.member.clone(), shape.pools.clone()))
                    .copied(),
                "shape number {shape_no} given another shape"
            );
            return *n;
        }
        let n = self
            .numbering
            .number(&(shape.member.clone(), shape.pools.clone()));
        if self.by_shape.len() <= shape_no {
            self.by_shape.resize(shape_no + 1, None);
        }
        if let Some(slot) = self.by_shape.get_mut(shape_no) {
            *slot = Some(n);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_share_a_number_and_new_ones_count_up() {
        let mut numbers: Numbering<Vec<usize>> = Numbering::default();
        assert_eq!(numbers.number(&vec![1, 2]), 0);
        assert_eq!(numbers.number(&vec![]), 1);
        assert_eq!(numbers.number(&vec![1, 2]), 0);
        assert_eq!(numbers.number(&vec![2, 1]), 2);
    }

    #[test]
    fn askers_are_numbered_by_what_the_rules_read_of_them() {
        let mut numbers = AskerNumbers::default();
        let asker = |team, priority, reclaimable, spared| {
            Asker::for_test(team, priority, reclaimable, spared)
        };
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![2, 5], vec![])), 0);
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![], vec![])), 1);
        // Teams past the bit set are looked up by their lists, numbered in the same run.
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![70], vec![])), 2);
        assert_eq!(numbers.number(&asker(Some(1), 20, vec![2, 5], vec![])), 3);
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![2], vec![5])), 4);
        assert_eq!(numbers.number(&asker(None, 10, vec![2, 5], vec![])), 5);
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![2, 5], vec![])), 0);
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![70], vec![])), 2);
        // The lists are sets to the rules (`contains`): spared teams in another order
        // are the same asker.
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![], vec![3, 1])), 6);
        assert_eq!(numbers.number(&asker(Some(1), 10, vec![], vec![1, 3])), 6);
    }

    #[test]
    fn shapes_with_one_member_and_pools_share_a_number() {
        let one = JobShape {
            pools: vec!["a".into()],
            ..JobShape::default()
        };
        let gang = JobShape {
            members: 4,
            ..one.clone()
        };
        let other = JobShape {
            pools: vec!["b".into()],
            ..one.clone()
        };
        let mut numbers = MemberPools::default();
        assert_eq!(numbers.number(3, &one), 0);
        assert_eq!(numbers.number(0, &gang), 0);
        assert_eq!(numbers.number(1, &other), 1);
        assert_eq!(numbers.number(3, &one), 0);
    }
}
