//! Free GPUs per topology group, kept in step with the allocation state: bounds that let a
//! gang pass over groups that cannot hold it without visiting their nodes.

use super::alloc::{NodeFree, Request};
use super::fleet::MILLI;

/// Free GPUs of each group at one topology level.
#[derive(Debug, Default)]
pub(crate) struct GroupFree {
    /// Each node's group (index into the level's groups).
    group_of: Vec<Option<usize>>,
    /// Whole free GPUs per group.
    whole: Vec<u64>,
    /// Free milli-GPUs per group.
    milli: Vec<u64>,
    /// Per group, how many of its nodes have 0, 1, … whole GPUs free (`stride` entries
    /// per group): Σ nodes × ⌊free / k⌋ is how many k-GPU members the group could hold.
    histogram: Vec<u32>,
    stride: usize,
    /// `whole`'s maxima over ranges of groups, as a binary tree in an array (leaves from
    /// `leaves` on): a gang finds the groups with enough whole GPUs without scanning all.
    most_whole: Vec<u64>,
    leaves: usize,
}

/// (whole free GPUs, free milli-GPUs) of a node.
pub(crate) fn free_counts(free: &NodeFree) -> (u64, u64) {
    free.gpu_milli.iter().fold((0, 0), |(whole, milli), g| {
        (whole + u64::from(*g >= MILLI), milli + u64::from(*g))
    })
}

impl GroupFree {
    /// Counts `states` (indexed like the fleet's nodes) into `groups` of node indexes.
    pub(crate) fn new(groups: &[(String, Vec<usize>)], states: &[NodeFree]) -> GroupFree {
        let stride = states.iter().map(|f| f.gpu_milli.len()).max().unwrap_or(0) + 1;
        let leaves = groups.len().next_power_of_two();
        let mut gf = GroupFree {
            group_of: vec![None; states.len()],
            whole: vec![0; groups.len()],
            milli: vec![0; groups.len()],
            histogram: vec![0; groups.len() * stride],
            stride,
            most_whole: vec![0; 2 * leaves],
            leaves,
        };
        for (g, (_, nodes)) in groups.iter().enumerate() {
            for &i in nodes {
                if let Some(slot) = gf.group_of.get_mut(i) {
                    *slot = Some(g);
                }
                if let Some(free) = states.get(i) {
                    gf.count(g, free_counts(free), true);
                }
            }
        }
        gf
    }

    /// Sets group `g`'s leaf to its whole free GPUs and the maxima above it.
    fn raise(&mut self, g: usize) {
        let mut at = self.leaves + g;
        let value = self.whole.get(g).copied().unwrap_or(0);
        if let Some(leaf) = self.most_whole.get_mut(at) {
            *leaf = value;
        }
        while at > 1 {
            at /= 2;
            let left = self.most_whole.get(2 * at).copied().unwrap_or(0);
            let right = self.most_whole.get(2 * at + 1).copied().unwrap_or(0);
            match self.most_whole.get_mut(at) {
                Some(m) if *m != left.max(right) => *m = left.max(right),
                _ => break,
            }
        }
    }

    /// Groups with at least `need` whole free GPUs, in group order.
    fn with_whole(&self, need: u64, into: &mut Vec<usize>) {
        let mut stack = vec![1usize];
        while let Some(at) = stack.pop() {
            if self.most_whole.get(at).is_none_or(|m| *m < need) {
                continue;
            }
            if at >= self.leaves {
                into.push(at - self.leaves);
            } else {
                // Right first, so the left is taken first: group order.
                stack.push(2 * at + 1);
                stack.push(2 * at);
            }
        }
    }

    fn count(&mut self, g: usize, (whole, milli): (u64, u64), entering: bool) {
        let bucket = g * self.stride + whole as usize;
        if let (Some(w), Some(m), Some(h)) = (
            self.whole.get_mut(g),
            self.milli.get_mut(g),
            self.histogram.get_mut(bucket),
        ) {
            if entering {
                *w += whole;
                *m += milli;
                *h += 1;
            } else {
                *w = w.saturating_sub(whole);
                *m = m.saturating_sub(milli);
                *h = h.saturating_sub(1);
            }
        }
        if whole > 0 {
            self.raise(g);
        }
    }

    /// Adds (`entering`) or takes away a node's free resources in its group's counts.
    /// `counts`: the node's [`free_counts`].
    pub(crate) fn update(&mut self, node: usize, counts: (u64, u64), entering: bool) {
        let Some(g) = self.group_of.get(node).copied().flatten() else {
            return;
        };
        self.count(g, counts, entering);
    }

    /// At most how many members of `r` group `g` could hold now (`u64::MAX` when not
    /// bounded by GPUs: MIG, no GPUs). Exact when CPU, memory, models and GPU memory do
    /// not bind, as on a uniform fleet.
    pub(crate) fn room_bound(&self, g: usize, r: &Request) -> u64 {
        if r.mig_profile.is_some() || r.num_gpu == 0 {
            return u64::MAX;
        }
        if r.gpu_milli >= MILLI {
            let k = u64::from(r.num_gpu);
            let Some(row) = self.histogram.get(g * self.stride..(g + 1) * self.stride) else {
                return u64::MAX;
            };
            // Σ nodes × ⌊free / k⌋, the quotient stepped rather than divided (this runs for
            // every candidate group of every gang try).
            let (mut quotient, mut left) = (0u64, k);
            let mut room = 0u64;
            for nodes in row {
                room += u64::from(*nodes) * quotient;
                left -= 1;
                if left == 0 {
                    quotient += 1;
                    left = k;
                }
            }
            return room;
        }
        let per = u64::from(r.gpu_milli.max(1)) * u64::from(r.num_gpu);
        self.milli.get(g).map_or(u64::MAX, |m| m / per)
    }

    /// The groups whose bound for `r` is at least `members`, in group order.
    pub(crate) fn candidates(&self, r: &Request, members: u64) -> Vec<usize> {
        // Groups short of whole GPUs are passed over by the maxima tree (kept in step
        // with every commit and release).
        let need = if r.mig_profile.is_none() && r.gpu_milli >= MILLI {
            members.saturating_mul(u64::from(r.num_gpu))
        } else {
            0
        };
        if need == 0 {
            return (0..self.whole.len())
                .filter(|g| self.room_bound(*g, r) >= members)
                .collect();
        }
        let mut groups = Vec::new();
        self.with_whole(need, &mut groups);
        groups.retain(|g| self.room_bound(*g, r) >= members);
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rng::Rng;

    fn node(rng: &mut Rng) -> NodeFree {
        NodeFree {
            cpu_milli: 64_000,
            memory_mib: 512_000,
            gpu_milli: (0..8).map(|_| 250 * rng.below(5) as u32).collect(),
            mig: vec![None; 8],
            vram_mib: vec![81_920; 8],
        }
    }

    fn request(num_gpu: u32, gpu_milli: u32) -> Request {
        Request {
            cpu_milli: 0,
            memory_mib: 0,
            num_gpu,
            gpu_milli,
            models: Vec::new(),
            vram_mib: 0,
            mig_profile: None,
        }
    }

    /// A group's bound for k whole GPUs is Σ over its nodes of ⌊whole free GPUs / k⌋.
    #[test]
    fn whole_gpu_bound_counts_members_node_by_node() {
        let mut rng = Rng::new(11);
        let groups: Vec<(String, Vec<usize>)> = (0..5)
            .map(|g| (format!("g{g}"), (g * 6..g * 6 + 6).collect()))
            .collect();
        for _ in 0..50 {
            let states: Vec<NodeFree> = (0..30).map(|_| node(&mut rng)).collect();
            let gf = GroupFree::new(&groups, &states);
            for k in 1..=9u32 {
                for (g, (_, nodes)) in groups.iter().enumerate() {
                    let direct: u64 = nodes
                        .iter()
                        .filter_map(|n| states.get(*n))
                        .map(|f| free_counts(f).0 / u64::from(k))
                        .sum();
                    assert_eq!(gf.room_bound(g, &request(k, 1000)), direct, "k={k} g={g}");
                }
            }
        }
    }

    /// The candidates found through the maxima tree are those of a scan of every group,
    /// through random changes of the nodes.
    #[test]
    fn candidates_match_a_scan_of_every_group() {
        let mut rng = Rng::new(7);
        for groups_n in [1usize, 3, 8, 13] {
            let groups: Vec<(String, Vec<usize>)> = (0..groups_n)
                .map(|g| (format!("g{g}"), (g * 4..g * 4 + 4).collect()))
                .collect();
            let mut states: Vec<NodeFree> = (0..groups_n * 4).map(|_| node(&mut rng)).collect();
            let mut gf = GroupFree::new(&groups, &states);
            for _ in 0..300 {
                let n = rng.below(states.len());
                let next = node(&mut rng);
                if let Some(old) = states.get_mut(n) {
                    gf.update(n, free_counts(old), false);
                    gf.update(n, free_counts(&next), true);
                    *old = next;
                }
                for (num_gpu, gpu_milli, members) in
                    [(8, 1000, 2), (4, 1000, 3), (1, 1000, 9), (1, 500, 4)]
                {
                    let r = request(num_gpu, gpu_milli);
                    let need = if gpu_milli >= MILLI {
                        members * u64::from(num_gpu)
                    } else {
                        0
                    };
                    let scan: Vec<usize> = (0..groups_n)
                        .filter(|g| {
                            gf.whole.get(*g).is_some_and(|w| *w >= need)
                                && gf.room_bound(*g, &r) >= members
                        })
                        .collect();
                    assert_eq!(gf.candidates(&r, members), scan);
                }
            }
        }
    }
}
