//! Warm pools in a replay's figures: per pool, the target its plans set against the
//! nodes that really stood idle and ready, and which jobs started on such a node (a warm
//! start) and how long they waited for their first GPU, so a warm-pool change can be
//! judged in `gantry diff`. Nothing here is read unless the policy has a warm pool.

use super::jobs::Slot;
use super::record::Recorder;
use super::Sim;
use crate::decide::plan::WarmEntry;
use lang::ir::Program;
use std::collections::{BTreeMap, BTreeSet};

/// The warm pools' figures as a replay keeps them.
#[derive(Debug, Default)]
pub(super) struct WarmTrack {
    /// Pools a warm pool of the policy keeps nodes in.
    pools: BTreeSet<String>,
    /// What the recorder holds for each pool: the last plan's target, the idle nodes.
    target: BTreeMap<String, f64>,
    idle: BTreeMap<String, f64>,
    /// Idle nodes of those pools as the last instant ended (node indices): what stood
    /// warm when this instant's decisions began. A node that came up or was freed at
    /// this instant was not waiting for the job that takes it.
    pub idle_nodes: BTreeSet<usize>,
}

impl WarmTrack {
    pub fn new(program: &Program) -> WarmTrack {
        WarmTrack {
            pools: program.warm.iter().map(|w| w.pool.clone()).collect(),
            ..WarmTrack::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// A plan's warm targets become the pools' target from now.
    pub fn targets(&mut self, warm: &[WarmEntry], rec: &mut Recorder) {
        for w in warm.iter().filter(|w| self.pools.contains(&w.pool)) {
            set(
                &mut self.target,
                rec,
                "target",
                &w.pool,
                w.target_nodes as f64,
            );
        }
    }
}

/// Moves the recorder's `warm.<what>.<pool>` column to `value`.
fn set(kept: &mut BTreeMap<String, f64>, rec: &mut Recorder, what: &str, pool: &str, value: f64) {
    let old = kept.entry(pool.to_string()).or_insert(0.0);
    if *old != value {
        let c = rec.column(&format!("warm.{what}.{pool}"));
        rec.add(c, value - *old);
        *old = value;
    }
}

impl Sim<'_> {
    /// Nodes of pools `pool_of` accepts that are up and hold nothing now: no job runs on
    /// them and no stopping victim keeps a GPU.
    pub(super) fn idle_nodes(&self, accept: &dyn Fn(&str) -> bool) -> Vec<usize> {
        let running_on: BTreeSet<String> = self
            .active
            .iter()
            .filter_map(|&j| self.jobs.get(j).and_then(Slot::live))
            .flat_map(|j| j.nodes())
            .collect();
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up && accept(&n.pool) && !running_on.contains(&n.node.name))
            .filter(|(i, n)| {
                n.node.gpus.iter().all(|g| {
                    self.busy_until
                        .get(&(*i, g.index))
                        .is_none_or(|&u| u <= self.now)
                })
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The warm pool whose idle node (idle as the last instant ended) a placement on
    /// `nodes` starts a job on, if any.
    pub(super) fn warm_start(&self, nodes: &[String]) -> Option<String> {
        if self.warm.is_empty() {
            return None;
        }
        nodes.iter().find_map(|name| {
            let &n = self.node_by_name.get(name)?;
            self.warm
                .idle_nodes
                .contains(&n)
                .then(|| self.nodes.get(n).map(|x| x.pool.clone()))?
        })
    }

    /// After an instant: each warm pool's idle nodes, in the recorder.
    pub(super) fn record_warm_idle(&mut self) {
        if self.warm.is_empty() {
            return;
        }
        let pools = &self.warm.pools;
        let idle = self.idle_nodes(&|p| pools.contains(p));
        let mut per_pool: BTreeMap<String, f64> =
            self.warm.pools.iter().map(|p| (p.clone(), 0.0)).collect();
        for &n in &idle {
            if let Some(count) = self.nodes.get(n).and_then(|x| per_pool.get_mut(&x.pool)) {
                *count += 1.0;
            }
        }
        for (pool, count) in per_pool {
            set(&mut self.warm.idle, &mut self.rec, "idle", &pool, count);
        }
        self.warm.idle_nodes = idle.into_iter().collect();
    }
}
