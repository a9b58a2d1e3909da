//! Placement strategies: how good a node is for one request, and which GPUs on it to use.
//! Scores compare lexicographically (higher is better); equal scores go to the node that
//! comes first in the fleet (see `placer`).

use super::alloc::{NodeFree, Request};
use super::fleet::Node;
use super::frag::Workload;
use super::mig::{self, MigTable};

/// Normalisation constants of the FGD simulator's best-fit score (milli-CPU, milli-GPU).
const MAX_SPEC_CPU: f64 = 128_000.0;
const MAX_SPEC_GPU: f64 = 8_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Any feasible node, uniformly at random.
    Random,
    /// The node left with the least free CPU and GPU after placement.
    BestFit,
    /// Fill partly used GPUs first, then partly used nodes.
    GpuPacking,
    /// The node left with the most free resources.
    Spread,
    /// Fragmentation gradient descent as the FGD paper scores it: `⌊100·σ(Δfrag/1000)⌋`.
    Fgd,
    /// Gantry's default: FGD, ties broken by a look-ahead on stranded capacity, then best fit.
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

    pub fn from_policy(packing: lang::ir::Packing) -> Strategy {
        match packing {
            lang::ir::Packing::LeastFragmentation => Strategy::LeastFragmentation,
            lang::ir::Packing::BestFit => Strategy::BestFit,
            lang::ir::Packing::Spread => Strategy::Spread,
            lang::ir::Packing::GpuPacking => Strategy::GpuPacking,
        }
    }

    pub const NAMES: &'static [&'static str] = &[
        "random",
        "best_fit",
        "gpu_packing",
        "spread",
        "fgd",
        "least_fragmentation",
    ];
}

/// Scores compare lexicographically; higher is better.
pub type Score = (i64, i64, i64);

/// Where one member goes on a node: its GPUs and, for MIG, the slot each instance starts at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OnNode {
    pub gpus: Vec<usize>,
    pub mig_starts: Vec<u32>,
}

/// What scoring a node needs besides the node: the target workload, MIG tables, and the
/// node's fragmentation as it is (computed once per node state by the caller's memo).
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub strategy: Strategy,
    pub workload: &'a Workload,
    pub mig: &'a MigTable,
}

/// The node's FGD fragmentation and stranding now, the inputs of a fragmentation score.
pub fn node_state(ctx: &Context<'_>, node: &Node, free: &NodeFree) -> (f64, f64) {
    match ctx.strategy {
        Strategy::Fgd => (ctx.workload.node_frag(node.gpu_model(), free), 0.0),
        Strategy::LeastFragmentation => (
            ctx.workload.node_frag_memory_aware(node.gpu_model(), free),
            ctx.workload.node_stranding(node.gpu_model(), free),
        ),
        _ => (0.0, 0.0),
    }
}

/// Whether `req` can go on this node at all (model, CPU, memory, GPUs, MIG slots).
pub fn feasible(ctx: &Context<'_>, node: &Node, free: &NodeFree, req: &Request) -> bool {
    if !req.accepts_node(node) || !free.fits(req) {
        return false;
    }
    match &req.mig_profile {
        None => true,
        Some(_) => mig_slots(ctx, node, free, req).is_some(),
    }
}

/// Scores a feasible node and picks its GPUs. `before` is [`node_state`] of the node.
pub fn score(
    ctx: &Context<'_>,
    node: &Node,
    free: &NodeFree,
    req: &Request,
    before: (f64, f64),
) -> (Score, OnNode) {
    if req.mig_profile.is_some() {
        return mig_score(ctx, node, free, req);
    }
    let simple = |s: i64| {
        (
            (s, 0, 0),
            OnNode {
                gpus: default_gpus(node, free, req),
                mig_starts: Vec::new(),
            },
        )
    };
    match ctx.strategy {
        Strategy::Random => simple(0),
        Strategy::BestFit => simple(best_fit_score(free, req)),
        Strategy::Spread => simple(100 - best_fit_score(free, req)),
        Strategy::GpuPacking => simple(gpu_packing_score(free, req)),
        Strategy::Fgd | Strategy::LeastFragmentation => {
            fragmentation_score(ctx, node, free, req, before)
        }
    }
}

/// Shares go to the fullest GPU they fit on; whole GPUs stay in one NVLink island if any
/// island can hold them (the fullest such island), else span the fewest islands.
fn default_gpus(node: &Node, free: &NodeFree, req: &Request) -> Vec<usize> {
    if req.num_gpu == 0 {
        return Vec::new();
    }
    let serving = free.serving_gpus(req);
    if req.is_share() {
        return serving
            .iter()
            .min_by_key(|i| (free.gpu_milli.get(**i).copied().unwrap_or(0), **i))
            .map(|i| vec![*i])
            .unwrap_or_default();
    }
    island_gpus(node, &serving, req.num_gpu as usize)
}

/// `n` of the `serving` GPUs, in as few NVLink islands as possible.
pub fn island_gpus(node: &Node, serving: &[usize], n: usize) -> Vec<usize> {
    let island_of = |g: usize| node.gpus.get(g).and_then(|x| x.nvlink_island);
    // All in one island (or none known): the first `n`, which the grouping below gives
    // too, without building it (this runs for every node a placement scores).
    let first = serving.first().map(|g| island_of(*g));
    if serving.iter().all(|g| Some(island_of(*g)) == first) {
        return serving.iter().copied().take(n).collect();
    }
    let mut islands: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
    for g in serving {
        match islands.iter_mut().find(|(k, _)| *k == island_of(*g)) {
            Some((_, v)) => v.push(*g),
            None => islands.push((island_of(*g), vec![*g])),
        }
    }
    // One island that holds all: the one with fewest free GPUs, so big islands stay whole.
    if let Some((_, gpus)) = islands
        .iter()
        .filter(|(_, v)| v.len() >= n)
        .min_by_key(|(k, v)| (v.len(), *k))
    {
        return gpus.iter().copied().take(n).collect();
    }
    islands.sort_by_key(|(k, v)| (std::cmp::Reverse(v.len()), *k));
    islands.into_iter().flat_map(|(_, v)| v).take(n).collect()
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
/// node's expected fragmentation. `LeastFragmentation` counts a typical shape as fitting
/// only if its memory fits too ([`Workload::node_frag_memory_aware`]), and breaks the many
/// ties for shares and CPU-only pods by how much GPU capacity the placement strands for a
/// stream of typical pods (CPU and memory included: see [`Workload::node_stranding`]), then
/// by best fit. A share tries
/// every GPU it fits on and keeps the best (FGD: the first best; Gantry: the fullest).
fn fragmentation_score(
    ctx: &Context<'_>,
    node: &Node,
    free: &NodeFree,
    req: &Request,
    (frag, strand): (f64, f64),
) -> (Score, OnNode) {
    let gantry = ctx.strategy == Strategy::LeastFragmentation;
    let looks_ahead = gantry && (req.is_share() || req.num_gpu == 0);
    let model = node.gpu_model();
    let score_of = |gpus: &[usize]| -> Score {
        let mut after = free.clone();
        after.take(req, gpus);
        let frag_after = if gantry {
            ctx.workload.node_frag_memory_aware(model, &after)
        } else {
            ctx.workload.node_frag(model, &after)
        };
        let fgd = (sigmoid((frag - frag_after) / 1000.0) * 100.0) as i64;
        if !gantry {
            return (fgd, 0, 0);
        }
        let unstranded = if looks_ahead {
            (strand - ctx.workload.node_stranding(model, &after)).round() as i64
        } else {
            0
        };
        (fgd, unstranded, best_fit_score(free, req))
    };
    let on = |gpus: Vec<usize>| OnNode {
        gpus,
        mig_starts: Vec::new(),
    };
    if req.is_share() {
        let mut best: Option<(Score, u32, usize)> = None;
        for i in free.serving_gpus(req) {
            let g = free.gpu_milli.get(i).copied().unwrap_or(0);
            let s = score_of(&[i]);
            let better = match &best {
                None => true,
                Some((b, bg, _)) => s > *b || (gantry && s == *b && g < *bg),
            };
            if better {
                best = Some((s, g, i));
            }
        }
        return best
            .map(|(s, _, i)| (s, on(vec![i])))
            .unwrap_or(((0, 0, 0), OnNode::default()));
    }
    let gpus = default_gpus(node, free, req);
    (score_of(&gpus), on(gpus))
}

/// GPUs and start slots for `num_gpu` instances of the request's MIG profile: each on the
/// GPU with the most slots already used that still fits it (packing MIG GPUs), at the start
/// that leaves most room ([`mig::choose_start`]).
fn mig_slots(ctx: &Context<'_>, node: &Node, free: &NodeFree, req: &Request) -> Option<OnNode> {
    let name = req.mig_profile.as_deref()?;
    let mut used: Vec<Option<mig::SlotMask>> = free.mig.clone();
    let mut on = OnNode::default();
    for _ in 0..req.num_gpu.max(1) {
        let mut best: Option<(u32, usize, u32)> = None;
        for (i, gpu) in node.gpus.iter().enumerate() {
            let Some(Some(mask)) = used.get(i) else {
                continue;
            };
            if free
                .vram_mib
                .get(i)
                .is_some_and(|m| *m != 0 && *m < req.vram_mib)
            {
                continue;
            }
            let Some(profile) = ctx.mig.profile(&gpu.model, name) else {
                continue;
            };
            let Some(start) = mig::choose_start(ctx.mig.profiles(&gpu.model), profile, *mask)
            else {
                continue;
            };
            let fullness = mask.count_ones();
            if best.is_none_or(|(f, _, _)| fullness > f) {
                best = Some((fullness, i, start));
            }
        }
        let (_, gpu, start) = best?;
        let model = node.gpus.get(gpu).map(|g| g.model.as_str()).unwrap_or("");
        let profile = ctx.mig.profile(model, name)?;
        if let Some(Some(mask)) = used.get_mut(gpu) {
            *mask |= mig::mask(profile, start);
        }
        on.gpus.push(gpu);
        on.mig_starts.push(start);
    }
    Some(on)
}

fn mig_score(ctx: &Context<'_>, node: &Node, free: &NodeFree, req: &Request) -> (Score, OnNode) {
    match mig_slots(ctx, node, free, req) {
        Some(on) => {
            let used: u32 = free.mig.iter().flatten().map(|m| m.count_ones()).sum();
            let score = if ctx.strategy == Strategy::Spread {
                -i64::from(used)
            } else {
                i64::from(used)
            };
            ((score, 0, 0), on)
        }
        None => ((i64::MIN, 0, 0), OnNode::default()),
    }
}
