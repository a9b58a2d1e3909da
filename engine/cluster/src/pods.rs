//! A Kubernetes Pod as what the engine reads of it: the same fields the admission webhook
//! reads ([`engine::serve::pod::Pod`]), copied from k8s-openapi's types so one mapping
//! (effective requests, GPUs and MIG instances, team and tier labels) serves the webhook,
//! the extender and the cluster view alike.

use engine::inventory::jobs_file::Job;
use engine::serve::pod as wire;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// A pod as the view keeps it: what it holds on its node, if anything.
#[derive(Debug, Clone, PartialEq)]
pub enum PodSeen {
    /// Bound and not finished: a one-member running job with a node-level placement.
    Holds(Box<Job>),
    /// Not bound yet (pending) or finished: holds nothing.
    Idle,
    /// Bound, but its requests cannot be read (the API server would not have admitted
    /// it; kept so the problem shows).
    Unreadable { node: String, error: String },
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
    match wire::bound_job(&p) {
        Ok(Some(job)) => PodSeen::Holds(Box::new(job)),
        Ok(None) => PodSeen::Idle,
        Err(error) => PodSeen::Unreadable {
            node: p.spec.node_name.unwrap_or_default(),
            error,
        },
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
