//! Allocation state: what is still free on every node and GPU, and what a request needs.
//! Whole GPUs and fractional shares are counted per GPU in milli-GPUs; GPUs in MIG mode
//! serve MIG instances only and track their occupied slots instead.

use super::fleet::{Fleet, MILLI};
use super::mig::{self, MigTable, SlotMask};

/// A request for one member of a job: CPU, memory, and `num_gpu` GPUs with `gpu_milli` free
/// on each (1000 = a whole GPU) and at least `vram_mib` of memory, on one of `models`
/// (empty = any model); or, with `mig_profile`, `num_gpu` MIG instances of that profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub num_gpu: u32,
    pub gpu_milli: u32,
    pub models: Vec<String>,
    pub vram_mib: u64,
    pub mig_profile: Option<String>,
}

impl Request {
    /// GPU milli this request takes in total (MIG instances count as none).
    pub fn gpu_milli_total(&self) -> u64 {
        if self.mig_profile.is_some() {
            return 0;
        }
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    pub fn is_share(&self) -> bool {
        self.mig_profile.is_none() && self.num_gpu == 1 && self.gpu_milli < MILLI
    }

    pub fn accepts_model(&self, model: Option<&str>) -> bool {
        self.num_gpu == 0
            || self.models.is_empty()
            || model.is_some_and(|m| self.models.iter().any(|x| x == m))
    }

    /// [`Request::accepts_model`] for a node, reading its model only when the request
    /// names models: on hot paths that read is a cache miss into the node's GPU list.
    pub fn accepts_node(&self, node: &crate::core::fleet::Node) -> bool {
        self.num_gpu == 0 || self.models.is_empty() || self.accepts_model(node.gpu_model())
    }
}

/// Free resources of one node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeFree {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// Free milli-GPUs per GPU, indexed like the node's GPUs (0 for MIG and failed GPUs).
    pub gpu_milli: Vec<u32>,
    /// Occupied MIG slots per GPU; `None` for GPUs not in MIG mode.
    pub mig: Vec<Option<SlotMask>>,
    /// Memory of each GPU (static; here so a fit is decided from this value alone).
    pub vram_mib: Vec<u64>,
}

impl NodeFree {
    /// Becomes a copy of `other`, reusing this one's buffers (no allocation once sized).
    pub fn copy_from(&mut self, other: &NodeFree) {
        self.cpu_milli = other.cpu_milli;
        self.memory_mib = other.memory_mib;
        self.gpu_milli.clone_from(&other.gpu_milli);
        self.mig.clone_from(&other.mig);
        self.vram_mib.clone_from(&other.vram_mib);
    }

    pub fn gpu_milli_total(&self) -> u64 {
        self.gpu_milli.iter().map(|g| u64::from(*g)).sum()
    }

    /// Whether GPU `i` can give `r` one of its GPUs (milli and memory; MIG aside).
    fn gpu_serves(&self, i: usize, r: &Request) -> bool {
        self.gpu_milli.get(i).is_some_and(|g| *g >= r.gpu_milli)
            && self
                .vram_mib
                .get(i)
                .is_none_or(|m| *m == 0 || *m >= r.vram_mib)
    }

    /// Whether CPU, memory and GPUs suffice (model and MIG checked by the caller).
    pub fn fits(&self, r: &Request) -> bool {
        self.cpu_milli >= r.cpu_milli && self.memory_mib >= r.memory_mib && self.gpus_fit(r)
    }

    pub fn gpus_fit(&self, r: &Request) -> bool {
        r.num_gpu == 0 || r.mig_profile.is_some() || self.count_serving(r) >= r.num_gpu as usize
    }

    /// How many GPUs could give `r` one of its GPUs.
    pub fn count_serving(&self, r: &Request) -> usize {
        // Most requests ask no GPU memory: then the milli alone decide, in one pass the
        // compiler vectorises (this runs for every node a member's slots are counted on).
        if r.vram_mib == 0 {
            return self.gpu_milli.iter().filter(|g| **g >= r.gpu_milli).count();
        }
        (0..self.gpu_milli.len())
            .filter(|i| self.gpu_serves(*i, r))
            .count()
    }

    /// How many shares of `r` the GPUs could still take.
    pub fn share_slots(&self, r: &Request) -> u64 {
        let per = r.gpu_milli.max(1);
        if r.vram_mib == 0 {
            return self
                .gpu_milli
                .iter()
                .filter(|g| **g >= r.gpu_milli)
                .map(|g| u64::from(*g / per))
                .sum();
        }
        (0..self.gpu_milli.len())
            .filter(|i| self.gpu_serves(*i, r))
            .map(|i| u64::from(self.gpu_milli.get(i).copied().unwrap_or(0) / per))
            .sum()
    }

    /// GPUs with enough free for one GPU of `r`, in index order.
    pub fn serving_gpus(&self, r: &Request) -> Vec<usize> {
        (0..self.gpu_milli.len())
            .filter(|i| self.gpu_serves(*i, r))
            .collect()
    }

    /// The GPUs a whole-GPU request takes: the lowest-indexed ones with enough free.
    pub fn exclusive_gpus(&self, r: &Request) -> Vec<usize> {
        let mut gpus = self.serving_gpus(r);
        gpus.truncate(r.num_gpu as usize);
        gpus
    }

    /// Takes `r` from this node on `gpus`. The caller has checked that it fits.
    pub fn take(&mut self, r: &Request, gpus: &[usize]) {
        self.cpu_milli = self.cpu_milli.saturating_sub(r.cpu_milli);
        self.memory_mib = self.memory_mib.saturating_sub(r.memory_mib);
        if r.mig_profile.is_some() {
            return;
        }
        for g in gpus {
            if let Some(free) = self.gpu_milli.get_mut(*g) {
                *free = free.saturating_sub(r.gpu_milli);
            }
        }
    }

    /// Gives back what [`NodeFree::take`] took (capped at `capacity`, the empty node).
    pub fn give(&mut self, r: &Request, gpus: &[usize], capacity: &NodeFree) {
        self.cpu_milli = (self.cpu_milli + r.cpu_milli).min(capacity.cpu_milli);
        self.memory_mib = (self.memory_mib + r.memory_mib).min(capacity.memory_mib);
        if r.mig_profile.is_some() {
            return;
        }
        for g in gpus {
            let cap = capacity.gpu_milli.get(*g).copied().unwrap_or(0);
            if let Some(free) = self.gpu_milli.get_mut(*g) {
                *free = (*free + r.gpu_milli).min(cap);
            }
        }
    }

    /// Node `n` with nothing held: everything free except failed GPUs and MIG instances
    /// already in use (see [`ClusterState::new`]).
    pub fn empty(n: &crate::core::fleet::Node, mig_table: &MigTable) -> NodeFree {
        NodeFree {
            cpu_milli: n.cpu_milli,
            memory_mib: n.memory_mib,
            gpu_milli: n
                .gpus
                .iter()
                .map(|g| {
                    if g.healthy && g.mig.is_none() {
                        MILLI
                    } else {
                        0
                    }
                })
                .collect(),
            mig: n
                .gpus
                .iter()
                .map(|g| {
                    let instances = g.mig.as_ref()?;
                    if !g.healthy {
                        return Some(SlotMask::MAX);
                    }
                    Some(instances.iter().fold(0, |used, inst| {
                        used | mig_table
                            .profile(&g.model, &inst.profile)
                            .map_or(SlotMask::MAX, |p| mig::mask(p, inst.start))
                    }))
                })
                .collect(),
            vram_mib: n.gpus.iter().map(|g| g.memory_mib).collect(),
        }
    }

    /// Frees MIG slots `used` on GPU `gpu`.
    pub fn give_mig(&mut self, gpu: usize, used: SlotMask) {
        if let Some(Some(m)) = self.mig.get_mut(gpu) {
            *m &= !used;
        }
    }

    /// Marks MIG slots `used` on GPU `gpu` as occupied.
    pub fn take_mig(&mut self, gpu: usize, used: SlotMask) {
        if let Some(Some(m)) = self.mig.get_mut(gpu) {
            *m |= used;
        }
    }
}

/// Free resources of the whole fleet, indexed like `Fleet::nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    pub nodes: Vec<NodeFree>,
}

impl ClusterState {
    /// Everything free except failed GPUs and MIG instances already in use. An instance of
    /// a profile the table does not know takes its whole GPU, which errs on the safe side.
    pub fn new(fleet: &Fleet, mig_table: &MigTable) -> ClusterState {
        ClusterState {
            nodes: fleet
                .nodes
                .iter()
                .map(|n| NodeFree::empty(n, mig_table))
                .collect(),
        }
    }

    pub fn gpu_milli_free(&self) -> u64 {
        self.nodes.iter().map(NodeFree::gpu_milli_total).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting by milli alone (requests that ask no GPU memory) counts what the check
    /// per GPU, memory included, does.
    #[test]
    fn serving_counts_agree_with_the_check_per_gpu() {
        let free = NodeFree {
            cpu_milli: 64_000,
            memory_mib: 512_000,
            gpu_milli: vec![1000, 0, 500, 250, 1000, 999, 1, 1000],
            mig: vec![None; 8],
            vram_mib: vec![81_920, 81_920, 0, 40_960, 40_960, 81_920, 81_920, 0],
        };
        for gpu_milli in [0, 1, 250, 300, 500, 999, 1000] {
            for vram_mib in [0, 40_000, 80_000] {
                for num_gpu in [1, 2] {
                    let r = Request {
                        num_gpu,
                        gpu_milli,
                        vram_mib,
                        ..Request::default()
                    };
                    let by_gpu = (0..free.gpu_milli.len()).filter(|i| free.gpu_serves(*i, &r));
                    let shares: u64 = by_gpu
                        .clone()
                        .map(|i| {
                            u64::from(
                                free.gpu_milli.get(i).copied().unwrap_or(0) / gpu_milli.max(1),
                            )
                        })
                        .sum();
                    assert_eq!(free.count_serving(&r), by_gpu.count(), "{r:?}");
                    assert_eq!(free.share_slots(&r), shares, "{r:?}");
                }
            }
        }
    }
}
