//! A Kubernetes Pod as what the engine reads of it: the same fields the admission webhook
//! reads ([`serve::pod::Pod`]), copied from k8s-openapi's types so one mapping
//! (effective requests, GPUs and MIG instances, team and tier labels) serves the webhook,
//! the extender and the cluster view alike.

use engine::inventory::jobs_file::Job;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serve::pod as wire;
use std::collections::BTreeMap;

/// The node the controller chose for a gated member: the first phase of placing a job.
pub use serve::admission::ASSIGNED_ANNOTATION;
/// Set on a pod the controller evicted: the job it made room for and why.
pub use serve::admission::PREEMPTED_ANNOTATION;
/// The scheduling gate that holds a GPU pod in gantry's queue (added by the mutating
/// webhook with `serve --queue`).
pub use serve::admission::QUEUE_GATE;
/// Set on a preemptor's pods while its victims stop: the node held for each (see
/// `crate::nomination`).
pub use serve::trust::{
    NOMINATED_ANNOTATION, NOMINATION_SEAL_ANNOTATION, PREEMPTION_SEAL_ANNOTATION,
};
/// The pod condition saying why a pod waits.
pub const WAITING_CONDITION: &str = "gantry.dev/Queued";
/// Labels that name a pod's gang when it declares `gantry.dev/gang-size`, in order:
/// gantry's own, then the owners' that platform teams use, widest group first (a JobSet,
/// a Kubeflow training job, a batch/v1 Job). Pods without the size label take their gang
/// from their owning Job ([`crate::owners`]).
pub const GANG_LABELS: &[&str] = &[
    "gantry.dev/gang",
    crate::owners::JOBSET_LABEL,
    "training.kubeflow.org/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
];

/// A pod as the view keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSeen {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// What it holds on its node when bound and not finished (a one-member running job
    /// with a node-level placement).
    pub holds: Option<Box<Job>>,
    /// What it asks for while unbound (waiting in gantry's queue, or released and not
    /// bound yet): a one-member job whose `members` is the gang's declared size.
    pub asks: Option<Box<Job>>,
    /// Unbound, and its gantry labels do not read: why (cut short).
    pub asks_error: Option<String>,
    /// Bound, but what it holds cannot be read (kept so the problem shows).
    pub unreadable: Option<(String, String)>,
    /// The node it is bound to.
    pub node: Option<String>,
    pub gated: bool,
    /// Admitted by gantry's webhook (it carries the policy-revision label).
    pub managed: bool,
    /// Gates of other controllers: gantry never removes those.
    pub other_gates: Vec<String>,
    /// `namespace/gang` when the pod belongs to a gang of `gang_size` > 1.
    pub gang: Option<String>,
    pub gang_size: u32,
    /// It carries `gantry.dev/gang-size`: its own labels say its gang, not its owner.
    pub gang_declared: bool,
    /// The `batch/v1` Job that controls it.
    pub owner_job: Option<String>,
    /// A capacity placeholder of this pool (`gantry.dev/placeholder`, negative priority):
    /// it holds a node for the autoscaler and any real pod may take its room.
    pub placeholder: Option<String>,
    /// The node gantry assigned it to, as the pod says; trusted only with its seal
    /// (`crate::seal`), which `queue::view` checks.
    pub assigned: Option<String>,
    pub seal: Option<String>,
    /// The eviction mark: `<cause>: for <job>`, and its seal (see
    /// [`PodSeen::sealed_mark`]).
    pub preempted: Option<String>,
    pub preemption_seal: Option<String>,
    /// The node held for it while its victims stop, and the seal (`crate::nomination`).
    pub nominated: Option<(String, String)>,
    pub terminating: bool,
    /// The waiting condition as it is on the pod: (reason, message).
    pub waiting: Option<(String, String)>,
    /// When that condition was last written (its `lastTransitionTime`, which gantry sets
    /// at each write).
    pub told_at: Option<i64>,
    /// kube-scheduler's refusal (PodScheduled False, Unschedulable): its message.
    pub unschedulable: Option<String>,
    /// Required node-affinity terms the pod already has (kept when gantry adds its own).
    pub affinity_terms: Option<serde_json::Value>,
    pub created_at: Option<i64>,
    /// When kube-scheduler bound it (the PodScheduled condition), else its start time.
    pub bound_at: Option<i64>,
}

impl PodSeen {
    /// The node gantry assigned the pod to, when the assignment carries `key`'s seal: the
    /// only assignment any part of the queue believes.
    pub fn sealed_node(&self, key: Option<&crate::seal::Seal>) -> Option<&str> {
        let (node, seal, key) = (self.assigned.as_deref()?, self.seal.as_deref()?, key?);
        key.verify(&self.uid, node, seal).then_some(node)
    }

    /// The eviction mark, when gantry wrote it (its seal verifies under `key`): a mark a
    /// pod's author wrote would hand the pod's GPUs to a nominated job.
    pub fn sealed_mark(&self, key: Option<&crate::seal::Seal>) -> Option<&str> {
        let (mark, seal) = (self.preempted.as_deref()?, self.preemption_seal.as_deref()?);
        key?.verify_mark("preempted", &self.uid, mark, seal)
            .then_some(mark)
    }

    /// The job this pod was evicted for, from its sealed mark.
    pub fn preempted_for(&self, key: Option<&crate::seal::Seal>) -> Option<&str> {
        self.sealed_mark(key)?
            .rsplit_once(": for ")
            .map(|(_, job)| job.trim())
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Bound and holding GPUs or MIG instances.
    pub fn holds_gpus(&self) -> bool {
        self.holds
            .as_deref()
            .is_some_and(|j| j.shape.member.num_gpu > 0 || j.shape.member.mig_profile.is_some())
    }
}

fn quantities(m: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<String, serde_json::Value> {
    m.map(|m| {
        m.iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.0.clone())))
            .collect()
    })
    .unwrap_or_default()
}

fn container(c: &core::Container) -> wire::Container {
    let r = c.resources.as_ref();
    wire::Container {
        name: Some(c.name.clone()),
        restart_policy: c.restart_policy.clone(),
        resources: wire::Resources {
            limits: quantities(r.and_then(|r| r.limits.as_ref())),
            requests: quantities(r.and_then(|r| r.requests.as_ref())),
        },
    }
}

/// The fields of `pod` the engine reads.
pub fn wire_pod(pod: &core::Pod) -> wire::Pod {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    wire::Pod {
        metadata: wire::Metadata {
            name: m.name.clone(),
            generate_name: m.generate_name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            creation_timestamp: m.creation_timestamp.as_ref().map(|t| t.0.to_string()),
            deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
        },
        spec: wire::PodSpec {
            containers: spec
                .map(|s| s.containers.iter().map(container).collect())
                .unwrap_or_default(),
            init_containers: spec
                .and_then(|s| s.init_containers.as_ref())
                .map(|c| c.iter().map(container).collect())
                .unwrap_or_default(),
            overhead: spec
                .and_then(|s| s.overhead.as_ref())
                .map(|o| quantities(Some(o))),
            node_selector: spec.and_then(|s| s.node_selector.clone()),
            tolerations: None,
            priority_class_name: spec.and_then(|s| s.priority_class_name.clone()),
            priority: spec.and_then(|s| s.priority).map(i64::from),
            node_name: spec.and_then(|s| s.node_name.clone()),
            scheduling_gates: None,
            // Read for the pools it pins the pod to, as the webhook reads them.
            affinity: spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| serde_json::to_value(a).ok()),
            active_deadline_seconds: spec.and_then(|s| s.active_deadline_seconds),
        },
        status: wire::PodStatus {
            phase: status.and_then(|s| s.phase.clone()),
            start_time: status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.to_string()),
        },
    }
}

/// The pod as the view keeps it.
pub fn pod(k: &core::Pod) -> PodSeen {
    let p = wire_pod(k);
    let spec = k.spec.as_ref();
    let gates: Vec<String> = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|g| g.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default();
    let gated = gates.iter().any(|g| g == QUEUE_GATE);
    let labels = k.metadata.labels.as_ref();
    let annotations = k.metadata.annotations.as_ref();
    let attribute = |key: &str| {
        labels
            .and_then(|l| l.get(key))
            .or_else(|| annotations.and_then(|a| a.get(key)))
            .cloned()
    };
    let namespace = k.metadata.namespace.clone().unwrap_or_default();
    let gang_declared = attribute("gantry.dev/gang-size").is_some();
    let gang_size: u32 = attribute("gantry.dev/gang-size")
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1);
    let gang = (gang_size > 1)
        .then(|| GANG_LABELS.iter().find_map(|l| attribute(l)))
        .flatten()
        .map(|g| format!("{namespace}/{g}"));
    let (holds, unreadable) = match wire::bound_job(&p) {
        Ok(job) => (job.map(Box::new), None),
        Err(e) => (
            None,
            Some((p.spec.node_name.clone().unwrap_or_default(), e)),
        ),
    };
    let created_at = p
        .metadata
        .creation_timestamp
        .as_deref()
        .and_then(wire::unix_seconds);
    // Unbound pods: what a gated one asks for, and what a released one (not bound yet)
    // will hold where it was assigned.
    let (asks, asks_error) = if p.spec.node_name.is_none() {
        match wire::job(&p, None, created_at.unwrap_or(0)) {
            Ok(job) => (job.map(Box::new), None),
            // A label's value may be long: what is said of it is cut short.
            Err(e) => (None, Some(crate::bounded::cut(&e))),
        }
    } else {
        (None, None)
    };
    let status = k.status.as_ref();
    let condition = |t: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == t))
    };
    let bound_at = condition("PodScheduled")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second())
        .or_else(|| {
            status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.as_second())
        });
    let mut holds = holds;
    if let (Some(job), Some(at)) = (holds.as_mut(), bound_at) {
        job.started_at = Some(at);
    }
    PodSeen {
        name: k.metadata.name.clone().unwrap_or_default(),
        uid: k.metadata.uid.clone().unwrap_or_default(),
        resource_version: k.metadata.resource_version.clone().unwrap_or_default(),
        holds,
        asks,
        asks_error,
        unreadable,
        node: p.spec.node_name.clone(),
        gated,
        managed: labels.is_some_and(|l| l.contains_key(crate::queue::REVISION_LABEL)),
        other_gates: gates.into_iter().filter(|g| g != QUEUE_GATE).collect(),
        gang,
        gang_size,
        gang_declared,
        placeholder: labels
            .and_then(|l| l.get(crate::capacity::PLACEHOLDER_LABEL))
            .filter(|_| spec.and_then(|s| s.priority).is_some_and(|p| p < 0))
            .cloned(),
        owner_job: k
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "Job" && o.api_version == "batch/v1")
            .map(|o| o.name.clone()),
        assigned: annotations
            .and_then(|a| a.get(ASSIGNED_ANNOTATION))
            .cloned(),
        seal: annotations
            .and_then(|a| a.get(crate::seal::SEAL_ANNOTATION))
            .cloned(),
        preempted: annotations
            .and_then(|a| a.get(PREEMPTED_ANNOTATION))
            .cloned(),
        preemption_seal: annotations
            .and_then(|a| a.get(PREEMPTION_SEAL_ANNOTATION))
            .cloned(),
        nominated: annotations.and_then(|a| {
            Some((
                a.get(NOMINATED_ANNOTATION)?.clone(),
                a.get(NOMINATION_SEAL_ANNOTATION)?.clone(),
            ))
        }),
        terminating: k.metadata.deletion_timestamp.is_some(),
        waiting: condition(WAITING_CONDITION).map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        }),
        told_at: condition(WAITING_CONDITION)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_second()),
        unschedulable: condition("PodScheduled")
            .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
            .map(|c| c.message.clone().unwrap_or_default()),
        affinity_terms: spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .and_then(|r| serde_json::to_value(&r.node_selector_terms).ok()),
        created_at,
        bound_at,
        namespace,
    }
}

/// `namespace/name`, the pod's key in the view.
pub fn key(k: &core::Pod) -> String {
    format!(
        "{}/{}",
        k.metadata.namespace.as_deref().unwrap_or(""),
        k.metadata.name.as_deref().unwrap_or("")
    )
}
