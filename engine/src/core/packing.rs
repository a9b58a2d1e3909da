//! Placement strategies for one request: which node, and which GPUs on it. Every strategy
//! scores feasible nodes on 0–100 (higher is better) and breaks ties uniformly at random
//! with the seeded generator, as kube-scheduler does.

use super::alloc::{ClusterState, NodeFree, Request};
use super::fleet::Fleet;
use super::frag::Workload;
use super::rng::Rng;
use std::collections::HashMap;

/// Normalisation constants of the FGD simulator's best-fit score (milli-CPU, milli-GPU).
const MAX_SPEC_CPU: f64 = 128_000.0;
const MAX_SPEC_GPU: f64 = 8_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Any feasible node.
    Random,
    /// The node left with the least free CPU and GPU after placement.
    BestFit,
    /// Fill partly used GPUs first, then partly used nodes.
    GpuPacking,
    /// The node left with the most free resources.
    Spread,
    /// Fragmentation gradient descent: the node whose fragmentation grows least.
    Fgd,
}

impl Strategy {
    pub fn from_name(name: &str) -> Option<Strategy> {
        Some(match name {
            "random" => Strategy::Random,
            "best_fit" | "bestfit" => Strategy::BestFit,
            "gpu_packing" => Strategy::GpuPacking,
            "spread" => Strategy::Spread,
            "fgd" | "least_fragmentation" => Strategy::Fgd,
            _ => return None,
        })
    }

    pub const NAMES: &'static [&'static str] =
        &["random", "best_fit", "gpu_packing", "spread", "fgd"];
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub node: usize,
    pub gpus: Vec<usize>,
}

/// Per-node memo of FGD evaluations; a node's entries are dropped when it changes.
#[derive(Debug, Default)]
pub struct Cache {
    frag: Vec<Option<f64>>,
    scores: Vec<HashMap<Request, (i64, Vec<usize>)>>,
}

impl Cache {
    pub fn new(nodes: usize) -> Cache {
        Cache {
            frag: vec![None; nodes],
            scores: vec![HashMap::new(); nodes],
        }
    }

    pub fn invalidate(&mut self, node: usize) {
        if let Some(f) = self.frag.get_mut(node) {
            *f = None;
        }
        if let Some(s) = self.scores.get_mut(node) {
            s.clear();
        }
    }
}

/// Chooses a node and GPUs for `req`, or `None` if no node fits.
pub fn choose(
    strategy: Strategy,
    fleet: &Fleet,
    state: &ClusterState,
    req: &Request,
    workload: &Workload,
    cache: &mut Cache,
    rng: &mut Rng,
) -> Option<Choice> {
    let mut best: Option<(i64, Choice)> = None;
    let mut ties = 0usize;
    for (i, (node, free)) in fleet.nodes.iter().zip(&state.nodes).enumerate() {
        let model = node.gpu_model();
        if !req.accepts_model(model) || !free.fits(req) {
            continue;
        }
        let (score, gpus) = match strategy {
            Strategy::Random => (0, default_gpus(free, req)),
            Strategy::BestFit => (best_fit_score(free, req), default_gpus(free, req)),
            Strategy::Spread => (100 - best_fit_score(free, req), default_gpus(free, req)),
            Strategy::GpuPacking => (gpu_packing_score(free, req), default_gpus(free, req)),
            Strategy::Fgd => fgd(i, model, free, req, workload, cache),
        };
        match &best {
            Some((b, _)) if score < *b => {}
            Some((b, _)) if score == *b => {
                ties += 1;
                if rng.below(ties) == 0 {
                    best = Some((score, Choice { node: i, gpus }));
                }
            }
            _ => {
                ties = 1;
                best = Some((score, Choice { node: i, gpus }));
            }
        }
    }
    best.map(|(_, c)| c)
}

/// Shares go to the fullest GPU they fit on; whole GPUs to the lowest free indices.
fn default_gpus(free: &NodeFree, req: &Request) -> Vec<usize> {
    if req.num_gpu == 0 {
        return Vec::new();
    }
    if req.is_share() {
        return free
            .gpu_milli
            .iter()
            .enumerate()
            .filter(|(_, g)| **g >= req.gpu_milli)
            .min_by_key(|(i, g)| (**g, *i))
            .map(|(i, _)| vec![i])
            .unwrap_or_default();
    }
    free.exclusive_gpus(req)
}

/// `(1 − ½·cpu_left/128 cores − ½·gpu_left/8 GPUs) × 100`, as the FGD paper's baseline.
fn best_fit_score(free: &NodeFree, req: &Request) -> i64 {
    let cpu_left = free.cpu_milli.saturating_sub(req.cpu_milli) as f64;
    let gpu_left = free.gpu_milli_total().saturating_sub(req.gpu_milli_total()) as f64;
    let score = 0.5 * cpu_left / MAX_SPEC_CPU + 0.5 * gpu_left / MAX_SPEC_GPU;
    ((1.0 - score) * 100.0) as i64
}

/// Prefers nodes whose GPUs are already in use, so whole GPUs stay free elsewhere.
fn gpu_packing_score(free: &NodeFree, req: &Request) -> i64 {
    let used = free.gpu_milli.iter().filter(|g| **g < 1000).count() as i64;
    let total = free.gpu_milli.len().max(1) as i64;
    let share_fits_used = req.is_share()
        && free
            .gpu_milli
            .iter()
            .any(|g| *g < 1000 && *g >= req.gpu_milli);
    (if share_fits_used { 50 } else { 0 }) + 50 * used / total
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// FGD: the score grows as the node's fragmentation grows less; for a share, every GPU it
/// fits on is tried and the best kept.
fn fgd(
    node: usize,
    model: Option<&str>,
    free: &NodeFree,
    req: &Request,
    workload: &Workload,
    cache: &mut Cache,
) -> (i64, Vec<usize>) {
    if let Some(hit) = cache.scores.get(node).and_then(|s| s.get(req)) {
        return hit.clone();
    }
    let before = match cache.frag.get(node).copied().flatten() {
        Some(f) => f,
        None => {
            let f = workload.node_frag(model, free);
            if let Some(slot) = cache.frag.get_mut(node) {
                *slot = Some(f);
            }
            f
        }
    };
    let score_of = |gpus: &[usize]| {
        let mut after = free.clone();
        after.take(req, gpus);
        let delta = before - workload.node_frag(model, &after);
        (sigmoid(delta / 1000.0) * 100.0) as i64
    };
    let result = if req.is_share() {
        let mut best: Option<(i64, Vec<usize>)> = None;
        for (i, g) in free.gpu_milli.iter().enumerate() {
            if *g < req.gpu_milli {
                continue;
            }
            let s = score_of(&[i]);
            if best.as_ref().is_none_or(|(b, _)| s > *b) {
                best = Some((s, vec![i]));
            }
        }
        best.unwrap_or((0, Vec::new()))
    } else {
        let gpus = free.exclusive_gpus(req);
        (score_of(&gpus), gpus)
    };
    if let Some(s) = cache.scores.get_mut(node) {
        s.insert(req.clone(), result.clone());
    }
    result
}
