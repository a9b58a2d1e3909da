//! What is free on the fleet once the jobs already running there are counted: the state
//! the extender judges and scores nodes on. Built from the inventory (a cluster view's
//! bound pods, with node-level placements) and the policy's MIG tables, once per change
//! of either, and shared by every request until the next change.

use engine::core::alloc::ClusterState;
use engine::core::fleet::{Fleet, MILLI};
use engine::core::mig::{MigTable, SlotMask};
use engine::decide::snapshot;
use engine::inventory::jobs_file::Job;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Free resources after the running jobs, per node, and how to find a node by name.
#[derive(Debug, Clone)]
pub struct Occupancy {
    /// Inventory generation and policy revision this was built for.
    pub key: (u64, String),
    pub free: ClusterState,
    pub by_name: FxHashMap<String, usize>,
    /// Nodes that take nothing new, with why (from the inventory, plus nodes whose
    /// running pods do not fit what gantry knows of them).
    pub closed: BTreeMap<usize, String>,
    /// Running jobs that could not be laid out on their node, with why.
    pub problems: Vec<String>,
    /// Running jobs counted.
    pub running: usize,
}

impl Occupancy {
    /// Counts each running job's members on its nodes. A member that does not fit (the
    /// node shrank, or a pod holds GPUs gantry does not know of) cannot be ignored — the
    /// scheduler counts it — so its node is treated as full and the problem reported.
    pub fn build(
        key: (u64, String),
        fleet: &Fleet,
        running: &[Job],
        closed: &BTreeMap<String, String>,
        mig: &MigTable,
    ) -> Occupancy {
        let mut free = ClusterState::new(fleet, mig);
        let by_name: FxHashMap<String, usize> = fleet
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let mut closed_ix: BTreeMap<usize, String> = closed
            .iter()
            .filter_map(|(name, why)| Some((*by_name.get(name)?, why.clone())))
            .collect();
        let mut problems = Vec::new();
        for job in running {
            for p in &job.placement {
                let Some(&node) = by_name.get(p.node.as_str()) else {
                    problems.push(format!(
                        "{}: runs on node {}, which is not in the inventory",
                        job.id, p.node
                    ));
                    continue;
                };
                let (Some(n), Some(node_free)) = (fleet.nodes.get(node), free.nodes.get_mut(node))
                else {
                    continue;
                };
                if let Err(why) = snapshot::resolve_member(n, node, node_free, mig, job, p) {
                    problems.push(format!("{}: {why}", job.id));
                    closed_ix.entry(node).or_insert_with(|| {
                        format!("running pods hold more than gantry knows the node has ({why})")
                    });
                }
            }
        }
        for &node in closed_ix.keys() {
            if let Some(f) = free.nodes.get_mut(node) {
                f.gpu_milli.iter_mut().for_each(|m| *m = 0);
                f.mig.iter_mut().flatten().for_each(|m| *m = SlotMask::MAX);
            }
        }
        Occupancy {
            key,
            free,
            by_name,
            closed: closed_ix,
            problems,
            running: running.len(),
        }
    }

    /// Free milli-GPUs over the fleet (whole GPUs and shares; MIG GPUs count 0).
    pub fn gpu_milli_free(&self) -> u64 {
        self.free.gpu_milli_free()
    }

    /// Whole GPUs with nothing on them.
    pub fn idle_gpus(&self) -> u64 {
        self.free
            .nodes
            .iter()
            .flat_map(|n| &n.gpu_milli)
            .filter(|m| **m == MILLI)
            .count() as u64
    }
}
