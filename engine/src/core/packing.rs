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
    /// Fragmentation gradient descent as the FGD paper scores it: `⌊100·σ(Δfrag/1000)⌋`.
    Fgd,
    /// Gantry's default: the exact fragmentation change, then best fit, then fleet order.
    LeastFragmentation,
}

impl Strategy {
    pub fn from_name(name: &str) -> Option<Strategy> {
        Some(match name {
            "random" => Strategy::Random,
            "best_fit" | "bestfit" => Strategy::BestFit,
            "gpu_packing" => Strategy::GpuPacking,
            "spread" => Strategy::Spread,
            "fgd" => Strategy::Fgd,
            "least_fragmentation" | "gantry" => Strategy::LeastFragmentation,
            _ => return None,
        })
    }

    pub const NAMES: &'static [&'static str] =
        &[
        "random",
        "best_fit",
        "gpu_packing",
        "spread",
        "fgd",
        "least_fragmentation",
    ];
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub node: usize,
    pub gpus: Vec<usize>,
}

/// Per-node memo of fragmentation evaluations; a node's entries are dropped when it changes.
#[derive(Debug, Default)]
pub struct Cache {
    nodes: Vec<NodeMemo>,
}

#[derive(Debug, Default, Clone)]
struct NodeMemo {
    /// FGD fragmentation and stranding of the node as it is.
    before: Option<(f64, f64)>,
    scores: HashMap<Request, (Score, Vec<usize>)>,
}

impl Cache {
    pub fn new(nodes: usize) -> Cache {
        Cache {
            nodes: vec![NodeMemo::default(); nodes],
        }
    }

    pub fn invalidate(&mut self, node: usize) {
        if let Some(m) = self.nodes.get_mut(node) {
            *m = NodeMemo::default();
        }
    }
}

/// Scores compare lexicographically; higher is better.
type Score = (i64, i64, i64);

/// Chooses a node and GPUs for `req`, or `None` if no node fits. Equal scores go to the
/// node that comes first in the fleet: a deterministic choice that also packs, where a
/// random one spreads small pods over nodes large pods need (it costs FGD about five
/// points on openb). `Random` picks uniformly among the feasible nodes.
pub fn choose(
    strategy: Strategy,
    fleet: &Fleet,
    state: &ClusterState,
    req: &Request,
    workload: &Workload,
    cache: &mut Cache,
    rng: &mut Rng,
) -> Option<Choice> {
    let feasible = fleet
        .nodes
        .iter()
        .zip(&state.nodes)
        .enumerate()
        .filter(|(_, (node, free))| req.accepts_model(node.gpu_model()) && free.fits(req));
    if strategy == Strategy::Random {
        let all: Vec<usize> = feasible.map(|(i, _)| i).collect();
        let node = *all.get(rng.below(all.len()))?;
        let free = state.nodes.get(node)?;
        return Some(Choice {
            node,
            gpus: default_gpus(free, req),
        });
    }
    let mut best: Option<(Score, Choice)> = None;
    for (i, (node, free)) in feasible {
        let simple = |s: i64| ((s, 0, 0), default_gpus(free, req));
        let (score, gpus) = match strategy {
            Strategy::Random | Strategy::BestFit => simple(best_fit_score(free, req)),
            Strategy::Spread => simple(100 - best_fit_score(free, req)),
            Strategy::GpuPacking => simple(gpu_packing_score(free, req)),
            Strategy::Fgd | Strategy::LeastFragmentation => {
                fragmentation_score(strategy, i, node.gpu_model(), free, req, workload, cache)
            }
        };
        if best.as_ref().is_none_or(|(b, _)| score > *b) {
            best = Some((score, Choice { node: i, gpus }));
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

/// FGD's score, `⌊100·σ(Δfrag/1000)⌋` where Δfrag is how much the placement lowers the
/// node's expected fragmentation. `LeastFragmentation` breaks FGD's many ties for shares
/// and CPU-only pods by how much GPU capacity the placement strands for a stream of typical
/// pods (CPU included: see [`Workload::node_stranding`]), then by best fit. A share tries
/// every GPU it fits on and keeps the best (FGD: the first best; Gantry: the fullest).
fn fragmentation_score(
    strategy: Strategy,
    node: usize,
    model: Option<&str>,
    free: &NodeFree,
    req: &Request,
    workload: &Workload,
    cache: &mut Cache,
) -> (Score, Vec<usize>) {
    let Some(memo) = cache.nodes.get_mut(node) else {
        return ((0, 0, 0), Vec::new());
    };
    if let Some(hit) = memo.scores.get(req) {
        return hit.clone();
    }
    let gantry = strategy == Strategy::LeastFragmentation;
    let looks_ahead = gantry && (req.is_share() || req.num_gpu == 0);
    let (frag, strand) = *memo.before.get_or_insert_with(|| {
        (
            workload.node_frag(model, free),
            if gantry {
                workload.node_stranding(model, free)
            } else {
                0.0
            },
        )
    });
    let score_of = |gpus: &[usize]| -> Score {
        let mut after = free.clone();
        after.take(req, gpus);
        let fgd = (sigmoid((frag - workload.node_frag(model, &after)) / 1000.0) * 100.0) as i64;
        if !gantry {
            return (fgd, 0, 0);
        }
        let unstranded = if looks_ahead {
            (strand - workload.node_stranding(model, &after)).round() as i64
        } else {
            0
        };
        (fgd, unstranded, best_fit_score(free, req))
    };
    let result = if req.is_share() {
        let mut best: Option<(Score, u32, usize)> = None;
        for (i, g) in free.gpu_milli.iter().enumerate() {
            if *g < req.gpu_milli {
                continue;
            }
            let s = score_of(&[i]);
            let better = match &best {
                None => true,
                Some((b, bg, _)) => s > *b || (gantry && s == *b && *g < *bg),
            };
            if better {
                best = Some((s, *g, i));
            }
        }
        best.map(|(s, _, i)| (s, vec![i]))
            .unwrap_or(((0, 0, 0), Vec::new()))
    } else {
        let gpus = free.exclusive_gpus(req);
        (score_of(&gpus), gpus)
    };
    memo.scores.insert(req.clone(), result.clone());
    result
}
