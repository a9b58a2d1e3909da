//! A set of nodes as bits by node number. The node check of the job being placed runs for
//! every node a placement looks at (hundreds of thousands of times a cycle at 10,000
//! nodes); a bit costs less there than a tree lookup.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct NodeBits(Vec<u64>);

impl NodeBits {
    /// The nodes numbered below `below` (the fleet's size: a number past it is no node,
    /// and would only make the set as large).
    pub(super) fn of(nodes: impl IntoIterator<Item = usize>, below: usize) -> NodeBits {
        let mut words: Vec<u64> = Vec::new();
        for node in nodes.into_iter().filter(|n| *n < below) {
            let word = node / 64;
            if words.len() <= word {
                words.resize(word + 1, 0);
            }
            if let Some(w) = words.get_mut(word) {
                *w |= 1 << (node % 64);
            }
        }
        NodeBits(words)
    }

    pub(super) fn has(&self, node: usize) -> bool {
        self.0
            .get(node / 64)
            .is_some_and(|w| w & (1 << (node % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::NodeBits;

    #[test]
    fn holds_exactly_its_nodes() {
        let nodes = [0usize, 5, 63, 64, 130, 4_095];
        let bits = NodeBits::of(nodes, 5_000);
        for n in 0..5_000 {
            assert_eq!(bits.has(n), nodes.contains(&n), "node {n}");
        }
        assert!(!NodeBits::default().has(0));
        assert!(!NodeBits::of([], 10).has(usize::MAX));
    }

    #[test]
    fn numbers_past_the_fleet_are_left_out() {
        let bits = NodeBits::of([3, 10, usize::MAX], 10);
        assert!(bits.has(3));
        assert!(!bits.has(10));
        assert!(!bits.has(usize::MAX));
        assert_eq!(bits, NodeBits::of([3], 10));
    }
}
