//! A plan as API actions: pure, from the queue view, the pods and the plan.
//!
//! Placing a job is a two-phase commit over its pods, so a gang is never half released:
//! 1. **assign**: every member gets the node chosen for it as an annotation
//!    ([`ASSIGNED_ANNOTATION`]), still gated;
//! 2. **release**: once all are assigned, each member gets a required node affinity for its
//!    node (`matchFields metadata.name`, which a gated pod may gain since 1.27) and loses
//!    gantry's scheduling gate, in one patch; kube-scheduler binds it there.
//!
//! A crash between the phases is resolved from what the pods say: all assigned and one
//! released — complete the release; some assigned and none released — clear the
//! assignments and decide again (`queue` reverts them). Preempting evicts every pod of the
//! victim job (Eviction API, the tier's grace) after marking it with the job it makes
//! room for and why; the preemptor stays gated until the victims are gone and a later
//! cycle places it without them — and so does any job the plan puts on a node where pods
//! are still stopping, since their GPUs are not free yet. A waiting pod's condition (and an
//! Event) changes only when its reason changes in kind (`crate::telling`); a released pod
//! that was told it waits is told it was placed (the condition turns `False`).

use crate::nomination;
use crate::pods::{PodSeen, ASSIGNED_ANNOTATION, WAITING_CONDITION};
use crate::queue::QueueView;
use crate::telling::{needs_telling, sticky_band};
use engine::decide::plan::{wall_time, Action as PlanAction, Decision, EtaKind, Plan, Reason};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The pod an action is for; the uid makes every patch conditional on the same pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    fn of(p: &PodSeen) -> PodRef {
        PodRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Phase 1: the member's node, as an annotation, and its seal (`crate::seal`).
    Assign {
        pod: PodRef,
        job: String,
        node: String,
        #[serde(skip)]
        seal: Option<String>,
    },
    /// Clears an assignment that did not finish.
    Unassign { pod: PodRef },
    /// Phase 2: `patch` (a JSON merge patch) requires the node and removes the gate;
    /// then, if the pod was `told` it waits, its condition turns `False` (`Placed`).
    Release {
        pod: PodRef,
        job: String,
        node: String,
        patch: Value,
        #[serde(skip)]
        told: bool,
    },
    /// Marks the pod (unless it is `marked` already: a retry), with the mark's seal when
    /// the key is held, then evicts it.
    Evict {
        pod: PodRef,
        job: String,
        for_job: String,
        cause: String,
        grace_s: u64,
        marked: bool,
        #[serde(skip)]
        mark_seal: Option<String>,
    },
    /// Holds `node` for a preemptor's member while its victims stop (`crate::nomination`),
    /// and says so in its waiting condition (`reason`, `message`): one `pods/status`
    /// write, which may change a pod's annotations too. Written before any victim is
    /// evicted.
    Nominate {
        pod: PodRef,
        job: String,
        node: String,
        text: String,
        #[serde(skip)]
        seal: Option<String>,
        reason: String,
        message: String,
    },
    /// Withdraws a nomination: a higher-priority job preempts the nominated one before it
    /// was released.
    Unnominate { pod: PodRef },
    /// A bound pod whose condition still says it waits (its release's condition write
    /// was lost, or it was `NotBound` and then bound): the condition turns `False`.
    Placed { pod: PodRef, node: String },
    /// The waiting condition, and an Event with the same words when the reason's code
    /// changes (a new message under the same code changes only the condition).
    Wait {
        pod: PodRef,
        reason: String,
        message: String,
        event: bool,
    },
}

impl Action {
    /// The job whose writes this one is part of, in order: an assignment's, release's or
    /// nomination's own, an eviction's preemptor (its nomination is written first).
    pub fn job(&self) -> Option<&str> {
        match self {
            Action::Assign { job, .. }
            | Action::Release { job, .. }
            | Action::Nominate { job, .. } => Some(job),
            Action::Evict { for_job, .. } => Some(for_job),
            Action::Unassign { .. }
            | Action::Unnominate { .. }
            | Action::Placed { .. }
            | Action::Wait { .. } => None,
        }
    }

    /// Whether the rest of the job's writes are skipped when this one is refused: not
    /// after an eviction (a PodDisruptionBudget refusing one victim must not spare the
    /// others; refused ones are retried next cycle).
    pub fn refusal_stops_job(&self) -> bool {
        !matches!(self, Action::Evict { .. })
    }

    pub fn pod(&self) -> &PodRef {
        match self {
            Action::Assign { pod, .. }
            | Action::Unassign { pod }
            | Action::Release { pod, .. }
            | Action::Evict { pod, .. }
            | Action::Nominate { pod, .. }
            | Action::Unnominate { pod }
            | Action::Placed { pod, .. }
            | Action::Wait { pod, .. } => pod,
        }
    }
}

/// The merge patch that releases a gated pod onto `node`: its other gates kept, and a
/// `metadata.name In [node]` requirement added to each required node-affinity term it
/// has (or one term of its own), which is all a gated pod's affinity may gain.
pub fn release_patch(p: &PodSeen, node: &str) -> Value {
    let ours = json!({"key": "metadata.name", "operator": "In", "values": [node]});
    let terms: Vec<Value> = match p.affinity_terms.as_ref().and_then(Value::as_array) {
        Some(terms) if !terms.is_empty() => terms
            .iter()
            .map(|t| {
                let mut t = t.clone();
                if let Some(m) = t.as_object_mut() {
                    let mut fields = m
                        .get("matchFields")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if !fields.contains(&ours) {
                        fields.push(ours.clone());
                    }
                    m.insert("matchFields".into(), Value::Array(fields));
                }
                t
            })
            .collect(),
        _ => vec![json!({"matchFields": [ours]})],
    };
    let gates: Value = if p.other_gates.is_empty() {
        Value::Null
    } else {
        Value::Array(p.other_gates.iter().map(|g| json!({"name": g})).collect())
    };
    // The release ends a nomination (`crate::nomination`).
    let metadata = if p.nominated.is_some() {
        json!({"uid": p.uid, "annotations": {
            crate::pods::NOMINATED_ANNOTATION: null,
            crate::pods::NOMINATION_SEAL_ANNOTATION: null,
        }})
    } else {
        json!({"uid": p.uid})
    };
    json!({
        "metadata": metadata,
        "spec": {
            "schedulingGates": gates,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}
        }
    })
}

/// `NoCapacity` for `no_capacity`.
fn camel(code: &impl Serialize) -> String {
    let snake = serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The waiting condition's reason and message, for a pod `told` a message before (and
/// when). The expected start is absolute and to the minute, and the place in the queue a
/// band that holds for a while and near its edges (`crate::telling`), so neither changes
/// every cycle.
pub fn waiting(reason: &Reason, now: i64, told: Option<&PodSeen>) -> (String, String) {
    let code = if reason.gang_timeout_exceeded {
        "GangTimeout".to_string()
    } else {
        camel(&reason.code)
    };
    let mut message = reason.message.clone();
    if let Some(p) = reason.position {
        let (was, at) = told.map_or((None, None), |t| {
            (t.waiting.as_ref().map(|(_, m)| m.as_str()), t.told_at)
        });
        message.push_str(&format!(
            "; queue position {}",
            sticky_band(was, at, now, p)
        ));
    }
    if let Some(eta) = reason.eta_s {
        let when = wall_time(now.saturating_add(eta.max(0)));
        if reason.eta_kind == Some(EtaKind::Reservation) {
            message.push_str(&format!("; reserved to start by {when}"));
        } else {
            message.push_str(&format!("; expected to start by {when}"));
        }
    }
    if let Some(u) = &reason.unblock {
        message.push_str(&format!("; {u}"));
    }
    (code, message)
}

/// Whether the pod's condition says it waits (and so must say it was placed).
fn told_waiting(p: &PodSeen) -> bool {
    p.waiting.as_ref().is_some_and(|(r, _)| r != PLACED)
}

/// The condition's reason once a pod is released.
pub const PLACED: &str = "Placed";

/// What to do so the cluster carries out `plan`.
pub fn actions(
    view: &QueueView,
    pods: &BTreeMap<String, PodSeen>,
    plan: &Plan,
    now: i64,
) -> Vec<Action> {
    let mut out = Vec::new();
    let pod = |key: &String| pods.get(key);
    // Assignments that did not finish are cleared, unless this cycle places the job
    // again: then the new assignment (the same annotation, or a new node) stands in.
    let placed_again: std::collections::BTreeSet<&String> = plan
        .decisions
        .iter()
        .filter(|d| d.action == PlanAction::Place && d.victims.is_empty())
        .flat_map(|d| view.members.get(&d.job).into_iter().flatten())
        .collect();
    for key in view.reverts.iter().filter(|k| !placed_again.contains(k)) {
        if let Some(p) = pod(key) {
            out.push(Action::Unassign { pod: PodRef::of(p) });
        }
    }
    // Finish what an earlier cycle began: every member is assigned, release the rest.
    for job in &view.committing {
        for p in view.members.get(job).into_iter().flatten().filter_map(pod) {
            if let (true, Some(node)) = (p.gated, &p.assigned) {
                out.push(Action::Release {
                    pod: PodRef::of(p),
                    job: job.clone(),
                    node: node.clone(),
                    patch: release_patch(p, node),
                    told: told_waiting(p),
                });
            }
        }
    }
    // Nodes where pods are stopping — already terminating, or evicted by this plan: their
    // GPUs are not free until the pods are gone, so nothing is released onto them yet.
    let mut stopping: std::collections::BTreeSet<&str> = pods
        .values()
        .filter(|p| p.terminating)
        .filter_map(|p| p.node.as_deref())
        .collect();
    // Gated pods the view does not queue (gang members that disagree, a team not bound
    // to the namespace, labels that do not read): each is told why.
    for u in &view.unqueued {
        let Some(p) = pods.get(&u.pod).filter(|p| !p.terminating) else {
            continue;
        };
        let reason = u.reason.to_string();
        if needs_telling(p.waiting.as_ref(), &reason, &u.message) {
            out.push(wait(p, reason, u.message.clone()));
        }
    }
    // Each preemptor's longest victim grace, read once (each preemptor looked through
    // every preemption of the plan: quadratic with thousands of them).
    let mut graces: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for e in &plan.preemptions {
        let grace = graces.entry(e.for_job.as_str()).or_insert(0);
        *grace = (*grace).max(e.grace_s);
    }
    for e in &plan.preemptions {
        for p in view
            .members
            .get(&e.job)
            .into_iter()
            .flatten()
            .filter_map(pod)
        {
            stopping.extend(p.node.as_deref().or(p.assigned.as_deref()));
        }
    }
    for d in &plan.decisions {
        let members: Vec<&PodSeen> = view
            .members
            .get(&d.job)
            .into_iter()
            .flatten()
            .filter_map(pod)
            .collect();
        let waits_for_stopping = d.action == PlanAction::Place
            && d.placement
                .iter()
                .any(|a| stopping.contains(a.node.as_str()));
        if d.action == PlanAction::Place && d.victims.is_empty() && !waits_for_stopping {
            let nodes: Vec<&str> = d.placement.iter().map(|a| a.node.as_str()).collect();
            place(&mut out, view, &d.job, &members, &nodes);
            continue;
        }
        if d.action == PlanAction::Place && !d.victims.is_empty() {
            let grace = graces.get(d.job.as_str()).copied().unwrap_or(0);
            preempting(&mut out, view, pods, (d, grace), &members, now);
            continue;
        }
        // A write the band alone would not make carries the current band: a band held
        // (`telling::sticky_band`) only saves a write, never goes out stale. Worded only
        // for a write (most waiting pods need none).
        let mut current = None;
        let (reason, message) = if d.action == PlanAction::Place {
            // Placed without victims: the plan may count GPUs that pods stopping there
            // still hold.
            let nodes: Vec<&str> = d
                .placement
                .iter()
                .map(|a| a.node.as_str())
                .filter(|n| stopping.contains(n))
                .collect();
            (
                WAITING_FOR_STOP.to_string(),
                format!(
                    "placed once the pods stopping on {} are gone",
                    nodes.join(", ")
                ),
            )
        } else {
            let Some(r) = &d.reason else { continue };
            current = Some(r);
            waiting(r, now, members.first().copied())
        };
        let mut words: Option<String> = None;
        for p in members {
            if needs_telling(p.waiting.as_ref(), &reason, &message) {
                let words = words.get_or_insert_with(|| {
                    current.map_or_else(|| message.clone(), |r| waiting(r, now, None).1)
                });
                out.push(wait(p, reason.clone(), words.clone()));
            }
        }
    }
    // Preemptors whose victims were evicted in an earlier cycle: released where they were
    // nominated once the victims are gone; until then told so, and refused evictions
    // tried again.
    let withdrawn: std::collections::BTreeSet<&str> =
        plan.preemptions.iter().map(|e| e.job.as_str()).collect();
    for (id, n) in view
        .nominated
        .iter()
        .filter(|(id, _)| !withdrawn.contains(id.as_str()))
    {
        let members: Vec<&PodSeen> = view
            .members
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(pod)
            .collect();
        let nodes: Vec<&str> = n.nodes.iter().map(String::as_str).collect();
        let blocked: Vec<&str> = nodes
            .iter()
            .copied()
            .filter(|node| stopping.contains(node))
            .collect();
        if n.victims.is_empty() && blocked.is_empty() {
            place(&mut out, view, id, &members, &nodes);
            continue;
        }
        let refused: Vec<String> = n
            .victims
            .iter()
            .filter(|v| !v.stopping)
            .map(|v| v.pod.clone())
            .collect();
        let mut going: Vec<&str> = n.victims.iter().map(|v| v.pod.as_str()).collect();
        let on = if going.is_empty() { &blocked } else { &nodes };
        let mut message = preempting_message(on, &mut going, Some(n.until));
        message.push_str(&refusals(view, &refused));
        let reason = PREEMPTING.to_string();
        for p in &members {
            if needs_telling(p.waiting.as_ref(), &reason, &message) {
                out.push(wait(p, reason.clone(), message.clone()));
            }
        }
        for v in n.victims.iter().filter(|v| !v.stopping) {
            if let Some(p) = pods.get(&v.pod) {
                out.push(Action::Evict {
                    pod: PodRef::of(p),
                    job: v.job.clone(),
                    for_job: id.clone(),
                    cause: v.cause.clone(),
                    grace_s: v.grace_s,
                    marked: true,
                    mark_seal: None,
                });
            }
        }
    }
    // Released onto a node kube-scheduler will not bind it to (a taint it does not
    // tolerate, a node selector, a full node): say so on the pod, once.
    for p in pods.values() {
        if let (false, None, Some(node), Some(why)) = (
            p.gated,
            &p.node,
            p.sealed_node(view.seal.as_ref()),
            &p.unschedulable,
        ) {
            let reason = "NotBound".to_string();
            let message = format!(
                "released to {node}, but kube-scheduler does not bind it there: {why}; delete the pod to queue it again"
            );
            if needs_telling(p.waiting.as_ref(), &reason, &message) && !p.terminating {
                out.push(wait(p, reason, message));
            }
        }
    }
    for p in pods.values() {
        if let (false, false, Some(node), true) = (p.gated, p.terminating, &p.node, told_waiting(p))
        {
            out.push(Action::Placed {
                pod: PodRef::of(p),
                node: node.clone(),
            });
        }
    }
    for e in &plan.preemptions {
        let nominated = view.nominated.contains_key(&e.job);
        for p in view
            .members
            .get(&e.job)
            .into_iter()
            .flatten()
            .filter_map(pod)
            .filter(|p| !p.terminating)
        {
            if nominated {
                // Not released yet: what it held was a nomination, which is withdrawn.
                out.push(Action::Unnominate { pod: PodRef::of(p) });
                continue;
            }
            out.push(Action::Evict {
                pod: PodRef::of(p),
                job: e.job.clone(),
                for_job: e.for_job.clone(),
                cause: e.cause.clone(),
                grace_s: e.grace_s,
                marked: p.preempted_for(view.seal.as_ref()) == Some(e.for_job.as_str()),
                mark_seal: view.seal.as_ref().map(|k| {
                    k.sign_mark("preempted", &p.uid, &eviction_mark(&e.cause, &e.for_job))
                }),
            });
        }
    }
    out
}

/// The writes that place `job`'s `members` on `nodes`, one node per member: assign each
/// (unless gantry's sealed assignment says so already), then release the gated ones. A
/// job of one gated pod needs no two phases: one patch assigns and releases it.
fn place(out: &mut Vec<Action>, view: &QueueView, job: &str, members: &[&PodSeen], nodes: &[&str]) {
    if nodes.len() != members.len() {
        return;
    }
    if let ([p], [node]) = (members, nodes) {
        if p.gated {
            let mut patch = release_patch(p, node);
            if p.sealed_node(view.seal.as_ref()) != Some(*node) {
                let seal = view.seal.as_ref().map(|k| k.sign(&p.uid, node));
                if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                    let notes = meta.entry("annotations").or_insert_with(|| json!({}));
                    if let Some(notes) = notes.as_object_mut() {
                        notes.insert(ASSIGNED_ANNOTATION.into(), json!(node));
                        notes.insert(crate::seal::SEAL_ANNOTATION.into(), json!(seal));
                    }
                }
            }
            out.push(Action::Release {
                pod: PodRef::of(p),
                job: job.to_string(),
                node: (*node).to_string(),
                patch,
                told: told_waiting(p),
            });
            return;
        }
    }
    for (p, node) in members.iter().zip(nodes) {
        // An assignment is kept only when gantry sealed it: a node the pod's author
        // wrote is written again, with the seal.
        let kept = p.sealed_node(view.seal.as_ref()) == Some(*node);
        if !kept {
            out.push(Action::Assign {
                pod: PodRef::of(p),
                job: job.to_string(),
                node: (*node).to_string(),
                seal: view.seal.as_ref().map(|k| k.sign(&p.uid, node)),
            });
        }
    }
    for (p, node) in members.iter().zip(nodes) {
        if p.gated {
            out.push(Action::Release {
                pod: PodRef::of(p),
                job: job.to_string(),
                node: (*node).to_string(),
                patch: release_patch(p, node),
                told: told_waiting(p),
            });
        }
    }
}

/// What a preemptor's reason says of victims whose eviction the API server refused: its
/// words where the last try was seen (a PodDisruptionBudget's name), else a guess.
fn refusals(view: &QueueView, pods: &[String]) -> String {
    if pods.is_empty() {
        return String::new();
    }
    let said: Vec<String> = pods
        .iter()
        .filter_map(|p| Some(format!("{p}: {}", view.refused_evictions.get(p)?)))
        .collect();
    if said.is_empty() {
        format!(
            "; the API server refused to evict {} (a PodDisruptionBudget allows no disruption now?); retried every cycle",
            pods.join(", ")
        )
    } else {
        format!(
            "; the API server refused to evict {}; retried every cycle",
            said.join("; ")
        )
    }
}

/// The reason of a preemptor whose victims are stopping.
pub const PREEMPTING: &str = "Preempting";
/// The reason of a job placed where pods are still stopping.
pub const WAITING_FOR_STOP: &str = "WaitingForStop";

/// A preemptor placed by this plan: its members' nodes are held for it, each with the
/// condition that says what it waits for, in one write per member before any victim is
/// evicted (without the key a nomination would not be believed: only the condition).
/// `grace` is the longest of its victims' graces.
fn preempting(
    out: &mut Vec<Action>,
    view: &QueueView,
    pods: &BTreeMap<String, PodSeen>,
    (d, grace): (&Decision, u64),
    members: &[&PodSeen],
    now: i64,
) {
    let nodes: Vec<&str> = d.placement.iter().map(|a| a.node.as_str()).collect();
    // A nomination it takes over was held for victims still stopping: hold as long.
    let taken_over = d
        .victims
        .iter()
        .filter_map(|v| view.nominated.get(v))
        .map(|n| n.until)
        .max()
        .unwrap_or(i64::MIN);
    let until = now
        .saturating_add(i64::try_from(grace).unwrap_or(i64::MAX / 4))
        .saturating_add(nomination::SLACK_S)
        .max(taken_over);
    let key = view.seal.as_ref().filter(|_| nodes.len() == members.len());
    // Victims marked by an earlier cycle and still not going: their eviction was refused
    // (a PodDisruptionBudget, most often).
    let victim_pods = |jobs: &[&str]| -> Vec<&PodSeen> {
        jobs.iter()
            .flat_map(|v| view.members.get(*v).into_iter().flatten())
            .filter_map(|k| pods.get(k))
            .collect()
    };
    // A nominated victim runs nowhere: its nomination is withdrawn, nothing stops.
    let (withdrawn, running): (Vec<&str>, Vec<&str>) = d
        .victims
        .iter()
        .map(String::as_str)
        .partition(|v| view.nominated.contains_key(*v));
    let refused: Vec<String> =
        victim_pods(&d.victims.iter().map(String::as_str).collect::<Vec<_>>())
            .into_iter()
            .filter(|p| p.sealed_mark(view.seal.as_ref()).is_some() && !p.terminating)
            .map(PodSeen::key)
            .collect();
    let going: Vec<String> = victim_pods(&running)
        .into_iter()
        .map(PodSeen::key)
        .collect();
    let mut going: Vec<&str> = going.iter().map(String::as_str).collect();
    let mut message = preempting_message(&nodes, &mut going, key.map(|_| until));
    if !withdrawn.is_empty() {
        message.push_str(&format!(
            "; takes the room held for {} (nomination withdrawn)",
            withdrawn.join(", ")
        ));
    }
    message.push_str(&refusals(view, &refused));
    let reason = PREEMPTING.to_string();
    let Some(key) = key else {
        for p in members {
            if needs_telling(p.waiting.as_ref(), &reason, &message) {
                out.push(wait(p, reason.clone(), message.clone()));
            }
        }
        return;
    };
    for (p, node) in members.iter().zip(&nodes) {
        let text = nomination::text(node, until);
        out.push(Action::Nominate {
            pod: PodRef::of(p),
            job: d.job.clone(),
            node: (*node).to_string(),
            seal: Some(nomination::sign(key, &p.uid, &text)),
            text,
            reason: reason.clone(),
            message: message.clone(),
        });
    }
}

/// What a preemptor waits for: the victims' pods `going` to stop on `nodes` (or, none
/// left, the pods stopping there), and until when its nodes are held for it.
fn preempting_message(nodes: &[&str], going: &mut Vec<&str>, held_until: Option<i64>) -> String {
    going.sort_unstable();
    going.dedup();
    let on = distinct(nodes).join(", ");
    let mut message = if going.is_empty() {
        format!("placed on {on} once the pods stopping there are gone")
    } else {
        format!(
            "placed on {on} once {} stop{} (evicted to make room)",
            going.join(", "),
            if going.len() == 1 { "s" } else { "" },
        )
    };
    if let Some(until) = held_until {
        message.push_str(&format!("; held until {}", wall_time(until)));
    }
    message
}

/// Whether a pod told `reason` and `message` gets an Event too: when the reason's code is
/// new to it. A pod already given its node (`Preempting`, `WaitingForStop`) is told in
/// its condition alone — its victims' `Preempted` Events record the preemption — until
/// an eviction it waits for is refused.
fn tells_event(told: Option<&(String, String)>, reason: &str, message: &str) -> bool {
    let refused = |m: &str| m.contains("refused to evict");
    if reason == PREEMPTING || reason == WAITING_FOR_STOP {
        return refused(message) && told.is_none_or(|(_, m)| !refused(m));
    }
    told.is_none_or(|(was, _)| was != reason)
}

/// Tells `p` it waits: the condition, and an Event when [`tells_event`] says so.
fn wait(p: &PodSeen, reason: String, message: String) -> Action {
    let event = tells_event(p.waiting.as_ref(), &reason, &message);
    Action::Wait {
        pod: PodRef::of(p),
        reason,
        message,
        event,
    }
}

/// Each name once, in the order first seen.
fn distinct<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let mut seen = std::collections::BTreeSet::new();
    names.iter().copied().filter(|n| seen.insert(*n)).collect()
}

/// The condition patch (strategic merge on `pods/status`: conditions merge by type):
/// `True` while the pod waits, `False` once it is placed.
pub fn condition_patch(waits: bool, reason: &str, message: &str, now: i64) -> Value {
    let at = chrono::DateTime::from_timestamp(now, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    json!({"status": {"conditions": [{
        "type": WAITING_CONDITION, "status": if waits { "True" } else { "False" },
        "reason": reason, "message": message, "lastTransitionTime": at
    }]}})
}

/// The `pods/status` patch of a nomination: its annotations (pods are of the kinds whose
/// status endpoint takes metadata changes) and the condition saying what it waits for.
pub fn nominating_patch(
    uid: &str,
    (text, seal): (&str, Option<&str>),
    (reason, message): (&str, &str),
    now: i64,
) -> Value {
    let mut patch = nomination_patch(uid, Some((text, seal)));
    if let (Some(m), Value::Object(c)) = (
        patch.as_object_mut(),
        condition_patch(true, reason, message, now),
    ) {
        m.extend(c);
    }
    patch
}

/// The nomination patch: a node held until a time, with its seal (or `None`: its end).
pub fn nomination_patch(uid: &str, held: Option<(&str, Option<&str>)>) -> Value {
    let (text, seal) = held.map_or((None, None), |(t, s)| (Some(t), s));
    json!({"metadata": {"uid": uid, "annotations": {
        crate::pods::NOMINATED_ANNOTATION: text,
        crate::pods::NOMINATION_SEAL_ANNOTATION: seal,
    }}})
}

/// The eviction mark gantry writes on a victim's pods: why, and for which job.
pub fn eviction_mark(cause: &str, for_job: &str) -> String {
    format!("{cause}: for {for_job}")
}

/// The annotation patch of phase 1, the node and its seal (or their undoing with `None`).
pub fn assign_patch(uid: &str, node: Option<&str>, seal: Option<&str>) -> Value {
    json!({"metadata": {"uid": uid, "annotations": {
        ASSIGNED_ANNOTATION: node,
        crate::seal::SEAL_ANNOTATION: seal,
    }}})
}
