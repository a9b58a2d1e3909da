//! Allocation state: what is still free on every node and GPU, and what a request needs.
//! Whole GPUs and fractional shares (milli-GPUs) are both counted per GPU.

use super::fleet::{Fleet, MILLI};

/// A request for one member of a job: CPU, memory, and `num_gpu` GPUs with `gpu_milli` free
/// on each (1000 = a whole GPU), on one of `models` (empty = any model).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub num_gpu: u32,
    pub gpu_milli: u32,
    pub models: Vec<String>,
}

impl Request {
    /// GPU milli this request takes in total.
    pub fn gpu_milli_total(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    pub fn is_share(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < MILLI
    }

    pub fn accepts_model(&self, model: Option<&str>) -> bool {
        self.num_gpu == 0
            || self.models.is_empty()
            || model.is_some_and(|m| self.models.iter().any(|x| x == m))
    }
}

/// Free resources of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFree {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// Free milli-GPUs per GPU, indexed like the node's GPUs.
    pub gpu_milli: Vec<u32>,
}

impl NodeFree {
    pub fn gpu_milli_total(&self) -> u64 {
        self.gpu_milli.iter().map(|g| u64::from(*g)).sum()
    }

    /// Whether CPU, memory and GPUs suffice (model checked by the caller).
    pub fn fits(&self, r: &Request) -> bool {
        self.cpu_milli >= r.cpu_milli && self.memory_mib >= r.memory_mib && self.gpus_fit(r)
    }

    pub fn gpus_fit(&self, r: &Request) -> bool {
        r.num_gpu == 0
            || self.gpu_milli.iter().filter(|g| **g >= r.gpu_milli).count() >= r.num_gpu as usize
    }

    /// The GPUs a whole-GPU request takes: the lowest-indexed ones with enough free.
    pub fn exclusive_gpus(&self, r: &Request) -> Vec<usize> {
        self.gpu_milli
            .iter()
            .enumerate()
            .filter(|(_, g)| **g >= r.gpu_milli)
            .map(|(i, _)| i)
            .take(r.num_gpu as usize)
            .collect()
    }

    /// Takes `r` from this node on `gpus`. The caller has checked that it fits.
    pub fn take(&mut self, r: &Request, gpus: &[usize]) {
        self.cpu_milli = self.cpu_milli.saturating_sub(r.cpu_milli);
        self.memory_mib = self.memory_mib.saturating_sub(r.memory_mib);
        for g in gpus {
            if let Some(free) = self.gpu_milli.get_mut(*g) {
                *free = free.saturating_sub(r.gpu_milli);
            }
        }
    }
}

/// Free resources of the whole fleet, indexed like `Fleet::nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    pub nodes: Vec<NodeFree>,
}

impl ClusterState {
    pub fn new(fleet: &Fleet) -> ClusterState {
        ClusterState {
            nodes: fleet
                .nodes
                .iter()
                .map(|n| NodeFree {
                    cpu_milli: n.cpu_milli,
                    memory_mib: n.memory_mib,
                    gpu_milli: n
                        .gpus
                        .iter()
                        .map(|g| if g.healthy { MILLI } else { 0 })
                        .collect(),
                })
                .collect(),
        }
    }

    pub fn gpu_milli_free(&self) -> u64 {
        self.nodes.iter().map(NodeFree::gpu_milli_total).sum()
    }
}
