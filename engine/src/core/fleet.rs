//! The fleet: nodes with CPU, memory, pool and topology labels, and their GPUs.

use lang::ir::TopologyLevel;
use std::collections::BTreeMap;

/// Milli-GPUs in one GPU.
pub const MILLI: u32 = 1000;

/// A MIG instance that exists on a GPU and is in use: `profile` starting at slot `start`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MigInstance {
    pub profile: String,
    pub start: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub index: u32,
    pub uuid: Option<String>,
    /// The PCI bus id NVML reports (`00000000:18:00.0`).
    pub pci_bus_id: Option<String>,
    /// The model string fleets and inventories use, e.g. `H100-SXM5-80GB` or openb's `V100M16`.
    pub model: String,
    pub memory_mib: u64,
    pub nvlink_island: Option<u32>,
    pub healthy: bool,
    /// `Some` when the GPU is in MIG mode: it then serves MIG instances only, and these are
    /// the instances already in use.
    pub mig: Option<Vec<MigInstance>>,
}

impl Gpu {
    pub fn new(index: u32, model: &str, memory_mib: u64) -> Gpu {
        Gpu {
            index,
            uuid: None,
            pci_bus_id: None,
            model: model.to_string(),
            memory_mib,
            nvlink_island: None,
            healthy: true,
            mig: None,
        }
    }
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
            gpus: (0..gpus).map(|index| Gpu::new(index, model, 0)).collect(),
        }
    }

    /// The model of the node's first GPU (openb nodes have one model each).
    pub fn gpu_model(&self) -> Option<&str> {
        self.gpus.first().map(|g| g.model.as_str())
    }

    /// The label naming this node's group at `level`: the node itself for `Node`, nothing
    /// for levels the node carries no label for.
    pub fn topology_key(&self, level: TopologyLevel) -> Option<String> {
        self.topology_key_ref(level).map(str::to_string)
    }

    /// [`Node::topology_key`], borrowed.
    pub fn topology_key_ref(&self, level: TopologyLevel) -> Option<&str> {
        let label = match level {
            TopologyLevel::Node | TopologyLevel::NvlinkIsland => return Some(&self.name),
            TopologyLevel::Any => return Some(""),
            TopologyLevel::NvlinkDomain => "nvlink_domain",
            TopologyLevel::Rack => "rack",
            TopologyLevel::Leaf => "leaf",
        };
        self.labels.get(label).map(String::as_str)
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
