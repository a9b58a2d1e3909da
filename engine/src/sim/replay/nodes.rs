//! Nodes in a replay: the fleet's, and those an autoscaled pool adds (built from the
//! pool's node shape), with what they count for in the recorder.

use super::record::Recorder;
use crate::core::fleet::{Gpu, Node};
use lang::ir::{Pool, Program};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone)]
pub(super) struct SimNode {
    pub node: Node,
    /// In the fleet the decision sees (not failed, booted, not gone).
    pub up: bool,
    /// Removed for good (scaled down or reclaimed after a spot notice).
    pub gone: bool,
    /// The node's pool, `-` for none.
    pub pool: String,
    pub price_per_node_hour: f64,
    pub price_per_gpu_hour: f64,
}

impl SimNode {
    pub fn new(node: Node, program: &Program) -> SimNode {
        let pool = node.pool.clone().unwrap_or_else(|| "-".to_string());
        let price = program
            .pool(&pool)
            .and_then(|p| p.cost_per_node_hour)
            .unwrap_or(0.0);
        let gpus = node.gpus.len().max(1) as f64;
        SimNode {
            node,
            up: true,
            gone: false,
            pool,
            price_per_node_hour: price,
            price_per_gpu_hour: price / gpus,
        }
    }

    /// Counts the node (`sign` 1) or stops counting it (-1) as paid for.
    pub fn billed(&self, rec: &mut Recorder, sign: f64) {
        bill(rec, &self.pool, self.price_per_node_hour, sign);
    }

    /// Counts its GPUs as available (`sign` 1) or not (-1).
    pub fn available(&self, rec: &mut Recorder, sign: f64) {
        let c = rec.column(&format!("avail.pool.{}", self.pool));
        rec.add(c, sign * self.node.gpus.len() as f64);
    }
}

/// `nodes` nodes of `pool` at `price` per node-hour start (or stop) being paid for.
pub(super) fn bill(rec: &mut Recorder, pool: &str, price: f64, nodes: f64) {
    let c = rec.column(&format!("nodes.pool.{pool}"));
    rec.add(c, nodes);
    let c = rec.column(&format!("spend.pool.{pool}"));
    rec.add(c, nodes * price);
}

/// A new node of `pool`'s shape, named `<pool>-<n>` with the first free `n`.
pub(super) fn from_pool(
    program: &Program,
    pool: &Pool,
    taken: &HashMap<String, usize>,
) -> Option<Node> {
    let shape = program.node_shape(&pool.node)?;
    let model = program.gpu_model(&shape.gpu_model);
    let model_id = model.map_or(shape.gpu_model.as_str(), |m| m.id.as_str());
    let memory = model.map_or(0, |m| m.memory_mib);
    let name = (1..)
        .map(|k| format!("{}-{k}", pool.name))
        .find(|n| !taken.contains_key(n))?;
    let gpus = (0..shape.gpus)
        .map(|i| Gpu {
            nvlink_island: shape
                .nvlink_islands
                .iter()
                .position(|island| island.contains(&i))
                .and_then(|p| u32::try_from(p).ok()),
            ..Gpu::new(i, model_id, memory)
        })
        .collect();
    Some(Node {
        name,
        pool: Some(pool.name.clone()),
        cpu_milli: shape.cpu_milli,
        memory_mib: shape.memory_mib,
        labels: BTreeMap::new(),
        gpus,
    })
}
