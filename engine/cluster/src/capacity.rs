//! Capacity through the cluster's own autoscaler (cluster-autoscaler or Karpenter), which
//! gantry drives rather than replaces. Pure: (policy, plan, cluster view) → actions, which
//! `controller` carries out.
//!
//! - **Placeholders.** Each autoscaled or warm pool gets low-priority pods (the
//!   `gantry-placeholder` PriorityClass, value −1, which any real pod preempts) each asking
//!   for a whole node of the pool's shape, pinned to the pool by node selector: as many as
//!   the nodes the plan asked for that have not arrived (`booting`, scale-ups for waiting
//!   work), plus, while a warm window is active, one per warm node not running work. The
//!   autoscaler adds nodes for the pending ones and keeps the nodes the bound ones hold.
//!   They are reconciled every cycle by label (created, deleted; never leaked by a
//!   restart), bounded by the pool's maximum and `max_spend`, and deleted at once from a
//!   node that real work takes.
//! - **Keeping nodes.** Nodes the policy keeps — every node of an autoscaled or warm pool
//!   until the policy's own down triggers let it go, and any node running work — carry
//!   `cluster-autoscaler.kubernetes.io/scale-down-disabled` and `karpenter.sh/do-not-disrupt`
//!   (with `gantry.dev/kept`, so gantry only ever removes marks it set). A node the plan
//!   removes is unmarked and labelled `gantry.dev/released`; the cluster's autoscaler then
//!   takes it away on its own schedule.

use crate::nodes::NodeSeen;
use crate::pods::PodSeen;
use crate::store::Stores;
use engine::decide::plan::{Action as PlanAction, Plan};
use lang::ir::Program;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The PriorityClass placeholders run at (value −1: above cluster-autoscaler's
/// expendable cutoff of −10, below every real pod).
pub use serve::extender::PLACEHOLDER_CLASS;
/// Label on a placeholder pod; its value is the pool.
pub use serve::extender::PLACEHOLDER_LABEL;
/// What a placeholder runs (it never does anything).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.9";
/// cluster-autoscaler does not remove a node with this annotation.
pub const CA_KEEP: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Karpenter does not voluntarily disrupt a node (or a pod's node) with this annotation.
pub const KARPENTER_KEEP: &str = "karpenter.sh/do-not-disrupt";
pub use crate::nodes::{KEPT_ANNOTATION, RELEASED_ANNOTATION};

/// One change to the cluster's capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CapacityAction {
    CreatePlaceholder {
        pool: String,
        name: String,
        pod: Value,
    },
    DeletePlaceholder {
        pool: String,
        namespace: String,
        name: String,
        uid: String,
        why: String,
    },
    /// Mark the node kept (the autoscalers' annotations and `gantry.dev/kept`).
    KeepNode { node: String, why: String },
    /// Remove gantry's marks; `released`: the policy let the node go (say so on it).
    UnkeepNode { node: String, released: bool },
    /// A ProvisioningRequest for `count` whole nodes and the PodTemplate it names.
    CreateProvisioningRequest {
        pool: String,
        name: String,
        count: u64,
        template: Value,
        request: Value,
    },
    DeleteProvisioningRequest {
        pool: String,
        /// `autoscaling.x-k8s.io/v1` or `/v1beta1`.
        api_version: String,
        namespace: String,
        name: String,
        why: String,
    },
}

/// Where placeholders live and how nodes name their pool.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub pool_label: String,
    pub image: String,
    /// Scale-ups for waiting work as ProvisioningRequests of this API version
    /// (`autoscaling.x-k8s.io/v1`) rather than pending placeholders.
    pub provisioning: Option<String>,
}

/// What every part of the reconciliation reads, worked out once per cycle.
struct View<'a> {
    /// Nodes that run (or are promised, or get in this plan) real work.
    busy: BTreeSet<&'a str>,
    /// GPU nodes by pool.
    by_pool: BTreeMap<&'a str, Vec<&'a NodeSeen>>,
}

impl<'a> View<'a> {
    fn new(stores: &'a Stores, plan: &'a Plan) -> View<'a> {
        let mut busy = BTreeSet::new();
        for p in stores.pods.objects().values() {
            if p.placeholder.is_some() {
                continue;
            }
            if let (true, Some(node)) =
                (p.holds_gpus() || p.unreadable.is_some(), p.node.as_deref())
            {
                busy.insert(node);
            }
            if let Some(node) = p.assigned.as_deref() {
                busy.insert(node);
            }
        }
        for d in plan
            .decisions
            .iter()
            .filter(|d| d.action == PlanAction::Place)
        {
            busy.extend(d.placement.iter().map(|a| a.node.as_str()));
        }
        let mut by_pool: BTreeMap<&str, Vec<&NodeSeen>> = BTreeMap::new();
        for n in stores.nodes.objects().values().filter(|n| n.has_gpus()) {
            if let Some(p) = n.node.pool.as_deref() {
                by_pool.entry(p).or_default().push(n);
            }
        }
        View { busy, by_pool }
    }

    fn nodes(&self, pool: &str) -> &[&'a NodeSeen] {
        self.by_pool.get(pool).map_or(&[], Vec::as_slice)
    }
}

/// The largest warm target the plan gives `pool` (0 outside every window).
fn warm_target(plan: &Plan, pool: &str) -> u64 {
    plan.warm
        .iter()
        .filter(|w| w.pool == pool)
        .map(|w| w.target_nodes)
        .max()
        .unwrap_or(0)
}

/// A pool name as part of a pod name (DNS-1123: lower case, digits, `-`).
fn dns(pool: &str) -> String {
    let s: String = pool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    s.trim_matches('-').chars().take(40).collect()
}

/// The placeholder pod for one node of `pool` holding `gpus` GPUs.
pub fn placeholder(settings: &Settings, pool: &str, name: &str, gpus: u32, why: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {PLACEHOLDER_LABEL: pool, "app.kubernetes.io/managed-by": "gantry"},
            "annotations": {KARPENTER_KEEP: "true", "gantry.dev/placeholder-for": why},
        },
        "spec": {
            "priorityClassName": PLACEHOLDER_CLASS,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "nodeSelector": {settings.pool_label.as_str(): pool},
            "tolerations": [
                {"key": serve::pod::POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "containers": [{
                "name": "hold",
                "image": settings.image,
                "resources": {
                    "requests": {"nvidia.com/gpu": gpus.to_string(), "cpu": "10m", "memory": "16Mi"},
                    "limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "10m", "memory": "16Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "runAsNonRoot": true,
                    "runAsUser": 65535,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    })
}

/// How many placeholders each pool should have, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Want {
    pub pool: String,
    /// Nodes asked for that have not arrived.
    pub booting: u64,
    /// Warm nodes to hold (the warm target less the pool's nodes running work).
    pub warm: u64,
    /// After the pool's maximum and `max_spend`.
    pub placeholders: u64,
    pub gpus_per_node: u32,
}

/// Pools gantry scales: an `autoscale` block or a warm pool.
fn scaled_pools(program: &Program) -> BTreeSet<&str> {
    program
        .autoscale
        .iter()
        .map(|a| a.pool.as_str())
        .chain(program.warm.iter().map(|w| w.pool.as_str()))
        .collect()
}

/// The placeholders each scaled pool wants after `plan`.
fn wants(program: &Program, plan: &Plan, view: &View<'_>) -> Vec<Want> {
    let mut out = Vec::new();
    for pool_name in scaled_pools(program) {
        let Some(pool) = program.pool(pool_name) else {
            continue;
        };
        let Some(shape) = program.node_shape(&pool.node) else {
            continue;
        };
        let busy_here = view
            .nodes(pool_name)
            .iter()
            .filter(|n| view.busy.contains(n.node.name.as_str()))
            .count() as u64;
        let warm = warm_target(plan, pool_name).saturating_sub(busy_here);
        let booting: u64 = plan
            .state
            .as_ref()
            .and_then(|s| s.pools.get(pool_name))
            .map_or(0, |ps| {
                ps.booting
                    .iter()
                    .filter(|b| !b.warm)
                    .map(|b| u64::from(b.nodes))
                    .sum()
            });
        let mut cap = u64::from(pool.max_nodes).saturating_sub(busy_here);
        let spend = program
            .autoscale
            .iter()
            .find(|a| a.pool == pool_name)
            .and_then(|a| a.max_spend_per_hour);
        if let (Some(max), Some(rate)) = (spend, pool.cost_per_node_hour) {
            if rate > 0.0 {
                let affordable = (max / rate).floor().max(0.0) as u64;
                cap = cap.min(affordable.saturating_sub(busy_here));
            }
        }
        out.push(Want {
            pool: pool_name.to_string(),
            booting,
            warm,
            placeholders: (booting + warm).min(cap),
            gpus_per_node: shape.gpus,
        });
    }
    out
}

/// The placeholder changes that make the cluster match `wants`.
fn placeholders(
    wants: &[Want],
    stores: &Stores,
    busy: &BTreeSet<&str>,
    settings: &Settings,
) -> Vec<CapacityAction> {
    let mut out = Vec::new();
    let ours = |p: &&PodSeen| p.namespace == settings.namespace && p.placeholder.is_some();
    let mut by_pool: BTreeMap<&str, Vec<&PodSeen>> = BTreeMap::new();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for p in stores.pods.objects().values().filter(ours) {
        names.insert(p.name.as_str());
        if let (Some(pool), false) = (p.placeholder.as_deref(), p.terminating) {
            by_pool.entry(pool).or_default().push(p);
        }
    }
    let wanted: BTreeMap<&str, &Want> = wants.iter().map(|w| (w.pool.as_str(), w)).collect();
    let unusable = |node: &str| {
        busy.contains(node)
            || stores
                .nodes
                .objects()
                .get(node)
                .is_some_and(|n| n.closed.is_some() || n.interrupted.is_some())
    };
    // Pools no longer scaled keep no placeholders.
    for (pool, held) in &by_pool {
        if !wanted.contains_key(pool) {
            for p in held {
                out.push(delete(p, "the pool is no longer scaled by the policy"));
            }
        }
    }
    for w in wants {
        let held = by_pool.get(w.pool.as_str()).map_or(&[][..], Vec::as_slice);
        let mut keep: Vec<&PodSeen> = Vec::new();
        for p in held {
            match p.node.as_deref() {
                Some(node) if unusable(node) => out.push(delete(
                    p,
                    &format!("{node} runs real work now or takes nothing new"),
                )),
                _ => keep.push(p),
            }
        }
        // Bound ones first (they hold nodes that are here), then by name.
        keep.sort_by_key(|p| (p.node.is_none(), p.name.clone()));
        let count = if settings.provisioning.is_some() {
            w.placeholders.min(w.warm)
        } else {
            w.placeholders
        };
        let want = usize::try_from(count).unwrap_or(usize::MAX);
        for p in keep.iter().skip(want) {
            out.push(delete(
                p,
                &format!("pool {} wants {count} placeholders", w.pool),
            ));
        }
        let why = if w.booting > 0 && settings.provisioning.is_none() {
            format!(
                "{} node(s) asked for waiting work in pool {}",
                w.booting, w.pool
            )
        } else {
            format!("warm nodes in pool {}", w.pool)
        };
        let mut missing = want.saturating_sub(keep.len());
        let mut i = 0u32;
        while missing > 0 {
            let name = format!("gantry-placeholder-{}-{i}", dns(&w.pool));
            i += 1;
            if names.contains(name.as_str()) {
                continue;
            }
            out.push(CapacityAction::CreatePlaceholder {
                pool: w.pool.clone(),
                pod: placeholder(settings, &w.pool, &name, w.gpus_per_node, &why),
                name,
            });
            missing -= 1;
        }
    }
    out
}

fn delete(p: &PodSeen, why: &str) -> CapacityAction {
    CapacityAction::DeletePlaceholder {
        pool: p.placeholder.clone().unwrap_or_default(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        why: why.to_string(),
    }
}

/// The node marks that make the cluster keep what the policy keeps.
fn marks(program: &Program, plan: &Plan, stores: &Stores, view: &View<'_>) -> Vec<CapacityAction> {
    let busy = &view.busy;
    let scaled = scaled_pools(program);
    let removed: BTreeSet<&str> = plan
        .scale
        .iter()
        .filter(|s| s.delta_nodes < 0)
        .flat_map(|s| s.nodes.iter().map(String::as_str))
        .collect();
    // Per scaled pool: idle nodes the policy let go, short of the pool's floor.
    let mut let_go: BTreeSet<&str> = BTreeSet::new();
    for pool_name in &scaled {
        let Some(pool) = program.pool(pool_name) else {
            continue;
        };
        let nodes = view.nodes(pool_name);
        let mut going: Vec<&str> = nodes
            .iter()
            .filter(|n| n.released || removed.contains(n.node.name.as_str()))
            .map(|n| n.node.name.as_str())
            .filter(|n| !busy.contains(n))
            .collect();
        let target = warm_target(plan, pool_name);
        let floor = usize::try_from(u64::from(pool.min_nodes).max(target)).unwrap_or(usize::MAX);
        let kept = nodes.len().saturating_sub(going.len());
        // The floor rose since (a warm window opened): keep some again.
        let short = floor.saturating_sub(kept);
        going.sort_unstable();
        let_go.extend(going.into_iter().skip(short));
    }
    let mut out = Vec::new();
    for n in stores.nodes.objects().values().filter(|n| n.has_gpus()) {
        if n.interrupted.is_some() {
            continue;
        }
        let name = n.node.name.as_str();
        let pool = n.node.pool.as_deref();
        let in_scaled = pool.is_some_and(|p| scaled.contains(p));
        let keep = busy.contains(name) || (in_scaled && !let_go.contains(name));
        if keep && (!n.kept || n.released) {
            let why = match pool {
                Some(p) if in_scaled => format!("pool {p} is scaled by gantry's policy"),
                _ => "runs work gantry placed".to_string(),
            };
            out.push(CapacityAction::KeepNode {
                node: name.to_string(),
                why,
            });
        } else if !keep {
            let released = let_go.contains(name);
            if n.kept || (released && !n.released) {
                out.push(CapacityAction::UnkeepNode {
                    node: name.to_string(),
                    released,
                });
            }
        }
    }
    out
}

/// Every capacity change `plan` calls for: placeholders, then node marks.
pub fn actions(
    program: &Program,
    plan: &Plan,
    stores: &Stores,
    settings: &Settings,
) -> Vec<CapacityAction> {
    let view = View::new(stores, plan);
    let wants = wants(program, plan, &view);
    let mut out = placeholders(&wants, stores, &view.busy, settings);
    if let Some(api_version) = &settings.provisioning {
        out.extend(provisioning(program, &wants, stores, settings, api_version));
    }
    out.extend(marks(program, plan, stores, &view));
    out
}

/// The ProvisioningRequests that make the cluster match `wants`: per pool, requests
/// covering the nodes asked for and not arrived. A request is atomic and immutable, so
/// more demand is a new request, and less deletes requests (provisioned ones first). A
/// failed request stays, and none is added for its pool, until the policy stops asking
/// (its scale-up expired); then it is deleted and the policy may ask again.
fn provisioning(
    program: &Program,
    wants: &[Want],
    stores: &Stores,
    settings: &Settings,
    api_version: &str,
) -> Vec<CapacityAction> {
    let mut out = Vec::new();
    let existing: Vec<&crate::provreq::ProvReqSeen> = stores
        .provreqs
        .as_ref()
        .map(|c| {
            c.objects()
                .values()
                .filter(|r| r.namespace == settings.namespace && r.pool.is_some())
                .collect()
        })
        .unwrap_or_default();
    let names: BTreeSet<&str> = existing.iter().map(|r| r.name.as_str()).collect();
    let wanted: BTreeMap<&str, &Want> = wants.iter().map(|w| (w.pool.as_str(), w)).collect();
    let delete =
        |r: &crate::provreq::ProvReqSeen, why: &str| CapacityAction::DeleteProvisioningRequest {
            pool: r.pool.clone().unwrap_or_default(),
            api_version: api_version.to_string(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            why: why.to_string(),
        };
    for r in &existing {
        if r.pool.as_deref().is_none_or(|p| !wanted.contains_key(p)) {
            out.push(delete(r, "the pool is no longer scaled by the policy"));
        }
    }
    for w in wants {
        let mut mine: Vec<&crate::provreq::ProvReqSeen> = existing
            .iter()
            .copied()
            .filter(|r| r.pool.as_deref() == Some(w.pool.as_str()))
            .collect();
        // Bounded like placeholders: the pool's maximum and max_spend.
        let asked = w.booting.min(w.placeholders);
        if asked == 0 {
            for r in &mine {
                out.push(delete(r, "no nodes are asked for now"));
            }
            continue;
        }
        if mine.iter().any(|r| r.failed.is_some()) {
            continue;
        }
        let mut active: u64 = mine.iter().map(|r| r.count).sum();
        // Less wanted: provisioned requests go first, then the newest.
        mine.sort_by_key(|r| (!r.provisioned, std::cmp::Reverse(r.name.clone())));
        for r in &mine {
            if active - r.count >= asked {
                active -= r.count;
                out.push(delete(
                    r,
                    &format!("pool {} needs {asked} node(s) now", w.pool),
                ));
            }
        }
        if active < asked {
            let count = asked - active;
            let name = (0u32..)
                .map(|i| format!("gantry-{}-{i}", dns(&w.pool)))
                .find(|n| !names.contains(n.as_str()))
                .unwrap_or_default();
            let boot = program.pool(&w.pool).map_or(0, |p| p.boot_s);
            let pod = placeholder(
                settings,
                &w.pool,
                &name,
                w.gpus_per_node,
                "a node for a ProvisioningRequest",
            );
            out.push(CapacityAction::CreateProvisioningRequest {
                pool: w.pool.clone(),
                count,
                template: crate::provreq::template(&pod),
                request: crate::provreq::request(
                    api_version,
                    &settings.namespace,
                    &name,
                    &w.pool,
                    count,
                    boot + crate::memory::PROVISION_TIMEOUT.unsigned_abs(),
                ),
                name,
            });
        }
    }
    out
}

/// The node patch of a mark (a JSON merge patch on `metadata.annotations`).
pub fn mark_patch(action: &CapacityAction, now: i64) -> Option<Value> {
    match action {
        CapacityAction::KeepNode { why, .. } => Some(json!({"metadata": {"annotations": {
            CA_KEEP: "true", KARPENTER_KEEP: "true", KEPT_ANNOTATION: why, RELEASED_ANNOTATION: null
        }}})),
        CapacityAction::UnkeepNode { released, .. } => {
            let at = released.then(|| {
                chrono::DateTime::from_timestamp(now, 0)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default()
            });
            Some(json!({"metadata": {"annotations": {
                CA_KEEP: null, KARPENTER_KEEP: null, KEPT_ANNOTATION: null, RELEASED_ANNOTATION: at
            }}}))
        }
        _ => None,
    }
}

/// Each pool's nodes, GPUs, spend rate and placeholders, for `/metrics`.
pub fn gauges(
    program: &Program,
    stores: &Stores,
    namespace: &str,
) -> Vec<serve::metrics::PoolGauge> {
    // One pass over nodes and one over pods, whatever the number of pools.
    let mut nodes: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for n in stores.nodes.objects().values().filter(|n| n.has_gpus()) {
        if let Some(p) = n.node.pool.as_deref() {
            let e = nodes.entry(p).or_default();
            e.0 += 1;
            e.1 += n.node.gpus.len() as u64;
        }
    }
    let mut held: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for p in stores.pods.objects().values() {
        if let (Some(pool), true) = (
            p.placeholder.as_deref(),
            p.namespace == namespace && !p.terminating,
        ) {
            let e = held.entry(pool).or_default();
            if p.node.is_some() {
                e.1 += 1;
            } else {
                e.0 += 1;
            }
        }
    }
    program
        .pools
        .iter()
        .map(|pool| {
            let (count, gpus) = nodes.get(pool.name.as_str()).copied().unwrap_or_default();
            let (pending, bound) = held.get(pool.name.as_str()).copied().unwrap_or_default();
            serve::metrics::PoolGauge {
                pool: pool.name.clone(),
                capacity: serde_json::to_value(pool.capacity)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                nodes: count,
                gpus,
                spend_per_hour: count as f64 * pool.cost_per_node_hour.unwrap_or(0.0),
                placeholders_pending: pending,
                placeholders_bound: bound,
            }
        })
        .collect()
}
