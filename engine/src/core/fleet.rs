//! The fleet: nodes with CPU, memory, pool and topology labels, and their GPUs.

use std::collections::BTreeMap;

/// Milli-GPUs in one GPU.
pub const MILLI: u32 = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    pub uuid: Option<String>,
    /// The model string fleets and inventories use, e.g. `H100-SXM5-80GB` or openb's `V100M16`.
    pub model: String,
    pub memory_mib: u64,
    pub nvlink_island: Option<u32>,
    pub healthy: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub pool: Option<String>,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// Topology and other labels (`rack`, `leaf`, `nvlink_domain`).
    pub labels: BTreeMap<String, String>,
    pub gpus: Vec<Gpu>,
}

impl Node {
    /// A node whose GPUs are all of one model, as in the openb node list.
    pub fn uniform(name: &str, cpu_milli: u64, memory_mib: u64, gpus: u32, model: &str) -> Node {
        Node {
            name: name.to_string(),
            pool: None,
            cpu_milli,
            memory_mib,
            labels: BTreeMap::new(),
            gpus: (0..gpus)
                .map(|index| Gpu {
                    index,
                    uuid: None,
                    model: model.to_string(),
                    memory_mib: 0,
                    nvlink_island: None,
                    healthy: true,
                })
                .collect(),
        }
    }

    /// The model of the node's first GPU (openb nodes have one model each).
    pub fn gpu_model(&self) -> Option<&str> {
        self.gpus.first().map(|g| g.model.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fleet {
    pub nodes: Vec<Node>,
}

impl Fleet {
    pub fn gpu_count(&self) -> u64 {
        self.nodes.iter().map(|n| n.gpus.len() as u64).sum()
    }

    pub fn gpu_milli_capacity(&self) -> u64 {
        self.gpu_count() * u64::from(MILLI)
    }
}
