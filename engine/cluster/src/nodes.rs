//! A Kubernetes Node as the engine's [`Node`]: GPUs from the device plugin's resources and
//! the labels NVIDIA GPU Feature Discovery sets, the pool from a node label, topology from
//! gantry's labels, and whether the node takes new work at all.
//!
//! GPUs (GFD and device-plugin conventions):
//! - whole GPUs: `status.allocatable["nvidia.com/gpu"]`; a GPU in the capacity or the
//!   `nvidia.com/gpu.count` label but not allocatable is one the device plugin marked
//!   unhealthy;
//! - MIG, `nvidia.com/mig.strategy=mixed`: `nvidia.com/mig-<profile>` resources; the GPUs
//!   in `nvidia.com/gpu.count` not offered as whole GPUs are in MIG mode;
//! - MIG, `single`: every `nvidia.com/gpu` is one MIG instance, and GFD's product and
//!   memory labels describe the instance: gantry counts them as small GPUs, which is how
//!   pods ask for them;
//! - model: `nvidia.com/gpu.product` (GFD writes NVML's name with `-` for spaces) matched
//!   to the catalog; memory: `nvidia.com/gpu.memory` (MiB), else the catalog's.

use engine::core::fleet::{Gpu, Node};
use engine::inventory::catalog;
use engine::inventory::nvml::publish;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serve::quantity;
use std::collections::BTreeMap;

pub const GPU: &str = "nvidia.com/gpu";
pub const MIG_PREFIX: &str = "nvidia.com/mig-";
pub const MIG_STRATEGY_LABEL: &str = "nvidia.com/mig.strategy";
/// GFD's labels and gantry's node agent's annotations (islands, unhealthy GPUs, MIG
/// instances; set by `gantry agent` or by hand).
pub use engine::inventory::nvml::publish::{
    COUNT_LABEL, ISLANDS_ANNOTATION, MEMORY_LABEL, MIG_ANNOTATION, PRODUCT_LABEL,
    UNHEALTHY_ANNOTATION,
};

/// Node labels read as topology: (label, the fleet's topology key).
pub const TOPOLOGY_LABELS: &[(&str, &str)] = &[
    ("gantry.dev/rack", "rack"),
    ("gantry.dev/leaf", "leaf"),
    ("gantry.dev/nvlink-domain", "nvlink_domain"),
    // GFD's NVLink domain on multi-node NVLink systems (GB200 NVL72).
    ("nvidia.com/gpu.clique", "nvlink_domain"),
];

/// The most GPUs a node may claim (allocatable, capacity or GFD's count label). Far above
/// any real node (an NVL72 rack is 72); a claim above it is broken or hostile, and the
/// node is closed with a note instead of gantry allocating per GPU it claims.
pub const MAX_GPUS_PER_NODE: u64 = 1024;

/// A node as the view keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSeen {
    pub node: Node,
    /// Why the node takes nothing new, if it does not.
    pub closed: Option<String>,
    /// The node is going away (a spot interruption or a disruption notice): its jobs are
    /// checkpointed and requeued within the pool's `notice`.
    pub interrupted: Option<String>,
    /// Gantry marked it to be kept from the cluster's autoscaler (`gantry.dev/kept`).
    pub kept: bool,
    /// Gantry's policy let it go (`gantry.dev/released`).
    pub released: bool,
    /// What was assumed about the node (an unknown GPU product, unreadable quantities).
    pub notes: Vec<String>,
}

impl NodeSeen {
    pub fn has_gpus(&self) -> bool {
        !self.node.gpus.is_empty()
    }
}

fn label<'a>(labels: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    labels.and_then(|l| l.get(key)).map(String::as_str)
}

/// A whole-number resource amount (`8`, `8000m` is refused as not whole).
fn count(q: Option<&Quantity>) -> Option<u64> {
    let milli = quantity::parse(&q?.0, -3).ok()?;
    (milli % 1000 == 0).then_some(milli / 1000)
}

/// The node; `None` for an object without a name.
pub fn node(k: &core::Node, pool_label: &str) -> Option<NodeSeen> {
    let name = k.metadata.name.clone()?;
    let labels = k.metadata.labels.as_ref();
    let status = k.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let mut notes = Vec::new();
    let amount = |key: &str, exp10: i32, what: &str, notes: &mut Vec<String>| -> u64 {
        let Some(q) = allocatable.and_then(|a| a.get(key)) else {
            return 0;
        };
        quantity::parse(&q.0, exp10).unwrap_or_else(|e| {
            notes.push(format!(
                "{name}: allocatable {what} `{}` {e}; counted as 0",
                q.0
            ));
            0
        })
    };
    let cpu_milli = amount("cpu", -3, "cpu", &mut notes);
    let memory_mib = amount("memory", 0, "memory", &mut notes) / (1024 * 1024);
    let (gpus, over_cap) = match gpus(&name, k, &mut notes) {
        Ok(g) => (g, None),
        Err(why) => {
            notes.push(format!("{name}: {why}; the node is closed"));
            (Vec::new(), Some(why))
        }
    };
    let mut topology = BTreeMap::new();
    for (from, to) in TOPOLOGY_LABELS {
        if let Some(v) = label(labels, from) {
            topology.insert((*to).to_string(), v.to_string());
        }
    }
    let closed = over_cap.or_else(|| closed(k));
    let annotated = |key: &str| {
        k.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(key))
    };
    Some(NodeSeen {
        interrupted: interrupted(k),
        kept: annotated(KEPT_ANNOTATION),
        released: annotated(RELEASED_ANNOTATION),
        node: Node {
            name,
            pool: label(labels, pool_label).map(str::to_string),
            cpu_milli,
            memory_mib,
            labels: topology,
            gpus,
        },
        closed,
        notes,
    })
}

/// The node's GPUs in index order: whole GPUs (healthy first, as allocatable says), then
/// GPUs in MIG mode, then the ones the device plugin does not offer (unhealthy). `Err`
/// (why) when the node claims more than [`MAX_GPUS_PER_NODE`] anywhere.
fn gpus(name: &str, k: &core::Node, notes: &mut Vec<String>) -> Result<Vec<Gpu>, String> {
    let labels = k.metadata.labels.as_ref();
    let status = k.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let whole = count(allocatable.and_then(|a| a.get(GPU))).unwrap_or(0);
    let whole_capacity = count(capacity.and_then(|c| c.get(GPU))).unwrap_or(whole);
    let mig_offered = allocatable.is_some_and(|a| {
        a.iter()
            .any(|(k, v)| k.starts_with(MIG_PREFIX) && count(Some(v)).unwrap_or(0) > 0)
    });
    let labelled: Option<u64> = label(labels, COUNT_LABEL).and_then(|c| c.trim().parse().ok());
    let claims = [
        ("allocatable nvidia.com/gpu", Some(whole)),
        ("capacity nvidia.com/gpu", Some(whole_capacity)),
        (COUNT_LABEL, labelled),
    ];
    if let Some((what, n)) = claims
        .iter()
        .find_map(|(what, n)| n.filter(|n| *n > MAX_GPUS_PER_NODE).map(|n| (what, n)))
    {
        return Err(format!(
            "{what} says {n} GPUs, above the {MAX_GPUS_PER_NODE} gantry accepts on one node"
        ));
    }
    let strategy = label(labels, MIG_STRATEGY_LABEL).unwrap_or("none");
    let physical = labelled.unwrap_or(whole_capacity).max(whole_capacity);
    let in_mig = if mig_offered && strategy != "single" {
        physical.saturating_sub(whole_capacity)
    } else {
        0
    };
    if mig_offered && in_mig == 0 {
        notes.push(format!(
            "{name}: offers MIG instances but every GPU in {COUNT_LABEL} is offered whole; the MIG instances are not counted"
        ));
    }
    let unhealthy = physical.saturating_sub(whole).saturating_sub(in_mig);
    let total = whole + in_mig + unhealthy;
    if total == 0 {
        return Ok(Vec::new());
    }
    let product = label(labels, PRODUCT_LABEL);
    let memory_label: Option<u64> = label(labels, MEMORY_LABEL).and_then(|m| m.trim().parse().ok());
    let (model, memory_mib, known) = model(product, memory_label);
    if !known {
        notes.push(format!(
            "{name}: GPU product {} is not in gantry's catalog: its GPUs are model `{model}` (a `gpu` block in the policy can describe it){}",
            product.unwrap_or("(no nvidia.com/gpu.product label)"),
            if memory_mib.is_none() {
                format!(", with 0 MiB of memory since {MEMORY_LABEL} is not set")
            } else {
                String::new()
            }
        ));
    }
    let islands = islands(k, total as usize);
    let annotation = |key: &str| {
        k.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    // The node agent names the GPUs NVML finds unhealthy, and which are in MIG mode; the
    // device plugin only says how many it does not offer.
    let named_unhealthy: BTreeMap<u32, String> = annotation(UNHEALTHY_ANNOTATION)
        .map(publish::parse_unhealthy)
        .unwrap_or_default()
        .into_iter()
        .filter(|(i, _)| u64::from(*i) < total)
        .collect();
    let named_mig: Vec<u32> = annotation(MIG_ANNOTATION)
        .map(publish::parse_mig)
        .unwrap_or_default()
        .into_keys()
        .filter(|i| u64::from(*i) < total && !named_unhealthy.contains_key(i))
        .collect();
    for (i, why) in &named_unhealthy {
        notes.push(format!(
            "{name}: GPU {i} is unhealthy: {why} (gantry agent)"
        ));
    }
    let mut healthy = vec![true; total as usize];
    let mut mig = vec![false; total as usize];
    for i in named_unhealthy.keys() {
        if let Some(h) = healthy.get_mut(*i as usize) {
            *h = false;
        }
    }
    if named_mig.len() as u64 == in_mig {
        for i in &named_mig {
            if let Some(m) = mig.get_mut(*i as usize) {
                *m = true;
            }
        }
    } else {
        for m in mig.iter_mut().skip(whole as usize).take(in_mig as usize) {
            *m = true;
        }
    }
    // As many unhealthy as the device plugin withholds, at least: the highest indices
    // not already counted.
    let mut short = unhealthy.saturating_sub(named_unhealthy.len() as u64);
    for (h, m) in healthy.iter_mut().zip(&mig).rev() {
        if short == 0 {
            break;
        }
        if *h && !*m {
            *h = false;
            short -= 1;
        }
    }
    Ok((0..total)
        .map(|i| {
            let index = i as u32;
            let at = i as usize;
            let mut g = Gpu::new(index, &model, memory_mib.unwrap_or(0));
            g.nvlink_island = islands.get(at).copied().flatten();
            g.healthy = healthy.get(at).copied().unwrap_or(false);
            if mig.get(at).copied().unwrap_or(false) {
                g.mig = Some(Vec::new());
            }
            g
        })
        .collect())
}

/// The catalog model for a GFD product label, its memory (the label's if given), and
/// whether the catalog knows it.
fn model(product: Option<&str>, memory_label: Option<u64>) -> (String, Option<u64>, bool) {
    let Some(product) = product else {
        return ("unknown".into(), memory_label, false);
    };
    let normal = |p: &str| p.replace(' ', "-").to_ascii_lowercase();
    let wanted = normal(product);
    let found = catalog::stdlib_models()
        .iter()
        .filter(|m| m.product.as_deref().is_some_and(|p| normal(p) == wanted))
        .min_by_key(|m| memory_label.map_or(0, |mem| m.memory_mib.abs_diff(mem)));
    match found {
        Some(m) => (
            m.id.clone(),
            Some(memory_label.unwrap_or(m.memory_mib)),
            true,
        ),
        None => (
            product.trim_start_matches("NVIDIA-").to_string(),
            memory_label,
            false,
        ),
    }
}

fn islands(k: &core::Node, n: usize) -> Vec<Option<u32>> {
    let raw = k
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ISLANDS_ANNOTATION));
    let parsed: Option<Vec<u32>> = raw.and_then(|r| {
        r.split(',')
            .map(|x| x.trim().parse().ok())
            .collect::<Option<Vec<u32>>>()
    });
    match parsed {
        Some(v) if v.len() == n => v.into_iter().map(Some).collect(),
        _ => vec![None; n],
    }
}

/// Set by gantry on nodes its policy keeps (warm, cooldown, the autoscaled pool's own
/// down triggers, running work), with the autoscalers' own annotations.
pub const KEPT_ANNOTATION: &str = "gantry.dev/kept";
/// Set by gantry on an idle node its policy let go (RFC 3339 time).
pub const RELEASED_ANNOTATION: &str = "gantry.dev/released";

/// Taints that announce the node is going away: Karpenter's disruption (v1, and before
/// v1), the AWS Node Termination Handler's spot, maintenance and ASG lifecycle taints (a
/// rebalance recommendation only closes the node), GKE's impending termination, cluster-autoscaler deleting it.
pub const NOTICE_TAINTS: &[&str] = &[
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/scheduled-maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "cloud.google.com/impending-node-termination",
    "ToBeDeletedByClusterAutoscaler",
];

/// Node conditions (status `True`) that announce the same.
pub const NOTICE_CONDITIONS: &[&str] = &[
    "SpotInterruption",
    "TerminationNotice",
    "ImpendingNodeTermination",
];

/// Why the node is going away, if a notice says so.
fn interrupted(k: &core::Node) -> Option<String> {
    let taint = k
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|t| t.iter().find(|t| NOTICE_TAINTS.contains(&t.key.as_str())));
    if let Some(t) = taint {
        return Some(format!("tainted {}:{}", t.key, t.effect));
    }
    let condition = k
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.status == "True" && NOTICE_CONDITIONS.contains(&c.type_.as_str()))
        })?;
    Some(format!(
        "condition {}{}",
        condition.type_,
        condition
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(" ({r})"))
    ))
}

/// Taints that mean the node as a whole takes nothing new, whatever a pod tolerates:
/// the node lifecycle controller's conditions, a cordon, an autoscaler draining it.
fn closing_taint(key: &str) -> bool {
    key.starts_with("node.kubernetes.io/")
        || key.starts_with("node.cloudprovider.kubernetes.io/")
        || key == "aws-node-termination-handler/rebalance-recommendation"
        || NOTICE_TAINTS.contains(&key)
}

/// Why the node takes nothing new: cordoned, not Ready, or a closing taint. Other taints
/// (a GPU or pool taint) are per pod, and kube-scheduler checks tolerations itself.
fn closed(k: &core::Node) -> Option<String> {
    let spec = k.spec.as_ref();
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        return Some("cordoned (spec.unschedulable)".into());
    }
    let ready = k
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => {}
        Some(c) => {
            let why = c.reason.as_deref().unwrap_or("no reason given");
            return Some(format!("not Ready ({why})"));
        }
        None => return Some("not Ready (no Ready condition yet)".into()),
    }
    let taint = spec.and_then(|s| s.taints.as_ref()).and_then(|t| {
        t.iter().find(|t| {
            closing_taint(&t.key) && (t.effect == "NoSchedule" || t.effect == "NoExecute")
        })
    });
    if let Some(taint) = taint {
        return Some(format!("tainted {}:{}", taint.key, taint.effect));
    }
    interrupted(k).map(|why| format!("going away: {why}"))
}
