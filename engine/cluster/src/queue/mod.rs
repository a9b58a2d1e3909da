//! Pods as the decision cycle's jobs. A job is one pod, or a gang: the pods of one
//! namespace that share a gang name (`gantry.dev/gang`, else a JobSet's, Kubeflow
//! training job's or Job's name label) and declare `gantry.dev/gang-size` > 1, or, without
//! that label, the pods of one `batch/v1` Job with parallelism > 1 or of one JobSet
//! ([`crate::owners`]).
//!
//! - **Pending**: gated by gantry, unbound, not assigned. A gang with fewer pods than its
//!   size waits for the rest (`members_present`).
//! - **Running**: bound and not finished, or assigned by the controller and not bound yet
//!   (its capacity is promised: it counts on the assigned node).
//! - A gang whose assignment did not finish before a crash (some members assigned, none
//!   released) is **reverted**: the assignments are cleared and it is pending again. One
//!   with a member already released is **completed** (see `enact`).
//! - **Foreign**: pods gantry did not admit (no `gantry.dev/policy-revision` label) hold
//!   their node's resources but are never victims: whole GPUs as a running job of the
//!   team and tier [`FOREIGN`], which no policy names (busy, never counted unhealthy); a
//!   MIG instance takes its whole GPU out of the fleet (which slices it holds is not
//!   known), and its CPU and memory come off the node. CPU-only pods likewise.
//! - **Trusted only as gantry wrote it** ([`Trust`]): an assignment counts only with its
//!   seal (`crate::seal`), so one a pod's author wrote neither holds room nor is
//!   released; and a pod whose team is bound to namespaces that do not hold it (a pod
//!   the webhooks never judged) is foreign, never charged to that team.

mod keeper;

pub use keeper::ViewKeeper;

use crate::pods::PodSeen;
use crate::seal::Seal;
use crate::store::Stores;
use engine::core::alloc::Request;
use engine::core::fleet::Fleet;
use engine::inventory::jobs_file::{Job, PlacedMember};
use lang::ir::Program;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The team and tier of a bound pod gantry did not admit: no policy name can be this, so
/// the cycle never preempts it and charges no team for it.
pub const FOREIGN: &str = "(foreign)";

/// The label the mutating webhook sets on pods it admitted.
pub const REVISION_LABEL: &str = "gantry.dev/policy-revision";

/// What the view trusts of what pods say.
#[derive(Debug, Clone, Copy, Default)]
pub struct Trust<'a> {
    /// The assignment seal's key; without one no assignment is trusted.
    pub seal: Option<&'a Seal>,
    /// The policy, for the namespaces each team is bound to.
    pub program: Option<&'a Program>,
    /// The time nominations are read at (`crate::nomination`): one expired is not held.
    pub now: i64,
    /// What runtimes are predicted from (`crate::predictions`); `None`: jobs are planned
    /// with what their pods declare.
    pub predictions: Option<&'a crate::predictions::Predictions>,
}

impl Trust<'_> {
    /// Whether the pod's namespace may hold its team (the policy's bindings; the default
    /// team for a pod that names none).
    fn team_admits(&self, p: &PodSeen) -> bool {
        let Some(program) = self.program else {
            return true;
        };
        let named = p
            .asks
            .as_deref()
            .or(p.holds.as_deref())
            .and_then(|j| j.team.as_deref());
        let team = match named {
            Some(t) => program.team(t),
            None => program.teams.iter().find(|t| t.default),
        };
        team.is_none_or(|t| t.admits_namespace(&p.namespace))
    }

    /// The pod as the view may believe it: itself, or a copy without what it cannot
    /// have been given (`None` when nothing needs taking away), and whether its team's
    /// namespaces do not hold it.
    fn doubt(&self, p: &PodSeen) -> Option<(PodSeen, bool)> {
        let forged = p.assigned.is_some() && p.sealed_node(self.seal).is_none();
        let stranger = !self.team_admits(p);
        if !forged && !stranger {
            return None;
        }
        let mut copy = p.clone();
        if forged {
            copy.assigned = None;
        }
        if stranger {
            // Not gantry's to queue or charge: what it holds once bound is foreign.
            copy.managed = false;
            copy.gated = false;
            copy.assigned = None;
        }
        Some((copy, stranger))
    }
}

/// The cluster as the decision cycle sees it.
#[derive(Debug, Clone, Default)]
pub struct QueueView {
    /// Shared with the cycles before while no node and nothing a foreign pod holds changed.
    pub fleet: Arc<Fleet>,
    /// Nodes (by fleet index) that take nothing new, with why.
    pub closed: BTreeMap<usize, String>,
    /// Nodes (by fleet index) going away: their jobs are requeued.
    pub interrupted: BTreeMap<usize, String>,
    /// Running and pending jobs, in a stable order (by id).
    pub jobs: Vec<Job>,
    /// Each job's pods (keys), in member order.
    pub members: BTreeMap<String, Vec<String>>,
    /// Pods whose assignment is cleared: their gang's assignment did not finish.
    pub reverts: Vec<String>,
    /// Jobs assigned and not all released yet: the controller completes them first.
    pub committing: BTreeSet<String>,
    /// Gated pods left out of this cycle: their owning Job is not in the view yet.
    pub owner_unseen: Vec<String>,
    /// The key assignments are sealed with (phase 1 writes a seal beside the node).
    pub seal: Option<Seal>,
    /// Gated pods that are not queued, and why: gangs whose members disagree
    /// (`GangMismatch`), pods whose team is not bound to their namespace
    /// (`TeamNotBound`), pods whose gantry labels do not read (`InvalidLabels`).
    pub unqueued: Vec<Unqueued>,
    /// Preemptors whose victims are stopping, by job: each is shown running on the nodes
    /// it was nominated to, its victims left out (`crate::nomination`).
    pub nominated: BTreeMap<String, crate::nomination::Nomination>,
    /// GPUs in gantry's pods bound to nodes (stopping ones too), by (team, tier) as the
    /// pods say: `gantry_gpus_in_use`.
    pub bound: BTreeMap<(String, String), f64>,
    /// Evictions the API server refused, by pod: its words ([`Stores::refused_evictions`]).
    pub refused_evictions: BTreeMap<String, String>,
    /// The predictions after this cycle, when the view predicts
    /// ([`Trust::predictions`]): the controller keeps them.
    pub learned: Option<crate::predictions::Predictions>,
}

/// A gated pod the view does not queue: told why in a condition and an Event, and shown
/// in `/v1/queue`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unqueued {
    pub pod: String,
    /// The condition's reason (`GangMismatch`, `TeamNotBound`, `InvalidLabels`).
    pub reason: &'static str,
    pub message: String,
    /// The GPUs this pod asks for, where its labels read.
    pub gpus: f64,
}

impl Unqueued {
    fn of(p: &PodSeen, reason: &'static str, message: String) -> Unqueued {
        Unqueued {
            pod: p.key(),
            reason,
            message,
            gpus: p.asks.as_deref().map_or(0.0, serve::queue::member_gpus),
        }
    }
}

/// Gantry admitted it (the webhook's label), queued it or assigned it.
fn is_foreign(p: &PodSeen) -> bool {
    !(p.managed || p.gated || p.assigned.is_some())
}

/// The decision cycle's view of `stores`, believing of each pod what `trust` allows;
/// `Err` until both are listed. A controller keeps a [`ViewKeeper`] instead, which makes
/// the same view again from what changed.
pub fn view(stores: &Stores, trust: Trust<'_>) -> Result<QueueView, String> {
    ViewKeeper::default().view(stores, trust)
}

/// What depends on the clock, applied to the grouped jobs: runtimes outlived,
/// predictions, nominations.
fn after_grouping(
    mut out: QueueView,
    stores: &Stores,
    seal: Option<&Seal>,
    program: Option<&Program>,
    now: i64,
    predictions: Option<&crate::predictions::Predictions>,
) -> Result<QueueView, String> {
    outlived_estimates(&mut out.jobs, now);
    if let Some(p) = predictions {
        // Before nominations: a nominated job shows as running from its nomination on.
        let up: BTreeSet<&str> = out
            .fleet
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| !out.interrupted.contains_key(i))
            .map(|(_, n)| n.name.as_str())
            .collect();
        let learned = p.advanced(&out.jobs, &up, now);
        learned.apply(&mut out.jobs);
        out.learned = Some(learned);
    }
    crate::nomination::apply(&mut out, stores.pods.objects(), seal, program, now);
    Ok(out)
}

/// A running job past the runtime its pods declared (`gantry.dev/runtime`, a claim no one
/// enforces) is planned with its `activeDeadlineSeconds`, the limit the kubelet
/// enforces, and with no estimate past that: a short claim buys a pod its start, not
/// the room of the jobs reserved behind it (`engine::core::declared`).
fn outlived_estimates(jobs: &mut [Job], now: i64) {
    for job in jobs.iter_mut().filter(|j| !j.placement.is_empty()) {
        let (Some(started), Some(_)) = (job.started_at, job.runtime_s) else {
            continue;
        };
        let declared = engine::core::declared::Runtime {
            estimate_s: job.runtime_s,
            limit_s: job.runtime_limit_s,
            estimate_only: job.estimate_only,
        };
        job.runtime_s = declared.after(now - started);
    }
}

/// Takes what a foreign or CPU-only pod holds out of its node: CPU and memory, whole
/// GPUs (the highest free indices), MIG instances (as in use); `m` is one member's
/// request.
fn take_out(fleet: &mut Fleet, node: usize, m: &Request) {
    let Some(n) = fleet.nodes.get_mut(node) else {
        return;
    };
    n.cpu_milli = n.cpu_milli.saturating_sub(m.cpu_milli);
    n.memory_mib = n.memory_mib.saturating_sub(m.memory_mib);
    if m.mig_profile.is_some() {
        // Which slices it holds is not known: each instance takes a whole MIG GPU out,
        // which errs on the safe side.
        let mut left = m.num_gpu;
        for g in n.gpus.iter_mut().filter(|g| g.healthy && g.mig.is_some()) {
            if left == 0 {
                break;
            }
            g.healthy = false;
            left -= 1;
        }
        return;
    }
    let mut left = m.num_gpu;
    for g in n.gpus.iter_mut().rev() {
        if left == 0 {
            break;
        }
        if g.healthy && g.mig.is_none() {
            g.healthy = false;
            left -= 1;
        }
    }
}

/// One group of pods (a single pod or a gang) as a running and/or a pending job.
/// A pod of a group, with its store key (named once, not formatted again per cycle).
pub(crate) type Member<'a> = (&'a String, &'a PodSeen);

fn group(out: &mut QueueView, id: &str, pods: &[Member<'_>], size: u32) {
    let placed = |p: &PodSeen| p.holds.is_some() || p.assigned.is_some();
    let released = |p: &PodSeen| p.holds.is_some() || (p.assigned.is_some() && !p.gated);
    let waiting: Vec<Member<'_>> = pods
        .iter()
        .copied()
        .filter(|(_, p)| !placed(p) && p.gated && p.asks.is_some())
        .collect();
    let any_released = pods.iter().any(|(_, p)| released(p));
    let assigned_only = |p: &PodSeen| p.holds.is_none() && p.assigned.is_some() && p.gated;
    // An assignment that did not finish: nothing released, and not every member assigned.
    let complete = pods.len() as u32 >= size && waiting.is_empty();
    if !any_released && pods.iter().any(|(_, p)| assigned_only(p)) && !complete {
        out.reverts.extend(
            pods.iter()
                .filter(|(_, p)| assigned_only(p))
                .map(|(k, _)| (*k).clone()),
        );
        pending(
            out,
            id,
            pods.iter()
                .copied()
                .filter(|(_, p)| p.gated && p.asks.is_some())
                .collect(),
            size,
        );
        return;
    }
    let running: Vec<Member<'_>> = pods.iter().copied().filter(|(_, p)| placed(p)).collect();
    if !running.is_empty() {
        if running.iter().any(|(_, p)| p.holds.is_none() && p.gated) {
            out.committing.insert(id.to_string());
        }
        running_job(out, id, &running);
    }
    if !waiting.is_empty() {
        if running.is_empty() {
            pending(out, id, waiting, size);
        } else {
            // Members that came after the gang was placed (a replaced pod): they queue
            // as a job of their own.
            let n = waiting.len() as u32;
            pending(
                out,
                &format!(
                    "{id}+{}",
                    waiting.first().map_or("", |(_, p)| p.name.as_str())
                ),
                waiting,
                n,
            );
        }
    }
}

fn running_job(out: &mut QueueView, id: &str, pods: &[Member<'_>]) {
    let Some((_, first)) = pods.first() else {
        return;
    };
    let Some(template) = first.holds.as_deref().or(first.asks.as_deref()) else {
        return;
    };
    let mut job = template.clone();
    job.id = id.to_string();
    job.shape.members = pods.len() as u32;
    job.placement = pods
        .iter()
        .map(|(_, p)| PlacedMember {
            node: p
                .node
                .clone()
                .or_else(|| p.assigned.clone())
                .unwrap_or_default(),
            gpus: Vec::new(),
            gpu_milli: None,
            mig_starts: Vec::new(),
        })
        .collect();
    job.started_at = pods
        .iter()
        .filter_map(|(_, p)| p.bound_at)
        .min()
        .or(job.started_at);
    job.submitted_at = pods.iter().filter_map(|(_, p)| p.created_at).min();
    job.members_present = None;
    out.members.insert(
        id.to_string(),
        pods.iter().map(|(k, _)| (*k).clone()).collect(),
    );
    out.jobs.push(job);
}

/// Why the members of one gang cannot be one job: they must agree on team, tier, what
/// each asks for and where it may run, or the gang would be sized and charged as its
/// first member.
fn disagreement(pods: &[&PodSeen]) -> Option<String> {
    let first = pods.first()?;
    let template = first.asks.as_deref()?;
    for p in pods.iter().skip(1) {
        let Some(job) = p.asks.as_deref() else {
            continue;
        };
        let what = if job.team != template.team {
            "team"
        } else if job.tier != template.tier {
            "tier"
        } else if job.shape.member != template.shape.member {
            "resources (GPUs, CPU, memory, GPU memory)"
        } else if job.shape.pools != template.shape.pools {
            "pool"
        } else {
            continue;
        };
        return Some(format!(
            "the members of this gang differ in {what}: {} and {} (every member of a gang must ask for the same); make them agree and the gang is queued",
            first.name, p.name
        ));
    }
    None
}

fn pending(out: &mut QueueView, id: &str, pods: Vec<Member<'_>>, size: u32) {
    let Some(template) = pods.first().and_then(|(_, p)| p.asks.as_deref()) else {
        return;
    };
    let seen: Vec<&PodSeen> = pods.iter().map(|(_, p)| *p).collect();
    if let Some(why) = disagreement(&seen) {
        out.unqueued.extend(
            seen.iter()
                .map(|p| Unqueued::of(p, "GangMismatch", why.clone())),
        );
        return;
    }
    let mut job = template.clone();
    job.id = id.to_string();
    job.shape.members = size.max(1);
    let present = pods.len() as u32;
    job.members_present = (present < job.shape.members).then_some(present);
    job.submitted_at = pods.iter().filter_map(|(_, p)| p.created_at).min();
    job.placement = Vec::new();
    job.started_at = None;
    out.members.insert(
        id.to_string(),
        pods.iter().map(|(k, _)| (*k).clone()).collect(),
    );
    out.jobs.push(job);
}
