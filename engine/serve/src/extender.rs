//! The kube-scheduler extender (`/extender/filter`, `/extender/prioritize`): the engine's
//! placement logic and the policy applied to the nodes kube-scheduler proposes for a pod.
//!
//! kube-scheduler counts whole `nvidia.com/gpu` itself; what the extender adds is the
//! policy (admission deny and route rules, the job's pools, required topology) and what
//! the inventory knows that Node objects do not (GPU health, MIG slots in use, NVLink
//! islands, GPU model and memory), and it scores with the policy's packing strategy.
//! The wire format is the Go structs of `k8s.io/kube-scheduler/extender/v1`, which have
//! no JSON tags: field names are PascalCase.

use super::admission::Context as Ctx;
use super::occupancy::Occupancy;
use super::pod::{self, Pod};
use engine::core::alloc::{NodeFree, Request};
use engine::core::fleet::{Fleet, Node, MILLI};
use engine::core::frag::Workload;
use engine::core::gang::JobShape;
use engine::core::mig::MigTable;
use engine::core::packing::{self, Context, Strategy};
use engine::decide::admission::admit;
use engine::decide::snapshot::{member_milli, JobState};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// kube-scheduler's `MaxExtenderPriority`: scores are 0..=10.
pub const MAX_SCORE: i64 = 10;

/// `ExtenderArgs`: the pod and the candidate nodes, either as Node objects (`Nodes`) or,
/// when the extender is `nodeCacheCapable`, as names (`NodeNames`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderArgs {
    pub pod: Option<Value>,
    pub nodes: Option<NodeList>,
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList`; items are kept as sent so the filter answers with the same objects.
#[derive(Debug, Deserialize, Serialize)]
pub struct NodeList {
    #[serde(default)]
    pub items: Vec<Value>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FilterResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Nodes that do not fit now (preempting pods there might help).
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes the pod can never use (preemption would not help).
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    pub error: String,
}

/// `HostPriority`.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority {
    pub host: String,
    pub score: i64,
}

/// Why a node is out for the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Fits,
    NotNow(String),
    Never(String),
}

/// The label and PriorityClass of the queue's capacity placeholders (engine/cluster).
pub const PLACEHOLDER_LABEL: &str = "gantry.dev/placeholder";
pub const PLACEHOLDER_CLASS: &str = "gantry-placeholder";

/// A capacity placeholder of the queue: its label and the `gantry-placeholder` class.
pub fn is_placeholder(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PLACEHOLDER_LABEL))
        && pod.spec.priority_class_name.as_deref() == Some(PLACEHOLDER_CLASS)
}

/// The job a pod stands for, with the policy's route applied, and its team (the policy's
/// default team when the pod names none); `Ok(None)` for a pod with no GPUs (every node
/// passes); `Err` for a pod the policy refuses outright.
fn job_shape(ctx: &Ctx<'_>, pod: &Pod) -> Result<Option<(JobShape, Option<String>)>, String> {
    if is_placeholder(pod) {
        // Gantry's own capacity placeholder: kube-scheduler's checks are all it needs.
        return Ok(None);
    }
    let Some(mut job) = pod::job(pod, None, ctx.now)? else {
        return Ok(None);
    };
    engine::decide::default_job(ctx.program, &mut job);
    let js = JobState {
        member_milli: member_milli(ctx.fleet, ctx.mig, &job.shape.member),
        job: Box::new(job),
        running: None,
        revision: None,
    };
    if let Some(reason) = engine::decide::invalid_job(ctx.program, &js) {
        return Err(reason.message);
    }
    let verdict = admit(ctx.program, &js, ctx.now);
    if let Some((rule, message)) = verdict.denied {
        return Err(format!("denied by rule {rule}: {message}"));
    }
    if let Some(reason) = engine::decide::unassigned_job(ctx.program, &js) {
        return Err(reason.message);
    }
    let team = js.job.team;
    let mut shape = js.job.shape;
    if let Some((_, pool)) = verdict.routed {
        shape.pools = vec![pool];
    }
    engine::decide::apply_policy_topology(&mut shape, &ctx.program.placement);
    Ok(Some((shape, team)))
}

struct Judge<'a> {
    fleet: &'a Fleet,
    occupancy: &'a Occupancy,
    workload: Workload,
    strategy: Strategy,
    mig: &'a MigTable,
    /// Pools where the pod's team has a guarantee of its own: an unpinned pod goes there
    /// first, as `decide` places it.
    preferred_pools: Vec<String>,
    /// The node gantry's queue assigned the pod to, when the assignment is sealed: its
    /// capacity there is already counted as the pod's own.
    assigned: Option<String>,
}

impl<'a> Judge<'a> {
    fn new(ctx: &Ctx<'a>, shape: &JobShape, team: Option<&str>, pod: &Pod) -> Judge<'a> {
        let preferred_pools = if shape.pools.is_empty() {
            team.and_then(|t| ctx.program.teams.iter().find(|x| x.name == t))
                .map(|t| {
                    t.guaranteed
                        .per_pool_milli
                        .iter()
                        .filter(|(_, m)| **m > 0)
                        .map(|(p, _)| p.clone())
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Judge {
            fleet: ctx.fleet,
            occupancy: ctx.occupancy,
            workload: Workload::typical(std::slice::from_ref(&shape.member)),
            strategy: Strategy::from_policy(ctx.program.placement.packing),
            mig: ctx.mig,
            preferred_pools,
            // Only an assignment the queue sealed: one a pod's author wrote would skip
            // the check for room.
            assigned: pod
                .metadata
                .uid
                .as_ref()
                .and_then(|uid| ctx.assigned.get(uid))
                .filter(|node| {
                    pod.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(super::admission::ASSIGNED_ANNOTATION))
                        == Some(*node)
                })
                .cloned(),
        }
    }

    fn context(&self) -> Context<'_> {
        Context {
            strategy: self.strategy,
            workload: &self.workload,
            mig: self.mig,
        }
    }

    fn node(&self, name: &str) -> Option<(usize, &'a Node)> {
        let i = *self.occupancy.by_name.get(name)?;
        Some((i, self.fleet.nodes.get(i)?))
    }

    fn verdict(&self, name: &str, shape: &JobShape) -> Verdict {
        let Some((i, node)) = self.node(name) else {
            return Verdict::Never(format!(
                "gantry: node {name} is not in gantry's inventory, so its GPUs are unknown (a fleet file lists only its own nodes; `gantry serve --kubeconfig` sees every node)"
            ));
        };
        let pool = node.pool.as_deref();
        if !shape.pools.is_empty() && !pool.is_some_and(|p| shape.pools.iter().any(|x| x == p)) {
            return Verdict::Never(format!(
                "gantry: node is in pool {}; the job runs in {}",
                pool.unwrap_or("(none)"),
                shape.pools.join(", ")
            ));
        }
        if let Some(level) = shape.topology_required {
            if shape.members > 1 && node.topology_key(level).is_none() {
                return Verdict::Never(format!(
                    "gantry: the gang needs one {}; the node has no such label",
                    engine::core::gang::level_name(level)
                ));
            }
        }
        let ctx = self.context();
        let member = &shape.member;
        // Capacity as if every GPU were healthy and every MIG slot free: what the node
        // could ever offer.
        let capacity = capacity(node);
        if !packing::feasible(&ctx, node, &capacity, member) {
            return Verdict::Never(format!(
                "gantry: never fits: {}",
                shortfall(node, Some(&capacity), member, false)
            ));
        }
        if let Some(why) = self.occupancy.closed.get(&i) {
            return Verdict::NotNow(format!("gantry: takes nothing new: {why}"));
        }
        if self.assigned.as_deref() == Some(name) {
            // The queue placed it here and holds its room: what it would take is counted.
            return Verdict::Fits;
        }
        let free = self.occupancy.free.nodes.get(i);
        if !free.is_some_and(|f| packing::feasible(&ctx, node, f, member)) {
            return Verdict::NotNow(format!(
                "gantry: does not fit now: {}",
                shortfall(node, free, member, true)
            ));
        }
        Verdict::Fits
    }

    /// The node's rank key for a pod that fits (higher is better): its pool's preference
    /// first, then the strategy's score.
    fn score(&self, name: &str, member: &Request) -> Option<(bool, packing::Score)> {
        let (i, node) = self.node(name)?;
        let free = self.occupancy.free.nodes.get(i)?;
        let ctx = self.context();
        let before = packing::node_state(&ctx, node, free);
        let preferred = node
            .pool
            .as_ref()
            .is_some_and(|p| self.preferred_pools.contains(p));
        Some((
            preferred,
            packing::score(&ctx, node, free, member, before).0,
        ))
    }
}

/// What `node` could ever offer: every GPU healthy and free, every MIG slot free.
fn capacity(node: &Node) -> NodeFree {
    NodeFree {
        cpu_milli: node.cpu_milli,
        memory_mib: node.memory_mib,
        gpu_milli: node
            .gpus
            .iter()
            .map(|g| if g.mig.is_none() { MILLI } else { 0 })
            .collect(),
        mig: node
            .gpus
            .iter()
            .map(|g| g.mig.as_ref().map(|_| 0))
            .collect(),
        vram_mib: node.gpus.iter().map(|g| g.memory_mib).collect(),
    }
}

/// What the node lacks for one member, in the first dimension that falls short.
fn shortfall(node: &Node, free: Option<&NodeFree>, r: &Request, live: bool) -> String {
    let Some(free) = free else {
        return "the node is unknown".into();
    };
    let model = node.gpu_model().unwrap_or("no GPU");
    if !r.accepts_node(node) {
        return format!(
            "needs a {} GPU; the node has {model}",
            r.models.join(" or ")
        );
    }
    if free.cpu_milli < r.cpu_milli {
        return format!(
            "needs {} millicores of CPU; the node has {}",
            r.cpu_milli, free.cpu_milli
        );
    }
    if free.memory_mib < r.memory_mib {
        return format!(
            "needs {} MiB of memory; the node has {}",
            r.memory_mib, free.memory_mib
        );
    }
    if let Some(profile) = &r.mig_profile {
        let in_mig = node.gpus.iter().filter(|g| g.mig.is_some()).count();
        return format!(
            "needs a free {profile} MIG instance; {in_mig} of the node's {} {model} GPUs are in MIG mode{}",
            node.gpus.len(),
            if live { " and none has the slots free" } else { "" }
        );
    }
    let mig = node.gpus.iter().filter(|g| g.mig.is_some()).count();
    let small = node
        .gpus
        .iter()
        .filter(|g| g.mig.is_none() && g.memory_mib < r.vram_mib)
        .count();
    let failed = if live {
        node.gpus.iter().filter(|g| !g.healthy).count()
    } else {
        0
    };
    let mut why = Vec::new();
    if small > 0 {
        why.push(format!(
            "{small} with less than the {} MiB asked (gantry.dev/vram)",
            r.vram_mib
        ));
    }
    if mig > 0 {
        why.push(format!("{mig} in MIG mode"));
    }
    if failed > 0 {
        why.push(format!("{failed} failed"));
    }
    format!(
        "needs {}; {} of the node's {} {model} GPUs can serve it{}",
        engine::core::gang::describe(r),
        free.count_serving(r),
        node.gpus.len(),
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join(", "))
        }
    )
}

fn node_name(node: &Value) -> Option<&str> {
    node.get("metadata")?.get("name")?.as_str()
}

/// The candidate names, from `NodeNames` or the Node objects.
fn candidates(args: &ExtenderArgs) -> Vec<String> {
    match (&args.node_names, &args.nodes) {
        (Some(names), _) => names.clone(),
        (None, Some(list)) => list
            .items
            .iter()
            .filter_map(|n| node_name(n).map(str::to_string))
            .collect(),
        (None, None) => Vec::new(),
    }
}

fn read_pod(args: &ExtenderArgs) -> Result<Pod, String> {
    let raw = args.pod.clone().ok_or("the ExtenderArgs have no `Pod`")?;
    serde_json::from_value(raw).map_err(|e| format!("cannot read the pod: {e}"))
}

/// Splits the candidates into fitting, failed now and failed for good. `Err`: the
/// arguments carry no readable pod (HTTP 400).
pub fn filter(ctx: &Ctx<'_>, args: ExtenderArgs) -> Result<FilterResult, String> {
    let names = candidates(&args);
    let mut result = FilterResult::default();
    let pod = read_pod(&args)?;
    let shape = job_shape(ctx, &pod);
    let mut keep: Vec<String> = Vec::new();
    match shape {
        Err(e) => {
            // The pod cannot run anywhere under this policy.
            for n in &names {
                result
                    .failed_and_unresolvable_nodes
                    .insert(n.clone(), format!("gantry: {e}"));
            }
        }
        Ok(None) => keep = names,
        Ok(Some((shape, team))) => {
            let judge = Judge::new(ctx, &shape, team.as_deref(), &pod);
            for n in names {
                match judge.verdict(&n, &shape) {
                    Verdict::Fits => keep.push(n),
                    Verdict::NotNow(why) => {
                        result.failed_nodes.insert(n, why);
                    }
                    Verdict::Never(why) => {
                        result.failed_and_unresolvable_nodes.insert(n, why);
                    }
                }
            }
        }
    }
    match args.nodes {
        Some(mut list) if args.node_names.is_none() => {
            list.items
                .retain(|n| node_name(n).is_some_and(|name| keep.iter().any(|k| k == name)));
            result.nodes = Some(list);
        }
        _ => result.node_names = Some(keep),
    }
    Ok(result)
}

/// Scores 0..=10 by rank — nodes in the pools where the pod's team is guaranteed GPUs
/// first (for a pod pinned to no pool), then the policy's packing strategy on what the
/// running pods leave free: the best node gets 10, the worst fitting one 1 (all 10 when
/// they tie); nodes that do not fit get 0.
pub fn prioritize(ctx: &Ctx<'_>, args: ExtenderArgs) -> Result<Vec<HostPriority>, String> {
    let names = candidates(&args);
    let pod = read_pod(&args)?;
    let Some((shape, team)) = job_shape(ctx, &pod)? else {
        return Ok(names
            .into_iter()
            .map(|host| HostPriority { host, score: 0 })
            .collect());
    };
    let judge = Judge::new(ctx, &shape, team.as_deref(), &pod);
    let scores: Vec<Option<(bool, packing::Score)>> = names
        .iter()
        .map(|n| {
            (judge.verdict(n, &shape) == Verdict::Fits)
                .then(|| judge.score(n, &shape.member))
                .flatten()
        })
        .collect();
    let mut distinct: Vec<(bool, packing::Score)> = scores.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let steps = distinct.len().saturating_sub(1) as i64;
    Ok(names
        .into_iter()
        .zip(scores)
        .map(|(host, s)| {
            let score = match s {
                None => 0,
                Some(_) if steps == 0 => MAX_SCORE,
                Some(s) => {
                    let rank = distinct.partition_point(|x| *x < s) as i64;
                    1 + rank * (MAX_SCORE - 1) / steps
                }
            };
            HostPriority { host, score }
        })
        .collect())
}
