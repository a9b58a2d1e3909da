//! Kubernetes wire types the webhook reads and writes (AdmissionReview v1, the parts of a
//! Pod it maps), and the mapping from a Pod to a Gantry job. Written by hand rather than
//! taken from kube-core/k8s-openapi: the webhook reads a dozen fields, and the response's
//! `patch` must be standard base64 as the API defines `[]byte`, which those types encode
//! differently.

use engine::core::alloc::Request;
use engine::core::declared::{duration_s, Runtime};
use engine::core::fleet::MILLI;
use engine::core::gang::JobShape;
use engine::inventory::jobs_file::{Job, PlacedMember};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    pub api_version: String,
    pub kind: String,
    pub request: Option<AdmissionRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub operation: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub object: Option<serde_json::Value>,
    /// The pod before an UPDATE.
    pub old_object: Option<serde_json::Value>,
    #[serde(default)]
    pub dry_run: bool,
    /// Who asks (the API server's authenticated identity).
    #[serde(default)]
    pub user_info: UserInfo,
}

/// The identity behind an admission request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReviewResponse {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub response: Response,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// The JSON Patch, standard base64 with padding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Status {
    pub code: u16,
    pub message: String,
}

impl ReviewResponse {
    pub fn new(response: Response) -> ReviewResponse {
        ReviewResponse {
            api_version: API_VERSION,
            kind: "AdmissionReview",
            response,
        }
    }
}

/// The Pod fields the webhook reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    #[serde(default)]
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: PodSpec,
    #[serde(default)]
    pub status: PodStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: Option<String>,
    /// RFC 3339, set when the kubelet accepted the pod.
    pub start_time: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: Option<String>,
    pub generate_name: Option<String>,
    pub namespace: Option<String>,
    /// The API server's; what the queue's assignment seals bind to.
    pub uid: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    /// RFC 3339.
    pub creation_timestamp: Option<String>,
    /// Set once the pod is being deleted.
    pub deletion_timestamp: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    #[serde(default)]
    pub init_containers: Vec<Container>,
    /// The RuntimeClass's per-pod overhead, added to what the containers ask.
    pub overhead: Option<BTreeMap<String, serde_json::Value>>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<serde_json::Value>>,
    pub priority_class_name: Option<String>,
    pub priority: Option<i64>,
    /// The node the pod is bound to.
    pub node_name: Option<String>,
    pub scheduling_gates: Option<Vec<serde_json::Value>>,
    /// Read for the pools required node affinity pins the pod to.
    pub affinity: Option<serde_json::Value>,
    /// The kubelet ends the pod this long after it starts: its runtime limit.
    pub active_deadline_seconds: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: Option<String>,
    /// `Always` on an init container makes it a sidecar.
    pub restart_policy: Option<String>,
    #[serde(default)]
    pub resources: Resources,
}

#[derive(Debug, Default, Deserialize)]
pub struct Resources {
    #[serde(default)]
    pub limits: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub requests: BTreeMap<String, serde_json::Value>,
}

pub const GPU: &str = "nvidia.com/gpu";
pub const MIG_PREFIX: &str = "nvidia.com/mig-";
/// The node label (and toleration key) that names a node's pool.
pub const POOL_LABEL: &str = "gantry.dev/pool";

impl Pod {
    /// A label, or else an annotation, named `gantry.dev/<key>`.
    fn attribute(&self, key: &str) -> Option<&str> {
        let name = format!("gantry.dev/{key}");
        fn from<'p>(m: &'p Option<BTreeMap<String, String>>, name: &str) -> Option<&'p str> {
            m.as_ref().and_then(|m| m.get(name)).map(String::as_str)
        }
        from(&self.metadata.labels, &name).or_else(|| from(&self.metadata.annotations, &name))
    }

    /// The runtime it declares: its `gantry.dev/runtime` estimate, bounded by its
    /// `activeDeadlineSeconds` (`core::declared`).
    pub fn runtime(&self) -> Result<Runtime, String> {
        let estimate = match self.attribute("runtime") {
            None => None,
            Some(v) => Some(duration_s(v).ok_or_else(|| {
                format!("`gantry.dev/runtime: {v}` is not a duration; write e.g. 2h or 90m")
            })?),
        };
        let deadline = self
            .spec
            .active_deadline_seconds
            .and_then(|s| u64::try_from(s).ok());
        Ok(Runtime::declared(estimate, deadline))
    }

    /// `namespace/name` (or the generate-name prefix for pods not named yet).
    pub fn id(&self, namespace: Option<&str>) -> String {
        let name = self
            .metadata
            .name
            .clone()
            .or_else(|| self.metadata.generate_name.clone())
            .unwrap_or_else(|| "pod".into());
        match self.metadata.namespace.as_deref().or(namespace) {
            Some(ns) => format!("{ns}/{name}"),
            None => name,
        }
    }
}

/// Whole GPUs or MIG instances (count, profile) the pod asks for; `(0, None)` for none.
fn gpus_asked(a: &super::resources::Asks) -> Result<(u32, Option<String>), String> {
    match &a.mig {
        Some((profile, n)) if a.gpus == 0 => Ok(((*n).max(1), Some(profile.clone()))),
        Some(_) => Err("a pod asks for whole GPUs and MIG instances; ask for one kind".into()),
        None => Ok((a.gpus, None)),
    }
}

/// An RFC 3339 time in Unix seconds.
pub fn unix_seconds(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .ok()
        .map(|t| t.timestamp())
}

/// Whether the pod is bound to a node and has not finished: it holds what it asked for.
pub fn holds_resources(pod: &Pod) -> Option<&str> {
    let node = pod.spec.node_name.as_deref().filter(|n| !n.is_empty())?;
    match pod.status.phase.as_deref() {
        Some("Succeeded" | "Failed") => None,
        _ => Some(node),
    }
}

/// A pod bound to a node and not finished, as a running one-member job: its GPUs (or MIG
/// instances) counted on the node by number — the API does not say which device the
/// device plugin gave it — and its CPU and memory, GPU or not. `None` for a pod that
/// holds nothing (not bound, or finished).
pub fn bound_job(pod: &Pod) -> Result<Option<Job>, String> {
    let Some(node) = holds_resources(pod) else {
        return Ok(None);
    };
    let a = super::resources::asks(pod)?;
    let (gpus, mig) = gpus_asked(&a)?;
    let started_at = pod
        .status
        .start_time
        .as_deref()
        .or(pod.metadata.creation_timestamp.as_deref())
        .and_then(unix_seconds);
    let runtime = pod.runtime().unwrap_or_default();
    Ok(Some(Job {
        id: pod.id(None),
        namespace: pod.metadata.namespace.clone(),
        team: pod.attribute("team").map(str::to_string),
        tier: pod.attribute("tier").map(str::to_string),
        shape: JobShape {
            members: 1,
            member: Request {
                cpu_milli: a.cpu_milli,
                memory_mib: a.memory_mib,
                num_gpu: gpus,
                gpu_milli: MILLI,
                models: Vec::new(),
                vram_mib: 0,
                mig_profile: mig,
            },
            ..JobShape::default()
        },
        submitted_at: pod
            .metadata
            .creation_timestamp
            .as_deref()
            .and_then(unix_seconds),
        checkpoint_interval_s: pod.attribute("checkpoint-interval").and_then(duration_s),
        // A running pod's estimate that does not read is no estimate (it was admitted).
        runtime_s: runtime.estimate_s,
        runtime_limit_s: runtime.limit_s,
        estimate_only: runtime.estimate_only,
        interactive: pod.attribute("interactive") == Some("true"),
        placement: vec![PlacedMember {
            node: node.to_string(),
            gpus: Vec::new(),
            gpu_milli: None,
            mig_starts: Vec::new(),
        }],
        started_at,
        ..Job::default()
    }))
}

/// The job a GPU pod stands for; `None` for a pod without GPUs or MIG instances.
pub fn job(pod: &Pod, namespace: Option<&str>, now: i64) -> Result<Option<Job>, String> {
    let a = super::resources::asks(pod)?;
    let (gpus, mig) = gpus_asked(&a)?;
    if gpus == 0 {
        return Ok(None);
    }
    let vram_mib = match pod.attribute("vram") {
        None => 0,
        Some(v) => {
            let v = v.trim().trim_end_matches('B');
            super::quantity::parse(v, 0)
                .map(|bytes| bytes.div_ceil(1024 * 1024))
                .map_err(|e| format!("`gantry.dev/vram: {v}` {e}; write e.g. 40Gi"))?
        }
    };
    let checkpoint = match pod.attribute("checkpoint-interval") {
        None => None,
        Some(v) => Some(duration_s(v).ok_or_else(|| {
            format!("`gantry.dev/checkpoint-interval: {v}` is not a duration; write e.g. 15m")
        })?),
    };
    let runtime = pod.runtime()?;
    let members = match pod.attribute("gang-size") {
        None => 1,
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .ok_or_else(|| format!("`gantry.dev/gang-size: {v}` is not a member count"))?,
    };
    let pools = super::trust::pools(pod);
    Ok(Some(Job {
        id: pod.id(namespace),
        name: pod.attribute("gang").map(str::to_string),
        namespace: pod
            .metadata
            .namespace
            .clone()
            .or(namespace.map(str::to_string)),
        team: pod.attribute("team").map(str::to_string),
        tier: pod.attribute("tier").map(str::to_string),
        shape: JobShape {
            members,
            member: Request {
                cpu_milli: a.cpu_milli,
                memory_mib: a.memory_mib,
                num_gpu: gpus,
                gpu_milli: MILLI,
                models: Vec::new(),
                vram_mib,
                mig_profile: mig,
            },
            pools,
            ..JobShape::default()
        },
        submitted_at: Some(now),
        checkpoint_interval_s: checkpoint,
        runtime_s: runtime.estimate_s,
        runtime_limit_s: runtime.limit_s,
        estimate_only: runtime.estimate_only,
        interactive: pod.attribute("interactive") == Some("true"),
        ..Job::default()
    }))
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a failed lookup should fail the test"
)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_s("15m"), Some(900));
        assert_eq!(duration_s("90"), Some(90));
        assert_eq!(duration_s("1w"), None);
    }

    fn gpu_pod(annotations: serde_json::Value, spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([{"name": "main",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
            "spec": spec}))
        .unwrap_or_default()
    }

    #[test]
    fn a_pods_runtime_is_its_estimate_bounded_by_its_deadline() {
        let runtime = |a, s| {
            job(&gpu_pod(a, s), None, 0)
                .ok()
                .flatten()
                .map(|j| (j.runtime_s, j.runtime_limit_s))
        };
        let none = serde_json::json!({});
        assert_eq!(runtime(none.clone(), none.clone()), Some((None, None)));
        let est = serde_json::json!({"gantry.dev/runtime": "1h30m"});
        assert_eq!(runtime(est.clone(), none.clone()), Some((Some(5400), None)));
        let deadline = serde_json::json!({"activeDeadlineSeconds": 7200});
        assert_eq!(runtime(none, deadline.clone()), Some((Some(7200), None)));
        assert_eq!(
            runtime(est, deadline.clone()),
            Some((Some(5400), Some(7200)))
        );
        let long = serde_json::json!({"gantry.dev/runtime": "3h"});
        assert_eq!(runtime(long, deadline), Some((Some(7200), None)));
        // A runtime that does not read is a clear refusal, not a silent default.
        let bad = gpu_pod(
            serde_json::json!({"gantry.dev/runtime": "soon"}),
            serde_json::json!({}),
        );
        let err = job(&bad, None, 0).unwrap_err();
        assert!(err.contains("gantry.dev/runtime: soon"), "{err}");
    }
}
