//! Kubernetes wire types the webhook reads and writes (AdmissionReview v1, the parts of a
//! Pod it maps), and the mapping from a Pod to a Gantry job. Written by hand rather than
//! taken from kube-core/k8s-openapi: the webhook reads a dozen fields, and the response's
//! `patch` must be standard base64 as the API defines `[]byte`, which those types encode
//! differently.

use crate::core::alloc::Request;
use crate::core::fleet::MILLI;
use crate::core::gang::JobShape;
use crate::inventory::jobs_file::Job;
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
    #[serde(default)]
    pub dry_run: bool,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: Option<String>,
    pub generate_name: Option<String>,
    pub namespace: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    /// Set once the pod is being deleted.
    pub deletion_timestamp: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<serde_json::Value>>,
    pub priority_class_name: Option<String>,
    pub priority: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Container {
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

fn text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A Kubernetes quantity in base units times `scale` (`500m` CPU → 500 with scale 1000).
pub fn quantity(raw: &str, scale: f64) -> Option<f64> {
    let raw = raw.trim();
    let split = raw
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(raw.len());
    let (number, suffix) = raw.split_at(split);
    let n: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    };
    let v = n * factor * scale;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// A duration like `15m`, `900s`, `1h` or plain seconds.
fn duration_s(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let (n, unit) = raw.split_at(
        raw.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(raw.len()),
    );
    let n: u64 = n.trim().parse().ok()?;
    let factor = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// What the pod asks for, in the units of a job.
#[derive(Debug, Default, PartialEq)]
pub struct Asks {
    pub gpus: u32,
    pub mig: Option<(String, u32)>,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

/// Sums the containers' GPU, MIG, CPU and memory asks (limits for extended resources,
/// requests — else limits — for CPU and memory). Errors name the container and resource.
pub fn asks(pod: &Pod) -> Result<Asks, String> {
    let mut a = Asks::default();
    for (i, c) in pod.spec.containers.iter().enumerate() {
        let r = &c.resources;
        let read = |key: &str,
                    scale: f64,
                    map: &BTreeMap<String, serde_json::Value>|
         -> Result<Option<f64>, String> {
            match map.get(key) {
                None => Ok(None),
                Some(v) => text(v)
                    .and_then(|t| quantity(&t, scale))
                    .map(Some)
                    .ok_or_else(|| {
                        format!("containers[{i}].resources: `{key}: {v}` is not a quantity")
                    }),
            }
        };
        let gpu = read(GPU, 1.0, &r.limits)?.or(read(GPU, 1.0, &r.requests)?);
        if let Some(g) = gpu {
            if g.fract() != 0.0 || g > 64.0 {
                return Err(format!(
                    "containers[{i}]: `{GPU}: {g}` must be a whole number up to 64"
                ));
            }
            a.gpus += g as u32;
        }
        // MIG instances are extended resources like GPUs: the limit (else the request), a
        // whole number, summed over the containers.
        let profiles: std::collections::BTreeSet<&String> = r
            .limits
            .keys()
            .chain(r.requests.keys())
            .filter(|k| k.starts_with(MIG_PREFIX))
            .collect();
        for key in profiles {
            let profile = key.trim_start_matches(MIG_PREFIX);
            let n = read(key, 1.0, &r.limits)?
                .or(read(key, 1.0, &r.requests)?)
                .unwrap_or(0.0);
            if n.fract() != 0.0 || n > 64.0 {
                return Err(format!(
                    "containers[{i}]: `{key}: {n}` must be a whole number up to 64"
                ));
            }
            let n = n as u32;
            if n == 0 {
                continue;
            }
            match &mut a.mig {
                Some((p, count)) if p == profile => *count += n,
                Some((p, _)) => {
                    return Err(format!(
                        "containers ask for two MIG profiles, {p} and {profile}; one pod uses one"
                    ));
                }
                None => a.mig = Some((profile.to_string(), n)),
            }
        }
        let cpu = read("cpu", 1000.0, &r.requests)?.or(read("cpu", 1000.0, &r.limits)?);
        a.cpu_milli = add(a.cpu_milli, cpu, "cpu")?;
        let mem = read("memory", 1.0 / (1024.0 * 1024.0), &r.requests)?.or(read(
            "memory",
            1.0 / (1024.0 * 1024.0),
            &r.limits,
        )?);
        a.memory_mib = add(a.memory_mib, mem, "memory")?;
    }
    Ok(a)
}

/// A running sum of one resource over the containers; past what a node could hold it is
/// an error, not a wrapped-around number.
fn add(sum: u64, more: Option<f64>, what: &str) -> Result<u64, String> {
    const LIMIT: f64 = 1e15;
    let more = more.unwrap_or(0.0).ceil();
    let total = sum as f64 + more;
    if !(0.0..LIMIT).contains(&total) {
        return Err(format!(
            "the containers ask for more {what} in all than any node has"
        ));
    }
    Ok(total as u64)
}

/// The job a GPU pod stands for; `None` for a pod without GPUs or MIG instances.
pub fn job(pod: &Pod, namespace: Option<&str>, now: i64) -> Result<Option<Job>, String> {
    let a = asks(pod)?;
    let (gpus, mig) = match &a.mig {
        Some((profile, n)) if a.gpus == 0 => ((*n).max(1), Some(profile.clone())),
        Some(_) => {
            return Err("a pod asks for whole GPUs and MIG instances; ask for one kind".into())
        }
        None if a.gpus == 0 => return Ok(None),
        None => (a.gpus, None),
    };
    let vram_mib = match pod.attribute("vram") {
        None => 0,
        Some(v) => {
            let v = v.trim().trim_end_matches('B');
            quantity(v, 1.0 / (1024.0 * 1024.0))
                .map(|m| m.ceil() as u64)
                .ok_or_else(|| format!("`gantry.dev/vram: {v}` is not a size; write e.g. 40Gi"))?
        }
    };
    let checkpoint = match pod.attribute("checkpoint-interval") {
        None => None,
        Some(v) => Some(duration_s(v).ok_or_else(|| {
            format!("`gantry.dev/checkpoint-interval: {v}` is not a duration; write e.g. 15m")
        })?),
    };
    let members = match pod.attribute("gang-size") {
        None => 1,
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .ok_or_else(|| format!("`gantry.dev/gang-size: {v}` is not a member count"))?,
    };
    let pools = pod
        .spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get(POOL_LABEL))
        .map(|p| vec![p.clone()])
        .unwrap_or_default();
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
        interactive: pod.attribute("interactive") == Some("true"),
        ..Job::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_durations() {
        assert_eq!(quantity("500m", 1000.0), Some(500.0));
        assert_eq!(quantity("2", 1000.0), Some(2000.0));
        assert_eq!(quantity("16Gi", 1.0 / 1048576.0), Some(16384.0));
        assert_eq!(quantity("1.5G", 1.0), Some(1.5e9));
        assert_eq!(quantity("lots", 1.0), None);
        assert_eq!(duration_s("15m"), Some(900));
        assert_eq!(duration_s("90"), Some(90));
        assert_eq!(duration_s("1w"), None);
    }

    fn pod(containers: &[serde_json::Value]) -> Pod {
        let spec = serde_json::json!({ "spec": { "containers": containers } });
        serde_json::from_value(spec).unwrap_or_default()
    }

    #[test]
    fn mig_instances_are_summed_over_containers_and_bad_counts_refused() {
        let one = serde_json::json!({"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}});
        let a = asks(&pod(&vec![one; 8])).unwrap_or_default();
        assert_eq!(a.mig, Some(("1g.10gb".to_string(), 8)));
        for bad in ["abc", "-5", "0.5"] {
            let c = serde_json::json!({"resources": {"limits": {"nvidia.com/mig-1g.10gb": bad}}});
            assert!(asks(&pod(&[c])).is_err(), "{bad}");
        }
        // Zero asks for nothing: not a MIG pod.
        let zero = serde_json::json!({"resources": {"limits": {"nvidia.com/mig-1g.10gb": "0"}}});
        assert_eq!(asks(&pod(&[zero])).map(|a| a.mig), Ok(None));
    }

    #[test]
    fn cpu_and_memory_sums_do_not_wrap_around() {
        let huge = serde_json::json!({"resources": {"requests": {"cpu": "9000000000000000k"}}});
        assert!(asks(&pod(&[huge.clone(), huge])).is_err());
    }
}
