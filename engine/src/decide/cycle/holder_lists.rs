//! [`HolderLists`]: holders by a small index (a node, a team), filled in one batch while
//! the running jobs are held, then laid out flat (one offset per index), so a cycle
//! fills three vectors for them (kept from cycle to cycle by [`HolderLists::reset`]),
//! not one growing list per node or team.

#[derive(Debug, Default)]
pub(super) struct HolderLists {
    /// (index, holder) in the order pushed, until laid out.
    pending: Vec<(usize, usize)>,
    /// Index `n`'s holders are `items[start[n]..start[n + 1]]`, in the order pushed.
    start: Vec<usize>,
    items: Vec<usize>,
    indexes: usize,
}

impl HolderLists {
    /// Empties the lists for indexes below `indexes`, keeping their room.
    pub fn reset(&mut self, indexes: usize) {
        self.indexes = indexes;
        self.pending.clear();
        self.start.clear();
        self.items.clear();
    }

    /// Adds `holder` to `index`'s list. Lists are laid out again if already laid out
    /// (the cycle adds none after its running jobs, so that never costs in practice).
    pub fn push(&mut self, index: usize, holder: usize) {
        if index >= self.indexes {
            return;
        }
        if !self.start.is_empty() {
            self.pending = (0..self.indexes)
                .flat_map(|i| self.get(i).iter().map(move |h| (i, *h)))
                .collect();
            self.start.clear();
            self.items.clear();
            self.pending.push((index, holder));
            self.lay_out();
            return;
        }
        self.pending.push((index, holder));
    }

    /// Lays the lists out flat (a counting sort by index, stable within one).
    pub fn lay_out(&mut self) {
        if !self.start.is_empty() {
            return;
        }
        crate::core::buckets::by_key_into(
            &self.pending,
            self.indexes,
            |p| p.0,
            |p| p.1,
            &mut self.start,
            &mut self.items,
        );
        self.pending.clear();
    }

    /// `index`'s holders in the order pushed (empty before [`HolderLists::lay_out`]).
    pub fn get(&self, index: usize) -> &[usize] {
        match (self.start.get(index), self.start.get(index + 1)) {
            (Some(a), Some(b)) => self.items.get(*a..*b).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Every index's list, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[usize]> + '_ {
        (0..self.indexes).map(|i| self.get(i))
    }

    pub fn len(&self) -> usize {
        self.indexes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_push_order_per_index_and_take_late_pushes() {
        let mut l = HolderLists::default();
        l.reset(3);
        for (n, h) in [(2, 0), (0, 1), (2, 2), (7, 3), (0, 4)] {
            l.push(n, h);
        }
        l.lay_out();
        assert_eq!(l.get(0), &[1, 4]);
        assert_eq!(l.get(1), &[] as &[usize]);
        assert_eq!(l.get(2), &[0, 2]);
        assert_eq!(l.get(3), &[] as &[usize], "no index 3");
        l.push(1, 5);
        l.push(0, 6);
        let all: Vec<Vec<usize>> = l.iter().map(<[usize]>::to_vec).collect();
        assert_eq!(all, vec![vec![1, 4, 6], vec![5], vec![0, 2]]);
        assert_eq!(l.len(), 3);
        // Reset for the next cycle: empty, with other indexes, laid out afresh.
        l.reset(2);
        assert_eq!(l.get(0), &[] as &[usize]);
        for (n, h) in [(1, 0), (1, 1), (0, 2), (2, 3)] {
            l.push(n, h);
        }
        l.lay_out();
        let all: Vec<Vec<usize>> = l.iter().map(<[usize]>::to_vec).collect();
        assert_eq!(all, vec![vec![2], vec![0, 1]]);
    }
}
