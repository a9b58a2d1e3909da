//! A set of nodes as bits by node number. The node check of the job being placed runs for
//! every node a placement looks at (hundreds of thousands of times a cycle at 10,000
//! nodes); a bit costs less there than a tree lookup.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct NodeBits(Vec<u64>);

impl NodeBits {
    pub(super) fn of(nodes: impl IntoIterator<Item = usize>) -> NodeBits {
        let mut words: Vec<u64> = Vec::new();
        for node in nodes {
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
        let bits = NodeBits::of(nodes);
        for n in 0..5_000 {
            assert_eq!(bits.has(n), nodes.contains(&n), "node {n}");
        }
        assert!(!NodeBits::default().has(0));
        assert!(!NodeBits::of([]).has(usize::MAX));
    }
}
