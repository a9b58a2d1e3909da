//! Who may do what through admission. Identity comes from the request (`userInfo` and
//! the namespace), never from the object: every label, annotation and gate on a pod is a
//! claim that is checked here.
//!
//! - **Gantry's keys are gantry's**: the queue gate, the assignment and its seal, the
//!   preemption mark and the revision label are set, changed or removed by gantry's own identity only
//!   ([`Trust::controllers`]); anyone else is denied, naming the key.
//! - **No way around the queue**: a GPU pod bound to a node at CREATE (`spec.nodeName`)
//!   is denied unless its creator may bind directly ([`Trust::direct_binders`]: the
//!   kubelet's mirror pods by default); with the queue, a GPU pod that reaches validation
//!   without the gate (the mutating webhook did not run) is denied too.
//! - **Teams are bound**: the policy's `namespaces`, `users` and `groups` say who may
//!   submit as a team (`lang::tenancy`); pods made by a workload controller (a Job's pods
//!   are created by the Job controller's service account) are judged by namespace alone.
//! - **Placed pods keep their team and tier**: neither label changes once the pod has
//!   left the queue (or, without the queue, once it exists).

use super::pod::{Pod, UserInfo, POOL_LABEL};
use lang::ir::{Program, Team};
use lang::tenancy::{glob, Submitter};
use serde_json::Value;

/// The identities the admission checks trust, from `gantry serve`'s flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// Gantry's own identity (the controller's service account): the only one that may
    /// write gantry's keys. User patterns.
    pub controllers: Vec<String>,
    /// Users or groups that may create a GPU pod already bound to a node.
    pub direct_binders: Vec<String>,
    /// Users or groups that create pods for others (the Job, JobSet and ReplicaSet
    /// controllers): their pods' teams are bound by namespace alone.
    pub workload_controllers: Vec<String>,
}

/// The service account the chart and `examples/kubernetes` run gantry as.
pub const DEFAULT_CONTROLLER: &str = "system:serviceaccount:gantry-system:gantry";
/// The kubelet creates mirror pods of static pods bound to its node.
pub const DEFAULT_DIRECT_BINDER: &str = "system:nodes";
/// Kubernetes' own controllers run as service accounts in kube-system.
pub const DEFAULT_WORKLOAD_CONTROLLER: &str = "system:serviceaccount:kube-system:*";

impl Default for Trust {
    fn default() -> Trust {
        Trust {
            controllers: vec![DEFAULT_CONTROLLER.into()],
            direct_binders: vec![DEFAULT_DIRECT_BINDER.into()],
            workload_controllers: vec![DEFAULT_WORKLOAD_CONTROLLER.into()],
        }
    }
}

/// Whether the user or one of the groups matches one of `patterns`.
fn matches(patterns: &[String], who: &UserInfo) -> bool {
    patterns
        .iter()
        .any(|p| glob(p, &who.username) || who.groups.iter().any(|g| glob(p, g)))
}

impl Trust {
    pub fn is_controller(&self, who: &UserInfo) -> bool {
        self.controllers.iter().any(|p| glob(p, &who.username))
    }

    pub fn may_bind_directly(&self, who: &UserInfo) -> bool {
        self.is_controller(who) || matches(&self.direct_binders, who)
    }

    pub fn is_workload_controller(&self, who: &UserInfo) -> bool {
        matches(&self.workload_controllers, who)
    }

    /// Who names the controllers, for denial messages.
    pub fn controllers_named(&self) -> String {
        self.controllers.join(", ")
    }
}

/// Gantry's own keys on pods.
pub const REVISION_LABEL: &str = "gantry.dev/policy-revision";
pub const ASSIGNED_ANNOTATION: &str = "gantry.dev/assigned-node";
pub const PREEMPTED_ANNOTATION: &str = "gantry.dev/preempted";
/// The seal beside an assignment (the cluster crate's `seal.rs`).
pub const SEAL_ANNOTATION: &str = "gantry.dev/assignment-seal";
/// Set on a preemptor's pods while its victims stop: the node held for the member and
/// until when (`<node> until <RFC 3339>`), and its seal.
pub const NOMINATED_ANNOTATION: &str = "gantry.dev/nominated-node";
pub const NOMINATION_SEAL_ANNOTATION: &str = "gantry.dev/nomination-seal";
/// The seal beside an eviction mark ([`PREEMPTED_ANNOTATION`]).
pub const PREEMPTION_SEAL_ANNOTATION: &str = "gantry.dev/preemption-seal";
pub const QUEUE_GATE: &str = "gantry.dev/queue";

fn meta<'a>(pod: &'a Value, map: &str, key: &str) -> Option<&'a Value> {
    pod.get("metadata")?.get(map)?.get(key)
}

fn gated(pod: &Value) -> bool {
    pod.pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|gates| {
            gates
                .iter()
                .any(|g| g.get("name").and_then(Value::as_str) == Some(QUEUE_GATE))
        })
}

/// Whether the pod carries gantry's queue gate.
pub fn is_gated(pod: &Value) -> bool {
    gated(pod)
}

/// Gantry's keys that `new` sets, changes or removes against `old` (`None` at CREATE).
/// At CREATE the revision label and the gate are the mutating webhook's own (the
/// validating webhook sees the pod after it), so only the controller's keys count.
pub fn own_keys_changed(old: Option<&Value>, new: &Value) -> Vec<String> {
    let mut changed = Vec::new();
    for key in [
        ASSIGNED_ANNOTATION,
        SEAL_ANNOTATION,
        PREEMPTED_ANNOTATION,
        PREEMPTION_SEAL_ANNOTATION,
        NOMINATED_ANNOTATION,
        NOMINATION_SEAL_ANNOTATION,
    ] {
        let before = old.and_then(|o| meta(o, "annotations", key));
        if before != meta(new, "annotations", key) {
            changed.push(format!("annotation `{key}`"));
        }
    }
    if let Some(old) = old {
        if meta(old, "labels", REVISION_LABEL) != meta(new, "labels", REVISION_LABEL) {
            changed.push(format!("label `{REVISION_LABEL}`"));
        }
        if gated(old) && !gated(new) {
            changed.push(format!("scheduling gate `{QUEUE_GATE}`"));
        }
    }
    changed
}

/// The team and tier an UPDATE changes (as labels or, which the pod mapping also reads,
/// annotations), if any.
pub fn team_or_tier_changed(old: &Value, new: &Value) -> Vec<&'static str> {
    ["gantry.dev/team", "gantry.dev/tier"]
        .into_iter()
        .filter(|key| {
            ["labels", "annotations"]
                .iter()
                .any(|map| meta(old, map, key) != meta(new, map, key))
        })
        .collect()
}

/// The pools a pod is pinned to: its `gantry.dev/pool` node selector, else the pools its
/// required node affinity allows when every term names some (terms are ORed, so a term
/// without a pool lets the pod anywhere). Empty: any pool.
pub fn pools(pod: &Pod) -> Vec<String> {
    if let Some(p) = pod
        .spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get(POOL_LABEL))
    {
        return vec![p.clone()];
    }
    let terms = pod
        .spec
        .affinity
        .as_ref()
        .and_then(|a| {
            a.pointer(
                "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
            )
        })
        .and_then(Value::as_array);
    let Some(terms) = terms.filter(|t| !t.is_empty()) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for term in terms {
        let named: Vec<String> = term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| {
                e.get("key").and_then(Value::as_str) == Some(POOL_LABEL)
                    && e.get("operator").and_then(Value::as_str) == Some("In")
            })
            .filter_map(|e| e.get("values").and_then(Value::as_array))
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        if named.is_empty() {
            return Vec::new();
        }
        out.extend(named);
    }
    out.sort();
    out.dedup();
    out
}

/// What the team binding makes of a pod's team label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeamChoice {
    /// The label (or its absence) stands.
    Keep,
    /// The pod names no team and its namespace and identity admit exactly one bound
    /// team: the mutating webhook sets it.
    Set(String),
}

fn names(teams: &[&Team]) -> String {
    teams
        .iter()
        .map(|t| format!("`{}`", t.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks a pod's team label against the policy's bindings for the request's namespace
/// and identity; `Err` is the denial's message. `derive`: the mutating webhook, which
/// may set the one team a pod's namespace admits; without it a missing label means the
/// default team (as the queue reads it).
pub fn team_for(
    program: &Program,
    trust: &Trust,
    labelled: Option<&str>,
    namespace: &str,
    who: &UserInfo,
    derive: bool,
) -> Result<TeamChoice, String> {
    if !program.teams.iter().any(Team::is_bound) {
        return Ok(TeamChoice::Keep);
    }
    let for_others = trust.is_workload_controller(who);
    let submitter = Submitter {
        namespace,
        user: &who.username,
        groups: &who.groups,
    };
    let admits = |t: &Team| {
        if for_others {
            t.admits_namespace(namespace)
        } else {
            t.admits(&submitter)
        }
    };
    let allowed: Vec<&Team> = program.teams.iter().filter(|t| admits(t)).collect();
    let whom = if for_others {
        format!("namespace `{namespace}`")
    } else {
        format!("namespace `{namespace}` and user `{}`", who.username)
    };
    let may = || {
        if allowed.is_empty() {
            format!("no team admits {whom}; the policy's teams say who may submit as them (`namespaces`, `users`, `groups`)")
        } else {
            format!("{whom} may submit as {}", names(&allowed))
        }
    };
    match labelled {
        // An unknown team is the job check's to refuse, with the policy's team names.
        Some(name) if program.team(name).is_none() => Ok(TeamChoice::Keep),
        Some(name) if allowed.iter().any(|t| t.name == name) => Ok(TeamChoice::Keep),
        Some(name) => Err(format!(
            "team `{name}` is not open to {whom}: {}; set gantry.dev/team to one of them",
            may()
        )),
        None => {
            let default = program.teams.iter().find(|t| t.default);
            // The default team is the fallback, not a candidate: a namespace bound to one
            // other team is that team's even when the default admits every namespace.
            let bound: Vec<&Team> = allowed
                .iter()
                .copied()
                .filter(|t| t.is_bound() && !t.default)
                .collect();
            if derive {
                match bound.as_slice() {
                    [] => {}
                    [only] => return Ok(TeamChoice::Set(only.name.clone())),
                    several => {
                        return Err(format!(
                            "the pod names no team and {whom} may submit as {}; set gantry.dev/team to one of them",
                            names(several)
                        ))
                    }
                }
            }
            match default {
                Some(d) if allowed.iter().any(|t| t.name == d.name) => Ok(TeamChoice::Keep),
                Some(d) => Err(format!(
                    "the pod names no team and the default team `{}` is not open to {whom}: {}; set gantry.dev/team",
                    d.name,
                    may()
                )),
                None if allowed.is_empty() => Err(may()),
                None => Err(format!(
                    "the pod names no team and its namespace does not decide one: {}; set gantry.dev/team",
                    may()
                )),
            }
        }
    }
}

/// Why a pod's priority does not match its tier, if it does not: the class the mutating
/// webhook assigns is `gantry-<tier>` (its value the tier's priority), and no pod runs
/// above its tier's priority.
pub fn priority_mismatch(pod: &Pod, tier: &str, tier_priority: i64) -> Option<String> {
    let class = format!("gantry-{}", tier.replace('_', "-"));
    if let Some(p) = pod.spec.priority.filter(|p| *p > tier_priority) {
        return Some(format!(
            "priority {p} is above tier `{tier}`'s {tier_priority}; leave `priority` and `priorityClassName` to gantry (it assigns `{class}`)"
        ));
    }
    match pod.spec.priority_class_name.as_deref() {
        Some(c) if c != class && pod.spec.priority.is_none() => Some(format!(
            "priorityClassName `{c}` is not tier `{tier}`'s `{class}`; leave it to gantry"
        )),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::*;
    use serde_json::json;

    fn who(user: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn identities_match_users_and_groups() {
        let t = Trust::default();
        assert!(t.is_controller(&who(DEFAULT_CONTROLLER, &[])));
        assert!(!t.is_controller(&who(
            "alice",
            &["system:serviceaccount:gantry-system:gantry"]
        )));
        assert!(t.may_bind_directly(&who("system:node:n1", &["system:nodes"])));
        assert!(!t.may_bind_directly(&who("alice", &["system:authenticated"])));
        assert!(t.is_workload_controller(&who(
            "system:serviceaccount:kube-system:job-controller",
            &[]
        )));
    }

    #[test]
    fn own_keys_are_found_wherever_they_change() {
        let pod = json!({"metadata": {"labels": {REVISION_LABEL: "r1"}, "annotations": {}},
                         "spec": {"schedulingGates": [{"name": QUEUE_GATE}]}});
        assert!(
            own_keys_changed(None, &pod).is_empty(),
            "the webhook's own at CREATE"
        );
        let mut assigned = pod.clone();
        assigned["metadata"]["annotations"][ASSIGNED_ANNOTATION] = json!("n1");
        assert_eq!(
            own_keys_changed(None, &assigned),
            vec![format!("annotation `{ASSIGNED_ANNOTATION}`")]
        );
        let mut stripped = pod.clone();
        stripped["metadata"]["labels"] = json!({});
        stripped["spec"]["schedulingGates"] = json!([]);
        assert_eq!(own_keys_changed(Some(&pod), &stripped).len(), 2);
        assert!(own_keys_changed(Some(&pod), &pod).is_empty());
        // A tenant nominating its own pod to a node.
        let mut nominated = pod.clone();
        nominated["metadata"]["annotations"][NOMINATED_ANNOTATION] =
            json!("n1 until 2026-11-28T10:00:00Z");
        assert_eq!(
            own_keys_changed(Some(&pod), &nominated),
            vec![format!("annotation `{NOMINATED_ANNOTATION}`")]
        );
    }

    #[test]
    fn pools_come_from_the_selector_or_every_affinity_term() {
        let pod = |spec: Value| -> Pod {
            serde_json::from_value(json!({"spec": spec})).unwrap_or_default()
        };
        let term = |values: &[&str]| json!({"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": values}]});
        let affinity = |terms: Vec<Value>| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}});
        assert_eq!(
            pools(&pod(json!({"nodeSelector": {POOL_LABEL: "dgx"}}))),
            vec!["dgx"]
        );
        assert_eq!(pools(&pod(affinity(vec![term(&["dgx"])]))), vec!["dgx"]);
        assert_eq!(
            pools(&pod(affinity(vec![term(&["spot", "dgx"]), term(&["dgx"])]))),
            vec!["dgx", "spot"]
        );
        let open =
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]});
        assert!(pools(&pod(affinity(vec![term(&["dgx"]), open]))).is_empty());
        assert!(pools(&pod(json!({}))).is_empty());
    }
}
