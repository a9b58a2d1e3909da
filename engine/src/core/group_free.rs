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
}

/// (whole free GPUs, free milli-GPUs) of a node.
fn free_counts(free: &NodeFree) -> (u64, u64) {
    (
        free.gpu_milli.iter().filter(|g| **g >= MILLI).count() as u64,
        free.gpu_milli_total(),
    )
}

impl GroupFree {
    /// Counts `states` (indexed like the fleet's nodes) into `groups` of node indexes.
    pub(crate) fn new(groups: &[(String, Vec<usize>)], states: &[NodeFree]) -> GroupFree {
        let stride = states.iter().map(|f| f.gpu_milli.len()).max().unwrap_or(0) + 1;
        let mut gf = GroupFree {
            group_of: vec![None; states.len()],
            whole: vec![0; groups.len()],
            milli: vec![0; groups.len()],
            histogram: vec![0; groups.len() * stride],
            stride,
        };
        for (g, (_, nodes)) in groups.iter().enumerate() {
            for &i in nodes {
                if let Some(slot) = gf.group_of.get_mut(i) {
                    *slot = Some(g);
                }
                if let Some(free) = states.get(i) {
                    gf.count(g, free, true);
                }
            }
        }
        gf
    }

    fn count(&mut self, g: usize, free: &NodeFree, entering: bool) {
        let (whole, milli) = free_counts(free);
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
    }

    /// Adds (`entering`) or takes away a node's free resources in its group's counts.
    pub(crate) fn update(&mut self, node: usize, free: &NodeFree, entering: bool) {
        let Some(g) = self.group_of.get(node).copied().flatten() else {
            return;
        };
        self.count(g, free, entering);
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
            return row
                .iter()
                .enumerate()
                .map(|(free, nodes)| u64::from(*nodes) * (free as u64 / k))
                .sum();
        }
        let per = u64::from(r.gpu_milli.max(1)) * u64::from(r.num_gpu);
        self.milli.get(g).map_or(u64::MAX, |m| m / per)
    }

    /// The groups whose bound for `r` is at least `members`, in group order.
    pub(crate) fn candidates(&self, r: &Request, members: u64) -> Vec<usize> {
        // A scan of the per-group totals: cheaper than keeping them sorted, as every
        // commit and release changes them.
        let need = if r.mig_profile.is_none() && r.gpu_milli >= MILLI {
            members.saturating_mul(u64::from(r.num_gpu))
        } else {
            0
        };
        self.whole
            .iter()
            .enumerate()
            .filter(|(g, whole)| **whole >= need && self.room_bound(*g, r) >= members)
            .map(|(g, _)| g)
            .collect()
    }
}
